//! The command-line operands, by GNU `cp`'s rules for arguments: which
//! links are followed, where each source lands (`--parents`, `/.`), a
//! source named twice, two sources onto one name, a directory into
//! itself, and a file onto itself ([`super::same_file`]). Each operand is
//! then handed to the walk as one entry or one directory task.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blockio::PathAt;
use rustix::fs::FileType;

use super::super::at::{self, cname};
use super::super::entry::{joined, parent_as_written, statx_id, DirAt, DirPair, Entry, PairDir};
use super::super::{attrs, messages, options};
use super::paths::{canonical_target, id_of, parent};
use super::same_file::{same_file_ok, Same};
use super::walker::{Fixup, Walker};
use super::work::{DirTask, Pending};
use crate::quote::quote;

/// The name a source is copied under: its last component, with `.` and
/// `..` resolved to the name of the directory they are (`cp -r a/.. t`
/// copies under that name). `None` for `/`.
pub(super) fn final_name(p: &Path) -> Option<std::ffi::CString> {
    match at::last_component(p).as_bytes() {
        b"" | b"." | b".." => std::fs::canonicalize(p).ok()?.file_name().map(cname),
        n => Some(cname(OsStr::from_bytes(n))),
    }
}

/// A command-line source, once looked at.
struct Operand<'a> {
    /// The source as written.
    src: &'a Path,
    /// The destination operand.
    dest: &'a Path,
    /// Whether the source is copied into `dest` (else to `dest` itself).
    dest_is_dir: bool,
    /// The source's `statx`, following a link when `follow_src`.
    st: libc::statx,
    /// The source is followed where it is a link (`-L`, `-H`, or written
    /// with a trailing `/`).
    follow_src: bool,
    /// The source's type.
    kind: FileType,
}

impl Walker<'_> {
    /// `--parents`: makes the directories of `rel` (a source's path, from
    /// `/` when `absolute`) below `dest`, as GNU does: each with its
    /// source's mode (and with `-p` its owner and times, set at the end),
    /// an existing one left as it is. False after reporting a failure.
    pub(super) fn make_parents(&self, rel: &Path, absolute: bool, dest: &Path) -> bool {
        // Each directory is `rel` up to the end of one of its components,
        // as written (`./a//b` keeps its `.` and its `//`, which GNU names
        // in `-v` lines), not as `Path::components` cleans them.
        let raw = rel.as_os_str().as_bytes();
        let ends: Vec<usize> = (0..raw.len())
            .filter(|&i| raw[i] != b'/' && raw.get(i + 1).map_or(true, |&b| b == b'/'))
            .map(|i| i + 1)
            .collect();
        for &end in ends.iter().take(ends.len().saturating_sub(1)) {
            let part = OsStr::from_bytes(&raw[..end]);
            let src = if absolute {
                Path::new("/").join(part)
            } else {
                PathBuf::from(part)
            };
            let dst = joined(dest, part);
            if raw[..end].ends_with(b"/.") || &raw[..end] == b"." {
                continue;
            }
            if !self.make_parent(&src, &dst) {
                return false;
            }
        }
        true
    }

    /// `--parents`: the directory `dst`, made with the mode of `src`, or
    /// there already. False after reporting a failure.
    fn make_parent(&self, src: &Path, dst: &Path) -> bool {
        let csrc = cname(src.as_os_str());
        let st = match self.stat_one(PathAt::cwd(&csrc), true) {
            // `--no-preserve=mode`: GNU gives these the default mode,
            // without even the sticky bit other directories keep.
            Ok(mut st) if self.ctx.opts.default_mode => {
                st.stx_mode &= !0o7000;
                st
            }
            Ok(st) => st,
            Err(e) => {
                self.report(format!("cannot stat {}", quote(src)), Some(e));
                return false;
            }
        };
        match std::fs::DirBuilder::new()
            .mode(self.dir_create_mode(&st))
            .create(dst)
        {
            Ok(()) => self.parent_made(src, dst, &st),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dst.is_dir() => {
                self.parent_there(src, dst, st)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // A file where a parent belongs: GNU's words.
                self.report(
                    format!("{} exists but is not a directory", quote(dst)),
                    None,
                );
                return false;
            }
            Err(e) => {
                self.report(format!("cannot make directory {}", quote(dst)), Some(e));
                return false;
            }
        }
        true
    }

    /// `--parents`: the directory `dst` made for `src` (`st`), said with
    /// `-v`, its attributes set when the walk ends.
    fn parent_made(&self, src: &Path, dst: &Path, st: &libc::statx) {
        messages::say(
            self.ctx.opts,
            format_args!("{} -> {}", src.display(), dst.display()),
        );
        let task = DirTask {
            src: src.to_path_buf(),
            dst: dst.to_path_buf(),
            at: DirAt::Operand {
                src: src.to_path_buf(),
                dst: dst.to_path_buf(),
                follow_dst: true,
            },
            chain: None,
            top: Arc::new((src.to_path_buf(), dst.to_path_buf())),
        };
        self.dir_made(Pending::Full(Box::new(task)), st, true, false);
    }

    /// `--parents`: the directory `dst` was there already. As GNU's: with
    /// `-p` it gets its source's (`st`) attributes too, at the end.
    fn parent_there(&self, src: &Path, dst: &Path, st: libc::statx) {
        if self.ctx.opts.preserve.attrs() {
            self.fixups.lock().expect("lock").push(Fixup {
                at: DirAt::Operand {
                    src: src.to_path_buf(),
                    dst: dst.to_path_buf(),
                    follow_dst: true,
                },
                path: dst.to_path_buf(),
                st,
                chmod: self.ctx.opts.preserve.mode.then(|| self.dir_mode(&st)),
                fresh: false,
                unlisted_src: None,
            });
        }
    }

    /// One command-line source, by GNU `cp`'s rules for arguments: links
    /// on the way to it (and to the destination) are followed; the source
    /// itself is followed when written with a trailing `/` (or `/.`) or
    /// by `dereference` (the default without `-r`), else copied as a link;
    /// a source ending in `/.` has its contents merged into an existing
    /// destination directory.
    pub(super) fn operand(&self, src: &Path, dest: &Path, dest_is_dir: bool) {
        let Some((st, follow_src)) = self.stat_operand(src) else {
            return;
        };
        let o = Operand {
            src,
            dest,
            dest_is_dir,
            st,
            follow_src,
            kind: FileType::from_raw_mode(u32::from(st.stx_mode)),
        };
        let Some(src_name) = final_name(src) else {
            return self.report(format!("cannot copy {}: it has no name", quote(src)), None);
        };
        let Some(target) = self.target_of(&o, &src_name) else {
            return;
        };
        if self.target_refused(&o, &target) {
            return;
        }
        let Some(dst_name) = final_name(&target) else {
            return self.report(
                format!("cannot create {}: it has no name", quote(&target)),
                None,
            );
        };
        if !self.first_onto(&o, &target) {
            return;
        }
        if o.kind == FileType::Directory {
            return self.operand_dir_checked(&o, &target);
        }
        self.operand_file(&o, &target, src_name, dst_name);
    }

    /// The `statx` of the operand `src`, and whether it was followed;
    /// `None` after reporting it (no such file, or a directory without
    /// `-r`).
    fn stat_operand(&self, src: &Path) -> Option<(libc::statx, bool)> {
        let opts = self.ctx.opts;
        if src.as_os_str().is_empty() {
            // No file has the empty name (a `statx` of it would describe
            // the working directory): GNU's "cannot stat ''".
            let e = io::Error::from_raw_os_error(libc::ENOENT);
            self.report(format!("cannot stat {}", quote(src)), Some(e));
            return None;
        }
        let csrc = cname(src.as_os_str());
        let follow_src = opts.dereference != options::Dereference::Never
            || src.as_os_str().as_bytes().ends_with(b"/");
        let st = match self.stat_one(PathAt::cwd(&csrc), follow_src) {
            Ok(st) => st,
            Err(e) => {
                self.report(format!("cannot stat {}", quote(src)), Some(e));
                return None;
            }
        };
        if FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Directory && !opts.recursive
        {
            self.report(
                format!("-r not specified; omitting directory {}", quote(src)),
                None,
            );
            return None;
        }
        Some((st, follow_src))
    }

    /// Where the operand `o` is copied to: below a destination directory
    /// (`d/s`, `d/.` for `s/.`, with `--parents` `d/a/b/s`), else the
    /// destination itself. `None` after reporting a failure.
    fn target_of(&self, o: &Operand<'_>, src_name: &CStr) -> Option<PathBuf> {
        let (src, dest) = (o.src, o.dest);
        Some(match (o.dest_is_dir, at::last_component(src).as_bytes()) {
            (true, _) if self.ctx.opts.parents => return self.parents_target(src, dest),
            // `cp -r s/. d` names what it copies `d/./...`, as GNU does.
            (true, b".") => joined(dest, OsStr::new(".")),
            (true, _) => joined(dest, OsStr::from_bytes(src_name.to_bytes())),
            (false, _) => dest.to_path_buf(),
        })
    }

    /// `--parents`: the whole path of `src` as given, below `dest`, its
    /// directories made. `None` after reporting a failure.
    fn parents_target(&self, src: &Path, dest: &Path) -> Option<PathBuf> {
        let rel = src.strip_prefix("/").unwrap_or(src);
        let last = at::last_component(src).as_bytes();
        if last == b"." || last == b".." {
            // `a/b/..`: GNU makes `d/a/b`, then fails to make
            // `d/a/b/..`, which exists; only a fresh `d/a/b` fails.
            let up = Path::new(OsStr::from_bytes(
                &rel.as_os_str().as_bytes()[..rel.as_os_str().len() - last.len()],
            ));
            let made = dest.join(up);
            if !made.is_dir() {
                if self.make_parents(&up.join("x"), src.has_root(), dest) {
                    self.report(
                        format!("cannot create directory {}", quote(&dest.join(rel))),
                        Some(io::Error::from_raw_os_error(libc::EEXIST)),
                    );
                }
                return None;
            }
        }
        if !self.make_parents(rel, src.has_root(), dest) {
            return None;
        }
        // (`a/b/` below `d` is `d/a/b`, as GNU names it.)
        let rel = rel.as_os_str().as_bytes();
        let trailing = rel.iter().rev().take_while(|&&b| b == b'/').count();
        let rel = OsStr::from_bytes(&rel[..rel.len() - trailing]);
        Some(joined(
            dest,
            if rel.is_empty() { OsStr::new(".") } else { rel },
        ))
    }

    /// Whether a `target` no copy can be made at was reported: the empty
    /// name, or a non-directory's name ending in `/`.
    fn target_refused(&self, o: &Operand<'_>, target: &Path) -> bool {
        if target.as_os_str().is_empty() {
            // An empty name exists nowhere: GNU's message for what the
            // copy would have made there, with ENOENT as the kernel gives.
            self.report(
                format!("cannot create {}", self.made_at_the_empty_name(o)),
                Some(io::Error::from_raw_os_error(libc::ENOENT)),
            );
            return true;
        }
        if o.dest_is_dir
            || !target.as_os_str().as_bytes().ends_with(b"/")
            || o.kind == FileType::Directory
        {
            return false;
        }
        // `cp f g/`: an existing non-directory is "cannot stat", as GNU's
        // look at the destination fails; an absent one is what making a
        // link there fails with.
        let how = match self.ctx.opts.link {
            options::LinkMode::Symbolic => "symbolic",
            options::LinkMode::Hard => "hard",
            options::LinkMode::Copy => "",
        };
        match std::fs::metadata(target) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                self.report(format!("cannot stat {}", quote(target)), Some(e));
                true
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !how.is_empty() => {
                self.report(
                    format!(
                        "cannot create {how} link {} to {}",
                        quote(target),
                        quote(o.src)
                    ),
                    Some(e),
                );
                true
            }
            _ => false,
        }
    }

    /// What the copy of `o` would have made at the empty name, in GNU's
    /// words (`regular file ''`, `hard link '' to 's'`).
    fn made_at_the_empty_name(&self, o: &Operand<'_>) -> String {
        let opts = self.ctx.opts;
        let src = o.src;
        let what = if o.kind == FileType::Directory {
            "directory".to_owned()
        } else {
            match opts.link {
                options::LinkMode::Symbolic => format!("symbolic link '' to {}", quote(src)),
                options::LinkMode::Hard => format!("hard link '' to {}", quote(src)),
                options::LinkMode::Copy => match o.kind {
                    FileType::Symlink if opts.dereference == options::Dereference::Never => {
                        "symbolic link".to_owned()
                    }
                    FileType::Fifo if !self.as_regular() => "fifo".to_owned(),
                    _ => "regular file".to_owned(),
                },
            }
        };
        if what.contains("''") {
            what
        } else {
            format!("{what} ''")
        }
    }

    /// Whether `o` is the first operand copied onto `target`; else the
    /// second is warned about (one source named twice) or refused (two
    /// sources onto one name), as GNU's.
    fn first_onto(&self, o: &Operand<'_>, target: &Path) -> bool {
        let opts = self.ctx.opts;
        let (src, is_dir) = (o.src, o.kind == FileType::Directory);
        // One source named twice (`cp a a t/`) is copied once, with a
        // warning, as cp does; a file with backups goes to GNU's rules
        // below (the second is refused, or with numbered backups copied
        // again).
        let id = statx_id(&o.st);
        let dir = std::fs::metadata(parent(src)).map_or((0, 0), |m| id_of(&m));
        let key = (id, dir, at::last_component(src).to_owned());
        let first = self.operands_seen.lock().expect("lock").insert(key);
        if !first && (opts.backup == options::Backup::None || is_dir) {
            let kind = if is_dir { "directory" } else { "file" };
            self.warn(format!(
                "warning: source {kind} {} specified more than once",
                quote(src)
            ));
            return false;
        }
        // `cp a/f b/f d/`: the second would overwrite the copy the first
        // makes, silently losing one of the copies asked for. Refused, as
        // GNU refuses it; decided here, in the order of the command line.
        // A link made first is GNU's other refusal, "will not copy through
        // just-created symlink", made where the copy meets it, unless this
        // operand makes a link too (`-s`, or a link copied as one), which
        // would replace the first link, and with `-b` its backup of the
        // file that was there: refused here.
        // Numbered backups keep every copy (`cp --backup=numbered f f d/`
        // makes two backups, as GNU's).
        let made_link = o.kind == FileType::Symlink || opts.link == options::LinkMode::Symbolic;
        let refused = !is_dir
            && o.dest_is_dir
            && opts.backup != options::Backup::Numbered
            && match self
                .operand_targets
                .lock()
                .expect("lock")
                .entry(target.to_path_buf())
            {
                std::collections::hash_map::Entry::Occupied(first) => !*first.get() || made_link,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(made_link);
                    false
                }
            };
        if refused {
            self.report(
                format!(
                    "will not overwrite just-created {} with {}",
                    quote(target),
                    quote(src)
                ),
                None,
            );
        }
        !refused
    }

    /// A directory operand: refused when its destination is the source
    /// directory itself, else copied by [`Walker::operand_dir`].
    fn operand_dir_checked(&self, o: &Operand<'_>, target: &Path) {
        let (opts, src, dest) = (self.ctx.opts, o.src, o.dest);
        // `cp -r s t` with `t` a directory copies to `t/s`, a name the
        // user did not write: a link there is not followed. Nor is a
        // link named as the destination itself (`-T`, or a name that
        // is no directory): it is not a directory, as GNU says, and
        // merging into what it leads to would write outside the
        // destination named. A trailing slash asks for the directory.
        let follow = if o.dest_is_dir {
            at::last_component(src) == "."
        } else {
            dest.as_os_str().as_bytes().ends_with(b"/")
        };
        // A destination that is the source directory itself (`cp -a
        // s/. t` with `t` a bind mount or a link to `s`, `cp -rT s s`)
        // is one refusal of the whole operand, as GNU's, before any
        // check of what lies inside it.
        // GNU's rule looks at links by `-L`/`-H` alone here: `s/` is
        // followed to be read, yet a link `t` to `s` is the same file.
        let deref = opts.dereference != options::Dereference::Never;
        if self.same_file_refused(o, deref, target, false) {
            return;
        }
        self.operand_dir(src, target, &o.st, follow);
    }

    /// GNU's same-file rule for the operand `o` onto `target`: whether it
    /// is not copied (refused, and reported, or nothing to do).
    fn same_file_refused(
        &self,
        o: &Operand<'_>,
        followed: bool,
        target: &Path,
        as_regular: bool,
    ) -> bool {
        match same_file_ok(o.src, &o.st, followed, target, self.ctx.opts, as_regular) {
            Same::Go => false,
            Same::Done => true,
            Same::Refuse => {
                self.report(
                    format!("{} and {} are the same file", quote(o.src), quote(target)),
                    None,
                );
                true
            }
        }
    }

    /// A non-directory operand, copied to `target` as one entry of the
    /// directory it is in.
    fn operand_file(&self, o: &Operand<'_>, target: &Path, src_name: CString, dst_name: CString) {
        let (opts, src, dest) = (self.ctx.opts, o.src, o.dest);
        if !o.dest_is_dir
            && dest.as_os_str().as_bytes().ends_with(b"/")
            && !std::fs::metadata(dest).is_ok_and(|m| m.is_dir())
        {
            // `cp f nodir/`: the slash says a directory is meant. (GNU
            // says what it is about to do before it fails.)
            messages::say_copied(opts, src, dest, None);
            let what = match o.kind {
                FileType::Symlink => "symbolic link",
                FileType::RegularFile => "regular file",
                _ if self.as_regular() => "regular file",
                _ => "special file",
            };
            return self.report(
                format!("cannot create {what} {}", quote(dest)),
                Some(io::Error::from_raw_os_error(libc::ENOTDIR)),
            );
        }
        if self.same_file_refused(o, o.follow_src, target, self.as_regular()) {
            return;
        }
        let Some(pair) = self.operand_parents(src, target, &self.made_at(o, target)) else {
            return;
        };
        let entry = Entry {
            src_name,
            dst_name,
            st: o.st,
            // Only a destination the user named is followed: `cp f link`.
            follow_dst: !o.dest_is_dir,
            follow_src: o.follow_src,
            operand: true,
        };
        self.entries(&Arc::new(pair), vec![entry]);
    }

    /// What GNU says it could not create when the copy's directory
    /// cannot be reached (`cp f nodir/x`).
    fn made_at(&self, o: &Operand<'_>, target: &Path) -> String {
        let src = o.src;
        match (self.ctx.opts.link, o.kind) {
            (options::LinkMode::Symbolic, _) => {
                format!("symbolic link {} to {}", quote(target), quote(src))
            }
            (options::LinkMode::Hard, _) => {
                format!("hard link {} to {}", quote(target), quote(src))
            }
            (_, FileType::Symlink) => format!("symbolic link {}", quote(target)),
            (_, FileType::RegularFile) => format!("regular file {}", quote(target)),
            _ if self.as_regular() => format!("regular file {}", quote(target)),
            (_, FileType::Fifo) => format!("fifo {}", quote(target)),
            _ => format!("special file {}", quote(target)),
        }
    }

    /// A directory named on the command line, copied to `target` (made, or
    /// merged into when it is a directory, or a link to one that the user
    /// named: `follow`).
    pub(super) fn operand_dir(&self, src: &Path, target: &Path, st: &libc::statx, follow: bool) {
        let Some(fresh) = self.make_operand_dir(src, target, st, follow) else {
            return;
        };
        if fresh {
            messages::say_copied(self.ctx.opts, src, target, None);
            self.no_inherited_acl(target, st);
        }
        let id = statx_id(st);
        self.src_dirs
            .lock()
            .expect("lock")
            .entry(id)
            .or_insert_with(|| target.to_path_buf());
        let task = DirTask {
            src: src.to_path_buf(),
            dst: target.to_path_buf(),
            at: DirAt::Operand {
                src: src.to_path_buf(),
                dst: target.to_path_buf(),
                follow_dst: follow,
            },
            chain: None,
            top: Arc::new((src.to_path_buf(), target.to_path_buf())),
        };
        self.dir_made(Pending::Full(Box::new(task)), st, fresh, true);
    }

    /// Makes the directory `target` for the operand `src` (`st`), or finds
    /// it there: `Some(true)` when made. `None` after reporting a
    /// non-directory in the way, a directory copied into itself, or a
    /// failure.
    fn make_operand_dir(
        &self,
        src: &Path,
        target: &Path,
        st: &libc::statx,
        follow: bool,
    ) -> Option<bool> {
        let existing = |target: &Path| {
            if follow {
                std::fs::metadata(target)
            } else {
                std::fs::symlink_metadata(target)
            }
        };
        let not_a_directory = || {
            self.report(
                format!(
                    "cannot overwrite non-directory {} with directory {}",
                    quote(target),
                    quote(src)
                ),
                None,
            );
            None
        };
        // A non-directory in the way is refused before anything is
        // looked for inside the destination, as GNU's order is.
        if existing(target).is_ok_and(|m| !m.is_dir()) {
            return not_a_directory();
        }
        if let (Ok(s), Ok(t)) = (std::fs::canonicalize(src), canonical_target(target)) {
            if t.starts_with(&s) {
                self.report(
                    format!(
                        "cannot copy a directory, {}, into itself, {}",
                        quote(src),
                        quote(target)
                    ),
                    None,
                );
                return None;
            }
        }
        match std::fs::DirBuilder::new()
            .mode(self.dir_create_mode(st))
            .create(target)
        {
            Ok(()) => Some(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !existing(target).is_ok_and(|m| m.is_dir()) {
                    return not_a_directory();
                }
                Some(false)
            }
            Err(e) => {
                self.report(
                    format!("cannot create directory {}", quote(target)),
                    Some(e),
                );
                None
            }
        }
    }

    /// `--no-preserve=mode`: a directory `target` just made in one with a
    /// default ACL gets a minimal ACL (see [`Walker::minimal_acl`]).
    fn no_inherited_acl(&self, target: &Path, st: &libc::statx) {
        let opts = self.ctx.opts;
        if !opts.default_mode || opts.preserve.mode {
            return;
        }
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = target.file_name().map(cname);
        if let (Ok(d), Some(name)) = (at::open_operand_dir(parent), name) {
            if attrs::has_default_acl(d.as_fd()) {
                self.minimal_acl(&d, &name, st, target);
            }
        }
    }

    /// The directories that hold a non-directory operand and its copy,
    /// opened following links; `None` after reporting one that could not
    /// be opened: the source's as "cannot access", the copy's as "cannot
    /// create" `made` (what would have been made there), or "cannot stat"
    /// it past a file, as GNU's `cp` says.
    pub(super) fn operand_parents(&self, src: &Path, dst: &Path, made: &str) -> Option<DirPair> {
        let s = at::open_operand_parent(parent(src))
            .map_err(|e| self.report(format!("cannot access {}", quote(parent(src))), Some(e)))
            .ok()?;
        let d = at::open_operand_parent(parent(dst))
            .map_err(|e| {
                // A file on the way: GNU's look at the destination fails.
                let what = if e.raw_os_error() == Some(libc::ENOTDIR) {
                    format!("cannot stat {}", quote(dst))
                } else {
                    // (said first, as GNU says what it is about to make)
                    messages::say_copied(self.ctx.opts, src, dst, None);
                    format!("cannot create {made}")
                };
                self.report(what, Some(e))
            })
            .ok()?;
        if self.ctx.opts.fsync {
            self.note_filesystem(&d, parent(dst));
        }
        let keep = &self.ctx.opts.preserve;
        let dst_default_acl = (keep.mode || keep.xattr || self.ctx.opts.default_mode)
            && attrs::has_default_acl(d.as_fd());
        Some(DirPair {
            src: PairDir::Held(Arc::new(s)),
            dst: PairDir::Held(Arc::new(d)),
            src_path: parent_as_written(src),
            dst_path: parent_as_written(dst),
            // Never used: an operand's parent gets no subdirectories.
            below: None,
            dst_default_acl,
            chain: None,
            top: Arc::new((src.to_path_buf(), dst.to_path_buf())),
        })
    }
}
