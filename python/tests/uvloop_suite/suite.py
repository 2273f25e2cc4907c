"""Runs one module of uvloop's test suite in the test venv, with a class on
blockio's loop generated beside each of its asyncio classes.

uvloop's tests pair ``Test_UV_X(_TestX, tb.UVTestCase)`` with
``Test_AIO_X(_TestX, tb.AIOTestCase)``. For each class derived from
``tb.AIOTestCase`` this makes ``Test_BLOCKIO_X(_TestX, BlockioTestCase)``:
the same mixins and the same class body (one asyncio class has a test
method of its own), only the loop changed: ``BlockioTestCase`` makes
blockio's loop and policy, and ``NEW_LOOP``, the expression with which
the signal tests' child programs make their loop, calls
``blockio.new_event_loop()``. The test bodies are not touched.

``BlockioTestCase`` says ``implementation = 'asyncio'``: where uvloop's
tests branch on the implementation, blockio's loop takes asyncio's branch,
since its SSL transports, streams and DNS are asyncio's own Python code
(``python/README.md``, "Using blockio as your event loop").

Usage (cwd holds uvloop's ``tests`` package, outside uvloop's source tree)::

    python suite.py MODULE {blockio,asyncio} REPORT.json

writes ``{test id: [outcome, detail]}`` to REPORT.json, outcome one of
passed, failed, error, skipped.
"""

import importlib
import json
import sys
import time
import traceback
import unittest

import blockio
from uvloop import _testbase as tb


class BlockioTestCase(tb.BaseTestCase):
    """uvloop's test case base with blockio's loop and policy."""

    implementation = "asyncio"

    def new_loop(self):
        return blockio.new_event_loop()

    def new_policy(self):
        return blockio.EventLoopPolicy()


def generated(module):
    """The blockio classes of ``module``: one per ``tb.AIOTestCase`` class."""
    made = []
    for name, cls in list(vars(module).items()):
        if not (isinstance(cls, type) and issubclass(cls, tb.AIOTestCase)
                and cls is not tb.AIOTestCase and cls.__module__ == module.__name__):
            continue
        mixins = tuple(b for b in cls.__bases__ if not issubclass(b, tb.BaseTestCase))
        if len(mixins) + 1 != len(cls.__bases__):
            raise SystemExit(f"uvloop-suite: {module.__name__}.{name} has an unexpected base: {cls.__bases__}")
        new_name = name.replace("AIO", "BLOCKIO")
        # The asyncio class's own body (a test method, or the loop factory
        # its child programs call) comes along unchanged, but for the
        # factory, which becomes blockio's.
        body = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__", "__doc__")}
        if "NEW_LOOP" in body:
            body["NEW_LOOP"] = "__import__('blockio').new_event_loop()"
        body["__module__"] = module.__name__
        body["__qualname__"] = new_name
        new = type(cls)(new_name, mixins + (BlockioTestCase,), body)
        setattr(module, new_name, new)
        made.append(new)
    return made


def asyncio_classes(module):
    """uvloop's own asyncio classes of ``module`` (the reference run)."""
    return [cls for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, tb.AIOTestCase)
            and cls is not tb.AIOTestCase and cls.__module__ == module.__name__]


class Recorder(unittest.TextTestResult):
    """Keeps every test's outcome and how long it took."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}
        self._started = 0.0

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        self.outcomes[test.id()] = [outcome, detail, round(time.monotonic() - self._started, 2)]

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", "".join(traceback.format_exception(*err))[-3000:])

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", "".join(traceback.format_exception(*err))[-3000:])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def main():
    name, which, report = sys.argv[1:4]
    module = importlib.import_module(f"tests.{name}")
    classes = generated(module) if which == "blockio" else asyncio_classes(module)
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in classes)
    result = unittest.TextTestRunner(verbosity=0, resultclass=Recorder, stream=sys.stderr).run(suite)
    with open(report, "w") as f:
        json.dump(result.outcomes, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
