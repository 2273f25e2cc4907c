//! An accept storm under a low descriptor limit (its own test binary: the
//! limit is the whole process's). `EMFILE` is reported, the listener goes
//! on, every connection is accepted once descriptors are free, and nothing
//! leaks when the engine goes.

use std::io::Write;
use std::process::{Command, Stdio};

use blockio::aio::AsyncEngine;
use blockio::net::TcpListener;
use futures_core::Stream;

mod common;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Polls `incoming` once as a `Stream`.
async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

#[test]
fn an_accept_storm_past_the_descriptor_limit_recovers() {
    const CONNS: usize = 300;
    let before = open_fds();
    {
        let engine = AsyncEngine::builder().queue_depth(64).build().unwrap();
        let listener =
            futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        // The clients live in another process, which holds the connections
        // open until its stdin closes.
        let script = format!(
            "import socket,sys\ncs=[socket.create_connection(('127.0.0.1',{}))for _ in range({CONNS})]\nprint('up',flush=True)\nsys.stdin.read()\n",
            addr.port()
        );
        let mut clients = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        // Room for 40 more descriptors than are open now.
        common::set_fd_limit((open_fds() + 40) as u64);
        let (mut accepted, mut emfile, mut held) = (0usize, 0usize, Vec::new());
        let mut incoming = listener.incoming();
        futures::executor::block_on(async {
            while accepted < CONNS {
                match next(&mut incoming).await.expect("incoming never ends") {
                    Ok((stream, _)) => {
                        accepted += 1;
                        held.push(stream);
                    }
                    Err(e) => {
                        assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                        assert_eq!(blockio::errno(&e), Some(libc::EMFILE), "{e}");
                        emfile += 1;
                        // Free descriptors: the listener must go on.
                        held.clear();
                    }
                }
            }
        });
        assert!(
            emfile > 0,
            "the limit was never reached: the test proved nothing"
        );
        common::set_fd_limit(4096);
        drop(held);
        clients.stdin.take().unwrap().write_all(b"done").unwrap();
        assert!(clients.wait().unwrap().success());
        drop(incoming);
        drop(listener);
        drop(engine);
    }
    // The driver's threads close their descriptors as they exit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while open_fds() > before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(open_fds(), before, "descriptors leaked");
}
