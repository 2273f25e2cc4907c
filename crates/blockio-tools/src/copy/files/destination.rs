//! One destination file: created, or the file already at its name judged
//! and opened, replaced, kept aside (`-b`) or kept (`-n`, `-u`, `-i`), and
//! hard links of one source made links of one copy (`-a`). These are GNU
//! `cp`'s rules for what a copy may do to what is in its way; they decide
//! per name, before a byte is written, so they live apart from how the
//! bytes move. Failures are reported in GNU's words.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::at;
use super::super::entry::{statx_id, Ctx, DirPair, Entry, FirstCopy};
use super::super::unfinished;
use super::super::{quote, CopyOptions};
use super::job::{fstat, Target};
use crate::copy;

/// What becomes of an existing destination (see [`existing`]).
enum Existing {
    /// Written: as a stream (a FIFO, a device) or as a regular file, made
    /// anew or emptied just before its new bytes are written.
    Write(Target),
    /// Kept as it is by `-u`, not older than the source: it stands for
    /// the copy, and the source's other names are linked to it.
    KeptByUpdate,
    /// Not written, and not a copy: the source itself (reported), kept
    /// by `-i`'s answer, or an error reported.
    Refused,
}

/// An existing destination, opened as it is: refused (reported) when it
/// is the source itself (a hard link to it, or the file a link named on
/// the command line leads to), emptied when it is a regular file, though
/// only once its new bytes are about to be written (`Write(Target::Old)`,
/// see `FileCopy::old`); any other kind (a FIFO, a device) is written into
/// as it is (`Write(Target::Stream)`), as `cp` does, never replaced. Kept as it is
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
    dirs: &Arc<DirPair>,
    e: &Entry,
    dst: &mut at::Dest,
    decided: bool,
) -> Existing {
    if dst.created {
        return Existing::Write(Target::Ready);
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
    if !decided && copy::keep_existing(ctx.opts, copy::mtime(&e.st), copy::mtime(&st), &path()) {
        ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
        let by_update =
            ctx.opts.update == copy::Update::Older && copy::mtime(&st) >= copy::mtime(&e.st);
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
            unfinished::created(dirs, &e.dst_name, None, e.id(), None, || {
                let d = at::create(
                    &dirs.dst,
                    &e.dst_name,
                    true,
                    create_mode(ctx.opts, e),
                    false,
                )?;
                Ok((d, true))
            })
        });
        match made {
            Ok((fresh, listed)) => {
                dst.fd = fresh.fd;
                dst.created = true;
                dst.removed = true;
                dst.listed = listed;
                return Existing::Write(Target::Ready);
            }
            Err(err) => {
                let what = format!("cannot replace {}", quote(&path()));
                ctx.errors.report(what, Some(err));
                return Existing::Refused;
            }
        }
    }
    if !regular {
        return Existing::Write(Target::Stream);
    }
    if ctx.opts.attributes_only {
        return Existing::Write(Target::Ready);
    }
    Existing::Write(Target::Old)
}

/// The permission bits a copy is created with. With `-p` the owner's bits
/// alone: until its owner, ACL and mode are set at the end, nobody else
/// may open it (a set-user-ID or group-writable source must not be so,
/// owned by the copier, even for a moment).
pub(super) fn create_mode(opts: &CopyOptions, e: &Entry) -> u32 {
    if opts.default_mode {
        0o666
    } else if opts.preserve.mode {
        e.mode() & 0o700
    } else {
        e.mode() & 0o777
    }
}

/// Creates (or opens, to overwrite: see [`existing`]) the copy of `e`,
/// with how it is written; `None` when there is nothing
/// to write: it was made a hard link to an earlier copy of the same file
/// (`-a`), or the existing destination is refused or kept (reported).
pub(super) fn create_dst(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    e: &Entry,
) -> io::Result<Option<(at::Dest, Target)>> {
    let opts = ctx.opts;
    let excl = opts.no_clobber || opts.update == copy::Update::None;
    let mode = create_mode(opts, e);
    let mut backup = None;
    // The listing of the file `-b` moved aside, which a signal puts back
    // until the copy under its name is listed in its place.
    let mut aside = None;
    let replaces = (opts.backup != copy::Backup::None || opts.remove_destination) && !excl;
    if replaces && same_entry(pair, e) {
        // Backing up or removing the destination would move or remove
        // the source itself (reached through a bind mount of its
        // directory): GNU's same-file refusal.
        let what = format!(
            "{} and {} are the same file",
            quote(&pair.src_of(&e.src_name)),
            quote(&pair.dst_of(&e.dst_name))
        );
        ctx.errors.report(what, None);
        return Ok(None);
    }
    // With `-a`, a second name of a file already copied is made a link to
    // that copy whatever `-u` says of the file in its way, as GNU's `cp`
    // does (coreutils' copy.c: "we currently replace DST_NAME
    // unconditionally"); with `-b` that file is kept as the backup first.
    let links_to_a_copy = || {
        opts.preserve.links
            && (e.st.stx_nlink > 1 || e.follow_src)
            && ctx
                .links
                .lock()
                .expect("hard link table lock")
                .contains_key(&e.id())
    };
    if opts.backup != copy::Backup::None && !excl {
        let keep = if links_to_a_copy() {
            link_over(ctx, pair, e) == LinkOver::Keep
        } else {
            kept(ctx, pair, e)?
        };
        if keep {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        if copy::backup_is_source(opts, &e.src_name, e.id(), &pair.dst, &e.dst_name) {
            let what = format!(
                "backing up {} might destroy source;  {} not copied",
                quote(&pair.dst_of(&e.dst_name)),
                quote(&pair.src_of(&e.src_name))
            );
            ctx.errors.report(what, None);
            return Ok(None);
        }
        (backup, aside) = unfinished::kept_aside(pair, &e.dst_name, e.id(), || {
            copy::make_backup(opts, &pair.dst, &pair.dst_path, &e.dst_name)
        })
        .map_err(|err| copy::in_the_way("cannot backup", err))?;
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
    let mut create = || {
        let kept = backup.as_ref().and_then(|b| b.file_name()).map(copy::cname);
        let (mut d, listed) = unfinished::created(
            pair,
            &e.dst_name,
            kept.as_ref(),
            e.id(),
            aside.take(),
            || {
                let d = if e.follow_dst {
                    at::create_following(&pair.dst, &e.dst_name, excl, mode, opts.force)
                } else {
                    at::create(&pair.dst, &e.dst_name, excl, mode, opts.force)
                }?;
                let made = d.created;
                Ok((d, made))
            },
        )?;
        d.backup = backup.clone();
        d.listed = listed;
        Ok::<_, io::Error>(d)
    };
    // With `-L` two links to one file are two names of it too, as GNU
    // sees them.
    if !(ctx.opts.preserve.links && (e.st.stx_nlink > 1 || e.follow_src)) {
        let mut dst = create()?;
        return Ok(match existing(ctx, pair, e, &mut dst, decided) {
            Existing::Write(target) => Some((dst, target)),
            Existing::KeptByUpdate | Existing::Refused => None,
        });
    }
    // Held while the first copy is created, so a second name of the file
    // never links to a copy that does not exist yet.
    let mut links = ctx.links.lock().expect("hard link table lock");
    if let Some(first) = links.get(&e.id()) {
        let mut removed = false;
        let mut quietly = false;
        let mut link = || {
            unfinished::linked(pair, &e.dst_name, e.id(), aside.take(), || {
                first.link_as(&pair.dst, &e.dst_name)
            })
        };
        let r = match link() {
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) && !ctx.opts.no_clobber => {
                // The name in the way may be the source itself (another
                // of its hard links): never removed.
                let same =
                    through_the_copy(&pair.dst, e).is_ok_and(|st| (st.st_dev, st.st_ino) == e.id());
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
                match link_over(ctx, pair, e) {
                    LinkOver::Keep => {
                        ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
                        return Ok(None);
                    }
                    LinkOver::ReplaceQuietly => quietly = true,
                    LinkOver::Replace => {}
                }
                at::unlink(&pair.dst, &e.dst_name).and_then(|()| {
                    removed = true;
                    link()
                })
            }
            r => r,
        };
        drop(links);
        r?;
        if !quietly {
            copy::say_copied(
                opts,
                &pair.src_of(&e.src_name),
                &pair.dst_of(&e.dst_name),
                backup.as_deref(),
            );
        }
        if removed {
            // GNU's words for the name the link replaced, after the line.
            copy::say(
                opts,
                format_args!("removed {}", quote(&pair.dst_of(&e.dst_name))),
            );
        }
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
        Existing::Write(target) => {
            links.insert(e.id(), FirstCopy::of(pair, &e.dst_name));
            Ok(Some((dst, target)))
        }
        Existing::KeptByUpdate => {
            links.insert(e.id(), FirstCopy::of(pair, &e.dst_name));
            Ok(None)
        }
        Existing::Refused => Ok(None),
    }
}

/// What becomes of an existing name that a second name of a file already
/// copied (`-a`) would be linked over, as GNU's `cp` decides it: `-u`
/// links over a name not older than the source whatever it holds, with no
/// line for the copy (coreutils' copy.c: "we currently replace DST_NAME
/// unconditionally"); otherwise `-i` asks first.
#[derive(PartialEq, Eq)]
enum LinkOver {
    Replace,
    ReplaceQuietly,
    Keep,
}

fn link_over(ctx: &Ctx<'_>, pair: &DirPair, e: &Entry) -> LinkOver {
    let opts = ctx.opts;
    let Ok(st) = rustix::fs::statat(
        &pair.dst,
        e.dst_name.as_c_str(),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    ) else {
        return LinkOver::Replace;
    };
    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
    if opts.update == copy::Update::Older && mtime >= copy::mtime(&e.st) {
        return LinkOver::ReplaceQuietly;
    }
    let path = pair.dst_of(&e.dst_name);
    match opts.ask {
        Some(ask) if !ask(&format!("overwrite {}? ", quote(&path))) => LinkOver::Keep,
        _ => LinkOver::Replace,
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
    if excl || (opts.update == copy::Update::All && opts.ask.is_none()) {
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
            Some(copy::keep_existing(opts, copy::mtime(&e.st), mtime, &dst))
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
            Some(copy::keep_unwritable(
                opts,
                copy::mtime(&e.st),
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
    Ok(copy::keep_existing(
        ctx.opts,
        copy::mtime(&e.st),
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
            copy::say(ctx.opts, format_args!("removed {}", quote(&dst)));
            Ok(())
        }
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        // A directory: creating the copy reports it, as GNU does.
        Err(err) if err.raw_os_error() == Some(libc::EISDIR) => Err(err),
        Err(err) => Err(copy::in_the_way("cannot remove", err)),
    }
}

/// Whether the destination of `e` (a symbolic link) leads to the source
/// file itself.
fn leads_to_the_source(dirs: &DirPair, e: &Entry) -> bool {
    through_the_copy(&dirs.dst, e).is_ok_and(|st| (st.st_dev, st.st_ino) == e.id())
}

/// What `e`'s copy names, looked at through a link there, in `dst`.
fn through_the_copy(dst: &impl AsFd, e: &Entry) -> rustix::io::Result<rustix::fs::Stat> {
    rustix::fs::statat(dst, e.dst_name.as_c_str(), rustix::fs::AtFlags::empty())
}

/// Reports a copy that could not be created (or skips it, with `-n`).
pub(super) fn created_failed(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry, err: io::Error) {
    let dst = dirs.dst_of(&e.dst_name);
    if let Some(w) = err
        .get_ref()
        .and_then(|x| x.downcast_ref::<copy::InTheWay>())
    {
        let what = format!("{} {}", w.what, quote(&dst));
        return ctx
            .errors
            .report(what, Some(io::Error::from_raw_os_error(w.errno)));
    }
    let msg = match err.raw_os_error() {
        // `-n` onto a link in a loop: GNU's look through it fails first.
        Some(libc::EEXIST)
            if ctx.opts.no_clobber
                && at::is_symlink(&dirs.dst, &e.dst_name)
                && through_the_copy(&dirs.dst, e)
                    .is_err_and(|err| err == rustix::io::Errno::LOOP) =>
        {
            let what = format!("cannot stat {}", quote(&dst));
            let err = io::Error::from_raw_os_error(libc::ELOOP);
            return ctx.errors.report(what, Some(err));
        }
        // `-n` onto a link that leads nowhere: GNU's refusal, not a skip
        // (nothing is there to keep).
        Some(libc::EEXIST)
            if ctx.opts.no_clobber
                && at::is_symlink(&dirs.dst, &e.dst_name)
                && through_the_copy(&dirs.dst, e)
                    .is_err_and(|err| err == rustix::io::Errno::NOENT) =>
        {
            format!("not writing through dangling symlink {}", quote(&dst))
        }
        Some(libc::EEXIST)
            if ctx.opts.no_clobber
                || ctx.opts.update != copy::Update::All
                || ctx.opts.ask.is_some() =>
        {
            ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Some(libc::EISDIR) => {
            // `-u` looks at the times first, and `-i` asks, as GNU's do,
            // before saying a directory is in the way.
            let kept = (ctx.opts.update == copy::Update::Older || ctx.opts.ask.is_some())
                && existing_is_kept(ctx, dirs, e, &dst);
            if kept {
                ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            format!(
                "cannot overwrite directory {} with non-directory",
                quote(&dst)
            )
        }
        Some(libc::ELOOP)
            if ctx.opts.update == copy::Update::Older
                && at::is_symlink(&dirs.dst, &e.dst_name)
                && !leads_to_the_source(dirs, e)
                && existing_is_kept(ctx, dirs, e, &dst) =>
        {
            // `-u` looks at the times first, through the link as GNU's
            // does: what it leads to is newer, so nothing is written. A
            // link to the source itself is "the same file" first, as
            // GNU's order is.
            ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Some(libc::ELOOP) if at::is_symlink(&dirs.dst, &e.dst_name) => {
            // A link to the source itself: what GNU says of it.
            if leads_to_the_source(dirs, e) {
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
                let through = through_the_copy(&dirs.dst, e);
                if let Err(rustix::io::Errno::LOOP) = through {
                    // A loop of links: GNU's look through it fails first.
                    let what = format!("cannot stat {}", quote(&dst));
                    let err = io::Error::from_raw_os_error(libc::ELOOP);
                    return ctx.errors.report(what, Some(err));
                }
                copy::say_copied(ctx.opts, &dirs.src_of(&e.src_name), &dst, None);
                // GNU's words: "dangling" when the link leads nowhere.
                let nowhere = through.is_err_and(|err| err == rustix::io::Errno::NOENT);
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
            copy::say_copied(ctx.opts, &dirs.src_of(&e.src_name), &dst, None);
            return ctx.errors.report(
                format!("cannot create regular file {}", quote(&dst)),
                Some(err),
            );
        }
    };
    ctx.errors.report(msg, None);
}

/// Whether `-u` or `-i` keeps what is at `e`'s destination, looked at
/// through a link as GNU's `cp` looks (its time against the source's, or
/// the user's answer).
fn existing_is_kept(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry, dst: &std::path::Path) -> bool {
    through_the_copy(&dirs.dst, e).is_ok_and(|st| {
        let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
        copy::keep_existing(ctx.opts, copy::mtime(&e.st), mtime, dst)
    })
}

/// Whether `e`'s destination is the source's own directory entry: the
/// same name in the same directory (reached through a bind mount), as
/// GNU's `same_nameat` tells it.
fn same_entry(pair: &DirPair, e: &Entry) -> bool {
    let id = |st: rustix::fs::Stat| (st.st_dev, st.st_ino);
    e.src_name == e.dst_name
        && rustix::fs::statat(
            &pair.dst,
            e.dst_name.as_c_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok_and(|st| id(st) == e.id())
        && match (rustix::fs::fstat(&pair.src), rustix::fs::fstat(&pair.dst)) {
            (Ok(a), Ok(b)) => id(a) == id(b),
            _ => false,
        }
}
