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
//! * Operations from many tasks are submitted together: see
//!   [how completions are reaped](self#how-completions-are-reaped) below.
//! * A read of a buffered file whose data is all in the page cache is
//!   served at its first poll, on the polling thread (`preadv2` with
//!   `RWF_NOWAIT`), with the result the driver would give; the rest go to
//!   the driver (see [`AsyncEngineBuilder::read_path`]).
//!
//! # How completions are reaped
//!
//! Who drives the ring is one setting, [`Driving`]. By default
//! ([`Driving::Auto`]) an engine built on a tokio runtime (feature `tokio`)
//! is driven by that runtime, as a caller-driven ring described below, and
//! one built anywhere else has a **driver thread** that owns the ring;
//! futures queue requests and wake it through an eventfd only when it
//! sleeps; it submits everything queued in one `io_uring_enter`, waits, and
//! calls each completed operation's waker directly. With
//! [`Driving::Caller`] there is no driver thread and no cross-thread
//! wake-up: the **caller-driven ring** is watched by the caller's event
//! loop ([`AsyncEngine::poll_fd`]), which reaps on its own thread; on
//! tokio, `drive_on_tokio` (feature `tokio`) is that loop. Where io_uring
//! is unavailable (or `BLOCKIO_BACKEND=threads`) the **thread pool** serves the
//! same requests with blocking calls. Who drives in each mode, what
//! happens when that driver is gone, and the one name each of these goes
//! by are in `docs/library.md` ("Who drives an engine", "Glossary").
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

pub(crate) mod attempt;
mod buf;
#[cfg(test)]
pub(crate) use buf::test_bufs;
pub(crate) use buf::{bytes_of, bytes_of_mut};
pub(crate) mod buf_ring;
mod caller_ring;
mod counter;
mod current;
pub(crate) mod driven;
mod driver;
mod driver_thread;
mod driving;
mod epoll;
mod file;
mod in_flight;
mod key_hash;
pub(crate) mod op;
#[cfg(feature = "tokio")]
pub(crate) mod paused_clock;
mod pool;
pub(crate) mod readiness;
#[cfg(feature = "tokio")]
mod readiness_tokio;
mod ready;
#[cfg(feature = "tokio")]
mod relay;
pub(crate) mod request;
#[cfg(feature = "tokio")]
mod runtime_engines;
#[cfg(feature = "tokio")]
mod tokio_drive;
#[cfg(feature = "tokio")]
pub(crate) use tokio_drive::register_rw as register_in_reactor;

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, OnceLock, Weak};

pub use buf::{IoBuf, IoBufMut, Slice};
pub use driving::{CallerDriving, Driving, Submit};
pub use file::{
    AsyncFile, AsyncOpenOptions, BatchFuture, BatchOp, MAX_STREAM_BLOCK_SIZE, MAX_STREAM_BYTES,
    MAX_STREAM_DEPTH,
};
pub use op::{BufResult, OpFuture, Withdrawal};
#[doc(hidden)]
pub use readiness::ReadinessCounts;

#[cfg(feature = "tokio")]
pub(crate) use relay::Lingering;
/// A dropped stream whose queued bytes are still being sent. Without the
/// `tokio` feature no `drive_on_tokio` task drives an engine, so no engine
/// is ever left without its driver while such a stream finishes: there is
/// nothing to count.
#[cfg(not(feature = "tokio"))]
pub(crate) struct Lingering;

#[cfg(not(feature = "tokio"))]
impl Lingering {
    /// Nothing to count (see [`Lingering`]).
    pub(crate) fn new(_engine: &AsyncEngine) -> Lingering {
        Lingering
    }
}
#[cfg(feature = "tokio")]
pub use tokio_drive::drive_on_tokio;

use crate::backend::{self, fallback_threads, Backend, BackendChoice};
use crate::ReadPath;
use buf_ring::{BufRing, RingShape};
use caller_ring::CallerRing;
use counter::StripedCounter;
use driver::Driver;
use driver_thread::DriverThread;
use in_flight::{Kept, Setup};
use pool::PoolDriver;
use readiness::{Readiness, Registration};
use request::{Cancel, Request};

/// A handle to an async I/O driver. Cheap to clone; the driver stops when
/// the last handle (and the last future using it) is gone, after finishing
/// the operations in flight.
#[derive(Clone)]
pub struct AsyncEngine {
    core: Arc<EngineCore>,
}

/// What every clone of an [`AsyncEngine`] shares.
struct EngineCore {
    driver: Driver,
    /// How the driver was chosen ([`Driving::Auto`] resolved).
    driving: Driving,
    backend: Backend,
    fallback_reason: Option<String>,
    recv_shape: RingShape,
    /// The receive-buffer ring, registered at first use; `None` where
    /// multishot receive is not available (see [`AsyncEngine::recv_ring`]).
    recv_ring: OnceLock<Option<Arc<BufRing>>>,
    /// The epoll set of operations performed by readiness on an io_uring
    /// engine (see [`AsyncEngine::submit_by_readiness`]), started at first
    /// use; never started on the thread-pool driver, which has its own
    /// (see [`EngineCore::readiness`]).
    readiness: OnceLock<Readiness>,
    /// The `drive_on_tokio` tasks driving a caller-driven ring.
    #[cfg(feature = "tokio")]
    tokio_drivers: relay::TokioDrivers,
    /// How reads of buffered files are performed.
    read_path: ReadPath,
    /// Reads served on the polling thread (see [`AsyncEngine::served_inline`]).
    served_inline: StripedCounter,
    /// Reads handed to the driver (see [`AsyncEngine::reads_to_driver`]).
    reads_to_driver: StripedCounter,
}

impl EngineCore {
    /// The epoll set socket operations wait in for readiness: the
    /// thread-pool driver's own, else the engine's, started now if it is
    /// not yet. Not kept when it fails to start (no descriptor for the
    /// set, no thread): the next request tries again.
    fn readiness(&self) -> io::Result<&Readiness> {
        if let Some(set) = self.started_readiness() {
            return Ok(set);
        }
        // Read on the multi-thread runtimes whose tasks wait, where the
        // runtime's set costs one descriptor and no thread (the thread's
        // set is made only for waits elsewhere).
        #[cfg(feature = "tokio")]
        let set = Readiness::on_multi_thread_runtimes()?;
        #[cfg(not(feature = "tokio"))]
        let set = Readiness::new()?;
        // A set started meanwhile by another thread wins; this one is
        // dropped unused.
        Ok(self.readiness.get_or_init(move || set))
    }

    /// The readiness set if one is running; with none, no operation waits
    /// for readiness.
    fn started_readiness(&self) -> Option<&Readiness> {
        match &self.driver {
            Driver::Pool(pool) => Some(pool.sockets()),
            Driver::Thread(_) | Driver::Caller(_) => self.readiness.get(),
        }
    }
}

/// An [`AsyncEngine`] that may be gone ([`AsyncEngine::downgrade`]).
pub(crate) struct WeakEngine(Weak<EngineCore>);

impl WeakEngine {
    /// The engine, while any handle or operation of it lives.
    pub(crate) fn upgrade(&self) -> Option<AsyncEngine> {
        self.0.upgrade().map(|core| AsyncEngine { core })
    }
}

impl fmt::Debug for AsyncEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEngine")
            .field("backend", &self.core.backend)
            .finish()
    }
}

/// Builds an [`AsyncEngine`].
#[derive(Debug, Clone)]
pub struct AsyncEngineBuilder {
    queue_depth: usize,
    threads: usize,
    backend: BackendChoice,
    /// `driving`.
    driving: Driving,
    /// `recv_buffers` and `recv_buffer_share`.
    recv_shape: RingShape,
    /// `read_path`.
    read_path: ReadPath,
    /// The thread pool's epoll set may be read on the tokio runtimes
    /// whose tasks wait in it although `driving` is not `Auto`: the
    /// process-wide default engine's ([`AsyncEngine::current`]).
    pool_set_on_runtimes: bool,
}

impl Default for AsyncEngineBuilder {
    fn default() -> Self {
        AsyncEngineBuilder {
            queue_depth: crate::DEFAULT_QUEUE_DEPTH,
            threads: 0,
            backend: BackendChoice::Auto,
            driving: Driving::Auto,
            recv_shape: RingShape::default(),
            read_path: ReadPath::Auto,
            pool_set_on_runtimes: false,
        }
    }
}

impl AsyncEngineBuilder {
    /// Most file operations in flight at once, over all tasks: 1 to
    /// [`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH) (default
    /// [`DEFAULT_QUEUE_DEPTH`](crate::DEFAULT_QUEUE_DEPTH), 256); more wait
    /// in a queue, in order. Outside that range [`build`](Self::build)
    /// fails with the error of [`check_queue_depth`](crate::check_queue_depth),
    /// the same rule as
    /// [`EngineBuilder::queue_depth`](crate::EngineBuilder::queue_depth).
    /// Socket operations, which wait for peers, do not count (see
    /// [`crate::net`]).
    ///
    /// The default is the batch engine's too; this engine puts every
    /// task's operations into one ring sized from the queue depth.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// let engine = AsyncEngine::builder().queue_depth(64).build()?;
    /// # drop(engine);
    /// // Outside 1 to MAX_QUEUE_DEPTH: an error naming the argument.
    /// let err = AsyncEngine::builder().queue_depth(0).build().unwrap_err();
    /// assert!(err.to_string().contains("queue_depth"), "{err}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue_depth(mut self, n: usize) -> Self {
        self.queue_depth = n;
        self
    }

    /// Threads of the thread-pool backend; 0 (the default) means the queue
    /// depth, at most 64. As for
    /// [`EngineBuilder::fallback_threads`](crate::EngineBuilder::fallback_threads).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::BackendChoice;
    ///
    /// let engine = AsyncEngine::builder()
    ///     .backend(BackendChoice::ThreadPool)
    ///     .fallback_threads(4)
    ///     .build()?;
    /// assert_eq!(engine.fallback_threads(), 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fallback_threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Which backend to use (default: io_uring where the kernel allows it;
    /// `BLOCKIO_BACKEND` overrides, as for [`Engine`](crate::Engine)).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::{Backend, BackendChoice};
    ///
    /// let engine = AsyncEngine::builder().backend(BackendChoice::ThreadPool).build()?;
    /// assert_eq!(engine.backend(), Backend::ThreadPool);
    /// # Ok(())
    /// # }
    /// ```
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.backend = choice;
        self
    }

    /// Who drives the ring (default [`Driving::Auto`]: the tokio runtime
    /// the engine is built on, else a thread of the engine's own): a
    /// thread of the engine's own ([`Driving::Thread`]), or the caller's
    /// event loop with its own options ([`Driving::Caller`],
    /// [`CallerDriving`]).
    ///
    /// ```
    /// use blockio::aio::{AsyncEngine, CallerDriving, Driving, Submit};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new().submit(Submit::PerRound)))
    ///     .build()?;
    /// # drop(engine);
    /// # Ok(())
    /// # }
    /// ```
    pub fn driving(mut self, driving: Driving) -> Self {
        self.driving = driving;
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
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// // 1,024 receive buffers of 16 KiB, shared by the engine's connections.
    /// let engine = AsyncEngine::builder().recv_buffers(1024, 16 << 10).build()?;
    /// # drop(engine);
    /// # Ok(())
    /// # }
    /// ```
    pub fn recv_buffers(mut self, count: u16, size: u32) -> Self {
        self.recv_shape.count = count;
        self.recv_shape.size = size;
        self
    }

    /// The most receive buffers one connection holds (received and not yet
    /// dropped) before it receives into buffers of its own instead, so
    /// that one slow reader cannot take every buffer from the others.
    /// Default 32; at least 1.
    ///
    /// A receive stream and owned reads hold at most this. Reads through
    /// the I/O traits keep one multishot receive armed across reads, which
    /// is cancelled once the connection holds its share, and the kernel
    /// goes on filling buffers until the cancel lands: a reader that stops
    /// reading can hold more, 11 to 81 buffers of 4 KiB beyond what a
    /// socket nobody reads takes in, with shares of 1, 4 and 32
    /// (`docs/sockets.md`), never more than the ring; once the ring is
    /// empty, other connections receive into buffers of their own.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// let engine = AsyncEngine::builder().recv_buffer_share(8).build()?;
    /// # drop(engine);
    /// # Ok(())
    /// # }
    /// ```
    pub fn recv_buffer_share(mut self, n: usize) -> Self {
        self.recv_shape.share = n.max(1);
        self
    }

    /// How reads of buffered regular files are performed (default
    /// [`ReadPath::Auto`]): with `Auto`, the first poll of
    /// [`AsyncFile::read_at`] (or `read_vectored_at`) tries the page cache
    /// on the polling thread (`preadv2` with `RWF_NOWAIT`) and resolves at
    /// once if all the data was there; otherwise, and with
    /// [`ReadPath::AlwaysSubmit`], the read goes to the driver. Results are
    /// the same either way. A file whose reads keep missing the cache is
    /// tried less and less often (at most one read in 64), and a thread
    /// that has served 128 reads in a row (or 1 MiB) yields to its
    /// executor once (as tokio's task budget has a task do after 128
    /// operations of its own resources); on tokio, with blockio's `tokio`
    /// feature, that yield runs the task again after tokio's timers and
    /// reactor have had their turn (without the feature the task is only
    /// woken, and tokio may poll it again before its timers).
    /// [`AsyncEngine::served_inline`] counts the reads served so.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::ReadPath;
    ///
    /// let engine = AsyncEngine::builder().read_path(ReadPath::AlwaysSubmit).build()?;
    /// assert_eq!(engine.read_path(), ReadPath::AlwaysSubmit);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_path(mut self, path: ReadPath) -> Self {
        self.read_path = path;
        self
    }

    /// The thread pool's epoll set (if the pool is the backend) is read on
    /// the tokio runtimes whose tasks wait in it, whatever `driving`
    /// says: for the process-wide default engine, built with a driver
    /// thread so that no runtime drives its ring.
    pub(crate) fn pool_set_on_runtimes(mut self) -> Self {
        self.pool_set_on_runtimes = true;
        self
    }

    /// Starts the driver.
    ///
    /// # Errors
    /// The driver thread or the ring could not be set up (and the thread
    /// pool could not start either), the [`queue_depth`](Self::queue_depth)
    /// is outside 1 to [`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH), the
    /// receive-buffer shape is invalid, or the [`completion_eventfd`](CallerDriving::completion_eventfd) is not an
    /// open eventfd. Only the kernel refusing io_uring falls back to the
    /// thread pool; the caller's mistakes are errors.
    ///
    /// A setting that only a ring uses ([`Submit::PerRound`],
    /// [`CallerDriving::completion_eventfd`]) together with
    /// [`BackendChoice::ThreadPool`] is such a mistake: the builder asks
    /// for something it also rules out, and `build` fails with
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) naming the setting,
    /// on every machine. When the thread pool is not the builder's choice
    /// but comes at run time (io_uring unavailable, or
    /// `BLOCKIO_BACKEND=threads`), the same code must keep working there,
    /// so those settings are ignored (operations complete on the pool's
    /// threads and wake their tasks themselves; the eventfd is never
    /// signalled) and [`AsyncEngine::fallback_reason`] says which was.
    ///
    /// With [`Driving::Auto`] (the default) on a tokio runtime, this
    /// spawns the engine's `drive_on_tokio` task there.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// let engine = AsyncEngine::builder().queue_depth(128).build()?;
    /// println!("on {}", engine.backend());
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> io::Result<AsyncEngine> {
        crate::check_queue_depth(self.queue_depth)?;
        #[cfg(feature = "tokio")]
        if let Driving::Auto = self.driving {
            if let Some(engine) = tokio_drive::build_on_runtime(&self)? {
                return Ok(engine);
            }
        }
        let driving = match &self.driving {
            Driving::Auto => Driving::Thread,
            chosen => chosen.clone(),
        };
        self.build_as(driving)
    }

    /// Builds the engine with `driving`, which is the builder's own
    /// setting or, for [`Driving::Auto`], the one chosen for it (checks
    /// and messages name the builder's own).
    pub(crate) fn build_as(&self, driving: Driving) -> io::Result<AsyncEngine> {
        let depth = self.queue_depth;
        let uring = || {
            match &driving {
                Driving::Auto | Driving::Thread => DriverThread::start(depth).map(Driver::Thread),
                Driving::Caller(c) => {
                    CallerRing::new(depth, c.completion_eventfd, c.submit).map(Driver::Caller)
                }
            }
            .map(|d| (d, Backend::IoUring, None))
        };
        let threads = fallback_threads(self.threads, depth);
        let ignored = self.driving.ring_only_option();
        if let (BackendChoice::ThreadPool, Some(option)) = (self.backend, ignored) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{option} needs io_uring, but the builder chose \
                     BackendChoice::ThreadPool, which has no ring to use it"
                ),
            ));
        }
        let pool = |reason: String| {
            let reason = match ignored {
                Some(option) => format!("{reason}; {option} ignored: the thread pool has no ring"),
                None => reason,
            };
            // `Driving::Thread` means the readiness thread's set alone
            // serves the sockets: no runtime has a set (but for the
            // default engine, whose driver thread is for the ring only).
            let on_runtimes = matches!(self.driving, Driving::Auto) || self.pool_set_on_runtimes;
            let pool = PoolDriver::start(threads, on_runtimes)?;
            Ok((Driver::Pool(pool), Backend::ThreadPool, Some(reason)))
        };
        let shape = self.recv_shape;
        shape.check()?;
        if let Driving::Caller(CallerDriving {
            completion_eventfd: Some(fd),
            ..
        }) = self.driving
        {
            check_eventfd(fd)?;
        }
        let (driver, backend, fallback_reason) = backend::select(self.backend, uring, pool)?;
        Ok(AsyncEngine {
            core: Arc::new(EngineCore {
                driver,
                driving,
                backend,
                fallback_reason,
                recv_shape: shape,
                recv_ring: OnceLock::new(),
                readiness: OnceLock::new(),
                #[cfg(feature = "tokio")]
                tokio_drivers: relay::TokioDrivers::default(),
                read_path: self.read_path,
                served_inline: StripedCounter::default(),
                reads_to_driver: StripedCounter::default(),
            }),
        })
    }
}

impl AsyncEngine {
    /// An engine with default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// let engine = AsyncEngine::new()?;
    /// if let Some(reason) = engine.fallback_reason() {
    ///     println!("on the thread pool: {reason}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn new() -> io::Result<AsyncEngine> {
        AsyncEngineBuilder::default().build()
    }

    /// A builder for the other settings.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// let engine = AsyncEngine::builder().queue_depth(64).build()?;
    /// # drop(engine);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> AsyncEngineBuilder {
        AsyncEngineBuilder::default()
    }

    /// The backend in use.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::Backend;
    ///
    /// let engine = AsyncEngine::new()?;
    /// match engine.backend() {
    ///     Backend::IoUring => println!("io_uring"),
    ///     Backend::ThreadPool => println!("thread pool: {:?}", engine.fallback_reason()),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn backend(&self) -> Backend {
        self.core.backend
    }

    /// How reads of buffered files are performed
    /// ([`AsyncEngineBuilder::read_path`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::ReadPath;
    ///
    /// assert_eq!(AsyncEngine::new()?.read_path(), ReadPath::Auto);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_path(&self) -> ReadPath {
        self.core.read_path
    }

    /// Reads served on the polling thread from the page cache so far
    /// (see [`AsyncEngineBuilder::read_path`]), over every file of the
    /// engine; the rest went to the driver.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    ///
    /// // Read twice: the second finds the data in the page cache.
    /// for _ in 0..2 {
    ///     file.read_at(vec![0u8; 5], 0).await.0?;
    /// }
    /// println!("{} reads served inline", engine.served_inline());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn served_inline(&self) -> u64 {
        self.core.served_inline.sum()
    }

    /// Counts a read served on the polling thread.
    #[inline]
    pub(crate) fn count_inline(&self) {
        self.core.served_inline.increment();
    }

    /// Reads of files (plain and vectored, from [`AsyncFile`]'s positional
    /// calls, its batches and its stream) handed to the driver so far: to
    /// the ring on io_uring, to a pool thread on the fallback. With
    /// [`served_inline`](Self::served_inline) it says where an engine's
    /// reads went: a read of cached data is served inline and never
    /// counted here; one whose data is not all in the page cache (the
    /// polling thread's `RWF_NOWAIT` try found it missing, or the file's
    /// back-off skipped the try) is counted here, and the polling thread
    /// does not wait for the read itself. A failed try may still sleep
    /// while the kernel starts read-ahead, and that read-ahead now and
    /// then brings the page in time for the try to be served inline after
    /// all: such a read is counted in `served_inline`. A read refused
    /// before submission (an offset past `i64::MAX`, a misaligned direct
    /// read) is in neither.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    /// file.read_at(vec![0u8; 5], 0).await.0?;
    /// let reads = engine.served_inline() + engine.reads_to_driver();
    /// assert_eq!(reads, 1);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn reads_to_driver(&self) -> u64 {
        self.core.reads_to_driver.sum()
    }

    /// Counts a read handed to the driver.
    pub(crate) fn count_read_to_driver(&self) {
        self.core.reads_to_driver.increment();
    }

    /// Whether the caller runs on the current-thread tokio runtime it has
    /// entered, on that runtime's thread, as this engine's readiness sets
    /// tell it (see `Readiness::runs_current_runtime_here`): false where
    /// the engine has no set read on runtimes.
    #[cfg(feature = "tokio")]
    pub(crate) fn runs_current_runtime_here(&self) -> bool {
        self.core
            .started_readiness()
            .is_some_and(Readiness::runs_current_runtime_here)
    }

    /// Where the readiness sets' events were taken so far (the thread
    /// pool's sets, or the engine's own if one was started), for tests.
    #[doc(hidden)]
    pub fn readiness_counts(&self) -> Option<ReadinessCounts> {
        self.core.started_readiness().map(Readiness::counts)
    }

    /// How many times the task reading the readiness set of `runtime`
    /// was polled (woken) so far, if that runtime has a set of this
    /// engine's, for tests.
    #[doc(hidden)]
    #[cfg(feature = "tokio")]
    pub fn readiness_polls_on(&self, runtime: &tokio::runtime::Handle) -> Option<u64> {
        self.core.started_readiness()?.runtime_polls(runtime.id())
    }

    /// Why the thread pool is in use, when it is; on an engine built with
    /// [`Driving::Caller`], it also names a ring-only option that the pool
    /// ignores (see [`AsyncEngineBuilder::build`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::BackendChoice;
    ///
    /// let engine = AsyncEngine::builder().backend(BackendChoice::ThreadPool).build()?;
    /// assert!(engine.fallback_reason().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fallback_reason(&self) -> Option<&str> {
        self.core.fallback_reason.as_deref()
    }

    /// Who drives the engine: the builder's [`Driving`], or for
    /// [`Driving::Auto`] the one it chose ([`Driving::Caller`] with
    /// [`Submit::PerRound`] driven by the tokio runtime it was built on, or
    /// [`Driving::Thread`]); never `Auto`. On the thread-pool backend the
    /// pool's threads complete every operation whichever this says.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::{AsyncEngine, Driving};
    ///
    /// // Built on no tokio runtime, the default is a driver thread.
    /// let engine = AsyncEngine::new()?;
    /// assert!(matches!(engine.driving(), Driving::Thread));
    /// # Ok(())
    /// # }
    /// ```
    pub fn driving(&self) -> &Driving {
        &self.core.driving
    }

    /// A handle that does not keep the engine alive (its driving task
    /// holds one, and ends once the engine is gone).
    pub(crate) fn downgrade(&self) -> WeakEngine {
        WeakEngine(Arc::downgrade(&self.core))
    }

    /// Threads of the thread-pool backend (0 on io_uring).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::{Backend, BackendChoice};
    ///
    /// let engine = AsyncEngine::new()?;
    /// if engine.backend() == Backend::IoUring {
    ///     assert_eq!(engine.fallback_threads(), 0);
    /// }
    /// let pool = AsyncEngine::builder().backend(BackendChoice::ThreadPool).build()?;
    /// assert!(pool.fallback_threads() > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fallback_threads(&self) -> usize {
        self.core.driver.pool_threads()
    }

    /// Completes the operations the kernel has finished and wakes their
    /// tasks, on this thread; returns how many. For engines built with
    /// [`Driving::Caller`], called when
    /// [`poll_fd`](Self::poll_fd) is readable (or the
    /// [`completion_eventfd`](CallerDriving::completion_eventfd), after
    /// reading it); otherwise it does nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use std::os::fd::AsRawFd;
    /// use blockio::aio::{AsyncEngine, AsyncFile, CallerDriving, Driving};
    ///
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new()))
    ///     .build()?;
    /// let file = AsyncFile::from_file(&engine, tempfile::tempfile()?);
    /// let mut write = file.write_at(b"hello".to_vec(), 0);
    /// write.start();
    /// // The event loop's part: wait until the ring's descriptor is readable,
    /// // then reap (on the thread pool there is no descriptor and nothing to do).
    /// if let Some(fd) = engine.poll_fd() {
    ///     let mut watched = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    ///     while engine.reap() == 0 {
    ///         // SAFETY: one pollfd, alive for the call.
    ///         unsafe { libc::poll(&mut watched, 1, -1) };
    ///     }
    /// }
    /// let (n, _buf) = futures::executor::block_on(write);
    /// assert_eq!(n?, 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn reap(&self) -> usize {
        self.core.driver.turn(None)
    }

    /// For engines built with [`Driving::Caller`]:
    /// submits the operations started since the last call (one
    /// `io_uring_enter`), completes those the kernel has finished, waking
    /// their tasks, and registers `cx` to be woken when another operation
    /// is started. Never ready: a loop's driving task calls it whenever it
    /// is polled, and also when [`poll_fd`](Self::poll_fd) is readable.
    /// Does nothing on other engines.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::aio::{AsyncEngine, AsyncFile, CallerDriving, Driving, Submit};
    ///
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new().submit(Submit::PerRound)))
    ///     .build()?;
    /// let file = AsyncFile::from_file(&engine, tempfile::tempfile()?);
    /// // A driving task beside the work: never ready, it submits and reaps each
    /// // time it is polled. (On tokio, `drive_on_tokio` also waits on the ring's
    /// // descriptor; this one is polled again by the executor's `select`.)
    /// let driving = std::future::poll_fn(|cx| {
    ///     cx.waker().wake_by_ref();
    ///     engine.poll_drive(cx)
    /// });
    /// let work = async { file.write_all_at(b"hello".to_vec(), 0).await.0 };
    /// futures::pin_mut!(driving, work);
    /// match futures::future::select(work, driving).await {
    ///     futures::future::Either::Left((written, _)) => written?,
    ///     futures::future::Either::Right(_) => unreachable!("poll_drive is never ready"),
    /// }
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn poll_drive(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.core.driver.turn(Some(cx.waker()));
        std::task::Poll::Pending
    }

    /// For engines built with [`Driving::Caller`] on
    /// io_uring: the ring's descriptor, readable while completions wait to
    /// be reaped (level: reaping them all makes it unreadable), for the
    /// loop to watch (tokio's `AsyncFd`, asyncio's `add_reader`). `None`
    /// for the other engines, whose completions need no driving. The
    /// descriptor stays open as long as the engine (any clone of it)
    /// lives; it is for watching only.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use std::os::fd::AsRawFd;
    /// use blockio::aio::{AsyncEngine, AsyncFile, CallerDriving, Driving};
    ///
    /// let engine = AsyncEngine::builder()
    ///     .driving(Driving::Caller(CallerDriving::new()))
    ///     .build()?;
    /// let file = AsyncFile::from_file(&engine, tempfile::tempfile()?);
    /// let mut write = file.write_at(b"hello".to_vec(), 0);
    /// write.start();
    /// // The event loop's part: wait until the ring's descriptor is readable,
    /// // then reap (on the thread pool there is no descriptor and nothing to do).
    /// if let Some(fd) = engine.poll_fd() {
    ///     let mut watched = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    ///     while engine.reap() == 0 {
    ///         // SAFETY: one pollfd, alive for the call.
    ///         unsafe { libc::poll(&mut watched, 1, -1) };
    ///     }
    /// }
    /// let (n, _buf) = futures::executor::block_on(write);
    /// assert_eq!(n?, 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.core.driver.poll_fd()
    }

    pub(crate) fn driver(&self) -> &Driver {
        &self.core.driver
    }

    /// Whether a relay thread drives this engine now (its
    /// `drive_on_tokio` task gone, with work left that must complete), for
    /// tests.
    #[doc(hidden)]
    #[cfg(feature = "tokio")]
    pub fn relaying(&self) -> bool {
        self.core
            .tokio_drivers
            .relaying
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The `drive_on_tokio` tasks of this engine.
    #[cfg(feature = "tokio")]
    pub(crate) fn tokio_drivers(&self) -> &relay::TokioDrivers {
        &self.core.tokio_drivers
    }

    /// Starts the relay thread of a caller-driven engine that a
    /// `drive_on_tokio` task drove, that none drives now, and whose
    /// dropped streams still have bytes queued or whose operations must
    /// complete (see [`Driving::Caller`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn relay_if_undriven(&self) {
        tokio_drive::relay_if_undriven(self);
    }

    /// Performs `req`, a socket operation on a non-blocking socket, when
    /// its socket is ready: at once if it is, else from an epoll set
    /// watched by a thread of the engine's (on the thread-pool backend, the
    /// pool's own set). Unlike an operation in an io_uring, one waiting
    /// there holds no kernel reference to its socket: a listener's accept
    /// goes this way so that a killed server's port is free the moment its
    /// process is gone, not only once the kernel has torn its ring down.
    pub(crate) fn submit_by_readiness(&self, req: Request) {
        match self.core.readiness() {
            Ok(set) => set.submit(req),
            Err(e) => req.done.complete(-e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    /// Makes now the epoll set that an operation
    /// [`submit_by_readiness`](Self::submit_by_readiness) from the caller
    /// would wait in (the caller's runtime's, or the readiness thread's),
    /// if it is not yet: a TCP listener's bind, so that a listener that
    /// could never accept fails there. The error names what could not be
    /// made. Not kept when it fails: the next call tries again.
    pub(crate) fn start_readiness(&self) -> io::Result<()> {
        match &self.core.driver {
            // Made with the engine: a wait whose runtime's set cannot be
            // made waits in the thread's.
            Driver::Pool(_) => Ok(()),
            Driver::Thread(_) | Driver::Caller(_) => self.core.readiness()?.prepare(),
        }
    }

    /// Keeps `fd`, a socket whose operations wait for readiness, in the
    /// epoll set from its first wait on (added once, instead of an add
    /// and a delete a wait), on the thread-pool backend, where every socket
    /// operation waits there; `None` elsewhere. The registration must be
    /// dropped before `fd` is closed: it then deletes `fd` from the set.
    pub(crate) fn keep_by_readiness(&self, fd: RawFd) -> Option<Registration> {
        match &self.core.driver {
            Driver::Pool(pool) => Some(pool.sockets().keep(fd)),
            Driver::Thread(_) | Driver::Caller(_) => None,
        }
    }

    /// Cancels an operation handed to
    /// [`submit_by_readiness`](Self::submit_by_readiness), if it waits.
    pub(crate) fn cancel_by_readiness(&self, target: Cancel) {
        if let Some(set) = self.core.started_readiness() {
            set.cancel(&target);
        }
    }

    /// The shape of the engine's receive buffers (also the buffer size
    /// of receive streams where there is no ring).
    pub(crate) fn recv_shape(&self) -> RingShape {
        self.core.recv_shape
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
        if let Some(ring) = self.core.recv_ring.get() {
            return ring.as_ref();
        }
        if self.core.driver.setup_would_wait_for_itself() {
            return None;
        }
        self.core
            .recv_ring
            .get_or_init(|| {
                if self.core.backend != Backend::IoUring || !crate::ring::kernel_at_least(6, 0) {
                    return None;
                }
                let ring = Arc::new(BufRing::new(self.core.recv_shape).ok()?);
                let r = ring.clone();
                let setup: Setup = Box::new(move |uring| {
                    r.register(uring)?;
                    Ok(r as Kept)
                });
                self.core.driver.setup_ring(setup).ok()?;
                Some(ring)
            })
            .as_ref()
    }
}

/// Refuses a [`completion_eventfd`](CallerDriving::completion_eventfd)
/// that is not an open eventfd, naming it.
fn check_eventfd(fd: RawFd) -> io::Result<()> {
    let invalid = |what: String| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CallerDriving::completion_eventfd: descriptor {fd} {what}"),
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
