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
# call of theirs goes through blockio._oswrap._run, counted here.
_run = blockio._oswrap._run


async def _counted_run(*args, **kwargs):
    global _os_calls
    _os_calls += 1
    return await _run(*args, **kwargs)


blockio._oswrap._run = _counted_run
aiofiles.os = blockio.os
aiofiles.ospath = blockio.ospath
sys.modules["aiofiles.os"] = blockio.os
sys.modules["aiofiles.ospath"] = blockio.ospath


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["BLOCKIO_OPEN_CALLS"], "w") as f:
        f.write(f"{_calls} {_os_calls}")
