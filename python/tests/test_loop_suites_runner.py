"""The verdicts of the runner of anyio's and websockets' suites
(``loop_suites/run.py``), on reports its own helpers write: a difference
of blockio's loop alone fails the run however its second run goes, and a
module that cannot be imported fails it even when it fails alike on every
loop."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "loop_suites"


def _runner():
    spec = importlib.util.spec_from_file_location("loop_suites_run", HERE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _runner()


def _report(outcomes, tracebacks=None, collection_errors=()):
    return {"outcomes": outcomes, "tracebacks": tracebacks or {}, "collection_errors": list(collection_errors)}


def _results(asyncio_report, blockio_report):
    """A suite's results on the three runs, both blockio backends alike."""
    made = {name: {expect: 1} for name, _, _, expect in run.RUNS}
    return {name: (asyncio_report if name == "asyncio" else blockio_report, made[name], 1.0, "")
            for name, *_ in run.RUNS}


T = "tests.test_x::test_send"


@pytest.mark.parametrize(
    "first, again, forgiven",
    [
        # blockio failed once, passes alone: blockio's loop alone differed
        (("failed", "passed"), ("passed", "passed"), False),
        # blockio failed once and again: a difference of the loop
        (("failed", "passed"), ("failed", "passed"), False),
        # asyncio failed in the crowd, passes alone, as blockio does
        (("passed", "failed"), ("passed", "passed"), True),
        # asyncio changed, but the loops still differ
        (("failed", "passed"), ("passed", "failed"), False),
    ],
    ids=["blockio-flaky", "blockio-fault", "asyncio-upset", "still-differs"],
)
def test_a_difference_is_forgiven_only_when_asyncio_s_own_outcome_changes(first, again, forgiven, capsys, monkeypatch):
    monkeypatch.setitem(run.MIN_PASS, "anyio", 0)  # (one test in all)
    (got, want), (got2, want2) = first, again
    tb = {T: "AssertionError: injected"}
    results = _results(_report({T: want}, tb if want == "failed" else {}), _report({T: got}, tb if got == "failed" else {}))
    rerun = {name: (_report({T: got2}), _report({T: want2})) for name, *_ in run.RUNS[1:]}
    failed, kept = run.check("anyio", results, rerun)
    assert (not failed, len(kept)) == ((True, 2) if forgiven else (False, 0))
    out = capsys.readouterr().out
    if not forgiven:
        assert len(failed) == 2 and all(T in f for f in failed)
        assert "the first run's traceback" in out and "AssertionError: injected" in out


def _suite_tree(tmp_path):
    """A ``tests/asyncio`` package of one passing test module and one that
    cannot be imported."""
    pkg = tmp_path / "tests" / "asyncio"
    pkg.mkdir(parents=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "test_ok.py").write_text("import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n")
    (pkg / "test_broken.py").write_text("import no_such_module_here\n")
    return tmp_path


def _env(tmp_path):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(tmp_path)]),
            "LOOP_SUITES_LOOP": "asyncio", "LOOP_SUITES_MADE": str(tmp_path / "made.json")}


def test_a_unittest_module_that_cannot_be_imported_fails_the_run_though_every_loop_agrees(tmp_path):
    tree = _suite_tree(tmp_path)
    out = subprocess.run([sys.executable, HERE / "websockets_main.py", tree / "report.json"], cwd=tree,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    report = json.loads((tree / "report.json").read_text())
    assert report["collection_errors"] and "no_such_module_here" in report["collection_errors"][0], out.stderr
    failed, _ = run.check("websockets", _results(report, report), {})
    assert any("could not be collected" in f for f in failed)


def test_a_pytest_module_that_cannot_be_collected_fails_the_run_though_every_loop_agrees(tmp_path):
    tree = _suite_tree(tmp_path)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
                    f"--junitxml={tree / 'report.xml'}", "tests"], cwd=tree, env=_env(tmp_path),
                   capture_output=True, text=True, timeout=60)
    report = run.junit_outcomes(tree / "report.xml")
    assert report["outcomes"] == {"tests.asyncio.test_ok.T::test_ok": "passed"}
    assert len(report["collection_errors"]) == 1 and "no_such_module_here" in report["collection_errors"][0]
    failed, _ = run.check("anyio", _results(report, report), {})
    assert any("could not be collected" in f for f in failed)
