//! What `-p` and `-a` carry over besides the data: ownership, extended
//! attributes (POSIX ACLs among them), the mode and the times.
//!
//! # Order, and why
//!
//! A copy is created with its owner's permission bits only (see
//! `files::destination::create_mode` and `Walker::make_dirs`), so nobody
//! else can open it while it is filled. At the end its attributes are set
//! in this order:
//!
//! 1. ownership: only root can give a file away; `EPERM` is ignored, as
//!    cp does, and then the group alone is set (a user may give a file to
//!    a group they belong to), and the set-user-ID, set-group-ID and
//!    sticky bits of a file (the first two of a directory) are left out of
//!    the mode: they would otherwise apply to a copy owned by the copier,
//!    not by the source's owner (GNU `cp` does the same). A `chown` clears set-user-ID bits and file capabilities
//!    (`security.capability`), so everything else comes after it;
//! 2. extended attributes, ACLs included (`system.posix_acl_access` and
//!    `system.posix_acl_default` are the ACLs' xattr form), so that an ACL
//!    that narrows access is there before the group bits open up. ACLs the
//!    source does not have are removed, whether the copy inherited them
//!    from a default ACL of its new directory or they belong to the
//!    existing file the copy overwrote: the copy's access is the
//!    source's, never wider;
//! 3. the mode (for a file with an ACL, its group bits are the ACL's mask,
//!    as in the source);
//! 4. the access and modification times, last, since the steps before
//!    change the change time only.
//!
//! The attributes `/etc/xattr.conf` lists are left out (see
//! [`super::xattr_conf`]), as GNU's `cp` leaves them out through libattr.
//!
//! Failures are treated as GNU `cp` 9.1 treats them:
//!
//! - extended attributes other than the ACLs (kept with `keep.xattr`):
//!   with `-a` every failure is silent; with `--preserve=xattr` named
//!   every failure is reported and fails the copy; otherwise (as
//!   `--preserve=all`) failures other than `ENOTSUP` and `ENODATA` are
//!   reported and the copy does not fail; with `--attributes-only` every
//!   failure is reported. The attributes a destination does not support
//!   (`ENOTSUP`) make one message, `setting attributes for 'DST'`; any
//!   other failure names the attribute, twice, as GNU's does (libattr
//!   quotes both names into one buffer). The mode and times are set all
//!   the same;
//! - ACLs go with the mode (`keep.mode`): an access ACL the destination's
//!   file system cannot hold (`ENOTSUP`) fails the copy with `preserving
//!   permissions for 'DST'`, after the mode is set, since the copy would
//!   be open to users the ACL kept out. (An ACL the kernel keeps as an
//!   xattr is never equivalent to the mode alone.) A default ACL that
//!   cannot be held is left out silently, as GNU's does;
//! - `--no-preserve=mode`: a copy made in a directory with a default ACL
//!   gets a minimal ACL and the default mode minus the umask (see
//!   [`minimal_acl_at`]), as GNU's `set_acl` gives it.
//!
//! Symbolic links get ownership and times, not
//! extended attributes (Linux allows only `trusted.*` and `security.*` on
//! them). Special files, which cannot be opened without side effects (a
//! FIFO blocks, a device may act), are reached as
//! `/proc/self/fd/<directory>/<name>` with the `l*xattr` calls: through
//! their directory's descriptor, never following a link.

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::FileType;
use rustix::io::Errno;

use super::entry::{Ctx, DirPair};
use super::options::Preserve;
use super::outcome::Errors;
use super::xattr_conf;
use crate::quote::quote;

/// Where the failures to keep attributes are said, and the names of the
/// source and of its copy in those messages.
pub(crate) struct Say<'a> {
    errors: &'a Errors<'a>,
    names: Names<'a>,
    /// Every failure to copy an extended attribute is said
    /// (`--attributes-only`).
    all: bool,
}

/// The source's and the copy's names for messages: whole paths, or names
/// in a pair of directories, joined only when a message needs them (most
/// files keep their attributes, and the joined paths would be two
/// allocations per file).
enum Names<'a> {
    Paths(&'a Path, &'a Path),
    InDirs(&'a DirPair, &'a CStr, &'a CStr),
}

impl<'a> Say<'a> {
    pub(crate) fn new(ctx: &'a Ctx<'a>, src: &'a Path, dst: &'a Path) -> Say<'a> {
        Say::with(ctx, Names::Paths(src, dst))
    }

    /// For `src` in `dirs`'s source and `dst` in its destination.
    pub(crate) fn in_dirs(
        ctx: &'a Ctx<'a>,
        dirs: &'a DirPair,
        src: &'a CStr,
        dst: &'a CStr,
    ) -> Say<'a> {
        Say::with(ctx, Names::InDirs(dirs, src, dst))
    }

    fn with(ctx: &'a Ctx<'a>, names: Names<'a>) -> Say<'a> {
        Say {
            errors: ctx.errors,
            names,
            all: ctx.opts.attributes_only,
        }
    }

    fn src(&self) -> Cow<'a, Path> {
        match self.names {
            Names::Paths(src, _) => Cow::Borrowed(src),
            Names::InDirs(dirs, src, _) => Cow::Owned(dirs.src_of(src)),
        }
    }

    fn dst(&self) -> Cow<'a, Path> {
        match self.names {
            Names::Paths(_, dst) => Cow::Borrowed(dst),
            Names::InDirs(dirs, _, dst) => Cow::Owned(dirs.dst_of(dst)),
        }
    }

    /// A failure to copy an extended attribute other than an ACL: said
    /// and counted as GNU's `copy_attr` does (see the module doc).
    fn xattr(&self, keep: &Preserve, e: Errno, what: String) {
        let all = self.all || keep.xattr_required;
        let some = !all && !keep.xattr_quiet;
        let err = Some(io::Error::from(e));
        if keep.xattr_required {
            self.errors.report(what, err);
        } else if all || (some && !matches!(e, Errno::NOTSUP | Errno::NODATA)) {
            self.errors.warn(what, err);
        }
    }

    /// A failure to copy the ACLs, which fails the copy.
    fn permissions(&self, e: impl Into<io::Error>) {
        let what = format!("preserving permissions for {}", quote(&self.dst()));
        self.errors.report(what, Some(e.into()));
    }
}

/// `-p` on `name` in `dir` (the empty name: `dir` itself), never following
/// a link: ownership, then the extended attributes of `xattrs_from`,
/// then `chmod` (not for links), then times. The failures to copy
/// extended attributes and ACLs are said through `say` (see the module
/// doc), and the rest still set; the error returned is the first other
/// failure, after which nothing more is set.
pub(crate) fn set_attrs_at(
    dir: &impl AsFd,
    name: &CStr,
    st: &libc::statx,
    chmod: Option<u32>,
    xattrs_from: Option<(Node, bool)>,
    keep: &Preserve,
    say: &Say<'_>,
) -> io::Result<()> {
    use rustix::fs::{chmodat, chownat, fchmod, futimens, utimensat, AtFlags, Mode, Timestamps};
    use rustix::process::{Gid, Uid};
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let gid = Some(Gid::from_raw(st.stx_gid));
    let mut special_bits = 0o7777;
    if keep.ownership {
        if let Err(e) = chownat(dir, name, Some(Uid::from_raw(st.stx_uid)), gid, flags) {
            if !matches!(e, Errno::PERM | Errno::INVAL) {
                return Err(e.into());
            }
            // The owner cannot be kept: the group may be (a failure here
            // leaves the copier's group, as cp does), and the copy, owned by
            // the copier, must not be set-user-ID, set-group-ID or sticky.
            let _ = chownat(dir, name, None, gid, flags);
            // As GNU `cp`: a directory keeps its sticky bit (it restricts who
            // may remove names in it, whoever owns it), and a FIFO or device,
            // which nothing executes, keeps its bits.
            special_bits = match FileType::from_raw_mode(u32::from(st.stx_mode)) {
                FileType::RegularFile => 0o777,
                FileType::Directory => 0o1777,
                _ => 0o7777,
            };
        }
    }
    if let Some((src, inherits)) = xattrs_from.filter(|_| keep.xattr || keep.mode) {
        copy_xattrs(&src, &Node::at(dir.as_fd(), name), inherits, keep, say);
    }
    let is_link = FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Symlink;
    if let Some(mode) = chmod.filter(|_| !is_link && keep.mode) {
        let mode = Mode::from_raw_mode(mode & special_bits);
        if name.is_empty() {
            fchmod(dir, mode)?;
        } else {
            chmodat(dir, name, mode, AtFlags::empty())?;
        }
    }
    if !keep.timestamps {
        return Ok(());
    }
    let times = Timestamps {
        last_access: ts(&st.stx_atime),
        last_modification: ts(&st.stx_mtime),
    };
    if name.is_empty() {
        futimens(dir, &times)?;
    } else {
        utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)?;
    }
    Ok(())
}

fn ts(t: &libc::statx_timestamp) -> rustix::fs::Timespec {
    rustix::fs::Timespec {
        tv_sec: t.tv_sec,
        tv_nsec: i64::from(t.tv_nsec),
    }
}

/// The ACLs in their xattr form: removed from a copy whose source has none.
const ACLS: [&CStr; 2] = [c"system.posix_acl_access", c"system.posix_acl_default"];

/// Whether the directory `dir` has a default ACL, which files made in it
/// inherit.
pub(crate) fn has_default_acl(dir: BorrowedFd<'_>) -> bool {
    rustix::fs::fgetxattr_query(dir, ACLS[1]).is_ok()
}

/// A file whose extended attributes are read or written: an open one, or
/// one reached by name through its directory's descriptor.
pub(crate) enum Node<'a> {
    /// An open file.
    Fd(BorrowedFd<'a>),
    /// `/proc/self/fd/<dir>/<name>`, used with the calls that do not
    /// follow a final symbolic link.
    Path(CString),
}

impl<'a> Node<'a> {
    /// `name` in `dir`, or `dir` itself for the empty name.
    pub(crate) fn at(dir: BorrowedFd<'a>, name: &CStr) -> Node<'a> {
        if name.is_empty() {
            return Node::Fd(dir);
        }
        let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        p.extend_from_slice(name.to_bytes());
        Node::Path(CString::new(p).expect("a name holds no NUL byte"))
    }

    fn list_len(&self) -> Result<usize, Errno> {
        match self {
            Node::Fd(fd) => rustix::fs::flistxattr_query(fd),
            Node::Path(p) => rustix::fs::llistxattr_query(p.as_c_str()),
        }
    }

    fn list(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        match self {
            Node::Fd(fd) => rustix::fs::flistxattr(fd, buf),
            Node::Path(p) => rustix::fs::llistxattr(p.as_c_str(), buf),
        }
    }

    fn get_len(&self, name: &CStr) -> Result<usize, Errno> {
        match self {
            Node::Fd(fd) => rustix::fs::fgetxattr_query(fd, name),
            Node::Path(p) => rustix::fs::lgetxattr_query(p.as_c_str(), name),
        }
    }

    fn get(&self, name: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
        match self {
            Node::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
            Node::Path(p) => rustix::fs::lgetxattr(p.as_c_str(), name, buf),
        }
    }

    fn set(&self, name: &CStr, value: &[u8]) -> Result<(), Errno> {
        let flags = rustix::fs::XattrFlags::empty();
        match self {
            Node::Fd(fd) => rustix::fs::fsetxattr(fd, name, value, flags),
            Node::Path(p) => rustix::fs::lsetxattr(p.as_c_str(), name, value, flags),
        }
    }

    fn remove(&self, name: &CStr) -> Result<(), Errno> {
        match self {
            Node::Fd(fd) => rustix::fs::fremovexattr(fd, name),
            Node::Path(p) => rustix::fs::lremovexattr(p.as_c_str(), name),
        }
    }
}

/// Makes `dst`'s extended attributes those of `src` (see the module doc
/// for what is left out, and how failures are said through `say`).
/// `inherits`: `dst` may hold ACLs the source lacks, which are removed: it
/// was made in a directory with a default ACL, or it existed before the
/// copy (a copy this run made in a directory without one has none, and
/// looking for them would cost two system calls a file).
/// As GNU `cp`, the ACLs go with the mode (`keep.mode`) and the other
/// attributes with `keep.xattr`: either may be copied alone.
pub(crate) fn copy_xattrs(
    src: &Node<'_>,
    dst: &Node<'_>,
    inherits: bool,
    keep: &Preserve,
    say: &Say<'_>,
) {
    let mut names = match names(src) {
        Ok(n) => n,
        Err(e) => {
            if keep.xattr {
                let what = format!("listing attributes of {}", quote(&say.src()));
                say.xattr(keep, e, what);
            }
            if keep.mode {
                // GNU's `copy_acl`, which cannot read the source's ACL,
                // names the source alone.
                say.errors.report(quote(&say.src()), Some(e.into()));
            }
            return;
        }
    };
    names.retain(|n| {
        if ACLS.contains(&n.as_c_str()) {
            keep.mode
        } else {
            keep.xattr && !xattr_conf::left_out(n)
        }
    });
    // Inherited ACLs first: removed, they leave room in the inode for the
    // attributes set next (ext4 keeps small ones there).
    for acl in ACLS.iter().filter(|_| inherits && keep.mode) {
        // Looked for first: removing one that is not there fails with
        // EPERM, not ENODATA, on a file the copier does not own.
        if !names.iter().any(|n| n.as_c_str() == *acl) && dst.get_len(acl) != Err(Errno::NODATA) {
            match dst.remove(acl) {
                Ok(()) | Err(Errno::NODATA | Errno::NOTSUP) => {}
                Err(e) => say.permissions(e),
            }
        }
    }
    let mut unsupported = false;
    for name in &names {
        let is_acl = ACLS.contains(&name.as_c_str());
        // libattr quotes the attribute's name after the file's into the
        // same buffer: GNU's messages name the attribute twice.
        let q = || quote(Path::new(std::ffi::OsStr::from_bytes(name.to_bytes())));
        let value = match value(src, name) {
            Ok(v) => v,
            // Removed since it was listed.
            Err(Errno::NODATA) => continue,
            Err(e) if is_acl => {
                say.errors.report(quote(&say.src()), Some(e.into()));
                continue;
            }
            Err(e) => {
                let q = q();
                say.xattr(keep, e, format!("getting attribute {q} of {q}"));
                continue;
            }
        };
        match dst.set(name, &value) {
            Ok(()) => {}
            // A default ACL the destination cannot hold is left out, as
            // GNU's does; an access ACL is not.
            Err(Errno::NOTSUP) if is_acl && name.as_c_str() == ACLS[1] => {}
            Err(e) if is_acl => say.permissions(e),
            Err(Errno::NOTSUP) => unsupported = true,
            Err(e) => {
                let q = q();
                say.xattr(keep, e, format!("setting attribute {q} for {q}"));
            }
        }
    }
    if unsupported {
        let what = format!("setting attributes for {}", quote(&say.dst()));
        say.xattr(keep, Errno::NOTSUP, what);
    }
}

/// `--no-preserve=mode` on `name` in `dir` (the empty name: `dir`
/// itself), a copy just made in a directory with a default ACL: the
/// access ACL it inherited is removed and its mode made `mode`, as GNU's
/// `set_acl` with the default mode does. (A directory keeps the default
/// ACL it inherited, as with GNU 9.1.)
pub(crate) fn minimal_acl_at(dir: &impl AsFd, name: &CStr, mode: u32) -> io::Result<()> {
    use rustix::fs::{chmodat, fchmod, AtFlags, Mode};
    match Node::at(dir.as_fd(), name).remove(ACLS[0]) {
        Ok(()) | Err(Errno::NODATA | Errno::NOTSUP) => {}
        Err(e) => return Err(e.into()),
    }
    let mode = Mode::from_raw_mode(mode);
    if name.is_empty() {
        fchmod(dir, mode)?;
    } else {
        chmodat(dir, name, mode, AtFlags::empty())?;
    }
    Ok(())
}

/// The names of `node`'s extended attributes (none where the file system
/// has no xattrs).
fn names(node: &Node<'_>) -> Result<Vec<CString>, Errno> {
    let mut buf = Vec::new();
    loop {
        let need = match node.list_len() {
            Ok(n) => n,
            Err(Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        if need == 0 {
            return Ok(Vec::new());
        }
        buf.resize(need, 0);
        match node.list(&mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                break;
            }
            // Grew between the two calls.
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| CString::new(n).expect("split at NUL"))
        .collect())
}

fn value(node: &Node<'_>, name: &CStr) -> Result<Vec<u8>, Errno> {
    loop {
        let mut v = vec![0u8; node.get_len(name)?];
        match node.get(name, &mut v[..]) {
            Ok(n) => {
                v.truncate(n);
                return Ok(v);
            }
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}
