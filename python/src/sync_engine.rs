//! [`SyncEngine`], the batch engine of the synchronous calls
//! (`Engine.read`, `read_files`, ...), made late on io_uring: what it
//! owns is that engine and the backend every engine of the core uses. A
//! part of [`Core`](crate::Core) of its own, behind the core's `engine`
//! mutex, so that the rule of when the ring is made (and the error when
//! it cannot be) lives in one place; the calls that use it are in
//! [`crate::sync_calls`].

use std::io;

use blockio::{Backend, BackendChoice, Engine};
use pyo3::prelude::*;

use crate::errors::{errno_of, message, setup_err, Part, Renamed};

/// The batch engine of the synchronous calls (`Engine.read`,
/// `read_files`, ...), and the backend every engine of the core uses,
/// found when the core is made. On io_uring the engine found then is
/// dropped and made again at the first synchronous call: a program that
/// only awaits never holds its ring (one descriptor fewer: see the
/// README's descriptors). Cloned out (an `Arc` inside) for each call, so
/// no lock is held across I/O.
pub(crate) struct SyncEngine {
    made: Option<Engine>,
    pub(crate) backend: Backend,
    pub(crate) fallback_reason: Option<String>,
    queue_depth: u32,
}

impl SyncEngine {
    /// Finds the backend as `choice` (and `BLOCKIO_BACKEND`) ask, by
    /// making the engine; keeps it only where it holds no descriptor (the
    /// thread pool).
    pub(crate) fn new(queue_depth: u32, choice: BackendChoice) -> PyResult<SyncEngine> {
        let engine = Engine::builder()
            .queue_depth(queue_depth as usize)
            .backend(choice)
            .build()
            .map_err(|e| setup_err(e, SYNC_RING, 1, Part::Probe))?;
        let backend = engine.backend();
        let fallback_reason = engine.fallback_reason().map(str::to_string);
        Ok(SyncEngine {
            made: (backend == Backend::ThreadPool).then_some(engine),
            backend,
            fallback_reason,
            queue_depth,
        })
    }

    /// The engine, made now if it is not yet (on the backend found).
    ///
    /// The backend is the engine's for good, even when io_uring has become
    /// unavailable since (`kernel.io_uring_disabled`, a seccomp profile
    /// installed later): the asynchronous engines already run on it, and
    /// falling back here would give one engine two backends while
    /// `Engine.backend` names one. The call fails instead, with the
    /// cause's errno and an error that says what could not be made.
    pub(crate) fn get(&mut self) -> PyResult<Engine> {
        if let Some(engine) = &self.made {
            return Ok(engine.clone());
        }
        let choice = match self.backend {
            Backend::IoUring => BackendChoice::IoUring,
            Backend::ThreadPool => BackendChoice::ThreadPool,
        };
        let engine = Engine::builder()
            .queue_depth(self.queue_depth as usize)
            .backend(choice)
            .build()
            .map_err(|e| lazy_ring_err(e, self.backend))
            .map_err(|e| setup_err(e, SYNC_RING, 1, Part::Later))?;
        self.made = Some(engine.clone());
        Ok(engine)
    }
}

/// What [`SyncEngine`] makes, for the error when descriptors run out.
const SYNC_RING: &str = "the io_uring ring of its synchronous calls";

/// The error of the synchronous calls' ring made late on `backend` (see
/// [`SyncEngine::get`]), past out of descriptors (which [`setup_err`]
/// words): what could not be made and why, not the builder's "io_uring
/// was required", since the program asked for no backend; errno kept.
fn lazy_ring_err(e: io::Error, backend: Backend) -> io::Error {
    let errno = errno_of(&e);
    if backend != Backend::IoUring || errno == libc::EMFILE || errno == libc::ENFILE {
        return e;
    }
    let text = message(&e, errno);
    let why = text
        .strip_prefix("io_uring was required but is unavailable: ")
        .unwrap_or(&text);
    let text = format!(
        "blockio's engine could not make {SYNC_RING} at its first synchronous call: {why} \
         (the engine's backend, io_uring, was found when the engine was made and is kept: \
         the synchronous calls do not fall back to the thread pool)"
    );
    io::Error::new(e.kind(), Renamed { errno, text })
}
