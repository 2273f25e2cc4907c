//! A listener's multishot accept: one request armed in the kernel that
//! accepts every connection as it comes, and the queue of connections it
//! accepted that nobody has taken yet.
//!
//! # Why
//!
//! A single accept per connection is a request, a completion and a
//! re-arm per connection. A multishot accept (`IORING_ACCEPT_MULTISHOT`,
//! Linux 5.19) is armed once and posts one completion per connection, so
//! an accept storm costs no submissions at all.
//!
//! # Rules
//!
//! * **Armed while someone waits.** [`AcceptQueue::poll_next`] arms the
//!   request when the queue is empty. It stays armed until the kernel ends
//!   it (an error, such as `EMFILE`, ends a multishot accept), until the
//!   waiter goes away ([`AcceptQueue::disarm`]), or until the queue holds
//!   [`MAX_QUEUED`] connections nobody has taken: a consumer that falls
//!   behind stops the accepting and leaves connections in the kernel's
//!   backlog, where they cost no descriptor.
//! * **No connection lost.** A connection accepted after its waiter left
//!   stays queued; the listener's next accept, or next waiter, takes it
//!   first. Connections still queued when the listener is dropped are
//!   closed with it.
//! * **The descriptor outlives the request.** The queue holds the
//!   listening socket, and the driver holds the queue until the request's
//!   last completion.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use socket2::Socket;

use super::socket::Sock;
use crate::aio::request::{Cancel, Complete, Request};
use crate::backend::Backend;
use crate::op::action::{AcceptArgs, Action};
use crate::op::Op;

/// Connections accepted but not taken past which the multishot accept is
/// cancelled (and armed again once the queue is empty).
pub(crate) const MAX_QUEUED: usize = 64;

/// The multishot accept of one listener, when the kernel has it. Dropping
/// it (with its listener) cancels the request; connections it still
/// accepts are closed once its last completion is in.
pub(crate) struct AcceptQueue {
    shared: Arc<Accepts>,
    multishot: bool,
    /// The listening socket and its engine.
    sock: Sock,
}

/// What the driver completes into.
struct Accepts {
    state: Mutex<AcceptBook>,
    /// The listening socket, open until the last completion.
    _socket: Arc<Socket>,
}

/// The accept request's results and waiters.
#[derive(Default)]
struct AcceptBook {
    /// Accepted descriptors, or the errno that ended the request.
    ready: VecDeque<Result<OwnedFd, i32>>,
    /// The request is in the kernel (its last completion not yet seen).
    armed: bool,
    /// A cancellation has been sent for the armed request.
    cancelling: bool,
    /// Every task waiting for a connection.
    wakers: Vec<Waker>,
}

impl Complete for Accepts {
    fn complete(&self, res: i32) {
        self.complete_flags(res, 0);
    }

    fn complete_flags(&self, res: i32, flags: u32) {
        let wakers = {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match res {
                // SAFETY: a successful accept's result is a new descriptor
                // that nobody else owns.
                fd @ 0.. => g.ready.push_back(Ok(unsafe { OwnedFd::from_raw_fd(fd) })),
                e if e == -libc::ECANCELED => {}
                e => g.ready.push_back(Err(-e)),
            }
            if !io_uring::cqueue::more(flags) {
                g.armed = false;
                g.cancelling = false;
            }
            std::mem::take(&mut g.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
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
    /// later.
    pub(crate) fn new(sock: &Sock, multishot: bool) -> AcceptQueue {
        AcceptQueue {
            shared: Arc::new(Accepts {
                state: Mutex::default(),
                _socket: sock.socket.clone(),
            }),
            multishot: multishot
                && sock.engine.backend() == Backend::IoUring
                && crate::ring::kernel_at_least(5, 19),
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

    /// A connection accepted earlier and not yet taken (or the error that
    /// ended the request), if any.
    pub(crate) fn take(&self) -> Option<io::Result<OwnedFd>> {
        self.lock()
            .ready
            .pop_front()
            .map(|r| r.map_err(io::Error::from_raw_os_error))
    }

    /// The next connection: a queued one, or one the (re-)armed request
    /// will accept. Call only when [`multishot`](Self::multishot).
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<OwnedFd>> {
        let mut g = self.lock();
        if let Some(r) = g.ready.pop_front() {
            let full = g.ready.len() >= MAX_QUEUED;
            drop(g);
            if full {
                self.disarm();
            }
            return Poll::Ready(r.map_err(io::Error::from_raw_os_error));
        }
        if !g.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            g.wakers.push(cx.waker().clone());
        }
        if !g.armed {
            g.armed = true;
            drop(g);
            self.arm();
        }
        Poll::Pending
    }

    fn arm(&self) {
        let sock = &self.sock;
        // SAFETY: the action points at no memory; the queue, which the
        // driver holds until the last completion, keeps the socket open.
        let op = unsafe { Op::from_action(sock.fd(), Action::Accept(AcceptArgs::Multishot), None) };
        let done: Arc<dyn Complete> = self.shared.clone();
        sock.engine.driver().submit([Request { op, done }]);
    }

    /// Cancels the armed request, if any: nobody is waiting, or enough
    /// connections are queued. What it still accepts stays queued.
    pub(crate) fn disarm(&self) {
        let mut g = self.lock();
        if !g.armed || g.cancelling {
            return;
        }
        g.cancelling = true;
        drop(g);
        let weak = Arc::downgrade(&self.shared);
        self.sock.engine.driver().cancel(Cancel(weak));
    }
}

impl Drop for AcceptQueue {
    fn drop(&mut self) {
        self.disarm();
    }
}
