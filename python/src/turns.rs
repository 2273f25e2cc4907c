//! Turns of the event loop for calls served without suspending: a cached
//! read copied on the calling thread, a read from a file's buffer, a
//! `tell`, a write into the buffer. Such a call returns without giving the
//! loop a chance to run anything else, so a task making them in a loop
//! would starve the others; every such call is counted here, and once the
//! count reaches [`TURN_BUDGET`] the next call first takes a turn of the
//! loop (the Python layer yields once) and the count starts again.
//!
//! The count is the calling thread's: an event loop runs on one thread,
//! and what it bounds is how long that loop's other tasks wait, whichever
//! engine or file the calls go to. A call counts one unit, and one more
//! per [`TURN_UNIT`] bytes it copied, so that large copies (a 1 MiB read
//! from a large buffer, a `peek` of a whole buffer) take their turns too.
//!
//! What the budget bounds is how long one task can keep the loop from the
//! others: 256 `seek` + `read`s of cached 4 KiB blocks take about 0.6 ms
//! on a 2-core virtual machine, 4 MiB of copies 0.2-0.4 ms. A turn costs
//! about 5 µs (the task goes to the back of the loop's queue, the loop
//! polls its descriptors, the file's call queue is taken), so a turn every
//! 64 calls cost 64 tasks reading cached 4 KiB blocks 4-5 % of their rate
//! (`docs/benchmarks.md`, "A turn of the event loop"); one every 256,
//! about 1 %. (tokio's
//! own cooperative budget is 128 operations per task poll.) A single call
//! that copies more than the budget (a `peek` of a 64 MiB buffer) is not
//! cut short; the call after it takes the turn.

use std::cell::Cell;

use pyo3::prelude::*;

/// The units of calls served without suspending between two turns of the
/// event loop: a turn at least once in 256 calls, and once in every
/// 256 × [`TURN_UNIT`] = 4 MiB they copy, whichever comes first.
pub(crate) const TURN_BUDGET: u32 = 256;

/// The bytes a served call may copy for one unit of [`TURN_BUDGET`]
/// beyond the unit every call counts.
pub(crate) const TURN_UNIT: usize = 16 << 10;

/// The bytes the calls served without suspending may copy between two
/// turns: [`TURN_BUDGET`] × [`TURN_UNIT`].
pub(crate) const TURN_BYTES: usize = TURN_BUDGET as usize * TURN_UNIT;

thread_local! {
    /// This thread's count, in units, since its last turn.
    static COUNT: Cell<u32> = const { Cell::new(0) };
}

/// The units of `bytes` copied, beyond a call's own unit.
fn units(bytes: usize) -> u32 {
    u32::try_from(bytes / TURN_UNIT).unwrap_or(u32::MAX)
}

/// Whether the next call served without suspending is to take its turn
/// first; if so, the count starts again (the caller takes the turn).
pub(crate) fn due() -> bool {
    COUNT.with(|c| {
        let due = c.get() >= TURN_BUDGET - 1;
        if due {
            c.set(0);
        }
        due
    })
}

/// Whether the next call served without suspending is to take its turn
/// first, leaving the count as it is (the caller goes through the call
/// queue, whose count takes the turn).
pub(crate) fn is_due() -> bool {
    COUNT.with(|c| c.get() >= TURN_BUDGET - 1)
}

/// Starts the count again: the caller has just taken its turn of the
/// event loop (a read served in pieces, between two of them).
pub(crate) fn took_turn() {
    COUNT.with(|c| c.set(0));
}

/// Counts a call served without suspending that copied `bytes`.
pub(crate) fn served(bytes: usize) {
    COUNT.with(|c| c.set(c.get().saturating_add(1).saturating_add(units(bytes))));
}

/// Counts a call served without suspending that copies `nbytes`: whether
/// it is to take its turn of the event loop first (then it is not counted,
/// and the count starts again).
#[pyfunction]
#[pyo3(signature = (nbytes = 0))]
pub(crate) fn turn_due(nbytes: usize) -> bool {
    if due() {
        return true;
    }
    served(nbytes);
    false
}

/// Counts `nbytes` more copied by a call already counted (a read from a
/// file's buffer inside a call that took its turn, or a write into it).
#[pyfunction]
pub(crate) fn count_copied(nbytes: usize) {
    COUNT.with(|c| c.set(c.get().saturating_add(units(nbytes))));
}

/// This thread's count since its last turn, in units.
#[pyfunction]
pub(crate) fn turn_count() -> u32 {
    COUNT.with(Cell::get)
}

/// Sets this thread's count (the tests put a call at its turn with
/// `TURN_BUDGET - 1`).
#[pyfunction]
pub(crate) fn set_turn_count(n: u32) {
    COUNT.with(|c| c.set(n));
}
