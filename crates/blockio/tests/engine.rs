//! Behaviour of the engine, checked against `pread`.
//!
//! `.ci/run` runs this suite twice: as is (io_uring) and with
//! `BLOCKIO_BACKEND=threads` (the fallback). `backend_follows_environment`
//! makes sure each run really used the backend it meant to.

use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;

use blockio::{
    errno, AlignedBuf, Backend, BufferPool, DirectFile, Engine, Op, OpError, OpKind, RawTarget,
};

mod common;
use common::{data_file, Rng};

fn pread_all(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = file
            .read_at(&mut buf[done..], offset + done as u64)
            .unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

/// Reads `specs` (offset, length) through the engine into `bufs` and checks
/// every result and every byte against `pread` on `plain`.
fn read_and_compare<T, B>(
    e: &Engine,
    file: &T,
    plain: &File,
    specs: &[(u64, usize)],
    mut bufs: Vec<B>,
) where
    T: blockio::Target,
    B: std::ops::DerefMut<Target = [u8]>,
{
    let mut ops: Vec<Op> = specs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&(o, l), b)| Op::read(file, o, &mut b[..l]))
        .collect();
    let res = e.submit(&mut ops).unwrap();
    drop(ops);
    for (i, (&(o, l), r)) in specs.iter().zip(&res).enumerate() {
        let want = pread_all(plain, o, l);
        let got = *r.as_ref().unwrap();
        assert_eq!(got, want.len(), "op {i}: offset {o} len {l}");
        assert_eq!(&bufs[i][..got], &want[..], "op {i}");
    }
}

fn engine() -> Engine {
    Engine::new().unwrap()
}

#[test]
fn backend_follows_environment() {
    let e = engine();
    match std::env::var("BLOCKIO_BACKEND").as_deref() {
        Ok("threads") => {
            assert_eq!(e.backend(), Backend::ThreadPool);
            assert!(e.fallback_reason().unwrap().contains("requested"));
            assert!(e.fallback_threads() > 0);
        }
        _ => {
            // This project's machines run io_uring; a silent fallback here
            // would mean the io_uring suite never ran.
            assert_eq!(e.backend(), Backend::IoUring, "{:?}", e.fallback_reason());
            let p = e.probe().unwrap();
            assert!(p.entries >= 1);
            // What the ring performs follows the probe, opcode by opcode
            // (FTRUNCATE needs 6.9, the others 5.6 or 5.15).
            assert_eq!(p.performs(OpKind::Ftruncate), p.ftruncate, "{p:?}");
            assert_eq!(p.performs(OpKind::Open), p.metadata_ops, "{p:?}");
            assert!(p.performs(OpKind::Read) && p.performs(OpKind::Send));
        }
    }
}

#[test]
fn thread_pool_backend_can_be_chosen_in_code() {
    let e = Engine::builder()
        .backend(blockio::BackendChoice::ThreadPool)
        .build()
        .unwrap();
    assert_eq!(e.backend(), Backend::ThreadPool);
}

/// With `no_pool_threads`, the thread-pool backend starts no worker and
/// the submitting thread runs every batch itself, whole and correct.
#[test]
fn thread_pool_backend_with_no_pool_threads_runs_batches_on_the_caller() {
    let e = Engine::builder()
        .backend(blockio::BackendChoice::ThreadPool)
        .no_pool_threads(true)
        .build()
        .unwrap();
    assert_eq!(e.backend(), Backend::ThreadPool);
    assert_eq!(e.fallback_threads(), 0);
    let (path, _) = data_file(1 << 20, 5);
    let file = File::open(&path).unwrap();
    let specs: Vec<(u64, usize)> = (0..64).map(|i| (i * 12_345, 4096)).collect();
    let bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, l)| vec![0xAA; l]).collect();
    read_and_compare(&e, &file, &file, &specs, bufs);
}

#[test]
fn random_reads_match_pread_buffered() {
    let (path, data) = data_file(3 << 20, 1);
    let file = File::open(&path).unwrap();
    let e = engine();
    let mut rng = Rng(42);
    for _ in 0..20 {
        let n = 1 + rng.below(200) as usize;
        let specs: Vec<(u64, usize)> = (0..n)
            .map(|_| {
                (
                    rng.below(data.len() as u64 + 100),
                    rng.below(70_000) as usize,
                )
            })
            .collect();
        let bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, l)| vec![0xAA; l]).collect();
        read_and_compare(&e, &file, &file, &specs, bufs);
    }
}

#[test]
fn random_reads_match_pread_direct() {
    let (path, data) = data_file(4 << 20, 2);
    let plain = File::open(&path).unwrap();
    let file = DirectFile::open(&path).unwrap();
    let align = file.alignment();
    assert!(align.offset.is_power_of_two() && align.memory.is_power_of_two());
    let a = align.offset as u64;
    let e = engine();
    let mut rng = Rng(7);
    for _ in 0..10 {
        let n = 1 + rng.below(100) as usize;
        let specs: Vec<(u64, usize)> = (0..n)
            .map(|_| {
                (
                    rng.below(data.len() as u64 / a + 2) * a,
                    (1 + rng.below(16)) as usize * a as usize,
                )
            })
            .collect();
        let bufs: Vec<AlignedBuf> = specs.iter().map(|&(_, l)| file.alloc_buf(l)).collect();
        read_and_compare(&e, &file, &plain, &specs, bufs);
    }
}

/// Buffers of 2 MiB and more are separate huge-page mappings (see
/// `AlignedBuf`): direct reads into them, at file offsets on and off 2 MiB
/// boundaries, of lengths that are and are not whole huge pages, and one
/// cut short by the end of the file, must see the same bytes as pread.
#[test]
fn direct_reads_into_huge_page_buffers_match_pread() {
    let (path, _) = data_file(12 << 20, 5);
    let plain = File::open(&path).unwrap();
    let file = DirectFile::open(&path).unwrap();
    let a = file.alignment().offset as usize;
    let specs = [(0, 4 << 20), (a as u64, (2 << 20) + a), (8 << 20, 5 << 20)];
    let bufs: Vec<AlignedBuf> = specs.iter().map(|&(_, l)| file.alloc_buf(l)).collect();
    read_and_compare(&engine(), &file, &plain, &specs, bufs);
}

#[test]
fn concurrent_threads_each_get_their_own_results() {
    let (path, data) = data_file(2 << 20, 3);
    let file = File::open(&path).unwrap();
    let e = Engine::builder()
        .queue_depth(32)
        .max_batch(16)
        .rings(6)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..12u64 {
            let (e, file, data) = (e.clone(), &file, &data);
            s.spawn(move || {
                let mut rng = Rng(100 + t);
                let mut results = Vec::new();
                for _ in 0..150 {
                    let n = 1 + rng.below(64) as usize;
                    let specs: Vec<(u64, usize)> = (0..n)
                        .map(|_| (rng.below(data.len() as u64), 1 + rng.below(9000) as usize))
                        .collect();
                    let mut bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, l)| vec![0; l]).collect();
                    let mut ops: Vec<Op> = specs
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&(o, _), b)| Op::read(file, o, b))
                        .collect();
                    e.submit_into(&mut ops, &mut results).unwrap();
                    drop(ops);
                    assert_eq!(results.len(), n);
                    for (i, &(o, l)) in specs.iter().enumerate() {
                        let end = (o as usize + l).min(data.len());
                        let got = *results[i].as_ref().unwrap();
                        assert_eq!(got, end - o as usize);
                        assert_eq!(&bufs[i][..got], &data[o as usize..end], "thread {t} op {i}");
                    }
                }
            });
        }
    });
}

/// More threads than rings, batches larger than both the ring and the
/// in-flight bound: every thread must finish. (A thread that waited for
/// permits while holding a ring, while others held permits and waited for a
/// ring, once hung this; the watchdog turns such a hang into a failure.)
#[test]
fn threads_outnumbering_rings_and_permits_never_deadlock() {
    let (tmp, data) = data_file(1 << 20, 7);
    let (path, data) = (tmp.to_path_buf(), std::sync::Arc::new(data));
    let e = Engine::builder()
        .queue_depth(8)
        .max_batch(4)
        .rings(2)
        .build()
        .unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let threads = 10u64;
    for t in 0..threads {
        let (e, path, data, done_tx) = (e.clone(), path.clone(), data.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let file = File::open(&path).unwrap();
            let mut rng = Rng(500 + t);
            let mut results = Vec::new();
            for _ in 0..40 {
                let n = 1 + rng.below(30) as usize;
                let offs: Vec<u64> = (0..n).map(|_| rng.below(data.len() as u64 - 512)).collect();
                let mut bufs = vec![[0u8; 512]; n];
                let mut ops: Vec<Op> = offs
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(&o, b)| Op::read(&file, o, b))
                    .collect();
                e.submit_into(&mut ops, &mut results).unwrap();
                drop(ops);
                for (i, &o) in offs.iter().enumerate() {
                    assert_eq!(*results[i].as_ref().unwrap(), 512);
                    assert_eq!(&bufs[i][..], &data[o as usize..o as usize + 512]);
                }
            }
            done_tx.send(t).unwrap();
        });
    }
    drop(done_tx);
    for _ in 0..threads {
        done_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a submitting thread failed or is stuck (deadlock?)");
    }
}

#[test]
fn reads_at_and_past_end_of_file() {
    let (path, _) = data_file(10_000, 4);
    let file = File::open(&path).unwrap();
    let e = engine();
    let (mut a, mut b, mut c) = (vec![0; 4096], vec![0; 4096], vec![0; 10]);
    let res = e
        .submit(&mut [
            Op::read(&file, 8192, &mut a),
            Op::read(&file, 10_000, &mut b),
            Op::read(&file, 1 << 40, &mut c),
        ])
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 10_000 - 8192);
    assert_eq!(*res[1].as_ref().unwrap(), 0);
    assert_eq!(*res[2].as_ref().unwrap(), 0);
}

#[test]
fn reads_into_uninitialised_memory_fill_exactly_the_bytes_read() {
    use std::mem::MaybeUninit;
    let (path, data) = data_file(100_000, 6);
    let file = File::open(&path).unwrap();
    let e = engine();
    // Small batches of buffered reads take the inline path, bigger ones
    // the backend: both must fill the buffers.
    for batch in [1usize, 16] {
        let mut bufs: Vec<Vec<MaybeUninit<u8>>> = (0..batch)
            .map(|_| {
                let mut v = Vec::with_capacity(4096);
                v.resize(4096, MaybeUninit::uninit());
                v
            })
            .collect();
        let offsets: Vec<u64> = (0..batch as u64).map(|i| i * 613).collect();
        let mut ops: Vec<Op> = bufs
            .iter_mut()
            .zip(&offsets)
            .map(|(b, &o)| Op::read_uninit(&file, o, b))
            .collect();
        let res = e.submit(&mut ops).unwrap();
        drop(ops);
        for ((b, &o), r) in bufs.iter().zip(&offsets).zip(&res) {
            let n = *r.as_ref().unwrap();
            assert_eq!(n, 4096);
            // SAFETY: the read reported n bytes written at the start of b.
            let got: Vec<u8> = b[..n].iter().map(|x| unsafe { x.assume_init() }).collect();
            assert_eq!(got, &data[o as usize..o as usize + n]);
        }
    }
}

#[test]
fn bad_descriptor_fails_only_its_own_operation() {
    let (path, data) = data_file(64 << 10, 5);
    let file = File::open(&path).unwrap();
    let e = engine();
    let (mut a, mut b, mut c) = (vec![0; 4096], vec![0; 4096], vec![0; 4096]);
    let bad = RawTarget(1_000_000);
    let res = e
        .submit(&mut [
            Op::read(&file, 0, &mut a),
            Op::read(&bad, 12_288, &mut b),
            Op::read(&file, 4096, &mut c),
        ])
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 4096);
    assert_eq!(*res[2].as_ref().unwrap(), 4096);
    assert_eq!(&a[..], &data[..4096]);
    assert_eq!(&c[..], &data[4096..8192]);
    let err = res[1].as_ref().unwrap_err();
    assert_eq!(errno(err), Some(libc::EBADF));
    let op = err.get_ref().unwrap().downcast_ref::<OpError>().unwrap();
    assert_eq!((op.op, op.fd, op.offset), (OpKind::Read, 1_000_000, 12_288));
    let msg = err.to_string();
    assert!(
        msg.contains("read") && msg.contains("offset 12288") && msg.contains("fd 1000000"),
        "{msg}"
    );
}

#[test]
fn writing_to_a_read_only_file_fails_with_ebadf() {
    let (path, _) = data_file(4096, 6);
    let file = File::open(&path).unwrap();
    let e = engine();
    let res = e
        .submit(&mut [Op::write(&file, 0, b"nope"), Op::fsync(&file)])
        .unwrap();
    assert_eq!(errno(res[0].as_ref().unwrap_err()), Some(libc::EBADF));
    assert!(res[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("write of 4 bytes at offset 0"));
}

#[test]
fn empty_batches_and_zero_length_operations() {
    let (path, _) = data_file(4096, 8);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let e = engine();
    assert!(e.submit(&mut []).unwrap().is_empty());
    let mut results = vec![Ok(5)];
    e.submit_into(&mut [], &mut results).unwrap();
    assert!(results.is_empty());
    let mut empty: [u8; 0] = [];
    let res = e
        .submit(&mut [Op::read(&file, 0, &mut empty), Op::write(&file, 100, &[])])
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 0);
    assert_eq!(*res[1].as_ref().unwrap(), 0);
    assert_eq!(file.metadata().unwrap().len(), 4096);
}

#[test]
fn chunked_submission_reads_match_pread() {
    // submit_chunk splits a batch's submission into several kernel calls;
    // results must be the same, including when the batch outgrows the ring.
    let (path, data) = data_file(2 << 20, 5);
    let file = File::open(&path).unwrap();
    for chunk in [0, 1, 2, 3, 7] {
        let e = Engine::builder()
            .max_batch(16)
            .queue_depth(12)
            .submit_chunk(chunk)
            .build()
            .unwrap();
        let mut rng = Rng(chunk as u64);
        let specs: Vec<(u64, usize)> = (0..300)
            .map(|_| (rng.below(data.len() as u64), 1 + rng.below(9000) as usize))
            .collect();
        let bufs: Vec<Vec<u8>> = specs.iter().map(|&(_, l)| vec![0x55; l]).collect();
        read_and_compare(&e, &file, &file, &specs, bufs);
    }
}

#[test]
fn batch_larger_than_the_ring_and_the_queue_depth() {
    let (path, data) = data_file(1 << 20, 9);
    let file = File::open(&path).unwrap();
    let e = Engine::builder()
        .max_batch(8)
        .queue_depth(5)
        .build()
        .unwrap();
    if let Some(p) = e.probe() {
        assert_eq!(p.entries, 8);
    }
    let n = 3000;
    let mut bufs = vec![[0u8; 16]; n];
    let mut ops: Vec<Op> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| Op::read(&file, i as u64 * 300, b))
        .collect();
    let res = e.submit(&mut ops).unwrap();
    drop(ops);
    assert_eq!(res.len(), n);
    for (i, r) in res.iter().enumerate() {
        assert_eq!(*r.as_ref().unwrap(), 16);
        assert_eq!(&bufs[i][..], &data[i * 300..i * 300 + 16], "op {i}");
    }
}

#[test]
fn misaligned_direct_operations_are_refused_before_submission() {
    let (path, _) = data_file(1 << 20, 10);
    let file = DirectFile::open(&path).unwrap();
    let align = file.alignment();
    let e = engine();
    let mut good = file.alloc_buf(align.offset as usize);
    let mut big = AlignedBuf::new(align.max() * 4, align.max());
    let (head, tail) = big.split_at_mut(align.max());
    let odd_len = &mut head[..align.offset as usize - 1];
    let odd_addr = &mut tail[1..1 + align.offset as usize];
    let mut ops = [
        Op::read(&file, 1, &mut good[..]),
        Op::read(&file, 0, odd_len),
        Op::read(&file, 0, odd_addr),
    ];
    let res = e.submit(&mut ops).unwrap();
    let msgs: Vec<String> = res
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    for r in &res {
        let err = r.as_ref().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(errno(err), None, "refused by blockio, not the kernel");
    }
    assert!(
        msgs[0].contains(&format!("offset must be a multiple of {}", align.offset)),
        "{}",
        msgs[0]
    );
    assert!(
        msgs[1].contains(&format!("length must be a multiple of {}", align.offset)),
        "{}",
        msgs[1]
    );
    if align.memory > 1 {
        assert!(
            msgs[2].contains(&format!("address must be a multiple of {}", align.memory)),
            "{}",
            msgs[2]
        );
    }
    // An aligned op in the same batch as a refused one still runs.
    let mut ok = file.alloc_buf(align.offset as usize);
    let mut bad = file.alloc_buf(align.offset as usize);
    let res = e
        .submit(&mut [Op::read(&file, 3, &mut bad), Op::read(&file, 0, &mut ok)])
        .unwrap();
    assert!(res[0].is_err());
    assert_eq!(*res[1].as_ref().unwrap(), align.offset as usize);
}

#[test]
fn writes_then_reads_round_trip_with_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rw");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let e = engine();
    let blocks: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 1000 + i as usize]).collect();
    let mut ops: Vec<Op> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| Op::write(&file, i as u64 * 5000, b))
        .collect();
    ops.push(Op::fsync(&file));
    ops.push(Op::fdatasync(&file));
    let res = e.submit(&mut ops).unwrap();
    drop(ops);
    for (i, r) in res.iter().enumerate().take(50) {
        assert_eq!(*r.as_ref().unwrap(), 1000 + i);
    }
    assert_eq!(*res[50].as_ref().unwrap(), 0);
    assert_eq!(*res[51].as_ref().unwrap(), 0);
    let mut back: Vec<Vec<u8>> = blocks.iter().map(|b| vec![0xFF; b.len()]).collect();
    let mut ops: Vec<Op> = back
        .iter_mut()
        .enumerate()
        .map(|(i, b)| Op::read(&file, i as u64 * 5000, b))
        .collect();
    e.submit(&mut ops)
        .unwrap()
        .into_iter()
        .for_each(|r| assert!(r.is_ok()));
    drop(ops);
    assert_eq!(back, blocks);
    // Vectored write then vectored read.
    let (x, y) = (vec![1u8; 3000], vec![2u8; 5000]);
    let wv = [IoSlice::new(&x), IoSlice::new(&y)];
    let res = e
        .submit(&mut [Op::write_vectored(&file, 1 << 20, &wv)])
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 8000);
    let (mut p, mut q) = (vec![0u8; 4000], vec![0u8; 4000]);
    {
        let mut rv = [IoSliceMut::new(&mut p), IoSliceMut::new(&mut q)];
        let res = e
            .submit(&mut [Op::read_vectored(&file, 1 << 20, &mut rv)])
            .unwrap();
        assert_eq!(*res[0].as_ref().unwrap(), 8000);
    }
    assert!(p[..3000].iter().all(|&b| b == 1) && p[3000..].iter().all(|&b| b == 2));
    assert!(q.iter().all(|&b| b == 2));
    assert_eq!(pread_all(&file, 1 << 20, 8000), [x, y].concat());
}

#[test]
fn direct_writes_round_trip() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let file = DirectFile::create(dir.path().join("d")).unwrap();
    let a = file.alignment().offset as usize;
    let e = engine();
    let mut w = file.alloc_buf(4 * a);
    w.iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i % 251) as u8);
    let res = e
        .submit(&mut [Op::write(&file, a as u64, &w), Op::fdatasync(&file)])
        .unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 4 * a);
    assert!(res[1].is_ok());
    let mut r = file.alloc_buf(4 * a);
    let res = e.submit(&mut [Op::read(&file, a as u64, &mut r)]).unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 4 * a);
    assert_eq!(&r[..], &w[..]);
}

#[test]
fn engine_dropped_while_another_thread_has_operations_in_flight() {
    let (path, data) = data_file(4 << 20, 11);
    let file = File::open(&path).unwrap();
    for _ in 0..5 {
        let e = Engine::builder().queue_depth(16).build().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = {
            let e = e.clone();
            let file = file.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut bufs = vec![vec![0u8; 4096]; 2000];
                let mut ops: Vec<Op> = bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| Op::read(&file, i as u64 * 2048, b))
                    .collect();
                tx.send(()).unwrap();
                let res = e.submit(&mut ops).unwrap();
                drop(ops);
                drop(e);
                (res, bufs)
            })
        };
        rx.recv().unwrap();
        drop(e); // the last handle but the worker's: the worker's batch goes on
        let (res, bufs) = worker.join().unwrap();
        for (i, r) in res.iter().enumerate() {
            let o = i * 2048;
            let end = (o + 4096).min(data.len());
            assert_eq!(*r.as_ref().unwrap(), end - o);
            assert_eq!(&bufs[i][..end - o], &data[o..end]);
        }
    }
}

/// A pool of 2 MiB or more is one huge-page mapping (see `AlignedBuf`);
/// registered with the ring, its buffers must take direct reads of whole
/// megabytes and see the bytes pread sees.
#[test]
fn registered_huge_page_pool_takes_direct_reads() {
    let (path, data) = data_file(8 << 20, 13);
    let file = DirectFile::open(&path).unwrap();
    let pool = BufferPool::new(4, 1 << 20, 4096);
    let e = Engine::builder().registered_buffers(&pool).build().unwrap();
    if let Some(p) = e.probe() {
        assert!(p.registered_buffers);
    }
    let mut bufs: Vec<_> = (0..4).map(|_| pool.get()).collect();
    let offsets = [0usize, 3 << 20, (5 << 20) + 4096, 7 << 20];
    let mut ops: Vec<Op> = bufs
        .iter_mut()
        .zip(offsets)
        .map(|(b, o)| Op::read(&file, o as u64, &mut b[..]))
        .collect();
    let res = e.submit(&mut ops).unwrap();
    drop(ops);
    for ((b, o), r) in bufs.iter().zip(offsets).zip(&res) {
        let n = *r.as_ref().unwrap();
        assert_eq!(n, (1 << 20).min(data.len() - o), "read at {o}");
        assert_eq!(&b[..n], &data[o..o + n], "read at {o}");
    }
}

#[test]
fn registered_buffers_and_files() {
    let (path, data) = data_file(1 << 20, 12);
    let file = File::open(&path).unwrap();
    let pool = BufferPool::new(8, 8192, 4096);
    let e = Engine::builder()
        .registered_buffers(&pool)
        .registered_files(4)
        .build()
        .unwrap();
    let reg = e.register_file(&file).unwrap();
    if let Some(p) = e.probe() {
        assert!(p.registered_buffers);
        assert_eq!(p.registered_file_slots, 4);
    }
    let mut bufs: Vec<_> = (0..8).map(|_| pool.get()).collect();
    assert!(pool.try_get().is_none());
    for round in 0..3u64 {
        let mut ops: Vec<Op> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| Op::read(&reg, round * 77 + i as u64 * 9000, &mut b[..5000]))
            .collect();
        let res = e.submit(&mut ops).unwrap();
        drop(ops);
        for (i, r) in res.iter().enumerate() {
            let o = (round * 77 + i as u64 * 9000) as usize;
            assert_eq!(*r.as_ref().unwrap(), 5000);
            assert_eq!(&bufs[i][..5000], &data[o..o + 5000]);
        }
    }
    drop(bufs);
    // Several threads at once, so that rings created on demand are used too:
    // each must have the buffers and the file registered.
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let (e, pool, file, data) = (&e, &pool, &reg, &data);
            s.spawn(move || {
                for round in 0..50u64 {
                    let mut b = pool.get();
                    let o = ((t * 131 + round * 17) * 1000) as usize % (data.len() - 8192);
                    let res = e
                        .submit(&mut [Op::read(file, o as u64, &mut b[..])])
                        .unwrap();
                    assert_eq!(*res[0].as_ref().unwrap(), 8192);
                    assert_eq!(&b[..], &data[o..o + 8192], "thread {t} round {round}");
                }
            });
        }
    });
    let bufs: Vec<_> = (0..8).map(|_| pool.get()).collect();
    reg.unregister().unwrap();
    let mut plain = vec![0u8; 100];
    let res = e.submit(&mut [Op::read(&file, 10, &mut plain)]).unwrap();
    assert_eq!(*res[0].as_ref().unwrap(), 100);
    assert_eq!(&plain[..], &data[10..110]);
    drop(bufs);
    assert!(pool.try_get().is_some());
}

#[test]
fn sqpoll_and_iopoll_engines_read_correctly() {
    let (path, data) = data_file(1 << 20, 13);
    let file = DirectFile::open(&path).unwrap();
    let a = file.alignment().offset as usize;
    for e in [
        Engine::builder().sqpoll(true).build().unwrap(),
        Engine::builder().iopoll(true).build().unwrap(),
    ] {
        let mut bufs: Vec<AlignedBuf> = (0..32).map(|_| file.alloc_buf(a)).collect();
        let mut ops: Vec<Op> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| Op::read(&file, (i * 7 * a) as u64, b))
            .collect();
        let res = e.submit(&mut ops).unwrap();
        drop(ops);
        for (i, r) in res.iter().enumerate() {
            assert_eq!(*r.as_ref().unwrap(), a);
            assert_eq!(&bufs[i][..], &data[i * 7 * a..i * 7 * a + a]);
        }
    }
}

#[test]
fn offsets_beyond_i64_are_refused() {
    let (path, _) = data_file(4096, 14);
    let file = File::open(&path).unwrap();
    let mut b = [0u8; 8];
    let res = engine()
        .submit(&mut [Op::read(&file, u64::MAX, &mut b)])
        .unwrap();
    let msg = res[0].as_ref().unwrap_err().to_string();
    assert!(msg.contains("offset must be at most"), "{msg}");
}

#[test]
fn direct_open_errors_name_the_path() {
    let err = DirectFile::open("/nonexistent/blockio-test").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(
        err.to_string().contains("/nonexistent/blockio-test"),
        "{err}"
    );
    assert_eq!(errno(&err), Some(libc::ENOENT));
    let plain = File::open("/proc/self/status").unwrap();
    assert!(DirectFile::from_file(plain).is_err());
}

/// `Op::run_blocking` gives what a batch of one gives: the same counts,
/// and the same refusal before any call.
#[test]
fn run_blocking_gives_what_a_batch_of_one_gives() {
    let (path, data) = data_file(10_000, 5);
    let file = File::open(&path).unwrap();
    let e = engine();
    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
    let alone = Op::read(&file, 8192, &mut a).run_blocking().unwrap();
    let batch = e
        .submit(&mut [Op::read(&file, 8192, &mut b)])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!((alone, &a[..alone]), (batch, &b[..batch]));
    assert_eq!(&a[..alone], &data[8192..]);
    let far = i64::MAX as u64 + 1;
    let alone = Op::read(&file, far, &mut a).run_blocking().unwrap_err();
    let batch = e
        .submit(&mut [Op::read(&file, far, &mut b)])
        .unwrap()
        .remove(0)
        .unwrap_err();
    assert_eq!(alone.to_string(), batch.to_string());
    assert!(alone.to_string().contains("refused"), "{alone}");
    let w = tempfile::tempfile().unwrap();
    assert_eq!(Op::write(&w, 3, b"abc").run_blocking().unwrap(), 3);
    Op::fsync(&w).run_blocking().unwrap();
    Op::ftruncate(&w, 4).run_blocking().unwrap();
    assert_eq!(pread_all(&w, 0, 10), b"\0\0\0a");
}

/// Allocated blocks of `file` (`st_blocks`, 512-byte units).
fn blocks(file: &File) -> u64 {
    use std::os::unix::fs::MetadataExt;
    file.metadata().unwrap().blocks()
}

/// `Op::fallocate` in one batch: allocating grows the file (or, with
/// `KEEP_SIZE`, only its blocks), a punched hole reads as zeroes while the
/// rest is intact, and each failure carries the kernel's errno and names
/// the range.
#[test]
fn fallocate_allocates_punches_and_fails_as_the_system_call_does() {
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, [7u8; 16_384]).unwrap();
        File::options().read(true).write(true).open(path).unwrap()
    };
    let (grown, kept, punched) = (open("grown"), open("kept"), open("punched"));
    let read_only = File::open(dir.path().join("grown")).unwrap();
    let kept_blocks = blocks(&kept);
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let mut ops = [
        Op::fallocate(&grown, 0, 8192, 32_768),
        Op::fallocate(&kept, keep, 16_384, 65_536),
        Op::fallocate(&punched, keep | libc::FALLOC_FL_PUNCH_HOLE, 4096, 8192),
        Op::fallocate(&read_only, 0, 0, 4096),
        Op::fallocate(&grown, 0, 0, 0),
        Op::fallocate(&punched, libc::FALLOC_FL_PUNCH_HOLE, 0, 4096),
    ];
    assert!(ops.iter().all(|op| op.kind() == OpKind::Fallocate));
    let res = engine().submit(&mut ops).unwrap();
    for r in &res[..3] {
        assert_eq!(r.as_ref().unwrap(), &0);
    }
    assert_eq!(grown.metadata().unwrap().len(), 40_960);
    assert_eq!(pread_all(&grown, 0, 40_960)[..16_384], [7u8; 16_384]);
    assert_eq!(kept.metadata().unwrap().len(), 16_384);
    assert!(blocks(&kept) >= kept_blocks + 128, "no blocks past the end");
    let data = pread_all(&punched, 0, 16_384);
    assert!(data[..4096].iter().all(|&b| b == 7));
    assert!(data[4096..12_288].iter().all(|&b| b == 0));
    assert!(data[12_288..].iter().all(|&b| b == 7));
    // Not open for writing, an empty range, a hole without KEEP_SIZE.
    let err = res[3].as_ref().unwrap_err();
    assert_eq!(errno(err), Some(libc::EBADF));
    let text = err.to_string();
    assert!(
        text.contains("fallocate of 4096 bytes at offset 0 on fd"),
        "{text}"
    );
    assert_eq!(errno(res[4].as_ref().unwrap_err()), Some(libc::EINVAL));
    assert_eq!(errno(res[5].as_ref().unwrap_err()), Some(libc::EOPNOTSUPP));
}

/// An `O_DIRECT` file's fallocate is not held to its alignment: no data
/// moves, so an odd range is the kernel's to judge.
#[test]
fn fallocate_on_a_direct_file_asks_for_no_alignment() {
    let dir = tempfile::tempdir().unwrap();
    let file = DirectFile::create(dir.path().join("d")).unwrap();
    let mut ops = [Op::fallocate(&file, 0, 1, 1000)];
    assert_eq!(engine().submit(&mut ops).unwrap()[0].as_ref().unwrap(), &0);
    assert_eq!(std::fs::metadata(dir.path().join("d")).unwrap().len(), 1001);
}
