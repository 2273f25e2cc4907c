//! Inline reads on the batch engine (the auto read path): reads already in
//! the page cache are served on the calling thread; only the misses go to
//! the backend.
//!
//! A cached read is a `memcpy`, and which way is faster depends on how many
//! reads come together and how big they are (the measurements behind the
//! thresholds below are in `docs/benchmarks.md`, "Inline reads").
//!
//! One `io_uring_enter` per batch amortises the system call (a buffered read
//! of cached pages completes inline during submission), so batches win; a
//! read alone in its batch pays for the ring's bookkeeping and loses. So a buffered read
//! is served on the calling thread with `preadv2(RWF_NOWAIT)` — which copies
//! the data if all of it is cached and otherwise returns `EAGAIN` at once,
//! having started readahead — when its batch is small: fewer than 8
//! operations for reads under 64 KiB, fewer than 3 for larger ones. Reads
//! that come back complete are settled; the rest go to the backend
//! untouched, so results are exactly what the backend would have produced.
//!
//! A batch with a single read left is different: nothing can overlap it,
//! so the ring's round trip buys nothing and a blocking `preadv` on the
//! calling thread is what the `pread` loop costs — with no failed `NOWAIT`
//! try first when the data is cold. Such a read is performed with its
//! blocking system call whether its file is buffered or `O_DIRECT`
//! ([`run_inline_blocking`]), unless the engine was built with `sqpoll` or
//! `iopoll`, whose users asked for the ring's own submission or polled
//! completions.
//!
//! Not tried inline in bigger batches: direct I/O (a `NOWAIT` direct read still waits for the
//! device), including files opened with `O_DIRECT` outside [`DirectFile`]
//! (found with one `fcntl` per run of operations on the same descriptor),
//! writes and fsyncs, and descriptors whose filesystem refuses `RWF_NOWAIT`.
//!
//! [`DirectFile`]: crate::DirectFile

use std::io;
use std::os::fd::RawFd;

use crate::kind::OpKind;
use crate::op::action::Action;
use crate::op::Op;

/// How an engine performs reads of buffered (not `O_DIRECT`) files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadPath {
    /// Serve reads whose data is all in the page cache on the calling thread
    /// (`preadv2` with `RWF_NOWAIT`) when that is faster than the ring —
    /// reads in small batches (under 8 operations for reads under 64 KiB,
    /// under 3 for larger) — and send the rest to the backend. Costs one
    /// failed system call per such read on cold data. A read alone in its
    /// batch is performed with a blocking system call on the calling
    /// thread, cached or not, as a `pread` loop would.
    #[default]
    Auto,
    /// Submit every read to the backend (io_uring or the thread pool),
    /// never trying the page cache on the calling thread first.
    AlwaysSubmit,
}

/// Reads below this size are "small" (see the module docs).
const SMALL_READ: usize = 64 << 10;

/// Whether a cached read of `bytes` in a batch of `batch` operations is
/// faster inline than through the ring (measured: see the module docs).
fn inline_wins(batch: usize, bytes: usize) -> bool {
    if bytes < SMALL_READ {
        batch < 8
    } else {
        batch < 3
    }
}

/// Whether inline reads may be tried on a descriptor.
#[derive(Debug, Clone, Copy)]
struct FdVerdict {
    fd: RawFd,
    eligible: bool,
    /// Lookups answered from the cache since the last `fcntl`.
    uses: u32,
}

/// How many lookups a cached verdict answers before it is checked again.
const VERDICT_REUSE: u32 = 1024;

thread_local! {
    /// The last descriptor this thread asked about. A stale verdict (the
    /// number closed and reused, or `O_DIRECT` toggled with `F_SETFL`) can
    /// only cost speed, never change a result: an ineligible read goes to
    /// the backend, and an inline read of an `O_DIRECT` file is simply a
    /// synchronous read whose result (or error) is the same.
    static LAST_VERDICT: std::cell::Cell<Option<FdVerdict>> = const { std::cell::Cell::new(None) };
}

impl FdVerdict {
    /// Whether inline reads may be tried on `fd`: one `fcntl` per
    /// [`VERDICT_REUSE`] lookups of the same descriptor on this thread (a
    /// system call per lookup is a large part of a cached 4 KiB read).
    fn for_fd(fd: RawFd) -> FdVerdict {
        if let Some(mut v) = LAST_VERDICT.get() {
            if v.fd == fd && v.uses < VERDICT_REUSE {
                v.uses += 1;
                LAST_VERDICT.set(Some(v));
                return v;
            }
        }
        // SAFETY: F_GETFL only reads the descriptor's status flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        let v = FdVerdict {
            fd,
            eligible: flags >= 0 && flags & libc::O_DIRECT == 0,
            uses: 0,
        };
        LAST_VERDICT.set(Some(v));
        v
    }

    /// Remembers that `fd` refused `RWF_NOWAIT`.
    fn refuse(&mut self) {
        self.eligible = false;
        LAST_VERDICT.set(Some(*self));
    }
}

/// Tries the not yet settled buffered reads of `ops` chosen by the rules
/// above with `preadv2(RWF_NOWAIT)`; a read that returns all its bytes is
/// settled with that result. `pending` is how many operations are not yet
/// settled; returns how many are left for the backend.
pub(crate) fn serve_inline(
    ops: &mut [Op<'_>],
    results: &mut [io::Result<usize>],
    pending: usize,
) -> usize {
    let batch = pending;
    // Big batches go to the ring whatever their reads' sizes: skip the scan.
    if !inline_wins(batch, 0) {
        return pending;
    }
    let mut pending = 0;
    let mut verdict: Option<FdVerdict> = None;
    for (op, result) in ops.iter_mut().zip(results.iter_mut()) {
        if op.settled {
            continue;
        }
        let readable = reads_file_data(op.action.kind()) && op.direct.is_none() && {
            let bytes = op.byte_len();
            bytes > 0 && inline_wins(batch, bytes)
        };
        if readable {
            if verdict.as_ref().map_or(true, |v| v.fd != op.fd) {
                verdict = Some(FdVerdict::for_fd(op.fd));
            }
            let v = verdict.as_mut().expect("set above");
            if v.eligible {
                match try_inline(op) {
                    Ok(n) => {
                        *result = Ok(n);
                        op.settled = true;
                        continue;
                    }
                    Err(libc::EOPNOTSUPP) => v.refuse(),
                    Err(_) => {}
                }
            }
        }
        pending += 1;
    }
    pending
}

/// Performs the one unsettled operation of `ops` with its blocking system
/// call on this thread, if that operation is a read; says whether it did.
/// Its result is the one the backend would have given: the same system
/// call's count, or its error described by the same [`Op::result`].
pub(crate) fn run_inline_blocking(
    ops: &mut [Op<'_>],
    results: &mut [io::Result<usize>],
) -> InlineBlocking {
    let Some((op, result)) = ops
        .iter_mut()
        .zip(results.iter_mut())
        .find(|(op, _)| !op.settled)
    else {
        return InlineBlocking::NotARead;
    };
    if !reads_file_data(op.action.kind()) {
        return InlineBlocking::NotARead;
    }
    *result = op.run_checked();
    op.settled = true;
    InlineBlocking::Done
}

/// What [`run_inline_blocking`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InlineBlocking {
    /// The read was performed on this thread: its result is set and it is
    /// settled.
    Done,
    /// The unsettled operation is not a read (or there is none): nothing
    /// was done, the backend performs it.
    NotARead,
}

/// Whether an operation of `kind` reads a file's data into memory, the
/// only kind this module serves on the calling thread. Every kind is
/// named, so a new one is served inline only where it says so. The async
/// engine counts the reads of these kinds it hands to its driver.
pub(crate) fn reads_file_data(kind: OpKind) -> bool {
    use OpKind::*;
    match kind {
        Read | ReadVectored => true,
        Write | WriteVectored | Fsync | Fdatasync | Fallocate => false,
        Open | Stat | Close | Mkdir | Symlink | Ftruncate => false,
        Accept | Connect | Recv | Send | SendVectored | RecvSelect => false,
    }
}

/// The byte count if the whole read was served from the page cache, else
/// the errno (0 for a short read, which the backend redoes: it may be a
/// partly cached range or end of file).
///
/// Through rustix, which makes the system call itself: glibc's `preadv2`
/// is a cancellation point, and switching cancellation off and on around
/// it cost about 3 % of a cached 4 KiB read (`docs/benchmarks.md`, "The
/// async API's cached reads at their first poll").
///
/// Inlined where it is called (the async read's try at its first poll
/// makes the system call from its own frame); reads of several buffers
/// go through [`try_inline_segments`].
#[inline]
pub(crate) fn try_inline(op: &Op<'_>) -> Result<usize, i32> {
    if let Action::Read(read) = &op.action {
        // The common case straight from its arguments: one buffer, its
        // offset at hand, no walk over the kinds of operation.
        if read.len == 0 {
            return Err(0);
        }
        let one = libc::iovec {
            iov_base: read.buf.cast(),
            iov_len: read.len,
        };
        // SAFETY: the read's own buffer, which the operation borrows
        // mutably for its lifetime; the slice lasts only for the call.
        let buf = unsafe { io_slice(&one) };
        return whole(preadv2_nowait_at(op, read.offset, &mut [buf]), read.len);
    }
    try_inline_segments(op)
}

/// [`try_inline`] of any read but one of a single buffer: its segments
/// gathered first.
#[inline(never)]
fn try_inline_segments(op: &Op<'_>) -> Result<usize, i32> {
    let segments = op.action.segments();
    let iovs = segments.as_slice();
    let want = iovs.iter().map(|v| v.iov_len).sum::<usize>();
    if want == 0 {
        return Err(0);
    }
    // SAFETY: the iovecs describe buffers the operation borrows mutably for
    // its lifetime (a read's own buffer, or its `IoSliceMut`s), and the
    // slices made here last only for the synchronous call below.
    let slice = |v: &libc::iovec| unsafe { io_slice(v) };
    let offset = op.offset();
    let rc = match iovs {
        [one] => preadv2_nowait_at(op, offset, &mut [slice(one)]),
        many => preadv2_nowait_at(op, offset, &mut many.iter().map(slice).collect::<Vec<_>>()),
    };
    whole(rc, want)
}

/// The count of a read that returned all `want` bytes, else the errno (0
/// for a short read).
#[inline]
fn whole(rc: rustix::io::Result<usize>, want: usize) -> Result<usize, i32> {
    match rc {
        Ok(n) if n == want => Ok(n),
        Ok(_) => Err(0),
        Err(e) => Err(e.raw_os_error()),
    }
}

/// `preadv2(RWF_NOWAIT)` of `bufs` at the operation's descriptor and
/// `offset`.
#[inline]
fn preadv2_nowait_at(
    op: &Op<'_>,
    offset: u64,
    bufs: &mut [io::IoSliceMut<'_>],
) -> rustix::io::Result<usize> {
    // SAFETY: the operation keeps its descriptor open while it is performed.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(op.fd) };
    rustix::io::preadv2(fd, bufs, offset, rustix::io::ReadWriteFlags::NOWAIT)
}

/// The buffer `v` describes, as a slice for `preadv2`.
///
/// # Safety
/// `v` must describe memory valid for writes of `iov_len` bytes that
/// nothing else accesses while the slice lives.
unsafe fn io_slice<'a>(v: &libc::iovec) -> io::IoSliceMut<'a> {
    if v.iov_len == 0 {
        return io::IoSliceMut::new(&mut []);
    }
    // SAFETY: the caller's promise; the base is not null, as `iov_len` > 0.
    io::IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast(), v.iov_len) })
}
