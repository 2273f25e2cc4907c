//! Asynchronous reads into the `bytes` objects they return: the kernel
//! fills a new object directly, so the event loop's thread neither copies
//! the bytes from a buffer of the core's when the read completes nor waits
//! for them; it only allocates the object (untouched memory, which the
//! kernel's copy faults in on the thread that runs the read) and, when the
//! read was short, shrinks it. A read longer than [`PIECE`] is made of
//! reads of at most that many bytes, so that no single operation holds
//! the engine for long; only [`lanes`] of them are in flight at once, each
//! piece starting when the piece that many places before it completed.
//! With all of them in flight, the thread-pool backend ran one copy per
//! piece at once (64 threads for 256 MiB), and the event loop's thread,
//! one runnable thread among them, waited hundreds of milliseconds for a
//! core (`docs/benchmarks.md`, "Large cached reads on the loop's thread").
//!
//! Reads shorter than [`FRESH_MIN`] keep the core's reused buffers (see
//! `Core::submit_read`): there, the copy costs less than a new object's
//! allocation and its trimming would.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use blockio::aio::{AsyncFile, BufResult, IoBuf, IoBufMut};
use futures_channel::oneshot;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::*;

/// The shortest read made into its own `bytes` object.
pub(crate) const FRESH_MIN: usize = 64 << 10;

/// The most bytes one operation of a read into a new `bytes` object asks
/// for.
pub(crate) const PIECE: usize = 4 << 20;

/// A part of a new `bytes` object, lent to the kernel by one read; it
/// keeps the object alive until the read completes, even if the task
/// that made it gave up.
pub(crate) struct Piece {
    obj: Py<PyBytes>,
    ptr: *mut u8,
    len: usize,
    /// The bytes of the object before the first piece (given by the
    /// caller, not read).
    lead: usize,
    /// The bytes of the piece read so far: a read fills what follows.
    filled: usize,
}

// SAFETY: `ptr` points into the bytes object `obj` keeps alive (a `Py` is
// Send, and dropping it without the GIL defers the decref to pyo3's pool);
// nothing else writes there (the object is new and handed to Python only
// once every piece's read has completed), and a bytes object's storage
// never moves.
unsafe impl Send for Piece {}

// SAFETY: as above: `len` bytes from `ptr` lie within the object's
// storage, and `filled <= len` (see `fill`).
unsafe impl IoBuf for Piece {
    fn stable_ptr(&self) -> *const u8 {
        // SAFETY: `filled <= len`: within (or at the end of) the piece.
        unsafe { self.ptr.add(self.filled) }
    }
    fn bytes_len(&self) -> usize {
        self.len - self.filled
    }
}

// SAFETY: as above; the object is not shared until the reads are done.
unsafe impl IoBufMut for Piece {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: `filled <= len`: within (or at the end of) the piece.
        unsafe { self.ptr.add(self.filled) }
    }
}

/// How many pieces a read of `length` bytes is made of (at least one).
pub(crate) fn pieces_of(length: usize) -> usize {
    length.div_ceil(PIECE).max(1)
}

/// How many pieces of one read are in flight at once: half the CPUs (one
/// on two), so that the copies of a large cached read leave a core to the
/// event loop and the program's other threads.
pub(crate) fn lanes() -> usize {
    static LANES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LANES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)))
}

/// Pieces in flight now, across every read, and the most there were since
/// [`pieces_in_flight_peak`] last reset it (the tests' view of [`lanes`]).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Counts one piece in flight while it lives.
struct Flying;

impl Flying {
    fn start() -> Flying {
        let now = IN_FLIGHT.fetch_add(1, Ordering::Relaxed) + 1;
        PEAK.fetch_max(now, Ordering::Relaxed);
        Flying
    }
}

impl Drop for Flying {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The most pieces of reads into new `bytes` objects that were in flight
/// at once since the last call (which starts the count again).
#[pyfunction]
pub(crate) fn pieces_in_flight_peak() -> usize {
    PEAK.swap(IN_FLIGHT.load(Ordering::Relaxed), Ordering::Relaxed)
}

/// A new `bytes` object of `length` bytes whose contents are not set:
/// only for memory the kernel writes before anyone reads it.
pub(crate) fn unfilled(py: Python<'_>, length: usize) -> PyResult<Py<PyBytes>> {
    let size = pyo3::ffi::Py_ssize_t::try_from(length).map_err(|_| {
        pyo3::exceptions::PyMemoryError::new_err(format!("cannot read {length} bytes at once"))
    })?;
    // SAFETY: with a null source, PyBytes_FromStringAndSize returns a new
    // reference to a bytes object of `size` bytes, not set, or NULL with
    // an exception set (turned into Err here); the GIL is held (`py`).
    let obj = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
        )?
    };
    // SAFETY: PyBytes_FromStringAndSize returned a bytes object.
    Ok(unsafe { obj.downcast_into_unchecked::<PyBytes>() }.unbind())
}

/// Starts the reads of `length` bytes (at least [`FRESH_MIN`], or any
/// after a `head`) at `offset` of `file` (`fd`, held as `dup`) into one new
/// `bytes` object that starts with `head` (the bytes a caller holds from
/// before `offset`, copied in here, at most a read-ahead's worth): one
/// operation per [`PIECE`], in order, which [`assemble`] puts together;
/// `shape.lanes` of them in flight at once, each read as `shape` says
/// (see [`shape`]).
pub(crate) fn start(
    py: Python<'_>,
    file: &Arc<AsyncFile>,
    (fd, dup): (RawFd, RawFd),
    offset: u64,
    head: &[u8],
    length: usize,
    shape: Shape,
) -> PyResult<Vec<Boxed<OneDone>>> {
    let lead = head.len();
    let obj = unfilled(py, lead + length)?;
    // SAFETY: `obj` is a bytes object; its storage is `lead + length` bytes long.
    let base: *mut u8 = unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) }.cast();
    // SAFETY: the object is new, `lead` bytes fit at its start, and `head`
    // (another object's storage, or a Rust slice) does not overlap it.
    unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), base, lead) };
    let Shape { lanes, size, piece } = shape;
    let mut futs: Vec<Boxed<OneDone>> = Vec::with_capacity(shape.pieces(length));
    let mut gates = std::collections::VecDeque::with_capacity(lanes);
    let mut at = 0;
    while at < length {
        let len = piece.min(length - at);
        let piece = Piece {
            obj: obj.clone_ref(py),
            // SAFETY: `lead + at + len <= lead + length`: within the
            // object's storage.
            ptr: unsafe { base.add(lead + at) },
            len,
            lead,
            filled: 0,
        };
        let file = Arc::clone(file);
        let off = offset + at as u64;
        let after = if gates.len() < lanes {
            None
        } else {
            gates.pop_front()
        };
        let (done, gate) = oneshot::channel::<()>();
        gates.push_back(gate);
        futs.push(Box::pin(async move {
            if let Some(after) = after {
                // (Err: the piece before was dropped unfinished, with the
                // whole read: this one is dropped too, never polled again)
                let _ = after.await;
            }
            let flying = Flying::start();
            let (r, buf) = fill(&file, piece, off, size).await;
            drop(flying);
            let _ = done.send(());
            OneDone::Read((explain_direct(name_given_fd(r, dup, fd), fd), buf))
        }));
        at += len;
    }
    Ok(futs)
}

/// How [`start`] reads a file in pieces, from what the file is.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    /// Pieces in flight at once.
    lanes: usize,
    /// Where a short read is the end ([`fill`]): `None`, only a read
    /// returning nothing says so.
    size: Option<u64>,
    /// The most bytes one piece asks for: [`PIECE`], or, for a stream
    /// read once, the whole length.
    piece: usize,
}

impl Shape {
    /// How many pieces a read of `length` bytes is made of (at least one).
    pub(crate) fn pieces(&self, length: usize) -> usize {
        length.div_ceil(self.piece).max(1)
    }
}

/// How `fd` is read in pieces, asked once per read however many offsets
/// it has. A regular file's pieces run [`lanes`] side by side; anything
/// else (a device, a pipe: its reads may ignore the offset) one after the
/// other, so that a piece reading on past a short read never runs beside
/// the next. A regular file's size says where a read ends, unless it is 0
/// (a procfs file is "regular" with size 0 and returns less than asked
/// anywhere): then, for a read that wants every byte up to its length
/// (`whole`: a buffered file's), a procfs file's pieces read on past
/// short reads; else (`Engine.aread`, an unbuffered file's read: one
/// read(2) as `FileIO`'s) a short read ends its piece, as a regular
/// file's end does. A pipe, socket or terminal (a character device
/// without offsets) read so (not `whole`) is one read(2) of the whole
/// length, as `os.read`'s: a stream
/// may hold less than asked now, and a read on past what it holds would
/// wait for more, or, as a second piece, take bytes that the end of the
/// first, short, piece then drops.
pub(crate) fn shape(fd: RawFd, whole: bool) -> Shape {
    use rustix::fs::FileType;
    // SAFETY: the caller's `AsyncFile` holds `fd` open for this call.
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    let Ok(st) = rustix::fs::fstat(fd) else {
        return Shape {
            lanes: 1,
            size: None,
            piece: PIECE,
        };
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    let regular = kind == FileType::RegularFile;
    // (a character device with offsets, `/dev/zero`, is no stream: its
    // reads may stop short anywhere, and are read on; a terminal has none)
    let stream = crate::fds::is_stream(fd, kind);
    if stream && !whole {
        return Shape {
            lanes: 1,
            size: Some(0),
            piece: usize::MAX,
        };
    }
    let size = u64::try_from(st.st_size).ok().filter(|&n| regular && n > 0);
    Shape {
        lanes: if regular { lanes() } else { 1 },
        size: if regular && !whole {
            size.or(Some(0))
        } else {
            size
        },
        piece: PIECE,
    }
}

/// Reads `piece` at `offset` until it is full, an error comes, or the end
/// of the file is confirmed: by a read that returns nothing, or, on a
/// regular file of `size` bytes (when the read started), by a short read
/// that reaches that size. A short read is not the end elsewhere: a
/// character device or a procfs file may return less than asked anywhere.
/// Gives the bytes read (an error only if the first read failed) and the
/// piece as it was lent.
async fn fill(
    file: &AsyncFile,
    mut piece: Piece,
    offset: u64,
    size: Option<u64>,
) -> BufResult<usize, Buf> {
    let result = loop {
        let at = offset + piece.filled as u64;
        let (r, buf) = file.read_at(Buf::Fresh(piece), at).await;
        piece = match buf {
            Buf::Fresh(p) => p,
            other => return (r, other), // (never: the buffer comes back as lent)
        };
        match r {
            Ok(0) => break Ok(piece.filled),
            Ok(n) => piece.filled += n.min(piece.len - piece.filled),
            Err(e) if piece.filled == 0 => break Err(e),
            // (the bytes before it; the next read meets it again)
            Err(_) => break Ok(piece.filled),
        }
        let end = size.is_some_and(|s| offset + piece.filled as u64 >= s);
        if piece.filled == piece.len || end {
            break Ok(piece.filled);
        }
    };
    piece.filled = 0;
    (result, Buf::Fresh(piece))
}

/// The result of one read made by [`start`] from its pieces' results, in
/// order: its `bytes` object, holding the head it started with, then the
/// bytes up to the end of the first short piece (the file's end: see
/// [`fill`]), or the error of the first piece that failed before it.
pub(crate) fn assemble(py: Python<'_>, pieces: Vec<BufResult<usize, Buf>>) -> PyResult<PyObject> {
    let mut total = None;
    let mut error = None;
    let mut obj = None;
    let mut ended = false;
    for (r, buf) in pieces {
        let Buf::Fresh(piece) = buf else {
            // (an operation refused before it started: its error)
            if !ended && error.is_none() {
                error = r.err();
            }
            continue;
        };
        if !ended && error.is_none() {
            match r {
                Ok(n) => {
                    *total.get_or_insert(piece.lead) += n;
                    ended = n < piece.len;
                }
                Err(e) => error = Some(e),
            }
        }
        obj.get_or_insert_with(|| piece.obj.clone_ref(py));
    }
    if let Some(e) = error {
        return Ok(os_error(py, &e));
    }
    match obj {
        Some(obj) => shrunk(py, obj, total.unwrap_or(0)),
        None => Ok(PyBytes::new(py, b"").into_any().unbind()), // (no piece: nothing read)
    }
}

/// `obj` cut to its first `n` bytes: shrunk in place when nothing else
/// holds it, else copied.
pub(crate) fn shrunk(py: Python<'_>, obj: Py<PyBytes>, n: usize) -> PyResult<PyObject> {
    let len = obj.bind(py).as_bytes().len();
    if n == len {
        return Ok(obj.into_any());
    }
    if obj.get_refcnt(py) != 1 {
        return Ok(new_bytes(py, &obj.bind(py).as_bytes()[..n])?
            .into_any()
            .unbind());
    }
    let mut raw = obj.into_ptr();
    let size = pyo3::ffi::Py_ssize_t::try_from(n).expect("shorter than the object");
    // SAFETY: `raw` is the only reference to a bytes object (its count is
    // 1, and it was taken from `obj`), as _PyBytes_Resize requires; it
    // reallocates the object and sets `raw` to it, or sets `raw` to NULL
    // (the object freed) with an exception set. The GIL is held.
    if unsafe { pyo3::ffi::_PyBytes_Resize(&mut raw, size) } != 0 {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `raw` is the resized object, a new (owned) reference.
    Ok(unsafe { Py::from_owned_ptr(py, raw) })
}
