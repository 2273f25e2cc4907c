//! `blockio::net` against real peers: std's blocking sockets on the other
//! end, on tokio's multi-thread runtime, smol and `block_on`.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream as StdStream};
use std::time::Duration;

use blockio::aio::{AsyncEngine, CallerDriving, Driving, IoBuf, Submit};
use blockio::net::{TcpListener, TcpStream};

mod common;
#[cfg(feature = "tokio")]
use common::two_workers;
use common::{current_thread, Bounded};

fn engine() -> AsyncEngine {
    AsyncEngine::new().unwrap()
}

fn assert_send<T: Send>(_: &T) {}
fn assert_sync<T: Sync>(_: &T) {}

/// A stream is a few words, its state on the heap: a program's task holds
/// its streams inline (an `async move` block that hands its stream on
/// holds it twice, captured and moved), so its size counts twice per
/// connection (`docs/benchmarks.md`, "Memory a hyper server keeps after
/// 5,000 connections"). The same on every backend: the state
/// is boxed whatever drives it.
#[test]
fn a_stream_is_a_few_words() {
    let words = std::mem::size_of::<usize>();
    for (name, size) in [
        ("TcpStream", std::mem::size_of::<TcpStream>()),
        (
            "UnixStream",
            std::mem::size_of::<blockio::net::UnixStream>(),
        ),
    ] {
        assert!(size <= 8 * words, "{name} is {size} bytes inline");
    }
}

#[test]
fn futures_are_send() {
    let e = engine();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let accept = l.accept();
    assert_send(&accept);
    let connect = TcpStream::connect_with(&e, l.local_addr().unwrap());
    assert_send(&connect);
    let s = futures::executor::block_on(async {
        let (c, a) = futures::join!(connect, accept);
        drop(a.unwrap());
        c.unwrap()
    });
    assert_send(&s);
    assert_sync(&s);
    assert_send(&s.read(vec![0u8; 1]));
    assert_send(&s.write_all(vec![0u8; 1]));
}

/// 50 clients on std threads, each sending 200 numbered messages and
/// checking every echo byte; the server runs one task per connection on
/// tokio's multi-thread runtime.
#[test]
fn echo_many_connections_on_tokio_multi_thread() {
    let e = engine();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let listener = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1000];
                loop {
                    let (res, b) = s.read(buf).await;
                    let n = res.unwrap();
                    if n == 0 {
                        return;
                    }
                    let (res, b) = s.write_all(b[..n].to_vec()).await;
                    res.unwrap();
                    buf = b;
                    buf.resize(1000, 0);
                }
            });
        }
    });
    let clients: Vec<_> = (0..50u32)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = StdStream::connect(addr).unwrap().bounded();
                for m in 0..200u32 {
                    let msg: Vec<u8> = (0..(1 + (c * 7 + m) % 300))
                        .map(|i| (c + m + i) as u8)
                        .collect();
                    s.write_all(&msg).unwrap();
                    let mut back = vec![0u8; msg.len()];
                    s.read_exact(&mut back).unwrap();
                    assert_eq!(back, msg, "client {c} message {m}");
                }
                s.shutdown(Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

/// Bytes that wait unread in `s`'s receive queue (a peek, up to 64 KiB).
fn unread(s: &TcpStream) -> usize {
    let mut peek = [std::mem::MaybeUninit::<u8>::uninit(); 64 << 10];
    s.socket()
        .recv_with_flags(&mut peek, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        .unwrap_or(0)
}

fn pair(e: &AsyncEngine) -> (TcpStream, StdStream) {
    let l = futures::executor::block_on(TcpListener::bind_with(e, "127.0.0.1:0")).unwrap();
    let peer = StdStream::connect(l.local_addr().unwrap())
        .unwrap()
        .bounded();
    let (s, addr) = futures::executor::block_on(l.accept()).unwrap();
    assert_eq!(addr, peer.local_addr().unwrap());
    assert_eq!(s.peer_addr().unwrap(), peer.local_addr().unwrap());
    (s, peer)
}

/// Streams and listeners give their descriptors as tokio's do (`AsFd`,
/// `AsRawFd`): `socket2::SockRef` sets options through them, and the
/// number is the socket's.
#[test]
fn streams_and_listeners_give_their_descriptors_as_tokios_do() {
    use std::os::fd::{AsFd, AsRawFd};
    let e = engine();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let listening = socket2::SockRef::from(&l).local_addr().unwrap();
    assert_eq!(listening.as_socket(), Some(l.local_addr().unwrap()));
    let (s, _peer) = pair(&e);
    assert_eq!(s.as_raw_fd(), s.socket().as_raw_fd());
    assert_eq!(s.as_fd().as_raw_fd(), s.socket().as_raw_fd());
    socket2::SockRef::from(&s).set_tcp_nodelay(true).unwrap();
    assert!(s.socket().tcp_nodelay().unwrap(), "set through the SockRef");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let ul = blockio::net::UnixListener::bind_with(&e, &path).unwrap();
    let unix_local = socket2::SockRef::from(&ul).local_addr().unwrap();
    assert_eq!(unix_local.as_pathname(), Some(path.as_path()));
    let connect = blockio::net::UnixStream::connect_with(&e, &path);
    let (c, accepted) = futures::executor::block_on(futures::future::join(connect, ul.accept()));
    let (c, (a, _)) = (c.unwrap(), accepted.unwrap());
    assert_eq!(c.as_raw_fd(), c.socket().as_raw_fd());
    assert_eq!(a.as_fd().as_raw_fd(), a.socket().as_raw_fd());
    assert_ne!(ul.as_raw_fd(), a.as_raw_fd());
}

#[test]
fn a_read_dropped_by_a_timeout_loses_no_bytes() {
    let e = engine();
    let rt = current_thread();
    let (s, mut peer) = pair(&e);
    // Messages land around the moment each read times out: every byte must
    // still come out once, in order. Every 100 messages the writer waits
    // for a go signal, so the read at that point finds an idle stream and
    // must time out however fast or slow the machine is.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        for i in 0..400u32 {
            if i % 100 == 0 {
                go_rx.recv().unwrap();
            }
            peer.write_all(&i.to_le_bytes()).unwrap();
            // Pauses of 0-3 ms around the reads' 1-2 ms limits (tokio's
            // timer ticks in milliseconds).
            std::thread::sleep(Duration::from_millis(u64::from(i % 4)));
        }
        peer
    });
    let got = rt.block_on(async {
        let mut got = Vec::new();
        let mut idle_timeouts = 0;
        while got.len() < 1600 {
            let limit = Duration::from_millis(1 + got.len() as u64 % 2);
            if got.len() % 400 == 0 && got.len() / 400 == idle_timeouts {
                let idle = tokio::time::timeout(limit, s.read(vec![0u8; 3])).await;
                assert!(idle.is_err(), "a read on an idle stream returned {idle:?}");
                idle_timeouts += 1;
                go_tx.send(()).unwrap();
                continue;
            }
            if let Ok((res, buf)) = tokio::time::timeout(limit, s.read(vec![0u8; 3])).await {
                got.extend_from_slice(&buf[..res.unwrap()]);
            }
        }
        assert_eq!(idle_timeouts, 4);
        got
    });
    let want: Vec<u8> = (0..400u32).flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(got, want);
    drop(writer.join().unwrap());
}

#[test]
fn bytes_a_dropped_read_received_come_from_the_next_read() {
    // The read is submitted, the data arrives and completes it in the
    // kernel, and only then is its future dropped, never polled again.
    let e = engine();
    let (s, mut peer) = pair(&e);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut read = Box::pin(s.read(vec![0u8; 4]));
    assert!(read.as_mut().poll(&mut cx).is_pending());
    peer.write_all(b"abcdefgh").unwrap();
    // The read has taken its 4 bytes in the kernel.
    common::wait_until("the read completes in the kernel", || unread(&s) == 4);
    drop(read);
    let rt = current_thread();
    let got = rt.block_on(async {
        let mut got = Vec::new();
        while got.len() < 8 {
            let read = s.read(vec![0u8; 3]);
            // A hang guard: the bytes are there, so only a lost one waits.
            match tokio::time::timeout(Duration::from_secs(60), read).await {
                Ok((n, buf)) => got.extend_from_slice(&buf[..n.unwrap()]),
                Err(_) => break,
            }
        }
        got
    });
    assert_eq!(got, b"abcdefgh", "bytes were lost or reordered");
}

#[test]
fn a_dropped_read_is_cancelled_in_the_kernel() {
    // If the dropped read stayed armed it would hold the socket open, and
    // the peer would never see the close.
    let e = engine();
    let rt = current_thread();
    let (s, mut peer) = pair(&e);
    rt.block_on(async {
        let r = tokio::time::timeout(Duration::from_millis(20), s.read(vec![0u8; 16])).await;
        assert!(r.is_err(), "nothing was sent, the read must time out");
    });
    drop(s);
    peer.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(peer.read(&mut buf).unwrap(), 0, "the peer saw no close");
}

#[test]
fn errors_are_the_kernels_as_on_std_and_tokio() {
    let e = engine();
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = futures::executor::block_on(TcpStream::connect_with(&e, port)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(blockio::errno(&err), Some(libc::ECONNREFUSED));
    assert_eq!(err.raw_os_error(), Some(libc::ECONNREFUSED), "{err}");

    // A peer that closed with unread data resets the connection; writing
    // on fails with EPIPE or ECONNRESET, never SIGPIPE (this process would
    // die of it).
    let (s, mut peer) = pair(&e);
    peer.write_all(b"unread").unwrap();
    common::wait_until("the bytes reach the stream", || unread(&s) == 6);
    drop(peer);
    let err = futures::executor::block_on(async {
        loop {
            if let (Err(e), _) = s.write_all(vec![1u8; 65536]).await {
                return e;
            }
        }
    });
    let errno = blockio::errno(&err);
    assert!(
        errno == Some(libc::EPIPE) || errno == Some(libc::ECONNRESET),
        "{err}"
    );
    assert_eq!(err.raw_os_error(), errno, "{err}");
}

#[test]
fn runs_on_smol_and_block_on() {
    let e = engine();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        smol::block_on(async {
            let (s, _) = l.accept().await.unwrap();
            let (n, buf) = s.read(vec![0u8; 5]).await;
            s.write_all(buf[..n.unwrap()].to_ascii_uppercase())
                .await
                .0
                .unwrap();
        })
    });
    futures::executor::block_on(async {
        let c = TcpStream::connect_with(&e, addr).await.unwrap();
        c.set_nodelay(true).unwrap();
        assert!(c.nodelay().unwrap());
        assert_eq!(c.local_addr().unwrap().ip(), addr.ip());
        c.write_all(b"hello".to_vec()).await.0.unwrap();
        let (n, buf) = c.read(vec![0u8; 5]).await;
        assert_eq!(&buf[..n.unwrap()], b"HELLO");
        let (n, _) = c.read(vec![0u8; 5]).await;
        assert_eq!(n.unwrap(), 0, "end of stream after the server closed");
    });
    server.join().unwrap();
}

#[test]
fn bind_errors_keep_their_errno() {
    let e = engine();
    let taken = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let options = blockio::net::TcpListenerOptions::default().reuse_address(false);
    let err = futures::executor::block_on(options.bind_with(&e, taken.local_addr().unwrap()))
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE), "{err}");
    assert_eq!(blockio::errno(&err), Some(libc::EADDRINUSE), "{err}");
}

#[test]
fn idle_connections_hold_no_threads() {
    // 100 reads waiting on idle connections, two fallback threads: a
    // further connection is still served (on the fallback, waiting reads
    // sit in an epoll set, not on pool threads).
    let e = AsyncEngine::builder().fallback_threads(2).build().unwrap();
    let rt = current_thread();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let peers: Vec<StdStream> = (0..101)
        .map(|_| StdStream::connect(l.local_addr().unwrap()).unwrap())
        .collect();
    rt.block_on(async {
        let mut idle = Vec::new();
        for _ in 0..100 {
            let (s, _) = l.accept().await.unwrap();
            idle.push(tokio::spawn(async move { s.read(vec![0u8; 8]).await.0 }));
        }
        tokio::task::yield_now().await;
        let (s, _) = l.accept().await.unwrap();
        let mut last = &peers[100];
        last.write_all(b"ping").unwrap();
        let (n, buf) = tokio::time::timeout(Duration::from_secs(60), s.read(vec![0u8; 4]))
            .await
            .expect("the 101st connection was not served");
        assert_eq!(&buf[..n.unwrap()], b"ping");
        for (i, mut p) in peers.iter().take(100).enumerate() {
            p.write_all(&[i as u8]).unwrap();
        }
        for (i, t) in idle.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().unwrap(), 1, "connection {i}");
        }
    });
}

/// The ring's descriptor, for tokio's reactor to watch; the engine clone
/// keeps it open while it is registered.
struct RingFd(AsyncEngine);

impl std::os::fd::AsRawFd for RingFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.poll_fd().expect("a caller-driven ring").as_raw_fd()
    }
}

/// Serves 8 echo clients of 50 messages each from a caller-driven engine
/// (submitting once per round of tasks) on `rt`, with the driving task
/// that `drive` spawns; every message must come back.
fn serve_driven(
    rt: &tokio::runtime::Runtime,
    drive: impl FnOnce(AsyncEngine) -> tokio::task::JoinHandle<()>,
) {
    let e = AsyncEngine::builder()
        .driving(Driving::Caller(
            CallerDriving::new().submit(Submit::PerRound),
        ))
        .build()
        .unwrap();
    // On the thread pool there is no ring: operations complete on its
    // threads and wake their tasks, with nothing to drive.
    let uring = e.backend() == blockio::Backend::IoUring;
    assert_eq!(e.poll_fd().is_some(), uring, "a ring to watch iff io_uring");
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = l.local_addr().unwrap();
    let clients: Vec<_> = (0..8u8)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = StdStream::connect(addr).unwrap().bounded();
                for m in 0..50u8 {
                    s.write_all(&[c, m, c ^ m]).unwrap();
                    let mut back = [0u8; 3];
                    s.read_exact(&mut back).unwrap();
                    assert_eq!(back, [c, m, c ^ m]);
                }
            })
        })
        .collect();
    rt.block_on(async {
        let driver = drive(e.clone());
        let mut served = Vec::new();
        for _ in 0..8 {
            let (s, _) = l.accept().await.unwrap();
            served.push(tokio::spawn(async move {
                loop {
                    let (n, buf) = s.read(vec![0u8; 64]).await;
                    let n = n.unwrap();
                    if n == 0 {
                        return;
                    }
                    s.write_all(buf[..n].to_vec()).await.0.unwrap();
                }
            }));
        }
        for t in served {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("a connection stalled")
                .unwrap();
        }
        driver.abort();
    });
    for c in clients {
        c.join().unwrap();
    }
}

/// The runtime's own thread drives the ring: tokio's reactor watches the
/// ring's descriptor (`poll_fd`), and nothing needs reading to clear it.
#[test]
fn a_runtime_driven_engine_serves_connections() {
    use std::task::Poll;
    serve_driven(&current_thread(), |e| {
        let watched = e.poll_fd().is_some().then(|| {
            // SAFETY: the engine in `RingFd` keeps the ring open while the
            // AsyncFd lives, and `poll_fd` names the same descriptor.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    RingFd(e.clone()),
                    tokio::io::Interest::READABLE,
                )
            }
            .expect("tokio watches the ring")
        });
        tokio::spawn(std::future::poll_fn(move |cx| loop {
            let _ = e.poll_drive(cx);
            let Some(w) = watched.as_ref() else {
                return Poll::Ready(());
            };
            match w.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => ready.clear_ready(),
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }))
    });
}

/// A caller-driven engine needs a driver for as long as its streams are
/// used: a stream kept after the runtime that drove its engine is gone
/// works on a new runtime that drives the engine in turn.
#[cfg(feature = "tokio")]
#[test]
fn a_stream_moves_to_a_new_runtime_that_drives_its_engine() {
    use blockio::aio::drive_on_tokio;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let e = AsyncEngine::builder()
        .driving(Driving::Caller(
            CallerDriving::new().submit(Submit::PerRound),
        ))
        .build()
        .unwrap();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let mut peer = StdStream::connect(l.local_addr().unwrap()).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let first = current_thread();
    let s = first.block_on(async {
        if e.poll_fd().is_some() {
            tokio::spawn(drive_on_tokio(e.clone()));
        }
        l.accept().await.unwrap().0
    });
    drop(first);
    let second = current_thread();
    second.block_on(async {
        if e.poll_fd().is_some() {
            tokio::spawn(drive_on_tokio(e.clone()));
        }
        let mut s = s;
        let s = &mut s; // the traits' methods, through a `&mut` binding
        peer.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        let exchange = async {
            s.read_exact(&mut got).await?;
            s.write_all(b"pong").await?;
            s.flush().await
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("the stream stalled on the new runtime")
            .unwrap();
        assert_eq!(&got, b"ping");
    });
    let mut back = [0u8; 4];
    peer.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"pong");
}

/// A trait read on a socket that already holds bytes takes them in its
/// first poll, as tokio's read does, rather than arming a receive and
/// returning pending: a protocol reader that reads again right after a
/// frame would otherwise pay a pending result and a wake for bytes that
/// were there (both traits: a plain slice and tokio's `ReadBuf`). Each
/// read but the last fills its buffer, so the socket may hold more.
#[test]
fn a_trait_read_takes_what_the_socket_holds_in_its_first_poll() {
    let e = engine();
    let (mut s, mut peer) = pair(&e);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let msg = b"a frame already on the socket";
    peer.write_all(msg).unwrap();
    common::wait_until("the bytes reach the socket", || unread(&s) == msg.len());
    let mut buf = vec![0u8; msg.len()];
    let read = futures::io::AsyncRead::poll_read(std::pin::Pin::new(&mut s), &mut cx, &mut buf);
    match read {
        std::task::Poll::Ready(Ok(n)) => assert_eq!(&buf[..n], &msg[..]),
        other => panic!("the first poll of a read gave {other:?}, the socket holding bytes"),
    }
    #[cfg(feature = "tokio")]
    {
        let msg = b"and another";
        peer.write_all(msg).unwrap();
        common::wait_until("the bytes reach the socket", || unread(&s) == msg.len());
        let mut mem = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut out = tokio::io::ReadBuf::uninit(&mut mem);
        let read = tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut s), &mut cx, &mut out);
        assert!(
            matches!(read, std::task::Poll::Ready(Ok(()))),
            "the first poll of a tokio read gave {read:?}, the socket holding bytes"
        );
        assert_eq!(out.filled(), &msg[..]);
        assert_eq!(
            out.initialized().len(),
            msg.len(),
            "the read wrote past its bytes"
        );
    }
}

/// A read through tokio's `AsyncRead` writes only the bytes it reads into
/// the caller's `ReadBuf`, after those already filled: the unfilled rest
/// is neither zeroed nor counted as initialised (zeroing a 32 MiB buffer
/// on every call cost more than the bytes read).
#[cfg(feature = "tokio")]
#[test]
fn a_tokio_trait_read_writes_only_the_bytes_it_reads() {
    use tokio::io::AsyncRead;
    let e = engine();
    let rt = current_thread();
    let (mut s, mut peer) = pair(&e);
    let mut mem = vec![std::mem::MaybeUninit::<u8>::uninit(); 4 << 20];
    let mut buf = tokio::io::ReadBuf::uninit(&mut mem);
    buf.put_slice(b">");
    let mut want = b">".to_vec();
    for msg in [&b"0123456789"[..], b"abc"] {
        peer.write_all(msg).unwrap();
        let mut got = 0;
        while got < msg.len() {
            let before = buf.filled().len();
            rt.block_on(std::future::poll_fn(|cx| {
                std::pin::Pin::new(&mut s).poll_read(cx, &mut buf)
            }))
            .unwrap();
            got += buf.filled().len() - before;
        }
        want.extend_from_slice(msg);
        assert_eq!(buf.filled(), &want[..]);
        assert_eq!(
            buf.initialized().len(),
            want.len(),
            "the read wrote past the bytes it read"
        );
    }
}

/// `drive_on_tokio` drives the ring from tokio's multi-thread runtime,
/// whose driving task may move between the workers.
#[cfg(feature = "tokio")]
#[test]
fn drive_on_tokio_serves_connections_on_the_multi_thread_runtime() {
    let rt = two_workers();
    serve_driven(&rt, |e| {
        tokio::spawn(async move {
            blockio::aio::drive_on_tokio(e)
                .await
                .expect("driving the ring");
        })
    });
}

/// The `futures::io` traits carry every byte both ways (a 2 MiB stream
/// echoed through `read`/`write_all` of the traits), and trait reads,
/// owned reads and reads dropped by timeouts mixed on one stream keep the
/// bytes in order.
///
/// The writer sends 32 KiB chunks and waits for the echo of each and a go
/// signal before the next, so at every chunk boundary a trait read finds an
/// idle stream and must be dropped by its timeout; the reads inside a chunk
/// race the arriving bytes with their own timeouts.
#[test]
fn the_io_traits_carry_every_byte_in_order() {
    use futures::io::{AsyncReadExt, AsyncWriteExt};
    const CHUNK: usize = 32 << 10;
    let e = engine();
    let rt = current_thread();
    let (mut s, mut peer) = pair(&e);
    let data: Vec<u8> = (0..2u32 << 20)
        .map(|i| (i.wrapping_mul(40503) >> 8) as u8)
        .collect();
    let sent = data.clone();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let mut back = Vec::with_capacity(sent.len());
        for chunk in sent.chunks(CHUNK) {
            peer.write_all(chunk).unwrap();
            let start = back.len();
            back.resize(start + chunk.len(), 0);
            peer.read_exact(&mut back[start..]).unwrap();
            go_rx.recv().unwrap();
        }
        peer.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{} bytes echoed past the end", rest.len());
        back
    });
    rt.block_on(async {
        let mut buf = vec![0u8; 7000];
        let (mut turn, mut total, mut idle_timeouts) = (0u32, 0usize, 0u32);
        loop {
            turn += 1;
            let n = match turn % 3 {
                0 => {
                    let (res, b) = s.read(vec![0u8; 5000]).await;
                    let n = res.unwrap();
                    buf[..n].copy_from_slice(&b[..n]);
                    n
                }
                1 => match tokio::time::timeout(
                    Duration::from_millis(1),
                    AsyncReadExt::read(&mut s, &mut buf),
                )
                .await
                {
                    Ok(r) => r.unwrap(),
                    Err(_) => continue,
                },
                _ => AsyncReadExt::read(&mut s, &mut buf).await.unwrap(),
            };
            if n == 0 {
                break;
            }
            AsyncWriteExt::write_all(&mut s, &buf[..n]).await.unwrap();
            total += n;
            if total % CHUNK == 0 && total < data.len() {
                // The writer holds the next chunk until `go`: this read
                // can only time out, and is dropped with nothing read.
                let idle = tokio::time::timeout(
                    Duration::from_millis(1),
                    AsyncReadExt::read(&mut s, &mut buf),
                )
                .await;
                assert!(idle.is_err(), "a read on an idle stream returned {idle:?}");
                idle_timeouts += 1;
                go_tx.send(()).unwrap();
            } else if total == data.len() {
                go_tx.send(()).unwrap();
            }
        }
        AsyncWriteExt::close(&mut s).await.unwrap();
        assert_eq!(idle_timeouts as usize, data.len() / CHUNK - 1);
    });
    let back = writer.join().unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the echoed stream differs");
}

/// Each side's shutdown ends one direction only: the other goes on.
#[test]
fn half_close_ends_one_direction() {
    let e = engine();
    let (s, mut peer) = pair(&e);
    futures::executor::block_on(async {
        s.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        assert!(got.is_empty(), "the peer reads the end of our stream");
        peer.write_all(b"still open").unwrap();
        peer.shutdown(Shutdown::Write).unwrap();
        let (n, buf) = s.read(vec![0u8; 64]).await;
        assert_eq!(&buf[..n.unwrap()], b"still open");
        let (n, _) = s.read(vec![0u8; 64]).await;
        assert_eq!(n.unwrap(), 0, "then the end of the peer's");
    });
}

/// A peer that resets the connection while a read waits fails that read
/// with the kernel's `ECONNRESET`, as a plain OS error.
#[test]
fn a_reset_mid_read_fails_the_read() {
    let e = engine();
    let (s, peer) = pair(&e);
    let (waits_tx, waits) = std::sync::mpsc::channel();
    let resetter = std::thread::spawn(move || {
        waits
            .recv_timeout(Duration::from_secs(30))
            .expect("the read reaches its wait");
        // Linger 0: close sends a reset instead of a FIN.
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
    });
    let (res, _) = futures::executor::block_on(common::noting_its_wait(
        s.read(vec![0u8; 64]),
        &mut Some(waits_tx),
    ));
    resetter.join().unwrap();
    let err = res.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ECONNRESET), "{err}");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    assert_eq!(blockio::errno(&err), Some(libc::ECONNRESET), "{err}");
}

/// A peer that never answers (a listener whose queue is full drops the
/// SYN): `connect_timeout` gives up at its limit with `ETIMEDOUT` (kind
/// `TimedOut`).
#[test]
fn connect_timeout_gives_up_at_its_limit() {
    let e = engine();
    let (l, _queued) = common::full_listener();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    let start = std::time::Instant::now();
    let limit = Duration::from_millis(300);
    let err =
        futures::executor::block_on(TcpStream::connect_timeout_with(&e, addr, limit)).unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT), "{err}");
    // Not before the limit; and well before the kernel's own SYN retries
    // (about two minutes) would give up: the limit, not the kernel, ended it.
    assert!(took >= limit && took < Duration::from_secs(60), "{took:?}");
    // And a peer that answers is reached within the limit.
    let ok = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let s = futures::executor::block_on(TcpStream::connect_timeout_with(
        &e,
        ok.local_addr().unwrap(),
        limit,
    ));
    assert_eq!(s.unwrap().peer_addr().unwrap(), ok.local_addr().unwrap());
}

/// A zero limit is the caller's mistake, refused before anything is
/// tried, as std's `connect_timeout` refuses it (kind `InvalidInput`), on
/// TCP and Unix sockets alike.
#[test]
fn connect_timeout_refuses_a_zero_limit_as_std_does() {
    let e = engine();
    let ok = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ok.local_addr().unwrap();
    let std_err = StdStream::connect_timeout(&addr, Duration::ZERO).unwrap_err();
    let err =
        futures::executor::block_on(TcpStream::connect_timeout_with(&e, addr, Duration::ZERO))
            .unwrap_err();
    assert_eq!(err.kind(), std_err.kind(), "{err}");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    let _l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let err = futures::executor::block_on(blockio::net::UnixStream::connect_timeout_with(
        &e,
        &path,
        Duration::ZERO,
    ))
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
}

/// A Python asyncio client (another runtime, another process) exchanges
/// random payloads with a blockio echo server; the client checks every
/// byte and its exit status says so.
#[test]
fn a_python_asyncio_client_talks_to_a_blockio_server() {
    let e = engine();
    let rt = current_thread();
    let listener = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        r#"
import asyncio, os
async def one(i):
    r, w = await asyncio.open_connection('127.0.0.1', {port})
    for k in range(20):
        msg = os.urandom(1 + (i * 7919 + k * 104729) % 20000)
        w.write(msg)
        await w.drain()
        back = await r.readexactly(len(msg))
        assert back == msg, (i, k)
    w.write_eof()
    assert await r.read() == b''
    w.close()
    await w.wait_closed()
async def main():
    await asyncio.gather(*(one(i) for i in range(30)))
asyncio.run(main())
print('ok')
"#
    );
    let client = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..30 {
            let (s, _) = listener.accept().await.unwrap();
            conns.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                loop {
                    let (res, b) = s.read(buf).await;
                    let n = res.unwrap();
                    if n == 0 {
                        s.shutdown(Shutdown::Write).unwrap();
                        return;
                    }
                    let (res, _) = s.write_all(b[..n].to_vec()).await;
                    res.unwrap();
                    buf = b;
                }
            }));
        }
        for c in conns {
            c.await.unwrap();
        }
    });
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unix-domain sockets: the same API over a path, every byte echoed both
/// ways, the kernel's errnos kept, and an error that is not the kernel's
/// naming the path.
#[test]
fn unix_streams_echo_and_keep_errnos() {
    use blockio::net::{UnixListener, UnixStream};
    use futures::io::{AsyncReadExt, AsyncWriteExt};
    let e = engine();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    let l = UnixListener::bind_with(&e, &path).unwrap();
    assert_eq!(l.local_path(), path);
    let err = UnixListener::bind_with(&e, &path).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE), "{err}");
    let missing = dir.path().join("nobody");
    let err = futures::executor::block_on(UnixStream::connect_with(&e, &missing)).unwrap_err();
    assert_eq!(blockio::errno(&err), Some(libc::ENOENT), "{err}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
    // An error that is not the kernel's names the path.
    let long = dir.path().join("x".repeat(200));
    let err = UnixListener::bind_with(&e, &long).unwrap_err();
    assert!(err.to_string().contains("x".repeat(200).as_str()), "{err}");

    let data: Vec<u8> = (0..1u32 << 20).map(|i| ((i * 31) >> 3) as u8).collect();
    let rt = current_thread();
    let back = rt.block_on(async {
        let server = async {
            let (s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 10_000];
            loop {
                let (res, b) = s.read(buf).await;
                let n = res.unwrap();
                if n == 0 {
                    s.shutdown(Shutdown::Write).unwrap();
                    return;
                }
                s.write_all(b[..n].to_vec()).await.0.unwrap();
                buf = b;
            }
        };
        let client = async {
            let mut c = UnixStream::connect_with(&e, &path).await.unwrap();
            let mut back = Vec::new();
            let (mut r, mut w) = AsyncReadExt::split(&mut c);
            let write = async {
                w.write_all(&data).await.unwrap();
                w.close().await.unwrap();
            };
            let read = async { r.read_to_end(&mut back).await.unwrap() };
            futures::join!(write, read);
            back
        };
        futures::join!(server, client).1
    });
    assert!(back == data, "the echo differs");
}

/// Where the engine runs on io_uring (this kernel is past 5.19), one
/// multishot accept takes a storm of 200 connections; every stream is the
/// right peer's and carries its bytes.
#[test]
fn incoming_accepts_a_storm_with_one_multishot_request() {
    const CONNS: usize = 200;
    let e = engine();
    let options = blockio::net::TcpListenerOptions::default().multishot_accept(true);
    let listener = futures::executor::block_on(options.bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let clients = std::thread::spawn(move || {
        let conns: Vec<StdStream> = (0..CONNS)
            .map(|_| StdStream::connect(addr).unwrap().bounded())
            .collect();
        for (i, mut c) in conns.into_iter().enumerate() {
            let me = c.local_addr().unwrap();
            c.write_all(me.to_string().as_bytes()).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let mut back = String::new();
            c.read_to_string(&mut back).unwrap();
            assert_eq!(back, format!("{i}"), "the answer to {me}");
        }
    });
    let mut incoming = listener.incoming();
    assert_eq!(
        incoming.multishot(),
        e.backend() == blockio::Backend::IoUring,
        "multishot exactly where io_uring is, when asked for"
    );
    futures::executor::block_on(async {
        let mut seen = std::collections::HashSet::new();
        for i in 0..CONNS {
            let (s, peer) = incoming.next().await.unwrap();
            assert_eq!(s.peer_addr().unwrap(), peer);
            assert!(seen.insert(peer), "{peer} twice");
            let mut said = Vec::new();
            loop {
                let (res, b) = s.read(vec![0u8; 64]).await;
                let n = res.unwrap();
                if n == 0 {
                    break;
                }
                said.extend_from_slice(&b[..n]);
            }
            assert_eq!(String::from_utf8(said).unwrap(), peer.to_string());
            s.write_all(i.to_string().into_bytes()).await.0.unwrap();
        }
    });
    clients.join().unwrap();
}

/// Connections the multishot accept took after its stream was dropped
/// (or that the stream never yielded) come from the listener's next
/// accepts: none is lost, none comes twice.
#[test]
fn connections_an_incoming_stream_left_go_to_the_next_accept() {
    let e = engine();
    let options = blockio::net::TcpListenerOptions::default().multishot_accept(true);
    let listener = futures::executor::block_on(options.bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut clients: Vec<StdStream> = (0..10).map(|_| StdStream::connect(addr).unwrap()).collect();
    let mut want: std::collections::HashSet<_> =
        clients.iter().map(|c| c.local_addr().unwrap()).collect();
    let rest = futures::executor::block_on(async {
        let mut incoming = listener.incoming();
        let (_, first) = incoming.next().await.unwrap();
        assert!(want.remove(&first));
        if incoming.multishot() {
            // The armed accept has taken the others.
            common::wait_until("the multishot accept takes the others", || {
                common::accept_queue(addr.port()) == 0
            });
        }
        drop(incoming);
        // And more after the stream is gone.
        for _ in 0..5 {
            clients.push(StdStream::connect(addr).unwrap());
            want.insert(clients.last().unwrap().local_addr().unwrap());
        }
        let mut rest = Vec::new();
        for _ in 0..14 {
            let (s, peer) = listener.accept().await.unwrap();
            assert!(want.remove(&peer), "{peer} was not waiting, or came twice");
            rest.push(s);
        }
        rest
    });
    assert!(want.is_empty());
    // Each accepted stream is its client's.
    for s in &rest {
        futures::executor::block_on(s.write_all(b"!".to_vec()))
            .0
            .unwrap();
    }
    for c in &mut clients[1..] {
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"!");
    }
}

/// The descriptor, in this process, of the Unix socket bound to `path`
/// and listening (the listener gives none out): its inode from
/// `/proc/net/unix`, then the link in `/proc/self/fd` that names it.
fn unix_listener_fd(path: &std::path::Path) -> std::os::fd::RawFd {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let path = path.to_str().unwrap();
    let inode = table
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Accepted sockets show the path too: the listener is the
            // one flagged as accepting connections (__SO_ACCEPTCON).
            (f.len() == 8 && f[7] == path && f[3] == "00010000").then(|| f[6].to_string())
        })
        .expect("the listener's socket in /proc/net/unix");
    let want = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .find(|d| std::fs::read_link(d.path()).is_ok_and(|l| l.to_str() == Some(&want)))
        .and_then(|d| d.file_name().to_str()?.parse().ok())
        .expect("the listener's descriptor in /proc/self/fd")
}

/// Waits (up to a guard) until the Unix listener bound to `path` is no
/// longer readable: no connection waits in its backlog.
fn wait_until_backlog_taken(path: &std::path::Path) {
    let fd = unix_listener_fd(path);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, for the duration of the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
        assert!(ready >= 0, "{}", std::io::Error::last_os_error());
        if ready == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the armed accept never took the waiting connections"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `UnixListener::incoming` as TCP's: one multishot accept on io_uring,
/// each stream its client's, and what the stream left for `accept`.
#[test]
fn unix_incoming_accepts_with_one_multishot_request() {
    use blockio::net::UnixListener;
    use std::os::unix::net::UnixStream as StdUnix;
    let e = engine();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    let listener = UnixListener::bind_with(&e, &path).unwrap();
    let mut clients: Vec<StdUnix> = (0..20).map(|_| StdUnix::connect(&path).unwrap()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.write_all(&[i as u8]).unwrap();
    }
    let mut seen = [false; 20];
    futures::executor::block_on(async {
        let mut incoming = listener.incoming();
        assert_eq!(
            incoming.multishot(),
            e.backend() == blockio::Backend::IoUring
        );
        for _ in 0..10 {
            let (s, _) = incoming.next().await.unwrap();
            let (n, b) = s.read(vec![0u8; 1]).await;
            assert_eq!(n.unwrap(), 1);
            assert!(!std::mem::replace(&mut seen[b[0] as usize], true));
            s.write_all(b).await.0.unwrap();
        }
        // With one multishot request, waits until the armed accept has
        // taken the rest: the listener is readable while connections wait
        // in its backlog, and the kernel's accepts empty it. Every split
        // (taken before the drop, or left for `accept`) must lose none.
        if incoming.multishot() {
            wait_until_backlog_taken(&path);
        }
        drop(incoming);
        for _ in 0..10 {
            let (s, _) = listener.accept().await.unwrap();
            let (n, b) = s.read(vec![0u8; 1]).await;
            assert_eq!(n.unwrap(), 1);
            assert!(!std::mem::replace(&mut seen[b[0] as usize], true));
            s.write_all(b).await.0.unwrap();
        }
    });
    assert!(seen.iter().all(|&s| s));
    for (i, c) in clients.iter_mut().enumerate() {
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i as u8, "client {i} got another's answer");
    }
}

/// An owned sub-slice (`buf.slice(..n)`) writes what a read returned with
/// no copy, and a read into `buf.slice(k..)` fills only that part; the
/// buffer comes back whole.
#[test]
fn owned_slices_echo_without_a_copy() {
    use blockio::aio::IoBuf;
    let e = engine();
    let (s, mut peer) = pair(&e);
    futures::executor::block_on(async {
        peer.write_all(b"hello").unwrap();
        let (res, buf) = s.read(vec![0u8; 64]).await;
        let n = res.unwrap();
        let (res, part) = s.write_all(buf.slice(..n)).await;
        res.unwrap();
        assert_eq!(&part[..], b"hello");
        let buf = part.into_inner();
        assert_eq!(buf.len(), 64, "the whole buffer comes back");
        let mut back = [0u8; 5];
        peer.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"hello");

        peer.write_all(b"world").unwrap();
        let mut head = buf;
        head[..3].copy_from_slice(b"-> ");
        let (res, tail) = s.read(head.slice(3..8)).await;
        let n = res.unwrap();
        assert_eq!((tail.begin(), tail.end()), (3, 8));
        let whole = tail.into_inner();
        assert_eq!(&whole[..3 + n], &b"-> world"[..3 + n]);
        assert!(n >= 1);
    });
}

/// `TCP_CLOSE` of `linux/tcp_states.h`: the state a reset leaves a socket in.
const TCP_CLOSE: u8 = 7;

/// The TCP state of `s` (`TCP_INFO`'s `tcpi_state`), read without
/// touching its receive queue or its pending error.
fn tcp_state(s: &StdStream) -> u8 {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain integers; all zeros is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are live locals of the sizes passed, and
    // the kernel writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    info.tcpi_state
}

/// A stream dropped with bytes its trait writes accepted lingers only as
/// long as its drop linger: against a peer that does not read, the rest
/// is then dropped and the connection reset (the peer sees an error, not
/// a clean end, after what the kernel had).
///
/// The stream's queue is far larger than what the kernel's buffers of
/// both ends can ever hold while the peer does not read, so its send is
/// still in flight when the limit passes, however slow the machine: a
/// queue the kernel took whole within the limit would close the socket
/// cleanly (as `close` does), its last bytes in the kernel, and the peer
/// would see no reset.
#[test]
fn a_dropped_stream_lingers_no_longer_than_its_limit() {
    let e = engine();
    let rt = current_thread();
    let (s, mut peer, data) = pair_with_a_send_in_flight(&e, &rt);
    s.set_drop_linger(Duration::from_millis(200));
    drop(s);
    // The peer starts reading only once the reset has come (its side of
    // the connection closed), however long the machine took to get there.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tcp_state(&peer) != TCP_CLOSE {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped stream was never reset"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let end = loop {
        match peer.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Some(e.kind()),
        }
    };
    // Every byte of `data` was accepted: written, or queued by the write
    // left pending.
    let total = data.len();
    assert!(
        got.len() < total,
        "all {} bytes went to a peer that did not read",
        got.len()
    );
    assert!(got[..] == data[..got.len()], "the peer's bytes differ");
    // Cut short, the connection is reset: the peer cannot take the
    // stream for complete.
    assert_eq!(
        end,
        Some(std::io::ErrorKind::ConnectionReset),
        "after {} of {total} bytes",
        got.len()
    );
}

/// The bytes the stream and its peer's kernel can hold while the peer
/// does not read are far fewer than `QUEUED`: a send of them stays in
/// flight until the peer reads.
const QUEUED: usize = 256 << 10;

/// A stream whose send buffer and its peer's receive buffer are small, and
/// `QUEUED` bytes of a pattern written to it through the traits: the
/// kernel takes what it holds, and the write of the rest (at most the
/// 256 KiB a write queues) is pending, its send in flight.
fn pair_with_a_send_in_flight(
    e: &AsyncEngine,
    rt: &tokio::runtime::Runtime,
) -> (TcpStream, StdStream, Vec<u8>) {
    let l = futures::executor::block_on(TcpListener::bind_with(e, "127.0.0.1:0")).unwrap();
    // The peer's receive buffer is set before it connects, so that the
    // window it offers is small from the start.
    let peer = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    peer.set_recv_buffer_size(16 << 10).unwrap();
    peer.connect(&l.local_addr().unwrap().into()).unwrap();
    let peer = StdStream::from(peer);
    let (mut s, _) = futures::executor::block_on(l.accept()).unwrap();
    s.socket().set_send_buffer_size(16 << 10).unwrap();
    let data: Vec<u8> = (0..QUEUED as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    rt.block_on(write_until_pending(&mut s, &data));
    (s, peer, data)
}

/// Writes `data` through `poll_write` until a write is pending twice in a
/// row (a yield between: the first may be the budget's), its send in
/// flight, or every byte is written.
async fn write_until_pending(s: &mut TcpStream, data: &[u8]) {
    let (mut written, mut pending) = (0, 0);
    while pending < 2 && written < data.len() {
        let step = std::future::poll_fn(|cx| {
            match futures::io::AsyncWrite::poll_write(
                std::pin::Pin::new(&mut *s),
                cx,
                &data[written..],
            ) {
                std::task::Poll::Ready(r) => std::task::Poll::Ready(Some(r.unwrap())),
                std::task::Poll::Pending => std::task::Poll::Ready(None),
            }
        })
        .await;
        match step {
            Some(n) => (written, pending) = (written + n, 0),
            None => {
                pending += 1;
                tokio::task::yield_now().await;
            }
        }
    }
}

/// A trait write left pending (its bytes queued, the socket full) and
/// polled again with other bytes of the same length, which share its
/// first and last bytes, is told that its queued bytes went without it
/// (`WriteDropped`): the bytes it queued are compared whole, so no other
/// bytes are ever reported written in their place.
#[test]
fn a_pending_write_polled_with_other_bytes_reports_the_queued_ones_dropped() {
    use blockio::net::WriteDropped;
    use std::task::Poll;
    let e = engine();
    let rt = current_thread();
    let (mut s, mut peer) = pair(&e);
    s.socket().set_send_buffer_size(16 << 10).unwrap();
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let (written, other) = rt.block_on(async {
        let mut written = 0;
        loop {
            let step = std::future::poll_fn(|cx| {
                let pin = std::pin::Pin::new(&mut s);
                match futures::io::AsyncWrite::poll_write(pin, cx, &data[written..]) {
                    Poll::Ready(r) => Poll::Ready(Some(r.unwrap())),
                    Poll::Pending => Poll::Ready(None),
                }
            })
            .await;
            match step {
                Some(n) => written += n,
                None => break,
            }
            assert!(written < data.len(), "the socket never filled");
        }
        // The same length, the same ends, one byte changed in the middle.
        let mut other = data[written..].to_vec();
        let middle = other.len().min(256 << 10) / 2;
        other[middle] ^= 0xff;
        (written, other)
    });
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    });
    let res = rt.block_on(futures::io::AsyncWriteExt::write(&mut s, &other));
    let err = res.expect_err("other bytes were reported written in place of the queued ones");
    let dropped = WriteDropped::of(&err).unwrap_or_else(|| panic!("{err}"));
    let sent = dropped.sent;
    drop(s);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), written + sent);
    assert!(got[..] == data[..written + sent], "the peer's bytes differ");
}

/// A task reading, through tokio's `AsyncRead`, a socket that already
/// holds every byte it wants (each read done without waiting) yields
/// through tokio's scheduler after 128 in a row, as tokio's task budget
/// has tokio's reads do: a peer task that only yields runs again every
/// 128 reads, not after the last read.
#[cfg(feature = "tokio")]
#[test]
fn trait_reads_that_never_wait_let_a_yielding_peer_run() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    const BYTES: usize = 64 << 10;
    const READ: usize = 64;
    let (mine, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    theirs.write_all(&vec![7u8; BYTES]).unwrap();
    let rt = current_thread();
    let turns = rt.block_on(async move {
        let engine = AsyncEngine::new().unwrap();
        let mut stream = blockio::net::UnixStream::from_std_with(&engine, mine).unwrap();
        let turns = std::sync::Arc::new(AtomicU64::new(0));
        let peer_turns = turns.clone();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let peer_done = done.clone();
        let peer = tokio::spawn(async move {
            while !peer_done.load(Relaxed) {
                tokio::task::yield_now().await;
                peer_turns.fetch_add(1, Relaxed);
            }
        });
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; READ];
            let mut got = 0;
            while got < BYTES {
                let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
                    .await
                    .unwrap();
                assert!(n > 0 && buf[..n].iter().all(|&b| b == 7));
                got += n;
            }
            let turns = turns.load(Relaxed);
            done.store(true, Relaxed);
            turns
        });
        let turns = reader.await.unwrap();
        peer.await.unwrap();
        drop(theirs);
        turns
    });
    // 1,024 reads: a turn for the peer every 128 at most.
    assert!(turns >= 4, "the peer ran {turns} times during 1,024 reads");
}

/// A dropped write's report says what to resend in each case: the rest,
/// all of it, or nothing when every byte went.
#[test]
fn a_dropped_writes_report_says_what_is_left_to_resend() {
    use blockio::net::WriteDropped;
    let say = |sent, len| WriteDropped { sent, len }.to_string();
    let part = say(100, 262144);
    assert!(part.contains("sent 100 of its 262144 bytes"), "{part}");
    assert!(part.contains("resend only the last 262044"), "{part}");
    let whole = say(262144, 262144);
    assert!(whole.contains("sent all 262144 of its bytes"), "{whole}");
    assert!(whole.contains("none of them is to be resent"), "{whole}");
    assert!(!whole.contains("resend only"), "{whole}");
    let none = say(0, 4096);
    assert!(none.contains("sent none of its 4096 bytes"), "{none}");
    assert!(none.contains("resend all of them"), "{none}");
}

/// A flush waits until every written byte is in the kernel, as a tokio
/// flush may (a tokio write returns only once its bytes are there): with
/// a send waiting for room in a peer that does not read, it is pending;
/// once the peer reads, it completes, and the peer has every byte, in
/// order. A program that exits after a flush loses nothing.
#[test]
fn a_flush_waits_for_the_send_in_flight() {
    use futures::io::AsyncWriteExt;
    use futures::FutureExt;
    let e = engine();
    let rt = current_thread();
    let (mut s, mut peer, data) = pair_with_a_send_in_flight(&e, &rt);
    let flushed = rt.block_on(async { AsyncWriteExt::flush(&mut s).now_or_never() });
    assert!(
        flushed.is_none(),
        "a flush with a send in flight to a peer that does not read: {flushed:?}"
    );
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; QUEUED];
        peer.read_exact(&mut got).unwrap();
        got
    });
    rt.block_on(AsyncWriteExt::flush(&mut s)).unwrap();
    let got = reader.join().unwrap();
    assert!(got == data, "the peer read other bytes than were written");
    rt.block_on(AsyncWriteExt::close(&mut s)).unwrap();
}

/// A send in flight that fails is not lost: the flush that waits for it
/// reports it, and the writes after it fail with `EPIPE`.
#[test]
fn an_error_of_a_send_in_flight_comes_back_from_the_flush() {
    use futures::io::AsyncWriteExt;
    let e = engine();
    let rt = current_thread();
    let broken = |errno: Option<i32>| matches!(errno, Some(libc::ECONNRESET | libc::EPIPE));
    // The peer goes with bytes unread: its kernel resets the connection,
    // and the send in flight fails.
    let (mut s, peer, _) = pair_with_a_send_in_flight(&e, &rt);
    drop(peer);
    let err = rt
        .block_on(AsyncWriteExt::flush(&mut s))
        .expect_err("the flush of a failed send said Ok");
    assert!(broken(err.raw_os_error()), "{err:?}");
    let again = rt.block_on(AsyncWriteExt::write(&mut s, b"more"));
    assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::EPIPE));
}

/// A task whose writes never wait (a peer whose buffer takes them all)
/// still lets the runtime's other tasks run, as tokio's budget makes its
/// writes do: 2,000 one-byte writes in a loop on a current-thread runtime,
/// and a task spawned before them has run by the time they end.
#[test]
fn a_task_whose_writes_never_wait_lets_the_others_run() {
    use futures::io::AsyncWriteExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let e = engine();
    let rt = current_thread();
    let l = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let _peer = StdStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut s, _) = futures::executor::block_on(l.accept()).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let seen = rt.block_on(async {
        let flag = ran.clone();
        let other = tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        for _ in 0..2000 {
            AsyncWriteExt::write(&mut s, b"x").await.unwrap();
        }
        let seen = ran.load(Ordering::SeqCst);
        other.await.unwrap();
        seen
    });
    assert!(
        seen,
        "2,000 writes that never waited never let another task run"
    );
}

/// `write_all` under random time limits against a slow reader, retried
/// from where the stream says it stands: a dropped `write_all` is reported
/// by the next write (`WriteDropped`) with every byte its sends took, so
/// the reader gets each byte once, in order. (tokio's `write_all` is not
/// cancellation-safe at all: what a dropped one sent is unknown.)
#[test]
fn a_dropped_write_all_reports_every_byte_it_sent() {
    use blockio::net::WriteDropped;
    let e = engine();
    let rt = current_thread();
    let (s, mut peer) = pair(&e);
    s.socket().set_send_buffer_size(32 * 1024).unwrap();
    let total = 2 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 997) as u8).collect();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = peer.read(&mut buf).unwrap();
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
            // A slow reader: the writes queue up behind it.
            std::thread::sleep(Duration::from_micros(500));
        }
    });
    let reported = rt.block_on(async {
        let mut seed = 0x853c_49e6_748f_ea9b_u64;
        let mut rand = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut at, mut reported) = (0, 0);
        while at < total {
            let len = (1 + rand(256 * 1024) as usize).min(total - at);
            let limit = Duration::from_micros(500 + rand(3000));
            let write = s.write_all(data[at..at + len].to_vec());
            match tokio::time::timeout(limit, write).await {
                Ok((Ok(()), _)) => at += len,
                Ok((Err(e), _)) => {
                    let d = WriteDropped::of(&e).unwrap_or_else(|| panic!("{e}"));
                    at += d.sent;
                    reported += 1;
                }
                Err(_) => {}
            }
        }
        s.shutdown(Shutdown::Write).unwrap();
        reported
    });
    let got = reader.join().unwrap();
    assert_eq!(got.len(), total);
    assert!(got == data, "the bytes differ");
    assert!(
        reported > 0,
        "no write_all was dropped mid-way: the test proved nothing"
    );
}

/// Echoes the 4 bytes a client sends (each client sends its number).
async fn echo_four<S: EchoOwned>(s: S) {
    let mut got = Vec::new();
    while got.len() < 4 {
        let (res, buf) = s.read_owned(vec![0u8; 4 - got.len()]).await;
        match res {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let _ = s.write_all_owned(got).await;
}

/// The owned-buffer calls of both stream types, for [`echo_four`].
trait EchoOwned {
    fn read_owned(&self, buf: Vec<u8>) -> impl Future<Output = (std::io::Result<usize>, Vec<u8>)>;
    fn write_all_owned(&self, buf: Vec<u8>) -> impl Future<Output = std::io::Result<()>>;
}

impl EchoOwned for TcpStream {
    fn read_owned(&self, buf: Vec<u8>) -> impl Future<Output = (std::io::Result<usize>, Vec<u8>)> {
        self.read(buf)
    }
    async fn write_all_owned(&self, buf: Vec<u8>) -> std::io::Result<()> {
        self.write_all(buf).await.0
    }
}

impl EchoOwned for blockio::net::UnixStream {
    fn read_owned(&self, buf: Vec<u8>) -> impl Future<Output = (std::io::Result<usize>, Vec<u8>)> {
        self.read(buf)
    }
    async fn write_all_owned(&self, buf: Vec<u8>) -> std::io::Result<()> {
        self.write_all(buf).await.0
    }
}

/// Clients that each connect, send their number and wait up to 10 s for
/// it back; how many did not get it (reset, or never served).
fn clients<C: Read + Write + Send + 'static>(
    connect: impl Fn() -> std::io::Result<C> + Send + Sync + 'static,
    timeout: impl Fn(&C) + Send + Sync + 'static,
) -> std::thread::JoinHandle<usize> {
    let connect = std::sync::Arc::new((connect, timeout));
    std::thread::spawn(move || {
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let c = connect.clone();
                std::thread::spawn(move || {
                    let mut lost = 0;
                    for i in 0..100u32 {
                        let id = (t * 100 + i).to_le_bytes();
                        let ok = c.0().is_ok_and(|mut s| {
                            c.1(&s);
                            let mut back = [0u8; 4];
                            s.write_all(&id).is_ok()
                                && s.read_exact(&mut back).is_ok()
                                && back == id
                        });
                        lost += usize::from(!ok);
                    }
                    lost
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    })
}

#[test]
fn an_accept_dropped_by_a_timeout_loses_no_connection() {
    // 400 clients against a server whose every accept is given 0-1 ms
    // (tokio's timer rounds up to its millisecond tick): most accepts are
    // dropped, some just as the kernel hands them a connection. Each
    // connection must reach a later accept, as with tokio's accept, never
    // be closed unserved.
    let e = engine();
    let rt = current_thread();
    let limit = |i: u32| Duration::from_micros(u64::from(i * 37 % 1000));
    let l = rt
        .block_on(async { TcpListener::bind_with(&e, "127.0.0.1:0").await })
        .unwrap();
    let addr = l.local_addr().unwrap();
    let tcp = clients(
        move || StdStream::connect(addr),
        |s: &StdStream| s.set_read_timeout(Some(Duration::from_secs(10))).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    let ul = blockio::net::UnixListener::bind_with(&e, &path).unwrap();
    let unix = clients(
        move || std::os::unix::net::UnixStream::connect(&path),
        |s: &std::os::unix::net::UnixStream| {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap()
        },
    );
    rt.block_on(async {
        // Until every client is done (a lost one gives up after 10 s); the
        // bound only keeps a broken build from hanging the suite.
        let bound = std::time::Instant::now() + Duration::from_secs(300);
        let mut i = 0u32;
        while !(tcp.is_finished() && unix.is_finished()) && std::time::Instant::now() < bound {
            i += 1;
            tokio::select! {
                r = tokio::time::timeout(limit(i), l.accept()) => if let Ok(Ok((s, _))) = r {
                    tokio::spawn(echo_four(s));
                },
                r = tokio::time::timeout(limit(i + 1), ul.accept()) => if let Ok(Ok((s, _))) = r {
                    tokio::spawn(echo_four(s));
                },
            }
        }
    });
    assert_eq!(tcp.join().unwrap(), 0, "TCP clients lost");
    assert_eq!(unix.join().unwrap(), 0, "Unix clients lost");
}

/// `bind` tries each address it is given in turn, as std's and tokio's:
/// a list whose first address is taken binds the second; a list that all
/// fail gives the last one's error.
#[test]
fn bind_tries_each_address_in_turn() {
    let e = engine();
    let taken = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let options = blockio::net::TcpListenerOptions::default().reuse_address(false);
    let free: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let taken = taken.local_addr().unwrap();
    let l = futures::executor::block_on(options.bind_with(&e, &[taken, free][..]))
        .expect("the second address of the list");
    assert_ne!(l.local_addr().unwrap().port(), taken.port());
    let err = futures::executor::block_on(options.bind_with(&e, &[taken, taken][..])).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE), "{err}");
}

/// A read into an empty buffer returns 0 at once, as tokio's (and the
/// traits') do, and takes no byte from the next read.
#[test]
fn a_read_into_an_empty_buffer_returns_at_once() {
    let e = engine();
    let (s, mut peer) = pair(&e);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (n, _) = futures::executor::block_on(s.read(Vec::new()));
        tx.send(n.map_err(|e| e.to_string())).unwrap();
        s
    });
    let n = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a read into an empty buffer waited for the peer");
    assert_eq!(n, Ok(0));
    let s = reader.join().unwrap();
    peer.write_all(b"hello").unwrap();
    let (n, buf) = futures::executor::block_on(s.read(vec![0u8; 16]));
    assert_eq!(&buf[..n.unwrap()], b"hello");
}

/// A vectored write of more buffers than one `sendmsg` takes (1,024)
/// sends from the first 1,024, as tokio's `write_vectored`; the kernel
/// refused all of it with `EMSGSIZE`.
#[test]
fn a_vectored_write_of_more_than_1024_buffers_sends_the_first_1024() {
    let e = engine();
    let (s, mut peer) = pair(&e);
    let bufs: Vec<Vec<u8>> = (0..2000u32).map(|i| vec![(i % 251) as u8]).collect();
    let (n, bufs) = futures::executor::block_on(s.writev(bufs));
    assert_eq!(n.unwrap(), 1024);
    assert_eq!(bufs.len(), 2000, "every buffer comes back");
    let mut got = vec![0u8; 1024];
    peer.read_exact(&mut got).unwrap();
    let want: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(got, want);
}

/// Runs `test` on a current-thread runtime of a thread of its own, and
/// fails if it has not returned within a minute: a call that blocked
/// the runtime's only thread (a blocking socket's accept) fails it
/// rather than hanging the suite.
fn within_a_minute<F>(test: impl FnOnce() -> F + Send + 'static)
where
    F: Future<Output = ()> + 'static,
{
    let (done_tx, done) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        current_thread().block_on(test());
        done_tx.send(()).unwrap();
    });
    match done.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => runner.join().unwrap(),
        // The runner panicked (its assertion is the failure to show).
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(runner.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the test's runtime was blocked for a minute")
        }
    }
}

/// Socket activation's shape: a listener bound and left blocking by std,
/// handed over as an owned descriptor, serves one connection after
/// another from a task, while the runtime's one thread also runs the
/// clients (an accept that blocked the thread would hang them).
#[test]
fn a_listener_bound_by_std_and_handed_over_serves_connections() {
    within_a_minute(|| async {
        let inherited: std::os::fd::OwnedFd =
            std::net::TcpListener::bind("127.0.0.1:0").unwrap().into();
        let listener = TcpListener::from_std(std::net::TcpListener::from(inherited)).unwrap();
        let addr = listener.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        let server = tokio::spawn(async move {
            for _ in 0..5 {
                let (s, _) = listener.accept().await.unwrap();
                let (n, buf) = s.read(vec![0u8; 16]).await;
                let n = n.unwrap();
                s.write_all(buf.slice(..n)).await.0.unwrap();
            }
        });
        for i in 0..5u8 {
            let c = TcpStream::connect(addr).await.unwrap();
            c.write_all(vec![i; 3]).await.0.unwrap();
            let (n, buf) = c.read(vec![0u8; 16]).await;
            assert_eq!(&buf[..n.unwrap()], &[i; 3], "connection {i}");
        }
        server.await.unwrap();
    });
}

/// A std stream, blocking, whose peer sent bytes and closed before it
/// was handed over: every byte is read, in order, then the end.
#[test]
fn a_std_stream_with_bytes_waiting_reads_them_all() {
    within_a_minute(|| async {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std_stream = StdStream::connect(server.local_addr().unwrap()).unwrap();
        let (mut peer, _) = server.accept().unwrap();
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        peer.write_all(&sent).unwrap();
        drop(peer);
        let stream = TcpStream::from_std(std_stream).unwrap();
        assert_eq!(stream.peer_addr().unwrap(), server.local_addr().unwrap());
        let mut got = Vec::new();
        let mut buf = vec![0u8; 7_000];
        loop {
            let (n, b) = stream.read(buf).await;
            let n = n.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&b[..n]);
            buf = b;
        }
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "the bytes came out of order");
    });
}

/// Unix sockets from std: a listener the caller made non-blocking (as
/// tokio's `from_std` asks) serves connections, and one end of a pair
/// with bytes waiting reads them, then writes to the other end.
#[test]
fn unix_sockets_from_std_serve_and_read_what_waits() {
    within_a_minute(|| async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("activated.sock");
        let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let listener = blockio::net::UnixListener::from_std(std_listener).unwrap();
        assert_eq!(listener.local_path(), path);
        for i in 0..3u8 {
            let mut c = std::os::unix::net::UnixStream::connect(&path).unwrap();
            c.write_all(&[i]).unwrap();
            let (s, _) = listener.accept().await.unwrap();
            let (n, buf) = s.read(vec![0u8; 4]).await;
            assert_eq!(&buf[..n.unwrap()], &[i], "connection {i}");
        }

        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        theirs.write_all(b"waiting").unwrap();
        let stream = blockio::net::UnixStream::from_std(ours).unwrap();
        let (n, buf) = stream.read(vec![0u8; 16]).await;
        assert_eq!(&buf[..n.unwrap()], b"waiting");
        stream.write_all(b"back".to_vec()).await.0.unwrap();
        let mut back = [0u8; 4];
        theirs.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"back");
    });
}

/// Sockets of the wrong type, family or state handed to each `from_std`
/// are refused at once, with kind `InvalidInput` and a message naming the
/// call and what was found, rather than taken and misbehaving later (a
/// UDP socket's accept waiting for ever, a datagram read in pieces losing
/// its tail).
#[test]
fn sockets_of_the_wrong_kind_handed_over_are_refused_naming_what_was_found() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::{
        UnixDatagram, UnixListener as StdUnixListener, UnixStream as StdUnix,
    };
    let engine = engine();
    let dir = tempfile::tempdir().unwrap();
    let refused = |res: std::io::Result<()>, call: &str, found: &str| {
        let err = res.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(call) && msg.contains(found),
            "{call}, {found}: {msg}"
        );
    };
    let udp = || -> OwnedFd { std::net::UdpSocket::bind("127.0.0.1:0").unwrap().into() };
    let unix_listener =
        |name: &str| -> OwnedFd { StdUnixListener::bind(dir.path().join(name)).unwrap().into() };
    let tcp_listener = || -> OwnedFd { std::net::TcpListener::bind("127.0.0.1:0").unwrap().into() };
    let unix_stream = || -> OwnedFd { StdUnix::pair().unwrap().0.into() };
    let dgram = || -> OwnedFd { UnixDatagram::pair().unwrap().0.into() };
    let tcp_l = |fd: OwnedFd| TcpListener::from_std_with(&engine, fd.into()).map(drop);
    let tcp_s = |fd: OwnedFd| TcpStream::from_std_with(&engine, fd.into()).map(drop);
    let unix_l =
        |fd: OwnedFd| blockio::net::UnixListener::from_std_with(&engine, fd.into()).map(drop);
    let unix_s =
        |fd: OwnedFd| blockio::net::UnixStream::from_std_with(&engine, fd.into()).map(drop);

    refused(tcp_l(udp()), "TcpListener::from_std", "SOCK_DGRAM");
    refused(
        tcp_l(unix_listener("a")),
        "TcpListener::from_std",
        "AF_UNIX",
    );
    refused(tcp_s(udp()), "TcpStream::from_std", "SOCK_DGRAM");
    refused(tcp_s(unix_stream()), "TcpStream::from_std", "AF_UNIX");
    refused(tcp_s(tcp_listener()), "TcpStream::from_std", "listening");
    refused(unix_l(tcp_listener()), "UnixListener::from_std", "AF_INET");
    refused(
        unix_l(unix_stream()),
        "UnixListener::from_std",
        "not listening",
    );
    refused(unix_l(dgram()), "UnixListener::from_std", "SOCK_DGRAM");
    refused(unix_s(dgram()), "UnixStream::from_std", "SOCK_DGRAM");
    refused(
        unix_s(unix_listener("b")),
        "UnixStream::from_std",
        "listening",
    );
    // A TCP socket bound but never listening, as a listener.
    let bound = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    bound
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    refused(
        tcp_l(bound.into()),
        "TcpListener::from_std",
        "not listening",
    );
    // A descriptor that is no socket: the kernel's ENOTSOCK, named.
    let file: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let err = tcp_s(file).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("TcpStream::from_std"), "{msg}");
    assert!(
        msg.contains(&format!("os error {}", libc::ENOTSOCK)),
        "{msg}"
    );
}

/// A std stream whose peer sent bytes and then reset the connection
/// before it was handed over has no peer address left (`ENOTCONN`): it is
/// still taken, as tokio takes it, and its bytes are read before the
/// reset; `peer_addr` gives the kernel's error.
#[test]
fn a_std_stream_whose_peer_sent_and_reset_is_taken_and_its_bytes_read() {
    within_a_minute(|| async {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std_stream = StdStream::connect(server.local_addr().unwrap()).unwrap();
        let (mut peer, _) = server.accept().unwrap();
        peer.write_all(b"hello").unwrap();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        // The reset has arrived once the socket has no peer left.
        while std_stream.peer_addr().is_ok() {
            tokio::task::yield_now().await;
        }
        let stream = TcpStream::from_std(std_stream).unwrap();
        let err = stream.peer_addr().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
        let (n, buf) = stream.read(vec![0u8; 8]).await;
        assert_eq!(&buf[..n.unwrap()], b"hello");
        let (n, _) = stream.read(vec![0u8; 8]).await;
        assert_eq!(n.unwrap_err().raw_os_error(), Some(libc::ECONNRESET));
    });
}

/// A Unix listener left blocking by std and handed over serves one
/// connection after another from a task polled before each client
/// connects, on a current-thread runtime whose one thread also runs the
/// clients: an accept that blocked the thread would hang them.
#[test]
fn a_blocking_unix_listener_handed_over_serves_connections() {
    within_a_minute(|| async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blocking.sock");
        let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let listener = blockio::net::UnixListener::from_std(std_listener).unwrap();
        let (polled_tx, mut polled) = tokio::sync::mpsc::unbounded_channel();
        let server = tokio::spawn(async move {
            for i in 0..5u8 {
                polled_tx.send(()).unwrap();
                let (s, _) = listener.accept().await.unwrap();
                let (n, buf) = s.read(vec![0u8; 4]).await;
                assert_eq!(&buf[..n.unwrap()], &[i], "connection {i}");
            }
        });
        for i in 0..5u8 {
            // The server's task is about to wait in its accept.
            polled.recv().await.unwrap();
            tokio::task::yield_now().await;
            let c = blockio::net::UnixStream::connect(&path).await.unwrap();
            c.write_all(vec![i]).await.0.unwrap();
        }
        server.await.unwrap();
    });
}

/// Whether some epoll set of this process watches the open file that
/// descriptor `fd` names (from `/proc/self/fdinfo`: an epoll set's lines
/// `tfd: N events: ... ino:I ...`, matched by number and inode, so that a
/// watched descriptor of the same number on another file does not count).
#[cfg(feature = "tokio")]
fn watched_by_some_epoll_set(fd: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .unwrap()
        .ino();
    let mut watched = false;
    for entry in std::fs::read_dir("/proc/self/fdinfo").unwrap() {
        let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("tfd:") else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let number: i32 = fields.next().unwrap().parse().unwrap();
            let inode = fields
                .find_map(|f| f.strip_prefix("ino:"))
                .map(|h| u64::from_str_radix(h, 16).unwrap());
            watched |= number == fd && inode == Some(ino);
        }
    }
    watched
}

/// On a multi-thread runtime of two workers, trait reads in a
/// `tokio::select!` against a 10 µs ticker (most of them dropped pending)
/// echo 4 MiB from each of 4 peers, every byte once and in order, then
/// the end of stream. On io_uring the server's streams wait in tokio's
/// own reactor there (their sockets are in an epoll set of the process,
/// as tokio's sockets are), not in a receive kept in the ring, whose
/// completions io_uring posts on whichever worker armed it.
#[cfg(feature = "tokio")]
#[test]
fn trait_reads_on_two_workers_wait_in_tokios_reactor_and_lose_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PEERS: usize = 4;
    const TOTAL: usize = 4 << 20;
    let e = engine();
    let on_uring = e.backend() == blockio::Backend::IoUring;
    let rt = two_workers();
    let listener = futures::executor::block_on(TcpListener::bind_with(&e, "127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = rt.spawn(async move {
        let mut conns = Vec::new();
        for _ in 0..PEERS {
            let (mut s, _) = listener.accept().await.unwrap();
            conns.push(tokio::spawn(async move {
                let mut ticker = tokio::time::interval(Duration::from_micros(10));
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        got = AsyncReadExt::read(&mut s, &mut buf) => {
                            let n = got.unwrap();
                            if n == 0 {
                                break;
                            }
                            AsyncWriteExt::write_all(&mut s, &buf[..n]).await.unwrap();
                        }
                    }
                }
                use std::os::fd::AsRawFd;
                let in_epoll = watched_by_some_epoll_set(s.socket().as_raw_fd());
                AsyncWriteExt::shutdown(&mut s).await.unwrap();
                in_epoll
            }));
        }
        let mut in_epoll = Vec::new();
        for c in conns {
            in_epoll.push(c.await.unwrap());
        }
        in_epoll
    });
    let peers: Vec<_> = (0..PEERS)
        .map(|c| {
            std::thread::spawn(move || {
                let s = StdStream::connect(addr).unwrap().bounded();
                let data: Vec<u8> = (0..TOTAL).map(|i| (i * 7 + c + i / 251) as u8).collect();
                let mut w = s.try_clone().unwrap();
                let sent = data.clone();
                let writer = std::thread::spawn(move || {
                    w.write_all(&sent).unwrap();
                    w.shutdown(Shutdown::Write).unwrap();
                });
                let mut back = Vec::new();
                (&s).read_to_end(&mut back).unwrap();
                writer.join().unwrap();
                assert_eq!(back.len(), TOTAL, "peer {c}: bytes echoed");
                assert!(
                    back == data,
                    "peer {c}: the echo differs from what was sent"
                );
            })
        })
        .collect();
    for p in peers {
        p.join().unwrap();
    }
    let in_epoll = rt.block_on(server).unwrap();
    if on_uring {
        assert_eq!(in_epoll, vec![true; PEERS], "sockets in tokio's reactor");
    }
}

/// Writes 16 MiB through `AsyncWriteExt::write` in a `tokio::select!`
/// against a 10 µs ticker, each turn's slice ending elsewhere (its end
/// drawn per turn), from a task of `rt`, to a peer that reads slowly;
/// checks that the peer got every byte once, in order, and the end.
#[cfg(feature = "tokio")]
fn trait_writes_beside_a_ticker_on(rt: tokio::runtime::Runtime, what: &str) {
    use tokio::io::AsyncWriteExt;
    const TOTAL: usize = 16 << 20;
    let data: Vec<u8> = (0..TOTAL).map(|i| (i * 7 + i / 251) as u8).collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut s = s.bounded();
        let (mut got, mut buf) = (Vec::with_capacity(TOTAL), vec![0u8; 7000]);
        for reads in 1.. {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            // The reader's pace, so that the writer's socket fills.
            if reads % 64 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        got
    });
    let e = engine();
    let sent = data.clone();
    let wrote = rt.block_on(async move {
        tokio::spawn(async move {
            let mut s = TcpStream::connect_with(&e, addr).await.unwrap();
            let mut ticker = tokio::time::interval(Duration::from_micros(10));
            let (mut at, mut draw) = (0, 1usize);
            while at < TOTAL {
                draw = (draw * 1_103_515_245 + 12_345) % (1 << 31);
                let end = (at + 1 + (draw >> 4) % 200_000).min(TOTAL);
                tokio::select! {
                    biased;
                    _ = ticker.tick() => {}
                    w = AsyncWriteExt::write(&mut s, &sent[at..end]) => match w {
                        Ok(n) => at += n,
                        Err(e) => return Err(format!("write at byte {at}: {e}")),
                    },
                }
            }
            AsyncWriteExt::shutdown(&mut s).await.unwrap();
            Ok(at)
        })
        .await
        .unwrap()
    });
    let got = reader.join().unwrap();
    assert_eq!(wrote, Ok(TOTAL), "{what}: the writer");
    assert_eq!(got.len(), TOTAL, "{what}: bytes the peer got");
    assert!(got == data, "{what}: the bytes differ from those written");
}

/// `AsyncWriteExt::write` dropped pending in a `select!` and made again
/// with a slice that ends elsewhere sends every byte once, in order, on
/// a multi-thread runtime, as tokio's write does: a write that returned
/// pending took none of its bytes.
#[cfg(feature = "tokio")]
#[test]
fn trait_writes_dropped_in_a_select_send_every_byte_once_on_a_multi_thread_runtime() {
    let rt = two_workers();
    trait_writes_beside_a_ticker_on(rt, "multi-thread");
}

/// As on a multi-thread runtime, from a task of a current-thread runtime.
#[cfg(feature = "tokio")]
#[test]
fn trait_writes_dropped_in_a_select_send_every_byte_once_on_a_current_thread_runtime() {
    trait_writes_beside_a_ticker_on(current_thread(), "current-thread");
}

/// The halves of a split stream polled from two runtimes at once: the
/// reading half waits on runtime A (in A's reactor), then the writing half
/// fills the socket from runtime B and waits for room (not in B's reactor:
/// the registration the halves share stays with A's while the read waits
/// there, and the write waits as where no reactor serves it). The peer's
/// byte then reaches the waiting read, and once the peer drains the
/// socket every byte written arrives, as with tokio's stream. (Moving the
/// registration to B under the waiting read dropped the read's waker, and
/// the read never woke.)
#[cfg(feature = "tokio")]
#[test]
fn split_halves_waiting_on_two_runtimes_at_once_are_both_woken() {
    use futures::FutureExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const TOTAL: usize = 32 << 20;
    let e = engine();
    let (a, b) = (two_workers(), two_workers());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let s = a.block_on(TcpStream::connect_with(&e, addr)).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let (mut r, mut w) = s.into_split();
    let (parked_tx, parked_rx) = std::sync::mpsc::channel();
    let read_parked = parked_tx.clone();
    let reader = a.spawn(async move {
        let mut buf = [0u8; 16];
        let mut read = std::pin::pin!(AsyncReadExt::read(&mut r, &mut buf));
        assert!(
            read.as_mut().now_or_never().is_none(),
            "nothing was sent yet"
        );
        read_parked.send("read").unwrap();
        let n = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the read waiting on runtime A was never woken")
            .unwrap();
        buf[..n].to_vec()
    });
    assert_eq!(parked_rx.recv().unwrap(), "read");
    let data: Vec<u8> = (0..TOTAL).map(|i| (i * 11 + i / 253) as u8).collect();
    let sent = data.clone();
    let writer = b.spawn(async move {
        let mut at = 0;
        loop {
            let mut write = std::pin::pin!(AsyncWriteExt::write(&mut w, &sent[at..]));
            match write.as_mut().now_or_never() {
                Some(n) => at += n.unwrap(),
                None => {
                    parked_tx.send("write").unwrap();
                    at += write.await.unwrap();
                    break;
                }
            }
        }
        AsyncWriteExt::write_all(&mut w, &sent[at..]).await.unwrap();
        AsyncWriteExt::shutdown(&mut w).await.unwrap();
    });
    assert_eq!(parked_rx.recv().unwrap(), "write");
    peer.write_all(b"x").unwrap();
    assert_eq!(a.block_on(reader).unwrap(), b"x");
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    b.block_on(writer).unwrap();
    assert_eq!(got.len(), TOTAL, "bytes the peer got");
    assert!(got == data, "the bytes differ from those written");
}

/// A stream split in two, on a multi-thread runtime: one task reads
/// 8 MiB through the reading half while another writes 8 MiB through the
/// writing half, each in a `tokio::select!` against a 10 µs ticker, to a
/// peer that reads slowly, so both wait in tokio's reactor at once (the
/// socket's one registration, which the halves share: a second would be
/// refused with `EEXIST`). Every byte arrives once, in order, both ways.
#[cfg(feature = "tokio")]
#[test]
fn split_halves_reading_and_writing_at_once_through_the_reactor_lose_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const TOTAL: usize = 8 << 20;
    let up: Vec<u8> = (0..TOTAL).map(|i| (i * 13 + i / 257) as u8).collect();
    let down: Vec<u8> = (0..TOTAL).map(|i| (i * 5 + i / 263) as u8).collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sent_up = up.clone();
    let peer = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let s = s.bounded();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || w.write_all(&sent_up).unwrap());
        let (mut got, mut buf) = (Vec::with_capacity(TOTAL), vec![0u8; 7000]);
        for reads in 1.. {
            let n = (&s).read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            // The reader's pace, so that the writer's socket fills.
            if reads % 64 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        writer.join().unwrap();
        got
    });
    let rt = two_workers();
    let e = engine();
    let sent_down = down.clone();
    let read_up = rt.block_on(async move {
        let s = TcpStream::connect_with(&e, addr).await.unwrap();
        let (mut r, mut w) = s.into_split();
        let writer = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_micros(10));
            let mut at = 0;
            while at < TOTAL {
                let end = (at + 100_000).min(TOTAL);
                tokio::select! {
                    biased;
                    _ = ticker.tick() => {}
                    n = AsyncWriteExt::write(&mut w, &sent_down[at..end]) => at += n.unwrap(),
                }
            }
            AsyncWriteExt::shutdown(&mut w).await.unwrap();
        });
        let reader = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_micros(10));
            let (mut got, mut buf) = (Vec::with_capacity(TOTAL), vec![0u8; 64 << 10]);
            while got.len() < TOTAL {
                tokio::select! {
                    biased;
                    _ = ticker.tick() => {}
                    n = AsyncReadExt::read(&mut r, &mut buf) => match n.unwrap() {
                        0 => break,
                        n => got.extend_from_slice(&buf[..n]),
                    },
                }
            }
            got
        });
        writer.await.unwrap();
        reader.await.unwrap()
    });
    let got_down = peer.join().unwrap();
    assert_eq!(read_up.len(), TOTAL, "bytes read through the reading half");
    assert!(read_up == up, "the bytes read differ from those sent");
    assert_eq!(got_down.len(), TOTAL, "bytes the peer got");
    assert!(
        got_down == down,
        "the bytes written differ from those the peer got"
    );
}
