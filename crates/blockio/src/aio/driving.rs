//! How an engine's ring is driven: the public setting
//! ([`AsyncEngineBuilder::driving`](super::AsyncEngineBuilder::driving)),
//! with each way's options carried by its own variant so that no option
//! can be set where it does nothing. A leaf: it uses nothing else in
//! `aio`.

use std::os::fd::RawFd;

/// Who drives the engine's io_uring: submits operations and reaps their
/// completions. On the thread-pool backend there is no ring: either
/// choice gives the pool (operations complete on its threads), and the
/// options only a ring uses ([`Submit::PerRound`],
/// [`CallerDriving::completion_eventfd`]) are refused when the builder
/// itself chose the pool, and ignored when the engine falls back to it at
/// run time (see [`AsyncEngineBuilder::build`](super::AsyncEngineBuilder::build)).
///
/// Non-exhaustive: a `match` outside this crate needs a `_` arm.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Driving {
    /// The default: the runtime the engine is built on drives it, as
    /// tokio's own sockets are driven by the runtime they are made on.
    ///
    /// With the `tokio` feature, an engine built on a tokio runtime (in a
    /// task, or where [`Handle::enter`](https://docs.rs/tokio/1/tokio/runtime/struct.Handle.html#method.enter)
    /// is in force) with I/O enabled is a caller-driven ring that submits
    /// once per round ([`Driving::Caller`] with [`Submit::PerRound`]),
    /// whose `drive_on_tokio` task is spawned on that runtime by
    /// [`build`](super::AsyncEngineBuilder::build): no driver thread and no
    /// cross-thread wake-up per operation. Everything
    /// [`Driving::Caller`] says about such an engine holds, in particular:
    /// the runtime must run for its operations to complete (a
    /// current-thread runtime blocked in a task, or outside `block_on`,
    /// completes none, as it serves none of tokio's sockets); once that
    /// runtime is gone, the next tokio runtime that uses the engine drives
    /// it; and an operation from no tokio runtime then fails with an error
    /// saying so (operations already in flight when that runtime went are
    /// completed by a thread of the engine's, as [`Driving::Caller`] says).
    /// The task ends when the engine's last handle and operation are gone,
    /// at its next turn: a program that builds and drops engines in a loop
    /// without yielding to the runtime holds each ring's descriptor until
    /// then.
    ///
    /// Built anywhere else (no tokio runtime, a runtime without I/O,
    /// or without the `tokio` feature), it is [`Driving::Thread`]: a tokio
    /// runtime without I/O cannot watch the ring. tokio's only answer to
    /// whether a runtime has I/O is a panic when something registers with
    /// it: `build` catches it, and the panic hook prints tokio's message
    /// once per such runtime. In a program built with `panic = "abort"`,
    /// where that panic would end the process, `build` does not ask, and
    /// `Auto` is always [`Driving::Thread`]; ask for [`Driving::Caller`]
    /// and spawn `drive_on_tokio` to have a runtime (with I/O) drive the
    /// engine there.
    ///
    /// The engine is driven by the runtime it is built on, not by each
    /// runtime that uses it: one built on a runtime that then stops
    /// running (a current-thread runtime outside `block_on`) serves no
    /// other runtime until that one runs again or is dropped. Build the
    /// engine on the runtime that uses it, or, to share one engine among
    /// runtimes, ask for [`Driving::Thread`].
    /// [`AsyncEngine::driving`](super::AsyncEngine::driving) says which
    /// was chosen.
    #[default]
    Auto,
    /// A thread of the engine's own: any executor works, on any thread,
    /// whether or not a runtime runs, and operations from many tasks reach
    /// the kernel together; each operation costs two cross-thread
    /// wake-ups (to the thread and back).
    ///
    /// With tokio's clock paused (`test-util`), a runtime that finds no
    /// task to run jumps the clock to its next timer unless its I/O
    /// driver's poll without waiting woke a task. That poll does not see
    /// this thread, so on such a runtime a socket operation first waits
    /// for its socket to be ready in the runtime's own reactor (as a tokio
    /// socket's does), and every operation then holds the clock (as
    /// `tokio::fs` does, with a `spawn_blocking` task) until its
    /// completion has woken its task: a timer beside an operation whose
    /// bytes have arrived does not fire first, and an idle socket leaves
    /// the clock free to jump, as on tokio. The same holds on the
    /// thread-pool backend and on a caller-driven ring (what `Auto` builds
    /// on tokio), where a listener's accept (made by the engine's
    /// readiness thread), a file operation and a socket completion the
    /// kernel posts at the runtime thread's next system call also reach
    /// their task outside that poll.
    Thread,
    /// The caller's event loop: no driver thread and no cross-thread
    /// wake-up. The loop watches [`AsyncEngine::poll_fd`](super::AsyncEngine::poll_fd)
    /// (or the [`CallerDriving::completion_eventfd`]) and calls
    /// [`AsyncEngine::reap`](super::AsyncEngine::reap) or
    /// [`AsyncEngine::poll_drive`](super::AsyncEngine::poll_drive), which
    /// complete the finished operations and wake their tasks on the loop's
    /// thread. On tokio, `drive_on_tokio` (feature `tokio`) is that loop.
    ///
    /// When the `drive_on_tokio` task is gone, the next task that uses the
    /// engine on a tokio runtime spawns a new one there; meanwhile a thread
    /// of the engine's completes what must complete (operations a task
    /// waits for, a write the kernel holds, dropped streams' queued bytes
    /// and the cancel of a dropped stream's kept receive), then exits (a
    /// receive kept armed for an idle
    /// stream's next read, with no task waiting, keeps no thread: what it
    /// receives waits for that read). From no tokio runtime
    /// (or one without I/O), an operation not yet in the kernel, and a
    /// stream read, write or flush, fails with an error of kind
    /// [`Other`](std::io::ErrorKind::Other) saying why; a read that was
    /// already waiting, its receive in the kernel, when the driving task
    /// went goes on waiting, and that thread completes it.
    ///
    /// Start operations from threads that outlive them (the loop's). The
    /// rest (who drives in each mode, the driver gone, the threads the
    /// kernel posts to) is in `docs/library.md`, "Who drives an engine".
    Caller(CallerDriving),
}

/// The options of a caller-driven ring ([`Driving::Caller`]).
#[derive(Debug, Clone, Default)]
pub struct CallerDriving {
    pub(crate) submit: Submit,
    pub(crate) completion_eventfd: Option<RawFd>,
}

/// When a caller-driven ring's operations reach the kernel.
/// Non-exhaustive: a `match` outside this crate needs a `_` arm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Submit {
    /// When started: one `io_uring_enter` by the thread that starts each
    /// operation (the default).
    #[default]
    OnStart,
    /// Once per round: operations are put on the ring when started but
    /// reach the kernel only at the next
    /// [`AsyncEngine::poll_drive`](super::AsyncEngine::poll_drive), all in
    /// one `io_uring_enter`. The task that calls `poll_drive` is woken
    /// when an operation is started; on a runtime that runs woken tasks
    /// after those already queued (tokio's current-thread runtime does),
    /// every operation started in one round of tasks goes to the kernel in
    /// one call.
    PerRound,
}

impl CallerDriving {
    /// Submit when started, no eventfd.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::{AsyncEngine, CallerDriving, Driving};
    ///
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new()))
    ///     .build()?;
    /// assert!(matches!(engine.driving(), Driving::Caller(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new() -> CallerDriving {
        CallerDriving::default()
    }

    /// When operations reach the kernel (default [`Submit::OnStart`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::{AsyncEngine, CallerDriving, Driving, Submit};
    ///
    /// // Operations started in one round of tasks reach the kernel together,
    /// // at the driving task's next `poll_drive`.
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new().submit(Submit::PerRound)))
    ///     .build()?;
    /// # drop(engine);
    /// # Ok(())
    /// # }
    /// ```
    pub fn submit(mut self, when: Submit) -> CallerDriving {
        self.submit = when;
        self
    }

    /// The kernel also signals `eventfd` whenever it posts a completion,
    /// for a loop that already watches an eventfd of its own (the Python
    /// package's does, for the wake-ups of its pool threads). The loop
    /// reads the eventfd before calling
    /// [`AsyncEngine::reap`](super::AsyncEngine::reap), so that a
    /// completion racing the call signals it again. The ring keeps its own
    /// reference to the eventfd. Watching
    /// [`AsyncEngine::poll_fd`](super::AsyncEngine::poll_fd) costs one
    /// system call less per wake-up. A descriptor that is not an open
    /// eventfd makes [`build`](super::AsyncEngineBuilder::build) fail with
    /// an error naming it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use std::os::fd::{FromRawFd, OwnedFd};
    /// use blockio::aio::{AsyncEngine, CallerDriving, Driving};
    ///
    /// // SAFETY: eventfd takes no pointer; a negative result is checked below.
    /// let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    /// assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    /// // SAFETY: `fd` was just opened and nothing else owns it.
    /// let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new().completion_eventfd(fd)))
    ///     .build()?;
    /// // The loop watches `eventfd` (the ring keeps its own reference to it).
    /// drop(engine);
    /// drop(eventfd);
    /// # Ok(())
    /// # }
    /// ```
    pub fn completion_eventfd(mut self, eventfd: RawFd) -> CallerDriving {
        self.completion_eventfd = Some(eventfd);
        self
    }
}

impl Driving {
    /// The first option set here that only an io_uring uses, named as the
    /// API names it; `None` when every option set works on the pool too.
    pub(crate) fn ring_only_option(&self) -> Option<&'static str> {
        match self {
            Driving::Auto | Driving::Thread => None,
            Driving::Caller(c) => match (c.completion_eventfd, c.submit) {
                (Some(_), _) => Some("CallerDriving::completion_eventfd"),
                (None, Submit::PerRound) => Some("Submit::PerRound"),
                (None, Submit::OnStart) => None,
            },
        }
    }
}
