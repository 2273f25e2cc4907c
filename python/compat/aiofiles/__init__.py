"""aiofiles' interface on blockio: ``aiofiles.open`` is :func:`blockio.open`,
``aiofiles.os`` is :mod:`blockio.os`, and the rest (``tempfile``, the
standard streams, ``base`` and ``threadpool``'s classes) is built on them.

Installed in place of aiofiles (the ``blockio-aiofiles`` distribution), it
lets a program or library written for aiofiles run on blockio without a
change. Nothing here runs file I/O of its own: files are blockio's."""

from . import tempfile
from .threadpool import open, stderr, stderr_bytes, stdin, stdin_bytes, stdout, stdout_bytes

__all__ = ["open", "tempfile", "stdin", "stdout", "stderr", "stdin_bytes", "stdout_bytes", "stderr_bytes"]
