//! A pool of threads that each take jobs from one queue: the thread-pool
//! backend of both engines runs on it.

use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

/// `threads` workers named `{name}-{i}`, each running `handle` on the jobs
/// it takes.
///
/// Dropping the pool closes its queue: the workers finish the jobs already
/// queued and exit. It does not wait for them, so the last handle may be
/// dropped on one of the pool's own workers (a completion that wakes a task
/// which drops its engine) without a deadlock.
pub(crate) struct WorkerPool<J: Send + 'static> {
    tx: Mutex<Option<Sender<J>>>,
    threads: usize,
}

impl<J: Send + 'static> WorkerPool<J> {
    /// Starts the workers: `threads` of them, or as many as can be had
    /// when that is fewer (under a limit on address space, `ulimit -v`,
    /// or on threads), at least one; an error only when none can.
    pub(crate) fn new(threads: usize, name: &str, handle: fn(J)) -> io::Result<WorkerPool<J>> {
        let (tx, rx) = mpsc::channel::<J>();
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            match thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || work(&rx, handle))
            {
                Ok(_) => started += 1,
                Err(e) if started == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(WorkerPool {
            tx: Mutex::new(Some(tx)),
            threads: started,
        })
    }

    /// A pool of no workers, whose queue takes no jobs (every job sent is
    /// given back): for a user that does all the work itself when no
    /// thread can be had (a limit on processes, `ulimit -u`).
    pub(crate) fn none() -> WorkerPool<J> {
        WorkerPool {
            tx: Mutex::new(None),
            threads: 0,
        }
    }

    /// How many workers there are.
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// Queues `jobs` in order; gives back, from the first, those that no
    /// worker will take (the pool is shutting down).
    pub(crate) fn send(&self, jobs: impl IntoIterator<Item = J>) -> Vec<J> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let mut refused = Vec::new();
        for job in jobs {
            match tx.as_ref() {
                Some(tx) if refused.is_empty() => {
                    if let Err(mpsc::SendError(job)) = tx.send(job) {
                        refused.push(job);
                    }
                }
                _ => refused.push(job),
            }
        }
        refused
    }
}

fn work<J>(rx: &Mutex<Receiver<J>>, handle: fn(J)) {
    loop {
        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        handle(job);
    }
}

impl<J: Send + 'static> Drop for WorkerPool<J> {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
