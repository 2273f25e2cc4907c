//! Directories: each one listed, its entries `statx`ed in batches and
//! sorted by kind (regular files to the workers in groups, directories
//! made in one `mkdirat` batch and queued, links and special files to
//! [`super::links`]); the modes directories are made with and end with;
//! and the copy's own directories and directories met twice refused, by
//! (device, inode), so the walk never copies into itself.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use blockio::PathAt;
use rustix::fs::FileType;

use super::super::at::{self, cname};
use super::super::attrs::Node;
use super::super::entry::{Chain, DirAt, DirPair, Entry, Group, PairDir, Root, RootDir};
use super::super::files;
use super::super::options::Dereference;
use super::super::{attrs, messages, options};
use super::paths::id_of;
use super::same_file::{same_file_ok, Same};
use super::walker::{open_operand_dst, Fixup, Walker, REROOT};
use super::work::{DirTask, Parent, Pending, Queued, Task};
use crate::quote::quote;

/// The names of a directory taken at a time: their `statx`es and entries
/// (about 300 bytes each) are kept only while these are dispatched, so
/// memory stays bounded however many entries a directory holds.
const LIST_CHUNK: usize = 512;

/// A directory of the tree and its copy, open.
type OpenPair = (Arc<File>, Arc<File>);

impl Walker<'_> {
    /// Remembers the file system of a destination directory, to `syncfs`
    /// it at the end.
    pub(super) fn note_filesystem(&self, dir: &File, path: &Path) {
        let dev = match dir.metadata() {
            Ok(m) => m.dev(),
            Err(e) => return self.report(format!("cannot stat {}", quote(path)), Some(e)),
        };
        let mut known = self.filesystems.lock().expect("lock");
        if known.iter().any(|(d, _, _)| *d == dev) {
            return;
        }
        match dir.try_clone() {
            Ok(f) => known.push((dev, path.to_path_buf(), f)),
            Err(e) => self.report(format!("cannot access {}", quote(path)), Some(e)),
        }
    }

    /// Opens a directory of the tree and its copy; with the root and path
    /// its subdirectories are opened from (an operand's directories are
    /// that root: see [`Walker::root_of`]).
    pub(super) fn open_task(&self, t: &DirTask) -> Option<(OpenPair, Arc<Root>, PathBuf)> {
        let (opened, root, rel) = match &t.at {
            DirAt::Operand {
                src,
                dst,
                follow_dst,
            } => (
                at::open_operand_dir(src)
                    .map_err(|e| (src, e))
                    .and_then(|s| {
                        Ok((s, open_operand_dst(dst, *follow_dst).map_err(|e| (dst, e))?))
                    }),
                None,
                PathBuf::new(),
            ),
            DirAt::Beneath { root, rel } => (
                self.open_by_path(t)
                    .map(Ok)
                    .unwrap_or_else(|| self.open_beneath(t, root, rel)),
                // Deep enough: this directory becomes a root of its own.
                (rel.as_os_str().len() < REROOT).then(|| Arc::clone(root)),
                if rel.as_os_str().len() < REROOT {
                    rel.clone()
                } else {
                    PathBuf::new()
                },
            ),
        };
        let (s, d) = match opened {
            Ok((s, d)) => (Arc::new(s), Arc::new(d)),
            Err((path, e)) => {
                self.report(format!("cannot access {}", quote(path)), Some(e));
                return None;
            }
        };
        let root = match root {
            Some(r) => r,
            None => match self.root_of(t, &s, &d) {
                Ok(r) => Arc::new(r),
                Err((path, e)) => {
                    self.report(format!("cannot access {}", quote(path)), Some(e));
                    return None;
                }
            },
        };
        if self.ctx.opts.fsync && matches!(t.at, DirAt::Operand { .. }) {
            self.note_filesystem(&d, &t.dst);
        }
        Some(((s, d), root, rel))
    }

    /// A directory of the tree and its copy opened from their operand's
    /// root (see [`at::open_dir_beneath`]).
    fn open_beneath<'t>(
        &self,
        t: &'t DirTask,
        root: &Root,
        rel: &Path,
    ) -> Result<(File, File), (&'t PathBuf, io::Error)> {
        root.src
            .open()
            .and_then(|r| {
                if self.ctx.opts.dereference == Dereference::Always {
                    at::open_dir_following(&r, rel)
                } else {
                    at::open_dir_beneath(&r, rel)
                }
            })
            .map_err(|e| (&t.src, e))
            .and_then(|s| {
                let d = root.dst.open().and_then(|r| at::open_dir_beneath(&r, rel));
                Ok((s, d.map_err(|e| (&t.dst, e))?))
            })
    }

    /// Under the lowest limits on descriptors ([`Walker::by_path`]), a
    /// directory of the tree and its copy opened by their paths, as GNU's
    /// `cp` opens them: opened from its root, the root and the source
    /// would be held while the copy is opened, one descriptor more than
    /// the limit allows. `None` where that is not so (or a path is too
    /// long to open), for [`Walker::open_beneath`].
    fn open_by_path(&self, t: &DirTask) -> Option<(File, File)> {
        if !self.by_path {
            return None;
        }
        let src = if self.ctx.opts.dereference == Dereference::Always {
            at::open_operand_dir(&t.src)
        } else {
            at::open_made_dir(&t.src)
        };
        Some((src.ok()?, at::open_made_dir(&t.dst).ok()?))
    }

    /// The root that the subdirectories of `t`, open as `s` and `d`, are
    /// opened beneath: `s` and `d` themselves, held, or under a low limit
    /// on descriptors ([`Walker::reopen_roots`]) an operand's directories
    /// reopened by their paths (see [`RootDir::Reopened`]). A directory
    /// deep enough to be a root of its own is held: its path from here
    /// may be too long to open.
    fn root_of<'t>(
        &self,
        t: &'t DirTask,
        s: &Arc<File>,
        d: &Arc<File>,
    ) -> Result<Root, (&'t PathBuf, io::Error)> {
        let held = || Root {
            src: RootDir::Open(Arc::clone(s)),
            dst: RootDir::Open(Arc::clone(d)),
        };
        match &t.at {
            DirAt::Operand {
                src,
                dst,
                follow_dst,
            } if self.reopen_roots => Ok(Root {
                src: RootDir::reopened(s, src, true).map_err(|e| (&t.src, e))?,
                dst: RootDir::reopened(d, dst, *follow_dst).map_err(|e| (&t.dst, e))?,
            }),
            _ => Ok(held()),
        }
    }

    /// One directory of the tree, already made at `dst`.
    /// Between parts of a large directory, the worker listing it copies
    /// waiting file groups itself with its `arena` when too many wait
    /// (`help_with_files`).
    pub(super) fn directory(&self, q: Queued, arena: &mut blockio::AlignedBuf) {
        let t = q.dir.resolve();
        let Some(((s, d), root, rel)) = self.open_task(&t) else {
            return self.fix_dir(&t, q.fix, None, None);
        };
        // Its attributes before it is listed, which sets its access time.
        let mut st = q.fix.map(|_| files::fstat(&s));
        // Before its source is listed: the copy's own directories are
        // known when the walk meets them (see `dest_dirs`).
        if self.watch {
            if let Err(e) = d
                .metadata()
                .map(|m| self.dest_dirs.lock().expect("lock").insert(id_of(&m)))
            {
                self.report(format!("cannot stat {}", quote(&t.dst)), Some(e));
                return self.fix_dir(&t, q.fix, st.take(), None);
            }
        }
        let keep = self.ctx.opts.preserve;
        let preserve = keep.mode || keep.xattr;
        if preserve {
            // Before anything is made in it: its default ACL is the
            // source's, so what the copy creates inherits what the
            // source's files did. (A directory may have inherited ACLs
            // from its parent: always looked for.)
            let (from, to) = (Node::Fd(s.as_fd()), Node::Fd(d.as_fd()));
            let say = attrs::Say::new(&self.ctx, &t.src, &t.dst);
            attrs::copy_xattrs(&from, &to, true, &keep, &say);
        }
        let mut names = match at::list(&s) {
            Ok(n) => n,
            Err(e) => {
                self.report(format!("cannot read directory {}", quote(&t.src)), Some(e));
                return self.fix_dir(&t, q.fix, st.take(), None);
            }
        };
        // Sorted: the walk (and its messages) do not depend on the order the
        // file system lists names in.
        names.sort();
        // Before its subdirectories are queued, which note theirs after it
        // (`finish_dirs` sets them deepest first).
        self.fix_dir(&t, q.fix, st.take(), (names.len() == 0).then_some(&d));
        let dst_default_acl =
            (preserve || self.ctx.opts.default_mode) && attrs::has_default_acl(d.as_fd());
        let Some(chain) = self.chain_of(&t, &s) else {
            return;
        };
        let pair = Arc::new(DirPair {
            src: PairDir::Held(s),
            dst: PairDir::Held(d),
            src_path: t.src,
            dst_path: t.dst,
            below: Some((root, rel.into())),
            dst_default_acl,
            chain,
            top: t.top,
        });
        self.walk_names(&pair, &names, arena);
    }

    /// With `-L`, the chain of source directories down to `t`'s (`s`),
    /// `None` after reporting a failure; else no chain.
    fn chain_of(&self, t: &DirTask, s: &File) -> Option<Option<Arc<Chain>>> {
        if self.ctx.opts.dereference != Dereference::Always {
            return Some(None);
        }
        match s.metadata() {
            Ok(m) => Some(Some(Arc::new(Chain {
                id: (m.dev(), m.ino()),
                up: t.chain.clone(),
            }))),
            Err(e) => {
                self.report(format!("cannot stat {}", quote(&t.src)), Some(e));
                None
            }
        }
    }

    /// The entries `names` of `pair`, a few hundred at a time: their
    /// attributes and entries (a `statx` each) are kept only while those
    /// are dispatched, so a directory of many entries costs little more
    /// than its names.
    fn walk_names(
        &self,
        pair: &Arc<DirPair>,
        names: &at::Listing,
        arena: &mut blockio::AlignedBuf,
    ) {
        let follow = self.ctx.opts.dereference == Dereference::Always;
        let mut group = Vec::new();
        for start in (0..names.len()).step_by(LIST_CHUNK) {
            let chunk: Vec<(&CStr, bool)> = (start..names.len().min(start + LIST_CHUNK))
                .map(|i| names.get(i))
                .collect();
            let stats = self.stat_all(pair, &chunk);
            let entries = chunk
                .iter()
                .zip(stats)
                .filter_map(|(&(name, _), st)| {
                    let mut e = Entry::listed(name.to_owned(), st?);
                    e.follow_src = follow;
                    Some(e)
                })
                .collect();
            self.dispatch(pair, entries, &mut group);
            // By path, no file is copied while this directory's pair is
            // open: its groups wait until it is listed.
            if !self.by_path {
                self.help_with_files(arena);
            }
        }
        if !group.is_empty() {
            self.send(pair, group);
        }
    }

    /// The attributes of a directory's entries; `None` for those that
    /// failed (each reported).
    ///
    /// Regular files are not `statx`ed here: the worker that copies one
    /// opens it anyway and reads its attributes from the descriptor
    /// (`Entry::unstated`), which saves a path lookup per file and, on
    /// ext4, a trip through io_uring's worker threads (where `statx`
    /// always goes). Everything else is `statx`ed in batches.
    pub(super) fn stat_all(
        &self,
        pair: &DirPair,
        names: &[(&CStr, bool)],
    ) -> Vec<Option<libc::statx>> {
        let mut stats: Vec<Option<libc::statx>> = names
            .iter()
            .map(|(_, regular)| regular.then(Entry::unstated))
            .collect();
        let unknown: Vec<usize> = (0..names.len()).filter(|&i| !names[i].1).collect();
        if unknown.is_empty() {
            return stats;
        }
        let Some(src) = self.src_dir(pair) else {
            return names.iter().map(|_| None).collect();
        };
        for chunk in unknown.chunks(256) {
            let at: Vec<PathAt<'_>> = chunk
                .iter()
                .map(|&i| PathAt::in_dir(&*src, names[i].0))
                .collect();
            // `-L`: a link is what it leads to.
            let flags = if self.ctx.opts.dereference == Dereference::Always {
                0
            } else {
                libc::AT_SYMLINK_NOFOLLOW
            };
            let got = match self.ctx.engine.stat_batch(&at, flags) {
                Ok(s) => s,
                Err(e) => {
                    self.report(format!("cannot stat in {}", quote(&pair.src_path)), Some(e));
                    continue;
                }
            };
            for (&i, st) in chunk.iter().zip(got) {
                match st {
                    Ok(st) => stats[i] = Some(st),
                    Err(e) => self.report(
                        format!("cannot stat {}", quote(&pair.src_of(names[i].0))),
                        Some(e),
                    ),
                }
            }
        }
        stats
    }

    /// Copies the entries of one directory pair, by kind. Regular files go
    /// out in groups of `group` files; a group's worker splits off what
    /// exceeds a wave of bytes once the sizes are known (`files::copy_group`).
    pub(super) fn entries(&self, pair: &Arc<DirPair>, entries: Vec<Entry>) {
        let mut group = Vec::new();
        self.dispatch(pair, entries, &mut group);
        if !group.is_empty() {
            self.send(pair, group);
        }
    }

    /// [`Walker::entries`] for a part of a directory: the regular files
    /// are added to `group`, sent each time it is full; the caller sends
    /// what is left in it after the last part.
    pub(super) fn dispatch(
        &self,
        pair: &Arc<DirPair>,
        entries: Vec<Entry>,
        group: &mut Vec<Entry>,
    ) {
        let mut dirs = Vec::new();
        let mut links = Vec::new();
        for e in entries {
            if self.ctx.opts.link != options::LinkMode::Copy && e.kind() != FileType::Directory {
                self.link_entry(pair, &e);
                continue;
            }
            match e.kind() {
                FileType::Directory => dirs.push(e),
                FileType::Symlink => links.push(e),
                FileType::RegularFile
                | FileType::Fifo
                | FileType::CharacterDevice
                | FileType::BlockDevice
                | FileType::Socket
                    if e.kind() == FileType::RegularFile || self.as_regular() =>
                {
                    if group.len() >= self.ctx.opts.group.max(1) {
                        self.send(pair, std::mem::take(group));
                    }
                    group.push(e);
                }
                _ => self.special(pair, &e),
            }
        }
        self.make_dirs(pair, dirs);
        self.make_links(pair, links);
    }

    /// Queues a group of regular files of `pair` for a worker: with the
    /// pair by path under the lowest limits on descriptors
    /// ([`Walker::by_path`]), so that the group holds no directory open.
    pub(super) fn send(&self, pair: &Arc<DirPair>, files: Vec<Entry>) {
        let dirs = if self.by_path {
            pair.by_path()
        } else {
            Arc::clone(pair)
        };
        self.work.push(Task::Files(Group { dirs, files }));
    }

    /// The mode a directory is made with: writable by us while the copy
    /// fills it; with `-p` by us alone (its own mode, which may let others
    /// in, is set at the end, after its ACL). When the owner is kept, the
    /// group and others get no access until then, as with GNU's: until
    /// the chown the directory belongs to the copier and its group, whom
    /// the source's mode was never meant for.
    pub(super) fn dir_create_mode(&self, st: &libc::statx) -> u32 {
        let mode = if self.ctx.opts.default_mode {
            0o777
        } else if self.ctx.opts.preserve.mode {
            0o700
        } else {
            (u32::from(st.stx_mode) & 0o7777) | 0o700
        };
        if self.ctx.opts.preserve.ownership {
            mode & !0o077
        } else {
            mode
        }
    }

    /// `--no-preserve=mode` (the mode not kept): the directory `name` in
    /// `dir`, just made in one with a default ACL, gets a minimal ACL and
    /// its default mode, as GNU's (see `attrs::minimal_acl_at`).
    pub(super) fn minimal_acl(
        &self,
        dir: &impl AsFd,
        name: &CStr,
        st: &libc::statx,
        path: &std::path::Path,
    ) {
        let opts = self.ctx.opts;
        if !opts.default_mode || opts.preserve.mode {
            return;
        }
        if let Err(e) = attrs::minimal_acl_at(dir, name, self.dir_mode(st)) {
            self.report(format!("setting permissions for {}", quote(path)), Some(e));
        }
    }

    /// The mode a copy of a directory whose `statx` is `st` ends with.
    pub(super) fn dir_mode(&self, st: &libc::statx) -> u32 {
        let mode = u32::from(st.stx_mode);
        if self.ctx.opts.default_mode {
            (0o777 | (mode & 0o1000)) & !self.ctx.umask
        } else if self.ctx.opts.preserve.mode {
            mode & 0o7777
        } else {
            // As GNU's: a directory keeps its sticky bit, not its
            // set-user-ID and set-group-ID bits.
            mode & 0o1777 & !self.ctx.umask
        }
    }

    /// A directory was made (`fresh`) or is merged into: it is counted,
    /// and (`walk`) queued to be listed, its final mode and times then
    /// noted when it is listed; else they are noted for the end now.
    pub(super) fn dir_made(&self, task: Pending, st: &libc::statx, fresh: bool, walk: bool) {
        self.ctx.progress.dirs.fetch_add(1, Ordering::Relaxed);
        if walk {
            // Noted when it is listed (`fix_dir`): a directory found empty
            // then is finished at once, and the queue holds no `statx`.
            let fix = self.needs_fixup(st, fresh).then_some(fresh);
            return self.work.push(Task::Dir(Queued { dir: task, fix }));
        }
        if let Some(f) = self.fixup(task.resolve(), st, fresh) {
            self.fixups.lock().expect("lock").push(f);
        }
    }

    /// Whether a directory whose source's `statx` is `st` needs its mode
    /// or times set after its contents. Not when mkdir made it right, the
    /// usual case (opening every directory again for nothing made a
    /// serial tail after the copy). Merging into an existing directory:
    /// with -p its attributes become the source's, as with cp.
    pub(super) fn needs_fixup(&self, st: &libc::statx, fresh: bool) -> bool {
        let made = self.dir_create_mode(st) & !self.ctx.umask;
        self.ctx.opts.preserve.attrs() || (fresh && self.dir_mode(st) != made)
    }

    /// The final attributes of the directory `t`, if any are to be set.
    pub(super) fn fixup(&self, t: DirTask, st: &libc::statx, fresh: bool) -> Option<Fixup> {
        self.needs_fixup(st, fresh).then(|| Fixup {
            at: t.at,
            path: t.dst,
            st: *st,
            chmod: (fresh || self.ctx.opts.preserve.mode).then(|| self.dir_mode(st)),
            fresh,
            unlisted_src: None,
        })
    }

    /// A walked directory's final attributes (`fix`: see [`Queued`]), from
    /// its source's `st` taken before it was listed (`None`: not open, then
    /// by path): set at once on `now` when it is empty (nothing will be
    /// made in it), else noted for the end.
    pub(super) fn fix_dir(
        &self,
        t: &DirTask,
        fix: Option<bool>,
        st: Option<io::Result<libc::statx>>,
        now: Option<&File>,
    ) {
        let Some(fresh) = fix else { return };
        let follow = self.ctx.opts.dereference == Dereference::Always
            || matches!(t.at, DirAt::Operand { .. });
        // Not opened: its source was never listed.
        let unlisted = st.is_none();
        let st = match st {
            Some(st) => st,
            None => self.stat_one(PathAt::cwd(&cname(t.src.as_os_str())), follow),
        };
        let st = match st {
            Ok(st) => st,
            Err(e) => return self.report(format!("cannot stat {}", quote(&t.src)), Some(e)),
        };
        let task = DirTask {
            src: t.src.clone(),
            dst: t.dst.clone(),
            at: t.at.clone(),
            chain: None,
            top: Arc::clone(&t.top),
        };
        let Some(mut f) = self.fixup(task, &st, fresh) else {
            return;
        };
        if unlisted {
            f.unlisted_src = Some(cname(t.src.as_os_str()));
        }
        match now {
            Some(dir) => self.apply_fixup(dir, &f),
            None => self.fixups.lock().expect("lock").push(f),
        }
    }

    /// Makes the subdirectories `dirs` of `pair` in one `mkdirat` batch
    /// and queues each made (or merged into) to be walked.
    pub(super) fn make_dirs(&self, pair: &Arc<DirPair>, mut dirs: Vec<Entry>) {
        self.drop_cyclic(pair, &mut dirs);
        self.not_into_itself(pair, &mut dirs);
        if dirs.is_empty() {
            return;
        }
        // `-x`: a directory on another file system (a mount point) is made
        // but not walked.
        let this_fs = if self.ctx.opts.one_file_system {
            pair.src_dir()
                .and_then(|d| d.metadata())
                .ok()
                .map(|m| m.dev())
        } else {
            None
        };
        let Some(dst_dir) = self.dst_dir(pair) else {
            return;
        };
        let reqs: Vec<(PathAt<'_>, u32)> = dirs
            .iter()
            .map(|e| {
                (
                    PathAt::in_dir(&*dst_dir, &e.dst_name),
                    self.dir_create_mode(&e.st),
                )
            })
            .collect();
        let mut turn = self.ctx.creators.enter();
        let made = self.ctx.engine.mkdir_batch(&reqs);
        turn.created(reqs.len() as u64);
        drop(turn);
        let made = match made {
            Ok(m) => m,
            Err(e) => {
                return self.report(
                    format!("cannot create directories in {}", quote(&pair.dst_path)),
                    Some(e),
                )
            }
        };
        let mut parent = None;
        for (e, r) in dirs.iter().zip(made) {
            let (src, dst) = (pair.src_of(&e.src_name), pair.dst_of(&e.dst_name));
            let fresh = match r {
                Ok(()) => true,
                Err(err) if blockio::errno(&err) == Some(libc::EEXIST) => {
                    if !self.may_merge_into(pair, e, &src, &dst) {
                        continue;
                    }
                    false
                }
                Err(err) => {
                    self.report(
                        format!("cannot create directory {}", quote(&dst)),
                        Some(err),
                    );
                    continue;
                }
            };
            if fresh {
                messages::say_copied(self.ctx.opts, &src, &dst, None);
                if pair.dst_default_acl {
                    self.minimal_acl(&*dst_dir, &e.dst_name, &e.st, &dst);
                }
            }
            let task = self.subdir_task(pair, e, (src, dst), &mut parent);
            let walk = this_fs.map_or(true, |dev| dev == e.id().0);
            self.dir_made(task, &e.st, fresh, walk);
        }
    }

    /// With `-L`: drops from `dirs` each directory that is one of its own
    /// ancestors (a link leading up the tree), reported as GNU's "cyclic
    /// symbolic link".
    fn drop_cyclic(&self, pair: &DirPair, dirs: &mut Vec<Entry>) {
        let Some(chain) = &pair.chain else {
            return;
        };
        dirs.retain(|e| {
            let cyclic = chain.contains(e.id());
            if cyclic {
                let src = pair.src_of(&e.src_name);
                self.report(
                    format!("cannot copy cyclic symbolic link {}", quote(&src)),
                    None,
                );
            }
            !cyclic
        });
    }

    /// Whether the directory `e` (`src` to `dst`), whose name is taken in
    /// the destination, is merged into: never through a link, for it is
    /// not a directory; and not when it is the source directory itself (a
    /// bind mount of it in the destination), by GNU's rule for the whole
    /// directory, one message rather than one per file inside.
    fn may_merge_into(&self, pair: &DirPair, e: &Entry, src: &Path, dst: &Path) -> bool {
        let (dir, name) = pair.dst_at(&e.dst_name);
        if !at::is_dir(dir, &name) {
            self.refuse_non_directory(pair, e, src, dst);
            return false;
        }
        let itself = rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| (st.st_dev, st.st_ino) == e.id());
        if !itself {
            return true;
        }
        let deref = self.ctx.opts.dereference == Dereference::Always;
        match same_file_ok(src, &e.st, deref, dst, self.ctx.opts, false) {
            Same::Go => true,
            Same::Done => false,
            Same::Refuse => {
                let what = format!("{} and {} are the same file", quote(src), quote(dst));
                self.report(what, None);
                false
            }
        }
    }

    /// A non-directory where the directory `e` is copied to: GNU's
    /// same-file message for a link to the source directory itself, else
    /// "cannot overwrite non-directory".
    fn refuse_non_directory(&self, pair: &DirPair, e: &Entry, src: &Path, dst: &Path) {
        let opts = self.ctx.opts;
        // (Not with -s: GNU 9.1 then says it cannot overwrite the
        // non-directory.)
        let to_source = e.never_follows(opts.dereference)
            && opts.link != options::LinkMode::Symbolic
            && !opts.remove_destination
            && !opts.no_clobber
            && opts.backup == options::Backup::None
            && {
                let (dir, name) = pair.dst_at(&e.dst_name);
                rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::empty())
            }
            .is_ok_and(|st| (st.st_dev, st.st_ino) == e.id());
        let what = if to_source {
            format!("{} and {} are the same file", quote(src), quote(dst))
        } else {
            format!(
                "cannot overwrite non-directory {} with directory {}",
                quote(dst),
                quote(src)
            )
        };
        self.report(what, None);
    }

    /// The task that walks the subdirectory `e` of `pair` (`src` to
    /// `dst`): by its name below the `parent` the subdirectories of `pair`
    /// share (made on first use), or with its own paths where the copy's
    /// name differs.
    fn subdir_task(
        &self,
        pair: &DirPair,
        e: &Entry,
        (src, dst): (PathBuf, PathBuf),
        parent: &mut Option<Arc<Parent>>,
    ) -> Pending {
        let (root, rel) = pair.below.as_ref().expect("a listed directory has a root");
        let parent = parent.get_or_insert_with(|| {
            Arc::new(Parent {
                src: pair.src_path.clone(),
                dst: pair.dst_path.clone(),
                root: Arc::clone(root),
                rel: rel.to_path_buf(),
                chain: pair.chain.clone(),
                top: Arc::clone(&pair.top),
            })
        });
        if e.src_name == e.dst_name {
            return Pending::Below {
                parent: Arc::clone(parent),
                name: e.dst_name.clone(),
            };
        }
        Pending::Full(Box::new(DirTask {
            src,
            dst,
            at: DirAt::Beneath {
                root: Arc::clone(root),
                rel: rel.join(OsStr::from_bytes(e.dst_name.to_bytes())),
            },
            chain: pair.chain.clone(),
            top: Arc::clone(&pair.top),
        }))
    }

    /// Drops (reporting each, as GNU does) the source directories that
    /// are the copy's own directories, or (without `-L`) were copied
    /// already. Compared by (device, inode), not by path: a bind mount of
    /// the source below the destination has another path.
    pub(super) fn not_into_itself(&self, pair: &DirPair, dirs: &mut Vec<Entry>) {
        let follow = self.ctx.opts.dereference == Dereference::Always;
        let dest_dirs = self.dest_dirs.lock().expect("lock");
        let mut src_dirs = self.src_dirs.lock().expect("lock");
        dirs.retain(|e| {
            if dest_dirs.contains(&e.id()) {
                self.report(
                    format!(
                        "cannot copy a directory, {}, into itself, {}",
                        quote(&pair.top.0),
                        quote(&pair.top.1)
                    ),
                    None,
                );
                return false;
            }
            if follow {
                // Met again through another link: copied again, as GNU
                // does (the chain stops cycles).
                return true;
            }
            if !self.watch {
                // Met once only (see `watch`): an operand's id is there.
                return !src_dirs.contains_key(&e.id()) || {
                    self.report(
                        format!(
                            "will not create hard link {} to directory {}",
                            quote(&pair.dst_of(&e.dst_name)),
                            quote(&src_dirs[&e.id()])
                        ),
                        None,
                    );
                    false
                };
            }
            match src_dirs.entry(e.id()) {
                std::collections::hash_map::Entry::Occupied(earlier) => {
                    self.report(
                        format!(
                            "will not create hard link {} to directory {}",
                            quote(&pair.dst_of(&e.dst_name)),
                            quote(earlier.get())
                        ),
                        None,
                    );
                    false
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(pair.dst_of(&e.dst_name));
                    true
                }
            }
        });
    }
}
