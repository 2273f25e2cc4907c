//! Operands' paths as the walk compares them: a path's directory, a
//! target resolved before it exists, a file's (device, inode).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::super::at;

/// Where a directory operand's copy would be, resolved: the target's
/// parent resolved, then its last name (the target may not exist yet).
pub(super) fn canonical_target(target: &Path) -> io::Result<PathBuf> {
    if let Ok(t) = std::fs::canonicalize(target) {
        return Ok(t);
    }
    let name = at::last_component(target);
    Ok(std::fs::canonicalize(parent(target))?.join(name))
}

/// The directory `p` is in, `.` for a bare name.
pub(super) fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A (device, inode) pair of a `stat`.
pub(super) fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}
