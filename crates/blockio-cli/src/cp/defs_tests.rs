//! The tests of `cp`'s options ([`super::defs`]): each reads a command line
//! through [`parse_low`], which reads it with the options' table, so they
//! live beside both rather than in `defs`, which `parse` uses.

use std::ffi::{OsStr, OsString};

use blockio_tools::copy::{Dereference, Reflink, Sparse, Update};

use super::defs::{flag, table};
use super::lowargs::{LowArgs, Special};
use super::parse::parse_low;
use super::usage::Usage;

#[test]
fn archive_keeps_all_and_an_earlier_xattr_demand() {
    let low = typed(&["--preserve=xattr", "--no-preserve=mode", "-a"]);
    assert!(low.recursive && low.preserve.mode && low.preserve.links);
    assert!(low.preserve.xattr_required && low.preserve.xattr_quiet);
    assert!(!low.default_mode);
    assert_eq!(low.dereference, Some(Dereference::Never));
    assert!(!typed(&["-a"]).preserve.xattr_required);
}

#[test]
fn attributes_only() {
    assert!(typed(&["--attr"]).attributes_only);
    assert!(!typed(&[]).attributes_only);
}

#[test]
fn backup_keeps_the_last_control_word() {
    assert_eq!(typed(&["-b"]).backup, Some(None));
    let low = typed(&["--backup=numbered", "-b"]);
    assert_eq!(low.backup, Some(Some("numbered".into())));
    assert_eq!(typed(&[]).backup, None);
}

#[test]
fn copy_contents() {
    assert!(typed(&["--copy-contents"]).copy_contents);
}

#[test]
fn dereference_the_last_of_p_h_l_counts() {
    assert_eq!(typed(&["-P", "-L"]).dereference, Some(Dereference::Always));
    assert_eq!(typed(&["-L", "-P"]).dereference, Some(Dereference::Never));
    assert_eq!(
        typed(&["-L", "-H"]).dereference,
        Some(Dereference::CommandLine)
    );
}

#[test]
fn force() {
    assert!(typed(&["--force"]).force && typed(&["-f"]).force);
}

#[test]
fn interactive_and_no_clobber_the_last_counts() {
    let low = typed(&["-n", "-i"]);
    assert!(low.interactive && !low.no_clobber);
    let low = typed(&["-i", "-n"]);
    assert!(!low.interactive && low.no_clobber);
}

#[test]
fn link() {
    let low = typed(&["--link"]);
    assert!(low.hard_link && !low.symbolic_link);
}

#[test]
fn no_clobber() {
    assert!(typed(&["--no-clobber"]).no_clobber);
}

#[test]
fn no_dereference() {
    let low = typed(&["--no-dereference"]);
    assert_eq!(low.dereference, Some(Dereference::Never));
}

#[test]
fn no_preserve_mode_gives_the_default_mode() {
    let low = typed(&["-p", "--no-preserve=mode"]);
    assert!(!low.preserve.mode && low.default_mode && low.preserve.timestamps);
    let e = typed_err(&["--no-preserve=bogus"]);
    assert!(e.msg.starts_with("invalid argument"), "{}", e.msg);
}

#[test]
fn no_target_directory() {
    assert!(typed(&["-T"]).no_target);
}

#[test]
fn one_file_system() {
    assert!(typed(&["--one-file"]).one_file_system);
}

#[test]
fn parents_and_path() {
    assert!(typed(&["--parents"]).parents && typed(&["--path"]).parents);
}

#[test]
fn preserve_lists_and_abbreviations() {
    let low = typed(&["--preserve"]);
    assert!(low.preserve.mode && low.preserve.ownership && low.preserve.timestamps);
    assert!(!low.preserve.links);
    let low = typed(&["--preserve=li,x"]);
    assert!(low.preserve.links && low.preserve.xattr && low.preserve.xattr_required);
    assert!(!low.preserve.mode);
    let e = typed_err(&["--preserve=context"]);
    assert!(!e.hint && e.msg.contains("SELinux"), "{}", e.msg);
}

#[test]
fn recursive_three_spellings() {
    for s in ["-R", "-r", "--recursive"] {
        assert!(typed(&[s]).recursive, "{s}");
    }
    assert!(!typed(&[]).recursive);
}

#[test]
fn remove_destination() {
    assert!(typed(&["--remove-destination"]).remove_destination);
}

#[test]
fn sparse_words() {
    assert_eq!(typed(&["--sparse=al"]).sparse, Sparse::Always);
    assert_eq!(typed(&["--sparse", "never"]).sparse, Sparse::Never);
    assert!(typed_err(&["--sparse=x"]).msg.contains("--sparse"));
}

#[test]
fn reflink_bare_is_always() {
    assert_eq!(typed(&["--reflink"]).reflink, Reflink::Always);
    assert_eq!(typed(&["--reflink=never"]).reflink, Reflink::Never);
    assert_eq!(typed(&[]).reflink, Reflink::Auto);
}

#[test]
fn strip_trailing_slashes() {
    assert!(typed(&["--strip"]).strip_trailing_slashes);
}

#[test]
fn suffix_implies_backup() {
    let low = typed(&["--backup=t", "-S", ".old"]);
    assert_eq!(low.suffix.as_deref(), Some(OsStr::new(".old")));
    assert_eq!(low.backup, Some(Some("t".into())));
    assert_eq!(typed(&["-S~"]).backup, Some(None));
}

#[test]
fn symbolic_link() {
    let low = typed(&["-s"]);
    assert!(low.symbolic_link && !low.hard_link);
}

#[test]
fn target_directory_once() {
    let low = typed(&["-td"]);
    assert_eq!(low.target.as_deref(), Some(OsStr::new("d")));
    let e = typed_err(&["-t", "a", "-t", "b"]);
    assert_eq!(e.msg, "multiple target directories specified");
    assert!(!e.hint);
}

#[test]
fn update_bare_is_older() {
    assert_eq!(typed(&["-u"]).update, Update::Older);
    assert_eq!(typed(&["--update"]).update, Update::Older);
    assert_eq!(typed(&["--update=none"]).update, Update::None);
    assert_eq!(typed(&[]).update, Update::All);
}

#[test]
fn verbose() {
    assert!(typed(&["--verb"]).verbose);
}

#[test]
fn context_is_accepted() {
    let low = typed(&["-Z", "--context", "a"]);
    assert_eq!(low.operands, ["a"]);
}

#[test]
fn help_before_a_mistake_is_answered() {
    assert_eq!(typed(&["--help", "--bogus"]).special, Some(Special::Help));
    assert_eq!(typed(&["--he", "--sparse=x"]).special, Some(Special::Help));
    assert!(typed_err(&["--sparse=x", "--help"])
        .msg
        .contains("--sparse"));
}

#[test]
fn version() {
    assert_eq!(typed(&["--vers"]).special, Some(Special::Version));
}

#[test]
fn d_keeps_links() {
    let low = typed(&["-d"]);
    assert!(low.preserve.links && !low.preserve.mode);
    assert_eq!(low.dereference, Some(Dereference::Never));
}

#[test]
fn follow_command_line() {
    let low = typed(&["-H"]);
    assert_eq!(low.dereference, Some(Dereference::CommandLine));
}

#[test]
fn p_keeps_mode_ownership_times() {
    let low = typed(&["--no-preserve=mode", "-p"]);
    let p = low.preserve;
    assert!(p.mode && p.ownership && p.timestamps && !p.links && !p.xattr);
    assert!(!low.default_mode);
}

#[test]
fn fsync_whole_only() {
    assert!(typed(&["--fsync"]).fsync);
    assert!(typed_err(&["--fsy"]).msg.contains("unrecognized"));
}

#[test]
fn json() {
    assert!(typed(&["--json"]).json);
}

#[test]
fn block_size_within_bounds() {
    assert_eq!(typed(&["--block-size=64K"]).block, Some(64 << 10));
    let e = typed_err(&["--block-size=1K"]);
    assert!(e.msg.starts_with("invalid --block-size '1K'"), "{}", e.msg);
}

#[test]
fn threads_at_least_one() {
    assert_eq!(typed(&["--threads=3"]).threads, Some(3));
    assert!(typed_err(&["--threads=0"]).msg.contains("at least 1"));
}

#[test]
fn long_forms_in_gnu_order_then_blockios_own() {
    let longs: Vec<&str> = table().iter().filter_map(|o| o.long).collect();
    assert_eq!(
        longs,
        [
            "archive",
            "attributes-only",
            "backup",
            "copy-contents",
            "dereference",
            "force",
            "interactive",
            "link",
            "no-clobber",
            "no-dereference",
            "no-preserve",
            "no-target-directory",
            "one-file-system",
            "parents",
            "path",
            "preserve",
            "recursive",
            "remove-destination",
            "sparse",
            "reflink",
            "strip-trailing-slashes",
            "suffix",
            "symbolic-link",
            "target-directory",
            "update",
            "verbose",
            "context",
            "help",
            "version",
            "fsync",
            "json",
            "block-size",
            "threads",
        ]
    );
    // Each flag is found by its id, and no short form is taken twice.
    let mut shorts: Vec<char> = table().iter().filter_map(|o| o.short).collect();
    assert!(table().iter().all(|o| flag(o.id).is_some()));
    shorts.sort_unstable();
    let n = shorts.len();
    shorts.dedup();
    assert_eq!(shorts.len(), n);
}

/// What `args` typed; panics on a usage error.
fn typed(args: &[&str]) -> LowArgs {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    parse_low(&args).unwrap_or_else(|e| panic!("{args:?}: {}", e.msg))
}

/// The usage error of `args`; panics if there is none.
fn typed_err(args: &[&str]) -> Usage {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    match parse_low(&args) {
        Ok(low) => panic!("{args:?} read as {low:?}"),
        Err(e) => e,
    }
}
