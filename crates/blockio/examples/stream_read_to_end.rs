//! What streaming a whole file through tokio's `read_to_end` costs:
//! `readers` tasks each read the same 64 MiB file to its end through
//! `blockio::aio::AsyncFile` (on `AsyncEngine::current()`) or through
//! `tokio::fs::File`, on a multi-thread runtime of 2 workers. `cold`
//! drops the file's cached pages (`posix_fadvise(DONTNEED)`) first; `warm`
//! reads it once before the clock starts. Prints one line: the stack, the
//! wall time and the process's CPU time (user + system, every thread).
//! Rounds are alternated by the caller (see `docs/benchmarks.md`).
//!
//! ```text
//! cargo build --release -p blockio --features tokio --example stream_read_to_end
//! target/release/examples/stream_read_to_end <bio|tok> <readers> <warm|cold> [path]
//! ```

use std::os::fd::AsRawFd;
use std::time::Instant;

use tokio::io::AsyncReadExt;

/// The size of the file the readers read.
const SIZE: usize = 64 << 20;

/// The process's CPU time so far (user and system), in seconds.
fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes one `rusage` through a live pointer, and it
    // is read only once the call said it did.
    let ru = unsafe {
        let rc = libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
        ru.assume_init()
    };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let stack = args.get(1).cloned().unwrap_or_else(|| "bio".into());
    let readers: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(8);
    let cold = args.get(3).map(String::as_str) == Some("cold");
    let path = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| "/tmp/stream_read_to_end.data".into());
    if std::fs::metadata(&path).map(|m| m.len() as usize).ok() != Some(SIZE) {
        let data: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, data)?;
    }
    let f = std::fs::File::open(&path)?;
    if cold {
        f.sync_all()?;
        // SAFETY: advice on a live descriptor; it changes no memory.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    } else {
        std::io::copy(&mut &f, &mut std::io::sink())?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (wall, cpu) = rt.block_on(async move {
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..readers)
            .map(|_| {
                let (stack, path) = (stack.clone(), path.clone());
                tokio::spawn(async move {
                    let mut v = Vec::new();
                    if stack == "bio" {
                        let engine = blockio::aio::AsyncEngine::current()?;
                        let mut f = blockio::aio::AsyncFile::open(&engine, &path)?;
                        f.read_to_end(&mut v).await?;
                    } else {
                        let mut f = tokio::fs::File::open(&path).await?;
                        f.read_to_end(&mut v).await?;
                    }
                    assert_eq!(v.len(), SIZE);
                    assert!(v
                        .iter()
                        .step_by(4099)
                        .enumerate()
                        .all(|(k, &b)| b == ((k * 4099) % 251) as u8));
                    std::io::Result::Ok(())
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("reader task")?;
        }
        std::io::Result::Ok((t0.elapsed().as_secs_f64(), cpu_seconds() - cpu0))
    })?;
    println!(
        "{} readers={readers} {} wall_ms={:.0} cpu_ms={:.0}",
        args.get(1).map(String::as_str).unwrap_or("bio"),
        if cold { "cold" } else { "warm" },
        wall * 1e3,
        cpu * 1e3
    );
    Ok(())
}
