//! Benchmark data files: created once, filled with a pattern that lets any
//! read be checked against its offset alone.
//!
//! The 8-byte little-endian word at byte offset `8 * i` is `word(i)`, a
//! SplitMix64 hash of `i`: no two blocks look alike (so a read from the wrong
//! offset is caught), and no block is all zeros (so a filesystem cannot store
//! it sparsely).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A small fast generator for offsets (xorshift64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator; `seed` 0 is replaced by a fixed non-zero seed.
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The pattern word at word index `i` (byte offset `8 * i`).
pub fn word(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern as it appears at file offset `offset`
/// (a multiple of 8; `buf.len()` a multiple of 8).
pub fn fill(buf: &mut [u8], offset: u64) {
    debug_assert!(offset % 8 == 0 && buf.len() % 8 == 0);
    for (k, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word(offset / 8 + k as u64).to_le_bytes());
    }
}

/// Checks that `buf` holds the pattern found at `offset` in a data file.
/// On a mismatch, returns the file offset of the first wrong byte.
pub fn check(buf: &[u8], offset: u64) -> std::result::Result<(), u64> {
    debug_assert!(offset % 8 == 0);
    for (k, w) in buf.chunks(8).enumerate() {
        let want = word(offset / 8 + k as u64).to_le_bytes();
        if let Some(j) = w.iter().zip(want).position(|(a, b)| *a != b) {
            return Err(offset + 8 * k as u64 + j as u64);
        }
    }
    Ok(())
}

/// Bytes free for an unprivileged user on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .with_context(|| format!("{}: path contains a NUL byte", dir.display()))?;
    // SAFETY: `c` is a valid C string and `st` is written by the call only.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Whether the data file at `path` is already there with `size` bytes
/// (then [`create`] reuses it).
pub fn made(path: &Path, size: u64) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() == size)
}

/// Creates `dir/name` of `size` bytes of pattern (or reuses it if it is
/// already there with that size), synced to the device.
///
/// Fails with a clear message if the directory cannot be created or written,
/// or if the filesystem has less than `size` plus 64 MiB free.
pub fn create(dir: &Path, name: &str, size: u64) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let path = dir.join(name);
    if made(&path, size) {
        return Ok(path);
    }
    let free = free_bytes(dir)?;
    let margin = 64 << 20;
    if free < size + margin {
        bail!(
            "{} has {} MiB free; the {} MiB data file needs {} MiB (choose a smaller --size-mib or another --dir)",
            dir.display(),
            free >> 20,
            size >> 20,
            (size + margin) >> 20
        );
    }
    let tmp = path.with_extension("partial");
    let mut f = File::create(&tmp).with_context(|| {
        format!(
            "cannot create {} (is the directory writable?)",
            tmp.display()
        )
    })?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut written = 0u64;
    while written < size {
        let n = chunk.len().min((size - written) as usize);
        fill(&mut chunk[..n], written);
        if let Err(e) = f.write_all(&chunk[..n]) {
            drop(f);
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("write {} at offset {written}", tmp.display()));
        }
        written += n as u64;
    }
    f.sync_all()
        .with_context(|| format!("fsync {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, &path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
    Ok(path)
}

/// Whether the file system holding `path` is tmpfs or ramfs, where
/// `O_DIRECT` and "cold" reads measure memory, not a device.
pub fn is_memory_filesystem(path: impl AsRef<Path>) -> io::Result<bool> {
    let path = path.as_ref();
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: all-zero is a valid `statfs` (plain integers).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a live out-parameter.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("statfs {}: {e}", path.display()),
        ));
    }
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let magic = st.f_type as i64;
    Ok(magic == libc::TMPFS_MAGIC || magic == RAMFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_accepts_the_pattern_and_finds_the_first_wrong_byte() {
        let mut buf = vec![0u8; 4096];
        fill(&mut buf, 8192);
        assert_eq!(check(&buf, 8192), Ok(()));
        assert_eq!(check(&buf, 4096), Err(4096));
        buf[100] ^= 1;
        assert_eq!(check(&buf, 8192), Err(8192 + 100));
        // A short tail still checks.
        assert_eq!(check(&buf[..13], 8192), Ok(()));
    }

    #[test]
    fn created_file_holds_the_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let p = create(dir.path(), "d.dat", 3 << 20).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), 3 << 20);
        assert_eq!(check(&bytes, 0), Ok(()));
        assert!(!bytes[..4096].iter().all(|&b| b == 0));
    }

    #[test]
    fn too_little_space_is_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let err = create(dir.path(), "huge.dat", 1 << 60).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("MiB free"), "{msg}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
