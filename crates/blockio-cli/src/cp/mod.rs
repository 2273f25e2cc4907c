//! `blockio cp`: GNU `cp`'s command line around [`blockio_tools::copy`].
//!
//! The arguments are read here, not by clap, the way GNU `getopt_long`
//! reads them, so that `blockio cp` can stand in for `cp`: options and
//! operands in any order (`POSIXLY_CORRECT` stops at the first operand),
//! `--` ends the options, short options bundle (`-av`, `-tDIR`), long
//! options may be abbreviated to any unambiguous prefix (`--rem`), and a
//! usage error prints GNU's message and exits with status 1.
//!
//! Reading goes in two stages ([`parse`]): each option, one unit in
//! [`defs`] with its test, records what was typed in [`lowargs`]; then
//! [`hiargs`] decides what to do, checks and defaults in GNU's order.

mod ask;
mod defs;
#[cfg(test)]
mod defs_tests;
mod help;
mod hiargs;
#[cfg(test)]
mod hiargs_tests;
mod lowargs;
mod memory;
mod parse;
mod program;
mod usage;

use crate::progress_line::ProgressLine;
use crate::stdio::say_err;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blockio_tools::copy::{self, CopyError, CopyReport, Progress};
use blockio_tools::room::{address_space_left, one_arena_under_address_limit, threads_within};

use ask::STDIN_ERROR;
use hiargs::HiArgs;
use memory::buffers_within;
use parse::parse;
use program::program;
use usage::{write_out, Usage};

/// Options and operands of `blockio cp`, as GNU `cp` takes them (see
/// `blockio cp --help`).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct CpArgs {
    /// GNU cp's options and operands, read as `cp` reads them.
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
    args: Vec<OsString>,
}

/// The arguments with the `--` clap drops when it comes first (`cp -- -x
/// f`: `-x` is a file), found by looking at the process's own arguments:
/// clap hands on the ones after it unchanged.
fn with_leading_dashes(args: &[OsString]) -> Vec<OsString> {
    let all: Vec<OsString> = std::env::args_os().collect();
    let n = args.len();
    // A `--` among the arguments clap hands on is one it kept; the one
    // right before them is one it dropped.
    if all.len() > n && all[all.len() - n..] == *args && all[all.len() - n - 1] == "--" {
        let mut v = vec![OsString::from("--")];
        v.extend_from_slice(args);
        return v;
    }
    args.to_vec()
}

/// Runs `cp`; `Ok(false)` when anything failed (each failure reported),
/// including a usage error (exit status 1, as GNU's).
pub fn run(args: &CpArgs) -> anyhow::Result<bool> {
    crate::oom::set_program(program());
    let limit = one_arena_under_address_limit();
    // Before any other thread starts (see its doc). Not under a limit on
    // address space, where the copy is fitted to what is left and a
    // thread and a list of the files in flight could tip it over; there,
    // and if no thread can be had, the copy goes on as GNU's does: an
    // interrupt leaves what is being copied.
    if limit.is_none() {
        let _ = copy::remove_unfinished_on_signals();
    }
    let room = limit.map(address_space_left);
    let mut cmd = match parse(&with_leading_dashes(&args.args)) {
        Ok(Some(cmd)) => cmd,
        Ok(None) => return Ok(true),
        Err(usage) => {
            say_usage(&usage);
            return Ok(false);
        }
    };
    cmd.opts.threads = threads_within(cmd.opts.threads, room);
    (cmd.opts.block, cmd.opts.wave) =
        buffers_within(cmd.opts.block, cmd.opts.wave, cmd.opts.threads, room);
    let report = match copy_with_progress(&cmd) {
        Ok(r) => r,
        Err(e) => {
            say_failure(&e, room.is_some());
            return Ok(false);
        }
    };
    finish(&report, cmd.json)
}

/// A usage error on standard error, with GNU's pointer to `--help` when
/// GNU gives it.
fn say_usage(Usage { msg, hint }: &Usage) {
    let p = program();
    say_err!("{p}: {msg}");
    if *hint {
        say_err!("Try '{p} --help' for more information.");
    }
}

/// Copies as `cmd` says, with a progress line on standard error when it
/// is a terminal (and not `--json`).
fn copy_with_progress(cmd: &HiArgs) -> std::io::Result<CopyReport> {
    let progress = Progress::default();
    let bar = ProgressLine::new(std::io::stderr().is_terminal() && !cmd.json);
    let on_error = |e: &CopyError| bar.suspend(|| say_err!("{}: {e}", program()));
    let done = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let (progress, bar, done) = (&progress, &bar, &done);
        // Only for a bar shown; a thread that cannot be had (under a
        // limit on address space or threads) leaves the bar still.
        if bar.is_shown() {
            let _ = std::thread::Builder::new().spawn_scoped(s, move || tick(progress, bar, done));
        }
        let r = copy::copy(&cmd.sources, &cmd.dest, &cmd.opts, progress, &on_error);
        done.store(true, Ordering::Relaxed);
        r
    });
    bar.clear();
    report
}

/// Draws the progress line every 100 ms until `done`.
fn tick(progress: &Progress, bar: &ProgressLine, done: &std::sync::atomic::AtomicBool) {
    let started = std::time::Instant::now();
    while !done.load(Ordering::Relaxed) {
        let bytes = progress.bytes.load(Ordering::Relaxed);
        let rate = bytes as f64 / started.elapsed().as_secs_f64().max(1e-3);
        bar.draw(&format!(
            "{} files, {} dirs, {:.1} MiB, {:.1} MiB/s",
            progress.files.load(Ordering::Relaxed),
            progress.dirs.load(Ordering::Relaxed),
            bytes as f64 / (1 << 20) as f64,
            rate / (1 << 20) as f64
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A copy that could not start, in one line: a usage error as GNU words
/// it, or the engine that could not be set up (no memory, no thread),
/// nothing copied. Under a limit on address space (`limited`) a thread
/// that cannot start (EAGAIN) ran out of memory as much as an allocation
/// that fails: GNU's "memory exhausted" either way, whichever came first.
fn say_failure(e: &std::io::Error, limited: bool) {
    match e.get_ref() {
        Some(inner) if inner.is::<copy::UsageError>() => {
            say_err!("{}: {inner}", program());
        }
        _ if limited && matches!(blockio::errno(e), Some(libc::EAGAIN | libc::ENOMEM)) => {
            say_err!("{}: memory exhausted", program());
        }
        _ => say_err!("{}: {}", program(), blockio_tools::reason::reason(e)),
    }
}

/// After the copy: the fallback notice, `--json`'s summary, and the
/// errors of standard output and standard input GNU reports at the end;
/// `Ok(false)` when anything failed.
fn finish(report: &CopyReport, json: bool) -> anyhow::Result<bool> {
    // Run as `cp` (a link of that name) its messages are GNU's alone, as
    // the sum tools' are; `--json` still says which backend ran.
    if let Some(reason) = report
        .fallback_reason
        .as_ref()
        .filter(|_| program() == "blockio cp")
    {
        crate::fallback_notice("cp", reason);
    }
    let mut ok = report.errors == 0;
    if json {
        let text = format!("{}\n", serde_json::to_string_pretty(report)?);
        if let Err(Usage { msg, .. }) = write_out(&text) {
            say_err!("{}: {msg}", program());
            ok = false;
        }
    }
    // Both reported, whichever failed.
    let output = output_ok(report);
    let input = input_ok();
    Ok(ok && output && input)
}

/// Whether standard output took every line: `-v`'s, and the flush at the
/// end. A write error is reported (GNU's "write error"); a closed pipe
/// ends the process as it would have.
fn output_ok(report: &CopyReport) -> bool {
    let flushed = {
        use std::io::Write;
        std::io::stdout().flush()
    };
    let Some(e) = report
        .output_error
        .map(std::io::Error::from_raw_os_error)
        .or(flushed.err())
    else {
        return true;
    };
    if e.raw_os_error() == Some(libc::EPIPE) {
        // The copy is whole; now end as the closed pipe would have.
        crate::stdio::end_as_a_closed_pipe_would();
    }
    say_err!(
        "{}: write error: {}",
        program(),
        blockio_tools::reason::reason(&e)
    );
    false
}

/// Whether every answer of `-i` was read; a read error is reported as
/// GNU's "error closing file".
fn input_ok() -> bool {
    match STDIN_ERROR.load(Ordering::Relaxed) {
        0 => true,
        code => {
            let e = std::io::Error::from_raw_os_error(code);
            say_err!(
                "{}: error closing file: {}",
                program(),
                blockio_tools::reason::reason(&e)
            );
            false
        }
    }
}
