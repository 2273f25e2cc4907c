//! Inline reads on the async engine: reads of cached data served on the
//! polling thread.
//!
//! A read whose data is all in the page cache is a `memcpy`; sending it
//! through the driver adds a queue, a wake-up and a completion to it (and
//! a thread hop on the thread pool). So the first poll of a read of a
//! buffered regular file tries `preadv2(RWF_NOWAIT)` — as the batch engine's
//! [`ReadPath::Auto`] does for reads in small batches — which copies the
//! data if all of it is cached and otherwise returns `EAGAIN` without
//! waiting for the read itself: it starts readahead first, may sleep while
//! submitting it (milliseconds on a busy disk), and now and then that
//! readahead brings the page in time to serve the try after all. Only a
//! read that comes back complete is
//! settled so; a short read (a range partly cached, or end of file) and
//! any error go to the driver untouched, which performs the read as it
//! would have: results are the driver's.
//!
//! Where it pays is measured per profile (`docs/benchmarks.md`, "The
//! async API's cached reads at their first poll"): on cached
//! data every try succeeds; on cold data every try is one more system call
//! before the same submission. So each file keeps a back-off: after a
//! failed try the next reads of that file go straight to the driver, one
//! more for every failure in a row (doubling, up to [`MAX_SKIP`]); a served
//! read ends it. Cold random reads pay about one failed try per
//! [`MAX_SKIP`] reads, and data that becomes cached is found again within
//! as many.
//!
//! Not tried: `O_DIRECT` files (a `NOWAIT` direct read still waits for the
//! device), anything but regular files (a pipe or a device may block or
//! consume data), files whose filesystem refuses `RWF_NOWAIT`, and engines
//! built with [`ReadPath::AlwaysSubmit`].
//!
//! [`ReadPath::Auto`]: crate::ReadPath::Auto
//! [`ReadPath::AlwaysSubmit`]: crate::ReadPath::AlwaysSubmit

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::aio::op::Inline;
use crate::engine::inline::try_inline;
use crate::op::Op;

/// Reads to send to the driver, at most, after failed tries in a row.
const MAX_SKIP: u32 = 64;

/// Whether the file has not been looked at yet ([`InlineReads::eligible`]).
const UNKNOWN: u8 = 0;
/// A buffered regular file: reads are tried inline.
const TRY: u8 = 1;
/// Never tried: not a regular file, `O_DIRECT`, or `RWF_NOWAIT` refused.
const NEVER: u8 = 2;

/// One file's state for inline reads, shared by its operations. Races
/// between threads updating it cost only speed: every read served inline
/// returned all its bytes, and every other read goes to the driver.
#[derive(Debug)]
pub(super) struct InlineReads {
    /// [`UNKNOWN`], [`TRY`] or [`NEVER`].
    state: AtomicU8,
    /// Failed tries in a row.
    misses: AtomicU32,
    /// Reads still to send to the driver untried.
    skip: AtomicU32,
}

impl InlineReads {
    /// The state of a file on an engine that tries inline reads (`enabled`)
    /// or never does; `direct` files are never tried.
    pub(super) fn new(enabled: bool, direct: bool) -> InlineReads {
        InlineReads {
            state: AtomicU8::new(if enabled && !direct { UNKNOWN } else { NEVER }),
            misses: AtomicU32::new(0),
            skip: AtomicU32::new(0),
        }
    }

    /// Whether reads of `fd` may be tried inline: looked up once per file
    /// (one `fstat` and one `fcntl`, at its first read), since a file
    /// opened with `O_DIRECT` outside [`AsyncOpenOptions::direct`] or a
    /// FIFO must not be.
    ///
    /// [`AsyncOpenOptions::direct`]: super::AsyncOpenOptions::direct
    fn eligible(&self, fd: RawFd) -> bool {
        match self.state.load(Ordering::Relaxed) {
            TRY => true,
            NEVER => false,
            _ => {
                let ok = buffered_regular(fd);
                self.state
                    .store(if ok { TRY } else { NEVER }, Ordering::Relaxed);
                ok
            }
        }
    }

    /// Counts a failed try and sets how many reads skip the next one.
    fn missed(&self) {
        let misses = self.misses.load(Ordering::Relaxed).saturating_add(1);
        self.misses.store(misses, Ordering::Relaxed);
        let skip = 1u32
            .checked_shl(misses.min(31))
            .unwrap_or(u32::MAX)
            .min(MAX_SKIP)
            - 1;
        self.skip.store(skip, Ordering::Relaxed);
    }
}

impl InlineReads {
    /// A stream's read of cached data on the polling thread (see
    /// `stream.rs`): `preadv2(RWF_NOWAIT)` of up to `buf.len()` bytes at
    /// `offset` of `fd`, under the same eligibility and back-off as
    /// [`Inline::try_inline`]. Unlike a positional read, a short count is
    /// served (a stream's read may return fewer bytes than asked; the bytes
    /// are the file's), and so is 0 bytes, the end of the file as it is
    /// now (a `NOWAIT` read of data not cached fails with `EAGAIN`
    /// instead); `None` (nothing written to `buf`) for a file never tried,
    /// a read skipped by the back-off, and any error, which the driver's
    /// read reports.
    pub(super) fn try_stream(
        &self,
        fd: RawFd,
        buf: &mut [std::mem::MaybeUninit<u8>],
        offset: u64,
    ) -> Option<usize> {
        if buf.is_empty() {
            return None;
        }
        self.attempt(fd, false, || {
            // SAFETY: the stream's file keeps `fd` open for the call.
            let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            // SAFETY: `buf` is memory this thread borrows mutably for the
            // call; the kernel only writes bytes into it (never reads it),
            // and the caller counts as filled only the `n` bytes reported
            // written.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len()) };
            rustix::io::preadv2(
                bfd,
                &mut [std::io::IoSliceMut::new(bytes)],
                offset,
                rustix::io::ReadWriteFlags::NOWAIT,
            )
            .map_err(|e| e.raw_os_error())
        })
    }

    /// Makes `read` (a `preadv2(RWF_NOWAIT)` of `fd`, giving its count or
    /// its errno) under the eligibility and back-off every inline read
    /// shares: `None` for a file never tried and a read the back-off
    /// skips; after the call, a served read ends a run of misses, and
    /// `EOPNOTSUPP` stops the tries for good. A failed read counts as a
    /// miss (lengthening the back-off) if it is `EAGAIN`, or if
    /// `any_error_misses`. Inlined: a cached read's first poll runs it.
    #[inline]
    fn attempt(
        &self,
        fd: RawFd,
        any_error_misses: bool,
        read: impl FnOnce() -> Result<usize, i32>,
    ) -> Option<usize> {
        if !self.eligible(fd) {
            return None;
        }
        // Plain load and store: a read lost to a race tries once more or
        // once less, nothing else.
        let skip = self.skip.load(Ordering::Relaxed);
        if skip > 0 {
            self.skip.store(skip - 1, Ordering::Relaxed);
            return None;
        }
        match read() {
            Ok(n) => {
                if self.misses.load(Ordering::Relaxed) != 0 {
                    self.misses.store(0, Ordering::Relaxed);
                }
                Some(n)
            }
            Err(libc::EOPNOTSUPP) => {
                self.state.store(NEVER, Ordering::Relaxed);
                None
            }
            Err(errno) => {
                if any_error_misses || errno == libc::EAGAIN {
                    self.missed();
                }
                None
            }
        }
    }
}

impl Inline for InlineReads {
    fn try_inline(&self, op: &Op<'_>) -> Option<i32> {
        // `try_inline` serves a read of at most `i32::MAX` bytes only
        // whole, as the kernel caps one read there.
        let n = self.attempt(op.fd, true, || try_inline(op))?;
        i32::try_from(n).ok()
    }
}

/// Whether `fd` is a regular file opened without `O_DIRECT`. With libc,
/// as the rest of the crate's descriptor checks (`may_wait_forever`, the
/// batch engine's `FdVerdict`).
fn buffered_regular(fd: RawFd) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one `stat` through a live pointer; the
    // descriptor is kept open by the operation's file handle.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so it filled the struct.
    if unsafe { st.assume_init() }.st_mode & libc::S_IFMT != libc::S_IFREG {
        return false;
    }
    // SAFETY: F_GETFL only reads the descriptor's status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT == 0
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::op::action::{Action, ReadArgs};

    /// Failed tries in a row lengthen the back-off, doubling, to
    /// [`MAX_SKIP`] reads and no further, so that cold random reads pay one
    /// failed try per [`MAX_SKIP`] reads.
    #[test]
    fn failed_tries_in_a_row_back_off_to_the_longest_skip() {
        let reads = InlineReads::new(true, false);
        let mut skips = Vec::new();
        for _ in 0..16 {
            reads.missed();
            skips.push(reads.skip.load(Ordering::Relaxed));
        }
        assert_eq!(&skips[..4], &[1, 3, 7, 15]);
        for (k, &skip) in skips.iter().enumerate() {
            let want = (1u32 << (k + 1)).min(MAX_SKIP) - 1;
            assert_eq!(skip, want, "after {} misses in a row: {skips:?}", k + 1);
        }
        assert_eq!(skips[15], MAX_SKIP - 1, "{skips:?}");
    }

    /// A file whose tries kept missing (cold data, the longest back-off)
    /// is tried again once its data is cached, within [`MAX_SKIP`] reads,
    /// and every read after that first one served is served inline: the
    /// back-off never turns into a verdict that the file is cold.
    #[test]
    fn a_file_backed_off_to_the_longest_skip_is_served_inline_again_once_cached() {
        // On the checkout's filesystem, as the integration tests' files
        // (`CARGO_TARGET_TMPDIR`): `/tmp` may be a tmpfs, which older
        // kernels do not let `RWF_NOWAIT` read.
        let mut file = tempfile::tempfile_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        file.write_all(&[7u8; 8192]).unwrap();
        let reads = InlineReads::new(true, false);
        for _ in 0..32 {
            reads.missed();
        }
        let mut buf = vec![0u8; 4096];
        let read = |buf: &mut Vec<u8>| {
            let args = ReadArgs {
                buf: buf.as_mut_ptr(),
                len: buf.len(),
                offset: 4096,
            };
            // SAFETY: the buffer outlives the operation, which is only
            // tried here, on this thread; the file stays open meanwhile.
            let op = unsafe { Op::from_action(file.as_raw_fd(), Action::Read(args), None) };
            reads.try_inline(&op)
        };
        // The file was just written: its pages are in the page cache.
        let mut untried = 0;
        let served = loop {
            match read(&mut buf) {
                Some(n) => break n,
                None => untried += 1,
            }
            assert!(
                untried < MAX_SKIP,
                "{untried} reads of a cached file in a row were not served inline"
            );
        };
        assert_eq!(served, 4096);
        assert_eq!(reads.state.load(Ordering::Relaxed), TRY);
        assert_eq!(
            untried,
            MAX_SKIP - 1,
            "the reads skipped by the longest back-off"
        );
        assert!(buf.iter().all(|&b| b == 7));
        for i in 0..8 {
            assert_eq!(
                read(&mut buf),
                Some(4096),
                "read {i} after the first served"
            );
        }
    }

    /// A stream's try serves a short count (the file ends inside the
    /// buffer) and 0 bytes at the end, each as the file is at that call:
    /// bytes appended after a 0 are served by the next try.
    #[test]
    fn a_stream_try_serves_a_short_count_and_the_end_as_the_file_is_now() {
        let mut file = tempfile::tempfile_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        file.write_all(&[7u8; 8192]).unwrap();
        let reads = InlineReads::new(true, false);
        let fd = file.as_raw_fd();
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 16384];
        assert_eq!(reads.try_stream(fd, &mut buf, 0), Some(8192));
        assert_eq!(reads.try_stream(fd, &mut buf, 8192), Some(0));
        file.write_all(&[9u8; 100]).unwrap();
        assert_eq!(reads.try_stream(fd, &mut buf, 8192), Some(100));
        // SAFETY: `try_stream` wrote these 100 bytes.
        let got: Vec<u8> = buf[..100]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        assert_eq!(got, vec![9u8; 100]);
        assert_eq!(
            reads.try_stream(fd, &mut buf[..0], 0),
            None,
            "an empty buffer"
        );
        let never = InlineReads::new(false, false);
        assert_eq!(
            never.try_stream(fd, &mut buf, 0),
            None,
            "an engine that never tries"
        );
    }
}
