//! Addresses to bind and connect to, resolved without blocking the
//! executor: [`ToSocketAddrs`] (the types tokio's trait of that name
//! takes) and [`lookup_host`].
//!
//! Socket addresses, and strings that parse as one, resolve at once on
//! the calling thread. A host name is looked up (`getaddrinfo`, which
//! blocks) on a thread started for that look-up, as tokio's
//! `spawn_blocking` does, and the future waits for its answer: the
//! executor's thread never blocks in a name look-up.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// What an address argument stands for: addresses already, or a name to
/// look up.
#[derive(Debug)]
pub enum Resolve {
    /// Resolved without a look-up.
    Ready(Vec<SocketAddr>),
    /// `host:port`, to look up.
    HostPort(String),
    /// A host and a port, to look up.
    Host(String, u16),
}

mod sealed {
    /// The conversion behind [`ToSocketAddrs`](super::ToSocketAddrs);
    /// not implementable outside the crate, as tokio's.
    pub trait Sealed {
        /// The addresses, or the name to look up.
        fn resolve(&self) -> super::Resolve;
    }
}

/// Something [`TcpListener::bind`](super::TcpListener::bind) and
/// [`TcpStream::connect`](super::TcpStream::connect) resolve to socket
/// addresses: the types tokio's `ToSocketAddrs` takes (`SocketAddr`,
/// `(IpAddr, u16)`, `&str` such as `"localhost:6379"`, `(&str, u16)`,
/// `String`, `&[SocketAddr]`, and references to them). Host names are
/// looked up off the executor's thread (see [`lookup_host`]).
///
/// Sealed: implemented for those types only.
pub trait ToSocketAddrs: sealed::Sealed {}

impl<T: sealed::Sealed + ?Sized> ToSocketAddrs for T {}

impl sealed::Sealed for SocketAddr {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(vec![*self])
    }
}

impl sealed::Sealed for SocketAddrV4 {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(vec![SocketAddr::V4(*self)])
    }
}

impl sealed::Sealed for SocketAddrV6 {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(vec![SocketAddr::V6(*self)])
    }
}

impl sealed::Sealed for (IpAddr, u16) {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(vec![SocketAddr::from(*self)])
    }
}

impl sealed::Sealed for (Ipv4Addr, u16) {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(vec![SocketAddr::from(*self)])
    }
}

impl sealed::Sealed for (Ipv6Addr, u16) {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(vec![SocketAddr::from(*self)])
    }
}

impl sealed::Sealed for [SocketAddr] {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(self.to_vec())
    }
}

impl<const N: usize> sealed::Sealed for [SocketAddr; N] {
    fn resolve(&self) -> Resolve {
        Resolve::Ready(self.to_vec())
    }
}

impl sealed::Sealed for str {
    fn resolve(&self) -> Resolve {
        match self.parse::<SocketAddr>() {
            Ok(addr) => Resolve::Ready(vec![addr]),
            Err(_) => Resolve::HostPort(self.to_string()),
        }
    }
}

impl sealed::Sealed for String {
    fn resolve(&self) -> Resolve {
        self.as_str().resolve()
    }
}

impl sealed::Sealed for (&str, u16) {
    fn resolve(&self) -> Resolve {
        match self.0.parse::<IpAddr>() {
            Ok(ip) => Resolve::Ready(vec![SocketAddr::new(ip, self.1)]),
            Err(_) => Resolve::Host(self.0.to_string(), self.1),
        }
    }
}

impl sealed::Sealed for (String, u16) {
    fn resolve(&self) -> Resolve {
        (self.0.as_str(), self.1).resolve()
    }
}

impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {
    fn resolve(&self) -> Resolve {
        (**self).resolve()
    }
}

/// The addresses `host` resolves to, as tokio's `lookup_host`: at once for
/// a socket address (or a string that parses as one), else by a look-up
/// (`getaddrinfo`) on a thread of its own, which the returned future waits
/// for without blocking the executor.
///
/// # Errors
/// The look-up's error (naming the host), or a thread could not be
/// started for it.
///
/// # Examples
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// # futures::executor::block_on(async {
/// // A socket address resolves at once; a host name is looked up off the
/// // executor's thread.
/// let addrs: Vec<_> = blockio::net::lookup_host("127.0.0.1:8080").await?.collect();
/// assert_eq!(addrs, ["127.0.0.1:8080".parse().unwrap()]);
/// # Ok(())
/// # })
/// # }
/// ```
pub async fn lookup_host(host: impl ToSocketAddrs) -> io::Result<impl Iterator<Item = SocketAddr>> {
    Ok(resolve(&host).await?.into_iter())
}

/// Every address `addr` resolves to, in order.
pub(crate) async fn resolve<A: ToSocketAddrs + ?Sized>(addr: &A) -> io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs as _;
    match addr.resolve() {
        Resolve::Ready(addrs) => Ok(addrs),
        Resolve::HostPort(name) => {
            let shown = name.clone();
            off_thread(move || name.to_socket_addrs().map(Iterator::collect))
                .await
                .map_err(|e| named(e, &shown))
        }
        Resolve::Host(host, port) => {
            let shown = format!("{host}:{port}");
            off_thread(move || {
                (host.as_str(), port)
                    .to_socket_addrs()
                    .map(Iterator::collect)
            })
            .await
            .map_err(|e| named(e, &shown))
        }
    }
}

/// Every address `addr` resolves to, in order; at least one, else an
/// error saying it resolved to nothing.
pub(crate) async fn resolve_some<A: ToSocketAddrs + ?Sized>(
    addr: &A,
) -> io::Result<Vec<SocketAddr>> {
    let addrs = resolve(addr).await?;
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        ));
    }
    Ok(addrs)
}

/// A look-up's error, naming what was looked up.
fn named(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("cannot resolve {what}: {err}"))
}

/// The answer of a blocking call made on a thread of its own, and the
/// task waiting for it.
type Slot<T> = Arc<Mutex<(Option<T>, Option<Waker>)>>;

/// Runs `call` on a new thread; the future completes with its result.
fn off_thread<T: Send + 'static>(
    call: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> impl Future<Output = io::Result<T>> {
    let slot: Slot<io::Result<T>> = Arc::new(Mutex::new((None, None)));
    let theirs = slot.clone();
    let started = crate::arenas::spawn("blockio-lookup", None, move || {
        let res = call();
        let waker = {
            let mut s = theirs.lock().unwrap_or_else(|e| e.into_inner());
            s.0 = Some(res);
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    });
    Answer {
        slot,
        failed: started.err(),
    }
}

/// The future of [`off_thread`].
struct Answer<T> {
    slot: Slot<io::Result<T>>,
    /// The thread could not be started.
    failed: Option<io::Error>,
}

impl<T> Future for Answer<T> {
    type Output = io::Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(e));
        }
        let mut s = this.slot.lock().unwrap_or_else(|e| e.into_inner());
        match s.0.take() {
            Some(res) => Poll::Ready(res),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
