//! The future of one async operation, and the state it shares with the
//! driver.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use super::buf::IoBufMut;
use super::driven::Admission;
use super::request::{Cancel, Complete, Request};
use crate::error::Site;
use crate::op::Op;

/// What an operation's future resolves to: the result and the buffer (or
/// buffers) it was given, handed back whatever happened.
pub type BufResult<T, B> = (io::Result<T>, B);

/// An operation's completion target, shared by its future and the driver. It owns the
/// operation's memory — the buffer, the iovec array, a handle keeping the
/// file open — so that memory lives until the completion has been seen,
/// however early the future is dropped. Made when the operation is handed
/// to the driver (or a handle to it is asked for): until then the future
/// holds that memory itself, and a read served at its first poll never
/// allocates this.
pub(crate) struct OpTarget<B> {
    inner: Mutex<OpState<B>>,
    /// Kept until the completion has woken the task (a hold on tokio's
    /// paused clock; see [`Complete::hold`]). Locked inside `inner` only:
    /// apart from the state so that a future that never goes to the
    /// driver does not carry it.
    hold: Mutex<Option<Arc<dyn Send + Sync>>>,
    /// Set by [`OpFuture::detach`]: performed even with the future gone.
    detached: AtomicBool,
    /// Set when a cancel was asked of a pool driver (see
    /// [`Complete::ask_cancel`]).
    cancel_asked: AtomicBool,
    /// [`WAITING`], [`CLAIMED`] or [`WITHDRAWN`]: whether the driver has
    /// handed the operation to the kernel, or a [`Withdrawal`] has kept it
    /// from ever getting there. Whichever comes first wins.
    claim: AtomicU8,
}

/// Not yet handed to the kernel (nor to a pool thread).
const WAITING: u8 = 0;
/// Handed to the kernel, or running on a pool thread.
const CLAIMED: u8 = 1;
/// Withdrawn before that: never performed.
const WITHDRAWN: u8 = 2;

/// The result, the waker and the memory of one operation.
struct OpState<B> {
    result: Option<i32>,
    waker: Option<Waker>,
    /// Taken by the future when it resolves.
    buf: Option<B>,
    /// Kept only to stay alive until the completion.
    _iovecs: Vec<libc::iovec>,
    keep: Option<Arc<dyn Keep>>,
    /// The result is a new descriptor (accept) that nobody has taken yet:
    /// closed with this state if the future was dropped, so an accept
    /// cancelled too late leaks nothing.
    new_fd: bool,
}

impl<B> Drop for OpState<B> {
    #[inline]
    fn drop(&mut self) {
        if let (true, Some(fd)) = (self.new_fd, self.result.filter(|&r| r >= 0)) {
            // SAFETY: the kernel returned `fd` as a new descriptor for this
            // operation alone, and no future took it (`new_fd` is cleared
            // when one does), so it is ours to close, once.
            drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        }
    }
}

impl<B> OpState<B> {
    /// What is left in a future's own state once it has moved to the
    /// state shared with the driver: nothing.
    fn moved() -> OpState<B> {
        OpState {
            result: None,
            waker: None,
            buf: None,
            _iovecs: Vec::new(),
            keep: None,
            new_fd: false,
        }
    }

    /// Keeps `waker` unless the one stored already wakes the same task;
    /// returns the waker it replaced, for the caller to drop once the lock
    /// is let go (a waker's `Drop` is user code, which may call back into
    /// the engine or panic).
    #[must_use = "drop the replaced waker after the lock"]
    fn store_waker(&mut self, waker: &Waker) -> Option<Waker> {
        match &self.waker {
            Some(w) if w.will_wake(waker) => None,
            _ => self.waker.replace(waker.clone()),
        }
    }
}

// SAFETY: the iovecs only describe memory owned by `buf`, which is Send;
// they are never dereferenced by this type.
unsafe impl<B: Send> Send for OpState<B> {}

impl<B: Send> Complete for OpTarget<B> {
    fn detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    fn ask_cancel(&self) {
        self.cancel_asked.store(true, Ordering::Release);
    }

    fn cancel_asked(&self) -> bool {
        self.cancel_asked.load(Ordering::Acquire)
    }

    fn claim(&self) -> bool {
        match self
            .claim
            .compare_exchange(WAITING, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == CLAIMED,
        }
    }

    fn complete(&self, res: i32) {
        let (waker, hold) = {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.result = Some(res);
            let hold = self.hold.lock().unwrap_or_else(|e| e.into_inner()).take();
            (g.waker.take(), hold)
        };
        if let Some(w) = waker {
            w.wake();
        }
        // After the wake-up: the woken task is the runtime's work from
        // then on.
        drop(hold);
    }

    #[cfg(feature = "tokio")]
    fn hold(&self, hold: Arc<dyn Send + Sync>) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.result.is_none() {
            *self.hold.lock().unwrap_or_else(|e| e.into_inner()) = Some(hold);
        }
    }

    fn wake_waiters(&self) {
        let waker = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waker
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Withdraws an operation that the kernel has not taken yet; see
/// [`OpFuture::withdrawal`].
pub(crate) trait Withdraw: Send + Sync {
    /// Withdraws the operation unless the kernel has taken it; whether it
    /// is never performed.
    fn withdraw(&self) -> bool;
}

impl<B: Send> Withdraw for OpTarget<B> {
    fn withdraw(&self) -> bool {
        let waker = {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            match self.claim.compare_exchange(
                WAITING,
                WITHDRAWN,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Err(state) => return state == WITHDRAWN,
                // Completed unclaimed: refused by the driver (an engine
                // shutting down), never performed; its error stands.
                Ok(_) if g.result.is_some() => return true,
                Ok(_) => {}
            }
            g.result = Some(-libc::ECANCELED);
            g.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }
}

/// A handle that withdraws an operation before the kernel takes it, kept
/// apart from the operation's future (see [`OpFuture::withdrawal`]). It
/// does not keep the operation alive: a future dropped while this handle
/// lives is treated as any dropped future (an operation still queued is
/// skipped).
#[derive(Clone)]
pub struct Withdrawal(std::sync::Weak<dyn Withdraw>);

impl Withdrawal {
    /// Withdraws the operation if it is still waiting to be handed to the
    /// kernel (for room in the ring, or for a pool thread): it is then
    /// never performed, and its future resolves with `ECANCELED`
    /// ("Operation canceled"). Returns whether the operation is never
    /// performed: true once withdrawn (every later call too); false if the
    /// kernel (or a pool thread) took it first, and it completes (or has
    /// completed) as usual, and false once its future and the engine have
    /// both let go of it (dropped, it was skipped or performed, and which
    /// is no longer known).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::{AsyncEngine, AsyncFile};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::from_file(&engine, tempfile::tempfile()?);
    /// let write = file.write_at(vec![7u8; 4096], 0);
    /// let withdrawal = write.withdrawal();
    /// // Never handed to the driver: it is withdrawn, and never performed.
    /// assert!(withdrawal.withdraw());
    /// let (res, _buf) = futures::executor::block_on(write);
    /// assert_eq!(blockio::errno(&res.unwrap_err()), Some(libc::ECANCELED));
    /// # Ok(())
    /// # }
    /// ```
    pub fn withdraw(&self) -> bool {
        self.0.upgrade().is_some_and(|op| op.withdraw())
    }
}

impl std::fmt::Debug for Withdrawal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Withdrawal").finish_non_exhaustive()
    }
}

/// A read whose future was dropped while the kernel still had it: what it
/// received must not be lost (see `net`'s read side).
pub(crate) trait Abandoned: Send + Sync {
    /// Ready with the raw result once the kernel has completed the read,
    /// the bytes received appended to `into`; wakes `cx` then.
    fn poll_settled(&self, cx: &mut Context<'_>, into: &mut VecDeque<u8>) -> Poll<i32>;

    /// As [`poll_settled`](Self::poll_settled), the bytes received going
    /// to `out` first (as many as it has room for) and the rest appended
    /// to `rest` (empty when called): the raw result and how many bytes
    /// went to `out`.
    fn poll_settled_split(
        &self,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
        rest: &mut VecDeque<u8>,
    ) -> Poll<(i32, usize)> {
        let res = std::task::ready!(self.poll_settled(cx, rest));
        Poll::Ready((res, out.put_front(rest)))
    }
}

/// Where a read hands out the bytes it has: a slice filled from its
/// start ([`SliceOut`]), or with the `tokio` feature the unfilled part of
/// a tokio `ReadBuf`, written without being zeroed first (a large read
/// through tokio's traits would otherwise clear its whole buffer on
/// every call).
pub(crate) trait ReadOut {
    /// How many more bytes it takes.
    fn room(&self) -> usize;

    /// Appends `bytes`, which fit its room.
    fn put(&mut self, bytes: &[u8]);

    /// Its unfilled part (`room` bytes, maybe never initialised; for
    /// several buffers, the rest of the first one not yet full), for a
    /// system call to write into without zeroing it first.
    ///
    /// # Safety
    /// The caller writes no uninitialised byte into it.
    unsafe fn unfilled(&mut self) -> &mut [MaybeUninit<u8>];

    /// Counts the first `n` bytes of [`unfilled`](Self::unfilled) as
    /// filled.
    ///
    /// # Safety
    /// Those `n` bytes (at most its room) have been written.
    unsafe fn advance(&mut self, n: usize);

    /// Moves as many bytes from the front of `from` as it has room for;
    /// how many.
    fn put_front(&mut self, from: &mut VecDeque<u8>) -> usize {
        let n = from.len().min(self.room());
        let (a, b) = from.as_slices();
        let from_a = a.len().min(n);
        self.put(&a[..from_a]);
        self.put(&b[..n - from_a]);
        from.drain(..n);
        n
    }
}

/// A slice a read fills from its start.
pub(crate) struct SliceOut<'a> {
    buf: &'a mut [u8],
    filled: usize,
}

impl<'a> SliceOut<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> SliceOut<'a> {
        SliceOut { buf, filled: 0 }
    }
}

impl ReadOut for SliceOut<'_> {
    fn room(&self) -> usize {
        self.buf.len() - self.filled
    }

    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
    }

    unsafe fn unfilled(&mut self) -> &mut [MaybeUninit<u8>] {
        let rest = &mut self.buf[self.filled..];
        // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the caller
        // writes only initialised bytes, so the slice stays initialised.
        unsafe { std::slice::from_raw_parts_mut(rest.as_mut_ptr().cast(), rest.len()) }
    }

    unsafe fn advance(&mut self, n: usize) {
        self.filled += n;
    }
}

#[cfg(feature = "tokio")]
impl ReadOut for tokio::io::ReadBuf<'_> {
    fn room(&self) -> usize {
        self.remaining()
    }

    fn put(&mut self, bytes: &[u8]) {
        // Copies into the unfilled part, and counts the bytes as
        // initialised and filled, without touching the rest.
        self.put_slice(bytes);
    }

    unsafe fn unfilled(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: the caller writes no uninitialised byte into it, which
        // is what `unfilled_mut` asks.
        unsafe { self.unfilled_mut() }
    }

    unsafe fn advance(&mut self, n: usize) {
        // SAFETY: the caller wrote the first `n` unfilled bytes.
        unsafe { tokio::io::ReadBuf::assume_init(self, n) };
        tokio::io::ReadBuf::advance(self, n);
    }
}

impl<B: IoBufMut> Abandoned for OpTarget<B> {
    fn poll_settled(&self, cx: &mut Context<'_>, into: &mut VecDeque<u8>) -> Poll<i32> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(res) = g.result else {
            let replaced = g.store_waker(cx.waker());
            drop(g);
            drop(replaced);
            return Poll::Pending;
        };
        if let (Some(buf), Ok(n)) = (&g.buf, usize::try_from(res)) {
            // The kernel is done with the buffer (its result is in).
            into.extend(super::bytes_of(buf, n));
        }
        Poll::Ready(res)
    }

    fn poll_settled_split(
        &self,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
        rest: &mut VecDeque<u8>,
    ) -> Poll<(i32, usize)> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(res) = g.result else {
            let replaced = g.store_waker(cx.waker());
            drop(g);
            drop(replaced);
            return Poll::Pending;
        };
        let mut copied = 0;
        if let (Some(buf), Ok(n)) = (&g.buf, usize::try_from(res)) {
            // The kernel is done with the buffer (its result is in).
            let got = super::bytes_of(buf, n);
            let n = got.len();
            copied = n.min(out.room());
            out.put(&got[..copied]);
            // Only when some are left: extending by nothing still costs
            // the deque's bookkeeping, on every read that fits.
            if copied < n {
                rest.extend(&got[copied..]);
            }
        }
        Poll::Ready((res, copied))
    }
}

/// A dropped vectored read (its buffers in order), as a dropped read of
/// one buffer is (see [`OpFuture::kept_if_dropped_vectored`]).
struct VectoredDropped<B>(Arc<OpTarget<Vec<B>>>);

impl<B: IoBufMut> Abandoned for VectoredDropped<B> {
    fn poll_settled(&self, cx: &mut Context<'_>, into: &mut VecDeque<u8>) -> Poll<i32> {
        let mut g = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(res) = g.result else {
            let replaced = g.store_waker(cx.waker());
            drop(g);
            drop(replaced);
            return Poll::Pending;
        };
        if let (Some(bufs), Ok(mut n)) = (&g.buf, usize::try_from(res)) {
            // The kernel filled the buffers in order, `n` bytes in all.
            for buf in bufs {
                // The kernel is done with the buffers (the result is in).
                let got = super::bytes_of(buf, n);
                into.extend(got);
                n -= got.len();
            }
        }
        Poll::Ready(res)
    }
}

/// A way to perform an operation on the polling thread at its first poll,
/// when that is quick (see `file::inline`).
pub(crate) trait Inline: Send + Sync {
    /// Performs `op` now if it can be done without waiting: its raw result
    /// (a count; never an error, which the driver reports as it would), or
    /// `None` to hand it to the driver untouched.
    fn try_inline(&self, op: &Op<'_>) -> Option<i32>;
}

/// What keeps an operation's descriptor open until its completion (the
/// file's or socket's handle, held by the operation's state), and may
/// serve the operation on the polling thread: one reference for both, so
/// that a read served at its first poll takes and lets go of one count.
pub(crate) trait Keep: Send + Sync {
    /// How to try `op` on the polling thread at its first poll, before
    /// handing it to the driver, if at all (never for an operation
    /// [started](OpFuture::start), which is handed over at once).
    fn inline(&self, _op: &Op<'_>) -> Option<&dyn Inline> {
        None
    }

    /// Keeps `read`, a dropped read of this stream file (a pipe, FIFO or
    /// character device), for the next read to join; `armed` cancels it
    /// when dropped before it completed. False if the file keeps none.
    fn keep_dropped_read(&self, _read: Arc<dyn Abandoned>, _armed: Box<dyn Send>) -> bool {
        false
    }

    /// Where dropped reads of this file were kept, once one was: a read
    /// takes what they hold before it goes to the kernel.
    fn dropped_reads(&self) -> Option<&KeptReads> {
        None
    }
}

/// A stream file's dropped reads kept for its next reads (see
/// [`Keep::keep_dropped_read`]), and the reads waiting for them.
#[derive(Default)]
pub(crate) struct KeptReads {
    /// The dropped reads and what they left.
    pub(crate) side: crate::net::read_side::ReadSide,
    /// Every read waiting for them (`read_at(&self)` lets many wait at
    /// once): a kept read wakes one waker, this one, which wakes them
    /// all.
    joiners: Arc<Joiners>,
}

/// The wakers of the reads waiting for a file's kept dropped reads.
#[derive(Default)]
struct Joiners(Mutex<Vec<Waker>>);

impl std::task::Wake for Joiners {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for w in all {
            w.wake();
        }
    }
}

impl KeptReads {
    /// [`ReadSide::poll_settle`](crate::net::read_side::ReadSide::poll_settle)
    /// for one of maybe many reads waiting at once: `cx`'s waker is woken
    /// with every other waiter's when a kept read completes.
    fn poll_settle(
        &self,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
    ) -> Poll<crate::net::read_side::Settled> {
        {
            let mut g = self.joiners.0.lock().unwrap_or_else(|e| e.into_inner());
            if !g.iter().any(|w| w.will_wake(cx.waker())) {
                g.push(cx.waker().clone());
            }
        }
        let all = Waker::from(self.joiners.clone());
        let res = self.side.poll_settle(&mut Context::from_waker(&all), out);
        if res.is_ready() {
            let mut g = self.joiners.0.lock().unwrap_or_else(|e| e.into_inner());
            g.retain(|w| !w.will_wake(cx.waker()));
        }
        res
    }
}

/// Buffers a joined read fills in order (a vectored read's iovecs).
struct AreasOut<'a> {
    areas: Vec<&'a mut [u8]>,
    /// The buffer being filled, and how much of it is.
    at: usize,
    filled: usize,
    room: usize,
}

impl<'a> AreasOut<'a> {
    fn new(areas: Vec<&'a mut [u8]>) -> AreasOut<'a> {
        let room = areas.iter().map(|a| a.len()).sum();
        AreasOut {
            areas,
            at: 0,
            filled: 0,
            room,
        }
    }

    /// Moves on past full (or empty) buffers.
    fn skip_full(&mut self) {
        while self
            .areas
            .get(self.at)
            .is_some_and(|a| a.len() == self.filled)
        {
            self.at += 1;
            self.filled = 0;
        }
    }
}

impl ReadOut for AreasOut<'_> {
    fn room(&self) -> usize {
        self.room
    }

    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            self.skip_full();
            let area = &mut self.areas[self.at][self.filled..];
            let n = area.len().min(bytes.len());
            area[..n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            self.room -= n;
            bytes = &bytes[n..];
        }
    }

    unsafe fn unfilled(&mut self) -> &mut [MaybeUninit<u8>] {
        self.skip_full();
        let Some(area) = self.areas.get_mut(self.at) else {
            return &mut [];
        };
        let rest = &mut area[self.filled..];
        // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the caller
        // writes only initialised bytes, so the slice stays initialised.
        unsafe { std::slice::from_raw_parts_mut(rest.as_mut_ptr().cast(), rest.len()) }
    }

    unsafe fn advance(&mut self, n: usize) {
        self.filled += n;
        self.room -= n;
    }
}

/// Set once any file has kept a dropped read (see
/// [`Keep::keep_dropped_read`]): until then a read asks its file nothing
/// more (a program that never drops a pipe's read pays one load per read).
static DROPPED_READ_KEPT: AtomicBool = AtomicBool::new(false);

/// Notes that a file kept what a read took for its next read (see
/// [`DROPPED_READ_KEPT`]).
pub(crate) fn note_dropped_read_kept() {
    DROPPED_READ_KEPT.store(true, Ordering::Release);
}

/// Cancels a dropped read kept for the next read when it is let go before
/// its completion (the file went): nobody is left to take its bytes.
struct CancelOnDrop<B: Send + 'static> {
    engine: super::AsyncEngine,
    target: std::sync::Weak<OpTarget<B>>,
}

impl<B: Send + 'static> Drop for CancelOnDrop<B> {
    fn drop(&mut self) {
        let Some(target) = self.target.upgrade() else {
            return;
        };
        let pending = target
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .result
            .is_none();
        drop(target);
        if pending {
            let weak: std::sync::Weak<OpTarget<B>> = self.target.clone();
            self.engine.driver().cancel(Cancel(weak));
        }
    }
}

/// The iovecs of a vectored read; empty for any other operation.
fn iovecs<'a>(op: &'a Op<'_>) -> &'a [libc::iovec] {
    use crate::op::action::Action;
    match &op.action {
        Action::ReadVectored(v) if v.0.count > 0 => {
            // SAFETY: a vectored read's `iovecs` point to `count` live
            // iovecs, owned by its future, which outlives `op`'s borrow.
            unsafe { std::slice::from_raw_parts(v.0.iovecs, v.0.count) }
        }
        _ => &[],
    }
}

/// The bytes a read (plain or vectored) asks for; `None` for any other
/// operation.
fn read_len(op: &Op<'_>) -> Option<usize> {
    use crate::op::action::Action;
    match &op.action {
        Action::Read(r) => Some(r.len),
        Action::ReadVectored(_) => Some(iovecs(op).iter().map(|v| v.iov_len).sum()),
        _ => None,
    }
}

/// The memory a read (plain or vectored) reads into, in order, as
/// (address, length); empty for any other operation.
fn read_areas(op: &Op<'_>) -> Vec<(*mut u8, usize)> {
    use crate::op::action::Action;
    match &op.action {
        Action::Read(r) => vec![(r.buf, r.len)],
        _ => iovecs(op)
            .iter()
            .map(|v| (v.iov_base.cast(), v.iov_len))
            .collect(),
    }
}

/// Operations a thread may serve inline in a row, without any future on it
/// returning `Pending`, before the next one yields to the executor once: a
/// task reading cached data in a loop would otherwise never give its
/// thread to the others (nor to a `select!`'s other branches).
const INLINE_BUDGET: u32 = 128;

/// Bytes a thread may serve inline in a row, however few the operations,
/// before the next one yields to the executor once: 128 reads of 1 MiB
/// each kept a tokio worker in one poll for tens of milliseconds, and a
/// worker looks at its runtime's shutdown only once in 61 polls.
const INLINE_BYTE_BUDGET: usize = 1 << 20;

/// What one operation served inline weighs in a run at least: an
/// operation weighs the bytes it moved, or this if it moved fewer, so
/// that a run of [`INLINE_BYTE_BUDGET`] is [`INLINE_BUDGET`] operations
/// of this size or fewer, or 1 MiB of larger ones (whichever comes
/// first, give or take a run mixing both).
const INLINE_MIN_WEIGHT: usize = INLINE_BYTE_BUDGET / INLINE_BUDGET as usize;

thread_local! {
    /// The weight of the operations served inline on this thread since
    /// a future last returned `Pending` here (see [`INLINE_MIN_WEIGHT`]):
    /// one number, so that an operation checks and counts its turn with
    /// one load and one store.
    static INLINE_RUN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether this thread may serve one more operation inline now: false
/// (the task woken, to be polled again after the others) once it has
/// served [`INLINE_BUDGET`] in a row, or [`INLINE_BYTE_BUDGET`] bytes
/// (weighed as [`INLINE_MIN_WEIGHT`] says), the count starting again.
///
/// On tokio the yield goes through tokio's scheduler (as `yield_now`
/// does), which wakes the task only after its reactor and timers have
/// had their turn: a task that merely woke itself would run again before
/// the timers are looked at. The operation takes nothing from tokio's
/// task budget (`tokio::task::coop`): this count bounds a run as that
/// budget would (128 operations), and taking it cost a cached read 21
/// instructions of 376 (docs/benchmarks.md). What that leaves out: a
/// task whose budget tokio's own resources have spent still serves up to
/// a run of these before yielding.
#[inline]
pub(crate) fn inline_turn_left(cx: &mut Context<'_>) -> bool {
    if INLINE_RUN.get() < INLINE_BYTE_BUDGET {
        return true;
    }
    end_inline_run();
    yield_once(cx);
    false
}

/// Wakes the task to be polled again after the others: through tokio's
/// scheduler when there is one (after its reactor and timers), at once
/// otherwise.
#[cold]
fn yield_once(cx: &mut Context<'_>) {
    #[cfg(feature = "tokio")]
    {
        // The first poll of `yield_now` hands the waker to tokio's
        // scheduler (or wakes it at once outside a runtime) and is
        // pending.
        let yielding = std::pin::pin!(tokio::task::yield_now());
        let _ = yielding.poll(cx);
    }
    #[cfg(not(feature = "tokio"))]
    cx.waker().wake_by_ref();
}

/// Starts the count of operations served inline on this thread again: a
/// future on it returned `Pending`.
#[inline]
pub(crate) fn end_inline_run() {
    INLINE_RUN.set(0);
}

/// Counts one operation served inline on this thread, which moved
/// `bytes` (see [`inline_turn_left`]).
#[inline]
pub(crate) fn count_inline_turn(bytes: usize) {
    let weight = bytes.max(INLINE_MIN_WEIGHT);
    INLINE_RUN.set(INLINE_RUN.get().saturating_add(weight));
}

/// An operation whose result is wanted after its future was dropped: a
/// send, to report how many bytes went (see `net`'s write side).
pub(crate) trait Settles: Send + Sync {
    /// Ready with the raw result once the kernel has completed the
    /// operation; wakes `cx` then.
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<i32>;
}

impl<B: Send> Settles for OpTarget<B> {
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<i32> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match g.result {
            Some(res) => Poll::Ready(res),
            None => {
                let replaced = g.store_waker(cx.waker());
                drop(g);
                drop(replaced);
                Poll::Pending
            }
        }
    }
}

/// The shared state of an operation whose future resolved, held by
/// nothing else and emptied (no buffer, waker or hold on the descriptor):
/// kept by a stream for its next operation of the same kind (see
/// [`OpFuture::take_spent`]). Never cloned.
pub(crate) struct SpentTarget<B>(OnceLock<Arc<OpTarget<B>>>);

/// Makes a read's shared state the handle of a dropped read (see
/// [`OpFuture::kept_if_dropped`]).
type AsDropped<B> = fn(Arc<OpTarget<B>>) -> Arc<dyn Abandoned>;

/// An async operation. Submitted on its first poll (or by
/// [`OpFuture::start`]); resolves to its result and its buffer.
///
/// Dropping it at any time is safe, and cancels it: an operation still
/// queued for the kernel (waiting for room in the ring, or for a pool
/// thread) is never submitted; one already in flight keeps its buffer and
/// its file with the driver, which frees them (or returns the buffer to
/// its pool) when the kernel reports completion.
#[must_use = "futures do nothing unless polled"]
pub struct OpFuture<B: Send + 'static> {
    /// The engine, and where the operation asks whether it is driven.
    admission: Admission,
    /// The operation's state while this future alone holds it: its
    /// memory, and its result once served inline. Moved into `shared`
    /// when that is made, and left empty.
    local: Mutex<OpState<B>>,
    /// The state shared with the driver and with any handle to the
    /// operation, made when the operation is handed to the driver or a
    /// handle is asked for (a read served inline never needs it); from
    /// then on it holds the operation's state.
    shared: OnceLock<Arc<OpTarget<B>>>,
    /// Where the operation acts, for its errors once the operation itself
    /// has gone to the driver: noted as it goes (a read served at its
    /// first poll, whose result is a count, never needs it).
    site: Option<Site>,
    /// The operation, until it is submitted.
    op: Option<Op<'static>>,
    /// Why the operation was refused before submission.
    refused: Option<io::Error>,
    /// The task that submits the operation once its socket is ready, with
    /// tokio's clock paused (see `aio::paused_clock`): aborted if this
    /// future is dropped first.
    #[cfg(feature = "tokio")]
    gate: Option<super::paused_clock::Gate>,
    /// For a read of a file: its state as a dropped read, kept for the
    /// file's next read if the file is a stream (see
    /// [`kept_if_dropped`](Self::kept_if_dropped)).
    as_dropped: Option<AsDropped<B>>,
}

impl<B: Send + 'static> OpFuture<B> {
    /// An operation over memory owned by `buf` (and `iovecs`), on the
    /// engine of `admission` (a socket's own, or one made for a file's
    /// operation).
    ///
    /// # Safety
    /// `op` must point only into memory owned by `buf` or `iovecs` (or into
    /// nothing), valid as `Op::from_raw` requires; `keep` keeps the file
    /// descriptor open.
    #[inline]
    pub(crate) unsafe fn new(
        admission: Admission,
        op: Op<'static>,
        buf: B,
        iovecs: Vec<libc::iovec>,
        keep: Arc<dyn Keep>,
    ) -> OpFuture<B> {
        let new_fd = matches!(op.action, crate::op::action::Action::Accept(_));
        OpFuture {
            admission,
            local: Mutex::new(OpState {
                result: None,
                waker: None,
                buf: Some(buf),
                _iovecs: iovecs,
                keep: Some(keep),
                new_fd,
            }),
            shared: OnceLock::new(),
            site: None,
            op: Some(op),
            refused: None,
            #[cfg(feature = "tokio")]
            gate: None,
            as_dropped: None,
        }
    }

    /// An operation as [`new`](Self::new) makes it, in the shared state
    /// of `spent`, an operation of the same kind whose future resolved
    /// (see [`take_spent`](Self::take_spent)), instead of a new
    /// allocation: a stream receiving one message after another reuses
    /// one state. With `spent` `None`, [`new`](Self::new).
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    #[inline]
    pub(crate) unsafe fn new_reusing(
        spent: Option<SpentTarget<B>>,
        admission: Admission,
        op: Op<'static>,
        buf: B,
        iovecs: Vec<libc::iovec>,
        keep: Arc<dyn Keep>,
    ) -> OpFuture<B> {
        let state = OpState {
            result: None,
            waker: None,
            buf: Some(buf),
            _iovecs: iovecs,
            keep: Some(keep),
            new_fd: matches!(op.action, crate::op::action::Action::Accept(_)),
        };
        // Always unique: a spent target is made only from a unique one,
        // and never cloned; checked all the same, and not reused if not.
        let mut spent = spent.map(|SpentTarget(shared)| shared);
        let (local, shared) = if let Some(target) = spent
            .as_mut()
            .and_then(OnceLock::get_mut)
            .and_then(Arc::get_mut)
        {
            // Reset as `target` would have made it: the operation's state,
            // waiting, not detached, no hold.
            *target.inner.get_mut().unwrap_or_else(|e| e.into_inner()) = state;
            *target.hold.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
            *target.detached.get_mut() = false;
            *target.claim.get_mut() = WAITING;
            // The cell as it was, already set: setting a new one costs
            // a pass through its `Once`.
            (OpState::moved(), spent.unwrap_or_default())
        } else {
            (state, OnceLock::new())
        };
        // Built in one place, as `new` builds it (the future is large:
        // built and then changed, it was copied once more).
        OpFuture {
            admission,
            local: Mutex::new(local),
            shared,
            site: None,
            op: Some(op),
            refused: None,
            #[cfg(feature = "tokio")]
            gate: None,
            as_dropped: None,
        }
    }

    /// The state this future shared with the driver, for the next
    /// operation of the same kind to reuse
    /// ([`new_reusing`](Self::new_reusing)): `Some` only once the future
    /// has resolved (its result and buffer taken) and nothing else holds
    /// that state, neither strongly nor weakly (no request or completion
    /// in the driver, no cancel naming it, no withdrawal or read-side
    /// handle). The kernel then has no part in it: it holds neither the
    /// buffer, gone with the result, nor the descriptor, and a new
    /// operation started in it is a new request, in a new slot of the
    /// ring. The future is left without shared state; dropped, it does
    /// nothing more.
    pub(crate) fn take_spent(&mut self) -> Option<SpentTarget<B>> {
        let shared = self.shared.get_mut()?;
        let target = Arc::get_mut(shared)?;
        let g = target.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        if g.result.is_none() || g.buf.is_some() || g.new_fd {
            return None;
        }
        // Kept, it holds neither the socket open (its `keep`) nor the
        // task's waker; the rest is overwritten when it is reused.
        drop(g.waker.take());
        drop(g.keep.take());
        Some(SpentTarget(std::mem::take(&mut self.shared)))
    }

    /// The state shared with the driver, made at the first call: the
    /// operation's state moves there from the future's own. An operation
    /// served inline before that is claimed, as the driver would have.
    fn target(&self) -> &Arc<OpTarget<B>> {
        self.shared.get_or_init(|| {
            let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            let state = std::mem::replace(&mut *local, OpState::moved());
            let claim = if state.result.is_some() {
                CLAIMED
            } else {
                WAITING
            };
            Arc::new(OpTarget {
                inner: Mutex::new(state),
                hold: Mutex::new(None),
                detached: AtomicBool::new(false),
                cancel_asked: AtomicBool::new(false),
                claim: AtomicU8::new(claim),
            })
        })
    }

    /// Runs `f` on the operation's state, wherever it is: the future's own
    /// until the shared state is made, then that one.
    fn with_state<R>(&mut self, f: impl FnOnce(&mut OpState<B>) -> R) -> R {
        match self.shared.get() {
            Some(shared) => f(&mut shared.inner.lock().unwrap_or_else(|e| e.into_inner())),
            None => f(self.local.get_mut().unwrap_or_else(|e| e.into_inner())),
        }
    }

    /// Tries the operation on this thread, at a poll before it has been
    /// handed to the driver, if its [`Keep::inline`] offers a way: its raw
    /// result if it was performed. Yields
    /// once instead (waking the task, the operation kept for the next
    /// poll, which tries again) when this thread's run of operations served
    /// in a row is spent: 128 of them, or 1 MiB (weighed as
    /// [`inline_turn_left`] says).
    ///
    /// Inlined into the poll, with the case of an operation whose shared
    /// state was already made (a handle to it was asked for) apart: a
    /// read served here then costs the poll no more than this.
    #[inline]
    fn poll_inline(&mut self, cx: &mut Context<'_>) -> Poll<Option<i32>> {
        if self.shared.get().is_some() {
            return self.poll_inline_shared(cx);
        }
        let Some(op) = &self.op else {
            return Poll::Ready(None);
        };
        // The future's own state holds the keep until the shared state is
        // made: a reference to it, no count taken.
        let keep = self
            .local
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .keep
            .as_deref();
        let Some(inline) = keep.and_then(|keep| keep.inline(op)) else {
            return Poll::Ready(None);
        };
        if op.precheck().is_some() {
            return Poll::Ready(None);
        }
        if !inline_turn_left(cx) {
            return Poll::Pending;
        }
        let res = inline.try_inline(op);
        if let Some(res) = res {
            self.served_inline(res);
        }
        Poll::Ready(res)
    }

    /// [`poll_inline`](Self::poll_inline) for an operation whose shared
    /// state exists: the keep is there, and the operation is claimed
    /// first, as the driver would, since a handle exists that may
    /// withdraw it (only the shared state gives one out): a withdrawal
    /// that comes later must report the operation as performed; one that
    /// came first wins.
    #[cold]
    #[inline(never)]
    fn poll_inline_shared(&mut self, cx: &mut Context<'_>) -> Poll<Option<i32>> {
        let (Some(op), Some(shared)) = (&self.op, self.shared.get()) else {
            return Poll::Ready(None);
        };
        let keep = shared
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keep
            .clone();
        let Some(inline) = keep.as_deref().and_then(|keep| keep.inline(op)) else {
            return Poll::Ready(None);
        };
        if op.precheck().is_some() {
            return Poll::Ready(None);
        }
        if !inline_turn_left(cx) {
            return Poll::Pending;
        }
        if !shared.claim() {
            return Poll::Ready(None);
        }
        let res = inline.try_inline(op);
        if let Some(res) = res {
            self.served_inline(res);
        } else {
            // Not performed: back to waiting, for the driver to claim.
            shared.claim.store(WAITING, Ordering::Release);
        }
        Poll::Ready(res)
    }

    /// Notes an operation served by [`poll_inline`](Self::poll_inline):
    /// never to be handed to the driver.
    #[inline]
    fn served_inline(&mut self, res: i32) {
        count_inline_turn(usize::try_from(res).unwrap_or(0));
        self.op = None;
        self.admission.engine().count_inline();
    }

    /// Submits the operation now instead of at the first poll, so that
    /// several can be in flight before any is awaited (read-ahead). The
    /// future must still be kept until it resolves: dropped, it cancels
    /// the operation if that has not reached the kernel yet.
    ///
    /// On a caller-driven engine whose driving task is gone, starting
    /// refuses the operation as its first poll would (see
    /// [`Driving::Caller`](super::Driving::Caller)): the future then
    /// resolves with the error.
    ///
    /// A read of a pipe, FIFO or character device whose file still keeps
    /// a dropped read (see
    /// [`AsyncFile::read_at`](super::AsyncFile::read_at)) is not
    /// submitted here: its first poll takes what that read took, and
    /// submits it only if that was nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    ///
    /// // Two reads in flight before either is awaited.
    /// let mut first = file.read_at(vec![0u8; 5], 0);
    /// let mut second = file.read_at(vec![0u8; 7], 7);
    /// first.start();
    /// second.start();
    /// let ((a, head), (b, tail)) = futures::join!(first, second);
    /// assert_eq!(&head[..a?], b"hello");
    /// assert_eq!(&tail[..b?], b"blockio");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn start(&mut self) {
        if self.joins_dropped() {
            // Its first poll takes what they hold first, then submits.
            return;
        }
        self.admit();
        self.resume();
    }

    /// Marks this read of a file to be kept, if dropped before its bytes
    /// were taken, for the file's next read when the file is a stream (a
    /// pipe, FIFO or character device): the bytes it takes are not lost.
    #[inline]
    pub(crate) fn kept_if_dropped(&mut self)
    where
        B: IoBufMut,
    {
        self.as_dropped = Some(|target| target);
    }

    /// Whether this operation is a read, not yet submitted, that must
    /// first join the reads of its file that dropped futures left (see
    /// [`kept_if_dropped`](Self::kept_if_dropped)).
    #[inline]
    pub(crate) fn joins_dropped(&mut self) -> bool {
        if !DROPPED_READ_KEPT.load(Ordering::Acquire) || self.op.is_none() {
            return false;
        }
        let kept = self.with_state(|g| {
            g.keep
                .as_ref()
                .and_then(|k| k.dropped_reads())
                .is_some_and(|kept| !kept.side.socket_is_next())
        });
        // A read of no bytes takes none: it goes on (to the kernel, which
        // returns 0 at once).
        kept && self.op.as_ref().and_then(read_len).is_some_and(|n| n > 0)
    }

    /// Takes into this read's buffer what reads of its file that dropped
    /// futures left, once they completed: ready with the read's result
    /// if they held bytes (or an error, or the end of the stream), with
    /// `None` if they held nothing (the read goes on to the kernel).
    #[cold]
    #[inline(never)]
    pub(crate) fn poll_join(&mut self, cx: &mut Context<'_>) -> Poll<Option<BufResult<usize, B>>> {
        let keep = self.with_state(|g| g.keep.clone());
        let (Some(kept), Some(op)) = (keep.as_deref().and_then(|k| k.dropped_reads()), &self.op)
        else {
            return Poll::Ready(None);
        };
        let areas = read_areas(op)
            .into_iter()
            // An empty buffer takes no bytes, and its pointer promises
            // nothing (`IoBuf::stable_ptr` is its first byte, and it has
            // none: it may be null or dangling), so it makes no slice.
            .filter(|&(_, len)| len > 0)
            // SAFETY: each area left has at least one byte, so its pointer
            // is its buffer's first byte (`IoBufMut::stable_mut_ptr`):
            // non-null, and valid for writes of `len` initialised bytes
            // the read's future owns, which nothing else uses (the read
            // was not submitted); the areas do not overlap (distinct
            // buffers of the future).
            .map(|(ptr, len)| unsafe { std::slice::from_raw_parts_mut(ptr, len) })
            .collect();
        let mut out = AreasOut::new(areas);
        let res = match std::task::ready!(kept.poll_settle(cx, &mut out)) {
            crate::net::read_side::Settled::Receive => return Poll::Ready(None),
            crate::net::read_side::Settled::Copied(n) => Ok(n),
            crate::net::read_side::Settled::Failed(errno) => {
                Err(io::Error::from_raw_os_error(errno))
            }
        };
        // Never submitted: nothing of it is left for the driver.
        self.op = None;
        let buf = self.with_state(|g| {
            g.result = Some(0);
            g.buf.take()
        });
        Poll::Ready(Some((res, buf.expect("OpFuture polled after it resolved"))))
    }

    /// Submits the operation now, without [`admit`](Self::admit): for
    /// work already accepted (the bytes a socket's write side queued, a
    /// file's write-behind, the rest of a short send), which goes on from
    /// whichever thread moves it along and is never refused half-way.
    pub(crate) fn resume(&mut self) {
        let Some(req) = self.take_request() else {
            return;
        };
        #[cfg(feature = "tokio")]
        let fd = req.op.fd;
        #[cfg(feature = "tokio")]
        let req = match super::paused_clock::hold_clock(self.admission.engine(), req, fd) {
            Ok(req) => req,
            Err(gate) => {
                self.gate = Some(gate);
                return;
            }
        };
        self.admission.engine().driver().submit([req]);
    }

    /// Where an operation asks whether its engine is driven
    /// ([`Admission::admit`]): at every start and every poll. A
    /// caller-driven engine whose `drive_on_tokio` task is gone gets a
    /// new one on this task's runtime; where that cannot be, an operation
    /// that has not reached the kernel is refused with the error saying
    /// why, and one already there waits (the relay thread completes it).
    /// Asking at every poll is what has a waiting task, woken when the
    /// last driving task went, have the engine driven again.
    fn admit(&mut self) {
        if let Err(e) = self.admission.admit() {
            if self.op.take().is_some() {
                self.refused = Some(e);
            }
        }
    }

    /// Takes the request out for a submission of several at once (a
    /// batch's), once [admitted](Self::admit) as [`start`](Self::start)
    /// would: `None` if already submitted, or refused before submission.
    pub(crate) fn start_request(&mut self) -> Option<Request> {
        self.admit();
        self.take_request()
    }

    /// Takes the request out for submission (None if already submitted or
    /// refused before submission).
    fn take_request(&mut self) -> Option<Request> {
        let op = self.op.take()?;
        if let Some(err) = op.precheck() {
            self.refused = Some(err);
            return None;
        }
        self.site = Some(op.site());
        if crate::engine::inline::reads_file_data(op.kind()) {
            self.admission.engine().count_read_to_driver();
        }
        Some(Request {
            op,
            done: self.target().clone(),
        })
    }

    /// A handle to this operation's state that outlives the future, to
    /// collect what a dropped read received.
    pub(crate) fn abandoned_handle(&self) -> Arc<dyn Abandoned>
    where
        B: IoBufMut,
    {
        self.target().clone()
    }

    /// A handle to this operation's result that outlives the future, once
    /// it has been handed to the driver (`None` before that, or when it
    /// was refused): every operation handed over completes, cancelled or
    /// not.
    pub(crate) fn settle_handle(&self) -> Option<Arc<dyn Settles>>
    where
        B: Send + 'static,
    {
        if self.op.is_some() || self.refused.is_some() {
            return None;
        }
        Some(self.target().clone())
    }

    /// A handle that can withdraw this operation for as long as it waits
    /// to be handed to the kernel, from wherever the future itself cannot
    /// be reached (it is inside another future, or being awaited). A
    /// caller that has given up on the operation but must know whether it
    /// may still act (a write whose bytes the caller's position must
    /// follow) withdraws it: if that fails, the kernel has it, and the
    /// caller waits for its result. Dropping the future instead would
    /// leave that unknown.
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::{AsyncEngine, AsyncFile};
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::from_file(&engine, tempfile::tempfile()?);
    /// let mut write = file.write_at(vec![7u8; 4096], 0);
    /// let withdrawal = write.withdrawal();
    /// write.start();
    /// let (result, _buf) = if withdrawal.withdraw() {
    ///     // Never performed: the write resolves with ECANCELED.
    ///     let (r, buf) = futures::executor::block_on(write);
    ///     assert_eq!(blockio::errno(r.as_ref().unwrap_err()), Some(libc::ECANCELED));
    ///     (r, buf)
    /// } else {
    ///     // The kernel has it: it completes as usual.
    ///     futures::executor::block_on(write)
    /// };
    /// assert!(matches!(result, Ok(4096)) || file.file().metadata()?.len() == 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn withdrawal(&self) -> Withdrawal {
        let weak: std::sync::Weak<OpTarget<B>> = Arc::downgrade(self.target());
        Withdrawal(weak)
    }

    /// Drops the future but has the operation performed all the same,
    /// even if it is still waiting for room in the ring or for a pool
    /// thread (a dropped future's operation is otherwise skipped there).
    /// For operations that complete on their own (file I/O): one whose
    /// target may wait forever is still cancelled, as by dropping.
    pub(crate) fn detach(self) {
        // Without shared state the operation never reached the driver,
        // and is dropped with the future as it would have been.
        if let Some(shared) = self.shared.get() {
            shared.detached.store(true, Ordering::Release);
        }
    }

    /// Registers the waker of the task that will await this operation.
    pub(crate) fn set_waker(&self, waker: &Waker) {
        let mut g = self
            .target()
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let replaced = g.store_waker(waker);
        drop(g);
        drop(replaced);
    }
}

// Never pinned structurally: the memory the kernel is given does not move
// with the buffer value (the contract of `IoBuf`, on which `new` already
// relies as it moves the buffer after the operation was built), so the
// future may move whatever `B` is, its buffer with it until submission.
impl<B: Send + 'static> Unpin for OpFuture<B> {}

impl<B: Send + 'static> Future for OpFuture<B> {
    type Output = BufResult<usize, B>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.joins_dropped() {
            match this.poll_join(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(out)) => return Poll::Ready(out),
                Poll::Ready(None) => {}
            }
        }
        this.admit();
        if this.op.is_some() {
            match this.poll_inline(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(res)) => return Poll::Ready(this.served(res)),
                Poll::Ready(None) => {}
            }
        }
        this.poll_driven(cx)
    }
}

impl<B: Send + 'static> OpFuture<B> {
    /// The output of an operation [served inline](Self::poll_inline)
    /// with the raw result `res`: recorded in its state (a withdrawal
    /// asked for later finds it performed), its buffer handed back.
    #[inline]
    fn served(&mut self, res: i32) -> BufResult<usize, B> {
        let buf = self.with_state(|g| {
            g.result = Some(res);
            g.buf.take()
        });
        let buf = buf.expect("OpFuture polled after it resolved");
        (Ok(served_count(res)), buf)
    }

    /// The rest of a poll of an operation not served inline: handed to
    /// the driver if it has not been, then its result if the driver has
    /// one. Apart from the poll, so that a read served inline does not
    /// pay for this part's frame.
    #[inline(never)]
    fn poll_driven(&mut self, cx: &mut Context<'_>) -> Poll<BufResult<usize, B>> {
        if self.op.is_some() {
            // The waker first, so that a completion racing the submission
            // finds it.
            self.set_waker(cx.waker());
            self.resume();
        }
        let refused = self.refused.take();
        let site = self.site;
        let (ready, replaced) = self.with_state(|g| {
            if let Some(err) = refused {
                let buf = g.buf.take().expect("OpFuture polled after it resolved");
                return (Some((Err(err), buf)), None);
            }
            match g.result {
                Some(res) => {
                    let buf = g.buf.take().expect("OpFuture polled after it resolved");
                    g.new_fd = false;
                    (Some((outcome(site, res), buf)), None)
                }
                None => (None, g.store_waker(cx.waker())),
            }
        });
        // After the lock: a waker's `Drop` is user code.
        drop(replaced);
        match ready {
            Some(out) => Poll::Ready(out),
            None => {
                end_inline_run();
                Poll::Pending
            }
        }
    }
}

impl<B: Send + 'static> Drop for OpFuture<B> {
    /// An operation still in the kernel whose target may wait forever (a
    /// socket, pipe, FIFO, terminal or other character device) is
    /// cancelled there: nobody is left to make it complete, and it would
    /// hold its place in the engine's in-flight limit for good. Its memory
    /// stays with the driver until the completion. An operation on a
    /// regular file or a block device finishes on its own (a dropped write
    /// still lands).
    #[inline]
    fn drop(&mut self) {
        if self.op.is_some() || self.refused.is_some() {
            return;
        }
        // Nothing else to do for an operation that never reached the
        // driver and never waited for its socket (a read served inline):
        // the rest apart, so that such a drop is these checks alone.
        #[cfg(feature = "tokio")]
        let waited = self.gate.is_some();
        #[cfg(not(feature = "tokio"))]
        let waited = false;
        if waited || self.shared.get().is_some() {
            self.drop_handed_over();
        }
    }
}

impl<B: Send + 'static> OpFuture<B> {
    /// [`Drop`] of an operation that went to the driver (or waits for its
    /// socket to go there).
    #[cold]
    #[inline(never)]
    fn drop_handed_over(&mut self) {
        #[cfg(feature = "tokio")]
        if let Some(gate) = self.gate.take() {
            // Not submitted yet: never will be (it completes with
            // `ECANCELED`). Submitted: the cancel below finds it.
            gate.cancel();
        }
        // Without shared state the operation never reached the driver
        // (served inline): nothing to cancel.
        let Some(shared) = self.shared.get() else {
            return;
        };
        // Without a site it never went to the driver either: the site is
        // noted as the request is taken out (`take_request`), the only
        // way this state reaches a driver. The state may exist all the
        // same (a reused receive's, a withdrawal's, or made by the poll
        // that stored the waker) for an operation refused before
        // submission, whose refusal the poll took: nothing to cancel.
        let Some(site) = self.site else {
            return;
        };
        let (pending, untaken) = {
            let g = shared.inner.lock().unwrap_or_else(|e| e.into_inner());
            (g.result.is_none(), g.buf.is_some())
        };
        // A kept read is cancelled all the same (its place in the
        // in-flight limit, or its pool thread, is not held for good); the
        // next read waits for the cancel's outcome and hands out what the
        // read took before it landed.
        let kept = untaken && self.keep_dropped(site);
        if pending && (kept || site.kind.is_socket() || may_wait_forever(site.fd)) {
            let weak: std::sync::Weak<OpTarget<B>> = Arc::downgrade(shared);
            #[cfg(test)]
            tests::CANCELS_POSTED.with(|n| n.set(n.get() + 1));
            self.admission.engine().driver().cancel(Cancel(weak));
        }
    }
}

impl<B: Send + 'static> OpFuture<B> {
    /// Hands this dropped read, handed to the driver and its bytes not
    /// taken, to its file for the next read, if it is a read of a stream
    /// file that keeps dropped reads: whether it was kept (its buffer
    /// with it, until it completes; the caller cancels it all the same,
    /// and the next read waits for the outcome).
    fn keep_dropped(&self, site: Site) -> bool {
        let (Some(as_dropped), Some(shared)) = (self.as_dropped, self.shared.get()) else {
            return false;
        };
        if !may_wait_forever(site.fd) {
            return false;
        }
        let keep = shared
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keep
            .clone();
        let Some(keep) = keep else {
            return false;
        };
        let armed = CancelOnDrop {
            engine: self.admission.engine().clone(),
            target: Arc::downgrade(shared),
        };
        let kept = keep.keep_dropped_read(as_dropped(shared.clone()), Box::new(armed));
        if kept {
            DROPPED_READ_KEPT.store(true, Ordering::Release);
        }
        kept
    }
}

impl<E: IoBufMut> OpFuture<Vec<E>> {
    /// [`kept_if_dropped`](Self::kept_if_dropped) for a vectored read:
    /// kept, its buffers hand out what it took, in order.
    #[inline]
    pub(crate) fn kept_if_dropped_vectored(&mut self) {
        self.as_dropped = Some(|target| Arc::new(VectoredDropped(target)));
    }
}

/// The count of an operation served inline ([`Inline::try_inline`] never
/// returns an error).
#[inline]
fn served_count(res: i32) -> usize {
    debug_assert!(res >= 0, "an inline result is a count");
    res.max(0) as usize
}

/// The result of an operation whose raw result is `res`: an error names
/// the operation's site, noted when it went to the driver.
///
/// The rule that keeps every error named: a result reaches the future
/// only from the driver (a completion, or the cancellation of a
/// withdrawn operation), and every operation goes to the driver through
/// `take_request`, which notes the site first; a read served inline
/// returns its count without coming here, and an operation refused
/// before submission carries its own error. An error without a site
/// would break that rule: debug builds stop there, release builds give
/// the bare errno.
fn outcome(site: Option<Site>, res: i32) -> io::Result<usize> {
    debug_assert!(
        site.is_some() || res >= 0,
        "an operation's error ({res}) without the site noted as it went to the driver"
    );
    match site {
        Some(site) => site.result(res),
        None if res >= 0 => Ok(res as usize),
        None => Err(io::Error::from_raw_os_error(-res)),
    }
}

/// Whether an operation on `fd` may wait forever: anything but a regular
/// file, a directory or a block device (or a number `fstat` refuses, such
/// as the current directory's `AT_FDCWD` of a path operation: opening a
/// FIFO waits for its writer). Cancelling costs one submission entry, so
/// the doubtful cases are cancelled.
pub(crate) fn may_wait_forever(fd: std::os::fd::RawFd) -> bool {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one `stat` through a live pointer; any number
    // is allowed (a closed one fails with EBADF).
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return true;
    }
    // SAFETY: fstat succeeded, so it filled the struct.
    let mode = unsafe { st.assume_init() }.st_mode & libc::S_IFMT;
    !matches!(mode, libc::S_IFREG | libc::S_IFDIR | libc::S_IFBLK)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use crate::aio::{AsyncEngine, AsyncFile};

    thread_local! {
        /// Cancels this thread's dropped futures posted to their driver.
        pub(super) static CANCELS_POSTED: Cell<u64> = const { Cell::new(0) };
    }

    /// An operation refused before submission (its offset out of range)
    /// resolves with the refusal, and dropped, posts no cancel: its
    /// shared state was made (by the poll that stored the waker) but the
    /// request never went to the driver.
    #[test]
    fn a_refused_operation_posts_no_cancel() {
        let engine = AsyncEngine::new().unwrap();
        let file = AsyncFile::from_file(&engine, tempfile::tempfile().unwrap());
        let mut read = file.read_at(vec![0u8; 16], u64::MAX);
        let (res, buf) = futures::executor::block_on(&mut read);
        let err = res.unwrap_err();
        assert!(err.to_string().contains("offset"), "{err}");
        assert_eq!(buf.len(), 16);
        let before = CANCELS_POSTED.with(Cell::get);
        drop(read);
        assert_eq!(
            CANCELS_POSTED.with(Cell::get),
            before,
            "a cancel was posted"
        );
    }
}

/// The memory logic of dropped reads, without system calls (in
/// `scripts/miri`): where a kept read's bytes are copied from and to, and
/// the wakers of the reads waiting for it.
#[cfg(test)]
mod memory_tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Wake, Waker};

    use super::{
        Abandoned, AreasOut, Complete, KeptReads, OpState, OpTarget, ReadOut, SliceOut,
        VectoredDropped, CLAIMED,
    };
    use crate::aio::test_bufs::NullWhenEmpty;
    use crate::aio::IoBufMut;
    use crate::net::read_side::Settled;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count::default());
        (c.clone(), Waker::from(c))
    }

    /// The shared state of a read handed to the kernel with `buf`, which
    /// has written `data` into it (as the kernel would) but not completed.
    fn read_of<B: IoBufMut>(mut buf: B, data: &[u8]) -> Arc<OpTarget<B>> {
        assert!(data.len() <= buf.bytes_len());
        if !data.is_empty() {
            // SAFETY: `data` fits the buffer's writable bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), buf.stable_mut_ptr(), data.len())
            };
        }
        target(buf)
    }

    /// The shared state of an operation handed to the kernel with `buf`,
    /// not completed.
    fn target<B>(buf: B) -> Arc<OpTarget<B>> {
        Arc::new(OpTarget {
            inner: Mutex::new(OpState {
                result: None,
                waker: None,
                buf: Some(buf),
                _iovecs: Vec::new(),
                keep: None,
                new_fd: false,
            }),
            hold: Mutex::new(None),
            detached: AtomicBool::new(false),
            cancel_asked: AtomicBool::new(false),
            claim: AtomicU8::new(CLAIMED),
        })
    }

    /// A slice out takes bytes from its start, moves them from the front
    /// of a deque (across its two halves) and counts what was written
    /// into its unfilled part.
    #[test]
    fn a_slice_out_fills_from_its_start() {
        let mut buf = [0u8; 8];
        let mut out = SliceOut::new(&mut buf);
        out.put(b"ab");
        let mut from: VecDeque<u8> = VecDeque::with_capacity(4);
        from.extend(b"xxcd");
        from.drain(..2);
        from.extend(b"ef");
        assert_eq!(out.put_front(&mut from), 4);
        assert!(from.is_empty());
        // SAFETY: only initialised bytes are written.
        let rest = unsafe { out.unfilled() };
        assert_eq!(rest.len(), 2);
        rest[0].write(b'g');
        // SAFETY: one byte was written.
        unsafe { out.advance(1) };
        assert_eq!(out.room(), 1);
        assert_eq!(&buf, b"abcdefg\0");
    }

    /// Areas out fill their buffers in order, skipping empty ones, and
    /// leave what does not fit in the deque.
    #[test]
    fn areas_out_fill_their_buffers_in_order() {
        let (mut a, mut b, mut c) = ([0u8; 2], [0u8; 0], [0u8; 3]);
        let mut out = AreasOut::new(vec![&mut a[..], &mut b[..], &mut c[..]]);
        assert_eq!(out.room(), 5);
        out.put(b"x");
        let mut from: VecDeque<u8> = b"yzw".iter().copied().collect();
        assert_eq!(out.put_front(&mut from), 3);
        // SAFETY: only initialised bytes are written.
        let rest = unsafe { out.unfilled() };
        assert_eq!(rest.len(), 1);
        rest[0].write(b'v');
        // SAFETY: one byte was written.
        unsafe { out.advance(1) };
        assert_eq!(out.room(), 0);
        // SAFETY: nothing is written.
        assert!(unsafe { out.unfilled() }.is_empty());
        let mut more: VecDeque<u8> = b"left".iter().copied().collect();
        assert_eq!(out.put_front(&mut more), 0);
        assert_eq!(more.len(), 4);
        drop(out);
        assert_eq!((&a, &c), (b"xy", b"zwv"));
    }

    /// A dropped read's bytes are taken once it completes, as many as its
    /// result says: into the deque, or to the out first and the rest to
    /// the deque; a read of an empty buffer (its pointer null) or with an
    /// error takes none.
    #[test]
    fn a_dropped_reads_bytes_are_taken_once_it_completes() {
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let read = read_of(vec![0u8; 8], b"hello");
        let mut into = VecDeque::new();
        assert!(read.poll_settled(&mut cx, &mut into).is_pending());
        read.complete(5);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "completion wakes");
        assert_eq!(read.poll_settled(&mut cx, &mut into), Poll::Ready(5));
        assert_eq!(into, b"hello");

        let read = read_of(vec![0u8; 8], b"hello");
        read.complete(5);
        let mut buf = [0u8; 2];
        let mut out = SliceOut::new(&mut buf);
        let mut rest = VecDeque::new();
        let got = read.poll_settled_split(&mut cx, &mut out, &mut rest);
        assert_eq!(got, Poll::Ready((5, 2)));
        assert_eq!((&buf, rest), (b"he", b"llo".iter().copied().collect()));

        for res in [0, -libc::ECANCELED] {
            let read = read_of(NullWhenEmpty(Vec::new()), b"");
            read.complete(res);
            let mut into = VecDeque::new();
            assert_eq!(read.poll_settled(&mut cx, &mut into), Poll::Ready(res));
            assert!(into.is_empty());
            let mut buf = [0u8; 2];
            let mut out = SliceOut::new(&mut buf);
            let got = read.poll_settled_split(&mut cx, &mut out, &mut into);
            assert_eq!(got, Poll::Ready((res, 0)));
        }
    }

    /// A dropped vectored read hands out what it took from its buffers in
    /// order, as many bytes as its result, skipping an empty buffer whose
    /// pointer is null.
    #[test]
    fn a_dropped_vectored_read_hands_out_its_buffers_in_order() {
        let (_count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let bufs = vec![
            NullWhenEmpty(b"ab".to_vec()),
            NullWhenEmpty(Vec::new()),
            NullWhenEmpty(b"cdef".to_vec()),
        ];
        let read = VectoredDropped(target(bufs));
        let mut into = VecDeque::new();
        assert!(read.poll_settled(&mut cx, &mut into).is_pending());
        read.0.complete(5);
        assert_eq!(read.poll_settled(&mut cx, &mut into), Poll::Ready(5));
        assert_eq!(into, b"abcde");
        let read = VectoredDropped(target(vec![NullWhenEmpty(Vec::new())]));
        read.0.complete(0);
        let mut into = VecDeque::new();
        assert_eq!(read.poll_settled(&mut cx, &mut into), Poll::Ready(0));
        assert!(into.is_empty());
    }

    /// Every read waiting for a file's kept read is woken when it
    /// completes (they share one waker that wakes them all); the first to
    /// look takes its bytes, the other finds nothing kept.
    #[test]
    fn every_read_waiting_for_a_kept_read_is_woken() {
        let kept = KeptReads::default();
        let read = read_of(vec![0u8; 4], b"kept");
        kept.side.detach(read.clone(), None);
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        for (waker, buf) in [(&first_waker, &mut a), (&second_waker, &mut b)] {
            let mut out = SliceOut::new(buf);
            let polled = kept.poll_settle(&mut Context::from_waker(waker), &mut out);
            assert!(polled.is_pending());
        }
        read.complete(4);
        assert_eq!(first.0.load(Ordering::SeqCst), 1);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        let mut out = SliceOut::new(&mut a);
        let polled = kept.poll_settle(&mut Context::from_waker(&first_waker), &mut out);
        assert!(matches!(polled, Poll::Ready(Settled::Copied(4))));
        let mut out = SliceOut::new(&mut b);
        let polled = kept.poll_settle(&mut Context::from_waker(&second_waker), &mut out);
        assert!(matches!(polled, Poll::Ready(Settled::Receive)));
        assert_eq!(&a[..4], b"kept");
    }
}
