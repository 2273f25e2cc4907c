"""Runs aiofiles' own test suite against ``blockio.open`` and ``blockio.os``.

Copied next to the tests of the pinned aiofiles sdist at test time (see
``test_aiofiles_suite.py``); it replaces ``aiofiles.open`` and
``aiofiles.threadpool.open`` by ``blockio.open``, and ``aiofiles.os`` (with
``aiofiles.os.path``) by ``blockio.os``, before the test modules import
them, and counts the calls, so that a run that never reached blockio cannot pass.
The tests themselves are aiofiles' and are never copied into this
repository.
"""

import os
import sys

import aiofiles
import aiofiles.os
import aiofiles.ospath
import aiofiles.threadpool

import blockio
import blockio._oswrap
import blockio.os
import blockio.ospath

_calls = 0
_os_calls = 0


def _open(*args, **kwargs):
    global _calls
    _calls += 1
    return blockio.open(*args, **kwargs)


aiofiles.open = _open
aiofiles.threadpool.open = _open

# aiofiles.os and aiofiles.os.path are blockio.os and blockio.os.path; every
# call of theirs goes through blockio._oswrap._run, or through the engine's
# stat, mkdir and symlink, all counted here.
def _counting(call):
    async def counted(*args, **kwargs):
        global _os_calls
        _os_calls += 1
        return await call(*args, **kwargs)

    return counted


blockio._oswrap._run = _counting(blockio._oswrap._run)
for _name in ("_astat", "_amkdir", "_asymlink"):
    setattr(blockio.Engine, _name, _counting(getattr(blockio.Engine, _name)))
aiofiles.os = blockio.os
aiofiles.ospath = blockio.ospath
sys.modules["aiofiles.os"] = blockio.os
sys.modules["aiofiles.ospath"] = blockio.ospath


def pytest_unconfigure(config):
    with open(os.environ["BLOCKIO_OPEN_CALLS"], "w") as f:
        f.write(f"{_calls} {_os_calls}")
