//! How many threads create files and directories at once, chosen from the
//! creation rates the copy measures.
//!
//! # Why
//!
//! On ext4 without a journal, inodes freed in the last minutes are skipped
//! by a scan on every creation. In the minutes after a mass deletion,
//! threads creating files in one block group at once keep colliding on
//! the same free inode and scan again: three creators can then be several
//! times slower than one (`cp -r`'s single thread), while on a file system
//! in its usual state three are faster. A fixed choice loses in one state
//! or the other. Rules that start with every thread and back off when the
//! rate falls do not recover in that state: the rate is low from the first
//! window, so it never falls, and once concurrent creators have worked in
//! a block group a single creator there stays slow for the rest of the
//! copy (`docs/benchmarks.md`, the 5c8cb85 entry).
//!
//! # How
//!
//! Creating is done under a [`Turn`] taken from [`Creators`], which lets
//! at most `limit` threads in at once. The copy starts with one creator,
//! and only after [`RECHECK`] of creating alone does it probe every thread
//! for one window (at least [`PROBE_WINDOW`] and [`PROBE_COUNT`]
//! creations), against one creator's rate over the window before:
//!
//! * every thread at least [`GAIN`] times as fast as one: concurrency pays,
//!   and every thread creates until a window (at least [`WINDOW`] and
//!   [`MIN_COUNT`] creations) is [`FALL`] of the one before or slower;
//! * otherwise the copy goes on with one creator, and probes every thread
//!   again after a wait twice as long as the one before; a fall starts
//!   such a wait too.
//!
//! The probe waits because it is not free: in the state after a deletion,
//! the damage concurrent creators do to a block group outlives them, so
//! even one probe window that finds one creator faster slows every window
//! after it. A probe at the start of the copy did that on most copies of
//! tree (a) 300 s after a deletion, while a copy that finishes within its
//! first second gains little from creating concurrently in any state
//! measured. Measured (`docs/benchmarks.md`, the 2026-11-22 entries "one
//! creator until concurrency pays" and "the first probe after a second"):
//! 300 s after deleting 300,000 files, tree (a) took 0.33-1.26 s this way
//! against 0.88-2.10 s with a probe at the start; in the usual state
//! creating alone costs about 5% (0.44 s against 0.41 s, medians of
//! seven).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The shortest window the rate is measured over once concurrency paid.
pub(crate) const WINDOW: Duration = Duration::from_millis(20);
/// The fewest creations such a window holds before it is judged.
pub(crate) const MIN_COUNT: u64 = 64;
/// The shortest window of a probe of every thread.
pub(crate) const PROBE_WINDOW: Duration = Duration::from_millis(40);
/// The fewest creations a probe window holds.
pub(crate) const PROBE_COUNT: u64 = 128;
/// How much faster than one creator every thread must be for the copy to
/// create concurrently: a tie goes to one creator, which is never slower
/// than `cp -r`.
pub(crate) const GAIN: f64 = 1.25;
/// A window this much slower than the one before, with every thread
/// creating, sends the copy back to one creator.
pub(crate) const FALL: f64 = 0.75;
/// How long a copy creates alone before it first probes every thread
/// (doubled after each probe that loses, and after each fall).
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// The gate every creating thread goes through.
pub(crate) struct Creators {
    state: Mutex<State>,
    turn_free: Condvar,
    max: usize,
}

struct State {
    inside: usize,
    /// When the current window began: at the first creation, not when the
    /// gate was made, so the walk's start is not counted as slow creating.
    window_start: Option<Instant>,
    window_count: u64,
    phase: Phase,
}

/// Where the choice of how many may create stands; it decides the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Measuring every thread (`limit` max) against one creator's `one`.
    ProbeAll { one: f64, recheck: Duration },
    /// Every thread creates; a window whose rate falls by a quarter ends it.
    All { last_rate: f64, recheck: Duration },
    /// One creator is faster; every thread is probed again at `until`.
    Alone { until: Instant, recheck: Duration },
}

impl Creators {
    /// A gate for `max` threads, starting with one creator for
    /// [`RECHECK`].
    pub(crate) fn new(max: usize) -> Creators {
        let max = max.max(1);
        let phase = if max == 1 {
            Phase::All {
                last_rate: 0.0,
                recheck: RECHECK,
            }
        } else {
            Phase::Alone {
                until: Instant::now() + RECHECK,
                recheck: RECHECK * 2,
            }
        };
        Creators {
            state: Mutex::new(State {
                inside: 0,
                window_start: None,
                window_count: 0,
                phase,
            }),
            turn_free: Condvar::new(),
            max,
        }
    }

    /// Waits until fewer than `limit` threads are creating, then lets this
    /// one in until the turn is dropped.
    pub(crate) fn enter(&self) -> Turn<'_> {
        let mut s = self.state.lock().expect("creators lock");
        while s.inside >= s.phase.limit(self.max) {
            s = self.turn_free.wait(s).expect("creators lock");
        }
        s.inside += 1;
        if s.window_start.is_none() {
            s.window_start = Some(Instant::now());
        }
        Turn {
            gate: self,
            created: 0,
        }
    }

    /// How many threads may create at once now.
    #[cfg(test)]
    fn limit(&self) -> usize {
        self.state
            .lock()
            .expect("creators lock")
            .phase
            .limit(self.max)
    }

    fn leave(&self, created: u64, now: Instant) {
        let mut s = self.state.lock().expect("creators lock");
        s.inside -= 1;
        s.window_count += created;
        let start = s.window_start.unwrap_or(now);
        let elapsed = now.duration_since(start);
        let (least, fewest) = match s.phase {
            Phase::ProbeAll { .. } => (PROBE_WINDOW, PROBE_COUNT),
            Phase::All { .. } | Phase::Alone { .. } => (WINDOW, MIN_COUNT),
        };
        if elapsed >= least && s.window_count >= fewest {
            let rate = s.window_count as f64 / elapsed.as_secs_f64();
            s.phase = next(s.phase, rate, now);
            s.window_start = Some(now);
            s.window_count = 0;
        }
        drop(s);
        self.turn_free.notify_all();
    }
}

impl Phase {
    /// How many of `max` threads may create at once in this phase.
    fn limit(self, max: usize) -> usize {
        match self {
            Phase::Alone { .. } => 1,
            Phase::ProbeAll { .. } | Phase::All { .. } => max,
        }
    }
}

/// The phase after a window whose rate was `rate`, ending at `now` (see
/// the module doc).
fn next(phase: Phase, rate: f64, now: Instant) -> Phase {
    let alone = |recheck: Duration| Phase::Alone {
        until: now + recheck,
        recheck: recheck * 2,
    };
    match phase {
        Phase::ProbeAll { one, recheck } if rate >= one * GAIN => Phase::All {
            last_rate: rate,
            recheck,
        },
        Phase::All { last_rate, recheck } if rate >= last_rate * FALL => Phase::All {
            last_rate: rate,
            recheck,
        },
        Phase::ProbeAll { recheck, .. } | Phase::All { recheck, .. } => alone(recheck),
        Phase::Alone { until, recheck } if now >= until => Phase::ProbeAll { one: rate, recheck },
        alone @ Phase::Alone { .. } => alone,
    }
}

/// A thread's permission to create; counts what it created.
pub(crate) struct Turn<'a> {
    gate: &'a Creators,
    created: u64,
}

impl Turn<'_> {
    /// Counts `n` creations made in this turn.
    pub(crate) fn created(&mut self, n: u64) {
        self.created += n;
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.gate.leave(self.created, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One window of a gate for `max` threads: the next phase and its limit.
    fn step(phase: Phase, max: usize, rate: f64, now: Instant) -> (Phase, usize) {
        let p = next(phase, rate, now);
        (p, p.limit(max))
    }

    #[test]
    fn every_thread_creates_until_the_rate_falls_by_a_quarter() {
        let t = Instant::now();
        let all = Phase::All {
            last_rate: 100.0,
            recheck: RECHECK,
        };
        // Slower, but by less than a quarter: every thread goes on.
        assert_eq!(
            step(all, 3, 80.0, t),
            (
                Phase::All {
                    last_rate: 80.0,
                    recheck: RECHECK
                },
                3
            )
        );
        // A quarter slower: one creator until the next probe.
        assert_eq!(
            step(all, 3, 70.0, t),
            (
                Phase::Alone {
                    until: t + RECHECK,
                    recheck: RECHECK * 2
                },
                1
            )
        );
    }

    #[test]
    fn a_copy_creates_alone_for_a_recheck_then_probes_every_thread() {
        let gate = Creators::new(3);
        assert_eq!(gate.limit(), 1);
        let Phase::Alone { until, recheck } = gate.state.lock().unwrap().phase else {
            panic!("a new gate is not alone");
        };
        assert_eq!(recheck, RECHECK * 2);
        // Windows before `until` keep one creator.
        let alone = Phase::Alone { until, recheck };
        assert_eq!(step(alone, 3, 1000.0, until - RECHECK / 2), (alone, 1));
        // At `until`, every thread is probed against the last rate alone.
        let (p, l) = step(alone, 3, 1000.0, until);
        assert_eq!(l, 3);
        assert_eq!(
            p,
            Phase::ProbeAll {
                one: 1000.0,
                recheck
            }
        );
        // Every thread at least GAIN times as fast: every thread creates.
        assert_eq!(
            step(p, 3, 1500.0, until),
            (
                Phase::All {
                    last_rate: 1500.0,
                    recheck
                },
                3
            )
        );
        // Faster, but by less than GAIN: one creator.
        assert_eq!(step(p, 3, 1200.0, until).1, 1);
    }

    #[test]
    fn a_slower_probe_of_every_thread_keeps_one_creator_and_backs_off() {
        let t = Instant::now();
        let probe = Phase::ProbeAll {
            one: 1000.0,
            recheck: RECHECK,
        };
        let (alone, l) = step(probe, 3, 400.0, t);
        assert_eq!(l, 1);
        assert_eq!(
            alone,
            Phase::Alone {
                until: t + RECHECK,
                recheck: RECHECK * 2
            }
        );
        // Before `until`, windows stay at one creator.
        assert_eq!(step(alone, 3, 900.0, t + RECHECK / 2), (alone, 1));
        // At `until`, every thread is probed again against the last rate
        // alone; losing again waits twice as long.
        let (again, l) = step(alone, 3, 900.0, t + RECHECK);
        assert_eq!(l, 3);
        let later = t + RECHECK;
        let (alone2, l) = step(again, 3, 500.0, later);
        assert_eq!(l, 1);
        assert_eq!(
            alone2,
            Phase::Alone {
                until: later + RECHECK * 2,
                recheck: RECHECK * 4
            }
        );
    }

    #[test]
    fn a_gate_for_one_thread_never_probes() {
        let gate = Creators::new(1);
        assert_eq!(gate.limit(), 1);
        assert!(matches!(
            gate.state.lock().unwrap().phase,
            Phase::All { .. }
        ));
    }

    #[test]
    fn at_most_limit_threads_are_inside() {
        let gate = Creators::new(2);
        gate.state.lock().unwrap().phase = Phase::All {
            last_rate: 0.0,
            recheck: RECHECK,
        };
        let inside = std::sync::atomic::AtomicUsize::new(0);
        let most = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..8 {
                sc.spawn(|| {
                    for _ in 0..50 {
                        let _t = gate.enter();
                        let n = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        most.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        });
        // No turn counted a creation, so no window was judged: still 2.
        assert_eq!(gate.limit(), 2);
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    }
}
