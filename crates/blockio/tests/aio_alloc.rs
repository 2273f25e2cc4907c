//! What an async read costs in heap allocations: a read of cached data
//! served at its first poll makes none (the state an operation shares
//! with the driver is made only when it goes there), and a read that goes
//! to the driver still completes with its buffer handed back.
//!
//! A binary of its own: it counts every allocation of the thread that
//! polls, through a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use blockio::aio::{AsyncEngine, AsyncFile};
use blockio::ReadPath;

mod common;
use common::data_file;

/// The system allocator, counting the allocations of each thread.
struct Counting;

thread_local! {
    /// Allocations made by this thread.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system allocator unchanged; the count is
// a thread-local `Cell` with a const initialiser, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations this thread makes while running `f`.
fn allocations_in<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (out, ALLOCATIONS.with(Cell::get) - before)
}

/// A cached read served at its first poll allocates nothing, its buffer
/// reused from the read before; the same read through the driver
/// allocates its shared state, and both return the file's bytes.
#[test]
fn a_cached_read_served_inline_allocates_nothing() {
    let (path, data) = data_file(16_384, 67);
    let auto = AsyncEngine::new().unwrap();
    let submit = AsyncEngine::builder()
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let file = AsyncFile::open(&auto, &path).unwrap();
    let through_driver = AsyncFile::open(&submit, &path).unwrap();
    // The first read of each file caches it and looks the file up once.
    let mut buf = vec![0u8; 4096];
    for f in [&file, &through_driver] {
        let (r, b) = futures::executor::block_on(f.read_at(buf, 0));
        assert_eq!(r.unwrap(), 4096);
        buf = b;
    }
    let served = auto.served_inline();

    let ((r, b), allocated) =
        allocations_in(|| futures::executor::block_on(file.read_at(buf, 4096)));
    assert_eq!(r.unwrap(), 4096);
    assert_eq!(b, &data[4096..8192]);
    assert_eq!(auto.served_inline(), served + 1, "served at its first poll");
    assert_eq!(allocated, 0, "a read served inline allocates nothing");

    let ((r, b), allocated) =
        allocations_in(|| futures::executor::block_on(through_driver.read_at(b, 8192)));
    assert_eq!(r.unwrap(), 4096);
    assert_eq!(b, &data[8192..12_288]);
    assert!(allocated >= 1, "a read through the driver shares its state");
}
