"""``aiofiles.tempfile``: temporary files and directories, made on a thread
(``tempfile.mkstemp``, ``tempfile.mkdtemp``) and used as blockio files.

``TemporaryFile`` is a :func:`blockio.open` file over a descriptor whose
name is unlinked at once (its ``name`` is the descriptor, as the
built-in's); ``NamedTemporaryFile`` keeps the name (``name`` is the path)
and removes it on close, or on leaving ``async with`` with
``delete_on_close=False``, as ``tempfile.NamedTemporaryFile`` does;
``SpooledTemporaryFile`` is a ``TemporaryFile``: on disk from the start
(the page cache is its memory), ``max_size`` taken and ignored; its
``rollover()`` (moving the bytes to disk) is awaitable and has nothing
left to do, and its ``fileno()`` is awaitable, as aiofiles' are.
``loop`` and ``executor`` are taken and ignored, as by :func:`blockio.open`.

A package, as aiofiles' ``aiofiles.tempfile`` is (its classes in
``temptypes``): installed over aiofiles, its files replace aiofiles' own,
which would otherwise be imported in its place.
"""

import os
import tempfile as _tempfile
from typing import Any, Optional
# (names aiofiles' module has, which code written for it imports from it)
import asyncio  # noqa: F401
import sys  # noqa: F401
from functools import partial, singledispatch  # noqa: F401
from io import BufferedRandom, BufferedReader, BufferedWriter, FileIO, TextIOBase  # noqa: F401
from tempfile import NamedTemporaryFile as syncNamedTemporaryFile  # noqa: F401
from tempfile import SpooledTemporaryFile as syncSpooledTemporaryFile  # noqa: F401
from tempfile import TemporaryDirectory as syncTemporaryDirectory  # noqa: F401
from tempfile import TemporaryFile as syncTemporaryFile  # noqa: F401
from tempfile import _TemporaryFileWrapper as syncTemporaryFileWrapper  # noqa: F401

import blockio
import blockio.os
from blockio.os import wrap

from ..base import AiofilesContextManager, AsyncBase
from ..threadpool.binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO  # noqa: F401
from ..threadpool.text import AsyncTextIOWrapper  # noqa: F401
from .temptypes import AsyncSpooledTemporaryFile, AsyncTemporaryDirectory

__all__ = ["NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile", "TemporaryDirectory"]

_mkstemp = wrap(_tempfile.mkstemp)
_mkdtemp = wrap(_tempfile.mkdtemp)


async def _open_temporary(mode: str, buffering: int, encoding: Optional[str], newline: Optional[str],
                          suffix: Optional[str], prefix: Optional[str], dir: Any, named: bool) -> Any:
    fd, path = await _mkstemp(suffix, prefix, dir)
    try:
        if not named:
            await blockio.os.unlink(path)
        f = await blockio.open(fd, mode, buffering, encoding, newline=newline)
    except BaseException:
        os.close(fd)
        if named:
            os.unlink(path)
        raise
    return f, path


class _NamedFile(AsyncBase):
    """A named temporary file: the blockio file's calls, with ``name`` the
    path, and the path removed on close (``delete`` and
    ``delete_on_close``) or when its ``async with`` ends (``delete``)."""

    def __init__(self, file: Any, path: str, delete: bool, delete_on_close: bool) -> None:
        self._file = file
        self.name = path
        self.delete = delete
        self._delete_on_close = delete_on_close

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    async def _remove(self) -> None:
        try:
            await blockio.os.unlink(self.name)
        except FileNotFoundError:
            pass

    async def close(self) -> None:
        await self._file.close()
        if self.delete and self._delete_on_close:
            await self._remove()

    async def _exit(self) -> None:
        await self._file.close()
        if self.delete:
            await self._remove()


class _TemporaryContextManager(AiofilesContextManager):
    """What leaving ``async with`` a named temporary file does: close it,
    and remove it if it is to be deleted."""

    __slots__ = ()

    async def __aexit__(self, *exc: Any) -> None:
        if self._obj is not None:
            await self._obj._exit()
        self._obj = None


async def _named(mode: str, buffering: int, encoding: Optional[str], newline: Optional[str],
                 suffix: Optional[str], prefix: Optional[str], dir: Any, delete: bool,
                 delete_on_close: bool) -> _NamedFile:
    f, path = await _open_temporary(mode, buffering, encoding, newline, suffix, prefix, dir, True)
    return _NamedFile(f, path, delete, delete_on_close)


def NamedTemporaryFile(mode: str = "w+b", buffering: int = -1, encoding: Optional[str] = None,
                       newline: Optional[str] = None, suffix: Optional[str] = None, prefix: Optional[str] = None,
                       dir: Any = None, delete: bool = True, delete_on_close: bool = True, loop: Any = None,
                       executor: Any = None) -> AiofilesContextManager:
    """A temporary file with a name (see the module's doc)."""
    return _TemporaryContextManager(_named(mode, buffering, encoding, newline, suffix, prefix, dir, delete,
                                           delete_on_close))


async def _unnamed(mode: str, buffering: int, encoding: Optional[str], newline: Optional[str],
                   suffix: Optional[str], prefix: Optional[str], dir: Any) -> Any:
    f, _ = await _open_temporary(mode, buffering, encoding, newline, suffix, prefix, dir, False)
    return f


def TemporaryFile(mode: str = "w+b", buffering: int = -1, encoding: Optional[str] = None,
                  newline: Optional[str] = None, suffix: Optional[str] = None, prefix: Optional[str] = None,
                  dir: Any = None, loop: Any = None, executor: Any = None) -> AiofilesContextManager:
    """A temporary file without a name (see the module's doc)."""
    return AiofilesContextManager(_unnamed(mode, buffering, encoding, newline, suffix, prefix, dir))


async def _spooled(mode: str, buffering: int, encoding: Optional[str], newline: Optional[str],
                   suffix: Optional[str], prefix: Optional[str], dir: Any) -> AsyncSpooledTemporaryFile:
    return AsyncSpooledTemporaryFile(await _unnamed(mode, buffering, encoding, newline, suffix, prefix, dir))


def SpooledTemporaryFile(max_size: int = 0, mode: str = "w+b", buffering: int = -1,
                         encoding: Optional[str] = None, newline: Optional[str] = None,
                         suffix: Optional[str] = None, prefix: Optional[str] = None, dir: Any = None,
                         loop: Any = None, executor: Any = None) -> AiofilesContextManager:
    """A ``TemporaryFile`` with ``rollover`` (see the module's doc)."""
    return AiofilesContextManager(_spooled(mode, buffering, encoding, newline, suffix, prefix, dir))


class AiofilesContextManagerTempDir(AiofilesContextManager):
    """What :func:`TemporaryDirectory` returns (aiofiles' name for it):
    ``async with`` gives the directory's path and removes it at the end;
    awaited, it gives the :class:`AsyncTemporaryDirectory`."""

    __slots__ = ()

    async def __aenter__(self) -> Any:
        return (await self).name

    async def __aexit__(self, *exc: Any) -> None:
        if self._obj is not None:
            await self._obj.cleanup()
        self._obj = None


async def _directory(suffix: Optional[str], prefix: Optional[str], dir: Any) -> AsyncTemporaryDirectory:
    return AsyncTemporaryDirectory(await _mkdtemp(suffix, prefix, dir))


def TemporaryDirectory(suffix: Optional[str] = None, prefix: Optional[str] = None, dir: Any = None,
                       loop: Any = None, executor: Any = None) -> AiofilesContextManager:
    """A temporary directory (see :class:`AsyncTemporaryDirectory`)."""
    return AiofilesContextManagerTempDir(_directory(suffix, prefix, dir))
