//! Reads that lose no bytes when their future is dropped.
//!
//! A `recv` cancelled by dropping its future (a timeout, a `select!`) may
//! still complete with data: the kernel took the bytes off the socket
//! before the cancellation reached it. Those bytes belong to the stream,
//! not to the dropped future. So a read dropped before its result came
//! registers its operation here (a read that completes touches nothing
//! here), and the next read first waits for that operation to finish and
//! hands out whatever it received before receiving anything new. Bytes therefore come out in the
//! order the socket delivered them, and a read cancelled by a timeout
//! either took no bytes or its bytes come back from the next read.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::aio::op::Abandoned;
use crate::aio::{BufResult, IoBufMut};

/// The read state of one stream.
#[derive(Default)]
pub(crate) struct ReadSide {
    state: Mutex<DroppedReads>,
}

/// What dropped reads left behind, for the next read.
#[derive(Default)]
struct DroppedReads {
    /// Reads whose futures were dropped before their results came, oldest
    /// first, until they are settled.
    dropped: VecDeque<Arc<dyn Abandoned>>,
    /// Bytes that dropped reads received, not yet handed out.
    leftover: VecDeque<u8>,
    /// An error a dropped read met, for the next read to report.
    error: Option<i32>,
    /// A dropped read met the end of the stream, for the next read to
    /// report once `leftover` is drained.
    ended: bool,
}

/// What dropped reads left, from [`ReadSide::poll_take`].
pub(crate) enum Taken<T = Vec<u8>> {
    /// Nothing: receive from the socket.
    Nothing,
    /// Bytes they received (or what taking them gave).
    Bytes(T),
    /// One of them failed with this errno.
    Failed(i32),
    /// One of them met the end of the stream.
    Ended,
}

/// What a read should do after [`ReadSide::settle`].
pub(crate) enum Settled {
    /// Nothing was left over: receive from the socket.
    Receive,
    /// Bytes a dropped read received: `n` were copied into the buffer.
    Copied(usize),
    /// A dropped read failed with this errno.
    Failed(i32),
}

impl ReadSide {
    /// Waits for the reads that dropped futures left in the kernel, then
    /// copies leftover bytes into `buf` (up to its length).
    pub(crate) async fn settle<B: IoBufMut>(&self, buf: &mut B) -> Settled {
        // SAFETY: `buf` is valid for writes of `bytes_len` bytes and no
        // operation uses it (we own it, and it was never submitted).
        let out = unsafe { std::slice::from_raw_parts_mut(buf.stable_mut_ptr(), buf.bytes_len()) };
        poll_fn(|cx| self.poll_settle(cx, out)).await
    }

    /// [`settle`](Self::settle) for a borrowed slice. Leftover bytes are
    /// copied straight from where the stream keeps them, and while there
    /// are none, a settled read's bytes go straight to `out` (only what
    /// does not fit is kept), so a read allocates nothing and a stream
    /// keeps no copy of what it hands out at once.
    pub(crate) fn poll_settle(&self, cx: &mut Context<'_>, out: &mut [u8]) -> Poll<Settled> {
        let n = self.settle_direct(cx, out);
        if n > 0 {
            return Poll::Ready(Settled::Copied(n));
        }
        let copy = |left: &mut VecDeque<u8>| {
            let n = left.len().min(out.len());
            let (a, b) = left.as_slices();
            let from_a = a.len().min(n);
            out[..from_a].copy_from_slice(&a[..from_a]);
            out[from_a..n].copy_from_slice(&b[..n - from_a]);
            left.drain(..n);
            n
        };
        Poll::Ready(match std::task::ready!(self.poll_with(cx, copy)) {
            Taken::Nothing => Settled::Receive,
            Taken::Failed(errno) => Settled::Failed(errno),
            Taken::Ended => Settled::Copied(0),
            Taken::Bytes(n) => Settled::Copied(n),
        })
    }

    /// Waits for the reads that dropped futures left in the kernel, then
    /// takes up to `max` leftover bytes; what ended those reads comes after
    /// their bytes.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, max: usize) -> Poll<Taken> {
        self.poll_with(cx, |left| {
            let n = left.len().min(max);
            left.drain(..n).collect()
        })
    }

    /// Waits for the reads that dropped futures left in the kernel, then
    /// lets `take` take leftover bytes (there are some); what ended those
    /// reads comes after their bytes.
    fn poll_with<T>(
        &self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&mut VecDeque<u8>) -> T,
    ) -> Poll<Taken<T>> {
        if self.poll_dropped(cx).is_pending() {
            return Poll::Pending;
        }
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.leftover.is_empty() {
            if let Some(errno) = g.error.take() {
                return Poll::Ready(Taken::Failed(errno));
            }
            if std::mem::take(&mut g.ended) {
                return Poll::Ready(Taken::Ended);
            }
            return Poll::Ready(Taken::Nothing);
        }
        Poll::Ready(Taken::Bytes(take(&mut g.leftover)))
    }

    /// Settles completed dropped reads in order, their bytes straight
    /// into `out`, while nothing is left over from before, nothing has
    /// ended them and `out` has room: the bytes copied (0: none, the usual
    /// path follows). What does not fit `out`, and what ended a read, is
    /// kept for the next read; reads still in the kernel are left for it
    /// too (a pending one has `cx` to wake).
    fn settle_direct(&self, cx: &mut Context<'_>, out: &mut [u8]) -> usize {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let g = &mut *g;
        let mut copied = 0;
        while let Some(op) = g.dropped.front() {
            if !g.leftover.is_empty() || copied == out.len() || g.error.is_some() || g.ended {
                break;
            }
            let Poll::Ready((res, n)) =
                op.poll_settled_split(cx, &mut out[copied..], &mut g.leftover)
            else {
                break;
            };
            copied += n;
            g.dropped.pop_front();
            if res < 0 && res != -libc::ECANCELED {
                g.error.get_or_insert(-res);
            }
            if res == 0 {
                g.ended = true;
            }
        }
        copied
    }

    /// Keeps `bytes` for the next read.
    pub(crate) fn keep(&self, bytes: &[u8]) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.leftover.extend(bytes);
    }

    /// Registers a read in flight whose result the next read collects.
    pub(crate) fn detach(&self, read: Arc<dyn Abandoned>) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.dropped.push_back(read);
    }

    /// Ready once every registered read has completed, its bytes moved to
    /// `leftover`.
    fn poll_dropped(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let g = &mut *g;
        while let Some(op) = g.dropped.front() {
            let Poll::Ready(res) = op.poll_settled(cx, &mut g.leftover) else {
                return Poll::Pending;
            };
            g.dropped.pop_front();
            if res < 0 && res != -libc::ECANCELED {
                g.error.get_or_insert(-res);
            }
            if res == 0 {
                g.ended = true;
            }
        }
        Poll::Ready(())
    }

    /// Runs one read through the kernel; if this future is dropped before
    /// the read's result came, the read is registered for the next one.
    pub(crate) async fn receive<B: IoBufMut>(
        &self,
        fut: crate::aio::op::OpFuture<B>,
    ) -> BufResult<usize, B> {
        let mut guard = DropGuard {
            side: self,
            read: Some(fut.abandoned_handle()),
        };
        let out = fut.await;
        guard.read = None;
        out
    }
}

/// Registers a read with its stream if dropped while still armed.
struct DropGuard<'a> {
    side: &'a ReadSide,
    read: Option<Arc<dyn Abandoned>>,
}

impl Drop for DropGuard<'_> {
    fn drop(&mut self) {
        if let Some(read) = self.read.take() {
            self.side.detach(read);
        }
    }
}
