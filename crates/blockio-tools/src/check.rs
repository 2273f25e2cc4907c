//! `blockio sum -c`: checking lists of checksums, with the output, the
//! warnings and the exit status of `sha256sum -c`.
//!
//! A list may hold lines in every format `sha256sum` and `b3sum` write,
//! and that `sha256sum -c` reads (see [`crate::names::parse`]); a tagged
//! line names its own algorithm,
//! a plain line is checked with `--algo`. Empty lines and lines starting
//! with `#` are skipped, as coreutils does. Per list, after its files:
//!
//! * `WARNING: N lines are improperly formatted` (with `--strict` they
//!   make the exit status 1; `--warn` names each);
//! * `WARNING: N listed files could not be read` (each is reported as
//!   `<name>: FAILED open or read`, and its reason on standard error);
//! * `WARNING: N computed checksums did NOT match`.
//!
//! Result lines escape names as the algorithm's reference tool does: as
//! `b3sum -c` for BLAKE3 (a name with a backslash or a newline), as
//! `sha256sum -c` otherwise (a name with a newline).
//!
//! A list with no valid line fails with `no properly formatted checksum
//! lines found`; when its lines' digests have the length of another
//! algorithm, the message says which `--algo` would fit.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use blockio::Engine;

use crate::algo::Algo;
use crate::names::{self, Listed};
use crate::sum::{hash_inputs, or_stdin, report, SumOptions, STDIN};

/// How `check` reports.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// No `OK` lines; failures only (`--quiet`).
    pub quiet: bool,
    /// Nothing on standard output and no warnings: the exit status says
    /// it all (`--status`). Files that cannot be read are still named on
    /// standard error, as `sha256sum` does.
    pub status: bool,
    /// Improperly formatted lines make the check fail (`--strict`).
    pub strict: bool,
    /// Name each improperly formatted line (`--warn`).
    pub warn: bool,
}

/// What one list's check found.
#[derive(Debug, Default)]
struct Tally {
    improper: usize,
    unreadable: usize,
    mismatched: usize,
}

/// Checks every list in `lists` (`-`, or none: standard input) and
/// returns whether all passed.
pub fn check(
    engine: &Engine,
    lists: &[PathBuf],
    opts: &SumOptions,
    copts: &CheckOptions,
    out: &mut impl io::Write,
    err: &mut impl io::Write,
) -> io::Result<bool> {
    let run = CheckRun {
        engine,
        opts,
        copts,
    };
    let mut ok = true;
    for list in or_stdin(lists).iter() {
        ok &= run.check_list(list, out, err)?;
    }
    out.flush()?;
    Ok(ok)
}

/// What every list of one `check` is checked with: the engine files are
/// read through, how they are hashed, and how results are reported.
struct CheckRun<'a> {
    engine: &'a Engine,
    opts: &'a SumOptions,
    copts: &'a CheckOptions,
}

/// How a list is named in messages.
fn list_name(list: &Path) -> PathBuf {
    if list.as_os_str() == STDIN {
        PathBuf::from("standard input")
    } else {
        list.to_path_buf()
    }
}

fn read_list(list: &Path) -> io::Result<Vec<u8>> {
    if list.as_os_str() == STDIN {
        let mut v = Vec::new();
        crate::sum::stdin()?.read_to_end(&mut v)?;
        Ok(v)
    } else {
        std::fs::read(list)
    }
}

impl CheckRun<'_> {
    /// Checks one list: its files' status lines, then its warnings.
    fn check_list(
        &self,
        list: &Path,
        out: &mut impl io::Write,
        err: &mut impl io::Write,
    ) -> io::Result<bool> {
        let (opts, copts) = (self.opts, self.copts);
        let shown = list_name(list);
        let text = match read_list(list) {
            Ok(t) => t,
            Err(e) => {
                report(err, &shown, &crate::reason::reason(&e))?;
                return Ok(false);
            }
        };
        let mut tally = Tally::default();
        let (entries, lengths) = self.parse_list(&text, &shown, &mut tally, err)?;
        if entries.is_empty() {
            let hint = length_hint(&lengths, opts.algo);
            let what = format!("no properly formatted checksum lines found{hint}");
            report(err, &shown, &what)?;
            return Ok(false);
        }
        self.check_entries(&entries, &mut tally, out, err)?;
        if !copts.status {
            out.flush()?;
            warn_tally(err, &tally)?;
        }
        Ok(tally.unreadable == 0 && tally.mismatched == 0 && !(copts.strict && tally.improper > 0))
    }

    /// The list's proper lines, and the digest lengths of the improper ones
    /// that parsed (for the hint when none is proper). Blank lines and `#`
    /// comments are skipped; improper lines are counted, and with `--warn`
    /// reported by line number.
    fn parse_list(
        &self,
        text: &[u8],
        shown: &Path,
        tally: &mut Tally,
        err: &mut impl io::Write,
    ) -> io::Result<(Vec<Listed>, Vec<usize>)> {
        let (opts, copts) = (self.opts, self.copts);
        let mut lengths = Vec::new();
        let mut entries = Vec::new();
        let mut state = names::ListState::default();
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            match state
                .parse(line)
                .filter(|l| l.hex.len() == l.algo.unwrap_or(opts.algo).hex_len())
            {
                Some(l) => entries.push(l),
                None => {
                    tally.improper += 1;
                    if let Some(l) = names::parse(line) {
                        lengths.push(l.hex.len());
                    }
                    if copts.warn {
                        let what = format!(
                            "{}: improperly formatted {} checksum line",
                            n + 1,
                            opts.algo.tag()
                        );
                        report(err, shown, &what)?;
                    }
                }
            }
        }
        Ok((entries, lengths))
    }

    /// Hashes every listed file and writes its status line (`OK`, `FAILED`,
    /// `FAILED open or read`) as `--quiet` and `--status` allow, counting the
    /// failures.
    fn check_entries(
        &self,
        entries: &[Listed],
        tally: &mut Tally,
        out: &mut impl io::Write,
        err: &mut impl io::Write,
    ) -> io::Result<()> {
        let (engine, opts, copts) = (self.engine, self.opts, self.copts);
        let inputs: Vec<(PathBuf, Algo)> = entries
            .iter()
            .map(|l| (PathBuf::from(&l.name), l.algo.unwrap_or(opts.algo)))
            .collect();
        let mut io_result = Ok(());
        hash_inputs(engine, &inputs, opts, |i, r| {
            if io_result.is_err() {
                return;
            }
            io_result = (|| {
                let status = match &r {
                    Ok(hex) if *hex == entries[i].hex => "OK",
                    Ok(_) => {
                        tally.mismatched += 1;
                        "FAILED"
                    }
                    Err(e) => {
                        tally.unreadable += 1;
                        report(err, &e.path, &crate::reason::reason(&e.error))?;
                        "FAILED open or read"
                    }
                };
                if copts.status || (copts.quiet && status == "OK") {
                    return Ok(());
                }
                let b3sum_style = inputs[i].1 == Algo::Blake3;
                let line = names::status_line(OsStr::new(&entries[i].name), status, b3sum_style);
                out.write_all(&line)
            })();
        });
        io_result
    }
}

/// The closing warnings, as sha256sum words them.
fn warn_tally(err: &mut impl io::Write, tally: &Tally) -> io::Result<()> {
    let improper = "improperly formatted";
    warn(err, tally.improper, "line is", "lines are", improper)?;
    let unread = "could not be read";
    warn(err, tally.unreadable, "listed file", "listed files", unread)?;
    let mismatched = "did NOT match";
    warn(
        err,
        tally.mismatched,
        "computed checksum",
        "computed checksums",
        mismatched,
    )
}

/// `blockio sum: WARNING: <n> <what> <verb>`, if `n` is not 0.
fn warn(err: &mut impl io::Write, n: usize, one: &str, many: &str, verb: &str) -> io::Result<()> {
    match n {
        0 => Ok(()),
        1 => writeln!(err, "blockio sum: WARNING: 1 {one} {verb}"),
        n => writeln!(err, "blockio sum: WARNING: {n} {many} {verb}"),
    }
}

/// For a list none of whose lines fit `algo`: which `--algo` the digests'
/// length would fit, if any.
fn length_hint(lengths: &[usize], algo: Algo) -> String {
    let Some(&len) = lengths.first() else {
        return String::new();
    };
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
