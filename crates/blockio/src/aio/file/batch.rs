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

// Results are moved in and out, never pinned.
impl<B: Send + 'static> Unpin for BatchFuture<B> {}

impl<B: Send + 'static> Future for BatchFuture<B> {
    type Output = Vec<BufResult<usize, Option<B>>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.started {
            this.started = true;
            this.results = this.futs.iter().map(|_| None).collect();
            let mut reqs = Vec::with_capacity(this.futs.len());
            for f in &mut this.futs {
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
