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
        // (`bytes_of`: an empty part has no first byte, and its buffer's
        // pointer may be null.)
        &bytes_of(&self.buf, self.end)[self.begin..]
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

/// The first `len` bytes of `buf` (at most its length), as a slice: none
/// for no bytes, since an empty buffer's pointer promises nothing (it may
/// be null or dangling) and no slice may be made from a null pointer.
#[inline]
pub(crate) fn bytes_of<B: IoBuf>(buf: &B, len: usize) -> &[u8] {
    let len = len.min(buf.bytes_len());
    if len == 0 {
        return &[];
    }
    // SAFETY: `len` (at least one) is within the buffer's `bytes_len`
    // initialised bytes, so its pointer is its first byte, non-null; they
    // stay valid and unchanged while `buf` is borrowed shared.
    unsafe { std::slice::from_raw_parts(buf.stable_ptr(), len) }
}

/// The whole of `buf` as a slice to write into: none for an empty buffer
/// (see [`bytes_of`]).
#[inline]
pub(crate) fn bytes_of_mut<B: IoBufMut>(buf: &mut B) -> &mut [u8] {
    let len = buf.bytes_len();
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the buffer has `len` (at least one) initialised bytes at its
    // pointer, non-null, writable, which stay initialised whatever is
    // written (`IoBufMut`'s promise), borrowed exclusively here.
    unsafe { std::slice::from_raw_parts_mut(buf.stable_mut_ptr(), len) }
}

/// Buffers for the tests of the async API's memory logic (run under Miri:
/// no system call).
#[cfg(test)]
pub(crate) mod test_bufs {
    /// A buffer whose pointer is null while it is empty: `IoBuf` promises
    /// only the first byte, and an empty buffer has none.
    pub(crate) struct NullWhenEmpty(pub(crate) Vec<u8>);

    // SAFETY: the `Vec`'s bytes do not move with the value; the pointer is
    // null only when there are no bytes.
    unsafe impl super::IoBuf for NullWhenEmpty {
        fn stable_ptr(&self) -> *const u8 {
            if self.0.is_empty() {
                std::ptr::null()
            } else {
                self.0.as_ptr()
            }
        }
        fn bytes_len(&self) -> usize {
            self.0.len()
        }
    }

    // SAFETY: as above, written only through `&mut`.
    unsafe impl super::IoBufMut for NullWhenEmpty {
        fn stable_mut_ptr(&mut self) -> *mut u8 {
            if self.0.is_empty() {
                std::ptr::null_mut()
            } else {
                self.0.as_mut_ptr()
            }
        }
    }
}

/// The owned buffers' pointers and slices, without system calls (in
/// `scripts/miri`).
#[cfg(test)]
mod tests {
    use super::test_bufs::NullWhenEmpty;
    use super::{IoBuf, IoBufMut};
    use crate::buf::AlignedBuf;

    /// The bytes `stable_ptr` and `bytes_len` describe, read through the
    /// pointer as the kernel would.
    fn through_ptr<B: IoBuf>(b: &B) -> Vec<u8> {
        (0..b.bytes_len())
            // SAFETY: `i` is below `bytes_len`, initialised bytes at
            // `stable_ptr` (the trait's promise).
            .map(|i| unsafe { *b.stable_ptr().add(i) })
            .collect()
    }

    /// Writes `bytes` through `stable_mut_ptr`, as the kernel would.
    fn write_through<B: IoBufMut>(b: &mut B, bytes: &[u8]) {
        assert!(bytes.len() <= b.bytes_len());
        let p = b.stable_mut_ptr();
        for (i, &x) in bytes.iter().enumerate() {
            // SAFETY: `i` is below `bytes_len`, writable (the trait's
            // promise).
            unsafe { *p.add(i) = x };
        }
    }

    /// Each owned buffer's pointer reaches its bytes, written and read
    /// back through it after the value moved (the bytes did not).
    #[test]
    fn owned_buffers_are_read_and_written_through_their_pointers() {
        let mut v = vec![0u8; 4];
        write_through(&mut v, b"abcd");
        let moved = v;
        assert_eq!(through_ptr(&moved), b"abcd");
        let mut b: Box<[u8]> = vec![0u8; 3].into_boxed_slice();
        write_through(&mut b, b"xyz");
        let moved = b;
        assert_eq!(through_ptr(&moved), b"xyz");
        let mut a = AlignedBuf::new(8, 64);
        assert_eq!(a.stable_ptr() as usize % 64, 0);
        write_through(&mut a, b"aligned!");
        let moved = a;
        assert_eq!(through_ptr(&moved), b"aligned!");
        let s: &'static [u8] = b"static";
        assert_eq!(through_ptr(&s), b"static");
        assert_eq!(through_ptr(&Vec::new()), b"");
    }

    /// A part of a buffer reads and writes its own bytes only, and an
    /// empty part reads as no bytes, also of a buffer whose pointer is
    /// null while it is empty.
    #[test]
    fn a_slice_reads_and_writes_its_part_only() {
        let mut part = b"hello, blockio".to_vec().slice(7..);
        assert_eq!(&*part, b"blockio");
        assert_eq!(through_ptr(&part), b"blockio");
        write_through(&mut part, b"BLOCK");
        assert_eq!(&*part, b"BLOCKio");
        assert_eq!(part.into_inner(), b"hello, BLOCKio");
        assert_eq!(&*NullWhenEmpty(Vec::new()).slice(..), b"");
        assert_eq!(&*NullWhenEmpty(b"abc".to_vec()).slice(3..), b"");
        assert_eq!(&*NullWhenEmpty(b"abc".to_vec()).slice(1..), b"bc");
        assert_eq!(&*b"abc".to_vec().slice(1..1), b"");
    }
}
