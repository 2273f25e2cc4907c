"""``aiofiles.threadpool.text``: the classes of aiofiles' text files, for
type hints and ``isinstance``; a text :func:`blockio.open` file
(:class:`blockio.AsyncTextFile`) is an ``AsyncTextIOWrapper``."""

import blockio

from ..base import AsyncBase, AsyncIndirectBase

__all__ = ["AsyncTextIOWrapper", "AsyncTextIndirectIOWrapper"]


class AsyncTextIOWrapper(AsyncBase):
    """A text file."""


AsyncTextIOWrapper.register(blockio.AsyncTextFile)


class AsyncTextIndirectIOWrapper(AsyncIndirectBase):
    """A standard stream's text side (``aiofiles.stdout``...)."""
