//! A server at its descriptor limit (its own test binary: the limit is
//! the whole process's). What a TCP listener's accepts wait in is made at
//! its bind: a bind that cannot make it fails there, naming what it could
//! not make, instead of listening while every accept fails; once
//! descriptors are free, the next bind works and accepts.

use std::fs::File;
use std::io::{Read, Write};

use blockio::aio::AsyncEngine;
use blockio::net::TcpListener;
use blockio::Backend;

/// Sets the soft limit on descriptors to `n`.
fn set_fd_limit(n: u64) {
    // SAFETY: zeroed is a valid rlimit; getrlimit and setrlimit read and
    // write only the struct passed.
    unsafe {
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = n.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
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

#[test]
fn a_listener_that_could_never_accept_fails_at_bind_and_recovers() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The runtime's engine (its ring, on io_uring) is made first.
        let backend = AsyncEngine::current().unwrap().backend();
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        set_fd_limit(open + 16);
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
}
