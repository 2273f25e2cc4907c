//! Who takes the events of the readiness fallback's epoll set
//! ([`readiness`](super::readiness)): its own thread, or tasks of the
//! tokio runtimes that run the sockets' tasks, each of which holds the
//! set's [`Lease`] (see [`readiness_tokio`](super::readiness_tokio)).
//!
//! One holder per runtime, and every runtime whose tasks wait in the set
//! holds it at once. A set shared by runtimes (the process-wide engine of
//! the thread pool is) is thus read by each of them: a socket's
//! readiness wakes every holder's runtime, and whichever takes the set's
//! events first serves them all, waking each request's task where it
//! runs. So a runtime's read, in a task or in its `block_on`'s future,
//! never waits on another runtime's polling: with one holder for the
//! whole set, a runtime busy in its tasks (its drive task queued behind
//! them) held every other runtime's readiness for 0.6-2.2 ms a time, and
//! one whose only thread a task held kept it until the revocation below,
//! 200-300 ms. (A read polled by another executor where a current-thread
//! runtime is only entered waits once, for one revocation; the thread
//! serves that runtime from then on.) The cost, with several
//! runtimes waiting in the set: each readiness wakes each of their
//! threads, parked in their reactors, where a set per runtime would wake
//! one; all but one find nothing to take (30 idle runtimes, each with a
//! read waiting, beside one doing 5,000 exchanges: 4 times the CPU and 8
//! times the context switches of one runtime reading the set for all,
//! about one switch per idle runtime per readiness; `docs/benchmarks.md`).
//! A program that wants one thread woken per readiness gives each
//! runtime its own engine (`AsyncEngine::new` there), whose set that
//! runtime alone reads.
//!
//! While a task holds the lease, the readiness thread stands aside: it
//! does not take the set's events (that would wake it for every event,
//! the cross-thread hand-over the lease exists to remove). While no
//! event waits it blocks until the set's descriptor is readable, without
//! taking anything and without a timer; while events wait, it looks
//! every tick ([`TICK`] in use) whether a holder takes them. Events
//! seen waiting at two ticks in a row with no turn of any holder's
//! between them and no new claim mean that no holder's runtime is taking
//! them (their threads are all blocked in tasks, or the runtimes are not
//! being run): the thread revokes every holder's lease and takes the
//! events itself, so readiness is never stranded behind runtimes that do
//! not run. A holder whose lease was revoked ends at its next poll; the
//! next request that waits from a task of a running runtime claims the
//! lease again for that runtime. The last holder's drop (its runtime shut
//! down, the engine gone) wakes the thread at once.
//!
//! A holder's task that has never been polled (spawned on a runtime that
//! is not run, or whose only thread blocks in the task that spawned it)
//! keeps its runtime from claiming the lease again until it is polled or
//! dropped: at most one such task waits per runtime, so a runtime that
//! never runs its holder costs one revocation, not one per request.
//!
//! A leaf: it uses nothing else in `aio`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
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

/// How many holders' runtimes [`Lease::claimable`] finds without a lock;
/// a runtime beyond them asks under the lock.
const KEYS_MIRRORED: usize = 8;

/// The right to take the set's events from a runtime's task: one holder
/// per runtime at most, any number of runtimes at once (see the
/// [module](self)).
#[derive(Debug)]
pub(crate) struct Lease {
    /// How often the standing-aside thread looks while events wait.
    tick: Duration,
    /// Leases given so far.
    claims: AtomicU64,
    /// How many hold the lease now; written with `state` locked, read
    /// without it.
    held: AtomicUsize,
    /// The keys of the first [`KEYS_MIRRORED`] holders' runtimes (0 for
    /// none), written with `state` locked and read without it: the
    /// question each request that waits asks, whether its runtime holds
    /// the lease already, is answered without the lock.
    holding_keys: [AtomicU64; KEYS_MIRRORED],
    /// The holders, and the tasks spawned and not yet polled.
    state: Mutex<Holders>,
    /// Signalled when the lease is released (or the set stops).
    changed: Condvar,
    /// Turns of the holders (takes of events from the set).
    turns: AtomicU64,
    /// Leases revoked from a holder that was not taking the events.
    revoked: AtomicU64,
}

/// A holder's task: its token and its runtime's key.
#[derive(Debug, Clone, Copy)]
struct Holder {
    token: u64,
    runtime: u64,
}

/// Who holds the lease.
#[derive(Debug, Default)]
struct Holders {
    /// The last token given (tokens are never reused, so a holder whose
    /// lease was revoked never takes a later one for its own).
    last: u64,
    /// The holders now.
    holding: Vec<Holder>,
    /// The holders' tasks spawned and not yet polled, held or not: their
    /// runtimes claim nothing more until they are (see the
    /// [module](self)).
    unpolled: Vec<Holder>,
}

impl Lease {
    /// A lease nobody holds, whose standing-aside thread looks every
    /// `tick` while events wait.
    pub(crate) fn new(tick: Duration) -> Lease {
        Lease {
            tick,
            claims: AtomicU64::new(0),
            held: AtomicUsize::new(0),
            holding_keys: Default::default(),
            state: Mutex::new(Holders::default()),
            changed: Condvar::new(),
            turns: AtomicU64::new(0),
            revoked: AtomicU64::new(0),
        }
    }

    /// The holders, locked.
    fn lock(&self) -> MutexGuard<'_, Holders> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a task holds the lease.
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire) != 0
    }

    /// Whether `token` is a holder's.
    #[cfg(test)]
    pub(crate) fn holds(&self, token: u64) -> bool {
        self.lock().holding.iter().any(|h| h.token == token)
    }

    /// Whether the runtime keyed `runtime` may claim the lease: none of
    /// its tasks holds it or waits unpolled.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn claimable(&self, runtime: u64) -> bool {
        let mirrored = |k: &AtomicU64| k.load(Ordering::Acquire) == runtime;
        if runtime != 0 && self.holding_keys.iter().any(mirrored) {
            return false;
        }
        let h = self.lock();
        let of = |x: &Holder| x.runtime == runtime;
        !h.holding.iter().any(of) && !h.unpolled.iter().any(of)
    }

    /// The lease for a new holder of the runtime keyed `runtime`, if
    /// that runtime may claim it ([`claimable`](Self::claimable)); its
    /// token. The new holder's task counts as unpolled until
    /// [`polled`](Self::polled).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_claim(&self, runtime: u64) -> Option<u64> {
        let mut h = self.lock();
        let of = |x: &Holder| x.runtime == runtime;
        if h.holding.iter().any(of) || h.unpolled.iter().any(of) {
            return None;
        }
        h.last += 1;
        let holder = Holder {
            token: h.last,
            runtime,
        };
        h.holding.push(holder);
        h.unpolled.push(holder);
        self.mirror(&h);
        self.claims.fetch_add(1, Ordering::Relaxed);
        Some(holder.token)
    }

    /// The task of `token`'s holder was polled, or dropped: its runtime
    /// may claim the lease again once it holds none.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn polled(&self, token: u64) {
        self.lock().unpolled.retain(|h| h.token != token);
    }

    /// [`polled`](Self::polled), then whether `token` is still a
    /// holder's, under one lock: what a holder's
    /// task asks at each poll.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn polled_holds(&self, token: u64) -> bool {
        let mut h = self.lock();
        if !h.unpolled.is_empty() {
            h.unpolled.retain(|x| x.token != token);
        }
        h.holding.iter().any(|x| x.token == token)
    }

    /// Leases given so far.
    pub(crate) fn claims(&self) -> u64 {
        self.claims.load(Ordering::Relaxed)
    }

    /// Gives the lease of `token` back, if it is still held, and wakes
    /// the thread if it ticks; returns whether it was held and nobody
    /// holds the lease now (the caller then makes the set readable, for a
    /// thread blocked on it, see [`stand_aside`](Self::stand_aside)).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn release(&self, token: u64) -> bool {
        let mut h = self.lock();
        let before = h.holding.len();
        h.holding.retain(|x| x.token != token);
        if h.holding.len() == before {
            return false;
        }
        self.mirror(&h);
        self.changed.notify_all();
        h.holding.is_empty()
    }

    /// A holder took events from the set (or found none).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn turned(&self) {
        self.turns.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes the holders `h` (locked) for the readers without the
    /// lock: their count, and the first ones' runtimes' keys.
    fn mirror(&self, h: &Holders) {
        self.held.store(h.holding.len(), Ordering::Release);
        for (i, slot) in self.holding_keys.iter().enumerate() {
            let key = h.holding.get(i).map_or(0, |x| x.runtime);
            slot.store(key, Ordering::Release);
        }
    }

    /// Leases revoked so far (see the [module](self)).
    pub(crate) fn revoked(&self) -> u64 {
        self.revoked.load(Ordering::Relaxed)
    }

    /// Wakes a thread standing aside, to see `stop`.
    pub(crate) fn wake(&self) {
        let _h = self.lock();
        self.changed.notify_all();
    }

    /// Revokes every holder's lease: events waited over two ticks with no
    /// turn of any of theirs since the claims counted `claims`. Nothing
    /// if a lease was claimed since (a new holder, not seen stale).
    fn revoke_all(&self, claims: u64) {
        let mut h = self.lock();
        if self.claims() != claims {
            return;
        }
        let n = h.holding.len() as u64;
        h.holding.clear();
        self.mirror(&h);
        self.revoked.fetch_add(n, Ordering::Relaxed);
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
        // The claims and turns when events were last seen waiting.
        let mut stale_at: Option<(u64, u64)> = None;
        loop {
            if !self.is_held() || stop.load(Ordering::SeqCst) {
                return;
            }
            if !waiting() {
                stale_at = None;
                // Looked at again after `waiting`, which may have read
                // back the nudge of a release or a stop made meanwhile.
                if !self.is_held() || stop.load(Ordering::SeqCst) {
                    return;
                }
                block();
                continue;
            }
            let h = self.lock();
            if !self.is_held() || stop.load(Ordering::SeqCst) {
                return;
            }
            let (h, timed) = self
                .changed
                .wait_timeout(h, self.tick)
                .unwrap_or_else(|e| e.into_inner());
            if !timed.timed_out() {
                continue;
            }
            // Asked unlocked: a holder may release meanwhile.
            drop(h);
            if !self.is_held() {
                return;
            }
            if !waiting() {
                stale_at = None;
                continue;
            }
            let now = (self.claims(), self.turns.load(Ordering::Relaxed));
            if stale_at != Some(now) {
                stale_at = Some(now);
                continue;
            }
            self.revoke_all(now.0);
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

    /// The key of the runtime the tests claim for.
    const RT: u64 = 7;

    /// More runtimes than the lock-free mirror holds: each holder's
    /// runtime is found holding, mirrored or not, and a released
    /// holder's runtime may claim again once its task was polled.
    #[test]
    fn holders_beyond_the_mirror_are_found_under_the_lock() {
        let lease = Lease::new(HOUR);
        let n = KEYS_MIRRORED as u64 + 3;
        let tokens: Vec<u64> = (1..=n).map(|rt| lease.try_claim(rt).unwrap()).collect();
        for rt in 1..=n {
            assert!(!lease.claimable(rt), "runtime {rt} holds the lease");
            assert_eq!(lease.try_claim(rt), None, "runtime {rt} claimed twice");
        }
        for &t in &tokens {
            lease.polled(t);
        }
        assert!(!lease.release(tokens[0]), "others still hold it");
        assert!(lease.claimable(1), "a released holder's runtime");
        assert!(!lease.claimable(n), "a holder past the mirror");
        for &t in &tokens[1..] {
            lease.release(t);
        }
        assert!(!lease.is_held() && (1..=n).all(|rt| lease.claimable(rt)));
    }

    /// Each runtime holds the lease at once, one holder each; the thread
    /// is told to look again only when the last releases; a revocation
    /// takes every holder's lease.
    #[test]
    fn one_holder_per_runtime_and_several_runtimes_at_once() {
        let lease = Lease::new(Duration::from_millis(1));
        let a = lease.try_claim(1).unwrap();
        let b = lease.try_claim(2).unwrap();
        assert_eq!(lease.try_claim(1), None, "a second holder of runtime 1");
        assert!(!lease.claimable(2));
        assert!(lease.holds(a) && lease.holds(b) && lease.is_held());
        assert!(!lease.release(a), "released as the last with b holding");
        assert!(lease.holds(b) && lease.is_held());
        assert!(lease.release(b), "b was the last holder");
        assert!(!lease.is_held());

        lease.polled(a);
        lease.polled(b);
        let a = lease.try_claim(1).unwrap();
        let b = lease.try_claim(2).unwrap();
        let stop = AtomicBool::new(false);
        lease.stand_aside(|| true, || unreachable!("events wait"), &stop);
        assert!(!lease.is_held() && !lease.holds(a) && !lease.holds(b));
        assert_eq!(lease.revoked(), 2);
        assert!(!lease.polled_holds(a) && lease.claimable(1));
    }

    #[test]
    fn one_holder_at_a_time_and_a_stale_token_releases_nothing() {
        let lease = Lease::new(HOUR);
        let a = lease.try_claim(RT).unwrap();
        assert!(lease.is_held() && lease.holds(a));
        assert_eq!(lease.try_claim(RT), None);
        assert!(lease.release(a));
        assert!(!lease.is_held());
        lease.polled(a);
        let b = lease.try_claim(RT).unwrap();
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
        let a = lease.try_claim(RT).unwrap();
        assert!(lease.release(a));
        assert_eq!(lease.try_claim(RT), None, "a second unpolled holder");
        lease.polled(a + 1);
        assert_eq!(lease.try_claim(RT), None, "another token marked it polled");
        lease.polled(a);
        let b = lease.try_claim(RT).unwrap();
        lease.polled(b);
        assert!(lease.release(b));
        assert!(
            lease.try_claim(RT).is_some(),
            "a polled holder kept the set"
        );
    }

    /// A holder that never turns while events wait loses the lease; one
    /// that turns keeps it as long as it turns.
    #[test]
    fn a_holder_that_takes_no_events_is_revoked() {
        let lease = Arc::new(Lease::new(Duration::from_millis(1)));
        let stop = AtomicBool::new(false);
        let token = lease.try_claim(RT).unwrap();
        lease.stand_aside(|| true, || unreachable!("events wait"), &stop);
        assert!(!lease.is_held() && !lease.holds(token));
        assert_eq!(lease.revoked(), 1);
        lease.polled(token);

        // A holder turning at every look keeps the lease until released.
        let token = lease.try_claim(RT).unwrap();
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
        let token = lease.try_claim(RT).unwrap();
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
            let token = lease.try_claim(RT).unwrap();
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
