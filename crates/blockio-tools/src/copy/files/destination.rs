//! One destination file: created, or the file already at its name judged
//! and opened, replaced, kept aside (`-b`) or kept (`-n`, `-u`, `-i`), and
//! hard links of one source made links of one copy (`-a`). These are GNU
//! `cp`'s rules for what a copy may do to what is in its way; they decide
//! per name, before a byte is written, so they live apart from how the
//! bytes move. Failures are reported in GNU's words.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;

use super::super::at::{self, cname};
use super::super::backup::{backup_is_source, make_backup};
use super::super::entry::{statx_id, Ctx, DirPair, Entry, FirstCopy, NameAt};
use super::super::in_the_way::{in_the_way, InTheWay};
use super::super::messages::{say, say_copied};
use super::super::options::{Backup, CopyOptions, Update};
use super::super::overwrite::{self, keep_existing, keep_unwritable};
use super::super::unfinished;
use super::job::{fstat, Target};
use crate::quote::quote;

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
    if !decided
        && keep_existing(
            ctx.opts,
            overwrite::mtime(&e.st),
            overwrite::mtime(&st),
            &path(),
        )
    {
        ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
        let by_update =
            ctx.opts.update == Update::Older && overwrite::mtime(&st) >= overwrite::mtime(&e.st);
        return if by_update {
            Existing::KeptByUpdate
        } else {
            Existing::Refused
        };
    }
    let regular = FileType::from_raw_mode(st.stx_mode.into()) == FileType::RegularFile;
    // Not with `--attributes-only`, which writes no data, as GNU's.
    if regular && ctx.opts.preserve.links && st.stx_nlink > 1 && !ctx.opts.attributes_only {
        let (dir, name) = dirs.dst_at(&e.dst_name);
        let made = at::unlink(dir, &name).and_then(|()| {
            unfinished::created(dirs, &e.dst_name, None, e.id(), None, || {
                let d = at::create(dir, &name, true, create_mode(ctx.opts, e), false)?;
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
    let excl = opts.no_clobber || opts.update == Update::None;
    let replaces = (opts.backup != Backup::None || opts.remove_destination) && !excl;
    if replaces && same_entry(pair, e) {
        // Backing up or removing the destination would move or remove
        // the source itself (reached through a bind mount of its
        // directory): GNU's same-file refusal.
        report_same_file(ctx, pair, e);
        return Ok(None);
    }
    let Some(mut room) = make_room(ctx, pair, e, excl)? else {
        return Ok(None);
    };
    let decided = match judged_before_open(ctx, pair, e, excl) {
        Some(true) => {
            ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        Some(false) => true,
        None => false,
    };
    // With `-L` two links to one file are two names of it too, as GNU
    // sees them.
    if !(ctx.opts.preserve.links && (e.st.stx_nlink > 1 || e.follow_src)) {
        let mut dst = create_named(ctx, pair, e, excl, &mut room)?;
        return Ok(match existing(ctx, pair, e, &mut dst, decided) {
            Existing::Write(target) => Some((dst, target)),
            Existing::KeptByUpdate | Existing::Refused => None,
        });
    }
    link_or_create(ctx, pair, e, excl, decided, room)
}

/// GNU's refusal of a copy onto its own source.
fn report_same_file(ctx: &Ctx<'_>, pair: &DirPair, e: &Entry) {
    let what = format!(
        "{} and {} are the same file",
        quote(&pair.src_of(&e.src_name)),
        quote(&pair.dst_of(&e.dst_name))
    );
    ctx.errors.report(what, None);
}

/// What `-b` left of the name a copy is made under: the path the file
/// that was there is kept under, and the listing of that file, which a
/// signal puts back until the copy under its name is listed in its place.
#[derive(Default)]
struct Room {
    /// The path the file that was there is kept under.
    backup: Option<std::path::PathBuf>,
    /// Its listing, until the copy is listed in its place.
    aside: Option<unfinished::Unfinished>,
}

/// Makes room for `e`'s copy: with `-b` the file in the way is kept
/// aside, with `--remove-destination` removed. `None` when the copy is
/// refused (reported); an `EEXIST` error when `-u` or `-i` keeps the file.
fn make_room(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    e: &Entry,
    excl: bool,
) -> io::Result<Option<Room>> {
    let opts = ctx.opts;
    if excl {
        return Ok(Some(Room::default()));
    }
    if opts.remove_destination && opts.backup == Backup::None {
        remove_destination(ctx, pair, e)?;
        return Ok(Some(Room::default()));
    }
    if opts.backup == Backup::None {
        return Ok(Some(Room::default()));
    }
    // With `-a`, a second name of a file already copied is made a link to
    // that copy whatever `-u` says of the file in its way, as GNU's `cp`
    // does (coreutils' copy.c: "we currently replace DST_NAME
    // unconditionally"); with `-b` that file is kept as the backup first.
    let keep = if links_to_a_copy(ctx, e) {
        link_over(ctx, pair, e) == LinkOver::Keep
    } else {
        kept(ctx, pair, e)?
    };
    if keep {
        return Err(Errno::EXIST.into());
    }
    // (Listing the directory for a numbered backup needs it open: by
    // path, for the moment.)
    let dir = pair.dst_dir()?;
    if backup_is_source(opts, &e.src_name, e.id(), &dir, &e.dst_name) {
        let what = format!(
            "backing up {} might destroy source;  {} not copied",
            quote(&pair.dst_of(&e.dst_name)),
            quote(&pair.src_of(&e.src_name))
        );
        ctx.errors.report(what, None);
        return Ok(None);
    }
    let (backup, aside) = unfinished::kept_aside(pair, &e.dst_name, e.id(), || {
        make_backup(opts, &dir, &pair.dst_path, &e.dst_name)
    })
    .map_err(|err| in_the_way("cannot backup", err))?;
    Ok(Some(Room { backup, aside }))
}

/// Whether `e` is a second name of a file already copied (`-a`).
fn links_to_a_copy(ctx: &Ctx<'_>, e: &Entry) -> bool {
    ctx.opts.preserve.links
        && (e.st.stx_nlink > 1 || e.follow_src)
        && ctx
            .links
            .lock()
            .expect("hard link table lock")
            .contains_key(&e.id())
}

/// Creates `e`'s copy (or opens the file there), listed as unfinished
/// when this made it, with the file `-b` kept aside in `room`.
fn create_named(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    e: &Entry,
    excl: bool,
    room: &mut Room,
) -> io::Result<at::Dest> {
    let opts = ctx.opts;
    let mode = create_mode(opts, e);
    let kept = room.backup.as_ref().and_then(|b| b.file_name()).map(cname);
    let (dir, name) = pair.dst_at(&e.dst_name);
    let (mut d, listed) = unfinished::created(
        pair,
        &e.dst_name,
        kept.as_ref(),
        e.id(),
        room.aside.take(),
        || {
            let d = if e.follow_dst {
                at::create_following(dir, &name, excl, mode, opts.force)
            } else {
                at::create(dir, &name, excl, mode, opts.force)
            }?;
            let made = d.created;
            Ok((d, made))
        },
    )?;
    d.backup = room.backup.clone();
    d.listed = listed;
    Ok(d)
}

/// `-a`: `e`'s copy, a file of several names: a hard link to the copy of
/// an earlier name of it, or made as the copy later names link to.
fn link_or_create(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    e: &Entry,
    excl: bool,
    decided: bool,
    mut room: Room,
) -> io::Result<Option<(at::Dest, Target)>> {
    // Held while the first copy is created, so a second name of the file
    // never links to a copy that does not exist yet.
    let mut links = ctx.links.lock().expect("hard link table lock");
    if let Some(first) = links.get(&e.id()) {
        let first = first.clone();
        drop(links);
        link_to_first(ctx, pair, e, &first, room)?;
        return Ok(None);
    }
    let mut dst = create_named(ctx, pair, e, excl, &mut room)?;
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

/// Makes `e`'s copy a hard link to `first`, the copy of an earlier name
/// of the same file, replacing what is in the way as GNU's `cp` does
/// (never the source itself), and says so.
fn link_to_first(
    ctx: &Ctx<'_>,
    pair: &Arc<DirPair>,
    e: &Entry,
    first: &FirstCopy,
    mut room: Room,
) -> io::Result<()> {
    let opts = ctx.opts;
    let (dir, name) = pair.dst_at(&e.dst_name);
    let mut link = || {
        unfinished::linked(pair, &e.dst_name, e.id(), room.aside.take(), || {
            first.link_as(dir, &name)
        })
    };
    let mut removed = false;
    let mut quietly = false;
    match link() {
        Err(err) if Errno::from_io_error(&err) == Some(Errno::EXIST) && !opts.no_clobber => {
            // The name in the way may be the source itself (another of
            // its hard links): never removed.
            if through_the_copy(pair, e).is_ok_and(|st| (st.st_dev, st.st_ino) == e.id()) {
                report_same_file(ctx, pair, e);
                return Ok(());
            }
            match link_over(ctx, pair, e) {
                LinkOver::Keep => {
                    ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                LinkOver::ReplaceQuietly => quietly = true,
                LinkOver::Replace => {}
            }
            at::unlink(dir, &name)?;
            removed = true;
            link()?;
        }
        r => r?,
    }
    if !quietly {
        let (src, dst) = (pair.src_of(&e.src_name), pair.dst_of(&e.dst_name));
        say_copied(opts, &src, &dst, room.backup.as_deref());
    }
    if removed {
        // GNU's words for the name the link replaced, after the line.
        let dst = pair.dst_of(&e.dst_name);
        say(opts, format_args!("removed {}", quote(&dst)));
    }
    ctx.progress.files.fetch_add(1, Ordering::Relaxed);
    Ok(())
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
    let (dir, name) = pair.dst_at(&e.dst_name);
    let Ok(st) = rustix::fs::statat(dir, &*name, AtFlags::SYMLINK_NOFOLLOW) else {
        return LinkOver::Replace;
    };
    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
    if opts.update == Update::Older && mtime >= overwrite::mtime(&e.st) {
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
    if excl || (opts.update == Update::All && opts.ask.is_none()) {
        return None;
    }
    let flags = if e.follow_dst {
        rustix::fs::AtFlags::empty()
    } else {
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW
    };
    let (dir, name) = pair.dst_at(&e.dst_name);
    let st = rustix::fs::statat(dir, &*name, flags).ok()?;
    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
    let dst = pair.dst_of(&e.dst_name);
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Fifo => {
            Some(keep_existing(opts, overwrite::mtime(&e.st), mtime, &dst))
        }
        rustix::fs::FileType::Directory | rustix::fs::FileType::Symlink => None,
        _ if opts.ask.is_some() => {
            let writable =
                rustix::fs::accessat(dir, &*name, rustix::fs::Access::WRITE_OK, AtFlags::EACCESS)
                    .is_ok();
            if writable {
                return None;
            }
            Some(keep_unwritable(
                opts,
                overwrite::mtime(&e.st),
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
    let (dir, name) = pair.dst_at(&e.dst_name);
    let st = match rustix::fs::statat(dir, &*name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(false),
        Err(err) => return Err(err.into()),
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        return Ok(false);
    }
    let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
    let dst = pair.dst_of(&e.dst_name);
    Ok(keep_existing(
        ctx.opts,
        overwrite::mtime(&e.st),
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
        return Err(Errno::EXIST.into());
    }
    let (dir, name) = pair.dst_at(&e.dst_name);
    match rustix::fs::unlinkat(dir, &*name, AtFlags::empty()) {
        Ok(()) => {
            say(ctx.opts, format_args!("removed {}", quote(&dst)));
            Ok(())
        }
        Err(Errno::NOENT) => Ok(()),
        // A directory: creating the copy reports it, as GNU does.
        Err(Errno::ISDIR) => Err(Errno::ISDIR.into()),
        Err(err) => Err(in_the_way("cannot remove", err)),
    }
}

/// Whether the destination of `e` (a symbolic link) leads to the source
/// file itself.
fn leads_to_the_source(dirs: &DirPair, e: &Entry) -> bool {
    through_the_copy(dirs, e).is_ok_and(|st| (st.st_dev, st.st_ino) == e.id())
}

/// What `e`'s copy names, looked at through a link there.
fn through_the_copy(dirs: &DirPair, e: &Entry) -> rustix::io::Result<rustix::fs::Stat> {
    let (dir, name) = dirs.dst_at(&e.dst_name);
    rustix::fs::statat(dir, &*name, AtFlags::empty())
}

/// Whether `e`'s copy is a symbolic link.
fn is_symlink(dirs: &DirPair, e: &Entry) -> bool {
    let (dir, name) = dirs.dst_at(&e.dst_name);
    at::is_symlink(dir, &name)
}

/// Reports a copy that could not be created (or skips it, with `-n`).
pub(super) fn created_failed(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry, err: io::Error) {
    let dst = dirs.dst_of(&e.dst_name);
    if let Some(w) = err.get_ref().and_then(|x| x.downcast_ref::<InTheWay>()) {
        let what = format!("{} {}", w.what, quote(&dst));
        return ctx
            .errors
            .report(what, Some(io::Error::from_raw_os_error(w.errno)));
    }
    let judged = match Errno::from_io_error(&err) {
        Some(Errno::EXIST) => exists(ctx, dirs, e),
        Some(Errno::ISDIR) => {
            // `-u` looks at the times first, and `-i` asks, as GNU's do,
            // before saying a directory is in the way.
            let kept = (ctx.opts.update == Update::Older || ctx.opts.ask.is_some())
                && existing_is_kept(ctx, dirs, e, &dst);
            if kept {
                Judged::Skipped
            } else {
                let what = format!(
                    "cannot overwrite directory {} with non-directory",
                    quote(&dst)
                );
                Judged::Failed(what, None)
            }
        }
        Some(Errno::LOOP) if is_symlink(dirs, e) => a_link_in_the_way(ctx, dirs, e),
        _ => Judged::Other,
    };
    match judged {
        Judged::Skipped => {
            ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
        }
        Judged::Failed(what, errno) => ctx.errors.report(what, errno.map(io::Error::from)),
        Judged::Other => {
            // GNU says what it copies before it opens the copy.
            say_copied(ctx.opts, &dirs.src_of(&e.src_name), &dst, None);
            let what = format!("cannot create regular file {}", quote(&dst));
            ctx.errors.report(what, Some(err));
        }
    }
}

/// What a copy that could not be created comes to, in GNU's words.
enum Judged {
    /// Kept by `-n`, `-u` or `-i`: counted as skipped.
    Skipped,
    /// Reported, with what, and why if the system said.
    Failed(String, Option<Errno>),
    /// The creation's own error, reported as such.
    Other,
}

/// A copy not made because a file is there (`EEXIST`: `-n`, `-u` or `-i`
/// kept it), or because `-n` met a link there that leads nowhere or into
/// a loop.
fn exists(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry) -> Judged {
    let opts = ctx.opts;
    if opts.no_clobber && is_symlink(dirs, e) {
        let dst = dirs.dst_of(&e.dst_name);
        match through_the_copy(dirs, e) {
            // Onto a link in a loop: GNU's look through it fails first.
            Err(Errno::LOOP) => {
                return Judged::Failed(format!("cannot stat {}", quote(&dst)), Some(Errno::LOOP))
            }
            // Onto a link that leads nowhere: GNU's refusal, not a skip
            // (nothing is there to keep).
            Err(Errno::NOENT) => {
                let what = format!("not writing through dangling symlink {}", quote(&dst));
                return Judged::Failed(what, None);
            }
            _ => {}
        }
    }
    if opts.no_clobber || opts.update != Update::All || opts.ask.is_some() {
        Judged::Skipped
    } else {
        Judged::Other
    }
}

/// A copy not made because a symbolic link is in its way (`ELOOP`), said
/// as GNU says it: kept by `-u` when what it leads to is newer, the source
/// itself, a link this copy made, a loop, or a link not written through.
fn a_link_in_the_way(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry) -> Judged {
    let dst = dirs.dst_of(&e.dst_name);
    let to_source = leads_to_the_source(dirs, e);
    // `-u` looks at the times first, through the link as GNU's does: what
    // it leads to is newer, so nothing is written. A link to the source
    // itself is "the same file" first, as GNU's order is.
    if ctx.opts.update == Update::Older && !to_source && existing_is_kept(ctx, dirs, e, &dst) {
        return Judged::Skipped;
    }
    let src = dirs.src_of(&e.src_name);
    if to_source {
        // Found before GNU says what it copies, as here.
        let what = format!("{} and {} are the same file", quote(&src), quote(&dst));
        return Judged::Failed(what, None);
    }
    let made_here = ctx
        .made_links
        .as_ref()
        .is_some_and(|made| made.lock().expect("made links lock").contains(&dst));
    if made_here {
        // A link this copy made (`cp -dR a/1 b/1 c`, both named `1`):
        // GNU's words.
        let what = format!(
            "will not copy {} through just-created symlink {}",
            quote(&src),
            quote(&dst)
        );
        return Judged::Failed(what, None);
    }
    let through = through_the_copy(dirs, e);
    if let Err(Errno::LOOP) = through {
        // A loop of links: GNU's look through it fails first.
        return Judged::Failed(format!("cannot stat {}", quote(&dst)), Some(Errno::LOOP));
    }
    say_copied(ctx.opts, &src, &dst, None);
    // GNU's words: "dangling" when the link leads nowhere.
    let nowhere = through.is_err_and(|err| err == Errno::NOENT);
    let dangling = if e.follow_dst || nowhere {
        "dangling "
    } else {
        ""
    };
    Judged::Failed(
        format!("not writing through {dangling}symlink {}", quote(&dst)),
        None,
    )
}

/// Whether `-u` or `-i` keeps what is at `e`'s destination, looked at
/// through a link as GNU's `cp` looks (its time against the source's, or
/// the user's answer).
fn existing_is_kept(ctx: &Ctx<'_>, dirs: &DirPair, e: &Entry, dst: &std::path::Path) -> bool {
    through_the_copy(dirs, e).is_ok_and(|st| {
        let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
        keep_existing(ctx.opts, overwrite::mtime(&e.st), mtime, dst)
    })
}

/// Whether `e`'s destination is the source's own directory entry: the
/// same name in the same directory (reached through a bind mount), as
/// GNU's `same_nameat` tells it.
fn same_entry(pair: &DirPair, e: &Entry) -> bool {
    let id = |st: rustix::fs::Stat| (st.st_dev, st.st_ino);
    let dir_of = |(dir, path): NameAt<'_>| {
        if !pair.is_by_path() {
            return rustix::fs::fstat(dir).ok();
        }
        // The directory the name is in, looked at by its path.
        let path = Path::new(OsStr::from_bytes(path.to_bytes()));
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => rustix::fs::stat(p).ok(),
            _ => rustix::fs::stat(".").ok(),
        }
    };
    let (dir, name) = pair.dst_at(&e.dst_name);
    e.src_name == e.dst_name
        && rustix::fs::statat(dir, &*name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| id(st) == e.id())
        && match (
            dir_of(pair.src_at(&e.src_name)),
            dir_of(pair.dst_at(&e.dst_name)),
        ) {
            (Some(a), Some(b)) => id(a) == id(b),
            _ => false,
        }
}
