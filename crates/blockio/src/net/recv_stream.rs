//! Receiving without a buffer per idle connection: a stream of buffers
//! the kernel fills from the engine's shared ring.
//!
//! # How
//!
//! One `recv` with buffer select stays armed per stream. When bytes
//! arrive the kernel takes a buffer from the engine's ring
//! ([`BufRing`](crate::aio::buf_ring)), fills it and posts a completion;
//! the stream queues it and hands it out as a [`RecvBuf`], which returns
//! the buffer to the ring when dropped. An idle connection holds no
//! buffer at all.
//!
//! The receive is single-shot (re-armed after each completion) while a
//! connection's share of the ring is smaller than the ring, and multishot
//! (armed once, one completion per buffer filled) when
//! [`recv_buffer_share`](crate::aio::AsyncEngineBuilder::recv_buffer_share)
//! is at least the ring's size. The reason: a multishot receive keeps
//! taking buffers as long as bytes are queued on the socket, and the
//! kernel has no cap on the number of buffers (its `optlen` cap counts
//! bytes, and a short receive still takes a whole buffer), so a burst can
//! fill the whole ring for one connection before a cancellation lands.
//! Measured with 8 buffers and a share of 4: a 64 KiB burst took all 8.
//! A single-shot receive takes one buffer, so the share holds exactly.
//! Both cost one submission entry per re-arm at most, submitted with
//! everything else the driver has queued in one `io_uring_enter`.
//!
//! # Rules
//!
//! * **Running out never stalls.** When the ring is empty the kernel
//!   ends the receive with `ENOBUFS`. The stream counts a pause and, while
//!   the ring stays empty, receives into a buffer of its own (the ring's
//!   buffer size) each time it is polled with nothing queued, so a
//!   consumer that keeps its buffers while it awaits the next still gets
//!   its bytes, whatever every other connection holds. Once buffers come
//!   back it receives from the ring again.
//! * **A bounded share each.** A connection holding its share of ring
//!   buffers (received, not yet dropped) is not re-armed on the ring until
//!   it holds fewer: a slow reader cannot take the ring from the others.
//!   Awaited meanwhile, it receives into buffers of its own likewise.
//! * **No bytes lost, no progress thrown away.** Bytes left by dropped
//!   reads come out first; a stream dropped while its single-shot
//!   receive is armed leaves it armed for the next read on the connection
//!   to join (a stream made afresh and dropped each time it is pending
//!   still moves the bytes), and the connection's drop cancels it; a
//!   multishot receive is cancelled with its stream. What either still
//!   posts goes to the next read, in order.
//! * **Everywhere.** Without a ring (the epoll backend, a kernel before
//!   6.0), and on tokio's paused clock (see `aio::paused_clock`), the
//!   stream does one receive at a time into a buffer of the ring's size,
//!   with the same items and the same rules for bytes.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use super::read_side::Taken;
use super::socket::OwnedSocket;
use super::stream::StreamCore;
use crate::aio::buf_ring::{BufRing, GROUP};
use crate::aio::op::{Abandoned, ReadOut};
use crate::aio::request::{Cancel, Complete, Request};
use crate::aio::{BufResult, WeakEngine};
use crate::op::action::{Action, RecvSelectArgs};
use crate::op::Op;

/// The most bytes a receive made inline (see
/// [`RecvStream::receive_inline`]) takes.
const INLINE_RECEIVE: usize = 64 * 1024;

/// Bytes received by a [`RecvStream`]. Dereferences to the bytes; a buffer
/// of the engine's ring goes back to the ring when this is dropped.
pub struct RecvBuf {
    inner: Held,
}

enum Held {
    Ring {
        ring: Arc<BufRing>,
        bid: u16,
        len: usize,
        /// The connection's count of buffers held.
        held: Arc<AtomicUsize>,
    },
    Owned(Vec<u8>),
}

impl RecvBuf {
    /// Whether the bytes are in a buffer of the engine's shared ring
    /// (rather than one allocated for them).
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
    /// client.write_all(b"ping".to_vec()).await.0?;
    /// let mut received = server.recv_stream();
    /// let buf = received.next().await.expect("bytes before the end")?;
    /// // From the engine's shared ring where io_uring has one (Linux 6.0).
    /// println!("{} bytes, from the ring: {}", buf.len(), buf.is_from_ring());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn is_from_ring(&self) -> bool {
        matches!(self.inner, Held::Ring { .. })
    }
}

impl Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.inner {
            // SAFETY: the kernel handed `bid` to this receiver with `len`
            // bytes, and it is recycled only when this value drops.
            Held::Ring { ring, bid, len, .. } => unsafe { ring.bytes(*bid, *len) },
            Held::Owned(v) => v,
        }
    }
}

impl AsRef<[u8]> for RecvBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for RecvBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBuf")
            .field("len", &self.len())
            .field("from_ring", &self.is_from_ring())
            .finish()
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        if let Held::Ring {
            ring, bid, held, ..
        } = &self.inner
        {
            held.fetch_sub(1, Ordering::SeqCst);
            ring.recycle(*bid);
        }
    }
}

/// What one receive posted, in order.
pub(super) enum Item {
    Bytes(RecvBuf),
    End,
    Failed(i32),
}

/// The state a stream's multishot receive shares with the driver.
pub(super) struct Multi {
    state: Mutex<MultiState>,
    ring: Arc<BufRing>,
    held: Arc<AtomicUsize>,
    /// Keeps the descriptor this stream's receive names open until the
    /// receive's last completion (the driver holds this value until then).
    _socket: Arc<OwnedSocket>,
    /// For a multishot receive kept armed across reads: the engine, to
    /// cancel it once the buffers queued reach the connection's share
    /// (see [`Multi::cap`]), and this value, to name it.
    cap: Option<(WeakEngine, Weak<Multi>)>,
}

#[derive(Default)]
struct MultiState {
    items: VecDeque<Item>,
    /// Bytes of the first item already handed out (by a trait read with
    /// less room than the buffer held, see [`Multi::take_into`]).
    consumed: usize,
    /// A receive is in the kernel (its last completion not yet seen).
    armed: bool,
    /// Its cancel for the share has been sent.
    capped: bool,
    /// Its keeper is gone (the stream dropped, or the receive stream
    /// that armed it) and its cancel sent: its last completion must be
    /// reaped, which lets go of the socket (see [`Multi::withdraw`]).
    withdrawn: bool,
    /// The last receive ended for want of buffers.
    ran_out: bool,
    waker: Option<Waker>,
    /// A hold on tokio's paused clock, kept until the last completion has
    /// woken the task (see [`Multi::hold_until_ended`]).
    hold: Option<Arc<dyn Send + Sync>>,
}

impl Complete for Multi {
    fn complete(&self, res: i32) {
        self.complete_flags(res, 0);
    }

    fn complete_flags(&self, res: i32, flags: u32) {
        let buf = io_uring::cqueue::buffer_select(flags)
            .filter(|&bid| self.ring.note_filled(bid).is_ok())
            .map(|bid| {
                self.held.fetch_add(1, Ordering::SeqCst);
                RecvBuf {
                    inner: Held::Ring {
                        ring: self.ring.clone(),
                        bid,
                        len: usize::try_from(res).unwrap_or(0),
                        held: self.held.clone(),
                    },
                }
            });
        let mut hold = None;
        let waker = {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match (res, buf) {
                (1.., Some(buf)) => g.items.push_back(Item::Bytes(buf)),
                (1.., None) => g.items.push_back(Item::Failed(libc::EIO)),
                // A buffer picked for no bytes goes straight back (drop).
                (0, _) => g.items.push_back(Item::End),
                (e, _) if e == -libc::ENOBUFS => g.ran_out = true,
                (e, _) if e == -libc::ECANCELED => {}
                (e, _) => g.items.push_back(Item::Failed(-e)),
            }
            if !io_uring::cqueue::more(flags) {
                g.armed = false;
                hold = g.hold.take();
            }
            g.waker.take()
        };
        self.cap();
        if let Some(w) = waker {
            w.wake();
        }
        // Let go only once the task is woken.
        drop(hold);
    }

    /// Only while a task waits on the receive (its waker is here), or
    /// its keeper is gone and its cancelled receive's last completion is
    /// still to come (reaping it closes a dropped stream's socket): an
    /// idle one, armed for its stream's next read with nobody waiting,
    /// needs no relay thread. A waker is taken by the completion that
    /// wakes it and by [`wake_waiters`](Self::wake_waiters), which runs
    /// when the last driving task goes: a task of the runtime that went
    /// never polls again to put one back.
    #[cfg(feature = "tokio")]
    fn awaited(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.waker.is_some() || (g.withdrawn && g.armed)
    }

    fn wake_waiters(&self) {
        let waker = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waker
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// What [`Multi::take_into`] found.
pub(super) enum Took {
    /// This many bytes went to the read (at least one).
    Bytes(usize),
    /// Nothing queued, the receive still armed: the read's task is woken
    /// when it posts.
    Waiting,
    /// The end of the stream, with nothing queued before it.
    End,
    /// The receive failed with this errno, with nothing queued before it.
    Failed(i32),
    /// Nothing queued and the receive no longer armed (it ran out of ring
    /// buffers, or was cancelled): the read receives anew.
    Stopped,
}

impl Multi {
    /// Cancels this receive in the kernel, on `engine`, its keeper gone;
    /// an engine whose driving task is gone has its relay thread reap
    /// the cancel's end, which lets go of the socket (the peer of a
    /// dropped stream sees it closed).
    fn withdraw(self: &Arc<Multi>, engine: &crate::aio::AsyncEngine) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .withdrawn = true;
        let weak = Arc::downgrade(self);
        engine.driver().cancel(Cancel(weak));
        #[cfg(feature = "tokio")]
        engine.relay_if_undriven();
    }

    /// The state of a receive on `core`'s socket into the engine's `ring`
    /// (not armed yet).
    /// `capped`: whether its receive is cancelled once the buffers queued
    /// reach the connection's share (a receive kept armed across reads,
    /// which nobody polls while its reader does something else).
    pub(super) fn new(core: &StreamCore, ring: &Arc<BufRing>, capped: bool) -> Arc<Multi> {
        Arc::new_cyclic(|me| Multi {
            state: Mutex::default(),
            ring: ring.clone(),
            held: Arc::default(),
            _socket: core.sock.socket.clone(),
            cap: capped.then(|| (core.sock.engine().downgrade(), me.clone())),
        })
    }

    /// Cancels a capped multishot receive (see [`new`](Self::new)) once
    /// the connection holds its share of the ring's buffers, received and
    /// not yet read: a reader that stops reading holds at most its share
    /// (and what the kernel posts before the cancel lands), and the bytes
    /// the peer sends after that wait in the socket, whose window then
    /// closes, as on a socket nobody reads. The next read after the last
    /// buffer was taken arms it again.
    fn cap(&self) {
        let Some((engine, me)) = &self.cap else {
            return;
        };
        if self.held.load(Ordering::SeqCst) < self.ring.shape().share {
            return;
        }
        {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !g.armed || std::mem::replace(&mut g.capped, true) {
                return;
            }
        }
        if let Some(engine) = engine.upgrade() {
            let me: Weak<dyn Complete> = me.clone();
            engine.driver().cancel(Cancel(me));
        }
    }

    /// Arms the receive on `core`'s socket: multishot (one completion per
    /// ring buffer filled, until the kernel ends it) or single-shot;
    /// `waker`, if given, is woken by its first completion.
    pub(super) fn arm(self: &Arc<Self>, core: &StreamCore, multishot: bool, waker: Option<&Waker>) {
        let replaced = {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            g.armed = true;
            g.withdrawn = false;
            waker.and_then(|w| g.waker.replace(w.clone()))
        };
        drop(replaced);
        let action = Action::RecvSelect(RecvSelectArgs {
            group: GROUP,
            len: self.ring.shape().size,
            multishot,
        });
        // SAFETY: the action points at no memory; the kernel writes into
        // ring buffers that live until the ring is gone; `self`, which the
        // driver holds until the last completion, keeps the socket open.
        let op = unsafe { Op::from_action(core.sock.fd(), action, None) };
        let done: Arc<dyn Complete> = self.clone();
        core.sock.engine().driver().submit([Request { op, done }]);
    }

    /// Keeps `hold` (on tokio's paused clock) until the receive's last
    /// completion has woken its task; dropped at once if it has ended.
    pub(super) fn hold_until_ended(&self, hold: Arc<dyn Send + Sync>) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.armed {
            g.hold = Some(hold);
            return;
        }
        drop(g);
        drop(hold);
    }

    /// Copies the bytes queued into `out`, buffer after buffer, while it
    /// has room, without waiting and without taking an end or an error
    /// queued (a peek's top-up, see `StreamCore::peek`): how many.
    pub(super) fn take_queued(&self, out: &mut [u8]) -> usize {
        let mut copied = 0;
        loop {
            // Declared before the guard, so dropped after it (a buffer's
            // return wakes tasks).
            let emptied;
            let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let g = &mut *guard;
            let Some(Item::Bytes(b)) = g.items.front() else {
                return copied;
            };
            let n = (b.len() - g.consumed).min(out.len() - copied);
            if n == 0 {
                return copied;
            }
            out[copied..copied + n].copy_from_slice(&b[g.consumed..g.consumed + n]);
            copied += n;
            g.consumed += n;
            if g.consumed < b.len() {
                return copied;
            }
            g.consumed = 0;
            emptied = g.items.pop_front();
            drop(guard);
            drop(emptied);
        }
    }

    /// Copies the bytes queued into `out`, buffer after buffer, while it
    /// has room (a buffer it takes only part of keeps the rest, first in
    /// line), and gives each buffer emptied back to the ring. With nothing
    /// queued and the receive still armed, `cx` is woken when it posts.
    /// The end or an error is reported by the call that finds it first
    /// in line.
    pub(super) fn take_into(&self, cx: &mut Context<'_>, out: &mut dyn ReadOut) -> Took {
        let mut copied = 0;
        loop {
            // Declared before the guard, so dropped after it: a buffer's
            // return wakes tasks and a waker's `Drop` is user code, neither
            // run under the lock.
            let mut emptied = None;
            let _replaced: Option<Waker>;
            let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let g = &mut *guard;
            let took = match g.items.front() {
                Some(Item::Bytes(b)) if out.room() > 0 => {
                    let n = (b.len() - g.consumed).min(out.room());
                    out.put(&b[g.consumed..g.consumed + n]);
                    copied += n;
                    g.consumed += n;
                    if g.consumed == b.len() {
                        g.consumed = 0;
                        emptied = g.items.pop_front();
                    }
                    None
                }
                _ if copied > 0 => Some(Took::Bytes(copied)),
                Some(Item::Bytes(_)) => Some(Took::Bytes(0)),
                Some(Item::End) => {
                    g.items.pop_front();
                    Some(Took::End)
                }
                Some(&Item::Failed(errno)) => {
                    g.items.pop_front();
                    Some(Took::Failed(errno))
                }
                None if g.armed => {
                    _replaced = g.waker.replace(cx.waker().clone());
                    Some(Took::Waiting)
                }
                None => Some(Took::Stopped),
            };
            drop(guard);
            drop(emptied);
            if let Some(took) = took {
                return took;
            }
        }
    }
}

impl Abandoned for Multi {
    /// The bytes of a dropped stream's receive, once it has ended.
    fn poll_settled(&self, cx: &mut Context<'_>, into: &mut VecDeque<u8>) -> Poll<i32> {
        // Declared before the guard, so dropped after it: giving a buffer
        // back to the ring wakes tasks, and a waker's `Drop` is user code;
        // neither runs under the lock.
        let mut released = Vec::new();
        let _replaced: Option<std::task::Waker>;
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut end = -libc::ECANCELED;
        while let Some(item) = g.items.pop_front() {
            match item {
                Item::Bytes(b) => {
                    into.extend(&b[std::mem::take(&mut g.consumed)..]);
                    released.push(b);
                }
                Item::End => end = 0,
                Item::Failed(errno) => end = -errno,
            }
        }
        if g.armed {
            _replaced = g.waker.replace(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(end)
    }
}

/// A stream of the bytes a connection receives, as buffers; from
/// [`TcpStream::recv_stream`](super::TcpStream::recv_stream) or
/// [`UnixStream::recv_stream`](super::UnixStream::recv_stream).
///
/// Items come in the order the bytes arrived; the stream ends (`None`) at
/// the end of the connection, and after an error. Use it through
/// [`next`](Self::next) or as a [`futures_core::Stream`].
pub struct RecvStream<'a> {
    core: &'a StreamCore,
    how: How<'a>,
    /// A receive into a buffer of its own, while the ring cannot serve
    /// this stream (empty, or this connection holds its share).
    own: Option<Receive<'a>>,
    done: bool,
    pauses: u64,
}

type Receive<'a> = Pin<Box<dyn Future<Output = BufResult<usize, Vec<u8>>> + Send + 'a>>;

/// Whether a stream made now receives one buffer at a time although the
/// engine has a buffer ring: on tokio's paused clock, where only an owned
/// receive is made on the runtime's thread (see `aio::paused_clock`).
pub(super) fn one_at_a_time() -> bool {
    #[cfg(feature = "tokio")]
    return crate::aio::paused_clock::clock_paused();
    #[cfg(not(feature = "tokio"))]
    false
}

/// A hold on tokio's paused clock if the caller's runtime has it paused
/// (see `aio::paused_clock`).
pub(super) fn paused_clock_hold() -> Option<Arc<dyn Send + Sync>> {
    #[cfg(feature = "tokio")]
    return crate::aio::paused_clock::clock_hold();
    #[cfg(not(feature = "tokio"))]
    None
}

enum How<'a> {
    Ring(RingReceive),
    /// One receive at a time, with its buffer size.
    Single(Option<Receive<'a>>, usize),
}

struct RingReceive {
    multi: Arc<Multi>,
    /// A cancellation (for the share) has been sent for the armed receive.
    cancelling: bool,
    /// The receive ran out of buffers, and has not been armed since.
    paused: bool,
}

impl<'a> RecvStream<'a> {
    pub(crate) fn new(core: &'a StreamCore) -> RecvStream<'a> {
        let how = match core.sock.engine().recv_ring() {
            Some(ring) if !one_at_a_time() => How::Ring(RingReceive {
                multi: Multi::new(core, ring, false),
                cancelling: false,
                paused: false,
            }),
            _ => How::Single(None, core.sock.engine().recv_shape().size as usize),
        };
        RecvStream {
            core,
            how,
            own: None,
            done: false,
            pauses: 0,
        }
    }

    /// The next bytes received: `None` at the end of the connection (or
    /// after an error was returned).
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
    /// client.write_all(b"ping".to_vec()).await.0?;
    /// drop(client);
    /// let mut received = server.recv_stream();
    /// let mut got = Vec::new();
    /// // `None` at the end of the stream.
    /// while let Some(buf) = received.next().await {
    ///     got.extend_from_slice(&buf?);
    /// }
    /// assert_eq!(got, b"ping");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn next(&mut self) -> Option<io::Result<RecvBuf>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Whether this stream receives into the engine's shared ring
    /// (multishot receive) rather than one buffer per receive. Not for a
    /// stream made on a current-thread tokio runtime whose clock is
    /// paused (`docs/library.md`, "tokio's paused clock"), whose receives
    /// go one at a time so that each holds the clock.
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
    /// let received = server.recv_stream();
    /// println!("shared ring: {}", received.uses_ring());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn uses_ring(&self) -> bool {
        matches!(self.how, How::Ring(_))
    }

    /// How many times the receive paused because the engine's buffers ran
    /// out (`ENOBUFS`) and resumed once some came back.
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
    /// let received = server.recv_stream();
    /// assert_eq!(received.pauses(), 0);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn pauses(&self) -> u64 {
        self.pauses
    }

    fn fail(&mut self, errno: i32) -> Poll<Option<io::Result<RecvBuf>>> {
        self.done = true;
        self.core.read_failed(errno);
        let err = io::Error::from_raw_os_error(errno);
        Poll::Ready(Some(Err(super::os_error(err))))
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<RecvBuf>>> {
        if self.done {
            return Poll::Ready(None);
        }
        // Refused only where a receive would start: bytes already
        // received, and a receive already armed (driven to its end by the
        // engine's relay thread), still arrive.
        let driven = self.core.sock.admit();
        let undriven = driven.is_err();
        let polled = self.poll_recv_admitted(cx, driven);
        if undriven && polled.is_pending() {
            self.core.sock.parked_undriven();
        }
        polled
    }

    /// [`poll_recv`](Self::poll_recv) once asked whether the engine is
    /// driven (`driven`).
    fn poll_recv_admitted(
        &mut self,
        cx: &mut Context<'_>,
        driven: io::Result<()>,
    ) -> Poll<Option<io::Result<RecvBuf>>> {
        if let How::Single(..) = self.how {
            return self.poll_single(cx);
        }
        if self.own.is_some() {
            return self.poll_own(cx);
        }
        match std::task::ready!(self.core.reads.poll_take(cx, usize::MAX)) {
            Taken::Nothing => {}
            Taken::Bytes(v) => {
                return Poll::Ready(Some(Ok(RecvBuf {
                    inner: Held::Owned(v),
                })))
            }
            Taken::Failed(errno) => return self.fail(errno),
            Taken::Ended => {
                self.done = true;
                return Poll::Ready(None);
            }
        }
        self.poll_ring(cx, driven)
    }

    /// `driven`: whether a new receive may start (see
    /// [`Sock::admit`](super::socket::Sock::admit)).
    fn poll_ring(
        &mut self,
        cx: &mut Context<'_>,
        driven: io::Result<()>,
    ) -> Poll<Option<io::Result<RecvBuf>>> {
        let How::Ring(r) = &mut self.how else {
            unreachable!("poll_ring on a ring stream only")
        };
        let shape = r.multi.ring.shape();
        // Declared before the guard, so dropped after it: a waker's `Drop`
        // is user code and never runs under the lock.
        let _replaced: Option<std::task::Waker>;
        let mut g = r.multi.state.lock().unwrap_or_else(|e| e.into_inner());
        match g.items.pop_front() {
            Some(Item::Bytes(b)) => return Poll::Ready(Some(Ok(b))),
            Some(Item::End) => {
                drop(g);
                self.done = true;
                return Poll::Ready(None);
            }
            Some(Item::Failed(errno)) => {
                drop(g);
                return self.fail(errno);
            }
            None => {}
        }
        _replaced = g.waker.replace(cx.waker().clone());
        let over_share = r.multi.held.load(Ordering::SeqCst) >= shape.share;
        if g.armed {
            if over_share && !r.cancelling {
                r.cancelling = true;
                drop(g);
                let weak = Arc::downgrade(&r.multi);
                self.core.sock.engine().driver().cancel(Cancel(weak));
            }
            return Poll::Pending;
        }
        r.cancelling = false;
        if std::mem::take(&mut g.ran_out) {
            r.paused = true;
            self.pauses += 1;
        }
        drop(g);
        // Registered before checking, so a buffer returned in between
        // still wakes this task.
        let ring = &r.multi.ring;
        if over_share || r.paused {
            ring.wait(cx.waker());
        }
        let starved = r.paused && ring.exhausted();
        if r.multi.held.load(Ordering::SeqCst) >= shape.share || starved {
            // Waiting for the ring could wait forever (its buffers may be
            // held by consumers that are themselves waiting): receive
            // into a buffer of this stream's own instead. No receive is
            // armed, so bytes keep their order.
            let (core, size) = (self.core, shape.size as usize);
            self.own = Some(Box::pin(core.read(vec![0u8; size])));
            return self.poll_own(cx);
        }
        r.paused = false;
        if let Err(e) = driven {
            return Poll::Ready(Some(Err(e)));
        }
        if let Some(got) = self.receive_inline() {
            return Poll::Ready(got);
        }
        self.arm();
        Poll::Pending
    }

    /// After a receive stream of this connection was dropped pending (see
    /// `ReadSide::receive_inline`), receives what the socket holds at
    /// once, on this thread, into a buffer of the stream's own: the item,
    /// or `None` when the socket holds nothing (the receive is then armed
    /// as usual). Called only with nothing armed or queued, so bytes keep
    /// their order.
    fn receive_inline(&mut self) -> Option<Option<io::Result<RecvBuf>>> {
        if !self.core.reads.receive_inline() {
            return None;
        }
        match self.core.sock.recv_inline(INLINE_RECEIVE) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Ok(buf) => Some(self.owned_result(Ok(buf.len()), buf)),
            Err(e) => Some(self.owned_result(Err(super::os_error(e)), Vec::new())),
        }
    }

    /// Arms a multishot receive.
    fn arm(&mut self) {
        let How::Ring(r) = &mut self.how else {
            return;
        };
        let shape = r.multi.ring.shape();
        r.multi
            .arm(self.core, shape.share >= usize::from(shape.count), None);
    }

    /// Polls the receive into a buffer of the stream's own.
    fn poll_own(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<RecvBuf>>> {
        let f = self
            .own
            .as_mut()
            .expect("a receive of its own is in flight");
        let (res, buf) = std::task::ready!(f.as_mut().poll(cx));
        self.own = None;
        Poll::Ready(self.owned_result(res, buf))
    }

    fn poll_single(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<RecvBuf>>> {
        let How::Single(fut, size) = &mut self.how else {
            unreachable!("poll_single on a single-receive stream only")
        };
        let core = self.core;
        let size = *size;
        let f = fut.get_or_insert_with(|| Box::pin(core.read(vec![0u8; size])));
        let (res, buf) = std::task::ready!(f.as_mut().poll(cx));
        *fut = None;
        Poll::Ready(self.owned_result(res, buf))
    }

    /// What a finished receive into an owned buffer yields: its bytes, or
    /// the end of the stream (0 bytes) or an error, after which the stream
    /// is done.
    fn owned_result(
        &mut self,
        res: io::Result<usize>,
        mut buf: Vec<u8>,
    ) -> Option<io::Result<RecvBuf>> {
        match res {
            Ok(0) => {
                self.done = true;
                None
            }
            Ok(n) => {
                buf.truncate(n);
                Some(Ok(RecvBuf {
                    inner: Held::Owned(buf),
                }))
            }
            Err(e) => {
                self.done = true;
                self.core.read_failed(crate::errno(&e).unwrap_or(0));
                Some(Err(e))
            }
        }
    }
}

impl futures_core::Stream for RecvStream<'_> {
    type Item = io::Result<RecvBuf>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

impl fmt::Debug for RecvStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvStream")
            .field("peer", &self.core.peer)
            .field("uses_ring", &self.uses_ring())
            .field("pauses", &self.pauses)
            .finish()
    }
}

impl Drop for RecvStream<'_> {
    /// An armed single-shot receive stays armed, and goes to the
    /// connection's next read with the bytes it posted but nobody took: a
    /// stream made afresh and dropped each time it is pending still moves
    /// the connection's bytes. A multishot receive, which would go on
    /// taking buffers, is cancelled in the kernel; what it posted still
    /// goes to the next read, in order. Either way the connection's next
    /// receive streams first receive inline (`receive_inline`).
    fn drop(&mut self) {
        let How::Ring(r) = &self.how else {
            // A receive in flight is left to the read side by `read`.
            return;
        };
        let g = r.multi.state.lock().unwrap_or_else(|e| e.into_inner());
        let (armed, queued) = (g.armed, !g.items.is_empty());
        drop(g);
        let shape = r.multi.ring.shape();
        let multishot = shape.share >= usize::from(shape.count);
        let mut keep = None;
        if armed {
            // The next streams receive inline: a multishot receive's
            // cancel may take it back before the kernel got it.
            self.core.reads.dropped_pending();
        }
        if armed && multishot {
            r.multi.withdraw(self.core.sock.engine());
        } else if armed {
            keep = Some(Box::new(KeepArmed {
                multi: r.multi.clone(),
                engine: self.core.sock.engine().clone(),
            }) as Box<dyn Send>);
        }
        if armed || queued {
            self.core.reads.detach(r.multi.clone(), keep);
        }
    }
}

/// Keeps a dropped stream's single-shot receive armed for the
/// connection's next read, or the trait reads' multishot receive armed
/// across reads; dropped before it completed (the connection is dropped,
/// or another kind of read takes over), cancels it.
pub(super) struct KeepArmed {
    multi: Arc<Multi>,
    engine: crate::aio::AsyncEngine,
}

impl KeepArmed {
    /// Keeps `multi`'s receive, on `engine`, armed.
    pub(super) fn new(multi: Arc<Multi>, engine: crate::aio::AsyncEngine) -> KeepArmed {
        KeepArmed { multi, engine }
    }
}

impl Drop for KeepArmed {
    fn drop(&mut self) {
        let armed = self
            .multi
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .armed;
        if armed {
            self.multi.withdraw(&self.engine);
        }
    }
}
