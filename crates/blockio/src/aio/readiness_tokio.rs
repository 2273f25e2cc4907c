//! The readiness fallback's epoll set read on the tokio runtime that runs
//! the sockets' tasks, as tokio reads its own sockets' readiness.
//!
//! The set's descriptor is itself pollable: it is readable while events
//! wait in it. Registered in the runtime's reactor, it is in the
//! `epoll_wait` the runtime's thread parks in, so a socket's readiness
//! wakes that thread directly; a task of the runtime's ([`drive`]) then
//! takes the set's events without waiting and completes their requests
//! there, waking their tasks on the thread that runs them: no second
//! thread and no eventfd write between readiness and the task. A busy
//! runtime polls its reactor between tasks and queues this task then, as
//! it queues its own sockets' tasks.
//!
//! The task holds the set's [`Lease`] while it runs, one task per
//! runtime, as many runtimes at once as have tasks waiting in the set
//! (see [`lease`](super::lease), which says why and what it costs); the
//! readiness thread stands aside meanwhile and takes over if no task
//! takes the events. The first request that waits in the set in the
//! context of a tokio runtime with I/O (a task, or its `block_on`'s
//! future), while no task of that runtime holds the lease,
//! spawns the task there ([`offer`]); a runtime with I/O disabled, or
//! shutting down, leaves the events to the others and the thread. The
//! future of a current-thread runtime's `block_on` claims too (the shape
//! of every `#[tokio::test]`): that runtime runs the task whenever the
//! future waits. Tokio does not tell it apart from a future polled by
//! another executor where the runtime is only entered (`Handle::enter`),
//! whose task is never run: there the rule below bounds the cost to one
//! revocation per runtime.
//!
//! Until the task is first polled, its runtime does not claim the set
//! again (see [`lease`](super::lease)): a runtime that does not run the
//! task it was given (a current-thread runtime whose task blocks its
//! thread, waiting for a request of the set) loses the lease once, and
//! the thread (or another runtime's task) takes the events from then on,
//! with one drive task and one registration of the set's descriptor at
//! most waiting there.
//!
//! The task ends when its lease is revoked, when the set stops (the
//! engine is gone; the thread's last nudge leaves the set readable for
//! as long as the nudge eventfd is open, which the task's registration
//! keeps it: closed, it would leave the set, and the task, its
//! registration and the set's descriptor would wait for ever), or
//! when its runtime drops it (shut down): its [`Held`] then releases the
//! lease and, if it was the last holder, wakes the thread, which takes
//! the events from then on.

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Weak;
use std::task::Poll;

use tokio::io::unix::AsyncFd;

use super::epoll::SharedSet;
use super::lease::Lease;
use super::tokio_drive::{closing, note_closing, refuses, register};

/// A set whose events a runtime's task may take.
pub(crate) trait Driven: Send + Sync {
    /// The set's lease.
    fn lease(&self) -> &Lease;
    /// Whether the set has stopped (its engine is gone).
    fn stopped(&self) -> bool;
    /// Takes the events waiting in the set, without waiting, and serves
    /// them; returns whether more may wait (a full take).
    fn turn(&self) -> bool;
    /// Ends the readiness thread's wait on the set, if it waits: it then
    /// stands aside for the lease's holder.
    fn nudge_thread(&self);
}

/// The set's descriptor as the reactor holds it: shared with the set
/// (no duplicate, which would cost a descriptor per runtime), open until
/// the registration is dropped, whatever becomes of the set meanwhile,
/// and with it the nudge eventfd, so that a stopped set stays readable
/// until the task watching it has seen the stop (see
/// [`EpollSet::shared_fd`](super::epoll::EpollSet::shared_fd)).
struct SetFd(SharedSet);

impl AsRawFd for SetFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.epoll.as_raw_fd()
    }
}

/// The lease of a driving task, released when the task is dropped.
struct Held {
    set: Weak<dyn Driven>,
    token: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(set) = self.set.upgrade() {
            set.lease().polled(self.token);
            if set.lease().release(self.token) {
                // The thread may be blocked on the set, standing aside.
                set.nudge_thread();
            }
        }
    }
}

/// Has the tokio runtime the caller runs on take the events of the set
/// whose lease is `lease`, if no task of that runtime takes them yet and
/// that runtime can (see the [module](self)); `set` gives the set and its
/// shared descriptor, asked only then.
pub(crate) fn offer(lease: &Lease, set: impl FnOnce() -> (Weak<dyn Driven>, SharedSet)) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let key = runtime_key(&runtime);
    if !lease.claimable(key) {
        return;
    }
    if cfg!(panic = "abort") || refuses(&runtime) || closing(&runtime) {
        return;
    }
    let Some(token) = lease.try_claim(key) else {
        return;
    };
    let (set, fd) = set();
    let held = Held { set, token };
    let Ok(watched) = register(SetFd(fd)) else {
        return;
    };
    let nudged = held.set.upgrade();
    let spawned = runtime.spawn(drive(held, watched));
    if spawned.is_finished() {
        note_closing(&runtime);
    } else if let Some(set) = nudged {
        set.nudge_thread();
    }
}

/// The key of `runtime` in the set's [`Lease`]: its id, hashed. Two
/// runtimes whose ids hash alike (a chance in 2^64) share one holder,
/// and the one that does not hold it has its events taken by the other
/// or, if that one does not take them, by the thread.
fn runtime_key(runtime: &tokio::runtime::Handle) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    runtime.id().hash(&mut h);
    h.finish()
}

/// Takes the set's events on its runtime each time the reactor finds the
/// set readable, until the lease is lost, the set stops, or the task is
/// dropped (see the [module](self)).
async fn drive(held: Held, watched: AsyncFd<SetFd>) {
    // The last take was full: the next is made without asking the
    // reactor, whose readiness was cleared before it.
    let mut more = false;
    let _: io::Result<()> = poll_fn(|cx| loop {
        let Some(set) = held.set.upgrade() else {
            return Poll::Ready(Ok(()));
        };
        if !set.lease().polled_holds(held.token) || set.stopped() {
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
        more = set.turn();
        if more {
            // More wait: taken at the next poll, after the tasks woken.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
    })
    .await;
}
