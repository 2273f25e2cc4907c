//! Reading `cp`'s command line: as GNU `getopt_long` reads it, each option
//! recorded in order by its flag ([`super::defs`]) in what was typed
//! ([`LowArgs`]), then what to do decided from that ([`HiArgs`]).

use std::ffi::OsString;

use blockio_tools::getopt;

use super::defs::{flag, table};
use super::help::{help, version};
use super::hiargs::HiArgs;
use super::lowargs::{LowArgs, Special};
use super::usage::{write_out, Usage};

/// Reads the command line: what was typed, then what to do; `Ok(None)`
/// when `--help` or `--version` was answered.
pub(super) fn parse(args: &[OsString]) -> Result<Option<HiArgs>, Usage> {
    let low = parse_low(args)?;
    match low.special {
        Some(Special::Help) => write_out(&help())?,
        Some(Special::Version) => write_out(&version())?,
        None => return HiArgs::from_low(low).map(Some),
    }
    Ok(None)
}

/// Reads `args` as GNU `getopt_long` does and records each option in
/// order. As `getopt_long` hands options over in order, `--help` or
/// `--version` before a mistake is answered (`--help --bogus` prints the
/// help), and the mistake is not reached.
pub(super) fn parse_low(args: &[OsString]) -> Result<LowArgs, Usage> {
    let (parsed, error) = getopt::parse_in_order(args, table());
    let answered = |id: &str| matches!(id, "help" | "version");
    if let Some(e) = error {
        if !parsed.opts.iter().any(|(id, _)| answered(id)) {
            return Err(Usage(e));
        }
    }
    let mut low = LowArgs {
        operands: parsed.operands,
        ..LowArgs::default()
    };
    for (id, value) in parsed.opts {
        let Some(flag) = flag(id) else {
            // Every id of the table is a flag's.
            return Err(Usage(format!("unrecognized option '{id}'")));
        };
        (flag.update)(value, &mut low)?;
        if low.special.is_some() {
            break;
        }
    }
    Ok(low)
}
