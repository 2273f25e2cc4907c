"""``aiofiles.base``: the names that code written for aiofiles imports from
it, for type hints and ``isinstance``.

``AsyncBase`` is a virtual base: every file of :func:`blockio.open` (an
:class:`blockio.AsyncFile` or :class:`blockio.AsyncTextFile`) is an
instance of it, as every aiofiles file is. ``AiofilesContextManager`` is
what ``aiofiles.open`` returns: what :func:`blockio.open` returns is one
too, and it also wraps any coroutine that makes a file, as aiofiles'
does (its exit awaits the file's ``close``)."""

import abc
import asyncio
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generator, Optional
# (names aiofiles' module has, which code written for it imports from it)
from asyncio import get_running_loop  # noqa: F401
from functools import partial, wraps  # noqa: F401

import blockio
from blockio._open import Opener
from blockio.os import wrap

__all__ = ["AsyncBase", "AsyncIndirectBase", "AiofilesContextManager", "OverFile", "wrap"]


class AsyncBase(abc.ABC):
    """What every asynchronous file is an instance of: blockio's files,
    and the standard streams of :mod:`aiofiles.threadpool`."""

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        line = await self.readline()  # type: ignore[attr-defined]
        if line:
            return line
        raise StopAsyncIteration


class OverFile:
    """What the classes of :mod:`aiofiles.threadpool` are when made
    around a synchronous file (``AsyncBufferedIOBase(file, loop=...,
    executor=...)``, as :func:`aiofiles.threadpool.wrap` makes them): the
    file is ``_file``, and its calls run on ``executor`` (the default one
    when ``None``) of ``loop`` (the running loop when ``None``)."""

    def __init__(self, file: Any, loop: Any = None, executor: Any = None) -> None:
        self._file = file
        self._executor = executor
        self._ref_loop = loop

    @property
    def _loop(self) -> Any:
        return self._ref_loop or asyncio.get_running_loop()

    def __repr__(self) -> str:
        return f"{super().__repr__()} wrapping {self._file!r}"


AsyncBase.register(blockio.AsyncFile)
AsyncBase.register(blockio.AsyncTextFile)


class AsyncIndirectBase(AsyncBase):
    """A file that is looked up at each call (the standard streams, which a
    program may replace)."""


class AiofilesContextManager(Awaitable, AbstractAsyncContextManager):  # type: ignore[type-arg]
    """A file to come: await it for the file, or ``async with`` it (which
    closes the file). ``_obj`` is the file once made."""

    __slots__ = ("_coro", "_obj")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._obj: Optional[Any] = None

    def __await__(self) -> Generator[Any, None, Any]:
        if self._obj is None:
            self._obj = yield from self._coro.__await__()
        return self._obj

    async def __aenter__(self) -> Any:
        return await self

    async def __aexit__(self, *exc: Any) -> None:
        obj = self._obj
        if isinstance(obj, OverFile):
            # (a synchronous file: left as aiofiles leaves it, through its
            # own __exit__ on the executor)
            await asyncio.get_running_loop().run_in_executor(None, obj._file.__exit__, *exc)
        elif obj is not None:
            await obj.close()
        self._obj = None


AiofilesContextManager.register(Opener)
