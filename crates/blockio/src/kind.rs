//! The kinds of operation, as callers and error messages name them, and
//! the class of each.
//!
//! Every kind is defined once, in the `op_kinds!` table below, with its
//! class and its name in messages: the table cannot hold a kind without
//! both, and every decision the engine makes about a kind (the checks
//! before submission, the registered-file slot, running it inline, waiting
//! for readiness, cancelling it in the kernel, how its errors read) is an
//! exhaustive `match` on the kind or its class. So a new kind does not
//! compile until each of those decisions is made for it.

use std::fmt;

/// What an operation acts on, which decides how the engine treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpClass {
    /// Moves or flushes a file's data: checked before submission against
    /// the offset's range and the file's direct-I/O alignment, and issued
    /// through the file's registered slot when it has one.
    FileData,
    /// Acts on a path relative to a directory, or on a descriptor itself
    /// (open, stat, close, mkdir, symlink, ftruncate): issued on the raw
    /// descriptor (most often a directory, never a registered slot), and
    /// performed with a plain system call where the ring lacks the opcode
    /// (see [`ProbeReport::performs`](crate::ProbeReport::performs)).
    Metadata,
    /// A socket operation that waits for the socket to be readable
    /// (accept, receive). Like every socket operation it may wait for a
    /// peer indefinitely, so it is cancelled in the kernel when its
    /// future is dropped.
    SocketIn,
    /// A socket operation that waits for the socket to be writable
    /// (connect, send).
    SocketOut,
}

/// Defines [`OpKind`] from one table: each kind with its documentation,
/// its [`OpClass`] and its name in messages, all three required.
macro_rules! op_kinds {
    ($($(#[doc = $doc:literal])* $kind:ident: $class:ident, $name:literal;)*) => {
        /// The kind of an operation. Non-exhaustive: kinds are added as
        /// the engine learns new operations, so a `match` outside this
        /// crate needs a `_` arm (inside it every match names each kind).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum OpKind {
            $($(#[doc = $doc])* $kind,)*
        }

        impl OpKind {
            /// Every kind, in the table's order.
            #[cfg(test)]
            pub(crate) const ALL: &'static [OpKind] = &[$(OpKind::$kind,)*];

            /// The class of this kind, as its definition states it.
            pub(crate) const fn class(self) -> OpClass {
                match self {
                    $(OpKind::$kind => OpClass::$class,)*
                }
            }

            /// The name messages use: the kind's one name, in an
            /// [`OpError`](crate::OpError) and a path operation's
            /// [`PathError`](crate::PathError) alike.
            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $(OpKind::$kind => $name,)*
                }
            }
        }
    };
}

op_kinds! {
    /// Positional read into one buffer (`pread`).
    Read: FileData, "read";
    /// Positional write from one buffer (`pwrite`).
    Write: FileData, "write";
    /// Positional read into several buffers (`preadv`).
    ReadVectored: FileData, "vectored read";
    /// Positional write from several buffers (`pwritev`).
    WriteVectored: FileData, "vectored write";
    /// Flush data and metadata (`fsync`).
    Fsync: FileData, "fsync";
    /// Flush data and the metadata needed to read it (`fdatasync`).
    Fdatasync: FileData, "fdatasync";
    /// Allocate, deallocate or zero a range of a file's storage
    /// (`fallocate`). Built with [`Op::fallocate`](crate::Op::fallocate).
    Fallocate: FileData, "fallocate";
    /// Open a file (`openat`); the result is the new descriptor. Issued
    /// through [`Engine::open_batch`](crate::Engine::open_batch).
    Open: Metadata, "open";
    /// Read a file's metadata (`statx`). Issued through
    /// [`Engine::stat_batch`](crate::Engine::stat_batch).
    Stat: Metadata, "statx";
    /// Close a descriptor (`close`). Issued through
    /// [`Engine::close_batch`](crate::Engine::close_batch).
    Close: Metadata, "close";
    /// Make a directory (`mkdirat`). Issued through
    /// [`Engine::mkdir_batch`](crate::Engine::mkdir_batch).
    Mkdir: Metadata, "mkdir";
    /// Make a symbolic link (`symlinkat`). Issued through
    /// [`Engine::symlink_batch`](crate::Engine::symlink_batch).
    Symlink: Metadata, "symlink";
    /// Set a file's length (`ftruncate`), cutting it or extending it with
    /// a hole. Built with [`Op::ftruncate`](crate::Op::ftruncate).
    Ftruncate: Metadata, "ftruncate";
    /// Accept a connection on a listening socket (`accept4`); the result
    /// is the new descriptor.
    Accept: SocketIn, "accept";
    /// Connect a socket (`connect`).
    Connect: SocketOut, "connect";
    /// Receive from a connected socket (`recv`).
    Recv: SocketIn, "recv";
    /// Send on a connected socket (`send`, never raising `SIGPIPE`).
    Send: SocketOut, "send";
    /// Send several buffers in order on a connected socket (`sendmsg`,
    /// never raising `SIGPIPE`).
    SendVectored: SocketOut, "vectored send";
    /// Receive from a connected socket into a buffer the kernel picks from
    /// a registered ring (`recv` with buffer select, once or multishot;
    /// io_uring only).
    RecvSelect: SocketIn, "recv into a provided buffer";
}

impl OpKind {
    /// Whether this is a socket operation, which may wait indefinitely
    /// for a peer (and so is cancelled in the kernel when its future is
    /// dropped).
    pub fn is_socket(self) -> bool {
        match self.class() {
            OpClass::SocketIn | OpClass::SocketOut => true,
            OpClass::FileData | OpClass::Metadata => false,
        }
    }

    /// Whether this is a metadata operation (open, stat, close, mkdir,
    /// symlink, ftruncate) rather than a read, write or fsync of a file's data.
    pub fn is_metadata(self) -> bool {
        match self.class() {
            OpClass::Metadata => true,
            OpClass::FileData | OpClass::SocketIn | OpClass::SocketOut => false,
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_in_exactly_the_class_its_table_row_names() {
        let sockets: Vec<OpKind> = OpKind::ALL
            .iter()
            .copied()
            .filter(|k| k.is_socket())
            .collect();
        let metadata: Vec<OpKind> = OpKind::ALL
            .iter()
            .copied()
            .filter(|k| k.is_metadata())
            .collect();
        use OpKind::*;
        assert_eq!(
            sockets,
            [Accept, Connect, Recv, Send, SendVectored, RecvSelect]
        );
        assert_eq!(metadata, [Open, Stat, Close, Mkdir, Symlink, Ftruncate]);
        for &k in OpKind::ALL {
            let data = k.class() == OpClass::FileData;
            assert_eq!(data, !k.is_socket() && !k.is_metadata(), "{k:?}");
        }
        let names: std::collections::HashSet<String> =
            OpKind::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names.len(),
            OpKind::ALL.len(),
            "every kind has its own name"
        );
    }
}
