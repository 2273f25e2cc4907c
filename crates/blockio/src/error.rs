//! Errors of single operations.
//!
//! Every failed operation comes back as an [`std::io::Error`] whose
//! [`kind`](std::io::Error::kind) matches its errno and whose inner error is an
//! [`OpError`]: it names the operation, the file descriptor and the offset, and
//! keeps the errno. [`errno`] reads the errno back from either an `OpError` or
//! a plain OS error.

use std::fmt;
use std::io;

use crate::kind::OpKind;

/// What failed: the operation, where, and the kernel's errno or blockio's
/// reason for refusing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// The kind of operation that failed.
    pub op: OpKind,
    /// The file descriptor it was issued on (the directory, for operations
    /// on a path).
    pub fd: i32,
    /// The file offset it was issued at (0 for fsyncs and metadata).
    pub offset: u64,
    /// The number of bytes requested (0 for fsyncs and metadata).
    pub len: usize,
    /// The errno, when the kernel reported the failure; `None` when blockio
    /// refused the operation before submission (see [`OpError::refusal`]).
    pub errno: Option<i32>,
    /// The rule the operation broke, when blockio refused it before
    /// submission.
    pub refusal: Option<Refusal>,
}

/// A rule an operation broke, found before submission: for example
/// "O_DIRECT: the offset must be a multiple of" 512.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The rule, worded to be followed by [`Refusal::bound`].
    pub rule: &'static str,
    /// The number the rule names (an alignment, a largest offset).
    pub bound: u64,
}

/// Where an operation acts: what its errors name. Kept apart from the
/// operation so that a result can be described after the operation itself
/// has been handed to a backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site {
    pub kind: OpKind,
    pub fd: i32,
    pub offset: u64,
    pub len: usize,
}

impl Site {
    fn error(self, errno: Option<i32>, refusal: Option<Refusal>) -> OpError {
        OpError {
            op: self.kind,
            fd: self.fd,
            offset: self.offset,
            len: self.len,
            errno,
            refusal,
        }
    }

    /// Turns a raw kernel result (a count, or `-errno`) into the
    /// operation's result.
    pub(crate) fn result(self, raw: i32) -> io::Result<usize> {
        if raw >= 0 {
            return Ok(raw as usize);
        }
        let errno = -raw;
        let kind = io::Error::from_raw_os_error(errno).kind();
        Err(io::Error::new(kind, self.error(Some(errno), None)))
    }

    /// The error of an operation refused before submission.
    pub(crate) fn refuse(self, rule: &'static str, bound: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            self.error(None, Some(Refusal { rule, bound })),
        )
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every kind is listed: a new one states how its errors read.
        match self.op {
            OpKind::Read
            | OpKind::Write
            | OpKind::ReadVectored
            | OpKind::WriteVectored
            | OpKind::Fallocate => write!(
                f,
                "{} of {} bytes at offset {} on fd {}",
                self.op, self.len, self.offset, self.fd
            )?,
            OpKind::Fsync | OpKind::Fdatasync | OpKind::Close | OpKind::Ftruncate => {
                write!(f, "{} of fd {}", self.op, self.fd)?
            }
            // The metadata batches wrap this in a `PathError` naming the path.
            OpKind::Open | OpKind::Stat | OpKind::Mkdir | OpKind::Symlink => {
                write!(f, "{}", self.op)?
            }
            OpKind::Accept | OpKind::Connect => write!(f, "{} on fd {}", self.op, self.fd)?,
            OpKind::Recv | OpKind::Send | OpKind::SendVectored | OpKind::RecvSelect => {
                write!(f, "{} of {} bytes on fd {}", self.op, self.len, self.fd)?
            }
        }
        if let Some(errno) = self.errno {
            write!(f, " failed: {}", io::Error::from_raw_os_error(errno))?;
        }
        if let Some(r) = self.refusal {
            write!(f, " refused: {} {}", r.rule, r.bound)?;
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

/// An error of the kernel's (`source`) met while blockio made something
/// of its own, named in `context` ("cannot make blockio's readiness set
/// (epoll)"): its message is both, its kind the source's, and
/// [`errno`] reads the source's.
#[derive(Debug)]
pub(crate) struct Named {
    context: String,
    source: io::Error,
}

impl Named {
    /// `source`, named by `context`, as an [`io::Error`] of its kind.
    pub(crate) fn wrap(context: String, source: io::Error) -> io::Error {
        io::Error::new(source.kind(), Named { context, source })
    }

    /// Whether `err` is one of these (kept as it is where a plain OS
    /// error would otherwise be made of its errno).
    pub(crate) fn is(err: &io::Error) -> bool {
        err.get_ref().is_some_and(|e| e.is::<Named>())
    }
}

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.context, self.source)
    }
}

impl std::error::Error for Named {
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
    if let Some(named) = inner.downcast_ref::<Named>() {
        return errno(&named.source);
    }
    inner
        .downcast_ref::<PathError>()
        .and_then(|p| errno(&p.source))
}
