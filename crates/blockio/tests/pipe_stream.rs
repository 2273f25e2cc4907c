//! Streaming (`AsyncRead`/`AsyncWrite`/`AsyncSeek`) of a pipe through
//! `AsyncFile`, on both backends: every byte, in order, the end only at a
//! 0-byte read, and seeks refused with `ESPIPE` as std refuses them.

use std::io::{Read, SeekFrom, Write};

use blockio::aio::{AsyncEngine, AsyncFile};
use blockio::BackendChoice;
use futures::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

mod common;
use common::Rng;

const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::ThreadPool];

/// 8 MiB of numbered 8-byte words: word `i` is `i` little-endian (enough
/// for several reads or writes in flight on one pipe to be seen served out
/// of order without the one-at-a-time rule).
const PATTERN_WORDS: u64 = 1 << 20;

fn pattern() -> Vec<u8> {
    (0..PATTERN_WORDS).flat_map(|i| i.to_le_bytes()).collect()
}

/// The index of the first word of `got` that is not the pattern's, if any,
/// with what it holds.
fn first_out_of_order(got: &[u8]) -> Option<(usize, u64)> {
    got.chunks(8).enumerate().find_map(|(i, w)| {
        let mut word = [0u8; 8];
        word[..w.len()].copy_from_slice(w);
        let v = u64::from_le_bytes(word);
        (w.len() != 8 || v != i as u64).then_some((i, v))
    })
}

/// Writes `data` to `w` in chunks of random sizes (1 byte to 256 KiB),
/// then closes it; an error (the reader gone) ends it early.
fn write_in_random_chunks(mut w: std::fs::File, data: &[u8], seed: u64) -> std::io::Result<()> {
    let mut rng = Rng(seed | 1);
    let mut at = 0;
    while at < data.len() {
        let n = (1 + rng.below(256 << 10) as usize).min(data.len() - at);
        w.write_all(&data[at..at + n])?;
        at += n;
    }
    Ok(())
}

/// `read_to_end` of a pipe whose writer writes 5 pieces of 1000 bytes
/// with pauses between them (so that reads come back short, whatever the
/// timing) gets all 5000 bytes, in order: a short read is not the end,
/// only the 0-byte read after the writer closed is.
#[test]
fn read_to_end_of_a_pipe_fed_in_pieces_gets_every_byte() {
    for backend in BACKENDS {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (r, mut w) = common::pipe();
        let mut file = AsyncFile::from_file(&engine, r);
        let expected: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let data = expected.clone();
        let writer = std::thread::spawn(move || {
            for piece in data.chunks(1000) {
                w.write_all(piece)?;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok::<_, std::io::Error>(())
        });
        let mut got = Vec::new();
        let res = futures::executor::block_on(file.read_to_end(&mut got));
        drop(file);
        let written = writer.join().unwrap();
        assert_eq!(res.as_ref().ok(), Some(&5000), "{backend:?}: {res:?}");
        assert!(got == expected, "{backend:?}: the bytes differ");
        written.unwrap();
    }
}

/// An 8 MiB numbered pattern written into a pipe in random-sized chunks
/// comes out of `futures::io::copy` from the pipe's `AsyncFile` whole and
/// in order (several reads in flight on one pipe could be handed its
/// bytes out of order).
#[test]
fn copy_from_a_pipe_keeps_order() {
    let data = std::sync::Arc::new(pattern());
    for (seed, backend) in BACKENDS.into_iter().enumerate() {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (r, w) = common::pipe();
        let mut file = AsyncFile::from_file(&engine, r);
        let src = data.clone();
        let writer = std::thread::spawn(move || write_in_random_chunks(w, &src, seed as u64 + 7));
        let mut out = futures::io::Cursor::new(Vec::with_capacity(data.len()));
        let res = futures::executor::block_on(futures::io::copy(&mut file, &mut out));
        // Closes the read end, so that a writer left waiting ends.
        drop(file);
        let written = writer.join().unwrap();
        let got = out.into_inner();
        assert_eq!(
            res.as_ref().ok(),
            Some(&(data.len() as u64)),
            "{backend:?}: {res:?}"
        );
        assert_eq!(first_out_of_order(&got), None, "{backend:?}: (word, value)");
        written.unwrap();
    }
}

/// The same pattern copied into a pipe's `AsyncFile` (write-behind, a
/// flush, then the file closed) reaches the reader at the other end whole
/// and in order.
#[test]
fn copy_to_a_pipe_keeps_order() {
    let data = pattern();
    for backend in BACKENDS {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (r, w) = common::pipe();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut r = r;
            r.read_to_end(&mut got).map(|_| got)
        });
        let mut file = AsyncFile::from_file(&engine, w);
        let res = futures::executor::block_on(async {
            let n = futures::io::copy(&mut futures::io::Cursor::new(&data[..]), &mut file).await?;
            file.flush().await?;
            Ok::<_, std::io::Error>(n)
        });
        // Closes the write end: the reader sees the end.
        drop(file);
        let got = reader.join().unwrap().unwrap();
        assert_eq!(
            res.as_ref().ok(),
            Some(&(data.len() as u64)),
            "{backend:?}: {res:?}"
        );
        assert_eq!(got.len(), data.len(), "{backend:?}");
        assert_eq!(first_out_of_order(&got), None, "{backend:?}: (word, value)");
    }
}

/// Every seek on a pipe's stream fails with `ESPIPE`, as std's
/// `File::seek` on the same pipe does, and the stream still reads after.
#[test]
fn a_seek_on_a_pipe_stream_is_espipe() {
    for backend in BACKENDS {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (r, mut w) = common::pipe();
        let std_err = std::io::Seek::seek(&mut &r, SeekFrom::Start(0)).unwrap_err();
        assert_eq!(std_err.raw_os_error(), Some(libc::ESPIPE));
        let mut file = AsyncFile::from_file(&engine, r);
        w.write_all(b"abc").unwrap();
        drop(w);
        futures::executor::block_on(async {
            for pos in [SeekFrom::Start(0), SeekFrom::Current(0), SeekFrom::End(0)] {
                let res = file.seek(pos).await;
                assert_eq!(
                    res.as_ref().map_err(|e| e.raw_os_error()),
                    Err(Some(libc::ESPIPE)),
                    "{backend:?}: seek {pos:?} gave {res:?}"
                );
            }
            let mut got = Vec::new();
            file.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"abc", "{backend:?}");
        });
    }
}

/// A Unix socket pair whose other end echoes what it reads on a thread of
/// its own until it reads the end: our end, and the echoing thread.
fn echo_peer() -> (
    std::os::unix::net::UnixStream,
    std::thread::JoinHandle<std::io::Result<()>>,
) {
    let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 100_000];
        loop {
            let n = peer.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            peer.write_all(&buf[..n])?;
        }
    });
    (ours, echo)
}

/// A socket read and written at once through one `AsyncFile` (its halves
/// split, a peer echoing what it reads): 2 MiB each way arrive whole and
/// in order. A read that waited for the writes in flight would wait for
/// the peer, which waits for its echo to be read: neither ever ends.
#[test]
fn a_socket_read_and_written_at_once_echoes_everything() {
    for backend in BACKENDS {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (ours, echo) = echo_peer();
        let file = AsyncFile::from_file(&engine, std::os::fd::OwnedFd::from(ours).into());
        let (mut rd, mut wr) = file.split();
        let data: Vec<u8> = pattern()[..2 << 20].to_vec();
        let got = futures::executor::block_on(async {
            let write = async {
                wr.write_all(&data).await?;
                wr.flush().await
            };
            let read = async {
                let mut got = vec![0u8; data.len()];
                rd.read_exact(&mut got).await.map(|()| got)
            };
            futures::join!(write, read)
        });
        // Closes our end: the peer reads the end.
        drop((rd, wr));
        echo.join().unwrap().unwrap();
        got.0.unwrap();
        let got = got.1.unwrap();
        assert_eq!(got.len(), data.len(), "{backend:?}");
        assert_eq!(first_out_of_order(&got), None, "{backend:?}: (word, value)");
    }
}

/// tokio's `poll_complete` with no seek started reports the position:
/// a pipe has none, so it is `ESPIPE`, as std's `stream_position` is.
#[cfg(feature = "tokio")]
#[test]
fn tokio_poll_complete_on_a_pipe_is_espipe() {
    use tokio::io::AsyncSeek;
    for backend in BACKENDS {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (r, _w) = common::pipe();
        let std_err = std::io::Seek::stream_position(&mut &r).unwrap_err();
        assert_eq!(std_err.raw_os_error(), Some(libc::ESPIPE));
        let mut file = AsyncFile::from_file(&engine, r);
        let res = futures::executor::block_on(std::future::poll_fn(|cx| {
            std::pin::Pin::new(&mut file).poll_complete(cx)
        }));
        assert_eq!(
            res.as_ref().map_err(|e| e.raw_os_error()),
            Err(Some(libc::ESPIPE)),
            "{backend:?}: {res:?}"
        );
    }
}

/// Requests and their echoes on one socket through one `AsyncFile`, with
/// no flush between a request and the read of its answer on every other
/// round: each answer comes, whole (a read sends the block being filled,
/// or the peer would wait for it forever), for requests of 1 to 5000
/// bytes.
#[test]
fn a_socket_written_then_read_gets_its_echo_without_a_flush() {
    for backend in BACKENDS {
        let engine = AsyncEngine::builder().backend(backend).build().unwrap();
        let (ours, echo) = echo_peer();
        let mut file = AsyncFile::from_file(&engine, std::os::fd::OwnedFd::from(ours).into());
        let mut rng = Rng(12345);
        futures::executor::block_on(async {
            for round in 0..200 {
                let n = 1 + rng.below(5000) as usize;
                let msg: Vec<u8> = (0..n).map(|i| (i + round) as u8).collect();
                file.write_all(&msg).await.unwrap();
                if round % 2 == 0 {
                    file.flush().await.unwrap();
                }
                let mut got = vec![0u8; n];
                file.read_exact(&mut got).await.unwrap();
                assert!(got == msg, "{backend:?}: round {round}");
            }
        });
        drop(file);
        echo.join().unwrap().unwrap();
    }
}
