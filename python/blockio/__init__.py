"""Batched io_uring disk I/O for Python, synchronous and asyncio.

A thin layer over the Rust core (``blockio._blockio``)::

    import blockio
    engine = blockio.Engine()
    with open("data.bin", "rb") as f:
        pages = engine.read_batch(f, [0, 8192, 65536], 4096)   # GIL released
        n = engine.readinto_batch([(f, bytearray(4096), 0)])    # no copy

    async def main():
        page = await engine.aread(f, 4096, 4096)
        pages = await engine.aread_batch(f, range(0, 1 << 20, 4096), 4096)
        async with blockio.open("data.bin", "rb") as af:
            async for line in af:
                ...

Naming: the synchronous batch calls are ``read_batch``, ``readinto_batch``,
``write_batch``, ``fsync``, ``fdatasync``; their asyncio forms carry an
``a`` prefix (``aread_batch``, ``aread``, ``areadinto``, ...), so that one
name never means both a blocking call and a coroutine.

Asynchronous operations are driven by the running event loop: the engine's
eventfd is watched with ``loop.add_reader`` and every wake-up drains all
finished batches. Operations on buffered descriptors go through the Rust
engine's driver thread, which submits everything queued in one kernel call;
operations on ``O_DIRECT`` descriptors are submitted by the loop's thread
to a ring that signals the same eventfd. One asyncio future per batch.

Cancellation: a batch whose task is cancelled is given up at once. Its
operations that have not reached the kernel are never submitted; those
already in flight keep their buffer referenced (and exported) and hold a
duplicate of the descriptor until the kernel has finished with them, so a
file closed right after a cancelled write can never have that write land in
a file opened later under the same descriptor number.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import os
import weakref
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

from ._blockio import Core as _Core
from ._blockio import bench_engine as _bench_engine

__all__ = ["Engine", "open", "AsyncFile", "default_engine"]

FileLike = Union[int, Any]


def _fd(file: FileLike) -> int:
    if isinstance(file, int):
        return file
    fileno = getattr(file, "fileno", None)
    if fileno is None:
        raise TypeError(f"expected an int file descriptor or a file object, got {type(file).__name__}")
    return fileno()


def _name(file: FileLike) -> Optional[str]:
    if isinstance(file, int):
        return None
    n = getattr(file, "name", None)
    return n if isinstance(n, (str, bytes)) else None


def _flat(buf: Any) -> Any:
    """A byte view of any C-contiguous buffer (numpy arrays of any dtype)."""
    if isinstance(buf, (bytearray, bytes)):
        return buf
    m = memoryview(buf)
    if m.format == "B" and m.ndim == 1:
        return buf
    return m.cast("B")


def _finish(results: List[Any], names: Sequence[Optional[str]], return_exceptions: bool) -> List[Any]:
    for i, r in enumerate(results):
        if isinstance(r, OSError):
            if r.filename is None and names[i] is not None:
                r.filename = names[i]
            if not return_exceptions:
                raise r
    return results


_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Operations still in flight at interpreter exit complete before the
    # buffers they write into can be freed.
    for e in list(_engines):
        e.close()


class Engine:
    """A blockio engine: batched reads, writes and syncs, sync and asyncio.

    ``queue_depth`` bounds the operations in flight; ``backend`` is
    ``"auto"`` (io_uring where the kernel allows it, else a thread pool),
    ``"io_uring"`` or ``"threads"``. ``BLOCKIO_BACKEND=threads`` in the
    environment forces the thread pool. An engine is not usable in a child
    after ``fork()``: create a new one there.
    """

    def __init__(self, queue_depth: int = 256, backend: Optional[str] = None) -> None:
        self._core = _Core(queue_depth, backend)
        self._futures: dict = {}
        self._next = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        _engines.add(self)

    @property
    def backend(self) -> str:
        """``"io_uring"`` or ``"threads"``."""
        return self._core.backend

    @property
    def fallback_reason(self) -> Optional[str]:
        """Why the thread pool is in use, if it is."""
        return self._core.fallback_reason

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._core.closed

    def close(self) -> None:
        """Waits for every asynchronous operation in flight, then releases
        the rings. Idempotent."""
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.remove_reader(self._core.eventfd())
            except Exception:
                pass
        self._loop = None
        self._core.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- synchronous batches ------------------------------------------------

    def read_batch(
        self, file: FileLike, offsets: Iterable[int], length: int, return_exceptions: bool = False
    ) -> List[Any]:
        """Reads ``length`` bytes at each offset, in one batch, the GIL
        released; a list of ``bytes`` (short at end of file), in order.
        A failed read raises ``OSError`` (errno and filename set), or is
        returned in its place with ``return_exceptions=True``. On an
        ``O_DIRECT`` descriptor the buffers are aligned for it."""
        offsets = list(offsets)
        res, failed = self._core.read_batch(_fd(file), offsets, length)
        if not failed:
            return res
        return _finish(res, [_name(file)] * len(offsets), return_exceptions)

    def readinto_batch(
        self, ops: Iterable[Tuple[FileLike, Any, int]], return_exceptions: bool = False
    ) -> List[Any]:
        """Reads into each ``(file, buffer, offset)`` without copying: any
        writable C-contiguous buffer (bytearray, memoryview, mmap, numpy
        array); a list of byte counts."""
        ops = list(ops)
        res, failed = self._core.readinto_batch([(_fd(f), _flat(b), off) for f, b, off in ops])
        if not failed:
            return res
        return _finish(res, [_name(f) for f, _, _ in ops], return_exceptions)

    def write_batch(
        self, ops: Iterable[Tuple[FileLike, Any, int]], return_exceptions: bool = False
    ) -> List[Any]:
        """Writes each ``(file, data, offset)``; a list of byte counts."""
        ops = list(ops)
        res, failed = self._core.write_batch([(_fd(f), _flat(b), off) for f, b, off in ops])
        if not failed:
            return res
        return _finish(res, [_name(f) for f, _, _ in ops], return_exceptions)

    def fsync(self, file: FileLike) -> None:
        """Flushes the file's data and metadata to stable storage."""
        self._core.sync(_fd(file), False)

    def fdatasync(self, file: FileLike) -> None:
        """Flushes the file's data (and the metadata needed to read it)."""
        self._core.sync(_fd(file), True)

    # -- asyncio ------------------------------------------------------------

    def _attach(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            efd = self._core.eventfd()
            if self._loop is not None and not self._loop.is_closed():
                try:
                    self._loop.remove_reader(efd)
                except Exception:
                    pass
            loop.add_reader(efd, self._on_ready)
            self._loop = loop
        return loop

    def _on_ready(self) -> None:
        for token, results in self._core.drain():
            fut, _keep = self._futures.pop(token, (None, None))
            # A cancelled future gets nothing; its buffers (held by the core)
            # and its file objects (held here) were kept until now.
            if fut is not None and not fut.done():
                fut.set_result(results)

    async def _run(self, keep: Any, start: Any, *args: Any) -> List[Any]:
        loop = self._attach()
        token = self._next
        self._next += 1
        fut = loop.create_future()
        # `keep`: the file objects whose descriptors the operations use, kept
        # open until the completions arrive, even if the task is cancelled.
        self._futures[token] = (fut, keep)
        try:
            start(token, *args)
        except BaseException:
            del self._futures[token]
            raise
        try:
            return await fut
        except asyncio.CancelledError:
            self._abandon(token)
            raise

    def _abandon(self, token: int) -> None:
        """The task awaiting ``token`` was cancelled: operations of it not
        yet handed to the kernel are never submitted, and those in flight
        hold their own duplicate of the descriptor until they complete, so
        closing the file now cannot send them to another file."""
        self._futures.pop(token, None)
        self._core.cancel(token)

    async def aread_batch(
        self, file: FileLike, offsets: Iterable[int], length: int, return_exceptions: bool = False
    ) -> List[Any]:
        """:meth:`read_batch` as a coroutine."""
        offsets = list(offsets)
        res = await self._run(file, self._core.submit_read, _fd(file), offsets, length)
        return _finish(res, [_name(file)] * len(offsets), return_exceptions)

    async def aread(self, file: FileLike, offset: int, length: int) -> bytes:
        """Reads up to ``length`` bytes at ``offset``."""
        # aread_batch of one, inlined: this is the per-read hot path of
        # asyncio code, where every Python frame shows in the IOPS.
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._attach()
        token = self._next
        self._next = token + 1
        fut = loop.create_future()
        self._futures[token] = (fut, file)
        try:
            self._core.submit_read(token, file if type(file) is int else _fd(file), [offset], length)
        except BaseException:
            del self._futures[token]
            raise
        try:
            r = (await fut)[0]
        except asyncio.CancelledError:
            self._abandon(token)
            raise
        if type(r) is bytes:
            return r
        return _finish([r], [_name(file)], False)[0]

    async def areadinto_batch(
        self, ops: Iterable[Tuple[FileLike, Any, int]], return_exceptions: bool = False
    ) -> List[Any]:
        """:meth:`readinto_batch` as a coroutine."""
        return await self._abuffers(ops, self._core.submit_readinto, return_exceptions)

    async def areadinto(self, file: FileLike, buf: Any, offset: int) -> int:
        """Reads into ``buf`` at ``offset``; the byte count."""
        return (await self.areadinto_batch([(file, buf, offset)]))[0]

    async def awrite_batch(
        self, ops: Iterable[Tuple[FileLike, Any, int]], return_exceptions: bool = False
    ) -> List[Any]:
        """:meth:`write_batch` as a coroutine."""
        return await self._abuffers(ops, self._core.submit_write, return_exceptions)

    async def _abuffers(
        self, ops: Iterable[Tuple[FileLike, Any, int]], submit: Any, return_exceptions: bool
    ) -> List[Any]:
        """One batch of ``(file, buffer, offset)`` operations through ``submit``."""
        ops = list(ops)
        res = await self._run(ops, submit, [(_fd(f), _flat(b), off) for f, b, off in ops])
        return _finish(res, [_name(f) for f, _, _ in ops], return_exceptions)

    async def awrite(self, file: FileLike, data: Any, offset: int) -> int:
        """Writes ``data`` at ``offset``; the byte count."""
        return (await self.awrite_batch([(file, data, offset)]))[0]

    async def afsync(self, file: FileLike) -> None:
        """:meth:`fsync` as a coroutine."""
        _finish(await self._run(file, self._core.submit_sync, _fd(file), False), [_name(file)], False)

    async def afdatasync(self, file: FileLike) -> None:
        """:meth:`fdatasync` as a coroutine."""
        _finish(await self._run(file, self._core.submit_sync, _fd(file), True), [_name(file)], False)

    def bench_engine(self, file: FileLike, file_size: int, block: int, in_flight: int, seconds: float) -> float:
        """The Rust engine's own IOPS on random reads of ``file`` (a
        baseline for benchmarks run from Python)."""
        return _bench_engine(_fd(file), file_size, block, in_flight, seconds)


_default: Optional[Engine] = None


def default_engine() -> Engine:
    """The engine that :func:`open` uses unless given one (made on first use)."""
    global _default
    if _default is None or _default.closed:
        _default = Engine()
    return _default


class AsyncFile:
    """An open file with aiofiles' interface: ``read``, ``readinto``,
    ``write``, ``seek``, ``tell``, ``readline`` and ``async for line in f``,
    every read and write a positional operation through the engine.
    Made by :func:`open`."""

    def __init__(self, raw: io.FileIO, mode: str, engine: Engine, encoding: Optional[str]) -> None:
        self._raw = raw
        self._engine = engine
        self._pos = raw.tell()
        self._text = "b" not in mode
        self._encoding = encoding or "utf-8"
        self._append = "a" in mode
        self._buf = b""  # read-ahead for readline, starting at self._pos
        self.mode = mode
        self.name = raw.name

    def fileno(self) -> int:
        return self._raw.fileno()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def tell(self) -> int:
        """The current position."""
        return self._pos

    async def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Moves the position (``os.SEEK_SET``, ``SEEK_CUR``, ``SEEK_END``)."""
        if whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = self._pos + offset
        elif whence == os.SEEK_END:
            pos = os.fstat(self.fileno()).st_size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument: negative seek position", self.name)
        self._pos = pos
        self._buf = b""
        return pos

    async def _read_bytes(self, size: int) -> bytes:
        if self._buf:
            if 0 <= size <= len(self._buf):
                out, self._buf = self._buf[:size], self._buf[size:]
                self._pos += len(out)
                return out
            head, self._buf = self._buf, b""
            self._pos += len(head)
            more = await self._read_bytes(size - len(head) if size >= 0 else -1)
            return head + more
        if size < 0:
            end = os.fstat(self.fileno()).st_size
            size = max(end - self._pos, 0)
            block = 1 << 20
            offsets = list(range(self._pos, self._pos + size, block))
            parts = await self._engine.aread_batch(self._raw, offsets, block) if offsets else []
            data = b"".join(parts)
            # The file may have grown: read on to its real end.
            while parts and len(parts[-1]) == block:
                parts = [await self._engine.aread(self._raw, self._pos + len(data), block)]
                data += parts[0]
        else:
            data = await self._engine.aread(self._raw, self._pos, size)
        self._pos += len(data)
        return data

    async def read(self, size: int = -1) -> Union[bytes, str]:
        """Reads up to ``size`` bytes (all of the rest when negative)."""
        data = await self._read_bytes(size)
        return data.decode(self._encoding) if self._text else data

    async def readinto(self, buf: Any) -> int:
        """Reads into ``buf`` without copying; the byte count."""
        if self._buf:
            m = memoryview(buf).cast("B")
            n = min(len(m), len(self._buf))
            m[:n] = self._buf[:n]
            self._buf = self._buf[n:]
            self._pos += n
            return n
        n = await self._engine.areadinto(self._raw, buf, self._pos)
        self._pos += n
        return n

    async def readline(self) -> Union[bytes, str]:
        """One line, with its newline (empty at end of file)."""
        while b"\n" not in self._buf:
            chunk = await self._engine.aread(self._raw, self._pos + len(self._buf), 64 << 10)
            if not chunk:
                break
            self._buf += chunk
        i = self._buf.find(b"\n")
        n = len(self._buf) if i < 0 else i + 1
        line, self._buf = self._buf[:n], self._buf[n:]
        self._pos += len(line)
        return line.decode(self._encoding) if self._text else line

    def __aiter__(self) -> "AsyncFile":
        return self

    async def __anext__(self) -> Union[bytes, str]:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    async def write(self, data: Union[bytes, str, Any]) -> int:
        """Writes all of ``data`` at the position (at the end in append
        mode); the byte count."""
        if isinstance(data, str):
            if not self._text:
                raise TypeError("a bytes-like object is required in binary mode, not 'str'")
            data = data.encode(self._encoding)
        view = memoryview(data).cast("B")
        if self._append:
            self._pos = os.fstat(self.fileno()).st_size
        self._buf = b""
        done = 0
        while done < len(view):
            n = await self._engine.awrite(self._raw, view[done:], self._pos + done)
            if n == 0:
                raise OSError(28, "wrote nothing", self.name)
            done += n
        self._pos += done
        return done

    async def flush(self) -> None:
        """Nothing to flush: writes go straight to the kernel."""

    async def fsync(self) -> None:
        """Makes the file's data durable."""
        await self._engine.afsync(self._raw)

    async def close(self) -> None:
        """Closes the file."""
        self._raw.close()

    async def __aenter__(self) -> "AsyncFile":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class _Opener:
    def __init__(self, args: Tuple[Any, ...]) -> None:
        self._args = args
        self._file: Optional[AsyncFile] = None

    def _open(self) -> AsyncFile:
        path, mode, engine, encoding = self._args
        m = mode.replace("t", "")
        raw = io.FileIO(path, m.replace("b", ""))
        return AsyncFile(raw, mode, engine or default_engine(), encoding)

    def __await__(self) -> Any:
        async def go() -> AsyncFile:
            return self._open()

        return go().__await__()

    async def __aenter__(self) -> AsyncFile:
        self._file = self._open()
        return self._file

    async def __aexit__(self, *exc: Any) -> None:
        if self._file is not None:
            await self._file.close()


def open(path: Union[str, bytes, os.PathLike], mode: str = "r", *, engine: Optional[Engine] = None,
         encoding: Optional[str] = None) -> _Opener:
    """Opens a file for asyncio, as ``aiofiles.open``: ``async with
    blockio.open(p, "rb") as f`` or ``f = await blockio.open(p)``. Modes as
    the built-in ``open`` (text modes decode with ``encoding``, UTF-8 by
    default)."""
    return _Opener((path, mode, engine, encoding))
