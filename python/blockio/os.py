"""``blockio.os``: aiofiles' ``aiofiles.os``, coroutines of the ``os``
module's file-system calls, so that a program can drop ``import
aiofiles.os`` for ``import blockio.os`` as it drops ``aiofiles.open`` for
:func:`blockio.open`.

Each call runs on a thread, never on the event loop's own: the loop's
default executor, or ``executor=`` when given (``loop=`` picks the loop),
exactly as aiofiles' calls do, so that they behave the same, errors
included. ``blockio.os.path`` is :mod:`blockio.ospath`.
"""

from __future__ import annotations

import os as _os

from . import ospath as path
from ._oswrap import wrap

__all__ = [
    "path", "stat", "statvfs", "rename", "renames", "replace", "remove", "unlink", "mkdir", "makedirs",
    "rmdir", "removedirs", "symlink", "readlink", "link", "listdir", "scandir", "access", "sendfile",
    "getcwd", "wrap",
]


stat = wrap(_os.stat)
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
