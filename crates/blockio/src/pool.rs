//! A pool of threads that each take jobs from one queue: the thread-pool
//! backend of both engines runs on it.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// A worker's stack: its jobs are system calls a few frames deep (a
/// batch's reads and writes, a blocking file operation and the wake of
/// its waiter), so 256 KiB leaves them ample room, where the default
/// 2 MiB of each of up to 64 workers reserves address space a limit on it
/// (`ulimit -v`) counts.
const WORKER_STACK: usize = 256 << 10;

/// Up to `threads` workers named `{name}-{i}`, each running `handle` on
/// the jobs it takes, started as the jobs need them: one at once, another
/// whenever a job is queued while more jobs wait than workers are idle.
///
/// A worker that cannot be started (a limit on address space, `ulimit -v`,
/// or on threads) leaves the jobs to the workers running; the next job
/// queued while more jobs wait than workers are idle tries again, so a
/// limit that is lifted (or a transient failure) does not shrink the pool
/// for good. Only the first worker's failing is an error.
///
/// Dropping the pool closes its queue: the workers finish the jobs already
/// queued and exit. It does not wait for them, so the last handle may be
/// dropped on one of the pool's own workers (a completion that wakes a task
/// which drops its engine) without a deadlock.
pub(crate) struct WorkerPool<J: Send + 'static> {
    /// The queue's sending end (None once shut down, or with no workers);
    /// its lock also serialises the starting of workers.
    tx: Mutex<Option<Sender<J>>>,
    /// What the workers share with the pool.
    shared: Arc<Shared<J>>,
    /// The workers' name, numbered.
    name: String,
    /// What a worker runs on each job.
    handle: fn(J),
}

/// The queue's receiving end and the counts that say when to start a worker.
struct Shared<J> {
    rx: Mutex<Receiver<J>>,
    /// The most workers.
    bound: AtomicUsize,
    /// Workers started.
    started: AtomicUsize,
    /// Workers waiting for a job.
    idle: AtomicUsize,
    /// Jobs queued and not yet taken by a worker.
    queued: AtomicUsize,
    /// Worker starts still to fail, as a limit would fail them.
    #[cfg(test)]
    fail_starts: AtomicUsize,
    /// Where the next job taken pauses between its two counts: it says so
    /// on the sender, then waits on the receiver.
    #[cfg(test)]
    pause: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl<J> Shared<J> {
    /// The counts of a pool of at most `bound` workers, none started,
    /// whose jobs come from `rx`.
    fn new(rx: Receiver<J>, bound: usize) -> Shared<J> {
        Shared {
            rx: Mutex::new(rx),
            bound: AtomicUsize::new(bound),
            started: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            #[cfg(test)]
            fail_starts: AtomicUsize::new(0),
            #[cfg(test)]
            pause: Mutex::new(None),
        }
    }
}

impl<J: Send + 'static> WorkerPool<J> {
    /// A pool of at most `threads` workers (at least one), one started now;
    /// an error only when that one cannot be.
    pub(crate) fn new(threads: usize, name: &str, handle: fn(J)) -> io::Result<WorkerPool<J>> {
        let (tx, rx) = mpsc::channel::<J>();
        let pool = WorkerPool {
            tx: Mutex::new(Some(tx)),
            shared: Arc::new(Shared::new(rx, threads.max(1))),
            name: name.to_owned(),
            handle,
        };
        pool.start_worker()?;
        Ok(pool)
    }

    /// A pool of no workers, whose queue takes no jobs (every job sent is
    /// given back): for a user that does all the work itself when no
    /// thread can be had (a limit on processes, `ulimit -u`).
    pub(crate) fn none() -> WorkerPool<J> {
        let (_, rx) = mpsc::channel::<J>();
        WorkerPool {
            tx: Mutex::new(None),
            shared: Arc::new(Shared::new(rx, 0)),
            name: String::new(),
            handle: drop,
        }
    }

    /// How many workers the pool may have (started or to be started).
    pub(crate) fn threads(&self) -> usize {
        self.shared.bound.load(Ordering::Acquire)
    }

    /// How many workers have been started.
    #[cfg(test)]
    fn started(&self) -> usize {
        self.shared.started.load(Ordering::Acquire)
    }

    /// Starts one more worker (called with `tx` locked, or before the pool
    /// is shared).
    fn start_worker(&self) -> io::Result<()> {
        let shared = &self.shared;
        let i = shared.started.load(Ordering::Acquire);
        #[cfg(test)]
        if shared
            .fail_starts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mine = Arc::clone(shared);
        let handle = self.handle;
        crate::arenas::spawn(
            &format!("{}-{i}", self.name),
            Some(WORKER_STACK),
            move || work(&mine, handle),
        )?;
        shared.started.store(i + 1, Ordering::Release);
        // (idle until it takes a job: counted now, so that jobs queued
        // before it first waits start no other worker for themselves)
        shared.idle.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Starts workers while more jobs wait than workers are idle, up to
    /// the bound and at most `sent` (the jobs just queued: so the workers
    /// started are never more than one and the jobs ever sent, however
    /// the workers are scheduled); when one cannot be started the jobs are
    /// left to those running, and the next send tries again (called with
    /// `tx` locked).
    fn grow(&self, sent: usize) {
        let s = &self.shared;
        for _ in 0..sent {
            if s.queued.load(Ordering::Acquire) <= s.idle.load(Ordering::Acquire)
                || s.started.load(Ordering::Acquire) >= s.bound.load(Ordering::Acquire)
                || self.start_worker().is_err()
            {
                return;
            }
        }
    }

    /// Queues `jobs` in order, starting workers as they need; gives back,
    /// from the first, those that no worker will take (the pool is
    /// shutting down).
    pub(crate) fn send(&self, jobs: impl IntoIterator<Item = J>) -> Vec<J> {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let mut refused = Vec::new();
        let mut sent = 0;
        for job in jobs {
            match tx.as_ref() {
                Some(sender) if refused.is_empty() => {
                    self.shared.queued.fetch_add(1, Ordering::AcqRel);
                    match sender.send(job) {
                        Ok(()) => sent += 1,
                        Err(mpsc::SendError(job)) => {
                            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                            refused.push(job);
                        }
                    }
                }
                _ => refused.push(job),
            }
        }
        if tx.is_some() {
            self.grow(sent);
        }
        refused
    }
}

fn work<J>(shared: &Shared<J>, handle: fn(J)) {
    loop {
        let job = match shared.rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        // Idle first: a send between the two sees one more job waiting
        // than workers idle and starts a worker (one too many at worst),
        // where the other order would let it see the job as taken by an
        // idle worker and start none.
        shared.idle.fetch_sub(1, Ordering::AcqRel);
        #[cfg(test)]
        if let Some((paused, resume)) = shared.pause.lock().unwrap().take() {
            paused.send(()).unwrap();
            resume.recv().unwrap();
        }
        shared.queued.fetch_sub(1, Ordering::AcqRel);
        handle(job);
        shared.idle.fetch_add(1, Ordering::AcqRel);
    }
}

impl<J: Send + 'static> Drop for WorkerPool<J> {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;
    use std::time::{Duration, Instant};

    /// A bound that only a hang reaches: a wait that runs past it fails
    /// the test instead of blocking the run.
    const HANG: Duration = Duration::from_secs(60);

    /// The next message on `rx`, `what` naming it in the failure of a
    /// wait past [`HANG`].
    fn next<T>(rx: &Receiver<T>, what: &str) -> T {
        rx.recv_timeout(HANG)
            .unwrap_or_else(|e| panic!("{what}: {e} within {HANG:?}"))
    }

    /// What a test's jobs share: where each job reports its number as it
    /// starts, and, for a job numbered 1000 or more, what it then waits
    /// for before it ends. One per test (the tests run at once).
    struct Line {
        reports: Mutex<Option<mpsc::SyncSender<usize>>>,
        go: Mutex<Option<Receiver<()>>>,
    }

    impl Line {
        const fn new() -> Line {
            Line {
                reports: Mutex::new(None),
                go: Mutex::new(None),
            }
        }

        /// Opens the line: the receiver of the reports, the sender that
        /// lets a waiting job end.
        fn open(&self) -> (Receiver<usize>, Sender<()>) {
            let (report, reports) = sync_channel(100);
            let (go, went) = mpsc::channel();
            *self.reports.lock().unwrap() = Some(report);
            *self.go.lock().unwrap() = Some(went);
            (reports, go)
        }

        fn job(&self, n: usize) {
            if let Some(tx) = self.reports.lock().unwrap().as_ref() {
                tx.send(n).unwrap();
            }
            if n >= 1000 {
                let go = self.go.lock().unwrap();
                go.as_ref().unwrap().recv().unwrap();
            }
        }
    }

    static GROWING: Line = Line::new();
    static FAILING: Line = Line::new();
    static TAKING: Line = Line::new();

    /// Waits until every worker started waits for a job (the event that
    /// ends a job's run: its worker counted idle again).
    fn all_idle<J: Send + 'static>(pool: &WorkerPool<J>) {
        let start = Instant::now();
        while pool.shared.idle.load(Ordering::Acquire) < pool.started() {
            assert!(start.elapsed() < HANG, "a worker never waited again");
            std::thread::yield_now();
        }
    }

    #[test]
    fn workers_start_as_jobs_need_them_up_to_the_bound() {
        let (reports, go) = GROWING.open();
        let pool = WorkerPool::new(8, "pool-test", |n| GROWING.job(n)).unwrap();
        assert_eq!(pool.started(), 1, "one worker at first");
        assert_eq!(pool.threads(), 8);
        // One job at a time, each sent once the last has ended and its
        // worker waits again: that one worker takes them all.
        for i in 0..20 {
            assert!(pool.send([i]).is_empty());
            assert_eq!(next(&reports, "a job's start"), i);
            all_idle(&pool);
        }
        assert_eq!(pool.started(), 1);
        // Eight jobs that wait, all begun: eight workers at once.
        assert!(pool.send(1000..1008).is_empty());
        let mut begun: Vec<usize> = (0..8).map(|_| next(&reports, "a job's start")).collect();
        begun.sort_unstable();
        assert_eq!(begun, (1000..1008).collect::<Vec<_>>());
        assert_eq!(pool.started(), 8);
        // A ninth waits for one of them: the bound holds.
        assert!(pool.send([8]).is_empty());
        assert_eq!(pool.started(), 8);
        for _ in 0..8 {
            go.send(()).unwrap();
        }
        assert_eq!(next(&reports, "the ninth job's start"), 8);
        *GROWING.reports.lock().unwrap() = None;
    }

    #[test]
    fn a_worker_that_fails_to_start_is_tried_again_on_the_next_send() {
        let (reports, go) = FAILING.open();
        let pool = WorkerPool::new(4, "pool-fail", |n| FAILING.job(n)).unwrap();
        // The one worker busy with a job that waits.
        assert!(pool.send([1000]).is_empty());
        assert_eq!(next(&reports, "the first job's start"), 1000);
        // A second job that waits, sent when no worker can start: queued.
        pool.shared.fail_starts.store(1, Ordering::Release);
        assert!(pool.send([1001]).is_empty());
        assert_eq!(pool.started(), 1);
        assert_eq!(pool.threads(), 4, "the bound is kept");
        // The next send starts workers again (one per job it sends): the
        // three jobs begin while the first still waits.
        assert!(pool.send([1, 2]).is_empty());
        let mut begun = [0; 3].map(|_| next(&reports, "a job's start"));
        begun.sort_unstable();
        assert_eq!(begun, [1, 2, 1001]);
        assert!(pool.started() <= 4);
        for _ in 0..2 {
            go.send(()).unwrap();
        }
        *FAILING.reports.lock().unwrap() = None;
    }

    #[test]
    fn a_job_sent_while_a_worker_takes_one_starts_a_worker() {
        let (reports, go) = TAKING.open();
        let pool = WorkerPool::new(4, "pool-take", |n| TAKING.job(n)).unwrap();
        let (paused, is_paused) = mpsc::channel();
        let (resume, resumed) = mpsc::channel();
        *pool.shared.pause.lock().unwrap() = Some((paused, resumed));
        // The one worker takes a job that waits, and pauses between its
        // counts; a job sent then finds no idle worker and starts one.
        assert!(pool.send([1000]).is_empty());
        next(&is_paused, "the worker's pause");
        assert!(pool.send([1]).is_empty());
        assert!(pool.started() >= 2, "{}", pool.started());
        resume.send(()).unwrap();
        let mut begun = [
            next(&reports, "a job's start"),
            next(&reports, "a job's start"),
        ];
        begun.sort_unstable();
        assert_eq!(begun, [1, 1000]);
        go.send(()).unwrap();
        *TAKING.reports.lock().unwrap() = None;
    }
}
