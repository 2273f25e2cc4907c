//! Helpers shared by the integration tests.

// Each test crate that includes this module uses a subset of it.
#![allow(dead_code)]

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};

/// A small fast generator (xorshift64).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A synced temp file of `len` pseudo-random bytes, under the target
/// directory (on disk: the direct tests need O_DIRECT, which tmpfs lacks).
pub fn data_file(len: usize, seed: u64) -> (tempfile::TempPath, Vec<u8>) {
    let mut rng = Rng(seed | 1);
    let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let mut f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    f.write_all(&data).unwrap();
    f.as_file().sync_all().unwrap();
    (f.into_temp_path(), data)
}

/// Waits up to `ms` milliseconds (0: not at all) for `fd` to poll
/// readable; returns whether it does.
pub fn poll_readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// A listener on loopback whose queue of connections is full (a queue of
/// one, holding the connection kept beside it): a connect to it waits, its
/// SYN dropped, until the kernel sends it again a second later.
pub fn full_listener() -> (socket2::Socket, std::net::TcpStream) {
    use socket2::{Domain, Socket, Type};
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    l.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    l.listen(0).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    let queued = std::net::TcpStream::connect(addr).unwrap();
    (l, queued)
}

/// A pipe: the read end and the write end.
pub fn pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a live array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new and owned by nobody else.
    unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(fds[0])),
            std::fs::File::from(OwnedFd::from_raw_fd(fds[1])),
        )
    }
}

thread_local! {
    /// Panics on this thread whose message says that a tokio runtime has
    /// I/O disabled (tokio panics so when anything registers with the
    /// reactor of such a runtime). Per thread, as tests run in parallel;
    /// a current-thread runtime runs its tasks on the thread that blocks
    /// on it.
    static IO_DISABLED_PANICS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// This thread's count of [`IO_DISABLED_PANICS`], with the panic hook
/// that counts them installed.
pub fn count_io_disabled_panics() -> usize {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("");
            if msg.contains("IO is disabled") {
                IO_DISABLED_PANICS.set(IO_DISABLED_PANICS.get() + 1);
            }
            previous(info);
        }));
    });
    IO_DISABLED_PANICS.get()
}

/// `fut`, sending on the sender in `waiting` (and taking it out) the first
/// time a poll of it returns `Pending`: from then on it waits, registered
/// where its wake-up comes from. With `None` there, just `fut`. Tests wait
/// for that event instead of sleeping for it.
pub async fn noting_its_wait<F: std::future::Future>(
    fut: F,
    waiting: &mut Option<std::sync::mpsc::Sender<()>>,
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let polled = fut.as_mut().poll(cx);
        if polled.is_pending() {
            if let Some(w) = waiting.take() {
                let _ = w.send(());
            }
        }
        polled
    })
    .await
}

/// A bound that only a hang reaches: a blocking wait on a peer or a
/// thread that runs past it fails the test instead of holding the run.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// A std socket whose blocking reads and writes fail (`WouldBlock`) past
/// [`HANG`]: a test's peer that waits for bytes that never come fails,
/// naming the call, instead of blocking the test binary for good.
pub trait Bounded: Sized {
    /// The socket, bounded.
    fn bounded(self) -> Self;
}

impl Bounded for std::net::TcpStream {
    fn bounded(self) -> Self {
        self.set_read_timeout(Some(HANG)).unwrap();
        self.set_write_timeout(Some(HANG)).unwrap();
        self
    }
}

impl Bounded for std::os::unix::net::UnixStream {
    fn bounded(self) -> Self {
        self.set_read_timeout(Some(HANG)).unwrap();
        self.set_write_timeout(Some(HANG)).unwrap();
        self
    }
}

/// Returns once `cond()` holds, checking it every millisecond (the
/// polling period, not a guess at the event's time); panics naming `what`
/// after 30 s, far beyond any event's time on a loaded machine.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within 30 s: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The system call numbers of `poll` and `ppoll` on this machine.
#[cfg(target_arch = "x86_64")]
pub const POLL_CALLS: &[i64] = &[libc::SYS_poll, libc::SYS_ppoll];
/// The system call numbers of `poll` and `ppoll` on this machine.
#[cfg(not(target_arch = "x86_64"))]
pub const POLL_CALLS: &[i64] = &[libc::SYS_ppoll];

/// Whether a thread of this process is blocked in one of the system calls
/// `numbers` (as `/proc/self/task/*/syscall` says; a running thread shows
/// no number).
pub fn a_thread_blocked_in(numbers: &[i64]) -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .any(|t| {
            std::fs::read_to_string(t.path().join("syscall"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<i64>().ok())
                .is_some_and(|n| numbers.contains(&n))
        })
}

/// Connections waiting in the accept queue of the IPv4 TCP listener on
/// `port` (its `rx_queue` in `/proc/self/net/tcp`); panics if no listener
/// is there.
pub fn accept_queue(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
    let want = format!(":{port:04X}");
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // local address, remote, state (0A: LISTEN), tx_queue:rx_queue
        if f.len() > 4 && f[1].ends_with(&want) && f[3] == "0A" {
            let rx = f[4].split(':').nth(1).unwrap();
            return usize::from_str_radix(rx, 16).unwrap();
        }
    }
    panic!("no listener on port {port}");
}

/// How many submission-queue entries the kernel has taken from the ring
/// whose descriptor is `ring` (its `SqHead` in `/proc/self/fdinfo`): it
/// grows when someone submits, whichever thread does.
///
/// The kernel writes a ring's state into its fdinfo only when it can take
/// the ring's lock at once (`io_uring_show_fdinfo`'s `mutex_trylock`):
/// read while another thread submits or waits in `io_uring_enter`, the
/// fdinfo has no `SqHead`. It is read again, every millisecond, until it
/// has one; past [`HANG`] the test fails.
pub fn ring_sq_head(ring: std::os::fd::RawFd) -> u32 {
    let deadline = std::time::Instant::now() + HANG;
    loop {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{ring}")).unwrap();
        if let Some(head) = info.lines().find_map(|l| l.strip_prefix("SqHead:")) {
            return head.trim().parse().unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no SqHead in the fdinfo of descriptor {ring} within {HANG:?}: {info}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The calling thread's id, as `/proc/self/task` names it.
pub fn thread_id() -> i32 {
    // SAFETY: gettid(2) takes no argument and cannot fail.
    unsafe { libc::gettid() }
}

/// Whether thread `tid` of this process sleeps in a system call (its
/// `/proc/self/task/<tid>/syscall` gives a call number), or has ended.
pub fn sleeps_in_a_call_or_ended(tid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) {
        Ok(s) => s
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<i64>().ok())
            .is_some_and(|n| n >= 0),
        Err(_) => true,
    }
}

/// A current-thread tokio runtime, with I/O and time.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A multi-thread tokio runtime of one worker, with I/O and time.
pub fn one_worker() -> tokio::runtime::Runtime {
    workers(1)
}

/// A multi-thread tokio runtime of two workers, with I/O and time.
pub fn two_workers() -> tokio::runtime::Runtime {
    workers(2)
}

fn workers(n: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(n)
        .enable_all()
        .build()
        .unwrap()
}

/// The open descriptors, each with what it is (`/proc/self/fd`'s links),
/// but the one reading them, sorted.
pub fn named_fds() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let to = std::fs::read_link(e.path()).ok()?;
            // The listing's own descriptor.
            if to.ends_with("fd") && to.starts_with("/proc") {
                return None;
            }
            Some(format!("{} -> {}", e.file_name().to_str()?, to.display()))
        })
        .collect();
    fds.sort();
    fds
}

/// Sets the soft limit on descriptors to `n`.
pub fn set_fd_limit(n: u64) {
    // SAFETY: zeroed is a valid rlimit; getrlimit and setrlimit read and
    // write only the struct passed.
    unsafe {
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = n.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}
