//! The `blockio` command-line tool. Thin: the work is in the library crates.
//! Run through a link named after a tool (`sha256sum`, `b3sum`, `cp`, …) it
//! is that tool (see [`multicall`]).
//!
//! It holds the tools a user runs on their files, `cp` and `sum`, and
//! nothing else. The benchmarks, `bench` included, are the separate
//! `blockio-bench` binary (crate `blockio-bench`): even the read benchmark,
//! which answers "does io_uring help on my machine?", is a measurement
//! against other runtimes (tokio's thread pool, monoio, fio), and keeping it
//! here would make every user's binary link those runtimes and the load
//! generators for the sake of a question asked once per machine.
//!
//! `main` is the C entry point, not Rust's: Rust's runtime setup would
//! ignore SIGPIPE and fill closed standard descriptors with `/dev/null`
//! before any of our code runs, and the sum tools must see both as
//! their parent left them (GNU's report a closed standard input, and an
//! ignored SIGPIPE makes a closed pipe a write error). Arguments are still
//! read with `std::env::args_os` (glibc hands them to the standard library
//! before `main`).

// Tests run under the test harness's own `main`.
#![cfg_attr(not(test), no_main)]

use clap::{Parser, Subcommand};

use std::ffi::OsString;
use std::path::PathBuf;

mod b3sum_cli;
mod coreutils_sum_cli;
mod cp;
mod multicall;
mod oom;
mod progress_line;
mod stdio;

use multicall::Personality;

use blockio_tools::algo::Algo;
use blockio_tools::sum::{ListOptions, SumOptions};
use blockio_tools::sum_tool::{self, Checking, Family, Run, Tool};
use blockio_tools::{getopt, size};

/// Batched disk I/O on io_uring: copies and checksums of files and trees.
#[derive(Parser)]
#[command(name = "blockio", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Checksums of files and directory trees (BLAKE3 by default), in the
    /// format of b3sum and sha256sum; -c checks such a list.
    Sum(SumArgs),
    /// Copy files and directory trees (as `cp -r`: links as links, modes
    /// kept; -p/-a keep times and owners, -n keeps existing files).
    Cp(cp::CpArgs),
}

/// Options of `blockio sum`.
#[derive(clap::Args)]
struct SumArgs {
    /// Files and directories to hash (directories recursed, sorted; `-` or
    /// none: standard input); with -c, checksum lists to check (`-` or
    /// none: standard input).
    paths: Vec<PathBuf>,
    /// The algorithm: blake3, sha256, sha512, sha384, sha224, sha1, md5,
    /// blake2b (512 bits), sm3, xxh3 or crc32c.
    #[arg(long, default_value = "blake3")]
    algo: Algo,
    /// Read checksums from the files and check them. Every format
    /// sha256sum and b3sum write, and sha256sum -c reads, is read (`hash
    /// name`, `hash *name`, `--tag` and OpenSSL lines, BSD single-space
    /// lists, leading blanks, CRLF line ends, escaped names); a tagged
    /// line names its own algorithm.
    #[arg(short = 'c', long)]
    check: bool,
    /// Write `BLAKE3 (name) = hash` lines (BSD style, as `sha256sum --tag`).
    #[arg(long, conflicts_with = "check")]
    tag: bool,
    /// With -c: print nothing for files that match.
    #[arg(long, requires = "check")]
    quiet: bool,
    /// With -c: print nothing; the exit status tells.
    #[arg(long, requires = "check")]
    status: bool,
    /// With -c: fail on improperly formatted lines.
    #[arg(long, requires = "check")]
    strict: bool,
    /// With -c: name each improperly formatted line.
    #[arg(short = 'w', long, requires = "check")]
    warn: bool,
    /// When recursing, leave out links to directories, dangling links,
    /// FIFOs, sockets and devices without a word (by default each is
    /// reported and the exit status is 1).
    #[arg(long, conflicts_with = "check")]
    skip_special: bool,
    /// Worker threads (default: the CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// Bytes per read of a large file, 4K to 256M (K, M and G suffixes
    /// allowed; default: 1 MiB from the page cache, 2 MiB with O_DIRECT).
    #[arg(long, value_parser = size::parse)]
    block_size: Option<usize>,
    /// Reads of a large file in flight (default: 4 from the page cache, 16
    /// with O_DIRECT).
    #[arg(long)]
    depth: Option<usize>,
    /// Read large files through the page cache even when they are not in
    /// it (by default those are read with O_DIRECT, leaving the cache alone).
    #[arg(long)]
    no_direct: bool,
}

fn sum(args: &SumArgs) -> anyhow::Result<bool> {
    if let Some(b) = args.block_size.filter(|b| !(4096..=256 << 20).contains(b)) {
        anyhow::bail!("--block-size must be between 4096 (4K) and 268435456 (256M), got {b}");
    }
    if args.threads == Some(0) {
        anyhow::bail!("--threads must be at least 1");
    }
    if let Some(d) = args.depth.filter(|d| !(1..=1024).contains(d)) {
        anyhow::bail!("--depth must be between 1 and 1024, got {d}");
    }
    let mut opts = SumOptions {
        algo: args.algo,
        direct: !args.no_direct,
        ..SumOptions::default()
    };
    if let Some(b) = args.block_size {
        (opts.block, opts.direct_block) = (b, b);
    }
    if let Some(d) = args.depth {
        (opts.depth, opts.direct_depth) = (d, d);
    }
    if let Some(t) = args.threads {
        opts.threads = t;
    }
    let engine = blockio_tools::sum_room::engine_within_limits(&mut opts)?;
    if let Some(reason) = engine.fallback_reason() {
        fallback_notice("sum", reason);
    }
    // A message that cannot be written stops nothing.
    let (mut out, mut err) = (std::io::stdout().lock(), stdio::Stderr);
    let ok = if args.check {
        let checking = Checking {
            quiet: args.quiet,
            status: args.status,
            strict: args.strict,
            warn: args.warn,
            ignore_missing: false,
        };
        let tool = Tool {
            prog: "blockio sum".into(),
            family: Family::Sum,
            algo: opts.algo,
        };
        let run = Run {
            engine: &engine,
            tool: &tool,
            opts: &opts,
        };
        sum_tool::check(run, &args.paths, checking, &mut out, &mut err)?
    } else {
        let list = ListOptions {
            tag: args.tag,
            skip_special: args.skip_special,
        };
        blockio_tools::sum::print_sums(&engine, &args.paths, &opts, &list, &mut out, &mut err)?
    };
    Ok(ok)
}

/// Says on stderr, once per run, that the I/O ran on the thread-pool
/// fallback because io_uring is unavailable, and why: the tool's output is
/// the same either way, but its speed is not io_uring's. Nothing is said
/// when the user asked for the thread pool.
fn fallback_notice(tool: &str, reason: &str) {
    if reason != blockio::FALLBACK_REQUESTED {
        stdio::say(&format!(
            "blockio {tool}: note: I/O ran on the thread-pool backend: {reason}"
        ));
    }
}

/// The program: what `argv[0]` makes it, run; never returns.
#[cfg_attr(not(test), unsafe(no_mangle))]
#[cfg_attr(test, allow(dead_code))]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    let args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args.first().cloned().unwrap_or_default();
    let personality = multicall::personality(&argv0);
    match personality {
        // GNU's tools leave SIGPIPE as their parent set it and see closed
        // descriptors as closed.
        Personality::CoreutilsSum(_) => stdio::init(stdio::Fill::Failing),
        // b3sum is a Rust program: closed descriptors are /dev/null to it.
        Personality::B3sum => stdio::init(stdio::Fill::Usable),
        // `cp` sees closed descriptors as GNU's does ("write error: Bad
        // file descriptor" for `-v`), and, as every copy, ignores SIGPIPE
        // while it copies: a `-v` line to a closed pipe must never kill it
        // between emptying a destination and filling it. It ends as a
        // closed pipe would have ended it once the copy is done (see
        // `cp::run`).
        Personality::Cp => {
            stdio::init(stdio::Fill::Failing);
            stdio::set_sigpipe(true);
        }
        Personality::Blockio if args.get(1).is_some_and(|a| a == "cp") => {
            stdio::init(stdio::Fill::Usable);
            stdio::set_sigpipe(true);
        }
        // A closed pipe (`blockio sum | head`) ends the process quietly,
        // as it ends the coreutils, instead of each write failing with
        // EPIPE.
        Personality::Blockio => {
            stdio::init(stdio::Fill::Usable);
            stdio::set_sigpipe(false);
        }
    }
    let code = match personality {
        Personality::Blockio => blockio(Cli::parse_from(&args)),
        Personality::Cp => multicall::cp(&args),
        Personality::B3sum => b3sum_cli::main(&args),
        Personality::CoreutilsSum(tool) => coreutils_sum_cli::main(
            &argv0.to_string_lossy(),
            &multicall::program("sum"),
            tool,
            args.get(1..).unwrap_or_default(),
        ),
    };
    std::process::exit(code);
}

/// The exit status of a finished run: 0 if all went well; 1 if something
/// failed (reported where it happened) or an error stopped it, which is
/// reported here as `<prog>: <error>`.
pub(crate) fn exit_status(result: anyhow::Result<bool>, prog: &str) -> i32 {
    match result {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            stdio::say(&format!("{prog}: {e:#}"));
            1
        }
    }
}

/// `blockio` under its own name: the subcommand's exit status.
fn blockio(cli: Cli) -> i32 {
    let result = match &cli.command {
        Cmd::Sum(args) => sum(args),
        Cmd::Cp(args) => cp::run(args),
    };
    exit_status(result, "blockio: error")
}
