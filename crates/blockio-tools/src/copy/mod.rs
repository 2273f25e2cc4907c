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
mod backup;
mod creation_gate;
mod creators;
mod entry;
mod files;
mod in_the_way;
mod limits;
mod messages;
mod options;
mod outcome;
mod overwrite;
mod tree;
mod unfinished;
mod xattr_conf;

pub use options::{Backup, CopyOptions, Dereference, LinkMode, Preserve, Reflink, Sparse, Update};
pub use outcome::{CopyError, CopyReport, Progress, UsageError};
pub use unfinished::remove_unfinished_on_signals;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rustix::io::Errno;

use crate::quote::quote;
use crate::reason::reason as os_message;
use backup::backup_of_itself;
use limits::{
    address_space_limited, backend_for_this_process, descriptor_limit, few_descriptors,
    fit_to_descriptors, raise_fd_limit,
};
use messages::OUTPUT_ERROR;
use outcome::{usage, Errors};

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
    check_usage(sources, dest, opts)?;
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
    if let Err(e) = &dest_meta {
        if let Some(what) = unusable_destination(dest, e, opts) {
            let err = e.raw_os_error().map(io::Error::from_raw_os_error);
            let errors = Errors {
                progress,
                sink: on_error,
            };
            errors.report(what, err);
            return Ok(CopyReport {
                errors: progress.errors.load(Ordering::Relaxed),
                ..CopyReport::default()
            });
        }
    }
    raise_fd_limit();
    let opts = &fit_to_descriptors(opts, descriptor_limit());
    let started = std::time::Instant::now();
    let engine = engine_for(opts)?;
    let request = tree::Request {
        sources,
        dest,
        dest_is_dir,
        opts,
        progress,
        on_error,
    };
    let mut report = tree::run(&engine, &request);
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

/// A usage error for no source, or for options no copy can run with.
fn check_usage(sources: &[PathBuf], dest: &Path, opts: &CopyOptions) -> io::Result<()> {
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
    Ok(())
}

/// GNU's message for a destination that cannot be looked at for any
/// reason but its absence (a directory on the way the copier may not
/// search, a loop of links, a name too long): "cannot stat", and nothing
/// is copied. `None` when the copy goes on: the destination is absent,
/// or its last name is itself a link in a loop, judged per source, as
/// GNU's `cp` looks at it through the link or not by what is copied onto
/// it.
fn unusable_destination(dest: &Path, e: &io::Error, opts: &CopyOptions) -> Option<String> {
    let is_loop = Errno::from_io_error(e) == Some(Errno::LOOP);
    let a_link_in_a_loop = || is_loop && std::fs::symlink_metadata(dest).is_ok();
    if e.kind() == io::ErrorKind::NotFound || a_link_in_a_loop() {
        return None;
    }
    // `-f` takes a loop for a link in the way and tries to remove it:
    // GNU's words are then of that.
    let verb = if is_loop && opts.force && !opts.remove_destination {
        "cannot remove"
    } else {
        "cannot stat"
    };
    Some(format!("{verb} {}", quote(dest)))
}

/// The engine a copy with `opts` runs on.
///
/// The thread-pool backend's workers scale with the copy's own threads
/// (16 each, at most 64), so a copy whose threads were cut to fit an
/// address-space limit (`ulimit -v`) does not start 64 stacks anyway.
/// Under such a limit, one per copy thread beyond the first, which runs
/// its batches itself: every worker's stack takes 2 MiB of address
/// space, and a copy fitted to one thread needs that room for its
/// listings. A worker that cannot be started leaves the batches to the
/// calling thread rather than failing the copy. Under a low limit on
/// descriptors (below `DESCRIPTORS_BESIDES_FILES`) the same: a pool
/// thread starting up opens a file for a moment (the C library's
/// allocator reads /sys/devices/system/cpu/online on a thread's first
/// allocation), and sixteen of them starting at once took the
/// descriptors a file being copied needed.
fn engine_for(opts: &CopyOptions) -> io::Result<blockio::Engine> {
    let pool_threads =
        crate::room::pool_threads(opts.threads, address_space_limited() || few_descriptors());
    let backend = backend_for_this_process()?;
    blockio::Engine::builder()
        .backend(backend)
        .inline_if_no_threads(true)
        .no_pool_threads(pool_threads == 0)
        .queue_depth(256)
        .fallback_threads(pool_threads.max(1))
        .build()
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
