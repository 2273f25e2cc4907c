//! What a metadata operation acts on: a path relative to a directory
//! ([`PathAt`]), a file to open ([`OpenRequest`]), and the actions built
//! from them. Shared by the batch engine's batches
//! ([`Engine::open_batch`](crate::Engine::open_batch) and the others) and
//! the [`blocking`](crate::blocking) calls.

use std::ffi::{CStr, OsStr};
use std::io;
use std::marker::PhantomData;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::action::{Action, CloseArgs, MkdirArgs, OpenArgs, StatArgs, SymlinkArgs};
use super::Target;

/// A path, relative to the working directory or to an open directory
/// (the `dirfd` + `pathname` pair of the `*at` system calls).
#[derive(Debug, Clone, Copy)]
pub struct PathAt<'a> {
    dir: RawFd,
    path: &'a CStr,
    _dir: PhantomData<&'a ()>,
}

impl<'a> PathAt<'a> {
    /// `path` relative to the working directory (or absolute).
    pub fn cwd(path: &'a CStr) -> PathAt<'a> {
        PathAt {
            dir: libc::AT_FDCWD,
            path,
            _dir: PhantomData,
        }
    }

    /// `path` relative to the open directory `dir`, which stays borrowed.
    pub fn in_dir<T: Target + ?Sized>(dir: &'a T, path: &'a CStr) -> PathAt<'a> {
        PathAt {
            dir: dir.raw_fd(),
            path,
            _dir: PhantomData,
        }
    }

    /// The open file itself rather than a path in it (an empty path; for
    /// [`Engine::stat_batch`](crate::Engine::stat_batch), which then adds `AT_EMPTY_PATH`).
    pub fn file<T: Target + ?Sized>(file: &'a T) -> PathAt<'a> {
        PathAt::in_dir(file, c"")
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        Path::new(OsStr::from_bytes(self.path.to_bytes()))
    }
}

/// Each metadata kind's arguments, built in one place for the batches and
/// for the [`blocking`](crate::blocking) calls. Every pointer an action
/// holds is borrowed from the `PathAt` (or the caller's buffer), so the
/// action is valid while they are.
impl PathAt<'_> {
    /// A `statx` of this path into `buf`, with the `AT_*` `flags` and the
    /// basic fields; an empty path stats the open file itself
    /// (`AT_EMPTY_PATH`).
    pub(crate) fn stat_action(&self, flags: i32, buf: *mut libc::statx) -> Action {
        let empty = if self.path.is_empty() {
            libc::AT_EMPTY_PATH
        } else {
            0
        };
        Action::Stat(StatArgs {
            path: self.path.as_ptr(),
            flags: flags | empty,
            mask: libc::STATX_BASIC_STATS,
            buf,
        })
    }

    /// A `mkdirat` of this path with `mode`.
    pub(crate) fn mkdir_action(&self, mode: u32) -> Action {
        Action::Mkdir(MkdirArgs {
            path: self.path.as_ptr(),
            mode,
        })
    }

    /// A `symlinkat` making this path a link to `target`.
    pub(crate) fn symlink_action(&self, target: &CStr) -> Action {
        Action::Symlink(SymlinkArgs {
            target: target.as_ptr(),
            link: self.path.as_ptr(),
        })
    }

    /// The descriptor the path is relative to.
    pub(crate) fn dir(&self) -> RawFd {
        self.dir
    }
}

/// A close of the descriptor an operation is issued on (which the
/// operation owns).
pub(crate) const CLOSE: Action = Action::Close(CloseArgs);

/// A successful open's result as the descriptor it is.
pub(crate) fn opened(r: io::Result<usize>) -> io::Result<OwnedFd> {
    // SAFETY: a successful open's result is a new descriptor that nothing
    // else owns; it is wrapped exactly once, here.
    r.map(|fd| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A file to open with [`Engine::open_batch`](crate::Engine::open_batch): read-only unless
/// [`flags`](OpenRequest::flags) say otherwise. `O_CLOEXEC` is always added.
#[derive(Debug, Clone, Copy)]
pub struct OpenRequest<'a> {
    at: PathAt<'a>,
    flags: i32,
    mode: u32,
}

impl<'a> OpenRequest<'a> {
    /// Open `at` read-only.
    pub fn new(at: PathAt<'a>) -> OpenRequest<'a> {
        OpenRequest {
            at,
            flags: libc::O_RDONLY,
            mode: 0,
        }
    }

    /// The `open(2)` flags (`O_WRONLY | O_CREAT | O_TRUNC`, `O_DIRECTORY`,
    /// `O_NOFOLLOW`, ...).
    pub fn flags(mut self, flags: i32) -> OpenRequest<'a> {
        self.flags = flags;
        self
    }

    /// The mode of a file that `O_CREAT` creates (before the umask).
    pub fn mode(mut self, mode: u32) -> OpenRequest<'a> {
        self.mode = mode;
        self
    }

    /// Where the file is.
    pub(crate) fn at(&self) -> PathAt<'a> {
        self.at
    }

    /// The open, `O_CLOEXEC` added.
    pub(crate) fn action(&self) -> Action {
        Action::Open(OpenArgs {
            path: self.at.path.as_ptr(),
            flags: self.flags | libc::O_CLOEXEC,
            mode: self.mode,
        })
    }
}
