//! A listener's accepts: the request armed in the kernel while someone
//! waits for a connection, and the queue of connections it accepted that
//! nobody has taken yet. Every accept of a listener, `accept()` and
//! `incoming()` alike, takes its connection from here.
//!
//! # Why
//!
//! A connection the kernel has accepted is a descriptor someone must take.
//! An accept whose future is dropped (a timeout around `accept()`, a
//! `select!`) may still accept one, after its waiter left; handed to
//! nobody, it would be closed and its client reset, where tokio's accept
//! leaves the connection for the next one. So the request completes into
//! this queue, not into the future that armed it.
//!
//! A multishot accept (`IORING_ACCEPT_MULTISHOT`, Linux 5.19), where asked
//! for and available, is armed once and posts one completion per
//! connection, so an accept storm costs no submissions at all. Otherwise
//! each armed request accepts one connection: by readiness for TCP (the
//! kernel then holds no reference to the listening socket while it waits,
//! so a killed server's port binds again at once), in the ring for Unix
//! sockets (the engine's epoll set where there is no ring).
//!
//! # Rules
//!
//! * **Armed while someone waits.** [`AcceptQueue::poll_next`] arms the
//!   request when the queue is empty. It stays armed until it ends (a
//!   single accept after one connection; a multishot accept when the
//!   kernel ends it, as an error such as `EMFILE` does), until the last
//!   waiter goes away ([`AcceptQueue::disarm`]), or until the queue holds
//!   [`MAX_QUEUED`] connections nobody has taken: a consumer that falls
//!   behind stops the accepting and leaves connections in the kernel's
//!   backlog, where they cost no descriptor.
//! * **No connection lost.** A connection accepted after its waiter left
//!   stays queued; the listener's next accept, or next waiter, takes it
//!   first. Every completion wakes every waiter, so a cancelled request
//!   never strands one (a waiter left re-arms it). Connections still
//!   queued when the listener is dropped are closed with it.
//! * **The descriptor outlives the request.** The queue holds the
//!   listening socket, and the driver holds the queue until the request's
//!   last completion.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use socket2::{SockAddr, SockAddrStorage};

use super::socket::{OwnedSocket, Sock};
use crate::aio::request::{Cancel, Complete, Request};
use crate::backend::Backend;
use crate::op::action::{AcceptArgs, Action};
use crate::op::Op;

/// Connections accepted but not taken past which the multishot accept is
/// cancelled (and armed again once the queue is empty).
pub(crate) const MAX_QUEUED: usize = 64;

/// One accepted connection: its descriptor and the peer's address as the
/// accept wrote it (`None` from a multishot accept, which writes none).
pub(crate) type Accepted = (OwnedFd, Option<SockAddr>);

/// The accepts of one listener. Dropping it (with its listener) cancels
/// the request; connections it still accepts are closed once its last
/// completion is in.
pub(crate) struct AcceptQueue {
    shared: Arc<Accepts>,
    multishot: bool,
    /// A single accept waits for readiness in the engine's epoll set
    /// rather than in the ring (TCP listeners).
    by_readiness: bool,
    /// The listening socket and its engine.
    sock: Sock,
}

/// What the driver completes into.
struct Accepts {
    state: Mutex<AcceptBook>,
    /// Where a single accept writes the peer's address.
    peer: PeerSlot,
    /// The listening socket, open until the last completion.
    _socket: Arc<OwnedSocket>,
}

/// The memory a single accept writes the peer's address into: the
/// address is taken from the accept itself, since a peer that reset
/// before the accept leaves no address to ask the socket for
/// (`getpeername` fails with `ENOTCONN`), while the connection is still
/// one to hand over.
struct PeerSlot {
    addr: UnsafeCell<SockAddrStorage>,
    len: UnsafeCell<libc::socklen_t>,
}

// SAFETY: the slot is written by the kernel for the one single accept
// armed at a time (`AcceptBook::armed` keeps a second from being armed
// before the first's last completion), prepared by `arm` before that
// request is submitted and read by `complete_flags` after its completion:
// no two threads touch it at once.
unsafe impl Sync for PeerSlot {}

impl Default for PeerSlot {
    fn default() -> Self {
        PeerSlot {
            addr: UnsafeCell::new(SockAddrStorage::zeroed()),
            len: UnsafeCell::new(0),
        }
    }
}

impl PeerSlot {
    /// The pointers for the accept to write through, the length set to
    /// the storage's size.
    fn prepare(&self) -> (*mut libc::sockaddr_storage, *mut libc::socklen_t) {
        // SAFETY: no request is armed (see the `Sync` impl), so nothing
        // else reads or writes the slot.
        unsafe { *self.len.get() = std::mem::size_of::<SockAddrStorage>() as libc::socklen_t };
        (self.addr.get().cast(), self.len.get())
    }

    /// The address the completed single accept wrote, if any.
    fn take(&self) -> Option<SockAddr> {
        // SAFETY: called on the single accept's completion, after the
        // kernel wrote the slot and before the next request is armed.
        let len = unsafe { *self.len.get() };
        if len == 0 {
            return None;
        }
        // SAFETY: as above; the slot is spent until `prepare`.
        let storage = unsafe {
            *self.len.get() = 0;
            std::mem::replace(&mut *self.addr.get(), SockAddrStorage::zeroed())
        };
        // SAFETY: the kernel wrote an address of its family and `len`
        // bytes (at most the storage's size, which it truncates to).
        Some(unsafe { SockAddr::new(storage, len) })
    }
}

/// The accept request's results and waiters.
#[derive(Default)]
struct AcceptBook {
    /// Accepted descriptors, or the errno that ended the request.
    ready: VecDeque<Result<Accepted, i32>>,
    /// The request is in the kernel (its last completion not yet seen).
    armed: bool,
    /// A cancellation has been sent for the armed request.
    cancelling: bool,
    /// Every task waiting for a connection.
    wakers: Vec<Waker>,
    /// The task that arms the request once the listener is readable, with
    /// tokio's clock paused (see `aio::paused_clock`): aborted on disarm.
    #[cfg(feature = "tokio")]
    gate: Option<crate::aio::paused_clock::Gate>,
    /// Kept until the next completion has woken the waiters (a hold on
    /// tokio's paused clock).
    #[cfg(feature = "tokio")]
    hold: Option<Arc<dyn Send + Sync>>,
}

impl Complete for Accepts {
    fn complete(&self, res: i32) {
        self.complete_flags(res, 0);
    }

    fn complete_flags(&self, res: i32, flags: u32) {
        #[cfg(feature = "tokio")]
        let hold;
        let wakers = {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match res {
                fd @ 0.. => {
                    // SAFETY: a successful accept's result is a new
                    // descriptor that nobody else owns.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    g.ready.push_back(Ok((fd, self.peer.take())));
                }
                e if e == -libc::ECANCELED => {}
                e => g.ready.push_back(Err(-e)),
            }
            if !io_uring::cqueue::more(flags) {
                g.armed = false;
                g.cancelling = false;
            }
            #[cfg(feature = "tokio")]
            {
                hold = g.hold.take();
                g.gate = None;
            }
            std::mem::take(&mut g.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
        // After the wake-ups: the woken tasks are the runtime's work.
        #[cfg(feature = "tokio")]
        drop(hold);
    }

    #[cfg(feature = "tokio")]
    fn hold(&self, hold: Arc<dyn Send + Sync>) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).hold = Some(hold);
    }

    fn wake_waiters(&self) {
        let wakers =
            std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).wakers);
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl AcceptQueue {
    /// The queue of `sock`, a listening socket; multishot if `multishot`
    /// asks for it, the engine runs on io_uring and the kernel is 5.19 or
    /// later; otherwise one accept at a time, by readiness if
    /// `by_readiness`.
    pub(crate) fn new(sock: &Sock, multishot: bool, by_readiness: bool) -> AcceptQueue {
        AcceptQueue {
            shared: Arc::new(Accepts {
                state: Mutex::default(),
                peer: PeerSlot::default(),
                _socket: sock.socket.clone(),
            }),
            multishot: multishot
                && sock.engine().backend() == Backend::IoUring
                && crate::ring::kernel_at_least(5, 19),
            by_readiness,
            sock: sock.clone(),
        }
    }

    /// Whether connections are accepted by one multishot request.
    pub(crate) fn multishot(&self) -> bool {
        self.multishot
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AcceptBook> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next connection: a queued one, or one the (re-)armed request
    /// will accept. A waiter that goes away calls [`leave`](Self::leave).
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<Accepted>> {
        // Asked at every poll, as a receive does (see `Sock::admit`): a
        // waiter woken when the engine's driver went has it driven again
        // here. Refused only where a request would be armed: connections
        // already queued, and a request already armed (driven to its end
        // by the engine's relay thread), still arrive.
        let driven = self.sock.admit();
        let mut g = self.lock();
        if let Some(r) = g.ready.pop_front() {
            let full = g.ready.len() >= MAX_QUEUED;
            drop(g);
            if full {
                self.disarm();
            }
            return Poll::Ready(r.map_err(io::Error::from_raw_os_error));
        }
        if !g.armed {
            if let Err(e) = driven {
                return Poll::Ready(Err(e));
            }
            if let Err(e) = self.readiness_made() {
                return Poll::Ready(Err(e));
            }
            g.armed = true;
            drop(g);
            self.arm();
            g = self.lock();
            // Completed as it was armed (a connection was waiting and the
            // readiness set accepted it at once): taken now, as an accept
            // that needs no waiting returns at once.
            if let Some(r) = g.ready.pop_front() {
                return Poll::Ready(r.map_err(io::Error::from_raw_os_error));
            }
        }
        if !g.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            g.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// A waiter of [`poll_next`](Self::poll_next) that goes away (its
    /// future dropped) with `waker`: the request is cancelled if nobody
    /// else waits. What it still accepts stays queued.
    pub(crate) fn leave(&self, waker: &Waker) {
        let mut g = self.lock();
        g.wakers.retain(|w| !w.will_wake(waker));
        let alone = g.wakers.is_empty();
        drop(g);
        if alone {
            self.disarm();
        }
    }

    /// Whether the epoll set a single accept by readiness waits in is
    /// there (made now if not): if it cannot be made, the error names it
    /// and the listener's address, and the next accept tries again, as
    /// one that found no descriptor for its connection (`EMFILE`) does.
    pub(crate) fn readiness_made(&self) -> io::Result<()> {
        if !self.by_readiness || self.multishot {
            return Ok(());
        }
        self.sock.engine().start_readiness().map_err(|e| {
            let on = (self.sock.socket.local_addr())
                .ok()
                .and_then(|a| a.as_socket())
                .map_or_else(String::new, |a| format!(" on {a}"));
            crate::error::Named::wrap(format!("accepting{on}"), e)
        })
    }

    fn arm(&self) {
        let sock = &self.sock;
        let accept = if self.multishot {
            // (The peer's address is asked of each new socket.)
            AcceptArgs::Multishot
        } else {
            let (addr, addr_len) = self.shared.peer.prepare();
            AcceptArgs::Once { addr, addr_len }
        };
        // SAFETY: the action points at the queue's peer slot, or at no
        // memory (multishot); the queue, which the driver or the readiness
        // set holds until the last completion, keeps the slot alive and
        // the socket open.
        let op = unsafe { Op::from_action(sock.fd(), Action::Accept(accept), None) };
        let done: Arc<dyn Complete> = self.shared.clone();
        let req = Request { op, done };
        let by_readiness = self.by_readiness && !self.multishot;
        #[cfg(feature = "tokio")]
        let Some(req) = self.hold_clock(req, by_readiness) else {
            return;
        };
        if by_readiness {
            sock.engine().submit_by_readiness(req);
        } else {
            sock.engine().driver().submit([req]);
        }
    }

    /// `req`, the accept request, as tokio's paused clock needs it (see
    /// `aio::paused_clock`): `None` when a task of the runtime's arms it
    /// once the listener is readable (in the engine's readiness set if
    /// `by_readiness`). A multishot accept is armed as before.
    #[cfg(feature = "tokio")]
    fn hold_clock(&self, req: Request, by_readiness: bool) -> Option<Request> {
        use crate::aio::paused_clock::{hold_clock_with, SubmitFn};
        if self.multishot {
            return Some(req);
        }
        let submit: SubmitFn = if by_readiness {
            |engine, req| engine.submit_by_readiness(req)
        } else {
            |engine, req| engine.driver().submit([req])
        };
        match hold_clock_with(self.sock.engine(), req, self.sock.fd(), submit) {
            Ok(req) => Some(req),
            Err(gate) => {
                self.lock().gate = Some(gate);
                None
            }
        }
    }

    /// Cancels the armed request, if any: nobody is waiting, or enough
    /// connections are queued. What it still accepts stays queued.
    pub(crate) fn disarm(&self) {
        let mut g = self.lock();
        if !g.armed || g.cancelling {
            return;
        }
        g.cancelling = true;
        #[cfg(feature = "tokio")]
        let gate = g.gate.take();
        drop(g);
        // Not armed yet: never will be (it completes with `ECANCELED`,
        // which takes the lock). Armed: the cancel below finds it.
        #[cfg(feature = "tokio")]
        if let Some(gate) = gate {
            gate.cancel();
        }
        let weak = Cancel(Arc::downgrade(&self.shared) as std::sync::Weak<dyn Complete>);
        if self.by_readiness && !self.multishot {
            self.sock.engine().cancel_by_readiness(weak);
        } else {
            self.sock.engine().driver().cancel(weak);
        }
    }

    /// The next connection, as a future that leaves the queue when it is
    /// dropped before it is ready (see [`leave`](Self::leave)).
    pub(crate) fn next(&self) -> NextAccept<'_> {
        NextAccept {
            queue: self,
            waker: None,
        }
    }
}

/// [`AcceptQueue::next`]'s future.
pub(crate) struct NextAccept<'a> {
    queue: &'a AcceptQueue,
    /// The waker last registered, while waiting.
    waker: Option<Waker>,
}

impl std::future::Future for NextAccept<'_> {
    type Output = io::Result<Accepted>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let r = self.queue.poll_next(cx);
        self.waker = r.is_pending().then(|| cx.waker().clone());
        r
    }
}

impl Drop for NextAccept<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.waker.take() {
            self.queue.leave(&w);
        }
    }
}

impl Drop for AcceptQueue {
    fn drop(&mut self) {
        self.disarm();
    }
}
