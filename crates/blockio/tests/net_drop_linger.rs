//! Shutting down a caller-driven engine whose dropped streams still have
//! bytes queued for peers that do not read: once their linger runs out
//! they let the engine go, so it finishes and every descriptor closes,
//! though nothing drives the ring any more. (Its own test binary: it
//! counts `/proc/self/fd`.)

use std::time::{Duration, Instant};

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
use blockio::net::TcpListener;

mod common;
use common::noting_its_wait;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_driven_engine_with_lingering_streams_finishes_once_they_give_up() {
    let before = open_fds();
    let peers = {
        let engine = AsyncEngine::builder()
            .driving(Driving::Caller(
                CallerDriving::new().submit(Submit::PerRound),
            ))
            .build()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener =
            futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let peers: Vec<_> = (0..4)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        if engine.poll_fd().is_some() {
            rt.spawn(drive_on_tokio(engine.clone()));
        }
        let (waits_tx, waits_rx) = std::sync::mpsc::channel();
        rt.block_on(async {
            for _ in 0..4 {
                let (mut s, _) = listener.accept().await.unwrap();
                s.socket().set_send_buffer_size(16 * 1024).unwrap();
                s.set_drop_linger(Duration::from_millis(200));
                let waits = waits_tx.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let w = &mut s;
                    let chunk = vec![3u8; 64 << 10];
                    // Until the queue is full: the task then waits.
                    let mut waits = Some(waits);
                    loop {
                        noting_its_wait(w.write_all(&chunk), &mut waits)
                            .await
                            .unwrap();
                    }
                });
            }
            // Every task has filled its queue, and waits.
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut waiting = 0;
            while waiting < 4 {
                assert!(
                    Instant::now() < deadline,
                    "{waiting} of 4 writers reached their wait"
                );
                match waits_rx.try_recv() {
                    Ok(()) => waiting += 1,
                    Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
        });
        // The tasks (and their streams) and the driving task go with the
        // runtime; the streams' queues still hold bytes.
        drop(rt);
        drop(listener);
        drop(engine);
        peers
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_fds() > before + peers.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        open_fds(),
        before + peers.len(),
        "the engine or a stream's socket was left open"
    );
}
