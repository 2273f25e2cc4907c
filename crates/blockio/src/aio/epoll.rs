//! The kernel's epoll set behind the readiness fallback
//! ([`readiness`](super::readiness)): sockets registered edge-triggered,
//! and one eventfd that wakes the thread waiting on the set (to stop).
//! The set's own
//! descriptor is readable while events wait: a tokio runtime's reactor
//! watches it, and the events are then taken without waiting
//! ([`EpollSet::take_ready`]).
//!
//! Edge-triggered, a socket stays in the set from its first wait until
//! it closes, and the set reports each change of its state once: nothing
//! is re-armed after an event, so a wait costs no `epoll_ctl`. What the
//! socket is ready for between events is remembered by the caller
//! ([`ReadyWord`](super::ready::ReadyWord)). A socket is watched for the
//! directions it has waited in, added with the first and modified once
//! if it later waits in the other: watching a direction nothing waits in
//! would wake the watching thread for nothing (every acknowledgement of
//! sent bytes reports a socket writable). Waiting on the set makes no
//! other system call: no timer, no re-arm of the nudge descriptor, which
//! is level-triggered and read back only by the thread it wakes.
//!
//! The readiness thread's set costs two descriptors, its own and the
//! eventfd that ends its wait at the engine's stop; a runtime's set
//! ([`EpollSet::bare`]) costs its own alone, since the task that reads it
//! is woken by its waker instead, and its reactor registers the set's own
//! descriptor, shared ([`shared_fd`](EpollSet::shared_fd)), not a
//! duplicate.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustix::buffer::spare_capacity;
use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags, Timespec};

/// The key the nudge descriptor is registered under. No socket's key is
/// this: a socket's low half is its descriptor, never `u32::MAX - 1`.
const NUDGE_KEY: u64 = u64::MAX - 1;

/// Most events taken from the kernel by one wait.
const EVENTS_PER_WAIT: usize = 1024;

/// What an event reports a socket ready for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Readied {
    /// A receive or an accept may proceed (data, end of stream, error).
    pub readable: bool,
    /// A send or a connect may proceed (room, hang-up, error).
    pub writable: bool,
    /// The peer will send nothing more (end of stream, hang-up): every
    /// receive from now on returns at once, so this never clears.
    pub read_closed: bool,
    /// Nothing more can be sent (hang-up, error): every send from now on
    /// returns at once, so this never clears.
    pub write_closed: bool,
}

impl Readied {
    fn of(flags: EventFlags) -> Readied {
        let hung = EventFlags::HUP | EventFlags::ERR;
        Readied {
            readable: flags.intersects(EventFlags::IN | EventFlags::RDHUP | hung),
            writable: flags.intersects(EventFlags::OUT | hung),
            read_closed: flags.intersects(EventFlags::RDHUP | EventFlags::HUP),
            write_closed: flags.intersects(hung),
        }
    }
}

/// What one `epoll_wait` took ([`EpollSet::take`]).
#[derive(Default)]
struct Taken {
    /// The nudge descriptor was among the events.
    nudged: bool,
    /// As many events came as one wait takes.
    full: bool,
}

/// An epoll set of sockets, each under a key of the caller's.
pub(crate) struct EpollSet {
    /// Shared with the reactor that watches the set, which keeps it open
    /// while it does ([`shared_fd`](Self::shared_fd)).
    epoll: Arc<OwnedFd>,
    /// Ends the thread's wait, read back by that thread
    /// ([`nudge`](Self::nudge)); none in a set no thread waits on.
    nudge: Option<OwnedFd>,
    /// `epoll_ctl` adds and modifications made, for the tests that
    /// count them.
    #[cfg(test)]
    pub(crate) ctls: AtomicUsize,
}

/// The flags of a socket watched for reading if `readable`, writing if
/// `writable`, and its peer's end of stream, edge-triggered.
fn watched(readable: bool, writable: bool) -> EventFlags {
    let mut flags = EventFlags::RDHUP | EventFlags::ET;
    if readable {
        flags |= EventFlags::IN;
    }
    if writable {
        flags |= EventFlags::OUT;
    }
    flags
}

impl EpollSet {
    /// A new set, holding its nudge descriptor, for a thread to wait on.
    ///
    /// # Errors
    /// The kernel's error, with what it refused to make: the set or its
    /// nudge descriptor.
    pub(crate) fn new() -> Result<EpollSet, (&'static str, io::Error)> {
        let what = "readiness set (epoll)";
        let mut set = EpollSet::bare().map_err(|e| (what, e))?;
        let what = "readiness set's wake-up descriptor (eventfd)";
        let nudge = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| (what, e.into()))?;
        epoll::add(
            &set.epoll,
            &nudge,
            EventData::new_u64(NUDGE_KEY),
            EventFlags::IN,
        )
        .map_err(|e| (what, e.into()))?;
        set.nudge = Some(nudge);
        Ok(set)
    }

    /// A new set without a nudge descriptor, one descriptor in all, for a
    /// reactor to watch: [`nudge`](Self::nudge) does nothing on it.
    pub(crate) fn bare() -> io::Result<EpollSet> {
        Ok(EpollSet {
            epoll: Arc::new(epoll::create(CreateFlags::CLOEXEC)?),
            nudge: None,
            #[cfg(test)]
            ctls: AtomicUsize::new(0),
        })
    }

    /// A set whose descriptor is no epoll set (an eventfd), on which every
    /// add fails (`EINVAL`), as an add that finds the kernel out of
    /// memory or the user's watches used up does.
    #[cfg(test)]
    pub(crate) fn failing() -> io::Result<EpollSet> {
        Ok(EpollSet {
            epoll: Arc::new(eventfd(0, EventfdFlags::CLOEXEC)?),
            nudge: None,
            ctls: AtomicUsize::new(0),
        })
    }

    /// Adds `socket` under `key`, watched for reading if `readable` and
    /// writing if `writable`, edge-triggered: the next wait reports it at
    /// once if it is ready now, and from then on each change of its state.
    pub(crate) fn add(
        &self,
        socket: BorrowedFd<'_>,
        key: u64,
        readable: bool,
        writable: bool,
    ) -> io::Result<()> {
        self.ctl(
            |e, s, d, f| epoll::add(e, s, d, f),
            socket,
            key,
            readable,
            writable,
        )
    }

    /// Watches `socket`, in the set under `key`, for what is asked now,
    /// as [`add`](Self::add) does (reported at once if ready).
    pub(crate) fn modify(
        &self,
        socket: BorrowedFd<'_>,
        key: u64,
        readable: bool,
        writable: bool,
    ) -> io::Result<()> {
        self.ctl(
            |e, s, d, f| epoll::modify(e, s, d, f),
            socket,
            key,
            readable,
            writable,
        )
    }

    /// [`add`](Self::add) or [`modify`](Self::modify), as `op` is: one
    /// `epoll_ctl` (counted in the tests).
    fn ctl(
        &self,
        op: fn(&OwnedFd, BorrowedFd<'_>, EventData, EventFlags) -> rustix::io::Result<()>,
        socket: BorrowedFd<'_>,
        key: u64,
        readable: bool,
        writable: bool,
    ) -> io::Result<()> {
        #[cfg(test)]
        self.ctls.fetch_add(1, Ordering::Relaxed);
        op(
            &self.epoll,
            socket,
            EventData::new_u64(key),
            watched(readable, writable),
        )?;
        Ok(())
    }

    /// Takes `socket` out of the set.
    pub(crate) fn delete(&self, socket: BorrowedFd<'_>) -> io::Result<()> {
        epoll::delete(&self.epoll, socket)?;
        Ok(())
    }

    /// Waits for events and calls `each` with the key and readiness of
    /// every socket reported. An interrupted wait returns with no event.
    /// A nudge ends the wait (and is read back here).
    pub(crate) fn wait(
        &self,
        events: &mut Vec<Event>,
        each: impl FnMut(u64, Readied),
    ) -> io::Result<()> {
        let taken = self.take(events, None, each)?;
        if taken.nudged {
            self.drain_nudge();
        }
        Ok(())
    }

    /// Reads the nudge back, so that the set no longer looks readable for
    /// it.
    fn drain_nudge(&self) {
        let mut count = [0u8; 8];
        if let Some(nudge) = &self.nudge {
            // A read that finds it read already (EAGAIN) is as good.
            let _ = rustix::io::read(nudge, &mut count);
        }
    }

    /// Ends the thread's current wait (or its next), once: it then sees
    /// the caller's stop flag. Nothing on a set without a nudge
    /// descriptor ([`bare`](Self::bare)).
    pub(crate) fn nudge(&self) -> io::Result<()> {
        if let Some(nudge) = &self.nudge {
            rustix::io::write(nudge, &1u64.to_ne_bytes())?;
        }
        Ok(())
    }

    /// Takes the events waiting now, without waiting, and calls `each`
    /// with the key and readiness of every socket reported; returns
    /// whether as many came as one take holds (more may wait).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn take_ready(
        &self,
        events: &mut Vec<Event>,
        each: impl FnMut(u64, Readied),
    ) -> io::Result<bool> {
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        Ok(self.take(events, Some(&now), each)?.full)
    }

    /// One `epoll_wait` with `timeout` (`None`: until an event), its
    /// events handed to `each`.
    fn take(
        &self,
        events: &mut Vec<Event>,
        timeout: Option<&Timespec>,
        mut each: impl FnMut(u64, Readied),
    ) -> io::Result<Taken> {
        events.clear();
        events.reserve(EVENTS_PER_WAIT);
        let mut taken = Taken::default();
        match epoll::wait(&self.epoll, spare_capacity(events), timeout) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(taken),
            Err(e) => return Err(e.into()),
        }
        taken.full = events.len() == events.capacity();
        for ev in events.iter() {
            let key = ev.data.u64();
            if key == NUDGE_KEY {
                taken.nudged = true;
            } else {
                each(key, Readied::of(ev.flags));
            }
        }
        Ok(taken)
    }

    /// The set's descriptor, shared: open while any holder of it is,
    /// whatever becomes of the set, so that a reactor's registration
    /// holding it deregisters the set and never another file.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn shared_fd(&self) -> Arc<OwnedFd> {
        self.epoll.clone()
    }
}

impl AsFd for EpollSet {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hang_up_and_error_ready_both_directions() {
        let hup = Readied::of(EventFlags::HUP);
        assert!(hup.readable && hup.writable);
        let err = Readied::of(EventFlags::ERR);
        assert!(err.readable && err.writable);
        let rd = Readied::of(EventFlags::IN);
        assert!(rd.readable && !rd.writable);
        let wr = Readied::of(EventFlags::OUT);
        assert!(!wr.readable && wr.writable);
        assert!(hup.read_closed && hup.write_closed);
        assert!(err.write_closed && !err.read_closed);
        assert!(!rd.read_closed && !rd.write_closed && !wr.write_closed);
        let closed = Readied::of(EventFlags::IN | EventFlags::RDHUP);
        assert!(closed.readable && !closed.writable);
        assert!(closed.read_closed && !closed.write_closed);
    }
}
