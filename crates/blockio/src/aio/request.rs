//! What every driver shares: a request (an operation and where its result
//! goes), a cancel naming one, and the one way the engine calls user code.
//!
//! A [`Request`] is opaque to the drivers: an [`Op`] plus a [`Complete`]
//! target, so file and socket operations travel the same way. The future
//! that made a request and the driver share the target; a dropped future
//! leaves it with the driver, which frees it when the completion arrives
//! (the kernel may write into the operation's buffer until then).
//!
//! User code (wakers, buffers' `Drop`s) is reached only through
//! [`call_user`], with no lock of the engine held and its bookkeeping
//! consistent, so a panic there can neither free memory the kernel may
//! still write nor skip the completions of other operations.

use std::sync::{Arc, Weak};

use crate::kind::OpKind;
use crate::op::Op;

/// Receives an operation's result (bytes, or `-errno`).
pub(crate) trait Complete: Send + Sync {
    /// Called once, on the driver (or a pool) thread.
    fn complete(&self, res: i32);

    /// Whether the operation is to be performed even with no future left
    /// to take its result (a dropped file's write-behind), instead of
    /// being skipped as abandoned.
    fn detached(&self) -> bool {
        false
    }

    /// Notes that the operation's cancel was asked of a pool driver: a
    /// read a pool thread holds waiting for its pipe to become readable
    /// gives up (see `Request::run_blocking`).
    fn ask_cancel(&self) {}

    /// Whether [`ask_cancel`](Self::ask_cancel) was called.
    fn cancel_asked(&self) -> bool {
        false
    }

    /// Called by the driver as it hands the operation to the kernel (or as
    /// a pool thread starts it): false if the operation was withdrawn
    /// before that (see [`Withdrawal`](super::Withdrawal)), and must be
    /// dropped unperformed. Once it has returned true, a withdrawal fails.
    fn claim(&self) -> bool {
        true
    }

    /// Called for each completion of an io_uring operation, with the
    /// completion's flags: many times for a multishot operation (all but
    /// the last with `IORING_CQE_F_MORE`), once for the others. Unless
    /// overridden, passes the result on to [`complete`](Self::complete).
    fn complete_flags(&self, res: i32, _flags: u32) {
        self.complete(res);
    }

    /// Wakes the tasks waiting for this operation, with no result for
    /// them: the task that drove a caller-driven ring is gone, and a
    /// waiting task's next poll has the engine driven again (see
    /// `Admission::admit`). Called with no lock held.
    fn wake_waiters(&self) {}

    /// Whether the operation must be completed even while no task drives
    /// the engine: a task may wait for it (on an executor that cannot
    /// drive the engine, it waits for the relay thread, see
    /// `tokio_drive::relay_if_undriven`), or it must finish for its own
    /// sake. False only for a receive kept armed with no task waiting on
    /// it: what it posts waits in the ring for the next read, whose task
    /// has the engine driven again (or is refused).
    #[cfg(feature = "tokio")]
    fn awaited(&self) -> bool {
        true
    }

    /// Keeps `hold` until the operation's completion has woken its task
    /// (a hold on tokio's paused clock, see `aio::paused_clock`); dropped
    /// at once by a target that wakes no task.
    #[cfg(feature = "tokio")]
    fn hold(&self, hold: Arc<dyn Send + Sync>) {
        drop(hold);
    }
}

/// What a pool thread found waiting for a read's descriptor
/// (`Request::readable_unless_dropped`).
enum Wait {
    /// Readable (or not to be waited for): the read is made.
    Readable,
    /// Its future is gone: the read is never made, nor completed.
    Dropped,
    /// Its cancel was asked: it completes with `ECANCELED`, unmade.
    Cancelled,
}

/// An operation to perform, and where its result goes.
pub(crate) struct Request {
    pub op: Op<'static>,
    pub done: Arc<dyn Complete>,
}

impl Request {
    /// Whether the future that made this request is gone (dropped, or its
    /// batch cancelled) before the request reached the kernel, or the
    /// operation was withdrawn: nobody will read its result, so it is
    /// never submitted. Dropping the request frees its buffer and its hold
    /// on the file at once. Called by a driver just before it submits the
    /// request: false claims the operation (see [`Complete::claim`]), so a
    /// withdrawal from then on fails.
    ///
    /// The future and the request share `done`; a future dropped while
    /// this runs leaves two counted, and the request is submitted as
    /// usual (its memory stays owned by `done` until the completion).
    pub(crate) fn abandoned(&self) -> bool {
        self.dropped() || !self.done.claim()
    }

    /// Performs the request with blocking system calls (a pool worker's
    /// task), unless it was abandoned. A panic of the waker or of the
    /// buffer's `Drop` is reported by the panic hook and leaves the worker
    /// serving the next request.
    pub(crate) fn run_blocking(self) {
        let _ = call_user(move || {
            if !self.abandoned() {
                match self.readable_unless_dropped() {
                    Wait::Readable => self.done.complete(self.op.run_blocking_raw()),
                    Wait::Cancelled => self.done.complete(-libc::ECANCELED),
                    Wait::Dropped => {}
                }
            }
            drop(self);
        });
    }

    /// Whether the future that made this request is gone (dropped, or its
    /// batch cancelled), while the request waits on a pool thread.
    fn dropped(&self) -> bool {
        Arc::strong_count(&self.done) == 1 && !self.done.detached()
    }

    /// For a read at offset 0, where a pipe, FIFO, socket or terminal is
    /// read (with `read`): waits until the descriptor is readable, in
    /// slices of 100 ms, and gives up (false: the read is never made) once
    /// the future that made the request is dropped ([`Wait::Dropped`]: the
    /// read is never made) or its cancel is asked ([`Wait::Cancelled`]: a
    /// dropped read kept for the next read, which waits for its result,
    /// so that a kept read of an idle pipe holds no pool thread for good).
    /// So a cancelled read of
    /// an empty pipe takes none of the bytes written after it, as a read
    /// io_uring cancels takes none, instead of blocking a pool thread in
    /// `read` until they come. A regular file, and a descriptor `poll`
    /// refuses (whose read then reports the error), costs one `poll`. A
    /// descriptor not open for reading (its read fails with `EBADF`) and a
    /// read of no bytes are read at once. A non-blocking descriptor waits
    /// like any other, as io_uring's read of it does.
    fn readable_unless_dropped(&self) -> Wait {
        if !matches!(self.op.kind(), OpKind::Read | OpKind::ReadVectored)
            || self.op.offset() != 0
            || self.op.byte_len() == 0
        {
            return Wait::Readable;
        }
        let fd = self.op.fd();
        let ready = |timeout| {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd on the stack.
            let n = unsafe { libc::poll(&mut p, 1, timeout) };
            n != 0
                && !(n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR))
        };
        if ready(0) {
            return Wait::Readable;
        }
        // SAFETY: F_GETFL only reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags == -1 || flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Wait::Readable;
        }
        loop {
            if self.done.cancel_asked() {
                return Wait::Cancelled;
            }
            if ready(100) || self.dropped() {
                // (looked at again once readable: a future dropped while
                // the thread waited takes nothing)
                return if self.dropped() {
                    Wait::Dropped
                } else {
                    Wait::Readable
                };
            }
        }
    }
}

/// An operation to cancel, named by its completion target. A weak handle:
/// it keeps the target's allocation (so its address cannot name another
/// operation) but not the target itself, so a request still queued is seen
/// as abandoned and never submitted.
pub(crate) struct Cancel(pub Weak<dyn Complete>);

impl Cancel {
    /// Whether `done` is the target this names.
    pub(crate) fn names(&self, done: &Arc<dyn Complete>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(done), self.0.as_ptr())
    }
}

/// A completion taken off a ring: its target, result and flags.
pub(crate) type Completion = (Arc<dyn Complete>, i32, u32);

/// What a caught panic carries, to resume it later.
pub(crate) type Panic = Box<dyn std::any::Any + Send + 'static>;

/// Runs `f`, which reaches user code (a waker, a buffer's `Drop`), and
/// catches a panic from it. The engine calls user code only through here,
/// with no lock of its own held and with its bookkeeping consistent, so a
/// panic can neither free memory the kernel may still write nor skip the
/// completions of other operations.
pub(crate) fn call_user(f: impl FnOnce()) -> Option<Panic> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).err()
}

/// Resumes a panic caught by [`call_user`] on the caller's thread, unless
/// that thread is unwinding already (a future dropped during a panic):
/// a second panic would abort, so the first one goes on alone.
pub(crate) fn resume(panic: Option<Panic>) {
    if let Some(p) = panic {
        if !std::thread::panicking() {
            std::panic::resume_unwind(p);
        }
    }
}

/// Delivers `done` (completes each target, then lets go of it, which may
/// drop the operation's buffer), every one of them even if some panic;
/// returns the first panic.
pub(crate) fn deliver(done: impl IntoIterator<Item = Completion>) -> Option<Panic> {
    let mut first = None;
    for (target, res, flags) in done {
        let p = call_user(move || {
            target.complete_flags(res, flags);
            drop(target);
        });
        first = first.or(p);
    }
    first
}

/// Lets go of requests that were never submitted (their futures are gone),
/// which drops their buffers; returns the first panic of a buffer's `Drop`.
pub(crate) fn release(dropped: impl IntoIterator<Item = Request>) -> Option<Panic> {
    let mut first = None;
    for req in dropped {
        first = first.or(call_user(move || drop(req)));
    }
    first
}
