//! The one place that asks whether an engine is driven.
//!
//! A caller-driven engine whose `drive_on_tokio` task is gone is driven
//! again from the next task that uses it, or its new work is refused with
//! an error saying why (see [`Driving::Caller`](super::Driving::Caller)).
//! That question is asked here alone, through an [`Admission`], as tokio
//! asks its reactor through an I/O resource's `Registration`:
//!
//! * every operation's future holds one and asks at its start and at
//!   every poll (`OpFuture::admit`);
//! * every socket holds one, made with the socket from its engine: its
//!   operations are made through it, and its paths that may return
//!   without starting an operation (bytes already received, bytes queued
//!   behind a send in flight) ask through it before serving.
//!
//! Work already accepted (the rest of a short send, queued bytes, a
//! file's write-behind) goes on without asking, so it is never refused
//! half-way.

use std::io;

use super::AsyncEngine;

/// An engine as an operation or a socket uses it, and the only way to
/// ask whether that engine is driven ([`admit`](Self::admit)).
#[derive(Clone)]
pub(crate) struct Admission {
    engine: AsyncEngine,
}

impl Admission {
    /// The admission of an operation or a socket to `engine`.
    pub(crate) fn new(engine: &AsyncEngine) -> Admission {
        Admission {
            engine: engine.clone(),
        }
    }

    /// The engine admitted to.
    pub(crate) fn engine(&self) -> &AsyncEngine {
        &self.engine
    }

    /// Whether new work may go to the engine: `Ok` when it is driven, or
    /// once a caller-driven engine whose `drive_on_tokio` task is gone has
    /// a new one on the calling task's tokio runtime; an error saying why
    /// where that cannot be. `Ok` at once for every other engine.
    #[inline]
    pub(crate) fn admit(&self) -> io::Result<()> {
        #[cfg(feature = "tokio")]
        return super::tokio_drive::ensure_driven(&self.engine);
        #[cfg(not(feature = "tokio"))]
        Ok(())
    }
}
