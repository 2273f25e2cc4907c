//! One attempt of a socket request's system call on the epoll fallback
//! ([`readiness`](super::readiness)), and what its result says: done,
//! not ready yet, or done with a socket left empty.

use std::io;

use super::ready::Awaits;
use super::request::Request;
use crate::kind::{OpClass, OpKind};

/// What a request of `kind` waits for, as its kind's class says; `None`
/// for the classes that never wait in the set (file data and metadata: a
/// file is always ready, so their first result stands).
pub(crate) fn awaits(kind: OpKind) -> Option<Awaits> {
    match kind.class() {
        OpClass::SocketIn => Some(Awaits::Readable),
        OpClass::SocketOut => Some(Awaits::Writable),
        OpClass::FileData | OpClass::Metadata => None,
    }
}

/// The result of a connect whose socket became writable: its `SO_ERROR`.
fn connect_result(req: &Request) -> i32 {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads one int into a live local.
    let rc = unsafe {
        libc::getsockopt(
            req.op.fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        -err
    } else {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

/// The result of a connect in progress: `EAGAIN` while its socket is not
/// yet writable (asked of the kernel, not of the remembered readiness,
/// which may predate the connect), else its [`connect_result`].
pub(crate) fn connect_progress(req: &Request) -> i32 {
    let mut p = libc::pollfd {
        fd: req.op.fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // libc: rustix's `poll` wants a borrowed descriptor per entry; this
    // is one raw descriptor, held open by the request.
    // SAFETY: one valid pollfd on the stack.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n == 0 {
        -libc::EAGAIN
    } else {
        connect_result(req)
    }
}

/// Whether the kind is a connect, which is not retried once in progress:
/// its outcome is the socket's `SO_ERROR` when it becomes writable. Every
/// other kind is retried with its own system call.
pub(crate) fn is_connect(kind: OpKind) -> bool {
    use OpKind::*;
    match kind {
        Connect => true,
        Accept | Recv | Send | SendVectored | RecvSelect => false,
        Read | Write | ReadVectored | WriteVectored | Fsync | Fdatasync | Fallocate => false,
        Open | Stat | Close | Mkdir | Symlink | Ftruncate => false,
    }
}

/// Makes `req`'s call: its own system call the first time, and again
/// after that, except a connect, whose later attempts ask how the first
/// went ([`connect_progress`]).
pub(crate) fn attempt(req: &Request, first: bool) -> i32 {
    if !first && is_connect(req.op.kind()) {
        connect_progress(req)
    } else {
        req.op.run_blocking_raw()
    }
}

/// Whether `res`, a result of [`attempt`], means "not ready yet".
pub(crate) fn not_ready(req: &Request, res: i32) -> bool {
    res == -libc::EAGAIN
        || res == -libc::EWOULDBLOCK
        || (res == -libc::EINPROGRESS && is_connect(req.op.kind()))
}

/// Whether `res` is a receive's that got some bytes but fewer than it
/// asked for: the socket held no more.
pub(crate) fn short_receive(req: &Request, res: i32) -> bool {
    req.op.kind() == OpKind::Recv && res > 0 && (res as usize) < req.op.byte_len()
}
