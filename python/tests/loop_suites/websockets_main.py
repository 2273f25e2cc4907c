"""Runs websockets' tests of its asyncio implementation (``tests/asyncio``)
with ``loop_choice``'s loop as the policy's, but for the tests whose ids
follow the report's file name (or only those, after ``--only``), and writes as JSON
``{"outcomes": {test id: outcome}, "tracebacks": {test id: text},
"collection_errors": [text]}``: each test's outcome (passed, failed, error,
skipped), the traceback of each that failed or erred, and each module that
could not be imported (unittest's loader errors).

Usage (cwd holds websockets' ``tests`` package, outside its source tree, so
that the installed websockets is the one imported)::

    LOOP_SUITES_LOOP=blockio LOOP_SUITES_MADE=made.json python websockets_main.py REPORT.json [TEST_ID...]
    ... python websockets_main.py REPORT.json --only TEST_ID...   (those tests alone)
"""

import json
import sys
import unittest

import loop_choice


class Outcomes(unittest.TextTestResult):
    """unittest's result, keeping each test's outcome by id."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[test.id()] = "passed"

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes[test.id()] = "failed"

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes[test.id()] = "error"

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[test.id()] = "skipped"

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes[test.id()] = "passed"

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes[test.id()] = "failed"


def tests(suite):
    """Each test case of ``suite``, however deeply nested."""
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from tests(t)
        else:
            yield t


def main():
    loop_choice.install()
    # (``--only ID...``: those tests alone)
    only = sys.argv[2:3] == ["--only"]
    named = set(sys.argv[3:] if only else sys.argv[2:])
    loader = unittest.TestLoader()
    found = list(tests(loader.discover("tests/asyncio", top_level_dir=".")))
    missing = named - {t.id() for t in found}
    if missing:
        sys.exit(f"websockets_main: no such test: {sorted(missing)}")
    suite = unittest.TestSuite(t for t in found if (t.id() in named) == only)
    result = unittest.TextTestRunner(resultclass=Outcomes, verbosity=0).run(suite)
    tracebacks = {t.id(): text for t, text in result.failures + result.errors}
    with open(sys.argv[1], "w") as f:
        json.dump({"outcomes": result.outcomes, "tracebacks": tracebacks, "collection_errors": loader.errors}, f)


if __name__ == "__main__":
    main()
