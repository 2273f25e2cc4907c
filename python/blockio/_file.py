"""``blockio.open``: files for asyncio with aiofiles' interface.

Every read and write is a positional operation through an :class:`Engine`;
the file keeps its own position, starting at the descriptor's offset. Once
the descriptor's number may be known outside the file (it was handed in,
made by an ``opener``, or given out by ``fileno()``, ``raw`` or ``_file``),
the file sets that offset to its position after every call, so that a child
process or the next user of the descriptor continues from there; before
that nobody can see the offset, and it is left alone (a system call saved
per call). Opening, the size lookups (``SEEK_END``, append mode, reading to
the end), truncation and closing run on the engine's file-system threads, so
the event loop's thread never waits on the file system (a ``read()`` served
at once, below, takes the size the kernel holds, asking no server).

Calls take effect one at a time, in the order made (:mod:`blockio._calls`).
The calls of random access are served inline, without a task switch, a
future or a ring round trip, when no other call on the file is in progress:
a ``seek`` from the start or the position with no writes buffered, and a
``read`` of bytes in the read buffer or in the page cache (``preadv2`` with ``RWF_NOWAIT`` on the
calling thread, as :meth:`Engine.aread` does), one system call per ``seek``
+ ``read``; and a ``read()`` of the rest of a regular file, all cached and
at most 8 MiB, with nothing read ahead (``statx`` with
``AT_STATX_DONT_SYNC``, then one ``preadv2`` of a byte more than it says). Everything else waits its turn in the queue and goes through the
engine; on blockio's event loop on io_uring, a read at the position
(``Engine.aread``, ``Engine.areadinto``) goes on the loop's own ring
instead. Now and then (once 1 ms has passed since the thread's last
turn, looked at once in 256 calls served without suspending on it and
once in every 4 MiB they copy: ``turns`` in the core) a cached read
waits its turn in the queue too and yields to the event loop once before
reading on the calling thread, so that a task
reading cached data in a loop never starves the others. The
first ``read`` after a ``seek`` reads only what it asks for, where the read
buffer would otherwise be filled for the bytes after it; reads that follow
in sequence read ahead.

Buffering follows the built-in ``open``: ``buffering=-1`` (the default) or
``> 1`` keeps a read-ahead buffer and a write buffer of that many bytes
(``io.DEFAULT_BUFFER_SIZE`` by default for reading ahead, the built-in's
size, the file system's preferred I/O size, for the writes it keeps),
flushed when full, by
:meth:`AsyncFile.flush`, by a seek or a read, and on close; ``buffering=0``
(binary only) reads and writes exactly what is asked. Text mode
(:class:`AsyncTextFile`) decodes incrementally over the binary file.

Writes reach the file in the order made, at the built-in file's offsets,
even if their event loop is closed before they end: each is placed in the
file's write queue in the core (``WriteQueue``) before its call first
yields, and so is a write made behind a ``seek``, ``tell``, ``truncate``
or ``flush`` in progress, which do their part at once or place it there
too (``_seek_placing``, ``_tell_placing``, ``_truncate_placing``; in
append mode the end at the time is a mark of that queue:
``_seek_end_placing``). Not behind a read (see ``python/README.md``).

Cancellation loses nothing. A write runs to its end before its task's
cancellation takes effect, the end of ``asyncio.run`` included (see
:meth:`Engine._awrite_kept`), and the position is past its bytes. A read
cancelled part-way puts back what it took.

On a stream (a pipe, socket or terminal), whoever owns the descriptor, a
read never waits in the kernel: it takes what the stream holds with a read
that never waits, on the loop's thread, and while the stream has nothing it
waits for it to become readable in the event loop's own poll
(:meth:`AsyncFile._read_stream`), on both backends alike. That was
chosen over a read left waiting in the ring (io_uring arms its own poll for
it, with no thread) or for readiness in an epoll set of the thread pool's:
a wait in the loop's poll holds no thread, no descriptor, no place in the
engine's bound on operations in flight and no buffer (450 reads of 1 MiB
waiting in a ring hold 450 MiB); a cancellation takes nothing from the
stream, where a read in the kernel must be cancelled there and races the
bytes arriving; and ``close`` has no operation to cancel or wait for: it
ends the wait, then closes the number, which no read can reach afterwards
(or, with ``closefd=False``, leaves it to the caller, nothing taken from it).
Its cost is the reader's registration in the loop (an ``epoll_ctl`` to add
it and one to remove it, per wait); a read that finds bytes costs one
system call and no round trip through the engine. Measured here, reading
256 MiB from ``dd`` through a pipe with ``read(65536)``, medians of 5
rounds: 2,638 MiB/s on io_uring and 2,285 MiB/s on the thread backend,
against 122 and 153 MiB/s for a read on a thread of its own over a
duplicate and 976 and 891 MiB/s for aiofiles (docs/benchmarks.md); 450
pipes with a read waiting on each under ``RLIMIT_NOFILE`` 1,024 all read,
with no descriptor and no thread more while they wait. A FIFO opened by
path and a terminal refuse reads that never wait: a FIFO is opened again
on a description of its own in non-blocking mode and read there the same
way; a terminal is read through the engine once readable, and a read
cancelled then keeps its bytes for the next. Every write to a stream
runs on a thread of its own (:class:`_StreamCall`), on the number itself
where the file owns it (its close leaves the closing of the number to a
write still running), over a duplicate where the caller keeps it.
"""

from __future__ import annotations

import asyncio
import collections.abc
import errno
import fcntl
import io
import operator
import os
import select
import stat
import sys
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Generator, Iterable, List, Optional, Tuple, Union

from ._aio import Stops, is_cancellation, new_future, on_asyncio, pause, shielded, threadsafe_call_soon, wait_readable
from ._blockio import (INLINE_OFFSET, INLINE_PIECE, FileCall, FileState, WriteQueue, coroutine_method, count_copied,
                       read_line_inline, read_stream_inline, stream_in_pieces, turn_due)
from ._engine import _NOBODY, Engine, _copy_into, _Descriptor, _fd, _finish, _flat, _KeptCancel, _Stopped, _stream_key
from ._calls import (ABANDONED, ABANDONED_AT_CLOSE, CallQueue, one_at_a_time, one_at_a_time_closing,
                     one_at_a_time_kept, one_at_a_time_placing, one_at_a_time_taking_turns)
from ._lines import SPLIT_PIECE, LineReader

if TYPE_CHECKING:
    if sys.version_info >= (3, 12):
        from collections.abc import Buffer
    else:
        from typing_extensions import Buffer

#: What :func:`blockio.open` accepts as ``file``.
PathOrFd = Union[str, bytes, "os.PathLike[Any]", int]

#: ``read()``'s first read where the file's size says nothing (a pipe,
#: a procfs file): the built-in ``FileIO.readall``'s.
_FIRST_CHUNK = 8192

#: The largest file offset Linux has (``loff_t``): a seek past it is refused
#: at the seek, as the built-in file's is.
_MAX_OFFSET = (1 << 63) - 1
#: Added to the answer of a seek's rebasing mark whose target, moved back
#: by what a write ahead never landed, is before the start (see
#: `AsyncFile._rebased`): the core's ``BEFORE_START``.
_BEFORE_START = 1 << 63
#: A file offset's values (``off_t``), and a C ``int``'s (``whence``, a descriptor).
_OFF_T = range(-(1 << 63), 1 << 63)
_C_INT = range(-(1 << 31), 1 << 31)

#: Whether the built-in buffered file that only writes refuses ``read``
#: and ``read1`` before looking at their size (Python 3.11 and older;
#: from 3.12 on, a size of the wrong type raises ``TypeError`` first).
_MODE_BEFORE_SIZE = sys.version_info < (3, 12)

#: The largest offset ``seek`` takes inline, with no system call (1 TiB);
#: past it the file system's ``lseek`` checks the offset, as the built-in
#: file's seek does, so that an offset the file system refuses fails at
#: the seek rather than at a later read or write. (A smaller limit, as
#: FAT's 4 GiB, is met at that read or write.) The core's, for its
#: ``seek_inline``.
_INLINE_OFFSET = INLINE_OFFSET

#: The most one read returns on Linux (``MAX_RW_COUNT``): a larger read is
#: made of reads of at most this, as the built-in buffered file's is, or,
#: unbuffered, is one read of this, as ``FileIO``'s is.
_MAX_IO = 0x7FFFF000

#: The most bytes a read copies on the event loop's thread at once (the
#: core's ``INLINE_PIECE``): a longer read of a regular file gets its bytes
#: in the one object the kernel fills, never joined to others here.
_PIECE = INLINE_PIECE


def _at_a_turn() -> Generator[None, None, None]:
    yield  # (where a read taking its turn of the event loop waits)


# A generator suspended at its bare ``yield``, never resumed: its frame is
# the ``cr_frame`` of a `FileCall` waiting for its turn of the event loop
# (`AsyncFile._turn_queue`), which has no frame of its own; on Python 3.9
# and 3.10 ``inspect.getcoroutinestate`` reads it as suspended. One frame
# serves every such call; on Python 3.9 to 3.12 ``frame.clear()`` on it
# closes the generator (3.13 refuses), so `_turn_frame` makes a new one
# when it finds it closed: a cleared ``cr_frame`` of one call is not the
# next call's.
_TURN: Any = None


def _turn_frame() -> Any:
    """The frame of a generator suspended at a bare ``yield`` (see
    `_TURN`), made anew if the last one was closed (``frame.clear()``)."""
    global _TURN
    if _TURN is None or _TURN.gi_frame is None:
        _TURN = _at_a_turn()
        next(_TURN)
    return _TURN.gi_frame


def _fresh_ok(file: Any) -> bool:
    """Whether a read of ``file`` may go into a new ``bytes`` object the
    kernel fills after bytes held (``Engine._aread_after``): not on an
    ``O_DIRECT`` descriptor, whose reads need aligned memory."""
    try:
        return not fcntl.fcntl(_fd(file), fcntl.F_GETFL) & os.O_DIRECT
    except (OSError, ValueError):
        return False  # (the read that follows reports it)


def _snapshot(data: Any) -> Any:
    """The bytes a buffer holds now (``bytes``), for a write that waits for
    its turn; ``data`` itself if it is no C-contiguous buffer (the write
    refuses it at its turn, with the error the built-in's gives)."""
    if isinstance(data, (str, bytes)):
        return data
    try:
        with memoryview(data) as view:
            if view.c_contiguous:
                return view.tobytes()
    except TypeError:
        pass
    return data


def _c_type_name(obj: Any) -> str:
    """What the built-in file's errors call the type of ``obj`` (not a
    ``str``): its C ``tp_name``, which for a type defined in C carries its
    module (``collections.deque``, ``array.array``) and for a class defined
    in Python is its name. Python does not show ``tp_name`` itself; the
    error of ``str.join`` names it."""
    try:
        "".join([obj])
    except TypeError as e:
        said = str(e)  # ("sequence item 0: expected str instance, array.array found")
        head, found = "expected str instance, ", " found"
        if head in said and said.endswith(found):
            return said[said.index(head) + len(head):-len(found)]
    return type(obj).__name__


def _not_bytes_like(obj: Any) -> TypeError:
    """The built-in binary file's error for a write of ``obj``, which is
    not bytes-like (``memoryview``'s own says "memoryview: ...")."""
    return TypeError(f"a bytes-like object is required, not '{_c_type_name(obj)}'")


def _not_contiguous(data: Any) -> Exception:
    """The error the built-in's ``write`` gives for a buffer that is not
    C-contiguous: its exporter's own, for the simple request the built-in
    makes (numpy's ``ValueError``, a memoryview's ``BufferError``)."""
    try:
        io.BytesIO().write(data)  # (a built-in file's write: the exporter's error comes as it is)
    except (BufferError, ValueError, TypeError) as e:
        return e
    return BufferError("memoryview: underlying buffer is not C-contiguous")


def _size_arg(size: Any, default: int = -1) -> int:
    """A ``size`` argument as the built-in files take it: an int (or an
    object with ``__index__``), or None for ``default``; anything else
    raises ``TypeError`` at the call, with the built-in's message."""
    if size is None:
        return default
    try:
        n = operator.index(size)
    except TypeError:
        raise TypeError(f"argument should be integer or None, not '{type(size).__name__}'") from None
    if not -_MAX_OFFSET - 1 <= n <= _MAX_OFFSET:
        # (the built-in's error for a size no ssize_t holds)
        raise OverflowError("cannot fit 'int' into an index-sized integer")
    return n


def _count_arg(size: Any) -> int:
    """A ``size`` argument the built-in takes as an int only (``peek``,
    ``read1``, a text file's ``readline``): None is refused, with
    ``TypeError`` at the call and the built-in's message, as any other
    object without ``__index__`` is."""
    if size is None:
        raise TypeError("'NoneType' object cannot be interpreted as an integer")
    n = operator.index(size)
    if not -_MAX_OFFSET - 1 <= n <= _MAX_OFFSET:
        raise OverflowError("Python int too large to convert to C ssize_t")  # (the built-in's here)
    return n


def _int_arg(value: Any, name: str) -> int:
    """An int argument (``seek``'s offset and whence), refused at the call
    with ``TypeError`` naming it."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not '{type(value).__name__}'") from None


def _poll_and_close(fd: int, wake: int) -> None:
    """Waits until ``fd`` is readable (or at its end, or failed), taking
    nothing from it, or until ``wake`` (a pipe's read end) is: its write
    end was closed, as the file was. Closes both."""
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        p.register(wake, select.POLLIN)
        while not p.poll():
            pass
    finally:
        os.close(fd)
        os.close(wake)


def _reopen_fifo(fd: int) -> int:
    """For a FIFO (one opened by path refuses reads that never wait): a
    descriptor of its own open file description, opened again through
    ``/proc/self/fd`` in non-blocking mode (``O_NONBLOCK`` there leaves
    the caller's description as it was), whose reads never wait; -1 for
    anything else (a terminal), or where that open fails. One descriptor
    more, held until the file is closed or detached."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISFIFO(st.st_mode):
            return -1
        again = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return -1
    try:
        same = os.fstat(again)
    except OSError:
        same = None
    if same is None or (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):
        os.close(again)
        return -1
    return again


#: Why :func:`read_line_inline` stopped (its second value; see stream.rs).
_LINE_DONE, _LINE_WAIT, _LINE_END, _LINE_MORE, _LINE_UNSUPPORTED, _LINE_FAILED = range(6)


class _LineNote:
    """What a stream's line read leaves for the next one, besides an error:
    :data:`_LINE_ENDED` or :data:`_LINE_GOES_ON`."""


#: The stream ended after the bytes a line read returned: the next one
#: returns ``b""``.
_LINE_ENDED = _LineNote()
#: The line goes on past the most bytes one read takes: the next line
#: read lets the other tasks run first.
_LINE_GOES_ON = _LineNote()


def _type_name(obj: object) -> str:
    """The name of ``obj``'s type as CPython's own errors give it: bare
    for built-in types and classes, ``module.name`` for other types made
    in C (``mmap.mmap``), which are the immutable ones."""
    t = type(obj)
    immutable = bool(t.__flags__ & (1 << 8))  # Py_TPFLAGS_IMMUTABLETYPE
    return f"{t.__module__}.{t.__qualname__}" if immutable and t.__module__ != "builtins" else t.__name__


def _write_all(fd: int, data: bytes) -> int:
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])
    return done


def _write_and_close(fd: int, data: bytes) -> int:
    try:
        return _write_all(fd, data)
    finally:
        os.close(fd)


def _close_owned(engine: Engine, num: int) -> None:
    """Closes ``num``, owned by a file of ``engine``, without awaiting:
    through the engine, which closes it once the operations still using
    the number in the core have completed, or at once when the engine can
    no longer run any (see `AsyncFile._close_descriptor`)."""
    if engine._usable_here:
        try:
            engine._core.submit_close(_NOBODY, num)
            return
        except RuntimeError:
            pass  # (closed meanwhile, by another thread)
    engine._core.disown(num)
    os.close(num)


class _StreamCall:
    """One call on a stream (a pipe, socket or terminal): a write, or a
    line read's wait for readiness where the event loop cannot watch the
    descriptor; ``call(fd, arg)``, on a daemon thread. Where the caller
    owns the number (``closefd=False``), ``fd`` is a duplicate of it that
    ``call`` closes, made before the calling task can be cancelled and the
    file closed (so a call still blocked then never reaches a file opened
    later under the same number). Where the file owns it (``owned``),
    ``fd`` is the number itself, no descriptor more per call: the file's
    close, while the call may still use the number, hands its closing to
    the call (:meth:`close_when_done`), which closes it once it has ended,
    so that the number is never released while the thread may still use
    it. Its outcome outlives the call that started it: a write
    blocked in the kernel cannot be taken back without losing bytes, so a
    task cancelled while waiting for it leaves it to the file. A write
    runs to its end, and a later write (given ``after``) starts only once
    it has, so that writes reach the stream whole and in the order they
    were made, as on aiofiles' file, whose lock orders its threads. A
    daemon thread never holds up interpreter exit, as a pool's would."""

    __slots__ = ("_lock", "_out", "_waiters", "_done", "_then_close")

    def __init__(self, call: Callable[[int, Any], Any], fd: int, arg: Any,
                 after: "Optional[_StreamCall]" = None, owned: bool = False) -> None:
        self._lock = threading.Lock()
        self._out: Optional[Tuple[bool, Any]] = None
        self._waiters: List[Tuple[Callable[..., Any], Callable[..., Any]]] = []
        self._done = threading.Event()
        #: The close of the number handed over by the file's close
        #: (see `close_when_done`), made once the call has ended.
        self._then_close: Optional[Callable[[], None]] = None
        use = fd if owned else os.dup(fd)
        try:
            threading.Thread(target=self._work, args=(call, use, arg, after), name="blockio-stream",
                             daemon=True).start()
        except BaseException:
            if not owned:
                os.close(use)
            raise

    def close_when_done(self, close: Callable[[], None]) -> bool:
        """Hands ``close`` (of the number the call uses, owned by its file)
        to the call, which makes it once it has ended, and so after every
        call it follows: whether it took it (false: it has ended, and the
        caller closes now)."""
        with self._lock:
            if self._out is not None:
                return False
            self._then_close = close
            return True

    def _work(self, call: Callable[[int, Any], Any], fd: int, arg: Any,
              after: "Optional[_StreamCall]") -> None:
        if after is not None:
            after._done.wait()
        try:
            out: Tuple[bool, Any] = (True, call(fd, arg))
        except BaseException as e:
            out = (False, e)
        with self._lock:
            self._out = out
            waiters, self._waiters = self._waiters, []
            then_close, self._then_close = self._then_close, None
        self._done.set()
        if then_close is not None:
            then_close()
        for call_soon, settle in waiters:
            try:
                call_soon(settle, out)
            except RuntimeError:
                pass  # that loop is closed: nobody waits there

    def done(self) -> bool:
        """Whether the call has ended."""
        return self._done.is_set()

    async def result(self) -> Any:
        """What the call returned (raises its error); cancelling this
        leaves the call running, its outcome kept for the next
        ``result()``."""
        with self._lock:
            out = self._out
            if out is None:
                fut = new_future()

                def settle(out: Tuple[bool, Any]) -> None:
                    if not fut.done():
                        fut.set_result(out)

                self._waiters.append((threadsafe_call_soon(), settle))
        if out is None:
            out = await fut
        ok, value = out
        if not ok:
            raise value
        return value


#: The files on streams, whose calls run on threads of their own (see
#: :class:`_StreamCall`), for :func:`_forget_parent_threads`.
_STREAM_FILES: "weakref.WeakSet[AsyncFile]" = weakref.WeakSet()


def _forget_parent_threads() -> None:
    """In a child just forked: the threads of the parent's stream calls
    do not exist here, so a call still running there (a read or write
    whose task was cancelled, a ``readline``'s wait) would never end in
    the child, and the file's next call, waiting for it, never either.
    Each file forgets such calls: its next read or write in the child is
    made anew. (What the parent's read then takes from the stream is the
    parent's, as when two processes read one pipe.)"""
    for f in list(_STREAM_FILES):
        f._forget_calls_running_elsewhere()


os.register_at_fork(after_in_child=_forget_parent_threads)

# What `read`, `seek` and `tell` return: a coroutine object written in Rust
# (`collections.abc.Coroutine` would find it one by its methods;
# registered, it need not look).
collections.abc.Coroutine.register(FileCall)


class AsyncFile(FileState, LineReader[bytes]):
    """A binary file opened by :func:`blockio.open`, with aiofiles'
    interface: coroutines ``read``, ``read1``, ``readall``, ``readinto``,
    ``peek``, ``readline``, ``readlines``, ``write``, ``writelines``,
    ``seek``, ``tell``, ``truncate``, ``flush``, ``fsync``, ``seekable``,
    ``writable``, ``isatty`` and ``close``, and ``fallocate``, which
    aiofiles lacks; plain methods ``fileno``,
    ``readable`` and ``detach``; ``async for line in f``."""

    # The file's state is all in the core's `FileState` (each attribute
    # set below is one of its fields), from which `seek`, `read`,
    # `readline`, `tell` and `write` are served inline; ``__dict__`` holds
    # only what a user sets, as the built-in file and aiofiles' take.
    __slots__ = ("__dict__", "__weakref__")

    def __init__(self, desc: _Descriptor, mode: str, engine: Engine, buffer_size: int, shared: bool,
                 write_buffer_size: Optional[int] = None, *, at_start: bool = False) -> None:
        self._file = desc
        self._engine = engine
        #: Calls on this file run one at a time, in the order made (see
        #: :mod:`blockio._calls`); a text file over it shares the queue.
        self._calls = CallQueue()
        self._init_state(desc, mode)
        self._find_position(desc, engine, at_start)
        #: The next read is the first since a seek: it reads what it asks
        #: for and no more (see `read`).
        self._seeked = False
        #: The descriptor's number may be known outside the file: one
        #: handed in or made by an ``opener``, or once ``fileno()`` has
        #: been asked for (see `_sync_offset`).
        self._shared = shared
        self._connect_callbacks(desc, engine, buffer_size,
                                buffer_size if write_buffer_size is None else write_buffer_size)

    def _init_state(self, desc: _Descriptor, mode: str) -> None:
        """Sets the file's position, buffers, mode and stream state as a
        newly opened file's (before its descriptor's offset is read)."""
        #: The logical position: where the next read or write happens.
        self._pos = 0
        #: In append mode after a write (and on open), the position is the
        #: file's end, looked up when it is needed.
        self._at_end = "a" in mode
        self._pending = None  # (see the core's `FileState`)
        self._seeks = 0  # (see the core's `FileState`)
        #: Read ahead: ``_rbuf[_roff:]`` are the bytes at ``_pos`` on. A
        #: read takes its bytes from the front by moving ``_roff``, so small
        #: reads from a large buffer do not copy the rest of it each time;
        #: once all are taken, ``_rbuf`` is ``b""`` and ``_roff`` 0 again
        #: (``_rbuf`` is true exactly while bytes are held).
        self._rbuf = b""
        self._roff = 0
        self._wbuf = bytearray()  # written, not flushed; ends at self._pos
        self._wpos = 0  # where the buffered bytes go (not in append mode)
        self._readable = "r" in mode or "+" in mode
        self._writable = any(c in mode for c in "wax+")
        self._append = "a" in mode
        self.mode = mode
        self.name = desc.name
        #: Not seekable (a pipe, socket or terminal): read and written in
        #: order, with no position; read on this thread once readable (see
        #: `_read_stream`), written on threads (see `_StreamCall`).
        self._stream = False
        #: The last write to a stream, which the next one follows.
        self._stream_write: Optional[_StreamCall] = None
        #: The messages of a datagram socket that a cancelled unbuffered
        #: read took and put back, each the next reads' alone (see
        #: `_put_back_stream`).
        self._messages: Tuple[bytes, ...] = ()
        #: For `_stream_line`: the wait for an unbuffered stream to become
        #: readable, left running by a cancelled ``readline`` for the next
        #: one; the pipe whose write end, closed, ends such a wait (made
        #: with the first); whether the stream takes reads that never wait
        #: (not a FIFO or a terminal); and what the last line read left for
        #: the next one: that the line goes on past ``read_line_inline``'s most
        #: bytes, or what ended it after some bytes, the stream's end
        #: (which a datagram socket's empty record reports once) or an
        #: error (a socket reports a reset once: its next read returns 0).
        self._stream_poll: Optional[_StreamCall] = None
        self._poll_wake: Optional[Tuple[int, int]] = None
        self._line_by_byte = True
        self._line_note: Union[OSError, _LineNote, None] = None

    def _find_position(self, desc: _Descriptor, engine: Engine, at_start: bool) -> None:
        """Reads the descriptor's offset as the position, or finds it a
        stream; a seekable file that owns its descriptor has the engine own
        it. ``at_start``: a regular file just opened by its path, at offset
        0 (nothing to read)."""
        try:
            # A descriptor handed in (``blockio.open(fd)``) is read and
            # written from its offset on, as the built-in open's file does.
            self._pos = 0 if at_start else os.lseek(desc.num, 0, os.SEEK_CUR)
        except OSError as e:
            self._stream = e.errno == errno.ESPIPE
            if self._stream:
                _STREAM_FILES.add(self)
                self._calls.stream = True
        if not self._stream:
            # Its writes, queued in the core: each reaches the file, in
            # order, once its call has begun, even if no Python code runs
            # again (see `Engine._awrite_kept`).
            desc.writes = WriteQueue()
        if desc.closefd:
            # The file owns the descriptor: its operations use the number
            # itself, with no duplicate each, and its close waits for
            # those whose task was cancelled (see `_close_descriptor`).
            engine._core.own(desc.num)
        if self._stream:
            # (its reads wait for the stream in the event loop's poll,
            # whoever owns the number: see `_read_stream`)
            self._stream_waits = Stops()
            self._stream_pieces = stream_in_pieces(desc.num)

    def _connect_callbacks(self, desc: _Descriptor, engine: Engine, buffer_size: int,
                           write_buffer_size: int) -> None:
        """Connects the descriptor's ``on_share`` and the queue's ``settle``
        and ``turn_due`` to the file (weakly), and serves it inline, with
        the read-ahead and write buffer sizes given."""
        me = weakref.ref(self)

        def on_share() -> None:
            f = me()
            if f is not None and not f._shared:
                f._shared = True
                f._sync_offset()

        desc.on_share = on_share

        def settle() -> None:
            f = me()
            if f is not None:
                f._update_inline()

        # (through a weak reference, as `on_share`: the file holds its queue,
        # and a queue holding the file would keep a dropped file alive until
        # the cycle collector runs, its buffered bytes unwritten until then)
        async def settle_writes() -> None:
            f = me()
            if f is not None:
                await f._writes_settled()

        self._calls.settle = settle
        self._calls.settle_writes = settle_writes
        self._serve(self._calls.free, engine._core, desc.num, buffer_size, write_buffer_size)
        # A buffered file's writes (its flushes) may be made on the loop's
        # thread if its engine was asked for it (see `Engine._write_now`).
        desc.inline_writes = engine._inline_writes and desc.writes is not None and self._bufsize > 0
        self._calls.turn_due = turn_due
        self._update_inline()

    # -- state ----------------------------------------------------------------

    def _update_inline(self) -> None:
        """Records whether ``seek`` and ``tell`` (``_inline``), ``read`` and
        ``readline`` (``_inline_read``), and ``write`` (``_inline_write``: a
        writing file, not in append mode) may be served inline: a
        seekable file, open, with no writes buffered and its position
        known. Run when the file is made, as
        every queued call ends (the queue's ``settle``: those calls are
        what changes it, and the calls served inline run only while no
        queued call does), and when it is detached; so it never says
        "inline" of a file that is not. It may say "not" of one that has
        become inline meanwhile, which only sends a call through the queue."""
        d = self._file
        self._set_inline(not (self._stream or d.closed or d.detached))

    @property
    def closed(self) -> bool:
        """Whether the file is closed (or detached)."""
        return self._file.closed or self._file.detached

    @property
    def raw(self) -> _Descriptor:
        """The descriptor under this file (what the built-in buffered
        file's ``raw`` is): ``fileno()``, ``name``, ``mode``, ``closed``,
        ``closefd``. Reads and writes go through this file, not through it."""
        return self._file

    @property
    def engine(self) -> Engine:
        """The engine this file's operations go through."""
        return self._engine

    def fileno(self) -> int:
        """The descriptor."""
        self._check_open()
        return self._file.fd  # (shares it: the offset follows the position from now on)

    def readable(self) -> bool:
        """Whether the file was opened for reading (``False`` even once
        closed for a buffered file that only writes, as the built-in's)."""
        if not self._readable and self._bufsize != 0:
            return False
        self._check_open()
        return self._readable

    async def writable(self) -> bool:
        """Whether the file was opened for writing (``False`` even once
        closed for a buffered file that only reads, as the built-in's)."""
        if not self._writable and self._bufsize != 0:
            return False
        self._check_open()
        return self._writable

    async def seekable(self) -> bool:
        """Whether the file supports seeking (a regular file or a device,
        not a pipe or a socket)."""
        self._check_open()
        try:
            os.lseek(self._file.num, 0, os.SEEK_CUR)
        except OSError:
            return False
        return True

    async def isatty(self) -> bool:
        """Whether the descriptor is a terminal."""
        self._check_open()
        return os.isatty(self._file.num)

    async def _writes_settled(self) -> None:
        """Waits until the writes the file's queue in the core still has
        are finished (those of calls whose event loop was closed: see
        ``CallQueue``), then raises the failure of one whose call never
        took its result, if any, as the call that took the queue over's,
        with the file's name. A write that stopped short leaves the
        position where its bytes stopped (the writes behind it refused), as
        the built-in's after a short write and the failed writes after it,
        unless a seek from the start was made since (the position it set
        stands); bytes buffered since are dropped, and the error names
        them."""
        writes = self._file.writes
        if writes is None:
            return
        core = self._engine._core
        await self._engine._run(None, lambda waiter: writes.settled(core, waiter))
        if self._pending is not None:
            token, offset = self._pending
            end = writes.marked(token)
            self._pending = None
            if end is None:
                self._at_end = True  # (its lookup failed: the end, looked up again)
            else:
                self._pos, self._at_end = end + offset, False
        error, stopped, shift = writes.take_error()
        if shift and not self._append and not self._anchored:
            # (a seek from the position placed behind a write that stopped
            # short never had its answer: the position planned past it is
            # that much past the built-in's; see `_place_rebase`)
            self._pos -= shift
            self._shifted += shift
        if error is not None:
            text = error.strerror or str(error)
            if stopped is not None and not self._append and not self._anchored:
                # (unless a seek from the start was made since, which set
                # the position whatever the bytes ahead did, as the
                # built-in's after its short write)
                if self._wbuf:
                    # Buffered after the write that stopped short, for
                    # offsets planned past bytes that never landed (the
                    # built-in would put them after the bytes its failed
                    # flush kept, which this file's closed loop never
                    # took back): not written, and said so.
                    text += f"; {len(self._wbuf)} bytes buffered for offset {self._wpos} were not written"
                    self._wbuf = bytearray()
                self._pos = stopped
            raise OSError(error.errno, text, self.name)

    def _sync_offset(self) -> None:
        """Leaves the descriptor's own offset at this file's position (at
        the end of what has been written, if writes are still buffered), as
        the built-in file leaves it: run after every call, so that whoever
        uses the descriptor next (a child process given ``fileno()``, the
        shell that passed it, the next ``open(fd)``) neither overwrites nor
        reads again what this file wrote or read. Reads and writes
        themselves are positional and never use that offset, so a
        descriptor whose number nobody else knows (``_shared``
        false: opened here by path, ``fileno()`` never asked for) is left
        alone, which saves a system call per call; giving the number out
        runs this first."""
        d = self._file
        if not self._shared or self._stream or self._at_end or self._pending or d.detached or d.closed:
            return
        try:
            os.lseek(d.num, self._wpos if self._wbuf else self._pos, os.SEEK_SET)
        except OSError:
            pass  # (a descriptor closed behind the file's back)

    def _check_open(self) -> None:
        if self._file.detached:
            raise ValueError("raw stream has been detached")
        if self._file.closed:
            raise ValueError("I/O operation on closed file.")

    def _live_fd(self) -> int:
        """The descriptor's number for the package's own use (not shared);
        ``ValueError`` once the file is closed."""
        self._check_open()
        return self._file.num

    def _check_seekable(self, seeking: bool = False) -> None:
        """For a stream, the built-in's error: FileIO's ``OSError(ESPIPE)``,
        and a buffered file's ``io.UnsupportedOperation`` (an ``OSError``
        and a ``ValueError``) for a seek."""
        if self._stream:
            if seeking and self._bufsize != 0:
                raise io.UnsupportedOperation("File or stream is not seekable.")
            raise OSError(errno.ESPIPE, os.strerror(errno.ESPIPE), self.name)

    def _refuse_absent_method(self, readable: bool, call: str) -> None:
        """For a buffered file that does not read (``readable``, or write):
        ``UnsupportedOperation`` naming the call, first of all (before its
        arguments are looked at, or whether it is closed), as the built-in
        buffered file's, which has no such method."""
        if self._bufsize != 0 and not (self._readable if readable else self._writable):
            raise io.UnsupportedOperation(call)

    def _check_readable(self, call: str = "read") -> None:
        """``UnsupportedOperation`` unless the file reads, in the built-in's
        words: FileIO's unbuffered, the buffered file's (the call's name)
        otherwise. A buffered file that does not read says so before it
        says it is closed (see `_refuse_absent_method`)."""
        self._refuse_absent_method(True, call)
        self._check_open()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")

    def _check_writable(self, call: str = "write") -> None:
        """As :meth:`_check_readable`, for writing (only ``write`` is a
        method the built-in buffered file that reads lacks)."""
        if call == "write":
            self._refuse_absent_method(False, call)
        self._check_open()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing" if self._bufsize == 0 else call)

    async def _position(self) -> int:
        """The logical position, looking up the end in append mode."""
        if self._pending is not None:
            # (its call ended without setting it: never, as it awaits its
            # mark to the end; the end, looked up again, as a safe answer)
            self._pending, self._at_end = None, True
        if self._at_end:
            await self._flush_writes()
            self._pos = await self._engine._asize(self._file)
            self._at_end = False
        return self._pos

    # -- positioning ----------------------------------------------------------

    # `tell`, `seek`, `read`, `readinto`, `readline` and `write` are the
    # core's (`FileState`; see `call.rs`): each returns a coroutine object
    # whose first step serves the common case inline, or else runs the
    # queued call below (`_tell`, `_seek`, `_read`, `_read_after_a_turn`,
    # `_readinto`, ...). The class holds each as a
    # `coroutine_method` (see `coromethod.rs`) of the `async def` below,
    # which gives its signature and code: `inspect.iscoroutinefunction`
    # and `asyncio.iscoroutinefunction` are true of `f.read`, as of
    # aiofiles', while a call goes straight to the core. (Types: the core's
    # stubs, `FileCall`.)

    if not TYPE_CHECKING:

        @coroutine_method
        async def read(self, size=-1):
            """Reads up to ``size`` bytes (all of the rest when negative or
            None); ``b""`` at end of file."""
            return await FileState.read(self, size)

        @coroutine_method
        async def seek(self, offset, whence=0):
            """Moves the position (``os.SEEK_SET``, ``SEEK_CUR``,
            ``SEEK_END``, and ``SEEK_DATA``, ``SEEK_HOLE`` as on Linux); the
            new position. Writes still buffered are flushed first."""
            return await FileState.seek(self, offset, whence)

        @coroutine_method
        async def tell(self):
            """The current position."""
            return await FileState.tell(self)

        @coroutine_method
        async def readline(self, size=-1):
            """One line, with its ``\\n`` (``b""`` at end of file); at most
            ``size`` bytes when ``size`` is given."""
            return await FileState.readline(self, size)

        @coroutine_method
        async def write(self, data):
            """Writes all of ``data`` (any bytes-like object) at the position,
            or at the end in append mode; the byte count. Buffered files keep
            it until the buffer fills, :meth:`flush` or close."""
            return await FileState.write(self, data)

        @coroutine_method
        async def readinto(self, buf):
            """Reads into ``buf`` (any writable buffer) at the position, until
            it is full or the file ends (one read, unbuffered); the byte
            count. Cached bytes go straight into ``buf``."""
            return await FileState.readinto(self, buf)

    else:
        # (for the type checker, coroutine functions, as `LineReader`'s
        # `readline`, which the core's stubs (`FileCall`) would conflict with)

        async def readline(self, size: Optional[int] = -1) -> bytes:  # type: ignore[override, empty-body]
            ...

        async def write(self, data: Buffer) -> int:  # type: ignore[override, empty-body]
            ...

        async def readinto(self, buf: Buffer) -> int:  # type: ignore[override, empty-body]
            ...

    # (in append mode after a write, the end is taken by a mark in the
    # file's write queue, in order: a write made meanwhile is placed behind
    # the mark, never looked up ahead of it)
    @one_at_a_time_placing(lambda f: True, takes_turns=True)
    async def _tell(self) -> int:
        self._check_open()
        self._check_seekable()
        if self._append and self._at_end and self._wbuf:
            return await self._tell_buffered_end()
        if self._calls.writing:
            return await self._tell_placing()
        return await self._position()

    async def _tell_placing(self) -> int:
        """``tell()`` made behind writes in progress, or holding the queue
        with the writes made meanwhile joining it: a mark placed in the
        file's write queue in the core (``WriteQueue.mark``) answers it
        once the entries ahead are done. Its answer is the position the
        call planned, unless a write ahead stopped short: then where its
        bytes stopped, as the built-in's (what was planned past them less
        what never landed). In append mode after a write, the position is
        the end at the time: the file's size once the entries ahead are
        done (the buffered bytes' write placed first); behind a seek from
        the end whose answer has not come (`_pending`), a mark relative to
        that seek's. With nothing in progress and no failure, the position
        is known now."""
        writes = self._file.writes
        assert writes is not None  # (a seekable file's: see `_find_position`)
        core, num = self._engine._core, self._file.num
        if self._at_end:
            begun = await self._place_behind_flush(lambda w: writes.mark(core, w, num, 0, True, True))
            return await self._placed_result(begun)
        if self._pending is not None:
            of, offset = self._pending
            at = await self._placed_result(self._engine._begin(
                self._file, lambda w: writes.mark(core, w, num, offset, False, False, of)))
            if at > _MAX_OFFSET:
                # (the seek's target was before the start: it failed, and
                # the position stayed at the end, as the built-in's)
                at = (at - offset) % (1 << 64)
            return at
        if writes.idle():
            return self._pos
        at, follows = self._pos, not self._anchored
        return await self._placed_result(self._engine._begin(self._file, lambda w: writes.mark(core, w, num, at,
                                                                                             follows)))

    async def _tell_buffered_end(self) -> int:
        """``tell()`` in append mode with bytes buffered: the end (the
        file's size once the entries of its write queue ahead are done,
        by a mark placed there if writes are in progress) plus the bytes
        buffered, which it does not write, as the built-in's ``tell``
        counts them without writing them. So bytes a failed flush kept
        are not tried again by each ``tell``: their failure comes once,
        from the next flush or ``close()``."""
        held = len(self._wbuf)
        writes = self._file.writes
        if writes is None or (not self._calls.writing and writes.idle()):
            return await self._engine._asize(self._file) + held
        core, num = self._engine._core, self._file.num
        end = await self._placed_result(self._engine._begin(self._file, lambda w: writes.mark(core, w, num, 0, True,
                                                                                              True)))
        return end + held

    async def _place_behind_flush(self, make: Callable[[Any], int],
                                  then: Optional[Callable[[int], Any]] = None) -> Tuple[Any, int]:
        """Places the buffered bytes' write, then the entry ``make(waiter)``
        starts, in the file's write queue before the call first yields: the
        entry's future and token (for `_placed_result`). A failure (or
        cancellation) of the flush is raised once the entry has ended, its
        result given to ``then`` (its own failure, refused behind the
        flush's, not raised)."""
        begun: List[Any] = []

        def place() -> None:
            try:
                begun.append(self._engine._begin(self._file, make))
            except Exception as e:  # (the engine closed, the process out of threads)
                begun.append(e)

        try:
            await self._flush_writes(then=place)
        except GeneratorExit:
            raise
        except BaseException:
            if begun and isinstance(begun[0], tuple):
                try:
                    await self._placed_result(begun[0], then)
                except OSError:
                    pass
            raise
        if isinstance(begun[0], BaseException):
            raise begun[0]
        placed: Tuple[Any, int] = begun[0]
        return placed

    async def _placed_result(self, begun: Tuple[Any, int], then: Optional[Callable[[int], Any]] = None) -> int:
        """Awaits the entry of the file's write queue ``begun`` (its future
        and token) to its end: its result, or its failure raised (taken:
        not reported again), or the cancellation that came meanwhile.
        ``then``, if given, runs with the result before a cancellation is
        raised (what the call must record of it, all the same)."""
        fut, token = begun
        results, cancelled = await self._engine._await_placed(fut)
        r = results[0]
        if then is not None and not isinstance(r, OSError):
            r = then(r)
        if isinstance(r, OSError):
            writes = self._file.writes
            assert writes is not None
            writes.claim(token)
            raise OSError(r.errno, r.strerror, self.name)
        if cancelled is not None:
            raise cancelled
        n: int = r
        return n

    @one_at_a_time_placing(lambda f, offset, whence: type(whence) is int and 0 <= whence <= 2
                           and (f._pending is None or whence != 1), takes_turns=True)
    async def _seek(self, offset: int, whence: int) -> int:
        whence = _int_arg(whence, "whence")
        if whence not in _C_INT:
            raise OverflowError(f"whence: {whence} is too large to convert to C int")  # (the built-in's type)
        holes = (getattr(os, "SEEK_DATA", -1), getattr(os, "SEEK_HOLE", -1))
        known = whence in (os.SEEK_SET, os.SEEK_CUR, os.SEEK_END) + holes
        if not known and self._bufsize != 0:
            # (the buffered file's, which checks whence before the offset)
            raise ValueError(f"whence value {whence} unsupported")
        self._check_open()  # (the built-in's order: closed, then the offset)
        offset = _int_arg(offset, "offset")
        if offset not in _OFF_T:
            # (the built-in's types: the buffered file's ValueError, FileIO's
            # OverflowError)
            kind = ValueError if self._bufsize else OverflowError
            raise kind(f"offset: {offset} does not fit a file offset (a 64-bit signed integer)")
        self._check_open()
        self._check_seekable(seeking=True)
        if not known:
            raise OSError(22, "Invalid argument", self.name)  # (FileIO's: lseek's EINVAL)
        q = self._calls
        if q.writing and self._append and (whence == os.SEEK_END or (whence == os.SEEK_CUR and self._at_end)):
            return await self._seek_end_placing(offset)
        if q.writing and (self._wbuf or q.joined or whence == os.SEEK_END):
            # (from the end always, also as the first call: the size looked
            # up on this thread, so that writes made behind the seek are
            # placed at once, at the end, rather than wait for it in Python)
            return await self._seek_placing(offset, whence)
        # (nothing to place, nor writes in progress; or a call not placed,
        # in append mode, whose end is looked up on the engine's threads:
        # with no call joining meanwhile)
        q.writing = False
        await self._flush_writes()
        if whence in holes:
            # The next data or hole at or after `offset` (ENXIO past the
            # end), as the built-in file's seek finds it on Linux.
            pos = os.lseek(self._file.num, offset, whence)
        elif whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = await self._position() + offset
        else:
            size = await self._engine._asize(self._file)
            if size == 0:
                # A size of 0 may say nothing of where the end is (procfs
                # refuses SEEK_END, a character device takes any offset):
                # the descriptor's lseek answers, as the built-in's seek asks it.
                try:
                    pos = os.lseek(self._file.num, offset, os.SEEK_END)
                except OSError as e:
                    raise OSError(e.errno, e.strerror, self.name) from None
            else:
                pos = size + offset
        return self._seek_to(pos)

    async def _seek_end_placing(self, offset: int) -> int:
        """``seek(offset, SEEK_END)`` (or from the position, at the end) in
        append mode, made behind writes in progress or holding the queue:
        the end is the file's size once the entries ahead are done, taken
        by a mark placed in the file's write queue (behind the buffered
        bytes' write) before the call first yields, so that writes made
        behind the seek join it (in append mode they go to the end at their
        time, whatever the position). Until the mark is answered the
        position is pending (`_pending`)."""
        writes = self._file.writes
        assert writes is not None
        core, num = self._engine._core, self._file.num

        mine: List[Tuple[int, int]] = []

        def make(waiter: Any) -> int:
            token: int = writes.mark(core, waiter, num, 0, True, True)
            self._pending, self._at_end = (token, offset), False
            mine.append(self._pending)
            self._drop_read_ahead()
            return token

        def moved(end: int) -> Any:
            pos = end + offset
            if self._pending != mine[0]:
                # (a write behind it moved the position to the end again:
                # the seek's answer alone, checked as the built-in's)
                if pos < 0 or pos > _MAX_OFFSET:
                    return OSError(22, "Invalid argument", self.name)
                return pos
            self._pending = None
            try:
                return self._seek_to(pos)
            except OSError as e:
                # (the position stays at the end, as the built-in's: the
                # end the mark answered, where a call behind it reads,
                # cuts or tells)
                self._pos, self._at_end = end, False
                return e

        pos = await self._placed_result(await self._place_behind_flush(make, moved), moved)
        return pos

    def _seek_to(self, pos: int) -> int:
        """Moves the position to ``pos`` (the seek's end), once ``pos`` is
        checked as the built-in's seek checks it."""
        if pos < 0 or pos > _MAX_OFFSET:
            # (lseek's EINVAL, which the built-in's seek reports, for a
            # position before the start or, from SEEK_CUR or SEEK_END,
            # past the largest file offset)
            raise OSError(22, "Invalid argument", self.name)
        if pos > _INLINE_OFFSET:
            # Past what every file system takes? Its lseek says, as the
            # built-in's seek finds out (ext4 refuses 16 TiB and more).
            try:
                os.lseek(self._file.num, pos, os.SEEK_SET)
            except OSError as e:
                raise OSError(e.errno, e.strerror, self.name) from None
        self._pos = pos
        self._at_end = False
        self._pending = None
        self._drop_read_ahead()
        self._seeked = True
        self._seeks += 1
        return pos

    async def _seek_placing(self, offset: int, whence: int) -> int:
        """``seek(offset, whence)`` (0, 1 or 2, not in append mode) made
        behind writes in progress, or holding the queue with the writes
        made meanwhile joining it (see `one_at_a_time_placing`): the new
        position is set before the call first yields, so that a write made
        next is placed at once, at that offset. The buffered bytes are
        flushed first, their write placed in the core; the position is
        then worked out against the file's write queue: the end is the size
        the file will have once the writes and truncations placed are done
        (`WriteQueue.size_after`, a ``statx`` on this thread; ``lseek``
        when nothing is queued). A seek from the end takes this path also
        as the file's first call. A flush that fails raises, and the
        position stays at the end of the bytes it kept, as the built-in's
        seek, whose flush failed: what writes made behind the seek buffered
        meanwhile goes after the kept bytes (where the built-in puts the
        writes made after its failed seek), and writes behind it placed in
        the core are refused there. (Calls behind it that only read the
        position, a ``tell``, saw the seek's target.)"""
        moved: List[Any] = []
        # (a seek from the start sets the position whatever the writes
        # ahead do, unless it flushes first: if that write fails, the seek
        # fails, and the position stays after the bytes it kept)
        anchor = not self._wbuf
        writes = self._file.writes
        assert writes is not None  # (a seekable file's: see `_find_position`)
        rebase: List[Tuple[Any, int]] = []
        size: Optional[int] = None

        def place() -> None:
            nonlocal size
            try:
                if whence == os.SEEK_SET:
                    pos = offset
                    self._anchored = anchor
                elif whence == os.SEEK_CUR:
                    pos = self._pos + offset
                else:
                    size = self._size_after()
                    if size is None:
                        # (the end the kernel knows, nothing being
                        # unfinished: a position of the file as it is, set
                        # whatever the writes ahead did, as from the start)
                        pos = os.lseek(self._file.num, offset, os.SEEK_END)
                        self._anchored = anchor
                    else:
                        pos = size + offset
                moved.append(self._seek_to(pos))
                # (set whatever the writes ahead do: one of them that fails
                # leaves it as it is, as the built-in's after its seek)
                self._anchors += self._anchored and anchor
                if size is not None and anchor:
                    # (a position from the end the writes ahead plan,
                    # after a seek from the start too: see `_place_rebase`)
                    self._anchored = False
                if whence != os.SEEK_SET and not self._anchored and anchor and not self._bufsize and not writes.idle():
                    rebase.append(self._place_rebase(pos, size))
            except OSError as e:
                moved.append(OSError(e.errno, e.strerror, self.name))

        def undo() -> bytearray:
            # The flush failed with bytes kept, after the seek moved the
            # position: as the built-in's seek, whose flush failed, the
            # position was not moved, and what writes made behind the seek
            # buffered (at offsets from the seek's target) goes after the
            # kept bytes, where the built-in's writes would have put it.
            # (Writes behind it placed in the core are refused there.)
            if not moved or isinstance(moved[0], OSError):
                return bytearray()
            behind, self._wbuf = self._wbuf, bytearray()
            self._anchors += 1  # (the position set again: see `_write_at`)
            return behind

        await self._flush_writes(then=place, undo=undo)
        if isinstance(moved[0], OSError):
            raise moved[0]
        pos: int = moved[0]
        if rebase:
            pos = await self._placed_result(rebase[0], self._rebased(pos, rebase[0][1]))
        return pos

    def _place_rebase(self, pos: int, size: Optional[int]) -> Tuple[Any, int]:
        """Places, for a seek from the position or the end made behind
        unfinished entries of the file's write queue, the mark that
        answers it (``WriteQueue.mark``'s ``rebase``): ``pos``, the
        position planned past the writes placed before it, less what a
        write ahead that stopped short never landed (where the built-in's
        seek goes, from where those bytes stopped); the writes placed
        behind it are then made that much lower, as the built-in's, rather
        than refused. A write placed before it that fails leaves the
        position to it (see `_end_write`). ``size``: for a seek from the
        end, the size it planned on (``WriteQueue.size_after``), which a
        truncation placed behind the write that stopped short may have set
        whatever the write did."""
        writes = self._file.writes
        assert writes is not None
        core, num = self._engine._core, self._file.num
        self._anchors += 1
        return self._engine._begin(self._file, lambda w: writes.mark(core, w, num, pos, True, False, None, True,
                                                                     size))

    def _rebased(self, planned: int, token: int) -> Callable[[int], int]:
        """What a seek placed by `_place_rebase` at ``planned`` does with
        its mark's answer ``at``: moves the position back by what never
        landed (the calls placed behind it moved it on from ``planned``),
        less what an earlier seek's answer moved it back already, unless a
        seek since set it again, and tells the file's write queue how much
        (the positions planned from now on are moved back that much less).
        An answer of ``_BEFORE_START`` plus an offset: the target moved back
        was before the start; as the built-in's seek there, it raises
        ``EINVAL`` with the position where the bytes ahead stopped (that
        offset), and the writes placed behind it until then (``token``'s
        call has its answer) are refused."""
        seeks, shifted = self._seeks, self._shifted

        def moved(at: int) -> int:
            writes = self._file.writes
            failed = at >= _BEFORE_START
            if failed:
                at -= _BEFORE_START
            if seeks == self._seeks and writes is not None:
                by = planned - at - (self._shifted - shifted)
                self._pos -= by
                self._shifted += by
                writes.rebased(max(by, 0))
            if failed:
                if writes is not None:
                    writes.claim(token)
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), self.name)
            return at

        return moved

    def _size_after(self) -> Optional[int]:
        """The size the file will have once the entries of its write queue
        in the core are done, or None if none is unfinished or it is not a
        regular file (its end is then ``lseek``'s: see
        `WriteQueue.size_after`)."""
        writes = self._file.writes
        assert writes is not None  # (a seekable file's: see `_find_position`)
        try:
            return writes.size_after(self._file.num)
        except OSError as e:
            raise OSError(e.errno, e.strerror, self.name) from None

    # -- reading ----------------------------------------------------------------

    async def _pread(self, size: int, at: int) -> bytes:
        """One read of up to ``size`` bytes (at most :data:`_MAX_IO`)."""
        size = min(size, _MAX_IO)
        if self._stream:
            return await self._read_stream(size)
        return await self._engine.aread(self._file, offset=at, length=size)

    async def _read_stream(self, size: int) -> bytes:
        """One read of up to ``size`` bytes of a stream, in order, with
        no thread and no duplicate descriptor: a read that never waits, on
        this thread (``read_stream_inline``); while the stream has nothing,
        a wait for it to become readable in the event loop's own poll
        (:meth:`_until_stream_readable`), which takes nothing from the
        stream and holds no place in the engine's bound on operations in
        flight, then the read again. So a cancelled read leaves every byte
        in the stream, and ``close`` has no operation to wait for: it ends
        the wait, and the read raises ``OSError`` (``ECANCELED``), also
        where the caller owns the number (``closefd=False``), which the
        read then leaves open and unread. The messages of a datagram
        socket put back by a cancelled unbuffered read (see
        :meth:`_put_back_stream`) come first, each alone. An error
        the stream gave after the bytes a read returned is raised by the
        next read (some are reported once: a reset socket's next read
        returns 0). A descriptor in non-blocking mode raises
        ``BlockingIOError`` instead of waiting (where ``FileIO.read``
        returns None), as the file's ``readline`` does. A FIFO opened by
        path refuses reads that never wait: it is opened again, on an open
        file description of its own in non-blocking mode
        (:func:`_reopen_fifo`), and read there, the same way. A terminal,
        or a stream the loop cannot watch, is read through the engine
        once readable (:meth:`_read_through_engine`)."""
        if self._messages:
            first, rest = self._messages[0], self._messages[1:]
            # (a message longer than asked for is cut, its rest returned alone next)
            self._messages = ((first[size:],) if len(first) > size else ()) + rest
            return first[:size]
        note = self._line_note
        if isinstance(note, OSError):
            self._line_note = None
            raise note
        fd = self._live_fd()
        if self._engine._kept_reads:
            kept = self._engine._take_kept(_stream_key(fd, True) or (fd, -1, -1, True), size)
            if kept is not None:
                return kept
        while True:
            fd = self._live_fd()
            if self._line_by_byte:
                try:
                    got = read_stream_inline(fd, size, self._stream_pieces)
                except OSError as e:
                    if e.errno != errno.EOPNOTSUPP:
                        raise
                    self._line_by_byte = False
                else:
                    if got is not None:
                        data, code = got
                        if code:
                            self._line_note = OSError(code, os.strerror(code))
                        return data
                    if not os.get_blocking(fd):
                        raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
                    if not await self._until_stream_readable(fd):
                        return await self._read_through_engine(fd, size)
                    continue
            if self._stream_nowait is None:
                self._stream_nowait = _reopen_fifo(fd)
            nowait = self._stream_nowait
            if nowait < 0:
                if not os.get_blocking(fd):
                    return os.read(fd, size)  # (returns at once, or raises BlockingIOError)
                await self._until_stream_readable(fd)
                return await self._read_through_engine(fd, size)
            try:
                return os.read(nowait, size)
            except BlockingIOError:
                pass
            if not os.get_blocking(fd):
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            if not await self._until_stream_readable(nowait):
                return await self._read_through_engine(fd, size)

    async def _read_through_engine(self, fd: int, size: int) -> bytes:
        """A read of a stream the file owns through the engine (a
        terminal, or a stream the loop cannot watch), once the loop's poll
        says it is readable (or at once where the loop cannot watch it), on
        the number itself, which the engine counts until the read has
        completed, for ``close`` to wait. Its task cancelled, the read is
        waited for a moment and its bytes kept for the next read
        (:meth:`Engine._read_kept`), which returns them first. One whose
        bytes another reader of the stream took between the readiness and
        the read waits in the kernel for more, and ``close`` waits for it
        (see the README)."""
        key = _stream_key(fd, True) or (fd, -1, -1, True)
        r = await self._engine._read_kept(self._file, key, 0, size)
        if type(r) is bytes:
            return r
        out: bytes = _finish([r], [self.name if isinstance(self.name, (str, bytes)) else None], False)[0]
        return out

    async def _until_stream_readable(self, fd: int) -> bool:
        """Until the stream the file owns is readable, at its end or
        failed, in the event loop's poll (:func:`wait_readable`): whether
        it waited (False, at once, for a descriptor the loop cannot
        watch). ``close`` ends the wait: ``OSError`` (``ECANCELED``)."""
        waits = self._stream_waits
        if waits is None or waits.ended:
            raise self._cut_by_close()
        waited = await wait_readable(fd, waits)
        if waits.ended:
            raise self._cut_by_close()
        return waited

    def _cut_by_close(self) -> OSError:
        """What a read whose wait ``close`` ended raises."""
        return OSError(errno.ECANCELED, "close() ended this read while it waited for the stream", self.name)

    def _end_stream_waits(self) -> Optional[Stops]:
        """Ends the readiness waits of a stream the file owns (see
        :meth:`_until_stream_readable`), and every one that begins before
        :meth:`_resume_stream_waits`: the file is closing, and no read of
        it may wait any more. What was ended (None: not such a stream)."""
        waits = self._stream_waits
        if waits is not None:
            waits.end()
        return waits

    def _resume_stream_waits(self, ended: Optional[Stops]) -> None:
        """After a ``close`` that did not close the file (cancelled before
        its turn came): the file's reads may wait again."""
        if ended is not None and self._stream_waits is ended and not self._file.closed:
            self._stream_waits = Stops()

    async def _fill(self) -> bytes:
        """Reads ahead one buffer's worth if the read buffer is empty; the
        bytes held (empty at end of file)."""
        if not self._rbuf:
            await self._flush_writes()
            pos = await self._position()
            self._rbuf = await self._pread(max(self._bufsize, 1), pos)
        return self._held_bytes()

    @one_at_a_time
    async def _read_after_a_turn(self, size: Optional[int]) -> bytes:
        """`read`'s call served inline (from the buffer or the page cache)
        whose turn of the event loop is due: yields to the event loop once,
        holding the file's place in the queue (calls made after it wait; a
        cancellation there reads nothing), then reads as `read` does, on
        this thread when the bytes are buffered or cached. (``size`` is an
        int: `read_inline` says a turn is due for nothing else.)"""
        assert size is not None
        await pause()
        data = self._read_after_turn(size)
        if data is True:
            data = await self._next_pieces()
        if data is not None:
            return data
        got: bytes = await self._read(size)
        return got

    def _turn_queue(self) -> Any:
        """For a `read` served inline whose turn of the event loop is due
        (`FileCall`, `python/src/call.rs`): takes the file's call queue,
        free, for the running asyncio task, which the call then holds while
        it yields to the loop once, bare, as ``asyncio.sleep(0)`` does,
        with no coroutine of its own. The task, or None (no asyncio task
        runs this call, as in trio, or the queue is not free): the call
        goes through `_read_after_a_turn` instead."""
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return None
        q = self._calls
        if not isinstance(task, asyncio.Task) or q._owner is not None:
            return None
        if q._enter(task) is not None:  # (never: it was free, on this thread)
            raise RuntimeError("the file's call queue was not free")
        return task

    def _turn_done(self, task: Any) -> None:
        """Ends a call that took the queue by `_turn_queue`: as every queued
        call ends (the descriptor's offset, then the queue handed on)."""
        try:
            self._sync_offset()
        finally:
            self._calls._release(task)

    def _turn_served(self, task: Any) -> None:
        """`_turn_done` for a read served inline after its turn: the queue
        handed on, no more. Like every call served inline it changed
        nothing the queue's ``settle`` records (`_update_inline`) and moved
        the descriptor's offset itself when its number is known
        (`FileState::moved_to`), so neither runs."""
        q = self._calls
        with q._lock:
            if q._owner is task:
                q._hand_on()

    async def _read_turned(self, size: int, data: Any, task: Any) -> bytes:
        """The rest of a `read` whose call took its turn of the event loop
        itself, holding the queue for ``task`` (`_turn_queue`): ``data``
        what `_read_after_turn` gave after the turn, True (the pieces go
        on, each after a turn) or None (read through the engine); the
        queue is handed on at the end, as `_read_after_a_turn` does."""
        try:
            if data is True:
                data = await self._next_pieces()
            if data is not None:
                got: bytes = data
                return got
            got = await self._read(size)
            return got
        finally:
            self._turn_done(task)

    @one_at_a_time
    async def _read_pieces(self, size: int) -> bytes:
        """`read(size)` served inline in pieces (the core's
        `FileState.read_pieces`), whose first piece its call read at its
        first step: reads the others, each after a turn of the event loop,
        holding the file's place in the queue; or, when a piece is not all
        in the page cache, reads it all through the engine (the pieces
        read are dropped, the position had not moved)."""
        data = await self._next_pieces()
        if data is not None:
            return data
        got: bytes = await self._read(size)
        return got

    async def _next_pieces(self) -> Optional[bytes]:
        """The pieces left of the read served in pieces under way, each
        after a turn of the event loop: its bytes, or None if a piece was
        not all cached. Cancelled during a turn, the read is dropped and
        the position stays where it was."""
        try:
            while True:
                await pause()
                data = self._next_piece()
                if data is not True:
                    return data
        finally:
            self._drop_pieces()

    @one_at_a_time_taking_turns
    async def _read(self, size: Optional[int]) -> bytes:
        if _MODE_BEFORE_SIZE:
            self._refuse_absent_method(True, "read")
        size = _size_arg(size)
        self._check_readable()
        if size < -1 and self._bufsize > 0:
            # (the built-in buffered file's error; its unbuffered FileIO,
            # as buffering=0 here, reads all)
            raise ValueError("read length must be non-negative or -1")
        if size < 0:
            return await self._read_rest()
        after = size > _PIECE and size > self._held() and not self._stream
        head = self._take(min(size, self._held()))
        size -= len(head)
        # An unbuffered stream returns what one read gives, as FileIO's
        # read does (bytes read ahead by `peek`, or by `readline` on a
        # terminal, count as that read):
        # what a peer sent so far, never waiting for more.
        once = self._bufsize == 0 and self._stream
        if once and head:
            return head
        parts = [head] if head else []
        seeked, self._seeked = self._seeked, False
        try:
            if after and (head or size > _MAX_IO) and (seeked or size >= self._bufsize) and _fresh_ok(self._file):
                # More than a piece, more than the buffer holds, after bytes
                # read ahead or past what one read(2) takes: one object the
                # kernel fills in pieces, starting with the bytes held (the
                # built-in's read returns them too, even if the file changed
                # since), none joined on this thread. Unbuffered, one read
                # of at most `_MAX_IO`, as FileIO's read. (A read the buffer
                # holds, with `buffering` above a piece, is one copy.)
                await self._flush_writes()
                at = await self._position()
                want = size if self._bufsize else min(size, _MAX_IO)
                if want > _MAX_IO:
                    # The object is allocated whole before it is read: no
                    # more than a regular file holds, and where the size
                    # says nothing (0: a device, a procfs file) and memory
                    # cannot hold it all, one read(2)'s worth, then on.
                    known = await self._engine._asize(self._file)
                    if known:
                        want = min(want, max(known - at, 0) + 1)
                try:
                    whole = await self._engine._aread_after(self._file, head, at, want)
                except MemoryError:
                    if want <= _MAX_IO:
                        raise
                    want = _MAX_IO
                    whole = await self._engine._aread_after(self._file, head, at, want)
                got = len(whole) - len(head)
                self._pos += got
                parts = [whole]
                # (short: the end, confirmed by the engine's reads; full
                # but less than asked, buffered: the file grew, read on)
                size = size - got if got == want and self._bufsize else 0
            while size > 0:
                if self._bufsize > 0 and size < self._bufsize and not seeked:
                    if not await self._fill():
                        break
                    part = self._take(size)
                else:
                    await self._flush_writes()
                    part = await self._pread(size, await self._position())
                    self._pos += len(part)
                    if not part:
                        break
                parts.append(part)
                size -= len(part)
                if self._bufsize == 0:
                    # FileIO's read: one read(2), which a regular file fills
                    # but at its end, and a procfs file, a pipe or a socket
                    # may not.
                    break
        except BaseException as e:
            if self._keep_stream_error(e, any(parts)):
                return b"".join(parts)
            self._unread(b"".join(parts))
            raise
        if len(parts) == 1:
            return parts[0]  # (as it came: a large read's object, not a copy)
        return b"".join(parts)

    def _keep_stream_error(self, e: BaseException, got: bool) -> bool:
        """Whether a read of a stream that raised ``e`` after it got bytes
        (``got``) returns them instead, as ``FileIO``'s read returns what
        one read gave before an error: for an ``OSError``, which is then
        the next read's to raise (``_line_note``), so that no byte comes
        after the error that followed it; but ``BlockingIOError`` (a
        descriptor in non-blocking mode with nothing more now), which the
        next read meets again if the stream still has nothing, as the
        built-in buffered file returns what it has then. A cancellation is
        raised, and the bytes put back."""
        if not (got and self._stream and isinstance(e, OSError)):
            return False
        if not isinstance(e, BlockingIOError):
            self._line_note = e
        return True

    def _put_back_stream(self, got: List[bytes]) -> None:
        """Puts back what a cancelled read to a stream's end got, after
        the bytes held (read ahead before it, put back already): for the
        next reads to return first. A datagram socket read unbuffered
        keeps each message apart (each read returns one, as ``FileIO``'s
        returns one ``recv``), before the messages put back earlier, which
        the cancelled read had not reached; else they join the read
        buffer."""
        if self._bufsize == 0 and not self._stream_pieces:
            self._messages = tuple(m for m in got if m) + self._messages
        else:
            self._rbuf += b"".join(got)

    def _mark(self) -> Tuple[int, bytes, int, bool, bool]:
        """Where reading is: what :meth:`_restore` goes back to when a
        call made of reads (``readlines``) is cancelled or fails."""
        return (self._pos, self._rbuf, self._roff, self._at_end, self._seeked)

    def _restore(self, mark: Tuple[int, bytes, int, bool, bool]) -> None:
        """Back to ``mark``, as if the reads since had not happened. (Writes
        buffered then have been flushed since: the position is the same.)"""
        self._pos, self._rbuf, self._roff, self._at_end, self._seeked = mark

    def _in_order(self) -> bool:
        return self._stream

    async def _rest_in_lines(self) -> List[bytes]:
        # Read and cut a piece at a time, a turn of the loop between two,
        # so that no more than a piece of bytes is held (and freed) at
        # once. (BytesIO's readlines cuts at b"\n" only, as readline does,
        # faster than bytes.splitlines.) A line not ended in its piece is
        # joined once, where a later piece ends it.
        lines: List[bytes] = []
        carry: List[bytes] = []
        while True:
            data = await self.read(SPLIT_PIECE)
            if carry and b"\n" not in data:
                carry.append(data)
            else:
                got = io.BytesIO(data).readlines()
                if carry:
                    carry.append(got[0])
                    got[0] = b"".join(carry)
                    carry.clear()
                if got and not got[-1].endswith(b"\n"):
                    carry.append(got.pop())
                lines.extend(got)
            if len(data) < SPLIT_PIECE:
                break
            await pause()
        if carry and (line := b"".join(carry)):
            lines.append(line)
        return lines

    def _keep_error(self, e: BaseException) -> bool:
        return self._keep_stream_error(e, True)

    def _put_back(self, lines: List[bytes]) -> None:
        self._unread(b"".join(lines))

    @one_at_a_time_taking_turns
    async def read1(self, size: int = -1) -> bytes:
        """At most one read from the file: what the read buffer holds, or
        one read of up to ``size`` bytes (a buffer's worth when negative)."""
        if _MODE_BEFORE_SIZE:
            self._refuse_absent_method(True, "read1")
        size = _count_arg(size)
        self._check_readable("read1")
        if self._rbuf:
            return self._take(self._held() if size < 0 else size)
        await self._flush_writes()
        want = (self._bufsize or io.DEFAULT_BUFFER_SIZE) if size < 0 else size
        data = await self._pread(want, await self._position())
        self._pos += len(data)
        return data

    @one_at_a_time_taking_turns
    async def readall(self) -> bytes:
        """Reads to the end of the file."""
        self._check_readable()
        return await self._read_rest()

    async def _read_rest(self) -> bytes:
        head = self._take(self._held())
        more: List[bytes] = []
        try:
            return await self._read_rest_after(head, more)
        except BaseException as e:
            if self._keep_stream_error(e, bool(head) or any(more)):
                return b"".join([head, *more])
            self._unread(head)  # (cancelled or failed: the position is back)
            if self._stream:
                # A stream's bytes cannot be read again: those read on
                # past the buffer come next too.
                self._put_back_stream(more)
            raise

    async def _read_rest_after(self, head: bytes, got: List[bytes]) -> bytes:
        """The bytes from the position to the end, after ``head`` (the
        bytes read ahead), each read's bytes added to ``got`` as they
        come. As the built-in's ``readall``: one read of what the
        file's size says is left and a byte more, which comes back only if
        the file grew meanwhile; then, while reads come back full (the file
        grew) or the size said nothing (0: a pipe, a procfs file), reads of
        as much again as has been read, until one comes back short (a
        regular file with a size, at its end) or empty. The memory is that
        of the bytes read, in the object returned (the engine reads into
        it, in pieces, off this thread: see ``Core.submit_read``). The
        bytes read ahead of a file that is not a stream start the object
        of its first read (``Engine._aread_after``): the built-in's
        ``readall`` returns them too, even if another writer changed the
        file since; none is joined on this thread."""
        await self._flush_writes()
        pos = await self._position()
        if self._stream:
            size = 0
        elif self._writable:
            size = await self._engine._asize(self._file)
        else:
            size = await self._engine._asize_read_only(self._file)
        want = size - pos + 1 if size > pos else _FIRST_CHUNK
        at = pos
        while True:
            lead = b""
            if self._stream:
                want = min(want, _MAX_IO)
                more = await self._read_stream(want)
            elif (head or (not got and want > _MAX_IO)) and _fresh_ok(self._file):
                # After the bytes held, or past what one read(2) returns:
                # one object the engine fills in pieces.
                lead, head = head, b""
                more = await self._engine._aread_after(self._file, lead, at, want)
            else:
                # (not `_pread`, whose cached try on this thread never
                # serves a read asking for a byte past the end)
                want = min(want, _MAX_IO)
                more = await self._engine._aread_at(self._file, at, want)
            n = len(more) - len(lead)
            if more:
                got.append(more)
                at += n
            if not n or (size and n < want):
                break
            want = max(at - pos, _FIRST_CHUNK)
        self._pos = at
        if not head and len(got) == 1:
            return got[0]
        return b"".join([head, *got])

    @one_at_a_time_taking_turns
    async def _readinto(self, buf: Buffer) -> int:
        """The queued ``readinto(buf)`` not served inline: reads into
        ``buf`` (any writable buffer) without an extra copy when nothing is
        buffered; the byte count."""
        # Before anything is read, and before the mode is checked, as the
        # built-in's: no byte is taken for a buffer that cannot hold it.
        try:
            with memoryview(buf) as view:
                size = -1 if view.readonly or not view.c_contiguous else view.nbytes
        except Exception:
            # Any object that cannot export a buffer now (not a buffer, a
            # closed mmap's ValueError): TypeError, as the built-in's
            # argument parsing raises whatever the export's own error.
            size = -1
        if size < 0:
            # (FileIO's words, unbuffered, from Python 3.12 on: "argument 1")
            which = " 1" if self._bufsize == 0 and sys.version_info >= (3, 12) else ""
            raise TypeError(f"readinto() argument{which} must be read-write bytes-like object, not {_type_name(buf)}")
        self._check_readable()
        if self._stream:
            # As `read`: buffered, until `buf` is full or the stream ends,
            # as the built-in buffered file's readinto; unbuffered, one
            # read. Into bytes of its own, copied at the end, and no view
            # of `buf` held across an await: a cancelled read never leaves
            # the caller's buffer exported (and `read` keeps its bytes).
            data = await self._read(size)
            _copy_into(buf, data)
            return len(data)
        if self._rbuf:
            n = min(size, self._held())
            head = self._take(n)
            _copy_into(buf, head)
            if n == size:
                return n
            # As the built-in buffered file: short only at end of file. The
            # rest goes straight into the caller's buffer.
            try:
                more = await self._read_into(memoryview(_flat(buf))[n:])
            except BaseException:
                self._unread(head)
                raise
            return n + more
        await self._flush_writes()
        await self._position()
        # (cached bytes straight into `buf`, on this thread, as the call
        # served inline reads them: after a turn, or behind another call)
        done = self._readinto_cached(buf)
        if done is not None:
            return done
        return await self._read_into(memoryview(_flat(buf)))

    async def _read_into(self, view: memoryview) -> int:
        """Reads into ``view`` at the position, moving it: until ``view`` is
        full or the file ends, buffered (one read returns at most 2 GiB
        less a page), as the built-in buffered file's ``readinto``; one
        read, unbuffered, as ``FileIO``'s. Cancelled or failed, the
        position does not move."""
        done = 0
        while done < len(view):
            n = await self._engine.areadinto(self._file, view[done:], self._pos + done)
            done += n
            if n == 0 or self._bufsize == 0:
                break
        self._pos += done
        return done

    @one_at_a_time_taking_turns
    async def peek(self, size: int = 0) -> bytes:
        """The buffered bytes at the position, reading ahead if none are
        buffered, without moving the position (at most one read)."""
        _count_arg(size)  # (checked as the built-in's; it asks for no more)
        self._check_readable("peek")
        held = await self._fill()
        count_copied(len(held))
        return held

    @one_at_a_time_taking_turns
    async def _readline(self, size: Optional[int]) -> bytes:
        limit = _size_arg(size)
        if limit == 0:
            return b""  # as io's readline, which asks the file nothing then
        self._check_readable()
        line = bytearray()
        try:
            while limit < 0 or len(line) < limit:
                if not await self._fill_for_line(-1 if limit < 0 else limit - len(line)):
                    break
                rbuf, off = self._rbuf, self._roff
                held = len(rbuf) - off
                want = held if limit < 0 else min(held, limit - len(line))
                i = rbuf.find(b"\n", off, off + want)
                line += self._take(want if i < 0 else i - off + 1)
                if i >= 0:
                    break
        except BaseException as e:
            # (but a descriptor in non-blocking mode: FileIO's readline raises
            # there, and the part read is put back for the next)
            if isinstance(e, BlockingIOError) or not self._keep_stream_error(e, bool(line)):
                self._unread(bytes(line))
                raise
        if self._bufsize == 0 and not self._stream:
            # Unbuffered, as the built-in's FileIO: what was read past the
            # line is not kept, so the next call reads the file as it is
            # then. (A stream's bytes cannot be read again: they stay.)
            self._drop_read_ahead()
        return bytes(line)

    async def _fill_for_line(self, limit: int) -> bool:
        """Fills the read buffer if empty, for ``readline``; whether it
        holds bytes (not at the end): at most ``limit`` bytes of the line
        (negative: no limit) are wanted.
        Unbuffered files read lines ahead too, in small steps: a line
        read never leaves the position past the line. An unbuffered stream
        is read one byte at a time, as ``FileIO`` reads it, so that no byte
        past the line is taken from it (see `_stream_line`)."""
        if not self._rbuf:
            if self._bufsize == 0 and self._stream and self._line_by_byte and not self._messages:
                self._rbuf = await self._stream_line(limit)
                if self._line_by_byte:
                    return bool(self._rbuf)
            await self._flush_writes()
            pos = await self._position()
            self._rbuf = await self._pread(max(self._bufsize, 8192), pos)
        return bool(self._rbuf)

    async def _stream_line(self, limit: int) -> bytes:
        """The next bytes of a line of an unbuffered stream, up to its
        ``\\n`` or ``limit`` bytes, read on this thread by reads that never
        wait (``read_line_inline``); ``b""`` at the stream's end. While the
        stream has nothing, the line read waits for it to become readable,
        taking nothing from it (in the event loop's poll for a stream the
        file owns, see `_until_stream_readable`; else on a thread, over a
        duplicate of the caller's descriptor, see `_until_readable`), so
        that a cancelled ``readline`` holds no byte back: a thread's wait
        is left for the next line read, and the bytes of the
        line read so far are put back by ``readline``. A descriptor in
        non-blocking mode raises ``BlockingIOError`` then instead, as the
        file's ``read`` does. A stream that refuses such reads (a FIFO or a
        terminal) is read ahead instead (``_line_by_byte`` false; see the
        README)."""
        note = self._line_note
        if isinstance(note, OSError):
            self._line_note = None
            raise note
        if note is _LINE_ENDED:
            # (Set and taken within one readline: nothing awaits between.)
            self._line_note = None
            return b""
        limit = min(limit, _MAX_OFFSET)
        while True:
            if self._line_note is _LINE_GOES_ON:
                # Let the other tasks run between the parts of a long line
                # (before reading, so that a cancellation here reads nothing).
                await pause()
                self._line_note = None
            fd = self._live_fd()
            data, stop, code = read_line_inline(fd, limit)
            if stop == _LINE_MORE:
                self._line_note = _LINE_GOES_ON
            elif stop == _LINE_FAILED:
                self._line_note = OSError(code, os.strerror(code))
            elif stop == _LINE_END and data:
                self._line_note = _LINE_ENDED
            if data or stop in (_LINE_DONE, _LINE_END):
                return data
            if stop == _LINE_UNSUPPORTED:
                self._line_by_byte = False
                return b""
            if not os.get_blocking(fd):
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            await self._until_readable()

    async def _until_readable(self) -> None:
        """Until the stream is readable (see `_stream_line`): in the event
        loop's poll when the file owns the descriptor and the loop can
        watch it; else on a thread that a cancellation leaves running for
        the next call, and that closing or detaching the file ends."""
        if await self._until_stream_readable(self._live_fd()):
            return
        poll = self._stream_poll
        if poll is None:
            if self._poll_wake is None:
                self._poll_wake = os.pipe()
            wake = os.dup(self._poll_wake[0])
            try:
                poll = self._stream_poll = _StreamCall(_poll_and_close, self._live_fd(), wake)
            except BaseException:
                os.close(wake)
                raise
        try:
            await poll.result()
        finally:
            if poll.done():
                self._stream_poll = None

    def _forget_calls_running_elsewhere(self) -> None:
        """See :func:`_forget_parent_threads`."""
        for name in ("_stream_write", "_stream_poll"):
            call = getattr(self, name)
            if call is not None and not call.done():
                setattr(self, name, None)

    def _end_waits(self) -> None:
        """Ends the wait of `_until_readable` left running, if any: the file is
        closed or detached, and its thread must let go of the stream."""
        wake, self._poll_wake = self._poll_wake, None
        if wake is not None:
            os.close(wake[1])
            os.close(wake[0])
        nowait, self._stream_nowait = self._stream_nowait, None
        if nowait is not None and nowait >= 0:
            os.close(nowait)

    # -- writing ----------------------------------------------------------------

    # `write` and `readline` are the core's (see `read` above), which run
    # `_write_queued`'s coroutine, or `_readline`, when not served inline.

    def _write_queued(self, data: Buffer) -> Coroutine[Any, Any, int]:
        """The queued ``write(data)`` not served inline (into the buffer)."""
        if not self._calls.free and type(data) is not bytes:
            # Another call is in progress, so this one waits for its turn:
            # it writes the bytes ``data`` holds now, as the built-in's
            # write, made at once, would (not what it holds by then).
            data = _snapshot(data)
        return self._write(data)

    @one_at_a_time_kept
    async def _write(self, data: Buffer) -> int:
        # (the built-in's order: the mode of a buffered file, the argument,
        # then whether the file is closed)
        self._refuse_absent_method(False, "write")
        try:
            view = memoryview(data)  # (str included: not bytes-like)
        except TypeError:
            raise _not_bytes_like(data) from None
        if not view.c_contiguous:
            view.release()
            raise _not_contiguous(data)
        self._check_writable()
        view = view.cast("B")
        if not view:
            return 0  # moves nothing, not even to the end in append mode
        if self._bufsize == 0 and len(view) > _MAX_IO:
            # As FileIO's write, one write(2): at most what one returns.
            view = view[:_MAX_IO]
        if self._rbuf:
            self._drop_read_ahead()
        if self._bufsize > 0 and len(self._wbuf) + len(view) < self._wbufsize:
            self._buffer(view)
            return len(view)
        if self._wbuf and not self._stream:
            return await self._flush_with(view)
        try:
            await self._flush_writes()
        except BaseException as e:
            if is_cancellation(e) and self._bufsize > 0:
                # The write was made: cancelled while the bytes before it
                # were flushed, its own are kept in the buffer, after them,
                # for the next flush or close (as a write cancelled while
                # waiting for its turn still runs).
                self._buffer(view)
            raise
        if self._bufsize == 0 or self._stream:
            return await self._write_through(view, short_ok=self._bufsize == 0)
        return await self._write_through_buffered(view)

    async def _write_through_buffered(self, view: memoryview) -> int:
        """A buffered file's write of ``view``, too long for its buffer,
        written through, as the built-in buffered file's: that one writes
        while more than a buffer's worth is left, so when a write stops
        short (``EFBIG``, ``ENOSPC`` part-way) with a buffer's worth or less
        left, it keeps the rest in its buffer and succeeds (the next flush
        meets the failure); with more left, it raises, keeping nothing."""
        landed = [0]
        try:
            return await self._write_through(view, landed=landed)
        except OSError:
            rest = view[landed[0]:]
            if not rest or len(rest) > self._wbufsize or self._wbuf:
                raise  # (or writes made meanwhile were buffered: they raise in turn)
            self._buffer(rest)
            return len(view)

    async def _flush_with(self, view: memoryview) -> int:
        """Writes the buffered bytes and ``view``, which do not fit the
        buffer together. As the built-in's buffered write, a ``view`` that
        fits the buffer alone is buffered once the buffered bytes are
        written, and a longer one is written through: the buffered bytes'
        write is placed in the file's write queue in the core before the
        call first yields, ``view`` buffered behind it (or written with it,
        as one write) by then, so that both reach the file even if its
        event loop is closed then. If the write fails, ``view`` is not kept
        in the buffer (the built-in's write, whose flush failed, accepted
        none of it), unless the call was cancelled: then it was made, and is
        kept for the next flush or close with what did not land before it."""
        buffered: List[bool] = []

        def buffer_it() -> None:
            self._buffer(view)
            buffered.append(True)

        if len(view) <= self._wbufsize:
            flush = self._flush_writes(then=buffer_it)
        else:
            buffer_it()
            flush = self._flush_writes()
        try:
            await flush
        except GeneratorExit:
            raise  # (as in `_flush_writes`)
        except BaseException as e:
            tail = len(self._wbuf) - len(view)
            if buffered and not is_cancellation(e) and tail >= 0 and self._wbuf[tail:] == view:
                del self._wbuf[tail:]
                if not self._append:
                    self._pos = self._wpos + len(self._wbuf)
            raise
        return len(view)

    async def _write_through(self, view: memoryview, short_ok: bool = False,
                             landed: Optional[List[int]] = None,
                             placed: Optional[Callable[[], None]] = None) -> int:
        """Writes ``view`` at the position; the byte count. A write that
        fails part-way (``EFBIG``, ``ENOSPC``) still moves the position
        past the bytes that landed; it then returns their count if
        ``short_ok`` (an unbuffered file: the built-in ``FileIO.write``'s
        short count, the error coming with the next write), else raises.
        ``landed[0]``, if given, counts the bytes written (or handed to a
        stream's thread) as they go, also when this raises. ``placed``, if
        given, runs (and must not raise) once the write is in the file's
        write queue in the core, before the call first yields (under
        trio, whose writes do not go through that queue and which joins no
        call to them, once the write has ended)."""
        if self._stream:
            # Started now, after the stream's last write; a cancelled task
            # leaves it running (see `_StreamCall`).
            last = self._stream_write
            if last is not None and last.done():
                last = None
            # (on the number itself where the file owns it: its close,
            # while this may still run, leaves the number to it, see
            # `_close_descriptor`)
            owned = self._file.closefd
            write = self._stream_write = _StreamCall(_write_all if owned else _write_and_close, self._live_fd(),
                                                     bytes(view), last, owned)
            if landed is not None:
                landed[0] = len(view)  # (the thread has them now)
            if placed is not None:
                placed()
            n: int = await write.result()
            self._pos += n
            return n
        # Once begun, a write runs to its end even if the calling task is
        # cancelled (which then takes effect): bytes the kernel may have
        # written are never left behind the position, where the next
        # write would overwrite them, nor is a record cut between chunks.
        # It runs in the calling task itself, its bytes handed to the
        # engine before the task first yields (see `_write_at`): no task
        # of blockio's own stands between, which a program cancelling
        # every task (``asyncio.all_tasks()``) could cancel before it ran.
        # Under trio, in a shielded cancel scope.
        done: int = await shielded(self._write_at(view, short_ok, landed, placed))
        return done

    async def _write_at(self, view: memoryview, short_ok: bool, landed: Optional[List[int]],
                        placed: Optional[Callable[[], None]] = None) -> int:
        """Writes ``view`` at the position (see `_write_through`). Nothing
        awaits before the first chunk is submitted (the position is known:
        only append mode looks the end up, and it writes at the end with
        no offset), and each chunk's await (``Engine._awrite_kept``) takes
        every cancellation in until its bytes have landed (a buffered
        file's may be made on the loop's thread: see
        ``Engine._awrite_kept``)."""
        size = len(view)
        if self._append:
            pos = end = 0
            self._at_end = True  # (to look up once the bytes have landed)
            self._pending = None
        else:
            # (a write made meanwhile joins it: see `one_at_a_time_kept`)
            pos = self._pos
            self._pos = end = pos + size
        # Whether its offset follows from the entries placed before it: if
        # one fails, the core refuses it (planned past bytes that never
        # landed), not after a seek from the start (the built-in's is made).
        follows, self._anchored = not self._anchored, False
        self._anchors += not follows
        anchors, shifted = self._anchors, self._shifted
        done = 0
        failed = False
        cancelled: Optional[BaseException] = None
        after = None
        if placed is not None and not on_asyncio():
            placed, after = None, placed
        try:
            while done < size:
                try:
                    n = await self._engine._awrite_kept(self._file, view[done:], pos + done, cancelled, placed,
                                                        follows)
                    placed, follows = None, True
                except _KeptCancel as kept:
                    # Completed after the task was cancelled (by the
                    # program, or by the end of asyncio.run, which cancels
                    # every task): the rest is written too,
                    # the position moved past it, then the cancellation
                    # raised. A rest still queued in the engine a second
                    # later is withdrawn, and the cancellation raised at
                    # once, the position past what landed.
                    n, cancelled = kept.count, kept.cancelled
                except _Stopped as stop:
                    # A part landed and the core failed the rest: the
                    # position past the part, then the failure (below).
                    cancelled = cancelled or stop.cancelled
                    done += stop.count
                    if landed is not None:
                        landed[0] = done
                    raise OSError(stop.errno, os.strerror(stop.errno), self.name) from None
                if n == 0:
                    raise OSError(28, "No space left on device", self.name)
                done += n
                if landed is not None:
                    landed[0] = done
        except OSError:
            # (the core made none of the writes queued behind this one:
            # see `WriteQueue`; the position goes back to what landed)
            failed = True
            if done == 0 or not short_ok:
                raise
        except GeneratorExit:
            # The coroutine is closed (collected: its event loop was closed
            # while it waited): the core writes the bytes all the same, and
            # the position stays past them.
            done = size
            raise
        finally:
            if (failed or done < size) and not self._append:
                # (in append mode the position is at the end since the
                # write began, unless a call placed behind it moved it)
                # (a seek's answer since moved the position back, and the
                # core this write with it: see `_rebased`)
                back = self._shifted - shifted
                self._end_write(pos - back, end - back, pos - back + done, failed, anchors)
        if after is not None:
            after()
        if cancelled is not None:
            raise cancelled
        return done

    def _end_write(self, pos: int, end: int, stopped: int, failed: bool, anchors: int) -> None:
        """Leaves the position after a write (not in append mode) from
        ``pos`` planned to ``end`` whose bytes stopped short, at
        ``stopped``, or that ``failed`` (see `_write_at`; one that wrote
        all its bytes leaves it as it is)."""
        if failed and anchors == self._anchors:
            # (no earlier than a write behind this one, refused, left
            # it: never past bytes that did not land; unless the
            # position was set again since, by a write placed after a
            # seek from the start, which is made, or by a seek whose
            # flush failed, which moved it back after the kept bytes)
            self._pos = min(self._pos, stopped)
        elif self._pos == end and anchors == self._anchors:
            self._pos = stopped
        # (else writes made meanwhile were placed after all of this
        # one's bytes, and the position stays past theirs)

    async def _flush_writes(self, then: Optional[Callable[[], None]] = None,
                            undo: Optional[Callable[[], bytearray]] = None) -> None:
        # Bytes write() accepted are never dropped: a flush whose task is
        # cancelled still writes them all (see _write_through; a stream's
        # thread writes them whatever becomes of the task). `then` runs
        # once their write is placed (see `_write_through`), or at once if
        # none is buffered. If the write fails with bytes kept, `undo`
        # takes back what `then` did and hands over the bytes buffered
        # since, which go after the kept ones.
        if not self._wbuf:
            if then is not None:
                then()
            return
        if self._engine.closed:
            # Kept, for close() to write with blocking system calls, as the
            # built-in buffered file keeps what a failed flush did not write.
            # In a forked child the engine is the parent's (forgotten, so
            # closed): the core's check raises the error that says so, as
            # the file's calls with nothing buffered do.
            self._engine._core.eventfd()
            raise RuntimeError("the engine is closed")
        data, self._wbuf = self._wbuf, bytearray()
        wpos = self._wpos
        if not self._append:
            self._pos = wpos
        landed = [0]
        try:
            await self._write_through(memoryview(data), landed=landed, placed=then)
        except GeneratorExit:
            raise  # (closed after its event loop was: the core writes them all the same)
        except BaseException:
            # Not written (a cancellation that came before the write could
            # start, as the end of asyncio.run cancels every task, even the
            # one a write shields itself in; or a failure): what did not
            # land goes back to the buffer, for the next flush or close.
            behind = undo() if undo is not None and landed[0] < len(data) else None
            self._keep_unwritten(data, landed[0], wpos)
            if behind:
                self._wbuf += behind
                self._pos = self._wpos + len(self._wbuf)
            raise

    def _keep_unwritten(self, data: bytearray, landed: int, wpos: int) -> None:
        """Puts ``data[landed:]``, the part of a flush of ``data`` (buffered
        from ``wpos``) that was not written, back in the buffer, in the
        order of the offsets the bytes were buffered for: in front of what
        it holds, or after it when what it holds was buffered for earlier
        offsets (kept from an earlier flush, queued ahead of this one, that
        failed too), so that no byte is written after bytes written after
        it."""
        if landed >= len(data):
            return
        start = wpos + landed
        if self._wbuf and not self._append and start > self._wpos:
            self._wbuf += data[landed:]
        else:
            self._wbuf[:0] = data[landed:]
            self._wpos = start
        if not self._append:
            self._pos = self._wpos + len(self._wbuf)

    @one_at_a_time_kept
    async def writelines(self, lines: Iterable[Buffer]) -> None:
        """Writes each item of ``lines`` (no newlines are added), as one
        write: a cancelled call writes all of them or, if it fails, none
        cut short in the middle of the list by the cancellation. An item
        that is not bytes-like raises ``TypeError`` after the items before
        it are written, as the built-in file's ``writelines`` does (a
        strided one ``BufferError``)."""
        self._check_open()
        # The built-in asks for the iterator first (a reader's
        # writelines(None) raises TypeError, not UnsupportedOperation).
        lines = iter(lines)
        if self._bufsize > 0:
            # The buffered file's mode is checked before the items (FileIO
            # writes each item, so there an item's error comes first).
            self._check_writable()
        items = list(lines)
        try:
            joined = b"".join(items)  # (in C: no Python step per item)
        except (TypeError, BufferError, ValueError):
            pass  # (an item that is not bytes-like: written item by item below, to raise where it is)
        else:
            if joined:
                await self.write(joined)
            return
        views = []
        bad: Optional[Exception] = None
        for line in items:
            try:
                view = memoryview(line)
            except TypeError:
                bad = _not_bytes_like(line)
                break
            if not view.c_contiguous:
                bad = _not_contiguous(line)
                break
            views.append(view.cast("B"))
        if views:
            await self.write(b"".join(views))
        if bad is not None:
            raise bad

    @one_at_a_time_placing(lambda f: True)
    async def flush(self) -> None:
        """Writes what is buffered to the file (the kernel's page cache;
        :meth:`fsync` makes it durable). The write is in the file's write
        queue in the core before the call first yields, and writes made
        while it runs join it there (see `one_at_a_time_placing`)."""
        self._check_open()
        await self._flush_writes()
        last = self._stream_write
        if last is not None and not last.done():
            # A write to a stream whose call was cancelled, still running
            # (see `_StreamCall`): flushed once it has ended.
            await last.result()

    @one_at_a_time_placing(lambda f, size=None: True)
    async def truncate(self, size: Optional[int] = None) -> int:
        """Cuts (or extends) the file to ``size`` bytes, the position by
        default; the new size. The position does not move. Behind writes
        in progress, the ``ftruncate`` is an entry of the file's write
        queue in the core, placed before the call first yields behind the
        writes made before it (and the buffered bytes' write), and writes
        made while it runs are placed behind it (see
        `one_at_a_time_placing`); in append mode, ``truncate()`` at the
        end is the end at the time, taken there by a mark."""
        # The mode before the argument, and an int only, as the built-in's.
        self._check_writable("truncate")
        if size is not None:
            size = _count_arg(size)
        if self._calls.writing:
            return await self._truncate_placing(size)
        await self._flush_writes()
        pos = await self._position()  # the end, in append mode, is fixed now
        if size is None:
            size = pos
        elif size < 0:
            raise OSError(22, "Invalid argument", self.name)
        self._drop_read_ahead()
        await self._engine._aftruncate_kept(self._file, size)
        return size

    async def _truncate_placing(self, size: Optional[int]) -> int:
        """`truncate` through the file's write queue: the buffered bytes'
        write placed, then the ``ftruncate`` behind it, before the call
        first yields; both awaited to their end. A failure of the flush is
        raised (the truncation, refused behind it, is not made); else one
        of the truncation. The writes placed behind a failed truncation are
        made, as the built-in's after its failed ``truncate``, unless a
        seek from the end planned on its size (the core then refuses
        them: see `WriteQueue.size_after`). A ``truncate()`` at the
        position behind a write that stopped short cuts where the built-in's
        position is, where its bytes stopped (see `WriteQueue.truncate`).
        In append mode at the end, ``truncate()`` is the end at the time
        (nothing to cut); behind a seek from the end whose answer has not
        come (`_pending`), it cuts at that seek's position, relative to
        its mark (`WriteQueue.truncate`'s ``of``); ``truncate(n)`` leaves the position at the
        end before the cut, as the built-in's: a mark placed ahead of the
        cut takes it (`_pending`)."""
        writes = self._file.writes
        assert writes is not None  # (a seekable file's: see `_find_position`)
        core, num = self._engine._core, self._file.num
        if size is None and self._at_end:
            return await self._placed_result(await self._place_behind_flush(
                lambda w: writes.mark(core, w, num, 0, True, True)))
        if size is None and self._pending is not None:
            # At the position a seek from the end sets, whose answer has
            # not come: a cut relative to that seek's mark of the end.
            of, offset = self._pending
            return await self._placed_result(await self._place_behind_flush(
                lambda w: writes.truncate(core, w, num, offset, False, of)))
        n = self._pos if size is None else size
        follows = size is None and not self._anchored
        mark: List[Tuple[Any, int]] = []

        def make(waiter: Any) -> int:
            if n < 0:
                raise OSError(22, "Invalid argument", self.name)
            self._drop_read_ahead()
            if self._at_end:
                mark.append(self._engine._begin(self._file, lambda w: writes.mark(core, w, num, 0, True, True)))
                self._pending, self._at_end = (mark[0][1], 0), False
            token: int = writes.truncate(core, waiter, num, n, follows)
            return token

        try:
            n = await self._placed_result(await self._place_behind_flush(make))
        except GeneratorExit:
            raise  # (its loop closed: the next call takes the position from the core, `_writes_settled`)
        except BaseException:
            await self._take_end(mark)
            raise
        await self._take_end(mark)
        return n

    async def _take_end(self, mark: List[Tuple[Any, int]]) -> None:
        """Sets the position to the end the mark ``mark[0]`` (if any)
        answers, unless a call since moved it (see `_pending`)."""
        def moved(end: int) -> int:
            if self._pending == (mark[0][1], 0):
                self._pending, self._pos = None, end
            return end

        if mark and self._pending == (mark[0][1], 0):
            await self._placed_result(mark[0], moved)

    @one_at_a_time
    async def fsync(self) -> None:
        """Flushes, then makes the file's data and metadata durable."""
        await self.flush()
        await self._engine.afsync(self._file)

    @one_at_a_time
    async def fallocate(self, *, offset: int, length: int, mode: int = 0) -> None:
        """Flushes, then allocates, deallocates or zeroes ``length`` bytes
        of the file's storage from ``offset``, as :meth:`Engine.fallocate`
        (``mode``: its ``FALLOC_FL_*`` flags). The position does not move;
        what was read ahead is read again."""
        self._check_writable("fallocate")
        await self._flush_writes()
        self._drop_read_ahead()
        await self._engine.afallocate(self._file, offset=offset, length=length, mode=mode)

    # -- closing ----------------------------------------------------------------

    async def close(self) -> None:
        """Flushes and closes the file (the descriptor, if the file owns
        it). Idempotent; a flush error is raised after the close. A call
        in progress whose event loop was closed before it ended is not
        waited for (it never ends; every other call raises
        ``RuntimeError`` meanwhile): the file is closed, then
        ``RuntimeError`` says what that call's bytes may have missed."""
        abandoned = self._calls.drop_abandoned()
        # (a read of a stream waiting for bytes holds the file's queue: its
        # wait ends first, so that the close need not wait for a writer)
        ended = self._end_stream_waits()
        try:
            await self._close()
        finally:
            self._resume_stream_waits(ended)
        # (or calls of a closed loop waiting behind its writes, which the
        # close, or a call before it, took over: see `CallQueue`)
        if self._calls.drop_abandoned() or abandoned:
            raise RuntimeError(ABANDONED_AT_CLOSE)

    @one_at_a_time_closing
    async def _close(self) -> None:
        if self._file.detached:
            raise ValueError("raw stream has been detached")
        if self._file.closed:
            return
        if not self._engine._usable_here:
            # The engine was closed under the file, or is the parent's (a
            # forked child closing what it inherited): what is buffered is
            # written here, synchronously, as when the file is collected,
            # rather than lost, and the child's descriptor closed, as the
            # built-in file's close does there.
            try:
                self._write_blocking()
            finally:
                self._sync_offset()
                self._file.closed = True
                self._end_waits()
                if self._file.closefd:
                    self._close_descriptor()
            return
        try:
            await self._flush_writes()
        finally:
            # The last time: a closed file leaves the descriptor alone. (A
            # file that only reads has nothing to flush: its last call left
            # the offset at its position, and its close leaves it where it
            # is, as the built-in reader's does.)
            if self._writable:
                self._sync_offset()
            self._file.closed = True
            self._end_waits()
            if self._file.closefd and not self._close_after_stream_write():
                # (a file that reads only, on blockio's loop: on its thread,
                # see `Engine._close_here`)
                if self._writable or self._stream or not self._engine._close_here(self._file.num):
                    await self._engine._aclose(self._file.num)

    def detach(self) -> io.FileIO:
        """Hands the descriptor back as a synchronous raw file (``FileIO``,
        as the built-in buffered file's ``detach`` returns), its offset
        where this file's position is (the built-in's is where its read
        ahead stopped: no byte read ahead is lost here); this object is
        then unusable. Raises ``ValueError`` if writes are still buffered (they
        cannot be written without awaiting): ``await flush()`` first; and
        while another call on the file is in progress or waiting (the
        built-in file's ``detach`` waits for it, which a plain method cannot
        do without blocking the event loop): await it first. A call in
        progress would otherwise go on reading or writing the descriptor
        after it was handed back, and so whatever file takes its number
        once the caller closes it."""
        return self._detach(None)

    def _detach(self, prepare: Optional[Callable[[], None]]) -> io.FileIO:
        """:meth:`detach`, running ``prepare`` first (the text file's
        position going back to the bytes of the characters it holds),
        once no other call can be in progress."""
        self._check_open()
        free = self._calls.free
        try:
            free.pop()  # (the queue: no call starts until it is back)
        except IndexError:
            if self._calls.abandoned():
                raise RuntimeError(ABANDONED) from None
            raise ValueError("detach() while another call on the file is in progress or waiting: "
                             "await it first") from None
        try:
            if prepare is not None:
                prepare()
            if self._wbuf:
                raise ValueError("detach with buffered writes: await flush() first")
            if self._stream:
                self._check_stream_detachable()
            if self._file.closefd and not self._engine._core.disown(self._file.num):
                raise ValueError("detach() while an operation of this file whose task was cancelled is still "
                                 "in flight: await another call on the file first")
            # (FileIO in an append mode seeks to the end: the position is
            # set after it.)
            raw = io.FileIO(self._file.num, self.mode.replace("x", "w"), closefd=self._file.closefd)
            if not self._at_end and not self._stream:  # (a pipe has no position)
                os.lseek(self._file.num, self._pos, os.SEEK_SET)
            self._file.detached = True
            self._end_waits()
            self._update_inline()
        finally:
            free.append(None)
        return raw

    def _buffered(self, raw: io.FileIO) -> io.BufferedIOBase:
        """``raw`` in the built-in's buffered file for this file's mode."""
        if self._readable and self._writable:
            return io.BufferedRandom(raw)
        if self._readable:
            return io.BufferedReader(raw)
        return io.BufferedWriter(raw)

    def _check_stream_detachable(self) -> None:
        """Raises ``ValueError`` where handing a stream back would lose
        bytes or let a call of this file go on using it: a cancelled read
        or write still running on its thread (see :class:`_StreamCall`),
        or bytes already taken from the stream and held here."""
        last = self._stream_write
        if last is not None and not last.done():
            raise ValueError("detach() while a write to this stream, whose call was cancelled, is still "
                             "running: await flush(), which waits for it, first")
        held = self._held() + sum(map(len, self._messages)) + self._engine._kept_for(self._file.num)
        if held:
            raise ValueError(f"detach() would lose {held} byte{'' if held == 1 else 's'} already read from this "
                             "stream and held by the file: read them first (read1() returns them)")

    async def __aenter__(self) -> "AsyncFile":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _write_blocking(self) -> None:
        """Writes what is buffered with blocking system calls (no engine
        to go through: the file is being collected, or its engine is
        closed), at its place: the end in append mode."""
        data, self._wbuf = bytes(self._wbuf), bytearray()
        fd = self._file.num
        if not data:
            return
        if self._stream:
            done = 0
            while done < len(data):
                done += os.write(fd, data[done:])
            return
        at = os.fstat(fd).st_size if self._append else self._wpos
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:], at + done)

    def __del__(self) -> None:
        desc = getattr(self, "_file", None)
        if desc is None or desc.closed or desc.detached:
            return
        warnings.warn(f"unclosed blockio file {self.name!r}", ResourceWarning, stacklevel=2)
        # Not awaitable here: what is buffered is written synchronously,
        # as the built-in buffered files do when collected.
        try:
            self._write_blocking()
        finally:
            desc.closed = True
            self._end_waits()
            if desc.closefd:
                self._close_descriptor()

    def _close_descriptor(self) -> None:
        """Closes the descriptor the file owns without awaiting (the file
        is collected, its engine unusable, or its open failed): through
        the engine, which closes it once the operations still using the
        number (given up by their tasks) have completed, or at once when
        the engine can no longer run any; or, while a write to a stream
        whose task was cancelled still runs on the number, once it has
        ended (see `_close_after_stream_write`)."""
        if not self._close_after_stream_write():
            _close_owned(self._engine, self._file.num)

    def _close_after_stream_write(self) -> bool:
        """Whether the write to a stream still running on the descriptor
        (its task cancelled: see :class:`_StreamCall`) took the closing of
        the number the file owns, to make once it has ended: the number is
        not released while its thread may write to it, and the close does
        not wait for a write that may never end (a pipe nobody reads)."""
        last: Optional[_StreamCall] = getattr(self, "_stream_write", None)
        if last is None or last.done():
            return False
        engine, num = self._engine, self._file.num
        return last.close_when_done(lambda: _close_owned(engine, num))
