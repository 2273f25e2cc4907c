//! Profiles (what is read, and from where) and the workload a run reads.

use std::fmt;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use blockio::{Alignment, DirectFile, Target};

use crate::data::{self, Rng};

/// What a benchmark run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// O_DIRECT random 4 KiB reads.
    Direct,
    /// Buffered random 4 KiB reads of a file evicted from the page cache.
    Cold,
    /// Buffered random 4 KiB reads of a file fully in the page cache.
    Warm,
    /// Buffered sequential 128 KiB reads of a file in the page cache.
    Seq,
}

impl Profile {
    /// Every profile, in report order.
    pub const ALL: [Profile; 4] = [Profile::Direct, Profile::Cold, Profile::Warm, Profile::Seq];

    /// Bytes per read.
    pub fn block_size(self) -> usize {
        match self {
            Profile::Seq => 128 << 10,
            _ => 4 << 10,
        }
    }

    /// Whether the file is opened with O_DIRECT.
    pub fn direct(self) -> bool {
        self == Profile::Direct
    }

    /// Whether reads walk the file in order (else random block offsets).
    pub fn sequential(self) -> bool {
        self == Profile::Seq
    }

    /// Whether the file is read into the page cache before each run (else
    /// it is evicted).
    pub fn warm(self) -> bool {
        matches!(self, Profile::Warm | Profile::Seq)
    }

    /// A few words saying what the profile measures (chart titles).
    pub fn short(self) -> &'static str {
        match self {
            Profile::Direct => "O_DIRECT, random 4 KiB",
            Profile::Cold => "cold cache, random 4 KiB",
            Profile::Warm => "warm cache, random 4 KiB",
            Profile::Seq => "warm cache, sequential 128 KiB",
        }
    }

    /// One line saying what the profile measures.
    pub fn describe(self) -> &'static str {
        match self {
            Profile::Direct => "O_DIRECT random 4 KiB reads",
            Profile::Cold => "buffered random 4 KiB reads, file evicted from the page cache",
            Profile::Warm => "buffered random 4 KiB reads, file in the page cache",
            Profile::Seq => "buffered sequential 128 KiB reads, file in the page cache",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::Direct => "direct",
            Profile::Cold => "cold",
            Profile::Warm => "warm",
            Profile::Seq => "seq",
        })
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Profile, String> {
        Profile::ALL
            .into_iter()
            .find(|p| p.to_string() == s)
            .ok_or_else(|| format!("unknown profile {s:?}: expected direct, cold, warm or seq"))
    }
}

/// The file a run reads: opened with O_DIRECT through [`DirectFile`] for the
/// direct profile, plainly otherwise.
#[derive(Debug)]
pub enum BenchFile {
    /// Opened for direct I/O.
    Direct(DirectFile),
    /// Opened for buffered I/O.
    Plain(File),
}

impl BenchFile {
    /// The open file, for `pread`.
    pub fn file(&self) -> &File {
        match self {
            BenchFile::Direct(d) => d.file(),
            BenchFile::Plain(f) => f,
        }
    }
}

impl Target for BenchFile {
    fn raw_fd(&self) -> RawFd {
        self.file().as_raw_fd()
    }
    fn direct_alignment(&self) -> Option<Alignment> {
        match self {
            BenchFile::Direct(d) => Some(d.alignment()),
            BenchFile::Plain(_) => None,
        }
    }
}

/// One profile's reads over one data file, shared by a run's threads.
#[derive(Debug)]
pub struct Workload {
    /// The profile.
    pub profile: Profile,
    /// The data file.
    pub path: PathBuf,
    /// The open file.
    pub file: BenchFile,
    /// Bytes per read.
    pub block_size: usize,
    blocks: u64,
    /// [`scatter`]'s stride for `blocks`.
    stride: u64,
    cursor: AtomicU64,
    verify: bool,
}

/// The `i`-th block of a fixed permutation of `0..blocks` that jumps
/// across the file: `i * stride + 1 (mod blocks)` with `stride` coprime to
/// `blocks` (a bijection), so no block repeats within `blocks` reads.
fn scatter(i: u64, blocks: u64, stride: u64) -> u64 {
    ((u128::from(i % blocks) * u128::from(stride) + 1) % u128::from(blocks)) as u64
}

/// A stride for [`scatter`]: far from 0 and coprime to `blocks`.
fn stride(blocks: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut stride = 0x9e37_79b9_7f4a_7c15 % blocks;
    while gcd(stride, blocks) != 1 {
        stride += 1;
    }
    stride
}

impl Workload {
    /// Opens `path` for `profile`. With `verify`, every read's bytes are
    /// checked against the data pattern.
    pub fn open(profile: Profile, path: &Path, verify: bool) -> Result<Workload> {
        let file = if profile.direct() {
            BenchFile::Direct(DirectFile::open(path)?)
        } else {
            BenchFile::Plain(File::open(path).with_context(|| format!("open {}", path.display()))?)
        };
        let len = file.file().metadata()?.len();
        let block_size = profile.block_size();
        let blocks = len / block_size as u64;
        if blocks == 0 {
            bail!(
                "{} is smaller than one {block_size}-byte block",
                path.display()
            );
        }
        Ok(Workload {
            profile,
            path: path.to_owned(),
            file,
            block_size,
            blocks,
            stride: stride(blocks),
            cursor: AtomicU64::new(0),
            verify,
        })
    }

    /// The offset of the next read: a random block, or the next block in
    /// order (shared by all threads, wrapping at the end of the file).
    ///
    /// Cold runs read every block once before any block twice (a shared
    /// cursor through a scattered permutation of the blocks): a repeated
    /// block would come from the page cache its first read filled, a gain
    /// that grows with the reads done and so favours the fastest strategy.
    pub fn next_offset(&self, rng: &mut Rng) -> u64 {
        let block = match self.profile {
            Profile::Seq => self.cursor.fetch_add(1, Ordering::Relaxed) % self.blocks,
            Profile::Cold => scatter(
                self.cursor.fetch_add(1, Ordering::Relaxed),
                self.blocks,
                self.stride,
            ),
            Profile::Direct | Profile::Warm => rng.below(self.blocks),
        };
        block * self.block_size as u64
    }

    /// Checks one completed read: all bytes came back and, with `verify`,
    /// they are the pattern's bytes at `offset`.
    pub fn check(&self, buf: &[u8], offset: u64, got: usize) -> Result<()> {
        if got != self.block_size {
            bail!(
                "{}: read of {} bytes at offset {offset} returned {got}",
                self.path.display(),
                self.block_size
            );
        }
        if self.verify {
            if let Err(at) = data::check(&buf[..got], offset) {
                bail!(
                    "{}: wrong data at offset {at} (read of {got} bytes at offset {offset})",
                    self.path.display()
                );
            }
        }
        Ok(())
    }

    /// `pread` of one block into `buf`.
    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.file
            .file()
            .read_at(buf, offset)
            .with_context(|| format!("{}: pread at offset {offset}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn scatter_visits_every_block_once() {
        for blocks in [1u64, 2, 7, 4096, 262_144, 1_000_003] {
            let mut seen = vec![false; blocks as usize];
            for i in 0..blocks {
                let b = super::scatter(i, blocks, super::stride(blocks)) as usize;
                assert!(!seen[b], "block {b} twice among {blocks}");
                seen[b] = true;
            }
        }
    }
}
