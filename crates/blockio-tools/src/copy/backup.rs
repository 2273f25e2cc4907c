//! `-b`: the names a destination is kept aside under, as GNU's `cp`
//! makes them (`F~`, `F.~N~`), and keeping it aside.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::at::{self, cname};
use super::options::{Backup, CopyOptions};

/// `-b`: moves `name` in `dir` aside under its backup name, which is
/// returned (`None`: nothing there to keep, or a directory).
pub(crate) fn make_backup(
    opts: &CopyOptions,
    dir: &std::fs::File,
    dir_path: &Path,
    name: &std::ffi::CStr,
) -> io::Result<Option<PathBuf>> {
    let Some(backup) = backup_name(opts, dir, name)? else {
        return Ok(None);
    };
    rustix::fs::renameat(dir, name, dir, cname(&backup))?;
    Ok(Some(dir_path.join(backup)))
}

/// The last component of an entry's name, as [`at::last_component`]
/// finds it.
fn base_name(name: &std::ffi::CStr) -> &[u8] {
    at::last_component(Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()))).as_bytes()
}

/// Whether keeping `dst_name` in `dst_dir` aside (`-b`) would replace the
/// source, whose name is `src_name` and whose (device, inode) is `src`:
/// `cp -b a~ a`, where the backup of `a` is `a~`. GNU `cp` refuses that
/// copy ("backing up 'a' might destroy source"), by the same test: the
/// source's name is the destination's with the backup suffix, and that
/// name in the destination's directory is the source.
pub(crate) fn backup_is_source(
    opts: &CopyOptions,
    src_name: &std::ffi::CStr,
    src: (u64, u64),
    dst_dir: &std::fs::File,
    dst_name: &std::ffi::CStr,
) -> bool {
    let (src_base, dst_base) = (base_name(src_name), base_name(dst_name));
    let suffix = opts.suffix.as_bytes();
    // A numbered backup takes a new name, never the source's.
    if opts.backup == Backup::Numbered || src_base.strip_suffix(suffix) != Some(dst_base) {
        return false;
    }
    let mut backup = dst_name.to_bytes().to_vec();
    backup.extend_from_slice(suffix);
    let backup = cname(std::ffi::OsStr::from_bytes(&backup));
    rustix::fs::statat(dst_dir, &backup, rustix::fs::AtFlags::empty())
        .is_ok_and(|st| (st.st_dev, st.st_ino) == src)
}

/// The name `name` in `dir` is kept aside under by `-b` (`None`: no backup
/// is made, for no `-b`, no such name, or a directory).
fn backup_name(
    opts: &CopyOptions,
    dir: &std::fs::File,
    name: &std::ffi::CStr,
) -> io::Result<Option<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStringExt;
    let st = match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        return Ok(None);
    }
    let base = name.to_bytes();
    let highest = || -> io::Result<Option<Vec<u8>>> {
        let mut prefix = base.to_vec();
        prefix.extend_from_slice(b".~");
        let listing = at::list_again(dir)?;
        Ok(listing
            .names()
            .filter_map(|n| {
                let num = n.to_bytes().strip_prefix(&prefix[..])?.strip_suffix(b"~")?;
                backup_number(num).then(|| num.to_vec())
            })
            // Decimal numbers of any length: the longest, then the
            // greatest of those.
            .max_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b))))
    };
    let numbered = match opts.backup {
        Backup::None => return Ok(None),
        Backup::Simple => None,
        Backup::Numbered => Some(highest()?.map_or_else(|| b"1".to_vec(), |h| increment(&h))),
        Backup::Existing => highest()?.map(|h| increment(&h)),
    };
    let mut backup = base.to_vec();
    match numbered {
        Some(n) => {
            backup.extend_from_slice(b".~");
            backup.extend_from_slice(&n);
            backup.push(b'~');
        }
        None => backup.extend_from_slice(opts.suffix.as_bytes()),
    }
    Ok(Some(std::ffi::OsString::from_vec(backup)))
}

/// Whether `num`, from a name `F.~num~`, is a backup's number as GNU's
/// `cp` reads one: decimal digits, the first not 0 (`F.~0~` and
/// `F.~010~` are not numbered backups).
fn backup_number(num: &[u8]) -> bool {
    matches!(num.first(), Some(b'1'..=b'9')) && num.iter().all(u8::is_ascii_digit)
}

/// The decimal number `num` plus one, at any length (never wrapping round
/// to an existing backup's number).
fn increment(num: &[u8]) -> Vec<u8> {
    let mut out = num.to_vec();
    for d in out.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return out;
        }
    }
    out.insert(0, b'1');
    out
}

/// As GNU `cp`: `cp --force --backup F F`, one existing regular file named
/// by the same string on both sides, copies `F` to its backup name (a
/// plain copy, with no backup of its own), where the same-file rule
/// would refuse.
pub(super) fn backup_of_itself(
    sources: &[PathBuf],
    dest: &Path,
    opts: &CopyOptions,
) -> Option<(PathBuf, CopyOptions)> {
    let [src] = sources else { return None };
    if !opts.force || opts.backup == Backup::None || src.as_os_str() != dest.as_os_str() {
        return None;
    }
    if !std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::File::open(parent).ok()?;
    let name = cname(dest.file_name()?);
    let backup = backup_name(opts, &dir, &name).ok()??;
    let opts = CopyOptions {
        backup: Backup::None,
        ..opts.clone()
    };
    Some((dest.with_file_name(backup), opts))
}
