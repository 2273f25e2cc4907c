//! tokio's paused clock (`tokio::time::pause`, tokio's `test-util`)
//! against operations in flight: a paused clock must not move while
//! blockio has work in flight that completes without the peer doing
//! anything more, on every backend and driving mode, as on tokio's own
//! sockets.
//!
//! A paused current-thread runtime that finds no task to run polls its
//! I/O driver once without waiting and, unless that poll woke a task (or
//! something outside woke the runtime), moves the clock to its next timer
//! at once; it does not while a `spawn_blocking` task runs. tokio's own
//! sockets are in that poll, and `tokio::fs` runs on `spawn_blocking`. A
//! blockio operation's completion can reach its task from outside that
//! poll, and between the event and the wake-up the runtime looks idle and
//! the clock jumps, so a timer beside the operation fires first:
//! * on a driver thread ([`Driving::Thread`](super::Driving::Thread)) and
//!   on the thread pool, a thread of the engine's completes every
//!   operation;
//! * a TCP listener's accept waits in the engine's readiness set (an
//!   epoll set, on every backend), whose events the set's readiness
//!   thread takes while no task of the runtime holds the set: the accept
//!   is made and its task woken on that thread. On a ring the runtime
//!   drives (the default engine on io_uring) this is what lost the race
//!   of a reply against a timer in up to 81 rounds of 200
//!   (`tests/paused_clock_race.rs`): the client's connect, its request and
//!   the timer all went ahead while the server's accept was on that
//!   thread;
//! * a file operation on a ring completes in the kernel (its worker
//!   threads, or a wake-up of a pipe), with no peer, and is seen by the
//!   runtime only once posted;
//! * a socket operation on a ring completes by task work that the kernel
//!   runs on the runtime's thread at its next system call
//!   (`COOP_TASKRUN`): bytes a peer on another thread sends while that
//!   thread is between two calls can make the ring readable only after
//!   the runtime's next poll found nothing.
//!
//! So, on such a runtime, with its clock paused when the operation
//! starts, whatever drives the engine:
//! * a file operation, which completes on its own, holds the clock, as
//!   `tokio::fs` does: a `spawn_blocking` task of the runtime's
//!   ([`ClockHold`]) runs from its start until its completion has woken
//!   its task (the operations of a batch, `AsyncFile::submit`, share
//!   one);
//! * a receive, a send and a connect are made by a task of the runtime's,
//!   on its thread, as tokio's are: tried at once without waiting
//!   (`MSG_DONTWAIT`; a connect with its socket non-blocking for that one
//!   call), and, while the socket has nothing for them (`EAGAIN`, a
//!   connect in progress), waiting for it to be ready (readable, writable)
//!   in the runtime's reactor and tried again. Nothing of the engine's
//!   takes part and nothing holds the clock: an idle socket, a receive
//!   whose bytes another reader of the socket took first, a connect nobody
//!   answers (a listener whose queue is full drops the SYN, which the
//!   kernel retries for minutes) leave the clock free to jump, as on
//!   tokio, and bytes (or a connection) that arrived are taken within the
//!   runtime's poll;
//! * an accept waits for its listener to be readable in the runtime's
//!   reactor, as a tokio listener does, and only then starts, holding the
//!   clock until its completion (`accept` has no form that does not wait
//!   on a blocking listener).
//!
//! Elsewhere (no tokio runtime, a multi-thread runtime, whose clock cannot
//! be paused, or a clock running) operations start as usual. A ring
//! driven by another runtime is treated as a driver thread is: the
//! operation is made, or waits and holds the clock, on the runtime it
//! starts on.
//!
//! The clock's state is read when the operation starts: an operation
//! started before `pause()` is not held. A receive stream made on such a
//! runtime receives one buffer at a time, each receive made as an owned
//! read's (the receives on the engine's buffer ring, which its driver
//! re-arms, would not be); one made before `pause()` keeps the ring. A multishot accept starts as
//! before. The multishot receive a stream keeps armed across trait reads
//! (`net::read_side`) is not armed while the clock is paused; one armed
//! before `pause()` is cancelled by the first read that finds nothing it
//! posted, which holds the clock ([`clock_hold`]) until the cancel has
//! woken its task and then receives as above.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::attempt;
use super::request::{call_user, resume, Request};
use super::AsyncEngine;
use crate::kind::{OpClass, OpKind};

/// A running `spawn_blocking` task of one runtime, which keeps that
/// runtime's paused clock from moving on its own until this is dropped.
/// Shared by every operation that holds the clock of that runtime.
pub(crate) struct ClockHold {
    /// Dropped with the hold: the blocking task's `recv` then returns.
    _release: mpsc::Sender<()>,
}

/// The holds in force, one per runtime at most.
static HOLDS: Mutex<Vec<(tokio::runtime::Id, Weak<ClockHold>)>> = Mutex::new(Vec::new());

impl ClockHold {
    /// The hold on `runtime`'s clock: the one in force, or a new one.
    fn on(runtime: &Handle) -> Arc<ClockHold> {
        let mut holds = HOLDS.lock().unwrap_or_else(|e| e.into_inner());
        holds.retain(|(_, hold)| hold.strong_count() > 0);
        let held = holds
            .iter()
            .find(|(id, _)| *id == runtime.id())
            .and_then(|(_, hold)| hold.upgrade());
        if let Some(hold) = held {
            return hold;
        }
        let (release, released) = mpsc::channel::<()>();
        // tokio stops the clock's auto-advance when the task is spawned
        // (before this returns), and lets it go when the task has ended,
        // which is once every handle on the hold is dropped.
        drop(runtime.spawn_blocking(move || {
            let _ = released.recv();
        }));
        let hold = Arc::new(ClockHold { _release: release });
        holds.push((runtime.id(), Arc::downgrade(&hold)));
        hold
    }
}

/// The current-thread runtime the caller runs on, if its clock is
/// paused. tokio offers no way to ask but its clock: paused, it does not
/// move while the real one does.
fn paused_runtime() -> Option<Handle> {
    let runtime = Handle::try_current().ok()?;
    if runtime.runtime_flavor() != RuntimeFlavor::CurrentThread {
        return None;
    }
    let before = tokio::time::Instant::now();
    if tokio::time::Instant::now() != before {
        // Running (the usual answer, for the price of two reads).
        return None;
    }
    let real = std::time::Instant::now();
    // Until the real clock has moved since `before` was read.
    while std::time::Instant::now() == real {
        std::hint::spin_loop();
    }
    (tokio::time::Instant::now() == before).then_some(runtime)
}

/// Whether the caller runs on a current-thread runtime whose clock is
/// paused: a receive stream made there receives one buffer at a time, as
/// an owned read does, so that each receive is made on the runtime's
/// thread (a receive armed on the engine's buffer ring goes to the driver
/// as it is).
pub(crate) fn clock_paused() -> bool {
    paused_runtime().is_some()
}

/// A hold on the clock of the current-thread runtime the caller runs on,
/// if its clock is paused: a trait read that finds the stream's kept
/// multishot receive (made on the engine's driver, see `net::read_side`)
/// with nothing queued has it cancelled, and keeps this until the cancel
/// has woken its task, as a receive made then would hold the clock.
pub(crate) fn clock_hold() -> Option<Arc<dyn Send + Sync>> {
    let runtime = paused_runtime()?;
    let hold: Arc<dyn Send + Sync> = ClockHold::on(&runtime);
    Some(hold)
}

/// File requests of one batch, about to be handed to their engine
/// together: each holds the clock, as a file operation started alone
/// does (see the module's documentation).
pub(crate) fn hold_clock_for_files(reqs: &[Request]) {
    if reqs.is_empty() {
        return;
    }
    let Some(runtime) = paused_runtime() else {
        return;
    };
    let hold = ClockHold::on(&runtime);
    for req in reqs {
        req.done.hold(hold.clone());
    }
}

/// How a request reaches its engine once the clock lets it.
pub(crate) type SubmitFn = fn(&AsyncEngine, Request);

/// `req`, about to be handed to `engine`'s driver by the future that made
/// it, on the fd `fd`: given back to be submitted now, holding the clock
/// as it must (see the module's documentation); or, when it waits for its
/// socket in the runtime's reactor first, in a task of that runtime's
/// that then submits it, that task's [`Gate`], to cancel the request if
/// the future is dropped first.
pub(crate) fn hold_clock(engine: &AsyncEngine, req: Request, fd: RawFd) -> Result<Request, Gate> {
    hold_clock_with(engine, req, fd, |engine, req| engine.driver().submit([req]))
}

/// [`hold_clock`], for a request that reaches its engine by `submit` (an
/// accept waiting in the engine's readiness set).
pub(crate) fn hold_clock_with(
    engine: &AsyncEngine,
    req: Request,
    fd: RawFd,
    submit: SubmitFn,
) -> Result<Request, Gate> {
    let Some(runtime) = paused_runtime() else {
        return Ok(req);
    };
    let ready = match req.op.kind().class() {
        OpClass::SocketIn => Ready::Readable,
        OpClass::SocketOut => Ready::Writable,
        OpClass::FileData | OpClass::Metadata => {
            req.done.hold(ClockHold::on(&runtime));
            return Ok(req);
        }
    };
    let cancelled = Arc::new(AtomicBool::new(false));
    let on_this_thread = performed_here(&req);
    let gated_req = Gated {
        req: Some(req),
        engine: engine.clone(),
        submit,
        cancelled: cancelled.clone(),
    };
    let task = if on_this_thread {
        runtime.spawn(performed(gated_req, fd, ready))
    } else {
        runtime.spawn(gated(gated_req, fd, ready))
    };
    Err(Gate {
        task: task.abort_handle(),
        cancelled,
    })
}

/// The task that submits a request once its socket is ready.
pub(crate) struct Gate {
    task: tokio::task::AbortHandle,
    /// Set by [`cancel`](Self::cancel): the request is not to be made.
    cancelled: Arc<AtomicBool>,
}

impl Gate {
    /// The request will not be made (its future is gone): if the task
    /// has not submitted it yet, it never will, and the request completes
    /// with `ECANCELED`. One already submitted is the driver's to cancel.
    pub(crate) fn cancel(self) {
        self.cancelled.store(true, Ordering::Release);
        self.task.abort();
    }
}

/// What a socket operation waits for.
#[derive(Clone, Copy)]
enum Ready {
    Readable,
    Writable,
}

impl Ready {
    fn interest(self) -> Interest {
        match self {
            Ready::Readable => Interest::READABLE,
            Ready::Writable => Interest::WRITABLE,
        }
    }

    fn poll_flags(self) -> rustix::event::PollFlags {
        use rustix::event::PollFlags;
        match self {
            Ready::Readable => PollFlags::IN | PollFlags::RDHUP,
            Ready::Writable => PollFlags::OUT,
        }
    }
}

/// A request waiting in [`gated`], and how it reaches its engine. If
/// that task is dropped before submitting it: cancelled ([`Gate::cancel`]),
/// it completes with `ECANCELED`, as a cancelled operation does; dropped
/// with its runtime (shut down, or refusing new tasks as it shuts down),
/// it is submitted as it would be with the clock running, since the
/// operation itself was not cancelled (a dropped stream's last bytes).
struct Gated {
    req: Option<Request>,
    engine: AsyncEngine,
    submit: SubmitFn,
    cancelled: Arc<AtomicBool>,
}

impl Drop for Gated {
    fn drop(&mut self) {
        let Some(req) = self.req.take() else {
            return;
        };
        if self.cancelled.load(Ordering::Acquire) {
            req.done.complete(-libc::ECANCELED);
        } else {
            (self.submit)(&self.engine, req);
        }
    }
}

/// Waits until `fd` is `ready` in the reactor of the runtime this task
/// runs on, then submits the request its own way, the clock held. A
/// socket the reactor cannot watch (a runtime without I/O) is not waited
/// for: the request is submitted at once, holding the clock until it
/// completes.
async fn gated(mut gate: Gated, fd: RawFd, ready: Ready) {
    if let Ok(watched) = watch(fd, ready) {
        loop {
            let Ok(mut guard) = watched.ready(ready.interest()).await else {
                break;
            };
            if ready_now(fd, ready) {
                break;
            }
            guard.clear_ready();
        }
    }
    let Some(req) = gate.req.take() else {
        return;
    };
    if let Ok(runtime) = Handle::try_current() {
        req.done.hold(ClockHold::on(&runtime));
    }
    (gate.submit)(&gate.engine, req);
}

/// Whether `req` is made by a task of the runtime's on its own thread
/// ([`performed`]), as a tokio socket's is: a receive, a send, a connect.
/// An accept (no call accepts without waiting on a blocking listener) is
/// submitted once the listener is readable ([`gated`]).
fn performed_here(req: &Request) -> bool {
    matches!(
        req.op.kind(),
        OpKind::Recv | OpKind::Send | OpKind::SendVectored | OpKind::Connect
    )
}

/// Makes the request on this task's thread without waiting, as a tokio
/// socket does, and completes it: tried at once, and again each time
/// `fd` is `ready` in the runtime's reactor while the socket has nothing
/// for it (`EAGAIN`; a connect in progress). Nothing of the engine's
/// takes part and the clock is never held: a receive whose bytes another
/// reader took, or a connect nobody answers, waits in the reactor with
/// the clock free to move, and a completion is seen by the runtime as it
/// happens. Where the reactor cannot watch the socket, the request goes
/// to its engine as [`gated`] submits it.
async fn performed(mut gate: Gated, fd: RawFd, ready: Ready) {
    let Some(req) = gate.req.as_ref() else {
        return;
    };
    if req.abandoned() {
        // Nobody takes the result: never made, as a driver drops it.
        drop(gate.req.take());
        return;
    }
    let mut res = first_attempt(req);
    if attempt::not_ready(req, res) {
        let Ok(watched) = watch(fd, ready) else {
            return gated(gate, fd, ready).await;
        };
        loop {
            let Ok(mut guard) = watched.ready(ready.interest()).await else {
                return gated(gate, fd, ready).await;
            };
            let Some(req) = gate.req.as_ref() else {
                return;
            };
            res = later_attempt(req);
            if !attempt::not_ready(req, res) {
                break;
            }
            guard.clear_ready();
        }
    }
    let Some(req) = gate.req.take() else {
        return;
    };
    resume(call_user(move || {
        req.done.complete(res);
        drop(req);
    }));
}

/// The request's first call, without waiting: a receive or a send with
/// `MSG_DONTWAIT`; a connect with the socket non-blocking for that call
/// (`EINPROGRESS` then), its flags put back at once so the operations the
/// engine makes on it later wait as before.
fn first_attempt(req: &Request) -> i32 {
    if let Some(res) = req.op.run_nowait_raw() {
        return res;
    }
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    // SAFETY: as in `watch`: the socket is open while its request waits.
    let socket = unsafe { BorrowedFd::borrow_raw(req.op.fd()) };
    let flags = match fcntl_getfl(socket) {
        Ok(flags) => flags,
        Err(e) => return -e.raw_os_error(),
    };
    let blocking = !flags.contains(OFlags::NONBLOCK);
    if blocking {
        if let Err(e) = fcntl_setfl(socket, flags | OFlags::NONBLOCK) {
            return -e.raw_os_error();
        }
    }
    let res = req.op.run_blocking_raw();
    if blocking {
        // Cannot fail on a descriptor the call above accepted.
        let _ = fcntl_setfl(socket, flags);
    }
    res
}

/// The request's call once its socket is ready: a receive or a send made
/// again, a connect's outcome asked of its socket.
fn later_attempt(req: &Request) -> i32 {
    req.op
        .run_nowait_raw()
        .unwrap_or_else(|| attempt::connect_progress(req))
}

/// `fd`, duplicated, registered with the current runtime's reactor for
/// `ready`: a descriptor of its own, so that two operations waiting
/// on one socket are two registrations. tokio panics where the runtime
/// has I/O disabled: that is an error here.
fn watch(fd: RawFd, ready: Ready) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the request's operation keeps its socket open until it
    // completes, and it has not yet been submitted: `fd` is open here.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    let dup = rustix::io::fcntl_dupfd_cloexec(socket, 0)?;
    std::panic::catch_unwind(move || {
        // The `OwnedFd` moved into the `AsyncFd` stays open until the
        // `AsyncFd` is dropped (which deregisters it first): the I/O-safety
        // condition of tokio 1.54's `register_with_interest` holds. That
        // function is not used so that tokio 1.49 is enough (see
        // `tokio_drive::watch`).
        #[allow(deprecated)]
        AsyncFd::with_interest(dup, ready.interest())
    })
    .unwrap_or_else(|_| Err(io::Error::other("this tokio runtime has I/O disabled")))
}

/// Whether `fd` is `ready` (or at its end, or failed) now.
fn ready_now(fd: RawFd, ready: Ready) -> bool {
    // SAFETY: as in `watch`: the socket is open while its request waits.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut polled = [rustix::event::PollFd::new(&socket, ready.poll_flags())];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // An error (none is expected of one open descriptor) counts as
    // readable: the operation then reports it.
    rustix::event::poll(&mut polled, Some(&zero)).map_or(true, |n| n > 0)
}
