"""The standard streams as aiofiles has them (``aiofiles.stdout``,
``aiofiles.stdin_bytes``...): objects made once, that look the stream up
(``sys.stdout``...) at each call, so that a program (or pytest's capture)
that replaces it is followed.

A stream on a descriptor is read and written with :func:`blockio.open`
over that descriptor (``closefd=False``): a write first flushes what
Python's own stream holds, so that the bytes land in the order they were
written, then is written and flushed on a file opened for that call, which
starts at the descriptor's offset (a redirection to a regular file is
continued, not overwritten). Reads share one file per stream and loop, so
that bytes read ahead are kept for the next read. A stream that has no
descriptor (a ``StringIO``, pytest's capture) is called as aiofiles calls
it, on a thread.
"""

import asyncio
from typing import Any, Callable, Optional, Tuple

import blockio
from blockio.os import wrap

from .binary import AsyncIndirectBufferedIOBase
from .text import AsyncTextIndirectIOWrapper

#: The calls that are coroutines, as on aiofiles' streams.
_CALLS = frozenset(["close", "flush", "isatty", "peek", "read", "read1", "readall", "readinto", "readline",
                    "readlines", "seek", "seekable", "tell", "truncate", "write", "writable", "writelines"])
#: What is handed on from the stream as it is, as aiofiles does.
_DIRECT = frozenset(["buffer", "closed", "encoding", "errors", "line_buffering", "newlines", "name", "mode",
                     "raw", "detach", "fileno", "readable"])


def _descriptor(stream: Any) -> Optional[int]:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if isinstance(fd, int) else None


@wrap
def _on_thread(call: Callable[..., Any], *args: Any) -> Any:
    return call(*args)


class _Stream:
    """One standard stream, looked up by ``stream()`` at each call."""

    _mode = "r"

    def __init__(self, name: str, stream: Callable[[], Any], mode: str) -> None:
        self._name = name
        self._stream = stream
        self._mode = mode
        #: The file reads go through, with the loop, stream and descriptor
        #: it was opened for.
        self._reader: Optional[Tuple[Tuple[Any, int, int], Any]] = None

    def __repr__(self) -> str:
        return f"<aiofiles (blockio) stream {self._name}>"

    def __getattr__(self, name: str) -> Any:
        if name in _DIRECT:
            return getattr(self._stream(), name)
        if name in _CALLS:
            async def call(*args: Any) -> Any:
                return await self._call(name, args)
            call.__name__ = name
            return call
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _open(self, stream: Any, fd: int, mode: str) -> Any:
        if "b" in mode:
            return blockio.open(fd, mode, buffering=0 if "w" in mode else -1, closefd=False)
        return blockio.open(fd, mode, encoding=stream.encoding, errors=stream.errors, closefd=False)

    async def _call(self, name: str, args: Tuple[Any, ...]) -> Any:
        stream = self._stream()
        fd = _descriptor(stream)
        if fd is None:
            return await _on_thread(getattr(stream, name), *args)
        if "w" in self._mode:
            # Python's stream first, so that what it holds lands first.
            await _on_thread(stream.flush)
            async with self._open(stream, fd, "wb" if "b" in self._mode else "w") as f:
                if "b" not in self._mode and not await f.seekable():
                    # (a file made for this call, over a pipe or terminal
                    # whose start is past: its codec's BOM, if it has one,
                    # would land before every write)
                    f._continue_stream()
                return await getattr(f, name)(*args)
        return await getattr(await self._read_file(stream, fd), name)(*args)

    async def _read_file(self, stream: Any, fd: int) -> Any:
        key = (asyncio.get_running_loop(), id(stream), fd)
        if self._reader is None or self._reader[0] != key:
            self._reader = (key, await self._open(stream, fd, self._mode))
        return self._reader[1]


class TextStream(_Stream, AsyncTextIndirectIOWrapper):
    """``aiofiles.stdin``, ``aiofiles.stdout``, ``aiofiles.stderr``."""


class BytesStream(_Stream, AsyncIndirectBufferedIOBase):
    """``aiofiles.stdin_bytes``, ``aiofiles.stdout_bytes``,
    ``aiofiles.stderr_bytes``."""
