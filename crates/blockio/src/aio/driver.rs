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
use crate::ring::build_entry;

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
        Arc::strong_count(&self.done) == 1 && !self.done.detached()
    }

    /// Performs the request with blocking system calls (a pool worker's
    /// job), unless it was abandoned. A panic of the waker or of the
    /// buffer's `Drop` is reported by the panic hook and leaves the worker
    /// serving the next request.
    fn run_blocking(self) {
        let _ = call_user(move || {
            if !self.abandoned() {
                self.done.complete(self.op.run_blocking_raw());
            }
            drop(self);
        });
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
    /// The driver thread, which must never wait for its own work.
    thread: std::sync::OnceLock<std::thread::ThreadId>,
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
    /// Abandoned requests go to `dropped`, for the caller to let go of with
    /// no lock held (dropping one drops its buffer: user code).
    fn fill(
        &mut self,
        sq: &mut SubmissionQueue<'_>,
        limit: usize,
        dropped: &mut Vec<Request>,
    ) -> bool {
        let mut pushed = false;
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

    /// Pushes an `ASYNC_CANCEL` for each of `cancels` in flight, and puts
    /// in `out` as completed with `-ECANCELED` those still waiting for room
    /// (for the caller to deliver with no lock held); keeps in `cancels`
    /// those that found no room in the queue, to try again.
    fn push_cancels(
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
                    let req = self.backlog.remove(i).expect("found above");
                    out.push((req.done, -libc::ECANCELED, 0));
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
    /// Cancels that found the submission queue full, pushed at the next
    /// fill: a cancel is never dropped, or a multishot operation would
    /// stay armed after its owner is gone.
    cancels: Vec<Cancel>,
    /// The driving task, woken when an operation starts (deferred mode).
    driver: Option<std::task::Waker>,
}

/// What a fill leaves for the caller to do once the lock is let go: user
/// code (wakers, buffers' `Drop`s) never runs under a lock of the engine.
#[derive(Default)]
struct Outcalls {
    /// Requests whose futures were gone before submission.
    dropped: Vec<Request>,
    /// Completions to deliver.
    done: Vec<Completion>,
}

impl Outcalls {
    /// Delivers the completions and lets go of the dropped requests, all of
    /// them even if some panic; returns the first panic.
    fn run(&mut self) -> Option<Panic> {
        let a = deliver(self.done.drain(..));
        let b = release(self.dropped.drain(..));
        a.or(b)
    }
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
                cancels: Vec::new(),
                driver: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, InlineState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pushes the waiting cancels, then the queued requests while the ring
    /// has room; returns whether entries wait to be submitted. `st` is this
    /// ring's state, locked; what must run without the lock goes to `out`.
    fn fill(&self, st: &mut InlineState, out: &mut Outcalls) -> bool {
        // SAFETY: every queue handle of this ring is made while its state
        // is locked (which `st` proves) and dropped before the lock is, so
        // no other submission queue exists.
        let mut sq = unsafe { self.ring.submission_shared() };
        let st = &mut *st;
        if !st.cancels.is_empty() {
            st.ops.push_cancels(&mut sq, &mut st.cancels, &mut out.done);
        }
        if !st.ops.backlog.is_empty() {
            st.ops.fill(&mut sq, self.depth, &mut out.dropped);
        }
        !sq.is_empty()
    }

    /// Whether a fill has anything to push.
    fn queued(st: &InlineState) -> bool {
        !st.ops.backlog.is_empty() || !st.cancels.is_empty()
    }

    /// Submits everything the submission queue holds, without waiting.
    /// Called with the state unlocked.
    fn submit(&self) {
        submit_and_wait_or_abort(&self.ring, 0);
    }

    /// Moves the queued requests onto the ring under `st`, then lets the
    /// lock go, submits them and runs what must run unlocked; returns the
    /// first panic of that user code.
    fn fill_and_submit(&self, mut st: MutexGuard<'_, InlineState>) -> Option<Panic> {
        let mut out = Outcalls::default();
        let waiting = Self::queued(&st) && self.fill(&mut st, &mut out);
        drop(st);
        if waiting {
            self.submit();
        }
        out.run()
    }

    /// Cancels `cancels` in the kernel, now; those that find the queue
    /// full wait in the state for the next fill (never dropped).
    fn cancel(&self, cancels: Vec<Cancel>) -> Option<Panic> {
        let mut st = self.lock();
        st.cancels.extend(cancels);
        self.fill_and_submit(st)
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
///
/// It runs on a thread of its own (or, should that not start, on the
/// thread dropping the engine), calls wakers and buffers' `Drop`s with the
/// lock let go, and catches their panics: a panic reported by the panic
/// hook there never stops the wait, so the ring and the buffers outlive
/// every operation the kernel has.
struct Finish(Box<InlineRing>);

impl Drop for Finish {
    fn drop(&mut self) {
        let r = &*self.0;
        let guard = AbortOnUnwind;
        let mut out = Outcalls::default();
        {
            let mut st = r.lock();
            for req in st.ops.backlog.drain(..) {
                out.done.push((req.done, -libc::ECANCELED, 0));
            }
            // Cancels of operations whose owners are gone.
            r.fill(&mut st, &mut out);
        }
        let _ = out.run();
        loop {
            {
                let mut st = r.lock();
                r.take_completions(&mut st, &mut out.done);
                r.fill(&mut st, &mut out);
                if st.ops.count == 0 && out.done.is_empty() && out.dropped.is_empty() {
                    break;
                }
            }
            let _ = out.run();
            if r.lock().ops.count > 0 {
                submit_and_wait_or_abort(&r.ring, 1);
            }
        }
        drop(guard);
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
            thread: std::sync::OnceLock::new(),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("blockio-aio".into())
            .spawn(move || drive(s, depth, ready_tx))?;
        // Before any request can reach the thread (none can before this
        // returns), so every wake it makes sees the id.
        let _ = shared.thread.set(handle.thread().id());
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
    ///
    /// A waker (or a buffer's `Drop`) that panics does not stop the turn:
    /// every completion taken is delivered, and the first panic is then
    /// resumed on this thread.
    pub(crate) fn turn(&self, driver: Option<&std::task::Waker>) -> usize {
        let Some(r) = self.inline_ring() else {
            return 0;
        };
        // Submitted first: operations that complete during the call (a
        // send, a read of bytes already there) are reaped in this turn.
        let mut panic = r.fill_and_submit(r.lock());
        let mut out = Outcalls::default();
        let mut new_driver = false;
        loop {
            let (waiting, overflow) = {
                let mut st = r.lock();
                let overflow = r.take_completions(&mut st, &mut out.done);
                // Completions freed room for requests still queued.
                let waiting = InlineRing::queued(&st) && r.fill(&mut st, &mut out);
                if let Some(w) = driver {
                    new_driver |= !st.driver.as_ref().is_some_and(|d| d.will_wake(w));
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
        if let Some(w) = driver.filter(|_| new_driver) {
            // Cloned and the old one dropped with the lock let go: both
            // are the waker's own code.
            let w = w.clone();
            let old = r.lock().driver.replace(w);
            panic = panic.or(call_user(move || drop(old)));
        }
        let n = out.done.len();
        resume(panic.or(out.run()));
        n
    }

    /// Whether a call to [`setup_ring`](Self::setup_ring) from this thread
    /// would wait for this thread: it is the driver thread (a waker that
    /// polls its task in place runs the task there).
    pub(crate) fn setup_would_wait_for_itself(&self) -> bool {
        match self {
            Driver::Uring(shared) => shared.thread.get() == Some(&std::thread::current().id()),
            _ => false,
        }
    }

    /// Runs `setup` with the ring, on the thread that may register with it,
    /// and waits for it; the ring keeps what it returns until the ring is
    /// gone. Fails with `EOPNOTSUPP` on the thread-pool driver, which has
    /// no ring, and with `EDEADLK` on the driver thread itself, which
    /// would wait for its own work.
    pub(crate) fn setup_ring(&self, setup: Setup) -> io::Result<()> {
        match self {
            Driver::Uring(_) if self.setup_would_wait_for_itself() => {
                Err(io::Error::from_raw_os_error(libc::EDEADLK))
            }
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
                resume(ring.as_deref().and_then(|r| r.cancel(vec![target])));
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
                let panic = if !r.deferred {
                    r.fill_and_submit(st)
                } else if let Some(w) = st.driver.take() {
                    drop(st);
                    call_user(move || w.wake())
                } else {
                    None
                };
                resume(panic);
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
                    st.ops.count > 0 || InlineRing::queued(&st)
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
fn resume(panic: Option<Panic>) {
    if let Some(p) = panic {
        if !std::thread::panicking() {
            std::panic::resume_unwind(p);
        }
    }
}

/// Delivers `done` (completes each target, then lets go of it, which may
/// drop the operation's buffer), every one of them even if some panic;
/// returns the first panic.
fn deliver(done: impl IntoIterator<Item = Completion>) -> Option<Panic> {
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
fn release(dropped: impl IntoIterator<Item = Request>) -> Option<Panic> {
    let mut first = None;
    for req in dropped {
        first = first.or(call_user(move || drop(req)));
    }
    first
}

/// Aborts the process if dropped while its thread unwinds: a panic of the
/// engine's own code (user code is caught by [`call_user`]) while the
/// kernel may still write into memory the unwinding would free. The
/// kernel's writes cannot be stopped from here, so aborting is the only
/// sound way out, as for a failed `io_uring_enter`.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("blockio: the engine panicked with operations in flight; aborting");
            std::process::abort();
        }
    }
}

/// The driver thread's loop.
///
/// User code (wakers, buffers' `Drop`s) runs through [`call_user`]: a
/// panic there is reported by the panic hook and the loop carries on, so
/// no other operation's completion is lost and the engine keeps running.
/// A panic of the loop's own code aborts the process while operations are
/// in flight ([`AbortOnUnwind`]); besides, everything the kernel may write
/// into is declared before the ring, so dropped after it.
fn drive(shared: Arc<DriverShared>, depth: usize, ready: mpsc::Sender<io::Result<()>>) {
    let mut kept: Vec<Kept> = Vec::new();
    let mut ops = InFlight::default();
    // The eventfd read's target. Before returning, the driver completes the
    // armed read (see `finish_wake_read`), so the buffer outlives it.
    let mut wake_buf = Box::new([0u8; 8]);
    let wake_ptr = wake_buf.as_mut_ptr();
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
    let guard = AbortOnUnwind;
    // One slot stays free for re-arming the wake read.
    let limit = depth.min(ring.params().sq_entries() as usize - 1);
    let mut taken = Queued::default();
    let mut cancels: Vec<Cancel> = Vec::new();
    let mut out = Outcalls::default();
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
                // and it returns only after the read has completed (or
                // aborts the process while unwinding: `guard`).
                if unsafe { sq.push(&e) }.is_ok() {
                    arm_wake = false;
                }
            }
            ops.fill(&mut sq, limit, &mut out.dropped);
            // After `fill`: a cancel then follows the request it names.
            if !cancels.is_empty() {
                ops.push_cancels(&mut sq, &mut cancels, &mut out.done);
            }
        }
        let _ = out.run();
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
                drop(guard);
                drop(ring);
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
        arm_wake |= take_all(&mut ring, &mut ops, &mut out.done);
        let _ = out.run();
    }
}

/// Takes every completion the ring has, with its target, into `out`;
/// returns whether the wake read completed (and must be armed again).
fn take_all(ring: &mut IoUring, ops: &mut InFlight, out: &mut Vec<Completion>) -> bool {
    let mut woken = false;
    for cqe in ring.completion() {
        let ud = cqe.user_data();
        if ud == WAKE {
            woken = true;
        } else if let Some(done) = ops.finish(ud, cqe.flags()) {
            out.push((done, cqe.result(), cqe.flags()));
        }
    }
    woken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::action::{Action, ReadArgs};

    /// A completion target that records its result and owns its buffer.
    struct Recorded {
        result: Mutex<Option<i32>>,
        _buf: Box<[u8; 8]>,
    }

    impl Complete for Recorded {
        fn complete(&self, res: i32) {
            *self.result.lock().unwrap() = Some(res);
        }
    }

    /// Fills the ring's submission queue with no-ops, not submitted.
    fn fill_queue(r: &InlineRing) -> usize {
        let _st = r.lock();
        // SAFETY: the state is locked, so no other queue handle exists.
        let mut sq = unsafe { r.ring.submission_shared() };
        let nop = opcode::Nop::new().build().user_data(CANCEL);
        let mut n = 0;
        // SAFETY: a no-op points at no memory.
        while unsafe { sq.push(&nop) }.is_ok() {
            n += 1;
        }
        n
    }

    /// Point 7: a cancel that finds the submission queue full, and full
    /// again when retried, is kept and pushed at a later fill: the
    /// operation it names (a read of an empty pipe, which would wait
    /// forever) completes with `ECANCELED`.
    #[test]
    fn a_cancel_that_meets_a_full_queue_is_never_dropped() {
        let r = InlineRing::new(1, None, false).expect("io_uring on the test machine");
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into a live array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both are new descriptors owned by nobody else.
        let (rd, _wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut buf = Box::new([0u8; 8]);
        let read = ReadArgs {
            buf: buf.as_mut_ptr(),
            len: 8,
            offset: 0,
        };
        // SAFETY: the buffer is owned by the target, which the ring keeps
        // until the completion; the pipe outlives the test's ring.
        let op = unsafe { Op::from_action(rd.as_raw_fd(), Action::Read(read), None) };
        let target = Arc::new(Recorded {
            result: Mutex::new(None),
            _buf: buf,
        });
        let done: Arc<dyn Complete> = target.clone();
        let weak = Arc::downgrade(&done);
        let mut st = r.lock();
        st.ops.backlog.push_back(Request { op, done });
        assert!(r.fill_and_submit(st).is_none());
        assert_eq!(r.lock().ops.count, 1, "the read is in flight");

        assert!(fill_queue(&r) > 0);
        // The cancel meets a full queue: kept, not lost.
        let mut out = Outcalls::default();
        {
            let mut st = r.lock();
            st.cancels.push(Cancel(weak));
            r.fill(&mut st, &mut out);
            assert_eq!(
                st.cancels.len(),
                1,
                "a cancel that found no room was dropped"
            );
        }
        r.submit();
        // Full again at the retry: still kept.
        fill_queue(&r);
        {
            let mut st = r.lock();
            r.fill(&mut st, &mut out);
            assert_eq!(
                st.cancels.len(),
                1,
                "a cancel that found no room was dropped"
            );
        }
        r.submit();
        // Room at last: turns push it, and the read ends cancelled.
        let driver = Driver::Inline(Some(Box::new(r)));
        let start = std::time::Instant::now();
        while target.result.lock().unwrap().is_none() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the cancel never reached the kernel"
            );
            driver.turn(None);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(*target.result.lock().unwrap(), Some(-libc::ECANCELED));
    }
}
