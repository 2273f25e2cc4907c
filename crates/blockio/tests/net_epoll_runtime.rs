//! The thread-pool backend's epoll sets, one per tokio runtime whose
//! tasks wait, each read on its runtime: a readiness wakes the runtime's
//! own thread, not the readiness thread, and no other runtime (counted,
//! not timed); reads made outside any running runtime (a plain thread,
//! a runtime only entered) are served by the readiness thread's set, and
//! the sockets of a runtime dropped with reads waiting move there. Each
//! test builds its own thread-pool engine, so they hold on either
//! backend.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

use blockio::aio::{AsyncEngine, Driving, ReadinessCounts};
use blockio::net::{TcpListener, TcpStream};
use blockio::BackendChoice;

mod common;
use common::{current_thread, one_worker};

/// A hang guard, far beyond what any step takes.
const GUARD: Duration = Duration::from_secs(30);

/// A thread-pool engine whose sets' events are taken on the runtimes
/// whose tasks wait (`Driving::Auto`; with `Thread` only the readiness
/// thread takes them), built outside any runtime: `Auto` on a runtime
/// would try (and drop) a caller-driven engine first.
fn pool_engine() -> AsyncEngine {
    assert!(tokio::runtime::Handle::try_current().is_err());
    AsyncEngine::builder()
        .backend(BackendChoice::ThreadPool)
        .driving(Driving::Auto)
        .build()
        .unwrap()
}

/// Who took the engine's readiness set's events so far.
fn counts(engine: &AsyncEngine) -> ReadinessCounts {
    engine
        .readiness_counts()
        .expect("a thread-pool engine's set")
}

/// Waits, bounded by [`GUARD`], until `done` holds; `what` names it.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < GUARD, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A std peer of `addr` that echoes every byte until the stream ends.
fn echo_peer(addr: SocketAddr) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(2 * GUARD)).unwrap();
        let mut b = [0u8; 64];
        loop {
            match c.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => c.write_all(&b[..n]).unwrap(),
            }
        }
    })
}

/// A listener on `engine` and a stream accepted from a std peer of it.
async fn connected(engine: &AsyncEngine) -> (TcpStream, std::net::TcpStream) {
    let listener = TcpListener::bind_with(engine, "127.0.0.1:0").await.unwrap();
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    // Only a hang makes the peer's read or write wait a minute.
    peer.set_read_timeout(Some(2 * GUARD)).unwrap();
    peer.set_write_timeout(Some(2 * GUARD)).unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    (stream, peer)
}

/// What a reader thread reports: `None` once its read waits, then the
/// read's result.
type Report = Option<(usize, Vec<u8>)>;

/// A read of 4 bytes from `s`, polled once (it must wait: `None` is sent
/// on `parked` then), then awaited.
async fn parked_read(
    s: &TcpStream,
    parked: &mpsc::Sender<Report>,
) -> blockio::aio::BufResult<usize, Vec<u8>> {
    let mut read = std::pin::pin!(s.read(vec![0u8; 4]));
    match futures::poll!(read.as_mut()) {
        Poll::Pending => {
            parked.send(None).unwrap();
            read.await
        }
        // Reported as the read's result: the caller finds it did not wait.
        Poll::Ready(done) => done,
    }
}

/// Makes current-thread runtime `rt`'s set and runs its task once on the
/// runtime's thread: from then on every wait of its tasks goes there (the
/// first, made before that, goes to the readiness thread's set).
fn with_its_set(rt: &tokio::runtime::Runtime, engine: &AsyncEngine) {
    let e = engine.clone();
    let warm = rt.spawn(async move {
        let (s, mut peer) = connected(&e).await;
        let mut read = std::pin::pin!(s.read(vec![0u8; 1]));
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "nothing was sent"
        );
        peer.write_all(b"w").unwrap();
        let (n, _) = tokio::time::timeout(GUARD, read)
            .await
            .expect("the first read never completed");
        assert_eq!(n.unwrap(), 1);
    });
    rt.block_on(warm).unwrap();
    assert!(
        engine_polled(rt, engine),
        "the runtime's set's task never ran"
    );
}

/// Whether the task reading `rt`'s set has been polled.
fn engine_polled(rt: &tokio::runtime::Runtime, engine: &AsyncEngine) -> bool {
    engine.readiness_polls_on(rt.handle()).unwrap_or(0) >= 1
}

/// On a current-thread runtime, each exchange's reply (a read that waits
/// in the set, then a readiness) is taken by the runtime's thread: the
/// readiness thread is not woken per exchange, as it was when it handed
/// every readiness over (at least one switch an exchange).
#[test]
fn a_readiness_wakes_the_runtime_thread_not_the_readiness_thread() {
    const EXCHANGES: u64 = 1000;
    let rt = current_thread();
    let engine = pool_engine();
    // In a task, as the test's other runtimes' reads are.
    let exchanges = rt.spawn(async move {
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let peer = echo_peer(listener.local_addr().unwrap());
        let (s, _) = listener.accept().await.unwrap();
        s.set_nodelay(true).unwrap();
        // The first exchange makes this runtime's set: its read, polled
        // before the byte is sent, waits in the set.
        {
            let mut first = std::pin::pin!(s.read(vec![0u8; 1]));
            let polled = futures::poll!(first.as_mut());
            assert!(polled.is_pending(), "nothing was sent");
            let (r, _) = s.write_all(vec![0u8]).await;
            r.unwrap();
            let (n, _) = first.await;
            assert_eq!(n.unwrap(), 1);
        }
        assert_eq!(
            counts(&engine).runtime_sets,
            1,
            "the runtime has no set of its own"
        );
        let before = counts(&engine).thread_events;
        let mut buf = vec![0u8; 1];
        for i in 0..EXCHANGES {
            let byte = (i % 251) as u8;
            let (r, _) = s.write_all(vec![byte]).await;
            r.unwrap();
            let (n, b) = s.read(buf).await;
            assert_eq!(n.unwrap(), 1);
            assert_eq!(b[0], byte, "exchange {i} got another byte");
            buf = b;
        }
        let taken = counts(&engine).thread_events - before;
        assert!(
            taken < EXCHANGES / 4,
            "the readiness thread took {taken} events in {EXCHANGES} exchanges"
        );
        drop(s);
        peer.join().unwrap();
    });
    rt.block_on(exchanges).unwrap();
}

/// A runtime with a set of its own whose workers are then all blocked in
/// tasks: a read awaited on another thread (no runtime) still gets its
/// bytes, from the readiness thread's set.
#[test]
fn readiness_is_seen_while_every_worker_is_blocked() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = pool_engine();
    let ((a, _peer_a), (b, mut peer_b)) = rt.block_on(async {
        let a = connected(&engine).await;
        let b = connected(&engine).await;
        (a, b)
    });
    // A read of `a` waits from a task of the runtime, in the runtime's
    // set (its first poll, on a worker, parks the read).
    let (parked_tx, parked_rx) = mpsc::channel();
    let waiting_read = rt.spawn(async move {
        let mut read = std::pin::pin!(a.read(vec![0u8; 1]));
        let first = futures::poll!(read.as_mut());
        parked_tx.send(matches!(first, Poll::Pending)).unwrap();
        read.await
    });
    assert!(
        parked_rx.recv_timeout(GUARD).unwrap(),
        "a's read did not wait"
    );
    assert_eq!(
        counts(&engine).runtime_sets,
        1,
        "the runtime has no set of its own"
    );

    // Both workers blocked until released.
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Arc::new(Mutex::new(release_rx));
    let (blocked_tx, blocked_rx) = mpsc::channel();
    for _ in 0..2 {
        let (release, blocked) = (release_rx.clone(), blocked_tx.clone());
        rt.spawn(async move {
            blocked.send(()).unwrap();
            let _ = release.lock().unwrap().recv();
        });
    }
    for _ in 0..2 {
        blocked_rx
            .recv_timeout(GUARD)
            .expect("a worker never blocked");
    }

    let (got_tx, got_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (n, buf) = futures::executor::block_on(parked_read(&b, &got_tx));
        got_tx.send(Some((n.unwrap(), buf))).unwrap();
        b
    });
    assert_eq!(
        got_rx.recv_timeout(GUARD).unwrap(),
        None,
        "b's read did not wait"
    );
    peer_b.write_all(b"ping").unwrap();
    let got = got_rx.recv_timeout(GUARD);
    drop(release_tx);
    let (n, buf) = got
        .expect("the read never completed while the workers were blocked")
        .unwrap();
    assert_eq!(&buf[..n], &b"ping"[..n]);
    assert!(n > 0);
    let _b = reader.join().unwrap();
    waiting_read.abort();
    drop(rt);
}

/// A current-thread runtime with a set of its own that is then not run
/// (its `block_on` returned): a read awaited on another thread gets its
/// bytes, from the readiness thread's set.
#[test]
fn readiness_is_seen_while_the_holding_runtime_is_not_run() {
    let rt = current_thread();
    let engine = pool_engine();
    let ((a, _peer_a), (b, mut peer_b)) = rt.block_on(async {
        let a = connected(&engine).await;
        let b = connected(&engine).await;
        (a, b)
    });
    // From a task of the runtime, in the runtime's set.
    let claimed = rt.spawn(async move {
        let mut read = std::pin::pin!(a.read(vec![0u8; 1]));
        let first = futures::poll!(read.as_mut());
        assert!(matches!(first, Poll::Pending), "a's read did not wait");
    });
    rt.block_on(claimed).unwrap();
    assert_eq!(
        counts(&engine).runtime_sets,
        1,
        "the runtime has no set of its own"
    );
    // Not run from here on: its set's task is never polled.
    let (got_tx, got_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (n, buf) = futures::executor::block_on(parked_read(&b, &got_tx));
        got_tx.send(Some((n.unwrap(), buf))).unwrap();
    });
    assert_eq!(
        got_rx.recv_timeout(GUARD).unwrap(),
        None,
        "b's read did not wait"
    );
    peer_b.write_all(b"pong").unwrap();
    let (n, buf) = got_rx
        .recv_timeout(GUARD)
        .expect("the read never completed while the runtime was not run")
        .unwrap();
    assert!(n > 0);
    assert_eq!(&buf[..n], &b"pong"[..n]);
    reader.join().unwrap();
    drop(rt);
}

/// A runtime dropped while its tasks' reads wait in its set: its sockets
/// move to the readiness thread's set, and the streams, read from
/// another thread, get every byte their peers send.
#[test]
fn a_runtime_dropped_with_reads_waiting_hands_the_set_back() {
    let rt = current_thread();
    let engine = pool_engine();
    let pairs: Vec<(TcpStream, std::net::TcpStream)> =
        rt.block_on(async { futures::future::join_all((0..8).map(|_| connected(&engine))).await });
    let (streams, mut peers): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
    with_its_set(&rt, &engine);
    let streams: Vec<std::sync::Arc<TcpStream>> =
        streams.into_iter().map(std::sync::Arc::new).collect();
    let (parked_tx, parked_rx) = mpsc::channel();
    for s in &streams {
        let (s, parked) = (s.clone(), parked_tx.clone());
        rt.spawn(async move {
            let mut read = std::pin::pin!(s.read(vec![0u8; 1]));
            let first = futures::poll!(read.as_mut());
            parked.send(matches!(first, Poll::Pending)).unwrap();
            read.await
        });
    }
    // Runs the tasks until each has parked its read.
    rt.block_on(async {
        for _ in &streams {
            while parked_rx.try_recv().map(|p| assert!(p)).is_err() {
                tokio::task::yield_now().await;
            }
        }
    });
    assert_eq!(
        counts(&engine).runtime_sets,
        1,
        "the runtime has no set of its own"
    );
    let moved = counts(&engine).moves;
    drop(rt);
    // Before the peers write: the dropped set's task handed its sockets
    // to the thread's set (their reads were dropped with the tasks; the
    // sockets stay kept in a set until they close).
    assert_eq!(
        counts(&engine).moves - moved,
        streams.len() as u64,
        "the dropped runtime's sockets did not move"
    );

    let reader = std::thread::spawn(move || {
        futures::executor::block_on(async {
            let mut got = Vec::new();
            for (i, s) in streams.iter().enumerate() {
                // A read may return part of what was sent (the dropped
                // read's byte first): read until the peer's two bytes.
                let mut all = Vec::new();
                while all.len() < format!("s{i}").len() {
                    let (n, buf) = s.read(vec![0u8; 8]).await;
                    let n = n.unwrap();
                    assert!(n > 0, "stream {i} ended");
                    all.extend_from_slice(&buf[..n]);
                }
                got.push(all);
            }
            got
        })
    });
    for (i, p) in peers.iter_mut().enumerate() {
        p.write_all(format!("s{i}").as_bytes()).unwrap();
    }
    let got = reader.join().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, format!("s{i}").as_bytes(), "stream {i}");
    }
}

/// A current-thread runtime only entered (`Handle::enter`) while another
/// executor polls its reads on its thread, which tokio does not tell
/// apart from its `block_on`'s future: no set is made for the runtime
/// (whose reactor nobody runs), and every read gets its bytes from the
/// readiness thread's set.
#[test]
fn a_runtime_only_entered_leaves_its_reads_to_the_thread() {
    const EXCHANGES: usize = 20;
    let rt = current_thread();
    let engine = pool_engine();
    let (s, peer) = rt.block_on(connected(&engine));
    let before = counts(&engine);
    let (parked_tx, parked_rx) = mpsc::channel::<Report>();
    let writer = std::thread::spawn(move || {
        let mut peer = peer;
        for i in 0..EXCHANGES {
            assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
            peer.write_all(&[i as u8]).unwrap();
        }
    });
    // On a thread of its own, so that a read that never completes fails
    // the test instead of hanging it.
    let runtime = rt.handle().clone();
    let (got_tx, got_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let _entered = runtime.enter();
        for _ in 0..EXCHANGES {
            let (n, b) = futures::executor::block_on(parked_read(&s, &parked_tx));
            got_tx.send((n.unwrap(), b[0])).unwrap();
        }
    });
    for i in 0..EXCHANGES {
        let got = got_rx
            .recv_timeout(GUARD)
            .expect("a read where the runtime is only entered never completed");
        assert_eq!(got, (1, i as u8));
    }
    reader.join().unwrap();
    writer.join().unwrap();
    let after = counts(&engine);
    assert_eq!(after.runtime_sets, before.runtime_sets, "{after:?}");
    assert!(
        after.thread_events >= before.thread_events + EXCHANGES as u64,
        "the readiness thread did not serve the reads: {before:?} then {after:?}"
    );
}

/// An idle runtime with a read waiting in its own set, beside a busy one
/// doing exchanges: the busy runtime's readiness never wakes the idle
/// runtime's task (its polls counted, not timed), while the busy
/// runtime's own set is read on it.
#[test]
fn an_idle_runtime_is_not_woken_by_another_runtimes_readiness() {
    const EXCHANGES: u64 = 500;
    let engine = pool_engine();
    let idle = one_worker();
    let (a, mut peer_a) = idle.block_on(connected(&engine));
    let (parked_tx, parked_rx) = mpsc::channel();
    let waiting = idle.spawn(async move { parked_read(&a, &parked_tx).await.0.unwrap() });
    assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
    // The idle runtime's task polled once (its set not yet readable).
    wait_for("the idle runtime's set read", || {
        engine.readiness_polls_on(idle.handle()).unwrap_or(0) >= 1
    });
    let idle_before = engine.readiness_polls_on(idle.handle()).unwrap();

    let busy = current_thread();
    let b_engine = engine.clone();
    let exchanges = busy.spawn(async move {
        let listener = TcpListener::bind_with(&b_engine, "127.0.0.1:0")
            .await
            .unwrap();
        let peer = echo_peer(listener.local_addr().unwrap());
        let (s, _) = listener.accept().await.unwrap();
        s.set_nodelay(true).unwrap();
        // A first read polled before anything is sent waits, and makes
        // this runtime's set (the accept and the replies may all find
        // their socket ready).
        {
            let mut first = std::pin::pin!(s.read(vec![0u8; 1]));
            let polled = futures::poll!(first.as_mut());
            assert!(polled.is_pending(), "nothing was sent");
            let (r, _) = s.write_all(vec![0u8]).await;
            r.unwrap();
            let (n, _) = first.await;
            assert_eq!(n.unwrap(), 1);
        }
        let mut buf = vec![0u8; 1];
        for i in 0..EXCHANGES {
            let byte = (i % 251) as u8;
            let (r, _) = s.write_all(vec![byte]).await;
            r.unwrap();
            let (n, b) = s.read(buf).await;
            assert_eq!(n.unwrap(), 1);
            assert_eq!(b[0], byte, "exchange {i} got another byte");
            buf = b;
        }
        drop(s);
        peer.join().unwrap();
    });
    busy.block_on(exchanges).unwrap();
    let busy_polls = engine.readiness_polls_on(busy.handle()).unwrap();
    let idle_after = engine.readiness_polls_on(idle.handle()).unwrap();
    assert_eq!(
        idle_after, idle_before,
        "the idle runtime was woken by the busy one's readiness"
    );
    // Its set's task ran at least once (how many replies waited in its
    // set depends on the peer's speed).
    assert!(busy_polls >= 1, "the busy runtime's set was never read");
    assert_eq!(counts(&engine).runtime_sets, 2);
    peer_a.write_all(b"ping").unwrap();
    let got = idle.block_on(async { tokio::time::timeout(GUARD, waiting).await });
    assert_eq!(
        got.expect("the idle runtime's read never completed")
            .unwrap(),
        4
    );
    assert!(engine.readiness_polls_on(idle.handle()).unwrap() > idle_after);
}

/// A stream read from a task of one runtime, then from a task of
/// another: its socket moves to the second runtime's set, which then
/// serves its reads (the first runtime's set's task polled no more for
/// it), and it moves back when read on the first again.
#[test]
fn a_socket_read_on_another_runtime_moves_to_its_set() {
    let engine = pool_engine();
    let rt_a = one_worker();
    let rt_b = one_worker();
    let (s, mut peer) = rt_a.block_on(connected(&engine));
    let s = std::sync::Arc::new(s);
    // A read that waits from a task of `rt`, then gets what is sent.
    let mut read_on = |rt: &tokio::runtime::Runtime, what: &'static [u8]| {
        let (parked_tx, parked_rx) = mpsc::channel();
        let s = s.clone();
        let read = rt.spawn(async move {
            let (n, buf) = parked_read(&s, &parked_tx).await;
            buf[..n.unwrap()].to_vec()
        });
        assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
        peer.write_all(what).unwrap();
        let got = rt.block_on(async { tokio::time::timeout(GUARD, read).await });
        assert_eq!(got.expect("the read never completed").unwrap(), what);
    };
    read_on(&rt_a, b"a1");
    let a_polls = engine.readiness_polls_on(rt_a.handle()).unwrap();
    let moves = counts(&engine).moves;
    read_on(&rt_b, b"b1");
    assert_eq!(counts(&engine).moves, moves + 1, "not moved to B's set");
    assert!(engine.readiness_polls_on(rt_b.handle()).unwrap() >= 1);
    assert_eq!(
        engine.readiness_polls_on(rt_a.handle()).unwrap(),
        a_polls,
        "A's set was read for a socket that had left it"
    );
    read_on(&rt_a, b"a2");
    assert_eq!(counts(&engine).moves, moves + 2, "not moved back to A's");
    assert_eq!(counts(&engine).runtime_sets, 2);
}

/// `Driving::Thread` on the thread pool: the readiness thread alone
/// takes the set's events, and a runtime without I/O is never asked to.
#[test]
fn driving_thread_leaves_the_set_to_the_readiness_thread() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let engine = AsyncEngine::builder()
        .backend(BackendChoice::ThreadPool)
        .driving(Driving::Thread)
        .build()
        .unwrap();
    let (a, mut peer) = rt.block_on(connected(&engine));
    let (parked_tx, parked_rx) = mpsc::channel();
    let read = rt.spawn(async move { parked_read(&a, &parked_tx).await.0.unwrap() });
    assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
    peer.write_all(b"ping").unwrap();
    let got = rt.block_on(async { tokio::time::timeout(GUARD, read).await });
    assert_eq!(got.expect("the read never completed").unwrap(), 4);
    let c = counts(&engine);
    assert_eq!(c.runtime_sets, 0, "a runtime has a set: {c:?}");
    assert!(c.thread_events > 0, "{c:?}");
}

/// The default engine (`AsyncEngine::current`, built with a driver thread
/// for its ring): on the thread pool, its set is still read on the
/// runtime whose task waits in it; on io_uring no runtime is asked to
/// read a set of its.
#[test]
fn the_default_engines_pool_set_is_read_on_the_runtime() {
    let engine = AsyncEngine::current().unwrap();
    let rt = current_thread();
    let pool = engine.backend() == blockio::Backend::ThreadPool;
    let (a, mut peer) = rt.block_on(connected(&engine));
    let (parked_tx, parked_rx) = mpsc::channel();
    let read = rt.spawn(async move { parked_read(&a, &parked_tx).await.0.unwrap() });
    let writer = std::thread::spawn(move || {
        assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
        peer.write_all(b"ping").unwrap();
        peer
    });
    let got = rt.block_on(async { tokio::time::timeout(GUARD, read).await });
    assert_eq!(got.expect("the read never completed").unwrap(), 4);
    let _peer = writer.join().unwrap();
    let counts = engine.readiness_counts();
    if pool {
        let c = counts.expect("the pool's set");
        assert_eq!(c.runtime_sets, 1, "the runtime has no set: {c:?}");
    } else {
        // The ring engine's own set, if one started, is its thread's.
        assert_eq!(counts.map_or(0, |c| c.runtime_sets), 0, "{counts:?}");
    }
}

/// Runtime A, on a thread of its own: a current-thread runtime whose
/// read waited in its own set, then whose one
/// thread a task holds until the returned sender is sent to (or dropped).
fn a_runtime_holding_the_set_and_its_thread(
    engine: &AsyncEngine,
) -> (std::thread::JoinHandle<()>, mpsc::Sender<()>) {
    let (a_ready_tx, a_ready) = mpsc::channel::<()>();
    let (release_a, a_released) = mpsc::channel::<()>();
    let a_engine = engine.clone();
    let runtime_a = std::thread::spawn(move || {
        let rt = current_thread();
        let busy = rt.spawn(async move {
            let (a, _peer_a) = connected(&a_engine).await;
            let mut read = std::pin::pin!(a.read(vec![0u8; 1]));
            assert!(
                futures::poll!(read.as_mut()).is_pending(),
                "nothing was sent"
            );
            assert_eq!(
                counts(&a_engine).runtime_sets,
                1,
                "runtime A has no set of its own"
            );
            // Runtime A's set's task runs once before the thread is held.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            a_ready_tx.send(()).unwrap();
            // Holds runtime A's only thread until B's read is done.
            let _ = a_released.recv_timeout(GUARD);
        });
        rt.block_on(busy).unwrap();
    });
    a_ready
        .recv_timeout(GUARD)
        .expect("runtime A never got busy");
    (runtime_a, release_a)
}

/// Runtime B's read, once nothing was sent: the bytes sent then, read.
async fn read_what_is_sent(engine: &AsyncEngine) -> (usize, Vec<u8>) {
    let (b, mut peer_b) = connected(engine).await;
    let mut read = std::pin::pin!(b.read(vec![0u8; 4]));
    assert!(
        futures::poll!(read.as_mut()).is_pending(),
        "nothing was sent"
    );
    peer_b.write_all(b"pong").unwrap();
    let (n, buf) = tokio::time::timeout(GUARD, read)
        .await
        .expect("runtime B's read never completed");
    (n.unwrap(), buf)
}

/// Two runtimes sharing the engine, the first of which holds its one
/// thread in a task (until the second's read is done) after its own read
/// waited in its set: a read of the second runtime, in `in_task` a task
/// of its (read from its own set), else its `block_on`'s own future (the
/// shape of `#[tokio::test]`, read from the readiness thread's set), gets
/// the bytes sent to it while the first runtime's thread is held.
fn a_read_on_runtime_b_does_not_wait_for_busy_runtime_a(in_task: bool) {
    let engine = pool_engine();
    let (runtime_a, release_a) = a_runtime_holding_the_set_and_its_thread(&engine);
    let rt = current_thread();
    let b_engine = engine.clone();
    let (n, buf) = if in_task {
        let read = rt.spawn(async move { read_what_is_sent(&b_engine).await });
        rt.block_on(read).unwrap()
    } else {
        rt.block_on(read_what_is_sent(&b_engine))
    };
    let seen = counts(&engine);
    release_a.send(()).unwrap();
    runtime_a.join().unwrap();
    assert_eq!(&buf[..n], &b"pong"[..n]);
    assert!(n > 0);
    let sets = if in_task { 2 } else { 1 };
    assert_eq!(seen.runtime_sets, sets, "{seen:?}");
}

#[test]
fn a_read_on_one_runtime_does_not_wait_for_another_busy_runtime() {
    a_read_on_runtime_b_does_not_wait_for_busy_runtime_a(true);
}

#[test]
fn a_read_in_block_on_does_not_wait_for_another_busy_runtime() {
    a_read_on_runtime_b_does_not_wait_for_busy_runtime_a(false);
}

/// A stream whose read waits from a task of multi-thread runtime A while
/// its writes wait from a task of current-thread runtime B (after B's
/// set's task has run, so that they wait in B's set), which then idles
/// (`hold` false: its `block_on` returned, the runtime kept) or has its
/// one thread held by a task (`hold` true) when the bytes for A's read
/// come: A's read gets them, served where it waits, on A.
fn a_stream_waited_on_from_two_runtimes(hold: bool) {
    const BIG: usize = 16 << 20;
    let engine = pool_engine();
    let rt_a = one_worker();
    let (s, peer) = rt_a.block_on(connected(&engine));
    let s = std::sync::Arc::new(s);
    let (parked_tx, parked_rx) = mpsc::channel();
    let r = s.clone();
    let read = rt_a.spawn(async move {
        let (n, buf) = parked_read(&r, &parked_tx).await;
        buf[..n.unwrap()].to_vec()
    });
    assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
    let joins = counts(&engine).moves;

    // The peer drains what B writes once B's write waits, then, once B
    // idles or is held, sends A's bytes.
    let (drain_tx, drain_rx) = mpsc::channel::<()>();
    let (idle_tx, idle_rx) = mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let mut peer = peer;
        drain_rx
            .recv_timeout(GUARD)
            .expect("B's write never waited");
        let mut sink = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < BIG {
            let n = peer.read(&mut sink).unwrap();
            assert!(n > 0, "the stream ended");
            got += n;
        }
        idle_rx.recv_timeout(GUARD).expect("B never idled");
        peer.write_all(b"ping").unwrap();
        peer
    });
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let b_engine = engine.clone();
    let runtime_b = std::thread::spawn(move || {
        let rt_b = current_thread();
        with_its_set(&rt_b, &b_engine);
        let write = rt_b.spawn(async move {
            let mut write = std::pin::pin!(s.write_all(vec![7u8; BIG]));
            assert!(
                futures::poll!(write.as_mut()).is_pending(),
                "B's write did not wait"
            );
            drain_tx.send(()).unwrap();
            let (r, _) = tokio::time::timeout(GUARD, write)
                .await
                .expect("B's write never completed");
            r.unwrap();
        });
        rt_b.block_on(write).unwrap();
        if hold {
            let held = rt_b.spawn(async move {
                idle_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(GUARD);
            });
            rt_b.block_on(held).unwrap();
        } else {
            idle_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(GUARD);
        }
    });
    let got = rt_a.block_on(async { tokio::time::timeout(GUARD, read).await });
    let seen = counts(&engine);
    release_tx.send(()).unwrap();
    runtime_b.join().unwrap();
    let _peer = peer.join().unwrap();
    let got = got.expect("A's read never completed while B was not run");
    assert_eq!(got.unwrap(), b"ping");
    assert!(
        seen.moves > joins,
        "B's write never waited beside A's read: {seen:?}"
    );
}

#[test]
fn a_read_on_one_runtime_is_served_while_a_write_waits_on_an_idle_one() {
    a_stream_waited_on_from_two_runtimes(false);
}

#[test]
fn a_read_on_one_runtime_is_served_while_a_write_waits_on_a_held_one() {
    a_stream_waited_on_from_two_runtimes(true);
}

/// A read from a task of multi-thread runtime A polled with
/// current-thread runtime B entered (`Handle::enter`; B never run, as
/// where a library enters a handle it was given): the read does not wait
/// in B's set, which nobody reads, and gets the bytes sent to it.
#[test]
fn a_read_with_another_runtime_entered_is_served() {
    let engine = pool_engine();
    let rt_a = one_worker();
    let rt_b = current_thread();
    let (s, mut peer) = rt_a.block_on(connected(&engine));
    let b = rt_b.handle().clone();
    let (parked_tx, parked_rx) = mpsc::channel();
    let read = rt_a.spawn(async move {
        let mut read = std::pin::pin!(parked_read(&s, &parked_tx));
        let (n, buf) = std::future::poll_fn(|cx| {
            let _entered = b.enter();
            std::future::Future::poll(read.as_mut(), cx)
        })
        .await;
        buf[..n.unwrap()].to_vec()
    });
    assert_eq!(parked_rx.recv_timeout(GUARD).unwrap(), None);
    peer.write_all(b"ping").unwrap();
    let got = rt_a.block_on(async { tokio::time::timeout(GUARD, read).await });
    let got = got.expect("the read never completed while B was entered, not run");
    assert_eq!(got.unwrap(), b"ping");
    drop(rt_b);
}

/// `EXCHANGES` trait reads (`tokio::io::AsyncReadExt::read`) of `s`, each
/// polled once while nothing was sent (it must wait: `None` goes to
/// `parked` then), then awaited: the bytes each got.
async fn parked_trait_reads(
    s: &mut TcpStream,
    parked: &mpsc::Sender<Report>,
    exchanges: usize,
) -> Vec<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    for _ in 0..exchanges {
        let mut buf = [0u8; 8];
        let mut read = std::pin::pin!(AsyncReadExt::read(&mut *s, &mut buf));
        let n = match futures::poll!(read.as_mut()) {
            Poll::Pending => {
                parked.send(None).unwrap();
                tokio::time::timeout(GUARD, read)
                    .await
                    .expect("a trait read never completed")
            }
            Poll::Ready(done) => done,
        }
        .unwrap();
        got.push(buf[..n].to_vec());
    }
    got
}

/// A std peer writing one message per read reported waiting on the
/// channel it returns: `i` as a byte for the `i`th.
fn write_when_parked(
    mut peer: std::net::TcpStream,
    exchanges: usize,
) -> (std::thread::JoinHandle<()>, mpsc::Sender<Report>) {
    let (parked_tx, parked_rx) = mpsc::channel::<Report>();
    let writer = std::thread::spawn(move || {
        for i in 0..exchanges {
            let parked = parked_rx.recv_timeout(GUARD);
            assert_eq!(parked.expect("no read waited"), None);
            peer.write_all(&[i as u8]).unwrap();
        }
    });
    (writer, parked_tx)
}

/// The messages [`write_when_parked`] sends.
fn messages(exchanges: usize) -> Vec<Vec<u8>> {
    (0..exchanges).map(|i| vec![i as u8]).collect()
}

/// Trait reads on the thread pool from a task of a multi-thread runtime
/// of one worker, each waiting before its peer writes, get every message,
/// and none waits in a readiness set of the engine's: no set is made for
/// the runtime and the readiness thread takes no event. They wait in
/// tokio's own reactor, as tokio's reads do (`net::poll_io`).
#[test]
fn trait_reads_on_a_multi_thread_runtime_wait_in_its_reactor() {
    const EXCHANGES: usize = 20;
    let engine = pool_engine();
    let rt = one_worker();
    let (mut s, peer) = rt.block_on(connected(&engine));
    let before = counts(&engine);
    let (writer, parked) = write_when_parked(peer, EXCHANGES);
    let reads = rt.spawn(async move { parked_trait_reads(&mut s, &parked, EXCHANGES).await });
    let got = rt.block_on(reads).unwrap();
    writer.join().unwrap();
    assert_eq!(got, messages(EXCHANGES));
    let after = counts(&engine);
    assert_eq!(
        (after.runtime_sets, after.moves, after.thread_events),
        (before.runtime_sets, before.moves, before.thread_events),
        "trait reads waited in a readiness set: {before:?} then {after:?}"
    );
}

/// Trait reads on the thread pool from a task of a current-thread
/// runtime (whose set has run on its thread), each waiting before its
/// peer writes, get every message, and none waits in a readiness set:
/// the runtime's set's task is never woken, and the readiness thread
/// takes no event. Then the same stream read from a task of a second
/// current-thread runtime, the first one not run any more, moves to the
/// second's reactor and gets every message there too.
#[test]
fn trait_reads_on_a_current_thread_runtime_wait_in_its_reactor() {
    const EXCHANGES: usize = 20;
    let engine = pool_engine();
    let rt = current_thread();
    with_its_set(&rt, &engine);
    let (mut s, peer) = rt.block_on(connected(&engine));
    let before = counts(&engine);
    let polls_before = engine.readiness_polls_on(rt.handle()).unwrap();
    let (writer, parked) = write_when_parked(peer, 2 * EXCHANGES);
    let reads = rt.spawn(async move {
        let got = parked_trait_reads(&mut s, &parked, EXCHANGES).await;
        (s, parked, got)
    });
    let (mut s, parked, got) = rt.block_on(reads).unwrap();
    assert_eq!(got, messages(EXCHANGES));
    let after = counts(&engine);
    let polls_after = engine.readiness_polls_on(rt.handle()).unwrap();
    assert_eq!(
        (polls_after, after.moves, after.thread_events),
        (polls_before, before.moves, before.thread_events),
        "trait reads waited in a readiness set: {before:?} then {after:?}"
    );
    let rt_b = current_thread();
    with_its_set(&rt_b, &engine);
    let reads = rt_b.spawn(async move { parked_trait_reads(&mut s, &parked, EXCHANGES).await });
    let got = rt_b.block_on(reads).unwrap();
    writer.join().unwrap();
    let expected = messages(2 * EXCHANGES);
    assert_eq!(got, expected[EXCHANGES..]);
    drop(rt);
}

/// A trait read from a task of multi-thread runtime A polled with
/// current-thread runtime B entered (B never run): it does not wait in
/// B's reactor, which nobody runs, and gets the bytes sent to it (as an
/// owned read does: `a_read_with_another_runtime_entered_is_served`).
#[test]
fn a_trait_read_with_another_runtime_entered_is_served() {
    let engine = pool_engine();
    let rt_a = one_worker();
    let rt_b = current_thread();
    let (mut s, peer) = rt_a.block_on(connected(&engine));
    let (writer, parked) = write_when_parked(peer, 1);
    let b = rt_b.handle().clone();
    let read = rt_a.spawn(async move {
        let mut read = std::pin::pin!(parked_trait_reads(&mut s, &parked, 1));
        std::future::poll_fn(|cx| {
            let _entered = b.enter();
            std::future::Future::poll(read.as_mut(), cx)
        })
        .await
    });
    // Bounded on A's clock: the read's own bound is on B's, which nobody
    // runs either.
    let got = rt_a.block_on(async { tokio::time::timeout(GUARD, read).await });
    let got = got.expect("the trait read never completed while B was entered, not run");
    writer.join().unwrap();
    assert_eq!(got.unwrap(), messages(1));
    drop(rt_b);
}
