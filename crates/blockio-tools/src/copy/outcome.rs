//! What a copy tells its caller: progress counters while it runs, each
//! failure as it happens, and a report at the end.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters that a progress display may read while the copy runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Regular files copied.
    pub files: AtomicU64,
    /// Bytes of file data copied.
    pub bytes: AtomicU64,
    /// Directories made or merged into.
    pub dirs: AtomicU64,
    /// Errors reported.
    pub errors: AtomicU64,
}

/// Something that went wrong with one path; the copy went on.
#[derive(Debug)]
pub struct CopyError {
    /// What was being done, in cp's words ("cannot open '…' for reading").
    pub what: String,
    /// Why, when the system said so.
    pub error: Option<io::Error>,
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            // The system's message without our wrappers' path prefixes.
            Some(e) => write!(f, "{}: {}", self.what, os_message(e)),
            None => f.write_str(&self.what),
        }
    }
}

use crate::reason::reason as os_message;

/// What a finished copy did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CopyReport {
    /// Regular files copied.
    pub files: u64,
    /// Directories made or merged into.
    pub dirs: u64,
    /// Symbolic links made.
    pub symlinks: u64,
    /// FIFOs, sockets and device nodes made.
    pub specials: u64,
    /// Existing destinations left alone (`-n`).
    pub skipped: u64,
    /// Bytes of file data copied.
    pub bytes: u64,
    /// Errors reported (the exit status is 1 when this is not 0).
    pub errors: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The backend that did the I/O: `io_uring`, or `thread pool` where
    /// io_uring is unavailable.
    pub backend: String,
    /// Why the thread pool was used, when it was.
    pub fallback_reason: Option<String>,
    /// The first failure of this copy to write a `-v` line to standard
    /// output, as an errno: the copy went on, and a command reports it
    /// (and fails) at the end, as GNU `cp` does.
    #[serde(skip)]
    pub output_error: Option<i32>,
}

/// A problem with the command line as a whole (nothing was copied).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub(super) fn usage(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, UsageError(msg))
}

/// Reports one failure.
pub(crate) struct Errors<'a> {
    pub(super) progress: &'a Progress,
    pub(super) sink: &'a (dyn Fn(&CopyError) + Sync),
}

impl Errors<'_> {
    pub(crate) fn report(&self, what: String, error: Option<io::Error>) {
        self.progress.errors.fetch_add(1, Ordering::Relaxed);
        (self.sink)(&CopyError { what, error });
    }

    /// A message that is not an error (the exit status stays 0).
    pub(crate) fn warn(&self, what: String, error: Option<io::Error>) {
        (self.sink)(&CopyError { what, error });
    }
}
