//! `WriteQueue`: a file object's writes and truncations, in the order
//! they were made, kept in the core and carried out by it. A write is
//! placed here, with its offset, by the call that makes it, before that
//! call first yields to its event loop; the entry placed behind another
//! is begun by the core itself when the one ahead completes, on whichever
//! thread reports the completion (the engine's driver or pool thread, or
//! a file-system thread), and so is the rest of a write the kernel took
//! only a part of. So every entry placed reaches the file in order even if
//! no Python code runs again for it: its event loop closed, its task
//! cancelled, its file object collected.
//!
//! The calls of a binary file that a write may wait behind are placed
//! too, or done at once, so that such a write is placed at once as well,
//! at the offset the built-in file would use: `truncate` is an entry, an
//! `ftruncate` run on the engine's file-system threads in its turn
//! ([`WriteQueue::truncate`]); a `seek` is arithmetic on the position the
//! placed writes leave, done by the call (from the end: the size the file
//! will have once the entries are done, [`WriteQueue::size_after`]); a
//! `tell` is a [`Mark`], an entry answered with the position once the
//! entries ahead are done ([`WriteQueue::mark`]); a `flush` is a write. In
//! append mode, a position that depends on the end is the end at the
//! time: a mark that takes the file's size when the chain reaches it,
//! looked up on a file-system thread (and, for a `tell` behind a `seek` from the end not answered yet, a
//! mark relative to that one's answer; for a `truncate()` there, a
//! truncation relative to it). A read is not an entry: how far it moves the
//! position depends on the file's size when it runs, so a write made
//! behind a read waits for it in Python (`blockio._calls`), and is lost
//! if its loop is closed first (`close()` then says so).
//!
//! Who owns what: the chain of entries ([`Chain`]: the one in flight, the
//! ones behind it, the failures no call has taken) is behind one mutex,
//! taken by one thread at a time to advance
//! the chain ([`Writes::kick`]), and briefly by Python calls placing an
//! entry, waiting for the chain to empty or taking back a write. Each
//! entry's result is a [`Slot`] (its own mutex) shared with the batch
//! its call awaits through the engine ([`crate::inflight::InFlight`]), which hands
//! the result to the caller's loop as any batch's. Locks nest only as:
//! chain then slot (the runner finishing an entry); chain then the
//! file-system pool's queue mutex (the runner submitting a truncation's
//! `ftruncate` or a mark's `statx`, [`PoolHandle::submit`], which may start a pool thread
//! there) and chain then that job's own slot mutex (the runner polling its
//! [`JobFuture`]): a pool thread takes its queue's mutex and then the
//! job's slot one at a time, and wakes the chain's runner with neither
//! held; the engine's batch table then slot, or then chain (a batch
//! polled); never the other way. [`WriteQueue::size_after`] makes its
//! `statx` with the chain's lock held (see there).
//! A failure is reported by the call that placed the entry once it takes
//! the result ([`WriteQueue::claim`]); one no call took (its event loop
//! closed) is reported by the file's next call ([`WriteQueue::take_error`]).
//! The writes behind a failed write are refused, not made, with its
//! errno: their offsets were planned after bytes that never landed; so
//! are the entries behind a failed truncation that a `seek` from the end
//! planned on (a size never set). What does not depend on those bytes is
//! made or answered as the built-in's ([`Chain::behind`]): a truncation
//! to an explicit size is made, a `tell` is answered with where the bytes
//! stopped, a `truncate()` cuts there. The entries behind a failed
//! truncation no such seek planned on are made, as the built-in file's
//! writes after its failed `truncate`.
//! A `seek` from the position or the end placed behind unfinished entries
//! is a rebasing [`Mark`]: met behind a write that stopped short, it makes
//! the chain whole again, answered with the built-in's position (the
//! planned one less what never landed), and the entries from it on are
//! made that much lower ([`Chain::shift`]), where the built-in's are; a
//! target then before the start fails, as the built-in's seek there, and
//! the chain stays broken ([`before_start`]).

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use blockio::aio::{AsyncFile, IoBuf, OpFuture, Slice, Withdrawal};
use blockio::{PathAt, RawTarget};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::fsjobs::{FsCall, JobFuture, Out, PoolHandle};
use crate::inline_write::InlineWrites;
use crate::lent::Lent;
use crate::*;

/// A binary file object's write queue (see the module's documentation).
#[pyclass(frozen, module = "blockio._blockio")]
pub(crate) struct WriteQueue {
    writes: Arc<Writes>,
}

/// The chain and what tells its runner to look at it again.
struct Writes {
    chain: Mutex<Chain>,
    /// Requests to advance the chain since its runner last looked: the
    /// thread that raises it from 0 runs [`Writes::advance`] until no
    /// request came meanwhile; the others return at once.
    pokes: AtomicUsize,
    /// How the file's writes are made on the calling thread, when the
    /// chain is empty ([`WriteQueue::write_now`]).
    inline: InlineWrites,
}

/// The writes (and truncations) of one file not finished yet.
#[derive(Default)]
struct Chain {
    /// The write the engine has.
    running: Option<Running>,
    /// The truncation a file-system thread has (never with `running`).
    cutting: Option<Cutting>,
    /// The mark of the end a file-system thread looks up (never with
    /// `running` nor `cutting`).
    sizing: Option<Sizing>,
    /// The entries behind it, in the order they were placed.
    queued: VecDeque<Entry>,
    /// What waits for the chain to be empty ([`Idle`]).
    idle: Vec<Waker>,
    /// Writes taken back ([`WriteQueue::withdraw`]) whose `ECANCELED`
    /// may still come: not failures.
    withdrawn: Vec<u64>,
    /// Writes that failed or ended short, or were refused because of
    /// one that did, until their call takes the result
    /// ([`WriteQueue::claim`]); else reported by [`WriteQueue::take_error`].
    failed: Vec<Failure>,
    /// The entry that failed or ended short (its token and what it
    /// left) while its call has not taken its result nor a takeover the
    /// queue's failures: a write placed meanwhile would land at an offset
    /// planned after bytes that never landed (or a file cut that was
    /// not), so it is refused ([`WriteQueue::start`]).
    broken: Option<(u64, Stop)>,
    /// While `broken` by a write: the bytes planned since the offset where
    /// its bytes stopped that never landed (the rest of it, and the writes
    /// refused behind it). A position planned past them is that much
    /// further than the built-in file's: a `tell` ([`Mark`]) or a
    /// `truncate()` at the position placed behind reports (or cuts at)
    /// the planned one less this.
    lost: u64,
    /// The writes submitted to the engine so far (each part of a write
    /// the kernel cut short counted once), for the tests that tell the
    /// writes made inline from these ([`WriteQueue::write_counts`]).
    submitted: u64,
    /// A write made inline is in progress ([`WriteQueue::write_now`]),
    /// the GIL let go: the entries placed meanwhile wait behind it.
    inline: bool,
    /// The last [`Mark`] of the end answered (its token and value), for
    /// the marks placed relative to it and for a call that took the queue
    /// over from the one that placed it, whose loop was closed.
    marked: Option<(u64, u64)>,
    /// How far the positions the caller plans (and places entries at) are
    /// past the built-in file's, since a rebasing mark met a write that
    /// stopped short ([`Chain::rebase`]), less what the caller has moved
    /// its position back since ([`WriteQueue::rebased`]), until it sets
    /// the position from the start (a write or `tell` placed after that,
    /// or queued behind the mark): the entries placed meanwhile that
    /// follow are moved back by this much ([`Chain::shifted`]).
    shift: u64,
    /// The size a truncation kept behind a write that stopped short set
    /// (an explicit size, or the position moved back by what never
    /// landed): the file's end from there on, whatever the writes refused
    /// behind it planned, for a rebasing [`Mark`] of a `seek` from the end
    /// ([`Chain::rebase`]). None once the chain is whole again.
    cut_since: Option<u64>,
}

/// Where a failed entry left the file, for the entries behind it, and
/// the errno of its failure: the one the refused entries raise (the
/// built-in file's next write, at the offset where the bytes stopped,
/// meets the same limit: `EFBIG`, `ENOSPC`).
#[derive(Clone, Copy)]
enum Stop {
    /// A write's bytes stopped at this offset.
    Write { at: u64, errno: i32 },
    /// A truncation to this size failed.
    Cut { len: u64, errno: i32 },
}

impl Stop {
    fn errno(self) -> i32 {
        match self {
            Stop::Write { errno, .. } | Stop::Cut { errno, .. } => errno,
        }
    }

    /// Where the position stays: the offset a write's bytes stopped at, or
    /// the size a failed truncation did not set.
    fn at(self) -> u64 {
        match self {
            Stop::Write { at, .. } => at,
            Stop::Cut { len, .. } => len,
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Write { at, .. } => write!(f, "the write before it failed at offset {at}"),
            Stop::Cut { len, .. } => write!(f, "the truncate to {len} bytes before it failed"),
        }
    }
}

/// An entry of the chain placed, not yet begun. (Writes are nearly all
/// of them, and a queue holds few: a write kept whole, not boxed, costs no
/// allocation of its own; a truncation carries the size of one.)
#[allow(clippy::large_enum_variant)]
enum Entry {
    Write(Placed),
    Cut(Cut),
    Mark(Mark),
}

impl Entry {
    fn token(&self) -> u64 {
        match self {
            Entry::Write(p) => p.token,
            Entry::Cut(c) => c.token,
            Entry::Mark(m) => m.token,
        }
    }

    fn slot(self) -> Arc<Slot> {
        match self {
            Entry::Write(p) => p.slot,
            Entry::Cut(c) => c.slot,
            Entry::Mark(m) => m.slot,
        }
    }

    /// What the entry would have done, for its refusal's message.
    fn describe(&self) -> String {
        match self {
            Entry::Write(p) => format!(
                "a write of {} bytes at offset {} on fd {}",
                p.buf.bytes_len(),
                p.at,
                p.fd
            ),
            Entry::Cut(c) => format!("a truncate of fd {} to {} bytes", c.fd, c.len),
            Entry::Mark(m) => format!("a tell of fd {}", m.fd),
        }
    }
}

/// A position taken in the chain's order, by a `tell` (or a `seek` from
/// the end, a `truncate()` at the end, in append mode) made behind
/// entries not finished: answered once those ahead of it are, with
/// `at`, the position its call planned (past the writes placed before
/// it); with `at` less [`Chain::lost`] if a write ahead stopped short and
/// `follows`; or, for the `end`, the file's size then (the end at the
/// time, where an append-mode write goes, which the entries ahead set),
/// looked up by a file-system thread of the engine, as a [`Cut`]'s
/// `ftruncate` is run, never on the thread that advances the chain; or,
/// `of` an earlier mark of the end, with its answer plus `at` (a `tell`
/// behind a `seek` from the end whose answer its call has not had yet).
struct Mark {
    fd: RawFd,
    at: u64,
    follows: bool,
    /// For a mark of the end: the `statx` of the file to run, and the
    /// pool to run it on.
    end: Option<(FsCall, PoolHandle)>,
    of: Option<u64>,
    /// The mark of a `seek` from the position or the end: met behind a
    /// write that stopped short, it makes the chain whole again, the
    /// entries from it on moved back by what never landed
    /// ([`Chain::rebase`]), as the built-in's seek from where the bytes
    /// stopped puts them.
    rebase: bool,
    /// For the rebasing mark of a `seek` from the end: the size the seek
    /// planned on ([`WriteQueue::size_after`]), which a truncation kept
    /// behind the write that stopped short may have set.
    size: Option<u64>,
    token: u64,
    slot: Arc<Slot>,
}

/// An `ftruncate` placed: run on a file-system thread of the engine
/// ([`crate::fsjobs`]) once the entries ahead of it are finished, never on
/// the thread that advances the chain (an event loop's, or the engine's
/// driver), which must not wait on the file system.
struct Cut {
    job: FsCall,
    pool: PoolHandle,
    fd: RawFd,
    len: u64,
    token: u64,
    slot: Arc<Slot>,
    /// A `seek` from the end planned on its size
    /// ([`WriteQueue::size_after`]): if it fails, the entries behind it
    /// are refused (their offsets may derive from the size it never set).
    planned_on: bool,
    /// Its size is the position its call planned (a `truncate()`), past
    /// the entries placed before it: behind a write that stopped short it
    /// cuts at the built-in file's position instead ([`Chain::lost`]
    /// less), and behind a failed truncation a seek planned on it is
    /// refused. An explicit size does not depend on them: made all the
    /// same, as the built-in's.
    follows: bool,
    /// The token of an earlier mark of the end whose answer plus `len`
    /// (a wrapping offset) is the size: a `truncate()` in append mode at
    /// the position a `seek` from the end, not answered when the call was
    /// made, sets ([`Chain::final_len`]).
    of: Option<u64>,
}

/// The mark of the end whose `statx` a file-system thread has.
struct Sizing {
    job: JobFuture,
    mark: Mark,
}

/// The `ftruncate` a file-system thread has.
struct Cutting {
    job: JobFuture,
    fd: RawFd,
    len: u64,
    token: u64,
    slot: Arc<Slot>,
    /// As [`Cut::planned_on`].
    planned_on: bool,
}

/// A write's failure no call has taken yet.
struct Failure {
    token: u64,
    error: io::Error,
}

/// A write placed, not yet submitted.
struct Placed {
    file: AsyncFile,
    fd: RawFd,
    dup: RawFd,
    buf: RoBuf,
    /// Its offset; `at` plus its length fits in an `i64` (checked by
    /// [`WriteQueue::start`]), so offsets within it never overflow.
    at: u64,
    token: u64,
    slot: Arc<Slot>,
    /// Its offset follows from the entries placed before it (planned past
    /// their bytes): refused if one of them fails. False after a `seek`
    /// from the start: made all the same, as the built-in's write there.
    follows: bool,
}

/// The write the engine has: `done` of its `total` bytes written so far
/// (the kernel may write a part; the rest is submitted again here).
struct Running {
    op: OpFuture<Slice<RoBuf>>,
    withdrawal: Withdrawal,
    file: AsyncFile,
    fd: RawFd,
    dup: RawFd,
    at: u64,
    done: usize,
    total: usize,
    token: u64,
    slot: Arc<Slot>,
}

/// One write's result, until its call takes it.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// The bytes written (a part, if an error stopped the rest), or the
    /// error when none was.
    result: Option<io::Result<usize>>,
    /// The batch awaiting it.
    waker: Option<Waker>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the result; the waker of the batch awaiting it, to wake
    /// once the chain's lock is let go.
    fn finish(&self, result: io::Result<usize>) -> Option<Waker> {
        let mut s = self.lock();
        s.result = Some(result);
        s.waker.take()
    }
}

/// The future of the batch a write's call awaits: the write's result.
struct Awaited(Arc<Slot>);

impl Future for Awaited {
    type Output = OneDone;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OneDone> {
        let mut s = self.0.lock();
        match s.result.take() {
            Some(r) => Poll::Ready(OneDone::Count(r.map(Out::Count))),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The future of the batch that waits for the chain to be empty.
struct Idle(Arc<Writes>);

impl Future for Idle {
    type Output = OneDone;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OneDone> {
        let mut c = self.0.lock();
        if c.is_idle() {
            return Poll::Ready(OneDone::Count(Ok(Out::Count(0))));
        }
        c.idle.push(cx.waker().clone());
        Poll::Pending
    }
}

impl Wake for Writes {
    /// The write in flight completed: the chain moves on, on this thread.
    fn wake(self: Arc<Self>) {
        self.kick();
    }
}

impl Writes {
    fn lock(&self) -> MutexGuard<'_, Chain> {
        self.chain.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Advances the chain, unless another thread is doing so (which then
    /// looks again); the batches whose writes finished are woken with the
    /// lock let go.
    fn kick(self: &Arc<Self>) {
        if self.pokes.fetch_add(1, Ordering::AcqRel) != 0 {
            return;
        }
        let waker = Waker::from(Arc::clone(self));
        loop {
            let seen = self.pokes.load(Ordering::Acquire);
            let woken = self.lock().advance(&waker);
            woken.into_iter().for_each(Waker::wake);
            if self
                .pokes
                .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }
}

impl Chain {
    /// Polls the write in flight; once it is finished, submits the next
    /// one. The wakers to call (of finished writes, and of waits for the
    /// chain to empty).
    fn advance(&mut self, waker: &Waker) -> Vec<Waker> {
        let mut woken = Vec::new();
        let mut cx = Context::from_waker(waker);
        loop {
            if let Some(run) = self.running.as_mut() {
                let Poll::Ready((res, buf)) = Pin::new(&mut run.op).poll(&mut cx) else {
                    return woken;
                };
                let res = explain_direct(name_given_fd(res, run.dup, run.fd), run.fd);
                match res {
                    Ok(n) if n > 0 && run.done + n < run.total => {
                        run.done += n;
                        self.submitted += 1;
                        run.resubmit(buf.into_inner());
                        continue;
                    }
                    other => {
                        let broke = match &other {
                            Err(e) => Some(errno_of(e)),
                            // (the kernel wrote 0 bytes: the call reports
                            // no space, as the built-in's next write would)
                            Ok(n) => (run.done + n < run.total).then_some(libc::ENOSPC),
                        };
                        let (at, token) = (run.at + run.done as u64, run.token);
                        let left = (run.total - run.done) as u64;
                        // (a write taken back ends with ECANCELED: nothing
                        // placed when it was taken back was behind it)
                        let withdrawn = self.withdrawn.contains(&token);
                        woken.extend(self.finish(other));
                        if let Some(errno) = broke {
                            let stop = Stop::Write { at, errno };
                            if !withdrawn {
                                self.broken = Some((token, stop));
                            }
                            self.lost = left;
                            woken.extend(self.refuse_queued(stop));
                        }
                    }
                }
            }
            if let Some(cut) = self.cutting.as_mut() {
                let Poll::Ready(res) = Pin::new(&mut cut.job).poll(&mut cx) else {
                    return woken;
                };
                if let Some(cut) = self.cutting.take() {
                    let ended = (cut.token, cut.fd, cut.len, cut.planned_on);
                    woken.extend(self.end_cut(ended, cut.slot, res));
                }
            }
            if let Some(sizing) = self.sizing.as_mut() {
                let Poll::Ready(res) = Pin::new(&mut sizing.job).poll(&mut cx) else {
                    return woken;
                };
                if let Some(sizing) = self.sizing.take() {
                    woken.extend(self.answer_end(sizing.mark, res));
                }
            }
            if self.inline {
                return woken; // (the write made inline kicks the chain)
            }
            let Some(next) = self.queued.pop_front() else {
                woken.append(&mut self.idle);
                return woken;
            };
            woken.extend(self.begin(next));
        }
    }

    /// Begins `next`, the entry at the head of the chain: a write
    /// submitted, a truncation's `ftruncate` or a mark of the end's
    /// `statx` handed to the file-system pool, another mark answered. The
    /// wakers of the calls ended (an entry answered, or refused by the
    /// pool).
    fn begin(&mut self, next: Entry) -> Vec<Waker> {
        let mut woken = Vec::new();
        match next {
            Entry::Write(placed) => {
                self.submitted += 1;
                self.running = Some(Running::start(placed));
            }
            Entry::Mark(mut mark) => match mark.end.take() {
                Some((call, pool)) => match pool.submit(call) {
                    Ok(job) => self.sizing = Some(Sizing { job, mark }),
                    Err(e) => woken.extend(self.answer_end(mark, Err(e))),
                },
                None => woken.extend(self.answer(mark)),
            },
            Entry::Cut(mut cut) => match self
                .final_len(&mut cut)
                .and_then(|()| cut.pool.submit(cut.job))
            {
                Ok(job) => {
                    self.cutting = Some(Cutting {
                        job,
                        fd: cut.fd,
                        len: cut.len,
                        token: cut.token,
                        slot: cut.slot,
                        planned_on: cut.planned_on,
                    })
                }
                Err(e) => {
                    let ended = (cut.token, cut.fd, cut.len, cut.planned_on);
                    woken.extend(self.end_cut(ended, cut.slot, Err(e)))
                }
            },
        }
        woken
    }

    /// Sets the size `cut` makes the file. If it is relative to a mark of the end
    /// (`of`), from that mark's answer: the position the `seek` from the
    /// end set, or, where that seek's target was before the start (it
    /// failed, and the position stayed at the end, as the built-in's), the
    /// end. An error if that answer is not the last one kept (its look-up
    /// failed). Either way the `ftruncate` made is to `cut.len` as it stands now,
    /// which a write ahead that stopped short may have moved back
    /// ([`Chain::behind`], [`move_back_following`]).
    fn final_len(&self, cut: &mut Cut) -> io::Result<()> {
        if let Some(of) = cut.of {
            let end = match self.marked {
                Some((t, end)) if t == of => end,
                _ => {
                    return Err(io::Error::other(format!(
                        "the end of fd {} could not be looked up for a truncate at a seek from it",
                        cut.fd
                    )))
                }
            };
            let at = end.wrapping_add(cut.len);
            cut.len = if i64::try_from(at).is_ok() { at } else { end };
        }
        if let FsCall::Ftruncate(_, len) = &mut cut.job {
            *len = cut.len;
        }
        Ok(())
    }

    /// Ends the truncation `token` of `fd` to `len` with `res`: a failure
    /// is kept until its call takes it (else reported by the file's next
    /// call). The entries behind a failed one are refused, as behind a
    /// failed write, only if a `seek` from the end was `planned_on` its
    /// size: the offsets of the others do not depend on it (the built-in
    /// file's writes after its failed `truncate` are made). The wakers of
    /// the calls ended.
    fn end_cut(
        &mut self,
        (token, fd, len, planned_on): (u64, RawFd, u64, bool),
        slot: Arc<Slot>,
        res: io::Result<Out>,
    ) -> Vec<Waker> {
        let mut woken = Vec::new();
        match res {
            Ok(_) => woken.extend(slot.finish(Ok(len as usize))),
            Err(e) => {
                let errno = errno_of(&e);
                let text = format!(
                    "a truncate of fd {fd} to {len} bytes failed: {}",
                    message(&e, errno)
                );
                let why = || {
                    io::Error::new(
                        e.kind(),
                        Renamed {
                            errno,
                            text: text.clone(),
                        },
                    )
                };
                self.failed.push(Failure {
                    token,
                    error: why(),
                });
                woken.extend(slot.finish(Err(why())));
                if planned_on {
                    let stop = Stop::Cut { len, errno };
                    self.broken = Some((token, stop));
                    woken.extend(self.refuse_queued(stop));
                }
            }
        }
        woken
    }

    /// Passes every entry queued behind one that failed or ended short at
    /// `stop`, none of them begun ([`Chain::behind`]), up to the first
    /// write whose offset does not follow the ones before it (placed after
    /// a `seek` from the start): written at their planned offsets, the
    /// writes that follow would leave a gap in the file where the failed
    /// one's bytes should be (the built-in file writes each at the
    /// position the one before it left). That write and the ones behind it
    /// are made, and the chain is whole again. The calls of the entries
    /// refused raise; a call that never takes its result (its loop closed)
    /// has the failure reported by the file's next call. The wakers of
    /// the calls ended.
    fn refuse_queued(&mut self, stop: Stop) -> Vec<Waker> {
        let mut woken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queued.len());
        while let Some(next) = self.queued.pop_front() {
            if matches!(&next, Entry::Write(p) if !p.follows) {
                self.queued.push_front(next);
                self.mend();
                break;
            }
            let next = match next {
                Entry::Mark(m) if m.rebase => match self.rebase(&m) {
                    Some(by) => {
                        self.queued.push_front(Entry::Mark(m));
                        if !move_back_following(self.queued.iter_mut(), by) {
                            self.shift += by;
                        }
                        break;
                    }
                    None => {
                        self.broken = Some((m.token, stop));
                        woken.extend(before_start(m, stop.at()));
                        continue;
                    }
                },
                next => next,
            };
            match self.behind(next, stop) {
                Ok(entry) => kept.push_back(entry),
                Err(waker) => woken.extend(waker),
            }
        }
        kept.append(&mut self.queued);
        self.queued = kept;
        woken
    }

    /// What becomes of `entry`, not begun, behind an entry that failed or
    /// ended short at `stop`: what depends on the extent that never
    /// landed is refused (a write whose offset follows it, and its bytes
    /// are counted as lost; a `truncate()` at the position, behind a
    /// truncation a seek from the end planned on), or answered now (a
    /// `tell` at the position: where the bytes stopped, as the built-in's
    /// says); a truncation at the position behind a write that stopped
    /// cuts where the bytes stopped, the built-in's position; the rest is
    /// made in its turn (an explicit size, a tell of the end), a
    /// truncation's size kept as the file's end ([`Chain::cut_since`]).
    /// `Ok` with the entry to keep, or `Err` with the waker of its call.
    fn behind(&mut self, entry: Entry, stop: Stop) -> Result<Entry, Option<Waker>> {
        match (entry, stop) {
            (Entry::Write(p), _) => {
                self.lost += p.buf.bytes_len() as u64;
                Err(self.refuse(Entry::Write(p), stop))
            }
            (Entry::Cut(mut c), Stop::Write { at, .. }) => {
                if c.follows {
                    c.len = at;
                }
                // (relative to a mark of the end, its size is not known yet)
                self.cut_since = c.of.is_none().then_some(c.len);
                Ok(Entry::Cut(c))
            }
            (Entry::Cut(c), Stop::Cut { .. }) if c.follows => Err(self.refuse(Entry::Cut(c), stop)),
            (Entry::Mark(mut m), Stop::Write { at, .. }) if m.follows && m.end.is_none() => {
                m.at = at;
                Err(self.answer(m))
            }
            (entry, _) => Ok(entry),
        }
    }

    /// Whether no entry is in progress nor queued.
    fn is_idle(&self) -> bool {
        self.running.is_none()
            && !self.inline
            && self.cutting.is_none()
            && self.sizing.is_none()
            && self.queued.is_empty()
    }

    /// The chain is whole again: entries placed from now on are made.
    fn mend(&mut self) {
        self.broken = None;
        self.lost = 0;
        self.cut_since = None;
    }

    /// A rebasing [`Mark`] is met behind a write that stopped short: how
    /// far its position planned is past the built-in's, by which the
    /// caller moves back the entries from the mark on and which it adds
    /// to [`Chain::shift`] (unless a write after a `seek` from the start
    /// is among them); the chain is whole again. What never landed, or,
    /// for a `seek` from the end behind a truncation kept, how far the
    /// size it planned is past the one that truncation set. None if the
    /// position moved back would be before the start: the built-in's seek
    /// fails there (`EINVAL`), the position staying where the bytes
    /// stopped, and the chain stays broken.
    fn rebase(&mut self, mark: &Mark) -> Option<u64> {
        let by = match (mark.size, self.cut_since) {
            (Some(size), Some(len)) => size.saturating_sub(len),
            _ => self.lost,
        };
        if mark.at < by {
            return None;
        }
        self.mend();
        Some(by)
    }

    /// Puts `entry`, placed now, in the built-in's positions: moved back by
    /// [`Chain::shift`] if it follows the entries placed before it; a
    /// write or a `tell` after a `seek` from the start (which does not)
    /// ends the shift, the caller's positions being the built-in's again.
    fn shifted(&mut self, entry: &mut Entry) {
        if self.shift == 0 {
            return;
        }
        let absolute = match entry {
            Entry::Write(p) => !p.follows,
            Entry::Mark(m) => !m.follows && m.end.is_none() && m.of.is_none(),
            Entry::Cut(_) => false,
        };
        if absolute {
            self.shift = 0;
        } else {
            move_back_following(std::iter::once(entry), self.shift);
        }
    }

    /// Answers `mark`, not of the end (see [`Mark`]); the waker of its
    /// call.
    fn answer(&mut self, mark: Mark) -> Option<Waker> {
        let at = match (mark.of, self.marked) {
            (Some(of), Some((t, end))) if t == of => Ok(end.wrapping_add(mark.at)),
            (Some(_), _) => Err(io::Error::other(format!(
                "the end of fd {} could not be looked up for a seek from it",
                mark.fd
            ))),
            (None, _) => Ok(mark.at),
        };
        mark.slot.finish(at.map(|at| at as usize))
    }

    /// Answers `mark`, of the end, with the size its `statx` found
    /// (`res`), kept for the marks placed relative to it; the waker of
    /// its call.
    fn answer_end(&mut self, mark: Mark, res: io::Result<Out>) -> Option<Waker> {
        let at = res.and_then(|out| match out {
            Out::Count(size) => Ok(size),
            _ => Err(io::Error::other(format!("no size for fd {}", mark.fd))),
        });
        if let Ok(at) = &at {
            self.marked = Some((mark.token, *at as u64));
        }
        mark.slot.finish(at)
    }

    /// Fails `entry`, not made because an entry failed before it
    /// (leaving `stop`), with the errno of that failure; the waker of its
    /// call.
    fn refuse(&mut self, entry: Entry, stop: Stop) -> Option<Waker> {
        let what = entry.describe();
        let errno = stop.errno();
        let why = || {
            io::Error::new(
                io::Error::from_raw_os_error(errno).kind(),
                Renamed {
                    errno,
                    text: format!("{what} was not made: {stop}"),
                },
            )
        };
        self.failed.push(Failure {
            token: entry.token(),
            error: why(),
        });
        entry.slot().finish(Err(why()))
    }

    /// Ends the write in flight with `last`, the result of its last part.
    fn finish(&mut self, last: io::Result<usize>) -> Option<Waker> {
        let run = self.running.take()?;
        let done = run.done + last.as_ref().map_or(0, |n| *n);
        let report = match &last {
            Err(e) => Some(copy_error(e)),
            Ok(_) if done < run.total => Some(io::Error::other(format!(
                "a write of {} bytes at offset {} on fd {} stopped after {done}: the kernel wrote 0 bytes of \
                 the rest",
                run.total, run.at, run.fd
            ))),
            Ok(_) => None,
        };
        // A part written, then an error: the part's count (the call
        // writes the rest again, which reports the error).
        let result = if done > 0 { Ok(done) } else { last };
        if let Some(i) = self.withdrawn.iter().position(|t| *t == run.token) {
            self.withdrawn.swap_remove(i);
        } else if let Some(report) = report {
            self.failed.push(Failure {
                token: run.token,
                error: report,
            });
        }
        run.slot.finish(result)
    }
}

impl Running {
    /// Submits `placed`.
    fn start(placed: Placed) -> Running {
        let at = placed.at;
        let total = placed.buf.bytes_len();
        let op = placed.file.write_at(placed.buf.slice(..), at);
        Running {
            withdrawal: op.withdrawal(),
            op,
            file: placed.file,
            fd: placed.fd,
            dup: placed.dup,
            at,
            done: 0,
            total,
            token: placed.token,
            slot: placed.slot,
        }
    }

    /// Submits the part of `buf` not written yet.
    fn resubmit(&mut self, buf: RoBuf) {
        let at = self.at + self.done as u64;
        self.op = self.file.write_at(buf.slice(self.done..), at);
        self.withdrawal = self.op.withdrawal();
    }
}

/// Starts, for `waiter`, the batch that awaits an entry's result: its
/// token, and the slot the entry finishes. `lent`: the descriptor the
/// batch holds for the entry (given back when the batch ends).
fn start_awaited(core: &Core, waiter: PyObject, lent: Option<RawFd>) -> (u64, Arc<Slot>) {
    let slot = Arc::new(Slot::default());
    let mut batch = Pending::new(vec![Box::pin(Awaited(Arc::clone(&slot)))], Yields::Count);
    batch.borrowed.extend(lent);
    (core.start(waiter, batch), slot)
}

/// Moves back by `by` the positions of `entries` that follow the ones
/// placed before them (a write's offset, a `truncate()`'s size, a
/// `tell`'s answer), up to the first write or `tell` that does not
/// (placed after a `seek` from the start), which, with the entries behind
/// it, stays. Whether it met one (the caller plans from the built-in's
/// positions again since).
fn move_back_following<'a>(entries: impl Iterator<Item = &'a mut Entry>, by: u64) -> bool {
    for entry in entries {
        match entry {
            Entry::Write(p) if !p.follows => return true,
            Entry::Mark(m) if !m.follows && m.end.is_none() && m.of.is_none() => return true,
            Entry::Write(_) | Entry::Cut(_) | Entry::Mark(_) if by == 0 => {}
            Entry::Write(p) => p.at = p.at.saturating_sub(by),
            Entry::Cut(c) if c.follows => c.len = c.len.saturating_sub(by),
            Entry::Mark(m) if m.follows && m.end.is_none() && m.of.is_none() => {
                m.at = m.at.saturating_sub(by);
                m.size = m.size.map(|size| size.saturating_sub(by));
            }
            Entry::Cut(_) | Entry::Mark(_) => {}
        }
    }
    false
}

/// Answers the rebasing `mark` whose position moved back would be before
/// the start ([`Chain::rebase`]): the built-in's seek fails there
/// (`EINVAL`), its position staying at `stopped`, where the bytes of the
/// write ahead stopped; the answer is that offset plus [`BEFORE_START`],
/// which its call tells from a position (it raises `EINVAL` and sets the
/// position there). The chain stays broken until that call has its
/// answer ([`WriteQueue::claim`] of its token), not the write's. The
/// waker of its call.
fn before_start(mark: Mark, stopped: u64) -> Option<Waker> {
    mark.slot.finish(Ok((BEFORE_START | stopped) as usize))
}

/// Added to the answer of a rebasing [`Mark`] whose seek fails, its target
/// being before the start ([`before_start`]): past every file offset.
const BEFORE_START: u64 = 1 << 63;

/// `e` again, for a second report (an `io::Error` is not `Clone`).
fn copy_error(e: &io::Error) -> io::Error {
    let code = errno_of(e);
    io::Error::new(
        e.kind(),
        Renamed {
            errno: code,
            text: message(e, code),
        },
    )
}

impl WriteQueue {
    /// Queues `entry` (or, behind a failure no call has taken, does with
    /// it what [`Chain::behind`] says) and advances the chain.
    fn place(&self, mut entry: Entry) {
        let ended = {
            let mut c = self.writes.lock();
            c.shifted(&mut entry);
            let passed = match c.broken {
                // (a write after a seek from the start makes the chain
                // whole again: see `refuse_queued`)
                Some(_) if matches!(&entry, Entry::Write(p) if !p.follows) => {
                    c.mend();
                    Ok(entry)
                }
                // (and so does the mark of a seek from the position or
                // the end, its position moved back by what never landed)
                Some((_, stop)) if matches!(&entry, Entry::Mark(m) if m.rebase) => match entry {
                    Entry::Mark(m) => match c.rebase(&m) {
                        Some(by) => {
                            let mut entry = Entry::Mark(m);
                            move_back_following(std::iter::once(&mut entry), by);
                            c.shift += by;
                            Ok(entry)
                        }
                        None => {
                            c.broken = Some((m.token, stop));
                            Err(before_start(m, stop.at()))
                        }
                    },
                    other => Ok(other),
                },
                Some((_, stop)) => c.behind(entry, stop),
                None => Ok(entry),
            };
            match passed {
                Ok(entry) => {
                    c.queued.push_back(entry);
                    None
                }
                Err(waker) => waker,
            }
        };
        ended.into_iter().for_each(Waker::wake);
        self.writes.kick();
    }

    /// Marks a write made inline in progress if no entry of the queue is
    /// unfinished and none failed that its call has not taken: whether
    /// it did.
    fn begin_inline(&self) -> bool {
        let mut c = self.writes.lock();
        let clear =
            c.broken.is_none() && c.shift == 0 && c.failed.is_empty() && c.withdrawn.is_empty();
        if !c.is_idle() || !clear {
            return false;
        }
        c.inline = true;
        true
    }

    /// Starts, for `waiter`, a batch failed with `why` (the descriptor
    /// could not be held), the failure kept as a placed entry's; its token.
    fn refused_at_start(&self, core: &Core, waiter: PyObject, why: io::Error) -> u64 {
        let report = copy_error(&why);
        let batch = Pending::new(vec![failed(Yields::Count, why)], Yields::Count);
        let token = core.start(waiter, batch);
        self.writes.lock().failed.push(Failure {
            token,
            error: report,
        });
        token
    }
}

#[pymethods]
impl WriteQueue {
    #[new]
    fn new() -> WriteQueue {
        WriteQueue {
            writes: Arc::new(Writes {
                chain: Mutex::new(Chain::default()),
                pokes: AtomicUsize::new(0),
                inline: InlineWrites::default(),
            }),
        }
    }

    /// Writes `data` at `offset` of `fd` (its end in append mode) on the
    /// calling thread, the GIL let go, when no entry of the queue is
    /// unfinished, none failed that its call has not taken, a file object
    /// of `core` owns `fd`, and the file is one whose writes are made
    /// inline ([`crate::inline_write`]): the bytes written, all or, when a
    /// limit (`EFBIG`, `ENOSPC`) stopped the rest, a part; the caller
    /// writes the rest as any write, which meets the limit. `None` when
    /// nothing was written: the caller places the write
    /// ([`WriteQueue::start`]); so also when the thread's turn of the
    /// event loop is due ([`crate::turns`]), which the placed write's
    /// await takes. The entries placed from another thread during the
    /// write wait behind it ([`Chain::inline`]); the file's close waits
    /// for the descriptor to be given back ([`crate::owned::Owned::borrow_fd`]).
    fn write_now(
        &self,
        core: &Bound<'_, Core>,
        fd: RawFd,
        data: &Bound<'_, PyAny>,
        offset: i64,
    ) -> PyResult<Option<usize>> {
        let Ok(offset) = u64::try_from(offset) else {
            return Ok(None);
        };
        if core.borrow().check().is_err() {
            return Ok(None); // (the placed write reports it)
        }
        // (a call that returns without suspending: its turn of the event
        // loop, when due, is taken by the placed write's await)
        if crate::turns::due() {
            return Ok(None);
        }
        let buf = readable(data)?;
        if buf.len_bytes() == 0 || !self.begin_inline() {
            return Ok(None);
        }
        let written = if core.borrow().owned.borrow_fd(fd) {
            // SAFETY: `buf` is a C-contiguous buffer (`readable`) of
            // `len_bytes` bytes from `buf_ptr`, exported for as long as
            // `buf` lives, which outlives the slice: while exported the
            // object can be neither resized nor freed. With the GIL let
            // go another thread may change its bytes meanwhile, as it may
            // those of a write submitted to the engine (or the built-in
            // `os.write`'s): the slice is only handed to the kernel,
            // which copies what it finds.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.buf_ptr().cast::<u8>(), buf.len_bytes()) };
            let inline = &self.writes.inline;
            let n = data.py().allow_threads(|| inline.write(fd, bytes, offset));
            let core = core.borrow();
            core.start_closes(core.owned.release(&[fd]));
            n
        } else {
            None
        };
        self.writes.lock().inline = false;
        self.writes.kick();
        if let Some(n) = written {
            // (its call counted one already: the bytes it copied)
            crate::turns::count_copied(n);
        }
        Ok(written)
    }

    /// The writes made so far: inline ([`WriteQueue::write_now`]),
    /// submitted to the engine ([`Chain::submitted`]), and the inline ones
    /// that took longer than `inline_write::SLOW`, each of which sends the file's next
    /// `inline_write::AFTER_WAIT` writes to the engine.
    fn write_counts(&self) -> (u64, u64, u64) {
        let (made, waited) = self.writes.inline.counts();
        (made, self.writes.lock().submitted, waited)
    }

    /// Places a write of `data` at `offset` of `fd` (ignored in append
    /// mode) through `core` for `waiter`; the token of the batch that
    /// resolves `waiter` with its byte count. Submitted before this
    /// returns when no write of the queue is unfinished; else by the core
    /// when the write ahead completes. `follows`: whether `offset` was
    /// planned past the entries placed before it (false after a `seek`
    /// from the start), which decides whether it is refused if one of
    /// them fails ([`Placed::follows`]).
    #[pyo3(signature = (core, waiter, fd, data, offset, follows = true))]
    fn start(
        &self,
        core: &Bound<'_, Core>,
        waiter: PyObject,
        fd: RawFd,
        data: &Bound<'_, PyAny>,
        offset: i64,
        follows: bool,
    ) -> PyResult<u64> {
        let buf = RoBuf(Lent::new(readable(data)?));
        let offset = offset_arg(offset, None)?;
        let len = buf.bytes_len();
        let end = u64::try_from(len).ok().and_then(|n| offset.checked_add(n));
        if !end.is_some_and(|end| i64::try_from(end).is_ok()) {
            return Err(PyValueError::new_err(format!(
                "a write of {len} bytes at offset {offset} on fd {fd} would end past the largest file offset ({})",
                i64::MAX
            )));
        }
        let core = core.borrow();
        let flags = fd_flags(fd);
        let aio = core.aio(flags != -1 && flags & libc::O_DIRECT != 0)?;
        let (file, lent) = core.owned.hold_for_batch(&aio, fd, flags);
        let (file, dup) = match file {
            Ok(held) => held,
            Err(errno) => {
                let why = refused(&format!("write at offset {offset}"), fd, errno);
                return Ok(self.refused_at_start(&core, waiter, why));
            }
        };
        let (token, slot) = start_awaited(&core, waiter, lent.then_some(fd));
        self.place(Entry::Write(Placed {
            file,
            fd,
            dup,
            buf,
            at: offset,
            token,
            slot,
            follows,
        }));
        Ok(token)
    }

    /// Places an `ftruncate` of `fd` to `length` bytes through `core` for
    /// `waiter`, behind the entries placed before it; the token of the
    /// batch that resolves `waiter` with the size it set. `follows`:
    /// `length` is the position the call planned (a `truncate()`), past
    /// the entries placed before it ([`Cut::follows`]); or, `of` the token
    /// of an earlier mark of the end, that mark's answer plus `length`
    /// (which may then be negative: [`Chain::final_len`]). Begun (on one of the engine's
    /// file-system threads) before this returns when no entry of the
    /// queue is unfinished; else by the core when the one ahead finishes.
    #[pyo3(signature = (core, waiter, fd, length, follows = false, of = None))]
    #[allow(clippy::too_many_arguments)]
    fn truncate(
        &self,
        core: &Bound<'_, Core>,
        waiter: PyObject,
        fd: RawFd,
        length: i64,
        follows: bool,
        of: Option<u64>,
    ) -> PyResult<u64> {
        // (relative to a mark of the end, a negative offset wraps: see
        // `Chain::final_len`)
        let len = match of {
            Some(_) => length as u64,
            None => u64::try_from(length).map_err(|_| {
                PyValueError::new_err(format!("length must not be negative, got {length}"))
            })?,
        };
        let core = core.borrow();
        core.check()?;
        let (held, lent) = core.owned.hold_for_job(fd);
        let held = match held {
            Ok(held) => held,
            Err(errno) => {
                let why = refused(&format!("truncate to {len} bytes"), fd, errno);
                return Ok(self.refused_at_start(&core, waiter, why));
            }
        };
        let (token, slot) = start_awaited(&core, waiter, lent.then_some(fd));
        self.place(Entry::Cut(Cut {
            job: FsCall::Ftruncate(held, len),
            pool: core.fs.handle(),
            fd,
            len,
            token,
            slot,
            planned_on: false,
            follows,
            of,
        }));
        Ok(token)
    }

    /// Places a [`Mark`] of `fd` through `core` for `waiter`, behind the
    /// entries placed before it: the token of the batch that resolves
    /// `waiter` with the position once they are finished (at once when
    /// none is unfinished). `at`: the position the call planned, past the
    /// writes placed before it, and whether it `follows` from them (false
    /// after a `seek` from the start); or, if `end`, the file's size then;
    /// or, `of` the token of an earlier mark of the end, its answer plus
    /// `at` (which may then be negative: the caller checks the sum).
    /// `rebase`: the mark of a `seek` from the position or the end, which
    /// the writes placed behind it follow ([`Mark::rebase`]); `size`, for
    /// one from the end, the size it planned on ([`Mark::size`]).
    #[pyo3(signature = (core, waiter, fd, at, follows = true, end = false, of = None, rebase = false, size = None))]
    #[allow(clippy::too_many_arguments)]
    fn mark(
        &self,
        core: &Bound<'_, Core>,
        waiter: PyObject,
        fd: RawFd,
        at: i64,
        follows: bool,
        end: bool,
        of: Option<u64>,
        rebase: bool,
        size: Option<u64>,
    ) -> PyResult<u64> {
        // (relative to a mark of the end, a negative offset wraps: added to
        // that end with wrapping arithmetic, it gives the sum)
        let at = if of.is_some() {
            at as u64
        } else {
            offset_arg(at, None)?
        };
        let core = core.borrow();
        core.check()?;
        let (lookup, lent) = if end {
            let (held, lent) = core.owned.hold_for_job(fd);
            match held {
                Ok(held) => (Some((FsCall::Size(held), core.fs.handle())), lent),
                Err(errno) => {
                    let why = refused("look-up of the end", fd, errno);
                    return Ok(self.refused_at_start(&core, waiter, why));
                }
            }
        } else {
            (None, false)
        };
        let (token, slot) = start_awaited(&core, waiter, lent.then_some(fd));
        self.place(Entry::Mark(Mark {
            fd,
            at,
            follows,
            end: lookup,
            of,
            rebase,
            size,
            token,
            slot,
        }));
        Ok(token)
    }

    /// Whether no entry is unfinished and none failed that its call has
    /// not taken: a position worked out by the caller now is the
    /// built-in's, with no [`Mark`] needed.
    fn idle(&self) -> bool {
        let c = self.writes.lock();
        c.is_idle() && c.broken.is_none() && c.shift == 0
    }

    /// The caller moved its position back by `by` (a seek's rebasing
    /// mark answered, less what the calls since moved it already): the
    /// entries placed from now on are moved back that much less
    /// ([`Chain::shift`]).
    fn rebased(&self, by: u64) {
        let mut c = self.writes.lock();
        c.shift = c.shift.saturating_sub(by);
    }

    /// The value of the [`Mark`] of the batch `token` if it was the last
    /// answered (for a call that took the queue over from the one that
    /// placed it, whose loop was closed), else None.
    fn marked(&self, token: u64) -> Option<u64> {
        match self.writes.lock().marked {
            Some((t, at)) if t == token => Some(at),
            _ => None,
        }
    }

    /// The size `fd`'s file will have once the entries placed are
    /// finished, for a `seek` from the end made behind them: its size now
    /// (`statx` of what the kernel holds, asking no server), each write
    /// placed extending it to the write's end and each truncation setting
    /// it, in order (writes are positional: not for a file in append
    /// mode); a truncation to 0 gives 0. None when no entry is
    /// unfinished (the kernel's `lseek` knows the end then, also where a
    /// size of 0 says nothing of it: procfs, a character device) or when
    /// `fd` is not a regular file (a block device's `stx_size` is 0, and
    /// neither writes nor truncations change its size): the caller asks
    /// `lseek`. The `statx`
    /// is made with the chain's lock held (a system call that never waits
    /// on a device or a server, as it reads only what the kernel holds),
    /// so that no entry leaves the chain between the look at the file and
    /// the look at the entries: one finished in between would be counted
    /// by neither. The truncations counted are marked planned on
    /// ([`Cut::planned_on`]). In the caller's positions: plus the
    /// [`Chain::shift`] it has not taken back yet.
    fn size_after(&self, fd: RawFd) -> PyResult<Option<u64>> {
        let mut c = self.writes.lock();
        if c.is_idle() {
            return Ok(None);
        }
        let st = blockio::blocking::stat(PathAt::file(&RawTarget(fd)), libc::AT_STATX_DONT_SYNC)
            .map_err(io_err)?;
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            return Ok(None);
        }
        let mut size = st.stx_size;
        if let Some(run) = &c.running {
            size = size.max(run.at + run.total as u64);
        }
        if let Some(cut) = &mut c.cutting {
            size = cut.len;
            cut.planned_on = true;
        }
        for entry in &mut c.queued {
            size = match entry {
                Entry::Write(p) => size.max(p.at + p.buf.bytes_len() as u64),
                Entry::Cut(k) => {
                    k.planned_on = true;
                    k.len
                }
                Entry::Mark(_) => size,
            };
        }
        // (in the caller's positions, past the built-in's by the shift not
        // taken back yet: the seek's mark is moved back as much)
        Ok(Some(size + c.shift))
    }

    /// Starts the wait for every write placed to finish, for `waiter`;
    /// the token of the batch that resolves it.
    fn settled(&self, core: &Bound<'_, Core>, waiter: PyObject) -> u64 {
        let idle = Idle(Arc::clone(&self.writes));
        core.borrow()
            .start(waiter, Pending::new(vec![Box::pin(idle)], Yields::Count))
    }

    /// Takes back the write of the batch `token` (whose call was
    /// cancelled) if no byte of it has reached the kernel and no write is
    /// queued behind it: it is never performed, and its batch ends (with
    /// `ECANCELED`, reported to nobody). Whether it was taken back; false
    /// once the kernel has a part of it, or while a write is queued
    /// behind it (planned after its bytes, that one would land past a
    /// hole): its call then waits for it to finish, as for a write kept.
    fn withdraw(&self, token: u64) -> bool {
        let (slot, running) = {
            let mut c = self.writes.lock();
            let last = c.queued.len().checked_sub(1);
            if let Some(i) = c.queued.iter().position(|p| p.token() == token) {
                if Some(i) != last {
                    return false;
                }
                (c.queued.remove(i).map(Entry::slot), None)
            } else {
                let taken = match &c.running {
                    Some(run) if run.token == token && run.done == 0 && c.queued.is_empty() => {
                        (Some(Arc::clone(&run.slot)), Some(run.withdrawal.clone()))
                    }
                    _ => (None, None),
                };
                // (before the withdrawal: its ECANCELED may be seen on
                // another thread before this one takes the lock again)
                if taken.1.is_some() {
                    c.withdrawn.push(token);
                }
                taken
            }
        };
        let Some(slot) = slot else {
            return false;
        };
        // Outside the chain's lock: a write withdrawn completes at once
        // (with ECANCELED), and its waker advances the chain. One the
        // kernel has (or that completed meanwhile) stays.
        if running.is_some_and(|w| !w.withdraw()) {
            // (it stays, and completes as any write)
            let mut c = self.writes.lock();
            c.withdrawn.retain(|t| *t != token);
            return false;
        }
        let waker = {
            let mut s = slot.lock();
            if s.result.is_none() {
                s.result = Some(Err(io::Error::from_raw_os_error(libc::ECANCELED)));
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        // (a write withdrawn is no failure to report: its call raises the
        // cancellation)
        self.writes.lock().failed.retain(|f| f.token != token);
        true
    }

    /// The call of the write of the batch `token` has its result: a
    /// failure of it is not reported again, and writes placed from now
    /// on are made again (its call moved the position back to where its
    /// bytes stopped). The errno of that failure, if there was one: for a
    /// write that stopped short, the error the core met writing the rest
    /// (it submits the rest itself), which its call raises rather than
    /// write the rest again behind the entries placed since.
    fn claim(&self, token: u64) -> Option<i32> {
        let mut c = self.writes.lock();
        let errno = c
            .failed
            .iter()
            .find(|f| f.token == token)
            .map(|f| errno_of(&f.error));
        c.failed.retain(|f| f.token != token);
        if c.broken.is_some_and(|(t, _)| t == token) {
            c.mend();
        }
        errno
    }

    /// The failures (or short writes) of entries whose calls never took
    /// their results, their event loop closed: raised once, by the
    /// file's next call or its close, for the takeover that settled the
    /// queue, as one error with the first's errno whose message names
    /// each, the entries refused behind them included (not reported
    /// again); and, when a write stopped short with the entries behind it
    /// refused, the offset where its bytes stopped: the file's position,
    /// as the built-in's after a short write and the writes after it
    /// failing; and how far a seek from the position placed behind such
    /// a write, whose call never had its answer, left the caller's
    /// position past the built-in's ([`Chain::shift`], 0 if none). Entries
    /// placed from now on are made again, at the positions planned.
    fn take_error(&self) -> (Option<PyErr>, Option<u64>, u64) {
        let mut c = self.writes.lock();
        let stopped = match c.broken.take() {
            Some((_, Stop::Write { at, .. })) => Some(at),
            _ => None,
        };
        c.lost = 0;
        let shift = std::mem::take(&mut c.shift);
        let mut failed = std::mem::take(&mut c.failed).into_iter();
        let Some(first) = failed.next() else {
            return (None, stopped, shift);
        };
        let rest: Vec<String> = failed.map(|f| f.error.to_string()).collect();
        let error = if rest.is_empty() {
            first.error
        } else {
            let errno = errno_of(&first.error);
            let text = format!("{}; {}", message(&first.error, errno), rest.join("; "));
            io::Error::new(first.error.kind(), Renamed { errno, text })
        };
        (Some(io_err(error)), stopped, shift)
    }
}
