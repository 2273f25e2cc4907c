//! A caller-driven engine outlives the tokio runtime that drove it: its
//! streams carry on on the next runtime that uses them (which takes the
//! driving over), bytes a dropped stream still had queued reach the peer
//! once the engine is driven again, and a task on no tokio runtime gets
//! an error saying why, not a hang. On the thread-pool backend nothing
//! needs driving, and the same outcomes hold.

use std::io::{Read, Write};
use std::time::Duration;

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
use blockio::net::{TcpListener, TcpStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::count_io_disabled_panics;

/// A hang guard, far beyond what any step takes.
const GUARD: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn caller_engine(submit: Submit) -> AsyncEngine {
    AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new().submit(submit)))
        .build()
        .unwrap()
}

/// On a first runtime that drives `engine`: a stream accepted from a std
/// peer, with a trait read left in flight; then that runtime is dropped.
fn stream_from_a_dropped_runtime(engine: &AsyncEngine) -> (TcpStream, std::net::TcpStream) {
    let rt = runtime();
    rt.spawn(drive_on_tokio(engine.clone()));
    let (stream, peer) = rt.block_on(async {
        let listener = TcpListener::bind_with(engine, "127.0.0.1:0").await.unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        // A read that waits (the peer has sent nothing): its receive stays
        // in the kernel when the runtime goes.
        let mut one = [0u8; 1];
        let s = &mut stream;
        let waiting = tokio::time::timeout(Duration::from_millis(1), s.read(&mut one)).await;
        assert!(waiting.is_err(), "the read found bytes nobody sent");
        (stream, peer)
    });
    drop(rt);
    (stream, peer)
}

#[test]
fn a_stream_carries_on_on_the_next_runtime() {
    for submit in [Submit::OnStart, Submit::PerRound] {
        let engine = caller_engine(submit);
        let (mut stream, mut peer) = stream_from_a_dropped_runtime(&engine);
        peer.write_all(b"ping").unwrap();
        let rt = runtime();
        rt.block_on(async {
            let s = &mut stream;
            let mut got = [0u8; 4];
            tokio::time::timeout(GUARD, s.read_exact(&mut got))
                .await
                .expect("read_exact on the new runtime never finished")
                .unwrap();
            assert_eq!(&got, b"ping");
            tokio::time::timeout(GUARD, async {
                s.write_all(b"pong").await?;
                s.flush().await
            })
            .await
            .expect("write_all and flush on the new runtime never finished")
            .unwrap();
            // The owned-buffer methods too.
            let (res, _) = tokio::time::timeout(GUARD, stream.write_all(b"!".to_vec()))
                .await
                .expect("an owned write on the new runtime never finished");
            res.unwrap();
        });
        let mut back = [0u8; 5];
        peer.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"pong!");
    }
}

#[test]
fn a_dropped_streams_queued_bytes_reach_the_peer_once_driven_again() {
    const LEN: usize = 8 << 20;
    let engine = caller_engine(Submit::PerRound);
    let rt = runtime();
    rt.spawn(drive_on_tokio(engine.clone()));
    let listener = rt.block_on(async {
        TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap()
    });
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    rt.block_on(async {
        let (mut stream, _) = listener.accept().await.unwrap();
        // More than the socket buffers hold while the peer does not read:
        // most of it is still queued in the stream when it is dropped.
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        assert!(write_until_it_waits(&mut stream, &data).await > 0);
        drop(stream);
    });
    drop(rt);
    // The peer reads on its own thread; the bytes move only once a
    // runtime uses the engine again.
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        peer.set_read_timeout(Some(GUARD)).unwrap();
        let res = peer.read_to_end(&mut got);
        (res.map_err(|e| e.kind()), got)
    });
    let rt = runtime();
    let (res, got) = rt.block_on(async {
        // Any use of the engine on this runtime: a connection of its own.
        let other = TcpStream::connect_with(&engine, listener.local_addr().unwrap());
        let both = async { tokio::join!(listener.accept(), other) };
        let (accepted, connected) = tokio::time::timeout(GUARD, both)
            .await
            .expect("a connection on the new runtime never completed");
        accepted.unwrap();
        connected.unwrap();
        // This runtime now drives the engine: it runs while the peer
        // reads.
        tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap()
    });
    assert_eq!(
        res,
        Ok(got.len()),
        "the peer's read ended in an error after {} bytes",
        got.len()
    );
    assert!(
        got.len() >= 1 << 20,
        "only {} bytes reached the peer",
        got.len()
    );
    assert!(
        got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "the peer received other bytes than were written"
    );
    drop(rt);
}

/// On a runtime that drives `engine`: a stream accepted from `peer`'s
/// listener writes `LEN` bytes through the traits, without a flush, to a
/// peer that does not read yet, and is dropped with most of them queued;
/// then the runtime is dropped.
fn drop_a_writing_stream_with_its_runtime(
    engine: &AsyncEngine,
    len: usize,
    linger: Option<Duration>,
) -> std::net::TcpStream {
    let rt = runtime();
    rt.spawn(drive_on_tokio(engine.clone()));
    let listener =
        rt.block_on(async { TcpListener::bind_with(engine, "127.0.0.1:0").await.unwrap() });
    let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    rt.block_on(async {
        let (mut stream, _) = listener.accept().await.unwrap();
        if let Some(limit) = linger {
            stream.set_drop_linger(limit);
        }
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        assert!(write_until_it_waits(&mut stream, &data).await > 0);
    });
    drop(rt);
    peer
}

#[test]
fn a_dropped_streams_queued_bytes_keep_moving_with_no_runtime_left() {
    let engine = caller_engine(Submit::PerRound);
    let mut peer = drop_a_writing_stream_with_its_runtime(&engine, 8 << 20, None);
    // No runtime uses the engine any more: the peer still gets every
    // byte the stream accepted, then the end.
    peer.set_read_timeout(Some(GUARD)).unwrap();
    let mut got = Vec::new();
    let res = peer.read_to_end(&mut got).map_err(|e| e.kind());
    assert_eq!(
        res,
        Ok(got.len()),
        "the peer's read ended in an error after {} bytes",
        got.len()
    );
    assert!(
        got.len() >= 1 << 20,
        "only {} bytes reached the peer",
        got.len()
    );
    assert!(
        got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "the peer received other bytes than were written"
    );
    drop(engine);
}

#[test]
fn a_dropped_stream_cut_off_with_no_runtime_left_resets_its_peer() {
    let engine = caller_engine(Submit::PerRound);
    // The peer never reads: the queue's linger runs out with bytes left.
    let mut peer =
        drop_a_writing_stream_with_its_runtime(&engine, 8 << 20, Some(Duration::from_millis(200)));
    // Waits, reading nothing, until the connection ends (a reset or the
    // end of the stream), or the guard.
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&peer),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    let guard_ms = GUARD.as_millis() as libc::c_int;
    // SAFETY: one live pollfd, for the duration of the call.
    let ready = unsafe { libc::poll(&mut pfd, 1, guard_ms) };
    assert_eq!(ready, 1, "the connection was neither reset nor ended");
    let mut sink = vec![0u8; 1 << 20];
    let err = loop {
        match peer.read(&mut sink) {
            Ok(0) => panic!("a clean end of a stream cut off by its linger"),
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    drop(engine);
}

#[test]
fn a_task_on_no_tokio_runtime_gets_an_error_not_a_hang() {
    let engine = caller_engine(Submit::OnStart);
    let (mut stream, _peer) = stream_from_a_dropped_runtime(&engine);
    if engine.poll_fd().is_none() {
        // The thread-pool backend: nothing needs driving, so the stream
        // simply works on any executor.
        let (res, _) = futures::executor::block_on(stream.write_all(b"x".to_vec()));
        res.unwrap();
        return;
    }
    // On a thread of its own, so that a hang fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = futures::executor::block_on(async {
            let s = &mut stream;
            let mut one = [0u8; 1];
            s.read(&mut one).await
        });
        let (write, _) = futures::executor::block_on(stream.write_all(b"x".to_vec()));
        tx.send((read, write)).unwrap();
    });
    let (read, write) = rx
        .recv_timeout(GUARD)
        .expect("a read or write on no tokio runtime never finished");
    let err = read.expect_err("a read on no runtime driving the engine");
    assert_eq!(err.kind(), std::io::ErrorKind::Other);
    let msg = err.to_string();
    assert!(
        msg.contains("runtime") && msg.contains("drive_on_tokio") && msg.contains("is gone"),
        "unclear error: {msg}"
    );
    let err = write.expect_err("a write on no runtime driving the engine");
    assert!(err.to_string().contains("is gone"), "unclear error: {err}");
}

/// A driver task spawned on a runtime that never polled it before going
/// still counted: on a new runtime the streams carry on (the driving is
/// taken over), and on no runtime an operation fails with the error.
#[test]
fn a_driver_spawned_but_never_polled_still_counts() {
    let engine = caller_engine(Submit::OnStart);
    let rt = runtime();
    rt.spawn(drive_on_tokio(engine.clone()));
    let (mut stream, mut peer) = rt.block_on(async {
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        (stream, peer)
    });
    drop(rt);
    if engine.poll_fd().is_some() {
        // On a thread of its own, so that a hang fails the test.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let no_runtime = futures::executor::block_on(stream.write(b"x".to_vec())).0;
            tx.send((no_runtime, stream)).unwrap();
        });
        let (no_runtime, back) = rx
            .recv_timeout(GUARD)
            .expect("a write on no tokio runtime never finished");
        assert!(no_runtime.is_err(), "an undriven write did not fail");
        stream = back;
    }
    peer.write_all(b"ping").unwrap();
    let rt = runtime();
    rt.block_on(async {
        let mut buf = [0u8; 4];
        tokio::time::timeout(GUARD, stream.read_exact(&mut buf))
            .await
            .expect("the read hung on the new runtime")
            .unwrap();
        assert_eq!(&buf, b"ping");
    });
    drop(stream);
    drop(engine);
}

/// How a parked reader reads in [`a_read_parked_when_its_driver_is_aborted_completes`].
#[derive(Clone, Copy, Debug)]
enum ReadBy {
    /// tokio's `AsyncReadExt::read`.
    Trait,
    /// The owned-buffer `read`.
    Owned,
    /// A receive stream's next buffer.
    Stream,
}

impl ReadBy {
    const ALL: [ReadBy; 3] = [ReadBy::Trait, ReadBy::Owned, ReadBy::Stream];

    /// Reads up to 5 bytes of `stream` this way.
    async fn read(self, stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        match self {
            ReadBy::Trait => {
                let mut buf = [0u8; 5];
                let n = AsyncReadExt::read(stream, &mut buf).await?;
                Ok(buf[..n].to_vec())
            }
            ReadBy::Owned => {
                let (n, buf) = TcpStream::read(stream, vec![0u8; 5]).await;
                Ok(buf[..n?].to_vec())
            }
            ReadBy::Stream => {
                let mut chunks = stream.recv_stream();
                let chunk = chunks.next().await.expect("the receive stream ended")?;
                Ok(chunk.to_vec())
            }
        }
    }
}

/// Builds a runtime of one flavour.
type MakeRuntime = fn() -> tokio::runtime::Runtime;

/// A multi-thread runtime of two workers.
fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Both runtime flavours, named, for tests that run on each.
fn both_flavours() -> [(&'static str, MakeRuntime); 2] {
    [("multi-thread", multi_thread), ("current-thread", runtime)]
}

/// The `drive_on_tokio` task aborted while its runtime lives on, with a
/// task waiting in a read: the read still completes once the peer sends
/// (its task is woken and has the engine driven again), as on tokio,
/// where aborting one task never stalls another's read.
#[test]
fn a_read_parked_when_its_driver_is_aborted_completes() {
    let runtimes = both_flavours();
    for submit in [Submit::OnStart, Submit::PerRound] {
        for (by, (flavour, rt)) in ReadBy::ALL
            .into_iter()
            .flat_map(|b| runtimes.map(|r| (b, r)))
        {
            let rt = rt();
            let engine = caller_engine(submit);
            rt.block_on(async {
                let driver = tokio::spawn(drive_on_tokio(engine.clone()));
                let listener = TcpListener::bind_with(&engine, "127.0.0.1:0").await.unwrap();
                let mut peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
                    .await
                    .unwrap();
                let (mut stream, _) = tokio::time::timeout(GUARD, listener.accept())
                    .await
                    .expect("the accept hung")
                    .unwrap();
                let (parked_tx, parked_rx) = futures::channel::oneshot::channel();
                let reader = tokio::spawn(async move {
                    let mut read = std::pin::pin!(by.read(&mut stream));
                    // Polled once (the receive is in the kernel, its task
                    // parked) before the driver goes.
                    let first = futures::poll!(read.as_mut());
                    assert!(first.is_pending(), "the read found bytes nobody sent");
                    parked_tx.send(()).unwrap();
                    read.await
                });
                parked_rx.await.expect("the reader ended before parking");
                driver.abort();
                // Cancelled, or (the thread-pool backend: nothing to
                // drive) returned already.
                match driver.await {
                    Ok(res) => res.unwrap(),
                    Err(e) => assert!(e.is_cancelled(), "{e}"),
                }
                peer.write_all(b"hello").await.unwrap();
                let got = tokio::time::timeout(GUARD, reader)
                    .await
                    .unwrap_or_else(|_| {
                        panic!("{by:?} read parked when the driver was aborted never woke ({submit:?}, {flavour})")
                    })
                    .unwrap()
                    .unwrap();
                assert_eq!(got, b"hello", "{by:?}, {submit:?}, {flavour}");
            });
            drop(rt);
            drop(engine);
        }
    }
}

/// As [`a_read_parked_when_its_driver_is_aborted_completes`], for a read
/// of an [`AsyncFile`](blockio::aio::AsyncFile) (one end of a socket pair
/// opened as a file, whose read waits in the kernel until the other end
/// writes): the parked read completes once the peer writes, without any
/// other task starting an operation. On io_uring the reader's task is
/// also woken when the last driver goes, before the peer writes (so that
/// its next poll can spawn a driver on its runtime): the relay thread
/// alone would complete the read, but never wake the task earlier.
/// On the thread-pool backend nothing needs driving and nothing is woken;
/// there the test checks only that the read completes.
#[test]
fn a_file_read_parked_when_its_driver_is_aborted_completes() {
    use std::os::fd::OwnedFd;
    let runtimes = both_flavours();
    for submit in [Submit::OnStart, Submit::PerRound] {
        for (flavour, rt) in runtimes {
            let rt = rt();
            let engine = caller_engine(submit);
            rt.block_on(async {
                let driver = tokio::spawn(drive_on_tokio(engine.clone()));
                let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
                let file = blockio::aio::AsyncFile::from_file(
                    &engine,
                    std::fs::File::from(OwnedFd::from(ours)),
                );
                let uring = engine.poll_fd().is_some();
                let (parked_tx, parked_rx) = futures::channel::oneshot::channel();
                let (woken_tx, woken_rx) = futures::channel::oneshot::channel();
                let aborted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let seen = aborted.clone();
                let reader = tokio::spawn(async move {
                    let mut read = std::pin::pin!(file.read_at(vec![0u8; 5], 0));
                    let mut parked_tx = Some(parked_tx);
                    let mut woken_tx = Some(woken_tx);
                    let (n, buf) = std::future::poll_fn(|cx| {
                        if let Some(tx) = parked_tx.take() {
                            // The first poll: the read goes into the
                            // kernel and its task parks before the driver
                            // goes.
                            let first = std::future::Future::poll(read.as_mut(), cx);
                            assert!(first.is_pending(), "the read found bytes nobody sent");
                            tx.send(()).unwrap();
                            return first;
                        }
                        // A poll after the driver's end: the task was woken.
                        if seen.load(std::sync::atomic::Ordering::SeqCst) {
                            if let Some(tx) = woken_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        std::future::Future::poll(read.as_mut(), cx)
                    })
                    .await;
                    n.map(|n| buf[..n].to_vec())
                });
                parked_rx.await.expect("the reader ended before parking");
                aborted.store(true, std::sync::atomic::Ordering::SeqCst);
                driver.abort();
                match driver.await {
                    Ok(res) => res.unwrap(),
                    Err(e) => assert!(e.is_cancelled(), "{e}"),
                }
                if uring {
                    // Woken by the last driver's drop, with nothing sent
                    // yet: the relay could not have completed the read.
                    tokio::time::timeout(GUARD, woken_rx)
                        .await
                        .unwrap_or_else(|_| {
                            panic!("a file read parked when the driver was aborted was not woken ({submit:?}, {flavour})")
                        })
                        .expect("the reader ended before the peer wrote");
                }
                peer.write_all(b"hello").unwrap();
                let got = tokio::time::timeout(GUARD, reader)
                    .await
                    .unwrap_or_else(|_| {
                        panic!("a file read parked when the driver was aborted never woke ({submit:?}, {flavour})")
                    })
                    .unwrap()
                    .unwrap();
                assert_eq!(got, b"hello", "{submit:?}, {flavour}");
            });
            drop(rt);
            drop(engine);
        }
    }
}

/// The `drive_on_tokio` task aborted while a read waits on an executor
/// of its own (no tokio runtime, so nothing there can drive the engine
/// again): the read's receive is in the kernel already, and the relay
/// thread, which takes the driving over at once, completes it when the
/// peer sends; the read is neither refused nor left waiting for another
/// task to start an operation.
#[test]
fn a_read_parked_off_tokio_completes_when_its_driver_is_aborted() {
    for submit in [Submit::OnStart, Submit::PerRound] {
        for by in ReadBy::ALL {
            let rt = runtime();
            let engine = caller_engine(submit);
            let driver = rt.spawn(drive_on_tokio(engine.clone()));
            let (mut stream, mut peer) = rt.block_on(async {
                let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
                    .await
                    .unwrap();
                let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
                let (stream, _) = listener.accept().await.unwrap();
                (stream, peer)
            });
            let (parked_tx, parked_rx) = std::sync::mpsc::channel();
            let (read_tx, read_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                futures::executor::block_on(async move {
                    let mut read = std::pin::pin!(by.read(&mut stream));
                    // Polled once (the receive is in the kernel, the task
                    // parked) before the driver goes.
                    let first = futures::poll!(read.as_mut());
                    assert!(first.is_pending(), "the read found bytes nobody sent");
                    parked_tx.send(()).unwrap();
                    let _ = read_tx.send(read.await);
                })
            });
            parked_rx.recv().expect("the reader ended before parking");
            rt.block_on(async {
                driver.abort();
                match driver.await {
                    Ok(res) => res.unwrap(),
                    Err(e) => assert!(e.is_cancelled(), "{e}"),
                }
            });
            peer.write_all(b"hello").unwrap();
            let got = read_rx.recv_timeout(GUARD).unwrap_or_else(|e| {
                panic!("{by:?} read parked off tokio ({submit:?}) never ended: {e}")
            });
            assert_eq!(
                got.unwrap_or_else(|e| panic!("{by:?} read parked off tokio ({submit:?}): {e}")),
                b"hello",
                "{by:?}, {submit:?}"
            );
            drop(rt);
            drop(engine);
        }
    }
}

fn runtime_without_io() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// A stream accepted from a std peer that has sent `sent`, on the
/// current runtime's task.
async fn accepted_with(engine: &AsyncEngine, sent: &[u8]) -> (TcpStream, std::net::TcpStream) {
    let listener = TcpListener::bind_with(engine, "127.0.0.1:0").await.unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    peer.write_all(sent).unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    (stream, peer)
}

fn assert_io_disabled(err: &std::io::Error) {
    assert_eq!(err.kind(), std::io::ErrorKind::Other, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("I/O disabled") && msg.contains("enable_io"),
        "unclear error: {msg}"
    );
}

/// `drive_on_tokio` on a runtime with I/O disabled fails with an error
/// saying so, as its documentation says, and so do the operations then
/// started there; before, tokio's panic came back once per wake-up (about
/// 600 a second) while a read waited for good.
#[test]
fn drive_on_tokio_on_a_runtime_without_io_is_an_error() {
    let before = count_io_disabled_panics();
    let engine = caller_engine(Submit::OnStart);
    let rt = runtime_without_io();
    rt.block_on(async {
        let driven = tokio::spawn(drive_on_tokio(engine.clone()))
            .await
            .expect("drive_on_tokio panicked");
        if engine.poll_fd().is_none() {
            // The thread-pool backend: nothing to drive, and the read works.
            driven.unwrap();
            let (stream, _peer) = accepted_with(&engine, b"hi").await;
            let (read, _) = tokio::time::timeout(GUARD, stream.read(vec![0u8; 8]))
                .await
                .expect("a read on a runtime without I/O never finished");
            assert_eq!(read.unwrap(), 2);
            return;
        }
        assert_io_disabled(&driven.expect_err("drive_on_tokio without I/O"));
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let _peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let accepted = tokio::time::timeout(GUARD, listener.accept())
            .await
            .expect("an accept on a runtime without I/O never finished");
        assert_io_disabled(&accepted.expect_err("an accept on a runtime without I/O"));
    });
    drop(rt);
    let panics = count_io_disabled_panics() - before;
    assert!(panics <= 1, "tokio's panic came {panics} times");
}

/// A caller-driven engine whose driving runtime went away, used on a
/// runtime with I/O disabled: the takeover fails with an error saying so,
/// asked once (not a new driver, and a panic, per wake-up); on a runtime
/// with I/O afterwards the stream carries on.
#[test]
fn a_takeover_by_a_runtime_without_io_is_an_error_and_the_next_runtime_drives() {
    let engine = caller_engine(Submit::OnStart);
    let (mut stream, mut peer) = stream_from_a_dropped_runtime(&engine);
    let before = count_io_disabled_panics();
    let rt = runtime_without_io();
    rt.block_on(async {
        if engine.poll_fd().is_none() {
            // The thread-pool backend: nothing to drive, and a write works.
            let (write, _) = tokio::time::timeout(GUARD, stream.write(b"x".to_vec()))
                .await
                .expect("a write on a runtime without I/O never finished");
            write.unwrap();
            return;
        }
        for _ in 0..3 {
            let (read, _) = tokio::time::timeout(GUARD, stream.read(vec![0u8; 8]))
                .await
                .expect("a read on a runtime without I/O never finished");
            let (write, _) = tokio::time::timeout(GUARD, stream.write(b"x".to_vec()))
                .await
                .expect("a write on a runtime without I/O never finished");
            assert_io_disabled(&read.expect_err("a read on a runtime without I/O"));
            assert_io_disabled(&write.expect_err("a write on a runtime without I/O"));
        }
    });
    drop(rt);
    let panics = count_io_disabled_panics() - before;
    assert!(panics <= 1, "tokio's panic came {panics} times");
    peer.write_all(b"ping").unwrap();
    runtime().block_on(async {
        let mut got = [0u8; 4];
        let s = &mut stream;
        tokio::time::timeout(GUARD, s.read_exact(&mut got))
            .await
            .expect("the read hung on a runtime with I/O")
            .unwrap();
        assert_eq!(&got, b"ping");
    });
}

/// The byte at `i` of the reply to connection `c`.
fn reply_byte(c: usize, i: usize) -> u8 {
    ((i * 31 + c * 17 + i / 509) % 253) as u8
}

/// Connections that each get a reply of several MiB, written whole
/// through the I/O traits and dropped without a flush, after which the
/// runtime that drove the engine shuts down while the slow peers still
/// read: every byte reaches every peer, then a clean end. The runtime's
/// shutdown woke the pumps on its thread, and a relay thread handed the
/// driving over and back; a thread that exits has the kernel cancel the
/// sends it submitted, and those were taken for failures: peers got a
/// clean end after a prefix (1 of 1 Unix connections, and several of 12
/// over TCP with a small send buffer, in most runs).
#[test]
fn a_runtime_shut_down_under_dropped_streams_loses_none_of_their_bytes() {
    const LEN: usize = 3 << 20;
    for (connections, send_buffer) in [(1, 32 << 10), (12, 32 << 10), (12, 0)] {
        let engine = caller_engine(Submit::OnStart);
        let rt = runtime();
        let peers = rt.block_on(async {
            tokio::spawn(drive_on_tokio(engine.clone()));
            let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
                .await
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let peers: Vec<_> = (0..connections)
                .map(|c| {
                    std::thread::spawn(move || {
                        let mut s = std::net::TcpStream::connect(addr).unwrap();
                        s.set_read_timeout(Some(GUARD)).unwrap();
                        s.write_all(&[c as u8]).unwrap();
                        let mut got = Vec::new();
                        let mut buf = vec![0u8; 16 << 10];
                        let end = loop {
                            match s.read(&mut buf) {
                                Ok(0) => break Ok(()),
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                                Err(e) => break Err(e),
                            }
                            // A slow reader: the reply outlives the runtime.
                            std::thread::sleep(Duration::from_millis(1));
                        };
                        (c, got, end)
                    })
                })
                .collect();
            let mut served = Vec::new();
            for _ in 0..connections {
                let (mut stream, _) = listener.accept().await.unwrap();
                if send_buffer > 0 {
                    stream.socket().set_send_buffer_size(send_buffer).unwrap();
                }
                served.push(tokio::spawn(async move {
                    let mut c = [0u8; 1];
                    let s = &mut stream;
                    s.read_exact(&mut c).await.unwrap();
                    let reply: Vec<u8> = (0..LEN).map(|i| reply_byte(c[0].into(), i)).collect();
                    s.write_all(&reply).await.unwrap();
                    drop(stream); // no flush
                }));
            }
            for s in served {
                s.await.unwrap();
            }
            peers
        });
        drop(rt);
        for p in peers {
            let (c, got, end) = p.join().unwrap();
            end.unwrap_or_else(|e| panic!("connection {c}: {e} after {} bytes", got.len()));
            assert_eq!(
                got.len(),
                LEN,
                "connection {c} of {connections} (send buffer {send_buffer}): \
                 a clean end after {} of {LEN} bytes",
                got.len()
            );
            let wrong = (0..LEN).find(|&i| got[i] != reply_byte(c, i));
            assert_eq!(wrong, None, "connection {c}: a wrong byte");
        }
        drop(engine);
    }
}

/// Reads already in the kernel, awaited on three runtimes without I/O
/// (each on a thread of its own) when the only driver's runtime goes:
/// each runtime tries the takeover once (tokio's panic once per runtime),
/// where each failure woke the others to try again, about 50,000 panics
/// in three seconds.
#[test]
fn runtimes_without_io_try_the_takeover_once_each() {
    const RUNTIMES: usize = 3;
    let engine = caller_engine(Submit::OnStart);
    if engine.poll_fd().is_none() {
        return; // the thread-pool backend: nothing to drive or take over
    }
    let driving = runtime();
    driving.spawn(drive_on_tokio(engine.clone()));
    let streams: Vec<(TcpStream, std::net::TcpStream)> = driving.block_on(async {
        tokio::task::yield_now().await; // the driver runs
        let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
            .await
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..RUNTIMES {
            let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            out.push((stream, peer));
        }
        out
    });
    let (started_tx, started) = std::sync::mpsc::channel();
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let go = std::sync::Arc::new(std::sync::Mutex::new(go));
    let threads: Vec<_> = streams
        .into_iter()
        .map(|(stream, peer)| {
            let started_tx = started_tx.clone();
            let go = go.clone();
            std::thread::spawn(move || {
                let before = count_io_disabled_panics();
                runtime_without_io().block_on(async {
                    let read = stream.read(vec![0u8; 8]);
                    tokio::pin!(read);
                    assert!(
                        futures::poll!(&mut read).is_pending(),
                        "a read with nothing sent"
                    );
                    started_tx.send(()).unwrap();
                    // Pending until the driver's runtime is gone.
                    let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
                });
                let _ = go.lock().unwrap().recv();
                drop(peer);
                count_io_disabled_panics() - before
            })
        })
        .collect();
    for _ in 0..RUNTIMES {
        started.recv_timeout(GUARD).expect("a read never started");
    }
    drop(driving);
    drop(go_tx);
    let panics: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(panics <= RUNTIMES, "tokio's panic came {panics} times");
}

/// A Unix listener of `engine` (in `dir`), made on a first runtime that
/// drives the engine; then that runtime is dropped.
fn listener_from_a_dropped_runtime(
    engine: &AsyncEngine,
    dir: &std::path::Path,
) -> blockio::net::UnixListener {
    let rt = runtime();
    rt.spawn(drive_on_tokio(engine.clone()));
    let listener = blockio::net::UnixListener::bind_with(engine, dir.join("gone.sock")).unwrap();
    // The driver runs; no accept is armed when the runtime goes (an armed
    // one is driven to its end by the engine's relay thread).
    rt.block_on(tokio::task::yield_now());
    drop(rt);
    listener
}

#[test]
fn a_lone_accept_after_the_runtime_went_is_driven_by_the_next_runtime() {
    for submit in [Submit::OnStart, Submit::PerRound] {
        let engine = caller_engine(submit);
        let dir = tempfile::tempdir().unwrap();
        let listener = listener_from_a_dropped_runtime(&engine, dir.path());
        // Nothing else uses the engine: the accept alone must have the
        // new runtime take the driving over.
        let _peer = std::os::unix::net::UnixStream::connect(listener.local_path()).unwrap();
        let rt = runtime();
        rt.block_on(async { tokio::time::timeout(GUARD, listener.accept()).await })
            .unwrap_or_else(|_| panic!("{submit:?}: a lone accept on the next runtime hung"))
            .unwrap();
    }
}

#[test]
fn a_lone_accept_on_no_tokio_runtime_gets_an_error_not_a_hang() {
    let engine = caller_engine(Submit::OnStart);
    let dir = tempfile::tempdir().unwrap();
    let listener = listener_from_a_dropped_runtime(&engine, dir.path());
    let _peer = std::os::unix::net::UnixStream::connect(listener.local_path()).unwrap();
    let threads = engine.poll_fd().is_none();
    // On a thread of its own, so that a hang fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let res = futures::executor::block_on(listener.accept()).map(drop);
        tx.send(res).unwrap();
    });
    let res = rx
        .recv_timeout(GUARD)
        .expect("an accept on no tokio runtime never finished");
    if threads {
        // The thread-pool backend: nothing needs driving, so the accept
        // simply completes on any executor.
        res.unwrap();
        return;
    }
    let err = res.expect_err("an accept on no runtime driving the engine");
    assert_eq!(err.kind(), std::io::ErrorKind::Other);
    assert!(err.to_string().contains("is gone"), "unclear error: {err}");
}

/// Runtimes made and dropped in the tests of idle kept streams.
const IDLE_RUNTIMES: usize = 50;

/// Sends `byte` from `peer` and reads it from `stream` on `rt` through
/// the I/O traits, failing after `GUARD` with `what` never ended.
fn one_byte_on(
    rt: &tokio::runtime::Runtime,
    stream: &mut TcpStream,
    peer: &mut std::net::TcpStream,
    byte: u8,
    what: &str,
) -> u8 {
    peer.write_all(&[byte]).unwrap();
    rt.block_on(async {
        let mut one = [0u8; 1];
        tokio::time::timeout(GUARD, stream.read_exact(&mut one))
            .await
            .unwrap_or_else(|_| panic!("{what} never ended"))
            .unwrap();
        one[0]
    })
}

/// Writes `data` through the traits until a write waits (the socket and
/// the stream's queue full while the peer does not read: 50 ms without
/// progress), or all of it is written; the bytes written.
async fn write_until_it_waits(stream: &mut TcpStream, data: &[u8]) -> usize {
    let mut at = 0;
    while at < data.len() {
        match tokio::time::timeout(Duration::from_millis(50), stream.write(&data[at..])).await {
            Ok(n) => at += n.unwrap(),
            // The queue is full: the rest stays unwritten.
            Err(_) => break,
        }
    }
    at
}

/// A stream kept past the current-thread runtime that made it, on that
/// runtime's default engine, and what goes with it.
struct Kept {
    stream: TcpStream,
    peer: std::net::TcpStream,
    engine: AsyncEngine,
}

/// On a current-thread runtime of its own, dropped once done: a stream
/// connected (on the runtime's default engine) to a std peer, read once
/// through the I/O traits while the peer had sent nothing (so that its
/// receive is armed in the ring and stays armed, kept for the next read,
/// with no task waiting on it when the runtime goes), then fed one byte.
fn idle_kept_stream() -> Kept {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = runtime();
    let (stream, peer, engine) = rt.block_on(async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let engine = AsyncEngine::current().unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let s = &mut stream;
        let mut one = [0u8; 1];
        let mut read = std::pin::pin!(s.read(&mut one));
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "the read found bytes nobody sent"
        );
        peer.write_all(b"a").unwrap();
        let n = tokio::time::timeout(GUARD, read)
            .await
            .expect("the first read never ended")
            .unwrap();
        assert_eq!((n, one), (1, *b"a"));
        (stream, peer, engine)
    });
    drop(rt);
    Kept {
        stream,
        peer,
        engine,
    }
}

/// How many threads of this process are relay threads.
fn relay_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "blockio-relay")
        .count()
}

/// Relay threads that other tests of this binary may have running at the
/// same moment (each relays one engine of its own, for a moment): the
/// tests of kept streams keep 20 or more engines, so one relay thread per
/// engine is far above it.
const OTHER_RELAYS: usize = 4;

/// Waits until no engine of `engines` is relayed (the event `relaying()`
/// false on each), then until the process has no more relay threads
/// than other tests may have (a relay thread lowers its flag just before
/// it exits).
fn relays_end<'a>(engines: impl Iterator<Item = &'a AsyncEngine> + Clone) {
    common::wait_until("every kept stream's engine stopped being relayed", || {
        engines.clone().all(|e| !e.relaying())
    });
    common::wait_until("the relay threads ended", || {
        relay_threads() <= OTHER_RELAYS
    });
}

/// Streams kept idle past the runtimes that made them (a receive armed
/// in each runtime's ring, nobody waiting on it) keep no relay thread:
/// the relay of each engine, started when its runtime went, ends once
/// nothing that must complete is left, rather than one thread per
/// runtime for as long as the streams live. Every stream then still
/// reads and writes from a new runtime.
#[test]
fn idle_kept_streams_keep_no_relay_thread_per_runtime_gone() {
    let mut kept: Vec<Kept> = (0..IDLE_RUNTIMES).map(|_| idle_kept_stream()).collect();
    relays_end(kept.iter().map(|k| &k.engine));
    let rt = runtime();
    for (i, k) in kept.iter_mut().enumerate() {
        let read = "a kept stream's read on the new runtime";
        let got = one_byte_on(&rt, &mut k.stream, &mut k.peer, i as u8, read);
        let s = &mut k.stream;
        rt.block_on(async {
            tokio::time::timeout(GUARD, s.write_all(b"b"))
                .await
                .expect("a kept stream's write on the new runtime never ended")
                .unwrap();
        });
        assert_eq!(got, i as u8, "stream {i}");
        let mut back = [0u8; 1];
        k.peer.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"b", "stream {i}");
    }
}

/// The bytes `i` of the peer's stream in [`bytes_sent_while_no_runtime_existed_arrive_in_order`].
fn nth_byte(i: usize) -> u8 {
    (i % 253) as u8
}

/// A peer writes to idle kept streams, in several writes, while no
/// runtime exists (the first before anything reads; in all more than
/// the engine's receive buffers and the socket hold, so that the rest
/// comes once a read takes some): a new runtime reads every byte, in
/// order. On no tokio runtime
/// (`futures::executor::block_on`) a read is refused with the error
/// saying the engine's runtime is gone (the thread pool, which needs no
/// driving, serves it), and takes no byte: the new runtime still reads
/// them all, in order.
#[test]
fn bytes_sent_while_no_runtime_existed_arrive_in_order() {
    const LEN: usize = 4 << 20;
    const STREAMS: usize = 3;
    let mut kept: Vec<Kept> = (0..STREAMS).map(|_| idle_kept_stream()).collect();
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let writers: Vec<_> = kept
        .iter()
        .map(|k| {
            let mut peer = k.peer.try_clone().unwrap();
            let first_tx = first_tx.clone();
            std::thread::spawn(move || {
                let data: Vec<u8> = (0..LEN).map(nth_byte).collect();
                for (i, chunk) in data.chunks(64 << 10).enumerate() {
                    peer.write_all(chunk).unwrap();
                    if i == 0 {
                        first_tx.send(()).unwrap();
                    }
                }
            })
        })
        .collect();
    for _ in 0..STREAMS {
        first_rx
            .recv_timeout(GUARD)
            .expect("a peer's first write never returned");
    }
    let mut at = vec![0usize; STREAMS];
    for (k, at) in kept.iter_mut().zip(&mut at) {
        let threads = k.engine.poll_fd().is_none();
        let s = &mut k.stream;
        let read = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    futures::executor::block_on(async {
                        let mut buf = [0u8; 1000];
                        s.read(&mut buf).await.map(|n| buf[..n].to_vec())
                    })
                })
                .join()
                .unwrap()
        });
        if threads {
            let got = read.expect("a read on no tokio runtime on the thread pool");
            assert!(!got.is_empty());
            let wrong = got.iter().enumerate().find(|&(i, &b)| b != nth_byte(i));
            assert_eq!(wrong, None, "a wrong byte read off tokio");
            *at = got.len();
        } else {
            let err = read.expect_err("a read on no runtime driving the engine");
            assert!(err.to_string().contains("is gone"), "unclear error: {err}");
        }
    }
    let rt = runtime();
    for (i, (k, at)) in kept.iter_mut().zip(at).enumerate() {
        let s = &mut k.stream;
        let mut got = vec![0u8; LEN - at];
        rt.block_on(async {
            tokio::time::timeout(GUARD, s.read_exact(&mut got))
                .await
                .expect("a kept stream's read on the new runtime never ended")
                .unwrap();
        });
        let wrong = (0..got.len()).find(|&j| got[j] != nth_byte(at + j));
        assert_eq!(wrong, None, "stream {i}: a wrong byte after {at} read");
    }
    for w in writers {
        w.join().unwrap();
    }
}

/// A stream dropped with bytes queued after its runtime went, on an
/// engine that also has an idle kept stream: every byte reaches the peer
/// (the relay drives the engine while they are sent), then the relay
/// ends though the idle stream's receive is still armed, and that
/// stream still works on a new runtime.
#[test]
fn a_dropped_streams_queued_bytes_are_sent_then_the_relay_ends() {
    const LEN: usize = 8 << 20;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = runtime();
    let (idle, idle_peer, engine, mut writing_peer, written) = rt.block_on(async {
        let engine = AsyncEngine::current().unwrap();
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let (mut idle_peer, _) = listener.accept().unwrap();
        let s = &mut idle;
        let mut one = [0u8; 1];
        let mut read = std::pin::pin!(s.read(&mut one));
        assert!(futures::poll!(read.as_mut()).is_pending());
        idle_peer.write_all(b"a").unwrap();
        tokio::time::timeout(GUARD, read)
            .await
            .expect("the first read never ended")
            .unwrap();
        let mut writing = TcpStream::connect(addr).await.unwrap();
        let (writing_peer, _) = listener.accept().unwrap();
        // More than the socket buffers hold while the peer does not read:
        // most of it is still queued when the stream is dropped.
        let data: Vec<u8> = (0..LEN).map(nth_byte).collect();
        let written = write_until_it_waits(&mut writing, &data).await;
        assert!(written > 0);
        drop(writing);
        (idle, idle_peer, engine, writing_peer, written)
    });
    drop(rt);
    writing_peer.set_read_timeout(Some(GUARD)).unwrap();
    let mut got = Vec::new();
    let res = writing_peer.read_to_end(&mut got).map_err(|e| e.kind());
    assert_eq!(res, Ok(got.len()), "an error after {} bytes", got.len());
    // At least what the writes took (a write dropped in flight reaches the
    // peer too).
    assert!(
        got.len() >= written,
        "{} of {written} bytes arrived",
        got.len()
    );
    let wrong = (0..got.len()).find(|&i| got[i] != nth_byte(i));
    assert_eq!(wrong, None, "a wrong byte");
    common::wait_until("the relay ended once the queue was sent", || {
        !engine.relaying()
    });
    let (mut idle, mut idle_peer) = (idle, idle_peer);
    let read = "the idle stream's read on a new runtime";
    let one = one_byte_on(&runtime(), &mut idle, &mut idle_peer, b'z', read);
    assert_eq!(one, b'z');
}

/// A stream whose read timed out (its future dropped while it waited,
/// its task's waker left with the receive) when its runtime went keeps no
/// relay thread either: the driver's going takes that waker, whose task
/// never polls again. The stream then reads on a new runtime.
#[test]
fn a_stream_whose_read_timed_out_keeps_no_relay_thread() {
    for submit in [Submit::OnStart, Submit::PerRound] {
        let engine = caller_engine(submit);
        let (mut stream, mut peer) = stream_from_a_dropped_runtime(&engine);
        common::wait_until("the relay thread ended", || !engine.relaying());
        peer.write_all(b"late").unwrap();
        let got = runtime().block_on(async {
            let mut got = [0u8; 4];
            let s = &mut stream;
            tokio::time::timeout(GUARD, s.read_exact(&mut got))
                .await
                .expect("the read on the new runtime never ended")
                .unwrap();
            got
        });
        assert_eq!(&got, b"late", "{submit:?}");
    }
}

/// Runtimes made and dropped in the tests of reads left pending.
const PENDING_RUNTIMES: usize = 20;

/// How a stream's trait read is left when its runtime goes, in
/// [`a_read_left_pending_as_its_runtime_went_keeps_no_relay_thread`].
#[derive(Clone, Copy, Debug)]
enum LeftPending {
    /// Polled once (`Pending`), its future dropped.
    PolledOnce,
    /// Through `timeout(Duration::ZERO, read)`, which polls it once.
    ZeroTimeout,
}

/// On a current-thread runtime of its own, dropped at once after: a
/// stream connected (on the runtime's default engine) to a std peer that
/// has sent nothing, a trait read left as `left` says. Its receive is
/// still queued, not yet in the kernel, when the runtime goes.
fn kept_with_a_read_left_pending(left: LeftPending) -> Kept {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = runtime();
    let (stream, peer, engine) = rt.block_on(async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let engine = AsyncEngine::current().unwrap();
        let (peer, _) = listener.accept().unwrap();
        let s = &mut stream;
        let mut one = [0u8; 1];
        match left {
            LeftPending::PolledOnce => {
                let mut read = std::pin::pin!(s.read(&mut one));
                assert!(
                    futures::poll!(read.as_mut()).is_pending(),
                    "the read found bytes nobody sent"
                );
            }
            LeftPending::ZeroTimeout => {
                let read = tokio::time::timeout(Duration::ZERO, s.read(&mut one)).await;
                assert!(read.is_err(), "the read found bytes nobody sent");
            }
        }
        (stream, peer, engine)
    });
    drop(rt);
    Kept {
        stream,
        peer,
        engine,
    }
}

/// A trait read polled once, its future dropped and its runtime dropped
/// at once, leaves its receive queued, with no task waiting on it: no
/// relay thread drives it (once submitted by one, a multishot receive
/// stays in the kernel for as long as the peer may send, and that
/// thread with it). The peer's next byte is then read on a new runtime.
#[test]
fn a_read_left_pending_as_its_runtime_went_keeps_no_relay_thread() {
    for left in [LeftPending::PolledOnce, LeftPending::ZeroTimeout] {
        let mut kept: Vec<Kept> = (0..PENDING_RUNTIMES)
            .map(|_| kept_with_a_read_left_pending(left))
            .collect();
        relays_end(kept.iter().map(|k| &k.engine));
        let rt = runtime();
        for (i, k) in kept.iter_mut().enumerate() {
            let read = "a kept stream's read on the new runtime";
            let got = one_byte_on(&rt, &mut k.stream, &mut k.peer, i as u8, read);
            assert_eq!(got, i as u8, "{left:?}, stream {i}");
        }
    }
}

/// A receive stream polled once (`Pending`) and kept when its runtime
/// goes keeps no relay thread either, and yields what the peer sends
/// next on a new runtime.
#[test]
fn a_receive_stream_left_pending_as_its_runtime_went_keeps_no_relay_thread() {
    use futures::StreamExt;
    let mut runtimes = Vec::new();
    let mut made = Vec::new();
    for _ in 0..PENDING_RUNTIMES {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rt = runtime();
        made.push(rt.block_on(async {
            let stream = TcpStream::connect(addr).await.unwrap();
            let (peer, _) = listener.accept().unwrap();
            (stream, peer, AsyncEngine::current().unwrap())
        }));
        runtimes.push(rt);
    }
    let mut receives: Vec<_> = made
        .iter()
        .map(|(s, ..)| Box::pin(s.recv_stream()))
        .collect();
    for (rt, rs) in runtimes.iter().zip(&mut receives) {
        rt.block_on(async {
            assert!(
                futures::poll!(rs.next()).is_pending(),
                "the receive found bytes nobody sent"
            );
        });
    }
    drop(runtimes);
    relays_end(made.iter().map(|(_, _, e)| e));
    let rt = runtime();
    for (i, ((_, peer, _), rs)) in made.iter().zip(&mut receives).enumerate() {
        (&*peer).write_all(&[i as u8]).unwrap();
        let got = rt.block_on(async {
            tokio::time::timeout(GUARD, rs.next())
                .await
                .expect("a kept receive stream on the new runtime never yielded")
                .expect("the receive stream ended")
                .unwrap()
        });
        assert_eq!(&got[..], &[i as u8], "stream {i}");
    }
}

/// A write the kernel holds (to a peer that does not read) when its
/// runtime goes, its future dropped by a timeout, keeps the engine's
/// relay thread until the kernel completes it, so that its bytes go out
/// with no runtime, as a dropped stream's do; once the peer reads them
/// the relay ends, and the stream writes on a new runtime.
#[test]
fn a_write_held_by_the_kernel_keeps_the_relay_until_the_peer_reads() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rt = runtime();
    let (mut stream, mut peer, engine) = rt.block_on(async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let engine = AsyncEngine::current().unwrap();
        let (peer, _) = listener.accept().unwrap();
        let data = vec![7u8; 1 << 20];
        let s = &mut stream;
        let mut written = 0;
        loop {
            match tokio::time::timeout(Duration::from_millis(20), s.write(&data)).await {
                Ok(n) => written += n.unwrap(),
                Err(_) => break,
            }
            assert!(written < 1 << 30, "a peer that does not read took 1 GiB");
        }
        (stream, peer, engine)
    });
    drop(rt);
    // On io_uring the driver's going started the relay for the write the
    // kernel holds (the thread pool's engine completes it on its own
    // threads and never relays).
    assert_eq!(
        engine.relaying(),
        engine.backend() == blockio::Backend::IoUring,
        "a relay for a write the kernel holds only on io_uring"
    );
    peer.set_nonblocking(true).unwrap();
    let mut sink = vec![0u8; 1 << 20];
    // Reads what the peer has, keeping its last three bytes in `tail`.
    let mut tail = Vec::new();
    let mut drain = |peer: &mut std::net::TcpStream, tail: &mut Vec<u8>| loop {
        match peer.read(&mut sink) {
            Ok(0) => panic!("the stream closed"),
            Ok(n) => {
                tail.extend_from_slice(&sink[n.saturating_sub(3)..n]);
                let extra = tail.len().saturating_sub(3);
                tail.drain(..extra);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => panic!("{e}"),
        }
    };
    common::wait_until("the relay ended once the peer read", || {
        drain(&mut peer, &mut tail);
        !engine.relaying()
    });
    runtime().block_on(async {
        let s = &mut stream;
        tokio::time::timeout(GUARD, async {
            // The held write, its future dropped, is reported by the next
            // write: every byte of it went (the kernel completed it).
            if let Err(e) = s.write(b"end").await {
                let dropped = blockio::net::WriteDropped::of(&e);
                assert!(
                    dropped.is_some_and(|d| d.sent == d.len),
                    "the held write did not go out whole: {e}"
                );
                s.write_all(b"end").await?;
            }
            s.flush().await
        })
        .await
        .expect("a write on the new runtime never ended")
        .unwrap();
    });
    common::wait_until("the new runtime's bytes reached the peer", || {
        drain(&mut peer, &mut tail);
        tail.ends_with(b"end")
    });
}

/// Idle kept streams dropped once their runtimes are gone, no bytes
/// queued: their peers see them closed. The receive each kept armed is
/// cancelled as it drops, and the relay thread reaps that cancel's end,
/// which lets go of the socket; then it ends.
#[test]
fn an_idle_kept_stream_dropped_after_its_runtime_closes_its_socket() {
    let kept: Vec<Kept> = (0..PENDING_RUNTIMES).map(|_| idle_kept_stream()).collect();
    relays_end(kept.iter().map(|k| &k.engine));
    let mut rest = Vec::new();
    for k in kept {
        let Kept {
            stream,
            peer,
            engine,
        } = k;
        drop(stream);
        rest.push((peer, engine));
    }
    for (i, (peer, _)) in rest.iter_mut().enumerate() {
        peer.set_read_timeout(Some(GUARD)).unwrap();
        let mut one = [0u8; 1];
        // A blocking read with a timeout is not restarted after a signal
        // or the ring's task work interrupts it: read again then.
        let got = loop {
            match peer.read(&mut one) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.map_err(|e| e.kind()),
            }
        };
        assert_eq!(got, Ok(0), "stream {i}: its peer did not see it closed");
    }
    relays_end(rest.iter().map(|(_, e)| e));
}

/// A read a task on a second runtime waits on, its stream made (and its
/// kept receive armed) on a first runtime that then goes, completes when
/// the peer sends after that: the first runtime's going hands the read
/// over to the second runtime, which drives the engine from then on. Once
/// with the first runtime's thread gone too, once with it still there.
#[test]
fn a_read_waiting_on_another_runtime_completes_after_the_first_goes() {
    for exits in [true, false] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (made_tx, made_rx) = std::sync::mpsc::channel();
        let (polled_tx, polled_rx) = std::sync::mpsc::channel::<()>();
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let mut first = Some(std::thread::spawn(move || {
            let rt = runtime();
            let (mut stream, mut peer) = rt.block_on(async {
                let stream = TcpStream::connect(addr).await.unwrap();
                (stream, listener.accept().unwrap().0)
            });
            // A first read arms the stream's kept receive on this runtime.
            one_byte_on(&rt, &mut stream, &mut peer, b'0', "the first read");
            made_tx.send((stream, peer)).unwrap();
            // Running (its driver too) while the second runtime's read
            // starts waiting.
            rt.block_on(async {
                while polled_rx.try_recv().is_err() {
                    tokio::task::yield_now().await;
                }
            });
            drop(rt);
            dropped_tx.send(()).unwrap();
            if !exits {
                let _ = end_rx.recv();
            }
        }));
        let (mut stream, mut peer) = made_rx.recv().unwrap();
        let (read_tx, read_rx) = std::sync::mpsc::channel();
        let second = std::thread::spawn(move || {
            let got = runtime().block_on(async {
                let mut got = [0u8; 4];
                let s = &mut stream;
                let mut read = std::pin::pin!(s.read(&mut got));
                assert!(futures::poll!(read.as_mut()).is_pending());
                polled_tx.send(()).unwrap();
                let n = read.await.unwrap();
                got[..n].to_vec()
            });
            let _ = read_tx.send(got);
        });
        dropped_rx.recv().unwrap();
        if exits {
            first.take().unwrap().join().unwrap();
        }
        peer.write_all(b"wxyz").unwrap();
        let got = read_rx
            .recv_timeout(GUARD)
            .unwrap_or_else(|_| panic!("the read never ended (first thread exits: {exits})"));
        assert!(!got.is_empty() && b"wxyz".starts_with(&got), "{got:?}");
        drop(end_tx);
        drop(peer);
        second.join().unwrap();
        if let Some(first) = first {
            first.join().unwrap();
        }
    }
}
