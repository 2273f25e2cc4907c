//! The calls made in the loop's thread instead of on the ring: the write
//! tried before the ring (as much of a send as the descriptor takes
//! without waiting; most sends fit the socket's buffer, so they cost one
//! system call and no completion), the receive made once a socket's
//! readiness poll answers, and the accept of connections already waiting
//! in a listener's backlog (`accept_inline`, for `LoopRing::accept_now`).

use std::io;
use std::os::fd::{BorrowedFd, RawFd};

use rustix::net::{RecvFlags, SendFlags};

use super::ops::AddrSlot;

/// `fd` borrowed for one call, or `EBADF` for -1, the number of a closed
/// socket object (`socket.fileno()` after `close()`), which a
/// `BorrowedFd` cannot hold.
pub(crate) fn borrow<'a>(fd: RawFd) -> io::Result<BorrowedFd<'a>> {
    if fd == -1 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: not -1, the one value `BorrowedFd` refuses; what the number
    // names is the caller's to say (each caller's comment), and a number
    // closed meanwhile makes the call fail with `EBADF`.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// Writes what `fd` takes of `data` now; 0 when it would block (or cannot
/// say without blocking). Other errors are the caller's (`EPIPE`...).
pub(crate) fn write_inline(fd: RawFd, data: &[u8], socket: bool) -> io::Result<usize> {
    if data.is_empty() {
        return Ok(0);
    }
    if socket {
        // (The caller's descriptor, borrowed for this one call; if it was
        // closed meanwhile the send fails with EBADF, reported as such.)
        let borrowed = borrow(fd)?;
        return match rustix::net::send(borrowed, data, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
            Ok(n) => Ok(n),
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => Ok(0),
            Err(e) => Err(e.into()),
        };
    }
    let iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // libc, not rustix: rustix's pwritev2 takes an unsigned offset and so
    // cannot ask for the current position (-1), which pipes need.
    // SAFETY: `iov` describes `data`, alive for the call; the kernel only
    // reads it.
    let n = unsafe { libc::pwritev2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // A file that cannot say "would block" per call (a terminal): a
        // plain write when the descriptor is non-blocking (as the loop's
        // pipe transports make it), else the ring does the write.
        Some(libc::EOPNOTSUPP) => write_if_nonblocking(fd, data),
        // Would block: the ring does the write.
        Some(libc::EAGAIN | libc::EINVAL | libc::EINTR) => Ok(0),
        _ => Err(e),
    }
}

/// `write(2)` on `fd` if it is `O_NONBLOCK`; 0 if it is not or would block.
fn write_if_nonblocking(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // (The caller's descriptor, borrowed for these two calls.)
    let borrowed = borrow(fd)?;
    if !rustix::fs::fcntl_getfl(borrowed)?.contains(rustix::fs::OFlags::NONBLOCK) {
        return Ok(0);
    }
    match rustix::io::write(borrowed, data) {
        Ok(n) => Ok(n),
        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Receives what socket `fd` holds into `buf` without waiting: `Ok(None)`
/// when it would block (a readiness that another reader took first),
/// `Ok(Some(0))` at end of stream.
pub(crate) fn recv_inline(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // (The caller's descriptor, borrowed for this one call; the proactor
    // holds the socket open until the receive's completion is dispatched,
    // so the number still names that socket.)
    let borrowed = borrow(fd)?;
    loop {
        return match rustix::net::recv(borrowed, &mut *buf, RecvFlags::DONTWAIT) {
            Ok((n, _)) => Ok(Some(n)),
            Err(e) if e == rustix::io::Errno::INTR => continue,
            Err(e) if e == rustix::io::Errno::AGAIN => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
}

/// Accepts a connection waiting on listening socket `fd` without waiting,
/// its descriptor non-blocking and close-on-exec as the ring's accept
/// makes it, and its peer's address in `slot` (its `len` the room on the
/// way in, the length used on the way out); `Ok(None)` when none waits.
/// A connection aborted while it waited is skipped, as the next one may
/// be served. Other errors (`EMFILE`...) are the caller's.
pub(crate) fn accept_inline(fd: RawFd, slot: &mut AddrSlot) -> io::Result<Option<RawFd>> {
    let room = slot.len;
    loop {
        slot.len = room;
        // libc, not rustix: the address goes into the slot the ring's
        // accept fills, so that one conversion (`sockaddr::to_python`)
        // reads both.
        // SAFETY: `slot.storage` is `slot.len` bytes of room for the
        // address and `slot.len` a socklen_t, both alive and written by the
        // kernel only during the call; `fd` is the caller's, and a closed
        // one fails with EBADF.
        let n = unsafe {
            libc::accept4(
                fd,
                std::ptr::addr_of_mut!(slot.storage).cast::<libc::sockaddr>(),
                &mut slot.len,
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if n >= 0 {
            return Ok(Some(n));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR | libc::ECONNABORTED) => continue,
            Some(libc::EAGAIN) => return Ok(None),
            _ => return Err(e),
        }
    }
}
