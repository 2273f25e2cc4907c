//! A server at its descriptor limit (its own test binary: the limit is
//! the whole process's, so the tests take turns). What a TCP listener's
//! accepts wait in is made at its bind: a bind that cannot make it fails
//! there, naming what it could not make, instead of listening while every
//! accept fails; once descriptors are free, the next bind works and
//! accepts. An accept from elsewhere, which needs a set the bind did not
//! make, fails with the same named error, and works once descriptors are
//! free.

use std::fs::File;
use std::io::{Read, Write};

use blockio::aio::AsyncEngine;
use blockio::net::TcpListener;
use blockio::Backend;

mod common;

/// Held by each test: the limit is the process's.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The soft limit on descriptors.
fn fd_limit() -> u64 {
    // SAFETY: zeroed is a valid rlimit; getrlimit writes only the struct
    // passed.
    unsafe {
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur
    }
}

/// The descriptors open now.
fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// Opens `/dev/null` until the limit refuses: every descriptor left.
fn hold_every_descriptor() -> Vec<File> {
    let mut held = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                return held;
            }
        }
    }
}

/// A new engine, a one-worker multi-thread runtime, and a listener of the
/// engine bound on it (its accepts' set the runtime's own).
fn bound_on_one_worker() -> (AsyncEngine, tokio::runtime::Runtime, TcpListener) {
    let engine = AsyncEngine::new().unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = multi
        .block_on(TcpListener::bind_with(&engine, "127.0.0.1:0"))
        .unwrap();
    (engine, multi, listener)
}

#[test]
fn a_listener_that_could_never_accept_fails_at_bind_and_recovers() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let limit = fd_limit();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The runtime's engine (its ring, on io_uring) is made first.
        let backend = AsyncEngine::current().unwrap().backend();
        common::set_fd_limit(open_fds() + 16);
        let mut held = hold_every_descriptor();
        // Room for the socket alone, then for the socket and the set.
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let named = [
            "cannot make blockio's readiness set (epoll)",
            "cannot make blockio's readiness set's wake-up descriptor (eventfd)",
        ];
        for what in named {
            drop(held.pop());
            let bound = TcpListener::bind("127.0.0.1:0").await;
            match backend {
                Backend::IoUring => {
                    let e = bound.expect_err("a bind with no descriptor for the set");
                    let msg = e.to_string();
                    assert!(msg.starts_with("accepting on 127.0.0.1:"), "{msg}");
                    assert!(msg.contains(what), "{msg}");
                    assert!(msg.contains(&emfile.to_string()), "{msg}");
                    assert_eq!(e.kind(), emfile.kind(), "{msg}");
                    assert_eq!(blockio::errno(&e), Some(libc::EMFILE), "{msg}");
                }
                // The pool's sets were made with its engine: the listener
                // needs its socket alone.
                Backend::ThreadPool => drop(bound.expect("a bind with room for its socket")),
            }
        }
        // Descriptors freed: the next bind works, and accepts.
        drop(held);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.write_all(b"ping").unwrap();
            let mut pong = [0u8; 4];
            c.read_exact(&mut pong).unwrap();
            pong
        });
        let (s, _) = listener.accept().await.unwrap();
        let (n, buf) = s.read(vec![0u8; 4]).await;
        assert_eq!(&buf[..n.unwrap()], b"ping");
        s.write_all(b"pong".to_vec()).await.0.unwrap();
        assert_eq!(&client.join().unwrap(), b"pong");
    });
    common::set_fd_limit(limit);
}

/// A listener bound on a multi-thread runtime, whose set is that
/// runtime's, accepting from a thread with no runtime, whose waits go to
/// the engine's readiness thread's set (on io_uring, made at the first
/// wait that needs it): with no descriptor for that set the accept fails,
/// naming it; once descriptors are free, the same listener's next accept
/// takes the waiting connection. On the thread pool the set was made with
/// the engine: the accept needs nothing.
#[test]
fn an_accept_that_cannot_make_its_set_names_it_and_the_next_one_works() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let limit = fd_limit();
    let (engine, _multi, listener) = bound_on_one_worker();
    let addr = listener.local_addr().unwrap();
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    common::set_fd_limit(open_fds() + 16);
    let mut held = hold_every_descriptor();
    // One free: room for the connection, not for the set and its eventfd.
    drop(held.pop());
    let first = futures::executor::block_on(listener.accept());
    let s = match engine.backend() {
        Backend::IoUring => {
            let e = first.expect_err("an accept with no descriptor for its set");
            let msg = e.to_string();
            let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
            assert!(msg.starts_with(&format!("accepting on {addr}: ")), "{msg}");
            assert!(msg.contains("cannot make blockio's readiness set"), "{msg}");
            assert!(msg.contains(&emfile.to_string()), "{msg}");
            assert_eq!(blockio::errno(&e), Some(libc::EMFILE), "{msg}");
            // Nothing of the failed attempt is kept open: the descriptor
            // freed is free again.
            held.push(File::open("/dev/null").expect("the descriptor freed"));
            drop(held);
            let (s, peer) = futures::executor::block_on(listener.accept()).unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            s
        }
        // The set was made with the engine: the connection's descriptor
        // is all the accept needs.
        Backend::ThreadPool => {
            let (s, peer) = first.expect("an accept with room for its connection");
            assert_eq!(peer, client.local_addr().unwrap());
            drop(held);
            s
        }
    };
    client.write_all(b"ping").unwrap();
    let (n, buf) = futures::executor::block_on(s.read(vec![0u8; 4]));
    assert_eq!(&buf[..n.unwrap()], b"ping");
    common::set_fd_limit(limit);
}

/// An accept waiting in a multi-thread runtime's set when that runtime is
/// dropped moves to the engine's readiness thread's set (made then, on
/// io_uring); with no descriptor for it, the accept fails with the
/// kernel's `EMFILE`, not a bare `EIO`, and the listener's next accept
/// takes the waiting connection once descriptors are free.
#[test]
fn an_accept_left_by_a_runtime_at_the_limit_fails_with_the_kernels_error() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let limit = fd_limit();
    let (engine, multi, listener) = bound_on_one_worker();
    let addr = listener.local_addr().unwrap();
    let mut accept = Box::pin(listener.accept());
    // Polled once on the runtime: the accept waits in its set.
    multi.block_on(async {
        assert!(futures::poll!(accept.as_mut()).is_pending());
    });
    common::set_fd_limit(open_fds() + 16);
    let held = hold_every_descriptor();
    drop(multi);
    let mut client = std::net::TcpStream::connect(addr);
    drop(held);
    common::set_fd_limit(limit);
    let first = futures::executor::block_on(accept);
    let s = match (engine.backend(), first) {
        (Backend::IoUring, Err(e)) => {
            assert_eq!(blockio::errno(&e), Some(libc::EMFILE), "{e}");
            if client.is_err() {
                client = std::net::TcpStream::connect(addr);
            }
            futures::executor::block_on(listener.accept()).unwrap().0
        }
        (Backend::ThreadPool, Ok((s, _))) => s,
        (Backend::IoUring, Ok(_)) => panic!("an accept with no descriptor for the set it moves to"),
        (Backend::ThreadPool, Err(e)) => panic!("{e}"),
    };
    client.unwrap().write_all(b"ping").unwrap();
    let (n, buf) = futures::executor::block_on(s.read(vec![0u8; 4]));
    assert_eq!(&buf[..n.unwrap()], b"ping");
}
