//! One file of a group on its way through the copy ([`FileCopy`]), the pieces
//! its data is cut into ([`Chunk`]), and the small judgments and helpers
//! every step of the group's copy shares. Kept apart from the steps so
//! that they depend on it and never on one another's internals.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use blockio::{Engine, Op};

use super::super::entry::{DirPair, Entry};
use super::super::options::{CopyOptions, Sparse};
use crate::quote::quote;

/// With `--fsync`, files of at least this many bytes have their write-back
/// started as their blocks are written and are fsynced each: a large copy
/// streams to the disk, and a failure names its file. Smaller files, like
/// the directories, are made durable by one `syncfs` per destination file
/// system at the end (`Walker::finish_dirs`), much faster on many small
/// files than an fsync per file (`docs/benchmarks.md`). On
/// ext4 without a journal each such fsync writes the file's data, its
/// inode's table block and its parent directory, then flushes the disk's
/// cache; the syncfs writes them all merged, with one flush.
pub(crate) const FSYNC_EACH_MIN: u64 = 1 << 20;

/// Whether FIFOs and devices are read like files (see
/// `CopyOptions::copy_contents`).
pub(super) fn as_regular(opts: &CopyOptions) -> bool {
    !opts.recursive || opts.copy_contents
}

/// Whether `e` is made durable by an fsync of its own (with `--fsync`).
pub(super) fn fsync_each(opts: &CopyOptions, e: &Entry) -> bool {
    opts.fsync && e.st.stx_size >= FSYNC_EACH_MIN
}

/// One file of the group on its way.
pub(super) struct FileCopy<'g> {
    pub(super) e: &'g Entry,
    pub(super) src: OwnedFd,
    pub(super) dst: OwnedFd,
    /// `dst` was switched to `O_DIRECT` (see [`super::wave::go_direct`]).
    pub(super) direct: bool,
    /// This copy created `dst`: only then is it removed if the copy fails.
    pub(super) created: bool,
    /// `dst`, created by this copy, is removed if an interrupting signal
    /// comes before this is dropped (after the file's last step).
    pub(super) listed: Option<super::super::unfinished::Unfinished>,
    /// `-b`: the name the file that was there is kept under, in the same
    /// directory; put back in place if the copy fails.
    pub(super) backup: Option<std::ffi::CString>,
    /// `src` or `dst` is not a regular file (a FIFO or device written
    /// into, a FIFO read with `--copy-contents`): copied with plain reads
    /// and writes to the end, never resized, ranged or removed.
    pub(super) stream: bool,
    /// The end of the data written so far (a direct copy's last block is
    /// written whole, then the file is cut back to this).
    pub(super) end: u64,
    /// Where a read met the end of the file, when that is not the size
    /// `statx` gave (a file that shrank or grew while it was copied, or
    /// one of /proc or /sys whose size is a guess): the copy ends there,
    /// never padded or cut to the stated size.
    pub(super) eof: Option<u64>,
    /// `dst` is a regular file that was there before the copy and still
    /// holds what it held: it is emptied ([`empty_old`]) only when its new
    /// bytes are about to be written, so that an interrupted or failed copy
    /// leaves at most the files being written at that moment (one per
    /// worker) neither old nor new.
    pub(super) old: bool,
    /// The first failure: what was being done, and why.
    pub(super) failed: Option<(String, io::Error)>,
}

/// How a destination is written (see [`FileCopy::old`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// Written as it is: a new file, or an existing one whose bytes are
    /// kept (`--attributes-only`).
    Ready,
    /// An existing regular file, emptied just before its new bytes are
    /// written.
    Old,
    /// A FIFO or a device, written into as a stream.
    Stream,
}

/// Empties job `j`'s destination if it still holds its old bytes, just
/// before its new ones are written; whether the job may go on (a failure
/// is recorded in the job, and the file keeps what it held). A copy that
/// may end in a hole (sparse) gets its length at once, all holes, so that
/// it is complete after its last write rather than once its group ends.
pub(super) fn empty_old(j: &mut FileCopy<'_>, opts: &CopyOptions, dirs: &DirPair) -> bool {
    if j.old && j.failed.is_none() {
        j.old = false;
        let holes = !j.stream && (is_sparse(opts, j.e) || opts.sparse == Sparse::Always);
        let len = if holes { j.e.st.stx_size } else { 0 };
        let emptied = rustix::fs::ftruncate(&j.dst, 0).and_then(|()| match len {
            0 => Ok(()),
            len => rustix::fs::ftruncate(&j.dst, len),
        });
        if let Err(e) = emptied {
            let what = format!("cannot truncate {}", quote(&dirs.dst_of(&j.e.dst_name)));
            j.failed = Some((what, e.into()));
        }
    }
    j.failed.is_none()
}

/// A range of one file to copy through its piece of the arena.
#[derive(Clone, Copy)]
pub(super) struct Chunk {
    /// The file's job, by its index in the group.
    pub(super) job: usize,
    /// Where the range starts in the file (and in its copy).
    pub(super) offset: u64,
    /// Its length: at most `--block-size` bytes.
    pub(super) len: usize,
}

/// Which end of a copy failed.
pub(super) enum Side {
    /// Reading the source.
    Read,
    /// Writing the copy.
    Write,
}

/// Records the first failure of job `job` (a later one is a consequence
/// of it, and not reported).
pub(super) fn fail(
    jobs: &mut [FileCopy<'_>],
    dirs: &DirPair,
    job: usize,
    side: Side,
    e: io::Error,
) {
    let j = &mut jobs[job];
    if j.failed.is_none() {
        j.failed = Some((failure(dirs, j.e, side), e));
    }
}

/// What failed, in cp's words.
pub(super) fn failure(dirs: &DirPair, e: &Entry, side: Side) -> String {
    match side {
        Side::Read => format!("error reading {}", quote(&dirs.src_of(&e.src_name))),
        Side::Write => format!("error writing {}", quote(&dirs.dst_of(&e.dst_name))),
    }
}

/// Fewer blocks allocated than the size needs: the file has holes (which
/// the copy keeps, unless `--sparse=never`).
pub(super) fn is_sparse(opts: &CopyOptions, e: &Entry) -> bool {
    opts.sparse != Sparse::Never && e.st.stx_blocks.saturating_mul(512) < e.st.stx_size
}

/// How many of the first `sizes` (at least one) fit in `wave` bytes: the
/// files a group copies now (the rest go back to the queue), and the
/// chunks of one wave.
pub(super) fn first_wave(sizes: impl Iterator<Item = u64>, wave: u64) -> usize {
    let mut bytes = 0u64;
    let mut n = 0;
    for size in sizes {
        if n > 0 && bytes + size > wave {
            break;
        }
        bytes += size;
        n += 1;
    }
    n
}

/// Runs `ops` as one engine batch; yields each result with its entry of
/// `index` (one per op). A failure of the whole batch is every op's result.
pub(super) fn run_batch(
    engine: &Engine,
    mut ops: Vec<Op<'_>>,
    index: Vec<usize>,
) -> impl Iterator<Item = (usize, io::Result<usize>)> {
    let results = match engine.submit(&mut ops) {
        Ok(r) => r,
        Err(e) => index.iter().map(|_| Err(clone(&e))).collect(),
    };
    index.into_iter().zip(results)
}

/// The attributes of an open file, in the engine's form (`libc::statx`,
/// what its batched `statx` gives every other entry), every field as the
/// kernel filled it: the engine's `statx` kind run on this thread. The
/// error is the system's alone, as every other step's is, so messages
/// name the file the caller knows rather than a descriptor.
pub(crate) fn fstat(fd: &impl AsFd) -> io::Result<libc::statx> {
    let fd = fd.as_fd();
    blockio::blocking::stat(blockio::PathAt::file(&fd), 0).map_err(|e| clone(&e))
}

/// An error for every file of a batch that failed as a whole.
pub(super) fn clone(e: &io::Error) -> io::Error {
    match blockio::errno(e) {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::first_wave;

    #[test]
    fn a_group_keeps_the_files_that_fit_in_a_wave_and_at_least_one() {
        let w = 16 << 20;
        assert_eq!(first_wave([1 << 30, 1 << 30].into_iter(), w), 1);
        assert_eq!(first_wave(std::iter::repeat_n(4096, 32), w), 32);
        assert_eq!(first_wave(std::iter::repeat_n(1 << 20, 32), w), 16);
        // A file larger than a wave starts a group of its own.
        assert_eq!(first_wave([0, 0, 20 << 20, 0].into_iter(), w), 2);
        assert_eq!(first_wave([20 << 20, 0].into_iter(), w), 1);
        assert_eq!(first_wave(std::iter::empty(), w), 0);
    }
}
