//! Which checksum program runs (its family, the name its messages start
//! with, its algorithm), how it prints a line (`Format`), how `-c` judges
//! a list (`Checking`), and how the program reports a file it could not
//! read. Shared by the printing of sums (`sum_tool`) and the streamed
//! long BLAKE3 outputs (`sum_xof`), which both import it and not each
//! other.

use std::io;
use std::path::Path;

use crate::algo::{Algo, Blake3Mode, Blake3Params};
use crate::sum::SumError;

/// Which tool this is, for what its lists hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `md5sum`, `sha1sum`, `sha224sum`, `sha256sum`, `sha384sum`,
    /// `sha512sum`: one algorithm of fixed length.
    Fixed,
    /// `b2sum`: BLAKE2b, the length of a plain line's digest is its own.
    B2sum,
    /// `cksum`; `specified` when `-a` chose the algorithm (without it,
    /// lists hold only tagged lines, each naming its algorithm).
    Cksum {
        /// `-a`/`--algorithm` was given.
        specified: bool,
    },
    /// `blockio sum -c`: lists in every format the tools write (see
    /// [`crate::names::parse`]), a tagged line checked with the algorithm
    /// it names and a plain one with `--algo` (the tool's); empty lines
    /// and `#` comments skipped; names quoted in messages as blockio
    /// quotes them; a list with no proper line says which `--algo` its
    /// digests' length would fit; result lines escape names as the
    /// algorithm's reference tool does (`b3sum -c` for BLAKE3: a name
    /// with a backslash or a newline, a carriage return left as it is).
    Sum,
    /// `b3sum`: BLAKE3, its `--keyed`, `--derive-key`, `-l` and `--seek`
    /// in the tool's algorithm. It writes names lossily as UTF-8, reports
    /// files it cannot read with the system's message, sums up a check
    /// once after every list, and with `--keyed` refuses `-` (standard
    /// input held the key).
    B3sum,
}

/// A coreutils sum tool: its name, as messages carry it, and its
/// algorithm.
#[derive(Debug, Clone)]
pub struct Tool {
    /// The program name messages start with (`md5sum`).
    pub prog: String,
    /// The kind of tool.
    pub family: Family,
    /// The algorithm (and for BLAKE2b its length) of the sums it writes.
    pub algo: Algo,
}

/// How sums are written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Format {
    /// `--tag`: `<TYPE> (<name>) = <hex>` lines (the default of `cksum`).
    pub tag: bool,
    /// `-b`: a `*` before the name in plain lines.
    pub binary: bool,
    /// `-z`: lines end with NUL, and names are not escaped.
    pub zero: bool,
    /// `--no-names` (`b3sum`): the digest alone on its line.
    pub no_names: bool,
    /// `--raw` (`b3sum`): the digest's bytes, not hex, and no line end.
    pub raw: bool,
}

/// How `-c` reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checking {
    /// `--quiet`: no `OK` lines.
    pub quiet: bool,
    /// `--status`: nothing on standard output, no warnings.
    pub status: bool,
    /// `--strict`: improperly formatted lines make the check fail.
    pub strict: bool,
    /// `-w`: name each improperly formatted line.
    pub warn: bool,
    /// `--ignore-missing`: a listed file that does not exist is skipped.
    pub ignore_missing: bool,
}

impl Tool {
    /// `prog: <message>` on `err`.
    pub(crate) fn say(&self, err: &mut (impl io::Write + ?Sized), message: &str) -> io::Result<()> {
        writeln!(err, "{}: {message}", self.prog)
    }

    /// `prog: <name>: <message>` on `err`, the name quoted as the
    /// coreutils quote file names in messages (`blockio sum`: as blockio
    /// quotes them).
    pub(crate) fn say_about(
        &self,
        err: &mut (impl io::Write + ?Sized),
        name: &Path,
        message: &str,
    ) -> io::Result<()> {
        let name = match self.family {
            Family::Sum => crate::quote::quote_if_needed(name),
            _ => crate::quote::quotef_c_locale(name),
        };
        writeln!(err, "{}: {name}: {message}", self.prog)
    }

    /// A file that could not be hashed, as the tool reports it: the
    /// coreutils quote its name and give the reason in their words,
    /// `b3sum` writes the name as it is and the system's message.
    pub(crate) fn say_unreadable(
        &self,
        err: &mut (impl io::Write + ?Sized),
        e: &SumError,
    ) -> io::Result<()> {
        if self.family == Family::B3sum {
            return writeln!(err, "{}: {}: {}", self.prog, e.path.display(), e.error);
        }
        self.say_about(err, &e.path, &crate::reason::reason(&e.error))
    }

    /// Whether standard input held the key (`b3sum --keyed`), so that `-`
    /// cannot be hashed.
    pub(crate) fn key_on_stdin(&self) -> bool {
        matches!(
            self.algo,
            Algo::Blake3With(Blake3Params {
                mode: Blake3Mode::Keyed(_),
                ..
            })
        )
    }
}
