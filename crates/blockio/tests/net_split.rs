//! A stream's halves, as tokio's `split` and `into_split` give them: tokio
//! code that reads in one task and writes in another, `reunite`, the
//! writing half's shutdown on drop, and the socket options tokio's streams
//! have. Run on both backends (`BLOCKIO_BACKEND=threads`).

use std::io::{Read, Write};
use std::net::Shutdown;

use blockio::net::{tcp, unix, TcpListener, TcpStream, UnixListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn assert_send_sync<T: Send + Sync>(_: &T) {}

/// A blockio stream accepted from a std client on `rt`. The client's
/// reads give up after a minute, so that an end of stream that never
/// comes fails the test instead of hanging it.
fn tcp_pair(rt: &tokio::runtime::Runtime) -> (TcpStream, std::net::TcpStream) {
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        (stream, client)
    })
}

/// Sends `data` from a thread of its own, then shuts the writing side;
/// reads everything the other end sends back until its end.
fn send_and_collect(mut peer: std::net::TcpStream, data: Vec<u8>) -> Vec<u8> {
    let mut writer_end = peer.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        writer_end.write_all(&data).unwrap();
        writer_end.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    peer.read_to_end(&mut back).unwrap();
    sending.join().unwrap();
    back
}

/// Pseudo-random bytes.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = common::Rng(seed | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// tokio's echo with `into_split`: `io::copy` from the reading half to
/// the writing half in a task of its own, 4 MiB through it while the peer
/// sends and reads at once; dropping the writing half at the end of the
/// copy ends the peer's stream.
#[test]
fn into_split_echo_in_a_task_of_its_own() {
    let rt = runtime();
    let (stream, client) = tcp_pair(&rt);
    let (mut rd, mut wr) = stream.into_split();
    assert_send_sync(&rd);
    assert_send_sync(&wr);
    let echo = rt.spawn(async move {
        let n = tokio::io::copy(&mut rd, &mut wr).await?;
        wr.shutdown().await?;
        Ok::<_, std::io::Error>(n)
    });
    let sent = data(4 << 20, 7);
    let back = send_and_collect(client, sent.clone());
    assert_eq!(rt.block_on(echo).unwrap().unwrap(), sent.len() as u64);
    assert!(back == sent, "the echo differs from what was sent");
}

/// The same over a Unix stream, the halves in two tasks: one reads, the
/// other writes what it is sent through a channel.
#[test]
fn unix_into_split_halves_in_two_tasks() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("split.sock");
    let listener = rt.block_on(async { UnixListener::bind(&path) }).unwrap();
    let client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let (stream, _) = rt.block_on(listener.accept()).unwrap();
    let (mut rd, mut wr): (unix::OwnedReadHalf, unix::OwnedWriteHalf) = stream.into_split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let reading = rt.spawn(async move {
        let mut buf = vec![0u8; 10_000];
        loop {
            let n = rd.read(&mut buf).await?;
            if n == 0 || tx.send(buf[..n].to_vec()).await.is_err() {
                return Ok::<_, std::io::Error>(rd);
            }
        }
    });
    let writing = rt.spawn(async move {
        while let Some(chunk) = rx.recv().await {
            wr.write_all(&chunk).await?;
        }
        wr.flush().await?;
        Ok::<_, std::io::Error>(wr)
    });
    let sent = data(1 << 20, 11);
    let back = send_and_collect_unix(client, sent.clone());
    let rd = rt.block_on(reading).unwrap().unwrap();
    let wr = rt.block_on(writing).unwrap().unwrap();
    assert!(back.0 == sent, "the echo differs from what was sent");
    // Reunited, the stream writes on: the halves never shut it.
    let stream = rd.reunite(wr).unwrap();
    rt.block_on(stream.write_all(b"after".to_vec())).0.unwrap();
    let mut after = [0u8; 5];
    let mut peer = back.1;
    peer.read_exact(&mut after).unwrap();
    assert_eq!(&after, b"after");
}

/// Sends `data` and shuts the writing side; reads back `data.len()` bytes
/// (the stream stays open afterwards): the bytes and the peer.
fn send_and_collect_unix(
    mut peer: std::os::unix::net::UnixStream,
    data: Vec<u8>,
) -> (Vec<u8>, std::os::unix::net::UnixStream) {
    let mut writer_end = peer.try_clone().unwrap();
    let len = data.len();
    let sending = std::thread::spawn(move || {
        writer_end.write_all(&data).unwrap();
        writer_end.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = vec![0u8; len];
    peer.read_exact(&mut back).unwrap();
    sending.join().unwrap();
    (back, peer)
}

/// A dropped owned writing half shuts the writing side down after the
/// bytes the traits accepted: the peer reads them all, then the end; the
/// reading half reads on.
#[test]
fn dropped_writing_half_ends_the_peers_stream_after_its_bytes() {
    let rt = runtime();
    let (stream, mut client) = tcp_pair(&rt);
    let (mut rd, mut wr) = stream.into_split();
    let sent = data(2 << 20, 3);
    let to_send = sent.clone();
    let peer = std::thread::spawn(move || {
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        client.write_all(b"still reading").unwrap();
        (got, client)
    });
    rt.block_on(async {
        // Accepted by the trait, not yet all sent when the half goes.
        wr.write_all(&to_send).await.unwrap();
        drop(wr);
    });
    let (got, client) = peer.join().unwrap();
    assert!(
        got == sent,
        "the peer did not get every byte before the end"
    );
    let mut reply = [0u8; 13];
    rt.block_on(rd.read_exact(&mut reply)).unwrap();
    assert_eq!(&reply, b"still reading");
    drop(client);
}

/// A forgotten writing half leaves the writing side open.
#[test]
fn forgotten_writing_half_leaves_the_stream_open() {
    let rt = runtime();
    let (stream, mut client) = tcp_pair(&rt);
    let (rd, wr) = stream.into_split();
    wr.forget();
    let stream: &TcpStream = rd.as_ref();
    rt.block_on(stream.write_all(b"open".to_vec())).0.unwrap();
    let mut got = [0u8; 4];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"open");
}

/// `reunite` refuses halves of two streams and gives both back; one
/// stream's halves give the stream, whose writing side is still open.
#[test]
fn reunite_refuses_another_streams_half() {
    let rt = runtime();
    let (first, mut first_client) = tcp_pair(&rt);
    let (second, _second_client) = tcp_pair(&rt);
    let (rd1, wr1) = first.into_split();
    let (rd2, wr2) = second.into_split();
    let err: tcp::ReuniteError = rd1.reunite(wr2).unwrap_err();
    assert!(
        err.to_string().contains("two different TCP streams"),
        "{err}"
    );
    let tcp::ReuniteError(rd1, wr2) = err;
    let first = rd1.reunite(wr1).unwrap();
    let _second = rd2.reunite(wr2).unwrap();
    rt.block_on(first.write_all(b"whole".to_vec())).0.unwrap();
    let mut got = [0u8; 5];
    first_client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"whole");
}

/// The borrowed halves: a read and a write of the same stream awaited
/// together, with tokio's traits.
#[test]
fn split_reads_and_writes_at_once() {
    let rt = runtime();
    let (mut stream, client) = tcp_pair(&rt);
    let sent = data(1 << 20, 5);
    let to_send = sent.clone();
    let peer = std::thread::spawn(move || send_and_collect(client, to_send));
    rt.block_on(async {
        let (mut rd, mut wr) = stream.split();
        let mut got = vec![0u8; sent.len()];
        let (read, written) = tokio::join!(rd.read_exact(&mut got), async {
            wr.write_all(&sent).await?;
            wr.shutdown().await
        });
        read.unwrap();
        written.unwrap();
        assert!(got == sent, "the read half got other bytes");
    });
    let back = peer.join().unwrap();
    assert!(back == sent, "the write half sent other bytes");
}

/// `set_ttl`/`ttl` as tokio's, and a value the kernel refuses is its
/// error.
#[test]
fn ttl_round_trips_and_an_out_of_range_one_is_refused() {
    let rt = runtime();
    let (stream, _client) = tcp_pair(&rt);
    stream.set_ttl(17).unwrap();
    assert_eq!(stream.ttl().unwrap(), 17);
    let err = stream.set_ttl(256).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    assert_eq!(stream.ttl().unwrap(), 17);
}

/// `peek` returns the next bytes and leaves them to the next read: a
/// peek of part of them, a peek of more than a short read holds, a peek
/// dropped before any byte came, and the end of the stream.
#[test]
fn peek_leaves_the_bytes_to_the_next_read() {
    let rt = runtime();
    let (stream, mut client) = tcp_pair(&rt);
    rt.block_on(async {
        // Dropped while nothing has come: it takes nothing.
        let mut early = [0u8; 4];
        let peek = stream.peek(&mut early);
        futures::pin_mut!(peek);
        assert!(futures::poll!(peek.as_mut()).is_pending());
    });
    client.write_all(b"hello world").unwrap();
    let mut got = Vec::new();
    rt.block_on(async {
        // The dropped peek's receive holds 4 bytes at most: the peek adds
        // what the socket holds after them, rather than returning those 4
        // bytes every time (a loop peeking for 5 would never end).
        let mut head = [0u8; 5];
        let mut n = 0;
        for _ in 0..1000 {
            n = stream.peek(&mut head).await.unwrap();
            if n == 5 {
                break;
            }
        }
        assert_eq!(n, 5, "peeks never saw the fifth byte");
        assert_eq!(&head, b"hello");
        // Peeked again: the same bytes.
        let mut again = [0u8; 5];
        assert_eq!(stream.peek(&mut again).await.unwrap(), 5);
        assert_eq!(&again, b"hello");
        while got.len() < 11 {
            let (n, buf) = stream.read(vec![0u8; 11 - got.len()]).await;
            got.extend_from_slice(&buf[..n.unwrap()]);
        }
    });
    assert_eq!(got, b"hello world");
    client.shutdown(Shutdown::Write).unwrap();
    let mut end = [0u8; 4];
    assert_eq!(rt.block_on(stream.peek(&mut end)).unwrap(), 0);
}

/// A peek through a stream's reading half, as tokio's `OwnedReadHalf::peek`
/// is used: the trait read that follows gets the peeked bytes.
#[test]
fn peek_then_read_through_the_reading_half() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("peek.sock");
    let listener = rt.block_on(async { UnixListener::bind(&path) }).unwrap();
    let mut client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let (stream, _) = rt.block_on(listener.accept()).unwrap();
    let (mut rd, _wr) = stream.into_split();
    client.write_all(b"abcdef").unwrap();
    rt.block_on(async {
        let mut first = [0u8; 1];
        assert_eq!(rd.as_ref().peek(&mut first).await.unwrap(), 1);
        assert_eq!(&first, b"a");
        let mut all = [0u8; 6];
        rd.read_exact(&mut all).await.unwrap();
        assert_eq!(&all, b"abcdef");
    });
}

/// `set_zero_linger` (tokio's replacement for `set_linger`): the stream
/// closes with a reset, after the bytes the traits accepted.
#[test]
fn zero_linger_resets_after_the_accepted_bytes() {
    let rt = runtime();
    let (mut stream, mut client) = tcp_pair(&rt);
    assert_eq!(stream.linger().unwrap(), None);
    stream.set_zero_linger().unwrap();
    assert_eq!(stream.linger().unwrap(), Some(std::time::Duration::ZERO));
    rt.block_on(async {
        // Through the trait (accepted, then sent on its own).
        let s = &mut stream;
        s.write_all(b"last words").await.unwrap();
    });
    drop(stream);
    let mut got = [0u8; 10];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"last words");
    let err = client.read(&mut [0u8; 1]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ECONNRESET), "{err}");
}
