"""``blockio.os``: aiofiles' ``aiofiles.os``, coroutines of the ``os``
module's file-system calls, so that a program can drop ``import
aiofiles.os`` for ``import blockio.os`` as it drops ``aiofiles.open`` for
:func:`blockio.open`.

Each call runs on a thread, never on the event loop's own: the loop's
default executor, or ``executor=`` when given (``loop=`` picks the loop),
exactly as aiofiles' calls do, so that they behave the same, errors
included; except the calls the engine has an operation kind for, which go
through the default engine (the system call, on its file-system threads)
when called with a path and without ``dir_fd``, ``loop=`` or
``executor=``: :func:`stat` (``statx``),
:func:`mkdir` (``mkdirat``) and :func:`symlink` (``symlinkat``). Their
results and errors are ``os``'s. ``blockio.os.path`` is
:mod:`blockio.ospath`.

Under trio (or anyio's trio backend) the thread calls run on trio's
threads; ``loop=`` and ``executor=`` are asyncio's and need an asyncio
loop.
"""

from __future__ import annotations

import asyncio
import errno
import operator as _operator
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


def _is_path(value: Any) -> bool:
    """Whether ``value`` is a path the engine takes (str, bytes or
    path-like). Anything else goes to the ``os`` call on a thread, whose
    ``TypeError`` (``stat: path should be string, bytes, os.PathLike or
    integer, not NoneType``) is the one a program ported from ``os`` or
    aiofiles expects; so does a path holding a NUL byte, for its
    ``ValueError`` (``stat: embedded null character in path``)."""
    if not isinstance(value, (str, bytes, _os.PathLike)):
        return False
    try:
        name = _os.fspath(value)
    except TypeError:
        return False
    return ("\0" if isinstance(name, str) else b"\0") not in name


async def stat(path: Any, *, dir_fd: Optional[int] = None, follow_symlinks: bool = True,
               loop: Optional[asyncio.AbstractEventLoop] = None, executor: Any = None) -> _os.stat_result:
    """``os.stat``. A path (str, bytes, path-like) is a ``statx`` on the
    default engine's file-system threads; a descriptor, ``dir_fd``, ``loop=`` or
    ``executor=`` runs ``os.stat`` on a thread, as aiofiles does, and so
    does anything else, for ``os.stat``'s own ``TypeError``."""
    if dir_fd is not None or loop is not None or executor is not None or not _is_path(path):
        result: _os.stat_result = await _thread_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks,
                                                     loop=loop, executor=executor)
        return result
    if not _os.fspath(path):
        # An empty path names no file (the ring's statx of "" would be of
        # the current directory): os.stat's error.
        raise FileNotFoundError(errno.ENOENT, _os.strerror(errno.ENOENT), path)
    return await default_engine()._astat(path, bool(follow_symlinks))


def _c_mode(mode: Any) -> int:
    """``mode`` as ``os.mkdir`` takes it, any C ``int`` (the kernel keeps its
    permission bits; -1 is all of them), as the unsigned 32 bits the
    ``mkdirat`` gets; ``os.mkdir``'s errors otherwise."""
    n: int = _operator.index(mode)
    if not -(2**31) <= n < 2**31:
        raise OverflowError("Python int too large to convert to C int")
    return n & 0xFFFFFFFF


_thread_mkdir = wrap(_os.mkdir)
_thread_symlink = wrap(_os.symlink)

async def mkdir(path: Any, mode: int = 0o777, *, dir_fd: Optional[int] = None,
                loop: Optional[asyncio.AbstractEventLoop] = None, executor: Any = None) -> None:
    """``os.mkdir``: a ``mkdirat`` on the default engine's file-system
    threads; with
    ``dir_fd``, ``loop=`` or ``executor=``, ``os.mkdir`` on a thread."""
    if dir_fd is not None or loop is not None or executor is not None or not _is_path(path):
        await _thread_mkdir(path, mode, dir_fd=dir_fd, loop=loop, executor=executor)
        return
    await default_engine()._amkdir(path, _c_mode(mode))


async def symlink(src: Any, dst: Any, target_is_directory: bool = False, *, dir_fd: Optional[int] = None,
                  loop: Optional[asyncio.AbstractEventLoop] = None, executor: Any = None) -> None:
    """``os.symlink``: ``dst`` will point at ``src``; a ``symlinkat`` on
    the default engine's file-system threads (``target_is_directory`` matters on
    Windows only); with ``dir_fd``, ``loop=`` or ``executor=``,
    ``os.symlink`` on a thread."""
    if dir_fd is not None or loop is not None or executor is not None or not (_is_path(src) and _is_path(dst)):
        await _thread_symlink(src, dst, target_is_directory, dir_fd=dir_fd, loop=loop, executor=executor)
        return
    await default_engine()._asymlink(src, dst)


statvfs = wrap(_os.statvfs)
rename = wrap(_os.rename)
renames = wrap(_os.renames)
replace = wrap(_os.replace)
remove = wrap(_os.remove)
unlink = wrap(_os.unlink)
makedirs = wrap(_os.makedirs)
rmdir = wrap(_os.rmdir)
removedirs = wrap(_os.removedirs)
readlink = wrap(_os.readlink)
link = wrap(_os.link)
listdir = wrap(_os.listdir)
scandir = wrap(_os.scandir)
access = wrap(_os.access)
sendfile = wrap(_os.sendfile)
getcwd = wrap(_os.getcwd)
