//! Direct I/O (`O_DIRECT`) made easy: open a file for it and learn the
//! alignment it needs.
//!
//! The alignment comes from `statx(STATX_DIOALIGN)` (Linux 6.1+), else from
//! the logical block size of the device holding the file (sysfs), else 4096,
//! which satisfies every common device. Operations on a [`DirectFile`] are
//! checked against it before submission, so a misaligned request fails with
//! an error that states the alignment instead of an `EINVAL` from the kernel.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::PathError;
use crate::op::action::Action;

/// Page size assumed for buffer alignment (x86-64, arm64 with 4K pages).
const PAGE_SIZE: usize = 4096;

/// What direct I/O on a file needs: buffer addresses must be multiples of
/// `memory`; offsets and lengths multiples of `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// Required alignment of buffer addresses, in bytes.
    pub memory: u32,
    /// Required alignment of file offsets and lengths, in bytes.
    pub offset: u32,
}

/// Where an [`Alignment`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignmentSource {
    /// `statx` with `STATX_DIOALIGN`.
    Statx,
    /// The device's logical block size from sysfs.
    LogicalBlockSize,
    /// Neither was available; 4096 was assumed.
    Assumed,
}

impl Alignment {
    /// The larger of the two alignments: a buffer, offset and length that are
    /// multiples of this satisfy both.
    pub fn max(&self) -> usize {
        self.memory.max(self.offset) as usize
    }

    /// Checks that both alignments are powers of two, as every device's
    /// are (and as rounding and the checks before submission need); the
    /// error names the field. blockio checks an alignment where it enters:
    /// from a [`Target`](crate::Target) before an operation is submitted,
    /// and in [`Engine::register_file`](crate::Engine::register_file).
    pub fn check(&self) -> io::Result<()> {
        for (name, v) in [("memory", self.memory), ("offset", self.offset)] {
            if !v.is_power_of_two() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "direct-I/O alignment: `{name}` must be a power of two (got {v}, in {self:?})"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether `action` (a read or write at `offset`) meets this alignment,
    /// the alignment itself being valid (both powers of two): every rule
    /// of [`check`](Self::check) and of direct I/O in one test. A power of
    /// two `p` is the nonzero number with `p & (p - 1) == 0`, and with it
    /// `x % p == x & (p - 1)`, so each rule is a mask and a broken one
    /// leaves a bit set.
    #[inline]
    pub(crate) fn admits(&self, offset: u64, action: &Action) -> bool {
        let (off, mem) = (u64::from(self.offset), u64::from(self.memory));
        let (off_mask, mem_mask) = (off.wrapping_sub(1), mem.wrapping_sub(1));
        let mut stray = (off & off_mask) | (mem & mem_mask) | (offset & off_mask);
        let zero = (off == 0) | (mem == 0);
        for v in action.segments().as_slice() {
            stray |= (v.iov_len as u64 & off_mask) | (v.iov_base as u64 & mem_mask);
        }
        stray == 0 && !zero
    }

    /// The offset alignment, with an invalid 0 taken as 1 (no constraint)
    /// so that rounding never divides by zero.
    fn offset_step(&self) -> u64 {
        u64::from(self.offset.max(1))
    }

    /// Round `n` up to a multiple of the offset alignment; `None` if that
    /// multiple does not fit in a `u64`.
    pub fn round_up(&self, n: u64) -> Option<u64> {
        let step = self.offset_step();
        n.div_ceil(step).checked_mul(step)
    }

    /// Round `n` down to a multiple of the offset alignment.
    pub fn round_down(&self, n: u64) -> u64 {
        n - n % self.offset_step()
    }

    /// The direct-I/O alignment of an open file, and where it came from.
    pub fn of(file: &impl AsFd) -> io::Result<(Alignment, AlignmentSource)> {
        let fd = file.as_fd().as_raw_fd();
        let stx = statx(fd, libc::STATX_DIOALIGN)?;
        let from_statx = Alignment {
            memory: stx.stx_dio_mem_align.max(1),
            offset: stx.stx_dio_offset_align,
        };
        if stx.stx_mask & libc::STATX_DIOALIGN != 0 && from_statx.check().is_ok() {
            return Ok((from_statx, AlignmentSource::Statx));
        }
        let dev = (stx.stx_dev_major, stx.stx_dev_minor);
        if let Some(lbs) = logical_block_size(dev) {
            return Ok((
                Alignment {
                    memory: lbs,
                    offset: lbs,
                },
                AlignmentSource::LogicalBlockSize,
            ));
        }
        Ok((
            Alignment {
                memory: 4096,
                offset: 4096,
            },
            AlignmentSource::Assumed,
        ))
    }
}

fn statx(fd: RawFd, mask: u32) -> io::Result<libc::statx> {
    // SAFETY: all-zero is a valid `statx` struct (plain integers).
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = b"\0";
    // SAFETY: `empty` is a NUL-terminated string, `stx` is a valid out pointer,
    // and AT_EMPTY_PATH makes the call act on `fd` itself.
    let rc = unsafe {
        libc::statx(
            fd,
            empty.as_ptr().cast(),
            libc::AT_EMPTY_PATH,
            mask,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stx)
}

fn logical_block_size((major, minor): (u32, u32)) -> Option<u32> {
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition has no queue/ of its own; its parent directory does.
    for dir in [base.join("queue"), base.join("../queue")] {
        if let Ok(text) = std::fs::read_to_string(dir.join("logical_block_size")) {
            if let Ok(n) = text.trim().parse::<u32>() {
                if n.is_power_of_two() {
                    return Some(n);
                }
            }
        }
    }
    None
}

/// Whether the block device holding `file` has poll queues (so that IOPOLL
/// can complete its requests without interrupts). `false` when unknown.
pub fn device_supports_polling(file: &impl AsFd) -> bool {
    let Ok(stx) = statx(file.as_fd().as_raw_fd(), libc::STATX_BASIC_STATS) else {
        return false;
    };
    let base = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        stx.stx_dev_major, stx.stx_dev_minor
    ));
    [base.join("queue/io_poll"), base.join("../queue/io_poll")]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .any(|t| t.trim() == "1")
}

/// A file opened with `O_DIRECT`, with the alignment it needs.
///
/// Operations built on it ([`Op::read`](crate::Op::read) and friends) are
/// checked against that alignment before they are submitted.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    alignment: Alignment,
    source: AlignmentSource,
    polling: bool,
}

impl DirectFile {
    /// Opens an existing file read-only for direct I/O.
    pub fn open(path: impl AsRef<Path>) -> io::Result<DirectFile> {
        DirectFile::open_with(path, OpenOptions::new().read(true))
    }

    /// Opens (creating if needed) a file read-write for direct I/O.
    pub fn create(path: impl AsRef<Path>) -> io::Result<DirectFile> {
        DirectFile::open_with(path, OpenOptions::new().read(true).write(true).create(true))
    }

    /// Opens with the given options plus `O_DIRECT`.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> io::Result<DirectFile> {
        let path = path.as_ref();
        let mut options = options.clone();
        options.custom_flags(libc::O_DIRECT);
        let file = options.open(path).map_err(|e| {
            let action = if e.raw_os_error() == Some(libc::EINVAL) {
                "open with O_DIRECT (the filesystem may not support direct I/O)"
            } else {
                "open with O_DIRECT"
            };
            PathError::wrap(action, path, e)
        })?;
        DirectFile::from_file(file).map_err(|e| PathError::wrap("read alignment of", path, e))
    }

    /// Wraps a file that is already open with `O_DIRECT`.
    ///
    /// Fails with `InvalidInput` if the file was not opened with `O_DIRECT`.
    pub fn from_file(file: File) -> io::Result<DirectFile> {
        // SAFETY: F_GETFL on a descriptor we own has no memory effects.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if flags & libc::O_DIRECT == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "DirectFile::from_file: the file was not opened with O_DIRECT",
            ));
        }
        let (alignment, source) = Alignment::of(&file)?;
        let polling = device_supports_polling(&file);
        Ok(DirectFile {
            file,
            alignment,
            source,
            polling,
        })
    }

    /// The alignment direct I/O on this file needs.
    pub fn alignment(&self) -> Alignment {
        self.alignment
    }

    /// Where the alignment came from.
    pub fn alignment_source(&self) -> AlignmentSource {
        self.source
    }

    /// Whether the device has poll queues (see [`device_supports_polling`]).
    pub fn supports_polling(&self) -> bool {
        self.polling
    }

    /// The underlying file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Gives back the underlying file.
    pub fn into_file(self) -> File {
        self.file
    }

    /// An aligned, zeroed buffer of at least `len` bytes (rounded up to the
    /// offset alignment) suitable for this file.
    ///
    /// # Panics
    /// On allocation failure, or if the rounded length does not fit in
    /// memory at all (like `Vec::with_capacity`).
    ///
    /// The buffer is page aligned even where the device needs less (often
    /// 512): a 4 KiB buffer that straddles two pages costs the kernel two
    /// page pins and two DMA segments per request, fewer IOPS on random
    /// 4 KiB reads (see `docs/benchmarks.md`, "Page-aligned direct-I/O
    /// buffers").
    pub fn alloc_buf(&self, len: usize) -> crate::AlignedBuf {
        let len = self
            .alignment
            .round_up(len as u64)
            .and_then(|n| usize::try_from(n).ok())
            .expect("DirectFile::alloc_buf: the length rounded up to the alignment overflows");
        crate::AlignedBuf::new(len, self.alignment.max().max(PAGE_SIZE))
    }
}

impl AsFd for DirectFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for DirectFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
