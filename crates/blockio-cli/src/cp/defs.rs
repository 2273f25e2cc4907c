//! `cp`'s options, one unit each: how it is spelled on the command line,
//! what it records in what was typed ([`LowArgs`]); their tests, which read
//! command lines through `parse`, are in `defs_tests`.
//!
//! [`FLAGS`] lists them with their long forms in GNU's order, which its
//! messages about ambiguous abbreviations list them in, and blockio's own
//! last: those are matched whole only, so that they never make a GNU
//! abbreviation ambiguous.

use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;

use blockio_tools::copy::{Dereference, Preserve, Reflink, Sparse, Update};
use blockio_tools::getopt::Opt;

use super::lowargs::{LowArgs, Special};
use super::program::program;
use super::usage::{argmatch, fatal, Usage};
use crate::stdio::say_err;

/// One option of `cp`.
pub(super) struct Flag {
    /// Its spellings, all with one id (the option's name): the long form
    /// with its short one, and a short form of its own where that differs
    /// (`-b` takes no argument, `--backup` an optional one).
    pub spellings: &'static [Opt],
    /// Records the option, given with its argument, in what was typed; a
    /// mistake in the argument is GNU's message.
    pub update: fn(Option<OsString>, &mut LowArgs) -> Result<(), Usage>,
}

/// Every option, long forms in GNU's order (see the module's doc).
pub(super) const FLAGS: &[Flag] = &[
    ARCHIVE,
    ATTRIBUTES_ONLY,
    BACKUP,
    COPY_CONTENTS,
    DEREFERENCE,
    FORCE,
    INTERACTIVE,
    LINK,
    NO_CLOBBER,
    NO_DEREFERENCE,
    NO_PRESERVE,
    NO_TARGET_DIRECTORY,
    ONE_FILE_SYSTEM,
    PARENTS,
    PRESERVE,
    RECURSIVE,
    REMOVE_DESTINATION,
    SPARSE,
    REFLINK,
    STRIP_TRAILING_SLASHES,
    SUFFIX,
    SYMBOLIC_LINK,
    TARGET_DIRECTORY,
    UPDATE,
    VERBOSE,
    CONTEXT,
    HELP,
    VERSION,
    NO_DEREFERENCE_PRESERVE_LINKS,
    FOLLOW_COMMAND_LINE,
    PRESERVE_DEFAULT,
    FSYNC,
    JSON,
    BLOCK_SIZE,
    THREADS,
];

/// The spellings of every option for [`blockio_tools::getopt`]: those
/// with a long form in [`FLAGS`]' order, then the short forms of their
/// own.
pub(super) fn table() -> &'static [Opt] {
    static TABLE: OnceLock<Vec<Opt>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let all = || FLAGS.iter().flat_map(|f| f.spellings.iter().copied());
        let long = all().filter(|o| o.long.is_some());
        long.chain(all().filter(|o| o.long.is_none())).collect()
    })
}

/// The option whose id getopt handed back.
pub(super) fn flag(id: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.spellings[0].id == id)
}

/// The argument of an option that takes one, as text.
fn text(value: &Option<OsString>) -> String {
    value
        .as_deref()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// `-a`, `--archive`: same as `-dR --preserve=all`.
const ARCHIVE: Flag = Flag {
    spellings: &[Opt::flag("a", Some('a'), Some("archive"))],
    update: |_, low| {
        low.dereference = Some(Dereference::Never);
        // GNU's -a reduces the diagnostics of extended attributes, but
        // leaves an earlier `--preserve=xattr`'s demand that each be
        // copied.
        low.preserve = Preserve {
            xattr_required: low.preserve.xattr_required,
            xattr_quiet: true,
            ..Preserve::ALL
        };
        // The mode is kept, so an earlier `--no-preserve=mode`'s default
        // mode no longer applies (GNU consults it only when the mode is
        // not kept).
        low.default_mode = false;
        low.recursive = true;
        Ok(())
    },
};

/// `--attributes-only`: the attributes, not the data.
const ATTRIBUTES_ONLY: Flag = Flag {
    spellings: &[Opt::flag("attributes-only", None, Some("attributes-only"))],
    update: |_, low| {
        low.attributes_only = true;
        Ok(())
    },
};

/// `-b`, `--backup[=CONTROL]`: keep each existing destination aside; the
/// last CONTROL word given counts.
const BACKUP: Flag = Flag {
    spellings: &[
        Opt::optional_arg("b", "backup"),
        Opt::flag("b", Some('b'), None),
    ],
    update: |value, low| {
        let control = value.map(|v| v.to_string_lossy().into_owned());
        low.backup = Some(control.or(low.backup.take().flatten()));
        Ok(())
    },
};

/// `--copy-contents`: read special files when recursive.
const COPY_CONTENTS: Flag = Flag {
    spellings: &[Opt::flag("copy-contents", None, Some("copy-contents"))],
    update: |_, low| {
        low.copy_contents = true;
        Ok(())
    },
};

/// `-L`, `--dereference`: follow every symbolic link among the sources.
const DEREFERENCE: Flag = Flag {
    spellings: &[Opt::flag("L", Some('L'), Some("dereference"))],
    update: |_, low| {
        low.dereference = Some(Dereference::Always);
        Ok(())
    },
};

/// `-f`, `--force`: remove a destination that cannot be opened, and try
/// again.
const FORCE: Flag = Flag {
    spellings: &[Opt::flag("f", Some('f'), Some("force"))],
    update: |_, low| {
        low.force = true;
        Ok(())
    },
};

/// `-i`, `--interactive`: ask before overwriting; undoes an earlier `-n`
/// (the last of the two counts, as with GNU `cp` 9.1).
const INTERACTIVE: Flag = Flag {
    spellings: &[Opt::flag("i", Some('i'), Some("interactive"))],
    update: |_, low| {
        low.interactive = true;
        low.no_clobber = false;
        Ok(())
    },
};

/// `-l`, `--link`: hard links instead of copies.
const LINK: Flag = Flag {
    spellings: &[Opt::flag("l", Some('l'), Some("link"))],
    update: |_, low| {
        low.hard_link = true;
        Ok(())
    },
};

/// `-n`, `--no-clobber`: never overwrite; undoes an earlier `-i`.
const NO_CLOBBER: Flag = Flag {
    spellings: &[Opt::flag("n", Some('n'), Some("no-clobber"))],
    update: |_, low| {
        low.no_clobber = true;
        low.interactive = false;
        Ok(())
    },
};

/// `-P`, `--no-dereference`: copy symbolic links as links.
const NO_DEREFERENCE: Flag = Flag {
    spellings: &[Opt::flag("P", Some('P'), Some("no-dereference"))],
    update: |_, low| {
        low.dereference = Some(Dereference::Never);
        Ok(())
    },
};

/// `--no-preserve=ATTR_LIST`: attributes not to keep.
const NO_PRESERVE: Flag = Flag {
    spellings: &[Opt::arg("no-preserve", None, Some("no-preserve"))],
    update: |value, low| preserve_list(low, &text(&value), false),
};

/// `-T`, `--no-target-directory`: DEST is a file's name.
const NO_TARGET_DIRECTORY: Flag = Flag {
    spellings: &[Opt::flag("T", Some('T'), Some("no-target-directory"))],
    update: |_, low| {
        low.no_target = true;
        Ok(())
    },
};

/// `-x`, `--one-file-system`: stay on the sources' file systems.
const ONE_FILE_SYSTEM: Flag = Flag {
    spellings: &[Opt::flag("x", Some('x'), Some("one-file-system"))],
    update: |_, low| {
        low.one_file_system = true;
        Ok(())
    },
};

/// `--parents` (and its old name `--path`): the sources' whole names under
/// the directory.
const PARENTS: Flag = Flag {
    spellings: &[
        Opt::flag("parents", None, Some("parents")),
        Opt::flag("parents", None, Some("path")),
    ],
    update: |_, low| {
        low.parents = true;
        Ok(())
    },
};

/// `--preserve[=ATTR_LIST]`: attributes to keep (`mode,ownership,
/// timestamps` without a list).
const PRESERVE: Flag = Flag {
    spellings: &[Opt::optional_arg("preserve", "preserve")],
    update: |value, low| {
        let list = value.as_deref().map(OsStr::to_string_lossy);
        let list = list.as_deref().unwrap_or("mode,ownership,timestamps");
        preserve_list(low, list, true)
    },
};

/// `-R`, `-r`, `--recursive`: copy directories and what they hold.
const RECURSIVE: Flag = Flag {
    spellings: &[
        Opt::flag("R", Some('R'), Some("recursive")),
        Opt::flag("R", Some('r'), None),
    ],
    update: |_, low| {
        low.recursive = true;
        Ok(())
    },
};

/// `--remove-destination`: remove each existing destination first.
const REMOVE_DESTINATION: Flag = Flag {
    spellings: &[Opt::flag(
        "remove-destination",
        None,
        Some("remove-destination"),
    )],
    update: |_, low| {
        low.remove_destination = true;
        Ok(())
    },
};

/// `--sparse=WHEN`: `never`, `auto` or `always`.
const SPARSE: Flag = Flag {
    spellings: &[Opt::arg("sparse", None, Some("sparse"))],
    update: |value, low| {
        let words = [
            ("never", Sparse::Never),
            ("auto", Sparse::Auto),
            ("always", Sparse::Always),
        ];
        low.sparse = argmatch(&text(&value), "--sparse", &words)?;
        Ok(())
    },
};

/// `--reflink[=WHEN]`: `auto`, `always` (the default of the bare option)
/// or `never`.
const REFLINK: Flag = Flag {
    spellings: &[Opt::optional_arg("reflink", "reflink")],
    update: |value, low| {
        let words = [
            ("auto", Reflink::Auto),
            ("always", Reflink::Always),
            ("never", Reflink::Never),
        ];
        low.reflink = match &value {
            None => Reflink::Always,
            Some(_) => argmatch(&text(&value), "--reflink", &words)?,
        };
        Ok(())
    },
};

/// `--strip-trailing-slashes`: from each SOURCE.
const STRIP_TRAILING_SLASHES: Flag = Flag {
    spellings: &[Opt::flag(
        "strip-trailing-slashes",
        None,
        Some("strip-trailing-slashes"),
    )],
    update: |_, low| {
        low.strip_trailing_slashes = true;
        Ok(())
    },
};

/// `-S`, `--suffix=SUFFIX`: the backup suffix; implies `--backup`.
const SUFFIX: Flag = Flag {
    spellings: &[Opt::arg("S", Some('S'), Some("suffix"))],
    update: |value, low| {
        low.suffix = value;
        low.backup = Some(low.backup.take().flatten());
        Ok(())
    },
};

/// `-s`, `--symbolic-link`: symbolic links instead of copies.
const SYMBOLIC_LINK: Flag = Flag {
    spellings: &[Opt::flag("s", Some('s'), Some("symbolic-link"))],
    update: |_, low| {
        low.symbolic_link = true;
        Ok(())
    },
};

/// `-t`, `--target-directory=DIRECTORY`: copy every operand into it; once.
const TARGET_DIRECTORY: Flag = Flag {
    spellings: &[Opt::arg("t", Some('t'), Some("target-directory"))],
    update: |value, low| {
        if low.target.is_some() {
            return Err(fatal("multiple target directories specified".into()));
        }
        low.target = value;
        Ok(())
    },
};

/// `-u`, `--update[=UPDATE]`: `all`, `none` or `older` (the default of
/// the bare option).
const UPDATE: Flag = Flag {
    spellings: &[
        Opt::optional_arg("u", "update"),
        Opt::flag("u", Some('u'), None),
    ],
    update: |value, low| {
        let words = [
            ("all", Update::All),
            ("none", Update::None),
            ("older", Update::Older),
        ];
        low.update = match &value {
            None => Update::Older,
            Some(_) => argmatch(&text(&value), "--update", &words)?,
        };
        Ok(())
    },
};

/// `-v`, `--verbose`: a line for each file.
const VERBOSE: Flag = Flag {
    spellings: &[Opt::flag("v", Some('v'), Some("verbose"))],
    update: |_, low| {
        low.verbose = true;
        Ok(())
    },
};

/// `-Z`, `--context[=CTX]`: accepted; an SELinux context given is
/// warned about, as GNU does on a kernel without SELinux.
const CONTEXT: Flag = Flag {
    spellings: &[
        Opt::optional_arg("Z", "context"),
        Opt::flag("Z", Some('Z'), None),
    ],
    update: |value, _| {
        if value.is_some() {
            say_err!(
                "{}: warning: ignoring --context; it requires an SELinux-enabled kernel",
                program()
            );
        }
        Ok(())
    },
};

/// `--help`: answered, nothing after it read.
const HELP: Flag = Flag {
    spellings: &[Opt::flag("help", None, Some("help"))],
    update: |_, low| {
        low.special = Some(Special::Help);
        Ok(())
    },
};

/// `--version`: answered, nothing after it read.
const VERSION: Flag = Flag {
    spellings: &[Opt::flag("version", None, Some("version"))],
    update: |_, low| {
        low.special = Some(Special::Version);
        Ok(())
    },
};

/// `-d`: same as `--no-dereference --preserve=links`.
const NO_DEREFERENCE_PRESERVE_LINKS: Flag = Flag {
    spellings: &[Opt::flag("d", Some('d'), None)],
    update: |_, low| {
        low.dereference = Some(Dereference::Never);
        low.preserve.links = true;
        Ok(())
    },
};

/// `-H`: follow the symbolic links named on the command line.
const FOLLOW_COMMAND_LINE: Flag = Flag {
    spellings: &[Opt::flag("H", Some('H'), None)],
    update: |_, low| {
        low.dereference = Some(Dereference::CommandLine);
        Ok(())
    },
};

/// `-p`: same as `--preserve=mode,ownership,timestamps`.
const PRESERVE_DEFAULT: Flag = Flag {
    spellings: &[Opt::flag("p", Some('p'), None)],
    update: |_, low| preserve_list(low, "mode,ownership,timestamps", true),
};

/// `--fsync` (blockio's own): make the copy durable before exiting.
const FSYNC: Flag = Flag {
    spellings: &[Opt::flag("fsync", None, Some("fsync")).whole_only()],
    update: |_, low| {
        low.fsync = true;
        Ok(())
    },
};

/// `--json` (blockio's own): a JSON summary on standard output.
const JSON: Flag = Flag {
    spellings: &[Opt::flag("json", None, Some("json")).whole_only()],
    update: |_, low| {
        low.json = true;
        Ok(())
    },
};

/// `--block-size=SIZE` (blockio's own): bytes per read and write, 4K to
/// 64M.
const BLOCK_SIZE: Flag = Flag {
    spellings: &[Opt::arg("block-size", None, Some("block-size")).whole_only()],
    update: |value, low| {
        let size = text(&value);
        low.block = Some(
            parse_block(&size).map_err(|e| Usage(format!("invalid --block-size '{size}': {e}")))?,
        );
        Ok(())
    },
};

/// A block size for `cp`: 4 KiB to 64 MiB.
fn parse_block(s: &str) -> Result<usize, String> {
    let n = crate::size::parse(s)?;
    if !(4096..=(64 << 20)).contains(&n) {
        return Err(format!("must be between 4K and 64M, got {s}"));
    }
    Ok(n)
}

/// `--threads=N` (blockio's own): worker threads, at least 1.
const THREADS: Flag = Flag {
    spellings: &[Opt::arg("threads", None, Some("threads")).whole_only()],
    update: |value, low| match text(&value).parse::<usize>() {
        Ok(n) if n > 0 => {
            low.threads = Some(n);
            Ok(())
        }
        _ => Err(Usage(format!(
            "invalid --threads '{}': a number of at least 1",
            text(&value)
        ))),
    },
};

/// `--preserve=LIST` (`keep`) or `--no-preserve=LIST`: GNU's attribute
/// names, comma-separated. `context` (SELinux) is not kept: asked for
/// explicitly it is an error, as with GNU on a kernel without SELinux.
fn preserve_list(low: &mut LowArgs, list: &str, keep: bool) -> Result<(), Usage> {
    const NAMES: &[&str] = &[
        "mode",
        "timestamps",
        "ownership",
        "links",
        "context",
        "xattr",
        "all",
    ];
    let option = if keep { "--preserve" } else { "--no-preserve" };
    for name in list.split(',') {
        // GNU takes unambiguous abbreviations here too.
        let words: Vec<(&str, &str)> = NAMES.iter().map(|n| (*n, *n)).collect();
        let name = argmatch(name, option, &words)?;
        let p = &mut low.preserve;
        match name {
            "mode" => {
                p.mode = keep;
                low.default_mode = !keep;
            }
            "timestamps" => p.timestamps = keep,
            "ownership" => p.ownership = keep,
            "links" => p.links = keep,
            "xattr" => {
                p.xattr = keep;
                p.xattr_required = keep;
            }
            "context" if keep => {
                return Err(fatal(
                    "cannot preserve security context without an SELinux-enabled kernel".into(),
                ))
            }
            "context" => {}
            _ => {
                // As GNU's `all`: how failures to copy extended
                // attributes are reported is left as it was.
                *p = Preserve {
                    xattr_required: p.xattr_required,
                    xattr_quiet: p.xattr_quiet,
                    ..if keep {
                        Preserve::ALL
                    } else {
                        Preserve::default()
                    }
                };
                low.default_mode = !keep;
            }
        }
    }
    Ok(())
}
