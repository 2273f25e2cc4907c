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
//! # Rules every operation keeps
//!
//! * **Owned buffers.** A read or write takes its buffer by value and hands
//!   it back with the result, so a future dropped mid-flight leaves the
//!   buffer with the driver until the kernel is done with it.
//! * **The descriptor outlives the operation.** Each operation holds the
//!   socket; closing a stream with a read in flight closes the descriptor
//!   only after that read has completed, so an operation can never reach a
//!   descriptor number that has come to name another file.
//! * **Dropping a pending operation throws away no progress.** A program
//!   that drops pending operations makes the same progress as on tokio:
//!   a `select!` loop whose other branch is ready every turn drops the
//!   stream's read or write each time and starts another, and still moves
//!   every byte. A read whose future is dropped stays armed in the kernel
//!   and the stream's next read (owned, through the traits, or a receive
//!   stream's) joins it instead of starting another; it is cancelled
//!   (`IORING_OP_ASYNC_CANCEL`) when the stream is dropped. After an owned
//!   write dropped pending, the next owned writes try their send at once,
//!   in their first poll, as tokio's do. Other operations dropped pending
//!   (accepts, connects, multishot receives) are cancelled in the kernel.
//! * **No bytes are lost.** A read dropped by a timeout either took no
//!   bytes, or the next read on the stream returns them first, in order.
//! * **No bytes are sent twice unknowingly.** A write (owned `write`,
//!   `write_all`, `writev`) cancelled by a timeout either sent no bytes,
//!   and is forgotten (retry it whole, as on tokio), or the stream's next
//!   write sends nothing and fails with a [`WriteDropped`] error saying
//!   how many of the dropped write's bytes went (`WriteDropped::of(&err)`;
//!   kind [`Other`](std::io::ErrorKind::Other)): resend only the rest, and
//!   the write after that proceeds. A retry loop that handles it:
//!
//! ```no_run
//! # async fn send(s: &blockio::net::TcpStream, data: &[u8]) -> std::io::Result<()> {
//! use std::time::Duration;
//! use blockio::net::WriteDropped;
//! let mut at = 0;
//! while at < data.len() {
//!     let write = s.write(data[at..].to_vec());
//!     match tokio::time::timeout(Duration::from_millis(5), write).await {
//!         Ok((Ok(n), _)) => at += n,
//!         Ok((Err(e), _)) => match WriteDropped::of(&e) {
//!             Some(dropped) => at += dropped.sent,
//!             None => return Err(e),
//!         },
//!         Err(_elapsed) => {} // nothing known yet: the next write says
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//!   Trait writes are never half-done: `poll_write` either takes bytes
//!   (and then sends them) or takes none.
//! * **Errors are the kernel's, as std and tokio give them**: a failed
//!   socket operation (connect, accept, bind, listen, recv, send, and
//!   `connect_timeout`'s time-out, `ETIMEDOUT`) is a plain OS error, so
//!   `raw_os_error()` is `Some(errno)`, [`kind`](std::io::Error::kind) is
//!   the errno's, and [`errno`](crate::errno) reads it too: code ported
//!   from tokio that matches on either works unchanged. An OS error has
//!   no room for the peer's address (wrapping it would hide the errno),
//!   so the message is the kernel's; the peer is at hand where the error
//!   is met ([`TcpStream::peer_addr`], the address given to `connect` or
//!   `bind`): name it when you report the error, as with tokio. Errors
//!   that are not the kernel's (an address that resolves to nothing, a
//!   Unix path too long for a socket address) name what they are about.
//!   `connect` tries each address its argument resolves to, in order, and
//!   reports the last one's error, as std and tokio do. Writes use `MSG_NOSIGNAL`: a peer that closed is
//!   `EPIPE` on that stream, never a `SIGPIPE` for the process. `EMFILE`
//!   on accept is an error of that accept; the listener goes on.
//!
//! # Standard traits
//!
//! Streams implement `futures::io`'s `AsyncRead` and `AsyncWrite`, and
//! with the `tokio` feature tokio's, so codecs, `copy` and hyper (through
//! `hyper-util`'s `TokioIo`; see `examples/hyper_server.rs`) run on them.
//! The traits lend slices for one poll, so they cost a copy each way:
//! reads receive into a buffer of the stream's and hand bytes out; writes
//! copy the slice into the stream's queue and report the bytes written.
//! **Bytes a write accepted keep moving on their own**: each completed
//! send starts the next (the rest of a short send, then what was queued
//! meanwhile), so a reply written without a flush reaches a peer that
//! waits for all of it before answering. **Dropping a stream lingers**
//! like closing a socket: what was accepted is still sent, and the
//! descriptor closes after the last byte is in the kernel (or a send
//! fails, or a peer that does not read has held it past the stream's
//! [`set_drop_linger`](TcpStream::set_drop_linger) limit, 60 s unless
//! set); nothing blocks in `Drop`. Until then the queue keeps its engine
//! running: a caller-driven engine whose loop is gone finishes once the
//! linger has run out; a stream whose linger ran out with bytes unsent
//! is closed with a reset, so its peer sees `ECONNRESET`, not a clean
//! end. A flush waits for the queue, and a send's error comes back from
//! the next write or flush; every write and flush after it fails too.
//! The stream's own `shutdown(Write)` waits behind the queue (without
//! blocking the caller), and after it writes fail with `EPIPE`. The queue takes up to
//! 256 KiB beyond the send in flight (a larger write is taken in part, as
//! a short write); a write waits while it is full.
//! The owned-buffer methods cost no copy, and go after the queue. Both kinds of read share one queue
//! of bytes: mixed on one stream, and dropped by timeouts, they keep the
//! stream's order and lose nothing.
//!
//! # Receiving without a buffer per connection
//!
//! [`TcpStream::recv_stream`] (and [`UnixStream::recv_stream`]) yields
//! the bytes a connection receives as [`RecvBuf`]s taken from one ring of
//! buffers the engine shares among its connections
//! ([`AsyncEngineBuilder::recv_buffers`](crate::aio::AsyncEngineBuilder::recv_buffers)):
//! the kernel picks a buffer only when bytes arrive, so 10,000 idle
//! connections hold no memory, and a buffer goes back when its `RecvBuf`
//! is dropped. A connection holds at most its
//! [share](crate::aio::AsyncEngineBuilder::recv_buffer_share) of the
//! ring; when it holds its share, or the ring runs out, an awaited stream
//! receives into a buffer of its own until ring buffers come back, so
//! consumers that keep buffers while awaiting the next never stall. On epoll (and kernels before 6.0) the same
//! stream receives into a buffer per receive.
//!
//! # How operations reach the kernel
//!
//! Socket operations are requests of the engine's driver like file
//! operations. The design meets four requirements, and `blockio-bench
//! net` measures it against tokio's epoll reactor and monoio (see
//! `docs/benchmarks.md`):
//!
//! * **One kernel call per round, never one per operation.** The default
//!   engine's driver thread submits everything queued in one
//!   `io_uring_enter` per wake-up. A caller-driven engine with
//!   [`Submit::PerRound`](crate::aio::Submit::PerRound)
//!   submits every operation started in one round of tasks in one
//!   `io_uring_enter` of the driving task.
//! * **No lock across a kernel call.** The driver thread takes its queue
//!   and lets the lock go before it enters the kernel. A caller-driven
//!   ring's lock covers pushing entries and taking completions only; the
//!   `io_uring_enter` comes after it is let go, so a thread starting an
//!   operation never waits for another thread's kernel call.
//! * **No cross-thread hop where the executor allows it.** The default
//!   engine's completions cross from the driver thread to the executor's
//!   (about one context switch per request). With
//!   [`Driving::Caller`](crate::aio::Driving::Caller)
//!   the runtime's own reactor watches the ring's descriptor and its
//!   thread reaps the completions and wakes the tasks: on tokio,
//!   [`drive_on_tokio`](crate::aio::drive_on_tokio) (feature `tokio`). On
//!   several cores, run a thread per core, each with its own runtime,
//!   caller-driven engine and `SO_REUSEPORT` listener. A ring per worker
//!   of tokio's multi-thread runtime is not provided: its tasks move
//!   between workers, so each operation would have to find the ring of
//!   the thread polling it.
//! * **Any executor.** The futures are `Send` and need nothing but a
//!   waker. The default engine works under any executor; a caller-driven
//!   one under any loop that calls
//!   [`AsyncEngine::poll_drive`](crate::aio::AsyncEngine::poll_drive) or
//!   [`AsyncEngine::reap`](crate::aio::AsyncEngine::reap) when the ring's
//!   descriptor is readable, and its futures may be polled on other
//!   threads too.
//!
//! # Idle connections cost memory, never a slot
//!
//! The engine's [`queue_depth`](crate::aio::AsyncEngineBuilder::queue_depth)
//! bounds the operations in flight so that a burst of completions cannot
//! overflow the completion queue. That bound suits file operations,
//! which complete on their own; a socket operation waits for its peer,
//! maybe forever, and if it counted, idle connections would take every
//! slot and new accepts and reads would wait behind them until the idle
//! peers left. So socket operations do not count against the depth: with
//! default settings any number of idle or slowloris connections wait
//! beside the active ones, each holding its small operation state and
//! nothing that other work waits for. The completion queue is protected
//! directly instead: completions past its size (many waiting receives
//! finishing in one burst) are kept by the kernel (`IORING_FEAT_NODROP`,
//! Linux 5.5) and flushed by the driver's next enter, which asks for
//! completions while the overflow is flagged. File operations still wait
//! for room, in order, as the depth says.
//!
//! Where io_uring is blocked the same API runs on epoll: sockets are made
//! non-blocking, each operation is tried at once and, if the socket is not
//! ready, waits in an epoll set (through the `polling` crate) that one
//! thread watches. Idle connections hold no thread on either backend.
//! The set watches each socket once, for whatever its waiting operations
//! want, so waiting opens no descriptor: a connection costs its own
//! descriptor and nothing more.

mod accepts;
mod adapters;
mod addr;
mod incoming;
mod poll_io;
mod read_side;
mod recv_stream;
mod socket;
mod stream;
mod tcp;
mod time_limit;
mod unix;
mod write_side;

pub use addr::{lookup_host, ToSocketAddrs};
pub use recv_stream::{RecvBuf, RecvStream};
pub use tcp::{Incoming, TcpListener, TcpListenerOptions, TcpStream};
pub use unix::{UnixIncoming, UnixListener, UnixStream};
pub use write_side::WriteDropped;

/// A socket operation's error as std and tokio give it: the kernel's errno
/// as a plain OS error, so that `raw_os_error()`, `kind()` and
/// [`errno`](crate::errno) all read it. Errors that are not the kernel's
/// pass unchanged.
pub(crate) fn os_error(err: std::io::Error) -> std::io::Error {
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
