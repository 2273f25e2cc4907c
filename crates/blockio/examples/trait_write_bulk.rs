//! What a bulk transfer through tokio's `AsyncWrite` costs: 256 MiB
//! written with `write_all` in 64 KiB slices from a task, to a peer on a
//! thread that reads as fast as it can, so the writer's socket fills and
//! empties all the time (each full socket is a write that waits: in
//! tokio's reactor, or in the stream's queue where no reactor serves
//! it). A blockio stream (the engine `AsyncEngine::new()` builds, so
//! `BLOCKIO_BACKEND=threads` picks the thread pool) and a tokio stream
//! alternate, on a multi-thread runtime of two workers and on a
//! current-thread runtime; the process's CPU time (user + system) and
//! the wall time of each transfer are printed as medians and spreads
//! (needs the `tokio` feature).
//!
//! ```text
//! cargo run --release -p blockio --features tokio --example trait_write_bulk [rounds [blockio|tokio]]
//! ```
//!
//! A stack named runs alone (for `strace -c -f` or `valgrind`).

use std::io::Read;
use std::time::Instant;

use tokio::io::{AsyncWrite, AsyncWriteExt};

const TOTAL: usize = 256 << 20;
const SLICE: usize = 64 << 10;

/// The process's CPU time so far, user and system, in milliseconds.
fn cpu_ms() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `getrusage` fills the struct it is given; RUSAGE_SELF is valid.
    let u = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()), 0);
        u.assume_init()
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// Writes [`TOTAL`] bytes to `s` in slices of [`SLICE`], then shuts it.
async fn fill<S: AsyncWrite + Unpin>(mut s: S) -> std::io::Result<()> {
    let data = vec![7u8; SLICE];
    for _ in 0..TOTAL / SLICE {
        s.write_all(&data).await?;
    }
    s.shutdown().await
}

/// One transfer on `rt` from a task: (CPU ms, wall ms).
fn round(rt: &tokio::runtime::Runtime, on_blockio: bool) -> (f64, f64) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let (mut buf, mut got) = (vec![0u8; 256 << 10], 0);
        loop {
            match s.read(&mut buf).unwrap() {
                0 => return got,
                n => got += n,
            }
        }
    });
    let (cpu, wall) = (cpu_ms(), Instant::now());
    rt.block_on(async move {
        tokio::spawn(async move {
            if on_blockio {
                fill(blockio::net::TcpStream::connect(addr).await?).await
            } else {
                fill(tokio::net::TcpStream::connect(addr).await?).await
            }
        })
        .await
        .unwrap()
        .unwrap()
    });
    assert_eq!(reader.join().unwrap(), TOTAL, "bytes the peer read");
    (cpu_ms() - cpu, wall.elapsed().as_secs_f64() * 1e3)
}

/// `v`'s median, lowest and highest.
fn spread(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    format!("{:.0} ({:.0}-{:.0})", v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(7, |r| r.parse().expect("rounds: a number"));
    let only = std::env::args().nth(2);
    let (blockio, tokio) = match only.as_deref() {
        None => (true, true),
        Some("blockio") => (true, false),
        Some("tokio") => (false, true),
        Some(other) => panic!("the stack: blockio or tokio, not {other:?}"),
    };
    let runtimes = [
        (
            "multi-thread, 2 workers",
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        ),
        (
            "current-thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
    ];
    for (name, rt) in &runtimes {
        let (mut b, mut t) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            if blockio {
                b.push(round(rt, true));
            }
            if tokio {
                t.push(round(rt, false));
            }
        }
        let cpu = |v: &[(f64, f64)]| spread(v.iter().map(|r| r.0).collect());
        let wall = |v: &[(f64, f64)]| spread(v.iter().map(|r| r.1).collect());
        println!(
            "{name}: {} MiB, {rounds} rounds; CPU ms blockio {} tokio {}; wall ms blockio {} tokio {}",
            TOTAL >> 20,
            cpu(&b),
            cpu(&t),
            wall(&b),
            wall(&t)
        );
    }
}
