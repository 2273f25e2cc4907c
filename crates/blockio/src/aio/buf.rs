//! Buffers the async API owns while the kernel uses them.
//!
//! An async operation takes its buffer by value and gives it back with the
//! result, so a dropped future can leave the buffer with the driver until
//! the kernel is done with it. That only works for buffers whose bytes do
//! not move when the buffer value moves: heap buffers. These traits say so.

use crate::buf::{AlignedBuf, PooledBuf};

/// A buffer the kernel may read from while the value is moved around.
///
/// # Safety
/// `stable_ptr` must point to `bytes_len` initialised bytes that stay at the
/// same address, valid and unchanged, for as long as the value lives and is
/// not accessed through `&mut` — moving the value must not move the bytes.
pub unsafe trait IoBuf: Send + 'static {
    /// The first byte.
    fn stable_ptr(&self) -> *const u8;
    /// How many bytes the kernel may read.
    fn bytes_len(&self) -> usize;
}

/// A buffer the kernel may write into while the value is moved around.
///
/// # Safety
/// As for [`IoBuf`], and `stable_mut_ptr` must be valid for writes of
/// `bytes_len` bytes, which stay initialised whatever is written.
pub unsafe trait IoBufMut: IoBuf {
    /// The first byte, for writing.
    fn stable_mut_ptr(&mut self) -> *mut u8;
}

// SAFETY: a Vec's bytes live on the heap and do not move with the Vec; the
// length is the initialised part.
unsafe impl IoBuf for Vec<u8> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above; writes stay within the initialised length.
unsafe impl IoBufMut for Vec<u8> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}

// SAFETY: a boxed slice's bytes live on the heap and do not move with the box.
unsafe impl IoBuf for Box<[u8]> {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above.
unsafe impl IoBufMut for Box<[u8]> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}

// SAFETY: an AlignedBuf owns a heap allocation that does not move with it,
// zero-initialised at creation.
unsafe impl IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above.
unsafe impl IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}

// SAFETY: a PooledBuf is an exclusive slot of its pool's heap region, which
// the PooledBuf keeps alive; the slot does not move with the handle.
unsafe impl IoBuf for PooledBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above.
unsafe impl IoBufMut for PooledBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
}

// SAFETY: static bytes never move and are never freed (read-only use only).
unsafe impl IoBuf for &'static [u8] {
    fn stable_ptr(&self) -> *const u8 {
        self.as_ptr()
    }
    fn bytes_len(&self) -> usize {
        self.len()
    }
}
