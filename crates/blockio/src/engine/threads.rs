//! The fallback backend: `pread`/`pwrite` on a pool of threads.
//!
//! Used where io_uring is unavailable (ENOSYS, EPERM from a seccomp profile,
//! `kernel.io_uring_disabled`) or when `BLOCKIO_BACKEND=threads`. The API and
//! the results are the same; only speed differs.
//!
//! A batch is shared with up to `threads` workers (a [`WorkerPool`]) and the
//! calling thread,
//! which all take the next operation index from one atomic counter. The
//! caller returns only once every worker has let go of the batch.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, Thread};

use crate::op::Op;
use crate::pool::WorkerPool;

/// A batch as the calling thread and the workers share it.
struct SharedBatch<'a, 'b> {
    ops: &'a [Op<'b>],
    results: *mut io::Result<usize>,
    next: AtomicUsize,
    /// Threads (workers plus the caller) still working on the batch.
    refs: AtomicUsize,
    caller: Thread,
}

impl SharedBatch<'_, '_> {
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
                *slot = self.ops[i].run_checked();
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
struct BatchPointer(*const SharedBatch<'static, 'static>);
// SAFETY: the pointee is `Sync` data (ops are `Sync`, results are accessed
// per index) that outlives the job: the caller waits for every worker.
unsafe impl Send for BatchPointer {}

impl BatchPointer {
    /// A worker's part of the batch.
    fn run(self) {
        // SAFETY: the caller keeps the batch alive until `refs` reaches 0,
        // which happens only after our `leave`.
        let shared = unsafe { &*self.0 };
        shared.work();
        shared.leave();
    }
}

pub(crate) struct ThreadBackend {
    pool: WorkerPool<BatchPointer>,
}

impl ThreadBackend {
    /// A backend of `threads` workers, or as many as can be had; with
    /// `inline_ok`, of none when no thread can be started (a limit on
    /// processes, `ulimit -u`): the calling thread, which takes its share
    /// of every batch anyway, then runs each batch alone.
    pub(crate) fn new(threads: usize, inline_ok: bool) -> io::Result<ThreadBackend> {
        let pool = match WorkerPool::new(threads, "blockio-pool", BatchPointer::run) {
            Ok(pool) => pool,
            Err(_) if inline_ok => WorkerPool::none(),
            Err(e) => return Err(e),
        };
        Ok(ThreadBackend { pool })
    }

    /// A backend of no workers: the calling thread runs each batch alone,
    /// inline.
    pub(crate) fn inline_only() -> ThreadBackend {
        ThreadBackend {
            pool: WorkerPool::none(),
        }
    }

    pub(crate) fn threads(&self) -> usize {
        self.pool.threads()
    }

    pub(crate) fn run(&self, ops: &[Op<'_>], results: &mut [io::Result<usize>]) -> io::Result<()> {
        let helpers = ops.len().saturating_sub(1).min(self.pool.threads());
        let shared = SharedBatch {
            ops,
            results: results.as_mut_ptr(),
            next: AtomicUsize::new(0),
            refs: AtomicUsize::new(helpers + 1),
            caller: thread::current(),
        };
        // Waits for the workers even if this thread unwinds.
        let guard = WaitForWorkers(&shared.refs);
        // Lifetimes are erased: the caller outlives every use (see `BatchPointer`).
        let ptr = (&shared as *const SharedBatch<'_, '_>).cast::<SharedBatch<'static, 'static>>();
        let unsent = self.pool.send((0..helpers).map(|_| BatchPointer(ptr)));
        // No worker will take these: count them out ourselves.
        shared.refs.fetch_sub(unsent.len(), Ordering::AcqRel);
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
