//! `blockio net-bench`: one HTTP/1.1 keep-alive server, written once
//! ([`http`]), run on each runtime ([`servers`]), loaded by `wrk` pinned
//! to another CPU ([`wrk`]), in alternating rounds; the table gives each
//! runtime's median with the spread, and its ratio to tokio paired per
//! round.
//!
//! wrk measures latency from when it sends each request, without
//! correcting for coordinated omission (wrk2 would; Debian ships wrk).

pub mod http;
pub mod servers;
pub mod wrk;

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Result};
use indicatif::ProgressBar;

use crate::measure::median;
use servers::{Runtime, Service};
use wrk::Load;

/// Options of `blockio net-bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct NetBenchArgs {
    /// Seconds of load per run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Rounds: every runtime runs once per round, in alternating order;
    /// medians are over rounds.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Connections wrk keeps open, comma separated (each value is one
    /// workload).
    #[arg(long, value_delimiter = ',', default_values_t = [50usize, 1000])]
    pub connections: Vec<usize>,
    /// The CPU the server thread is pinned to.
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// The CPU wrk is pinned to.
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One runtime in one workload, over the rounds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Connections.
    pub connections: usize,
    /// The runtime.
    pub runtime: Runtime,
    /// Each round's figures.
    pub rounds: Vec<Load>,
    /// Median requests per second.
    pub rps: f64,
    /// Median latency percentiles, microseconds.
    pub p50_us: f64,
    /// Median p99.
    pub p99_us: f64,
    /// Median p99.9.
    pub p999_us: f64,
    /// Median server CPU time per request, microseconds.
    pub cpu_us_per_req: f64,
    /// Median server context switches per request.
    pub switches_per_req: f64,
    /// Requests per second over tokio's in the same round: median, lowest,
    /// highest.
    pub rps_vs_tokio: Option<[f64; 3]>,
    /// p99 over tokio's in the same round: median, lowest, highest.
    pub p99_vs_tokio: Option<[f64; 3]>,
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(args: &NetBenchArgs) -> Result<()> {
    if !wrk::available() {
        bail!("wrk is not installed: apt-get install wrk (scripts/install-deps does)");
    }
    if args.rounds == 0 || args.seconds == 0 {
        bail!("--rounds and --seconds must be at least 1");
    }
    raise_fd_limit(args.connections.iter().copied().max().unwrap_or(0));
    let total = args.connections.len() * args.rounds * Runtime::ALL.len();
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    let mut rows = Vec::new();
    for &c in &args.connections {
        let mut per: Vec<Vec<Load>> = vec![Vec::new(); Runtime::ALL.len()];
        for round in 0..args.rounds {
            let mut order: Vec<usize> = (0..Runtime::ALL.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let rt = Runtime::ALL[i];
                bar.set_message(format!("{c} connections: {}", rt.name()));
                let server = servers::start(rt, Service::Http, args.server_cpu)?;
                let load = wrk::run(
                    server.addr,
                    c,
                    Duration::from_secs(args.seconds),
                    args.client_cpu,
                )?;
                drop(server);
                per[i].push(load);
                bar.inc(1);
            }
        }
        rows.extend(summarise(c, &per));
    }
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(args, &rows));
    }
    Ok(())
}

/// Lets wrk and the server hold `connections` sockets each.
fn raise_fd_limit(connections: usize) {
    let want = (connections as u64 * 2 + 256).max(1024);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and writes a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Median, lowest and highest.
fn spread(v: &[f64]) -> [f64; 3] {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [median(v), lo, hi]
}

fn summarise(connections: usize, per: &[Vec<Load>]) -> Vec<Row> {
    let tokio = &per[0];
    Runtime::ALL
        .iter()
        .zip(per)
        .map(|(&runtime, loads)| {
            let m = |f: fn(&Load) -> f64| median(&loads.iter().map(f).collect::<Vec<_>>());
            let paired = |f: fn(&Load) -> f64| {
                let r: Vec<f64> = loads.iter().zip(tokio).map(|(a, b)| f(a) / f(b)).collect();
                (runtime != Runtime::Tokio).then(|| spread(&r))
            };
            Row {
                connections,
                runtime,
                rounds: loads.clone(),
                rps: m(|l| l.rps),
                p50_us: m(|l| l.p50_us),
                p99_us: m(|l| l.p99_us),
                p999_us: m(|l| l.p999_us),
                cpu_us_per_req: m(|l| l.server_cpu_us_per_req),
                switches_per_req: m(|l| l.server_switches_per_req),
                rps_vs_tokio: paired(|l| l.rps),
                p99_vs_tokio: paired(|l| l.p99_us),
            }
        })
        .collect()
}

fn table(args: &NetBenchArgs, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "HTTP/1.1 keep-alive, fixed response; server on CPU {}, wrk (1 thread) on CPU {};\n{} rounds of {} s, alternating; medians, ratios to tokio paired per round (lowest-highest);\nCPU us/r and cs/r: the server's CPU time and context switches per request (getrusage):\n",
        args.server_cpu, args.client_cpu, args.rounds, args.seconds
    );
    let _ = writeln!(
        s,
        "{:>6}  {:<15} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7}  {:<22} {:<22}",
        "conns",
        "runtime",
        "req/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "CPU us/r",
        "cs/r",
        "req/s vs tokio",
        "p99 vs tokio"
    );
    let r3 = |x: Option<[f64; 3]>| {
        x.map_or("-".to_string(), |[m, lo, hi]| {
            format!("{m:.3} ({lo:.3}-{hi:.3})")
        })
    };
    for r in rows {
        let errors: u64 = r.rounds.iter().map(|l| l.errors).sum();
        let _ = writeln!(
            s,
            "{:>6}  {:<15} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>8.2} {:>7.3}  {:<22} {:<22}{}",
            r.connections,
            r.runtime.name(),
            r.rps,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.cpu_us_per_req,
            r.switches_per_req,
            r3(r.rps_vs_tokio),
            r3(r.p99_vs_tokio),
            if errors > 0 {
                format!("  ({errors} errors)")
            } else {
                String::new()
            }
        );
    }
    s
}
