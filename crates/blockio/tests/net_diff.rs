//! The same server programs on `tokio::net` and on `blockio::net`, and what
//! their peers observe, compared byte for byte.
//!
//! Each scenario is written once, over tokio's I/O traits (or, for owned
//! writes, a small trait both stacks implement), and run on four stacks:
//! tokio, blockio's default engine, a blockio engine driven by tokio's
//! reactor (`drive_on_tokio`), and blockio on its epoll fallback. The
//! peers are plain std sockets on threads, each with a time limit, so a
//! server that stalls is seen as a peer that timed out, never as a hung
//! test. Every observation must equal tokio's.
//!
//! The peers are on loopback, or across a veth link between two network
//! namespaces when `scripts/net-link` runs this file ([`link`] decides:
//! servers bind `link::server_ip()`, and peers make their sockets with
//! `link::connect` and `link::listen`).

use std::future::Future;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream as StdUnix;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
use blockio::BackendChoice;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

mod common;
mod link;

/// How long a peer waits for any one read before it reports a stall:
/// long enough that only a stall reaches it. With 100 peers on threads
/// of their own and every server on one thread, a loaded 2-core machine
/// (load average 15-25) once kept 26 peers of tokio's own server
/// waiting more than 10 s for a byte.
const PEER_LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stack {
    Tokio,
    /// The default engine, built on the scenario's runtime, which drives
    /// it ([`Driving::Auto`]).
    Blockio,
    /// An engine with its own driver thread ([`Driving::Thread`]).
    BlockioThread,
    /// A caller-driven engine on tokio's reactor.
    BlockioDriven,
    /// The epoll fallback.
    BlockioEpoll,
}

const STACKS: [Stack; 5] = [
    Stack::Tokio,
    Stack::Blockio,
    Stack::BlockioThread,
    Stack::BlockioDriven,
    Stack::BlockioEpoll,
];

/// A stream of any stack, as the scenarios see it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type BoxIo = Box<dyn Io>;

/// An accepted connection of any stack, for the scenarios that use more
/// than the I/O traits.
enum Conn {
    TokioTcp(tokio::net::TcpStream),
    TokioUnix(tokio::net::UnixStream),
    BlockioTcp(blockio::net::TcpStream),
    BlockioUnix(blockio::net::UnixStream),
}

impl Conn {
    fn io(self) -> BoxIo {
        match self {
            Conn::TokioTcp(s) => Box::new(s),
            Conn::TokioUnix(s) => Box::new(s),
            Conn::BlockioTcp(s) => Box::new(s),
            Conn::BlockioUnix(s) => Box::new(s),
        }
    }
}

type Handler = Arc<dyn Fn(Conn) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Which socket family a scenario runs over, and the server's send buffer.
#[derive(Clone, Copy, Debug)]
enum Family {
    Tcp { send_buffer: Option<usize> },
    Unix,
}

/// Where a peer connects.
#[derive(Clone, Debug)]
enum Addr {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

/// A connected peer: std's blocking sockets, with a time limit per read.
enum Peer {
    Tcp(std::net::TcpStream),
    Unix(StdUnix),
}

impl Addr {
    fn connect(&self) -> Peer {
        let p = match self {
            Addr::Tcp(a) => Peer::Tcp(link::connect(*a)),
            Addr::Unix(p) => Peer::Unix(StdUnix::connect(p).unwrap()),
        };
        match &p {
            Peer::Tcp(s) => s.set_read_timeout(Some(PEER_LIMIT)).unwrap(),
            Peer::Unix(s) => s.set_read_timeout(Some(PEER_LIMIT)).unwrap(),
        }
        p
    }
}

impl Peer {
    /// The connection's two ends, for a failure's message: a TCP peer's
    /// local and remote addresses (a capture of the link names them so).
    fn ends(&self) -> String {
        match self {
            Peer::Tcp(s) => format!(
                "{} -> {}",
                s.local_addr().map_or("?".into(), |a| a.to_string()),
                s.peer_addr().map_or("?".into(), |a| a.to_string())
            ),
            Peer::Unix(_) => "unix".into(),
        }
    }
}

impl Read for Peer {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Peer::Tcp(s) => s.read(buf),
            Peer::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Peer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Peer::Tcp(s) => s.write(buf),
            Peer::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A server of `stack` running `handler` on every connection, on a current-thread runtime of its own thread.
struct Server {
    addr: Addr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn engine(stack: Stack) -> Option<AsyncEngine> {
    match stack {
        Stack::Tokio => None,
        Stack::Blockio => Some(AsyncEngine::new().unwrap()),
        Stack::BlockioThread => Some(
            AsyncEngine::builder()
                .driving(Driving::Thread)
                .build()
                .unwrap(),
        ),
        Stack::BlockioDriven => Some(
            AsyncEngine::builder()
                .driving(Driving::Caller(
                    CallerDriving::new().submit(Submit::PerRound),
                ))
                .build()
                .unwrap(),
        ),
        Stack::BlockioEpoll => Some(
            AsyncEngine::builder()
                .backend(BackendChoice::ThreadPool)
                .build()
                .unwrap(),
        ),
    }
}

fn serve(stack: Stack, family: Family, handler: Handler) -> Server {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let dir = matches!(family, Family::Unix).then(|| tempfile::tempdir().unwrap());
    let path = dir.as_ref().map(|d| d.path().join("sock"));
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let engine = engine(stack);
            if let (Stack::BlockioDriven, Some(e)) = (stack, &engine) {
                if e.poll_fd().is_some() {
                    tokio::spawn(drive_on_tokio(e.clone()));
                }
            }
            let accept_loop = accept_loop(family, engine, path, handler, addr_tx);
            tokio::select! {
                _ = accept_loop => {}
                _ = stopped => {}
            }
        });
    });
    let addr = addr_rx.recv().unwrap();
    Server {
        addr,
        stop: Some(stop),
        thread: Some(thread),
        _dir: dir,
    }
}

async fn accept_loop(
    family: Family,
    engine: Option<AsyncEngine>,
    path: Option<PathBuf>,
    handler: Handler,
    addr_tx: std::sync::mpsc::Sender<Addr>,
) {
    match (family, engine) {
        (Family::Tcp { send_buffer }, None) => {
            let l = tokio::net::TcpListener::bind((link::server_ip(), 0))
                .await
                .unwrap();
            addr_tx.send(Addr::Tcp(l.local_addr().unwrap())).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                if let Some(size) = send_buffer {
                    socket2::SockRef::from(&s)
                        .set_send_buffer_size(size)
                        .unwrap();
                }
                tokio::spawn(handler(Conn::TokioTcp(s)));
            }
        }
        (Family::Tcp { send_buffer }, Some(e)) => {
            let l = blockio::net::TcpListener::bind_with(&e, (link::server_ip(), 0))
                .await
                .unwrap();
            addr_tx.send(Addr::Tcp(l.local_addr().unwrap())).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                if let Some(size) = send_buffer {
                    s.socket().set_send_buffer_size(size).unwrap();
                }
                tokio::spawn(handler(Conn::BlockioTcp(s)));
            }
        }
        (Family::Unix, None) => {
            let path = path.unwrap();
            let l = tokio::net::UnixListener::bind(&path).unwrap();
            addr_tx.send(Addr::Unix(path)).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(handler(Conn::TokioUnix(s)));
            }
        }
        (Family::Unix, Some(e)) => {
            let path = path.unwrap();
            let l = blockio::net::UnixListener::bind_with(&e, &path).unwrap();
            addr_tx.send(Addr::Unix(path)).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(handler(Conn::BlockioUnix(s)));
            }
        }
    }
}

/// Runs `peers` on threads against a server of every stack, and checks
/// that each stack's peers observed what tokio's did.
fn compare<T, P>(name: &str, family: Family, handler: Handler, conns: usize, peer: P)
where
    T: PartialEq + std::fmt::Debug + Send + 'static,
    P: Fn(Addr, usize) -> T + Send + Sync + Clone + 'static,
{
    let mut reference: Option<Vec<T>> = None;
    for stack in STACKS {
        let server = serve(stack, family, handler.clone());
        let threads: Vec<_> = (0..conns)
            .map(|i| {
                let (addr, peer) = (server.addr.clone(), peer.clone());
                std::thread::spawn(move || peer(addr, i))
            })
            .collect();
        // Every peer is waited for before any failure is reported: the
        // report drops the server, and a peer still reading would then see
        // its connection cut by the teardown and fail too, as if the
        // server had failed it. So each message printed above a failure is
        // a peer's own.
        let joined: Vec<std::thread::Result<T>> = threads.into_iter().map(|t| t.join()).collect();
        let failed = joined.iter().filter(|r| r.is_err()).count();
        assert!(
            failed == 0,
            "{name}: {failed} of {conns} peers of {stack:?} over {family:?} failed \
             (their messages are above)"
        );
        let seen: Vec<T> = joined.into_iter().map(Result::unwrap).collect();
        drop(server);
        match &reference {
            None => reference = Some(seen),
            Some(want) => {
                for (i, (got, want)) in seen.iter().zip(want).enumerate() {
                    assert_eq!(
                        got, want,
                        "{name}: connection {i} on {stack:?} saw something else than on tokio"
                    );
                }
            }
        }
    }
}

/// What a peer saw of a byte stream: its length and a digest of it, or how
/// reading it failed.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Bytes { len: usize, sum: u64 },
    Failed(io::ErrorKind),
}

fn digest(bytes: &[u8]) -> u64 {
    // FNV-1a: order-sensitive, so a swapped or repeated chunk shows.
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The `n`th byte of connection `c`'s reply.
fn pattern(c: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 131 + c as u64 * 7 + i as u64 / 251) as u8)
        .collect()
}

fn read_exactly(p: &mut impl Read, len: usize) -> Seen {
    let mut buf = vec![0u8; len];
    match p.read_exact(&mut buf) {
        Ok(()) => Seen::Bytes {
            len,
            sum: digest(&buf),
        },
        Err(e) => Seen::Failed(e.kind()),
    }
}

/// `seen`, after checking it is exactly `want`: the scenarios whose
/// every byte is known check it against the bytes themselves as well as
/// against tokio, so a link that lost a byte on every stack still fails.
fn exactly(seen: Seen, want: &[u8], what: &str) -> Seen {
    let whole = Seen::Bytes {
        len: want.len(),
        sum: digest(want),
    };
    if let Seen::Failed(io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) = seen {
        panic!("{what}: stalled, no byte came for {PEER_LIMIT:?}");
    }
    assert_eq!(seen, whole, "{what}: the peer did not get every byte sent");
    seen
}

fn read_to_end(p: &mut Peer) -> Seen {
    let mut buf = Vec::new();
    match p.read_to_end(&mut buf) {
        Ok(_) => Seen::Bytes {
            len: buf.len(),
            sum: digest(&buf),
        },
        Err(e) => Seen::Failed(e.kind()),
    }
}

const REPLY: usize = 1 << 20;

/// The number a peer names itself by (connections are accepted in any
/// order).
async fn read_id(s: &mut BoxIo) -> usize {
    let mut id = [0u8; 4];
    s.read_exact(&mut id).await.unwrap();
    u32::from_le_bytes(id) as usize
}

/// A 1 MiB reply written without a flush, then a wait for a 1-byte
/// acknowledgement: the reply must reach the peer on its own.
fn reply_then_ack() -> Handler {
    Arc::new(|s: Conn| {
        Box::pin(async move {
            let mut s = s.io();
            let c = read_id(&mut s).await;
            s.write_all(&pattern(c, REPLY)).await.unwrap();
            let mut ack = [0u8; 1];
            s.read_exact(&mut ack).await.unwrap();
            s.write_all(b"bye").await.unwrap();
            s.shutdown().await.unwrap();
        })
    })
}

fn reply_then_ack_peer(addr: Addr, c: usize) -> (Seen, Seen) {
    let mut p = addr.connect();
    p.write_all(&(c as u32).to_le_bytes()).unwrap();
    let reply = exactly(
        read_exactly(&mut p, REPLY),
        &pattern(c, REPLY),
        &format!("reply of connection {c}"),
    );
    p.write_all(b"!").unwrap();
    let bye = exactly(
        read_to_end(&mut p),
        b"bye",
        &format!("end of connection {c}"),
    );
    (reply, bye)
}

#[test]
fn a_reply_written_without_flush_reaches_the_peer_over_tcp_with_a_small_send_buffer() {
    let family = Family::Tcp {
        send_buffer: Some(32 * 1024),
    };
    compare(
        "reply then ack",
        family,
        reply_then_ack(),
        5,
        reply_then_ack_peer,
    );
}

#[test]
fn a_reply_written_without_flush_reaches_the_peer_over_a_unix_socket() {
    compare(
        "reply then ack",
        Family::Unix,
        reply_then_ack(),
        5,
        reply_then_ack_peer,
    );
}

/// The size of connection `c`'s reply in the drop scenario: 16 B to 2 MiB.
fn drop_reply_len(c: usize) -> usize {
    (16usize << (c % 18)).min(2 << 20) + c
}

/// `write_all` (which returns `Ok`), then the stream dropped without a
/// flush or a shutdown: the peer must get every byte, then the end.
fn write_all_then_drop() -> Handler {
    Arc::new(|s: Conn| {
        Box::pin(async move {
            let mut s = s.io();
            let c = read_id(&mut s).await;
            s.write_all(&pattern(c, drop_reply_len(c))).await.unwrap();
            drop(s);
        })
    })
}

fn write_all_then_drop_peer(addr: Addr, c: usize) -> Seen {
    let mut p = addr.connect();
    let ends = p.ends();
    p.write_all(&(c as u32).to_le_bytes()).unwrap();
    exactly(
        read_to_end(&mut p),
        &pattern(c, drop_reply_len(c)),
        &format!("connection {c} ({ends})"),
    )
}

#[test]
fn bytes_written_before_a_drop_without_flush_all_arrive() {
    let family = Family::Tcp { send_buffer: None };
    compare(
        "write_all then drop",
        family,
        write_all_then_drop(),
        100,
        write_all_then_drop_peer,
    );
}

#[test]
fn bytes_written_before_a_drop_without_flush_all_arrive_over_unix_sockets() {
    compare(
        "write_all then drop",
        Family::Unix,
        write_all_then_drop(),
        100,
        write_all_then_drop_peer,
    );
}

/// A reply written through the traits (`write_all`, which returns `Ok`),
/// then the socket's own `shutdown(how)` (tokio: `SockRef::shutdown`;
/// blockio: the stream's `shutdown`) and a drop, without a flush: the
/// shutdown comes after every accepted byte, so the peer gets them all,
/// then the end.
fn write_all_then_shutdown(how: std::net::Shutdown) -> Handler {
    Arc::new(move |conn: Conn| {
        Box::pin(async move {
            async fn reply<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
                let mut id = [0u8; 4];
                s.read_exact(&mut id).await.unwrap();
                let c = u32::from_le_bytes(id) as usize;
                s.write_all(&pattern(c, drop_reply_len(c))).await.unwrap();
            }
            match conn {
                Conn::TokioTcp(mut s) => {
                    reply(&mut s).await;
                    socket2::SockRef::from(&s).shutdown(how).unwrap();
                }
                Conn::TokioUnix(mut s) => {
                    reply(&mut s).await;
                    socket2::SockRef::from(&s).shutdown(how).unwrap();
                }
                Conn::BlockioTcp(mut s) => {
                    reply(&mut s).await;
                    s.shutdown(how).unwrap();
                }
                Conn::BlockioUnix(mut s) => {
                    reply(&mut s).await;
                    s.shutdown(how).unwrap();
                }
            }
        })
    })
}

#[test]
fn a_shutdown_after_trait_writes_sends_every_accepted_byte_first() {
    for how in [std::net::Shutdown::Write, std::net::Shutdown::Both] {
        let small = Family::Tcp {
            send_buffer: Some(32 << 10),
        };
        for family in [small, Family::Unix] {
            compare(
                &format!("write_all then shutdown({how:?})"),
                family,
                write_all_then_shutdown(how),
                36,
                write_all_then_drop_peer,
            );
        }
    }
}

/// A small xorshift generator: the scenarios' random sizes and time
/// limits, the same on every stack.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What one write attempt under a time limit came to, as a retrying
/// writer needs it: how many bytes of what it asked went, or nothing known
/// yet.
enum Attempt {
    /// These many bytes went; write on from there.
    Sent(usize),
    /// The limit passed: on tokio the write sent nothing; on blockio the
    /// next write reports what it sent, if anything.
    TimedOut,
}

/// One `write` of `data` within `limit`, on the stream's own API: tokio's
/// `AsyncWriteExt::write`, blockio's owned `write`. A blockio write that
/// reports a dropped one ([`blockio::net::WriteDropped`]) counts that
/// write's bytes and sends nothing itself.
async fn timed_write(conn: &mut Conn, data: &[u8], limit: Duration) -> io::Result<Attempt> {
    use tokio::time::timeout;
    match conn {
        Conn::TokioTcp(s) => match timeout(limit, s.write(data)).await {
            Ok(res) => res.map(Attempt::Sent),
            Err(_) => Ok(Attempt::TimedOut),
        },
        Conn::BlockioTcp(s) => {
            match timeout(limit, blockio::net::TcpStream::write(s, data.to_vec())).await {
                Ok((Ok(n), _)) => Ok(Attempt::Sent(n)),
                Ok((Err(e), _)) => match blockio::net::WriteDropped::of(&e) {
                    Some(d) => Ok(Attempt::Sent(d.sent)),
                    None => Err(e),
                },
                Err(_) => Ok(Attempt::TimedOut),
            }
        }
        _ => unreachable!("a TCP scenario"),
    }
}

const TIMED_TOTAL: usize = 2 << 20;

/// 2 MiB written in random pieces, each write under a random limit of
/// 0.5-3.5 ms, retried from where the writer knows the stream stands, to
/// a peer that reads slowly: the peer must get every byte once, in order.
fn timed_writes() -> Handler {
    Arc::new(|mut conn: Conn| {
        Box::pin(async move {
            let mut id = [0u8; 4];
            match &mut conn {
                Conn::TokioTcp(s) => s.read_exact(&mut id).await.map(drop).unwrap(),
                Conn::BlockioTcp(s) => {
                    let (res, buf) = blockio::net::TcpStream::read(s, vec![0u8; 4]).await;
                    assert_eq!(res.unwrap(), 4);
                    id.copy_from_slice(&buf);
                }
                _ => unreachable!("a TCP scenario"),
            }
            let c = u32::from_le_bytes(id) as usize;
            let data = pattern(c, TIMED_TOTAL);
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ c as u64);
            let mut at = 0;
            while at < data.len() {
                let len = (1 + rng.below(64 * 1024) as usize).min(data.len() - at);
                let limit = Duration::from_micros(500 + rng.below(3000));
                match timed_write(&mut conn, &data[at..at + len], limit).await {
                    Ok(Attempt::Sent(n)) => at += n,
                    Ok(Attempt::TimedOut) => {}
                    Err(e) => panic!("write {at} on connection {c}: {e}"),
                }
            }
            drop(conn.io());
        })
    })
}

fn slow_reader(addr: Addr, c: usize) -> Seen {
    let mut p = addr.connect();
    p.write_all(&(c as u32).to_le_bytes()).unwrap();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match p.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) => return Seen::Failed(e.kind()),
        }
        // A slow reader: the server's writes wait for it.
        std::thread::sleep(Duration::from_micros(700));
    }
    let seen = Seen::Bytes {
        len: all.len(),
        sum: digest(&all),
    };
    exactly(seen, &pattern(c, TIMED_TOTAL), &format!("connection {c}"))
}

#[test]
fn writes_dropped_by_timeouts_and_retried_send_every_byte_once() {
    let family = Family::Tcp {
        send_buffer: Some(32 * 1024),
    };
    compare("timed writes", family, timed_writes(), 3, slow_reader);
}

/// An operation's outcome as code ported from tokio inspects it.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Err {
        raw: Option<i32>,
        kind: io::ErrorKind,
    },
}

impl<T> From<io::Result<T>> for Outcome {
    fn from(r: io::Result<T>) -> Outcome {
        match r {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::Err {
                raw: e.raw_os_error(),
                kind: e.kind(),
            },
        }
    }
}

/// A port nobody listens on, on the peer's side.
fn closed_port() -> std::net::SocketAddr {
    let l = link::listen();
    l.local_addr().unwrap()
}

/// A stream of `stack` connected to a std peer that resets the connection
/// (linger 0) once the stream waits in a read; what the read got.
async fn reset_mid_read(stack: Stack, e: Option<&AsyncEngine>) -> Outcome {
    let l = link::listen();
    let addr = l.local_addr().unwrap();
    let (waits_tx, waits) = std::sync::mpsc::channel();
    let mut waiting = Some(waits_tx);
    let resetter = std::thread::spawn(move || {
        let (peer, _) = l.accept().unwrap();
        waits
            .recv_timeout(Duration::from_secs(30))
            .expect("the read reaches its wait");
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    });
    let out = match (stack, e) {
        (Stack::Tokio, _) => {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut buf = [0u8; 64];
            common::noting_its_wait(s.read(&mut buf), &mut waiting)
                .await
                .into()
        }
        (_, Some(e)) => {
            let s = blockio::net::TcpStream::connect_with(e, addr)
                .await
                .unwrap();
            common::noting_its_wait(
                blockio::net::TcpStream::read(&s, vec![0u8; 64]),
                &mut waiting,
            )
            .await
            .0
            .into()
        }
        _ => unreachable!(),
    };
    resetter.join().unwrap();
    out
}

/// The socket errors of `stack`, as raw errno and kind: a refused connect,
/// a list of addresses whose last one listens, a port in use, a missing
/// Unix socket, a reset mid-read.
async fn error_cases(stack: Stack, e: Option<AsyncEngine>) -> Vec<(&'static str, Outcome)> {
    let open = link::listen();
    let open_addr = open.local_addr().unwrap();
    // A port in use on the stack's own side, where it binds.
    let taken = std::net::TcpListener::bind((link::server_ip(), 0)).unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let closed = closed_port();
    let list = [
        "[::1]:1".to_string(),
        closed.to_string(),
        open_addr.to_string(),
    ];
    let list: Vec<std::net::SocketAddr> = list.iter().map(|a| a.parse().unwrap()).collect();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nobody");
    let mut out = Vec::new();
    match &e {
        None => {
            use tokio::net::{TcpListener, TcpStream, UnixStream};
            out.push(("refused", TcpStream::connect(closed).await.into()));
            let s = TcpStream::connect(&list[..]).await;
            let peer = s.as_ref().map(|s| s.peer_addr().unwrap()).ok();
            out.push(("list", s.into()));
            out.push(("list reaches", Outcome::from(Ok::<_, io::Error>(peer))));
            out.push(("in use", TcpListener::bind(taken_addr).await.into()));
            out.push(("no unix socket", UnixStream::connect(&missing).await.into()));
        }
        Some(e) => {
            use blockio::net::{TcpListener, TcpStream, UnixStream};
            out.push(("refused", TcpStream::connect_with(e, closed).await.into()));
            let s = TcpStream::connect_with(e, &list[..]).await;
            let peer = s.as_ref().map(|s| s.peer_addr().unwrap()).ok();
            out.push(("list", s.into()));
            out.push(("list reaches", Outcome::from(Ok::<_, io::Error>(peer))));
            let in_use = TcpListener::bind_with(e, taken_addr).await;
            if let Err(err) = &in_use {
                assert_eq!(blockio::errno(err), Some(libc::EADDRINUSE), "{err}");
            }
            out.push(("in use", in_use.into()));
            out.push((
                "no unix socket",
                UnixStream::connect_with(e, &missing).await.into(),
            ));
        }
    }
    assert!(
        matches!(out[2].1, Outcome::Ok),
        "{stack:?}: the list's last address was not reached"
    );
    out.push(("reset mid-read", reset_mid_read(stack, e.as_ref()).await));
    out
}

#[test]
fn socket_errors_are_the_kernels_as_on_tokio() {
    let mut reference = None;
    for stack in STACKS {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            let e = engine(stack);
            if let (Stack::BlockioDriven, Some(e)) = (stack, &e) {
                if e.poll_fd().is_some() {
                    tokio::spawn(drive_on_tokio(e.clone()));
                }
            }
            error_cases(stack, e).await
        });
        match &reference {
            None => reference = Some(got),
            Some(want) => assert_eq!(&got, want, "{stack:?} against tokio"),
        }
    }
    let want = reference.unwrap();
    assert_eq!(
        want[0].1,
        Outcome::Err {
            raw: Some(libc::ECONNREFUSED),
            kind: io::ErrorKind::ConnectionRefused
        }
    );
}

/// What trait writes give on a connection whose peer reset it: the read
/// waiting on it, then 20 rounds of `write_all` and `flush`.
async fn writes_after_reset<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
) -> (Outcome, Vec<Outcome>, Vec<Outcome>) {
    // The peer resets once it has this byte (the connection is then
    // established on both ends).
    s.write_all(b"!").await.unwrap();
    s.flush().await.unwrap();
    // Ends with the peer's reset: from here on the connection is broken.
    let read = s.read(&mut [0u8; 64]).await.into();
    let (mut writes, mut flushes) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        writes.push(s.write_all(&[7u8; 1024]).await.into());
        flushes.push(s.flush().await.into());
    }
    (read, writes, flushes)
}

/// What trait writes give around the socket's own `shutdown(Write)`, made
/// with the first write's bytes still queued.
async fn writes_around_shutdown<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    shut: impl FnOnce(&S) -> io::Result<()>,
) -> Vec<Outcome> {
    let hello = s.write_all(b"hello").await.into();
    let shut = shut(s).into();
    vec![
        hello,
        shut,
        s.write_all(b"after").await.into(),
        s.flush().await.into(),
    ]
}

/// A std peer on a port of its own: `peer` gets the accepted connection.
fn std_peer<T: Send + 'static>(
    peer: impl FnOnce(std::net::TcpStream) -> T + Send + 'static,
) -> (std::net::SocketAddr, std::thread::JoinHandle<T>) {
    let l = link::listen();
    let addr = l.local_addr().unwrap();
    (
        addr,
        std::thread::spawn(move || peer(l.accept().unwrap().0)),
    )
}

/// Once a send has failed, or the writing side is shut down, every later
/// write fails (`EPIPE`, as tokio's do: the kernel's answer for a broken
/// connection), and so does every flush of a broken one: no write is
/// `Ok` for bytes that would be thrown away. A blockio trait write may be
/// taken before the failure is known (it is queued, not sent); the
/// failure is then the next call's.
#[test]
fn writes_after_a_failure_or_a_shutdown_fail_as_on_tokio() {
    let mut reference = None;
    for stack in STACKS {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            let e = engine(stack);
            if let (Stack::BlockioDriven, Some(e)) = (stack, &e) {
                if e.poll_fd().is_some() {
                    tokio::spawn(drive_on_tokio(e.clone()));
                }
            }
            let resetter = |mut p: std::net::TcpStream| {
                p.read_exact(&mut [0u8; 1]).unwrap();
                socket2::SockRef::from(&p)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            };
            let reader = |mut p: std::net::TcpStream| {
                p.set_read_timeout(Some(PEER_LIMIT)).unwrap();
                let mut got = Vec::new();
                p.read_to_end(&mut got).map(|_| got).map_err(|e| e.kind())
            };
            let (a, reset_peer) = std_peer(resetter);
            let (b, read_peer) = std_peer(reader);
            let out = match &e {
                None => {
                    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
                    let reset = writes_after_reset(&mut s).await;
                    let mut s = tokio::net::TcpStream::connect(b).await.unwrap();
                    let shut = writes_around_shutdown(&mut s, |s| {
                        socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write)
                    })
                    .await;
                    (reset, shut)
                }
                Some(e) => blockio_writes_after_failures(e, stack, a, b).await,
            };
            reset_peer.join().unwrap();
            (out, read_peer.join().unwrap())
        });
        let (((read, writes, flushes), shut), peer) = got;
        assert_eq!(peer, Ok(b"hello".to_vec()), "{stack:?}: what the peer read");
        writes_and_flushes_after_a_reset_fail(stack, &writes, &flushes);
        match &reference {
            None => reference = Some((read, shut)),
            Some(want) => assert_eq!(&(read, shut), want, "{stack:?} against tokio"),
        }
    }
}

/// The writes of [`writes_after_a_failure_or_a_shutdown_fail_as_on_tokio`]
/// on a blockio stream of `e`, to the resetting peer at `a` and the
/// reading peer at `b`, with an owned-buffer write after each, which
/// must fail too.
async fn blockio_writes_after_failures(
    e: &AsyncEngine,
    stack: Stack,
    a: std::net::SocketAddr,
    b: std::net::SocketAddr,
) -> ((Outcome, Vec<Outcome>, Vec<Outcome>), Vec<Outcome>) {
    let mut s = blockio::net::TcpStream::connect_with(e, a).await.unwrap();
    let reset = writes_after_reset(&mut s).await;
    let owned = s.write(b"x".to_vec()).await.0;
    assert!(
        owned.is_err(),
        "{stack:?}: an owned write went after a reset"
    );
    let mut s = blockio::net::TcpStream::connect_with(e, b).await.unwrap();
    let shut = writes_around_shutdown(&mut s, |s| s.shutdown(std::net::Shutdown::Write)).await;
    let owned = s.write(b"x".to_vec()).await.0;
    assert_eq!(
        owned.map_err(|e| e.raw_os_error()).err(),
        Some(Some(libc::EPIPE)),
        "{stack:?}: an owned write after shutdown(Write)"
    );
    (reset, shut)
}

/// After a reset the read returned, every write on `stack` fails with
/// `EPIPE`, the first included, as tokio's; on blockio a broken
/// connection's flush fails too (tokio's flush has nothing to do and is
/// always `Ok`).
fn writes_and_flushes_after_a_reset_fail(stack: Stack, writes: &[Outcome], flushes: &[Outcome]) {
    let epipe = Outcome::Err {
        raw: Some(libc::EPIPE),
        kind: io::ErrorKind::BrokenPipe,
    };
    if stack != Stack::Tokio {
        assert!(
            flushes.iter().all(|f| *f != Outcome::Ok),
            "{stack:?}: a flush of a broken connection went Ok: {flushes:?}"
        );
    }
    assert!(
        writes.iter().all(|w| *w == epipe),
        "{stack:?}: writes after the reset: {writes:?}"
    );
}

/// `connect_timeout`'s time-out is the kernel's `ETIMEDOUT`: kind
/// `TimedOut` and `raw_os_error()` set, as a connect the kernel gave up on.
#[test]
fn a_connect_timeout_is_etimedout() {
    for stack in &STACKS[1..] {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let l = link::on_peer_side(|| {
            let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            l.bind(&std::net::SocketAddr::new(link::peer_ip(), 0).into())?;
            l.listen(0)?;
            io::Result::Ok(l)
        })
        .unwrap();
        let addr = l.local_addr().unwrap().as_socket().unwrap();
        // One connection fills a backlog of 0: the next SYN is dropped.
        // It is made on the listener's side, so that it is in the backlog
        // whatever the link loses (a lost handshake ACK would leave it
        // out, and let the connect under test in).
        let _queued = link::on_peer_side(|| std::net::TcpStream::connect(addr)).unwrap();
        let out: Outcome = rt.block_on(async {
            let e = engine(*stack).unwrap();
            if e.poll_fd().is_some() {
                tokio::spawn(drive_on_tokio(e.clone()));
            }
            let limit = Duration::from_millis(200);
            blockio::net::TcpStream::connect_timeout_with(&e, addr, limit)
                .await
                .into()
        });
        assert_eq!(
            out,
            Outcome::Err {
                raw: Some(libc::ETIMEDOUT),
                kind: io::ErrorKind::TimedOut
            },
            "{stack:?}"
        );
    }
}

/// A server on `stack` that has served a connection and waits to accept
/// more (blockio: an accept waiting) is dropped with its runtime,
/// and a new one binds the same port at once, 20 times over: as on tokio,
/// the port is free the moment the server is gone.
#[test]
fn a_dropped_server_s_port_binds_again_at_once() {
    for stack in STACKS {
        let mut port = 0;
        for round in 0..20 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // Built on the runtime, as a server builds its engine.
            let e = {
                let _on = rt.enter();
                engine(stack)
            };
            let bound = rt.block_on(async {
                if let (Stack::BlockioDriven, Some(e)) = (stack, &e) {
                    if e.poll_fd().is_some() {
                        tokio::spawn(drive_on_tokio(e.clone()));
                    }
                }
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                let (tx, rx) = tokio::sync::oneshot::channel();
                match &e {
                    None => {
                        let l = tokio::net::TcpListener::bind(addr).await?;
                        let _ = tx.send(l.local_addr()?);
                        tokio::spawn(async move {
                            loop {
                                let _ = l.accept().await;
                            }
                        });
                    }
                    Some(e) => {
                        let l = blockio::net::TcpListener::bind_with(e, addr).await?;
                        let _ = tx.send(l.local_addr()?);
                        tokio::spawn(async move {
                            let mut incoming = l.incoming();
                            loop {
                                let _ = incoming.next().await;
                            }
                        });
                    }
                }
                let local = rx.await.unwrap();
                let c = tokio::net::TcpStream::connect(local).await?;
                // The server has taken it (its accept queue is empty
                // again) and waits for the next.
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while common::accept_queue(local.port()) > 0 {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{stack:?}: the server never took the connection"
                    );
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                drop(c);
                io::Result::Ok(local)
            });
            drop(rt);
            drop(e);
            match bound {
                Ok(local) => port = local.port(),
                Err(err) => panic!("{stack:?} round {round}: binding port {port} again: {err}"),
            }
        }
    }
}

/// Idle connections beside a probe: an echo server (one task per
/// connection, reading through the I/O traits) holds `IDLE` connections
/// whose peers send nothing, more than the default `queue_depth` of 256,
/// and slowloris peers that send a byte now and then; probes that connect
/// afterwards are still accepted and echoed, on every stack, with default
/// settings.
#[test]
fn idle_and_slow_peers_do_not_stall_a_probe() {
    const IDLE: usize = 1000;
    const SLOW: usize = 50;
    for stack in STACKS {
        let server = serve(stack, Family::Tcp { send_buffer: None }, echo());
        let Addr::Tcp(addr) = server.addr.clone() else {
            unreachable!()
        };
        // Each peer has one exchange, then goes quiet (a keep-alive
        // connection between requests); one at a time, so that no connect
        // waits in a full backlog.
        let quiet = |i: usize| {
            let mut p = link::connect(addr);
            p.set_read_timeout(Some(PEER_LIMIT)).unwrap();
            p.write_all(b"i").unwrap();
            let mut b = [0u8; 1];
            p.read_exact(&mut b).unwrap_or_else(|e| {
                panic!("{stack:?}: a connection beside {i} quiet ones was not served: {e}")
            });
            p
        };
        let idle: Vec<_> = (0..IDLE).map(quiet).collect();
        let mut slow: Vec<_> = (IDLE..IDLE + SLOW).map(quiet).collect();
        for round in 0..3 {
            for s in &mut slow {
                s.write_all(b"x").unwrap();
            }
            for probe in 0..5 {
                let mut p = Addr::Tcp(addr).connect();
                let msg = format!("probe {round}.{probe}");
                p.write_all(msg.as_bytes()).unwrap();
                let got = read_exactly(&mut p, msg.len());
                assert_eq!(
                    got,
                    read_exactly(&mut std::io::Cursor::new(msg.clone()), msg.len()),
                    "{stack:?}: probe {round}.{probe} beside {IDLE} idle and {SLOW} slow peers"
                );
            }
        }
        for s in &mut slow {
            let mut back = [0u8; 3];
            s.set_read_timeout(Some(PEER_LIMIT)).unwrap();
            s.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"xxx", "{stack:?}: a slow peer's echo");
        }
        drop(idle);
        drop(slow);
        drop(server);
    }
}

/// Slowloris peers holding their requests open: a line server (one task
/// per connection, a reply per `\n`-ended request) holds `SLOW` peers
/// that have each sent half a request and wait, every one of their tasks
/// waiting in a read; probes that connect meanwhile are accepted and
/// answered, and then each slow peer's request, finished, gets its own
/// reply, on every stack, with default settings. Each wait is for an
/// event (a reply), bounded by the peers' read limit.
#[test]
fn probes_are_served_while_slow_peers_hold_requests_open() {
    const SLOW: usize = 2000;
    for stack in STACKS {
        let server = serve(stack, Family::Tcp { send_buffer: None }, lines());
        let Addr::Tcp(addr) = server.addr.clone() else {
            unreachable!()
        };
        let ask = |p: &mut std::net::TcpStream, line: &str, what: &str| {
            p.write_all(line.as_bytes()).unwrap();
            let got = read_exactly(p, line.len());
            let want = read_exactly(&mut io::Cursor::new(line), line.len());
            assert_eq!(got, want, "{stack:?}: {what}");
        };
        // One full request each (so that each is accepted before the next
        // connects), then half of the next, held open.
        let mut slow: Vec<_> = (0..SLOW)
            .map(|i| {
                let mut p = link::connect(addr);
                p.set_read_timeout(Some(PEER_LIMIT)).unwrap();
                ask(&mut p, "hello\n", &format!("slow peer {i}'s first request"));
                p.write_all(format!("held {i}").as_bytes()).unwrap();
                p
            })
            .collect();
        for probe in 0..10 {
            let mut p = link::connect(addr);
            p.set_read_timeout(Some(PEER_LIMIT)).unwrap();
            let what = format!("probe {probe} beside {SLOW} held requests");
            ask(&mut p, &format!("probe {probe}\n"), &what);
        }
        for (i, p) in slow.iter_mut().enumerate() {
            p.write_all(b" done\n").unwrap();
            let line = format!("held {i} done\n");
            let got = read_exactly(p, line.len());
            let want = read_exactly(&mut io::Cursor::new(&line), line.len());
            assert_eq!(got, want, "{stack:?}: slow peer {i}'s held request");
        }
        drop(slow);
        drop(server);
    }
}

/// Replies to each `\n`-ended request with the request, read through the
/// I/O traits, until the peer ends or fails.
fn lines() -> Handler {
    Arc::new(|s: Conn| {
        Box::pin(async move {
            let mut s = tokio::io::BufReader::new(s.io());
            let mut line = Vec::new();
            loop {
                line.clear();
                match tokio::io::AsyncBufReadExt::read_until(&mut s, b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if s.get_mut().write_all(&line).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    })
}

/// Echoes through the I/O traits until the peer ends or fails.
fn echo() -> Handler {
    Arc::new(|s: Conn| {
        Box::pin(async move {
            let mut s = s.io();
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
        })
    })
}

/// 2,000 connections waiting in reads get their bytes at the same moment:
/// far more completions than the completion queue holds (1,024 with the
/// default depth), and every one is delivered: each peer gets its echo.
#[test]
fn a_burst_of_completions_past_the_queue_s_size_all_arrive() {
    const CONNS: usize = 2000;
    for stack in STACKS {
        let server = serve(stack, Family::Tcp { send_buffer: None }, echo());
        let Addr::Tcp(addr) = server.addr.clone() else {
            unreachable!()
        };
        // Every connection accepted, echoed once and waiting in its read
        // (one at a time, so that no connect waits in a full backlog).
        let peers = (0..CONNS).map(|_| {
            let mut p = link::connect(addr);
            p.set_read_timeout(Some(PEER_LIMIT)).unwrap();
            p.write_all(b"a").unwrap();
            let mut b = [0u8; 1];
            p.read_exact(&mut b).unwrap();
            p
        });
        let mut peers: Vec<_> = peers.collect();
        // Now all at once.
        for (i, p) in peers.iter_mut().enumerate() {
            p.write_all(&[i as u8]).unwrap();
        }
        for (i, p) in peers.iter_mut().enumerate() {
            let mut b = [0u8; 1];
            p.read_exact(&mut b)
                .unwrap_or_else(|e| panic!("{stack:?}: connection {i}: {e}"));
            assert_eq!(b[0], i as u8, "{stack:?}: connection {i}");
        }
        drop(peers);
        drop(server);
    }
}

/// Random-size echo over 40 connections at once: each peer sends 256 KiB
/// in random pieces from one thread while another reads the echo; every
/// byte comes back, in order, over TCP and Unix sockets.
#[test]
fn random_size_echo_over_many_connections() {
    fn peer(addr: Addr, c: usize) -> Seen {
        const TOTAL: usize = 256 << 10;
        let p = addr.connect();
        let data = pattern(c, TOTAL);
        let mut reader = match &p {
            Peer::Tcp(s) => Peer::Tcp(s.try_clone().unwrap()),
            Peer::Unix(s) => Peer::Unix(s.try_clone().unwrap()),
        };
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            let mut p = p;
            let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ c as u64);
            let mut at = 0;
            while at < sent.len() {
                let n = (1 + rng.below(20_000) as usize).min(sent.len() - at);
                p.write_all(&sent[at..at + n]).unwrap();
                at += n;
            }
            p
        });
        let back = read_exactly(&mut reader, TOTAL);
        drop(writer.join().unwrap());
        assert_eq!(
            back,
            Seen::Bytes {
                len: TOTAL,
                sum: digest(&data)
            },
            "connection {c}"
        );
        back
    }
    compare("echo", Family::Tcp { send_buffer: None }, echo(), 40, peer);
    compare("echo", Family::Unix, echo(), 40, peer);
}

/// A peer that resets the connection while the server writes a large reply
/// through the I/O traits: the server's writing fails (broken pipe or
/// reset) on every stack, rather than going on or hanging.
#[test]
fn a_reset_mid_write_fails_the_writer() {
    for stack in STACKS {
        let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let tx = Arc::new(std::sync::Mutex::new(tx));
        let handler: Handler = Arc::new(move |s: Conn| {
            let tx = tx.clone();
            Box::pin(async move {
                let mut s = s.io();
                let chunk = vec![9u8; 64 << 10];
                let res = async {
                    for _ in 0..1024 {
                        s.write_all(&chunk).await?;
                    }
                    s.flush().await
                }
                .await;
                let _ = tx.lock().unwrap().send(res);
            })
        });
        let server = serve(stack, Family::Tcp { send_buffer: None }, handler);
        let mut p = server.addr.connect();
        let mut buf = vec![0u8; 64 << 10];
        p.read_exact(&mut buf).unwrap();
        let Peer::Tcp(s) = p else { unreachable!() };
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);
        let res = rx
            .recv_timeout(PEER_LIMIT)
            .unwrap_or_else(|_| panic!("{stack:?}: the writer neither finished nor failed"));
        let err = res.expect_err("64 MiB went to a peer that reset after 64 KiB");
        assert!(
            matches!(
                err.raw_os_error(),
                Some(libc::EPIPE) | Some(libc::ECONNRESET)
            ),
            "{stack:?}: {err}"
        );
        drop(server);
    }
}

/// The stack [`fd_limited_server`] runs on, from its environment.
const FD_LIMITED_STACK: &str = "BLOCKIO_TEST_FD_LIMITED_STACK";

/// Descriptors the fd-limited server may open beyond those it has at
/// start: far fewer than the connections its peers make at once.
const FD_HEADROOM: u64 = 12;

/// The server of [`a_descriptor_limit_below_the_connection_count_loses_no_connection`],
/// in a process of its own (the limit is the whole process's): an echo
/// server on the stack its environment names, whose descriptor limit is
/// its open descriptors plus [`FD_HEADROOM`]. Its accept loop is the robust
/// one of each stack: tokio's pauses 1 ms after an error, as tokio's
/// documentation advises; blockio's is `incoming()`, which backs off.
#[test]
#[ignore = "the child process of a_descriptor_limit_below_the_connection_count_loses_no_connection, which runs it"]
fn fd_limited_server() {
    let stack = match std::env::var(FD_LIMITED_STACK).as_deref() {
        Ok("Tokio") => Stack::Tokio,
        Ok("Blockio") => Stack::Blockio,
        Ok("BlockioThread") => Stack::BlockioThread,
        Ok("BlockioDriven") => Stack::BlockioDriven,
        Ok("BlockioEpoll") => Stack::BlockioEpoll,
        other => panic!("{FD_LIMITED_STACK}: {other:?}"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let engine = engine(stack);
        if let (Stack::BlockioDriven, Some(e)) = (stack, &engine) {
            if e.poll_fd().is_some() {
                tokio::spawn(drive_on_tokio(e.clone()));
            }
        }
        let handler = echo();
        match engine {
            None => {
                let l = tokio::net::TcpListener::bind((link::server_ip(), 0))
                    .await
                    .unwrap();
                limit_fds_and_announce(l.local_addr().unwrap());
                loop {
                    match l.accept().await {
                        Ok((s, _)) => drop(tokio::spawn(handler(Conn::TokioTcp(s)))),
                        Err(e) => {
                            println!("accept error {:?}", e.raw_os_error());
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
            }
            Some(e) => {
                let l = blockio::net::TcpListener::bind_with(&e, (link::server_ip(), 0))
                    .await
                    .unwrap();
                limit_fds_and_announce(l.local_addr().unwrap());
                let mut incoming = l.incoming();
                loop {
                    match incoming.next().await {
                        Ok((s, _)) => drop(tokio::spawn(handler(Conn::BlockioTcp(s)))),
                        Err(e) => println!("accept error {:?}", e.raw_os_error()),
                    }
                }
            }
        }
    });
}

/// Sets this process's descriptor limit to its open descriptors plus
/// [`FD_HEADROOM`], then prints the server's address for the parent.
fn limit_fds_and_announce(addr: std::net::SocketAddr) {
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    // SAFETY: zeroed is a valid rlimit; getrlimit and setrlimit read and
    // write only the struct passed.
    unsafe {
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = open + FD_HEADROOM;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    println!("addr {addr}");
}

/// 64 peers connect at once to an echo server that may hold about 12 of
/// them: accepts fail with `EMFILE` until earlier peers leave, and the
/// server must go on accepting, not die or drop the waiting connections.
/// Each peer in turn sends its message, reads the echo and leaves; then a
/// last peer checks the server still answers. Every peer must see its
/// echo, byte for byte, on every stack, as on tokio.
#[test]
fn a_descriptor_limit_below_the_connection_count_loses_no_connection() {
    const PEERS: usize = 64;
    for stack in STACKS {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fd_limited_server", "--ignored", "--nocapture"])
            .env(FD_LIMITED_STACK, format!("{stack:?}"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = io::BufRead::lines(io::BufReader::new(child.stdout.take().unwrap()));
        let addr = loop {
            let line = lines
                .next()
                .expect("the server printed its address")
                .unwrap();
            // (After the harness's "test fd_limited_server ... ".)
            if let Some((_, a)) = line.split_once("addr ") {
                break Addr::Tcp(a.trim().parse().unwrap());
            }
        };
        let mut peers: Vec<Peer> = (0..PEERS).map(|_| addr.connect()).collect();
        peers.push(addr.connect());
        let mut seen = Vec::new();
        for (i, mut p) in peers.into_iter().enumerate() {
            let msg = pattern(i, 1000);
            p.write_all(&msg).unwrap();
            seen.push(read_exactly(&mut p, msg.len()));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let errors: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(
            errors.iter().any(|l| l.contains("accept error Some(24)")),
            "{stack:?}: the limit never made an accept fail with EMFILE: {errors:?}"
        );
        let want: Vec<Seen> = (0..=PEERS)
            .map(|i| Seen::Bytes {
                len: 1000,
                sum: digest(&pattern(i, 1000)),
            })
            .collect();
        assert_eq!(seen, want, "{stack:?}: what the peers saw");
    }
}

/// Set, the liveness scenarios print how long each server took, in the
/// order of [`STACKS`]: `BLOCKIO_TEST_LIVE_TIMES=1 cargo test -p blockio
/// --features tokio --test net_diff -- --nocapture --test-threads 1
/// polled_once ticker`.
const LIVE_TIMES: &str = "BLOCKIO_TEST_LIVE_TIMES";

/// Prints how long `what` took since `start`, if [`LIVE_TIMES`] is set.
fn live_time(what: &str, start: std::time::Instant) {
    if std::env::var_os(LIVE_TIMES).is_some() {
        eprintln!("live time: {what} {:.3} s", start.elapsed().as_secs_f64());
    }
}

/// Bytes each liveness scenario moves.
const LIVE_TOTAL: usize = 8 << 20;

/// Pending polls in a row, each made while the socket was ready for the
/// operation (bytes queued to read, room to write), that a liveness
/// scenario allows: generous, far above what a descheduled thread costs
/// (a loop that loses its progress on every dropped poll makes millions).
const STALL_LIMIT: u64 = 200_000;

/// Which operation a liveness scenario polls once and drops if pending.
#[derive(Clone, Copy, Debug)]
enum Polled {
    /// tokio's `AsyncReadExt::read`; blockio's owned `read(Vec)`.
    Read,
    /// tokio's `AsyncReadExt::read`; blockio's `recv_stream().next()` on
    /// a fresh receive stream each time.
    RecvStream,
    /// tokio's `AsyncWriteExt::write`; blockio's owned `write(Vec)`.
    Write,
}

/// Polls `op` once: its output if it was ready, else `None` (and `op` is
/// dropped pending), as a `select!` drops the branches that lost.
async fn poll_once<F: Future>(op: F) -> Option<F::Output> {
    let mut op = std::pin::pin!(op);
    std::future::poll_fn(|cx| match op.as_mut().poll(cx) {
        std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// The descriptor of a TCP connection of any stack.
fn conn_fd(conn: &Conn) -> std::os::fd::RawFd {
    use std::os::fd::AsRawFd;
    match conn {
        Conn::TokioTcp(s) => s.as_raw_fd(),
        Conn::BlockioTcp(s) => s.socket().as_raw_fd(),
        _ => unreachable!("a TCP scenario"),
    }
}

/// Whether `fd` is ready for `events` (`POLLIN`, `POLLOUT`) now.
fn ready_now(fd: std::os::fd::RawFd, events: libc::c_short) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, no waiting.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & events != 0 }
}

/// One read of at most `len` bytes, the way `how` says, on the stream's
/// own API: the bytes (none at the end of the stream).
async fn read_some(conn: &mut Conn, how: Polled, len: usize) -> io::Result<Vec<u8>> {
    match (conn, how) {
        (Conn::TokioTcp(s), _) => {
            let mut buf = vec![0u8; len];
            let n = s.read(&mut buf).await?;
            buf.truncate(n);
            Ok(buf)
        }
        (Conn::BlockioTcp(s), Polled::RecvStream) => match s.recv_stream().next().await {
            Some(Ok(b)) => Ok(b.to_vec()),
            Some(Err(e)) => Err(e),
            None => Ok(Vec::new()),
        },
        (Conn::BlockioTcp(s), _) => {
            let (res, mut buf) = blockio::net::TcpStream::read(s, vec![0u8; len]).await;
            buf.truncate(res?);
            Ok(buf)
        }
        _ => unreachable!("a TCP scenario"),
    }
}

/// One write of `data` on the stream's own API: how many of its bytes
/// went. A blockio write that reports a dropped one
/// ([`blockio::net::WriteDropped`]) counts that write's bytes and sends
/// nothing itself.
async fn write_some(conn: &mut Conn, data: &[u8]) -> io::Result<usize> {
    match conn {
        Conn::TokioTcp(s) => s.write(data).await,
        Conn::BlockioTcp(s) => match blockio::net::TcpStream::write(s, data.to_vec()).await {
            (Ok(n), _) => Ok(n),
            (Err(e), _) => match blockio::net::WriteDropped::of(&e) {
                Some(d) => Ok(d.sent),
                None => Err(e),
            },
        },
        _ => unreachable!("a TCP scenario"),
    }
}

/// What a liveness scenario's server reports to its peer: the bytes it
/// read (a digest) or wrote, and its longest run of pending polls made
/// while the socket was ready.
fn live_report(len: usize, sum: u64, stall: u64) -> Vec<u8> {
    [len as u64, sum, stall]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// Reads the peer's whole stream with operations polled once and dropped
/// while pending (yielding to the runtime between them), then reports.
async fn read_polled_once(mut conn: Conn, how: Polled) {
    let start = std::time::Instant::now();
    let fd = conn_fd(&conn);
    let (mut len, mut sum, mut stall, mut worst) = (0, digest(b""), 0, 0);
    loop {
        let ready = ready_now(fd, libc::POLLIN);
        if stall > STALL_LIMIT {
            break;
        }
        match poll_once(read_some(&mut conn, how, 64 << 10)).await {
            Some(Ok(bytes)) if bytes.is_empty() => break,
            Some(Ok(bytes)) => {
                len += bytes.len();
                sum = bytes.iter().fold(sum, |h, &b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                });
                stall = 0;
            }
            Some(Err(e)) => panic!("{how:?} at byte {len}: {e}"),
            None if ready => {
                stall += 1;
                worst = worst.max(stall);
            }
            None => {}
        }
        tokio::task::yield_now().await;
    }
    live_time(&format!("{how:?}"), start);
    let mut io = conn.io();
    io.write_all(&live_report(len, sum, worst)).await.unwrap();
    io.shutdown().await.unwrap();
}

/// Writes [`LIVE_TOTAL`] bytes with writes polled once and dropped while
/// pending (yielding to the runtime between them), then reports.
async fn write_polled_once(mut conn: Conn) {
    let start = std::time::Instant::now();
    let fd = conn_fd(&conn);
    let data = pattern(0, LIVE_TOTAL);
    let (mut at, mut stall, mut worst) = (0, 0, 0);
    while at < data.len() {
        let ready = ready_now(fd, libc::POLLOUT);
        if stall > STALL_LIMIT {
            break;
        }
        let end = (at + (64 << 10)).min(data.len());
        match poll_once(write_some(&mut conn, &data[at..end])).await {
            Some(Ok(n)) => {
                at += n;
                stall = 0;
            }
            Some(Err(e)) => panic!("write at byte {at}: {e}"),
            None if ready => {
                stall += 1;
                worst = worst.max(stall);
            }
            None => {}
        }
        tokio::task::yield_now().await;
    }
    live_time("Write", start);
    let mut io = conn.io();
    io.write_all(&live_report(at, 0, worst)).await.unwrap();
    io.shutdown().await.unwrap();
}

fn polled_once(how: Polled) -> Handler {
    Arc::new(move |conn: Conn| {
        Box::pin(async move {
            match how {
                Polled::Write => write_polled_once(conn).await,
                _ => read_polled_once(conn, how).await,
            }
        })
    })
}

/// The report at the end of a liveness scenario's stream, checked
/// against the stall bound.
fn check_report(report: &[u8], what: &str) -> (usize, u64) {
    let word = |i: usize| u64::from_le_bytes(report[i * 8..i * 8 + 8].try_into().unwrap());
    let stall = word(2);
    assert!(
        stall <= STALL_LIMIT,
        "{what}: {stall} pending polls in a row while the socket was ready"
    );
    (word(0) as usize, word(1))
}

/// The peer of a reading scenario: streams [`LIVE_TOTAL`] bytes, ends,
/// and checks the server's report (every byte read, in order).
fn stream_to_server(addr: Addr, how: Polled) -> (usize, u64) {
    let mut p = addr.connect();
    let data = pattern(1, LIVE_TOTAL);
    p.write_all(&data).unwrap();
    let Peer::Tcp(s) = &p else { unreachable!() };
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut report = [0u8; 24];
    p.read_exact(&mut report).unwrap();
    let (len, sum) = check_report(&report, &format!("{how:?}"));
    assert_eq!(
        (len, sum),
        (LIVE_TOTAL, digest(&data)),
        "{how:?}: the bytes read"
    );
    (len, sum)
}

/// The peer of the writing scenario: reads every byte, then the report.
fn read_from_server(addr: Addr) -> Seen {
    let mut p = addr.connect();
    let seen = exactly(
        read_exactly(&mut p, LIVE_TOTAL),
        &pattern(0, LIVE_TOTAL),
        "writes polled once",
    );
    let mut report = [0u8; 24];
    p.read_exact(&mut report).unwrap();
    check_report(&report, "writes polled once");
    seen
}

/// A reading loop that polls each read once and drops it while pending
/// (a `select!` whose other branch is ready every turn) reads every byte
/// of an 8 MiB stream, in order, on every stack, making progress
/// whenever bytes are queued, as on tokio: owned reads.
#[test]
fn reads_polled_once_and_dropped_while_pending_read_every_byte() {
    let family = Family::Tcp { send_buffer: None };
    let peer = |addr, _| stream_to_server(addr, Polled::Read);
    compare(
        "reads polled once",
        family,
        polled_once(Polled::Read),
        1,
        peer,
    );
}

/// As [`reads_polled_once_and_dropped_while_pending_read_every_byte`],
/// with a fresh receive stream for each read.
#[test]
fn receive_streams_polled_once_and_dropped_while_pending_read_every_byte() {
    let family = Family::Tcp { send_buffer: None };
    let peer = |addr, _| stream_to_server(addr, Polled::RecvStream);
    let handler = polled_once(Polled::RecvStream);
    compare("receive streams polled once", family, handler, 1, peer);
}

/// A writing loop that polls each owned write once and drops it while
/// pending sends every byte of 8 MiB once, in order, on every stack,
/// making progress whenever the socket has room, as on tokio.
#[test]
fn writes_polled_once_and_dropped_while_pending_send_every_byte() {
    let family = Family::Tcp { send_buffer: None };
    let handler = polled_once(Polled::Write);
    compare("writes polled once", family, handler, 1, |addr, _| {
        read_from_server(addr)
    });
}

/// Bytes the ticker relay echoes.
const RELAY_TOTAL: usize = 64 << 20;

/// Echoes the peer's stream with the stream's own reads and writes, each
/// in a `tokio::select!` against a ticker of 10 µs that is ready nearly
/// every turn (tokio's timer ticks in milliseconds, so it is always
/// behind), so that most reads and writes are dropped pending.
fn relay_beside_a_ticker() -> Handler {
    Arc::new(|mut conn: Conn| {
        Box::pin(async move {
            let start = std::time::Instant::now();
            let mut ticker = tokio::time::interval(Duration::from_micros(10));
            let (mut held, mut at) = (Vec::new(), 0);
            loop {
                if at < held.len() {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        sent = write_some(&mut conn, &held[at..]) => at += sent.unwrap(),
                    }
                    continue;
                }
                tokio::select! {
                    _ = ticker.tick() => {}
                    got = read_some(&mut conn, Polled::Read, 64 << 10) => {
                        held = got.unwrap();
                        at = 0;
                        if held.is_empty() {
                            break;
                        }
                    }
                }
            }
            live_time("relay", start);
            let mut io = conn.io();
            io.shutdown().await.unwrap();
        })
    })
}

/// The relay's peer: sends [`RELAY_TOTAL`] bytes from one thread, reads
/// the echo on another, and checks every byte.
fn relay_peer(addr: Addr, c: usize) -> Seen {
    let p = addr.connect();
    let Peer::Tcp(s) = &p else { unreachable!() };
    let mut reader = Peer::Tcp(s.try_clone().unwrap());
    let data = pattern(c, RELAY_TOTAL);
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        let mut p = p;
        p.write_all(&sent).unwrap();
        let Peer::Tcp(s) = &p else { unreachable!() };
        s.shutdown(std::net::Shutdown::Write).unwrap();
        p
    });
    let back = exactly(read_to_end(&mut reader), &data, "the relay's echo");
    drop(writer.join().unwrap());
    back
}

/// A `tokio::select!` loop against a 10 µs ticker relays 64 MiB, every
/// byte once and in order, on every stack, as on tokio.
#[test]
fn a_select_loop_against_a_ticker_relays_every_byte() {
    let family = Family::Tcp { send_buffer: None };
    compare(
        "ticker relay",
        family,
        relay_beside_a_ticker(),
        1,
        relay_peer,
    );
}

/// Bytes the trait writer beside a ticker sends.
const SELECT_WRITE_TOTAL: usize = 16 << 20;

/// Writes [`SELECT_WRITE_TOTAL`] bytes through `AsyncWriteExt::write` in
/// a `tokio::select!` against a ticker of 10 µs, as a program that checks
/// a timer, a channel or a shutdown signal beside its writes does: most
/// writes that find the socket full are dropped pending, and the next
/// turn writes a slice that ends elsewhere (its end drawn per turn), so a
/// pending write must have taken none of its bytes.
fn trait_writes_beside_a_ticker() -> Handler {
    Arc::new(|conn: Conn| {
        Box::pin(async move {
            let start = std::time::Instant::now();
            let mut io = conn.io();
            let data = pattern(0, SELECT_WRITE_TOTAL);
            let mut ticker = tokio::time::interval(Duration::from_micros(10));
            let (mut at, mut draw) = (0, 1usize);
            while at < data.len() {
                draw = (draw * 1_103_515_245 + 12_345) % (1 << 31);
                let end = (at + 1 + (draw >> 4) % 200_000).min(data.len());
                tokio::select! {
                    biased;
                    _ = ticker.tick() => {}
                    sent = io.write(&data[at..end]) => match sent {
                        Ok(n) => at += n,
                        // The peer then sees the stream end short.
                        Err(e) => panic!("trait write at byte {at}: {e}"),
                    },
                }
            }
            live_time("select write", start);
            io.shutdown().await.unwrap();
        })
    })
}

/// The trait writer's peer: reads slowly (a pause every 64 reads of at
/// most 7,000 bytes, so that the server's socket fills), and checks
/// every byte.
fn slow_trait_reader(addr: Addr, _: usize) -> Seen {
    let mut p = addr.connect();
    let mut got = Vec::with_capacity(SELECT_WRITE_TOTAL);
    let mut buf = vec![0u8; 7000];
    for reads in 1.. {
        match p.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Seen::Failed(e.kind()),
        }
        if reads % 64 == 0 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    let seen = Seen::Bytes {
        len: got.len(),
        sum: digest(&got),
    };
    exactly(
        seen,
        &pattern(0, SELECT_WRITE_TOTAL),
        "trait writes beside a ticker",
    )
}

/// `AsyncWriteExt::write` in a `tokio::select!` against a 10 µs ticker,
/// each turn's slice ending elsewhere, sends 16 MiB to a slow reader,
/// every byte once and in order, on every stack, as on tokio: a write
/// dropped pending had taken none of its bytes (a task of a
/// current-thread runtime, on its thread).
#[test]
fn trait_writes_dropped_in_a_select_and_retried_with_other_bytes_send_every_byte_once() {
    let family = Family::Tcp { send_buffer: None };
    compare(
        "trait writes beside a ticker",
        family,
        trait_writes_beside_a_ticker(),
        1,
        slow_trait_reader,
    );
}
