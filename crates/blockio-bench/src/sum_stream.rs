//! `blockio-bench read --sum`: the streaming workload the OCaml Async study
//! calls "checksum". Stream a large file in blocks, hashing (BLAKE3) as it goes, page
//! cache evicted first; the async API against tokio::fs.

use std::collections::VecDeque;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use blockio::aio::{AsyncEngine, AsyncFile, OpFuture};
use blockio::AlignedBuf;
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::cache;

/// One streaming run.
#[derive(Debug, Clone, Serialize)]
pub struct SumRow {
    /// `async` (blockio's async API) or `tokio-fs`.
    pub strategy: &'static str,
    /// Bytes per read.
    pub block: usize,
    /// Reads kept in flight (1 for tokio::fs: one read at a time).
    pub depth: usize,
    /// Read with O_DIRECT (never for tokio::fs, which cannot).
    pub o_direct: bool,
    /// MiB per second, hashing included.
    pub mib_s: f64,
    /// Wall time.
    pub seconds: f64,
    /// Voluntary context switches of the process (getrusage).
    pub voluntary_csw: u64,
    /// Involuntary context switches of the process.
    pub involuntary_csw: u64,
    /// BLAKE3 of the file, hex.
    pub blake3: String,
}

/// Tells the kernel the file is read sequentially (larger readahead). Both
/// contenders get the same hint.
fn sequential_hint(f: &impl std::os::fd::AsRawFd) {
    // SAFETY: fadvise on an open descriptor has no memory effects.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

fn switches() -> (u64, u64) {
    // SAFETY: getrusage writes into the struct it is given, nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
}

/// Streams `path` through the async API: `depth` reads of `block` bytes in
/// flight ahead, hashed in file order as they complete.
async fn stream_async(
    file: &AsyncFile,
    len: u64,
    block: usize,
    depth: usize,
) -> Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let mut ahead: VecDeque<(u64, OpFuture<AlignedBuf>)> = VecDeque::new();
    let mut spare: Vec<AlignedBuf> = Vec::new();
    let mut next = 0u64;
    loop {
        while ahead.len() < depth && next < len {
            let buf = spare.pop().unwrap_or_else(|| AlignedBuf::new(block, 4096));
            let mut f = file.read_at(buf, next);
            f.start();
            ahead.push_back((next, f));
            next += block as u64;
        }
        let Some((off, f)) = ahead.pop_front() else {
            break;
        };
        let (res, buf) = f.await;
        let n = res.with_context(|| format!("async read at offset {off}"))?;
        let want = (len - off).min(block as u64) as usize;
        if n != want {
            bail!("async read at offset {off}: {n} bytes, expected {want}");
        }
        hasher.update(&buf[..n]);
        spare.push(buf);
    }
    Ok(hasher.finalize())
}

/// Streams `path` with tokio::fs, one read of `block` bytes at a time.
async fn stream_tokio(path: &Path, block: usize) -> Result<blake3::Hash> {
    let mut f = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("open {}", path.display()))?;
    f.set_max_buf_size(block.max(16 << 10));
    sequential_hint(&f);
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; block];
    loop {
        let n = f.read(&mut buf).await.context("tokio::fs read")?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

/// Reads in flight for `block`-byte reads when not given: 64 MiB worth,
/// at least 16 and at most 256.
pub fn default_depth(block: usize) -> usize {
    ((64 << 20) / block.max(1)).clamp(16, 256)
}

/// Runs both contenders for every block size, evicting the file before
/// each run (`depth` None: [`default_depth`]).
/// `rounds` rounds, the two contenders alternating which goes first; the
/// median round of each (strategy, block) is reported.
pub fn run(
    path: &Path,
    blocks: &[usize],
    depth: Option<usize>,
    direct: bool,
    rounds: usize,
) -> Result<Vec<SumRow>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    let plain = File::open(path).with_context(|| format!("open {}", path.display()))?;
    let len = plain.metadata()?.len();
    let engine = AsyncEngine::new()?;
    let opts = blockio::aio::AsyncOpenOptions::new().direct(direct);
    let file = Arc::new(AsyncFile::open_with(&engine, path, &opts)?);
    sequential_hint(file.file());
    let mut all = Vec::new();
    for round in 0..rounds.max(1) {
        for &block in blocks {
            let depth = depth.unwrap_or_else(|| default_depth(block));
            let order = if round % 2 == 0 {
                ["tokio-fs", "async"]
            } else {
                ["async", "tokio-fs"]
            };
            for strategy in order {
                cache::evict(&plain)?;
                let (v0, i0) = switches();
                let start = Instant::now();
                let hash = rt.block_on(async {
                    if strategy == "async" {
                        stream_async(&file, len, block, depth).await
                    } else {
                        stream_tokio(path, block).await
                    }
                })?;
                let el: Duration = start.elapsed();
                let (v1, i1) = switches();
                all.push(SumRow {
                    strategy,
                    block,
                    depth: if strategy == "async" { depth } else { 1 },
                    o_direct: direct && strategy == "async",
                    mib_s: len as f64 / (1 << 20) as f64 / el.as_secs_f64(),
                    seconds: el.as_secs_f64(),
                    voluntary_csw: v1 - v0,
                    involuntary_csw: i1 - i0,
                    blake3: hash.to_hex().to_string(),
                });
            }
        }
    }
    let mut rows = Vec::new();
    for &block in blocks {
        for strategy in ["tokio-fs", "async"] {
            let mut runs: Vec<&SumRow> = all
                .iter()
                .filter(|r: &&SumRow| r.block == block && r.strategy == strategy)
                .collect();
            runs.sort_by(|a, b| a.mib_s.total_cmp(&b.mib_s));
            rows.push(runs[runs.len() / 2].clone());
        }
    }
    if let Some(bad) = all.iter().find(|r| r.blake3 != all[0].blake3) {
        bail!(
            "{} with {}-byte blocks hashed {} but {} hashed {}",
            bad.strategy,
            bad.block,
            bad.blake3,
            all[0].strategy,
            all[0].blake3
        );
    }
    Ok(rows)
}

/// The table.
pub fn table(rows: &[SumRow], file_mib: u64) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "sum: stream a {file_mib} MiB file (page cache evicted first), BLAKE3 as it goes\n  {:<16} {:>8} {:>6} {:>9} {:>8} {:>10} {:>10} {:>9}\n",
        "strategy", "block", "depth", "MiB/s", "seconds", "vol csw", "invol csw", "vs tokio"
    );
    for r in rows {
        let tokio = rows
            .iter()
            .find(|t| t.block == r.block && t.strategy == "tokio-fs")
            .map(|t| r.mib_s / t.mib_s);
        let _ = writeln!(
            s,
            "  {:<16} {:>8} {:>6} {:>9.1} {:>8.2} {:>10} {:>10} {:>9}",
            if r.o_direct {
                format!("{} O_DIRECT", r.strategy)
            } else {
                r.strategy.to_string()
            },
            r.block,
            r.depth,
            r.mib_s,
            r.seconds,
            r.voluntary_csw,
            r.involuntary_csw,
            // Truncated, never rounded up.
            tokio.map_or("-".into(), |x| format!(
                "{:.2}",
                (x * 100.0).floor() / 100.0
            )),
        );
    }
    let _ = writeln!(
        s,
        "  blake3 {}",
        rows.first().map_or("-", |r| r.blake3.as_str())
    );
    s
}
