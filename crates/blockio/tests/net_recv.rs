//! Receive streams (`recv_stream`): multishot receives into the engine's
//! shared buffer ring on io_uring, one receive at a time on epoll. Every
//! byte is checked against what the peer sent.

use std::io::Write;
use std::net::TcpStream as StdStream;
use std::time::Duration;

use blockio::aio::{AsyncEngine, CallerDriving, Driving, Submit};
use blockio::net::{RecvBuf, RecvStream, TcpListener, TcpStream};
use blockio::Backend;

mod common;
use common::Bounded;

/// `n` pseudo-random bytes from `seed` (xorshift), different per stream.
fn payload(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = common::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..n).map(|_| rng.next() as u8).collect()
}

/// `count` accepted server streams and their std peers.
fn pairs(e: &AsyncEngine, count: usize) -> Vec<(TcpStream, StdStream)> {
    let l = futures::executor::block_on(TcpListener::bind_with(e, "127.0.0.1:0")).unwrap();
    (0..count)
        .map(|_| {
            let peer = StdStream::connect(l.local_addr().unwrap())
                .unwrap()
                .bounded();
            let (s, _) = futures::executor::block_on(l.accept()).unwrap();
            (s, peer)
        })
        .collect()
}

/// Sends `data` from a thread in writes of varied sizes, then shuts the
/// sending side down (for every clone of the socket).
fn send_from_thread(mut peer: StdStream, data: Vec<u8>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut at = 0;
        let mut step = 1;
        while at < data.len() {
            let end = (at + step).min(data.len());
            peer.write_all(&data[at..end]).unwrap();
            at = end;
            step = step * 7 % 9001 + 1;
        }
        peer.shutdown(std::net::Shutdown::Write).unwrap();
    })
}

/// Collects a receive stream to its end.
async fn collect(mut r: RecvStream<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(b) = r.next().await {
        out.extend_from_slice(&b.unwrap());
    }
    out
}

fn ring_expected(e: &AsyncEngine) -> bool {
    e.backend() == Backend::IoUring
}

#[test]
fn receive_streams_carry_every_byte_in_order() {
    let e = AsyncEngine::new().unwrap();
    let pairs = pairs(&e, 20);
    let mut senders = Vec::new();
    let mut want = Vec::new();
    let mut servers = Vec::new();
    for (i, (s, peer)) in pairs.into_iter().enumerate() {
        let data = payload(i as u64, 100_000 + i * 7919);
        want.push(data.clone());
        senders.push(send_from_thread(peer, data));
        servers.push(s);
    }
    let got = futures::executor::block_on(futures::future::join_all(servers.iter().map(|s| {
        let r = s.recv_stream();
        assert_eq!(r.uses_ring(), ring_expected(&e));
        collect(r)
    })));
    for t in senders {
        t.join().unwrap();
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == w,
            "stream {i}: {} bytes received, {} sent",
            g.len(),
            w.len()
        );
    }
}

fn bytes_of(bufs: &[RecvBuf]) -> Vec<u8> {
    bufs.iter().flat_map(|b| b.iter().copied()).collect()
}

/// Eight 1 KiB buffers, at most four per connection, shared by four
/// connections whose peers each send 64 KiB at once. Two slow readers, A
/// and B, keep everything they receive: each holds at most its share of
/// the ring (the rest comes in buffers of their own), and C moves all its
/// bytes while A holds on. With A and B holding the whole ring, D pauses
/// (`ENOBUFS`) and still receives, into buffers of its own. No connection
/// ends early or loses a byte.
#[test]
fn running_out_of_buffers_pauses_and_no_reader_starves_the_others() {
    let e = AsyncEngine::builder()
        .recv_buffers(8, 1024)
        .recv_buffer_share(4)
        .build()
        .unwrap();
    let ring = ring_expected(&e);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pairs = pairs(&e, 4);
    let data: Vec<Vec<u8>> = (0..4).map(|i| payload(100 + i, 64 << 10)).collect();
    let senders: Vec<_> = pairs
        .iter()
        .zip(&data)
        .map(|((_, peer), d)| send_from_thread(peer.try_clone().unwrap(), d.clone()))
        .collect();
    let [a, b, c, d] = [&pairs[0].0, &pairs[1].0, &pairs[2].0, &pairs[3].0];
    let from_ring = |bufs: &[RecvBuf]| bufs.iter().filter(|b| b.is_from_ring()).count();
    let run = async {
        let (mut ra, mut rb, mut rd) = (a.recv_stream(), b.recv_stream(), d.recv_stream());
        assert_eq!(ra.uses_ring(), ring);
        // A slow reader holds everything it gets: its share of the ring,
        // no more, and all its bytes.
        let held_a = pull_all(&mut ra).await;
        assert!(bytes_of(&held_a) == data[0], "A's bytes differ");
        if ring {
            assert_eq!(from_ring(&held_a), 4, "a reader with a share of 4 holds");
        }
        // C moves all its bytes while A holds on.
        let got_c = collect(c.recv_stream()).await;
        assert!(got_c == data[2], "C's bytes differ");
        // B takes the other half of the ring...
        let held_b = pull_all(&mut rb).await;
        assert!(bytes_of(&held_b) == data[1], "B's bytes differ");
        // ...so D finds none: it pauses and receives into its own.
        let held_d = pull_all(&mut rd).await;
        assert!(bytes_of(&held_d) == data[3], "D's bytes differ");
        if ring {
            assert_eq!(from_ring(&held_b), 4);
            assert_eq!(from_ring(&held_d), 0, "D got buffers from an empty ring");
            assert!(rd.pauses() >= 1, "D did not pause with the ring empty");
        }
    };
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("a reader holding its buffers stalled")
    });
    for t in senders {
        t.join().unwrap();
    }
}

/// Pulls items to the end of the stream, keeping every one.
async fn pull_all(r: &mut RecvStream<'_>) -> Vec<RecvBuf> {
    let mut held = Vec::new();
    while let Some(b) = r.next().await {
        held.push(b.unwrap());
    }
    held
}

/// More connections than the ring has buffers, each consumer keeping every
/// buffer it received while it awaits the next (the pattern that held the
/// whole ring with every receive waiting for it): every stream finishes,
/// every byte in order.
#[test]
fn consumers_holding_buffers_while_awaiting_the_next_all_finish() {
    const CONNS: usize = 64;
    let e = AsyncEngine::builder()
        .recv_buffers(16, 1024)
        .recv_buffer_share(4)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pairs = pairs(&e, CONNS);
    let data: Vec<Vec<u8>> = (0..CONNS as u64)
        .map(|i| payload(7 + i, 16 << 10))
        .collect();
    let mut senders = Vec::new();
    let mut tasks = Vec::new();
    for ((s, peer), d) in pairs.into_iter().zip(&data) {
        senders.push(send_from_thread(peer, d.clone()));
        tasks.push(rt.spawn(async move {
            let mut r = s.recv_stream();
            let held = pull_all(&mut r).await;
            drop(r);
            bytes_of(&held)
        }));
    }
    let got = rt.block_on(async {
        let all = futures::future::join_all(tasks);
        tokio::time::timeout(Duration::from_secs(30), all)
            .await
            .expect("receive streams stalled with their consumers holding buffers")
    });
    for (i, (g, d)) in got.into_iter().zip(&data).enumerate() {
        assert!(g.unwrap() == *d, "connection {i}: bytes differ");
    }
    for t in senders {
        t.join().unwrap();
    }
}

/// With a share as large as the ring, the receive is multishot: armed
/// once, a completion per buffer; every byte still arrives in order.
#[test]
fn a_multishot_receive_carries_every_byte() {
    let e = AsyncEngine::builder()
        .recv_buffers(16, 2048)
        .recv_buffer_share(16)
        .build()
        .unwrap();
    let mut p = pairs(&e, 1);
    let (s, peer) = p.pop().unwrap();
    let data = payload(3, 1 << 20);
    let sender = send_from_thread(peer, data.clone());
    let got = futures::executor::block_on(collect(s.recv_stream()));
    sender.join().unwrap();
    assert!(got == data, "{} of {} bytes", got.len(), data.len());
}

/// Receive streams dropped after a few items, and owned reads between
/// them, over 2 MiB: what a dropped stream's armed receive took comes out
/// of the next read or stream, in order. Single-shot and multishot.
#[test]
fn a_dropped_receive_stream_loses_no_bytes() {
    for share in [32, 64] {
        dropped_streams_lose_no_bytes(share);
    }
}

fn dropped_streams_lose_no_bytes(share: usize) {
    let e = AsyncEngine::builder()
        .recv_buffers(64, 512)
        .recv_buffer_share(share)
        .build()
        .unwrap();
    let mut p = pairs(&e, 1);
    let (s, peer) = p.pop().unwrap();
    let data = payload(7, 2 << 20);
    let sender = send_from_thread(peer, data.clone());
    let got = futures::executor::block_on(async {
        let mut got = Vec::new();
        let mut round = 0usize;
        loop {
            round += 1;
            if round % 3 == 0 {
                let (n, buf) = s.read(vec![0u8; 700]).await;
                let n = n.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                continue;
            }
            let mut r = s.recv_stream();
            let mut ended = false;
            for _ in 0..(round % 4 + 1) {
                match r.next().await {
                    Some(b) => got.extend_from_slice(&b.unwrap()),
                    None => {
                        ended = true;
                        break;
                    }
                }
            }
            drop(r);
            if ended {
                break;
            }
        }
        got
    });
    sender.join().unwrap();
    assert_eq!(got.len(), data.len(), "share {share}");
    assert!(got == data, "bytes differ with a share of {share}");
}

/// Reads through the `AsyncRead` traits (which keep one multishot receive
/// armed across reads on io_uring), owned reads, receive streams (which
/// have that receive cancelled first), peeks (whose bytes must be the
/// next read's), trait reads dropped after one pending poll and trait
/// reads through the stream's split read half, in turn, each taking less
/// than a ring buffer at times: every byte comes out once, in order, on
/// the driver thread and on a caller-driven ring. With a share of 2 buffers
/// the kept receive is cancelled for the share again and again (from its
/// completion, on whichever thread reaps it), and armed again by the next
/// read.
#[test]
fn trait_reads_mixed_with_owned_reads_and_receive_streams_keep_every_byte_in_order() {
    for caller in [false, true] {
        for share in [2, 32] {
            mixed_reads_keep_every_byte(share, caller);
        }
    }
}

fn mixed_reads_keep_every_byte(share: usize, caller: bool) {
    let mut b = AsyncEngine::builder()
        .recv_buffers(64, 512)
        .recv_buffer_share(share);
    if caller {
        b = b.driving(Driving::Caller(CallerDriving::new()));
    }
    let e = b.build().unwrap();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let peer = StdStream::connect(l.local_addr().unwrap())
        .unwrap()
        .bounded();
    let (mut s, _) = drive_until(&e, l.accept()).unwrap();
    let data = payload(11, 1 << 20);
    let sender = send_from_thread(peer, data.clone());
    let reads = async {
        let mut got = Vec::new();
        for round in 0usize.. {
            let n = match round % 8 {
                // Trait reads, of less than a ring buffer and of more.
                0..=2 => {
                    let mut buf = vec![0u8; [300, 2000, 1][round % 3]];
                    let n = futures::AsyncReadExt::read(&mut s, &mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                    n
                }
                3 => {
                    let (n, buf) = s.read(vec![0u8; 700]).await;
                    let n = n.unwrap();
                    got.extend_from_slice(&buf[..n]);
                    n
                }
                // A peek: the bytes are the next bytes, and stay for the
                // reads after it.
                5 => {
                    let mut buf = vec![0u8; 900];
                    let n = s.peek(&mut buf).await.unwrap();
                    let at = got.len();
                    assert!(
                        buf[..n] == data[at..at + n],
                        "a peek at {at} saw other bytes: share {share}, caller-driven {caller}"
                    );
                    // Only at the end does a peek see nothing; a read
                    // ends the loop there.
                    assert!(n > 0 || at == data.len(), "an empty peek at {at}");
                    1
                }
                // A trait read polled once: pending, it is dropped and
                // loses nothing; ready, its bytes count.
                6 => {
                    let mut buf = vec![0u8; 1500];
                    let read = futures::AsyncReadExt::read(&mut s, &mut buf);
                    if let Some(n) = futures::FutureExt::now_or_never(read) {
                        let n = n.unwrap();
                        got.extend_from_slice(&buf[..n]);
                        if n == 0 {
                            break;
                        }
                    }
                    1
                }
                // Through the split read half.
                7 => {
                    let (mut rd, _wr) = s.split();
                    let mut buf = vec![0u8; 3000];
                    let n = futures::AsyncReadExt::read(&mut rd, &mut buf)
                        .await
                        .unwrap();
                    got.extend_from_slice(&buf[..n]);
                    n
                }
                _ => match s.recv_stream().next().await {
                    Some(b) => {
                        let b = b.unwrap();
                        got.extend_from_slice(&b);
                        b.len()
                    }
                    None => 0,
                },
            };
            if n == 0 {
                break;
            }
        }
        got
    };
    let got = if caller {
        drive_until(&e, reads)
    } else {
        futures::executor::block_on(reads)
    };
    sender.join().unwrap();
    assert_eq!(
        got.len(),
        data.len(),
        "share {share}, caller-driven {caller}"
    );
    assert!(
        got == data,
        "bytes differ: share {share}, caller-driven {caller}"
    );
}

/// A peek after a trait read (which keeps a multishot receive armed on
/// io_uring) sees the bytes that arrive after it: the peer sends `hello`,
/// a peek sees it, the peer sends `world`, and peeking again and again
/// (each peek returns at once with what it has) sees all ten bytes, which
/// the next read then takes. Peeks that only ever saw bytes taken from
/// the socket, not those the kept receive had posted, saw `hello` for
/// ever; the loop's bound, far above what a busy machine costs, ends it.
#[test]
fn a_peek_loop_after_a_trait_read_sees_the_bytes_that_come() {
    for caller in [false, true] {
        let mut b = AsyncEngine::builder();
        if caller {
            b = b.driving(Driving::Caller(CallerDriving::new()));
        }
        let e = b.build().unwrap();
        let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
        let mut peer = StdStream::connect(l.local_addr().unwrap())
            .unwrap()
            .bounded();
        let (mut s, _) = drive_until(&e, l.accept()).unwrap();
        // A trait read that finds nothing (on io_uring it arms the kept
        // receive), dropped; the next one takes the first byte.
        let mut one = [0u8; 1];
        let first = futures::AsyncReadExt::read(&mut s, &mut one);
        assert!(futures::FutureExt::now_or_never(first).is_none());
        peer.write_all(b"X").unwrap();
        drive_until(&e, futures::AsyncReadExt::read_exact(&mut s, &mut one)).unwrap();
        assert_eq!(&one, b"X");
        peer.write_all(b"hello").unwrap();
        let mut buf = [0u8; 10];
        let mut n = drive_until(&e, s.peek(&mut buf)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while n < 5 {
            assert!(
                std::time::Instant::now() < deadline,
                "a peek loop saw only {:?}: caller-driven {caller}",
                String::from_utf8_lossy(&buf[..n])
            );
            e.reap();
            n = drive_until(&e, s.peek(&mut buf)).unwrap();
        }
        assert_eq!(&buf[..n], b"hello", "caller-driven {caller}");
        peer.write_all(b"world").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while n < 10 {
            assert!(
                std::time::Instant::now() < deadline,
                "a peek loop saw only {:?}: caller-driven {caller}",
                String::from_utf8_lossy(&buf[..n])
            );
            // A caller-driven ring's completions come in only as it is
            // driven (a peek with bytes does not wait).
            std::thread::yield_now();
            e.reap();
            n = drive_until(&e, s.peek(&mut buf)).unwrap();
        }
        assert_eq!(&buf, b"helloworld", "caller-driven {caller}");
        let mut all = [0u8; 10];
        drive_until(&e, futures::AsyncReadExt::read_exact(&mut s, &mut all)).unwrap();
        assert_eq!(&all, b"helloworld", "caller-driven {caller}");
    }
}

/// Whether `s` has bytes (or the end of the stream) to read now.
fn readable(s: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.socket().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, no waiting.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Fresh receive streams, each polled once and dropped while pending (a
/// `select!` whose other branch wins every turn), read every byte of
/// 4 MiB in order, single-shot and multishot, on the driver thread and
/// on a caller-driven ring that submits once per round, reaped between
/// polls: the loop makes progress
/// whenever the socket holds bytes. The bound on pending polls in a row
/// while it does is far above what a busy machine costs; a loop whose
/// dropped receives threw their progress away never ends its run.
#[test]
fn receive_streams_polled_once_and_dropped_read_every_byte() {
    for share in [32, 64] {
        let per_round = CallerDriving::new().submit(Submit::PerRound);
        for driving in [Driving::Thread, Driving::Caller(per_round)] {
            let what = format!("share {share}, {driving:?}");
            let e = AsyncEngine::builder()
                .driving(driving)
                .recv_buffers(64, 4096)
                .recv_buffer_share(share)
                .build()
                .unwrap();
            streams_polled_once_read_every_byte(&e, &what);
        }
    }
}

/// The loop of [`receive_streams_polled_once_and_dropped_read_every_byte`]
/// on `e`.
fn streams_polled_once_read_every_byte(e: &AsyncEngine, what: &str) {
    use futures_core::Stream;
    const STALL_LIMIT: u64 = 1_000_000;
    let (s, peer) = pairs(e, 1).pop().unwrap();
    let data = payload(11, 4 << 20);
    let sender = send_from_thread(peer, data.clone());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let (mut got, mut stall, mut worst) = (Vec::new(), 0u64, 0u64);
    while stall <= STALL_LIMIT {
        let ready = readable(&s);
        let mut r = s.recv_stream();
        match std::pin::Pin::new(&mut r).poll_next(&mut cx) {
            std::task::Poll::Ready(Some(b)) => {
                got.extend_from_slice(&b.unwrap());
                stall = 0;
            }
            std::task::Poll::Ready(None) => break,
            std::task::Poll::Pending if ready => {
                stall += 1;
                worst = worst.max(stall);
            }
            std::task::Poll::Pending => {}
        }
        drop(r);
        e.reap();
        std::thread::yield_now();
    }
    assert!(
        worst <= STALL_LIMIT,
        "{what}: {worst} pending polls in a row with bytes to read, {} of {} bytes read",
        got.len(),
        data.len()
    );
    sender.join().unwrap();
    assert!(got == data, "{what}: the bytes read differ from those sent");
}

/// A vectored write sends its buffers in order, in one call.
#[test]
fn writev_sends_buffers_in_order() {
    let e = AsyncEngine::new().unwrap();
    let mut p = pairs(&e, 1);
    let (s, mut peer) = p.pop().unwrap();
    let bufs = vec![
        b"one ".to_vec(),
        Vec::new(),
        b"two ".to_vec(),
        b"three".to_vec(),
    ];
    let (n, back) = futures::executor::block_on(s.writev(bufs));
    assert_eq!(n.unwrap(), 13);
    assert_eq!(back.len(), 4, "the buffers come back");
    drop(s);
    let mut got = String::new();
    std::io::Read::read_to_string(&mut peer, &mut got).unwrap();
    assert_eq!(got, "one two three");
}

/// A bad buffer shape is refused when the engine is built, naming the
/// option.
#[test]
fn a_bad_buffer_shape_is_refused_by_name() {
    let err = AsyncEngine::builder()
        .recv_buffers(100, 4096)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("recv_buffers"), "{err}");
}

/// Polls `fut` to completion on this thread, reaping a caller-driven
/// engine's completions whenever its ring is readable (the thread pool
/// completes on its own threads: there is nothing to reap).
fn drive_until<F: std::future::Future>(e: &AsyncEngine, fut: F) -> F::Output {
    use std::os::fd::AsRawFd;
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stalled with completions unreaped"
        );
        match e.poll_fd() {
            Some(fd) => {
                common::poll_readable(fd.as_raw_fd(), 10);
                e.reap();
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// A caller-driven ring's completion queue overflows (a multishot receive
/// posts a completion per 64-byte buffer, far more than a 2-entry ring's
/// queue of 4 holds), and every byte still arrives, in order: reaping
/// flushes the completions the kernel kept aside, though nothing else is
/// submitted that would.
#[test]
fn completions_that_overflow_a_caller_driven_ring_are_all_reaped() {
    let e = AsyncEngine::builder()
        .queue_depth(2)
        .driving(Driving::Caller(CallerDriving::new()))
        .recv_buffers(64, 64)
        .recv_buffer_share(64)
        .build()
        .unwrap();
    assert_eq!(e.poll_fd().is_some(), ring_expected(&e));
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let mut peer = StdStream::connect(l.local_addr().unwrap())
        .unwrap()
        .bounded();
    let (s, _) = drive_until(&e, l.accept()).unwrap();
    let data = payload(9, 3000);
    peer.write_all(&data).unwrap();
    // All of it waits in the socket when the receive is armed.
    common::wait_until("the bytes wait in the socket", || {
        let mut peek = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        s.socket()
            .recv_with_flags(&mut peek, libc::MSG_PEEK | libc::MSG_DONTWAIT)
            .is_ok_and(|n| n == data.len())
    });
    let mut rx = s.recv_stream();
    let mut got = Vec::new();
    while got.len() < data.len() {
        let b = drive_until(&e, rx.next())
            .expect("the stream ended early")
            .unwrap();
        got.extend_from_slice(&b);
    }
    assert!(
        got == data,
        "{} of {} bytes, or out of order",
        got.len(),
        data.len()
    );
}
