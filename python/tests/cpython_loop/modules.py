"""Whole ``test.test_asyncio`` modules with blockio's loop as asyncio's default.

Each module of the running Python's ``test.test_asyncio`` listed in
:data:`MODULES` (those it has) runs in a child process in which blockio's
:class:`~blockio.EventLoopPolicy` is installed and is also what
``asyncio.set_event_loop_policy(None)`` falls back to, so that every
``asyncio.new_event_loop()``, ``asyncio.run()`` and ``asyncio.Runner()`` of
the tests makes a blockio loop. (Test classes that build a loop of their own
class, such as ``asyncio.SelectorEventLoop()``, still run on it; the
classes for Windows' ``asyncio.ProactorEventLoop``, skipped elsewhere, run
on blockio's loop.)

Every test has ``--timeout`` seconds: a test that takes longer is counted as
a failure, its child is killed and a new child goes on with the next test,
so a hang fails the run instead of blocking it. Prints every test that did
not pass with its reason, the totals per module and overall; exits non-zero
when a test fails that is not in :data:`KNOWN_FAILURES`, when a known
failure passes (the list is then out of date), or when fewer than
``--min-pass`` tests that made a blockio loop pass (some modules test
asyncio's machinery on a mock loop, ``test_runners`` and ``test_pep492``
for instance, and make none; they are run and counted all the same).

    python python/tests/cpython_loop/modules.py [--min-pass N] [--timeout S] [-k SUBSTRING] [MODULE...]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
from typing import Any

#: The modules run, when the running Python's test package has them.
MODULES = (
    "test_streams",
    "test_server",
    "test_ssl",
    "test_sslproto",
    "test_taskgroups",
    "test_timeouts",
    "test_waitfor",
    "test_runners",
    "test_locks",
    "test_queues",
    "test_pep492",
    "test_futures2",
    "test_threads",
    "test_context",
    "test_buffered_proto",
)

#: Tests (``module.Class.test``) expected to fail on blockio's loop, with why.
KNOWN_FAILURES: dict[str, str] = {}


# -- the child: one module's tests, from an index on ---------------------------


def _tests(module: str, pattern: str | None) -> list[unittest.TestCase]:
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = [f"*{pattern}*"]
    found: list[unittest.TestCase] = []

    def flatten(s: Any) -> None:
        for t in s:
            if isinstance(t, unittest.TestSuite):
                flatten(t)
            else:
                found.append(t)

    flatten(loader.loadTestsFromName(f"test.test_asyncio.{module}"))
    return found


def _force_blockio_loop() -> list[int]:
    """Installs blockio's policy, also as the one a reset returns to;
    returns a one-item list counting the blockio loops made."""
    import asyncio
    import warnings

    import blockio
    from blockio import _loop

    made = [0]

    class CountingPolicy(_loop.EventLoopPolicy):
        def _loop_factory(self) -> Any:
            made[0] += 1
            return blockio.new_event_loop()

    def proactor_loop() -> Any:
        made[0] += 1
        return blockio.new_event_loop()

    # asyncio.set_event_loop_policy(None), which the test modules call in
    # their tearDown, makes the next policy asyncio.DefaultEventLoopPolicy().
    asyncio.DefaultEventLoopPolicy = CountingPolicy  # type: ignore[misc]
    # The test classes for Windows' ProactorEventLoop (skipped where asyncio
    # has none) run on blockio's loop, a proactor loop too.
    asyncio.ProactorEventLoop = proactor_loop  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(None)
    return made


class _Reporter(unittest.TestResult):
    """Writes one JSON line per test start and outcome to ``out``."""

    def __init__(self, out: Any, first: int, made: list[int], timeout: float) -> None:
        super().__init__()
        self._timeout = timeout
        self._out = out
        self._index = first - 1
        self._made = made
        self._made_before = 0

    def _emit(self, **item: Any) -> None:
        self._out.write(json.dumps(item) + "\n")
        self._out.flush()

    def startTest(self, test: Any) -> None:
        super().startTest(test)
        self._index += 1
        self._outcome: tuple[str, str] = ("pass", "")
        self._made_before = self._made[0]
        # The stacks of a test that hangs, on stderr, before the parent's
        # watchdog ends this process.
        faulthandler.dump_traceback_later(max(self._timeout - 2, 1))
        self._emit(start=self._index, id=test.id())

    def _set(self, outcome: str, detail: str) -> None:
        if self._outcome[0] in ("pass", "skip", "xfail"):  # the first failure wins
            self._outcome = (outcome, detail)

    def addError(self, test: Any, err: Any) -> None:
        if not isinstance(test, unittest.TestCase):  # a class's or module's fixture
            detail = "".join(traceback.format_exception(*err))[-2000:]
            self._emit(fixture=str(test), detail=detail)
            return
        self._set("fail", "".join(traceback.format_exception(*err))[-2000:])

    def addFailure(self, test: Any, err: Any) -> None:
        self._set("fail", "".join(traceback.format_exception(*err))[-2000:])

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        if err is not None:
            self._set("fail", f"{subtest}: " + "".join(traceback.format_exception(*err))[-2000:])

    def addSkip(self, test: Any, reason: str) -> None:
        self._set("skip", reason)

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self._set("xfail", "")

    def addUnexpectedSuccess(self, test: Any) -> None:
        self._set("fail", "unexpected success")

    def stopTest(self, test: Any) -> None:
        super().stopTest(test)
        faulthandler.cancel_dump_traceback_later()
        loops = self._made[0] - self._made_before
        self._emit(end=self._index, id=test.id(), outcome=self._outcome[0], detail=self._outcome[1], loops=loops)


def child(module: str, first: int, pattern: str | None, timeout: float, out: Any) -> None:
    made = _force_blockio_loop()
    tests = _tests(module, pattern)
    suite = unittest.TestSuite(tests[first:])
    result = _Reporter(out, first, made, timeout)
    # A TestSuite runs the modules' and classes' setUp/tearDown fixtures.
    suite.run(result)
    out.write(json.dumps({"done": len(tests)}) + "\n")
    out.flush()


# -- the parent: children with a watchdog --------------------------------------


class ModuleRun:
    """One module's outcomes, across the children it took."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.outcomes: dict[str, tuple[str, str]] = {}
        self.fixture_errors: list[str] = []
        #: Tests that made a blockio loop.
        self.on_blockio: set[str] = set()


def _lines(proc: subprocess.Popen, q: queue.Queue) -> None:
    for line in proc.stdout:  # type: ignore[union-attr]
        q.put(line)
    q.put(None)


def run_module(module: str, pattern: str | None, timeout: float) -> ModuleRun:
    run = ModuleRun(module)
    first = 0
    while True:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", module, "--first", str(first)]
        cmd += ["--timeout", str(timeout)]
        if pattern:
            cmd += ["-k", pattern]
        stderr = tempfile.TemporaryFile()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True)
        q: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(proc, q), daemon=True).start()
        current: tuple[int, str] | None = None
        finished = False
        while True:
            try:
                line = q.get(timeout=timeout)
            except queue.Empty:
                line = "timeout"
            if line == "timeout" or line is None:
                break
            item = json.loads(line)
            if "start" in item:
                current = (item["start"], item["id"])
            elif "end" in item:
                run.outcomes[item["id"]] = (item["outcome"], item["detail"])
                if item["loops"]:
                    run.on_blockio.add(item["id"])
                current = None
            elif "fixture" in item:
                run.fixture_errors.append(f"{item['fixture']}: {item['detail']}")
            elif "done" in item:
                finished = True
        proc.kill()
        proc.wait()
        stderr.seek(0)
        said = stderr.read().decode(errors="replace")[-3000:]
        stderr.close()
        if finished:
            return run
        if current is None:  # died or stalled between tests
            why = f"child stopped after test {first} (exit {proc.returncode})"
            run.fixture_errors.append(f"{why}; its stderr ends:\n{said}")
            return run
        why = "timed out" if line == "timeout" else f"child died (exit {proc.returncode})"
        run.outcomes[current[1]] = ("fail", f"{why} after {timeout:g} s; its stderr ends:\n{said}")
        first = current[0] + 1


def _short(test_id: str) -> str:
    return test_id.removeprefix("test.test_asyncio.")


def report(run: ModuleRun, unexpected: list[str]) -> dict[str, int]:
    """Prints what did not pass in ``run`` and its counts; adds what is not
    as expected to ``unexpected``; returns the counts."""
    counts = {"pass": 0, "blockio": 0, "fail": 0, "skip": 0, "xfail": 0}
    for test_id, (outcome, detail) in sorted(run.outcomes.items()):
        counts[outcome] += 1
        name = _short(test_id)
        known = KNOWN_FAILURES.get(name)
        if outcome == "fail":
            print(f"FAIL {name}{' (known: ' + known + ')' if known else ''}\n    {detail.strip()[-3000:]}")
            if known is None:
                unexpected.append(name)
        elif outcome == "skip":
            print(f"SKIP {name}: {detail}")
        elif known is not None:
            print(f"PASS {name}, listed as a known failure: {known}")
            unexpected.append(name)
        if outcome == "pass" and test_id in run.on_blockio:
            counts["blockio"] += 1
    for err in run.fixture_errors:
        print(f"FIXTURE ERROR {run.module}: {err.strip()[-600:]}")
        unexpected.append(run.module)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help="only these modules (default: all of MODULES present)")
    ap.add_argument("--min-pass", type=int, default=0, help="fail when fewer tests pass on blockio's loop")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a test may take (default 60)")
    ap.add_argument("-k", dest="pattern", help="only tests whose name contains this")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.first, args.pattern, args.timeout, sys.stdout)
        return 0

    import importlib.util

    import blockio

    loop = blockio.new_event_loop()
    backend = getattr(loop, "backend", "?")
    loop.close()
    wanted = args.modules or [m for m in MODULES if importlib.util.find_spec(f"test.test_asyncio.{m}")]
    started = time.monotonic()
    totals = {"pass": 0, "blockio": 0, "fail": 0, "skip": 0, "xfail": 0}
    unexpected: list[str] = []
    for module in wanted:
        t0 = time.monotonic()
        counts = report(run_module(module, args.pattern, args.timeout), unexpected)
        for k in totals:
            totals[k] += counts[k]
        print(
            f"{module}: {counts['pass']} passed ({counts['blockio']} on a blockio loop), "
            f"{counts['fail']} failed, {counts['skip']} skipped ({time.monotonic() - t0:.1f} s)",
            flush=True,
        )
    ran = totals["pass"] + totals["fail"] + totals["skip"] + totals["xfail"]
    print(
        f"blockio loop ({backend}) as asyncio's default, Python {sys.version.split()[0]}, "
        f"{len(wanted)} modules: {totals['pass']} of {ran} passed ({totals['blockio']} of them made a "
        f"blockio loop), {totals['fail']} failed, {totals['skip']} skipped, "
        f"{totals['xfail']} expected failures, in {time.monotonic() - started:.0f} s"
    )
    status = 0
    if unexpected:
        print(f"not as expected: {', '.join(unexpected)}", file=sys.stderr)
        status = 1
    if totals["blockio"] < args.min_pass:
        print(f"fewer than {args.min_pass} passed on a blockio loop", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
