//! The extended attributes a copy leaves out, as listed in
//! `/etc/xattr.conf`: the file through which libattr's `attr_copy_fd`,
//! and so GNU `cp -a`, skips attributes that must not be copied as bytes
//! (`security.evm`, which only the kernel may write; XFS and AFS
//! internals; a desktop indexer's data).
//!
//! Each line is a pattern (`fnmatch`, as libattr matches it) and an
//! action; `#` starts a comment. Both actions libattr knows leave the
//! attribute out of the copy: `skip`, and `permissions` (ACLs, which a
//! copy carries with the mode instead). A file that cannot be read lists
//! nothing, as with libattr: every attribute is copied. It is read once,
//! on the first attribute copied.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// Where the list is, as libattr's `ATTR_CONF`.
const PATH: &str = "/etc/xattr.conf";

/// Whether the attribute `name` is left out of a copy.
pub(crate) fn left_out(name: &CStr) -> bool {
    static PATTERNS: OnceLock<Vec<CString>> = OnceLock::new();
    PATTERNS
        .get_or_init(|| std::fs::read(PATH).map_or_else(|_| Vec::new(), |t| patterns(&t)))
        .iter()
        .any(|p| matches(p, name))
}

/// The patterns of `text`'s lines whose action is `skip` or `permissions`.
fn patterns(text: &[u8]) -> Vec<CString> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let line = line.split(|&b| b == b'#').next().unwrap_or_default();
            let mut words = line
                .split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty());
            let (pattern, action) = (words.next()?, words.next()?);
            matches!(action, b"skip" | b"permissions")
                .then(|| CString::new(pattern).ok())
                .flatten()
        })
        .collect()
}

/// Whether `name` matches the shell pattern `pattern`, as `fnmatch` with
/// no flags (libattr's match).
fn matches(pattern: &CStr, name: &CStr) -> bool {
    // Raw libc: fnmatch is the C library's, not a system call rustix wraps.
    // SAFETY: both are NUL-terminated strings alive for the call, and
    // fnmatch only reads them.
    unsafe { libc::fnmatch(pattern.as_ptr(), name.as_ptr(), 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_as_libattr_reads_them() {
        let text = b"# comment\n\
            system.posix_acl_access\tpermissions\n\
            trusted.SGI_DMI_*   skip   # xfs\n\
            user.odd\tunknown\n\
            \n\
            lonely\n";
        let p = patterns(text);
        assert_eq!(p, [c"system.posix_acl_access", c"trusted.SGI_DMI_*"]);
        assert!(p.iter().any(|p| matches(p, c"trusted.SGI_DMI_x")));
        assert!(!p.iter().any(|p| matches(p, c"trusted.SGI_DM")));
        assert!(!p.iter().any(|p| matches(p, c"user.odd")));
    }
}
