//! Aligned buffers for direct I/O, and a reusable pool of them.
//!
//! Buffers of 2 MiB or more are mapped on 2 MiB boundaries and marked for
//! transparent huge pages (`MADV_HUGEPAGE`). An `O_DIRECT` request can carry
//! only so many separate memory segments (254 on the project machine's
//! virtio disk), so a 2 MiB read into scattered 4 KiB pages went to the
//! device as 2 to 4 requests; from one huge page it is one, which made a
//! cold read of a large file markedly faster (figures in
//! `docs/benchmarks.md`, "Huge-page buffers"). Where the
//! kernel has no huge page to give (or THP is off) the mapping is simply
//! made of small pages, as before. Such a buffer takes whole huge pages:
//! its length is rounded up to 2 MiB.
//!
//! A [`BufferPool`] is one contiguous aligned allocation cut into equal
//! buffers. Being one region makes it cheap to register with io_uring
//! ([`EngineBuilder::registered_buffers`](crate::EngineBuilder::registered_buffers)):
//! the engine recognises a pooled buffer by its address and uses the
//! fixed-buffer opcodes for it.

use std::alloc::{self, Layout};
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex};

/// A zero-initialised heap buffer whose address is a multiple of `align`.
///
/// From 2 MiB up, the buffer is its own memory mapping backed by huge
/// pages where the kernel can (see the module docs).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    /// Mapped by `map_huge` (released with `munmap`), not by the allocator.
    mapped: bool,
}

/// The size of a transparent huge page on x86-64 and arm64 (4 KiB pages).
const HUGE_PAGE: usize = 2 << 20;

/// The bytes mapped for a buffer of `len`: whole huge pages (None on
/// overflow).
fn mapped_len(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(HUGE_PAGE)
}

/// Maps `len` (a non-zero multiple of `HUGE_PAGE`) zeroed bytes starting on
/// a `HUGE_PAGE` boundary and asks for huge pages. None if the mapping
/// fails (the caller falls back to the allocator).
fn map_huge(len: usize) -> Option<NonNull<u8>> {
    let span = len.checked_add(HUGE_PAGE)?;
    // SAFETY: a new private anonymous mapping at an address the kernel
    // chooses; it overlaps nothing we own.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: both ranges lie inside the mapping just made, outside
    // `[aligned, aligned + len)`, and are page-aligned (the mapping starts on
    // a page, `aligned` and `len` are multiples of the page size). Nothing
    // else refers to them. Unmapping cannot fail for such ranges except
    // for lack of memory, which leaves them mapped: a leak, not a fault.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Advice only: without THP the mapping keeps small pages.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    NonNull::new(aligned as *mut u8)
}

/// The allocation error `Vec` gives for a size it cannot have (the
/// standard library offers no other way to make one).
fn too_large() -> std::collections::TryReserveError {
    Vec::<u8>::new()
        .try_reserve_exact(usize::MAX)
        .expect_err("no allocation holds usize::MAX bytes")
}

// SAFETY: `AlignedBuf` owns its allocation exclusively, like `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to `align` (a power of two).
    ///
    /// # Panics
    /// If `align` is not a power of two, or on allocation failure (like `Vec`).
    pub fn new(len: usize, align: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(len.max(1), align)
            .expect("AlignedBuf: alignment must be a power of two and the size must fit");
        Self::try_new(len, align).unwrap_or_else(|_| alloc::handle_alloc_error(layout))
    }

    /// [`AlignedBuf::new`] for a size chosen by a caller: an error instead
    /// of an abort when the memory cannot be had (or `len` is beyond what
    /// any allocation can be).
    ///
    /// # Panics
    /// If `align` is not a power of two.
    pub fn try_new(
        len: usize,
        align: usize,
    ) -> Result<AlignedBuf, std::collections::TryReserveError> {
        assert!(
            align.is_power_of_two(),
            "AlignedBuf: alignment must be a power of two"
        );
        let Ok(layout) = Layout::from_size_align(len.max(1), align) else {
            return Err(too_large());
        };
        if len >= HUGE_PAGE && align <= HUGE_PAGE {
            // Anonymous mappings are zero-filled by the kernel.
            if let Some(ptr) = mapped_len(len).and_then(map_huge) {
                return Ok(AlignedBuf {
                    ptr,
                    len,
                    align,
                    mapped: true,
                });
            }
        }
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(too_large)?;
        Ok(AlignedBuf {
            ptr,
            len,
            align,
            mapped: false,
        })
    }

    /// The alignment the buffer was allocated with.
    pub fn align(&self) -> usize {
        self.align
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            let len = mapped_len(self.len).expect("computed in new");
            // SAFETY: `map_huge` mapped exactly `[ptr, ptr + len)` for this
            // buffer alone, and it is dropped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), len) };
            return;
        }
        let layout = Layout::from_size_align(self.len.max(1), self.align).expect("checked in new");
        // SAFETY: allocated in `new` with this exact layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialised (zeroed) bytes we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align)
            .finish()
    }
}

/// The pool's buffers, shared by every handle of one [`BufferPool`] and
/// every [`PooledBuf`] taken from it: the region, its shape, and which
/// buffers are free.
pub(crate) struct PoolBuffers {
    region: AlignedBuf,
    buf_size: usize,
    count: usize,
    free: Mutex<Vec<u32>>,
    available: Condvar,
}

impl PoolBuffers {
    /// Start address and length of the whole region.
    pub(crate) fn region(&self) -> (*mut u8, usize) {
        (self.region.ptr.as_ptr(), self.region.len)
    }

    pub(crate) fn buf_size(&self) -> usize {
        self.buf_size
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The index of the pooled buffer that wholly holds `[ptr, ptr + len)`
    /// (a zero-length range just past the last buffer is in none).
    pub(crate) fn index_of(&self, ptr: *const u8, len: usize) -> Option<u16> {
        if self.buf_size == 0 {
            return None;
        }
        // An address below the region wraps to an offset beyond its end
        // (the region, at most `isize::MAX` bytes, ends below 2^63).
        let offset = (ptr as usize).wrapping_sub(self.region.ptr.as_ptr() as usize);
        let (index, within) = (offset / self.buf_size, offset % self.buf_size);
        // `count` is at most 16384 (`BufferPool::new`), so the index fits.
        (index < self.count && len <= self.buf_size - within).then_some(index as u16)
    }
}

/// A fixed set of equal, aligned buffers, handed out and returned on drop.
///
/// Cloning the pool clones a handle to the same buffers.
#[derive(Clone)]
pub struct BufferPool {
    buffers: Arc<PoolBuffers>,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("count", &self.buffers.count)
            .field("buf_size", &self.buffers.buf_size)
            .finish()
    }
}

impl BufferPool {
    /// `count` buffers of `buf_size` bytes, each aligned to `align`.
    ///
    /// `buf_size` is rounded up to a multiple of `align`. At least 1 and at
    /// most 16384 buffers (the kernel's limit for registered buffers), of at
    /// least 1 byte.
    ///
    /// # Panics
    /// Where [`BufferPool::try_new`] fails, with its message (like
    /// `Vec::with_capacity` on a size that cannot be).
    pub fn new(count: usize, buf_size: usize, align: usize) -> BufferPool {
        BufferPool::try_new(count, buf_size, align).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`BufferPool::new`] for sizes chosen by a caller: an error naming the
    /// argument when `count` is 0 or exceeds 16384, `buf_size` is 0, `align` is not a power of two,
    /// the sizes overflow, or the memory cannot be had.
    pub fn try_new(count: usize, buf_size: usize, align: usize) -> io::Result<BufferPool> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        // An empty pool, or one of empty buffers, would make `get` wait
        // forever (there is nothing to hand out) and registering it fail.
        if count == 0 {
            return Err(invalid(
                "BufferPool: `count` is 0; a pool needs at least 1 buffer".to_string(),
            ));
        }
        if buf_size == 0 {
            return Err(invalid(
                "BufferPool: `buf_size` is 0; buffers need at least 1 byte".to_string(),
            ));
        }
        if count > 16384 {
            return Err(invalid(format!(
                "BufferPool: `count` is {count}; at most 16384 buffers"
            )));
        }
        if !align.is_power_of_two() {
            return Err(invalid(format!(
                "BufferPool: `align` must be a power of two (got {align})"
            )));
        }
        let rounded = buf_size.div_ceil(align).checked_mul(align).ok_or_else(|| {
            invalid(format!(
                "BufferPool: `buf_size` {buf_size} rounded up to `align` {align} overflows"
            ))
        })?;
        let total = rounded.checked_mul(count).ok_or_else(|| {
            invalid(format!(
                "BufferPool: {count} buffers (`count`) of {rounded} bytes (`buf_size`) overflow"
            ))
        })?;
        let region = AlignedBuf::try_new(total, align.max(4096)).map_err(|_| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("BufferPool: cannot allocate {count} buffers (`count`) of {rounded} bytes (`buf_size`)"),
            )
        })?;
        Ok(BufferPool {
            buffers: Arc::new(PoolBuffers {
                region,
                buf_size: rounded,
                count,
                free: Mutex::new((0..count as u32).rev().collect()),
                available: Condvar::new(),
            }),
        })
    }

    /// A free buffer, or `None` if all are in use.
    pub fn try_get(&self) -> Option<PooledBuf> {
        let index = self
            .buffers
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()?;
        Some(PooledBuf {
            pool: self.buffers.clone(),
            index,
        })
    }

    /// A free buffer, waiting for one to be returned if all are in use.
    pub fn get(&self) -> PooledBuf {
        let mut free = self.buffers.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(index) = free.pop() {
                return PooledBuf {
                    pool: self.buffers.clone(),
                    index,
                };
            }
            free = self
                .buffers
                .available
                .wait(free)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Size of each buffer in bytes.
    pub fn buf_size(&self) -> usize {
        self.buffers.buf_size
    }

    /// Buffers free right now (not handed out, and not held by an operation
    /// the kernel has yet to complete).
    pub fn available(&self) -> usize {
        self.buffers
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.buffers.count
    }

    pub(crate) fn buffers(&self) -> &Arc<PoolBuffers> {
        &self.buffers
    }
}

/// A buffer borrowed from a [`BufferPool`]; it goes back to the pool on drop.
pub struct PooledBuf {
    pool: Arc<PoolBuffers>,
    index: u32,
}

impl PooledBuf {
    /// This buffer's index in its pool.
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let size = self.pool.buf_size;
        let start = self.index as usize * size;
        // SAFETY: buffer `index` lies inside the region, which lives as long as
        // `self.pool`; only this `PooledBuf` hands out references to it.
        unsafe { std::slice::from_raw_parts(self.pool.region.ptr.as_ptr().add(start), size) }
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let size = self.pool.buf_size;
        let start = self.index as usize * size;
        // SAFETY: buffer `index` is handed out to exactly one `PooledBuf` at a
        // time (it leaves the free list in `get`), so this range is not
        // aliased; the region lives as long as `self.pool`.
        unsafe { std::slice::from_raw_parts_mut(self.pool.region.ptr.as_ptr().add(start), size) }
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        self.pool
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.index);
        self.pool.available.notify_one();
    }
}

impl fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBuf")
            .field("index", &self.index)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_mapped_on_huge_page_boundaries_zeroed_and_writable() {
        for len in [
            HUGE_PAGE,
            HUGE_PAGE + 4096,
            5 * HUGE_PAGE / 2,
            4 * HUGE_PAGE,
        ] {
            let mut b = AlignedBuf::new(len, 4096);
            assert!(b.mapped, "{len} bytes");
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0, "{len} bytes");
            assert!(b.iter().all(|&x| x == 0), "{len} bytes not zeroed");
            b[0] = 1;
            b[len - 1] = 2;
            assert_eq!((b[0], b[len - 1]), (1, 2));
        }
        // Small buffers and alignments beyond a huge page use the allocator.
        let small = AlignedBuf::new(HUGE_PAGE - 4096, 4096);
        assert!(!small.mapped && small.as_ptr() as usize % 4096 == 0);
        let wide = AlignedBuf::new(HUGE_PAGE, 2 * HUGE_PAGE);
        assert!(!wide.mapped && wide.as_ptr() as usize % (2 * HUGE_PAGE) == 0);
        assert!(wide.iter().all(|&x| x == 0));
    }

    #[test]
    fn a_range_has_a_buffer_index_only_when_one_buffer_wholly_holds_it() {
        let pool = BufferPool::new(3, 4096, 4096);
        let buffers = pool.buffers();
        let base = buffers.region().0.cast_const();
        let at = |off: usize| base.wrapping_add(off);
        assert_eq!(buffers.index_of(at(0), 4096), Some(0));
        assert_eq!(buffers.index_of(at(4096 + 100), 3996), Some(1));
        assert_eq!(buffers.index_of(at(2 * 4096), 0), Some(2));
        // Straddling two buffers, or running past the last one.
        assert_eq!(buffers.index_of(at(4096 + 100), 3997), None);
        assert_eq!(buffers.index_of(at(2 * 4096 + 1), 4096), None);
        assert_eq!(buffers.index_of(at(0), usize::MAX), None);
        // Outside the pool: below it, and (even empty) just past its end.
        assert_eq!(buffers.index_of(base.wrapping_sub(1), 1), None);
        assert_eq!(buffers.index_of(base.wrapping_sub(4096), 4096), None);
        assert_eq!(buffers.index_of(at(3 * 4096), 0), None);
        assert_eq!(buffers.index_of(at(5 * 4096), 16), None);
    }
}
