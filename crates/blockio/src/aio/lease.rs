//! Who takes the events of the readiness fallback's epoll set
//! ([`readiness`](super::readiness)): its own thread, or a task of the
//! tokio runtime that runs the sockets' tasks, which holds the set's
//! [`Lease`] (see [`readiness_tokio`](super::readiness_tokio)).
//!
//! While a task holds the lease, the readiness thread stands aside: it
//! does not take the set's events (that would wake it for every event,
//! the cross-thread hand-over the lease exists to remove). While no
//! event waits it blocks until the set's descriptor is readable, without
//! taking anything and without a timer; while events wait, it looks
//! every tick ([`TICK`] in use) whether the holder takes them. Events
//! seen waiting at two ticks in a row with no turn of the holder's
//! between them mean that the holder's runtime is not taking them (its
//! threads are all blocked in tasks, or the runtime is not being run):
//! the thread revokes the lease and takes the events itself, so
//! readiness is never stranded behind a runtime that does not run. A
//! holder whose lease was revoked ends at its next poll; the next
//! request that waits from a task of a running runtime claims the lease
//! again. The holder's drop (its runtime shut down, the engine gone)
//! releases the lease and wakes the thread at once.
//!
//! A holder's task that has never been polled (spawned on a runtime that
//! is not run, or whose only thread blocks in the task that spawned it)
//! keeps the set from being claimed again until it is polled or dropped:
//! at most one such task waits per set, so a runtime that never runs its
//! holder costs one revocation, not one per request.
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
/// looks only while events wait; an idle set costs it no wake-up.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The right to take the set's events from a runtime's task.
#[derive(Debug)]
pub(crate) struct Lease {
    /// How often the standing-aside thread looks while events wait.
    tick: Duration,
    /// The token of a holder's task spawned and not yet polled, 0 if
    /// none: no claim is given while there is one (see the
    /// [module](self)).
    unpolled: AtomicU64,
    /// Leases given so far.
    claims: AtomicU64,
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
    /// A lease nobody holds, whose standing-aside thread looks every
    /// `tick` while events wait.
    pub(crate) fn new(tick: Duration) -> Lease {
        Lease {
            tick,
            unpolled: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            holder: AtomicU64::new(0),
            state: Mutex::new(0),
            changed: Condvar::new(),
            turns: AtomicU64::new(0),
            revoked: AtomicU64::new(0),
        }
    }

    /// Whether a task holds the lease.
    pub(crate) fn is_held(&self) -> bool {
        self.holder.load(Ordering::Acquire) != 0
    }

    /// Whether `token` is the holder's.
    pub(crate) fn holds(&self, token: u64) -> bool {
        self.holder.load(Ordering::Acquire) == token
    }

    /// The lease for a new holder, if nobody holds it and no earlier
    /// holder's task waits unpolled; its token. The new holder's task
    /// counts as unpolled until [`polled`](Self::polled).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_claim(&self) -> Option<u64> {
        let mut last = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_held() || self.unpolled.load(Ordering::Acquire) != 0 {
            return None;
        }
        *last += 1;
        self.holder.store(*last, Ordering::Release);
        self.unpolled.store(*last, Ordering::Release);
        self.claims.fetch_add(1, Ordering::Relaxed);
        Some(*last)
    }

    /// The task of `token`'s holder was polled, or dropped: the lease may
    /// be claimed again once nobody holds it.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn polled(&self, token: u64) {
        let _ = self
            .unpolled
            .compare_exchange(token, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Leases given so far.
    pub(crate) fn claims(&self) -> u64 {
        self.claims.load(Ordering::Relaxed)
    }

    /// Gives the lease of `token` back, if it is still the holder's, and
    /// wakes the thread if it ticks; returns whether it was the holder's
    /// (the caller then makes the set readable, for a thread blocked on
    /// it, see [`stand_aside`](Self::stand_aside)).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn release(&self, token: u64) -> bool {
        let _last = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.holds(token);
        if held {
            self.holder.store(0, Ordering::Release);
            self.changed.notify_all();
        }
        held
    }

    /// The holder took events from the set (or found none).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn turned(&self) {
        self.turns.fetch_add(1, Ordering::Relaxed);
    }

    /// Leases revoked so far (see the [module](self)).
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
    /// holder's), or once `stop` is set. While no event waits, `block`
    /// waits until one may (the set's descriptor readable: whoever
    /// releases the lease or sets `stop` must make it so).
    pub(crate) fn stand_aside(
        &self,
        waiting: impl Fn() -> bool,
        block: impl Fn(),
        stop: &AtomicBool,
    ) {
        // The holder and its turns when events were last seen waiting.
        let mut stale_at: Option<(u64, u64)> = None;
        loop {
            let holder = self.holder.load(Ordering::Acquire);
            if holder == 0 || stop.load(Ordering::SeqCst) {
                return;
            }
            if !waiting() {
                stale_at = None;
                // Looked at again after `waiting`, which may have read
                // back the wake-up of a release made meanwhile.
                if !self.is_held() {
                    return;
                }
                block();
                continue;
            }
            let last = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !self.is_held() || stop.load(Ordering::SeqCst) {
                return;
            }
            let (last, timed) = self
                .changed
                .wait_timeout(last, self.tick)
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
    use std::sync::{mpsc, Arc};

    /// A tick no test waits out: a wait that ends did not end by it.
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn one_holder_at_a_time_and_a_stale_token_releases_nothing() {
        let lease = Lease::new(HOUR);
        let a = lease.try_claim().unwrap();
        assert!(lease.is_held() && lease.holds(a));
        assert_eq!(lease.try_claim(), None);
        assert!(lease.release(a));
        assert!(!lease.is_held());
        lease.polled(a);
        let b = lease.try_claim().unwrap();
        assert_ne!(a, b, "a token was reused");
        assert!(!lease.release(a), "a stale token released");
        assert!(lease.holds(b), "an old holder released the new one's lease");
        assert_eq!(lease.claims(), 2);
    }

    /// A holder whose task was never polled keeps the lease from being
    /// claimed again after it is lost, until its task is polled.
    #[test]
    fn no_claim_while_a_holders_task_waits_unpolled() {
        let lease = Lease::new(HOUR);
        let a = lease.try_claim().unwrap();
        assert!(lease.release(a));
        assert_eq!(lease.try_claim(), None, "a second unpolled holder");
        lease.polled(a + 1);
        assert_eq!(lease.try_claim(), None, "another token marked it polled");
        lease.polled(a);
        let b = lease.try_claim().unwrap();
        lease.polled(b);
        assert!(lease.release(b));
        assert!(lease.try_claim().is_some(), "a polled holder kept the set");
    }

    /// A holder that never turns while events wait loses the lease; one
    /// that turns keeps it as long as it turns.
    #[test]
    fn a_holder_that_takes_no_events_is_revoked() {
        let lease = Arc::new(Lease::new(Duration::from_millis(1)));
        let stop = AtomicBool::new(false);
        let token = lease.try_claim().unwrap();
        lease.stand_aside(|| true, || unreachable!("events wait"), &stop);
        assert!(!lease.is_held() && !lease.holds(token));
        assert_eq!(lease.revoked(), 1);
        lease.polled(token);

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
        lease.stand_aside(turning, || unreachable!("events wait"), &stop);
        assert_eq!(lease.revoked(), 1, "a turning holder was revoked");
        assert!(!lease.is_held());
    }

    /// While events wait the thread ticks (an hour here): a release ends
    /// that wait at once.
    #[test]
    fn a_release_ends_the_wait_between_ticks() {
        let lease = Arc::new(Lease::new(HOUR));
        let stop = Arc::new(AtomicBool::new(false));
        let token = lease.try_claim().unwrap();
        let (looked_tx, looked) = mpsc::channel();
        let (l, s) = (lease.clone(), stop.clone());
        let waiter = std::thread::spawn(move || {
            let waiting = || {
                let _ = looked_tx.send(());
                true
            };
            l.stand_aside(waiting, || unreachable!("events wait"), &s)
        });
        looked.recv().unwrap();
        assert!(lease.release(token));
        waiter.join().unwrap();
        assert_eq!(lease.revoked(), 0);
    }

    /// While no event waits the thread blocks (never ticks); a release
    /// or a stop, each followed by what makes the set readable, ends it.
    #[test]
    fn a_release_or_a_stop_ends_the_block() {
        let lease = Arc::new(Lease::new(HOUR));
        let stop = Arc::new(AtomicBool::new(false));
        for by_stop in [false, true] {
            let token = lease.try_claim().unwrap();
            lease.polled(token);
            let (readable, blocked) = mpsc::channel::<()>();
            let (entered_tx, entered) = mpsc::channel();
            let (l, s) = (lease.clone(), stop.clone());
            let waiter = std::thread::spawn(move || {
                let block = || {
                    entered_tx.send(()).unwrap();
                    blocked.recv().unwrap();
                };
                l.stand_aside(|| false, block, &s)
            });
            entered.recv().unwrap();
            if by_stop {
                stop.store(true, Ordering::SeqCst);
            } else {
                lease.release(token);
            }
            readable.send(()).unwrap();
            waiter.join().unwrap();
            assert_eq!(lease.is_held(), by_stop, "a stop took the lease");
        }
        assert_eq!(lease.revoked(), 0);
    }
}
