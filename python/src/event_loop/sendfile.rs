//! A transport's `loop.sendfile` of a cached file range, in one native
//! call: the file's size and kind (`fstat`), whether the page cache holds
//! the whole range (`cachestat`, see `crate::cached`), and `sendfile(2)`
//! from the file to the socket for as much as the socket takes now.
//!
//! # Why
//!
//! A file server writes a response header, then sends the file. Through
//! asyncio's `_sendfile_native` that costs a Python frame per layer
//! (`sendfile`, `sock_sendfile`, its argument checks, reading paused and
//! resumed, the empty-buffer waiter, the step loop and its futures) around
//! three system calls; a small file's bytes go out whole in the first
//! `sendfile(2)` of a transport with nothing else to send. This is that
//! common case: when it sends everything, `loop.sendfile` returns without
//! any of asyncio's machinery. Whatever it does not finish (the socket
//! full, a range not cached, an error) goes on on the general path, from
//! where this stopped, which gives every such case asyncio's behaviour.
//!
//! A range the page cache does not wholly hold is not sent here: a
//! `sendfile(2)` of it would wait for the disk on the loop's thread. The
//! general path reads it on the ring instead. Nor is an `O_DIRECT` file
//! (its `sendfile(2)` reads the device whatever the cache holds), nor a
//! regular file of size 0 given a count (`/proc`, `/sys`: its size says
//! nothing of its bytes, and asyncio sends `count` bytes of it).

use std::os::fd::{BorrowedFd, RawFd};

use rustix::fs::FileType;
use rustix::io::Errno;

use crate::cached::range_cached;

/// The most one `sendfile(2)` sends (the kernel's `MAX_RW_COUNT`, the
/// largest page-aligned `INT_MAX`).
const MOST: u64 = 0x7fff_f000;

/// What [`send_cached`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing was sent and the general path takes the whole sendfile:
    /// not a regular file, or `fstat` failed (the general path makes the
    /// same call again and raises its error as asyncio does), or a file
    /// this call leaves to it (`O_DIRECT`, size 0 with a count: see the
    /// module's doc).
    NotHere,
    /// The range `[offset, end)` is not wholly in the page cache; nothing
    /// was sent.
    Uncached {
        /// Where the range ends (the file's end, or `offset + count`
        /// within it).
        end: u64,
    },
    /// `sent` bytes went out from `offset`; the sendfile is finished when
    /// `offset + sent >= end` and no error came, else the rest is the
    /// general path's: the socket took no more now, or `error` (an errno)
    /// ended the last call, which the general path raises as its own
    /// call's. (The kernel reports a socket's pending error, such as a
    /// peer's reset, to one call only: the next would say `EPIPE`.)
    Sent {
        /// The bytes sent.
        sent: u64,
        /// Where the range ends; where the file ended, if it was cut
        /// short meanwhile.
        end: u64,
        /// The errno of the call that failed, 0 if none did.
        error: i32,
    },
}

/// Sends the file `file` from `offset` to the socket `sock` (`count`
/// bytes, or to the file's end when 0) with `sendfile(2)`, as far as the
/// socket takes it without waiting, when `file` is a regular file whose
/// range the page cache holds (see [`Outcome`]).
///
/// The last call's count is rounded up to whole pages within what the
/// caller allows, as the general path does (`_sendfile_step`): the kernel
/// stops at the file's end, and refuses (`EINVAL`) an `O_DIRECT` file's
/// count that is not a multiple of its blocks. Without a count that is up
/// to a page past the end; with one, up to what the count leaves past the
/// file's end.
pub(crate) fn send_cached(sock: RawFd, file: RawFd, offset: u64, count: u64) -> Outcome {
    if sock < 0 || file < 0 {
        return Outcome::NotHere;
    }
    let file_number = file;
    // SAFETY: both numbers are borrowed for this call only, and nothing
    // below closes or keeps them: the socket's is the transport's, read
    // from its live `fileno()` in this call with the GIL held (and held
    // throughout, so no Python code closes it meanwhile); the file's was
    // read from the caller's object by the Python frame that called this,
    // and another thread may have closed and reused it in between, as it
    // may before asyncio's own `os.sendfile`: the calls then act on
    // whatever file the number names, as `os.sendfile` would. No memory
    // of this process is handed to the kernel (`sendfile(2)` copies
    // between descriptors), so a stale number can misdirect nothing
    // here but the bytes the caller asked to send.
    let (sock, file) = unsafe { (BorrowedFd::borrow_raw(sock), BorrowedFd::borrow_raw(file)) };
    let Ok(st) = rustix::fs::fstat(file) else {
        return Outcome::NotHere;
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Outcome::NotHere;
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size == 0 && count > 0 {
        // A file whose size says nothing of its bytes (`/proc`, `/sys`):
        // the general path sends `count` bytes of it, as asyncio does.
        return Outcome::NotHere;
    }
    if rustix::fs::fcntl_getfl(file).map_or(true, |f| f.contains(rustix::fs::OFlags::DIRECT)) {
        // `O_DIRECT`: `sendfile(2)` reads the device whatever the page
        // cache holds, so `cachestat` cannot say that it waits for no
        // disk; the general path reads it on the ring where it can.
        return Outcome::NotHere;
    }
    let Some(asked) = offset.checked_add(count) else {
        return Outcome::NotHere;
    };
    let end = if count > 0 { asked.min(size) } else { size };
    if offset >= end {
        return Outcome::Sent {
            sent: 0,
            end: offset,
            error: 0,
        };
    }
    if !range_cached(file_number, offset, end - offset) {
        return Outcome::Uncached { end };
    }
    let page = rustix::param::page_size() as u64;
    let past_end = if count > 0 {
        asked.saturating_sub(size)
    } else {
        page
    };
    let mut pos = offset;
    let mut error = 0;
    while pos < end {
        let mut want = (end - pos).min(MOST);
        if pos + want == end && past_end > 0 {
            want = want.next_multiple_of(page).min(want + past_end);
        }
        let mut at = pos;
        match rustix::fs::sendfile(sock, file, Some(&mut at), want as usize) {
            Ok(0) => {
                // The file was cut short: it ends here.
                return Outcome::Sent {
                    sent: pos - offset,
                    end: pos,
                    error: 0,
                };
            }
            Ok(n) => pos += n as u64,
            Err(Errno::INTR) => {}
            // (the socket full: the general path waits for it)
            Err(Errno::AGAIN) => break,
            Err(e) => {
                error = e.raw_os_error();
                break;
            }
        }
    }
    Outcome::Sent {
        sent: pos - offset,
        end: end.max(pos),
        error,
    }
}
