//! The walk's shared state ([`Walker`]): the copy's context, the work
//! queue, and what the walk must remember across directories and threads
//! (directories to finish, file systems to sync, operands and directories
//! met). Also the small helpers every part of the walk uses. The walk's
//! methods live beside what they decide (see the parent module); this one
//! holds only what they all read.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use blockio::PathAt;

use super::super::at;
use super::super::entry::{Ctx, DirAt, DirPair};
use super::super::outcome;
use super::work::Work;
use crate::quote::quote;

/// A directory whose path below its root reaches this many bytes is opened
/// as a root of its own: `openat2` takes at most `PATH_MAX` (4096) bytes,
/// and a name takes at most 255 more.
pub(super) const REROOT: usize = 2048;

/// A directory made by the copy whose final mode or times are set at the
/// end, once nothing more is written into it.
pub(super) struct Fixup {
    /// Where the copy is opened from again at the end.
    pub(super) at: DirAt,
    /// The copy's path, for messages.
    pub(super) path: PathBuf,
    /// The source directory's attributes.
    pub(super) st: libc::statx,
    /// The mode to set (`None`: a directory merged into keeps its own,
    /// unless the mode is preserved).
    pub(super) chmod: Option<u32>,
    /// Made by the copy (not merged into).
    pub(super) fresh: bool,
    /// The source's path, for a directory whose source could not be
    /// listed: its ACLs (and xattrs) are then taken from there by path at
    /// the end, so that none the copy inherited stays (listing copies
    /// them otherwise).
    pub(super) unlisted_src: Option<std::ffi::CString>,
}

/// The walk of one copy, shared by all its workers.
pub(super) struct Walker<'a> {
    /// The copy's engine, options, counters and tables.
    pub(super) ctx: Ctx<'a>,
    /// The tasks left.
    pub(super) work: Work,
    /// The directories whose attributes are set at the end.
    pub(super) fixups: Mutex<Vec<Fixup>>,
    /// With `--fsync`, the destination file systems written to: device
    /// number, a directory there (for messages), and that directory opened
    /// before anything was written there (`syncfs` reports the write-back
    /// errors that happened since its file was opened).
    pub(super) filesystems: Mutex<Vec<(u64, PathBuf, File)>>,
    /// The operands copied so far, as directory entries: the (device,
    /// inode) of the file, of its directory, and its name there (`f` and
    /// `./f` are one entry, a hard link `h` of `f` another).
    pub(super) operands_seen: Mutex<std::collections::HashSet<OperandKey>>,
    /// The copies of the non-directory operands (`d/f` for `cp a/f d/`),
    /// each made by the first operand that names it.
    /// With whether that copy is a symbolic link.
    pub(super) operand_targets: Mutex<std::collections::HashMap<PathBuf, bool>>,
    /// The (device, inode) of every destination directory walked so far
    /// (made by the copy or merged into). A source directory among them
    /// is the copy itself, reached through a bind mount or, with `-L`, a
    /// link: entering it would copy the copy for ever.
    pub(super) dest_dirs: Mutex<std::collections::HashSet<(u64, u64)>>,
    /// The source directories entered so far, by (device, inode), with
    /// the path of their copy: met again without `-L` (a bind mount of a
    /// directory inside itself), one is not copied twice.
    pub(super) src_dirs: Mutex<std::collections::HashMap<(u64, u64), PathBuf>>,
    /// Whether the walk can meet a directory twice, or one of the copy's
    /// own, so that `dest_dirs` and `src_dirs` must note every directory
    /// walked: with `-L` (links to directories), with several operands
    /// (one may hold another, or the other's copy), or with a mount below
    /// the operand or one that the destination is reached through
    /// ([`mounts_below`]: a bind mount of a directory inside itself, or
    /// of the source at the destination). Otherwise each source directory is
    /// met once, and only the operands are noted: a directory of many
    /// subdirectories then costs no more than their names while they wait
    /// to be walked.
    ///
    /// [`mounts_below`]: super::mounts::mounts_below
    pub(super) watch: bool,
    /// Under a low limit on descriptors, the operands' directories are
    /// not held open while their trees are copied, but opened again by
    /// their paths whenever a directory is opened beneath them (see
    /// `RootDir::Reopened`): two descriptors more for the files.
    pub(super) reopen_roots: bool,
    /// Under the lowest limits on descriptors (`limits::names_by_path`),
    /// where even a directory pair held beside a source and its copy is
    /// one descriptor too many: directories are opened by their paths,
    /// and files are copied only when no directory is held, named by
    /// their whole paths (see `DirPair::by_path`).
    pub(super) by_path: bool,
}

/// An operand as a directory entry: see `Walker::operands_seen`.
pub(super) type OperandKey = ((u64, u64), (u64, u64), std::ffi::OsString);

/// The process's umask, read without changing it for longer than the
/// call.
pub(super) fn current_umask() -> u32 {
    use rustix::fs::Mode;
    // Set back at once, before any worker creates a file.
    let m = rustix::process::umask(Mode::from_raw_mode(0o022));
    rustix::process::umask(m);
    m.bits()
}

/// The copy of a directory operand: following a link at its last
/// component only when the user named it.
pub(super) fn open_operand_dst(dst: &Path, follow: bool) -> io::Result<File> {
    if follow {
        at::open_operand_dir(dst)
    } else {
        at::open_made_dir(dst)
    }
}

impl Walker<'_> {
    /// Reports a failure (the exit status becomes 1).
    pub(super) fn report(&self, what: String, e: Option<io::Error>) {
        self.ctx.errors.report(what, e)
    }

    /// The source directory of `pair`, open (see [`DirPair::src_dir`]);
    /// `None` after reporting why not.
    pub(super) fn src_dir(&self, pair: &DirPair) -> Option<Arc<File>> {
        self.opened(pair.src_dir(), &pair.src_path)
    }

    /// The destination directory of `pair`, open (see
    /// [`DirPair::dst_dir`]); `None` after reporting why not.
    pub(super) fn dst_dir(&self, pair: &DirPair) -> Option<Arc<File>> {
        self.opened(pair.dst_dir(), &pair.dst_path)
    }

    /// The directory `path` if `dir` opened it, else `None` after
    /// reporting why not.
    fn opened(&self, dir: io::Result<Arc<File>>, path: &Path) -> Option<Arc<File>> {
        dir.map_err(|e| self.report(format!("cannot open directory {}", quote(path)), Some(e)))
            .ok()
    }

    /// Whether FIFOs and devices are read like files (see
    /// `CopyOptions::copy_contents`).
    pub(super) fn as_regular(&self) -> bool {
        !self.ctx.opts.recursive || self.ctx.opts.copy_contents
    }

    /// A message that is not an error (the exit status stays 0).
    pub(super) fn warn(&self, what: String) {
        (self.ctx.errors.sink)(&outcome::CopyError { what, error: None })
    }

    /// The `statx` of one path, through the engine (`follow`: a link is
    /// what it leads to).
    pub(super) fn stat_one(&self, at: PathAt<'_>, follow: bool) -> io::Result<libc::statx> {
        let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
        self.ctx.engine.stat_batch(&[at], flags)?.remove(0)
    }
}
