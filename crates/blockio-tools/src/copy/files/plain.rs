//! The plain system calls that move bytes on the worker's thread, where
//! the ring is no help: whole files by `copy_file_range`, streams (a FIFO
//! or device at either end) and files whose size says nothing read to
//! their end, the finishing of short reads and writes, holes kept
//! (`SEEK_DATA`/`SEEK_HOLE`, `--sparse=always`), and write-back started
//! early. Each retries on `EINTR` and reports any other error to its
//! caller, which names the file.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use super::super::entry::Entry;
use super::super::options::CopyOptions;
use super::super::outcome::Progress;
use super::job::{is_sparse, FileCopy, Side};

/// Copies a file from `from` on by reading it until a read returns
/// nothing; where the copy ends. For files whose stated size is no guide
/// (0 for most of /proc), for files that grew while they were copied (from
/// their stated size), and with plain reads and writes (no offsets) for a
/// stream: a FIFO or device at either end.
pub(super) fn copy_to_eof(
    j: &FileCopy<'_>,
    progress: &Progress,
    holes: bool,
    from: u64,
) -> Result<u64, (Side, io::Error)> {
    let mut buf = vec![0u8; if j.stream { 128 << 10 } else { 16 << 10 }];
    let mut off = from;
    loop {
        let n = if j.stream {
            read_some(&j.src, &mut buf)
        } else {
            read_full(&j.src, off, &mut buf, 0)
        };
        let n = n.map_err(|e| (Side::Read, e))?;
        if n == 0 {
            if holes {
                // The file ends where the data did, even in a hole.
                rustix::fs::ftruncate(&j.dst, off).map_err(|e| (Side::Write, e.into()))?;
            }
            return Ok(off);
        }
        if holes {
            write_skipping_zeros(&j.dst, off, &buf[..n])
        } else if j.stream {
            write_all(&j.dst, &buf[..n])
        } else {
            write_full(&j.dst, off, &buf[..n], 0)
        }
        .map_err(|e| (Side::Write, e))?;
        progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
        off += n as u64;
    }
}

/// One `read` at the file's position, retried when interrupted.
fn read_some(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes all of `buf` at the file's position.
fn write_all(fd: &OwnedFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Finishes a short read; the bytes read in all (fewer at end of file).
pub(super) fn read_full(
    fd: &OwnedFd,
    offset: u64,
    buf: &mut [u8],
    mut done: usize,
) -> io::Result<usize> {
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// `--sparse=always`: writes the blocks of `buf` that are not all zeros,
/// each run of them in one write; the others stay holes (the file was
/// empty, and its length is set at the end). Blocks are the file's 4 KiB
/// blocks, on file-offset boundaries whatever `offset` is, so a buffer
/// that starts or ends inside one (a pipe's reads) leaves no zero block
/// written as data: the first block of `buf` is the rest of the one
/// `offset` falls in.
pub(super) fn write_skipping_zeros(fd: &OwnedFd, offset: u64, buf: &[u8]) -> io::Result<()> {
    const HOLE: u64 = 4096;
    // The end of the block of `buf` that starts at `k`: the next block
    // boundary of the file, or the end of `buf`.
    let block_end = |k: usize| (k + (HOLE - (offset + k as u64) % HOLE) as usize).min(buf.len());
    let zero = |k: usize| buf[k..block_end(k)].iter().all(|&b| b == 0);
    let mut start = 0;
    while start < buf.len() {
        if zero(start) {
            start = block_end(start);
            continue;
        }
        // The next run of blocks holding data, written at once.
        let mut end = start;
        while end < buf.len() && !zero(end) {
            end = block_end(end);
        }
        write_full(fd, offset + start as u64, &buf[start..end], 0)?;
        start = end;
    }
    Ok(())
}

/// Finishes a short write.
pub(super) fn write_full(fd: &OwnedFd, offset: u64, buf: &[u8], mut done: usize) -> io::Result<()> {
    while done < buf.len() {
        match rustix::io::pwrite(fd, &buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The ranges of the file that hold data: the whole file, or for a sparse
/// file its data extents (`SEEK_DATA`/`SEEK_HOLE`).
pub(super) fn extents(fd: &OwnedFd, opts: &CopyOptions, e: &Entry) -> Vec<(u64, u64)> {
    let size = e.st.stx_size;
    if !is_sparse(opts, e) {
        return vec![(0, size)];
    }
    let mut out = Vec::new();
    let mut pos = 0u64;
    // The seeks move the file position, which the copy (by pread) never
    // uses.
    use rustix::fs::{seek, SeekFrom};
    while pos < size {
        let data = match seek(fd, SeekFrom::Data(pos)) {
            Ok(data) => data,
            Err(rustix::io::Errno::NXIO) => break, // only a hole is left
            Err(_) => return vec![(0, size)],      // no SEEK_DATA here: copy it all
        };
        let end = seek(fd, SeekFrom::Hole(data)).map_or(size, |hole| hole.min(size));
        if end <= data {
            break;
        }
        out.push((data, end));
        pos = end;
    }
    out
}

/// Copies the whole file with `copy_file_range`; `Ok(false)` when the
/// kernel cannot do it for this pair (another file system, a special file
/// system) and nothing was copied.
pub(super) fn copy_range(j: &FileCopy<'_>, durable: bool, progress: &Progress) -> io::Result<bool> {
    const STEP: usize = 8 << 20;
    let size = j.e.st.stx_size;
    let mut off = 0u64;
    while off < size {
        let (mut off_in, mut off_out) = (off, off);
        let want = ((size - off) as usize).min(STEP);
        use rustix::io::Errno;
        let n = match rustix::fs::copy_file_range(
            &j.src,
            Some(&mut off_in),
            &j.dst,
            Some(&mut off_out),
            want,
        ) {
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) if off == 0 => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break; // the file shrank: copy what there was, like cp
        }
        progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if durable {
            start_writeback(&j.dst, off, n as usize);
        }
        off += n as u64;
    }
    Ok(true)
}

/// With `--fsync`: starts writing the range to the device now
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait), so the
/// write-back overlaps the reads of the next wave and the final fsync has
/// little left to do. Advisory: a failure here shows up at the fsync.
pub(super) fn start_writeback(fd: &OwnedFd, offset: u64, len: usize) {
    // SAFETY: a valid fd; no memory is passed. (libc: rustix has no
    // sync_file_range.)
    unsafe {
        libc::sync_file_range(
            fd.as_raw_fd(),
            offset as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}
