"""The event loop a suite's tests get, chosen by ``LOOP_SUITES_LOOP``.

``install()`` sets an event loop policy whose new loops are blockio's
(``blockio``: ``blockio.new_event_loop()``, whose backend
``BLOCKIO_BACKEND`` chooses) or asyncio's own (``asyncio``), and counts
them by class and backend; at exit the counts are written as JSON to the
file ``LOOP_SUITES_MADE`` names, so that the runner can check that the
tests ran on the loop it asked for. Loaded by pytest as a plugin
(``-p loop_choice``: anyio's tests make their loops with
``asyncio.Runner``, which asks the policy when no loop factory is given)
and imported by ``websockets_main.py``.
"""

import asyncio
import atexit
import collections
import json
import os

import blockio

#: "class backend" of each loop made -> how many.
MADE: collections.Counter = collections.Counter()


class CountingPolicy(asyncio.DefaultEventLoopPolicy):
    """asyncio's policy with the chosen loop, each counted in ``MADE``."""

    def __init__(self, which):
        super().__init__()
        self.which = which

    def _loop_factory(self):
        loop = blockio.new_event_loop() if self.which == "blockio" else asyncio.SelectorEventLoop()
        MADE[f"{type(loop).__name__} {getattr(loop, 'backend', '-')}"] += 1
        return loop


def write_counts(path):
    """Writes ``MADE`` to ``path`` as JSON."""
    with open(path, "w") as f:
        json.dump(dict(MADE), f)


def install():
    """Sets the counting policy with ``LOOP_SUITES_LOOP``'s loop."""
    which = os.environ["LOOP_SUITES_LOOP"]
    if which not in ("asyncio", "blockio"):
        raise SystemExit(f"LOOP_SUITES_LOOP={which!r}: expected asyncio or blockio")
    asyncio.set_event_loop_policy(CountingPolicy(which))
    atexit.register(write_counts, os.environ["LOOP_SUITES_MADE"])


def pytest_configure(config):
    """pytest's hook: the policy is set before any test runs."""
    install()
