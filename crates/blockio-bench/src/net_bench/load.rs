//! Load for the echo and checksum-stream workloads, which no packaged
//! load generator offers (wrk speaks HTTP only; tcpkali is not in
//! Debian). The client runs as a child process, `blockio-bench net-load`,
//! pinned to the client CPU like wrk, so the server's CPU time and
//! context switches (counted over the `blockio-bench net` process) stay
//! the server's alone. It is written on tokio's epoll reactor and std's
//! blocking sockets, the same for every contender.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one load run measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Requests, messages or bytes completed.
    pub units: f64,
    /// Over how long.
    pub seconds: f64,
    /// Failed connections, requests or checks.
    pub errors: u64,
    /// Round-trip latency, where the workload has one.
    pub latency: Option<Latency>,
}

/// Round-trip latency, microseconds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// (percentile, microseconds) at [`CDF_POINTS`].
    pub cdf: Vec<(f64, f64)>,
}

/// The percentiles the latency CDF is drawn through.
pub const CDF_POINTS: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.5, 99.0, 99.5, 99.9,
    99.99,
];

/// Options of the hidden `blockio-bench net-load` command that `blockio-bench net`
/// runs as its client.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// The workload: `echo`, `stream`, or `idle` (hold `--connections`
    /// idle keep-alive connections, each after one HTTP request, until
    /// stdin closes).
    pub kind: String,
    /// The server.
    #[arg(long)]
    pub addr: SocketAddr,
    /// Echo: connections, each with one message in flight.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Echo: bytes per message.
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    /// Echo: seconds of load.
    #[arg(long, default_value_t = 1)]
    pub seconds: u64,
    /// Stream: bytes to send.
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
}

/// Runs the load `args` names and prints its [`Outcome`] as JSON.
pub fn run_child(args: &LoadArgs) -> Result<()> {
    let outcome = match args.kind.as_str() {
        "echo" => echo(args.addr, args.connections, args.size, args.seconds)?,
        "stream" => stream(args.addr, args.bytes)?,
        "idle" => idle(args.addr, args.connections)?,
        k => bail!("unknown load {k:?}: echo, stream or idle"),
    };
    println!("{}", serde_json::to_string(&outcome)?);
    Ok(())
}

/// Runs `blockio-bench net-load` with `args` on CPU `cpu` (`None`: any), and
/// reads its outcome.
pub fn spawn(args: &[String], cpu: Option<usize>) -> Result<Outcome> {
    let out = client_command(cpu)?
        .arg("net-load")
        .args(args)
        .output()
        .context("cannot start the load client (blockio-bench net-load)")?;
    if !out.status.success() {
        bail!(
            "the load client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("the load client printed no outcome")
}

/// The line the idle holder prints once every connection is open and
/// idle.
const IDLE_READY: &str = "idle connections ready";

/// `connections` keep-alive HTTP connections, each having made one
/// request (its response checked), then held idle until stdin closes.
/// Units are the connections still open at the end (a read finds no EOF
/// and no error); errors, those that failed or were closed by the server.
fn idle(addr: SocketAddr, connections: usize) -> Result<Outcome> {
    let start = Instant::now();
    let request = b"GET / HTTP/1.1\r\nHost: idle\r\n\r\n";
    let expected = super::service::response();
    let mut back = vec![0u8; expected.len()];
    let mut conns = Vec::with_capacity(connections);
    for i in 0..connections {
        let mut c = std::net::TcpStream::connect(addr)
            .with_context(|| format!("idle connection {i}: cannot connect to {addr}"))?;
        c.write_all(request)
            .and_then(|()| c.read_exact(&mut back))
            .with_context(|| format!("idle connection {i}: no response"))?;
        if back != expected {
            bail!("idle connection {i}: wrong response");
        }
        conns.push(c);
    }
    println!("{IDLE_READY}");
    std::io::stdout().flush()?;
    // Held until the parent closes stdin.
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink())?;
    let mut open = 0u64;
    for c in &conns {
        c.set_nonblocking(true)?;
        let mut byte = [0u8; 1];
        match (&*c).read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => open += 1,
            _ => {}
        }
    }
    Ok(Outcome {
        units: open as f64,
        seconds: start.elapsed().as_secs_f64(),
        errors: connections as u64 - open,
        latency: None,
    })
}

/// A child process holding idle connections to a server while another
/// load runs (the `idle` workload).
pub struct IdleHolder {
    child: std::process::Child,
}

impl IdleHolder {
    /// Starts `blockio-bench net-load idle` against `addr` on CPU `cpu` and
    /// waits until its `connections` connections are open and idle.
    pub fn start(addr: SocketAddr, connections: usize, cpu: Option<usize>) -> Result<IdleHolder> {
        use std::io::BufRead;
        let mut cmd = client_command(cpu)?;
        let mut child = cmd
            .arg("net-load")
            .args(["idle", "--addr", &addr.to_string()])
            .args(["--connections", &connections.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("cannot start the idle holder (blockio-bench net-load idle)")?;
        let mut line = String::new();
        let stdout = child.stdout.as_mut().context("no stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        if line.trim() != IDLE_READY {
            let out = child.wait_with_output()?;
            bail!(
                "the idle holder failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(IdleHolder { child })
    }

    /// Lets the connections go, and says how many were still open.
    pub fn finish(mut self) -> Result<Outcome> {
        drop(self.child.stdin.take());
        let out = self.child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "the idle holder failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        serde_json::from_slice(&out.stdout).context("the idle holder printed no outcome")
    }
}

/// `blockio-bench` itself, run on CPU `cpu` (`None`: any).
fn client_command(cpu: Option<usize>) -> Result<Command> {
    let exe = std::env::current_exe().context("cannot find the blockio-bench binary")?;
    Ok(match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string()]).arg(exe);
            c
        }
        None => Command::new(exe),
    })
}

/// `connections` clients each sending `size`-byte messages and waiting
/// for each echo (checked byte for byte) before the next, for `seconds`.
fn echo(addr: SocketAddr, connections: usize, size: usize, seconds: u64) -> Result<Outcome> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut conns = Vec::new();
        for _ in 0..connections {
            let c = tokio::net::TcpStream::connect(addr)
                .await
                .with_context(|| format!("cannot connect to {addr}"))?;
            c.set_nodelay(true)?;
            conns.push(c);
        }
        let start = Instant::now();
        let deadline = start + Duration::from_secs(seconds);
        let tasks: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, c)| tokio::spawn(echo_client(c, i, size, deadline)))
            .collect();
        let mut hist = new_histogram();
        let (mut units, mut errors) = (0.0, 0);
        for t in tasks {
            let (h, n, failed) = t.await?;
            hist.add(h).ok();
            units += n as f64;
            errors += u64::from(failed);
        }
        Ok(Outcome {
            units,
            seconds: start.elapsed().as_secs_f64(),
            errors,
            latency: Some(latency_of(&hist)),
        })
    })
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// One echo connection: its latencies (µs), messages, and whether it
/// failed.
async fn echo_client(
    mut c: tokio::net::TcpStream,
    id: usize,
    size: usize,
    deadline: Instant,
) -> (Histogram<u64>, u64, bool) {
    let msg: Vec<u8> = (0..size).map(|i| (i * 31 + id) as u8).collect();
    let mut back = vec![0u8; size];
    let mut hist = new_histogram();
    let mut n = 0;
    while Instant::now() < deadline {
        let t = Instant::now();
        if c.write_all(&msg).await.is_err() || c.read_exact(&mut back).await.is_err() {
            return (hist, n, true);
        }
        if back != msg {
            return (hist, n, true);
        }
        hist.saturating_record(t.elapsed().as_micros() as u64);
        n += 1;
    }
    (hist, n, false)
}

fn latency_of(h: &Histogram<u64>) -> Latency {
    let q = |p: f64| h.value_at_quantile(p / 100.0) as f64;
    Latency {
        p50_us: q(50.0),
        p99_us: q(99.0),
        p999_us: q(99.9),
        cdf: CDF_POINTS.iter().map(|&p| (p, q(p))).collect(),
    }
}

/// One connection sending `bytes` of pseudo-random data, then reading the
/// server's checksum of them, which must equal the client's. Units are
/// bytes; the time runs from connecting to the checksum's arrival.
fn stream(addr: SocketAddr, bytes: u64) -> Result<Outcome> {
    let mut chunk = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in chunk.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let start = Instant::now();
    let mut c =
        std::net::TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        c.write_all(&chunk[..n])?;
        hasher.update(&chunk[..n]);
        left -= n as u64;
    }
    c.shutdown(std::net::Shutdown::Write)?;
    let mut digest = [0u8; 8];
    c.read_exact(&mut digest)
        .context("the server sent no checksum")?;
    let seconds = start.elapsed().as_secs_f64();
    let ok = u64::from_le_bytes(digest) == hasher.digest();
    Ok(Outcome {
        units: bytes as f64,
        seconds,
        errors: u64::from(!ok),
        latency: None,
    })
}
