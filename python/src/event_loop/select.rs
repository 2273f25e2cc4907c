//! The proactor's wait, `RingProactor.select` in Rust: what must happen
//! before the ring waits, the wait itself and the dispatch of what it
//! brought, in one call. The loop's turn (`turn.rs`) calls it without a
//! Python frame; `RingProactor.select` (what asyncio's own `_run_once`,
//! or anything else, calls) is this function too, so that the two cannot
//! drift apart.
//!
//! Before the wait: the connections kept for a listener closed since are
//! closed (`_drop_conns_of_closed_listeners`: a socket's `close()` tells
//! no one, so each wait looks), the arms queued for the next wait
//! (`_before_wait`: a watch re-armed after its callback) are run, and the
//! sends finished in the previous batch are forgotten (`_sent`). After
//! it, `_direct` says whether the batch may reach protocols at once (no
//! callback queued: asyncio's order puts a completion behind what was
//! scheduled before it), and `dispatch_batch` dispatches.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet};

use super::dispatch::dispatch_batch;
use super::ring::LoopRing;

/// Waits at most `timeout` seconds (`None`: until something finishes) on
/// `proactor`'s ring (a `RingProactor`'s `_ring`) and dispatches every
/// finished operation, as `RingProactor.select` documents. In a child
/// forked while the loop ran, a wait of 0 s returns without touching the
/// parent's ring; any other raises the ring's `RuntimeError`.
#[pyfunction]
#[pyo3(signature = (proactor, timeout))]
pub(crate) fn select_batch(
    py: Python<'_>,
    proactor: &Bound<'_, PyAny>,
    timeout: Option<f64>,
) -> PyResult<()> {
    if proactor
        .getattr(intern!(py, "_kept_conns"))?
        .downcast::<PyDict>()?
        .len()
        > 0
    {
        proactor.call_method0(intern!(py, "_drop_conns_of_closed_listeners"))?;
    }
    let before = proactor.getattr(intern!(py, "_before_wait"))?;
    let before = before.downcast::<PyList>()?;
    if !before.is_empty() {
        // (as Python's `for arm in list: arm()`: an arm that queues
        // another for the next wait appends to the same list, and runs now)
        let mut i = 0;
        while i < before.len() {
            before.get_item(i)?.call0()?;
            i += 1;
        }
        before.del_slice(0, before.len())?;
    }
    let sent = proactor.getattr(intern!(py, "_sent"))?;
    let sent = sent.downcast::<PySet>()?;
    if !sent.is_empty() {
        sent.clear();
    }
    let ring = proactor.getattr(intern!(py, "_ring"))?;
    let ring = ring.downcast::<LoopRing>()?;
    // (no wait while completions are left from a dispatch an exception
    // interrupted: they go first; see LoopRing.fill)
    if let Err(e) = ring.borrow().fill(py, timeout) {
        if timeout == Some(0.0)
            && e.is_instance_of::<PyRuntimeError>(py)
            && ring.borrow().inherited()
        {
            return Ok(());
        }
        return Err(e);
    }
    // The signal handlers Python owes run here, before any completion is
    // taken from the ring, as the Python frame that called `fill` ran them
    // at its next instruction: a `KeyboardInterrupt` raised by one leaves
    // the whole batch in the ring for the next wait. (Taken in the
    // dispatch, a completion would be out of the proactor's table, and
    // the handler's exception, raised at the first instruction of its
    // Python callback, would lose it: the wake-up socket's receive, whose
    // byte the signal itself sent, then never answers again.)
    py.check_signals()?;
    let direct = proactor
        .getattr(intern!(py, "_loop"))?
        .getattr(intern!(py, "_ready"))?
        .len()?
        == 0;
    // (set only when it changes: with a callback queued in every turn it
    // stays false, and a `setattr` costs more than the read)
    let name = intern!(py, "_direct");
    if !proactor
        .getattr(name)?
        .is(&*pyo3::types::PyBool::new(py, direct))
    {
        proactor.setattr(name, direct)?;
    }
    dispatch_batch(py, proactor, ring)
}
