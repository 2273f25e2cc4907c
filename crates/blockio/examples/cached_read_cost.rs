//! Reads a cached file at pseudo-random 4 KiB offsets through the async
//! API: 64 tokio tasks on a current-thread runtime, `read_at(...).await`
//! in a loop. Made to be run under `valgrind --tool=callgrind` at two
//! counts of reads: the difference in instructions over the difference
//! in reads is the user-space cost of one cached async read, start-up
//! excluded (`docs/benchmarks.md`, "The async API's cached reads at
//! their first poll").
//!
//! With `pread` as a third argument each task makes its reads as plain
//! `pread`s instead (yielding once every 128, as a task whose reads are
//! served at their first poll does): the same tasks and runtime without
//! blockio's future, against which the async read's own instructions are
//! counted.
//!
//! With `kept` as the third argument the tasks make the async reads, but
//! first one `read_at` of an idle pipe is started on the same engine and
//! dropped (the pipe left open): the read is kept for the pipe's next
//! read, which sets the process-wide flag that has every read ask its own
//! file whether it keeps one (`docs/benchmarks.md`, "A cached read once
//! some pipe read in the process has been kept").
//!
//! ```sh
//! cargo run --release --features tokio --example cached_read_cost -- FILE READS [async|pread|kept]
//! ```

use std::sync::Arc;

use blockio::aio::{AsyncEngine, AsyncFile};

/// Tasks reading at once.
const TASKS: u64 = 64;
/// Bytes per read.
const BLOCK: u64 = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(path), Some(reads)) = (args.next(), args.next()) else {
        return Err("usage: cached_read_cost FILE READS [async|pread|kept]".into());
    };
    let (plain, kept) = match args.next().as_ref().and_then(|m| m.to_str()) {
        None | Some("async") => (false, false),
        Some("pread") => (true, false),
        Some("kept") => (false, true),
        Some(other) => return Err(format!("mode {other:?}: expected async, pread or kept").into()),
    };
    let reads: u64 = reads
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or("READS: expected a whole number of reads")?;
    let blocks = std::fs::metadata(&path)?.len() / BLOCK;
    if blocks == 0 {
        return Err(format!("{}: smaller than one 4 KiB block", path.to_string_lossy()).into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = rt.block_on(async {
        let engine = AsyncEngine::builder().queue_depth(TASKS as usize).build()?;
        let file = Arc::new(AsyncFile::open(&engine, &path)?);
        if kept {
            keep_a_pipe_read(&engine)?;
        }
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let count = reads / TASKS;
                if plain {
                    tokio::spawn(pread_task(file.clone(), t, count, blocks))
                } else {
                    tokio::spawn(read_task(file.clone(), t, count, blocks))
                }
            })
            .collect();
        let mut bytes = 0;
        for t in tasks {
            bytes += t.await??;
        }
        Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(bytes)
    });
    println!("{} bytes read", served.map_err(|e| e.to_string())?);
    Ok(())
}

/// Starts a `read_at` of an empty pipe on `engine` and drops it: the
/// pipe keeps it for its next read. The pipe is left open (both ends
/// leaked) to the end of the process, and nothing of it is held by the
/// caller, so the `async` mode's code is the same around its reads.
#[inline(never)]
fn keep_a_pipe_read(engine: &AsyncEngine) -> std::io::Result<()> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the live array of two.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and open, each owned by one `File`.
    let (r, w) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    let pipe = AsyncFile::from_file(engine, r);
    // A `Box<[u8]>`, not the `Vec<u8>` of the timed reads: their code
    // (one instance of each generic function, inlined into the read loop)
    // stays as in the `async` mode.
    let mut read = pipe.read_at(vec![0u8; 16].into_boxed_slice(), 0);
    read.start();
    drop(read);
    std::mem::forget((pipe, w));
    Ok(())
}

/// Reads `count` blocks of `blocks` at offsets from a generator seeded
/// with `seed`: how many bytes it read.
async fn read_task(
    file: Arc<AsyncFile>,
    seed: u64,
    count: u64,
    blocks: u64,
) -> std::io::Result<u64> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut bytes = 0;
    for _ in 0..count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let (res, b) = file.read_at(buf, (state % blocks) * BLOCK).await;
        buf = b;
        bytes += res? as u64;
    }
    Ok(bytes)
}

/// [`read_task`] with each read a plain `pread` made in the task, and a
/// yield every 128 reads (as blockio's budget of reads served inline in a
/// row makes a task yield).
async fn pread_task(
    file: Arc<AsyncFile>,
    seed: u64,
    count: u64,
    blocks: u64,
) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut bytes = 0;
    for i in 0..count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes += file.file().read_at(&mut buf, (state % blocks) * BLOCK)? as u64;
        if i % 128 == 127 {
            tokio::task::yield_now().await;
        }
    }
    Ok(bytes)
}
