//! What a large read through tokio's `AsyncRead` costs: 32 MiB read with
//! `read_buf` into a `BytesMut` that grows as it fills (how mini-redis
//! reads a large SET), on a blockio stream, on the same stream with
//! `ReadBuf::initialize_unfilled` called before each read (zeroing the
//! whole unfilled part every call, which the trait read does not), and
//! on a tokio stream; rounds alternate, and the medians and spreads are
//! printed (needs the `tokio` feature).
//!
//! ```text
//! cargo run --release -p blockio --features tokio --example read_buf_large [rounds]
//! ```

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

const TOTAL: usize = 32 << 20;

/// A stream whose reads zero the caller's unfilled buffer first.
struct Zeroing<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for Zeroing<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        buf.initialize_unfilled();
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

/// Reads [`TOTAL`] bytes from `s`: the milliseconds it took.
async fn drain<S: AsyncRead + Unpin>(mut s: S) -> std::io::Result<f64> {
    let start = Instant::now();
    let mut buf = bytes::BytesMut::with_capacity(4096);
    while buf.len() < TOTAL {
        if s.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// A peer on a thread that sends [`TOTAL`] bytes to `addr`.
fn peer(addr: std::net::SocketAddr) -> std::thread::JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || std::net::TcpStream::connect(addr)?.write_all(&vec![7u8; TOTAL]))
}

/// One round on each stack: milliseconds for blockio, blockio zeroing,
/// tokio.
async fn round(e: &blockio::aio::AsyncEngine) -> std::io::Result<[f64; 3]> {
    let mut ms = [0.0; 3];
    for (i, zeroing) in [false, true].into_iter().enumerate() {
        let l = blockio::net::TcpListener::bind_with(e, "127.0.0.1:0").await?;
        let p = peer(l.local_addr()?);
        let (s, _) = l.accept().await?;
        ms[i] = if zeroing {
            drain(Zeroing(s)).await?
        } else {
            drain(s).await?
        };
        p.join().expect("the peer panicked")?;
    }
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let p = peer(l.local_addr()?);
    let (s, _) = l.accept().await?;
    ms[2] = drain(s).await?;
    p.join().expect("the peer panicked")?;
    Ok(ms)
}

fn main() -> std::io::Result<()> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("rounds {a:?}: {e}"),
            )
        })?,
        None => 9,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    rt.block_on(async {
        let e = blockio::aio::AsyncEngine::new()?;
        for _ in 0..rounds.max(1) {
            for (t, ms) in times.iter_mut().zip(round(&e).await?) {
                t.push(ms);
            }
        }
        Ok::<_, std::io::Error>(())
    })?;
    let names = ["blockio", "blockio, unfilled part zeroed first", "tokio"];
    let median = |v: &[f64]| v[v.len() / 2];
    let mut sorted = times.clone();
    sorted.iter_mut().for_each(|v| v.sort_by(f64::total_cmp));
    for (name, v) in names.iter().zip(&sorted) {
        println!(
            "{name}: median {:.1} ms (min {:.1}, max {:.1}), {:.2}x tokio",
            median(v),
            v[0],
            v[v.len() - 1],
            median(v) / median(&sorted[2])
        );
    }
    Ok(())
}
