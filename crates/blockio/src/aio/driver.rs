//! The completion driver behind the async API.
//!
//! # How completions are reaped, and why
//!
//! One thread per [`AsyncEngine`](super::AsyncEngine) owns one ring. Futures
//! never touch the ring: on their first poll they push a request onto a
//! queue and, only if the driver is asleep, write to an eventfd to wake it.
//! The driver takes **everything** queued, pushes it onto the ring and makes
//! one `io_uring_enter` that submits it all and sleeps until at least one
//! completion — a completion of an operation, or of the read it keeps armed
//! on the eventfd. For each completion it stores the result in the
//! operation's shared state and calls the task's waker directly: the
//! executor is told at once, with no thread-pool hop.
//!
//! Why this shape:
//! * any executor works: the futures only need a `Waker`; nothing depends on
//!   the runtime having an I/O reactor, so the futures are `Send` and run on
//!   tokio's multi-thread runtime, smol or `block_on` alike;
//! * operations issued by many tasks while the driver was busy or asleep go
//!   to the kernel in one call (the queue is drained whole), and the
//!   eventfd is written once per sleep, not once per operation;
//! * one thread strictly owns the ring, so `SINGLE_ISSUER` and
//!   `DEFER_TASKRUN` are sound here (both require that only the ring's
//!   creating thread submits and reaps), and the thread
//!   that submitted an operation outlives it: the driver exits only after
//!   its last operation completed;
//! * the state of an operation (its buffer included) is shared between the
//!   future and the driver; a dropped future leaves it with the driver,
//!   which frees it when the completion arrives (the kernel may write into
//!   the buffer until then, so it cannot be freed with the future). Nothing
//!   blocks in `Drop`.
//!
//! Where io_uring is unavailable the same requests are served by a pool of
//! threads doing `pread`/`pwrite`, completing the same shared states.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};

use io_uring::{opcode, squeue::SubmissionQueue, types, IoUring};

use super::readiness::Readiness;
use crate::pool::WorkerPool;
use crate::ring::{submit_and_wait_or_abort, RingFlags};

use crate::op::Op;
use crate::uring::build_entry;

/// Receives an operation's result (bytes, or `-errno`).
pub(crate) trait Complete: Send + Sync {
    /// Called once, on the driver (or a pool) thread.
    fn complete(&self, res: i32);

    /// Called for each completion of an io_uring operation, with the
    /// completion's flags: many times for a multishot operation (all but
    /// the last with `IORING_CQE_F_MORE`), once for the others. Unless
    /// overridden, passes the result on to [`complete`](Self::complete).
    fn complete_flags(&self, res: i32, _flags: u32) {
        self.complete(res);
    }
}

/// Something a ring must keep until it is gone (registered memory).
pub(crate) type Kept = Arc<dyn Send + Sync>;

/// Work done on the ring's own thread before its next submission: what
/// `SINGLE_ISSUER` allows only there (registrations). It returns what
/// the ring must keep.
pub(crate) type Setup = Box<dyn FnOnce(&IoUring) -> io::Result<Kept> + Send>;

/// An operation to perform, and where its result goes.
pub(crate) struct Request {
    pub op: Op<'static>,
    pub done: Arc<dyn Complete>,
}

impl Request {
    /// Whether the future that made this request is gone (dropped, or its
    /// batch cancelled) before the request reached the kernel: nobody will
    /// read its result, so it is never submitted. Dropping the request
    /// frees its buffer and its hold on the file at once.
    ///
    /// The future and the request share `done`; a future dropped while
    /// this runs leaves two counted, and the request is submitted as
    /// usual (its memory stays owned by `done` until the completion).
    pub(crate) fn abandoned(&self) -> bool {
        Arc::strong_count(&self.done) == 1
    }

    /// Performs the request with blocking system calls (a pool worker's
    /// job), unless it was abandoned.
    fn run_blocking(self) {
        if !self.abandoned() {
            self.done.complete(self.op.run_blocking_raw());
        }
    }
}

const WAKE: u64 = u64::MAX;
/// The `user_data` of `IORING_OP_ASYNC_CANCEL` entries, whose own
/// completions need nothing done.
const CANCEL: u64 = u64::MAX - 1;

/// An operation to cancel, named by its completion target. A weak handle:
/// it keeps the target's allocation (so its address cannot name another
/// operation) but not the target itself, so a request still queued is seen
/// as abandoned and never submitted.
pub(crate) struct Cancel(pub std::sync::Weak<dyn Complete>);

impl Cancel {
    /// Whether `done` is the target this names.
    pub(crate) fn names(&self, done: &Arc<dyn Complete>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(done), self.0.as_ptr())
    }
}

/// What waits for the driver thread: one lock for both, so the driver
/// takes everything, and checks for more before sleeping, with one lock.
#[derive(Default)]
struct Queued {
    requests: Vec<Request>,
    /// Operations whose futures were dropped while in flight, to cancel in
    /// the kernel (socket operations, which may otherwise wait forever).
    cancels: Vec<Cancel>,
    /// Registrations to make on the driver thread.
    setups: Vec<Setup>,
}

impl Queued {
    fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.cancels.is_empty() && self.setups.is_empty()
    }
}

/// What the submitting side shares with the io_uring driver thread.
pub(crate) struct DriverShared {
    queue: Mutex<Queued>,
    /// The driver is (about to be) asleep in `io_uring_enter`.
    sleeping: AtomicBool,
    stop: AtomicBool,
    wake_fd: OwnedFd,
}

impl DriverShared {
    /// Adds work to the queue with `add`, and wakes the driver if it sleeps.
    fn enqueue(&self, add: impl FnOnce(&mut Queued)) {
        add(&mut self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.wake_fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// The driver: an io_uring thread, a ring the caller drives, or a pool of
/// threads.
pub(crate) enum Driver {
    Uring(Arc<DriverShared>),
    /// `None` only once the driver is being dropped.
    Inline(Option<Box<InlineRing>>),
    Threads {
        /// Performs file operations with blocking calls.
        pool: WorkerPool<Request>,
        /// Performs socket operations when their sockets are ready.
        sockets: Readiness,
    },
}

/// The operations a ring has in flight, and those waiting for room: the
/// bookkeeping both io_uring drivers share.
#[derive(Default)]
struct InFlight {
    /// The completion target of each operation in flight, by slot (its
    /// `user_data`).
    slots: Vec<Option<Arc<dyn Complete>>>,
    free: Vec<usize>,
    /// Requests waiting for room in the ring.
    backlog: VecDeque<Request>,
    count: usize,
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
    fn may_fill(&self, limit: usize) -> bool {
        self.backlog
            .front()
            .is_some_and(|r| r.op.kind().is_socket() || self.count - self.sockets < limit)
    }

    /// Pushes backlog requests onto `sq` while [`may_fill`](Self::may_fill)
    /// lets them and the queue has room; returns whether it pushed any.
    fn fill(&mut self, sq: &mut SubmissionQueue<'_>, limit: usize) -> bool {
        let mut pushed = false;
        while self.may_fill(limit) {
            let Some(req) = self.backlog.pop_front() else {
                break;
            };
            if req.abandoned() {
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
            // before that (`drive` returns, and `Finish` lets go, only with
            // nothing in flight).
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
            pushed = true;
        }
        pushed
    }

    /// Pushes an `ASYNC_CANCEL` for each of `cancels` in flight, and
    /// completes with `-ECANCELED` those still waiting for room; returns
    /// those that found no room in the queue (to try again).
    fn push_cancels(&mut self, sq: &mut SubmissionQueue<'_>, cancels: Vec<Cancel>) -> Vec<Cancel> {
        let mut left = Vec::new();
        for c in cancels {
            let in_flight = self
                .slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|d| c.names(d)));
            let Some(slot) = in_flight else {
                if let Some(i) = self.backlog.iter().position(|r| c.names(&r.done)) {
                    let req = self.backlog.remove(i).expect("found above");
                    req.done.complete(-libc::ECANCELED);
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
        left
    }

    /// The target of the operation whose completion carries `user_data`,
    /// its slot freed unless `flags` say more completions follow (a
    /// multishot operation still armed); None for another entry (the wake
    /// read).
    fn finish(&mut self, user_data: u64, flags: u32) -> Option<Arc<dyn Complete>> {
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

/// A ring with no thread of its own (see
/// [`AsyncEngineBuilder::driven_by_caller`](super::AsyncEngineBuilder::driven_by_caller)):
/// the thread that starts an operation submits it, and [`Driver::turn`]
/// completes what the kernel finished.
///
/// No lock is held across a kernel call. The ring's queues are shared
/// memory: `state`'s lock is held to push entries and to take
/// completions, and `io_uring_enter` is made after letting it go, so a
/// thread starting an operation never waits for another thread's kernel
/// call. That is sound because the kernel serialises concurrent enters on
/// the ring itself, and each enter submits every entry published by then
/// (the submission queue's length, read atomically): an entry pushed by
/// one thread is submitted by its own enter or by an earlier one of
/// another thread, never lost. Registrations (the receive-buffer ring,
/// once per engine) are made without the lock too.
pub(crate) struct InlineRing {
    /// The ring; its queues are touched only with `state` locked, so at
    /// most one queue handle exists.
    ring: IoUring,
    /// Most operations in flight.
    depth: usize,
    /// Submit only in `turn`, not when an operation starts.
    deferred: bool,
    /// Dropped after `ring` (field order): it keeps registered memory.
    state: Mutex<InlineState>,
}

/// What a caller-driven ring's lock guards.
struct InlineState {
    /// Registered memory, kept until the ring is gone.
    kept: Vec<Kept>,
    ops: InFlight,
    /// The driving task, woken when an operation starts (deferred mode).
    driver: Option<std::task::Waker>,
}

impl InlineRing {
    fn new(depth: usize, eventfd: Option<RawFd>, deferred: bool) -> io::Result<InlineRing> {
        // COOP_TASKRUN: a socket completion's task work is queued to the
        // thread that submitted the operation without interrupting it
        // while it runs; it runs at that thread's next kernel entry (its
        // next `io_uring_enter`, or the event loop's `epoll_wait`, which
        // it ends early) and posts the completion, which makes the ring's
        // descriptor readable (and signals the eventfd, if any). A thread
        // asleep in an interruptible wait is still woken to run it. No
        // DEFER_TASKRUN: it requires every kernel call on the ring from
        // one thread, and a caller-driven ring is submitted to from
        // whichever thread starts or cancels an operation. Tried on a ring
        // driven from one thread, it saved no CPU per request (see
        // docs/benchmarks.md).
        let mut flags = RingFlags {
            coop_taskrun: true,
            ..RingFlags::default()
        };
        let ring = flags.build(ring_entries(depth), &mut Vec::new())?;
        if let Some(fd) = eventfd {
            ring.submitter().register_eventfd(fd)?;
        }
        Ok(InlineRing {
            ring,
            depth,
            deferred,
            state: Mutex::new(InlineState {
                kept: Vec::new(),
                ops: InFlight::default(),
                driver: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, InlineState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves queued requests onto the ring while it has room; returns
    /// whether entries wait to be submitted. `st` is this ring's state,
    /// locked.
    fn fill(&self, st: &mut InlineState) -> bool {
        // SAFETY: every queue handle of this ring is made while its state
        // is locked (which `st` proves) and dropped before the lock is, so
        // no other submission queue exists.
        let mut sq = unsafe { self.ring.submission_shared() };
        st.ops.fill(&mut sq, self.depth) | !sq.is_empty()
    }

    /// Submits everything the submission queue holds, without waiting.
    /// Called with the state unlocked.
    fn submit(&self) {
        submit_and_wait_or_abort(&self.ring, 0);
    }

    /// Moves the queued requests onto the ring under `st`, then lets the
    /// lock go and submits them.
    fn fill_and_submit(&self, mut st: MutexGuard<'_, InlineState>) {
        let waiting = !st.ops.backlog.is_empty() && self.fill(&mut st);
        drop(st);
        if waiting {
            self.submit();
        }
    }

    /// Cancels `cancels` in the kernel, now.
    fn cancel(&self, cancels: Vec<Cancel>) {
        let push = |cancels| {
            let mut st = self.lock();
            // SAFETY: as in `fill`: the state is locked.
            let mut sq = unsafe { self.ring.submission_shared() };
            st.ops.push_cancels(&mut sq, cancels)
        };
        let left = push(cancels);
        self.submit();
        if !left.is_empty() {
            // The queue was full: it has been submitted, so there is room.
            let _ = push(left);
            self.submit();
        }
    }

    /// Takes the finished operations' targets and results off the ring;
    /// returns whether the kernel holds more that overflowed the
    /// completion queue (multishot operations can post more than the
    /// queue holds between two turns). The kernel moves those into the
    /// queue only on an enter that asks for completions, which `submit`
    /// makes while the overflow is flagged; until then the ring stays
    /// readable, so a loop would otherwise be woken for them forever.
    /// `st` is this ring's state, locked.
    fn take_completions(&self, st: &mut InlineState, out: &mut Vec<Completion>) -> bool {
        // SAFETY: as in `fill`: no other completion queue exists while
        // the state is locked.
        for cqe in unsafe { self.ring.completion_shared() } {
            if let Some(done) = st.ops.finish(cqe.user_data(), cqe.flags()) {
                out.push((done, cqe.result(), cqe.flags()));
            }
        }
        // SAFETY: as in `fill`.
        unsafe { self.ring.submission_shared() }.cq_overflow()
    }
}

/// A caller-driven ring whose engine is gone: dropping it cancels the
/// requests still queued and waits until the kernel has completed every
/// operation in flight, whose buffers the slots own.
struct Finish(Box<InlineRing>);

impl Drop for Finish {
    fn drop(&mut self) {
        let r = &*self.0;
        let mut st = r.lock();
        for req in st.ops.backlog.drain(..) {
            req.done.complete(-libc::ECANCELED);
        }
        let mut done = Vec::new();
        while st.ops.count > 0 {
            submit_and_wait_or_abort(&r.ring, 1);
            r.take_completions(&mut st, &mut done);
            for (target, res, flags) in done.drain(..) {
                target.complete_flags(res, flags);
            }
        }
    }
}

impl Driver {
    /// Starts an io_uring driver thread with at most `depth` operations in
    /// flight.
    pub(crate) fn uring(depth: usize) -> io::Result<Driver> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let shared = Arc::new(DriverShared {
            queue: Mutex::new(Queued::default()),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            wake_fd: unsafe { OwnedFd::from_raw_fd(fd) },
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let s = shared.clone();
        std::thread::Builder::new()
            .name("blockio-aio".into())
            .spawn(move || drive(s, depth, ready_tx))?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("the blockio-aio driver thread died while starting"))??;
        Ok(Driver::Uring(shared))
    }

    /// A ring driven by the caller, also signalling `eventfd` (if given) on
    /// completions.
    pub(crate) fn inline(
        depth: usize,
        eventfd: Option<RawFd>,
        deferred: bool,
    ) -> io::Result<Driver> {
        let ring = InlineRing::new(depth, eventfd, deferred)?;
        Ok(Driver::Inline(Some(Box::new(ring))))
    }

    /// The caller-driven ring (None for other drivers).
    fn inline_ring(&self) -> Option<&InlineRing> {
        match self {
            Driver::Inline(ring) => ring.as_deref(),
            _ => None,
        }
    }

    /// The caller-driven ring's descriptor, to watch for completions.
    pub(crate) fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            Driver::Inline(Some(r)) => {
                // SAFETY: the ring stays open while this driver exists (it
                // is taken out only in `drop`), and the borrow is tied to it.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(r.ring.as_raw_fd()) };
                Some(fd)
            }
            _ => None,
        }
    }

    /// The inline driver's turn: submits what is waiting for the ring,
    /// completes what the kernel finished (calling the wakers on this
    /// thread, with the ring unlocked: one may start an operation), and,
    /// given `driver`, keeps it to be woken when an operation starts
    /// (deferred mode). Returns how many completed; other drivers have
    /// nothing to do here.
    pub(crate) fn turn(&self, driver: Option<&std::task::Waker>) -> usize {
        let Some(r) = self.inline_ring() else {
            return 0;
        };
        // Submitted first: operations that complete during the call (a
        // send, a read of bytes already there) are reaped in this turn.
        r.fill_and_submit(r.lock());
        let mut done = Vec::new();
        loop {
            let (waiting, overflow) = {
                let mut st = r.lock();
                let overflow = r.take_completions(&mut st, &mut done);
                // Completions freed room for requests still queued.
                let waiting = !st.ops.backlog.is_empty() && r.fill(&mut st);
                if let Some(w) = driver {
                    if !st.driver.as_ref().is_some_and(|d| d.will_wake(w)) {
                        st.driver = Some(w.clone());
                    }
                }
                (waiting, overflow)
            };
            if waiting || overflow {
                // With the overflow flagged, this enter asks for
                // completions (and waits for none), which flushes them.
                r.submit();
            }
            if !overflow {
                break;
            }
        }
        let n = done.len();
        for (target, res, flags) in done {
            target.complete_flags(res, flags);
        }
        n
    }

    /// Runs `setup` with the ring, on the thread that may register with it,
    /// and waits for it; the ring keeps what it returns until the ring is
    /// gone. Fails with `EOPNOTSUPP` on the thread-pool driver, which has
    /// no ring.
    pub(crate) fn setup_ring(&self, setup: Setup) -> io::Result<()> {
        match self {
            Driver::Uring(shared) => {
                let (tx, rx) = mpsc::channel();
                let run: Setup = Box::new(move |ring| {
                    let kept = setup(ring);
                    let _ = tx.send(kept.as_ref().map(drop).map_err(clone_error));
                    kept
                });
                shared.enqueue(|q| q.setups.push(run));
                rx.recv()
                    .map_err(|_| io::Error::other("the blockio-aio driver thread is gone"))?
            }
            Driver::Inline(ring) => {
                let r = ring
                    .as_deref()
                    .expect("the ring lives as long as the driver");
                let kept = setup(&r.ring)?;
                r.lock().kept.push(kept);
                Ok(())
            }
            Driver::Threads { .. } => Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        }
    }

    /// Starts a pool of `threads` threads doing plain system calls.
    pub(crate) fn threads(threads: usize) -> io::Result<Driver> {
        Ok(Driver::Threads {
            pool: WorkerPool::new(threads, "blockio-aio", Request::run_blocking)?,
            sockets: Readiness::new()?,
        })
    }

    /// Threads of the thread-pool driver (0 for the io_uring ones).
    pub(crate) fn pool_threads(&self) -> usize {
        match self {
            Driver::Threads { pool, .. } => pool.threads(),
            _ => 0,
        }
    }

    /// Cancels in the kernel the operation whose completion target is
    /// `target`, if it is in flight; a request not yet submitted is
    /// dropped as abandoned instead. The completion still arrives (usually
    /// `-ECANCELED`), and the target keeps the operation's memory until
    /// then. On the thread-pool driver a socket operation waiting for
    /// readiness is completed with `-ECANCELED` at once; a file operation
    /// on a pool thread cannot be interrupted and finishes.
    pub(crate) fn cancel(&self, target: Cancel) {
        match self {
            Driver::Uring(shared) => shared.enqueue(|q| q.cancels.push(target)),
            Driver::Inline(ring) => {
                if let Some(r) = ring.as_deref() {
                    r.cancel(vec![target]);
                }
            }
            Driver::Threads { sockets, .. } => sockets.cancel(&target),
        }
    }

    /// Hands requests to the driver.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        match self {
            Driver::Uring(shared) => shared.enqueue(|q| q.requests.extend(reqs)),
            Driver::Inline(ring) => {
                let r = ring
                    .as_deref()
                    .expect("the ring lives as long as the driver");
                let mut st = r.lock();
                st.ops.backlog.extend(reqs);
                if !r.deferred {
                    r.fill_and_submit(st);
                } else if let Some(w) = st.driver.take() {
                    drop(st);
                    w.wake();
                }
            }
            Driver::Threads { pool, sockets } => {
                let (net, files): (Vec<Request>, Vec<Request>) =
                    reqs.into_iter().partition(|r| r.op.kind().is_socket());
                for req in net {
                    sockets.submit(req);
                }
                for req in pool.send(files) {
                    req.done.complete(-libc::ECANCELED);
                }
            }
        }
    }
}

impl Drop for Driver {
    /// Tells the driver to finish: it submits what is queued, waits for
    /// everything in flight, and exits. Does not wait for it here.
    fn drop(&mut self) {
        match self {
            Driver::Uring(shared) => {
                shared.stop.store(true, Ordering::SeqCst);
                shared.wake();
            }
            Driver::Inline(ring) => {
                let busy = |r: &InlineRing| {
                    let st = r.lock();
                    st.ops.count > 0 || !st.ops.backlog.is_empty()
                };
                if let Some(r) = ring.take().filter(|r| busy(r)) {
                    // The kernel may still write into buffers the slots
                    // own: a thread waits for the last completion, so that
                    // dropping never blocks. Should the thread not start,
                    // the closure is dropped here and `Finish` waits in place.
                    let f = Finish(r);
                    let _ = std::thread::Builder::new()
                        .name("blockio-finish".into())
                        .spawn(move || drop(f));
                }
            }
            // Dropping the pool closes its queue; its workers finish.
            Driver::Threads { .. } => {}
        }
    }
}

/// The ring size for `slots` entries: the next power of two, at least 2.
fn ring_entries(slots: usize) -> u32 {
    slots.clamp(2, 32768).next_power_of_two() as u32
}

/// Completes the armed eventfd read by writing to the eventfd, and waits
/// for it, so that its buffer can be freed.
fn finish_wake_read(ring: &mut IoUring, shared: &DriverShared) {
    shared.wake();
    loop {
        submit_and_wait_or_abort(ring, 1);
        if ring.completion().any(|cqe| cqe.user_data() == WAKE) {
            return;
        }
    }
}

/// The same error again (an `io::Error` is not `Clone`).
fn clone_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// A completion taken off a ring: its target, result and flags.
type Completion = (Arc<dyn Complete>, i32, u32);

/// The driver thread's loop.
fn drive(shared: Arc<DriverShared>, depth: usize, ready: mpsc::Sender<io::Result<()>>) {
    // Declared before the ring, so dropped after it.
    let mut kept: Vec<Kept> = Vec::new();
    let mut flags = RingFlags {
        single_thread: true,
        coop_taskrun: true,
        ..RingFlags::default()
    };
    let mut ring = match flags.build(ring_entries(depth + 1), &mut Vec::new()) {
        Ok(r) => {
            let _ = ready.send(Ok(()));
            r
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // The eventfd read's target. Before returning, the driver completes the
    // armed read (see `finish_wake_read`), so the buffer outlives it.
    let mut wake_buf = Box::new([0u8; 8]);
    let wake_ptr = wake_buf.as_mut_ptr();
    // One slot stays free for re-arming the wake read.
    let limit = depth.min(ring.params().sq_entries() as usize - 1);
    let mut ops = InFlight::default();
    let mut taken = Queued::default();
    let mut cancels: Vec<Cancel> = Vec::new();
    let mut arm_wake = true;
    loop {
        std::mem::swap(
            &mut *shared.queue.lock().unwrap_or_else(|e| e.into_inner()),
            &mut taken,
        );
        for setup in taken.setups.drain(..) {
            kept.extend(setup(&ring).ok());
        }
        ops.backlog.extend(taken.requests.drain(..));
        cancels.append(&mut taken.cancels);
        {
            let mut sq = ring.submission();
            if arm_wake {
                let e = opcode::Read::new(types::Fd(shared.wake_fd.as_raw_fd()), wake_ptr, 8)
                    .build()
                    .user_data(WAKE);
                // SAFETY: the target lives until this function returns,
                // and it returns only after the read has completed.
                if unsafe { sq.push(&e) }.is_ok() {
                    arm_wake = false;
                }
            }
            ops.fill(&mut sq, limit);
            // After `fill`: a cancel then follows the request it names.
            if !cancels.is_empty() {
                cancels = ops.push_cancels(&mut sq, std::mem::take(&mut cancels));
            }
        }
        let stopping = shared.stop.load(Ordering::SeqCst);
        if stopping && ops.count == 0 && ops.backlog.is_empty() {
            let nothing_queued = shared
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty();
            if nothing_queued {
                if !arm_wake {
                    finish_wake_read(&mut ring, &shared);
                }
                drop(wake_buf);
                return;
            }
            continue;
        }
        // Sleep unless more work arrived meanwhile (see `Driver::submit`).
        shared.sleeping.store(true, Ordering::SeqCst);
        let more = !shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
            || ops.may_fill(limit)
            || !cancels.is_empty();
        let want = if more { 0 } else { 1 };
        submit_and_wait_or_abort(&ring, want);
        shared.sleeping.store(false, Ordering::SeqCst);
        arm_wake |= complete_all(&mut ring, &mut ops);
    }
}

/// Completes every operation the ring has finished, waking its task;
/// returns whether the wake read completed (and must be armed again).
fn complete_all(ring: &mut IoUring, ops: &mut InFlight) -> bool {
    let mut woken = false;
    for cqe in ring.completion() {
        let ud = cqe.user_data();
        if ud == WAKE {
            woken = true;
        } else if let Some(done) = ops.finish(ud, cqe.flags()) {
            done.complete_flags(cqe.result(), cqe.flags());
        }
    }
    woken
}
