//! The operations in flight on a loop's ring, by token: a slab whose
//! freed slots are taken again first (last freed, first taken).
//!
//! A token is a count of submissions in its low [`SEQ_BITS`] bits and the
//! slot's index above them, so that no two operations among 2^39
//! consecutive submissions of a ring share a token (a late cancel or a
//! stale token from Python finds nothing; only after the count wraps could
//! a token come again) while a lookup is an index into one vector, with no
//! hashing. A freed slot is the first taken again. Measured beside 10,000
//! idle connections (callgrind, `docs/benchmarks.md`): the hash map's
//! hashing and lookups, 648 instructions and 4.1 L1 read misses per
//! message, became the slab's 111 and 0.8; the load's CPU per request did
//! not move beyond the rounds' spread. The count is in the low bits so that
//! successive tokens differ there, as the consecutive numbers before did,
//! for the Python tables keyed by token (the proactor's `_ops`, `_held`);
//! what that does to their lookups was not measured.

use super::ops::InFlight;

/// The bits of a token that count submissions; the index above them has
/// 24 bits (16 million operations in flight at most), and the top bit is
/// clear, so every token stays below the ring's own cancel token
/// (`u64::MAX`).
const SEQ_BITS: u32 = 39;

/// The count of submissions wraps below this.
const SEQ_LIMIT: u64 = 1 << SEQ_BITS;

/// The most operations in flight at once (the index's 24 bits).
pub(crate) const MAX_IN_FLIGHT: usize = 1 << (63 - SEQ_BITS);

/// The operations in flight, by token (see the module's doc).
#[derive(Default)]
pub(crate) struct Slots {
    /// Each slot: the token of the operation in it, and the operation.
    slots: Vec<Option<(u64, InFlight)>>,
    /// The free slots' indices, the last freed last.
    free: Vec<usize>,
    /// How many slots hold an operation.
    len: usize,
    /// The count part of the next token (never 0: no token is 0).
    seq: u64,
}

impl Slots {
    /// The token the next [`Slots::insert`] gives its operation; None
    /// when [`MAX_IN_FLIGHT`] operations are in flight.
    pub fn vacant(&self) -> Option<u64> {
        let index = self.free.last().copied().unwrap_or(self.slots.len());
        (index < MAX_IN_FLIGHT).then(|| ((index as u64) << SEQ_BITS) | self.seq.max(1))
    }

    /// Keeps `op` under `token`, which [`Slots::vacant`] returned just
    /// before (nothing inserted since).
    pub fn insert(&mut self, token: u64, op: InFlight) {
        debug_assert_eq!(Some(token), self.vacant());
        let index = (token >> SEQ_BITS) as usize;
        if self.free.last() == Some(&index) {
            self.free.pop();
            self.slots[index] = Some((token, op));
        } else {
            self.slots.push(Some((token, op)));
        }
        self.len += 1;
        self.seq = (self.seq.max(1) + 1) % SEQ_LIMIT;
    }

    /// The operation `token` names, if it is in flight.
    pub fn get_mut(&mut self, token: u64) -> Option<&mut InFlight> {
        match self.slots.get_mut((token >> SEQ_BITS) as usize) {
            Some(Some((t, op))) if *t == token => Some(op),
            _ => None,
        }
    }

    /// Takes the operation `token` names out, if it is in flight.
    pub fn remove(&mut self, token: u64) -> Option<InFlight> {
        let index = (token >> SEQ_BITS) as usize;
        let slot = self.slots.get_mut(index)?;
        if !matches!(slot, Some((t, _)) if *t == token) {
            return None;
        }
        let (_, op) = slot.take()?;
        self.free.push(index);
        self.len -= 1;
        Some(op)
    }

    /// How many operations are in flight.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tokens of the operations in flight.
    pub fn tokens(&self) -> Vec<u64> {
        self.slots.iter().flatten().map(|(t, _)| *t).collect()
    }

    /// The operations in flight.
    pub fn iter(&self) -> impl Iterator<Item = &InFlight> + '_ {
        self.slots.iter().flatten().map(|(_, op)| op)
    }

    /// The operations in flight, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut InFlight> + '_ {
        self.slots.iter_mut().flatten().map(|(_, op)| op)
    }

    /// Takes every operation out.
    pub fn drain(&mut self) -> impl Iterator<Item = InFlight> + '_ {
        self.free.clear();
        self.len = 0;
        self.slots.drain(..).flatten().map(|(_, op)| op)
    }
}
