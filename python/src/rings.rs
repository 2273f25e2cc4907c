//! The two async engines behind the asyncio API, made on first use, and
//! the descriptors they made, recorded as the engines' own (see
//! [`crate::fds::own_new`]) until they are shut or dropped.

use std::os::fd::RawFd;
use std::sync::{Mutex, PoisonError};

use blockio::aio::{AsyncEngine, CallerDriving, Driving};
use blockio::{Backend, BackendChoice};
use pyo3::prelude::*;

use crate::*;

/// The two async engines behind the asyncio API, named by who drives
/// their ring: on `O_DIRECT` descriptors a ring the event loop drives
/// itself is faster (a driver thread costs two cross-thread wake-ups per
/// read, which bound a fixed number of tasks); on buffered ones the driver
/// thread is faster cold, because submitting a page-cache miss is costly
/// kernel work that the driver thread does on the other core. The figures
/// are in docs/benchmarks.md.
#[derive(Default)]
struct AioEngines {
    /// The engine with a driver thread of its own, which submits and reaps:
    /// buffered descriptors, fsyncs, and everything on the thread-pool
    /// backend.
    driver_thread: Option<AsyncEngine>,
    /// The ring the event loop's thread drives, for `O_DIRECT`
    /// descriptors: submitted on the loop's thread, reaped by `drain` when
    /// the eventfd fires.
    loop_driven: Option<AsyncEngine>,
}

/// The async engines of one core and the descriptors they made.
pub(crate) struct Rings {
    engines: Mutex<AioEngines>,
    /// The queue depth each engine is built with.
    queue_depth: u32,
    /// The descriptors the engines made on first use, recorded as the
    /// engines' own until [`Rings::shut`] or drop.
    own_fds: Mutex<Vec<RawFd>>,
}

impl Drop for Rings {
    fn drop(&mut self) {
        disown(&self.own_fds.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

impl Rings {
    /// No engine yet; each is built with `queue_depth` on first use.
    pub(crate) fn new(queue_depth: u32) -> Rings {
        Rings {
            engines: Mutex::new(AioEngines::default()),
            queue_depth,
            own_fds: Mutex::new(Vec::new()),
        }
    }

    /// The async engine for a descriptor opened with (`direct`) or without
    /// `O_DIRECT` (see [`AioEngines`]), built on first use on `backend`
    /// (the core's); a loop-driven ring tells
    /// `eventfd` of its completions.
    pub(crate) fn get(
        &self,
        backend: Backend,
        direct: bool,
        eventfd: RawFd,
    ) -> PyResult<AsyncEngine> {
        let mut aio = self.engines.lock().unwrap_or_else(PoisonError::into_inner);
        let pool = backend == Backend::ThreadPool;
        let (slot, loop_driven) = if direct && !pool {
            (&mut aio.loop_driven, true)
        } else {
            (&mut aio.driver_thread, false)
        };
        if slot.is_none() {
            // The core tries the page cache itself before it reaches the
            // async engine (`FileState`'s inline read), so the engine's own
            // inline try would only repeat a failed one on cold data.
            let mut b = AsyncEngine::builder()
                .queue_depth(self.queue_depth as usize)
                .read_path(blockio::ReadPath::AlwaysSubmit);
            if pool {
                b = b.backend(BackendChoice::ThreadPool);
            } else if loop_driven {
                b = b.driving(Driving::Caller(
                    CallerDriving::new().completion_eventfd(eventfd),
                ));
            }
            // (what it makes, for the error when descriptors run out)
            let (what, needs) = if pool {
                ("its thread pool's epoll instance and eventfd", 2)
            } else if loop_driven {
                ("its io_uring ring for O_DIRECT files", 1)
            } else {
                (
                    "its io_uring ring and the eventfd that wakes the ring's driver thread",
                    2,
                )
            };
            let before = anon_fds();
            let built = b
                .build()
                .map_err(|e| setup_err(e, what, needs, Part::Kept))?;
            *slot = Some(built);
            let made = own_new(&before);
            self.own_fds
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(made);
        }
        Ok(slot.clone().expect("built above"))
    }

    /// The loop-driven ring, if one was made: what `drain` reaps.
    pub(crate) fn loop_driven(&self) -> Option<AsyncEngine> {
        self.engines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .loop_driven
            .clone()
    }

    /// Drops both engines (which cancels what is in flight on them) and
    /// forgets their descriptors as the engines' own.
    pub(crate) fn shut(&self) {
        *self.engines.lock().unwrap_or_else(PoisonError::into_inner) = AioEngines::default();
        disown(&std::mem::take(
            &mut *self.own_fds.lock().unwrap_or_else(PoisonError::into_inner),
        ));
    }

    /// Forgets both engines without dropping them: in a forked child, whose
    /// rings belong to the parent.
    pub(crate) fn forget(&self) {
        std::mem::forget(std::mem::take(
            &mut *self.engines.lock().unwrap_or_else(PoisonError::into_inner),
        ));
    }
}
