//! `blockio cp`: the command line around [`blockio_tools::copy`].

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blockio_tools::copy::{self, CopyError, CopyOptions, Progress};

/// Options of `blockio cp` (GNU `cp -r` semantics; see the `copy` module).
#[derive(clap::Args)]
pub struct CpArgs {
    /// Sources, then the destination (a directory when there are several
    /// sources).
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<PathBuf>,
    /// Accepted for compatibility: the copy is always recursive.
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    _recursive: bool,
    /// Keep mode, ownership (when permitted) and timestamps.
    #[arg(short = 'p', long)]
    preserve: bool,
    /// Archive: recursive, symbolic links as links, and --preserve.
    #[arg(short = 'a', long)]
    archive: bool,
    /// Do not overwrite existing files.
    #[arg(short = 'n', long)]
    no_clobber: bool,
    /// Make the copy durable before exiting: files of 1 MiB or more are
    /// fsynced each, then one syncfs per destination file system covers the
    /// rest (small files, directories, links, attributes).
    #[arg(long)]
    fsync: bool,
    /// Print a JSON summary on stdout at the end.
    #[arg(long)]
    json: bool,
    /// Bytes per read and write (K, M and G suffixes allowed).
    #[arg(long, default_value = "1M", value_parser = parse_block)]
    block_size: usize,
    /// Worker threads (default: one more than the CPUs).
    #[arg(long)]
    threads: Option<usize>,
}

/// A block size for `cp`: 4 KiB to 64 MiB.
fn parse_block(s: &str) -> Result<usize, String> {
    let n = crate::size::parse(s)?;
    if !(4096..=(64 << 20)).contains(&n) {
        return Err(format!("must be between 4K and 64M, got {s}"));
    }
    Ok(n)
}

/// Runs the copy; `Ok(false)` when any path failed (each one reported).
pub fn run(args: &CpArgs) -> anyhow::Result<bool> {
    let (dest, sources) = args.paths.split_last().expect("clap requires two paths");
    if args.threads == Some(0) {
        anyhow::bail!("--threads must be at least 1");
    }
    let mut opts = CopyOptions {
        preserve: args.preserve || args.archive,
        no_clobber: args.no_clobber,
        fsync: args.fsync,
        block: args.block_size,
        ..CopyOptions::default()
    };
    opts.wave = opts.wave.max(opts.block);
    if let Some(t) = args.threads {
        opts.threads = t;
    }
    let progress = Progress::default();
    let bar = if std::io::stderr().is_terminal() && !args.json {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(Duration::from_millis(100));
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let on_error = |e: &CopyError| bar.suspend(|| eprintln!("blockio cp: {e}"));
    let done = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let (progress, bar, done) = (&progress, &bar, &done);
        let started = std::time::Instant::now();
        s.spawn(move || {
            while !done.load(Ordering::Relaxed) && !bar.is_hidden() {
                let bytes = progress.bytes.load(Ordering::Relaxed);
                let rate = bytes as f64 / started.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!(
                    "{} files, {} dirs, {:.1} MiB, {:.1} MiB/s",
                    progress.files.load(Ordering::Relaxed),
                    progress.dirs.load(Ordering::Relaxed),
                    bytes as f64 / (1 << 20) as f64,
                    rate / (1 << 20) as f64
                ));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = copy::copy(sources, dest, &opts, progress, &on_error);
        done.store(true, Ordering::Relaxed);
        r
    });
    bar.finish_and_clear();
    let report = report.map_err(|e| match e.get_ref() {
        Some(inner) if inner.is::<copy::UsageError>() => anyhow::anyhow!("cp: {inner}"),
        _ => anyhow::Error::from(e).context("cp"),
    })?;
    if let Some(reason) = &report.fallback_reason {
        crate::fallback_notice("cp", reason);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(report.errors == 0)
}
