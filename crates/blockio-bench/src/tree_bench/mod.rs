//! `blockio-bench tree`: `blockio cp` against GNU `cp -r`, and `blockio sum`
//! against `b3sum`, on trees it generates, in the same run. The `blockio`
//! measured is the shipped binary, run as a child process (`--blockio`; by
//! default the one beside `blockio-bench`, where cargo builds both).
//!
//! Every measurement runs both tools as child processes, in alternating
//! order over `--rounds` rounds, and reports the median wall time and the
//! ratio (the other tool's time over ours: above 1 means we are faster).
//!
//! * **warm**: earlier copies are synced and (as root) the caches dropped,
//!   then the source is read back into the page cache, so neither tool pays
//!   for another's write-back or for reclaiming memory they filled.
//! * **cold**: `sync`, then the page cache is dropped (`drop_caches` when
//!   writable, which also drops inodes and directories; otherwise
//!   `posix_fadvise(DONTNEED)` on every source file, and the report says
//!   so). For `cp`, cold means a durable copy: `cp -r` then `sync`, against
//!   `blockio cp --fsync`.
//!
//! Copies of tree (a) are kept until the whole run is done, and the other
//! trees' copies until that tree's runs are done: deleting thousands of
//! files just before creating thousands more makes ext4 (without a
//! journal) skip recently freed inodes for minutes, a cost that would land
//! on whichever tool runs next.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub mod after_deletion;

use crate::cache;
use crate::data;
use crate::fio;
use crate::measure::median;

/// Options of `blockio-bench tree`.
#[derive(Debug, Clone, clap::Args)]
pub struct TreeBenchArgs {
    /// Where the trees and copies go (created; removed afterwards unless
    /// --keep).
    #[arg(long, default_value = "tree-bench-data")]
    pub dir: PathBuf,
    /// Which jobs: cp, sum.
    #[arg(long, value_delimiter = ',', default_value = "cp,sum")]
    pub jobs: Vec<Job>,
    /// Which cp trees: small (20,000 files of 4 KiB, 5 deep), medium (500
    /// files of 1 MiB), large (2 files of 1 GiB).
    #[arg(long, value_delimiter = ',', default_value = "small,medium,large")]
    pub trees: Vec<TreeKind>,
    /// Which cache states: warm, cold.
    #[arg(long, value_delimiter = ',', default_value = "warm,cold")]
    pub modes: Vec<Mode>,
    /// Rounds per measurement (median reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Scale of file counts and sizes (1.0 = the sizes above; the tests use
    /// a tiny scale).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Size of the single big file that sum hashes, in MiB.
    #[arg(long, default_value_t = 2048)]
    pub sum_file_mib: u64,
    /// Which algorithms sum compares, each against its own tool: blake3
    /// (b3sum), sha512 (sha512sum), md5 (md5sum).
    #[arg(long, value_delimiter = ',', default_value = "blake3")]
    pub sum_algos: Vec<SumAlgo>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keep the generated trees.
    #[arg(long)]
    pub keep: bool,
    /// Instead of the jobs above: copy tree (a) with both tools in the
    /// states ext4 passes through after a mass deletion (see --deleted and
    /// --ages). Takes as long as the last age (15 minutes by default).
    #[arg(long)]
    pub after_deletion: bool,
    /// With --after-deletion: how many files to create and delete first.
    #[arg(long, default_value_t = 300_000)]
    pub deleted: u64,
    /// With --after-deletion: the seconds after the deletion at which each
    /// state is measured.
    #[arg(long, value_delimiter = ',', default_value = "10,60,300,900")]
    pub ages: Vec<u64>,
    /// With --after-deletion: make the state anew before every round
    /// (create, write out and delete --deleted files, then wait the age),
    /// so that every pair of copies starts at the same age instead of
    /// later and later in one state. Each round takes its age plus about a
    /// minute.
    #[arg(long, requires = "after_deletion")]
    pub fresh_state: bool,
    /// The `blockio` binary to measure (default: `blockio` in the directory
    /// of this program, where `cargo build -p blockio-cli -p blockio-bench`
    /// puts both).
    #[arg(long)]
    pub blockio: Option<PathBuf>,
}

/// A job to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Job {
    /// `blockio cp` against `cp -r`.
    Cp,
    /// `blockio sum` against `b3sum`.
    Sum,
}

/// An algorithm `sum` is measured with, against the tool that has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SumAlgo {
    /// BLAKE3, against `b3sum`.
    Blake3,
    /// SHA-512, against coreutils' `sha512sum`.
    Sha512,
    /// MD5, against coreutils' `md5sum`.
    Md5,
}

impl SumAlgo {
    /// `blockio sum --algo`'s name for it.
    fn name(self) -> &'static str {
        match self {
            SumAlgo::Blake3 => "blake3",
            SumAlgo::Sha512 => "sha512",
            SumAlgo::Md5 => "md5",
        }
    }

    /// The tool it is measured against.
    fn tool(self) -> &'static str {
        match self {
            SumAlgo::Blake3 => "b3sum",
            SumAlgo::Sha512 => "sha512sum",
            SumAlgo::Md5 => "md5sum",
        }
    }
}

/// A generated tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeKind {
    /// 20,000 files of 4 KiB in a tree 5 directories deep.
    Small,
    /// 500 files of 1 MiB.
    Medium,
    /// 2 files of 1 GiB.
    Large,
}

/// Page-cache state before a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Source cached.
    Warm,
    /// Source evicted (and, for cp, the copy made durable).
    Cold,
}

/// One measurement: ours against the other tool.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// cp or sum.
    pub job: Job,
    /// What was copied or hashed.
    pub input: String,
    /// warm or cold.
    pub mode: Mode,
    /// The other tool's command.
    pub baseline: String,
    /// Its median seconds.
    pub baseline_s: f64,
    /// Our median seconds.
    pub ours_s: f64,
    /// `baseline_s / ours_s`: above 1, we are faster.
    pub speedup: f64,
    /// The target for the speedup.
    pub target: f64,
    /// Durable copies of trees (b) and (c), when fio is installed: the
    /// median seconds fio takes to read the source while writing as many
    /// bytes, both `O_DIRECT` ([`fio::copy_io`]): what the device gives a
    /// copy's I/O, without files to create.
    pub fio_io_s: Option<f64>,
    /// `baseline_s / fio_io_s`: how much faster than the baseline the
    /// device does the same I/O for fio.
    pub fio_io_speedup: Option<f64>,
    /// How the cache was dropped (cold only).
    pub eviction: Option<String>,
}

impl TreeKind {
    fn name(self) -> &'static str {
        match self {
            TreeKind::Small => "small",
            TreeKind::Medium => "medium",
            TreeKind::Large => "large",
        }
    }
    /// (files, bytes per file) at scale 1.
    fn shape(self) -> (u64, u64) {
        match self {
            TreeKind::Small => (20_000, 4 << 10),
            TreeKind::Medium => (500, 1 << 20),
            TreeKind::Large => (2, 1 << 30),
        }
    }
    fn target(self) -> f64 {
        match self {
            TreeKind::Small => 2.0,
            TreeKind::Medium => 1.5,
            TreeKind::Large => 1.0,
        }
    }
    fn describe(self, files: u64, size: u64) -> String {
        format!("{} ({} x {} KiB)", self.name(), files, size >> 10)
    }
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(args: &TreeBenchArgs) -> Result<()> {
    check_args(args)?;
    let me = blockio_binary(args)?;
    let root = prepare_dir(args)?;
    let _cleanup = Cleanup {
        dir: root.clone(),
        keep: args.keep,
    };
    if args.after_deletion {
        let rows = after_deletion::run(args, &me, &root)?;
        return print_rows(args, &rows, after_deletion::table);
    }
    let mut rows = Vec::new();
    if args.jobs.contains(&Job::Cp) {
        rows.extend(cp_rows(args, &me, &root)?);
    }
    if args.jobs.contains(&Job::Sum) {
        rows.extend(sum_rows(args, &me, &root)?);
    }
    print_rows(args, &rows, table)
}

/// The `blockio` binary to measure: `--blockio`, else the one beside this
/// program; an error naming the path if it is not there.
fn blockio_binary(args: &TreeBenchArgs) -> Result<PathBuf> {
    let path = match &args.blockio {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("cannot find this program's path to look for blockio beside it")?
            .with_file_name("blockio"),
    };
    if !path.is_file() {
        bail!(
            "{}: no blockio binary there (build it with `cargo build -p blockio-cli`, or name it with --blockio)",
            path.display()
        );
    }
    Ok(path)
}

/// Refuses arguments out of range, and tools that are missing, before
/// anything is made.
fn check_args(args: &TreeBenchArgs) -> Result<()> {
    if args.rounds == 0 || args.rounds > 50 {
        bail!("--rounds must be between 1 and 50, got {}", args.rounds);
    }
    if !(args.scale > 0.0 && args.scale <= 1.0) {
        bail!("--scale must be above 0 and at most 1, got {}", args.scale);
    }
    for tool in needed_tools(args) {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("{tool} is not installed (scripts/install-deps installs it)");
        }
    }
    if !fio::available() && args.jobs.contains(&Job::Cp) && args.modes.contains(&Mode::Cold) {
        eprintln!("fio is not installed: durable copies are not compared with fio doing the same I/O (scripts/install-deps installs it)");
    }
    Ok(())
}

/// Creates `--dir` and checks, all at once before anything is measured,
/// that it has room for the whole run: a run that fills the disk half-way
/// (fio's scratch file next to tree (c) and tree (a)'s kept copies) wastes
/// the rounds already done.
fn prepare_dir(args: &TreeBenchArgs) -> Result<PathBuf> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let root = args.dir.canonicalize()?;
    let need = space_needed(args, &root);
    let free = data::free_bytes(&root)?;
    if free < need {
        bail!(
            "{}: {} MiB free, this run needs about {} MiB (sources still to make, tree (a)'s copies kept to the end, each other tree's copies and fio's scratch file kept until that tree is done); free some space, or use --scale, --trees, --rounds or another --dir",
            root.display(),
            free >> 20,
            need >> 20
        );
    }
    Ok(root)
}

/// Prints `rows` as JSON or as the table `table` makes.
fn print_rows<R: Serialize>(
    args: &TreeBenchArgs,
    rows: &[R],
    table: fn(&[R]) -> String,
) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        print!("{}", table(rows));
    }
    Ok(())
}

/// Says what is being measured, on stderr unless the output is JSON.
fn progress(args: &TreeBenchArgs, msg: &str) {
    if !args.json {
        eprintln!("{msg}");
    }
}

/// `blockio cp` against `cp -r` on every tree, in every mode.
fn cp_rows(args: &TreeBenchArgs, me: &Path, root: &Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &kind in &args.trees {
        let (n, size) = scaled_shape(kind, args.scale);
        let src = source_dir(root, kind);
        let name = kind.name();
        progress(
            args,
            &format!("cp: the {name} tree (made if not already there)"),
        );
        make_tree(&src, kind, n, size)?;
        for &mode in &args.modes {
            progress(args, &format!("cp: {name} tree, {mode:?}"));
            let timing = measure_cp(args, me, root, kind, mode)?;
            let baseline = if mode == Mode::Cold {
                "cp -r && sync"
            } else {
                "cp -r"
            };
            let input = kind.describe(n, size);
            rows.push(row(Job::Cp, input, mode, baseline, timing, kind.target()));
        }
        // Tree (a)'s 240,000 copied files stay until the end (see the
        // module docs); the others' few hundred go now, to free space.
        if kind != TreeKind::Small {
            remove_copies(root, Some(name))?;
        }
    }
    Ok(rows)
}

/// The command that copies `src` into a fresh destination, ours (`blockio
/// cp -r`, with `--fsync` when cold) or `cp -r`, and that destination.
fn copy_command(me: &Path, src: &Path, dst: PathBuf, mode: Mode, ours: bool) -> (Command, PathBuf) {
    let mut c = if ours {
        let mut c = Command::new(me);
        c.args(["cp", "-r"]);
        if mode == Mode::Cold {
            c.arg("--fsync");
        }
        c
    } else {
        let mut c = Command::new("cp");
        c.arg("-r");
        c
    };
    c.arg(src).arg(&dst);
    (c, dst)
}

/// Fails unless the copy at `dst` has the source's `want` (files, bytes).
fn check_copy(dst: &Path, want: (u64, u64)) -> Result<()> {
    let got = tree_totals(dst)?;
    if got != want {
        bail!(
            "{}: copied {} files / {} bytes, the source has {} / {}",
            dst.display(),
            got.0,
            got.1,
            want.0,
            want.1
        );
    }
    Ok(())
}

/// Times the copies of one tree in one mode; durable copies of the bigger
/// trees are also compared with fio doing the same I/O, whose time is data
/// (not tree (a)'s 20,000 file creations).
fn measure_cp(
    args: &TreeBenchArgs,
    me: &Path,
    root: &Path,
    kind: TreeKind,
    mode: Mode,
) -> Result<Timing> {
    let src = source_dir(root, kind);
    let want = tree_totals(&src)?;
    let mut k = 0;
    let mut copy_cmd = |ours: bool| {
        k += 1;
        let dst = root.join(format!("copy-{}-{mode:?}-{k}", kind.name()));
        copy_command(me, &src, dst, mode, ours)
    };
    let scratch = root.join(format!("copy-fio-{}", kind.name()));
    let mut fio_io = || {
        fio::copy_io(&src, want.1, &scratch).unwrap_or_else(|e| {
            eprintln!("fio's reference copy I/O was not measured: {e:#}");
            None
        })
    };
    let cold = mode == Mode::Cold;
    let with_fio = cold && kind != TreeKind::Small && fio::available();
    measure(
        args.rounds,
        mode,
        &list_files(&src)?,
        cold,
        &mut copy_cmd,
        |dst| check_copy(dst, want),
        with_fio.then_some(&mut fio_io as &mut dyn FnMut() -> Option<f64>),
    )
}

/// `blockio sum` against `b3sum` (and, with `--sum-algos`, `sha512sum` and
/// `md5sum`) on one big file and on the small-file tree, in every mode.
fn sum_rows(args: &TreeBenchArgs, me: &Path, root: &Path) -> Result<Vec<Row>> {
    let small = source_dir(root, TreeKind::Small);
    let (n, size) = scaled_shape(TreeKind::Small, args.scale);
    progress(args, "sum: the small-file tree (made if not already there)");
    make_tree(&small, TreeKind::Small, n, size)?;
    let (big_name, big_mib) = sum_file(args);
    progress(args, "sum: the big file (made if not already there)");
    let big = data::create(root, &big_name, big_mib << 20)?;
    let small_files = list_files(&small)?;
    let mut rows = Vec::new();
    for &mode in &args.modes {
        for &algo in &args.sum_algos {
            let tool = algo.tool();
            progress(
                args,
                &format!("sum: one {big_mib} MiB file, {mode:?}, {tool}"),
            );
            let mut cmd = |ours: bool| (sum_command(me, &big, algo, ours, false), PathBuf::new());
            let files = [big.clone()];
            let timing = measure(args.rounds, mode, &files, false, &mut cmd, |_| Ok(()), None)?;
            // The big file has a target cold only (where the reads reach
            // the disk); warm is reported for context.
            let target = if mode == Mode::Cold { 1.0 } else { 0.0 };
            let input = format!("one file of {big_mib} MiB");
            rows.push(row(Job::Sum, input, mode, tool, timing, target));

            progress(args, &format!("sum: {n} small files, {mode:?}, {tool}"));
            let mut cmd = |ours: bool| (sum_command(me, &small, algo, ours, true), PathBuf::new());
            let timing = measure(
                args.rounds,
                mode,
                &small_files,
                false,
                &mut cmd,
                |_| Ok(()),
                None,
            )?;
            let target = if mode == Mode::Cold { 2.0 } else { 1.0 };
            let input = format!("{n} files of 4 KiB");
            let baseline = format!("find | xargs {tool}");
            rows.push(row(Job::Sum, input, mode, &baseline, timing, target));
        }
    }
    Ok(rows)
}

/// The command that hashes `path` with `algo`: `blockio sum`, or the
/// algorithm's tool (through `find | xargs` for a tree).
fn sum_command(me: &Path, path: &Path, algo: SumAlgo, ours: bool, tree: bool) -> Command {
    if ours {
        let mut c = Command::new(me);
        c.arg("sum").arg("--algo").arg(algo.name()).arg(path);
        return c;
    }
    if !tree {
        let mut c = Command::new(algo.tool());
        c.arg(path);
        return c;
    }
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "find \"$1\" -type f -print0 | xargs -0 {}",
            algo.tool()
        ))
        .arg("sh")
        .arg(path);
    c
}

fn row(job: Job, input: String, mode: Mode, baseline: &str, t: Timing, target: f64) -> Row {
    Row {
        job,
        input,
        mode,
        baseline: baseline.to_string(),
        baseline_s: t.base,
        ours_s: t.ours,
        speedup: t.base / t.ours,
        target,
        fio_io_s: t.fio_io,
        fio_io_speedup: t.fio_io.map(|f| t.base / f),
        eviction: t.eviction,
    }
}

fn needed_tools(args: &TreeBenchArgs) -> Vec<&'static str> {
    let mut t = Vec::new();
    if args.jobs.contains(&Job::Cp) {
        t.push("cp");
    }
    if args.jobs.contains(&Job::Sum) {
        t.extend(args.sum_algos.iter().map(|a| a.tool()));
    }
    t
}

/// (files, bytes per file) of `kind` at `scale`.
pub(crate) fn scaled_shape(kind: TreeKind, scale: f64) -> (u64, u64) {
    let (n, size) = kind.shape();
    match kind {
        TreeKind::Large => (n, (scaled(size, scale) & !4095).max(1 << 20)),
        _ => (scaled(n, scale).max(2), size),
    }
}

/// Where the source tree of `kind` is made (and reused) under `root`.
pub(crate) fn source_dir(root: &Path, kind: TreeKind) -> PathBuf {
    root.join(format!("src-{}", kind.name()))
}

/// The name and MiB of `sum`'s big file at the run's scale.
fn sum_file(args: &TreeBenchArgs) -> (String, u64) {
    let mib = scaled(args.sum_file_mib, args.scale).max(1);
    (format!("sum-{mib}m.dat"), mib)
}

/// Bytes the run needs free under `root` at its peak: the sources and the
/// big file still to be made, tree (a)'s copies (kept until the end), and
/// the largest other tree's copies plus fio's scratch file of its size
/// (kept until that tree is done), with 256 MiB for directories and slack.
fn space_needed(args: &TreeBenchArgs, root: &Path) -> u64 {
    if args.after_deletion {
        // Tree (a), and every copy of it, kept to the end.
        let (n, size) = scaled_shape(TreeKind::Small, args.scale);
        let bytes = n * size;
        let source = if tree_made(&source_dir(root, TreeKind::Small), n, size) {
            0
        } else {
            bytes
        };
        let copies = 2 * args.rounds as u64 * args.ages.len() as u64;
        return source + bytes * copies + (256 << 20);
    }
    let copies = 2 * args.rounds as u64 * args.modes.len() as u64;
    let mut to_make = 0;
    let mut kept = 0;
    let mut peak = 0;
    let cp = args.jobs.contains(&Job::Cp);
    let sum = args.jobs.contains(&Job::Sum);
    for kind in [TreeKind::Small, TreeKind::Medium, TreeKind::Large] {
        let copied = cp && args.trees.contains(&kind);
        let summed = sum && kind == TreeKind::Small;
        if !(copied || summed) {
            continue;
        }
        let (n, size) = scaled_shape(kind, args.scale);
        let bytes = n * size;
        if !tree_made(&source_dir(root, kind), n, size) {
            to_make += bytes;
        }
        if copied {
            match kind {
                TreeKind::Small => kept += bytes * copies,
                _ => peak = peak.max(bytes * (copies + 1)),
            }
        }
    }
    if sum {
        let (name, mib) = sum_file(args);
        if !data::made(&root.join(name), mib << 20) {
            to_make += mib << 20;
        }
    }
    to_make + kept + peak + (256 << 20)
}

pub(crate) fn scaled(n: u64, scale: f64) -> u64 {
    (n as f64 * scale).round() as u64
}

/// The table: one line per measurement, speedups truncated (never rounded
/// up) to 2 decimals. Durable copies of trees (b) and (c) also show fio
/// doing the same I/O, and the baseline's time over fio's.
pub fn table(rows: &[Row]) -> String {
    let trunc = |x: f64| (x * 100.0).floor() / 100.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<4} {:<28} {:<5} {:<20} {:>10} {:>10} {:>8} {:>7} {:>8} {:>8}",
        "job",
        "input",
        "mode",
        "baseline",
        "base s",
        "ours s",
        "speedup",
        "target",
        "fio s",
        "base/fio"
    );
    for r in rows {
        let target = if r.target > 0.0 {
            format!(">= {:.1}", r.target)
        } else {
            "-".into()
        };
        let (fio, vs_fio) = match (r.fio_io_s, r.fio_io_speedup) {
            (Some(f), Some(m)) => (format!("{f:.3}"), format!("{:.2}", trunc(m))),
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "{:<4} {:<28} {:<5} {:<20} {:>10.3} {:>10.3} {:>8.2} {:>7} {:>8} {:>8}",
            format!("{:?}", r.job).to_lowercase(),
            r.input,
            format!("{:?}", r.mode).to_lowercase(),
            r.baseline,
            r.baseline_s,
            r.ours_s,
            trunc(r.speedup),
            target,
            fio,
            vs_fio
        );
    }
    if rows.iter().any(|r| r.fio_io_s.is_some()) {
        let _ = writeln!(
            s,
            "fio s: fio reading the source while writing as many bytes (O_DIRECT, 1 MiB, 32 in flight each, then fsync):\nthe copy's I/O without files to create; base/fio: how much faster the device does that than the baseline copies"
        );
    }
    if let Some(e) = rows.iter().find_map(|r| r.eviction.as_deref()) {
        let _ = writeln!(s, "cold runs: {e}");
    }
    s
}

/// What [`measure`] found: median seconds of each side.
struct Timing {
    base: f64,
    ours: f64,
    /// fio doing the same I/O ([`fio::copy_io`]), when measured.
    fio_io: Option<f64>,
    /// How cold was made (cold only).
    eviction: Option<String>,
}

/// Runs `cmd(ours)` for both tools, `rounds` times in alternating order,
/// with the cache prepared for `mode` on the input `files` before each run,
/// `sync` after the baseline when `sync_baseline` (its durable form), and
/// each run's output checked with `check`. With `fio_io`, each round also
/// times fio doing the same I/O in the same cache state, after the pair in
/// even rounds and before it in odd ones.
fn measure(
    rounds: usize,
    mode: Mode,
    files: &[PathBuf],
    sync_baseline: bool,
    cmd: &mut dyn FnMut(bool) -> (Command, PathBuf),
    check: impl Fn(&Path) -> Result<()>,
    mut fio_io: Option<&mut dyn FnMut() -> Option<f64>>,
) -> Result<Timing> {
    let mut times = [Vec::new(), Vec::new()];
    let mut fio_times = Vec::new();
    let mut eviction = None;
    for round in 0..rounds {
        // `Some(ours)` runs a tool, `None` fio. A run right after another
        // durable copy is slower (the host is still writing it), so fio,
        // when measured, goes last in even rounds and first in odd ones.
        let order = if round % 2 == 0 {
            [Some(false), Some(true), None]
        } else {
            [None, Some(true), Some(false)]
        };
        for side in order {
            if let Some(ours) = side {
                eviction = prepare(mode, files)?;
                let (mut c, out) = cmd(ours);
                let t = timed(&mut c, sync_baseline && !ours)?;
                check(&out)?;
                times[usize::from(ours)].push(t);
            } else if let Some(f) = fio_io.as_mut() {
                prepare(mode, files)?;
                fio_times.extend(f());
            }
        }
    }
    Ok(Timing {
        base: median(&times[0]),
        ours: median(&times[1]),
        fio_io: (!fio_times.is_empty()).then(|| median(&fio_times)),
        eviction,
    })
}

/// Runs the command (and `sync` after it, when asked), returning the wall
/// seconds; fails with the command's stderr if it fails.
pub(crate) fn timed(c: &mut Command, then_sync: bool) -> Result<f64> {
    c.stdout(std::process::Stdio::null());
    let start = Instant::now();
    let out = c.output().with_context(|| format!("cannot run {c:?}"))?;
    if !out.status.success() {
        bail!(
            "{c:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if then_sync {
        let st = Command::new("sync").status()?;
        if !st.success() {
            bail!("sync failed");
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Brings the cache into `mode`'s state; returns how cold was made.
fn prepare(mode: Mode, files: &[PathBuf]) -> Result<Option<String>> {
    // Write-back of earlier runs' copies is done before the clock starts.
    Command::new("sync").status()?;
    match mode {
        Mode::Warm => {
            // Free memory first (as root), so that no run pays for
            // reclaiming the page cache that earlier copies filled; then
            // read the source back in.
            let _ = drop_caches();
            for f in files {
                cache::warm(&File::open(f)?)?;
            }
            Ok(None)
        }
        Mode::Cold => {
            if drop_caches().is_ok() {
                return Ok(Some(
                    "page cache, dentries and inodes dropped (/proc/sys/vm/drop_caches)".into(),
                ));
            }
            for f in files {
                cache::evict(&File::open(f)?)?;
            }
            Ok(Some(
                "file data evicted with posix_fadvise(DONTNEED); dentries and inodes stay cached (run as root for drop_caches)".into(),
            ))
        }
    }
}

/// Drops the page cache, dentries and inodes (root only).
fn drop_caches() -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .and_then(|mut f| f.write_all(b"3\n"))
}

/// Whether `root` already holds `files` files of `size` bytes.
fn tree_made(root: &Path, files: u64, size: u64) -> bool {
    tree_totals(root).is_ok_and(|t| t == (files, files * size))
}

/// Makes the tree at `root` unless it is already there. The free space was
/// checked for the whole run beforehand (`space_needed`).
pub(crate) fn make_tree(root: &Path, kind: TreeKind, files: u64, size: u64) -> Result<()> {
    if tree_made(root, files, size) {
        return Ok(());
    }
    if root.exists() {
        std::fs::remove_dir_all(root)?;
    }
    let mut buf = vec![0u8; size.min(1 << 20) as usize];
    let mut made = 0u64;
    // Small: 4 subdirectories per level down to depth 5, files in the
    // leaves (1,024 of them), the rest at the top. Others: flat.
    let leaves: Vec<PathBuf> = if kind == TreeKind::Small {
        let mut level = vec![root.to_path_buf()];
        for _ in 0..5 {
            level = level
                .iter()
                .flat_map(|d| (0..4).map(move |i| d.join(format!("d{i}"))))
                .collect();
        }
        level
    } else {
        vec![root.to_path_buf()]
    };
    let per_leaf = files.div_ceil(leaves.len() as u64);
    for leaf in &leaves {
        std::fs::create_dir_all(leaf)?;
        for i in 0..per_leaf {
            if made == files {
                break;
            }
            let path = leaf.join(format!("f{i:05}.dat"));
            let mut f = File::create(&path).with_context(|| format!("{}", path.display()))?;
            let mut off = 0;
            while off < size {
                let n = buf.len().min((size - off) as usize);
                data::fill(&mut buf[..n], made * size + off);
                f.write_all(&buf[..n])?;
                off += n as u64;
            }
            made += 1;
        }
    }
    Command::new("sync").status()?;
    Ok(())
}

/// (regular files, bytes) under `root`.
pub(crate) fn tree_totals(root: &Path) -> Result<(u64, u64)> {
    let mut files = 0;
    let mut bytes = 0;
    for f in list_files(root)? {
        files += 1;
        bytes += std::fs::symlink_metadata(&f)?.len();
    }
    Ok((files, bytes))
}

fn list_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("{}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    Ok(out)
}

/// Removes the copies of the tree named `kind` (all copies with `None`).
fn remove_copies(root: &Path, kind: Option<&str>) -> Result<()> {
    let prefix = match kind {
        Some(k) => format!("copy-{k}-"),
        None => "copy-".to_string(),
    };
    for e in std::fs::read_dir(root)? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(e.path())
                .or_else(|_| std::fs::remove_file(e.path()))
                .with_context(|| format!("cannot remove {}", e.path().display()))?;
        }
    }
    Ok(())
}

struct Cleanup {
    dir: PathBuf,
    keep: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.keep {
            let _ = remove_copies(&self.dir, None);
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(jobs: Vec<Job>, trees: Vec<TreeKind>, rounds: usize) -> TreeBenchArgs {
        TreeBenchArgs {
            dir: PathBuf::from("unused"),
            jobs,
            trees,
            modes: vec![Mode::Warm, Mode::Cold],
            rounds,
            scale: 1.0,
            sum_file_mib: 2048,
            sum_algos: vec![SumAlgo::Blake3],
            json: false,
            keep: false,
            after_deletion: false,
            deleted: 300_000,
            ages: vec![10, 60, 300, 900],
            fresh_state: false,
            blockio: None,
        }
    }

    #[test]
    fn space_counts_tree_a_copies_to_the_end_and_the_largest_other_tree_once() {
        // Nothing made yet: every source counts.
        let root = Path::new("/nonexistent/blockio-tree-bench");
        let (small, medium, large) = (20_000 * 4096u64, 500u64 << 20, 2u64 << 30);
        let slack = 256 << 20;
        let all = [TreeKind::Small, TreeKind::Medium, TreeKind::Large].to_vec();
        // 3 rounds x 2 modes x 2 tools = 12 copies of each tree; tree (c)'s
        // copies and fio's scratch file, not tree (b)'s, at the peak.
        assert_eq!(
            space_needed(&args(vec![Job::Cp], all.clone(), 3), root),
            small + medium + large + 12 * small + 13 * large + slack
        );
        assert_eq!(
            space_needed(&args(vec![Job::Cp], vec![TreeKind::Medium], 1), root),
            medium + 5 * medium + slack
        );
        // sum reads tree (a) and a 2 GiB file, and copies nothing.
        assert_eq!(
            space_needed(&args(vec![Job::Sum], all, 3), root),
            small + (2048 << 20) + slack
        );
    }
}
