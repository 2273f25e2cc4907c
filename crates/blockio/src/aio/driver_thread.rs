//! The driver thread: a thread of the engine's own owns the ring
//! ([`Driving::Thread`](super::Driving::Thread), and the default for an
//! engine built off any tokio runtime).
//!
//! Futures never touch the ring: on their first poll they push a request
//! onto a [`Mailbox`] and, only if the thread is asleep, write to an
//! eventfd to wake it. The thread takes **everything** queued, pushes it
//! onto the ring and makes one `io_uring_enter` that submits it all and
//! sleeps until at least one completion: of an operation, or of the read
//! it keeps armed on the eventfd. For each completion it calls the task's
//! waker directly: the executor is told at once, with no thread-pool hop.
//!
//! Why this shape:
//! * any executor works: the futures only need a `Waker`; nothing depends
//!   on the runtime having an I/O reactor, so the futures are `Send` and
//!   run on tokio's multi-thread runtime, smol or `block_on` alike;
//! * operations issued by many tasks while the thread was busy or asleep
//!   go to the kernel in one call (the mailbox is emptied whole), and the
//!   eventfd is written once per sleep, not once per operation;
//! * one thread strictly owns the ring, so `SINGLE_ISSUER` is sound here
//!   (only the ring's creating thread submits and reaps), and the thread
//!   that submitted an operation outlives it: the thread exits only after
//!   its last operation completed;
//! * a dropped future leaves its operation's state with the thread, which
//!   frees it when the completion arrives. Nothing blocks in `Drop`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use io_uring::{opcode, types, IoUring};

use super::in_flight::{ring_entries, AbortOnUnwind, InFlight, Kept, Outcalls, Setup};
use super::request::{Cancel, Request};
use crate::ring::{submit_and_wait_or_abort, RingFlags};

/// The `user_data` of the eventfd read that wakes the thread.
const WAKE: u64 = u64::MAX;

/// The submitting side's handle on a driver thread; dropping it tells the
/// thread to finish (it submits what is queued, waits for everything in
/// flight, and exits) without waiting for it.
pub(crate) struct DriverThread {
    mailbox: Arc<Mailbox>,
}

/// What the submitting side shares with the driver thread.
struct Mailbox {
    queue: Mutex<Queued>,
    /// The thread is (about to be) asleep in `io_uring_enter`.
    sleeping: AtomicBool,
    stop: AtomicBool,
    wake_fd: OwnedFd,
    /// The driver thread, which must never wait for its own work.
    thread: OnceLock<ThreadId>,
}

/// What waits for the driver thread: one lock for all of it, so the
/// thread takes everything, and checks for more before sleeping, with one
/// lock.
#[derive(Default)]
struct Queued {
    requests: Vec<Request>,
    /// Operations whose futures were dropped while in flight, to cancel in
    /// the kernel (socket operations, which may otherwise wait forever).
    cancels: Vec<Cancel>,
    /// Registrations to make on the thread.
    setups: Vec<Setup>,
}

impl Queued {
    fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.cancels.is_empty() && self.setups.is_empty()
    }
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds work to the queue with `add`, and wakes the thread if it sleeps.
    fn post(&self, add: impl FnOnce(&mut Queued)) {
        add(&mut self.lock());
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

impl DriverThread {
    /// Starts a driver thread with at most `depth` file operations in
    /// flight.
    pub(crate) fn start(depth: usize) -> io::Result<DriverThread> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mailbox = Arc::new(Mailbox {
            queue: Mutex::new(Queued::default()),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            wake_fd: unsafe { OwnedFd::from_raw_fd(fd) },
            thread: OnceLock::new(),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let m = mailbox.clone();
        let handle = crate::arenas::spawn("blockio-aio", None, move || run(m, depth, ready_tx))?;
        // Before any request can reach the thread (none can before this
        // returns), so every wake it makes sees the id.
        let _ = mailbox.thread.set(handle.thread().id());
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("the blockio-aio driver thread died while starting"))??;
        Ok(DriverThread { mailbox })
    }

    /// Hands requests to the thread.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        self.mailbox.post(|q| q.requests.extend(reqs));
    }

    /// Asks the thread to cancel `target` in the kernel.
    pub(crate) fn cancel(&self, target: Cancel) {
        self.mailbox.post(|q| q.cancels.push(target));
    }

    /// Whether this is the driver thread itself.
    pub(crate) fn is_current(&self) -> bool {
        self.mailbox.thread.get() == Some(&std::thread::current().id())
    }

    /// Runs `setup` with the ring on the thread, and waits for it; fails
    /// with `EDEADLK` on the thread itself, which would wait for its own
    /// work.
    pub(crate) fn setup_ring(&self, setup: Setup) -> io::Result<()> {
        if self.is_current() {
            return Err(io::Error::from_raw_os_error(libc::EDEADLK));
        }
        let (tx, rx) = mpsc::channel();
        let run: Setup = Box::new(move |ring| {
            let kept = setup(ring);
            let _ = tx.send(kept.as_ref().map(drop).map_err(clone_error));
            kept
        });
        self.mailbox.post(|q| q.setups.push(run));
        rx.recv()
            .map_err(|_| io::Error::other("the blockio-aio driver thread is gone"))?
    }
}

impl Drop for DriverThread {
    fn drop(&mut self) {
        self.mailbox.stop.store(true, Ordering::SeqCst);
        self.mailbox.wake();
    }
}

/// The same error again (an `io::Error` is not `Clone`).
fn clone_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Whether the eventfd read is on the ring, waiting for a wake-up, or
/// must be pushed again (at start, and after it completed).
#[derive(Clone, Copy, PartialEq, Eq)]
enum WakeRead {
    Armed,
    ToArm,
}

/// The thread's own state: the ring and everything it must outlive.
/// Field order is drop order: the ring goes first, then the memory it may
/// have written into.
struct Thread {
    ring: IoUring,
    mailbox: Arc<Mailbox>,
    ops: InFlight,
    /// Most file operations in flight.
    limit: usize,
    /// Cancels that found the submission queue full, pushed at the next
    /// fill: a cancel is never dropped.
    cancels: Vec<Cancel>,
    out: Outcalls,
    wake_read: WakeRead,
    /// The eventfd read's target. Before the thread returns it completes
    /// the armed read (see [`Thread::finish`]), so the buffer outlives it.
    wake_buf: Box<[u8; 8]>,
    /// Registered memory, kept until the ring is gone.
    kept: Vec<Kept>,
}

/// The driver thread's body.
///
/// User code (wakers, buffers' `Drop`s) runs through `call_user`: a
/// panic there is reported by the panic hook and the loop carries on, so
/// no other operation's completion is lost and the engine keeps running.
/// A panic of the loop's own code aborts the process while operations are
/// in flight ([`AbortOnUnwind`]).
fn run(mailbox: Arc<Mailbox>, depth: usize, ready: mpsc::Sender<io::Result<()>>) {
    let mut flags = RingFlags {
        single_thread: true,
        coop_taskrun: true,
        ..RingFlags::default()
    };
    // One slot stays free for re-arming the wake read.
    let ring = match flags.build(ring_entries(depth + 1), &mut Vec::new()) {
        Ok(r) => {
            let _ = ready.send(Ok(()));
            r
        }
        Err(e) => {
            // The caller returns this error at once: the wake eventfd
            // (the mailbox owns it) must be closed by then, or a
            // descriptor the failed setup made outlives its error.
            drop(mailbox);
            let _ = ready.send(Err(e));
            return;
        }
    };
    let limit = depth.min(ring.params().sq_entries() as usize - 1);
    let mut t = Thread {
        ring,
        mailbox,
        ops: InFlight::default(),
        limit,
        cancels: Vec::new(),
        out: Outcalls::default(),
        wake_read: WakeRead::ToArm,
        wake_buf: Box::new([0u8; 8]),
        kept: Vec::new(),
    };
    let guard = AbortOnUnwind;
    let mut taken = Queued::default();
    loop {
        std::mem::swap(&mut *t.mailbox.lock(), &mut taken);
        t.push(&mut taken);
        let _ = t.out.run();
        if t.mailbox.stop.load(Ordering::SeqCst) && t.idle() {
            if t.mailbox.lock().is_empty() {
                t.finish();
                drop(guard);
                return;
            }
            continue;
        }
        t.sleep();
    }
}

impl Thread {
    /// Makes `taken`'s registrations, then pushes the wake read (if it
    /// must be armed), the requests and the cancels onto the ring.
    fn push(&mut self, taken: &mut Queued) {
        for setup in taken.setups.drain(..) {
            self.kept.extend(setup(&self.ring).ok());
        }
        self.ops.backlog.extend(taken.requests.drain(..));
        self.cancels.append(&mut taken.cancels);
        let mut sq = self.ring.submission();
        if self.wake_read == WakeRead::ToArm {
            let fd = types::Fd(self.mailbox.wake_fd.as_raw_fd());
            let e = opcode::Read::new(fd, self.wake_buf.as_mut_ptr(), 8)
                .build()
                .user_data(WAKE);
            // SAFETY: the target lives until the thread returns, and it
            // returns only after the read has completed (`finish`), or
            // aborts the process while unwinding (`AbortOnUnwind`).
            if unsafe { sq.push(&e) }.is_ok() {
                self.wake_read = WakeRead::Armed;
            }
        }
        self.ops.fill(&mut sq, self.limit, &mut self.out.dropped);
        // After `fill`: a cancel then follows the request it names.
        if !self.cancels.is_empty() {
            self.ops
                .push_cancels(&mut sq, &mut self.cancels, &mut self.out.done);
        }
    }

    /// Nothing in flight and nothing waiting for room.
    fn idle(&self) -> bool {
        self.ops.count == 0 && self.ops.backlog.is_empty()
    }

    /// Submits what was pushed and sleeps until a completion, unless more
    /// work arrived meanwhile (see [`Mailbox::post`]); then delivers every
    /// completion.
    fn sleep(&mut self) {
        self.mailbox.sleeping.store(true, Ordering::SeqCst);
        let more = !self.mailbox.lock().is_empty()
            || self.ops.may_fill(self.limit)
            || !self.cancels.is_empty();
        submit_and_wait_or_abort(&self.ring, if more { 0 } else { 1 });
        self.mailbox.sleeping.store(false, Ordering::SeqCst);
        for cqe in self.ring.completion() {
            let ud = cqe.user_data();
            if ud == WAKE {
                self.wake_read = WakeRead::ToArm;
            } else if let Some(done) = self.ops.finish(ud, cqe.flags()) {
                self.out.done.push((done, cqe.result(), cqe.flags()));
            }
        }
        let _ = self.out.run();
    }

    /// Completes the armed eventfd read by writing to the eventfd, and
    /// waits for it, so that its buffer can be freed.
    fn finish(&mut self) {
        if self.wake_read == WakeRead::ToArm {
            return;
        }
        self.mailbox.wake();
        loop {
            submit_and_wait_or_abort(&self.ring, 1);
            if self.ring.completion().any(|cqe| cqe.user_data() == WAKE) {
                return;
            }
        }
    }
}
