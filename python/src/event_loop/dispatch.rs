//! The per-message path of a socket transport on the loop's ring, in Rust:
//! the dispatch of a completion batch ([`dispatch_batch`], the body of
//! `RingProactor.select`) and the arming of a transport's next receive
//! ([`arm_receive`], `RingProactor.receive`).
//!
//! A transport's receive is kept in the ring's slab with its owner (the
//! [`StreamRx`], the callback, the socket it holds open: `ops::Owner`), not
//! in the proactor's Python tables (`_ops`, `_receiving`, `_held`): its
//! completion comes out of the ring with them, calls the transport's
//! callback in the receive's context at once, and the callback arms the
//! next receive in one call, which takes over the finished receive's hold
//! on the socket. A message makes no dict entry and no tuple of the
//! proactor's. The receive's own state is [`StreamRx`]'s fields, read
//! without attribute lookups. What is not the common case (an error or
//! end of stream, a receive cancelled or handed kept bytes, a batch that
//! must wait behind queued callbacks) is put in the proactor's tables as
//! the operation it was (`_STREAM`) and goes to its Python code
//! (`_finish`), which decides exactly as for any other operation; every
//! other kind of operation goes there too.
//!
//! A datagram endpoint's receive is the same [`StreamRx`], with
//! `datagram` set: a `recvmsg` whose value is `(bytes, address)` (an empty
//! datagram is delivered, not an end), handed to the endpoint's protocol
//! as `datagram_received(data, address)` after the next receive is armed,
//! as asyncio's readiness callback reads and then calls the protocol: a
//! datagram costs no future, done callback or `call_soon` of asyncio's
//! proactor transport (`docs/benchmarks.md`, "A datagram endpoint's
//! receive kept on the ring"). Every datagram is taken by the ring's
//! `recvmsg`: a `recvmsg` with `MSG_DONTWAIT` tried at each arming failed
//! at every arming in ping-pong and at half of them in a burst, for no
//! less CPU ("A datagram endpoint's receive: no try at its arming").

use std::os::fd::RawFd;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PySet, PyTuple, PyType};
use pyo3::PyTraverseError;

use super::ops::Owner;
use super::ring::{Done, LoopRing};
use super::vcall::call_in_place;

/// `_STREAM` of `blockio/_proactor.py`: the kind of a transport's receive
/// in the proactor's `_ops` (where one goes to `_finish`).
const STREAM: i64 = 6;

/// `socket.socket`, whose `_decref_socketios` is done here when the
/// socket is still open (the common case) instead of through its Python
/// method.
static SOCKET_TYPE: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// `contextvars.Context.run`, called with the context as its first
/// argument: no bound method is made (nor looked up) per message.
static CONTEXT_RUN: GILOnceCell<PyObject> = GILOnceCell::new();

/// Dispatches what `ring` (the proactor's `LoopRing`) has finished (see
/// `LoopRing.fill`) on `proactor` (a `RingProactor`), as its `select` did
/// in Python: a transport's receive that brought bytes, was neither
/// cancelled nor redirected, in a batch allowed to reach protocols at once
/// (`_direct`), calls its callback `(data, None)` in the receive's context
/// here; any other operation is taken from `_ops` and goes to
/// `proactor._finish`, and the socket it held open is released. An
/// exception from a callback other than `SystemExit` and
/// `KeyboardInterrupt` goes to the receive's `report` (the loop's
/// exception handler); any error that comes out (those two, or one of the
/// dispatch itself) stops the dispatch, and the rest stays in the ring for
/// the next `select`.
#[pyfunction]
pub(crate) fn dispatch_batch(
    py: Python<'_>,
    proactor: &Bound<'_, PyAny>,
    ring: &Bound<'_, LoopRing>,
) -> PyResult<()> {
    let tables = Tables::of(proactor)?;
    let ring = ring.borrow();
    while let Some(done) = ring.next_done(py)? {
        match done {
            Done::Plain(token, res, value) => {
                let token = token.into_pyobject(py)?;
                let done = tables.finish(py, proactor, &token, res, value);
                let released = tables.release(py, &token);
                done.and(released)?;
            }
            Done::Stream {
                token,
                res,
                value,
                owner,
                ..
            } => tables.stream(py, proactor, token, res, value, owner)?,
        }
    }
    Ok(())
}

/// The state of a socket transport's receive, armed again after each
/// completion: the base class of `blockio._proactor.StreamReceive`, whose
/// methods are Python's. Its fields are what [`arm_receive`] and
/// [`dispatch_batch`] read per message; it keeps the proactor's `_kept`
/// and the ring it arms into (the proactor replaces neither before its
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
    /// The first buffer of its next receive on a stream socket, in bytes:
    /// 2 KiB, lent to the kernel while it waits; grown after a message
    /// that filled it (then a readiness poll, its `bytes` made at the
    /// dispatch: `ring::recv_op`) and shrunk after small ones
    /// (`ring::next_first`), so that a large
    /// message is taken by one receive, without `FIONREAD` and a second
    /// `recv` for its rest.
    #[pyo3(get)]
    pub(crate) first: usize,
    /// The token of the receive in flight as a number (`token` to
    /// Python), None when not armed or when `token` is the marker of kept
    /// bytes about to be handed on (`marker`). What the dispatch compares
    /// a completion's token with, per message, without converting a
    /// Python int; and an arming makes no Python int (the getter makes
    /// one when asked, `docs/benchmarks.md`).
    armed: Option<u64>,
    /// `token` when it is not a number: the proactor's marker of kept
    /// bytes about to be handed on.
    marker: Option<PyObject>,
    /// Its cancellation was asked for.
    #[pyo3(get, set)]
    cancelled: bool,
    /// The plain protocol, while a socket transport reads on with one (set
    /// by the transport, `_update_direct`): bytes then go to its
    /// `data_received`, looked up per message as asyncio's transport does,
    /// from the dispatch, which arms the next receive first, as the
    /// transport's callback would (see [`Tables::deliver`]).
    #[pyo3(get, set)]
    direct: Option<PyObject>,
    /// While its callback runs: the finished receive's hold on `conn`,
    /// handed to the next receive armed then (see [`arm_receive`]) instead
    /// of being ended and taken again; ended after the callback otherwise.
    carried: Option<PyObject>,
    /// A datagram endpoint's receive (`recvmsg`, one datagram and its
    /// sender per completion, `(bytes, address)`), not a stream's: its
    /// `direct` protocol is handed `datagram_received(data, address)`.
    #[pyo3(get)]
    datagram: bool,
    /// The address a datagram receive's `direct` protocol is handed in
    /// place of the sender's: a connected endpoint's peer, as asyncio's
    /// proactor transport hands it; None: the sender's.
    #[pyo3(get, set)]
    peer: Option<PyObject>,
    /// The proactor's `_kept` (or `_kept_datagrams`), and its ring.
    tables: Option<RxTables>,
}

/// What a receive arms into (see [`StreamRx`]).
struct RxTables {
    kept: Py<PyDict>,
    ring: Py<LoopRing>,
}

#[pymethods]
impl StreamRx {
    /// A receive of at most `nbytes` from `conn` (descriptor `fd`) on
    /// `proactor`'s ring, its callbacks run in `context`; a datagram
    /// endpoint's (`datagram`, a `recvmsg` on the ring each).
    #[new]
    #[pyo3(signature = (proactor, conn, fd, nbytes, socket, stream, holdable, context, datagram = false))]
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
        datagram: bool,
    ) -> PyResult<Self> {
        let tables = RxTables {
            kept: proactor
                .getattr(if datagram { "_kept_datagrams" } else { "_kept" })?
                .downcast_into::<PyDict>()?
                .unbind(),
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
            first: super::ring::RECV_FIRST,
            armed: None,
            marker: None,
            direct: None,
            cancelled: false,
            carried: None,
            datagram,
            peer: None,
            tables: Some(tables),
        })
    }

    /// The token of the receive in flight (or the marker of kept bytes
    /// about to be handed on); None when not armed.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<PyObject> {
        Ok(match (self.armed, &self.marker) {
            (Some(t), _) => t.into_pyobject(py)?.into_any().unbind(),
            (None, Some(m)) => m.clone_ref(py),
            (None, None) => py.None(),
        })
    }

    /// Sets `token` (the proactor's Python: None, a token, or the marker
    /// of kept bytes).
    #[setter]
    fn set_token(&mut self, token: &Bound<'_, PyAny>) {
        self.armed = token.extract::<u64>().ok();
        self.marker = if self.armed.is_some() || token.is_none() {
            None
        } else {
            Some(token.clone().unbind())
        };
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.proactor)?;
        visit.call(&self.conn)?;
        visit.call(&self.context)?;
        if let Some(m) = &self.marker {
            visit.call(m)?;
        }
        if let Some(d) = &self.direct {
            visit.call(d)?;
        }
        if let Some(conn) = &self.carried {
            visit.call(conn)?;
        }
        if let Some(p) = &self.peer {
            visit.call(p)?;
        }
        if let Some(t) = &self.tables {
            visit.call(&t.kept)?;
            visit.call(&t.ring)?;
        }
        Ok(())
    }

    fn __clear__(&mut self, py: Python<'_>) {
        self.tables = None;
        self.carried = None;
        self.marker = None;
        self.direct = None;
        self.peer = None;
        self.armed = None;
        self.context = py.None();
        self.proactor = py.None();
        self.conn = py.None();
    }
}

/// Arms the next receive of `rx` (a `StreamReceive`), whose completion
/// calls `callback`: `RingProactor.receive`, in one call. When bytes (a
/// datagram receive: datagrams) a cancelled receive left are kept for this
/// descriptor, the proactor's own `receive` decides (they may be this
/// socket's, or a closed one's that had the number).
#[pyfunction]
pub(crate) fn arm_receive(
    py: Python<'_>,
    rx: &Bound<'_, StreamRx>,
    callback: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let kept = {
        let this = rx.borrow();
        let Some(t) = &this.tables else {
            return Err(ring_closed());
        };
        let kept = t.kept.bind(py);
        !kept.is_empty() && kept.contains(this.fd)?
    };
    if kept {
        let proactor = rx.borrow().proactor.clone_ref(py);
        proactor.call_method1(py, intern!(py, "receive"), (rx, callback))?;
        return Ok(());
    }
    arm_ring_receive(py, rx, callback)
}

/// Arms the next receive of `rx` on the ring, kept in its slab with `rx`,
/// `callback` and (when `rx` is holdable) its socket held open: the hold
/// of the receive whose callback runs now, or a new one.
#[pyfunction]
pub(crate) fn arm_ring_receive(
    py: Python<'_>,
    rx: &Bound<'_, StreamRx>,
    callback: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let mut this = rx.borrow_mut();
    let Some(t) = &this.tables else {
        return Err(ring_closed());
    };
    let ring = t.ring.bind(py).clone();
    let hold = if this.holdable {
        Some(match this.carried.take() {
            Some(conn) => conn,
            None => {
                // hold_open, known to hold: the socket stays open until
                // the completion is dispatched.
                let conn = this.conn.bind(py);
                let refs: i64 = conn.getattr(intern!(py, "_io_refs"))?.extract()?;
                conn.setattr(intern!(py, "_io_refs"), refs + 1)?;
                conn.clone().unbind()
            }
        })
    } else {
        None
    };
    let owner = Owner {
        rx: rx.clone().unbind(),
        callback: callback.clone().unbind(),
        hold,
    };
    let ask = super::ring::RecvAsk {
        fd: this.fd,
        nbytes: this.nbytes,
        socket: this.socket,
        stream: this.stream,
        first: this.first,
        datagram: this.datagram,
    };
    let armed = ring.borrow().arm_stream(ask, owner);
    match armed {
        Ok(token) => {
            this.cancelled = false;
            this.armed = Some(token);
            if let Some(m) = this.marker.take() {
                drop(m.into_bound(py));
            }
            Ok(())
        }
        Err((e, owner)) => {
            drop(this);
            if let Some(conn) = owner.and_then(|o| o.hold) {
                release_conn(py, &conn.into_bound(py))?;
            }
            Err(e)
        }
    }
}

fn ring_closed() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("the event loop's ring is closed")
}

/// The proactor's tables that the dispatch reads and changes.
struct Tables<'py> {
    /// token -> (future or receive, kind, argument)
    ops: Bound<'py, PyDict>,
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
            held: dict(intern!(py, "_held"))?,
            redirected: proactor
                .getattr(intern!(py, "_redirected"))?
                .downcast_into::<PySet>()?,
            direct: proactor.getattr(intern!(py, "_direct"))?.is_truthy()?,
        })
    }

    /// Finishes operation `token` of the proactor's tables: `_finish`.
    fn finish(
        &self,
        py: Python<'py>,
        proactor: &Bound<'py, PyAny>,
        token: &Bound<'py, PyAny>,
        res: i64,
        value: PyObject,
    ) -> PyResult<()> {
        let Some(entry) = self.ops.get_item(token)? else {
            return Ok(());
        };
        self.ops.del_item(token)?;
        proactor.call_method1(intern!(py, "_finish"), (token, entry, res, value))?;
        Ok(())
    }

    /// Finishes a transport's receive (see [`dispatch_batch`]): delivered
    /// here in the common case, else handed to `_finish` as the `_STREAM`
    /// operation of the proactor's tables it stands for.
    fn stream(
        &self,
        py: Python<'py>,
        proactor: &Bound<'py, PyAny>,
        token: u64,
        res: i64,
        value: PyObject,
        owner: Owner,
    ) -> PyResult<()> {
        // (each Python reference as a `Bound`, whose drop is a plain
        // decrement, not pyo3's check for the GIL per reference)
        let Owner { rx, callback, hold } = owner;
        let (rx, callback) = (rx.into_bound(py), callback.into_bound(py));
        let hold = hold.map(|h| h.into_bound(py));
        let value = value.into_bound(py);
        let rx = &rx;
        if res >= 0
            && self.direct
            && (self.redirected.is_empty() || !self.redirected.contains(token)?)
        {
            // (a stream's 0 is its end, which goes to `_finish`; a
            // datagram's, an empty datagram, is delivered as any other)
            let armed = {
                let this = rx.borrow();
                !this.cancelled && this.armed == Some(token) && (res > 0 || this.datagram)
            };
            if armed {
                return self.deliver(py, rx, callback, hold, value);
            }
        }
        let token = token.into_pyobject(py)?;
        let arg = {
            let this = rx.borrow();
            PyTuple::new(
                py,
                [
                    this.fd.into_pyobject(py)?.into_any(),
                    this.conn.bind(py).clone(),
                    this.nbytes.into_pyobject(py)?.into_any(),
                    callback,
                ],
            )?
        };
        if let Some(conn) = hold {
            self.held.set_item(&token, conn)?;
        }
        let entry = (rx, STREAM, arg).into_pyobject(py)?;
        let done = proactor.call_method1(intern!(py, "_finish"), (&token, entry, res, value));
        let released = self.release(py, &token);
        done.and(released).map(drop)
    }

    /// Hands a transport's receive its bytes: `callback(data, None)` in
    /// the receive's context, as `StreamReceive.deliver` does; or, when
    /// the receive has a `direct` (a socket transport reading on with a
    /// plain protocol), what that callback (`_received`) does with bytes,
    /// without its Python: the next receive armed, then `data_received`
    /// called in the receive's context, an exception from it handed to the
    /// transport's `_fatal_error` (see [`Tables::direct`]). A datagram
    /// receive's `direct` (a datagram endpoint's protocol) is handed
    /// `datagram_received(data, address)` after the next receive is armed,
    /// as the endpoint's callback (`_datagram`) would, and an exception
    /// from it goes to the loop's exception handler (`report`), as one
    /// from asyncio's read callback does: reading goes on. The receive's
    /// hold on its socket (`hold`) goes to the next receive armed, and is
    /// ended after the callback if none was.
    fn deliver(
        &self,
        py: Python<'py>,
        rx: &Bound<'py, StreamRx>,
        callback: Bound<'py, PyAny>,
        hold: Option<Bound<'py, PyAny>>,
        data: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let (context, direct, datagram, peer) = {
            let mut this = rx.borrow_mut();
            this.armed = None;
            if let Some(m) = this.marker.take() {
                drop(m.into_bound(py));
            }
            this.carried = hold.map(Bound::unbind);
            (
                this.context.bind(py).clone(),
                this.direct.as_ref().map(|d| d.bind(py).clone()),
                this.datagram,
                this.peer.as_ref().map(|p| p.bind(py).clone()),
            )
        };
        let run = CONTEXT_RUN.get_or_try_init(py, || -> PyResult<PyObject> {
            Ok(py
                .import("contextvars")?
                .getattr("Context")?
                .getattr("run")?
                .unbind())
        })?;
        let run = run.bind(py);
        let outcome = match direct {
            Some(protocol) if datagram && arm_receive(py, rx, &callback).is_ok() => {
                datagram_received_in(py, &context, &protocol, &data, peer)
            }
            Some(protocol) if !datagram && arm_receive(py, rx, &callback).is_ok() => {
                Self::direct(py, run, &context, &callback, &protocol, &data)
            }
            // (an arming that failed is tried again, and its error
            // handled, by the callback)
            _ => call_in_place(
                py,
                run,
                &[&context, &callback, &data, &py.None().into_bound(py)],
                None,
            ),
        };
        let left = rx.borrow_mut().carried.take();
        if let Some(conn) = left {
            release_conn(py, &conn.into_bound(py))?;
        }
        match outcome {
            Ok(_) => Ok(()),
            Err(e)
                if e.is_instance_of::<PySystemExit>(py)
                    || e.is_instance_of::<PyKeyboardInterrupt>(py) =>
            {
                Err(e)
            }
            Err(e) => {
                // (into_value: the exception with its traceback attached)
                rx.call_method1(intern!(py, "report"), (callback, e.into_value(py)))?;
                Ok(())
            }
        }
    }

    /// `protocol.data_received(data)` in `context`, the next receive armed: as the
    /// transport's `_received` (the bound method `callback`) hands bytes to
    /// a plain protocol. An exception other than `SystemExit` and
    /// `KeyboardInterrupt` goes to the transport's `_fatal_error`, in the
    /// same context, as there.
    fn direct(
        py: Python<'py>,
        run: &Bound<'py, PyAny>,
        context: &Bound<'py, PyAny>,
        callback: &Bound<'py, PyAny>,
        protocol: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let name = intern!(py, "data_received");
        let err = match method_in(py, context, protocol, name, &[data]) {
            Ok(out) => return Ok(out),
            Err(e) => e,
        };
        if err.is_instance_of::<PySystemExit>(py) || err.is_instance_of::<PyKeyboardInterrupt>(py) {
            return Err(err);
        }
        let fatal = callback
            .getattr(intern!(py, "__self__"))?
            .getattr(intern!(py, "_fatal_error"))?;
        let message = intern!(py, "Fatal error: protocol.data_received() call failed.");
        // The exception with its traceback (`into_value` sets
        // `__traceback__`; `value` would hand it on without one, so that
        // `_fatal_error`'s log and `connection_lost` never named the
        // protocol's code).
        let exc = err.into_value(py).into_bound(py);
        call_in_place(
            py,
            run,
            &[context, &fatal, exc.as_any(), message.as_any()],
            None,
        )
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
pub(crate) fn release_conn(py: Python<'_>, conn: &Bound<'_, PyAny>) -> PyResult<()> {
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

/// `protocol.datagram_received(data, address)` in `context`, `value`
/// being a datagram receive's `(data, address)` and the address `peer`
/// in place of the sender's when given (see [`StreamRx::peer`]).
fn datagram_received_in<'py>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    protocol: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
    peer: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let value = value.downcast::<PyTuple>()?;
    let data = value.get_item(0)?;
    let addr = match peer {
        Some(p) => p,
        None => value.get_item(1)?,
    };
    let name = intern!(py, "datagram_received");
    method_in(py, context, protocol, name, &[&data, &addr])
}

/// `protocol.NAME(*args)` in `context` (at most two arguments), as
/// `context.run(protocol.NAME, *args)` and with its errors, without the
/// bound method and the call of `Context.run`: the context entered, the
/// method looked up per message as the interpreter's method call does
/// (asyncio's transport calls `self._protocol.data_received(data)`: one
/// replaced on the protocol object is the one called), the context left.
fn method_in<'py>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    protocol: &Bound<'py, PyAny>,
    name: &Bound<'py, pyo3::types::PyString>,
    args: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::ffi;
    let mut all = [protocol.as_ptr(); 3];
    let n = args.len().min(2);
    for (slot, a) in all[1..].iter_mut().zip(&args[..n]) {
        *slot = a.as_ptr();
    }
    // SAFETY: `context`, `protocol`, `args` and `name` are live Python
    // objects held by this function's caller (or the interned-name cell)
    // for the whole call; the GIL is held (`py`). `PyContext_Enter` raises
    // (returns -1 with the exception set) for an object that is not a
    // `Context` or one already entered, as `Context.run` does.
    // `PyObject_VectorcallMethod` borrows the first `n + 1` pointers of
    // `all` (self first, then the arguments; no
    // `PY_VECTORCALL_ARGUMENTS_OFFSET`: the slot before `all` is not ours)
    // and returns a new reference or NULL with the exception set, which
    // `from_owned_ptr_or_err` takes over (fetching it) before the context
    // is left. `PyContext_Exit` of the context entered here, on this
    // thread, succeeds unless a callee left it entered otherwise; its
    // error is then returned, as `Context.run`'s.
    unsafe {
        if ffi::PyContext_Enter(context.as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        let out = ffi::PyObject_VectorcallMethod(
            name.as_ptr(),
            all.as_ptr(),
            n + 1,
            std::ptr::null_mut(),
        );
        let out = Bound::from_owned_ptr_or_err(py, out);
        if ffi::PyContext_Exit(context.as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        out
    }
}
