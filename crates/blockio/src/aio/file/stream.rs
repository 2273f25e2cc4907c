//! Streaming: a cursor with read-ahead and write-behind.
//!
//! On a file without offsets (a pipe, FIFO, socket or terminal, which
//! `lseek` refuses with `ESPIPE`) there is nothing to read ahead of or
//! write behind: the bytes come and go in the order the calls are made,
//! and several calls in flight on one pipe may be served in another order,
//! and a short read there is only what was available. So such a stream
//! has one read and one write in flight at a time, at the descriptor's
//! own position (offset 0, which the thread pool's `pread` falls back to
//! `read` at), the end only at a 0-byte read, short writes completed, and
//! seeks refused with `ESPIPE` as `std::fs::File`'s are.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, SeekFrom};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::AsyncFile;
use crate::aio::op::{OpFuture, ReadOut};
use crate::buf::AlignedBuf;

/// The most a stream's read of cached data copies straight into the
/// caller's buffer in one system call (see `AsyncFile::read_cached`): as
/// much as a thread serves inline in one run before it yields.
const CACHED_MAX: usize = 1 << 20;

/// The streaming state: cursor, read-ahead and write-behind.
pub(super) struct Stream {
    /// A seek started by tokio's `AsyncSeek::start_seek`.
    #[cfg(feature = "tokio")]
    pub(super) pending_seek: Option<SeekFrom>,
    pub(super) pos: u64,
    block: usize,
    depth: usize,
    align: usize,
    /// Reads in flight ahead of the cursor, in file order.
    ahead: VecDeque<(u64, OpFuture<AlignedBuf>)>,
    /// The next read-ahead offset.
    next: u64,
    /// Once a read came back short: the end of the file.
    eof_at: Option<u64>,
    /// The block being consumed: buffer, start, end.
    cur: Option<(AlignedBuf, usize, usize)>,
    /// The block being filled by writes, and its file offset.
    wbuf: Option<(AlignedBuf, usize, u64)>,
    /// Writes in flight: offset, length, bytes written before this
    /// operation (the rest of a short write to a file without offsets),
    /// future.
    behind: VecDeque<(u64, usize, usize, OpFuture<AlignedBuf>)>,
    spare: Vec<AlignedBuf>,
    /// Whether the file has offsets (see the module's comment), asked at
    /// the first streaming call: a file made for positional calls only
    /// (as the Python package makes one per call) pays nothing.
    seekable: Option<bool>,
}

/// Whether `fd` has a file offset to read ahead of: not a pipe, FIFO,
/// socket or a character device without one, such as a terminal (`lseek`
/// refuses those with `ESPIPE`). Regular files, directories and block
/// devices (the files `may_wait_forever` trusts) are not asked again.
fn seekable(fd: RawFd) -> bool {
    if !crate::aio::op::may_wait_forever(fd) {
        return true;
    }
    // SAFETY: `lseek` by 0 from the current position moves nothing; any
    // number is allowed (a closed one fails with EBADF).
    let rc = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
    !(rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESPIPE))
}

impl Stream {
    pub(super) fn new(block: usize, depth: usize, align: usize) -> Stream {
        Stream {
            #[cfg(feature = "tokio")]
            pending_seek: None,
            pos: 0,
            block,
            depth,
            align,
            ahead: VecDeque::new(),
            next: 0,
            eof_at: None,
            cur: None,
            wbuf: None,
            behind: VecDeque::new(),
            spare: Vec::new(),
            seekable: None,
        }
    }

    fn buffer(&mut self) -> AlignedBuf {
        self.spare
            .pop()
            .unwrap_or_else(|| AlignedBuf::new(self.block, self.align.max(4096)))
    }

    /// Copies into `out` what is left of the block being consumed and
    /// moves the cursor past it: the bytes copied, or `None` once that
    /// block is spent (it goes back to the spare buffers) or there is none.
    fn take_current(&mut self, out: &mut dyn ReadOut) -> Option<usize> {
        let (b, start, end) = self.cur.as_mut()?;
        if *start < *end {
            let n = out.room().min(*end - *start);
            out.put(&b[*start..*start + n]);
            *start += n;
            self.pos += n as u64;
            return Some(n);
        }
        let (b, _, _) = self.cur.take().expect("checked above");
        self.spare.push(b);
        None
    }

    /// Forgets read-ahead (dropping in-flight reads is safe: their buffers
    /// stay with the driver until they complete).
    fn reset_reads(&mut self) {
        self.ahead.clear();
        if let Some((b, _, _)) = self.cur.take() {
            self.spare.push(b);
        }
        self.next = self.pos - self.pos % self.align as u64;
        self.eof_at = None;
    }
}

impl AsyncFile {
    /// Whether this file has offsets, asked once.
    pub(super) fn seekable(&mut self) -> bool {
        let fd = self.handle.file.as_raw_fd();
        *self.stream.seekable.get_or_insert_with(|| seekable(fd))
    }

    /// Reads into `out` (a caller's slice, or a tokio `ReadBuf` whose
    /// unfilled part is written without being zeroed first).
    pub(super) fn poll_read_inner(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
    ) -> Poll<io::Result<usize>> {
        // Without offsets the two directions are independent (a socket
        // read and written at once, its halves split): a read waits for no
        // write, or a peer echoing what it reads could never be read from
        // while the writes wait for it to read. It only sends what was
        // written and not yet sent.
        let seekable = self.seekable();
        if seekable && (self.stream.wbuf.is_some() || !self.stream.behind.is_empty()) {
            ready!(self.poll_flush_inner(cx))?;
        } else if !seekable && self.stream.wbuf.is_some() && self.stream.behind.is_empty() {
            // The block being filled is sent, not waited for: a peer
            // answering what was written must have it (one write in flight
            // at most: `poll_write` fills a block only once none is).
            self.issue_write(Some(cx.waker()));
        }
        if out.room() == 0 {
            return Poll::Ready(Ok(0));
        }
        if !seekable {
            return self.poll_read_unseekable(cx, out);
        }
        loop {
            let s = &mut self.stream;
            if let Some(n) = s.take_current(out) {
                return Poll::Ready(Ok(n));
            }
            // Nothing read ahead: cached data is served on this thread.
            if s.ahead.is_empty() && s.eof_at.map_or(true, |e| s.pos < e) {
                match self.read_cached(cx, out) {
                    Poll::Ready(Some(n)) => return Poll::Ready(Ok(n)),
                    Poll::Ready(None) => {}
                    Poll::Pending => return Poll::Pending,
                }
                if self.stream.cur.is_some() {
                    continue;
                }
            }
            self.read_ahead(cx);
            let s = &mut self.stream;
            let Some((off, f)) = s.ahead.front_mut() else {
                return Poll::Ready(Ok(0));
            };
            let off = *off;
            let (res, b) = match Pin::new(f).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            };
            s.ahead.pop_front();
            let n = match res {
                Ok(n) => n,
                Err(e) => {
                    s.spare.push(b);
                    s.reset_reads();
                    return Poll::Ready(Err(e));
                }
            };
            if n < s.block {
                s.eof_at = Some(off + n as u64);
            }
            let skip = s.pos.saturating_sub(off) as usize;
            if n == 0 || skip >= n {
                s.spare.push(b);
                if s.eof_at.is_some_and(|e| s.pos >= e) {
                    s.ahead.clear();
                    return Poll::Ready(Ok(0));
                }
                continue;
            }
            s.cur = Some((b, skip, n));
        }
    }

    /// Starts reads through the engine ahead of the cursor, up to the
    /// stream's depth and not past a known end.
    fn read_ahead(&mut self, cx: &mut Context<'_>) {
        let s = &mut self.stream;
        while s.ahead.len() < s.depth && s.eof_at.map_or(true, |e| s.next < e) {
            let buf = s.buffer();
            let mut f = self.handle.read_into(&self.engine, buf, 0, s.next);
            f.set_waker(cx.waker());
            f.start();
            s.ahead.push_back((s.next, f));
            // Past the largest offset (which the reads are refused at)
            // nothing is read ahead.
            let Some(next) = s.next.checked_add(s.block as u64) else {
                s.eof_at = Some(s.next);
                break;
            };
            s.next = next;
        }
    }

    /// Serves the read at the cursor from the page cache on the polling
    /// thread (`preadv2(RWF_NOWAIT)`, as a positional read's first poll
    /// does: see `inline.rs`), when nothing is read ahead: straight into
    /// `out` when it has room for a whole block (up to [`CACHED_MAX`]
    /// bytes, one system call and one copy), else a block into the
    /// stream's own buffer, which `out` takes from as from a block the
    /// driver read. `Some(n)` once `n` bytes went into `out`; `None` with
    /// nothing served into `out` (the block may now be the current one, or
    /// nothing was cached, and the driver reads ahead as before). `Some(0)`
    /// is the end of the file as it is now: not kept, as `std::fs::File`
    /// keeps none (a later read finds what was appended since).
    /// Pending (the task woken) when this thread's run of reads served
    /// inline is spent, as any inline read yields then.
    fn read_cached(&mut self, cx: &mut Context<'_>, out: &mut dyn ReadOut) -> Poll<Option<usize>> {
        if !crate::aio::op::inline_turn_left(cx) {
            return Poll::Pending;
        }
        let fd = self.handle.file.as_raw_fd();
        let s = &mut self.stream;
        let pos = s.pos;
        // SAFETY: only the bytes `preadv2` reports written are counted
        // filled (`advance` below); nothing uninitialised is written.
        let direct = unsafe { out.unfilled() };
        if direct.len() >= s.block {
            let len = direct.len().min(CACHED_MAX);
            let Some(n) = self
                .handle
                .inline_reads
                .try_stream(fd, &mut direct[..len], pos)
            else {
                return Poll::Ready(None);
            };
            // SAFETY: `preadv2` wrote these `n` bytes (at most `len`).
            unsafe { out.advance(n) };
            s.pos += n as u64;
            s.next = s.pos;
            crate::aio::op::count_inline_turn(n);
            self.engine.count_inline();
            return Poll::Ready(Some(n));
        }
        let mut b = s.buffer();
        // SAFETY: initialised bytes seen as possibly uninitialised, which
        // only `preadv2` writes to.
        let area = unsafe {
            std::slice::from_raw_parts_mut(
                b.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(),
                b.len(),
            )
        };
        match self.handle.inline_reads.try_stream(fd, area, pos) {
            Some(0) => {
                s.spare.push(b);
                // Counted as every call is, so that a loop reading at the
                // end (a tail) yields as the direct path's does.
                crate::aio::op::count_inline_turn(0);
                self.engine.count_inline();
                return Poll::Ready(Some(0));
            }
            Some(n) => {
                crate::aio::op::count_inline_turn(n);
                s.next = pos + n as u64;
                s.cur = Some((b, 0, n));
                self.engine.count_inline();
            }
            None => s.spare.push(b),
        }
        Poll::Ready(None)
    }

    /// A read of a file without offsets: one read in flight, at the
    /// descriptor's position; a short read is what was there, only 0 bytes
    /// is the end (and not kept: a terminal reads on after it).
    fn poll_read_unseekable(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut dyn ReadOut,
    ) -> Poll<io::Result<usize>> {
        loop {
            let s = &mut self.stream;
            if let Some(n) = s.take_current(out) {
                return Poll::Ready(Ok(n));
            }
            if s.ahead.is_empty() {
                let buf = s.buffer();
                let mut f = self.handle.read_into(&self.engine, buf, 0, 0);
                f.set_waker(cx.waker());
                f.start();
                s.ahead.push_back((0, f));
            }
            let (_, f) = s.ahead.front_mut().expect("pushed above");
            let (res, b) = ready!(Pin::new(f).poll(cx));
            s.ahead.pop_front();
            match res {
                Ok(n) if n > 0 => s.cur = Some((b, 0, n)),
                Ok(_) => {
                    s.spare.push(b);
                    return Poll::Ready(Ok(0));
                }
                Err(e) => {
                    s.spare.push(b);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    pub(super) fn poll_write_inner(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        // Without offsets reads and writes do not meet: the bytes read
        // (and the read in flight) are kept for the next `poll_read`.
        let seekable = self.seekable();
        if seekable && (self.stream.cur.is_some() || !self.stream.ahead.is_empty()) {
            self.stream.reset_reads();
        }
        // Bound the write-behind before accepting more (without offsets,
        // one write in flight: more could land out of order).
        let depth = if seekable { self.stream.depth } else { 1 };
        while self.stream.behind.len() >= depth {
            ready!(self.poll_oldest_write(cx))?;
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let s = &mut self.stream;
        if s.wbuf.is_none() {
            let b = s.buffer();
            s.wbuf = Some((b, 0, s.pos));
        }
        let (b, len, _) = s.wbuf.as_mut().expect("set above");
        let n = data.len().min(s.block - *len);
        b[*len..*len + n].copy_from_slice(&data[..n]);
        *len += n;
        s.pos += n as u64;
        if *len == s.block {
            self.issue_write(Some(cx.waker()));
        }
        Poll::Ready(Ok(n))
    }

    /// Sends the block being filled to the kernel; `waker` (if any) is
    /// woken when it completes.
    fn issue_write(&mut self, waker: Option<&std::task::Waker>) {
        if let Some((b, len, off)) = self.stream.wbuf.take() {
            let mut b = b;
            if len < b.len() {
                // A partial block: write only what was filled.
                let mut part = AlignedBuf::new(len, self.stream.align.max(4096));
                part.copy_from_slice(&b[..len]);
                self.stream.spare.push(b);
                b = part;
            }
            let at = if self.seekable() { off } else { 0 };
            let mut f = self.write_at(b, at);
            if let Some(w) = waker {
                f.set_waker(w);
            }
            // Bytes `poll_write` already accepted: never refused half-way
            // (see `OpFuture::resume`), even from `Drop`.
            f.resume();
            self.stream.behind.push_back((off, len, 0, f));
        }
    }

    fn poll_oldest_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some((off, len, done, f)) = self.stream.behind.front_mut() else {
                return Poll::Ready(Ok(()));
            };
            let (off, len, done) = (*off, *len, *done);
            let (res, b) = match Pin::new(f).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            };
            self.stream.behind.pop_front();
            let res = res.map(|n| done + n);
            if let Ok(n) = res {
                // A pipe takes what it has room for: the rest goes next,
                // still alone in flight (the write-behind holds one there).
                if n > done && n < len && !self.seekable() {
                    let mut f = self.write_part(b, n, 0);
                    f.set_waker(cx.waker());
                    f.resume();
                    self.stream.behind.push_front((off, len, n, f));
                    continue;
                }
            }
            if b.len() == self.stream.block {
                self.stream.spare.push(b);
            }
            return match res {
                Ok(n) if n == len => Poll::Ready(Ok(())),
                Ok(n) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write at offset {off}: {n} of {len} bytes"),
                ))),
                Err(e) => Poll::Ready(Err(e)),
            };
        }
    }

    pub(super) fn poll_flush_inner(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Without offsets the block being filled waits for the write in
        // flight (`poll_write` keeps one there at most).
        if self.stream.wbuf.is_some() && !self.seekable() {
            ready!(self.poll_oldest_write(cx))?;
        }
        if self.stream.wbuf.is_some() {
            self.issue_write(Some(cx.waker()));
        }
        while !self.stream.behind.is_empty() {
            match self.poll_oldest_write(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => {
                    self.stream.behind.clear();
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Flushes pending writes, then moves the cursor.
    pub(super) fn poll_seek_inner(
        &mut self,
        cx: &mut Context<'_>,
        pos: SeekFrom,
    ) -> Poll<io::Result<u64>> {
        if !self.seekable() {
            // As `lseek` (and so `std::fs::File::seek`) refuses it.
            return Poll::Ready(Err(io::Error::from_raw_os_error(libc::ESPIPE)));
        }
        ready!(self.poll_flush_inner(cx))?;
        Poll::Ready(self.seek_inner(pos))
    }

    fn seek_inner(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(d) => self.stream.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.handle.file.metadata()?.len().checked_add_signed(d),
        };
        // The kernel's file offsets are signed: beyond i64::MAX no read
        // or write can be made (lseek refuses it too).
        let target = target.filter(|&t| t <= i64::MAX as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "seek to {pos:?} from {} is out of range (file offsets go up to {})",
                    self.stream.pos,
                    i64::MAX
                ),
            )
        })?;
        if target != self.stream.pos {
            self.stream.pos = target;
            self.stream.reset_reads();
        }
        Ok(target)
    }
}

impl Drop for AsyncFile {
    /// Finishes what `poll_write` accepted, without blocking: the block
    /// being filled goes to the driver now, and every write not yet
    /// complete (this one included) is performed and left to complete
    /// with its future gone; each keeps its buffer and the file open until
    /// then. Their errors have nobody to go to: flush (or close) first to
    /// see them. On a pipe or FIFO (which may wait for a reader forever)
    /// the writes not yet complete are cancelled instead, and on a file
    /// without offsets the block being filled goes only if no write is in
    /// flight (two could land out of order): there, bytes not flushed
    /// before the drop may never arrive.
    fn drop(&mut self) {
        // Dropped reads kept for the next read are cancelled: there is
        // none (they hold the file, so this is the only place they go).
        self.handle
            .open
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.handle.dropped.side.forget();
        // Without offsets a second write in flight could land before the
        // first: the block being filled goes only if none is.
        if self.stream.wbuf.is_some() && (self.stream.behind.is_empty() || self.seekable()) {
            self.issue_write(None);
        }
        // Writes still waiting for room in the ring or for a pool thread
        // would be skipped with their futures gone: detached, they run.
        // On a pipe or FIFO (which may wait for a reader forever) they are
        // cancelled instead, as any dropped operation there is.
        if !crate::aio::op::may_wait_forever(self.handle.file.as_raw_fd()) {
            for (_, _, _, f) in self.stream.behind.drain(..) {
                f.detach();
            }
        }
    }
}
