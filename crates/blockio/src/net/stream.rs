//! What TCP and Unix streams share: reads that lose no bytes, writes, and
//! the peer named in every error.

use std::io;
use std::net::Shutdown;

use super::read_side::{ReadSide, Settled};
use super::socket::Sock;
use crate::aio::{BufResult, IoBuf, IoBufMut};
use crate::error::NetError;
use crate::kind::OpKind;

/// A connected stream socket.
pub(crate) struct StreamCore {
    pub(crate) sock: Sock,
    pub(crate) reads: ReadSide,
    /// The peer, as errors name it.
    pub(crate) peer: String,
}

impl StreamCore {
    pub(crate) fn new(sock: Sock, peer: String) -> StreamCore {
        StreamCore {
            sock,
            reads: ReadSide::default(),
            peer,
        }
    }

    /// Reads into `buf`: the byte count (0 at end of stream) and the
    /// buffer.
    pub(crate) async fn read<B: IoBufMut>(&self, mut buf: B) -> BufResult<usize, B> {
        match self.reads.settle(&mut buf).await {
            Settled::Copied(n) => return (Ok(n), buf),
            Settled::Failed(errno) => {
                let err = io::Error::from_raw_os_error(errno);
                return (Err(NetError::wrap(OpKind::Recv, &self.peer, err)), buf);
            }
            Settled::Receive => {}
        }
        let (res, buf) = self.reads.receive(self.sock.recv(buf)).await;
        (
            res.map_err(|e| NetError::wrap(OpKind::Recv, &self.peer, e)),
            buf,
        )
    }

    /// Writes from `buf`: how many bytes went (maybe fewer than all).
    pub(crate) async fn write<B: IoBuf>(&self, buf: B) -> BufResult<usize, B> {
        let (res, buf) = self.sock.send(buf, 0).await;
        (
            res.map_err(|e| NetError::wrap(OpKind::Send, &self.peer, e)),
            buf,
        )
    }

    /// Writes `bufs` in order with one `sendmsg`.
    pub(crate) async fn writev<B: IoBuf>(&self, bufs: Vec<B>) -> BufResult<usize, Vec<B>> {
        let (res, bufs) = self.sock.send_vectored(bufs).await;
        (
            res.map_err(|e| NetError::wrap(OpKind::SendVectored, &self.peer, e)),
            bufs,
        )
    }

    /// Writes all of `buf`.
    pub(crate) async fn write_all<B: IoBuf>(&self, buf: B) -> BufResult<(), B> {
        self.sock.send_all(buf, &self.peer).await
    }

    /// Shuts down the reading side, the writing side or both.
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.sock.socket.shutdown(how)
    }
}
