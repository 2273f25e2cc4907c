//! tokio's paused clock against a request and its reply, round after
//! round (the shape of mini-redis's `key_value_timeout`): a client
//! connects, sends four bytes, and races its read of the echoed reply
//! against a one-second timer of the paused clock. The server answers
//! without waiting for anything but the request, so the reply must win
//! every round, as it does on tokio's own sockets: the clock may not move
//! while an accept, a connect, a receive or a send is in flight that
//! completes without the peer doing anything more.
//!
//! Each test runs the rounds on one driving mode of the engine, client and
//! server both tasks of the paused runtime, the client reading the reply
//! through tokio's I/O traits or from a receive stream. Run on both
//! backends: with `BLOCKIO_BACKEND=threads` every engine is the thread
//! pool's, whatever driving it asks for.
//!
//! What the tests guard, as measured against blockio before its paused
//! clock was kept on every driving mode (three runs on io_uring): the
//! runtime-driven ring, the default engine, read through the traits (9 to
//! 81 rounds of 200 lost) and from a receive stream (7 to 44); a driver
//! thread read from a receive stream (22 to 118). A driver thread read
//! through the traits lost none in those runs, so it guards nothing
//! reliably. The caller-driven
//! ring and the thread pool lost none on io_uring, and every test passed
//! with `BLOCKIO_BACKEND=threads`: those cases check that each driving
//! mode keeps the clock, and guard no failure seen before.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving};
use blockio::BackendChoice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Rounds per test.
const ROUNDS: u32 = 200;
/// The timer the reply races: the clock jumps to it if the runtime
/// looks idle while the exchange is in flight.
const TIMER: Duration = Duration::from_secs(1);

/// The sockets a round uses.
enum Sockets {
    Tokio,
    /// blockio's, on this engine, the client reading as [`Reader`] says.
    Blockio(AsyncEngine, Reader),
}

/// How a blockio client reads the reply.
#[derive(Clone, Copy)]
enum Reader {
    /// tokio's `AsyncReadExt::read_exact`.
    Traits,
    /// A receive stream (`recv_stream().next()`).
    Stream,
}

/// A listener of either kind.
enum Listener {
    Tokio(tokio::net::TcpListener),
    Blockio(blockio::net::TcpListener),
}

impl Sockets {
    async fn bind(&self) -> Listener {
        match self {
            Sockets::Tokio => {
                Listener::Tokio(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
            }
            Sockets::Blockio(engine, _) => Listener::Blockio(
                blockio::net::TcpListener::bind_with(engine, "127.0.0.1:0")
                    .await
                    .unwrap(),
            ),
        }
    }

    /// Connects to `addr`, sends `request`, and races the read of its
    /// echo against [`TIMER`]: whether the reply came first.
    async fn ask(&self, addr: SocketAddr, request: [u8; 4]) -> bool {
        match self {
            Sockets::Tokio => {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                exchange(stream, request).await
            }
            Sockets::Blockio(engine, reader) => {
                let stream = blockio::net::TcpStream::connect_with(engine, addr)
                    .await
                    .unwrap();
                match reader {
                    Reader::Traits => exchange(stream, request).await,
                    Reader::Stream => exchange_by_stream(stream, request).await,
                }
            }
        }
    }
}

/// Sends `request` on `stream`, then reads its echo under [`TIMER`].
async fn exchange<S>(mut stream: S, request: [u8; 4]) -> bool
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(&request).await.unwrap();
    let mut reply = [0u8; 4];
    tokio::select! {
        read = stream.read_exact(&mut reply) => {
            read.unwrap();
            assert_eq!(reply, request, "the reply is not the request echoed");
            true
        }
        _ = tokio::time::sleep(TIMER) => false,
    }
}

/// [`exchange`], the reply read from a receive stream made once the
/// request is sent: four bytes on loopback come in one buffer.
async fn exchange_by_stream(stream: blockio::net::TcpStream, request: [u8; 4]) -> bool {
    let (sent, _) = stream.write_all(request.to_vec()).await;
    sent.unwrap();
    let mut received = stream.recv_stream();
    tokio::select! {
        reply = received.next() => {
            let reply = reply.expect("the stream ended before the reply").unwrap();
            assert_eq!(&reply[..], &request[..], "the reply is not the request echoed");
            true
        }
        _ = tokio::time::sleep(TIMER) => false,
    }
}

/// Accepts one connection and echoes its four bytes.
async fn echo_once(listener: Arc<Listener>) {
    match &*listener {
        Listener::Tokio(l) => echo(l.accept().await.unwrap().0).await,
        Listener::Blockio(l) => echo(l.accept().await.unwrap().0).await,
    }
}

async fn echo<S>(mut stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = [0u8; 4];
    stream.read_exact(&mut request).await.unwrap();
    stream.write_all(&request).await.unwrap();
}

/// [`ROUNDS`] rounds on `sockets`, on the paused runtime the test runs
/// on, the server a task of its: how many the timer won.
async fn rounds(sockets: &Sockets) -> u32 {
    // One listener for every round: a port bound per round would spend
    // thousands of the machine's ephemeral ports a run.
    let listener = Arc::new(sockets.bind().await);
    let addr = match &*listener {
        Listener::Tokio(l) => l.local_addr().unwrap(),
        Listener::Blockio(l) => l.local_addr().unwrap(),
    };
    let mut lost = 0;
    for round in 0..ROUNDS {
        let served = tokio::spawn(echo_once(listener.clone()));
        let won = sockets.ask(addr, round.to_le_bytes()).await;
        served.await.unwrap();
        if !won {
            lost += 1;
        }
    }
    lost
}

/// Runs the rounds and asserts the reply won each one.
async fn check(sockets: Sockets, what: &str) {
    let lost = rounds(&sockets).await;
    assert_eq!(
        lost, 0,
        "{what}: the paused clock jumped to the {TIMER:?} timer before the reply in {lost} of \
         {ROUNDS} rounds"
    );
}

/// The engine a tokio runtime gets by default: on io_uring, a ring the
/// runtime drives itself.
fn runtime_driven(reader: Reader) -> Sockets {
    Sockets::Blockio(AsyncEngine::current().unwrap(), reader)
}

/// An engine with a driver thread of its own.
fn driver_thread(reader: Reader) -> Sockets {
    Sockets::Blockio(
        AsyncEngine::builder()
            .driving(Driving::Thread)
            .build()
            .unwrap(),
        reader,
    )
}

/// A caller-driven engine submitting as each operation starts, driven by a
/// `drive_on_tokio` task of the test's own.
fn caller_driven(reader: Reader) -> Sockets {
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .build()
        .unwrap();
    tokio::spawn(drive_on_tokio(engine.clone()));
    Sockets::Blockio(engine, reader)
}

/// The thread-pool backend, asked for.
fn thread_pool(reader: Reader) -> Sockets {
    Sockets::Blockio(
        AsyncEngine::builder()
            .backend(BackendChoice::ThreadPool)
            .build()
            .unwrap(),
        reader,
    )
}

/// The reference: tokio's own sockets.
#[tokio::test(start_paused = true)]
async fn tokio_sockets_reply_before_the_timer() {
    check(Sockets::Tokio, "tokio").await;
}

/// The default engine.
#[tokio::test(start_paused = true)]
async fn runtime_driven_reply_before_the_timer() {
    check(runtime_driven(Reader::Traits), "runtime-driven").await;
}

#[tokio::test(start_paused = true)]
async fn runtime_driven_stream_reply_before_the_timer() {
    check(
        runtime_driven(Reader::Stream),
        "runtime-driven, receive stream",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn driver_thread_reply_before_the_timer() {
    check(driver_thread(Reader::Traits), "driver thread").await;
}

#[tokio::test(start_paused = true)]
async fn driver_thread_stream_reply_before_the_timer() {
    check(
        driver_thread(Reader::Stream),
        "driver thread, receive stream",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn caller_driven_reply_before_the_timer() {
    check(caller_driven(Reader::Traits), "caller-driven").await;
}

#[tokio::test(start_paused = true)]
async fn caller_driven_stream_reply_before_the_timer() {
    check(
        caller_driven(Reader::Stream),
        "caller-driven, receive stream",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn thread_pool_reply_before_the_timer() {
    check(thread_pool(Reader::Traits), "thread pool").await;
}

#[tokio::test(start_paused = true)]
async fn thread_pool_stream_reply_before_the_timer() {
    check(thread_pool(Reader::Stream), "thread pool, receive stream").await;
}

/// One connection of a driver thread's engine reads a reply through the
/// traits with the clock running, which on io_uring keeps a multishot
/// receive armed on the driver for the reads after it; then the clock is
/// paused, and [`ROUNDS`] rounds of request and echo on that connection
/// race the timer. Each read that finds that receive with nothing queued
/// must hold the clock as a receive made then would: without it, the
/// timer won 90 to 200 rounds of 200 beside a busy thread and 1 to 3 in
/// some runs alone.
#[tokio::test]
async fn driver_thread_kept_receive_then_paused_reply_before_the_timer() {
    let engine = AsyncEngine::builder()
        .driving(Driving::Thread)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 4];
        while s.read_exact(&mut request).await.is_ok() {
            s.write_all(&request).await.unwrap();
        }
    });
    let mut client = blockio::net::TcpStream::connect_with(&engine, addr)
        .await
        .unwrap();
    // With the clock running: the reply is not there yet when the read
    // starts, so it waits in the receive kept armed.
    AsyncWriteExt::write_all(&mut client, &[9u8; 4])
        .await
        .unwrap();
    let mut reply = [0u8; 4];
    client.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply, [9u8; 4]);
    tokio::time::pause();
    let mut lost = 0;
    for round in 0..ROUNDS {
        let request = round.to_le_bytes();
        AsyncWriteExt::write_all(&mut client, &request)
            .await
            .unwrap();
        tokio::select! {
            read = client.read_exact(&mut reply) => {
                read.unwrap();
                assert_eq!(reply, request, "the reply is not the request echoed");
            }
            _ = tokio::time::sleep(TIMER) => {
                lost += 1;
                // The late reply, so that the next round lines up.
                client.read_exact(&mut reply).await.unwrap();
                assert_eq!(reply, request, "the reply is not the request echoed");
            }
        }
    }
    drop(client);
    server.await.unwrap();
    assert_eq!(
        lost, 0,
        "driver thread, after a read kept a receive armed: the paused clock jumped to the \
         {TIMER:?} timer before the reply in {lost} of {ROUNDS} rounds"
    );
}
