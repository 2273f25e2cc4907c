//! The reads of [`Core`] served inline (`read_inline`, `read_inline_in_turn`,
//! and for the file objects of [`crate::inline`] `read_ahead_inline`,
//! `read_piece_inline`, `read_raw_inline`, `read_rest_inline`): each checks
//! its arguments and that the core is neither closed nor inherited across a
//! fork, and hands the read to the core's
//! [`InlineReads`](crate::inline_read::InlineReads) (in
//! [`crate::inline_read`]), which owns the state of the tries (the run of
//! misses and the skipping); a miss, and the caller reads through the engine.
//! Beside `inline_read.rs` rather than in it: the guard needs the core, and
//! the core holds the [`InlineReads`](crate::inline_read::InlineReads), so
//! the part stays free of the core.

use std::os::fd::RawFd;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes};

use crate::engine::Core;
use crate::turns;

impl Core {
    /// `length` bytes at `offset` of `fd` if all of them are in the page
    /// cache, copied on the calling thread with `preadv2(RWF_NOWAIT)` (no
    /// ring round trip, no event-loop wake-up); else `None`, and the caller
    /// reads through the engine, which then gives exactly what it would
    /// have: a read that is short (a partly cached range, the end of the
    /// file), refused (`EAGAIN`; `ESPIPE` on a pipe; `EINVAL` on an
    /// `O_DIRECT` descriptor, whose alignment a `bytes` never has) or
    /// failed is never the answer here. After
    /// [`MISSES_BEFORE_SKIPPING`](crate::inline_read::MISSES_BEFORE_SKIPPING)
    /// misses in a row only one read in [`SKIP`](crate::inline_read::SKIP)
    /// is tried, until one hits, so that a cold workload pays for few
    /// failed tries (a miss: bytes not cached; a refusal for what the
    /// descriptor is, `ESPIPE` or `EINVAL`, is none: see
    /// [`crate::inline_read`]).
    pub(crate) fn read_inline<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offset: i64,
        length: i64,
    ) -> Option<Bound<'py, PyBytes>> {
        let (Ok(off), Ok(len)) = (u64::try_from(offset), usize::try_from(length)) else {
            return None;
        };
        if self.born.forked() || self.closed() {
            return None;
        }
        self.inline.read(py, fd, off, len)
    }

    /// [`read_inline`](Self::read_inline), counted as a call served
    /// without suspending (see [`turns`]): `False` instead when this call
    /// is to take its turn of the event loop first, having read nothing
    /// (the caller takes the turn, then reads). Counted here, where the
    /// read is, rather than in the caller's Python (an attribute read, a
    /// comparison and an attribute write less per read).
    pub(crate) fn read_inline_in_turn<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offset: i64,
        length: i64,
    ) -> Option<Bound<'py, PyAny>> {
        if turns::due() {
            return Some(PyBool::new(py, false).to_owned().into_any());
        }
        let data = self.read_inline(py, fd, offset, length)?;
        turns::served(data.as_bytes().len());
        Some(data.into_any())
    }

    /// At least `min` and up to `len` bytes at `offset` of `fd`, served
    /// inline if the first `min` are in the page cache (see
    /// [`InlineReads::read_ahead`](crate::inline_read::InlineReads::read_ahead));
    /// else `None`, and the caller reads through the engine.
    pub(crate) fn read_ahead_inline<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offset: i64,
        min: usize,
        len: usize,
    ) -> Option<Bound<'py, PyBytes>> {
        let off = u64::try_from(offset).ok()?;
        if self.born.forked() || self.closed() {
            return None;
        }
        self.inline.read_ahead(py, fd, off, min, len)
    }

    /// One piece of a read served inline in pieces: `len` bytes at `offset`
    /// of `fd` into `obj` from its byte `at` on, if all cached (see
    /// [`InlineReads::read_piece`](crate::inline_read::InlineReads::read_piece);
    /// `obj` a new `bytes` object not yet handed out).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_piece_inline(
        &self,
        fd: RawFd,
        offset: i64,
        obj: &Bound<'_, PyBytes>,
        at: usize,
        len: usize,
        first: bool,
    ) -> crate::inline_read::Piece {
        let Ok(off) = u64::try_from(offset) else {
            return crate::inline_read::Piece::Miss;
        };
        if self.born.forked() || self.closed() {
            return crate::inline_read::Piece::Miss;
        }
        self.inline.read_piece(fd, off, obj, at, len, first)
    }

    /// Reads `len` bytes at `offset` of `fd` into the memory at `base`,
    /// served inline if they are all in the page cache (see
    /// [`InlineReads::read_raw`](crate::inline_read::InlineReads::read_raw));
    /// a miss otherwise, and the caller reads through the engine.
    ///
    /// # Safety
    ///
    /// `base` must be valid for writes of `len` bytes for the call, and
    /// nothing else may read or write them meanwhile.
    pub(crate) unsafe fn read_raw_inline(
        &self,
        fd: RawFd,
        offset: i64,
        base: *mut u8,
        len: usize,
    ) -> crate::inline_read::Piece {
        let Ok(off) = u64::try_from(offset) else {
            return crate::inline_read::Piece::Miss;
        };
        if self.born.forked() || self.closed() {
            return crate::inline_read::Piece::Miss;
        }
        // SAFETY: the caller's promise, which `read_raw` needs.
        unsafe { self.inline.read_raw(fd, off, base, len, true) }
    }

    /// The bytes from `offset` to the end of `fd`, served inline if they can
    /// be (see
    /// [`InlineReads::read_rest`](crate::inline_read::InlineReads::read_rest));
    /// else `None`, and the caller reads through the engine.
    pub(crate) fn read_rest_inline<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offset: i64,
    ) -> Option<Bound<'py, PyAny>> {
        let off = u64::try_from(offset).ok()?;
        if self.born.forked() || self.closed() {
            return None;
        }
        self.inline.read_rest(py, fd, off)
    }
}
