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
//! get the bytes with the clock moved by [`EXPLICIT`] alone. The file
//! tests read a FIFO that a thread writes to, and the clock must not move
//! at all, as it does not under `tokio::fs`.

use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Wake, Waker};
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

/// An engine on a driver thread of its own.
fn driver_thread_engine() -> AsyncEngine {
    AsyncEngine::builder()
        .driving(Driving::Thread)
        .build()
        .unwrap()
}

/// An engine on the thread-pool backend.
fn thread_pool_engine() -> AsyncEngine {
    AsyncEngine::builder()
        .backend(BackendChoice::ThreadPool)
        .build()
        .unwrap()
}

/// What the server task saw: the read's outcome and how far the paused
/// clock moved while it waited.
struct Served {
    read: Result<Vec<u8>, String>,
    moved: Duration,
}

impl Served {
    /// What an owned read (bounded by `timeout`) that began at `start`
    /// served: the bytes it read, or its error or the timeout's.
    fn owned_read(
        read: Result<(std::io::Result<usize>, Vec<u8>), tokio::time::error::Elapsed>,
        start: Instant,
    ) -> Served {
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
    }
}

/// The peer's side: waits until the server's read is started, moves the
/// clock by [`EXPLICIT`], writes the request, and returns what the server
/// saw.
async fn peer(
    addr: std::net::SocketAddr,
    accepted: oneshot::Receiver<()>,
    server: tokio::task::JoinHandle<Served>,
    busy: Option<&Busy>,
) -> Served {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    accepted.await.unwrap();
    advance(EXPLICIT).await;
    if let Some(busy) = busy {
        busy.occupy();
    }
    stream.write_all(REQUEST).await.unwrap();
    let served = server.await.unwrap();
    drop(stream);
    served
}

/// These tests are of a ring: with the thread pool forced
/// (`BLOCKIO_BACKEND=threads`) there is none (the pool has tests of its
/// own below).
fn on_a_ring(engine: &AsyncEngine) {
    assert_eq!(
        engine.backend(),
        Backend::IoUring,
        "a test of the io_uring ring: run it without BLOCKIO_BACKEND=threads"
    );
}

fn check(served: Served) {
    check_moved(served, EXPLICIT);
}

/// The read got the request, with the clock moved by `moved` alone.
fn check_moved(served: Served, moved: Duration) {
    assert_eq!(
        served.read,
        Ok(REQUEST.to_vec()),
        "the read lost its race with the timer"
    );
    assert_eq!(
        served.moved, moved,
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
    check(peer(addr, rx, server, None).await);
}

/// A blockio read in flight on `engine`.
async fn blockio_read(engine: &AsyncEngine) -> Served {
    blockio_read_beside(engine, None).await
}

/// A blockio read in flight on `engine`, with the engine's thread kept
/// busy by `busy` (if any) when the request is written.
async fn blockio_read_beside(engine: &AsyncEngine, busy: Option<&Busy>) -> Served {
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
        Served::owned_read(read, start)
    });
    peer(addr, rx, server, busy).await
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
/// from that thread, which tokio's poll does not see; the receive waits
/// for its socket in that poll first.
#[tokio::test(start_paused = true)]
async fn driver_thread_keeps_the_paused_clock() {
    let engine = driver_thread_engine();
    check(blockio_read(&engine).await);
}

/// The thread-pool backend: the readiness thread sees the bytes and the
/// completion reaches the task from a pool thread, which tokio's poll does
/// not see either.
#[tokio::test(start_paused = true)]
async fn thread_pool_keeps_the_paused_clock() {
    let engine = thread_pool_engine();
    check(blockio_read(&engine).await);
}

/// Another read on the same engine, started from a thread of its own
/// (no runtime: its clock is not held), whose waker blocks the engine's
/// thread that calls it until the runtime next parks. Written to just
/// before the request, it keeps that thread from delivering the request's
/// completion while the runtime looks for work: the runtime's own poll
/// must see the request's bytes, or its clock jumps to the timer.
struct Busy {
    /// The other read's peer.
    peer: std::sync::Mutex<std::net::TcpStream>,
    /// Signalled by the waker once the engine's thread is in it.
    entered: std::sync::Mutex<mpsc::Receiver<()>>,
    /// The waker's release, sent by the runtime's park hook once armed.
    release: Arc<std::sync::Mutex<Option<mpsc::Sender<()>>>>,
    armed: Arc<AtomicBool>,
    /// Dropped at the end of the test: the other read's thread drops it.
    _finish: mpsc::Sender<()>,
}

/// A waker that reports it was called, then waits to be released.
struct Blocking {
    entered: std::sync::Mutex<mpsc::Sender<()>>,
    released: std::sync::Mutex<mpsc::Receiver<()>>,
}

impl Wake for Blocking {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.entered.lock().unwrap().send(());
        let _ = self.released.lock().unwrap().recv();
    }
}

impl Busy {
    /// The other read, on `engine`, polled once.
    fn new(engine: &AsyncEngine, runtime: &tokio::runtime::Runtime) -> Busy {
        let (stream, peer) = runtime.block_on(async {
            let listener = blockio::net::TcpListener::bind_with(engine, "127.0.0.1:0")
                .await
                .unwrap();
            let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            (stream, peer)
        });
        let (entered_tx, entered) = mpsc::channel();
        let (release_tx, released) = mpsc::channel();
        let (polled_tx, polled) = mpsc::channel();
        let (finish_tx, finish) = mpsc::channel::<()>();
        let waker = Waker::from(Arc::new(Blocking {
            entered: std::sync::Mutex::new(entered_tx),
            released: std::sync::Mutex::new(released),
        }));
        std::thread::spawn(move || {
            let mut read = std::pin::pin!(stream.read(vec![0u8; 1]));
            let first = read.as_mut().poll(&mut Context::from_waker(&waker));
            assert!(first.is_pending(), "the other read found bytes nobody sent");
            polled_tx.send(()).unwrap();
            // Kept, never polled again (its waker stays the blocking
            // one), until the test ends.
            let _ = finish.recv();
        });
        polled
            .recv()
            .expect("the other read ended before it was polled");
        Busy {
            peer: std::sync::Mutex::new(peer),
            entered: std::sync::Mutex::new(entered),
            release: Arc::new(std::sync::Mutex::new(Some(release_tx))),
            armed: Arc::new(AtomicBool::new(false)),
            _finish: finish_tx,
        }
    }

    /// The runtime's park hook: releases the engine's thread at the first
    /// park after [`occupy`](Self::occupy).
    fn park_hook(&self) -> impl Fn() + Send + Sync + 'static {
        let (armed, release) = (self.armed.clone(), self.release.clone());
        move || {
            if armed.load(Ordering::SeqCst) {
                drop(release.lock().unwrap().take());
            }
        }
    }

    /// Sends the other read its byte and waits until the engine's thread
    /// is in its waker, held there until the runtime parks.
    fn occupy(&self) {
        self.peer.lock().unwrap().write_all(b"x").unwrap();
        self.entered
            .lock()
            .unwrap()
            .recv()
            .expect("the other read's waker was never called");
        self.armed.store(true, Ordering::SeqCst);
    }
}

/// A read (or an accept) on `engine` (built by `build`, on the runtime)
/// whose request (or connection) arrives while the engine's thread is
/// busy delivering another completion.
fn beside_a_busy_thread(awaited: Awaited, build: impl FnOnce() -> AsyncEngine) -> Served {
    let hook: ParkHook = Arc::default();
    let runtime = {
        let hook = hook.clone();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .on_thread_park(move || {
                if let Some(f) = &*hook.lock().unwrap() {
                    f();
                }
            })
            .build()
            .unwrap()
    };
    let engine = runtime.block_on(async { build() });
    let busy = Busy::new(&engine, &runtime);
    *hook.lock().unwrap() = Some(Box::new(busy.park_hook()));
    let served = runtime.block_on(async {
        match awaited {
            Awaited::Read => blockio_read_beside(&engine, Some(&busy)).await,
            Awaited::Accept => blockio_accept(&engine, Some(&busy)).await,
        }
    });
    // Released if the runtime never parked after `occupy`.
    drop(busy.release.lock().unwrap().take());
    served
}

/// What the runtime's park hook runs, set once the runtime is built.
type ParkHook = Arc<std::sync::Mutex<Option<Box<dyn Fn() + Send + Sync>>>>;

/// A driver thread busy in another task's waker when the request
/// arrives: the runtime's poll sees the request's bytes all the same.
#[test]
fn driver_thread_keeps_the_paused_clock_while_busy() {
    check(beside_a_busy_thread(Awaited::Read, driver_thread_engine));
}

/// The thread pool's readiness thread busy in another task's waker when
/// the request arrives.
#[test]
fn thread_pool_keeps_the_paused_clock_while_busy() {
    check(beside_a_busy_thread(Awaited::Read, thread_pool_engine));
}

/// A read of a FIFO on `engine` under a 10 s timeout, its bytes written
/// by a thread of the test's own once the read has started: the read
/// waits on the engine's thread (a pool worker, or the ring), which the
/// runtime's poll does not see, as `tokio::fs` waits on a blocking
/// thread; the clock must not jump past it, as it does not for
/// `tokio::fs`.
async fn fifo_read(engine: &AsyncEngine) -> Served {
    fifo_read_as(engine, FileRead::Alone).await
}

/// How [`fifo_read_as`] reads.
#[derive(Clone, Copy)]
enum FileRead {
    /// `read_at`, started.
    Alone,
    /// A batch of one read (`AsyncFile::submit`), polled once.
    Batch,
}

/// [`fifo_read`], the read made as `how` says.
async fn fifo_read_as(engine: &AsyncEngine, how: FileRead) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `name` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
    // Read and write: opening a FIFO so does not wait for a writer.
    let fifo = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut writer = fifo.try_clone().unwrap();
    let file = blockio::aio::AsyncFile::from_file(engine, fifo);
    let (started_tx, started) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if started.recv().is_ok() {
            writer.write_all(REQUEST).unwrap();
        }
    });
    let start = Instant::now();
    let read = timeout(TIMER, async {
        match how {
            FileRead::Alone => {
                let mut read = file.read_at(vec![0u8; REQUEST.len()], 0);
                read.start();
                started_tx.send(()).unwrap();
                read.await
            }
            FileRead::Batch => {
                let batch = file.submit(vec![blockio::aio::BatchOp::Read {
                    offset: 0,
                    buf: vec![0u8; REQUEST.len()],
                }]);
                let mut batch = std::pin::pin!(batch);
                assert!(
                    futures::poll!(batch.as_mut()).is_pending(),
                    "the batch read a FIFO nobody wrote to"
                );
                started_tx.send(()).unwrap();
                let (n, buf) = batch.await.pop().unwrap();
                (n, buf.unwrap())
            }
        }
    })
    .await;
    Served::owned_read(read, start)
}

/// A file read on a driver thread keeps the paused clock while it waits.
#[tokio::test(start_paused = true)]
async fn driver_thread_file_read_keeps_the_paused_clock() {
    let engine = driver_thread_engine();
    check_moved(fifo_read(&engine).await, Duration::ZERO);
}

/// A batch of file reads keeps the paused clock while it waits, on the
/// ring the runtime drives, on a driver thread and on the thread pool.
#[tokio::test(start_paused = true)]
async fn file_batch_keeps_the_paused_clock() {
    let engines = [
        AsyncEngine::current().unwrap(),
        driver_thread_engine(),
        thread_pool_engine(),
    ];
    for engine in &engines {
        check_moved(fifo_read_as(engine, FileRead::Batch).await, Duration::ZERO);
    }
}

/// A file read on the thread pool (a worker in a blocking `read`) keeps
/// the paused clock while it waits.
#[tokio::test(start_paused = true)]
async fn thread_pool_file_read_keeps_the_paused_clock() {
    let engine = thread_pool_engine();
    check_moved(fifo_read(&engine).await, Duration::ZERO);
}

/// A file read on the ring the runtime drives (the default engine on
/// io_uring) keeps the paused clock while it waits: its completion comes
/// from the kernel, not from a peer the runtime would see.
#[tokio::test(start_paused = true)]
async fn file_read_on_runtime_driven_ring_keeps_the_paused_clock() {
    let engine = AsyncEngine::current().unwrap();
    on_a_ring(&engine);
    check_moved(fifo_read(&engine).await, Duration::ZERO);
}

/// A file read on a caller-driven ring, driven by a `drive_on_tokio` task
/// of the test's own, keeps the paused clock while it waits.
#[tokio::test(start_paused = true)]
async fn file_read_on_caller_driven_ring_keeps_the_paused_clock() {
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .backend(BackendChoice::IoUring)
        .build()
        .unwrap();
    on_a_ring(&engine);
    let driver = tokio::spawn(drive_on_tokio(engine.clone()));
    check_moved(fifo_read(&engine).await, Duration::ZERO);
    driver.abort();
}

/// On a runtime with the clock paused, in a thread of its own: a read of
/// an idle blockio socket under a one-hour timeout (the clock jumps to it
/// at once, as for a tokio socket: nothing is coming), then a read of
/// bytes written after that (the dropped read lost none), then a reply
/// back to the tokio peer, then a connect to a tokio listener; then the
/// same for an accept (idle for an hour, then of a connection made after
/// it). Returns how far the clock moved, after the
/// runtime has run, within a guard far beyond what the steps take (a
/// clock held while the socket is idle would wait for the hour).
fn idle_then_busy(build: fn() -> AsyncEngine) -> Duration {
    const HOUR: Duration = Duration::from_secs(3600);
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let moved = runtime.block_on(async {
            let engine = build();
            let listener = blockio::net::TcpListener::bind_with(&engine, "127.0.0.1:0")
                .await
                .unwrap();
            let mut peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            let start = Instant::now();
            let idle = timeout(HOUR, stream.read(vec![0u8; REQUEST.len()])).await;
            assert!(idle.is_err(), "the idle read found bytes nobody sent");
            assert_eq!(start.elapsed(), HOUR, "the clock jumped to the timeout");
            peer.write_all(REQUEST).await.unwrap();
            let (n, buf) = timeout(TIMER, stream.read(vec![0u8; REQUEST.len()]))
                .await
                .expect("the read after the dropped one lost to the timer");
            assert_eq!(&buf[..n.unwrap()], REQUEST, "the dropped read took bytes");
            let (sent, _) = stream.write_all(b"pong".to_vec()).await;
            sent.unwrap();
            let mut reply = [0u8; 4];
            timeout(TIMER, peer.read_exact(&mut reply))
                .await
                .expect("the reply lost to the timer")
                .unwrap();
            assert_eq!(&reply, b"pong");
            // A connect, which waits for its socket to be writable.
            let tokio_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let to = tokio_listener.local_addr().unwrap();
            let (client, accepted) = tokio::join!(
                timeout(TIMER, blockio::net::TcpStream::connect_with(&engine, to)),
                tokio_listener.accept()
            );
            client.expect("the connect lost to the timer").unwrap();
            accepted.unwrap();
            // An idle accept, then one of a connection made after it.
            let idle_listener = blockio::net::TcpListener::bind_with(&engine, "127.0.0.1:0")
                .await
                .unwrap();
            let idle = timeout(HOUR, idle_listener.accept()).await;
            assert!(
                idle.is_err(),
                "the idle accept found a connection nobody made"
            );
            let to = idle_listener.local_addr().unwrap();
            let _client = tokio::net::TcpStream::connect(to).await.unwrap();
            timeout(TIMER, idle_listener.accept())
                .await
                .expect("the accept after the dropped one lost to the timer")
                .unwrap();
            start.elapsed()
        });
        let _ = tx.send(moved);
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(moved) => moved,
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the runtime's thread ended without its result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the runtime never finished: its clock did not jump past an idle read")
        }
    }
}

/// A driver thread: an idle read leaves the clock free to jump.
#[test]
fn driver_thread_idle_read_lets_the_paused_clock_jump() {
    let moved = idle_then_busy(driver_thread_engine);
    assert_eq!(moved, Duration::from_secs(2 * 3600));
}

/// The ring the runtime drives (the default engine on io_uring): an idle
/// read leaves the clock free to jump.
#[test]
fn idle_read_on_runtime_driven_ring_lets_the_paused_clock_jump() {
    let moved = idle_then_busy(|| {
        let engine = AsyncEngine::current().unwrap();
        on_a_ring(&engine);
        engine
    });
    assert_eq!(moved, Duration::from_secs(2 * 3600));
}

/// The thread pool: an idle read leaves the clock free to jump.
#[test]
fn thread_pool_idle_read_lets_the_paused_clock_jump() {
    let moved = idle_then_busy(thread_pool_engine);
    assert_eq!(moved, Duration::from_secs(2 * 3600));
}

/// An accept on `engine` under a 10 s timeout, with `busy` (if any) keeping
/// the engine's thread in another task's waker when the connection comes:
/// the peer moves the clock by [`EXPLICIT`] and connects; the accept must
/// win with the clock moved by that alone.
async fn blockio_accept(engine: &AsyncEngine, busy: Option<&Busy>) -> Served {
    let listener = blockio::net::TcpListener::bind_with(engine, "127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let server = tokio::spawn(async move {
        let start = Instant::now();
        let accepted = timeout(TIMER, async {
            let mut accept = std::pin::pin!(listener.accept());
            assert!(futures::poll!(accept.as_mut()).is_pending());
            let _ = tx.send(());
            accept.await
        })
        .await;
        Served {
            read: match accepted {
                Ok(Ok(_)) => Ok(REQUEST.to_vec()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(elapsed) => Err(elapsed.to_string()),
            },
            moved: start.elapsed(),
        }
    });
    rx.await.unwrap();
    advance(EXPLICIT).await;
    if let Some(busy) = busy {
        busy.occupy();
    }
    let client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let served = server.await.unwrap();
    drop(client);
    served
}

/// An accept on a driver thread keeps the paused clock.
#[tokio::test(start_paused = true)]
async fn driver_thread_accept_keeps_the_paused_clock() {
    let engine = driver_thread_engine();
    check(blockio_accept(&engine, None).await);
}

/// An accept on the thread pool keeps the paused clock, with the pool's
/// readiness thread (which accepts too) busy when the connection comes.
#[test]
fn thread_pool_accept_keeps_the_paused_clock_while_busy() {
    check(beside_a_busy_thread(Awaited::Accept, thread_pool_engine));
}

/// What [`beside_a_busy_thread`] awaits.
#[derive(Clone, Copy)]
enum Awaited {
    Read,
    Accept,
}

/// How a test of a paused runtime's liveness gets its engine, on that
/// runtime.
#[derive(Clone, Copy)]
enum Engine {
    /// The default engine, a ring the runtime drives (io_uring backend).
    RuntimeDrivenRing,
    /// A caller-driven ring, driven by a `drive_on_tokio` task.
    CallerDrivenRing,
    /// A driver thread of the engine's own.
    DriverThread,
    /// The thread-pool backend.
    ThreadPool,
}

impl Engine {
    fn build(self) -> AsyncEngine {
        match self {
            Engine::RuntimeDrivenRing => {
                let engine = AsyncEngine::current().unwrap();
                on_a_ring(&engine);
                engine
            }
            Engine::CallerDrivenRing => {
                let engine = AsyncEngine::builder()
                    .driving(Driving::Caller(CallerDriving::new()))
                    .backend(BackendChoice::IoUring)
                    .build()
                    .unwrap();
                on_a_ring(&engine);
                tokio::spawn(drive_on_tokio(engine.clone()));
                engine
            }
            Engine::DriverThread => driver_thread_engine(),
            Engine::ThreadPool => thread_pool_engine(),
        }
    }
}

/// Runs `body` with an engine `how` on a current-thread runtime of its own
/// whose clock starts paused, on a thread of its own, and returns its
/// result. Fails if the runtime has not finished within a minute of real
/// time: the bodies end on a timer of the paused clock, which a clock held
/// while an operation waits for the peer never reaches.
fn on_paused_runtime<T, F>(how: Engine, body: fn(AsyncEngine) -> F) -> T
where
    T: Send + 'static,
    F: Future<Output = T> + 'static,
{
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let _ = tx.send(runtime.block_on(async move { body(how.build()).await }));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the runtime's thread ended without its result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the runtime never finished: an operation waiting for its peer held the clock")
        }
    }
}

/// A connect to a listener whose queue is full (its SYN goes unanswered,
/// and the kernel retries it for minutes) under a 5 s timeout: the
/// timeout must fire with the clock moved by exactly 5 s, as it does on
/// tokio's sockets, not wait for the kernel to give up.
async fn unanswered_connect(engine: AsyncEngine) -> Duration {
    const LIMIT: Duration = Duration::from_secs(5);
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    listener.bind(&any.into()).unwrap();
    // A backlog of 0 queues one connection; the next SYN is dropped.
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let _queued = std::net::TcpStream::connect(addr).unwrap();
    let start = Instant::now();
    let connect = timeout(LIMIT, blockio::net::TcpStream::connect_with(&engine, addr)).await;
    assert!(
        connect.is_err(),
        "the connect to a full queue finished: {connect:?}"
    );
    start.elapsed()
}

/// Connects to a full queue on a ring the runtime drives: the timeout
/// fires.
#[test]
fn unanswered_connect_on_runtime_driven_ring_lets_the_paused_clock_jump() {
    let moved = on_paused_runtime(Engine::RuntimeDrivenRing, unanswered_connect);
    assert_eq!(moved, Duration::from_secs(5));
}

/// Connects to a full queue on a caller-driven ring: the timeout fires.
#[test]
fn unanswered_connect_on_caller_driven_ring_lets_the_paused_clock_jump() {
    let moved = on_paused_runtime(Engine::CallerDrivenRing, unanswered_connect);
    assert_eq!(moved, Duration::from_secs(5));
}

/// Connects to a full queue on a driver thread: the timeout fires.
#[test]
fn driver_thread_unanswered_connect_lets_the_paused_clock_jump() {
    let moved = on_paused_runtime(Engine::DriverThread, unanswered_connect);
    assert_eq!(moved, Duration::from_secs(5));
}

/// Connects to a full queue on the thread pool: the timeout fires.
#[test]
fn thread_pool_unanswered_connect_lets_the_paused_clock_jump() {
    let moved = on_paused_runtime(Engine::ThreadPool, unanswered_connect);
    assert_eq!(moved, Duration::from_secs(5));
}

/// Two tasks read one stream, both waiting when the peer sends 4 bytes,
/// once: one read gets them, the other finds the socket empty again and
/// must wait with the clock free, so that an hour's sleep after that ends
/// with the clock moved by the hour. Returns the reads' results and how
/// far the clock moved.
async fn two_readers_one_message(engine: AsyncEngine) -> (Vec<usize>, Duration) {
    const HOUR: Duration = Duration::from_secs(3600);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = blockio::net::TcpStream::connect_with(&engine, listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let stream = Arc::new(stream);
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stream, got_tx) = (stream.clone(), got_tx.clone());
            tokio::spawn(async move {
                let (n, _) = stream.read(vec![0u8; 64]).await;
                let _ = got_tx.send(n.unwrap());
            })
        })
        .collect();
    // Both reads started and waiting (nothing has been sent).
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    peer.write_all(REQUEST).unwrap();
    let first = got_rx.recv().await.unwrap();
    let start = Instant::now();
    tokio::time::sleep(HOUR).await;
    let moved = start.elapsed();
    let mut got = vec![first];
    while let Ok(n) = got_rx.try_recv() {
        got.push(n);
    }
    for reader in readers {
        reader.abort();
    }
    drop(peer);
    (got, moved)
}

/// Checks [`two_readers_one_message`]'s outcome: one read of the 4 bytes,
/// the other still waiting, the clock moved by the hour.
fn check_two_readers((got, moved): (Vec<usize>, Duration)) {
    assert_eq!(got, vec![REQUEST.len()], "one read gets the bytes");
    assert_eq!(moved, Duration::from_secs(3600));
}

/// Two readers of one message on a ring the runtime drives.
#[test]
fn two_readers_on_runtime_driven_ring_lets_the_paused_clock_jump() {
    check_two_readers(on_paused_runtime(
        Engine::RuntimeDrivenRing,
        two_readers_one_message,
    ));
}

/// Two readers of one message on a caller-driven ring.
#[test]
fn two_readers_on_caller_driven_ring_lets_the_paused_clock_jump() {
    check_two_readers(on_paused_runtime(
        Engine::CallerDrivenRing,
        two_readers_one_message,
    ));
}

/// Two readers of one message on a driver thread.
#[test]
fn driver_thread_two_readers_let_the_paused_clock_jump() {
    check_two_readers(on_paused_runtime(
        Engine::DriverThread,
        two_readers_one_message,
    ));
}

/// Two readers of one message on the thread pool.
#[test]
fn thread_pool_two_readers_let_the_paused_clock_jump() {
    check_two_readers(on_paused_runtime(
        Engine::ThreadPool,
        two_readers_one_message,
    ));
}
