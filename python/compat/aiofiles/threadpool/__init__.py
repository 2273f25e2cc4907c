"""``aiofiles.threadpool``: ``open`` (:func:`blockio.open`, which takes
aiofiles' ``loop=`` and ``executor=`` and ignores them), the standard
streams (see :mod:`aiofiles.threadpool._stdio`), and aiofiles' hooks for
tests that mock the file: ``sync_open`` and ``wrap``.

As in aiofiles' "Writing tests" pattern, a test may replace
``sync_open`` (``patch("aiofiles.threadpool.sync_open",
return_value=mock_file)``) and register the mock's type with ``wrap``
(``wrap.register(MagicMock)(lambda *a, **kw: AsyncBufferedIOBase(*a,
**kw))``). While ``sync_open`` is replaced, ``open`` calls it on the
loop's executor and returns ``wrap(file, loop=..., executor=...)``, as
aiofiles' ``open`` does; otherwise every file is blockio's."""

import asyncio
import builtins
import functools
import io
import sys
from typing import Any
# (names aiofiles' module has, which code written for it imports from it)
from functools import partial, singledispatch  # noqa: F401
from io import BufferedIOBase, BufferedRandom, BufferedReader, BufferedWriter, FileIO, TextIOBase  # noqa: F401

import blockio

from ..base import AiofilesContextManager
from ._stdio import BytesStream, TextStream
from .binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO, AsyncIndirectBufferedIOBase
from .text import AsyncTextIndirectIOWrapper, AsyncTextIOWrapper
from . import utils  # noqa: F401

__all__ = ("open", "stdin", "stdout", "stderr", "stdin_bytes", "stdout_bytes", "stderr_bytes")

#: What ``open`` opens with once replaced (by a test); while it is the
#: built-in ``open``, ``open`` is :func:`blockio.open`.
sync_open = builtins.open


def open(file: Any, mode: str = "r", buffering: int = -1, encoding: Any = None, errors: Any = None,
         newline: Any = None, closefd: bool = True, opener: Any = None, *, loop: Any = None,
         executor: Any = None) -> Any:
    """:func:`blockio.open`; while ``sync_open`` is replaced, aiofiles'
    way over it (see the module's doc)."""
    if sync_open is builtins.open:
        return blockio.open(file, mode, buffering, encoding, errors, newline, closefd, opener, loop=loop,
                            executor=executor)
    return AiofilesContextManager(_open_with_hook(file, mode, buffering, encoding, errors, newline, closefd,
                                                  opener, loop, executor))


async def _open_with_hook(file: Any, mode: str, buffering: int, encoding: Any, errors: Any, newline: Any,
                          closefd: bool, opener: Any, loop: Any, executor: Any) -> Any:
    if loop is None:
        loop = asyncio.get_running_loop()
    call = functools.partial(sync_open, file, mode=mode, buffering=buffering, encoding=encoding, errors=errors,
                             newline=newline, closefd=closefd, opener=opener)
    f = await loop.run_in_executor(executor, call)
    return wrap(f, loop=loop, executor=executor)


@functools.singledispatch
def wrap(file: Any, *, loop: Any = None, executor: Any = None) -> Any:
    """The asynchronous wrapper for a synchronous file, by its type (a
    ``singledispatch``: a test registers its mock's type); ``TypeError``
    for a type nobody registered."""
    raise TypeError(f"Unsupported io type: {file}.")


@wrap.register(io.TextIOBase)
def _text(file: Any, *, loop: Any = None, executor: Any = None) -> Any:
    return AsyncTextIOWrapper(file, loop=loop, executor=executor)


@wrap.register(io.BufferedWriter)
@wrap.register(io.BufferedIOBase)
def _buffered(file: Any, *, loop: Any = None, executor: Any = None) -> Any:
    return AsyncBufferedIOBase(file, loop=loop, executor=executor)


@wrap.register(io.BufferedReader)
@wrap.register(io.BufferedRandom)
def _reader(file: Any, *, loop: Any = None, executor: Any = None) -> Any:
    return AsyncBufferedReader(file, loop=loop, executor=executor)


@wrap.register(io.FileIO)
def _raw(file: Any, *, loop: Any = None, executor: Any = None) -> Any:
    return AsyncFileIO(file, loop=loop, executor=executor)


stdin = TextStream("sys.stdin", lambda: sys.stdin, "r")
stdout = TextStream("sys.stdout", lambda: sys.stdout, "w")
stderr = TextStream("sys.stderr", lambda: sys.stderr, "w")
stdin_bytes = BytesStream("sys.stdin.buffer", lambda: sys.stdin.buffer, "rb")
stdout_bytes = BytesStream("sys.stdout.buffer", lambda: sys.stdout.buffer, "wb")
stderr_bytes = BytesStream("sys.stderr.buffer", lambda: sys.stderr.buffer, "wb")
