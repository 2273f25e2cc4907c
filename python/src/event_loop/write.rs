//! A socket transport's `write`, in Rust: the common write (a `bytes`,
//! `bytearray` or `memoryview` to a transport with nothing in flight or
//! buffered, not closing) is one call into native code, with no Python
//! frame; every other write goes to the transport's Python method
//! (`_SocketTransport._write_slow` in `blockio/_loop.py`), which has
//! asyncio's semantics for all of them (buffering, write buffer limits,
//! writes after a close, after `write_eof()`, during a `sendfile`).
//!
//! Whether a write may be the common one is [`StreamTx`]'s `ready` flag,
//! which the transport's Python code sets from its whole state whenever
//! that state may have changed (see `_SocketTransport._update_write_ready`)
//! and which is cleared here when a send leaves a rest in flight.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyOSError;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyWeakrefReference};
use pyo3::PyTraverseError;

use super::ring::LoopRing;

/// The write side of one socket transport on the loop's ring; the
/// transport's `write` is its bound `write` method.
#[pyclass(frozen, module = "blockio._blockio")]
pub(crate) struct StreamTx {
    /// The loop's ring.
    ring: Py<LoopRing>,
    /// The transport's socket (its number is asked per write, as the
    /// socket may have been closed).
    sock: PyObject,
    /// Its type's `fileno` (a subclass's own, if it has one), called with
    /// the socket as its argument: no method is looked up per write.
    fileno: PyObject,
    /// The transport, whose Python methods take every write that is not
    /// the common one, a send's rest and a failed send; held weakly, as
    /// the transport holds this (its `write`), so that the pair makes no
    /// reference cycle and a dropped transport goes at once.
    transport: Py<PyWeakrefReference>,
    /// Whether nothing stands between a write and the socket (see the
    /// module's doc).
    ready: AtomicBool,
}

/// What [`StreamTx::write_now`] did with a write.
enum Outcome {
    /// All of it went out, or it failed and the transport was told.
    Done,
    /// Not the common write: the transport's Python method takes it.
    Slow,
}

#[pymethods]
impl StreamTx {
    #[new]
    fn new(
        ring: Py<LoopRing>,
        sock: &Bound<'_, PyAny>,
        transport: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let py = sock.py();
        Ok(StreamTx {
            ring,
            fileno: sock.get_type().getattr(intern!(py, "fileno"))?.unbind(),
            sock: sock.clone().unbind(),
            transport: PyWeakrefReference::new(transport)?.unbind(),
            ready: AtomicBool::new(false),
        })
    }

    /// Whether a write may go to the socket at once (set by the transport).
    #[getter]
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    #[setter]
    fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The transport's `write(data)`: sent at once when the transport is
    /// ready and `data` a non-empty `bytes`, `bytearray` or contiguous
    /// byte `memoryview`; what the socket does not take now goes to the
    /// ring (from a copy when `data` is mutable, so that changing it after
    /// `write` returns changes nothing sent) and the transport's
    /// `_sent_rest` makes that the send in flight. Anything else goes to
    /// the transport's `_write_slow`.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.ready.load(Ordering::Relaxed) {
            if let Outcome::Done = self.write_now(py, data)? {
                return Ok(());
            }
        }
        self.transport(py)?
            .call_method1(intern!(py, "_write_slow"), (data,))?;
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.ring)?;
        visit.call(&self.sock)?;
        visit.call(&self.fileno)?;
        visit.call(&self.transport)?;
        Ok(())
    }
}

impl StreamTx {
    /// The transport (a `ReferenceError` once it is gone: its `write`
    /// outlived it).
    fn transport<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.transport.bind(py).upgrade().ok_or_else(|| {
            pyo3::exceptions::PyReferenceError::new_err("the transport of this write is gone")
        })
    }

    /// `sock.fileno()`, by a vectorcall of the type's `fileno`.
    fn socket_number<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let args = [self.sock.as_ptr()];
        // SAFETY: `self.fileno` and `self.sock` are live Python objects
        // held by `self` for the whole call, which borrows them
        // (vectorcall takes no reference; no `PY_VECTORCALL_ARGUMENTS_OFFSET`:
        // the slot before `args` is not ours); the GIL is held (`py`). The
        // result is a new reference, or NULL with the exception set, which
        // `from_owned_ptr_or_err` takes over.
        unsafe {
            let out = pyo3::ffi::PyObject_Vectorcall(
                self.fileno.as_ptr(),
                args.as_ptr(),
                args.len(),
                std::ptr::null_mut(),
            );
            Bound::from_owned_ptr_or_err(py, out)
        }
    }

    fn write_now(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Outcome> {
        let ring = self.ring.bind(py).borrow();
        if !ring.usable() {
            return Ok(Outcome::Slow);
        }
        let fd: RawFd = self.socket_number(py)?.extract()?;
        if fd < 0 {
            return Ok(Outcome::Slow);
        }
        let (sent, n) = if let Ok(bytes) = data.downcast_exact::<PyBytes>() {
            let bytes = bytes.as_bytes();
            if bytes.is_empty() {
                return Ok(Outcome::Slow);
            }
            let sent = match ring.send_now(fd, bytes) {
                Ok(sent) if sent == bytes.len() => return Ok(Outcome::Done),
                // The rest is sent from `data` itself, which cannot change.
                Ok(sent) => ring.send_rest(fd, PyBuffer::get(data)?, sent),
                Err(e) => Err(e),
            };
            (sent, bytes.len())
        } else if data.is_exact_instance_of::<PyByteArray>()
            || data.is_exact_instance_of::<PyMemoryView>()
        {
            let Ok(b) = PyBuffer::<u8>::get(data) else {
                return Ok(Outcome::Slow); // not bytes (a memoryview of another format)
            };
            if !b.is_c_contiguous() || b.len_bytes() == 0 {
                return Ok(Outcome::Slow);
            }
            // SAFETY: `b` holds the export of a contiguous buffer of
            // `len_bytes()` bytes, which stays alive and unresized while
            // held; the GIL is held, so no Python code changes it while
            // `bytes` is used (until the copy below).
            let bytes = unsafe {
                std::slice::from_raw_parts(b.buf_ptr().cast::<u8>().cast_const(), b.len_bytes())
            };
            let n = bytes.len();
            let sent = match ring.send_now(fd, bytes) {
                Ok(sent) if sent == n => return Ok(Outcome::Done),
                Ok(sent) => {
                    // The rest goes out from a copy: the caller may change
                    // a mutable buffer once `write` returns.
                    let copy = PyBytes::new(py, bytes);
                    drop(b);
                    ring.send_rest(fd, PyBuffer::get(copy.as_any())?, sent)
                }
                Err(e) => Err(e),
            };
            (sent, n)
        } else {
            return Ok(Outcome::Slow);
        };
        drop(ring);
        match sent {
            Ok(token) => {
                self.ready.store(false, Ordering::Relaxed);
                self.transport(py)?
                    .call_method1(intern!(py, "_sent_rest"), (token, n))?;
            }
            Err(e) if e.is_instance_of::<PyOSError>(py) => {
                self.transport(py)?
                    .call_method1(intern!(py, "_write_failed"), (e.into_value(py),))?;
            }
            Err(e) => return Err(e),
        }
        Ok(Outcome::Done)
    }
}
