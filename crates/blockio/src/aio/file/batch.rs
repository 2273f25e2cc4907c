//! The future of several operations submitted together.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::aio::op::{BufResult, OpFuture};
use crate::aio::AsyncEngine;

/// One operation of an async batch ([`AsyncFile::submit`](super::AsyncFile::submit)).
#[derive(Debug)]
pub enum BatchOp<B> {
    /// Read up to `buf.len()` bytes at `offset`.
    Read {
        /// File offset.
        offset: u64,
        /// Where to read into.
        buf: B,
    },
    /// Write `buf` at `offset`.
    Write {
        /// File offset.
        offset: u64,
        /// What to write.
        buf: B,
    },
    /// `fsync`.
    Fsync,
    /// `fdatasync`.
    Fdatasync,
}

pub(super) enum MaybeBuf<B: Send + 'static> {
    Buf(OpFuture<B>),
    NoBuf(OpFuture<()>),
}

/// The future of an async batch: one result per operation, in order, with
/// the buffers handed back (`None` for fsyncs).
#[must_use = "futures do nothing unless polled"]
pub struct BatchFuture<B: Send + 'static> {
    engine: AsyncEngine,
    futs: Vec<MaybeBuf<B>>,
    results: Vec<Option<BufResult<usize, Option<B>>>>,
    started: bool,
}

impl<B: Send + 'static> BatchFuture<B> {
    /// The future of `futs`, started together on the first poll.
    pub(super) fn new(engine: AsyncEngine, futs: Vec<MaybeBuf<B>>) -> BatchFuture<B> {
        BatchFuture {
            engine,
            futs,
            results: Vec::new(),
            started: false,
        }
    }
}

impl<B: Send + 'static> BatchFuture<B> {
    /// Before the batch is submitted: each of its reads (in order) whose
    /// file keeps dropped reads (a pipe, FIFO or character device; see
    /// [`AsyncFile::read_at`](super::AsyncFile::read_at)) waits for them
    /// and takes what they took, as a read of its own would; one that
    /// gets bytes (or their error, or the end) is done, and the others go
    /// with the batch. Pending while a kept read is.
    fn poll_kept_reads(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for (f, slot) in self.futs.iter_mut().zip(self.results.iter_mut()) {
            let MaybeBuf::Buf(f) = f else { continue };
            if slot.is_some() || !f.joins_dropped() {
                continue;
            }
            if let Some(out) = std::task::ready!(f.poll_join(cx)) {
                *slot = Some((out.0, Some(out.1)));
            }
        }
        Poll::Ready(())
    }
}

// Results are moved in and out, never pinned.
impl<B: Send + 'static> Unpin for BatchFuture<B> {}

impl<B: Send + 'static> Future for BatchFuture<B> {
    type Output = Vec<BufResult<usize, Option<B>>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.started {
            if this.results.is_empty() {
                this.results = this.futs.iter().map(|_| None).collect();
            }
            if this.poll_kept_reads(cx).is_pending() {
                return Poll::Pending;
            }
            this.started = true;
            let mut reqs = Vec::with_capacity(this.futs.len());
            for (f, slot) in this.futs.iter_mut().zip(&this.results) {
                if slot.is_some() {
                    // Served by what a kept read took.
                    continue;
                }
                match f {
                    MaybeBuf::Buf(f) => {
                        f.set_waker(cx.waker());
                        reqs.extend(f.start_request());
                    }
                    MaybeBuf::NoBuf(f) => {
                        f.set_waker(cx.waker());
                        reqs.extend(f.start_request());
                    }
                }
            }
            #[cfg(feature = "tokio")]
            crate::aio::paused_clock::hold_clock_for_files(&reqs);
            // One hand-over, so the driver submits the batch in one call.
            this.engine.driver().submit(reqs);
        }
        let mut pending = false;
        for (f, slot) in this.futs.iter_mut().zip(this.results.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let polled = match f {
                MaybeBuf::Buf(f) => Pin::new(f).poll(cx).map(|(r, b)| (r, Some(b))),
                MaybeBuf::NoBuf(f) => Pin::new(f).poll(cx).map(|(r, ())| (r, None)),
            };
            match polled {
                Poll::Ready(r) => *slot = Some(r),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(
            this.results
                .drain(..)
                .map(|r| r.expect("every result is in"))
                .collect(),
        )
    }
}
