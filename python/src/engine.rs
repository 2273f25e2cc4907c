//! [`Core`], the engine as the Python layer sees it, and its lifecycle:
//! what the core is made of and `new`, the guard every call passes
//! ([`Core::check`]: closed, or inherited across a fork), the async
//! engine a descriptor's operations use ([`Core::aio`], `prepare`), the
//! start of a batch and the hand-back of finished ones ([`Core::start`],
//! [`Core::finished`], `drain`), the batches of one file-system job
//! ([`Core::start_job`]) and the closes of file objects' descriptors that
//! a batch leaving the core makes due ([`Core::start_closes`]), and
//! `close`. Those starts are here together because they call one another
//! (a batch that leaves the core may make a close due, which is a job,
//! which is a batch). This module declares
//! the core's own fields (`engine`, `closing`, `born`, `reads`, `spare`;
//! the last two are used by the asynchronous reads in [`crate::submit`]);
//! each other part owns its state in its module, and the calls live
//! beside what they use: the synchronous calls in [`crate::sync_calls`]
//! (their engine in [`crate::sync_engine`]), the asynchronous operations
//! on the rings in [`crate::submit`], the file-system jobs in
//! [`crate::fscalls`], the reads served inline in [`crate::inline_calls`]
//! and the Python methods, which hand each call there, in
//! [`mod@crate::pymethods`].

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use blockio::aio::AsyncEngine;
use blockio::{AlignedBuf, Backend, BackendChoice, Engine};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::{io_err, setup_err, Part};
use crate::fds::{fd_flags, Born};
use crate::fsjobs;
use crate::fsjobs::FsCall;
use crate::inflight::InFlight;
use crate::inline_read::InlineReads;
use crate::lent::release_parked;
use crate::owned::Close;
use crate::pending::{
    failed, results_or_error, Boxed, Closed, Done, Finished, OneDone, Pending, Yields,
};
use crate::rings::Rings;
use crate::sync_engine::SyncEngine;

/// The engine as the Python layer sees it: the batch engine of the
/// synchronous calls, and beside it one part for each thing the core
/// owns.
///
/// Locks. The mutexes of a core, and what each guards:
///
/// * `engine` (here): the synchronous calls' engine, `None` once closed;
///   held only to read the backend or whether the core is closed, to
///   make the engine at the first synchronous call ([`SyncEngine::get`])
///   or to take it at `close`,
///   never across I/O (each call clones the engine out).
/// * `spare` (here): the read buffers kept for the next reads; held while
///   `submit_read` builds its futures (it takes buffers out), and while a
///   finished read batch gives its buffers back (`results_to_py`).
/// * [`Rings`]: `engines` (the async engines, made on first use) and
///   `own_fds` (the descriptors they made), and the process's list of
///   engines' own descriptors (`fds::OWN`).
/// * [`InFlight`]: `pending` (the batches by token), `ready` (those that
///   finished when started) and `woken` (the tokens woken since the last
///   drain).
/// * [`crate::owned::Owned`]: the descriptors file objects own, each
///   with its count of borrowing batches and its waiting close.
/// * [`fsjobs::Pool`]: the file-system threads' queue, and one slot per
///   job for its result.
///
/// `engine`, `spare`, `InFlight`'s `ready` and `woken`, the owned
/// descriptors' map, the file-system queue and a job's slot are leaves:
/// while one is held no other lock of the core is taken. The nestings,
/// always in this order: `Rings`' `engines` before its `own_fds` and
/// `fds::OWN` (making the engines), and `own_fds` before `fds::OWN`
/// (shutting them: `Rings::shut` and its drop); `InFlight`'s `pending`
/// before `woken`, a job's slot and a file's write-queue locks (a batch
/// polled, or withdrawn by `cancel`, under `pending`: its operations'
/// wakers take `woken`, a job's future its slot, a write queue's future
/// the queue's own locks in the order [`crate::wqueue`] states). No lock of
/// the core is held while a call waits (for I/O, a file-system thread or
/// a descriptor), and the closes a finished batch makes due
/// ([`Core::start_closes`]) start once `pending` is let go.
#[pyclass(module = "blockio._blockio")]
pub(crate) struct Core {
    /// The engine of the synchronous calls (see [`SyncEngine`]); `None`
    /// once closed.
    pub(crate) engine: Mutex<Option<SyncEngine>>,
    /// `close` has started: synchronous calls waiting for a descriptor
    /// end at once, without waiting for `close` to finish waiting for the
    /// asynchronous operations.
    pub(crate) closing: AtomicBool,
    /// The fork guard: where this core was made.
    pub(crate) born: Born,
    /// The async engines, made on first use.
    pub(crate) rings: Rings,
    /// The asynchronous batches not yet handed back, and their eventfd.
    pub(crate) inflight: InFlight,
    /// Read buffers of finished asynchronous reads, for the next ones.
    pub(crate) spare: Mutex<Vec<AlignedBuf>>,
    /// Threads for the file-system calls: open, stat, ftruncate, close,
    /// mkdir, symlink and whole-file reads (see [`fsjobs`]).
    pub(crate) fs: fsjobs::Pool,
    /// Reads served inline, from the page cache on the calling thread.
    pub(crate) inline: InlineReads,
    /// The descriptors file objects of this engine own, which their
    /// operations borrow without a duplicate (see [`crate::owned`]).
    pub(crate) owned: crate::owned::Owned,
    /// Reads started through the engine (`submit_read`,
    /// `submit_read_after`, `submit_readinto`), for [`Core::reads_started`].
    pub(crate) reads: AtomicU64,
}

impl Core {
    /// A core on `backend` (`None` or "auto": io_uring, else the thread
    /// pool; "uring" or "threads": that one, and it must agree with
    /// `BLOCKIO_BACKEND` if that is set), its engines made with
    /// `queue_depth`: the synchronous calls' engine found (made late on
    /// io_uring: see [`SyncEngine`]), the eventfd of finished batches made,
    /// the rest made on first use.
    pub(crate) fn new(queue_depth: i64, backend: Option<&str>) -> PyResult<Core> {
        let choice = match backend {
            None | Some("auto") => BackendChoice::Auto,
            Some("uring") => BackendChoice::IoUring,
            Some("threads") => BackendChoice::ThreadPool,
            Some(other) => {
                // The values of `BLOCKIO_BACKEND`, and no other spelling;
                // the value quoted as Python quotes a string.
                return Err(PyValueError::new_err(format!(
                    "backend='{}': expected one of {}",
                    other.escape_default(),
                    blockio::BACKEND_ENV_VALUES.join(", ")
                )));
            }
        };
        if choice != BackendChoice::Auto {
            // An explicit backend and the environment's: where they differ
            // neither is silently ignored.
            if let Some(env) = BackendChoice::from_env().map_err(io_err)? {
                if env != choice {
                    return Err(PyValueError::new_err(format!(
                        "backend={:?} contradicts {}={:?} in the environment, which chooses the \
                         backend of every engine: unset it, or pass backend='auto'",
                        backend.unwrap_or_default(),
                        blockio::BACKEND_ENV,
                        std::env::var(blockio::BACKEND_ENV).unwrap_or_default()
                    )));
                }
            }
        }
        // The engines' own rule, so the ValueError says what they would.
        let queue_depth = blockio::check_queue_depth(queue_depth)
            .map_err(|e| PyValueError::new_err(e.to_string()))? as u32;
        // (out of descriptors, each part's error says what it needs)
        let engine = SyncEngine::new(queue_depth, choice)?;
        let inflight = InFlight::new().map_err(|e| {
            setup_err(
                e,
                "the eventfd that tells event loops of its results",
                1,
                Part::Kept,
            )
        })?;
        Ok(Core {
            engine: Mutex::new(Some(engine)),
            closing: AtomicBool::new(false),
            born: Born::here(),
            rings: Rings::new(queue_depth),
            inflight,
            spare: Mutex::new(Vec::new()),
            fs: fsjobs::Pool::default(),
            inline: InlineReads::default(),
            owned: Default::default(),
            reads: AtomicU64::new(0),
        })
    }

    /// Whether `close` has started (from any thread): what synchronous
    /// waits for a descriptor look at.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst) || self.closed()
    }

    /// `RuntimeError` once closed, or in a forked child; the backend.
    pub(crate) fn check(&self) -> PyResult<Backend> {
        self.with_sync(|e| Ok(e.backend))
    }

    /// `f` of the synchronous calls' engine, once [`check`](Self::check)ed.
    fn with_sync<T>(&self, f: impl FnOnce(&mut SyncEngine) -> PyResult<T>) -> PyResult<T> {
        if self.born.forked() {
            return Err(PyRuntimeError::new_err(
                "this blockio.Engine was created before fork(): its rings belong to the parent; create a new Engine in the child",
            ));
        }
        match self
            .engine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            Some(e) => f(e),
            None => Err(PyRuntimeError::new_err("the engine is closed")),
        }
    }

    /// The batch engine of the synchronous calls, made at the first (see
    /// [`SyncEngine`]).
    pub(crate) fn sync_engine(&self) -> PyResult<Engine> {
        self.with_sync(SyncEngine::get)
    }

    /// The async engine for a descriptor opened with (`direct`) or without
    /// `O_DIRECT` (see [`Rings::get`]).
    pub(crate) fn aio(&self, direct: bool) -> PyResult<AsyncEngine> {
        let backend = self.check()?;
        self.rings.get(backend, direct, self.inflight.eventfd())
    }

    /// Starts a batch for `waiter` (see [`InFlight::start`]); the token,
    /// which `cancel` takes.
    pub(crate) fn start(&self, waiter: PyObject, p: Pending) -> u64 {
        let (token, left) = self.inflight.start(waiter, p);
        if !left.is_empty() {
            self.start_closes(self.owned.release(&left));
        }
        token
    }

    /// The batches finished since the last call, removed (see
    /// [`InFlight::finished`]); the closes they held back are started.
    pub(crate) fn finished(&self) -> Vec<(PyObject, Done)> {
        let (out, left) = self.inflight.finished(self.rings.loop_driven());
        if !left.is_empty() {
            self.start_closes(self.owned.release(&left));
        }
        out
    }

    /// Starts one file-system job as a batch for `waiter` (or reports the
    /// errno that made preparing it fail); its token.
    pub(crate) fn start_job(&self, waiter: PyObject, job: Result<FsCall, i32>) -> PyResult<u64> {
        self.start_job_on(waiter, job, None)
    }

    /// [`start_job`](Self::start_job) of a job that borrows `borrowed`, a
    /// descriptor a file object owns (see
    /// [`crate::owned::Owned::hold_for_job`]).
    pub(crate) fn start_job_on(
        &self,
        waiter: PyObject,
        job: Result<FsCall, i32>,
        borrowed: Option<RawFd>,
    ) -> PyResult<u64> {
        let fut: Boxed<OneDone> = match job {
            Ok(job) => match self.fs.submit(job) {
                Ok(f) => Box::pin(async move { OneDone::Count(f.await) }),
                Err(e) => {
                    self.start_closes(self.owned.release(borrowed.as_slice()));
                    return Err(io_err(e));
                }
            },
            Err(errno) => failed(Yields::Count, io::Error::from_raw_os_error(errno)),
        };
        let mut batch = Pending::new(vec![fut], Yields::Count);
        batch.borrowed.extend(borrowed);
        Ok(self.start(waiter, batch))
    }

    /// Starts the closes now due (see [`crate::owned::Owned::release`]).
    pub(crate) fn start_closes(&self, due: Vec<Close>) {
        for (waiter, fd) in due {
            // (the pool refuses a job only when it has no thread and can
            // make none: the descriptor is then closed as the refused job
            // is dropped, and the task awaiting the close is never
            // resolved: a process out of threads)
            let _ = self.start_job(waiter, Ok(FsCall::Close(fd)));
        }
    }

    /// "uring" or "threads", as `BLOCKIO_BACKEND` names them.
    pub(crate) fn backend(&self) -> PyResult<&'static str> {
        Ok(match self.check()? {
            Backend::IoUring => "uring",
            Backend::ThreadPool => "threads",
        })
    }

    /// Why the thread pool is in use, if it is.
    pub(crate) fn fallback_reason(&self) -> PyResult<Option<String>> {
        self.with_sync(|e| Ok(e.fallback_reason.clone()))
    }

    /// Makes the async engine that `fd`'s operations will use (its ring
    /// and eventfd, or the thread pool's epoll, eventfd and timerfd), if
    /// it is not made yet: called by `blockio.open` before it returns a
    /// file, so that a file once open can always finish its calls, and
    /// what fails with `EMFILE` when descriptors run out is the open.
    ///
    /// With `opener` (called before `blockio.open` runs the caller's
    /// opener, which may add `O_DIRECT`), the ring of `O_DIRECT` files is
    /// made too: it is made before the path is opened, so that an open
    /// short of descriptors for it fails having created no file.
    pub(crate) fn prepare(&self, fd: RawFd, opener: bool) -> PyResult<()> {
        // (no `fcntl` of -1, the open still to come, which only fails)
        let flags = if fd < 0 { -1 } else { fd_flags(fd) };
        self.aio(flags != -1 && flags & libc::O_DIRECT != 0)?;
        if opener {
            self.aio(true)?;
        }
        Ok(())
    }

    /// The eventfd the event loop watches for finished asynchronous batches.
    pub(crate) fn eventfd(&self) -> PyResult<RawFd> {
        self.check()?;
        Ok(self.inflight.eventfd())
    }

    /// The finished batches since the last call: `(waiter, results)` pairs,
    /// results as the synchronous calls return them. Called by the event
    /// loop when the eventfd is readable. Nothing in a forked child: the
    /// eventfd and the rings are the parent's (a read of the eventfd would
    /// take the parent's wake-up, a reap its completions).
    pub(crate) fn drain<'py>(&self, py: Python<'py>) -> PyResult<Finished<'py>> {
        if self.born.forked() {
            return Ok(Vec::new());
        }
        self.inflight.clear_eventfd();
        release_parked(py);
        self.finished()
            .into_iter()
            .map(|(w, d)| Ok((w, results_or_error(py, d, &self.spare))))
            .collect()
    }

    /// Shuts the engine down and hands back what became of the
    /// asynchronous batches still pending: `(finished, cancelled,
    /// interrupted)`, the `(waiter, results)` of those that completed while
    /// it waited, the waiters of those it cancelled, and the exception a
    /// signal handler raised meanwhile (or `None`), for the caller to raise
    /// once it has resolved the others. It waits (GIL released, signals
    /// checked every 100 ms) while operations keep completing; once a whole
    /// second passes without one (a read of an empty pipe, a write to a
    /// full one), or a signal handler raises, it cancels the rest: those
    /// not yet in the kernel are never submitted, those in flight are
    /// cancelled there and keep their buffers until the kernel lets go of
    /// them. Idempotent. In a forked child it waits for nothing and
    /// touches no ring: the rings, the engine and the batches are
    /// forgotten, and `cancelled` holds the waiters of the parent's
    /// batches (see `InFlight::forget`).
    pub(crate) fn close<'py>(&self, py: Python<'py>) -> PyResult<Closed<'py>> {
        if self.born.forked() {
            // A forked child never touches the parent's rings; forget them.
            self.rings.forget();
            let engine = self
                .engine
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if engine.is_some() {
                // (once: the first close in the child)
                self.inflight.detach_eventfd();
            }
            std::mem::forget(engine);
            // The waiters of the parent's operations, for the caller to
            // fail: nothing in the child will ever complete them.
            return Ok((Vec::new(), self.inflight.forget(), None));
        }
        self.closing.store(true, Ordering::SeqCst);
        let mut finished = Vec::new();
        let mut interrupted = None;
        let mut idle = 0;
        loop {
            self.inflight.clear_eventfd();
            let done = self.finished();
            idle = if done.is_empty() { idle + 1 } else { 0 };
            for (w, d) in done {
                finished.push((w, results_or_error(py, d, &self.spare)));
            }
            if self.inflight.count() == 0 || idle > 10 {
                break;
            }
            if let Err(e) = py.check_signals() {
                interrupted = Some(e);
                break;
            }
            let efd = self.inflight.eventfd();
            crate::gil::detach(py, || {
                let mut p = libc::pollfd {
                    fd: efd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd on the stack.
                unsafe { libc::poll(&mut p, 1, 100) };
            });
        }
        let mut cancelled = self.inflight.cut_all();
        // The closes of file objects' descriptors that waited for the
        // batches cut short: made here, their waiters told that close cut
        // them short.
        for (waiter, fd) in self.owned.take_all() {
            drop(fd);
            cancelled.push(waiter);
        }
        self.rings.shut();
        *self.engine.lock().unwrap_or_else(PoisonError::into_inner) = None;
        release_parked(py);
        let interrupted = interrupted.map(|e| e.into_value(py));
        Ok((finished, cancelled, interrupted))
    }

    /// How many reads were started through the engine (its rings or
    /// threads) since it was made: a read served inline, or on the event
    /// loop's own ring, is not one. For tests that check where reads go.
    pub(crate) fn reads_started(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Whether `close` has run.
    pub(crate) fn closed(&self) -> bool {
        self.engine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}
