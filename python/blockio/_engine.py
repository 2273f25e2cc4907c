"""The engine: batched reads, writes and fsyncs, blocking and asyncio.

Asynchronous operations are driven by the running event loop: the engine's
eventfd is watched with ``loop.add_reader`` under asyncio (and uvloop), by
a system task waiting in ``trio.lowlevel.wait_readable`` under trio (and
anyio on either), and every wake-up drains all finished batches. One
future per batch. One engine serves every loop that uses it, asyncio and
trio alike, in any thread.

Cancellation: a batch whose task is cancelled is given up at once. Its
operations that have not reached the kernel are never submitted; those
already in flight keep their buffer referenced (and exported) until the
kernel has finished with them, and the descriptor: a duplicate of a number
the caller owns, or, for a :func:`blockio.open` file's own descriptor, the
number itself, which the file's close closes only once they have
completed. So a file closed right after a cancelled write can never have
that write land in a file opened later under the same descriptor number.

Argument order: ``offset`` and ``length`` (``offsets`` and ``length`` in
batches) are keyword-only. ``os.pread(fd, n, offset)`` puts them in the
opposite order; with both ints, a call in the wrong order would silently
read the wrong bytes, so it fails with ``TypeError``.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import fcntl
import os
import stat
import sys
import threading
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Literal, Optional, Protocol, Sequence, Set,
                    Tuple, Union, overload)

from ._aio import CANCEL_GRACE, Stops, TrioFuture, running_trio, through_grace, wait_readable

if TYPE_CHECKING:
    # Any object with the buffer protocol (bytes, bytearray, memoryview,
    # mmap, numpy arrays): collections.abc.Buffer from Python 3.12 on.
    if sys.version_info >= (3, 12):
        from collections.abc import Buffer
    else:
        from typing_extensions import Buffer
from ._blockio import DEFAULT_QUEUE_DEPTH, WriteQueue
from ._blockio import Core as _Core
from ._blockio import count_copied
from ._blockio import ring_writes as _core_ring_writes
from ._blockio import stream_or_ring as _core_stream_or_ring
from ._blockio import exiting as _exiting

class HasFileno(Protocol):
    """An object with ``fileno()``: a built-in file, a socket, an mmap's
    source, a :func:`blockio.open` file."""

    def fileno(self) -> int: ...


#: A descriptor number, or an object with ``fileno()`` (a path is not one).
FileLike = Union[int, HasFileno]

#: One ``(file, buffer, offset)`` operation of a buffer batch.
BufferOp = Tuple[FileLike, "Buffer", int]

#: The largest file offset (``loff_t``) and the most one read returns
#: (``MAX_RW_COUNT``): a read on the event loop's ring stays within them.
_MAX_OFFSET = (1 << 63) - 1
_MAX_IO = 0x7FFFF000


class _Descriptor:
    """The descriptor under a :func:`blockio.open` file (its ``_file`` and
    ``raw``, as an aiofiles object has the synchronous file there).

    Giving the number out (``fileno()``, ``fd``) tells the file over it
    (``on_share``), which from then on keeps the descriptor's offset at
    its own position after every call (see ``AsyncFile._sync_offset``)."""

    def __init__(self, fd: int, name: Any, mode: str, closefd: bool) -> None:
        #: The number, for the package's own use (reading it shares nothing).
        self.num = fd
        self.name = name
        self.mode = mode
        self.closefd = closefd
        self.closed = False
        self.detached = False
        #: Run when the number is given out: the file over this
        #: descriptor (which sets it) brings the offset to its position
        #: the first time.
        self.on_share: Optional[Callable[[], None]] = None
        #: The writes of the file over this descriptor, queued in the core
        #: (a seekable file's, set by the file): see `Engine._awrite_kept`.
        self.writes: Optional[WriteQueue] = None
        #: Whether those writes may be made on the loop's thread (a
        #: buffered file's: see `Engine._write_now`).
        self.inline_writes = False

    def _share(self) -> None:
        if self.on_share is not None:
            self.on_share()

    @property
    def fd(self) -> int:
        """The descriptor's number."""
        self._share()
        return self.num

    def fileno(self) -> int:
        """The descriptor's number; ``ValueError`` once the file is closed."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        self._share()
        return self.num


def _path_list(paths: Iterable[StrPath]) -> List[StrPath]:
    """``read_files``' paths as a list; one path alone (whose characters
    would otherwise be taken for paths) is a ``TypeError`` naming the
    argument."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise TypeError(f"paths: expected an iterable of paths, not one path ({type(paths).__name__}); "
                        "pass [path] to read one file")
    return list(paths)


def _encoded_paths(paths: List[StrPath]) -> Tuple[List[bytes], List[int]]:
    """``read_files``' paths as the core takes them, and the indexes of
    those holding a NUL byte, which no file's name can: each of those is
    read as ``/`` (a directory, never opened for reading) and its result
    replaced by the built-in ``open``'s ``ValueError`` (see
    :func:`_with_nul_errors`), so that one bad path fails in its place
    and not the whole call."""
    names = [os.fsencode(p) for p in paths]
    nul = [i for i, name in enumerate(names) if b"\0" in name]
    for i in nul:
        names[i] = b"/"
    return names, nul


def _with_nul_errors(results: List[Any], nul: List[int]) -> List[Any]:
    """``results`` with the built-in ``open``'s ``ValueError`` in the place
    of each path that held a NUL byte (see :func:`_encoded_paths`)."""
    for i in nul:
        results[i] = ValueError("embedded null byte")
    return results


def _fd(file: FileLike) -> int:
    if isinstance(file, int):
        return file
    if type(file) is _Descriptor:
        if file.closed:
            raise ValueError("I/O operation on closed file")
        return file.num
    fileno = getattr(file, "fileno", None)
    if fileno is None:
        raise TypeError(f"expected an int file descriptor or a file object, got {type(file).__name__}")
    fd: int = fileno()
    return fd


#: ``O_LARGEFILE`` as ``F_GETFL`` reports it on 64-bit Linux: set on every
#: descriptor made by ``open``, never on a pipe or socket.
_KERNEL_O_LARGEFILE = 0o100000


def _is_stream(fd: int) -> bool:
    """Whether ``fd`` is a pipe, socket or character device (one system
    call for a descriptor made by ``open``, two otherwise)."""
    try:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & _KERNEL_O_LARGEFILE:
            return False
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, TypeError, OverflowError):
        return False  # (the read reports what is wrong with the descriptor)
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


def _ring_serves(fd: int) -> bool:
    """Whether a read of ``fd`` may go on blockio's event loop's ring,
    looked at when the call is made (``F_GETFL`` and ``fstat``): a regular
    file or block device opened for reading, neither ``O_DIRECT`` (whose
    reads need aligned memory, as the engine's are) nor non-blocking
    (``EAGAIN``). Anything else (a FIFO, pipe, socket or character device,
    whichever way it was opened; a bad descriptor) goes through the
    engine, which takes its own duplicate of the descriptor at once and
    reports what is wrong naming the file: a read the ring failed is never
    made again by the number, which its caller may have closed (and
    another file taken) meanwhile."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, TypeError, OverflowError):
        return False
    if flags & (os.O_DIRECT | os.O_NONBLOCK | os.O_PATH) or flags & os.O_ACCMODE == os.O_WRONLY:
        return False
    return stat.S_ISREG(mode) or stat.S_ISBLK(mode)


def _retrieved(fut: "asyncio.Future[Any]") -> None:
    """Marks the outcome of ``fut``, which nobody awaits any more, as
    taken (asyncio would log an exception never retrieved)."""
    if not fut.cancelled():
        fut.exception()


def _ring_writes(fd: int) -> bool:
    """Whether a write of ``fd`` may go on blockio's event loop's ring:
    a regular file or block device open for writing, neither ``O_DIRECT``
    (whose writes need aligned memory) nor non-blocking (``EAGAIN``) nor
    ``O_PATH``; asked of the core (one ``F_GETFL`` and one ``fstat``, no
    ``stat_result`` made per write)."""
    try:
        return _core_ring_writes(fd)
    except (ValueError, TypeError, OverflowError):
        return False


def _stream_or_ring(fd: int) -> Union[Tuple[int, int, int, bool], bool]:
    """``_stream_key(fd, True)`` for a stream, else ``_ring_serves(fd)``,
    in one ``F_GETFL`` and one ``fstat`` made by the core (an
    ``os.fstat`` here would cost a ``stat_result`` per read): what
    :meth:`Engine.aread` asks of a read that was not served on the calling
    thread. A FIFO or terminal opened by path has a regular file's flags;
    only ``fstat`` tells it apart, and its read must be a stream's (a
    cancelled one keeps what it took for the next read, see
    ``Engine._read_kept``), not a file's (whose bytes a cancelled read
    drops)."""
    try:
        return _core_stream_or_ring(fd)
    except (ValueError, TypeError, OverflowError):
        return False


async def _on_the_ring(submit: Callable[[], Any], file: FileLike, fd: int, offset: int, length: int) -> Any:
    """One read submitted to blockio's event loop's ring by ``submit`` and
    waited for: its result; None where submitting refused it (not
    submitted: the engine reads it then, before any wait, so never by a
    number that may name another file by then); a failure the kernel
    reports raises, worded as the engine's (:func:`_ring_failed`)."""
    try:
        fut = submit()
    except (OSError, MemoryError, RuntimeError, ValueError, TypeError, BufferError):
        return None
    if fut is None:
        return None
    try:
        return await fut
    except OSError as e:
        raise _ring_failed(e, fd, offset, length, _name(file)) from None


def _ring_failed(e: OSError, fd: int, offset: int, length: int, name: Union[str, bytes, None]) -> OSError:
    """The error of a read that failed on blockio's event loop's ring,
    worded as the engine words its own (the operation, its offset and
    length, the caller's descriptor, and the file's name if it has one)."""
    code = e.errno or 0
    text = f"read of {length} bytes at offset {offset} on fd {fd} failed: {os.strerror(code)}"
    return OSError(code, text, name) if name is not None else OSError(code, text)


def _stream_key(fd: int, opened: bool = False) -> Optional[Tuple[int, int, int, bool]]:
    """For a pipe, socket or character device: ``(fd, device, inode,
    readable)``, what names the stream under that number (a number closed
    and made again names another) and whether it was opened for reading;
    None for anything else (one system call for a descriptor made by
    ``open``, two otherwise). A descriptor made by ``open`` (a FIFO or a
    terminal opened by path, as a regular file is) is looked at only if
    ``opened``: else its flags say it is taken for a regular file."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        if flags & _KERNEL_O_LARGEFILE and not opened:
            return None
        st = os.fstat(fd)
    except (OSError, ValueError, TypeError, OverflowError):
        return None
    if not (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return None
    return (fd, st.st_dev, st.st_ino, flags & os.O_ACCMODE != os.O_WRONLY)


def _check_offsets(fd: int, offset: int, length: int, name: Union[str, bytes, None]) -> None:
    """Raises ``OSError`` (``ESPIPE``, as ``os.pread``'s) for a read of
    ``length`` bytes at ``offset`` (not 0) of ``fd`` if it has no offsets
    (``lseek`` refuses it: a pipe, socket or terminal); a character device
    with offsets (``/dev/zero``) passes."""
    try:
        os.lseek(fd, 0, os.SEEK_CUR)
    except OSError as e:
        if e.errno != errno.ESPIPE:
            return  # (the read reports what is wrong with the descriptor)
        text = f"read of {length} bytes at offset {offset} on fd {fd} failed: {os.strerror(errno.ESPIPE)}"
        raise OSError(errno.ESPIPE, text, name) if name is not None else OSError(errno.ESPIPE, text) from None


def _name(file: FileLike) -> Union[str, bytes, None]:
    if isinstance(file, int):
        return None
    n = getattr(file, "name", None)
    return n if isinstance(n, (str, bytes)) else None


def _flat(buf: Any, where: str = "") -> Any:
    """A byte view of any C-contiguous buffer (numpy arrays of any dtype);
    a ``TypeError`` naming ``where`` (the argument or item) for anything
    else."""
    if isinstance(buf, (bytearray, bytes)):
        return buf
    try:
        m = memoryview(buf)
    except TypeError:
        if not where:
            raise
        raise TypeError(f"{where}: a bytes-like object is required, not {type(buf).__name__!r}") from None
    if m.format == "B" and m.ndim == 1:
        return buf
    return m.cast("B")


def _buffer_ops(ops: List[Any]) -> List[Any]:
    """``(file, buffer, offset)`` items as the core takes them: each
    buffer a flat byte view, a bad one named by its item (``ops[k]``)."""
    return [(_fd(f), _flat(b, f"ops[{k}]"), off) for k, (f, b, off) in enumerate(ops)]


def _offset_list(offsets: Any) -> List[Any]:
    """``offsets`` as a list; a ``TypeError`` naming the argument for
    something that is not iterable."""
    try:
        return list(offsets)
    except TypeError:
        raise TypeError(f"offsets: an iterable of ints is required, not {type(offsets).__name__!r}") from None


def _copy_into(buf: Any, data: bytes) -> None:
    """Copies ``data`` to the start of ``buf`` (any writable C-contiguous
    buffer), releasing the views it makes at once."""
    with memoryview(buf) as m, m.cast("B") as flat:
        flat[:len(data)] = data


def _finish(results: List[Any], names: Sequence[Union[str, bytes, None]], return_exceptions: bool) -> List[Any]:
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            if isinstance(r, OSError) and r.filename is None and names[i] is not None:
                r.filename = names[i]
            if not return_exceptions:
                raise r
    return results


_I64 = range(-(1 << 63), 1 << 63)


def _out_of_range(length: Any, offsets: Iterable[Any], what: str = "offsets") -> Exception:
    """The ``ValueError`` for an int argument too large (or too negative)
    for the core to take, naming the argument; raised where the core's
    conversion said ``OverflowError``."""
    if isinstance(length, int) and length not in _I64:
        if length < 0:
            return ValueError(f"length must be at least 0, got {length}")
        return ValueError(f"length {length} is more than one read returns on Linux (2147479552 bytes): read it in parts")
    for i, o in enumerate(offsets):
        if isinstance(o, int) and o not in _I64:
            if o < 0:
                return ValueError(f"{what}: offset must be at least 0, got {o} (item {i})")
            return ValueError(f"{what}: offset {o} (item {i}) is past the largest file offset ({(1 << 63) - 1})")
    # Neither: the int left is a file's descriptor.
    where = "file" if what in ("offsets", "offset") else what
    return ValueError(f"{where}: a file descriptor is out of range (descriptors are below 2**31)")


def _one_offset(e: TypeError) -> TypeError:
    """The core's ``TypeError`` for a call of one ``offset`` (``aread``),
    naming that argument rather than the list it was passed in."""
    return TypeError(str(e).replace("argument 'offsets'", "argument 'offset'"))


#: A batch's future: asyncio's, or the stand-in under trio.
_Future = Union["asyncio.Future[List[Any]]", TrioFuture]

#: A path as ``os`` functions take it.
StrPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Operations still in flight at interpreter exit complete before the
    # buffers they write into can be freed.
    for e in list(_engines):
        e.close()


def _forget_engines_after_fork() -> None:
    """In a forked child the engines made before ``fork()`` are the
    parent's (their rings and threads): each is forgotten at once, its
    operations in flight failed for the child's tasks (see
    :meth:`Engine._forget_parent`), and the child's exit leaves them
    alone, as it leaves the parent's threads."""
    for e in list(_engines):
        e._forget_parent()
    _engines.clear()


os.register_at_fork(after_in_child=_forget_engines_after_fork)


#: The waiter of a batch nobody awaits.
_NOBODY: Tuple[None, None] = (None, None)


class _Opened:
    """Marks a batch whose result is a descriptor just opened: if nobody
    takes it (the awaiting task was cancelled), it is closed."""


_OPENED = _Opened()


def _waits_not(st_mode: int) -> bool:
    """Whether an open of a file of mode ``st_mode`` never waits for a
    peer: true of regular files, directories and block devices, false of
    FIFOs, sockets and character devices (terminals), whose open may block."""
    return stat.S_ISREG(st_mode) or stat.S_ISDIR(st_mode) or stat.S_ISBLK(st_mode)


class Engine:
    """A blockio engine: batched reads, writes and fsyncs, blocking and asyncio.

    ``queue_depth`` bounds the operations in flight: 1 to 32,767, the
    Rust engines' rule (``ValueError`` otherwise), by default
    ``DEFAULT_QUEUE_DEPTH`` (256), the Rust engines' default; ``backend`` is
    ``"auto"`` (io_uring where the kernel allows it, else a thread pool),
    ``"uring"`` or ``"threads"``. ``BLOCKIO_BACKEND=threads`` in the
    environment forces the thread pool. An engine is not usable in a child
    after ``fork()``: create a new one there.

    ``inline_writes``: whether a buffered file's writes (its flushes) to
    a regular file on ext2/3/4 or tmpfs, with none of its writes
    unfinished, are made on the event loop's thread, the GIL let go,
    rather than through the engine: 2 to 3 times as fast for small writes,
    at the cost of the waits the built-in ``open``'s writes have, which
    then hold the loop (the kernel throttling a writer whose dirty pages
    the disk lags behind, another writer of the file holding its lock, a
    frozen file system). Off by default: the loop's thread then never
    waits on a file system. The default engine (:func:`default_engine`)
    turns it on when ``BLOCKIO_INLINE_WRITES=1`` is in the environment.
    """

    def __init__(self, queue_depth: int = DEFAULT_QUEUE_DEPTH, backend: Optional[str] = None,
                 inline_writes: bool = False) -> None:
        # Each batch is started with its waiter, ``(future, keep)``: the
        # future its results resolve, and the objects (file objects,
        # buffers) kept alive until they arrive, even if the task is
        # cancelled. The core keeps the waiter with the batch and hands it
        # back with the results, so no table of batches is kept here; the
        # token ``start`` returns only serves to cancel the batch.
        self._core = _Core(queue_depth, backend)
        #: On io_uring: a read on blockio's event loop goes on the loop's
        #: own ring (:meth:`_aread_on_loop_ring`); the thread pool chosen
        #: keeps every read on its threads.
        self._uring = self._core.backend == "uring"
        #: Whether a buffered file's writes may be made on the loop's
        #: thread (see :meth:`_write_now`).
        self._inline_writes = bool(inline_writes)
        #: The process that made the engine: in another (a forked child)
        #: its rings are the parent's, and unusable.
        self._pid = os.getpid()
        #: The loop that used the engine last (the fast path's check), by a
        #: weak reference: the engine (the default engine lives as long as
        #: the process) keeps no loop alive.
        self._loop: Callable[[], Optional[asyncio.AbstractEventLoop]] = _no_loop
        #: Every loop watching the eventfd, by id, weakly: a loop dropped
        #: unclosed is collected (its reader of the eventfd goes with it).
        self._loops: "weakref.WeakValueDictionary[int, asyncio.AbstractEventLoop]" = weakref.WeakValueDictionary()
        self._loops_lock = threading.Lock()
        #: Every ``trio.run`` watching the eventfd: its token, and the
        #: cancel scope of its watching task.
        self._trio_runs: Dict[Any, Any] = {}
        #: Bytes of streams that a read whose task was cancelled got, for
        #: the next read of the stream (see :meth:`_read_kept`): by
        #: descriptor, with the stream's ``(device, inode)``.
        self._kept_reads: Dict[int, Tuple[Tuple[int, int], bytes]] = {}
        #: What ends each wait of a stream's read for the stream (see
        #: :meth:`_aread_stream`), for :meth:`close`.
        self._stream_waits = Stops()
        _engines.add(self)

    @property
    def backend(self) -> str:
        """``"uring"`` or ``"threads"``."""
        return self._core.backend

    @property
    def fallback_reason(self) -> Optional[str]:
        """Why the thread pool is in use, if it is."""
        return self._core.fallback_reason

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._core.closed

    @property
    def _usable_here(self) -> bool:
        """Open, and made by this process (not a parent before ``fork()``)."""
        # (the core's fork guard: a word the kernel zeroes in any child made
        # without CLONE_VM, by fork(), glibc's _Fork() or a raw clone, so no
        # getpid system call per check, but where the kernel refuses that
        # (before Linux 4.14), which asks the process id; Engine.close,
        # made once, asks os.getpid())
        return self._core.usable

    def close(self) -> None:
        """Releases the rings. Idempotent.

        Operations in flight are waited for while they keep completing; any
        still pending once a second passes without a completion (a read of
        an empty pipe) or when a signal handler raises (Ctrl-C) are
        cancelled. Every task awaiting this engine is then resolved: with
        its result if its operation completed, else with ``OSError``
        (``ECANCELED``) saying that close cut it short.

        In a child forked after the engine was made, the rings and
        threads are the parent's: the child's engine is forgotten, never
        touched, and is closed (see :meth:`_forget_parent`)."""
        if self._pid != os.getpid():
            self._forget_parent()
            return
        with self._loops_lock:
            loops, self._loops, self._loop = list(self._loops.values()), weakref.WeakValueDictionary(), _no_loop
            trio_runs, self._trio_runs = list(self._trio_runs.items()), {}
        self._stream_waits.end()  # (the reads then fail as the engine's cancelled operations do)
        for token, scope in trio_runs:
            try:
                token.run_sync_soon(scope.cancel)
            except RuntimeError:
                pass  # that trio.run is over
        if not self._core.closed:
            efd = self._core.eventfd()
            for loop in loops:
                self._unwatch(loop, efd)
        finished, cancelled, interrupted = self._core.close()
        for (fut, _), results in finished:
            if fut is not None:
                _deliver_results(fut, results, None)
        # Cancelled (after a second without completions, or cut short by a
        # signal): each gets the error.
        for fut, _ in cancelled:
            if fut is not None:
                err = OSError(errno.ECANCELED, "blockio.Engine.close() cancelled this operation before it completed")
                _deliver(fut, None, None, err)
        if interrupted is not None:
            raise interrupted

    def _forget_parent(self) -> None:
        """In a child forked after the engine was made (at the fork, from
        ``os.register_at_fork``): the rings and threads are the parent's,
        and only the parent completes the operations it had in flight. The
        core forgets them without touching a ring or a buffer, and each
        task of the child awaiting one gets ``RuntimeError`` saying so
        (:func:`_fail_in_child`) instead of waiting for ever; a task that
        was cancelled meanwhile (``asyncio.run``'s end cancels every task)
        ends cancelled (see :meth:`_awrite_kept`). Idempotent."""
        # (no lock: in a child just forked only this thread runs, and a lock
        # another thread of the parent held would stay held)
        self._loops, self._loop, self._trio_runs = weakref.WeakValueDictionary(), _no_loop, {}
        _, parents, _ = self._core.close()
        for fut, _ in parents:
            if fut is not None:
                _fail_in_child(fut)

    @staticmethod
    def _unwatch(loop: asyncio.AbstractEventLoop, efd: int) -> None:
        """Stops ``loop`` watching the eventfd, from any thread."""
        if loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is loop or not loop.is_running():
                loop.remove_reader(efd)
            else:
                loop.call_soon_threadsafe(loop.remove_reader, efd)
        except Exception:
            pass  # closed meanwhile

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- synchronous batches ------------------------------------------------

    @overload
    def read_batch(
        self, file: FileLike, *, offsets: Iterable[int], length: int, return_exceptions: Literal[False] = False
    ) -> List[bytes]: ...
    @overload
    def read_batch(
        self, file: FileLike, *, offsets: Iterable[int], length: int, return_exceptions: bool
    ) -> List[Union[bytes, OSError]]: ...

    def read_batch(
        self, file: FileLike, *, offsets: Iterable[int], length: int, return_exceptions: bool = False
    ) -> List[Any]:
        """Reads ``length`` bytes at each of ``offsets``, in one batch, the
        GIL released; a list of ``bytes`` (short at end of file), in order.
        A failed read raises ``OSError`` (errno and filename set), or is
        returned in its place with ``return_exceptions=True``. On an
        ``O_DIRECT`` descriptor the buffers are aligned for it."""
        offsets = _offset_list(offsets)
        fd, name = _fd(file), _name(file)
        try:
            res, failed = self._core.read_batch(fd, offsets, length)
        except OverflowError:
            raise _out_of_range(length, offsets) from None
        if not failed:
            return res
        return _finish(res, [name] * len(offsets), return_exceptions)

    @overload
    def readinto_batch(self, ops: Iterable[BufferOp], return_exceptions: Literal[False] = False) -> List[int]: ...
    @overload
    def readinto_batch(self, ops: Iterable[BufferOp], return_exceptions: bool) -> List[Union[int, OSError]]: ...

    def readinto_batch(self, ops: Iterable[BufferOp], return_exceptions: bool = False) -> List[Any]:
        """Reads into each ``(file, buffer, offset)`` without copying: any
        writable C-contiguous buffer (bytearray, memoryview, mmap, numpy
        array); a list of byte counts."""
        ops = list(ops)
        try:
            res, failed = self._core.readinto_batch(_buffer_ops(ops))
        except OverflowError:
            raise _out_of_range(None, [off for _, _, off in ops], "ops") from None
        if not failed:
            return res
        return _finish(res, [_name(f) for f, _, _ in ops], return_exceptions)

    @overload
    def write_batch(self, ops: Iterable[BufferOp], return_exceptions: Literal[False] = False) -> List[int]: ...
    @overload
    def write_batch(self, ops: Iterable[BufferOp], return_exceptions: bool) -> List[Union[int, OSError]]: ...

    def write_batch(self, ops: Iterable[BufferOp], return_exceptions: bool = False) -> List[Any]:
        """Writes each ``(file, data, offset)``; a list of byte counts."""
        ops = list(ops)
        try:
            res, failed = self._core.write_batch(_buffer_ops(ops))
        except OverflowError:
            raise _out_of_range(None, [off for _, _, off in ops], "ops") from None
        if not failed:
            return res
        return _finish(res, [_name(f) for f, _, _ in ops], return_exceptions)

    @overload
    def read_files(self, paths: Iterable[StrPath], return_exceptions: Literal[False] = False) -> List[bytes]: ...
    @overload
    def read_files(self, paths: Iterable[StrPath], return_exceptions: bool) -> List[Union[bytes, OSError, MemoryError, ValueError]]: ...

    def read_files(self, paths: Iterable[StrPath], return_exceptions: bool = False) -> List[Any]:
        """Each file's whole content, in order, the GIL released: for many
        small files (a data loader's samples). The files are read in rounds
        of 16, on up to 16 threads of the core at once (256 files open at
        most): a round's opens, reads and closes each go through the engine
        as one batch, every file's operation of a step in flight at once,
        and its sizes are a ``statx`` of each open file; while one round
        waits for its slowest file, the others keep the device busy. A file that cannot be read raises ``OSError``
        (errno and filename set, as the built-in ``open``'s), or is
        returned in its place with ``return_exceptions=True``; a directory
        is ``IsADirectoryError``, and a file larger than the memory
        available ``MemoryError`` (in its place too), as
        ``Path.read_bytes`` raises: never an abort; a path holding a NUL
        byte is the built-in ``open``'s ``ValueError``, in its place too.
        Made for regular files: a file whose
        reads come back short (``/proc``) is read on to its end, and a FIFO
        or socket is read in order to its end, as ``Path.read_bytes`` reads
        it (a FIFO is opened without waiting for a writer: with none there
        yet, it reads as empty).

        Near the descriptor limit (``RLIMIT_NOFILE``) the call does not
        fail as a whole: it starts only as many threads as the free
        descriptor numbers leave room for, reads each file alone (one
        descriptor at a time, as ``Path.read_bytes``) when there is room
        for no round, and reads alone again every file whose open met
        ``EMFILE``; a file fails for the limit only if it cannot be opened
        alone."""
        paths = _path_list(paths)
        names, nul = _encoded_paths(paths)
        res, failed = self._core.read_files(names)
        if failed:
            res = _named(res, paths)
        return _finish(_with_nul_errors(res, nul), [None] * len(paths), return_exceptions)

    @overload
    async def aread_files(
        self, paths: Iterable[StrPath], return_exceptions: Literal[False] = False
    ) -> List[bytes]: ...
    @overload
    async def aread_files(self, paths: Iterable[StrPath], return_exceptions: bool) -> List[Union[bytes, OSError, MemoryError, ValueError]]: ...

    async def aread_files(self, paths: Iterable[StrPath], return_exceptions: bool = False) -> List[Any]:
        """:meth:`read_files` as a coroutine: the batches run on the
        engine's file-system threads, never on the event loop's. A task
        cancelled before they start reads nothing; one cancelled later
        leaves them to finish, and their files are closed."""
        paths = _path_list(paths)
        names, nul = _encoded_paths(paths)
        res = (await self._run(None, self._core.submit_read_files, names))[0]
        if isinstance(res, OSError):
            raise res
        return _finish(_with_nul_errors(_named(res, paths), nul), [None] * len(paths), return_exceptions)

    def fsync(self, file: FileLike) -> None:
        """Flushes the file's data and metadata to stable storage."""
        self._core.fsync(_fd(file), False)

    def fdatasync(self, file: FileLike) -> None:
        """Flushes the file's data (and the metadata needed to read it)."""
        self._core.fsync(_fd(file), True)

    def fallocate(self, file: FileLike, *, offset: int, length: int, mode: int = 0) -> None:
        """Allocates, deallocates or zeroes ``length`` bytes of the file's
        storage from ``offset`` (Linux's ``fallocate(2)``), with the GIL
        released. ``mode`` holds its flags (:data:`blockio.FALLOC_FL_KEEP_SIZE`,
        ``FALLOC_FL_PUNCH_HOLE``, ``FALLOC_FL_ZERO_RANGE``, or-ed): 0
        allocates, growing the file if the range ends past it, as
        ``os.posix_fallocate``. A negative offset or length raises
        ``ValueError``; what the kernel refuses (an empty range, a mode the
        file system lacks) raises its ``OSError``."""
        self._core.fallocate(_fd(file), mode, offset, length)

    # -- asyncio ------------------------------------------------------------

    def _attach(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> asyncio.AbstractEventLoop:
        """Makes the running loop watch the engine's eventfd (once per
        loop). One engine serves every loop that uses it, in any thread:
        each watches the eventfd, and whichever wakes first hands every
        finished batch to the loop its task awaits on."""
        if loop is None:
            loop = asyncio.get_running_loop()
        if self._loops.get(id(loop)) is not loop:
            efd = self._core.eventfd()
            with self._loops_lock:
                for k, old in list(self._loops.items()):
                    if old.is_closed():
                        del self._loops[k]
                if self._loops.get(id(loop)) is not loop:
                    loop.add_reader(efd, self._on_ready, loop)
                    self._loops[id(loop)] = loop
        self._loop = weakref.ref(loop)
        return loop

    def _on_ready(self, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        for (fut, keep), results in self._core.drain():
            # A cancelled future gets nothing; its buffers and file objects
            # were kept until now.
            if fut is not None and not fut.done():
                _deliver_results(fut, results, loop)
            elif keep is _OPENED and isinstance(results, list) and isinstance(results[0], int):
                # Opened for a task whose cancellation has not reached it
                # yet: closed on the file-system threads, for nobody.
                self._core.submit_close(_NOBODY, results[0])

    def _watch_trio(self, trio: Any) -> None:
        """Makes the running ``trio.run`` watch the eventfd (once per run),
        with a system task that drains every finished batch whenever the
        eventfd is readable, until the run ends or the engine closes."""
        token = trio.lowlevel.current_trio_token()
        if token in self._trio_runs:
            return
        efd = self._core.eventfd()
        with self._loops_lock:
            if token in self._trio_runs:
                return
            scope = trio.CancelScope()
            self._trio_runs[token] = scope

        async def watch() -> None:
            try:
                with scope:
                    while True:
                        await trio.lowlevel.wait_readable(efd)
                        self._on_ready(None)
            finally:
                with self._loops_lock:
                    if self._trio_runs.get(token) is scope:
                        del self._trio_runs[token]

        trio.lowlevel.spawn_system_task(watch, name="blockio engine completions")

    async def _run_trio(self, keep: Any, start: Callable[..., int], *args: Any) -> List[Any]:
        """:meth:`_run` under trio."""
        trio = running_trio()
        self._watch_trio(trio)
        fut = TrioFuture(trio)
        token: int = start((fut, keep), *args)
        try:
            results: List[Any] = await fut
            return results
        except BaseException:
            # Cancelled (or interrupted): given up as a cancelled asyncio
            # task's batch is.
            self._abandon(token)
            if fut.done():
                self._unclaimed(keep, fut._result)
            raise

    async def _run(self, keep: Any, start: Callable[..., int], *args: Any) -> List[Any]:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return await self._run_trio(keep, start, *args)
        if loop is not self._loop():
            self._attach(loop)
        fut = loop.create_future()
        # `keep`: the file objects whose descriptors the operations use, kept
        # open until the completions arrive, even if the task is cancelled.
        token: int = start((fut, keep), *args)
        try:
            results: List[Any] = await fut
            return results
        except asyncio.CancelledError:
            self._abandon(token)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                # The results had arrived, but the cancellation reached the
                # task before it could take them.
                self._unclaimed(keep, fut.result())
            raise

    def _begin(self, keep: Any, start: Callable[..., int], *args: Any) -> Tuple[Any, int]:
        """Starts ``start`` for a call that awaits it later
        (:meth:`_await_placed`), with no await before it is started: the
        future it resolves and its token."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            trio = running_trio()
            self._watch_trio(trio)
            fut: Any = TrioFuture(trio)
        else:
            if loop is not self._loop():
                self._attach(loop)
            fut = loop.create_future()
        token: int = start((fut, keep), *args)
        return fut, token

    async def _await_placed(self, fut: Any) -> Tuple[List[Any], Optional[BaseException]]:
        """The results of an entry of a file's write queue started by
        :meth:`_begin`, awaited to its end even if the task is cancelled
        meanwhile (the core carries the entry out whatever becomes of the
        call, as a write's: its outcome, a failure, is the call's to
        take); and the cancellation, for the caller to raise once it has
        taken them, or None."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            with running_trio().CancelScope(shield=True):
                results: List[Any] = await fut
            return results, None
        cancelled: Optional[BaseException] = None
        while not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError as e:
                cancelled = e
        if cancelled is not None and _parents(fut):
            raise cancelled
        return fut.result(), cancelled

    def _unclaimed(self, keep: Any, results: Any) -> None:
        """Results nobody will take: a descriptor just opened for a task
        that was cancelled is closed (on the file-system threads)."""
        if keep is _OPENED and results and isinstance(results[0], int):
            self._core.submit_close(_NOBODY, results[0])

    def _abandon(self, token: int) -> None:
        """The task awaiting ``token`` was cancelled: operations of it not
        yet handed to the kernel are never submitted, and those in flight
        hold their own duplicate of the descriptor until they complete (or,
        on a file object's own descriptor, hold up the file's close until
        then), so closing the file now cannot send them to another file."""
        self._core.cancel(token)

    @overload
    async def aread_batch(
        self, file: FileLike, *, offsets: Iterable[int], length: int, return_exceptions: Literal[False] = False
    ) -> List[bytes]: ...
    @overload
    async def aread_batch(
        self, file: FileLike, *, offsets: Iterable[int], length: int, return_exceptions: bool
    ) -> List[Union[bytes, OSError]]: ...

    async def aread_batch(
        self, file: FileLike, *, offsets: Iterable[int], length: int, return_exceptions: bool = False
    ) -> List[Any]:
        """:meth:`read_batch` as a coroutine."""
        offsets = _offset_list(offsets)
        try:
            res = await self._run(file, self._core.submit_read, _fd(file), offsets, length)
        except OverflowError:
            raise _out_of_range(length, offsets) from None
        return _finish(res, [_name(file)] * len(offsets), return_exceptions)

    async def _aread_after(self, file: FileLike, head: bytes, offset: int, length: int) -> bytes:
        """``head`` (bytes a file object holds, read before ``offset``),
        then up to ``length`` (at least 1) bytes read at ``offset``, in one
        object the engine fills off this thread (``Core.submit_read_after``):
        a large read after a small one keeps the bytes read ahead, as the
        built-in's does, and joins nothing here. Not for ``O_DIRECT``."""
        res = await self._run(file, self._core.submit_read_after, _fd(file), head, offset, length)
        out: bytes = _finish(res, [_name(file)], False)[0]
        return out

    async def aread(self, file: FileLike, *, offset: int, length: int) -> bytes:
        """Reads up to ``length`` bytes at ``offset``.

        Under asyncio a read whose bytes are all in the page cache is
        copied on the calling thread (``preadv2`` with ``RWF_NOWAIT``),
        without a trip through the ring or a wake-up of the loop; it
        returns without suspending the task, except now and then (once
        1 ms has passed since the thread's last turn of the loop, the clock
        read once in 256 calls the thread serves so and once in every 4 MiB
        they copy: ``turns`` in the core), when it yields to the loop once
        first. Any other read goes through the engine; on blockio's event
        loop on io_uring, on the loop's own ring instead
        (:meth:`_aread_on_loop_ring`), the engine on io_uring too."""
        # aread_batch of one, inlined: this is the per-read hot path of
        # asyncio code, where every Python frame shows in the IOPS.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            key = _stream_key(_fd(file), True) if type(offset) is int and type(length) is int else None
            if key is not None:
                return await self._aread_stream(file, key, offset, length)
            try:
                got = await self._run_trio(file, self._core.submit_read, _fd(file), [offset], length)
            except OverflowError:
                raise _out_of_range(length, [offset], "offset") from None
            except TypeError as e:
                raise _one_offset(e) from None
            r0: bytes = _finish(got, [_name(file)], False)[0]
            return r0
        # `_fd`, inlined for a built-in file (a Python call less per read).
        fd: int
        if type(file) is int:
            fd = file
        elif type(file) is _Descriptor:
            fd = _fd(file)
        else:
            try:
                fd = file.fileno()  # type: ignore[union-attr]
            except AttributeError:
                fd = _fd(file)  # (raises the TypeError naming the argument's type)
        if type(offset) is int and type(length) is int:
            # Inline: copied on this thread, no ring round trip or wake-up;
            # counted with the thread's other calls served without
            # suspending (``turns`` in the core), so that now and then one
            # takes a turn of the loop first and a task reading cached
            # data in a loop never starves the others.
            try:
                inline = self._core.read_inline_in_turn(fd, offset, length)
            except OverflowError:  # beyond 64 bits: the error comes below
                inline = None
            if inline:
                return inline
            if inline is False:
                await asyncio.sleep(0)
                try:
                    inline = self._core.read_inline(fd, offset, length)
                except OverflowError:
                    inline = None
                if inline is not None:
                    count_copied(len(inline))  # (the call took its turn: its bytes start the count)
                    return inline
            # A pipe, socket or terminal, or a FIFO or terminal opened by
            # path (whose flags are a regular file's: fstat tells).
            kind = _stream_or_ring(fd)
            if type(kind) is tuple:
                return await self._aread_stream(file, kind, offset, length)
            return await self._aread_off_thread(loop, file, fd, offset, length, kind is True)
        return await self._aread_off_thread(loop, file, fd, offset, length)

    async def _aread_off_thread(self, loop: asyncio.AbstractEventLoop, file: FileLike, fd: int, offset: Any,
                                length: Any, ring: Optional[bool] = None) -> bytes:
        """The read of :meth:`aread` not served on this thread: on
        ``loop``'s own ring where it takes it (:meth:`_aread_on_loop_ring`;
        ``ring``: :func:`_ring_serves` of ``fd`` if already known), else
        through the engine, which reports the arguments it refuses."""
        if self._uring and type(offset) is int and type(length) is int:
            on_ring = await self._aread_on_loop_ring(loop, file, fd, offset, length, ring)
            if on_ring is not None:
                return on_ring
        if loop is not self._loop():
            self._attach(loop)
        fut = loop.create_future()
        try:
            token = self._core.submit_read((fut, file), fd, [offset], length)
        except OverflowError:
            raise _out_of_range(length, [offset], "offset") from None
        except TypeError as e:
            raise _one_offset(e) from None
        try:
            r = (await fut)[0]
        except asyncio.CancelledError:
            self._abandon(token)
            raise
        if type(r) is bytes:
            return r
        out: bytes = _finish([r], [_name(file)], False)[0]
        return out

    async def _aread_on_loop_ring(self, loop: asyncio.AbstractEventLoop, file: FileLike, fd: int, offset: int,
                                  length: int, ring: Optional[bool] = None) -> Optional[bytes]:
        """The read of :meth:`aread` not served inline, on ``loop``'s own
        ring when ``loop`` is blockio's event loop on io_uring (its
        ``_ring_pread``): submitted from this thread and completed in the
        loop's batch of completions, with no driver thread, no eventfd and
        no thread hop of its own (the read is copied by the kernel's worker
        threads, not in the submission on this thread, which would start
        the disk's reads itself: ``LoopRing.pread``, ``INLINE_PREAD_MAX``). The kernel takes the file from the number when the
        read is submitted, at once, and holds it until the read completes,
        so a cancelled read that the file's close overtakes reads nothing
        of a file that takes the number next (and moves nothing: the
        ``bytes`` object the kernel reads into is dropped). None where the read
        goes through the engine instead, decided before the read is
        submitted: another loop, an offset outside what one ``pread``
        takes, a length of 0 or above what one ``pread`` takes, an engine closed or a
        forked child's, a descriptor the ring does not serve
        (:func:`_ring_serves`: ``O_DIRECT``, non-blocking, not a regular
        file...). A read the kernel fails raises its error, worded as the
        engine's (:func:`_ring_failed`); it is never made again by the
        number, which may name another file by then. ``file`` is kept by
        this frame until the read completes. ``ring``: what
        :func:`_ring_serves` says of ``fd``, if the caller has asked it."""
        ring_read = getattr(loop, "_ring_pread", None)
        if (ring_read is None or not 0 <= offset <= _MAX_OFFSET or not 0 < length <= _MAX_IO
                or not self._usable_here or not (_ring_serves(fd) if ring is None else ring)):
            return None
        data: Optional[bytes] = await _on_the_ring(lambda: ring_read(fd, offset, length), file, fd, offset, length)
        return data

    async def _aread_at(self, file: FileLike, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` of a file that is not a
        stream, with no try on this thread first (a file object's read of
        the rest, which asks a byte past the end that the page cache never
        serves): on blockio's event loop on io_uring on its ring
        (:meth:`_aread_on_loop_ring`), else through the engine."""
        if self._uring and type(offset) is int and type(length) is int:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                on_ring = await self._aread_on_loop_ring(loop, file, _fd(file), offset, length)
                if on_ring is not None:
                    return on_ring
        got: bytes = (await self.aread_batch(file, offsets=[offset], length=length))[0]
        return got

    async def _aread_stream(self, file: FileLike, key: Tuple[int, int, int, bool], offset: int, length: int) -> bytes:
        """:meth:`aread` of a pipe, socket or terminal, where a read may
        wait for ever. Bytes a cancelled read got come first. A wait that
        :meth:`close` ends fails with ``OSError`` (``ECANCELED``), as the
        operations close cancels. Then, for a
        stream opened for reading, the read waits until the stream is
        readable in the event loop's own poll (:func:`wait_readable`),
        holding no place in the engine's bound on operations in flight,
        so that reads waiting on idle streams never hold up the engine's
        other work; a cancellation there takes nothing from the stream.
        The read itself then finds its bytes at once (see
        :meth:`_read_kept`). A stream without offsets (a pipe, socket or
        terminal: ``lseek`` refuses it) is read at offset 0 alone, as one
        ``read(2)`` (``os.read``'s); another offset raises ``OSError``
        (``ESPIPE``), as ``os.pread`` there, on both backends (io_uring
        would ignore it, and read)."""
        self._core.eventfd()  # (raises if the engine is closed, or the parent's)
        if offset > 0:
            _check_offsets(key[0], offset, length, _name(file))
        kept = self._take_kept(key, length)
        if kept is not None:
            return kept
        if key[3] and length > 0:
            await wait_readable(key[0], self._stream_waits)
            if self._core.closed:
                raise OSError(errno.ECANCELED, "blockio.Engine.close() cancelled this operation before it completed")
            kept = self._take_kept(key, length)  # (a read cancelled meanwhile, in another task)
            if kept is not None:
                return kept
        try:
            r = await self._read_kept(file, key, offset, length)
        except OverflowError:
            raise _out_of_range(length, [offset], "offset") from None
        if type(r) is bytes:
            return r
        out: bytes = _finish([r], [_name(file)], False)[0]
        return out

    def _take_kept(self, key: Tuple[int, int, int, bool], length: int) -> Optional[bytes]:
        """Up to ``length`` of the bytes kept for the stream ``key`` (see
        :meth:`_read_kept`), or None. Bytes kept for another stream that
        had the number before are dropped: nobody can read that one now."""
        entry = self._kept_reads.get(key[0])
        if entry is None:
            return None
        if entry[0] != key[1:3]:
            del self._kept_reads[key[0]]
            return None
        kept = entry[1]
        if len(kept) > length:
            self._kept_reads[key[0]] = (entry[0], kept[length:])
            return kept[:length]
        del self._kept_reads[key[0]]
        return kept

    def _kept_for(self, fd: int) -> int:
        """How many bytes are kept for the stream now under ``fd`` (see
        :meth:`_read_kept`)."""
        entry = self._kept_reads.get(fd)
        if entry is None:
            return 0
        key = _stream_key(fd, True)
        return len(entry[1]) if key is not None and entry[0] == key[1:3] else 0

    def _keep(self, key: Tuple[int, int, int, bool], data: bytes) -> None:
        """Keeps ``data``, read from the stream ``key`` by a read whose
        task was cancelled, for its next read, after any kept already."""
        entry = self._kept_reads.get(key[0])
        before = entry[1] if entry is not None and entry[0] == key[1:3] else b""
        self._kept_reads[key[0]] = (key[1:3], before + data)

    async def _read_kept(self, file: FileLike, key: Tuple[int, int, int, bool], offset: int, length: int) -> Any:
        """One read of a stream through the engine; its result (bytes, or
        the error). Its task cancelled meanwhile, the read is waited for
        (it was started once the stream was readable, and so completes at
        once) at most :data:`CANCEL_GRACE` seconds, through any further
        cancellation: the bytes it got are kept for the stream's next
        read, and the cancellation raised. One still not done then (the
        bytes went to another reader) is given up."""
        fut: Any
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            trio = running_trio()
            self._watch_trio(trio)
            fut = TrioFuture(trio)
            token = self._core.submit_read((fut, file), key[0], [offset], length)
            try:
                return (await fut)[0]
            except trio.Cancelled as e:
                cancelled: BaseException = e
            with trio.CancelScope(deadline=trio.current_time() + CANCEL_GRACE, shield=True):
                try:
                    await fut
                except OSError:
                    pass
        else:
            if loop is not self._loop():
                self._attach(loop)
            fut = loop.create_future()
            token = self._core.submit_read((fut, file), key[0], [offset], length)
            try:
                return (await asyncio.shield(fut))[0]
            except asyncio.CancelledError as e:
                cancelled = e
            await through_grace(loop, fut)
        if not fut.done():
            self._abandon(token)
            raise cancelled
        try:
            r = fut.result() if not isinstance(fut, TrioFuture) else fut._result
        except BaseException:
            r = None
        if r and type(r[0]) is bytes and r[0]:
            self._keep(key, r[0])
        raise cancelled

    @overload
    async def areadinto_batch(
        self, ops: Iterable[BufferOp], return_exceptions: Literal[False] = False
    ) -> List[int]: ...
    @overload
    async def areadinto_batch(self, ops: Iterable[BufferOp], return_exceptions: bool) -> List[Union[int, OSError]]: ...

    async def areadinto_batch(self, ops: Iterable[BufferOp], return_exceptions: bool = False) -> List[Any]:
        """:meth:`readinto_batch` as a coroutine."""
        ops = list(ops)
        return await self._abuffers(ops, self._core.submit_readinto, return_exceptions)

    async def areadinto(self, file: FileLike, buf: "Buffer", offset: int) -> int:
        """Reads into ``buf`` at ``offset``; the byte count. On a pipe,
        socket or terminal the read goes into a buffer of the engine's and
        is copied into ``buf`` when it completes: a read there may wait
        indefinitely, and if its task is cancelled meanwhile, ``buf`` (a
        ``bytearray`` say) is not left exported, and so unresizable, until
        data arrives. On blockio's event loop on io_uring, a file's read
        goes on the loop's own ring (:meth:`_areadinto_on_loop_ring`).
        A stream's read is :meth:`aread`'s (a FIFO or terminal opened by
        path included: ``fstat`` tells it from a file), so a cancelled one
        keeps the bytes it took for the next read."""
        if type(_stream_or_ring(_fd(file))) is tuple:
            # No view of `buf` is held across the await: a cancelled task's
            # traceback keeps its frame, and a view there would keep `buf`
            # exported.
            with memoryview(buf) as m:
                size = m.nbytes
            data = await self.aread(file, offset=offset, length=size)
            _copy_into(buf, data)
            return len(data)
        if self._uring and type(offset) is int:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                on_ring = await self._areadinto_on_loop_ring(loop, file, buf, offset)
                if on_ring is not None:
                    return on_ring
        n: int = (await self.areadinto_batch([(file, buf, offset)]))[0]
        return n

    async def _areadinto_on_loop_ring(self, loop: asyncio.AbstractEventLoop, file: FileLike, buf: "Buffer",
                                      offset: int) -> Optional[int]:
        """:meth:`areadinto` on ``loop``'s own ring, as
        :meth:`_aread_on_loop_ring` reads (and with the same cases left to
        the engine); a buffer the ring refuses (read-only, not contiguous,
        not a buffer) is left to the engine too, which raises its own
        error. ``buf`` is held, unresizable, until the kernel has
        answered, even if the task is cancelled first, as through the
        engine."""
        ring_read = getattr(loop, "_ring_pread_into", None)
        fd = _fd(file)
        if ring_read is None or not 0 <= offset <= _MAX_OFFSET or not self._usable_here or not _ring_serves(fd):
            return None
        try:
            with memoryview(buf) as m:
                size = m.nbytes
        except (TypeError, ValueError, BufferError):
            return None  # (not a buffer the ring takes: the engine raises its own error)
        n: Optional[int] = await _on_the_ring(lambda: ring_read(fd, offset, buf), file, fd, offset, size)
        return n

    @overload
    async def awrite_batch(self, ops: Iterable[BufferOp], return_exceptions: Literal[False] = False) -> List[int]: ...
    @overload
    async def awrite_batch(self, ops: Iterable[BufferOp], return_exceptions: bool) -> List[Union[int, OSError]]: ...

    async def awrite_batch(self, ops: Iterable[BufferOp], return_exceptions: bool = False) -> List[Any]:
        """:meth:`write_batch` as a coroutine."""
        return await self._abuffers(ops, self._core.submit_write, return_exceptions)

    async def _abuffers(
        self, ops: Iterable[BufferOp], submit: Callable[..., int], return_exceptions: bool
    ) -> List[Any]:
        """One batch of ``(file, buffer, offset)`` operations through ``submit``."""
        ops = list(ops)
        try:
            res = await self._run(ops, submit, _buffer_ops(ops))
        except OverflowError:
            raise _out_of_range(None, [off for _, _, off in ops], "ops") from None
        return _finish(res, [_name(f) for f, _, _ in ops], return_exceptions)

    async def awrite(self, file: FileLike, data: "Buffer", offset: int) -> int:
        """Writes ``data`` at ``offset``; the byte count. On blockio's event
        loop on io_uring, a write of a regular file goes on the loop's own
        ring (:meth:`_awrite_on_loop_ring`), the engine on io_uring too."""
        if self._uring and type(offset) is int and type(file) is not _Descriptor:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                on_ring = await self._awrite_on_loop_ring(loop, file, data, offset)
                if on_ring is not None:
                    return on_ring
        n: int = (await self.awrite_batch([(file, data, offset)]))[0]
        return n

    async def _awrite_on_loop_ring(self, loop: asyncio.AbstractEventLoop, file: FileLike, data: "Buffer",
                                   offset: int) -> Optional[int]:
        """:meth:`awrite` on ``loop``'s own ring when ``loop`` is blockio's
        event loop on io_uring (its ``_ring_pwrite``): one ``pwrite``
        submitted from this thread and completed in the loop's batch of
        completions, with no driver thread, no eventfd and no thread hop.
        The kernel takes the file from the number at the call and holds it
        to the end. A write begun lands even if the task is cancelled, as
        the engine's: the ring never cancels it (the loop's close waits for
        it), and the task's cancellation is raised at once, as through the
        engine. None where the write goes through the engine instead,
        decided before it is submitted: another loop, an offset outside
        what one ``pwrite`` takes, an empty or oversized buffer, an engine
        closed or a forked child's, a descriptor that is not a regular file
        or block device open for writing (``O_DIRECT``, non-blocking...), a
        buffer the ring refuses. A write the kernel fails raises its error,
        worded as the engine's."""
        ring_write = getattr(loop, "_ring_pwrite", None)
        if ring_write is None or not 0 <= offset <= _MAX_OFFSET or not self._usable_here:
            return None
        try:
            fd = _fd(file)
            flat = _flat(data)
            length = len(flat) if isinstance(flat, (bytes, bytearray)) else flat.nbytes
        except (TypeError, ValueError, AttributeError):
            return None  # (the engine reports it)
        if not 0 < length <= _MAX_IO or not _ring_writes(fd):
            return None
        try:
            fut = ring_write(fd, offset, flat)
        except (OSError, MemoryError, RuntimeError, ValueError, TypeError, BufferError):
            return None
        if fut is None:
            return None
        try:
            n: int = await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The write goes on to its end; its error, if any, is nobody's.
            fut.add_done_callback(_retrieved)
            raise
        except OSError as e:
            code = e.errno or 0
            text = f"write of {length} bytes at offset {offset} on fd {fd} failed: {os.strerror(code)}"
            name = _name(file)
            raise (OSError(code, text, name) if name is not None else OSError(code, text)) from None
        return n

    async def _awrite_kept(self, file: FileLike, data: "Buffer", offset: int,
                           cancelled: Optional[BaseException] = None,
                           placed: Optional[Callable[[], None]] = None, follows: bool = True) -> int:
        """:meth:`awrite` for a file object's write, which its position
        must follow: once submitted, the write is awaited to its completion
        even if the awaiting task is cancelled, however often, and the
        cancellation is raised only then (after the byte count is known,
        through ``_KeptCancel``). A task can be cancelled from outside
        anything it shields itself with: ``asyncio.run`` (and
        ``uvloop.run``) ends by cancelling every task of its loop, and
        runs the loop until they are done; a write that absorbs the
        cancellation until it completes is one of those, so its bytes land
        and its count comes back before the loop closes. A write not
        completed :data:`CANCEL_GRACE` seconds after the cancellation
        is withdrawn if it has not reached the kernel yet (queued behind
        operations that do not complete, such as reads of empty pipes):
        it is then never performed. One the kernel has is waited for to
        its end, however long it takes, as the built-in file's write is:
        giving it up would let the file's next call run while its bytes
        still land. ``cancelled``, if given, is a cancellation that came
        before this write began (the rest of a write the kernel cut
        short): its grace period starts now. ``placed``, if given, runs
        once the write is submitted or queued, before this first yields.
        ``follows``: whether the offset follows from the writes placed in
        the file's write queue before it (see `WriteQueue.start`). Under
        trio, :meth:`awrite` (the file's write runs in a shielded
        cancel scope there), and ``placed`` is not run. A buffered file's
        write may be made on the loop's thread (see :meth:`_write_now`)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return await self.awrite(file, data, offset)
        writes = None
        inline = False
        if type(file) is _Descriptor:
            writes, num, inline = file.writes, file.num, file.inline_writes
        if writes is not None:
            flat = _flat(data)
        if writes is not None and inline:
            now = self._write_now(writes, num, flat, offset, cancelled, placed)
            if now is not None:
                return now
        if loop is not self._loop():
            self._attach(loop)
        fut = loop.create_future()
        try:
            if writes is not None:
                # Queued in the core behind the file's writes not finished:
                # the core submits it once they complete, whatever becomes
                # of this task or its loop. (The core holds the buffer; the
                # waiter keeps the file, which its call found open.)
                token: int = writes.start(self._core, (fut, file), num, flat, offset, follows)
            else:
                token = self._core.submit_write((fut, [(file, data, offset)]), [(_fd(file), _flat(data), offset)])
        except OverflowError:
            raise _out_of_range(None, [offset], "ops") from None
        if placed is not None:
            placed()
        cancelled = await self._await_kept(loop, fut, token, writes, cancelled)
        if cancelled is not None and _parents(fut):
            raise cancelled  # (the parent's write, in a forked child: see `_forget_parent`)
        results = fut.result()
        stopped = None
        if writes is not None and results[0] != len(flat):
            # (a failure, or a write cut short, is raised or seen here: it
            # is not reported again)
            stopped = writes.claim(token)
        n: int = _finish(results, [_name(file)], False)[0]
        if stopped is not None and n > 0:
            # A part landed, then the core met `stopped` writing the rest:
            # the call raises it, as the built-in's next write would, rather
            # than write the rest again behind the entries placed since.
            raise _Stopped(n, stopped, cancelled)
        if cancelled is not None:
            raise _KeptCancel(n, cancelled)
        return n

    def _write_now(self, writes: WriteQueue, num: int, flat: Any, offset: int,
                   cancelled: Optional[BaseException], placed: Optional[Callable[[], None]]) -> Optional[int]:
        """A buffered file's write (``inline_writes`` of its descriptor,
        the engine's ``inline_writes`` on), with none of the file's writes
        unfinished, made on the loop's thread, the GIL let go
        (``WriteQueue.write_now``): its byte count, with no submission and
        no wake-up of the loop (a flush of a few KiB costs about the
        built-in's write), or None if it was not made (the caller places
        it). ``placed`` runs once it is made; ``cancelled`` is raised then
        (``_KeptCancel``). An unbuffered file's writes keep going through
        the engine: each yields once before it returns, so that the calls
        made behind it run in their turn, as the tests of the write
        queue's order expect."""
        try:
            now: Optional[int] = writes.write_now(self._core, num, flat, offset)
        except OverflowError:
            raise _out_of_range(None, [offset], "ops") from None
        if now is not None:
            if placed is not None:
                placed()
            if cancelled is not None:
                raise _KeptCancel(now, cancelled)
        return now

    async def _await_kept(self, loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[Any]", token: int,
                          writes: Optional[WriteQueue], cancelled: Optional[BaseException]) -> Optional[BaseException]:
        """Waits for ``fut``, the write ``token`` of :meth:`_awrite_kept`,
        to complete, taking every cancellation in: the first one (or
        ``cancelled``, one that came before), returned; the write is
        withdrawn and the cancellation raised if it has not reached the
        kernel :data:`CANCEL_GRACE` seconds after it."""
        # When to withdraw the write: set by a cancellation, cleared once
        # the write is found in the kernel (it completes).
        deadline = None if cancelled is None else loop.time() + CANCEL_GRACE
        while not fut.done():
            if cancelled is not None and deadline is not None and loop.time() >= deadline:
                if self._core.withdraw(token) if writes is None else writes.withdraw(token):
                    if writes is not None:
                        self._core.cancel(token)
                    raise cancelled
                deadline = None
            try:
                if cancelled is None:
                    await asyncio.shield(fut)
                else:
                    left = None if deadline is None else max(deadline - loop.time(), 0)
                    await asyncio.wait({fut}, timeout=left)
            except asyncio.CancelledError as e:
                if cancelled is None:
                    cancelled = e
                    deadline = loop.time() + CANCEL_GRACE
        return cancelled

    async def afsync(self, file: FileLike) -> None:
        """:meth:`fsync` as a coroutine."""
        _finish(await self._run(file, self._core.submit_sync, _fd(file), False), [_name(file)], False)

    async def afdatasync(self, file: FileLike) -> None:
        """:meth:`fdatasync` as a coroutine."""
        _finish(await self._run(file, self._core.submit_sync, _fd(file), True), [_name(file)], False)

    async def afallocate(self, file: FileLike, *, offset: int, length: int, mode: int = 0) -> None:
        """:meth:`fallocate` as a coroutine."""
        results = await self._run(file, self._core.submit_fallocate, _fd(file), mode, offset, length)
        _finish(results, [_name(file)], False)

    # -- file-system calls, off the loop's thread ------------------------------

    async def _aopen(self, path: Union[str, bytes, "os.PathLike[Any]"], flags: int, mode: int) -> int:
        """``os.open`` on the engine's file-system threads, or on blockio's
        event loop on io_uring, an ``openat`` on the loop's own ring (its
        ``_ring_open``: no driver thread, eventfd or thread hop); the
        descriptor. Errors read as the built-in ``open``'s: ``[Errno 2] No
        such file or directory: 'name'``."""
        return (await self._aopen_stat(path, flags, mode))[0]

    async def _aopen_stat(self, path: Union[str, bytes, "os.PathLike[Any]"], flags: int,
                          mode: int) -> Tuple[int, Optional[os.stat_result]]:
        """:meth:`_aopen`, with the ``fstat`` of the file opened on the
        loop's ring (which that open makes anyway), else None."""
        encoded = os.fsencode(path)
        loop: Any = asyncio.events._get_running_loop()
        ring_open = getattr(loop, "_ring_open", None)
        fut = ring_open(encoded, flags, mode) if ring_open is not None and self._usable_here else None
        if fut is not None:
            try:
                await fut
            except OSError as e:
                raise OSError(e.errno, os.strerror(e.errno or 0), os.fspath(path)) from None
            except BaseException:
                # Cancelled (or closed) after the loop reaped the open but
                # before this task resumed: the descriptor is the future's,
                # and nobody else will close it (a cancel before the
                # reaping cancels the future, and the ring closes what the
                # kernel opened; the loop's close closes one not taken).
                left = loop._ring_opened(fut)
                if left is not None:
                    os.close(left)
                raise
            opened: Optional[int] = loop._ring_opened(fut)
            if opened is None:  # (closed by the loop's close: this task resumed after it)
                raise OSError(errno.ECANCELED, "the event loop was closed before the open completed",
                              os.fspath(path))
            try:
                st = os.fstat(opened)
            except BaseException:
                os.close(opened)
                raise
            if not _waits_not(st.st_mode):
                # A FIFO or a terminal: the kernel's inline attempt opened it
                # non-blocking (a reader with no writer gets b'' at once);
                # opened again on the engine's threads, which block as the
                # built-in open does.
                os.close(opened)
            else:
                return opened, st
        r = (await self._run(_OPENED, self._core.submit_open, encoded, flags, mode))[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0), os.fspath(path))
        fd: int = r
        return fd, None

    async def _astat(self, path: Union[str, bytes, "os.PathLike[Any]"], follow: bool) -> os.stat_result:
        """``os.stat(path)`` (``os.lstat`` unless ``follow``) as a
        ``statx`` on the file-system threads; errors read as
        ``os.stat``'s."""
        r = (await self._run(None, self._core.submit_stat, os.fsencode(path), follow))[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0), os.fspath(path))
        (mode, ino, dev_major, dev_minor, nlink, uid, gid, size, atime, atime_ns, mtime, mtime_ns, ctime,
         ctime_ns, blksize, blocks, rdev_major, rdev_minor) = r
        # The order of os.stat_result's fields: the ten of the tuple, then
        # the float times, the times in ns, st_blksize, st_blocks, st_rdev.
        return os.stat_result((
            mode, ino, os.makedev(dev_major, dev_minor), nlink, uid, gid, size, atime, mtime, ctime,
            atime + atime_ns * 1e-9, mtime + mtime_ns * 1e-9, ctime + ctime_ns * 1e-9,
            atime * 10**9 + atime_ns, mtime * 10**9 + mtime_ns, ctime * 10**9 + ctime_ns,
            blksize, blocks, os.makedev(rdev_major, rdev_minor),
        ))

    async def _amkdir(self, path: StrPath, mode: int) -> None:
        """``os.mkdir(path, mode)`` as a ``mkdirat`` on the file-system
        threads, off the loop's thread."""
        r = (await self._run(None, self._core.submit_mkdir, os.fsencode(path), mode))[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0), os.fspath(path))

    async def _asymlink(self, target: StrPath, link: StrPath) -> None:
        """``os.symlink(target, link)`` as a ``symlinkat`` on the
        file-system threads, off the loop's thread."""
        r = (await self._run(None, self._core.submit_symlink, os.fsencode(target), os.fsencode(link)))[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0), os.fspath(target), None, os.fspath(link))

    async def _afs(self, submit: Callable[..., int], file: FileLike, *args: Any) -> int:
        r = (await self._run(file, submit, _fd(file), *args))[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0), _name(file))
        n: int = r
        return n

    async def _asize(self, file: FileLike) -> int:
        """The file's size (``fstat``), off the loop's thread."""
        return await self._afs(self._core.submit_size, file)

    async def _aftruncate_kept(self, file: FileLike, length: int) -> None:
        """``ftruncate``, off the loop's thread, awaited to its end even if
        the task is cancelled meanwhile (the cancellation raised then): a
        truncation begun is made before the file's next call, never left
        running behind it, where it would cut what that call writes."""
        fut, _ = self._begin(file, self._core.submit_ftruncate, _fd(file), length)
        results, cancelled = await self._await_placed(fut)
        r = results[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0), _name(file))
        if cancelled is not None:
            raise cancelled

    def _close_here(self, fd: int) -> bool:
        """Closes ``fd``, a file's own descriptor not open for writing,
        on the loop's thread when the running loop is blockio's on
        io_uring (its ``_ring_open``) and none of the engine's operations
        still uses the number (the core forgets it then: ``disown``); False,
        with nothing done, otherwise (the caller closes it through the
        engine, :meth:`_aclose`). A read-only file has nothing to write
        back at its close, which the kernel makes at once: one ``close``
        call instead of a hop to the engine's threads and the wake-up of
        the loop that tells it the close was made. The error of a failed
        ``close`` (the number is closed all the same) is raised as
        :meth:`_aclose` raises it."""
        if not _on_ring_loop() or not self._core.disown(fd):
            return False
        try:
            os.close(fd)
        except OSError as e:
            raise OSError(e.errno, os.strerror(e.errno or 0)) from None
        return True

    async def _asize_read_only(self, file: FileLike) -> int:
        """The size of a file open only for reading, as :meth:`_asize`:
        on blockio's loop on io_uring an ``fstat`` on the loop's thread
        (where the open on its ring made one already), which no write of
        the file's own can be waiting behind; elsewhere through the
        engine's threads."""
        if not _on_ring_loop():
            return await self._asize(file)
        try:
            return os.fstat(_fd(file)).st_size
        except OSError as e:
            raise OSError(e.errno, os.strerror(e.errno or 0), _name(file)) from None

    async def _aclose(self, fd: int) -> None:
        """Closes ``fd``, which the caller gives up, off the loop's thread.
        The close happens even if the awaiting task is cancelled."""
        r = (await self._run(None, self._core.submit_close, fd))[0]
        if isinstance(r, OSError):
            raise OSError(r.errno, os.strerror(r.errno or 0))


def _on_ring_loop() -> bool:
    """Whether the running loop is blockio's on io_uring (it has
    ``_ring_open``), where a file's calls that cannot wait long are made
    on the loop's thread or its ring."""
    return getattr(asyncio.events._get_running_loop(), "_ring_open", None) is not None


def _no_loop() -> None:
    """What :attr:`Engine._loop` gives before a loop has used the engine."""
    return None


class _KeptCancel(Exception):
    """A write of :meth:`Engine._awrite_kept` completed (``count`` bytes)
    after its task was cancelled: the caller moves its position past the
    bytes, then raises ``cancelled``."""

    def __init__(self, count: int, cancelled: BaseException) -> None:
        super().__init__(count)
        self.count = count
        self.cancelled = cancelled


class _Stopped(Exception):
    """A write of :meth:`Engine._awrite_kept` through a file's write queue
    landed ``count`` bytes, then the core met ``errno`` writing the rest:
    the caller moves its position past the bytes, then fails with it (and
    raises ``cancelled``, if the task was cancelled meanwhile, after)."""

    def __init__(self, count: int, errno: int, cancelled: Optional[BaseException]) -> None:
        super().__init__(count)
        self.count = count
        self.errno = errno
        self.cancelled = cancelled


def _named(results: List[Any], paths: Sequence[StrPath]) -> List[Any]:
    """``results`` with each ``OSError`` made again as the built-in
    ``open`` raises it: ``[Errno 2] No such file or directory: 'name'``."""
    return [
        OSError(r.errno, os.strerror(r.errno or 0), os.fspath(p)) if isinstance(r, OSError) else r
        for r, p in zip(results, paths)
    ]


#: What a forked child's task awaiting an operation its parent started
#: gets (see :meth:`Engine._forget_parent`).
_PARENTS = ("this blockio operation was started before fork(): it belongs to the parent process, "
            "which completes it; the child never sees its result")


def _fail_in_child(fut: _Future) -> None:
    """Fails ``fut``, the waiter of an operation of the parent, in a child
    just forked, with ``RuntimeError(_PARENTS)``, by its loop's
    ``call_soon``: a loop that ran in the thread that forked (asyncio's
    ``get_running_loop`` refuses to name it in the child, whose process id
    differs) resolves it at its next step, in that thread; the child has
    no other thread, so no other runs the loop meanwhile, and a loop that
    ran in another (gone in the child) runs the callback only if the child
    runs it again."""
    err = RuntimeError(_PARENTS)
    if isinstance(fut, TrioFuture):
        try:
            fut.settle(None, err)
        except Exception:
            pass  # (that trio.run is over)
        return
    loop = fut.get_loop()
    if loop.is_closed():
        return
    try:
        loop.call_soon(_resolve, fut, None, err)
    except RuntimeError:
        pass  # (in debug mode: a loop of another thread, which the child does not have)


def _parents(fut: "asyncio.Future[Any]") -> bool:
    """Whether ``fut`` (done) was failed by :func:`_fail_in_child`."""
    if fut.cancelled():
        return False
    e = fut.exception()
    return type(e) is RuntimeError and e.args == (_PARENTS,)


def _deliver_results(fut: _Future, results: Any, on: Optional[asyncio.AbstractEventLoop]) -> None:
    """:func:`_deliver` of a finished batch as the core hands it over: its
    list of results, or the exception that kept the list from being made
    (a ``MemoryError``), which the awaiting task then raises."""
    if isinstance(results, BaseException):
        _deliver(fut, None, on, results)
    else:
        _deliver(fut, results, on)


def _deliver(fut: _Future, results: Optional[List[Any]], on: Optional[asyncio.AbstractEventLoop],
             error: Optional[BaseException] = None) -> None:
    """Resolves ``fut`` with ``results`` (or ``error``), from ``on``, the
    loop running in this thread (None: not known). A future of another
    thread's loop is resolved in that loop's thread; one whose loop is
    closed is dropped, as nothing can await it any more, and never stops
    the others being resolved."""
    if isinstance(fut, TrioFuture):
        fut.settle(results, error)
        return
    loop = fut.get_loop()
    if loop.is_closed():
        return
    if on is None:
        try:
            on = asyncio.get_running_loop()
        except RuntimeError:
            on = None
    if loop is on or (on is None and not loop.is_running()):
        _resolve(fut, results, error)
        return
    try:
        loop.call_soon_threadsafe(_resolve, fut, results, error)
    except RuntimeError:
        pass  # closed meanwhile


def _resolve(fut: "asyncio.Future[List[Any]]", results: Optional[List[Any]], error: Optional[BaseException]) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
        # Retrieved here: the task awaiting it takes the error when it
        # runs again; one that never runs again (its loop left pending at
        # interpreter exit, when the engines are closed) is asyncio's to
        # report ("Task was destroyed but it is pending"), with no second
        # report of this future's error.
        fut.exception()
    else:
        fut.set_result(results)  # type: ignore[arg-type]


_default: Optional[Engine] = None



def default_engine() -> Engine:
    """The engine that :func:`blockio.open` uses unless given one (made on
    first use)."""
    global _default
    # (not usable here: closed, or the parent's in a forked child, however
    # the child was made: its rings and threads are the parent's)
    if _default is None or not _default._usable_here:
        _default = Engine(inline_writes=_inline_writes_asked())
    return _default


def _inline_writes_asked() -> bool:
    """Whether ``BLOCKIO_INLINE_WRITES`` asks for writes made on the
    loop's thread (``1``; ``0`` or unset: not); a ``ValueError`` naming it
    for any other value."""
    value = os.environ.get("BLOCKIO_INLINE_WRITES", "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"BLOCKIO_INLINE_WRITES={value!r}: expected 1 or 0")


# Registered last so that it runs first at exit: from then on a thread whose
# blocking call returns parks instead of taking the GIL back, which CPython
# would answer, once finalizing, by ending the thread through the extension's
# frames (an abort). ``_close_all`` then cancels what is in flight.
atexit.register(_exiting)
