//! The file-system calls of [`Core`]: `submit_open`, `submit_stat`,
//! `submit_size`, `submit_ftruncate`, `submit_close`, `submit_mkdir`,
//! `submit_symlink` and `submit_read_files`, each one job for the core's
//! file-system threads ([`crate::fsjobs::Pool`], the `fs` part of the core,
//! which owns those threads), started as a batch of one ([`Core::start_job`],
//! in [`crate::engine`]). What they share with the rest of the core is the
//! batch table ([`crate::inflight::InFlight`]) their results go through and
//! the descriptors file objects own ([`crate::owned`]), which `submit_size`
//! and `submit_ftruncate` borrow and `submit_close` closes once no batch
//! borrows them. The closes of file objects' descriptors are jobs too, started by
//! [`Core::start_closes`].

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::args::c_path;
use crate::engine::Core;
use crate::fsjobs::FsCall;

impl Core {
    /// Starts `open(path, flags, mode)` on the core's file-system threads;
    /// the result is the new descriptor (close-on-exec), which the caller
    /// then owns. A directory fails with `EISDIR` unless `O_DIRECTORY` is
    /// in `flags`.
    pub(crate) fn submit_open(
        &self,
        waiter: PyObject,
        path: Vec<u8>,
        flags: i32,
        mode: u32,
    ) -> PyResult<u64> {
        self.check()?;
        let path = c_path(path)?;
        self.start_job(waiter, Ok(FsCall::Open { path, flags, mode }))
    }

    /// Starts a `statx` of `path` (of a final symbolic link itself unless
    /// `follow`) on the core's file-system threads; the result is the tuple
    /// of [`stat_tuple`](crate::errors::stat_tuple).
    pub(crate) fn submit_stat(
        &self,
        waiter: PyObject,
        path: Vec<u8>,
        follow: bool,
    ) -> PyResult<u64> {
        self.check()?;
        let path = c_path(path)?;
        self.start_job(waiter, Ok(FsCall::Stat { path, follow }))
    }

    /// Starts an `fstat` of `fd` (through a duplicate, unless a file
    /// object owns it); the result is the file's size.
    pub(crate) fn submit_size(&self, waiter: PyObject, fd: RawFd) -> PyResult<u64> {
        self.check()?;
        let (held, lent) = self.owned.hold_for_job(fd);
        self.start_job_on(waiter, held.map(FsCall::Size), lent.then_some(fd))
    }

    /// Starts an `ftruncate` of `fd` (through a duplicate, unless a file
    /// object owns it) to `length`.
    pub(crate) fn submit_ftruncate(
        &self,
        waiter: PyObject,
        fd: RawFd,
        length: i64,
    ) -> PyResult<u64> {
        self.check()?;
        let length = u64::try_from(length).map_err(|_| {
            PyValueError::new_err(format!("length must not be negative, got {length}"))
        })?;
        let (held, lent) = self.owned.hold_for_job(fd);
        let job = held.map(|d| FsCall::Ftruncate(d, length));
        self.start_job_on(waiter, job, lent.then_some(fd))
    }

    /// Starts closing `fd`, whose ownership the caller hands over: the
    /// number must not be used or closed by anyone else afterwards. The
    /// close runs even if the batch is cancelled.
    pub(crate) fn submit_close(&self, waiter: PyObject, fd: RawFd) -> PyResult<u64> {
        self.check()?;
        if fd < 0 {
            return self.start_job(waiter, Err(libc::EBADF));
        }
        // SAFETY: the caller hands over its only ownership of `fd` (the
        // Python layer passes the descriptor of a file object it is
        // closing and never uses the number again).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // A file object's own descriptor is closed once the batches that
        // borrow it have left the core (see `crate::owned`).
        match self.owned.close(waiter, owned, fd) {
            Some((waiter, owned)) => self.start_job(waiter, Ok(FsCall::Close(owned))),
            None => Ok(u64::MAX),
        }
    }

    /// Starts a `mkdirat` of `path` (relative to the working directory)
    /// with `mode` (before the umask) on the core's file-system threads;
    /// the result is 0.
    pub(crate) fn submit_mkdir(&self, waiter: PyObject, path: Vec<u8>, mode: u32) -> PyResult<u64> {
        self.check()?;
        let path = c_path(path)?;
        self.start_job(waiter, Ok(FsCall::Mkdir { path, mode }))
    }

    /// Starts making the symbolic link `link` pointing at `target`
    /// (`symlinkat`) on the core's file-system threads; the result is 0.
    pub(crate) fn submit_symlink(
        &self,
        waiter: PyObject,
        target: Vec<u8>,
        link: Vec<u8>,
    ) -> PyResult<u64> {
        self.check()?;
        let (target, link) = (c_path(target)?, c_path(link)?);
        self.start_job(waiter, Ok(FsCall::Symlink { target, link }))
    }

    /// Starts reading every file of `paths` whole (see
    /// [`crate::fsjobs::read_files`]); the result is a list of bytes or
    /// OSError, one per path, in order.
    pub(crate) fn submit_read_files(&self, waiter: PyObject, paths: Vec<Vec<u8>>) -> PyResult<u64> {
        let engine = self.sync_engine()?;
        let paths = paths.into_iter().map(c_path).collect::<PyResult<_>>()?;
        self.start_job(waiter, Ok(FsCall::ReadFiles { engine, paths }))
    }
}
