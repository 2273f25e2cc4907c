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
use std::sync::Mutex;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyOSError;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use pyo3::PyTraverseError;

use super::ring::LoopRing;
use super::sendfile::{send_cached, Outcome as SendOutcome};

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
    /// the common one, a send's rest and a failed send. Held strongly, as
    /// asyncio's bound `write` holds its transport: a protocol that keeps
    /// only `transport.write` keeps the transport (and its socket) open
    /// and can still write, or have a write after `close()` dropped. The
    /// transport holds this (its `write`) until its connection is lost
    /// (then it lets go: `_SocketTransport._call_connection_lost`); until
    /// then the pair is a reference cycle, which the collector sees
    /// (`__traverse__`) and breaks (`__clear__`). Behind a lock only so that `__clear__` can take it
    /// from a frozen object; never held across a Python call, and not
    /// touched by a write that goes out whole.
    transport: Mutex<Option<PyObject>>,
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
    /// The write side of `transport`, whose socket `sock` is sent on
    /// through `ring` (the loop's). `sock`'s type's `fileno` is looked up
    /// here, once. Not ready until the transport says so (`ready`).
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
            transport: Mutex::new(Some(transport.clone().unbind())),
            ready: AtomicBool::new(false),
        })
    }

    /// Whether a write may go to the socket at once (set by the transport).
    #[getter]
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Set by the transport whenever its state may have changed: true
    /// only while nothing is in flight or buffered, it is not closing or
    /// lost, no end of stream was written and no sendfile runs.
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

    /// The common `loop.sendfile(transport, file, offset, count)`: when
    /// the transport is ready (nothing in flight or buffered, not closing,
    /// no sendfile) and `fd` is a regular file whose range from `offset`
    /// (`count` bytes, or to its end when 0) the page cache holds, sends
    /// it to the socket with `sendfile(2)` as far as the socket takes it
    /// now (see `sendfile::send_cached`). `(sent, end, errno)`: `sent`
    /// bytes went out, and the sendfile is finished when `offset + sent
    /// >= end` (`end`: where the range ends, or where the file ended) and
    /// `errno` is 0; else `errno` is that of the call that failed, or 0
    /// when the socket took no more. `sent` is -1 when the range is not
    /// wholly cached (nothing sent). None when this is not the common case
    /// (not ready, not a regular file): nothing was sent.
    fn sendfile(
        &self,
        py: Python<'_>,
        fd: RawFd,
        offset: u64,
        count: u64,
    ) -> PyResult<Option<(i64, u64, i32)>> {
        if !self.ready.load(Ordering::Relaxed) || !self.ring.bind(py).borrow().usable() {
            return Ok(None);
        }
        let sock: RawFd = self.socket_number(py)?.extract()?;
        Ok(match send_cached(sock, fd, offset, count) {
            SendOutcome::NotHere => None,
            SendOutcome::Uncached { end } => Some((-1, end, 0)),
            SendOutcome::Sent { sent, end, error } => {
                Some((i64::try_from(sent).unwrap_or(i64::MAX), end, error))
            }
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.ring)?;
        visit.call(&self.sock)?;
        visit.call(&self.fileno)?;
        // (never held across a Python call, so never held here: the
        // collector runs only inside one)
        if let Ok(transport) = self.transport.try_lock() {
            if let Some(transport) = &*transport {
                visit.call(transport)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let transport = self.lock_transport().take();
        drop(transport); // (let go with the lock free: a finaliser may run)
    }
}

impl StreamTx {
    /// The lock on the transport (a poisoned lock is taken as it is: no
    /// code that holds it can panic).
    fn lock_transport(&self) -> std::sync::MutexGuard<'_, Option<PyObject>> {
        self.transport
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The transport (a `ReferenceError` only once the collector has
    /// cleared this, from a finaliser of the cycle being collected).
    fn transport<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let transport = self.lock_transport().as_ref().map(|t| t.clone_ref(py));
        transport.map(|t| t.into_bound(py)).ok_or_else(|| {
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

    /// Sends `data` on the socket if it is the common write (a non-empty
    /// `bytes`, `bytearray` or contiguous byte `memoryview`, the ring
    /// usable, the socket open): what the socket takes at once goes out
    /// now, a rest goes to the ring (from `data` itself if it is `bytes`,
    /// else from a copy) and is handed to the transport's `_sent_rest`
    /// (not ready until it is out), and a failed send to its
    /// `_write_failed`; all of these are [`Outcome::Done`]. Anything else
    /// is [`Outcome::Slow`], with nothing sent.
    fn write_now(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Outcome> {
        let ring = self.ring.bind(py).borrow();
        if !ring.usable() {
            return Ok(Outcome::Slow);
        }
        let fd: RawFd = self.socket_number(py)?.extract()?;
        if fd < 0 {
            return Ok(Outcome::Slow);
        }
        // (the send's outcome, and the bytes still to go out when it is
        // the rest's operation: what the write buffer's size counts, whole
        // until that operation ends)
        let (sent, left) = if let Ok(bytes) = data.downcast_exact::<PyBytes>() {
            let bytes = bytes.as_bytes();
            if bytes.is_empty() {
                return Ok(Outcome::Slow);
            }
            let n = bytes.len();
            match ring.send_now(fd, bytes) {
                Ok(sent) if sent == n => return Ok(Outcome::Done),
                // The rest is sent from `data` itself, which cannot change.
                Ok(sent) => (ring.send_rest(fd, PyBuffer::get(data)?, sent), n - sent),
                Err(e) => (Err(e), n),
            }
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
            match ring.send_now(fd, bytes) {
                Ok(sent) if sent == n => return Ok(Outcome::Done),
                Ok(sent) => {
                    // The rest goes out from a copy: the caller may change
                    // a mutable buffer once `write` returns.
                    let copy = PyBytes::new(py, bytes);
                    drop(b);
                    (
                        ring.send_rest(fd, PyBuffer::get(copy.as_any())?, sent),
                        n - sent,
                    )
                }
                Err(e) => (Err(e), n),
            }
        } else {
            return Ok(Outcome::Slow);
        };
        drop(ring);
        match sent {
            Ok(token) => {
                self.ready.store(false, Ordering::Relaxed);
                self.transport(py)?
                    .call_method1(intern!(py, "_sent_rest"), (token, left))?;
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
