//! A ring of provided buffers: memory the kernel picks a buffer from when
//! a receive completes, instead of each waiting receive holding its own.
//!
//! # Why
//!
//! A server with 10,000 idle connections and a 4 KiB buffer armed on each
//! holds 40 MiB that nothing is written into. With a provided-buffer ring
//! (`IORING_REGISTER_PBUF_RING`, Linux 5.19) the connections' multishot
//! receives (Linux 6.0) share one pool: a buffer is taken only when bytes
//! arrive, and goes back when the user drops it.
//!
//! # How
//!
//! The ring is an array of `count` entries (address, length, buffer id)
//! in memory shared with the kernel, plus a tail index the kernel reads:
//! the kernel consumes entries from its head, we publish returned buffers
//! at the tail. Buffer `i` is bytes `i * size .. (i + 1) * size` of one
//! allocation. A buffer id the kernel reports in a completion belongs to
//! the receiver alone until [`BufRing::recycle`] publishes it again, so
//! handing out a slice of it is sound.
//!
//! Returning a buffer takes a short lock (the tail is shared by every
//! thread that drops buffers) and makes no system call. Tasks waiting for
//! buffers (a receive that met `ENOBUFS`, or a connection at its share)
//! register a waker here and are woken when any buffer comes back.

use std::alloc::Layout;
use std::io;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Waker;

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The group id of an engine's receive buffers (an engine has one ring).
pub(crate) const GROUP: u16 = 0;

/// The kernel's `struct io_uring_buf`, the layout of a [`BufRingEntry`]:
/// its fields, to write one at a time.
#[repr(C)]
struct RawEntry {
    addr: u64,
    len: u32,
    bid: u16,
    /// In entry 0, the ring's tail.
    resv: u16,
}

const _: () = assert!(std::mem::size_of::<RawEntry>() == std::mem::size_of::<BufRingEntry>());
const _: () = assert!(std::mem::align_of::<RawEntry>() <= std::mem::align_of::<BufRingEntry>());

/// The shape of a ring: how many buffers, how large, and how many one
/// connection may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingShape {
    /// A power of two, at most 32,768.
    pub count: u16,
    /// Bytes per buffer.
    pub size: u32,
    /// The most buffers one connection holds (received and not yet
    /// dropped) before its receive is paused.
    pub share: usize,
}

impl Default for RingShape {
    fn default() -> Self {
        RingShape {
            count: 512,
            size: 4096,
            share: 32,
        }
    }
}

impl RingShape {
    /// Refuses a shape the kernel would: the count must be a power of two
    /// up to 32,768, the size above 0.
    pub(crate) fn check(&self) -> io::Result<()> {
        if self.count.is_power_of_two() && self.count <= 32768 && self.size > 0 {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "recv_buffers: the count must be a power of two up to 32768 and the size above 0 \
                 (got {} buffers of {} bytes)",
                self.count, self.size
            ),
        ))
    }
}

/// A registered ring of `count` buffers of `size` bytes.
pub(crate) struct BufRing {
    /// `count` entries, page aligned; shared with the kernel.
    entries: *mut BufRingEntry,
    /// `count * size` bytes of buffers.
    bufs: *mut u8,
    shape: RingShape,
    /// The next tail to publish; the lock orders publications.
    tail: Mutex<u16>,
    /// Buffers the kernel has filled and nobody has recycled yet.
    in_use: AtomicUsize,
    waiters: Mutex<Vec<Waker>>,
}

// SAFETY: the raw pointers are to memory this value owns; the entries are
// written only under the `tail` lock, and a buffer is read only by the
// holder of its id (see the module doc).
unsafe impl Send for BufRing {}
// SAFETY: as above.
unsafe impl Sync for BufRing {}

impl BufRing {
    fn entries_layout(count: u16) -> Layout {
        Layout::from_size_align(
            usize::from(count) * std::mem::size_of::<BufRingEntry>(),
            4096,
        )
        .expect("a ring of at most 32,768 entries")
    }

    fn bufs_layout(shape: RingShape) -> io::Result<Layout> {
        let bytes = usize::from(shape.count)
            .checked_mul(shape.size as usize)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Layout::from_size_align(bytes.max(1), 64)
            .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))
    }

    /// Allocates the buffers and fills the ring with all of them (not yet
    /// registered with any io_uring).
    pub(crate) fn new(shape: RingShape) -> io::Result<BufRing> {
        shape.check()?;
        let (el, bl) = (Self::entries_layout(shape.count), Self::bufs_layout(shape)?);
        // SAFETY: both layouts have a non-zero size.
        let (entries, bufs) = unsafe { (std::alloc::alloc_zeroed(el), std::alloc::alloc(bl)) };
        if entries.is_null() || bufs.is_null() {
            // SAFETY: each pointer, if not null, came from `alloc*` with
            // its layout.
            unsafe {
                if !entries.is_null() {
                    std::alloc::dealloc(entries, el);
                }
                if !bufs.is_null() {
                    std::alloc::dealloc(bufs, bl);
                }
            }
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let ring = BufRing {
            entries: entries.cast(),
            bufs,
            shape,
            tail: Mutex::new(0),
            in_use: AtomicUsize::new(0),
            waiters: Mutex::new(Vec::new()),
        };
        for bid in 0..shape.count {
            ring.publish(bid);
        }
        Ok(ring)
    }

    /// Registers the ring with `ring` as [`GROUP`].
    pub(crate) fn register(&self, ring: &IoUring) -> io::Result<()> {
        // SAFETY: the entries stay allocated, and the buffers they point
        // to too, until this value is dropped, which the caller does only
        // after the io_uring is gone (`Driver::setup_ring` keeps it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                self.entries as u64,
                self.shape.count,
                GROUP,
                0,
            )
        }
    }

    /// The ring's shape.
    pub(crate) fn shape(&self) -> RingShape {
        self.shape
    }

    /// Buffer `bid`'s first `len` bytes.
    ///
    /// # Safety
    /// The kernel must have handed `bid` to the caller in a completion of
    /// `len` bytes, and the caller must not have recycled it yet.
    pub(crate) unsafe fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        let len = len.min(self.shape.size as usize);
        // SAFETY: `bid < count` (checked by the caller's receipt), so the
        // range is inside the allocation; the kernel wrote `len` bytes and
        // writes no more until the buffer is published again.
        unsafe {
            std::slice::from_raw_parts(
                self.bufs.add(usize::from(bid) * self.shape.size as usize),
                len,
            )
        }
    }

    /// Takes note that the kernel filled buffer `bid` (now in use until it
    /// is published again); an error if `bid` names no buffer of this ring.
    pub(crate) fn note_filled(&self, bid: u16) -> Result<(), NotOurs> {
        if bid >= self.shape.count {
            return Err(NotOurs);
        }
        self.in_use.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Puts buffer `bid` at the tail for the kernel to use again.
    fn publish(&self, bid: u16) {
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let mask = self.shape.count - 1;
        // Written field by field through raw pointers, never through a
        // `&mut` over the entry: entry 0's `resv` is the ring's tail,
        // which the kernel reads at any time.
        // SAFETY: `tail & mask < count`, so the entry is inside the
        // allocation, whose layout is the kernel's `io_uring_buf`
        // (`RawEntry`). The lock makes this the only writer of entries;
        // the kernel reads an entry only once the tail below has moved
        // past it, and none of these writes touches `resv`.
        unsafe {
            let e = self
                .entries
                .add(usize::from(*tail & mask))
                .cast::<RawEntry>();
            let addr = self.bufs.add(usize::from(bid) * self.shape.size as usize) as u64;
            std::ptr::addr_of_mut!((*e).addr).write(addr);
            std::ptr::addr_of_mut!((*e).len).write(self.shape.size);
            std::ptr::addr_of_mut!((*e).bid).write(bid);
        }
        *tail = tail.wrapping_add(1);
        // SAFETY: the tail field lies in the first entry, which lives as
        // long as `self`; the kernel reads it with an acquire load, so a
        // release store publishes the entry written above.
        let shared = unsafe { &*(BufRingEntry::tail(self.entries).cast::<AtomicU16>()) };
        shared.store(*tail, Ordering::Release);
    }

    /// Gives buffer `bid` back to the kernel and wakes the tasks waiting
    /// for buffers.
    pub(crate) fn recycle(&self, bid: u16) {
        self.publish(bid);
        self.in_use.fetch_sub(1, Ordering::SeqCst);
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
        for w in waiters {
            w.wake();
        }
    }

    /// Whether every buffer is filled and held (a receive armed now would
    /// end with `ENOBUFS`).
    pub(crate) fn exhausted(&self) -> bool {
        self.in_use.load(Ordering::SeqCst) >= usize::from(self.shape.count)
    }

    /// Wakes `waker` when a buffer next comes back.
    pub(crate) fn wait(&self, waker: &Waker) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if !w.iter().any(|x| x.will_wake(waker)) {
            w.push(waker.clone());
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both came from `alloc*` in `new` with these layouts, and
        // the ring that used them is gone (see `register`).
        unsafe {
            std::alloc::dealloc(self.entries.cast(), Self::entries_layout(self.shape.count));
            if let Ok(bl) = Self::bufs_layout(self.shape) {
                std::alloc::dealloc(self.bufs, bl);
            }
        }
    }
}

/// A buffer id the kernel reported that names no buffer of the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotOurs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_shapes_the_kernel_would() {
        let bad = RingShape {
            count: 3,
            ..RingShape::default()
        };
        let err = BufRing::new(bad).err().expect("3 is not a power of two");
        assert!(err.to_string().contains("power of two"), "{err}");
        let zero = RingShape {
            size: 0,
            ..RingShape::default()
        };
        assert!(BufRing::new(zero).is_err());
    }

    #[test]
    fn recycling_moves_the_tail_and_counts() {
        let ring = BufRing::new(RingShape {
            count: 4,
            size: 16,
            share: 2,
        })
        .unwrap();
        // SAFETY: reads the tail field of the live first entry.
        let tail = || unsafe { *BufRingEntry::tail(ring.entries) };
        assert_eq!(tail(), 4);
        for bid in 0..4 {
            assert_eq!(ring.note_filled(bid), Ok(()));
        }
        assert_eq!(
            ring.note_filled(4),
            Err(NotOurs),
            "no buffer 4 in a ring of 4"
        );
        assert!(ring.exhausted());
        ring.recycle(2);
        assert_eq!(tail(), 5);
        assert!(!ring.exhausted());
        // SAFETY: entry 0 is the fifth published (4 & 3 == 0).
        let e = unsafe { &*ring.entries };
        assert_eq!(e.bid(), 2);
        assert_eq!(e.len(), 16);
    }
}
