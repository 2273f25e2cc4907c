"""CPython's generic event loop tests, run on blockio's event loop.

The mixins of the running Python's ``test.test_asyncio`` that any loop can
take through ``create_event_loop()`` (``test_events.EventLoopTestsMixin``
and ``SubprocessTestsMixin``, ``test_sock_lowlevel.BaseSockTestsMixin``,
``test_sendfile.SendfileTestsBase``), with ``blockio.new_event_loop()`` as
the loop. Prints every test that did not pass with its reason and the
totals; exits non-zero when fewer than ``--min-pass`` tests pass.

    python python/tests/cpython_loop/run.py [--min-pass N] [-k SUBSTRING]

CPython's ``test`` package ships with CPython (pyenv's builds have it; on
Debian it is ``libpython3.X-testsuite``).
"""

from __future__ import annotations

import argparse
import sys
import unittest

import blockio


def suite(pattern: str | None) -> unittest.TestSuite:
    from test.test_asyncio import test_events, test_sendfile, test_sock_lowlevel
    from test.test_asyncio import utils as test_utils

    class BlockioEventLoopTests(test_events.EventLoopTestsMixin, test_events.SubprocessTestsMixin, test_utils.TestCase):
        def create_event_loop(self):  # type: ignore[no-untyped-def]
            return blockio.new_event_loop()

    class BlockioSockTests(test_sock_lowlevel.BaseSockTestsMixin, test_utils.TestCase):
        def create_event_loop(self):  # type: ignore[no-untyped-def]
            return blockio.new_event_loop()

    class BlockioSendfileTests(test_sendfile.SendfileTestsBase, test_utils.TestCase):
        def create_event_loop(self):  # type: ignore[no-untyped-def]
            return blockio.new_event_loop()

    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = [f"*{pattern}*"]
    all_tests = unittest.TestSuite()
    for case in (BlockioEventLoopTests, BlockioSockTests, BlockioSendfileTests):
        all_tests.addTests(loader.loadTestsFromTestCase(case))
    return all_tests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-pass", type=int, default=0, help="fail when fewer tests pass")
    ap.add_argument("-k", dest="pattern", help="only tests whose name contains this")
    ap.add_argument("-v", action="store_true", help="unittest's verbose output")
    args = ap.parse_args()
    loop = blockio.new_event_loop()
    backend = loop.backend
    loop.close()
    tests = suite(args.pattern)
    result = unittest.TextTestRunner(verbosity=2 if args.v else 1, stream=sys.stderr).run(tests)
    failed = [(t, "failure") for t, _ in result.failures] + [(t, "error") for t, _ in result.errors]
    failed += [(t, "unexpected success") for t in result.unexpectedSuccesses]
    for t, why in failed:
        print(f"FAIL {t.id().rsplit('.', 2)[-2:]}: {why}")
    for t, reason in result.skipped:
        print(f"SKIP {t.id().rsplit('.', 2)[-2:]}: {reason}")
    for t, _ in result.expectedFailures:
        print(f"XFAIL {t.id().rsplit('.', 2)[-2:]}")
    not_passed = len(failed) + len(result.skipped) + len(result.expectedFailures)
    passed = result.testsRun - not_passed
    print(
        f"blockio loop ({backend}), Python {sys.version.split()[0]}: {passed} of {result.testsRun} passed, "
        f"{len(failed)} failed, {len(result.skipped)} skipped"
    )
    if passed < args.min_pass:
        print(f"fewer than {args.min_pass} passed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
