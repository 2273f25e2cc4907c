//! Errors of single operations.
//!
//! Every failed operation comes back as an [`std::io::Error`] whose
//! [`kind`](std::io::Error::kind) matches its errno and whose inner error is an
//! [`OpError`]: it names the operation, the file descriptor and the offset, and
//! keeps the errno. [`errno`] reads the errno back from either an `OpError` or
//! a plain OS error.

use std::fmt;
use std::io;

use crate::op::OpKind;

/// What failed: the operation, where, and the kernel's errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// The kind of operation that failed.
    pub op: OpKind,
    /// The file descriptor it was issued on.
    pub fd: i32,
    /// The file offset it was issued at (0 for syncs).
    pub offset: u64,
    /// The number of bytes requested (0 for syncs).
    pub len: usize,
    /// The errno, when the kernel reported the failure; `None` when blockio
    /// refused the operation before submission (see [`OpError::detail`]).
    pub errno: Option<i32>,
    /// Why blockio refused the operation, when it did.
    pub detail: Option<&'static str>,
    /// A number that goes with `detail` (for example the required alignment).
    pub required: u64,
}

impl OpError {
    /// Turns a negative kernel result (`-errno`) into an [`io::Error`].
    pub(crate) fn from_errno(
        op: OpKind,
        fd: i32,
        offset: u64,
        len: usize,
        errno: i32,
    ) -> io::Error {
        let kind = io::Error::from_raw_os_error(errno).kind();
        io::Error::new(
            kind,
            OpError {
                op,
                fd,
                offset,
                len,
                errno: Some(errno),
                detail: None,
                required: 0,
            },
        )
    }

    /// An operation blockio refused before submission.
    pub(crate) fn refused(
        op: OpKind,
        fd: i32,
        offset: u64,
        len: usize,
        detail: &'static str,
        required: u64,
    ) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            OpError {
                op,
                fd,
                offset,
                len,
                errno: None,
                detail: Some(detail),
                required,
            },
        )
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            OpKind::Fsync | OpKind::Fdatasync | OpKind::Close => {
                write!(f, "{} of fd {}", self.op, self.fd)?
            }
            k if k.is_metadata() => write!(f, "{}", self.op)?,
            _ => write!(
                f,
                "{} of {} bytes at offset {} on fd {}",
                self.op, self.len, self.offset, self.fd
            )?,
        }
        if let Some(errno) = self.errno {
            write!(f, " failed: {}", io::Error::from_raw_os_error(errno))?;
        }
        if let Some(detail) = self.detail {
            write!(f, " refused: {detail} {}", self.required)?;
        }
        Ok(())
    }
}

impl std::error::Error for OpError {}

/// An error about a path: what blockio was doing with it, and why it failed.
#[derive(Debug)]
pub struct PathError {
    /// What was being done ("open for direct I/O", ...).
    pub action: &'static str,
    /// The path.
    pub path: std::path::PathBuf,
    /// The underlying error.
    pub source: io::Error,
}

impl PathError {
    pub(crate) fn wrap(
        action: &'static str,
        path: &std::path::Path,
        source: io::Error,
    ) -> io::Error {
        io::Error::new(
            source.kind(),
            PathError {
                action,
                path: path.to_path_buf(),
                source,
            },
        )
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.action,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The errno carried by an error from this crate (or by a plain OS error).
///
/// ```
/// let e = std::io::Error::from_raw_os_error(libc::EBADF);
/// assert_eq!(blockio::errno(&e), Some(libc::EBADF));
/// ```
pub fn errno(err: &io::Error) -> Option<i32> {
    if let Some(code) = err.raw_os_error() {
        return Some(code);
    }
    let inner = err.get_ref()?;
    if let Some(op) = inner.downcast_ref::<OpError>() {
        return op.errno;
    }
    inner
        .downcast_ref::<PathError>()
        .and_then(|p| errno(&p.source))
}
