"""``aiofiles.threadpool.text``: the classes of aiofiles' text files, for
type hints and ``isinstance``; a text :func:`blockio.open` file
(:class:`blockio.AsyncTextFile`) is an ``AsyncTextIOWrapper``. Made
around a synchronous file, as :func:`aiofiles.threadpool.wrap` does, it is
aiofiles' wrapper (see :class:`aiofiles.base.OverFile`)."""

import blockio

from ..base import AsyncBase, AsyncIndirectBase, OverFile
from ._delegate import delegate
# (names aiofiles' module has, which code written for it imports from it)
from .utils import delegate_to_executor, proxy_method_directly, proxy_property_directly  # noqa: F401

__all__ = ["AsyncTextIOWrapper", "AsyncTextIndirectIOWrapper"]


@delegate(in_executor="close flush isatty read readable readline readlines seek seekable tell truncate write "
                      "writable writelines",
          direct="detach fileno", attributes="buffer closed encoding errors line_buffering newlines name mode")
class AsyncTextIOWrapper(OverFile, AsyncBase):
    """A text file."""


AsyncTextIOWrapper.register(blockio.AsyncTextFile)


class AsyncTextIndirectIOWrapper(AsyncIndirectBase):
    """A standard stream's text side (``aiofiles.stdout``...)."""
