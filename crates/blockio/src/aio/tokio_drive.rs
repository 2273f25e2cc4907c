//! Driving a caller-driven engine from tokio's own reactor.
//!
//! The fastest way to run sockets (and files) on tokio: no driver thread,
//! so no cross-thread wake-up per operation. The ring's descriptor is
//! registered with tokio's reactor, which wakes the driving task when
//! completions wait; the engine wakes it when an operation starts (with
//! [`Submit::PerRound`](super::Submit::PerRound),
//! so that a whole round of tasks reaches the kernel in one call). The
//! descriptor's readiness is the completion queue's state, so the task
//! reaps after clearing it and nothing is lost to a completion that races
//! the clearing.
//!
//! When the runtime goes (or its driving task is aborted), the engine is
//! driven again by the next task that uses it on a tokio runtime
//! ([`ensure_driven`]). Meanwhile a relay thread (`blockio-relay`, a
//! current-thread runtime of its own) drives it only while something must
//! complete without such a task: the bytes dropped streams still have
//! queued, and operations a task waits for (on an executor that cannot
//! drive the engine). A receive kept armed for a stream's next read with
//! no task waiting on it is not such work, whether queued or in the
//! kernel: what it posts waits in the ring until that read, whose task
//! has the engine driven again. So streams kept idle past their runtimes
//! keep no thread, and the relay thread of an engine exits once its
//! dropped streams' queues are sent, the operations tasks wait for (a
//! write the kernel holds included) have completed, and a dropped
//! stream's kept receive has had its cancel reaped.

use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::caller_ring::RingFd;
use super::{AsyncEngine, AsyncEngineBuilder, CallerDriving, Driving, Submit, WeakEngine};

/// The error of a caller-driven engine on a tokio runtime without I/O,
/// whose reactor cannot watch the ring.
const IO_DISABLED: &str = "this tokio runtime has I/O disabled, so it cannot drive a \
    caller-driven blockio engine (drive_on_tokio watches the ring through tokio's reactor): \
    build the runtime with enable_io() or enable_all(), or build the engine with Driving::Thread";

/// The tokio runtimes found to have I/O disabled, which cannot watch a
/// ring: tokio is not asked again there (each ask prints its panic
/// message). No driver is spawned on them (each attempt would fail at once
/// and wake every waiting task, on every such runtime, to try again), and
/// an engine with [`Driving::Auto`] built there gets the driver thread.
/// One id per such runtime that built or used an engine.
static IO_DISABLED_RUNTIMES: Mutex<Vec<tokio::runtime::Id>> = Mutex::new(Vec::new());

/// The tokio runtimes lately found shutting down (a driver spawned there
/// was dropped at once): no driver is spawned on them again. Each attempt
/// would be dropped at once too, and its drop wakes every waiting task,
/// whose next poll (a dropped stream's send loop, on the thread dropping
/// the runtime's tasks) would try again: a livelock that kept a runtime's
/// drop from returning. What is in flight there is finished by the relay
/// thread instead ([`relay_if_undriven`]). A runtime that has begun to
/// shut down never runs again, and ids are never reused, so only the
/// latest few are kept: one pushed out costs one more spawn that fails.
static CLOSING_RUNTIMES: Mutex<Vec<tokio::runtime::Id>> = Mutex::new(Vec::new());

/// How many runtimes [`CLOSING_RUNTIMES`] keeps.
const CLOSING_KEPT: usize = 16;

/// Whether `runtime` was found shutting down (see [`CLOSING_RUNTIMES`]).
pub(super) fn closing(runtime: &tokio::runtime::Handle) -> bool {
    CLOSING_RUNTIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&runtime.id())
}

/// Notes that `runtime` is shutting down (see [`CLOSING_RUNTIMES`]).
pub(super) fn note_closing(runtime: &tokio::runtime::Handle) {
    let mut closing = CLOSING_RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    if !closing.contains(&runtime.id()) {
        if closing.len() >= CLOSING_KEPT {
            closing.remove(0);
        }
        closing.push(runtime.id());
    }
}

/// The error of an operation started on a runtime shutting down.
const SHUTTING_DOWN: &str = "the tokio runtime this task runs on is shutting down, so it \
    cannot drive this caller-driven engine any more";

/// [`IO_DISABLED_RUNTIMES`], locked.
fn io_disabled() -> std::sync::MutexGuard<'static, Vec<tokio::runtime::Id>> {
    IO_DISABLED_RUNTIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Registers the ring of `engine` with the reactor of the runtime the
/// caller runs on. The registration holds the ring's descriptor open
/// ([`RingFd`]): the engine may be gone while the driving task still holds
/// the registration, and tokio's deregistration then still names the ring,
/// never another file. tokio panics where that runtime has I/O disabled:
/// the panic is caught and becomes an error of kind
/// [`Other`](io::ErrorKind::Other) saying so, and the runtime is
/// remembered ([`IO_DISABLED_RUNTIMES`]) so that it is not asked again:
/// tokio's panic message, which the panic hook still prints, comes once
/// per such runtime.
fn watch(engine: &AsyncEngine) -> io::Result<AsyncFd<RingFd>> {
    let ring = engine
        .driver()
        .ring_fd()
        .expect("drive_on_tokio registers only engines with a ring");
    register(ring)
}

/// Registers `fd` with the reactor of the runtime the caller runs on,
/// for reading, as [`watch`] says: a runtime with I/O disabled is an
/// error of kind [`Other`](io::ErrorKind::Other) saying so, remembered.
/// `fd` must hold its descriptor open and return it from `as_raw_fd`
/// until the `AsyncFd` is dropped.
pub(crate) fn register<T: AsRawFd>(fd: T) -> io::Result<AsyncFd<T>> {
    register_for(fd, Interest::READABLE)
}

/// [`register`] for reading and writing: a stream's socket, whose trait
/// reads and writes share one registration (a descriptor joins a
/// runtime's reactor once).
pub(crate) fn register_rw<T: AsRawFd>(fd: T) -> io::Result<AsyncFd<T>> {
    register_for(fd, Interest::READABLE | Interest::WRITABLE)
}

/// [`register`] with `interest`.
fn register_for<T: AsRawFd>(fd: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // A runtime already found with I/O disabled is not asked again: each
    // ask prints tokio's panic message (and aborts under a hook that does).
    if tokio::runtime::Handle::try_current().is_ok_and(|runtime| refuses(&runtime)) {
        return Err(io::Error::other(IO_DISABLED));
    }
    let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The `fd` moved into the `AsyncFd` keeps its descriptor open
        // until the `AsyncFd` is dropped (which deregisters it first), and
        // its `as_raw_fd` always returns that descriptor (the caller's
        // promise): the I/O-safety condition of tokio 1.54's `unsafe
        // AsyncFd::register_with_interest` holds. That function is not
        // used, so that tokio 1.49 (the first with `runtime::Id`, which
        // `IO_DISABLED_RUNTIMES` and the default engines need) is enough;
        // 1.54 deprecated this spelling of the same call, nothing more.
        #[allow(deprecated)]
        AsyncFd::with_interest(fd, interest)
    }));
    match registered {
        Ok(watched) => Ok(watched?),
        Err(_) => {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let mut refused = io_disabled();
                if !refused.contains(&runtime.id()) {
                    refused.push(runtime.id());
                }
            }
            Err(io::Error::other(IO_DISABLED))
        }
    }
}

/// [`Driving::Auto`] on the tokio runtime the caller runs on, if it runs
/// on one with I/O enabled: the engine, built as a caller-driven ring
/// submitting once per round, with its driving task spawned there.
/// `None` where there is no such runtime: the caller builds the engine
/// with [`Driving::Thread`].
///
/// Built with `panic = "abort"`, it is always `None`: tokio offers no way
/// to ask whether a runtime has I/O but to register with it, which panics
/// where it has none, and such a panic cannot be caught there.
pub(super) fn build_on_runtime(builder: &AsyncEngineBuilder) -> io::Result<Option<AsyncEngine>> {
    if cfg!(panic = "abort") {
        return Ok(None);
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Ok(None);
    };
    if refuses(&runtime) {
        return Ok(None);
    }
    let caller = Driving::Caller(CallerDriving::new().submit(Submit::PerRound));
    let engine = builder.build_as(caller)?;
    if engine.poll_fd().is_none() {
        // The thread pool, whose threads complete every operation: built
        // again as the driver thread's, so that `driving()` says no
        // runtime drives it.
        return Ok(None);
    }
    // An error is a runtime without I/O (remembered by `watch`) or one
    // shutting down: the driver thread serves either.
    Ok(spawn_driver(&engine, &runtime).ok().map(|()| engine))
}

/// Spawns the driving task of `engine` on `runtime`, unless one is counted
/// already (one new driver however many tasks race here: the count is
/// claimed before the task is spawned). The ring is registered here, on
/// the caller's thread, so that a runtime without I/O fails this before
/// any operation reaches the kernel.
fn spawn_driver(engine: &AsyncEngine, runtime: &tokio::runtime::Handle) -> io::Result<()> {
    let drivers = engine.tokio_drivers();
    if drivers
        .running
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(());
    }
    let counted = Counted(engine.downgrade());
    drivers.ever.store(true, Ordering::Release);
    let watched = Some(watch(engine)?);
    SPAWNING.set(true);
    let spawned = runtime.spawn(drive_counted(Hold { watched, counted }));
    SPAWNING.set(false);
    if spawned.is_finished() {
        note_closing(runtime);
        return Err(io::Error::other(SHUTTING_DOWN));
    }
    Ok(())
}

/// Whether `runtime` was found to have I/O disabled (see [`watch`]).
pub(super) fn refuses(runtime: &tokio::runtime::Handle) -> bool {
    io_disabled().contains(&runtime.id())
}

/// Drives `engine`, built with
/// [`Driving::Caller`](super::Driving::Caller), from
/// the tokio task that awaits this: it completes operations and wakes their
/// tasks whenever tokio's reactor reports completions, and submits started
/// operations whenever it is woken. Spawn it once per engine; it returns
/// `Ok` once the engine's last handle and operation are gone (it does not
/// keep the engine alive), or ends when aborted or dropped. An engine
/// built with [`Driving::Auto`](super::Driving::Auto) (the default) on a
/// tokio runtime has this task spawned by its builder already.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
/// use blockio::net::{TcpListener, TcpStream};
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let engine = AsyncEngine::builder()
///         .driving(Driving::Caller(CallerDriving::new().submit(Submit::PerRound)))
///         .build()?;
///     let driver = tokio::spawn(drive_on_tokio(engine.clone()));
///     let listener = TcpListener::bind_with(&engine, "127.0.0.1:0").await?;
///     let client = TcpStream::connect_with(&engine, listener.local_addr()?);
///     let (accepted, client) = tokio::join!(listener.accept(), client);
///     let (served, _) = accepted?;
///     client?.write_all(b"ping".to_vec()).await.0?;
///     let (n, buf) = served.read(vec![0u8; 4]).await;
///     assert_eq!(&buf[..n?], b"ping");
///     driver.abort();
///     Ok(())
/// })
/// # }
/// ```
///
/// Returns `Ok` at once for an engine with nothing to drive: one with its
/// own driver thread, or on the thread-pool backend, whose operations
/// complete on its threads.
///
/// Once the task is dropped (its runtime shut down, the task aborted, or
/// a panic in it), the next task that uses the engine on a tokio runtime
/// spawns this there again, so streams and operations carry on on another
/// runtime (see [`Driving::Caller`](super::Driving::Caller)). Operations
/// already waiting are not stranded: when the engine's last driving task
/// is dropped, every task awaiting one of its operations is woken, and
/// its next poll spawns the new driver on its own runtime (a task of a
/// runtime that is gone is never polled again; one on no tokio runtime
/// gets the error of an undriven engine). So aborting this task never
/// stalls another task's read, as aborting an unrelated tokio task never
/// does.
///
/// # Errors
/// tokio's reactor could not watch the ring, or reports an error on it.
/// On a runtime with I/O disabled (built without `enable_io` or
/// `enable_all`) the error, of kind [`Other`](io::ErrorKind::Other), says
/// so, and operations then started on that runtime fail with the same
/// error (an operation already in the kernel waits until a driver runs).
pub fn drive_on_tokio(
    engine: AsyncEngine,
) -> impl std::future::Future<Output = io::Result<()>> + Send + 'static {
    // Counted from the call, not from the first poll: a driver task that
    // its runtime never polled still makes the engine tokio-driven, and its
    // future dropped unpolled counts as a driver gone (takeover on tokio,
    // an error elsewhere), never as an engine nobody drives.
    let counted = engine.poll_fd().is_some().then(|| {
        let drivers = engine.tokio_drivers();
        drivers.running.fetch_add(1, Ordering::AcqRel);
        drivers.ever.store(true, Ordering::Release);
        Counted(engine.downgrade())
    });
    async move {
        match counted {
            Some(counted) => {
                let watched = None;
                drive_counted(Hold { watched, counted }).await
            }
            None => Ok(()),
        }
    }
}

/// See [`AsyncEngine::relay_if_undriven`]: a thread with a runtime of its
/// own drives the engine until no dropped stream has bytes queued and no
/// request is queued or operation in flight that must complete (see
/// [`Complete::awaited`](super::request::Complete::awaited): a receive
/// kept armed with no task waiting on it need not, queued or in flight;
/// one the relay thread submitted is cancelled by the kernel when the
/// thread exits, and the stream's next read arms it again), or a
/// `drive_on_tokio` task drives it again. Operations in flight when the
/// last driving task went complete so (a task awaiting one on another
/// executor gets its result, not a hang; one the kernel cancelled, as it
/// does a thread's waiting operations when the thread exits, is then
/// refused as any new operation there is). Called again when such a task
/// parks on a kept receive after the driver went
/// (`Sock::parked_undriven`), and by the relay thread as it exits, so
/// that a task that starts waiting while the relay stops is still served.
pub(super) fn relay_if_undriven(engine: &AsyncEngine) {
    let drivers = engine.tokio_drivers();
    let undriven = drivers.ever.load(Ordering::Acquire)
        && drivers.running.load(Ordering::Acquire) == 0
        && (drivers.lingering.load(Ordering::Acquire) > 0 || engine.driver().awaited());
    if !undriven || drivers.relaying.swap(true, Ordering::AcqRel) {
        return;
    }
    let relayed = engine.clone();
    let started = crate::arenas::spawn("blockio-relay", None, move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
        {
            let _entered = rt.enter();
            ON_RELAY.set(true);
            let stop = |cx: &mut std::task::Context<'_>| {
                let drivers = relayed.tokio_drivers();
                // The waker first, so that a change after the check
                // wakes this task.
                *drivers
                    .relay_waker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
                drivers.live.load(Ordering::Acquire) > 0
                    || (drivers.lingering.load(Ordering::Acquire) == 0
                        && !relayed.driver().awaited())
            };
            // An error of tokio's reactor leaves the queues to their
            // linger, as with no relay.
            if let Ok(watched) = watch(&relayed) {
                let _ = rt.block_on(drive_while(watched, relayed.downgrade(), stop));
            }
        }
        let drivers = relayed.tokio_drivers();
        drivers.relaying.store(false, Ordering::Release);
        // A stream dropped after the last check and before the flag
        // went down found the relay running.
        relay_if_undriven(&relayed);
    });
    if started.is_err() {
        drivers.relaying.store(false, Ordering::Release);
    }
}

thread_local! {
    /// Whether this thread is spawning a driver in [`ensure_driven`].
    static SPAWNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether this thread is a relay thread, whose runtime drives the
    /// engine already: its tasks never spawn a driver (the ring is
    /// registered with that runtime's reactor once).
    static ON_RELAY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A running `drive_on_tokio` task, counted in its engine's
/// [`TokioDrivers`](super::relay::TokioDrivers) until dropped; it does
/// not keep the engine alive.
struct Counted(WeakEngine);

impl Drop for Counted {
    /// The last driver gone: every task waiting for an operation is woken,
    /// so that its next poll spawns a new driver on its runtime (a task of
    /// a runtime shut down is never polled again, and one on no runtime
    /// gets the error of [`ensure_driven`]); and with dropped streams still
    /// sending, the relay thread takes over; and the default engines'
    /// list forgets the runtime's engine at once. Nothing to do for an
    /// engine that is gone.
    fn drop(&mut self) {
        let Some(engine) = self.0.upgrade() else {
            return;
        };
        let before = engine
            .tokio_drivers()
            .running
            .fetch_sub(1, Ordering::AcqRel);
        if before == 1 {
            engine.driver().wake_waiters();
        }
        relay_if_undriven(&engine);
        drop(engine);
        if before == 1 {
            super::runtime_engines::runtime_gone();
        }
    }
}

/// Makes sure a caller-driven engine whose `drive_on_tokio` task is gone
/// is driven again: spawns a new one on the calling task's tokio runtime,
/// or fails (no runtime to spawn it on, or one without I/O) with an error
/// saying so. `Ok` at once for every other engine. Called by
/// [`Admission::admit`](super::driven::Admission::admit) alone, the one
/// place operations and sockets ask.
///
/// Asked at every operation's start and poll, so the usual answer (never
/// driven by such a task, or one is running) is inlined there, and the
/// rest kept apart ([`drive_again`]).
#[inline]
pub(super) fn ensure_driven(engine: &AsyncEngine) -> io::Result<()> {
    let drivers = engine.tokio_drivers();
    if !drivers.ever.load(Ordering::Acquire) || drivers.running.load(Ordering::Acquire) > 0 {
        return Ok(());
    }
    drive_again(engine)
}

/// [`ensure_driven`] for an engine whose `drive_on_tokio` task is gone:
/// apart, so that the check every operation makes stays small.
#[cold]
#[inline(never)]
fn drive_again(engine: &AsyncEngine) -> io::Result<()> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // Nothing new starts here; operations already started (a
        // `write_all`'s next send, pushed before its future is polled; a
        // receive stream's armed receive) are driven to their end by the
        // relay thread, as those in flight when the driver went.
        relay_if_undriven(engine);
        return Err(io::Error::other(
            "the tokio runtime whose task drove this caller-driven engine (drive_on_tokio) \
             is gone, and this task runs on no tokio runtime to drive it: spawn \
             drive_on_tokio(engine.clone()) on the executor that uses the engine, or build \
             the engine with Driving::Thread",
        ));
    };
    if ON_RELAY.get() {
        // The relay's own tasks (the dropped streams' sends): it drives.
        return Ok(());
    }
    if refuses(&runtime) {
        return Err(io::Error::other(IO_DISABLED));
    }
    if closing(&runtime) {
        // Found shutting down: as with no runtime, what is already in
        // flight (a dropped stream's queue) is finished by the relay
        // thread, never by a driver spawned there again.
        relay_if_undriven(engine);
        return Err(io::Error::other(SHUTTING_DOWN));
    }
    if SPAWNING.get() {
        // Woken by the drop of a driver this thread is spawning (a
        // runtime shutting down drops a new task at once, which wakes
        // every waiting task): not one more spawn from inside that one.
        return Ok(());
    }
    spawn_driver(engine, &runtime)
}

/// What a `drive_on_tokio` task holds from its start: the ring's
/// registration with tokio's reactor, if made already, and the task's
/// count. The fields drop in this order, the registration first: the
/// count's drop wakes the tasks waiting for operations, and one polled
/// at once on another worker registers the ring again with the same
/// reactor (a new driver), which fails with `EEXIST` while the old
/// registration is there. A runtime shutting down drops its tasks, this
/// one unpolled maybe, while its workers still poll others.
struct Hold {
    /// The ring registered, or `None` to register it when first polled.
    watched: Option<AsyncFd<RingFd>>,
    counted: Counted,
}

/// The body of [`drive_on_tokio`], already counted (see [`Hold`]).
async fn drive_counted(mut hold: Hold) -> io::Result<()> {
    let Some(engine) = hold.counted.0.upgrade() else {
        return Ok(());
    };
    let weak = engine.downgrade();
    // Dropped before `hold` (a parameter, dropped after the locals),
    // whatever the point the future is dropped at.
    let watched = match hold.watched.take() {
        Some(watched) => watched,
        None => watch(&engine)?,
    };
    let _live = Live::new(&engine);
    drop(engine);
    drive_while(watched, weak, |_| false).await
}

/// A `drive_on_tokio` task that is driving, counted in
/// [`TokioDrivers::live`](super::relay::TokioDrivers) until dropped; the
/// relay thread, if one drives meanwhile, hands over to it.
struct Live(WeakEngine);

impl Live {
    fn new(engine: &AsyncEngine) -> Live {
        let drivers = engine.tokio_drivers();
        drivers.live.fetch_add(1, Ordering::AcqRel);
        drivers.wake_relay();
        Live(engine.downgrade())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(engine) = self.0.upgrade() {
            engine.tokio_drivers().live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Drives `engine`, whose ring `watched` is, until `stop` says so (asked
/// each time the task is polled, with its context) or the engine is gone
/// (its ring, when it drops, wakes the task that drove it last).
async fn drive_while(
    watched: AsyncFd<RingFd>,
    engine: WeakEngine,
    mut stop: impl FnMut(&mut std::task::Context<'_>) -> bool,
) -> io::Result<()> {
    poll_fn(|cx| loop {
        if stop(cx) {
            return Poll::Ready(Ok(()));
        }
        match engine.upgrade() {
            Some(engine) => {
                let _ = engine.poll_drive(cx);
            }
            None => return Poll::Ready(Ok(())),
        }
        // Asked again after the turn: the last completion reaped there
        // may be what `stop` waits for, and nothing would wake the task
        // for it.
        if stop(cx) {
            return Poll::Ready(Ok(()));
        }
        match watched.poll_read_ready(cx) {
            // Cleared before the next reap: a completion posted after that
            // reap makes the ring readable again.
            Poll::Ready(Ok(mut ready)) => ready.clear_ready(),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    })
    .await
}
