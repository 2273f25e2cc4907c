//! A counter that many threads bump without sharing a cache line.
//!
//! Every read an async engine serves on the polling thread is counted
//! ([`AsyncEngine::served_inline`](super::AsyncEngine::served_inline)).
//! One shared atomic there is written by every worker thread of the
//! executor, once a read: the line it sits on moves between cores at each
//! increment (and with it the engine's other fields, which every poll
//! reads). Each thread adds to a slot of its own instead, and a reader
//! sums the slots: the total is exact once the increments it should see
//! have happened.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots per counter: threads beyond this share slots (still exact).
const SLOTS: usize = 8;

/// One slot, alone on its cache line (128 bytes: two lines, as adjacent
/// lines are fetched together on x86).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// A sum of per-thread slots.
#[derive(Debug, Default)]
pub(crate) struct StripedCounter {
    slots: [Slot; SLOTS],
}

/// The next slot handed to a thread that has none yet.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, given out in turn at its first increment.
    static MY_SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS;
}

impl StripedCounter {
    /// Adds one, in this thread's slot.
    #[inline]
    pub(crate) fn increment(&self) {
        let slot = MY_SLOT.with(|s| *s);
        self.slots[slot].0.fetch_add(1, Ordering::Relaxed);
    }

    /// The total over every slot.
    pub(crate) fn sum(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_increments_from_many_threads() {
        let c = StripedCounter::default();
        std::thread::scope(|s| {
            for _ in 0..(SLOTS + 3) {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.increment();
                    }
                });
            }
        });
        assert_eq!(c.sum(), (SLOTS as u64 + 3) * 1000);
    }
}
