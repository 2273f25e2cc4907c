//! The error of a destination in the way that could not be removed or
//! kept aside.

use std::io;

/// A destination in the way that could not be removed (`-f`,
/// `--remove-destination`) or kept aside (`-b`): carried inside an
/// `io::Error` so that the message names that step, as GNU's do
/// ("cannot remove 'g'"), not the creation that never came.
#[derive(Debug)]
pub(crate) struct InTheWay {
    /// `"cannot remove"` or `"cannot backup"`.
    pub what: &'static str,
    /// The errno of the failed step.
    pub errno: i32,
}

impl std::fmt::Display for InTheWay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            self.what,
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for InTheWay {}

/// `err`, the failure of `what` on a destination in the way (see
/// [`InTheWay`]).
pub(crate) fn in_the_way(what: &'static str, err: impl Into<io::Error>) -> io::Error {
    let err: io::Error = err.into();
    match blockio::errno(&err) {
        Some(errno) => io::Error::other(InTheWay { what, errno }),
        None => err,
    }
}
