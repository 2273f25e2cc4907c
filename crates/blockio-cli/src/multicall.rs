//! One binary, many tools: `blockio` run through a link named after a tool
//! (`sha256sum`, `b3sum`, `cp`, …; the basename of `argv[0]` decides) is
//! that tool, with its name in every message, its `--help`, `--version`
//! and exit statuses. Under its own name it is `blockio` with subcommands.

use crate::stdio::say_err;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use clap::Parser;

use blockio_tools::algo::{Algo, BLAKE2B_MAX_BYTES};

/// What the binary was run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Personality {
    /// `blockio` itself (any name not listed below).
    Blockio,
    /// `cp`: `blockio cp`.
    Cp,
    /// `b3sum`.
    B3sum,
    /// One of the coreutils sum tools.
    CoreutilsSum(CoreutilsSum),
}

/// The coreutils sum tools `blockio` can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreutilsSum {
    /// `md5sum`, `sha1sum`, `sha224sum`, `sha256sum`, `sha384sum`,
    /// `sha512sum`: one algorithm.
    Fixed(Algo),
    /// `b2sum`: BLAKE2b, `-l` for its length.
    B2sum,
    /// `cksum`: the POSIX CRC, or `-a` for any other.
    Cksum,
}

impl CoreutilsSum {
    /// The algorithm the tool uses unless told otherwise.
    pub fn default_algo(self) -> Algo {
        match self {
            CoreutilsSum::Fixed(a) => a,
            CoreutilsSum::B2sum => Algo::Blake2b(BLAKE2B_MAX_BYTES),
            CoreutilsSum::Cksum => Algo::Crc,
        }
    }
}

/// The tools, by the name that selects them.
const TOOLS: [(&str, Personality); 10] = [
    ("cp", Personality::Cp),
    ("b3sum", Personality::B3sum),
    (
        "md5sum",
        Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Md5)),
    ),
    (
        "sha1sum",
        Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Sha1)),
    ),
    (
        "sha224sum",
        Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Sha224)),
    ),
    (
        "sha256sum",
        Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Sha256)),
    ),
    (
        "sha384sum",
        Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Sha384)),
    ),
    (
        "sha512sum",
        Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Sha512)),
    ),
    ("b2sum", Personality::CoreutilsSum(CoreutilsSum::B2sum)),
    ("cksum", Personality::CoreutilsSum(CoreutilsSum::Cksum)),
];

/// The name the binary runs as, when it runs as a tool.
static TOOL_NAME: OnceLock<&'static str> = OnceLock::new();

/// What `argv0` (the program's path as it was run) makes the binary, by
/// its basename; remembers the tool's name for [`program`].
pub fn personality(argv0: &OsStr) -> Personality {
    let base = argv0
        .as_bytes()
        .rsplit(|&b| b == b'/')
        .next()
        .unwrap_or_default();
    match TOOLS.iter().find(|(name, _)| name.as_bytes() == base) {
        Some(&(name, p)) => {
            let _ = TOOL_NAME.set(name);
            p
        }
        None => Personality::Blockio,
    }
}

/// The name a subcommand's messages start with: the tool's name when the
/// binary runs as that tool (`cp`), else `blockio <subcommand>`.
pub fn program(subcommand: &str) -> String {
    match TOOL_NAME.get() {
        Some(name) => name.to_string(),
        None => format!("blockio {subcommand}"),
    }
}

/// `cp`'s command line: `blockio cp`'s.
#[derive(Parser)]
#[command(
    name = "cp",
    disable_version_flag = true,
    about = "Copy files and directory trees (blockio cp)."
)]
struct CpCli {
    #[command(flatten)]
    args: crate::cp::CpArgs,
}

/// Runs as `cp` with `args` (the program name first): `blockio cp`'s
/// options and work, and status 1 for a usage error, as GNU `cp`. Returns
/// the exit status.
pub fn cp(args: &[OsString]) -> i32 {
    match CpCli::try_parse_from(args) {
        Ok(cli) => crate::exit_status(crate::cp::run(&cli.args), &program("cp")),
        Err(e) => {
            // `--version > /dev/full`: GNU's "write error", status 1.
            let printed = e.print().and_then(|()| {
                use std::io::Write;
                std::io::stdout().flush()
            });
            if let Err(w) = printed {
                say_err!(
                    "{}: write error: {}",
                    program("cp"),
                    blockio_tools::reason::reason(&w)
                );
                return 1;
            }
            if e.use_stderr() {
                1
            } else {
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_basename_decides() {
        assert_eq!(
            personality(OsStr::new("/usr/local/bin/sha512sum")),
            Personality::CoreutilsSum(CoreutilsSum::Fixed(Algo::Sha512))
        );
        assert_eq!(personality(OsStr::new("b3sum")), Personality::B3sum);
        assert_eq!(personality(OsStr::new("./cp")), Personality::Cp);
        assert_eq!(
            personality(OsStr::new("/bin/blockio")),
            Personality::Blockio
        );
        assert_eq!(
            personality(OsStr::new("sha256sum.old")),
            Personality::Blockio
        );
    }
}
