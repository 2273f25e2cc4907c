//! The epoll fallback for socket operations.
//!
//! Where io_uring is blocked, file operations go to a pool of threads that
//! make blocking calls. A socket operation cannot: a read on an idle
//! connection may wait forever, and a pool thread per waiting connection
//! does not scale. So socket operations go here instead: the socket is
//! non-blocking (the `net` types make it so on this backend); the call is
//! tried at once on the submitting thread; if the kernel says `EAGAIN`
//! (or `EINPROGRESS`, for a connect) the request waits for readiness in an
//! epoll set ([`EpollSet`]), watched by one thread or read on the tokio
//! runtime that runs the sockets' tasks (see below), and the call is
//! retried when the socket is ready and the request completed.
//!
//! A socket joins the set at its first wait, edge-triggered, for the
//! direction it waits in (one `EPOLL_CTL_MOD` adds the other direction
//! the first time it waits in that one: watching both from the start
//! woke the thread for every acknowledgement of sent bytes), and stays
//! there until it closes (a socket whose owner holds a [`Registration`],
//! as every socket of `blockio::net` on the thread-pool backend does) or
//! until its last waiting request leaves (any other socket): a wait in a
//! direction already watched costs no `epoll_ctl`, and an event no
//! re-arm. Between events, what the socket is ready for is remembered
//! ([`ReadyWord`]): a direction stays ready until a call in it says
//! `EAGAIN` or a receive gets less than it asked for, so a request whose
//! direction is known not ready waits at once, without the call that
//! would only say `EAGAIN` (a request-reply connection's next request has
//! not arrived when its reply is sent). A tick taken before each call
//! tells a stale "not ready" from an event that came meanwhile, which is
//! never lost: the call is made again instead.
//!
//! Who takes the events. Each tokio runtime whose tasks wait here has an
//! epoll set of its own (feature `tokio`; the thread pool's sockets), as
//! tokio has a reactor per runtime and io_uring an engine per runtime:
//! the set's descriptor is registered in that runtime's reactor, so the
//! runtime's thread, parked in its own `epoll_wait`, is woken by the
//! readiness of that runtime's sockets alone, and a task there
//! ([`readiness_tokio`](super::readiness_tokio)) takes the events without
//! waiting and completes their requests, waking their tasks on the thread
//! that runs them. The readiness thread waits on a set of its own, for
//! waits made outside any runtime that runs its tasks (see below).
//!
//! Where the thread pool runs, its thread and set are made with the
//! engine. An io_uring engine's (feature `tokio`), which only its TCP
//! listeners' accepts wait in, is read on the multi-thread runtimes
//! whose tasks wait, and the thread with its set (and the eventfd that
//! stops it) is made only at the first wait from elsewhere (a
//! current-thread runtime, whose first wait could not tell its thread,
//! or no runtime): a server on a multi-thread runtime pays one
//! descriptor for its accepts, and no thread. A set that cannot be made
//! is not kept, and the request that needed it completes with the
//! kernel's error; [`Readiness::prepare`] makes the caller's at once (a
//! listener's bind), naming what it could not make.
//!
//! A request waits in the set of the place it waits from, and is served
//! by that set alone. A wait from a task of a runtime (or from any future
//! on a multi-thread runtime, whose workers run its reactor) uses that
//! runtime's set (a current-thread runtime's only on the thread that runs
//! it, see [`place_on_runtime`]); a wait from a thread with no runtime, or from a future
//! polled directly by a current-thread runtime's `block_on` (which tokio
//! does not tell apart from a future polled by another executor where the
//! runtime is only entered, whose reactor nobody runs), uses the
//! thread's. A socket is in each set one of its requests waits in (epoll
//! lets one file be in several sets; each set gets its own event for the
//! directions it watches, and serves the requests waiting in it): a
//! stream whose read waits on one runtime and whose write waits on
//! another is served on each, and a runtime that is not run never holds
//! up a request that waits elsewhere. A socket joins a set (an add, which
//! reports at once what it is ready for) before it leaves another, and
//! leaves each set none of its requests uses any more when another is
//! used; a kept socket with no request waiting stays in the last set it
//! waited in: a socket used on two runtimes by turns costs two
//! `epoll_ctl` a change, one used on one place none. A runtime that is
//! not run (a current-thread runtime between two `block_on`s, or whose
//! only thread a task blocks) serves the requests waiting in its set when
//! it runs again, as tokio's reactor does its sockets; one dropped (its
//! set's task dropped with it) hands every socket in its set, and the
//! requests waiting there, to the thread's set.
//!
//! No readiness is lost or seen twice: every event is taken from the
//! kernel once per set, by one `epoll_wait` (a runtime's take or the
//! thread's wait), and served under the same lock ([`on_event`], whose
//! tick tells a retry of an event that came meanwhile). The readiness it
//! reports is the socket's, whichever set told it. An event taken from a
//! set a socket has just left is served as any other: it only says what
//! the socket was ready for. A set whose engine is gone stops: the thread
//! completes what waits with `ECANCELED`, each runtime's task ends, and a
//! retry a runtime's task was making meanwhile completes its requests so
//! too.
//!
//! A request waiting here is cancelled by taking it out of the set: the
//! kernel holds nothing of it, so its memory is free at once.
//!
//! Descriptor identity: a waiting request holds its socket open, so the
//! descriptor names that socket for as long as the socket has requests
//! here. A kept socket is deleted from the set by its registration when
//! the socket closes, before the descriptor number is released; any other
//! is deleted when its last request leaves, before that request can let
//! the socket close. Each entry's key in the set carries a generation
//! beside the descriptor, so that an event drawn for a socket just closed
//! never reaches the socket that receives its number next. Waiting opens
//! no descriptor per socket: a connection costs one whether idle or not
//! (a runtime's set costs one per engine, made at the first wait of its
//! tasks on that engine's sockets).

#[cfg(feature = "tokio")]
use std::cell::RefCell;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use super::attempt::{attempt, awaits, is_connect, not_ready, short_receive};
use super::epoll::{EpollSet, Readied};
use super::key_hash::KeyMap;
#[cfg(feature = "tokio")]
use super::readiness_tokio::place_on_runtime;
use super::ready::{Awaits, ReadyWord};
use super::request::{call_user, Cancel, Complete, Request};
#[cfg(feature = "tokio")]
use rustix::event::epoll::Event;

/// One thread watching the sockets of waiting requests, and the sets
/// of the runtimes whose tasks wait (see the [module](self)).
pub(crate) struct Readiness {
    watcher: Arc<Watcher>,
}

/// One epoll set of the fallback, and who reads it.
pub(super) struct Place {
    /// The set.
    pub(super) set: EpollSet,
    /// Set once the task of the runtime reading it is dropped: no socket
    /// joins the set after that.
    gone: AtomicBool,
    /// Polls of the task of the runtime reading it (its wake-ups).
    #[cfg(feature = "tokio")]
    polls: AtomicU64,
    /// The waker of the task of the runtime reading it, woken when the
    /// engine stops (a runtime's set has no nudge descriptor).
    #[cfg(feature = "tokio")]
    waker: Mutex<Option<std::task::Waker>>,
    /// The number ([`thread_number`]) of the thread that last polled the
    /// task of the runtime reading it; 0 before its first poll.
    #[cfg(feature = "tokio")]
    driver: AtomicU64,
}

/// A number naming the calling thread, never 0, never another thread's.
#[cfg(feature = "tokio")]
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

impl Place {
    /// A new, empty set, `set`.
    fn of(set: EpollSet) -> Place {
        Place {
            set,
            gone: AtomicBool::new(false),
            #[cfg(feature = "tokio")]
            polls: AtomicU64::new(0),
            #[cfg(feature = "tokio")]
            waker: Mutex::new(None),
            #[cfg(feature = "tokio")]
            driver: AtomicU64::new(0),
        }
    }

    /// A new, empty set for a runtime's reactor to watch: one descriptor.
    #[cfg(feature = "tokio")]
    pub(super) fn for_runtime() -> io::Result<Place> {
        Ok(Place::of(EpollSet::bare()?))
    }

    /// Counts a poll of the task reading the set, whose waker `waker` is
    /// woken when the engine stops (kept before the task looks whether it
    /// has: a stop after that look wakes it).
    #[cfg(feature = "tokio")]
    pub(super) fn polled(&self, waker: &std::task::Waker) {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.driver.store(thread_number(), Ordering::Relaxed);
        let mut kept = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        if !kept.as_ref().is_some_and(|k| k.will_wake(waker)) {
            *kept = Some(waker.clone());
        }
    }

    /// Whether the task reading the set was last polled on the calling
    /// thread: for a current-thread runtime, whether the calling thread is
    /// the one that runs it (see
    /// [`place_on_runtime`](super::readiness_tokio::place_on_runtime)).
    #[cfg(feature = "tokio")]
    pub(super) fn driven_here(&self) -> bool {
        self.driver.load(Ordering::Relaxed) == thread_number()
    }

    /// Wakes the task reading the set, to see that the engine stopped.
    #[cfg(feature = "tokio")]
    fn wake(&self) {
        let waker = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// What the watching thread shares with the engine and with the tokio
/// tasks that take their runtimes' sets' events: the sets, and the
/// requests waiting in them.
pub(super) struct Watcher {
    /// The readiness thread's set, made with its thread at the first wait
    /// that needs it ([`thread_place`](Self::thread_place)): a server
    /// whose waits are all served on its runtimes never makes either.
    thread: OnceLock<Arc<Place>>,
    /// Held while the thread's set is made, and by the stop, so that no
    /// thread starts once the engine is gone.
    starting: Mutex<()>,
    /// The watcher itself, for the thread it starts.
    me: Weak<Watcher>,
    waiting: Mutex<Waiting>,
    stop: AtomicBool,
    /// A request that waits from a tokio runtime's task waits in that
    /// runtime's set (the thread pool's sockets); otherwise all wait in
    /// the thread's.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    on_runtimes: bool,
    /// Whether current-thread runtimes get sets of their own too (the
    /// thread pool's); if not, only multi-thread runtimes do.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    current_thread_sets: bool,
    /// The set of each runtime whose tasks have waited, while its task
    /// reading it lives.
    #[cfg(feature = "tokio")]
    runtimes: Mutex<KeyMap<tokio::runtime::Id, Arc<Place>>>,
    /// Sets made for runtimes.
    runtime_sets: AtomicU64,
    /// Sockets that joined a set while in another.
    moves: AtomicU64,
    /// Waits on the set the thread has entered.
    thread_waits: AtomicU64,
    /// Socket events the thread has taken from the set.
    thread_events: AtomicU64,
}

/// Where the readiness fallback's events were taken so far, for tests
/// that check which thread did (see
/// [`AsyncEngine::readiness_counts`](super::AsyncEngine::readiness_counts)).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadinessCounts {
    /// Sets made for tokio runtimes, one per runtime whose tasks waited.
    pub runtime_sets: u64,
    /// Sockets that joined a set while in another (a wait from another
    /// place, or a dropped runtime's set handed to the thread's).
    pub moves: u64,
    /// Waits on its set the readiness thread has entered.
    pub thread_waits: u64,
    /// Socket events the readiness thread has taken from its set.
    pub thread_events: u64,
}

impl Watcher {
    /// The waiting requests, locked.
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The readiness thread's set, made now with its thread if there is
    /// none yet (never once the engine is gone: `ECANCELED`). Not kept
    /// when it cannot be made: the next wait that needs it tries again.
    ///
    /// # Errors
    /// What could not be made, named (the set, its wake-up descriptor,
    /// its thread), with the kernel's reason: `EMFILE` at a descriptor
    /// limit reads "cannot make blockio's readiness set (epoll): Too many
    /// open files (os error 24)", of the same kind as the kernel's error.
    fn thread_place(&self) -> io::Result<Arc<Place>> {
        if let Some(place) = self.thread.get() {
            return Ok(place.clone());
        }
        let _starting = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(place) = self.thread.get() {
            return Ok(place.clone());
        }
        let gone = || io::Error::from_raw_os_error(libc::ECANCELED);
        if self.stop.load(Ordering::SeqCst) {
            return Err(gone());
        }
        let me = self.me.upgrade().ok_or_else(gone)?;
        let named = |what: &str, e: io::Error| {
            crate::error::Named::wrap(format!("cannot make blockio's {what}"), e)
        };
        let set = EpollSet::new().map_err(|(what, e)| named(what, e))?;
        let place = Arc::new(Place::of(set));
        let watched = place.clone();
        crate::arenas::spawn("blockio-net", None, move || watch(&me, &watched))
            .map_err(|e| named("readiness thread (blockio-net)", e))?;
        let _ = self.thread.set(place.clone());
        Ok(place)
    }
}

/// The requests waiting for readiness, by socket (the descriptor is the
/// set's key for it).
#[derive(Default)]
struct Waiting {
    sockets: KeyMap<RawFd, Watched>,
    /// The socket each waiting request waits on, by its target's address
    /// ([`target_key`]), so that a cancel finds its request without a
    /// scan of every socket (a server with thousands of idle connections
    /// whose reads time out cancels thousands of requests a second).
    /// Entries leave with their requests; one left behind would only send
    /// a cancel to a socket whose requests it then does not name.
    fds: KeyMap<usize, RawFd>,
    /// The generation the next entry of [`Waiting::sockets`] gets.
    next_gen: u32,
}

impl Waiting {
    /// The entry of `fd`, made (not yet in the set) if it has none.
    fn entry(&mut self, fd: RawFd) -> &mut Watched {
        let gen = self.next_gen;
        let s = self.sockets.entry(fd).or_insert_with(|| Watched {
            gen,
            ..Watched::default()
        });
        if s.gen == gen {
            self.next_gen = gen.wrapping_add(1);
        }
        s
    }

    /// The generation and tick of `fd`'s entry if the socket is in the
    /// set: noted before a call, to tell afterwards whether an event came
    /// meanwhile.
    fn seen(&self, fd: RawFd) -> Option<Seen> {
        let s = self.sockets.get(&fd).filter(|s| s.in_set())?;
        Some(Seen {
            gen: s.gen,
            tick: s.ready.tick(),
        })
    }
}

/// A socket entry's state noted before a call ([`Waiting::seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    gen: u32,
    tick: u32,
}

/// The key of a request's target in [`Waiting::fds`]: its address, which
/// names one operation while the request or a [`Cancel`] of it lives.
fn target_key(done: &Arc<dyn Complete>) -> usize {
    Arc::as_ptr(done).cast::<()>() as usize
}

/// One socket known to the sets.
#[derive(Default)]
struct Watched {
    /// The requests waiting on it, each with the set it waits in. Each
    /// waits in a direction its [`ready`](Self::ready) word has clear: an
    /// event of its set that sets it retries them. Emptied, the list keeps
    /// its room for the socket's next wait, which then allocates nothing:
    /// up to [`Watched::KEPT_WAITERS`] waiters' room (the first
    /// allocation's, held by each idle socket that ever waited: 210-280
    /// bytes per idle connection in `docs/benchmarks.md`); a list grown
    /// past that (many requests on one socket at once) is let go when it
    /// empties.
    reqs: Vec<Waiter>,
    /// The sets it is in: each set one of its requests waits in or is
    /// retried from, or, while none is, at most one (the last it waited
    /// in) if it is kept.
    sets: Vec<Member>,
    /// Its owner holds a [`Registration`], which deletes it from the sets
    /// before the socket closes: it stays in one between waits.
    kept: bool,
    /// This entry's generation, in the sets' key beside the descriptor.
    gen: u32,
    /// What the socket is ready for, as far as the sets have told.
    ready: ReadyWord,
}

/// A request waiting on a socket, and the set it waits in.
struct Waiter {
    req: Request,
    place: Arc<Place>,
}

/// A socket's entry in one set.
struct Member {
    /// The set.
    place: Arc<Place>,
    /// The set watches it for reading (a request has waited to read).
    reading: bool,
    /// The set watches it for writing (a request has waited to write).
    writing: bool,
    /// Retries of some of its requests waiting in this set, under way
    /// unlocked (the thread's and a runtime's task's may overlap, each
    /// taking other requests): the socket stays in the set until every
    /// one has put them back.
    retrying: u32,
}

/// The set's key for the entry `s` of `fd`: the descriptor in the low
/// half, the entry's generation in the high one.
fn key(fd: RawFd, s: &Watched) -> u64 {
    u64::from(s.gen) << 32 | u64::from(fd as u32)
}

/// The descriptor a key of the set names (its low half).
fn key_fd(key: u64) -> RawFd {
    key as u32 as RawFd
}

/// A waiting request's socket, borrowed.
///
/// # Safety
/// A request that holds `fd` open (one of those waiting on it), or the
/// owner of a kept socket, must keep it open as long as the borrow.
unsafe fn socket<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: the caller's promise.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

impl Readiness {
    /// Starts the watching thread, which alone takes the set's events.
    pub(crate) fn new() -> io::Result<Readiness> {
        Readiness::eager(false)
    }

    /// Starts the watching thread; the set's events are taken on the
    /// tokio runtime whose tasks wait in it while that runtime takes them
    /// (see the [module](self)).
    pub(crate) fn on_runtimes() -> io::Result<Readiness> {
        Readiness::eager(true)
    }

    /// A watcher whose thread and its set are made now (the thread
    /// pool's, whose engine holds them from its start, as the Python
    /// engine's accounting of its descriptors expects; and an io_uring
    /// engine's without the `tokio` feature).
    fn eager(on_runtimes: bool) -> io::Result<Readiness> {
        let readiness = Readiness::start(on_runtimes, true)?;
        readiness.watcher.thread_place()?;
        Ok(readiness)
    }

    /// [`on_runtimes`](Self::on_runtimes), but for multi-thread runtimes
    /// alone: a current-thread runtime's waits go to the thread's set (an
    /// io_uring engine's, where a runtime's set would cost a descriptor
    /// more than the thread's, which the current-thread runtime's first
    /// wait makes anyway; see [`place_on_runtime`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn on_multi_thread_runtimes() -> io::Result<Readiness> {
        Readiness::start(true, false)
    }

    /// Nothing is made here: the sets and the thread are made at the
    /// first wait that needs them ([`prepare`](Self::prepare) makes them
    /// at once). Infallible; a `Result` for the callers that start it.
    fn start(on_runtimes: bool, current_thread_sets: bool) -> io::Result<Readiness> {
        let watcher = Arc::new_cyclic(|me| Watcher {
            thread: OnceLock::new(),
            starting: Mutex::new(()),
            me: me.clone(),
            waiting: Mutex::new(Waiting::default()),
            stop: AtomicBool::new(false),
            on_runtimes,
            current_thread_sets,
            #[cfg(feature = "tokio")]
            runtimes: Mutex::new(KeyMap::default()),
            runtime_sets: AtomicU64::new(0),
            moves: AtomicU64::new(0),
            thread_waits: AtomicU64::new(0),
            thread_events: AtomicU64::new(0),
        });
        Ok(Readiness { watcher })
    }

    /// Makes now the set a request waiting from the caller would wait in
    /// (its runtime's, or the thread's with its thread), if it is not
    /// made yet: a TCP listener's bind, so that a listener whose accepts
    /// could not wait fails there.
    ///
    /// # Errors
    /// As [`Watcher::thread_place`]'s (a runtime's set that cannot be made
    /// leaves the caller's waits to the thread's, as at a wait).
    pub(crate) fn prepare(&self) -> io::Result<()> {
        self.place().map(drop)
    }

    /// Performs `req` now if its socket may be ready, else waits for it.
    pub(crate) fn submit(&self, req: Request) {
        if req.abandoned() {
            return;
        }
        let kind = req.op.kind();
        let Some(dir) = awaits(kind) else {
            let res = req.op.run_blocking_raw();
            return req.done.complete(res);
        };
        let fd = req.op.fd;
        // The set it would wait in, found (unlocked: finding it may make a
        // runtime's set) only once it is to wait: a call that succeeds
        // costs nothing of it.
        let mut place: Option<Arc<Place>> = None;
        let mut first = true;
        loop {
            let w = self.watcher.lock();
            let seen = match w.sockets.get(&fd) {
                // Known not ready: waits without the call. (A connect is
                // always made: its call is what starts it.)
                Some(s) if s.in_set() && !s.ready.is(dir) && !is_connect(kind) => {
                    if let Some(place) = &place {
                        return self.park(w, req, dir, place);
                    }
                    drop(w);
                    match self.place() {
                        Ok(p) => place = Some(p),
                        Err(e) => return req.done.complete(-errno_of(&e)),
                    }
                    continue;
                }
                _ => w.seen(fd),
            };
            drop(w);
            let res = attempt(&req, first);
            first = false;
            if !not_ready(&req, res) {
                if short_receive(&req, res) {
                    clear_seen(&mut self.watcher.lock(), fd, Awaits::Readable, seen);
                }
                return req.done.complete(res);
            }
            if place.is_none() {
                match self.place() {
                    Ok(p) => place = Some(p),
                    Err(e) => return req.done.complete(-errno_of(&e)),
                }
            }
            let place = place.as_ref().expect("made above");
            let mut w = self.watcher.lock();
            if w.seen(fd).is_none() || clear_seen(&mut w, fd, dir, seen) {
                return self.park(w, req, dir, place);
            }
            // An event came during the call: made again.
        }
    }

    /// The set a request waiting now from the caller's thread waits in:
    /// its runtime's, or the thread's (see the [module](self)).
    fn place(&self) -> io::Result<Arc<Place>> {
        #[cfg(feature = "tokio")]
        if self.watcher.on_runtimes {
            if let Some(place) = place_on_runtime(&self.watcher) {
                return Ok(place);
            }
        }
        self.watcher.thread_place()
    }

    /// Puts `req`, whose socket is not ready in direction `dir`, in the
    /// set `place` (or the thread's, if `place` is gone), with the
    /// requests (locked in `w`): adds the socket to that set if it is not
    /// yet there, or watches it there for `dir` too if it was not yet,
    /// then deletes it from the sets none of its requests uses any more.
    fn park(&self, mut w: MutexGuard<'_, Waiting>, req: Request, dir: Awaits, place: &Arc<Place>) {
        // Asked under the lock that the set's task takes to hand its
        // sockets over when it is dropped, after setting `gone`.
        let thread;
        let place = if place.gone.load(Ordering::SeqCst) {
            match self.watcher.thread_place() {
                Ok(p) => {
                    thread = p;
                    &thread
                }
                Err(e) => {
                    drop(w);
                    return req.done.complete(-errno_of(&e));
                }
            }
        } else {
            place
        };
        let fd = req.op.fd;
        let s = w.entry(fd);
        let member = s.member(place);
        if !member.is_some_and(|m| m.watches(dir)) {
            let joins = s.in_set() && member.is_none();
            if let Err(e) = watch_for(place, fd, s, dir) {
                if !s.in_set() && !s.kept {
                    w.sockets.remove(&fd);
                }
                drop(w);
                return req.done.complete(-e.raw_os_error().unwrap_or(libc::EIO));
            }
            if joins {
                self.watcher.moves.fetch_add(1, Ordering::Relaxed);
            }
        }
        let target = target_key(&req.done);
        s.reqs.push(Waiter {
            req,
            place: place.clone(),
        });
        prune(fd, s);
        w.fds.insert(target, fd);
    }

    /// Where the events were taken so far.
    pub(crate) fn counts(&self) -> ReadinessCounts {
        let w = &self.watcher;
        ReadinessCounts {
            runtime_sets: w.runtime_sets.load(Ordering::Relaxed),
            moves: w.moves.load(Ordering::Relaxed),
            thread_waits: w.thread_waits.load(Ordering::Relaxed),
            thread_events: w.thread_events.load(Ordering::Relaxed),
        }
    }

    /// How many times the task reading the set of `runtime` was polled
    /// (woken), if that runtime has a set.
    #[cfg(feature = "tokio")]
    pub(crate) fn runtime_polls(&self, runtime: tokio::runtime::Id) -> Option<u64> {
        let runtimes = self
            .watcher
            .runtimes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Some(runtimes.get(&runtime)?.polls.load(Ordering::Relaxed))
    }

    /// Whether the caller runs on the current-thread tokio runtime it has
    /// entered, on the thread that runs it, as this set's waits tell it
    /// (see [`place_on_runtime`]): a wait from a task of that runtime, on
    /// an engine whose sets are read on runtimes, where that runtime's set
    /// (made now if it has none, its task spawned) was last read on this
    /// thread. False before that set's task first ran (tokio names the
    /// runtime entered last, not the one running the task), and for a
    /// future polled directly by `block_on`.
    #[cfg(feature = "tokio")]
    pub(crate) fn runs_current_runtime_here(&self) -> bool {
        self.watcher.on_runtimes && place_on_runtime(&self.watcher).is_some()
    }

    /// Keeps `fd` in the set between waits, until the returned
    /// registration is dropped, which must happen before `fd` is closed.
    pub(crate) fn keep(&self, fd: RawFd) -> Registration {
        self.watcher.lock().entry(fd).kept = true;
        Registration {
            watcher: Arc::downgrade(&self.watcher),
            fd,
        }
    }

    /// Cancels the request whose target `c` names, if it is waiting.
    pub(crate) fn cancel(&self, c: &Cancel) {
        let mut w = self.watcher.lock();
        let key = c.0.as_ptr().cast::<()>() as usize;
        let Some(&fd) = w.fds.get(&key) else {
            return;
        };
        // Not found while a retry has it out of the set: the retry
        // completes it, or puts it back to wait (and the cancel's future
        // is gone, so that retry or the next sees it abandoned).
        let Some(s) = w.sockets.get_mut(&fd) else {
            return;
        };
        let Some(i) = s.reqs.iter().position(|r| c.names(&r.req.done)) else {
            return;
        };
        let req = s.reqs.remove(i).req;
        s.trim_waiters();
        w.fds.remove(&key);
        settle(&mut w, fd);
        drop(w);
        req.done.complete(-libc::ECANCELED);
    }
}

impl Watched {
    /// The most waiters an emptied [`reqs`](Self::reqs) keeps room for:
    /// the room of its first allocation (`Vec`'s least for items this size).
    const KEPT_WAITERS: usize = 4;

    /// Lets go of the room of an emptied waiter list grown past
    /// [`KEPT_WAITERS`](Self::KEPT_WAITERS), so that a socket that once
    /// had many waiters does not hold their room for life.
    fn trim_waiters(&mut self) {
        if self.reqs.is_empty() && self.reqs.capacity() > Self::KEPT_WAITERS {
            self.reqs = Vec::new();
        }
    }

    /// Whether the socket is in a set.
    fn in_set(&self) -> bool {
        !self.sets.is_empty()
    }

    /// The socket's entry in the set `place`, if it is there.
    fn member(&self, place: &Arc<Place>) -> Option<&Member> {
        self.sets.iter().find(|m| Arc::ptr_eq(&m.place, place))
    }

    /// The socket's entry in the set `place`, if it is there, to change.
    fn member_mut(&mut self, place: &Arc<Place>) -> Option<&mut Member> {
        self.sets.iter_mut().find(|m| Arc::ptr_eq(&m.place, place))
    }
}

impl Member {
    /// Whether the set watches the socket for `dir`.
    fn watches(&self, dir: Awaits) -> bool {
        match dir {
            Awaits::Readable => self.reading,
            Awaits::Writable => self.writing,
        }
    }
}

/// Has the set of `place` watch `fd`, known as `s`, for `dir` too (see
/// [`join`]). A call in `dir` has just said not ready; if the socket is
/// ready now, the kernel has queued an event that sets it again (an add
/// or a modify reports at once what the socket is ready for).
fn watch_for(place: &Arc<Place>, fd: RawFd, s: &mut Watched, dir: Awaits) -> io::Result<()> {
    join(
        place,
        fd,
        s,
        dir == Awaits::Readable,
        dir == Awaits::Writable,
    )?;
    let tick = s.ready.tick();
    s.ready.clear(dir, tick);
    Ok(())
}

/// Has the set of `place` watch `fd`, known as `s`, for reading and
/// writing as asked, besides what it watches already: adds it to that
/// set (leaving it in any other, which [`prune`] deletes it from once
/// none of its requests uses that one), or modifies what it is watched
/// for there (once in a socket's stay in a set: the directions watched
/// only grow). A failure leaves the socket and its requests as they were.
fn join(
    place: &Arc<Place>,
    fd: RawFd,
    s: &mut Watched,
    reading: bool,
    writing: bool,
) -> io::Result<()> {
    // SAFETY: `fd` is deleted from its sets before its last waiting
    // request leaves it (see `settle`), or, if `s` is kept, by its
    // `Registration` before the socket closes; until then a waiting
    // request or the socket's owner holds it open.
    let sock = unsafe { socket(fd) };
    let k = key(fd, s);
    if let Some(m) = s.member_mut(place) {
        let (reading, writing) = (m.reading || reading, m.writing || writing);
        if (reading, writing) != (m.reading, m.writing) {
            place.set.modify(sock, k, reading, writing)?;
        }
        m.reading = reading;
        m.writing = writing;
    } else {
        place.set.add(sock, k, reading, writing)?;
        s.sets.push(Member {
            place: place.clone(),
            reading,
            writing,
            retrying: 0,
        });
    }
    Ok(())
}

/// Deletes `fd`, known as `s`, from each set none of its requests waits
/// in or is retried from; if none is used so, from all but the last one
/// it was used in if it is kept, from all if not. Called with the sets
/// locked, while a request that holds `fd` open is still alive (waiting,
/// or just taken out and not yet dropped), or by the owner of a kept
/// socket before it closes.
fn prune(fd: RawFd, s: &mut Watched) {
    let reqs = &s.reqs;
    let used = |m: &Member| m.retrying > 0 || reqs.iter().any(|r| Arc::ptr_eq(&r.place, &m.place));
    let keep_last = s.kept && !s.sets.iter().any(used);
    let last = s.sets.len().saturating_sub(1);
    let mut i = 0;
    s.sets.retain(|m| {
        let stays = used(m) || (keep_last && i == last);
        i += 1;
        if !stays {
            // SAFETY: the caller keeps `fd` open.
            let _ = m.place.set.delete(unsafe { socket(fd) });
        }
        stays
    });
}

/// Clears direction `dir` of `fd`'s readiness after a call that found it
/// not ready, made with the entry at `seen`: true if cleared (no event
/// came since), false if an event came, or the entry is not the one the
/// call saw, and the call is to be made again.
fn clear_seen(w: &mut Waiting, fd: RawFd, dir: Awaits, seen: Option<Seen>) -> bool {
    let Some(seen) = seen else {
        return false;
    };
    match w.sockets.get_mut(&fd) {
        Some(s) if s.in_set() && s.gen == seen.gen => s.ready.clear(dir, seen.tick),
        _ => false,
    }
}

/// Deletes `fd` from the sets nothing keeps it in (see [`prune`]), and
/// forgets it if it is in none and not kept. Called with the sets
/// locked, while a request that holds `fd` open is still alive (waiting,
/// or just taken out and not yet dropped).
fn settle(w: &mut Waiting, fd: RawFd) {
    let Some(s) = w.sockets.get_mut(&fd) else {
        return;
    };
    prune(fd, s);
    if !s.in_set() && !s.kept {
        w.sockets.remove(&fd);
    }
}

/// A socket kept in the set between waits ([`Readiness::keep`]): dropped
/// while the socket is still open, before its descriptor is closed, it
/// deletes the socket from the set, so that nothing of the set reaches
/// the socket that gets the number next.
pub(crate) struct Registration {
    watcher: Weak<Watcher>,
    fd: RawFd,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(watcher) = self.watcher.upgrade() else {
            return;
        };
        let mut w = watcher.lock();
        let Some(s) = w.sockets.remove(&self.fd) else {
            return;
        };
        for m in &s.sets {
            // SAFETY: the socket's owner drops this before closing `fd`.
            let _ = m.place.set.delete(unsafe { socket(self.fd) });
        }
        drop(w);
        // None is left: a waiting request holds the socket, and with it
        // this registration, alive. Dropped unlocked all the same.
        debug_assert!(s.reqs.is_empty());
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        let thread = {
            let _starting = self.watcher.starting.lock();
            self.watcher.stop.store(true, Ordering::SeqCst);
            self.watcher.thread.get().cloned()
        };
        match thread {
            // The thread shuts the sets down once its wait ends.
            Some(place) => {
                let _ = place.set.nudge();
            }
            // No thread was started (and none will be): shut down here.
            None => shut_down(&self.watcher),
        }
    }
}

/// The errno of `e` (`EIO` if it has none), for a request's completion.
fn errno_of(e: &io::Error) -> i32 {
    crate::errno(e).unwrap_or(libc::EIO)
}

/// The watching thread: retries the requests whose socket became ready
/// in its set, `place`, until the engine is gone.
fn watch(watcher: &Watcher, place: &Arc<Place>) {
    let mut events = Vec::new();
    while !watcher.stop.load(Ordering::SeqCst) {
        // An error (none is expected of a valid set) is tried again; the
        // stop's nudge ends the wait.
        watcher.thread_waits.fetch_add(1, Ordering::Relaxed);
        let _ = place.set.wait(&mut events, |key, r| {
            watcher.thread_events.fetch_add(1, Ordering::Relaxed);
            on_event(watcher, place, key, r)
        });
    }
    shut_down(watcher);
}

#[cfg(feature = "tokio")]
impl Watcher {
    /// Whether current-thread runtimes get sets of their own.
    pub(super) fn current_thread_sets(&self) -> bool {
        self.current_thread_sets
    }

    /// Whether the set has stopped (its engine is gone).
    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The set of `runtime`, if it has one.
    pub(super) fn runtime_place(&self, runtime: tokio::runtime::Id) -> Option<Arc<Place>> {
        let runtimes = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
        runtimes.get(&runtime).cloned()
    }

    /// Makes `place` the set of `runtime`, unless it has one already,
    /// which is returned.
    pub(super) fn install(
        &self,
        runtime: tokio::runtime::Id,
        place: &Arc<Place>,
    ) -> Option<Arc<Place>> {
        let mut runtimes = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = runtimes.get(&runtime) {
            return Some(p.clone());
        }
        runtimes.insert(runtime, place.clone());
        self.runtime_sets.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Takes the events waiting in `place`'s set, without waiting, and
    /// serves them; returns whether more may wait (a full take).
    pub(super) fn turn(&self, place: &Arc<Place>) -> bool {
        thread_local! {
            /// The events taken by a turn on this thread (kept: a take
            /// holds 1,024, too many to allocate each time).
            static EVENTS: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
        }
        // A turn within a turn (a waker that polls its task in place) has
        // a buffer of its own.
        let mut fresh = Vec::new();
        EVENTS.with(|kept| {
            let mut kept = kept.try_borrow_mut();
            let events = kept.as_deref_mut().unwrap_or(&mut fresh);
            // An error (none is expected of a valid set) takes nothing:
            // the reactor reports the set again.
            place
                .set
                .take_ready(events, |key, r| on_event(self, place, key, r))
                .unwrap_or(false)
        })
    }

    /// The task reading the set of `place`'s runtime is dropped (its
    /// runtime shut down, or the runtime refused it): no socket joins the
    /// set from now on, and each socket in it joins the thread's set
    /// (which reports at once what it is ready for) with the requests
    /// that waited in the set, so that they are served, then leaves it.
    pub(super) fn leave(&self, runtime: tokio::runtime::Id, place: &Arc<Place>) {
        place.gone.store(true, Ordering::SeqCst);
        {
            let mut runtimes = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
            if runtimes
                .get(&runtime)
                .is_some_and(|p| Arc::ptr_eq(p, place))
            {
                runtimes.remove(&runtime);
            }
        }
        let mut lost = Vec::new();
        let mut w = self.lock();
        for (&fd, s) in w.sockets.iter_mut() {
            let Some(i) = s.sets.iter().position(|m| Arc::ptr_eq(&m.place, place)) else {
                continue;
            };
            let (reading, writing, retrying) = {
                let m = &s.sets[i];
                (m.reading, m.writing, m.retrying)
            };
            // Added to the thread's set (made now if it is not yet) before
            // it is deleted from this one.
            let thread = self
                .thread_place()
                .and_then(|t| join(&t, fd, s, reading, writing).map(|()| t));
            match thread {
                Ok(thread) => {
                    if let Some(m) = s.member_mut(&thread) {
                        m.retrying += retrying;
                    }
                    for r in s.reqs.iter_mut().filter(|r| Arc::ptr_eq(&r.place, place)) {
                        r.place = thread.clone();
                    }
                    self.moves.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    // The kernel's error making or joining the thread's set
                    // (`EMFILE` at the descriptor limit), not a bare `EIO`.
                    let errno = errno_of(&e);
                    let (gone, kept): (Vec<Waiter>, Vec<Waiter>) =
                        s.reqs.drain(..).partition(|r| Arc::ptr_eq(&r.place, place));
                    s.reqs = kept;
                    lost.extend(gone.into_iter().map(|r| (r.req, errno)));
                }
            }
            let m = s.sets.remove(i);
            // SAFETY: as in `prune`: its requests (alive here, `lost`
            // included) or its owner hold `fd` open.
            let _ = m.place.set.delete(unsafe { socket(fd) });
        }
        for (req, _) in &lost {
            w.fds.remove(&target_key(&req.done));
        }
        drop(w);
        for (req, errno) in lost {
            let _ = call_user(move || {
                req.done.complete(-errno);
                drop(req);
            });
        }
    }
}

/// The engine is gone: nobody will await what still waits, which is
/// completed with `ECANCELED`, and the sets let go of every socket. Each
/// runtime's task reading a set is woken, to see that it stopped.
fn shut_down(watcher: &Watcher) {
    #[cfg(feature = "tokio")]
    {
        let places: Vec<Arc<Place>> = watcher
            .runtimes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        // Woken unlocked: a waker may poll its task in place.
        for place in places {
            place.wake();
        }
    }
    let mut w = watcher.lock();
    let left: Vec<(RawFd, Watched)> = w.sockets.drain().collect();
    w.fds.clear();
    for (fd, s) in &left {
        for m in &s.sets {
            // SAFETY: with the lock held, `s.reqs` (alive here) or, for a
            // kept socket, its owner (whose registration takes the lock
            // before the socket closes) hold `fd` open.
            let _ = m.place.set.delete(unsafe { socket(*fd) });
        }
    }
    drop(w);
    for (_, s) in left {
        for Waiter { req, .. } in s.reqs {
            // A panicking waker is reported by the panic hook; the others
            // are still completed.
            let _ = call_user(move || {
                req.done.complete(-libc::ECANCELED);
                drop(req);
            });
        }
    }
}

/// An event of the set of `place` for `event_key`: the socket's
/// readiness is remembered, and the requests waiting in that set in a
/// direction now ready are retried (those waiting in another set are
/// retried by that set's own event).
fn on_event(watcher: &Watcher, place: &Arc<Place>, event_key: u64, r: Readied) {
    let fd = key_fd(event_key);
    let (taken, tick) = {
        let mut w = watcher.lock();
        let Some(s) = w.sockets.get_mut(&fd) else {
            return;
        };
        if key(fd, s) != event_key {
            // Drawn for a socket since closed, whose number `fd` is now.
            return;
        }
        s.ready.set(r);
        let ready = s.ready;
        let now_ready = |r: &Waiter| {
            Arc::ptr_eq(&r.place, place) && awaits(r.req.op.kind()).map_or(true, |a| ready.is(a))
        };
        // Usually every request is (one, in the direction the event
        // reports): drained whole, and the socket's list keeps its room
        // (up to `Watched::KEPT_WAITERS`), so that the socket's next wait
        // allocates nothing.
        let mut taken = Spare::requests();
        if s.reqs.iter().all(now_ready) {
            taken.extend(s.reqs.drain(..).map(|r| r.req));
            s.trim_waiters();
        } else {
            let (now, later): (Vec<Waiter>, Vec<Waiter>) =
                s.reqs.drain(..).partition(|r| now_ready(r));
            s.reqs = later;
            taken.extend(now.into_iter().map(|r| r.req));
        }
        if taken.is_empty() {
            Spare::keep_requests(taken);
            return;
        }
        // The socket stays in the set while the calls run unlocked (it
        // is there: a request waits only in a set its socket is in).
        if let Some(m) = s.member_mut(place) {
            m.retrying += 1;
        }
        (taken, ready.tick())
    };
    retry(watcher, place, fd, taken, tick);
}

/// Tries again `taken`, requests waiting on `fd` in the set of `place`
/// whose direction the event at `tick` made ready, with the sets unlocked
/// during the system calls; made again while events come meanwhile, then
/// completes those that are done and puts back those still not ready
/// (whose futures still want them), their direction cleared, in that
/// set, or in the thread's if the socket left it meanwhile (its runtime
/// dropped its task, see [`Watcher::leave`]).
fn retry(watcher: &Watcher, place: &Arc<Place>, fd: RawFd, mut taken: Vec<Request>, mut tick: u32) {
    let mut done = Spare::completed();
    let mut w = loop {
        let mut again = Vec::new();
        for req in taken.drain(..) {
            let res = attempt(&req, false);
            if not_ready(&req, res) && !req.abandoned() {
                again.push(req);
            } else {
                done.push((req, res));
            }
        }
        let mut w = watcher.lock();
        let Some(s) = w.sockets.get_mut(&fd) else {
            // The set was shut down meanwhile (its engine is gone, and
            // the thread let go of every socket while a runtime's task
            // retried these): nobody awaits them any more.
            done.extend(again.into_iter().map(|req| (req, -libc::ECANCELED)));
            break w;
        };
        if again.is_empty() || s.ready.tick() == tick {
            put_back(watcher, place, s, again, tick, &mut done);
            if done.iter().any(|(req, res)| short_receive(req, *res)) {
                s.ready.clear(Awaits::Readable, tick);
            }
            break w;
        }
        tick = s.ready.tick();
        taken.append(&mut again);
    };
    for (req, _) in &done {
        w.fds.remove(&target_key(&req.done));
    }
    settle(&mut w, fd);
    drop(w);
    // On the watching thread: a panicking waker is reported by the panic
    // hook and the thread goes on serving the other sockets.
    for (req, res) in done.drain(..) {
        let _ = call_user(move || {
            req.done.complete(res);
            drop(req);
        });
    }
    Spare::keep_requests(taken);
    Spare::keep_completed(done);
}

/// The lists a retry on this thread used, emptied, for the next one
/// ([`on_event`], [`retry`]), so that these two are not allocated again
/// per event. An event whose requests are all ready and all done at the
/// first try then allocates nothing; one that leaves some waiting (the
/// list split into those ready and those not) or tries some again
/// (not ready while more events came) still allocates those lists. A
/// list that grew past [`Spare::KEPT`] is let go instead.
struct Spare;

thread_local! {
    static SPARE_REQUESTS: std::cell::Cell<Vec<Request>> =
        const { std::cell::Cell::new(Vec::new()) };
    static SPARE_COMPLETED: std::cell::Cell<Vec<(Request, i32)>> =
        const { std::cell::Cell::new(Vec::new()) };
}

impl Spare {
    /// The most requests a kept list has room for.
    const KEPT: usize = 64;

    /// An empty list for the requests an event retries.
    fn requests() -> Vec<Request> {
        SPARE_REQUESTS
            .try_with(std::cell::Cell::take)
            .unwrap_or_default()
    }

    /// An empty list for the requests a retry completes.
    fn completed() -> Vec<(Request, i32)> {
        SPARE_COMPLETED
            .try_with(std::cell::Cell::take)
            .unwrap_or_default()
    }

    /// Keeps `requests`, empty, for the next event on this thread (a
    /// thread exiting drops it).
    fn keep_requests(requests: Vec<Request>) {
        debug_assert!(requests.is_empty());
        if requests.capacity() <= Self::KEPT {
            let _ = SPARE_REQUESTS.try_with(|c| c.set(requests));
        }
    }

    /// Keeps `completed`, empty, for the next retry on this thread.
    fn keep_completed(completed: Vec<(Request, i32)>) {
        debug_assert!(completed.is_empty());
        if completed.capacity() <= Self::KEPT {
            let _ = SPARE_COMPLETED.try_with(|c| c.set(completed));
        }
    }
}

/// Ends a retry from the set of `place` on the socket `s`: puts `again`,
/// still not ready at `tick`, back to wait in that set, or in the
/// thread's if the socket has left it (see [`retry`]). One that cannot
/// wait there (the thread's set failed to add the socket when it left)
/// is completed with the error, in `done`.
fn put_back(
    watcher: &Watcher,
    place: &Arc<Place>,
    s: &mut Watched,
    again: Vec<Request>,
    tick: u32,
    done: &mut Vec<(Request, i32)>,
) {
    let back = if s.member(place).is_some() {
        place.clone()
    } else {
        match watcher.thread_place() {
            Ok(thread) => thread,
            Err(e) => {
                let errno = -errno_of(&e);
                done.extend(again.into_iter().map(|req| (req, errno)));
                return;
            }
        }
    };
    if let Some(m) = s.member_mut(&back) {
        m.retrying = m.retrying.saturating_sub(1);
    }
    for req in again {
        let Some(dir) = awaits(req.op.kind()) else {
            s.reqs.push(Waiter {
                req,
                place: back.clone(),
            });
            continue;
        };
        s.ready.clear(dir, tick);
        let watched = s.member(&back).is_some_and(|m| m.watches(dir));
        let fd = req.op.fd;
        match if watched {
            Ok(())
        } else {
            watch_for(&back, fd, s, dir)
        } {
            Ok(()) => s.reqs.push(Waiter {
                req,
                place: back.clone(),
            }),
            Err(e) => done.push((req, -e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::net::UnixStream;
    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::op::action::{Action, RecvArgs, SendArgs};
    use crate::op::Op;

    /// An event's report of a socket readable.
    const READABLE: Readied = Readied {
        readable: true,
        writable: false,
        read_closed: false,
        write_closed: false,
    };

    /// A receive's target: its result, and the buffer the kernel fills.
    struct Received {
        result: Mutex<Option<i32>>,
        /// Notified when the result is set.
        set: Condvar,
        buf: Box<[u8; 8]>,
    }

    impl Complete for Received {
        fn complete(&self, res: i32) {
            *self.result.lock().unwrap() = Some(res);
            self.set.notify_all();
        }
    }

    fn result(t: &Received) -> Option<i32> {
        *t.result.lock().unwrap()
    }

    /// A receive on `sock` into the target's own buffer.
    fn recv(sock: &UnixStream) -> (Arc<Received>, Request) {
        let mut buf = Box::new([0u8; 8]);
        let args = RecvArgs {
            buf: buf.as_mut_ptr(),
            len: buf.len(),
        };
        // SAFETY: the buffer is on the heap, owned by the target, which
        // the request keeps until it is completed; the socket outlives the
        // test's set.
        let op = unsafe { Op::from_action(sock.as_raw_fd(), Action::Recv(args), None) };
        let target = Arc::new(Received {
            result: Mutex::new(None),
            set: Condvar::new(),
            buf,
        });
        let done: Arc<dyn Complete> = target.clone();
        (target, Request { op, done })
    }

    /// A one-byte send on `sock` from the target's own buffer.
    fn send(sock: &UnixStream) -> (Arc<Received>, Request) {
        let buf = Box::new([1u8; 8]);
        let args = SendArgs {
            buf: buf.as_ptr(),
            len: 1,
        };
        // SAFETY: as for `recv`.
        let op = unsafe { Op::from_action(sock.as_raw_fd(), Action::Send(args), None) };
        let target = Arc::new(Received {
            result: Mutex::new(None),
            set: Condvar::new(),
            buf,
        });
        let done: Arc<dyn Complete> = target.clone();
        (target, Request { op, done })
    }

    fn indexed(r: &Readiness) -> usize {
        r.watcher.waiting.lock().unwrap().fds.len()
    }

    /// Waits for the target's result (a minute at most: a result that
    /// never comes fails the test instead of hanging the run).
    fn settled(t: &Received) -> i32 {
        let (res, wait) = t
            .set
            .wait_timeout_while(t.result.lock().unwrap(), Duration::from_secs(60), |r| {
                r.is_none()
            })
            .unwrap();
        assert!(!wait.timed_out(), "the receive never completed");
        res.unwrap()
    }

    /// The socket inode behind `fd`, as `/proc` names it.
    fn inode(fd: RawFd) -> u64 {
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        let link = link.to_str().unwrap();
        let ino = link
            .strip_prefix("socket:[")
            .and_then(|l| l.strip_suffix(']'));
        ino.unwrap().parse().unwrap()
    }

    /// The `(descriptor, inode)` of each file in the set, as the
    /// kernel lists them in the epoll descriptor's `fdinfo`.
    fn in_set(r: &Readiness) -> Vec<(RawFd, u64)> {
        let epfd = r.watcher.thread_place().unwrap().set.as_fd().as_raw_fd();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{epfd}")).unwrap();
        let field = |line: &str, name: &str| -> Option<String> {
            let at = line.find(name)? + name.len();
            let rest = line[at..].trim_start();
            Some(rest.split_whitespace().next()?.to_string())
        };
        info.lines()
            .filter(|l| l.starts_with("tfd:"))
            .map(|l| {
                let fd = field(l, "tfd:").unwrap().parse().unwrap();
                let ino = u64::from_str_radix(&field(l, "ino:").unwrap(), 16).unwrap();
                (fd, ino)
            })
            .collect()
    }

    /// A socket kept in the set between waits, then closed while in it
    /// (armed, with its file still open through a duplicate), and a new
    /// socket given the same descriptor number: the set lets go of the
    /// closed socket before its number is reused, the new socket's
    /// receive gets the new socket's bytes and never the old one's, and
    /// an event drawn under the old socket's key does not reach it.
    #[test]
    fn a_reused_descriptor_number_gets_nothing_of_the_closed_socket() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let a_file = a.try_clone().unwrap();
        let n = a.as_raw_fd();
        let a_ino = inode(n);
        let kept = r.keep(n);

        // A receive waits and completes: the socket stays in the set.
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), None);
        (&a_peer).write_all(b"a").unwrap();
        assert_eq!(settled(&t), 1);
        assert_eq!(t.buf[0], b'a');
        // Another waits and is cancelled: the socket stays armed.
        let (t, req) = recv(&a);
        r.submit(req);
        let name: Arc<dyn Complete> = t.clone();
        r.cancel(&Cancel(Arc::downgrade(&name)));
        assert_eq!(result(&t), Some(-libc::ECANCELED));
        assert!(in_set(&r).contains(&(n, a_ino)), "not kept in the set");
        let old_key = key(n, &r.watcher.waiting.lock().unwrap().sockets[&n]);

        // Closed the way an `OwnedSocket` closes: out of the set, then
        // the number released, here to a new socket at once (`dup2`
        // closes `n` and reuses it in one step, so that no other thread
        // of the test process takes the number meanwhile).
        drop(kept);
        let (b, b_peer) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let n = std::os::fd::IntoRawFd::into_raw_fd(a);
        // libc: std has no dup2.
        // SAFETY: `n` was `a`'s, given up above; `b`'s own descriptor is
        // closed with `b` below.
        let at_n = unsafe { libc::dup2(b.as_raw_fd(), n) };
        assert_eq!(at_n, n, "{}", io::Error::last_os_error());
        drop(b);
        // SAFETY: `n` is now an open socket owned by nothing else.
        let b = unsafe { <UnixStream as std::os::fd::FromRawFd>::from_raw_fd(n) };
        assert!(
            in_set(&r).iter().all(|&(_, ino)| ino != a_ino),
            "the closed socket is still in the set"
        );
        let b_ino = inode(n);
        let kept = r.keep(n);
        let (t, req) = recv(&b);
        r.submit(req);
        assert_eq!(result(&t), None);
        assert!(in_set(&r).contains(&(n, b_ino)));
        assert_ne!(
            key(n, &r.watcher.waiting.lock().unwrap().sockets[&n]),
            old_key
        );

        // The old socket's file is readable, and an event under its key
        // comes: neither reaches the new socket's receive.
        (&a_peer).write_all(b"A").unwrap();
        on_event(
            &r.watcher,
            &r.watcher.thread_place().unwrap(),
            old_key,
            READABLE,
        );
        assert_eq!(result(&t), None);
        assert_eq!(r.watcher.waiting.lock().unwrap().sockets[&n].reqs.len(), 1);

        (&b_peer).write_all(b"b").unwrap();
        assert_eq!(settled(&t), 1);
        assert_eq!(t.buf[0], b'b');
        let mut left = [0u8; 2];
        assert_eq!(std::io::Read::read(&mut &a_file, &mut left).unwrap(), 1);
        assert_eq!(left[0], b'A', "the old socket's byte went elsewhere");
        drop(kept);
        drop(b);
        // (The set also holds the poller's own nudge descriptor.)
        assert!(in_set(&r).iter().all(|&(_, ino)| ino != b_ino));
    }

    /// Whether `fd`'s readiness has its readable bit.
    fn readable(r: &Readiness, fd: RawFd) -> bool {
        r.watcher.lock().sockets[&fd].ready.is(Awaits::Readable)
    }

    /// Waits (a minute at most) until an event has set `fd` readable.
    fn until_readable(r: &Readiness, fd: RawFd) {
        let start = Instant::now();
        while !readable(r, fd) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no event set the socket readable"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A receive that got less than it asked for clears the socket's
    /// readable bit, and the next receive then waits without being tried
    /// and still gets the bytes that come; bytes that come while no
    /// receive waits set the bit again, and the next receive is made at
    /// once; a full receive leaves the bit set.
    #[test]
    fn a_receive_after_a_short_one_waits_and_loses_nothing() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let n = a.as_raw_fd();
        let kept = r.keep(n);

        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), None);
        (&a_peer).write_all(b"a").unwrap();
        assert_eq!(settled(&t), 1);
        assert!(!readable(&r, n), "a short receive left the socket readable");

        // Nothing came: the next receive waits untried, and gets what comes.
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), None);
        assert_eq!(r.watcher.lock().sockets[&n].reqs.len(), 1);
        (&a_peer).write_all(b"bc").unwrap();
        assert_eq!(settled(&t), 2);
        assert_eq!(&t.buf[..2], b"bc");

        // Bytes come while no receive waits: the next is made at once.
        (&a_peer).write_all(&[b'd'; 9]).unwrap();
        until_readable(&r, n);
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), Some(8), "a receive was not made at once");
        assert!(readable(&r, n), "a full receive cleared the bit");
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), Some(1), "a receive was not made at once");
        assert!(!readable(&r, n));
        drop(kept);
    }

    /// A peer that sends its last bytes and ends its stream: the
    /// receive that takes the bytes (less than it asked for) leaves the
    /// next one to find the end at once, which the set reports only once.
    #[test]
    fn the_end_of_stream_after_a_short_receive_is_found() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let n = a.as_raw_fd();
        let kept = r.keep(n);
        let (t, req) = recv(&a);
        r.submit(req);
        (&a_peer).write_all(b"x").unwrap();
        assert_eq!(settled(&t), 1);

        (&a_peer).write_all(b"ab").unwrap();
        a_peer.shutdown(std::net::Shutdown::Write).unwrap();
        // Both reported (the end seen) before the receives are made.
        let start = Instant::now();
        let ended = |r: &Readiness| {
            let mut w = r.watcher.lock().sockets[&n].ready;
            w.clear(Awaits::Readable, w.tick()) && w.is(Awaits::Readable)
        };
        while !ended(&r) {
            assert!(start.elapsed() < Duration::from_secs(60), "no end");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), Some(2));
        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(settled(&t), 0, "the end of stream was lost");
        drop(kept);
    }

    /// How many `epoll_ctl` calls the readiness thread's set has made.
    fn set_ctls(r: &Readiness) -> usize {
        let place = r.watcher.thread_place().unwrap();
        place.set.ctls.load(Ordering::Relaxed)
    }

    /// The event mask the set holds for `fd`, from its `fdinfo`.
    fn mask_in_set(r: &Readiness, fd: RawFd) -> Option<u32> {
        let epfd = r.watcher.thread_place().unwrap().set.as_fd().as_raw_fd();
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{epfd}")).unwrap();
        info.lines().find_map(|l| {
            let mut words = l.split_whitespace();
            let (Some("tfd:"), Some(tfd), Some("events:"), Some(mask)) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return None;
            };
            (tfd.parse() == Ok(fd)).then(|| u32::from_str_radix(mask, 16).unwrap())
        })
    }

    /// The mask the set shows for a socket watched edge-triggered for
    /// `dirs` and its peer's end of stream (the kernel always adds
    /// `EPOLLERR | EPOLLHUP`).
    fn edge(dirs: libc::c_int) -> u32 {
        (dirs | libc::EPOLLRDHUP | libc::EPOLLET | libc::EPOLLERR | libc::EPOLLHUP) as u32
    }

    /// A kept socket waited on many times is added to the set once,
    /// edge-triggered, for the direction it waits in, and neither
    /// re-armed nor deleted between its waits; a wait in the other
    /// direction adds that direction, once.
    #[test]
    fn a_kept_socket_waited_on_many_times_is_added_once() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let n = a.as_raw_fd();
        let kept = r.keep(n);
        assert_eq!(mask_in_set(&r, n), None, "in the set before any wait");
        for i in 0..50u8 {
            let (t, req) = recv(&a);
            r.submit(req);
            assert_eq!(result(&t), None, "receive {i} did not wait");
            (&a_peer).write_all(&[i]).unwrap();
            assert_eq!(settled(&t), 1);
            assert_eq!(t.buf[0], i);
        }
        assert_eq!(set_ctls(&r), 1);
        let mask = mask_in_set(&r, n).expect("not in the set");
        assert_eq!(mask, edge(libc::EPOLLIN), "mask {mask:#x}");

        // A send that fills the socket, then waits for room.
        let chunk = vec![7u8; 64 << 10];
        let mut filled = 0;
        loop {
            match std::io::Write::write(&mut &a, &chunk) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let (t, req) = send(&a);
        r.submit(req);
        assert_eq!(result(&t), None, "the send did not wait");
        // Everything the fill wrote, then the send's byte (which may be
        // read before the send's result is recorded: the wait is for the
        // result itself).
        // A send the watcher never makes fails the read after a minute.
        a_peer
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut sink = vec![0u8; filled + 1];
        std::io::Read::read_exact(&mut &a_peer, &mut sink).expect("the send's byte never came");
        assert_eq!(sink[filled], 1, "the send's byte");
        assert_eq!(settled(&t), 1);

        // Added, then watched for writing too: nothing more.
        assert_eq!(set_ctls(&r), 2);
        let mask = mask_in_set(&r, n).expect("not in the set");
        assert_eq!(mask, edge(libc::EPOLLIN | libc::EPOLLOUT), "mask {mask:#x}");
        drop(kept);
        assert_eq!(mask_in_set(&r, n), None, "left in the set after close");
    }

    /// A receive waits in the thread's set; another, on the same socket,
    /// is to wait in a set that fails to add it: that one completes with
    /// the error, and the first still waits where it was, its socket
    /// still in the thread's set, and gets the bytes that come.
    #[test]
    fn a_failed_add_to_another_set_leaves_the_waiting_requests_served() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let n = a.as_raw_fd();
        let kept = r.keep(n);
        let (first, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&first), None, "the receive did not wait");

        let failing = Arc::new(Place::of(EpollSet::failing().unwrap()));
        let (second, req) = recv(&a);
        r.park(r.watcher.lock(), req, Awaits::Readable, &failing);
        assert_eq!(result(&second), Some(-libc::EINVAL));
        assert!(
            mask_in_set(&r, n).is_some(),
            "the socket left the thread's set"
        );
        assert_eq!(r.watcher.lock().sockets[&n].reqs.len(), 1);

        (&a_peer).write_all(b"a").unwrap();
        assert_eq!(settled(&first), 1);
        assert_eq!(first.buf[0], b'a');
        drop(kept);
    }

    /// The room a socket's waiter list holds once it empties: a list
    /// that held one waiter keeps its room for the next wait; one that
    /// held 400 (served by one event, or cancelled one by one) lets go
    /// of it, down to [`Watched::KEPT_WAITERS`] waiters' room at most.
    #[test]
    fn an_emptied_waiter_list_keeps_little_room() {
        let r = Readiness::new().unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let n = a.as_raw_fd();
        let kept = r.keep(n);
        let room = |r: &Readiness| r.watcher.lock().sockets[&n].reqs.capacity();

        let (t, req) = recv(&a);
        r.submit(req);
        assert_eq!(result(&t), None, "the receive did not wait");
        (&a_peer).write_all(b"a").unwrap();
        assert_eq!(settled(&t), 1);
        let after_one = room(&r);
        assert!(
            (1..=Watched::KEPT_WAITERS).contains(&after_one),
            "room for {after_one} waiters after one wait"
        );

        let waiting = |r: &Readiness| -> Vec<Arc<Received>> {
            (0..400)
                .map(|i| {
                    let (t, req) = recv(&a);
                    r.submit(req);
                    assert_eq!(result(&t), None, "receive {i} did not wait");
                    t
                })
                .collect()
        };
        let targets = waiting(&r);
        assert!(room(&r) >= 400);
        (&a_peer).write_all(&[b'b'; 8 * 400]).unwrap();
        for t in &targets {
            assert_eq!(settled(t), 8);
        }
        assert!(
            room(&r) <= Watched::KEPT_WAITERS,
            "room for {} waiters after an event served 400",
            room(&r)
        );

        let targets = waiting(&r);
        for t in &targets {
            let name: Arc<dyn Complete> = t.clone();
            r.cancel(&Cancel(Arc::downgrade(&name)));
            assert_eq!(result(t), Some(-libc::ECANCELED));
        }
        assert!(
            room(&r) <= Watched::KEPT_WAITERS,
            "room for {} waiters after 400 cancels",
            room(&r)
        );
        drop(kept);
    }

    /// Among many sockets with a receive waiting, a cancel takes out the
    /// one it names, alone, and every request leaves the cancel index
    /// with it (cancelled, completed by an event): nothing is left behind
    /// to grow with the connections served.
    #[test]
    fn a_cancel_takes_out_its_own_request_among_many() {
        let r = Readiness::new().unwrap();
        let pairs: Vec<(UnixStream, UnixStream)> = (0..64)
            .map(|_| {
                let (a, b) = UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                (a, b)
            })
            .collect();
        let targets: Vec<Arc<Received>> = pairs
            .iter()
            .map(|(a, _)| {
                let (target, req) = recv(a);
                r.submit(req);
                target
            })
            .collect();
        assert!(targets.iter().all(|t| result(t).is_none()));
        assert_eq!(indexed(&r), pairs.len());

        let cancelled = 17;
        let name: Arc<dyn Complete> = targets[cancelled].clone();
        r.cancel(&Cancel(Arc::downgrade(&name)));
        assert_eq!(result(&targets[cancelled]), Some(-libc::ECANCELED));
        assert_eq!(indexed(&r), pairs.len() - 1);
        for (i, t) in targets.iter().enumerate() {
            if i != cancelled {
                assert_eq!(result(t), None, "a cancel took out receive {i}");
            }
        }

        for (_, b) in &pairs {
            std::io::Write::write_all(&mut &*b, b"x").unwrap();
        }
        for (i, t) in targets.iter().enumerate() {
            if i == cancelled {
                continue;
            }
            assert_eq!(settled(t), 1, "receive {i}");
            assert_eq!(t.buf[0], b'x');
        }
        // The index entries leave under the lock before the completions
        // are delivered.
        assert_eq!(indexed(&r), 0);
        drop(r);
    }
}
