//! The future of several operations submitted together.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::Arc;

use super::Handle;
use crate::aio::op::{BufResult, OpFuture};
use crate::aio::request::Request;
use crate::aio::{AsyncEngine, IoBufMut};

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
    /// A read: kept if dropped unfinished, and on a stream run after the
    /// batch's reads before it.
    Read(OpFuture<B>),
    /// A write: on a stream run after the batch's writes before it.
    Write(OpFuture<B>),
    /// An fsync.
    NoBuf(OpFuture<()>),
}

/// The file of a batch whose reads or writes go to a stream (a pipe, FIFO,
/// socket or character device), and how to see the bytes of a buffer.
pub(super) struct StreamFile<B> {
    handle: Arc<Handle>,
    bytes_of: fn(&B, usize) -> &[u8],
}

impl<B: IoBufMut> StreamFile<B> {
    /// `handle`'s file, if it is a stream.
    pub(super) fn of(handle: &Arc<Handle>) -> Option<StreamFile<B>> {
        handle.is_stream().then(|| StreamFile {
            handle: handle.clone(),
            bytes_of: crate::aio::bytes_of::<B>,
        })
    }
}

/// The future of an async batch: one result per operation, in order, with
/// the buffers handed back (`None` for fsyncs).
#[must_use = "futures do nothing unless polled"]
pub struct BatchFuture<B: Send + 'static> {
    engine: AsyncEngine,
    futs: Vec<MaybeBuf<B>>,
    results: Vec<Option<BufResult<usize, Option<B>>>>,
    /// The file, if it is a stream: its reads run one after another, as
    /// do its writes, and what the finished reads took goes back to the
    /// file if the batch is dropped unfinished.
    stream: Option<StreamFile<B>>,
    /// Per operation: a read (a write) of a stream not submitted yet,
    /// waiting for the batch's reads (writes) before it.
    held: Vec<bool>,
    started: bool,
}

impl<B: Send + 'static> BatchFuture<B> {
    /// The future of `futs`, started together on the first poll (but the
    /// reads of `stream` one after another, and its writes).
    pub(super) fn new(
        engine: AsyncEngine,
        futs: Vec<MaybeBuf<B>>,
        stream: Option<StreamFile<B>>,
    ) -> BatchFuture<B> {
        BatchFuture {
            engine,
            futs,
            results: Vec::new(),
            stream,
            held: Vec::new(),
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
            let MaybeBuf::Read(f) = f else { continue };
            if slot.is_some() || !f.joins_dropped() {
                continue;
            }
            if let Some(out) = std::task::ready!(f.poll_join(cx)) {
                *slot = Some((out.0, Some(out.1)));
            }
        }
        Poll::Ready(())
    }

    /// Submits the batch in one hand-over to the driver: every operation
    /// not already served, but on a stream only the first read not
    /// served and the first write; the reads and writes after them are
    /// held (see [`poll_each`](Self::poll_each)).
    fn submit_all(&mut self, cx: &mut Context<'_>) {
        let mut reqs = Vec::with_capacity(self.futs.len());
        self.held = vec![false; self.futs.len()];
        let stream = self.stream.is_some();
        // A read (a write) of the stream goes: the reads (writes) after it
        // are held.
        let (mut read_going, mut write_going) = (false, false);
        let ops = self.futs.iter_mut().zip(&self.results).zip(&mut self.held);
        for ((f, slot), held) in ops {
            if slot.is_some() {
                // Served by what a kept read took.
                continue;
            }
            match f {
                MaybeBuf::Read(_) if stream && read_going => *held = true,
                MaybeBuf::Read(f) => {
                    read_going = true;
                    start(f, cx, &mut reqs);
                }
                MaybeBuf::Write(_) if stream && write_going => *held = true,
                MaybeBuf::Write(f) => {
                    write_going = true;
                    start(f, cx, &mut reqs);
                }
                MaybeBuf::NoBuf(f) => start(f, cx, &mut reqs),
            }
        }
        #[cfg(feature = "tokio")]
        crate::aio::paused_clock::hold_clock_for_files(&reqs);
        self.engine.driver().submit(reqs);
    }

    /// Polls every operation not done, in order; a held read of a stream
    /// goes (polled as a read of its own: it takes what the file keeps
    /// first, or is submitted) once the batch's reads before it are done,
    /// and a held write (submitted as a write of its own) once the
    /// batch's writes before it are. Ready with every result once all are
    /// in.
    fn poll_each(&mut self, cx: &mut Context<'_>) -> Poll<Vec<BufResult<usize, Option<B>>>> {
        let mut pending = false;
        // A read (a write) of the stream still running: the held reads
        // (writes) wait.
        let (mut read_running, mut write_running) = (false, false);
        let stream = self.stream.is_some();
        // (an fsync is never held)
        let mut unordered = false;
        for ((f, slot), held) in self
            .futs
            .iter_mut()
            .zip(self.results.iter_mut())
            .zip(&mut self.held)
        {
            if slot.is_some() {
                continue;
            }
            let running = match f {
                MaybeBuf::Read(_) => &mut read_running,
                MaybeBuf::Write(_) => &mut write_running,
                MaybeBuf::NoBuf(_) => &mut unordered,
            };
            if *held && *running {
                pending = true;
                continue;
            }
            *held = false;
            let polled = match f {
                MaybeBuf::Read(f) | MaybeBuf::Write(f) => {
                    Pin::new(f).poll(cx).map(|(r, b)| (r, Some(b)))
                }
                MaybeBuf::NoBuf(f) => Pin::new(f).poll(cx).map(|(r, ())| (r, None)),
            };
            match polled {
                Poll::Ready(r) => *slot = Some(r),
                Poll::Pending => {
                    pending = true;
                    *running |= stream;
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(
            self.results
                .drain(..)
                .map(|r| r.expect("every result is in"))
                .collect(),
        )
    }
}

/// Takes `f`'s request out for a batch's submission, its waker set first
/// (a completion racing the submission finds it).
fn start<T: Send + 'static>(f: &mut OpFuture<T>, cx: &Context<'_>, reqs: &mut Vec<Request>) {
    f.set_waker(cx.waker());
    reqs.extend(f.start_request());
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
            this.submit_all(cx);
        }
        this.poll_each(cx)
    }
}

impl<B: Send + 'static> Drop for BatchFuture<B> {
    /// Dropped unfinished, a batch of a stream's reads gives what its
    /// finished reads took back to the file, for its next read, in the
    /// batch's order (their results it never handed out): before what
    /// the file keeps (a read that took bytes the file kept took them
    /// from its front, and a read that went to the kernel found it
    /// keeping nothing), and before its unfinished read (at most one: they
    /// run one after another), which is then dropped with the batch and
    /// kept after them, as any dropped read is.
    fn drop(&mut self) {
        let Some(stream) = &self.stream else {
            return;
        };
        let (mut bytes, mut error, mut ended) = (Vec::new(), None, false);
        for (f, slot) in self.futs.iter().zip(&self.results) {
            let (MaybeBuf::Read(_), Some((res, Some(buf)))) = (f, slot) else {
                continue;
            };
            match res {
                Ok(n) => {
                    bytes.extend_from_slice((stream.bytes_of)(buf, *n));
                    // A read into no bytes says nothing of the end.
                    let room = (stream.bytes_of)(buf, usize::MAX).len();
                    ended |= *n == 0 && room > 0;
                }
                Err(e) => {
                    let errno = crate::errno(e).filter(|&e| e != libc::ECANCELED);
                    error = error.or(errno);
                }
            }
        }
        stream.handle.give_back(&bytes, error, ended);
    }
}
