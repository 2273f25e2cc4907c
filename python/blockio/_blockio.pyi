"""Type stubs of the Rust core (``blockio._blockio``); use :mod:`blockio`."""

import sys
from asyncio import Future
from types import CodeType, FrameType
from typing import (Callable, Coroutine, Dict, Generator, List, Literal, Optional, Sequence, Set, Tuple, Type, TypeVar,
                    Union, final)

from typing_extensions import disjoint_base

from ._aio import Stops, TrioFuture
from ._calls import CallQueue
from ._engine import Engine, _Descriptor
from ._file import _LineNote, _StreamCall

_T = TypeVar("_T")

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

__all__ = ["Core", "CoroutineMethod", "DEFAULT_QUEUE_DEPTH", "FileState", "FileCall", "coroutine_method", "LoopRing", "StreamRx", "StreamTx", "arm_receive", "arm_ring_receive", "dispatch_batch", "run_turn", "select_batch", "FALLOC_FL_KEEP_SIZE", "FALLOC_FL_PUNCH_HOLE", "FALLOC_FL_ZERO_RANGE",
           "INLINE_MAX", "INLINE_OFFSET", "INLINE_PIECE", "INLINE_WRITE_AFTER_WAIT", "TURN_BUDGET", "TURN_UNIT", "bench_engine", "count_copied", "exiting",
           "read_line_inline", "read_stream_inline", "stream_in_pieces", "stream_or_ring", "ring_writes", "range_cached", "read_inline", "readline_inline", "seek_inline", "pieces_in_flight_peak", "set_turn_count", "set_turn_time", "TURN_TIME_NS", "tell_inline", "turn_count",
           "turn_due", "write_inline", "WriteQueue"]

#: ``queue_depth`` when none is given: the Rust engines' default
#: (``blockio::DEFAULT_QUEUE_DEPTH``), 256.
DEFAULT_QUEUE_DEPTH: int
#: The calls served without suspending (this thread's, any engine's)
#: between two readings of the clock (see ``TURN_TIME_NS``), in units: a call counts one, and
#: one more per ``TURN_UNIT`` bytes it copied.
TURN_BUDGET: int
#: The bytes a served call copies per extra unit of ``TURN_BUDGET``.
TURN_UNIT: int
#: The time after a thread's turn of the event loop, in nanoseconds, from
#: which the next check of the count (at ``TURN_BUDGET``) takes a turn;
#: before it, the count starts again.
TURN_TIME_NS: int
#: The most bytes a read served inline copies at once (``TURN_BUDGET`` ×
#: ``TURN_UNIT``): a longer one is served in pieces of this size, with a
#: turn of the event loop between two when one is due.
INLINE_PIECE: int
#: The writes of a file sent to the engine after one of its writes made
#: on the loop's thread took longer than 2 ms (``WriteQueue.write_now``).
INLINE_WRITE_AFTER_WAIT: int
#: The longest ``read(n)`` served inline (in pieces); longer ones go to
#: the engine.
INLINE_MAX: int
#: The largest offset ``seek_inline`` takes (1 TiB): past it the file
#: system's ``lseek`` checks the offset.
INLINE_OFFSET: int

def turn_due(nbytes: int = 0) -> bool:
    """Counts a call served without suspending that copies ``nbytes``:
    whether it is to take its turn of the event loop first (then it is not
    counted, and the count starts again)."""

def count_copied(nbytes: int) -> None:
    """Counts ``nbytes`` more copied by a call already counted."""

def turn_count() -> int:
    """This thread's count since its last turn, in units."""

def pieces_in_flight_peak() -> int:
    """The most pieces of reads into new ``bytes`` objects in flight at
    once since the last call, which starts the count again (tests)."""

def set_turn_count(n: int) -> None:
    """Sets this thread's count and forgets when its last turn was (tests:
    ``TURN_BUDGET - 1`` puts the next call at its turn)."""

def set_turn_time(ns: int) -> int:
    """Sets, for every thread, the time after a turn from which a check of
    the count turns again (tests: 0 makes a turn depend on the count
    alone); the previous value."""

@disjoint_base
class FileState:
    """The base of a ``blockio.open`` binary file: all of its state, from
    which its ``seek``, ``read``, ``readline``, ``tell`` and ``write`` are
    served inline (see ``seek_inline``, ``read_inline``,
    ``readline_inline``, ``tell_inline``, ``write_inline``)."""

    #: The logical position: where the next read or write happens.
    _pos: int
    #: Read ahead: ``_rbuf[_roff:]`` are the bytes at ``_pos`` on.
    _rbuf: bytes
    _roff: int
    #: The next read is the first since a seek.
    _seeked: bool
    #: The descriptor's number is known outside the file.
    _shared: bool
    #: Written, not flushed, and where those bytes go.
    _wbuf: bytearray
    _wpos: int
    #: In append mode after a write: the position is the end, to look up.
    _at_end: bool
    _anchored: bool
    _pending: Optional[Tuple[int, int]]
    _anchors: int
    _seeks: int
    _shifted: int
    #: Opened for reading, writing, in append mode.
    _readable: bool
    _writable: bool
    _append: bool
    #: Not seekable (a pipe, socket or terminal).
    _stream: bool
    #: A datagram socket's messages put back by a cancelled unbuffered read.
    _messages: Tuple[bytes, ...]
    #: A stream's calls left running, and the wait's wake-up pipe.
    _stream_write: Optional[_StreamCall]
    _stream_poll: Optional[_StreamCall]
    _poll_wake: Optional[Tuple[int, int]]
    #: What ends the readiness waits of a stream's reads (None: not a
    #: stream); ended while a close is under way.
    _stream_waits: Optional[Stops]
    #: A byte stream, which one read may take in several reads.
    _stream_pieces: bool
    #: A FIFO's descriptor opened again in non-blocking mode (-1: refused;
    #: None: not opened).
    _stream_nowait: Optional[int]
    #: A stream's line reads: whether reads never wait, what the last left.
    _line_by_byte: bool
    _line_note: Union[OSError, _LineNote, None]
    #: The descriptor, the engine and the call queue.
    _file: _Descriptor
    _engine: Engine
    _calls: CallQueue
    mode: str
    name: Union[str, bytes, int]
    @property
    def _bufsize(self) -> int:
        """The buffer size (0 unbuffered): the read-ahead size."""
    @property
    def _wbufsize(self) -> int:
        """What the write buffer holds before it is flushed (0 unbuffered)."""
    @property
    def _inline(self) -> bool:
        """``seek`` and ``tell`` may be served inline."""
    @property
    def _inline_read(self) -> bool:
        """``read``, ``readinto`` and ``readline`` may be served inline."""
    @property
    def _inline_write(self) -> bool:
        """``write`` may be served inline (into the write buffer; the
        first bytes after a flush only while ``_inline``)."""
    def __new__(cls, *_args: object, **_kwargs: object) -> "FileState": ...
    def read(self, size: Optional[int] = -1) -> "FileCall[bytes]":
        """Up to ``size`` bytes (all the rest when negative or None),
        served inline at the first step when it can be."""
    def seek(self, offset: int, whence: int = 0) -> "FileCall[int]":
        """Moves the position; the new position (an absolute seek with
        nothing to flush served inline at the first step)."""
    def tell(self) -> "FileCall[int]":
        """The current position (served inline at the first step when it
        is known and nothing is to be flushed)."""
    def readline(self, size: Optional[int] = -1) -> "FileCall[bytes]":
        """One line, with its newline (at most ``size`` bytes), served
        inline at the first step when it is all in the read buffer."""
    def write(self, data: Buffer) -> "FileCall[int]":
        """Writes all of ``data``; the byte count (served inline at the
        first step when it goes into the write buffer)."""
    def readinto(self, buf: Buffer) -> "FileCall[int]":
        """Reads into ``buf`` until it is full or the file ends; the byte
        count (served inline at the first step, straight into ``buf``, when
        the bytes are in the read buffer or all in the page cache)."""
    def _serve(self, free: List[None], reader: "Core", num: int, bufsize: int, wbufsize: int) -> None:
        """What the calls served inline need: the call queue's ``free``
        list, the engine's core, the descriptor's number, the buffer size."""
    def _read_after_turn(self, size: int) -> Union[bytes, None, Literal[True]]:
        """``read(size)`` by the call that has just taken its turn of the
        event loop, holding the call queue: the bytes, from the buffer or
        the page cache (counting only what it copies), or None; True if the
        read goes on in pieces (see ``_next_piece``)."""
    def _readinto_cached(self, buf: Buffer) -> Optional[int]:
        """``readinto(buf)`` by its queued call, holding the call queue,
        nothing held: the page cache's bytes read straight into ``buf``
        (counting what it copies), their count; or None."""
    def _next_piece(self) -> Union[bytes, None, Literal[True]]:
        """The next piece of the read served in pieces under way, after a
        turn of the event loop: its bytes once the last is read, True while
        more remain, None if a piece was not all cached (the read dropped)."""
    def _drop_pieces(self) -> None:
        """Drops the read served in pieces under way, if any."""
    def _held(self) -> int:
        """How many bytes read ahead are held."""
    def _held_bytes(self) -> bytes:
        """The bytes read ahead that are held (``_rbuf[_roff:]``)."""
    def _drop_read_ahead(self) -> None:
        """Forgets the bytes read ahead."""
    def _take(self, n: int) -> bytes:
        """Up to ``n`` of the bytes held, moving the position past them."""
    def _unread(self, taken: bytes) -> None:
        """Puts back ``taken``, the bytes just before the position that an
        unfinished read had taken: the next read starts with them."""
    def _buffer(self, view: Buffer) -> None:
        """Appends ``view`` to the write buffer, moving the position."""
    def _set_inline(self, usable: bool) -> None:
        """Records which calls may be served inline, given whether the file
        is usable (seekable, open, not detached)."""

_Method = TypeVar("_Method", bound=Callable[..., object])

def coroutine_method(template: _Method) -> _Method:
    """The method ``template`` (an ``async def`` named ``read``, ``seek``
    or ``tell``) stands for: a coroutine function to ``inspect`` and
    ``asyncio``, whose calls go straight to the core's method."""

@final
class CoroutineMethod:
    """What :func:`coroutine_method` makes: ``FileState``'s ``read``,
    ``seek`` or ``tell`` with its template's signature, code and names."""

    def __get__(self, instance: object, owner: object = None, /) -> object: ...
    @property
    def __code__(self) -> CodeType: ...
    @property
    def __defaults__(self) -> Optional[Tuple[object, ...]]: ...
    @property
    def __kwdefaults__(self) -> Optional[Dict[str, object]]: ...
    @property
    def __annotations__(self) -> Dict[str, object]: ...  # type: ignore[override]
    @property
    def __name__(self) -> str: ...
    @property
    def __qualname__(self) -> str: ...
    @property
    def __doc__(self) -> Optional[str]: ...  # type: ignore[override]
    @property
    def __module__(self) -> str: ...  # type: ignore[override]

@final
class FileCall(Coroutine[object, object, _T]):
    """A file's ``read``, ``seek`` or ``tell``: a coroutine whose first
    step serves the call inline when it can, else runs its queued call."""

    @property
    def __name__(self) -> str:
        """The method's name (``read``, ``seek``, ``tell``)."""
    @property
    def __qualname__(self) -> str:
        """``AsyncFile.`` and the method's name."""
    @property
    def cr_running(self) -> bool:
        """Whether a step of the call is running."""
    @property
    def cr_suspended(self) -> bool:
        """Whether the call waits in its queued coroutine."""
    @property
    def cr_await(self) -> object:
        """The queued coroutine while the call waits in it, else None."""
    @property
    def cr_frame(self) -> Optional[FrameType]:
        """The frame: of the method's template before the call starts,
        of its queued coroutine while it waits; None once done."""
    @property
    def cr_code(self) -> Optional[CodeType]:
        """The method's template's code."""
    @property
    def cr_origin(self) -> None:
        """Not recorded: None."""
    def __await__(self) -> Generator[object, None, _T]: ...
    def __iter__(self) -> "FileCall[_T]": ...
    def __next__(self) -> object: ...
    def send(self, value: object) -> object: ...
    def throw(self, typ: Union[Type[BaseException], BaseException], val: object = None, tb: object = None) -> object: ...
    def close(self) -> None: ...

def seek_inline(file: FileState, offset: object, whence: object) -> Optional[int]:
    """``file.seek(offset, whence)`` served inline if it can be (a seek
    from the start or the position, by an int, to a position from 0 to
    2**40, no call in progress, nothing to flush): the new position; if
    not, None, and nothing changed."""

def read_inline(file: FileState, size: object) -> Union[bytes, None, bool]:
    """``file.read(size)`` served inline if it can be (no call in
    progress, the bytes all buffered or all in the page cache): the bytes;
    ``None`` if not (nothing changed); ``False`` if its turn of the event
    loop is due first; ``True`` if it goes on in pieces, its first read."""

def readline_inline(file: FileState, size: object) -> Optional[bytes]:
    """``file.readline(size)`` served inline if it can be (no call in
    progress, the line all in the buffer, no turn of the event loop due):
    the line; ``None`` if not (nothing changed)."""

def write_inline(file: FileState, data: object) -> Optional[int]:
    """``file.write(data)`` served inline if it can be (``data`` bytes or
    a bytearray joining bytes already in the file's write buffer without
    filling it, no call in progress, no turn of the event loop due): the
    byte count; ``None`` if not (nothing changed)."""

def tell_inline(file: FileState) -> Optional[int]:
    """``file.tell()`` served inline if it can be (no call in progress,
    the position known, no turn of the event loop due); ``None`` if not."""

#: ``fallocate(2)``'s mode flags, as Linux defines them.
FALLOC_FL_KEEP_SIZE: int
FALLOC_FL_PUNCH_HOLE: int
FALLOC_FL_ZERO_RANGE: int

#: One ``(descriptor, buffer, offset)`` operation of a buffer batch.
_BufferOp = Tuple[int, Buffer, int]

#: One file of a whole-file read: its bytes, or why it could not be read
#: (``MemoryError`` for a file larger than the memory available).
_FileResult = Union[bytes, OSError, MemoryError]

#: One result of an asynchronous batch: the bytes of a read, a byte count,
#: a descriptor or 0 (open, size, ftruncate, close, mkdir, symlink), the 18
#: ints of a ``statx`` (see ``Engine._astat``), every file's result of
#: ``submit_read_files``, or the operation's ``OSError``.
_Result = Union[bytes, int, List[int], List[_FileResult], OSError]

#: The future a batch's results resolve: asyncio's, or the stand-in under
#: trio.
_Future = Union["Future[List[_Result]]", TrioFuture]

#: What a batch's results are handed back with: the future they resolve
#: (``None``: nobody awaits them) and what is kept alive until they arrive
#: (file objects, buffers, a marker; see ``Engine.__init__``). The core
#: only holds the pair and hands it back.
_Waiter = Tuple[Optional[_Future], object]

@final
class WriteQueue:
    """A file object's writes, truncations and position marks, queued in the core, which
    begins each once the one ahead of it completes, whether or not Python
    runs again."""

    def __init__(self) -> None: ...
    def write_now(self, core: Core, fd: int, data: Buffer, offset: int) -> Optional[int]: ...
    def write_counts(self) -> Tuple[int, int, int]: ...
    def start(self, core: Core, waiter: _Waiter, fd: int, data: Buffer, offset: int, follows: bool = True) -> int: ...
    def truncate(self, core: Core, waiter: _Waiter, fd: int, length: int, follows: bool = False,
                 of: Optional[int] = None) -> int: ...
    def mark(self, core: Core, waiter: _Waiter, fd: int, at: int, follows: bool = True, end: bool = False,
             of: Optional[int] = None, rebase: bool = False, size: Optional[int] = None) -> int: ...
    def idle(self) -> bool: ...
    def rebased(self, by: int) -> None: ...
    def marked(self, token: int) -> Optional[int]: ...
    def size_after(self, fd: int) -> Optional[int]: ...
    def settled(self, core: Core, waiter: _Waiter) -> int: ...
    def withdraw(self, token: int) -> bool: ...
    def claim(self, token: int) -> Optional[int]: ...
    def take_error(self) -> Tuple[Optional[OSError], Optional[int], int]: ...

@final
class Core:
    def __new__(cls, queue_depth: int = DEFAULT_QUEUE_DEPTH, backend: Optional[str] = None) -> "Core": ...
    @property
    def backend(self) -> str: ...
    @property
    def fallback_reason(self) -> Optional[str]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def usable(self) -> bool: ...
    @property
    def reads_started(self) -> int: ...
    # The synchronous batches return (results, how many failed).
    def read_batch(self, fd: int, offsets: Sequence[int], length: int) -> Tuple[List[Union[bytes, OSError]], int]: ...
    def readinto_batch(self, ops: Sequence[_BufferOp]) -> Tuple[List[Union[int, OSError]], int]: ...
    def write_batch(self, ops: Sequence[_BufferOp]) -> Tuple[List[Union[int, OSError]], int]: ...
    def read_files(self, paths: Sequence[bytes]) -> Tuple[List[_FileResult], int]: ...
    def fsync(self, fd: int, data_only: bool = False) -> None: ...
    def fallocate(self, fd: int, mode: int, offset: int, length: int) -> None: ...
    def read_inline(self, fd: int, offset: int, length: int) -> Optional[bytes]: ...
    def read_inline_in_turn(self, fd: int, offset: int, length: int) -> Union[bytes, None, Literal[False]]: ...
    def prepare(self, fd: int, opener: bool = False) -> None: ...
    def eventfd(self) -> int: ...
    def submit_read(self, waiter: _Waiter, fd: int, offsets: Sequence[int], length: int) -> int: ...
    def submit_read_after(self, waiter: _Waiter, fd: int, head: bytes, offset: int, length: int) -> int: ...
    def submit_readinto(self, waiter: _Waiter, ops: Sequence[_BufferOp]) -> int: ...
    def submit_write(self, waiter: _Waiter, ops: Sequence[_BufferOp]) -> int: ...
    def submit_sync(self, waiter: _Waiter, fd: int, data_only: bool = False) -> int: ...
    def submit_fallocate(self, waiter: _Waiter, fd: int, mode: int, offset: int, length: int) -> int: ...
    def submit_open(self, waiter: _Waiter, path: bytes, flags: int, mode: int) -> int: ...
    def submit_stat(self, waiter: _Waiter, path: bytes, follow: bool) -> int: ...
    def submit_size(self, waiter: _Waiter, fd: int) -> int: ...
    def submit_ftruncate(self, waiter: _Waiter, fd: int, length: int) -> int: ...
    def submit_close(self, waiter: _Waiter, fd: int) -> int: ...
    def own(self, fd: int) -> None: ...
    def disown(self, fd: int) -> bool: ...
    def submit_mkdir(self, waiter: _Waiter, path: bytes, mode: int) -> int: ...
    def submit_symlink(self, waiter: _Waiter, target: bytes, link: bytes) -> int: ...
    def submit_read_files(self, waiter: _Waiter, paths: Sequence[bytes]) -> int: ...
    # (waiter, results) of each finished batch.
    def drain(self) -> List[Tuple[_Waiter, Union[List[_Result], BaseException]]]: ...
    def cancel(self, token: int) -> None: ...
    def withdraw(self, token: int) -> bool: ...
    def pending(self) -> int: ...
    # (finished (waiter, results), cancelled waiters, the exception that
    # interrupted the wait or None)
    def close(self) -> Tuple[List[Tuple[_Waiter, Union[List[_Result], BaseException]]], List[_Waiter], Optional[BaseException]]: ...

@final
class LoopRing:
    """The io_uring of one ``blockio.new_event_loop()`` loop: each submitting
    call returns a token; ``wait`` returns ``(token, result, value)`` for
    every finished operation (``result`` a negative errno on failure)."""

    def __new__(cls, entries: int = 256, file_slots: int = ...) -> "LoopRing": ...
    def recv(self, fd: int, nbytes: int, socket: bool, stream: bool) -> int: ...
    def recv_into(self, fd: int, buf: Buffer, nbytes: int, socket: bool) -> int: ...
    def recv_now(self, fd: int, nbytes: int) -> Union[bytes, None, bool]:
        """What stream socket ``fd`` holds now (at most ``nbytes``), None
        when nothing is queued, False when the loop's turn is due first."""
    def recv_into_now(self, fd: int, buf: Buffer, nbytes: int = ...) -> Union[int, None, bool]:
        """As :meth:`recv_now`, into ``buf``: the count received."""
    def send(self, fd: int, data: Buffer, socket: bool) -> Tuple[Optional[int], int]: ...
    def send_socket(self, fd: int, data: Buffer) -> Optional[int]: ...
    def accept(self, fd: int) -> int: ...
    def accept_now(self, fd: int, tcp: bool = ...) -> Optional[Tuple[int, object]]: ...
    def poll(self, fd: int, mask: int) -> int: ...
    def pread(self, fd: int, offset: int, length: int) -> int: ...
    def pread_into(self, fd: int, offset: int, buf: Buffer) -> int: ...
    def first_lent(self, token: int) -> Optional[int]:
        """The first buffer of receive ``token`` in flight, in bytes (a
        grown one is made as the receive is dispatched, not lent while it
        waits); None when it is not a receive in flight."""
    @property
    def file_reads(self) -> int: ...
    def pwrite(self, fd: int, offset: int, data: Buffer) -> int: ...
    @property
    def file_writes(self) -> int: ...
    @property
    def free_file_slots(self) -> int: ...
    @property
    def inherited(self) -> bool: ...
    def openat(self, path: bytes, flags: int, mode: int) -> int: ...
    def connect(self, fd: int, addr: bytes) -> int: ...
    def recvmsg(self, fd: int, nbytes: int, flags: int = ...) -> Union[int, Tuple[bytes, object]]:
        """One datagram (``recvmsg``): the value ``(bytes, address)`` of one
        already queued, else its token on the ring."""
    def recvmsg_into(
        self, fd: int, buf: Buffer, nbytes: int = ..., flags: int = ...
    ) -> Union[int, Tuple[int, object]]:
        """As ``recvmsg``, into ``buf``: the value is ``(count, address)``."""
    def sendmsg(self, fd: int, data: Buffer, addr: Optional[bytes] = ...) -> int:
        """One datagram (``sendmsg``) to a packed socket address, or the
        connected peer: its token."""
    @property
    def msg_receives(self) -> int: ...
    @property
    def msg_sends(self) -> int: ...
    @property
    def file_opens(self) -> int: ...
    def cancel(self, token: int) -> bool: ...
    def wait(self, timeout: Optional[float]) -> List[Tuple[int, int, object]]: ...
    def fill(self, timeout: Optional[float]) -> None:
        """As ``wait``, the finished operations kept for ``dispatch_batch``."""
    def receiving(self, fd: int) -> Optional[int]:
        """The token of the transport's receive on ``fd`` armed last, until
        its completion is dispatched."""
    def receives(self) -> List[StreamRx]:
        """The transports' receives in flight or not yet dispatched."""
    def in_flight(self) -> int: ...
    # The transports' receives left, each with the socket it held open.
    def close(self) -> List[Tuple[StreamRx, Optional[object]]]: ...

def dispatch_batch(proactor: object, ring: LoopRing) -> None:
    """Dispatches what ``ring.fill`` kept on a ``RingProactor``: a socket
    transport's receive with bytes calls its callback here, any other
    completion goes to ``proactor._finish``; each held socket is released."""
def select_batch(proactor: object, timeout: float | None) -> None:
    """``RingProactor.select``: the work before the wait, the wait on the
    proactor's ring (at most ``timeout`` seconds) and the dispatch of what
    it brought (``dispatch_batch``)."""
def run_turn(event_loop: object, proactor: object | None) -> None:
    """One turn of an asyncio event loop, as ``BaseEventLoop._run_once``,
    on the loop's own ``_ready`` and ``_scheduled``; the wait is
    ``select_batch`` on ``proactor``, or with ``None`` the loop's
    ``_selector.select`` and ``_process_events``."""
def arm_receive(rx: StreamRx, callback: object) -> None:
    """Arms the next receive of a ``StreamReceive`` on its proactor's ring
    (``RingProactor.receive`` in one call)."""
def arm_ring_receive(rx: StreamRx, callback: object) -> None:
    """Arms the next receive of a ``StreamReceive`` on the ring, kept in its
    slab with ``rx`` and ``callback`` (no kept bytes looked for)."""

@final
class StreamTx:
    """The write side of a socket transport on the loop's ring: its bound
    ``write`` is the transport's ``write`` (the common write in native
    code; every other goes to the transport's ``_write_slow``)."""

    def __new__(cls, ring: LoopRing, sock: object, transport: object) -> "StreamTx": ...
    @property
    def ready(self) -> bool: ...
    @ready.setter
    def ready(self, ready: bool) -> None: ...
    def write(self, data: Buffer) -> None: ...
    def sendfile(self, fd: int, offset: int, count: int) -> tuple[int, int, int] | None:
        """The common ``loop.sendfile``: when the transport is ready and
        ``fd`` a regular file whose range from ``offset`` (``count`` bytes,
        to its end when 0) the page cache holds, ``sendfile(2)`` of it as
        far as the socket takes it now. ``(sent, end, errno)``: finished
        when ``offset + sent >= end`` and ``errno`` is 0; else ``errno``
        is the failed call's (0: the socket took no more). ``sent`` is -1
        for a range not wholly cached (nothing sent). None, nothing sent,
        for any other case."""

@disjoint_base
class StreamRx:
    """The state of a socket transport's receive (the base of
    ``blockio._proactor.StreamReceive``), read by the dispatch per message."""

    def __new__(
        cls,
        proactor: object,
        conn: object,
        fd: int,
        nbytes: int,
        socket: bool,
        stream: bool,
        holdable: bool,
        context: object,
        datagram: bool = ...,
    ) -> "StreamRx": ...
    @property
    def _proactor(self) -> object: ...
    @property
    def conn(self) -> object: ...
    @property
    def fd(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def socket(self) -> bool: ...
    @property
    def stream(self) -> bool: ...
    @property
    def holdable(self) -> bool: ...
    @property
    def context(self) -> object: ...
    @property
    def first(self) -> int:
        """The first buffer the next receive lends the kernel on a stream
        socket, in bytes: 2 KiB, grown after a message that filled it,
        halved after small ones."""
    @property
    def datagram(self) -> bool:
        """A datagram endpoint's receive (``recvmsg``; ``data`` is
        ``(bytes, address)``)."""
    token: object
    cancelled: bool
    direct: Optional[object]
    peer: Optional[object]
def bench_engine(fd: int, file_size: int, block: int, in_flight: int, seconds: float) -> float: ...
def exiting() -> None: ...
def read_line_inline(fd: int, limit: int) -> Tuple[bytes, int, int]: ...
def read_stream_inline(fd: int, size: int, pieces: bool) -> Optional[Tuple[bytes, int]]: ...
def stream_in_pieces(fd: int) -> bool: ...
def stream_or_ring(fd: int) -> Union[Tuple[int, int, int, bool], bool]:
    """For a pipe, socket, FIFO or character device (however it was
    opened), its key ``(fd, device, inode, readable)``; else whether a
    read of it may go on blockio's event loop's ring (``_ring_serves``)."""
def ring_writes(fd: int) -> bool:
    """Whether a write of ``fd`` may go on blockio's event loop's ring: a
    regular file or block device open for writing, neither ``O_DIRECT``,
    non-blocking nor ``O_PATH`` (False for a bad descriptor)."""
def range_cached(fd: int, offset: int, length: int) -> bool:
    """Whether all ``length`` bytes of the file ``fd`` at ``offset`` are in
    the page cache (``cachestat``); False when a page is not, and when
    the kernel cannot tell (no ``cachestat``; a descriptor it refuses)."""
