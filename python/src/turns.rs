//! Turns of the event loop for calls served without suspending: a cached
//! read copied on the calling thread, a read from a file's buffer, a
//! `tell`, a write into the buffer. Such a call returns without giving the
//! loop a chance to run anything else, so a task making them in a loop
//! would starve the others; every such call is counted here, and the call
//! served once [`TURN_TIME`] has passed since the thread's last turn first
//! takes a turn of the loop (the Python layer yields once).
//!
//! The clock is the monotonic one, the time the loop's other tasks wait:
//! on a loaded machine, where other processes run on the loop's core, the
//! time passes within less of the loop's work, and the turns come as often
//! as the count allows, never less often than by the count alone (a
//! thread's CPU clock, tried, let the loop's longest gap there grow to 2-3
//! times aiofiles'). It is read only when the count reaches
//! [`TURN_BUDGET`]: a call counts one unit, and one more per [`TURN_UNIT`]
//! bytes it copied, so it is read at least once in 256 calls and once in
//! every 4 MiB they copy (about 0.6 and 0.2-0.4 ms of work on a 2-core
//! virtual machine). If [`TURN_TIME`] has not passed, the count starts
//! again and no turn is taken; else that call takes its turn. So the
//! loop's other tasks wait at most about [`TURN_TIME`] plus one budget's
//! work. Loops of small calls, whose 256 calls take less than
//! [`TURN_TIME`], turn less often than by the count; loops that copy
//! 4 MiB in about [`TURN_TIME`] turn about as often: 2 ms, tried, made
//! their longest gap 1.3-2 times the count's, over 2 times aiofiles' at 1
//! and 8 MiB, for 0-4 % of CPU time (`docs/benchmarks.md`, "Turns by time").
//!
//! The count and the clock are the calling thread's: an event loop runs
//! on one thread, and what they bound is how long that loop's other tasks
//! wait, whichever engine or file the calls go to. A single call that
//! copies more than the budget (a `peek` of a 64 MiB buffer) is not cut
//! short; the call after it checks the clock. (tokio's own cooperative
//! budget is 128 operations per task poll.)

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// The units of calls served without suspending between two readings of
/// the clock: once in 256 calls, and once in every 256 × [`TURN_UNIT`] =
/// 4 MiB they copy, whichever comes first.
pub(crate) const TURN_BUDGET: u32 = 256;

/// The time after a thread's last turn of the event loop from which the
/// next call served without suspending takes a turn first (checked when
/// the count reaches [`TURN_BUDGET`]): the loop's other tasks wait about
/// this long, plus one budget's work (see the module's note).
pub(crate) const TURN_TIME: Duration = Duration::from_millis(1);

/// The bytes a served call may copy for one unit of [`TURN_BUDGET`]
/// beyond the unit every call counts.
pub(crate) const TURN_UNIT: usize = 16 << 10;

/// The bytes the calls served without suspending may copy between two
/// turns: [`TURN_BUDGET`] × [`TURN_UNIT`].
pub(crate) const TURN_BYTES: usize = TURN_BUDGET as usize * TURN_UNIT;

thread_local! {
    /// This thread's count, in units, since its last turn or its last
    /// reading of the clock.
    static COUNT: Cell<u32> = const { Cell::new(0) };
    /// When this thread last took a turn; `None` before its first, or once
    /// `set_turn_count` has set the count (the next check turns).
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// [`TURN_TIME`] in nanoseconds, unless the tests set another
/// (`set_turn_time`: 0 turns at every check, as a count alone would).
static TIME_NS: AtomicU64 = AtomicU64::new(TURN_TIME.as_nanos() as u64);

/// Whether the count has reached [`TURN_BUDGET`] and [`TURN_TIME`] has
/// passed since the last turn; when the count has but the time has not,
/// the count starts again (no turn: the clock is read again one budget
/// later).
fn check() -> bool {
    if COUNT.with(Cell::get) < TURN_BUDGET - 1 {
        return false;
    }
    let wait = Duration::from_nanos(TIME_NS.load(Ordering::Relaxed));
    let up = LAST.with(Cell::get).map_or(true, |t| t.elapsed() >= wait);
    if !up {
        COUNT.with(|c| c.set(0));
    }
    up
}

/// The units of `bytes` copied, beyond a call's own unit.
fn units(bytes: usize) -> u32 {
    u32::try_from(bytes / TURN_UNIT).unwrap_or(u32::MAX)
}

/// Whether the next call served without suspending is to take its turn
/// first; if so, the count starts again (the caller takes the turn).
pub(crate) fn due() -> bool {
    let due = check();
    if due {
        took_turn();
    }
    due
}

/// Whether the next call served without suspending is to take its turn
/// first, leaving the count as it is when it is (the caller goes through
/// the call queue, whose count takes the turn).
pub(crate) fn is_due() -> bool {
    check()
}

/// Starts the count again: the caller has just taken its turn of the
/// event loop (a read served in pieces, between two of them).
pub(crate) fn took_turn() {
    COUNT.with(|c| c.set(0));
    LAST.with(|t| t.set(Some(Instant::now())));
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

/// Sets this thread's count, and forgets when its last turn was: the
/// tests put a call at its turn with `TURN_BUDGET - 1`.
#[pyfunction]
pub(crate) fn set_turn_count(n: u32) {
    COUNT.with(|c| c.set(n));
    LAST.with(|t| t.set(None));
}

/// Sets the time after a turn from which a check of the count turns again,
/// for every thread, in nanoseconds (the tests: 0 makes a turn depend on
/// the count alone); its previous value. [`TURN_TIME`] by default.
#[pyfunction]
pub(crate) fn set_turn_time(ns: u64) -> u64 {
    TIME_NS.swap(ns, Ordering::Relaxed)
}
