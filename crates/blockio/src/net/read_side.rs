//! Reads that lose no bytes when their future is dropped, and whose
//! progress a dropped future does not throw away.
//!
//! A read whose future is dropped before its result came (a timeout, a
//! `select!` whose other branch won) is not cancelled: it stays armed in
//! the kernel, registered here, and the stream's next read joins it
//! instead of starting another: it waits for that read to finish and
//! hands out what it received before receiving anything new. So a loop
//! that polls a read once and drops it whenever another branch is ready
//! (a ticker, a busy channel) still moves the stream's bytes, as on
//! tokio, where the next read finds them on the socket; and bytes come
//! out in the order the socket delivered them, none lost. A dropped read
//! holds its buffer and its place until bytes come, the peer ends the
//! stream or the stream is dropped, which cancels it (a read that
//! completes touches nothing here).
//!
//! The reads of the I/O traits keep one multishot receive armed across
//! reads, where the engine has a ring of provided buffers (see
//! [`ReadSide::keep_armed`]): it posts each buffer it fills, a read takes
//! the bytes already posted, and only the kernel ends it (the ring out of
//! buffers, the end of the stream, an error). Owned reads take from it
//! too; a receive stream, which arms its own, has it cancelled first and
//! takes what it had posted before anything newer.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::recv_stream::{KeepArmed, Multi, Took};
use crate::aio::op::{Abandoned, OpFuture, ReadOut, SliceOut};
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
    dropped: VecDeque<Left>,
    /// Bytes that dropped reads received, not yet handed out.
    leftover: VecDeque<u8>,
    /// An error a dropped read met, for the next read to report.
    error: Option<i32>,
    /// A dropped read met the end of the stream, for the next read to
    /// report once `leftover` is drained.
    ended: bool,
    /// Receive streams still to receive inline (see
    /// [`ReadSide::receive_inline`]).
    inline: u32,
    /// The multishot receive kept armed across reads (see
    /// [`ReadSide::keep_armed`]): what it posts comes after everything
    /// above, and nothing else receives from the socket while it is here.
    kept: Option<Kept>,
}

/// A multishot receive kept armed across reads.
struct Kept {
    multi: Arc<Multi>,
    /// Cancels the receive when dropped with the stream.
    _armed: KeepArmed,
}

impl DroppedReads {
    /// Whether what the socket holds comes right after what reads have
    /// handed out: no bytes kept, no dropped read still in the kernel, no
    /// error or end kept for the next read.
    fn socket_is_next(&self) -> bool {
        self.nothing_kept() && self.kept.is_none()
    }

    /// Whether no bytes, dropped read, error or end is kept for the next
    /// read (a multishot receive kept armed aside).
    fn nothing_kept(&self) -> bool {
        self.leftover.is_empty() && self.dropped.is_empty() && self.error.is_none() && !self.ended
    }
}

/// Receive streams that receive inline after one was dropped pending
/// (see [`ReadSide::receive_inline`]).
const INLINE_AFTER_DROP: u32 = 64;

/// What [`ReadSide::settle_direct`] found.
enum Direct {
    /// What the read does.
    Settled(Settled),
    /// Nothing kept but the multishot receive kept armed: the read takes
    /// what it posted.
    Kept(Arc<Multi>),
    /// Bytes, reads, an error or an end kept: the usual path follows.
    Other,
}

/// A read whose future was dropped before its result came.
struct Left {
    read: Arc<dyn Abandoned>,
    /// What keeps the read armed in the kernel until it completes (its
    /// operation's future); dropped with the stream before that, it
    /// cancels the read.
    _armed: Option<Box<dyn Send>>,
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
        // No operation uses `buf` (we own it, and it was never submitted).
        let mut out = SliceOut::new(crate::aio::bytes_of_mut(buf));
        poll_fn(|cx| self.poll_settle(cx, &mut out)).await
    }

    /// [`settle`](Self::settle) for a borrowed slice. Leftover bytes are
    /// copied straight from where the stream keeps them, and while there
    /// are none, a settled read's bytes go straight to `out` (only what
    /// does not fit is kept), so a read allocates nothing and a stream
    /// keeps no copy of what it hands out at once.
    pub(crate) fn poll_settle(&self, cx: &mut Context<'_>, out: &mut dyn ReadOut) -> Poll<Settled> {
        match self.settle_direct(cx, out) {
            Direct::Settled(settled) => return Poll::Ready(settled),
            Direct::Kept(multi) => {
                if let Some(settled) = self.poll_kept(cx, out, &multi) {
                    return settled;
                }
            }
            Direct::Other => {}
        }
        Poll::Ready(
            match std::task::ready!(self.poll_with(cx, |left| out.put_front(left))) {
                Taken::Nothing => Settled::Receive,
                Taken::Failed(errno) => Settled::Failed(errno),
                Taken::Ended => Settled::Copied(0),
                Taken::Bytes(n) => Settled::Copied(n),
            },
        )
    }

    /// Waits for the reads that dropped futures left in the kernel, then
    /// takes up to `max` leftover bytes; what ended those reads comes after
    /// their bytes.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, max: usize) -> Poll<Taken> {
        self.stop_kept();
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
    /// ended them and `out` has room: [`Settled::Copied`] with the bytes
    /// copied if any, else [`Settled::Receive`] if the stream keeps
    /// nothing at all (no read in flight, no bytes, no end, no error: the
    /// usual case, answered under one lock), else [`Direct::Kept`] if it
    /// keeps only a multishot receive armed, else [`Direct::Other`] and
    /// the usual path follows. What does not fit `out`, and what ended a read, is
    /// kept for the next read; reads still in the kernel are left for it
    /// too (a pending one has `cx` to wake).
    fn settle_direct(&self, cx: &mut Context<'_>, out: &mut dyn ReadOut) -> Direct {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let g = &mut *g;
        let mut copied = 0;
        while let Some(Left { read: op, .. }) = g.dropped.front() {
            if !g.leftover.is_empty() || out.room() == 0 || g.error.is_some() || g.ended {
                break;
            }
            let Poll::Ready((res, n)) = op.poll_settled_split(cx, out, &mut g.leftover) else {
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
        if copied > 0 {
            return Direct::Settled(Settled::Copied(copied));
        }
        if !g.nothing_kept() {
            return Direct::Other;
        }
        match &g.kept {
            Some(kept) => Direct::Kept(kept.multi.clone()),
            None => Direct::Settled(Settled::Receive),
        }
    }

    /// Takes what the multishot receive kept armed posted into `out`,
    /// with no lock of the read side held (the buffers it empties go back
    /// to the ring, which wakes tasks). Once the receive has ended, with
    /// nothing more queued, it is let go: at the end of the stream or on
    /// an error the read reports it, else (out of ring buffers, or
    /// cancelled) the read receives anew.
    ///
    /// On tokio's paused clock, a read that would wait for it has it
    /// stopped instead (`None`: the usual path follows, waiting for the
    /// cancel, then receiving on the runtime's thread), holding the clock
    /// until the cancel has woken the task: the receive is made on the
    /// engine's driver, whose completions the paused clock does not wait
    /// for (see `aio::paused_clock`).
    fn poll_kept(
        &self,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
        multi: &Multi,
    ) -> Option<Poll<Settled>> {
        let settled = match multi.take_into(cx, out) {
            Took::Bytes(n) => return Some(Poll::Ready(Settled::Copied(n))),
            Took::Waiting => {
                let Some(hold) = super::recv_stream::paused_clock_hold() else {
                    return Some(Poll::Pending);
                };
                multi.hold_until_ended(hold);
                self.stop_kept();
                return None;
            }
            Took::End => Settled::Copied(0),
            Took::Failed(errno) => Settled::Failed(errno),
            Took::Stopped => Settled::Receive,
        };
        let gone = {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match &g.kept {
                Some(kept) if std::ptr::eq(Arc::as_ptr(&kept.multi), multi) => g.kept.take(),
                _ => None,
            }
        };
        drop(gone);
        Some(Poll::Ready(settled))
    }

    /// Keeps `multi`, a multishot receive just armed on this stream, for
    /// the reads that follow (`armed` cancels it when dropped). Only when
    /// the socket is next (see [`socket_is_next`](Self::socket_is_next)):
    /// nothing else received from the socket until it is let go.
    pub(super) fn keep_armed(&self, multi: Arc<Multi>, armed: KeepArmed) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.kept = Some(Kept {
            multi,
            _armed: armed,
        });
    }

    /// The multishot receive kept armed across reads, if it is all the
    /// stream keeps (no bytes, dropped read, error or end before it): a
    /// peek takes what it has queued after what the read found.
    pub(super) fn kept_next(&self) -> Option<Arc<Multi>> {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !g.nothing_kept() {
            return None;
        }
        g.kept.as_ref().map(|kept| kept.multi.clone())
    }

    /// Whether a multishot receive is kept armed across reads.
    pub(crate) fn has_kept(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .kept
            .is_some()
    }

    /// Cancels the multishot receive kept armed, if any, and queues it as
    /// a dropped read: its bytes come out first, and nothing else receives
    /// from the socket until it has ended.
    fn stop_kept(&self) {
        let kept = {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let Some(Kept { multi, _armed }) = g.kept.take() else {
                return;
            };
            g.dropped.push_back(Left {
                read: multi,
                _armed: None,
            });
            _armed
        };
        // Cancels it, with the read side unlocked.
        drop(kept);
    }

    /// Whether nothing is left over and no dropped read is in flight: the
    /// stream holds no bytes for its next read.
    pub(crate) fn drained(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.leftover.is_empty() && g.dropped.is_empty()
    }

    /// Keeps `bytes` for the next read.
    pub(crate) fn keep(&self, bytes: &[u8]) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.leftover.extend(bytes);
    }

    /// Gives `bytes`, which a read just took, back to the stream: the
    /// next read returns them first (a peek), then `error` (an errno the
    /// socket gave after them) if no other is waiting.
    pub(crate) fn unread(&self, bytes: &[u8], error: Option<i32>) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for &b in bytes.iter().rev() {
            g.leftover.push_front(b);
        }
        g.error = g.error.or(error);
    }

    /// Gives back bytes that reads took and nobody received: the next
    /// read returns them first, then `error` if no other is waiting or,
    /// with `ended`, the end of the stream, all before anything kept.
    pub(crate) fn give_back(&self, bytes: &[u8], error: Option<i32>, ended: bool) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for &b in bytes.iter().rev() {
            g.leftover.push_front(b);
        }
        g.error = g.error.or(error);
        g.ended |= ended;
    }

    /// Whether what the socket holds comes right after what reads have
    /// handed out: no bytes kept, no dropped read still in the kernel.
    pub(crate) fn socket_is_next(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.socket_is_next()
    }

    /// Notes a receive stream dropped while its receive was pending.
    pub(crate) fn dropped_pending(&self) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.inline = INLINE_AFTER_DROP;
    }

    /// Whether a receive stream about to arm a receive in the kernel
    /// should first receive what the socket holds at once, on the calling
    /// thread: for the [`INLINE_AFTER_DROP`] that follow one dropped
    /// pending. A loop that makes a fresh receive stream each turn and
    /// drops it pending otherwise moves one ring buffer per round trip
    /// through the driver; receiving inline, it moves what the socket
    /// holds in each poll, as tokio's read does.
    pub(crate) fn receive_inline(&self) -> bool {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let inline = g.inline > 0;
        g.inline = g.inline.saturating_sub(1);
        inline
    }

    /// Registers a read in flight whose result the next read collects;
    /// `armed`, if given, keeps it in the kernel until then (dropped with
    /// the stream, it cancels the read).
    pub(crate) fn detach(&self, read: Arc<dyn Abandoned>, armed: Option<Box<dyn Send>>) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.dropped.push_back(Left {
            read,
            _armed: armed,
        });
    }

    /// Lets go of every dropped read still registered and of what they
    /// left (the stream is going): those still in the kernel are
    /// cancelled as their keepers drop, with the read side unlocked.
    pub(crate) fn forget(&self) {
        let gone = std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()));
        drop(gone);
    }

    /// Ready once every registered read has completed, its bytes moved to
    /// `leftover`.
    fn poll_dropped(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let g = &mut *g;
        while let Some(Left { read: op, .. }) = g.dropped.front() {
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
    /// the read's result came, the read stays armed, registered for the
    /// next one to join.
    pub(crate) async fn receive<B: IoBufMut>(&self, fut: OpFuture<B>) -> BufResult<usize, B> {
        let mut armed = Armed {
            side: self,
            read: Some(fut),
        };
        poll_fn(|cx| {
            let fut = armed
                .read
                .as_mut()
                .expect("a read polled after it resolved");
            let out = std::task::ready!(Pin::new(fut).poll(cx));
            armed.read = None;
            Poll::Ready(out)
        })
        .await
    }
}

/// A read in the kernel, registered with its stream, still armed, if
/// dropped before its result came.
struct Armed<'a, B: IoBufMut> {
    side: &'a ReadSide,
    read: Option<OpFuture<B>>,
}

impl<B: IoBufMut> Drop for Armed<'_, B> {
    fn drop(&mut self) {
        let Some(read) = self.read.take() else {
            return;
        };
        // Handed to the driver, or refused before that: only the first
        // has a result to wait for.
        if read.settle_handle().is_some() {
            self.side
                .detach(read.abandoned_handle(), Some(Box::new(read)));
        }
    }
}

/// What dropped reads leave, kept and handed out in order, without system
/// calls (in `scripts/miri`).
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use super::{ReadSide, Settled, Taken};
    use crate::aio::op::{Abandoned, SliceOut};
    use crate::aio::test_bufs::NullWhenEmpty;

    /// A dropped read: pending until given its result and bytes.
    #[derive(Default)]
    struct Fake(Mutex<Option<(i32, Vec<u8>)>>);

    impl Fake {
        fn done(res: i32, bytes: &[u8]) -> Arc<Fake> {
            Arc::new(Fake(Mutex::new(Some((res, bytes.to_vec())))))
        }
    }

    impl Abandoned for Fake {
        fn poll_settled(&self, _cx: &mut Context<'_>, into: &mut VecDeque<u8>) -> Poll<i32> {
            match &*self.0.lock().unwrap() {
                Some((res, bytes)) => {
                    into.extend(bytes);
                    Poll::Ready(*res)
                }
                None => Poll::Pending,
            }
        }
    }

    /// A waker that does nothing (the tests poll again themselves).
    fn noop() -> std::task::Waker {
        futures::task::noop_waker()
    }

    /// Reads get what dropped reads took in order, what does not fit kept
    /// for the next; a read still in flight holds back what is kept (the
    /// next read waits for it, a cancelled one adding nothing); an error
    /// comes after the bytes before it, then the end.
    #[test]
    fn dropped_reads_are_handed_out_in_order() {
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        let side = ReadSide::default();
        let pending = Arc::new(Fake::default());
        side.detach(Fake::done(3, b"one"), None);
        side.detach(pending.clone(), None);
        side.detach(Fake::done(3, b"two"), None);
        assert!(!side.socket_is_next());
        let mut buf = [0u8; 2];
        let got = side.poll_settle(&mut cx, &mut SliceOut::new(&mut buf));
        assert!(matches!(got, Poll::Ready(Settled::Copied(2))));
        assert_eq!(&buf, b"on");
        let mut buf = [0u8; 8];
        let got = side.poll_settle(&mut cx, &mut SliceOut::new(&mut buf));
        assert!(got.is_pending(), "the second read is in flight");
        *pending.0.lock().unwrap() = Some((-libc::ECANCELED, Vec::new()));
        let got = side.poll_settle(&mut cx, &mut SliceOut::new(&mut buf));
        assert!(matches!(got, Poll::Ready(Settled::Copied(4))));
        assert_eq!(&buf[..4], b"etwo");
        side.detach(Fake::done(2, b"ab"), None);
        side.detach(Fake::done(-libc::ECONNRESET, b""), None);
        side.detach(Fake::done(0, b""), None);
        assert!(matches!(side.poll_take(&mut cx, 1), Poll::Ready(Taken::Bytes(b)) if b == b"a"));
        side.unread(b"xy", None);
        let got = side.poll_take(&mut cx, 8);
        assert!(matches!(got, Poll::Ready(Taken::Bytes(b)) if b == b"xyb"));
        let got = side.poll_take(&mut cx, 8);
        assert!(matches!(got, Poll::Ready(Taken::Failed(libc::ECONNRESET))));
        assert!(matches!(
            side.poll_take(&mut cx, 8),
            Poll::Ready(Taken::Ended)
        ));
        assert!(matches!(
            side.poll_take(&mut cx, 8),
            Poll::Ready(Taken::Nothing)
        ));
        assert!(side.socket_is_next() && side.drained());
    }

    /// Bytes given back come before what is kept (bytes left over, then a
    /// dropped read's), the error given with them after them, and the end
    /// given back after everything before it.
    #[test]
    fn bytes_given_back_come_before_what_is_kept() {
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        let side = ReadSide::default();
        side.keep(b"cd");
        side.detach(Fake::done(2, b"ef"), None);
        side.give_back(b"ab", None, false);
        let got = side.poll_take(&mut cx, 16);
        assert!(matches!(got, Poll::Ready(Taken::Bytes(b)) if b == b"abcdef"));
        side.give_back(b"gh", Some(libc::EIO), true);
        let got = side.poll_take(&mut cx, 16);
        assert!(matches!(got, Poll::Ready(Taken::Bytes(b)) if b == b"gh"));
        let got = side.poll_take(&mut cx, 16);
        assert!(matches!(got, Poll::Ready(Taken::Failed(libc::EIO))));
        assert!(matches!(
            side.poll_take(&mut cx, 16),
            Poll::Ready(Taken::Ended)
        ));
        assert!(side.socket_is_next());
    }

    /// Settling into an owned buffer copies the kept bytes into it; an
    /// empty buffer whose pointer is null takes none (and makes no slice
    /// of the null pointer).
    #[test]
    fn settling_into_an_owned_buffer_copies_the_kept_bytes() {
        let side = ReadSide::default();
        side.keep(b"kept");
        let mut buf = NullWhenEmpty(Vec::new());
        let mut settle = Box::pin(side.settle(&mut buf));
        let got = settle.as_mut().poll(&mut Context::from_waker(&noop()));
        assert!(matches!(got, Poll::Ready(Settled::Copied(0))));
        drop(settle);
        let mut buf = NullWhenEmpty(vec![0u8; 3]);
        let mut settle = Box::pin(side.settle(&mut buf));
        let got = settle.as_mut().poll(&mut Context::from_waker(&noop()));
        assert!(matches!(got, Poll::Ready(Settled::Copied(3))));
        drop(settle);
        assert_eq!(buf.0, b"kep");
        side.forget();
        assert!(side.drained());
    }
}
