//! Unix-domain stream sockets: the TCP API over a path; and, as in
//! tokio's `net::unix`, the stream's halves ([`OwnedReadHalf`],
//! [`OwnedWriteHalf`], [`ReadHalf`], [`WriteHalf`]).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};

use super::accepts::{AcceptQueue, Accepted};
use super::handed::Family;
use super::incoming::AcceptLoop;
use super::poll_io::PollIo;
use super::socket::Sock;
use super::stream::StreamCore;
use super::time_limit::{check_limit, connect_timed_out, with_limit};
use crate::aio::AsyncEngine;

/// A Unix-domain socket listening for connections at a path.
///
/// The path is not removed when the listener is dropped (as with std's
/// listener): remove it before binding again.
pub struct UnixListener {
    sock: Sock,
    path: PathBuf,
    /// The multishot accept of [`incoming`](Self::incoming), and what it
    /// accepted that nobody took yet.
    accepts: AcceptQueue,
}

impl UnixListener {
    /// Binds to `path` (which must not exist) with a backlog of 1024, on
    /// the default engine ([`AsyncEngine::current`]). Not async, as
    /// tokio's: a path needs no look-up.
    ///
    /// # Errors
    /// The kernel's (`raw_os_error()` set): `EADDRINUSE` when it exists,
    /// `ENOENT`/`EACCES` for its directory; or, naming the path, a path
    /// longer than `sun_path` (108 bytes); or that the default engine
    /// cannot start.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::UnixListener;
    ///
    /// let listener = UnixListener::bind(dir.path().join("app.sock"))?;
    /// assert_eq!(listener.local_path(), dir.path().join("app.sock"));
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        Self::bind_with(&AsyncEngine::current()?, path)
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
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::UnixListener;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let listener = UnixListener::bind_with(&engine, dir.path().join("app.sock"))?;
    /// # drop(listener);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn bind_with(engine: &AsyncEngine, path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let path = path.as_ref().to_path_buf();
        let name = format!("cannot listen on {}", path.display());
        let fail = |e: io::Error| super::os_error_or_named(e, &name);
        let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(fail)?;
        socket
            .bind(&SockAddr::unix(&path).map_err(fail)?)
            .map_err(fail)?;
        socket.listen(1024).map_err(fail)?;
        let sock = Sock::new(socket, engine).map_err(fail)?;
        // Multishot accept where the ring has it: TCP accepts wait for
        // readiness instead so that a killed server's port is free at once
        // (see `TcpListenerOptions::multishot_accept`), but a Unix listener
        // holds no port. Its address is the path, which a restarted server
        // must remove before binding anyway; the dead process's socket,
        // still held by its ring, is then bound to no name and in the way
        // of nothing.
        Ok(UnixListener {
            accepts: AcceptQueue::new(&sock, true, false),
            sock,
            path,
        })
    }

    /// A listener of `listener`, a socket already bound and listening
    /// (by std, or handed over by a service manager, as in systemd's
    /// socket activation), on the default engine
    /// ([`AsyncEngine::current`]), as tokio's `from_std`. It accepts as
    /// a listener of [`bind`](Self::bind) does; its
    /// [`local_path`](Self::local_path) is the path it is bound to, empty
    /// for a socket bound to none (an abstract name).
    ///
    /// Any mode will do (tokio asks the caller to make the socket
    /// non-blocking first): on the thread-pool backend it is made
    /// non-blocking here, since its accepts wait for readiness; on
    /// io_uring the kernel waits for them in either mode. A descriptor
    /// given by number becomes a `std::os::unix::net::UnixListener`
    /// through [`OwnedFd`](std::os::fd::OwnedFd): ownership is taken,
    /// never a raw number.
    ///
    /// # Errors
    /// A socket that is not a Unix-domain `SOCK_STREAM` one (a TCP
    /// listener's descriptor, a datagram socket), or that is not
    /// listening, is refused with kind
    /// [`InvalidInput`](io::ErrorKind::InvalidInput), the message naming
    /// `UnixListener::from_std` and the type, family or state found; the
    /// kernel's error asking them (a descriptor that is no socket), asking
    /// its address or making it non-blocking; or that the default engine
    /// cannot start.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::UnixListener;
    ///
    /// let path = dir.path().join("app.sock");
    /// let listener = UnixListener::from_std(std::os::unix::net::UnixListener::bind(&path)?)?;
    /// assert_eq!(listener.local_path(), path);
    /// let _client = std::os::unix::net::UnixStream::connect(&path)?;
    /// let (_stream, _peer) = listener.accept().await?;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
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
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::UnixListener;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let std_listener = std::os::unix::net::UnixListener::bind(dir.path().join("app.sock"))?;
    /// let listener = UnixListener::from_std_with(&engine, std_listener)?;
    /// # drop(listener);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_std_with(
        engine: &AsyncEngine,
        listener: std::os::unix::net::UnixListener,
    ) -> io::Result<UnixListener> {
        let fail = super::os_error;
        let socket = Socket::from(listener);
        super::handed::check(&socket, "UnixListener::from_std", Family::Unix, true)?;
        let local = socket.local_addr().map_err(fail)?;
        let path = local
            .as_pathname()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let sock = Sock::new(socket, engine).map_err(fail)?;
        // Multishot accept where the ring has it, as `bind_with`.
        Ok(UnixListener {
            accepts: AcceptQueue::new(&sock, true, false),
            sock,
            path,
        })
    }

    /// Accepts a connection: the stream and the peer's address (unnamed,
    /// unless the peer bound its socket to a path).
    ///
    /// # Errors
    /// The kernel's error; `EMFILE`/`ENFILE` leave
    /// the listener usable.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::{UnixListener, UnixStream};
    ///
    /// let listener = UnixListener::bind(dir.path().join("app.sock"))?;
    /// let (client, accepted) =
    ///     futures::join!(UnixStream::connect(listener.local_path()), listener.accept());
    /// let (served, _peer) = accepted?;
    /// client?.write_all(b"ping".to_vec()).await.0?;
    /// let (n, buf) = served.read(vec![0u8; 4]).await;
    /// assert_eq!(&buf[..n?], b"ping");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn accept(&self) -> io::Result<(UnixStream, SockAddr)> {
        // Through the listener's queue: dropped before it is ready, this
        // future loses no connection (see `net::accepts`).
        self.stream_of(self.accepts.next().await)
    }

    /// The connections as they come, as [`TcpListener::incoming`](super::TcpListener::incoming)
    /// gives them: one multishot accept where the kernel has it, a pause
    /// while descriptors are short, and connections it took but did not
    /// yield left for the next accept.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::UnixListener;
    ///
    /// let listener = UnixListener::bind(dir.path().join("app.sock"))?;
    /// let _client = std::os::unix::net::UnixStream::connect(listener.local_path())?;
    /// let mut incoming = listener.incoming();
    /// let (stream, _peer) = incoming.next().await?;
    /// # drop(stream);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn incoming(&self) -> UnixIncoming<'_> {
        UnixIncoming(AcceptLoop::new(self))
    }

    /// The stream of an accept's result; the peer's address as the accept
    /// wrote it, or else asked of the socket.
    fn stream_of(&self, res: io::Result<Accepted>) -> io::Result<(UnixStream, SockAddr)> {
        let local = self.path.display().to_string();
        let wrap = super::os_error;
        let (fd, peer) = res.map_err(wrap)?;
        let socket = Socket::from(fd);
        let peer = match peer {
            Some(p) => p,
            None => socket.peer_addr().map_err(wrap)?,
        };
        let sock = Sock::new(socket, self.sock.engine()).map_err(wrap)?;
        let name = match peer.as_pathname() {
            Some(p) => p.display().to_string(),
            None => format!("a peer of {local}"),
        };
        Ok((UnixStream::new(StreamCore::new(sock, name)), peer))
    }

    /// The path the listener is bound to.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::UnixListener;
    ///
    /// let listener = UnixListener::bind(dir.path().join("app.sock"))?;
    /// assert!(listener.local_path().ends_with("app.sock"));
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn local_path(&self) -> &Path {
        &self.path
    }
}

super::incoming::incoming_stream!(UnixListener, UnixIncoming, (UnixStream, SockAddr));

impl Drop for UnixListener {
    /// Stops listening now, as [`TcpListener`](super::TcpListener)'s drop
    /// does: a connect from then on is refused, even while the multishot
    /// accept is still in the kernel.
    fn drop(&mut self) {
        let _ = self.sock.socket.shutdown(std::net::Shutdown::Both);
    }
}

impl fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixListener")
            .field("path", &self.path)
            .finish()
    }
}

/// A Unix-domain stream connection, with [`TcpStream`](super::TcpStream)'s
/// API: owned-buffer reads and writes, reads that lose no bytes when
/// dropped, the kernel's errors, and the `futures::io` (and with the
/// `tokio` feature, tokio's) I/O traits.
pub struct UnixStream {
    /// Boxed, as `poll` is (see `stream::StreamCore`).
    core: Box<StreamCore>,
    poll: Box<Mutex<PollIo>>,
}

super::adapters::stream_io_traits!(UnixStream);
super::split::stream_halves!(UnixStream, "Unix stream");

impl UnixStream {
    fn new(core: StreamCore) -> UnixStream {
        UnixStream {
            core: Box::new(core),
            poll: Box::default(),
        }
    }

    /// Connects to the listener at `path`, on the default engine
    /// ([`AsyncEngine::current`]).
    ///
    /// # Errors
    /// The kernel's: `ENOENT` (nothing there), `ECONNREFUSED` (nobody
    /// listening), `EACCES`, ...; or that the default engine cannot start.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::UnixStream;
    ///
    /// let path = dir.path().join("app.sock");
    /// let server = std::os::unix::net::UnixListener::bind(&path)?;
    /// let stream = UnixStream::connect(&path).await?;
    /// let (mut peer, _) = server.accept()?;
    /// stream.write_all(b"ping".to_vec()).await.0?;
    /// let mut got = [0u8; 4];
    /// std::io::Read::read_exact(&mut peer, &mut got)?;
    /// assert_eq!(&got, b"ping");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        Self::connect_with(&AsyncEngine::current()?, path).await
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
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::UnixStream;
    ///
    /// let path = dir.path().join("app.sock");
    /// let _server = std::os::unix::net::UnixListener::bind(&path)?;
    /// let engine = AsyncEngine::new()?;
    /// let stream = UnixStream::connect_with(&engine, &path).await?;
    /// # drop(stream);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect_with(
        engine: &AsyncEngine,
        path: impl AsRef<Path>,
    ) -> io::Result<UnixStream> {
        let path = path.as_ref();
        let peer = path.display().to_string();
        let name = format!("cannot connect to {peer}");
        let fail = |e: io::Error| super::os_error_or_named(e, &name);
        let mut cancels = 0;
        // A connect the kernel cancelled because the thread that submitted
        // it exited is made again on a new socket, as for TCP.
        let sock = loop {
            let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(fail)?;
            let addr = SockAddr::unix(path).map_err(fail)?;
            let sock = Sock::new(socket, engine).map_err(fail)?;
            let (res, _) = sock.connect(addr).await;
            if super::stream::cancelled_by_the_kernel(&res, &mut cancels) {
                if sock.socket.peer_addr().is_ok() {
                    break sock;
                }
                continue;
            }
            res.map_err(fail)?;
            break sock;
        };
        Ok(UnixStream::new(StreamCore::new(sock, peer)))
    }

    /// A stream of `stream`, a connected socket (by std, one end of
    /// `UnixStream::pair`, or handed over by another program), on the
    /// default engine ([`AsyncEngine::current`]), as tokio's `from_std`.
    /// Bytes already received and waiting in the socket are the first
    /// reads'.
    ///
    /// Any mode will do, as for
    /// [`TcpStream::from_std`](super::TcpStream::from_std). A descriptor
    /// given by number becomes a `std::os::unix::net::UnixStream` through
    /// [`OwnedFd`](std::os::fd::OwnedFd): ownership is taken, never a raw
    /// number.
    ///
    /// # Errors
    /// A socket that is not a Unix-domain `SOCK_STREAM` one (one end of a
    /// `UnixDatagram` pair, a TCP socket), or that is listening, is
    /// refused with kind [`InvalidInput`](io::ErrorKind::InvalidInput),
    /// the message naming `UnixStream::from_std` and the type, family or
    /// state found; the kernel's error asking them (a descriptor that is
    /// no socket) or making it non-blocking; or that the default engine
    /// cannot start. A socket that is not connected gets the kernel's
    /// `ENOTCONN` from its first read or write.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use std::io::Write;
    /// use blockio::net::UnixStream;
    ///
    /// let (ours, mut theirs) = std::os::unix::net::UnixStream::pair()?;
    /// theirs.write_all(b"sent before")?;
    /// let stream = UnixStream::from_std(ours)?;
    /// let (n, buf) = stream.read(vec![0u8; 11]).await;
    /// assert_eq!(&buf[..n?], b"sent before");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
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
    /// use blockio::net::UnixStream;
    ///
    /// let engine = AsyncEngine::new()?;
    /// let (ours, _theirs) = std::os::unix::net::UnixStream::pair()?;
    /// let stream = UnixStream::from_std_with(&engine, ours)?;
    /// # drop(stream);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_std_with(
        engine: &AsyncEngine,
        stream: std::os::unix::net::UnixStream,
    ) -> io::Result<UnixStream> {
        let fail = super::os_error;
        let socket = Socket::from(stream);
        super::handed::check(&socket, "UnixStream::from_std", Family::Unix, false)?;
        // The peer's path if it has one, as `Debug` and errors name it.
        let peer = match socket
            .peer_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        {
            Some(path) => path.display().to_string(),
            None => "an unnamed peer".to_string(),
        };
        let sock = Sock::new(socket, engine).map_err(fail)?;
        Ok(UnixStream::new(StreamCore::new(sock, peer)))
    }

    /// [`connect`](Self::connect), giving up after `limit` with `ETIMEDOUT`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and the timeout. A zero `limit` is
    /// refused with kind [`InvalidInput`](io::ErrorKind::InvalidInput),
    /// as by std.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use std::time::Duration;
    /// use blockio::net::UnixStream;
    ///
    /// let path = dir.path().join("app.sock");
    /// let _server = std::os::unix::net::UnixListener::bind(&path)?;
    /// let stream = UnixStream::connect_timeout(&path, Duration::from_secs(5)).await?;
    /// # drop(stream);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect_timeout(
        path: impl AsRef<Path>,
        limit: Duration,
    ) -> io::Result<UnixStream> {
        check_limit(limit)?;
        Self::connect_timeout_with(&AsyncEngine::current()?, path, limit).await
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
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use std::time::Duration;
    /// use blockio::aio::AsyncEngine;
    /// use blockio::net::UnixStream;
    ///
    /// let path = dir.path().join("app.sock");
    /// let _server = std::os::unix::net::UnixListener::bind(&path)?;
    /// let engine = AsyncEngine::new()?;
    /// let stream = UnixStream::connect_timeout_with(&engine, &path, Duration::from_secs(5)).await?;
    /// # drop(stream);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn connect_timeout_with(
        engine: &AsyncEngine,
        path: impl AsRef<Path>,
        limit: Duration,
    ) -> io::Result<UnixStream> {
        check_limit(limit)?;
        let path = path.as_ref();
        with_limit(Self::connect_with(engine, path), limit)
            .await
            .unwrap_or_else(|| Err(connect_timed_out()))
    }

    /// The socket, for options this type does not wrap (`socket2`'s API).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    ///
    /// use blockio::net::UnixStream;
    ///
    /// let path = dir.path().join("app.sock");
    /// let _server = std::os::unix::net::UnixListener::bind(&path)?;
    /// let stream = UnixStream::connect(&path).await?;
    /// stream.socket().set_send_buffer_size(64 << 10)?;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn socket(&self) -> &Socket {
        &self.core.sock.socket
    }
}

descriptors!(UnixStream, UnixListener);

impl fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixStream")
            .field("peer", &self.core.peer)
            .finish()
    }
}
