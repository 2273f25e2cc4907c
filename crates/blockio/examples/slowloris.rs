//! A probe's latency beside idle and slowloris connections: an echo
//! server (one task per connection, reading through the I/O traits) on
//! tokio's `net` or on `blockio::net` holds `IDLE` connections that send
//! nothing and `SLOW` that each send one byte a round (every `PERIOD_MS`,
//! all at once, and read its echo); meanwhile fresh connections each
//! connect, send 16 bytes and read them back, one after another, and the
//! time each takes is the probe's latency.
//!
//! `cargo run --release -p blockio --features tokio --example slowloris --
//! STACK IDLE SLOW PROBES PERIOD_MS` with STACK `tokio` or `blockio`
//! (`BLOCKIO_BACKEND=threads` for the epoll fallback); prints one line:
//! the stack, then p50, p99 and the largest probe latency in ms, and the
//! slow peers' rounds. The
//! process holds two descriptors per connection (`ulimit -n` above).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Echoes until the peer ends or fails.
async fn echo<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) {
    let mut buf = vec![0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Starts the server of `stack` on a thread of its own; its address.
fn serve(stack: &str) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    let blockio = match stack {
        "tokio" => false,
        "blockio" => true,
        other => panic!("unknown stack {other:?}: tokio or blockio"),
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            if blockio {
                let l = blockio::net::TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .unwrap();
                tx.send(l.local_addr().unwrap()).unwrap();
                loop {
                    let (s, _) = l.accept().await.unwrap();
                    tokio::spawn(echo(s));
                }
            } else {
                let l = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .unwrap();
                tx.send(l.local_addr().unwrap()).unwrap();
                loop {
                    let (s, _) = l.accept().await.unwrap();
                    tokio::spawn(echo(s));
                }
            }
        });
    });
    rx.recv().unwrap()
}

/// A connection that has had one exchange.
fn peer(addr: SocketAddr) -> TcpStream {
    let mut p = TcpStream::connect(addr).unwrap();
    p.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    p.write_all(b"i").unwrap();
    let mut b = [0u8; 1];
    p.read_exact(&mut b).unwrap();
    p
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [stack, idle, slow, probes, period] = &args[..] else {
        panic!("usage: slowloris STACK IDLE SLOW PROBES PERIOD_MS");
    };
    let n = |s: &String| -> usize { s.parse().expect("a count") };
    let (idle, slow, probes, period) = (n(idle), n(slow), n(probes), n(period));
    let addr = serve(stack);
    let idle: Vec<_> = (0..idle).map(|_| peer(addr)).collect();
    let mut slow: Vec<_> = (0..slow).map(|_| peer(addr)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let loris = std::thread::spawn(move || {
        let mut rounds = 0;
        while !stopped.load(Ordering::Relaxed) {
            rounds += 1;
            let start = Instant::now();
            for s in &mut slow {
                s.write_all(b"x").unwrap();
            }
            for s in &mut slow {
                let mut b = [0u8; 1];
                s.read_exact(&mut b).unwrap();
            }
            let left = Duration::from_millis(period as u64).saturating_sub(start.elapsed());
            std::thread::sleep(left);
        }
        rounds
    });
    let mut lat: Vec<f64> = (0..probes)
        .map(|_| {
            let start = Instant::now();
            let mut p = TcpStream::connect(addr).unwrap();
            p.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            p.write_all(b"probe 0123456789").unwrap();
            let mut b = [0u8; 16];
            p.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"probe 0123456789");
            let t = start.elapsed().as_secs_f64() * 1e3;
            std::thread::sleep(Duration::from_millis(1));
            t
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    let rounds = loris.join().unwrap();
    drop(idle);
    lat.sort_by(f64::total_cmp);
    let q = |f: f64| lat[((lat.len() - 1) as f64 * f).round() as usize];
    println!(
        "{stack} p50 {:.3} p99 {:.3} max {:.3} slow-rounds {rounds}",
        q(0.5),
        q(0.99),
        lat[lat.len() - 1]
    );
}
