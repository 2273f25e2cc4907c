//! The asynchronous batches in flight, by token, and the eventfd that
//! tells the event loop some have finished: each batch a Rust future (see
//! [`Pending`]) whose operations' waker records its token; `Core::drain`
//! polls the woken ones in the loop's thread. The token state lives here
//! only; the Python layer keeps the waiter each token resolves.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Waker};

use blockio::aio::{AsyncEngine, Withdrawal};
use pyo3::prelude::*;

use crate::*;

/// The batches of one core not yet handed back, by token.
pub(crate) struct InFlight {
    wakeups: Arc<Wakeups>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Batches that finished when started, until the next drain.
    ready: Mutex<Vec<(u64, PyObject, Done)>>,
    /// The token of the next batch.
    next_token: AtomicU64,
}

impl InFlight {
    /// No batch yet, and a new non-blocking eventfd.
    pub(crate) fn new() -> io::Result<InFlight> {
        // SAFETY: eventfd has no memory effects; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(InFlight {
            wakeups: Arc::new(Wakeups {
                woken: Mutex::new(Vec::new()),
                // SAFETY: a new descriptor, owned here only.
                efd: unsafe { OwnedFd::from_raw_fd(efd) },
                draining: AtomicBool::new(false),
            }),
            pending: Mutex::new(HashMap::new()),
            ready: Mutex::new(Vec::new()),
            next_token: AtomicU64::new(0),
        })
    }

    /// The eventfd written when a batch's operation finishes.
    pub(crate) fn eventfd(&self) -> RawFd {
        self.wakeups.efd.as_raw_fd()
    }

    /// Empties the eventfd (before the finished batches are collected).
    pub(crate) fn clear_eventfd(&self) {
        let mut v: u64 = 0;
        // SAFETY: an 8-byte read into a local from our non-blocking eventfd.
        unsafe { libc::read(self.eventfd(), (&mut v as *mut u64).cast(), 8) };
    }

    fn waker(&self, token: u64) -> Waker {
        Waker::from(Arc::new(TokenWaker {
            token,
            wakeups: Arc::clone(&self.wakeups),
        }))
    }

    /// Starts a batch for `waiter`: polls it once (which hands its
    /// operations to the driver) and keeps it under a new token until it
    /// is finished. The token, and the descriptors the batch borrowed if it
    /// finished at once (left the core: for the caller to release).
    pub(crate) fn start(&self, waiter: PyObject, mut p: Pending) -> (u64, Vec<RawFd>) {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let waker = self.waker(token);
        p.waker = Some(waker.clone());
        match p.poll(&mut Context::from_waker(&waker)) {
            // Finished at once (every descriptor unusable): reported at the
            // next drain like any other.
            Some(done) => {
                self.ready
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((token, waiter, done));
                waker.wake();
                (token, std::mem::take(&mut p.borrowed))
            }
            None => {
                p.waiter = Some(waiter);
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(token, p);
                (token, Vec::new())
            }
        }
    }

    /// The batches finished since the last call, removed, and the
    /// descriptors they borrowed (for the caller to release). Reaps the
    /// `loop_driven` ring first (after the eventfd was cleared).
    pub(crate) fn finished(
        &self,
        loop_driven: Option<AsyncEngine>,
    ) -> (Vec<(PyObject, Done)>, Vec<RawFd>) {
        if let Some(aio) = loop_driven {
            self.wakeups.draining.store(true, Ordering::SeqCst);
            aio.reap();
            self.wakeups.draining.store(false, Ordering::SeqCst);
        }
        let mut tokens = std::mem::take(
            &mut *self
                .wakeups
                .woken
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        // Every operation of a batch wakes its token: poll each batch once.
        tokens.sort_unstable();
        tokens.dedup();
        let ready = std::mem::take(&mut *self.ready.lock().unwrap_or_else(PoisonError::into_inner));
        let mut out: Vec<(PyObject, Done)> = ready.into_iter().map(|(_, w, d)| (w, d)).collect();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let mut left = Vec::new();
        for token in tokens {
            let Some(p) = pending.get_mut(&token) else {
                continue;
            };
            let waker = p.waker.clone().expect("set by start");
            if let Some(done) = p.poll(&mut Context::from_waker(&waker)) {
                let Some(mut p) = pending.remove(&token) else {
                    continue;
                };
                left.append(&mut p.borrowed);
                if let Some(waiter) = p.waiter.take() {
                    out.push((waiter, done));
                }
            }
        }
        (out, left)
    }

    /// What withdraws each operation of the batch `token`; `None` for a
    /// batch no longer pending.
    pub(crate) fn withdrawals(&self, token: u64) -> Option<Vec<Withdrawal>> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&token)
            .map(|batch| batch.withdrawals.clone())
    }

    /// Withdraws the operations of the batch `token` that the kernel has
    /// not taken yet (they are never performed) and, if that is all of
    /// them, gives the batch up as [`cancel`](Self::cancel) does: true
    /// (Python's `Core.withdraw`). False if an operation of it was
    /// performed or is in the kernel (or on a pool thread), and false for
    /// a batch no longer pending (it finished, and its results may be on
    /// their way to the caller's loop through another loop's drain; or
    /// the engine closed, which resolves it): the batch stays, and its
    /// results come as usual, so that the caller learns what was done.
    /// Batches of reads into Python buffers and of writes can be
    /// withdrawn (others have nothing to withdraw, and are given up at
    /// once).
    pub(crate) fn withdraw(&self, token: u64) -> bool {
        let Some(withdrawals) = self.withdrawals(token) else {
            return false;
        };
        // Every one is asked (not stopping at the first in the kernel), so
        // that none of the batch starts later.
        let performed = withdrawals.iter().filter(|w| !w.withdraw()).count();
        if performed == 0 {
            self.cancel(token);
        }
        performed == 0
    }

    /// Gives up on the batch `token` whose awaiting task was cancelled
    /// (Python's `Core.cancel`): its operations not yet handed to the
    /// kernel are never submitted; those in flight keep their buffers and
    /// their duplicate descriptor until they complete. Its results are
    /// never reported. A token already finished or unknown is ignored.
    pub(crate) fn cancel(&self, token: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let mut waiter = None;
        let batch = match pending.get_mut(&token) {
            // One that borrows a file object's descriptor stays until its
            // operations complete, for nobody (what has not reached the
            // kernel is withdrawn): the file's close waits for it.
            Some(p) if !p.borrowed.is_empty() => {
                for w in &p.withdrawals {
                    w.withdraw();
                }
                waiter = p.waiter.take();
                None
            }
            _ => pending.remove(&token),
        };
        drop(pending);
        // Dropped outside the lock: dropping the futures may free buffers.
        drop(batch);
        drop(waiter);
        self.ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(t, _, _)| *t != token);
    }

    /// Batches not finished yet (Python's `Core.pending`).
    pub(crate) fn count(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Drops every batch not finished yet, which cancels its operations
    /// (those not yet in the kernel are never submitted); the waiters of
    /// those that had one, in the order the batches started.
    pub(crate) fn cut_all(&self) -> Vec<PyObject> {
        let cut: HashMap<u64, Pending> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        let mut cut: Vec<(u64, Pending)> = cut.into_iter().collect();
        cut.sort_unstable_by_key(|(t, _)| *t);
        let waiters = cut
            .iter_mut()
            .filter_map(|(_, p)| p.waiter.take())
            .collect();
        // Dropping the futures cancels their operations (outside the lock).
        drop(cut);
        waiters
    }

    /// In a forked child: points the eventfd's number at a new eventfd of
    /// the child's own. The number stays registered with the event loops
    /// that watched it, whose epoll instance the child shares with the
    /// parent; epoll knows a registration by number and open file, so
    /// the child's loops unwatching or closing it (uvloop's close does)
    /// remove nothing of the parent's, whose loop would otherwise never
    /// hear of its completions again. Best effort: left as it is if no
    /// eventfd can be made.
    pub(crate) fn detach_eventfd(&self) {
        // SAFETY: eventfd has no memory effects; the result is checked.
        let own = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if own < 0 {
            return;
        }
        // SAFETY: both are descriptors of this process; dup3 replaces the
        // number `eventfd` (owned by `wakeups`, which keeps it) atomically
        // and `own`, a copy now, is closed once, here.
        unsafe {
            libc::dup3(own, self.eventfd(), libc::O_CLOEXEC);
            libc::close(own);
        }
    }

    /// Forgets every batch without dropping it: in a forked child, whose
    /// operations belong to the parent's rings and threads. The waiters
    /// of the batches (those pending, and those that finished when started
    /// but were not drained), in the order the batches started: nothing
    /// in the child will ever resolve them, so the caller fails them.
    pub(crate) fn forget(&self) -> Vec<PyObject> {
        let pending =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        let ready = std::mem::take(&mut *self.ready.lock().unwrap_or_else(PoisonError::into_inner));
        let mut waiters: Vec<(u64, PyObject)> = Vec::new();
        for (token, mut p) in pending {
            if let Some(w) = p.waiter.take() {
                waiters.push((token, w));
            }
            std::mem::forget(p);
        }
        for (token, w, done) in ready {
            waiters.push((token, w));
            std::mem::forget(done);
        }
        waiters.sort_unstable_by_key(|(t, _)| *t);
        waiters.into_iter().map(|(_, w)| w).collect()
    }
}
