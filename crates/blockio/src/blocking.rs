//! One operation at a time, with its blocking system call on the calling
//! thread.
//!
//! Each function here performs the same operation kind as the engine's
//! batches ([`Engine::open_batch`](crate::Engine::open_batch),
//! [`stat_batch`](crate::Engine::stat_batch),
//! [`close_batch`](crate::Engine::close_batch),
//! [`mkdir_batch`](crate::Engine::mkdir_batch),
//! [`symlink_batch`](crate::Engine::symlink_batch),
//! [`Op::ftruncate`]): the same flags (`O_CLOEXEC` on every open, the
//! basic `statx` fields), the same result, the same error naming the verb
//! and the path. [`Op::run_blocking`] does the same for any [`Op`].
//!
//! Use them for one call on a thread that may wait anyway: a worker of
//! your own that takes calls one by one, so that a call stuck in the
//! kernel (an open waiting for a FIFO's writer, a stat on a hung mount)
//! holds up that worker alone. Through a ring, a batch of one costs a
//! submission and a completion for a single system call, and every other
//! call of the batch waits for the slowest. For many calls at once, a
//! batch through an [`Engine`](crate::Engine) is the way.
//!
//! An open here waits as `open(2)` does: a FIFO opened for reading waits
//! for a writer (unless `O_NONBLOCK`).
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! use blockio::{blocking, OpenRequest, PathAt};
//! let dir = tempfile::tempdir()?;
//! let base = std::fs::File::open(dir.path())?;
//! blocking::mkdir(PathAt::in_dir(&base, c"sub"), 0o755)?;
//! let new = OpenRequest::new(PathAt::in_dir(&base, c"sub/a"))
//!     .flags(libc::O_WRONLY | libc::O_CREAT)
//!     .mode(0o600);
//! let fd = blocking::open(&new)?;
//! blocking::ftruncate(&fd, 4096)?;
//! let st = blocking::stat(PathAt::file(&fd), 0)?;
//! assert_eq!((st.stx_size, st.stx_mode & 0o777), (4096, 0o600));
//! blocking::close(fd)?;
//! blocking::symlink(PathAt::in_dir(&base, c"link"), c"sub/a")?;
//! let err = blocking::open(&OpenRequest::new(PathAt::in_dir(&base, c"missing"))).unwrap_err();
//! assert_eq!(blockio::errno(&err), Some(libc::ENOENT));
//! # Ok(()) }
//! ```

use std::ffi::CStr;
use std::io;
use std::os::fd::{IntoRawFd, OwnedFd};

use crate::error::PathError;
use crate::op::action::Action;
use crate::op::path::{opened, CLOSE};
use crate::op::{Op, Target};
use crate::{OpenRequest, PathAt};

/// Performs `action` on `at`'s directory descriptor; an error names the
/// action's kind and the path, as a batch's does.
///
/// `action` must point only at `at`'s path and at memory the caller keeps
/// alive and untouched for this call.
fn on_path(at: PathAt<'_>, action: Action) -> io::Result<usize> {
    // SAFETY: the action's pointers are `at`'s path (borrowed for this
    // call) and buffers of the caller's frame (the contract above); the
    // operation is performed and dropped before this returns.
    let op = unsafe { Op::from_action(at.dir(), action, None) };
    op.run_blocking()
        .map_err(|e| PathError::wrap(action.kind().name(), at.path(), e))
}

/// Opens a file (`openat`, `O_CLOEXEC` added), as
/// [`Engine::open_batch`](crate::Engine::open_batch) does for one request.
pub fn open(req: &OpenRequest<'_>) -> io::Result<OwnedFd> {
    opened(on_path(req.at(), req.action()))
}

/// `statx` of `at` with the `AT_*` `flags` and the basic fields; a
/// [`PathAt::file`] stats the open file itself. As
/// [`Engine::stat_batch`](crate::Engine::stat_batch) does for one path.
pub fn stat(at: PathAt<'_>, flags: i32) -> io::Result<libc::statx> {
    // SAFETY: `statx` is plain old data (integers only); all zeroes is a
    // valid value.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    on_path(at, at.stat_action(flags, &mut buf))?;
    Ok(buf)
}

/// Closes `fd`. The descriptor is gone whatever the result says (as with
/// `close(2)` on Linux); an error reports a failed write-back.
pub fn close(fd: OwnedFd) -> io::Result<()> {
    // SAFETY: a close holds no pointer. The operation owns the descriptor
    // from here and closes it exactly once, below.
    let op = unsafe { Op::from_action(fd.into_raw_fd(), CLOSE, None) };
    op.run_blocking().map(|_| ())
}

/// Makes the directory `at` with `mode` (before the umask): `mkdirat`.
pub fn mkdir(at: PathAt<'_>, mode: u32) -> io::Result<()> {
    on_path(at, at.mkdir_action(mode)).map(|_| ())
}

/// Makes `link` a symbolic link to `target`: `symlinkat`.
pub fn symlink(link: PathAt<'_>, target: &CStr) -> io::Result<()> {
    on_path(link, link.symlink_action(target)).map(|_| ())
}

/// Sets `file`'s length to `len` ([`Op::ftruncate`]).
pub fn ftruncate<T: Target + ?Sized>(file: &T, len: u64) -> io::Result<()> {
    Op::ftruncate(file, len).run_blocking().map(|_| ())
}
