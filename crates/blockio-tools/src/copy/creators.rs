//! How many threads create files and directories at once, chosen from the
//! creation rates the copy measures and the CPU time a creation costs.
//!
//! # Why
//!
//! On ext4 without a journal, a free inode whose `dtime` is less than 60 s
//! old (or 360 s old while its inode-table block is dirty, as creating a
//! neighbour makes it) is skipped on every creation, by a scan from the
//! start of the block group that reads the `dtime` of each free inode it
//! passes; in a group whose free inodes are all recent the scan crosses
//! the whole group. In the minutes after a mass deletion a creation there
//! costs ten times the CPU or more, and threads creating in one
//! block group at once keep colliding on the same free inode and scan
//! again: three creators can then be several times slower than one (`cp
//! -r`'s single thread), while on a file system in its usual state three
//! are faster. A fixed choice loses in one state or the other. Rules that
//! start with every thread and back off when the rate falls do not recover
//! in that state: the rate is low from the first window, so it never
//! falls, and once concurrent creators have worked in a block group a
//! single creator there stays slow for the rest of the copy
//! (`docs/benchmarks.md`, "Creators of a copy").
//!
//! # How
//!
//! Creating is done under a [`Turn`] taken from [`Creators`], which lets
//! at most `limit` threads in at once and counts the creations and the
//! creating threads' CPU time. The copy starts with one creator. After
//! [`RECHECK`] of creating alone it looks at what a creation cost:
//!
//! * more than [`SCANNING`] of CPU on average: the file system is scanning
//!   past recently freed inodes, where concurrent creators do lasting
//!   harm, so the copy goes on alone and looks again after a wait twice
//!   as long;
//! * otherwise it probes every thread for one window (at least
//!   [`PROBE_WINDOW`] and [`PROBE_COUNT`] creations), against one
//!   creator's rate over the window before. Every thread at least [`GAIN`]
//!   times as fast as one: concurrency pays, and every thread creates
//!   until a window (at least [`WINDOW`] and [`MIN_COUNT`] creations) is
//!   [`FALL`] of the one before or slower. Otherwise the copy goes on with
//!   one creator and looks again after a wait twice as long as the one
//!   before; a fall starts such a wait too.
//!
//! Nothing is probed early because a probe is not free: in the state after
//! a deletion, the damage concurrent creators do to a block group outlives
//! them, so even one probe window that finds one creator faster slows every
//! window after it. A probe at the start of the copy did that on most
//! copies of tree (a) 300 s after a deletion, and a probe after a second
//! on most copies 60 s after one, which last several seconds; the CPU
//! cost of a creation tells that state apart from the usual one without
//! creating concurrently in it. In the usual state creating alone for the
//! first second costs a few percent on tree (a). The measurements are in
//! `docs/benchmarks.md` ("Creators of a copy").

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
/// (doubled after each probe that loses, each fall, and each look that
/// finds the file system scanning).
pub(crate) const RECHECK: Duration = Duration::from_secs(1);
/// The CPU time a creation costs its thread, on average over a stretch of
/// creating alone, above which the file system is taken to be scanning
/// past recently freed inodes and every thread is not probed: it lies
/// between the two states' costs measured on ext4 (`docs/benchmarks.md`);
/// a creation that waits for a device or a server costs little CPU, so
/// slow storage is still probed.
pub(crate) const SCANNING: Duration = Duration::from_micros(100);

/// The gate every creating thread goes through.
pub(crate) struct Creators {
    state: Mutex<GateState>,
    turn_free: Condvar,
    max: usize,
}

struct GateState {
    inside: usize,
    /// When the current window began: at the first creation, not when the
    /// gate was made, so the walk's start is not counted as slow creating.
    window_start: Option<Instant>,
    /// What the current window's creations cost so far.
    window: Cost,
    phase: Phase,
}

/// What a stretch of creating cost: creations, and the creating threads'
/// CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Cost {
    created: u64,
    cpu: Duration,
}

impl Cost {
    /// This cost and `more`.
    fn add(self, more: Cost) -> Cost {
        Cost {
            created: self.created + more.created,
            cpu: self.cpu + more.cpu,
        }
    }

    /// Whether a creation cost more than [`SCANNING`] of CPU on average.
    fn scanning(self) -> bool {
        self.created > 0 && self.cpu.as_nanos() > SCANNING.as_nanos() * u128::from(self.created)
    }
}

/// One judged window: creations per second, and what they cost.
#[derive(Debug, Clone, Copy)]
struct Window {
    rate: f64,
    cost: Cost,
}

/// Where the choice of how many may create stands; it decides the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Measuring every thread (`limit` max) against one creator's `one`.
    ProbeAll { one: f64, recheck: Duration },
    /// Every thread creates; a window whose rate falls by a quarter ends it.
    All { last_rate: f64, recheck: Duration },
    /// One creator is faster, or the file system is scanning; at `until`
    /// the `cost` of creating alone since this phase began decides whether
    /// every thread is probed.
    Alone {
        until: Instant,
        recheck: Duration,
        cost: Cost,
    },
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
                cost: Cost::default(),
            }
        };
        Creators {
            state: Mutex::new(GateState {
                inside: 0,
                window_start: None,
                window: Cost::default(),
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
        // The CPU clock is a system call: read it after the lock is let go,
        // so that no other thread entering or leaving waits for it.
        drop(s);
        Turn {
            gate: self,
            created: 0,
            cpu_at_entry: thread_cpu(),
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

    fn leave(&self, created: u64, cpu: Duration, now: Instant) {
        let mut s = self.state.lock().expect("creators lock");
        s.inside -= 1;
        s.window = s.window.add(Cost { created, cpu });
        let start = s.window_start.unwrap_or(now);
        let elapsed = now.duration_since(start);
        let (least, fewest) = match s.phase {
            Phase::ProbeAll { .. } => (PROBE_WINDOW, PROBE_COUNT),
            Phase::All { .. } | Phase::Alone { .. } => (WINDOW, MIN_COUNT),
        };
        if elapsed >= least && s.window.created >= fewest {
            let window = Window {
                rate: s.window.created as f64 / elapsed.as_secs_f64(),
                cost: s.window,
            };
            s.phase = next(s.phase, window, now);
            s.window_start = Some(now);
            s.window = Cost::default();
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

/// The phase after `window`, ending at `now` (see the module doc).
fn next(phase: Phase, window: Window, now: Instant) -> Phase {
    let alone = |recheck: Duration| Phase::Alone {
        until: now + recheck,
        recheck: recheck * 2,
        cost: Cost::default(),
    };
    let rate = window.rate;
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
        Phase::Alone {
            until,
            recheck,
            cost,
        } => {
            let cost = cost.add(window.cost);
            if now < until {
                Phase::Alone {
                    until,
                    recheck,
                    cost,
                }
            } else if cost.scanning() {
                alone(recheck)
            } else {
                Phase::ProbeAll { one: rate, recheck }
            }
        }
    }
}

/// The CPU time this thread has used, in the kernel and out of it.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    // A thread's CPU clock is never negative, so the conversion holds.
    Duration::try_from(t).unwrap_or_default()
}

/// A thread's permission to create; counts what it created and the CPU
/// time it spent doing so.
pub(crate) struct Turn<'a> {
    gate: &'a Creators,
    created: u64,
    cpu_at_entry: Duration,
}

impl Turn<'_> {
    /// Counts `n` creations made in this turn.
    pub(crate) fn created(&mut self, n: u64) {
        self.created += n;
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let cpu = thread_cpu().saturating_sub(self.cpu_at_entry);
        self.gate.leave(self.created, cpu, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of 100 creations at `rate` per second, each costing `us`
    /// µs of CPU.
    fn window(rate: f64, us: u64) -> Window {
        Window {
            rate,
            cost: Cost {
                created: 100,
                cpu: Duration::from_micros(100 * us),
            },
        }
    }

    /// A window as in the usual state: 10 µs a creation.
    fn usual(rate: f64) -> Window {
        window(rate, 10)
    }

    /// One usual window of a gate for `max` threads: the next phase and
    /// its limit.
    fn step(phase: Phase, max: usize, rate: f64, now: Instant) -> (Phase, usize) {
        let p = next(phase, usual(rate), now);
        (p, p.limit(max))
    }

    /// The phase alone until `until`, with nothing counted yet.
    fn alone(until: Instant, recheck: Duration) -> Phase {
        Phase::Alone {
            until,
            recheck,
            cost: Cost::default(),
        }
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
        // A quarter slower: one creator until the next look.
        assert_eq!(step(all, 3, 70.0, t), (alone(t + RECHECK, RECHECK * 2), 1));
    }

    #[test]
    fn a_copy_creates_alone_for_a_recheck_then_probes_every_thread() {
        let gate = Creators::new(3);
        assert_eq!(gate.limit(), 1);
        let Phase::Alone {
            until,
            recheck,
            cost,
        } = gate.state.lock().unwrap().phase
        else {
            panic!("a new gate is not alone");
        };
        assert_eq!((recheck, cost), (RECHECK * 2, Cost::default()));
        // Windows before `until` keep one creator and add up their cost.
        let (p, l) = step(alone(until, recheck), 3, 1000.0, until - RECHECK / 2);
        assert_eq!(l, 1);
        let expect = Cost {
            created: 100,
            cpu: Duration::from_micros(1000),
        };
        assert_eq!(
            p,
            Phase::Alone {
                until,
                recheck,
                cost: expect
            }
        );
        // At `until`, every thread is probed against the last rate alone.
        let (p, l) = step(p, 3, 1000.0, until);
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
    fn creations_that_cost_more_than_scanning_keep_one_creator_and_back_off() {
        let t = Instant::now();
        let until = t + RECHECK;
        // 100 creations at 150 µs each, then 100 at 10 µs: 80 µs on
        // average, so every thread is probed.
        let slow = window(1000.0, 150);
        let p = next(alone(until, RECHECK * 2), slow, t);
        assert_eq!(p.limit(3), 1);
        assert_eq!(step(p, 3, 1000.0, until).1, 3);
        // Scanning over the whole stretch: alone again, and the wait after
        // this one is twice as long.
        let p = next(next(alone(until, RECHECK * 2), slow, t), slow, until);
        assert_eq!(p.limit(3), 1);
        assert_eq!(p, alone(until + RECHECK * 2, RECHECK * 4));
        // A cost of exactly SCANNING per creation is not scanning.
        let edge = Cost {
            created: 10,
            cpu: SCANNING * 10,
        };
        assert!(!edge.scanning());
        assert!(Cost {
            created: 10,
            cpu: SCANNING * 10 + Duration::from_nanos(1),
        }
        .scanning());
        assert!(!Cost::default().scanning());
    }

    #[test]
    fn a_slower_probe_of_every_thread_keeps_one_creator_and_backs_off() {
        let t = Instant::now();
        let probe = Phase::ProbeAll {
            one: 1000.0,
            recheck: RECHECK,
        };
        let (p, l) = step(probe, 3, 400.0, t);
        assert_eq!(l, 1);
        assert_eq!(p, alone(t + RECHECK, RECHECK * 2));
        // Before `until`, windows stay at one creator.
        let (p, l) = step(p, 3, 900.0, t + RECHECK / 2);
        assert_eq!(l, 1);
        // At `until`, every thread is probed again against the last rate
        // alone; losing again waits twice as long.
        let later = t + RECHECK;
        let (again, l) = step(p, 3, 900.0, later);
        assert_eq!(l, 3);
        let (p, l) = step(again, 3, 500.0, later);
        assert_eq!(l, 1);
        assert_eq!(p, alone(later + RECHECK * 2, RECHECK * 4));
    }

    #[test]
    fn a_turn_counts_the_cpu_time_its_thread_spent() {
        let gate = Creators::new(2);
        {
            let mut turn = gate.enter();
            turn.created(1);
            // Until the thread's own clock has run 5 ms, however long a
            // busy machine makes that take.
            let spin = thread_cpu();
            while thread_cpu() - spin < Duration::from_millis(5) {
                std::hint::black_box(spin);
            }
        }
        let s = gate.state.lock().unwrap();
        assert_eq!(s.window.created, 1);
        assert!(
            s.window.cpu >= Duration::from_millis(5),
            "{:?}",
            s.window.cpu
        );
        assert!(
            s.window.cpu <= Duration::from_millis(100),
            "{:?}",
            s.window.cpu
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
