//! A worker's share: one group of regular files from one directory, copied
//! with a handful of engine batches.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use blockio::{AlignedBuf, Engine, Op, OpenRequest, PathAt};

use super::at;
use super::attrs::{set_attrs_at, Node};
use super::entry::{statx_id, Ctx, DirPair, Entry, Group};
use super::{quote, CopyOptions, Progress};

/// With `--fsync`, files of at least this many bytes have their write-back
/// started as their blocks are written and are fsynced each: a large copy
/// streams to the disk, and a failure names its file. Smaller files, like
/// the directories, are made durable by one `syncfs` per destination file
/// system at the end (`Walker::finish_dirs`), much faster on many small
/// files than an fsync per file (`docs/benchmarks.md`). On
/// ext4 without a journal each such fsync writes the file's data, its
/// inode's table block and its parent directory, then flushes the disk's
/// cache; the syncfs writes them all merged, with one flush.
pub(crate) const FSYNC_EACH_MIN: u64 = 1 << 20;

/// Whether FIFOs and devices are read like files (see
/// `CopyOptions::copy_contents`).
fn as_regular(opts: &CopyOptions) -> bool {
    !opts.recursive || opts.copy_contents
}

/// Whether `e` is made durable by an fsync of its own (with `--fsync`).
fn fsync_each(opts: &CopyOptions, e: &Entry) -> bool {
    opts.fsync && e.st.stx_size >= FSYNC_EACH_MIN
}

/// One file of the group on its way.
struct Job<'g> {
    e: &'g Entry,
    src: OwnedFd,
    dst: OwnedFd,
    /// `dst` was switched to `O_DIRECT` (see [`go_direct`]).
    direct: bool,
    /// This copy created `dst`: only then is it removed if the copy fails.
    created: bool,
    /// `-b`: the name the file that was there is kept under, in the same
    /// directory; put back in place if the copy fails.
    backup: Option<std::ffi::CString>,
    /// `src` or `dst` is not a regular file (a FIFO or device written
    /// into, a FIFO read with `--copy-contents`): copied with plain reads
    /// and writes to the end, never resized, ranged or removed.
    stream: bool,
    /// The end of the data written so far (a direct copy's last block is
    /// written whole, then the file is cut back to this).
    end: u64,
    /// Where a read met the end of the file before the size `statx` gave
    /// (a file that shrank, or one of /proc or /sys whose size is a guess):
    /// the copy ends there, never padded to the stated size.
    eof: Option<u64>,
    /// The first failure: what was being done, and why.
    failed: Option<(String, io::Error)>,
}

/// A range of one file to copy through its piece of the arena.
#[derive(Clone, Copy)]
struct Chunk {
    job: usize,
    offset: u64,
    len: usize,
}

/// Copies a group; files beyond its first wave of bytes (sizes are only
/// known once the files are open) go back to the queue through `requeue`,
/// so that large files are copied by several workers at once.
pub(crate) fn copy_group(ctx: &Ctx<'_>, g: Group, arena: &mut AlignedBuf, requeue: &dyn Fn(Group)) {
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
/// are written with `O_DIRECT` instead (see [`go_direct`]). The reads of
/// both are started for all of the group's files at once
/// (`POSIX_FADV_WILLNEED`), so a cold group still has many reads in
/// flight. The rest is copied in blocks through the arena.
fn choose_paths(opts: &CopyOptions, jobs: &mut [Job<'_>]) -> Vec<bool> {
    for j in jobs.iter_mut() {
        j.direct = opts.fsync
            && !j.stream
            && j.e.st.stx_size >= opts.direct_write_min
            && opts.block % SLOT_ALIGN == 0
            && !is_sparse(opts, j.e)
            && opts.sparse != super::Sparse::Always
            && go_direct(&j.dst);
    }
    let ranged: Vec<bool> = jobs
        .iter()
        .map(|j| {
            j.e.st.stx_size >= opts.copy_range_min
                && !is_sparse(opts, j.e)
                && !j.direct
                && !j.stream
                && opts.sparse != super::Sparse::Always
                && opts.reflink == super::Reflink::Auto
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
/// `copy_file_range` is cut into blocks too.
fn copy_ranges_and_chunk(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    jobs: &mut [Job<'_>],
    ranged: &[bool],
) -> Vec<Chunk> {
    let opts = ctx.opts;
    let mut chunks = Vec::new();
    for (i, j) in jobs.iter_mut().enumerate() {
        if opts.reflink == super::Reflink::Always {
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

/// Copies `chunks` in waves of reads then writes, of at most `--wave`
/// bytes each, the chunks packed one after another in the arena (a 4 KiB
/// file takes 4 KiB of it, not a block). The arena grows to the largest
/// wave a worker has needed: a group copied entirely with
/// `copy_file_range` needs none (zeroing and faulting in an unused 16 MiB
/// arena per worker was a fifth of the CPU time of copying 500 files of
/// 1 MiB). The arena and its slots start on multiples of `SLOT_ALIGN`, as
/// `O_DIRECT` needs.
fn copy_chunks(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    jobs: &mut [Job<'_>],
    chunks: &[Chunk],
    arena: &mut AlignedBuf,
) {
    let mut start = 0;
    while start < chunks.len() {
        let lens = chunks[start..].iter().map(|c| slot_len(c.len) as u64);
        let end = start + first_wave(lens, ctx.opts.wave as u64);
        let bytes: usize = chunks[start..end].iter().map(|c| slot_len(c.len)).sum();
        if arena.len() < bytes {
            *arena = AlignedBuf::new(bytes, SLOT_ALIGN);
        }
        let wave = Wave {
            chunks: &chunks[start..end],
            got: vec![0; end - start],
        };
        wave.copy(ctx, dirs, jobs, &mut arena[..bytes]);
        start = end;
    }
}

/// Reads to the end the files that say they are empty (as those of /proc
/// do): their size tells nothing; and copies those from or to a file that
/// is not a regular one.
fn copy_unsized(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [Job<'_>]) {
    for j in jobs
        .iter_mut()
        .filter(|j| j.failed.is_none() && (j.e.st.stx_size == 0 || j.stream))
    {
        // `--sparse=always` from a pipe or device into a regular file:
        // blocks of zeros become holes there too, as GNU makes them.
        let holes = ctx.opts.sparse == super::Sparse::Always
            && fstat(&j.dst).is_ok_and(|st| u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG);
        match copy_to_eof(j, ctx.progress, holes) {
            Ok(n) => j.end = n,
            Err((side, e)) => j.failed = Some((failure(dirs, j.e, side), e)),
        }
    }
}

/// Gives every complete copy its final length and, with `--preserve`, its
/// attributes.
fn finish_files(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [Job<'_>]) {
    for j in jobs.iter_mut().filter(|j| j.failed.is_none()) {
        let dst = dirs.dst_of(&j.e.dst_name);
        // A file that ended early ends there in the copy, never padded to
        // its stated size. A direct copy's last block was written whole:
        // cut the copy back. A sparse copy may end in a hole: extend it.
        // (Direct copies are never sparse.)
        let resize = if j.stream || ctx.opts.attributes_only {
            None
        } else if let Some(eof) = j.eof {
            Some((eof, "truncate"))
        } else if j.direct && j.end % SLOT_ALIGN as u64 != 0 {
            Some((j.end, "truncate"))
        } else if is_sparse(ctx.opts, j.e) || ctx.opts.sparse == super::Sparse::Always {
            Some((j.e.st.stx_size, "extend"))
        } else {
            None
        };
        if let Some((len, what)) = resize {
            if let Err(e) = rustix::fs::ftruncate(&j.dst, len) {
                j.failed = Some((format!("cannot {what} {}", quote(&dst)), e.into()));
                continue;
            }
        }
        if ctx.opts.preserve.attrs() {
            let xattrs = Some((Node::Fd(j.src.as_fd()), dirs.dst_default_acl));
            let keep = &ctx.opts.preserve;
            let set = set_attrs_at(&j.dst, c"", &j.e.st, Some(j.e.mode()), xattrs, keep);
            if let Err(e) = set {
                // The data is complete: report, keep the file (as cp does).
                let what = format!("preserving attributes of {}", quote(&dst));
                ctx.errors.report(what, Some(e));
            }
        }
    }
}

/// With `--fsync`, fsyncs the files large enough to be made durable one by
/// one (see [`FSYNC_EACH_MIN`]), in one batch.
fn fsync_large(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [Job<'_>]) {
    let live: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].failed.is_none() && !jobs[i].stream && fsync_each(ctx.opts, jobs[i].e))
        .collect();
    let ops: Vec<Op<'_>> = live.iter().map(|&i| Op::fsync(&jobs[i].dst)).collect();
    for (i, r) in run_batch(ctx.engine, ops, live) {
        if let Err(e) = r {
            let dst = dirs.dst_of(&jobs[i].e.dst_name);
            jobs[i].failed = Some((format!("cannot fsync {}", quote(&dst)), e));
        }
    }
}

/// Closes every file (a destination whose close fails is not complete),
/// counts the complete copies, and reports the others after removing them.
fn close_and_report(ctx: &Ctx<'_>, dirs: &DirPair, jobs: Vec<Job<'_>>) {
    let mut srcs = Vec::with_capacity(jobs.len());
    let mut dsts = Vec::with_capacity(jobs.len());
    let mut finished = Vec::with_capacity(jobs.len());
    for j in jobs {
        srcs.push(j.src);
        dsts.push(j.dst);
        finished.push((j.e, j.failed, j.created, j.stream, j.backup));
    }
    let _ = ctx.engine.close_batch(srcs);
    let closed = ctx.engine.close_batch(dsts);
    for (k, (e, failed, _, _, _)) in finished.iter_mut().enumerate() {
        let err = match &closed {
            Ok(rs) => rs[k].as_ref().err().map(clone),
            Err(err) => Some(clone(err)),
        };
        if let (None, Some(err)) = (&failed, err) {
            let dst = dirs.dst_of(&e.dst_name);
            *failed = Some((format!("error closing {}", quote(&dst)), err));
        }
    }
    for (e, failed, created, stream, backup) in finished {
        let Some((what, err)) = failed else {
            ctx.progress.files.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let dst = dirs.dst_of(&e.dst_name);
        // Only a file this copy created is removed: a name that was there
        // before may be another link to a file someone needs.
        let fate = if stream {
            what
        } else if !created {
            format!(
                "{what} (the copy {} is incomplete; it existed before the copy and was not removed)",
                quote(&dst)
            )
        } else {
            match at::unlink(&dirs.dst, &e.dst_name) {
                // `-b`: the file kept aside goes back to its name, as
                // GNU puts it back: a failed copy leaves things as they were.
                Ok(()) if backup.is_some() => {
                    let kept = backup.as_deref().expect("checked");
                    match rustix::fs::renameat(&dirs.dst, kept, &dirs.dst, e.dst_name.as_c_str()) {
                        Ok(()) => format!(
                            "{what} (the incomplete copy {} was removed and the file it replaced put back)",
                            quote(&dst)
                        ),
                        Err(r) => format!(
                            "{what} (the incomplete copy {} was removed; the file it replaced could not be put back from {}: {})",
                            quote(&dst),
                            quote(&dirs.dst_of(kept)),
                            io::Error::from(r)
                        ),
                    }
                }
                Ok(()) => format!("{what} (the incomplete copy {} was removed)", quote(&dst)),
                Err(u) => format!(
                    "{what} (the incomplete copy {} could not be removed: {u})",
                    quote(&dst)
                ),
            }
        };
        ctx.errors.report(fate, Some(err));
    }
}

/// Opens the group's sources, then its destinations, one batch each; the
/// files that failed are reported and left out. Returns the files to copy
/// now, and those beyond the first wave of bytes, to be queued again.
fn open_all<'g>(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    files: &'g mut [Entry],
) -> Option<(Vec<Job<'g>>, Vec<Entry>)> {
    let mut opened = open_sources(ctx, pair, files)?;
    let keep = first_wave(
        opened.iter().map(|(e, _)| e.st.stx_size),
        ctx.opts.wave as u64,
    );
    let rest: Vec<Entry> = opened.drain(keep..).map(|(e, _)| e.clone()).collect();
    Some((create_all(ctx, pair, opened), rest))
}

/// Opens every source in one batch; returns those that opened and are
/// still regular files, reporting the others.
fn open_sources<'g>(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    files: &'g mut [Entry],
) -> Option<Vec<(&'g Entry, OwnedFd)>> {
    let errors = ctx.errors;
    // A FIFO read like a file (`--copy-contents`, or no `-r`) is opened
    // with open(2), which waits for a writer as GNU's does: the ring opens
    // it without waiting, and a read before the writer comes ends at once,
    // an empty copy. Only an operand to be followed is opened through a
    // link.
    let is_fifo = |e: &Entry| e.kind() == libc::S_IFIFO;
    let nofollow = |e: &Entry| if e.follow_src { 0 } else { libc::O_NOFOLLOW };
    let opens: Vec<OpenRequest<'_>> = files
        .iter()
        .filter(|e| !is_fifo(e))
        .map(|e| {
            OpenRequest::new(PathAt::in_dir(&dirs.src, &e.src_name))
                .flags(libc::O_RDONLY | nofollow(e))
        })
        .collect();
    let mut batch = match ctx.engine.open_batch(&opens) {
        Ok(s) => s.into_iter(),
        Err(e) => {
            let what = format!("cannot open files in {}", quote(&dirs.src_path));
            errors.report(what, Some(e));
            return None;
        }
    };
    drop(opens);
    let srcs: Vec<io::Result<OwnedFd>> = files
        .iter()
        .map(|e| {
            if is_fifo(e) {
                let flags = rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::CLOEXEC
                    | rustix::fs::OFlags::from_bits_retain(nofollow(e) as u32);
                rustix::fs::openat(
                    &dirs.src,
                    e.src_name.as_c_str(),
                    flags,
                    rustix::fs::Mode::empty(),
                )
                .map_err(io::Error::from)
            } else {
                batch.next().expect("one result per request")
            }
        })
        .collect();
    let mut opened = Vec::with_capacity(srcs.len());
    for (e, r) in files.iter_mut().zip(srcs) {
        let src = dirs.src_of(&e.src_name);
        let fd = match r {
            Ok(fd) => fd,
            Err(err) => {
                errors.report(
                    format!("cannot open {} for reading", quote(&src)),
                    Some(err),
                );
                continue;
            }
        };
        // A file listed without its attributes gets them from the
        // descriptor: the file itself, whatever happened to its name since.
        if !e.stated() {
            match fstat(&fd) {
                Ok(st) => e.st = st,
                Err(err) => {
                    errors.report(format!("cannot stat {}", quote(&src)), Some(err));
                    continue;
                }
            }
        }
        let kind = e.st.stx_mode as u32 & libc::S_IFMT;
        let readable = kind == libc::S_IFREG
            || (kind != libc::S_IFDIR && kind != libc::S_IFLNK && as_regular(ctx.opts));
        if !readable {
            let what = format!("{} is no longer a regular file: not copied", quote(&src));
            errors.report(what, None);
            continue;
        }
        opened.push((&*e, fd));
    }
    Some(opened)
}

/// Creates the destinations of the opened sources, reporting those that
/// fail.
///
/// Creating a file always goes to io_uring's worker threads (O_CREAT never
/// completes inline), which cost more in wake-ups than the batch saves
/// (`docs/benchmarks.md`). So destinations are created here, in this
/// thread.
fn create_all<'g>(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    opened: Vec<(&'g Entry, OwnedFd)>,
) -> Vec<Job<'g>> {
    let mut jobs = Vec::with_capacity(opened.len());
    let mut turn = ctx.creators.enter();
    turn.created(opened.len() as u64);
    for (e, src) in opened {
        match create_dst(ctx, pair, e) {
            Ok(Some((dst, stream))) => {
                if ctx.opts.verbose {
                    let dst_path = pair.dst_of(&e.dst_name);
                    if dst.removed {
                        super::say(ctx.opts, format_args!("removed {}", quote(&dst_path)));
                    }
                    let backup = dst.backup.as_deref();
                    super::say_copied(ctx.opts, &pair.src_of(&e.src_name), &dst_path, backup);
                }
                jobs.push(Job {
                    e,
                    stream: stream || e.kind() != libc::S_IFREG,
                    src,
                    dst: dst.fd,
                    direct: false,
                    created: dst.created,
                    backup: dst
                        .backup
                        .as_deref()
                        .and_then(|b| b.file_name())
                        .map(super::cname),
                    end: 0,
                    eof: None,
                    failed: None,
                })
            }
            Ok(None) => {}
            Err(err) => created_failed(ctx, pair, e, err),
        }
    }
    jobs
}

/// What becomes of an existing destination (see [`existing`]).
enum Existing {
    /// Written: as a stream (`true`: a FIFO, a device) or as a regular
    /// file, emptied or made anew.
    Write(bool),
    /// Kept as it is by `-u`, not older than the source: it stands for
    /// the copy, and the source's other names are linked to it.
    KeptByUpdate,
    /// Not written, and not a copy: the source itself (reported), kept
    /// by `-i`'s answer, or an error reported.
    Refused,
}

/// An existing destination, opened as it is: refused (reported) when it
/// is the source itself (a hard link to it, or the file a link named on
/// the command line leads to), emptied when it is a regular file
/// (`Write(false)`); any other kind (a FIFO, a device) is written into as
/// it is (`Write(true)`), as `cp` does, never replaced. Kept as it is
/// (counted as skipped) when `-u` finds it newer (`KeptByUpdate`) or `-i`
/// is told no (`Refused`).
///
/// With `--preserve=links` (`-a`) an existing file with other names is
/// replaced by a new one rather than written into, as GNU does: its other
/// names keep what they held, and two sources copied onto two names of one
/// file stay two files.
///
/// `decided`: `-u`/`-i` already chose to overwrite it (see
/// [`judged_before_open`]), so they are not asked again.
fn existing(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    e: &Entry,
    dst: &mut at::Dest,
    decided: bool,
) -> Existing {
    if dst.created {
        return Existing::Write(false);
    }
    let path = || dirs.dst_of(&e.dst_name);
    let st = match fstat(&dst.fd) {
        Ok(st) => st,
        Err(err) => {
            ctx.errors
                .report(format!("cannot stat {}", quote(&path())), Some(err));
            return Existing::Refused;
        }
    };
    if statx_id(&st) == e.id() {
        let what = format!(
            "{} and {} are the same file",
            quote(&dirs.src_of(&e.src_name)),
            quote(&path())
        );
        ctx.errors.report(what, None);
        return Existing::Refused;
    }
    if !decided && super::keep_existing(ctx.opts, super::mtime(&e.st), super::mtime(&st), &path()) {
        ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
        let by_update =
            ctx.opts.update == super::Update::Older && super::mtime(&st) >= super::mtime(&e.st);
        return if by_update {
            Existing::KeptByUpdate
        } else {
            Existing::Refused
        };
    }
    let regular = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG;
    // Not with `--attributes-only`, which writes no data, as GNU's.
    if regular && ctx.opts.preserve.links && st.stx_nlink > 1 && !ctx.opts.attributes_only {
        let made = at::unlink(&dirs.dst, &e.dst_name).and_then(|()| {
            at::create(
                &dirs.dst,
                &e.dst_name,
                true,
                create_mode(ctx.opts, e),
                false,
            )
        });
        match made {
            Ok(fresh) => {
                dst.fd = fresh.fd;
                dst.created = true;
                dst.removed = true;
                return Existing::Write(false);
            }
            Err(err) => {
                let what = format!("cannot replace {}", quote(&path()));
                ctx.errors.report(what, Some(err));
                return Existing::Refused;
            }
        }
    }
    if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
        return Existing::Write(true);
    }
    if ctx.opts.attributes_only {
        return Existing::Write(false);
    }
    if let Err(err) = rustix::fs::ftruncate(&dst.fd, 0) {
        let err = io::Error::from(err);
        ctx.errors
            .report(format!("cannot truncate {}", quote(&path())), Some(err));
        return Existing::Refused;
    }
    Existing::Write(false)
}

/// The permission bits a copy is created with. With `-p` the owner's bits
/// alone: until its owner, ACL and mode are set at the end, nobody else
/// may open it (a set-user-ID or group-writable source must not be so,
/// owned by the copier, even for a moment).
fn create_mode(opts: &CopyOptions, e: &Entry) -> u32 {
    if opts.default_mode {
        0o666
    } else if opts.preserve.mode {
        e.mode() & 0o700
    } else {
        e.mode() & 0o777
    }
}

/// Creates (or opens, to overwrite: see [`existing`]) the copy of `e`,
/// with whether it is written as a stream; `None` when there is nothing
/// to write: it was made a hard link to an earlier copy of the same file
/// (`-a`), or the existing destination is refused or kept (reported).
fn create_dst(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    e: &Entry,
) -> io::Result<Option<(at::Dest, bool)>> {
    let opts = ctx.opts;
    let excl = opts.no_clobber || opts.update == super::Update::None;
    let mode = create_mode(opts, e);
    let mut backup = None;
    if opts.backup != super::Backup::None && !excl {
        if kept(ctx, pair, e)? {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        if super::backup_is_source(opts, &e.src_name, e.id(), &pair.dst, &e.dst_name) {
            let what = format!(
                "backing up {} might destroy source;  {} not copied",
                quote(&pair.dst_of(&e.dst_name)),
                quote(&pair.src_of(&e.src_name))
            );
            ctx.errors.report(what, None);
            return Ok(None);
        }
        backup = super::make_backup(opts, &pair.dst, &pair.dst_path, &e.dst_name)
            .map_err(|err| super::in_the_way("cannot backup", err))?;
    } else if opts.remove_destination && !excl {
        remove_destination(ctx, pair, e)?;
    }
    let decided = match judged_before_open(ctx, pair, e, excl) {
        Some(true) => {
            ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        Some(false) => true,
        None => false,
    };
    let create = || {
        if e.follow_dst {
            at::create_following(&pair.dst, &e.dst_name, excl, mode, opts.force)
        } else {
            at::create(&pair.dst, &e.dst_name, excl, mode, opts.force)
        }
    };
    let create = || {
        create().map(|mut d| {
            d.backup = backup.clone();
            d
        })
    };
    // With `-L` two links to one file are two names of it too, as GNU
    // sees them.
    if !(ctx.opts.preserve.links && (e.st.stx_nlink > 1 || e.follow_src)) {
        let mut dst = create()?;
        return Ok(match existing(ctx, pair, e, &mut dst, decided) {
            Existing::Write(stream) => Some((dst, stream)),
            Existing::KeptByUpdate | Existing::Refused => None,
        });
    }
    // Held while the first copy is created, so a second name of the file
    // never links to a copy that does not exist yet.
    let mut links = ctx.links.lock().expect("hard link table lock");
    if let Some((first, name)) = links.get(&e.id()) {
        let r = match at::link(&first.dst, name, &pair.dst, &e.dst_name) {
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) && !ctx.opts.no_clobber => {
                // The name in the way may be the source itself (another
                // of its hard links): never removed.
                let same = rustix::fs::statat(
                    &pair.dst,
                    e.dst_name.as_c_str(),
                    rustix::fs::AtFlags::empty(),
                )
                .is_ok_and(|st| (st.st_dev, st.st_ino) == e.id());
                if same {
                    drop(links);
                    let what = format!(
                        "{} and {} are the same file",
                        quote(&pair.src_of(&e.src_name)),
                        quote(&pair.dst_of(&e.dst_name))
                    );
                    ctx.errors.report(what, None);
                    return Ok(None);
                }
                at::unlink(&pair.dst, &e.dst_name)
                    .and_then(|()| at::link(&first.dst, name, &pair.dst, &e.dst_name))
            }
            r => r,
        };
        drop(links);
        r?;
        super::say_copied(
            opts,
            &pair.src_of(&e.src_name),
            &pair.dst_of(&e.dst_name),
            backup.as_deref(),
        );
        ctx.progress.files.fetch_add(1, Ordering::Relaxed);
        return Ok(None);
    }
    let mut dst = create()?;
    // Only a copy is linked to: an existing destination that is the
    // source itself, or that `-i` keeps, is not one, and the next name of
    // the file is copied anew. One that `-u` keeps (not older than the
    // source) stands for the copy, as with GNU's `cp -au`: the file's
    // other names are linked to it (coreutils' tests/cp/preserve-link.sh).
    match existing(ctx, pair, e, &mut dst, decided) {
        Existing::Write(stream) => {
            links.insert(e.id(), (Arc::clone(pair), e.dst_name.clone()));
            Ok(Some((dst, stream)))
        }
        Existing::KeptByUpdate => {
            links.insert(e.id(), (Arc::clone(pair), e.dst_name.clone()));
            Ok(None)
        }
        Existing::Refused => Ok(None),
    }
}

/// `-u`/`-i` on an existing destination that must be judged before it is
/// opened: a FIFO (the open waits for a reader, possibly for ever), and
/// with `-i` a file the copier may not write (`-f` would remove it
/// without the question; without `-f` the open fails): whether it is
/// kept (`Some(true)`) or to be overwritten (`Some(false)`, asked
/// already); `None` when there is nothing to judge here.
fn judged_before_open(ctx: &Ctx<'_>, pair: &DirPair, e: &Entry, excl: bool) -> Option<bool> {
    let opts = ctx.opts;
    if excl || (opts.update == super::Update::All && opts.ask.is_none()) {
        return None;
    }
    let flags = if e.follow_dst {
        rustix::fs::AtFlags::empty()
    } else {
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW
    };
    let st = rustix::fs::statat(&pair.dst, e.dst_name.as_c_str(), flags).ok()?;
    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
    let dst = pair.dst_of(&e.dst_name);
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Fifo => {
            Some(super::keep_existing(opts, super::mtime(&e.st), mtime, &dst))
        }
        rustix::fs::FileType::Directory | rustix::fs::FileType::Symlink => None,
        _ if opts.ask.is_some() => {
            let writable = rustix::fs::accessat(
                &pair.dst,
                e.dst_name.as_c_str(),
                rustix::fs::Access::WRITE_OK,
                rustix::fs::AtFlags::EACCESS,
            )
            .is_ok();
            if writable {
                return None;
            }
            Some(super::keep_unwritable(
                opts,
                super::mtime(&e.st),
                mtime,
                st.st_mode,
                &dst,
            ))
        }
        _ => None,
    }
}

/// Whether an existing destination (not a directory) that is about to be
/// removed or kept aside is kept instead, by `-u` or `-i`, judged on the
/// name's own attributes.
fn kept(ctx: &Ctx<'_>, pair: &DirPair, e: &Entry) -> io::Result<bool> {
    let st = match rustix::fs::statat(
        &pair.dst,
        e.dst_name.as_c_str(),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(false),
        Err(err) => return Err(err.into()),
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        return Ok(false);
    }
    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
    let dst = pair.dst_of(&e.dst_name);
    Ok(super::keep_existing(
        ctx.opts,
        super::mtime(&e.st),
        mtime,
        &dst,
    ))
}

/// `--remove-destination`: the file in the way goes before the copy is
/// made (not a directory: creating the copy then reports it). With `-u`
/// or `-i` the check comes first, on the name's own attributes.
fn remove_destination(ctx: &Ctx<'_>, pair: &DirPair, e: &Entry) -> io::Result<()> {
    let dst = pair.dst_of(&e.dst_name);
    if kept(ctx, pair, e)? {
        return Err(io::Error::from_raw_os_error(libc::EEXIST));
    }
    match at::unlink(&pair.dst, &e.dst_name) {
        Ok(()) => {
            super::say(ctx.opts, format_args!("removed {}", quote(&dst)));
            Ok(())
        }
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        // A directory: creating the copy reports it, as GNU does.
        Err(err) if err.raw_os_error() == Some(libc::EISDIR) => Err(err),
        Err(err) => Err(super::in_the_way("cannot remove", err)),
    }
}

/// Reports a copy that could not be created (or skips it, with `-n`).
fn created_failed(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry, err: io::Error) {
    let dst = dirs.dst_of(&e.dst_name);
    if let Some(w) = err
        .get_ref()
        .and_then(|x| x.downcast_ref::<super::InTheWay>())
    {
        let what = format!("{} {}", w.what, quote(&dst));
        return ctx
            .errors
            .report(what, Some(io::Error::from_raw_os_error(w.errno)));
    }
    let msg = match err.raw_os_error() {
        Some(libc::EEXIST)
            if ctx.opts.no_clobber
                || ctx.opts.update != super::Update::All
                || ctx.opts.ask.is_some() =>
        {
            ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Some(libc::EISDIR) => {
            // `-u` looks at the times first, and `-i` asks, as GNU's do,
            // before saying a directory is in the way.
            let kept = (ctx.opts.update == super::Update::Older || ctx.opts.ask.is_some())
                && rustix::fs::statat(
                    &dirs.dst,
                    e.dst_name.as_c_str(),
                    rustix::fs::AtFlags::empty(),
                )
                .is_ok_and(|st| {
                    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
                    super::keep_existing(ctx.opts, super::mtime(&e.st), mtime, &dst)
                });
            if kept {
                ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            format!(
                "cannot overwrite directory {} with non-directory",
                quote(&dst)
            )
        }
        Some(libc::ELOOP) if at::is_symlink(&dirs.dst, &e.dst_name) => {
            // A link to the source itself: what GNU says of it.
            let to_source = rustix::fs::statat(
                &dirs.dst,
                e.dst_name.as_c_str(),
                rustix::fs::AtFlags::empty(),
            )
            .is_ok_and(|st| (st.st_dev, st.st_ino) == e.id());
            if to_source {
                // Found before GNU says what it copies, as here.
                format!(
                    "{} and {} are the same file",
                    quote(&dirs.src_of(&e.src_name)),
                    quote(&dst)
                )
            } else if ctx
                .made_links
                .as_ref()
                .is_some_and(|made| made.lock().expect("made links lock").contains(&dst))
            {
                // A link this copy made (`cp -dR a/1 b/1 c`, both named
                // `1`): GNU's words.
                format!(
                    "will not copy {} through just-created symlink {}",
                    quote(&dirs.src_of(&e.src_name)),
                    quote(&dst)
                )
            } else {
                super::say_copied(ctx.opts, &dirs.src_of(&e.src_name), &dst, None);
                // GNU's words: "dangling" when the link leads nowhere.
                let nowhere = rustix::fs::statat(
                    &dirs.dst,
                    e.dst_name.as_c_str(),
                    rustix::fs::AtFlags::empty(),
                )
                .is_err_and(|err| err == rustix::io::Errno::NOENT);
                let dangling = if e.follow_dst || nowhere {
                    "dangling "
                } else {
                    ""
                };
                format!("not writing through {dangling}symlink {}", quote(&dst))
            }
        }
        _ => {
            // GNU says what it copies before it opens the copy.
            super::say_copied(ctx.opts, &dirs.src_of(&e.src_name), &dst, None);
            return ctx.errors.report(
                format!("cannot create regular file {}", quote(&dst)),
                Some(err),
            );
        }
    };
    ctx.errors.report(msg, None);
}

/// One wave of chunks on its way through the arena: how many bytes each
/// chunk's read brought in.
struct Wave<'w> {
    chunks: &'w [Chunk],
    got: Vec<usize>,
}

impl Wave<'_> {
    /// Reads every chunk of the wave into its slot of `arena`, then writes
    /// them out.
    fn copy(mut self, ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [Job<'_>], arena: &mut [u8]) {
        let mut slots = slots(arena, self.chunks);
        self.read(ctx.engine, dirs, jobs, &mut slots);
        self.finish_short_reads(dirs, jobs, &mut slots);
        if self.chunks.iter().any(|c| jobs[c.job].direct) {
            self.write_direct(ctx, dirs, jobs, &mut slots);
        }
        self.write_buffered(ctx, dirs, jobs, &slots);
    }

    /// The reads, in one engine batch.
    fn read(
        &mut self,
        engine: &Engine,
        dirs: &DirPair,
        jobs: &mut [Job<'_>],
        slots: &mut [&mut [u8]],
    ) {
        let mut ops: Vec<Op<'_>> = Vec::with_capacity(self.chunks.len());
        let mut index = Vec::with_capacity(self.chunks.len());
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter_mut()) {
            if jobs[c.job].failed.is_none() {
                ops.push(Op::read(&jobs[c.job].src, c.offset, &mut slot[..c.len]));
                index.push(k);
            }
        }
        for (k, r) in run_batch(engine, ops, index) {
            let c = self.chunks[k];
            match r {
                Ok(n) => self.got[k] = n,
                Err(e) => fail(jobs, dirs, c.job, Side::Read, e),
            }
        }
    }

    /// Short reads (a file that shrank, a signal) are finished one by one;
    /// one that meets the end of the file marks where the copy ends.
    fn finish_short_reads(
        &mut self,
        dirs: &DirPair,
        jobs: &mut [Job<'_>],
        slots: &mut [&mut [u8]],
    ) {
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter_mut()) {
            if jobs[c.job].failed.is_none() && self.got[k] < c.len {
                match read_full(&jobs[c.job].src, c.offset, &mut slot[..c.len], self.got[k]) {
                    Ok(n) => self.got[k] = n,
                    Err(e) => fail(jobs, dirs, c.job, Side::Read, e),
                }
                if self.got[k] < c.len {
                    let j = &mut jobs[c.job];
                    let at = c.offset + self.got[k] as u64;
                    j.eof = Some(j.eof.map_or(at, |e| e.min(at)));
                }
            }
        }
    }

    /// Writes to `O_DIRECT` copies go to the device: all of them in one
    /// batch, each slot written whole (zeroed past the data; the copy is
    /// cut back at the end).
    fn write_direct(
        &self,
        ctx: &Ctx<'_>,
        dirs: &DirPair,
        jobs: &mut [Job<'_>],
        slots: &mut [&mut [u8]],
    ) {
        let got = &self.got;
        let mut ops: Vec<Op<'_>> = Vec::new();
        let mut index = Vec::new();
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter_mut()) {
            let j = &jobs[c.job];
            if j.direct && j.failed.is_none() && got[k] > 0 {
                let whole = slot_len(got[k]);
                slot[got[k]..whole].fill(0);
                ops.push(Op::write(&j.dst, c.offset, &slot[..whole]));
                index.push(k);
            }
        }
        for (k, r) in run_batch(ctx.engine, ops, index) {
            let c = self.chunks[k];
            let whole = slot_len(got[k]);
            let done = match r {
                // A short direct write is finished by pwrite (it fails
                // with EINVAL if what is left is not aligned).
                Ok(n) if n < whole => write_full(&jobs[c.job].dst, c.offset, &slots[k][..whole], n),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            match done {
                Ok(()) => {
                    ctx.progress
                        .bytes
                        .fetch_add(got[k] as u64, Ordering::Relaxed);
                    let j = &mut jobs[c.job];
                    j.end = j.end.max(c.offset + got[k] as u64);
                }
                Err(e) => fail(jobs, dirs, c.job, Side::Write, e),
            }
        }
    }

    /// Buffered writes on ext4 are not done inline by io_uring either (they
    /// go to its worker threads), so the writes are plain pwrites from this
    /// thread: the page cache absorbs them at memory speed.
    fn write_buffered(
        &self,
        ctx: &Ctx<'_>,
        dirs: &DirPair,
        jobs: &mut [Job<'_>],
        slots: &[&mut [u8]],
    ) {
        let got = &self.got;
        let holes = ctx.opts.sparse == super::Sparse::Always;
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter()) {
            if jobs[c.job].failed.is_none() && !jobs[c.job].direct && got[k] > 0 {
                let data = &slot[..got[k]];
                let written = if holes {
                    write_skipping_zeros(&jobs[c.job].dst, c.offset, data)
                } else {
                    write_full(&jobs[c.job].dst, c.offset, data, 0)
                };
                match written {
                    Ok(()) => {
                        ctx.progress
                            .bytes
                            .fetch_add(got[k] as u64, Ordering::Relaxed);
                        if fsync_each(ctx.opts, jobs[c.job].e) {
                            start_writeback(&jobs[c.job].dst, c.offset, got[k]);
                        }
                    }
                    Err(e) => fail(jobs, dirs, c.job, Side::Write, e),
                }
            }
        }
    }
}

/// Runs `ops` as one engine batch; yields each result with its entry of
/// `index` (one per op). A failure of the whole batch is every op's result.
fn run_batch(
    engine: &Engine,
    mut ops: Vec<Op<'_>>,
    index: Vec<usize>,
) -> impl Iterator<Item = (usize, io::Result<usize>)> {
    let results = match engine.submit(&mut ops) {
        Ok(r) => r,
        Err(e) => index.iter().map(|_| Err(clone(&e))).collect(),
    };
    index.into_iter().zip(results)
}

/// The wave's chunks' buffers: consecutive pieces of `arena`, one per
/// chunk, each as long as its chunk rounded up to `SLOT_ALIGN`.
fn slots<'a>(arena: &'a mut [u8], wave: &[Chunk]) -> Vec<&'a mut [u8]> {
    let mut rest = arena;
    let mut out = Vec::with_capacity(wave.len());
    for c in wave {
        let (slot, tail) = std::mem::take(&mut rest).split_at_mut(slot_len(c.len));
        out.push(slot);
        rest = tail;
    }
    out
}

/// Where slots start in the arena, and how `O_DIRECT` copies are written:
/// whole multiples of this (4 KiB, a multiple of the logical block size of
/// every common device, and the page size).
pub(crate) const SLOT_ALIGN: usize = 4096;

/// The arena bytes a chunk of `len` bytes takes: `len` rounded up to
/// `SLOT_ALIGN`.
fn slot_len(len: usize) -> usize {
    len.next_multiple_of(SLOT_ALIGN)
}

/// Switches a durable copy of a large file (`CopyOptions::direct_write_min`)
/// to `O_DIRECT`: its data goes straight from the worker's buffers to the
/// device, a wave of writes in flight, instead of filling the page cache
/// and waiting for its write-back. A write error then names the file at
/// once. Returns false (the copy stays buffered) where the file system
/// refuses `O_DIRECT` or needs a coarser alignment than `SLOT_ALIGN`.
fn go_direct(fd: &OwnedFd) -> bool {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let Ok(flags) = fcntl_getfl(fd) else {
        return false;
    };
    if fcntl_setfl(fd, flags | OFlags::DIRECT).is_err() {
        return false;
    }
    match blockio::Alignment::of(fd) {
        Ok((a, _)) if a.max() <= SLOT_ALIGN && SLOT_ALIGN % a.max() == 0 => true,
        _ => {
            // Back to buffered writes; if even that fails, the writes
            // report it.
            let _ = fcntl_setfl(fd, flags);
            false
        }
    }
}

enum Side {
    Read,
    Write,
}

fn fail(jobs: &mut [Job<'_>], dirs: &DirPair, job: usize, side: Side, e: io::Error) {
    let j = &mut jobs[job];
    if j.failed.is_none() {
        j.failed = Some((failure(dirs, j.e, side), e));
    }
}

/// What failed, in cp's words.
fn failure(dirs: &DirPair, e: &Entry, side: Side) -> String {
    match side {
        Side::Read => format!("error reading {}", quote(&dirs.src_of(&e.src_name))),
        Side::Write => format!("error writing {}", quote(&dirs.dst_of(&e.dst_name))),
    }
}

/// Copies a file by reading it until a read returns nothing; the bytes
/// copied. For files whose stated size is no guide (0 for most of /proc),
/// and with plain reads and writes (no offsets) for a stream: a FIFO or
/// device at either end.
fn copy_to_eof(j: &Job<'_>, progress: &Progress, holes: bool) -> Result<u64, (Side, io::Error)> {
    let mut buf = vec![0u8; if j.stream { 128 << 10 } else { 16 << 10 }];
    let mut off = 0u64;
    loop {
        let n = if j.stream {
            read_some(&j.src, &mut buf)
        } else {
            read_full(&j.src, off, &mut buf, 0)
        };
        let n = n.map_err(|e| (Side::Read, e))?;
        if n == 0 {
            if holes {
                // The file ends where the data did, even in a hole.
                rustix::fs::ftruncate(&j.dst, off).map_err(|e| (Side::Write, e.into()))?;
            }
            return Ok(off);
        }
        if holes {
            write_skipping_zeros(&j.dst, off, &buf[..n])
        } else if j.stream {
            write_all(&j.dst, &buf[..n])
        } else {
            write_full(&j.dst, off, &buf[..n], 0)
        }
        .map_err(|e| (Side::Write, e))?;
        progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
        off += n as u64;
    }
}

/// One `read` at the file's position, retried when interrupted.
fn read_some(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes all of `buf` at the file's position.
fn write_all(fd: &OwnedFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Finishes a short read; the bytes read in all (fewer at end of file).
fn read_full(fd: &OwnedFd, offset: u64, buf: &mut [u8], mut done: usize) -> io::Result<usize> {
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// `--sparse=always`: writes the blocks of `buf` that are not all zeros,
/// each run of them in one write; the others stay holes (the file was
/// empty, and its length is set at the end). Blocks are the file's 4 KiB
/// blocks, on file-offset boundaries whatever `offset` is, so a buffer
/// that starts or ends inside one (a pipe's reads) leaves no zero block
/// written as data: the first block of `buf` is the rest of the one
/// `offset` falls in.
fn write_skipping_zeros(fd: &OwnedFd, offset: u64, buf: &[u8]) -> io::Result<()> {
    const HOLE: u64 = 4096;
    // The end of the block of `buf` that starts at `k`: the next block
    // boundary of the file, or the end of `buf`.
    let block_end = |k: usize| (k + (HOLE - (offset + k as u64) % HOLE) as usize).min(buf.len());
    let zero = |k: usize| buf[k..block_end(k)].iter().all(|&b| b == 0);
    let mut start = 0;
    while start < buf.len() {
        if zero(start) {
            start = block_end(start);
            continue;
        }
        // The next run of blocks holding data, written at once.
        let mut end = start;
        while end < buf.len() && !zero(end) {
            end = block_end(end);
        }
        write_full(fd, offset + start as u64, &buf[start..end], 0)?;
        start = end;
    }
    Ok(())
}

/// Finishes a short write.
fn write_full(fd: &OwnedFd, offset: u64, buf: &[u8], mut done: usize) -> io::Result<()> {
    while done < buf.len() {
        match rustix::io::pwrite(fd, &buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Fewer blocks allocated than the size needs: the file has holes (which
/// the copy keeps, unless `--sparse=never`).
fn is_sparse(opts: &CopyOptions, e: &Entry) -> bool {
    opts.sparse != super::Sparse::Never && e.st.stx_blocks.saturating_mul(512) < e.st.stx_size
}

/// The ranges of the file that hold data: the whole file, or for a sparse
/// file its data extents (`SEEK_DATA`/`SEEK_HOLE`).
fn extents(fd: &OwnedFd, opts: &CopyOptions, e: &Entry) -> Vec<(u64, u64)> {
    let size = e.st.stx_size;
    if !is_sparse(opts, e) {
        return vec![(0, size)];
    }
    let mut out = Vec::new();
    let mut pos = 0u64;
    // The seeks move the file position, which the copy (by pread) never
    // uses.
    use rustix::fs::{seek, SeekFrom};
    while pos < size {
        let data = match seek(fd, SeekFrom::Data(pos)) {
            Ok(data) => data,
            Err(rustix::io::Errno::NXIO) => break, // only a hole is left
            Err(_) => return vec![(0, size)],      // no SEEK_DATA here: copy it all
        };
        let end = seek(fd, SeekFrom::Hole(data)).map_or(size, |hole| hole.min(size));
        if end <= data {
            break;
        }
        out.push((data, end));
        pos = end;
    }
    out
}

/// Copies the whole file with `copy_file_range`; `Ok(false)` when the
/// kernel cannot do it for this pair (another file system, a special file
/// system) and nothing was copied.
fn copy_range(j: &Job<'_>, durable: bool, progress: &Progress) -> io::Result<bool> {
    const STEP: usize = 8 << 20;
    let size = j.e.st.stx_size;
    let mut off = 0u64;
    while off < size {
        let (mut off_in, mut off_out) = (off, off);
        let want = ((size - off) as usize).min(STEP);
        use rustix::io::Errno;
        let n = match rustix::fs::copy_file_range(
            &j.src,
            Some(&mut off_in),
            &j.dst,
            Some(&mut off_out),
            want,
        ) {
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) if off == 0 => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break; // the file shrank: copy what there was, like cp
        }
        progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if durable {
            start_writeback(&j.dst, off, n as usize);
        }
        off += n as u64;
    }
    Ok(true)
}

/// With `--fsync`: starts writing the range to the device now
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait), so the
/// write-back overlaps the reads of the next wave and the final fsync has
/// little left to do. Advisory: a failure here shows up at the fsync.
fn start_writeback(fd: &OwnedFd, offset: u64, len: usize) {
    // SAFETY: a valid fd; no memory is passed. (libc: rustix has no
    // sync_file_range.)
    unsafe {
        libc::sync_file_range(
            fd.as_raw_fd(),
            offset as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// How many of the first `sizes` (at least one) fit in `wave` bytes: the
/// files a group copies now (the rest go back to the queue), and the
/// chunks of one wave.
fn first_wave(sizes: impl Iterator<Item = u64>, wave: u64) -> usize {
    let mut bytes = 0u64;
    let mut n = 0;
    for size in sizes {
        if n > 0 && bytes + size > wave {
            break;
        }
        bytes += size;
        n += 1;
    }
    n
}

/// The attributes of an open file, in the engine's form (`libc::statx`,
/// what its batched `statx` gives every other entry), every field as the
/// kernel filled it.
pub(super) fn fstat(fd: &impl AsRawFd) -> io::Result<libc::statx> {
    // SAFETY: `statx` is plain old data (integers only); all zeroes is a
    // valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, an empty NUL-terminated path with AT_EMPTY_PATH,
    // and a pointer to a local statx the kernel fills in.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BASIC_STATS,
            &mut st,
        )
    };
    if r == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An error for every file of a batch that failed as a whole.
fn clone(e: &io::Error) -> io::Error {
    match blockio::errno(e) {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::first_wave;

    #[test]
    fn a_group_keeps_the_files_that_fit_in_a_wave_and_at_least_one() {
        let w = 16 << 20;
        assert_eq!(first_wave([1 << 30, 1 << 30].into_iter(), w), 1);
        assert_eq!(first_wave(std::iter::repeat_n(4096, 32), w), 32);
        assert_eq!(first_wave(std::iter::repeat_n(1 << 20, 32), w), 16);
        // A file larger than a wave starts a group of its own.
        assert_eq!(first_wave([0, 0, 20 << 20, 0].into_iter(), w), 2);
        assert_eq!(first_wave([20 << 20, 0].into_iter(), w), 1);
        assert_eq!(first_wave(std::iter::empty(), w), 0);
    }
}
