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

use crate::op::Op;

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
                *slot = self.ops[i].run_blocking();
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
