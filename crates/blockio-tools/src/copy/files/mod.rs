//! A worker's share: one group of regular files from one directory, copied
//! with a handful of engine batches.
//!
//! [`copy_group`] is the sequence every group goes through, each step one
//! batch (or one pass of plain system calls) over all of its files:
//! open the sources and create the destinations ([`open`], judging what is
//! in the way in [`destination`]), choose how each file's bytes move and
//! move them (`copy_file_range` and clones here, waves of reads and
//! writes through the arena in [`wave`], streams and unsized files with
//! the plain calls of [`plain`]), then give the copies their length and
//! attributes, fsync and close them ([`finish`]). The state of one file on
//! its way is a [`job::FileCopy`]: each step reads what the earlier ones
//! decided and records a file's first failure there, so a file that
//! failed is left alone by the later steps and reported once, at the end.

mod destination;
mod finish;
mod job;
mod open;
mod plain;
mod wave;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use blockio::{AlignedBuf, Op};
use rustix::fs::FileType;

use super::entry::{Ctx, DirPair, Entry, Group};
use super::options::{Backup, CopyOptions, Reflink, Sparse, Update};
use crate::quote::quote;
use finish::{close_and_report, finish_files, fsync_large};
pub(crate) use job::fstat;
use job::{empty_old, failure, fsync_each, is_sparse, run_batch, Chunk, FileCopy};
use open::open_all;
use plain::{copy_range, copy_to_eof, extents};
use wave::{copy_chunks, go_direct};

pub(crate) use wave::SLOT_ALIGN;

/// Copies a group; files beyond its first wave of bytes (sizes are only
/// known once the files are open) go back to the queue through `requeue`,
/// so that large files are copied by several workers at once.
///
/// With `-b` each file whose name is taken is copied alone (see
/// [`backup_runs`]): its backup is made and its new file created just
/// before its bytes are written, so that at most one name per worker is
/// neither old nor new at any moment, as without `-b`.
pub(crate) fn copy_group(ctx: &Ctx<'_>, g: Group, arena: &mut AlignedBuf, requeue: &dyn Fn(Group)) {
    let opts = ctx.opts;
    let excl = opts.no_clobber || opts.update == Update::None;
    if opts.backup == Backup::None || excl || g.files.len() < 2 {
        return copy_run(ctx, g, arena, requeue);
    }
    for files in backup_runs(&g.dirs, g.files) {
        let dirs = Arc::clone(&g.dirs);
        copy_run(ctx, Group { dirs, files }, arena, requeue);
    }
}

/// `-b`: a group cut, in its order, into runs of files whose names are
/// free (copied together) and single files whose names are taken. Those
/// are backed up (renamed) and made anew as they are opened, empty until
/// they are written: copied one at a time, each is backed up just before
/// its bytes are written.
fn backup_runs(dirs: &DirPair, files: Vec<Entry>) -> Vec<Vec<Entry>> {
    let taken = |e: &Entry| {
        let (dir, name) = dirs.dst_at(&e.dst_name);
        rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    };
    let mut runs: Vec<Vec<Entry>> = Vec::new();
    let mut free = false;
    for e in files {
        let alone = taken(&e);
        match runs.last_mut() {
            Some(run) if free && !alone => run.push(e),
            _ => runs.push(vec![e]),
        }
        free = !alone;
    }
    runs
}

/// Copies one run of a group's files through every step.
fn copy_run(ctx: &Ctx<'_>, g: Group, arena: &mut AlignedBuf, requeue: &dyn Fn(Group)) {
    let Group {
        dirs: pair,
        mut files,
    } = g;
    let dirs = &*pair;
    let Some((mut jobs, rest)) = open_all(ctx, &pair, &mut files) else {
        return;
    };
    if !rest.is_empty() {
        requeue(Group {
            dirs: Arc::clone(&pair),
            files: rest,
        });
    }
    if !ctx.opts.attributes_only {
        let ranged = choose_paths(ctx.opts, &mut jobs);
        let chunks = copy_ranges_and_chunk(ctx, dirs, &mut jobs, &ranged);
        copy_chunks(ctx, dirs, &mut jobs, &chunks, arena);
        copy_unsized(ctx, dirs, &mut jobs);
        copy_grown(ctx, dirs, &mut jobs);
    }
    finish_files(ctx, dirs, &mut jobs);
    if ctx.opts.fsync {
        fsync_large(ctx, dirs, &mut jobs);
    }
    close_and_report(ctx, dirs, jobs);
}

/// How each file's data is copied; returns which go through
/// `copy_file_range`.
///
/// Files of `copy_range_min` bytes or more (not sparse) go through
/// `copy_file_range`: one copy inside the kernel rather than two through
/// our buffers. With `--fsync`, files of `direct_write_min` bytes or more
/// are written with `O_DIRECT` instead (see [`go_direct`]), unless they
/// hold old bytes (see [`FileCopy::old`]: a wave's direct writes go out
/// in one batch, several files at once). The reads of
/// both are started for all of the group's files at once
/// (`POSIX_FADV_WILLNEED`), so a cold group still has many reads in
/// flight. The rest is copied in blocks through the arena.
fn choose_paths(opts: &CopyOptions, jobs: &mut [FileCopy<'_>]) -> Vec<bool> {
    for j in jobs.iter_mut() {
        j.direct = opts.fsync
            && !j.stream
            && !j.old
            && j.e.st.stx_size >= opts.direct_write_min
            && opts.block % SLOT_ALIGN == 0
            && !is_sparse(opts, j.e)
            && opts.sparse != Sparse::Always
            && go_direct(&j.dst);
    }
    let ranged: Vec<bool> = jobs
        .iter()
        .map(|j| {
            j.e.st.stx_size >= opts.copy_range_min
                && !is_sparse(opts, j.e)
                && !j.direct
                && !j.stream
                && opts.sparse != Sparse::Always
                && opts.reflink == Reflink::Auto
        })
        .collect();
    for (j, _) in jobs.iter().zip(&ranged).filter(|(j, &r)| r || j.direct) {
        // Advisory: a failure changes nothing but speed.
        let _ = rustix::fs::fadvise(&j.src, 0, None, rustix::fs::Advice::WillNeed);
    }
    ranged
}

/// Copies the `ranged` files with `copy_file_range`, and cuts every other
/// file's data (only the data extents of a sparse file) into blocks of at
/// most `--block-size` bytes. A ranged file whose filesystems refuse
/// `copy_file_range` is cut into blocks too, or, if it held old bytes
/// (emptied just before), copied to its end at once: no emptied file
/// waits for its bytes while others are written.
fn copy_ranges_and_chunk(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    jobs: &mut [FileCopy<'_>],
    ranged: &[bool],
) -> Vec<Chunk> {
    let opts = ctx.opts;
    let mut chunks = Vec::new();
    for (i, j) in jobs.iter_mut().enumerate() {
        let was_old = j.old;
        if (opts.reflink == Reflink::Always || ranged[i]) && !empty_old(j, ctx.opts, dirs) {
            continue;
        }
        if opts.reflink == Reflink::Always {
            // `--reflink=always`: the whole file shares the source's
            // blocks, or the copy fails, as GNU's: also for a FIFO or a
            // device on either side, which the kernel refuses to clone
            // (`EINVAL`, or `EXDEV` across file systems).
            if let Err(e) = rustix::fs::ioctl_ficlone(&j.dst, &j.src) {
                let what = format!(
                    "failed to clone {} from {}",
                    quote(&dirs.dst_of(&j.e.dst_name)),
                    quote(&dirs.src_of(&j.e.src_name))
                );
                j.failed = Some((what, e.into()));
            } else {
                ctx.progress
                    .bytes
                    .fetch_add(j.e.st.stx_size, Ordering::Relaxed);
            }
            continue;
        }
        if ranged[i] {
            match copy_range(j, fsync_each(opts, j.e), ctx.progress) {
                Ok(true) => continue,
                Ok(false) if was_old => {
                    match copy_to_eof(j, ctx.progress, false, 0) {
                        Ok(end) => j.eof = Some(end),
                        Err((side, e)) => j.failed = Some((failure(dirs, j.e, side), e)),
                    }
                    continue;
                }
                // Not supported between these files: the buffered path.
                Ok(false) => {}
                Err(e) => {
                    let what = format!("error copying to {}", quote(&dirs.dst_of(&j.e.dst_name)));
                    j.failed = Some((what, e));
                    continue;
                }
            }
        }
        if j.stream {
            continue; // copied to the end by `copy_unsized`
        }
        for (start, end) in extents(&j.src, opts, j.e) {
            let mut off = start;
            while off < end {
                let len = (end - off).min(opts.block as u64) as usize;
                chunks.push(Chunk {
                    job: i,
                    offset: off,
                    len,
                });
                off += len as u64;
            }
        }
    }
    chunks
}

/// Reads to the end the files that say they are empty (as those of /proc
/// do): their size tells nothing; and copies those from or to a file that
/// is not a regular one.
fn copy_unsized(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [FileCopy<'_>]) {
    for j in jobs
        .iter_mut()
        .filter(|j| j.failed.is_none() && (j.e.st.stx_size == 0 || j.stream))
    {
        // `--sparse=always` from a pipe or device into a regular file:
        // blocks of zeros become holes there too, as GNU makes them.
        let holes = ctx.opts.sparse == Sparse::Always
            && fstat(&j.dst).is_ok_and(|st| {
                FileType::from_raw_mode(st.stx_mode.into()) == FileType::RegularFile
            });
        if !empty_old(j, ctx.opts, dirs) {
            continue;
        }
        match copy_to_eof(j, ctx.progress, holes, 0) {
            Ok(n) => j.end = n,
            Err((side, e)) => j.failed = Some((failure(dirs, j.e, side), e)),
        }
    }
}

/// Copies on, to their new end, the files that grew while they were
/// copied, as GNU's `cp`, which reads until a read returns nothing, does:
/// one read of a byte at each copied file's stated size, in one batch, says
/// which.
fn copy_grown(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [FileCopy<'_>]) {
    let sized: Vec<usize> = (0..jobs.len())
        .filter(|&i| {
            let j = &jobs[i];
            j.failed.is_none() && !j.stream && j.eof.is_none() && j.e.st.stx_size > 0
        })
        .collect();
    let mut bytes = vec![[0u8; 1]; sized.len()];
    let ops: Vec<Op<'_>> = sized
        .iter()
        .zip(bytes.iter_mut())
        .map(|(&i, b)| Op::read(&jobs[i].src, jobs[i].e.st.stx_size, b))
        .collect();
    let grown: Vec<usize> = run_batch(ctx.engine, ops, sized)
        .filter(|(_, r)| matches!(r, Ok(n) if *n > 0))
        .map(|(i, _)| i)
        .collect();
    for i in grown {
        let j = &mut jobs[i];
        if !empty_old(j, ctx.opts, dirs) {
            continue; // a sparse file none of whose bytes were written
        }
        // A direct destination takes only aligned writes: the rest goes
        // through the page cache.
        if j.direct {
            use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
            let _ = fcntl_getfl(&j.dst).and_then(|f| fcntl_setfl(&j.dst, f - OFlags::DIRECT));
        }
        match copy_to_eof(j, ctx.progress, false, j.e.st.stx_size) {
            // The copy ends where the source did (see `FileCopy::eof`).
            Ok(end) => j.eof = Some(end),
            Err((side, e)) => j.failed = Some((failure(dirs, j.e, side), e)),
        }
    }
}
