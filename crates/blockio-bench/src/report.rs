//! Results of `blockio-bench read`: rows, the auto/best summary, and the table,
//! JSON and CSV forms.

use std::fmt::Write as _;

use serde::Serialize;

use crate::measure::Measured;
use crate::profile::Profile;
use crate::strategy::{Plan, Strategy};

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The profile.
    pub profile: Profile,
    /// The strategy.
    pub strategy: Strategy,
    /// Operations in flight.
    pub qd: usize,
    /// Threads (or tasks) issuing them.
    pub threads: usize,
    /// What really served the reads: `io_uring` or `thread pool` (blockio's
    /// fallback, where io_uring is blocked) for blockio's strategies, with
    /// `+ inline` when `auto` served some on the calling thread, or just
    /// `inline` when it served all there (one read at a time);
    /// `pread` for sync and threads, `tokio blocking pool` for the pool
    /// strategies, `fio io_uring` for fio.
    pub backend: String,
    /// Operations per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_s: f64,
    /// Median latency (µs); for batches, the batch's round trip.
    pub p50_us: Option<f64>,
    /// 99th percentile latency (µs); none when fewer than 1,000
    /// latencies were recorded (see `samples`).
    pub p99_us: Option<f64>,
    /// 99.9th percentile latency (µs); none when fewer than 10,000
    /// latencies were recorded, as on a short warm run, where one read
    /// in 64 is timed.
    pub p999_us: Option<f64>,
    /// Latencies recorded behind the percentiles (timed reads or
    /// batches, each weighted for the reads it stands for).
    pub samples: Option<u64>,
    /// Process CPU time (user + system) per operation (µs).
    pub cpu_us_per_op: Option<f64>,
    /// Context switches of the process during the run.
    pub ctx_switches: Option<u64>,
    /// Operations completed.
    pub ops: Option<u64>,
    /// Seconds measured.
    pub seconds: f64,
    /// Fraction of the file in the page cache when the run started.
    pub resident_before: Option<f64>,
    /// IOPS as a ratio to fio's on the same profile (with `--fio`).
    pub vs_fio: Option<f64>,
}

impl Row {
    /// A row from a measured run.
    pub fn measured(
        profile: Profile,
        plan: Plan,
        (m, backend): &(Measured, String),
        resident: f64,
    ) -> Row {
        Row {
            profile,
            strategy: plan.strategy,
            qd: plan.qd,
            threads: plan.threads,
            backend: backend.clone(),
            iops: m.iops(),
            mib_s: m.mib_s(),
            p50_us: m.p50_us,
            p99_us: m.p99_us,
            p999_us: m.p999_us,
            samples: Some(m.samples),
            cpu_us_per_op: Some(m.cpu.as_secs_f64() * 1e6 / m.ops.max(1) as f64),
            ctx_switches: Some(m.switches),
            ops: Some(m.ops),
            seconds: m.elapsed.as_secs_f64(),
            resident_before: Some(resident),
            vs_fio: None,
        }
    }

    /// A row for fio's figure (only IOPS are taken from fio).
    pub fn fio(profile: Profile, qd: usize, iops: f64, seconds: f64) -> Row {
        Row {
            profile,
            strategy: Strategy::Fio,
            qd,
            threads: 1,
            backend: "fio io_uring".into(),
            iops,
            mib_s: iops * profile.block_size() as f64 / (1 << 20) as f64,
            p50_us: None,
            p99_us: None,
            p999_us: None,
            samples: None,
            cpu_us_per_op: None,
            ctx_switches: None,
            ops: None,
            seconds,
            resident_before: None,
            vs_fio: Some(1.0),
        }
    }
}

/// How `auto` did in one profile against the best strategy of the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The profile.
    pub profile: Profile,
    /// `auto`'s IOPS.
    pub auto_iops: Option<f64>,
    /// The strategy with the most IOPS (fio excluded).
    pub best_strategy: Strategy,
    /// Its operations in flight.
    pub best_qd: usize,
    /// Its IOPS.
    pub best_iops: f64,
    /// `auto` (its best configuration) against the best strategy (the plan
    /// with the highest median IOPS): their ratio in each round, median over
    /// rounds (the target is ≥ 0.95). Pairing within a round keeps slow
    /// drift of a shared machine out of the ratio.
    pub auto_vs_best: Option<f64>,
    /// The lowest and highest round of `auto_vs_best`.
    pub auto_vs_best_spread: Option<[f64; 2]>,
    /// `auto` one read at a time from one thread, as a ratio to `sync`:
    /// paired per round, median over rounds (the target is ≥ 0.97).
    pub auto_qd1_vs_sync: Option<f64>,
    /// The lowest and highest round of `auto_qd1_vs_sync`.
    pub auto_qd1_vs_sync_spread: Option<[f64; 2]>,
    /// fio's IOPS, with `--fio`.
    pub fio_iops: Option<f64>,
    /// The async API against the other ways of reading at the same
    /// concurrency, one entry per task count.
    pub async_api: Vec<AsyncComparison>,
}

/// The async API at one task count, against the alternatives at the same
/// concurrency in the same profile.
#[derive(Debug, Clone, Serialize)]
pub struct AsyncComparison {
    /// Concurrent tasks.
    pub tasks: usize,
    /// The async API's IOPS.
    pub iops: f64,
    /// Against tokio::fs (target ≥ 5). In the direct profile, where
    /// tokio::fs cannot do O_DIRECT, against tokio::fs on the cold profile:
    /// what a tokio::fs user gets on the same uncached data.
    pub vs_tokio_fs: Option<f64>,
    /// Against spawn_blocking + pread (target ≥ 1.5): paired per round,
    /// median over rounds, as `auto`'s ratios are.
    pub vs_spawn_blocking: Option<f64>,
    /// The lowest and highest round of `vs_spawn_blocking`.
    pub vs_spawn_blocking_spread: Option<[f64; 2]>,
    /// Against the engine's synchronous batch API at this queue depth from
    /// one thread (target ≥ 0.9): paired per round, median over rounds.
    pub vs_sync_batch: Option<f64>,
    /// The lowest and highest round of `vs_sync_batch`.
    pub vs_sync_batch_spread: Option<[f64; 2]>,
    /// Against the batch API by CPU time: the batch's CPU per read over
    /// the async API's (above 1 is better, as by IOPS; the warm target of
    /// 0.9 is held to this), paired per round, median over rounds.
    pub cpu_vs_sync_batch: Option<f64>,
    /// The lowest and highest round of `cpu_vs_sync_batch`.
    pub cpu_vs_sync_batch_spread: Option<[f64; 2]>,
    /// The same ratio for the `pread` loop (`sync`, one read at a time):
    /// the batch's CPU per read over the loop's, in the same rounds. A
    /// read that is one system call of its own, as the async API's cached
    /// read is, costs at least this, so it bounds `cpu_vs_sync_batch`.
    pub pread_loop_cpu_vs_sync_batch: Option<f64>,
    /// The lowest and highest round of `pread_loop_cpu_vs_sync_batch`.
    pub pread_loop_cpu_vs_sync_batch_spread: Option<[f64; 2]>,
}

/// A ratio paired within each round: its median over rounds, and the
/// lowest and highest round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Paired {
    /// The median of the per-round ratios.
    pub median: f64,
    /// The lowest per-round ratio.
    pub min: f64,
    /// The highest per-round ratio.
    pub max: f64,
}

impl Paired {
    /// The median and spread of per-round ratios `a[i] / b[i]` of IOPS.
    fn of(a: &[Row], b: &[Row]) -> Option<Paired> {
        Self::of_ratios(a.iter().zip(b).map(|(a, b)| a.iops / b.iops).collect())
    }

    /// The median and spread of per-round ratios of CPU time per read,
    /// `b[i]`'s over `a[i]`'s (so that above 1 means `a` costs less, as
    /// by IOPS); rounds without a CPU figure are left out.
    fn of_cpu(a: &[Row], b: &[Row]) -> Option<Paired> {
        let ratios = a
            .iter()
            .zip(b)
            .filter_map(|(a, b)| Some(b.cpu_us_per_op? / a.cpu_us_per_op?))
            .filter(|x| x.is_finite())
            .collect();
        Self::of_ratios(ratios)
    }

    fn of_ratios(ratios: Vec<f64>) -> Option<Paired> {
        let median = crate::measure::median(&ratios);
        (!median.is_nan()).then(|| Paired {
            median,
            min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// What [`paired_ratios`] found in one profile's rounds.
#[derive(Debug, Clone, Default)]
pub struct PairedRatios {
    /// `auto` against the best strategy.
    pub auto_vs_best: Option<Paired>,
    /// `auto` at queue depth 1 against `sync` at queue depth 1.
    pub auto_qd1_vs_sync: Option<Paired>,
    /// The async API at each task count against the alternatives at the
    /// same concurrency.
    pub async_api: Vec<AsyncPaired>,
}

/// The async API at one task count, each ratio paired per round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AsyncPaired {
    /// Concurrent tasks.
    pub tasks: usize,
    /// Against `pool-blocking` with as many tasks.
    pub vs_spawn_blocking: Option<Paired>,
    /// Against `uring` at a queue depth of the task count.
    pub vs_sync_batch: Option<Paired>,
    /// Against `uring` at the same depth by CPU per read.
    pub cpu_vs_sync_batch: Option<Paired>,
    /// `sync` one read at a time against `uring` at the same depth by CPU
    /// per read: the bound of a read that is one system call.
    pub pread_loop_cpu_vs_sync_batch: Option<Paired>,
}

/// `auto` (its best configuration, as a user would pick it) over the best
/// strategy, and `auto` one read at a time over the `pread` loop, each
/// paired per round. `rounds[i]` holds plan `i`'s rows, one per round.
///
/// The best strategy is the plan with the highest median IOPS (the one the
/// table names), not the fastest plan of each round: taking a per-round
/// maximum over a dozen noisy runs would compare auto with the luckiest run
/// rather than with a strategy a user could pick.
pub fn paired_ratios(rounds: &[Vec<Row>]) -> PairedRatios {
    let median = |v: &[f64]| Some(crate::measure::median(v)).filter(|m| !m.is_nan());
    let iops = |plan: &Vec<Row>| plan.iter().map(|r| r.iops).collect::<Vec<_>>();
    let by_median = |a: &&Vec<Row>, b: &&Vec<Row>| {
        let (a, b) = (median(&iops(a)), median(&iops(b)));
        a.unwrap_or(0.0).total_cmp(&b.unwrap_or(0.0))
    };
    let is = |v: &Vec<Row>, st: Strategy| v.first().is_some_and(|r| r.strategy == st);
    let at_qd1 = |st: Strategy| {
        rounds
            .iter()
            .find(|v| is(v, st) && v.first().is_some_and(|r| r.qd == 1))
    };
    let auto = rounds
        .iter()
        .filter(|v| is(v, Strategy::Auto))
        .max_by(by_median);
    let at = |st: Strategy, qd: usize| {
        rounds
            .iter()
            .find(|v| is(v, st) && v.first().is_some_and(|r| r.qd == qd))
    };
    let async_api = rounds
        .iter()
        .filter(|v| is(v, Strategy::Async))
        .filter_map(|a| {
            let tasks = a.first()?.qd;
            let vs = |st| at(st, tasks).and_then(|b| Paired::of(a, b));
            let batch = at(Strategy::Uring, tasks);
            Some(AsyncPaired {
                tasks,
                vs_spawn_blocking: vs(Strategy::PoolBlocking),
                vs_sync_batch: vs(Strategy::Uring),
                cpu_vs_sync_batch: batch.and_then(|b| Paired::of_cpu(a, b)),
                pread_loop_cpu_vs_sync_batch: at_qd1(Strategy::Sync)
                    .zip(batch)
                    .and_then(|(s, b)| Paired::of_cpu(s, b)),
            })
        })
        .collect();
    let best = rounds.iter().filter(|v| !v.is_empty()).max_by(by_median);
    PairedRatios {
        auto_vs_best: auto.zip(best).and_then(|(a, b)| Paired::of(a, b)),
        auto_qd1_vs_sync: at_qd1(Strategy::Auto)
            .zip(at_qd1(Strategy::Sync))
            .and_then(|(a, s)| Paired::of(a, s)),
        async_api,
    }
}

/// Fills in `vs_fio` and summarises each profile; `paired` holds each
/// profile's [`paired_ratios`].
pub fn summarise(
    rows: &mut [Row],
    profiles: &[Profile],
    paired: &[(Profile, PairedRatios)],
) -> Vec<Summary> {
    let mut out = Vec::new();
    for &p in profiles {
        let fio = rows
            .iter()
            .find(|r| r.profile == p && r.strategy == Strategy::Fio)
            .map(|r| r.iops);
        for r in rows.iter_mut().filter(|r| r.profile == p) {
            r.vs_fio = fio.map(|f| r.iops / f);
        }
        let ours = || {
            rows.iter()
                .filter(move |r| r.profile == p && r.strategy != Strategy::Fio)
        };
        let Some(best) = ours().max_by(|a, b| a.iops.total_cmp(&b.iops)) else {
            continue;
        };
        // The headline auto run is its best configuration; the qd 1 run is
        // compared with the pread loop.
        let auto = ours()
            .filter(|r| r.strategy == Strategy::Auto)
            .map(|r| r.iops)
            .max_by(f64::total_cmp);
        let pair = paired
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, r)| r.clone())
            .unwrap_or_default();
        let async_api = async_comparisons(rows, p, &pair);
        out.push(Summary {
            profile: p,
            auto_iops: auto,
            best_strategy: best.strategy,
            best_qd: best.qd,
            best_iops: best.iops,
            auto_vs_best: pair
                .auto_vs_best
                .map(|x| x.median)
                .or(auto.map(|a| a / best.iops)),
            auto_vs_best_spread: pair.auto_vs_best.map(|x| [x.min, x.max]),
            auto_qd1_vs_sync: pair.auto_qd1_vs_sync.map(|x| x.median),
            auto_qd1_vs_sync_spread: pair.auto_qd1_vs_sync.map(|x| [x.min, x.max]),
            fio_iops: fio,
            async_api,
        });
    }
    out
}

/// The async API's rows of profile `p` against the other strategies at
/// its task count: paired per round where `pair` has them, else the ratio
/// of the median rounds in `rows`.
fn async_comparisons(rows: &[Row], p: Profile, pair: &PairedRatios) -> Vec<AsyncComparison> {
    let find = |prof: Profile, st: Strategy, qd: usize| {
        rows.iter()
            .find(|r| r.profile == prof && r.strategy == st && r.qd == qd)
            .map(|r| r.iops)
    };
    rows.iter()
        .filter(|r| r.profile == p && r.strategy == Strategy::Async)
        .map(|r| {
            let tfs_profile = if p == Profile::Direct {
                Profile::Cold
            } else {
                p
            };
            // Paired per round where both ran in this profile's rounds;
            // else the ratio of the median rounds.
            let paired = pair.async_api.iter().find(|x| x.tasks == r.qd);
            let median_of = |x: Option<Paired>, st| {
                x.map(|x| x.median)
                    .or_else(|| find(p, st, r.qd).map(|b| r.iops / b))
            };
            let spread_of = |x: Option<Paired>| x.map(|x| [x.min, x.max]);
            let sb = paired.and_then(|x| x.vs_spawn_blocking);
            let batch = paired.and_then(|x| x.vs_sync_batch);
            let cpu = paired.and_then(|x| x.cpu_vs_sync_batch);
            let ceiling = paired.and_then(|x| x.pread_loop_cpu_vs_sync_batch);
            AsyncComparison {
                tasks: r.qd,
                iops: r.iops,
                vs_tokio_fs: find(tfs_profile, Strategy::PoolTokioFs, r.qd).map(|x| r.iops / x),
                vs_spawn_blocking: median_of(sb, Strategy::PoolBlocking),
                vs_spawn_blocking_spread: spread_of(sb),
                vs_sync_batch: median_of(batch, Strategy::Uring),
                vs_sync_batch_spread: spread_of(batch),
                cpu_vs_sync_batch: cpu.map(|x| x.median),
                cpu_vs_sync_batch_spread: spread_of(cpu),
                pread_loop_cpu_vs_sync_batch: ceiling.map(|x| x.median),
                pread_loop_cpu_vs_sync_batch_spread: spread_of(ceiling),
            }
        })
        .collect()
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// The human-readable table.
pub fn table(rows: &[Row], summary: &[Summary], profiles: &[Profile]) -> String {
    let mut s = String::new();
    for &p in profiles {
        let _ = writeln!(s, "\n{p}: {}", p.describe());
        let _ = writeln!(
            s,
            "  {:<14} {:>4} {:>4} {:<19} {:>10} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7}",
            "strategy",
            "qd",
            "thr",
            "served by",
            "IOPS",
            "MiB/s",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "cpu us/op",
            "csw/op",
            "vs fio"
        );
        for r in rows.iter().filter(|r| r.profile == p) {
            let csw = r
                .ctx_switches
                .zip(r.ops)
                .map(|(c, o)| c as f64 / o.max(1) as f64);
            let _ = writeln!(
                s,
                "  {:<14} {:>4} {:>4} {:<19} {:>10.0} {:>9.1} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7}",
                r.strategy.name(),
                r.qd,
                r.threads,
                r.backend,
                r.iops,
                r.mib_s,
                opt(r.p50_us, 1),
                opt(r.p99_us, 1),
                opt(r.p999_us, 1),
                opt(r.cpu_us_per_op, 2),
                opt(csw, 3),
                opt(r.vs_fio, 2),
            );
        }
    }
    summary_lines(&mut s, summary);
    s
}

/// ` (min-max)` of a paired ratio's rounds, or nothing without rounds.
fn spread(x: Option<[f64; 2]>) -> String {
    x.map_or_else(String::new, |[lo, hi]| {
        format!(" ({:.3}-{:.3})", truncate3(lo), truncate3(hi))
    })
}

/// The summary under the table: auto against the best strategy, and the
/// async API against its alternatives.
fn summary_lines(s: &mut String, summary: &[Summary]) {
    let _ = writeln!(
        s,
        "\nauto (its best configuration) against the best strategy of this run (target >= 0.95),\nand auto one read at a time against the pread loop (target >= 0.97; on cold data both make\none pread per read and wait on the device, whose own rate moves more than 3% between\nrounds: docs/benchmarks.md, \"Cold auto at one read in flight against the device\");\neach paired per round, median (lowest-highest round), truncated, never rounded up:"
    );
    for x in summary {
        let _ = writeln!(
            s,
            "  {:<7} auto {:>10} best {:>10.0} ({} qd {}) -> {:>5}{:<14} auto qd 1 / sync -> {}{}",
            x.profile.to_string(),
            opt(x.auto_iops, 0),
            x.best_iops,
            x.best_strategy,
            x.best_qd,
            opt(x.auto_vs_best.map(truncate3), 3),
            spread(x.auto_vs_best_spread),
            opt(x.auto_qd1_vs_sync.map(truncate3), 3),
            spread(x.auto_qd1_vs_sync_spread),
        );
    }
    if summary.iter().any(|x| !x.async_api.is_empty()) {
        let _ = writeln!(
            s,
            "\nasync API (tokio multi-thread) against the alternatives at the same concurrency\n(targets: >= 5x tokio::fs, >= 1.5x spawn_blocking, >= 0.9x the batch API, warm by CPU per read:\nthe batch's CPU per read over the async API's; beside it, a pread loop's in the same rounds,\nthe bound of a read that is one system call of its own, as a cached async read is:\ndocs/benchmarks.md, \"The async API's warm reads against the pread loop's bound\";\ndirect is compared with tokio::fs on cold data, as tokio::fs cannot do O_DIRECT;\nspawn_blocking and the batch API paired per round, median (lowest-highest round), truncated):"
        );
        for x in summary {
            for a in &x.async_api {
                let _ = writeln!(
                    s,
                    "  {:<7} {:>4} tasks {:>10.0} IOPS   vs tokio::fs {:>6}   vs spawn_blocking {:>5}{:<14}   vs batch API {:>5}{}",
                    x.profile.to_string(),
                    a.tasks,
                    a.iops,
                    opt(a.vs_tokio_fs.map(truncate3), 3),
                    opt(a.vs_spawn_blocking.map(truncate3), 3),
                    spread(a.vs_spawn_blocking_spread),
                    opt(a.vs_sync_batch.map(truncate3), 3),
                    spread(a.vs_sync_batch_spread),
                );
                if let Some(cpu) = a.cpu_vs_sync_batch {
                    let _ = write!(
                        s,
                        "    by CPU {:.3}{}",
                        truncate3(cpu),
                        spread(a.cpu_vs_sync_batch_spread)
                    );
                    if let Some(bound) = a.pread_loop_cpu_vs_sync_batch {
                        let _ = write!(
                            s,
                            ", a pread loop {:.3}{}",
                            truncate3(bound),
                            spread(a.pread_loop_cpu_vs_sync_batch_spread)
                        );
                    }
                    s.push('\n');
                }
            }
        }
    }
}

/// Cuts a ratio to 3 decimals without rounding up, so that a printed
/// figure never claims a target the measurement missed.
pub(crate) fn truncate3(x: f64) -> f64 {
    (x * 1000.0).floor() / 1000.0
}

/// The rows as CSV, with a header line.
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "profile,strategy,qd,threads,backend,iops,mib_s,p50_us,p99_us,p999_us,cpu_us_per_op,ctx_switches,ops,seconds,resident_before,vs_fio,samples\n",
    );
    let o = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.1},{:.3},{},{},{},{},{},{},{:.3},{},{},{}",
            r.profile,
            r.strategy,
            r.qd,
            r.threads,
            r.backend,
            r.iops,
            r.mib_s,
            o(r.p50_us),
            o(r.p99_us),
            o(r.p999_us),
            o(r.cpu_us_per_op),
            r.ctx_switches.map_or(String::new(), |c| c.to_string()),
            r.ops.map_or(String::new(), |c| c.to_string()),
            r.seconds,
            o(r.resident_before),
            o(r.vs_fio),
            r.samples.map_or(String::new(), |c| c.to_string()),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(strategy: Strategy, qd: usize, iops: f64) -> Row {
        let mut r = Row::fio(Profile::Cold, qd, iops, 1.0);
        r.strategy = strategy;
        r
    }

    fn plan(strategy: Strategy, qd: usize, iops: &[f64]) -> Vec<Row> {
        iops.iter().map(|&x| row(strategy, qd, x)).collect()
    }

    #[test]
    fn auto_is_paired_with_the_best_median_strategy_not_each_rounds_luckiest_run() {
        let rounds = vec![
            plan(Strategy::Auto, 64, &[100.0, 100.0, 100.0]),
            // Best by median (100), paired round by round.
            plan(Strategy::Uring, 64, &[100.0, 100.0, 100.0]),
            // A noisy plan whose single lucky round would win a per-round max.
            plan(Strategy::UringMt, 64, &[120.0, 120.0, 50.0]),
        ];
        // uring-mt has median 120 > 100: it is the best strategy and auto
        // reaches 100/120 of it in the median round.
        let r = paired_ratios(&rounds).auto_vs_best.unwrap();
        assert!((r.median - 100.0 / 120.0).abs() < 1e-9, "{r:?}");
        assert!((r.min - 100.0 / 120.0).abs() < 1e-9, "{r:?}");
        assert!((r.max - 2.0).abs() < 1e-9, "{r:?}");

        let rounds = vec![
            plan(Strategy::Auto, 64, &[100.0, 98.0, 100.0]),
            plan(Strategy::Uring, 64, &[100.0, 100.0, 100.0]),
            plan(Strategy::UringMt, 64, &[130.0, 60.0, 60.0]),
        ];
        // uring (median 100) is best; the 130 outlier does not count.
        let r = paired_ratios(&rounds).auto_vs_best.unwrap();
        assert!((r.median - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r.min - 0.98).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn no_auto_plan_means_no_ratio() {
        let rounds = vec![plan(Strategy::Uring, 64, &[100.0])];
        let r = paired_ratios(&rounds);
        assert_eq!((r.auto_vs_best, r.auto_qd1_vs_sync), (None, None));
    }

    #[test]
    fn the_async_api_is_paired_per_round_with_the_batch_api_and_spawn_blocking_at_its_task_count() {
        let rounds = vec![
            plan(Strategy::Async, 64, &[90.0, 40.0, 100.0]),
            plan(Strategy::Async, 256, &[100.0, 100.0, 100.0]),
            plan(Strategy::Uring, 64, &[100.0, 20.0, 100.0]),
            plan(Strategy::Uring, 256, &[50.0, 200.0, 100.0]),
            plan(Strategy::PoolBlocking, 64, &[45.0, 40.0, 50.0]),
        ];
        let r = paired_ratios(&rounds).async_api;
        let at = |t: usize| r.iter().find(|x| x.tasks == t).copied().unwrap();
        // Rounds 90/100, 40/20, 100/100: median 1.0, where the median
        // rounds alone (90 against 100) give 0.9.
        let b = at(64).vs_sync_batch.unwrap();
        assert_eq!((b.median, b.min, b.max), (1.0, 0.9, 2.0));
        let sb = at(64).vs_spawn_blocking.unwrap();
        assert_eq!((sb.median, sb.min, sb.max), (2.0, 1.0, 2.0));
        let b = at(256).vs_sync_batch.unwrap();
        assert_eq!((b.median, b.min, b.max), (1.0, 0.5, 2.0));
        assert_eq!(at(256).vs_spawn_blocking, None, "no pool-blocking at 256");

        // The summary takes the paired figures and their spread.
        let mut rows: Vec<Row> = rounds.iter().map(|v| v[1].clone()).collect();
        let paired = [(Profile::Cold, paired_ratios(&rounds))];
        let s = summarise(&mut rows, &[Profile::Cold], &paired);
        let a = s[0].async_api.iter().find(|x| x.tasks == 64).unwrap();
        assert_eq!(a.vs_sync_batch, Some(1.0));
        assert_eq!(a.vs_sync_batch_spread, Some([0.9, 2.0]));
        assert_eq!(a.vs_spawn_blocking, Some(2.0));
    }

    #[test]
    fn the_async_api_is_paired_by_cpu_with_the_batch_api_and_beside_it_the_pread_loop() {
        let with_cpu = |st, qd, cpu: &[f64]| -> Vec<Row> {
            cpu.iter()
                .map(|&c| Row {
                    cpu_us_per_op: Some(c),
                    ..row(st, qd, 100.0)
                })
                .collect()
        };
        let mut rounds = vec![
            with_cpu(Strategy::Async, 64, &[2.0, 1.0, 4.0]),
            with_cpu(Strategy::Uring, 64, &[1.8, 1.0, 2.0]),
            with_cpu(Strategy::Sync, 1, &[2.0, 1.25, 2.0]),
        ];
        let r = paired_ratios(&rounds).async_api[0];
        // The batch's CPU over the async API's: 0.9, 1.0, 0.5.
        let c = r.cpu_vs_sync_batch.unwrap();
        assert_eq!((c.median, c.min, c.max), (0.9, 0.5, 1.0));
        // The batch's over the pread loop's: 0.9, 0.8, 1.0.
        let p = r.pread_loop_cpu_vs_sync_batch.unwrap();
        assert_eq!((p.median, p.min, p.max), (0.9, 0.8, 1.0));

        let mut rows: Vec<Row> = rounds.iter().map(|v| v[0].clone()).collect();
        let paired = [(Profile::Cold, paired_ratios(&rounds))];
        let s = summarise(&mut rows, &[Profile::Cold], &paired);
        let a = &s[0].async_api[0];
        assert_eq!(a.cpu_vs_sync_batch, Some(0.9));
        assert_eq!(a.cpu_vs_sync_batch_spread, Some([0.5, 1.0]));
        assert_eq!(a.pread_loop_cpu_vs_sync_batch, Some(0.9));
        let printed = table(&rows, &s, &[Profile::Cold]);
        assert!(
            printed.contains("by CPU 0.900 (0.500-1.000), a pread loop 0.900 (0.800-1.000)"),
            "{printed}"
        );

        // Rounds without a CPU figure give no CPU ratio.
        for r in rounds.iter_mut().flatten() {
            r.cpu_us_per_op = None;
        }
        let r = paired_ratios(&rounds).async_api[0];
        assert_eq!(
            (r.cpu_vs_sync_batch, r.pread_loop_cpu_vs_sync_batch),
            (None, None)
        );
    }

    #[test]
    fn auto_one_at_a_time_is_paired_with_sync_one_at_a_time() {
        let rounds = vec![
            plan(Strategy::Sync, 1, &[100.0, 50.0, 100.0]),
            plan(Strategy::Auto, 1, &[97.0, 50.0, 90.0]),
            plan(Strategy::Auto, 64, &[300.0, 300.0, 300.0]),
        ];
        let r = paired_ratios(&rounds).auto_qd1_vs_sync.unwrap();
        assert_eq!((r.median, r.min, r.max), (0.97, 0.9, 1.0));
    }
}
