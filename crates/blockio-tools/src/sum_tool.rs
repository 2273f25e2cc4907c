//! The sum tools (coreutils' `md5sum`, `sha1sum`, `sha224sum`,
//! `sha256sum`, `sha384sum`, `sha512sum`, `b2sum`, `cksum`, and `b3sum`)
//! on the engine: their output lines, their `-c`, their messages and exit
//! statuses, as coreutils 9.1 and b3sum 1.8 have them. The files are
//! hashed as `blockio sum` hashes them (small files a batch at a time,
//! large ones streamed); what is printed, and in which order, is the
//! tool's. One implementation serves them all, so that a fix to how a list
//! is read or a result reported reaches every tool; where `b3sum` differs
//! ([`Family::B3sum`]) the difference is named where it is made.
//!
//! Unlike `blockio sum`, a directory operand is not recursed: it is
//! reported (`md5sum: d: Is a directory`), as the tools do.
//!
//! # Checksum lists
//!
//! A list line is read as the tool reads it ([`ListParser`]):
//! * `<hex> <name>`, `<hex>  <name>`, `<hex> *<name>`: the hex digits are
//!   exactly the algorithm's (for BLAKE2b, any even number up to 128: the
//!   length is the line's). The first plain line decides, for the rest of
//!   the run, whether a name follows one space (BSD `md5 -r` lists) or a
//!   mode character: a list cannot mix them.
//! * `<TYPE> (<name>) = <hex>` (`--tag`), and OpenSSL's `<TYPE>(<name>)=
//!   <hex>`; `BLAKE2b-128 (…)` names its length. `cksum` without `-a`
//!   reads only such lines, each with the algorithm it names.
//! * The digest and the name end at a NUL byte, if they hold one (the
//!   tools read them as C strings): `-z` output checks, and `<hex>
//!   a\0junk` names `a`. An escaped name with a NUL is improper.
//! * Leading blanks are skipped; a backslash before the line means its name
//!   is escaped (`\\`, `\n`, `\r`); a line starting with `#`, and an empty
//!   one, are skipped; one trailing carriage return is dropped.
//!
//! `b3sum -c` reads `<64 lowercase hex>  <name>` and `BLAKE3 (<name>) =
//! <hex>` lines (a backslash before the line: `\\`, `\n` and `\r`
//! escaped; trailing carriage returns dropped), skips nothing, names each
//! line it refuses, with its reason, on standard error, and counts them
//! with the files that failed in its closing warning
//! (`parse_b3sum`).

use std::ffi::OsStr;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use blockio::Engine;

use crate::algo::{Algo, BLAKE2B_MAX_BYTES};
use crate::list_batches::ListBatches;
use crate::names::{trim_blanks, unescape, up_to_nul};
use crate::sum::{hash_inputs, SumError, SumOptions, STDIN};
pub use crate::sum_program::{Checking, Family, Format, Tool};

/// One run of a tool: the engine it hashes on, the tool, and how files are
/// read. What is printed, and where, is given to each call beside it.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    /// The engine files are read through.
    pub engine: &'a Engine,
    /// The tool, whose name messages carry and whose algorithm sums.
    pub tool: &'a Tool,
    /// How files are read and hashed (threads, batch sizes).
    pub opts: &'a SumOptions,
}

/// Hashes `files` (standard input for `-`, or when there are none) and
/// writes one line per file as the tool writes it; problems go to `err`
/// as `prog: <name>: <reason>`. Returns whether every file was hashed.
pub fn print_sums(
    run: Run<'_>,
    files: &[PathBuf],
    format: Format,
    out: &mut impl io::Write,
    err: &mut impl io::Write,
) -> io::Result<bool> {
    let Run { engine, tool, opts } = run;
    if let Some(params) = crate::sum_xof::streamed(tool.algo) {
        return crate::sum_xof::print_sums(tool, params, files, format, out, err);
    }
    let named = !files.is_empty();
    let files = crate::sum::or_stdin(files);
    let mut ok = true;
    // With the key on standard input `-` is refused in its place among
    // the files: those before it are hashed (and printed) first.
    let refuse_stdin = tool.key_on_stdin();
    for files in files.split_inclusive(|p| refuse_stdin && p.as_os_str() == STDIN) {
        let (files, refused) = match files.split_last() {
            Some((last, rest)) if refuse_stdin && last.as_os_str() == STDIN => (rest, true),
            _ => (files, false),
        };
        let inputs: Vec<(PathBuf, Algo)> = files.iter().map(|p| (p.clone(), tool.algo)).collect();
        let mut result = Ok(());
        hash_inputs(engine, &inputs, opts, |i, r| {
            if result.is_err() {
                return;
            }
            result = match r {
                Ok(digest) => {
                    let line = sum_line(tool, format, named, &digest, inputs[i].0.as_os_str());
                    out.write_all(&line)
                }
                Err(e) => {
                    ok = false;
                    tool.say_unreadable(err, &e)
                }
            };
        });
        result?;
        if refused {
            ok = false;
            out.flush()?;
            tool.say(err, "-: Cannot open `-` in keyed mode")?;
        }
    }
    out.flush()?;
    Ok(ok)
}

/// One output line, as the tool writes it for `name` (`named`: files were
/// given on the command line, which `cksum -a crc|bsd|sysv` print).
pub fn sum_line(tool: &Tool, format: Format, named: bool, digest: &str, name: &OsStr) -> Vec<u8> {
    let delim = if format.zero { 0 } else { b'\n' };
    if format.raw {
        return decode_hex(digest);
    }
    if format.no_names {
        let mut out = digest.as_bytes().to_vec();
        out.push(delim);
        return out;
    }
    if tool.family == Family::B3sum {
        return crate::names::b3sum_tool_line(digest, name, format.tag);
    }
    let raw = name.as_bytes();
    let mut out = Vec::with_capacity(digest.len() + raw.len() + 24);
    if tool.algo.hex_len() == 0 {
        // cksum's own formats: `<sum> <size>[ <name>]`, never escaped.
        out.extend_from_slice(digest.as_bytes());
        if named {
            out.push(b' ');
            out.extend_from_slice(raw);
        }
        out.push(delim);
        return out;
    }
    let escape = !format.zero && raw.iter().any(|b| matches!(b, b'\\' | b'\n' | b'\r'));
    if escape {
        out.push(b'\\');
    }
    if format.tag {
        out.extend_from_slice(tool.algo.tag().as_bytes());
        out.extend_from_slice(b" (");
        crate::names::escape_into(&mut out, raw, escape);
        out.extend_from_slice(b") = ");
        out.extend_from_slice(digest.as_bytes());
    } else {
        out.extend_from_slice(digest.as_bytes());
        out.push(b' ');
        // cksum --untagged writes binary mode's line without its marker.
        let binary = format.binary && !matches!(tool.family, Family::Cksum { .. });
        out.push(if binary { b'*' } else { b' ' });
        crate::names::escape_into(&mut out, raw, escape);
    }
    out.push(delim);
    out
}

/// The bytes a hex digest stands for (a digit pair that is not hex, which
/// the digests written here never hold, stands for 0).
fn decode_hex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap_or("00"), 16).unwrap_or(0))
        .collect()
}

/// One proper line of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListLine {
    /// The digest, as written (hex digits of either case).
    pub hex: Vec<u8>,
    /// The file.
    pub name: Vec<u8>,
    /// The algorithm (and length) to check it with.
    pub algo: Algo,
    /// The line started with a backslash: its name was written escaped.
    pub escaped: bool,
    /// The name as the line wrote it (escapes and all), which `b3sum -c`
    /// shows in its result line.
    pub written: Vec<u8>,
}

/// Reads list lines as the tool does. The parser keeps what the first
/// lines decided (plain lines with or without a mode character; for
/// `cksum`, the algorithm warnings name) for the rest of the run, across
/// lists, as the tools do.
#[derive(Debug, Clone)]
pub struct ListParser {
    family: Family,
    /// The algorithm of the last line (`cksum`) or the tool's.
    algo: Algo,
    /// `Some(true)` once a plain line had one space before its name,
    /// `Some(false)` once one had a mode character.
    bsd_reversed: Option<bool>,
    /// The same, for `blockio sum`'s lists.
    state: crate::names::ListState,
}

impl ListParser {
    /// A parser for `tool`'s lists.
    pub fn new(tool: &Tool) -> ListParser {
        ListParser {
            family: tool.family,
            algo: tool.algo,
            bsd_reversed: None,
            state: crate::names::ListState::default(),
        }
    }

    /// The type name warnings about improper lines use (`MD5`; for
    /// `cksum`, the last algorithm a line named).
    pub fn type_name(&self) -> &'static str {
        self.algo.type_name()
    }

    /// Parses one line, without its line end, or says why it is not a
    /// proper line (`b3sum`'s words; the coreutils give no reason).
    pub fn parse_line(&mut self, line: &[u8]) -> Result<ListLine, &'static str> {
        if self.family == Family::B3sum {
            return parse_b3sum(line, self.algo);
        }
        self.parse(line).ok_or("improperly formatted")
    }

    /// Parses one line, without its line end; `None` if it is not a
    /// proper line.
    pub fn parse(&mut self, line: &[u8]) -> Option<ListLine> {
        match self.family {
            Family::B3sum => return parse_b3sum(line, self.algo).ok(),
            Family::Sum => return self.parse_sum(line),
            _ => {}
        }
        let blanks = line
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        let mut s = &line[blanks..];
        let escaped = s.first() == Some(&b'\\');
        if escaped {
            s = &s[1..];
        }
        if self.family == (Family::Cksum { specified: false }) {
            // Only tagged lines, of an algorithm with a hex digest.
            let end = s
                .iter()
                .position(|&b| matches!(b, b' ' | b'\t' | b'-' | b'(' | 0))
                .unwrap_or(s.len());
            let algo = Algo::ALL
                .into_iter()
                .find(|a| a.type_name().as_bytes() == &s[..end] && is_coreutils(*a))?;
            if algo.hex_len() == 0 {
                return None;
            }
            self.algo = algo;
        }
        let type_name = self.algo.type_name().as_bytes();
        if let Some(rest) = s.strip_prefix(type_name) {
            return self.parse_tagged(rest, escaped);
        }
        self.parse_plain(line.len() - blanks, s, escaped)
    }

    /// A line of `blockio sum`'s lists: any format, its digest as long as
    /// its algorithm's (the one a tagged line names, else the tool's).
    fn parse_sum(&mut self, line: &[u8]) -> Option<ListLine> {
        let listed = self.state.parse(line)?;
        let algo = listed.algo.unwrap_or(self.algo);
        if listed.hex.len() != algo.hex_len() {
            return None;
        }
        let name = listed.name.into_vec();
        Some(ListLine {
            hex: listed.hex.into_bytes(),
            written: name.clone(),
            name,
            algo,
            escaped: false,
        })
    }

    /// The rest of `<TYPE>[-bits] (<name>) = <hex>` after the type name.
    fn parse_tagged(&mut self, rest: &[u8], escaped: bool) -> Option<ListLine> {
        let mut algo = self.algo;
        let mut rest = rest;
        if matches!(algo, Algo::Blake2b(_)) || matches!(self.family, Family::Cksum { .. }) {
            // These tools take the character after the type name as the
            // end of the name, whatever it is, unless it is `(`.
            let first = *rest.first()?;
            if first != b'(' {
                rest = &rest[1..];
            }
            if let Algo::Blake2b(_) = algo {
                algo = Algo::Blake2b(BLAKE2B_MAX_BYTES);
                if first == b'-' {
                    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                    let bits: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
                    if bits == 0 || bits > 512 || bits % 8 != 0 {
                        return None;
                    }
                    algo = Algo::Blake2b((bits / 8) as u8);
                    rest = &rest[digits..];
                }
            }
        }
        if rest.first() == Some(&b' ') {
            rest = &rest[1..];
        }
        let rest = rest.strip_prefix(b"(")?;
        // The name ends at the last `)`.
        let close = rest.iter().rposition(|&b| b == b')')?;
        let written = rest[..close].to_vec();
        let name = &rest[..close];
        let name = if escaped {
            unescape(name)?
        } else {
            up_to_nul(name).to_vec()
        };
        let mut after = &rest[close + 1..];
        after = trim_blanks(after);
        after = up_to_nul(trim_blanks(after.strip_prefix(b"=")?));
        if !is_hex_of_len(after, algo.hex_len()) {
            return None;
        }
        self.algo = algo;
        Some(ListLine {
            hex: after.to_vec(),
            name,
            algo,
            escaped,
            written,
        })
    }

    /// `<hex> <name>` in its forms; `len` is the line's length after its
    /// leading blanks.
    fn parse_plain(&mut self, len: usize, s: &[u8], escaped: bool) -> Option<ListLine> {
        let min = match self.family {
            Family::Fixed => self.algo.hex_len() + 2,
            _ => 3,
        };
        if len < min + usize::from(escaped) {
            return None;
        }
        let mut algo = self.algo;
        if let Algo::Blake2b(_) = algo {
            let digits = s.iter().take_while(|b| b.is_ascii_hexdigit()).count();
            if digits < 2 || digits % 2 != 0 || digits > 2 * BLAKE2B_MAX_BYTES as usize {
                return None;
            }
            algo = Algo::Blake2b((digits / 2) as u8);
        }
        let hex_len = algo.hex_len();
        if s.len() <= hex_len || !matches!(s[hex_len], b' ' | b'\t') {
            return None;
        }
        let hex = &s[..hex_len];
        if !hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let mut name = &s[hex_len + 1..];
        if name.len() == 1 || !matches!(name.first(), Some(b' ' | b'*')) {
            // One space, then the name: BSD's reversed format.
            if self.bsd_reversed == Some(false) {
                return None;
            }
            self.bsd_reversed = Some(true);
        } else if self.bsd_reversed != Some(true) {
            self.bsd_reversed = Some(false);
            name = &name[1..];
        }
        let written = name.to_vec();
        let name = if escaped {
            unescape(name)?
        } else {
            up_to_nul(name).to_vec()
        };
        self.algo = algo;
        Some(ListLine {
            hex: hex.to_vec(),
            name,
            algo,
            escaped,
            written,
        })
    }
}

/// A `b3sum -c` line, read as b3sum 1.8 reads it, or why it is refused
/// (b3sum's words). Trailing carriage returns are dropped; a backslash
/// before the line means its name is escaped (`\\`, `\n`, `\r`). Then
/// `<hex>  <name>` (split at the first two spaces) or `BLAKE3 (<name>) =
/// <hex>` (split at the last `) = `), the digest 64 lowercase hex digits,
/// the name not empty, without NUL or U+FFFD. `algo` is the tool's: the
/// digest is of plain BLAKE3 (`-c` takes no key, context or length), from
/// the offset `--seek` gives.
fn parse_b3sum(line: &[u8], algo: Algo) -> Result<ListLine, &'static str> {
    // b3sum reads its lists as UTF-8 and stops at a line that is not
    // (`check_list` does that before a line gets here).
    let line = std::str::from_utf8(line).map_err(|_| NOT_UTF8)?;
    let line = line.trim_end_matches(['\r', '\n']);
    if line.is_empty() {
        return Err("Empty line");
    }
    let (escaped, rest) = match line.strip_prefix('\\') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let (hex, written) = match rest.split_once("  ") {
        Some(pair) => pair,
        None => match rest
            .strip_prefix("BLAKE3 (")
            .and_then(|r| r.rsplit_once(") = "))
        {
            Some((name, hex)) => (hex, name),
            None => return Err("Invalid check line format"),
        },
    };
    if hex.len() != 64 {
        return Err("Invalid hash length");
    }
    if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("Invalid hex");
    }
    let name = if escaped {
        unescape_b3sum(written.as_bytes())?
    } else {
        written.as_bytes().to_vec()
    };
    if name.is_empty() {
        return Err("empty file path");
    }
    if name.contains(&0) {
        return Err("Null character in path");
    }
    if name.windows(3).any(|w| w == "\u{fffd}".as_bytes()) {
        return Err("Unicode replacement character in path");
    }
    Ok(ListLine {
        hex: hex.as_bytes().to_vec(),
        name,
        algo,
        escaped,
        written: written.as_bytes().to_vec(),
    })
}

/// What b3sum says of a list that is not UTF-8, where it stops.
const NOT_UTF8: &str = "stream did not contain valid UTF-8";

/// Undoes b3sum's escaping of a name (`\\`, `\n`, `\r`): any other escape,
/// or a backslash at the end, is refused. Unlike the coreutils' (see
/// [`unescape`](crate::names::unescape)), a NUL byte passes here and is refused after, with its own
/// message.
fn unescape_b3sum(written: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut name = Vec::with_capacity(written.len());
    let mut it = written.iter();
    while let Some(&b) = it.next() {
        if b != b'\\' {
            name.push(b);
            continue;
        }
        match it.next() {
            Some(b'n') => name.push(b'\n'),
            Some(b'r') => name.push(b'\r'),
            Some(b'\\') => name.push(b'\\'),
            _ => return Err("Invalid backslash escape"),
        }
    }
    Ok(name)
}

/// Whether the coreutils' `cksum -a` has this algorithm.
fn is_coreutils(a: Algo) -> bool {
    !matches!(a, Algo::Blake3 | Algo::Xxh3 | Algo::Crc32c)
}

fn is_hex_of_len(s: &[u8], len: usize) -> bool {
    s.len() == len && s.iter().all(u8::is_ascii_hexdigit)
}

/// What one list holds, in order: proper lines, and improper ones by
/// line number (with the type name a warning names).
enum Line {
    Proper,
    /// The line number, the type name, and why (`b3sum` names it).
    Improper(usize, &'static str, &'static str),
}

/// What a list's check found.
#[derive(Default)]
struct Tally {
    improper: usize,
    unreadable: usize,
    mismatched: usize,
    matched: bool,
}

impl Tally {
    /// What `b3sum` counts as failed: refused lines, files it could not
    /// read and digests that did not match.
    fn failed(&self) -> usize {
        self.improper + self.unreadable + self.mismatched
    }
}

/// Checks every list in `lists` (`-`, or none: standard input) as the
/// tool's `-c` does; returns whether all passed. `b3sum` sums up once,
/// after every list (`b3sum: WARNING: 2 computed checksums did NOT
/// match`, counting each refused line and each file that failed); the
/// coreutils after each list.
pub fn check(
    run: Run<'_>,
    lists: &[PathBuf],
    checking: Checking,
    out: &mut impl io::Write,
    err: &mut impl io::Write,
) -> io::Result<bool> {
    let mut parser = ListParser::new(run.tool);
    let mut ok = true;
    let mut failed = 0usize;
    for list in crate::sum::or_stdin(lists).iter() {
        let tally = check_list(run, &mut parser, list, checking, out, err)?;
        failed = failed.saturating_add(tally.as_ref().map_or(0, Tally::failed));
        ok &= tally.is_some_and(|t| passed(&t, checking, run.tool.family));
    }
    out.flush()?;
    if run.tool.family == Family::B3sum && failed > 0 {
        let s = if failed == 1 { "" } else { "s" };
        let what = format!("WARNING: {failed} computed checksum{s} did NOT match");
        run.tool.say(err, &what)?;
    }
    Ok(ok)
}

/// Whether a list whose check found `tally` passed.
fn passed(tally: &Tally, checking: Checking, family: Family) -> bool {
    if family == Family::B3sum {
        return tally.failed() == 0;
    }
    tally.matched
        && tally.mismatched == 0
        && tally.unreadable == 0
        && !(checking.strict && tally.improper > 0)
}

/// Why a list could not be read: the coreutils give the reason when it
/// cannot be opened, and only "read error" otherwise (a directory).
enum Unreadable {
    Open(io::Error),
    Read(io::Error),
}

/// Opens a list, to be read a batch (at most `most` bytes) at a time.
fn open_list(list: &Path, most: usize) -> Result<ListBatches, Unreadable> {
    let file = if list.as_os_str() == STDIN {
        crate::sum::stdin().map_err(Unreadable::Read)?
    } else {
        std::fs::File::open(list).map_err(Unreadable::Open)?
    };
    Ok(ListBatches::new(file, most))
}

/// One list being checked: the run, how results are reported, and the
/// list's name as messages show it.
struct ListCheck<'a> {
    run: Run<'a>,
    checking: Checking,
    shown: PathBuf,
    b3sum: bool,
}

/// What the batches of one list found so far.
#[derive(Default)]
struct Progress {
    tally: Tally,
    /// Lines read so far, to number the next batch's.
    lines: usize,
    /// Whether a line was proper.
    proper: bool,
    /// For `blockio sum`: the digest length of the first line that parses.
    first_len: Option<usize>,
}

/// Checks one list, `parser` carrying what earlier lists' lines decided.
/// The list is read a batch at a time ([`ListBatches`]) and each batch's
/// results are written before the next is read, so memory is bounded
/// whatever the list's length, and a list written slowly to a pipe sees
/// each result soon after its line. Returns what it found, or `None` for
/// a list that failed whole (it could not be read, or held no proper
/// line), which the coreutils report and go on from; `b3sum` stops at a
/// list it cannot read, after checking the lines before a line that is
/// not UTF-8.
fn check_list(
    run: Run<'_>,
    parser: &mut ListParser,
    list: &Path,
    checking: Checking,
    out: &mut impl io::Write,
    err: &mut impl io::Write,
) -> io::Result<Option<Tally>> {
    let tool = run.tool;
    let family = tool.family;
    let b3sum = family == Family::B3sum;
    let is_stdin = list.as_os_str() == STDIN;
    let shown = if is_stdin {
        PathBuf::from("standard input")
    } else {
        list.to_path_buf()
    };
    let this = ListCheck {
        run,
        checking,
        shown,
        b3sum,
    };
    let mut progress = Progress::default();
    let read = match open_list(list, run.opts.list_batch) {
        Ok(mut batches) => {
            this.check_batches(&mut batches, parser, is_stdin, &mut progress, out, err)?
        }
        Err(e) => Err(e),
    };
    match read {
        Ok(()) => {}
        Err(Unreadable::Open(e) | Unreadable::Read(e)) if b3sum => return Err(e),
        Err(Unreadable::Open(e) | Unreadable::Read(e)) if family == Family::Sum => {
            tool.say_about(err, &this.shown, &crate::reason::reason(&e))?;
            return Ok(None);
        }
        Err(Unreadable::Open(e)) => {
            tool.say_about(err, &this.shown, &crate::reason::reason(&e))?;
            return Ok(None);
        }
        Err(Unreadable::Read(_)) => {
            tool.say_about(err, &this.shown, "read error")?;
            return Ok(None);
        }
    }
    if b3sum {
        return Ok(Some(progress.tally));
    }
    if !progress.proper {
        let hint = match (family, progress.first_len) {
            (Family::Sum, Some(len)) => length_hint(len, tool.algo),
            _ => String::new(),
        };
        let what = format!("no properly formatted checksum lines found{hint}");
        tool.say_about(err, &this.shown, &what)?;
        return Ok(None);
    }
    if !checking.status {
        this.warn_tally(&progress.tally, err)?;
    }
    Ok(Some(progress.tally))
}

impl ListCheck<'_> {
    /// Checks a list's batches in order, writing each one's results before
    /// reading the next. The outer error is one writing results (or
    /// `b3sum`'s line that is not UTF-8); the inner, a read of the list.
    fn check_batches(
        &self,
        batches: &mut ListBatches,
        parser: &mut ListParser,
        is_stdin: bool,
        progress: &mut Progress,
        out: &mut impl io::Write,
        err: &mut impl io::Write,
    ) -> io::Result<Result<(), Unreadable>> {
        let family = self.run.tool.family;
        loop {
            let text = match batches.next_batch() {
                Ok(Some(text)) => text,
                Ok(None) => return Ok(Ok(())),
                Err(e) => return Ok(Err(Unreadable::Read(e))),
            };
            let (pieces, stop) = list_lines(&text, family, progress.lines);
            progress.lines +=
                text.split(|&b| b == b'\n').count() - usize::from(text.ends_with(b"\n"));
            if family == Family::Sum && progress.first_len.is_none() && !progress.proper {
                progress.first_len = pieces
                    .iter()
                    .find_map(|(_, l)| crate::names::parse(l))
                    .map(|l| l.hex.len());
            }
            let (lines, entries) = parse_lines(parser, &pieces, family, is_stdin);
            progress.proper |= !entries.is_empty();
            if is_stdin && entries.iter().any(|e| e.name == STDIN.as_bytes()) {
                // Hashing `-` must not read the rest of the list.
                if let Err(e) = batches.read_rest() {
                    return Ok(Err(Unreadable::Read(e)));
                }
            }
            self.check_entries(&lines, &entries, &mut progress.tally, out, err)?;
            out.flush()?;
            if let Some(e) = stop {
                return Err(e);
            }
        }
    }
}

/// The lines of a list, without their line ends, and their numbers. The
/// coreutils skip comments and empty lines and drop one trailing carriage
/// return; `blockio sum` skips comments and empty lines (its parser drops
/// the carriage return); `b3sum` skips nothing, and stops at the first
/// line that is not UTF-8 (the error it stops with is returned beside the
/// lines before it). `text` is a batch of whole lines, `before` lines
/// into the list.
fn list_lines(
    text: &[u8],
    family: Family,
    before: usize,
) -> (Vec<(usize, &[u8])>, Option<io::Error>) {
    let mut pieces: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    if text.last() == Some(&b'\n') || text.is_empty() {
        pieces.pop();
    }
    let mut lines = Vec::with_capacity(pieces.len());
    for (n, line) in pieces.into_iter().enumerate() {
        if family == Family::B3sum {
            if std::str::from_utf8(line).is_err() {
                let e = io::Error::new(io::ErrorKind::InvalidData, NOT_UTF8);
                return (lines, Some(e));
            }
            lines.push((before + n + 1, line));
            continue;
        }
        if line.first() == Some(&b'#') {
            continue;
        }
        let line = match family {
            Family::Sum => line,
            _ => line.strip_suffix(b"\r").unwrap_or(line),
        };
        if !line.is_empty() {
            lines.push((before + n + 1, line));
        }
    }
    (lines, None)
}

/// Parses a list's lines: what each is, in order, and the proper ones.
/// The coreutils refuse to check standard input from a list read from it.
fn parse_lines(
    parser: &mut ListParser,
    lines: &[(usize, &[u8])],
    family: Family,
    is_stdin: bool,
) -> (Vec<Line>, Vec<ListLine>) {
    let stdin_too = matches!(family, Family::B3sum | Family::Sum);
    let mut kinds = Vec::with_capacity(lines.len());
    let mut entries = Vec::new();
    for &(n, line) in lines {
        match parser.parse_line(line) {
            Ok(e) if stdin_too || !(is_stdin && e.name == STDIN.as_bytes()) => {
                kinds.push(Line::Proper);
                entries.push(e);
            }
            Ok(_) => kinds.push(Line::Improper(n, parser.type_name(), "")),
            Err(why) => kinds.push(Line::Improper(n, parser.type_name(), why)),
        }
    }
    (kinds, entries)
}

impl ListCheck<'_> {
    /// Hashes every listed file and writes its result line, as the tool
    /// does; warnings about improper lines go out in line order with the
    /// reasons files could not be read.
    fn check_entries(
        &self,
        lines: &[Line],
        entries: &[ListLine],
        tally: &mut Tally,
        out: &mut impl io::Write,
        err: &mut impl io::Write,
    ) -> io::Result<()> {
        let Run { engine, opts, .. } = self.run;
        let inputs: Vec<(PathBuf, Algo)> = entries
            .iter()
            .map(|e| (PathBuf::from(OsString::from_vec(e.name.clone())), e.algo))
            .collect();
        let mut next_line = 0;
        let mut result = Ok(());
        hash_inputs(engine, &inputs, opts, |i, r| {
            if result.is_err() {
                return;
            }
            result = self
                .improper(lines, &mut next_line, tally, err)
                .and_then(|()| {
                    // The line of entry i.
                    next_line += 1;
                    self.result(&entries[i], r, tally, out, err)
                });
        });
        result?;
        self.improper(lines, &mut next_line, tally, err)
    }

    /// Reports the improper lines from `*next` up to the next proper one.
    fn improper(
        &self,
        lines: &[Line],
        next: &mut usize,
        tally: &mut Tally,
        err: &mut impl io::Write,
    ) -> io::Result<()> {
        let tool = self.run.tool;
        while let Some(Line::Improper(n, type_name, why)) = lines.get(*next) {
            *next += 1;
            tally.improper += 1;
            if self.b3sum {
                tool.say(err, why)?;
            } else if self.checking.warn {
                let what = format!("{n}: improperly formatted {type_name} checksum line");
                tool.say_about(err, &self.shown, &what)?;
            }
        }
        Ok(())
    }

    /// Counts and reports one listed file's result.
    fn result(
        &self,
        entry: &ListLine,
        r: Result<String, SumError>,
        tally: &mut Tally,
        out: &mut impl io::Write,
        err: &mut impl io::Write,
    ) -> io::Result<()> {
        let checking = self.checking;
        let status: std::borrow::Cow<'_, str> = match r {
            Err(e) if checking.ignore_missing && e.error.kind() == io::ErrorKind::NotFound => {
                return Ok(());
            }
            // b3sum gives the reason in the result line.
            Err(e) if self.b3sum => {
                tally.unreadable += 1;
                format!("FAILED ({})", e.error).into()
            }
            Err(e) => {
                tally.unreadable += 1;
                self.run.tool.say_unreadable(err, &e)?;
                "FAILED open or read".into()
            }
            Ok(digest) if digest.as_bytes().eq_ignore_ascii_case(&entry.hex) => {
                tally.matched = true;
                if checking.quiet {
                    return Ok(());
                }
                "OK".into()
            }
            Ok(_) => {
                tally.mismatched += 1;
                "FAILED".into()
            }
        };
        if checking.status {
            return Ok(());
        }
        if !self.b3sum {
            let b3sum_style = self.run.tool.family == Family::Sum && entry.algo == Algo::Blake3;
            let name = OsStr::from_bytes(&entry.name);
            return out.write_all(&crate::names::status_line(name, &status, b3sum_style));
        }
        // The name as the line wrote it.
        let mut line = Vec::with_capacity(entry.written.len() + 24);
        if entry.escaped {
            line.push(b'\\');
        }
        line.extend_from_slice(&entry.written);
        line.extend_from_slice(b": ");
        line.extend_from_slice(status.as_bytes());
        line.push(b'\n');
        out.write_all(&line)
    }

    /// The coreutils' warnings after a list: improper lines, files that
    /// could not be read, digests that did not match, and with
    /// `--ignore-missing` a list none of whose files was there.
    fn warn_tally(&self, tally: &Tally, err: &mut impl io::Write) -> io::Result<()> {
        let tool = self.run.tool;
        let plural = |n: usize, one: &str, many: &str| {
            let what = if n == 1 { one } else { many };
            format!("WARNING: {n} {what}")
        };
        if tally.improper > 0 {
            let w = plural(tally.improper, "line is", "lines are");
            tool.say(err, &format!("{w} improperly formatted"))?;
        }
        if tally.unreadable > 0 {
            let w = plural(tally.unreadable, "listed file", "listed files");
            tool.say(err, &format!("{w} could not be read"))?;
        }
        if tally.mismatched > 0 {
            let w = plural(tally.mismatched, "computed checksum", "computed checksums");
            tool.say(err, &format!("{w} did NOT match"))?;
        }
        if self.checking.ignore_missing && !tally.matched {
            tool.say_about(err, &self.shown, "no file was verified")?;
        }
        Ok(())
    }
}

/// For a `blockio sum` list none of whose lines fit `algo`: which
/// `--algo` the digests' length `len` (of the first line that parses)
/// would fit, if any.
fn length_hint(len: usize, algo: Algo) -> String {
    let fits: Vec<String> = Algo::ALL
        .iter()
        .filter(|a| a.hex_len() == len && **a != algo)
        .map(|a| format!("--algo {a}"))
        .collect();
    if fits.is_empty() {
        return format!(
            " (its digests are {len} hex digits long; --algo {algo} writes {})",
            algo.hex_len()
        );
    }
    format!(
        " (its digests are {len} hex digits long, as {} writes them; this check used --algo {algo})",
        fits.join(" or ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(family: Family, algo: Algo) -> Tool {
        Tool {
            prog: "t".into(),
            family,
            algo,
        }
    }

    const MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";

    #[test]
    fn plain_tagged_and_openssl_lines() {
        let md5 = tool(Family::Fixed, Algo::Md5);
        let mut p = ListParser::new(&md5);
        let entry = |name: &str, escaped, written: &str| {
            Some(ListLine {
                hex: MD5.into(),
                name: name.into(),
                algo: Algo::Md5,
                escaped,
                written: written.into(),
            })
        };
        let want = |name: &str| entry(name, false, name);
        assert_eq!(p.parse(format!("{MD5}  f").as_bytes()), want("f"));
        assert_eq!(p.parse(format!("  \t{MD5} *f").as_bytes()), want("f"));
        assert_eq!(p.parse(format!("MD5 (f) = {MD5}").as_bytes()), want("f"));
        assert_eq!(p.parse(format!("MD5(f)= {MD5}").as_bytes()), want("f"));
        assert_eq!(
            p.parse(format!("\\MD5 (a\\nb) = {MD5}").as_bytes()),
            entry("a\nb", true, "a\\nb")
        );
        assert_eq!(p.parse(format!("SHA1 (f) = {MD5}").as_bytes()), None);
        assert_eq!(p.parse(b"MD5 ("), None);
        // Once a line had a mode character, one space is not a separator.
        assert_eq!(p.parse(format!("{MD5} f").as_bytes()), None);
        let mut bsd = ListParser::new(&md5);
        assert_eq!(bsd.parse(format!("{MD5} *c").as_bytes()), want("c"));
        let mut bsd = ListParser::new(&md5);
        assert_eq!(bsd.parse(format!("{MD5} a").as_bytes()), want("a"));
        assert_eq!(bsd.parse(format!("{MD5}  b").as_bytes()), want(" b"));
    }

    #[test]
    fn blake2b_and_cksum_lengths() {
        let b2 = tool(Family::B2sum, Algo::Blake2b(64));
        let mut p = ListParser::new(&b2);
        let e = p.parse(b"BLAKE2b-16 (f) = abcd").unwrap();
        assert_eq!(e.algo, Algo::Blake2b(2));
        assert_eq!(p.parse(b"abcdef  f").unwrap().algo, Algo::Blake2b(3));
        assert_eq!(p.parse(b"BLAKE2b-12 (f) = abcd"), None);
        let ck = tool(Family::Cksum { specified: false }, Algo::Crc);
        let mut p = ListParser::new(&ck);
        assert_eq!(p.parse(format!("{MD5}  f").as_bytes()), None);
        assert_eq!(
            p.parse(format!("MD5 (f) = {MD5}").as_bytes()).unwrap().algo,
            Algo::Md5
        );
        assert_eq!(p.parse(b"CRC (f) = 1234"), None);
    }

    #[test]
    fn b3sum_check_lines_as_b3sum_reads_them() {
        let mut p = ListParser::new(&tool(Family::B3sum, Algo::Blake3));
        let hex = "a".repeat(64);
        let e = p.parse_line(format!("{hex}  f").as_bytes()).unwrap();
        assert_eq!((e.name.as_slice(), e.escaped), (&b"f"[..], false));
        // Trailing carriage returns go; the name is shown as written.
        let e = p
            .parse_line(format!("\\{hex}  a\\nb\\rc  d\r\r").as_bytes())
            .unwrap();
        assert_eq!((e.name.as_slice(), e.escaped), (&b"a\nb\rc  d"[..], true));
        assert_eq!(e.written, b"a\\nb\\rc  d");
        let e = p
            .parse_line(format!("BLAKE3 (x) = y) = {hex}\r").as_bytes())
            .unwrap();
        assert_eq!(e.name, b"x) = y");
        for (l, why) in [
            (String::new(), "Empty line"),
            ("\r".into(), "Empty line"),
            ("# comment".into(), "Invalid check line format"),
            (format!("{hex} *f"), "Invalid check line format"),
            (format!("{hex}0  f"), "Invalid hash length"),
            (format!("BLAKE3 (a  b) = {hex}"), "Invalid hash length"),
            (format!("{}  f", "A".repeat(64)), "Invalid hex"),
            (format!("\\{hex}  a\\qb"), "Invalid backslash escape"),
            (format!("\\{hex}  a\\"), "Invalid backslash escape"),
            (format!("{hex}  "), "empty file path"),
            (format!("{hex}  a\0"), "Null character in path"),
            (
                format!("{hex}  a\u{fffd}"),
                "Unicode replacement character in path",
            ),
        ] {
            assert_eq!(p.parse_line(l.as_bytes()).unwrap_err(), why, "{l:?}");
        }
    }

    #[test]
    fn b3sum_stops_at_a_list_line_that_is_not_utf8() {
        let (lines, stop) = list_lines(b"a\n\nb\xff\nc\n", Family::B3sum, 0);
        assert_eq!(lines, [(1, &b"a"[..]), (2, &b""[..])]);
        assert_eq!(stop.unwrap().to_string(), NOT_UTF8);
        let (lines, stop) = list_lines(b"# c\na\r\n\nb\xff\n", Family::Fixed, 0);
        assert_eq!(lines, [(2, &b"a"[..]), (4, &b"b\xff"[..])]);
        assert!(stop.is_none());
        // blockio sum's parser drops the carriage return itself.
        let (lines, _) = list_lines(b"# c\na\r\n\r\n", Family::Sum, 0);
        assert_eq!(lines, [(2, &b"a\r"[..]), (3, &b"\r"[..])]);
    }

    #[test]
    fn output_lines() {
        let md5 = tool(Family::Fixed, Algo::Md5);
        let f = |format, name: &str| sum_line(&md5, format, true, MD5, OsStr::new(name));
        assert_eq!(
            f(Format::default(), "a"),
            format!("{MD5}  a\n").into_bytes()
        );
        let b = Format {
            binary: true,
            ..Format::default()
        };
        assert_eq!(f(b, "a"), format!("{MD5} *a\n").into_bytes());
        let tag = Format {
            tag: true,
            ..Format::default()
        };
        assert_eq!(
            f(tag, "a\\b"),
            format!("\\MD5 (a\\\\b) = {MD5}\n").into_bytes()
        );
        let z = Format {
            zero: true,
            ..Format::default()
        };
        assert_eq!(f(z, "a\nb"), format!("{MD5}  a\nb\0").into_bytes());
        let crc = tool(Family::Cksum { specified: false }, Algo::Crc);
        let l = sum_line(
            &crc,
            Format::default(),
            false,
            "4294967295 0",
            OsStr::new("-"),
        );
        assert_eq!(l, b"4294967295 0\n");
    }
}
