//! The buffers a stream allocates under the I/O traits are reused: a long
//! trait write moves through the same two buffers (the queue's and the
//! send's) rather than a new one per send, and trait reads copy leftover
//! bytes out without a buffer per read; an idle stream keeps no receive
//! buffer after its trait reads. Large allocations (64 KiB and up,
//! which only data buffers reach) and the bytes allocated and not yet
//! freed are counted by a global allocator; its own test binary, and one
//! test at a time, so nothing else allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use blockio::aio::AsyncEngine;
use blockio::net::TcpStream;
use futures::io::{AsyncReadExt, AsyncWriteExt};

/// The smallest allocation counted.
const LARGE: usize = 64 * 1024;

static LARGE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Bytes allocated and not yet freed.
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting allocations (and growths) of at least
/// [`LARGE`] bytes, and the bytes live.
struct Counting;

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LARGE {
            LARGE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LARGE {
            LARGE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= LARGE {
            LARGE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One test at a time: the count is process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

/// The bytes each test moves: sixteen of the write queue's 256 KiB.
const TOTAL: usize = 4 << 20;

fn pattern(i: usize) -> u8 {
    (i * 7 + i / 4093) as u8
}

/// A connected pair: our stream and a blocking std peer.
fn pair(engine: &AsyncEngine) -> (TcpStream, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let ours = futures::executor::block_on(TcpStream::connect_with(engine, addr)).unwrap();
    let (peer, _) = listener.accept().unwrap();
    // A peer's read or write that waits a minute fails the test: only a
    // hang takes that long.
    peer.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    peer.set_write_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    (ours, peer)
}

#[test]
fn a_long_trait_write_reuses_its_buffers() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let engine = AsyncEngine::new().unwrap();
    let (mut ours, mut peer) = pair(&engine);
    let data: Vec<u8> = (0..TOTAL).map(pattern).collect();
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; TOTAL];
        peer.read_exact(&mut got).unwrap();
        got
    });
    let before = LARGE_ALLOCATIONS.load(Ordering::SeqCst);
    futures::executor::block_on(async {
        // One call: the stream accepts the 4 MiB in 256 KiB pieces, each
        // queued while the one before is being sent.
        let s = &mut ours;
        s.write_all(&data).await.unwrap();
        s.flush().await.unwrap();
    });
    let allocated = LARGE_ALLOCATIONS.load(Ordering::SeqCst) - before;
    let got = reader.join().unwrap();
    assert!(
        got == data,
        "the peer received other bytes than were written"
    );
    // The queue's buffer and the send's, each allocated once (a growth
    // or two of the first queue allowed); one per send would be 16.
    assert!(
        allocated <= 4,
        "{allocated} buffers of 64 KiB or more allocated for 16 pieces of a 4 MiB write"
    );
}

#[test]
fn trait_reads_reuse_their_buffers() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let engine = AsyncEngine::new().unwrap();
    let (mut ours, mut peer) = pair(&engine);
    let data: Vec<u8> = (0..TOTAL).map(pattern).collect();
    let writer = {
        let data = data.clone();
        std::thread::spawn(move || {
            peer.write_all(&data).unwrap();
            peer
        })
    };
    let mut got = Vec::with_capacity(TOTAL);
    // 256 KiB a read: at least 16 reads, whether a read takes what the
    // socket holds at once (up to the whole buffer) or through a receive.
    let mut buf = vec![0u8; 256 << 10];
    let before = LARGE_ALLOCATIONS.load(Ordering::SeqCst);
    let mut reads = 0;
    futures::executor::block_on(async {
        let s = &mut ours;
        while got.len() < TOTAL {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "end of stream after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
            reads += 1;
        }
    });
    let allocated = LARGE_ALLOCATIONS.load(Ordering::SeqCst) - before;
    drop(writer.join().unwrap());
    assert!(got == data, "read other bytes than the peer sent");
    // The receive buffer and the leftover bytes' store, each allocated
    // once (and grown a few times); not one per read.
    assert!(
        allocated <= 6,
        "{allocated} buffers of 64 KiB or more allocated over {reads} trait reads of 4 MiB"
    );
    assert!(
        reads >= 12,
        "only {reads} reads: too few to tell reuse from one buffer per read"
    );
}

/// Streams held idle after one echo each.
const IDLE_STREAMS: usize = 200;

#[test]
fn an_idle_stream_keeps_no_receive_buffer() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let engine = AsyncEngine::new().unwrap();
    // One echo first: what the engine allocates once is not counted.
    let echo = |(mut ours, mut peer): (TcpStream, std::net::TcpStream)| {
        peer.write_all(&[5u8; 1024]).unwrap();
        futures::executor::block_on(async {
            let s = &mut ours;
            let mut buf = [0u8; 1024];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
            s.flush().await.unwrap();
        });
        let mut back = [0u8; 1024];
        peer.read_exact(&mut back).unwrap();
        assert_eq!(back, [5u8; 1024]);
        (ours, peer)
    };
    let first = echo(pair(&engine));
    let mut held = Vec::with_capacity(IDLE_STREAMS);
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    for _ in 0..IDLE_STREAMS {
        held.push(echo(pair(&engine)));
    }
    // Other threads (the engine's, the runtime's) free what they held
    // before meanwhile, so the bytes live may end below `before`: no
    // growth, no buffer kept.
    let per_stream = LIVE_BYTES.load(Ordering::SeqCst).saturating_sub(before) / IDLE_STREAMS;
    // A trait read receives into 16 KiB at least: kept by each idle
    // stream, that alone would be 16,384 bytes a stream.
    assert!(
        per_stream < 8 * 1024,
        "{per_stream} bytes live per idle stream after one 1 KiB echo each"
    );
    drop((first, held));
}
