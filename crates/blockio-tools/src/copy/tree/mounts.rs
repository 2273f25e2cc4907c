//! Whether a mount lies where the walk could meet a directory twice or
//! meet its own copy, from `/proc/self/mountinfo`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::paths::canonical_target;

/// Whether a mount can make the walk meet a directory twice or meet its
/// own copy (`/proc/self/mountinfo`; `true` when that cannot be told): a
/// file system mounted strictly below one of `sources`, or `dest` reached
/// through a mount (a bind mount) of a directory inside one of them.
pub(super) fn mounts_below(sources: &[PathBuf], dest: &Path) -> bool {
    let Ok(table) = std::fs::read("/proc/self/mountinfo") else {
        return true;
    };
    let mut roots = Vec::with_capacity(sources.len());
    for s in sources {
        match std::fs::canonicalize(s) {
            Ok(r) => roots.push(r),
            Err(_) => return true,
        }
    }
    let Ok(dest) = canonical_target(dest) else {
        return true;
    };
    // (device, root of the mount in its file system, mount point)
    let mounts: Vec<(&[u8], PathBuf, PathBuf)> = table
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').take(5).collect();
            (f.len() == 5).then(|| (f[2], unescape_mount_field(f[3]), unescape_mount_field(f[4])))
        })
        .collect();
    if mounts
        .iter()
        .any(|(_, _, point)| roots.iter().any(|r| point != r && point.starts_with(r)))
    {
        return true;
    }
    // The mount a path is in (the last of the longest mount points above
    // it: a later mount hides an earlier one at the same point), and the
    // path's place in that mount's file system.
    let real = |p: &Path| {
        let m = mounts
            .iter()
            .filter(|(_, _, point)| p.starts_with(point))
            .max_by_key(|(_, _, point)| point.as_os_str().len())?;
        let rest = p.strip_prefix(&m.2).ok()?;
        Some((m.0, m.1.join(rest)))
    };
    let Some((dev, at)) = real(&dest) else {
        return true;
    };
    roots.iter().any(|r| match real(r) {
        Some((d, src)) => d == dev && at.starts_with(src),
        None => true,
    })
}

/// A path field of `/proc/self/mountinfo`, where space, tab, newline and
/// backslash are written in octal (`\040`).
fn unescape_mount_field(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).and_then(|d| {
            d.iter()
                .all(|c| (b'0'..=b'7').contains(c))
                .then(|| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')))
        });
        match octal {
            Some(n) if field[i] == b'\\' && n <= 0xff => {
                out.push(n as u8);
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}
