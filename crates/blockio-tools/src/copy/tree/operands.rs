//! The command-line operands, by GNU `cp`'s rules for arguments: which
//! links are followed, where each source lands (`--parents`, `/.`), a
//! source named twice, two sources onto one name, a directory into
//! itself, and a file onto itself ([`super::same_file`]). Each operand is
//! then handed to the walk as one entry or one directory task.

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blockio::PathAt;

use super::super::at::{self, cname};
use super::super::entry::{joined, parent_as_written, statx_id, DirAt, DirPair, Entry};
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
        let opts = self.ctx.opts;
        if src.as_os_str().is_empty() {
            // No file has the empty name (a `statx` of it would describe
            // the working directory): GNU's "cannot stat ''".
            let e = io::Error::from_raw_os_error(libc::ENOENT);
            return self.report(format!("cannot stat {}", quote(src)), Some(e));
        }
        let csrc = cname(src.as_os_str());
        let follow_src = opts.dereference != options::Dereference::Never
            || src.as_os_str().as_bytes().ends_with(b"/");
        let st = match self.stat_one(PathAt::cwd(&csrc), follow_src) {
            Ok(st) => st,
            Err(e) => return self.report(format!("cannot stat {}", quote(src)), Some(e)),
        };
        let kind = u32::from(st.stx_mode) & libc::S_IFMT;
        if kind == libc::S_IFDIR && !opts.recursive {
            return self.report(
                format!("-r not specified; omitting directory {}", quote(src)),
                None,
            );
        }
        let Some(src_name) = final_name(src) else {
            return self.report(format!("cannot copy {}: it has no name", quote(src)), None);
        };
        let target = match (dest_is_dir, at::last_component(src).as_bytes()) {
            // `--parents`: the whole path as given, below the destination.
            (true, _) if opts.parents => {
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
                        return;
                    }
                }
                if !self.make_parents(rel, src.has_root(), dest) {
                    return;
                }
                // (`a/b/` below `d` is `d/a/b`, as GNU names it.)
                let rel = rel.as_os_str().as_bytes();
                let trailing = rel.iter().rev().take_while(|&&b| b == b'/').count();
                let rel = OsStr::from_bytes(&rel[..rel.len() - trailing]);
                joined(dest, if rel.is_empty() { OsStr::new(".") } else { rel })
            }
            // `cp -r s/. d` names what it copies `d/./...`, as GNU does.
            (true, b".") => joined(dest, OsStr::new(".")),
            (true, _) => joined(dest, OsStr::from_bytes(src_name.to_bytes())),
            (false, _) => dest.to_path_buf(),
        };
        if target.as_os_str().is_empty() {
            // An empty name exists nowhere: GNU's message for what the
            // copy would have made there, with ENOENT as the kernel gives.
            let what = if kind == libc::S_IFDIR {
                "directory".to_owned()
            } else {
                match opts.link {
                    options::LinkMode::Symbolic => format!("symbolic link '' to {}", quote(src)),
                    options::LinkMode::Hard => format!("hard link '' to {}", quote(src)),
                    options::LinkMode::Copy => match kind {
                        libc::S_IFLNK if opts.dereference == options::Dereference::Never => {
                            "symbolic link".to_owned()
                        }
                        libc::S_IFIFO if !self.as_regular() => "fifo".to_owned(),
                        _ => "regular file".to_owned(),
                    },
                }
            };
            let what = if what.contains("''") {
                what
            } else {
                format!("{what} ''")
            };
            return self.report(
                format!("cannot create {what}"),
                Some(io::Error::from_raw_os_error(libc::ENOENT)),
            );
        }
        if !dest_is_dir && target.as_os_str().as_bytes().ends_with(b"/") && kind != libc::S_IFDIR {
            // `cp f g/`: an existing non-directory is "cannot stat", as
            // GNU's look at the destination fails; an absent one is what
            // making a link there fails with.
            match std::fs::metadata(&target) {
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return self.report(format!("cannot stat {}", quote(&target)), Some(e));
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let how = match opts.link {
                        options::LinkMode::Symbolic => "symbolic",
                        options::LinkMode::Hard => "hard",
                        options::LinkMode::Copy => "",
                    };
                    if !how.is_empty() {
                        return self.report(
                            format!(
                                "cannot create {how} link {} to {}",
                                quote(&target),
                                quote(src)
                            ),
                            Some(e),
                        );
                    }
                }
                _ => {}
            }
        }
        let Some(dst_name) = final_name(&target) else {
            return self.report(
                format!("cannot create {}: it has no name", quote(&target)),
                None,
            );
        };
        let is_dir = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
        // One source named twice (`cp a a t/`) is copied once, with a
        // warning, as cp does; a file with backups goes to GNU's rules
        // below (the second is refused, or with numbered backups copied
        // again).
        let id = statx_id(&st);
        let dir = std::fs::metadata(parent(src)).map_or((0, 0), |m| id_of(&m));
        let key = (id, dir, at::last_component(src).to_owned());
        let first = self.operands_seen.lock().expect("lock").insert(key);
        if !first && (opts.backup == options::Backup::None || is_dir) {
            let kind = if is_dir { "directory" } else { "file" };
            return self.warn(format!(
                "warning: source {kind} {} specified more than once",
                quote(src)
            ));
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
        let made_link = kind == libc::S_IFLNK || opts.link == options::LinkMode::Symbolic;
        let refused = !is_dir
            && dest_is_dir
            && opts.backup != options::Backup::Numbered
            && match self
                .operand_targets
                .lock()
                .expect("lock")
                .entry(target.clone())
            {
                std::collections::hash_map::Entry::Occupied(first) => !*first.get() || made_link,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(made_link);
                    false
                }
            };
        if refused {
            return self.report(
                format!(
                    "will not overwrite just-created {} with {}",
                    quote(&target),
                    quote(src)
                ),
                None,
            );
        }
        if is_dir {
            // `cp -r s t` with `t` a directory copies to `t/s`, a name the
            // user did not write: a link there is not followed. Nor is a
            // link named as the destination itself (`-T`, or a name that
            // is no directory): it is not a directory, as GNU says, and
            // merging into what it leads to would write outside the
            // destination named. A trailing slash asks for the directory.
            let follow = if dest_is_dir {
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
            match same_file_ok(src, &st, deref, &target, opts, false) {
                Same::Go => {}
                Same::Done => return,
                Same::Refuse => {
                    return self.report(
                        format!("{} and {} are the same file", quote(src), quote(&target)),
                        None,
                    )
                }
            }
            return self.operand_dir(src, &target, &st, follow);
        }
        if !dest_is_dir
            && dest.as_os_str().as_bytes().ends_with(b"/")
            && !std::fs::metadata(dest).is_ok_and(|m| m.is_dir())
        {
            // `cp f nodir/`: the slash says a directory is meant. (GNU
            // says what it is about to do before it fails.)
            messages::say_copied(opts, src, dest, None);
            let what = match kind {
                libc::S_IFLNK => "symbolic link",
                libc::S_IFREG => "regular file",
                _ if self.as_regular() => "regular file",
                _ => "special file",
            };
            return self.report(
                format!("cannot create {what} {}", quote(dest)),
                Some(io::Error::from_raw_os_error(libc::ENOTDIR)),
            );
        }
        match same_file_ok(src, &st, follow_src, &target, opts, self.as_regular()) {
            Same::Go => {}
            Same::Done => return,
            Same::Refuse => {
                return self.report(
                    format!("{} and {} are the same file", quote(src), quote(&target)),
                    None,
                )
            }
        }
        // What GNU says it could not create when the copy's directory
        // cannot be reached (`cp f nodir/x`).
        let made = match (opts.link, kind) {
            (options::LinkMode::Symbolic, _) => {
                format!("symbolic link {} to {}", quote(&target), quote(src))
            }
            (options::LinkMode::Hard, _) => {
                format!("hard link {} to {}", quote(&target), quote(src))
            }
            (_, libc::S_IFLNK) => format!("symbolic link {}", quote(&target)),
            (_, libc::S_IFREG) => format!("regular file {}", quote(&target)),
            _ if self.as_regular() => format!("regular file {}", quote(&target)),
            (_, libc::S_IFIFO) => format!("fifo {}", quote(&target)),
            _ => format!("special file {}", quote(&target)),
        };
        let Some(pair) = self.operand_parents(src, &target, &made) else {
            return;
        };
        let entry = Entry {
            src_name,
            dst_name,
            st,
            // Only a destination the user named is followed: `cp f link`.
            follow_dst: !dest_is_dir,
            follow_src,
            operand: true,
        };
        self.entries(&Arc::new(pair), vec![entry]);
    }

    /// A directory named on the command line, copied to `target` (made, or
    /// merged into when it is a directory, or a link to one that the user
    /// named: `follow`).
    pub(super) fn operand_dir(&self, src: &Path, target: &Path, st: &libc::statx, follow: bool) {
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
            )
        };
        // A non-directory in the way is refused before anything is
        // looked for inside the destination, as GNU's order is.
        if existing(target).is_ok_and(|m| !m.is_dir()) {
            return not_a_directory();
        }
        if let (Ok(s), Ok(t)) = (std::fs::canonicalize(src), canonical_target(target)) {
            if t.starts_with(&s) {
                return self.report(
                    format!(
                        "cannot copy a directory, {}, into itself, {}",
                        quote(src),
                        quote(target)
                    ),
                    None,
                );
            }
        }
        let fresh = match std::fs::DirBuilder::new()
            .mode(self.dir_create_mode(st))
            .create(target)
        {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !existing(target).is_ok_and(|m| m.is_dir()) {
                    return not_a_directory();
                }
                false
            }
            Err(e) => {
                return self.report(
                    format!("cannot create directory {}", quote(target)),
                    Some(e),
                )
            }
        };
        if fresh {
            messages::say_copied(self.ctx.opts, src, target, None);
            let opts = self.ctx.opts;
            if opts.default_mode && !opts.preserve.mode {
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
            src: Arc::new(s),
            dst: Arc::new(d),
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
