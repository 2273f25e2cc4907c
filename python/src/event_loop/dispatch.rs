//! The per-message path of a socket transport on the loop's ring, in Rust:
//! the dispatch of a completion batch ([`dispatch_batch`], the body of
//! `RingProactor.select`) and the arming of a transport's next receive
//! ([`arm_receive`], `RingProactor.receive`).
//!
//! Both work on the proactor's own tables (`_ops`, `_receiving`, `_held`,
//! `_redirected`, `_kept`, kept in Python because the rest of the
//! proactor reads them) through the C API, with no Python frame between
//! the ring and the transport: a receive's completion calls the
//! transport's callback in its context at once, and the callback arms the
//! next receive in one call. What is not the common case (a completion
//! of another kind, an error or end of stream, a receive cancelled or
//! handed kept bytes, a batch that must wait behind queued callbacks) goes
//! to the proactor's Python code (`_finish`, `receive`), which decides
//! exactly as before.

use std::os::fd::RawFd;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PySet, PyTuple, PyType};

use super::ring::LoopRing;

/// `_STREAM` of `blockio/_proactor.py`: the kind of a transport's receive
/// in the proactor's `_ops`.
const STREAM: i64 = 6;

/// `socket.socket`, whose `_decref_socketios` is done here when the
/// socket is still open (the common case) instead of through its Python
/// method.
static SOCKET_TYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// Dispatches `batch`, the `(token, result, value)` list of
/// `LoopRing.wait`, on `proactor` (a `RingProactor`), as its `select` did
/// in Python: each finished operation is taken from `_ops`; a transport's
/// receive that brought bytes, was neither cancelled nor redirected, in a
/// batch allowed to reach protocols at once (`_direct`), calls its
/// callback `(data, None)` in the receive's context here; anything else
/// goes to `proactor._finish`. The socket an operation held open is then
/// released. An exception from a callback other than `SystemExit` and
/// `KeyboardInterrupt` goes to the receive's `report` (the loop's
/// exception handler); those two stop the dispatch, and the rest of the
/// batch is left in `_left` for the next `select`.
#[pyfunction]
pub(crate) fn dispatch_batch(
    py: Python<'_>,
    proactor: &Bound<'_, PyAny>,
    batch: &Bound<'_, PyList>,
) -> PyResult<()> {
    let tables = Tables::of(proactor)?;
    let n = batch.len();
    for i in 0..n {
        let item = batch.get_item(i)?;
        let outcome = item
            .extract::<(Bound<'_, PyAny>, i64, Bound<'_, PyAny>)>()
            .and_then(|(token, res, value)| {
                let done = tables.finish(py, proactor, &token, res, value);
                let released = tables.release(py, &token);
                done.and(released)
            });
        if let Err(e) = outcome {
            proactor.setattr(intern!(py, "_left"), batch.get_slice(i + 1, n))?;
            return Err(e);
        }
    }
    Ok(())
}

/// Arms the next receive of `rx` (a `StreamReceive`), whose completion
/// calls `callback`: `RingProactor.receive`, in one call. When bytes a
/// cancelled receive left are kept for some socket, the proactor's own
/// `receive` decides (they may be this socket's).
#[pyfunction]
pub(crate) fn arm_receive(
    py: Python<'_>,
    proactor: &Bound<'_, PyAny>,
    rx: &Bound<'_, PyAny>,
    callback: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if proactor.getattr(intern!(py, "_kept"))?.is_truthy()? {
        proactor.call_method1(intern!(py, "receive"), (rx, callback))?;
        return Ok(());
    }
    let ring = proactor.getattr(intern!(py, "_ring"))?;
    let ring = ring.downcast::<LoopRing>()?;
    rx.setattr(intern!(py, "cancelled"), false)?;
    let fd = rx.getattr(intern!(py, "fd"))?;
    let conn = rx.getattr(intern!(py, "conn"))?;
    let nbytes = rx.getattr(intern!(py, "nbytes"))?;
    let socket = rx.getattr(intern!(py, "socket"))?.is_truthy()?;
    let token = ring
        .borrow()
        .recv(fd.extract::<RawFd>()?, nbytes.extract::<usize>()?, socket)?;
    let tables = Tables::of(proactor)?;
    rx.setattr(intern!(py, "token"), token)?;
    tables.receiving.set_item(&fd, token)?;
    let arg = PyTuple::new(py, [&fd, &conn, &nbytes, callback])?;
    let entry = (rx, STREAM, arg).into_pyobject(py)?;
    tables.ops.set_item(token, entry)?;
    if rx.getattr(intern!(py, "holdable"))?.is_truthy()? {
        // hold_open, known to hold: the socket stays open until the
        // completion is dispatched.
        let refs: i64 = conn.getattr(intern!(py, "_io_refs"))?.extract()?;
        conn.setattr(intern!(py, "_io_refs"), refs + 1)?;
        tables.held.set_item(token, &conn)?;
    }
    Ok(())
}

/// The proactor's tables that the dispatch reads and changes.
struct Tables<'py> {
    /// token -> (future or receive, kind, argument)
    ops: Bound<'py, PyDict>,
    /// descriptor -> token of its latest receive in flight
    receiving: Bound<'py, PyDict>,
    /// token -> the socket its operation holds open
    held: Bound<'py, PyDict>,
    /// receives the proactor cancelled to hand them kept bytes
    redirected: Bound<'py, PySet>,
    /// whether a receive's bytes may reach the transport at once
    direct: bool,
}

impl<'py> Tables<'py> {
    fn of(proactor: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = proactor.py();
        let dict = |name: &Bound<'py, pyo3::types::PyString>| -> PyResult<Bound<'py, PyDict>> {
            Ok(proactor.getattr(name)?.downcast_into::<PyDict>()?)
        };
        Ok(Tables {
            ops: dict(intern!(py, "_ops"))?,
            receiving: dict(intern!(py, "_receiving"))?,
            held: dict(intern!(py, "_held"))?,
            redirected: proactor
                .getattr(intern!(py, "_redirected"))?
                .downcast_into::<PySet>()?,
            direct: proactor.getattr(intern!(py, "_direct"))?.is_truthy()?,
        })
    }

    /// Finishes operation `token` (see [`dispatch_batch`]).
    fn finish(
        &self,
        py: Python<'py>,
        proactor: &Bound<'py, PyAny>,
        token: &Bound<'py, PyAny>,
        res: i64,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let Some(entry) = self.ops.get_item(token)? else {
            return Ok(());
        };
        self.ops.del_item(token)?;
        if res > 0 && self.direct {
            let op = entry.downcast::<PyTuple>()?;
            if op.get_item(1)?.extract::<i64>()? == STREAM && !self.redirected.contains(token)? {
                let rx = op.get_item(0)?;
                if !rx.getattr(intern!(py, "cancelled"))?.is_truthy()?
                    && rx.getattr(intern!(py, "token"))?.eq(token)?
                {
                    let arg = op.get_item(2)?;
                    return self.deliver(py, &rx, arg.downcast::<PyTuple>()?, token, value);
                }
            }
        }
        proactor.call_method1(intern!(py, "_finish"), (token, entry, res, value))?;
        Ok(())
    }

    /// Hands a transport's receive its bytes: `callback(data, None)` in
    /// the receive's context, as `StreamReceive.deliver` does.
    fn deliver(
        &self,
        py: Python<'py>,
        rx: &Bound<'py, PyAny>,
        arg: &Bound<'py, PyTuple>,
        token: &Bound<'py, PyAny>,
        data: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let fd = arg.get_item(0)?;
        if let Some(latest) = self.receiving.get_item(&fd)? {
            if latest.eq(token)? {
                self.receiving.del_item(&fd)?;
            }
        }
        rx.setattr(intern!(py, "token"), py.None())?;
        let callback = arg.get_item(3)?;
        let context = rx.getattr(intern!(py, "context"))?;
        match context.call_method1(intern!(py, "run"), (&callback, data, py.None())) {
            Ok(_) => Ok(()),
            Err(e)
                if e.is_instance_of::<PySystemExit>(py)
                    || e.is_instance_of::<PyKeyboardInterrupt>(py) =>
            {
                Err(e)
            }
            Err(e) => {
                rx.call_method1(intern!(py, "report"), (callback, e.value(py)))?;
                Ok(())
            }
        }
    }

    /// Ends the hold of operation `token` on its socket (`_release`): an
    /// open `socket.socket` has its count of holds lowered here, anything
    /// else (a socket closed meanwhile, whose real close may be due; a
    /// held pipe) through its `_decref_socketios`.
    fn release(&self, py: Python<'py>, token: &Bound<'py, PyAny>) -> PyResult<()> {
        let Some(conn) = self.held.get_item(token)? else {
            return Ok(());
        };
        self.held.del_item(token)?;
        let socket_type = SOCKET_TYPE.get_or_try_init(py, || -> PyResult<Py<PyType>> {
            Ok(py
                .import("socket")?
                .getattr("socket")?
                .downcast_into::<PyType>()?
                .unbind())
        })?;
        if conn.get_type().is(socket_type) && !conn.getattr(intern!(py, "_closed"))?.is_truthy()? {
            let refs: i64 = conn.getattr(intern!(py, "_io_refs"))?.extract()?;
            if refs > 0 {
                conn.setattr(intern!(py, "_io_refs"), refs - 1)?;
            }
            return Ok(());
        }
        conn.call_method0(intern!(py, "_decref_socketios"))?;
        Ok(())
    }
}
