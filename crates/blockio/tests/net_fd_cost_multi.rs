//! What the default engine costs in descriptors beside tokio's own on a
//! multi-thread runtime, whose waits (the bind's and the tasks') all go
//! to the runtime's own epoll set, read by its reactor (its own test
//! binary: descriptors are counted process-wide, and no runtime before
//! it leaves anything closing). Each one is named in the failure
//! message, from `/proc/self/fd`.

use std::io::{Read, Write};

use blockio::net::TcpListener;
use blockio::Backend;

mod common;

/// On io_uring no readiness thread is started, so no eventfd to stop it
/// and no set of its own: the ring and the runtime's set. The thread
/// pool makes its thread's set and eventfd with its engine, and the
/// runtime's set at the read's wait.
#[test]
fn on_a_multi_thread_runtime_the_engine_costs_its_ring_and_one_set() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (backend, engine) = engine_fds(&rt);
    let expected = match backend {
        // The ring; the runtime's epoll set.
        Backend::IoUring => 2,
        // The readiness thread's epoll set and its eventfd, made with the
        // engine; the runtime's set, made at the first wait in it (the
        // read's).
        Backend::ThreadPool => 3,
    };
    assert_eq!(
        engine.len(),
        expected,
        "on a multi-thread runtime the default engine on {backend} holds more descriptors \
         than it needs: {engine:#?}"
    );
}

/// The backend of `rt`'s default engine, and the descriptors it holds
/// (each named) while a server's read waits in it.
fn engine_fds(rt: &tokio::runtime::Runtime) -> (Backend, Vec<String>) {
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
        // Until the runtime has a set of the engine's: on io_uring the
        // bind made it; on the thread pool the server's read, waiting in
        // it, does (nothing is sent yet), whenever a worker runs the task.
        let engine = blockio::aio::AsyncEngine::current().unwrap();
        let guard = std::time::Instant::now();
        while !engine
            .readiness_counts()
            .is_some_and(|c| c.runtime_sets >= 1)
        {
            assert!(
                guard.elapsed() < std::time::Duration::from_secs(60),
                "the runtime never got a set: {:?}",
                engine.readiness_counts()
            );
            tokio::task::yield_now().await;
        }
        client.write_all(b"ping").unwrap();
        let (s, listener) = server.await.unwrap();
        let mut pong = [0u8; 4];
        client.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"pong");
        // Everything still open: what the engine made for the waits too.
        let during = common::named_fds();
        let backend = blockio::aio::AsyncEngine::current().unwrap().backend();
        drop((s, listener, client));
        (backend, during)
    });
    let added: Vec<&String> = during.iter().filter(|fd| !before.contains(fd)).collect();
    let sockets = added.iter().filter(|fd| fd.contains("socket:")).count();
    assert_eq!(sockets, 3, "listener, client, server's end: {added:#?}");
    let engine = added
        .into_iter()
        .filter(|fd| !fd.contains("socket:"))
        .cloned()
        .collect();
    (backend, engine)
}
