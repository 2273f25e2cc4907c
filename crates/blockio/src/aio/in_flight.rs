//! The bookkeeping both io_uring drivers share: which operation each
//! slot of the ring holds, which requests wait for room, and what must
//! run once a lock is let go.
//!
//! A slot's number is the `user_data` of its submission, so a completion
//! names its target without a search; the slot keeps the target (and with
//! it the operation's memory) until the kernel's last completion for it.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use io_uring::{opcode, squeue::SubmissionQueue, IoUring};

use super::request::{deliver, release, Cancel, Complete, Completion, Panic, Request};
use crate::ring::build_entry;

/// Something a ring must keep until it is gone (registered memory).
pub(crate) type Kept = Arc<dyn Send + Sync>;

/// Work done where the ring may be registered with before its next
/// submission (on a driver thread, that thread: `SINGLE_ISSUER` allows
/// registrations only there). It returns what the ring must keep.
pub(crate) type Setup = Box<dyn FnOnce(&IoUring) -> io::Result<Kept> + Send>;

/// The `user_data` of `IORING_OP_ASYNC_CANCEL` entries, whose own
/// completions need nothing done.
pub(crate) const CANCEL: u64 = u64::MAX - 1;

/// The ring size for `slots` entries: the next power of two, at least 2.
pub(crate) fn ring_entries(slots: usize) -> u32 {
    slots.clamp(2, 32768).next_power_of_two() as u32
}

/// The operations a ring has in flight, and those waiting for room.
#[derive(Default)]
pub(crate) struct InFlight {
    /// The completion target of each operation in flight, by slot (its
    /// `user_data`).
    slots: Vec<Option<Arc<dyn Complete>>>,
    free: Vec<usize>,
    /// Requests waiting for room in the ring.
    pub backlog: VecDeque<Request>,
    /// Operations in flight.
    pub count: usize,
    /// Which slots hold socket operations, and how many do: those wait
    /// for peers, maybe forever, so they do not count against the limit
    /// (see `may_fill`).
    socket_slot: Vec<bool>,
    sockets: usize,
}

impl InFlight {
    /// Whether the first backlog request may go in now: a socket
    /// operation always, another while fewer than `limit` of them are in
    /// flight.
    ///
    /// The limit bounds operations that complete on their own (file I/O),
    /// so that a burst of them cannot overflow the completion queue. A
    /// socket operation may wait for its peer forever; counted, idle
    /// connections would take every slot and the work behind them would
    /// wait for their peers. Socket completions past the completion
    /// queue's size are kept by the kernel (`IORING_FEAT_NODROP`, Linux
    /// 5.5) and flushed by the next enter that asks for completions, which
    /// both drivers make while the overflow is flagged.
    pub(crate) fn may_fill(&self, limit: usize) -> bool {
        self.backlog
            .front()
            .is_some_and(|r| r.op.kind().is_socket() || self.count - self.sockets < limit)
    }

    /// Pushes backlog requests onto `sq` while [`may_fill`](Self::may_fill)
    /// lets them and the queue has room. Abandoned requests go to
    /// `dropped`, for the caller to let go of with no lock held (dropping
    /// one drops its buffer: user code).
    pub(crate) fn fill(
        &mut self,
        sq: &mut SubmissionQueue<'_>,
        limit: usize,
        dropped: &mut Vec<Request>,
    ) {
        while self.may_fill(limit) {
            let Some(req) = self.backlog.pop_front() else {
                break;
            };
            if req.abandoned() {
                dropped.push(req);
                continue;
            }
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            let e = build_entry(&req.op, slot as u64, None, None);
            // SAFETY: the request's memory is owned by its shared state
            // (`req.done`), which `slots` keeps alive until this slot's
            // completion has been reaped; neither driver drops its ring
            // before that (the driver thread returns, and a caller-driven
            // ring's finishing lets go, only with nothing in flight).
            if unsafe { sq.push(&e) }.is_err() {
                self.free.push(slot);
                self.backlog.push_front(req);
                break;
            }
            let socket = req.op.kind().is_socket();
            self.slots[slot] = Some(req.done);
            if self.socket_slot.len() <= slot {
                self.socket_slot.resize(slot + 1, false);
            }
            self.socket_slot[slot] = socket;
            self.sockets += usize::from(socket);
            self.count += 1;
        }
    }

    /// Pushes an `ASYNC_CANCEL` for each of `cancels` in flight, and puts
    /// in `out` as completed with `-ECANCELED` those still waiting for room
    /// (for the caller to deliver with no lock held); keeps in `cancels`
    /// those that found no room in the queue, to try again.
    pub(crate) fn push_cancels(
        &mut self,
        sq: &mut SubmissionQueue<'_>,
        cancels: &mut Vec<Cancel>,
        out: &mut Vec<Completion>,
    ) {
        let mut left = Vec::new();
        for c in cancels.drain(..) {
            let in_flight = self
                .slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|d| c.names(d)));
            let Some(slot) = in_flight else {
                if let Some(i) = self.backlog.iter().position(|r| c.names(&r.done)) {
                    if let Some(req) = self.backlog.remove(i) {
                        out.push((req.done, -libc::ECANCELED, 0));
                    }
                }
                // Otherwise completed already.
                continue;
            };
            let e = opcode::AsyncCancel::new(slot as u64)
                .build()
                .user_data(CANCEL);
            // SAFETY: a cancel entry points at no memory.
            if unsafe { sq.push(&e) }.is_err() {
                left.push(c);
            }
        }
        *cancels = left;
    }

    /// The targets of every operation in flight or waiting for room.
    #[cfg(feature = "tokio")]
    pub(crate) fn targets(&self) -> Vec<Arc<dyn Complete>> {
        let in_flight = self.slots.iter().flatten();
        in_flight
            .chain(self.backlog.iter().map(|r| &r.done))
            .cloned()
            .collect()
    }

    /// The target of the operation whose completion carries `user_data`,
    /// its slot freed unless `flags` say more completions follow (a
    /// multishot operation still armed); None for another entry (a cancel,
    /// the driver thread's wake read).
    pub(crate) fn finish(&mut self, user_data: u64, flags: u32) -> Option<Arc<dyn Complete>> {
        let slot = usize::try_from(user_data).ok()?;
        if io_uring::cqueue::more(flags) {
            return self.slots.get(slot)?.clone();
        }
        let done = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        self.count -= 1;
        if std::mem::take(&mut self.socket_slot[slot]) {
            self.sockets -= 1;
        }
        Some(done)
    }
}

/// What a fill or a reap leaves for the caller to do once the lock is let
/// go: user code (wakers, buffers' `Drop`s) never runs under a lock of the
/// engine.
#[derive(Default)]
pub(crate) struct Outcalls {
    /// Requests whose futures were gone before submission.
    pub dropped: Vec<Request>,
    /// Completions to deliver.
    pub done: Vec<Completion>,
}

impl Outcalls {
    /// Delivers the completions and lets go of the dropped requests, all of
    /// them even if some panic; returns the first panic.
    pub(crate) fn run(&mut self) -> Option<Panic> {
        let a = deliver(self.done.drain(..));
        let b = release(self.dropped.drain(..));
        a.or(b)
    }

    /// Whether there is nothing to run.
    pub(crate) fn is_empty(&self) -> bool {
        self.done.is_empty() && self.dropped.is_empty()
    }
}

/// Aborts the process if dropped while its thread unwinds: a panic of the
/// engine's own code (user code is caught by `call_user`) while the
/// kernel may still write into memory the unwinding would free. The
/// kernel's writes cannot be stopped from here, so aborting is the only
/// sound way out, as for a failed `io_uring_enter`.
pub(crate) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("blockio: the engine panicked with operations in flight; aborting");
            std::process::abort();
        }
    }
}
