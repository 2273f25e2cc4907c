//! A program that writes through `blockio::net` and returns from `main`
//! without a flush loses nothing, as on tokio: a write returns only once
//! its bytes are in the kernel, which sends what the socket holds after
//! the process is gone.
//!
//! And a program whose last runtime is gone keeps no engine of it (on
//! io_uring, no ring): only the process-wide engine of the thread pool
//! (its epoll set and thread) stays, built once.
//!
//! Its own `main` (no test harness), so that the writer is a process
//! like a ported `#[tokio::main]` program: this binary, run again as
//! `child FLAVOR MODE PORT`, connects, writes and returns from `main` on
//! its main thread.
//!
//! Two kinds of writer:
//! - `write_all` of every byte (through the tokio traits, or the
//!   stream's owned `write_all`), to a peer that reads slowly, so that
//!   the writer's last writes find the socket full; the peer counts
//!   every byte to the end of the stream.
//! - writes until the socket is full, to a peer that reads nothing
//!   until the writer has exited: the peer must then get at least every
//!   byte the writes returned. This one does not depend on any pace: a
//!   write that returned bytes not yet in the kernel loses them always.

use std::future::poll_fn;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::Poll;
use std::time::Duration;

/// A bound that only a hang reaches: a peer's read that waits this long
/// fails the test instead of blocking the run.
const HANG: Duration = Duration::from_secs(60);

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Bytes the child writes.
const TOTAL: usize = 8 << 20;
/// Bytes the child writing until the socket is full has: more than the
/// kernel holds for a peer that reads nothing (the sender's buffer grows
/// to `tcp_wmem`'s largest, 4 MiB by default; the receiver's stays at
/// `tcp_rmem`'s initial size, 128 KiB, until it reads).
const UNTIL_FULL: usize = 32 << 20;
/// Bytes per `write_all` call.
const CHUNK: usize = 64 * 1024;
/// Runs of each kind.
const ROUNDS: usize = 2;

/// The byte at `i` of the stream: the peer checks order as well as count.
fn byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// A tokio runtime of `flavor`: "multi_thread", else current-thread.
fn runtime(flavor: &str) -> tokio::runtime::Runtime {
    match flavor {
        "multi_thread" => tokio::runtime::Runtime::new().unwrap(),
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    }
}

/// Connects to the peer at `port`, writes [`TOTAL`] bytes through the
/// tokio traits (or, `mode` "owned", with the stream's owned
/// `write_all`) on a runtime of `flavor`, and returns without a flush.
fn child(flavor: &str, mode: &str, port: u16) {
    let rt = runtime(flavor);
    rt.block_on(async {
        let mut s = blockio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        if mode == "until_full" {
            let data: Vec<u8> = (0..UNTIL_FULL).map(byte).collect();
            let written = write_until_full(&mut s, &data).await;
            println!("written {written}");
            return;
        }
        let data: Vec<u8> = (0..TOTAL).map(byte).collect();
        for chunk in data.chunks(CHUNK) {
            if mode == "owned" {
                s.write_all(chunk.to_vec()).await.0.unwrap();
            } else {
                AsyncWriteExt::write_all(&mut s, chunk).await.unwrap();
            }
        }
    });
}

/// Writes `data` through `poll_write` until the socket is full (a write
/// pending twice in a row, a yield between: the first may be the
/// budget's); the bytes the writes returned.
async fn write_until_full(s: &mut blockio::net::TcpStream, data: &[u8]) -> usize {
    let mut written = 0;
    let mut pending = 0;
    while pending < 2 {
        let step = poll_fn(
            |cx| match Pin::new(&mut *s).poll_write(cx, &data[written..]) {
                Poll::Ready(r) => Poll::Ready(Some(r.unwrap())),
                Poll::Pending => Poll::Ready(None),
            },
        )
        .await;
        match step {
            Some(n) => {
                assert!(n > 0, "a write took no bytes");
                written += n;
                pending = 0;
            }
            None => {
                pending += 1;
                tokio::task::yield_now().await;
            }
        }
        assert!(written < data.len(), "the socket took all {written} bytes");
    }
    written
}

/// Runs the child writing until the socket is full, waits for it to
/// exit, then reads what it sent: at least every byte its writes
/// returned, in order.
fn returned_bytes_arrive(flavor: &str) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child", flavor, "until_full", &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(HANG)).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{flavor}: the child failed: {status}");
    let line = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .expect("the child said how many bytes its writes returned")
        .unwrap();
    let written: usize = line.strip_prefix("written ").unwrap().parse().unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    let expected: Vec<u8> = (0..got.len()).map(byte).collect();
    assert!(got == expected, "{flavor}: the bytes differ");
    assert!(
        got.len() >= written,
        "{flavor}: the child's writes returned {written} bytes, and it exited; the peer got {} ({} lost)",
        got.len(),
        written - got.len()
    );
}

/// Runs the child and reads what it sends: every byte, in order.
fn all_bytes_arrive(flavor: &str, mode: &str) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child", flavor, mode, &port.to_string()])
        .spawn()
        .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(HANG)).unwrap();
    let (mut got, mut buf) = (0usize, vec![0u8; 16 * 1024]);
    loop {
        let n = peer.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        let expected: Vec<u8> = (got..got + n).map(byte).collect();
        assert!(
            buf[..n] == expected[..],
            "{flavor}, {mode}: bytes from {got} differ"
        );
        got += n;
        // A slow reader, slower than the writer even in a debug build
        // (its pace only makes the writer's last writes find the socket
        // full; what is checked is the count at the end of the stream).
        std::thread::sleep(Duration::from_micros(200));
    }
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{flavor}, {mode}: the child failed: {status}"
    );
    assert_eq!(
        got,
        TOTAL,
        "{flavor}, {mode}: every write of the child returned Ok; the peer got {got} of {TOTAL} bytes"
    );
}

/// What `/proc/self/fd` holds, sorted.
fn descriptors() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| !p.starts_with("/proc/"))
        .collect();
    fds.sort();
    fds
}

/// Runs a runtime of `flavor` that connects a stream and exchanges
/// through it, then drops the runtime; the backend its engine had.
fn one_runtime(flavor: &str) -> blockio::Backend {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = runtime(flavor);
    let backend = rt.block_on(async {
        let mut s = blockio::net::TcpStream::connect(addr).await.unwrap();
        AsyncWriteExt::write_all(&mut s, b"hello").await.unwrap();
        blockio::aio::AsyncEngine::current().unwrap().backend()
    });
    drop(rt);
    let (mut peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(HANG)).unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"hello");
    backend
}

/// Once its runtime is gone, nothing of a runtime's engine stays: the
/// descriptors after a second runtime are those after the first (on the
/// thread pool, the process-wide engine's), and on io_uring those before
/// either (no ring is kept).
fn runtimes_gone_keep_nothing() {
    let before = descriptors();
    for flavor in ["current_thread", "multi_thread"] {
        let backend = one_runtime(flavor);
        let first = descriptors();
        one_runtime(flavor);
        assert_eq!(descriptors(), first, "{flavor}: a second runtime left more");
        if backend == blockio::Backend::IoUring {
            assert_eq!(
                first, before,
                "{flavor}: descriptors kept after the runtime"
            );
        }
    }
    println!("test runtimes gone keep nothing ... ok");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, flavor, mode, port] = &args[..] {
        if role == "child" {
            return child(flavor, mode, port.parse().unwrap());
        }
    }
    runtimes_gone_keep_nothing();
    for flavor in ["current_thread", "multi_thread"] {
        returned_bytes_arrive(flavor);
        println!("test {flavor} runtime, writes until full, exit without flush ... ok");
    }
    let kinds = [
        ("current_thread", "traits"),
        ("multi_thread", "traits"),
        ("current_thread", "owned"),
    ];
    for (flavor, mode) in kinds {
        for _ in 0..ROUNDS {
            all_bytes_arrive(flavor, mode);
        }
        println!("test {flavor} runtime, {mode} writes, exit without flush ... ok");
    }
}
