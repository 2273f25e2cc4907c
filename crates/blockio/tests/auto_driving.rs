//! The default driving ([`Driving::Auto`]): an engine built on a tokio
//! runtime with I/O is driven by that runtime (a caller-driven ring whose
//! driving task the builder spawned); built anywhere else it has a driver
//! thread of its own. Either way the engine works with no setting made,
//! its driving task ends with it, and a runtime without I/O costs one
//! panic message, not a broken engine. On the thread-pool backend the
//! pool completes everything and the same outcomes hold.

use std::io::{Read, Write};
use std::time::Duration;

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
use blockio::net::TcpListener;
use blockio::Backend;

mod common;
use common::count_io_disabled_panics;

/// A hang guard, far beyond what any step takes.
const GUARD: Duration = Duration::from_secs(30);

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

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
    let listener = TcpListener::bind(engine, "127.0.0.1:0").unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr()).unwrap();
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
    let listener = TcpListener::bind(&engine, "127.0.0.1:0").unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr()).unwrap();
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
    let listener = TcpListener::bind(&engine, "127.0.0.1:0").unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr()).unwrap();
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
        let listener = TcpListener::bind(&engine, "127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr()).unwrap();
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

/// An engine whose stream is dropped with bytes still queued: the bytes
/// reach the peer, and the engine, once everything is gone, lets its
/// driving task end too.
#[test]
fn a_dropped_streams_bytes_arrive_from_a_default_engine() {
    let rt = current_thread();
    let mut peer = rt.block_on(async {
        let engine = AsyncEngine::new().unwrap();
        let listener = TcpListener::bind(&engine, "127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr()).unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let reply = vec![7u8; 4 << 20];
        tokio::io::AsyncWriteExt::write_all(&mut stream, &reply)
            .await
            .unwrap();
        drop(stream);
        peer
    });
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    });
    // The runtime keeps running until the peer has everything.
    rt.block_on(async {
        while !reader.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let got = reader.join().unwrap();
    assert_eq!(got.len(), 4 << 20);
    assert!(got.iter().all(|&b| b == 7));
}

/// Built on a runtime whose reactor cannot watch the ring, the engine has
/// its own thread and works there; tokio is asked (and panics, caught)
/// once for that runtime, not once per engine.
#[test]
fn an_engine_built_on_a_runtime_without_io_has_its_own_thread() {
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
