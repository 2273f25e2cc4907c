//! The asynchronous operations of [`Core`] on its rings: reads into new
//! memory (`submit_read`, `submit_read_after`, through [`crate::fresh`] from
//! 64 KiB on), reads into Python buffers and writes (`submit_readinto`,
//! `submit_write`: [`Core::submit_each`]), and the operations without memory
//! (`submit_sync`, `submit_fallocate`). Each builds its batch's futures on
//! the async engine of the descriptor ([`Core::aio`]), holding the descriptor
//! as a file object's own ([`crate::owned::Owned::hold_for_batch`]) or a
//! duplicate, and starts the batch ([`Core::start`]). What they use of the
//! core's own fields (declared in [`crate::engine`]): the read buffers kept for the next reads (`Core::spare`) and the
//! count of reads started (`Core::reads`).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use blockio::aio::{AsyncFile, OpFuture, Withdrawal};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::args::{
    alloc_for, buffer_ops, distinct_read_buffers, length_arg, offsets_arg, range_arg, readable,
    total_arg, writable,
};
use crate::engine::Core;
use crate::errors::{explain_direct, name_given_fd, refused};
use crate::fds::{fd_flags, offset_refused, refused_offsets, without_offsets, Given};
use crate::fresh;
use crate::fsjobs::Out;
use crate::lent::Lent;
use crate::pending::{failed, Boxed, Buf, OneDone, Pending, RoBuf, Yields};

impl Core {
    /// Starts reading `length` bytes at each offset; finished under `token`.
    /// The buffers are page-aligned, so an `O_DIRECT` descriptor takes them.
    /// On other descriptors a read of at least [`fresh::FRESH_MIN`] bytes
    /// goes straight into the `bytes` object it returns (see [`fresh`]).
    pub(crate) fn submit_read(
        &self,
        py: Python<'_>,
        waiter: PyObject,
        fd: RawFd,
        offsets: Vec<i64>,
        length: i64,
    ) -> PyResult<u64> {
        let (offsets, length) = (offsets_arg(&offsets)?, length_arg(length)?);
        total_arg(offsets.len(), length)?;
        self.reads
            .fetch_add(offsets.len() as u64, Ordering::Relaxed);
        let flags = fd_flags(fd);
        let direct = flags != -1 && flags & libc::O_DIRECT != 0;
        // (at an offset other than 0 of a pipe, socket or terminal: ESPIPE,
        // as `os.pread`'s, where io_uring would ignore the offset and read)
        let no_offsets = offsets.iter().any(|&off| off != 0) && without_offsets(fd, flags);
        let aio = self.aio(direct)?;
        let (file, lent) = self.owned.hold_for_batch(&aio, fd, flags);
        if let (Ok(_), false, true) = (&file, direct, length >= fresh::FRESH_MIN) {
            let at = (&offsets[..], no_offsets);
            return self.start_fresh(py, waiter, (fd, file, lent), at, b"", length, false);
        }
        let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
        let futs = offsets
            .iter()
            .map(|&off| {
                if no_offsets && off != 0 {
                    return Ok(failed(Yields::Read, offset_refused(fd, length, off)));
                }
                Ok(match &file {
                    Ok((file, dup)) => {
                        let dup = *dup;
                        let buf = match spare.pop() {
                            Some(b) if b.len() == length => b,
                            _ => alloc_for(length, "a read")?,
                        };
                        let f = file.read_at(Buf::Owned(buf), off);
                        let b: Boxed<OneDone> = Box::pin(async move {
                            let (r, buf) = f.await;
                            OneDone::Read((explain_direct(name_given_fd(r, dup, fd), fd), buf))
                        });
                        b
                    }
                    Err(errno) => failed(
                        Yields::Read,
                        refused(
                            &format!("read of {length} bytes at offset {off}"),
                            fd,
                            *errno,
                        ),
                    ),
                })
            })
            .collect::<PyResult<Vec<_>>>();
        drop(spare);
        let futs = match futs {
            Ok(f) => f,
            Err(e) => {
                if lent {
                    self.start_closes(self.owned.release(&[fd]));
                }
                return Err(e);
            }
        };
        let mut batch = Pending::new(futs, Yields::Read);
        if lent {
            batch.borrowed.push(fd);
        }
        Ok(self.start(waiter, batch))
    }

    /// Starts reading `length` bytes (at least 1) at `offset` of `fd` into
    /// one new `bytes` object that starts with `head` (bytes the caller read
    /// before `offset` and still holds: its read-ahead), so that the result
    /// is one object the kernel fills, with no join on the caller's thread
    /// (see [`fresh`]), even past what one `read(2)` returns
    /// ([`MAX_IO`](crate::args::MAX_IO)); finished under `token`. Not for an `O_DIRECT`
    /// descriptor, whose reads need aligned memory: those fail (`EINVAL`).
    pub(crate) fn submit_read_after(
        &self,
        py: Python<'_>,
        waiter: PyObject,
        fd: RawFd,
        head: &[u8],
        offset: i64,
        length: i64,
    ) -> PyResult<u64> {
        // (no bound of one read(2) on `length`: its pieces are reads of
        // at most `fresh::PIECE` bytes; the machine's memory bounds it)
        let offsets = offsets_arg(&[offset])?;
        let length = usize::try_from(length).map_err(|_| {
            PyValueError::new_err(format!("length must be at least 0, got {length}"))
        })?;
        total_arg(1, head.len().saturating_add(length))?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let flags = fd_flags(fd);
        let direct = flags != -1 && flags & libc::O_DIRECT != 0;
        let aio = self.aio(direct)?;
        let held = self.owned.hold_for_batch(&aio, fd, flags);
        self.start_fresh(
            py,
            waiter,
            (fd, held.0, held.1),
            (&offsets, false),
            head,
            length.max(1),
            true,
        )
    }

    /// Starts reads of `length` bytes at each offset of `fd` (held as
    /// `file`, borrowed from a file object when `lent`), each into one new
    /// `bytes` object that starts with `head` ([`fresh::start`]; `whole`:
    /// a procfs file's pieces read on past short reads); with `no_offsets`
    /// (see [`without_offsets`]) those at an offset other than 0 fail with
    /// `ESPIPE` instead.
    #[allow(clippy::too_many_arguments)]
    fn start_fresh(
        &self,
        py: Python<'_>,
        waiter: PyObject,
        (fd, file, lent): (RawFd, Result<(AsyncFile, RawFd), i32>, bool),
        (offsets, no_offsets): (&[u64], bool),
        head: &[u8],
        length: usize,
        whole: bool,
    ) -> PyResult<u64> {
        // (the shape asked of the file once, however many offsets)
        let file = file.map(|(file, dup)| (Arc::new(file), dup, fresh::shape(dup, whole)));
        let per = match &file {
            Ok((_, _, shape)) => shape.pieces(length),
            Err(_) => fresh::pieces_of(length),
        };
        let mut futs = Vec::with_capacity(offsets.len() * per);
        for &off in offsets {
            if no_offsets && off != 0 {
                let pieces =
                    (0..per).map(|_| failed(Yields::Fresh(per), offset_refused(fd, length, off)));
                futs.extend(pieces);
                continue;
            }
            match &file {
                Ok((file, dup, shape)) => {
                    match fresh::start(py, file, (fd, *dup), off, head, length, *shape) {
                        Ok(f) => futs.extend(f),
                        Err(e) => {
                            if lent {
                                self.start_closes(self.owned.release(&[fd]));
                            }
                            return Err(e);
                        }
                    }
                }
                Err(errno) => futs.extend((0..per).map(|_| {
                    failed(
                        Yields::Fresh(per),
                        refused(
                            &format!("read of {length} bytes at offset {off}"),
                            fd,
                            *errno,
                        ),
                    )
                })),
            }
        }
        let mut batch = Pending::new(futs, Yields::Fresh(per));
        if lent {
            batch.borrowed.push(fd);
        }
        Ok(self.start(waiter, batch))
    }

    /// Starts reading into each `(fd, buffer, offset)`.
    pub(crate) fn submit_readinto(
        &self,
        waiter: PyObject,
        ops: Vec<(RawFd, Bound<'_, PyAny>, i64)>,
    ) -> PyResult<u64> {
        let ops = buffer_ops(ops)?;
        let (at_offsets, flags) = refused_offsets(&ops);
        if at_offsets.iter().any(Option::is_some) {
            // (a read refused for its offset is not made: its buffer may be another's)
            let made: Vec<_> = ops
                .iter()
                .zip(&at_offsets)
                .filter(|(_, r)| r.is_none())
                .map(|(op, _)| op.clone())
                .collect();
            distinct_read_buffers(&made)?;
        } else {
            distinct_read_buffers(&ops)?;
        }
        self.reads.fetch_add(ops.len() as u64, Ordering::Relaxed);
        let given = (at_offsets, flags);
        self.submit_each(
            waiter,
            "read",
            (ops, given),
            writable,
            |file, buf, off, fd, dup| {
                counted(file.read_at(Buf::Exported(Lent::new(buf)), off), fd, dup)
            },
        )
    }

    /// Starts writing each `(fd, data, offset)`.
    pub(crate) fn submit_write(
        &self,
        waiter: PyObject,
        ops: Vec<(RawFd, Bound<'_, PyAny>, i64)>,
    ) -> PyResult<u64> {
        self.submit_each(
            waiter,
            "write",
            (buffer_ops(ops)?, (Vec::new(), HashMap::new())),
            readable,
            |file, buf, off, fd, dup| counted(file.write_at(RoBuf(Lent::new(buf)), off), fd, dup),
        )
    }

    /// Starts one operation per `(fd, buffer, offset)`: `prepare` checks the
    /// buffer, `issue` makes the operation; but for those already refused
    /// (the errors of [`Given`], in their places), with the descriptors'
    /// flags it looked up.
    pub(crate) fn submit_each<'py, B>(
        &self,
        waiter: PyObject,
        what: &str,
        (ops, (mut given, flags)): (Vec<(RawFd, Bound<'py, PyAny>, u64)>, Given),
        prepare: impl Fn(&Bound<'py, PyAny>) -> PyResult<B>,
        issue: impl Fn(&AsyncFile, B, u64, RawFd, RawFd) -> (Boxed<OneDone>, Withdrawal),
    ) -> PyResult<u64> {
        let mut files: HashMap<RawFd, Result<(AsyncFile, RawFd), i32>> = HashMap::new();
        let mut futs = Vec::with_capacity(ops.len());
        let mut withdrawals = Vec::with_capacity(ops.len());
        let mut borrowed = Vec::new();
        given.resize_with(ops.len(), || None);
        for ((fd, obj, off), pre) in ops.iter().zip(given) {
            if let Some(e) = pre {
                futs.push(failed(Yields::Count, e));
                continue;
            }
            let buf = match prepare(obj) {
                Ok(b) => b,
                Err(e) => {
                    self.start_closes(self.owned.release(&borrowed));
                    return Err(e);
                }
            };
            if !files.contains_key(fd) {
                let flags = flags.get(fd).copied().unwrap_or_else(|| fd_flags(*fd));
                let direct = flags != -1 && flags & libc::O_DIRECT != 0;
                let aio = match self.aio(direct) {
                    Ok(a) => a,
                    Err(e) => {
                        self.start_closes(self.owned.release(&borrowed));
                        return Err(e);
                    }
                };
                let (file, lent) = self.owned.hold_for_batch(&aio, *fd, flags);
                if lent {
                    borrowed.push(*fd);
                }
                files.insert(*fd, file);
            }
            futs.push(match &files[fd] {
                Ok((f, dup)) => {
                    let (fut, w) = issue(f, buf, *off, *fd, *dup);
                    withdrawals.push(w);
                    fut
                }
                Err(errno) => failed(
                    Yields::Count,
                    refused(&format!("{what} at offset {off}"), *fd, *errno),
                ),
            });
        }
        let mut batch = Pending::new(futs, Yields::Count);
        batch.withdrawals = withdrawals;
        batch.borrowed = borrowed;
        Ok(self.start(waiter, batch))
    }

    /// Starts an fsync (or fdatasync) of `fd`.
    pub(crate) fn submit_sync(
        &self,
        waiter: PyObject,
        fd: RawFd,
        data_only: bool,
    ) -> PyResult<u64> {
        if data_only {
            self.submit_bare(waiter, fd, "fdatasync", AsyncFile::fdatasync)
        } else {
            self.submit_bare(waiter, fd, "fsync", AsyncFile::fsync)
        }
    }

    /// Starts a `fallocate` of `length` bytes at `offset` of `fd` with
    /// `mode`'s `FALLOC_FL_*` flags ([`AsyncFile::fallocate`]).
    pub(crate) fn submit_fallocate(
        &self,
        waiter: PyObject,
        fd: RawFd,
        mode: i32,
        offset: i64,
        length: i64,
    ) -> PyResult<u64> {
        let (offset, length) = range_arg(offset, length)?;
        self.submit_bare(waiter, fd, "fallocate", move |f: &AsyncFile| {
            f.fallocate(mode, offset, length)
        })
    }

    /// Starts the one operation without memory that `make` builds on
    /// `fd`'s async file (an fsync, a fallocate); `what` names it when `fd`
    /// cannot be held.
    fn submit_bare(
        &self,
        waiter: PyObject,
        fd: RawFd,
        what: &str,
        make: impl FnOnce(&AsyncFile) -> OpFuture<()>,
    ) -> PyResult<u64> {
        let aio = self.aio(false)?;
        let (file, lent) = self.owned.hold_for_batch(&aio, fd, fd_flags(fd));
        let fut = match file {
            Ok((file, dup)) => {
                let f = make(&file);
                let b: Boxed<OneDone> = Box::pin(async move {
                    let r = name_given_fd(f.await.0, dup, fd);
                    OneDone::Count(r.map(|_| Out::Count(0)))
                });
                b
            }
            Err(errno) => failed(Yields::Count, refused(what, fd, errno)),
        };
        let mut batch = Pending::new(vec![fut], Yields::Count);
        if lent {
            batch.borrowed.push(fd);
        }
        Ok(self.start(waiter, batch))
    }
}

/// A read into a Python buffer, or a write, as an operation of a batch
/// that reports its byte count (errors naming the caller's `fd`, not our
/// duplicate `dup`), with what withdraws it (see `InFlight::withdraw`).
fn counted<B: Send + 'static>(
    f: blockio::aio::OpFuture<B>,
    fd: RawFd,
    dup: RawFd,
) -> (Boxed<OneDone>, Withdrawal) {
    let w = f.withdrawal();
    let fut: Boxed<OneDone> = Box::pin(async move {
        let r = name_given_fd(f.await.0, dup, fd);
        OneDone::Count(explain_direct(r, fd).map(Out::Count))
    });
    (fut, w)
}
