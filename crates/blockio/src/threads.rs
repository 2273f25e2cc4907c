//! The fallback backend: `pread`/`pwrite` on a pool of threads.
//!
//! Used where io_uring is unavailable (ENOSYS, EPERM from a seccomp profile,
//! `kernel.io_uring_disabled`) or when `BLOCKIO_BACKEND=threads`. The API and
//! the results are the same; only speed differs.
//!
//! A batch is shared with up to `threads` workers and the calling thread,
//! which all take the next operation index from one atomic counter. The
//! caller returns only once every worker has let go of the batch.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};

use crate::op::{Op, OpKind, MAX_RW};

struct Shared<'a, 'b> {
    ops: &'a [Op<'b>],
    results: *mut io::Result<usize>,
    next: AtomicUsize,
    /// Threads (workers plus the caller) still working on the batch.
    refs: AtomicUsize,
    caller: Thread,
}

impl Shared<'_, '_> {
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.ops.len() {
                break;
            }
            // SAFETY: each index is taken by exactly one thread (fetch_add),
            // so no two threads touch the same result; `results` outlives
            // every worker's use (the caller waits for `refs` to reach 0).
            let slot = unsafe { &mut *self.results.add(i) };
            if !self.ops[i].settled {
                *slot = run_one(&self.ops[i]);
            }
        }
    }

    fn leave(&self) {
        let caller = self.caller.clone();
        if self.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            // `self` may be gone from here on; only the clone is used.
            caller.unpark();
        }
    }
}

/// A pointer to a batch, sent to a worker.
struct Job(*const Shared<'static, 'static>);
// SAFETY: the pointee is `Sync` data (ops are `Sync`, results are accessed
// per index) that outlives the job: the caller waits for every worker.
unsafe impl Send for Job {}

pub(crate) struct ThreadBackend {
    tx: Mutex<Option<Sender<Job>>>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadBackend {
    pub(crate) fn new(threads: usize) -> io::Result<ThreadBackend> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let workers = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                thread::Builder::new()
                    .name(format!("blockio-pool-{i}"))
                    .spawn(move || worker(&rx))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ThreadBackend {
            tx: Mutex::new(Some(tx)),
            workers,
        })
    }

    pub(crate) fn threads(&self) -> usize {
        self.workers.len()
    }

    pub(crate) fn run(&self, ops: &[Op<'_>], results: &mut [io::Result<usize>]) -> io::Result<()> {
        let helpers = ops.len().saturating_sub(1).min(self.workers.len());
        let shared = Shared {
            ops,
            results: results.as_mut_ptr(),
            next: AtomicUsize::new(0),
            refs: AtomicUsize::new(helpers + 1),
            caller: thread::current(),
        };
        // Waits for the workers even if this thread unwinds.
        let guard = WaitForWorkers(&shared.refs);
        if helpers > 0 {
            let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            let tx = tx.as_ref().expect("sender lives until drop");
            // Lifetimes are erased: the caller outlives every use (see `Job`).
            let ptr = (&shared as *const Shared<'_, '_>).cast::<Shared<'static, 'static>>();
            for sent in 0..helpers {
                if tx.send(Job(ptr)).is_err() {
                    // No worker will take the rest: count them out ourselves.
                    for _ in sent..helpers {
                        shared.refs.fetch_sub(1, Ordering::AcqRel);
                    }
                    break;
                }
            }
        }
        shared.work();
        shared.leave();
        drop(guard);
        Ok(())
    }
}

struct WaitForWorkers<'a>(&'a AtomicUsize);

impl Drop for WaitForWorkers<'_> {
    fn drop(&mut self) {
        while self.0.load(Ordering::Acquire) != 0 {
            thread::park();
        }
    }
}

fn worker(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        // SAFETY: the caller keeps the batch alive until `refs` reaches 0,
        // which happens only after our `leave`.
        let shared = unsafe { &*job.0 };
        shared.work();
        shared.leave();
    }
}

impl Drop for ThreadBackend {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Performs one operation with a plain system call.
/// Performs the batch's metadata operations right here, for rings without
/// the metadata opcodes; returns how many operations are still pending.
pub(crate) fn settle_metadata_inline(
    ops: &mut [Op<'_>],
    results: &mut [io::Result<usize>],
    mut pending: usize,
) -> usize {
    for (op, result) in ops.iter_mut().zip(results.iter_mut()) {
        if !op.settled && op.kind.is_metadata() {
            *result = run_one(op);
            op.settled = true;
            pending -= 1;
        }
    }
    pending
}

pub(crate) fn run_one(op: &Op<'_>) -> io::Result<usize> {
    let raw = run_raw(op);
    op.result_from_raw(raw)
}

/// Performs one operation with a plain system call; the result as the kernel
/// reports it to io_uring (bytes, or `-errno`).
pub(crate) fn run_raw(op: &Op<'_>) -> i32 {
    loop {
        // SAFETY: `op` borrows its buffer / iovec array for its lifetime and
        // we are inside it; the lengths come from the same slices.
        let rc: isize = unsafe {
            match op.kind {
                OpKind::Read => {
                    libc::pread(op.fd, op.ptr.cast(), op.len.min(MAX_RW), op.offset as i64)
                }
                OpKind::Write => {
                    libc::pwrite(op.fd, op.ptr.cast(), op.len.min(MAX_RW), op.offset as i64)
                }
                OpKind::ReadVectored => libc::preadv(
                    op.fd,
                    op.ptr as *const libc::iovec,
                    op.len as i32,
                    op.offset as i64,
                ),
                OpKind::WriteVectored => libc::pwritev(
                    op.fd,
                    op.ptr as *const libc::iovec,
                    op.len as i32,
                    op.offset as i64,
                ),
                OpKind::Fsync => libc::fsync(op.fd) as isize,
                OpKind::Fdatasync => libc::fdatasync(op.fd) as isize,
                OpKind::Open => libc::openat(
                    op.fd,
                    op.ptr as *const libc::c_char,
                    op.len as i32,
                    op.offset as libc::c_uint,
                ) as isize,
                OpKind::Stat => libc::statx(
                    op.fd,
                    op.ptr as *const libc::c_char,
                    op.len as i32,
                    op.offset as u32,
                    op.ptr2.cast(),
                ) as isize,
                // Never retried: after EINTR the descriptor is closed anyway
                // on Linux, and a retry could close someone else's.
                OpKind::Close => match libc::close(op.fd) {
                    -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => 0,
                    rc => rc as isize,
                },
                OpKind::Mkdir => libc::mkdirat(
                    op.fd,
                    op.ptr as *const libc::c_char,
                    op.offset as libc::mode_t,
                ) as isize,
                OpKind::Symlink => libc::symlinkat(
                    op.ptr2 as *const libc::c_char,
                    op.fd,
                    op.ptr as *const libc::c_char,
                ) as isize,
            }
        };
        if rc >= 0 {
            // At most MAX_RW bytes, which fits in an i32.
            return rc as i32;
        }
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno == libc::ESPIPE && op.offset == 0 {
            if let Some(rc) = stream_io(op) {
                return rc;
            }
        }
        if errno != libc::EINTR {
            return -errno;
        }
    }
}

/// A read or write at offset 0 of a descriptor that has no offsets (a
/// pipe, socket or terminal), as io_uring does it: a plain `read` or
/// `write`. `None` for the other kinds, which keep their `ESPIPE`.
fn stream_io(op: &Op<'_>) -> Option<i32> {
    loop {
        // SAFETY: as in `run_raw`: the op's buffer, valid for `op.len`.
        let rc = unsafe {
            match op.kind {
                OpKind::Read => libc::read(op.fd, op.ptr.cast(), op.len.min(MAX_RW)),
                OpKind::Write => libc::write(op.fd, op.ptr.cast(), op.len.min(MAX_RW)),
                _ => return None,
            }
        };
        if rc >= 0 {
            return Some(rc as i32);
        }
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno != libc::EINTR {
            return Some(-errno);
        }
    }
}
