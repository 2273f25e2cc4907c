//! What the copy makes as a name rather than by writing data: `-l`/`-s`
//! links to the source, copied symbolic links (one `symlinkat` batch per
//! directory) and special files; and what happens to a file already in
//! their way, by GNU's rules (kept, refused, removed or backed up, and
//! never the source itself).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use blockio::PathAt;
use rustix::fs::FileType;
use rustix::io::Errno;

use super::super::at::{self, cname};
use super::super::attrs::{minimal_acl_at, set_attrs_at, Node, Say};
use super::super::entry::{DirPair, Entry, FirstCopy, NameAt};
use super::super::unfinished::{self, Unfinished};
use super::super::{backup, messages, options, overwrite};
use super::paths::id_of;
use super::walker::Walker;
use crate::quote::quote;

/// What [`Walker::finish_made`] made: a symbolic link, or a FIFO, socket
/// or device node.
#[derive(Clone, Copy)]
pub(super) enum Made {
    Link,
    Special,
}

/// What [`Walker::replace`] did with the file in the way.
pub(super) enum Replace {
    Skip,
    /// Removed, or kept aside under the backup name given (`-b`), with
    /// the listing that puts it back if a signal comes before the name is
    /// made again (held until then; see `unfinished::kept_aside`).
    Removed(Option<PathBuf>, Option<Unfinished>),
    Failed,
}

/// Whether the destination directory of `pair` is the current one (`-s`
/// makes relative links only there, where they lead to their source).
pub(super) fn in_cwd(pair: &DirPair) -> bool {
    match (
        pair.dst_dir().and_then(|d| d.metadata()),
        std::fs::metadata("."),
    ) {
        (Ok(a), Ok(b)) => id_of(&a) == id_of(&b),
        _ => false,
    }
}

/// One `-l` or `-s` link to make, and what is known of it.
struct LinkTo<'p> {
    /// The directories the source is in and the link is made in.
    pair: &'p Arc<DirPair>,
    /// The source, for messages.
    src: PathBuf,
    /// The link, for messages.
    dst: PathBuf,
    /// `-l` (else `-s`).
    hard: bool,
    /// A relative symbolic link made elsewhere than in the current
    /// directory, which would not lead to its source: refused, as GNU
    /// does, once what is in the way has been judged (`-n` and `-u` keep
    /// it without a word).
    relative: bool,
    /// What a symbolic link holds: the source's path.
    target: CString,
}

impl<'p> LinkTo<'p> {
    /// The link of `e`, from `pair`'s source directory to its copy.
    fn new(pair: &'p Arc<DirPair>, e: &Entry, opts: &options::CopyOptions) -> LinkTo<'p> {
        let src = pair.src_of(&e.src_name);
        let hard = opts.link == options::LinkMode::Hard;
        LinkTo {
            pair,
            dst: pair.dst_of(&e.dst_name),
            hard,
            relative: !hard && !src.is_absolute() && !in_cwd(pair),
            target: cname(src.as_os_str()),
            src,
        }
    }

    /// Makes the link of `e`; for a relative one that would be refused,
    /// only whether something is in the way (`EEXIST` if so).
    fn make(&self, e: &Entry) -> rustix::io::Result<()> {
        let (dir, name) = self.pair.dst_at(&e.dst_name);
        if self.relative {
            return match rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                Ok(_) => Err(Errno::EXIST),
                Err(_) => Err(Errno::NOENT),
            };
        }
        if self.hard {
            let flags = if e.follow_src {
                rustix::fs::AtFlags::SYMLINK_FOLLOW
            } else {
                rustix::fs::AtFlags::empty()
            };
            let (src_dir, src_name) = self.pair.src_at(&e.src_name);
            rustix::fs::linkat(src_dir, &*src_name, dir, &*name, flags)
        } else {
            rustix::fs::symlinkat(&self.target, dir, &*name)
        }
    }
}

/// What [`Walker::in_the_way`] decided of the file in a link's way.
enum Way {
    /// No link: reported, skipped, or already there.
    Stop,
    /// Left as it is: the link fails to be made over it.
    Stays,
    /// Removed, or kept aside under the name given, with its listing
    /// (see [`Replace::Removed`]): make the link again.
    Replaced(Option<PathBuf>, Option<Unfinished>),
}

/// Whether the destination of `e` is already a hard link of its source.
fn already_linked(pair: &DirPair, e: &Entry) -> bool {
    let follow = |yes: bool| {
        if yes {
            rustix::fs::AtFlags::empty()
        } else {
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW
        }
    };
    let id = |(dir, name): NameAt<'_>, f| {
        rustix::fs::statat(dir, &*name, follow(f))
            .ok()
            .map(|st| (st.st_dev, st.st_ino))
    };
    let src_id = id(pair.src_at(&e.src_name), e.follow_src);
    src_id.is_some() && src_id == id(pair.dst_at(&e.dst_name), false)
}

/// Whether the names of `e` on both sides are one file (links not
/// followed).
fn same_entry(pair: &DirPair, e: &Entry) -> bool {
    let id = |(dir, name): NameAt<'_>| {
        rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| (st.st_dev, st.st_ino))
    };
    let there = id(pair.dst_at(&e.dst_name));
    there.is_some() && there == id(pair.src_at(&e.src_name))
}

impl Walker<'_> {
    /// `-l`, `-s`: a hard or symbolic link to the source instead of a
    /// copy. An existing destination is an error unless `-f`,
    /// `--remove-destination` or `-b` lets it be replaced (`-n`: kept).
    pub(super) fn link_entry(&self, pair: &Arc<DirPair>, e: &Entry) {
        let l = LinkTo::new(pair, e, self.ctx.opts);
        let mut r = l.make(e);
        if l.relative && r != Err(Errno::EXIST) {
            // GNU says what it is about to do before it refuses.
            messages::say_copied(self.ctx.opts, &l.src, &l.dst, None);
            return self.refuse_relative(&l);
        }
        let mut backup = None;
        if r == Err(Errno::EXIST) {
            // Something is in the way: `-u` and the same-file rule need the
            // source's attributes, which a file known from its directory
            // entry alone does not carry yet.
            let stated;
            let e = if e.stated() {
                e
            } else {
                match self.with_attributes(pair, e) {
                    Some(s) => {
                        stated = s;
                        &stated
                    }
                    None => return,
                }
            };
            match self.in_the_way(&l, e) {
                Way::Stop => return,
                Way::Stays => {}
                // The listing of what was kept aside is held until the
                // link is made in its place.
                Way::Replaced(b, _aside) => {
                    backup = b;
                    r = l.make(e);
                }
            }
        }
        self.linked(&l, r, backup.as_deref());
    }

    /// `e` with its source's attributes, through the engine; `None` after
    /// reporting a failure.
    fn with_attributes(&self, pair: &DirPair, e: &Entry) -> Option<Entry> {
        let flags = if e.follow_src {
            0
        } else {
            libc::AT_SYMLINK_NOFOLLOW
        };
        let src = self.src_dir(pair)?;
        let at = [PathAt::in_dir(&*src, &e.src_name)];
        match self
            .ctx
            .engine
            .stat_batch(&at, flags)
            .map(|mut v| v.remove(0))
        {
            Ok(Ok(st)) => {
                let mut stated = e.clone();
                stated.st = st;
                Some(stated)
            }
            Ok(Err(err)) | Err(err) => {
                let src = pair.src_of(&e.src_name);
                self.report(format!("cannot stat {}", quote(&src)), Some(err));
                None
            }
        }
    }

    /// What to do with a file in the way of the link `l`, in GNU's order:
    /// `-n`, the same file, `-u` (or `-i`), a directory; then replaced
    /// with `-f`, `--remove-destination`, `-b`, or `-i`'s "yes".
    fn in_the_way(&self, l: &LinkTo<'_>, e: &Entry) -> Way {
        let opts = self.ctx.opts;
        if l.hard && already_linked(l.pair, e) {
            // Already a hard link of the source: nothing to do, as GNU.
            return Way::Stop;
        }
        if opts.no_clobber {
            self.ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Way::Stop;
        }
        if !self.may_replace(l, e) {
            return Way::Stop;
        }
        // As GNU 9.1: links not followed, what is in the way of a
        // symbolic link to anything but a regular file is removed first
        // (as with `--remove-destination`), unless it is that very file
        // (a hard link of a source link): then it stays.
        let unlink_first = !l.hard
            && e.kind() != FileType::RegularFile
            && e.never_follows(opts.dereference)
            && opts.backup == options::Backup::None;
        if unlink_first && same_entry(l.pair, e) {
            return Way::Stop;
        }
        if l.relative {
            self.refuse_relative_in_the_way(l, e, unlink_first);
            return Way::Stop;
        }
        // `-il`: a "yes" replaces the file with the link, as GNU's.
        let asked = l.hard && opts.ask.is_some();
        if !(opts.force
            || opts.remove_destination
            || opts.backup != options::Backup::None
            || asked
            || unlink_first)
        {
            return Way::Stays;
        }
        // `-u` and `-i` were asked above: not again.
        match self.replace(l.pair, e, true, true) {
            Replace::Removed(b, aside) => Way::Replaced(b, aside),
            Replace::Skip | Replace::Failed => Way::Stop,
        }
    }

    /// GNU's checks on the file in the way of the link `l`: not the
    /// source itself, not kept by `-u` or `-i`, not a directory. False
    /// when the link is not made (reported, or skipped).
    fn may_replace(&self, l: &LinkTo<'_>, e: &Entry) -> bool {
        let opts = self.ctx.opts;
        let (dir, name) = l.pair.dst_at(&e.dst_name);
        let there = rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
        let kind = there.as_ref().map(|st| FileType::from_raw_mode(st.st_mode));
        // As GNU 9.1: with -s, a hard link of the source in the way is the
        // same file; a link in the way fails to be made ("File exists"),
        // or with -f is made anew, even one that leads to the source.
        let dst_is_link = kind == Ok(FileType::Symlink);
        if !l.hard && !dst_is_link && self.leads_to_source(l.pair, e) {
            let what = format!("{} and {} are the same file", quote(&l.src), quote(&l.dst));
            self.report(what, None);
            return false;
        }
        let kept = there.as_ref().is_ok_and(|st| {
            let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
            overwrite::keep_existing(opts, overwrite::mtime(&e.st), mtime, &l.dst)
        });
        if kept {
            self.ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if kind == Ok(FileType::Directory) {
            let what = format!(
                "cannot overwrite directory {} with non-directory",
                quote(&l.dst)
            );
            self.report(what, None);
            return false;
        }
        true
    }

    /// A relative symbolic link outside the current directory with a file
    /// in its way: GNU removes that file first with
    /// `--remove-destination` (a backup it would make is put back), then
    /// refuses. Each step is said with `-v`, as GNU says it, before the
    /// refusal.
    fn refuse_relative_in_the_way(&self, l: &LinkTo<'_>, e: &Entry, unlink_first: bool) {
        let opts = self.ctx.opts;
        let (pair, src, dst) = (l.pair, &l.src, &l.dst);
        if opts.backup != options::Backup::None {
            self.back_up_and_put_back(l, e);
        } else {
            let (dir, name) = pair.dst_at(&e.dst_name);
            if (opts.remove_destination || unlink_first)
                && rustix::fs::unlinkat(dir, &*name, rustix::fs::AtFlags::empty()).is_ok()
            {
                messages::say(opts, format_args!("removed {}", quote(dst)));
            }
            messages::say_copied(opts, src, dst, None);
        }
        self.refuse_relative(l);
    }

    /// `-b` before a refused relative link: the file in the way kept
    /// aside, then put back. Kept aside listed, and put back with its
    /// listing ended under the creation lock: a signal at any point in
    /// between puts the file back too.
    fn back_up_and_put_back(&self, l: &LinkTo<'_>, e: &Entry) {
        let opts = self.ctx.opts;
        let (pair, src, dst) = (l.pair, &l.src, &l.dst);
        let Some(dir) = self.dst_dir(pair) else {
            return;
        };
        let set_aside = || backup::make_backup(opts, &dir, &pair.dst_path, &e.dst_name);
        match unfinished::kept_aside(pair, &e.dst_name, e.id(), set_aside) {
            Ok((Some(b), aside)) => {
                messages::say_copied(opts, src, dst, Some(&b));
                unfinished::undone(aside, || {
                    let _ = rustix::fs::renameat(
                        &*dir,
                        at::cname(b.file_name().unwrap_or_default()),
                        &*dir,
                        e.dst_name.as_c_str(),
                    );
                });
                messages::say(
                    opts,
                    format_args!("{} -> {} (unbackup)", quote(&b), quote(dst)),
                );
            }
            _ => messages::say_copied(opts, src, dst, None),
        }
    }

    /// GNU's refusal of a relative symbolic link outside the current
    /// directory.
    fn refuse_relative(&self, l: &LinkTo<'_>) {
        self.report(
            format!(
                "{}: can make relative symbolic links only in current directory",
                crate::quote::quote_if_needed(&l.dst)
            ),
            None,
        )
    }

    /// The link `l` made (`r`), said with `-v` and counted, or reported.
    fn linked(&self, l: &LinkTo<'_>, r: rustix::io::Result<()>, backup: Option<&Path>) {
        let opts = self.ctx.opts;
        // GNU says what it is about to do before it fails, too.
        messages::say_copied(opts, &l.src, &l.dst, backup);
        match r {
            Ok(()) => {
                self.ctx.progress.files.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                let kind = if l.hard { "hard" } else { "symbolic" };
                self.report(
                    format!(
                        "cannot create {kind} link {} to {}",
                        quote(&l.dst),
                        quote(&l.src)
                    ),
                    Some(err.into()),
                )
            }
        }
    }

    /// Copies the symbolic links of `pair` as links: their targets read,
    /// then made in one `symlinkat` batch.
    pub(super) fn make_links(&self, pair: &Arc<DirPair>, links: Vec<Entry>) {
        let (Some(src_dir), Some(dst_dir)) = (self.src_dir(pair), self.dst_dir(pair)) else {
            return;
        };
        let mut targets = Vec::with_capacity(links.len());
        let mut ok = Vec::with_capacity(links.len());
        for e in links {
            match at::read_link(&src_dir, &e.src_name) {
                Ok(t) if self.several_names(&e) => {
                    // One at a time: its other names link to it.
                    let make = || at::symlink(&t, &dst_dir, &e.dst_name);
                    self.made_once(pair, &e, Made::Link, make);
                }
                Ok(t) => {
                    targets.push(t);
                    ok.push(e);
                }
                Err(err) => self.report(
                    format!(
                        "cannot read symbolic link {}",
                        quote(&pair.src_of(&e.src_name))
                    ),
                    Some(err),
                ),
            }
        }
        if ok.is_empty() {
            return;
        }
        let reqs: Vec<(PathAt<'_>, &CStr)> = ok
            .iter()
            .zip(&targets)
            .map(|(e, t)| (PathAt::in_dir(&*dst_dir, &e.dst_name), t.as_c_str()))
            .collect();
        let mut turn = self.ctx.creators.enter();
        let made = self.ctx.engine.symlink_batch(&reqs);
        turn.created(reqs.len() as u64);
        drop(turn);
        let made = match made {
            Ok(m) => m,
            Err(e) => {
                return self.report(
                    format!("cannot create symbolic links in {}", quote(&pair.dst_path)),
                    Some(e),
                )
            }
        };
        for ((e, t), r) in ok.iter().zip(&targets).zip(made) {
            self.finish_made(pair, e, Made::Link, r, || {
                at::symlink(t, &dst_dir, &e.dst_name)
            });
        }
    }

    /// FIFOs, sockets and device nodes are made anew, as `cp -r` does;
    /// with `-p` accessible to us alone until their owner and mode are set.
    pub(super) fn special(&self, pair: &Arc<DirPair>, e: &Entry) {
        let rdev = rustix::fs::makedev(e.st.stx_rdev_major, e.st.stx_rdev_minor);
        let perms = if self.ctx.opts.default_mode {
            // As GNU's: the default bits, and the source's special ones.
            0o666 | (e.mode() & 0o7000)
        } else if self.ctx.opts.preserve.mode {
            e.mode() & 0o600
        } else {
            e.mode() & 0o7777
        };
        let Some(dir) = self.dst_dir(pair) else {
            return;
        };
        let make = || at::mknod(&dir, &e.dst_name, e.kind().as_raw_mode() | perms, rdev);
        if self.several_names(e) {
            return self.made_once(pair, e, Made::Special, make);
        }
        self.finish_made(pair, e, Made::Special, make(), make);
    }

    /// With `-a` (`--preserve=links`), whether `e` (a link or special
    /// file) has other names that its copy keeps, as a regular file's.
    fn several_names(&self, e: &Entry) -> bool {
        self.ctx.opts.preserve.links && e.st.stx_nlink > 1
    }

    /// Makes a link or special file of several names once: the first of
    /// its names met is made by `make`, every later one is a hard link to
    /// that copy, as GNU's `cp -a` keeps them (the table of copied files
    /// of several names is held meanwhile, so two names met at once by
    /// two threads are still one file).
    fn made_once(
        &self,
        pair: &Arc<DirPair>,
        e: &Entry,
        kind: Made,
        make: impl Fn() -> io::Result<()>,
    ) {
        let mut links = self.ctx.links.lock().expect("hard link table lock");
        if let Some(first) = links.get(&e.id()).cloned() {
            drop(links);
            let link = || {
                let (dir, name) = pair.dst_at(&e.dst_name);
                first.link_as(dir, &name)
            };
            return self.finish_made(pair, e, kind, link(), link);
        }
        links.insert(e.id(), FirstCopy::of(pair, &e.dst_name));
        let made = make();
        drop(links);
        self.finish_made(pair, e, kind, made, make);
    }

    /// Finishes making the link or special file `e` whose first try gave
    /// `made`: where its name is taken, replaces what is there (see
    /// [`Walker::replace`]) and makes it `again`; then says so (`-v`),
    /// counts it and sets the attributes kept for its kind, or reports why
    /// it could not be made.
    pub(super) fn finish_made(
        &self,
        pair: &Arc<DirPair>,
        e: &Entry,
        kind: Made,
        mut made: io::Result<()>,
        again: impl FnOnce() -> io::Result<()>,
    ) {
        let dst = pair.dst_of(&e.dst_name);
        let mut backup = None;
        if made.as_ref().err().and_then(blockio::errno) == Some(libc::EEXIST) {
            match self.replace(pair, e, false, false) {
                Replace::Removed(b, _aside) => {
                    backup = b;
                    made = again();
                }
                Replace::Skip | Replace::Failed => return,
            }
        }
        messages::say_copied(
            self.ctx.opts,
            &pair.src_of(&e.src_name),
            &dst,
            backup.as_deref(),
        );
        if let Err(err) = made {
            let what = match kind {
                Made::Link => "symbolic link",
                Made::Special if e.kind() == FileType::Fifo => "fifo",
                Made::Special => "special file",
            };
            return self.report(format!("cannot create {what} {}", quote(&dst)), Some(err));
        }
        let keep = &self.ctx.opts.preserve;
        let src = pair.src_of(&e.src_name);
        let say = Say::new(&self.ctx, &src, &dst);
        let set = match kind {
            Made::Link => {
                self.ctx.counts.symlinks.fetch_add(1, Ordering::Relaxed);
                if let Some(made) = &self.ctx.made_links {
                    made.lock().expect("made links lock").insert(dst.clone());
                }
                (keep.ownership || keep.timestamps).then(|| {
                    let dir = pair.dst_dir()?;
                    set_attrs_at(&*dir, &e.dst_name, &e.st, None, None, keep, &say)
                })
            }
            Made::Special => {
                self.ctx.counts.specials.fetch_add(1, Ordering::Relaxed);
                let opts = self.ctx.opts;
                if opts.default_mode && !keep.mode && pair.dst_default_acl {
                    // As GNU's `set_acl`: the default mode, no inherited ACL.
                    let mode = (0o666 | (e.mode() & 0o7000)) & !self.ctx.umask;
                    let dir = pair.dst_dir();
                    if let Err(err) = dir.and_then(|d| minimal_acl_at(&*d, &e.dst_name, mode)) {
                        let what = format!("setting permissions for {}", quote(&dst));
                        self.report(what, Some(err));
                    }
                }
                keep.attrs().then(|| {
                    let (src_dir, dst_dir) = (pair.src_dir()?, pair.dst_dir()?);
                    let from = Node::at(src_dir.as_fd(), &e.src_name);
                    let xattrs = Some((from, pair.dst_default_acl));
                    set_attrs_at(
                        &*dst_dir,
                        &e.dst_name,
                        &e.st,
                        Some(e.mode()),
                        xattrs,
                        keep,
                        &say,
                    )
                })
            }
        };
        if let Some(Err(err)) = set {
            self.report(format!("preserving times for {}", quote(&dst)), Some(err));
        }
    }

    /// An existing destination in the way of a link or special file: kept
    /// with `-n`, an error if it is a directory, else removed.
    ///
    /// As GNU: a link or special file copied as such replaces what is in
    /// its way only when links are not followed (`-P`, `-r`, `-a`), or
    /// with `--remove-destination`, `-b`, or (`-a`) a file of several
    /// names; a link also with `-f`. Otherwise making it fails ("File
    /// exists"). `forced`: the caller (`-l`, `-s`) checked that already;
    /// `judged`: and asked `-u` and `-i` already.
    pub(super) fn replace(
        &self,
        pair: &Arc<DirPair>,
        e: &Entry,
        forced: bool,
        judged: bool,
    ) -> Replace {
        let opts = self.ctx.opts;
        let name = e.dst_name.as_c_str();
        let dst = pair.dst_of(name);
        if let Some(stop) = self.stays_in_the_way(pair, e, &dst, forced, judged) {
            return stop;
        }
        let several_names = || {
            let (dir, name) = pair.dst_at(name);
            rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_nlink > 1)
        };
        // `--attributes-only` copies no data, so, as GNU's, it replaces
        // only what it is told to (`--remove-destination`, `-b`, `-f` for
        // a link).
        let data = !opts.attributes_only;
        let may_replace = forced
            || (data && e.never_follows(opts.dereference))
            || opts.remove_destination
            || opts.backup != options::Backup::None
            || (e.kind() == FileType::Symlink && opts.force)
            || (data && opts.preserve.links && several_names());
        if !may_replace {
            self.refuse_existing(pair, e, &dst);
            return Replace::Failed;
        }
        if opts.backup != options::Backup::None {
            return self.keep_aside(pair, e, &dst);
        }
        // As GNU's `-v`: a link (`-l`, `-s`) that replaces what is in its
        // way only because of `-f` or `-i` is made over it without a
        // word (GNU replaces it in one step); a removal first, for
        // `--remove-destination`, a file of several names under `-a`, or a
        // source that is no regular file with links not followed, is said.
        let said = !forced
            || opts.remove_destination
            || (data && opts.preserve.links && several_names())
            || (e.never_follows(opts.dereference) && e.kind() != FileType::RegularFile);
        let (dir, at_name) = pair.dst_at(name);
        if let Err(e) = at::unlink(dir, &at_name) {
            self.report(format!("cannot remove {}", quote(&dst)), Some(e));
            return Replace::Failed;
        }
        if said {
            messages::say(opts, format_args!("removed {}", quote(&dst)));
        }
        Replace::Removed(None, None)
    }

    /// The checks of [`Walker::replace`] that leave the destination `dst`
    /// of `e` where it is: the source itself (unless `forced`), `-n`, `-u`
    /// or `-i` (unless `judged`), a directory. `None` when none does.
    fn stays_in_the_way(
        &self,
        pair: &DirPair,
        e: &Entry,
        dst: &Path,
        forced: bool,
        judged: bool,
    ) -> Option<Replace> {
        let opts = self.ctx.opts;
        let (dir, name) = pair.dst_at(&e.dst_name);
        if !forced && !opts.no_clobber && self.leads_to_source(pair, e) {
            self.report(
                format!(
                    "{} and {} are the same file",
                    quote(&pair.src_of(&e.src_name)),
                    quote(dst)
                ),
                None,
            );
            return Some(Replace::Failed);
        }
        let skip = opts.no_clobber
            || !judged
                && rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| {
                        let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
                        overwrite::keep_existing(opts, overwrite::mtime(&e.st), mtime, dst)
                    });
        if skip {
            self.ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Some(Replace::Skip);
        }
        if at::is_dir(dir, &name) {
            self.report(
                format!(
                    "cannot overwrite directory {} with non-directory",
                    quote(dst)
                ),
                None,
            );
            return Some(Replace::Failed);
        }
        None
    }

    /// GNU's "File exists" for a link or special file `e` that may not
    /// replace its destination `dst`, after `-v`'s line.
    fn refuse_existing(&self, pair: &DirPair, e: &Entry, dst: &Path) {
        messages::say_copied(self.ctx.opts, &pair.src_of(&e.src_name), dst, None);
        let what = match e.kind() {
            FileType::Symlink => "symbolic link",
            FileType::Fifo => "fifo",
            _ => "special file",
        };
        self.report(
            format!("cannot create {what} {}", quote(dst)),
            Some(io::Error::from_raw_os_error(libc::EEXIST)),
        );
    }

    /// `-b`: the destination `dst` of `e` kept aside, listed until the
    /// name is made again.
    fn keep_aside(&self, pair: &Arc<DirPair>, e: &Entry, dst: &Path) -> Replace {
        let opts = self.ctx.opts;
        let name = e.dst_name.as_c_str();
        // `cp -bl a~ a`: the backup of `a` would take the source's name,
        // and the link (or `-s` link) would then be made to the old `a`,
        // the source's data gone.
        let Some(dir) = self.dst_dir(pair) else {
            return Replace::Failed;
        };
        if backup::backup_is_source(opts, &e.src_name, e.id(), &dir, name) {
            self.report(
                format!(
                    "backing up {} might destroy source;  {} not copied",
                    quote(dst),
                    quote(&pair.src_of(&e.src_name))
                ),
                None,
            );
            return Replace::Failed;
        }
        let set_aside = || backup::make_backup(opts, &dir, &pair.dst_path, name);
        match unfinished::kept_aside(pair, &e.dst_name, e.id(), set_aside) {
            Ok((b, aside)) => Replace::Removed(b, aside),
            Err(e) => {
                let what = format!("cannot backup {}", quote(dst));
                self.report(what, Some(e));
                Replace::Failed
            }
        }
    }

    /// GNU's same-file rule for a link or special file whose copy would
    /// replace `e`'s destination: refused when the destination leads to
    /// the source (a link to it, or, for a link, the file the link names);
    /// two links are fine. Not asked when the destination goes first
    /// (`--remove-destination`, `-b`).
    pub(super) fn leads_to_source(&self, pair: &DirPair, e: &Entry) -> bool {
        let opts = self.ctx.opts;
        // Following links (`-L`, `-H`), GNU compares the names themselves
        // here, which differ.
        if opts.remove_destination
            || opts.backup != options::Backup::None
            || !e.never_follows(opts.dereference)
        {
            return false;
        }
        let at = |(dir, name): NameAt<'_>, follow: bool| {
            let flags = if follow {
                rustix::fs::AtFlags::empty()
            } else {
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW
            };
            rustix::fs::statat(dir, &*name, flags).ok().map(|st| {
                let link = rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Symlink;
                ((st.st_dev, st.st_ino), link)
            })
        };
        let Some((_, dst_is_link)) = at(pair.dst_at(&e.dst_name), false) else {
            return false;
        };
        if e.kind() == FileType::Symlink && dst_is_link {
            return false;
        }
        let src = if e.kind() == FileType::Symlink {
            at(pair.src_at(&e.src_name), true).map(|(id, _)| id)
        } else {
            Some(e.id())
        };
        let dst = at(pair.dst_at(&e.dst_name), true).map(|(id, _)| id);
        src.is_some() && src == dst
    }
}
