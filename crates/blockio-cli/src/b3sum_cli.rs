//! `blockio` run as `b3sum`: b3sum 1.8's options, output, check lists and
//! messages, with the files read as `blockio sum` reads them. This module
//! reads the command line; printing and checking are
//! [`blockio_tools::sum_tool`]'s, shared with the coreutils tools
//! ([`Family::B3sum`] names where b3sum differs).
//!
//! `--no-mmap` is accepted and changes nothing: files are never mapped
//! (they are read in batches, or streamed with `O_DIRECT`). `--num-threads`
//! caps the threads that read and hash. Names that are not UTF-8 are
//! written with U+FFFD, as b3sum writes them (`blockio sum` writes their
//! bytes).

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::PathBuf;

use clap::Parser;

use blockio_tools::algo::{Algo, Blake3Mode, Blake3Params};
use blockio_tools::sum::SumOptions;
use blockio_tools::sum_room;
use blockio_tools::sum_tool::{self, Checking, Family, Format, Run, Tool};

/// b3sum's command line (its options' help in b3sum 1.8's words).
///
/// `--version` prints exactly what b3sum 1.8.7 prints, `b3sum 1.8.7`: a
/// script that reads the version takes the second field, and one that
/// compares the line with b3sum's (or two tools' outputs) sees the same
/// bytes. It names the b3sum whose behaviour is followed; which program
/// answers is told by `blockio --version` and by the link itself.
#[derive(Parser, Debug)]
#[command(
    name = "b3sum",
    version = "1.8.7",
    about = None,
    long_about = None,
    max_term_width(100),
    disable_help_subcommand = true
)]
struct B3Args {
    /// Files to hash, or checkfiles to check
    ///
    /// When no file is given, or when - is given, read standard input.
    file: Vec<PathBuf>,
    /// Use the keyed mode, reading the 32-byte key from stdin
    #[arg(long, requires("file"))]
    keyed: bool,
    /// Use the key derivation mode, with the given context string
    ///
    /// Cannot be used with --keyed.
    #[arg(long, value_name("CONTEXT"), conflicts_with("keyed"))]
    derive_key: Option<String>,
    /// The number of output bytes, before hex encoding
    #[arg(short, long, default_value_t = 32, value_name("LEN"))]
    length: u64,
    /// The starting output byte offset, before hex encoding
    #[arg(long, default_value_t = 0, value_name("SEEK"))]
    seek: u64,
    /// The maximum number of threads to use
    ///
    /// By default, or if its value is 0, the number of logical cores.
    #[arg(long, value_name("NUM"))]
    num_threads: Option<usize>,
    /// Disable memory mapping
    ///
    /// Accepted for b3sum's sake: blockio never maps files into memory.
    #[arg(long)]
    no_mmap: bool,
    /// Omit filenames in the output
    #[arg(long)]
    no_names: bool,
    /// Write raw output bytes to stdout, rather than hex
    ///
    /// --no-names is implied. In this case, only a single input is allowed.
    #[arg(long)]
    raw: bool,
    /// Output BSD-style checksums: BLAKE3 ([FILE]) = [HASH]
    #[arg(long)]
    tag: bool,
    /// Read BLAKE3 sums from the [FILE]s and check them
    #[arg(
        short,
        long,
        conflicts_with_all(["derive_key", "keyed", "length", "raw", "tag", "no_names"])
    )]
    check: bool,
    /// Skip printing OK for each checked file
    ///
    /// Must be used with --check.
    #[arg(long, requires("check"))]
    quiet: bool,
}

/// Runs as `b3sum` with `args` (the program name first); returns the
/// exit status.
pub fn main(args: &[OsString]) -> i32 {
    let args = match B3Args::try_parse_from(args) {
        Ok(a) => a,
        // Help and version exit 0, a usage error 2, as clap's own exit
        // does in b3sum: a help or version that cannot be written is let
        // go, as there.
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
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
    let mut opts = SumOptions::default();
    if let Some(n) = args.num_threads.filter(|&n| n > 0) {
        opts.threads = n;
    }
    let engine = sum_room::engine_within_limits(&mut opts)?;
    // A message that cannot be written stops nothing.
    let (mut out, mut err) = (io::stdout().lock(), crate::stdio::Stderr);
    if args.check {
        // -c takes no key, context or length: the lists hold plain BLAKE3
        // (from the --seek offset).
        let tool = b3sum(blake3_with(Blake3Mode::Hash, 32, args.seek));
        let checking = Checking {
            quiet: args.quiet,
            ..Checking::default()
        };
        return sum_tool::check(
            run_of(&engine, &tool, &opts),
            &args.file,
            checking,
            &mut out,
            &mut err,
        );
    }
    if args.raw && args.file.len() > 1 {
        return Err(io::Error::other(
            "Only one filename can be provided when using --raw",
        ));
    }
    // Any length: past 1 MiB the output is streamed (sum_xof).
    let length = usize::try_from(args.length).map_err(|_| {
        io::Error::other(format!(
            "--length {} is more than this machine addresses",
            args.length
        ))
    })?;
    let mode = if args.keyed {
        Blake3Mode::Keyed(read_key()?)
    } else if let Some(context) = &args.derive_key {
        Blake3Mode::DeriveKey(context.clone())
    } else {
        Blake3Mode::Hash
    };
    let tool = b3sum(blake3_with(mode, length, args.seek));
    let format = Format {
        no_names: args.no_names,
        raw: args.raw,
        tag: args.tag,
        ..Format::default()
    };
    sum_tool::print_sums(
        run_of(&engine, &tool, &opts),
        &args.file,
        format,
        &mut out,
        &mut err,
    )
}

/// BLAKE3 in `mode`, `len` bytes of output from offset `seek`. One small
/// allocation that lives as long as the process: `Algo` is `Copy` and
/// carries its parameters by reference.
fn blake3_with(mode: Blake3Mode, len: usize, seek: u64) -> Algo {
    Algo::Blake3With(Box::leak(Box::new(Blake3Params { mode, len, seek })))
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
