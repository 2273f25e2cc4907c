//! Operations at explicit offsets, with owned buffers.

use std::io;
use std::os::fd::AsRawFd;

use super::batch::{BatchFuture, BatchOp, MaybeBuf, StreamFile};
use super::AsyncFile;
use crate::aio::buf::{IoBuf, IoBufMut};
use crate::aio::op::{BufResult, OpFuture};
use crate::op::action::{
    Action, FallocateArgs, ReadVectoredArgs, Vectored, WriteArgs, WriteVectoredArgs,
};

impl AsyncFile {
    /// Reads into `buf[start..]` at `offset`.
    #[inline]
    fn read_part<B: IoBufMut>(&self, buf: B, start: usize, offset: u64) -> OpFuture<B> {
        self.handle.read_into(&self.engine, buf, start, offset)
    }

    /// Writes `buf[start..]` at `offset`.
    pub(super) fn write_part<B: IoBuf>(&self, buf: B, start: usize, offset: u64) -> OpFuture<B> {
        let start = start.min(buf.bytes_len());
        let len = buf.bytes_len() - start;
        // SAFETY: `start` is within the buffer (the kernel only reads), and
        // the op points into `buf`, which the future owns.
        unsafe {
            let ptr = buf.stable_ptr().add(start);
            let write = WriteArgs {
                buf: ptr,
                len,
                offset,
            };
            self.handle
                .op(&self.engine, Action::Write(write), buf, Vec::new())
        }
    }

    /// A vectored operation over `bufs`, described by `iovecs`.
    fn vectored<B: Send + 'static>(
        &self,
        make: fn(Vectored) -> Action,
        bufs: Vec<B>,
        iovecs: Vec<libc::iovec>,
        offset: u64,
    ) -> OpFuture<Vec<B>> {
        let v = Vectored {
            iovecs: iovecs.as_ptr(),
            count: iovecs.len(),
            offset,
        };
        // SAFETY: the iovecs (heap, owned by the future; moving the `Vec`
        // does not move its elements) describe `bufs` (owned by the future).
        unsafe { self.handle.op(&self.engine, make(v), bufs, iovecs) }
    }

    /// An fsync: an operation without memory.
    fn sync_op(&self, data_only: bool) -> OpFuture<()> {
        let action = Action::flush(data_only);
        // SAFETY: no memory is involved.
        unsafe { self.handle.op(&self.engine, action, (), Vec::new()) }
    }

    /// Reads up to `buf.len()` bytes at `offset`; resolves to the byte count
    /// (short at end of file) and the buffer.
    ///
    /// On a pipe, FIFO or character device, a read whose future is dropped
    /// before its bytes were taken is cancelled, but kept: the file's
    /// next read waits for the cancellation's outcome and hands out what
    /// the dropped read took before it landed first, so no byte is lost.
    /// Such a file has no offsets: `offset` is ignored there, on every
    /// backend (as by io_uring), once it is at most `i64::MAX` (beyond,
    /// it is refused with [`InvalidInput`](io::ErrorKind::InvalidInput)
    /// before it reaches the backend, as on any file).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    ///
    /// // The buffer goes in and comes back with the result.
    /// let (n, buf) = file.read_at(vec![0u8; 7], 7).await;
    /// assert_eq!(&buf[..n?], b"blockio");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn read_at<B: IoBufMut>(&self, buf: B, offset: u64) -> OpFuture<B> {
        let mut read = self.read_part(buf, 0, offset);
        // Only `read_at`'s, `read_vectored_at`'s and batch reads' futures
        // are kept: `read_exact_at`'s and the streaming read-ahead are
        // cancelled when dropped.
        read.kept_if_dropped();
        read
    }

    /// Writes `buf` at `offset`; resolves to the byte count and the buffer.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// let (n, _buf) = file.write_at(b"hello".to_vec(), 0).await;
    /// assert_eq!(n?, 5);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn write_at<B: IoBuf>(&self, buf: B, offset: u64) -> OpFuture<B> {
        self.write_part(buf, 0, offset)
    }

    /// Reads into each buffer in turn, starting at `offset`.
    ///
    /// On a pipe, FIFO or character device, a read whose future is dropped
    /// before its bytes were taken is kept for the file's next read, as
    /// [`read_at`](Self::read_at)'s is: no byte is lost.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    ///
    /// let (n, bufs) = file.read_vectored_at(vec![vec![0u8; 5], vec![0u8; 9]], 0).await;
    /// assert_eq!(n?, 14);
    /// assert_eq!(bufs[0], b"hello");
    /// assert_eq!(bufs[1], b", blockio");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn read_vectored_at<B: IoBufMut>(&self, mut bufs: Vec<B>, offset: u64) -> OpFuture<Vec<B>> {
        let iovecs = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.stable_mut_ptr().cast(),
                iov_len: b.bytes_len(),
            })
            .collect();
        let mut read = self.vectored(
            |v| Action::ReadVectored(ReadVectoredArgs(v)),
            bufs,
            iovecs,
            offset,
        );
        // Kept if dropped, as `read_at`'s are.
        read.kept_if_dropped_vectored();
        read
    }

    /// Writes each buffer in turn, starting at `offset`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// let (n, _bufs) = file.write_vectored_at(vec![b"hel".to_vec(), b"lo".to_vec()], 0).await;
    /// assert_eq!(n?, 5);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn write_vectored_at<B: IoBuf>(&self, bufs: Vec<B>, offset: u64) -> OpFuture<Vec<B>> {
        let iovecs = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.stable_ptr() as *mut libc::c_void,
                iov_len: b.bytes_len(),
            })
            .collect();
        self.vectored(
            |v| Action::WriteVectored(WriteVectoredArgs(v)),
            bufs,
            iovecs,
            offset,
        )
    }

    /// Flushes data and metadata to stable storage.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// file.write_all_at(b"hello".to_vec(), 0).await.0?;
    /// // Data and metadata on the device.
    /// file.fsync().await.0?;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn fsync(&self) -> OpFuture<()> {
        self.sync_op(false)
    }

    /// Flushes data (and the metadata needed to read it).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// file.write_all_at(b"hello".to_vec(), 0).await.0?;
    /// // The data on the device (and the metadata needed to read it back).
    /// file.fdatasync().await.0?;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn fdatasync(&self) -> OpFuture<()> {
        self.sync_op(true)
    }

    /// Allocates, deallocates or zeroes `len` bytes of the file's storage
    /// from `offset` (`fallocate`), as [`Op::fallocate`](crate::Op::fallocate):
    /// `mode` holds `fallocate(2)`'s `FALLOC_FL_*` flags, 0 allocating
    /// (and growing the file if the range ends past it).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// // Reserves the first 64 KiB (mode 0: the file grows to cover them).
    /// file.fallocate(0, 0, 64 * 1024).await.0?;
    /// assert_eq!(std::fs::metadata(&path)?.len(), 64 * 1024);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn fallocate(&self, mode: i32, offset: u64, len: u64) -> OpFuture<()> {
        let action = Action::Fallocate(FallocateArgs { mode, offset, len });
        // SAFETY: no memory is involved.
        unsafe { self.handle.op(&self.engine, action, (), Vec::new()) }
    }

    /// Fills `buf` from `offset`, reading again after short reads; fails
    /// with `UnexpectedEof` (naming the offset) if the file ends first.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    ///
    /// let (res, buf) = file.read_exact_at(vec![0u8; 5], 0).await;
    /// res?;
    /// assert_eq!(buf, b"hello");
    /// // Past the end: UnexpectedEof.
    /// let (res, _) = file.read_exact_at(vec![0u8; 5], 12).await;
    /// assert_eq!(res.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn read_exact_at<B: IoBufMut>(&self, mut buf: B, offset: u64) -> BufResult<(), B> {
        let mut done = 0;
        while done < buf.bytes_len() {
            let (res, b) = self.read_part(buf, done, offset + done as u64).await;
            buf = b;
            match res {
                Ok(0) => {
                    let err = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "read_exact_at: end of file at offset {} with {} of {} bytes read (fd {})",
                            offset + done as u64,
                            done,
                            buf.bytes_len(),
                            self.handle.file.as_raw_fd()
                        ),
                    );
                    return (Err(err), buf);
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), buf),
            }
        }
        (Ok(()), buf)
    }

    /// Writes all of `buf` at `offset`, writing again after short writes.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// file.write_all_at(vec![7u8; 1 << 20], 0).await.0?;
    /// assert_eq!(std::fs::metadata(&path)?.len(), 1 << 20);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn write_all_at<B: IoBuf>(&self, mut buf: B, offset: u64) -> BufResult<(), B> {
        let mut done = 0;
        while done < buf.bytes_len() {
            let (res, b) = self.write_part(buf, done, offset + done as u64).await;
            buf = b;
            match res {
                Ok(0) => {
                    let err = io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "write_all_at: wrote nothing at offset {}",
                            offset + done as u64
                        ),
                    );
                    return (Err(err), buf);
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return (Err(e), buf),
            }
        }
        (Ok(()), buf)
    }

    /// Submits all of `ops` to the kernel together (but the reads and the
    /// writes of a stream, below) and resolves when every one has completed, with one
    /// result per operation, in order.
    ///
    /// On a pipe, FIFO, socket or character device the batch's reads are
    /// those of [`read_at`](Self::read_at), run one after another in the
    /// batch's order (the next submitted when the one before completes:
    /// two at once could take the stream's bytes in either order), so
    /// their results hold its bytes in order. While the file keeps a
    /// dropped read, the batch waits for it at its first poll, its reads
    /// (in order) taking what it took before the rest is submitted.
    /// Dropped unfinished, the batch gives what its finished reads took
    /// back to the file, in order, for its next read, and its unfinished
    /// read is kept after that, as a dropped `read_at` is: no byte is
    /// lost.
    ///
    /// The batch's writes of such a file run one after another the same
    /// way, in the batch's order (two at once could interleave their
    /// bytes): each write's bytes go in after those of the writes before
    /// it. A write may still be short (io_uring ends a write of a pipe
    /// once the pipe is full): the writes after it then follow
    /// the bytes it wrote, not its whole buffer, and its result says how
    /// many that was. A caller
    /// that needs every byte of each buffer in order writes them with
    /// [`write_all_at`](Self::write_all_at) or the streaming writes'
    /// `write_all` (`AsyncWrite`), which go on from where a short write
    /// stopped. A dropped batch's writes not yet submitted are never
    /// written.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::create(&engine, &path)?;
    ///
    /// use blockio::aio::BatchOp;
    ///
    /// file.write_all_at(b"hello, blockio".to_vec(), 0).await.0?;
    /// let results = file
    ///     .submit(vec![
    ///         BatchOp::Read { offset: 0, buf: vec![0u8; 5] },
    ///         BatchOp::Read { offset: 7, buf: vec![0u8; 7] },
    ///         BatchOp::Fsync,
    ///     ])
    ///     .await;
    /// let (n, buf) = &results[1];
    /// assert_eq!(*n.as_ref().unwrap(), 7);
    /// assert_eq!(buf.as_deref(), Some(&b"blockio"[..]));
    /// assert!(results[2].1.is_none());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn submit<B: IoBufMut>(&self, ops: Vec<BatchOp<B>>) -> BatchFuture<B> {
        // (only a batch with reads, or with writes to keep in order, asks
        // what the file is)
        let has_reads = ops.iter().any(|op| matches!(op, BatchOp::Read { .. }));
        let writes = ops.iter().filter(|op| matches!(op, BatchOp::Write { .. }));
        let ask = has_reads || writes.count() > 1;
        let futs = ops
            .into_iter()
            .map(|op| match op {
                BatchOp::Read { offset, buf } => MaybeBuf::Read(self.read_at(buf, offset)),
                BatchOp::Write { offset, buf } => MaybeBuf::Write(self.write_at(buf, offset)),
                BatchOp::Fsync => MaybeBuf::NoBuf(self.fsync()),
                BatchOp::Fdatasync => MaybeBuf::NoBuf(self.fdatasync()),
            })
            .collect();
        let stream = if ask {
            StreamFile::of(&self.handle)
        } else {
            None
        };
        BatchFuture::new(self.engine.clone(), futs, stream)
    }
}
