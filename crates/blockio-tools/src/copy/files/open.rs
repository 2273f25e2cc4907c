//! Opening a group: every source in one engine batch, then every
//! destination, created here in this thread. What becomes of a file
//! already at a destination's name is [`super::destination`]'s to decide;
//! this module turns what opened into the group's jobs and reports the
//! rest, so the steps after it see only files with both descriptors.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use blockio::{OpenRequest, PathAt};

use super::super::entry::{Ctx, DirPair, Entry};
use super::super::quote;
use super::destination::{create_dst, created_failed};
use super::job::{as_regular, first_wave, fstat, FileCopy, Target};
use crate::copy;

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
            OpenRequest::new(PathAt::in_dir(&*dirs.src, &e.src_name))
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
                // Listed without its attributes, in a directory the copier
                // may read but not search: GNU's look at it fails first.
                let unreachable = !e.stated()
                    && blockio::errno(&err) == Some(libc::EACCES)
                    && rustix::fs::statat(
                        &dirs.src,
                        e.src_name.as_c_str(),
                        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .is_err_and(|e| e == rustix::io::Errno::ACCESS);
                let what = if unreachable {
                    format!("cannot stat {}", quote(&src))
                } else {
                    format!("cannot open {} for reading", quote(&src))
                };
                errors.report(what, Some(err));
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
                        copy::say(ctx.opts, format_args!("removed {}", quote(&dst_path)));
                    }
                    let backup = dst.backup.as_deref();
                    copy::say_copied(ctx.opts, &pair.src_of(&e.src_name), &dst_path, backup);
                }
                jobs.push(FileCopy {
                    e,
                    stream: target == Target::Stream || e.kind() != libc::S_IFREG,
                    src,
                    dst: dst.fd,
                    direct: false,
                    created: dst.created,
                    listed: dst.listed,
                    backup: dst
                        .backup
                        .as_deref()
                        .and_then(|b| b.file_name())
                        .map(copy::cname),
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
