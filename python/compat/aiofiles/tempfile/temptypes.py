"""``aiofiles.tempfile.temptypes``: the classes of the files and
directories :mod:`aiofiles.tempfile` makes, as aiofiles names them (for
type hints and ``isinstance``)."""

import shutil
from typing import Any

from blockio.os import wrap

from ..base import AsyncBase
# (names aiofiles' module has, which code written for it imports from it)
from functools import partial  # noqa: F401
from ..threadpool.utils import cond_delegate_to_executor, delegate_to_executor, proxy_property_directly  # noqa: F401

__all__ = ["AsyncSpooledTemporaryFile", "AsyncTemporaryDirectory"]

_rmtree = wrap(shutil.rmtree)


class AsyncSpooledTemporaryFile(AsyncBase):
    """A spooled temporary file: the blockio file's calls, with aiofiles'
    awaitable ``rollover`` and ``fileno``."""

    def __init__(self, file: Any) -> None:
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    async def rollover(self) -> None:
        """Moves the file's bytes to disk: they are there already, so it
        returns at once, as the built-in's does once rolled over."""

    async def fileno(self) -> int:
        """The descriptor's number."""
        return int(self._file.fileno())


class AsyncTemporaryDirectory:
    """A temporary directory: ``name`` is its path; ``await cleanup()``
    removes it and what it holds."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def cleanup(self) -> None:
        await _rmtree(self.name)
