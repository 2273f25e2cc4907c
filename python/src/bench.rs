//! A benchmark baseline: the Rust engine's own batch loop.

use std::os::fd::RawFd;

use blockio::{AlignedBuf, Engine, Op, RawTarget};
use pyo3::prelude::*;

use crate::*;

/// Random 4 KiB reads with the Rust engine's batch API for `seconds`, as
/// a baseline in the Python benchmark's own run; returns IOPS.
#[pyfunction]
#[pyo3(signature = (fd, file_size, block, in_flight, seconds))]
pub(crate) fn bench_engine(
    py: Python<'_>,
    fd: RawFd,
    file_size: u64,
    block: usize,
    in_flight: usize,
    seconds: f64,
) -> PyResult<f64> {
    crate::gil::detach(py, || {
        let engine = Engine::builder()
            .queue_depth(in_flight)
            .max_batch(in_flight as u32)
            .build()?;
        let target = RawTarget(fd);
        let mut bufs: Vec<AlignedBuf> = (0..in_flight)
            .map(|_| AlignedBuf::new(block, 4096))
            .collect();
        let blocks = (file_size / block as u64).max(1);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let start = std::time::Instant::now();
        let mut done = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let mut ops: Vec<Op<'_>> = bufs
                .iter_mut()
                .map(|b| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    Op::read(&target, (x % blocks) * block as u64, &mut b[..])
                })
                .collect();
            for r in engine.submit(&mut ops)? {
                r?;
            }
            done += in_flight as u64;
        }
        Ok(done as f64 / start.elapsed().as_secs_f64())
    })
    .map_err(io_err)
}
