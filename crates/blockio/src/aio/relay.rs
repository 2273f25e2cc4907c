//! The bookkeeping of the tasks that drive a caller-driven engine on
//! tokio ([`TokioDrivers`]), and of the dropped streams that still need
//! driving ([`Lingering`]). With no such task left, a relay thread drives
//! the engine while a dropped stream lingers or an operation must
//! complete (see `tokio_drive::relay_if_undriven`), and exits once none
//! is left: streams merely kept, their receives armed with nobody
//! waiting, keep no thread. Kept apart from the public [`Driving`]
//! setting so that the setting's module, which the caller-driven ring
//! uses, depends on nothing in `aio` (and so on no driver).
//!
//! [`Driving`]: super::Driving

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Waker;

use super::AsyncEngine;

/// The `drive_on_tokio` tasks of a caller-driven engine: how many are
/// running, and whether one ever ran (only then does an engine without one
/// get a new one; see [`Driving::Caller`](super::Driving::Caller)); and the dropped streams whose
/// queues are still being sent, which a thread of the engine's drives
/// while no `drive_on_tokio` task does.
#[derive(Debug, Default)]
pub(crate) struct TokioDrivers {
    pub(crate) running: AtomicUsize,
    /// Of those, the ones driving now (polled, with the ring registered):
    /// the relay thread hands over only to such a task, not to one merely
    /// claimed (spawned on a runtime that may be shutting down and never
    /// poll it).
    pub(crate) live: AtomicUsize,
    pub(crate) ever: AtomicBool,
    /// Dropped streams with bytes still queued ([`Lingering`] tickets).
    pub(crate) lingering: AtomicUsize,
    /// A relay thread is driving the engine.
    pub(crate) relaying: AtomicBool,
    /// The relay thread's task, woken when `lingering` or `live`
    /// changes.
    pub(crate) relay_waker: Mutex<Option<Waker>>,
}

impl TokioDrivers {
    /// Wakes the relay thread's task, if there is one.
    pub(crate) fn wake_relay(&self) {
        let waker = self
            .relay_waker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A dropped stream whose queued bytes are still being sent (or whose
/// socket is not closed yet), counted by its engine until this is
/// dropped.
pub(crate) struct Lingering(AsyncEngine);

impl Lingering {
    /// Counts a lingering stream of `engine`; with no `drive_on_tokio`
    /// task left to drive a caller-driven engine, starts the relay thread.
    pub(crate) fn new(engine: &AsyncEngine) -> Lingering {
        engine
            .tokio_drivers()
            .lingering
            .fetch_add(1, Ordering::AcqRel);
        engine.relay_if_undriven();
        Lingering(engine.clone())
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let drivers = self.0.tokio_drivers();
        drivers.lingering.fetch_sub(1, Ordering::AcqRel);
        drivers.wake_relay();
    }
}
