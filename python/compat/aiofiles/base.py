"""``aiofiles.base``: the names that code written for aiofiles imports from
it, for type hints and ``isinstance``.

``AsyncBase`` is a virtual base: every file of :func:`blockio.open` (an
:class:`blockio.AsyncFile` or :class:`blockio.AsyncTextFile`) is an
instance of it, as every aiofiles file is. ``AiofilesContextManager`` is
what ``aiofiles.open`` returns: what :func:`blockio.open` returns is one
too, and it also wraps any coroutine that makes a file, as aiofiles'
does (its exit awaits the file's ``close``)."""

import abc
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generator, Optional

import blockio
from blockio._open import Opener
from blockio.os import wrap

__all__ = ["AsyncBase", "AsyncIndirectBase", "AiofilesContextManager", "wrap"]


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
        if self._obj is not None:
            await self._obj.close()
        self._obj = None


AiofilesContextManager.register(Opener)
