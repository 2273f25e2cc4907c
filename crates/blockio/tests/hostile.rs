//! The engine's promises, tried as a hostile user of the public API would:
//! programs with no `unsafe` that panic in wakers, reuse descriptor numbers,
//! pass absurd sizes, and call back into the engine from wakers. Each test
//! makes the kernel's writes visible where memory is concerned: a buffer
//! handed back too early is taken out of its pool again and filled with a
//! pattern, which must survive the kernel's completion.
//!
//! The tests run on both backends (`BLOCKIO_BACKEND=threads` too) and
//! under AddressSanitizer (see `scripts/test`). Where a test waits for
//! something that a bug would make never happen, a generous deadline turns
//! the hang into a failure; no test asserts how long anything takes.

mod common;

use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use blockio::aio::{AsyncEngine, AsyncFile, CallerDriving, Driving, Submit};
use blockio::{Alignment, BufferPool, Engine, Op, ReadPath, Target};

use common::data_file;

/// How long a test waits for what a bug would make never happen.
const DEADLINE: Duration = Duration::from_secs(60);

/// A waker whose `wake` panics (safe user code may do that).
struct PanickingWaker(AtomicUsize);

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("a hostile waker panics");
    }
}

fn panicking_waker() -> (Arc<PanickingWaker>, Waker) {
    let w = Arc::new(PanickingWaker(AtomicUsize::new(0)));
    (w.clone(), Waker::from(w))
}

/// Polls `f` once with `waker`.
fn poll_with<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// Bytes waiting in a pipe.
fn pipe_bytes(fd: &impl AsRawFd) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through a live pointer.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    n
}

/// A pipe: the read end, the write end, and a copy of the read end.
fn pipe() -> (File, File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a live array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let watch = r.try_clone().unwrap();
    (File::from(r), File::from(w), watch)
}

fn noop() -> &'static Waker {
    futures::task::noop_waker_ref()
}

/// Point 1: a caller-driven engine is dropped with a pipe read in flight
/// into a pooled buffer (its future dropped, so a cancellation is on its
/// way) while another finished read's waker panics, and a
/// copy of the ring's descriptor (made with safe code) keeps the ring
/// alive. The pooled buffer must not go back to the pool before the
/// kernel has completed the pipe read: a buffer taken out again and filled
/// with a pattern keeps the pattern.
#[test]
fn panicking_waker_while_finishing_never_frees_a_buffer_in_flight() {
    let pool = BufferPool::new(1, 4096, 4096);
    let (path, _) = data_file(4096, 1);
    // The file's read goes through the ring, whose completion runs the
    // waker (a cached read would be served at its first poll).
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    // Keeps the ring alive in the kernel however the engine drops it.
    let ring_copy = engine.poll_fd().map(|fd| fd.try_clone_to_owned().unwrap());
    let (r, mut w, watch) = pipe();
    let reader = AsyncFile::from_file(&engine, r);
    let mut in_flight = reader.read_at(pool.get(), 0);
    assert!(poll_with(&mut in_flight, noop()).is_pending());
    drop(in_flight);
    let file = AsyncFile::open(&engine, &path).unwrap();
    let mut finished = file.read_at(vec![0u8; 64], 0);
    let (hostile, waker) = panicking_waker();
    // Pending: its completion is taken only when the engine is finished
    // (io_uring), or the waker panics on a pool thread (thread pool).
    let _ = poll_with(&mut finished, &waker);
    drop((finished, file, reader, engine));

    // Take the buffer out again as soon as the pool has it, and fill it.
    let (tx, rx) = mpsc::channel();
    let p = pool.clone();
    std::thread::spawn(move || {
        let mut b = p.get();
        b.fill(0xAA);
        let _ = tx.send(b);
    });
    // A buffer given back early is filled before the kernel's write below.
    let early = rx.recv_timeout(Duration::from_secs(2)).ok();
    w.write_all(&[0x55; 512]).unwrap();
    // The dropped pipe read was cancelled (a pipe may wait forever); until
    // the kernel confirms it, the read may still take the bytes. Either
    // way its buffer goes back only after the kernel is done with it: give
    // a read the kernel did not cancel in time the chance to write.
    let start = Instant::now();
    while pipe_bytes(&watch) > 0 && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let buf = match early {
        Some(b) => b,
        None => rx
            .recv_timeout(DEADLINE)
            .expect("the buffer never went back to its pool"),
    };
    assert!(
        buf.iter().all(|&b| b == 0xAA),
        "the kernel wrote into a buffer that had gone back to its pool"
    );
    if ring_copy.is_some() {
        assert!(hostile.0.load(Ordering::SeqCst) > 0, "the waker never ran");
    }
    drop(ring_copy);
}

/// Polls every future with `waker` until all are ready, reaping `engine`
/// between rounds and catching the panics `reap` resumes; returns how many
/// reaps panicked. Fails after [`DEADLINE`].
fn settle_all<F: Future + Unpin>(
    engine: &AsyncEngine,
    futs: &mut [F],
    waker: &Waker,
) -> (usize, Vec<F::Output>) {
    settle_rest(engine, futs, waker, futs.iter().map(|_| None).collect())
}

/// [`settle_all`] for futures of which those with a value in `out` are
/// already ready (and not to be polled again).
fn settle_rest<F: Future + Unpin>(
    engine: &AsyncEngine,
    futs: &mut [F],
    waker: &Waker,
    mut out: Vec<Option<F::Output>>,
) -> (usize, Vec<F::Output>) {
    let mut panics = 0;
    let start = Instant::now();
    loop {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.reap())).is_err() {
            panics += 1;
        }
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                if let Poll::Ready(v) = poll_with(f, waker) {
                    *o = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            return (panics, out.into_iter().map(Option::unwrap).collect());
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} of {} operations never completed",
            out.iter().filter(|o| o.is_none()).count(),
            out.len()
        );
        match engine.poll_fd() {
            Some(fd) => {
                common::poll_readable(fd.as_raw_fd(), 100);
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Point 1: reads whose wakers all panic. Every one of them completes;
/// a caller-driven engine resumes the first panic from `reap` after
/// delivering the rest, and the engine keeps working afterwards.
/// `engine` must send reads to its driver ([`ReadPath::AlwaysSubmit`]):
/// the wakers under test are the ones completions call.
fn every_completion_survives_panicking_wakers(engine: AsyncEngine) {
    let (path, data) = data_file(1 << 16, 2);
    let file = AsyncFile::open(&engine, &path).unwrap();
    let mut futs: Vec<_> = (0..8u64)
        .map(|i| file.read_at(vec![0u8; 64], i * 1000))
        .collect();
    let (hostile, waker) = panicking_waker();
    // On the thread pool a read may complete (and its waker panic on a
    // worker) before its first poll returns.
    let first: Vec<_> = futs
        .iter_mut()
        .map(|f| match poll_with(f, &waker) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
        .collect();
    let (panics, results) = settle_rest(&engine, &mut futs, &waker, first);
    for (i, (res, buf)) in results.into_iter().enumerate() {
        let o = i * 1000;
        assert_eq!(res.unwrap(), 64, "read {i}");
        assert_eq!(&buf[..], &data[o..o + 64], "read {i}");
    }
    if engine.poll_fd().is_some() {
        assert!(panics > 0, "reap resumed no panic");
    }
    // The wakers ran (on the backend's threads, or in reap) and panicked.
    let start = Instant::now();
    while hostile.0.load(Ordering::SeqCst) < 8 {
        assert!(start.elapsed() < DEADLINE, "a waker was never called");
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.reap()));
        std::thread::sleep(Duration::from_millis(5));
    }
    // The engine still works.
    let mut again = [file.read_at(vec![0u8; 10], 5)];
    let (_, mut res) = settle_all(&engine, &mut again, noop());
    let (res, buf) = res.pop().unwrap();
    assert_eq!(res.unwrap(), 10);
    assert_eq!(&buf[..], &data[5..15]);
}

#[test]
fn panicking_wakers_lose_no_completion_caller_driven() {
    every_completion_survives_panicking_wakers(
        AsyncEngine::builder()
            .driving(Driving::Caller(CallerDriving::new()))
            .fallback_threads(2)
            .read_path(ReadPath::AlwaysSubmit)
            .build()
            .unwrap(),
    );
}

#[test]
fn panicking_wakers_lose_no_completion_driver_thread() {
    every_completion_survives_panicking_wakers(
        AsyncEngine::builder()
            .fallback_threads(2)
            .read_path(ReadPath::AlwaysSubmit)
            .build()
            .unwrap(),
    );
}

/// Point 2: a pool whose size overflows is refused with an error naming
/// the argument (not a one-byte allocation handing out 2^62).
#[test]
fn buffer_pool_sizes_that_overflow_are_refused() {
    let err = BufferPool::try_new(4, 1 << 62, 4096).unwrap_err();
    assert!(err.to_string().contains("`count`"), "{err}");
    let err = BufferPool::try_new(1, usize::MAX - 10, 4096).unwrap_err();
    assert!(err.to_string().contains("`buf_size`"), "{err}");
    let err = BufferPool::try_new(1, 4096, 3).unwrap_err();
    assert!(err.to_string().contains("`align`"), "{err}");
    let err = BufferPool::try_new(16385, 1, 1).unwrap_err();
    assert!(err.to_string().contains("`count`"), "{err}");
    // `new` is `try_new` that panics with the same message, never a pool
    // larger than its memory.
    let panic = std::panic::catch_unwind(|| BufferPool::new(4, 1 << 62, 4096)).unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("`buf_size`"), "{msg}");
    let pool = BufferPool::try_new(3, 100, 64).unwrap();
    assert_eq!((pool.count(), pool.buf_size()), (3, 128));
}

/// A target whose alignment is invalid: `Target` is a public trait.
struct BadAlignment(File, Alignment);

impl Target for BadAlignment {
    fn raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
    fn direct_alignment(&self) -> Option<Alignment> {
        Some(self.1)
    }
}

/// Point 8: an alignment of 0 (or not a power of two) from a `Target` is
/// refused with an error naming it, before anything divides by it; the
/// rounding helpers never divide by zero nor overflow.
#[test]
fn invalid_alignments_are_refused_not_divided_by() {
    let (path, _) = data_file(8192, 4);
    let engine = Engine::new().unwrap();
    for bad in [
        Alignment {
            memory: 512,
            offset: 0,
        },
        Alignment {
            memory: 0,
            offset: 512,
        },
        Alignment {
            memory: 512,
            offset: 768,
        },
    ] {
        let target = BadAlignment(File::open(&path).unwrap(), bad);
        let mut buf = vec![0u8; 512];
        let res = engine
            .submit(&mut [Op::read(&target, 0, &mut buf)])
            .unwrap();
        let err = res.into_iter().next().unwrap().unwrap_err();
        assert!(err.to_string().contains("power of two"), "{bad:?}: {err}");
        let err = engine.register_file(&target).map(drop).unwrap_err();
        assert!(err.to_string().contains("power of two"), "{bad:?}: {err}");
    }
    let zero = Alignment {
        memory: 0,
        offset: 0,
    };
    assert_eq!(zero.round_up(5), Some(5));
    assert_eq!(zero.round_down(5), 5);
    let page = Alignment {
        memory: 4096,
        offset: 4096,
    };
    assert_eq!(page.round_up(u64::MAX), None);
    assert_eq!(page.round_up(1), Some(4096));
    assert_eq!(page.round_down(u64::MAX), u64::MAX - 4095);
}

/// Point 8: a streaming read after seeking to `u64::MAX` is an error, not
/// an overflow.
#[test]
fn streaming_after_seeking_to_the_end_of_u64_is_an_error() {
    use futures::io::{AsyncReadExt, AsyncSeekExt};
    let (path, data) = data_file(8192, 5);
    let engine = AsyncEngine::new().unwrap();
    futures::executor::block_on(async {
        let mut file = AsyncFile::open(&engine, &path).unwrap();
        let err = file
            .seek(std::io::SeekFrom::Start(u64::MAX))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let mut buf = [0u8; 16];
        // The cursor did not move.
        assert_eq!(file.read(&mut buf).await.unwrap(), 16);
        assert_eq!(&buf[..], &data[..16]);
        // At the largest offset the kernel has, a read ends the stream or
        // fails (the kernel refuses a range past it); it does not overflow.
        let end = i64::MAX as u64;
        assert_eq!(file.seek(std::io::SeekFrom::Start(end)).await.unwrap(), end);
        match file.read(&mut buf).await {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert!(e.to_string().contains(&end.to_string()), "{e}"),
        }
    });
}

/// Point 8: a zero-length slice just past the last buffer of a registered
/// pool reads 0 bytes (it was given buffer index `count`, and failed with
/// `EFAULT`).
#[test]
fn an_empty_slice_at_the_end_of_a_registered_pool_reads_nothing() {
    let (path, _) = data_file(8192, 6);
    let file = File::open(&path).unwrap();
    let pool = BufferPool::new(2, 4096, 4096);
    let engine = Engine::builder()
        .registered_buffers(&pool)
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let mut bufs = [pool.get(), pool.get()];
    let last = bufs.iter_mut().find(|b| b.index() == 1).unwrap();
    let res = engine
        .submit(&mut [Op::read(&file, 0, &mut last[4096..])])
        .unwrap();
    assert_eq!(res.into_iter().next().unwrap().unwrap(), 0);
}

/// A task that its waker polls in place, on whichever thread wakes it
/// (safe code may build such an executor).
struct InPlace {
    fut: std::sync::Mutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    again: std::sync::atomic::AtomicBool,
}

impl Wake for InPlace {
    fn wake(self: Arc<Self>) {
        InPlace::run(&self);
    }
}

impl InPlace {
    fn spawn(fut: impl Future<Output = ()> + Send + 'static) -> Arc<InPlace> {
        let task = Arc::new(InPlace {
            fut: std::sync::Mutex::new(Some(Box::pin(fut))),
            again: std::sync::atomic::AtomicBool::new(false),
        });
        InPlace::run(&task);
        task
    }

    fn run(this: &Arc<InPlace>) {
        this.again.store(true, Ordering::SeqCst);
        loop {
            // Polled by another thread now: it polls again when done.
            let Ok(mut slot) = this.fut.try_lock() else {
                return;
            };
            if !this.again.swap(false, Ordering::SeqCst) {
                drop(slot);
                if this.again.load(Ordering::SeqCst) {
                    continue;
                }
                return;
            }
            let Some(f) = slot.as_mut() else {
                return;
            };
            let waker = Waker::from(this.clone());
            if f.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                *slot = None;
            }
        }
    }
}

/// Point 5: the first `recv_stream()` of an engine made on its driver
/// thread (the task is polled in place by the wake of a completion) does
/// not make that thread wait for itself: the stream is made, and
/// receives.
#[test]
fn first_recv_stream_on_the_driver_thread_does_not_wait_for_itself() {
    use blockio::net::{TcpListener, TcpStream};
    let engine = AsyncEngine::new().unwrap();
    let listener =
        futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (stream, _): (TcpStream, _) = futures::executor::block_on(listener.accept()).unwrap();
    let (r, mut w, _watch) = pipe();
    let pipe_reader = AsyncFile::from_file(&engine, r);
    let (tx, rx) = mpsc::channel();
    let _task = InPlace::spawn(async move {
        // Completes on the driver thread (or a pool thread), whose wake
        // polls this task in place there.
        let (res, _) = pipe_reader.read_at(vec![0u8; 1], 0).await;
        res.unwrap();
        let thread = std::thread::current().name().map(str::to_owned);
        let mut recv = stream.recv_stream();
        let _ = tx.send(format!("made on {thread:?}"));
        let got = match recv.next().await {
            Some(Ok(buf)) => String::from_utf8_lossy(&buf).into_owned(),
            other => format!("{other:?}"),
        };
        let _ = tx.send(got);
    });
    w.write_all(b"x").unwrap();
    let made = rx
        .recv_timeout(DEADLINE)
        .expect("the receive stream was never made: the driver waits for itself");
    if engine.backend() == blockio::Backend::IoUring {
        assert_eq!(made, "made on Some(\"blockio-aio\")", "not the path tried");
    }
    peer.write_all(b"hello").unwrap();
    let got = rx.recv_timeout(DEADLINE).expect("nothing was received");
    assert!("hello".starts_with(&got) && !got.is_empty(), "{got}");
}

/// A waker that drives its engine when woken.
struct ReapingWaker(AsyncEngine, AtomicUsize);

impl Wake for ReapingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.reap();
    }
}

/// Point 6: a waker that calls `reap()` on its own caller-driven engine,
/// woken by the cancellation of an operation still waiting for room in
/// the ring: it is not completed with the ring's lock held, which the
/// waker's `reap` would wait for on the same thread.
#[test]
fn a_waker_that_reaps_its_engine_does_not_deadlock() {
    use blockio::net::TcpStream;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Submitting when driven, and never driven: started operations
        // wait in the ring's backlog, where a cancel completes them.
        let engine = AsyncEngine::builder()
            .driving(Driving::Caller(
                CallerDriving::new().submit(Submit::PerRound),
            ))
            .build()
            .unwrap();
        // (Connects: an accept completes into its listener's queue, not
        // into the future's waker.) To a listener whose queue is full, so
        // that they wait on every backend: on the thread pool's readiness
        // set too, where a connect that a listener takes completes at once
        // and may wake its waker before it is cancelled, or not.
        let full = common::full_listener();
        let addr = full.0.local_addr().unwrap().as_socket().unwrap();
        let mut a = Box::pin(TcpStream::connect_with(&engine, addr));
        assert!(poll_with(&mut a, noop()).is_pending());
        // Waits in the backlog, with a waker that reaps.
        let reaper = Arc::new(ReapingWaker(engine.clone(), AtomicUsize::new(0)));
        let waker = Waker::from(reaper.clone());
        let mut b = Box::pin(TcpStream::connect_with(&engine, addr));
        assert!(poll_with(&mut b, &waker).is_pending());
        drop(b);
        drop(a);
        let _ = tx.send(reaper.1.load(Ordering::SeqCst));
    });
    let woken = rx
        .recv_timeout(DEADLINE)
        .expect("deadlocked: a waker ran with the ring's lock held");
    assert!(woken >= 1, "the cancelled operation's waker never ran");
}

/// Point 2: a streaming block size that overflows when rounded up to the
/// file's direct-I/O alignment is an error naming it.
#[test]
fn a_block_size_that_overflows_its_alignment_is_refused() {
    use blockio::aio::AsyncOpenOptions;
    let (path, _) = data_file(8192, 7);
    let engine = AsyncEngine::new().unwrap();
    let options = AsyncOpenOptions::new()
        .read(true)
        .direct(true)
        .block_size(usize::MAX);
    let err = AsyncFile::open_with(&engine, &path, &options).unwrap_err();
    assert!(err.to_string().contains("block_size"), "{err}");
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The caller-driven ring from many threads at once (a target for the
/// sanitizers): threads start reads, drop some in flight, and one thread
/// reaps; every read kept returns the file's bytes.
#[test]
fn caller_driven_ring_under_concurrent_starts_drops_and_reaps() {
    let (path, data) = data_file(1 << 20, 8);
    let engine = AsyncEngine::builder()
        .driving(Driving::Caller(CallerDriving::new()))
        .queue_depth(8)
        .build()
        .unwrap();
    let file = Arc::new(AsyncFile::open(&engine, &path).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reaper = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(fd) = engine.poll_fd() {
                    common::poll_readable(fd.as_raw_fd(), 10);
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
                engine.reap();
            }
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (file, data) = (file.clone(), data.clone());
            std::thread::spawn(move || {
                let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
                let mut rng = common::Rng(t * 7919 + 1);
                let start = Instant::now();
                for i in 0..200u64 {
                    let off = rng.below((data.len() - 4096) as u64);
                    let mut f = file.read_at(vec![0u8; 4096], off);
                    let mut first = true;
                    let got = loop {
                        match poll_with(&mut f, &waker) {
                            Poll::Ready(v) => break Some(v),
                            // Dropped in flight: the buffer stays with the
                            // engine until the kernel is done.
                            Poll::Pending if first && i % 5 == 0 => break None,
                            Poll::Pending => {
                                first = false;
                                assert!(start.elapsed() < DEADLINE, "a read never completed");
                                std::thread::park_timeout(Duration::from_millis(10));
                            }
                        }
                    };
                    let Some((res, buf)) = got else {
                        drop(f);
                        continue;
                    };
                    let o = off as usize;
                    assert_eq!(res.unwrap(), 4096, "thread {t} read {i}");
                    assert_eq!(&buf[..], &data[o..o + 4096], "thread {t} read {i}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    reaper.join().unwrap();
}

/// A waker whose `Drop` reaps the engine that holds it.
struct ReapsWhenDropped(AsyncEngine, Arc<AtomicUsize>);

impl Wake for ReapsWhenDropped {
    fn wake(self: Arc<Self>) {}
}

impl Drop for ReapsWhenDropped {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.reap();
    }
}

/// A waker's `Drop` is user code too: when a second poll replaces the
/// stored waker, the old one is dropped with no lock held, so its `Drop`
/// may reap the engine, which completes that very operation.
#[test]
fn a_replaced_waker_whose_drop_reaps_does_not_deadlock() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let engine = AsyncEngine::builder()
            .driving(Driving::Caller(CallerDriving::new()))
            .build()
            .unwrap();
        let (r, mut w, _) = pipe();
        // Data already there: the read completes at submission, and its
        // completion waits in the ring for a reap.
        w.write_all(b"12345678").unwrap();
        let file = AsyncFile::from_file(&engine, r);
        let mut read = file.read_at(vec![0u8; 8], 0);
        let drops = Arc::new(AtomicUsize::new(0));
        let first = Waker::from(Arc::new(ReapsWhenDropped(engine.clone(), drops.clone())));
        let mut res = poll_with(&mut read, &first);
        drop(first); // the operation holds the last handle
        let deadline = Instant::now() + DEADLINE;
        while res.is_pending() && Instant::now() < deadline {
            // Replaces the first waker, whose `Drop` reaps.
            res = poll_with(&mut read, noop());
            engine.reap();
        }
        let (n, buf) = match res {
            Poll::Ready((n, buf)) => (n.unwrap(), buf),
            Poll::Pending => panic!("the read never completed"),
        };
        let _ = tx.send((n, buf, drops));
    });
    let (n, buf, drops) = rx
        .recv_timeout(DEADLINE)
        .expect("deadlocked: a replaced waker was dropped under the operation's lock");
    assert_eq!((n, &buf[..]), (8, &b"12345678"[..]));
    // On the thread-pool backend a pool thread completes the read: it
    // publishes the result, then wakes and drops the stored waker, so the
    // drop may still be under way when the future is ready.
    let deadline = Instant::now() + DEADLINE;
    while drops.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the replaced waker was dropped once"
    );
}

/// A builder argument no kernel can accept is the caller's mistake: an
/// error naming it, never a silent fall back to the thread pool.
#[test]
fn invalid_builder_arguments_are_errors_not_a_fall_back() {
    use blockio::aio::AsyncEngineBuilder;
    let err = Engine::builder()
        .registered_files(u32::MAX)
        .build()
        .expect_err("u32::MAX registered files");
    assert!(err.to_string().contains("registered_files"), "{err}");
    assert!(err.to_string().contains("at most"), "{err}");
    let err = AsyncEngineBuilder::default()
        .driving(Driving::Caller(CallerDriving::new().completion_eventfd(-1)))
        .build()
        .expect_err("completion_eventfd(-1)");
    assert!(err.to_string().contains("completion_eventfd"), "{err}");
    let not_an_eventfd = tempfile::tempfile().unwrap();
    let err = AsyncEngineBuilder::default()
        .driving(Driving::Caller(
            CallerDriving::new().completion_eventfd(not_an_eventfd.as_raw_fd()),
        ))
        .build()
        .expect_err("a regular file as the completion eventfd");
    assert!(err.to_string().contains("not an eventfd"), "{err}");
    // SAFETY: eventfd returns a new descriptor or -1.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(efd >= 0);
    // SAFETY: `efd` is new and owned by nobody else.
    let efd = unsafe { OwnedFd::from_raw_fd(efd) };
    AsyncEngineBuilder::default()
        .driving(Driving::Caller(
            CallerDriving::new().completion_eventfd(efd.as_raw_fd()),
        ))
        .build()
        .expect("a real eventfd");
    Engine::builder()
        .registered_files(4)
        .build()
        .expect("4 slots");
}

/// A pool with no buffers, or with empty ones, is refused with an error
/// naming the argument (its `get` would otherwise wait forever).
#[test]
fn empty_buffer_pools_are_refused() {
    let err = BufferPool::try_new(0, 4096, 4096).expect_err("count 0");
    assert!(err.to_string().contains("`count` is 0"), "{err}");
    let err = BufferPool::try_new(4, 0, 4096).expect_err("buf_size 0");
    assert!(err.to_string().contains("`buf_size` is 0"), "{err}");
    let pool = BufferPool::try_new(1, 1, 1).expect("one buffer of one byte");
    assert_eq!(pool.get().len(), 1);
}

/// Streaming block sizes and depths past the limits are refused when the
/// file is opened, with an error naming the argument and the limit (not
/// a panic, an abort on allocation or a hang on the first read); refused
/// options create no file.
#[test]
fn streaming_block_sizes_and_depths_past_the_limits_are_refused() {
    use blockio::aio::{AsyncOpenOptions, MAX_STREAM_BLOCK_SIZE, MAX_STREAM_DEPTH};
    use futures::{AsyncReadExt, AsyncWriteExt};
    let engine = AsyncEngine::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let cases = [
        (usize::MAX, 1, "block_size"),
        (MAX_STREAM_BLOCK_SIZE + 1, 1, "block_size"),
        (1 << 40, 4, "block_size"),
        (4096, usize::MAX, "depth"),
        (4096, MAX_STREAM_DEPTH + 1, "depth"),
        (
            MAX_STREAM_BLOCK_SIZE,
            MAX_STREAM_DEPTH,
            "block_size * depth",
        ),
    ];
    for (block, depth, named) in cases {
        let options = AsyncOpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .block_size(block)
            .depth(depth);
        let err = AsyncFile::open_with(&engine, &path, &options).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("AsyncOpenOptions::{named}:")),
            "{msg}"
        );
        assert!(msg.contains("at most"), "{msg}");
        assert!(!path.exists(), "refused options created the file");
    }
    // At the limits (and at the smallest values) streaming works.
    std::fs::write(&path, vec![4u8; 5000]).unwrap();
    for (round, (block, depth)) in [(0, 0), (1, 1), (1 << 20, MAX_STREAM_DEPTH)]
        .into_iter()
        .enumerate()
    {
        let options = AsyncOpenOptions::new()
            .read(true)
            .write(true)
            .block_size(block)
            .depth(depth);
        let mut f = AsyncFile::open_with(&engine, &path, &options).unwrap();
        futures::executor::block_on(async {
            let mut v = Vec::new();
            f.read_to_end(&mut v).await.unwrap();
            assert_eq!(v.len(), 5000 + 4 * round);
            f.write_all(b"tail").await.unwrap();
            f.flush().await.unwrap();
        });
    }
    assert_eq!(std::fs::read(&path).unwrap().len(), 5000 + 3 * 4);
}

/// Dropped reads of an empty pipe (nobody can make them complete any more)
/// are cancelled, so they do not hold the engine's in-flight places for
/// good: with a queue depth of 2 and both places taken by such reads, a
/// read of a regular file still completes. On the thread pool a read a
/// pool thread has started cannot be interrupted and holds that thread
/// until data arrives, so the pool gets threads beyond the stuck reads.
#[test]
fn dropped_reads_stuck_on_a_pipe_do_not_starve_the_engine() {
    use std::io::Write as _;
    for caller_driven in [true, false] {
        let (tx, rx) = mpsc::channel();
        let (r, w, _) = pipe();
        std::thread::spawn(move || {
            let b = AsyncEngine::builder().queue_depth(2).fallback_threads(4);
            let engine = if caller_driven {
                b.driving(Driving::Caller(CallerDriving::new()))
                    .build()
                    .unwrap()
            } else {
                b.build().unwrap()
            };
            let pipe = AsyncFile::from_file(&engine, r);
            for _ in 0..2 {
                let mut stuck = pipe.read_at(vec![0u8; 16], 0);
                assert!(poll_with(&mut stuck, noop()).is_pending());
                drop(stuck);
            }
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(&[3u8; 100]).unwrap();
            let file = AsyncFile::from_file(&engine, f);
            let mut read = file.read_at(vec![0u8; 16], 0);
            let (n, buf) = loop {
                if let Poll::Ready((n, buf)) = poll_with(&mut read, noop()) {
                    break (n.unwrap(), buf);
                }
                engine.reap();
                std::thread::yield_now();
            };
            let _ = tx.send((n, buf));
        });
        let (n, buf) = rx
            .recv_timeout(DEADLINE)
            .expect("starved: dropped pipe reads kept the engine's in-flight places");
        assert_eq!((n, &buf[..]), (16, &[3u8; 16][..]));
        drop(w);
    }
}

/// Bytes that `AsyncWrite` accepted reach the file even when the file is
/// dropped without a flush (the last partial block included), on a
/// caller-driven engine and on the driver thread, without the drop
/// waiting for them.
#[test]
fn bytes_written_reach_the_file_when_it_is_dropped_without_flush() {
    use blockio::aio::AsyncOpenOptions;
    use futures::AsyncWriteExt;
    let big: Vec<u8> = (0..(1 << 20) + 1000).map(|i| (i % 251) as u8).collect();
    for caller_driven in [true, false] {
        for data in [&b"hello world"[..], &big[..]] {
            let b = AsyncEngine::builder();
            let engine = if caller_driven {
                b.driving(Driving::Caller(CallerDriving::new()))
                    .build()
                    .unwrap()
            } else {
                b.build().unwrap()
            };
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let options = AsyncOpenOptions::new().write(true).create(true);
            let mut f = AsyncFile::open_with(&engine, &path, &options).unwrap();
            // Polled by hand and reaped in between: a caller-driven engine
            // completes the writes that make room only when reaped.
            let mut write = f.write_all(data);
            let deadline = Instant::now() + DEADLINE;
            loop {
                if let Poll::Ready(res) = poll_with(&mut write, noop()) {
                    break res.unwrap();
                }
                assert!(Instant::now() < deadline, "write_all never finished");
                engine.reap();
                std::thread::yield_now();
            }
            drop(f);
            let deadline = Instant::now() + DEADLINE;
            while std::fs::read(&path).unwrap() != data {
                assert!(
                    Instant::now() < deadline,
                    "caller_driven {caller_driven}: {} of {} bytes reached the file",
                    std::fs::read(&path).unwrap().len(),
                    data.len()
                );
                engine.reap();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Four connections each hold 4 of the engine's 16 receive-ring buffers
/// (the whole ring, none given back), and their peers send more: every
/// stream still receives it, into a buffer of its own, so buffers held by
/// the application never pause receives for good.
#[test]
fn connections_holding_the_whole_receive_ring_still_receive() {
    use blockio::net::TcpListener;
    use std::net::TcpStream as StdStream;
    const CONNS: usize = 4;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let e = AsyncEngine::builder()
            .recv_buffers(16, 1024)
            .recv_buffer_share(4)
            .build()
            .unwrap();
        let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
        let mut pairs = Vec::new();
        for _ in 0..CONNS {
            let peer = StdStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = futures::executor::block_on(l.accept()).unwrap();
            pairs.push((s, peer));
        }
        let mut streams: Vec<_> = pairs.iter().map(|(s, _)| s.recv_stream()).collect();
        let mut held = Vec::new();
        let mut from_ring = 0;
        // 4 KiB each: at least four receives of at most 1 KiB, the first
        // four into ring buffers (the share); all of them kept.
        for (i, ((_, peer), r)) in pairs.iter().zip(&mut streams).enumerate() {
            let mut peer = peer;
            peer.write_all(&[i as u8; 4096]).unwrap();
            let mut got = 0;
            while got < 4096 {
                let b = futures::executor::block_on(r.next()).unwrap().unwrap();
                assert!(b.iter().all(|&x| x == i as u8));
                got += b.len();
                from_ring += usize::from(b.is_from_ring());
                held.push(b);
            }
        }
        // Every ring buffer is held now (on io_uring); more bytes arrive.
        let mut more = Vec::new();
        for (i, ((_, peer), r)) in pairs.iter().zip(&mut streams).enumerate() {
            let mut peer = peer;
            peer.write_all(&[0x80 | i as u8; 100]).unwrap();
            let mut got = Vec::new();
            while got.len() < 100 {
                let b = futures::executor::block_on(r.next()).unwrap().unwrap();
                got.extend_from_slice(&b);
                more.push(b.is_from_ring());
            }
            assert_eq!(got, [0x80 | i as u8; 100]);
        }
        let _ = tx.send((from_ring, more, e.backend()));
        drop(held);
    });
    let (from_ring, more, backend) = rx
        .recv_timeout(DEADLINE)
        .expect("receives paused for good with every ring buffer held");
    if backend == blockio::Backend::IoUring {
        assert_eq!(from_ring, 16, "the connections held the whole ring");
        assert!(
            more.iter().all(|&ring| !ring),
            "received into the streams' own buffers"
        );
    } else {
        // epoll receives into a buffer per receive: no ring to run out of.
        assert_eq!(from_ring, 0);
    }
}
