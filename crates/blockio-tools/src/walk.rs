//! Turning command-line paths into the list of files to hash: directories
//! are recursed, entries sorted by name (byte order) so the output order is
//! stable.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Something that could not be listed.
#[derive(Debug)]
pub struct WalkError {
    /// The path.
    pub path: PathBuf,
    /// What went wrong.
    pub error: io::Error,
}

/// The regular files (and symlinks to them) under `inputs`, in order:
/// each input as given; a directory's entries sorted by name, recursed
/// depth-first. Symlinks to directories are not followed.
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
            }),
        }
    }
    names.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    for (path, ty) in names {
        match ty {
            Some(t) if t.is_dir() => walk_dir(&path, out, errors),
            Some(t) if t.is_symlink() => {
                if fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                    out.push(path);
                }
            }
            Some(t) if t.is_file() => out.push(path),
            // Sockets, fifos, devices: not hashed when walking a tree.
            Some(_) => {}
            None => out.push(path),
        }
    }
}
