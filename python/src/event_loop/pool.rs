//! The ring's pool of small receive buffers: an io_uring provided buffer
//! ring (`IORING_REGISTER_PBUF_RING`, kernel 5.19 and later). A small
//! socket receive (one that would lend the kernel a 2 KiB buffer of its
//! own while it waits, see `ring::recv_op`) asks the kernel to pick a
//! buffer of this pool as its data arrives (`IOSQE_BUFFER_SELECT`); the
//! buffer goes back to the ring's tail as soon as its bytes are copied
//! out. So the buffers the kernel writes are the few that went round
//! last, in the CPU's cache, not one per connection waiting (500
//! connections lent 1 MiB). When the pool is empty the kernel answers
//! `ENOBUFS` having taken nothing, and the receive lends its own buffer
//! instead (`State::advance`).

use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::IoUring;

/// The buffer group id of the pool (one pool per ring).
pub(crate) const GROUP: u16 = 0;

/// Buffers in the pool: a power of two, as the kernel asks of a buffer
/// ring.
pub(crate) const COUNT: u16 = 128;

/// Bytes of each buffer: a small receive's room.
pub(crate) const LEN: usize = super::ring::RECV_FIRST;

/// One entry of the buffer ring, as the kernel's `struct io_uring_buf`;
/// the last field of entry 0 is the ring's tail.
#[repr(C)]
struct Entry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

/// The pool: the ring of entries the kernel reads, the buffers it writes.
pub(crate) struct Pool {
    /// `COUNT` entries, in a page of their own (`mmap`).
    ring: *mut Entry,
    /// `COUNT` buffers of `LEN` bytes, one after another (`mmap`).
    bufs: *mut u8,
    /// The tail as last published to the kernel.
    tail: u16,
}

// SAFETY: the pool's memory is its own (two private mappings) and is only
// touched by the thread that holds the loop ring's state lock (the pool is
// kept inside that state); the kernel reads and writes it as the ring's
// operations run, whichever thread submitted them.
unsafe impl Send for Pool {}

/// Maps `len` bytes of private, zeroed, page-aligned memory.
fn map(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping at an address the kernel picks:
    // it touches no existing memory.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (at != libc::MAP_FAILED).then_some(at.cast::<u8>())
}

fn ring_bytes() -> usize {
    usize::from(COUNT) * std::mem::size_of::<Entry>()
}

fn bufs_bytes() -> usize {
    usize::from(COUNT) * LEN
}

impl Pool {
    /// A pool registered with `ring`; None when the kernel has no buffer
    /// rings (before 5.19) or refuses this one: receives then lend their
    /// own buffers, as they did before.
    pub(crate) fn new(ring: &IoUring) -> Option<Pool> {
        let entries = map(ring_bytes())?.cast::<Entry>();
        let Some(bufs) = map(bufs_bytes()) else {
            // SAFETY: the mapping just made above, used by nothing.
            unsafe { libc::munmap(entries.cast(), ring_bytes()) };
            return None;
        };
        let mut pool = Pool {
            ring: entries,
            bufs,
            tail: 0,
        };
        for bid in 0..COUNT {
            pool.give_back(bid);
        }
        // SAFETY: `entries` is a page-aligned mapping of `COUNT` entries,
        // as the kernel reads them, and `bufs` holds the buffers they point
        // at; both stay mapped while the ring may use them: `Pool` is
        // dropped only after the ring is closed with no operation left in
        // flight, and leaked otherwise (`State::shut_down`).
        let made = unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, COUNT, GROUP, 0)
        };
        match made {
            Ok(()) => Some(pool),
            Err(_) => None, // (dropped: unmapped, never registered)
        }
    }

    /// The start of buffer `bid`.
    pub(crate) fn buf(&self, bid: u16) -> *mut u8 {
        // `bid < COUNT`: within the mapping.
        self.bufs.wrapping_add(usize::from(bid % COUNT) * LEN)
    }

    /// Buffer `bid`'s first `n` bytes (at most `LEN`), which the kernel
    /// wrote for a receive whose completion has been reaped.
    pub(crate) fn bytes(&self, bid: u16, n: usize) -> &[u8] {
        // SAFETY: `buf(bid)` starts `LEN` bytes of the zeroed mapping, all
        // initialised; the kernel picked it for a receive whose completion
        // is reaped, and it is not in the ring until `give_back`, so the
        // kernel does not write it now.
        unsafe { std::slice::from_raw_parts(self.buf(bid), n.min(LEN)) }
    }

    /// Buffer `bid`, to receive into its bytes `from..LEN` without the
    /// kernel's ring (see `State::recv_rest`).
    pub(crate) fn room(&mut self, bid: u16, from: usize) -> &mut [u8] {
        let from = from.min(LEN);
        // SAFETY: as in `bytes`; out of the ring, so nothing else writes it.
        unsafe { std::slice::from_raw_parts_mut(self.buf(bid).add(from), LEN - from) }
    }

    /// Hands buffer `bid` back to the kernel, at the ring's tail.
    pub(crate) fn give_back(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (COUNT - 1));
        let addr = self.buf(bid) as u64;
        // SAFETY: `slot < COUNT` lies within the entries' mapping. The
        // entry at the tail is not one the kernel reads: it reads entries
        // from its head up to the published tail, and at most `COUNT` of
        // them, while only buffers it took (so fewer than `COUNT` are in
        // the ring) are handed back. The tail field (`resv` of entry 0) is
        // not written here: only the three fields named.
        unsafe {
            let e = self.ring.add(slot);
            std::ptr::addr_of_mut!((*e).addr).write(addr);
            std::ptr::addr_of_mut!((*e).len).write(LEN as u32);
            std::ptr::addr_of_mut!((*e).bid).write(bid % COUNT);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is entry 0's `resv`, a 2-byte-aligned u16 in
        // the mapping, which the kernel reads with an acquire load; the
        // release store publishes the entry written above before it.
        let tail = unsafe { AtomicU16::from_ptr(std::ptr::addr_of_mut!((*self.ring).resv)) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the two mappings made by `Pool::new`, dropped only once
        // the kernel uses them no more (see `Pool::new`).
        unsafe {
            libc::munmap(self.ring.cast(), ring_bytes());
            libc::munmap(self.bufs.cast(), bufs_bytes());
        }
    }
}
