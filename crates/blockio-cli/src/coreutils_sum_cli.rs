//! The command line of the coreutils checksum tools (`md5sum`, `sha1sum`,
//! `sha224sum`, `sha256sum`, `sha384sum`, `sha512sum`, `b2sum`, `cksum`),
//! as coreutils 9.1 reads it: the same options, the same checks between
//! them, the same messages (C locale) and exit statuses (1 for a usage
//! error, after `Try '<prog> --help' for more information.`). The work is
//! [`blockio_tools::sum_tool`]'s.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use blockio_tools::algo::{Algo, BLAKE2B_MAX_BYTES};
use blockio_tools::sum::{SumOptions, STDIN};
use blockio_tools::sum_room;
use blockio_tools::sum_tool::{self, Checking, Family, Format, Tool};

use crate::getopt::{self, Opt};
use crate::multicall::CoreutilsSum;
use crate::stdio::{self, say, Stderr, Stdout};

/// The algorithms `cksum -a` takes, in the order its messages list them.
const CKSUM_ALGOS: [(&str, Algo); 11] = [
    ("bsd", Algo::Bsd),
    ("sysv", Algo::Sysv),
    ("crc", Algo::Crc),
    ("md5", Algo::Md5),
    ("sha1", Algo::Sha1),
    ("sha224", Algo::Sha224),
    ("sha256", Algo::Sha256),
    ("sha384", Algo::Sha384),
    ("sha512", Algo::Sha512),
    ("blake2b", Algo::Blake2b(BLAKE2B_MAX_BYTES)),
    ("sm3", Algo::Sm3),
];

/// The options of `tool`, long ones in GNU's order (which its messages
/// about ambiguous abbreviations list them in).
fn options(tool: CoreutilsSum) -> Vec<Opt> {
    let mut v = Vec::new();
    if !matches!(tool, CoreutilsSum::Fixed(_)) {
        v.push(Opt::arg("length", Some('l'), Some("length")));
    }
    v.extend([
        Opt::flag("check", Some('c'), Some("check")),
        Opt::flag("ignore-missing", None, Some("ignore-missing")),
        Opt::flag("quiet", None, Some("quiet")),
        Opt::flag("status", None, Some("status")),
        Opt::flag("warn", Some('w'), Some("warn")),
        Opt::flag("strict", None, Some("strict")),
        Opt::flag("tag", None, Some("tag")),
        Opt::flag("zero", Some('z'), Some("zero")),
    ]);
    if tool == CoreutilsSum::Cksum {
        v.push(Opt::arg("algorithm", Some('a'), Some("algorithm")));
        v.push(Opt::flag("debug", None, Some("debug")));
        v.push(Opt::flag("untagged", None, Some("untagged")));
        // cksum takes -b and -t as letters but has no such mode: they are
        // usage errors without a message.
        v.push(Opt::flag("no-mode", Some('b'), None));
        v.push(Opt::flag("no-mode", Some('t'), None));
    } else {
        v.push(Opt::flag("binary", Some('b'), Some("binary")));
        v.push(Opt::flag("text", Some('t'), Some("text")));
    }
    v.push(Opt::flag("help", None, Some("help")));
    v.push(Opt::flag("version", None, Some("version")));
    v
}

/// A usage error: `prog: <message>` (if any), the hint, status 1.
struct Usage(Option<String>);

/// Another fatal error: `prog: <line>` for each line, status 1.
struct Fatal(Vec<String>);

enum Stop {
    Usage(Usage),
    Fatal(Fatal),
    /// `--help` or `--version` printed this.
    Exit0(String),
}

/// What the command line asks for.
struct Request {
    tool: Tool,
    check: bool,
    format: Format,
    checking: Checking,
    operands: Vec<PathBuf>,
}

/// Runs `tool` (named `name`) as `prog` (`argv[0]` as it was run, which
/// messages and `--help` begin with, as GNU's do) on `args` (without the
/// program name); returns the exit status.
pub fn main(prog: &str, name: &str, tool: CoreutilsSum, args: &[OsString]) -> i32 {
    let mut out = Stdout::lock();
    let status = run(prog, name, tool, args, &mut out);
    // GNU's tools find a failed standard output when they close it, after
    // everything else was done and reported.
    match out.finish() {
        Some(e) => {
            write_error(prog, &e);
            1
        }
        None => status,
    }
}

/// The work of [`main`], writing to `out`.
fn run(prog: &str, name: &str, tool: CoreutilsSum, args: &[OsString], out: &mut Stdout) -> i32 {
    let request = match read_args(prog, name, tool, args) {
        Ok(r) => r,
        Err(Stop::Exit0(text)) => {
            let _ = out.write_all(text.as_bytes());
            return 0;
        }
        Err(Stop::Usage(Usage(message))) => {
            if let Some(m) = message {
                say(&format!("{prog}: {m}"));
            }
            say(&format!("Try '{prog} --help' for more information."));
            return 1;
        }
        Err(Stop::Fatal(Fatal(lines))) => {
            for l in lines {
                say(&format!("{prog}: {l}"));
            }
            return 1;
        }
    };
    let mut opts = SumOptions {
        algo: request.tool.algo,
        ..SumOptions::default()
    };
    let engine = match sum_room::engine_within_limits(&mut opts) {
        Ok(e) => e,
        Err(e) => {
            say(&format!("{prog}: {e}"));
            return 1;
        }
    };
    let run = sum_tool::Run {
        engine: &engine,
        tool: &request.tool,
        opts: &opts,
    };
    let r = if request.check {
        sum_tool::check(run, &request.operands, request.checking, out, &mut Stderr)
    } else {
        sum_tool::print_sums(run, &request.operands, request.format, out, &mut Stderr)
    };
    // Neither writer fails: their failures are kept or ignored.
    let ok = r.unwrap_or(false);
    let read_stdin =
        request.operands.is_empty() || request.operands.iter().any(|p| p.as_os_str() == STDIN);
    if read_stdin && stdio::stdin_was_closed() {
        // What GNU's tools say when closing the standard input they read
        // fails, which it does when it was closed to begin with.
        say(&format!("{prog}: standard input: Bad file descriptor"));
        return 1;
    }
    i32::from(!ok)
}

/// Standard output could not be written: `prog: write error`, as GNU's
/// tools say it when they close it. They add the reason only when the
/// close itself fails, which it does when standard output was closed to
/// begin with (then the reason is `Bad file descriptor`).
fn write_error(prog: &str, e: &std::io::Error) {
    if stdio::stdout_was_closed() {
        say(&format!(
            "{prog}: write error: {}",
            blockio_tools::reason::reason(e)
        ));
    } else {
        say(&format!("{prog}: write error"));
    }
}

/// `s` quoted as the coreutils quote an argument in a message: `‘x’` in
/// a UTF-8 locale, `'x'` in the C locale.
fn quote(s: &OsString) -> String {
    quote_str(&s.to_string_lossy())
}

/// [`quote`] for a word of the message itself (an option's or an
/// algorithm's name).
fn quote_str(s: &str) -> String {
    blockio_tools::quote::quote_locale(s)
}

/// What the options of a sum tool's command line set, as typed.
struct Typed {
    /// The tool's algorithm, or cksum's `--algorithm`.
    algo: Algo,
    /// `--algorithm` was given.
    specified: bool,
    /// `--length`, in bits, and as written.
    length: Option<(u64, OsString)>,
    /// `--check`.
    check: bool,
    /// How a check reports (`--status`, `--warn`, `--quiet`, ...).
    checking: Checking,
    /// None: neither -b nor -t (nor --tag) was given.
    binary: Option<bool>,
    /// `--tag` (BSD-style lines), unless `--untagged` came later.
    tag: bool,
    /// `--zero`.
    zero: bool,
}

/// Reads a sum tool's command line: its options (checked against each
/// other as GNU's tools check them) and operands.
fn read_args(
    prog: &str,
    name: &str,
    kind: CoreutilsSum,
    args: &[OsString],
) -> Result<Request, Stop> {
    let (parsed, mistake) = getopt::parse_in_order(args, &options(kind));
    let cksum = kind == CoreutilsSum::Cksum;
    let mut typed = Typed {
        algo: kind.default_algo(),
        specified: false,
        length: None,
        check: false,
        checking: Checking::default(),
        binary: cksum.then_some(true),
        tag: cksum,
        zero: false,
    };
    for (id, value) in parsed.opts {
        read_option(&mut typed, id, value.unwrap_or_default(), prog, name, kind)?;
    }
    // getopt_long reports a mistake when it reaches it, after the options
    // before it took effect (`--help --bogus` prints the help).
    if let Some(m) = mistake {
        return Err(Stop::Usage(Usage(Some(m))));
    }
    if let Some((bits, text)) = typed.length.take().filter(|(n, _)| *n != 0) {
        typed.algo = blake2b_of_length(typed.algo, bits, &text)?;
    }
    check_combination(&typed, cksum)?;
    let family = match kind {
        CoreutilsSum::Fixed(_) => Family::Fixed,
        CoreutilsSum::B2sum => Family::B2sum,
        CoreutilsSum::Cksum => Family::Cksum {
            specified: typed.specified,
        },
    };
    Ok(Request {
        tool: Tool {
            prog: prog.to_string(),
            family,
            algo: typed.algo,
        },
        check: typed.check,
        format: Format {
            tag: typed.tag,
            binary: typed.binary == Some(true),
            zero: typed.zero,
            ..Format::default()
        },
        checking: typed.checking,
        operands: parsed.operands.into_iter().map(PathBuf::from).collect(),
    })
}

/// Records the option `id`, given with `value`, in `typed`; `--help`,
/// `--version` and a mistake stop the reading.
fn read_option(
    typed: &mut Typed,
    id: &str,
    value: OsString,
    prog: &str,
    name: &str,
    kind: CoreutilsSum,
) -> Result<(), Stop> {
    let checking = &mut typed.checking;
    match id {
        "algorithm" => {
            typed.algo = cksum_algo(&value)?;
            typed.specified = true;
        }
        "length" => {
            let n = parse_length(&value)?;
            if n % 8 != 0 {
                return Err(Stop::Fatal(Fatal(vec![
                    format!("invalid length: {}", quote(&value)),
                    "length is not a multiple of 8".into(),
                ])));
            }
            typed.length = Some((n, value));
        }
        "check" => typed.check = true,
        "status" => (checking.status, checking.warn, checking.quiet) = (true, false, false),
        "warn" => (checking.status, checking.warn, checking.quiet) = (false, true, false),
        "quiet" => (checking.status, checking.warn, checking.quiet) = (false, false, true),
        "ignore-missing" => checking.ignore_missing = true,
        "strict" => checking.strict = true,
        "binary" => typed.binary = Some(true),
        "text" => typed.binary = Some(false),
        "tag" => (typed.tag, typed.binary) = (true, Some(true)),
        "untagged" => typed.tag = false,
        "zero" => typed.zero = true,
        "debug" => {}
        "no-mode" => return Err(Stop::Usage(Usage(None))),
        "help" => return Err(Stop::Exit0(help(prog, name, kind))),
        "version" => return Err(Stop::Exit0(version(name))),
        _ => unreachable!("an option without a meaning: {id}"),
    }
    Ok(())
}

/// `cksum --algorithm=NAME`: the algorithm, or GNU's message listing the
/// valid names.
fn cksum_algo(value: &OsString) -> Result<Algo, Stop> {
    let name = value.to_string_lossy();
    if let Some(&(_, a)) = CKSUM_ALGOS.iter().find(|(n, _)| *n == name) {
        return Ok(a);
    }
    let mut m = format!(
        "invalid argument {} for {}\nValid arguments are:",
        quote(value),
        quote_str("--algorithm")
    );
    for (n, _) in CKSUM_ALGOS {
        m.push_str(&format!("\n  - {}", quote_str(n)));
    }
    Err(Stop::Usage(Usage(Some(m))))
}

/// `--length=BITS` (not 0, written `text`): BLAKE2b of that length; an
/// error for any other algorithm, or beyond 512 bits.
fn blake2b_of_length(algo: Algo, bits: u64, text: &OsString) -> Result<Algo, Stop> {
    if !matches!(algo, Algo::Blake2b(_)) {
        let m = "--length is only supported with --algorithm=blake2b";
        return Err(Stop::Fatal(Fatal(vec![m.into()])));
    }
    if bits > 8 * BLAKE2B_MAX_BYTES as u64 {
        return Err(Stop::Fatal(Fatal(vec![
            format!("invalid length: {}", quote(text)),
            format!(
                "maximum digest length for {} is 512 bits",
                quote_str("BLAKE2b")
            ),
        ])));
    }
    Ok(Algo::Blake2b((bits / 8) as u8))
}

/// The options that make no sense together, refused in GNU's order and
/// words.
fn check_combination(typed: &Typed, cksum: bool) -> Result<(), Stop> {
    let &Typed {
        algo,
        specified,
        check,
        ref checking,
        binary,
        tag,
        zero,
        ..
    } = typed;
    if cksum && check && specified && algo.hex_len() == 0 {
        let m = "--check is not supported with --algorithm={bsd,sysv,crc}";
        return Err(Stop::Fatal(Fatal(vec![m.into()])));
    }
    let usage = |m: &str| Err(Stop::Usage(Usage(Some(m.to_string()))));
    if tag && binary == Some(false) {
        return usage("--tag does not support --text mode");
    }
    if zero && check {
        return usage("the --zero option is not supported when verifying checksums");
    }
    if !cksum && tag && check {
        return usage("the --tag option is meaningless when verifying checksums");
    }
    if !cksum && binary.is_some() && check {
        return usage("the --binary and --text options are meaningless when verifying checksums");
    }
    let only =
        |what: &str| format!("the --{what} option is meaningful only when verifying checksums");
    for (set, what) in [
        (checking.ignore_missing, "ignore-missing"),
        (checking.status, "status"),
        (checking.warn, "warn"),
        (checking.quiet, "quiet"),
        (checking.strict, "strict"),
    ] {
        if set && !check {
            return usage(&only(what));
        }
    }
    Ok(())
}

/// The argument of `-l`, read as coreutils reads it (`xdectoumax`, with
/// `strtoumax` under it): blanks first and a `+` are allowed, a `-` is not,
/// nothing may follow the digits; a number beyond 64 bits is "too large".
fn parse_length(value: &OsString) -> Result<u64, Stop> {
    let invalid = |suffix: &str| {
        let m = format!("invalid length: {}{suffix}", quote(value));
        Stop::Fatal(Fatal(vec![m]))
    };
    let bytes = value.as_encoded_bytes();
    // C's isspace in the C locale.
    let blanks = bytes
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
        .count();
    let rest = &bytes[blanks..];
    let digits = rest.strip_prefix(b"+").unwrap_or(rest);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid(""));
    }
    digits
        .iter()
        .try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .ok_or_else(|| invalid(": Value too large for defined data type"))
}

/// `--version`: it names the tool, not the path it was run by, as GNU's.
fn version(name: &str) -> String {
    format!(
        "{name} (blockio) {}\nblockio's implementation of {name}, following GNU coreutils 9.1.\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// `--help`.
fn help(prog: &str, name: &str, kind: CoreutilsSum) -> String {
    let mut h = format!("Usage: {prog} [OPTION]... [FILE]...\n");
    match kind {
        CoreutilsSum::Cksum => {
            h.push_str("Print or verify checksums.\nBy default use the 32 bit CRC algorithm.\n")
        }
        _ => {
            let algo = kind.default_algo();
            let bits = if algo.hex_len() > 0 {
                algo.hex_len() * 4
            } else {
                32
            };
            h.push_str(&format!(
                "Print or check {} ({bits}-bit) checksums.\n",
                algo.type_name()
            ));
        }
    }
    h.push_str(
        "\nWith no FILE, or when FILE is -, read standard input.\n\
         \nMandatory arguments to long options are mandatory for short options too.\n",
    );
    if kind == CoreutilsSum::Cksum {
        h.push_str("  -a, --algorithm=TYPE  the digest algorithm (see DIGEST below)\n");
    } else {
        h.push_str("  -b, --binary          read in binary mode ('*' before the name)\n");
    }
    h.push_str("  -c, --check           read checksums from the FILEs and check them\n");
    if !matches!(kind, CoreutilsSum::Fixed(_)) {
        h.push_str(
            "  -l, --length=BITS     digest length in bits; at most 512 for blake2b,\n\
             \x20                         a multiple of 8\n",
        );
    }
    if kind == CoreutilsSum::Cksum {
        h.push_str(
            "      --tag             write BSD-style checksums (the default)\n\
             \x20     --untagged        write checksum, two spaces, name\n",
        );
    } else {
        h.push_str(
            "      --tag             write BSD-style checksums\n\
             \x20 -t, --text            read in text mode (the default)\n",
        );
    }
    h.push_str(
        "  -z, --zero            end each output line with NUL, not newline,\n\
         \x20                         and do not escape file names\n\
         \nThe following five options are useful only when verifying checksums:\n\
         \x20     --ignore-missing  do not fail or report status for missing files\n\
         \x20     --quiet           do not print OK for each successfully verified file\n\
         \x20     --status          print nothing; the exit status shows success\n\
         \x20     --strict          exit non-zero for improperly formatted checksum lines\n\
         \x20 -w, --warn            warn about improperly formatted checksum lines\n\n",
    );
    if kind == CoreutilsSum::Cksum {
        h.push_str("      --debug           accepted; does nothing\n");
    }
    h.push_str(
        "      --help        display this help and exit\n\
         \x20     --version     output version information and exit\n",
    );
    if kind == CoreutilsSum::Cksum {
        h.push_str("\nDIGEST is one of: ");
        let names: Vec<&str> = CKSUM_ALGOS.iter().map(|(n, _)| *n).collect();
        h.push_str(&names.join(", "));
        h.push_str(".\n");
    }
    h.push_str(&format!(
        "\nThis {name} is blockio: files are read in batches on io_uring; the output,\n\
         messages and exit statuses are those of GNU coreutils' {name}.\n"
    ));
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn option_conflicts_as_coreutils_has_them() {
        let md5 = CoreutilsSum::Fixed(Algo::Md5);
        let usage = |kind, a: &[&str]| match read_args("p", "p", kind, &args(a)) {
            Err(Stop::Usage(Usage(m))) => m,
            _ => Some("not a usage error".into()),
        };
        assert_eq!(
            usage(md5, &["--tag", "--check"]).unwrap(),
            "the --tag option is meaningless when verifying checksums"
        );
        assert_eq!(
            usage(md5, &["--tag", "--text"]).unwrap(),
            "--tag does not support --text mode"
        );
        assert!(read_args("p", "p", md5, &args(&["--text", "--tag"])).is_ok());
        assert_eq!(
            usage(md5, &["--ignore-missing"]).unwrap(),
            "the --ignore-missing option is meaningful only when verifying checksums"
        );
        assert_eq!(usage(CoreutilsSum::Cksum, &["-b"]), None);
        let r = read_args("p", "p", CoreutilsSum::B2sum, &args(&["-l", "128"]))
            .ok()
            .unwrap();
        assert_eq!(r.tool.algo, Algo::Blake2b(16));
        let r = read_args(
            "p",
            "p",
            CoreutilsSum::Cksum,
            &args(&["-a", "sha512", "-c"]),
        )
        .ok()
        .unwrap();
        assert_eq!(r.tool.family, Family::Cksum { specified: true });
        assert!(matches!(
            read_args("p", "p", CoreutilsSum::Cksum, &args(&["-a", "crc", "-c"])),
            Err(Stop::Fatal(_))
        ));
        assert!(matches!(
            read_args("p", "p", CoreutilsSum::Cksum, &args(&["-l", "128"])),
            Err(Stop::Fatal(_))
        ));
    }
}
