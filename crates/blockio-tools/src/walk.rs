//! Turning command-line paths into the list of files to hash: directories
//! are recursed, entries sorted by name (byte order) so the output order is
//! stable.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Something that could not be listed, or that a walk met and cannot hash.
#[derive(Debug)]
pub struct WalkError {
    /// The path.
    pub path: PathBuf,
    /// What went wrong.
    pub error: io::Error,
    /// Not a failure of the walk: an entry that is not a regular file (a
    /// link to a directory, a dangling link, a FIFO, socket or device),
    /// which `--skip-special` leaves out silently.
    pub special: bool,
}

impl WalkError {
    fn special(path: PathBuf, what: &str) -> WalkError {
        WalkError {
            path,
            error: io::Error::other(format!(
                "{what}, not hashed (--skip-special leaves these out silently)"
            )),
            special: true,
        }
    }
}

/// The regular files (and symlinks to them) under `inputs`, in order:
/// each input as given; a directory's entries sorted by name, recursed
/// depth-first. Symbolic links to directories are not followed, and they,
/// dangling links and special files met on the way are returned as
/// [`WalkError`]s marked `special`.
pub fn files(inputs: &[PathBuf]) -> (Vec<PathBuf>, Vec<WalkError>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for p in inputs {
        match fs::metadata(p) {
            Ok(m) if m.is_dir() => walk_dir(p, &mut out, &mut errors),
            // Files, and things that fail later with a clear error when read.
            _ => out.push(p.clone()),
        }
    }
    (out, errors)
}

fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>, errors: &mut Vec<WalkError>) {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(error) => {
            errors.push(WalkError {
                path: dir.to_owned(),
                error,
                special: false,
            });
            return;
        }
    };
    let mut names: Vec<(PathBuf, Option<fs::FileType>)> = Vec::new();
    for e in entries {
        match e {
            Ok(e) => names.push((e.path(), e.file_type().ok())),
            Err(error) => errors.push(WalkError {
                path: dir.to_owned(),
                error,
                special: false,
            }),
        }
    }
    names.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    for (path, ty) in names {
        match ty {
            Some(t) if t.is_dir() => walk_dir(&path, out, errors),
            Some(t) if t.is_symlink() => match fs::metadata(&path) {
                Ok(m) if m.is_file() => out.push(path),
                Ok(m) if m.is_dir() => {
                    errors.push(WalkError::special(path, "a symbolic link to a directory"))
                }
                Ok(_) => errors.push(WalkError::special(
                    path,
                    "a symbolic link to a special file",
                )),
                Err(_) => errors.push(WalkError::special(path, "a dangling symbolic link")),
            },
            Some(t) if t.is_file() => out.push(path),
            Some(t) => errors.push(WalkError::special(path, special_kind(t))),
            None => out.push(path),
        }
    }
}

/// What a special file is, in words.
fn special_kind(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else {
        "not a regular file"
    }
}
