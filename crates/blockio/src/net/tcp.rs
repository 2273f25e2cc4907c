//! TCP: a listener that accepts, and a stream that reads and writes; and,
//! as in tokio's `net::tcp`, the stream's halves ([`OwnedReadHalf`],
//! [`OwnedWriteHalf`], [`ReadHalf`], [`WriteHalf`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::accepts::{AcceptQueue, Accepted};
use super::addr::{resolve_some, ToSocketAddrs};
use super::handed::Family;
use super::incoming::AcceptLoop;
use super::poll_io::PollIo;
use super::socket::Sock;
use super::stream::StreamCore;
use super::time_limit::{check_limit, connect_timed_out, with_limit};
use crate::aio::AsyncEngine;

/// How a [`TcpListener`] is set up.
#[derive(Debug, Clone)]
pub struct TcpListenerOptions {
    reuse_address: bool,
    reuse_port: bool,
    backlog: i32,
    multishot_accept: bool,
}

impl Default for TcpListenerOptions {
    fn default() -> Self {
        TcpListenerOptions {
            reuse_address: true,
            reuse_port: false,
            backlog: 1024,
            multishot_accept: false,
        }
    }
}

impl TcpListenerOptions {
    /// `SO_REUSEADDR` (default on, as for most servers: a restarted server
    /// can bind while old connections linger in `TIME_WAIT`).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListenerOptions;
    ///
    /// // Off: binding fails while connections of an earlier listener on this
    /// // port linger in TIME_WAIT.
    /// let listener = TcpListenerOptions::default()
    ///     .reuse_address(false)
    ///     .bind("127.0.0.1:0")
    ///     .await?;
    /// # drop(listener);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn reuse_address(mut self, on: bool) -> Self {
        self.reuse_address = on;
        self
    }

    /// `SO_REUSEPORT` (default off): several listeners, in this process or
    /// others, share the port and the kernel spreads connections.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListenerOptions;
    ///
    /// // Two listeners on one port; the kernel spreads connections between them.
    /// let options = TcpListenerOptions::default().reuse_port(true);
    /// let first = options.bind("127.0.0.1:0").await?;
    /// let second = options.bind(first.local_addr()?).await?;
    /// assert_eq!(first.local_addr()?, second.local_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn reuse_port(mut self, on: bool) -> Self {
        self.reuse_port = on;
        self
    }

    /// The queue of connections not yet accepted (default 1024; the kernel
    /// caps it at `net.core.somaxconn`).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListenerOptions;
    ///
    /// let listener = TcpListenerOptions::default()
    ///     .backlog(128)
    ///     .bind("127.0.0.1:0")
    ///     .await?;
    /// # drop(listener);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn backlog(mut self, n: u32) -> Self {
        self.backlog = n.min(i32::MAX as u32) as i32;
        self
    }

    /// Whether [`incoming`](TcpListener::incoming) accepts with one
    /// multishot request in the engine's io_uring (Linux 5.19 or later),
    /// which makes an accept storm cost no submission (default off).
    ///
    /// Off, the listener's accepts wait for readiness in an epoll set, as
    /// tokio's do, and the kernel holds no reference to the listening
    /// socket for them: if the process is killed (`SIGKILL`, a crash), the
    /// port is free the moment the process is gone, and a restarted server
    /// binds it at once. An accept armed in an io_uring holds the socket
    /// until the kernel tears the dead process's ring down, a few
    /// milliseconds later, during which binding the port fails with
    /// `EADDRINUSE`. (A listener that is dropped frees its port at once
    /// either way: it shuts its socket down.) On an io_uring engine the
    /// epoll set is watched by one thread of the engine's, started at its
    /// first accept; an accept that finds a connection waiting completes
    /// on the calling thread without it.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListenerOptions;
    ///
    /// let listener = TcpListenerOptions::default()
    ///     .multishot_accept(true)
    ///     .bind("127.0.0.1:0")
    ///     .await?;
    /// let _client = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let mut incoming = listener.incoming();
    /// let (stream, peer) = incoming.next().await?;
    /// assert_eq!(stream.peer_addr()?, peer);
    /// // Where io_uring lacks multishot accept, one accept each.
    /// println!("multishot: {}", incoming.multishot());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn multishot_accept(mut self, on: bool) -> Self {
        self.multishot_accept = on;
        self
    }

    /// Binds a listener to `addr` with these options, on the default
    /// engine ([`AsyncEngine::current`]): each address it resolves to in
    /// turn, until one binds, as std's and tokio's `bind`. A host name is
    /// looked up off the executor's thread (see [`lookup_host`](super::lookup_host)).
    ///
    /// # Errors
    /// The address does not resolve, the default engine cannot start, or
    /// `bind` or `listen` failed on every address (the last address's
    /// error, the kernel's, `raw_os_error()` set: `EADDRINUSE`, `EACCES`
    /// below port 1024, ...), or what the listener's accepts wait in could
    /// not be made (on io_uring, the epoll set its accepts wait in: the
    /// caller's multi-thread runtime's, else the readiness thread's with
    /// its eventfd and thread; made by the first bind from each), named with the kernel's reason: "accepting on
    /// 127.0.0.1:3200: cannot make blockio's readiness set (epoll): Too
    /// many open files (os error 24)", of the kernel's error's kind.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListenerOptions;
    ///
    /// let listener = TcpListenerOptions::default().bind("127.0.0.1:0").await?;
    /// assert!(listener.local_addr()?.ip().is_loopback());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn bind(&self, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        self.bind_with(&AsyncEngine::current()?, addr).await
    }

    /// [`bind`](Self::bind) on `engine`.
    ///
    /// # Errors
    /// As for [`bind`](Self::bind).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::TcpListenerOptions;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let listener = TcpListenerOptions::default()
    ///     .backlog(128)
    ///     .bind_with(&engine, "127.0.0.1:0")
    ///     .await?;
    /// # drop(listener);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn bind_with(
        &self,
        engine: &AsyncEngine,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpListener> {
        let mut last = None;
        for addr in resolve_some(&addr).await? {
            match self.bind_one(engine, addr) {
                Ok(listener) => return Ok(listener),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("resolve_some gives at least one address"))
    }

    /// Binds a listener to one address.
    fn bind_one(&self, engine: &AsyncEngine, addr: SocketAddr) -> io::Result<TcpListener> {
        let fail = super::os_error;
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(fail)?;
        socket.set_reuse_address(self.reuse_address).map_err(fail)?;
        socket.set_reuse_port(self.reuse_port).map_err(fail)?;
        socket.bind(&addr.into()).map_err(fail)?;
        socket.listen(self.backlog).map_err(fail)?;
        // Accepts wait for readiness (see `multishot_accept`).
        socket.set_nonblocking(true).map_err(fail)?;
        let local = socket.local_addr().map_err(fail)?;
        let sock = Sock::new(socket, engine).map_err(fail)?;
        let listener = TcpListener {
            accepts: AcceptQueue::new(&sock, self.multishot_accept, true),
            sock,
            local: local.as_socket().unwrap_or(addr),
        };
        listener.accepts_can_wait()?;
        Ok(listener)
    }
}

/// A TCP socket listening for connections.
///
/// ```no_run
/// use blockio::aio::IoBuf;
/// use blockio::net::TcpListener;
///
/// # async fn serve() -> std::io::Result<()> {
/// let listener = TcpListener::bind("127.0.0.1:8080").await?;
/// loop {
///     let (stream, peer) = listener.accept().await?;
///     let (res, buf) = stream.read(vec![0u8; 4096]).await;
///     let n = res?;
///     stream.write_all(buf.slice(..n)).await.0?; // echo, no copy
///     println!("echoed {n} bytes to {peer}");
/// }
/// # }
/// ```
pub struct TcpListener {
    sock: Sock,
    local: SocketAddr,
    /// The multishot accept of [`incoming`](Self::incoming), and what it
    /// accepted that nobody took yet.
    accepts: AcceptQueue,
}

impl TcpListener {
    /// Binds to `addr` with the default [`TcpListenerOptions`], on the
    /// default engine ([`AsyncEngine::current`]), as tokio's `bind`.
    ///
    /// # Errors
    /// As for [`TcpListenerOptions::bind`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListener;
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").await?;
    /// println!("listening on {}", listener.local_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        TcpListenerOptions::default().bind(addr).await
    }

    /// [`bind`](Self::bind) on `engine`.
    ///
    /// # Errors
    /// As for [`TcpListenerOptions::bind`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::TcpListener;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let listener = TcpListener::bind_with(&engine, "127.0.0.1:0").await?;
    /// # drop(listener);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn bind_with(
        engine: &AsyncEngine,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpListener> {
        TcpListenerOptions::default().bind_with(engine, addr).await
    }

    /// A listener of `listener`, a socket already bound and listening
    /// (by std, or handed over by a service manager, as in systemd's
    /// socket activation), on the default engine
    /// ([`AsyncEngine::current`]), as tokio's `from_std`. It accepts as
    /// a listener of [`bind`](Self::bind) does (with the default
    /// [`TcpListenerOptions`]).
    ///
    /// The socket is made non-blocking here, whatever mode it comes in
    /// (tokio leaves that to the caller, and a blocking listener there
    /// blocks its runtime's thread): its accepts wait for readiness. A
    /// descriptor given by number (`LISTEN_FDS`) becomes a
    /// `std::net::TcpListener` through [`OwnedFd`](std::os::fd::OwnedFd)
    /// (`TcpListener::from(owned)`): ownership is taken, never a raw
    /// number.
    ///
    /// # Errors
    /// A socket that is not an IPv4 or IPv6 `SOCK_STREAM` one (a UDP or
    /// Unix socket's descriptor), or that is not listening, is refused
    /// with kind [`InvalidInput`](io::ErrorKind::InvalidInput), the
    /// message naming `TcpListener::from_std` and the type, family or
    /// state found; the kernel's error asking them (a descriptor that is
    /// no socket), making it non-blocking or asking its address; that
    /// the default engine cannot start; or that what the listener's
    /// accepts wait in could not be made, as for
    /// [`TcpListenerOptions::bind`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListener;
    ///
    /// // Bound by std (or inherited from a service manager).
    /// let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let addr = std_listener.local_addr()?;
    /// let listener = TcpListener::from_std(std_listener)?;
    /// assert_eq!(listener.local_addr()?, addr);
    /// let client = std::net::TcpStream::connect(addr)?;
    /// let (_stream, peer) = listener.accept().await?;
    /// assert_eq!(peer, client.local_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        Self::from_std_with(&AsyncEngine::current()?, listener)
    }

    /// [`from_std`](Self::from_std) on `engine`.
    ///
    /// # Errors
    /// As for [`from_std`](Self::from_std).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::TcpListener;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let listener = TcpListener::from_std_with(&engine, std_listener)?;
    /// # drop(listener);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_std_with(
        engine: &AsyncEngine,
        listener: std::net::TcpListener,
    ) -> io::Result<TcpListener> {
        let fail = super::os_error;
        let socket = Socket::from(listener);
        let call = "TcpListener::from_std";
        super::handed::check(&socket, call, Family::Ip, true)?;
        // Accepts wait for readiness (see `multishot_accept`).
        socket.set_nonblocking(true).map_err(fail)?;
        let local = socket.local_addr().map_err(fail)?.as_socket();
        let local = local.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{call}: the socket has no IP address"),
            )
        })?;
        let sock = Sock::new(socket, engine).map_err(fail)?;
        let listener = TcpListener {
            accepts: AcceptQueue::new(&sock, TcpListenerOptions::default().multishot_accept, true),
            sock,
            local,
        };
        listener.accepts_can_wait()?;
        Ok(listener)
    }

    /// Makes now what the listener's accepts wait in (on io_uring, the
    /// epoll set of the caller's multi-thread runtime, else the readiness
    /// thread's with its eventfd and thread; made by the first bind from
    /// each), so that a listener
    /// that could never accept fails at its bind, naming what could not be
    /// made ("accepting on 127.0.0.1:3200: cannot make blockio's readiness
    /// set (epoll): Too many open files (os error 24)"), rather than
    /// listening while every accept fails: the kernel would complete the
    /// handshakes of clients nobody serves.
    fn accepts_can_wait(&self) -> io::Result<()> {
        self.accepts.readiness_made()
    }

    /// Accepts a connection: the stream and the peer's address.
    ///
    /// A connection that [`incoming`](Self::incoming)'s multishot accept
    /// took and nobody has taken yet comes first.
    ///
    /// # Errors
    /// The kernel's error (`raw_os_error()` set). `EMFILE` and `ENFILE`
    /// (no descriptors left) leave the listener usable: accept again once
    /// descriptors are free; the waiting connection is still queued. So
    /// does an error naming what blockio could not make for the accept to
    /// wait in (made at the bind; see [`TcpListenerOptions::bind`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListener;
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").await?;
    /// let client = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let (stream, peer) = listener.accept().await?;
    /// assert_eq!(peer, client.local_addr()?);
    /// assert_eq!(stream.local_addr()?, client.peer_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        // By readiness (see `TcpListenerOptions::multishot_accept`), through
        // the listener's queue: dropped before it is ready, this future
        // loses no connection (see `net::accepts`).
        self.stream_of(self.accepts.next().await)
    }

    /// The stream of an accept's result; the peer's address as the accept
    /// wrote it, or else asked of the socket.
    fn stream_of(&self, res: io::Result<Accepted>) -> io::Result<(TcpStream, SocketAddr)> {
        let local = self.local.to_string();
        let wrap = super::os_error;
        let (fd, peer) = res.map_err(wrap)?;
        let socket = Socket::from(fd);
        let peer = match peer.or_else(|| socket.peer_addr().ok()) {
            Some(p) => p.as_socket().ok_or_else(|| {
                io::Error::other(format!("accept on {local}: the peer has no IP address"))
            })?,
            // A multishot accept writes no address, and a peer that reset
            // before its connection was taken leaves none to ask for
            // (`ENOTCONN`): the connection is still handed over, as any
            // accepted one, with the unspecified address of the
            // listener's family; reading it gives the reset.
            None => SocketAddr::new(unspecified(self.local.ip()), 0),
        };
        let sock = Sock::new(socket, self.sock.engine()).map_err(wrap)?;
        let stream = TcpStream {
            core: Box::new(StreamCore::new(sock, peer.to_string())),
            poll: Box::default(),
            peer: Some(peer),
        };
        Ok((stream, peer))
    }

    /// The connections as they come, as a [`Stream`](futures_core::Stream)
    /// (or through [`Incoming::next`]) that never ends by itself.
    ///
    /// Each item is one accept's result. `EMFILE`/`ENFILE` (no descriptors
    /// left) is yielded as an error and the stream goes on: it pauses
    /// before the next accept (1 ms, doubling up to 100 ms while the error
    /// lasts), so a server at its descriptor limit neither dies nor spins,
    /// and accepting resumes once descriptors are closed. Other errors are
    /// yielded as they come, without a pause.
    ///
    /// With [`TcpListenerOptions::multishot_accept`] on io_uring with Linux
    /// 5.19 or later, one multishot accept is armed
    /// while the stream waits, and each connection costs a completion and
    /// no submission ([`Incoming::multishot`]). It is cancelled when the
    /// stream is dropped, or when 64 connections it accepted wait to be
    /// taken (the rest then wait in the kernel's backlog); a connection it
    /// accepted that the stream did not yield goes to the listener's next
    /// [`accept`](Self::accept) or stream. Otherwise each connection is
    /// one accept, made when the listener is ready.
    ///
    /// A connection whose peer reset before it was accepted is yielded as
    /// any other (as by tokio; reading it gives the reset). A multishot
    /// accept writes no peer address, so the address is asked of the
    /// socket, and such a connection comes with the unspecified address
    /// (`0.0.0.0:0` or `[::]:0`) when the peer left none.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListener;
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").await?;
    /// let addr = listener.local_addr()?;
    /// let _clients = [std::net::TcpStream::connect(addr)?, std::net::TcpStream::connect(addr)?];
    /// let mut incoming = listener.incoming();
    /// for _ in 0..2 {
    ///     let (stream, peer) = incoming.next().await?;
    ///     assert_eq!(stream.peer_addr()?, peer);
    /// }
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming(AcceptLoop::new(self))
    }

    /// The address the listener is bound to (with the port the kernel
    /// chose, when bound to port 0).
    ///
    /// # Errors
    /// None: the address is known from `bind`. The `Result` is tokio's
    /// signature, so that ported code's `?` compiles unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpListener;
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").await?;
    /// assert_ne!(listener.local_addr()?.port(), 0);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// The unspecified address (`0.0.0.0` or `::`) of `ip`'s family.
fn unspecified(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    }
}

impl Drop for TcpListener {
    /// Stops listening now: the port is free for a new listener at once,
    /// as when a listener's descriptor is closed, even while the
    /// multishot accept (which holds the socket until its cancellation
    /// completes) is still in the kernel. A connection accepted by then is
    /// closed with the accept queue.
    fn drop(&mut self) {
        let _ = self.sock.socket.shutdown(std::net::Shutdown::Both);
    }
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.local)
            .finish()
    }
}

super::incoming::incoming_stream!(TcpListener, Incoming, (TcpStream, SocketAddr));

/// A TCP connection.
///
/// Reads and writes take owned buffers and give them back with the result
/// ([`BufResult`](crate::aio::BufResult)). Every future is `Send` and needs only a waker. Dropping
/// a future cancels its operation in the kernel; a read so dropped loses
/// no bytes (the next read returns them, see the `net` module docs).
/// Errors are the kernel's, as on std and tokio (see the module docs).
///
/// It also implements `futures::io::{AsyncRead, AsyncWrite}`, and tokio's
/// with the `tokio` feature (one copy per call; see the module docs).
pub struct TcpStream {
    /// Boxed, as `poll` is, so that the stream is a few words (see
    /// `stream::StreamCore`).
    core: Box<StreamCore>,
    poll: Box<Mutex<PollIo>>,
    /// The peer's address, known when the stream was made; a stream of
    /// `from_std` whose peer had none then (reset, or still connecting)
    /// asks the socket.
    peer: Option<SocketAddr>,
}

super::adapters::stream_io_traits!(TcpStream);
super::split::stream_halves!(TcpStream, "TCP stream");

impl TcpStream {
    /// Connects to `addr` on the default engine
    /// ([`AsyncEngine::current`]), for as long as the kernel tries (about
    /// two minutes of SYN retries for a peer that never answers; see
    /// [`connect_timeout`](Self::connect_timeout)). A host name is looked
    /// up off the executor's thread (see [`lookup_host`](super::lookup_host)); when `addr`
    /// resolves to several addresses, each is tried in order until one
    /// connects, as std and tokio do.
    ///
    /// # Errors
    /// The last address's error, as the kernel gave it (`ECONNREFUSED`,
    /// `ENETUNREACH`, `ETIMEDOUT`, ...; see the module docs), that the
    /// address did not resolve or resolved to nothing, or that the
    /// default engine cannot start.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::net::TcpStream;
    ///
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let stream = TcpStream::connect(server.local_addr()?).await?;
    /// assert_eq!(stream.peer_addr()?, server.local_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        Self::connect_with(&AsyncEngine::current()?, addr).await
    }

    /// [`connect`](Self::connect) on `engine`.
    ///
    /// # Errors
    /// As for [`connect`](Self::connect).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::TcpStream;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let stream = TcpStream::connect_with(&engine, server.local_addr()?).await?;
    /// # drop(stream);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect_with(
        engine: &AsyncEngine,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpStream> {
        let mut last = None;
        for a in resolve_some(&addr).await? {
            match Self::connect_to(engine, a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("resolve_some gives at least one address"))
    }

    /// A stream of `stream`, a connected socket (by std, or handed over
    /// by another program), on the default engine
    /// ([`AsyncEngine::current`]), as tokio's `from_std`. Bytes already
    /// received and waiting in the socket are the first reads'.
    ///
    /// Any mode will do (tokio asks the caller to make the socket
    /// non-blocking first): on the thread-pool backend it is made
    /// non-blocking here, since its operations wait for readiness; on
    /// io_uring the kernel waits for them in either mode, and blockio's
    /// own calls on the caller's thread never block
    /// (`MSG_DONTWAIT`). A descriptor given by number becomes a
    /// `std::net::TcpStream` through [`OwnedFd`](std::os::fd::OwnedFd):
    /// ownership is taken, never a raw number.
    ///
    /// A socket whose peer has no address (it sent bytes and reset, or
    /// the connect is still in progress) is taken, as by tokio: its bytes
    /// are the first reads', then the reset; [`peer_addr`](Self::peer_addr)
    /// asks the socket again.
    ///
    /// # Errors
    /// A socket that is not an IPv4 or IPv6 `SOCK_STREAM` one, or that is
    /// listening, is refused with kind
    /// [`InvalidInput`](io::ErrorKind::InvalidInput), the message naming
    /// `TcpStream::from_std` and the type, family or state found; the
    /// kernel's error asking them (a descriptor that is no socket) or
    /// making it non-blocking; or that the default engine cannot start.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use std::io::Write;
    /// use blockio::net::TcpStream;
    ///
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let std_stream = std::net::TcpStream::connect(server.local_addr()?)?;
    /// let (mut peer, _) = server.accept()?;
    /// peer.write_all(b"sent before")?;
    /// let stream = TcpStream::from_std(std_stream)?;
    /// let (n, buf) = stream.read(vec![0u8; 11]).await;
    /// assert_eq!(&buf[..n?], b"sent before");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        Self::from_std_with(&AsyncEngine::current()?, stream)
    }

    /// [`from_std`](Self::from_std) on `engine`.
    ///
    /// # Errors
    /// As for [`from_std`](Self::from_std).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::TcpStream;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let std_stream = std::net::TcpStream::connect(server.local_addr()?)?;
    /// let stream = TcpStream::from_std_with(&engine, std_stream)?;
    /// assert_eq!(stream.peer_addr()?, server.local_addr()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_std_with(
        engine: &AsyncEngine,
        stream: std::net::TcpStream,
    ) -> io::Result<TcpStream> {
        let socket = Socket::from(stream);
        super::handed::check(&socket, "TcpStream::from_std", Family::Ip, false)?;
        // Best effort, as tokio: a peer that sent bytes and then reset, or
        // a connect still in progress, leaves no address to ask for
        // (`ENOTCONN`), and the stream is still handed over; its bytes are
        // the first reads', then the reset. `peer_addr` asks again.
        let peer = socket.peer_addr().ok().and_then(|a| a.as_socket());
        let name = peer.map_or_else(
            || "a peer unknown to from_std".to_string(),
            |p| p.to_string(),
        );
        let sock = Sock::new(socket, engine).map_err(super::os_error)?;
        Ok(TcpStream {
            core: Box::new(StreamCore::new(sock, name)),
            poll: Box::default(),
            peer,
        })
    }

    /// [`connect`](Self::connect), giving up after `limit` (over the
    /// name look-up and all the addresses tried): the connect in flight is
    /// then cancelled in the kernel and the error is `ETIMEDOUT` (kind
    /// [`TimedOut`](io::ErrorKind::TimedOut), `raw_os_error()` set). The
    /// timer needs no particular executor.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and the timeout. A zero `limit` is
    /// refused with kind [`InvalidInput`](io::ErrorKind::InvalidInput),
    /// as by std, before anything is tried.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use std::time::Duration;
    /// use blockio::net::TcpStream;
    ///
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let stream = TcpStream::connect_timeout(server.local_addr()?, Duration::from_secs(5)).await?;
    /// # drop(stream);
    /// // A zero limit is refused before anything is tried, as by std.
    /// let zero = TcpStream::connect_timeout(server.local_addr()?, Duration::ZERO).await;
    /// assert_eq!(zero.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect_timeout(
        addr: impl ToSocketAddrs,
        limit: Duration,
    ) -> io::Result<TcpStream> {
        check_limit(limit)?;
        Self::connect_timeout_with(&AsyncEngine::current()?, addr, limit).await
    }

    /// [`connect_timeout`](Self::connect_timeout) on `engine`.
    ///
    /// # Errors
    /// As for [`connect_timeout`](Self::connect_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use std::time::Duration;
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::TcpStream;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let limit = Duration::from_secs(5);
    /// let stream = TcpStream::connect_timeout_with(&engine, server.local_addr()?, limit).await?;
    /// # drop(stream);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect_timeout_with(
        engine: &AsyncEngine,
        addr: impl ToSocketAddrs,
        limit: Duration,
    ) -> io::Result<TcpStream> {
        check_limit(limit)?;
        with_limit(Self::connect_with(engine, addr), limit)
            .await
            .unwrap_or_else(|| Err(connect_timed_out()))
    }

    /// A connect the kernel cancelled because the thread that submitted
    /// it exited (see `stream::cancelled_by_the_kernel`) is made again on
    /// a new socket, unless the old one got connected meanwhile.
    async fn connect_to(engine: &AsyncEngine, addr: SocketAddr) -> io::Result<TcpStream> {
        let peer = addr.to_string();
        let mut cancels = 0;
        let sock = loop {
            let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
                .map_err(super::os_error)?;
            let sock = Sock::new(socket, engine).map_err(super::os_error)?;
            let (res, _) = sock.connect(SockAddr::from(addr)).await;
            if super::stream::cancelled_by_the_kernel(&res, &mut cancels) {
                if sock.socket.peer_addr().is_ok() {
                    break sock;
                }
                continue;
            }
            res.map_err(super::os_error)?;
            break sock;
        };
        Ok(TcpStream {
            core: Box::new(StreamCore::new(sock, peer)),
            poll: Box::default(),
            peer: Some(addr),
        })
    }

    /// Sets `TCP_NODELAY`: small writes go out at once instead of waiting
    /// to be coalesced (Nagle's algorithm).
    ///
    /// # Errors
    /// As `setsockopt` reports them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// client.set_nodelay(true)?;
    /// assert!(client.nodelay()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.core.sock.socket.set_tcp_nodelay(on)
    }

    /// Sets `IP_TTL`, the time-to-live of the packets this stream sends
    /// (an IPv4 socket's option, as tokio's `set_ttl`).
    ///
    /// # Errors
    /// As `setsockopt` reports them (`EINVAL` for a `ttl` above 255).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// client.set_ttl(100)?;
    /// assert_eq!(client.ttl()?, 100);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.core.sock.socket.set_ttl_v4(ttl)
    }

    /// `IP_TTL`, the time-to-live of the packets this stream sends.
    ///
    /// # Errors
    /// As `getsockopt` reports them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// // The system's default (`net.ipv4.ip_default_ttl`, 64 unless changed).
    /// assert!(server.ttl()? > 0);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn ttl(&self) -> io::Result<u32> {
        self.core.sock.socket.ttl_v4()
    }

    /// Sets `SO_LINGER` to zero, as tokio's `set_zero_linger`: closing the
    /// socket resets the connection (the peer reads `ECONNRESET`) instead
    /// of ending it, and leaves no `TIME_WAIT`. Bytes the I/O traits
    /// accepted are still sent before the close (see
    /// [`set_drop_linger`](Self::set_drop_linger)).
    ///
    /// There is no `set_linger` with a non-zero time (tokio deprecated
    /// its own): the kernel's `close` would then block the closing thread
    /// until the bytes are sent. [`set_drop_linger`](Self::set_drop_linger)
    /// bounds how long they may take without blocking any thread.
    ///
    /// # Errors
    /// As `setsockopt` reports them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// client.set_zero_linger()?;
    /// assert_eq!(client.linger()?, Some(std::time::Duration::ZERO));
    /// drop(client);
    /// // The peer reads a reset, not the end of the stream.
    /// let (n, _) = server.read(vec![0u8; 1]).await;
    /// assert_eq!(n.unwrap_err().raw_os_error(), Some(libc::ECONNRESET));
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn set_zero_linger(&self) -> io::Result<()> {
        self.core.sock.socket.set_linger(Some(Duration::ZERO))
    }

    /// `SO_LINGER`: `None` when off (the default: closing never waits),
    /// else how long the kernel's `close` lingers.
    ///
    /// # Errors
    /// As `getsockopt` reports them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// assert_eq!(server.linger()?, None);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn linger(&self) -> io::Result<Option<Duration>> {
        self.core.sock.socket.linger()
    }

    /// Whether `TCP_NODELAY` is set.
    ///
    /// # Errors
    /// As `getsockopt` reports them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// assert!(!server.nodelay()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn nodelay(&self) -> io::Result<bool> {
        self.core.sock.socket.tcp_nodelay()
    }

    /// The peer's address.
    ///
    /// # Errors
    /// None for a stream of a connect or accept: the address is known
    /// from it. A stream of [`from_std`](Self::from_std) whose peer had no
    /// address then (it reset, or the connect was still in progress) asks
    /// the socket, and gets the kernel's error (`ENOTCONN`) as tokio's
    /// does.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// assert_eq!(client.peer_addr()?, server.local_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        if let Some(peer) = self.peer {
            return Ok(peer);
        }
        let addr = self.core.sock.socket.peer_addr()?;
        addr.as_socket()
            .ok_or_else(|| io::Error::other("the peer has no IP address"))
    }

    /// This end's address.
    ///
    /// # Errors
    /// As `getsockname` reports them.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// assert_eq!(client.local_addr()?, server.peer_addr()?);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let addr = self.core.sock.socket.local_addr()?;
        addr.as_socket()
            .ok_or_else(|| io::Error::other("the socket has no IP address"))
    }

    /// The socket, for options this type does not wrap (`socket2`'s API).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
    /// # let (client, accepted) = futures::join!(connect, listener.accept());
    /// # let (client, (server, _)) = (client?, accepted?);
    ///
    /// // An option this type does not wrap, through socket2.
    /// client.socket().set_send_buffer_size(64 << 10)?;
    /// assert!(client.socket().send_buffer_size()? > 0);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn socket(&self) -> &Socket {
        &self.core.sock.socket
    }
}

descriptors!(TcpStream, TcpListener);

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The address as it was before a stream of `from_std` could lack
        // one: `TcpStream { peer: 127.0.0.1:80 }`.
        f.debug_struct("TcpStream")
            .field("peer", &format_args!("{}", self.core.peer))
            .finish()
    }
}
