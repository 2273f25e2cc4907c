//! The arguments Python passes, checked (lengths, offsets, buffers, paths)
//! before any operation is made, each error naming the argument.

use std::os::fd::RawFd;

use blockio::AlignedBuf;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The most one read or write moves on Linux (`MAX_RW_COUNT`, 2 GiB less
/// a page): a longer length would only reserve memory no read fills.
pub(crate) const MAX_IO: i64 = 0x7fff_f000;

/// A caller's `length`, checked: never negative, never more than one read
/// can return.
pub(crate) fn length_arg(length: i64) -> PyResult<usize> {
    if length < 0 {
        return Err(PyValueError::new_err(format!(
            "length must be at least 0, got {length}"
        )));
    }
    if length > MAX_IO {
        return Err(PyValueError::new_err(format!(
            "length {length} is more than one read returns on Linux ({MAX_IO} bytes): read it in parts"
        )));
    }
    Ok(length as usize)
}

/// A caller's file offset, checked: never negative. `index` names its
/// place in a batch.
pub(crate) fn offset_arg(offset: i64, index: Option<usize>) -> PyResult<u64> {
    u64::try_from(offset).map_err(|_| {
        let at = index.map_or(String::new(), |i| format!(" (item {i} of the batch)"));
        PyValueError::new_err(format!("offset must be at least 0, got {offset}{at}"))
    })
}

/// A caller's range of a file (`fallocate`), checked: neither end
/// negative. The kernel judges the rest (an empty range, one past the
/// largest file offset).
pub(crate) fn range_arg(offset: i64, length: i64) -> PyResult<(u64, u64)> {
    let length = u64::try_from(length)
        .map_err(|_| PyValueError::new_err(format!("length must be at least 0, got {length}")))?;
    Ok((offset_arg(offset, None)?, length))
}

pub(crate) fn offsets_arg(offsets: &[i64]) -> PyResult<Vec<u64>> {
    offsets
        .iter()
        .enumerate()
        .map(|(i, &o)| offset_arg(o, (offsets.len() > 1).then_some(i)))
        .collect()
}

/// `(fd, buffer, offset)` operations with their offsets checked.
pub(crate) fn buffer_ops<'py>(
    ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
) -> PyResult<Vec<(RawFd, Bound<'py, PyAny>, u64)>> {
    let many = ops.len() > 1;
    ops.into_iter()
        .enumerate()
        .map(|(i, (fd, b, off))| Ok((fd, b, offset_arg(off, many.then_some(i))?)))
        .collect()
}

/// `count` reads of `length` bytes, refused with `MemoryError` up front
/// when their buffers would not fit in this machine's memory (rather than
/// reserving address space that faults in, or fails, part-way).
pub(crate) fn total_arg(count: usize, length: usize) -> PyResult<()> {
    // SAFETY: sysconf only reads system parameters.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let memory = (pages.max(0) as u128) * (page.max(0) as u128);
    let total = count as u128 * length as u128;
    if memory > 0 && total > memory {
        return Err(PyMemoryError::new_err(format!(
            "{count} reads of {length} bytes need {total} bytes of buffers, more than this machine's memory ({memory} bytes)"
        )));
    }
    Ok(())
}

/// A buffer of `len` bytes the caller asked for, or `MemoryError`.
pub(crate) fn alloc_for(len: usize, what: &str) -> PyResult<AlignedBuf> {
    AlignedBuf::try_new(len, 4096)
        .map_err(|_| PyMemoryError::new_err(format!("cannot allocate {len} bytes for {what}")))
}

/// A path for the kernel, refusing an embedded NUL as `os` functions do.
pub(crate) fn c_path(path: Vec<u8>) -> PyResult<std::ffi::CString> {
    std::ffi::CString::new(path).map_err(|_| PyValueError::new_err("embedded null byte"))
}

/// Refuses a batch whose read buffers share memory (the same buffer
/// twice, or two views of one): two reads would write the same bytes at
/// once, and the core would hold two mutable slices over them. The error
/// names the items of `ops`.
pub(crate) fn refuse_overlaps<'a>(bufs: impl Iterator<Item = &'a PyBuffer<u8>>) -> PyResult<()> {
    let mut spans: Vec<(usize, usize, usize)> = bufs
        .enumerate()
        .filter(|(_, b)| b.len_bytes() > 0)
        .map(|(i, b)| {
            (
                b.buf_ptr() as usize,
                b.buf_ptr() as usize + b.len_bytes(),
                i,
            )
        })
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((_, end, i), (start, _, j)) = (w[0], w[1]);
        if start < end {
            let (i, j) = (i.min(j), i.max(j));
            return Err(PyValueError::new_err(format!(
                "ops: items {i} and {j} read into the same memory (one buffer twice, or overlapping views of one); \
                 give each read its own buffer"
            )));
        }
    }
    Ok(())
}

/// [`refuse_overlaps`] on the `(fd, buffer, offset)` items of an
/// asynchronous read batch, before any of it is submitted.
pub(crate) fn distinct_read_buffers(ops: &[(RawFd, Bound<'_, PyAny>, u64)]) -> PyResult<()> {
    if ops.len() < 2 {
        return Ok(());
    }
    let bufs = ops
        .iter()
        .map(|(_, b, _)| writable(b))
        .collect::<PyResult<Vec<_>>>()?;
    refuse_overlaps(bufs.iter())
}

/// Each descriptor of `fds` once, in order of first appearance.
pub(crate) fn distinct_fds(fds: impl Iterator<Item = RawFd>) -> Vec<RawFd> {
    let mut out: Vec<RawFd> = Vec::new();
    for fd in fds {
        if !out.contains(&fd) {
            out.push(fd);
        }
    }
    out
}

/// A writable, C-contiguous byte buffer from any buffer-protocol object.
pub(crate) fn writable(obj: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let b = PyBuffer::<u8>::get(obj)?;
    if b.readonly() {
        return Err(PyTypeError::new_err(
            "readinto needs a writable buffer (bytearray, memoryview, numpy array, mmap), got a read-only one",
        ));
    }
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "readinto needs a C-contiguous buffer",
        ));
    }
    Ok(b)
}

pub(crate) fn readable(obj: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let b = PyBuffer::<u8>::get(obj)?;
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err("write needs a C-contiguous buffer"));
    }
    Ok(b)
}
