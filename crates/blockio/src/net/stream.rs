//! What TCP and Unix streams share: reads that lose no bytes, writes, and
//! the peer as `Debug` shows it.

use std::io;
use std::net::Shutdown;

use super::read_side::{ReadSide, Settled};
use super::socket::Sock;
use super::write_side::WriteSide;
use crate::aio::{BufResult, IoBuf, IoBufMut};

/// Owned reads and sends the kernel cancelled in a row that are made
/// again before the cancel is returned: a bound on a loop, far above the
/// few cancels of a thread's exit.
const KERNEL_CANCELS: u32 = 1000;

/// Whether `res` is the kernel's cancel of an operation this stream still
/// awaited: it never cancels one itself while awaiting it, but the kernel
/// cancels a thread's waiting socket operations when that thread exits
/// (a runtime's worker retired after `block_in_place`, the runtime a
/// caller-driven engine was built on shut down), and such an operation
/// moved no byte (one that moved bytes completes with their count). So
/// it is made again, from the thread now awaiting it, as tokio's reactor
/// would retry after a spurious wake-up.
pub(crate) fn cancelled_by_the_kernel(res: &io::Result<usize>, cancels: &mut u32) -> bool {
    let cancelled = matches!(res, Err(e) if crate::errno(e) == Some(libc::ECANCELED))
        && *cancels < KERNEL_CANCELS;
    *cancels += u32::from(cancelled);
    cancelled
}

/// A connected stream socket.
///
/// `TcpStream` and `UnixStream` hold it, and their `PollIo`, boxed:
/// together they are about 530 bytes, which a program's task would
/// otherwise carry inline for each
/// connection, twice in an `async move` block that hands its stream on
/// (captured, then moved into hyper's connection). Boxed, a stream is a
/// few words and hyper's task for a connection about 1 KiB
/// (`docs/benchmarks.md`, "Memory a hyper server keeps after 5,000
/// connections").
pub(crate) struct StreamCore {
    pub(crate) sock: Sock,
    pub(crate) reads: ReadSide,
    pub(crate) writes: WriteSide,
    /// The socket's registration in tokio's reactor, which the trait
    /// reads and writes that wait there share.
    #[cfg(feature = "tokio")]
    pub(crate) reactor: super::poll_io::Reactor,
    /// The peer, as `Debug` shows it.
    pub(crate) peer: String,
}

impl StreamCore {
    pub(crate) fn new(sock: Sock, peer: String) -> StreamCore {
        StreamCore {
            writes: WriteSide::new(sock.clone()),
            sock,
            reads: ReadSide::default(),
            #[cfg(feature = "tokio")]
            reactor: Default::default(),
            peer,
        }
    }

    /// Reads into `buf`: the byte count (0 at end of stream) and the
    /// buffer.
    pub(crate) async fn read<B: IoBufMut>(&self, mut buf: B) -> BufResult<usize, B> {
        if buf.bytes_len() == 0 {
            // As a read of an empty buffer through the traits (and tokio's):
            // nothing asked, nothing waited for.
            return (Ok(0), buf);
        }
        let mut cancels = 0;
        loop {
            // Refused at once when undriven, even with a receive in flight
            // that might never complete: no new operation need start here.
            if let Err(e) = self.sock.admit() {
                return (Err(e), buf);
            }
            match self.reads.settle(&mut buf).await {
                Settled::Copied(n) => return (Ok(n), buf),
                Settled::Failed(errno) => {
                    self.read_failed(errno);
                    let err = io::Error::from_raw_os_error(errno);
                    return (Err(super::os_error(err)), buf);
                }
                Settled::Receive => {}
            }
            let (res, back) = self.reads.receive(self.sock.recv(buf)).await;
            buf = back;
            if cancelled_by_the_kernel(&res, &mut cancels) {
                continue;
            }
            if let Err(e) = &res {
                self.read_failed(crate::errno(e).unwrap_or(0));
            }
            return (res.map_err(super::os_error), buf);
        }
    }

    /// Reads into `out` and gives the bytes back to the stream, so that
    /// the next read returns them again. A dropped peek takes nothing
    /// (its receive's bytes are the next read's, as any dropped read's).
    ///
    /// A read served from bytes kept from earlier reads returns only
    /// those, so the peek then adds what the socket holds now, without
    /// waiting: a loop peeking until enough bytes came sees them come.
    pub(crate) async fn peek(&self, out: &mut [u8]) -> io::Result<usize> {
        let (res, mut buf) = self.read(vec![0u8; out.len()]).await;
        let mut n = res?;
        let mut error = None;
        if n > 0 && n < out.len() {
            // The bytes the receive kept armed across reads (see
            // `ReadSide::keep_armed`) has posted come first, and nothing
            // else receives while it is armed.
            if let Some(kept) = self.reads.kept_next() {
                n += kept.take_queued(&mut buf[n..]);
            }
        }
        if n > 0 && n < out.len() && self.reads.socket_is_next() {
            match self.sock.recv_inline(out.len() - n) {
                Ok(more) => {
                    buf[n..n + more.len()].copy_from_slice(&more);
                    n += more.len();
                }
                // Nothing there yet.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket reports an error once: it is the next read's,
                // after the peeked bytes.
                Err(e) => error = Some(crate::errno(&e).unwrap_or(libc::EIO)),
            }
        }
        out[..n].copy_from_slice(&buf[..n]);
        self.reads.unread(&buf[..n], error);
        Ok(n)
    }

    /// A read ended with `errno`: a reset by the peer is the writes' too.
    pub(crate) fn read_failed(&self, errno: i32) {
        if errno == libc::ECONNRESET {
            self.writes.peer_reset();
        }
    }

    /// Writes from `buf`: how many bytes went (maybe fewer than all).
    /// Bytes the I/O traits accepted go first; a dropped write that sent
    /// bytes is reported instead (see `write_side`).
    pub(crate) async fn write<B: IoBuf>(&self, buf: B) -> BufResult<usize, B> {
        if let Err(e) = self.writes.ready_for_owned().await {
            return (Err(e), buf);
        }
        if let Some(res) = self.send_inline(std::slice::from_ref(&buf)) {
            return (res, buf);
        }
        let mut guard = self.writes.guard(buf.bytes_len());
        let mut cancels = 0;
        let mut buf = buf;
        loop {
            let mut fut = self.sock.send(buf, 0);
            fut.start();
            let (res, back) = guard.send(fut).await;
            buf = back;
            if cancelled_by_the_kernel(&res, &mut cancels) {
                continue;
            }
            return (res.map_err(super::os_error), buf);
        }
    }

    /// Writes `bufs` in order with one `sendmsg` (of the first
    /// [`IOV_MAX`](super::socket::IOV_MAX) buffers at most).
    pub(crate) async fn writev<B: IoBuf>(&self, bufs: Vec<B>) -> BufResult<usize, Vec<B>> {
        if let Err(e) = self.writes.ready_for_owned().await {
            return (Err(e), bufs);
        }
        if let Some(res) = self.send_inline(&bufs) {
            return (res, bufs);
        }
        let len = bufs
            .iter()
            .take(super::socket::IOV_MAX)
            .map(IoBuf::bytes_len)
            .sum();
        let mut guard = self.writes.guard(len);
        let mut cancels = 0;
        let mut bufs = bufs;
        loop {
            let mut fut = self.sock.send_vectored(bufs);
            fut.start();
            let (res, msg) = guard.send(fut).await;
            bufs = msg.bufs;
            if cancelled_by_the_kernel(&res, &mut cancels) {
                continue;
            }
            return (res.map_err(super::os_error), bufs);
        }
    }

    /// Sends what the socket takes of `bufs` at once, on this thread, if
    /// an owned write dropped pending asks for it (see
    /// `WriteSide::send_inline`): `None` when it does not, or the
    /// socket took nothing (the send then goes through the driver).
    fn send_inline<B: IoBuf>(&self, bufs: &[B]) -> Option<io::Result<usize>> {
        if !self.writes.send_inline() {
            return None;
        }
        match self.sock.send_inline(bufs) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            res => Some(res.map_err(super::os_error)),
        }
    }

    /// Writes all of `buf`, one `send` after another until every byte went.
    pub(crate) async fn write_all<B: IoBuf>(&self, mut buf: B) -> BufResult<(), B> {
        if let Err(e) = self.writes.ready_for_owned().await {
            return (Err(e), buf);
        }
        let len = buf.bytes_len();
        let mut guard = self.writes.guard(len);
        let mut sent = 0;
        match self.send_inline(std::slice::from_ref(&buf)) {
            Some(Ok(n)) => {
                sent = n;
                guard.sent_inline(n);
            }
            Some(Err(e)) => return (Err(e), buf),
            None => {}
        }
        let mut cancels = 0;
        // The first send (and one made again after the kernel cancelled
        // it) is a new operation; the sends after a short one carry on
        // the write, from whichever executor awaits it.
        let mut carrying_on = false;
        while sent < len {
            let mut fut = self.sock.send(buf, sent);
            if carrying_on {
                fut.resume();
            } else {
                fut.start();
            }
            let (res, b) = guard.send(fut).await;
            buf = b;
            if cancelled_by_the_kernel(&res, &mut cancels) {
                carrying_on = false;
                continue;
            }
            let err = match res {
                Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
                Ok(n) => {
                    sent += n;
                    carrying_on = true;
                    continue;
                }
                Err(e) => e,
            };
            return (Err(super::os_error(err)), buf);
        }
        (Ok(()), buf)
    }

    /// Shuts down the reading side, the writing side or both. The writing
    /// side shuts after every byte the I/O traits accepted (see
    /// `WriteSide::shutdown_write`), so a shutdown never cuts them off.
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match how {
            Shutdown::Read => self.sock.socket.shutdown(how),
            Shutdown::Write => self.writes.shutdown_write(),
            Shutdown::Both => {
                self.sock.socket.shutdown(Shutdown::Read)?;
                self.writes.shutdown_write()
            }
        }
    }
}
