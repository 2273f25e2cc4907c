//! Writes that lose nothing and send nothing twice.
//!
//! # Bytes the I/O traits accept keep moving on their own
//!
//! A `poll_write` on a stream with nothing queued and no
//! send in flight first sends what the socket takes straight from the
//! caller's slice, on the calling thread (`MSG_DONTWAIT`), as tokio's
//! write does: those bytes are in the kernel when it returns, with no
//! copy, no submission and no completion to wait for. Only when the
//! socket takes nothing (it is full), or a send is in flight already,
//! do bytes go to the queue below. The thread pool does the same: a
//! write the socket takes then costs no copy and no request either.
//!
//! Where a tokio runtime's reactor serves the caller (a future on a
//! multi-thread runtime, a task of a current-thread runtime on its
//! thread; either backend), a write that finds the socket full queues
//! nothing: it waits for room in that reactor, the socket registered
//! there once for the stream's trait reads and writes, and is pending
//! *having taken no byte*, as tokio's write is (tokio documents its
//! `write` as cancel-safe). A `select!` that drops it and writes other
//! bytes (a slice that ends elsewhere) loses nothing and repeats
//! nothing; polled again, it sends what the socket takes and returns
//! that count. With bytes queued or a send in flight (an owned write's,
//! a write's queued where no reactor served it), a trait write waits
//! for them to reach the kernel first, taking nothing meanwhile.
//!
//! Elsewhere (a `futures` executor, a future polled directly by
//! `block_on`, a runtime with I/O disabled, where a panic aborts) no
//! reactor would wake such a write, and a full socket is met by the
//! queue below. `poll_write` lends a slice for one poll only, so the
//! bytes it queues
//! are copied into the stream's queue, and their send started; the write
//! is pending until they are in the kernel, and polled again then (with
//! the same bytes, as `write_all` polls it) reports them written. So a
//! write that returned is in the kernel, as tokio's is, and a program
//! that exits right after it (returning from `main`, without a flush)
//! loses nothing: the kernel sends what the socket holds after the
//! process is gone. Should the caller go on with other bytes instead
//! (or drop the pending write and write something else), the next write
//! says that the earlier ones went, with a [`WriteDropped`] error, as
//! after a dropped owned write. From the copy on the bytes belong to the
//! stream's *pump*: a small state machine that
//! is its own waker. Each time a send completes, the completion wakes the
//! pump (on whichever thread reaps it: the driver thread, the thread
//! driving a caller-driven ring, or the epoll thread) and the pump starts
//! the next send: the rest of a short send, then whatever was queued
//! meanwhile. So accepted bytes reach the kernel whether or not anybody
//! writes, flushes or polls the stream again, and a request/response peer
//! waiting for the whole reply gets it.
//!
//! The pump holds the socket through its send in flight, so dropping the
//! stream does not cut the queue short: the descriptor closes once the
//! last queued byte is in the kernel (or a send fails), as closing a
//! socket lets the kernel finish sending what it holds. Nothing waits in
//! `Drop`. A peer that never reads holds a dropped stream's queue for at
//! most its linger limit ([`LINGER`] unless set); then the send is
//! cancelled, the rest of the queue dropped and the socket closed with a
//! reset (`SO_LINGER` 0), so the peer reads `ECONNRESET` and cannot take
//! the cut-off stream for a complete one.
//!
//! The stream's own `shutdown(Write)` goes behind the queue: with bytes
//! queued it is noted, and the pump shuts the writing side once the last
//! of them is in the kernel (or sending failed), so a shutdown never cuts
//! off bytes a write reported written. From the shutdown on, writes fail
//! with `EPIPE`, as the kernel's do.
//!
//! Memory is bounded: `poll_write` queues up to [`QUEUE_LIMIT`] bytes
//! (a larger slice in part, as a short write), and only while nothing
//! else is queued or in flight. The queue and the send in flight trade buffers: a finished
//! send's buffer becomes the queue's next one. Once everything is sent,
//! buffers larger than [`SPARE_LIMIT`] go to a free list the process's
//! streams share (at most [`POOL_BUFFERS`] of them; the rest are freed),
//! so that an idle connection keeps little memory, and the next large
//! write (this stream's or another's) takes its buffer from there rather
//! than from the allocator: a stream writing large replies one after
//! another reuses the same buffers instead of allocating one per send.
//!
//! A flush waits until every queued byte is in the kernel: after a write
//! that returned, that is at once, as a tokio flush; only the send of a
//! write left pending (or of an owned write dropped) is waited for.
//! The traits' shutdown (`poll_close`, `poll_shutdown`) and an owned
//! write wait the same way ([`WriteSide::poll_drained`]).
//!
//! A failed send's errno is kept, never lost: the next write, flush or
//! trait shutdown reports it, and
//! the bytes queued behind it are dropped (the connection is broken).
//! Every write and flush after that fails too (`EPIPE`, as the kernel
//! answers sends on a broken connection): none is `Ok` for bytes that
//! would be thrown away. A reset a read of the stream returned counts
//! the same ([`WriteSide::peer_reset`]): the writes fail from then on,
//! without waiting for a send to find it.
//!
//! # A dropped owned write is reported, never repeated silently
//!
//! An owned `write` (or `write_all`, `writev`) whose future is dropped
//! while its send is in the kernel (a timeout) has its send cancelled; the
//! kernel may still have sent some or all of its bytes before the
//! cancellation reached it. Those bytes cannot be taken back, and the
//! caller cannot know of them, so the stream remembers: its next write
//! (owned or through the traits) first waits for the dropped send's
//! result, and if it sent any byte, fails with a [`WriteDropped`] error
//! that says how many of the dropped write's bytes went, sending nothing.
//! The write after that proceeds. A dropped write that sent nothing (the
//! usual outcome of a cancellation) is forgotten silently: retrying it
//! whole is right, as on tokio.
//!
//! A dropped write's send is usually cancelled before the kernel got it,
//! so a loop that drops every pending write (a `select!` whose other
//! branch is ready each turn) would send nothing, ever. So after an owned
//! write dropped pending, the stream's next owned writes
//! ([`INLINE_AFTER_DROP`] of them) make their send inline, in their
//! first poll, on the calling thread (`MSG_DONTWAIT`), as tokio's write
//! does: whatever the socket takes is the write's result at once, and
//! only a socket with no room sends the write through the driver. Such a
//! loop then moves bytes whenever the socket has room.

use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use super::socket::Sock;
use crate::aio::op::{OpFuture, Settles};
use crate::aio::Lingering;

/// Bytes a trait write queues at most, when the socket is full.
pub(crate) const QUEUE_LIMIT: usize = 256 * 1024;

/// The largest buffer an idle stream keeps for its next write: larger
/// ones (a big write's) are freed once everything is sent, so that an
/// idle connection keeps little memory.
const SPARE_LIMIT: usize = 64 * 1024;

/// The largest buffer kept while bytes are moving, or pooled: a full
/// queue's (its capacity may have doubled past [`QUEUE_LIMIT`] as it
/// grew).
const BUSY_SPARE_LIMIT: usize = 2 * QUEUE_LIMIT;

/// Buffers the free list of large send buffers keeps at most (at most
/// [`BUSY_SPARE_LIMIT`] bytes each: 16 MiB in all).
const POOL_BUFFERS: usize = 32;

/// Large send buffers of idle streams, for the next large write.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Gives `buf` to the free list, or frees it when the list is full or
/// `buf` is too large to keep.
fn pool_put(mut buf: Vec<u8>) {
    if buf.capacity() > BUSY_SPARE_LIMIT {
        return;
    }
    buf.clear();
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < POOL_BUFFERS {
        pool.push(buf);
    }
}

/// An empty buffer from the free list, if it has one.
fn pool_take() -> Option<Vec<u8>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner()).pop()
}

/// How long a dropped stream's queued bytes may wait for a peer that does
/// not read, before the send is cancelled and the socket closed, unless
/// the stream says otherwise.
pub(crate) const LINGER: Duration = Duration::from_secs(60);

/// A write whose future was dropped after its send was started, said by
/// the stream's next write: `sent` of its `len` bytes went to the peer.
///
/// Comes back inside an [`io::Error`] of kind
/// [`Other`](io::ErrorKind::Other); [`WriteDropped::of`] finds it. The
/// stream goes on after the `sent` bytes: resend only the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteDropped {
    /// The bytes of the dropped write the kernel sent.
    pub sent: usize,
    /// The bytes the dropped write was given.
    pub len: usize,
}

impl WriteDropped {
    /// The report inside `err`, if `err` is one.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// use blockio::net::WriteDropped;
    ///
    /// // An error that is not a dropped write's says nothing of sent bytes.
    /// let err = std::io::Error::from_raw_os_error(libc::EPIPE);
    /// assert!(WriteDropped::of(&err).is_none());
    /// # drop((client, server));
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn of(err: &io::Error) -> Option<&WriteDropped> {
        err.get_ref()?.downcast_ref()
    }
}

impl fmt::Display for WriteDropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (sent, len) = (self.sent, self.len);
        if sent >= len {
            write!(
                f,
                "a write dropped before it completed had sent all {len} of its bytes; \
                 nothing more was sent: none of them is to be resent"
            )
        } else if sent == 0 {
            write!(
                f,
                "a write dropped before it completed had sent none of its {len} bytes; \
                 nothing more was sent: resend all of them"
            )
        } else {
            write!(
                f,
                "a write dropped before it completed had sent {sent} of its {len} bytes; \
                 nothing more was sent: resend only the last {}",
                len - sent
            )
        }
    }
}

impl std::error::Error for WriteDropped {}

/// The write state of one stream.
pub(crate) struct WriteSide {
    pump: Arc<Pump>,
}

impl Drop for WriteSide {
    /// The stream is gone: what is queued goes on being sent, for at most
    /// [`LINGER`].
    fn drop(&mut self) {
        {
            let mut st = self.pump.lock();
            if st.idle() {
                return;
            }
            st.linger = Some(futures_timer::Delay::new(st.linger_limit));
            // Counted by the engine while the queue is sent, so that a
            // caller-driven engine left without its driver is driven
            // until then.
            st.lingering = st.sock.as_ref().map(|sock| Lingering::new(sock.engine()));
        }
        self.pump.run();
    }
}

/// Moves accepted bytes to the kernel, one send at a time.
struct Pump {
    state: Mutex<SendBook>,
    /// Someone asked for a step since the last one began.
    notified: AtomicBool,
    /// A thread is stepping the pump.
    running: AtomicBool,
}

/// Why sending stopped.
#[derive(Clone, Copy)]
enum Failure {
    Errno(i32),
    /// A send took no bytes.
    Zero,
}

/// What the pump guards: the bytes to send, the send in flight, and why
/// sending stopped.
struct SendBook {
    /// The socket and its engine; let go when the linger runs out, so
    /// that an engine nobody drives any more can finish (its completions
    /// are then reaped by its own finishing, which wakes this pump once
    /// more to let go of the rest).
    sock: Option<Sock>,
    /// Bytes accepted and not yet handed to a send.
    queued: Vec<u8>,
    /// The send in flight and where in its buffer it started.
    sending: Option<(OpFuture<Vec<u8>>, usize)>,
    /// A finished send's buffer, for the next one.
    spare: Vec<u8>,
    /// Why sending stopped: every later write and flush fails (the first
    /// with this, the rest with `EPIPE`, as the kernel reports a broken
    /// connection).
    failed: Option<Failure>,
    /// The writing side is shut down (or asked to be): writes fail with
    /// `EPIPE`.
    shut: bool,
    /// A `shutdown(Write)` that waits for the queue to reach the kernel.
    shutdown_queued: bool,
    /// Tasks waiting for room in the queue or for it to empty.
    waiters: Vec<Waker>,
    /// An owned write whose future was dropped with its send in flight.
    dropped: Option<Dropped>,
    /// Set when the stream is dropped: the time the queue has left.
    linger: Option<futures_timer::Delay>,
    /// How long the queue may linger after the stream is dropped.
    linger_limit: Duration,
    /// The engine's count of this dropped stream, from the drop until the
    /// pump itself goes (its last send reaped, and with it the socket
    /// closed): a relay thread driving the engine meanwhile stays until
    /// the close, a reset's included.
    lingering: Option<Lingering>,
    /// Sends in a row the kernel cancelled (see [`SendBook::step`]).
    cancelled: u32,
    /// Owned writes still to try their send inline, on the calling
    /// thread (see [`WriteSide::send_inline`]).
    inline: u32,
    /// The last trait write's send found the socket full or took only
    /// part of its bytes: the next one waits for room in tokio's reactor
    /// before it sends, where one serves it (see
    /// [`WriteSide::poll_write`]).
    full: bool,
    /// The trait write that returned pending with its bytes queued: it
    /// is done once the queue is in the kernel.
    accepting: Option<Accepting>,
}

/// The bytes of a trait write that returned pending once they were
/// queued (see [`WriteSide::poll_write`]): the write is done, with as many
/// bytes written, once the queue has reached the kernel.
struct Accepting {
    /// A copy of the write's bytes, to know the same write polled again
    /// from another one: compared whole, so that no other bytes are ever
    /// reported written in their place. Made only when the socket was
    /// full (the write waits for the network then), from the free list
    /// when large.
    bytes: Vec<u8>,
}

impl Accepting {
    fn of(data: &[u8]) -> Accepting {
        let mut bytes = match data.len() > SPARE_LIMIT {
            true => pool_take().unwrap_or_default(),
            false => Vec::new(),
        };
        bytes.extend_from_slice(data);
        Accepting { bytes }
    }

    /// Whether `data` starts with the bytes this write queued.
    fn same(&self, data: &[u8]) -> bool {
        data.get(..self.bytes.len()) == Some(&self.bytes[..])
    }

    /// The count of bytes this write queued, its copy given back.
    fn finish(self) -> usize {
        let len = self.bytes.len();
        if self.bytes.capacity() > SPARE_LIMIT {
            pool_put(self.bytes);
        }
        len
    }

    /// The report of a write whose queued bytes were sent although its
    /// caller went on with other bytes (or none).
    fn dropped(self) -> io::Error {
        let len = self.finish();
        io::Error::other(WriteDropped { sent: len, len })
    }
}

/// Sends in a row cancelled by the kernel that the pump sends again
/// before it fails the queue with `ECANCELED`: a bound on a loop, far
/// above the few cancels of a hand-over.
const CANCELLED_RETRIES: u32 = 1000;

/// Owned writes that try their send inline after an owned write was
/// dropped pending (see [`WriteSide::send_inline`]).
const INLINE_AFTER_DROP: u32 = 64;

/// An owned write dropped with its send in the kernel.
struct Dropped {
    /// Its bytes sent by its earlier sends (a `write_all`'s).
    before: usize,
    len: usize,
    /// The send that was in flight.
    op: Arc<dyn Settles>,
}

impl SendBook {
    fn idle(&self) -> bool {
        self.sending.is_none() && self.queued.is_empty()
    }

    fn error(&mut self) -> Option<io::Error> {
        let f = self.failed?;
        // Reported once; later calls say the connection is broken.
        self.failed = Some(Failure::Errno(libc::EPIPE));
        let err = match f {
            Failure::Errno(errno) => io::Error::from_raw_os_error(errno),
            Failure::Zero => io::Error::new(io::ErrorKind::WriteZero, "the peer took no bytes"),
        };
        Some(err)
    }

    fn wait(&mut self, cx: &Context<'_>) {
        if !self.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            self.waiters.push(cx.waker().clone());
        }
    }

    /// Starts sending `buf[from..]`.
    fn start(&mut self, buf: Vec<u8>, from: usize, cx: &Context<'_>) {
        let Some(sock) = &self.sock else {
            self.failed = Some(Failure::Errno(libc::ETIMEDOUT));
            self.queued = Vec::new();
            return;
        };
        let mut fut = sock.send(buf, from);
        fut.set_waker(cx.waker());
        // Bytes already accepted: sent from whichever thread steps the
        // pump, never refused half-way.
        fut.resume();
        self.sending = Some((fut, from));
    }

    /// With nothing queued and no send in flight, sends what the socket
    /// takes of `data` at once, on the calling thread (`MSG_DONTWAIT`), as
    /// tokio's write does: `None` when the socket takes nothing, and the
    /// bytes go to the queue. Nothing is copied, and a flush after it has
    /// nothing to wait for.
    fn send_inline(&mut self, data: &[u8]) -> Option<io::Result<usize>> {
        let sock = self.sock.as_ref()?;
        if !self.idle() {
            return None;
        }
        match sock.send_bytes_inline(data) {
            Ok(0) => None,
            Ok(n) => Some(Ok(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => {
                // Reported now; the writes after it fail as after a
                // failed send.
                self.failed = Some(Failure::Errno(libc::EPIPE));
                Some(Err(super::os_error(e)))
            }
        }
    }

    /// The pending trait write's result, polled again with `data`: its
    /// length once its queued bytes are in the kernel (the error that
    /// stopped them, if one did). `data` must start with the same bytes
    /// (a retry, as `write_all` makes); else those bytes went without
    /// their write, and the caller hears of it as of a dropped owned
    /// write ([`WriteDropped`]).
    fn poll_accepted(&mut self, cx: &Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if !self.idle() {
            self.wait(cx);
            return Poll::Pending;
        }
        let Some(accepting) = self.accepting.take() else {
            return Poll::Ready(Ok(0));
        };
        if let Some(err) = self.error() {
            return Poll::Ready(Err(err));
        }
        if accepting.same(data) {
            Poll::Ready(Ok(accepting.finish()))
        } else {
            Poll::Ready(Err(accepting.dropped()))
        }
    }

    /// Gives the buffers an idle stream should not keep to the free list.
    fn trim(&mut self) {
        if self.spare.capacity() > SPARE_LIMIT {
            pool_put(std::mem::take(&mut self.spare));
        }
        if self.queued.capacity() > SPARE_LIMIT {
            pool_put(std::mem::take(&mut self.queued));
        }
    }

    /// Shuts the writing side down if a shutdown waits for the queue
    /// (which is empty).
    fn shut_queued(&mut self) {
        if std::mem::take(&mut self.shutdown_queued) {
            if let Some(sock) = &self.sock {
                // Its error (the connection is gone already) has nobody
                // to go to; the peer sees the end either way.
                let _ = sock.socket.shutdown(std::net::Shutdown::Write);
            }
        }
    }

    /// Moves the queue along as far as it goes without waiting; says
    /// whether a send completed (waiters then have news).
    fn step(&mut self, cx: &mut Context<'_>) -> Step {
        let mut progress = Step::NoNews;
        if let Some(limit) = &mut self.linger {
            if Pin::new(limit).poll(cx).is_ready() && !self.idle() {
                // The timer holds this pump's waker: let it go now.
                self.linger = None;
                // Dropping the future cancels the send in the kernel.
                self.sending = None;
                // The peer is told the stream was cut short: the close
                // (once the cancelled send lets the socket go) resets the
                // connection instead of ending it cleanly.
                if let Some(sock) = self.sock.take() {
                    let _ = sock.socket.set_linger(Some(Duration::ZERO));
                }
                self.shutdown_queued = false;
                self.queued = Vec::new();
                self.failed = Some(Failure::Errno(libc::ETIMEDOUT));
                return Step::SendCompleted;
            }
        }
        loop {
            if let Some((fut, from)) = &mut self.sending {
                let from = *from;
                let Poll::Ready((res, buf)) = Pin::new(fut).poll(cx) else {
                    return progress;
                };
                self.sending = None;
                progress = Step::SendCompleted;
                if matches!(res, Ok(n) if n > 0) {
                    self.cancelled = 0;
                }
                match res {
                    Ok(0) => self.failed = Some(Failure::Zero),
                    Ok(n) if from + n < buf.len() => {
                        self.start(buf, from + n, cx);
                        continue;
                    }
                    Ok(_) if buf.capacity() <= BUSY_SPARE_LIMIT => self.spare = buf,
                    Ok(_) => {}
                    Err(e)
                        if crate::errno(&e) == Some(libc::ECANCELED)
                            && self.cancelled < CANCELLED_RETRIES =>
                    {
                        // Not cancelled by the pump (it never drops a send
                        // it still polls): the kernel cancels a thread's
                        // waiting socket operations when that thread
                        // exits, and any thread may have stepped the pump
                        // (a relay thread handing over, a runtime's worker
                        // at shutdown). Nothing of it was sent (a send
                        // that had sent bytes completes with their count),
                        // so it is sent again, from this thread.
                        self.cancelled += 1;
                        self.start(buf, from, cx);
                        continue;
                    }
                    Err(e) => {
                        let errno = crate::errno(&e).unwrap_or(libc::EIO);
                        self.failed = Some(Failure::Errno(errno));
                    }
                }
                if self.failed.is_some() {
                    self.queued = Vec::new();
                }
            }
            if self.queued.is_empty() || self.failed.is_some() {
                if self.idle() {
                    self.linger = None;
                    self.shut_queued();
                    self.trim();
                }
                return progress;
            }
            let mut buf = std::mem::take(&mut self.spare);
            buf.clear();
            std::mem::swap(&mut buf, &mut self.queued);
            self.start(buf, 0, cx);
        }
    }
}

/// What one [step](SendBook::step) of the pump did, for its waiters.
enum Step {
    /// A send completed (or the linger ran out and failed the queue):
    /// waiters have news.
    SendCompleted,
    /// Nothing a waiter waits for changed.
    NoNews,
}

impl Wake for Pump {
    fn wake(self: Arc<Self>) {
        self.run();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.run();
    }
}

trait Run {
    fn run(&self);
}

impl Run for Arc<Pump> {
    /// Steps the pump, on this thread unless another thread is stepping it
    /// (that one then steps again). A send that completes while it is
    /// being started (on epoll, at once) wakes the pump from inside a
    /// step: the flag makes that wake-up a note for the running loop, not
    /// a second step under the same lock.
    fn run(&self) {
        self.notified.store(true, Ordering::SeqCst);
        loop {
            if self.running.swap(true, Ordering::SeqCst) {
                return;
            }
            while self.notified.swap(false, Ordering::SeqCst) {
                let waker = Waker::from(self.clone());
                let mut cx = Context::from_waker(&waker);
                let woken = {
                    let mut st = self.lock();
                    match st.step(&mut cx) {
                        Step::SendCompleted => std::mem::take(&mut st.waiters),
                        Step::NoNews => Vec::new(),
                    }
                };
                woken.into_iter().for_each(Waker::wake);
            }
            self.running.store(false, Ordering::SeqCst);
            if !self.notified.load(Ordering::SeqCst) {
                return;
            }
        }
    }
}

impl Pump {
    fn lock(&self) -> MutexGuard<'_, SendBook> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl WriteSide {
    pub(crate) fn new(sock: Sock) -> WriteSide {
        WriteSide {
            pump: Arc::new(Pump {
                state: Mutex::new(SendBook {
                    sock: Some(sock),
                    queued: Vec::new(),
                    sending: None,
                    spare: Vec::new(),
                    failed: None,
                    shut: false,
                    shutdown_queued: false,
                    waiters: Vec::new(),
                    dropped: None,
                    linger: None,
                    linger_limit: LINGER,
                    lingering: None,
                    cancelled: 0,
                    inline: 0,
                    full: false,
                    accepting: None,
                }),
                notified: AtomicBool::new(false),
                running: AtomicBool::new(false),
            }),
        }
    }

    /// Sets how long the queue may go on sending after the stream is
    /// dropped.
    pub(crate) fn set_linger(&self, limit: Duration) {
        self.pump.lock().linger_limit = limit;
    }

    /// A read on the stream found the connection reset by the peer: from
    /// now on writes fail with `EPIPE`, as the kernel's `send` does (and
    /// tokio's write), rather than taking bytes that would be thrown away.
    pub(crate) fn peer_reset(&self) {
        let mut st = self.pump.lock();
        if st.failed.is_none() {
            st.failed = Some(Failure::Errno(libc::EPIPE));
        }
    }

    /// Writes up to all of `data`, once a dropped write has been settled:
    /// ready with the count of bytes in the kernel, sent at once or
    /// through the queue (pending until its send completes).
    ///
    /// A write that is done without waiting (sent at once)
    /// counts against the thread's budget of operations served in a row
    /// without a `Pending`, as tokio's writes count against its task
    /// budget: once that is spent, `Pending` (the task woken to run after
    /// the others, through tokio's scheduler on tokio), so
    /// that a task writing to a reader that keeps up still lets the
    /// others run.
    ///
    /// `in_reactor` waits for room where a tokio reactor serves the
    /// caller (see [`InReactor`]); where it says `None`, bytes the socket
    /// does not take are queued.
    pub(crate) fn poll_write(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
        in_reactor: InReactor<'_>,
    ) -> Poll<io::Result<usize>> {
        if !crate::aio::op::inline_turn_left(cx) {
            return Poll::Pending;
        }
        let done = self.poll_write_now(cx, data, in_reactor);
        if let Poll::Ready(Ok(n @ 1..)) = done {
            crate::aio::op::count_inline_turn(n);
        }
        done
    }

    /// [`WriteSide::poll_write`], the budget aside.
    fn poll_write_now(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
        in_reactor: InReactor<'_>,
    ) -> Poll<io::Result<usize>> {
        {
            let mut st = self.pump.lock();
            if let Some(err) = std::task::ready!(poll_dropped(&mut st, cx)) {
                return Poll::Ready(Err(err));
            }
            if st.accepting.is_some() {
                return st.poll_accepted(cx, data);
            }
            if let Some(err) = st.error() {
                return Poll::Ready(Err(err));
            }
            if st.shut {
                return Poll::Ready(Err(io::Error::from_raw_os_error(libc::EPIPE)));
            }
            if data.is_empty() {
                return Poll::Ready(Ok(0));
            }
            if !st.idle() {
                // Only a pending write's bytes are ever queued (handled
                // above); should a send still be in flight (an owned
                // write's before), this write goes after it, never beside
                // it, and takes nothing meanwhile.
                st.wait(cx);
                return Poll::Pending;
            }
            // The last send left the socket full (or took only part): the
            // write asks the reactor first, as tokio's does, rather than
            // pay a send that says `EAGAIN` on every poll while it is.
            let tried = !st.full;
            if tried {
                if let Some(sent) = st.send_inline(data) {
                    st.full = !matches!(sent, Ok(n) if n == data.len());
                    return Poll::Ready(sent);
                }
                st.full = true;
            }
            // The socket is full. Where a tokio reactor serves the caller,
            // the write waits for room there having taken nothing, as
            // tokio's does.
            let mut send = || {
                let sent = st.send_inline(data);
                st.full = !matches!(sent, Some(Ok(n)) if n == data.len());
                sent
            };
            if let Some(wait) = in_reactor(cx, &mut send) {
                return wait;
            }
            if !tried {
                if let Some(sent) = send() {
                    return Poll::Ready(sent);
                }
            }
            let n = data.len().min(QUEUE_LIMIT);
            if n > SPARE_LIMIT && n > st.queued.capacity() {
                // A large write: a pooled buffer rather than a new one.
                if let Some(buf) = pool_take() {
                    st.queued = buf;
                }
            }
            st.queued.extend_from_slice(&data[..n]);
            st.accepting = Some(Accepting::of(&data[..n]));
        }
        self.pump.run();
        // On the thread pool the send tries the socket at once, and may
        // be done already.
        self.pump.lock().poll_accepted(cx, data)
    }

    /// Ready once every queued byte is in the kernel (no send in flight,
    /// nothing queued), or with the error that stopped them: what a tokio
    /// flush promises. A write that returned leaves nothing to wait for
    /// (its bytes are in the kernel); only the send of a write left
    /// pending, or of an owned write dropped, is waited for.
    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_drained(cx)
    }

    /// Ready once every accepted byte is in the kernel and no send is in
    /// flight, or with the error that stopped them: what the traits'
    /// shutdown waits for, so that it reports the last send's error, and
    /// what an owned write waits for, so that its send does not run
    /// beside the queue's.
    pub(crate) fn poll_drained(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.pump.lock();
        if let Some(err) = st.error() {
            return Poll::Ready(Err(err));
        }
        if st.idle() {
            return Poll::Ready(Ok(()));
        }
        st.wait(cx);
        Poll::Pending
    }

    /// Shuts the writing side down after every accepted byte: at once
    /// when the queue is empty, else once the pump has handed its last
    /// byte to the kernel (or sending failed). From now on writes fail
    /// with `EPIPE`.
    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        let mut st = self.pump.lock();
        st.shut = true;
        if st.idle() {
            st.shutdown_queued = false;
            return match &st.sock {
                Some(sock) => sock.socket.shutdown(std::net::Shutdown::Write),
                None => Ok(()),
            };
        }
        st.shutdown_queued = true;
        Ok(())
    }

    /// Waits until an owned write may go: a dropped write settled (and
    /// reported, if it sent anything), and the queue empty.
    pub(crate) async fn ready_for_owned(&self) -> io::Result<()> {
        poll_fn(|cx| {
            let mut st = self.pump.lock();
            if let Some(err) = std::task::ready!(poll_dropped(&mut st, cx)) {
                return Poll::Ready(Err(err));
            }
            let shut = st.shut;
            drop(st);
            std::task::ready!(self.poll_drained(cx))?;
            if let Some(accepting) = self.pump.lock().accepting.take() {
                // A trait write left pending whose bytes went since.
                return Poll::Ready(Err(accepting.dropped()));
            }
            if shut {
                return Poll::Ready(Err(io::Error::from_raw_os_error(libc::EPIPE)));
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Whether an owned write should first try its send inline, on the
    /// calling thread, without waiting (`MSG_DONTWAIT`): for the
    /// [`INLINE_AFTER_DROP`] owned writes that follow one dropped while
    /// pending. A loop that drops a pending write whenever another branch
    /// of a `select!` is ready, and writes again, would otherwise give
    /// each write's send to the driver only to cancel it before the
    /// kernel gets it, and send nothing; with the send made in the
    /// write's first poll it moves bytes whenever the socket has room, as
    /// tokio's write does. Other streams keep one submission per round.
    pub(crate) fn send_inline(&self) -> bool {
        let mut st = self.pump.lock();
        let inline = st.inline > 0;
        st.inline = st.inline.saturating_sub(1);
        inline
    }

    /// A guard for an owned write of `len` bytes: dropped while armed, it
    /// leaves its send for the next write to report.
    pub(crate) fn guard(&self, len: usize) -> OwnedWrite<'_> {
        OwnedWrite {
            side: self,
            len,
            before: 0,
            op: None,
        }
    }
}

/// Where a trait write that found the socket full waits, if a tokio
/// reactor serves the caller: called with a send (`MSG_DONTWAIT`, `None`
/// when the socket took nothing), it waits for room in that reactor and
/// sends, ready with the send's result or pending, the write having
/// taken nothing; `None` where no reactor serves the caller (the write
/// queues its bytes).
pub(crate) type InReactor<'a> = &'a mut dyn FnMut(
    &mut Context<'_>,
    &mut dyn FnMut() -> Option<io::Result<usize>>,
) -> Option<Poll<io::Result<usize>>>;

/// Settles a dropped owned write: its report, if it sent anything.
fn poll_dropped(st: &mut SendBook, cx: &mut Context<'_>) -> Poll<Option<io::Error>> {
    let Some(d) = &st.dropped else {
        return Poll::Ready(None);
    };
    let res = std::task::ready!(d.op.poll_result(cx));
    let sent = d.before + usize::try_from(res).unwrap_or(0);
    let len = d.len;
    st.dropped = None;
    Poll::Ready((sent > 0).then(|| io::Error::other(WriteDropped { sent, len })))
}

/// An owned write in progress, for [`WriteSide`] to hear of if its future
/// is dropped.
pub(crate) struct OwnedWrite<'a> {
    side: &'a WriteSide,
    len: usize,
    /// Bytes sent by the write's completed sends.
    before: usize,
    /// The send in flight.
    op: Option<Arc<dyn Settles>>,
}

impl OwnedWrite<'_> {
    /// Counts `n` bytes the write sent itself, inline.
    pub(crate) fn sent_inline(&mut self, n: usize) {
        self.before += n;
    }

    /// Runs one send of the write: `fut`, started already.
    pub(crate) async fn send<B: Send + 'static>(
        &mut self,
        fut: OpFuture<B>,
    ) -> crate::aio::BufResult<usize, B> {
        self.op = fut.settle_handle();
        let (res, buf) = fut.await;
        self.op = None;
        if let Ok(n) = &res {
            self.before += n;
        }
        (res, buf)
    }
}

impl Drop for OwnedWrite<'_> {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            let mut st = self.side.pump.lock();
            st.dropped = Some(Dropped {
                before: self.before,
                len: self.len,
                op,
            });
            st.inline = INLINE_AFTER_DROP;
        }
    }
}
