//! The epoll fallback for socket operations.
//!
//! Where io_uring is blocked, file operations go to a pool of threads that
//! make blocking calls. A socket operation cannot: a read on an idle
//! connection may wait forever, and a pool thread per waiting connection
//! does not scale. So socket operations go here instead: the socket is
//! non-blocking (the `net` types make it so on this backend); the call is
//! tried at once on the submitting thread; if the kernel says `EAGAIN`
//! (or `EINPROGRESS`, for a connect) the request waits for readiness in an
//! epoll set (the `polling` crate) watched by one thread, which retries
//! the call when the socket is ready and completes the request. A receive
//! on a socket the watching thread's last receive emptied waits at once,
//! without the call that would only say `EAGAIN`.
//!
//! A request waiting here is cancelled by taking it out of the set: the
//! kernel holds nothing of it, so its memory is free at once.
//!
//! epoll takes a descriptor once, and a stream may have a read and a write
//! waiting at the same time. So the set watches each socket once, keyed by
//! its descriptor, for the union of what its waiting requests want
//! (readable for receives and accepts, writable for the rest), and an
//! event retries the requests it concerns. A waiting request holds its
//! socket open, so the descriptor names that socket for as long as the
//! socket has requests here. A socket whose owner holds a
//! [`Registration`] (every socket of `blockio::net` on the thread-pool
//! backend) stays in the set between waits, disarmed, so that its next
//! wait re-arms it with one `epoll_ctl` instead of adding and deleting
//! it each time; the registration deletes it when the socket closes,
//! before the descriptor number is released. Any other socket is deleted
//! when its last request leaves, before that request can let the socket
//! close. Each entry's key in the set carries a generation beside the
//! descriptor, so that an event drawn for a socket just closed never
//! reaches the socket that receives its number next. Waiting opens no
//! descriptor: a connection costs one whether idle or not.

use std::collections::HashMap;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use polling::{Event, Events, Poller};

use super::request::{call_user, Cancel, Complete, Request};
use crate::kind::{OpClass, OpKind};

/// One thread watching the sockets of waiting requests.
pub(crate) struct Readiness {
    watcher: Arc<Watcher>,
}

/// What the watching thread shares with the engine: the epoll set and
/// the requests waiting in it.
struct Watcher {
    poller: Poller,
    waiting: Mutex<Waiting>,
    stop: AtomicBool,
}

/// The requests waiting for readiness, by socket (the descriptor is the
/// set's key for it).
#[derive(Default)]
struct Waiting {
    sockets: HashMap<RawFd, Watched>,
    /// The socket each waiting request waits on, by its target's address
    /// ([`target_key`]), so that a cancel finds its request without a
    /// scan of every socket (a server with thousands of idle connections
    /// whose reads time out cancels thousands of requests a second).
    /// Entries leave with their requests; one left behind would only send
    /// a cancel to a socket whose requests it then does not name.
    fds: HashMap<usize, RawFd>,
    /// The generation the next entry of [`Waiting::sockets`] gets.
    next_gen: u32,
}

impl Waiting {
    /// The entry of `fd`, made (not yet in the set) if it has none.
    fn entry(&mut self, fd: RawFd) -> &mut Watched {
        let gen = self.next_gen;
        let s = self.sockets.entry(fd).or_insert_with(|| Watched {
            gen,
            ..Watched::default()
        });
        if s.gen == gen {
            self.next_gen = gen.wrapping_add(1);
        }
        s
    }
}

/// The key of a request's target in [`Waiting::fds`]: its address, which
/// names one operation while the request or a [`Cancel`] of it lives.
fn target_key(done: &Arc<dyn Complete>) -> usize {
    Arc::as_ptr(done).cast::<()>() as usize
}

/// One socket in the set.
#[derive(Default)]
struct Watched {
    reqs: Vec<Request>,
    /// The watching thread is retrying some of its requests, unlocked:
    /// the socket stays in the set until it has put them back.
    retrying: bool,
    /// The socket is in the epoll set (added, not deleted since).
    in_set: bool,
    /// Its owner holds a [`Registration`], which deletes it from the set
    /// before the socket closes: it stays in the set between waits.
    kept: bool,
    /// This entry's generation, in the set's key beside the descriptor.
    gen: u32,
    /// The last receive the watching thread made on it got less than it
    /// asked for: the socket is likely empty, so the next receive waits
    /// without being tried first (a request-reply connection's next
    /// request has not arrived when its reply is sent). Waiting loses
    /// nothing: arming the socket reports it at once if it is readable.
    drained: bool,
}

/// The set's key for the entry `s` of `fd`: the descriptor in the low
/// half, the entry's generation in the high one.
fn key(fd: RawFd, s: &Watched) -> usize {
    (u64::from(s.gen) << 32 | u64::from(fd as u32)) as usize
}

/// The descriptor a key of the set names (its low half).
fn key_fd(key: usize) -> RawFd {
    key as u32 as RawFd
}

/// What a waiting request waits for its socket to become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaits {
    Readable,
    Writable,
}

/// What a request of `kind` waits for, as its kind's class says; `None`
/// for the classes that never wait in the set (file data and metadata: a
/// file is always ready, so their first result stands).
fn awaits(kind: OpKind) -> Option<Awaits> {
    match kind.class() {
        OpClass::SocketIn => Some(Awaits::Readable),
        OpClass::SocketOut => Some(Awaits::Writable),
        OpClass::FileData | OpClass::Metadata => None,
    }
}

/// What the set watches the entry `s` of `fd` for: the union of what
/// its requests want.
fn interest(fd: RawFd, s: &Watched) -> Event {
    let wants = |a: Awaits| s.reqs.iter().any(|r| awaits(r.op.kind()) == Some(a));
    Event::new(key(fd, s), wants(Awaits::Readable), wants(Awaits::Writable))
}

/// A waiting request's socket, borrowed.
///
/// # Safety
/// A request that holds `fd` open (one of those waiting on it) must live
/// as long as the borrow.
unsafe fn socket<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: the caller's promise.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// The result of a connect whose socket became writable: its `SO_ERROR`.
fn connect_result(req: &Request) -> i32 {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads one int into a live local.
    let rc = unsafe {
        libc::getsockopt(
            req.op.fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        -err
    } else {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

/// Whether the kind is a connect, which is not retried once in progress:
/// its outcome is the socket's `SO_ERROR` when it becomes writable. Every
/// other kind is retried with its own system call.
fn is_connect(kind: OpKind) -> bool {
    use OpKind::*;
    match kind {
        Connect => true,
        Accept | Recv | Send | SendVectored | RecvSelect => false,
        Read | Write | ReadVectored | WriteVectored | Fsync | Fdatasync | Fallocate => false,
        Open | Stat | Close | Mkdir | Symlink | Ftruncate => false,
    }
}

/// Whether `res` is a receive's that got some bytes but fewer than it
/// asked for: the socket held no more.
fn short_receive(req: &Request, res: i32) -> bool {
    req.op.kind() == OpKind::Recv && res > 0 && (res as usize) < req.op.byte_len()
}

/// Whether a raw result means "not ready yet".
fn would_block(res: i32) -> bool {
    res == -libc::EAGAIN || res == -libc::EWOULDBLOCK
}

impl Readiness {
    /// Starts the watching thread.
    pub(crate) fn new() -> io::Result<Readiness> {
        let watcher = Arc::new(Watcher {
            poller: Poller::new()?,
            waiting: Mutex::new(Waiting::default()),
            stop: AtomicBool::new(false),
        });
        let w = watcher.clone();
        std::thread::Builder::new()
            .name("blockio-net".into())
            .spawn(move || watch(&w))?;
        Ok(Readiness { watcher })
    }

    /// Performs `req` now if its socket is ready, else waits for it.
    pub(crate) fn submit(&self, req: Request) {
        if req.abandoned() {
            return;
        }
        let kind = req.op.kind();
        let req = if kind == OpKind::Recv {
            let w = self.lock();
            match w.sockets.get(&req.op.fd) {
                Some(s) if s.drained => return self.arm(w, req),
                _ => req,
            }
        } else {
            req
        };
        let res = req.op.run_blocking_raw();
        let not_ready = would_block(res) || (res == -libc::EINPROGRESS && is_connect(kind));
        if not_ready && awaits(kind).is_some() {
            self.wait(req)
        } else {
            req.done.complete(res)
        }
    }

    /// The waiting requests, locked.
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.watcher
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `req` in the set until its socket is ready.
    fn wait(&self, req: Request) {
        self.arm(self.lock(), req)
    }

    /// Puts `req` in the set, locked in `w`, until its socket is ready.
    fn arm(&self, mut w: MutexGuard<'_, Waiting>, req: Request) {
        let fd = req.op.fd;
        let target = target_key(&req.done);
        let s = w.entry(fd);
        s.reqs.push(req);
        let event = interest(fd, s);
        let armed = if s.in_set {
            // SAFETY: the requests of `s`, which hold `fd` open, stay in
            // the set while the lock is held.
            self.watcher.poller.modify(unsafe { socket(fd) }, event)
        } else {
            // SAFETY: `fd` is deleted from the set before its last waiting
            // request leaves it (see `settle`), or, if `s` is kept, by its
            // `Registration` before the socket closes; until
            // then a waiting request or the socket's owner holds it open.
            unsafe { self.watcher.poller.add(fd, event) }
        };
        match armed {
            Ok(()) => {
                s.in_set = true;
                s.drained = false;
                w.fds.insert(target, fd);
            }
            Err(e) => {
                let req = s.reqs.pop().expect("pushed above");
                if !s.in_set && !s.kept {
                    w.sockets.remove(&fd);
                }
                drop(w);
                req.done.complete(-e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }

    /// Keeps `fd` in the set between waits, until the returned
    /// registration is dropped, which must happen before `fd` is closed.
    pub(crate) fn keep(&self, fd: RawFd) -> Registration {
        let mut w = self
            .watcher
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        w.entry(fd).kept = true;
        Registration {
            watcher: Arc::downgrade(&self.watcher),
            fd,
        }
    }

    /// Cancels the request whose target `c` names, if it is waiting.
    pub(crate) fn cancel(&self, c: &Cancel) {
        let mut w = self
            .watcher
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = c.0.as_ptr().cast::<()>() as usize;
        let Some(&fd) = w.fds.get(&key) else {
            return;
        };
        // Not found while a retry has it out of the set: the retry
        // completes it, or puts it back to wait (and the cancel's future
        // is gone, so that retry or the next sees it abandoned).
        let Some(reqs) = w.sockets.get_mut(&fd).map(|s| &mut s.reqs) else {
            return;
        };
        let Some(i) = reqs.iter().position(|r| c.names(&r.done)) else {
            return;
        };
        let req = reqs.remove(i);
        w.fds.remove(&key);
        let failed = settle(&self.watcher.poller, &mut w, fd);
        drop(w);
        req.done.complete(-libc::ECANCELED);
        fail_unwatchable(failed);
    }
}

/// Brings the set's watch of `fd` in line with the requests waiting on
/// it: deleted when none is left, else re-armed for what they want (an
/// event disarms the socket it reports). Called with the set locked,
/// while a request that holds `fd` open is still alive (waiting, or just
/// taken out and not yet dropped). Returns the requests that can no
/// longer wait, for the caller to complete once the lock is let go (their
/// wakers are user code).
#[must_use]
fn settle(poller: &Poller, w: &mut Waiting, fd: RawFd) -> Vec<Request> {
    let Some(s) = w.sockets.get_mut(&fd) else {
        return Vec::new();
    };
    // SAFETY: the caller keeps a request that holds `fd` open alive, or
    // `s` is kept and its socket's owner has not yet let it close (its
    // registration takes it out of the set first, under the lock).
    let sock = unsafe { socket(fd) };
    if s.reqs.is_empty() {
        // A kept socket stays in the set, disarmed (or armed for a
        // request cancelled meanwhile: its event then retries nothing);
        // a retry settles the socket once its requests are back.
        if !s.retrying && !s.kept {
            let _ = poller.delete(sock);
            w.sockets.remove(&fd);
        }
        Vec::new()
    } else if poller.modify(sock, interest(fd, s)).is_err() {
        // Unreachable while the socket is open; the requests must not
        // wait for an event that cannot come.
        let left = std::mem::take(&mut s.reqs);
        let _ = poller.delete(sock);
        s.in_set = false;
        if !s.kept {
            w.sockets.remove(&fd);
        }
        for req in &left {
            w.fds.remove(&target_key(&req.done));
        }
        left
    } else {
        Vec::new()
    }
}

/// A socket kept in the set between waits ([`Readiness::keep`]): dropped
/// while the socket is still open, before its descriptor is closed, it
/// deletes the socket from the set, so that nothing of the set reaches
/// the socket that gets the number next.
pub(crate) struct Registration {
    watcher: Weak<Watcher>,
    fd: RawFd,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(watcher) = self.watcher.upgrade() else {
            return;
        };
        let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = w.sockets.remove(&self.fd) else {
            return;
        };
        if s.in_set {
            // SAFETY: the socket's owner drops this before closing `fd`.
            let _ = watcher.poller.delete(unsafe { socket(self.fd) });
        }
        drop(w);
        // None is left: a waiting request holds the socket, and with it
        // this registration, alive. Dropped unlocked all the same.
        debug_assert!(s.reqs.is_empty());
    }
}

/// Completes requests that could not wait with `EIO`, with no lock held; a
/// panicking waker is reported by the panic hook and the others are still
/// completed.
fn fail_unwatchable(reqs: Vec<Request>) {
    for req in reqs {
        let _ = call_user(move || {
            req.done.complete(-libc::EIO);
            drop(req);
        });
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        self.watcher.stop.store(true, Ordering::SeqCst);
        let _ = self.watcher.poller.notify();
    }
}

/// The watching thread: retries the requests whose socket became ready.
fn watch(watcher: &Watcher) {
    let mut events = Events::new();
    while !watcher.stop.load(Ordering::SeqCst) {
        events.clear();
        if watcher.poller.wait(&mut events, None).is_err() {
            continue;
        }
        for ev in events.iter() {
            retry(watcher, ev.key, ev.readable, ev.writable);
        }
    }
    // The engine is gone: nobody will await what still waits.
    let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
    let left: Vec<(RawFd, Watched)> = w.sockets.drain().collect();
    w.fds.clear();
    for (fd, s) in &left {
        if s.in_set {
            // SAFETY: with the lock held, `s.reqs` (alive here) or, for a
            // kept socket, its owner (whose registration takes the lock
            // before the socket closes) hold `fd` open.
            let _ = watcher.poller.delete(unsafe { socket(*fd) });
        }
    }
    drop(w);
    for (_, s) in left {
        for req in s.reqs {
            // A panicking waker is reported by the panic hook; the others
            // are still completed.
            let _ = call_user(move || {
                req.done.complete(-libc::ECANCELED);
                drop(req);
            });
        }
    }
}

/// Tries again the requests waiting on `fd` that its event concerns, with
/// the set unlocked during the system calls; completes those that are
/// done and puts back those still not ready (whose futures still want
/// them), then re-arms the socket or deletes it from the set.
fn retry(watcher: &Watcher, event_key: usize, readable: bool, writable: bool) {
    let fd = key_fd(event_key);
    let ready = |r: &Request| match awaits(r.op.kind()) {
        Some(Awaits::Readable) => readable,
        Some(Awaits::Writable) => writable,
        None => true,
    };
    let taken: Vec<Request> = {
        let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = w.sockets.get_mut(&fd) else {
            return;
        };
        if key(fd, s) != event_key {
            // Drawn for a socket since closed, whose number `fd` is now.
            return;
        }
        let (now, later): (Vec<Request>, Vec<Request>) = s.reqs.drain(..).partition(ready);
        s.reqs = later;
        if now.is_empty() {
            // Nothing to try (a kept socket whose request was cancelled,
            // or an event for what no request wants): re-armed for those
            // left, if any.
            let failed = settle(&watcher.poller, &mut w, fd);
            drop(w);
            fail_unwatchable(failed);
            return;
        }
        // The socket stays in the set (disarmed by this event) while the
        // calls run, so that a request arriving meanwhile re-arms it.
        s.retrying = true;
        now
    };
    let mut done = Vec::new();
    let mut again = Vec::new();
    for req in taken {
        let res = if is_connect(req.op.kind()) {
            connect_result(&req)
        } else {
            req.op.run_blocking_raw()
        };
        if would_block(res) && !req.abandoned() {
            again.push(req);
        } else {
            done.push((req, res));
        }
    }
    let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
    let s = w.sockets.get_mut(&fd).expect("kept while retrying");
    s.retrying = false;
    s.reqs.extend(again);
    s.drained = done.iter().any(|(req, res)| short_receive(req, *res));
    for (req, _) in &done {
        w.fds.remove(&target_key(&req.done));
    }
    let failed = settle(&watcher.poller, &mut w, fd);
    drop(w);
    fail_unwatchable(failed);
    // On the watching thread: a panicking waker is reported by the panic
    // hook and the thread goes on serving the other sockets.
    for (req, res) in done {
        let _ = call_user(move || {
            req.done.complete(res);
            drop(req);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::op::action::{Action, RecvArgs};
    use crate::op::Op;

    /// A receive's target: its result, and the buffer the kernel fills.
    struct Received {
        result: Mutex<Option<i32>>,
        buf: Box<[u8; 8]>,
    }

    impl Complete for Received {
        fn complete(&self, res: i32) {
            *self.result.lock().unwrap() = Some(res);
        }
    }

    fn result(t: &Received) -> Option<i32> {
        *t.result.lock().unwrap()
    }

    /// A receive on `sock` into the target's own buffer.
    fn recv(sock: &UnixStream) -> (Arc<Received>, Request) {
        let mut buf = Box::new([0u8; 8]);
        let args = RecvArgs {
            buf: buf.as_mut_ptr(),
            len: buf.len(),
        };
        // SAFETY: the buffer is on the heap, owned by the target, which
        // the request keeps until it is completed; the socket outlives the
        // test's set.
        let op = unsafe { Op::from_action(sock.as_raw_fd(), Action::Recv(args), None) };
        let target = Arc::new(Received {
            result: Mutex::new(None),
            buf,
        });
        let done: Arc<dyn Complete> = target.clone();
        (target, Request { op, done })
    }

    fn indexed(r: &Readiness) -> usize {
        r.watcher.waiting.lock().unwrap().fds.len()
    }

    /// Waits for the target's result (a minute at most).
    fn settled(t: &Received) -> i32 {
        let start = Instant::now();
        loop {
            if let Some(res) = result(t) {
                return res;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the receive never completed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The socket inode behind `fd`, as `/proc` names it.
    fn inode(fd: RawFd) -> u64 {
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        let link = link.to_str().unwrap();
        let ino = link
            .strip_prefix("socket:[")
            .and_then(|l| l.strip_suffix(']'));
        ino.unwrap().parse().unwrap()
    }

    /// The `(descriptor, inode)` of each file in the set, as the
    /// kernel lists them in the epoll descriptor's `fdinfo`.
    fn in_set(r: &Readiness) -> Vec<(RawFd, u64)> {
        let epfd = r.watcher.poller.as_raw_fd();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{epfd}")).unwrap();
        let field = |line: &str, name: &str| -> Option<String> {
            let at = line.find(name)? + name.len();
            let rest = line[at..].trim_start();
            Some(rest.split_whitespace().next()?.to_string())
        };
        info.lines()
            .filter(|l| l.starts_with("tfd:"))
            .map(|l| {
                let fd = field(l, "tfd:").unwrap().parse().unwrap();
                let ino = u64::from_str_radix(&field(l, "ino:").unwrap(), 16).unwrap();
                (fd, ino)
            })
            .collect()
    }

    /// A socket kept in the set between waits, then closed while in it
    /// (armed, with its file still open through a duplicate), and a new
    /// socket given the same descriptor number: the set lets go of the
    /// closed socket before its number is reused, the new socket's
    /// receive gets the new socket's bytes and never the old one's, and
    /// an event drawn under the old socket's key does not reach it.
    #[test]
    fn a_reused_descriptor_number_gets_nothing_of_the_closed_socket() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let a_file = a.try_clone().unwrap();
        let n = a.as_raw_fd();
        let a_ino = inode(n);
        let kept = r.keep(n);

        // A receive waits and completes: the socket stays in the set.
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), None);
        (&a_peer).write_all(b"a").unwrap();
        assert_eq!(settled(&t), 1);
        assert_eq!(t.buf[0], b'a');
        // Another waits and is cancelled: the socket stays armed.
        let (t, req) = recv(&a);
        r.submit(req);
        let name: Arc<dyn Complete> = t.clone();
        r.cancel(&Cancel(Arc::downgrade(&name)));
        assert_eq!(result(&t), Some(-libc::ECANCELED));
        assert!(in_set(&r).contains(&(n, a_ino)), "not kept in the set");
        let old_key = key(n, &r.watcher.waiting.lock().unwrap().sockets[&n]);

        // Closed the way an `OwnedSocket` closes: out of the set, then
        // the number released, here to a new socket at once (`dup2`
        // closes `n` and reuses it in one step, so that no other thread
        // of the test process takes the number meanwhile).
        drop(kept);
        let (b, b_peer) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let n = std::os::fd::IntoRawFd::into_raw_fd(a);
        // libc: std has no dup2.
        // SAFETY: `n` was `a`'s, given up above; `b`'s own descriptor is
        // closed with `b` below.
        let at_n = unsafe { libc::dup2(b.as_raw_fd(), n) };
        assert_eq!(at_n, n, "{}", io::Error::last_os_error());
        drop(b);
        // SAFETY: `n` is now an open socket owned by nothing else.
        let b = unsafe { <UnixStream as std::os::fd::FromRawFd>::from_raw_fd(n) };
        assert!(
            in_set(&r).iter().all(|&(_, ino)| ino != a_ino),
            "the closed socket is still in the set"
        );
        let b_ino = inode(n);
        let kept = r.keep(n);
        let (t, req) = recv(&b);
        r.submit(req);
        assert_eq!(result(&t), None);
        assert!(in_set(&r).contains(&(n, b_ino)));
        assert_ne!(
            key(n, &r.watcher.waiting.lock().unwrap().sockets[&n]),
            old_key
        );

        // The old socket's file is readable, and an event under its key
        // comes: neither reaches the new socket's receive.
        (&a_peer).write_all(b"A").unwrap();
        retry(&r.watcher, old_key, true, false);
        assert_eq!(result(&t), None);
        assert_eq!(r.watcher.waiting.lock().unwrap().sockets[&n].reqs.len(), 1);

        (&b_peer).write_all(b"b").unwrap();
        assert_eq!(settled(&t), 1);
        assert_eq!(t.buf[0], b'b');
        let mut left = [0u8; 2];
        assert_eq!(std::io::Read::read(&mut &a_file, &mut left).unwrap(), 1);
        assert_eq!(left[0], b'A', "the old socket's byte went elsewhere");
        drop(kept);
        drop(b);
        // (The set also holds the poller's own wake-up descriptor.)
        assert!(in_set(&r).iter().all(|&(_, ino)| ino != b_ino));
    }

    /// A receive the watching thread made that emptied its kept socket
    /// marks it drained, and the next receive, which then waits without
    /// being tried, still gets the bytes that came meanwhile.
    #[test]
    fn a_receive_after_a_drained_one_waits_and_loses_nothing() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let n = a.as_raw_fd();
        let kept = r.keep(n);
        let drained = || r.watcher.waiting.lock().unwrap().sockets[&n].drained;

        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), None);
        (&a_peer).write_all(b"a").unwrap();
        assert_eq!(settled(&t), 1);
        assert!(drained(), "a short receive did not mark the socket");

        // Bytes arrive before the next receive, which waits untried.
        (&a_peer).write_all(b"bc").unwrap();
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(settled(&t), 2);
        assert_eq!(&t.buf[..2], b"bc");

        // A full receive leaves the socket unmarked: the next is tried.
        (&a_peer).write_all(&[b'd'; 9]).unwrap();
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(settled(&t), 8);
        assert!(!drained());
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), Some(1), "a receive was not tried at once");
        drop(kept);
    }

    /// Among many sockets with a receive waiting, a cancel takes out the
    /// one it names, alone, and every request leaves the cancel index
    /// with it (cancelled, completed by an event): nothing is left behind
    /// to grow with the connections served.
    #[test]
    fn a_cancel_takes_out_its_own_request_among_many() {
        let r = Readiness::new().unwrap();
        let pairs: Vec<(UnixStream, UnixStream)> = (0..64)
            .map(|_| {
                let (a, b) = UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                (a, b)
            })
            .collect();
        let targets: Vec<Arc<Received>> = pairs
            .iter()
            .map(|(a, _)| {
                let (target, req) = recv(a);
                r.submit(req);
                target
            })
            .collect();
        assert!(targets.iter().all(|t| result(t).is_none()));
        assert_eq!(indexed(&r), pairs.len());

        let cancelled = 17;
        let name: Arc<dyn Complete> = targets[cancelled].clone();
        r.cancel(&Cancel(Arc::downgrade(&name)));
        assert_eq!(result(&targets[cancelled]), Some(-libc::ECANCELED));
        assert_eq!(indexed(&r), pairs.len() - 1);
        for (i, t) in targets.iter().enumerate() {
            if i != cancelled {
                assert_eq!(result(t), None, "a cancel took out receive {i}");
            }
        }

        for (_, b) in &pairs {
            std::io::Write::write_all(&mut &*b, b"x").unwrap();
        }
        let start = Instant::now();
        for (i, t) in targets.iter().enumerate() {
            if i == cancelled {
                continue;
            }
            while result(t).is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "receive {i} never completed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(result(t), Some(1));
            assert_eq!(t.buf[0], b'x');
        }
        // The index entries leave under the lock before the completions
        // are delivered.
        assert_eq!(indexed(&r), 0);
        drop(r);
    }
}
