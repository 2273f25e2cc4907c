//! Reads served inline: on the calling thread, holding the GIL, with one
//! `preadv2(RWF_NOWAIT)` into the `bytes` object returned, when all the
//! bytes asked for are in the page cache; else nothing, and the caller
//! reads through the engine. A workload that keeps missing (cold data)
//! stops paying for the tries: after [`MISSES_BEFORE_SKIPPING`] misses in
//! a row only one read in [`SKIP`] is tried, until one hits. A miss is a
//! try that found bytes uncached (`EAGAIN`, or cut short before the end of
//! the file); one refused for what the descriptor is (a pipe's or
//! socket's `ESPIPE`) counts as neither hit nor miss, since it never can
//! be served inline. So after a cold run (16 misses or more) up to
//! [`SKIP`] − 1 reads, cached or not, go to the engine before the next
//! try, and the first try that hits ends the skipping.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use blockio::{PathAt, RawTarget};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::fresh;

/// The longest read served inline: past it a read goes to the engine,
/// into its `bytes` object (see [`crate::fresh`]), copied off the event
/// loop's thread. Up to it, a `blockio.open` file's `read(n)` is served
/// in pieces of at most [`INLINE_PIECE`], a turn of the loop before a
/// piece after the first when one is due (see `FileState::read_pieces`
/// and `turns`): served so, a loop
/// of 8 MiB reads keeps about the rate of an `os.pread` loop, where
/// through the engine it lost a third to the wake-ups
/// (`docs/benchmarks.md`, "Large cached reads on the loop's thread").
pub(crate) const INLINE_MAX: usize = 8 << 20;

/// The most bytes one read served inline copies at once: the bytes the
/// calls served without suspending may copy between two readings of the
/// clock that decides their turns of the event loop
/// (`turns::TURN_BUDGET` × `turns::TURN_UNIT`). A copy on the
/// loop's thread is time the loop's other tasks wait; a task waiting on a
/// timer waits for about three of them (the loop's step that finds the
/// timer due, the one that runs its callback, the one that runs the task).
/// Longer reads served inline are made of pieces of this size, and
/// `Engine.aread` and `read()` of a file's rest serve no more at once.
pub(crate) const INLINE_PIECE: usize = crate::turns::TURN_BYTES;

/// What reading one piece of a read served in pieces found.
pub(crate) enum Piece {
    /// All the bytes asked for.
    Full,
    /// The file ended after this many of them.
    End(usize),
    /// Not all cached (or refused, or failed): the read goes to the
    /// engine.
    Miss,
}

/// Misses in a row after which only one inline read in [`SKIP`] is tried.
pub(crate) const MISSES_BEFORE_SKIPPING: u64 = 16;

/// See [`MISSES_BEFORE_SKIPPING`].
pub(crate) const SKIP: u64 = 32;

/// The inline reads of one core: its count of misses in a row (counting on
/// past [`MISSES_BEFORE_SKIPPING`] as the reads it skips).
#[derive(Default)]
pub(crate) struct InlineReads {
    misses: AtomicU64,
}

impl InlineReads {
    /// `len` bytes (1 to [`INLINE_PIECE`]) at `off` of `fd` if all of them
    /// are in the page cache; else `None` (short, refused, failed, or
    /// skipped after misses).
    pub(crate) fn read<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        off: u64,
        len: usize,
    ) -> Option<Bound<'py, PyBytes>> {
        if len == 0 || len > INLINE_PIECE {
            return None;
        }
        let misses = self.try_one()?;
        let (bytes, n) = self.counted_read(py, fd, off, len, misses)?;
        let full = n == len;
        self.hit(misses, full || at_end(fd, off, n));
        full.then_some(bytes)
    }

    /// At least `min` and up to `len` bytes (`min` 1 to `len`, `len` at
    /// most [`INLINE_PIECE`]) at `off` of `fd`: a read ahead, whose bytes past
    /// the first `min` may stop short (the end of the file, the end of what
    /// is cached), all of them the file's; `None` if fewer than `min` are
    /// cached there (short, refused, failed, or skipped after misses).
    pub(crate) fn read_ahead<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        off: u64,
        min: usize,
        len: usize,
    ) -> Option<Bound<'py, PyBytes>> {
        if min == 0 || min > len || len > INLINE_PIECE {
            return None;
        }
        let misses = self.try_one()?;
        let (bytes, n) = self.counted_read(py, fd, off, len, misses)?;
        let enough = n >= min;
        self.hit(misses, enough || at_end(fd, off, n));
        if !enough {
            return None;
        }
        if n == len {
            return Some(bytes);
        }
        fresh::shrunk(py, bytes.unbind(), n)
            .ok()?
            .into_bound(py)
            .downcast_into::<PyBytes>()
            .ok()
    }

    /// The bytes from `off` to the end of `fd`, if the file is a regular
    /// one whose size leaves fewer than [`INLINE_PIECE`] of them and all
    /// are in the page cache: the size as the kernel holds it, asking no
    /// server (`statx` with `AT_STATX_DONT_SYNC`), then one
    /// `preadv2(RWF_NOWAIT)` of a byte more than it says; that byte comes
    /// back only if the file grew. Else `None` (the file grew or shrank
    /// meanwhile, is not all cached, is not a regular file).
    pub(crate) fn read_rest<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        off: u64,
    ) -> Option<Bound<'py, PyAny>> {
        let misses = self.try_one()?;
        let st =
            blockio::blocking::stat(PathAt::file(&RawTarget(fd)), libc::AT_STATX_DONT_SYNC).ok()?;
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        let rest = usize::try_from(st.stx_size.saturating_sub(off)).ok()?;
        if rest >= INLINE_PIECE {
            return None;
        }
        let (bytes, n) = self.counted_read(py, fd, off, rest + 1, misses)?;
        // (More than `rest`: the file grew, and what it read was cached.)
        self.hit(misses, n >= rest || at_end(fd, off, n));
        if n != rest {
            return None;
        }
        fresh::shrunk(py, bytes.unbind(), n)
            .ok()
            .map(|b| b.into_bound(py))
    }

    /// Reads `len` bytes (1 to [`INLINE_PIECE`]) at `off` of `fd` into
    /// `obj` from its byte `at` on, if they are all cached (see
    /// [`Piece`]); `first`: the first piece of its read, which counts as a
    /// try (see [`MISSES_BEFORE_SKIPPING`]), where a later piece only
    /// counts a miss. `obj` is a `bytes` object made for the read (see
    /// `fresh::unfilled`) and held by its caller alone (else a miss: its
    /// bytes are not to change under anyone else), at least `at + len`
    /// bytes long.
    pub(crate) fn read_piece(
        &self,
        fd: RawFd,
        off: u64,
        obj: &Bound<'_, PyBytes>,
        at: usize,
        len: usize,
        first: bool,
    ) -> Piece {
        let room = obj.as_bytes().len();
        let fits = at.checked_add(len).is_some_and(|end| end <= room);
        if !fits || obj.get_refcnt() != 1 {
            return Piece::Miss;
        }
        // SAFETY: `obj` is a bytes object at least `at + len` bytes long,
        // of which the caller holds the only reference (both checked
        // above): nobody else sees its buffer, which from `at` on is ours
        // to write.
        unsafe {
            let base = pyo3::ffi::PyBytes_AsString(obj.as_ptr())
                .cast::<u8>()
                .add(at);
            self.read_raw(fd, off, base, len, first)
        }
    }

    /// Reads `len` bytes (1 to [`INLINE_PIECE`]) at `off` of `fd` into the
    /// memory at `base`, if they are all cached (see [`Piece`]); `first`:
    /// the first piece of its read, which counts as a try (see
    /// [`MISSES_BEFORE_SKIPPING`]), where a later piece only counts a miss.
    /// On a miss some of the bytes may have been written there already.
    ///
    /// # Safety
    ///
    /// `base` must be valid for writes of `len` bytes for the call, and
    /// nothing else may read or write them meanwhile.
    pub(crate) unsafe fn read_raw(
        &self,
        fd: RawFd,
        off: u64,
        base: *mut u8,
        len: usize,
        first: bool,
    ) -> Piece {
        if len == 0 || len > INLINE_PIECE {
            return Piece::Miss;
        }
        let misses = if first {
            match self.try_one() {
                Some(m) => m,
                None => return Piece::Miss,
            }
        } else {
            0
        };
        let mut got = 0;
        let (found, uncached) = loop {
            // SAFETY: `got < len`: `len - got` bytes from `base + got`
            // are valid for writes (the caller's promise).
            match unsafe { nowait_read(fd, off + got as u64, base.add(got), len - got) } {
                Ok(0) => break (Piece::End(got), false),
                Ok(n) if got + n == len => break (Piece::Full, false),
                Ok(n) => got += n, // (short: the end, or the end of what is cached)
                Err(failed) => break (Piece::Miss, failed == Failed::Uncached),
            }
        };
        let hit = !matches!(found, Piece::Miss);
        if (first && hit) || uncached {
            self.hit(misses, hit);
        }
        found
    }

    /// Whether to try an inline read: after [`MISSES_BEFORE_SKIPPING`]
    /// misses in a row, only one in [`SKIP`]; the misses so far if so.
    fn try_one(&self) -> Option<u64> {
        let misses = self.misses.load(Ordering::Relaxed);
        if misses >= MISSES_BEFORE_SKIPPING {
            self.misses.store(misses.wrapping_add(1), Ordering::Relaxed);
            if misses % SKIP != 0 {
                return None;
            }
        }
        Some(misses)
    }

    /// [`unfilled_read`], whose failure counts as a miss of the try made
    /// after `misses` misses when it found bytes uncached (`EAGAIN`), and
    /// as nothing when refused (a pipe's `ESPIPE`: never served inline, it
    /// says nothing of what is cached) or failed otherwise.
    fn counted_read<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        off: u64,
        len: usize,
        misses: u64,
    ) -> Option<(Bound<'py, PyBytes>, usize)> {
        match unfilled_read(py, fd, off, len) {
            Ok(got) => Some(got),
            Err(failed) => {
                if failed == Failed::Uncached {
                    self.hit(misses, false);
                }
                None
            }
        }
    }

    /// Records whether an inline read tried after `misses` misses hit (the
    /// count starts again) or missed; `hit`. A read that found the end of
    /// the file (short, or empty) is a hit: nothing it asked for was left
    /// uncached, though the engine serves it (see [`InlineReads::read`]);
    /// counted as misses, a run of reads at a file's end (a text file's
    /// `readline()`s there) would send cached reads after it to the engine.
    fn hit(&self, misses: u64, hit: bool) -> bool {
        if hit {
            self.misses.store(0, Ordering::Relaxed);
        } else if misses < MISSES_BEFORE_SKIPPING {
            self.misses.store(misses + 1, Ordering::Relaxed);
        }
        hit
    }
}

/// Whether a `preadv2(RWF_NOWAIT)` that read `n` bytes at `off` of `fd`
/// stopped at the end of the file: it read none (the kernel's answer at
/// or past the end; an uncached page is `EAGAIN`), or a read of one byte
/// after them finds none. (One more call, only for a read cut short.)
fn at_end(fd: RawFd, off: u64, n: usize) -> bool {
    if n == 0 {
        return true;
    }
    let mut byte = 0u8;
    // SAFETY: `byte` is valid for writes of 1 byte for the call.
    let next = unsafe { nowait_read(fd, off.saturating_add(n as u64), &mut byte, 1) };
    next == Ok(0)
}

/// Why an inline read failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failed {
    /// `EAGAIN`: not all of it cached (a miss).
    Uncached,
    /// Refused (`ESPIPE`, `EBADF`, ...) or not made (no memory): not a miss.
    Other,
}

/// The `Failed` of a `preadv2` that returned -1 (from `errno`).
fn failure() -> Failed {
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
        Failed::Uncached
    } else {
        Failed::Other
    }
}

/// One `preadv2(RWF_NOWAIT)` of up to `len` bytes at `off` of `fd` into
/// `buf`: how many it read, or why it failed.
///
/// # Safety
///
/// `buf` must be valid for writes of `len` bytes.
unsafe fn nowait_read(fd: RawFd, off: u64, buf: *mut u8, len: usize) -> Result<usize, Failed> {
    let off = libc::off_t::try_from(off).map_err(|_| Failed::Other)?;
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over `len` bytes at `buf`, valid for writes (the
    // caller's promise); preadv2 writes at most `iov_len` bytes there.
    // (rustix has no preadv2 flag for RWF_NOWAIT on a raw descriptor
    // number: libc, as `unfilled_read` does.)
    let n = unsafe { libc::preadv2(fd, &iov, 1, off, libc::RWF_NOWAIT) };
    usize::try_from(n).map_err(|_| failure())
}

/// One `preadv2(RWF_NOWAIT)` of up to `len` bytes at `off` of `fd` into a
/// new bytes object of `len` bytes, and how many it read; why not if it
/// failed, or `Failed::Other` if the object could not be made (the slow
/// path reports that). Only the first bytes, as many as it read,
/// are set: the caller hands the object out only when it read all of
/// them, or once shrunk to them.
fn unfilled_read<'py>(
    py: Python<'py>,
    fd: RawFd,
    off: u64,
    len: usize,
) -> Result<(Bound<'py, PyBytes>, usize), Failed> {
    let off = libc::off_t::try_from(off).map_err(|_| Failed::Other)?;
    // A bytes object whose contents the read overwrites, made without
    // pyo3's `PyBytes::new_with`, which zero-fills it first (a memset
    // of `len` bytes per read, for bytes the kernel then writes over).
    let size = pyo3::ffi::Py_ssize_t::try_from(len).map_err(|_| Failed::Other)?;
    // SAFETY: with a null pointer, PyBytes_FromStringAndSize allocates a
    // bytes object of `size` bytes (plus its trailing NUL) and returns a
    // new reference, or null with a Python error set; the GIL is held
    // (`py`).
    let raw = unsafe { pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size) };
    if raw.is_null() {
        drop(PyErr::take(py)); // (out of memory: the slow path reports it)
        return Err(Failed::Other);
    }
    // SAFETY: `raw` is a new, non-null reference to a bytes object,
    // which the Bound now owns.
    let bytes = unsafe { Bound::from_owned_ptr(py, raw).downcast_into_unchecked::<PyBytes>() };
    let iov = libc::iovec {
        // SAFETY: `raw` is a bytes object; its buffer holds `len`
        // bytes, not yet shared with anyone (the object is only ours).
        iov_base: unsafe { pyo3::ffi::PyBytes_AsString(raw) }.cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over the bytes object's `len`-byte buffer,
    // alive (owned by `bytes`) for the call; preadv2 writes at most
    // `iov_len` bytes into it.
    let n = unsafe { libc::preadv2(fd, &iov, 1, off, libc::RWF_NOWAIT) };
    Ok((bytes, usize::try_from(n).map_err(|_| failure())?))
}
