"""uvloop 0.23.0's own test suite on blockio's event loop, beside asyncio's.

uvloop's ``tests/`` pair each ``Test_UV_X`` class with a ``Test_AIO_X``
class on asyncio's loop; ``suite.py`` generates a third, on blockio's loop,
from each asyncio class (the test bodies unchanged). This runs, for each
test module, uvloop's asyncio classes (the reference) and the generated
blockio classes on each of blockio's backends, and fails unless

- every blockio test passes or is skipped,
- every skipped blockio test is skipped on asyncio's loop too (the SSL
  tests that uvloop's suite skips for ``implementation == 'asyncio'``, the
  Python-version guards), and
- at least ``--min-pass`` tests pass on each backend.

uvloop's sdist is fetched from PyPI with pip, pinned and checked against
its sha256; its ``tests`` package is unpacked into ``target/uvloop-tests``
and run from there, outside uvloop's source tree (the installed uvloop,
not the source's uncompiled copy, is the one imported). The test venv
(``requirements.txt``: uvloop, pyOpenSSL, psutil, aiohttp) is kept while
the pins are the same; blockio's wheel (``target/wheels``, from
``scripts/python-setup``) is installed anew on every run.

The modules run as separate processes, a few at a time: the suite mostly
waits (on peers, child processes and timeouts), so that its wall time is
far less than the sum (about two minutes for the three runs).

Usage: ``python3 python/tests/uvloop_suite/run.py [--min-pass N] [-j JOBS]
[--module test_tcp ...] [--part all|shared|alone]`` from the repository root
(``--part shared``: every module but those run alone; ``--part alone``:
only those, one at a time).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
# (python/testkit holds no ``blockio`` to shadow the installed one)
sys.path.insert(0, str(ROOT / "python" / "testkit"))
from pinned import install_wheel, pinned_file, pinned_venv, pip_download  # noqa: E402
WORK = ROOT / "target" / "uvloop-tests"

VERSION = "0.23.0"
SDIST = f"uvloop-{VERSION}.tar.gz"
SHA256 = "28d160f51ab4da3b187063652e643dea6831072add4adc1e6d62afbe73b6be27"

#: uvloop's test modules that have asyncio classes (the others test
#: uvloop's own API: libuv handles, Cython, its source code), the longest
#: first.
MODULES = ["test_tcp", "test_base", "test_process", "test_unix", "test_context", "test_dns", "test_sockets",
           "test_signals", "test_udp", "test_executors", "test_pipes", "test_aiohttp"]

#: The environment of every run. uvloop's suite skips its one test that
#: asserts a 20 ms timing window (``test_base``'s ``test_call_at``: a
#: timer must fire within 20 ms of its deadline) on CI machines, which it
#: recognises by ``GITHUB_WORKFLOW``; this shared 2-core machine is one. The
#: skip is the same on asyncio's loop as on blockio's.
ENV = {"GITHUB_WORKFLOW": "blockio uvloop-tests"}

#: Modules run alone, after the others: ``test_base``'s
#: ``test_call_later_rounding`` checks that a 70 ms timer does not fire
#: early by the clock read just after it is set, which a process
#: descheduled between the two (on a machine busy with the other modules)
#: sees as early.
ALONE = {"test_base"}

#: Each run: its name, what ``suite.py`` runs, its environment.
RUNS = [
    ("asyncio", "asyncio", {}),
    ("blockio", "blockio", {}),
    ("blockio, epoll backend", "blockio", {"BLOCKIO_BACKEND": "threads"}),
]

#: Seconds a module may take before the run counts it as hung.
MODULE_TIMEOUT = 600


def fetch():
    """uvloop's sdist in ``target/uvloop-tests/downloads``, fetched unless
    already there with the pinned sha256."""
    into = WORK / "downloads"
    into.mkdir(parents=True, exist_ok=True)
    # (--no-binary for uvloop only: its build requirements, which pip
    # installs to read the sdist's metadata, come as wheels)
    return pinned_file(into / SDIST, SHA256, lambda: pip_download(f"uvloop=={VERSION}", into, "uvloop"),
                       "uvloop-tests")


def unpack():
    """uvloop's ``tests`` package alone, unpacked afresh into
    ``target/uvloop-tests/run/tests``; returns ``run``."""
    run = WORK / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    prefix = f"uvloop-{VERSION}/tests/"
    with tarfile.open(fetch()) as t:
        members = [m for m in t.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(f"uvloop-{VERSION}/"):]
        if sys.version_info >= (3, 12):
            t.extractall(run, members, filter="data")
        else:
            t.extractall(run, members)
    return run


def make_venv():
    """The test venv with the pinned requirements (kept while they are the
    same) and blockio's wheel (installed anew)."""
    py = pinned_venv(WORK / "venv", HERE / "requirements.txt")
    install_wheel(py, "uvloop-tests")
    return py


def isolated():
    """The command prefix that runs a module in a network namespace of its
    own, with only a loopback interface: uvloop's tests bind fixed ports
    (``tb.find_free_port`` from 50000, checked then bound), which the
    same module running at once on another loop would take. Empty when
    namespaces cannot be made (not root): the modules then run one at a
    time (``main``)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return []
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def run_module(py, tree, module, run):
    """{test id: [outcome, detail, seconds]} of one module in one run."""
    name, which, env = run
    report = tree / f"{module}-{which}-{len(env)}.json"
    report.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        out = subprocess.run([*isolated(), str(py), str(HERE / "suite.py"), module, which, str(report)], cwd=tree,
                             capture_output=True, text=True, timeout=MODULE_TIMEOUT,
                             env={**os.environ, **ENV, "PYTHONPATH": str(tree), **env})
    except subprocess.TimeoutExpired as e:
        return {f"{module} ({name})": ["error", f"hung: no end after {MODULE_TIMEOUT} s\n{e.stderr}", 0.0]}
    if not report.exists():
        return {f"{module} ({name})": ["error", f"did not run (exit {out.returncode}):\n{out.stderr[-4000:]}",
                                       time.monotonic() - started]}
    return json.loads(report.read_text())


def counts(outcomes):
    out = {}
    for outcome, *_ in outcomes.values():
        out[outcome] = out.get(outcome, 0) + 1
    return ", ".join(f"{out[o]} {o}" for o in ("passed", "failed", "error", "skipped") if o in out)


def check(results, min_pass):
    """Prints each run's counts and every test that breaks the bar; returns
    whether all held."""
    reference = {k.replace("_BLOCKIO_", "_AIO_").replace("BLOCKIO", "AIO"): v
                 for k, v in results["asyncio"].items()}
    ok = True
    for name, _, _ in RUNS:
        got = results[name]
        print(f"  {name}: {counts(got)}")
        if name == "asyncio":
            continue
        passed = 0
        for test, (outcome, detail, _) in sorted(got.items()):
            ref = reference.get(test.replace("_BLOCKIO_", "_AIO_").replace("BLOCKIO", "AIO"), ["not run"])[0]
            if outcome == "passed":
                passed += 1
            elif outcome == "skipped" and ref == "skipped":
                continue
            else:
                ok = False
                print(f"    {test}: {outcome} on {name} ({ref} on asyncio)\n      "
                      + detail.strip().replace("\n", "\n      "))
        if passed < min_pass:
            ok = False
            print(f"    {passed} passed on {name}, fewer than {min_pass}")
    return ok


def main():
    # uvloop's signal tests interrupt a child with SIGINT. A run started in
    # the background by a shell without job control (`scripts/test &`)
    # inherits SIGINT ignored, and so would every child, which then never
    # stops: the tests' children get the default disposition back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-pass", type=int, default=0, help="fail when fewer tests pass on a blockio backend")
    ap.add_argument("-j", type=int, default=5, help="modules run at once")
    ap.add_argument("--module", action="append", help="only this module (repeatable)")
    ap.add_argument("--part", choices=("all", "shared", "alone"), default="all",
                    help="only the modules that may share the machine (shared), or only those run alone "
                         "(alone: the ALONE modules, which measure timers against the clock)")
    args = ap.parse_args()
    os.chdir(ROOT)
    py = make_venv()
    tree = unpack()
    modules = [m for m in args.module or MODULES
               if args.part == "all" or (m in ALONE) == (args.part == "alone")]
    started = time.monotonic()
    if not isolated():
        print("uvloop-tests: no network namespaces (not root): one module at a time")
        args.j = 1
    results = {name: {} for name, _, _ in RUNS}
    # The modules a few at a time, then those with timers measured against
    # the clock one at a time, on a machine no busier than the test
    # assumes.
    for batch, jobs in (([m for m in modules if m not in ALONE], args.j), ([m for m in modules if m in ALONE], 1)):
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            done = {(run[0], m): pool.submit(run_module, py, tree, m, run) for m in batch for run in RUNS}
            for (name, _), job in done.items():
                results[name].update(job.result())
    print(f"uvloop-tests: uvloop {VERSION}'s tests, asyncio's classes and blockio's "
          f"({time.monotonic() - started:.0f} s)")
    if not check(results, args.min_pass):
        sys.exit("uvloop-tests: blockio's loop does not pass uvloop's suite as asyncio's does")
    print("uvloop-tests: every blockio test passed, or was skipped as on asyncio's loop")


if __name__ == "__main__":
    main()
