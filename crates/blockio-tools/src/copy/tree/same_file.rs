//! GNU `cp`'s rule for a non-directory operand whose destination may be
//! the source itself (`same_file_ok` in its copy.c): a pure function of
//! the two paths and the options, apart from the walk, because its cases
//! (links on either side, hard links, `-b`, `--remove-destination`, `-l`,
//! `-s`) are GNU's and are checked against GNU's behaviour one by one.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::FileType;

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
    // `-n` never opens an existing destination, so it cannot write into
    // the source: GNU makes no check then, and skips the file in silence.
    if opts.no_clobber {
        return Same::Go;
    }
    let src_kind = FileType::from_raw_mode(u32::from(st.stx_mode));
    let src_id = statx_id(st);
    let src_is_link = src_kind == FileType::Symlink;
    // A regular file is written through a link at the destination, so the
    // file it leads to is what counts; anything else, or a destination
    // removed first, replaces the link.
    let written_into = src_kind == FileType::RegularFile
        || (as_regular && src_kind != FileType::Directory && !src_is_link);
    let replaced = opts.remove_destination
        || opts.link != options::LinkMode::Copy
        || opts.backup != options::Backup::None;
    let dst_st = if !written_into || replaced {
        std::fs::symlink_metadata(dst)
    } else {
        std::fs::metadata(dst)
    };
    let Ok(dst_st) = dst_st else {
        return Same::Go;
    };
    let same = src_id == id_of(&dst_st);
    if same && opts.link == options::LinkMode::Hard {
        return Same::Done;
    }
    let names = if followed {
        followed_names(src, dst, same, opts)
    } else {
        names_as_given(src, dst, (src_id, src_is_link), &dst_st, same, opts)
    };
    match names {
        Ok(names) => names_verdict(src, dst, followed, &names, opts),
        Err(verdict) => verdict,
    }
}

/// The two sides as names (links not followed), as GNU compares them.
struct Names {
    /// The source's name's (device, inode), and whether it is a link.
    src: ((u64, u64), bool),
    /// The destination's name's (device, inode).
    dst_id: (u64, u64),
    /// The destination name's `lstat`.
    dst: std::fs::Metadata,
}

/// The names of a source not followed (`src`: its id and whether it is a
/// link) and of its destination (`dst_st`, as looked at); `Err` with the
/// verdict when two links settle it.
fn names_as_given(
    src: &Path,
    dst: &Path,
    (src_id, src_is_link): ((u64, u64), bool),
    dst_st: &std::fs::Metadata,
    same: bool,
    opts: &CopyOptions,
) -> Result<Names, Same> {
    if src_is_link && dst_st.file_type().is_symlink() {
        // Two links: fine unless they are one name.
        let sn = same_name(src, dst);
        if !sn && opts.backup != options::Backup::None {
            return Err(Same::Go);
        }
        if !sn && same {
            return Err(Same::Done);
        }
        return Err(go(!sn));
    }
    Ok(Names {
        src: (src_id, src_is_link),
        dst_id: id_of(dst_st),
        dst: dst_st.clone(),
    })
}

/// The names of a source followed and of its destination, which lead to
/// one file when `same`; `Err` with the verdict when that settles it.
fn followed_names(src: &Path, dst: &Path, same: bool, opts: &CopyOptions) -> Result<Names, Same> {
    if !same {
        return Err(Same::Go);
    }
    let (Ok(d), Ok(s)) = (
        std::fs::symlink_metadata(dst),
        std::fs::symlink_metadata(src),
    ) else {
        return Err(Same::Go);
    };
    if s.file_type().is_symlink() && d.file_type().is_symlink() && opts.remove_destination {
        return Err(Same::Go);
    }
    Ok(Names {
        src: (id_of(&s), s.file_type().is_symlink()),
        dst_id: id_of(&d),
        dst: d,
    })
}

/// GNU's verdict from the two names: what a backup, a removal or a link
/// does to them, and else whether they lead to one file.
fn names_verdict(src: &Path, dst: &Path, followed: bool, n: &Names, opts: &CopyOptions) -> Same {
    let hard_link = opts.link == options::LinkMode::Hard;
    let ((src_link_id, src_link_is_link), dst_link_id) = (n.src, n.dst_id);
    let same_link = src_link_id == dst_link_id;
    let dst_link_is_link = n.dst.file_type().is_symlink();
    if opts.backup != options::Backup::None {
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
        if same_link && n.dst.nlink() > 1 && !same_name(src, dst) {
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
    if opts.link == options::LinkMode::Symbolic && dst_link_is_link {
        return Same::Go;
    }
    if followed {
        return Same::Refuse;
    }
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
        (Some(a), Some(b)) if a == b && hard_link && dst_link_is_link => Same::Go,
        (Some(a), Some(b)) if a == b && hard_link => Same::Done,
        (Some(a), Some(b)) if a == b => Same::Refuse,
        _ => Same::Go,
    }
}

/// [`Same::Go`] when `ok`, else [`Same::Refuse`].
fn go(ok: bool) -> Same {
    if ok {
        Same::Go
    } else {
        Same::Refuse
    }
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
