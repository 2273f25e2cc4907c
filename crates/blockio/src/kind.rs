//! The kinds of operation, as callers and error messages name them.

use std::fmt;

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
    /// Accept a connection on a listening socket (`accept4`); the result
    /// is the new descriptor.
    Accept,
    /// Connect a socket (`connect`).
    Connect,
    /// Receive from a connected socket (`recv`).
    Recv,
    /// Send on a connected socket (`send`, never raising `SIGPIPE`).
    Send,
    /// Send several buffers in order on a connected socket (`sendmsg`,
    /// never raising `SIGPIPE`).
    SendVectored,
    /// Receive from a connected socket into a buffer the kernel picks from
    /// a registered ring (`recv` with buffer select, once or multishot;
    /// io_uring only).
    RecvSelect,
}

impl OpKind {
    /// Whether this is a socket operation, which may wait indefinitely
    /// for a peer (and so is cancelled in the kernel when its future is
    /// dropped).
    pub fn is_socket(self) -> bool {
        matches!(
            self,
            OpKind::Accept
                | OpKind::Connect
                | OpKind::Recv
                | OpKind::Send
                | OpKind::SendVectored
                | OpKind::RecvSelect
        )
    }

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
            OpKind::Accept => "accept",
            OpKind::Connect => "connect",
            OpKind::Recv => "recv",
            OpKind::Send => "send",
            OpKind::SendVectored => "vectored send",
            OpKind::RecvSelect => "recv into a provided buffer",
        })
    }
}
