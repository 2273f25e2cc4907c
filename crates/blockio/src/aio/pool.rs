//! The pool: where io_uring is unavailable (or `BLOCKIO_BACKEND=threads`),
//! file requests are performed by a pool of threads with blocking calls
//! (`pread`, `pwrite`, ...), and socket requests wait for readiness in an
//! epoll set ([`Readiness`]); both complete the same targets the io_uring
//! drivers do. There is no ring to drive: operations complete on the
//! pool's threads and wake their tasks directly.

use std::io;

use super::readiness::Readiness;
use super::request::{Cancel, Request};
use crate::pool::WorkerPool;

/// The pool's threads, and the set watching waiting sockets.
pub(crate) struct PoolDriver {
    /// Performs file operations with blocking calls.
    workers: WorkerPool<Request>,
    /// Performs socket operations when their sockets are ready.
    sockets: Readiness,
}

impl PoolDriver {
    /// Starts `threads` worker threads and the readiness thread.
    pub(crate) fn start(threads: usize) -> io::Result<PoolDriver> {
        Ok(PoolDriver {
            workers: WorkerPool::new(threads, "blockio-aio", Request::run_blocking)?,
            sockets: Readiness::new()?,
        })
    }

    /// Worker threads.
    pub(crate) fn threads(&self) -> usize {
        self.workers.threads()
    }

    /// Sends socket requests to the readiness set and file requests to
    /// the workers; a request the workers can no longer take (the pool is
    /// shutting down) completes with `ECANCELED`.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        let (net, files): (Vec<Request>, Vec<Request>) =
            reqs.into_iter().partition(|r| r.op.kind().is_socket());
        for req in net {
            self.sockets.submit(req);
        }
        for req in self.workers.send(files) {
            req.done.complete(-libc::ECANCELED);
        }
    }

    /// Completes a socket request waiting for readiness with `ECANCELED`
    /// at once; a file request on a worker cannot be interrupted and
    /// finishes.
    pub(crate) fn cancel(&self, target: &Cancel) {
        self.sockets.cancel(target);
    }
}
