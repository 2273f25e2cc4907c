//! The synchronous calls of [`Core`] (`read_batch`, `readinto_batch`,
//! `write_batch`, `fsync`, `fallocate`, `read_files`): each takes the batch
//! engine of the synchronous calls ([`crate::sync_engine::SyncEngine`],
//! through [`Core::sync_engine`]) for the length of the call and runs its
//! batch with the GIL released. They own no state of the core: what they keep
//! between calls is the per-thread arena of `O_DIRECT` reads
//! ([`read_direct`]); the rest is the call's own.

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Mutex, PoisonError};

use blockio::{AlignedBuf, Engine, Op, RawTarget};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::args::{
    alloc_for, buffer_ops, c_path, length_arg, offsets_arg, range_arg, readable, refuse_overlaps,
    total_arg, writable,
};
use crate::batch::{
    buffer_batch, read_into_buffer, read_into_new_bytes, refusals, with_failures,
    write_from_buffer, BufferOp,
};
use crate::engine::Core;
use crate::errors::{count_or_error, explain_direct, file_content, io_err, os_error, refused};
use crate::fds::{fd_flags, offset_refused, refused_offsets, wait_ready, without_offsets};
use crate::fsjobs;

impl Core {
    /// Reads `length` bytes at each offset of `fd`; a list of bytes or
    /// OSError, in order, and how many failed.
    pub(crate) fn read_batch<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offsets: Vec<i64>,
        length: i64,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let (offsets, length) = (offsets_arg(&offsets)?, length_arg(length)?);
        total_arg(offsets.len(), length)?;
        let engine = &self.sync_engine()?;
        let flags = fd_flags(fd);
        if offsets.iter().any(|&off| off != 0) && without_offsets(fd, flags) {
            return self.read_batch_at_0(py, fd, &offsets, length);
        }
        if length == 0 && crate::fds::opened_for(flags, libc::POLLIN) {
            // (a descriptor not open for reading goes on to fail with
            // EBADF, as `os.read(fd, 0)` and a batch's own reads do)
            let empty = PyList::new(py, offsets.iter().map(|_| PyBytes::new(py, &[])))?;
            return Ok((empty, 0));
        }
        if let Some(errno) = wait_ready(py, fd, flags, libc::POLLIN, &|| self.closing())? {
            // Refused: every read fails with the same errno, in its place.
            let results: Vec<io::Result<usize>> = offsets
                .iter()
                .map(|off| {
                    let what = format!("read of {length} bytes at offset {off}");
                    Err(refused(&what, fd, errno))
                })
                .collect();
            let items = results.iter().map(|r| count_or_error(py, r)).collect();
            return with_failures(py, items, &results);
        }
        if flags == -1 || flags & libc::O_DIRECT == 0 {
            return read_into_new_bytes(py, engine, fd, &offsets, length);
        }
        read_direct(py, engine, fd, &offsets, length)
    }

    /// [`read_batch`](Core::read_batch) of `fd`, which has no offsets (see
    /// [`without_offsets`]): the reads at offset 0 made, the others
    /// refused with `ESPIPE` in their places, as `os.pread`'s.
    fn read_batch_at_0<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offsets: &[u64],
        length: usize,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let at_0 = offsets.iter().filter(|&&off| off == 0).count();
        let (made, mut failed) = if at_0 > 0 {
            let length = i64::try_from(length).unwrap_or(i64::MAX);
            let (made, failed) = self.read_batch(py, fd, vec![0; at_0], length)?;
            (made.iter().collect::<Vec<_>>(), failed)
        } else {
            (Vec::new(), 0)
        };
        let mut made = made.into_iter();
        let mut items = Vec::with_capacity(offsets.len());
        for &off in offsets {
            if off == 0 {
                items.push(made.next().expect("a result per read at 0"));
            } else {
                failed += 1;
                items.push(os_error(py, &offset_refused(fd, length, off)).into_bound(py));
            }
        }
        Ok((PyList::new(py, items)?, failed))
    }

    /// Reads into each `(fd, buffer, offset)`; a list of byte counts or
    /// OSError, in order, and how many failed.
    pub(crate) fn readinto_batch<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let ops = buffer_ops(ops)?;
        let engine = &self.sync_engine()?;
        let (at_offsets, flags) = refused_offsets(&ops);
        let bufs: Vec<BufferOp> = ops
            .iter()
            .map(|(fd, b, off)| Ok((RawTarget(*fd), writable(b)?, *off)))
            .collect::<PyResult<_>>()?;
        // (a read refused for its offset is not made: its buffer may be another's)
        refuse_overlaps(
            bufs.iter()
                .zip(&at_offsets)
                .filter(|(_, r)| r.is_none())
                .map(|((_, b, _), _)| b),
        )?;
        let refused = refusals(
            py,
            &bufs,
            libc::POLLIN,
            &|| self.closing(),
            at_offsets,
            &flags,
        )?;
        buffer_batch(py, engine, bufs, refused, read_into_buffer)
    }

    /// Writes each `(fd, data, offset)`; a list of byte counts or OSError,
    /// and how many failed.
    pub(crate) fn write_batch<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let ops = buffer_ops(ops)?;
        let engine = &self.sync_engine()?;
        let bufs: Vec<BufferOp> = ops
            .iter()
            .map(|(fd, b, off)| Ok((RawTarget(*fd), readable(b)?, *off)))
            .collect::<PyResult<_>>()?;
        let refused = refusals(
            py,
            &bufs,
            libc::POLLOUT,
            &|| self.closing(),
            Vec::new(),
            &HashMap::new(),
        )?;
        buffer_batch(py, engine, bufs, refused, write_from_buffer)
    }

    /// fsync (or fdatasync) of `fd`.
    pub(crate) fn fsync(&self, py: Python<'_>, fd: RawFd, data_only: bool) -> PyResult<()> {
        let engine = &self.sync_engine()?;
        let target = RawTarget(fd);
        let r = crate::gil::detach(py, || {
            let mut ops = [if data_only {
                Op::fdatasync(&target)
            } else {
                Op::fsync(&target)
            }];
            engine.submit(&mut ops)
        });
        match r.map_err(io_err)?.remove(0) {
            Ok(_) => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    /// `fallocate` of `length` bytes at `offset` of `fd` with `mode`'s
    /// `FALLOC_FL_*` flags ([`Op::fallocate`]), with the GIL released.
    pub(crate) fn fallocate(
        &self,
        py: Python<'_>,
        fd: RawFd,
        mode: i32,
        offset: i64,
        length: i64,
    ) -> PyResult<()> {
        let (offset, length) = range_arg(offset, length)?;
        let engine = &self.sync_engine()?;
        let target = RawTarget(fd);
        let r = crate::gil::detach(py, || {
            engine.submit(&mut [Op::fallocate(&target, mode, offset, length)])
        });
        match r.map_err(io_err)?.remove(0) {
            Ok(_) => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Reads every file of `paths` whole, the GIL released; a list of
    /// bytes or OSError, one per path, in order, and how many failed.
    ///
    /// The reading runs on threads of their own while this one waits,
    /// turning each round of files into `bytes` as it arrives (see
    /// [`fsjobs::read_files_by_round`]) and running the signal handlers
    /// every 100 ms: a read blocked on a FIFO whose writer stays open is
    /// then interrupted by Ctrl-C as `os.read` is (`KeyboardInterrupt`), the
    /// threads left to finish it and close the files, as `aread_files`
    /// leaves them when cancelled.
    pub(crate) fn read_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<Vec<u8>>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let engine = self.sync_engine()?;
        let paths: Vec<std::ffi::CString> =
            paths.into_iter().map(c_path).collect::<PyResult<_>>()?;
        let n = paths.len();
        if n == 0 {
            return Ok((PyList::empty(py), 0));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let job = (engine.clone(), paths.clone());
        let reader = blockio::arenas::spawn("blockio-read-files", None, move || {
            let end = fsjobs::read_files_by_round(&job.0, &job.1, &|first, r| {
                let _ = tx.send(Sent::Round(first, r));
            });
            let _ = tx.send(Sent::End(end));
        });
        if reader.is_err() {
            // No thread to be had (a process limit): read on this one.
            let results =
                crate::gil::detach(py, || fsjobs::read_files(&engine, &paths)).map_err(io_err)?;
            let failed = results.iter().filter(|r| r.is_err()).count();
            let items = results.iter().map(|r| file_content(py, r));
            return Ok((PyList::new(py, items)?, failed));
        }
        // (Shared with the waits, which run without the GIL.)
        let (items, failed) = self.take_rounds(py, &Mutex::new(rx), n)?;
        Ok((PyList::new(py, items)?, failed))
    }

    /// The results of `n` files as the rounds of `read_files`' reading
    /// thread arrive on `rx`, each turned into `bytes` or `OSError` in
    /// its place, and how many failed; the signal handlers run after each
    /// round and every 100 ms meanwhile (see `read_files`).
    fn take_rounds(
        &self,
        py: Python<'_>,
        rx: &Mutex<std::sync::mpsc::Receiver<Sent>>,
        n: usize,
    ) -> PyResult<(Vec<PyObject>, usize)> {
        use std::sync::mpsc::RecvTimeoutError;
        let mut items: Vec<Option<PyObject>> = (0..n).map(|_| None).collect();
        let mut failed = 0;
        loop {
            match crate::gil::detach(py, || {
                rx.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .recv_timeout(std::time::Duration::from_millis(100))
            }) {
                Ok(Sent::Round(first, results)) => {
                    for (k, r) in results.iter().enumerate() {
                        failed += usize::from(r.is_err());
                        items[first + k] = Some(file_content(py, r));
                    }
                    // Its memory, for the rounds still to read.
                    drop(results);
                    // Rounds may arrive without a pause: Ctrl-C is looked
                    // at after each.
                    py.check_signals()?;
                }
                Ok(Sent::End(end)) => {
                    end.map_err(io_err)?;
                    break;
                }
                Err(RecvTimeoutError::Timeout) if self.closing() => {
                    // (its threads, which hold the engine, are left to
                    // finish, as after Ctrl-C)
                    return Err(io_err(io::Error::other(
                        "read_files: the engine was closed while the files were read (a FIFO that no writer \
                         fed, say): none is returned",
                    )));
                }
                Err(RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err(
                        "read_files: its reading thread ended without a result",
                    ))
                }
            }
        }
        let items = items.into_iter().map(|i| i.expect("every file's result"));
        Ok((items.collect(), failed))
    }
}

/// What `read_files`' reading thread sends: a round's results, by the
/// index of its first path; then how the whole call ended.
enum Sent {
    Round(usize, Vec<fsjobs::FileResult>),
    End(io::Result<()>),
}

/// [`Core::read_batch`] of `fd`, opened with `O_DIRECT`: `length` bytes at
/// each offset, each a new `bytes` or its OSError in its place, and how
/// many failed.
fn read_direct<'py>(
    py: Python<'py>,
    engine: &Engine,
    fd: RawFd,
    offsets: &[u64],
    length: usize,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    // O_DIRECT needs aligned memory, which `bytes` are not: read into
    // one page-aligned arena per thread, reused (no allocation and no
    // zeroing per read), and copy out.
    thread_local! {
        static ARENA: std::cell::RefCell<AlignedBuf> = std::cell::RefCell::new(AlignedBuf::new(0, 4096));
    }
    ARENA.with(|arena| {
        let mut arena = arena.borrow_mut();
        let need = offsets.len().checked_mul(length).ok_or_else(|| {
            PyMemoryError::new_err(format!(
                "{} reads of {length} bytes do not fit in memory",
                offsets.len()
            ))
        })?;
        if arena.len() < need {
            let size = need.checked_next_power_of_two().unwrap_or(need);
            *arena = alloc_for(size, "the O_DIRECT read buffers")?;
        }
        let target = RawTarget(fd);
        let results = {
            let slots = arena[..need].chunks_mut(length.max(1));
            crate::gil::detach(py, || {
                let mut ops: Vec<Op<'_>> = slots
                    .zip(offsets)
                    .map(|(b, &off)| Op::read(&target, off, b))
                    .collect();
                engine.submit(&mut ops)
            })
        };
        let results: Vec<io::Result<usize>> = results
            .map_err(io_err)?
            .into_iter()
            .map(|r| explain_direct(r, fd))
            .collect();
        let items: Vec<PyObject> = results
            .iter()
            .enumerate()
            .map(|(k, r)| match r {
                Ok(n) => PyBytes::new(py, &arena[k * length..k * length + *n])
                    .into_any()
                    .unbind(),
                Err(e) => os_error(py, e),
            })
            .collect();
        with_failures(py, items, &results)
    })
}
