//! The async API: every operation against pread on three executors,
//! cancellation under load, streaming, and shutdown with work in flight.
//!
//! Runs on io_uring and, in `.ci/run`'s second pass, on the thread-pool
//! fallback (`BLOCKIO_BACKEND=threads`).

use std::future::Future;
use std::io::SeekFrom;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use blockio::aio::{
    AsyncEngine, AsyncFile, AsyncOpenOptions, BatchOp, CallerDriving, Driving, OpFuture, Submit,
    Withdrawal,
};
use blockio::{AlignedBuf, BufferPool, PooledBuf, ReadPath};
use futures::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

mod common;
use common::{data_file, Rng};

/// tokio's multi-thread runtime with two workers.
fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

/// Runs the same async body on tokio (multi-thread), smol and block_on.
fn on_every_executor<F, Fut>(body: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let rt = tokio_runtime();
    rt.block_on(async { tokio::spawn(body()).await.unwrap() });
    smol::block_on(smol::spawn(body()));
    futures::executor::block_on(body());
}

#[test]
fn backend_follows_environment() {
    let e = AsyncEngine::new().unwrap();
    match std::env::var("BLOCKIO_BACKEND").as_deref() {
        Ok("threads") => assert_eq!(e.backend(), blockio::Backend::ThreadPool),
        _ => assert_eq!(
            e.backend(),
            blockio::Backend::IoUring,
            "{:?}",
            e.fallback_reason()
        ),
    }
}

/// A ring-only option together with the builder's own choice of the thread
/// pool is refused, naming the option; a caller-driven engine without one
/// builds on the pool.
#[test]
fn ring_only_driving_options_with_the_thread_pool_chosen_are_refused() {
    use blockio::BackendChoice;
    let pool = || AsyncEngine::builder().backend(BackendChoice::ThreadPool);
    let refused = |driving: CallerDriving, option: &str| {
        let e = pool()
            .driving(Driving::Caller(driving))
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(option), "{e}");
        assert!(e.to_string().contains("ThreadPool"), "{e}");
    };
    refused(
        CallerDriving::new().submit(Submit::PerRound),
        "Submit::PerRound",
    );
    // Refused before the descriptor is looked at: any number will do.
    refused(
        CallerDriving::new().completion_eventfd(-1),
        "CallerDriving::completion_eventfd",
    );
    let e = pool()
        .driving(Driving::Caller(CallerDriving::new()))
        .build()
        .unwrap();
    assert_eq!(e.backend(), blockio::Backend::ThreadPool);
    assert!(e.poll_fd().is_none());
}

/// Where the pool comes at run time and not from the builder, a ring-only
/// option is ignored and the fallback reason says so; on io_uring it is
/// used and there is no fallback reason.
#[test]
fn ring_only_driving_options_on_a_run_time_fallback_are_named_in_its_reason() {
    let e = AsyncEngine::builder()
        .driving(Driving::Caller(
            CallerDriving::new().submit(Submit::PerRound),
        ))
        .build()
        .unwrap();
    match std::env::var("BLOCKIO_BACKEND").as_deref() {
        Ok("threads") => {
            let reason = e.fallback_reason().expect("a fallback has a reason");
            assert!(reason.contains("Submit::PerRound ignored"), "{reason}");
        }
        _ => {
            assert_eq!(e.backend(), blockio::Backend::IoUring);
            assert_eq!(e.fallback_reason(), None);
            assert!(e.poll_fd().is_some());
        }
    }
}

/// `Engine` and `AsyncEngine` builders mean the same by the same names, and
/// explain a fallback in the same words.
#[test]
fn both_builders_mean_the_same_by_their_settings() {
    use blockio::{BackendChoice, Engine};
    for (depth, threads, want) in [(8, 0, 8), (300, 0, 64), (8, 3, 3)] {
        let e = Engine::builder()
            .queue_depth(depth)
            .fallback_threads(threads)
            .backend(BackendChoice::ThreadPool)
            .build()
            .unwrap();
        let a = AsyncEngine::builder()
            .queue_depth(depth)
            .fallback_threads(threads)
            .backend(BackendChoice::ThreadPool)
            .build()
            .unwrap();
        assert_eq!((e.fallback_threads(), a.fallback_threads()), (want, want));
        assert_eq!(e.fallback_reason(), a.fallback_reason());
        assert!(e.fallback_reason().unwrap().contains("requested"));
    }
}

/// Both builders take one `queue_depth` rule: 0 and the ceiling + 1 fail
/// `build` with the argument named, the ceiling builds an engine that works.
#[test]
fn both_builders_refuse_a_queue_depth_outside_one_rule() {
    use blockio::{Engine, Op, MAX_QUEUE_DEPTH};
    for bad in [0, MAX_QUEUE_DEPTH + 1] {
        let want = format!("queue_depth must be 1..={MAX_QUEUE_DEPTH}, got {bad}");
        for err in [
            Engine::builder().queue_depth(bad).build().unwrap_err(),
            AsyncEngine::builder().queue_depth(bad).build().unwrap_err(),
        ] {
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
            assert_eq!(err.to_string(), want);
        }
    }
    let (path, data) = data_file(4096, 5);
    let file = std::fs::File::open(&path).unwrap();
    let e = Engine::builder()
        .queue_depth(MAX_QUEUE_DEPTH)
        .build()
        .unwrap();
    let mut buf = vec![0u8; 100];
    let got = e.submit(&mut [Op::read(&file, 10, &mut buf)]).unwrap();
    assert_eq!(*got[0].as_ref().unwrap(), 100);
    assert_eq!(buf, data[10..110]);
    let a = AsyncEngine::builder()
        .queue_depth(MAX_QUEUE_DEPTH)
        .build()
        .unwrap();
    let f = AsyncFile::open(&a, &*path).unwrap();
    let (res, buf) = futures::executor::block_on(f.read_at(vec![0u8; 100], 10));
    assert_eq!(res.unwrap(), 100);
    assert_eq!(buf, data[10..110]);
}

#[test]
fn positional_operations_match_pread_on_every_executor() {
    let (path, data) = data_file(300_000, 3);
    let data = Arc::new(data);
    let path = Arc::new(path.to_path_buf());
    on_every_executor(|| {
        let (path, data) = (path.clone(), data.clone());
        async move {
            let e = AsyncEngine::new().unwrap();
            let f = AsyncFile::open(&e, &*path).unwrap();
            let mut rng = Rng(7);
            for _ in 0..200 {
                let off = rng.below(data.len() as u64 + 50);
                let len = rng.below(20_000) as usize;
                let (res, buf) = f.read_at(vec![0xAAu8; len], off).await;
                let n = res.unwrap();
                let want =
                    &data[(off as usize).min(data.len())..(off as usize + len).min(data.len())];
                assert_eq!(n, want.len(), "read at {off} of {len}");
                assert_eq!(&buf[..n], want);
            }
            // Vectored read across two buffers.
            let (res, bufs) = f
                .read_vectored_at(vec![vec![0u8; 100], vec![0u8; 5000]], 1234)
                .await;
            assert_eq!(res.unwrap(), 5100);
            assert_eq!(&bufs[0][..], &data[1234..1334]);
            assert_eq!(&bufs[1][..], &data[1334..6334]);
            // Exact reads, and a clear error past the end.
            let (res, buf) = f.read_exact_at(vec![0u8; 4096], 4000).await;
            res.unwrap();
            assert_eq!(&buf[..], &data[4000..8096]);
            let (res, _) = f
                .read_exact_at(vec![0u8; 4096], data.len() as u64 - 10)
                .await;
            let err = res.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
            assert!(
                err.to_string().contains(&format!("offset {}", data.len())),
                "{err}"
            );
        }
    });
}

/// `AsyncFile::fallocate` grows the file, punches a hole that reads as
/// zeroes, and fails with the kernel's errno, naming the range.
#[test]
fn fallocate_grows_punches_and_fails_as_the_system_call_does() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = Arc::new(dir.path().join("f.dat"));
    on_every_executor(|| {
        let path = path.clone();
        async move {
            let e = AsyncEngine::new().unwrap();
            let f = AsyncFile::create(&e, &*path).unwrap();
            f.write_all_at(vec![5u8; 8192], 0).await.0.unwrap();
            f.fallocate(0, 8192, 8192).await.0.unwrap();
            let hole = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            f.fallocate(hole, 0, 4096).await.0.unwrap();
            let (res, buf) = f.read_at(vec![1u8; 20_000], 0).await;
            assert_eq!(res.unwrap(), 16_384);
            assert!(buf[..4096].iter().all(|&b| b == 0));
            assert!(buf[4096..8192].iter().all(|&b| b == 5));
            assert!(buf[8192..16_384].iter().all(|&b| b == 0));
            let err = f.fallocate(0, 0, 0).await.0.unwrap_err();
            assert_eq!(blockio::errno(&err), Some(libc::EINVAL));
            let text = err.to_string();
            assert!(text.contains("fallocate of 0 bytes at offset 0"), "{text}");
        }
    });
}

#[test]
fn writes_vectored_writes_syncs_and_batches_round_trip() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = Arc::new(dir.path().join("w.dat"));
    on_every_executor(|| {
        let path = path.clone();
        async move {
            let e = AsyncEngine::new().unwrap();
            let f = AsyncFile::create(&e, &*path).unwrap();
            let (res, _) = f.write_all_at(vec![1u8; 10_000], 0).await;
            res.unwrap();
            let (res, _) = f
                .write_vectored_at(vec![vec![2u8; 10], vec![3u8; 20]], 100)
                .await;
            assert_eq!(res.unwrap(), 30);
            f.fdatasync().await.0.unwrap();
            f.fsync().await.0.unwrap();
            let ops = vec![
                BatchOp::Write {
                    offset: 20_000,
                    buf: vec![9u8; 4096],
                },
                BatchOp::Read {
                    offset: 95,
                    buf: vec![0u8; 40],
                },
                BatchOp::Fdatasync,
                BatchOp::Read {
                    offset: 50_000,
                    buf: vec![0u8; 8],
                },
            ];
            let out = f.submit(ops).await;
            assert_eq!(out.len(), 4);
            assert_eq!(*out[0].0.as_ref().unwrap(), 4096);
            let read = out[1].1.as_ref().unwrap();
            assert_eq!(&read[..5], &[1u8; 5]);
            assert_eq!(&read[5..15], &[2u8; 10]);
            assert_eq!(&read[15..35], &[3u8; 20]);
            assert_eq!(*out[2].0.as_ref().unwrap(), 0);
            assert!(out[2].1.is_none());
            assert_eq!(*out[3].0.as_ref().unwrap(), 0, "read past the end");
            let on_disk = std::fs::read(&*path).unwrap();
            assert_eq!(on_disk.len(), 20_000 + 4096);
            assert!(on_disk[20_000..].iter().all(|&b| b == 9));
        }
    });
}

#[test]
fn errors_name_the_operation_and_offset() {
    let (path, _) = data_file(4096, 1);
    futures::executor::block_on(async {
        let e = AsyncEngine::new().unwrap();
        let f = AsyncFile::open(&e, &path).unwrap();
        // Writing to a read-only file fails with EBADF for that op only.
        let (res, buf) = f.write_at(vec![1u8; 10], 77).await;
        let err = res.unwrap_err();
        assert_eq!(blockio::errno(&err), Some(libc::EBADF));
        assert!(err.to_string().contains("offset 77"), "{err}");
        assert_eq!(buf.len(), 10, "the buffer comes back");
        // Misaligned direct reads are refused before submission.
        let d = AsyncFile::open_with(&e, &path, &AsyncOpenOptions::new().direct(true)).unwrap();
        let (res, _) = d.read_at(AlignedBuf::new(4096, 4096), 3).await;
        let err = res.unwrap_err();
        assert!(err.to_string().contains("O_DIRECT"), "{err}");
        let (res, buf) = d.read_at(AlignedBuf::new(4096, 4096), 0).await;
        assert_eq!(res.unwrap(), 4096);
        assert_eq!(&buf[..], &std::fs::read(&path).unwrap()[..]);
    });
}

/// Polls a future exactly once, then drops it: cancellation with the
/// operation (most likely) in flight.
struct PollOnce<F>(Option<F>);
impl<F: Future + Unpin> Future for PollOnce<F> {
    type Output = bool;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let mut f = self.0.take().unwrap();
        let done = Pin::new(&mut f).poll(cx).is_ready();
        drop(f);
        Poll::Ready(done)
    }
}

fn wait_for_pool(pool: &BufferPool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while pool.available() != pool.count() {
        assert!(
            Instant::now() < deadline,
            "{} of {} pooled buffers never came back",
            pool.count() - pool.available(),
            pool.count()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn thousands_of_cancellations_under_load_leave_other_data_intact() {
    let (path, data) = data_file(4 << 20, 11);
    let data = Arc::new(data);
    let pool = BufferPool::new(256, 4096, 4096);
    let rt = tokio_runtime();
    // Through the driver: a cached read served at its first poll is never
    // in flight to be cancelled.
    let e = AsyncEngine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let file = Arc::new(AsyncFile::open(&e, &path).unwrap());
    let (mut cancelled, mut checked) = (0u64, 0u64);
    rt.block_on(async {
        let tasks: Vec<_> = (0..64u64)
            .map(|t| {
                let (file, data, pool) = (file.clone(), data.clone(), pool.clone());
                tokio::spawn(async move {
                    let mut rng = Rng(t * 7919 + 1);
                    let (mut cancelled, mut checked) = (0u64, 0u64);
                    for _ in 0..100 {
                        let off = rng.below(data.len() as u64 / 4096) * 4096;
                        let mut buf: PooledBuf = pool.try_get().unwrap_or_else(|| pool.get());
                        buf.fill(0xEE);
                        let fut = file.read_at(buf, off);
                        if rng.below(2) == 0 {
                            // Cancel: poll once, then drop with the read in flight.
                            if !PollOnce(Some(fut)).await {
                                cancelled += 1;
                            }
                        } else {
                            let (res, buf) = fut.await;
                            assert_eq!(res.unwrap(), 4096);
                            assert!(
                                buf[..] == data[off as usize..off as usize + 4096],
                                "data at {off} corrupted"
                            );
                            checked += 1;
                        }
                    }
                    (cancelled, checked)
                })
            })
            .collect();
        for t in tasks {
            let (c, k) = t.await.unwrap();
            cancelled += c;
            checked += k;
        }
    });
    assert!(
        cancelled > 1000,
        "only {cancelled} reads were cancelled in flight"
    );
    assert!(checked > 1000);
    // Every cancelled read's buffer returns to the pool once it completes.
    wait_for_pool(&pool);
}

#[test]
fn shutdown_with_work_in_flight_ends_cleanly() {
    let (path, _) = data_file(2 << 20, 5);
    let pool = BufferPool::new(128, 4096, 4096);
    let rt = tokio_runtime();
    {
        let e = AsyncEngine::new().unwrap();
        let file = Arc::new(AsyncFile::open(&e, &path).unwrap());
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for i in 0..128u64 {
            let (file, pool, reads) = (file.clone(), pool.clone(), reads.clone());
            rt.spawn(async move {
                loop {
                    let buf = pool.get();
                    let (res, _) = file.read_at(buf, (i * 4096) % (2 << 20)).await;
                    res.unwrap();
                    reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        // The tasks are reading, one after another.
        common::wait_until("the tasks' reads complete", || {
            reads.load(std::sync::atomic::Ordering::Relaxed) >= 256
        });
        drop(e);
    }
    // The runtime goes away with every task mid-read: the futures are
    // dropped with their reads in flight.
    rt.shutdown_background();
    wait_for_pool(&pool);
}

#[test]
fn streaming_reads_seeks_and_writes() {
    let (path, data) = data_file(1_000_003, 21);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = dir.path().join("copy.dat");
    futures::executor::block_on(async {
        let e = AsyncEngine::new().unwrap();
        for direct in [false, true] {
            let opts = AsyncOpenOptions::new()
                .direct(direct)
                .block_size(65536)
                .depth(3);
            let mut f = AsyncFile::open_with(&e, &path, &opts).unwrap();
            let mut all = Vec::new();
            f.read_to_end(&mut all).await.unwrap();
            assert!(all == data, "direct={direct}: streamed bytes differ");
            let pos = f.seek(SeekFrom::Start(123_457)).await.unwrap();
            assert_eq!(pos, 123_457);
            let mut part = vec![0u8; 70_000];
            f.read_exact(&mut part).await.unwrap();
            assert!(
                part[..] == data[123_457..193_457],
                "direct={direct}: after seek"
            );
            let end = f.seek(SeekFrom::End(-3)).await.unwrap();
            let mut tail = Vec::new();
            f.read_to_end(&mut tail).await.unwrap();
            assert_eq!(end, data.len() as u64 - 3);
            assert_eq!(&tail[..], &data[data.len() - 3..]);
        }
        // Stream-write in odd-sized pieces, flush, compare.
        let wopts = AsyncOpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .block_size(10_000)
            .depth(2);
        let mut w = AsyncFile::open_with(&e, &out, &wopts).unwrap();
        for chunk in data.chunks(7777) {
            w.write_all(chunk).await.unwrap();
        }
        w.close().await.unwrap();
    });
    let copied = std::fs::read(&out).unwrap();
    assert!(copied == data, "stream-written file differs");
    let f = std::fs::File::open(&out).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(f.read_at(&mut b, data.len() as u64).unwrap(), 0);
}

#[test]
fn futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    let (path, _) = data_file(10, 1);
    let e = AsyncEngine::new().unwrap();
    let f = AsyncFile::open(&e, &path).unwrap();
    is_send(&f.read_at(vec![0u8; 4], 0));
    is_send(&f.read_exact_at(vec![0u8; 4], 0));
    is_send(&f.submit(vec![read_of(4)]));
    is_send(&f);
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_io_traits_stream_read_seek_and_write() {
    let (path, data) = data_file(300_001, 31);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = dir.path().join("t.dat");
    let rt = tokio_runtime();
    rt.block_on(async {
        let e = AsyncEngine::new().unwrap();
        let mut f = AsyncFile::open(&e, &path).unwrap();
        let mut all = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut f, &mut all)
            .await
            .unwrap();
        assert!(all == data);
        let pos = tokio::io::AsyncSeekExt::seek(&mut f, SeekFrom::Start(1000))
            .await
            .unwrap();
        assert_eq!(pos, 1000);
        let mut part = vec![0u8; 5000];
        tokio::io::AsyncReadExt::read_exact(&mut f, &mut part)
            .await
            .unwrap();
        assert_eq!(&part[..], &data[1000..6000]);
        let mut w = AsyncFile::create(&e, &out).unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut w, &data)
            .await
            .unwrap();
        tokio::io::AsyncWriteExt::shutdown(&mut w).await.unwrap();
    });
    assert!(std::fs::read(&out).unwrap() == data);
}

/// A file read through tokio's `AsyncRead` copies only the bytes it
/// reads into the caller's `ReadBuf`, after those already filled: the
/// unfilled rest is neither zeroed nor counted as initialised (tokio's
/// `read_to_end` hands a growing, never-initialised spare capacity to each
/// read, and zeroing it cost a `memset` per read on top of the copy).
#[cfg(feature = "tokio")]
#[test]
fn a_tokio_trait_read_of_a_file_writes_only_the_bytes_it_reads() {
    let (path, data) = data_file(300_001, 37);
    let rt = tokio_runtime();
    rt.block_on(async {
        let e = AsyncEngine::new().unwrap();
        let mut f = AsyncFile::open(&e, &path).unwrap();
        let mut mem = vec![std::mem::MaybeUninit::<u8>::uninit(); 4 << 20];
        let mut buf = tokio::io::ReadBuf::uninit(&mut mem);
        buf.put_slice(b">");
        let mut want = b">".to_vec();
        loop {
            let before = buf.filled().len();
            std::future::poll_fn(|cx| {
                tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut f), cx, &mut buf)
            })
            .await
            .unwrap();
            let got = buf.filled().len() - before;
            if got == 0 {
                break;
            }
            want.extend_from_slice(&data[want.len() - 1..want.len() - 1 + got]);
            assert_eq!(buf.filled(), &want[..]);
            assert_eq!(
                buf.initialized().len(),
                want.len(),
                "the read wrote past the bytes it read"
            );
        }
        assert_eq!(want.len(), data.len() + 1, "the whole file, once");
    });
}

/// Counts the wake-ups it receives.
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Waits up to `ms` for `fd` to be readable, then empties it.
fn wait_and_clear_eventfd(fd: std::os::fd::RawFd, ms: i32) {
    common::poll_readable(fd, ms);
    let mut v = 0u64;
    // SAFETY: an 8-byte read into a local.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// Whether `fd` polls readable now.
fn readable(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    common::poll_readable(fd.as_raw_fd(), 0)
}

/// Threads start reads on one caller-driven ring at once, each submitting
/// its own (the ring's lock is let go before the kernel call), while
/// another thread reaps: every read completes, with its bytes.
#[test]
fn a_caller_driven_ring_takes_operations_from_many_threads_at_once() {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    let len = 1 << 20;
    let (path, data) = data_file(len, 44);
    let data = Arc::new(data);
    // Through the ring: cached reads would otherwise be served at their
    // first poll, never reaching it.
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let file = Arc::new(AsyncFile::open(&engine, &path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reaped = 0;
            while !stop.load(Ordering::SeqCst) {
                if let Some(fd) = engine.poll_fd() {
                    common::poll_readable(fd.as_raw_fd(), 10);
                }
                reaped += engine.reap();
            }
            reaped
        })
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let readers: Vec<_> = (0..4u64)
        .map(|t| {
            let (file, data, done) = (file.clone(), data.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(100 + t);
                futures::executor::block_on(async {
                    for _ in 0..100 {
                        let offs: Vec<usize> = (0..16)
                            .map(|_| rng.below(len as u64 - 4096) as usize)
                            .collect();
                        let reads = offs
                            .iter()
                            .map(|&o| file.read_at(vec![0u8; 4096], o as u64));
                        for (o, (n, buf)) in offs.iter().zip(futures::future::join_all(reads).await)
                        {
                            assert_eq!(n.unwrap(), 4096, "read at {o}");
                            assert_eq!(&buf[..], &data[*o..o + 4096], "bytes at {o}");
                        }
                    }
                });
                done.send(()).unwrap();
            })
        })
        .collect();
    for _ in 0..readers.len() {
        // A reader that panicked drops its sender; one that stalls (an
        // operation never submitted or never reaped) times out.
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a reader stalled or failed");
    }
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let reaped = reaper.join().unwrap();
    if engine.backend() == blockio::Backend::IoUring {
        assert_eq!(
            reaped,
            4 * 100 * 16,
            "every read reaped by the reaping thread"
        );
    }
}

#[test]
fn a_caller_driven_ring_completes_through_its_eventfd_and_reap() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let len = 1 << 20;
    let (path, data) = data_file(len, 43);
    // SAFETY: a new descriptor, owned here.
    let efd =
        unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)) };
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(
            CallerDriving::new().completion_eventfd(efd.as_raw_fd()),
        ))
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let uring = engine.backend() == blockio::Backend::IoUring;
    assert_eq!(
        engine.poll_fd().is_some(),
        uring,
        "a ring to watch iff io_uring"
    );
    let file = AsyncFile::open(&engine, &path).unwrap();
    let counter = Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
    let waker = std::task::Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    // More reads than the ring holds (the rest wait in its backlog); every
    // fourth is dropped while in flight, its buffer (from `dropped`) left
    // with the ring until the kernel is done with it.
    let dropped = BufferPool::new(150, 4096, 4096);
    let reads = start_reads_dropping_every_fourth(&file, &data, &dropped, &mut cx, uring);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut reaped = reap_until_read(&engine, efd.as_raw_fd(), reads, &data, &mut cx, deadline);
    if uring {
        // A dropped read's buffer comes back once its completion is
        // reaped (or at once, if it never left the backlog): with every
        // buffer back, nothing waits, and the ring is not readable.
        while dropped.available() != dropped.count() {
            assert!(
                Instant::now() < deadline,
                "{} dropped reads never completed",
                dropped.count() - dropped.available()
            );
            wait_and_clear_eventfd(efd.as_raw_fd(), 1000);
            reaped += engine.reap();
        }
        assert!(!readable(engine.poll_fd().unwrap()), "reaped, yet readable");
        assert!(reaped >= 450, "reap completed {reaped} operations");
        assert!(counter.0.load(std::sync::atomic::Ordering::SeqCst) >= 450);
    }
    drop(file);
    an_engine_dropped_with_reads_in_flight_completes_them(engine, &path, &data, uring);
}

/// Starts 600 random 4 KiB reads of `file` (whose bytes are `data`) with
/// one poll each; every fourth, into a buffer of `dropped`, is dropped
/// while in flight. The reads still pending, with their offsets: on
/// io_uring every read is, since none completes before it is reaped.
fn start_reads_dropping_every_fourth(
    file: &AsyncFile,
    data: &[u8],
    dropped: &BufferPool,
    cx: &mut Context<'_>,
    uring: bool,
) -> Vec<(usize, OpFuture<Vec<u8>>)> {
    let mut rng = Rng(7);
    let mut reads = Vec::new();
    for i in 0..600 {
        let off = rng.below(data.len() as u64 - 4096);
        let expect = &data[off as usize..off as usize + 4096];
        if i % 4 == 0 {
            let mut r = file.read_at(dropped.get(), off);
            match Pin::new(&mut r).poll(cx) {
                Poll::Pending => drop(r),
                Poll::Ready((n, buf)) => {
                    assert!(!uring, "a read completed before it was reaped");
                    assert_eq!(&buf[..n.unwrap()], expect);
                }
            }
            continue;
        }
        let mut r = file.read_at(vec![0u8; 4096], off);
        match Pin::new(&mut r).poll(cx) {
            Poll::Pending => reads.push((off as usize, r)),
            // Only a pool thread can be that quick.
            Poll::Ready((n, buf)) => {
                assert!(!uring, "a read completed before it was reaped");
                assert_eq!(&buf[..n.unwrap()], expect);
            }
        }
    }
    reads
}

/// Polls `reads` until each has its bytes of `data`: on io_uring after
/// each signal of the completion eventfd `efd`, with the ring readable,
/// through `reap`; on the thread pool, where `reap` has nothing to do,
/// as the pool completes them. How many operations `reap` completed.
fn reap_until_read(
    engine: &AsyncEngine,
    efd: std::os::fd::RawFd,
    mut reads: Vec<(usize, OpFuture<Vec<u8>>)>,
    data: &[u8],
    cx: &mut Context<'_>,
    deadline: Instant,
) -> usize {
    let uring = engine.backend() == blockio::Backend::IoUring;
    let mut reaped = 0;
    while !reads.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} reads never completed",
            reads.len()
        );
        if uring {
            wait_and_clear_eventfd(efd, 1000);
            let ring = engine.poll_fd().expect("a caller-driven ring has one");
            assert!(
                readable(ring),
                "completions wait, but the ring is not readable"
            );
            reaped += engine.reap();
        } else {
            assert_eq!(engine.reap(), 0);
            std::thread::sleep(Duration::from_millis(1));
        }
        reads.retain_mut(|(off, r)| match Pin::new(r).poll(cx) {
            Poll::Ready((n, buf)) => {
                assert_eq!(n.unwrap(), 4096);
                assert_eq!(&buf[..], &data[*off..*off + 4096]);
                false
            }
            Poll::Pending => true,
        });
    }
    reaped
}

/// `engine` dropped with reads in flight (their futures first): a thread
/// finishes them, and only then do their pooled buffers come back. Each
/// buffer then holds its read's data, not zeros: the reads were
/// completed, not abandoned. `O_DIRECT`, so that the reads are still at
/// the device when the engine goes (cached reads complete during
/// submission).
fn an_engine_dropped_with_reads_in_flight_completes_them(
    engine: AsyncEngine,
    path: &std::path::Path,
    data: &[u8],
    uring: bool,
) {
    let opts = AsyncOpenOptions::new().direct(true);
    let file = AsyncFile::open_with(&engine, path, &opts).expect("O_DIRECT on the test file");
    let pool = BufferPool::new(64, 4096, 4096);
    let mut offset_of = vec![0usize; 64];
    // Every buffer taken before any read starts: on the thread pool a read
    // may finish (and give its buffer back) before the next is started.
    let bufs: Vec<PooledBuf> = (0..64).map(|_| pool.get()).collect();
    for (i, buf) in bufs.into_iter().enumerate() {
        offset_of[buf.index()] = i * 4096;
        file.read_at(buf, (i * 4096) as u64).start();
    }
    drop(file);
    drop(engine);
    wait_for_pool(&pool);
    let all: Vec<PooledBuf> = (0..64).map(|_| pool.get()).collect();
    let mut completed = 0;
    for b in &all {
        let off = offset_of[b.index()];
        if b[..] == data[off..off + 4096] {
            completed += 1;
            continue;
        }
        // On the thread pool a read whose future was dropped before a
        // thread took it up is never run (a dropped future is a cancelled
        // one): its buffer comes back as it went, all zeros. The caller-
        // driven ring submits each read when it is started, so there
        // every read was in the kernel and must have completed.
        assert!(
            !uring && b.iter().all(|&x| x == 0),
            "buffer {} was released before its read at {off} completed",
            b.index()
        );
    }
    if uring {
        assert_eq!(completed, 64);
    }
}

/// With room for one file operation in flight on `backend` (a ring of
/// depth 1, or one pool thread) held by a read of an empty pipe: queues a
/// 4 KiB write of sevens at 0 behind it and hands that write and its
/// withdrawal to `act`; then queues a write of `x` at 4096, lets the pipe
/// read complete, and checks that the later write landed and the queued
/// one never did. Returns the queued write's withdrawal.
fn queued_behind_a_pipe_read(
    backend: blockio::BackendChoice,
    act: impl FnOnce(OpFuture<Vec<u8>>, &Withdrawal),
) -> Withdrawal {
    let engine = AsyncEngine::builder()
        .backend(backend)
        .queue_depth(1)
        .fallback_threads(1)
        .build()
        .unwrap();
    let (pipe, w) = async_pipe(&engine);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let file = AsyncFile::create(&engine, &path).unwrap();
    let mut read = pipe.read_at(vec![0u8; 5], 0);
    read.start();
    let mut queued = file.write_at(vec![7u8; 4096], 0);
    let withdrawal = queued.withdrawal();
    queued.start();
    act(queued, &withdrawal);
    let mut later = file.write_at(b"x".to_vec(), 4096);
    later.start();
    std::io::Write::write_all(&mut &w, b"hello").unwrap();
    let (n, buf) = futures::executor::block_on(read);
    assert_eq!((n.unwrap(), &buf[..]), (5, &b"hello"[..]), "{backend:?}");
    let written = futures::executor::block_on(later).0.unwrap();
    assert_eq!(written, 1, "{backend:?}");
    let mut want = vec![0u8; 4096];
    want.push(b'x');
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got, want, "{backend:?}: the queued write never landed");
    withdrawal
}

/// A withdrawn operation is never performed: on each backend, a write
/// queued behind a read of an empty pipe is withdrawn, resolves with
/// ECANCELED and never lands, while a write queued after it does.
#[test]
fn a_withdrawn_operation_is_never_performed() {
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        queued_behind_a_pipe_read(backend, |queued, withdrawal| {
            assert!(withdrawal.withdraw(), "{backend:?}: queued, so withdrawn");
            let (res, _) = futures::executor::block_on(queued);
            let errno = blockio::errno(&res.unwrap_err());
            assert_eq!(errno, Some(libc::ECANCELED), "{backend:?}");
            assert!(withdrawal.withdraw(), "{backend:?}: withdrawn stays out");
        });
    }
}

/// A withdrawal handle does not keep an operation alive: a queued write
/// whose future is dropped while the handle lives is skipped, as any
/// dropped future's queued operation is, on each backend.
#[test]
fn a_dropped_future_is_skipped_while_its_withdrawal_lives() {
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let withdrawal = queued_behind_a_pipe_read(backend, |queued, _| drop(queued));
        assert!(!withdrawal.withdraw(), "{backend:?}: gone, so not known");
    }
}

/// An operation the kernel has taken cannot be withdrawn, and completes:
/// a read of an empty pipe, known to be in the ring once a write
/// submitted after it has completed (the ring's driver hands operations
/// over in order), is refused withdrawal and then gets its bytes. (On
/// the thread pool two threads take queued operations in order but may
/// start them in either, so there the proof is the io_uring run's; this
/// test runs on io_uring even in the pool pass.)
#[test]
fn an_operation_in_the_kernel_is_not_withdrawn() {
    let Ok(engine) = AsyncEngine::builder()
        .backend(blockio::BackendChoice::IoUring)
        .queue_depth(2)
        .build()
    else {
        panic!("this test needs io_uring");
    };
    if engine.backend() != blockio::Backend::IoUring {
        // BLOCKIO_BACKEND=threads overrides the builder: the pool pass
        // of `.ci/run`, whose io_uring pass ran this.
        return;
    }
    let (pipe, w) = async_pipe(&engine);
    let file = AsyncFile::from_file(&engine, tempfile::tempfile().unwrap());
    let mut read = pipe.read_at(vec![0u8; 5], 0);
    let withdrawal = read.withdrawal();
    read.start();
    assert_eq!(
        futures::executor::block_on(file.write_at(b"x".to_vec(), 0))
            .0
            .unwrap(),
        1
    );
    assert!(!withdrawal.withdraw(), "the pipe read is in the kernel");
    std::io::Write::write_all(&mut &w, b"hello").unwrap();
    let (n, buf) = futures::executor::block_on(read);
    assert_eq!((n.unwrap(), &buf[..]), (5, &b"hello"[..]));
    assert!(!withdrawal.withdraw(), "completed: it was performed");
}

/// A pipe: its read end as an `AsyncFile` on `engine`, and its write end.
fn async_pipe(engine: &AsyncEngine) -> (AsyncFile, std::fs::File) {
    let (r, w) = common::pipe();
    (AsyncFile::from_file(engine, r), w)
}

/// A read of an empty pipe whose future is dropped after it started takes
/// none of the bytes written after the drop for itself, on each backend:
/// it is kept for the file's next read, which gets the bytes (whether the
/// dropped read took them or not).
#[test]
fn a_dropped_read_of_an_empty_pipe_hands_what_is_written_after_to_the_next_read() {
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (pipe, w) = async_pipe(&engine);
        for i in 0..5u8 {
            let mut read = pipe.read_at(vec![0u8; 16], 0);
            read.start();
            if engine.backend() == blockio::Backend::ThreadPool {
                // A pool thread has taken the read: it waits for the pipe.
                common::wait_until("a pool thread waits for the pipe", || {
                    common::a_thread_blocked_in(common::POLL_CALLS)
                });
            }
            drop(read);
            std::io::Write::write_all(&mut &w, &[b'a' + i; 3]).unwrap();
            let next = pipe.read_at(vec![0u8; 16], 0);
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(futures::executor::block_on(next)));
            // (a guard against a hang, not a timing: the bytes are there)
            let (n, buf) = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!("{backend:?}, round {i}: the dropped read took the bytes")
                });
            assert_eq!(&buf[..n.unwrap()], &[b'a' + i; 3], "{backend:?}, round {i}");
        }
    }
}

/// Bytes a dropped read of a pipe already took are kept for the file's
/// next read, on each backend and on a caller-driven ring: the read is
/// started on an empty pipe, the bytes are written and taken by it (the
/// pipe is drained: FIONREAD is 0), and only then is its future dropped,
/// so it has the bytes whatever happens to its cancellation; the next
/// read must hand them out, before the bytes written after it.
#[test]
fn a_dropped_pipe_read_keeps_what_it_took_for_the_next_read() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        dropped_pipe_read_keeps_its_bytes(&engine, &format!("{backend:?}"));
    }
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(fd) = engine.poll_fd() {
                    common::poll_readable(std::os::fd::AsRawFd::as_raw_fd(&fd), 10);
                }
                engine.reap();
            }
        })
    };
    dropped_pipe_read_keeps_its_bytes(&engine, "caller-driven");
    stop.store(true, Ordering::SeqCst);
    reaper.join().unwrap();
}

/// As [`a_dropped_pipe_read_keeps_what_it_took_for_the_next_read`], for
/// a dropped `read_vectored_at`: the bytes it took before its future was
/// dropped go to the file's next read, on each backend and on a
/// caller-driven ring.
#[test]
fn a_dropped_vectored_pipe_read_keeps_what_it_took_for_the_next_read() {
    on_every_stack(|engine, what| {
        dropped_pipe_read_keeps_its_bytes_with(engine, what, |pipe| {
            let mut read = pipe.read_vectored_at(vec![vec![0u8; 2], vec![0u8; 14]], 0);
            read.start();
            Box::new(read)
        });
    });
}

/// As [`a_dropped_pipe_read_keeps_what_it_took_for_the_next_read`], for
/// a dropped batch (`submit`) of one read, dropped before a poll took the
/// read's result into the batch (the read's future, dropped with it, is
/// kept as a dropped `read_at` is): the bytes it took go to the file's
/// next read, on each backend and on a caller-driven ring.
#[test]
fn a_dropped_batch_pipe_read_keeps_what_it_took_for_the_next_read() {
    on_every_stack(|engine, what| {
        dropped_pipe_read_keeps_its_bytes_with(engine, what, |pipe| {
            let mut batch = Box::pin(pipe.submit(vec![read_of(16)]));
            // The first poll submits the batch.
            let waker = futures::task::noop_waker();
            assert!(batch
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
            Box::new(batch)
        });
    });
}

/// A batch's reads of a pipe whose file keeps a dropped read wait for it
/// and take what it took first, in order, before the bytes written after
/// it: the first read gets what fits its buffer, the second the rest
/// (without going to the kernel), on each backend and on a caller-driven
/// ring.
#[test]
fn a_batch_read_of_a_pipe_takes_what_a_kept_read_took_first() {
    on_every_stack(|engine, what| {
        let (pipe, w) = async_pipe(engine);
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        std::io::Write::write_all(&mut &w, b"kept-bytes").unwrap();
        common::wait_until("the dropped read drains the pipe", || pipe_holds(&w) == 0);
        drop(read);
        let batch = pipe.submit(vec![read_of(4), read_of(16)]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(futures::executor::block_on(batch)));
        // A write after it, so that a read that skipped the kept one
        // still ends.
        std::io::Write::write_all(&mut &w, b"after").unwrap();
        // (a guard against a hang, not a timing)
        let results = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the batch ends");
        let got: Vec<Vec<u8>> = results
            .into_iter()
            .map(|(n, buf)| buf.expect("a read hands its buffer back")[..n.unwrap()].to_vec())
            .collect();
        assert_eq!(got, [&b"kept"[..], &b"-bytes"[..]], "{what}");
    });
}

/// A batch's read of a pipe whose file keeps a dropped read of the empty
/// pipe, still pending, waits for its outcome: the bytes written after it
/// go to the batch's read (whether the kept read took them or not), on
/// each backend and on a caller-driven ring.
#[test]
fn a_batch_read_after_a_dropped_read_of_an_empty_pipe_gets_what_is_written_after() {
    on_every_stack(|engine, what| {
        let (pipe, w) = async_pipe(engine);
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        if engine.backend() == blockio::Backend::ThreadPool {
            // A pool thread has taken the read: it waits for the pipe.
            common::wait_until("a pool thread waits for the pipe", || {
                common::a_thread_blocked_in(common::POLL_CALLS)
            });
        }
        drop(read);
        let batch = pipe.submit(vec![read_of(16)]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(futures::executor::block_on(batch)));
        std::io::Write::write_all(&mut &w, b"after").unwrap();
        // (a guard against a hang, not a timing: the bytes are there)
        let mut results = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{what}: the dropped read took the bytes"));
        let (n, buf) = results.remove(0);
        assert_eq!(&buf.unwrap()[..n.unwrap()], b"after", "{what}");
    });
}

/// A vectored read of a pipe at offset 0 reads it (as a plain read
/// does), filling its buffers in order, on each backend and on a
/// caller-driven ring (the thread pool's `preadv` of a pipe fails with
/// `ESPIPE`; it reads with `readv` there, as io_uring does).
#[test]
fn a_vectored_read_of_a_pipe_reads_it() {
    on_every_stack(|engine, what| {
        let (pipe, w) = async_pipe(engine);
        std::io::Write::write_all(&mut &w, b"hello").unwrap();
        let (n, bufs) =
            futures::executor::block_on(pipe.read_vectored_at(vec![vec![0u8; 2], vec![0u8; 8]], 0));
        assert_eq!(n.unwrap_or_else(|e| panic!("{what}: {e}")), 5, "{what}");
        assert_eq!(
            (&bufs[0][..], &bufs[1][..3]),
            (&b"he"[..], &b"llo"[..]),
            "{what}"
        );
    });
}

/// A waker that counts its wake-ups, and the count.
fn counting_waker() -> (Arc<std::sync::atomic::AtomicUsize>, std::task::Waker) {
    struct Count(Arc<std::sync::atomic::AtomicUsize>);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (
        count.clone(),
        std::task::Waker::from(Arc::new(Count(count))),
    )
}

/// A batch's read of `len` bytes at offset 0.
fn read_of(len: usize) -> BatchOp<Vec<u8>> {
    BatchOp::Read {
        offset: 0,
        buf: vec![0u8; len],
    }
}

/// Reads `pipe` until what it got ends with `last` (the last bytes
/// written) or holds `most` bytes (all that was written: bytes in the
/// wrong order then fail the caller's assertion, no read waits on an
/// empty pipe): every byte read, in order.
fn read_pipe_through(pipe: &AsyncFile, last: &[u8], most: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while !got.ends_with(last) && got.len() < most {
        let room = vec![0u8; most - got.len()];
        let (n, buf) = futures::executor::block_on(pipe.read_at(room, 0));
        let n = n.unwrap();
        assert!(n > 0, "the pipe ended after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// A batch of two reads of a pipe holding 4 bytes, polled again once its
/// first read has taken them (their result now the batch's), then dropped
/// with its second read unfinished: the file's next reads get those 4
/// bytes, then what is written after (whether the second read took it or
/// not), on each backend and on a caller-driven ring.
#[test]
fn a_dropped_batch_hands_its_finished_pipe_reads_bytes_to_the_next_read() {
    on_every_stack(|engine, what| {
        let (pipe, w) = async_pipe(engine);
        std::io::Write::write_all(&mut &w, b"kept").unwrap();
        let mut batch = Box::pin(pipe.submit(vec![read_of(4), read_of(16)]));
        let (woken, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(batch.as_mut().poll(&mut cx).is_pending(), "{what}");
        common::wait_until("a read of the batch drains the pipe", || {
            pipe_holds(&w) == 0
        });
        common::wait_until("the batch is woken", || {
            woken.load(std::sync::atomic::Ordering::SeqCst) > 0
        });
        // Its result goes into the batch; the other read is unfinished.
        assert!(batch.as_mut().poll(&mut cx).is_pending(), "{what}");
        drop(batch);
        std::io::Write::write_all(&mut &w, b"after").unwrap();
        let got = read_pipe_through(&pipe, b"after", 9);
        assert_eq!(String::from_utf8_lossy(&got), "keptafter", "{what}");
    });
}

/// A batch whose reads of a pipe took bytes a dropped read had left
/// (at its first poll, without going to the kernel), dropped with its
/// last read unfinished: the file's next reads get those bytes again,
/// in order, then what is written after, on each backend and on a
/// caller-driven ring.
#[test]
fn a_dropped_batch_hands_what_its_reads_took_from_a_kept_read_to_the_next_read() {
    on_every_stack(|engine, what| {
        let (pipe, w) = async_pipe(engine);
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        std::io::Write::write_all(&mut &w, b"kept-bytes").unwrap();
        common::wait_until("the dropped read drains the pipe", || pipe_holds(&w) == 0);
        drop(read);
        // The next read takes 4 of its bytes; the file keeps the rest.
        let (n, buf) = futures::executor::block_on(pipe.read_at(vec![0u8; 4], 0));
        assert_eq!(&buf[..n.unwrap()], b"kept", "{what}");
        let mut batch = Box::pin(pipe.submit(vec![read_of(2), read_of(16), read_of(16)]));
        // Its first two reads take what the file kept; the third goes to
        // the kernel and waits for the pipe.
        let waker = futures::task::noop_waker();
        assert!(batch
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        drop(batch);
        std::io::Write::write_all(&mut &w, b"after").unwrap();
        let got = read_pipe_through(&pipe, b"after", 11);
        assert_eq!(String::from_utf8_lossy(&got), "-bytesafter", "{what}");
    });
}

/// A batch's reads of a pipe take its bytes in the batch's order: two
/// reads of 3 bytes, the pipe written after they were submitted, resolve
/// with the first 3 bytes in the first read; dropped instead, the file's
/// next reads get the bytes in the order written. Twenty rounds (two
/// reads running at once took them in either order), on each backend
/// and on a caller-driven ring.
#[test]
fn a_batchs_reads_of_a_pipe_take_its_bytes_in_order() {
    on_every_stack(|engine, what| {
        for round in 0..20 {
            let (pipe, w) = async_pipe(engine);
            let mut batch = Box::pin(pipe.submit(vec![read_of(3), read_of(3)]));
            let waker = futures::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(batch.as_mut().poll(&mut cx).is_pending());
            std::io::Write::write_all(&mut &w, b"012").unwrap();
            std::io::Write::write_all(&mut &w, b"345").unwrap();
            let got: Vec<Vec<u8>> = futures::executor::block_on(batch)
                .into_iter()
                .map(|(n, buf)| buf.unwrap()[..n.unwrap()].to_vec())
                .collect();
            assert_eq!(got, [b"012", b"345"], "{what} round {round}");

            let mut batch = Box::pin(pipe.submit(vec![read_of(3), read_of(3)]));
            assert!(batch.as_mut().poll(&mut cx).is_pending());
            drop(batch);
            std::io::Write::write_all(&mut &w, b"abc").unwrap();
            std::io::Write::write_all(&mut &w, b"def").unwrap();
            let got = read_pipe_through(&pipe, b"def", 6);
            assert_eq!(
                String::from_utf8_lossy(&got),
                "abcdef",
                "{what} round {round}"
            );
        }
    });
}

/// A batch's writes to a pipe go in in the batch's order: two writes of
/// 256 KiB (four times what the pipe holds), read by a thread as they
/// go, leave in the pipe the bytes of the first write's result, then
/// those of the second's (each may be short: the next follows what it
/// wrote: io_uring ends each after the 64 KiB the pipe holds). Ten
/// rounds (two writes running at once interleaved their bytes on the
/// thread pool), on each backend and on a caller-driven ring.
#[test]
fn a_batchs_writes_to_a_pipe_go_in_in_order() {
    const LEN: usize = 256 * 1024;
    on_every_stack(|engine, what| {
        for round in 0..10 {
            let (r, w) = common::pipe();
            let pipe = AsyncFile::from_file(engine, w);
            let reader = std::thread::spawn(move || {
                let mut all = Vec::new();
                std::io::Read::read_to_end(&mut &r, &mut all).unwrap();
                all
            });
            let results = futures::executor::block_on(pipe.submit(vec![
                BatchOp::Write {
                    offset: 0,
                    buf: vec![b'a'; LEN],
                },
                BatchOp::Write {
                    offset: 0,
                    buf: vec![b'b'; LEN],
                },
            ]));
            drop(pipe);
            let all = reader.join().unwrap();
            let ns: Vec<usize> = results
                .into_iter()
                .map(|(n, _)| n.unwrap_or_else(|e| panic!("{what}: {e}")))
                .collect();
            let mut want = vec![b'a'; ns[0]];
            want.resize(ns[0] + ns[1], b'b');
            let first_b = all.iter().position(|&c| c == b'b');
            let last_a = all.iter().rposition(|&c| c == b'a');
            assert!(
                all == want,
                "{what} round {round}: wrote {ns:?}, read {} bytes, the first b at {first_b:?}, the last a at {last_a:?}",
                all.len()
            );
        }
    });
}

/// A vectored write to a pipe writes it, its buffers in order (the
/// thread pool's `pwritev` of a pipe fails with `ESPIPE`; it writes with
/// `writev` there, as io_uring does), on each backend and on a
/// caller-driven ring.
#[test]
fn a_vectored_write_to_a_pipe_writes_it() {
    on_every_stack(|engine, what| {
        let (r, w) = common::pipe();
        let pipe = AsyncFile::from_file(engine, w);
        let bufs = vec![b"ab".to_vec(), Vec::new(), b"cde".to_vec()];
        let (n, _) = futures::executor::block_on(pipe.write_vectored_at(bufs, 0));
        assert_eq!(n.unwrap_or_else(|e| panic!("{what}: {e}")), 5, "{what}");
        let mut got = [0u8; 8];
        let m = std::io::Read::read(&mut &r, &mut got).unwrap();
        assert_eq!(&got[..m], b"abcde", "{what}");
    });
}

/// A pipe has no offsets: reads and writes of it at an offset other than
/// 0 read and write it as at 0 (io_uring ignores the offset; the thread
/// pool's `pread`, `preadv`, `pwrite` and `pwritev` fail with `ESPIPE`,
/// and it then reads and writes without one), plain and vectored, on
/// each backend and on a caller-driven ring.
#[test]
fn reads_and_writes_of_a_pipe_at_an_offset_ignore_it() {
    on_every_stack(|engine, what| {
        let (r, w) = common::pipe();
        let (reader, writer) = (
            AsyncFile::from_file(engine, r),
            AsyncFile::from_file(engine, w),
        );
        let (n, _) = futures::executor::block_on(writer.write_at(b"abc".to_vec(), 7));
        assert_eq!(n.unwrap_or_else(|e| panic!("{what}: {e}")), 3, "{what}");
        let bufs = vec![b"de".to_vec(), b"fgh".to_vec()];
        let (n, _) = futures::executor::block_on(writer.write_vectored_at(bufs, 7));
        assert_eq!(n.unwrap_or_else(|e| panic!("{what}: {e}")), 5, "{what}");
        let (n, buf) = futures::executor::block_on(reader.read_at(vec![0u8; 4], 7));
        let n = n.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(&buf[..n], b"abcd", "{what}");
        let bufs = vec![vec![0u8; 2], vec![0u8; 8]];
        let (n, bufs) = futures::executor::block_on(reader.read_vectored_at(bufs, 7));
        assert_eq!(n.unwrap_or_else(|e| panic!("{what}: {e}")), 4, "{what}");
        assert_eq!(
            (&bufs[0][..], &bufs[1][..2]),
            (&b"ef"[..], &b"gh"[..]),
            "{what}"
        );
    });
}

/// Runs `check` on an io_uring engine driven by its thread, on the
/// thread pool and on a caller-driven ring (reaped by a thread of its
/// own meanwhile), naming each.
fn on_every_stack(check: impl Fn(&AsyncEngine, &str)) {
    use std::sync::atomic::{AtomicBool, Ordering};
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        // Named by what runs (BLOCKIO_BACKEND=threads overrides the choice).
        check(&engine, &format!("{:?}", engine.backend()));
    }
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = reap_until(&engine, &stop);
    check(&engine, &format!("caller-driven {:?}", engine.backend()));
    stop.store(true, Ordering::SeqCst);
    reaper.join().unwrap();
}

/// Dropping an `AsyncFile` cancels the dropped reads it kept: the pipe's
/// read end closes (its write end reports the error of a pipe without
/// readers) although nothing is ever written, on each backend.
#[test]
fn dropping_the_file_cancels_the_dropped_reads_it_kept() {
    use std::os::fd::AsRawFd;
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (pipe, w) = async_pipe(&engine);
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        drop(read);
        drop(pipe);
        common::wait_until("the pipe's read end closes", || {
            let mut p = libc::pollfd {
                fd: w.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one live pollfd.
            let n = unsafe { libc::poll(&mut p, 1, 10) };
            n == 1 && p.revents & libc::POLLERR != 0
        });
    }
}

/// A dropped read of a regular file, started at an offset, keeps nothing
/// for the next read: that one reads its own offset.
#[test]
fn a_dropped_read_of_a_regular_file_leaves_nothing_for_the_next() {
    let (path, data) = data_file(8192, 62);
    let engine = AsyncEngine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let file = AsyncFile::open(&engine, &path).unwrap();
    let mut read = file.read_at(vec![0u8; 16], 0);
    read.start();
    drop(read);
    let (n, buf) = futures::executor::block_on(file.read_at(vec![0u8; 16], 4096));
    assert_eq!(&buf[..n.unwrap()], &data[4096..4112]);
}

/// A read of an empty pipe on `engine` is started, takes bytes written
/// after it, and is dropped: the next read of the same file gets them.
fn dropped_pipe_read_keeps_its_bytes(engine: &AsyncEngine, what: &str) {
    dropped_pipe_read_keeps_its_bytes_with(engine, what, |pipe| {
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        Box::new(read)
    });
}

/// [`dropped_pipe_read_keeps_its_bytes`] for the read `start` makes of
/// the pipe and submits (a future, dropped unfinished).
fn dropped_pipe_read_keeps_its_bytes_with(
    engine: &AsyncEngine,
    what: &str,
    start: impl FnOnce(&AsyncFile) -> Box<dyn std::any::Any>,
) {
    let (pipe, w) = async_pipe(engine);
    let read = start(&pipe);
    std::io::Write::write_all(&mut &w, b"kept").unwrap();
    common::wait_until("the dropped read drains the pipe", || pipe_holds(&w) == 0);
    drop(read);
    let next = pipe.read_at(vec![0u8; 16], 0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(futures::executor::block_on(next)));
    // A write after it, so that a read that lost the bytes still ends.
    std::io::Write::write_all(&mut &w, b"after").unwrap();
    let (n, buf) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the next read ends");
    assert_eq!(&buf[..n.unwrap()], b"kept", "{what}");
}

/// A future that reports, once, that it was polled and left pending
/// (its waker registered).
struct Signal<F> {
    fut: Pin<Box<F>>,
    pending: Option<std::sync::mpsc::Sender<()>>,
}

impl<F: Future> Future for Signal<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let out = self.fut.as_mut().poll(cx);
        if out.is_pending() {
            if let Some(tx) = self.pending.take() {
                tx.send(()).unwrap();
            }
        }
        out
    }
}

/// A caller-driven engine and a pipe read started and dropped on it (kept
/// for the next read), nothing reaped yet: the kept read stays pending
/// (its cancel's outcome unseen) until `engine.reap()`.
fn caller_engine_with_a_kept_read() -> (AsyncEngine, Arc<AsyncFile>, std::fs::File) {
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .build()
        .unwrap();
    let (pipe, w) = async_pipe(&engine);
    let mut read = pipe.read_at(vec![0u8; 16], 0);
    read.start();
    drop(read);
    (engine, Arc::new(pipe), w)
}

/// Reaps `engine` on a thread of its own until `stop`.
fn reap_until(
    engine: &AsyncEngine,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (engine, stop) = (engine.clone(), stop.clone());
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            if let Some(fd) = engine.poll_fd() {
                common::poll_readable(std::os::fd::AsRawFd::as_raw_fd(&fd), 10);
            }
            engine.reap();
        }
    })
}

/// Two reads of one `Arc<AsyncFile>` of a pipe, on two threads, both
/// waiting for the same kept dropped read (a caller-driven ring not yet
/// reaped keeps it pending until both wait): both are woken when it ends,
/// and they get the two writes that follow, one each, as without the
/// kept read (a kept read has one waker slot; the reads waiting on it
/// share one waker that wakes them all).
#[test]
fn two_reads_waiting_for_one_kept_read_both_end() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (engine, pipe, w) = caller_engine_with_a_kept_read();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let (pending_tx, pending_rx) = std::sync::mpsc::channel();
        let read = Signal {
            fut: Box::pin(pipe.read_at(vec![0u8; 16], 0)),
            pending: Some(pending_tx),
        };
        let done_tx = done_tx.clone();
        std::thread::spawn(move || {
            let (n, buf) = futures::executor::block_on(read);
            done_tx.send(buf[..n.unwrap()].to_vec()).unwrap();
        });
        pending_rx.recv().expect("the read waits");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = reap_until(&engine, &stop);
    // (a guard against a hang, not a timing)
    let guard = Duration::from_secs(60);
    std::io::Write::write_all(&mut &w, b"one").unwrap();
    let first = done_rx.recv_timeout(guard).expect("a read ends");
    std::io::Write::write_all(&mut &w, b"two").unwrap();
    let second = done_rx
        .recv_timeout(guard)
        .expect("the other read ends too: it was woken");
    stop.store(true, Ordering::SeqCst);
    reaper.join().unwrap();
    assert_eq!(
        (first.as_slice(), second.as_slice()),
        (&b"one"[..], &b"two"[..])
    );
}

/// A read of no bytes while a dropped read of an empty pipe is kept and
/// still pending (nothing written) returns 0 at once: it waits for
/// nothing (it goes to the kernel, as on a pipe with nothing kept), and
/// the next read gets the bytes written after it. On a caller-driven
/// ring (the kept read is in the kernel from its start, and pending until
/// reaped) and on the thread pool (a pool thread waits for the pipe).
#[test]
fn a_read_of_no_bytes_leaves_a_kept_read_for_the_next() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (ring, ring_pipe, ring_w) = caller_engine_with_a_kept_read();
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = reap_until(&ring, &stop);
    no_bytes_then_the_next_read(&ring_pipe, &ring_w, "caller-driven");
    stop.store(true, Ordering::SeqCst);
    reaper.join().unwrap();

    let pool = AsyncEngine::builder()
        .backend(blockio::BackendChoice::ThreadPool)
        .build()
        .unwrap();
    let (pipe, w) = async_pipe(&pool);
    let mut read = pipe.read_at(vec![0u8; 16], 0);
    read.start();
    if pool.backend() == blockio::Backend::ThreadPool {
        // A pool thread has taken the read: it waits for the pipe.
        common::wait_until("a pool thread waits for the pipe", || {
            common::a_thread_blocked_in(common::POLL_CALLS)
        });
    }
    drop(read);
    no_bytes_then_the_next_read(&Arc::new(pipe), &w, "thread pool");
}

/// A read of no bytes of `pipe` (nothing written) returns 0, and the next
/// read gets "abc" written after it.
fn no_bytes_then_the_next_read(pipe: &Arc<AsyncFile>, w: &std::fs::File, what: &str) {
    let (tx, rx) = std::sync::mpsc::channel();
    let empty = pipe.read_at(Vec::<u8>::new(), 0);
    std::thread::spawn(move || tx.send(futures::executor::block_on(empty).0.unwrap()));
    // (a guard against a hang, not a timing: nothing is written before
    // it ends)
    let n = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: the read of no bytes waits for the kept one"));
    assert_eq!(n, 0, "{what}");
    std::io::Write::write_all(&mut &*w, b"abc").unwrap();
    let next = pipe.read_at(vec![0u8; 16], 0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(futures::executor::block_on(next)));
    let (n, buf) = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: the next read ends"));
    assert_eq!(&buf[..n.unwrap()], b"abc", "{what}");
}

/// A vectored read taking the bytes a dropped read kept fills its
/// buffers in order, skipping an empty one: with "abcdef" kept and
/// buffers of 0, 2 and 16 bytes it returns 6 ("ab", "cdef"), never 0
/// (the end of the stream), on each backend.
#[test]
fn a_vectored_read_fills_every_buffer_from_a_kept_read() {
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (pipe, w) = async_pipe(&engine);
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        std::io::Write::write_all(&mut &w, b"abcdef").unwrap();
        common::wait_until("the dropped read drains the pipe", || pipe_holds(&w) == 0);
        drop(read);
        let bufs = vec![Vec::new(), vec![0u8; 2], vec![0u8; 16]];
        let (n, bufs) = futures::executor::block_on(pipe.read_vectored_at(bufs, 0));
        assert_eq!(n.unwrap(), 6, "{backend:?}");
        assert_eq!(&bufs[1], b"ab", "{backend:?}");
        assert_eq!(&bufs[2][..4], b"cdef", "{backend:?}");
    }
}

/// A buffer whose pointer is null while it is empty: `IoBuf` promises
/// only the first byte, and an empty buffer has none.
struct NullWhenEmpty(Vec<u8>);

// SAFETY: the `Vec`'s bytes do not move with the value; the pointer is
// null only when there are no bytes.
unsafe impl blockio::aio::IoBuf for NullWhenEmpty {
    fn stable_ptr(&self) -> *const u8 {
        if self.0.is_empty() {
            std::ptr::null()
        } else {
            self.0.as_ptr()
        }
    }
    fn bytes_len(&self) -> usize {
        self.0.len()
    }
}

// SAFETY: as above, written only through `&mut`.
unsafe impl blockio::aio::IoBufMut for NullWhenEmpty {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        if self.0.is_empty() {
            std::ptr::null_mut()
        } else {
            self.0.as_mut_ptr()
        }
    }
}

/// An empty part of a buffer whose pointer is null while it is empty
/// reads as no bytes (no slice is made from the null pointer: debug builds
/// abort on that), and an empty part of a full buffer too.
#[test]
fn an_empty_slice_of_a_null_empty_buffer_reads_as_no_bytes() {
    use blockio::aio::IoBuf;
    let part = NullWhenEmpty(Vec::new()).slice(..);
    assert_eq!(&*part, b"");
    let part = NullWhenEmpty(b"abc".to_vec()).slice(3..);
    assert_eq!(&*part, b"");
    let part = NullWhenEmpty(b"abc".to_vec()).slice(1..);
    assert_eq!(&*part, b"bc");
}

/// A vectored read whose first buffer is empty with a null pointer takes
/// the bytes a dropped read kept into the others (an empty buffer makes
/// no slice: from a null pointer that would be undefined, and debug
/// builds abort on it), on each backend.
#[test]
fn a_vectored_read_with_a_null_empty_buffer_takes_a_kept_read() {
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (pipe, w) = async_pipe(&engine);
        let mut read = pipe.read_at(vec![0u8; 16], 0);
        read.start();
        std::io::Write::write_all(&mut &w, b"abcdef").unwrap();
        common::wait_until("the dropped read drains the pipe", || pipe_holds(&w) == 0);
        drop(read);
        let bufs = vec![NullWhenEmpty(Vec::new()), NullWhenEmpty(vec![0u8; 16])];
        let (n, bufs) = futures::executor::block_on(pipe.read_vectored_at(bufs, 0));
        assert_eq!(n.unwrap(), 6, "{backend:?}");
        assert_eq!(&bufs[1].0[..6], b"abcdef", "{backend:?}");
    }
}

/// With `queue_depth(2)`, two dropped reads of idle pipes (kept for the
/// next reads) leave room for other I/O: a write to a regular file on the
/// same engine completes, on each backend (a kept read is cancelled, its
/// outcome waited for by the next read: it holds neither a place in the
/// in-flight limit nor a pool thread for good).
#[test]
fn kept_reads_of_idle_pipes_leave_room_for_other_io() {
    for backend in [
        blockio::BackendChoice::IoUring,
        blockio::BackendChoice::ThreadPool,
    ] {
        let engine = AsyncEngine::builder()
            .backend(backend)
            .queue_depth(2)
            .build()
            .unwrap();
        let mut pipes = Vec::new();
        for _ in 0..2 {
            let (pipe, w) = async_pipe(&engine);
            let mut read = pipe.read_at(vec![0u8; 16], 0);
            read.start();
            drop(read);
            pipes.push((pipe, w));
        }
        let file = AsyncFile::from_file(&engine, tempfile::tempfile().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (n, _) = futures::executor::block_on(file.write_at(vec![7u8; 16], 0));
            tx.send(n.map_err(|e| e.to_string())).unwrap();
        });
        // (a guard against a hang, not a timing)
        let n = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{backend:?}: the write waits behind the kept reads"));
        assert_eq!(n, Ok(16), "{backend:?}");
        // The pipes still work: the next read gets what is written.
        for (pipe, w) in &pipes {
            std::io::Write::write_all(&mut &*w, b"late").unwrap();
            let (n, buf) = futures::executor::block_on(pipe.read_at(vec![0u8; 16], 0));
            assert_eq!(&buf[..n.unwrap()], b"late", "{backend:?}");
        }
    }
}

/// The streaming reads of a pipe (`AsyncRead`) on the thread pool, where
/// a read past offset 0 of a pipe failed with ESPIPE, read on after a
/// short read: the first gets the bytes there, the next those written
/// after, not an error a read-ahead met.
#[test]
fn a_streaming_read_of_a_pipe_reads_on_after_a_short_read() {
    let engine = AsyncEngine::builder()
        .backend(blockio::BackendChoice::ThreadPool)
        .build()
        .unwrap();
    let (mut pipe, w) = async_pipe(&engine);
    std::io::Write::write_all(&mut &w, b"0123456789").unwrap();
    let mut buf = [0u8; 16];
    let n = futures::executor::block_on(pipe.read(&mut buf)).unwrap();
    assert_eq!(&buf[..n], b"0123456789");
    std::io::Write::write_all(&mut &w, b"Z").unwrap();
    let n = futures::executor::block_on(pipe.read(&mut buf)).unwrap();
    assert_eq!(&buf[..n], b"Z");
}

/// The bytes a pipe holds, by FIONREAD on either of its ends.
fn pipe_holds(end: &std::fs::File) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through a live pointer.
    let rc = unsafe { libc::ioctl(end.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    n as usize
}

/// Reads of cached data served on the polling thread (`ReadPath::Auto`,
/// the default) give what the driver gives (`ReadPath::AlwaysSubmit`): the
/// same counts and bytes, whole, short at the end of the file and 0 past
/// it, plain and vectored; the engine counts the reads it served so.
#[test]
fn cached_reads_served_inline_match_the_driver() {
    let (path, data) = data_file(10_000, 61);
    let auto = AsyncEngine::new().unwrap();
    let submit = AsyncEngine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    assert_eq!(auto.read_path(), ReadPath::Auto);
    // Whole reads first: a miss makes the next reads of the file skip the
    // page cache for a while.
    let cases: [(u64, usize); 6] = [
        (0, 4096),
        (4096, 4096),
        (5000, 1),
        (8192, 4096),
        (10_000, 4096),
        (20_000, 512),
    ];
    futures::executor::block_on(async {
        let fa = AsyncFile::open(&auto, &path).unwrap();
        let fs = AsyncFile::open(&submit, &path).unwrap();
        for (off, len) in cases {
            let from = (off as usize).min(data.len());
            let want = &data[from..(off as usize + len).min(data.len())];
            for f in [&fa, &fs] {
                let (r, b) = f.read_at(vec![0u8; len], off).await;
                let n = r.unwrap();
                assert_eq!((n, &b[..n]), (want.len(), want), "read_at {off}+{len}");
                let halves = vec![vec![0u8; len / 2], vec![0u8; len - len / 2]];
                let (r, b) = f.read_vectored_at(halves, off).await;
                let n = r.unwrap();
                assert_eq!(n, want.len(), "read_vectored_at {off}+{len}");
                assert_eq!(&b.concat()[..n], want, "read_vectored_at {off}+{len}");
            }
        }
    });
    assert_eq!(
        auto.served_inline(),
        6,
        "the three whole reads, plain and vectored"
    );
    assert_eq!(submit.served_inline(), 0);
}

/// A cached read withdrawn before its first poll is never performed, and
/// one served inline counts as performed: its withdrawal comes too late,
/// whether the handle was taken before the read or after.
#[test]
fn withdrawals_around_inline_reads_keep_their_meaning() {
    let (path, data) = data_file(8192, 63);
    let engine = AsyncEngine::new().unwrap();
    let file = AsyncFile::open(&engine, &path).unwrap();
    let fut = file.read_at(vec![0u8; 4096], 0);
    assert!(fut.withdrawal().withdraw());
    let (r, b) = futures::executor::block_on(fut);
    assert_eq!(blockio::errno(&r.unwrap_err()), Some(libc::ECANCELED));
    assert_eq!(b, vec![0u8; 4096], "a withdrawn read wrote nothing");
    assert_eq!(engine.served_inline(), 0);

    let mut fut = file.read_at(vec![0u8; 4096], 4096);
    let withdrawal = fut.withdrawal();
    let (r, b) = futures::executor::block_on(&mut fut);
    assert_eq!(r.unwrap(), 4096);
    assert_eq!(b, &data[4096..]);
    assert_eq!(engine.served_inline(), 1);
    assert!(!withdrawal.withdraw(), "performed, so not withdrawn");

    // A handle first asked for once the read was served inline knows it
    // as performed too.
    let mut fut = file.read_at(vec![0u8; 4096], 0);
    let (r, b) = futures::executor::block_on(&mut fut);
    assert_eq!(r.unwrap(), 4096);
    assert_eq!(b, &data[..4096]);
    assert_eq!(engine.served_inline(), 2);
    assert!(!fut.withdrawal().withdraw(), "performed, so not withdrawn");
}

/// Reads racing a truncate and a rewrite of the same file return a prefix
/// of what the file holds, on the inline path as through the driver.
#[test]
fn reads_racing_a_truncate_return_the_data_or_its_end() {
    let (path, data) = data_file(64 << 10, 62);
    let data = Arc::new(data);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, data) = (stop.clone(), data.clone());
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.set_len(0).unwrap();
                f.write_all_at(&data, 0).unwrap();
            }
        })
    };
    for path_choice in [ReadPath::Auto, ReadPath::AlwaysSubmit] {
        let engine = AsyncEngine::builder()
            .read_path(path_choice)
            .build()
            .unwrap();
        let file = AsyncFile::open(&engine, &path).unwrap();
        futures::executor::block_on(async {
            let mut rng = Rng(0x60_03);
            for _ in 0..2000 {
                let off = rng.below(16) * 4096;
                let (r, b) = file.read_at(vec![0u8; 4096], off).await;
                let n = r.unwrap();
                let o = off as usize;
                assert_eq!(&b[..n], &data[o..o + n], "{path_choice:?} at {off}");
            }
        });
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

/// A task reading cached data in a loop, each read served at once, still
/// lets the other tasks of its thread run.
#[test]
fn a_loop_of_inline_reads_yields_to_other_tasks() {
    let (path, _data) = data_file(4096, 64);
    let engine = AsyncEngine::new().unwrap();
    let file = AsyncFile::open(&engine, &path).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let reads_before_other_ran = rt.block_on(async {
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = ran.clone();
        tokio::spawn(async move { other.store(true, std::sync::atomic::Ordering::Relaxed) });
        for i in 0..10_000 {
            let (r, _) = file.read_at(vec![0u8; 4096], 0).await;
            assert_eq!(r.unwrap(), 4096);
            if ran.load(std::sync::atomic::Ordering::Relaxed) {
                return Some(i);
            }
        }
        None
    });
    assert!(reads_before_other_ran.is_some(), "the other task never ran");
    assert!(engine.served_inline() > 0);
}

/// Cached reads of `len` bytes a task makes, on a current-thread tokio
/// runtime, before a peer task that only yields (woken by tokio after its
/// reactor's turn, as a timer's task is) has run 8 times; at most
/// 100,000. Checks that reads were served inline. (With blockio's
/// `tokio` feature only: without it a run's yield can only wake the task,
/// which tokio runs again before its timers and other tasks' wake-ups.)
#[cfg(feature = "tokio")]
fn reads_before_a_yielding_peer_ran_8_times(len: usize, seed: u64) -> u64 {
    let (path, _data) = data_file(len, seed);
    let engine = AsyncEngine::new().unwrap();
    let file = AsyncFile::open(&engine, &path).unwrap();
    let reads = beside_a_peer_that_yields_8_times(|turns| async move {
        let mut reads = 0u64;
        while turns.load(std::sync::atomic::Ordering::Relaxed) < 8 && reads < 100_000 {
            let (r, _) = file.read_at(vec![0u8; len], 0).await;
            assert_eq!(r.unwrap(), len);
            reads += 1;
        }
        reads
    });
    assert!(engine.served_inline() > 0);
    reads
}

/// Runs `reader` (given the count of the peer's turns; it returns how
/// many reads it made) beside a peer task that only yields, 8 times, on a
/// current-thread runtime: what `reader` returned.
#[cfg(feature = "tokio")]
fn beside_a_peer_that_yields_8_times<F, Fut>(reader: F) -> u64
where
    F: FnOnce(Arc<std::sync::atomic::AtomicU64>) -> Fut,
    Fut: Future<Output = u64> + Send + 'static,
{
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let turns = Arc::new(AtomicU64::new(0));
    let peer_turns = turns.clone();
    let reader = reader(turns);
    rt.block_on(async move {
        let peer = tokio::spawn(async move {
            while peer_turns.load(Relaxed) < 8 {
                tokio::task::yield_now().await;
                peer_turns.fetch_add(1, Relaxed);
            }
        });
        let reader = tokio::spawn(reader);
        peer.await.unwrap();
        reader.await.unwrap()
    })
}

/// A task reading cached data in a loop, each read served at once, yields
/// through tokio's scheduler after 128 in a row, as tokio's task budget
/// has tokio's own resources do: a peer task that only yields runs again
/// every 128 reads, not once
/// every 61 polls of the reading task (which a task that merely woke
/// itself would get: 61 x 128 reads).
#[cfg(feature = "tokio")]
#[test]
fn a_loop_of_inline_reads_lets_a_yielding_peer_run_within_its_budget() {
    let reads = reads_before_a_yielding_peer_ran_8_times(4096, 66);
    // 8 budgets of 128 reads, with room to spare.
    assert!(
        reads < 8 * 128 * 2,
        "{reads} reads before the peer yielded 8 times"
    );
}

/// Large cached reads yield once a run of them has moved 1 MiB, however
/// few they are: 128 reads of 1 MiB in one poll kept a tokio worker from
/// its timers, and from its runtime's shutdown, for tens of milliseconds.
#[cfg(feature = "tokio")]
#[test]
fn a_loop_of_large_inline_reads_yields_every_mebibyte() {
    let reads = reads_before_a_yielding_peer_ran_8_times(1 << 20, 67);
    // One read of 1 MiB (or two) between the peer's turns; 128 without
    // the bound.
    assert!(
        reads <= 8 * 2 + 2,
        "{reads} reads before the peer yielded 8 times"
    );
}

/// A stream read in a loop at the end of a cached file (a tail that polls
/// for more), into a buffer smaller than a block, yields as reads that
/// return bytes do: a peer task that only yields runs 8 times within 8
/// budgets of reads, where it waited for the whole loop (each read a
/// `preadv2` returning 0, never counted).
#[cfg(feature = "tokio")]
#[test]
fn a_stream_read_in_a_loop_at_the_end_of_a_cached_file_yields() {
    let (path, _data) = data_file(1000, 71);
    let engine = AsyncEngine::new().unwrap();
    let mut file = AsyncFile::open(&engine, &path).unwrap();
    let reads = beside_a_peer_that_yields_8_times(|turns| async move {
        let mut all = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut file, &mut all)
            .await
            .unwrap();
        assert_eq!(all.len(), 1000);
        let mut reads = 0u64;
        let mut buf = vec![0u8; 4096];
        while turns.load(std::sync::atomic::Ordering::Relaxed) < 8 && reads < 100_000 {
            let n = tokio::io::AsyncReadExt::read(&mut file, &mut buf).await;
            assert_eq!(n.unwrap(), 0, "at the end");
            reads += 1;
        }
        reads
    });
    assert!(
        reads < 8 * 128 * 2,
        "{reads} reads at the end before the peer yielded 8 times"
    );
}

/// A read of cached data polled once and dropped if it is pending, over and
/// over (a `select!` loop whose other branch is always ready), still reads:
/// the yield that ends a run of inline reads leaves the next read served.
#[test]
fn cached_reads_polled_once_and_dropped_when_pending_make_progress() {
    let (path, data) = data_file(4096, 65);
    let engine = AsyncEngine::new().unwrap();
    let file = AsyncFile::open(&engine, &path).unwrap();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut done = 0;
    for _ in 0..1000 {
        let mut read = file.read_at(vec![0u8; 4096], 0);
        if let Poll::Ready((r, b)) = Pin::new(&mut read).poll(&mut cx) {
            assert_eq!(r.unwrap(), 4096);
            assert_eq!(b, data);
            done += 1;
        }
    }
    assert!(done >= 500, "only {done} of 1000 reads completed");
}

/// Whether the page of `path` holding byte `off` is in the page cache,
/// from `mincore` over a read-only mapping of that one page.
fn page_resident(path: &std::path::Path, off: usize) -> bool {
    let f = std::fs::File::open(path).unwrap();
    let page = 4096;
    let start = (off / page * page) as libc::off_t;
    // SAFETY: a fresh shared read-only mapping of one page of an open
    // file, checked below and unmapped before return; nothing reads it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            start,
        )
    };
    assert!(map != libc::MAP_FAILED, "mmap of {}", path.display());
    let mut vec = [0u8; 1];
    // SAFETY: `map` is a live mapping of one page and `vec` has one byte,
    // as mincore requires for one page; mincore never touches the page.
    let rc = unsafe { libc::mincore(map, page, vec.as_mut_ptr()) };
    // SAFETY: unmapping the mapping made above, used by nothing else.
    unsafe { libc::munmap(map, page) };
    assert_eq!(rc, 0, "mincore on {}", path.display());
    vec[0] & 1 != 0
}

/// Drops `path`'s pages from the page cache (the file is synced, so its
/// clean pages go) until `mincore` shows the page holding `off` gone:
/// `POSIX_FADV_DONTNEED` is advice, and a page still mapped or locked
/// for a moment stays. Fails after 100 tries.
fn evict(path: &std::path::Path, off: usize) {
    let f = std::fs::File::open(path).unwrap();
    for _ in 0..100 {
        // SAFETY: posix_fadvise only advises the kernel about an open
        // descriptor; it touches no memory of this process.
        let rc = unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(rc, 0, "posix_fadvise(DONTNEED) on {}", path.display());
        if !page_resident(path, off) {
            return;
        }
        std::thread::yield_now();
    }
    panic!("the page at {off} of {} stayed cached", path.display());
}

/// Where one read of `len` bytes at `off` went: (served inline, handed to
/// the driver), after checking its bytes against `data`.
fn one_read(
    engine: &AsyncEngine,
    file: &AsyncFile,
    data: &[u8],
    off: usize,
    len: usize,
) -> (u64, u64) {
    let before = (engine.served_inline(), engine.reads_to_driver());
    let (r, b) = futures::executor::block_on(file.read_at(vec![0u8; len], off as u64));
    assert_eq!(r.unwrap(), len, "read at {off}");
    assert!(b == data[off..off + len], "bytes of the read at {off}");
    (
        engine.served_inline() - before.0,
        engine.reads_to_driver() - before.1,
    )
}

/// A read of cached data is served on the polling thread and never reaches
/// the driver; a read whose `RWF_NOWAIT` try cannot return all its bytes
/// goes to the driver, with the driver's result; after that miss the
/// file's next read goes to the driver untried, and the one after is
/// tried, and served, again. A read of a page evicted from the cache has
/// the file's bytes whichever way it went. On an engine with its own
/// driver and on one the tokio runtime drives.
///
/// The miss is a read that crosses the end of the file, whose try comes
/// back short whatever the cache holds. An evicted page is no sure miss:
/// the try starts the page's readahead, and this machine's disk answers
/// it within the call for stretches of tens of milliseconds (every try
/// in such a stretch is served, measured: 50 in a row), so which way
/// such a read went is the kernel's choice, and only its bytes and its
/// single count are checked.
#[test]
fn cached_reads_never_reach_the_driver_and_reads_the_try_cannot_serve_do() {
    let size = 64 << 10;
    let (path, data) = data_file(size, 66);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engines = [
        ("own driver", AsyncEngine::new().unwrap()),
        ("tokio-driven", {
            let _on = rt.enter();
            AsyncEngine::new().unwrap()
        }),
    ];
    for (how, engine) in &engines {
        // Cached: every read inline.
        std::fs::read(&path).unwrap();
        let file = AsyncFile::open(engine, &path).unwrap();
        for i in 0..16 {
            let got = one_read(engine, &file, &data, (i * 7 % 16) * 4096, 4096);
            assert_eq!(got, (1, 0), "{how}: cached read {i}");
        }
        // A read crossing the end: the try reads 100 bytes of 4096, a
        // miss; the driver's read gives the same 100.
        let before = (engine.served_inline(), engine.reads_to_driver());
        let (r, b) = futures::executor::block_on(file.read_at(vec![0u8; 4096], size as u64 - 100));
        assert_eq!(r.unwrap(), 100, "{how}: the read crossing the end");
        assert!(b[..100] == data[size - 100..], "{how}: bytes at the end");
        let got = (
            engine.served_inline() - before.0,
            engine.reads_to_driver() - before.1,
        );
        assert_eq!(got, (0, 1), "{how}: the read crossing the end");
        // The back-off after one miss: one read untried, then tried again.
        let got = one_read(engine, &file, &data, 0, 4096);
        assert_eq!(got, (0, 1), "{how}: the read after a miss");
        let got = one_read(engine, &file, &data, 4096, 4096);
        assert_eq!(got, (1, 0), "{how}: the second read after a miss");
        // Evicted pages: the file's bytes, counted once, either way.
        for i in 0..8 {
            evict(&path, 8 * 4096);
            let got = one_read(engine, &file, &data, 8 * 4096, 4096);
            assert!(
                got == (0, 1) || got == (1, 0),
                "{how}: evicted read {i} went {got:?}"
            );
        }
    }
}

/// The warm shape of `blockio-bench read`'s `async` rows: 64 tasks on
/// tokio's multi-thread runtime, whose engine the runtime drives, reading
/// cached 4 KiB blocks. Every read is served on the polling threads,
/// none through the ring (or the pool), including those after each
/// thread's yield to the executor every 128 reads.
#[test]
fn many_tasks_reading_cached_data_never_use_the_driver() {
    let (path, data) = data_file(256 << 10, 67);
    std::fs::read(&path).unwrap();
    let data = Arc::new(data);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = {
        let _on = rt.enter();
        AsyncEngine::new().unwrap()
    };
    let file = Arc::new(AsyncFile::open(&engine, &path).unwrap());
    const TASKS: u64 = 64;
    const READS: u64 = 200;
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (file, data) = (file.clone(), data.clone());
                tokio::spawn(async move {
                    let mut rng = Rng(0x60_67 + t);
                    let mut buf = vec![0u8; 4096];
                    for _ in 0..READS {
                        let off = rng.below(64) as usize * 4096;
                        let (r, b) = file.read_at(buf, off as u64).await;
                        assert_eq!(r.unwrap(), 4096);
                        assert!(b == data[off..off + 4096], "bytes at {off}");
                        buf = b;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(
        (engine.served_inline(), engine.reads_to_driver()),
        (TASKS * READS, 0)
    );
}

/// A stream over cached data is served on the polling thread, no read
/// handed to the driver: straight into a caller's buffer with room for a
/// block (up to 1 MiB a call), into the stream's block for a smaller one;
/// the bytes are the file's either way.
#[test]
fn a_stream_of_cached_data_is_served_on_the_polling_thread() {
    let (path, data) = data_file((3 << 20) + 12_345, 64);
    // Cached whatever `data_file` left: read once.
    assert_eq!(std::fs::read(&path).unwrap(), data);
    let engine = AsyncEngine::new().unwrap();
    futures::executor::block_on(async {
        let mut f = AsyncFile::open(&engine, &path).unwrap();
        let mut head = vec![0u8; 1000];
        f.read_exact(&mut head).await.unwrap();
        assert_eq!(head, &data[..1000]);
        let mut big = vec![0u8; 4 << 20];
        let mut got = head;
        loop {
            let n = f.read(&mut big).await.unwrap();
            if n == 0 {
                break;
            }
            assert!(n <= 1 << 20, "one call served {n} bytes");
            got.extend_from_slice(&big[..n]);
        }
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the bytes read differ from the file's");
    });
    assert_eq!(
        engine.reads_to_driver(),
        0,
        "reads handed to the driver, the end included"
    );
    assert!(
        engine.served_inline() >= 4,
        "{} reads served inline",
        engine.served_inline()
    );
}

/// A stream reading cached data reads what was appended after its first
/// read, as `std::fs::File` does: nothing was read ahead of the cursor to
/// find an end that has moved since.
#[test]
fn a_stream_of_cached_data_reads_what_was_appended_between_reads() {
    let (path, data) = data_file(300 << 10, 65);
    assert_eq!(std::fs::read(&path).unwrap(), data);
    let more: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
    let engine = AsyncEngine::new().unwrap();
    futures::executor::block_on(async {
        let mut f = AsyncFile::open(&engine, &path).unwrap();
        let mut head = vec![0u8; 100 << 10];
        f.read_exact(&mut head).await.unwrap();
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut w, &more).unwrap();
        let mut rest = Vec::new();
        f.read_to_end(&mut rest).await.unwrap();
        head.extend_from_slice(&rest);
        assert_eq!(head.len(), data.len() + more.len());
        assert!(head[..data.len()] == data[..], "the first part differs");
        assert!(head[data.len()..] == more[..], "the appended part differs");
    });
}
