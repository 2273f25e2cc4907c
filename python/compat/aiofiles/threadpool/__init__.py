"""``aiofiles.threadpool``: ``open`` (:func:`blockio.open`, which takes
aiofiles' ``loop=`` and ``executor=`` and ignores them) and the standard
streams (see :mod:`aiofiles.threadpool._stdio`)."""

import sys

from blockio import open

from ._stdio import BytesStream, TextStream
from .binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO  # noqa: F401
from .text import AsyncTextIOWrapper  # noqa: F401

__all__ = ("open", "stdin", "stdout", "stderr", "stdin_bytes", "stdout_bytes", "stderr_bytes")

stdin = TextStream("sys.stdin", lambda: sys.stdin, "r")
stdout = TextStream("sys.stdout", lambda: sys.stdout, "w")
stderr = TextStream("sys.stderr", lambda: sys.stderr, "w")
stdin_bytes = BytesStream("sys.stdin.buffer", lambda: sys.stdin.buffer, "rb")
stdout_bytes = BytesStream("sys.stdout.buffer", lambda: sys.stdout.buffer, "wb")
stderr_bytes = BytesStream("sys.stderr.buffer", lambda: sys.stderr.buffer, "wb")
