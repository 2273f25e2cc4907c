//! Sockets on the async API: TCP and Unix-domain listeners and streams
//! whose operations go through the same
//! [`AsyncEngine`](crate::aio::AsyncEngine) as file I/O.
//!
//! ```
//! use blockio::net::{TcpListener, TcpStream};
//!
//! # fn main() -> std::io::Result<()> {
//! futures::executor::block_on(async {
//!     // On the default engine (`AsyncEngine::current`); `bind_with` and
//!     // `connect_with` take an engine of your own.
//!     let listener = TcpListener::bind("127.0.0.1:0").await?;
//!     let addr = listener.local_addr()?;
//!     let client = async {
//!         let c = TcpStream::connect(addr).await?;
//!         c.write_all(b"ping".to_vec()).await.0?;
//!         let (n, buf) = c.read(vec![0u8; 4]).await;
//!         assert_eq!(&buf[..n?], b"pong");
//!         Ok::<_, std::io::Error>(())
//!     };
//!     let server = async {
//!         let (s, _peer) = listener.accept().await?;
//!         let (n, buf) = s.read(vec![0u8; 4]).await;
//!         assert_eq!(&buf[..n?], b"ping");
//!         s.write_all(b"pong".to_vec()).await.0
//!     };
//!     let (c, s) = futures::join!(client, server);
//!     c.and(s)
//! })
//! # }
//! ```
//!
//! # In short
//!
//! * Operations take owned buffers and hand them back with the result.
//!   Dropping a pending operation loses no byte and throws away no
//!   progress: a dropped read's bytes are the next read's, and a dropped
//!   write that sent bytes makes the next write fail with
//!   [`WriteDropped`], saying how many went.
//! * Errors are the kernel's, as std and tokio give them: a failed socket
//!   operation's `raw_os_error()` is its errno.
//! * Streams implement `futures::io`'s `AsyncRead` and `AsyncWrite`, and
//!   tokio's with the `tokio` feature. Bytes a trait write accepted keep
//!   moving on their own, and dropping a stream lingers like closing a
//!   socket ([`TcpStream::set_drop_linger`]). Where a tokio runtime's
//!   reactor serves the task, a trait write that finds the socket full
//!   waits there having taken nothing, cancel-safe in a `select!` as
//!   tokio's; elsewhere its bytes are queued.
//! * [`TcpStream::recv_stream`] receives into buffers the engine's
//!   connections share: an idle connection holds none.
//! * Socket operations do not count against the engine's
//!   [`queue_depth`](crate::aio::AsyncEngineBuilder::queue_depth): idle
//!   connections cost memory, never a slot. Where io_uring is blocked the
//!   same API runs on epoll.
//! * Who drives the engine, and what happens when that driver is gone, is
//!   [`Driving`](crate::aio::Driving)'s to say.
//!
//! The rules in full, with their reasons, are in `docs/sockets.md`:
//! "Rules every operation keeps", "Standard traits", "Receiving without a
//! buffer per connection", "How operations reach the kernel" and "Idle
//! connections cost memory, never a slot".

/// `AsFd` and `AsRawFd` for a stream type and a listener type, as
/// tokio's give their descriptors: the stream's through its `socket()`,
/// the listener's through its `sock`.
macro_rules! descriptors {
    ($stream:ident, $listener:ident) => {
        /// The stream's descriptor, as tokio's streams give it (for
        /// `setsockopt` through `socket2::SockRef`, `getsockopt`, ...).
        /// Reads and writes made on it directly bypass the stream's own
        /// (see `docs/sockets.md`); the descriptor stays open as long as
        /// the stream and its operations in flight.
        impl std::os::fd::AsFd for $stream {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.socket().as_fd()
            }
        }

        /// The stream's descriptor number (see the `AsFd` implementation).
        impl std::os::fd::AsRawFd for $stream {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.socket().as_raw_fd()
            }
        }

        /// The listener's descriptor, as tokio's listeners give it.
        impl std::os::fd::AsFd for $listener {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.sock.socket.as_fd()
            }
        }

        /// The listener's descriptor number.
        impl std::os::fd::AsRawFd for $listener {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.sock.socket.as_raw_fd()
            }
        }
    };
}

mod accepts;
mod adapters;
mod addr;
mod handed;
mod incoming;
mod poll_io;
pub(crate) mod read_side;
mod recv_stream;
mod socket;
mod split;
mod stream;
pub mod tcp;
mod time_limit;
pub mod unix;
mod write_side;

pub use addr::{lookup_host, ToSocketAddrs};
pub use recv_stream::{RecvBuf, RecvStream};
pub use tcp::{Incoming, TcpListener, TcpListenerOptions, TcpStream};
pub use unix::{UnixIncoming, UnixListener, UnixStream};
pub use write_side::WriteDropped;

/// A socket operation's error as std and tokio give it: the kernel's errno
/// as a plain OS error, so that `raw_os_error()`, `kind()` and
/// [`errno`](crate::errno) all read it. Errors that are not the kernel's
/// pass unchanged, and so do those naming what blockio could not make of
/// its own (whose [`errno`](crate::errno) is the kernel's).
pub(crate) fn os_error(err: std::io::Error) -> std::io::Error {
    if crate::error::Named::is(&err) {
        // What blockio could not make, named: kept so.
        return err;
    }
    match crate::errno(&err) {
        Some(errno) => std::io::Error::from_raw_os_error(errno),
        None => err,
    }
}

/// [`os_error`], or for an error that is not the kernel's (an address
/// that does not fit a socket address, say) the error naming `what`.
pub(crate) fn os_error_or_named(
    err: std::io::Error,
    what: &dyn std::fmt::Display,
) -> std::io::Error {
    match crate::errno(&err) {
        Some(errno) => std::io::Error::from_raw_os_error(errno),
        None => std::io::Error::new(err.kind(), format!("{what}: {err}")),
    }
}
