//! Options for opening an [`AsyncFile`](super::AsyncFile).

use std::fs::OpenOptions;

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
