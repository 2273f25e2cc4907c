//! Reads of an unbuffered stream (a pipe or a socket) that never wait,
//! made on the event loop's thread: a line read as the built-in
//! `FileIO.readline` reads it ([`read_line`]), and one read of up to a
//! size ([`read_stream_inline`]), which a file that owns its descriptor
//! makes in place of a read waiting in the kernel.
//!
//! A line is read one byte per read, so that no byte past the line is
//! taken from the stream, and whoever reads the descriptor next (a child
//! given the number) sees the rest.
//!
//! The reads never wait: each is a `preadv2(RWF_NOWAIT)`, made on the
//! event loop's thread, and the call returns as soon as the stream has
//! nothing more to give, saying so ([`Stop::Wait`], or `None`); the Python
//! layer then waits for the stream to be readable, which takes nothing
//! from the stream, so a wait given up (a cancelled `readline` or `read`)
//! loses no byte and holds none back. A byte per system call is what
//! `FileIO` pays for a line; a line call takes at most [`MOST`] bytes, so
//! that a long line never holds the event loop for long.
//!
//! Only descriptors the kernel can read without waiting take this path:
//! pipes made by `pipe(2)` (Linux 6.4 and later) and sockets. FIFOs opened
//! by path and terminals refuse such reads ([`Stop::Unsupported`], or
//! `EOPNOTSUPP`), and the Python layer reads them another way.

use std::io::IoSliceMut;
use std::os::fd::{BorrowedFd, RawFd};

use rustix::io::{preadv2, Errno, ReadWriteFlags};

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::{io_err, new_bytes};

/// The most bytes one call reads (about 2 ms of one-byte reads here):
/// the Python layer lets the event loop run between calls.
pub(crate) const MOST: usize = 4096;

/// Why [`read_line`] stopped; the value Python sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stop {
    /// A `\n` ended the line, or the limit was reached.
    Done = 0,
    /// The stream had nothing more for now (`EAGAIN`).
    Wait = 1,
    /// The stream ended (a read returned 0).
    End = 2,
    /// [`MOST`] bytes were read; call again for the rest.
    More = 3,
    /// The descriptor refuses reads that never wait (`EOPNOTSUPP`: a FIFO
    /// opened by path, a terminal, a pipe before Linux 6.4), with nothing
    /// read: read it another way.
    Unsupported = 4,
    /// A read failed after the bytes returned were read; the error is
    /// [`LineRead::errno`]. (Some errors are reported once: a reset
    /// socket's next read returns 0, so the error must not wait for it.)
    Failed = 5,
}

/// What one call of [`read_line`] read, and why it stopped.
pub(crate) struct LineRead {
    pub(crate) bytes: Vec<u8>,
    pub(crate) stop: Stop,
    /// The error of [`Stop::Failed`]; else 0.
    pub(crate) errno: i32,
}

/// Reads `fd` one byte at a time, without waiting, until a `\n` (kept),
/// `limit` bytes (negative: no limit), the stream's end, a read that
/// would wait, or [`MOST`] bytes. An error with nothing read is returned
/// as the error; after some bytes, with them ([`Stop::Failed`]).
pub(crate) fn read_line(fd: RawFd, limit: i64) -> std::io::Result<LineRead> {
    // SAFETY: the caller's descriptor, open for this call (its file holds
    // it); borrowed, never closed here.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let limited = usize::try_from(limit).ok();
    let most = limited.map_or(MOST, |l| l.min(MOST));
    let mut bytes = Vec::new();
    let mut errno = 0;
    let stop = loop {
        if bytes.len() == most {
            break if limited == Some(most) {
                Stop::Done
            } else {
                Stop::More
            };
        }
        let mut byte = [0u8];
        // (offset `u64::MAX`: at the descriptor's own position, as read(2))
        match preadv2(
            fd,
            &mut [IoSliceMut::new(&mut byte)],
            u64::MAX,
            ReadWriteFlags::NOWAIT,
        ) {
            Ok(1) => {
                bytes.push(byte[0]);
                if byte[0] == b'\n' {
                    break Stop::Done;
                }
            }
            Ok(_) => break Stop::End,
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => break Stop::Wait,
            Err(Errno::OPNOTSUPP) if bytes.is_empty() => break Stop::Unsupported,
            Err(e) if bytes.is_empty() => return Err(e.into()),
            Err(e) => {
                errno = e.raw_os_error();
                break Stop::Failed;
            }
        }
    };
    Ok(LineRead { bytes, stop, errno })
}

/// Python's view of [`read_line`]: `(bytes, stop, errno)`, with `stop`
/// one of [`Stop`]'s values and `errno` that of [`Stop::Failed`] (else
/// 0); an error with nothing read raises `OSError`.
#[pyfunction]
pub(crate) fn read_line_inline(
    py: Python<'_>,
    fd: RawFd,
    limit: i64,
) -> PyResult<(Bound<'_, PyBytes>, u8, i32)> {
    let got = read_line(fd, limit).map_err(io_err)?;
    Ok((new_bytes(py, &got.bytes)?, got.stop as u8, got.errno))
}

/// One read of up to `size` bytes of the stream `fd` that never waits
/// (`preadv2` with `RWF_NOWAIT`, at the descriptor's own position):
/// `(bytes, errno)`, the bytes empty at the stream's end, or `None` when
/// the stream has nothing now (`EAGAIN`). An error with nothing read
/// raises `OSError`: `EOPNOTSUPP` for a descriptor that refuses reads
/// that never wait (a FIFO opened by path, a terminal), which is then
/// read another way. An error after some bytes comes with them, as
/// `errno` (else 0), for the caller to raise at the next read: some are
/// reported once (a reset socket's next read returns 0).
///
/// A byte stream (`pieces`: a pipe, a `SOCK_STREAM` socket, see
/// [`stream_in_pieces`]) may be read in several reads, the buffer growing
/// to `size` only as the kernel fills it (one pipe's worth at first, then
/// what a full read asked for again), so that the memory is that of the
/// bytes read. Anything else (a datagram or `SOCK_SEQPACKET` socket, a
/// character device) gets one read of `size`, as `FileIO.read` makes: a
/// smaller one would cut a message short, and a second would join the
/// next message to it.
#[pyfunction]
pub(crate) fn read_stream_inline(
    py: Python<'_>,
    fd: RawFd,
    size: usize,
    pieces: bool,
) -> PyResult<Option<(Bound<'_, PyBytes>, i32)>> {
    let mut buf: Vec<u8> = Vec::with_capacity(if pieces { size.min(FIRST) } else { size });
    let mut errno = 0;
    loop {
        let room = (size - buf.len()).min(buf.capacity() - buf.len());
        let spare = buf.spare_capacity_mut();
        let iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: room,
        };
        // (libc, not rustix: rustix's `preadv2` takes `IoSliceMut`s over
        // initialised bytes, and the vector's spare capacity would then be
        // zeroed before every read, a second pass over each byte.)
        // SAFETY: one iovec over the vector's spare capacity, `room` bytes
        // long (at most what is spare); offset -1 reads at the
        // descriptor's own position, as read(2).
        let n = unsafe { libc::preadv2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) if buf.is_empty() => return Ok(None),
                _ if buf.is_empty() => return Err(io_err(e)),
                // (the stream has nothing more now: what was read is all)
                Some(libc::EAGAIN) => break,
                code => {
                    errno = code.unwrap_or(libc::EIO);
                    break;
                }
            }
        }
        // SAFETY: the kernel wrote `n` (at most `room`) bytes into the
        // spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
        if !pieces || n == 0 || n as usize != room || buf.len() == size {
            break;
        }
        // The read filled what it was given and more is wanted: the
        // stream may hold more (a socket's buffer, a pipe made larger).
        buf.reserve(buf.len().min(size - buf.len()));
    }
    Ok(Some((new_bytes(py, &buf)?, errno)))
}

/// Whether `fd` is a byte stream, which one read may take in several
/// (see [`read_stream_inline`]): a pipe or FIFO, or a `SOCK_STREAM`
/// socket. False for anything else, and for a descriptor `fstat` refuses.
#[pyfunction]
pub(crate) fn stream_in_pieces(fd: RawFd) -> bool {
    // SAFETY: the caller's descriptor, open for this call (its file holds
    // it); borrowed, never closed here.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false;
    };
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Fifo => true,
        rustix::fs::FileType::Socket => {
            rustix::net::sockopt::socket_type(fd) == Ok(rustix::net::SocketType::STREAM)
        }
        _ => false,
    }
}

/// The buffer a [`read_stream_inline`] of a byte stream starts with: a
/// pipe's default capacity, which one read of a full pipe fills.
const FIRST: usize = 64 << 10;
