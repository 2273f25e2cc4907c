//! The end of the walk: the directories' final modes and times, set
//! deepest first once nothing more is written into them (a directory made
//! read-only at once could not be filled), then with `--fsync` one
//! `syncfs` per destination file system for what no fsync of its own made
//! durable.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::super::at;
use super::super::attrs::{set_attrs_at, Node, Say};
use super::super::entry::DirAt;
use super::super::options::Preserve;
use super::walker::{open_operand_dst, Fixup, Walker};
use crate::quote::quote;

impl Walker<'_> {
    /// Sets a directory's final mode and times (`f`), on `dir` open.
    pub(super) fn apply_fixup(&self, dir: &File, f: &Fixup) {
        // A directory made in a set-group-ID directory inherits that
        // bit (its files then take the group): kept, as GNU keeps it,
        // whatever the source's mode.
        let chmod = match f.chmod {
            Some(m)
                if f.fresh
                    && m & 0o2000 == 0
                    && dir.metadata().is_ok_and(|d| d.mode() & 0o2000 != 0) =>
            {
                Some(m | 0o2000)
            }
            c => c,
        };
        let keep = &self.ctx.opts.preserve;
        let r = if keep.attrs() {
            let keep = Preserve {
                mode: chmod.is_some(),
                ..*keep
            };
            // A directory whose source could not be listed gets the
            // source's ACLs and xattrs here, by path: an ACL inherited
            // from its new parent, which the source lacks, must not stay.
            let from = f
                .unlisted_src
                .as_ref()
                .map(|p| (Node::Path(p.clone()), true));
            let src = f.unlisted_src.as_ref().map_or(f.path.as_path(), |p| {
                Path::new(OsStr::from_bytes(p.to_bytes()))
            });
            let say = Say::new(&self.ctx, src, &f.path);
            set_attrs_at(dir, c"", &f.st, chmod, from, &keep, &say)
        } else if let Some(mode) = chmod {
            at::chmod(dir, mode)
        } else {
            Ok(())
        };
        if let Err(e) = r {
            // Not the owner: GNU, which sets the times first, says so of
            // them; the rest would fail alike.
            let what = if e.raw_os_error() == Some(libc::EPERM) && self.ctx.opts.preserve.timestamps
            {
                "preserving times for"
            } else {
                "cannot set attributes of"
            };
            self.report(format!("{what} {}", quote(&f.path)), Some(e));
        }
    }

    /// Final modes and times of the directories made (deepest first, after
    /// all their contents), then with `--fsync` a `syncfs` of every
    /// destination file system.
    pub(super) fn finish_dirs(&self) {
        let fixups = std::mem::take(&mut *self.fixups.lock().expect("lock"));
        for f in fixups.iter().rev() {
            let opened = match &f.at {
                DirAt::Operand {
                    dst, follow_dst, ..
                } => open_operand_dst(dst, *follow_dst),
                DirAt::Beneath { root, rel } => {
                    root.dst.open().and_then(|d| at::open_dir_beneath(&d, rel))
                }
            };
            match opened {
                Ok(dir) => self.apply_fixup(&dir, f),
                Err(e) => self.report(format!("cannot access {}", quote(&f.path)), Some(e)),
            }
        }
        if !self.ctx.opts.fsync {
            return;
        }
        // One syncfs per destination file system makes durable what no
        // fsync of its own did: the small files (see
        // `files::job::FSYNC_EACH_MIN`), the directories, links and attributes.
        let filesystems = std::mem::take(&mut *self.filesystems.lock().expect("lock"));
        for (_, path, dir) in filesystems {
            if let Err(e) = rustix::fs::syncfs(&dir) {
                self.report(
                    format!(
                        "cannot make the copy durable: syncfs on the file system of {} failed, so files written there may be incomplete",
                        quote(&path)
                    ),
                    Some(e.into()),
                );
            }
        }
    }
}
