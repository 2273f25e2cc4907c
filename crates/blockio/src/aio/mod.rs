//! The async API: `Send` futures on any executor, with owned buffers.
//!
//! ```
//! use blockio::aio::{AsyncEngine, AsyncFile};
//!
//! # fn main() -> std::io::Result<()> {
//! # let path = tempfile::NamedTempFile::new()?.into_temp_path();
//! # std::fs::write(&path, b"hello, blockio")?;
//! let engine = AsyncEngine::new()?;
//! futures::executor::block_on(async {
//!     let file = AsyncFile::open(&engine, &path)?;
//!     // The buffer goes in and comes back with the result.
//!     let (res, buf) = file.read_at(vec![0u8; 5], 7).await;
//!     assert_eq!(res?, 5);
//!     assert_eq!(&buf, b"block");
//!     Ok(())
//! })
//! # }
//! ```
//!
//! * Operations take their buffers by value ([`IoBuf`], [`IoBufMut`]:
//!   `Vec<u8>`, `Box<[u8]>`, [`AlignedBuf`](crate::AlignedBuf),
//!   [`PooledBuf`](crate::PooledBuf)) and hand them back with the result
//!   ([`BufResult`]).
//! * Futures are `Send` and need nothing from the executor but a waker:
//!   tokio (any flavour), smol, `futures::executor::block_on`.
//! * Cancellation is dropping the future. An operation already in flight
//!   keeps its buffer (and its file) until the kernel reports completion;
//!   nothing blocks in `Drop`.
//! * Operations from many tasks are submitted together: see the
//!   [`driver`](self#how-completions-are-reaped) notes below.
//!
//! # How completions are reaped
//!
//! One driver thread per engine owns a ring; futures queue requests and wake
//! it through an eventfd only when it sleeps; it submits everything queued
//! in one `io_uring_enter`, waits, and calls each completed operation's
//! waker directly. The reasoning is in the `driver` module's source
//! documentation. Where io_uring is unavailable (or `BLOCKIO_BACKEND=threads`)
//! a pool of threads serves the same requests with `pread`/`pwrite`.
//!
//! An event loop can drive the ring itself instead, with no driver thread
//! and no cross-thread wake-up
//! ([`AsyncEngineBuilder::driven_by_caller`]): it watches the ring's
//! descriptor ([`AsyncEngine::poll_fd`]) and reaps on its own thread. On
//! tokio, `drive_on_tokio` (feature `tokio`) is that loop.
//!
//! # Panics in wakers and buffers
//!
//! Wakers and buffers' `Drop`s are user code and may panic. The engine
//! calls them only with no lock of its own held, after its bookkeeping
//! is consistent, and catches the panic: every other completion is
//! delivered and nothing the kernel may still write into is freed. Where
//! the call happened on the caller's thread ([`AsyncEngine::reap`],
//! [`AsyncEngine::poll_drive`], starting an operation or dropping a future
//! on a caller-driven engine), the first panic is resumed there once the
//! rest is done; on the engine's own threads (the driver thread, the
//! thread finishing a dropped caller-driven ring, the pool workers) the
//! panic hook reports it and the thread carries on. Resuming rather than
//! aborting keeps a panicking task's failure its own, as on any executor.
//!
//! # Sockets
//!
//! Requests are opaque to the driver (an operation plus a completion
//! target), so socket operations ([`crate::net`]) are request kinds like
//! file operations. A multishot request keeps its slot while the kernel
//! flags its completions with `IORING_CQE_F_MORE`, and its target sees
//! every completion with its flags; the engine's ring of provided receive
//! buffers is registered on the driver's own thread at first use.

mod buf;
pub(crate) mod buf_ring;
pub(crate) mod driver;
mod file;
pub(crate) mod op;
mod readiness;
#[cfg(feature = "tokio")]
mod tokio_drive;

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, OnceLock};

pub use buf::{IoBuf, IoBufMut, Slice};
pub use file::{
    AsyncFile, AsyncOpenOptions, Batch, BatchOp, MAX_STREAM_BLOCK_SIZE, MAX_STREAM_BYTES,
    MAX_STREAM_DEPTH,
};
pub use op::{BufResult, OpFuture};
#[cfg(feature = "tokio")]
pub use tokio_drive::drive_on_tokio;

use crate::backend::{self, fallback_threads, Backend, BackendChoice};
use buf_ring::{BufRing, RingShape};
use driver::Driver;

/// A handle to an async I/O driver. Cheap to clone; the driver stops when
/// the last handle (and the last future using it) is gone, after finishing
/// the operations in flight.
#[derive(Clone)]
pub struct AsyncEngine {
    inner: Arc<AsyncShared>,
}

/// What every clone of an [`AsyncEngine`] shares.
struct AsyncShared {
    driver: Driver,
    backend: Backend,
    fallback_reason: Option<String>,
    recv_shape: RingShape,
    /// The receive-buffer ring, registered at first use; `None` where
    /// multishot receive is not available (see [`AsyncEngine::recv_ring`]).
    recv_ring: OnceLock<Option<Arc<BufRing>>>,
}

impl fmt::Debug for AsyncEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEngine")
            .field("backend", &self.inner.backend)
            .finish()
    }
}

/// Builds an [`AsyncEngine`].
#[derive(Debug, Clone)]
pub struct AsyncEngineBuilder {
    queue_depth: usize,
    threads: usize,
    backend: BackendChoice,
    /// `driven_by_caller`.
    driven_by_caller: bool,
    /// `completion_eventfd`.
    completion_eventfd: Option<RawFd>,
    /// `submit_when_driven`.
    submit_when_driven: bool,
    /// `recv_buffers` and `recv_buffer_share`.
    recv_shape: RingShape,
}

impl Default for AsyncEngineBuilder {
    fn default() -> Self {
        AsyncEngineBuilder {
            queue_depth: 256,
            threads: 0,
            backend: BackendChoice::Auto,
            driven_by_caller: false,
            completion_eventfd: None,
            submit_when_driven: false,
            recv_shape: RingShape::default(),
        }
    }
}

impl AsyncEngineBuilder {
    /// Most file operations in flight at once, over all tasks (default
    /// 256, at most 32767); more wait in a queue, in order. As for
    /// [`EngineBuilder::queue_depth`](crate::EngineBuilder::queue_depth).
    /// Socket operations, which wait for peers, do not count (see
    /// [`crate::net`]).
    pub fn queue_depth(mut self, n: usize) -> Self {
        self.queue_depth = n.clamp(1, MAX_QUEUE_DEPTH);
        self
    }

    /// Threads of the thread-pool backend; 0 (the default) means the queue
    /// depth, at most 64. As for
    /// [`EngineBuilder::fallback_threads`](crate::EngineBuilder::fallback_threads).
    pub fn fallback_threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Which backend to use (default: io_uring where the kernel allows it;
    /// `BLOCKIO_BACKEND` overrides, as for [`Engine`](crate::Engine)).
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.backend = choice;
        self
    }

    /// No driver thread: for an event loop that watches
    /// [`AsyncEngine::poll_fd`] (or an eventfd, see
    /// [`completion_eventfd`](Self::completion_eventfd)).
    ///
    /// An operation is submitted by the thread that starts it (one
    /// `io_uring_enter` each, no thread wake-up; see
    /// [`submit_when_driven`](Self::submit_when_driven) for one per round
    /// of tasks), and the ring's descriptor is readable while completions
    /// wait; the loop then calls [`AsyncEngine::reap`] or
    /// [`AsyncEngine::poll_drive`], which complete the finished operations
    /// and wake their tasks on the loop's thread. That saves the two
    /// cross-thread wake-ups per operation of the driver-thread design,
    /// which bound how fast a fixed number of tasks can go (each wake-up of
    /// a sleeping thread is tens of microseconds in a VM).
    ///
    /// Why the ring's own descriptor and not an eventfd: its readiness is
    /// the completion queue's state, not a counter, so nothing needs
    /// reading to clear it (one system call less per wake-up), and a
    /// completion already reaped (an operation that completed while it was
    /// submitted, reaped in the same turn) does not wake the loop again:
    /// epoll asks the ring whether it is still readable before reporting it.
    ///
    /// Completions are posted by task work on the thread that submitted the
    /// operation. The ring is set up with `COOP_TASKRUN`: that work does
    /// not interrupt the thread while it runs, but waits for its next entry
    /// into the kernel (any system call; the loop's `epoll_wait` ends early
    /// to run it), and a thread asleep in an interruptible wait is woken
    /// for it. So that thread should be the loop's, or one that enters the
    /// kernel often (a thread that has exited is fine: the kernel posts for
    /// it). On the thread-pool backend (io_uring blocked) operations
    /// complete on pool threads and wake their tasks directly: `poll_fd` is
    /// `None` and `reap` has nothing to do.
    pub fn driven_by_caller(mut self) -> Self {
        self.driven_by_caller = true;
        self
    }

    /// With [`driven_by_caller`](Self::driven_by_caller): the kernel also
    /// signals `eventfd` whenever it posts a completion, for a loop that
    /// already watches an eventfd of its own (the Python package's does,
    /// for the wake-ups of its pool threads). The loop reads the eventfd
    /// before calling [`AsyncEngine::reap`], so that a completion racing
    /// the call signals it again. The ring keeps its own reference to the
    /// eventfd. Watching [`AsyncEngine::poll_fd`] costs one system call
    /// less per wake-up. A descriptor that is not an open eventfd makes
    /// [`build`](Self::build) fail with an error naming it.
    pub fn completion_eventfd(mut self, eventfd: RawFd) -> Self {
        self.completion_eventfd = Some(eventfd);
        self
    }

    /// With [`driven_by_caller`](Self::driven_by_caller): operations are
    /// put on the ring when started but reach the kernel only at the next
    /// [`AsyncEngine::poll_drive`], all in one `io_uring_enter`, instead of
    /// one `io_uring_enter` each. The task that calls `poll_drive` is woken
    /// when an operation is started; on a runtime that runs woken tasks
    /// after those already queued (tokio's current-thread runtime does),
    /// every operation started in one round of tasks goes to the kernel in
    /// one call.
    pub fn submit_when_driven(mut self, on: bool) -> Self {
        self.submit_when_driven = on;
        self
    }

    /// The buffers that [`recv_stream`](crate::net::TcpStream::recv_stream)s
    /// receive into, shared by all of the engine's connections: `count`
    /// buffers (a power of two, at most 32,768) of `size` bytes. Default:
    /// 512 of 4 KiB (2 MiB), allocated when the first receive stream
    /// starts. When they run out (or a connection holds its
    /// [share](Self::recv_buffer_share)), an awaited stream receives into a
    /// buffer of its own until ring buffers are dropped, so buffers the
    /// application holds never stall a connection.
    pub fn recv_buffers(mut self, count: u16, size: u32) -> Self {
        self.recv_shape.count = count;
        self.recv_shape.size = size;
        self
    }

    /// The most receive buffers one connection holds (received and not yet
    /// dropped) before it receives into buffers of its own instead, so
    /// that one slow reader cannot take every buffer from the others.
    /// Default 32; at least 1.
    pub fn recv_buffer_share(mut self, n: usize) -> Self {
        self.recv_shape.share = n.max(1);
        self
    }

    /// Starts the driver.
    ///
    /// # Errors
    /// The driver thread or the ring could not be set up (and the thread
    /// pool could not start either), the receive-buffer shape is invalid,
    /// or the [`completion_eventfd`](Self::completion_eventfd) is not an
    /// open eventfd. Only the kernel refusing io_uring falls back to the
    /// thread pool; the caller's mistakes are errors.
    pub fn build(self) -> io::Result<AsyncEngine> {
        let depth = self.queue_depth;
        let uring = || {
            if self.driven_by_caller {
                Driver::inline(depth, self.completion_eventfd, self.submit_when_driven)
            } else {
                Driver::uring(depth)
            }
            .map(|d| (d, Backend::IoUring, None))
        };
        let threads = fallback_threads(self.threads, depth);
        let pool = |reason| Ok((Driver::threads(threads)?, Backend::ThreadPool, Some(reason)));
        let shape = self.recv_shape;
        shape.check()?;
        if let Some(fd) = self.completion_eventfd {
            check_eventfd(fd)?;
        }
        let (driver, backend, fallback_reason) = backend::select(self.backend, uring, pool)?;
        Ok(AsyncEngine {
            inner: Arc::new(AsyncShared {
                driver,
                backend,
                fallback_reason,
                recv_shape: shape,
                recv_ring: OnceLock::new(),
            }),
        })
    }
}

/// The largest queue depth: one less than the largest ring, which keeps a
/// slot for the driver's wake-up read.
const MAX_QUEUE_DEPTH: usize = 32767;

impl AsyncEngine {
    /// An engine with default settings.
    pub fn new() -> io::Result<AsyncEngine> {
        AsyncEngineBuilder::default().build()
    }

    /// A builder for the other settings.
    pub fn builder() -> AsyncEngineBuilder {
        AsyncEngineBuilder::default()
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// Why the thread pool is in use, when it is.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner.fallback_reason.as_deref()
    }

    /// Threads of the thread-pool backend (0 on io_uring).
    pub fn fallback_threads(&self) -> usize {
        self.inner.driver.pool_threads()
    }

    /// Completes the operations the kernel has finished and wakes their
    /// tasks, on this thread; returns how many. For engines built with
    /// [`AsyncEngineBuilder::driven_by_caller`], called when
    /// [`poll_fd`](Self::poll_fd) is readable (or the
    /// [`completion_eventfd`](AsyncEngineBuilder::completion_eventfd), after
    /// reading it); otherwise it does nothing.
    pub fn reap(&self) -> usize {
        self.inner.driver.turn(None)
    }

    /// For engines built with [`AsyncEngineBuilder::driven_by_caller`]:
    /// submits the operations started since the last call (one
    /// `io_uring_enter`), completes those the kernel has finished, waking
    /// their tasks, and registers `cx` to be woken when another operation
    /// is started. Never ready: a loop's driving task calls it whenever it
    /// is polled, and also when [`poll_fd`](Self::poll_fd) is readable.
    /// Does nothing on other engines.
    pub fn poll_drive(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.inner.driver.turn(Some(cx.waker()));
        std::task::Poll::Pending
    }

    /// For engines built with [`AsyncEngineBuilder::driven_by_caller`] on
    /// io_uring: the ring's descriptor, readable while completions wait to
    /// be reaped (level: reaping them all makes it unreadable), for the
    /// loop to watch (tokio's `AsyncFd`, asyncio's `add_reader`). `None`
    /// for the other engines, whose completions need no driving. The
    /// descriptor stays open as long as the engine (any clone of it)
    /// lives; it is for watching only.
    pub fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.driver.poll_fd()
    }

    pub(crate) fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    /// The shape of the engine's receive buffers (also the buffer size
    /// of receive streams where there is no ring).
    pub(crate) fn recv_shape(&self) -> RingShape {
        self.inner.recv_shape
    }

    /// The engine's receive-buffer ring, registered with its io_uring at
    /// the first call; `None` where there is none to have: the thread-pool
    /// backend, a kernel before 6.0 (no multishot receive), or a
    /// registration the kernel refused. Receive streams then fall back to
    /// one receive at a time.
    ///
    /// On the driver thread itself (a task polled in place by its waker)
    /// the first registration cannot be made, since it waits for that
    /// thread: the stream falls back to one receive at a time, and the
    /// ring is registered by the first call from another thread. Checked
    /// before the `OnceLock`, whose initialisation by another thread waits
    /// for the driver thread too.
    pub(crate) fn recv_ring(&self) -> Option<&Arc<BufRing>> {
        if let Some(ring) = self.inner.recv_ring.get() {
            return ring.as_ref();
        }
        if self.inner.driver.setup_would_wait_for_itself() {
            return None;
        }
        self.inner
            .recv_ring
            .get_or_init(|| {
                if self.inner.backend != Backend::IoUring || !crate::ring::kernel_at_least(6, 0) {
                    return None;
                }
                let ring = Arc::new(BufRing::new(self.inner.recv_shape).ok()?);
                let r = ring.clone();
                let setup: driver::Setup = Box::new(move |uring| {
                    r.register(uring)?;
                    Ok(r as driver::Kept)
                });
                self.inner.driver.setup_ring(setup).ok()?;
                Some(ring)
            })
            .as_ref()
    }
}

/// Refuses a [`completion_eventfd`](AsyncEngineBuilder::completion_eventfd)
/// that is not an open eventfd, naming it.
fn check_eventfd(fd: RawFd) -> io::Result<()> {
    let invalid = |what: String| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("AsyncEngineBuilder::completion_eventfd: descriptor {fd} {what}"),
        ))
    };
    // SAFETY: F_GETFD only reads the descriptor's flags; any number is
    // allowed (an unused one fails with EBADF).
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return invalid("is not an open descriptor".to_string());
    }
    match std::fs::read_link(format!("/proc/self/fd/{fd}")) {
        Ok(target) if target.as_os_str() != "anon_inode:[eventfd]" => {
            invalid(format!("is not an eventfd (it is {})", target.display()))
        }
        // Where /proc is not mounted the kernel's check at registration
        // is all there is.
        _ => Ok(()),
    }
}
