//! A socket shared by its handle and its operations in flight, and the
//! futures of the operations every socket type has.

use std::io;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use socket2::{SockAddr, Socket};

use crate::aio::driven::Admission;
use crate::aio::op::{Keep, OpFuture, SpentTarget};
use crate::aio::readiness::Registration;
use crate::aio::{AsyncEngine, IoBuf, IoBufMut};
use crate::backend::Backend;
use crate::op::action::{Action, ConnectArgs, RecvArgs, SendArgs, SendVectoredArgs};
use crate::op::Op;

/// The most buffers one `sendmsg` takes (Linux's `UIO_MAXIOV`); a vectored
/// write of more sends the first this many, as tokio's `write_vectored`
/// does, where the kernel would refuse them all with `EMSGSIZE`.
pub(crate) const IOV_MAX: usize = 1024;

/// A socket and the engine its operations run on. Every operation holds
/// the `Arc<Socket>` until its completion, so the descriptor number stays
/// this socket's for as long as the kernel may use it: dropping the handle
/// while a read is in flight closes the socket only after that read ends.
///
/// The engine is reached through the socket's [`Admission`], made with the
/// socket: its operations are made through it, and a path that may serve
/// without starting one (bytes already received or queued) asks it
/// ([`admit`](Self::admit)) whether the engine is driven. No socket path
/// asks anywhere else.
#[derive(Clone)]
pub(crate) struct Sock {
    pub(crate) socket: Arc<OwnedSocket>,
    admission: Admission,
}

/// A socket, and its place in the engine's epoll set where its
/// operations wait for readiness there: taken out of the set when the
/// socket closes, before its descriptor number is released, so that the
/// set never reaches the socket that gets the number next.
pub(crate) struct OwnedSocket {
    socket: Socket,
    registration: Option<Registration>,
}

/// Keeps the socket open for its operations, none of which is tried on
/// the polling thread by [`OpFuture`]'s poll.
impl Keep for OwnedSocket {}

impl Deref for OwnedSocket {
    type Target = Socket;

    fn deref(&self) -> &Socket {
        &self.socket
    }
}

impl Drop for OwnedSocket {
    fn drop(&mut self) {
        // Out of the set first; the socket closes after this, with the
        // fields.
        drop(self.registration.take());
    }
}

/// `call`, made again while a signal interrupts it.
fn retry_interrupted(mut call: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
    loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            res => return res,
        }
    }
}

/// The buffers of a vectored send and the message header naming them.
pub(crate) struct Message<B> {
    pub(crate) bufs: Vec<B>,
    _msg: Box<libc::msghdr>,
}

// SAFETY: the header only points into memory the operation owns (the
// iovec array and the buffers), and is never used through this type.
unsafe impl<B: Send> Send for Message<B> {}

impl Sock {
    /// `socket` on `engine`. Where the engine has no io_uring the socket is
    /// made non-blocking: its operations then wait for readiness in an
    /// epoll set instead of blocking a thread (see `aio::readiness`).
    pub(crate) fn new(socket: Socket, engine: &AsyncEngine) -> io::Result<Sock> {
        if engine.backend() == Backend::ThreadPool {
            socket.set_nonblocking(true)?;
        }
        let registration = engine.keep_by_readiness(socket.as_raw_fd());
        Ok(Sock {
            socket: Arc::new(OwnedSocket {
                socket,
                registration,
            }),
            admission: Admission::new(engine),
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// The engine the socket's operations run on.
    pub(crate) fn engine(&self) -> &AsyncEngine {
        self.admission.engine()
    }

    /// Whether a path that may serve without starting an operation (bytes
    /// already received, bytes queued behind a send in flight) may go on:
    /// refused, with the error saying why, as a new operation would be on
    /// an engine that nobody drives and that cannot be driven from here
    /// (see [`Admission::admit`]).
    pub(crate) fn admit(&self) -> io::Result<()> {
        self.admission.admit()
    }

    /// A task that [`admit`](Self::admit) refused (the engine undriven,
    /// and nothing here to drive it) went on waiting for a receive already
    /// in the kernel, its waker now registered: the relay thread completes
    /// it. Asked again after the registration, since a kept receive with
    /// no task waiting needs no relay, and admit's own ask came before.
    pub(crate) fn parked_undriven(&self) {
        #[cfg(feature = "tokio")]
        self.engine().relay_if_undriven();
    }

    /// The operation on this socket over memory owned by `buf`.
    ///
    /// # Safety
    /// `action` may point only into memory owned by `buf` (heap memory
    /// that does not move with it), or into nothing.
    unsafe fn op<B: Send + 'static>(&self, action: Action, buf: B) -> OpFuture<B> {
        // SAFETY: the action's pointers are into `buf`, which the future's
        // shared state owns until the completion (the caller's promise);
        // the socket is kept open by the `Arc` passed along.
        unsafe {
            let op = Op::from_action(self.fd(), action, None);
            OpFuture::new(
                self.admission.clone(),
                op,
                buf,
                Vec::new(),
                self.socket.clone(),
            )
        }
    }

    /// Receives into `buf`.
    pub(crate) fn recv<B: IoBufMut>(&self, mut buf: B) -> OpFuture<B> {
        let recv = RecvArgs {
            buf: buf.stable_mut_ptr(),
            len: buf.bytes_len(),
        };
        // SAFETY: the pointer is into `buf`'s stable heap bytes.
        unsafe { self.op(Action::Recv(recv), buf) }
    }

    /// Receives into `buf`, in the state of `spent`, the spent receive
    /// before it, if given (see [`OpFuture::new_reusing`]).
    #[inline]
    pub(crate) fn recv_reusing<B: IoBufMut>(
        &self,
        mut buf: B,
        spent: Option<SpentTarget<B>>,
    ) -> OpFuture<B> {
        let recv = RecvArgs {
            buf: buf.stable_mut_ptr(),
            len: buf.bytes_len(),
        };
        // SAFETY: the pointer is into `buf`'s stable heap bytes, which the
        // future's state owns until the completion (the reused state as
        // much as a new one); the socket is kept open by the `Arc` passed
        // along.
        unsafe {
            let op = Op::from_action(self.fd(), Action::Recv(recv), None);
            OpFuture::new_reusing(
                spent,
                self.admission.clone(),
                op,
                buf,
                Vec::new(),
                self.socket.clone(),
            )
        }
    }

    /// Sends `buf[from..]`.
    pub(crate) fn send<B: IoBuf>(&self, buf: B, from: usize) -> OpFuture<B> {
        let from = from.min(buf.bytes_len());
        let send = SendArgs {
            // SAFETY: `from` is within the buffer.
            buf: unsafe { buf.stable_ptr().add(from) },
            len: buf.bytes_len() - from,
        };
        // SAFETY: the pointer is into `buf`'s stable heap bytes.
        unsafe { self.op(Action::Send(send), buf) }
    }

    /// Sends `bufs` in order with one `sendmsg`, the first [`IOV_MAX`] of
    /// them at most; the buffers come back in the [`Message`].
    pub(crate) fn send_vectored<B: IoBuf>(&self, bufs: Vec<B>) -> OpFuture<Message<B>> {
        let iovecs: Vec<libc::iovec> = bufs
            .iter()
            .take(IOV_MAX)
            .map(|b| libc::iovec {
                iov_base: b.stable_ptr().cast_mut().cast(),
                iov_len: b.bytes_len(),
            })
            .collect();
        // SAFETY: all-zero is a valid msghdr (no address, no control data).
        let mut msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msg.msg_iov = iovecs.as_ptr().cast_mut();
        msg.msg_iovlen = iovecs.len();
        let send = SendVectoredArgs { msg: &*msg };
        let owned = Message { bufs, _msg: msg };
        // SAFETY: the header is in its box and the iovec array in its
        // vector, both heap memory that does not move with them; the
        // iovecs point into the buffers' stable heap bytes. The future's
        // state owns all three (`owned` and `iovecs`) until the completion.
        unsafe {
            let op = Op::from_action(self.fd(), Action::SendVectored(send), None);
            OpFuture::new(
                self.admission.clone(),
                op,
                owned,
                iovecs,
                self.socket.clone(),
            )
        }
    }

    /// Sends what the socket takes of `bufs` now, on this thread, without
    /// waiting: `WouldBlock` when it takes nothing (see
    /// `WriteSide::send_inline`). The first [`IOV_MAX`] buffers at most.
    pub(crate) fn send_inline<B: IoBuf>(&self, bufs: &[B]) -> io::Result<usize> {
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        // (`bytes_of`: an empty buffer's pointer may be null.)
        if let [b] = bufs {
            return self.send_bytes_inline(crate::aio::bytes_of(b, b.bytes_len()));
        }
        let slices: Vec<io::IoSlice<'_>> = bufs
            .iter()
            .take(IOV_MAX)
            .map(|b| io::IoSlice::new(crate::aio::bytes_of(b, b.bytes_len())))
            .collect();
        retry_interrupted(|| self.socket.send_vectored_with_flags(&slices, flags))
    }

    /// Sends what the socket takes of `bytes` now, on this thread, without
    /// waiting: `WouldBlock` when it takes nothing (see
    /// `WriteSide::poll_write`).
    pub(crate) fn send_bytes_inline(&self, bytes: &[u8]) -> io::Result<usize> {
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        retry_interrupted(|| self.socket.send_with_flags(bytes, flags))
    }

    /// Receives what the socket holds, up to `max` bytes, now, on this
    /// thread, without waiting: `WouldBlock` when it holds nothing; an
    /// empty buffer at the end of the stream (see
    /// `ReadSide::receive_inline`).
    pub(crate) fn recv_inline(&self, max: usize) -> io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(max);
        let n = self.recv_into_inline(buf.spare_capacity_mut())?;
        // SAFETY: the kernel wrote the first `n` bytes of the spare
        // capacity (recv returns how many it wrote, at most `max`).
        unsafe { buf.set_len(n) };
        Ok(buf)
    }

    /// Receives what the socket holds into `out`, now, on this thread,
    /// without waiting: how many bytes the kernel wrote at the start of
    /// `out` (0 at the end of the stream), or `WouldBlock` when it holds
    /// nothing.
    pub(crate) fn recv_into_inline(&self, out: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        let flags = libc::MSG_DONTWAIT;
        retry_interrupted(|| self.socket.recv_with_flags(out, flags))
    }

    /// Connects to `addr`.
    pub(crate) fn connect(&self, addr: SockAddr) -> OpFuture<Box<SockAddr>> {
        let addr = Box::new(addr);
        let connect = ConnectArgs {
            addr: addr.as_ptr().cast(),
            addr_len: addr.len(),
        };
        // SAFETY: the address is in the box, which does not move with it.
        unsafe { self.op(Action::Connect(connect), addr) }
    }
}
