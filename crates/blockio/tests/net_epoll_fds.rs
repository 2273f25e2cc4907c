//! The epoll fallback watches each socket once: a waiting operation opens
//! no descriptor, so idle connections cost one descriptor each, and a
//! process at its descriptor limit keeps serving the connections it has.
//! (Its own test binary: it counts `/proc/self/fd` and lowers
//! `RLIMIT_NOFILE`, which no other test may see.)

use std::io::{Read, Write};
use std::time::Duration;

use blockio::aio::AsyncEngine;
use blockio::net::{TcpListener, TcpStream};
use blockio::BackendChoice;

mod common;
use common::{noting_its_wait, Bounded};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

const CONNS: usize = 100;

#[test]
fn waiting_operations_open_no_descriptors_and_survive_the_limit() {
    let e = AsyncEngine::builder()
        .backend(BackendChoice::ThreadPool)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut peers = Vec::new();
    let mut streams: Vec<TcpStream> = Vec::new();
    for _ in 0..CONNS {
        peers.push(std::net::TcpStream::connect(addr).unwrap().bounded());
        streams.push(rt.block_on(listener.accept()).unwrap().0);
    }
    // Each stream waits in a read, and in a write its peer does not take.
    let armed = open_fds();
    common::set_fd_limit(armed as u64 + 2);
    let (tx, rx) = std::sync::mpsc::channel();
    let (waits_tx, waits) = std::sync::mpsc::channel();
    for (i, s) in streams.into_iter().enumerate() {
        rt.spawn(read_and_write(i, s, tx.clone(), waits_tx.clone()));
    }
    drop((tx, waits_tx));
    // Every read and write has reached its wait (a wait that opened a
    // descriptor would be seen, or fail, by now).
    for n in 0..2 * CONNS {
        waits
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{n} of {} operations reached their wait: {e}", 2 * CONNS));
    }
    common::set_fd_limit(4096);
    let waiting = open_fds();
    assert!(
        waiting <= armed + 2,
        "{CONNS} connections waiting opened {} descriptors",
        waiting - armed
    );
    // Every peer then sends, and drains what was written to it.
    let drains: Vec<_> = peers
        .into_iter()
        .enumerate()
        .map(|(i, p)| std::thread::spawn(move || send_and_drain(i, p)))
        .collect();
    for _ in 0..CONNS {
        let (i, got, wrote) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(got.unwrap(), format!("hello {i}").as_bytes(), "stream {i}");
        wrote.unwrap_or_else(|e| panic!("stream {i}: {e}"));
    }
    for d in drains {
        assert_eq!(d.join().unwrap(), 8 << 20);
    }
}

/// What stream `i` does: a read of up to 16 bytes and, at once, a write of
/// 8 MiB of `i`, more than its peer's window holds; each sends on `waits`
/// when it first waits. Then the read's bytes and the write's outcome go
/// on `done`.
async fn read_and_write(
    i: usize,
    s: TcpStream,
    done: std::sync::mpsc::Sender<(usize, std::io::Result<Vec<u8>>, std::io::Result<()>)>,
    waits: std::sync::mpsc::Sender<()>,
) {
    let s = std::sync::Arc::new(s);
    let writer = {
        let (s, waits) = (s.clone(), waits.clone());
        tokio::spawn(async move {
            // Fills the peer's window, then waits for room.
            let (res, _) =
                noting_its_wait(s.write_all(vec![i as u8; 8 << 20]), &mut Some(waits)).await;
            res
        })
    };
    let (res, buf) = noting_its_wait(s.read(vec![0u8; 16]), &mut Some(waits)).await;
    let got = res.map(|n| buf[..n].to_vec());
    let wrote = writer.await.unwrap();
    done.send((i, got, wrote)).unwrap();
}

/// Peer `i` sends `hello {i}`, then reads the 8 MiB of `i` written to it;
/// how many bytes it read.
fn send_and_drain(i: usize, mut p: std::net::TcpStream) -> usize {
    p.write_all(format!("hello {i}").as_bytes()).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    while total < 8 << 20 {
        let n = p.read(&mut buf).unwrap();
        assert!(n > 0);
        assert!(buf[..n].iter().all(|&b| b == i as u8));
        total += n;
    }
    total
}
