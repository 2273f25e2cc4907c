"""``blockio.os.path``: aiofiles' ``aiofiles.os.path``, coroutines of
``os.path``'s calls that touch the file system, each run on a thread as
:mod:`blockio.os`'s are."""

from __future__ import annotations

import os.path as _path

from ._oswrap import wrap

__all__ = [
    "abspath", "exists", "isfile", "isdir", "islink", "ismount", "getsize", "getmtime", "getatime",
    "getctime", "samefile", "sameopenfile",
]

abspath = wrap(_path.abspath)
exists = wrap(_path.exists)
isfile = wrap(_path.isfile)
isdir = wrap(_path.isdir)
islink = wrap(_path.islink)
ismount = wrap(_path.ismount)
getsize = wrap(_path.getsize)
getmtime = wrap(_path.getmtime)
getatime = wrap(_path.getatime)
getctime = wrap(_path.getctime)
samefile = wrap(_path.samefile)
sameopenfile = wrap(_path.sameopenfile)
