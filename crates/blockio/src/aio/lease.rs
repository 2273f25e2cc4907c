//! Who takes the events of the readiness fallback's epoll set
//! ([`readiness`](super::readiness)): its own thread, or a task of the
//! tokio runtime that runs the sockets' tasks, which holds the set's
//! [`Lease`] (see [`readiness_tokio`](super::readiness_tokio)).
//!
//! While a task holds the lease, the readiness thread stands aside: it
//! does not wait on the set (that wait would wake it for every event, the
//! cross-thread hand-over the lease exists to remove) but sleeps, and
//! every [`TICK`] looks whether the set has events waiting. Events seen
//! waiting at two ticks in a row with no turn of the holder's between
//! them mean that the holder's runtime is not taking them (its threads
//! are all blocked in tasks, or the runtime is not being run): the thread
//! revokes the lease and takes the events itself, so readiness is never
//! stranded behind a runtime that does not run. A holder whose lease was
//! revoked ends at its next poll; the next request that waits from a
//! task of a running runtime claims the lease again. The holder's drop
//! (its runtime shut down, the engine gone) releases the lease and wakes
//! the thread at once.
//!
//! A leaf: it uses nothing else in `aio`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How often the standing-aside thread looks for events the holder has
/// not taken. A revocation waits two to three ticks (200-300 ms), so
/// that a runtime that runs keeps the lease through a backlog: the
/// holder's task, woken by the reactor, waits its turn behind the tasks
/// already queued (2,000 echoes of a slowloris round, 50 ms on the
/// fallback's bench), and at 20 ms ticks such a backlog cost it the lease
/// in every round, each event then handed over by the thread again until
/// the next claim. A backlog longer than two ticks still does. The thread
/// looks ten times a second while a runtime holds the lease, an idle one
/// too.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The right to take the set's events from a runtime's task.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    /// The holder's token, 0 when the thread takes the events; written
    /// with `state` locked, read without it.
    holder: AtomicU64,
    /// The last token given (tokens are never reused, so a holder whose
    /// lease was revoked and given again to another never takes it for
    /// its own).
    state: Mutex<u64>,
    /// Signalled when the lease is released (or the set stops).
    changed: Condvar,
    /// Turns of the holders (takes of events from the set).
    turns: AtomicU64,
    /// Leases revoked from a holder that was not taking the events.
    revoked: AtomicU64,
}

impl Lease {
    /// Whether a task holds the lease.
    pub(crate) fn is_held(&self) -> bool {
        self.holder.load(Ordering::Acquire) != 0
    }

    /// Whether `token` is the holder's.
    pub(crate) fn holds(&self, token: u64) -> bool {
        self.holder.load(Ordering::Acquire) == token
    }

    /// The lease for a new holder, if nobody holds it; its token.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_claim(&self) -> Option<u64> {
        let mut last = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_held() {
            return None;
        }
        *last += 1;
        self.holder.store(*last, Ordering::Release);
        Some(*last)
    }

    /// Gives the lease of `token` back, if it is still the holder's, and
    /// wakes the thread to take the events.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn release(&self, token: u64) {
        let _last = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.holds(token) {
            self.holder.store(0, Ordering::Release);
            self.changed.notify_all();
        }
    }

    /// The holder took events from the set (or found none).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn turned(&self) {
        self.turns.fetch_add(1, Ordering::Relaxed);
    }

    /// Leases revoked so far (see the [module](self)).
    #[cfg(test)]
    pub(crate) fn revoked(&self) -> u64 {
        self.revoked.load(Ordering::Relaxed)
    }

    /// Wakes a thread standing aside, to see `stop`.
    pub(crate) fn wake(&self) {
        let _last = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }

    /// The readiness thread's wait while a task holds the lease: returns
    /// once nobody holds it (released, or revoked here because events
    /// waited, as `waiting` says, over two ticks with no turn of the
    /// holder's), or once `stop` is set.
    pub(crate) fn stand_aside(&self, waiting: impl Fn() -> bool, stop: &AtomicBool) {
        // The holder and its turns when events were last seen waiting.
        let mut stale_at: Option<(u64, u64)> = None;
        loop {
            let last = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !self.is_held() || stop.load(Ordering::SeqCst) {
                return;
            }
            let (last, timed) = self
                .changed
                .wait_timeout(last, TICK)
                .unwrap_or_else(|e| e.into_inner());
            if !timed.timed_out() {
                continue;
            }
            // Asked unlocked: the holder may release meanwhile.
            drop(last);
            let holder = self.holder.load(Ordering::Acquire);
            if holder == 0 {
                return;
            }
            if !waiting() {
                stale_at = None;
                continue;
            }
            let now = (holder, self.turns.load(Ordering::Relaxed));
            if stale_at != Some(now) {
                stale_at = Some(now);
                continue;
            }
            let _last = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if self.holds(holder) {
                self.holder.store(0, Ordering::Release);
                self.revoked.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_holder_at_a_time_and_a_stale_token_releases_nothing() {
        let lease = Lease::default();
        let a = lease.try_claim().unwrap();
        assert!(lease.is_held() && lease.holds(a));
        assert_eq!(lease.try_claim(), None);
        lease.release(a);
        assert!(!lease.is_held());
        let b = lease.try_claim().unwrap();
        assert_ne!(a, b, "a token was reused");
        lease.release(a);
        assert!(lease.holds(b), "an old holder released the new one's lease");
    }

    /// A holder that never turns while events wait loses the lease; one
    /// that turns keeps it as long as it turns.
    #[test]
    fn a_holder_that_takes_no_events_is_revoked() {
        let lease = Arc::new(Lease::default());
        let stop = AtomicBool::new(false);
        let token = lease.try_claim().unwrap();
        lease.stand_aside(|| true, &stop);
        assert!(!lease.is_held() && !lease.holds(token));
        assert_eq!(lease.revoked(), 1);

        // A holder turning at every look keeps the lease until released.
        let token = lease.try_claim().unwrap();
        let looks = std::sync::atomic::AtomicU64::new(0);
        let turning = || {
            let n = looks.fetch_add(1, Ordering::Relaxed);
            if n < 5 {
                lease.turned();
            } else {
                lease.release(token);
            }
            true
        };
        lease.stand_aside(turning, &stop);
        assert_eq!(lease.revoked(), 1, "a turning holder was revoked");
        assert!(!lease.is_held());
    }

    #[test]
    fn a_release_or_a_stop_ends_the_wait() {
        let lease = Arc::new(Lease::default());
        let stop = Arc::new(AtomicBool::new(false));
        let token = lease.try_claim().unwrap();
        let (l, s) = (lease.clone(), stop.clone());
        let waiter = std::thread::spawn(move || l.stand_aside(|| false, &s));
        lease.release(token);
        waiter.join().unwrap();
        assert_eq!(lease.revoked(), 0);

        lease.try_claim().unwrap();
        let (l, s) = (lease.clone(), stop.clone());
        let waiter = std::thread::spawn(move || l.stand_aside(|| false, &s));
        stop.store(true, Ordering::SeqCst);
        lease.wake();
        waiter.join().unwrap();
        assert!(lease.is_held(), "a stop took the lease");
    }
}
