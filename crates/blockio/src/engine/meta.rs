//! Metadata operations in batches: open, statx, close, mkdir, symlink.
//!
//! A tool that walks a file tree (a recursive copy, a checksummer) spends
//! much of its time in these calls, and on a cold cache each may wait for the
//! disk (an inode or a directory block). Through the ring many of them are in
//! flight at once and a batch costs one system call. On a kernel without the
//! opcodes (see [`ProbeReport::metadata_ops`](crate::ProbeReport)) and on the
//! thread-pool backend the same calls are made with plain system calls.
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! use blockio::{Engine, OpenRequest, PathAt};
//! let dir = tempfile::tempdir()?;
//! let engine = Engine::new()?;
//! let base = std::fs::File::open(dir.path())?;
//! let made = engine.mkdir_batch(&[(PathAt::in_dir(&base, c"sub"), 0o755)])?;
//! made.into_iter().collect::<Result<Vec<()>, _>>()?;
//! let opens = [
//!     OpenRequest::new(PathAt::in_dir(&base, c"sub/a")).flags(libc::O_WRONLY | libc::O_CREAT).mode(0o644),
//!     OpenRequest::new(PathAt::in_dir(&base, c"missing/b")),
//! ];
//! let mut fds = engine.open_batch(&opens)?;
//! assert_eq!(fds[1].as_ref().unwrap_err().kind(), std::io::ErrorKind::NotFound);
//! let a = fds.swap_remove(0)?;
//! let st = engine.stat_batch(&[PathAt::file(&a)], 0)?.remove(0)?;
//! assert_eq!(st.stx_mode & 0o777, 0o644);
//! engine.close_batch([a])?.remove(0)?;
//! # Ok(()) }
//! ```

use std::ffi::{CStr, OsStr};
use std::io;
use std::marker::PhantomData;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::PathError;
use crate::op::action::{Action, CloseArgs, MkdirArgs, OpenArgs, StatArgs, SymlinkArgs};
use crate::op::{Op, Target};
use crate::Engine;

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
    /// [`Engine::stat_batch`], which then adds `AT_EMPTY_PATH`).
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

/// A file to open with [`Engine::open_batch`]: read-only unless
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

impl Engine {
    /// Submits one operation per `(path, action)` in one batch; errors
    /// name the path and `verb`.
    fn submit_paths(
        &self,
        verb: &'static str,
        reqs: &[(PathAt<'_>, Action)],
    ) -> io::Result<Vec<io::Result<usize>>> {
        let mut ops: Vec<Op<'_>> = reqs
            .iter()
            // SAFETY: each action points at its request's path (a `&CStr`
            // borrowed by `reqs`) and at buffers the caller keeps alive and
            // untouched until this call returns; `submit` returns only once
            // every operation has completed.
            .map(|(p, action)| unsafe { Op::from_action(p.dir, *action, None) })
            .collect();
        let results = self.submit(&mut ops)?;
        Ok(results
            .into_iter()
            .zip(reqs)
            .map(|(r, (p, _))| r.map_err(|e| PathError::wrap(verb, p.path(), e)))
            .collect())
    }

    /// Opens every file in one batch; one result per request, in order.
    /// Errors name the path.
    pub fn open_batch(&self, reqs: &[OpenRequest<'_>]) -> io::Result<Vec<io::Result<OwnedFd>>> {
        let reqs: Vec<(PathAt<'_>, Action)> = reqs.iter().map(|r| (r.at, r.action())).collect();
        let results = self.submit_paths("open", &reqs)?;
        Ok(results.into_iter().map(opened).collect())
    }

    /// `statx` of every path in one batch, with the `AT_*` `flags` (for
    /// example `AT_SYMLINK_NOFOLLOW`) and the basic fields. A
    /// [`PathAt::file`] entry stats the open file itself.
    pub fn stat_batch(
        &self,
        paths: &[PathAt<'_>],
        flags: i32,
    ) -> io::Result<Vec<io::Result<libc::statx>>> {
        // SAFETY: `statx` is plain old data (integers only); all zeroes is a
        // valid value.
        let mut bufs: Vec<libc::statx> = vec![unsafe { std::mem::zeroed() }; paths.len()];
        let reqs: Vec<(PathAt<'_>, Action)> = paths
            .iter()
            .zip(bufs.iter_mut())
            .map(|(p, buf)| (*p, p.stat_action(flags, buf)))
            .collect();
        let results = self.submit_paths("stat", &reqs)?;
        drop(reqs);
        Ok(results
            .into_iter()
            .zip(bufs)
            .map(|(r, buf)| r.map(|_| buf))
            .collect())
    }

    /// Closes every descriptor in one batch. The descriptors are gone
    /// whatever the results say (as with `close(2)` on Linux); an error
    /// reports a failed write-back, for example on NFS.
    pub fn close_batch(
        &self,
        fds: impl IntoIterator<Item = OwnedFd>,
    ) -> io::Result<Vec<io::Result<()>>> {
        let mut ops: Vec<Op<'_>> = fds
            .into_iter()
            // SAFETY: a close holds no pointer. The operation now owns the
            // descriptor: the kernel closes it when the batch runs.
            .map(|fd| unsafe { Op::from_action(fd.into_raw_fd(), CLOSE, None) })
            .collect();
        let results = self.submit(&mut ops)?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Makes every directory (`mkdirat` with its mode, before the umask) in
    /// one batch.
    pub fn mkdir_batch(&self, dirs: &[(PathAt<'_>, u32)]) -> io::Result<Vec<io::Result<()>>> {
        let reqs: Vec<(PathAt<'_>, Action)> = dirs
            .iter()
            .map(|(p, mode)| (*p, p.mkdir_action(*mode)))
            .collect();
        let results = self.submit_paths("mkdir", &reqs)?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Makes every symbolic link `(link, target)` in one batch: `link`
    /// will point at `target`.
    pub fn symlink_batch(&self, links: &[(PathAt<'_>, &CStr)]) -> io::Result<Vec<io::Result<()>>> {
        let reqs: Vec<(PathAt<'_>, Action)> = links
            .iter()
            .map(|(p, target)| (*p, p.symlink_action(target)))
            .collect();
        let results = self.submit_paths("symlink", &reqs)?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }
}
