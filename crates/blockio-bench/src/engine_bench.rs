//! `blockio-bench engine`: random 4 KiB O_DIRECT reads, 64 in flight, the
//! engine against fio and against a minimal loop on the `io-uring` crate,
//! all measured in the same run.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use blockio::{AlignedBuf, BufferPool, DirectFile, Engine, Op, PooledBuf, Target};
use io_uring::{opcode, types, IoUring};

use crate::data::Rng;
use crate::measure::median;
use crate::report::truncate3;
use crate::{alloc_count, cache, data, fio};

/// Options of `blockio-bench engine`.
#[derive(Debug, clap::Args)]
pub struct EngineBenchArgs {
    /// Directory for the data file (created if missing; not tmpfs).
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
    /// Size of the data file in MiB (at least 1024 for the documented figures).
    #[arg(long, default_value_t = 1024)]
    pub size_mib: u64,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Rounds of every measurement (each contender once per round); medians
    /// are reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Operations in flight.
    #[arg(long, default_value_t = 64)]
    pub qd: usize,
    /// Skip fio even if installed.
    #[arg(long)]
    pub no_fio: bool,
    /// Keep the data file afterwards (it is reused by the next run).
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

const BS: usize = 4096;

/// Creates (or reuses) the data file, refusing tmpfs, and drops it from the
/// page cache.
fn prepare_file(dir: &Path, size: u64) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("create directory {}", dir.display()))?;
    if crate::data::is_memory_filesystem(dir)? {
        bail!(
            "{} is on tmpfs/ramfs: O_DIRECT there measures memory, not a device; pass --dir on a disk",
            dir.display()
        );
    }
    let path = data::create(dir, &format!("engine-{}m.dat", size >> 20), size)?;
    cache::evict(&File::open(&path)?)?;
    Ok(path)
}

/// IOPS of fio's io_uring engine on the same file, or None if fio is absent.
fn fio_iops(path: &Path, qd: usize, seconds: f64) -> Result<Option<f64>> {
    let opts = [
        "--ioengine=io_uring".to_string(),
        "--direct=1".into(),
        "--rw=randread".into(),
        "--bs=4k".into(),
        format!("--iodepth={qd}"),
    ];
    fio::read_iops(path, &opts, seconds)
}

/// The low-level baseline: one thread, one ring, `qd` reads kept in flight,
/// completions reaped and refilled as they come (as fio's t/io_uring does).
fn raw_loop(path: &Path, qd: usize, seconds: f64) -> Result<f64> {
    let file = DirectFile::open(path)?;
    let blocks = std::fs::metadata(path)?.len() / BS as u64;
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .build(qd.next_power_of_two() as u32)
        .or_else(|_| IoUring::new(qd.next_power_of_two() as u32))?;
    let mut bufs: Vec<AlignedBuf> = (0..qd).map(|_| AlignedBuf::new(BS, 4096)).collect();
    let mut free: Vec<usize> = (0..qd).collect();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let fd = types::Fd(file.as_raw_fd());
    let mut done = 0u64;
    let mut in_flight = 0usize;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut stop = false;
    loop {
        if !stop {
            let mut sq = ring.submission();
            while let Some(i) = free.pop() {
                let off = rng.below(blocks) * BS as u64;
                let e = opcode::Read::new(fd, bufs[i].as_mut_ptr(), BS as u32)
                    .offset(off)
                    .build()
                    .user_data(i as u64);
                // SAFETY: buffer `i` is not in flight (it was on the free
                // list) and outlives the loop, which drains before returning.
                unsafe { sq.push(&e) }.expect("ring holds qd entries");
                in_flight += 1;
            }
        }
        if in_flight == 0 {
            break;
        }
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            if cqe.result() != BS as i32 {
                bail!("raw loop: read returned {}", cqe.result());
            }
            free.push(cqe.user_data() as usize);
            in_flight -= 1;
            done += 1;
        }
        if !stop && Instant::now() >= deadline {
            stop = true;
        }
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

/// The engine's batch API from `threads` threads, each submitting batches of
/// `batch` random reads. Returns IOPS and, for one thread, heap allocations
/// per operation during the measured part. With `pool` (registered with
/// `engine`), the reads' buffers come from it and the file is put in one of
/// the engine's registered-file slots.
fn engine_run(
    engine: &Engine,
    path: &Path,
    threads: usize,
    batch: usize,
    seconds: f64,
    pool: Option<&BufferPool>,
) -> Result<(f64, f64)> {
    let file = Arc::new(DirectFile::open(path)?);
    let registered = match pool {
        Some(_) => Some(Arc::new(engine.register_file(&*file)?)),
        None => None,
    };
    let reader = Reader {
        engine: engine.clone(),
        file,
        registered,
        pool: pool.cloned(),
        batch,
        blocks: std::fs::metadata(path)?.len() / BS as u64,
        stop: Arc::new(AtomicBool::new(false)),
        warmup: Duration::from_millis(300),
    };
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let reader = reader.clone();
            std::thread::spawn(move || reader.run(t))
        })
        .collect();
    // The benchmark's length: the threads read until told to stop.
    std::thread::sleep(Duration::from_secs_f64(seconds) + reader.warmup);
    reader.stop.store(true, Ordering::Relaxed);
    let mut iops = 0.0;
    let mut allocs_per_op = 0.0;
    for h in handles {
        let (ops, el, allocs) = h.join().expect("bench thread panicked")?;
        iops += ops as f64 / el.as_secs_f64();
        allocs_per_op = allocs as f64 / ops.max(1) as f64;
    }
    if let Some(r) = reader.registered {
        Arc::into_inner(r)
            .expect("the bench threads have ended")
            .unregister()?;
    }
    Ok((iops, allocs_per_op))
}

/// What each thread of [`engine_run`] reads with.
#[derive(Clone)]
struct Reader {
    engine: Engine,
    file: Arc<DirectFile>,
    registered: Option<Arc<blockio::RegisteredFile>>,
    pool: Option<BufferPool>,
    batch: usize,
    blocks: u64,
    stop: Arc<AtomicBool>,
    warmup: Duration,
}

impl Reader {
    /// Thread `t`'s loop: batches of random reads until the stop, the
    /// operations done, the time and the allocations of the measured part.
    /// Every thread measures at least one batch, however late it starts or
    /// however long a batch takes: the window opens after the warm-up (or
    /// at the stop, if that comes first) and closes at the stop after a
    /// batch done in it.
    fn run(self, t: usize) -> Result<(u64, Duration, u64)> {
        let mut bufs: Vec<Buf> = (0..self.batch)
            .map(|_| match &self.pool {
                Some(p) => Buf::Pooled(p.get()),
                None => Buf::Own(self.file.alloc_buf(BS)),
            })
            .collect();
        let mut store: Vec<Op<'static>> = Vec::with_capacity(self.batch);
        let mut results = Vec::with_capacity(self.batch);
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) << 32));
        let mut done = 0u64;
        let mut measured_from: Option<(Instant, u64, u64)> = None;
        let target: &dyn Target = match &self.registered {
            Some(r) => &**r,
            None => &*self.file,
        };
        let start = Instant::now();
        loop {
            let mut ops = blockio::clear_ops(store);
            for b in bufs.iter_mut() {
                let b: &mut [u8] = match b {
                    Buf::Pooled(p) => &mut p[..BS],
                    Buf::Own(a) => a,
                };
                ops.push(Op::read(target, rng.below(self.blocks) * BS as u64, b));
            }
            self.engine.submit_into(&mut ops, &mut results)?;
            store = blockio::clear_ops(ops);
            for r in &results {
                match r {
                    Ok(n) if *n == BS => {}
                    Ok(n) => bail!("engine: short read of {n} bytes"),
                    Err(e) => bail!("engine: {e}"),
                }
            }
            done += self.batch as u64;
            let stopped = self.stop.load(Ordering::Relaxed);
            match measured_from {
                Some((_, d0, _)) if done > d0 && stopped => break,
                Some(_) => {}
                None if start.elapsed() >= self.warmup || stopped => {
                    measured_from = Some((Instant::now(), done, alloc_count::allocations()));
                }
                None => {}
            }
        }
        let (t0, d0, a0) = measured_from.expect("the loop ends only once measuring");
        let allocs = alloc_count::allocations() - a0;
        Ok((done - d0, t0.elapsed(), allocs))
    }
}

/// A read buffer of [`engine_run`]: owned, or from a registered pool.
enum Buf {
    Own(AlignedBuf),
    Pooled(PooledBuf),
}

/// The measurements of one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Fio,
    Raw,
    One,
    Two,
    Many,
    OneCall,
    Registered,
}

impl Contender {
    const COUNT: usize = 7;
}

/// A ratio between two contenders: the median of the per-round ratios and
/// their range. Printed truncated to 3 decimals, never rounded up.
#[derive(Debug, Clone, Copy)]
struct Ratio {
    median: f64,
    min: f64,
    max: f64,
}

impl Ratio {
    /// Per-round ratios `a / b`, leaving out rounds where either has no
    /// figure.
    fn paired(a: &[f64], b: &[f64]) -> Ratio {
        let v: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(x, y)| x / y)
            .filter(|r| r.is_finite())
            .collect();
        Ratio {
            median: median(&v),
            min: v.iter().cloned().fold(f64::INFINITY, f64::min),
            max: v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} [{:.3}-{:.3}]",
            truncate3(self.median),
            truncate3(self.min),
            truncate3(self.max)
        )
    }
}

/// Runs the benchmark and prints the table or JSON.
pub fn run(args: &EngineBenchArgs) -> Result<()> {
    check_args(args)?;
    say(
        args,
        &format!(
            "preparing {} MiB data file in {} ...",
            args.size_mib,
            args.dir.display()
        ),
    );
    let path = prepare_file(&args.dir, args.size_mib << 20)?;
    let engines = Engines::build(args.qd)?;
    let fio_available = !args.no_fio && fio::available();
    if !fio_available && !args.no_fio {
        eprintln!("fio is not installed: skipping the fio comparison (apt-get install fio)");
    }
    let rounds = measure_rounds(args, &path, &engines, fio_available)?;
    if !args.keep {
        let _ = std::fs::remove_file(&path);
    }
    let backend = engines.default.backend();
    if args.json {
        println!("{}", json_report(args, &path, backend, &rounds));
    } else {
        print_table(args, backend, &rounds);
    }
    Ok(())
}

fn check_args(args: &EngineBenchArgs) -> Result<()> {
    if args.qd == 0 || args.qd > 4096 {
        bail!("--qd must be between 1 and 4096, got {}", args.qd);
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if args.size_mib < 64 {
        bail!("--size-mib must be at least 64, got {}", args.size_mib);
    }
    if !args.seconds.is_finite() || args.seconds <= 0.0 {
        bail!("--seconds must be positive, got {}", args.seconds);
    }
    Ok(())
}

/// Progress on stderr, unless the output is JSON.
fn say(args: &EngineBenchArgs, s: &str) {
    if !args.json {
        eprintln!("{s}");
    }
}

/// The engines under test, all with `qd` operations in flight.
struct Engines {
    /// The default settings.
    default: Engine,
    /// The same, submitting each batch in one kernel call instead of the
    /// default ramp: what the ramp is worth on this device.
    one_call: Engine,
    /// With registered buffers (from `pool`) and a registered file.
    tuned: Engine,
    pool: BufferPool,
}

impl Engines {
    fn build(qd: usize) -> Result<Engines> {
        let builder = || Engine::builder().queue_depth(qd).max_batch(qd as u32);
        let pool = BufferPool::new(qd, BS, 4096);
        Ok(Engines {
            default: builder().build()?,
            one_call: builder().submit_chunk(0).build()?,
            tuned: builder()
                .registered_buffers(&pool)
                .registered_files(1)
                .build()?,
            pool,
        })
    }
}

/// Batch size per thread of the 64-thread contender.
fn per_thread_64(qd: usize) -> usize {
    (qd / 64).max(1).max(8.min(qd))
}

/// Every contender's IOPS in every round, and the allocations per
/// operation of the default engine's rounds.
struct Rounds {
    iops: [Vec<f64>; Contender::COUNT],
    allocs: Vec<f64>,
}

impl Rounds {
    fn get(&self, c: Contender) -> &[f64] {
        &self.iops[c as usize]
    }

    /// Whether fio printed a figure in any round.
    fn fio_ok(&self) -> bool {
        self.get(Contender::Fio).iter().any(|v| v.is_finite())
    }

    /// The median over the rounds where `c` has a figure (fio may print
    /// none).
    fn median(&self, c: Contender) -> f64 {
        let v: Vec<f64> = self
            .get(c)
            .iter()
            .cloned()
            .filter(|v| v.is_finite())
            .collect();
        median(&v)
    }

    fn ratio(&self, a: Contender, b: Contender) -> Ratio {
        Ratio::paired(self.get(a), self.get(b))
    }

    /// `a` against fio, if fio printed any figure.
    fn vs_fio(&self, a: Contender) -> Option<Ratio> {
        self.fio_ok().then(|| self.ratio(a, Contender::Fio))
    }

    /// Allocations per operation; counted only in builds with the counting
    /// allocator (see `alloc_count`).
    fn allocs_per_op(&self) -> Option<f64> {
        alloc_count::installed().then(|| self.allocs.iter().cloned().fold(0.0, f64::max))
    }
}

/// Runs every contender once per round, in reverse order every other round
/// so that a drift of the shared host does not always favour the same one.
/// Ratios are medians of per-round ratios (paired), IOPS medians of
/// per-round IOPS.
fn measure_rounds(
    args: &EngineBenchArgs,
    path: &Path,
    engines: &Engines,
    fio_available: bool,
) -> Result<Rounds> {
    let mut contenders = vec![Contender::Raw, Contender::One];
    if fio_available {
        contenders.insert(0, Contender::Fio);
    }
    contenders.extend([
        Contender::Two,
        Contender::Many,
        Contender::OneCall,
        Contender::Registered,
    ]);
    let mut rounds = Rounds {
        iops: Default::default(),
        allocs: Vec::new(),
    };
    for round in 1..=args.rounds {
        say(args, &format!("round {round}/{}", args.rounds));
        let mut order = contenders.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for c in order {
            let v = measure_one(args, path, engines, c, &mut rounds.allocs)?;
            rounds.iops[c as usize].push(v);
        }
    }
    Ok(rounds)
}

/// One contender's IOPS for one round (NaN when fio printed no figure).
fn measure_one(
    args: &EngineBenchArgs,
    path: &Path,
    e: &Engines,
    c: Contender,
    allocs: &mut Vec<f64>,
) -> Result<f64> {
    let (qd, secs) = (args.qd, args.seconds);
    Ok(match c {
        Contender::Fio => fio_iops(path, qd, secs)?.unwrap_or(f64::NAN),
        Contender::Raw => raw_loop(path, qd, secs)?,
        Contender::One => {
            let (v, a) = engine_run(&e.default, path, 1, qd, secs, None)?;
            allocs.push(a);
            v
        }
        Contender::Two => engine_run(&e.default, path, 2, qd.div_ceil(2), secs, None)?.0,
        Contender::Many => engine_run(&e.default, path, 64, per_thread_64(qd), secs, None)?.0,
        Contender::OneCall => engine_run(&e.one_call, path, 1, qd, secs, None)?.0,
        Contender::Registered => engine_run(&e.tuned, path, 1, qd, secs, Some(&e.pool))?.0,
    })
}

/// The run as one JSON object.
fn json_report(
    args: &EngineBenchArgs,
    path: &Path,
    backend: blockio::Backend,
    r: &Rounds,
) -> serde_json::Value {
    use Contender::*;
    let (one_fio, one_raw) = (r.vs_fio(One), r.ratio(One, Raw));
    let (two_one, many_one) = (r.ratio(Two, One), r.ratio(Many, One));
    let median_of = |x: Option<Ratio>| x.map(|x| x.median);
    serde_json::json!({
        "workload": format!("random {BS}-byte O_DIRECT reads, {} in flight", args.qd),
        "file": path.display().to_string(),
        "file_mib": args.size_mib,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "backend": backend.to_string(),
        "iops": r.median(One),
        "fio_iops": r.fio_ok().then(|| r.median(Fio)),
        "raw_iops": r.median(Raw),
        "allocs_per_op": r.allocs_per_op(),
        "iops_2_threads": r.median(Two),
        "iops_64_threads": r.median(Many),
        "batch_64_threads": per_thread_64(args.qd),
        "iops_one_call_per_batch": r.median(OneCall),
        "ratio_one_call_per_batch_vs_fio": median_of(r.vs_fio(OneCall)),
        "iops_registered": r.median(Registered),
        "ratio_registered_vs_fio": median_of(r.vs_fio(Registered)),
        "ratio_vs_fio": median_of(one_fio),
        "ratio_vs_raw": one_raw.median,
        "ratio_2_threads": two_one.median,
        "ratio_64_threads": many_one.median,
        "ratio_ranges": {
            "vs_fio": one_fio.map(|r| [r.min, r.max]),
            "vs_raw": [one_raw.min, one_raw.max],
            "2_threads": [two_one.min, two_one.max],
            "64_threads": [many_one.min, many_one.max],
        },
        "rounds_iops": {
            "fio": r.fio_ok().then(|| r.get(Fio)),
            "raw": r.get(Raw),
            "engine": r.get(One),
            "engine_2_threads": r.get(Two),
            "engine_64_threads": r.get(Many),
            "engine_one_call_per_batch": r.get(OneCall),
            "engine_registered": r.get(Registered),
        },
    })
}

/// The run as a table.
fn print_table(args: &EngineBenchArgs, backend: blockio::Backend, r: &Rounds) {
    use Contender::*;
    let iops = |c: Contender| format!("{:>10.0}", r.median(c));
    let both = |c: Contender| {
        let f = r.vs_fio(c).map_or("-".into(), |f| format!("{f} fio"));
        format!("{f}  {} raw", r.ratio(c, Raw))
    };
    println!(
        "random 4 KiB O_DIRECT reads, {} in flight, {} MiB file, {} rounds x {:.1}s (backend: {backend})",
        args.qd, args.size_mib, args.rounds, args.seconds
    );
    println!("IOPS: median of the rounds; ratio: median of the per-round ratios [lowest-highest]");
    println!("{:<44} {:>10}  ratio", "", "IOPS");
    if r.fio_ok() {
        println!("{:<44} {}  1.00", "fio io_uring (baseline)", iops(Fio));
    } else {
        println!("{:<44} {:>10}  -", "fio io_uring", "skipped");
    }
    println!(
        "{:<44} {}  1.00",
        "raw io-uring crate loop (baseline)",
        iops(Raw)
    );
    println!(
        "{:<44} {}  {}",
        "engine batch API, 1 thread",
        iops(One),
        both(One)
    );
    println!(
        "{:<44} {}  {} (vs 1 thread)",
        "engine, 2 threads",
        iops(Two),
        r.ratio(Two, One)
    );
    println!(
        "{:<44} {}  {} (vs 1 thread)",
        format!("engine, 64 threads x batch {}", per_thread_64(args.qd)),
        iops(Many),
        r.ratio(Many, One)
    );
    println!(
        "{:<44} {}  {}",
        "engine, 1 thread, submit_chunk(0): 1 call",
        iops(OneCall),
        both(OneCall)
    );
    println!(
        "{:<44} {}  {}",
        "engine, registered buffers + file",
        iops(Registered),
        both(Registered)
    );
    match r.allocs_per_op() {
        Some(a) => println!("heap allocations per operation (1 thread, steady state): {a:.4}"),
        None => println!(
            "heap allocations per operation: not counted (build with --features count-allocations, as scripts/engine-bench does)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_rounds_before_taking_the_median() {
        // The host's speed moves between rounds, and each round compares
        // the two in the same conditions: 0.95, 1.1 and 1.083. The ratio
        // of the medians (95 / 100 = 0.95) would pair values from
        // different rounds.
        let ours = [95.0, 88.0, 130.0];
        let theirs = [100.0, 80.0, 120.0];
        let r = Ratio::paired(&ours, &theirs);
        assert!((r.median - 130.0 / 120.0).abs() < 1e-9, "{r:?}");
        assert!((r.min - 0.95).abs() < 1e-9 && (r.max - 1.1).abs() < 1e-9);
        assert_eq!(r.to_string(), "1.083 [0.950-1.100]");
        // A round without a figure (fio failed) is left out of the pairs.
        let r = Ratio::paired(&[95.0, 88.0, 130.0], &[100.0, f64::NAN, 120.0]);
        assert!(
            (r.median - (0.95 + 130.0 / 120.0) / 2.0).abs() < 1e-9,
            "{r:?}"
        );
    }
}
