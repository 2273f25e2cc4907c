//! `blockio` run as `b3sum`: b3sum 1.2's options, output, check lists and
//! messages, with the files read as `blockio sum` reads them. This module
//! reads the command line; printing and checking are
//! [`blockio_tools::digest_tool`]'s, shared with the coreutils tools
//! ([`Family::B3sum`] names where b3sum differs).
//!
//! `--no-mmap` is accepted and changes nothing: files are never mapped
//! (they are read in batches, or streamed with `O_DIRECT`). `--num-threads`
//! caps the threads that read and hash. Unlike `b3sum`, names that are not
//! UTF-8 are written as their bytes, not with U+FFFD.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use clap::Parser;

use blockio_tools::algo::{Algo, Blake3Mode, Blake3Params};
use blockio_tools::digest_tool::{self, Checking, Family, Format, Run, Tool};
use blockio_tools::sum::SumOptions;

/// The longest output `-l` asks for that we write: a digest is made whole
/// in memory (b3sum streams any length).
const MAX_LENGTH: u64 = 1 << 20;

/// Print or check BLAKE3 checksums.
#[derive(Parser, Debug)]
#[command(
    name = "b3sum",
    version = concat!("1.2.0 (blockio ", env!("CARGO_PKG_VERSION"), ")"),
    disable_help_subcommand = true
)]
struct B3Args {
    /// Files to hash, or checkfiles to check. When no file is given, or
    /// when - is given, read standard input.
    #[arg(required_if_eq("keyed", "true"))]
    files: Vec<PathBuf>,
    /// Uses the keyed mode. The secret key is read from standard input, and
    /// it must be exactly 32 raw bytes.
    #[arg(long, conflicts_with = "derive_key")]
    keyed: bool,
    /// Uses the key derivation mode, with the given context string.
    #[arg(long, value_name = "CONTEXT")]
    derive_key: Option<String>,
    /// The number of output bytes, prior to hex encoding.
    #[arg(short = 'l', long, value_name = "LEN", default_value_t = 32)]
    length: u64,
    /// The maximum number of threads to use (default, or 0: the CPUs).
    #[arg(long, value_name = "NUM")]
    num_threads: Option<usize>,
    /// Accepted for b3sum's sake: blockio never maps files into memory.
    #[arg(long)]
    no_mmap: bool,
    /// Omits filenames in the output.
    #[arg(long)]
    no_names: bool,
    /// Writes raw output bytes to stdout, rather than hex. --no-names is
    /// implied. In this case, only a single input is allowed.
    #[arg(long)]
    raw: bool,
    /// Reads BLAKE3 sums from the files and checks them.
    #[arg(
        short = 'c',
        long,
        conflicts_with_all = ["keyed", "derive_key", "raw", "no_names", "length"]
    )]
    check: bool,
    /// Skips printing OK for each successfully verified file. Must be used
    /// with --check.
    #[arg(long, requires = "check")]
    quiet: bool,
}

/// Runs as `b3sum` with `args` (the program name first); returns the
/// exit status.
pub fn main(args: &[OsString]) -> i32 {
    let args = match B3Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => {
            // b3sum reports a version it cannot write, in clap's words.
            let mut out = io::stdout();
            return match write!(out, "{}", e.render()).and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(w) => {
                    let _ = writeln!(io::stderr(), "error: {}", w.kind());
                    1
                }
            };
        }
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    match run(&args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            crate::stdio::say(&format!("Error: {e}"));
            1
        }
    }
}

fn run(args: &B3Args) -> io::Result<bool> {
    let engine = blockio::Engine::new()?;
    let mut opts = SumOptions::default();
    if let Some(n) = args.num_threads.filter(|&n| n > 0) {
        opts.threads = n;
    }
    // A message that cannot be written stops nothing.
    let (mut out, mut err) = (io::stdout().lock(), crate::stdio::Stderr);
    if args.check {
        // -c takes no key, context or length: the lists hold plain BLAKE3.
        let tool = b3sum(Algo::Blake3);
        let checking = Checking {
            quiet: args.quiet,
            ..Checking::default()
        };
        return digest_tool::check(
            run_of(&engine, &tool, &opts),
            &args.files,
            checking,
            &mut out,
            &mut err,
        );
    }
    if args.raw && args.files.len() > 1 {
        return Err(io::Error::other(
            "Only one filename can be provided when using --raw",
        ));
    }
    if args.length > MAX_LENGTH {
        return Err(io::Error::other(format!(
            "--length {} is more than blockio writes: at most {MAX_LENGTH} bytes",
            args.length
        )));
    }
    let mode = if args.keyed {
        Blake3Mode::Keyed(read_key()?)
    } else if let Some(context) = &args.derive_key {
        Blake3Mode::DeriveKey(context.clone())
    } else {
        Blake3Mode::Hash
    };
    let len = args.length as usize;
    // One small allocation that lives as long as the process: `Algo` is
    // `Copy` and carries its parameters by reference.
    let tool = b3sum(Algo::Blake3With(Box::leak(Box::new(Blake3Params {
        mode,
        len,
    }))));
    let format = Format {
        no_names: args.no_names,
        raw: args.raw,
        ..Format::default()
    };
    digest_tool::print_sums(
        run_of(&engine, &tool, &opts),
        &args.files,
        format,
        &mut out,
        &mut err,
    )
}

/// The `b3sum` tool hashing with `algo`.
fn b3sum(algo: Algo) -> Tool {
    Tool {
        prog: "b3sum".into(),
        family: Family::B3sum,
        algo,
    }
}

fn run_of<'a>(engine: &'a blockio::Engine, tool: &'a Tool, opts: &'a SumOptions) -> Run<'a> {
    Run { engine, tool, opts }
}

/// The key of `--keyed`: exactly 32 bytes on standard input.
fn read_key() -> io::Result<[u8; 32]> {
    let mut key = Vec::with_capacity(33);
    io::stdin().lock().take(33).read_to_end(&mut key)?;
    match key.len() {
        32 => Ok(key.try_into().expect("32 bytes")),
        n if n < 32 => Err(io::Error::other(format!(
            "expected 32 key bytes from stdin, found {n}"
        ))),
        _ => Err(io::Error::other("read more than 32 key bytes from stdin")),
    }
}
