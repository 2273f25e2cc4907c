//! How many threads create files and directories at once, adapted to the
//! creation rate the copy measures.
//!
//! # Why
//!
//! On ext4 without a journal, inodes freed in the last minutes are skipped
//! by a scan on every creation. In the minutes after a mass deletion,
//! threads creating files in one block group at once keep colliding on
//! the same free inode and scan again: three creators can then be several
//! times slower than one (`cp -r`'s single thread), while on a file system
//! in its usual state three are faster. A fixed choice loses in one state
//! or the other; a threshold on the cost of a creation was tried and lost
//! in the severe state.
//!
//! # How
//!
//! Creating is done under a [`Turn`] taken from [`Creators`], which lets
//! at most `limit` threads in at once. Every window of at least
//! [`WINDOW`] and [`MIN_COUNT`] creations, the rate (creations per second
//! of wall time) is compared with the previous window's: no worse (within
//! 5 %), and `limit` grows by one, up to the copy's threads (additive
//! increase); 25 % worse or more, and `limit` halves, down to one
//! (multiplicative decrease). So the copy settles near the concurrency at
//! which creating is fastest, and keeps probing as the state changes; in
//! the usual state it stays at every thread.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The shortest window the rate is measured over.
pub(crate) const WINDOW: Duration = Duration::from_millis(20);
/// The fewest creations a window holds before it is judged.
pub(crate) const MIN_COUNT: u64 = 64;

/// The gate every creating thread goes through.
pub(crate) struct Creators {
    state: Mutex<State>,
    turn_free: Condvar,
    max: usize,
}

struct State {
    limit: usize,
    inside: usize,
    window_start: Instant,
    window_count: u64,
    last_rate: Option<f64>,
}

impl Creators {
    /// A gate for `max` threads, open to all of them at first.
    pub(crate) fn new(max: usize) -> Creators {
        let max = max.max(1);
        Creators {
            state: Mutex::new(State {
                limit: max,
                inside: 0,
                window_start: Instant::now(),
                window_count: 0,
                last_rate: None,
            }),
            turn_free: Condvar::new(),
            max,
        }
    }

    /// Waits until fewer than `limit` threads are creating, then lets this
    /// one in until the turn is dropped.
    pub(crate) fn enter(&self) -> Turn<'_> {
        let mut s = self.state.lock().expect("creators lock");
        while s.inside >= s.limit {
            s = self.turn_free.wait(s).expect("creators lock");
        }
        s.inside += 1;
        Turn {
            gate: self,
            created: 0,
        }
    }

    /// How many threads may create at once now.
    #[cfg(test)]
    fn limit(&self) -> usize {
        self.state.lock().expect("creators lock").limit
    }

    fn leave(&self, created: u64, now: Instant) {
        let mut s = self.state.lock().expect("creators lock");
        s.inside -= 1;
        s.window_count += created;
        let elapsed = now.duration_since(s.window_start);
        if elapsed >= WINDOW && s.window_count >= MIN_COUNT {
            let rate = s.window_count as f64 / elapsed.as_secs_f64();
            s.limit = next_limit(s.limit, self.max, s.last_rate, rate);
            s.last_rate = Some(rate);
            s.window_start = now;
            s.window_count = 0;
        }
        drop(s);
        self.turn_free.notify_all();
    }
}

/// The limit after a window whose rate was `rate` (see the module doc).
fn next_limit(limit: usize, max: usize, last: Option<f64>, rate: f64) -> usize {
    match last {
        Some(last) if rate < last * 0.75 => (limit / 2).max(1),
        Some(last) if rate >= last * 0.95 => (limit + 1).min(max),
        Some(_) => limit,
        None => limit,
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

    #[test]
    fn grows_while_the_rate_holds_and_halves_when_it_falls() {
        assert_eq!(next_limit(3, 3, None, 100.0), 3);
        assert_eq!(next_limit(3, 3, Some(100.0), 99.0), 3);
        assert_eq!(next_limit(3, 3, Some(100.0), 50.0), 1);
        assert_eq!(next_limit(1, 3, Some(50.0), 60.0), 2);
        assert_eq!(next_limit(2, 3, Some(60.0), 30.0), 1);
        assert_eq!(next_limit(1, 3, Some(30.0), 10.0), 1);
        // Between 75 % and 95 % of the last rate: unchanged.
        assert_eq!(next_limit(2, 3, Some(100.0), 80.0), 2);
    }

    #[test]
    fn at_most_limit_threads_are_inside() {
        let gate = Creators::new(4);
        {
            let mut s = gate.state.lock().unwrap();
            s.limit = 2;
        }
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
