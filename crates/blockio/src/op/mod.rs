//! Operations: what a batch is made of.
//!
//! An [`Op`] borrows its file and its buffer for as long as it exists, and
//! [`Engine::submit`](crate::Engine::submit) takes the batch by `&mut` and
//! returns only after every operation in it has completed. So the borrow
//! checker itself guarantees that no buffer is freed, moved or reused while
//! the kernel may still write into it.

//!
//! What each kind of operation is and how it reaches the kernel is defined
//! once, in [`action`]; `Op` adds the descriptor, the borrow, and what the
//! engine learns about the file (direct-I/O alignment, polling).

pub(crate) mod action;
pub(crate) mod path;

use std::fmt;
use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::direct::{Alignment, DirectFile};
use crate::error::Site;
pub use crate::kind::OpKind;
use action::{
    Action, FallocateArgs, FtruncateArgs, ReadArgs, ReadVectoredArgs, Vectored, WriteArgs,
    WriteVectoredArgs,
};

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
    /// The registered-file slot operations on this target use: only a
    /// [`RegisteredFile`](crate::RegisteredFile) has one. Code outside the
    /// crate can neither call nor override this (it cannot name
    /// [`sealed::Token`]), so an operation built from any other target,
    /// [`RawTarget`] included, is issued on its own descriptor and never
    /// through a slot.
    #[doc(hidden)]
    fn registered_slot(&self, _: sealed::Token) -> Option<sealed::FixedSlot> {
        None
    }
}

/// Types only the crate can name (see [`Target::registered_slot`]).
pub(crate) mod sealed {
    /// Proof that a call comes from inside the crate.
    #[derive(Debug)]
    pub struct Token(pub(crate) ());

    /// A registered-file slot of one engine's rings.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct FixedSlot {
        /// The backend whose rings have the slot.
        pub(crate) owner: u64,
        /// The slot's index.
        pub(crate) slot: u32,
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
/// [`Op::write_vectored`], [`Op::fsync`], [`Op::fdatasync`] or
/// [`Op::ftruncate`]. It borrows the file and the buffers for `'a`.
/// [`Engine::submit`](crate::Engine::submit) performs a batch of them;
/// [`Op::run_blocking`] performs one on the calling thread.
pub struct Op<'a> {
    /// The descriptor: the file, or the directory a path is relative to.
    pub(crate) fd: RawFd,
    pub(crate) action: Action,
    pub(crate) direct: Option<Alignment>,
    pub(crate) polling: bool,
    /// The registered-file slot of the target, when the target is a
    /// [`RegisteredFile`](crate::RegisteredFile): borrowed for `'a` like
    /// the target, so the slot names that file for the operation's life.
    pub(crate) fixed: Option<sealed::FixedSlot>,
    /// Has its result already (refused before submission, or served from
    /// the page cache): the backend skips it.
    pub(crate) settled: bool,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: an `Op` is semantically a `&'a mut [u8]` (or `&'a [u8]`, or a slice
// of `IoSliceMut`, or borrowed C strings) plus plain integers; all of those
// are `Send`.
unsafe impl Send for Op<'_> {}
// SAFETY: shared access to an `Op` does write through its pointers: the
// thread-pool backend shares a batch `&[Op]` with its workers, and
// `run_blocking_raw(&self)` reads into the op's buffer. That is sound
// because each operation is performed by exactly one thread (each index
// is taken once from an atomic counter, see `engine/threads.rs`), while the
// batch's `&mut` borrow keeps everyone else off the buffers; every other
// shared use (building a submission entry, checks, error descriptions)
// only reads the op's own fields.
unsafe impl Sync for Op<'_> {}

impl fmt::Debug for Op<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("kind", &self.kind())
            .field("fd", &self.fd)
            .field("offset", &self.offset())
            .field("len", &self.byte_len())
            .finish()
    }
}

impl<'a> Op<'a> {
    fn on<T: Target + ?Sized>(file: &'a T, action: Action) -> Op<'a> {
        Op {
            fd: file.raw_fd(),
            action,
            direct: file.direct_alignment(),
            polling: file.supports_polling(),
            fixed: file.registered_slot(sealed::Token(())),
            settled: false,
            _borrow: PhantomData,
        }
    }

    /// An operation whose pointers the caller keeps valid by other means
    /// than a borrow: the async API, which owns its buffers, and the
    /// metadata batches, which borrow their paths for the whole call.
    ///
    /// # Safety
    /// The pointers in `action` must be valid (buffers for their lengths,
    /// iovec arrays and the buffers they describe, NUL-terminated paths)
    /// until the operation completes, and nothing else may access that
    /// memory meanwhile.
    pub(crate) unsafe fn from_action(
        fd: RawFd,
        action: Action,
        direct: Option<Alignment>,
    ) -> Op<'a> {
        Op {
            fd,
            action,
            direct,
            polling: false,
            fixed: None,
            settled: false,
            _borrow: PhantomData,
        }
    }

    /// Read up to `buf.len()` bytes at `offset`. The result is the number of
    /// bytes read, short at end of file.
    pub fn read<T: Target + ?Sized>(file: &'a T, offset: u64, buf: &'a mut [u8]) -> Op<'a> {
        let (buf, len) = (buf.as_mut_ptr(), buf.len());
        Op::on(file, Action::Read(ReadArgs { buf, len, offset }))
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
        let (buf, len) = (buf.as_mut_ptr().cast::<u8>(), buf.len());
        Op::on(file, Action::Read(ReadArgs { buf, len, offset }))
    }

    /// Write `buf` at `offset`. The result is the number of bytes written.
    pub fn write<T: Target + ?Sized>(file: &'a T, offset: u64, buf: &'a [u8]) -> Op<'a> {
        let (buf, len) = (buf.as_ptr(), buf.len());
        Op::on(file, Action::Write(WriteArgs { buf, len, offset }))
    }

    /// Read into several buffers in order, starting at `offset`.
    pub fn read_vectored<T: Target + ?Sized>(
        file: &'a T,
        offset: u64,
        bufs: &'a mut [IoSliceMut<'a>],
    ) -> Op<'a> {
        // `IoSliceMut` is documented to be ABI compatible with `iovec`.
        let v = Vectored {
            iovecs: bufs.as_mut_ptr().cast_const().cast(),
            count: bufs.len(),
            offset,
        };
        Op::on(file, Action::ReadVectored(ReadVectoredArgs(v)))
    }

    /// Write several buffers in order, starting at `offset`.
    pub fn write_vectored<T: Target + ?Sized>(
        file: &'a T,
        offset: u64,
        bufs: &'a [IoSlice<'a>],
    ) -> Op<'a> {
        // `IoSlice` is documented to be ABI compatible with `iovec`.
        let v = Vectored {
            iovecs: bufs.as_ptr().cast(),
            count: bufs.len(),
            offset,
        };
        Op::on(file, Action::WriteVectored(WriteVectoredArgs(v)))
    }

    /// Flush the file's data and metadata to stable storage. The result is 0.
    pub fn fsync<T: Target + ?Sized>(file: &'a T) -> Op<'a> {
        Op::on(file, Action::flush(false))
    }

    /// Flush the file's data (and only the metadata needed to read it back).
    pub fn fdatasync<T: Target + ?Sized>(file: &'a T) -> Op<'a> {
        Op::on(file, Action::flush(true))
    }

    /// Allocate, deallocate or zero `len` bytes of the file's storage from
    /// `offset` (`fallocate`). `mode` holds `fallocate(2)`'s `FALLOC_FL_*`
    /// flags (`libc::FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE`, ...):
    /// 0 allocates the range, growing the file if it ends past the end.
    /// The result is 0. The kernel checks the mode and the range (an
    /// offset or length past `i64::MAX`, or a mode the file system does
    /// not support, fails with its error); no `O_DIRECT` alignment is
    /// asked for, and [`Op::offset`] is 0, as for an fsync: no data moves.
    ///
    /// ```
    /// # use blockio::{Engine, Op};
    /// # fn main() -> std::io::Result<()> {
    /// let file = tempfile::tempfile()?;
    /// let engine = Engine::new()?;
    /// engine.submit(&mut [Op::fallocate(&file, 0, 0, 8192)])?.remove(0)?;
    /// assert_eq!(file.metadata()?.len(), 8192);
    /// # Ok(()) }
    /// ```
    pub fn fallocate<T: Target + ?Sized>(file: &'a T, mode: i32, offset: u64, len: u64) -> Op<'a> {
        Op::on(file, Action::Fallocate(FallocateArgs { mode, offset, len }))
    }

    /// Set the file's length to `len`: cut it, or extend it with a hole
    /// that reads as zeroes (`ftruncate`). The result is 0. A length past
    /// `i64::MAX` fails with `EINVAL`. On a kernel whose ring lacks the
    /// opcode (before Linux 6.9, see
    /// [`ProbeReport::ftruncate`](crate::ProbeReport::ftruncate)) the
    /// engine performs it with the system call on the submitting thread.
    ///
    /// ```
    /// # use blockio::{Engine, Op};
    /// # fn main() -> std::io::Result<()> {
    /// let file = tempfile::tempfile()?;
    /// let engine = Engine::new()?;
    /// engine.submit(&mut [Op::ftruncate(&file, 8192)])?.remove(0)?;
    /// assert_eq!(file.metadata()?.len(), 8192);
    /// # Ok(()) }
    /// ```
    pub fn ftruncate<T: Target + ?Sized>(file: &'a T, len: u64) -> Op<'a> {
        Op::on(file, Action::Ftruncate(FtruncateArgs { len }))
    }

    /// The kind of this operation.
    pub fn kind(&self) -> OpKind {
        self.action.kind()
    }

    /// The file offset (0 for fsyncs, `fallocate` and metadata operations).
    pub fn offset(&self) -> u64 {
        self.action.offset()
    }

    /// The raw descriptor this operation is issued on.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Number of bytes this operation asks for.
    pub fn byte_len(&self) -> usize {
        self.action.span().1
    }

    /// Where this operation acts, for its errors.
    pub(crate) fn site(&self) -> Site {
        let (offset, len) = self.action.span();
        Site {
            kind: self.kind(),
            fd: self.fd,
            offset,
            len,
        }
    }

    /// Checks what can be checked before submission: the offset's range and
    /// the alignment of direct I/O. Returns the error to report in place of
    /// submitting.
    ///
    /// Runs for every operation of every batch, so the rules are folded
    /// into one test of plain bit operations (no division, no branch per
    /// rule); which rule failed, and the message naming it, is worked out
    /// only for a refusal.
    #[inline]
    pub(crate) fn precheck(&self) -> Option<std::io::Error> {
        let offset = self.action.offset();
        let fits = offset <= i64::MAX as u64
            && match self.direct {
                None => true,
                Some(align) => self.kind().is_metadata() || align.admits(offset, &self.action),
            };
        if fits {
            None
        } else {
            self.refusal()
        }
    }

    /// The error [`precheck`](Self::precheck) reports: the first rule the
    /// operation breaks, named.
    #[cold]
    #[inline(never)]
    fn refusal(&self) -> Option<std::io::Error> {
        if self.kind().is_metadata() {
            return None;
        }
        let refuse = |rule, bound| Some(self.site().refuse(rule, bound));
        let offset = self.offset();
        if offset > i64::MAX as u64 {
            return refuse("the offset must be at most", i64::MAX as u64);
        }
        let align = self.direct?;
        // A `Target` is user code: its alignment is checked before it is
        // divided by.
        if let Err(e) = align.check() {
            let site = self.site();
            return Some(std::io::Error::new(
                e.kind(),
                format!("{} on fd {}: the target's {e}", site.kind, site.fd),
            ));
        }
        let (off_align, mem_align) = (u64::from(align.offset), u64::from(align.memory));
        if offset % off_align != 0 {
            return refuse("O_DIRECT: the offset must be a multiple of", off_align);
        }
        self.action.segments().as_slice().iter().find_map(|v| {
            if v.iov_len as u64 % off_align != 0 {
                refuse("O_DIRECT: the length must be a multiple of", off_align)
            } else if v.iov_base as u64 % mem_align != 0 {
                refuse(
                    "O_DIRECT: the buffer address must be a multiple of",
                    mem_align,
                )
            } else {
                None
            }
        })
    }

    /// Performs the operation with blocking system calls on this thread;
    /// the result as io_uring reports it (a count, or `-errno`).
    pub(crate) fn run_blocking_raw(&self) -> i32 {
        // SAFETY: the op's pointers are valid for its lifetime (its borrow,
        // or the promise of `from_action`), and we are inside it.
        unsafe { self.action.call_raw(self.fd) }
    }

    /// Performs a receive or a send without waiting (`MSG_DONTWAIT`) on
    /// this thread: the result as [`run_blocking_raw`](Self::run_blocking_raw)'s,
    /// `-EAGAIN` where the socket is not ready; `None` for other kinds.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn run_nowait_raw(&self) -> Option<i32> {
        // SAFETY: as in `run_blocking_raw`.
        unsafe { self.action.call_nowait_raw(self.fd) }
    }

    /// Performs the operation with its blocking system call on the
    /// calling thread, and returns what [`Engine::submit`](crate::Engine::submit)
    /// would return for it: the same checks before the call (offset range,
    /// direct-I/O alignment), the same count, the same error.
    ///
    /// For one call on a thread that may wait anyway (a worker of your
    /// own, a thread that only runs this): a ring round trip for a batch of
    /// one costs a submission and a completion for a single system call,
    /// and a batch shared with other work would make that work wait for
    /// this call. For many operations at once, submit them as a batch.
    /// Kinds that exist only on a ring (multishot accept, receive into a
    /// provided buffer) fail with `EOPNOTSUPP`.
    ///
    /// ```
    /// # use blockio::Op;
    /// # fn main() -> std::io::Result<()> {
    /// let file = tempfile::tempfile()?;
    /// assert_eq!(Op::write(&file, 0, b"hello").run_blocking()?, 5);
    /// Op::ftruncate(&file, 4).run_blocking()?;
    /// let mut buf = [0u8; 8];
    /// assert_eq!(Op::read(&file, 0, &mut buf).run_blocking()?, 4);
    /// assert_eq!(&buf[..4], b"hell");
    /// # Ok(()) }
    /// ```
    pub fn run_blocking(&self) -> std::io::Result<usize> {
        match self.precheck() {
            Some(refused) => Err(refused),
            None => self.run_checked(),
        }
    }

    /// [`Op::run_blocking`] for an operation whose checks before
    /// submission have passed (the engine's backends, which run them once
    /// per batch).
    pub(crate) fn run_checked(&self) -> std::io::Result<usize> {
        self.result(self.run_blocking_raw())
    }

    /// The operation's result from a raw one (a count, or `-errno`). Where
    /// the operation acts is worked out only for an error: a success, the
    /// common case on every completion, costs a comparison.
    pub(crate) fn result(&self, raw: i32) -> std::io::Result<usize> {
        match usize::try_from(raw) {
            Ok(n) => Ok(n),
            Err(_) => self.site().result(raw),
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
///     let mut ops = blockio::clear_ops(store);
///     ops.extend(bufs.iter_mut().map(|b| Op::read(&file, round * 512, b)));
///     engine.submit_into(&mut ops, &mut results)?;
///     store = blockio::clear_ops(ops); // no allocation in steady state
/// }
/// # Ok(()) }
/// ```
pub fn clear_ops<'b>(mut ops: Vec<Op<'_>>) -> Vec<Op<'b>> {
    ops.clear();
    let mut ops = std::mem::ManuallyDrop::new(ops);
    let (ptr, cap) = (ops.as_mut_ptr(), ops.capacity());
    // SAFETY: the vector is empty, so no `Op` (and no borrow) is carried
    // over; `Op<'a>` and `Op<'b>` differ only in a lifetime, so layout and
    // allocation are the same, and `ManuallyDrop` hands ownership over.
    unsafe { Vec::from_raw_parts(ptr.cast::<Op<'b>>(), 0, cap) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation that is only checked, never performed.
    fn unperformed(action: Action, direct: Option<Alignment>) -> Op<'static> {
        // SAFETY: the op is only checked (`precheck` and `refusal` read
        // its fields and never dereference its pointers); it is never
        // submitted.
        unsafe { Op::from_action(3, action, direct) }
    }

    /// The one-test check before submission refuses exactly what the
    /// rule-by-rule description finds broken, for valid and invalid
    /// alignments, single and vectored buffers.
    #[test]
    fn the_folded_check_refuses_exactly_what_a_rule_breaks() {
        let sizes = [0u32, 1, 3, 512, 768, 4096];
        let places = [0u64, 1, 511, 512, 4096, 4097, i64::MAX as u64, u64::MAX];
        let mut iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let mut checked = 0;
        for (&memory, &offset_align) in sizes.iter().flat_map(|m| sizes.iter().map(move |o| (m, o)))
        {
            let align = Alignment {
                memory,
                offset: offset_align,
            };
            for &offset in &places {
                for &addr in &places[..6] {
                    for &len in &places[..6] {
                        let len = len as usize;
                        let buf = addr as *mut u8;
                        iovecs[0] = libc::iovec {
                            iov_base: 4096 as *mut libc::c_void,
                            iov_len: 4096,
                        };
                        iovecs[1] = libc::iovec {
                            iov_base: buf.cast(),
                            iov_len: len,
                        };
                        let vectored = action::Vectored {
                            iovecs: iovecs.as_ptr(),
                            count: 2,
                            offset,
                        };
                        for action in [
                            Action::Read(ReadArgs { buf, len, offset }),
                            Action::Write(WriteArgs {
                                buf: buf.cast_const(),
                                len,
                                offset,
                            }),
                            Action::ReadVectored(ReadVectoredArgs(vectored)),
                        ] {
                            for direct in [None, Some(align)] {
                                let op = unperformed(action, direct);
                                let refused = op.refusal().is_some();
                                assert_eq!(
                                    op.precheck().is_some(),
                                    refused,
                                    "{align:?} offset {offset} buffer {addr:#x} length {len}"
                                );
                                checked += usize::from(refused);
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 0);
    }
}
