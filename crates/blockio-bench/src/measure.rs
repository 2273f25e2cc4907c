//! What a run measured: operation counts, latency percentiles, CPU time and
//! context switches.

use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;

/// The median of `values`: the middle value, or the mean of the middle two
/// for an even count; NaN for none. Every benchmark reports this one.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Per-thread tally of completed operations and their latencies.
pub struct Recorder {
    hist: Histogram<u64>,
    /// Operations completed.
    pub ops: u64,
    /// Bytes read.
    pub bytes: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty tally (latencies from 1 ns to 100 s, 3 significant digits).
    pub fn new() -> Recorder {
        Recorder {
            hist: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds"),
            ops: 0,
            bytes: 0,
        }
    }

    /// Records `n` operations of `bytes` bytes in all, each with latency
    /// `latency` (for a batch: the batch's round trip).
    pub fn record(&mut self, latency: Duration, n: u64, bytes: u64) {
        let ns = (latency.as_nanos() as u64).clamp(1, 100_000_000_000);
        let _ = self.hist.record_n(ns, n);
        self.ops += n;
        self.bytes += bytes;
    }

    /// Adds another tally into this one.
    pub fn merge(&mut self, other: &Recorder) {
        let _ = self.hist.add(&other.hist);
        self.ops += other.ops;
        self.bytes += other.bytes;
    }
}

/// CPU time and context switches of this process so far.
#[derive(Debug, Clone, Copy)]
struct Usage {
    cpu: Duration,
    switches: u64,
}

fn usage() -> Usage {
    // SAFETY: getrusage writes into the struct it is given, nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
    }
}

/// The outcome of one timed run.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Operations completed.
    pub ops: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Wall time from start until the last worker finished.
    pub elapsed: Duration,
    /// Median latency, microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub p99_us: f64,
    /// 99.9th percentile latency, microseconds.
    pub p999_us: f64,
    /// User + system CPU time of the whole process during the run.
    pub cpu: Duration,
    /// Voluntary + involuntary context switches during the run.
    pub switches: u64,
}

impl Measured {
    /// Operations per second.
    pub fn iops(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// MiB per second.
    pub fn mib_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `work` with a deadline `seconds` from now and measures it. `work`
/// does its setup before calling this, so that only the reads are timed.
pub fn timed(
    seconds: f64,
    work: impl FnOnce(Instant) -> Result<Vec<Recorder>>,
) -> Result<Measured> {
    let before = usage();
    let start = Instant::now();
    let recorders = work(start + Duration::from_secs_f64(seconds))?;
    let elapsed = start.elapsed();
    let after = usage();
    let mut all = Recorder::new();
    for r in &recorders {
        all.merge(r);
    }
    let q = |p: f64| all.hist.value_at_quantile(p) as f64 / 1000.0;
    Ok(Measured {
        ops: all.ops,
        bytes: all.bytes,
        elapsed,
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
        cpu: after.cpu.saturating_sub(before.cpu),
        switches: after.switches.saturating_sub(before.switches),
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
