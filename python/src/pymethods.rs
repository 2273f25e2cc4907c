//! `Core`'s Python methods: the one `#[pymethods]` block of the class
//! (PyO3 takes one per class unless built with its `multiple-pymethods`
//! feature, which needs the `inventory` crate, not a dependency here).
//!
//! Each method is the Python name and signature of a call, and hands it to
//! the method of the same name on [`Core`], which lives, documented, in the
//! module that owns what the call uses: the lifecycle in [`crate::engine`],
//! the synchronous calls in [`crate::sync_calls`], the asynchronous
//! operations on the rings in [`crate::submit`], the file-system jobs in
//! [`crate::fscalls`], the reads served inline in [`crate::inline_calls`];
//! or, where the call touches one part only, to that part (`own` and `disown`
//! to [`crate::owned::Owned`], `withdraw`, `cancel` and `pending` to
//! [`crate::inflight::InFlight`]). This module owns no state; it is the one
//! module that depends on all of those, so that none of them depends on
//! another through it.

use std::os::fd::RawFd;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::engine::Core;
use crate::pending::{Closed, Finished};

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (queue_depth = blockio::DEFAULT_QUEUE_DEPTH as i64, backend = None))]
    fn py_new(queue_depth: i64, backend: Option<&str>) -> PyResult<Core> {
        Core::new(queue_depth, backend)
    }

    #[getter(backend)]
    fn py_backend(&self) -> PyResult<&'static str> {
        self.backend()
    }

    #[getter(fallback_reason)]
    fn py_fallback_reason(&self) -> PyResult<Option<String>> {
        self.fallback_reason()
    }

    #[pyo3(name = "read_batch")]
    fn py_read_batch<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offsets: Vec<i64>,
        length: i64,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        self.read_batch(py, fd, offsets, length)
    }

    #[pyo3(name = "readinto_batch")]
    fn py_readinto_batch<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        self.readinto_batch(py, ops)
    }

    #[pyo3(name = "write_batch")]
    fn py_write_batch<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        self.write_batch(py, ops)
    }

    #[pyo3(name = "fsync", signature = (fd, data_only = false))]
    fn py_fsync(&self, py: Python<'_>, fd: RawFd, data_only: bool) -> PyResult<()> {
        self.fsync(py, fd, data_only)
    }

    #[pyo3(name = "fallocate")]
    fn py_fallocate(
        &self,
        py: Python<'_>,
        fd: RawFd,
        mode: i32,
        offset: i64,
        length: i64,
    ) -> PyResult<()> {
        self.fallocate(py, fd, mode, offset, length)
    }

    #[pyo3(name = "read_inline")]
    fn py_read_inline<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offset: i64,
        length: i64,
    ) -> Option<Bound<'py, PyBytes>> {
        self.read_inline(py, fd, offset, length)
    }

    #[pyo3(name = "read_inline_in_turn")]
    fn py_read_inline_in_turn<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offset: i64,
        length: i64,
    ) -> Option<Bound<'py, PyAny>> {
        self.read_inline_in_turn(py, fd, offset, length)
    }

    #[pyo3(name = "prepare", signature = (fd, opener = false))]
    fn py_prepare(&self, fd: RawFd, opener: bool) -> PyResult<()> {
        self.prepare(fd, opener)
    }

    #[pyo3(name = "eventfd")]
    fn py_eventfd(&self) -> PyResult<RawFd> {
        self.eventfd()
    }

    #[pyo3(name = "submit_read")]
    fn py_submit_read(
        &self,
        py: Python<'_>,
        waiter: PyObject,
        fd: RawFd,
        offsets: Vec<i64>,
        length: i64,
    ) -> PyResult<u64> {
        self.submit_read(py, waiter, fd, offsets, length)
    }

    #[pyo3(name = "submit_read_after")]
    fn py_submit_read_after(
        &self,
        py: Python<'_>,
        waiter: PyObject,
        fd: RawFd,
        head: &[u8],
        offset: i64,
        length: i64,
    ) -> PyResult<u64> {
        self.submit_read_after(py, waiter, fd, head, offset, length)
    }

    #[pyo3(name = "submit_readinto")]
    fn py_submit_readinto(
        &self,
        waiter: PyObject,
        ops: Vec<(RawFd, Bound<'_, PyAny>, i64)>,
    ) -> PyResult<u64> {
        self.submit_readinto(waiter, ops)
    }

    #[pyo3(name = "submit_write")]
    fn py_submit_write(
        &self,
        waiter: PyObject,
        ops: Vec<(RawFd, Bound<'_, PyAny>, i64)>,
    ) -> PyResult<u64> {
        self.submit_write(waiter, ops)
    }

    #[pyo3(name = "submit_sync", signature = (waiter, fd, data_only = false))]
    fn py_submit_sync(&self, waiter: PyObject, fd: RawFd, data_only: bool) -> PyResult<u64> {
        self.submit_sync(waiter, fd, data_only)
    }

    #[pyo3(name = "submit_fallocate")]
    fn py_submit_fallocate(
        &self,
        waiter: PyObject,
        fd: RawFd,
        mode: i32,
        offset: i64,
        length: i64,
    ) -> PyResult<u64> {
        self.submit_fallocate(waiter, fd, mode, offset, length)
    }

    #[pyo3(name = "submit_open")]
    fn py_submit_open(
        &self,
        waiter: PyObject,
        path: Vec<u8>,
        flags: i32,
        mode: u32,
    ) -> PyResult<u64> {
        self.submit_open(waiter, path, flags, mode)
    }

    #[pyo3(name = "submit_stat")]
    fn py_submit_stat(&self, waiter: PyObject, path: Vec<u8>, follow: bool) -> PyResult<u64> {
        self.submit_stat(waiter, path, follow)
    }

    #[pyo3(name = "submit_size")]
    fn py_submit_size(&self, waiter: PyObject, fd: RawFd) -> PyResult<u64> {
        self.submit_size(waiter, fd)
    }

    #[pyo3(name = "submit_ftruncate")]
    fn py_submit_ftruncate(&self, waiter: PyObject, fd: RawFd, length: i64) -> PyResult<u64> {
        self.submit_ftruncate(waiter, fd, length)
    }

    #[pyo3(name = "submit_close")]
    fn py_submit_close(&self, waiter: PyObject, fd: RawFd) -> PyResult<u64> {
        self.submit_close(waiter, fd)
    }

    #[pyo3(name = "own")]
    fn py_own(&self, fd: RawFd) {
        self.owned.own(fd)
    }

    #[pyo3(name = "disown")]
    fn py_disown(&self, fd: RawFd) -> bool {
        self.owned.disown(fd)
    }

    #[pyo3(name = "submit_mkdir")]
    fn py_submit_mkdir(&self, waiter: PyObject, path: Vec<u8>, mode: u32) -> PyResult<u64> {
        self.submit_mkdir(waiter, path, mode)
    }

    #[pyo3(name = "submit_symlink")]
    fn py_submit_symlink(&self, waiter: PyObject, target: Vec<u8>, link: Vec<u8>) -> PyResult<u64> {
        self.submit_symlink(waiter, target, link)
    }

    #[pyo3(name = "submit_read_files")]
    fn py_submit_read_files(&self, waiter: PyObject, paths: Vec<Vec<u8>>) -> PyResult<u64> {
        self.submit_read_files(waiter, paths)
    }

    #[pyo3(name = "read_files")]
    fn py_read_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<Vec<u8>>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        self.read_files(py, paths)
    }

    #[pyo3(name = "drain")]
    fn py_drain<'py>(&self, py: Python<'py>) -> PyResult<Finished<'py>> {
        self.drain(py)
    }

    #[pyo3(name = "withdraw")]
    fn py_withdraw(&self, token: u64) -> bool {
        self.inflight.withdraw(token)
    }

    #[pyo3(name = "cancel")]
    fn py_cancel(&self, token: u64) {
        self.inflight.cancel(token)
    }

    #[pyo3(name = "pending")]
    fn py_pending(&self) -> usize {
        self.inflight.count()
    }

    #[pyo3(name = "close")]
    fn py_close<'py>(&self, py: Python<'py>) -> PyResult<Closed<'py>> {
        self.close(py)
    }

    #[getter(reads_started)]
    fn py_reads_started(&self) -> u64 {
        self.reads_started()
    }

    #[getter(closed)]
    fn py_closed(&self) -> bool {
        self.closed()
    }

    /// Open, and made by this process: not a parent's before a fork,
    /// however the child was made (see `fds::forks`), with no system call.
    #[getter(usable)]
    fn py_usable(&self) -> bool {
        !self.born.forked() && !self.closed()
    }
}
