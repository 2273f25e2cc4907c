//! `blockio-bench read`: every strategy on every profile, in one run.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::cache;
use crate::data;
use crate::fio;
use crate::profile::{Profile, Workload};
use crate::report::{self, Row};
use crate::strategy::{self, Plan, Strategy};

/// Options of `blockio-bench read`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Directory for the data file (created if missing).
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
    /// Size of the data file in MiB.
    #[arg(long, default_value_t = 1024)]
    pub size_mib: u64,
    /// Seconds per run.
    #[arg(long, default_value_t = 0.3)]
    pub seconds: f64,
    /// Rounds: every run is repeated this many times, interleaved with the
    /// others (so noise hits all alike), and the median round is reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Profiles to run, comma separated: direct, cold, warm, seq.
    #[arg(long, value_delimiter = ',', default_values_t = Profile::ALL)]
    pub profiles: Vec<Profile>,
    /// Strategies to run, comma separated: sync, threads, pool (both pool
    /// strategies), pool-tokio-fs, pool-blocking, uring, uring-mt, auto,
    /// async; and, only when named, async-submit (the async API with every
    /// read sent to the driver) and async-thread (driven by the engine's
    /// own thread).
    #[arg(long, value_delimiter = ',', value_parser = strategy::parse_strategies)]
    pub strategies: Vec<Vec<Strategy>>,
    /// Threads of `threads`, `uring-mt` and `auto` (default: the CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Concurrent tasks of the pool and async strategies, comma separated
    /// (each value is one run).
    #[arg(long, value_delimiter = ',', default_values_t = [64, 256])]
    pub tasks: Vec<usize>,
    /// Operations in flight of `uring-mt` and `auto`, over all threads.
    #[arg(long, default_value_t = 128)]
    pub mt_depth: usize,
    /// Queue depths swept by `uring`, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16, 32, 64, 128, 256])]
    pub qd: Vec<usize>,
    /// Also run the matching fio job for each profile and print ratios to it.
    #[arg(long)]
    pub fio: bool,
    /// Print one JSON document on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Directory for results.json, results.csv and chart.svg.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Check every byte read against the data pattern (slower; for tests).
    #[arg(long)]
    pub verify: bool,
    /// Keep the data file afterwards (the next run reuses it).
    #[arg(long)]
    pub keep: bool,
    /// Run the sum workload instead: stream a file of
    /// --sum-mib MiB in blocks, BLAKE3 as it goes, page cache evicted
    /// first, the async API against tokio::fs.
    #[arg(long)]
    pub sum: bool,
    /// Size of the sum workload's file in MiB.
    #[arg(long, default_value_t = 2048)]
    pub sum_mib: u64,
    /// Block sizes of the sum workload, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [32 << 10, 128 << 10, 1 << 20])]
    pub sum_blocks: Vec<usize>,
    /// Reads the async API keeps in flight in the sum workload
    /// (default: 64 MiB worth, at least 16 and at most 256: fewer left the
    /// disk idle between reads; see docs/benchmarks.md, "Sum workload
    /// depth").
    #[arg(long)]
    pub sum_depth: Option<usize>,
    /// The async API reads the sum workload's file through the page cache, like
    /// tokio::fs, instead of with O_DIRECT (the default: a file read once
    /// need not fill the cache, and tokio::fs cannot read O_DIRECT).
    #[arg(long)]
    pub sum_buffered: bool,
}

/// Removes the data file when dropped, unless asked to keep it.
struct DataFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for DataFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(self.path.with_extension("partial"));
        }
    }
}

fn validate(args: &BenchArgs) -> Result<()> {
    if !args.seconds.is_finite() || args.seconds <= 0.0 || args.seconds > 3600.0 {
        bail!("--seconds must be between 0 and 3600, got {}", args.seconds);
    }
    if args.size_mib < 1 {
        bail!("--size-mib must be at least 1, got {}", args.size_mib);
    }
    if let Some(bad) = args.qd.iter().find(|&&q| q == 0 || q > 4096) {
        bail!("--qd values must be between 1 and 4096, got {bad}");
    }
    if args.rounds == 0 || args.rounds > 100 {
        bail!("--rounds must be between 1 and 100, got {}", args.rounds);
    }
    if args.threads == Some(0) || args.tasks.contains(&0) || args.mt_depth == 0 {
        bail!("--threads, --tasks and --mt-depth must be at least 1");
    }
    if args.profiles.is_empty() {
        bail!("--profiles is empty");
    }
    Ok(())
}

/// The runs of one profile, in report order.
pub fn plans(args: &BenchArgs, profile: Profile, strategies: &[Strategy]) -> Vec<Plan> {
    let n = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let mut out = Vec::new();
    for &s in strategies {
        match s {
            Strategy::Sync => out.push(Plan {
                strategy: s,
                qd: 1,
                threads: 1,
            }),
            Strategy::Threads => out.push(Plan {
                strategy: s,
                qd: n,
                threads: n,
            }),
            Strategy::PoolTokioFs if profile.direct() => {}
            Strategy::PoolTokioFs
            | Strategy::PoolBlocking
            | Strategy::Async
            | Strategy::AsyncSubmit
            | Strategy::AsyncThread => out.extend(args.tasks.iter().map(|&t| Plan {
                strategy: s,
                qd: t,
                threads: t,
            })),
            Strategy::Uring => out.extend(args.qd.iter().map(|&qd| Plan {
                strategy: s,
                qd,
                threads: 1,
            })),
            Strategy::UringMt => out.push(Plan {
                strategy: s,
                qd: args.mt_depth.max(n),
                threads: n,
            }),
            // One read at a time from one thread (where the ring loses to
            // pread on cached data) and from every thread, the deepest
            // batches from one thread and the many-threads configuration:
            // auto gets the same shapes as the strategies it is compared
            // with.
            Strategy::Auto => out.extend([
                Plan {
                    strategy: s,
                    qd: 1,
                    threads: 1,
                },
                Plan {
                    strategy: s,
                    qd: n,
                    threads: n,
                },
                Plan {
                    strategy: s,
                    qd: args.qd.iter().copied().max().unwrap_or(64).max(2),
                    threads: 1,
                },
                Plan {
                    strategy: s,
                    qd: args.mt_depth.max(n),
                    threads: n,
                },
            ]),
            Strategy::Fio => {}
        }
    }
    // One thread makes some shapes the same run twice.
    out.dedup();
    out
}

/// Brings the page cache into the state the profile needs, checks it with
/// `mincore`, and returns the resident fraction.
fn prepare_cache(profile: Profile, w: &Workload) -> Result<f64> {
    let file = w.file.file();
    if profile.warm() {
        if cache::resident_fraction(file)? < 0.99 {
            cache::warm(file)?;
        }
        let r = cache::resident_fraction(file)?;
        if r < 0.95 {
            bail!(
                "{}: only {:.0} % of the file stayed in the page cache after reading it (too little memory? try a smaller --size-mib)",
                w.path.display(),
                r * 100.0
            );
        }
        Ok(r)
    } else {
        cache::evict(file)?;
        let r = cache::resident_fraction(file)?;
        if profile == Profile::Cold && r > 0.05 {
            bail!(
                "{}: {:.0} % of the file is still in the page cache after posix_fadvise(DONTNEED)",
                w.path.display(),
                r * 100.0
            );
        }
        Ok(r)
    }
}

/// The JSON document `--json` prints and `results.json` holds.
#[derive(Debug, serde::Serialize)]
pub struct Document {
    /// What was run, and where.
    pub config: serde_json::Value,
    /// One row per run.
    pub rows: Vec<Row>,
    /// `auto` against the best strategy, per profile.
    pub summary: Vec<report::Summary>,
    /// Profiles skipped, and why.
    pub skipped: Vec<String>,
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs the benchmark: prints the table (or JSON) and writes the files.
pub fn run(args: &BenchArgs) -> Result<()> {
    validate(args)?;
    if args.sum {
        return run_sum_stream(args);
    }
    let strategies = chosen_strategies(args);
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create the data directory {}", args.dir.display()))?;
    let (profiles, skipped) = usable_profiles(args)?;
    check_writable(&args.out)?;
    let backend = blockio_backend(&strategies)?;
    let path = data::create(
        &args.dir,
        &format!("bench-{}m.dat", args.size_mib),
        args.size_mib << 20,
    )?;
    let _guard = DataFile {
        path: path.clone(),
        keep: args.keep,
    };
    let use_fio = args.fio && fio::available();
    if args.fio && !use_fio {
        eprintln!(
            "warning: fio is not installed: skipping the fio comparison (apt-get install fio)"
        );
    }
    let all_plans: Vec<(Profile, Vec<Plan>)> = profiles
        .iter()
        .map(|&p| (p, plans(args, p, &strategies)))
        .collect();
    let total: usize = all_plans
        .iter()
        .map(|(_, v)| v.len() * args.rounds + usize::from(use_fio))
        .sum();
    let bar = progress_bar(total, args.json);
    let mut rows = Vec::new();
    let mut paired = Vec::new();
    for (profile, plans) in &all_plans {
        let w = Arc::new(Workload::open(*profile, &path, args.verify)?);
        let rounds = measure_rounds(args, &w, plans, &bar)?;
        paired.push((*profile, report::paired_ratios(&rounds)));
        rows.extend(rounds.into_iter().map(median_row));
        if use_fio {
            bar.set_message(format!("{profile}: fio"));
            rows.extend(fio_row(args, &w, &path)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let summary = report::summarise(&mut rows, &profiles, &paired);
    let doc = Document {
        config: serde_json::json!({
            "file": path.display().to_string(),
            "file_mib": args.size_mib,
            "seconds_per_run": args.seconds,
            "rounds": args.rounds,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "kernel": kernel_release(),
            "verify": args.verify,
            "blockio_backend": backend,
        }),
        rows,
        summary,
        skipped,
    };
    write_outputs(&args.out, &doc, &profiles)?;
    print_document(args, &doc, &profiles)
}

/// The strategies asked for (all by default), each once, in order.
fn chosen_strategies(args: &BenchArgs) -> Vec<Strategy> {
    if args.strategies.is_empty() {
        return Strategy::ALL.to_vec();
    }
    let mut v: Vec<Strategy> = args.strategies.iter().flatten().copied().collect();
    v.dedup();
    v
}

/// The profiles to run, and why any were skipped: on tmpfs or ramfs the
/// direct and cold profiles would measure memory, so they are skipped when
/// run by default and refused when asked for.
fn usable_profiles(args: &BenchArgs) -> Result<(Vec<Profile>, Vec<String>)> {
    let mut skipped = Vec::new();
    let mut profiles = args.profiles.clone();
    profiles.dedup();
    if !crate::data::is_memory_filesystem(&args.dir)? {
        return Ok((profiles, skipped));
    }
    let explicit = args.profiles.len() < Profile::ALL.len();
    for p in [Profile::Direct, Profile::Cold] {
        if !profiles.contains(&p) {
            continue;
        }
        if explicit {
            bail!(
                "{} is on tmpfs/ramfs: the {p} profile would measure memory, not a device; pass --dir on a disk",
                args.dir.display()
            );
        }
        let why = format!(
            "{p}: skipped, {} is on tmpfs/ramfs (O_DIRECT and eviction measure memory there); pass --dir on a disk",
            args.dir.display()
        );
        eprintln!("warning: {why}");
        skipped.push(why);
        profiles.retain(|&x| x != p);
    }
    Ok((profiles, skipped))
}

/// Creates the results directory and fails now, not after the run, if it
/// cannot be written.
fn check_writable(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the results directory {}", out.display()))?;
    let probe = out.join(".write-test");
    std::fs::write(&probe, b"")
        .with_context(|| format!("the results directory {} is not writable", out.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The backend blockio's strategies will run on. Where io_uring is
/// unavailable their rows are served by the thread-pool fallback, and say
/// so; stderr says once why, since the benchmark exists to answer whether
/// io_uring helps here.
fn blockio_backend(strategies: &[Strategy]) -> Result<Option<String>> {
    if !strategies.iter().any(|s| s.uses_blockio()) {
        return Ok(None);
    }
    let engine = blockio::Engine::new()?;
    if let Some(reason) = engine.fallback_reason() {
        eprintln!(
            "warning: blockio runs on its thread-pool fallback ({reason}); the uring, uring-mt, auto and async rows are labelled \"thread pool\" (auto: \"inline\" for what it read on the calling thread) and do not measure io_uring"
        );
    }
    Ok(Some(engine.backend().to_string()))
}

fn progress_bar(total: usize, json: bool) -> indicatif::ProgressBar {
    let bar = if std::io::stderr().is_terminal() && !json {
        indicatif::ProgressBar::new(total as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{pos}/{len} [{elapsed}] {wide_msg}")
            .expect("valid template"),
    );
    bar
}

/// Every plan of one profile, `--rounds` times; `rounds[i]` holds plan
/// `i`'s rows. Every other round runs the plans in reverse order, so that
/// no strategy always follows the same one.
fn measure_rounds(
    args: &BenchArgs,
    w: &Arc<Workload>,
    plans: &[Plan],
    bar: &indicatif::ProgressBar,
) -> Result<Vec<Vec<Row>>> {
    let profile = w.profile;
    let mut rounds: Vec<Vec<Row>> = vec![Vec::new(); plans.len()];
    for round in 1..=args.rounds {
        let mut order: Vec<(&Plan, &mut Vec<Row>)> = plans.iter().zip(rounds.iter_mut()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for (plan, done) in order {
            bar.set_message(format!(
                "{profile}: {} qd {} (round {round}/{})",
                plan.strategy, plan.qd, args.rounds
            ));
            let resident = prepare_cache(profile, w)?;
            let m = strategy::run(*plan, w, args.seconds)
                .with_context(|| format!("{profile} / {}", plan.strategy))?;
            done.push(Row::measured(profile, *plan, &m, resident));
            bar.inc(1);
        }
    }
    Ok(rounds)
}

/// The round with the median IOPS of one plan.
fn median_row(mut done: Vec<Row>) -> Row {
    done.sort_by(|a, b| a.iops.total_cmp(&b.iops));
    done.swap_remove(done.len() / 2)
}

/// fio on the same profile, if it printed a figure.
fn fio_row(args: &BenchArgs, w: &Workload, path: &Path) -> Result<Option<Row>> {
    let (opts, qd) = fio::profile_options(w.profile);
    if w.profile.warm() {
        prepare_cache(w.profile, w)?;
    }
    let iops = fio::read_iops(path, &opts, args.seconds)?;
    Ok(iops.map(|iops| Row::fio(w.profile, qd, iops, args.seconds)))
}

fn print_document(args: &BenchArgs, doc: &Document, profiles: &[Profile]) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(doc)?);
    } else {
        print!("{}", report::table(&doc.rows, &doc.summary, profiles));
        println!(
            "\nwrote {0}/results.json, {0}/results.csv and {0}/chart.svg",
            args.out.display()
        );
    }
    Ok(())
}

fn run_sum_stream(args: &BenchArgs) -> Result<()> {
    if args.sum_blocks.is_empty() || args.sum_blocks.iter().any(|&b| b == 0 || b > 64 << 20) {
        bail!("--sum-blocks must be between 1 byte and 64 MiB each");
    }
    if args.sum_depth == Some(0) || args.sum_mib == 0 {
        bail!("--sum-depth and --sum-mib must be at least 1");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create the data directory {}", args.dir.display()))?;
    if crate::data::is_memory_filesystem(&args.dir)? {
        bail!(
            "{} is on tmpfs/ramfs: the page cache cannot be evicted there; pass --dir on a disk",
            args.dir.display()
        );
    }
    if !args.json {
        eprintln!(
            "preparing the {} MiB sum workload file in {} ...",
            args.sum_mib,
            args.dir.display()
        );
    }
    let path = data::create(
        &args.dir,
        &format!("sum-{}m.dat", args.sum_mib),
        args.sum_mib << 20,
    )?;
    let _guard = DataFile {
        path: path.clone(),
        keep: args.keep,
    };
    let rows = crate::sum_stream::run(
        &path,
        &args.sum_blocks,
        args.sum_depth,
        !args.sum_buffered,
        args.rounds,
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "sum": rows }))?
        );
    } else {
        print!("{}", crate::sum_stream::table(&rows, args.sum_mib));
    }
    Ok(())
}

fn write_outputs(out: &Path, doc: &Document, profiles: &[Profile]) -> Result<()> {
    let write = |name: &str, text: String| {
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))
    };
    write("results.json", serde_json::to_string_pretty(doc)?)?;
    write("results.csv", report::csv(&doc.rows))?;
    write("chart.svg", crate::svg::chart(&doc.rows, profiles))?;
    Ok(())
}
