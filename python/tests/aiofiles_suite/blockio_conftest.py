"""Runs aiofiles' own test suite against ``blockio.open``.

Copied next to the tests of the pinned aiofiles sdist at test time (see
``test_aiofiles_suite.py``); it replaces ``aiofiles.open`` and
``aiofiles.threadpool.open`` before the test modules import them, and
counts the calls, so that a run that never reached blockio cannot pass.
The tests themselves are aiofiles' and are never copied into this
repository.
"""

import os

import aiofiles
import aiofiles.threadpool

import blockio

_calls = 0


def _open(*args, **kwargs):
    global _calls
    _calls += 1
    return blockio.open(*args, **kwargs)


aiofiles.open = _open
aiofiles.threadpool.open = _open


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["BLOCKIO_OPEN_CALLS"], "w") as f:
        f.write(str(_calls))
