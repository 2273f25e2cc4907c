//! The copy's system calls on names, every one relative to an open
//! directory and none following a symbolic link it did not mean to.
//!
//! A copy of a tree someone else can write to must not be steered out of
//! it. Two rules make sure of that:
//!
//! * Inside the tree every name is one component opened relative to its
//!   directory's descriptor, with `O_NOFOLLOW` (or a call that never
//!   follows: `mkdirat`, `symlinkat`, `linkat` without `AT_SYMLINK_FOLLOW`,
//!   `unlinkat`). A symbolic link found where a file is to be written is
//!   refused, never written through.
//! * A directory of the tree is opened from its operand's root by its path
//!   relative to that root, with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`: a directory swapped for a link while the copy
//!   runs makes that open fail instead of leading elsewhere.
//!
//! Only the command-line operands themselves follow links, as GNU `cp`'s
//! rules for arguments say.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::creation_gate;
use super::in_the_way::in_the_way;

/// A directory named on the command line (or a parent of an operand),
/// following symbolic links as `cp` does for its arguments.
pub(crate) fn open_operand_dir(path: &Path) -> io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// The directory that holds a file operand or its copy, following links
/// as [`open_operand_dir`]: open for reading, or where the copier may
/// search it but not read it, as a path only (`O_PATH`), which is all that
/// opening, looking at and creating names in it need. (GNU's `cp` copies
/// `x/f` out of a directory `x` it may only search.)
pub(crate) fn open_operand_parent(path: &Path) -> io::Result<File> {
    match open_operand_dir(path) {
        Err(e) if rustix::io::Errno::from_io_error(&e) == Some(rustix::io::Errno::ACCESS) => {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            Ok(File::from(rustix::fs::open(path, flags, Mode::empty())?))
        }
        r => r,
    }
}

/// A directory the copy made (or merges into) at a path it computed from
/// an operand: links on the way followed, the last component not.
pub(crate) fn open_made_dir(path: &Path) -> io::Result<File> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    Ok(File::from(rustix::fs::open(path, flags, Mode::empty())?))
}

/// The directory at `rel` below `root` (`rel` empty: `root` itself), with
/// no symbolic link anywhere on the way and never outside `root`.
pub(crate) fn open_dir_beneath(root: &File, rel: &Path) -> io::Result<File> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(root, rel, flags, Mode::empty(), resolve) {
        Ok(fd) => Ok(File::from(fd)),
        // Kernels before 5.6: the last component is still not followed,
        // the ones before it are.
        Err(rustix::io::Errno::NOSYS) => Ok(File::from(rustix::fs::openat(
            root,
            rel,
            flags,
            Mode::empty(),
        )?)),
        Err(e) => Err(e.into()),
    }
}

/// The directory at `rel` below `root`, following symbolic links on the
/// way: only for sources with `-L`, which asks for them to be followed.
pub(crate) fn open_dir_following(root: &File, rel: &Path) -> io::Result<File> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::openat(
        root,
        rel,
        flags,
        Mode::empty(),
    )?))
}

/// The names in an open directory with whether each is a regular file
/// (from `d_type`; `false` where the file system does not say), without
/// `.` and `..`, read from `dir` itself with `getdents64`, from where its
/// offset is: a descriptor the caller just opened, which no other thread
/// reads (the offset is the descriptor's). Not from a descriptor of its
/// own (`openat(dir, ".")`): that would take one more descriptor per
/// listing, and need search permission on the directory where reading it
/// needs only read permission (GNU's `cp` lists such a directory, then
/// cannot stat its entries). [`list_again`] lists a shared one.
///
/// The names are kept in one buffer, each with its terminating NUL, and
/// indexed by their offsets: a directory of many entries costs little
/// more than its names (about 40 bytes an entry for 32-byte names, where a
/// `CString` each took twice that).
pub(crate) fn list(dir: &File) -> io::Result<Listing> {
    let mut l = Listing::default();
    let mut buf = Vec::with_capacity(32 << 10);
    let mut entries = rustix::fs::RawDir::new(dir, buf.spare_capacity_mut());
    while let Some(e) = entries.next() {
        let e = e?;
        let name = e.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let regular = e.file_type() == rustix::fs::FileType::RegularFile;
        let at = u32::try_from(l.bytes.len())
            .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        l.bytes.extend_from_slice(name.to_bytes_with_nul());
        l.items.push((at, regular));
    }
    l.bytes.shrink_to_fit();
    l.items.shrink_to_fit();
    Ok(l)
}

/// [`list`] for a directory whose descriptor others may use at once (a
/// destination directory that several workers create files in), through
/// a descriptor of its own.
pub(crate) fn list_again(dir: &File) -> io::Result<Listing> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    list(&File::from(rustix::fs::openat(
        dir,
        c".",
        flags,
        Mode::empty(),
    )?))
}

/// A directory's names, as [`list`] read them.
#[derive(Default)]
pub(crate) struct Listing {
    /// The names, each followed by its NUL.
    bytes: Vec<u8>,
    /// Where each name starts in `bytes`, and whether it is a regular file.
    items: Vec<(u32, bool)>,
}

impl Listing {
    /// How many names.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// The `i`th name and whether it is a regular file.
    pub fn get(&self, i: usize) -> (&CStr, bool) {
        let (at, regular) = self.items[i];
        let name = CStr::from_bytes_until_nul(&self.bytes[at as usize..])
            .expect("every name in a listing ends with its NUL");
        (name, regular)
    }
    /// Sorts the names bytewise.
    pub fn sort(&mut self) {
        let bytes = &self.bytes;
        let name = |at: u32| {
            let rest = &bytes[at as usize..];
            &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
        };
        self.items.sort_unstable_by(|a, b| name(a.0).cmp(name(b.0)));
    }
    /// The names in order.
    pub fn names(&self) -> impl Iterator<Item = &CStr> + '_ {
        (0..self.len()).map(|i| self.get(i).0)
    }
}

/// A destination file opened for writing, and whether this copy created
/// it: only a file the copy created may be removed when the copy fails.
pub(crate) struct Dest {
    pub fd: OwnedFd,
    pub created: bool,
    /// A file in the way was removed first (`-f`).
    pub removed: bool,
    /// A file in the way was kept aside under this name first (`-b`).
    pub backup: Option<std::path::PathBuf>,
    /// A file this copy created, listed for removal on an interrupting
    /// signal until its copy ends (see `unfinished`).
    pub listed: Option<super::unfinished::Unfinished>,
}

/// Creates the file `name` in `dir` for writing, or with `excl` false
/// opens the one already there, as it is: not truncated (it may be the
/// source itself under another name, which the caller checks), and
/// possibly not a regular file (a FIFO or a device is written into, never
/// replaced). A symbolic link there is an error (`ELOOP`), never written
/// through; with `force` (`-f`) an existing file that cannot be opened
/// (no write permission, or a link) is removed and the copy created anew.
///
/// A new file costs one `openat` (`O_CREAT | O_EXCL`); an existing one a
/// second, which tells the two apart without a `stat`.
pub(crate) fn create(
    dir: impl AsFd,
    name: &CStr,
    excl: bool,
    mode: u32,
    force: bool,
) -> io::Result<Dest> {
    let dir = dir.as_fd();
    let base = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut removed = false;
    // A name removed between the two calls is created on the next round;
    // one that keeps coming and going is reported.
    for _ in 0..4 {
        match rustix::fs::openat(
            dir,
            name,
            base | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        ) {
            Ok(fd) => {
                return Ok(Dest {
                    fd,
                    created: true,
                    removed,
                    backup: None,
                    listed: None,
                })
            }
            Err(rustix::io::Errno::EXIST) if !excl => {}
            Err(e) => return Err(e.into()),
        }
        // An existing file: for a FIFO this waits for a reader, outside
        // the creation gate (it creates nothing).
        match creation_gate::outside(|| rustix::fs::openat(dir, name, base, Mode::empty())) {
            Ok(fd) => {
                return Ok(Dest {
                    fd,
                    created: false,
                    removed,
                    backup: None,
                    listed: None,
                })
            }
            Err(rustix::io::Errno::NOENT) => continue,
            Err(rustix::io::Errno::ISDIR) => return Err(rustix::io::Errno::ISDIR.into()),
            // A link in the way stays refused, as GNU refuses to write
            // through a dangling one even with `-f`.
            Err(e) if force && e != rustix::io::Errno::LOOP => match unlink(dir, name) {
                Ok(()) => removed = true,
                Err(u) => return Err(in_the_way("cannot remove", u)),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(rustix::io::Errno::NOENT.into())
}

/// Creates or opens the file `name` in `dir` following a symbolic link
/// there: only for a destination named on the command line, as GNU `cp`
/// does. A link to nothing is refused.
pub(crate) fn create_following(
    dir: impl AsFd,
    name: &CStr,
    excl: bool,
    mode: u32,
    force: bool,
) -> io::Result<Dest> {
    let dir = dir.as_fd();
    // `O_EXCL` (`-n`): whatever is there, link or not, is left alone.
    if !excl {
        let open = OFlags::WRONLY | OFlags::CLOEXEC;
        // As in `create`: outside the creation gate.
        match creation_gate::outside(|| rustix::fs::openat(dir, name, open, Mode::empty())) {
            Ok(fd) => {
                return Ok(Dest {
                    fd,
                    created: false,
                    removed: false,
                    backup: None,
                    listed: None,
                })
            }
            Err(rustix::io::Errno::NOENT) => {}
            Err(rustix::io::Errno::ISDIR) => return Err(rustix::io::Errno::ISDIR.into()),
            // `-f`: the name itself is removed (a link, not what it
            // leads to), as cp does.
            Err(_) if force => {
                if let Err(u) = unlink(dir, name) {
                    return Err(in_the_way("cannot remove", u));
                }
                let mut d = create(dir, name, excl, mode, force)?;
                d.removed = true;
                return Ok(d);
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Nothing there that can be opened: create it, but not through a
    // link that points nowhere.
    create(dir, name, excl, mode, force)
}

/// Whether `name` in `dir` is a symbolic link.
pub(crate) fn is_symlink(dir: impl AsFd, name: &CStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
    })
}

/// Whether `name` in `dir` is a directory (not a link to one).
pub(crate) fn is_dir(dir: impl AsFd, name: &CStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
    })
}

/// A new hard link `to_name` in `to_dir` to the file `from_name` in
/// `from_dir` (not following a link at `from_name`).
pub(crate) fn link(
    from_dir: impl AsFd,
    from_name: &CStr,
    to_dir: impl AsFd,
    to_name: &CStr,
) -> io::Result<()> {
    Ok(rustix::fs::linkat(
        from_dir,
        from_name,
        to_dir,
        to_name,
        rustix::fs::AtFlags::empty(),
    )?)
}

/// Removes the file (not a directory) `name` from `dir`.
pub(crate) fn unlink(dir: impl AsFd, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(
        dir,
        name,
        rustix::fs::AtFlags::empty(),
    )?)
}

/// A symbolic link `name` in `dir` holding `target`.
pub(crate) fn symlink(target: &CStr, dir: &File, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(target, dir, name)?)
}

/// The target of the symbolic link `name` in `dir`.
pub(crate) fn read_link(dir: &File, name: &CStr) -> io::Result<CString> {
    Ok(rustix::fs::readlinkat(dir, name, Vec::new())?)
}

/// A FIFO, socket or device node `name` in `dir`.
pub(crate) fn mknod(dir: &File, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    let kind = rustix::fs::FileType::from_raw_mode(mode);
    let perms = Mode::from_raw_mode(mode & 0o7777);
    Ok(rustix::fs::mknodat(dir, name, kind, perms, rdev)?)
}

/// Sets the permission bits of an open file.
pub(crate) fn chmod(f: impl AsFd, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(f, Mode::from_raw_mode(mode & 0o7777))?)
}

/// The last component of an operand as written, with `.` kept (`s/.` ends
/// in `.`, which `Path::file_name` would hide); trailing slashes ignored.
pub(crate) fn last_component(p: &Path) -> &OsStr {
    let b = p.as_os_str().as_bytes();
    let end = b.len() - b.iter().rev().take_while(|&&c| c == b'/').count();
    let b = &b[..end];
    let start = b.iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1);
    OsStr::from_bytes(&b[start..])
}

/// A name for the `*at` calls.
pub(crate) fn cname(name: &std::ffi::OsStr) -> CString {
    // Names from the file system or from argv never hold a NUL byte.
    CString::new(name.as_bytes()).expect("path names hold no NUL byte")
}

#[cfg(test)]
mod tests {
    use super::last_component;
    use std::path::Path;

    #[test]
    fn last_component_keeps_dot() {
        for (p, want) in [
            ("s/.", "."),
            ("s/./", "."),
            ("s", "s"),
            ("a/b//", "b"),
            (".", "."),
            ("..", ".."),
            ("/", ""),
        ] {
            assert_eq!(last_component(Path::new(p)), want, "{p}");
        }
    }
}
