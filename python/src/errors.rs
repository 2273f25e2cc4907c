//! Errors as Python sees them: `OSError` with the errno (kept through the
//! engine's rewording) and a message naming the caller's descriptor.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::fsjobs::Out;
use crate::*;

/// The result of an operation on the caller's `fd`, with an `EINVAL` on
/// an `O_DIRECT` descriptor explained: the kernel only says "Invalid
/// argument", so the error names the alignment this file needs (looked up
/// only when that happens).
pub(crate) fn explain_direct(r: io::Result<usize>, fd: RawFd) -> io::Result<usize> {
    let e = match r {
        Err(e) if errno_of(&e) == libc::EINVAL && is_direct(fd) => e,
        other => return other,
    };
    // SAFETY: borrowed for one statx; if another thread closed the number
    // meanwhile, statx fails (or describes the file now open there) and
    // only this message is affected.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    match blockio::Alignment::of(&borrowed) {
        Ok((a, _)) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{e}: O_DIRECT on this file needs offsets and lengths that are multiples of {} bytes \
                 and buffer addresses that are multiples of {} bytes (blockio.aligned_buffer(n) allocates such a buffer)",
                a.offset, a.memory
            ),
        )),
        Err(_) => Err(e),
    }
}

/// A job's count, or its descriptor (whose ownership passes to Python),
/// as an int; or the OSError.
pub(crate) fn out_or_error(py: Python<'_>, r: io::Result<Out>) -> PyObject {
    match r {
        Ok(Out::Count(n)) => n.into_pyobject(py).expect("int").into_any().unbind(),
        Ok(Out::Stat(st)) => stat_tuple(&st)
            .into_pyobject(py)
            .expect("tuple")
            .into_any()
            .unbind(),
        Ok(Out::Fd(fd)) => std::os::fd::IntoRawFd::into_raw_fd(fd)
            .into_pyobject(py)
            .expect("int")
            .into_any()
            .unbind(),
        Ok(Out::Files(files)) => {
            let items = files.iter().map(|r| file_content(py, r));
            PyList::new(py, items).expect("list").into_any().unbind()
        }
        Err(e) => os_error(py, &e),
    }
}

/// A `statx` result as the Python layer builds `os.stat_result` from it:
/// `(mode, ino, dev_major, dev_minor, nlink, uid, gid, size, atime,
/// atime_nsec, mtime, mtime_nsec, ctime, ctime_nsec, blksize, blocks,
/// rdev_major, rdev_minor)`.
pub(crate) fn stat_tuple(st: &libc::statx) -> [i64; 18] {
    [
        i64::from(st.stx_mode),
        st.stx_ino as i64,
        i64::from(st.stx_dev_major),
        i64::from(st.stx_dev_minor),
        i64::from(st.stx_nlink),
        i64::from(st.stx_uid),
        i64::from(st.stx_gid),
        st.stx_size as i64,
        st.stx_atime.tv_sec,
        i64::from(st.stx_atime.tv_nsec),
        st.stx_mtime.tv_sec,
        i64::from(st.stx_mtime.tv_nsec),
        st.stx_ctime.tv_sec,
        i64::from(st.stx_ctime.tv_nsec),
        i64::from(st.stx_blksize),
        st.stx_blocks as i64,
        i64::from(st.stx_rdev_major),
        i64::from(st.stx_rdev_minor),
    ]
}

/// A byte count as an int, or the OSError.
pub(crate) fn count_or_error(py: Python<'_>, r: &io::Result<usize>) -> PyObject {
    match r {
        Ok(n) => n.into_pyobject(py).expect("int").into_any().unbind(),
        Err(e) => os_error(py, e),
    }
}

/// The errno to give Python for `e`: its own; else the one its kind
/// stands for, so that an error the engine rewords keeps its cause (a
/// required io_uring that the kernel or a seccomp profile denies is
/// `EPERM`, not `EIO`); else `EIO`.
pub(crate) fn errno_of(e: &io::Error) -> i32 {
    if let Some(r) = e.get_ref().and_then(|r| r.downcast_ref::<Renamed>()) {
        return r.errno;
    }
    blockio::errno(e).unwrap_or(match e.kind() {
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::PermissionDenied => libc::EPERM,
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::Unsupported => libc::ENOSYS,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::Interrupted => libc::EINTR,
        _ => libc::EIO,
    })
}

/// An operation's error reworded to name the caller's descriptor instead
/// of the duplicate the operation ran on (see [`hold_file`]), with its
/// errno kept.
#[derive(Debug)]
pub(crate) struct Renamed {
    pub(crate) errno: i32,
    pub(crate) text: String,
}

impl std::fmt::Display for Renamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Renamed {}

/// The error of an operation refused before it reached the kernel (by
/// [`hold_file`] or [`wait_ready`]'s look at the descriptor), worded as the
/// engine words an operation that failed: `what` (`"read of 10 bytes at
/// offset 0"`), the caller's `fd`, and why, with `errno` kept.
pub(crate) fn refused(what: &str, fd: RawFd, errno: i32) -> io::Error {
    let why = match errno {
        libc::EINVAL => ": an epoll instance, pidfd or io_uring, which has no read or write",
        libc::ECANCELED => ": the engine was closed while the call waited for the descriptor",
        _ => "",
    };
    let text = format!(
        "{what} on fd {fd} failed: {}{why}",
        message(&io::Error::from_raw_os_error(errno), errno)
    );
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        Renamed { errno, text },
    )
}

/// `r` with the duplicate `dup` named as the `fd` the program gave in its message.
pub(crate) fn name_given_fd<T>(r: io::Result<T>, dup: RawFd, fd: RawFd) -> io::Result<T> {
    r.map_err(|e| {
        let errno = errno_of(&e);
        let text = message(&e, errno);
        let dup_name = format!("fd {dup}");
        if dup == fd || !text.contains(&dup_name) {
            return e;
        }
        let text = text.replace(&dup_name, &format!("fd {fd}"));
        io::Error::new(e.kind(), Renamed { errno, text })
    })
}

/// `e`'s message without Rust's " (os error N)": Python prints the errno
/// first (`[Errno N] ...`).
pub(crate) fn message(e: &io::Error, code: i32) -> String {
    e.to_string().replace(&format!(" (os error {code})"), "")
}

pub(crate) fn os_error(py: Python<'_>, e: &io::Error) -> PyObject {
    let code = errno_of(e);
    PyOSError::new_err((code, message(e, code)))
        .into_value(py)
        .into_any()
}

/// One file's failure in a whole-file read: `MemoryError` for a file larger
/// than memory ([`io::ErrorKind::OutOfMemory`]), else [`os_error`].
pub(crate) fn file_error(py: Python<'_>, e: &io::Error) -> PyObject {
    if e.kind() == io::ErrorKind::OutOfMemory && e.raw_os_error().is_none() {
        return pyo3::exceptions::PyMemoryError::new_err(
            "the file is larger than the memory available to read it into",
        )
        .into_value(py)
        .into_any();
    }
    os_error(py, e)
}

/// `data` copied into a new bytes object, or the `MemoryError` Python
/// raised when it could not allocate one (pyo3's `PyBytes::new` panics
/// then, and a panic would stop the call: a file that fits in memory once
/// but not twice must be a `MemoryError` in its place, never an abort).
pub(crate) fn new_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let len = pyo3::ffi::Py_ssize_t::try_from(data.len())
        .map_err(|_| pyo3::exceptions::PyMemoryError::new_err("too large for a bytes object"))?;
    // SAFETY: `data` is valid for `len` bytes, which
    // PyBytes_FromStringAndSize copies into a new bytes object; it returns
    // a new reference, or null with a Python error set. The GIL is held
    // (`py`).
    let raw = unsafe { pyo3::ffi::PyBytes_FromStringAndSize(data.as_ptr().cast(), len) };
    if raw.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `raw` is a new, non-null reference to a bytes object, which
    // the Bound now owns.
    Ok(unsafe { Bound::from_owned_ptr(py, raw).downcast_into_unchecked::<PyBytes>() })
}

/// A file's content for a `read_files` list: its bytes, or the error in
/// their place (a `MemoryError` when the bytes object cannot be made).
pub(crate) fn file_content(py: Python<'_>, r: &io::Result<Vec<u8>>) -> PyObject {
    match r {
        Ok(b) => match new_bytes(py, b) {
            Ok(bytes) => bytes.into_any().unbind(),
            Err(_) => file_error(py, &io::ErrorKind::OutOfMemory.into()),
        },
        Err(e) => file_error(py, e),
    }
}

pub(crate) fn io_err(e: io::Error) -> PyErr {
    let code = errno_of(&e);
    PyOSError::new_err((code, message(&e, code)))
}

/// What a part of an engine that could not be made holds (see
/// [`setup_err`]).
#[derive(Clone, Copy)]
pub(crate) enum Part {
    /// Made by the first `blockio.open` (or before it, by the engine's
    /// making) and kept while the engine is open.
    Kept,
    /// Made with the engine only to find its backend, and closed again at
    /// once (the io_uring ring the synchronous calls make again later).
    Probe,
    /// Made at the first synchronous call and kept: no open needs it.
    Later,
}

/// What a process's first `blockio.open` needs free, all told (the
/// figures `python/README.md` gives under "Descriptors").
const FIRST_OPEN: &str = "a process's first blockio.open needs 4 free descriptors \
     (the engine's 3 and the file's), or 5 on io_uring with an opener (which may open \
     O_DIRECT: the ring of O_DIRECT files is made before the path is opened)";

/// The error of making part of an engine (`what`, which takes `needs`
/// descriptors and holds them as `part` says): out of descriptors
/// (`EMFILE`, `ENFILE`), an `OSError` with that errno that says what could
/// not be made, how many descriptors it takes, and, for a part a first
/// open makes, how many the first open needs all told; any other error as
/// [`io_err`] gives it.
pub(crate) fn setup_err(e: io::Error, what: &str, needs: usize, part: Part) -> PyErr {
    let code = errno_of(&e);
    if code != libc::EMFILE && code != libc::ENFILE {
        return io_err(e);
    }
    let plural = if needs == 1 { "" } else { "s" };
    let (held, total) = match part {
        Part::Kept => ("kept while the engine is open", FIRST_OPEN),
        Part::Probe => (
            "closed again once the engine's backend is found",
            FIRST_OPEN,
        ),
        Part::Later => ("kept while the engine is open", ""),
    };
    let sep = if total.is_empty() { "" } else { "; " };
    // The kernel's words alone: `what` names the part (the error may
    // name it too, as the engine's own setup errors do).
    let kernel = io::Error::from_raw_os_error(code);
    PyOSError::new_err((
        code,
        format!(
            "{}: blockio's engine could not make {what} ({needs} descriptor{plural}, {held}){sep}{total}",
            message(&kernel, code)
        ),
    ))
}
