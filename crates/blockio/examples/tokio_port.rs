//! A tokio echo server and client ported to `blockio::net` (needs the
//! `tokio` feature). The lines that changed say so; everything else is
//! tokio code as written for `tokio::net`.
//!
//! ```text
//! cargo run -p blockio --features tokio --example tokio_port
//! ```
//!
//! The porting rules:
//! * `TcpListener::bind`, `TcpStream::connect`, `local_addr`, `peer_addr`
//!   have tokio's signatures (async, name look-ups off the executor's
//!   thread, `io::Result`s) and use the default engine
//!   (`AsyncEngine::current`: the runtime's own); `bind_with` and
//!   `connect_with` take an engine of your own.
//! * Streams have owned-buffer `read`/`write`/`write_all` of their own,
//!   which method lookup finds before `AsyncReadExt::read` and friends on a
//!   stream held by value. Code generic over `AsyncRead + AsyncWrite`
//!   compiles unchanged; where a concrete stream calls the extension
//!   traits, call them through a `&mut` binding (`let s = &mut stream;`),
//!   where the traits' methods are found first.
//! * Errors are the kernel's `io::Error`s, as on tokio.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

// Changed: blockio's types instead of tokio::net's.
use blockio::net::{TcpListener, TcpStream};

/// Echoes until the peer closes: tokio code, unchanged.
async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 4096];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(total);
        }
        s.write_all(&buf[..n]).await?;
        total += n as u64;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await?;
        echo(stream).await
    });
    let mut stream = TcpStream::connect(addr).await?;
    let s = &mut stream; // Changed: the extension traits through `&mut`.
    s.write_all(b"ported from tokio").await?;
    s.shutdown().await?;
    let mut back = String::new();
    s.read_to_string(&mut back).await?;
    assert_eq!(back, "ported from tokio");
    let echoed = server.await.expect("the server task")?;
    println!("echoed {echoed} bytes: {back}");
    Ok(())
}
