//! The poll-based side of a stream, under the `futures::io` and tokio I/O
//! traits: reads that go through the stream's [`ReadSide`] like owned
//! reads, and writes that go behind.
//!
//! # Reads
//!
//! `poll_read` lends a slice for one poll only, but a receive in the
//! kernel needs memory that stays put until it completes. So each receive
//! goes into an owned buffer and is *detached* at once: registered with
//! the stream's [`ReadSide`] as an abandoned read is, its bytes collected
//! into the stream's leftover when it completes. `poll_read` then hands
//! out leftover bytes. One path for all reads keeps the order of bytes
//! whatever mix of owned reads, trait reads and dropped futures a caller
//! makes, and a trait read whose future is dropped (a timeout around
//! `AsyncReadExt::read`) loses nothing: the receive goes on and its bytes
//! are the next read's.
//!
//! On io_uring, a read that finds no bytes kept and no receive in flight
//! first receives what the socket holds straight into the caller's
//! buffer, on the calling thread (`MSG_DONTWAIT`), as tokio's read does;
//! only a socket that holds nothing arms a receive in the kernel. As on
//! tokio, a receive that took less than it had room for left the socket
//! empty, so the read after it arms a receive without trying first. A
//! protocol reader that reads again as soon as it has parsed a frame
//! (tungstenite clears its read buffer before each call) then gets the
//! bytes already there at once, rather than a pending result, a wake
//! from the driver and another call.
//!
//! Where the engine has a ring of provided buffers (io_uring, Linux
//! 6.0), a read that found the socket empty arms a multishot receive
//! instead, which the stream keeps across reads (see `ReadSide`'s kept
//! receive): each read after it copies what the receive posted into the
//! ring's buffers and gives them back, submitting nothing, until the
//! kernel ends it. A request-response connection then costs one
//! completion per request, where a receive armed per read cost a
//! submission, a completion and a second poll of the read; and an idle
//! connection waiting in a read holds no buffer. A connection holding its
//! share of the ring has the receive cancelled (`Multi`'s cap).
//!
//! On a multi-thread tokio runtime of more than one worker, a read that
//! found nothing kept waits in tokio's reactor instead and receives on the
//! task's thread, as tokio's read does (see `PollIo::poll_reactor` for
//! why): no receive is kept in the ring there.
//!
//! On the thread pool, a read that found nothing kept waits in tokio's
//! reactor the same way wherever a tokio runtime's reactor is sure to
//! run for the caller: any future on a multi-thread runtime (any number
//! of workers), a task of a current-thread runtime on the thread that
//! runs it. The socket joins that runtime's reactor at the stream's first
//! such read, and a read from another runtime moves it there. Elsewhere
//! (no runtime, a runtime with I/O disabled, a future polled directly by
//! a current-thread runtime's `block_on`, which tokio does not tell from
//! one polled where the runtime is only entered) the receive waits in the
//! engine's readiness set as an owned read's does. Owned reads, receive
//! streams and owned writes wait there always (trait writes: see
//! "Writes").
//!
//! A stream holds its receive buffer only while it needs it: once a read
//! has handed out everything received and no receive is in flight, the
//! buffer goes to a free list the process's streams share (at most
//! [`POOL_BUFFERS`]), and the next receive, this stream's or another's,
//! takes one from there. So an idle connection keeps no receive buffer
//! (thousands of idle connections cost what tokio's cost), and a stream
//! reading steadily reuses the same buffers rather than allocating and
//! zeroing one per receive.
//!
//! # Writes
//!
//! `poll_write` hands the bytes to the stream's write side, which sends
//! what the socket takes at once (when nothing is queued). A full socket
//! is waited for in tokio's reactor where one serves the caller
//! (`write_reactor_runtime`), the write pending with no byte taken, as
//! tokio's; elsewhere the write side copies the bytes into its queue and
//! sends them on its own, short sends and all, the write pending until
//! they are in the kernel (see `write_side`). Reads and writes share the
//! socket's one registration in the reactor ([`Reactor`], the stream's,
//! not the read state's: a writing half writes without the reading
//! half's lock), which moves to the runtime of whichever read or write
//! waits there from another. `poll_flush` waits until every byte is in the kernel
//! (nothing queued, no send in flight) and reports a send's error;
//! `poll_close` waits the same way, then shuts down.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{ready, Context, Poll, Waker};

use super::read_side::Settled;
use super::recv_stream::{KeepArmed, Multi};
use super::stream::StreamCore;
use crate::aio::op::{OpFuture, ReadOut, SpentTarget};
use crate::backend::Backend;

/// The smallest buffer a trait read receives into.
const MIN_RECEIVE: usize = 16 * 1024;
/// The largest.
const MAX_RECEIVE: usize = 256 * 1024;
/// The largest on io_uring, where a receive is armed only once the socket
/// was found empty: it takes the first bytes to arrive, and the reads
/// after a full one take the rest straight into the caller's buffer
/// ([`receive_inline`](PollIo::receive_inline)). A smaller buffer there
/// costs no more calls, and 50 streams receiving 1 MiB messages hold
/// 3 MiB rather than 12.
const MAX_ARMED_RECEIVE: usize = 64 * 1024;

/// Receive buffers the free list keeps at most (at most [`MAX_RECEIVE`]
/// bytes each: 8 MiB in all).
const POOL_BUFFERS: usize = 32;

/// Receive buffers of streams that had no use for them, for the next
/// receive.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Gives `buf` to the free list (with its length, so that a buffer taken
/// back needs no zeroing up to there), or frees it when the list is full.
fn pool_put(buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < POOL_BUFFERS {
        pool.push(buf);
    }
}

/// A buffer from the free list, or an empty one.
fn pool_take() -> Vec<u8> {
    POOL.lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_default()
}

/// On io_uring with a ring of provided buffers, arms a multishot receive
/// on the stream's socket and keeps it for the reads that follow (see
/// `ReadSide::keep_armed`): true, and `cx` is woken when it posts. Not
/// while the ring has no buffer left (the receive would end at once; the
/// read receives into a buffer of its own), nor on tokio's paused clock,
/// where a receive is made on the runtime's thread one at a time (see
/// `aio::paused_clock`). Called only when the socket is next and empty.
fn keep_armed(core: &StreamCore, cx: &mut Context<'_>) -> bool {
    let engine = core.sock.engine();
    let Some(ring) = engine.recv_ring() else {
        return false;
    };
    if ring.exhausted() || super::recv_stream::one_at_a_time() {
        return false;
    }
    let multi = Multi::new(core, ring, true);
    multi.arm(core, true, Some(cx.waker()));
    let armed = KeepArmed::new(multi.clone(), engine.clone());
    core.reads.keep_armed(multi, armed);
    true
}

/// A stream's socket as tokio's reactor holds it: the stream's own
/// descriptor, no duplicate, held open by the `Sock` (an `Arc` of the
/// socket) until the registration is dropped, which deregisters it first.
#[cfg(feature = "tokio")]
struct InReactor(super::socket::Sock);

#[cfg(feature = "tokio")]
impl std::os::fd::AsRawFd for InReactor {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }
}

/// A stream's one registration in tokio's reactor, which its trait reads
/// and writes share: a descriptor joins a runtime's epoll set once
/// (another registration is `EEXIST`), and a stream's writing half writes
/// without the reading half's lock, so the registration is the stream's,
/// behind a lock of its own held only to look it up.
#[cfg(feature = "tokio")]
#[derive(Default)]
pub(crate) struct Reactor(Mutex<Registered>);

/// What [`Reactor`] guards.
#[cfg(feature = "tokio")]
#[derive(Default)]
struct Registered {
    /// The runtime `fd` is registered with, or that refused the
    /// registration (I/O disabled, shutting down): an operation from
    /// another runtime registers again there.
    on: Option<tokio::runtime::Id>,
    /// The registration, shared with the operations polling it.
    fd: Option<std::sync::Arc<tokio::io::unix::AsyncFd<InReactor>>>,
    /// Whether the last read (write) that polled `fd` was left waiting
    /// there: its waker is in `fd`, whose drop would forget it without a
    /// wake, so an operation of the other direction from another runtime
    /// does not move the registration then (see [`Reactor::on`]).
    /// A trait read (write) whose future is dropped while it waits (a
    /// `select!` whose other branch won) leaves its flag set: that future
    /// is tokio's (`AsyncReadExt::read`), whose drop runs nothing of the
    /// stream's, and the waker left in `fd` cannot tell a task that will
    /// poll again from one that will not. The next poll of that direction
    /// sets the flag anew; until then an operation of the other direction
    /// from another runtime takes the path without the reactor (slower,
    /// nothing lost), where clearing the flag on a guess could drop a
    /// live task's waker unwoken.
    parked: [bool; 2],
}

/// The direction of an operation polling a stream's [`Reactor`].
#[cfg(feature = "tokio")]
#[derive(Clone, Copy)]
enum Way {
    /// A read, waiting for readability.
    Read = 0,
    /// A write, waiting for room.
    Write = 1,
}

/// A stream's registration, as an operation polls it.
#[cfg(feature = "tokio")]
type InTokio = std::sync::Arc<tokio::io::unix::AsyncFd<InReactor>>;

#[cfg(feature = "tokio")]
impl Reactor {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registered> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registration with `runtime`'s reactor, made there (and the one
    /// with another runtime dropped, which deregisters it) if it is
    /// elsewhere, for an operation going `way`: `None` where that runtime
    /// refused it, or where it is elsewhere with an operation of the other
    /// direction waiting in it (a split stream's halves polled from two
    /// runtimes at once). Moving it then would drop that operation's
    /// waker unwoken, and moving it back at its wake would make the two
    /// halves chase each other: the operation from the other runtime goes
    /// on as where no reactor serves it (a read through the ring or the
    /// readiness set, a write through the queue).
    fn on(&self, core: &StreamCore, runtime: &tokio::runtime::Handle, way: Way) -> Option<InTokio> {
        let mut reg = self.lock();
        if reg.on != Some(runtime.id()) {
            let other = match way {
                Way::Read => Way::Write,
                Way::Write => Way::Read,
            };
            if reg.fd.is_some() && reg.parked[other as usize] {
                return None;
            }
            reg.parked = [false; 2];
            reg.on = Some(runtime.id());
            reg.fd = None;
            reg.fd = crate::aio::register_in_reactor(InReactor(core.sock.clone()))
                .ok()
                .map(std::sync::Arc::new);
        }
        reg.fd.clone()
    }

    /// The registration, with whichever runtime it is.
    fn current(&self) -> Option<InTokio> {
        self.lock().fd.clone()
    }

    /// Polls `fd` (got from [`on`](Self::on)) for readiness to go `way`,
    /// noting whether the operation was left waiting there: `None` once
    /// `fd`'s runtime is shutting down (the operations then go on as where
    /// no reactor serves them, until one from another runtime registers
    /// again). Left waiting on an `fd` that is no longer the registration
    /// (an operation of the other direction, from another runtime, moved
    /// it between this one's `on` and its poll), the task is woken at once:
    /// the waker it left there goes unwoken with `fd`, and its next poll
    /// registers again or goes on without the reactor.
    fn poll_ready<'a>(
        &self,
        fd: &'a InTokio,
        way: Way,
        cx: &mut Context<'_>,
    ) -> Option<Poll<tokio::io::unix::AsyncFdReadyGuard<'a, InReactor>>> {
        let ready = match way {
            Way::Read => fd.poll_read_ready(cx),
            Way::Write => fd.poll_write_ready(cx),
        };
        match ready {
            Poll::Ready(Ok(guard)) => {
                self.park(fd, way, false);
                Some(Poll::Ready(guard))
            }
            Poll::Ready(Err(_)) => {
                self.lost(fd);
                None
            }
            Poll::Pending => {
                if !self.park(fd, way, true) {
                    cx.waker().wake_by_ref();
                }
                Some(Poll::Pending)
            }
        }
    }

    /// Notes whether the operation going `way` that polled `fd` was left
    /// waiting there; false if `fd` is no longer the registration.
    fn park(&self, fd: &InTokio, way: Way, waiting: bool) -> bool {
        let mut reg = self.lock();
        let current = reg.holds(fd);
        if current {
            reg.parked[way as usize] = waiting;
        }
        current
    }

    /// `fd`'s runtime is shutting down: the operations go on as where no
    /// reactor serves them, until one from another runtime registers there.
    fn lost(&self, fd: &InTokio) {
        let mut reg = self.lock();
        if reg.holds(fd) {
            reg.fd = None;
        }
    }
}

#[cfg(feature = "tokio")]
impl Registered {
    /// Whether `fd` is the registration now (not one since replaced).
    fn holds(&self, fd: &InTokio) -> bool {
        self.fd
            .as_ref()
            .is_some_and(|f| std::sync::Arc::ptr_eq(f, fd))
    }
}

/// The runtime in whose reactor a trait write that found the socket full
/// waits (see [`PollIo::poll_write`]), on either backend: the runtime the
/// caller runs on if it is a multi-thread runtime (its workers run the
/// reactor whatever the caller does), or a current-thread runtime and the
/// caller one of its tasks (polled by that runtime, on the thread that
/// runs it, unless a task of another runtime entered it). `None`
/// elsewhere (no runtime, a future polled directly by `block_on`): the
/// write queues its bytes as before. Unlike the thread pool's reads (see
/// [`pool_reactor_runtime`]), the engine's readiness sets are not asked:
/// they learn which thread runs a current-thread runtime only once their
/// task there has run, and a stream that only writes may never have made
/// them do so, so its first full socket would queue a write, which a
/// `select!` then drops (see `write_side`). As with tokio's own socket
/// (registered with the runtime it was made on), a write from a task of
/// a runtime that entered a current-thread runtime not running waits for
/// that runtime to run. Never where a panic aborts (see
/// [`pool_reactor_runtime`]).
#[cfg(feature = "tokio")]
fn write_reactor_runtime() -> Option<tokio::runtime::Handle> {
    if cfg!(panic = "abort") {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let run = runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread
        || tokio::task::try_id().is_some();
    run.then_some(runtime)
}

/// Whether a stream's trait reads wait in tokio's reactor on io_uring:
/// when the caller runs on a multi-thread tokio runtime of more than one
/// worker (see [`PollIo::poll_reactor`]). Never where a panic aborts, as
/// on the thread pool (see [`pool_reactor_runtime`]): a runtime whose I/O
/// is disabled tells it only by a panic, and the reads stay on the ring.
#[cfg(feature = "tokio")]
fn ring_reads_in_reactor() -> bool {
    if cfg!(panic = "abort") {
        return false;
    }
    tokio::runtime::Handle::try_current().is_ok_and(|h| {
        h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
            && h.metrics().num_workers() > 1
    })
}

/// The runtime in whose reactor a trait read on the thread pool waits:
/// the tokio runtime the caller runs on, if its reactor is run whatever
/// the caller does (a multi-thread runtime, whose workers run it), or if
/// the caller is a task of a current-thread runtime on the thread that
/// runs it (as the engine's readiness sets tell it: see
/// `Readiness::runs_current_runtime_here`). `None` elsewhere (no runtime,
/// a future polled directly by `block_on`, a runtime only entered): the
/// read waits in the engine's readiness set, as before. Never where a
/// panic aborts: tokio panics at a registration with a runtime whose I/O
/// is disabled, and only a panic that unwinds tells it.
#[cfg(feature = "tokio")]
fn pool_reactor_runtime(core: &StreamCore) -> Option<tokio::runtime::Handle> {
    if cfg!(panic = "abort") {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let run = runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread
        || core.sock.engine().runs_current_runtime_here();
    run.then_some(runtime)
}

/// The poll-based state of one stream.
#[derive(Default)]
pub(crate) struct PollIo {
    /// The receive in flight, kept only so that it is not cancelled: its
    /// result reaches the stream's read side.
    receiving: Option<OpFuture<Vec<u8>>>,
    /// The state the last receive shared with the driver, once nothing
    /// else holds it, for the next receive to reuse instead of allocating
    /// one (see `OpFuture::take_spent`).
    spent: Option<SpentTarget<Vec<u8>>>,
    /// The last receive's buffer, taken back for the next one while the
    /// stream still holds bytes to hand out (see [`release`](Self::release)).
    spare: Vec<u8>,
    /// The task of the read that returned pending and has not ended yet:
    /// polled again, it is the same read, still waiting.
    parked: Option<Waker>,
    /// The last receive took fewer bytes than it had room for, or found
    /// none: the socket was left empty, so the next read arms a receive
    /// without trying the socket first (see
    /// [`receive_inline`](Self::receive_inline)).
    emptied: bool,
    /// On io_uring, whether the stream's first trait read that had to
    /// wait decided where its reads wait (see
    /// [`poll_reactor`](Self::poll_reactor)).
    #[cfg(feature = "tokio")]
    reactor_checked: bool,
    /// On io_uring, whether that read found the reads wait in tokio's
    /// reactor.
    #[cfg(feature = "tokio")]
    ring_reads_in_reactor: bool,
    /// The last read that had to wait waits in tokio's reactor (the
    /// stream's registration is `StreamCore::reactor`).
    in_reactor: bool,
}

impl PollIo {
    /// Reads into `out`: leftover bytes first, else one receive. Only
    /// the bytes read are written to `out`.
    pub(crate) fn poll_read(
        &mut self,
        core: &StreamCore,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
    ) -> Poll<io::Result<usize>> {
        if out.room() == 0 {
            return Poll::Ready(Ok(0));
        }
        let admitted = core.sock.admit();
        let undriven = admitted.is_err();
        if let Err(e) = admitted {
            // A read that was waiting, its receive in the kernel, when the
            // last driving task went is completed by the relay thread,
            // which took the driving over: it goes on waiting, as an owned
            // read does. A read started since is refused.
            let same_read = self
                .parked
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()));
            if !(same_read
                && (self.receiving.is_some() || core.reads.has_kept() || self.waits_in_reactor()))
            {
                self.parked = None;
                return Poll::Ready(Err(e));
            }
        }
        // A read done without waiting takes its turn as an operation
        // served inline does (128 in a row, as tokio's task budget bounds
        // tokio's reads): a task reading a peer that keeps ahead of it
        // still lets the others run.
        if !crate::aio::op::inline_turn_left(cx) {
            return Poll::Pending;
        }
        let read = self.poll_read_driven(core, cx, out);
        match read {
            Poll::Ready(Ok(n)) if n > 0 => crate::aio::op::count_inline_turn(n),
            Poll::Pending => crate::aio::op::end_inline_run(),
            Poll::Ready(_) => {}
        }
        self.parked = match read {
            Poll::Pending => match self.parked.take() {
                Some(w) if w.will_wake(cx.waker()) => Some(w),
                _ => Some(cx.waker().clone()),
            },
            Poll::Ready(_) => None,
        };
        if undriven && read.is_pending() {
            core.sock.parked_undriven();
        }
        read
    }

    /// [`poll_read`](Self::poll_read) once the engine is driven (or its
    /// receive is).
    fn poll_read_driven(
        &mut self,
        core: &StreamCore,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
    ) -> Poll<io::Result<usize>> {
        let settled = ready!(core.reads.poll_settle(cx, out));
        self.reclaim(cx);
        match settled {
            Settled::Copied(n) => {
                self.release(core);
                return Poll::Ready(Ok(n));
            }
            Settled::Failed(errno) => {
                core.read_failed(errno);
                let err = io::Error::from_raw_os_error(errno);
                return Poll::Ready(Err(super::os_error(err)));
            }
            Settled::Receive => {}
        }
        #[cfg(feature = "tokio")]
        if let Some(read) = self.poll_reactor(core, cx, out) {
            self.release(core);
            return read;
        }
        if let Some(read) = self.receive_inline(core, out) {
            self.release(core);
            return Poll::Ready(read);
        }
        if keep_armed(core, cx) {
            self.release(core);
            return Poll::Pending;
        }
        let mut buf = std::mem::take(&mut self.spare);
        if buf.capacity() == 0 {
            buf = pool_take();
        }
        let max = match core.sock.engine().backend() {
            Backend::IoUring => MAX_ARMED_RECEIVE,
            _ => MAX_RECEIVE,
        };
        buf.resize(out.room().clamp(MIN_RECEIVE, max), 0);
        // Made in place: the future is large, and moving it costs a copy.
        let fut = self
            .receiving
            .insert(core.sock.recv_reusing(buf, self.spent.take()));
        fut.start();
        // The poll stores the waker, under the lock the completion
        // takes, so a completion racing the submission finds it.
        let Poll::Ready((res, buf)) = Pin::new(&mut *fut).poll(cx) else {
            core.reads.detach(fut.abandoned_handle(), None);
            // Nothing else to wait for: the stream keeps no bytes and
            // has no other receive in flight (the read side settled
            // above), and this receive's completion wakes the task.
            return Poll::Pending;
        };
        // Refused before submission, or already complete.
        self.receiving = None;
        if let Err(e) = &res {
            core.read_failed(crate::errno(e).unwrap_or(0));
        }
        let n = res.map_err(super::os_error)?;
        self.emptied = n < buf.len();
        let k = n.min(out.room());
        out.put(&buf[..k]);
        core.reads.keep(&buf[k..n]);
        self.spare = buf;
        self.release(core);
        Poll::Ready(Ok(k))
    }

    /// On io_uring, receives what the socket holds straight into `out`,
    /// on the calling thread, without waiting (`MSG_DONTWAIT`), before a
    /// receive is armed in the kernel: `None` when the socket holds
    /// nothing, and the receive goes through the driver. Called only when
    /// the stream keeps no bytes and no receive is in flight, so what the
    /// socket holds comes next. The thread pool's receive already tries
    /// the socket first.
    ///
    /// As tokio's read does, it is not tried after a receive that took
    /// less than it had room for: the socket was empty then, and a
    /// request-response exchange would pay a call that says `EAGAIN` on
    /// every message.
    fn receive_inline(
        &mut self,
        core: &StreamCore,
        out: &mut dyn ReadOut,
    ) -> Option<io::Result<usize>> {
        if self.emptied || core.sock.engine().backend() != Backend::IoUring {
            return None;
        }
        let room = out.room();
        // SAFETY: only the kernel writes into the slice, and only bytes it
        // received.
        let unfilled = unsafe { out.unfilled() };
        match core.sock.recv_into_inline(unfilled) {
            Ok(n) => {
                // SAFETY: the kernel wrote the first `n` bytes (recv
                // returns how many, at most the slice's length).
                unsafe { out.advance(n) };
                self.emptied = n < room;
                Some(Ok(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.emptied = true;
                None
            }
            Err(e) => {
                core.read_failed(crate::errno(&e).unwrap_or(0));
                Some(Err(super::os_error(e)))
            }
        }
    }

    /// Waits for the socket to be readable in tokio's reactor and receives
    /// on the task's own thread (`MSG_DONTWAIT`), as tokio's read does: on
    /// io_uring, on a multi-thread tokio runtime of more than one worker,
    /// instead of through a kept multishot receive; on the thread pool,
    /// wherever a tokio runtime's reactor is sure to run for the caller
    /// (see [`pool_reactor_runtime`]), instead of through a receive handed
    /// to the engine's readiness set. `None` where this does not apply
    /// (the read goes on as before). Called only when the stream keeps no
    /// bytes and no receive is in flight, so what the socket holds comes
    /// next, whatever owned reads, trait reads and dropped futures came
    /// before.
    ///
    /// Why, on the thread pool: a receive that found the socket empty was
    /// a request waiting in the readiness set (the request, its shared
    /// state, two polls of its future, its bytes through the read side's
    /// leftover), where tokio's read is a receive behind a readiness bit
    /// (`docs/benchmarks.md`, "mini-redis on the thread-pool fallback:
    /// trait reads through tokio's reactor").
    ///
    /// Why, on io_uring: a receive armed in the ring has its completion
    /// posted by task work on the worker that armed it, which the kernel
    /// wakes for it even where it sleeps on tokio's condvar, and whose
    /// posting then wakes the other worker out of `epoll_wait`: two
    /// workers woken per batch of requests where tokio wakes one
    /// (`docs/benchmarks.md`, "mini-redis on two workers"). On one worker,
    /// the reactor's thread is the one that armed the receive, and the
    /// kept receive costs no system call per read: it stays.
    #[cfg(feature = "tokio")]
    fn poll_reactor(
        &mut self,
        core: &StreamCore,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
    ) -> Option<Poll<io::Result<usize>>> {
        self.in_reactor = false;
        let afd = self.reactor(core)?;
        loop {
            // `None`: the reactor's runtime is shutting down, and the reads
            // go through the ring from here.
            let mut guard = match core.reactor.poll_ready(&afd, Way::Read, cx)? {
                Poll::Ready(g) => g,
                Poll::Pending => {
                    self.in_reactor = true;
                    return Some(Poll::Pending);
                }
            };
            let room = out.room();
            // SAFETY: only the kernel writes into the slice, and only bytes
            // it received.
            let unfilled = unsafe { out.unfilled() };
            match core.sock.recv_into_inline(unfilled) {
                Ok(n) => {
                    // SAFETY: the kernel wrote the first `n` bytes.
                    unsafe { out.advance(n) };
                    // As tokio's read: a receive that took less than it had
                    // room for left the socket empty.
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    return Some(Poll::Ready(Ok(n)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) => {
                    core.read_failed(crate::errno(&e).unwrap_or(0));
                    return Some(Poll::Ready(Err(super::os_error(e))));
                }
            }
        }
    }

    /// The registration in tokio's reactor this read waits in, made if it
    /// is to wait there and is not yet (see
    /// [`poll_reactor`](Self::poll_reactor)); `None` where the read goes
    /// on as before. On io_uring the stream's first read that waits
    /// decides for all; on the thread pool each read that waits asks
    /// where its caller runs, so a stream read from a task of another
    /// runtime than before moves to that runtime's reactor, and one read
    /// where no reactor is sure to run waits in the engine's readiness set.
    #[cfg(feature = "tokio")]
    fn reactor(&mut self, core: &StreamCore) -> Option<InTokio> {
        match core.sock.engine().backend() {
            Backend::IoUring => {
                if !self.reactor_checked {
                    self.reactor_checked = true;
                    self.ring_reads_in_reactor = ring_reads_in_reactor();
                }
                if !self.ring_reads_in_reactor {
                    return None;
                }
                // Registered with the runtime the stream's first waiting
                // read ran on, or (the writes share the registration) with
                // the multi-thread runtime it is read or written on now; a
                // runtime with I/O disabled refuses, and the reads go
                // through the ring.
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime)
                        if runtime.runtime_flavor()
                            == tokio::runtime::RuntimeFlavor::MultiThread =>
                    {
                        core.reactor.on(core, &runtime, Way::Read)
                    }
                    _ => core.reactor.current(),
                }
            }
            Backend::ThreadPool => {
                let runtime = pool_reactor_runtime(core)?;
                // Deregistered from the runtime before, if any, then
                // registered with this one; a refusal (I/O disabled,
                // shutting down) leaves the reads to the readiness set on
                // this runtime.
                core.reactor.on(core, &runtime, Way::Read)
            }
        }
    }

    /// Whether the stream's trait reads wait in tokio's reactor (see
    /// [`poll_reactor`](Self::poll_reactor)): a read waiting there needs
    /// no driven engine.
    fn waits_in_reactor(&self) -> bool {
        self.in_reactor
    }

    /// Takes back the buffer of the receive that has settled (its bytes are
    /// already with the read side), noting whether it left the socket
    /// empty.
    fn reclaim(&mut self, cx: &mut Context<'_>) {
        if let Some(fut) = &mut self.receiving {
            if let Poll::Ready((res, buf)) = Pin::new(&mut *fut).poll(cx) {
                self.emptied = !matches!(res, Ok(n) if n == buf.len());
                self.spare = buf;
                self.spent = fut.take_spent();
            }
            // Dropped in place (moving it out would copy it).
            self.receiving = None;
        }
    }

    /// Gives the receive buffer to the free list once the stream holds
    /// nothing for its next read and no receive is in flight.
    fn release(&mut self, core: &StreamCore) {
        if self.receiving.is_none() && self.spare.capacity() > 0 && core.reads.drained() {
            pool_put(std::mem::take(&mut self.spare));
        }
    }

    /// Writes `data` through the stream's write side (see `write_side`).
    /// The writes need none of the reads' state, so a stream's writing
    /// half calls these without the reading half's lock.
    ///
    /// Where a tokio runtime's reactor serves the caller (see
    /// [`write_reactor_runtime`]), a write that finds the socket full
    /// waits for room in that reactor and is pending *having taken no
    /// byte*, as tokio's write is: a `select!` that drops it and writes
    /// other bytes loses nothing and repeats nothing. Elsewhere its bytes
    /// are queued (see `write_side`).
    pub(crate) fn poll_write(
        core: &StreamCore,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        core.sock.admit()?;
        #[cfg(feature = "tokio")]
        let mut in_reactor = |cx: &mut Context<'_>, send: &mut dyn FnMut() -> Option<_>| {
            Self::poll_write_in_reactor(core, cx, send)
        };
        #[cfg(not(feature = "tokio"))]
        let mut in_reactor = |_: &mut Context<'_>, _: &mut dyn FnMut() -> Option<_>| None;
        core.writes.poll_write(cx, data, &mut in_reactor)
    }

    /// Waits for room in the socket in tokio's reactor and calls `send`
    /// (a send on this thread, `MSG_DONTWAIT`: `None` when the socket
    /// took nothing) once there is, as tokio's write does: `None` where no
    /// reactor serves the caller, or its runtime is shutting down (the
    /// write queues its bytes then).
    #[cfg(feature = "tokio")]
    fn poll_write_in_reactor(
        core: &StreamCore,
        cx: &mut Context<'_>,
        send: &mut dyn FnMut() -> Option<io::Result<usize>>,
    ) -> Option<Poll<io::Result<usize>>> {
        let runtime = write_reactor_runtime()?;
        let afd = core.reactor.on(core, &runtime, Way::Write)?;
        loop {
            let Poll::Ready(mut guard) = core.reactor.poll_ready(&afd, Way::Write, cx)? else {
                return Some(Poll::Pending);
            };
            match send() {
                Some(sent) => return Some(Poll::Ready(sent)),
                // Full: the readiness this guard saw is spent.
                None => guard.clear_ready(),
            }
        }
    }

    /// Waits until every byte reported written is in the kernel (see
    /// `WriteSide::poll_flush`).
    pub(crate) fn poll_flush(core: &StreamCore, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        core.sock.admit()?;
        core.writes.poll_flush(cx)
    }

    /// Waits until every byte reported written is in the kernel, the last
    /// send completed (its error reported), then shuts the writing side
    /// down.
    pub(crate) fn poll_close(core: &StreamCore, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        core.sock.admit()?;
        ready!(core.writes.poll_drained(cx))?;
        match core.shutdown(std::net::Shutdown::Write) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Poll::Ready(Ok(())),
            r => Poll::Ready(r),
        }
    }
}
