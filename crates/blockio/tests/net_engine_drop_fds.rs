//! Thread-pool engines dropped while a long-lived runtime has watched
//! their epoll sets leave nothing behind on it: each set's descriptor
//! and its drive task end once the set stops. (Its own test binary: it
//! counts `/proc/self/fd` and `/proc/self/task`, process-wide.)

use std::io::Write;
use std::time::Duration;

use blockio::aio::{AsyncEngine, Driving};
use blockio::net::TcpStream;
use blockio::BackendChoice;

mod common;
use common::{wait_until, Bounded};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

const ENGINES: usize = 20;

/// One read on `engine` from a task of `rt`, so that `rt`'s reactor
/// registers the engine's set and a drive task of `rt` takes its events.
fn read_once(rt: &tokio::runtime::Runtime, engine: &AsyncEngine, l: &std::net::TcpListener) {
    rt.block_on(async {
        let s = TcpStream::connect_with(engine, l.local_addr().unwrap())
            .await
            .unwrap();
        let mut peer = l.accept().unwrap().0.bounded();
        let (polled_tx, polled) = tokio::sync::oneshot::channel();
        let read = tokio::spawn(async move {
            let _ = polled_tx.send(());
            let (n, b) = s.read(vec![0u8; 1]).await;
            assert_eq!((n.unwrap(), b[0]), (1, 7));
        });
        polled.await.unwrap();
        tokio::task::yield_now().await;
        peer.write_all(&[7]).unwrap();
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("the read never completed")
            .unwrap();
    });
}

#[test]
fn engines_dropped_under_a_live_runtime_leave_no_descriptor_on_it() {
    let long = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (fds0, threads0) = (open_fds(), threads());
    for i in 0..ENGINES {
        let engine = AsyncEngine::builder()
            .backend(BackendChoice::ThreadPool)
            .driving(Driving::Auto)
            .build()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        read_once(&rt, &engine, &l);
        read_once(&long, &engine, &l);
        // Both orders: the engine's set stops with the runtime alive or
        // gone.
        if i % 2 == 0 {
            drop((engine, rt));
        } else {
            drop((rt, engine));
        }
    }
    // The long runtime runs its tasks (the drive tasks see their sets
    // stopped, and end) while the readiness threads end.
    wait_until(
        "descriptors and threads back to their count before the engines",
        || {
            long.block_on(async {
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                }
            });
            open_fds() <= fds0 && threads() <= threads0
        },
    );
    assert_eq!(open_fds(), fds0);
}
