//! Whether an existing destination is overwritten: `-u` by modification
//! times, `-i` by the user's answer.

use std::path::Path;

use super::options::{CopyOptions, Update};
use crate::quote::quote;

/// A modification time: seconds and nanoseconds.
pub(crate) fn mtime(st: &libc::statx) -> (i64, u32) {
    (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec)
}

/// Whether an existing destination whose modification time is `dst` is
/// kept by `update` (`-u`: not older than the source's, `src`), or by the
/// user's answer (`-i`).
pub(crate) fn keep_existing(
    opts: &CopyOptions,
    src: (i64, u32),
    dst: (i64, u32),
    path: &Path,
) -> bool {
    match opts.update {
        Update::None => return true,
        Update::Older if dst >= src => return true,
        _ => {}
    }
    opts.ask
        .is_some_and(|ask| !ask(&format!("overwrite {}? ", quote(path))))
}

/// `-i` on a destination the copier may not write: as [`keep_existing`],
/// with GNU's question that names its mode (`-f` will replace it, without
/// `-f` the copy tries to write it anyway).
pub(crate) fn keep_unwritable(
    opts: &CopyOptions,
    src: (i64, u32),
    dst: (i64, u32),
    mode: u32,
    path: &Path,
) -> bool {
    match opts.update {
        Update::None => return true,
        Update::Older if dst >= src => return true,
        _ => {}
    }
    let Some(ask) = opts.ask else {
        return false;
    };
    let (mode, perms) = (mode & 0o7777, perms_string(mode));
    let question = if opts.force {
        format!(
            "replace {}, overriding mode {mode:04o} ({perms})? ",
            quote(path)
        )
    } else {
        format!(
            "unwritable {} (mode {mode:04o}, {perms}); try anyway? ",
            quote(path)
        )
    };
    !ask(&question)
}

/// The nine permission letters of `ls -l` for `mode` (`rwxr-xr-x`), with
/// the set-ID and sticky bits as `s`/`S` and `t`/`T`.
fn perms_string(mode: u32) -> String {
    let mut out = String::with_capacity(9);
    for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    out
}
