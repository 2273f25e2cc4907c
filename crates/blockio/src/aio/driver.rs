//! The driver behind an [`AsyncEngine`](super::AsyncEngine): what submits
//! its requests and completes them. One of three, each in its own module:
//!
//! | name (used in the API, code, docs and `net-bench` labels) | what it is | module |
//! |---|---|---|
//! | **driver thread** ([`Driving::Thread`], `blockio-thread`) | a thread of the engine's own owns the ring | [`driver_thread`](super::driver_thread) |
//! | **caller-driven ring** ([`Driving::Caller`], `blockio-caller`) | the caller's event loop submits and reaps | [`caller_ring`](super::caller_ring) |
//! | **pool** (backend `ThreadPool`) | blocking calls on threads, sockets by readiness | [`pool`](super::pool) |
//!
//! [`Driving::Auto`], the default (`net-bench` label `blockio`), is one of
//! the first two, chosen when the engine is built: a caller-driven ring
//! submitting once per round, driven by the tokio runtime it is built on,
//! or else the driver thread.
//!
//! A caller-driven ring submits each operation when it starts
//! ([`Submit::OnStart`]) or **once per round** of tasks
//! ([`Submit::PerRound`], `net-bench` label `blockio-round`;
//! `blockio-round-stream` adds receive streams). "Inline" is kept for one
//! thing only, the batch engine serving a page-cache read on the calling
//! thread; a "batch" is a set of operations submitted together, and its
//! future is [`BatchFuture`](super::BatchFuture).
//!
//! What the three share (a request, its completion target, cancels, the
//! rule for calling user code) is in [`request`](super::request); what the
//! two io_uring drivers share (slots in flight, the backlog) is in
//! [`in_flight`](super::in_flight); the caller-driven ring's setting is
//! in [`driving`](super::driving). Those depend on no driver, and no
//! driver depends on the engine ([`AsyncEngine`](super::AsyncEngine) and
//! the modules that use it, such as [`relay`](super::relay), sit above
//! them), so the modules form no cycle.
//!
//! [`Driving::Auto`]: super::Driving::Auto
//! [`Driving::Thread`]: super::Driving::Thread
//! [`Driving::Caller`]: super::Driving::Caller
//! [`Submit::OnStart`]: super::Submit::OnStart
//! [`Submit::PerRound`]: super::Submit::PerRound

use std::io;
use std::os::fd::BorrowedFd;
use std::task::Waker;

use super::caller_ring::CallerRing;
#[cfg(feature = "tokio")]
use super::caller_ring::RingFd;
use super::driver_thread::DriverThread;
use super::in_flight::Setup;
use super::pool::PoolDriver;
use super::request::{Cancel, Request};

/// The engine's driver.
pub(crate) enum Driver {
    Thread(DriverThread),
    Caller(CallerRing),
    Pool(PoolDriver),
}

impl Driver {
    /// Threads of the pool (0 for the io_uring drivers).
    pub(crate) fn pool_threads(&self) -> usize {
        match self {
            Driver::Pool(p) => p.threads(),
            Driver::Thread(_) | Driver::Caller(_) => 0,
        }
    }

    /// Hands requests to the driver.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        match self {
            Driver::Thread(t) => t.submit(reqs),
            Driver::Caller(r) => r.submit(reqs),
            Driver::Pool(p) => p.submit(reqs),
        }
    }

    /// Cancels in the kernel the operation whose completion target is
    /// `target`, if it is in flight; a request not yet submitted is
    /// dropped as abandoned instead. The completion still arrives (usually
    /// `-ECANCELED`), and the target keeps the operation's memory until
    /// then. On the pool a socket operation waiting for readiness is
    /// completed with `-ECANCELED` at once; a file operation on a pool
    /// thread cannot be interrupted and finishes.
    pub(crate) fn cancel(&self, target: Cancel) {
        match self {
            Driver::Thread(t) => t.cancel(target),
            Driver::Caller(r) => r.cancel(target),
            Driver::Pool(p) => p.cancel(&target),
        }
    }

    /// The caller-driven ring's descriptor, to watch for completions.
    pub(crate) fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Driver::Caller(r) => Some(r.poll_fd()),
            Driver::Thread(_) | Driver::Pool(_) => None,
        }
    }

    /// Whether a caller-driven ring has requests queued or an operation in
    /// flight that must complete ([`CallerRing::awaited`]; an idle kept
    /// receive need not). The other drivers complete theirs on their own
    /// threads: `false`.
    #[cfg(feature = "tokio")]
    pub(crate) fn awaited(&self) -> bool {
        match self {
            Driver::Caller(r) => r.awaited(),
            Driver::Thread(_) | Driver::Pool(_) => false,
        }
    }

    /// The caller-driven ring's descriptor, kept open by the handle.
    #[cfg(feature = "tokio")]
    pub(crate) fn ring_fd(&self) -> Option<RingFd> {
        match self {
            Driver::Caller(r) => Some(r.ring_fd()),
            Driver::Thread(_) | Driver::Pool(_) => None,
        }
    }

    /// A caller-driven ring's turn ([`CallerRing::turn`]); returns how
    /// many operations completed. The other drivers have nothing to do
    /// here.
    pub(crate) fn turn(&self, driving_task: Option<&Waker>) -> usize {
        match self {
            Driver::Caller(r) => r.turn(driving_task),
            Driver::Thread(_) | Driver::Pool(_) => 0,
        }
    }

    /// A caller-driven ring whose driving task is gone wakes the tasks
    /// of its operations ([`CallerRing::wake_waiters`]); the other drivers
    /// complete operations on their own threads.
    #[cfg(feature = "tokio")]
    pub(crate) fn wake_waiters(&self) {
        match self {
            Driver::Caller(r) => r.wake_waiters(),
            Driver::Thread(_) | Driver::Pool(_) => {}
        }
    }

    /// Whether a call to [`setup_ring`](Self::setup_ring) from this thread
    /// would wait for this thread: it is the driver thread (a waker that
    /// polls its task in place runs the task there).
    pub(crate) fn setup_would_wait_for_itself(&self) -> bool {
        match self {
            Driver::Thread(t) => t.is_current(),
            Driver::Caller(_) | Driver::Pool(_) => false,
        }
    }

    /// Runs `setup` with the ring, on the thread that may register with it,
    /// and waits for it; the ring keeps what it returns until the ring is
    /// gone. Fails with `EOPNOTSUPP` on the pool, which has no ring, and
    /// with `EDEADLK` on the driver thread itself, which would wait for its
    /// own work.
    pub(crate) fn setup_ring(&self, setup: Setup) -> io::Result<()> {
        match self {
            Driver::Thread(t) => t.setup_ring(setup),
            Driver::Caller(r) => r.setup_ring(setup),
            Driver::Pool(_) => Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        }
    }
}
