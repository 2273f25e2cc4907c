//! What tokio programs ported to `blockio::net` rely on, as tokio's own
//! sockets give it: a connection whose peer reset before it was accepted
//! is still accepted (by `accept()`, `incoming()` and a multishot
//! accept), with the peer's address; a runtime dropped or shut down while
//! a task is inside a trait write returns, and every byte the write
//! accepted reaches the peer, then its end.

use std::future::Future;
use std::io::Read;
use std::net::{SocketAddr, TcpStream as StdStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use blockio::net::{TcpListener, TcpListenerOptions};

/// A hang guard, far beyond what any step takes.
const GUARD: Duration = Duration::from_secs(30);

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

/// How a test ends its runtime.
enum End {
    Drop,
    ShutdownTimeout,
}

/// On `rt`: a stream accepted from a std peer that does not read, and a
/// task writing 64 MiB to it through `AsyncWriteExt::write`, counting the
/// bytes each write accepts; returns once a write is pending (the
/// socket's buffer full). Then the runtime is
/// ended as `end` says, on a thread of its own: it must return, and the
/// peer must then read every byte the writes accepted, then the end of
/// the stream. The write left pending had queued what the socket
/// refused (up to 256 KiB) and started its send, which goes on: those
/// bytes may follow, and nothing else.
fn runtime_ends_inside_a_write(rt: tokio::runtime::Runtime, end: End) {
    use tokio::io::AsyncWriteExt;
    let accepted = Arc::new(AtomicUsize::new(0));
    let pending = Arc::new(tokio::sync::Notify::new());
    let (counted, noted) = (accepted.clone(), pending.clone());
    let mut peer = rt.block_on(async move {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = StdStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        tokio::spawn(async move {
            let buf = vec![7u8; 1 << 20];
            for _ in 0..64 {
                let mut write = std::pin::pin!(AsyncWriteExt::write(&mut s, &buf));
                let n = std::future::poll_fn(|cx| {
                    let r = write.as_mut().poll(cx);
                    if r.is_pending() {
                        noted.notify_one();
                    }
                    r
                })
                .await
                .unwrap();
                counted.fetch_add(n, Ordering::SeqCst);
            }
        });
        pending.notified().await;
        peer
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        match end {
            End::Drop => drop(rt),
            End::ShutdownTimeout => rt.shutdown_timeout(Duration::from_millis(100)),
        }
        tx.send(()).unwrap();
    });
    rx.recv_timeout(GUARD)
        .expect("the runtime's drop returns with a task inside a write");
    let accepted = accepted.load(Ordering::SeqCst);
    assert!(accepted > 0, "the writes accepted bytes before one waited");
    peer.set_read_timeout(Some(GUARD)).unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got)
        .expect("every accepted byte, then the end of the stream");
    assert!(
        (accepted..=accepted + (256 << 10)).contains(&got.len()),
        "the peer read {} bytes; the writes accepted {accepted}",
        got.len()
    );
    assert!(got.iter().all(|&b| b == 7));
}

/// As `#[tokio::test]` ends: a current-thread runtime dropped.
#[test]
fn current_thread_runtime_dropped_inside_a_write() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime_ends_inside_a_write(rt, End::Drop);
}

#[test]
fn multi_thread_runtime_dropped_inside_a_write() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime_ends_inside_a_write(rt, End::Drop);
}

#[test]
fn multi_thread_runtime_shut_down_inside_a_write() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime_ends_inside_a_write(rt, End::ShutdownTimeout);
}

#[test]
fn current_thread_runtime_shut_down_inside_a_write() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime_ends_inside_a_write(rt, End::ShutdownTimeout);
}
