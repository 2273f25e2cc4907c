//! The default driving ([`Driving::Auto`]): an engine built on a tokio
//! runtime with I/O is driven by that runtime (a caller-driven ring whose
//! driving task the builder spawned); built anywhere else it has a driver
//! thread of its own. Either way the engine works with no setting made,
//! its driving task ends with it, and a runtime without I/O costs one
//! panic message, not a broken engine. On the thread-pool backend the
//! pool completes everything and the same outcomes hold.

use std::future::Future;
use std::io::{Read, Write};
use std::time::Duration;

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
use blockio::net::{TcpListener, TcpStream};
use blockio::Backend;

mod common;
use common::{count_io_disabled_panics, current_thread, Bounded};

/// A hang guard, far beyond what any step takes.
const GUARD: Duration = Duration::from_secs(30);

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn is_caller_driven(engine: &AsyncEngine) -> bool {
    matches!(engine.driving(), Driving::Caller(_))
}

/// An echo of `msg` through a blockio listener and a std peer, with the
/// owned-buffer calls, under the hang guard.
async fn echo_once(engine: &AsyncEngine, msg: &[u8]) -> Vec<u8> {
    let listener = TcpListener::bind_with(engine, "127.0.0.1:0").await.unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap())
        .unwrap()
        .bounded();
    peer.write_all(msg).unwrap();
    let served = async {
        let (stream, _) = listener.accept().await.unwrap();
        let (n, mut buf) = stream.read(vec![0u8; msg.len()]).await;
        buf.truncate(n.unwrap());
        let (res, _) = stream.write_all(buf).await;
        res.unwrap();
    };
    tokio::time::timeout(GUARD, served)
        .await
        .expect("the echo never finished");
    let mut back = vec![0u8; msg.len()];
    peer.read_exact(&mut back).unwrap();
    back
}

#[test]
fn an_engine_built_on_a_runtime_is_driven_by_it() {
    for rt in [current_thread(), multi_thread()] {
        rt.block_on(async {
            let engine = AsyncEngine::new().unwrap();
            if engine.backend() == Backend::IoUring {
                assert!(
                    is_caller_driven(&engine),
                    "built on a runtime with I/O: {:?}",
                    engine.driving()
                );
                assert!(engine.poll_fd().is_some());
            }
            assert_eq!(
                echo_once(&engine, b"on the runtime").await,
                b"on the runtime"
            );
        });
    }
}

#[test]
fn an_engine_built_outside_a_runtime_has_its_own_thread() {
    let engine = AsyncEngine::new().unwrap();
    assert!(
        matches!(engine.driving(), Driving::Thread),
        "built on no runtime: {:?}",
        engine.driving()
    );
    assert!(engine.poll_fd().is_none());
    // No runtime's reactor is involved: any executor drives the futures.
    let listener =
        futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    peer.write_all(b"ping").unwrap();
    let got = futures::executor::block_on(async {
        let (stream, _) = listener.accept().await.unwrap();
        let (n, buf) = stream.read(vec![0u8; 4]).await;
        buf[..n.unwrap()].to_vec()
    });
    assert_eq!(got, b"ping");
}

/// The builder's own choice is kept: `Driving::Thread` on a runtime has
/// its thread, and `driving()` says so.
#[test]
fn an_explicit_setting_is_kept_on_a_runtime() {
    current_thread().block_on(async {
        let engine = AsyncEngine::builder()
            .driving(Driving::Thread)
            .build()
            .unwrap();
        assert!(matches!(engine.driving(), Driving::Thread));
        assert_eq!(echo_once(&engine, b"thread").await, b"thread");
    });
}

/// Operations started from a plain thread, on another executor, while
/// the multi-thread runtime the engine was built on runs: that runtime
/// drives them.
#[test]
fn another_executor_is_served_while_the_building_runtime_runs() {
    let rt = multi_thread();
    let engine = rt.block_on(async { AsyncEngine::new().unwrap() });
    let listener =
        futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    peer.write_all(b"elsewhere").unwrap();
    let got = std::thread::spawn(move || {
        futures::executor::block_on(async {
            let (stream, _) = listener.accept().await.unwrap();
            let (n, buf) = stream.read(vec![0u8; 9]).await;
            buf[..n.unwrap()].to_vec()
        })
    })
    .join()
    .unwrap();
    assert_eq!(got, b"elsewhere");
    drop(rt);
}

/// The runtime an engine was built on is gone: the next runtime that
/// uses it drives it, and a stream accepted on the first carries on.
#[test]
fn an_engine_outlives_the_runtime_it_was_built_on() {
    let first = current_thread();
    let (engine, stream, mut peer) = first.block_on(async {
        let engine = AsyncEngine::new().unwrap();
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        (engine, stream, peer)
    });
    drop(first);
    peer.write_all(b"next").unwrap();
    let second = current_thread();
    let got = second.block_on(async {
        let read = tokio::time::timeout(GUARD, stream.read(vec![0u8; 4]));
        let (n, buf) = read.await.expect("the next runtime never drove the read");
        buf[..n.unwrap()].to_vec()
    });
    assert_eq!(got, b"next");
    drop(engine);
}

/// The driving task the builder spawned does not keep the engine alive:
/// once the engine's handles and operations are gone, it ends, and the
/// runtime is left with no task of blockio's.
#[test]
fn the_driving_task_ends_with_the_engine() {
    let rt = current_thread();
    rt.block_on(async {
        let engine = AsyncEngine::new().unwrap();
        assert_eq!(echo_once(&engine, b"x").await, b"x");
        drop(engine);
        let metrics = tokio::runtime::Handle::current().metrics();
        let mut turns = 0;
        while metrics.num_alive_tasks() > 0 {
            turns += 1;
            assert!(turns < 10_000, "the driving task outlived its engine");
            tokio::task::yield_now().await;
        }
    });
}

/// The same for a `drive_on_tokio` the user spawned: it returns `Ok`
/// once the engine is gone, rather than running for good.
#[test]
fn drive_on_tokio_returns_once_the_engine_is_gone() {
    let rt = current_thread();
    rt.block_on(async {
        let engine = AsyncEngine::builder()
            .driving(Driving::Caller(
                CallerDriving::new().submit(Submit::PerRound),
            ))
            .build()
            .unwrap();
        let driver = tokio::spawn(drive_on_tokio(engine.clone()));
        assert_eq!(echo_once(&engine, b"y").await, b"y");
        drop(engine);
        let ended = tokio::time::timeout(GUARD, driver)
            .await
            .expect("drive_on_tokio outlived its engine");
        ended.expect("drive_on_tokio panicked").unwrap();
    });
}

/// An engine whose stream is dropped with bytes still queued (a write
/// left pending, its send waiting for room): the bytes reach the peer,
/// and the engine, once everything is gone, lets its driving task end
/// too.
#[test]
fn a_dropped_streams_bytes_arrive_from_a_default_engine() {
    let rt = current_thread();
    let reply = vec![7u8; 4 << 20];
    let (mut peer, written) = rt.block_on(async {
        let engine = AsyncEngine::new().unwrap();
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap())
            .unwrap()
            .bounded();
        // Buffers of fixed sizes, far below the reply: with the kernel's
        // autotuning (up to tcp_rmem's 32 MiB here) the socket could take
        // all 4 MiB, leaving nothing queued.
        socket2::SockRef::from(&peer)
            .set_recv_buffer_size(64 << 10)
            .unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        stream.socket().set_send_buffer_size(16 << 10).unwrap();
        let written = write_until_pending(&mut stream, &reply).await;
        drop(stream);
        (peer, written)
    });
    // The pending write queued what the socket refused, up to 256 KiB.
    let queued = (reply.len() - written).min(256 << 10);
    assert!(queued > 0, "the socket took all {written} bytes");
    let (done, got) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        let _ = done.send(got);
    });
    // The runtime keeps running until the peer has everything.
    let got = rt.block_on(async {
        tokio::time::timeout(GUARD, got)
            .await
            .expect("the peer never got the whole reply")
            .expect("the peer's reader panicked")
    });
    assert_eq!(got.len(), written + queued);
    assert!(got.iter().all(|&b| b == 7));
}

/// Writes `data` through `poll_write` until a write is pending twice in a
/// row (a yield between: the first may be the budget's), its bytes
/// queued and their send in flight; the bytes the writes returned.
async fn write_until_pending(s: &mut blockio::net::TcpStream, data: &[u8]) -> usize {
    let (mut written, mut pending) = (0, 0);
    while pending < 2 && written < data.len() {
        let step = std::future::poll_fn(|cx| {
            let pinned = std::pin::Pin::new(&mut *s);
            match tokio::io::AsyncWrite::poll_write(pinned, cx, &data[written..]) {
                std::task::Poll::Ready(r) => std::task::Poll::Ready(Some(r.unwrap())),
                std::task::Poll::Pending => std::task::Poll::Ready(None),
            }
        })
        .await;
        match step {
            Some(n) => (written, pending) = (written + n, 0),
            None => {
                pending += 1;
                tokio::task::yield_now().await;
            }
        }
    }
    written
}

/// Held by each test that counts tokio's panics about a runtime without
/// I/O: the count is the process's, so two such tests at once would each
/// see the other's.
static IO_DISABLED_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Built on a runtime whose reactor cannot watch the ring, the engine has
/// its own thread and works there; tokio is asked (and panics, caught)
/// once for that runtime, not once per engine.
#[test]
fn an_engine_built_on_a_runtime_without_io_has_its_own_thread() {
    let _alone = IO_DISABLED_COUNT.lock().unwrap_or_else(|e| e.into_inner());
    let before = count_io_disabled_panics();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        for _ in 0..3 {
            let engine = AsyncEngine::new().unwrap();
            if engine.backend() == Backend::IoUring {
                assert!(
                    !is_caller_driven(&engine),
                    "a runtime without I/O cannot drive: {:?}",
                    engine.driving()
                );
            }
            assert_eq!(echo_once(&engine, b"no reactor").await, b"no reactor");
        }
    });
    drop(rt);
    let panics = count_io_disabled_panics() - before;
    assert!(panics <= 1, "tokio's panic came {panics} times");
}

/// On a runtime of two workers whose reactor is off, trait reads that
/// wait (which on a runtime of two workers with I/O would wait in its
/// reactor) go through the ring and get their bytes; tokio is asked (and
/// panics, caught) at most once for that runtime, not once per stream.
#[test]
fn trait_reads_on_two_workers_without_io_ask_tokio_once() {
    use tokio::io::AsyncReadExt;
    let _alone = IO_DISABLED_COUNT.lock().unwrap_or_else(|e| e.into_inner());
    let before = count_io_disabled_panics();
    // Built outside the runtime: an engine with a driver thread.
    let engine = AsyncEngine::new().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        for round in 0..3u8 {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap())
                .unwrap()
                .bounded();
            let ours = listener.accept().unwrap().0;
            let mut stream = TcpStream::from_std_with(&engine, ours).unwrap();
            let mut got = [0u8; 1];
            let mut read = std::pin::pin!(stream.read_exact(&mut got));
            assert!(futures::poll!(&mut read).is_pending(), "nothing sent yet");
            peer.write_all(&[round]).unwrap();
            tokio::time::timeout(GUARD, read)
                .await
                .expect("the read never finished")
                .unwrap();
            assert_eq!(got, [round]);
        }
    });
    drop(rt);
    let panics = count_io_disabled_panics() - before;
    assert!(panics <= 1, "tokio's panic came {panics} times");
}

/// A burst of reads on idle connections, more than the ring's submission
/// queue holds many times over, started in one round, then a read whose
/// bytes are there: every read reaches the kernel in that round, so the
/// last one completes. Before, three queuefuls went per turn and the rest
/// waited for a turn that idle connections never cause.
#[test]
fn a_burst_of_reads_beyond_the_submission_queue_all_reach_the_kernel() {
    const IDLE: usize = 200;
    current_thread().block_on(async {
        // A queue depth of 4: a ring of 4 entries.
        let engine = AsyncEngine::builder().queue_depth(4).build().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut streams = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..=IDLE {
            streams.push(TcpStream::connect_with(&engine, addr).await.unwrap());
            peers.push(listener.accept().unwrap().0);
        }
        peers[IDLE].write_all(b"probe").unwrap();
        let probe = streams.pop().unwrap();
        let idle: Vec<_> = streams
            .into_iter()
            .map(|s| tokio::spawn(async move { s.read(vec![0u8; 16]).await.0 }))
            .collect();
        let read = tokio::spawn(async move {
            let (n, buf) = probe.read(vec![0u8; 16]).await;
            buf[..n.unwrap()].to_vec()
        });
        let got = tokio::time::timeout(GUARD, read)
            .await
            .expect("the read behind the burst never reached the kernel")
            .unwrap();
        assert_eq!(got, b"probe");
        for t in idle {
            t.abort();
        }
    });
}

/// A default engine built on a runtime of a thread of its own, which
/// drives it, and what makes that thread exit (and waits for it).
fn built_on_a_thread() -> (AsyncEngine, impl FnOnce()) {
    let (engine_tx, engine_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let builder = std::thread::spawn(move || {
        current_thread().block_on(async {
            engine_tx.send(AsyncEngine::new().unwrap()).unwrap();
            let _ = stopped.await;
        });
    });
    let engine = engine_rx.recv().unwrap();
    let exit = move || {
        stop.send(()).unwrap();
        builder.join().unwrap();
    };
    (engine, exit)
}

/// The submissions of an engine's ring from a moment on (none to wait
/// for on the thread-pool backend, which has no ring).
struct SubmittedSince {
    ring: Option<(std::os::fd::RawFd, u32)>,
}

impl SubmittedSince {
    /// From now on.
    fn now(engine: &AsyncEngine) -> Self {
        use std::os::fd::AsRawFd;
        let ring = engine.poll_fd().map(|fd| fd.as_raw_fd());
        SubmittedSince {
            ring: ring.map(|fd| (fd, common::ring_sq_head(fd))),
        }
    }

    /// Returns once the kernel has taken an entry from the ring since
    /// then: `what` was submitted, by the builder's thread or, if it did
    /// not get there first, by this runtime (the outcome asserted is the
    /// same either way). The engine's ring has no other user meanwhile.
    async fn wait(&self, what: &str) {
        let Some((fd, before)) = self.ring else {
            return;
        };
        let deadline = std::time::Instant::now() + GUARD;
        while common::ring_sq_head(fd) == before {
            assert!(
                std::time::Instant::now() < deadline,
                "{what} was never submitted"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A read submitted by the thread of the runtime the engine was built on
/// (which drives it), awaited by a task of another runtime; then that
/// thread exits, and the kernel cancels the read it submitted. The read,
/// which moved no byte, is made again: the peer's bytes arrive, not
/// `ECANCELED`.
#[test]
fn a_read_whose_submitting_thread_exits_is_made_again() {
    let (engine, exit_builder) = built_on_a_thread();
    let rt = current_thread();
    let got = rt.block_on(async {
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let submitted = SubmittedSince::now(&engine);
        let read = tokio::spawn(async move {
            let (n, buf) = stream.read(vec![0u8; 5]).await;
            n.map(|n| buf[..n].to_vec())
        });
        submitted.wait("the read").await;
        exit_builder();
        peer.write_all(b"hello").unwrap();
        tokio::time::timeout(GUARD, read)
            .await
            .expect("the read never completed")
            .unwrap()
    });
    assert_eq!(got.expect("the read failed"), b"hello");
}

/// On `rt`: a default engine built there (so driven by it) and a stream
/// of it connected to a std peer.
fn connected_on(rt: &tokio::runtime::Runtime) -> (AsyncEngine, TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (engine, stream) = rt.block_on(async {
        let engine = AsyncEngine::new().unwrap();
        let stream = TcpStream::connect_with(&engine, addr).await.unwrap();
        (engine, stream)
    });
    let peer = listener.accept().unwrap().0.bounded();
    (engine, stream, peer)
}

/// Runs `run` on a plain thread, which awaits there with futures'
/// executor and says when its operation has started (see
/// [`started_first`]); then drops `rt`, the runtime that drives the
/// engine. What `run` returns comes through the receiver.
fn awaited_elsewhere<T: Send + 'static>(
    rt: tokio::runtime::Runtime,
    run: impl FnOnce(std::sync::mpsc::Sender<()>) -> T + Send + 'static,
) -> std::sync::mpsc::Receiver<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (started_tx, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run(started_tx));
    });
    started.recv().unwrap();
    drop(rt);
    rx
}

/// `fut`, after telling `started` that its first poll has started it
/// (while the runtime that drives the engine still exists) and found it
/// waiting.
async fn started_first<F: std::future::Future>(
    fut: F,
    started: std::sync::mpsc::Sender<()>,
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    assert!(
        futures::poll!(fut.as_mut()).is_pending(),
        "finished before the peer did anything"
    );
    started.send(()).unwrap();
    fut.await
}

/// A read awaited on another executor (a plain thread) while the runtime
/// that built and drives the engine is dropped: a thread of the engine's
/// drives the ring while the read is in flight, so the peer's bytes
/// arrive, as with a driver thread, not a hang.
#[test]
fn a_read_awaited_elsewhere_completes_after_the_runtime_is_dropped() {
    let rt = current_thread();
    let (engine, stream, mut peer) = connected_on(&rt);
    let rx = awaited_elsewhere(rt, move |started| {
        let (n, buf) =
            futures::executor::block_on(started_first(stream.read(vec![0u8; 5]), started));
        n.map(|n| buf[..n].to_vec())
    });
    peer.write_all(b"hello").unwrap();
    let got = rx
        .recv_timeout(GUARD)
        .expect("the read hung once its runtime was dropped");
    assert_eq!(got.expect("the read failed"), b"hello");
    drop(engine);
}

/// The ring's descriptor, registered again with a reactor by
/// [`ReRegisters`] (never closed by it).
struct RingNumber(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for RingNumber {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// A waker that, when first woken, registers the ring with the reactor
/// of the runtime it is woken in, as a waiting task's next poll does when
/// it spawns a new driver there, and keeps the outcome.
struct ReRegisters {
    ring: std::os::fd::RawFd,
    outcome: std::sync::Mutex<Option<std::io::Result<()>>>,
}

impl std::task::Wake for ReRegisters {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let mut outcome = self.outcome.lock().unwrap();
        if outcome.is_none() {
            // The same call as the engine's (see `tokio_drive::register`),
            // deprecated in tokio 1.54 only for its spelling.
            #[allow(deprecated)]
            let watched = tokio::io::unix::AsyncFd::new(RingNumber(self.ring));
            *outcome = Some(watched.map(drop));
        }
    }
}

/// A runtime shutting down drops the driving task of an engine built on
/// it (unpolled, here) and wakes the tasks waiting for its operations:
/// by then the ring's registration with that runtime's reactor is gone,
/// so that a woken task polled at once on another worker (its next poll
/// registers the ring again, for a new driver) is never refused with
/// `EEXIST` ("File exists"), which became a file read's result.
#[test]
fn a_driving_task_dropped_at_shutdown_deregisters_the_ring_before_waking_the_waiting() {
    let rt = current_thread();
    let (mine, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let (engine, waker) = rt.block_on(async {
        // Nothing here awaits: the driving task the builder spawned is
        // never polled, and goes with the runtime.
        let engine = AsyncEngine::new().unwrap();
        let ring = engine
            .poll_fd()
            .map(|fd| std::os::fd::AsRawFd::as_raw_fd(&fd));
        let waker = std::sync::Arc::new(ReRegisters {
            ring: ring.unwrap_or(-1),
            outcome: std::sync::Mutex::new(None),
        });
        // Left waiting for bytes that never come (the stream and its
        // read outlive the runtime; the test's process ends soon).
        let stream: &'static blockio::net::UnixStream = Box::leak(Box::new(
            blockio::net::UnixStream::from_std_with(&engine, mine).unwrap(),
        ));
        let mut read = Box::pin(stream.read(vec![0u8; 8]));
        let std_waker = std::task::Waker::from(waker.clone());
        let mut cx = std::task::Context::from_waker(&std_waker);
        assert!(read.as_mut().poll(&mut cx).is_pending());
        std::mem::forget(read);
        (engine, waker)
    });
    drop(rt);
    let outcome = waker.outcome.lock().unwrap().take();
    if engine.backend() == Backend::IoUring {
        assert!(is_caller_driven(&engine));
        let outcome = outcome.expect("the waiting read was not woken when its driver went");
        outcome.expect("the ring was still registered when the waiting read was woken");
    } else {
        // The pool completes everything: no driver, no ring to register.
        assert!(engine.poll_fd().is_none());
        assert!(outcome.is_none());
    }
}

/// Set for [`default_engine_at_the_descriptor_limit`], run as a child.
const AT_FD_LIMIT: &str = "BLOCKIO_TEST_AT_FD_LIMIT";

/// The child of [`the_default_engine_names_what_the_descriptor_limit_kept_it_from_making`]:
/// on a tokio runtime, its descriptor limit lowered so that no descriptor
/// can be opened, asks for the default engine and prints the error.
#[test]
#[ignore = "run as a child process by another test"]
fn default_engine_at_the_descriptor_limit() {
    if std::env::var_os(AT_FD_LIMIT).is_none() {
        return;
    }
    let rt = current_thread();
    // SAFETY: zeroed is a valid rlimit; getrlimit and setrlimit read and
    // write only the struct passed.
    unsafe {
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        // No new descriptor past the standard three (those open stay).
        lim.rlim_cur = 3;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    match rt.block_on(async { AsyncEngine::current() }) {
        Ok(engine) => println!("built {:?}", engine.backend()),
        Err(e) => println!("error {e}"),
    }
}

/// At a descriptor limit that leaves none free, the default engine on a
/// tokio runtime cannot be made, on either backend, and the error says
/// what could not be made and why, not a bare `EMFILE`.
#[test]
fn the_default_engine_names_what_the_descriptor_limit_kept_it_from_making() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "default_engine_at_the_descriptor_limit",
            "--ignored",
            "--nocapture",
        ])
        .env(AT_FD_LIMIT, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("error ").map(|(_, e)| e.to_string()))
        .unwrap_or_else(|| panic!("the child printed no error: {stdout}"));
    assert!(
        line.starts_with("cannot start blockio's default engine"),
        "{line}"
    );
    assert!(line.contains("Too many open files"), "{line}");
}

/// A `write_all` of more than the socket takes, awaited on another
/// executor while the runtime that built and drives the engine is
/// dropped, the peer reading only afterwards: every send after the first
/// reaches the kernel (each is started between polls of the write, with
/// no driver left but the engine's relay thread), and the peer gets every
/// byte.
#[test]
fn a_write_all_awaited_elsewhere_finishes_after_the_runtime_is_dropped() {
    const LEN: usize = 8 << 20;
    let rt = current_thread();
    let (engine, stream, mut peer) = connected_on(&rt);
    stream.socket().set_send_buffer_size(16 << 10).unwrap();
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let rx = awaited_elsewhere(rt, move |started| {
        let write = started_first(stream.write_all(data), started);
        futures::executor::block_on(write).0
    });
    let mut got = Vec::with_capacity(LEN);
    let mut chunk = vec![0u8; 1 << 16];
    while got.len() < LEN {
        let n = peer.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "the peer saw the end after {} bytes: {:?}",
            got.len(),
            rx.try_recv()
        );
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    rx.recv_timeout(GUARD)
        .expect("the write_all hung once its runtime was dropped")
        .expect("the write_all failed");
    drop(engine);
}

/// A receive stream's next buffer, awaited on another executor while the
/// runtime that built and drives the engine is dropped: the receive it
/// had started is driven to its end, and the bytes arrive.
#[test]
fn a_receive_stream_awaited_elsewhere_delivers_after_the_runtime_is_dropped() {
    let rt = current_thread();
    let (engine, stream, mut peer) = connected_on(&rt);
    let rx = awaited_elsewhere(rt, move |started| {
        let mut rx_stream = stream.recv_stream();
        let next = futures::executor::block_on(started_first(rx_stream.next(), started));
        next.map(|r| r.map(|b| b.to_vec()))
    });
    peer.write_all(b"hello").unwrap();
    let got = rx
        .recv_timeout(GUARD)
        .expect("the receive stream hung once its runtime was dropped");
    assert_eq!(
        got.expect("the stream ended").expect("the receive failed"),
        b"hello"
    );
    drop(engine);
}

/// A connect submitted by the thread of the runtime that built the engine,
/// waiting on a listener whose backlog is full, awaited by a task of
/// another runtime; then that thread exits and the kernel cancels the
/// connect. It is made again (on a new socket) and connects once the
/// backlog has room: not `ECANCELED`.
#[test]
fn a_connect_whose_submitting_thread_exits_is_made_again() {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    listener.listen(0).unwrap();
    let listener: std::net::TcpListener = listener.into();
    let addr = listener.local_addr().unwrap();
    // Fill the backlog: these are never accepted until the end.
    let fillers: Vec<_> = (0..4)
        .map(|_| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            let _ = s.connect(&addr.into());
            s
        })
        .collect();
    let (engine, exit_builder) = built_on_a_thread();
    let rt = current_thread();
    let connected = rt.block_on(async {
        let e = engine.clone();
        let submitted = SubmittedSince::now(&engine);
        let connect = tokio::spawn(async move { TcpStream::connect_with(&e, addr).await });
        submitted.wait("the connect").await;
        exit_builder();
        listener.set_nonblocking(true).unwrap();
        let accepting = async {
            loop {
                match listener.accept() {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        };
        let connect = async {
            tokio::time::timeout(GUARD, connect)
                .await
                .expect("the connect never finished")
                .unwrap()
        };
        tokio::select! {
            res = connect => res,
            () = accepting => unreachable!("the accept loop never ends"),
        }
    });
    let stream = connected.expect("the connect failed");
    assert_eq!(stream.peer_addr().unwrap(), addr);
    drop(fillers);
}

/// The default engine (`AsyncEngine::current`), which `bind` and
/// `connect` without an engine use: on a tokio runtime with I/O and
/// io_uring it is the runtime's own, driven by it; off any runtime, and
/// on the thread-pool backend, the process's, with its driver thread.
/// Sockets on it need no handle, as on tokio.
#[test]
fn the_default_engine_is_the_runtimes_own_or_the_processes() {
    let off_runtime = AsyncEngine::current().unwrap();
    assert!(matches!(off_runtime.driving(), Driving::Thread));
    for rt in [current_thread(), multi_thread()] {
        rt.block_on(async {
            let engine = AsyncEngine::current().unwrap();
            let ring = engine.backend() == Backend::IoUring;
            assert_eq!(is_caller_driven(&engine), ring, "{:?}", engine.driving());
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (accepted, client) = tokio::join!(listener.accept(), TcpStream::connect(addr));
            let (served, peer) = accepted.unwrap();
            let client = client.unwrap();
            assert_eq!(client.peer_addr().unwrap(), addr);
            assert_eq!(client.local_addr().unwrap(), peer);
            client.write_all(b"default".to_vec()).await.0.unwrap();
            let (n, buf) = served.read(vec![0u8; 7]).await;
            assert_eq!(&buf[..n.unwrap()], b"default");
        });
    }
}

/// Host names resolve as tokio's `ToSocketAddrs` resolves them (the look-up
/// made off the executor's thread), and a name that does not resolve is
/// an error naming it.
#[test]
fn connect_resolves_host_names_and_names_the_one_that_fails() {
    current_thread().block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let by_pair = TcpStream::connect(("localhost", port)).await;
        let by_string = TcpStream::connect(format!("localhost:{port}")).await;
        for client in [by_pair, by_string] {
            let client = client.expect("localhost resolves to 127.0.0.1 or ::1");
            assert_eq!(client.peer_addr().unwrap().port(), port);
        }
        let addrs: Vec<_> = blockio::net::lookup_host("127.0.0.1:9")
            .await
            .unwrap()
            .collect();
        assert_eq!(addrs, ["127.0.0.1:9".parse().unwrap()]);
        let err = TcpStream::connect("no-such-host.invalid:80")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no-such-host.invalid:80"), "{err}");
    });
}
