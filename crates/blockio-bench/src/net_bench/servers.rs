//! The contenders: the same server code ([`super::service`]) on each
//! runtime. With one server thread it is pinned to one CPU; with two, each
//! runtime runs as its users would on two threads (tokio's work-stealing
//! pool, or a thread per core each with its own listener on one
//! `SO_REUSEPORT` port), unpinned.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::mpsc;
use std::task::Poll;

use anyhow::{anyhow, Context, Result};
use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
use blockio::net::TcpListenerOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::service::{self, Conn};

/// The caller-driven engines' queue depth, which sizes their rings: a round
/// of tasks submits up to one operation per connection in one
/// `io_uring_enter`. Socket operations do not count against the depth, so
/// `blockio`, the engine with default settings, needs no such tuning.
const NET_DEPTH: usize = 16384;

pub use blockio_bench_input::runtime::{parse_runtime, Runtime};

/// What the server does with each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// HTTP/1.1 keep-alive with a fixed response.
    Http,
    /// Echo, reading up to `buffer` bytes at a time; with `traits`,
    /// through tokio's I/O traits (monoio: its own methods).
    Echo {
        /// The server's read buffer.
        buffer: usize,
        /// Through `AsyncReadExt`/`AsyncWriteExt`.
        traits: bool,
    },
    /// A checksum of everything received, answered at the end.
    Checksum,
}

async fn run_service<C: Conn>(service: Service, conn: C) {
    let _ = match service {
        Service::Http => service::serve(conn).await,
        Service::Echo { buffer, .. } => service::echo(conn, buffer).await,
        Service::Checksum => service::checksum(conn).await,
    };
}

struct TokioConn(tokio::net::TcpStream);

impl Conn for TokioConn {
    async fn read(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        let r = self.0.read(&mut buf).await;
        (r, buf)
    }
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let r = self.0.write_all(&buf).await;
        (r, buf)
    }
}

struct BlockioConn(blockio::net::TcpStream);

impl Conn for BlockioConn {
    async fn read(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        self.0.read(buf).await
    }
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        self.0.write_all(buf).await
    }
}

/// A `blockio::net` connection read and written through tokio's
/// `AsyncReadExt`/`AsyncWriteExt`, as code ported from tokio does: the
/// stream copies each slice into buffers of its own.
struct BlockioTraitConn(blockio::net::TcpStream);

impl Conn for BlockioTraitConn {
    async fn read(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        let r = AsyncReadExt::read(&mut self.0, &mut buf).await;
        (r, buf)
    }
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let r = AsyncWriteExt::write_all(&mut self.0, &buf).await;
        (r, buf)
    }
}

/// A connection read through its receive stream: each read copies from the
/// next buffer the kernel filled; what does not fit the caller's capacity
/// waits for the next read.
struct RingConn<'a> {
    stream: &'a blockio::net::TcpStream,
    rx: blockio::net::RecvStream<'a>,
    left: Option<(blockio::net::RecvBuf, usize)>,
}

impl Conn for RingConn<'_> {
    async fn read(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        let (bytes, from) = match self.left.take() {
            Some(left) => left,
            None => match self.rx.next().await {
                None => return (Ok(0), buf),
                Some(Err(e)) => return (Err(e), buf),
                Some(Ok(b)) => (b, 0),
            },
        };
        let n = buf.capacity().min(bytes.len() - from);
        buf.clear();
        buf.extend_from_slice(&bytes[from..from + n]);
        if from + n < bytes.len() {
            self.left = Some((bytes, from + n));
        }
        (Ok(n), buf)
    }
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        self.stream.write_all(buf).await
    }
}

struct MonoioConn(monoio::net::TcpStream);

impl Conn for MonoioConn {
    async fn read(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        use monoio::io::AsyncReadRent;
        // monoio reads into the capacity, from the start.
        buf.clear();
        self.0.read(buf).await
    }
    async fn write_all(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        use monoio::io::AsyncWriteRentExt;
        let (r, buf) = self.0.write_all(buf).await;
        (r.map(|_| ()), buf)
    }
}

/// A server running on its own threads; stops when dropped.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stops.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes within it; the
    // call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How a server's threads are placed.
#[derive(Debug, Clone, Copy)]
pub enum Threads {
    /// One thread, pinned to this CPU.
    One(usize),
    /// Two threads, not pinned.
    Two,
}

/// Starts `service` on `runtime`, on the threads `threads` says.
pub fn start(runtime: Runtime, service: Service, threads: Threads) -> Result<Server> {
    let local: SocketAddr = "127.0.0.1:0".parse().expect("a valid address");
    let (cpu, count) = match threads {
        Threads::One(cpu) => (Some(cpu), 1),
        Threads::Two if runtime.listener_per_thread() => (None, 2),
        Threads::Two => (None, 1),
    };
    let pool = matches!(threads, Threads::Two) && !runtime.listener_per_thread();
    let mut server = Server {
        addr: local,
        stops: Vec::new(),
        threads: Vec::new(),
    };
    for i in 0..count {
        let bind = if i == 0 { local } else { server.addr };
        let (addr, stop, thread) = spawn(runtime, service, cpu, pool, bind)?;
        server.addr = addr;
        server.stops.push(stop);
        server.threads.push(thread);
    }
    Ok(server)
}

type AddrTx = mpsc::Sender<Result<SocketAddr>>;

/// One server thread listening on `bind` (with `SO_REUSEPORT`, so a
/// second thread can listen on the first one's port).
fn spawn(
    runtime: Runtime,
    service: Service,
    cpu: Option<usize>,
    pool: bool,
    bind: SocketAddr,
) -> Result<(SocketAddr, oneshot::Sender<()>, std::thread::JoinHandle<()>)> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("net-bench-{}", runtime.name()))
        .spawn(move || {
            let res = (|| {
                if let Some(cpu) = cpu {
                    pin_to(cpu).with_context(|| format!("cannot pin the server to CPU {cpu}"))?;
                }
                let ctx = Ctx {
                    service,
                    bind,
                    addr_tx: &addr_tx,
                };
                match runtime {
                    Runtime::Monoio => monoio_thread(ctx, stop_rx),
                    _ => tokio_thread(runtime, pool, ctx, stop_rx),
                }
            })();
            if let Err(e) = res {
                let _ = addr_tx.send(Err(e));
            }
        })?;
    let addr = addr_rx
        .recv()
        .map_err(|_| anyhow!("the {} server thread died", runtime.name()))??;
    Ok((addr, stop_tx, thread))
}

/// What every server thread is given.
struct Ctx<'a> {
    service: Service,
    bind: SocketAddr,
    addr_tx: &'a AddrTx,
}

/// `fut` until it ends or `stop` fires (its sender dropped).
async fn until_stopped(
    fut: impl Future<Output = Result<()>>,
    stop: oneshot::Receiver<()>,
) -> Result<()> {
    let mut fut = pin!(fut);
    let mut stop = pin!(stop);
    std::future::poll_fn(|cx| {
        if stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(()));
        }
        fut.as_mut().poll(cx)
    })
    .await
}

fn tokio_thread(
    runtime: Runtime,
    pool: bool,
    ctx: Ctx<'_>,
    stop: oneshot::Receiver<()>,
) -> Result<()> {
    let rt = if pool {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    };
    rt.block_on(async move {
        match runtime {
            Runtime::Blockio => {
                let engine = AsyncEngine::new()?;
                until_stopped(blockio_server(&engine, ctx, false), stop).await
            }
            Runtime::BlockioThread => {
                let engine = AsyncEngine::builder().driving(Driving::Thread).build()?;
                until_stopped(blockio_server(&engine, ctx, false), stop).await
            }
            Runtime::BlockioCaller | Runtime::BlockioRound | Runtime::BlockioRoundStream => {
                until_stopped(caller_server(ctx, runtime), stop).await
            }
            _ => until_stopped(tokio_server(ctx), stop).await,
        }
    })
}

async fn tokio_server(ctx: Ctx<'_>) -> Result<()> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(ctx.bind)?;
    let l = socket.listen(1024)?;
    ctx.addr_tx.send(Ok(l.local_addr()?)).ok();
    loop {
        let (s, _) = l.accept().await?;
        s.set_nodelay(true)?;
        tokio::spawn(run_service(ctx.service, TokioConn(s)));
    }
}

/// Receive buffers of `blockio-round-stream`'s engine: enough that 1,000
/// connections each holding one leave most of the ring free.
const RING_BUFFERS: u16 = 4096;
/// Their size: a request or a 4 KiB echo fits one.
const RING_BUFFER_SIZE: u32 = 16 * 1024;

/// Accepts and serves connections; with `ring_recv`, each one reads
/// through its receive stream.
async fn blockio_server(engine: &AsyncEngine, ctx: Ctx<'_>, ring_recv: bool) -> Result<()> {
    let l = TcpListenerOptions::default()
        .reuse_port(true)
        .bind_with(engine, ctx.bind)
        .await?;
    ctx.addr_tx.send(Ok(l.local_addr()?)).ok();
    let mut incoming = l.incoming();
    loop {
        let (s, _) = incoming.next().await?;
        s.set_nodelay(true)?;
        let service = ctx.service;
        if let Service::Echo { traits: true, .. } = service {
            tokio::spawn(run_service(service, BlockioTraitConn(s)));
        } else if ring_recv {
            tokio::spawn(async move {
                let conn = RingConn {
                    stream: &s,
                    rx: s.recv_stream(),
                    left: None,
                };
                run_service(service, conn).await
            });
        } else {
            tokio::spawn(run_service(service, BlockioConn(s)));
        }
    }
}

/// The engine driven by this runtime: tokio's reactor watches the ring,
/// and a task reaps (and, but for `blockio-caller`, submits).
async fn caller_server(ctx: Ctx<'_>, runtime: Runtime) -> Result<()> {
    let submit = if runtime == Runtime::BlockioCaller {
        Submit::OnStart
    } else {
        Submit::PerRound
    };
    let ring_recv = runtime == Runtime::BlockioRoundStream;
    let mut builder = AsyncEngine::builder()
        .queue_depth(NET_DEPTH)
        .driving(Driving::Caller(CallerDriving::new().submit(submit)));
    if ring_recv {
        // A share of the whole ring makes each receive multishot.
        builder = builder
            .recv_buffers(RING_BUFFERS, RING_BUFFER_SIZE)
            .recv_buffer_share(usize::from(RING_BUFFERS));
    }
    let engine = builder.build()?;
    let driver = tokio::spawn(drive_on_tokio(engine.clone()));
    let res = blockio_server(&engine, ctx, ring_recv).await;
    driver.abort();
    res
}

fn monoio_thread(ctx: Ctx<'_>, stop: oneshot::Receiver<()>) -> Result<()> {
    let mut rt = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .build()
        .context("cannot start monoio's io_uring runtime")?;
    rt.block_on(until_stopped(monoio_server(ctx), stop))
}

async fn monoio_server(ctx: Ctx<'_>) -> Result<()> {
    // Reuses the port, as each thread of a monoio server listens.
    let l =
        monoio::net::TcpListener::bind_with_config(ctx.bind, &monoio::net::ListenerOpts::new())?;
    ctx.addr_tx.send(Ok(l.local_addr()?)).ok();
    loop {
        let (s, _) = l.accept().await?;
        s.set_nodelay(true)?;
        monoio::spawn(run_service(ctx.service, MonoioConn(s)));
    }
}
