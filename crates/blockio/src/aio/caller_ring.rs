//! The caller-driven ring: a ring with no thread of its own
//! ([`Driving::Caller`](super::Driving::Caller)). The thread that starts
//! an operation pushes it (and, with [`Submit::OnStart`], submits it); the
//! caller's event loop watches the ring's descriptor and calls
//! [`CallerRing::turn`], which submits what waits and completes what the
//! kernel finished, waking the tasks on the loop's thread.
//!
//! No lock is held across a kernel call. The ring's queues are shared
//! memory: the [`Book`]'s lock is held to push entries and to take
//! completions, and `io_uring_enter` is made after letting it go, so a
//! thread starting an operation never waits for another thread's kernel
//! call. That is sound because the kernel serialises concurrent enters on
//! the ring itself, and each enter submits every entry published by then
//! (the submission queue's length, read atomically): an entry pushed by
//! one thread is submitted by its own enter or by an earlier one of
//! another thread, never lost. Registrations (the receive-buffer ring,
//! once per engine) are made without the lock too.
//!
//! Dropping the ring with operations in flight hands it to a thread that
//! waits for their completions (the kernel may write into their buffers
//! until then), so dropping never blocks.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use io_uring::IoUring;

use super::driving::Submit;
use super::in_flight::{ring_entries, AbortOnUnwind, InFlight, Kept, Outcalls, Setup};
use super::request::{call_user, resume, Cancel, Complete, Completion, Panic, Request};
use crate::ring::{submit_and_wait_or_abort, RingFlags};

/// A caller-driven ring, as its engine holds it. The ring itself is shared
/// only with the thread that finishes it once the engine is gone.
pub(crate) struct CallerRing {
    core: Arc<RingCore>,
}

/// The ring and its bookkeeping.
struct RingCore {
    /// The ring; its queues are touched only with `book` locked, so at
    /// most one queue handle exists.
    ring: IoUring,
    /// Most file operations in flight.
    depth: usize,
    submit: Submit,
    /// Dropped after `ring` (field order): it keeps registered memory.
    book: Mutex<Book>,
}

/// What a caller-driven ring's lock guards.
struct Book {
    /// Registered memory, kept until the ring is gone.
    kept: Vec<Kept>,
    ops: InFlight,
    /// Cancels that found the submission queue full, pushed at the next
    /// fill: a cancel is never dropped, or a multishot operation would
    /// stay armed after its owner is gone.
    cancels: Vec<Cancel>,
    /// The driving task, woken when an operation starts
    /// ([`Submit::PerRound`]).
    driving_task: Option<Waker>,
    /// The driving task went (see [`CallerRing::wake_waiters`]) and no
    /// turn with a driving task has been made since: an operation started
    /// now has its own task woken, which then has the engine driven again.
    /// Covers the task that found the old driver still counted just before
    /// it went, and started its operation after the waiters were woken.
    orphaned: bool,
}

impl Book {
    /// Whether a fill has anything to push.
    fn queued(&self) -> bool {
        !self.ops.backlog.is_empty() || !self.cancels.is_empty()
    }
}

/// Whether the kernel holds completions that overflowed the completion
/// queue (multishot operations can post more than the queue holds between
/// two turns).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Flagged,
    Clear,
}

/// Whether the submission queue holds entries a kernel call must submit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pushed {
    Entries,
    Nothing,
}

impl RingCore {
    fn new(depth: usize, eventfd: Option<RawFd>, submit: Submit) -> io::Result<RingCore> {
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
        // docs/benchmarks.md, "No `DEFER_TASKRUN` on the caller-driven ring").
        let mut flags = RingFlags {
            coop_taskrun: true,
            ..RingFlags::default()
        };
        let ring = flags.build(ring_entries(depth), &mut Vec::new())?;
        if let Some(fd) = eventfd {
            ring.submitter().register_eventfd(fd)?;
        }
        Ok(RingCore {
            ring,
            depth,
            submit,
            book: Mutex::new(Book {
                kept: Vec::new(),
                ops: InFlight::default(),
                cancels: Vec::new(),
                driving_task: None,
                orphaned: false,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pushes the waiting cancels, then the queued requests while the ring
    /// has room. `book` is this ring's, locked; what must run without the
    /// lock goes to `out`.
    fn fill(&self, book: &mut Book, out: &mut Outcalls) -> Pushed {
        // SAFETY: every queue handle of this ring is made while its book
        // is locked (which `book` proves) and dropped before the lock is,
        // so no other submission queue exists.
        let mut sq = unsafe { self.ring.submission_shared() };
        if !book.cancels.is_empty() {
            book.ops
                .push_cancels(&mut sq, &mut book.cancels, &mut out.done);
        }
        if !book.ops.backlog.is_empty() {
            book.ops.fill(&mut sq, self.depth, &mut out.dropped);
        }
        if sq.is_empty() {
            Pushed::Nothing
        } else {
            Pushed::Entries
        }
    }

    /// Submits everything the submission queue holds, without waiting.
    /// Called with the book unlocked.
    fn submit_now(&self) {
        submit_and_wait_or_abort(&self.ring, 0);
    }

    /// Moves the queued requests onto the ring under `book`, then lets the
    /// lock go, submits them and runs what must run unlocked; returns the
    /// first panic of that user code.
    ///
    /// A backlog longer than the submission queue (a burst of a thousand
    /// reads on idle connections) is pushed a queueful at a time, each
    /// submitted before the next is pushed, until nothing is left that
    /// may go: none of it waits for a later call, which may never come
    /// (idle connections complete nothing). File operations beyond the
    /// queue depth stay queued, as they must; so does what a kernel that
    /// takes no more entries leaves.
    fn fill_and_submit<'a>(&'a self, mut book: MutexGuard<'a, Book>) -> Option<Panic> {
        let mut out = Outcalls::default();
        loop {
            let (pushed, progressed) = self.fill_some(&mut book, &mut out);
            drop(book);
            if pushed == Pushed::Entries {
                self.submit_now();
            }
            if !progressed {
                break;
            }
            book = self.lock();
        }
        out.run()
    }

    /// One [`fill`](Self::fill), if anything is queued; also says whether
    /// it took requests off the backlog and some are left, so that
    /// another fill after submitting may push more.
    fn fill_some(&self, book: &mut Book, out: &mut Outcalls) -> (Pushed, bool) {
        if !book.queued() {
            return (Pushed::Nothing, false);
        }
        let before = book.ops.backlog.len();
        let pushed = self.fill(book, out);
        let left = book.ops.backlog.len();
        (pushed, left > 0 && left < before)
    }

    /// Takes the finished operations' targets and results off the ring
    /// into `out`. The kernel moves overflowed completions into the queue
    /// only on an enter that asks for completions, which `submit_now`
    /// makes while the overflow is flagged; until then the ring stays
    /// readable, so a loop would otherwise be woken for them forever.
    /// `book` is this ring's, locked.
    fn take_completions(&self, book: &mut Book, out: &mut Vec<Completion>) -> Overflow {
        // SAFETY: as in `fill`: no other completion queue exists while
        // the book is locked.
        for cqe in unsafe { self.ring.completion_shared() } {
            if let Some(done) = book.ops.finish(cqe.user_data(), cqe.flags()) {
                out.push((done, cqe.result(), cqe.flags()));
            }
        }
        // SAFETY: as in `fill`.
        if unsafe { self.ring.submission_shared() }.cq_overflow() {
            Overflow::Flagged
        } else {
            Overflow::Clear
        }
    }

    /// Whether operations are in flight or wait to be pushed.
    fn busy(&self) -> bool {
        let book = self.lock();
        book.ops.count > 0 || book.queued()
    }

    /// Cancels the requests still queued and waits until the kernel has
    /// completed every operation in flight, whose buffers the slots own.
    /// Wakers and buffers' `Drop`s run with the lock let go, and their
    /// panics are caught: a panic reported by the panic hook never stops
    /// the wait, so the ring and the buffers outlive every operation the
    /// kernel has.
    fn finish(&self) {
        let guard = AbortOnUnwind;
        let mut out = Outcalls::default();
        {
            let mut book = self.lock();
            for req in book.ops.backlog.drain(..) {
                out.done.push((req.done, -libc::ECANCELED, 0));
            }
            // Cancels of operations whose owners are gone.
            self.fill(&mut book, &mut out);
        }
        let _ = out.run();
        loop {
            {
                let mut book = self.lock();
                self.take_completions(&mut book, &mut out.done);
                self.fill(&mut book, &mut out);
                if book.ops.count == 0 && out.is_empty() {
                    break;
                }
            }
            let _ = out.run();
            if self.lock().ops.count > 0 {
                submit_and_wait_or_abort(&self.ring, 1);
            }
        }
        drop(guard);
    }
}

/// The ring's descriptor, open as long as this lives, even once the
/// engine is gone: what a driving task registers with its reactor, so that
/// the registration never outlives the descriptor it names (the number
/// could then name another file when the reactor deregisters it).
#[cfg(feature = "tokio")]
pub(crate) struct RingFd(Arc<RingCore>);

#[cfg(feature = "tokio")]
impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.ring.as_raw_fd()
    }
}

impl CallerRing {
    /// The ring's descriptor, kept open by the handle returned.
    #[cfg(feature = "tokio")]
    pub(crate) fn ring_fd(&self) -> RingFd {
        RingFd(self.core.clone())
    }

    /// A ring driven by the caller, also signalling `eventfd` (if given)
    /// on completions.
    pub(crate) fn new(depth: usize, eventfd: Option<RawFd>, submit: Submit) -> io::Result<Self> {
        let core = RingCore::new(depth, eventfd, submit)?;
        Ok(CallerRing {
            core: Arc::new(core),
        })
    }

    /// The ring's descriptor, to watch for completions.
    pub(crate) fn poll_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the ring stays open while `self.core` lives, and the
        // borrow is tied to `self`.
        unsafe { BorrowedFd::borrow_raw(self.core.ring.as_raw_fd()) }
    }

    /// Queues requests, and submits them now ([`Submit::OnStart`]) or
    /// wakes the driving task to ([`Submit::PerRound`]).
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        let r = &*self.core;
        let mut book = r.lock();
        let queued = book.ops.backlog.len();
        // One by one: most submissions are of one request, for which
        // `extend`'s reserving and bulk copy cost more than a push.
        for req in reqs {
            book.ops.backlog.push_back(req);
        }
        let orphans: Vec<Arc<dyn Complete>> = if book.orphaned {
            let started = book.ops.backlog.range(queued..);
            started.map(|req| req.done.clone()).collect()
        } else {
            Vec::new()
        };
        let mut panic = match r.submit {
            Submit::OnStart => r.fill_and_submit(book),
            Submit::PerRound => match book.driving_task.take() {
                Some(w) => {
                    drop(book);
                    call_user(move || w.wake())
                }
                None => None,
            },
        };
        for t in orphans {
            panic = panic.or(call_user(|| t.wake_waiters()));
        }
        resume(panic);
    }

    /// Wakes the tasks of every operation in flight or queued, and forgets
    /// the driving task: it is gone, and a woken task's next poll has the
    /// engine driven again. Wakers run with the ring unlocked; the first
    /// panic of one is resumed once all have run.
    #[cfg(feature = "tokio")]
    pub(crate) fn wake_waiters(&self) {
        let (targets, old) = {
            let mut book = self.core.lock();
            book.orphaned = true;
            (book.ops.targets(), book.driving_task.take())
        };
        let mut panic = call_user(move || drop(old));
        for t in targets {
            panic = panic.or(call_user(|| t.wake_waiters()));
        }
        resume(panic);
    }

    /// Whether a cancel waits to be pushed, or a request queued or an
    /// operation in flight is [awaited](Complete::awaited): what a relay
    /// thread must drive to its end. A receive kept armed with no task
    /// waiting on it is neither, queued or in flight, even one the relay
    /// thread submitted (which the kernel cancels when that thread exits:
    /// the stream's next read arms it again, see `net::read_side`). The
    /// targets are asked with the ring unlocked (each takes a lock of its
    /// own).
    #[cfg(feature = "tokio")]
    pub(crate) fn awaited(&self) -> bool {
        let targets = {
            let book = self.core.lock();
            if !book.cancels.is_empty() {
                return true;
            }
            if book.ops.count == 0 && book.ops.backlog.is_empty() {
                return false;
            }
            book.ops.targets()
        };
        targets.iter().any(|t| t.awaited())
    }

    /// Cancels `target` in the kernel, now; if the queue is full, the
    /// cancel waits in the book for the next fill (never dropped).
    pub(crate) fn cancel(&self, target: Cancel) {
        let mut book = self.core.lock();
        book.cancels.push(target);
        resume(self.core.fill_and_submit(book));
    }

    /// Runs `setup` with the ring, on this thread; the ring keeps what it
    /// returns until it is gone.
    pub(crate) fn setup_ring(&self, setup: Setup) -> io::Result<()> {
        let kept = setup(&self.core.ring)?;
        self.core.lock().kept.push(kept);
        Ok(())
    }

    /// Submits what is waiting for the ring, completes what the kernel
    /// finished (calling the wakers on this thread, with the ring
    /// unlocked: one may start an operation), and, given `driving_task`,
    /// keeps it to be woken when an operation starts
    /// ([`Submit::PerRound`]). Returns how many completed.
    ///
    /// A waker (or a buffer's `Drop`) that panics does not stop the turn:
    /// every completion taken is delivered, and the first panic is then
    /// resumed on this thread.
    pub(crate) fn turn(&self, driving_task: Option<&Waker>) -> usize {
        let r = &*self.core;
        // Submitted first: operations that complete during the call (a
        // send, a read of bytes already there) are reaped in this turn.
        let mut panic = r.fill_and_submit(r.lock());
        let mut out = Outcalls {
            done: spare_completions(),
            ..Outcalls::default()
        };
        // The driving task's waker, cloned with the lock let go (a waker's
        // clone and drop are its own code), to be kept under the lock that
        // last found the queue empty: a request queued after that lock
        // finds it and wakes the task ([`CallerRing::submit`]). Kept after
        // that lock instead, a request queued in between found no task to
        // wake and waited, unsubmitted, with the task asleep.
        let mut fresh: Option<Waker> = None;
        let mut old: Option<Waker> = None;
        loop {
            let (pushed, progressed, overflow, clone) = {
                let mut book = r.lock();
                let overflow = r.take_completions(&mut book, &mut out.done);
                // Completions freed room for requests still queued.
                let (pushed, progressed) = r.fill_some(&mut book, &mut out);
                let mut clone = false;
                if let Some(w) = driving_task {
                    book.orphaned = false;
                    if !book.driving_task.as_ref().is_some_and(|d| d.will_wake(w)) {
                        match fresh.take() {
                            Some(f) => old = book.driving_task.replace(f).or(old),
                            None => clone = true,
                        }
                    }
                }
                (pushed, progressed, overflow, clone)
            };
            if pushed == Pushed::Entries || overflow == Overflow::Flagged {
                // With the overflow flagged, this enter asks for
                // completions (and waits for none), which flushes them.
                r.submit_now();
            }
            if clone {
                fresh = driving_task.cloned(); // (kept in the next round)
            } else if overflow == Overflow::Clear && !progressed {
                break;
            }
        }
        panic = panic.or(call_user(move || drop((old, fresh))));
        let n = out.done.len();
        let panic = panic.or(out.run());
        keep_completions(std::mem::take(&mut out.done));
        resume(panic);
        n
    }
}

/// Completions a turn's list may have had room for and still be kept for
/// the next turn: a few KiB, whatever the ring's size.
const KEPT_COMPLETIONS: usize = 256;

thread_local! {
    /// The list a turn on this thread collected its completions in,
    /// emptied, for the next turn: a turn then allocates nothing.
    static SPARE_COMPLETIONS: std::cell::Cell<Vec<Completion>> =
        const { std::cell::Cell::new(Vec::new()) };
}

/// The list kept by the last turn on this thread ([`keep_completions`]),
/// or a new one.
fn spare_completions() -> Vec<Completion> {
    SPARE_COMPLETIONS
        .try_with(std::cell::Cell::take)
        .unwrap_or_default()
}

/// Keeps `done`, emptied, for this thread's next turn, unless it grew
/// past [`KEPT_COMPLETIONS`].
fn keep_completions(mut done: Vec<Completion>) {
    if done.capacity() <= KEPT_COMPLETIONS {
        done.clear();
        // Gone with the thread's exit: the list is freed with it.
        let _ = SPARE_COMPLETIONS.try_with(|spare| spare.set(done));
    }
}

impl Drop for CallerRing {
    /// With operations in flight or queued, a thread waits for the last
    /// completion ([`RingCore::finish`]), so that dropping never blocks;
    /// should the thread not start, the wait happens here.
    fn drop(&mut self) {
        // The driving task ends once it finds the engine gone; it is woken
        // to look, so that it lets go of the ring's descriptor now.
        let task = self.core.lock().driving_task.take();
        resume(call_user(move || task.into_iter().for_each(Waker::wake)));
        if !self.core.busy() {
            return;
        }
        let core = self.core.clone();
        let spawned = crate::arenas::spawn("blockio-finish", None, move || core.finish());
        if spawned.is_err() {
            self.core.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{FromRawFd, OwnedFd};

    use io_uring::opcode;

    use super::*;
    use crate::aio::in_flight::CANCEL;
    use crate::aio::request::Complete;
    use crate::op::action::{Action, ReadArgs};
    use crate::op::Op;

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
    fn fill_queue(r: &RingCore) -> usize {
        let _book = r.lock();
        // SAFETY: the book is locked, so no other queue handle exists.
        let mut sq = unsafe { r.ring.submission_shared() };
        let nop = opcode::Nop::new().build().user_data(CANCEL);
        let mut n = 0;
        // SAFETY: a no-op points at no memory.
        while unsafe { sq.push(&nop) }.is_ok() {
            n += 1;
        }
        n
    }

    /// A cancel that finds the submission queue full, and full again when
    /// retried, is kept and pushed at a later fill: the operation it names
    /// (a read of an empty pipe, which would wait forever) completes with
    /// `ECANCELED`.
    #[test]
    fn a_cancel_that_meets_a_full_queue_is_never_dropped() {
        let r = RingCore::new(1, None, Submit::OnStart).expect("io_uring on the test machine");
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
        let mut book = r.lock();
        book.ops.backlog.push_back(Request { op, done });
        assert!(r.fill_and_submit(book).is_none());
        assert_eq!(r.lock().ops.count, 1, "the read is in flight");

        assert!(fill_queue(&r) > 0);
        // The cancel meets a full queue: kept, not lost.
        let mut out = Outcalls::default();
        {
            let mut book = r.lock();
            book.cancels.push(Cancel(weak));
            r.fill(&mut book, &mut out);
            assert_eq!(
                book.cancels.len(),
                1,
                "a cancel that found no room was dropped"
            );
        }
        r.submit_now();
        // Full again at the retry: still kept.
        fill_queue(&r);
        {
            let mut book = r.lock();
            r.fill(&mut book, &mut out);
            assert_eq!(
                book.cancels.len(),
                1,
                "a cancel that found no room was dropped"
            );
        }
        r.submit_now();
        // Room at last: turns push it, and the read ends cancelled.
        let ring = CallerRing { core: Arc::new(r) };
        let start = std::time::Instant::now();
        while target.result.lock().unwrap().is_none() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the cancel never reached the kernel"
            );
            ring.turn(None);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(*target.result.lock().unwrap(), Some(-libc::ECANCELED));
    }

    /// A completion target that counts how often its waiters were woken.
    #[derive(Default)]
    #[cfg(feature = "tokio")]
    struct Woken(std::sync::atomic::AtomicUsize);

    #[cfg(feature = "tokio")]
    impl Complete for Woken {
        fn complete(&self, _res: i32) {}

        fn wake_waiters(&self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A request for `target`: an fsync of no descriptor, which points at
    /// no memory and fails at once (`EBADF`).
    #[cfg(feature = "tokio")]
    fn nop_request(target: &Arc<Woken>) -> Request {
        // SAFETY: an fsync points at no memory.
        let op = unsafe { Op::from_action(-1, Action::Fsync(crate::op::action::FsyncArgs), None) };
        let done: Arc<dyn Complete> = target.clone();
        Request { op, done }
    }

    /// Once the driving task is gone, the waiters of the operations
    /// queued are woken, and so is the task of an operation started
    /// afterwards (it may have found the old driver still counted), until
    /// a turn with a driving task is made again.
    #[cfg(feature = "tokio")]
    #[test]
    fn operations_started_after_the_driver_went_wake_their_tasks() {
        let ring =
            CallerRing::new(4, None, Submit::PerRound).expect("io_uring on the test machine");
        let queued = Arc::new(Woken::default());
        ring.submit([nop_request(&queued)]);
        assert_eq!(queued.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        ring.wake_waiters();
        assert_eq!(queued.0.load(std::sync::atomic::Ordering::SeqCst), 1);

        let late = Arc::new(Woken::default());
        ring.submit([nop_request(&late)]);
        assert_eq!(
            late.0.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "an operation started with no driver left parked its task unwoken"
        );

        ring.turn(Some(std::task::Waker::noop()));
        let driven = Arc::new(Woken::default());
        ring.submit([nop_request(&driven)]);
        assert_eq!(driven.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        ring.turn(None);
    }
}
