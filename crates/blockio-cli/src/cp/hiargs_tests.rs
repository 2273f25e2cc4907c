//! The tests of what to do as decided from what was typed
//! ([`super::hiargs`]): each reads a command line through [`parse_low`],
//! which `parse` hands to [`HiArgs::from_low`], so they live beside both
//! rather than in `hiargs`, which `parse` uses.

use std::ffi::OsString;
use std::path::PathBuf;

use blockio_tools::copy::{Backup, Dereference};

use super::hiargs::HiArgs;
use super::parse::parse_low;
use super::usage::Usage;

fn decided(args: &[&str]) -> Result<HiArgs, Usage> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let low = parse_low(&args).unwrap_or_else(|e| panic!("{}", e.msg));
    HiArgs::from_low(low)
}

fn refused(args: &[&str]) -> Usage {
    match decided(args) {
        Ok(_) => panic!("{args:?} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn the_last_operand_is_the_destination() {
    let hi = decided(&["a", "b", "c"]).unwrap_or_else(|e| panic!("{}", e.msg));
    assert_eq!(hi.sources, [PathBuf::from("a"), PathBuf::from("b")]);
    assert_eq!(hi.dest, PathBuf::from("c"));
    assert_eq!(
        refused(&["a"]).msg,
        "missing destination file operand after 'a'"
    );
    assert_eq!(refused(&[]).msg, "missing file operand");
    assert_eq!(refused(&["-T", "a", "b", "c"]).msg, "extra operand 'c'");
}

#[test]
fn dereference_default_depends_on_recursive_and_link() {
    let deref = |args: &[&str]| decided(args).ok().map(|h| h.opts.dereference);
    assert_eq!(deref(&["a", "b"]), Some(Dereference::Always));
    assert_eq!(deref(&["-r", "a", "b"]), Some(Dereference::Never));
    assert_eq!(deref(&["-rl", "a", "b"]), Some(Dereference::Always));
    assert_eq!(deref(&["-rH", "a", "b"]), Some(Dereference::CommandLine));
}

#[test]
fn options_that_exclude_each_other_are_refused() {
    let e = refused(&["-l", "-s", "a", "b"]);
    assert_eq!(e.msg, "cannot make both hard and symbolic links");
    let e = refused(&["-n", "-b", "a", "b"]);
    assert!(e.msg.contains("--backup and --no-clobber"), "{}", e.msg);
    let e = refused(&["--reflink", "--sparse=never", "a", "b"]);
    assert!(e.msg.contains("--sparse=auto"), "{}", e.msg);
    let e = refused(&["-t", ".", "-T", "a"]);
    assert!(!e.hint && e.msg.starts_with("cannot combine"), "{}", e.msg);
}

#[test]
fn backup_words_and_suffix() {
    let hi =
        decided(&["--backup=nu", "-S", ".b", "a", "b"]).unwrap_or_else(|e| panic!("{}", e.msg));
    assert_eq!(hi.opts.backup, Backup::Numbered);
    assert_eq!(hi.opts.suffix, ".b");
    let hi = decided(&["-S", "x/y", "a", "b"]).unwrap_or_else(|e| panic!("{}", e.msg));
    assert_eq!(hi.opts.suffix, "~");
    assert!(refused(&["--backup=bogus", "a", "b"])
        .msg
        .contains("backup type"));
}

#[test]
fn block_size_sets_the_wave_floor() {
    let hi = decided(&["--block-size=64M", "a", "b"]).unwrap_or_else(|e| panic!("{}", e.msg));
    assert_eq!((hi.opts.block, hi.opts.wave), (64 << 20, 64 << 20));
}
