//! tokio's paused clock (`test-util`, `start_paused`) against socket reads
//! in flight. With the clock paused, a current-thread runtime that parks
//! with a timer pending polls its I/O driver once without waiting and
//! jumps the clock to that timer unless the poll woke a task. A read whose
//! bytes are already in the kernel must therefore be seen by that poll, as
//! tokio's own sockets are, or the timer fires first.
//!
//! Each test: a server task starts a read under a 10 s timeout, the peer
//! (a task of the same runtime) moves the clock by exactly
//! [`EXPLICIT`] with `tokio::time::advance` and writes; the server must
//! get the bytes with the clock moved by [`EXPLICIT`] alone.

use std::time::Duration;

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving};
use blockio::{Backend, BackendChoice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::time::{advance, timeout, Instant};

/// The only move of the clock that the test makes.
const EXPLICIT: Duration = Duration::from_millis(5);
/// The timer the runtime would jump to if it thought itself idle.
const TIMER: Duration = Duration::from_secs(10);
const REQUEST: &[u8] = b"ping";

/// What the server task saw: the read's outcome and how far the paused
/// clock moved while it waited.
struct Served {
    read: Result<Vec<u8>, String>,
    moved: Duration,
}

/// The peer's side: waits until the server's read is started, moves the
/// clock by [`EXPLICIT`], writes the request, and returns what the server
/// saw.
async fn peer(
    addr: std::net::SocketAddr,
    accepted: oneshot::Receiver<()>,
    server: tokio::task::JoinHandle<Served>,
) -> Served {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    accepted.await.unwrap();
    advance(EXPLICIT).await;
    stream.write_all(REQUEST).await.unwrap();
    let served = server.await.unwrap();
    drop(stream);
    served
}

/// These tests are of a ring: with the thread pool forced
/// (`BLOCKIO_BACKEND=threads`) there is none, and the clock may jump as on
/// a driver thread (see the ignored tests below).
fn on_a_ring(engine: &AsyncEngine) {
    assert_eq!(
        engine.backend(),
        Backend::IoUring,
        "a test of the io_uring ring: run it without BLOCKIO_BACKEND=threads"
    );
}

fn check(served: Served) {
    assert_eq!(
        served.read,
        Ok(REQUEST.to_vec()),
        "the read lost its race with the timer"
    );
    assert_eq!(
        served.moved, EXPLICIT,
        "the paused clock moved by more than the explicit advance while a read was in flight"
    );
}

/// The reference: tokio's own sockets.
#[tokio::test(start_paused = true)]
async fn tokio_sockets_keep_the_paused_clock() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let start = Instant::now();
        let mut buf = vec![0u8; REQUEST.len()];
        let read = timeout(TIMER, async {
            // Polled once (the read is waiting) before the peer runs.
            let _ = tx.send(());
            stream.read_exact(&mut buf).await
        })
        .await;
        Served {
            read: match read {
                Ok(Ok(_)) => Ok(buf),
                other => Err(format!("{other:?}")),
            },
            moved: start.elapsed(),
        }
    });
    check(peer(addr, rx, server).await);
}

/// A blockio read in flight on `engine`.
async fn blockio_read(engine: &AsyncEngine) -> Served {
    let listener = blockio::net::TcpListener::bind_with(engine, "127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let start = Instant::now();
        let read = timeout(TIMER, async {
            let read = stream.read(vec![0u8; REQUEST.len()]);
            let _ = tx.send(());
            read.await
        })
        .await;
        Served {
            read: match read {
                Ok((Ok(n), mut buf)) => {
                    buf.truncate(n);
                    Ok(buf)
                }
                Ok((Err(e), _)) => Err(e.to_string()),
                Err(elapsed) => Err(elapsed.to_string()),
            },
            moved: start.elapsed(),
        }
    });
    peer(addr, rx, server).await
}

/// The default engine on an io_uring: a ring driven by the runtime, whose
/// completions tokio's own I/O driver sees.
#[tokio::test(start_paused = true)]
async fn runtime_driven_ring_keeps_the_paused_clock() {
    let engine = AsyncEngine::current().unwrap();
    on_a_ring(&engine);
    assert!(
        matches!(engine.driving(), Driving::Caller(_)),
        "the default engine on a runtime with I/O is driven by it (io_uring backend)"
    );
    check(blockio_read(&engine).await);
}

/// A caller-driven ring submitting when each operation starts, driven by
/// a `drive_on_tokio` task of the test's own.
#[tokio::test(start_paused = true)]
async fn caller_driven_ring_keeps_the_paused_clock() {
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .backend(BackendChoice::IoUring)
        .build()
        .unwrap();
    on_a_ring(&engine);
    let driver = tokio::spawn(drive_on_tokio(engine.clone()));
    check(blockio_read(&engine).await);
    driver.abort();
}

/// A driver thread of the engine's own: the completion reaches the task
/// from that thread, which tokio does not wait for.
#[tokio::test(start_paused = true)]
async fn driver_thread_keeps_the_paused_clock() {
    let engine = AsyncEngine::builder()
        .driving(Driving::Thread)
        .build()
        .unwrap();
    check(blockio_read(&engine).await);
}

/// The thread-pool backend: the readiness thread sees the bytes and the
/// completion reaches the task from a pool thread, which tokio does not
/// wait for either.
#[tokio::test(start_paused = true)]
async fn thread_pool_keeps_the_paused_clock() {
    let engine = AsyncEngine::builder()
        .backend(BackendChoice::ThreadPool)
        .build()
        .unwrap();
    check(blockio_read(&engine).await);
}
