//! The contenders: the same server code ([`super::http`]) on each runtime,
//! each on one thread pinned to one CPU.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::task::Poll;

use anyhow::{anyhow, Context, Result};
use blockio::aio::AsyncEngine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::http::{self, Conn};

/// The engines' queue depth: every connection keeps a read in flight, so
/// the bound must exceed the connections (the default, 256, sized for file
/// I/O, would queue reads of connections past it behind idle ones).
const NET_DEPTH: usize = 16384;

/// A runtime the server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// tokio's current-thread runtime and its epoll reactor.
    Tokio,
    /// `blockio::net` on tokio's current-thread runtime, completions from
    /// the engine's driver thread.
    Blockio,
    /// `blockio::net` on tokio's current-thread runtime with the ring
    /// driven by the runtime's thread: tokio's reactor watches the ring's
    /// eventfd and a task reaps completions (no driver thread).
    BlockioInline,
    /// As `blockio-inline`, and operations started in one round of tasks
    /// reach the kernel together, in one `io_uring_enter` by the driving
    /// task ([`AsyncEngineBuilder::submit_when_driven`](blockio::aio::AsyncEngineBuilder::submit_when_driven)).
    BlockioTick,
}

impl Runtime {
    /// Every runtime, in report order.
    pub const ALL: [Runtime; 4] = [
        Runtime::Tokio,
        Runtime::Blockio,
        Runtime::BlockioInline,
        Runtime::BlockioTick,
    ];

    /// The name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Tokio => "tokio",
            Runtime::Blockio => "blockio",
            Runtime::BlockioInline => "blockio-inline",
            Runtime::BlockioTick => "blockio-tick",
        }
    }
}

/// What the server does with each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// HTTP/1.1 keep-alive with a fixed response.
    Http,
    /// Echo.
    Echo,
}

async fn run_service<C: Conn>(service: Service, conn: C) {
    let _ = match service {
        Service::Http => http::serve(conn).await,
        Service::Echo => http::echo(conn).await,
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
    fn read(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<usize>, Vec<u8>)> + Send {
        self.0.read(buf)
    }
    fn write_all(
        &mut self,
        buf: Vec<u8>,
    ) -> impl Future<Output = (io::Result<()>, Vec<u8>)> + Send {
        self.0.write_all(buf)
    }
}

/// A server running on its own pinned thread; stops when dropped.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
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

/// Starts `service` on `runtime`, on a thread pinned to `cpu`.
pub fn start(runtime: Runtime, service: Service, cpu: usize) -> Result<Server> {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("net-bench-{}", runtime.name()))
        .spawn(move || {
            let res = serve_until(runtime, service, cpu, &addr_tx, stop_rx);
            if let Err(e) = res {
                let _ = addr_tx.send(Err(e));
            }
        })?;
    let addr = addr_rx
        .recv()
        .map_err(|_| anyhow!("the {} server thread died", runtime.name()))??;
    Ok(Server {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

type AddrTx = mpsc::Sender<Result<SocketAddr>>;

fn serve_until(
    runtime: Runtime,
    service: Service,
    cpu: usize,
    addr_tx: &AddrTx,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    pin_to(cpu).with_context(|| format!("cannot pin the server to CPU {cpu}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match runtime {
            Runtime::Tokio => tokio_server(service, addr_tx, stop).await,
            Runtime::Blockio => {
                let engine = AsyncEngine::builder().queue_depth(NET_DEPTH).build()?;
                blockio_server(&engine, service, addr_tx, stop).await
            }
            Runtime::BlockioInline => inline_server(service, addr_tx, stop, false).await,
            Runtime::BlockioTick => inline_server(service, addr_tx, stop, true).await,
        }
    })
}

async fn tokio_server(
    service: Service,
    addr_tx: &AddrTx,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    addr_tx.send(Ok(l.local_addr()?)).ok();
    loop {
        tokio::select! {
            r = l.accept() => {
                let (s, _) = r?;
                s.set_nodelay(true)?;
                tokio::spawn(run_service(service, TokioConn(s)));
            }
            _ = &mut stop => return Ok(()),
        }
    }
}

async fn blockio_server(
    engine: &AsyncEngine,
    service: Service,
    addr_tx: &AddrTx,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let l = blockio::net::TcpListener::bind(engine, "127.0.0.1:0")?;
    addr_tx.send(Ok(l.local_addr())).ok();
    loop {
        tokio::select! {
            r = l.accept() => {
                let (s, _) = r?;
                s.set_nodelay(true)?;
                tokio::spawn(run_service(service, BlockioConn(s)));
            }
            _ = &mut stop => return Ok(()),
        }
    }
}

/// The engine driven by this runtime: tokio's reactor watches the eventfd
/// the ring signals, and a task reaps (and, with `per_tick`, submits).
async fn inline_server(
    service: Service,
    addr_tx: &AddrTx,
    stop: tokio::sync::oneshot::Receiver<()>,
    per_tick: bool,
) -> Result<()> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: `fd` is fresh and owned by nobody else.
    let efd = unsafe { OwnedFd::from_raw_fd(fd) };
    let engine = AsyncEngine::builder()
        .queue_depth(NET_DEPTH)
        .driven_by_caller(efd.as_raw_fd())
        .submit_when_driven(per_tick)
        .build()?;
    // SAFETY: the AsyncFd owns the OwnedFd, which stays open (and is the
    // same eventfd) until the AsyncFd drops it.
    let watched = unsafe { tokio::io::unix::AsyncFd::register(efd) }
        .map_err(|e| anyhow!("cannot watch the ring's eventfd: {e}"))?;
    let driving = engine.clone();
    let driver = tokio::spawn(std::future::poll_fn(move |cx| loop {
        let _ = driving.poll_drive(cx);
        match watched.poll_read_ready(cx) {
            Poll::Ready(Ok(mut ready)) => {
                let mut count = [0u8; 8];
                // SAFETY: reads 8 bytes into a live local from our eventfd.
                unsafe { libc::read(watched.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
                ready.clear_ready();
            }
            Poll::Ready(Err(_)) => return Poll::Ready(()),
            Poll::Pending => return Poll::Pending,
        }
    }));
    let res = blockio_server(&engine, service, addr_tx, stop).await;
    driver.abort();
    res
}
