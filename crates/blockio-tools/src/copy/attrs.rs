//! What `-p` and `-a` carry over besides the data: ownership, extended
//! attributes (POSIX ACLs among them), the mode and the times.
//!
//! # Order, and why
//!
//! A copy is created with its owner's permission bits only (see
//! `files::create_mode` and `Walker::make_dirs`), so nobody else can open it
//! while it is filled. At the end its attributes are set in this order:
//!
//! 1. ownership: only root can give a file away; `EPERM` is ignored, as
//!    cp does. A `chown` clears set-user-ID bits and file capabilities
//!    (`security.capability`), so everything else comes after it;
//! 2. extended attributes, ACLs included (`system.posix_acl_access` and
//!    `system.posix_acl_default` are the ACLs' xattr form), so that an ACL
//!    that narrows access is there before the group bits open up. ACLs the
//!    copy inherited from a default ACL of its new directory, which the
//!    source does not have, are removed: the copy's access is the
//!    source's, never wider;
//! 3. the mode (for a file with an ACL, its group bits are the ACL's mask,
//!    as in the source);
//! 4. the access and modification times, last, since the steps before
//!    change the change time only.
//!
//! Attributes a file system does not support (`ENOTSUP`) and the
//! `trusted.*`/`security.*` ones an unprivileged user may not set (`EPERM`)
//! are left out silently, as `cp -a` does; any other failure is reported
//! with the file's name. Symbolic links and special files get ownership
//! and times, not extended attributes.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::io::Errno;

/// `-p` on `name` in `dir` (the empty name: `dir` itself), never following
/// a link: ownership, then the extended attributes of `xattrs_from` (for
/// the empty name only), then `chmod` (not for links), then times.
pub(crate) fn set_attrs_at(
    dir: &impl AsFd,
    name: &CStr,
    st: &libc::statx,
    chmod: Option<u32>,
    xattrs_from: Option<(BorrowedFd<'_>, bool)>,
) -> io::Result<()> {
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    let fd = dir.as_fd().as_raw_fd();
    // SAFETY: a valid fd and a NUL-terminated name; no memory is written.
    if unsafe { libc::fchownat(fd, name.as_ptr(), st.stx_uid, st.stx_gid, flags) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    if let (Some((src, inherits)), true) = (xattrs_from, name.is_empty()) {
        copy_xattrs(src, dir.as_fd(), inherits)?;
    }
    let is_link = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFLNK;
    if let Some(mode) = chmod.filter(|_| !is_link) {
        // SAFETY: as above.
        let rc = unsafe {
            if name.is_empty() {
                libc::fchmod(fd, mode & 0o7777)
            } else {
                libc::fchmodat(fd, name.as_ptr(), mode & 0o7777, 0)
            }
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let times = [ts(&st.stx_atime), ts(&st.stx_mtime)];
    // SAFETY: as above; `times` lives on the stack across the call.
    let rc = unsafe {
        if name.is_empty() {
            libc::futimens(fd, times.as_ptr())
        } else {
            libc::utimensat(fd, name.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
        }
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn ts(t: &libc::statx_timestamp) -> libc::timespec {
    libc::timespec {
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

/// Makes `dst`'s extended attributes those of `src` (see the module doc
/// for what is left out and why). `inherits`: `dst` was made in a
/// directory with a default ACL, so it may hold ACLs the source lacks
/// (without one, looking for them would cost two system calls a file).
pub(crate) fn copy_xattrs(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    inherits: bool,
) -> io::Result<()> {
    let names = names(src)?;
    for name in &names {
        let value = match value(src, name) {
            Ok(v) => v,
            // Removed since it was listed.
            Err(Errno::NODATA) => continue,
            Err(e) => return Err(named(e, "reading", name)),
        };
        match rustix::fs::fsetxattr(
            dst,
            name.as_c_str(),
            &value,
            rustix::fs::XattrFlags::empty(),
        ) {
            Ok(()) => {}
            Err(e) if skipped(e, name) => {}
            Err(e) => return Err(named(e, "setting", name)),
        }
    }
    for acl in ACLS.iter().filter(|_| inherits) {
        if !names.iter().any(|n| n.as_c_str() == *acl) {
            match rustix::fs::fremovexattr(dst, *acl) {
                Ok(()) | Err(Errno::NODATA | Errno::NOTSUP) => {}
                Err(e) => return Err(named(e, "removing inherited", &(*acl).to_owned())),
            }
        }
    }
    Ok(())
}

/// An attribute the destination may lack the means or the right to hold.
fn skipped(e: Errno, name: &CStr) -> bool {
    let b = name.to_bytes();
    e == Errno::NOTSUP
        || (e == Errno::PERM && (b.starts_with(b"trusted.") || b.starts_with(b"security.")))
}

fn named(e: Errno, doing: &str, name: &CString) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(
        e.kind(),
        format!("{doing} extended attribute {}: {e}", name.to_string_lossy()),
    )
}

/// The names of `fd`'s extended attributes (none where the file system
/// has no xattrs).
fn names(fd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let mut buf = Vec::new();
    loop {
        let need = match rustix::fs::flistxattr_query(fd) {
            Ok(n) => n,
            Err(Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        if need == 0 {
            return Ok(Vec::new());
        }
        buf.resize(need, 0);
        match rustix::fs::flistxattr(fd, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                break;
            }
            // Grew between the two calls.
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| CString::new(n).expect("split at NUL"))
        .collect())
}

fn value(fd: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>, Errno> {
    loop {
        let need = rustix::fs::fgetxattr_query(fd, name)?;
        let mut v = vec![0u8; need];
        match rustix::fs::fgetxattr(fd, name, &mut v[..]) {
            Ok(n) => {
                v.truncate(n);
                return Ok(v);
            }
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}
