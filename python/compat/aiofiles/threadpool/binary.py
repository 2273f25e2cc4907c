"""``aiofiles.threadpool.binary``: the classes of aiofiles' binary files,
for type hints and ``isinstance``.

A binary :func:`blockio.open` file (:class:`blockio.AsyncFile`) is an
instance of the class aiofiles would have given for the same call:
``AsyncFileIO`` unbuffered (``buffering=0``), ``AsyncBufferedReader`` when
buffered and readable, ``AsyncBufferedIOBase`` when buffered (which
``AsyncBufferedReader`` is a subclass of, as in aiofiles).

Made around a synchronous file (``AsyncBufferedIOBase(file, loop=None,
executor=None)``, as :func:`aiofiles.threadpool.wrap` does), each is
aiofiles' wrapper: the file's calls run on the loop's executor, with the
same methods awaitable as aiofiles' (see :class:`aiofiles.base.OverFile`)."""

import abc
from typing import Any

import blockio

from ..base import AsyncBase, AsyncIndirectBase, OverFile
from ._delegate import delegate
# (names aiofiles' module has, which code written for it imports from it)
from .utils import delegate_to_executor, proxy_method_directly, proxy_property_directly  # noqa: F401

__all__ = ["AsyncBufferedIOBase", "AsyncBufferedReader", "AsyncFileIO", "AsyncIndirectBufferedIOBase",
           "AsyncIndirectBufferedReader", "AsyncIndirectFileIO"]


def _buffered(f: Any) -> bool:
    # (blockio.open keeps the buffer size it was given: 0 for buffering=0)
    return getattr(f, "_bufsize", 1) != 0


class _Kind(abc.ABCMeta):
    """An ``isinstance`` that also takes a blockio file for which
    ``_takes`` holds."""

    def __instancecheck__(cls, obj: Any) -> bool:
        if super().__instancecheck__(obj):
            return True
        return isinstance(obj, blockio.AsyncFile) and bool(cls._takes(obj))  # type: ignore[attr-defined]


_BUFFERED_CALLS = ("close flush isatty read read1 readinto readline readlines seek seekable tell truncate "
                   "writable write writelines")


@delegate(in_executor=_BUFFERED_CALLS, direct="detach fileno readable", attributes="closed raw name mode")
class AsyncBufferedIOBase(OverFile, AsyncBase, metaclass=_Kind):
    """A buffered binary file (aiofiles': mode ``wb``, ``ab``, ``xb``)."""

    @staticmethod
    def _takes(f: Any) -> bool:
        return _buffered(f)


@delegate(in_executor="peek")
class AsyncBufferedReader(AsyncBufferedIOBase):
    """A buffered binary file that reads (aiofiles': ``rb``, ``rb+``...)."""

    @staticmethod
    def _takes(f: Any) -> bool:
        return _buffered(f) and f.readable()


@delegate(in_executor="close flush isatty read readall readinto readline readlines seek seekable tell truncate "
                      "writable write writelines",
          direct="fileno readable", attributes="closed name mode")
class AsyncFileIO(OverFile, AsyncBase, metaclass=_Kind):
    """An unbuffered binary file (``buffering=0``)."""

    @staticmethod
    def _takes(f: Any) -> bool:
        return not _buffered(f)


class AsyncIndirectBufferedIOBase(AsyncIndirectBase):
    """A standard stream's binary side (``aiofiles.stdout_bytes``...)."""


class AsyncIndirectBufferedReader(AsyncIndirectBufferedIOBase):
    """A readable standard stream's binary side."""


class AsyncIndirectFileIO(AsyncIndirectBase):
    """An unbuffered standard stream."""
