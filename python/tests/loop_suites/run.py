"""anyio 4.16.0's, websockets 15.0.1's and tornado 6.6.1's own tests on
blockio's event loop (both backends) beside asyncio's own loop, each
test's outcome compared.

anyio's tests run their asyncio backend through ``asyncio.Runner``, and
websockets' tests of its asyncio implementation make their loops with
``asyncio.new_event_loop()``: both ask the event loop policy, which
``loop_choice.py`` sets to one making asyncio's loop or blockio's (as
``blockio.install()`` does), loaded as a pytest plugin (``-p loop_choice``)
for anyio and by ``websockets_main.py`` (unittest) for websockets. Tornado's
``IOLoop`` wraps the loop ``asyncio.new_event_loop()`` makes and drives its
streams with ``add_reader``/``add_writer``: ``tornado_main.py`` runs the
modules of tornado's own runner (``tornado.test.runtests``). Their
code is not changed. The run fails unless

- every test has the same outcome (passed, failed, error, skipped) on each
  of blockio's backends as on asyncio's loop in this run, but for the
  tests ``DESELECTED`` names, each with its reason (none now). A failure
  that asyncio has too (a name that does not resolve here, no dual stack)
  is the environment's and fails alike on every loop. A test whose outcome
  differs is run again alone on that loop and on asyncio's (each such test
  is printed): the difference is forgiven only when asyncio's own outcome
  changes then (the runs at once upset asyncio's first run) and both
  loops agree; one of blockio's loop alone fails the run, its first run's
  traceback printed;
- each run made its loops of the class asked for (``loop_choice`` counts
  them), no module failed to be collected or imported (pytest's collection
  errors, unittest's loader errors: a module failing alike on every loop
  would otherwise agree), and
- asyncio's run passes at least ``MIN_PASS`` of each suite (a suite that
  did not run, or ran in an environment that breaks it, shows there).

anyio's sdist comes from PyPI (pip); websockets' PyPI sdist holds only its
Sans-I/O tests, so its tests come from Debian's source of websockets
15.0.1 (its ``orig`` archive, through apt); tornado's sdist holds its
tests in ``tornado/test``, and the tests import tornado from that unpacked
source (pure Python: its optional C speedups are not built). All are pinned by sha256 and
kept in ``target/loop-suites/downloads``; the venv (``requirements.txt``)
is kept while the pins are the same, and blockio's wheel
(``target/wheels``, from ``scripts/python-setup``) is installed anew.
The nine runs (three suites, three loops) go at once: the suites mostly wait
on their peers and timers.

Usage: ``python3 python/tests/loop_suites/run.py [--suite anyio|websockets]``
from the repository root.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
# (python/testkit holds no ``blockio`` to shadow the installed one)
sys.path.insert(0, str(ROOT / "python" / "testkit"))
from pinned import apt_download, install_wheel, pinned_file, pinned_venv, pip_download  # noqa: E402
WORK = ROOT / "target" / "loop-suites"

#: name: (how it is fetched, file, sha256, the directory it unpacks to)
SOURCES = {
    "anyio": ("pip", "anyio-4.16.0.tar.gz",
              "59bb03251907983d1603d27c3087ddb1e93299ea2163adcdba37899a4fb12ffb", "anyio-4.16.0"),
    # (a path in the Debian archive that apt is configured with)
    "websockets": ("apt", "pool/main/p/python-websockets/python-websockets_15.0.1.orig.tar.gz",
                   "8451495265af3e368f794c4dc15c99ce90c771d95560f542bff8c64b5455af3b", "websockets-15.0.1"),
    "tornado": ("pip", "tornado-6.6.1.tar.gz",
                "28e6311402af59c8b02e3fa0f5e7d8eb465b25081381803b127d97e6a4395d5a", "tornado-6.6.1"),
}

#: anyio's test modules of what a loop serves (sockets, signals,
#: subprocesses, and the synchronisation primitives' waits), as pytest
#: arguments from its unpacked sdist. Its own pytest configuration
#: (pyproject.toml: warnings as errors, 20 s per test) applies. Not run:
#: its trio and uvloop parametrisations (other libraries' loops), and the
#: IPv6 ones, which fail on every loop in a sandbox without IPv6 and take
#: a third of the time.
ANYIO_ARGS = ["-k", "not trio and not uvloop and not ipv6", "tests/test_sockets.py", "tests/test_signals.py",
              "tests/test_subprocesses.py", "tests/test_synchronization.py"]

#: Each run: its name, the loop ``loop_choice`` makes, its environment,
#: and what ``loop_choice`` must count of the loops it made.
RUNS = [
    ("asyncio", "asyncio", {}, "_UnixSelectorEventLoop -"),
    ("blockio", "blockio", {}, "UringEventLoop uring"),
    ("blockio, epoll backend", "blockio", {"BLOCKIO_BACKEND": "threads"}, "EpollEventLoop epoll"),
]

#: Tests not run on a blockio backend, and why: (suite, run) -> {test id:
#: reason}. None: every test runs on each loop.
DESELECTED: dict[tuple[str, str], dict[str, str]] = {}

#: The fewest tests of each suite that pass on asyncio's loop here (on
#: Python 3.11: anyio 398 of 405, websockets' asyncio tests 420 of 446,
#: tornado 1,431 of 1,518, 87 skipped: no IPv6, pycurl, twisted, root).
MIN_PASS = {"anyio": 390, "websockets": 410, "tornado": 1420}

#: Seconds a suite's run may take before it counts as hung.
RUN_TIMEOUT = 600


def fetch(name):
    """The source's archive in ``target/loop-suites/downloads``, fetched
    unless already there with the pinned sha256."""
    how, what, digest, _ = SOURCES[name]
    into = WORK / "downloads"
    into.mkdir(parents=True, exist_ok=True)
    path = into / what.rsplit("/", 1)[-1]

    def download():
        if how == "pip":
            pkg, version = what[: -len(".tar.gz")].rsplit("-", 1)
            pip_download(f"{pkg}=={version}", into)
        else:
            apt_download(what, path, digest)

    return pinned_file(path, digest, download, "loop-suites")


def unpack(name, into):
    """The suite's tests, unpacked afresh into ``into/name``: anyio's sdist
    without its ``src`` and websockets' ``tests`` package alone, so that
    the installed package is the one their tests import; tornado's
    ``tornado`` package, its tests within."""
    dest = into / name
    shutil.rmtree(dest, ignore_errors=True)
    top = SOURCES[name][3] + "/"
    keep = {"websockets": "tests/", "tornado": "tornado/"}.get(name, "")
    with tarfile.open(fetch(name)) as t:
        members = []
        for m in t.getmembers():
            rel = m.name[len(top):]
            if m.name.startswith(top) and rel.startswith(keep) and not rel.startswith("src/"):
                m.name = rel
                members.append(m)
        t.extractall(dest, members, filter="data") if sys.version_info >= (3, 12) else t.extractall(dest, members)
    return dest


def junit_outcomes(report):
    """``{"outcomes": {test id: outcome}, "tracebacks": {test id: text},
    "collection_errors": [text]}`` of a pytest junit report (as
    ``websockets_main.py`` writes them): a module that could not be
    collected is a test case with no class and a "collection failure"."""
    outcomes, tracebacks, collection_errors = {}, {}, []
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        failure, error = case.find("failure"), case.find("error")
        if error is not None and error.get("message", "").startswith("collection failure"):
            collection_errors.append(f"{case.get('name')}: {error.text or ''}")
            continue
        if case.find("skipped") is not None:
            outcome = "skipped"
        elif failure is not None:
            outcome = "failed"
        elif error is not None:
            outcome = "error"
        else:
            outcome = "passed"
        outcomes[test] = outcome
        if outcome in ("failed", "error"):
            tracebacks[test] = (failure if failure is not None else error).text or ""
    return {"outcomes": outcomes, "tracebacks": tracebacks, "collection_errors": collection_errors}


def node_id(tree, test):
    """pytest's node id of ``test`` (as a junit report names it:
    ``tests.test_x.TestY::test_z[...]``), found in ``tree``."""
    classname, name = test.split("::", 1)
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (tree / path).exists():
            return "::".join([path, *parts[i:], name])
    raise SystemExit(f"loop-suites: no module of {test} in {tree}")


def command(py, suite, tree, report, deselected, only):
    """The command that runs ``suite`` from ``tree`` (only the tests
    ``only`` names, when it names any), its outcomes written to ``report``."""
    if suite == "anyio":
        tests = [node_id(tree, t) for t in only] or ANYIO_ARGS
        return [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "loop_choice", "--tb=short",
                f"--junitxml={report}", *tests, *(f"--deselect={t}" for t in deselected)]
    main = HERE / ("tornado_main.py" if suite == "tornado" else "websockets_main.py")
    return [py, main, report, *(["--only", *only] if only else deselected)]


def run_one(py, suite, tree, run, only=()):
    """(report, loops made, seconds, output) of one suite on one loop (only
    the tests ``only`` names, when it names any); the report as
    :func:`junit_outcomes` gives it, None when the run wrote none."""
    name, which, env, _ = run
    tag = f"{suite}-{which}-{'-'.join(env.values()) or 'default'}{'-again' if only else ''}"
    report, made = tree.parent / f"{tag}.out", tree.parent / f"{tag}.made"
    for f in (report, made):
        f.unlink(missing_ok=True)
    deselected = DESELECTED.get((suite, name), {})
    started = time.monotonic()
    try:
        out = subprocess.run([str(a) for a in command(py, suite, tree, report, deselected, only)], cwd=tree,
                             capture_output=True, text=True, timeout=RUN_TIMEOUT,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(tree)]),
                                  "LOOP_SUITES_LOOP": which, "LOOP_SUITES_MADE": str(made), **env})
        output = out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        output = f"hung: no end after {RUN_TIMEOUT} s\n{e.stdout or ''}{e.stderr or ''}"
    took = time.monotonic() - started
    if not report.exists() or not made.exists():
        return None, {}, took, output
    got = junit_outcomes(report) if suite == "anyio" else json.loads(report.read_text())
    return got, json.loads(made.read_text()), took, output


def counts(outcomes):
    n = {}
    for o in outcomes.values():
        n[o] = n.get(o, 0) + 1
    return ", ".join(f"{n[o]} {o}" for o in ("passed", "failed", "error", "skipped") if o in n)


def outcomes_of(result):
    """{test id: outcome} of a :func:`run_one` result (none if it did not run)."""
    return (result[0] or {}).get("outcomes", {})


def differing(suite, results, name):
    """The tests whose outcome on run ``name`` is not asyncio's, but for
    those ``DESELECTED`` there."""
    reference, outcomes = outcomes_of(results["asyncio"]), outcomes_of(results[name])
    deselected = DESELECTED.get((suite, name), {})
    return sorted(t for t in set(reference) | set(outcomes)
                  if t not in deselected and outcomes.get(t, "not run") != reference.get(t, "not run"))


def check(suite, results, again):
    """Prints the suite's counts on each loop and each test that breaks the
    bar (see the module's doc). ``again``: run name -> the reports of its
    differing tests run again alone, on it and on asyncio's loop. Returns
    (what failed the run, the differences forgiven), one line each."""
    failed, forgiven = [], []
    for name, _, _, expect in RUNS:
        got, made, took, output = results[name]
        if got is None:
            print(f"  {suite} on {name}: did not run ({took:.0f} s)\n{output[-4000:]}")
            failed.append(f"{suite} did not run on {name}")
            continue
        outcomes = got["outcomes"]
        print(f"  {suite} on {name}: {counts(outcomes)} ({took:.0f} s; loops made: {made})")
        if set(made) != {expect}:
            print(f"    the tests made loops {made}, not only {expect}")
            failed.append(f"{suite} on {name} made loops {made}")
        for text in got["collection_errors"]:
            print(f"    a module could not be collected:\n{text}")
            failed.append(f"{suite} on {name}: a module could not be collected")
        for test, reason in DESELECTED.get((suite, name), {}).items():
            print(f"    not run: {test}: {reason}")
        if name == "asyncio":
            passed = sum(o == "passed" for o in outcomes.values())
            if passed < MIN_PASS[suite]:
                print(f"    {passed} passed on asyncio's loop, fewer than {MIN_PASS[suite]}\n{output[-4000:]}")
                failed.append(f"{suite}: {passed} passed on asyncio's loop, fewer than {MIN_PASS[suite]}")
            continue
        for test in differing(suite, results, name):
            verdict = judge(test, results["asyncio"], results[name], again.get(name, (None, None)))
            print(f"    {test} on {name}: {verdict[1]}")
            if verdict[0]:
                forgiven.append(f"{suite} {test} on {name}")
                continue
            failed.append(f"{suite} {test} on {name}")
            for loop, result in (("asyncio", results["asyncio"]), (name, results[name])):
                text = result[0]["tracebacks"].get(test)
                if text:
                    print(f"    the first run's traceback on {loop}:\n{text}")
    return failed, forgiven


def judge(test, reference, mine, again):
    """(forgiven, what happened) of ``test``, whose outcome on a blockio
    run (``mine``) differed from asyncio's (``reference``) in the first
    run; ``again``: both loops' reports of it run again alone. Forgiven
    only when asyncio's own outcome changed when run again (its first run
    was upset, by the runs at once: websockets' waits are 100 ms) and
    both loops then agree; a difference of blockio's loop alone (asyncio's
    outcome the same again) fails, whatever blockio's second run gives."""
    got, want = outcomes_of(mine).get(test, "not run"), outcomes_of(reference).get(test, "not run")
    got2, want2 = ((r or {}).get("outcomes", {}).get(test, "not run") for r in again)
    said = f"{got}, {want} on asyncio; run again alone: {got2}, {want2} on asyncio"
    if "not run" in (got2, want2):
        return False, said + "  <- not run again"
    if want2 == want:
        return False, said + "  <- differs on blockio's loop alone"
    if got2 != want2:
        return False, said + "  <- differs"
    return True, said + "  (asyncio's own outcome changed: forgiven)"


def run_again(py, suite, results, trees):
    """Runs the tests whose outcome differed from asyncio's again, alone
    (one loop at a time), on the same loop and on asyncio's: a test whose
    timing the runs at once upset (websockets' waits are 100 ms) gets
    the same outcome on both then, a difference of the loop's does not.
    Returns run name -> (its outcomes, asyncio's)."""
    again = {}
    for name, *_ in RUNS[1:]:
        tests = differing(suite, results, name)
        if tests:
            run = next(r for r in RUNS if r[0] == name)
            again[name] = (run_one(py, suite, trees[name], run, tests)[0],
                           run_one(py, suite, trees["asyncio"], RUNS[0], tests)[0])
    return again


def main():
    # Signal tests interrupt children with SIGINT: a run started in the
    # background by a shell without job control inherits SIGINT ignored,
    # and its children get the default disposition back (see
    # uvloop_suite/run.py).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", action="append", choices=sorted(SOURCES), help="only this suite (repeatable)")
    args = ap.parse_args()
    os.chdir(ROOT)
    suites = args.suite or sorted(SOURCES)
    py = pinned_venv(WORK / "venv", HERE / "requirements.txt")
    install_wheel(py, "loop-suites")
    started = time.monotonic()
    trees = {(suite, name): unpack(suite, WORK / "run" / name.replace(" ", "").replace(",", "-"))
             for suite in suites for name, *_ in RUNS}
    with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
        jobs = {key: pool.submit(run_one, py, key[0], tree, next(r for r in RUNS if r[0] == key[1]))
                for key, tree in trees.items()}
        results = {suite: {name: jobs[suite, name].result() for name, *_ in RUNS} for suite in suites}
    again = {suite: run_again(py, suite, results[suite], {n: trees[suite, n] for n, *_ in RUNS}) for suite in suites}
    print(f"loop-suites: {', '.join(suites)}: their tests on asyncio's loop and blockio's "
          f"({time.monotonic() - started:.0f} s)")
    failed, forgiven = [], []
    for suite in suites:
        f, g = check(suite, results[suite], again[suite])
        failed += f
        forgiven += g
    if failed:
        sys.exit(f"loop-suites: FAILED ({len(failed)}): " + "; ".join(failed))
    if forgiven:
        print(f"loop-suites: every test had the same outcome on blockio's loop (both backends) as on asyncio's, "
              f"but for {len(forgiven)} whose first run's outcome on asyncio's loop changed when run again alone, "
              f"the same on both loops then: " + "; ".join(forgiven))
    else:
        print("loop-suites: every test had the same outcome on blockio's loop (both backends) as on asyncio's")


if __name__ == "__main__":
    main()
