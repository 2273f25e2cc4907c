//! What tokio programs ported to `blockio::net` rely on, as tokio's own
//! sockets give it: a connection whose peer reset before it was accepted
//! is still accepted (by `accept()`, `incoming()` and a multishot
//! accept), with the peer's address.

use std::net::{SocketAddr, TcpStream as StdStream};

use blockio::net::{TcpListener, TcpListenerOptions};

/// Clients that connect to `addr` and reset at once (`SO_LINGER` 0), before
/// the server accepts them, then one that stays; their local addresses,
/// in order, and the one that stays.
fn resetting_clients(addr: SocketAddr, n: usize) -> (Vec<SocketAddr>, StdStream) {
    let mut peers = Vec::new();
    for _ in 0..n {
        let c = StdStream::connect(addr).unwrap();
        socket2::SockRef::from(&c)
            .set_linger(Some(std::time::Duration::ZERO))
            .unwrap();
        peers.push(c.local_addr().unwrap());
        drop(c);
    }
    let stays = StdStream::connect(addr).unwrap();
    peers.push(stays.local_addr().unwrap());
    (peers, stays)
}

/// The peer a multishot accept gives for a client that is gone: its
/// address when the socket still had one, or else the unspecified one.
fn peer_or_unspecified(got: SocketAddr, want: SocketAddr) {
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    assert!(
        got == want || got == unspecified,
        "peer {got}, client {want}"
    );
}

#[test]
fn accept_yields_a_connection_reset_before_it() {
    futures::executor::block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (peers, _stays) = resetting_clients(l.local_addr().unwrap(), 5);
        for want in &peers {
            let (s, peer) = l.accept().await.unwrap();
            assert_eq!(peer, *want);
            assert_eq!(s.peer_addr().unwrap(), *want);
        }
    });
}

#[test]
fn incoming_yields_connections_reset_before_them() {
    futures::executor::block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (peers, _stays) = resetting_clients(l.local_addr().unwrap(), 5);
        let mut incoming = l.incoming();
        for want in &peers {
            let (_, peer) = incoming.next().await.unwrap();
            assert_eq!(peer, *want);
        }
    });
}

#[test]
fn multishot_incoming_yields_connections_reset_before_them() {
    futures::executor::block_on(async {
        let l = TcpListenerOptions::default()
            .multishot_accept(true)
            .bind("127.0.0.1:0")
            .await
            .unwrap();
        let (peers, _stays) = resetting_clients(l.local_addr().unwrap(), 5);
        let mut incoming = l.incoming();
        for want in &peers[..5] {
            let (_, peer) = incoming.next().await.unwrap();
            peer_or_unspecified(peer, *want);
        }
        let (_, peer) = incoming.next().await.unwrap();
        assert_eq!(peer, peers[5], "the client that stays");
    });
}
