//! What each kind of operation does, defined once.
//!
//! Every kind has one struct, named after its [`OpKind`] (`ReadArgs` for
//! [`OpKind::Read`]), with its own named fields (a read has a buffer, a
//! length and an offset; a stat has a path, flags, a mask and a result
//! buffer), and one [`Lower`] implementation beside it that derives from
//! those fields everything a backend needs:
//!
//! * its kind ([`Lower::KIND`], whose class decides the engine's checks);
//! * its io_uring submission entry ([`Lower::entry`]);
//! * the same operation as a blocking system call, for the thread-pool
//!   backend and for rings without the opcode ([`Lower::call`]);
//! * where it acts, for error messages and pre-submission checks
//!   ([`Lower::span`]).
//!
//! [`Action`] is the closed set of kinds a batch may hold, one variant per
//! [`OpKind`] and of the same name. Adding a kind means adding it to the
//! `OpKind` table (with its class), writing its struct and its `Lower`
//! here, and naming it in [`Action`] and `dispatch!`; no trait method has
//! a default and no match a wildcard, so the compiler lists every other
//! place that must decide something about it.
//!
//! The structs hold raw pointers: the lifetime that makes them valid is
//! carried by the [`Op`](super::Op) that owns the action (its `'a`), or, for
//! the async API, by the shared state that owns the memory until the
//! completion is seen.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};

use crate::buf::PoolBuffers;
use crate::kind::{OpClass, OpKind};

/// The most bytes one read or write may ask for (the kernel's MAX_RW_COUNT);
/// larger requests are clamped and come back short, as with `pread`.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

/// How one kind of operation reaches the kernel.
pub(crate) trait Lower {
    /// The kind, as errors name it.
    const KIND: OpKind;

    /// The file offset and the number of bytes asked for (both 0 for
    /// operations that move no file data).
    fn span(&self) -> (u64, usize);

    /// The submission entry on `fd`, which is a descriptor or, when the
    /// caller adds `FIXED_FILE`, a registered-file slot. `bufs` is the
    /// engine's registered buffer pool, if any.
    fn entry(&self, fd: RawFd, bufs: Option<&PoolBuffers>) -> squeue::Entry;

    /// The operation as one blocking system call on `fd`: its return value
    /// (`-1` with `errno` set on failure).
    ///
    /// # Safety
    /// The pointers the action holds must be valid as its constructor
    /// required, and nothing else may access that memory during the call.
    unsafe fn call(&self, fd: RawFd) -> isize;
}

/// Positional read into one buffer: `pread`, `IORING_OP_READ` (or
/// `READ_FIXED` on a registered buffer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadArgs {
    pub buf: *mut u8,
    pub len: usize,
    pub offset: u64,
}

impl Lower for ReadArgs {
    const KIND: OpKind = OpKind::Read;
    fn span(&self) -> (u64, usize) {
        (self.offset, self.len)
    }
    fn entry(&self, fd: RawFd, bufs: Option<&PoolBuffers>) -> squeue::Entry {
        let (fd, len) = (types::Fd(fd), self.len.min(MAX_RW) as u32);
        match bufs.and_then(|b| b.index_of(self.buf, self.len)) {
            Some(idx) => opcode::ReadFixed::new(fd, self.buf, len, idx)
                .offset(self.offset)
                .build(),
            None => opcode::Read::new(fd, self.buf, len)
                .offset(self.offset)
                .build(),
        }
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let len = self.len.min(MAX_RW);
        // SAFETY: `buf` is valid for `len` bytes (the caller's promise).
        match unsafe { libc::pread(fd, self.buf.cast(), len, self.offset as i64) } {
            // A descriptor without offsets (pipe, socket, terminal) is
            // read as io_uring reads it, its offset ignored: with `read`.
            -1 if last_errno() == libc::ESPIPE => {
                // SAFETY: as above.
                unsafe { libc::read(fd, self.buf.cast(), len) }
            }
            rc => rc,
        }
    }
}

/// Positional write from one buffer: `pwrite`, `IORING_OP_WRITE` (or
/// `WRITE_FIXED`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteArgs {
    pub buf: *const u8,
    pub len: usize,
    pub offset: u64,
}

impl Lower for WriteArgs {
    const KIND: OpKind = OpKind::Write;
    fn span(&self) -> (u64, usize) {
        (self.offset, self.len)
    }
    fn entry(&self, fd: RawFd, bufs: Option<&PoolBuffers>) -> squeue::Entry {
        let (fd, len) = (types::Fd(fd), self.len.min(MAX_RW) as u32);
        match bufs.and_then(|b| b.index_of(self.buf.cast_mut(), self.len)) {
            Some(idx) => opcode::WriteFixed::new(fd, self.buf, len, idx)
                .offset(self.offset)
                .build(),
            None => opcode::Write::new(fd, self.buf, len)
                .offset(self.offset)
                .build(),
        }
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let len = self.len.min(MAX_RW);
        // SAFETY: `buf` is valid for `len` bytes (the caller's promise).
        match unsafe { libc::pwrite(fd, self.buf.cast(), len, self.offset as i64) } {
            // Without offsets, written as io_uring writes it: with `write`.
            -1 if last_errno() == libc::ESPIPE => {
                // SAFETY: as above.
                unsafe { libc::write(fd, self.buf.cast(), len) }
            }
            rc => rc,
        }
    }
}

/// An array of `iovec`s and the offset where the first one starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Vectored {
    pub iovecs: *const libc::iovec,
    pub count: usize,
    pub offset: u64,
}

impl Vectored {
    /// The iovecs.
    pub(crate) fn iovecs(&self) -> &[libc::iovec] {
        if self.count == 0 {
            return &[];
        }
        // SAFETY: `iovecs`/`count` come from a live slice of iovecs (or of
        // `IoSlice(Mut)`, which is ABI compatible), valid while the action
        // exists (see the module docs).
        unsafe { std::slice::from_raw_parts(self.iovecs, self.count) }
    }

    fn span(&self) -> (u64, usize) {
        (self.offset, self.iovecs().iter().map(|v| v.iov_len).sum())
    }

    fn count_i32(&self) -> i32 {
        self.count.min(i32::MAX as usize) as i32
    }
}

/// Positional read into several buffers: `preadv`, `IORING_OP_READV`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadVectoredArgs(pub Vectored);

impl Lower for ReadVectoredArgs {
    const KIND: OpKind = OpKind::ReadVectored;
    fn span(&self) -> (u64, usize) {
        self.0.span()
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        let v = &self.0;
        opcode::Readv::new(types::Fd(fd), v.iovecs, v.count as u32)
            .offset(v.offset)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let v = &self.0;
        // SAFETY: the iovecs and the buffers they describe are valid (the
        // caller's promise).
        match unsafe { libc::preadv(fd, v.iovecs, v.count_i32(), v.offset as i64) } {
            // A descriptor without offsets is read as io_uring reads it
            // (and as `ReadArgs` does), its offset ignored: with `readv`.
            -1 if last_errno() == libc::ESPIPE => {
                // SAFETY: as above.
                unsafe { libc::readv(fd, v.iovecs, v.count_i32()) }
            }
            rc => rc,
        }
    }
}

/// Positional write from several buffers: `pwritev`, `IORING_OP_WRITEV`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteVectoredArgs(pub Vectored);

impl Lower for WriteVectoredArgs {
    const KIND: OpKind = OpKind::WriteVectored;
    fn span(&self) -> (u64, usize) {
        self.0.span()
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        let v = &self.0;
        opcode::Writev::new(types::Fd(fd), v.iovecs, v.count as u32)
            .offset(v.offset)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let v = &self.0;
        // SAFETY: the iovecs and the buffers they describe are valid (the
        // caller's promise).
        match unsafe { libc::pwritev(fd, v.iovecs, v.count_i32(), v.offset as i64) } {
            // Without offsets, as `WriteArgs`: with `writev`.
            -1 if last_errno() == libc::ESPIPE => {
                // SAFETY: as above.
                unsafe { libc::writev(fd, v.iovecs, v.count_i32()) }
            }
            rc => rc,
        }
    }
}

/// Flush data and metadata to stable storage: `fsync`, `IORING_OP_FSYNC`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FsyncArgs;

impl Lower for FsyncArgs {
    const KIND: OpKind = OpKind::Fsync;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Fsync::new(types::Fd(fd)).build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: a plain system call on a descriptor; no memory involved.
        (unsafe { libc::fsync(fd) }) as isize
    }
}

/// Flush data and the metadata needed to read it back: `fdatasync`,
/// `IORING_OP_FSYNC` with `IORING_FSYNC_DATASYNC`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FdatasyncArgs;

impl Lower for FdatasyncArgs {
    const KIND: OpKind = OpKind::Fdatasync;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Fsync::new(types::Fd(fd))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: a plain system call on a descriptor; no memory involved.
        (unsafe { libc::fdatasync(fd) }) as isize
    }
}

/// Allocate, deallocate or zero `len` bytes of the file's storage from
/// `offset`: `fallocate`, `IORING_OP_FALLOCATE`. `mode` holds the
/// `FALLOC_FL_*` flags as `fallocate(2)` takes them (0: allocate, growing
/// the file if the range ends past it). An offset or length past
/// `i64::MAX` fails with `EINVAL` on both paths, as the kernel reads each
/// as a negative `loff_t`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FallocateArgs {
    pub mode: i32,
    pub offset: u64,
    pub len: u64,
}

impl Lower for FallocateArgs {
    const KIND: OpKind = OpKind::Fallocate;
    fn span(&self) -> (u64, usize) {
        (self.offset, usize::try_from(self.len).unwrap_or(usize::MAX))
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Fallocate::new(types::Fd(fd), self.len)
            .offset(self.offset)
            .mode(self.mode)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: the descriptor stays open for the call (the caller's
        // promise); the borrow ends with it.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let mode = rustix::fs::FallocateFlags::from_bits_retain(self.mode as u32);
        match rustix::fs::fallocate(fd, mode, self.offset, self.len) {
            Ok(()) => 0,
            Err(e) => fail(e.raw_os_error()),
        }
    }
}

/// Open `path` relative to the directory descriptor: `openat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenArgs {
    pub path: *const libc::c_char,
    pub flags: i32,
    pub mode: libc::mode_t,
}

impl Lower for OpenArgs {
    const KIND: OpKind = OpKind::Open;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::OpenAt::new(types::Fd(dir), self.path)
            .flags(self.flags)
            .mode(self.mode)
            .build()
    }
    unsafe fn call(&self, dir: RawFd) -> isize {
        // SAFETY: `path` is a live NUL-terminated string (the caller's
        // promise).
        (unsafe { libc::openat(dir, self.path, self.flags, self.mode as libc::c_uint) }) as isize
    }
}

/// Read the metadata of `path` relative to the directory descriptor into
/// `buf`: `statx`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatArgs {
    pub path: *const libc::c_char,
    pub flags: i32,
    pub mask: u32,
    pub buf: *mut libc::statx,
}

impl Lower for StatArgs {
    const KIND: OpKind = OpKind::Stat;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Statx::new(types::Fd(dir), self.path, self.buf.cast())
            .flags(self.flags)
            .mask(self.mask)
            .build()
    }
    unsafe fn call(&self, dir: RawFd) -> isize {
        // SAFETY: `path` is a live NUL-terminated string and `buf` a live,
        // writable `statx` (the caller's promise).
        (unsafe { libc::statx(dir, self.path, self.flags, self.mask, self.buf) }) as isize
    }
}

/// Close the descriptor: `close`. The action owns the descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CloseArgs;

impl Lower for CloseArgs {
    const KIND: OpKind = OpKind::Close;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Close::new(types::Fd(fd)).build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: the action owns `fd` and closes it exactly once.
        match unsafe { libc::close(fd) } {
            // Never retried: after EINTR the descriptor is closed anyway on
            // Linux, and a retry could close a descriptor opened since.
            -1 if last_errno() == libc::EINTR => 0,
            rc => rc as isize,
        }
    }
}

/// Make the directory `path` relative to the directory descriptor:
/// `mkdirat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MkdirArgs {
    pub path: *const libc::c_char,
    pub mode: libc::mode_t,
}

impl Lower for MkdirArgs {
    const KIND: OpKind = OpKind::Mkdir;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::MkDirAt::new(types::Fd(dir), self.path)
            .mode(self.mode)
            .build()
    }
    unsafe fn call(&self, dir: RawFd) -> isize {
        // SAFETY: `path` is a live NUL-terminated string (the caller's
        // promise).
        (unsafe { libc::mkdirat(dir, self.path, self.mode) }) as isize
    }
}

/// Make `link`, relative to the directory descriptor, a symbolic link to
/// `target`: `symlinkat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SymlinkArgs {
    pub target: *const libc::c_char,
    pub link: *const libc::c_char,
}

impl Lower for SymlinkArgs {
    const KIND: OpKind = OpKind::Symlink;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::SymlinkAt::new(types::Fd(dir), self.target, self.link).build()
    }
    unsafe fn call(&self, dir: RawFd) -> isize {
        // SAFETY: both are live NUL-terminated strings (the caller's
        // promise).
        (unsafe { libc::symlinkat(self.target, dir, self.link) }) as isize
    }
}

/// Set the file's length: `ftruncate`, `IORING_OP_FTRUNCATE` (Linux
/// 6.9). A length past `i64::MAX` fails with `EINVAL` on both paths (the
/// kernel reads it as a negative `loff_t`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FtruncateArgs {
    pub len: u64,
}

impl Lower for FtruncateArgs {
    const KIND: OpKind = OpKind::Ftruncate;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Ftruncate::new(types::Fd(fd), self.len).build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let Ok(len) = libc::off_t::try_from(self.len) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: a plain system call on a descriptor; no memory involved.
        (unsafe { libc::ftruncate(fd, len) }) as isize
    }
}

/// Accepts a connection: `accept4`, `IORING_OP_ACCEPT`. The new descriptor
/// is close-on-exec (and blocking: io_uring waits for readiness itself).
#[derive(Debug, Clone, Copy)]
pub(crate) enum AcceptArgs {
    /// One connection; the peer's address goes to `addr`.
    Once {
        addr: *mut libc::sockaddr_storage,
        addr_len: *mut libc::socklen_t,
    },
    /// Connections again and again: `IORING_ACCEPT_MULTISHOT` (5.19+).
    /// Each completion carries one new descriptor; the request stays
    /// armed while completions carry `IORING_CQE_F_MORE`. No peer address
    /// is written (one buffer would be shared by every completion); the
    /// caller asks the new socket. There is no blocking form: it is issued
    /// only on io_uring.
    Multishot,
}

/// The new descriptor's flags.
const ACCEPT_FLAGS: i32 = libc::SOCK_CLOEXEC;

impl Lower for AcceptArgs {
    const KIND: OpKind = OpKind::Accept;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        match *self {
            AcceptArgs::Once { addr, addr_len } => {
                opcode::Accept::new(types::Fd(fd), addr.cast(), addr_len)
                    .flags(ACCEPT_FLAGS)
                    .build()
            }
            AcceptArgs::Multishot => opcode::AcceptMulti::new(types::Fd(fd))
                .flags(ACCEPT_FLAGS)
                .build(),
        }
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        match *self {
            // SAFETY: `addr` and `addr_len` point to live storage of the
            // sizes the kernel expects (the caller's promise).
            AcceptArgs::Once { addr, addr_len } => unsafe {
                libc::accept4(fd, addr.cast(), addr_len, ACCEPT_FLAGS) as isize
            },
            AcceptArgs::Multishot => unsupported(),
        }
    }
}

/// Connects a socket: `connect`, `IORING_OP_CONNECT`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectArgs {
    pub addr: *const libc::sockaddr,
    pub addr_len: libc::socklen_t,
}

impl Lower for ConnectArgs {
    const KIND: OpKind = OpKind::Connect;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::Connect::new(types::Fd(fd), self.addr, self.addr_len).build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: `addr` holds `addr_len` bytes of a socket address (the
        // caller's promise).
        unsafe { libc::connect(fd, self.addr, self.addr_len) as isize }
    }
}

/// Receives from a connected socket into one buffer: `recv`,
/// `IORING_OP_RECV`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvArgs {
    pub buf: *mut u8,
    pub len: usize,
}

impl Lower for RecvArgs {
    const KIND: OpKind = OpKind::Recv;
    fn span(&self) -> (u64, usize) {
        (0, self.len)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        let len = self.len.min(MAX_RW) as u32;
        opcode::Recv::new(types::Fd(fd), self.buf, len).build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: `buf` is valid for `len` bytes (the caller's promise).
        unsafe { libc::recv(fd, self.buf.cast(), self.len.min(MAX_RW), 0) }
    }
}

/// Sends on a connected socket from one buffer: `send`, `IORING_OP_SEND`,
/// with `MSG_NOSIGNAL` (a peer that closed is `EPIPE` on this stream, not
/// a signal that ends the process).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendArgs {
    pub buf: *const u8,
    pub len: usize,
}

impl Lower for SendArgs {
    const KIND: OpKind = OpKind::Send;
    fn span(&self) -> (u64, usize) {
        (0, self.len)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        let len = self.len.min(MAX_RW) as u32;
        opcode::Send::new(types::Fd(fd), self.buf, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: `buf` is valid for `len` bytes (the caller's promise).
        unsafe {
            libc::send(
                fd,
                self.buf.cast(),
                self.len.min(MAX_RW),
                libc::MSG_NOSIGNAL,
            )
        }
    }
}

/// Sends several buffers in order on a connected socket: `sendmsg`,
/// `IORING_OP_SENDMSG`, with `MSG_NOSIGNAL`. (`writev` would do on the
/// ring, but the blocking fallback's `pwritev` fails on sockets.)
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendVectoredArgs {
    /// A message header whose `msg_iov` describes the buffers; no address,
    /// no control data.
    pub msg: *const libc::msghdr,
}

impl SendVectoredArgs {
    /// The buffers the header describes.
    fn iovecs(&self) -> &[libc::iovec] {
        // SAFETY: `msg` and the iovec array it points to are valid for the
        // action's lifetime (the constructor's promise).
        unsafe {
            let m = &*self.msg;
            if m.msg_iovlen == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen)
            }
        }
    }
}

impl Lower for SendVectoredArgs {
    const KIND: OpKind = OpKind::SendVectored;
    fn span(&self) -> (u64, usize) {
        (0, self.iovecs().iter().map(|v| v.iov_len).sum())
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        opcode::SendMsg::new(types::Fd(fd), self.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: `msg` describes live buffers (the caller's promise).
        unsafe { libc::sendmsg(fd, self.msg, libc::MSG_NOSIGNAL) }
    }
}

/// Receives from a connected socket into a buffer the kernel takes from
/// the registered ring `group`: `IORING_OP_RECV` with buffer select, at
/// most `len` bytes, once, or (`multishot`) again and again until
/// cancelled or out of buffers, each completion in its own buffer. There
/// is no blocking form: it is issued only on a ring where the group is
/// registered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvSelectArgs {
    pub group: u16,
    pub len: u32,
    pub multishot: bool,
}

impl Lower for RecvSelectArgs {
    const KIND: OpKind = OpKind::RecvSelect;
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolBuffers>) -> squeue::Entry {
        if self.multishot {
            return opcode::RecvMulti::new(types::Fd(fd), self.group).build();
        }
        opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), self.len)
            .buf_group(self.group)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
    }
    unsafe fn call(&self, _fd: RawFd) -> isize {
        unsupported()
    }
}

/// The blocking call of a kind that has none: fails with `EOPNOTSUPP`.
fn unsupported() -> isize {
    fail(libc::EOPNOTSUPP)
}

/// A blocking call refused before the system call: sets `errno` and
/// returns -1, as a failed call does.
fn fail(errno: i32) -> isize {
    // SAFETY: sets this thread's errno, which `call_raw` reads back.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// One operation of any kind: one variant per [`OpKind`], of the same
/// name.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Action {
    Read(ReadArgs),
    Write(WriteArgs),
    ReadVectored(ReadVectoredArgs),
    WriteVectored(WriteVectoredArgs),
    Fsync(FsyncArgs),
    Fdatasync(FdatasyncArgs),
    Fallocate(FallocateArgs),
    Open(OpenArgs),
    Stat(StatArgs),
    Close(CloseArgs),
    Mkdir(MkdirArgs),
    Symlink(SymlinkArgs),
    Ftruncate(FtruncateArgs),
    Accept(AcceptArgs),
    Connect(ConnectArgs),
    Recv(RecvArgs),
    Send(SendArgs),
    SendVectored(SendVectoredArgs),
    RecvSelect(RecvSelectArgs),
}

/// Forwards to the kind inside an [`Action`].
macro_rules! dispatch {
    ($action:expr, $k:ident => $body:expr) => {
        match $action {
            Action::Read($k) => $body,
            Action::Write($k) => $body,
            Action::ReadVectored($k) => $body,
            Action::WriteVectored($k) => $body,
            Action::Fsync($k) => $body,
            Action::Fdatasync($k) => $body,
            Action::Fallocate($k) => $body,
            Action::Open($k) => $body,
            Action::Stat($k) => $body,
            Action::Close($k) => $body,
            Action::Mkdir($k) => $body,
            Action::Symlink($k) => $body,
            Action::Ftruncate($k) => $body,
            Action::Accept($k) => $body,
            Action::Connect($k) => $body,
            Action::Recv($k) => $body,
            Action::Send($k) => $body,
            Action::SendVectored($k) => $body,
            Action::RecvSelect($k) => $body,
        }
    };
}

/// The kind of `args`, which their type states.
fn kind_of<L: Lower>(_: &L) -> OpKind {
    L::KIND
}

impl Action {
    /// A flush of the file's data and metadata, or (`data_only`) of its
    /// data and only the metadata needed to read it back.
    pub(crate) fn flush(data_only: bool) -> Action {
        if data_only {
            Action::Fdatasync(FdatasyncArgs)
        } else {
            Action::Fsync(FsyncArgs)
        }
    }

    /// The kind, as errors name it.
    pub(crate) fn kind(&self) -> OpKind {
        dispatch!(self, k => kind_of(k))
    }

    /// The file offset and the number of bytes asked for (see
    /// [`Lower::span`]).
    pub(crate) fn span(&self) -> (u64, usize) {
        dispatch!(self, k => k.span())
    }

    /// The submission entry on `fd` (see [`Lower::entry`]).
    pub(crate) fn entry(&self, fd: RawFd, bufs: Option<&PoolBuffers>) -> squeue::Entry {
        dispatch!(self, k => k.entry(fd, bufs))
    }

    /// The operation as one blocking system call (see [`Lower::call`]).
    ///
    /// # Safety
    /// As [`Lower::call`].
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: the caller's promise, passed on.
        dispatch!(self, k => unsafe { k.call(fd) })
    }

    /// The file offset (0 for kinds that move no file data), without the
    /// byte count that [`Lower::span`] sums over a vectored op's iovecs.
    pub(crate) fn offset(&self) -> u64 {
        match self {
            Action::Read(r) => r.offset,
            Action::Write(w) => w.offset,
            Action::ReadVectored(ReadVectoredArgs(v))
            | Action::WriteVectored(WriteVectoredArgs(v)) => v.offset,
            Action::Fsync(_)
            | Action::Fdatasync(_)
            | Action::Fallocate(_)
            | Action::Open(_)
            | Action::Stat(_)
            | Action::Close(_)
            | Action::Mkdir(_)
            | Action::Symlink(_)
            | Action::Ftruncate(_)
            | Action::Accept(_)
            | Action::Connect(_)
            | Action::Recv(_)
            | Action::Send(_)
            | Action::SendVectored(_)
            | Action::RecvSelect(_) => 0,
        }
    }

    /// The memory a file read or write moves data through, as iovecs
    /// (empty for the other kinds, socket transfers included): what
    /// direct-I/O alignment checks and inline reads look at.
    pub(crate) fn segments(&self) -> Segments<'_> {
        match self {
            Action::Read(r) => Segments::One(iovec(r.buf, r.len)),
            Action::Write(w) => Segments::One(iovec(w.buf.cast_mut(), w.len)),
            Action::ReadVectored(ReadVectoredArgs(v))
            | Action::WriteVectored(WriteVectoredArgs(v)) => Segments::Many(v.iovecs()),
            Action::Fsync(_)
            | Action::Fdatasync(_)
            | Action::Fallocate(_)
            | Action::Open(_)
            | Action::Stat(_)
            | Action::Close(_)
            | Action::Mkdir(_)
            | Action::Symlink(_)
            | Action::Ftruncate(_)
            | Action::Accept(_)
            | Action::Connect(_)
            | Action::Recv(_)
            | Action::Send(_)
            | Action::SendVectored(_)
            | Action::RecvSelect(_) => Segments::Many(&[]),
        }
    }

    /// Whether the kernel may look the descriptor up in the registered
    /// files: file data and sockets may be in a registered slot; metadata
    /// is issued on the raw descriptor (for most of it a directory).
    pub(crate) fn takes_registered_file(&self) -> bool {
        match self.kind().class() {
            OpClass::FileData | OpClass::SocketIn | OpClass::SocketOut => true,
            OpClass::Metadata => false,
        }
    }

    /// Performs the action with blocking system calls, retrying on EINTR;
    /// the result as io_uring reports it (a count, or `-errno`).
    ///
    /// # Safety
    /// As [`Lower::call`].
    pub(crate) unsafe fn call_raw(&self, fd: RawFd) -> i32 {
        loop {
            // SAFETY: the caller's promise, passed on.
            let rc = unsafe { self.call(fd) };
            if rc >= 0 {
                // At most MAX_RW bytes or a descriptor: fits in an i32.
                return rc as i32;
            }
            match last_errno() {
                libc::EINTR => continue,
                errno => return -errno,
            }
        }
    }
    /// Performs a receive or a send on a connected socket without waiting
    /// (`MSG_DONTWAIT`), retrying on EINTR: the result as
    /// [`call_raw`](Self::call_raw)'s, `-EAGAIN` where the socket has no
    /// bytes (or no room) now. `None` for every other kind.
    ///
    /// # Safety
    /// As [`Lower::call`].
    pub(crate) unsafe fn call_nowait_raw(&self, fd: RawFd) -> Option<i32> {
        let nowait = libc::MSG_DONTWAIT;
        loop {
            // SAFETY: as each kind's `Lower::call`, which these are with
            // `MSG_DONTWAIT` added (the caller's promise, passed on).
            let rc = unsafe {
                match self {
                    Action::Recv(a) => libc::recv(fd, a.buf.cast(), a.len.min(MAX_RW), nowait),
                    Action::Send(a) => libc::send(
                        fd,
                        a.buf.cast(),
                        a.len.min(MAX_RW),
                        libc::MSG_NOSIGNAL | nowait,
                    ),
                    Action::SendVectored(a) => {
                        libc::sendmsg(fd, a.msg, libc::MSG_NOSIGNAL | nowait)
                    }
                    _ => return None,
                }
            };
            if rc >= 0 {
                // At most MAX_RW bytes: fits in an i32.
                return Some(rc as i32);
            }
            match last_errno() {
                libc::EINTR => continue,
                errno => return Some(-errno),
            }
        }
    }
}

/// The buffers of a read or write.
pub(crate) enum Segments<'a> {
    One(libc::iovec),
    Many(&'a [libc::iovec]),
}

impl Segments<'_> {
    /// The segments as a slice.
    pub(crate) fn as_slice(&self) -> &[libc::iovec] {
        match self {
            Segments::One(v) => std::slice::from_ref(v),
            Segments::Many(v) => v,
        }
    }
}

fn iovec(base: *mut u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base.cast(),
        iov_len: len.min(MAX_RW),
    }
}

/// This thread's `errno`.
fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One action of every kind (pointers null: they are only named, never
    /// performed).
    fn one_of_each() -> Vec<Action> {
        let null = std::ptr::null_mut::<u8>();
        let path = std::ptr::null::<libc::c_char>();
        let v = Vectored {
            iovecs: std::ptr::null(),
            count: 0,
            offset: 0,
        };
        vec![
            Action::Read(ReadArgs {
                buf: null,
                len: 0,
                offset: 0,
            }),
            Action::Write(WriteArgs {
                buf: null,
                len: 0,
                offset: 0,
            }),
            Action::ReadVectored(ReadVectoredArgs(v)),
            Action::WriteVectored(WriteVectoredArgs(v)),
            Action::Fsync(FsyncArgs),
            Action::Fdatasync(FdatasyncArgs),
            Action::Fallocate(FallocateArgs {
                mode: 0,
                offset: 0,
                len: 0,
            }),
            Action::Open(OpenArgs {
                path,
                flags: 0,
                mode: 0,
            }),
            Action::Stat(StatArgs {
                path,
                flags: 0,
                mask: 0,
                buf: std::ptr::null_mut(),
            }),
            Action::Close(CloseArgs),
            Action::Mkdir(MkdirArgs { path, mode: 0 }),
            Action::Symlink(SymlinkArgs {
                target: path,
                link: path,
            }),
            Action::Ftruncate(FtruncateArgs { len: 0 }),
            Action::Accept(AcceptArgs::Multishot),
            Action::Connect(ConnectArgs {
                addr: std::ptr::null(),
                addr_len: 0,
            }),
            Action::Recv(RecvArgs { buf: null, len: 0 }),
            Action::Send(SendArgs { buf: null, len: 0 }),
            Action::SendVectored(SendVectoredArgs {
                msg: std::ptr::null(),
            }),
            Action::RecvSelect(RecvSelectArgs {
                group: 0,
                len: 0,
                multishot: false,
            }),
        ]
    }

    /// One name per kind: each action's variant is named as its kind, and
    /// its arguments' type as the kind with `Args`.
    #[test]
    fn every_action_is_named_as_its_kind() {
        let actions = one_of_each();
        let mut kinds: Vec<OpKind> = actions.iter().map(Action::kind).collect();
        for a in &actions {
            let (debug, kind) = (format!("{a:?}"), format!("{:?}", a.kind()));
            let args = dispatch!(a, k => std::any::type_name_of_val(k));
            assert!(
                debug.starts_with(&format!("{kind}(")),
                "{debug} is not named {kind}"
            );
            assert!(
                args.ends_with(&format!("::{kind}Args")),
                "{args} is not named {kind}"
            );
        }
        kinds.dedup();
        assert_eq!(
            kinds,
            OpKind::ALL,
            "one action per kind, in the table's order"
        );
        let (flush, datasync) = (Action::flush(false), Action::flush(true));
        assert_eq!(
            (flush.kind(), datasync.kind()),
            (OpKind::Fsync, OpKind::Fdatasync)
        );
    }
}
