//! `AsyncFile`: positional and streaming file I/O on the async driver.
//!
//! * this module: the file and its handle, which keeps the descriptor open
//!   while operations are in flight;
//! * `options`: [`AsyncOpenOptions`];
//! * `positional`: operations at explicit offsets with owned buffers;
//! * `batch`: [`AsyncFile::submit`]'s future over several operations;
//! * `stream`: the cursor with read-ahead and write-behind;
//! * `adapters`: the `futures::io` (and, with the `tokio` feature, tokio)
//!   traits over the stream.

mod adapters;
mod batch;
mod inline;
mod options;
mod positional;
mod stream;

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

pub use batch::{BatchFuture, BatchOp};
pub use options::{AsyncOpenOptions, MAX_STREAM_BLOCK_SIZE, MAX_STREAM_BYTES, MAX_STREAM_DEPTH};

use super::buf::IoBufMut;
use super::driven::Admission;
use super::op::{Abandoned, Inline, Keep, KeptReads, OpFuture};
use super::AsyncEngine;
use crate::direct::Alignment;
use crate::error::PathError;
use crate::kind::OpKind;
use crate::op::action::{Action, ReadArgs};
use crate::op::Op;
use crate::ReadPath;
use inline::InlineReads;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use stream::Stream;

/// The open file, shared with every operation in flight on it so that the
/// descriptor stays open until the last one completes.
struct Handle {
    file: std::mem::ManuallyDrop<File>,
    direct: Option<Alignment>,
    /// Whether dropping the handle closes the descriptor (not for
    /// [`AsyncFile::from_raw_fd`]).
    owned: bool,
    /// Reads tried on the polling thread first.
    inline_reads: InlineReads,
    /// Reads of a stream file (a pipe, FIFO or character device) whose
    /// futures were dropped before their bytes were taken: the next read
    /// takes those bytes first.
    dropped: KeptReads,
    /// Whether a dropped read was ever kept in `dropped` (until then, a
    /// read looks no further).
    any_dropped: AtomicBool,
    /// Cleared when the `AsyncFile` goes: no dropped read is kept after,
    /// nobody being left to take its bytes.
    open: AtomicBool,
    /// Whether the file is a stream (see [`Handle::is_stream`]) once
    /// asked: [`STREAM`] or [`NOT_STREAM`], 0 before. (One byte, beside
    /// the flags: a larger field moved `dropped` in the handle, and a
    /// cached read with a dropped read kept paid an instruction more to
    /// reach it.)
    stream: AtomicU8,
}

/// [`Handle::stream`]: the file is a stream.
const STREAM: u8 = 1;
/// [`Handle::stream`]: the file is not a stream.
const NOT_STREAM: u8 = 2;

/// A file's reads are tried on the polling thread first (see `inline`);
/// nothing else is.
impl Keep for Handle {
    #[inline]
    fn inline(&self, op: &Op<'_>) -> Option<&dyn Inline> {
        let read = matches!(op.action, Action::Read(_) | Action::ReadVectored(_));
        read.then_some(&self.inline_reads as &dyn Inline)
    }

    fn keep_dropped_read(&self, read: Arc<dyn Abandoned>, armed: Box<dyn Send>) -> bool {
        if !self.open.load(Ordering::SeqCst) {
            return false;
        }
        self.dropped.side.detach(read, Some(armed));
        self.any_dropped.store(true, Ordering::SeqCst);
        // The file went meanwhile: nobody takes the read's bytes.
        if !self.open.load(Ordering::SeqCst) {
            self.dropped.side.forget();
        }
        true
    }

    #[inline]
    fn dropped_reads(&self) -> Option<&KeptReads> {
        self.any_dropped
            .load(Ordering::Acquire)
            .then_some(&self.dropped)
    }
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
    /// The handle of `file`, on `engine`.
    fn new(engine: &AsyncEngine, file: File, direct: Option<Alignment>, owned: bool) -> Arc<Self> {
        let inline = engine.read_path() == ReadPath::Auto;
        Arc::new(Handle {
            file: std::mem::ManuallyDrop::new(file),
            direct,
            owned,
            inline_reads: InlineReads::new(inline, direct.is_some()),
            dropped: KeptReads::default(),
            any_dropped: AtomicBool::new(false),
            open: AtomicBool::new(true),
            stream: AtomicU8::new(0),
        })
    }

    /// Whether the file is a stream without offsets whose reads may wait
    /// forever (a pipe, FIFO, socket or character device; see
    /// `may_wait_forever`): asked of the kernel once (what a descriptor
    /// is never changes).
    fn is_stream(&self) -> bool {
        match self.stream.load(Ordering::Relaxed) {
            STREAM => true,
            NOT_STREAM => false,
            _ => {
                let stream = super::op::may_wait_forever(self.file.as_raw_fd());
                let known = if stream { STREAM } else { NOT_STREAM };
                self.stream.store(known, Ordering::Relaxed);
                stream
            }
        }
    }

    /// Gives back to this stream file, for its next read, what reads of
    /// it took that nobody received (the finished reads of a dropped
    /// batch): `bytes`, then `error` or, with `ended`, the end of the
    /// stream, all before anything the file keeps. Nothing once the
    /// `AsyncFile` is gone.
    fn give_back(&self, bytes: &[u8], error: Option<i32>, ended: bool) {
        if bytes.is_empty() && error.is_none() && !ended {
            return;
        }
        if !self.open.load(Ordering::SeqCst) {
            return;
        }
        self.dropped.side.give_back(bytes, error, ended);
        self.any_dropped.store(true, Ordering::SeqCst);
        super::op::note_dropped_read_kept();
        // The file went meanwhile: nobody takes the bytes.
        if !self.open.load(Ordering::SeqCst) {
            self.dropped.side.forget();
        }
    }

    /// `action` on this file, over memory owned by `buf` and `iovecs`,
    /// which go into the future with a handle that keeps the file open
    /// until the operation completes.
    ///
    /// # Safety
    /// The pointers of `action` must point only into memory owned by `buf`
    /// or `iovecs`, valid as `Op::from_action` requires.
    #[inline]
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
            OpFuture::new(Admission::new(engine), op, buf, iovecs, self.clone())
        }
    }

    /// Reads into `buf[start..]` at `offset`.
    #[inline]
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
            let read = ReadArgs {
                buf: ptr,
                len,
                offset,
            };
            self.op(engine, Action::Read(read), buf, Vec::new())
        }
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
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open(&engine, &path)?;
    /// let (n, buf) = file.read_at(vec![0u8; 5], 0).await;
    /// assert_eq!(&buf[..n?], b"hello");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn open(engine: &AsyncEngine, path: impl AsRef<Path>) -> io::Result<AsyncFile> {
        Self::open_with(engine, path, &AsyncOpenOptions::new())
    }

    /// Creates (or truncates) `path` for writing and reading.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::create(&engine, &path)?;
    /// file.write_all_at(b"hello".to_vec(), 0).await.0?;
    /// assert_eq!(std::fs::read(&path)?, b"hello");
    /// # Ok(())
    /// # })
    /// # }
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// use blockio::aio::{AsyncEngine, AsyncFile};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::from_file(&engine, tempfile::tempfile()?);
    /// file.write_all_at(b"hello".to_vec(), 0).await.0?;
    /// assert_eq!(file.file().metadata()?.len(), 5);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn from_file(engine: &AsyncEngine, file: File) -> AsyncFile {
        let o = AsyncOpenOptions::new();
        AsyncFile {
            engine: engine.clone(),
            handle: Handle::new(engine, file, None, true),
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
            handle: Handle::new(
                engine,
                // SAFETY: never closed (owned: false); the caller keeps it open.
                unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) },
                None,
                false,
            ),
            stream: Stream::new(o.block_size, o.depth, 1),
        }
    }

    /// Opens `path` with `options`.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let options = AsyncOpenOptions::new().write(true).create(true).block_size(1 << 20);
    /// let file = AsyncFile::open_with(&engine, &path, &options)?;
    /// file.write_all_at(vec![1u8; 4096], 0).await.0?;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn open_with(
        engine: &AsyncEngine,
        path: impl AsRef<Path>,
        options: &AsyncOpenOptions,
    ) -> io::Result<AsyncFile> {
        let path = path.as_ref();
        // Before opening, so that refused options create nothing.
        options
            .check_stream(None)
            .map_err(|e| PathError::wrap(OpKind::Open.name(), path, e))?;
        let (file, direct) = if options.direct {
            let d = crate::DirectFile::open_with(path, &options.options)?;
            let a = d.alignment();
            (d.into_file(), Some(a))
        } else {
            let f = options
                .options
                .open(path)
                .map_err(|e| PathError::wrap(OpKind::Open.name(), path, e))?;
            (f, None)
        };
        let align = direct.map_or(1, |a| a.max());
        let block = options
            .block_size
            .div_ceil(align)
            .checked_mul(align)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: block_size {} rounded up to the alignment {align} overflows",
                        path.display(),
                        options.block_size
                    ),
                )
            })?;
        options
            .check_stream(Some(block))
            .map_err(|e| PathError::wrap(OpKind::Open.name(), path, e))?;
        Ok(AsyncFile {
            engine: engine.clone(),
            handle: Handle::new(engine, file, direct, true),
            stream: Stream::new(block, options.depth, align),
        })
    }

    /// The alignment direct I/O on this file needs (None if buffered).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # futures::executor::block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let buffered = AsyncFile::create(&engine, &path)?;
    /// assert!(buffered.direct_alignment().is_none());
    /// let direct = AsyncOpenOptions::new().write(true).direct(true);
    /// match AsyncFile::open_with(&engine, &path, &direct) {
    ///     Ok(file) => assert!(file.direct_alignment().is_some()),
    ///     // Some file systems (tmpfs) refuse O_DIRECT.
    ///     Err(e) => println!("no O_DIRECT here: {e}"),
    /// }
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn direct_alignment(&self) -> Option<Alignment> {
        self.handle.direct
    }

    /// The underlying file (for metadata and the like).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    /// # let engine = blockio::aio::AsyncEngine::new()?;
    /// # let file = blockio::aio::AsyncFile::open(&engine, &path)?;
    ///
    /// assert_eq!(file.file().metadata()?.len(), 14);
    /// # Ok(())
    /// # }
    /// ```
    pub fn file(&self) -> &File {
        &self.handle.file
    }
}
