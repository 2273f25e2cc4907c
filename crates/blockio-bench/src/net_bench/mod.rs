//! `blockio-bench net`: the same servers, written once ([`service`]), run
//! on each runtime ([`servers`]) and loaded by a client on another CPU
//! (`wrk` for HTTP, [`load`]'s client for echo and the checksum stream),
//! in alternating rounds. The table gives each runtime's median with the
//! spread, its ratio to tokio (and to monoio) paired per round, and what
//! the server spent per unit of work: CPU time, context switches and
//! system calls ([`usage`]).
//!
//! System calls are counted in one more run per runtime after the rounds,
//! whose rate is not used: counting them attaches `perf` to the
//! `raw_syscalls:sys_enter` tracepoint, and while any program does that
//! every system call on the machine goes through the tracing path, which
//! costs a runtime in proportion to the calls it makes (figures in
//! `docs/benchmarks.md`, "System calls counted outside the rounds").
//! Counted inside the rounds, it tilts every rate
//! ratio toward the runtime making fewer calls, and slows the load
//! generator too. `--calls-in-rounds` counts them in the rounds instead,
//! a run fewer per runtime, for a quick check that every runtime runs and
//! is reported (the tests' run) when the rates are not compared.
//!
//! The targets the benchmark was built for are checked at the end
//! ([`verdict`]); `--svg` draws requests per second and the latency CDFs
//! ([`chart`]).
//!
//! wrk measures latency from when it sends each request, without
//! correcting for coordinated omission (wrk2 would; Debian ships wrk).

pub mod chart;
pub mod load;
pub mod servers;
pub mod service;
pub mod usage;
pub mod verdict;
pub mod workload;
pub mod wrk;

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;

use crate::measure::median;
use load::Outcome;
use servers::Runtime;
use usage::{PeakRss, Syscalls, Usage};
use workload::{Target, Workload};

/// Idle connections of the `idle` family when `--idle` is not given.
const DEFAULT_IDLE: usize = 10_000;

/// Options of `blockio-bench net`.
#[derive(clap::Args, Debug, Clone)]
pub struct NetBenchArgs {
    /// Seconds of load per run (the checksum stream runs until its bytes
    /// are through).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Rounds: every runtime runs once per round, in alternating order;
    /// medians are over rounds.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Workload families to run, comma separated: http (one server
    /// thread), http2 (two server threads, sharing the CPUs with wrk),
    /// echo, stream, idle (http on one server thread at `--idle-active`
    /// connections while `--idle` more stay open and silent; default
    /// 10000 idle).
    #[arg(long, value_delimiter = ',', default_values_t = ["http".to_string(), "echo".into(), "stream".into(), "http2".into()])]
    pub workloads: Vec<String>,
    /// HTTP: connections wrk keeps open, comma separated (each value is
    /// one workload).
    #[arg(long, value_delimiter = ',', default_values_t = [50usize, 1000])]
    pub connections: Vec<usize>,
    /// The `idle` family: idle keep-alive connections held open beside
    /// the active ones, comma separated (each value is one workload).
    /// Given without `idle` in `--workloads`, adds that family.
    #[arg(long, value_delimiter = ',')]
    pub idle: Vec<usize>,
    /// The `idle` family: active connections (wrk's) beside the idle ones.
    #[arg(long, default_value_t = 50)]
    pub idle_active: usize,
    /// HTTP with two server threads: connections.
    #[arg(long, default_value_t = 1000)]
    pub two_thread_connections: usize,
    /// Echo: message sizes in bytes, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [128usize, 4096])]
    pub echo_sizes: Vec<usize>,
    /// Echo: connections, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 50, 500])]
    pub echo_connections: Vec<usize>,
    /// Echo: how the server reads and writes, comma separated (each value
    /// is one workload): `owned` (each runtime's owned-buffer methods) or
    /// `traits` (tokio's `AsyncReadExt`/`AsyncWriteExt`, as code ported
    /// from tokio does; monoio keeps its own).
    #[arg(long, value_delimiter = ',', default_values_t = ["owned".to_string()])]
    pub echo_io: Vec<String>,
    /// Checksum stream: MiB sent over loopback.
    #[arg(long, default_value_t = 2048)]
    pub stream_mib: u64,
    /// Runtimes to run, comma separated (default: all). Ratios to tokio
    /// and monoio need those in the list.
    #[arg(long, value_delimiter = ',', value_parser = servers::parse_runtime)]
    pub runtimes: Vec<Runtime>,
    /// The CPU a single server thread is pinned to.
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// The CPU the client is pinned to (with one server thread).
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
    /// Also write an SVG of requests per second and latency CDFs here.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Count system calls in the rounds themselves, not in one more run
    /// per runtime after them: a run fewer per runtime and workload, but
    /// the counting slows each runtime in proportion to the calls it
    /// makes, so the rates and their ratios are tilted. For checking that
    /// everything runs and is reported, not for comparing runtimes.
    #[arg(long)]
    pub calls_in_rounds: bool,
}

impl NetBenchArgs {
    /// The workloads the options name, in report order.
    pub fn workloads(&self) -> Result<Vec<Workload>> {
        let mut out = Vec::new();
        let mut families = self.workloads.clone();
        if !self.idle.is_empty() && !families.iter().any(|f| f == "idle") {
            families.push("idle".into());
        }
        for family in &families {
            match family.as_str() {
                "http" => out.extend(self.connections.iter().map(|&c| Workload::Http {
                    connections: c,
                    threads: 1,
                    idle: 0,
                })),
                "http2" => out.push(Workload::Http {
                    connections: self.two_thread_connections,
                    threads: 2,
                    idle: 0,
                }),
                "idle" => {
                    let idle = if self.idle.is_empty() {
                        &[DEFAULT_IDLE][..]
                    } else {
                        &self.idle[..]
                    };
                    out.extend(idle.iter().map(|&idle| Workload::Http {
                        connections: self.idle_active,
                        threads: 1,
                        idle,
                    }));
                }
                "echo" => {
                    for io in &self.echo_io {
                        let traits = match io.as_str() {
                            "owned" => false,
                            "traits" => true,
                            other => bail!("--echo-io: unknown {other:?} (owned, traits)"),
                        };
                        for &size in &self.echo_sizes {
                            out.extend(self.echo_connections.iter().map(|&connections| {
                                Workload::Echo {
                                    size,
                                    connections,
                                    traits,
                                }
                            }));
                        }
                    }
                }
                "stream" => out.push(Workload::Stream {
                    bytes: self.stream_mib << 20,
                }),
                other => {
                    bail!("--workloads: unknown family {other:?} (http, http2, echo, stream, idle)")
                }
            }
        }
        Ok(out)
    }
}

/// One runtime in one round of one workload.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Round {
    /// What the client measured.
    pub outcome: Outcome,
    /// Units per second.
    pub rate: f64,
    /// The server's CPU time per unit, microseconds.
    pub cpu_us_per_unit: f64,
    /// The server's context switches per unit.
    pub switches_per_unit: f64,
    /// The server's CPU time over the load's wall time (1.0: one CPU busy).
    pub server_cpus: f64,
    /// The client's (the load generator's), likewise.
    pub client_cpus: f64,
    /// The server process's peak resident memory over the run, MiB (see
    /// [`PeakRss`]).
    pub peak_rss_mib: Option<f64>,
}

/// One runtime in one workload, over the rounds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The workload.
    pub workload: Workload,
    /// Its short name.
    pub label: String,
    /// What a unit is (`req`, `msg`, `MB`).
    pub unit: &'static str,
    /// The runtime.
    pub runtime: Runtime,
    /// Each round's figures.
    pub rounds: Vec<Round>,
    /// Median units per second.
    pub rate: f64,
    /// Median latency percentiles, microseconds (workloads with round
    /// trips).
    pub p50_us: Option<f64>,
    /// Median p99.
    pub p99_us: Option<f64>,
    /// Median p99.9.
    pub p999_us: Option<f64>,
    /// The latency CDF: (percentile, median microseconds over rounds).
    pub cdf: Vec<(f64, f64)>,
    /// Median server CPU time per unit, microseconds.
    pub cpu_us_per_unit: f64,
    /// Median server context switches per unit.
    pub switches_per_unit: f64,
    /// The server's system calls per unit, from one counting run after
    /// the rounds, or with `--calls-in-rounds` the median over the rounds
    /// (`None` without `perf`).
    pub syscalls_per_unit: Option<f64>,
    /// Median CPUs the server kept busy.
    pub server_cpus: f64,
    /// Median CPUs the client kept busy.
    pub client_cpus: f64,
    /// Median peak resident memory of the server process, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Rate over tokio's in the same round: median, lowest, highest.
    pub rate_vs_tokio: Option<[f64; 3]>,
    /// p99 over tokio's in the same round: median, lowest, highest.
    pub p99_vs_tokio: Option<[f64; 3]>,
    /// Rate over monoio's in the same round: median, lowest, highest.
    pub rate_vs_monoio: Option<[f64; 3]>,
}

/// Runs the benchmark and prints the table (or JSON).
pub fn run(args: &NetBenchArgs) -> Result<()> {
    let workloads = args.workloads()?;
    if workloads.iter().any(|w| matches!(w, Workload::Http { .. })) && !wrk::available() {
        bail!("wrk is not installed: apt-get install wrk (scripts/install-deps does)");
    }
    if args.rounds == 0 || args.seconds == 0 {
        bail!("--rounds and --seconds must be at least 1");
    }
    raise_fd_limit(
        workloads
            .iter()
            .map(Workload::connections)
            .max()
            .unwrap_or(0),
    )?;
    let count_calls = Syscalls::available();
    let runtimes: Vec<Runtime> = if args.runtimes.is_empty() {
        Runtime::ALL.to_vec()
    } else {
        args.runtimes.clone()
    };
    let calls_in_rounds = count_calls && args.calls_in_rounds;
    let runs_per_runtime = args.rounds + usize::from(count_calls && !calls_in_rounds);
    let total = workloads.len() * runs_per_runtime * runtimes.len();
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    let mut rows = Vec::new();
    for w in &workloads {
        let mut per: Vec<Vec<Round>> = vec![Vec::new(); runtimes.len()];
        let mut counted: Vec<Vec<f64>> = vec![Vec::new(); runtimes.len()];
        for round in 0..args.rounds {
            let mut order: Vec<usize> = (0..runtimes.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let rt = runtimes[i];
                bar.set_message(format!("{}: {}", w.label(), rt.name()));
                let (round, calls) = measure(args, w, rt, calls_in_rounds)?;
                per[i].push(round);
                counted[i].extend(calls);
                bar.inc(1);
            }
        }
        let mut calls: Vec<Option<f64>> = counted
            .iter()
            .map(|c| (c.len() == args.rounds).then(|| median(c)))
            .collect();
        if count_calls && !calls_in_rounds {
            for (i, &rt) in runtimes.iter().enumerate() {
                bar.set_message(format!(
                    "{}: {}, counting system calls",
                    w.label(),
                    rt.name()
                ));
                calls[i] = count_syscalls(args, w, rt)?;
                bar.inc(1);
            }
        }
        rows.extend(summarise(w, &runtimes, &per, &calls));
    }
    bar.finish_and_clear();
    if let Some(path) = &args.svg {
        std::fs::write(path, chart::chart(&rows))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        let doc = serde_json::json!({
            "rows": rows,
            "targets": verdict::check(&rows),
            "syscalls_counted": count_calls,
            "syscalls_counted_in_rounds": calls_in_rounds,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", table(args, &rows, count_calls, calls_in_rounds));
        print!("{}", verdict::report(&verdict::check(&rows)));
    }
    Ok(())
}

/// One run of a workload on one runtime, as the server and the client saw
/// it.
struct Run {
    /// What the client measured.
    outcome: Outcome,
    /// The workload's units the client completed (at least the smallest
    /// positive number, so that per-unit figures stay finite).
    units: f64,
    /// The server's use over the load.
    server: Usage,
    /// The client's.
    client: Usage,
    /// The server's system calls, when counted.
    calls: Option<f64>,
    /// The server process's peak resident memory, MiB.
    peak_rss_mib: Option<f64>,
}

/// Starts `rt`'s server for `w`, loads it for `--seconds`, and stops it;
/// with `count_calls`, `perf` counts the server's system calls meanwhile.
fn run_once(args: &NetBenchArgs, w: &Workload, rt: Runtime, count_calls: bool) -> Result<Run> {
    let peak = PeakRss::start();
    let server = servers::start(rt, w.service(), w.threads(args.server_cpu))?;
    let target = Target {
        addr: server.addr,
        duration: Duration::from_secs(args.seconds),
        client_cpu: args.client_cpu,
    };
    let calls = if count_calls { Syscalls::start() } else { None };
    let (before, client_before) = (Usage::now(), Usage::children());
    let outcome = w
        .load(&target)
        .with_context(|| format!("{} on {}", w.label(), rt.name()))?;
    let server_use = Usage::now().since(&before);
    let client = Usage::children().since(&client_before);
    let calls = calls.and_then(Syscalls::finish);
    let peak_rss_mib = peak.and_then(PeakRss::finish);
    drop(server);
    Ok(Run {
        units: (outcome.units / w.unit_scale()).max(f64::MIN_POSITIVE),
        outcome,
        server: server_use,
        client,
        calls,
        peak_rss_mib,
    })
}

/// One round of `w` on `rt`: the client's figures and the server's costs,
/// with nothing attached to the server unless `count_calls`
/// (`--calls-in-rounds`), when the server's system calls per unit come
/// with them.
fn measure(
    args: &NetBenchArgs,
    w: &Workload,
    rt: Runtime,
    count_calls: bool,
) -> Result<(Round, Option<f64>)> {
    let run = run_once(args, w, rt, count_calls)?;
    let seconds = run.outcome.seconds;
    let calls = run.calls.map(|c| c / run.units);
    let round = Round {
        rate: run.units / seconds,
        cpu_us_per_unit: run.server.cpu_us / run.units,
        switches_per_unit: run.server.switches / run.units,
        server_cpus: run.server.cpu_us / 1e6 / seconds,
        client_cpus: run.client.cpu_us / 1e6 / seconds,
        peak_rss_mib: run.peak_rss_mib,
        outcome: run.outcome,
    };
    Ok((round, calls))
}

/// The server's system calls per unit of `w` on `rt`, from a run of its
/// own (see the module doc for why not from the rounds); `None` when
/// `perf` gave no count.
fn count_syscalls(args: &NetBenchArgs, w: &Workload, rt: Runtime) -> Result<Option<f64>> {
    let run = run_once(args, w, rt, true)?;
    Ok(run.calls.map(|c| c / run.units))
}

/// Lets the client and the server hold `connections` sockets each;
/// fails, naming the limit, where the hard limit is too low for that.
fn raise_fd_limit(connections: usize) -> Result<()> {
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
    if lim.rlim_cur < connections as u64 + 64 {
        bail!(
            "{connections} connections need more descriptors than RLIMIT_NOFILE allows ({}); raise it (ulimit -n)",
            lim.rlim_cur
        );
    }
    Ok(())
}

/// Median, lowest and highest.
fn spread(v: &[f64]) -> [f64; 3] {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [median(v), lo, hi]
}

fn summarise(
    w: &Workload,
    runtimes: &[Runtime],
    per: &[Vec<Round>],
    calls: &[Option<f64>],
) -> Vec<Row> {
    let rounds_of = |r: Runtime| {
        runtimes
            .iter()
            .position(|&x| x == r)
            .map_or(&[][..], |i| &per[i][..])
    };
    let tokio = rounds_of(Runtime::Tokio);
    let monoio = rounds_of(Runtime::Monoio);
    runtimes
        .iter()
        .zip(per)
        .zip(calls)
        .map(|((&runtime, rounds), &syscalls_per_unit)| {
            let m = |f: &dyn Fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
            let lat = |f: fn(&load::Latency) -> f64| {
                let v: Option<Vec<f64>> = rounds
                    .iter()
                    .map(|r| r.outcome.latency.as_ref().map(f))
                    .collect();
                v.map(|v| median(&v))
            };
            let paired = |base: &[Round], skip: Runtime, f: &dyn Fn(&Round) -> Option<f64>| {
                let r: Option<Vec<f64>> = rounds
                    .iter()
                    .zip(base)
                    .map(|(a, b)| Some(f(a)? / f(b)?))
                    .collect();
                r.filter(|r| runtime != skip && !r.is_empty())
                    .map(|r| spread(&r))
            };
            let rate = |r: &Round| Some(r.rate);
            let p99 = |r: &Round| r.outcome.latency.as_ref().map(|l| l.p99_us);
            Row {
                workload: *w,
                label: w.label(),
                unit: w.unit(),
                runtime,
                rate: m(&|r| r.rate),
                p50_us: lat(|l| l.p50_us),
                p99_us: lat(|l| l.p99_us),
                p999_us: lat(|l| l.p999_us),
                cdf: median_cdf(rounds),
                cpu_us_per_unit: m(&|r| r.cpu_us_per_unit),
                switches_per_unit: m(&|r| r.switches_per_unit),
                syscalls_per_unit,
                server_cpus: m(&|r| r.server_cpus),
                client_cpus: m(&|r| r.client_cpus),
                peak_rss_mib: rounds
                    .iter()
                    .map(|r| r.peak_rss_mib)
                    .collect::<Option<Vec<f64>>>()
                    .filter(|v| !v.is_empty())
                    .map(|v| median(&v)),
                rate_vs_tokio: paired(tokio, Runtime::Tokio, &rate),
                p99_vs_tokio: paired(tokio, Runtime::Tokio, &p99),
                rate_vs_monoio: paired(monoio, Runtime::Monoio, &rate),
                rounds: rounds.clone(),
            }
        })
        .collect()
}

/// Each CDF point's median over the rounds.
fn median_cdf(rounds: &[Round]) -> Vec<(f64, f64)> {
    let Some(first) = rounds.first().and_then(|r| r.outcome.latency.as_ref()) else {
        return Vec::new();
    };
    (0..first.cdf.len())
        .map(|i| {
            let v: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.outcome.latency.as_ref()?.cdf.get(i).map(|p| p.1))
                .collect();
            (first.cdf[i].0, median(&v))
        })
        .collect()
}

fn table(args: &NetBenchArgs, rows: &[Row], count_calls: bool, calls_in_rounds: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Servers: one thread on CPU {} (client on CPU {}), or two threads unpinned (http ... 2t, two wrk threads);\n{} rounds of {} s, alternating; medians, ratios paired per round (lowest-highest);\nCPU/u, cs/u, calls/u: the server's CPU us, context switches and system calls per unit (req, msg, MB){};
{};\nsrv, cli: CPUs the server and the client kept busy (1.00: one CPU all the time);\npeak MiB: the server process's peak resident memory over a run (the client is another process).\n",
        args.server_cpu,
        args.client_cpu,
        args.rounds,
        args.seconds,
        if count_calls {
            ""
        } else {
            "; calls not counted: perf is missing or may not read tracepoints"
        },
        if calls_in_rounds {
            "calls/u counted in the rounds (--calls-in-rounds): the counting slowed every system call, so rates and ratios are tilted"
        } else {
            "calls/u from one more run per runtime after the rounds, since counting them slows every system call"
        }
    );
    let _ = writeln!(
        s,
        "{:<16} {:<15} {:>16} {:>8} {:>8} {:>8} {:>7} {:>7} {:>5} {:>5} {:>8}  {:<21} {:<21} {:<21}",
        "workload",
        "runtime",
        "rate",
        "p50 us",
        "p99 us",
        "CPU/u",
        "cs/u",
        "calls/u",
        "srv",
        "cli",
        "peak MiB",
        "rate vs tokio",
        "p99 vs tokio",
        "rate vs monoio"
    );
    let r3 = |x: Option<[f64; 3]>| {
        x.map_or("-".to_string(), |[m, lo, hi]| {
            format!("{m:.3} ({lo:.2}-{hi:.2})")
        })
    };
    let opt =
        |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for r in rows {
        let errors: u64 = r.rounds.iter().map(|l| l.outcome.errors).sum();
        let _ = writeln!(
            s,
            "{:<16} {:<15} {:>16} {:>8} {:>8} {:>8.2} {:>7.3} {:>7} {:>5.2} {:>5.2} {:>8}  {:<21} {:<21} {:<21}{}",
            r.label,
            r.runtime.name(),
            format!("{:.0} {}/s", r.rate, r.unit),
            opt(r.p50_us, 0),
            opt(r.p99_us, 0),
            r.cpu_us_per_unit,
            r.switches_per_unit,
            opt(r.syscalls_per_unit, 2),
            r.server_cpus,
            r.client_cpus,
            opt(r.peak_rss_mib, 0),
            r3(r.rate_vs_tokio),
            r3(r.p99_vs_tokio),
            r3(r.rate_vs_monoio),
            if errors > 0 {
                format!("  ({errors} errors)")
            } else {
                String::new()
            }
        );
    }
    s
}
