//! The low stage of reading `cp`'s command line: what was typed, option by
//! option in order, each recorded by its flag ([`super::defs`]) as GNU's
//! `cp` records it while it reads (a later `-i` undoes an earlier `-n`,
//! `-a` keeps an earlier `--preserve=xattr`'s demand). Nothing here looks
//! at the file system or the environment; [`super::hiargs`] then decides
//! what to do. [`super::parse`] reads the command line into it.

use std::ffi::OsString;

use blockio_tools::copy::{Dereference, Preserve, Reflink, Sparse, Update};

/// `--help` or `--version`: answered instead of copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Special {
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// What the command line says, as typed.
#[derive(Debug)]
pub(super) struct LowArgs {
    /// `--help` or `--version`, when one was reached: the options after it
    /// are not read.
    pub special: Option<Special>,
    /// The operands, in order.
    pub operands: Vec<OsString>,
    /// `-P`, `-H`, `-L` (and `-a`, `-d`): the last one given.
    pub dereference: Option<Dereference>,
    /// `-p`, `--preserve`, `--no-preserve`, `-a`, `-d`.
    pub preserve: Preserve,
    /// New files get the default mode (`--no-preserve=mode`).
    pub default_mode: bool,
    /// `-R`, `-r`, `-a`.
    pub recursive: bool,
    /// `-n`, unless a later `-i` undid it.
    pub no_clobber: bool,
    /// `-i`, unless a later `-n` undid it.
    pub interactive: bool,
    /// `-f`.
    pub force: bool,
    /// `-x`.
    pub one_file_system: bool,
    /// `--attributes-only`.
    pub attributes_only: bool,
    /// `--parents`.
    pub parents: bool,
    /// `--sparse=WHEN`.
    pub sparse: Sparse,
    /// `--reflink[=WHEN]`.
    pub reflink: Reflink,
    /// `-b`, `--backup[=CONTROL]` or `-S`: `Some` once any was given, with
    /// the last CONTROL word given, if any.
    pub backup: Option<Option<String>>,
    /// `-S SUFFIX`.
    pub suffix: Option<OsString>,
    /// `-l`.
    pub hard_link: bool,
    /// `-s`.
    pub symbolic_link: bool,
    /// `--remove-destination`.
    pub remove_destination: bool,
    /// `-v`.
    pub verbose: bool,
    /// `-u`, `--update[=UPDATE]`.
    pub update: Update,
    /// `--copy-contents`.
    pub copy_contents: bool,
    /// `--strip-trailing-slashes`.
    pub strip_trailing_slashes: bool,
    /// `-t DIRECTORY`.
    pub target: Option<OsString>,
    /// `-T`.
    pub no_target: bool,
    /// `--fsync`.
    pub fsync: bool,
    /// `--json`.
    pub json: bool,
    /// `--block-size=SIZE`, in bytes.
    pub block: Option<usize>,
    /// `--threads=N`.
    pub threads: Option<usize>,
}

impl Default for LowArgs {
    /// A command line with no option: `cp SOURCE DEST`.
    fn default() -> Self {
        LowArgs {
            special: None,
            operands: Vec::new(),
            dereference: None,
            preserve: Preserve::default(),
            default_mode: false,
            recursive: false,
            no_clobber: false,
            interactive: false,
            force: false,
            one_file_system: false,
            attributes_only: false,
            parents: false,
            sparse: Sparse::Auto,
            reflink: Reflink::Auto,
            backup: None,
            suffix: None,
            hard_link: false,
            symbolic_link: false,
            remove_destination: false,
            verbose: false,
            update: Update::All,
            copy_contents: false,
            strip_trailing_slashes: false,
            target: None,
            no_target: false,
            fsync: false,
            json: false,
            block: None,
            threads: None,
        }
    }
}
