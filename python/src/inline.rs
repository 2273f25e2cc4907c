//! `FileState`, the base of a `blockio.open` binary file object: the
//! file's whole state (position, read-ahead and write buffers, mode, the
//! descriptor, engine and call queue it uses), kept once, and its most
//! frequent calls served from it without suspending: [`seek_inline`],
//! [`read_inline`], [`readinto_inline`], [`readline_inline`],
//! [`tell_inline`] and [`write_inline`].
//!
//! A random read is a `seek` and a `read` of a cached block, so these two
//! calls are what a random-access workload pays per block besides the
//! `preadv2` itself; reading lines is a `readline` per line, mostly from
//! the buffer. Done in Python, a `seek` and a `read` cost about 500 ns
//! (attribute loads and stores, the checks, taking and giving back the call
//! queue's `free` item), a `readline` or a small `write` through the call
//! queue about 3 µs;
//! here each is one call, on fields of the object itself. The rest of the
//! file's methods are Python (`blockio/_file.py`): they read and set the
//! fields as attributes (`_pos`, `_wbuf`, `_stream`...); what only the
//! calls served here use (the descriptor's number, the call queue's `free`
//! list, the engine's core) is given once ([`FileState::_serve`]).
//!
//! Both calls run holding the GIL from start to end (the `preadv2` and the
//! `lseek` included), so "no call on the file in progress" (the queue's
//! `free` list holds its item) cannot change while they run: they need not
//! take the item, only see it there. When a call cannot be served inline
//! (another call in progress, buffered writes, a read that would wait, a
//! stream), they answer so, and the Python method goes through the queue.

use std::os::fd::RawFd;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyList, PyTuple};
use pyo3::PyTraverseError;
use pyo3::PyVisit;

use crate::call::{FileCall, Op};
use crate::inline_read::{Piece, INLINE_MAX, INLINE_PIECE};
use crate::turns;
use crate::Core;

/// The largest offset [`seek_inline`] takes: past it, whether the file system
/// takes the position is for its `lseek` to say (see `AsyncFile._seek`).
pub(crate) const INLINE_OFFSET: i64 = 1 << 40;

/// The most a buffered file reads ahead inline once its reads have gone on
/// in order for a while (see [`FileState::next_fill`]): a loop of small
/// `read(n)`s then costs one `preadv2` per 128 KiB instead of one per
/// buffer (8 KiB by default) or per call, as an `os.pread` loop does.
/// Bytes read ahead are those `read` would have read from the file at that
/// moment, as a built-in buffered file's are, over a window this wide.
pub(crate) const SEQUENTIAL_AHEAD: usize = 128 << 10;

/// A binary file object's state, all of it: position, read-ahead and
/// write buffers, mode, what it reads and writes through, and whether its
/// calls may be served inline. Subclassed by `blockio._file.AsyncFile`,
/// whose methods read and set these fields as attributes; the file keeps
/// no state of its own besides (its `__dict__` holds only what a user
/// sets).
#[pyclass(subclass, module = "blockio._blockio")]
pub(crate) struct FileState {
    /// The logical position: where the next read or write happens.
    #[pyo3(get, set, name = "_pos")]
    pos: i64,
    /// Read ahead: `rbuf[roff..]` are the bytes at `pos` on (a `bytes`,
    /// empty exactly when nothing is held).
    #[pyo3(get, set, name = "_rbuf")]
    rbuf: PyObject,
    #[pyo3(get, set, name = "_roff")]
    roff: usize,
    /// Written, not flushed: the bytes end at `pos` (not in append mode).
    #[pyo3(get, set, name = "_wbuf")]
    wbuf: Py<PyByteArray>,
    /// Where the bytes of `wbuf` go (not in append mode).
    #[pyo3(get, set, name = "_wpos")]
    wpos: i64,
    /// In append mode after a write (and on open): the position is the
    /// file's end, looked up when it is needed.
    #[pyo3(get, set, name = "_at_end")]
    at_end: bool,
    /// The position was set by a seek from the start placed behind
    /// writes in progress, and no write was placed since: the next
    /// write's offset does not follow the one placed before it, which the
    /// core then makes even if that one fails (see `AsyncFile._write_at`).
    #[pyo3(get, set, name = "_anchored")]
    anchored: bool,
    /// In append mode, after a `seek` from the end (or a `truncate(n)` at
    /// the end) placed behind writes in progress: `(token, offset)`, the
    /// position being the end the file's write queue finds when it
    /// reaches that token's mark, plus `offset`; set by the call that
    /// placed it once the mark is answered (or by a call that takes the
    /// queue over: `AsyncFile._writes_settled`). A `seek` from the
    /// position waits for that call rather than join it; a `tell` places a
    /// mark relative to it, and a `truncate()` a truncation relative to it.
    #[pyo3(get, set, name = "_pending")]
    pending: Option<(u64, i64)>,
    /// How many times the position was set again independently of the
    /// writes placed before: by a write placed after a seek from the
    /// start (which makes the file's write queue whole again behind a
    /// failure), or by a seek whose flush failed (moving it back after the
    /// bytes kept). A write that fails then leaves the position alone
    /// (see `AsyncFile._write_at`).
    #[pyo3(get, set, name = "_anchors")]
    anchors: u64,
    /// Seeks made by queued calls (`AsyncFile._seek_to`): a seek whose
    /// answer comes later moves the position only if no seek came since
    /// (see `AsyncFile._rebased`). (An inline seek runs only while no
    /// queued call does: never while such a seek waits.)
    #[pyo3(get, set, name = "_seeks")]
    seeks: u64,
    /// How far the answers of seeks placed behind a write that stopped
    /// short moved the position back in all (see `AsyncFile._rebased`):
    /// a write placed before such an answer, ending after it, moves its
    /// offsets back as much (see `AsyncFile._write_at`).
    #[pyo3(get, set, name = "_shifted")]
    shifted: i64,
    /// The next read is the first since a seek: it reads what it asks for
    /// and no more.
    #[pyo3(get, name = "_seeked")]
    seeked: bool,
    /// `seek` and `tell` may be served inline: a seekable file, open,
    /// with no writes buffered and its position known (see
    /// [`FileState::_set_inline`]).
    #[pyo3(get, name = "_inline")]
    inline: bool,
    /// `read`, `readinto` and `readline` may be served inline: `inline`, and the file
    /// reads.
    #[pyo3(get, name = "_inline_read")]
    inline_read: bool,
    /// `write` may be served inline: a buffered seekable file, open,
    /// writing, not in append mode (the first bytes after a flush only
    /// while `inline` too: see [`write_inline`]).
    #[pyo3(get, name = "_inline_write")]
    inline_write: bool,
    /// The descriptor's number is known outside the file: its offset is
    /// kept at the position (see `AsyncFile._sync_offset`).
    #[pyo3(get, set, name = "_shared")]
    shared: bool,
    /// The file was opened for reading, for writing, in append mode.
    #[pyo3(get, set, name = "_readable")]
    readable: bool,
    #[pyo3(get, set, name = "_writable")]
    writable: bool,
    #[pyo3(get, set, name = "_append")]
    append: bool,
    /// Not seekable (a pipe, socket or terminal): read and written in
    /// order, with no position; read on the loop's thread
    /// (`AsyncFile._read_stream`), written on threads (`_StreamCall`).
    #[pyo3(get, set, name = "_stream")]
    stream: bool,
    /// The messages of a datagram socket that a cancelled unbuffered read
    /// took and put back (a tuple of `bytes`): the next reads return each
    /// alone, first (see `AsyncFile._put_back_stream`).
    #[pyo3(get, set, name = "_messages")]
    messages: PyObject,
    /// The last write to a stream, which the next follows; the wait for
    /// an unbuffered stream to become readable left by a cancelled
    /// `readline` (each a `_StreamCall`, or `None`).
    #[pyo3(get, set, name = "_stream_write")]
    stream_write: PyObject,
    #[pyo3(get, set, name = "_stream_poll")]
    stream_poll: PyObject,
    /// The pipe whose write end, closed, ends `stream_poll`'s wait (a
    /// tuple of its two descriptors, or `None`).
    #[pyo3(get, set, name = "_poll_wake")]
    poll_wake: PyObject,
    /// What ends the waits of a stream's reads for readiness in the event
    /// loop's poll (a set of functions, which `close` calls), or `None`:
    /// not a stream.
    #[pyo3(get, set, name = "_stream_waits")]
    stream_waits: PyObject,
    /// The stream takes reads that never wait (not a FIFO or a terminal).
    #[pyo3(get, set, name = "_line_by_byte")]
    line_by_byte: bool,
    /// A byte stream (a pipe, a `SOCK_STREAM` socket), which one read may
    /// take in several reads that never wait; anything else gets one read
    /// of the size asked (see `stream::read_stream_inline`).
    #[pyo3(get, set, name = "_stream_pieces")]
    stream_pieces: bool,
    /// A FIFO the file owns, opened again without waiting (`O_NONBLOCK`,
    /// on a description of its own) because it refuses reads that never
    /// wait: its reads use this descriptor (see
    /// `AsyncFile._read_owned_stream`); else `None`.
    #[pyo3(get, set, name = "_stream_nowait")]
    stream_nowait: Option<RawFd>,
    /// What the last line read from a stream left for the next one (see
    /// `AsyncFile._stream_line`), or `None`.
    #[pyo3(get, set, name = "_line_note")]
    line_note: PyObject,
    /// The descriptor under the file (`_Descriptor`), the engine its
    /// operations go through, and its call queue (`CallQueue`).
    #[pyo3(get, set, name = "_file")]
    file: PyObject,
    #[pyo3(get, set, name = "_engine")]
    engine: PyObject,
    #[pyo3(get, set, name = "_calls")]
    calls: PyObject,
    /// The mode and the name, as the built-in file gives them.
    #[pyo3(get, set)]
    mode: PyObject,
    #[pyo3(get, set)]
    name: PyObject,
    /// The buffer size (0 unbuffered): the read-ahead size.
    #[pyo3(get, name = "_bufsize")]
    bufsize: i64,
    /// What the write buffer holds before it is flushed (0 unbuffered):
    /// by default the built-in ``open``'s buffer size, so that the same
    /// writes are kept and the same ones fail at once.
    #[pyo3(get, name = "_wbufsize")]
    wbufsize: i64,
    /// How much the last read ahead of a run of sequential reads took
    /// (0: none since the last seek); each next one takes twice as much,
    /// up to [`SEQUENTIAL_AHEAD`] (see [`FileState::next_fill`]).
    fill: usize,
    /// The descriptor's number.
    num: RawFd,
    /// The call queue's `free` list: it holds its item exactly while no
    /// call on the file is in progress.
    free: Option<Py<PyList>>,
    /// The engine whose [`Core::read_inline`] reads cached bytes.
    reader: Option<Py<Core>>,
    /// A read served inline in pieces, under way (see
    /// [`FileState::read_pieces`]).
    pieces: Option<Pieces>,
}

/// A read served inline in pieces, under way: its `bytes` object (not yet
/// handed out), its length, and how many of its bytes (from the position
/// on) are read.
struct Pieces {
    obj: Py<PyBytes>,
    len: usize,
    at: usize,
}

#[pymethods]
impl FileState {
    /// An empty state, whatever the subclass's constructor takes; nothing
    /// is served inline until [`_serve`](Self::_serve).
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        py: Python<'_>,
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> Self {
        let none = || py.None();
        FileState {
            pos: 0,
            rbuf: nothing(py),
            roff: 0,
            wbuf: PyByteArray::new(py, b"").unbind(),
            wpos: 0,
            at_end: false,
            anchored: false,
            pending: None,
            anchors: 0,
            seeks: 0,
            shifted: 0,
            seeked: false,
            inline: false,
            inline_read: false,
            inline_write: false,
            shared: false,
            readable: false,
            writable: false,
            append: false,
            stream: false,
            messages: PyTuple::empty(py).into_any().unbind(),
            stream_write: none(),
            stream_poll: none(),
            poll_wake: none(),
            stream_waits: none(),
            line_by_byte: true,
            stream_pieces: false,
            stream_nowait: None,
            line_note: none(),
            file: none(),
            engine: none(),
            calls: none(),
            mode: none(),
            name: none(),
            bufsize: 0,
            wbufsize: 0,
            fill: 0,
            num: -1,
            free: None,
            reader: None,
            pieces: None,
        }
    }

    /// What the calls served inline need besides the shared fields: the
    /// call queue's `free` list, the engine's core, the descriptor's
    /// number, the read-ahead size and the write buffer's size.
    fn _serve(
        &mut self,
        free: Py<PyList>,
        reader: Py<Core>,
        num: RawFd,
        bufsize: i64,
        wbufsize: i64,
    ) {
        self.free = Some(free);
        self.reader = Some(reader);
        self.num = num;
        self.bufsize = bufsize;
        self.wbufsize = wbufsize;
    }

    /// Records whether `seek` and `tell` (`inline`), `read` and
    /// `readline` (`inline_read`) and `write` (`inline_write`) may be
    /// served inline, given whether the file is `usable` (seekable, open,
    /// not detached): all need nothing buffered to write and the position
    /// known (not at an end still to look up); reads need a file that
    /// reads, writes one that writes, buffered, not in append mode.
    fn _set_inline(&mut self, py: Python<'_>, usable: bool) {
        self.inline = usable && !self.at_end && self.wbuf.bind(py).len() == 0;
        self.inline_read = self.inline && self.readable;
        self.inline_write = usable && self.writable && !self.append && self.ahead() > 0;
    }

    /// `read(size)` by the call that has just taken its turn of the event
    /// loop for it, holding the call queue (`AsyncFile._read_after_a_turn`):
    /// served as [`read_inline`] serves it, from the buffer or the page cache,
    /// counting only the bytes it copies (the turn started the count); or
    /// `None`, and the queued read reads.
    pub(crate) fn _read_after_turn(&mut self, py: Python<'_>, size: usize) -> Option<PyObject> {
        if !self.inline_read || size == 0 {
            return None;
        }
        let held = self.rbuf.bind(py).downcast::<PyBytes>().ok()?.clone();
        if held.as_bytes().is_empty() {
            return self.read_inline(py, size, true);
        }
        if self.roff.checked_add(size)? > held.as_bytes().len() {
            return None;
        }
        turns::count_copied(size);
        self.take(py, &held, size)
    }

    /// `readinto(buf)` by its queued call, holding the call queue, the
    /// writes flushed and the position known (`AsyncFile._readinto`),
    /// nothing being held: served as [`readinto_inline`] serves it, from
    /// the page cache straight into `buf`, counting the bytes it copies;
    /// or `None`, the position unmoved, and the queued call reads through
    /// the engine. On `None` the first bytes of `buf` may already hold the
    /// file's bytes at the position (the cached part of a range only partly
    /// cached), and keep them if that read is cancelled or fails.
    fn _readinto_cached(&mut self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> Option<usize> {
        if !self.inline_read || !self.held(py).is_empty() {
            return None;
        }
        let view = PyBuffer::<u8>::get(buf).ok()?;
        self.read_cached_into(py, &view, true)
    }

    /// The next piece of the read served in pieces under way (see
    /// [`FileState::read_pieces`]), by the call that holds the file's
    /// queue and has just taken its turn of the event loop for it: the
    /// read's bytes if that was its last piece; `True` if more remain (the
    /// caller takes another turn first); `None` if there is none under way,
    /// or the piece was not all cached (the read is dropped, the position
    /// unmoved: the caller reads through the engine).
    fn _next_piece(&mut self, py: Python<'_>) -> Option<PyObject> {
        let p = self.pieces.take()?;
        if !self.inline_read {
            return None;
        }
        turns::took_turn();
        let len = (p.len - p.at).min(INLINE_PIECE);
        let off = self.pos.checked_add(i64::try_from(p.at).ok()?)?;
        let reader = self.reader.as_ref()?.bind(py).borrow();
        let found = reader.read_piece_inline(self.num, off, p.obj.bind(py), p.at, len, false);
        drop(reader);
        self.piece_read(py, p, found, true)
    }

    /// Drops the read served in pieces under way, if any (it was
    /// cancelled, or failed): the position stays where it started.
    fn _drop_pieces(&mut self) {
        self.pieces = None;
    }

    /// How many bytes read ahead are held.
    fn _held(&self, py: Python<'_>) -> usize {
        self.held(py).len()
    }

    /// The bytes read ahead that are held (`_rbuf[_roff:]`).
    fn _held_bytes(&self, py: Python<'_>) -> PyObject {
        if self.roff == 0 {
            return self.rbuf.clone_ref(py);
        }
        PyBytes::new(py, self.held(py)).into_any().unbind()
    }

    /// Forgets the bytes read ahead (the file moved, or was written).
    fn _drop_read_ahead(&mut self, py: Python<'_>) {
        self.rbuf = nothing(py);
        self.roff = 0;
    }

    /// Up to `n` of the bytes held, moving the position past them and
    /// counting them as copied (see [`turns`]). The descriptor's offset is
    /// left for the queued call that takes them to set when it ends.
    fn _take(&mut self, py: Python<'_>, n: usize) -> PyResult<PyObject> {
        let rbuf = self.rbuf.bind(py).downcast::<PyBytes>()?.clone();
        let all = rbuf.as_bytes();
        let end = self.roff.saturating_add(n);
        let out = if end >= all.len() {
            let out = if self.roff == 0 {
                rbuf.clone()
            } else {
                PyBytes::new(py, all.get(self.roff..).unwrap_or_default())
            };
            self.rbuf = nothing(py);
            self.roff = 0;
            out
        } else {
            let out = PyBytes::new(py, &all[self.roff..end]);
            self.roff = end;
            out
        };
        let got = out.as_bytes().len();
        self.pos += i64::try_from(got)?;
        turns::count_copied(got);
        Ok(out.into_any().unbind())
    }

    /// Puts back `taken`, the bytes just before the position that a read
    /// which did not finish (cancelled, or failed) had taken, so that no
    /// byte is lost: the next read starts with them. (Every await of a
    /// read happens with the read buffer empty, so nothing held is between
    /// them and the position.)
    fn _unread(&mut self, py: Python<'_>, taken: &Bound<'_, PyBytes>) -> PyResult<()> {
        let back = taken.as_bytes();
        if back.is_empty() {
            return Ok(());
        }
        let held = self.held(py);
        let mut joined = Vec::with_capacity(back.len() + held.len());
        joined.extend_from_slice(back);
        joined.extend_from_slice(held);
        self.rbuf = PyBytes::new(py, &joined).into_any().unbind();
        self.roff = 0;
        self.pos -= i64::try_from(back.len())?;
        Ok(())
    }

    /// Appends `view` (a buffer of bytes) to the write buffer, moving the
    /// position past it (to the end, still to look up, in append mode);
    /// the buffer's first bytes set where it is flushed to (`_wpos`).
    fn _buffer(&mut self, py: Python<'_>, view: &Bound<'_, PyAny>) -> PyResult<()> {
        let wbuf = self.wbuf.bind(py);
        let before = wbuf.len();
        if before == 0 && !self.at_end {
            self.wpos = self.pos;
        }
        wbuf.call_method1(pyo3::intern!(py, "extend"), (view,))?;
        let n = wbuf.len().saturating_sub(before);
        turns::count_copied(n);
        if self.append {
            // (the bytes go to the end, and so does the position, which no
            // longer waits for the answer of a seek from the end)
            self.at_end = true;
            self.pending = None;
        } else if !self.at_end {
            self.pos += i64::try_from(n)?;
        }
        Ok(())
    }

    /// Reads up to ``size`` bytes (all of the rest when negative or
    /// None); ``b""`` at end of file. A coroutine (`FileCall`): served
    /// inline at its first step when the bytes are in the read buffer or
    /// all in the page cache, else read through the file's call queue.
    #[pyo3(signature = (size = None), text_signature = "($self, size=-1)")]
    pub(crate) fn read(
        slf: &Bound<'_, Self>,
        size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        FileCall::make(slf, Op::Read(size_or_all(slf.py(), size)?))
    }

    /// Moves the position (``os.SEEK_SET``, ``SEEK_CUR``, ``SEEK_END``,
    /// and ``SEEK_DATA``, ``SEEK_HOLE`` as on Linux); the new position.
    /// Writes still buffered are flushed first. A coroutine
    /// (`FileCall`): a seek from the start or the position (to at most
    /// [`INLINE_OFFSET`]) with nothing to flush is served
    /// inline at its first step.
    #[pyo3(signature = (offset, whence = None), text_signature = "($self, offset, whence=0)")]
    pub(crate) fn seek(
        slf: &Bound<'_, Self>,
        offset: &Bound<'_, PyAny>,
        whence: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let whence = match whence {
            Some(whence) => whence.clone().unbind(),
            None => 0i64.into_pyobject(slf.py())?.into_any().unbind(),
        };
        FileCall::make(slf, Op::Seek(offset.clone().unbind(), whence))
    }

    /// The current position. A coroutine (`FileCall`): served inline at
    /// its first step when the position is known and nothing is to be
    /// flushed.
    pub(crate) fn tell(slf: &Bound<'_, Self>) -> PyResult<PyObject> {
        FileCall::make(slf, Op::Tell)
    }

    /// One line, with its ``\n`` (``b""`` at end of file); at most
    /// ``size`` bytes when ``size`` is given. A coroutine (`FileCall`):
    /// served inline at its first step when the line is all in the read
    /// buffer (see [`readline_inline`]), else read through the file's call
    /// queue.
    #[pyo3(signature = (size = None), text_signature = "($self, size=-1)")]
    pub(crate) fn readline(
        slf: &Bound<'_, Self>,
        size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        FileCall::make(slf, Op::Readline(size_or_all(slf.py(), size)?))
    }

    /// Writes all of ``data`` at the position; the byte count. A
    /// coroutine (`FileCall`): served inline at its first step when the
    /// bytes fit in the write buffer (see [`write_inline`]), else written
    /// through the file's call queue.
    pub(crate) fn write(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        FileCall::make(slf, Op::Write(data.clone().unbind()))
    }

    /// Reads into ``buf`` (any writable buffer) at the position, until it
    /// is full or the file ends; the byte count. A coroutine
    /// (`FileCall`): served inline at its first step when the bytes are in
    /// the read buffer or all in the page cache, straight into ``buf``
    /// (see [`readinto_inline`]), else read through the file's call queue.
    pub(crate) fn readinto(slf: &Bound<'_, Self>, buf: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        FileCall::make(slf, Op::Readinto(buf.clone().unbind()))
    }

    /// Sets `_seeked`: a seek also ends the run of sequential reads (the
    /// next read ahead takes the buffer's size again).
    #[setter(_seeked)]
    fn set_seeked(&mut self, seeked: bool) {
        self.seeked = seeked;
        if seeked {
            self.fill = 0;
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.rbuf)?;
        visit.call(&self.wbuf)?;
        for held in self.objects() {
            visit.call(held)?;
        }
        visit.call(&self.free)?;
        if let Some(p) = &self.pieces {
            visit.call(&p.obj)?;
        }
        visit.call(&self.reader)
    }

    fn __clear__(&mut self, py: Python<'_>) {
        self.rbuf = nothing(py);
        self.messages = PyTuple::empty(py).into_any().unbind();
        for held in [
            &mut self.stream_write,
            &mut self.stream_poll,
            &mut self.poll_wake,
            &mut self.stream_waits,
            &mut self.line_note,
            &mut self.file,
            &mut self.engine,
            &mut self.calls,
            &mut self.mode,
            &mut self.name,
        ] {
            *held = py.None();
        }
        self.free = None;
        self.reader = None;
        self.pieces = None;
    }
}

/// A `read`'s or `readline`'s `size` as the call was given it: `-1`
/// (all of the rest, or the whole line) when it was left out.
fn size_or_all(py: Python<'_>, size: Option<&Bound<'_, PyAny>>) -> PyResult<PyObject> {
    Ok(match size {
        Some(size) => size.clone().unbind(),
        None => (-1i64).into_pyobject(py)?.into_any().unbind(),
    })
}

/// The empty `bytes` (the read-ahead buffer holding nothing).
fn nothing(py: Python<'_>) -> PyObject {
    PyBytes::new(py, b"").into_any().unbind()
}

impl FileState {
    /// The Python objects held besides the buffers and what the calls
    /// served inline use (for the cycle collector).
    fn objects(&self) -> [&PyObject; 11] {
        [
            &self.messages,
            &self.stream_write,
            &self.stream_poll,
            &self.poll_wake,
            &self.stream_waits,
            &self.line_note,
            &self.file,
            &self.engine,
            &self.calls,
            &self.mode,
            &self.name,
        ]
    }

    /// The read-ahead size: the buffer size (0 unbuffered).
    fn ahead(&self) -> usize {
        usize::try_from(self.bufsize).unwrap_or(0)
    }

    /// The bytes read ahead that are held (`rbuf[roff..]`; none if `rbuf`
    /// is no `bytes`, which it always is).
    fn held<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        match self.rbuf.bind(py).downcast::<PyBytes>() {
            Ok(all) => all.as_bytes().get(self.roff..).unwrap_or_default(),
            Err(_) => &[],
        }
    }

    /// Whether no call on the file is in progress.
    fn free(&self, py: Python<'_>) -> bool {
        self.free.as_ref().is_some_and(|f| f.bind(py).len() == 1)
    }

    /// Moves the position to `to`; the descriptor's offset follows when
    /// its number is known outside the file.
    fn moved_to(&mut self, to: i64) {
        self.pos = to;
        if self.shared {
            // SAFETY: lseek has no memory effects. A failure (a
            // descriptor closed behind the file's back) is ignored, as
            // `AsyncFile._sync_offset` ignores it.
            unsafe { libc::lseek(self.num, to, libc::SEEK_SET) };
        }
    }

    /// `size` bytes from the read-ahead buffer (all there), or `False`
    /// when the call is to take its turn of the event loop first.
    fn take_held(
        &mut self,
        py: Python<'_>,
        held: &Bound<'_, PyBytes>,
        size: usize,
    ) -> Option<PyObject> {
        if self.roff.checked_add(size)? > held.as_bytes().len() {
            return None;
        }
        if turns::turn_due(size) {
            return Some(PyBool::new(py, false).to_owned().into_any().unbind());
        }
        self.take(py, held, size)
    }

    /// Takes the next `n` bytes of the read-ahead buffer `held` (`n` of
    /// them there), moving the position past them.
    fn take(&mut self, py: Python<'_>, held: &Bound<'_, PyBytes>, n: usize) -> Option<PyObject> {
        let all = held.as_bytes();
        let end = self.roff + n;
        let to = self.pos.checked_add(i64::try_from(n).ok()?)?;
        let out = if self.roff == 0 && end == all.len() {
            held.clone()
        } else {
            PyBytes::new(py, &all[self.roff..end])
        };
        if end == all.len() {
            self.rbuf = nothing(py);
            self.roff = 0;
        } else {
            self.roff = end;
        }
        self.moved_to(to);
        Some(out.into_any().unbind())
    }

    /// Moves past the next `n` bytes of the read-ahead buffer (`n` of them
    /// there, out of the `len` it holds in all), and the position with them.
    fn skip_held(&mut self, py: Python<'_>, len: usize, n: usize) -> Option<()> {
        let to = self.pos.checked_add(i64::try_from(n).ok()?)?;
        let end = self.roff + n;
        if end == len {
            self.rbuf = nothing(py);
            self.roff = 0;
        } else {
            self.roff = end;
        }
        self.moved_to(to);
        Some(())
    }

    /// Reads into `view` at the position, nothing being held, if the
    /// bytes are all in the page cache up to its length or the file's end
    /// (one `preadv2(RWF_NOWAIT)` straight into it: see
    /// [`Core::read_raw_inline`]), moving the position past them; the
    /// byte count, or `None` (nothing moved). Counted as a call served
    /// (see [`turns`]), or, by a call that has taken its turn
    /// (`after_turn`), as bytes copied.
    fn read_cached_into(
        &mut self,
        py: Python<'_>,
        view: &PyBuffer<u8>,
        after_turn: bool,
    ) -> Option<usize> {
        let len = view.len_bytes();
        if view.readonly() || !view.is_c_contiguous() || len > INLINE_PIECE {
            return None;
        }
        if len == 0 {
            return Some(0);
        }
        let base = view.buf_ptr().cast::<u8>();
        let reader = self.reader.as_ref()?.bind(py).borrow();
        // SAFETY: `view` holds a buffer exported, writable and contiguous
        // (checked above), `len` bytes at `base`, for as long as it lives,
        // past this call; the GIL is held throughout, so no Python code
        // reads or writes them meanwhile.
        let found = unsafe { reader.read_raw_inline(self.num, self.pos, base, len) };
        drop(reader);
        let n = match found {
            Piece::Full => len,
            Piece::End(n) => n,
            Piece::Miss => return None,
        };
        let to = self.pos.checked_add(i64::try_from(n).ok()?)?;
        if after_turn {
            turns::count_copied(n);
        } else {
            turns::served(n);
        }
        self.seeked = false;
        self.fill = 0;
        self.moved_to(to);
        Some(n)
    }

    /// `readinto` of `len` bytes at `base` read through the read-ahead
    /// buffer, as a buffered file's `read(len)` would read them (see
    /// [`FileState::read_inline`]): the bytes held first (fewer than
    /// `len`), then the rest, when the file is buffered, the rest is
    /// below the buffer's size and this is not the first read since a
    /// seek. One `preadv2(RWF_NOWAIT)` fills the buffer (twice as much
    /// each time in a run of sequential reads, up to
    /// [`SEQUENTIAL_AHEAD`]) and its first bytes are copied to `base`,
    /// as the built-in buffered file's `readinto` of a buffer smaller
    /// than its own does: a loop of 4 KiB `readinto` calls makes one
    /// system call per 128 KiB, not one per call. The byte count (`len`),
    /// the position moved past them; `None` if not so read (nothing
    /// moved, nothing written at `base`): not buffered, after a seek, or
    /// fewer than the rest cached there (the end of the file included,
    /// which [`FileState::read_cached_into`] or the queued `readinto`
    /// then serves).
    fn read_ahead_into(&mut self, py: Python<'_>, base: *mut u8, len: usize) -> Option<usize> {
        let head = self.held(py).len();
        let rest = len.checked_sub(head).filter(|&r| r > 0)?;
        if self.seeked || rest >= self.ahead() {
            return None;
        }
        let want = self.next_fill().max(rest);
        if want > INLINE_PIECE {
            return None;
        }
        let off = self.pos.checked_add(i64::try_from(head).ok()?)?;
        let to = self.pos.checked_add(i64::try_from(len).ok()?)?;
        let reader = self.reader.as_ref()?.bind(py).borrow();
        let data = reader.read_ahead_inline(py, self.num, off, rest, want)?;
        drop(reader);
        let got = data.as_bytes().len();
        // SAFETY: the caller's `base` is `len` bytes of a writable,
        // contiguous buffer it holds exported (see [`readinto_inline`]);
        // the `head` bytes held and `data`, a new `bytes` object of `got`
        // >= `rest` bytes (its read asked for at least `rest`), are other
        // objects' memory, and `head + rest` is `len`. The GIL is held
        // throughout: no Python code touches any of them meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(self.held(py).as_ptr(), base, head);
            std::ptr::copy_nonoverlapping(data.as_bytes().as_ptr(), base.add(head), rest);
        }
        turns::served(head + got);
        self.fill = if want <= rest { 0 } else { want };
        self.seeked = false;
        if got > rest {
            self.rbuf = data.into_any().unbind();
            self.roff = rest;
        } else {
            self.rbuf = nothing(py);
            self.roff = 0;
        }
        self.moved_to(to);
        Some(len)
    }

    /// `readinto` of `len` bytes at `base`: the bytes held (fewer than
    /// `len`), then the rest straight into `base` after them if it is all
    /// in the page cache up to `len` or the file's end (one
    /// `preadv2(RWF_NOWAIT)`: see [`Core::read_raw_inline`]); the byte
    /// count, the bytes held dropped and the position moved past all of
    /// them; `None` if the rest is not so read (nothing moved, the buffer
    /// kept, but the bytes at `base` may have been overwritten by the
    /// file's bytes from the position on).
    fn read_past_held_into(&mut self, py: Python<'_>, base: *mut u8, len: usize) -> Option<usize> {
        let head = self.held(py).len();
        let rest = len.checked_sub(head).filter(|&r| r > 0)?;
        let off = self.pos.checked_add(i64::try_from(head).ok()?)?;
        // SAFETY: the caller's `base` is `len` bytes of a writable,
        // contiguous buffer it holds exported (see [`readinto_inline`]);
        // the `head` bytes held are another object's memory, and `head`
        // is below `len`. The GIL is held throughout: no Python code
        // touches either meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(self.held(py).as_ptr(), base, head) };
        let reader = self.reader.as_ref()?.bind(py).borrow();
        // SAFETY: from `base + head`, `rest` bytes of the same buffer, as
        // above; nothing else reads or writes them during the call.
        let found = unsafe { reader.read_raw_inline(self.num, off, base.add(head), rest) };
        drop(reader);
        let n = head
            + match found {
                Piece::Full => rest,
                Piece::End(k) => k,
                Piece::Miss => return None,
            };
        let to = self.pos.checked_add(i64::try_from(n).ok()?)?;
        turns::served(n);
        self.rbuf = nothing(py);
        self.roff = 0;
        self.seeked = false;
        self.fill = 0;
        self.moved_to(to);
        Some(n)
    }

    /// `size` bytes (not 0) read at the position if they are all in the
    /// page cache (see [`Core::read_ahead_inline`]), reading ahead to fill
    /// the buffer unless this is the first read since a seek (as far as
    /// the file and the cached bytes go; a fill longer than [`INLINE_PIECE`]
    /// is the engine's);
    /// `False` when the call is to take its turn of the event loop first;
    /// `True` when the read, longer than [`INLINE_PIECE`] (up to
    /// [`INLINE_MAX`]), goes on in pieces (see [`FileState::read_pieces`]).
    /// A call that has just taken its turn (`after_turn`) counts only the
    /// bytes it copied.
    fn read_inline(&mut self, py: Python<'_>, size: usize, after_turn: bool) -> Option<PyObject> {
        if size > INLINE_PIECE {
            if size > INLINE_MAX || (!after_turn && turns::due()) {
                return (size <= INLINE_MAX)
                    .then(|| PyBool::new(py, false).to_owned().into_any().unbind());
            }
            return self.read_pieces(py, size, after_turn);
        }
        let want = if self.seeked || size >= self.ahead() {
            size
        } else {
            self.next_fill().max(size)
        };
        if want > INLINE_PIECE {
            return None; // (a buffer larger than a piece is filled by the engine)
        }
        let to = self.pos.checked_add(i64::try_from(size).ok()?)?;
        let reader = self.reader.as_ref()?.bind(py).borrow();
        if !after_turn && turns::due() {
            return Some(PyBool::new(py, false).to_owned().into_any().unbind());
        }
        let data = reader.read_ahead_inline(py, self.num, self.pos, size, want)?;
        drop(reader);
        let got = data.as_bytes().len();
        if after_turn {
            turns::count_copied(got);
        } else {
            turns::served(got);
        }
        // A read after a seek starts a new run; one that read ahead
        // continues it.
        self.fill = if self.seeked || want <= size { 0 } else { want };
        self.seeked = false;
        let out = if got > size {
            let head = PyBytes::new(py, &data.as_bytes()[..size]);
            self.rbuf = data.into_any().unbind();
            self.roff = size;
            head
        } else {
            data
        };
        self.moved_to(to);
        Some(out.into_any().unbind())
    }
}

impl FileState {
    /// Starts `read(len)` served in pieces: its first piece, of at
    /// most [`INLINE_PIECE`] bytes, read now into a new `bytes` object of
    /// `len`, and the next ones now while the thread's turn of the event
    /// loop is not due; once it is, the others after a turn, by the queued
    /// call that holds the file's queue meanwhile
    /// (`AsyncFile._read_pieces`, which calls [`FileState::_next_piece`]),
    /// so that the loop's thread copies no more between two turns than
    /// the turns allow (see [`turns`]).
    /// The position moves once the last piece is read. The bytes, if the
    /// first piece ended the read; `True` if the pieces go on; `None` if
    /// the first was not all cached (the read goes to the engine).
    fn read_pieces(&mut self, py: Python<'_>, len: usize, after_turn: bool) -> Option<PyObject> {
        let obj = crate::fresh::unfilled(py, len).ok()?;
        let first = len.min(INLINE_PIECE);
        let reader = self.reader.as_ref()?.bind(py).borrow();
        let found = reader.read_piece_inline(self.num, self.pos, obj.bind(py), 0, first, true);
        drop(reader);
        let p = Pieces { obj, len, at: 0 };
        self.piece_read(py, p, found, after_turn)
    }

    /// What a piece of the read `p` found: counted (as copied by a call
    /// that took its turn, `after_turn`, or as a call served); the read
    /// goes on with its next piece now, while the thread's turn of the
    /// event loop is not due (see [`turns`]), or after a turn (`True`,
    /// kept in `pieces`), or ends (its bytes, the position moved past
    /// them), or it missed (`None`, dropped).
    fn piece_read(
        &mut self,
        py: Python<'_>,
        mut p: Pieces,
        mut found: Piece,
        mut after_turn: bool,
    ) -> Option<PyObject> {
        loop {
            let n = match found {
                Piece::Miss => return None,
                Piece::Full => (p.len - p.at).min(INLINE_PIECE),
                Piece::End(n) => n,
            };
            if after_turn {
                turns::count_copied(n);
            } else {
                turns::served(n);
            }
            p.at += n;
            if !matches!(found, Piece::Full) || p.at >= p.len {
                break;
            }
            if turns::due() {
                self.pieces = Some(p);
                return Some(PyBool::new(py, true).to_owned().into_any().unbind());
            }
            after_turn = true;
            let len = (p.len - p.at).min(INLINE_PIECE);
            let off = self.pos.checked_add(i64::try_from(p.at).ok()?)?;
            let reader = self.reader.as_ref()?.bind(py).borrow();
            found = reader.read_piece_inline(self.num, off, p.obj.bind(py), p.at, len, false);
        }
        let to = self.pos.checked_add(i64::try_from(p.at).ok()?)?;
        let out = crate::fresh::shrunk(py, p.obj, p.at).ok()?;
        self.seeked = false;
        self.fill = 0;
        self.moved_to(to);
        Some(out)
    }

    /// How much the next read ahead takes: the buffer's size for the first
    /// of a run of sequential reads, then twice the last, up to
    /// [`SEQUENTIAL_AHEAD`] (never less than the buffer's size).
    fn next_fill(&self) -> usize {
        if self.fill == 0 {
            return self.ahead();
        }
        self.fill
            .saturating_mul(2)
            .min(SEQUENTIAL_AHEAD)
            .max(self.ahead())
    }
}

impl FileState {
    /// `read()` of the rest of the file served inline (see [`read_inline`]),
    /// or `None`.
    fn read_rest(&mut self, py: Python<'_>) -> Option<PyObject> {
        if turns::is_due() {
            return None; // (the queued read takes the turn)
        }
        let reader = self.reader.as_ref()?.bind(py).borrow();
        let data = reader.read_rest_inline(py, self.num, self.pos)?;
        drop(reader);
        let n = data.len().ok()?;
        let to = self.pos.checked_add(i64::try_from(n).ok()?)?;
        turns::served(n);
        self.seeked = false;
        self.moved_to(to);
        Some(data.unbind())
    }
}

/// `file.seek(offset, whence)` served inline, if it can be: a seek from
/// the start or from the position (`whence` the int 0 or 1: arithmetic on
/// the known position) by an int `offset` to a position from 0 to 2**40,
/// with no call on the file in progress and nothing to flush. The new
/// position if it was; if not, `None`, and nothing changed.
#[pyfunction]
pub(crate) fn seek_inline(
    file: &Bound<'_, FileState>,
    offset: &Bound<'_, PyAny>,
    whence: &Bound<'_, PyAny>,
) -> Option<i64> {
    let py = file.py();
    if !whence.is_exact_instance_of::<PyInt>() || !offset.is_exact_instance_of::<PyInt>() {
        return None;
    }
    let relative = match whence.extract::<i64>().ok()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let offset = offset.extract::<i64>().ok()?;
    let mut st = file.try_borrow_mut().ok()?;
    if !st.inline || !st.free(py) {
        return None;
    }
    let to = if relative {
        st.pos.checked_add(offset)?
    } else {
        offset
    };
    if !(0..=INLINE_OFFSET).contains(&to) {
        return None;
    }
    st.rbuf = nothing(py);
    st.roff = 0;
    st.seeked = true;
    st.fill = 0;
    st.moved_to(to);
    Some(to)
}

/// `file.read(size)` served inline, if it can be: `size` an int of 0 or
/// more, no call on the file in progress, and the bytes all in the file's
/// read-ahead buffer or all in the page cache; or `size` -1 or `None` (the
/// rest of the file), nothing read ahead, the thread's turn of the event
/// loop not due and the rest all cached, fewer than `INLINE_PIECE` bytes
/// (see [`Core::read_rest_inline`]). The bytes; `None` if it
/// cannot be (nothing changed); `True` if its first piece was read and
/// the read goes on in pieces (see [`FileState::read_pieces`]); `False` if
/// it could be but its turn of the event loop is due first (nothing changed, and the count of calls served
/// inline starts again: see [`turns`]).
#[pyfunction]
pub(crate) fn read_inline(
    file: &Bound<'_, FileState>,
    size: &Bound<'_, PyAny>,
) -> Option<PyObject> {
    let py = file.py();
    let n = if size.is_exact_instance_of::<PyInt>() {
        size.extract::<i64>().ok()?
    } else if size.is_none() {
        -1
    } else {
        return None;
    };
    let rest = n == -1;
    let size = if rest { 0 } else { usize::try_from(n).ok()? };
    let mut st = file.try_borrow_mut().ok()?;
    if !st.inline_read || !st.free(py) {
        return None;
    }
    let held = st.rbuf.bind(py).downcast::<PyBytes>().ok()?.clone();
    if rest {
        return if held.as_bytes().is_empty() {
            st.read_rest(py)
        } else {
            None
        };
    }
    if !held.as_bytes().is_empty() {
        return st.take_held(py, &held, size);
    }
    if size == 0 {
        return Some(held.into_any().unbind());
    }
    st.read_inline(py, size, false)
}

/// `file.readline(size)` served inline, if it can be: `size` an int (not
/// 0), a buffered file, no call on the file in progress, the line (up to
/// its `\n`, or `size` bytes) all in the read-ahead buffer, and the
/// thread's turn of the event loop not due (see [`turns`]). The line, or
/// `None` (nothing changed: the queued `readline` reads it, or takes the
/// turn).
#[pyfunction]
pub(crate) fn readline_inline(
    file: &Bound<'_, FileState>,
    size: &Bound<'_, PyAny>,
) -> Option<PyObject> {
    let py = file.py();
    if !size.is_exact_instance_of::<PyInt>() {
        return None;
    }
    let limit = match size.extract::<i64>().ok()? {
        0 => return None,
        n if n < 0 => usize::MAX,
        n => usize::try_from(n).ok()?,
    };
    let mut st = file.try_borrow_mut().ok()?;
    if !st.inline_read || st.ahead() == 0 || !st.free(py) || turns::is_due() {
        return None;
    }
    let held = st.rbuf.bind(py).downcast::<PyBytes>().ok()?.clone();
    let rest = held.as_bytes().get(st.roff..)?;
    let n = match rest.iter().take(limit).position(|&b| b == b'\n') {
        Some(i) => i + 1,
        None if rest.len() >= limit => limit,
        None => return None, // (the line goes on past the buffer, or it is empty)
    };
    turns::served(n);
    st.take(py, &held, n)
}

/// `file.readinto(buf)` served inline, if it can be: `buf` a writable
/// C-contiguous buffer of bytes (`bytearray`, a `memoryview` of one, a
/// `uint8` array...) of at most [`INLINE_PIECE`] bytes, no call on the
/// file in progress, the thread's turn of the event loop not due (see
/// [`turns`]), and the bytes all in the file's read-ahead buffer; or, on
/// a buffered file whose buffer is larger than the rest of `buf`, the
/// bytes held and the rest in the page cache, read ahead into the buffer
/// as `read(n)` reads (see [`FileState::read_ahead_into`]); or, nothing
/// being held there, all in the page cache up to `buf`'s length or the
/// file's end: those are read straight into `buf` by one
/// `preadv2(RWF_NOWAIT)`, no `bytes` made. The byte count, or `None`:
/// the position, the file's buffers and the turns are unchanged, but the
/// first bytes of `buf` may have been overwritten by the file's bytes at
/// the position (the cached part of a range only partly cached: the
/// kernel copies it before it finds the rest uncached), and stay so if
/// the queued `readinto` that then reads, takes its turn, or refuses the
/// buffer is cancelled or fails.
pub(crate) fn readinto_inline(
    file: &Bound<'_, FileState>,
    buf: &Bound<'_, PyAny>,
) -> Option<usize> {
    let py = file.py();
    let view = PyBuffer::<u8>::get(buf).ok()?;
    if view.readonly() || !view.is_c_contiguous() {
        return None;
    }
    let len = view.len_bytes();
    let base = view.buf_ptr().cast::<u8>();
    if len > INLINE_PIECE {
        return None;
    }
    let mut st = file.try_borrow_mut().ok()?;
    if !st.inline_read || !st.free(py) || turns::is_due() {
        return None;
    }
    let held = st.rbuf.bind(py).downcast::<PyBytes>().ok()?.clone();
    let all = held.as_bytes();
    if !all.is_empty() {
        let from = all.get(st.roff..)?;
        if from.len() < len {
            return st
                .read_ahead_into(py, base, len)
                .or_else(|| st.read_past_held_into(py, base, len));
        }
        // SAFETY: `view` holds `buf`'s buffer exported, writable and
        // contiguous, `len` bytes at `base`, for as long as it lives; the
        // read-ahead buffer is an immutable `bytes` object, another
        // object's memory, of at least `len` bytes from `from`. The GIL
        // is held throughout: no Python code touches either meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), base, len) };
        turns::served(len);
        st.skip_held(py, all.len(), len)?;
        return Some(len);
    }
    if let Some(n) = st.read_ahead_into(py, base, len) {
        return Some(n);
    }
    st.read_cached_into(py, &view, false)
}

/// `file.tell()` served inline, if it can be: no call on the file in
/// progress, the position known and nothing to flush, and the thread's
/// turn of the event loop not due (see [`turns`]). The position, or `None`
/// (nothing changed: the queued `tell` answers, or takes the turn).
#[pyfunction]
pub(crate) fn tell_inline(file: &Bound<'_, FileState>) -> Option<i64> {
    let py = file.py();
    let st = file.try_borrow().ok()?;
    if !st.inline || !st.free(py) || turns::is_due() {
        return None;
    }
    turns::served(0);
    Some(st.pos)
}

/// `file.write(data)` served inline, if it can be: `data` a `bytes` or
/// `bytearray` (not empty), no call on the file in progress, and the
/// bytes fitting in the file's write buffer without filling it,
/// and the thread's turn of the event loop not due (see [`turns`]). The
/// byte count, or `None` (nothing changed: the queued `write` writes
/// them, or takes the turn). The first write after a flush is served
/// here only while the position is known and nothing else is held
/// (`inline`): it sets where the buffered bytes go (`_wpos`), and ends
/// the inline `seek`, `tell` and reads until the buffer is flushed.
#[pyfunction]
pub(crate) fn write_inline(file: &Bound<'_, FileState>, data: &Bound<'_, PyAny>) -> Option<usize> {
    let py = file.py();
    let n = if let Ok(b) = data.downcast_exact::<PyBytes>() {
        b.as_bytes().len()
    } else if let Ok(b) = data.downcast_exact::<PyByteArray>() {
        b.len()
    } else {
        return None;
    };
    let mut st = file.try_borrow_mut().ok()?;
    let wbuf = st.wbuf.bind(py).clone();
    let held = wbuf.len();
    let room = usize::try_from(st.wbufsize).unwrap_or(0);
    if n == 0 || held.checked_add(n)? >= room || data.is(&wbuf) {
        return None;
    }
    if !st
        .rbuf
        .bind(py)
        .downcast::<PyBytes>()
        .ok()?
        .as_bytes()
        .is_empty()
    {
        return None; // (never, with bytes buffered to write: a read flushes them first)
    }
    if !st.inline_write || !st.free(py) || turns::is_due() {
        return None;
    }
    let to = st.pos.checked_add(i64::try_from(n).ok()?)?;
    if held == 0 {
        // The first bytes since the buffer was flushed: they go where the
        // position is, if it is known (`inline`: nothing buffered, not at
        // an end still to look up); from now on `seek`, `tell` and reads
        // are not served inline, as the queue's `settle` would have it,
        // until a queued call flushes the buffer.
        if !st.inline {
            return None;
        }
        st.wpos = st.pos;
        st.inline = false;
        st.inline_read = false;
    }
    wbuf.call_method1(pyo3::intern!(py, "extend"), (data,))
        .ok()?;
    turns::served(n);
    st.pos = to;
    Some(n)
}
