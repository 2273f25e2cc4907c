//! The end of a group's copy: each complete copy gets its final length
//! and attributes, the large ones their fsync (`--fsync`), then every
//! file is closed in one batch, the complete copies counted and the
//! others reported, removed when this copy created them (and, with `-b`,
//! the file they replaced put back). Only this step removes a copy, so a
//! failure at any earlier step leaves one decision about it, made here.

use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use blockio::Op;
use rustix::fs::AtFlags;

use super::super::attrs::{minimal_acl_at, set_attrs_at, Node, Say};
use super::super::entry::{Ctx, DirPair};
use super::super::options::Sparse;
use super::super::unfinished;
use super::job::{clone, empty_old, fsync_each, is_sparse, run_batch, FileCopy};
use super::wave::SLOT_ALIGN;
use crate::quote::quote;

/// Gives every complete copy its final length and, with `--preserve`, its
/// attributes.
pub(super) fn finish_files(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [FileCopy<'_>]) {
    for j in jobs.iter_mut().filter(|j| j.failed.is_none()) {
        // Old bytes no write replaced (a copy all holes, or empty): gone
        // now, just before the copy gets its length.
        if !empty_old(j, ctx.opts, dirs) {
            continue;
        }
        // The copy's path, made only for a message.
        let dst = || dirs.dst_of(&j.e.dst_name);
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
        } else if is_sparse(ctx.opts, j.e) || ctx.opts.sparse == Sparse::Always {
            Some((j.e.st.stx_size, "extend"))
        } else {
            None
        };
        if let Some((len, what)) = resize {
            if let Err(e) = rustix::fs::ftruncate(&j.dst, len) {
                j.failed = Some((format!("cannot {what} {}", quote(&dst())), e.into()));
                continue;
            }
        }
        if ctx.opts.preserve.attrs() {
            // A file that was there before may hold any ACL: one the
            // source lacks must go (`-p` onto it), or the copy could be
            // read by users who cannot read the source.
            let may_hold_acls = dirs.dst_default_acl || !j.created;
            let xattrs = Some((Node::Fd(j.src.as_fd()), may_hold_acls));
            let keep = &ctx.opts.preserve;
            let say = Say::in_dirs(ctx, dirs, &j.e.src_name, &j.e.dst_name);
            let set = set_attrs_at(&j.dst, c"", &j.e.st, Some(j.e.mode()), xattrs, keep, &say);
            if let Err(e) = set {
                // The data is complete: report, keep the file (as cp does).
                let what = format!("preserving attributes of {}", quote(&dst()));
                ctx.errors.report(what, Some(e));
            }
        }
        if ctx.opts.default_mode && !ctx.opts.preserve.mode && j.created && dirs.dst_default_acl {
            // No ACL inherited from the new directory stays (GNU's
            // `set_acl` with the default mode).
            if let Err(e) = minimal_acl_at(&j.dst, c"", 0o666 & !ctx.umask) {
                let what = format!("setting permissions for {}", quote(&dst()));
                ctx.errors.report(what, Some(e));
            }
        }
    }
}

/// With `--fsync`, fsyncs the files large enough to be made durable one by
/// one (see [`super::job::FSYNC_EACH_MIN`]), in one batch.
pub(super) fn fsync_large(ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [FileCopy<'_>]) {
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
pub(super) fn close_and_report(ctx: &Ctx<'_>, dirs: &DirPair, jobs: Vec<FileCopy<'_>>) {
    let mut srcs = Vec::with_capacity(jobs.len());
    let mut dsts = Vec::with_capacity(jobs.len());
    let mut finished = Vec::with_capacity(jobs.len());
    for j in jobs {
        srcs.push(j.src);
        dsts.push(j.dst);
        finished.push((j.e, j.failed, j.created, j.stream, j.backup, j.listed));
    }
    let _ = ctx.engine.close_batch(srcs);
    let closed = ctx.engine.close_batch(dsts);
    for (k, (e, failed, ..)) in finished.iter_mut().enumerate() {
        let err = match &closed {
            Ok(rs) => rs[k].as_ref().err().map(clone),
            Err(err) => Some(clone(err)),
        };
        if let (None, Some(err)) = (&failed, err) {
            let dst = dirs.dst_of(&e.dst_name);
            *failed = Some((format!("error closing {}", quote(&dst)), err));
        }
    }
    // Each file's listing ends with its iteration (`listed` dropped):
    // complete, or removed, under the creation lock (`unfinished::undone`),
    // then reported.
    for (e, failed, created, stream, backup, listed) in finished {
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
            unfinished::undone(listed, || {
                removed(dirs, &e.dst_name, backup.as_deref(), &what)
            })
        };
        ctx.errors.report(fate, Some(err));
    }
}

/// Removes the incomplete copy `name` that this copy created (`-b`: and
/// puts back the file kept aside as `backup`, as GNU puts it back: a
/// failed copy leaves things as they were); the failure `what`, with what
/// became of the copy.
fn removed(dirs: &DirPair, name: &CStr, backup: Option<&CStr>, what: &str) -> String {
    let dst = quote(&dirs.dst_of(name));
    let (dir, at_name) = dirs.dst_at(name);
    if let Err(u) = rustix::fs::unlinkat(dir, &*at_name, AtFlags::empty()) {
        let u = io::Error::from(u);
        return format!("{what} (the incomplete copy {dst} could not be removed: {u})");
    }
    let Some(kept) = backup else {
        return format!("{what} (the incomplete copy {dst} was removed)");
    };
    let (kept_dir, kept_name) = dirs.dst_at(kept);
    match rustix::fs::renameat(kept_dir, &*kept_name, dir, &*at_name) {
        Ok(()) => format!(
            "{what} (the incomplete copy {dst} was removed and the file it replaced put back)"
        ),
        Err(r) => format!(
            "{what} (the incomplete copy {dst} was removed; the file it replaced could not be put back from {}: {})",
            quote(&dirs.dst_of(kept)),
            io::Error::from(r)
        ),
    }
}
