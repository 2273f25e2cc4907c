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
//! next receive in one call. The receive's own state is [`StreamRx`]'s
//! fields (the base of Python's `StreamReceive`), read without attribute
//! lookups, and it keeps the tables it arms into. What is not the common
//! case (a completion of another kind, an error or end of stream, a
//! receive cancelled or handed kept bytes, a batch that must wait behind
//! queued callbacks) goes to the proactor's Python code (`_finish`,
//! `receive`), which decides exactly as before.

use std::os::fd::RawFd;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PySet, PyTuple, PyType};
use pyo3::PyTraverseError;

use super::ring::LoopRing;

/// `_STREAM` of `blockio/_proactor.py`: the kind of a transport's receive
/// in the proactor's `_ops`.
const STREAM: i64 = 6;

/// `socket.socket`, whose `_decref_socketios` is done here when the
/// socket is still open (the common case) instead of through its Python
/// method.
static SOCKET_TYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// `contextvars.Context.run`, called with the context as its first
/// argument: no bound method is made (nor looked up) per message.
static CONTEXT_RUN: GILOnceCell<PyObject> = GILOnceCell::new();

/// Dispatches `batch`, the `(token, result, value)` list of
/// `LoopRing.wait`, on `proactor` (a `RingProactor`), as its `select` did
/// in Python: each finished operation is taken from `_ops`; a transport's
/// receive that brought bytes, was neither cancelled nor redirected, in a
/// batch allowed to reach protocols at once (`_direct`), calls its
/// callback `(data, None)` in the receive's context here; anything else
/// goes to `proactor._finish`. The socket an operation held open is then
/// released. An exception from a callback other than `SystemExit` and
/// `KeyboardInterrupt` goes to the receive's `report` (the loop's
/// exception handler); any error that comes out (those two, or one of the
/// dispatch itself) stops the dispatch, and the rest of the batch is left
/// in `_left` for the next `select`.
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

/// The state of a socket transport's receive, armed again after each
/// completion: the base class of `blockio._proactor.StreamReceive`, whose
/// methods are Python's. Its fields are what [`arm_receive`] and
/// [`dispatch_batch`] read per message; it keeps the proactor's tables
/// and ring it arms into (the proactor replaces none of them before its
/// ring is closed).
#[pyclass(subclass, module = "blockio._blockio")]
pub(crate) struct StreamRx {
    /// The proactor (a `RingProactor`).
    #[pyo3(get, name = "_proactor")]
    proactor: PyObject,
    /// The socket (or file) received from.
    #[pyo3(get)]
    conn: PyObject,
    /// Its descriptor.
    #[pyo3(get)]
    fd: RawFd,
    /// The most one receive takes.
    #[pyo3(get)]
    nbytes: usize,
    /// A socket (`recv`) rather than another file (`read`).
    #[pyo3(get)]
    socket: bool,
    /// A stream socket (`SOCK_STREAM`), whose receive may take what
    /// exceeds its first buffer (see [`LoopRing::recv`]).
    #[pyo3(get)]
    stream: bool,
    /// Whether the proactor holds `conn` open while a receive is in flight.
    #[pyo3(get)]
    holdable: bool,
    /// The context the callback runs in.
    #[pyo3(get)]
    context: PyObject,
    /// The token of the receive in flight (or the marker of kept bytes
    /// about to be handed on); None when not armed.
    #[pyo3(get, set)]
    token: PyObject,
    /// Its cancellation was asked for.
    #[pyo3(get, set)]
    cancelled: bool,
    /// While its callback runs: the finished receive's hold on `conn`,
    /// handed to the next receive armed then (see [`arm_receive`]) instead
    /// of being ended and taken again; ended after the callback otherwise.
    carried: bool,
    /// While its callback runs: the proactor's `_receiving` may still name
    /// the finished receive; the next receive armed then replaces it,
    /// otherwise it is removed after the callback.
    stale: bool,
    /// The proactor's `_ops`, `_receiving`, `_held` and `_kept`, and its ring.
    tables: Option<RxTables>,
}

/// What a receive arms into (see [`StreamRx`]).
struct RxTables {
    ops: Py<PyDict>,
    receiving: Py<PyDict>,
    held: Py<PyDict>,
    kept: Py<PyDict>,
    ring: Py<LoopRing>,
}

#[pymethods]
impl StreamRx {
    /// A receive of at most `nbytes` from `conn` (descriptor `fd`) on
    /// `proactor`'s ring, its callbacks run in `context`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        proactor: &Bound<'_, PyAny>,
        conn: PyObject,
        fd: RawFd,
        nbytes: usize,
        socket: bool,
        stream: bool,
        holdable: bool,
        context: PyObject,
    ) -> PyResult<Self> {
        let py = proactor.py();
        let dict = |name: &str| -> PyResult<Py<PyDict>> {
            Ok(proactor.getattr(name)?.downcast_into::<PyDict>()?.unbind())
        };
        let tables = RxTables {
            ops: dict("_ops")?,
            receiving: dict("_receiving")?,
            held: dict("_held")?,
            kept: dict("_kept")?,
            ring: proactor
                .getattr("_ring")?
                .downcast_into::<LoopRing>()?
                .unbind(),
        };
        Ok(StreamRx {
            proactor: proactor.clone().unbind(),
            conn,
            fd,
            nbytes,
            socket,
            stream,
            holdable,
            context,
            token: py.None(),
            cancelled: false,
            carried: false,
            stale: false,
            tables: Some(tables),
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.proactor)?;
        visit.call(&self.conn)?;
        visit.call(&self.context)?;
        visit.call(&self.token)?;
        if let Some(t) = &self.tables {
            visit.call(&t.ops)?;
            visit.call(&t.receiving)?;
            visit.call(&t.held)?;
            visit.call(&t.kept)?;
            visit.call(&t.ring)?;
        }
        Ok(())
    }

    fn __clear__(&mut self, py: Python<'_>) {
        self.tables = None;
        self.token = py.None();
        self.context = py.None();
        self.proactor = py.None();
        self.conn = py.None();
    }
}

/// Arms the next receive of `rx` (a `StreamReceive`), whose completion
/// calls `callback`: `RingProactor.receive`, in one call. When bytes a
/// cancelled receive left are kept for this descriptor, the proactor's own
/// `receive` decides (they may be this socket's, or a closed one's that
/// had the number).
#[pyfunction]
pub(crate) fn arm_receive(
    py: Python<'_>,
    rx: &Bound<'_, StreamRx>,
    callback: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let mut this = rx.borrow_mut();
    let Some(t) = &this.tables else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the event loop's ring is closed",
        ));
    };
    if t.kept.bind(py).contains(this.fd)? {
        let proactor = this.proactor.clone_ref(py);
        drop(this);
        proactor.call_method1(py, intern!(py, "receive"), (rx, callback))?;
        return Ok(());
    }
    let token = t
        .ring
        .borrow(py)
        .recv(this.fd, this.nbytes, this.socket, this.stream)?;
    let token_obj = token.into_pyobject(py)?;
    let fd = this.fd.into_pyobject(py)?;
    // Replaces the finished receive's entry, if its callback arms this.
    t.receiving.bind(py).set_item(&fd, &token_obj)?;
    let conn = this.conn.bind(py);
    let arg = PyTuple::new(
        py,
        [
            fd.as_any(),
            conn,
            this.nbytes.into_pyobject(py)?.as_any(),
            callback,
        ],
    )?;
    t.ops
        .bind(py)
        .set_item(&token_obj, (rx, STREAM, arg).into_pyobject(py)?)?;
    if this.holdable {
        // hold_open, known to hold: the socket stays open until the
        // completion is dispatched. Armed from the callback of the receive
        // before, the hold that one had goes on.
        if !this.carried {
            let refs: i64 = conn.getattr(intern!(py, "_io_refs"))?.extract()?;
            conn.setattr(intern!(py, "_io_refs"), refs + 1)?;
        }
        t.held.bind(py).set_item(&token_obj, conn)?;
        this.carried = false;
    }
    this.stale = false;
    this.cancelled = false;
    this.token = token_obj.into_any().unbind();
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
                let rx = rx.downcast::<StreamRx>()?;
                let armed = {
                    let this = rx.borrow();
                    !this.cancelled && this.token.bind(py).eq(token)?
                };
                if armed {
                    let arg = op.get_item(2)?;
                    return self.deliver(py, rx, arg.downcast::<PyTuple>()?, token, value);
                }
            }
        }
        proactor.call_method1(intern!(py, "_finish"), (token, entry, res, value))?;
        Ok(())
    }

    /// Hands a transport's receive its bytes: `callback(data, None)` in
    /// the receive's context, as `StreamReceive.deliver` does. The
    /// receive's entries in `_receiving` and `_held` are left to the next
    /// receive its callback arms (`stale`, `carried`), and settled after
    /// the callback if it armed none.
    fn deliver(
        &self,
        py: Python<'py>,
        rx: &Bound<'py, StreamRx>,
        arg: &Bound<'py, PyTuple>,
        token: &Bound<'py, PyAny>,
        data: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let fd = arg.get_item(0)?;
        let stale = self.names(&fd, token)?;
        let held = self.held.get_item(token)?;
        let context = {
            let mut this = rx.borrow_mut();
            this.token = py.None();
            this.stale = stale;
            this.carried = this.holdable && held.is_some();
            if this.carried {
                self.held.del_item(token)?;
            }
            this.context.clone_ref(py)
        };
        let callback = arg.get_item(3)?;
        let run = CONTEXT_RUN.get_or_try_init(py, || -> PyResult<PyObject> {
            Ok(py
                .import("contextvars")?
                .getattr("Context")?
                .getattr("run")?
                .unbind())
        })?;
        let outcome = run.call1(py, (context, &callback, data, py.None()));
        self.settle(py, rx, &fd, token, held)?;
        match outcome {
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

    /// After the callback of receive `token` on descriptor `fd`: what no
    /// receive armed from it took over, `_receiving`'s entry for it and
    /// its hold on `conn` (`held`), is ended.
    fn settle(
        &self,
        py: Python<'py>,
        rx: &Bound<'py, StreamRx>,
        fd: &Bound<'py, PyAny>,
        token: &Bound<'py, PyAny>,
        held: Option<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let (stale, carried) = {
            let mut this = rx.borrow_mut();
            let left = (this.stale, this.carried);
            this.stale = false;
            this.carried = false;
            left
        };
        if stale && self.names(fd, token)? {
            self.receiving.del_item(fd)?;
        }
        match held {
            Some(conn) if carried => release_conn(py, &conn),
            _ => Ok(()),
        }
    }

    /// Whether `_receiving` still names `token` as the latest receive on
    /// descriptor `fd` (the entry `_finish` removes once it is done).
    fn names(&self, fd: &Bound<'py, PyAny>, token: &Bound<'py, PyAny>) -> PyResult<bool> {
        match self.receiving.get_item(fd)? {
            Some(latest) => latest.eq(token),
            None => Ok(false),
        }
    }

    /// Ends the hold of operation `token` on its socket (`_release`).
    fn release(&self, py: Python<'py>, token: &Bound<'py, PyAny>) -> PyResult<()> {
        let Some(conn) = self.held.get_item(token)? else {
            return Ok(());
        };
        self.held.del_item(token)?;
        release_conn(py, &conn)
    }
}

/// Ends one hold on `conn`: an open `socket.socket` has its count of holds
/// lowered here, anything else (a socket closed meanwhile, whose real close
/// may be due; a held pipe) through its `_decref_socketios`.
fn release_conn(py: Python<'_>, conn: &Bound<'_, PyAny>) -> PyResult<()> {
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
