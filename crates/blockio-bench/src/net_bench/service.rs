//! The servers every contender runs, written once over [`Conn`]: HTTP/1.1
//! keep-alive with a fixed response (requests parsed with `httparse`),
//! echo, and a checksum of everything a connection sends. Only the
//! runtime under them differs.

use std::future::Future;
use std::io;

/// The fixed response body.
pub const BODY: &[u8] = b"Hello, world!\n";

/// A connection with owned-buffer reads and writes: what each runtime
/// provides. No `Send` bound: monoio's connections are not `Send`; a
/// runtime that moves tasks between threads gets `Send` futures from its
/// own implementation.
pub trait Conn {
    /// Reads into `buf`'s capacity (from its start): the count, and the
    /// buffer with the bytes at its start.
    fn read(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<usize>, Vec<u8>)>;
    /// Writes all of `buf`.
    fn write_all(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<()>, Vec<u8>)>;
}

/// The response to every request.
pub fn response() -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    )
    .into_bytes();
    r.extend_from_slice(BODY);
    r
}

pub use blockio_bench_input::http::parse_requests;

/// Serves one connection until the peer closes it: reads, answers every
/// complete request (pipelined ones in one write), keeps the rest.
pub async fn serve<C: Conn>(mut conn: C) -> io::Result<()> {
    let answer = response();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut out = Vec::new();
    loop {
        let (res, b) = conn.read(buf).await;
        buf = b;
        let n = res?;
        if n == 0 {
            return Ok(());
        }
        pending.extend_from_slice(&buf[..n]);
        let (count, used) = parse_requests(&pending)?;
        pending.drain(..used);
        if count == 0 {
            continue;
        }
        out.clear();
        for _ in 0..count {
            out.extend_from_slice(&answer);
        }
        let (res, o) = conn.write_all(out).await;
        out = o;
        res?;
    }
}

/// The echo server's smallest read buffer.
pub const ECHO_BUFFER: usize = 16 * 1024;

/// Echoes everything back until the peer closes, reading up to `size`
/// bytes at a time.
pub async fn echo<C: Conn>(mut conn: C, size: usize) -> io::Result<()> {
    let mut buf = vec![0u8; size];
    loop {
        let (res, b) = conn.read(buf).await;
        let n = res?;
        if n == 0 {
            return Ok(());
        }
        let mut msg = b;
        msg.truncate(n);
        let (res, m) = conn.write_all(msg).await;
        res?;
        buf = m;
        buf.resize(size, 0);
    }
}

/// The size of the checksum server's reads.
pub const SUM_READ: usize = 64 * 1024;

/// Checksums everything the peer sends as it arrives (XXH3-64), and
/// answers the digest (8 bytes, little-endian) when the peer has shut its
/// side down.
pub async fn checksum<C: Conn>(mut conn: C) -> io::Result<()> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; SUM_READ];
    loop {
        let (res, b) = conn.read(buf).await;
        let n = res?;
        if n == 0 {
            break;
        }
        hasher.update(&b[..n]);
        buf = b;
        buf.resize(SUM_READ, 0);
    }
    let digest = hasher.digest().to_le_bytes().to_vec();
    conn.write_all(digest).await.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_ends_with_the_body() {
        assert!(response().ends_with(BODY));
    }
}
