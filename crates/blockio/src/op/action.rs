//! What each kind of operation does, defined once.
//!
//! Every kind is a struct with its own named fields (a read has a buffer, a
//! length and an offset; a `statx` has a path, flags, a mask and a result
//! buffer) and one [`Lower`] implementation beside it that derives from
//! those fields everything a backend needs:
//!
//! * its io_uring submission entry ([`Lower::entry`]);
//! * the same operation as a blocking system call, for the thread-pool
//!   backend and for rings without the opcode ([`Lower::call`]);
//! * where it acts, for error messages and pre-submission checks
//!   ([`Lower::span`], [`Lower::kind`]).
//!
//! [`Action`] is the closed set of kinds a batch may hold. Adding a kind
//! means writing its struct and its `Lower` here and naming it in
//! [`Action`] and `dispatch!`; the backends need no change.
//!
//! The structs hold raw pointers: the lifetime that makes them valid is
//! carried by the [`Op`](super::Op) that owns the action (its `'a`), or, for
//! the async API, by the shared state that owns the memory until the
//! completion is seen.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};

use crate::buf::PoolInner;
use crate::kind::OpKind;

/// The most bytes one read or write may ask for (the kernel's MAX_RW_COUNT);
/// larger requests are clamped and come back short, as with `pread`.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

/// How one kind of operation reaches the kernel.
pub(crate) trait Lower {
    /// The kind, as errors name it.
    fn kind(&self) -> OpKind;

    /// The file offset and the number of bytes asked for (both 0 for
    /// operations that move no file data).
    fn span(&self) -> (u64, usize) {
        (0, 0)
    }

    /// The submission entry on `fd`, which is a descriptor or, when the
    /// caller adds `FIXED_FILE`, a registered-file slot. `bufs` is the
    /// engine's registered buffer pool, if any.
    fn entry(&self, fd: RawFd, bufs: Option<&PoolInner>) -> squeue::Entry;

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
pub(crate) struct Read {
    pub buf: *mut u8,
    pub len: usize,
    pub offset: u64,
}

impl Lower for Read {
    fn kind(&self) -> OpKind {
        OpKind::Read
    }
    fn span(&self) -> (u64, usize) {
        (self.offset, self.len)
    }
    fn entry(&self, fd: RawFd, bufs: Option<&PoolInner>) -> squeue::Entry {
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
            // A descriptor without offsets (pipe, socket, terminal) at
            // offset 0 is read as io_uring reads it: with `read`.
            -1 if self.offset == 0 && last_errno() == libc::ESPIPE => {
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
pub(crate) struct Write {
    pub buf: *const u8,
    pub len: usize,
    pub offset: u64,
}

impl Lower for Write {
    fn kind(&self) -> OpKind {
        OpKind::Write
    }
    fn span(&self) -> (u64, usize) {
        (self.offset, self.len)
    }
    fn entry(&self, fd: RawFd, bufs: Option<&PoolInner>) -> squeue::Entry {
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
            -1 if self.offset == 0 && last_errno() == libc::ESPIPE => {
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
pub(crate) struct ReadVectored(pub Vectored);

impl Lower for ReadVectored {
    fn kind(&self) -> OpKind {
        OpKind::ReadVectored
    }
    fn span(&self) -> (u64, usize) {
        self.0.span()
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        let v = &self.0;
        opcode::Readv::new(types::Fd(fd), v.iovecs, v.count as u32)
            .offset(v.offset)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let v = &self.0;
        // SAFETY: the iovecs and the buffers they describe are valid (the
        // caller's promise).
        unsafe { libc::preadv(fd, v.iovecs, v.count_i32(), v.offset as i64) }
    }
}

/// Positional write from several buffers: `pwritev`, `IORING_OP_WRITEV`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteVectored(pub Vectored);

impl Lower for WriteVectored {
    fn kind(&self) -> OpKind {
        OpKind::WriteVectored
    }
    fn span(&self) -> (u64, usize) {
        self.0.span()
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        let v = &self.0;
        opcode::Writev::new(types::Fd(fd), v.iovecs, v.count as u32)
            .offset(v.offset)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        let v = &self.0;
        // SAFETY: the iovecs and the buffers they describe are valid (the
        // caller's promise).
        unsafe { libc::pwritev(fd, v.iovecs, v.count_i32(), v.offset as i64) }
    }
}

/// Flush to stable storage: `fsync`, or `fdatasync` when `data_only`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flush {
    pub data_only: bool,
}

impl Lower for Flush {
    fn kind(&self) -> OpKind {
        if self.data_only {
            OpKind::Fdatasync
        } else {
            OpKind::Fsync
        }
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        let flags = if self.data_only {
            types::FsyncFlags::DATASYNC
        } else {
            types::FsyncFlags::empty()
        };
        opcode::Fsync::new(types::Fd(fd)).flags(flags).build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: plain system calls on a descriptor; no memory involved.
        (unsafe {
            if self.data_only {
                libc::fdatasync(fd)
            } else {
                libc::fsync(fd)
            }
        }) as isize
    }
}

/// Open `path` relative to the directory descriptor: `openat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenAt {
    pub path: *const libc::c_char,
    pub flags: i32,
    pub mode: libc::mode_t,
}

impl Lower for OpenAt {
    fn kind(&self) -> OpKind {
        OpKind::Open
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct Statx {
    pub path: *const libc::c_char,
    pub flags: i32,
    pub mask: u32,
    pub buf: *mut libc::statx,
}

impl Lower for Statx {
    fn kind(&self) -> OpKind {
        OpKind::Stat
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct Close;

impl Lower for Close {
    fn kind(&self) -> OpKind {
        OpKind::Close
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct MkdirAt {
    pub path: *const libc::c_char,
    pub mode: libc::mode_t,
}

impl Lower for MkdirAt {
    fn kind(&self) -> OpKind {
        OpKind::Mkdir
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct SymlinkAt {
    pub target: *const libc::c_char,
    pub link: *const libc::c_char,
}

impl Lower for SymlinkAt {
    fn kind(&self) -> OpKind {
        OpKind::Symlink
    }
    fn entry(&self, dir: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        opcode::SymlinkAt::new(types::Fd(dir), self.target, self.link).build()
    }
    unsafe fn call(&self, dir: RawFd) -> isize {
        // SAFETY: both are live NUL-terminated strings (the caller's
        // promise).
        (unsafe { libc::symlinkat(self.target, dir, self.link) }) as isize
    }
}

/// Accepts a connection: `accept4`, `IORING_OP_ACCEPT`. The new descriptor
/// is close-on-exec (and blocking: io_uring waits for readiness itself);
/// the peer's address goes to `addr`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accept {
    pub addr: *mut libc::sockaddr_storage,
    pub addr_len: *mut libc::socklen_t,
}

/// The new descriptor's flags.
const ACCEPT_FLAGS: i32 = libc::SOCK_CLOEXEC;

impl Lower for Accept {
    fn kind(&self) -> OpKind {
        OpKind::Accept
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        opcode::Accept::new(types::Fd(fd), self.addr.cast(), self.addr_len)
            .flags(ACCEPT_FLAGS)
            .build()
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: `addr` and `addr_len` point to live storage of the sizes
        // the kernel expects (the caller's promise).
        unsafe { libc::accept4(fd, self.addr.cast(), self.addr_len, ACCEPT_FLAGS) as isize }
    }
}

/// Accepts connections again and again: `IORING_OP_ACCEPT` with
/// `IORING_ACCEPT_MULTISHOT` (5.19+). Each completion carries one new
/// descriptor (close-on-exec, blocking, like [`Accept`]'s); the request
/// stays armed while completions carry `IORING_CQE_F_MORE`. No peer
/// address is written (one buffer would be shared by every completion);
/// the caller asks the new socket. There is no blocking form: it is
/// issued only on io_uring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcceptMulti;

impl Lower for AcceptMulti {
    fn kind(&self) -> OpKind {
        OpKind::Accept
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        opcode::AcceptMulti::new(types::Fd(fd))
            .flags(ACCEPT_FLAGS)
            .build()
    }
    unsafe fn call(&self, _fd: RawFd) -> isize {
        // SAFETY: sets this thread's errno, which `call_raw` reads back.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        -1
    }
}

/// Connects a socket: `connect`, `IORING_OP_CONNECT`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Connect {
    pub addr: *const libc::sockaddr,
    pub addr_len: libc::socklen_t,
}

impl Lower for Connect {
    fn kind(&self) -> OpKind {
        OpKind::Connect
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct SocketRecv {
    pub buf: *mut u8,
    pub len: usize,
}

impl Lower for SocketRecv {
    fn kind(&self) -> OpKind {
        OpKind::Recv
    }
    fn span(&self) -> (u64, usize) {
        (0, self.len)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct SocketSend {
    pub buf: *const u8,
    pub len: usize,
}

impl Lower for SocketSend {
    fn kind(&self) -> OpKind {
        OpKind::Send
    }
    fn span(&self) -> (u64, usize) {
        (0, self.len)
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct SocketSendVectored {
    /// A message header whose `msg_iov` describes the buffers; no address,
    /// no control data.
    pub msg: *const libc::msghdr,
}

impl SocketSendVectored {
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

impl Lower for SocketSendVectored {
    fn kind(&self) -> OpKind {
        OpKind::SendVectored
    }
    fn span(&self) -> (u64, usize) {
        (0, self.iovecs().iter().map(|v| v.iov_len).sum())
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
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
pub(crate) struct SocketRecvSelect {
    pub group: u16,
    pub len: u32,
    pub multishot: bool,
}

impl Lower for SocketRecvSelect {
    fn kind(&self) -> OpKind {
        OpKind::RecvSelect
    }
    fn entry(&self, fd: RawFd, _: Option<&PoolInner>) -> squeue::Entry {
        if self.multishot {
            return opcode::RecvMulti::new(types::Fd(fd), self.group).build();
        }
        opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), self.len)
            .buf_group(self.group)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
    }
    unsafe fn call(&self, _fd: RawFd) -> isize {
        // SAFETY: sets this thread's errno, which `call_raw` reads back.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        -1
    }
}

/// One operation of any kind.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Action {
    Read(Read),
    Write(Write),
    ReadVectored(ReadVectored),
    WriteVectored(WriteVectored),
    Sync(Flush),
    Open(OpenAt),
    Stat(Statx),
    Close(Close),
    Mkdir(MkdirAt),
    Symlink(SymlinkAt),
    Accept(Accept),
    AcceptMulti(AcceptMulti),
    Connect(Connect),
    Recv(SocketRecv),
    Send(SocketSend),
    SendVectored(SocketSendVectored),
    RecvSelect(SocketRecvSelect),
}

/// Forwards a [`Lower`] method to the kind inside an [`Action`].
macro_rules! dispatch {
    ($action:expr, $k:ident => $body:expr) => {
        match $action {
            Action::Read($k) => $body,
            Action::Write($k) => $body,
            Action::ReadVectored($k) => $body,
            Action::WriteVectored($k) => $body,
            Action::Sync($k) => $body,
            Action::Open($k) => $body,
            Action::Stat($k) => $body,
            Action::Close($k) => $body,
            Action::Mkdir($k) => $body,
            Action::Symlink($k) => $body,
            Action::Accept($k) => $body,
            Action::AcceptMulti($k) => $body,
            Action::Connect($k) => $body,
            Action::Recv($k) => $body,
            Action::Send($k) => $body,
            Action::SendVectored($k) => $body,
            Action::RecvSelect($k) => $body,
        }
    };
}

impl Lower for Action {
    fn kind(&self) -> OpKind {
        dispatch!(self, k => k.kind())
    }
    fn span(&self) -> (u64, usize) {
        dispatch!(self, k => k.span())
    }
    fn entry(&self, fd: RawFd, bufs: Option<&PoolInner>) -> squeue::Entry {
        dispatch!(self, k => k.entry(fd, bufs))
    }
    unsafe fn call(&self, fd: RawFd) -> isize {
        // SAFETY: the caller's promise, passed on.
        dispatch!(self, k => unsafe { k.call(fd) })
    }
}

impl Action {
    /// The file offset (0 for kinds that move no file data), without the
    /// byte count that [`Lower::span`] sums over a vectored op's iovecs.
    pub(crate) fn offset(&self) -> u64 {
        match self {
            Action::Read(r) => r.offset,
            Action::Write(w) => w.offset,
            Action::ReadVectored(ReadVectored(v)) | Action::WriteVectored(WriteVectored(v)) => {
                v.offset
            }
            _ => 0,
        }
    }

    /// The memory a read or write moves data through, as iovecs (empty for
    /// the other kinds): what direct-I/O alignment checks and inline reads
    /// look at.
    pub(crate) fn segments(&self) -> Segments<'_> {
        match self {
            Action::Read(r) => Segments::One(iovec(r.buf, r.len)),
            Action::Write(w) => Segments::One(iovec(w.buf.cast_mut(), w.len)),
            Action::ReadVectored(ReadVectored(v)) | Action::WriteVectored(WriteVectored(v)) => {
                Segments::Many(v.iovecs())
            }
            _ => Segments::Many(&[]),
        }
    }

    /// Whether the kernel may look the descriptor up in the registered
    /// files: data operations only (the metadata opcodes are issued on the
    /// raw descriptor, which for most of them is a directory).
    pub(crate) fn takes_registered_file(&self) -> bool {
        !self.kind().is_metadata()
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
