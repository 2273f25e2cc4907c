//! Writes made inline: a file object's write to a regular file with no
//! entry of its write queue unfinished ([`crate::wqueue`]) made on the
//! calling thread, with one `pwritev2` and the GIL let go, when the
//! engine was asked for it (`Engine(inline_writes=True)`); else the write
//! goes to the engine. Through the engine a 4 KiB write (a buffered
//! file's flush) costs a submission, a completion on another thread and
//! a wake-up of the event loop, tens of µs; made inline, a few µs
//! (`docs/benchmarks.md`, "Small writes made inline").
//!
//! The cost is the built-in file's: the event loop's thread waits for
//! as long as the kernel holds the write, where it throttles writers
//! whose dirty pages the disk lags behind, where another writer of the
//! file holds its inode's lock, and for as long as the file system is
//! frozen (`fsfreeze`, a snapshot). So it is off by default: by default
//! the loop's thread never waits on a file system.
//!
//! How a file's writes are made inline is found at its first write
//! ([`Way`]): on ext2/3/4 and tmpfs with a plain `pwritev2`, once the
//! pages the write only partly covers are found in the page cache (a
//! write into a page not cached reads it first); never on any other file
//! system, nor on a file that is not a regular one. (`RWF_NOWAIT`, which
//! would refuse a write that waits, is no way: ext4 and tmpfs refuse the
//! flag for buffered writes, overlayfs too, and XFS answers every
//! buffered write with it `EAGAIN`, as the write would update the file's
//! times.) A write that took longer than [`SLOW`] sends the file's next
//! [`AFTER_WAIT`] writes to the engine.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rustix::io::ReadWriteFlags;

/// The longest write made inline: a flush of a buffer the size of the
/// built-in's default, or larger ones a program asked for, up to the
/// bytes the calls served without suspending may copy between two turns
/// of the event loop (see `inline_read::INLINE_PIECE`).
pub(crate) const INLINE_WRITE_MAX: usize = crate::turns::TURN_BYTES;

/// A plain write made inline that took longer than this (it waited in
/// the kernel, or the thread was preempted meanwhile, which a clock read
/// without a system call cannot tell apart) sends the next
/// [`AFTER_WAIT`] writes of its file to the engine.
pub(crate) const SLOW: Duration = Duration::from_millis(2);

/// See [`SLOW`].
pub(crate) const AFTER_WAIT: u32 = 64;

/// How a file's writes are made inline, found at its first write.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Way {
    /// Not found yet.
    Unknown = 0,
    /// A plain `pwritev2`, the pages partly covered being cached.
    Plain = 1,
    /// Never: not a regular file, or not on ext2/3/4 or tmpfs.
    Never = 2,
}

impl Way {
    fn from_u8(v: u8) -> Way {
        match v {
            1 => Way::Plain,
            2 => Way::Never,
            _ => Way::Unknown,
        }
    }
}

/// `statfs`'s `f_type` of ext2, ext3 and ext4.
const EXT_MAGIC: i64 = 0xEF53;
/// `statfs`'s `f_type` of tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The inline writes of one file object (one write queue): how they are
/// made, and how many writes are still sent to the engine after a
/// slow one.
#[derive(Default)]
pub(crate) struct InlineWrites {
    way: AtomicU8,
    skip: AtomicU32,
    /// The writes made inline so far.
    made: AtomicU64,
    /// Those of them that took longer than [`SLOW`].
    waited: AtomicU64,
}

impl InlineWrites {
    /// Writes `buf` at `off` of `fd` (at its end if `fd` is in append
    /// mode) on the calling thread if it can be (see the module's
    /// documentation), `fd` held open by the caller: the bytes written, all
    /// of them or a part (the rest stopped by a limit, `EFBIG` or
    /// `ENOSPC`, which the engine then meets and reports); `None` if
    /// nothing was written. An error is never reported from here: the
    /// write made again through the engine meets it and reports it as
    /// any write's.
    pub(crate) fn write(&self, fd: RawFd, buf: &[u8], off: u64) -> Option<usize> {
        if buf.is_empty() || buf.len() > INLINE_WRITE_MAX {
            return None;
        }
        if i64::try_from(off).is_err() {
            return None;
        }
        // (flags a program may change with fcntl between two writes: a
        // synchronous or direct write waits on the device)
        let flags = crate::fd_flags(fd);
        if flags == -1 || flags & (libc::O_DIRECT | libc::O_SYNC | libc::O_DSYNC) != 0 {
            return None;
        }
        if self.skip.load(Ordering::Relaxed) > 0 {
            self.skip.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: the descriptor stays open for the call: the caller
        // borrowed it from the file object that owns it, whose close waits
        // until it is given back (`Owned::borrow_fd`).
        let file = unsafe { BorrowedFd::borrow_raw(fd) };
        match self.way(file) {
            Way::Plain => {
                let append = flags & libc::O_APPEND != 0;
                if !edges_cached(file, off, buf.len(), append)? {
                    return None;
                }
                let began = Instant::now();
                let n = pwrite(file, buf, off, ReadWriteFlags::empty()).ok();
                if n.is_some() && began.elapsed() > SLOW {
                    self.skip.store(AFTER_WAIT, Ordering::Relaxed);
                    self.waited.fetch_add(1, Ordering::Relaxed);
                }
                self.made(n)
            }
            Way::Unknown | Way::Never => None,
        }
    }

    /// The writes made inline so far, and those of them that took longer
    /// than [`SLOW`]: for the tests that tell them from the engine's.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.made.load(Ordering::Relaxed),
            self.waited.load(Ordering::Relaxed),
        )
    }

    /// `n`, counted as a write made if it is one.
    fn made(&self, n: Option<usize>) -> Option<usize> {
        if n.is_some() {
            self.made.fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    /// How `file`'s writes are made inline, found at the first call.
    fn way(&self, file: BorrowedFd<'_>) -> Way {
        let known = Way::from_u8(self.way.load(Ordering::Relaxed));
        if known != Way::Unknown {
            return known;
        }
        let found = find_way(file);
        self.way.store(found as u8, Ordering::Relaxed);
        found
    }
}

/// How writes to `file` can be made inline (see [`Way`]).
fn find_way(file: BorrowedFd<'_>) -> Way {
    let regular = rustix::fs::fstat(file).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
    });
    if !regular {
        return Way::Never;
    }
    // (`f_type`'s type differs between architectures)
    #[allow(clippy::unnecessary_cast)]
    match rustix::fs::fstatfs(file) {
        Ok(fs) if matches!(fs.f_type as i64, EXT_MAGIC | TMPFS_MAGIC) => Way::Plain,
        _ => Way::Never,
    }
}

/// Whether the pages that a write of `len` bytes at `off` of `file` (at
/// its end if `append`) covers only in part, and that hold bytes of the
/// file, are in the page cache: the kernel reads such a page before it
/// writes into it. `None` if the file's size could not be had.
fn edges_cached(file: BorrowedFd<'_>, off: u64, len: usize, append: bool) -> Option<bool> {
    let page = rustix::param::page_size() as u64;
    let len = u64::try_from(len).ok()?;
    if !append && off % page == 0 && off.checked_add(len)? % page == 0 {
        return Some(true); // (whole pages: none is read)
    }
    let size = u64::try_from(rustix::fs::fstat(file).ok()?.st_size).ok()?;
    let start = if append { size } else { off };
    let end = start.checked_add(len)?;
    let first = start - start % page;
    let last = end - end % page;
    // (the first page holds bytes of the file before the write's own; the
    // last, past its end)
    let first_needed = start % page != 0 && first < size;
    let last_needed = end % page != 0 && end < size && (last != first || !first_needed);
    let cached = |at: u64| page_cached(file, at, page);
    Some((!first_needed || cached(first)) && (!last_needed || cached(last)))
}

/// Whether the page of `file` at `at` (`page` bytes) is in the page
/// cache: `cachestat` (Linux 6.5; allowed on a descriptor open for
/// writing), else a one-byte `preadv2(RWF_NOWAIT)`, which a descriptor
/// not open for reading refuses (the page then counts as not cached).
fn page_cached(file: BorrowedFd<'_>, at: u64, page: u64) -> bool {
    if let Some(n) = crate::cached::cached_pages(file.as_raw_fd(), at, page) {
        return n > 0;
    }
    let mut byte = [0u8];
    let mut iov = [IoSliceMut::new(&mut byte)];
    rustix::io::preadv2(file, &mut iov, at, ReadWriteFlags::NOWAIT).is_ok()
}

/// One `pwritev2` of `buf` at `off` of `file` with `flags`: the bytes
/// written (none counts as a failure), or the error.
fn pwrite(
    file: BorrowedFd<'_>,
    buf: &[u8],
    off: u64,
    flags: ReadWriteFlags,
) -> rustix::io::Result<usize> {
    match rustix::io::pwritev2(file, &[IoSlice::new(buf)], off, flags)? {
        0 => Err(rustix::io::Errno::NOSPC),
        n => Ok(n),
    }
}
