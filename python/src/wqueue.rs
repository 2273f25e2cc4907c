//! `WriteQueue`: a file object's writes, in the order they were made,
//! kept in the core and carried out by it. A write is placed here, with
//! its offset, by the call that makes it, before that call first yields
//! to its event loop; the write placed behind another is submitted by the
//! core itself when the one ahead completes, on whichever thread reports
//! the completion (the engine's driver or pool thread), and so is the
//! rest of a write the kernel took only a part of. So every write placed
//! reaches the file in order even if no Python code runs again for it:
//! its event loop closed, its task cancelled, its file object collected.
//!
//! Who owns what: the chain of writes ([`Chain`]: the one in flight, the
//! ones behind it, the failures no call has taken) is behind one mutex,
//! taken by one thread at a time to advance
//! the chain ([`Writes::kick`]), and briefly by Python calls placing a
//! write, waiting for the chain to empty or taking back a write. Each
//! write's result is a [`Slot`] (its own mutex) shared with the batch
//! its call awaits through the engine ([`crate::InFlight`]), which hands
//! the result to the caller's loop as any batch's. Locks nest only as:
//! chain then slot (the runner finishing a write); the engine's batch
//! table then slot, or then chain (a batch polled); never the other way.
//! A failure is reported by the call that made the write once it takes
//! the result ([`WriteQueue::claim`]); one no call took (its event loop
//! closed) is reported by the file's next call ([`WriteQueue::take_error`]).

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use blockio::aio::{AsyncFile, IoBuf, OpFuture, Slice, Withdrawal};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::fsjobs::Out;
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
}

/// The writes of one file not finished yet.
#[derive(Default)]
struct Chain {
    /// The write the engine has.
    running: Option<Running>,
    /// The writes behind it, in the order they were placed.
    queued: VecDeque<Placed>,
    /// What waits for the chain to be empty ([`Idle`]).
    idle: Vec<Waker>,
    /// Writes taken back ([`WriteQueue::withdraw`]) whose `ECANCELED`
    /// may still come: not failures.
    withdrawn: Vec<u64>,
    /// Writes that failed or ended short, or were refused because of
    /// one that did, until their call takes the result
    /// ([`WriteQueue::claim`]); else reported by [`WriteQueue::take_error`].
    failed: Vec<Failure>,
    /// The write that failed or ended short (its token and the offset
    /// where its bytes stopped) while its call has not taken its result
    /// nor a takeover the queue's failures: a write placed meanwhile
    /// would land at an offset planned after bytes that never landed, so
    /// it is refused ([`WriteQueue::start`]).
    broken: Option<(u64, u64)>,
}

/// A write's failure no call has taken yet.
struct Failure {
    token: u64,
    error: io::Error,
    /// The token of the failed write this one was refused behind (none:
    /// it failed itself). Reported with that one's failure, not again.
    cause: Option<u64>,
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
        if c.running.is_none() && c.queued.is_empty() {
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
                        run.resubmit(buf.into_inner());
                        continue;
                    }
                    other => {
                        let broke = match &other {
                            Err(_) => true,
                            Ok(n) => run.done + n < run.total,
                        };
                        let (at, fd, token) = (run.at + run.done as u64, run.fd, run.token);
                        // (a write taken back ends with ECANCELED: nothing
                        // placed when it was taken back was behind it)
                        let withdrawn = self.withdrawn.contains(&token);
                        woken.extend(self.finish(other));
                        if broke {
                            if !withdrawn {
                                self.broken = Some((token, at));
                            }
                            woken.extend(self.refuse_queued(token, at, fd));
                        }
                    }
                }
            }
            let Some(next) = self.queued.pop_front() else {
                woken.append(&mut self.idle);
                return woken;
            };
            self.running = Some(Running::start(next));
        }
    }

    /// Fails every write queued behind one that failed or ended short at
    /// `at` of `fd`, none of them submitted: written at their planned
    /// offsets, they would leave a gap in the file where the failed one's
    /// bytes should be (the built-in file writes each at the position the
    /// one before it left). Their calls raise; a call that never takes
    /// its result (its loop closed) has the failure reported by the
    /// file's next call. The wakers of their calls.
    fn refuse_queued(&mut self, cause: u64, at: u64, fd: RawFd) -> Vec<Waker> {
        let mut woken = Vec::new();
        while let Some(next) = self.queued.pop_front() {
            woken.extend(self.refuse(next, cause, at, fd));
        }
        woken
    }

    /// Fails `placed`, not made because the write `cause` failed at `at`
    /// of `fd` before it; the waker of its call.
    fn refuse(&mut self, placed: Placed, cause: u64, at: u64, fd: RawFd) -> Option<Waker> {
        let why = || {
            io::Error::other(format!(
                "a write of {} bytes at offset {} on fd {fd} was not made: the write before it failed at \
                 offset {at}",
                placed.buf.bytes_len(),
                placed.at
            ))
        };
        self.failed.push(Failure {
            token: placed.token,
            error: why(),
            cause: Some(cause),
        });
        placed.slot.finish(Err(why()))
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
                cause: None,
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

#[pymethods]
impl WriteQueue {
    #[new]
    fn new() -> WriteQueue {
        WriteQueue {
            writes: Arc::new(Writes {
                chain: Mutex::new(Chain::default()),
                pokes: AtomicUsize::new(0),
            }),
        }
    }

    /// Places a write of `data` at `offset` of `fd` (ignored in append
    /// mode) through `core` for `waiter`; the token of the batch that
    /// resolves `waiter` with its byte count. Submitted before this
    /// returns when no write of the queue is unfinished; else by the core
    /// when the write ahead completes.
    fn start(
        &self,
        core: &Bound<'_, Core>,
        waiter: PyObject,
        fd: RawFd,
        data: &Bound<'_, PyAny>,
        offset: i64,
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
        let (file, lent) = core.hold_for_batch(&aio, fd, flags);
        let (file, dup) = match file {
            Ok(held) => held,
            Err(errno) => {
                let why = refused(&format!("write at offset {offset}"), fd, errno);
                let report = copy_error(&why);
                let batch = Pending::new(vec![failed(Yields::Count, why)], Yields::Count);
                let token = core.start(waiter, batch);
                self.writes.lock().failed.push(Failure {
                    token,
                    error: report,
                    cause: None,
                });
                return Ok(token);
            }
        };
        let slot = Arc::new(Slot::default());
        let mut batch = Pending::new(vec![Box::pin(Awaited(Arc::clone(&slot)))], Yields::Count);
        if lent {
            batch.borrowed.push(fd);
        }
        let token = core.start(waiter, batch);
        let placed = Placed {
            file,
            fd,
            dup,
            buf,
            at: offset,
            token,
            slot,
        };
        let refused = {
            let mut c = self.writes.lock();
            match c.broken {
                Some((cause, at)) => c.refuse(placed, cause, at, fd),
                None => {
                    c.queued.push_back(placed);
                    None
                }
            }
        };
        refused.into_iter().for_each(Waker::wake);
        self.writes.kick();
        Ok(token)
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
            if let Some(i) = c.queued.iter().position(|p| p.token == token) {
                if Some(i) != last {
                    return false;
                }
                (c.queued.remove(i).map(|p| p.slot), None)
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
    /// bytes stopped).
    fn claim(&self, token: u64) {
        let mut c = self.writes.lock();
        c.failed.retain(|f| f.token != token);
        if c.broken.is_some_and(|(t, _)| t == token) {
            c.broken = None;
        }
    }

    /// The failure (or short write) of a write whose call never took its
    /// result, its call's event loop closed: raised once, by the file's
    /// next call or its close, for the takeover that settled the queue.
    /// The writes refused behind the same failed write are that one loss,
    /// not reported again; writes placed from now on are made again.
    fn take_error(&self) -> Option<PyErr> {
        let mut c = self.writes.lock();
        c.broken = None;
        if c.failed.is_empty() {
            return None;
        }
        let first = c.failed.remove(0);
        let root = first.cause.unwrap_or(first.token);
        c.failed.retain(|f| f.cause != Some(root));
        Some(io_err(first.error))
    }
}
