//! The auto read path: page-cache hits served on the calling thread, misses
//! and everything else sent to the backend, results identical either way.

use std::fs::{File, OpenOptions};
use std::io::{IoSliceMut, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use blockio::{AlignedBuf, Engine, Op, ReadPath};

/// A synced temp file of `blocks` 4 KiB blocks; block `i` is filled with
/// byte `i as u8`.
fn block_file(blocks: usize) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    for i in 0..blocks {
        f.write_all(&[i as u8; 4096]).unwrap();
    }
    f.as_file().sync_all().unwrap();
    f
}

fn warm(file: &File) {
    let mut buf = vec![0u8; 1 << 16];
    let mut off = 0;
    while file.read_at(&mut buf, off).unwrap() > 0 {
        off += buf.len() as u64;
    }
}

fn evict(file: &File) {
    // SAFETY: fadvise on an open descriptor has no memory effects.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// Reads every 4 KiB block in a scrambled order, `per_batch` reads of
/// `blocks_per_read` blocks per batch, checks each, returns the stats delta.
fn read_blocks_in(
    engine: &Engine,
    file: &File,
    blocks: usize,
    per_batch: usize,
    blocks_per_read: usize,
) -> blockio::EngineStats {
    let before = engine.stats();
    let reads = blocks / blocks_per_read;
    let order: Vec<usize> = (0..reads).map(|i| (i * 7919) % reads).collect();
    let len = 4096 * blocks_per_read;
    for chunk in order.chunks(per_batch) {
        let mut bufs = vec![vec![0u8; len]; chunk.len()];
        let mut ops: Vec<Op> = chunk
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&r, buf)| Op::read(file, (r * len) as u64, buf))
            .collect();
        let res = engine.submit(&mut ops).unwrap();
        drop(ops);
        for ((&r, res), buf) in chunk.iter().zip(&res).zip(&bufs) {
            assert_eq!(*res.as_ref().unwrap(), len, "read {r}");
            for (k, block) in buf.chunks(4096).enumerate() {
                let b = r * blocks_per_read + k;
                assert!(
                    block.iter().all(|&x| x == b as u8),
                    "block {b} has wrong bytes"
                );
            }
        }
    }
    let after = engine.stats();
    blockio::EngineStats {
        served_inline: after.served_inline - before.served_inline,
        served_inline_blocking: after.served_inline_blocking - before.served_inline_blocking,
        sent_to_backend: after.sent_to_backend - before.sent_to_backend,
    }
}

fn read_blocks(engine: &Engine, file: &File, blocks: usize) -> blockio::EngineStats {
    read_blocks_in(engine, file, blocks, blocks, 1)
}

#[test]
fn warm_reads_in_small_batches_are_served_inline() {
    let f = block_file(64);
    let file = File::open(f.path()).unwrap();
    warm(&file);
    let e = Engine::new().unwrap();
    assert_eq!(e.read_path(), ReadPath::Auto);
    for per_batch in [2, 3, 7] {
        let s = read_blocks_in(&e, &file, 63, per_batch, 1);
        // 63 = 31 * 2 + 1 leaves one batch of a single read.
        let alone = u64::from(63 % per_batch == 1);
        assert_eq!(s.served_inline, 63 - alone, "batches of {per_batch}");
        assert_eq!(s.served_inline_blocking, alone, "batches of {per_batch}");
        assert_eq!(s.sent_to_backend, 0, "batches of {per_batch}");
    }
}

#[test]
fn reads_alone_in_their_batch_run_inline_cached_or_not() {
    let f = block_file(64);
    let file = File::open(f.path()).unwrap();
    let e = Engine::new().unwrap();
    evict(&file);
    let s = read_blocks_in(&e, &file, 64, 1, 1);
    assert_eq!(
        (s.served_inline, s.served_inline_blocking, s.sent_to_backend),
        (0, 64, 0)
    );
    let s = read_blocks_in(&e, &file, 64, 1, 1);
    assert_eq!(
        (s.served_inline, s.served_inline_blocking, s.sent_to_backend),
        (0, 64, 0)
    );
    // Past the end: the same short count and error as the backend gives.
    let mut buf = [0u8; 100];
    let mut ops = [Op::read(&file, 64 * 4096 - 10, &mut buf)];
    assert_eq!(*e.submit(&mut ops).unwrap()[0].as_ref().unwrap(), 10);
    let w = File::create(f.path().with_extension("w")).unwrap();
    let mut ops = [Op::read(&w, 0, &mut buf)];
    let err = e.submit(&mut ops).unwrap().remove(0).unwrap_err();
    let submitted = Engine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let mut ops = [Op::read(&w, 0, &mut buf)];
    let want = submitted.submit(&mut ops).unwrap().remove(0).unwrap_err();
    assert_eq!(err.to_string(), want.to_string());
    assert!(err.to_string().contains("Bad file descriptor"), "{err}");
    // A write alone in its batch still goes to the backend.
    let mut ops = [Op::write(&w, 0, b"x")];
    let before = e.stats();
    assert_eq!(*e.submit(&mut ops).unwrap()[0].as_ref().unwrap(), 1);
    assert_eq!(e.stats().sent_to_backend - before.sent_to_backend, 1);
    std::fs::remove_file(f.path().with_extension("w")).unwrap();
}

#[test]
fn reads_alone_in_their_batch_are_submitted_when_the_read_path_says_so() {
    let f = block_file(8);
    let file = File::open(f.path()).unwrap();
    let e = Engine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let s = read_blocks_in(&e, &file, 8, 1, 1);
    assert_eq!(
        (s.served_inline, s.served_inline_blocking, s.sent_to_backend),
        (0, 0, 8)
    );
}

#[test]
fn warm_large_reads_are_served_inline_only_in_batches_under_3() {
    let f = block_file(256);
    let file = File::open(f.path()).unwrap();
    warm(&file);
    let e = Engine::new().unwrap();
    // 64 KiB reads: 16 blocks each, 16 reads.
    let s = read_blocks_in(&e, &file, 256, 2, 16);
    assert_eq!((s.served_inline, s.sent_to_backend), (16, 0));
    let s = read_blocks_in(&e, &file, 256, 4, 16);
    assert_eq!((s.served_inline, s.sent_to_backend), (0, 16));
}

#[test]
fn warm_small_reads_in_big_batches_go_to_the_backend() {
    // The ring is faster than one preadv2 per read for these (see engine/inline.rs).
    let f = block_file(64);
    let file = File::open(f.path()).unwrap();
    warm(&file);
    let e = Engine::new().unwrap();
    let s = read_blocks_in(&e, &file, 64, 8, 1);
    assert_eq!(s.served_inline, 0);
    assert_eq!(s.sent_to_backend, 64);
}

/// Reads of an evicted file have its bytes whether their try was served or
/// they went to the backend (the try starts the pages' readahead, which
/// this machine's disk answers within the call for stretches at a time,
/// so which way each went is the kernel's choice); a read the try cannot
/// return whole, one crossing the end of the file, goes to the backend,
/// which gives its short count.
#[test]
fn reads_the_try_cannot_serve_whole_go_to_the_backend_with_the_same_bytes() {
    let f = block_file(512);
    let file = File::open(f.path()).unwrap();
    evict(&file);
    let e = Engine::new().unwrap();
    let s = read_blocks_in(&e, &file, 512, 2, 1);
    assert_eq!(s.served_inline + s.sent_to_backend, 512, "{s:?}");
    warm(&file);
    let (mut a, mut b) = ([0xffu8; 4096], [0u8; 4096]);
    let mut ops = [
        Op::read(&file, 0, &mut a),
        Op::read(&file, 512 * 4096 - 100, &mut b),
    ];
    let before = e.stats();
    let res = e.submit(&mut ops).unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 4096);
    assert_eq!(*res[1].as_ref().unwrap(), 100);
    assert!(a.iter().all(|&x| x == 0) && b[..100].iter().all(|&x| x == (511 % 256) as u8));
    let after = e.stats();
    assert_eq!(
        (
            after.served_inline - before.served_inline,
            after.sent_to_backend - before.sent_to_backend
        ),
        (1, 1),
        "the cached read served, the one crossing the end sent"
    );
}

#[test]
fn backend_read_path_sends_every_read() {
    let f = block_file(32);
    let file = File::open(f.path()).unwrap();
    warm(&file);
    let e = Engine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let s = read_blocks(&e, &file, 32);
    assert_eq!(s.served_inline, 0);
    assert_eq!(s.sent_to_backend, 32);
}

#[test]
fn files_opened_with_o_direct_elsewhere_are_not_read_inline() {
    let f = block_file(16);
    let plain = File::open(f.path()).unwrap();
    warm(&plain);
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(f.path())
        .unwrap();
    let e = Engine::new().unwrap();
    let mut bufs: Vec<AlignedBuf> = (0..16).map(|_| AlignedBuf::new(4096, 4096)).collect();
    let before = e.stats();
    // Batches of 2: small enough that a buffered file would be read inline.
    for (k, pair) in bufs.chunks_mut(2).enumerate() {
        let mut ops: Vec<Op> = pair
            .iter_mut()
            .enumerate()
            .map(|(j, b)| Op::read(&direct, (2 * k + j) as u64 * 4096, b))
            .collect();
        let res = e.submit(&mut ops).unwrap();
        for r in res {
            assert_eq!(r.unwrap(), 4096);
        }
    }
    for (i, b) in bufs.iter().enumerate() {
        assert!(b.iter().all(|&x| x == i as u8));
    }
    let after = e.stats();
    assert_eq!(after.served_inline, before.served_inline);
    assert_eq!(after.sent_to_backend - before.sent_to_backend, 16);
    // The same data through the buffered descriptor is served inline.
    let s = read_blocks_in(&e, &plain, 16, 2, 1);
    assert_eq!((s.served_inline, s.sent_to_backend), (16, 0));
}

#[test]
fn vectored_reads_partial_hits_and_writes() {
    let mut f = block_file(8);
    let file = f.as_file_mut().try_clone().unwrap();
    warm(&file);
    let e = Engine::new().unwrap();
    let (mut a, mut b) = ([0u8; 100], [0u8; 5000]);
    let mut iov = [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)];
    let mut tail = [0u8; 4096];
    let patch = [0xEEu8; 10];
    let before = e.stats();
    let mut ops = [
        Op::read_vectored(&file, 4000, &mut iov),
        // Crosses end of file: short, redone by the backend, still right.
        Op::read(&file, 8 * 4096 - 50, &mut tail),
        Op::write(&file, 3, &patch),
    ];
    let res = e.submit(&mut ops).unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 5100);
    assert_eq!(*res[1].as_ref().unwrap(), 50);
    assert_eq!(*res[2].as_ref().unwrap(), 10);
    // a covers bytes 4000..4100: block 0, then 4 bytes of block 1.
    assert!(a[..96].iter().all(|&x| x == 0) && a[96..].iter().all(|&x| x == 1));
    // b covers bytes 4100..9100: block 1 up to 8192, then block 2.
    assert!(b[..4092].iter().all(|&x| x == 1) && b[4092..].iter().all(|&x| x == 2));
    assert!(tail[..50].iter().all(|&x| x == 7));
    let after = e.stats();
    assert_eq!(after.served_inline - before.served_inline, 1);
    assert_eq!(after.sent_to_backend - before.sent_to_backend, 2);
}
