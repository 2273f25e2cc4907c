//! Operations: what a batch is made of.
//!
//! An [`Op`] borrows its file and its buffer for as long as it exists, and
//! [`Engine::submit`](crate::Engine::submit) takes the batch by `&mut` and
//! returns only after every operation in it has completed. So the borrow
//! checker itself guarantees that no buffer is freed, moved or reused while
//! the kernel may still write into it.

use std::fmt;
use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::direct::{Alignment, DirectFile};
use crate::error::OpError;

/// The most bytes one read or write may ask for (the kernel's MAX_RW_COUNT);
/// larger requests are clamped and come back short, as with `pread`.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Positional read into one buffer (`pread`).
    Read,
    /// Positional write from one buffer (`pwrite`).
    Write,
    /// Positional read into several buffers (`preadv`).
    ReadVectored,
    /// Positional write from several buffers (`pwritev`).
    WriteVectored,
    /// Flush data and metadata (`fsync`).
    Fsync,
    /// Flush data and the metadata needed to read it (`fdatasync`).
    Fdatasync,
    /// Open a file (`openat`); the result is the new descriptor. Issued
    /// through [`Engine::open_batch`](crate::Engine::open_batch).
    Open,
    /// Read a file's metadata (`statx`). Issued through
    /// [`Engine::stat_batch`](crate::Engine::stat_batch).
    Stat,
    /// Close a descriptor (`close`). Issued through
    /// [`Engine::close_batch`](crate::Engine::close_batch).
    Close,
    /// Make a directory (`mkdirat`). Issued through
    /// [`Engine::mkdir_batch`](crate::Engine::mkdir_batch).
    Mkdir,
    /// Make a symbolic link (`symlinkat`). Issued through
    /// [`Engine::symlink_batch`](crate::Engine::symlink_batch).
    Symlink,
}

impl OpKind {
    /// Whether this is a metadata operation (open, stat, close, mkdir,
    /// symlink) rather than a read, write or sync of a file's data.
    pub fn is_metadata(self) -> bool {
        matches!(
            self,
            OpKind::Open | OpKind::Stat | OpKind::Close | OpKind::Mkdir | OpKind::Symlink
        )
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::ReadVectored => "vectored read",
            OpKind::WriteVectored => "vectored write",
            OpKind::Fsync => "fsync",
            OpKind::Fdatasync => "fdatasync",
            OpKind::Open => "open",
            OpKind::Stat => "statx",
            OpKind::Close => "close",
            OpKind::Mkdir => "mkdir",
            OpKind::Symlink => "symlink",
        })
    }
}

/// Something an operation can be issued on: an open file descriptor, and
/// whether it was opened for direct I/O.
pub trait Target {
    /// The raw descriptor.
    fn raw_fd(&self) -> RawFd;
    /// The alignment direct I/O on this file needs, if it was opened with
    /// `O_DIRECT` through [`DirectFile`]. Operations on such a target are
    /// checked before submission.
    fn direct_alignment(&self) -> Option<Alignment> {
        None
    }
    /// Whether the file's device has poll queues (used by IOPOLL engines).
    fn supports_polling(&self) -> bool {
        false
    }
}

impl Target for File {
    fn raw_fd(&self) -> RawFd {
        self.as_raw_fd()
    }
}

impl Target for OwnedFd {
    fn raw_fd(&self) -> RawFd {
        self.as_raw_fd()
    }
}

impl Target for BorrowedFd<'_> {
    fn raw_fd(&self) -> RawFd {
        self.as_raw_fd()
    }
}

impl Target for DirectFile {
    fn raw_fd(&self) -> RawFd {
        self.as_raw_fd()
    }
    fn direct_alignment(&self) -> Option<Alignment> {
        Some(self.alignment())
    }
    fn supports_polling(&self) -> bool {
        DirectFile::supports_polling(self)
    }
}

/// A raw file descriptor number used as a target.
///
/// Safe to use: a descriptor that is closed or reused cannot make the kernel
/// touch memory outside the operation's buffer; the operation simply fails
/// with `EBADF` or acts on whatever file the number names now. Prefer
/// borrowing a [`File`] so that the file cannot be closed while in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawTarget(pub RawFd);

impl Target for RawTarget {
    fn raw_fd(&self) -> RawFd {
        self.0
    }
}

/// One I/O operation in a batch.
///
/// Built with [`Op::read`], [`Op::write`], [`Op::read_vectored`],
/// [`Op::write_vectored`], [`Op::fsync`] or [`Op::fdatasync`]. It borrows the
/// file and the buffers for `'a`.
pub struct Op<'a> {
    pub(crate) kind: OpKind,
    pub(crate) fd: RawFd,
    pub(crate) offset: u64,
    /// Buffer start, or the `iovec` array for vectored operations.
    pub(crate) ptr: *mut u8,
    /// Buffer length in bytes, or the number of `iovec`s; the flags of
    /// metadata operations (open and statx flags).
    pub(crate) len: usize,
    /// The second pointer of metadata operations: the `statx` buffer, or a
    /// symbolic link's target. Null otherwise.
    pub(crate) ptr2: *mut u8,
    pub(crate) direct: Option<Alignment>,
    pub(crate) polling: bool,
    /// Has its result already (refused before submission, or served from
    /// the page cache): the backend skips it.
    pub(crate) settled: bool,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: an `Op` is semantically a `&'a mut [u8]` (or `&'a [u8]`, or a slice
// of `IoSliceMut`) plus plain integers; all of those are `Send` and `Sync`.
unsafe impl Send for Op<'_> {}
// SAFETY: see above; shared access to an `Op` never writes through `ptr`.
unsafe impl Sync for Op<'_> {}

impl fmt::Debug for Op<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("kind", &self.kind)
            .field("fd", &self.fd)
            .field("offset", &self.offset)
            .field("len", &self.byte_len())
            .finish()
    }
}

impl<'a> Op<'a> {
    fn new<T: Target + ?Sized>(
        kind: OpKind,
        file: &'a T,
        offset: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Op<'a> {
        Op {
            kind,
            fd: file.raw_fd(),
            offset,
            ptr,
            len,
            ptr2: std::ptr::null_mut(),
            direct: file.direct_alignment(),
            polling: file.supports_polling(),
            settled: false,
            _borrow: PhantomData,
        }
    }

    /// An operation over memory that the caller keeps alive (and does not
    /// touch) until the operation has completed: the async API, which owns
    /// its buffers, builds its operations this way.
    ///
    /// # Safety
    /// `ptr` must be valid for `len` bytes (or `len` iovecs for vectored
    /// kinds, themselves valid) until the operation completes, and nothing
    /// else may access that memory meanwhile.
    pub(crate) unsafe fn from_raw(
        kind: OpKind,
        fd: RawFd,
        offset: u64,
        ptr: *mut u8,
        len: usize,
        direct: Option<Alignment>,
    ) -> Op<'static> {
        Op {
            kind,
            fd,
            offset,
            ptr,
            len,
            ptr2: std::ptr::null_mut(),
            direct,
            polling: false,
            settled: false,
            _borrow: PhantomData,
        }
    }

    /// Read up to `buf.len()` bytes at `offset`. The result is the number of
    /// bytes read, short at end of file.
    pub fn read<T: Target + ?Sized>(file: &'a T, offset: u64, buf: &'a mut [u8]) -> Op<'a> {
        Op::new(OpKind::Read, file, offset, buf.as_mut_ptr(), buf.len())
    }

    /// [`Op::read`] into memory that need not be initialised, to skip
    /// zeroing a buffer the read will overwrite anyway. After a result of
    /// `Ok(n)`, the first `n` bytes of `buf` are initialised (nothing else
    /// is written; the kernel and the fallback only ever write through the
    /// pointer).
    pub fn read_uninit<T: Target + ?Sized>(
        file: &'a T,
        offset: u64,
        buf: &'a mut [std::mem::MaybeUninit<u8>],
    ) -> Op<'a> {
        Op::new(
            OpKind::Read,
            file,
            offset,
            buf.as_mut_ptr().cast::<u8>(),
            buf.len(),
        )
    }

    /// Write `buf` at `offset`. The result is the number of bytes written.
    pub fn write<T: Target + ?Sized>(file: &'a T, offset: u64, buf: &'a [u8]) -> Op<'a> {
        // The kernel only reads through this pointer.
        Op::new(
            OpKind::Write,
            file,
            offset,
            buf.as_ptr() as *mut u8,
            buf.len(),
        )
    }

    /// Read into several buffers in order, starting at `offset`.
    pub fn read_vectored<T: Target + ?Sized>(
        file: &'a T,
        offset: u64,
        bufs: &'a mut [IoSliceMut<'a>],
    ) -> Op<'a> {
        // `IoSliceMut` is documented to be ABI compatible with `iovec`.
        Op::new(
            OpKind::ReadVectored,
            file,
            offset,
            bufs.as_mut_ptr().cast(),
            bufs.len(),
        )
    }

    /// Write several buffers in order, starting at `offset`.
    pub fn write_vectored<T: Target + ?Sized>(
        file: &'a T,
        offset: u64,
        bufs: &'a [IoSlice<'a>],
    ) -> Op<'a> {
        // `IoSlice` is documented to be ABI compatible with `iovec`.
        Op::new(
            OpKind::WriteVectored,
            file,
            offset,
            bufs.as_ptr() as *mut u8,
            bufs.len(),
        )
    }

    /// Flush the file's data and metadata to stable storage. The result is 0.
    pub fn fsync<T: Target + ?Sized>(file: &'a T) -> Op<'a> {
        Op::new(OpKind::Fsync, file, 0, std::ptr::null_mut(), 0)
    }

    /// Flush the file's data (and only the metadata needed to read it back).
    pub fn fdatasync<T: Target + ?Sized>(file: &'a T) -> Op<'a> {
        Op::new(OpKind::Fdatasync, file, 0, std::ptr::null_mut(), 0)
    }

    /// A metadata operation. For open and mkdir `offset` carries the mode,
    /// for statx the mask; `len` carries the flags. `path` and `ptr2` are
    /// borrowed for `'a`, which the public constructors in `meta` enforce.
    pub(crate) fn metadata(
        kind: OpKind,
        dir: RawFd,
        path: *const u8,
        ptr2: *mut u8,
        flags: usize,
        extra: u64,
    ) -> Op<'a> {
        Op {
            kind,
            fd: dir,
            offset: extra,
            ptr: path as *mut u8,
            len: flags,
            ptr2,
            direct: None,
            polling: false,
            settled: false,
            _borrow: PhantomData,
        }
    }

    /// The kind of this operation.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// The file offset.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The raw descriptor this operation is issued on.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The iovecs of a vectored operation.
    pub(crate) fn iovecs(&self) -> &[libc::iovec] {
        match self.kind {
            // SAFETY: for vectored ops `ptr`/`len` come from a live slice of
            // `IoSlice(Mut)`, which is ABI compatible with `iovec`, borrowed for 'a.
            OpKind::ReadVectored | OpKind::WriteVectored if self.len > 0 => unsafe {
                std::slice::from_raw_parts(self.ptr as *const libc::iovec, self.len)
            },
            _ => &[],
        }
    }

    /// Number of bytes this operation asks for.
    pub fn byte_len(&self) -> usize {
        match self.kind {
            OpKind::Read | OpKind::Write => self.len,
            OpKind::ReadVectored | OpKind::WriteVectored => {
                self.iovecs().iter().map(|v| v.iov_len).sum()
            }
            _ => 0,
        }
    }

    /// Checks what can be checked before submission: the alignment of direct
    /// I/O. Returns the error to report in place of submitting.
    pub(crate) fn precheck(&self) -> Option<std::io::Error> {
        if self.kind.is_metadata() {
            return None;
        }
        if self.offset > i64::MAX as u64 {
            return Some(OpError::refused(
                self.kind,
                self.fd,
                self.offset,
                self.byte_len(),
                "the offset must be at most",
                i64::MAX as u64,
            ));
        }
        let align = self.direct?;
        let refuse = |detail, required| {
            Some(OpError::refused(
                self.kind,
                self.fd,
                self.offset,
                self.byte_len(),
                detail,
                required,
            ))
        };
        let off_align = align.offset as u64;
        let mem_align = align.memory as usize;
        if self.offset % off_align != 0 {
            return refuse("O_DIRECT: the offset must be a multiple of", off_align);
        }
        let check = |ptr: usize, len: usize| {
            if len % align.offset as usize != 0 {
                refuse("O_DIRECT: the length must be a multiple of", off_align)
            } else if ptr % mem_align != 0 {
                refuse(
                    "O_DIRECT: the buffer address must be a multiple of",
                    mem_align as u64,
                )
            } else {
                None
            }
        };
        match self.kind {
            OpKind::Read | OpKind::Write => check(self.ptr as usize, self.len),
            OpKind::ReadVectored | OpKind::WriteVectored => self
                .iovecs()
                .iter()
                .find_map(|v| check(v.iov_base as usize, v.iov_len)),
            _ => None,
        }
    }

    /// Turns a raw result (bytes, or `-errno`) into the op's result.
    pub(crate) fn result_from_raw(&self, res: i32) -> std::io::Result<usize> {
        if res >= 0 {
            Ok(res as usize)
        } else {
            Err(OpError::from_errno(
                self.kind,
                self.fd,
                self.offset,
                self.byte_len(),
                -res,
            ))
        }
    }
}

/// Empties a vector of operations and gives it back with a fresh lifetime,
/// keeping its capacity, so that a submit loop can reuse one allocation:
///
/// ```
/// # use blockio::{Engine, Op};
/// # fn main() -> std::io::Result<()> {
/// # let file = tempfile::tempfile()?;
/// # let engine = Engine::new()?;
/// let mut bufs = vec![vec![0u8; 512]; 8];
/// let mut store: Vec<Op<'static>> = Vec::with_capacity(8);
/// let mut results = Vec::with_capacity(8);
/// for round in 0..3u64 {
///     let mut ops = blockio::recycle(store);
///     ops.extend(bufs.iter_mut().map(|b| Op::read(&file, round * 512, b)));
///     engine.submit_into(&mut ops, &mut results)?;
///     store = blockio::recycle(ops); // no allocation in steady state
/// }
/// # Ok(()) }
/// ```
pub fn recycle<'b>(mut ops: Vec<Op<'_>>) -> Vec<Op<'b>> {
    ops.clear();
    let mut ops = std::mem::ManuallyDrop::new(ops);
    let (ptr, cap) = (ops.as_mut_ptr(), ops.capacity());
    // SAFETY: the vector is empty, so no `Op` (and no borrow) is carried
    // over; `Op<'a>` and `Op<'b>` differ only in a lifetime, so layout and
    // allocation are the same, and `ManuallyDrop` hands ownership over.
    unsafe { Vec::from_raw_parts(ptr.cast::<Op<'b>>(), 0, cap) }
}
