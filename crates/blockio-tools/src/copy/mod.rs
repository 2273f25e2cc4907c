//! `blockio cp`: recursive copies on the engine, with GNU `cp -r` semantics.
//!
//! # How the work is spread
//!
//! The tree is walked **breadth-first** by a few threads (the CPUs plus
//! one) that share one queue of tasks: directories to list and groups of
//! files to copy. Listing a directory means reading its names and types,
//! `statx`ing those that are not regular files in one engine batch (on a
//! cold cache each may wait for an inode block: through the ring they wait
//! together), making the subdirectories in one `mkdirat` batch and the
//! symbolic links in one `symlinkat` batch, and queueing its regular files
//! in groups of up to [`CopyOptions::group`] files. Their sizes are known
//! once they are open: a worker keeps the first [`CopyOptions::wave`] bytes
//! of its group (at least one file) and queues the rest again, so that
//! large files are copied by several workers at once.
//!
//! A group is copied with a handful of batches: open all sources (through
//! the ring; their sizes and modes then come from the descriptors), create
//! all destinations, then waves of reads of
//! [`CopyOptions::block`] bytes — many files' blocks in flight at once, one
//! kernel call per wave — and their writes, then fsync (with `--fsync`, for
//! files of 1 MiB or more) and close all, again one batch each. With
//! `--fsync` the rest (small files, directories, links) is made durable by
//! one `syncfs` per destination file system at the end, which measured
//! much faster than an fsync per small file (`docs/benchmarks.md`). Two things are plain system calls from
//! the copying thread, because the ring measured slower for them on ext4:
//! creating a file (`O_CREAT` always goes to io_uring's worker threads) and
//! buffered writes (also punted; the page cache takes them at memory speed).
//! Sparse files are copied extent by extent (`SEEK_DATA`/`SEEK_HOLE`), so
//! their holes stay holes. With `--fsync`, files of
//! [`CopyOptions::direct_write_min`] bytes or more (default 256 MiB) are
//! written with `O_DIRECT` through the ring: a wave of writes in flight
//! from huge-page buffers, the page cache left alone.
//!
//! Several operands are copied in command-line order: each directory
//! operand in a phase of its own, the files between two of them in one,
//! so that where copies land on the same names the later operand's ends
//! last, as with GNU `cp` (`cp -r a/. b/. d/`); a second source copied to
//! a name an earlier one copies to is GNU's "will not overwrite
//! just-created". That is decided from the command line, before copying:
//! unlike GNU, the second is refused even when the first one's copy then
//! fails.
//!
//! Threads take waiting file groups before listing another directory: that
//! bounds the files (and open directory descriptors) waiting in the queue,
//! and a directory's descriptors close when its last group is done.
//!
//! # Semantics
//!
//! As GNU `cp`, option for option ([`CopyOptions`]; the defaults are
//! `cp -r`'s, `-P`: symbolic links are copied as links, also on the
//! command line): regular files, directories, symbolic links and special
//! files; new files and directories get the source's permission bits minus
//! the umask; an existing destination file is overwritten in place (its
//! mode kept), an existing directory is merged into. `preserve` (`-p`,
//! `-a`, `--preserve=LIST`) also copies the exact mode, ownership (when
//! permitted), times, hard links and extended attributes. A directory is
//! never copied into itself, and a file never onto itself (through links
//! or hard links: GNU's `same_file_ok` rule on the command line, the
//! opened destination's inode inside a tree).
//!
//! A destination whose path lies inside the source directory (`cp -r s
//! s/d`, or through a link to `s`) is refused before anything is made;
//! GNU makes it and copies into it until it meets its own copy. Inside a
//! tree, directories are recognised by (device, inode), not by path: a source
//! directory that is one of the copy's own destination directories (the
//! source bind-mounted below the destination, or with `-L` a link to an
//! ancestor of the destination) is "cannot copy a directory, S, into
//! itself, D" and is not entered, and without `-L` a directory met twice
//! (a bind mount of a directory inside itself) is GNU's "will not create
//! hard link ... to directory". Two differences from GNU, both because
//! the copy has no depth limit (GNU's ends at `PATH_MAX`): with `-L`, GNU
//! copies its own copy again until the path is too long, and blockio
//! refuses at once; after "into itself", GNU abandons the rest of that
//! operand (what it had copied by then depends on the order it read the
//! directories in), and blockio skips only that directory. An existing FIFO or device
//! at the destination is written into, never replaced. An error on one
//! file is reported with its path and the copy goes on; a file the copy
//! created that failed part-way is removed, and the error says so (a file
//! that existed before is never removed); with `-b`, the file it replaced
//! is then put back under its name, as GNU does. With
//! [`remove_unfinished_on_signals`], an interrupting signal removes the
//! files the copy created and has not finished before it ends the process.

mod at;
mod attrs;
mod creation_gate;
mod creators;
mod entry;
mod files;
mod tree;
mod unfinished;
mod xattr_conf;

pub use unfinished::remove_unfinished_on_signals;

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which symbolic links among the sources are followed (copied as the
/// file they lead to) rather than copied as links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dereference {
    /// None (`-P`, and the default with `-r`).
    Never,
    /// Those named on the command line (`-H`).
    CommandLine,
    /// All of them, on the command line and, with `recursive`, inside the
    /// trees (`-L`, and the default without `-r`).
    Always,
}

/// What of the source a copy keeps besides its data (`--preserve=LIST`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preserve {
    /// The permission bits (with set-user-ID, set-group-ID and sticky) and
    /// the POSIX ACLs.
    pub mode: bool,
    /// Owner and group (as root; otherwise the group when the copier
    /// belongs to it, and the special bits are then dropped).
    pub ownership: bool,
    /// Access and modification times.
    pub timestamps: bool,
    /// Which names in the copy are one file (hard links).
    pub links: bool,
    /// Extended attributes other than the ACLs (which go with `mode`).
    pub xattr: bool,
    /// `--preserve=xattr` named (GNU's `require_preserve_xattr`): every
    /// failure to copy an extended attribute is reported and fails the
    /// copy. Neither `-a` nor `--preserve=all` sets or clears it.
    pub xattr_required: bool,
    /// `-a` (GNU's `reduce_diagnostics`): failures to copy extended
    /// attributes are silent, unless `xattr_required` or
    /// `CopyOptions::attributes_only`.
    pub xattr_quiet: bool,
}

impl Preserve {
    /// `-p`, `--preserve`: mode, ownership and timestamps.
    pub const P: Preserve = Preserve {
        mode: true,
        ownership: true,
        timestamps: true,
        links: false,
        xattr: false,
        xattr_required: false,
        xattr_quiet: false,
    };
    /// `-a`, `--preserve=all`.
    pub const ALL: Preserve = Preserve {
        mode: true,
        ownership: true,
        timestamps: true,
        links: true,
        xattr: true,
        xattr_required: false,
        xattr_quiet: false,
    };
    /// Whether any attribute is set on the copy after its data.
    pub fn attrs(&self) -> bool {
        self.mode || self.ownership || self.timestamps || self.xattr
    }
}

/// Whether and how an existing destination is kept aside before it is
/// replaced (`-b`, `--backup=CONTROL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backup {
    /// No backups (the default).
    None,
    /// `name` + the suffix (`simple`, `never`).
    Simple,
    /// `name.~N~`, one more than the highest there (`numbered`, `t`).
    Numbered,
    /// Numbered if numbered backups of the name exist, else simple
    /// (`existing`, `nil`; `-b`).
    Existing,
}

/// Where a copy has holes (`--sparse=WHEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sparse {
    /// Where the source has holes (the default): its data extents alone
    /// are copied.
    Auto,
    /// Nowhere: every byte is written.
    Never,
    /// Also wherever the source holds a block of zeros (4 KiB).
    Always,
}

/// Whether copies share the source's blocks (`--reflink[=WHEN]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reflink {
    /// Where the file systems do it on their own (`copy_file_range`
    /// clones on Btrfs and XFS); the default.
    Auto,
    /// Always, with `FICLONE`; a file that cannot be cloned is an error.
    Always,
    /// Never: the data is read and written (no `copy_file_range`).
    Never,
}

/// What is made at the destination for each file that is not a
/// directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// A copy (the default).
    Copy,
    /// A hard link to the source (`-l`).
    Hard,
    /// A symbolic link to the source, named as given (`-s`).
    Symbolic,
}

/// Which existing destinations are replaced (`--update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Every one (the default).
    All,
    /// None: they are skipped (`--update=none`, like `-n`).
    None,
    /// Those older than their source (`-u`, `--update=older`).
    Older,
}

/// How `copy` works.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Copy directories and what they hold (`-r`); without it a directory
    /// operand is reported ("omitting directory") and left out.
    pub recursive: bool,
    /// Which symbolic links are followed (default: `Never`, as `cp -r`).
    pub dereference: Dereference,
    /// Read FIFOs and devices and copy what they give into regular files,
    /// instead of making new FIFOs and device nodes: always without
    /// `recursive`, as cp does, and with it for `--copy-contents`.
    pub copy_contents: bool,
    /// The destination is the copy's name even when it is a directory
    /// (`-T`): `cp -rT s d` merges `s` into `d`, and a file is never
    /// copied into `d`.
    pub no_target_directory: bool,
    /// Directories on other file systems than their operand's (mount
    /// points) are made but not walked (`-x`).
    pub one_file_system: bool,
    /// Copies, or hard or symbolic links to the sources (`-l`, `-s`);
    /// directories are made either way.
    pub link: LinkMode,
    /// Only the attributes are copied (`--attributes-only`): a new file is
    /// empty, an existing one keeps its data.
    pub attributes_only: bool,
    /// Where copies have holes (`--sparse`).
    pub sparse: Sparse,
    /// Whether copies share blocks with their sources (`--reflink`).
    pub reflink: Reflink,
    /// Each source is copied under the destination directory by its whole
    /// path as given, the directories on the way made (`--parents`).
    pub parents: bool,
    /// Backups of replaced destinations (`-b`).
    pub backup: Backup,
    /// The suffix of simple backups (`-S`; default `~`).
    pub suffix: std::ffi::OsString,
    /// What the copy keeps besides the data (`-p`, `-a`, `--preserve`).
    pub preserve: Preserve,
    /// New files and directories get the default permission bits (0666
    /// and 0777) minus the umask, not the source's (`--no-preserve=mode`).
    pub default_mode: bool,
    /// Do not overwrite existing files (`-n`).
    pub no_clobber: bool,
    /// Which existing destinations are replaced (`-u`).
    pub update: Update,
    /// Asks before replacing an existing destination (`-i`): called with
    /// the question (`overwrite 'x'? `), it answers whether to go on.
    /// Calls from several threads are the callee's to serialize.
    pub ask: Option<fn(&str) -> bool>,
    /// An existing destination file that cannot be opened for writing is
    /// removed and created anew (`-f`).
    pub force: bool,
    /// An existing destination file is removed before the copy is made
    /// (`--remove-destination`), rather than written into.
    pub remove_destination: bool,
    /// Print `'src' -> 'dst'` on standard output for each entry copied,
    /// and `removed 'dst'` for each destination removed (`-v`).
    pub verbose: bool,
    /// Make the copy durable: files of 1 MiB or more are fsynced each (a
    /// failure names the file), then one `syncfs` per destination file
    /// system makes the rest durable (a failure there names the file
    /// system).
    pub fsync: bool,
    /// Bytes per read and write (default 1 MiB).
    pub block: usize,
    /// Bytes in flight per worker: one wave of reads, then its writes
    /// (default 16 MiB).
    pub wave: usize,
    /// Files per group handed to a worker (default 32).
    pub group: usize,
    /// Files of at least this many bytes are copied with `copy_file_range`
    /// (default 256 KiB; `u64::MAX`: never).
    pub copy_range_min: u64,
    /// With `fsync`, files of at least this many bytes are written with
    /// `O_DIRECT` from the worker's buffers (default 256 MiB; `u64::MAX`:
    /// never). The copy then leaves the page cache as it found it and uses
    /// less CPU. Its speed hangs on the buffers, which are huge pages
    /// (see `blockio::AlignedBuf`): each 1 MiB write is one device request
    /// instead of the two that 256 small pages need on a virtio disk. On
    /// the reference machine, durable copies of two 1 GiB files took less
    /// time this way than through the page cache, and smaller files tied
    /// or lost (`docs/benchmarks.md`, "Durable copies of large files with
    /// `O_DIRECT`"), hence the 256 MiB threshold.
    pub direct_write_min: u64,
    /// Threads (default: the CPUs plus one). Each walks directories and
    /// copies files alike.
    pub threads: usize,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            recursive: true,
            dereference: Dereference::Never,
            copy_contents: false,
            no_target_directory: false,
            one_file_system: false,
            link: LinkMode::Copy,
            attributes_only: false,
            sparse: Sparse::Auto,
            reflink: Reflink::Auto,
            parents: false,
            backup: Backup::None,
            suffix: "~".into(),
            preserve: Preserve::default(),
            default_mode: false,
            no_clobber: false,
            update: Update::All,
            ask: None,
            force: false,
            remove_destination: false,
            verbose: false,
            fsync: false,
            block: 1 << 20,
            wave: 16 << 20,
            group: 32,
            copy_range_min: 256 << 10,
            direct_write_min: 256 << 20,
            // One more than the CPUs: a thread waiting on a lock or the
            // disk leaves its core to another (measured faster on many
            // small files; docs/benchmarks.md).
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()) + 1,
        }
    }
}

/// Counters that a progress display may read while the copy runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Regular files copied.
    pub files: AtomicU64,
    /// Bytes of file data copied.
    pub bytes: AtomicU64,
    /// Directories made or merged into.
    pub dirs: AtomicU64,
    /// Errors reported.
    pub errors: AtomicU64,
}

/// Something that went wrong with one path; the copy went on.
#[derive(Debug)]
pub struct CopyError {
    /// What was being done, in cp's words ("cannot open '…' for reading").
    pub what: String,
    /// Why, when the system said so.
    pub error: Option<io::Error>,
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            // The system's message without our wrappers' path prefixes.
            Some(e) => write!(f, "{}: {}", self.what, os_message(e)),
            None => f.write_str(&self.what),
        }
    }
}

use crate::reason::reason as os_message;

/// What a finished copy did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CopyReport {
    /// Regular files copied.
    pub files: u64,
    /// Directories made or merged into.
    pub dirs: u64,
    /// Symbolic links made.
    pub symlinks: u64,
    /// FIFOs, sockets and device nodes made.
    pub specials: u64,
    /// Existing destinations left alone (`-n`).
    pub skipped: u64,
    /// Bytes of file data copied.
    pub bytes: u64,
    /// Errors reported (the exit status is 1 when this is not 0).
    pub errors: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The backend that did the I/O: `io_uring`, or `thread pool` where
    /// io_uring is unavailable.
    pub backend: String,
    /// Why the thread pool was used, when it was.
    pub fallback_reason: Option<String>,
    /// The first failure of this copy to write a `-v` line to standard
    /// output, as an errno: the copy went on, and a command reports it
    /// (and fails) at the end, as GNU `cp` does.
    #[serde(skip)]
    pub output_error: Option<i32>,
}

/// A problem with the command line as a whole (nothing was copied).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Copies `sources` to `dest` as `cp -r` would, calling `on_error` for each
/// path that fails (from any thread) and going on with the rest.
///
/// Fails before copying anything for a usage error (several sources and a
/// destination that is not a directory, no source) or when no engine can
/// be built.
pub fn copy(
    sources: &[PathBuf],
    dest: &Path,
    opts: &CopyOptions,
    progress: &Progress,
    on_error: &(dyn Fn(&CopyError) + Sync),
) -> io::Result<CopyReport> {
    // Only this copy's `-v` lines count in its report.
    OUTPUT_ERROR.store(0, Ordering::Relaxed);
    if sources.is_empty() {
        return Err(usage(format!(
            "missing source operand before '{}'",
            dest.display()
        )));
    }
    if opts.block == 0 || opts.wave < opts.block || opts.group == 0 || opts.threads == 0 {
        return Err(usage(format!(
            "bad options: block {} wave {} group {} threads {} (all above 0, wave at least a block)",
            opts.block, opts.wave, opts.group, opts.threads
        )));
    }
    let itself = backup_of_itself(sources, dest, opts);
    let (dest, opts) = match &itself {
        Some((backup, opts)) => (backup.as_path(), opts),
        None => (dest, opts),
    };
    let dest_meta = std::fs::metadata(dest);
    let dest_is_dir = !opts.no_target_directory && dest_meta.as_ref().is_ok_and(|m| m.is_dir());
    if sources.len() > 1 && !dest_is_dir {
        return Err(usage(match dest_meta {
            Err(e) => format!("target {}: {}", quote(dest), os_message(&e)),
            Ok(_) => format!("target {}: Not a directory", quote(dest)),
        }));
    }
    // A destination that cannot be looked at for any reason but its
    // absence (a directory on the way the copier may not search, a loop of
    // links, a name too long): GNU's "cannot stat", and nothing is copied.
    // A last name that is itself a link in a loop is judged per source, as
    // GNU's `cp` looks at it through the link or not by what is copied
    // onto it.
    if let Err(e) = &dest_meta {
        let a_link_in_a_loop =
            || e.raw_os_error() == Some(libc::ELOOP) && std::fs::symlink_metadata(dest).is_ok();
        if e.kind() != io::ErrorKind::NotFound && !a_link_in_a_loop() {
            // `-f` takes a loop for a link in the way and tries to remove
            // it: GNU's words are then of that.
            let verb = if e.raw_os_error() == Some(libc::ELOOP)
                && opts.force
                && !opts.remove_destination
            {
                "cannot remove"
            } else {
                "cannot stat"
            };
            let what = format!("{verb} {}", quote(dest));
            let err = e.raw_os_error().map(io::Error::from_raw_os_error);
            Errors {
                progress,
                sink: on_error,
            }
            .report(what, err);
            return Ok(CopyReport {
                errors: progress.errors.load(Ordering::Relaxed),
                ..CopyReport::default()
            });
        }
    }
    raise_fd_limit();
    let fitted = fit_to_descriptors(opts, descriptor_limit());
    let opts = &fitted;
    let started = std::time::Instant::now();
    // The thread-pool backend's workers scale with the copy's own threads
    // (16 each, at most 64), so a copy whose threads were cut to fit an
    // address-space limit (`ulimit -v`) does not start 64 stacks anyway.
    // Under such a limit, one per copy thread beyond the first, which runs
    // its batches itself: every worker's stack takes 2 MiB of address
    // space, and a copy fitted to one thread needs that room for its
    // listings. A worker that cannot be started leaves the batches to the
    // calling thread rather than failing the copy. Under a low limit on
    // descriptors (below `DESCRIPTORS_BESIDES_FILES`) the same: a pool
    // thread starting up opens a file for a moment (the C library's
    // allocator reads /sys/devices/system/cpu/online on a thread's first
    // allocation), and sixteen of them starting at once took the
    // descriptors a file being copied needed.
    let pool_threads =
        crate::room::pool_threads(opts.threads, address_space_limited() || few_descriptors());
    let backend = backend_for_this_process()?;
    let engine = blockio::Engine::builder()
        .backend(backend)
        .inline_if_no_threads(true)
        .no_pool_threads(pool_threads == 0)
        .queue_depth(256)
        .fallback_threads(pool_threads.max(1))
        .build()?;
    let mut report = tree::run(
        &engine,
        &tree::Request {
            sources,
            dest,
            dest_is_dir,
            opts,
            progress,
            on_error,
        },
    );
    report.seconds = started.elapsed().as_secs_f64();
    report.errors = progress.errors.load(Ordering::Relaxed);
    report.backend = engine.backend().to_string();
    report.fallback_reason = engine.fallback_reason().map(str::to_string);
    report.output_error = match OUTPUT_ERROR.load(Ordering::Relaxed) {
        0 => None,
        code => Some(code),
    };
    Ok(report)
}

/// The backend to copy on: the default, unless descriptors are short
/// (below [`DESCRIPTORS_BESIDES_FILES`]) or no thread can be started
/// (`ulimit -u` reached). io_uring then cannot start the workers that run
/// what it does not do inline, and cancels those operations, so the
/// thread-pool backend runs every batch on the calling thread; an error
/// where the user requires io_uring ([`blockio::BACKEND_ENV`]).
fn backend_for_this_process() -> io::Result<blockio::BackendChoice> {
    // Under a low limit on descriptors the ring's own descriptor is one
    // the files in flight need: the thread-pool backend takes none.
    if few_descriptors() && !io_uring_required() {
        return Ok(blockio::BackendChoice::ThreadPool);
    }
    if can_start_a_thread() {
        return Ok(blockio::BackendChoice::Auto);
    }
    if io_uring_required() {
        let why = if address_space_limited() {
            "the limit on address space, ulimit -v, leaves no room for a thread's stack"
        } else {
            "the limit on processes, ulimit -u, is reached"
        };
        return Err(io::Error::other(format!(
            "{}=uring: io_uring cannot start its worker threads here ({why}), and would cancel \
             what it cannot do inline; unset it to copy on the thread-pool backend",
            blockio::BACKEND_ENV
        )));
    }
    Ok(blockio::BackendChoice::ThreadPool)
}

/// Whether this process may start a thread now (not at its limit on
/// processes, `RLIMIT_NPROC`). The probe's stack is small, so that under
/// a limit on address space (`ulimit -v`) it asks no more than the copy
/// will anyway.
fn can_start_a_thread() -> bool {
    std::thread::Builder::new()
        .stack_size(32 << 10)
        .spawn(|| {})
        .is_ok_and(|t| t.join().is_ok())
}

/// Whether the environment requires io_uring ([`blockio::BACKEND_ENV`]).
fn io_uring_required() -> bool {
    std::env::var(blockio::BACKEND_ENV)
        .is_ok_and(|v| matches!(v.as_str(), "uring" | "io_uring" | "io-uring"))
}

/// Whether the limit on open descriptors is below
/// [`DESCRIPTORS_BESIDES_FILES`]: the copy then takes no descriptor it can
/// do without (no ring, no pool threads).
pub(crate) fn few_descriptors() -> bool {
    descriptor_limit().is_some_and(|n| n < DESCRIPTORS_BESIDES_FILES)
}

/// Whether the descriptors free under the limit are too few for a
/// directory pair held beside a source and its copy (four): the copy then
/// names files by their paths and holds no directory while it copies one,
/// as GNU's `cp` does, which needs two beyond those open at the start.
pub(crate) fn names_by_path() -> bool {
    let open = std::fs::read_dir("/proc/self/fd")
        // (the listing's own descriptor is one of them)
        .map_or(3, |d| d.count().saturating_sub(1) as u64);
    descriptor_limit().is_some_and(|n| n.saturating_sub(open) < 4)
}

/// The soft limit on open descriptors (`RLIMIT_NOFILE`), `None` for none.
fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Descriptors a copy keeps besides its files in flight: the standard
/// streams, the engine's, directories being listed and the directories of
/// the groups waiting (two each, source and destination), with room.
const DESCRIPTORS_BESIDES_FILES: u64 = 24;

/// `opts` with fewer threads and smaller groups of files where `limit`
/// (`RLIMIT_NOFILE`) leaves too few descriptors for the files they keep
/// open (two a file, source and copy, a group's at once on each thread):
/// under `ulimit -n 128` a copy runs one thread of 32-file groups rather
/// than failing files with `EMFILE`. The same copy, more slowly.
fn fit_to_descriptors(opts: &CopyOptions, limit: Option<u64>) -> CopyOptions {
    let mut out = opts.clone();
    let Some(limit) = limit else { return out };
    let room = limit.saturating_sub(DESCRIPTORS_BESIDES_FILES).max(2);
    // Per thread: its group's files, twice, and its directories.
    let per_thread = |group: usize| 2 * group as u64 + 4;
    let threads = (room / per_thread(out.group)).max(1) as usize;
    out.threads = out.threads.min(threads);
    if per_thread(out.group) * out.threads as u64 > room {
        let for_files = room.saturating_sub(4 * out.threads as u64);
        out.group = (for_files / (2 * out.threads as u64)).max(1) as usize;
    }
    out
}

/// Whether the process's address space is limited (`ulimit -v`,
/// `RLIMIT_AS`).
fn address_space_limited() -> bool {
    rustix::process::getrlimit(rustix::process::Resource::As)
        .current
        .is_some()
}

fn usage(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, UsageError(msg))
}

/// Lifts the soft limit on open descriptors to the hard limit: the budget
/// of files in flight is well under it either way, but a tree with long
/// chains of directories keeps a few open per level.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    // `None` is unlimited; the soft limit goes up to 2^20 at most.
    let want = lim.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if lim.current.is_some_and(|cur| cur < want) {
        lim.current = Some(want);
        // Best effort: the copy runs within the old limit too.
        let _ = setrlimit(Resource::Nofile, lim);
    }
}

pub(crate) use crate::quote::quote;

/// With `verbose`, one line on standard output (whole, under the lock, so
/// that lines from several threads never mix).
pub(crate) fn say(opts: &CopyOptions, line: std::fmt::Arguments<'_>) {
    if opts.verbose {
        use std::os::fd::AsFd;
        let out = std::io::stdout().lock();
        if let Err(e) = write_all_to(out.as_fd(), format!("{line}\n").as_bytes()) {
            // The copy goes on; the caller reports it at the end (see
            // `CopyReport::output_error`), as GNU's "write error".
            let code = blockio::errno(&e).unwrap_or(libc::EIO);
            let _ = OUTPUT_ERROR.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Writes all of `buf` to `fd` itself: `std::io::stdout` takes a closed
/// standard output (`EBADF`) for success, and GNU reports it.
fn write_all_to(fd: std::os::fd::BorrowedFd<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The first error of writing `-v`'s lines to standard output, as an
/// errno; 0 for none. Cleared when a copy starts, read into its report
/// when it ends ([`CopyReport::output_error`]). Standard output is one per
/// process, and so is this.
static OUTPUT_ERROR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// With `verbose`: `'src' -> 'dst'`, as `cp -v` says it.
pub(crate) fn say_copied(opts: &CopyOptions, src: &Path, dst: &Path, backup: Option<&Path>) {
    match backup {
        Some(b) => say(
            opts,
            format_args!("{} -> {} (backup: {})", quote(src), quote(dst), quote(b)),
        ),
        None => say(opts, format_args!("{} -> {}", quote(src), quote(dst))),
    }
}

/// `-b`: moves `name` in `dir` aside under its backup name, which is
/// returned (`None`: nothing there to keep, or a directory).
pub(crate) fn make_backup(
    opts: &CopyOptions,
    dir: &std::fs::File,
    dir_path: &Path,
    name: &std::ffi::CStr,
) -> io::Result<Option<PathBuf>> {
    let Some(backup) = backup_name(opts, dir, name)? else {
        return Ok(None);
    };
    rustix::fs::renameat(dir, name, dir, cname(&backup))?;
    Ok(Some(dir_path.join(backup)))
}

/// The last component of an entry's name, as [`at::last_component`]
/// finds it.
fn base_name(name: &std::ffi::CStr) -> &[u8] {
    at::last_component(Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()))).as_bytes()
}

/// Whether keeping `dst_name` in `dst_dir` aside (`-b`) would replace the
/// source, whose name is `src_name` and whose (device, inode) is `src`:
/// `cp -b a~ a`, where the backup of `a` is `a~`. GNU `cp` refuses that
/// copy ("backing up 'a' might destroy source"), by the same test: the
/// source's name is the destination's with the backup suffix, and that
/// name in the destination's directory is the source.
pub(crate) fn backup_is_source(
    opts: &CopyOptions,
    src_name: &std::ffi::CStr,
    src: (u64, u64),
    dst_dir: &std::fs::File,
    dst_name: &std::ffi::CStr,
) -> bool {
    let (src_base, dst_base) = (base_name(src_name), base_name(dst_name));
    let suffix = opts.suffix.as_bytes();
    // A numbered backup takes a new name, never the source's.
    if opts.backup == Backup::Numbered || src_base.strip_suffix(suffix) != Some(dst_base) {
        return false;
    }
    let mut backup = dst_name.to_bytes().to_vec();
    backup.extend_from_slice(suffix);
    let backup = cname(std::ffi::OsStr::from_bytes(&backup));
    rustix::fs::statat(dst_dir, &backup, rustix::fs::AtFlags::empty())
        .is_ok_and(|st| (st.st_dev, st.st_ino) == src)
}

/// The name `name` in `dir` is kept aside under by `-b` (`None`: no backup
/// is made, for no `-b`, no such name, or a directory).
fn backup_name(
    opts: &CopyOptions,
    dir: &std::fs::File,
    name: &std::ffi::CStr,
) -> io::Result<Option<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStringExt;
    let st = match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        return Ok(None);
    }
    let base = name.to_bytes();
    let highest = || -> io::Result<Option<Vec<u8>>> {
        let mut prefix = base.to_vec();
        prefix.extend_from_slice(b".~");
        let listing = at::list_again(dir)?;
        Ok(listing
            .names()
            .filter_map(|n| {
                let num = n.to_bytes().strip_prefix(&prefix[..])?.strip_suffix(b"~")?;
                backup_number(num).then(|| num.to_vec())
            })
            // Decimal numbers of any length: the longest, then the
            // greatest of those.
            .max_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b))))
    };
    let numbered = match opts.backup {
        Backup::None => return Ok(None),
        Backup::Simple => None,
        Backup::Numbered => Some(highest()?.map_or_else(|| b"1".to_vec(), |h| increment(&h))),
        Backup::Existing => highest()?.map(|h| increment(&h)),
    };
    let mut backup = base.to_vec();
    match numbered {
        Some(n) => {
            backup.extend_from_slice(b".~");
            backup.extend_from_slice(&n);
            backup.push(b'~');
        }
        None => backup.extend_from_slice(opts.suffix.as_bytes()),
    }
    Ok(Some(std::ffi::OsString::from_vec(backup)))
}

/// Whether `num`, from a name `F.~num~`, is a backup's number as GNU's
/// `cp` reads one: decimal digits, the first not 0 (`F.~0~` and
/// `F.~010~` are not numbered backups).
fn backup_number(num: &[u8]) -> bool {
    matches!(num.first(), Some(b'1'..=b'9')) && num.iter().all(u8::is_ascii_digit)
}

/// The decimal number `num` plus one, at any length (never wrapping round
/// to an existing backup's number).
fn increment(num: &[u8]) -> Vec<u8> {
    let mut out = num.to_vec();
    for d in out.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return out;
        }
    }
    out.insert(0, b'1');
    out
}

/// As GNU `cp`: `cp --force --backup F F`, one existing regular file named
/// by the same string on both sides, copies `F` to its backup name (a
/// plain copy, with no backup of its own), where the same-file rule
/// would refuse.
fn backup_of_itself(
    sources: &[PathBuf],
    dest: &Path,
    opts: &CopyOptions,
) -> Option<(PathBuf, CopyOptions)> {
    let [src] = sources else { return None };
    if !opts.force || opts.backup == Backup::None || src.as_os_str() != dest.as_os_str() {
        return None;
    }
    if !std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::File::open(parent).ok()?;
    let name = cname(dest.file_name()?);
    let backup = backup_name(opts, &dir, &name).ok()??;
    let opts = CopyOptions {
        backup: Backup::None,
        ..opts.clone()
    };
    Some((dest.with_file_name(backup), opts))
}

/// A modification time: seconds and nanoseconds.
pub(crate) fn mtime(st: &libc::statx) -> (i64, u32) {
    (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec)
}

/// Whether an existing destination whose modification time is `dst` is
/// kept by `update` (`-u`: not older than the source's, `src`), or by the
/// user's answer (`-i`).
pub(crate) fn keep_existing(
    opts: &CopyOptions,
    src: (i64, u32),
    dst: (i64, u32),
    path: &Path,
) -> bool {
    match opts.update {
        Update::None => return true,
        Update::Older if dst >= src => return true,
        _ => {}
    }
    opts.ask
        .is_some_and(|ask| !ask(&format!("overwrite {}? ", quote(path))))
}

/// `-i` on a destination the copier may not write: as [`keep_existing`],
/// with GNU's question that names its mode (`-f` will replace it, without
/// `-f` the copy tries to write it anyway).
pub(crate) fn keep_unwritable(
    opts: &CopyOptions,
    src: (i64, u32),
    dst: (i64, u32),
    mode: u32,
    path: &Path,
) -> bool {
    match opts.update {
        Update::None => return true,
        Update::Older if dst >= src => return true,
        _ => {}
    }
    let Some(ask) = opts.ask else {
        return false;
    };
    let (mode, perms) = (mode & 0o7777, perms_string(mode));
    let question = if opts.force {
        format!(
            "replace {}, overriding mode {mode:04o} ({perms})? ",
            quote(path)
        )
    } else {
        format!(
            "unwritable {} (mode {mode:04o}, {perms}); try anyway? ",
            quote(path)
        )
    };
    !ask(&question)
}

/// The nine permission letters of `ls -l` for `mode` (`rwxr-xr-x`), with
/// the set-ID and sticky bits as `s`/`S` and `t`/`T`.
fn perms_string(mode: u32) -> String {
    let mut out = String::with_capacity(9);
    for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    out
}

/// A destination in the way that could not be removed (`-f`,
/// `--remove-destination`) or kept aside (`-b`): carried inside an
/// `io::Error` so that the message names that step, as GNU's do
/// ("cannot remove 'g'"), not the creation that never came.
#[derive(Debug)]
pub(crate) struct InTheWay {
    /// `"cannot remove"` or `"cannot backup"`.
    pub what: &'static str,
    /// The errno of the failed step.
    pub errno: i32,
}

impl std::fmt::Display for InTheWay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            self.what,
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for InTheWay {}

/// `err`, the failure of `what` on a destination in the way (see
/// [`InTheWay`]).
pub(crate) fn in_the_way(what: &'static str, err: impl Into<io::Error>) -> io::Error {
    let err: io::Error = err.into();
    match blockio::errno(&err) {
        Some(errno) => io::Error::other(InTheWay { what, errno }),
        None => err,
    }
}

/// A name for the `*at` calls.
pub(crate) fn cname(name: &std::ffi::OsStr) -> CString {
    // Names from the file system or from argv never hold a NUL byte.
    CString::new(name.as_bytes()).expect("path names hold no NUL byte")
}

/// Reports one failure.
pub(crate) struct Errors<'a> {
    progress: &'a Progress,
    sink: &'a (dyn Fn(&CopyError) + Sync),
}

impl Errors<'_> {
    pub(crate) fn report(&self, what: String, error: Option<io::Error>) {
        self.progress.errors.fetch_add(1, Ordering::Relaxed);
        (self.sink)(&CopyError { what, error });
    }

    /// A message that is not an error (the exit status stays 0).
    pub(crate) fn warn(&self, what: String, error: Option<io::Error>) {
        (self.sink)(&CopyError { what, error });
    }
}

#[cfg(test)]
mod output_error_tests {
    use super::*;

    /// A stdout error of an earlier copy in the same process is not
    /// reported by the next one.
    #[test]
    fn a_copy_reports_only_its_own_output_error() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a");
        std::fs::write(&src, b"data").unwrap();
        OUTPUT_ERROR.store(libc::EPIPE, Ordering::Relaxed);
        let report = copy(
            &[src],
            &dir.path().join("b"),
            &CopyOptions::default(),
            &Progress::default(),
            &|e| panic!("{e}"),
        )
        .unwrap();
        assert_eq!(report.output_error, None);
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"data");
    }
}
