//! `blockio` run as `b3sum`: b3sum 1.2's options, output, check lists and
//! messages, with the files read as `blockio sum` reads them.
//!
//! `--no-mmap` is accepted and changes nothing: files are never mapped
//! (they are read in batches, or streamed with `O_DIRECT`). `--num-threads`
//! caps the threads that read and hash. Unlike `b3sum`, names that are not
//! UTF-8 are written as their bytes, not with U+FFFD.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use clap::Parser;

use blockio_tools::algo::{Algo, Blake3Mode, Blake3Params};
use blockio_tools::sum::{hash_inputs, SumOptions, STDIN};

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
    let mut files = args.files.clone();
    if files.is_empty() {
        files.push(PathBuf::from(STDIN));
    }
    // A message that cannot be written stops nothing.
    let (mut out, mut err) = (io::stdout().lock(), crate::stdio::Stderr);
    if args.check {
        let mut ok = true;
        for list in &files {
            ok &= check_list(&engine, list, args.quiet, &opts, &mut out, &mut err)?;
        }
        out.flush()?;
        return Ok(ok);
    }
    if args.raw && files.len() > 1 {
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
    let algo = Algo::Blake3With(Box::leak(Box::new(Blake3Params { mode, len })));
    let mut ok = true;
    // In keyed mode standard input held the key: `-` is refused, in its
    // place among the files, as b3sum refuses it.
    let keyed = args.keyed;
    for run in files.split_inclusive(|p| keyed && p.as_os_str() == STDIN) {
        let (run, refused) = match run.split_last() {
            Some((last, rest)) if keyed && last.as_os_str() == STDIN => (rest, true),
            _ => (run, false),
        };
        let inputs: Vec<(PathBuf, Algo)> = run.iter().map(|p| (p.clone(), algo)).collect();
        let mut result = Ok(());
        hash_inputs(&engine, &inputs, &opts, |i, r| {
            if result.is_err() {
                return;
            }
            result = match r {
                Ok(hex) if args.raw => out.write_all(&decode_hex(&hex)),
                Ok(hex) if args.no_names => writeln!(out, "{hex}"),
                Ok(hex) => out.write_all(&line(&hex, inputs[i].0.as_os_str())),
                Err(e) => {
                    ok = false;
                    writeln!(err, "b3sum: {}: {}", e.path.display(), e.error)
                }
            };
        });
        result?;
        if refused {
            ok = false;
            out.flush()?;
            writeln!(err, "b3sum: -: Cannot open `-` in keyed mode")?;
        }
    }
    out.flush()?;
    Ok(ok)
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

fn decode_hex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap_or("00"), 16).unwrap_or(0))
        .collect()
}

/// `<hex>  <name>`, as b3sum writes it: a name with a backslash or a
/// newline has them escaped, and the line starts with a backslash.
fn line(hex: &str, name: &OsStr) -> Vec<u8> {
    let raw = name.as_bytes();
    let escape = raw.iter().any(|&b| b == b'\\' || b == b'\n');
    let mut out = Vec::with_capacity(hex.len() + raw.len() + 4);
    if escape {
        out.push(b'\\');
    }
    out.extend_from_slice(hex.as_bytes());
    out.extend_from_slice(b"  ");
    put_name(&mut out, raw, escape);
    out.push(b'\n');
    out
}

fn put_name(out: &mut Vec<u8>, raw: &[u8], escape: bool) {
    for &b in raw {
        match (escape, b) {
            (true, b'\\') => out.extend_from_slice(b"\\\\"),
            (true, b'\n') => out.extend_from_slice(b"\\n"),
            _ => out.push(b),
        }
    }
}

/// A check line, read as b3sum reads it: the name as written (for the
/// result line), the file, the digest; or why the line is refused.
fn parse_check_line(line: &[u8]) -> Result<(Vec<u8>, PathBuf, Vec<u8>), &'static str> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if line.is_empty() {
        return Err("Empty line");
    }
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    if line.len() <= 66 {
        return Err("Short line");
    }
    if !line[..66].is_ascii() {
        return Err("Non-ASCII prefix");
    }
    if &line[64..66] != b"  " {
        return Err("Invalid space");
    }
    let hex = &line[..64];
    if !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("Invalid hex");
    }
    let written = &line[66..];
    let name = if escaped {
        let mut name = Vec::with_capacity(written.len());
        let mut it = written.iter();
        while let Some(&b) = it.next() {
            if b != b'\\' {
                name.push(b);
                continue;
            }
            match it.next() {
                Some(b'n') => name.push(b'\n'),
                Some(b'\\') => name.push(b'\\'),
                _ => return Err("Invalid backslash escape"),
            }
        }
        name
    } else {
        written.to_vec()
    };
    if name.contains(&0) {
        return Err("Null character in path");
    }
    if std::str::from_utf8(&name).is_err() || name.windows(3).any(|w| w == "\u{fffd}".as_bytes()) {
        return Err("Unicode replacement character in path");
    }
    let mut shown = Vec::with_capacity(written.len() + 1);
    if escaped {
        shown.push(b'\\');
    }
    shown.extend_from_slice(written);
    Ok((shown, PathBuf::from(OsString::from_vec(name)), hex.to_vec()))
}

/// Checks one list as `b3sum -c` does: `name: OK`, `name: FAILED`, `name:
/// FAILED (<reason>)`; a refused line is named on standard error and
/// fails the check; nothing is summed up.
fn check_list(
    engine: &blockio::Engine,
    list: &Path,
    quiet: bool,
    opts: &SumOptions,
    out: &mut impl Write,
    err: &mut impl Write,
) -> io::Result<bool> {
    let mut text = Vec::new();
    if list.as_os_str() == STDIN {
        io::stdin().lock().read_to_end(&mut text)?;
    } else {
        std::fs::File::open(list)?.read_to_end(&mut text)?;
    }
    let mut lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    lines.retain(|l| !l.is_empty());
    let parsed: Vec<_> = lines.iter().map(|l| parse_check_line(l)).collect();
    let good: Vec<usize> = (0..parsed.len()).filter(|&i| parsed[i].is_ok()).collect();
    let inputs: Vec<(PathBuf, Algo)> = good
        .iter()
        .map(|&i| (parsed[i].as_ref().expect("kept").1.clone(), Algo::Blake3))
        .collect();
    let mut ok = true;
    let mut next = 0;
    let mut result: io::Result<()> = Ok(());
    let refused = |upto: usize, err: &mut dyn Write, next: &mut usize, ok: &mut bool| {
        while *next < upto {
            if let Err(why) = &parsed[*next] {
                *ok = false;
                writeln!(err, "b3sum: {why}")?;
            }
            *next += 1;
        }
        Ok::<(), io::Error>(())
    };
    hash_inputs(engine, &inputs, opts, |k, r| {
        if result.is_err() {
            return;
        }
        let i = good[k];
        result = (|| {
            refused(i, err, &mut next, &mut ok)?;
            next = i + 1;
            let (shown, _, want) = parsed[i].as_ref().expect("kept");
            let shown = String::from_utf8_lossy(shown);
            match r {
                Ok(hex) if hex.as_bytes() == want.as_slice() => {
                    if !quiet {
                        writeln!(out, "{shown}: OK")?;
                    }
                }
                Ok(_) => {
                    ok = false;
                    writeln!(out, "{shown}: FAILED")?;
                }
                Err(e) => {
                    ok = false;
                    writeln!(out, "{shown}: FAILED ({})", e.error)?;
                }
            }
            Ok(())
        })();
    });
    result?;
    refused(parsed.len(), err, &mut next, &mut ok)?;
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lines_as_b3sum_reads_them() {
        let hex = "a".repeat(64);
        let (shown, path, _) = parse_check_line(format!("{hex}  f\n").as_bytes()).unwrap();
        assert_eq!(
            (shown.as_slice(), path.as_os_str()),
            (&b"f"[..], OsStr::new("f"))
        );
        let (shown, path, _) = parse_check_line(format!("\\{hex}  a\\nb").as_bytes()).unwrap();
        assert_eq!(shown, b"\\a\\nb");
        assert_eq!(path.as_os_str(), OsStr::new("a\nb"));
        for (l, why) in [
            ("\n".to_string(), "Empty line"),
            ("garbage".into(), "Short line"),
            (format!("{hex} *f"), "Invalid space"),
            (format!("{}  f", "A".repeat(64)), "Invalid hex"),
            (format!("\\{hex}  a\\qb"), "Invalid backslash escape"),
        ] {
            assert_eq!(parse_check_line(l.as_bytes()).unwrap_err(), why, "{l:?}");
        }
    }
}
