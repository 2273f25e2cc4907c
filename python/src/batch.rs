//! The synchronous batches: reads into new `bytes` or into exported
//! buffers, and writes, on the batch engine with the GIL released.

use std::io;
use std::os::fd::RawFd;

use blockio::{Engine, Op, RawTarget};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::*;

/// `read_batch` on a buffered descriptor: each read goes straight into a new
/// `bytes` object, as `os.pread` does, so the data is copied once (by the
/// kernel), not twice through an arena (docs/benchmarks.md has the cost
/// that copy measured).
pub(crate) fn read_into_new_bytes<'py>(
    py: Python<'py>,
    engine: &Engine,
    fd: RawFd,
    offsets: &[u64],
    length: usize,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let size = pyo3::ffi::Py_ssize_t::try_from(length)
        .map_err(|_| PyValueError::new_err(format!("length {length} is too large")))?;
    let mut objs: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(offsets.len());
    for _ in offsets {
        // SAFETY: with a null source, PyBytes_FromStringAndSize returns a new
        // reference to a bytes object of `size` uninitialised bytes, or NULL
        // with an exception set (turned into Err here).
        let obj = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
            )?
        };
        // SAFETY: PyBytes_FromStringAndSize returned a bytes object.
        objs.push(unsafe { obj.downcast_into_unchecked() });
    }
    // The objects are new and referenced only by `objs`, so nothing else can
    // read them while the kernel fills them, and they outlive `submit`.
    let slots: Vec<usize> = objs
        .iter()
        // SAFETY: PyBytes_AsString on a bytes object returns its data
        // pointer, valid for `length` bytes while the object lives.
        .map(|b| unsafe { pyo3::ffi::PyBytes_AsString(b.as_ptr()) } as usize)
        .collect();
    let target = RawTarget(fd);
    let results = crate::gil::detach(py, || {
        let mut ops: Vec<Op<'_>> = slots
            .iter()
            .zip(offsets)
            .map(|(&p, &off)| {
                // SAFETY: `p` points at `length` bytes owned by a bytes
                // object in `objs`, which lives past this closure; no one
                // else has a reference to it (see above). MaybeUninit: the
                // bytes are not initialised until the read writes them.
                let buf = unsafe {
                    std::slice::from_raw_parts_mut(p as *mut std::mem::MaybeUninit<u8>, length)
                };
                Op::read_uninit(&target, off, buf)
            })
            .collect();
        engine.submit(&mut ops)
    });
    let results = results.map_err(io_err)?;
    let items: Vec<PyObject> = results
        .iter()
        .zip(objs)
        .zip(&slots)
        .map(|((r, obj), &p)| match r {
            Ok(n) if *n == length => obj.into_any().unbind(),
            Ok(n) => {
                // Short (end of file): copy out the first n bytes.
                // SAFETY: the read wrote (initialised) exactly these n
                // bytes of `obj`, which is alive here.
                let got = unsafe { std::slice::from_raw_parts(p as *const u8, *n) };
                PyBytes::new(py, got).into_any().unbind()
            }
            Err(e) => os_error(py, e),
        })
        .collect();
    with_failures(py, items, &results)
}

/// An exported buffer, its descriptor and the offset, for [`buffer_batch`].
pub(crate) type BufferOp = (RawTarget, PyBuffer<u8>, u64);

/// A read into all of an exported, writable buffer.
pub(crate) fn read_into_buffer<'a>(t: &'a RawTarget, b: &'a PyBuffer<u8>, off: u64) -> Op<'a> {
    // SAFETY: the buffer is exported (held by the caller of
    // `buffer_batch` for longer than the batch) and writable for
    // `len_bytes` bytes; the engine returns only when the operation
    // completed.
    let s = unsafe { std::slice::from_raw_parts_mut(b.buf_ptr() as *mut u8, b.len_bytes()) };
    Op::read(t, off, s)
}

/// A write of all of an exported buffer.
pub(crate) fn write_from_buffer<'a>(t: &'a RawTarget, b: &'a PyBuffer<u8>, off: u64) -> Op<'a> {
    // SAFETY: exported and readable for `len_bytes` bytes for longer than
    // the batch (see `read_into_buffer`).
    let s = unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) };
    Op::write(t, off, s)
}

/// Runs one engine batch, the GIL released, of the operations `make`
/// builds over exported Python buffers, but for those `refused` already
/// failed (their error in their place); the byte counts or OSErrors, and
/// how many failed. The buffers stay exported until the batch is over.
pub(crate) fn buffer_batch<'py>(
    py: Python<'py>,
    engine: &Engine,
    bufs: Vec<BufferOp>,
    refused: Vec<Option<io::Error>>,
    make: for<'a> fn(&'a RawTarget, &'a PyBuffer<u8>, u64) -> Op<'a>,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let ran = crate::gil::detach(py, || {
        let mut ops: Vec<Op<'_>> = bufs
            .iter()
            .zip(&refused)
            .filter(|(_, r)| r.is_none())
            .map(|((t, b, off), _)| make(t, b, *off))
            .collect();
        engine.submit(&mut ops)
    });
    let mut ran = ran.map_err(io_err)?.into_iter();
    let results: Vec<io::Result<usize>> = refused
        .into_iter()
        .zip(&bufs)
        .map(|(pre, (t, ..))| match pre {
            Some(e) => Err(e),
            None => explain_direct(ran.next().expect("a result per operation run"), t.0),
        })
        .collect();
    let items: Vec<PyObject> = results.iter().map(|r| count_or_error(py, r)).collect();
    drop(bufs);
    with_failures(py, items, &results)
}

/// Waits until each descriptor of `bufs` is ready for `events` (see
/// [`wait_ready`], `closed` included); the error each operation on a
/// refused one fails with, by operation (`None`: it runs). `given`: the
/// operations already refused (see [`refused_offsets`]), which keep their
/// errors and are not waited for (empty: none), and `flags` the `F_GETFL`
/// flags of descriptors already looked up.
pub(crate) fn refusals(
    py: Python<'_>,
    bufs: &[BufferOp],
    events: libc::c_short,
    closed: &dyn Fn() -> bool,
    mut given: Vec<Option<io::Error>>,
    flags: &std::collections::HashMap<RawFd, i32>,
) -> PyResult<Vec<Option<io::Error>>> {
    given.resize_with(bufs.len(), || None);
    let mut errnos = std::collections::HashMap::new();
    // Descriptors with an operation of some bytes; one with operations of
    // no bytes only is not waited for (they return at once, as
    // `os.read(fd, 0)` and `os.write(fd, b"")` do), only looked at.
    let moving: std::collections::HashSet<RawFd> = bufs
        .iter()
        .zip(&given)
        .filter(|((_, b, _), pre)| b.item_count() > 0 && pre.is_none())
        .map(|((t, ..), _)| t.0)
        .collect();
    for fd in distinct_fds(bufs.iter().map(|(t, ..)| t.0)) {
        let f = flags.get(&fd).copied().unwrap_or_else(|| fd_flags(fd));
        let refused = if !moving.contains(&fd) {
            refusal(fd, f)
        } else {
            wait_ready(py, fd, f, events, closed)?
        };
        if let Some(errno) = refused {
            errnos.insert(fd, errno);
        }
    }
    let what = if events & libc::POLLOUT != 0 {
        "write"
    } else {
        "read"
    };
    Ok(bufs
        .iter()
        .zip(given)
        .map(|((t, b, off), pre)| {
            pre.or_else(|| {
                errnos.get(&t.0).map(|&errno| {
                    let op = format!("{what} of {} bytes at offset {off}", b.item_count());
                    refused(&op, t.0, errno)
                })
            })
        })
        .collect())
}

/// The list of a synchronous batch's results and how many of them failed,
/// so that the Python layer walks the list only when something did.
pub(crate) fn with_failures<'py>(
    py: Python<'py>,
    items: Vec<PyObject>,
    results: &[io::Result<usize>],
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let failed = results.iter().filter(|r| r.is_err()).count();
    Ok((PyList::new(py, items)?, failed))
}
