//! The in-flight bound: the engine-wide bound on operations in flight
//! (the queue depth).
//!
//! A counting semaphore: an atomic fast path, and a mutex + condvar only for
//! threads that find no permit left. Callers take *up to* what they want, so
//! a large batch proceeds with whatever share is free instead of waiting for
//! its whole size. A give wakes one sleeper, which wakes the next if permits
//! remain: waking every sleeper on each completion made 64 submitting
//! threads spend more CPU on futex wakeups than on I/O.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

pub(crate) struct InFlightBound {
    available: AtomicUsize,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

impl InFlightBound {
    pub(crate) fn new(permits: usize) -> InFlightBound {
        InFlightBound {
            available: AtomicUsize::new(permits),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    /// Takes between 1 and `want` permits without blocking; 0 if none are free
    /// (or `want` is 0).
    pub(crate) fn try_take(&self, want: usize) -> usize {
        let mut cur = self.available.load(Ordering::SeqCst);
        loop {
            let take = cur.min(want);
            if take == 0 {
                return 0;
            }
            match self.available.compare_exchange_weak(
                cur,
                cur - take,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return take,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes between 1 and `want` (> 0) permits, blocking until at least one is
    /// free.
    pub(crate) fn take(&self, want: usize) -> usize {
        debug_assert!(want > 0);
        let got = self.try_take(want);
        if got > 0 {
            return got;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let got = loop {
            let got = self.try_take(want);
            if got > 0 {
                break got;
            }
            guard = self.freed.wait(guard).unwrap_or_else(|e| e.into_inner());
        };
        // Gives wake one sleeper each; pass the wake on if permits are left
        // for another (a herd woken on every give costs more than the I/O).
        if self.sleepers.fetch_sub(1, Ordering::SeqCst) > 1
            && self.available.load(Ordering::SeqCst) > 0
        {
            self.freed.notify_one();
        }
        got
    }

    /// Returns `n` permits.
    pub(crate) fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.available.fetch_add(n, Ordering::SeqCst);
        // A sleeper registers (under the lock) before its last check, and we
        // add before we look, so one of the two always sees the other.
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound that only a hang reaches: a wait that runs past it fails
    /// the test instead of blocking the run.
    const HANG: std::time::Duration = std::time::Duration::from_secs(60);

    #[test]
    fn takes_at_most_what_is_free() {
        let l = InFlightBound::new(5);
        assert_eq!(l.try_take(3), 3);
        assert_eq!(l.try_take(3), 2);
        assert_eq!(l.try_take(1), 0);
        l.give(4);
        assert_eq!(l.take(10), 4);
    }

    #[test]
    fn one_give_wakes_as_many_sleepers_as_it_has_permits_for() {
        let l = std::sync::Arc::new(InFlightBound::new(3));
        assert_eq!(l.take(3), 3);
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..3 {
            let (l, tx) = (l.clone(), tx.clone());
            std::thread::spawn(move || tx.send(l.take(1)).unwrap());
        }
        let start = std::time::Instant::now();
        while l.sleepers.load(Ordering::SeqCst) < 3 {
            assert!(start.elapsed() < HANG, "the takers never slept");
            std::thread::yield_now();
        }
        l.give(3);
        for _ in 0..3 {
            let got = rx.recv_timeout(HANG);
            assert_eq!(got, Ok(1), "a sleeper was left asleep with a permit free");
        }
    }

    #[test]
    fn blocked_taker_wakes_on_give() {
        let l = std::sync::Arc::new(InFlightBound::new(1));
        assert_eq!(l.take(1), 1);
        let l2 = l.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(l2.take(2)).unwrap());
        // The taker has found no permit and registered to sleep.
        let start = std::time::Instant::now();
        while l.sleepers.load(Ordering::SeqCst) < 1 {
            assert!(start.elapsed() < HANG, "the taker never slept");
            std::thread::yield_now();
        }
        l.give(1);
        let got = rx.recv_timeout(HANG);
        assert_eq!(got, Ok(1), "the taker was left asleep with a permit free");
    }
}
