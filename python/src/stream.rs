//! A line of an unbuffered stream (a pipe or a socket), read as the
//! built-in `FileIO.readline` reads it: one byte per read, so that no
//! byte past the line is taken from the stream, and whoever reads the
//! descriptor next (a child given the number) sees the rest.
//!
//! The reads never wait: each is a `preadv2(RWF_NOWAIT)` of one byte, made
//! on the event loop's thread, and the call returns as soon as the stream
//! has nothing more to give, saying so ([`Stop::Wait`]); the Python layer
//! then waits for the stream to be readable on a thread of its own, which
//! takes nothing from the stream, so a wait given up (a cancelled
//! `readline`) loses no byte and holds none back. A byte per system call
//! is what `FileIO` pays; a call takes at most [`MOST`] bytes, so that a
//! long line never holds the event loop for long.
//!
//! Only descriptors the kernel can read without waiting take this path:
//! pipes made by `pipe(2)` (Linux 6.4 and later) and sockets. FIFOs opened
//! by path and terminals refuse such reads ([`Stop::Unsupported`]), and
//! the Python layer reads ahead there instead.

use std::os::fd::RawFd;

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
        let mut byte = 0u8;
        let iov = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        // SAFETY: one iovec over the live local `byte`, one byte long;
        // offset -1 reads at the descriptor's own position, as read(2).
        let n = unsafe { libc::preadv2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
        match n {
            1 => {
                bytes.push(byte);
                if byte == b'\n' {
                    break Stop::Done;
                }
            }
            0 => break Stop::End,
            _ => {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => break Stop::Wait,
                    Some(libc::EOPNOTSUPP) if bytes.is_empty() => break Stop::Unsupported,
                    _ if bytes.is_empty() => return Err(e),
                    code => {
                        errno = code.unwrap_or(libc::EIO);
                        break Stop::Failed;
                    }
                }
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
