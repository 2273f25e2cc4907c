//! File-system calls that may block (open, fstat, ftruncate, close, stat), run on
//! a few threads of the core's own so that the event loop's thread never
//! waits on the file system.
//!
//! The io_uring ring could carry them too (`IORING_OP_OPENAT`, `STATX`,
//! `CLOSE`), but the kernel punts a blocking open to its own worker threads
//! anyway, and these calls are rare next to reads and writes: plain system
//! calls on a small pool keep them out of the ring's accounting and need
//! no new operation kinds.
//!
//! Each call is a [`JobFuture`], completed by a pool thread and woken like
//! any operation of a batch. Rules that make cancellation safe:
//! * a job whose future is gone before a thread takes it is not run (an
//!   open is never made for nobody), except a close, which always runs;
//! * a descriptor opened is owned ([`Out::Fd`]) until Python takes its
//!   number, so one opened for a future that was dropped meanwhile is
//!   closed, never leaked;
//! * a job on an existing descriptor works on its own duplicate, so closing
//!   or reusing the caller's number meanwhile cannot redirect it.

use std::collections::VecDeque;
use std::ffi::CString;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

/// Threads a pool starts at most: enough that one open blocked on a FIFO
/// or a slow mount does not hold up the others.
const MAX_THREADS: usize = 8;

/// One blocking call.
pub(crate) enum Job {
    /// `open(path, flags, mode)`; the result is the new descriptor. A
    /// directory opened without `O_DIRECTORY` fails with `EISDIR`, as
    /// Python's `open` does.
    Open {
        path: CString,
        flags: i32,
        mode: u32,
    },
    /// The size of the file (`fstat`).
    Size(OwnedFd),
    /// `ftruncate` to the length.
    Truncate(OwnedFd, u64),
    /// `close`; the result is 0.
    Close(OwnedFd),
    /// `statx` of a path through `engine`'s batch call: on its ring where
    /// io_uring has `STATX`, else a plain system call. `follow`: of the
    /// file a final symbolic link names, else of the link.
    Stat {
        engine: blockio::Engine,
        path: CString,
        follow: bool,
    },
}

/// What a job gives back.
pub(crate) enum Out {
    /// A size, or 0.
    Count(usize),
    /// A descriptor just opened.
    Fd(OwnedFd),
    /// A file's status.
    Stat(Box<libc::statx>),
}

impl Job {
    /// Runs the call.
    fn run(self) -> io::Result<Out> {
        match self {
            Job::Open { path, flags, mode } => open(&path, flags, mode).map(Out::Fd),
            Job::Size(fd) => size(&fd).map(Out::Count),
            Job::Truncate(fd, len) => {
                let len = libc::off_t::try_from(len)
                    .map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
                // SAFETY: ftruncate on a descriptor we own; no memory is passed.
                cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }).map(Out::Count)
            }
            Job::Stat {
                engine,
                path,
                follow,
            } => {
                let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
                let at = blockio::PathAt::cwd(&path);
                let st = engine.stat_batch(&[at], flags)?.remove(0)?;
                Ok(Out::Stat(Box::new(st)))
            }
            Job::Close(fd) => {
                let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
                // SAFETY: `raw` came from an OwnedFd given up just above, so
                // this is its only close.
                cvt(unsafe { libc::close(raw) }).map(Out::Count)
            }
        }
    }
}

fn cvt(r: libc::c_int) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

fn open(path: &CString, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    if flags & libc::O_DIRECTORY == 0 && is_dir(&owned)? {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok(owned)
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain integers; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into `st`, which lives on this stack.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

fn is_dir(fd: &OwnedFd) -> io::Result<bool> {
    Ok(fstat(fd)?.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

fn size(fd: &OwnedFd) -> io::Result<usize> {
    Ok(fstat(fd)?.st_size as usize)
}

/// A duplicate of the caller's descriptor for a job to own, or the errno
/// (`EBADF` for a number that is not open).
pub(crate) fn dup(fd: RawFd) -> Result<OwnedFd, i32> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor or fails; no memory is
    // passed.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EBADF));
    }
    // SAFETY: `d` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

/// What a job's future and the thread running it share.
#[derive(Default)]
struct Slot {
    result: Option<io::Result<Out>>,
    waker: Option<Waker>,
}

/// The future of one job: its result once a pool thread has run it.
pub(crate) struct JobFuture(Arc<Mutex<Slot>>);

impl Future for JobFuture {
    type Output = io::Result<Out>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<Out>> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

struct Queue {
    jobs: VecDeque<(Job, Arc<Mutex<Slot>>)>,
    idle: usize,
    threads: usize,
    stop: bool,
}

/// The pool: a queue, and threads started on demand up to [`MAX_THREADS`].
pub(crate) struct Pool {
    q: Arc<(Mutex<Queue>, Condvar)>,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            q: Arc::new((
                Mutex::new(Queue {
                    jobs: VecDeque::new(),
                    idle: 0,
                    threads: 0,
                    stop: false,
                }),
                Condvar::new(),
            )),
        }
    }
}

impl Pool {
    /// Queues `job`; its future resolves when a thread has run it.
    pub(crate) fn submit(&self, job: Job) -> io::Result<JobFuture> {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let (lock, cv) = &*self.q;
        let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
        q.jobs.push_back((job, Arc::clone(&slot)));
        if q.idle >= q.jobs.len() || q.threads >= MAX_THREADS {
            cv.notify_one();
        } else {
            let shared = Arc::clone(&self.q);
            std::thread::Builder::new()
                .name("blockio-fs".into())
                .spawn(move || serve(&shared))?;
            q.threads += 1;
        }
        Ok(JobFuture(slot))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let (lock, cv) = &*self.q;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        cv.notify_all();
    }
}

/// A pool thread: runs queued jobs until the pool is dropped and the queue
/// is empty.
fn serve(shared: &(Mutex<Queue>, Condvar)) {
    let (lock, cv) = shared;
    let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some((job, slot)) = q.jobs.pop_front() {
            drop(q);
            finish(job, &slot);
            q = lock.lock().unwrap_or_else(|e| e.into_inner());
        } else if q.stop {
            q.threads -= 1;
            return;
        } else {
            q.idle += 1;
            q = cv.wait(q).unwrap_or_else(|e| e.into_inner());
            q.idle -= 1;
        }
    }
}

/// Runs one job for `slot`, unless its future is gone (then dropping the
/// job closes the duplicate it owns); a close always runs.
fn finish(job: Job, slot: &Arc<Mutex<Slot>>) {
    if Arc::strong_count(slot) == 1 && !matches!(job, Job::Close(_)) {
        return;
    }
    let res = job.run();
    let waker = {
        let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
        s.result = Some(res);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}
