//! The ways of reading that `blockio-bench read` compares.

use std::io::SeekFrom;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions, Driving};
use blockio::{AlignedBuf, Engine, Op, ReadPath};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::data::Rng;
use crate::measure::{timed, Deadline, Measured, Recorder, Timing};
use crate::profile::Workload;

pub use blockio_bench_input::strategy::{parse_strategies, Strategy};

/// One run: a strategy with its operations in flight and its threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The strategy.
    pub strategy: Strategy,
    /// Operations in flight (over all threads or tasks).
    pub qd: usize,
    /// Threads (or tasks, for the pool strategies) issuing them.
    pub threads: usize,
}

/// Runs `plan` on `w` for `seconds`; returns the measurement and what
/// really served the reads (for blockio's strategies, the backend the
/// engine runs on: `io_uring`, or `thread pool` where io_uring is blocked).
pub fn run(plan: Plan, w: &Arc<Workload>, seconds: f64) -> Result<(Measured, String)> {
    let own = || plan.strategy.own_backend().to_string();
    match plan.strategy {
        Strategy::Sync | Strategy::Threads => std::thread::scope(|s| {
            let recs = recorders(plan.threads);
            timed(seconds, |deadline| {
                let handles: Vec<_> = recs
                    .into_iter()
                    .enumerate()
                    .map(|(t, rec)| {
                        let deadline = deadline.clone();
                        s.spawn(move || pread_loop(w, deadline, t, rec))
                    })
                    .collect();
                join_all(handles)
            })
        })
        .map(|m| (m, own())),
        Strategy::PoolBlocking | Strategy::PoolTokioFs => {
            pool(plan, w, seconds).map(|(m, _)| (m, own()))
        }
        Strategy::Async | Strategy::AsyncSubmit | Strategy::AsyncThread => {
            let (m, engine) = pool(plan, w, seconds)?;
            let engine = engine.context("the async strategies build an engine")?;
            Ok((m, async_served_by(&engine)))
        }
        Strategy::Uring | Strategy::UringMt | Strategy::Auto => {
            let per_thread = (plan.qd / plan.threads).max(1);
            let engine = Engine::builder()
                .queue_depth(plan.qd)
                .max_batch(per_thread as u32)
                .read_path(if plan.strategy == Strategy::Auto {
                    ReadPath::Auto
                } else {
                    ReadPath::AlwaysSubmit
                })
                .build()?;
            let m = std::thread::scope(|s| {
                let recs = recorders(plan.threads);
                timed(seconds, |deadline| {
                    let handles: Vec<_> = recs
                        .into_iter()
                        .enumerate()
                        .map(|(t, rec)| {
                            let engine = &engine;
                            let batch = per_thread;
                            let deadline = deadline.clone();
                            s.spawn(move || engine_loop(engine, w, batch, deadline, (t, rec)))
                        })
                        .collect();
                    join_all(handles)
                })
            })?;
            Ok((m, served_by(&engine)))
        }
        Strategy::Fio => bail!("fio is run by the fio module, not as a strategy"),
    }
}

/// What served an engine's reads: its backend, the calling thread
/// ("inline": page-cache hits and reads alone in their batch, see
/// [`blockio::ReadPath::Auto`]), or both.
fn served_by(engine: &Engine) -> String {
    let s = engine.stats();
    let inline = s.served_inline + s.served_inline_blocking;
    match (inline > 0, s.sent_to_backend > 0) {
        (true, false) => "inline".to_string(),
        (true, true) => format!("{} + inline", engine.backend()),
        _ => engine.backend().to_string(),
    }
}

/// What served an async engine's reads: its driver's backend, the polling
/// threads ("inline": page-cache hits, see [`AsyncEngine::served_inline`]),
/// or both.
fn async_served_by(engine: &AsyncEngine) -> String {
    let (inline, driver) = (engine.served_inline(), engine.reads_to_driver());
    match (inline > 0, driver > 0) {
        (true, false) => "inline".to_string(),
        (true, true) => format!("{} + inline", engine.backend()),
        _ => engine.backend().to_string(),
    }
}

/// One tally per worker, made before the clock starts: a tally is a
/// latency histogram of a few hundred KiB, and making 256 of them (their
/// allocation, the page faults of their first use) inside a short run was
/// counted against the strategies with many tasks.
fn recorders(n: usize) -> Vec<Recorder> {
    (0..n).map(|t| Recorder::seeded(t as u64)).collect()
}

/// The async engine of an async strategy, built on `rt` as a tokio program
/// builds it, or, for `async-thread`, with a driver thread of its own.
fn async_engine(plan: Plan, rt: &tokio::runtime::Runtime) -> Result<AsyncEngine> {
    let read_path = match plan.strategy {
        Strategy::AsyncSubmit => ReadPath::AlwaysSubmit,
        _ => ReadPath::Auto,
    };
    let driving = match plan.strategy {
        Strategy::AsyncThread => Driving::Thread,
        _ => Driving::Auto,
    };
    let _on_runtime = rt.enter();
    Ok(AsyncEngine::builder()
        .queue_depth(plan.threads)
        .read_path(read_path)
        .driving(driving)
        .build()?)
}

fn join_all(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<Recorder>>>,
) -> Result<Vec<Recorder>> {
    handles
        .into_iter()
        .map(|h| h.join().expect("benchmark thread panicked"))
        .collect()
}

fn seed(t: usize) -> Rng {
    Rng::new(0x2545_f491_4f6c_dd1d ^ ((t as u64 + 1) << 40))
}

/// One worker's offsets and tally, for the strategies that read one block
/// at a time.
struct OneAtATime {
    rng: Rng,
    rec: Recorder,
}

impl OneAtATime {
    fn new(t: usize, rec: Recorder) -> OneAtATime {
        OneAtATime { rng: seed(t), rec }
    }

    /// The timing (if this read is one of those timed, see
    /// [`Recorder::start`]) and offset of the next read; `None` once the
    /// deadline has passed and this worker has done at least one read, so
    /// a short run on a busy machine still measures every worker.
    #[inline]
    fn next(&mut self, w: &Workload, deadline: &Deadline) -> Option<(Option<Timing>, u64)> {
        if deadline.passed() && self.rec.ops > 0 {
            return None;
        }
        let off = w.next_offset(&mut self.rng);
        Some((self.rec.start(1), off))
    }

    /// Records a read started with `timing` that returned `n` bytes, and
    /// checks them.
    #[inline]
    fn done(
        &mut self,
        w: &Workload,
        timing: Option<Timing>,
        buf: &[u8],
        off: u64,
        n: usize,
    ) -> Result<()> {
        self.rec.done(timing, 1, n as u64);
        w.check(buf, off, n)
    }
}

/// `pread` one block at a time until the deadline.
fn pread_loop(w: &Workload, deadline: Deadline, t: usize, rec: Recorder) -> Result<Recorder> {
    let mut buf = AlignedBuf::new(w.block_size, 4096);
    let mut me = OneAtATime::new(t, rec);
    while let Some((t0, off)) = me.next(w, &deadline) {
        let n = w.pread(&mut buf, off)?;
        me.done(w, t0, &buf, off, n)?;
    }
    Ok(me.rec)
}

/// Batches of `batch` reads through the engine until the deadline; `t` is
/// the worker's number and tally.
fn engine_loop(
    engine: &Engine,
    w: &Workload,
    batch: usize,
    deadline: Deadline,
    (t, mut rec): (usize, Recorder),
) -> Result<Recorder> {
    let mut bufs: Vec<AlignedBuf> = (0..batch)
        .map(|_| AlignedBuf::new(w.block_size, 4096))
        .collect();
    let mut offsets = vec![0u64; batch];
    let mut store: Vec<Op<'static>> = Vec::with_capacity(batch);
    let mut results = Vec::with_capacity(batch);
    let mut rng = seed(t);
    loop {
        // At least one batch, however late this thread started.
        if deadline.passed() && rec.ops > 0 {
            return Ok(rec);
        }
        let timing = rec.start(batch as u64);
        let mut ops = blockio::clear_ops(store);
        for (b, off) in bufs.iter_mut().zip(offsets.iter_mut()) {
            *off = w.next_offset(&mut rng);
            ops.push(Op::read(&w.file, *off, b));
        }
        engine.submit_into(&mut ops, &mut results)?;
        store = blockio::clear_ops(ops);
        // The batch's round trip, before the checks, as a single read's.
        rec.done(timing, batch as u64, 0);
        let mut bytes = 0;
        for ((r, b), &off) in results.iter().zip(&bufs).zip(&offsets) {
            let n = *r
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{}: {e}", w.path.display()))?;
            w.check(b, off, n)?;
            bytes += n as u64;
        }
        rec.bytes += bytes;
    }
}

/// The async runtime's thread-pool file I/O, or blockio's async API,
/// `plan.threads` tasks on tokio's multi-thread runtime (with I/O, as
/// `#[tokio::main]` builds it); the async engine too, for the async
/// strategies.
fn pool(plan: Plan, w: &Arc<Workload>, seconds: f64) -> Result<(Measured, Option<AsyncEngine>)> {
    if plan.strategy == Strategy::PoolTokioFs && w.profile.direct() {
        bail!("tokio::fs cannot do O_DIRECT reads: its internal buffers are not aligned");
    }
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cpus)
        .max_blocking_threads(plan.threads.max(512))
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    let aio = match plan.strategy {
        Strategy::Async | Strategy::AsyncSubmit | Strategy::AsyncThread => {
            Some(async_engine(plan, &rt)?)
        }
        _ => None,
    };
    let file = match &aio {
        Some(engine) => {
            let opts = AsyncOpenOptions::new().direct(w.profile.direct());
            Some(Arc::new(AsyncFile::open_with(engine, &w.path, &opts)?))
        }
        None => None,
    };
    let recs = recorders(plan.threads);
    timed(seconds, |deadline| {
        rt.block_on(async {
            let tasks: Vec<_> = recs
                .into_iter()
                .enumerate()
                .map(|(t, rec)| {
                    let w = w.clone();
                    let me = OneAtATime::new(t, rec);
                    let deadline = deadline.clone();
                    match (&file, plan.strategy) {
                        (Some(f), _) => tokio::spawn(async_task(f.clone(), w, deadline, me)),
                        (None, Strategy::PoolTokioFs) => {
                            tokio::spawn(tokio_fs_task(w, deadline, me))
                        }
                        _ => tokio::spawn(blocking_task(w, deadline, me)),
                    }
                })
                .collect();
            let mut out = Vec::with_capacity(tasks.len());
            for task in tasks {
                out.push(task.await.context("benchmark task panicked")??);
            }
            Ok(out)
        })
    })
    .map(|m| (m, aio))
}

async fn blocking_task(
    w: Arc<Workload>,
    deadline: Deadline,
    mut me: OneAtATime,
) -> Result<Recorder> {
    let mut buf = AlignedBuf::new(w.block_size, 4096);
    while let Some((t0, off)) = me.next(&w, &deadline) {
        let w2 = w.clone();
        let (b, n) = tokio::task::spawn_blocking(move || {
            let n = w2.pread(&mut buf, off);
            (buf, n)
        })
        .await
        .context("spawn_blocking task panicked")?;
        buf = b;
        me.done(&w, t0, &buf, off, n?)?;
    }
    Ok(me.rec)
}

async fn async_task(
    file: Arc<AsyncFile>,
    w: Arc<Workload>,
    deadline: Deadline,
    mut me: OneAtATime,
) -> Result<Recorder> {
    let mut buf = AlignedBuf::new(w.block_size, 4096);
    while let Some((t0, off)) = me.next(&w, &deadline) {
        let (res, b) = file.read_at(buf, off).await;
        buf = b;
        let n = res.with_context(|| format!("{}: async read at offset {off}", w.path.display()))?;
        me.done(&w, t0, &buf, off, n)?;
    }
    Ok(me.rec)
}

async fn tokio_fs_task(
    w: Arc<Workload>,
    deadline: Deadline,
    mut me: OneAtATime,
) -> Result<Recorder> {
    let mut file = tokio::fs::File::open(&w.path)
        .await
        .with_context(|| format!("open {}", w.path.display()))?;
    let mut buf = vec![0u8; w.block_size];
    while let Some((t0, off)) = me.next(&w, &deadline) {
        file.seek(SeekFrom::Start(off)).await?;
        file.read_exact(&mut buf)
            .await
            .with_context(|| format!("{}: read at offset {off}", w.path.display()))?;
        me.done(&w, t0, &buf, off, buf.len())?;
    }
    Ok(me.rec)
}
