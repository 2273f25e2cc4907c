//! Shutting down with connections live: a runtime dropped while its tasks
//! wait in reads, multishot receives and writes, with a multishot accept
//! armed that has taken connections nobody took yet, then the engine
//! dropped. Every descriptor is closed (counted in `/proc/self/fd`; its
//! own test binary, so no other test opens descriptors meanwhile).

use std::io::Write;
use std::time::{Duration, Instant};

use blockio::aio::AsyncEngine;
use blockio::net::TcpListenerOptions;

mod common;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn dropping_everything_with_operations_live_leaks_no_descriptor() {
    let before = open_fds();
    let peers = {
        let engine = AsyncEngine::new().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let options = TcpListenerOptions::default().multishot_accept(true);
        let listener =
            futures::executor::block_on(options.bind_with(&engine, "127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peers = Vec::new();
        for _ in 0..20 {
            peers.push(std::net::TcpStream::connect(addr).unwrap());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let mut incoming = listener.incoming();
            for i in 0..20 {
                let (s, _) = incoming.next().await.unwrap();
                tokio::spawn(async move {
                    if i % 3 == 0 {
                        // A read that waits forever (the peer sends nothing).
                        let _ = s.read(vec![0u8; 4096]).await;
                    } else if i % 3 == 1 {
                        // A multishot receive armed forever.
                        let mut r = s.recv_stream();
                        let _ = r.next().await;
                    } else {
                        // Writes until the peer's window is full, then waits.
                        loop {
                            if s.write_all(vec![7u8; 1 << 20]).await.0.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
            tx.send(()).unwrap();
            // The multishot accept stays armed; this task never takes
            // the connections it accepts from now on.
            std::future::pending::<()>().await;
            drop(incoming);
        });
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        for _ in 0..5 {
            peers.push(std::net::TcpStream::connect(addr).unwrap());
        }
        if engine.backend() == blockio::Backend::IoUring {
            // The armed multishot accept has taken them (the thread pool
            // arms none: they wait in the listener's queue).
            common::wait_until("the multishot accept takes the connections", || {
                common::accept_queue(addr.port()) == 0
            });
        }
        drop(rt);
        drop(engine);
        peers
    };
    // The peers see the connections end.
    for mut p in peers {
        p.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = p.write_all(b"x");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_fds() > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(open_fds(), before, "descriptors leaked");
}
