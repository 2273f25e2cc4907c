//! Aligned buffers for direct I/O, and a reusable pool of them.
//!
//! A [`BufferPool`] is one contiguous aligned allocation cut into equal
//! buffers. Being one region makes it cheap to register with io_uring
//! ([`EngineBuilder::registered_buffers`](crate::EngineBuilder::registered_buffers)):
//! the engine recognises a pooled buffer by its address and uses the
//! fixed-buffer opcodes for it.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex};

/// A zero-initialised heap buffer whose address is a multiple of `align`.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
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
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len, align }
    }

    /// The alignment the buffer was allocated with.
    pub fn align(&self) -> usize {
        self.align
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
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

pub(crate) struct PoolInner {
    region: AlignedBuf,
    buf_size: usize,
    count: usize,
    free: Mutex<Vec<u32>>,
    available: Condvar,
}

impl PoolInner {
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

    /// The index of the pooled buffer that wholly holds `[ptr, ptr + len)`.
    pub(crate) fn index_of(&self, ptr: *const u8, len: usize) -> Option<u16> {
        let base = self.region.ptr.as_ptr() as usize;
        let addr = ptr as usize;
        if addr < base || addr + len > base + self.region.len || self.buf_size == 0 {
            return None;
        }
        let index = (addr - base) / self.buf_size;
        let end = (index + 1) * self.buf_size + base;
        (addr + len <= end).then_some(index as u16)
    }
}

/// A fixed set of equal, aligned buffers, handed out and returned on drop.
///
/// Cloning the pool clones a handle to the same buffers.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("count", &self.inner.count)
            .field("buf_size", &self.inner.buf_size)
            .finish()
    }
}

impl BufferPool {
    /// `count` buffers of `buf_size` bytes, each aligned to `align`.
    ///
    /// `buf_size` is rounded up to a multiple of `align`. At most 16384
    /// buffers (the kernel's limit for registered buffers).
    ///
    /// # Panics
    /// If `align` is not a power of two or `count` exceeds 16384.
    pub fn new(count: usize, buf_size: usize, align: usize) -> BufferPool {
        assert!(count <= 16384, "BufferPool: at most 16384 buffers");
        assert!(
            align.is_power_of_two(),
            "BufferPool: alignment must be a power of two"
        );
        let buf_size = buf_size.div_ceil(align) * align;
        BufferPool {
            inner: Arc::new(PoolInner {
                region: AlignedBuf::new(buf_size * count, align.max(4096)),
                buf_size,
                count,
                free: Mutex::new((0..count as u32).rev().collect()),
                available: Condvar::new(),
            }),
        }
    }

    /// A free buffer, or `None` if all are in use.
    pub fn try_get(&self) -> Option<PooledBuf> {
        let index = self
            .inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()?;
        Some(PooledBuf {
            pool: self.inner.clone(),
            index,
        })
    }

    /// A free buffer, waiting for one to be returned if all are in use.
    pub fn get(&self) -> PooledBuf {
        let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(index) = free.pop() {
                return PooledBuf {
                    pool: self.inner.clone(),
                    index,
                };
            }
            free = self
                .inner
                .available
                .wait(free)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Size of each buffer in bytes.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// Buffers free right now (not handed out, and not held by an operation
    /// the kernel has yet to complete).
    pub fn available(&self) -> usize {
        self.inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    pub(crate) fn inner(&self) -> &Arc<PoolInner> {
        &self.inner
    }
}

/// A buffer borrowed from a [`BufferPool`]; it goes back to the pool on drop.
pub struct PooledBuf {
    pool: Arc<PoolInner>,
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
