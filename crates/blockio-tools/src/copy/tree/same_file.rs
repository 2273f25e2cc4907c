//! GNU `cp`'s rule for a non-directory operand whose destination may be
//! the source itself (`same_file_ok` in its copy.c): a pure function of
//! the two paths and the options, apart from the walk, because its cases
//! (links on either side, hard links, `-b`, `--remove-destination`, `-l`,
//! `-s`) are GNU's and are checked against GNU's behaviour one by one.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::super::at;
use super::super::entry::statx_id;
use super::super::options;
use super::super::options::CopyOptions;
use super::paths::{id_of, parent};

/// What [`same_file_ok`] says of an operand and its destination.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Same {
    /// Copy it.
    Go,
    /// Nothing to do (`-l` onto a hard link of the source): done.
    Done,
    /// The destination is the source: refused.
    Refuse,
}

/// Whether a non-directory operand `src` (`st`: its `statx`, following a
/// link when `followed`) may be copied to `dst`, by GNU `cp`'s rule
/// (`same_file_ok` in its copy.c): never onto the file itself, reached
/// through a link on either side or by another hard link, since opening
/// it to write would empty the source. Two distinct links are fine when
/// the destination link is replaced rather than written through. A
/// destination that does not exist is fine.
pub(super) fn same_file_ok(
    src: &Path,
    st: &libc::statx,
    followed: bool,
    dst: &Path,
    opts: &CopyOptions,
    as_regular: bool,
) -> Same {
    let hard_link = opts.link == options::LinkMode::Hard;
    let symbolic_link = opts.link == options::LinkMode::Symbolic;
    let backup = opts.backup != options::Backup::None;
    let go = |ok: bool| if ok { Same::Go } else { Same::Refuse };
    // `-n` never opens an existing destination, so it cannot write into
    // the source: GNU makes no check then, and skips the file in silence.
    if opts.no_clobber {
        return Same::Go;
    }
    let src_kind = u32::from(st.stx_mode) & libc::S_IFMT;
    let src_id = statx_id(st);
    let src_is_link = src_kind == libc::S_IFLNK;
    // A regular file is written through a link at the destination, so the
    // file it leads to is what counts; anything else, or a destination
    // removed first, replaces the link.
    let written_into =
        src_kind == libc::S_IFREG || (as_regular && src_kind != libc::S_IFDIR && !src_is_link);
    let lstat_dst =
        !written_into || opts.remove_destination || hard_link || symbolic_link || backup;
    let dst_st = if lstat_dst {
        std::fs::symlink_metadata(dst)
    } else {
        std::fs::metadata(dst)
    };
    let Ok(dst_st) = dst_st else {
        return Same::Go;
    };
    let same = src_id == id_of(&dst_st);
    if same && hard_link {
        return Same::Done;
    }
    // The two sides as names (links not followed).
    let (src_link_id, src_link_is_link, dst_link_id, dst_link) = if !followed {
        if src_is_link && dst_st.file_type().is_symlink() {
            // Two links: fine unless they are one name.
            let sn = same_name(src, dst);
            if !sn && backup {
                return Same::Go;
            }
            if !sn && same {
                return Same::Done;
            }
            return go(!sn);
        }
        (src_id, src_is_link, id_of(&dst_st), dst_st.clone())
    } else {
        if !same {
            return Same::Go;
        }
        let (Ok(d), Ok(s)) = (
            std::fs::symlink_metadata(dst),
            std::fs::symlink_metadata(src),
        ) else {
            return Same::Go;
        };
        if s.file_type().is_symlink() && d.file_type().is_symlink() && opts.remove_destination {
            return Same::Go;
        }
        (id_of(&s), s.file_type().is_symlink(), id_of(&d), d)
    };
    let same_link = src_link_id == dst_link_id;
    let dst_link_is_link = dst_link.file_type().is_symlink();
    if backup {
        if !same_link {
            // Backing up a file a followed link leads to would leave the
            // link dangling.
            return go(!(followed && src_link_is_link && !dst_link_is_link));
        }
        return go(!same_name(src, dst));
    }
    if opts.remove_destination {
        if dst_link_is_link {
            return Same::Go;
        }
        // Another hard link of the source: removing it loses nothing.
        if same_link && dst_link.nlink() > 1 && !same_name(src, dst) {
            return Same::Go;
        }
    }
    if !src_link_is_link && !dst_link_is_link {
        if src_link_id != dst_link_id {
            return Same::Go;
        }
        if hard_link {
            return Same::Done;
        }
    }
    if symbolic_link && dst_link_is_link {
        return Same::Go;
    }
    if !followed {
        // What the two lead to.
        let target = |p: &Path, is_link: bool, id| {
            if is_link {
                std::fs::metadata(p).ok().map(|m| id_of(&m))
            } else {
                Some(id)
            }
        };
        match (
            target(src, src_link_is_link, src_link_id),
            target(dst, dst_link_is_link, dst_link_id),
        ) {
            (Some(a), Some(b)) if a == b => {
                if hard_link {
                    return if dst_link_is_link {
                        Same::Go
                    } else {
                        Same::Done
                    };
                }
            }
            _ => return Same::Go,
        }
    }
    Same::Refuse
}

/// Whether two paths name the same directory entry: the same name in the
/// same directory (`a` and `./a`).
pub(super) fn same_name(a: &Path, b: &Path) -> bool {
    at::last_component(a) == at::last_component(b)
        && match (std::fs::metadata(parent(a)), std::fs::metadata(parent(b))) {
            (Ok(x), Ok(y)) => id_of(&x) == id_of(&y),
            _ => false,
        }
}
