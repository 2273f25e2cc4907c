//! What the default engine costs in descriptors beside tokio's own, which
//! a server at its descriptor limit pays in connections it cannot take
//! (its own test binary: descriptors are counted process-wide). Each one
//! is named in the failure message, from `/proc/self/fd`.

use std::io::{Read, Write};

use blockio::net::TcpListener;
use blockio::Backend;

mod common;

/// A server on the default engine, on a current-thread tokio runtime,
/// with one connection whose read waited in the engine (so that whatever
/// the engine opens for a waiting socket is open): beside the runtime's
/// own descriptors and the three sockets (listener, client, server's
/// end), the engine holds its ring (io_uring), and one epoll set with
/// one eventfd, which wakes the set's thread to stop; on the thread pool,
/// the runtime whose task waits reads a set of its own (one descriptor,
/// no eventfd: tokio's reactor costs two per runtime), whose own
/// descriptor its reactor registers, not a duplicate.
#[test]
fn the_default_engine_costs_its_sets_and_its_ring() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = common::named_fds();
    let (backend, during) = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // Only a hang makes the pong wait a minute: it fails the test.
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (n, buf) = s.read(vec![0u8; 4]).await;
            assert_eq!(&buf[..n.unwrap()], b"ping");
            s.write_all(b"pong".to_vec()).await.0.unwrap();
            (s, listener)
        });
        // The server's read waits (nothing sent yet) before the ping.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let during = common::named_fds();
        client.write_all(b"ping").unwrap();
        let (s, listener) = server.await.unwrap();
        let mut pong = [0u8; 4];
        client.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"pong");
        let backend = blockio::aio::AsyncEngine::current().unwrap().backend();
        drop((s, listener, client));
        (backend, during)
    });
    let added: Vec<&String> = during.iter().filter(|fd| !before.contains(fd)).collect();
    let sockets = added.iter().filter(|fd| fd.contains("socket:")).count();
    assert_eq!(sockets, 3, "listener, client, server's end: {added:#?}");
    let engine = added.len() - sockets;
    let expected = match backend {
        // The ring; the epoll set the listener's accepts wait in, and its
        // eventfd.
        Backend::IoUring => 3,
        // The readiness thread's epoll set and its eventfd; the
        // runtime's set, which the sockets wait in.
        Backend::ThreadPool => 3,
    };
    assert_eq!(
        engine, expected,
        "the default engine on {backend} holds more descriptors than it needs: {added:#?}"
    );
}
