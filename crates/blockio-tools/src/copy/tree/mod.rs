//! The walker: command-line operands, breadth-first directories, links,
//! special files, and the groups of regular files handed to the workers.
//!
//! Directories are opened from their operand's root by relative path (see
//! [`at`](super::at)); when that path grows past [`walker::REROOT`] bytes
//! the directory becomes a root of its own, so a tree of any depth is
//! copied (GNU `cp` stops at `PATH_MAX`), while the walk keeps only a few
//! descriptors per level open.
//!
//! [`run`] copies the operands in phases and runs the workers. The walk is
//! one [`walker::Walker`] shared by every worker, its methods grouped by
//! what they decide: the command-line operands and GNU's rules for them
//! ([`operands`], [`same_file`]), listing and making directories
//! ([`directories`]), links and special files made as names
//! ([`links`]), and the directories' final attributes and durability
//! ([`finish`]). The queue the workers share is [`work`]'s. Each part
//! depends only on the ones below it in that list and on [`walker`], so the
//! rules can be read, and changed, one concern at a time.

mod directories;
mod finish;
mod links;
mod mounts;
mod operands;
mod paths;
mod same_file;
mod walker;
mod work;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use blockio::Engine;

use super::entry::{Counts, Ctx};
use super::files;
use super::options::CopyOptions;
use super::outcome::{CopyReport, Errors, Progress};
use super::{creators, limits, options, outcome};
use walker::{current_umask, Walker};
use work::{Running, Task, Work};

/// One copy to run: what goes where, how, and where progress and errors
/// go.
pub(crate) struct Request<'a> {
    /// The source operands, in order.
    pub sources: &'a [PathBuf],
    /// The destination operand.
    pub dest: &'a Path,
    /// Whether `dest` is a directory the sources are copied into (else the
    /// one source is copied to `dest` itself).
    pub dest_is_dir: bool,
    /// How to copy.
    pub opts: &'a CopyOptions,
    /// The counters the copy advances as it goes.
    pub progress: &'a Progress,
    /// Called for each path that fails, from any thread.
    pub on_error: &'a (dyn Fn(&outcome::CopyError) + Sync),
}

/// Runs the copy `req` on `engine` and returns what it copied (`errors`
/// left 0: each went to `req.on_error`, whose caller counts them).
pub(crate) fn run(engine: &Engine, req: &Request<'_>) -> CopyReport {
    let errors = Errors {
        progress: req.progress,
        sink: req.on_error,
    };
    let walker = walker_for(engine, req, &errors);
    // The operands are copied in phases, in command-line order: each
    // directory in a phase of its own, the files between them together.
    // Copies that land on the same names then end as GNU's do, the later
    // operand's last (`cp -r a/. b/. d/` leaves `b`'s files), never
    // depending on which thread came first.
    let (opts, mut rest) = (req.opts, req.sources);
    while !rest.is_empty() {
        let is_dir = |p: &PathBuf| opts.recursive && std::fs::metadata(p).is_ok_and(|m| m.is_dir());
        let n = phase_len(rest, opts, is_dir);
        let (phase, later) = rest.split_at(n);
        rest = later;
        walker.copy_phase(phase, req.dest, req.dest_is_dir);
    }
    walker.finish_dirs();
    report_of(&walker, req.progress)
}

/// The walk of the copy `req`, its errors going to `errors`.
fn walker_for<'a>(engine: &'a Engine, req: &Request<'a>, errors: &'a Errors<'a>) -> Walker<'a> {
    let &Request {
        sources,
        dest,
        opts,
        progress,
        ..
    } = req;
    Walker {
        ctx: Ctx {
            engine,
            opts,
            progress,
            errors,
            counts: Counts::default(),
            links: Default::default(),
            made_links: (sources.len() > 1).then(Default::default),
            creators: creators::Creators::new(opts.threads),
            umask: current_umask(),
        },
        work: Work::default(),
        fixups: Mutex::new(Vec::new()),
        filesystems: Mutex::new(Vec::new()),
        operands_seen: Mutex::default(),
        operand_targets: Mutex::default(),
        dest_dirs: Mutex::default(),
        src_dirs: Mutex::default(),
        watch: opts.dereference == options::Dereference::Always
            || sources.len() > 1
            || mounts::mounts_below(sources, dest),
        reopen_roots: limits::few_descriptors(),
        by_path: limits::names_by_path(),
    }
}

/// What the finished walk copied, by its counters.
fn report_of(walker: &Walker<'_>, progress: &Progress) -> CopyReport {
    let counts = &walker.ctx.counts;
    CopyReport {
        files: progress.files.load(Ordering::Relaxed),
        dirs: progress.dirs.load(Ordering::Relaxed),
        symlinks: counts.symlinks.load(Ordering::Relaxed),
        specials: counts.specials.load(Ordering::Relaxed),
        skipped: counts.skipped.load(Ordering::Relaxed),
        bytes: progress.bytes.load(Ordering::Relaxed),
        errors: 0,
        seconds: 0.0,
        backend: String::new(),
        fallback_reason: None,
        output_error: None,
    }
}

/// How many of the operands `rest` (at least one) are copied in the next
/// phase: a directory alone; else the files up to the next directory,
/// together, except with backups (`-b`), where each is a phase of its
/// own: one operand's backup may take the name another operand is copied
/// to (`cp -b f~ f d`: `d/f` is kept aside as `d/f~`), so they must run in
/// command-line order, as GNU's, or a destination file could be lost.
fn phase_len(
    rest: &[PathBuf],
    opts: &options::CopyOptions,
    is_dir: impl Fn(&PathBuf) -> bool,
) -> usize {
    if is_dir(&rest[0]) || opts.backup != options::Backup::None {
        1
    } else {
        rest.iter().position(is_dir).unwrap_or(rest.len())
    }
}

impl Walker<'_> {
    /// Copies the operands of one `phase` to `dest` and waits for all
    /// of it. Every thread walks directories and copies files alike, so
    /// that no core waits on a single walker (the first levels of a tree
    /// hold only directories) and the walk itself runs in parallel. A
    /// thread that cannot be had (under a limit on threads or on address
    /// space) leaves the work to fewer: this one alone if need be.
    fn copy_phase(&self, phase: &[PathBuf], dest: &Path, dest_is_dir: bool) {
        std::thread::scope(|s| {
            // The workers start first and take the operands' tasks as
            // they are queued (the queue counts this loop as a task, so
            // that they wait for it rather than ending). A file operand's
            // group holds its directories open (two descriptors) until it
            // is copied: past two waiting groups per worker (with no
            // other worker, past none), this thread copies the oldest
            // itself, so that a command line of many files needs no more
            // descriptors than a few.
            let queuing = self.work.hold();
            let mut workers = 1;
            for _ in 1..self.ctx.opts.threads {
                if std::thread::Builder::new()
                    .spawn_scoped(s, || self.work_loop())
                    .is_err()
                {
                    break;
                }
                workers += 1;
            }
            let waiting = if workers > 1 { 2 * workers } else { 0 };
            let mut arena = blockio::AlignedBuf::new(0, files::SLOT_ALIGN);
            for src in phase {
                self.operand(src, dest, dest_is_dir);
                self.help_with_files_beyond(waiting, &mut arena);
            }
            drop(arena);
            drop(queuing);
            self.work_loop();
        });
    }

    /// One worker: takes tasks until the walk is done, each worker with its
    /// own arena for file groups.
    fn work_loop(&self) {
        let mut arena = blockio::AlignedBuf::new(0, files::SLOT_ALIGN);
        while let Some(task) = self.work.next() {
            let _running = Running(&self.work);
            match task {
                Task::Dir(d) => self.directory(d, &mut arena),
                Task::Files(g) => self.copy_files(g, &mut arena),
            }
        }
    }

    /// Copies one group of files with the worker's `arena`.
    fn copy_files(&self, g: super::entry::Group, arena: &mut blockio::AlignedBuf) {
        files::copy_group(&self.ctx, g, arena, &|rest| {
            self.work.push(Task::Files(rest))
        })
    }

    /// Called by a worker listing a directory between parts of it: while
    /// more file groups wait than the workers can soon take (two each),
    /// copies them itself. A directory's regular files are queued as
    /// entries holding a `statx` each (some 350 bytes with their names),
    /// so without this a directory of 40,000 files, listed before any of
    /// them is copied, would keep 14 MB of them waiting; with it, what
    /// waits is bounded by the number of workers, not by the directory,
    /// and the workers never run short of groups to take.
    pub(super) fn help_with_files(&self, arena: &mut blockio::AlignedBuf) {
        self.help_with_files_beyond(2 * self.ctx.opts.threads.max(1), arena);
    }

    /// Copies the oldest waiting groups of files itself while more than
    /// `most` wait.
    fn help_with_files_beyond(&self, most: usize, arena: &mut blockio::AlignedBuf) {
        while let Some(g) = self.work.group_beyond(most) {
            let _running = Running(&self.work);
            self.copy_files(g, arena);
        }
    }
}

#[cfg(test)]
mod phase_tests {
    use super::*;

    #[test]
    fn files_share_a_phase_except_with_backups() {
        let ops: Vec<PathBuf> = ["a", "b", "dir", "c"].iter().map(PathBuf::from).collect();
        let is_dir = |p: &PathBuf| p.as_os_str() == "dir";
        let mut opts = options::CopyOptions::default();
        let phases = |opts: &options::CopyOptions| {
            let (mut rest, mut out) = (&ops[..], Vec::new());
            while !rest.is_empty() {
                let n = phase_len(rest, opts, is_dir);
                out.push(n);
                rest = &rest[n..];
            }
            out
        };
        assert_eq!(phases(&opts), [2, 1, 1]);
        opts.backup = options::Backup::Simple;
        assert_eq!(phases(&opts), [1, 1, 1, 1]);
    }
}
