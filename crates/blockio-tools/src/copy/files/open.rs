//! Opening a group: every source in one engine batch, then every
//! destination, created here in this thread. What becomes of a file
//! already at a destination's name is [`super::destination`]'s to decide;
//! this module turns what opened into the group's jobs and reports the
//! rest, so the steps after it see only files with both descriptors.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use blockio::{OpenRequest, PathAt};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::super::at::cname;
use super::super::entry::{Ctx, DirPair, Entry};
use super::super::messages::{say, say_copied};
use super::destination::{create_dst, created_failed};
use super::job::{as_regular, first_wave, fstat, FileCopy, Target};
use crate::quote::quote;

/// Opens the group's sources, then its destinations, one batch each; the
/// files that failed are reported and left out. Returns the files to copy
/// now, and those beyond the first wave of bytes, to be queued again.
pub(super) fn open_all<'g>(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    files: &'g mut [Entry],
) -> Option<(Vec<FileCopy<'g>>, Vec<Entry>)> {
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
    let srcs = open_batch(ctx, dirs, files)?;
    let mut opened = Vec::with_capacity(srcs.len());
    for (e, r) in files.iter_mut().zip(srcs) {
        if let Some(fd) = source_to_copy(ctx, dirs, e, r) {
            opened.push((&*e, fd));
        }
    }
    Some(opened)
}

/// A FIFO, read like a file (`--copy-contents`, or no `-r`): opened with
/// open(2), which waits for a writer as GNU's does, where the ring opens
/// it without waiting, and a read before the writer comes ends at once,
/// an empty copy.
fn is_fifo(e: &Entry) -> bool {
    FileType::from_raw_mode(e.mode()) == FileType::Fifo
}

/// How a source is opened: for reading, and through a link only when it
/// is an operand to be followed.
fn source_flags(e: &Entry) -> OFlags {
    let nofollow = if e.follow_src {
        OFlags::empty()
    } else {
        OFlags::NOFOLLOW
    };
    OFlags::RDONLY | OFlags::CLOEXEC | nofollow
}

/// Opens the sources, all but the FIFOs in one engine batch; one result
/// per file, in order. `None` after reporting a batch that failed whole.
fn open_batch(ctx: &Ctx<'_>, dirs: &DirPair, files: &[Entry]) -> Option<Vec<io::Result<OwnedFd>>> {
    let names: Vec<_> = files
        .iter()
        .filter(|e| !is_fifo(e))
        .map(|e| (e, dirs.src_at(&e.src_name)))
        .collect();
    let opens: Vec<OpenRequest<'_>> = names
        .iter()
        .map(|(e, (dir, name))| {
            // The engine takes open(2)'s flags as the C library spells them.
            let flags = source_flags(e).bits() as libc::c_int;
            OpenRequest::new(PathAt::in_dir(dir, name)).flags(flags)
        })
        .collect();
    let mut batch = match ctx.engine.open_batch(&opens) {
        Ok(s) => s.into_iter(),
        Err(e) => {
            let what = format!("cannot open files in {}", quote(&dirs.src_path));
            ctx.errors.report(what, Some(e));
            return None;
        }
    };
    drop(opens);
    let open_fifo = |e: &Entry| {
        let (dir, name) = dirs.src_at(&e.src_name);
        rustix::fs::openat(dir, &*name, source_flags(e), Mode::empty()).map_err(io::Error::from)
    };
    let srcs = files
        .iter()
        .map(|e| {
            if is_fifo(e) {
                open_fifo(e)
            } else {
                batch.next().expect("one result per request")
            }
        })
        .collect();
    Some(srcs)
}

/// The source `e`, opened as `r`, if it is to be copied: reported when it
/// did not open, or is no longer a file to copy; stated from the
/// descriptor when it was listed without its attributes.
fn source_to_copy(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    e: &mut Entry,
    r: io::Result<OwnedFd>,
) -> Option<OwnedFd> {
    let errors = ctx.errors;
    let src = || dirs.src_of(&e.src_name);
    let fd = match r {
        Ok(fd) => fd,
        Err(err) => {
            let what = if unreachable(dirs, e, &err) {
                format!("cannot stat {}", quote(&src()))
            } else {
                format!("cannot open {} for reading", quote(&src()))
            };
            errors.report(what, Some(err));
            return None;
        }
    };
    // A file listed without its attributes gets them from the
    // descriptor: the file itself, whatever happened to its name since.
    if !e.stated() {
        match fstat(&fd) {
            Ok(st) => e.st = st,
            Err(err) => {
                errors.report(format!("cannot stat {}", quote(&src())), Some(err));
                return None;
            }
        }
    }
    let kind = FileType::from_raw_mode(e.mode());
    let readable = kind == FileType::RegularFile
        || (kind != FileType::Directory && kind != FileType::Symlink && as_regular(ctx.opts));
    if !readable {
        let what = format!("{} is no longer a regular file: not copied", quote(&src()));
        errors.report(what, None);
        return None;
    }
    Some(fd)
}

/// Whether `e`, which could not be opened (`err`), was listed without its
/// attributes in a directory the copier may read but not search: GNU's
/// look at it fails first, and says so.
fn unreachable(dirs: &DirPair, e: &Entry, err: &io::Error) -> bool {
    // (The engine's errors carry the system's code: `blockio::errno`.)
    let code = blockio::errno(err).map(Errno::from_raw_os_error);
    if e.stated() || code != Some(Errno::ACCESS) {
        return false;
    }
    let (dir, name) = dirs.src_at(&e.src_name);
    rustix::fs::statat(dir, &*name, AtFlags::SYMLINK_NOFOLLOW).is_err_and(|e| e == Errno::ACCESS)
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
) -> Vec<FileCopy<'g>> {
    let mut jobs = Vec::with_capacity(opened.len());
    let mut turn = ctx.creators.enter();
    turn.created(opened.len() as u64);
    for (e, src) in opened {
        match create_dst(ctx, pair, e) {
            Ok(Some((dst, target))) => {
                if ctx.opts.verbose {
                    let dst_path = pair.dst_of(&e.dst_name);
                    if dst.removed {
                        say(ctx.opts, format_args!("removed {}", quote(&dst_path)));
                    }
                    let backup = dst.backup.as_deref();
                    say_copied(ctx.opts, &pair.src_of(&e.src_name), &dst_path, backup);
                }
                jobs.push(FileCopy {
                    e,
                    stream: target == Target::Stream
                        || FileType::from_raw_mode(e.mode()) != FileType::RegularFile,
                    src,
                    dst: dst.fd,
                    direct: false,
                    created: dst.created,
                    listed: dst.listed,
                    backup: dst.backup.as_deref().and_then(|b| b.file_name()).map(cname),
                    end: 0,
                    eof: None,
                    old: target == Target::Old,
                    failed: None,
                })
            }
            Ok(None) => {}
            Err(err) => created_failed(ctx, pair, e, err),
        }
    }
    jobs
}
