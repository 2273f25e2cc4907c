//! What serving cached async reads many per system call could gain: the
//! CPU per cached 4 KiB read (user + system, `getrusage`) of eight ways of
//! reading a cached file at pseudo-random offsets for a given time
//! (`docs/benchmarks.md`, "The async API's cached reads at their first
//! poll"):
//!
//! * `batch`: the batch engine, 64 reads per `Engine::submit_into`, every
//!   read through io_uring (`ReadPath::AlwaysSubmit`), one thread (the
//!   `uring` strategy of `blockio-bench read`);
//! * `pread`: a `pread` loop on this thread, no runtime: one system call
//!   per read, nothing else;
//! * `bare-task`: a raw io_uring loop, 64 reads per `io_uring_enter`, in
//!   one tokio task: the batch with the runtime around it;
//! * `task-pread`: 64 tokio tasks, each read a plain `pread` made in the
//!   task, yielding once every 128 reads as a task whose reads are all
//!   served at their first poll does: tokio's part of `inline`, without
//!   blockio's future;
//! * `task-preadv2`: the same with each read a `preadv2(RWF_NOWAIT)` of
//!   one buffer, made as the async read's try at its first poll makes it
//!   (the system call itself, no libc wrapper): the kernel's part of
//!   `inline`'s read against `pread`'s;
//! * `task-pread-arcs`: the same as `task-pread`, each read also taking and dropping two
//!   reference counts that every task shares (as an async read's future
//!   takes its engine's and its file's);
//! * `inline`: 64 tokio tasks, `AsyncFile::read_at(...).await` (cached
//!   reads served at their first poll, one `preadv2` each);
//! * `submit`: the same with every read sent to the ring
//!   (`ReadPath::AlwaysSubmit`);
//! * `ring-tasks`: 64 tokio tasks whose reads are queued at their first
//!   poll and submitted by one task, all those of a turn in one
//!   `io_uring_enter` (cached reads complete inside it), which then wakes
//!   their tasks: the least a read sent to a ring from a task costs (no
//!   allocation, no lock per read beyond the queue's, preallocated
//!   slots), against which `inline` is compared.
//!
//! ```sh
//! cargo build --release --features tokio --example warm_batch_ceiling
//! target/release/examples/warm_batch_ceiling FILE MODE SECONDS [current|multi]
//! ```
//!
//! `multi` (the default) is tokio's multi-thread runtime with one worker
//! per CPU, as `blockio-bench read` builds it. Prints one line: the mode,
//! reads, seconds, CPU µs per read, and reads per `io_uring_enter` where
//! the mode counts them.

use std::future::poll_fn;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use blockio::aio::{AsyncEngine, AsyncFile};
use blockio::{AlignedBuf, Engine, Op, ReadPath};
use io_uring::{opcode, types, IoUring};

/// Reads in flight (tasks, or reads per batch).
const DEPTH: usize = 64;
/// Bytes per read.
const BLOCK: u64 = 4096;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, mode, seconds, rest @ ..] = &args[..] else {
        return Err("usage: warm_batch_ceiling FILE MODE SECONDS [current|multi]".into());
    };
    let seconds: f64 = seconds
        .parse()
        .map_err(|_| format!("SECONDS: expected a number, got {seconds:?}"))?;
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let blocks = file.metadata()?.len() / BLOCK;
    if blocks == 0 {
        return Err(format!("{path}: smaller than one 4 KiB block").into());
    }
    let rt = match rest.first().map(String::as_str) {
        Some("current") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        None | Some("multi") => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        Some(other) => return Err(format!("flavour {other:?}: expected current or multi").into()),
    };
    let w = Work {
        file: Arc::new(file),
        path: path.into(),
        blocks,
        stop: Arc::new(AtomicBool::new(false)),
        enters: Arc::new(AtomicU64::new(0)),
    };
    let before = cpu();
    let start = Instant::now();
    let stop = w.stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    let reads = match mode.as_str() {
        "batch" => batch(&w)?,
        "pread" => pread_loop(&w)?,
        "bare-task" => rt.block_on(rt.spawn(bare_task(w.clone())))??,
        "task-pread" => rt.block_on(pread_tasks(w.clone(), false, false))?,
        "task-preadv2" => rt.block_on(pread_tasks(w.clone(), false, true))?,
        "task-pread-arcs" => rt.block_on(pread_tasks(w.clone(), true, false))?,
        "inline" => rt.block_on(tasks_on_engine(w.clone(), ReadPath::Auto))?,
        "submit" => rt.block_on(tasks_on_engine(w.clone(), ReadPath::AlwaysSubmit))?,
        "ring-tasks" => rt.block_on(ring_tasks(w.clone()))?,
        other => {
            return Err(format!(
                "mode {other:?}: expected batch, pread, bare-task, task-pread, task-preadv2, task-pread-arcs, \
                 inline, submit or ring-tasks"
            )
            .into())
        }
    };
    let wall = start.elapsed().as_secs_f64();
    let cpu_us = (cpu() - before).as_secs_f64() * 1e6 / reads as f64;
    let enters = w.enters.load(Ordering::Relaxed);
    let per_enter = if enters > 0 {
        format!("{:.1}", reads as f64 / enters as f64)
    } else {
        "-".into()
    };
    println!("{mode} reads {reads} seconds {wall:.3} cpu_us_per_read {cpu_us:.3} reads_per_enter {per_enter}");
    Ok(())
}

/// What every mode reads, until when, and its count of `io_uring_enter`s.
#[derive(Clone)]
struct Work {
    file: Arc<std::fs::File>,
    path: std::path::PathBuf,
    blocks: u64,
    /// Set by a timer thread at the deadline: read with one load, so that
    /// no mode pays a clock read per read that the batch pays per 64.
    stop: Arc<AtomicBool>,
    enters: Arc<AtomicU64>,
}

impl Work {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A xorshift generator of block offsets.
struct Offsets(u64);

impl Offsets {
    fn new(seed: u64) -> Offsets {
        Offsets(seed.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self, blocks: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % blocks) * BLOCK
    }
}

/// User + system CPU time of this process (libc: rustix's `getrusage`
/// needs a feature the crate does not build with).
fn cpu() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given, nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) failed");
    // SAFETY: getrusage succeeded, so it filled the struct.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Checks one read's raw result (a count, or a negated errno): all of a
/// block; the reads it counts.
fn whole(res: i32) -> Result<u64, Error> {
    if res == BLOCK as i32 {
        Ok(1)
    } else {
        Err(format!(
            "a 4 KiB read of the cached file returned {res} (a negated errno, or a short count)"
        )
        .into())
    }
}

/// The batch engine, `DEPTH` reads per call, on this thread.
fn batch(w: &Work) -> Result<u64, Error> {
    let engine = Engine::builder()
        .queue_depth(DEPTH)
        .max_batch(DEPTH as u32)
        .read_path(ReadPath::AlwaysSubmit)
        .build()?;
    let mut bufs: Vec<AlignedBuf> = (0..DEPTH)
        .map(|_| AlignedBuf::new(BLOCK as usize, 4096))
        .collect();
    let mut results = Vec::with_capacity(DEPTH);
    let mut gen = Offsets::new(0);
    let mut reads = 0;
    while !w.stopped() {
        let mut ops: Vec<Op<'_>> = bufs
            .iter_mut()
            .map(|b| Op::read(&*w.file, gen.next(w.blocks), b))
            .collect();
        engine.submit_into(&mut ops, &mut results)?;
        for r in &results {
            reads += whole(*r.as_ref().map_err(|e| e.to_string())? as i32)?;
        }
    }
    Ok(reads)
}

/// One `pread` per read, on this thread.
fn pread_loop(w: &Work) -> Result<u64, Error> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut gen = Offsets::new(0);
    let mut reads = 0;
    while !w.stopped() {
        let off = gen.next(w.blocks);
        let n = w.file.read_at(&mut buf, off)?;
        reads += whole(n as i32)?;
    }
    Ok(reads)
}

/// A raw io_uring loop in one task: `DEPTH` reads per enter.
async fn bare_task(w: Work) -> Result<u64, Error> {
    let mut ring = IoUring::new(DEPTH as u32 * 2)?;
    let mut bufs = vec![vec![0u8; BLOCK as usize]; DEPTH];
    let fd = types::Fd(w.file.as_raw_fd());
    let mut gen = Offsets::new(0);
    let mut reads = 0;
    while !w.stopped() {
        for (i, b) in bufs.iter_mut().enumerate() {
            let sqe = opcode::Read::new(fd, b.as_mut_ptr(), BLOCK as u32)
                .offset(gen.next(w.blocks))
                .build()
                .user_data(i as u64);
            // SAFETY: the buffer lives until its completion is reaped
            // below, before the next batch reuses it.
            unsafe { ring.submission().push(&sqe) }.map_err(|_| "submission queue full")?;
        }
        let mut left = DEPTH;
        ring.submit()?;
        w.enters.fetch_add(1, Ordering::Relaxed);
        loop {
            for cqe in ring.completion() {
                reads += whole(cqe.result())?;
                left -= 1;
            }
            if left == 0 {
                break;
            }
            ring.submit_and_wait(left)?;
            w.enters.fetch_add(1, Ordering::Relaxed);
        }
        tokio::task::yield_now().await;
    }
    Ok(reads)
}

/// Reads in a row a task serves before yielding once, as blockio's
/// `INLINE_BUDGET` has a task reading cached data do.
const TASK_BUDGET: u64 = 128;

/// `DEPTH` tokio tasks, each read one `pread` in the task: the runtime's
/// share of a read served at its first poll, with no future of blockio's;
/// with `arcs`, each read also clones and drops two `Arc`s all the tasks
/// share.
async fn pread_tasks(w: Work, arcs: bool, nowait: bool) -> Result<u64, Error> {
    use std::os::unix::fs::FileExt;
    let tasks: Vec<_> = (0..DEPTH as u64)
        .map(|t| {
            let w = w.clone();
            tokio::spawn(async move {
                let mut gen = Offsets::new(t);
                let mut buf = vec![0u8; BLOCK as usize];
                let mut reads = 0;
                while !w.stopped() {
                    let off = gen.next(w.blocks);
                    let held = arcs.then(|| (w.file.clone(), w.stop.clone()));
                    let n = if nowait {
                        // `EAGAIN` now and then on cached data (a page
                        // marked for readahead): read as the driver would.
                        match preadv2_nowait(&w.file, &mut buf, off) {
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                w.file.read_at(&mut buf, off)?
                            }
                            n => n?,
                        }
                    } else {
                        w.file.read_at(&mut buf, off)?
                    };
                    drop(std::hint::black_box(held));
                    reads += whole(n as i32)?;
                    if reads % TASK_BUDGET == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                Ok::<u64, Error>(reads)
            })
        })
        .collect();
    let mut reads = 0;
    for t in tasks {
        reads += t.await??;
    }
    Ok(reads)
}

/// `preadv2(fd, [buf], offset, RWF_NOWAIT)` as the system call itself.
fn preadv2_nowait(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, borrowed mutably for the call; the
    // offset split in its low and high halves as the system call takes it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_preadv2,
            file.as_raw_fd(),
            &iov as *const libc::iovec,
            1,
            offset as libc::c_long,
            (offset >> 32) as libc::c_long,
            libc::RWF_NOWAIT,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc as usize)
}

/// `DEPTH` tasks reading through blockio's async API.
async fn tasks_on_engine(w: Work, path: ReadPath) -> Result<u64, Error> {
    let engine = AsyncEngine::builder()
        .queue_depth(DEPTH)
        .read_path(path)
        .build()?;
    let file = Arc::new(AsyncFile::open(&engine, &w.path)?);
    let tasks: Vec<_> = (0..DEPTH as u64)
        .map(|t| {
            let (file, w) = (file.clone(), w.clone());
            tokio::spawn(async move {
                let mut gen = Offsets::new(t);
                let mut buf = vec![0u8; BLOCK as usize];
                let mut reads = 0;
                while !w.stopped() {
                    let off = gen.next(w.blocks);
                    let (res, b) = file.read_at(buf, off).await;
                    buf = b;
                    reads += whole(res? as i32)?;
                }
                Ok::<u64, Error>(reads)
            })
        })
        .collect();
    let mut reads = 0;
    for t in tasks {
        reads += t.await??;
    }
    Ok(reads)
}

/// One task's slot in [`Queue`]: its read's result and waker.
struct Slot {
    /// The result, or `i32::MIN` while the read is pending.
    result: AtomicI32,
    waker: Mutex<Option<Waker>>,
}

/// The reads queued since the submitting task last ran.
#[derive(Default)]
struct Pending {
    reads: Vec<(usize, u64, *mut u8)>,
    submitter: Option<Waker>,
    done: usize,
}

// SAFETY: the pointers are the tasks' buffers, each used by the kernel
// only until its read completes, while its task waits.
unsafe impl Send for Pending {}

/// The queue of reads shared by the tasks and the submitting task.
struct Queue {
    pending: Mutex<Pending>,
    slots: Vec<Slot>,
}

impl Queue {
    /// Queues task `t`'s read and waits for its result.
    async fn read(&self, t: usize, off: u64, buf: &mut [u8]) -> i32 {
        let mut queued = false;
        poll_fn(|cx| {
            let slot = &self.slots[t];
            if queued {
                let res = slot.result.load(Ordering::Acquire);
                if res != i32::MIN {
                    return Poll::Ready(res);
                }
                *slot.waker.lock().unwrap() = Some(cx.waker().clone());
                let res = slot.result.load(Ordering::Acquire);
                return if res != i32::MIN {
                    Poll::Ready(res)
                } else {
                    Poll::Pending
                };
            }
            queued = true;
            slot.result.store(i32::MIN, Ordering::Relaxed);
            *slot.waker.lock().unwrap() = Some(cx.waker().clone());
            let submitter = {
                let mut p = self.pending.lock().unwrap();
                p.reads.push((t, off, buf.as_mut_ptr()));
                p.submitter.take()
            };
            if let Some(s) = submitter {
                s.wake();
            }
            Poll::Pending
        })
        .await
    }

    /// Submits every queued read in one enter, once per turn, and wakes
    /// their tasks as they complete; ends when all `tasks` are done.
    async fn submit(&self, w: &Work, tasks: usize) -> Result<(), Error> {
        let mut ring = IoUring::new(DEPTH as u32 * 2)?;
        let fd = types::Fd(w.file.as_raw_fd());
        let mut yielded = false;
        let mut in_flight = 0usize;
        poll_fn(|cx| loop {
            let reads = {
                let mut p = self.pending.lock().unwrap();
                if p.done == tasks && in_flight == 0 {
                    return Poll::Ready(Ok(()));
                }
                if p.reads.is_empty() && in_flight == 0 {
                    p.submitter = Some(cx.waker().clone());
                    yielded = false;
                    return Poll::Pending;
                }
                if !yielded {
                    // Once to the back of the run queue: the other
                    // tasks of this turn queue their reads meanwhile.
                    yielded = true;
                    drop(p);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                std::mem::take(&mut p.reads)
            };
            yielded = false;
            for &(t, off, ptr) in &reads {
                let sqe = opcode::Read::new(fd, ptr, BLOCK as u32)
                    .offset(off)
                    .build()
                    .user_data(t as u64);
                // SAFETY: the buffer belongs to a task waiting for this
                // read's completion.
                if unsafe { ring.submission().push(&sqe) }.is_err() {
                    return Poll::Ready(Err("submission queue full".into()));
                }
            }
            in_flight += reads.len();
            let waited = if reads.is_empty() { 1 } else { 0 };
            if let Err(e) = ring.submit_and_wait(waited) {
                return Poll::Ready(Err(e.into()));
            }
            w.enters.fetch_add(1, Ordering::Relaxed);
            for cqe in ring.completion() {
                in_flight -= 1;
                let slot = &self.slots[cqe.user_data() as usize];
                slot.result.store(cqe.result(), Ordering::Release);
                if let Some(waker) = slot.waker.lock().unwrap().take() {
                    waker.wake();
                }
            }
        })
        .await
    }
}

/// `DEPTH` tasks whose reads one task submits a turn at a time.
async fn ring_tasks(w: Work) -> Result<u64, Error> {
    let queue = Arc::new(Queue {
        pending: Mutex::new(Pending::default()),
        slots: (0..DEPTH)
            .map(|_| Slot {
                result: AtomicI32::new(i32::MIN),
                waker: Mutex::new(None),
            })
            .collect(),
    });
    let submitter = {
        let (queue, w) = (queue.clone(), w.clone());
        tokio::spawn(async move { queue.submit(&w, DEPTH).await })
    };
    let tasks: Vec<_> = (0..DEPTH)
        .map(|t| {
            let (queue, w) = (queue.clone(), w.clone());
            tokio::spawn(async move {
                let mut gen = Offsets::new(t as u64);
                let mut buf = vec![0u8; BLOCK as usize];
                let mut reads = 0;
                while !w.stopped() {
                    let off = gen.next(w.blocks);
                    let res = queue.read(t, off, &mut buf).await;
                    reads += whole(res)?;
                }
                let submitter = {
                    let mut p = queue.pending.lock().unwrap();
                    p.done += 1;
                    p.submitter.take()
                };
                if let Some(s) = submitter {
                    s.wake();
                }
                Ok::<u64, Error>(reads)
            })
        })
        .collect();
    let mut reads = 0;
    for t in tasks {
        reads += t.await??;
    }
    submitter.await??;
    Ok(reads)
}
