//! The pool: where io_uring is unavailable (or `BLOCKIO_BACKEND=threads`),
//! file requests are performed by a pool of threads with blocking calls
//! (`pread`, `pwrite`, ...), and socket requests wait for readiness in an
//! epoll set ([`Readiness`]); both complete the same targets the io_uring
//! drivers do. There is no ring to drive: operations complete on the
//! pool's threads and wake their tasks directly.
//!
//! The worker threads start with the first file request, so a server that
//! only uses sockets runs on the readiness thread (and its runtimes' own
//! readiness sets) alone.

use std::io;
use std::sync::OnceLock;

use super::readiness::Readiness;
use super::request::{Cancel, Request};
use crate::pool::WorkerPool;

/// The pool's threads, and the set watching waiting sockets.
pub(crate) struct PoolDriver {
    /// How many worker threads to start.
    threads: usize,
    /// Performs file operations with blocking calls; started at the first.
    workers: OnceLock<WorkerPool<Request>>,
    /// Performs socket operations when their sockets are ready.
    sockets: Readiness,
}

impl PoolDriver {
    /// Starts the readiness thread; `threads` worker threads are started
    /// by the first file request. With `on_runtimes` (the engine's
    /// driving is [`Driving::Auto`](super::Driving::Auto)), each tokio
    /// runtime whose tasks wait reads a set of its own; otherwise the
    /// readiness thread's set alone serves them.
    pub(crate) fn start(threads: usize, on_runtimes: bool) -> io::Result<PoolDriver> {
        let sockets = if on_runtimes {
            Readiness::on_runtimes()?
        } else {
            Readiness::new()?
        };
        Ok(PoolDriver {
            threads,
            workers: OnceLock::new(),
            sockets,
        })
    }

    /// The set socket requests wait in for readiness.
    pub(crate) fn sockets(&self) -> &Readiness {
        &self.sockets
    }

    /// Worker threads (started or to be started).
    pub(crate) fn threads(&self) -> usize {
        self.workers.get().map_or(self.threads, WorkerPool::threads)
    }

    /// The workers, started now if they are not yet. Not kept when they
    /// fail to start (no thread could be made): the next file request
    /// tries again.
    fn workers(&self) -> io::Result<&WorkerPool<Request>> {
        if let Some(w) = self.workers.get() {
            return Ok(w);
        }
        let w = WorkerPool::new(self.threads, "blockio-aio", Request::run_blocking)?;
        // Workers started meanwhile by another thread win; these stop.
        Ok(self.workers.get_or_init(move || w))
    }

    /// Sends socket requests to the readiness set and file requests to
    /// the workers; a request the workers can no longer take (the pool is
    /// shutting down) completes with `ECANCELED`.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        // Sockets as they come, files gathered for the workers: a lone
        // socket request (most are) allocates no list.
        let mut files = Vec::new();
        for req in reqs {
            if req.op.kind().is_socket() {
                self.sockets.submit(req);
            } else {
                files.push(req);
            }
        }
        if files.is_empty() {
            return;
        }
        match self.workers() {
            Ok(workers) => {
                for req in workers.send(files) {
                    req.done.complete(-libc::ECANCELED);
                }
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EAGAIN);
                for req in files {
                    req.done.complete(-errno);
                }
            }
        }
    }

    /// Completes a socket request waiting for readiness with `ECANCELED`
    /// at once; a file request on a worker cannot be interrupted and
    /// finishes, except a read waiting for its pipe to become readable,
    /// which gives up within 100 ms and completes with `ECANCELED`.
    pub(crate) fn cancel(&self, target: &Cancel) {
        if let Some(done) = target.0.upgrade() {
            done.ask_cancel();
        }
        self.sockets.cancel(target);
    }
}
