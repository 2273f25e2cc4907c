//! A tokio runtime's own epoll set of the readiness fallback, read on
//! that runtime as tokio reads its own sockets' readiness.
//!
//! The set's descriptor is itself pollable: it is readable while events
//! wait in it. Registered in the runtime's reactor, it is in the
//! `epoll_wait` the runtime's thread parks in, so the readiness of one of
//! the runtime's sockets wakes that thread directly, and that runtime
//! alone; a task of the runtime's ([`drive`]) then takes the set's events
//! without waiting and completes their requests there, waking their
//! tasks on the thread that runs them: no second thread and no eventfd
//! write between readiness and the task. A busy runtime polls its reactor
//! between tasks and queues this task then, as it queues its own sockets'
//! tasks.
//!
//! The first request that waits from a task of a runtime with I/O (or
//! from any future on a multi-thread runtime, whose workers run its
//! reactor) makes the runtime's set and spawns its task
//! ([`place_on_runtime`]); a runtime with I/O disabled, or shutting down,
//! has none, and its requests wait in the readiness thread's set. So does
//! a future polled directly by a current-thread runtime's `block_on`:
//! tokio does not tell it apart from a future polled by another executor
//! where the runtime is only entered (`Handle::enter`), whose reactor
//! nobody runs, and a set read by a reactor nobody runs would strand its
//! sockets. Nor does tokio tell which runtime runs the current task: the
//! runtime it names is the one entered last, which a task of runtime A
//! may have done with current-thread runtime B's handle, B never run. So
//! a wait from a task takes a current-thread runtime's set only on the
//! thread its set's task last ran on, the thread that runs that runtime;
//! elsewhere, and before that task first ran, it waits in the readiness
//! thread's set. (A task of another runtime on that same thread, between
//! two `block_on`s of B and with B entered, would still be taken for
//! B's; tokio gives no sign to tell it.)
//!
//! The set costs its runtime one descriptor (the set's own, no eventfd:
//! the task is woken by its waker when the engine goes) for each engine
//! whose sockets wait there: R runtimes waiting on sockets of E engines
//! hold R × E; tokio's own reactor costs two per runtime (its epoll set
//! and its waker's eventfd).
//!
//! The task ends when the set stops (the engine is gone: the readiness
//! thread wakes it on its way out), or when its runtime drops it (shut
//! down): its [`Left`] then hands the sockets left in the set to the
//! readiness thread's set (see [`Watcher::leave`]).

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Weak};
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::runtime::{Handle, RuntimeFlavor};

use super::readiness::{Place, Watcher};
use super::tokio_drive::{closing, note_closing, refuses, register};

/// The set's descriptor as the reactor holds it: shared with the set
/// (no duplicate), open until the registration is dropped, whatever
/// becomes of the set meanwhile (see
/// [`EpollSet::shared_fd`](super::epoll::EpollSet::shared_fd)).
struct SetFd(Arc<OwnedFd>);

impl AsRawFd for SetFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The set of the runtime the caller runs on, made (with its task
/// spawned there) if that runtime has none yet; `None` where the caller's
/// waits go to the readiness thread's set instead (see the
/// [module](self)).
pub(super) fn place_on_runtime(watcher: &Arc<Watcher>) -> Option<Arc<Place>> {
    let runtime = Handle::try_current().ok()?;
    let one_thread = runtime.runtime_flavor() == RuntimeFlavor::CurrentThread;
    if one_thread && (tokio::task::try_id().is_none() || !watcher.current_thread_sets()) {
        return None;
    }
    let id = runtime.id();
    if let Some(place) = watcher.runtime_place(id) {
        // A task on a thread that does not run the current-thread runtime
        // is another runtime's, with this one only entered.
        return (!one_thread || place.driven_here()).then_some(place);
    }
    if cfg!(panic = "abort") || refuses(&runtime) || closing(&runtime) {
        return None;
    }
    let place = Arc::new(Place::for_runtime().ok()?);
    let watched = register(SetFd(place.set.shared_fd())).ok()?;
    if let Some(made) = watcher.install(id, &place) {
        // Made meanwhile on another of the runtime's threads.
        return Some(made);
    }
    let left = Left {
        watcher: Arc::downgrade(watcher),
        runtime: id,
        place: place.clone(),
    };
    let spawned = runtime.spawn(drive(left, watched));
    if spawned.is_finished() {
        // Dropped at once: the runtime shuts down, and the set is gone.
        note_closing(&runtime);
        return None;
    }
    // Which thread runs a current-thread runtime is known once the set's
    // task has run: until then its waits go to the thread's set.
    (!one_thread).then_some(place)
}

/// The task's hold on its runtime's set: dropped with the task, it hands
/// the set's sockets to the readiness thread's set.
struct Left {
    watcher: Weak<Watcher>,
    runtime: tokio::runtime::Id,
    place: Arc<Place>,
}

impl Drop for Left {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.upgrade() {
            watcher.leave(self.runtime, &self.place);
        }
    }
}

/// Takes the set's events on its runtime each time the reactor finds the
/// set readable, until the set stops or the task is dropped (see the
/// [module](self)).
async fn drive(left: Left, watched: AsyncFd<SetFd>) {
    // The last take was full: the next is made without asking the
    // reactor, whose readiness was cleared before it.
    let mut more = false;
    let _: io::Result<()> = poll_fn(|cx| {
        left.place.polled(cx.waker());
        loop {
            let Some(watcher) = left.watcher.upgrade() else {
                return Poll::Ready(Ok(()));
            };
            if watcher.stopped() {
                return Poll::Ready(Ok(()));
            }
            if !more {
                match watched.poll_read_ready(cx) {
                    // Cleared before the take: an event after it makes the
                    // set readable again, and the reactor reports it.
                    Poll::Ready(Ok(mut ready)) => ready.clear_ready(),
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            more = watcher.turn(&left.place);
            if more {
                // More wait: taken at the next poll, after the tasks woken.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    })
    .await;
}
