"""A pytest plugin (``-p aiofiles_in_use``) that stops a suite's run
before its first test unless the ``aiofiles`` its tests import is the one
of the distribution named in ``REAL_PROJECTS_AIOFILES``: ``aiofiles``
itself, or ``blockio-aiofiles`` (blockio's compatibility package).

Installing a package that depends on aiofiles puts aiofiles back over the
compatibility package, and a suite's own tree may hold a copy that
shadows both: the check is made in the very process that runs the tests,
with the ``sys.path`` they import from.
"""

import os
from importlib import metadata
from pathlib import Path

import pytest


def pytest_sessionstart(session):
    want = os.environ["REAL_PROJECTS_AIOFILES"]
    import aiofiles

    try:
        expected = Path(metadata.distribution(want).locate_file("aiofiles/__init__.py")).resolve()
    except metadata.PackageNotFoundError:
        raise pytest.UsageError(f"real-projects: {want} is not installed "
                                f"(the aiofiles imported is {aiofiles.__file__})") from None
    got = Path(aiofiles.__file__).resolve()
    if got != expected:
        raise pytest.UsageError(f"real-projects: aiofiles is {got}, not {want}'s {expected}")
