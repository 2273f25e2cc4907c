//! What TCP and Unix streams share: reads that lose no bytes, writes, and
//! the peer as `Debug` shows it.

use std::io;
use std::net::Shutdown;

use super::read_side::{ReadSide, Settled};
use super::socket::Sock;
use super::write_side::WriteSide;
use crate::aio::{BufResult, IoBuf, IoBufMut};

/// A connected stream socket.
pub(crate) struct StreamCore {
    pub(crate) sock: Sock,
    pub(crate) reads: ReadSide,
    pub(crate) writes: WriteSide,
    /// The peer, as `Debug` shows it.
    pub(crate) peer: String,
}

impl StreamCore {
    pub(crate) fn new(sock: Sock, peer: String) -> StreamCore {
        StreamCore {
            writes: WriteSide::new(sock.clone()),
            sock,
            reads: ReadSide::default(),
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
        if let Err(e) = self.sock.engine.ensure_driven() {
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
        let (res, buf) = self.reads.receive(self.sock.recv(buf)).await;
        if let Err(e) = &res {
            self.read_failed(crate::errno(e).unwrap_or(0));
        }
        (res.map_err(super::os_error), buf)
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
        if let Err(e) = self.sock.engine.ensure_driven() {
            return (Err(e), buf);
        }
        if let Err(e) = self.writes.ready_for_owned().await {
            return (Err(e), buf);
        }
        let mut guard = self.writes.guard(buf.bytes_len());
        let mut fut = self.sock.send(buf, 0);
        fut.start();
        let (res, buf) = guard.send(fut).await;
        (res.map_err(super::os_error), buf)
    }

    /// Writes `bufs` in order with one `sendmsg` (of the first
    /// [`IOV_MAX`](super::socket::IOV_MAX) buffers at most).
    pub(crate) async fn writev<B: IoBuf>(&self, bufs: Vec<B>) -> BufResult<usize, Vec<B>> {
        if let Err(e) = self.sock.engine.ensure_driven() {
            return (Err(e), bufs);
        }
        if let Err(e) = self.writes.ready_for_owned().await {
            return (Err(e), bufs);
        }
        let len = bufs
            .iter()
            .take(super::socket::IOV_MAX)
            .map(IoBuf::bytes_len)
            .sum();
        let mut guard = self.writes.guard(len);
        let mut fut = self.sock.send_vectored(bufs);
        fut.start();
        let (res, msg) = guard.send(fut).await;
        (res.map_err(super::os_error), msg.bufs)
    }

    /// Writes all of `buf`, one `send` after another until every byte went.
    pub(crate) async fn write_all<B: IoBuf>(&self, mut buf: B) -> BufResult<(), B> {
        if let Err(e) = self.sock.engine.ensure_driven() {
            return (Err(e), buf);
        }
        if let Err(e) = self.writes.ready_for_owned().await {
            return (Err(e), buf);
        }
        let len = buf.bytes_len();
        let mut guard = self.writes.guard(len);
        let mut sent = 0;
        while sent < len {
            let mut fut = self.sock.send(buf, sent);
            fut.start();
            let (res, b) = guard.send(fut).await;
            buf = b;
            let err = match res {
                Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
                Ok(n) => {
                    sent += n;
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
