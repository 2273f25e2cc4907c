//! Where the peers of the socket scenarios are: on loopback by default, or
//! across a real link when `scripts/net-link` runs the tests.
//!
//! With [`PEER_NETNS`] set (with [`LOCAL_ADDR`] and [`PEER_ADDR`]), the
//! servers under test bind the link's local address, in the test
//! process's own network namespace, and every socket of a peer (its
//! connects and its listeners) is made by a thread that has entered the
//! peer's namespace: a socket keeps the namespace it was made in, so the
//! peer then uses it from any thread, and every byte between the two
//! crosses the veth pair, with its MTU, shaping and losses. Without the
//! variables, both ends are on 127.0.0.1. The scenarios call only this
//! module to choose, so each is written once for both.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The network namespace the peers' sockets are made in (a name under
/// `/run/netns`, as `ip netns add` makes).
pub const PEER_NETNS: &str = "BLOCKIO_TEST_LINK_PEER_NETNS";
/// The link's address in the test process's namespace: what servers bind.
pub const LOCAL_ADDR: &str = "BLOCKIO_TEST_LINK_LOCAL_ADDR";
/// The link's address in the peer's namespace: what peers' listeners bind.
pub const PEER_ADDR: &str = "BLOCKIO_TEST_LINK_PEER_ADDR";

/// A link between the test process's namespace and the peer's.
struct Link {
    netns: PathBuf,
    local: IpAddr,
    peer: IpAddr,
}

/// The link the environment names, or `None` for loopback. Panics, naming
/// the variable, when the environment names one that is not there: a run
/// meant to cross a link never quietly falls back to loopback.
fn link() -> Option<&'static Link> {
    static LINK: OnceLock<Option<Link>> = OnceLock::new();
    LINK.get_or_init(|| {
        let name = std::env::var_os(PEER_NETNS)?;
        let name = name.to_string_lossy();
        let addr = |var: &str| -> IpAddr {
            let value = std::env::var(var).unwrap_or_else(|_| {
                panic!("{PEER_NETNS}={name} is set, so {var} must name an IP address")
            });
            value
                .parse()
                .unwrap_or_else(|e| panic!("{var}={value:?} is not an IP address: {e}"))
        };
        let (local, peer) = (addr(LOCAL_ADDR), addr(PEER_ADDR));
        let netns = ["/run/netns", "/var/run/netns"]
            .iter()
            .map(|dir| PathBuf::from(dir).join(&*name))
            .find(|p| p.exists())
            .unwrap_or_else(|| {
                panic!(
                    "{PEER_NETNS}={name}: no network namespace of that name \
                     (/run/netns/{name} is missing); scripts/net-link creates it"
                )
            });
        // The local end must be in this process's namespace, or servers
        // could not bind it.
        if let Err(e) = TcpListener::bind((local, 0)) {
            panic!(
                "{LOCAL_ADDR}={local}: not an address of this process's network namespace ({e}); \
                 run the tests in the link's other namespace, as scripts/net-link does"
            );
        }
        Some(Link { netns, local, peer })
    })
    .as_ref()
}

/// The address servers under test bind (port 0 for any).
pub fn server_ip() -> IpAddr {
    link().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |l| l.local)
}

/// The address peers' listeners bind.
pub fn peer_ip() -> IpAddr {
    link().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |l| l.peer)
}

/// Runs `make` where the peers' sockets are made: on this thread for
/// loopback, or on a thread of its own in the peer's namespace.
pub fn on_peer_side<T: Send>(make: impl FnOnce() -> T + Send) -> T {
    let Some(link) = link() else {
        return make();
    };
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let ns = std::fs::File::open(&link.netns)
                    .unwrap_or_else(|e| panic!("opening {}: {e}", link.netns.display()));
                // SAFETY: `ns` is an open namespace file for the whole call;
                // setns moves only this thread (a fresh one that ends after
                // `make`) into that network namespace, and touches no memory.
                let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                if rc != 0 {
                    panic!(
                        "entering the peer's network namespace {}: {}",
                        link.netns.display(),
                        io::Error::last_os_error()
                    );
                }
                make()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A peer's connection to a server under test.
pub fn connect(addr: SocketAddr) -> TcpStream {
    on_peer_side(|| TcpStream::connect(addr))
        .unwrap_or_else(|e| panic!("a peer connecting to {addr}: {e}"))
}

/// A peer's listener, on any port of [`peer_ip`].
pub fn listen() -> TcpListener {
    let ip = peer_ip();
    on_peer_side(|| TcpListener::bind((ip, 0)))
        .unwrap_or_else(|e| panic!("a peer listening on {ip}: {e}"))
}
