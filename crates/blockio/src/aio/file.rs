//! `AsyncFile`: positional and streaming file I/O on the async driver.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{self, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use super::buf::{IoBuf, IoBufMut};
use super::op::{BufResult, OpFuture};
use super::AsyncEngine;
use crate::buf::AlignedBuf;
use crate::direct::Alignment;
use crate::error::PathError;
use crate::op::action::{Action, Flush, Read, ReadVectored, Vectored, Write, WriteVectored};
use crate::op::Op;

/// The open file, shared with every operation in flight on it so that the
/// descriptor stays open until the last one completes.
struct Handle {
    file: std::mem::ManuallyDrop<File>,
    direct: Option<Alignment>,
    /// Whether dropping the handle closes the descriptor (not for
    /// [`AsyncFile::from_raw_fd`]).
    owned: bool,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: dropped exactly once, here.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.file) };
        }
    }
}

impl Handle {
    /// `action` on this file, over memory owned by `buf` and `iovecs`,
    /// which go into the future with a handle that keeps the file open
    /// until the operation completes.
    ///
    /// # Safety
    /// The pointers of `action` must point only into memory owned by `buf`
    /// or `iovecs`, valid as `Op::from_action` requires.
    unsafe fn op<B: Send + 'static>(
        self: &Arc<Self>,
        engine: &AsyncEngine,
        action: Action,
        buf: B,
        iovecs: Vec<libc::iovec>,
    ) -> OpFuture<B> {
        // SAFETY: the caller's promise, passed on.
        unsafe {
            let op = Op::from_action(self.file.as_raw_fd(), action, self.direct);
            OpFuture::new(engine, op, buf, iovecs, self.clone())
        }
    }

    /// Reads into `buf[start..]` at `offset`.
    fn read_into<B: IoBufMut>(
        self: &Arc<Self>,
        engine: &AsyncEngine,
        mut buf: B,
        start: usize,
        offset: u64,
    ) -> OpFuture<B> {
        let start = start.min(buf.bytes_len());
        let len = buf.bytes_len() - start;
        // SAFETY: `start` is within the buffer, and the op points into
        // `buf`, which the future owns.
        unsafe {
            let ptr = buf.stable_mut_ptr().add(start);
            let read = Read {
                buf: ptr,
                len,
                offset,
            };
            self.op(engine, Action::Read(read), buf, Vec::new())
        }
    }
}

/// Options for [`AsyncFile::open_with`].
#[derive(Debug, Clone)]
pub struct AsyncOpenOptions {
    options: OpenOptions,
    direct: bool,
    block_size: usize,
    depth: usize,
}

impl Default for AsyncOpenOptions {
    fn default() -> Self {
        let mut options = OpenOptions::new();
        options.read(true);
        AsyncOpenOptions {
            options,
            direct: false,
            block_size: 128 << 10,
            depth: 4,
        }
    }
}

impl AsyncOpenOptions {
    /// Read-only, buffered, 128 KiB blocks, 4 blocks of read-ahead.
    pub fn new() -> Self {
        Self::default()
    }
    /// Open for reading.
    pub fn read(mut self, on: bool) -> Self {
        self.options.read(on);
        self
    }
    /// Open for writing.
    pub fn write(mut self, on: bool) -> Self {
        self.options.write(on);
        self
    }
    /// Create the file if missing.
    pub fn create(mut self, on: bool) -> Self {
        self.options.create(on);
        self
    }
    /// Truncate the file on opening.
    pub fn truncate(mut self, on: bool) -> Self {
        self.options.truncate(on);
        self
    }
    /// Open with `O_DIRECT`: operations are checked against the file's
    /// alignment before submission, and streaming uses aligned blocks.
    pub fn direct(mut self, on: bool) -> Self {
        self.direct = on;
        self
    }
    /// Bytes per streaming read or write (default 128 KiB; rounded up to
    /// the alignment for direct files).
    pub fn block_size(mut self, n: usize) -> Self {
        self.block_size = n.max(1);
        self
    }
    /// Streaming reads (or writes) kept in flight ahead of (or behind) the
    /// cursor (default 4).
    pub fn depth(mut self, n: usize) -> Self {
        self.depth = n.max(1);
        self
    }
}

/// A file for async I/O: positional operations with owned buffers, and
/// `futures::io::{AsyncRead, AsyncWrite, AsyncSeek}` for streaming (with
/// read-ahead and write-behind of `depth` blocks).
///
/// Opening is a plain `open` system call made on the calling thread (it
/// does not wait for the device on local filesystems).
pub struct AsyncFile {
    engine: AsyncEngine,
    handle: Arc<Handle>,
    stream: Stream,
}

impl std::fmt::Debug for AsyncFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncFile")
            .field("fd", &self.handle.file.as_raw_fd())
            .field("direct", &self.handle.direct.is_some())
            .field("pos", &self.stream.pos)
            .finish()
    }
}

impl AsyncFile {
    /// Opens `path` read-only (buffered).
    pub fn open(engine: &AsyncEngine, path: impl AsRef<Path>) -> io::Result<AsyncFile> {
        Self::open_with(engine, path, &AsyncOpenOptions::new())
    }

    /// Creates (or truncates) `path` for writing and reading.
    pub fn create(engine: &AsyncEngine, path: impl AsRef<Path>) -> io::Result<AsyncFile> {
        let o = AsyncOpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true);
        Self::open_with(engine, path, &o)
    }

    /// Wraps a file that is already open (for example a duplicate of a
    /// descriptor handed over by another language). Streaming uses the
    /// default block size and depth of [`AsyncOpenOptions`]. No alignment check is made before submission: on an
    /// `O_DIRECT` descriptor a misaligned operation fails with the kernel's
    /// `EINVAL`.
    pub fn from_file(engine: &AsyncEngine, file: File) -> AsyncFile {
        let o = AsyncOpenOptions::new();
        AsyncFile {
            engine: engine.clone(),
            handle: Arc::new(Handle {
                file: std::mem::ManuallyDrop::new(file),
                direct: None,
                owned: true,
            }),
            stream: Stream::new(o.block_size, o.depth, 1),
        }
    }

    /// Uses a descriptor owned by someone else (another language's file
    /// object), without duplicating or closing it.
    ///
    /// # Safety
    /// `fd` must stay open, and name the same file, until every operation
    /// issued through this `AsyncFile` has completed (I/O safety: otherwise
    /// an operation may act on whatever file the number names by then). The
    /// buffers stay safe either way: they are owned by the operations.
    pub unsafe fn from_raw_fd(engine: &AsyncEngine, fd: std::os::fd::RawFd) -> AsyncFile {
        let o = AsyncOpenOptions::new();
        AsyncFile {
            engine: engine.clone(),
            handle: Arc::new(Handle {
                // SAFETY: never closed (owned: false); the caller keeps it open.
                file: std::mem::ManuallyDrop::new(unsafe {
                    <File as std::os::fd::FromRawFd>::from_raw_fd(fd)
                }),
                direct: None,
                owned: false,
            }),
            stream: Stream::new(o.block_size, o.depth, 1),
        }
    }

    /// Opens `path` with `options`.
    pub fn open_with(
        engine: &AsyncEngine,
        path: impl AsRef<Path>,
        options: &AsyncOpenOptions,
    ) -> io::Result<AsyncFile> {
        let path = path.as_ref();
        let (file, direct) = if options.direct {
            let d = crate::DirectFile::open_with(path, &options.options)?;
            let a = d.alignment();
            (d.into_file(), Some(a))
        } else {
            let f = options
                .options
                .open(path)
                .map_err(|e| PathError::wrap("open", path, e))?;
            (f, None)
        };
        let align = direct.map_or(1, |a| a.max());
        let block = options.block_size.div_ceil(align) * align;
        Ok(AsyncFile {
            engine: engine.clone(),
            handle: Arc::new(Handle {
                file: std::mem::ManuallyDrop::new(file),
                direct,
                owned: true,
            }),
            stream: Stream::new(block, options.depth, align),
        })
    }

    /// The alignment direct I/O on this file needs (None if buffered).
    pub fn direct_alignment(&self) -> Option<Alignment> {
        self.handle.direct
    }

    /// The underlying file (for metadata and the like).
    pub fn file(&self) -> &File {
        &self.handle.file
    }

    /// Reads into `buf[start..]` at `offset`.
    fn read_part<B: IoBufMut>(&self, buf: B, start: usize, offset: u64) -> OpFuture<B> {
        self.handle.read_into(&self.engine, buf, start, offset)
    }

    /// Writes `buf[start..]` at `offset`.
    fn write_part<B: IoBuf>(&self, buf: B, start: usize, offset: u64) -> OpFuture<B> {
        let start = start.min(buf.bytes_len());
        let len = buf.bytes_len() - start;
        // SAFETY: `start` is within the buffer (the kernel only reads), and
        // the op points into `buf`, which the future owns.
        unsafe {
            let ptr = buf.stable_ptr().add(start);
            let write = Write {
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

    /// A sync: an operation without memory.
    fn sync_op(&self, data_only: bool) -> OpFuture<()> {
        let action = Action::Sync(Flush { data_only });
        // SAFETY: no memory is involved.
        unsafe { self.handle.op(&self.engine, action, (), Vec::new()) }
    }

    /// Reads up to `buf.len()` bytes at `offset`; resolves to the byte count
    /// (short at end of file) and the buffer.
    pub fn read_at<B: IoBufMut>(&self, buf: B, offset: u64) -> OpFuture<B> {
        self.read_part(buf, 0, offset)
    }

    /// Writes `buf` at `offset`; resolves to the byte count and the buffer.
    pub fn write_at<B: IoBuf>(&self, buf: B, offset: u64) -> OpFuture<B> {
        self.write_part(buf, 0, offset)
    }

    /// Reads into each buffer in turn, starting at `offset`.
    pub fn read_vectored_at<B: IoBufMut>(&self, mut bufs: Vec<B>, offset: u64) -> OpFuture<Vec<B>> {
        let iovecs = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.stable_mut_ptr().cast(),
                iov_len: b.bytes_len(),
            })
            .collect();
        self.vectored(
            |v| Action::ReadVectored(ReadVectored(v)),
            bufs,
            iovecs,
            offset,
        )
    }

    /// Writes each buffer in turn, starting at `offset`.
    pub fn write_vectored_at<B: IoBuf>(&self, bufs: Vec<B>, offset: u64) -> OpFuture<Vec<B>> {
        let iovecs = bufs
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.stable_ptr() as *mut libc::c_void,
                iov_len: b.bytes_len(),
            })
            .collect();
        self.vectored(
            |v| Action::WriteVectored(WriteVectored(v)),
            bufs,
            iovecs,
            offset,
        )
    }

    /// Flushes data and metadata to stable storage.
    pub fn fsync(&self) -> OpFuture<()> {
        self.sync_op(false)
    }

    /// Flushes data (and the metadata needed to read it).
    pub fn fdatasync(&self) -> OpFuture<()> {
        self.sync_op(true)
    }

    /// Fills `buf` from `offset`, reading again after short reads; fails
    /// with `UnexpectedEof` (naming the offset) if the file ends first.
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

    /// Submits all of `ops` to the kernel together and resolves when every
    /// one has completed, with one result per operation, in order.
    pub fn submit<B: IoBufMut>(&self, ops: Vec<BatchOp<B>>) -> Batch<B> {
        let futs = ops
            .into_iter()
            .map(|op| match op {
                BatchOp::Read { offset, buf } => MaybeBuf::Buf(self.read_at(buf, offset)),
                BatchOp::Write { offset, buf } => MaybeBuf::Buf(self.write_at(buf, offset)),
                BatchOp::Fsync => MaybeBuf::NoBuf(self.fsync()),
                BatchOp::Fdatasync => MaybeBuf::NoBuf(self.fdatasync()),
            })
            .collect();
        Batch {
            engine: self.engine.clone(),
            futs,
            results: Vec::new(),
            started: false,
        }
    }
}

/// One operation of an async batch ([`AsyncFile::submit`]).
#[derive(Debug)]
pub enum BatchOp<B> {
    /// Read up to `buf.len()` bytes at `offset`.
    Read {
        /// File offset.
        offset: u64,
        /// Where to read into.
        buf: B,
    },
    /// Write `buf` at `offset`.
    Write {
        /// File offset.
        offset: u64,
        /// What to write.
        buf: B,
    },
    /// `fsync`.
    Fsync,
    /// `fdatasync`.
    Fdatasync,
}

enum MaybeBuf<B: Send + 'static> {
    Buf(OpFuture<B>),
    NoBuf(OpFuture<()>),
}

/// The future of an async batch: one result per operation, in order, with
/// the buffers handed back (`None` for syncs).
#[must_use = "futures do nothing unless polled"]
pub struct Batch<B: Send + 'static> {
    engine: AsyncEngine,
    futs: Vec<MaybeBuf<B>>,
    results: Vec<Option<BufResult<usize, Option<B>>>>,
    started: bool,
}

// Results are moved in and out, never pinned.
impl<B: Send + 'static> Unpin for Batch<B> {}

impl<B: Send + 'static> Future for Batch<B> {
    type Output = Vec<BufResult<usize, Option<B>>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.started {
            this.started = true;
            this.results = this.futs.iter().map(|_| None).collect();
            let mut reqs = Vec::with_capacity(this.futs.len());
            for f in &mut this.futs {
                match f {
                    MaybeBuf::Buf(f) => {
                        f.set_waker(cx.waker());
                        reqs.extend(f.take_request());
                    }
                    MaybeBuf::NoBuf(f) => {
                        f.set_waker(cx.waker());
                        reqs.extend(f.take_request());
                    }
                }
            }
            // One hand-over, so the driver submits the batch in one call.
            this.engine.driver().submit(reqs);
        }
        let mut pending = false;
        for (f, slot) in this.futs.iter_mut().zip(this.results.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let polled = match f {
                MaybeBuf::Buf(f) => Pin::new(f).poll(cx).map(|(r, b)| (r, Some(b))),
                MaybeBuf::NoBuf(f) => Pin::new(f).poll(cx).map(|(r, ())| (r, None)),
            };
            match polled {
                Poll::Ready(r) => *slot = Some(r),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(
            this.results
                .drain(..)
                .map(|r| r.expect("every result is in"))
                .collect(),
        )
    }
}

/// The streaming state: cursor, read-ahead and write-behind.
struct Stream {
    /// A seek started by tokio's `AsyncSeek::start_seek`.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pending_seek: Option<SeekFrom>,
    pos: u64,
    block: usize,
    depth: usize,
    align: usize,
    /// Reads in flight ahead of the cursor, in file order.
    ahead: VecDeque<(u64, OpFuture<AlignedBuf>)>,
    /// The next read-ahead offset.
    next: u64,
    /// Once a read came back short: the end of the file.
    eof_at: Option<u64>,
    /// The block being consumed: buffer, start, end.
    cur: Option<(AlignedBuf, usize, usize)>,
    /// The block being filled by writes, and its file offset.
    wbuf: Option<(AlignedBuf, usize, u64)>,
    /// Writes in flight: offset, length, future.
    behind: VecDeque<(u64, usize, OpFuture<AlignedBuf>)>,
    spare: Vec<AlignedBuf>,
}

impl Stream {
    fn new(block: usize, depth: usize, align: usize) -> Stream {
        Stream {
            pending_seek: None,
            pos: 0,
            block,
            depth,
            align,
            ahead: VecDeque::new(),
            next: 0,
            eof_at: None,
            cur: None,
            wbuf: None,
            behind: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    fn buffer(&mut self) -> AlignedBuf {
        self.spare
            .pop()
            .unwrap_or_else(|| AlignedBuf::new(self.block, self.align.max(4096)))
    }

    /// Forgets read-ahead (dropping in-flight reads is safe: their buffers
    /// stay with the driver until they complete).
    fn reset_reads(&mut self) {
        self.ahead.clear();
        if let Some((b, _, _)) = self.cur.take() {
            self.spare.push(b);
        }
        self.next = self.pos - self.pos % self.align as u64;
        self.eof_at = None;
    }
}

impl AsyncFile {
    fn poll_read_inner(&mut self, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<io::Result<usize>> {
        if self.stream.wbuf.is_some() || !self.stream.behind.is_empty() {
            ready!(self.poll_flush_inner(cx))?;
        }
        if out.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            let s = &mut self.stream;
            if let Some((b, start, end)) = &mut s.cur {
                if *start < *end {
                    let n = out.len().min(*end - *start);
                    out[..n].copy_from_slice(&b[*start..*start + n]);
                    *start += n;
                    s.pos += n as u64;
                    return Poll::Ready(Ok(n));
                }
                let (b, _, _) = s.cur.take().expect("checked above");
                s.spare.push(b);
            }
            while s.ahead.len() < s.depth && s.eof_at.map_or(true, |e| s.next < e) {
                let buf = s.buffer();
                let mut f = self.handle.read_into(&self.engine, buf, 0, s.next);
                f.set_waker(cx.waker());
                f.start();
                s.ahead.push_back((s.next, f));
                s.next += s.block as u64;
            }
            let Some((off, f)) = s.ahead.front_mut() else {
                return Poll::Ready(Ok(0));
            };
            let off = *off;
            let (res, b) = match Pin::new(f).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            };
            s.ahead.pop_front();
            let n = match res {
                Ok(n) => n,
                Err(e) => {
                    s.spare.push(b);
                    s.reset_reads();
                    return Poll::Ready(Err(e));
                }
            };
            if n < s.block {
                s.eof_at = Some(off + n as u64);
            }
            let skip = s.pos.saturating_sub(off) as usize;
            if n == 0 || skip >= n {
                s.spare.push(b);
                if s.eof_at.is_some_and(|e| s.pos >= e) {
                    s.ahead.clear();
                    return Poll::Ready(Ok(0));
                }
                continue;
            }
            s.cur = Some((b, skip, n));
        }
    }

    fn poll_write_inner(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.stream.cur.is_some() || !self.stream.ahead.is_empty() {
            self.stream.reset_reads();
        }
        // Bound the write-behind before accepting more.
        while self.stream.behind.len() >= self.stream.depth {
            ready!(self.poll_oldest_write(cx))?;
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let s = &mut self.stream;
        if s.wbuf.is_none() {
            let b = s.buffer();
            s.wbuf = Some((b, 0, s.pos));
        }
        let (b, len, _) = s.wbuf.as_mut().expect("set above");
        let n = data.len().min(s.block - *len);
        b[*len..*len + n].copy_from_slice(&data[..n]);
        *len += n;
        s.pos += n as u64;
        if *len == s.block {
            self.issue_write(cx);
        }
        Poll::Ready(Ok(n))
    }

    fn issue_write(&mut self, cx: &mut Context<'_>) {
        if let Some((b, len, off)) = self.stream.wbuf.take() {
            let mut b = b;
            if len < b.len() {
                // A partial block: write only what was filled.
                let mut part = AlignedBuf::new(len, self.stream.align.max(4096));
                part.copy_from_slice(&b[..len]);
                self.stream.spare.push(b);
                b = part;
            }
            let mut f = self.write_at(b, off);
            f.set_waker(cx.waker());
            f.start();
            self.stream.behind.push_back((off, len, f));
        }
    }

    fn poll_oldest_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some((off, len, f)) = self.stream.behind.front_mut() else {
            return Poll::Ready(Ok(()));
        };
        let (off, len) = (*off, *len);
        let (res, b) = match Pin::new(f).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r,
        };
        self.stream.behind.pop_front();
        if b.len() == self.stream.block {
            self.stream.spare.push(b);
        }
        match res {
            Ok(n) if n == len => Poll::Ready(Ok(())),
            Ok(n) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write at offset {off}: {n} of {len} bytes"),
            ))),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush_inner(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.stream.wbuf.is_some() {
            self.issue_write(cx);
        }
        while !self.stream.behind.is_empty() {
            match self.poll_oldest_write(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => {
                    self.stream.behind.clear();
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Flushes pending writes, then moves the cursor.
    fn poll_seek_inner(&mut self, cx: &mut Context<'_>, pos: SeekFrom) -> Poll<io::Result<u64>> {
        ready!(self.poll_flush_inner(cx))?;
        Poll::Ready(self.seek_inner(pos))
    }

    fn seek_inner(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(d) => self.stream.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.handle.file.metadata()?.len().checked_add_signed(d),
        };
        let target = target.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("seek to {pos:?} from {} is out of range", self.stream.pos),
            )
        })?;
        if target != self.stream.pos {
            self.stream.pos = target;
            self.stream.reset_reads();
        }
        Ok(target)
    }
}

impl futures_io::AsyncRead for AsyncFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_read_inner(cx, buf)
    }
}

impl futures_io::AsyncWrite for AsyncFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_inner(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_inner(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_inner(cx)
    }
}

impl futures_io::AsyncSeek for AsyncFile {
    fn poll_seek(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        pos: SeekFrom,
    ) -> Poll<io::Result<u64>> {
        self.get_mut().poll_seek_inner(cx, pos)
    }
}

#[cfg(feature = "tokio")]
mod tokio_io {
    use super::*;
    use tokio::io::ReadBuf;

    impl tokio::io::AsyncRead for AsyncFile {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = ready!(self
                .get_mut()
                .poll_read_inner(cx, buf.initialize_unfilled()))?;
            buf.advance(n);
            Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncWrite for AsyncFile {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().poll_write_inner(cx, buf)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().poll_flush_inner(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().poll_flush_inner(cx)
        }
    }

    impl tokio::io::AsyncSeek for AsyncFile {
        fn start_seek(self: Pin<&mut Self>, pos: SeekFrom) -> io::Result<()> {
            self.get_mut().stream.pending_seek = Some(pos);
            Ok(())
        }
        fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
            let this = self.get_mut();
            match this.stream.pending_seek {
                Some(pos) => {
                    let r = ready!(this.poll_seek_inner(cx, pos));
                    this.stream.pending_seek = None;
                    Poll::Ready(r)
                }
                None => Poll::Ready(Ok(this.stream.pos)),
            }
        }
    }
}
