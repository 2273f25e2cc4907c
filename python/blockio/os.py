"""``blockio.os``: aiofiles' ``aiofiles.os``, coroutines of the ``os``
module's file-system calls, so that a program can drop ``import
aiofiles.os`` for ``import blockio.os`` as it drops ``aiofiles.open`` for
:func:`blockio.open`.

Each call runs on a thread, never on the event loop's own: the loop's
default executor, or ``executor=`` when given (``loop=`` picks the loop),
exactly as aiofiles' calls do, so that they behave the same, errors
included. ``stat`` of a path is a ``statx`` through the default engine's
ring instead (see :func:`stat`). ``blockio.os.path`` is :mod:`blockio.ospath`.
"""

from __future__ import annotations

import asyncio
import os as _os
from typing import Any, Optional

from . import ospath as path
from ._engine import default_engine
from ._oswrap import wrap

__all__ = [
    "path", "stat", "statvfs", "rename", "renames", "replace", "remove", "unlink", "mkdir", "makedirs",
    "rmdir", "removedirs", "symlink", "readlink", "link", "listdir", "scandir", "access", "sendfile",
    "getcwd", "wrap",
]


_thread_stat = wrap(_os.stat)


async def stat(path: Any, *, dir_fd: Optional[int] = None, follow_symlinks: bool = True,
               loop: Optional[asyncio.AbstractEventLoop] = None, executor: Any = None) -> _os.stat_result:
    """``os.stat``. A path (str, bytes, path-like) is a ``statx`` through
    the default engine's ring where io_uring has it, on its file-system
    threads otherwise; a descriptor, ``dir_fd``, ``loop=`` or
    ``executor=`` runs ``os.stat`` on a thread, as aiofiles does."""
    if dir_fd is not None or loop is not None or executor is not None or isinstance(path, int):
        result: _os.stat_result = await _thread_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks,
                                                     loop=loop, executor=executor)
        return result
    return await default_engine()._astat(path, bool(follow_symlinks))
statvfs = wrap(_os.statvfs)
rename = wrap(_os.rename)
renames = wrap(_os.renames)
replace = wrap(_os.replace)
remove = wrap(_os.remove)
unlink = wrap(_os.unlink)
mkdir = wrap(_os.mkdir)
makedirs = wrap(_os.makedirs)
rmdir = wrap(_os.rmdir)
removedirs = wrap(_os.removedirs)
symlink = wrap(_os.symlink)
readlink = wrap(_os.readlink)
link = wrap(_os.link)
listdir = wrap(_os.listdir)
scandir = wrap(_os.scandir)
access = wrap(_os.access)
sendfile = wrap(_os.sendfile)
getcwd = wrap(_os.getcwd)
