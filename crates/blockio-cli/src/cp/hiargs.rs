//! The high stage of reading `cp`'s command line: from what was typed
//! ([`LowArgs`]) to what to do ([`HiArgs`]): the options that exclude
//! each other, the defaults that depend on others or on the environment
//! (`VERSION_CONTROL`, `SIMPLE_BACKUP_SUFFIX`), and the sources and the
//! destination, checked against the file system as GNU `cp` checks them
//! before copying. Each check comes in GNU's order, so that of two
//! mistakes the one GNU names is named.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use blockio_tools::copy::{Backup, CopyOptions, Dereference, LinkMode, Reflink, Sparse};

use super::ask::ask;
use super::lowargs::LowArgs;
use super::usage::{argmatch, fatal, Usage};

/// What the command line asks for.
pub(super) struct HiArgs {
    /// How to copy.
    pub opts: CopyOptions,
    /// What to copy.
    pub sources: Vec<PathBuf>,
    /// Where to.
    pub dest: PathBuf,
    /// `--json`: a summary on standard output at the end.
    pub json: bool,
}

impl HiArgs {
    /// Decides what `low` asks for; GNU's message for a command line that
    /// asks for nothing coherent.
    pub(super) fn from_low(mut low: LowArgs) -> Result<HiArgs, Usage> {
        let link = link_mode(&low)?;
        let (backup, suffix) = backup(&low)?;
        let recursive = low.recursive;
        let dereference = low
            .dereference
            .unwrap_or(if recursive && link != LinkMode::Hard {
                Dereference::Never
            } else {
                Dereference::Always
            });
        let base = CopyOptions::default();
        let block = low.block.unwrap_or(base.block);
        let opts = CopyOptions {
            recursive,
            dereference,
            copy_contents: low.copy_contents,
            no_target_directory: low.no_target,
            one_file_system: low.one_file_system,
            link,
            attributes_only: low.attributes_only,
            sparse: low.sparse,
            reflink: low.reflink,
            parents: low.parents,
            backup,
            suffix,
            preserve: low.preserve,
            default_mode: low.default_mode,
            no_clobber: low.no_clobber,
            update: low.update,
            ask: low.interactive.then_some(ask as fn(&str) -> bool),
            force: low.force,
            remove_destination: low.remove_destination,
            verbose: low.verbose,
            fsync: low.fsync,
            block,
            wave: base.wave.max(block),
            threads: low.threads.unwrap_or(base.threads),
            ..base
        };
        check_reflink(&opts)?;
        let dest = destination(&mut low)?;
        check_parents(&low, &dest)?;
        if low.strip_trailing_slashes && into_a_directory(&low, &dest) {
            strip_trailing_slashes(&mut low.operands);
        }
        Ok(HiArgs {
            opts,
            sources: low.operands.into_iter().map(PathBuf::from).collect(),
            dest: PathBuf::from(dest),
            json: low.json,
        })
    }
}

/// `-l` or `-s`, never both.
fn link_mode(low: &LowArgs) -> Result<LinkMode, Usage> {
    match (low.hard_link, low.symbolic_link) {
        (true, true) => Err(Usage("cannot make both hard and symbolic links".into())),
        (true, false) => Ok(LinkMode::Hard),
        (false, true) => Ok(LinkMode::Symbolic),
        (false, false) => Ok(LinkMode::Copy),
    }
}

/// The backups to make and their suffix: as given, else the
/// environment's (`VERSION_CONTROL`, `SIMPLE_BACKUP_SUFFIX`), else GNU's
/// defaults (`existing`, `~`). Never with `-n`.
fn backup(low: &LowArgs) -> Result<(Backup, OsString), Usage> {
    let Some(control) = &low.backup else {
        return Ok((Backup::None, CopyOptions::default().suffix));
    };
    if low.no_clobber {
        return Err(Usage(
            "options --backup and --no-clobber are mutually exclusive".into(),
        ));
    }
    // `--backup=` (empty) is GNU's plain `--backup`: the environment's
    // choice, else the default.
    let (control, from) = match control.clone().filter(|c| !c.is_empty()) {
        Some(c) => (c, "backup type"),
        None => match std::env::var("VERSION_CONTROL") {
            Ok(c) if !c.is_empty() => (c, "$VERSION_CONTROL"),
            _ => ("existing".to_string(), "backup type"),
        },
    };
    let backup = backup_type(&control, from)?;
    let suffix = low
        .suffix
        .clone()
        .or_else(|| std::env::var_os("SIMPLE_BACKUP_SUFFIX"));
    // A suffix with a slash would put the backup elsewhere: GNU's default
    // then.
    let suffix = match suffix {
        Some(s) if !s.is_empty() && !s.as_bytes().contains(&b'/') => s,
        _ => "~".into(),
    };
    Ok((backup, suffix))
}

/// A backup CONTROL word (or an unambiguous abbreviation of one).
fn backup_type(control: &str, from: &str) -> Result<Backup, Usage> {
    let words = [
        ("none", Backup::None),
        ("off", Backup::None),
        ("simple", Backup::Simple),
        ("never", Backup::Simple),
        ("existing", Backup::Existing),
        ("nil", Backup::Existing),
        ("numbered", Backup::Numbered),
        ("t", Backup::Numbered),
    ];
    argmatch(control, from, &words)
}

/// `--reflink=always` only with `--sparse=auto`: a clone shares the
/// source's blocks as they are, no holes made or filled.
fn check_reflink(opts: &CopyOptions) -> Result<(), Usage> {
    if opts.reflink == Reflink::Always && opts.sparse != Sparse::Auto {
        return Err(Usage(
            "--reflink can be used only with --sparse=auto".into(),
        ));
    }
    Ok(())
}

/// The destination, taken from the operands unless `-t` names it, as GNU
/// checks it: `-t` a directory, and enough operands.
fn destination(low: &mut LowArgs) -> Result<OsString, Usage> {
    if low.target.is_some() && low.no_target {
        return Err(fatal(
            "cannot combine --target-directory (-t) and --no-target-directory (-T)".into(),
        ));
    }
    let operands = &mut low.operands;
    match low.target.take() {
        Some(t) => {
            if operands.is_empty() {
                return Err(Usage("missing file operand".into()));
            }
            check_target_directory(&t)?;
            Ok(t)
        }
        None => {
            match operands.len() {
                0 => return Err(Usage("missing file operand".into())),
                1 => {
                    return Err(Usage(format!(
                        "missing destination file operand after {}",
                        quote(&operands[0])
                    )))
                }
                n if low.no_target && n > 2 => {
                    return Err(Usage(format!("extra operand {}", quote(&operands[2]))))
                }
                _ => {}
            }
            Ok(operands.pop().expect("two operands at least"))
        }
    }
}

/// `-t DIRECTORY` is a directory.
fn check_target_directory(t: &OsStr) -> Result<(), Usage> {
    match std::fs::metadata(t) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(fatal(format!(
            "target directory {}: Not a directory",
            quote(t)
        ))),
        Err(e) => Err(fatal(format!(
            "target directory {}: {}",
            quote(t),
            blockio_tools::reason::reason(&e)
        ))),
    }
}

/// `--parents` copies into a directory. With several sources a
/// destination that is not a directory is the copy's "target 'X': ..."
/// first, as GNU's order is.
fn check_parents(low: &LowArgs, dest: &OsStr) -> Result<(), Usage> {
    let several = low.operands.len() > 1;
    if low.parents
        && (low.no_target || (!several && !std::fs::metadata(dest).is_ok_and(|m| m.is_dir())))
    {
        return Err(Usage(
            "with --parents, the destination must be a directory".into(),
        ));
    }
    Ok(())
}

/// Whether the sources are copied into `dest` as a directory.
fn into_a_directory(low: &LowArgs, dest: &OsStr) -> bool {
    !low.no_target && std::fs::metadata(dest).is_ok_and(|m| m.is_dir())
}

/// `--strip-trailing-slashes`: as GNU, only for sources copied into a
/// directory (`cp --strip... dl/ x`, with `x` new, still follows the link
/// `dl`). `/` stays `/`.
fn strip_trailing_slashes(operands: &mut [OsString]) {
    for s in operands {
        let b = s.as_bytes();
        let end = b.len() - b.iter().rev().take_while(|&&c| c == b'/').count();
        if end > 0 && end < b.len() {
            *s = OsStr::from_bytes(&b[..end]).to_owned();
        }
    }
}

/// A name quoted as GNU's messages quote it.
fn quote(s: &OsStr) -> String {
    blockio_tools::quote::quote(std::path::Path::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripping_trailing_slashes_leaves_the_root() {
        let mut v = vec![
            OsString::from("a//"),
            OsString::from("/"),
            OsString::from("b"),
        ];
        strip_trailing_slashes(&mut v);
        assert_eq!(v, ["a", "/", "b"]);
    }
}
