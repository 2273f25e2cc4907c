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

use std::ffi::CStr;
use std::io;
use std::os::fd::{IntoRawFd, OwnedFd};

use crate::error::PathError;
use crate::op::action::Action;
use crate::op::path::{opened, OpenRequest, PathAt, CLOSE};
use crate::op::Op;
use crate::Engine;

impl Engine {
    /// Submits one operation per `(path, action)` in one batch; errors
    /// name the action's kind and the path.
    fn submit_paths(&self, reqs: &[(PathAt<'_>, Action)]) -> io::Result<Vec<io::Result<usize>>> {
        let mut ops: Vec<Op<'_>> = reqs
            .iter()
            // SAFETY: each action points at its request's path (a `&CStr`
            // borrowed by `reqs`) and at buffers the caller keeps alive and
            // untouched until this call returns; `submit` returns only once
            // every operation has completed.
            .map(|(p, action)| unsafe { Op::from_action(p.dir(), *action, None) })
            .collect();
        let results = self.submit(&mut ops)?;
        Ok(results
            .into_iter()
            .zip(reqs)
            .map(|(r, (p, action))| {
                r.map_err(|e| PathError::wrap(action.kind().name(), p.path(), e))
            })
            .collect())
    }

    /// Opens every file in one batch; one result per request, in order.
    /// Errors name the path.
    pub fn open_batch(&self, reqs: &[OpenRequest<'_>]) -> io::Result<Vec<io::Result<OwnedFd>>> {
        let reqs: Vec<(PathAt<'_>, Action)> = reqs.iter().map(|r| (r.at(), r.action())).collect();
        let results = self.submit_paths(&reqs)?;
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
        let results = self.submit_paths(&reqs)?;
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
        let results = self.submit_paths(&reqs)?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    /// Makes every symbolic link `(link, target)` in one batch: `link`
    /// will point at `target`.
    pub fn symlink_batch(&self, links: &[(PathAt<'_>, &CStr)]) -> io::Result<Vec<io::Result<()>>> {
        let reqs: Vec<(PathAt<'_>, Action)> = links
            .iter()
            .map(|(p, target)| (*p, p.symlink_action(target)))
            .collect();
        let results = self.submit_paths(&reqs)?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }
}
