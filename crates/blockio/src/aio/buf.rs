//! Buffers the async API owns while the kernel uses them.
//!
//! An async operation takes its buffer by value and gives it back with the
//! result, so a dropped future can leave the buffer with the driver until
//! the kernel is done with it. That only works for buffers whose bytes do
//! not move when the buffer value moves: heap buffers. These traits say so.

use std::ops::{Bound, RangeBounds};

use crate::buf::{AlignedBuf, PooledBuf};

/// A buffer the kernel may read from while the value is moved around.
///
/// # Safety
/// `stable_ptr` must point to `bytes_len` initialised bytes that stay at the
/// same address, valid and unchanged, for as long as the value lives and is
/// not accessed through `&mut` — moving the value must not move the bytes.
///
/// A borrowed buffer is not one: the owned-buffer methods take the buffer
/// itself (`Vec<u8>`, `Box<[u8]>`, ...) and give it back with the result,
/// while `&[u8]` and `&mut [u8]` go through the I/O traits, as on tokio.
///
/// ```compile_fail,E0277
/// # async fn f(socket: blockio::net::TcpStream) {
/// let mut buf = vec![0u8; 1024];
/// // A `Vec` borrowed: the compiler names both ways to write this.
/// socket.write(&buf).await;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an owned buffer: blockio's owned-buffer methods take the buffer by value",
    label = "a borrowed buffer where an owned one (`Vec<u8>`, `Box<[u8]>`, ...) is taken",
    note = "pass the buffer itself and take it back from the result: `let (n, buf) = stream.write(buf).await;`",
    note = "or, for tokio's `AsyncWriteExt::write(&buf)`, call it on a `&mut` to the stream or file (`let s = &mut stream;`), with the trait imported"
)]
pub unsafe trait IoBuf: Send + 'static {
    /// The first byte.
    fn stable_ptr(&self) -> *const u8;
    /// How many bytes the kernel may read.
    fn bytes_len(&self) -> usize;

    /// The bytes `range` of this buffer as an owned buffer of its own,
    /// with no copy: write what a read returned with `buf.slice(..n)`, or
    /// read into part of a buffer, then take the buffer back with
    /// [`Slice::into_inner`].
    ///
    /// # Panics
    /// If `range` goes past the buffer's length or ends before it begins,
    /// as slicing a `[u8]` does.
    fn slice(self, range: impl RangeBounds<usize>) -> Slice<Self>
    where
        Self: Sized,
    {
        let len = self.bytes_len();
        let begin = match range.start_bound() {
            Bound::Included(&b) => b,
            Bound::Excluded(&b) => b.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => len,
        };
        assert!(
            begin <= end && end <= len,
            "slice {begin}..{end} of a buffer of {len} bytes"
        );
        Slice {
            buf: self,
            begin,
            end,
        }
    }
}

/// Part of an owned buffer, owned: see [`IoBuf::slice`]. Dereferences to
/// its bytes.
#[derive(Debug)]
pub struct Slice<B> {
    buf: B,
    begin: usize,
    end: usize,
}

impl<B> Slice<B> {
    /// Where the part begins in the whole buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::IoBuf;
    ///
    /// let part = b"hello, blockio".to_vec().slice(7..);
    /// assert_eq!(part.begin(), 7);
    /// # Ok(())
    /// # }
    /// ```
    pub fn begin(&self) -> usize {
        self.begin
    }

    /// Where the part ends (exclusive) in the whole buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::IoBuf;
    ///
    /// let part = b"hello, blockio".to_vec().slice(7..);
    /// assert_eq!(part.end(), 14);
    /// # Ok(())
    /// # }
    /// ```
    pub fn end(&self) -> usize {
        self.end
    }

    /// The whole buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::IoBuf;
    ///
    /// let part = b"hello, blockio".to_vec().slice(7..);
    /// assert_eq!(part.get_ref().len(), 14);
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_ref(&self) -> &B {
        &self.buf
    }

    /// The whole buffer back.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::IoBuf;
    ///
    /// let part = b"hello, blockio".to_vec().slice(7..);
    /// assert_eq!(part.into_inner(), b"hello, blockio");
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_inner(self) -> B {
        self.buf
    }
}

impl<B: IoBuf> std::ops::Deref for Slice<B> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // An empty part has no first byte: its buffer's pointer may be
        // null, which no slice may be made from.
        if self.begin == self.end {
            return &[];
        }
        // SAFETY: `begin..end` is within the buffer's `bytes_len`
        // initialised bytes (checked when the slice was made), at least one
        // byte, so the pointer is the buffer's first byte, non-null; they
        // stay valid while `self.buf` lives and is borrowed shared.
        unsafe {
            std::slice::from_raw_parts(self.buf.stable_ptr().add(self.begin), self.end - self.begin)
        }
    }
}

// SAFETY: the part's bytes are `begin..end` of the whole buffer's stable
// initialised bytes (checked when the slice was made), which do not move
// with the `Slice`.
unsafe impl<B: IoBuf> IoBuf for Slice<B> {
    fn stable_ptr(&self) -> *const u8 {
        // SAFETY: `begin` is within the buffer (at most its length).
        unsafe { self.buf.stable_ptr().add(self.begin) }
    }
    fn bytes_len(&self) -> usize {
        self.end - self.begin
    }
}

// SAFETY: as above; the whole buffer is writable over its length.
unsafe impl<B: IoBufMut> IoBufMut for Slice<B> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: `begin` is within the buffer (at most its length).
        unsafe { self.buf.stable_mut_ptr().add(self.begin) }
    }
}

/// A buffer the kernel may write into while the value is moved around.
///
/// # Safety
/// As for [`IoBuf`], and `stable_mut_ptr` must be valid for writes of
/// `bytes_len` bytes, which stay initialised whatever is written.
///
/// As with [`IoBuf`], a borrowed buffer is not one: `read(&mut buf)` is
/// the I/O traits' call, made on a `&mut` to the stream.
///
/// ```compile_fail,E0277
/// # async fn f(socket: blockio::net::TcpStream) {
/// let mut buf = vec![0u8; 1024];
/// // A `Vec` borrowed: the compiler names both ways to write this.
/// socket.read(&mut buf).await;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an owned buffer: blockio's owned-buffer methods take the buffer by value",
    label = "a borrowed buffer where an owned one (`Vec<u8>`, `Box<[u8]>`, ...) is taken",
    note = "pass the buffer itself and take it back with the count: `let (n, buf) = stream.read(buf).await;`",
    note = "or, for tokio's `AsyncReadExt::read(&mut buf)`, call it on a `&mut` to the stream or file (`let s = &mut stream;`), with the trait imported"
)]
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
