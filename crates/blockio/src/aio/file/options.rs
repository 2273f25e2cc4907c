//! Options for opening an [`AsyncFile`](super::AsyncFile).

use std::fs::OpenOptions;

/// The largest [`AsyncOpenOptions::block_size`]: 1 GiB.
pub const MAX_STREAM_BLOCK_SIZE: usize = 1 << 30;
/// The largest [`AsyncOpenOptions::depth`].
pub const MAX_STREAM_DEPTH: usize = 1024;
/// The most memory streaming may hold in flight, `block_size * depth`
/// (after rounding the block up to a direct file's alignment): 4 GiB.
pub const MAX_STREAM_BYTES: usize = 4 << 30;

/// Options for [`AsyncFile::open_with`](super::AsyncFile::open_with).
#[derive(Debug, Clone)]
pub struct AsyncOpenOptions {
    pub(super) options: OpenOptions,
    pub(super) direct: bool,
    pub(super) block_size: usize,
    pub(super) depth: usize,
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
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new())?;
    /// # drop(file);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }
    /// Open for reading.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new().read(true).write(true))?;
    /// # drop(file);
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(mut self, on: bool) -> Self {
        self.options.read(on);
        self
    }
    /// Open for writing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new().write(true).create(true))?;
    /// # drop(file);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(mut self, on: bool) -> Self {
        self.options.write(on);
        self
    }
    /// Create the file if missing.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new().write(true).create(true))?;
    /// # drop(file);
    /// # Ok(())
    /// # }
    /// ```
    pub fn create(mut self, on: bool) -> Self {
        self.options.create(on);
        self
    }
    /// Truncate the file on opening.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new().write(true).truncate(true))?;
    /// # drop(file);
    /// # Ok(())
    /// # }
    /// ```
    pub fn truncate(mut self, on: bool) -> Self {
        self.options.truncate(on);
        self
    }
    /// Open with `O_DIRECT`: operations are checked against the file's
    /// alignment before submission, and streaming uses aligned blocks.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// match AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new().direct(true)) {
    ///     Ok(file) => assert!(file.direct_alignment().is_some()),
    ///     // Some file systems (tmpfs) refuse O_DIRECT.
    ///     Err(e) => println!("no O_DIRECT here: {e}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn direct(mut self, on: bool) -> Self {
        self.direct = on;
        self
    }
    /// Bytes per streaming read or write (default 128 KiB; rounded up to
    /// the alignment for direct files). At most [`MAX_STREAM_BLOCK_SIZE`],
    /// and `block_size * depth` at most [`MAX_STREAM_BYTES`]: opening with
    /// more fails with an error naming the argument.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions, MAX_STREAM_BLOCK_SIZE};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let big = AsyncOpenOptions::new().block_size(1 << 20);
    /// AsyncFile::open_with(&engine, &path, &big)?;
    /// // Too large: an error naming the argument.
    /// let too_big = AsyncOpenOptions::new().block_size(MAX_STREAM_BLOCK_SIZE + 1);
    /// let err = AsyncFile::open_with(&engine, &path, &too_big).unwrap_err();
    /// assert!(err.to_string().contains("block_size"), "{err}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn block_size(mut self, n: usize) -> Self {
        self.block_size = n.max(1);
        self
    }
    /// Streaming reads (or writes) kept in flight ahead of (or behind) the
    /// cursor (default 4). At most [`MAX_STREAM_DEPTH`]; see also
    /// [`block_size`](Self::block_size).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("data");
    /// # std::fs::write(&path, b"hello, blockio")?;
    ///
    /// use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions};
    ///
    /// let engine = AsyncEngine::new()?;
    /// let file = AsyncFile::open_with(&engine, &path, &AsyncOpenOptions::new().depth(16))?;
    /// # drop(file);
    /// # Ok(())
    /// # }
    /// ```
    pub fn depth(mut self, n: usize) -> Self {
        self.depth = n.max(1);
        self
    }
}

impl AsyncOpenOptions {
    /// Refuses a block size or depth past the limits (with `block`, the
    /// block size after rounding to the file's alignment), naming the
    /// argument.
    pub(super) fn check_stream(&self, block: Option<usize>) -> std::io::Result<()> {
        let invalid = |msg: String| {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("AsyncOpenOptions::{msg}"),
            ))
        };
        let (depth, block) = (self.depth, block.unwrap_or(self.block_size));
        if block > MAX_STREAM_BLOCK_SIZE {
            return invalid(format!(
                "block_size: {block} bytes; at most {MAX_STREAM_BLOCK_SIZE}"
            ));
        }
        if depth > MAX_STREAM_DEPTH {
            return invalid(format!("depth: {depth}; at most {MAX_STREAM_DEPTH}"));
        }
        if block
            .checked_mul(depth)
            .map_or(true, |n| n > MAX_STREAM_BYTES)
        {
            return invalid(format!(
                "block_size * depth: {block} * {depth} bytes in flight; at most {MAX_STREAM_BYTES}"
            ));
        }
        Ok(())
    }
}
