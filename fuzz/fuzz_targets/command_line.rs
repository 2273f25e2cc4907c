//! Command lines of the tools blockio stands in for, read as GNU
//! `getopt_long` reads them: any arguments (split at NUL bytes) give
//! options and operands or a message, never a panic, and nothing is
//! invented: every operand is one of the arguments, and every option took
//! at least one of their bytes.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use blockio_tools::getopt::{self, Opt};
use libfuzzer_sys::fuzz_target;

/// The shape of a sum tool's options: flags, options with an
/// argument, short-only and long-only ones, and two long names sharing a
/// prefix (so abbreviations can be ambiguous).
const OPTS: &[Opt] = &[
    Opt::flag("check", Some('c'), Some("check")),
    Opt::flag("binary", Some('b'), Some("binary")),
    Opt::flag("zero", Some('z'), Some("zero")),
    Opt::flag("status", None, Some("status")),
    Opt::flag("strict", None, Some("strict")),
    Opt::arg("length", Some('l'), Some("length")),
    Opt::arg("algorithm", Some('a'), Some("algorithm")),
    Opt::flag("warn", Some('w'), None),
];

fuzz_target!(|data: &[u8]| {
    let args: Vec<OsString> = data
        .split(|&b| b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    if let Ok(parsed) = getopt::parse(&args, OPTS) {
        for operand in &parsed.operands {
            assert!(args.contains(operand), "{operand:?} is not an argument");
        }
        // Each option is at least one byte of the arguments.
        assert!(parsed.opts.len() <= data.len(), "{} options", parsed.opts.len());
    }
});
