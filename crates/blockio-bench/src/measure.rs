//! What a run measured: operation counts, latency percentiles, CPU time and
//! context switches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;

use crate::data::Rng;

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

/// Reads per timed one while reads are quick: every strategy reads the
/// clock around a read (or a batch of reads) picked at random with
/// probability one in this many per read, and records its latency for
/// the reads it stands for. Reading the clock twice and recording a
/// latency costs a cached 4 KiB read about a tenth of its CPU; a batch
/// timed once per 64 reads did not pay it, and so the strategies that
/// read one block at a time were measured more than the batch.
pub const SAMPLE_ONE_IN: u64 = 64;

/// A read (or batch) that took longer than this has every read (or batch)
/// after it timed until one is quicker: then timing costs under half a
/// percent of the time, and a run of slow reads (a cold profile) keeps a
/// latency for each.
pub const SLOW: Duration = Duration::from_micros(16);

/// Timed samples needed beyond a percentile for it to be reported: a
/// percentile `q` of a run with fewer than `TAIL_SAMPLES / (1 - q)` timed
/// samples rests on a handful of reads (on a warm profile, where one read
/// in 64 is timed, p99.9 of a 0.3 s run had about two) and is left out.
pub const TAIL_SAMPLES: u64 = 10;

/// Per-thread tally of completed operations and a sample of their
/// latencies.
pub struct Recorder {
    hist: Histogram<u64>,
    /// Latencies recorded (each may stand for several reads).
    samples: u64,
    /// Operations completed.
    pub ops: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Picks the reads to time.
    pick: Rng,
    /// Whether the last timed read or batch took longer than [`SLOW`].
    slow: bool,
}

/// A read or batch being timed: when it started, and how many reads its
/// latency stands for in the tally.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    t0: Instant,
    weight: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty tally (latencies from 1 ns to 100 s, 3 significant digits).
    pub fn new() -> Recorder {
        Recorder::seeded(0)
    }

    /// An empty tally whose choice of reads to time follows `seed`
    /// (one per worker, so that workers do not time in step).
    pub fn seeded(seed: u64) -> Recorder {
        Recorder {
            hist: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds"),
            samples: 0,
            ops: 0,
            bytes: 0,
            pick: Rng::new(0x5851_f42d_4c95_7f2d ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            slow: false,
        }
    }

    /// Whether to time the next read, or batch of `n` reads, about to
    /// start: `Some` (the clock read now) for one read in
    /// [`SAMPLE_ONE_IN`] picked at random (a batch: with probability `n`
    /// in that many, or always if larger), and for every one while the
    /// last timed one was [slow](SLOW). The same rule for every strategy,
    /// so each pays the same measurement per read; the first read or batch
    /// of a worker is always timed.
    #[inline]
    pub fn start(&mut self, n: u64) -> Option<Timing> {
        let n = n.max(1);
        let weight = if self.slow || self.ops == 0 || n >= SAMPLE_ONE_IN {
            n
        } else if self.pick.next_u64() % SAMPLE_ONE_IN < n {
            // Picked with probability n / SAMPLE_ONE_IN: stands for
            // SAMPLE_ONE_IN reads, so the tally's weights stay unbiased.
            SAMPLE_ONE_IN
        } else {
            return None;
        };
        Some(Timing {
            t0: Instant::now(),
            weight,
        })
    }

    /// Counts `n` operations of `bytes` bytes in all that started with
    /// `timing` (from [`start`](Self::start)), recording their latency if
    /// timed (for a batch: the batch's round trip).
    #[inline]
    pub fn done(&mut self, timing: Option<Timing>, n: u64, bytes: u64) {
        let latency = timing.map(|t| t.t0.elapsed());
        self.done_after(timing, latency, n, bytes);
    }

    /// [`done`](Self::done) with the latency given (measured by `done`;
    /// given by tests, so that they do not depend on how the machine
    /// schedules them): recorded if `timing` is `Some`.
    #[inline]
    fn done_after(
        &mut self,
        timing: Option<Timing>,
        latency: Option<Duration>,
        n: u64,
        bytes: u64,
    ) {
        if let (Some(t), Some(latency)) = (timing, latency) {
            self.slow = latency > SLOW;
            let ns = (latency.as_nanos() as u64).clamp(1, 100_000_000_000);
            let _ = self.hist.record_n(ns, t.weight);
            self.samples += 1;
        }
        self.ops += n;
        self.bytes += bytes;
    }

    /// Adds another tally into this one.
    pub fn merge(&mut self, other: &Recorder) {
        let _ = self.hist.add(&other.hist);
        self.samples += other.samples;
        self.ops += other.ops;
        self.bytes += other.bytes;
    }

    /// The latency at quantile `q` in µs, or `None` when fewer than
    /// [`TAIL_SAMPLES`] timed samples lie beyond it on average (too few
    /// to stand for the reads they are weighted up to).
    fn quantile_us(&self, q: f64) -> Option<f64> {
        let backing = self.samples as f64 * (1.0 - q);
        (self.samples > 0 && backing >= TAIL_SAMPLES as f64 - 1e-6)
            .then(|| self.hist.value_at_quantile(q) as f64 / 1000.0)
    }
}

/// When a run ends: set by a timer thread at its deadline, so that a
/// worker asks with one load instead of reading the clock at every read.
#[derive(Debug, Clone)]
pub struct Deadline(Arc<AtomicBool>);

impl Deadline {
    /// Whether the deadline has passed.
    #[inline]
    pub fn passed(&self) -> bool {
        self.0.load(Ordering::Relaxed)
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
    /// Latencies recorded (timed reads or batches; each stands for
    /// one or more reads).
    pub samples: u64,
    /// Median latency, microseconds (`None`: see [`TAIL_SAMPLES`]).
    pub p50_us: Option<f64>,
    /// 99th percentile latency, microseconds (`None` below 1,000
    /// samples).
    pub p99_us: Option<f64>,
    /// 99.9th percentile latency, microseconds (`None` below 10,000
    /// samples).
    pub p999_us: Option<f64>,
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

/// Runs `work` with a [`Deadline`] `seconds` from now and measures it.
/// `work` does its setup before calling this, so that only the reads are
/// timed.
pub fn timed(
    seconds: f64,
    work: impl FnOnce(Deadline) -> Result<Vec<Recorder>>,
) -> Result<Measured> {
    let deadline = Deadline(Arc::new(AtomicBool::new(false)));
    let finished = AtomicBool::new(false);
    let before = usage();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let (recorders, elapsed) = std::thread::scope(|s| {
        let timer = s.spawn(|| {
            // Woken early only when `work` has returned (an error).
            while !finished.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= end {
                    deadline.0.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::park_timeout(end - now);
            }
        });
        let recorders = work(deadline.clone());
        let elapsed = start.elapsed();
        finished.store(true, Ordering::Release);
        timer.thread().unpark();
        (recorders, elapsed)
    });
    let recorders = recorders?;
    let after = usage();
    let mut all = Recorder::new();
    for r in &recorders {
        all.merge(r);
    }
    Ok(Measured {
        ops: all.ops,
        bytes: all.bytes,
        elapsed,
        samples: all.samples,
        p50_us: all.quantile_us(0.5),
        p99_us: all.quantile_us(0.99),
        p999_us: all.quantile_us(0.999),
        cpu: after.cpu.saturating_sub(before.cpu),
        switches: after.switches.saturating_sub(before.switches),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{median, Recorder, SAMPLE_ONE_IN};

    /// A quick read's latency, well under [`super::SLOW`].
    const QUICK: Option<Duration> = Some(Duration::from_micros(1));
    /// A slow read's latency.
    const SLOW_READ: Option<Duration> = Some(Duration::from_millis(1));

    #[test]
    fn quick_reads_are_timed_one_in_sample_one_in_and_weighted_back() {
        let mut rec = Recorder::seeded(3);
        let reads = 64 * 1000;
        let mut timed = 0;
        for _ in 0..reads {
            let t = rec.start(1);
            timed += u64::from(t.is_some());
            rec.done_after(t, QUICK, 1, 4096);
        }
        assert_eq!(rec.ops, reads);
        assert_eq!(rec.bytes, reads * 4096);
        assert_eq!(rec.samples, timed);
        // About one in 64 (1,000 expected), the first read always.
        assert!((700..1300).contains(&timed), "{timed} reads timed");
        // Each timed read stands for 64 (the first for itself).
        assert_eq!(rec.hist.len(), (timed - 1) * SAMPLE_ONE_IN + 1);
    }

    #[test]
    fn every_read_after_a_slow_one_is_timed_until_one_is_quick() {
        let mut rec = Recorder::seeded(7);
        let first = rec.start(1);
        rec.done_after(first, QUICK, 1, 0);
        let mut timed = 0;
        while timed == 0 {
            let t = rec.start(1);
            timed += u64::from(t.is_some());
            rec.done_after(t, SLOW_READ, 1, 0);
        }
        for _ in 0..10 {
            let t = rec.start(1);
            assert!(t.is_some(), "a read after a slow one is timed");
            assert_eq!(t.unwrap().weight, 1, "and stands for itself");
            rec.done_after(t, SLOW_READ, 1, 0);
        }
        // Quick again: back to one in 64.
        let quick = rec.start(1);
        assert!(quick.is_some());
        rec.done_after(quick, QUICK, 1, 0);
        let timed = (0..6400).filter(|_| rec.start(1).is_some()).count();
        assert!(timed < 200, "{timed} of 6400 timed");
    }

    #[test]
    fn batches_of_sample_one_in_or_more_are_all_timed() {
        let mut rec = Recorder::seeded(5);
        for _ in 0..100 {
            let t = rec.start(256);
            assert!(t.is_some());
            rec.done_after(t, QUICK, 256, 0);
        }
        assert_eq!(rec.hist.len(), 100 * 256);
        assert_eq!(rec.samples, 100);
    }

    #[test]
    fn a_percentile_with_too_few_samples_beyond_it_is_left_out() {
        let mut rec = Recorder::seeded(9);
        let record = |rec: &mut Recorder, n: u64| {
            for _ in 0..n {
                let t = rec.start(SAMPLE_ONE_IN);
                rec.done_after(t, QUICK, SAMPLE_ONE_IN, 0);
            }
        };
        record(&mut rec, 999);
        assert_eq!(rec.samples, 999);
        assert_eq!(rec.quantile_us(0.5), Some(1.0));
        assert_eq!(rec.quantile_us(0.99), None);
        record(&mut rec, 1);
        assert_eq!(rec.quantile_us(0.99), Some(1.0));
        assert_eq!(rec.quantile_us(0.999), None);
        record(&mut rec, 9000);
        assert_eq!(rec.quantile_us(0.999), Some(1.0));
        assert_eq!(Recorder::new().quantile_us(0.5), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
