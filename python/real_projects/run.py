"""Runs the test suites of real users of aiofiles, and aiofiles' own, twice:
in a venv with aiofiles, and in one where blockio's compatibility package
(``python/compat``, import name ``aiofiles``) replaces it (on both of
blockio's backends, see ``RUNS``); fails unless every test's outcome
(passed, failed, skipped, error) is the same with the compatibility
package as with aiofiles. Before each suite's first test, a pytest plugin
(``plugins/aiofiles_in_use.py``) checks that the ``aiofiles`` it imports
is the one that run is meant to test.

The suites are fetched pinned and checked against their sha256: sanic's,
aiocsv's, aiogram's, aiohttp-client-cache's and aiofiles' sdists from PyPI
(pip), quart's tests from Debian's source of quart 0.20.0 (its PyPI sdists
hold no tests; apt's ``apt-helper`` downloads it). Downloads and venvs are kept under
``target/real-projects`` and reused while the pins are the same; blockio's
wheel (``target/wheels``, from ``scripts/python-setup``) and the
compatibility package are installed anew on every run.

Usage: ``python3 python/real_projects/run.py [SUITE...]`` from the
repository root (``scripts/python-real-projects`` runs every suite); naming
suites runs only those. ``run.py --venvs [SUITE...]`` only makes their
venvs' pinned part (no blockio, no test run), which needs no wheel:
``scripts/test`` makes them early, beside other tests, since making them
(mostly downloads and pip) is most of the time a run from nothing takes.
"""

import concurrent.futures
import contextlib
import errno
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# (python/testkit holds no ``blockio`` to shadow the installed one)
sys.path.insert(0, str(ROOT / "python" / "testkit"))
from pinned import apt_download, install_wheel, pinned_file, pinned_venv, pip_download, pip_install, sh  # noqa: E402
WORK = ROOT / "target" / "real-projects"

#: name: (how it is fetched, file, sha256, what it holds once unpacked)
SOURCES = {
    "sanic": ("pip", "sanic-25.12.1.tar.gz",
              "7b51bf608e4030f06a6c002cd08fed2872e4936527e63c9a8a97d5cd06a2b47f", "sanic-25.12.1"),
    "aiocsv": ("pip", "aiocsv-1.4.1.tar.gz",
               "bb663f9eabf88402ca2c325fd0df836eee7da34cf7c5476b5e6cf7d098cdebda", "aiocsv-1.4.1"),
    "aiogram": ("pip", "aiogram-3.31.0.tar.gz",
                "f2c5064fe52d88898c86af62261c405440a014216e45dd99b2c6555a5602ce30", "aiogram-3.31.0"),
    "aiohttp-client-cache": ("pip", "aiohttp_client_cache-0.15.0.tar.gz",
                             "264fa7d69bcdb2e4fe9994e7f41ab5eec7cbba2a5f5e260d444d002f9626e374",
                             "aiohttp_client_cache-0.15.0"),
    "aiofiles": ("pip", "aiofiles-25.1.0.tar.gz",
                 "a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2", "aiofiles-25.1.0"),
    # (a path in the Debian archive that apt is configured with)
    "quart": ("apt", "pool/main/q/quart/quart_0.20.0.orig.tar.xz",
              "5e0a6b984cc4f001d5f59d73153d18744b57e3c6ec5944d354c42cc61e463b17", "quart-0.20.0"),
}

#: The tests run of each, as pytest arguments from the unpacked tree.
#: (datasette serves its static files and database downloads through
#: aiofiles, but its sdists hold only its ``test_*.py`` modules, not the
#: conftest, fixtures and plugins they import: its suite cannot be fetched
#: pinned from PyPI.)
SUITES = {
    "quart": ["-o", "addopts=--strict-markers", "tests"],
    # sanic's tests of static files, file responses and responses.
    "sanic": ["tests/test_static.py", "tests/test_static_directory.py", "tests/test_response.py",
              "tests/test_response_file.py", "tests/test_url_for_static.py"],
    "aiocsv": ["tests"],
    # aiogram's modules that read and write files through aiofiles
    # (Bot.download_file, FSInputFile): its whole suite (2,364 tests) takes
    # over a minute a run, and its other modules open no file.
    "aiogram": ["-o", "asyncio_default_fixture_loop_scope=function", "tests/test_api/test_types/test_input_file.py",
                "tests/test_api/test_client/test_bot.py", "tests/test_api/test_methods/test_create_new_sticker_set.py"],
    # Its file-system cache backend, the one that goes through aiofiles
    # (its storage and backend tests: requests to httpbin, cached in files;
    # see ``acc_servers``): its other modules test the SQLite and memory
    # backends and the session with the cache mocked.
    "aiohttp-client-cache": ["-p", "acc_custom_server", "test/integration/test_filesystem.py"],
    "aiofiles": ["tests"],
}

#: The requirements each suite's venvs are made from (``requirements.txt``
#: unless named here).
REQUIREMENTS = {"aiogram": "requirements-aiogram.txt",
                "aiohttp-client-cache": "requirements-aiohttp-client-cache.txt"}

#: Tests of aiofiles' own suite left out of both runs: they test aiofiles'
#: machinery, not its interface, and why.
AIOFILES_INTERNALS = {
    # Checks that the spooled file's private `_file._file` is a BytesIO
    # until it rolls over: a SpooledTemporaryFile here is on disk at once.
    "tests/test_tempfile.py::test_spooled_temporary_file",
}
#: Left out as root, on aiofiles itself too: root may write a 0o444 file.
AS_ROOT = {"tests/test_os.py::test_access"}


def fetch(name):
    """The source's archive in ``target/real-projects/downloads``, fetched
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

    return pinned_file(path, digest, download, "real-projects")


def unpack(name, into):
    """The source, unpacked afresh into ``into/name`` (their tests write
    files beside themselves)."""
    archive = fetch(name)
    dest = into / name
    shutil.rmtree(dest, ignore_errors=True)
    tmp = into / f".{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archive) as t:
        t.extractall(tmp, filter="data") if sys.version_info >= (3, 12) else t.extractall(tmp)
    top = tmp / SOURCES[name][3]
    if name in ("sanic", "aiocsv"):
        # Their tests only: the package itself (which the source tree's
        # copy would shadow) is the installed one.
        dest.mkdir()
        shutil.move(str(top / "tests"), str(dest / "tests"))
    else:
        shutil.move(str(top), str(dest))
    shutil.rmtree(tmp)
    return dest


def venv_name(suite, compat):
    """The venv ``suite`` runs in, with aiofiles or (``compat``) blockio."""
    group = REQUIREMENTS.get(suite, "requirements.txt")[: -len(".txt")].replace("requirements", "venv")
    return f"{group}-{'blockio' if compat else 'aiofiles'}"


def pinned_part(path, compat, requirements):
    """The python of a venv with the pinned ``requirements``, kept while
    they are the same; with ``compat``, without aiofiles."""
    def without_aiofiles(py):
        sh(py, "-m", "pip", "uninstall", "-q", "-y", "aiofiles")

    return pinned_venv(path, HERE / requirements, without_aiofiles if compat else None)


def make_venv(path, compat, requirements):
    """:func:`pinned_part`; with ``compat``, with blockio and its
    compatibility package in aiofiles' place (installed anew on each
    run)."""
    py = pinned_part(path, compat, requirements)
    if compat:
        install_wheel(py, "real-projects")
        sh(*pip_install(py), "--force-reinstall", "--no-deps", ROOT / "python" / "compat")
        # The aiofiles this venv imports must be the compatibility package.
        sh(py, "-c", "import asyncio, aiofiles, blockio\n"
                     "async def check():\n"
                     "    async with aiofiles.open('/dev/null', 'rb') as f:\n"
                     "        assert isinstance(f, blockio.AsyncFile), aiofiles.__file__\n"
                     "asyncio.run(check())")
    else:
        sh(py, "-c", "import aiofiles; assert aiofiles.open.__module__ == 'aiofiles.threadpool'")
    return py


def run_suite(py, name, tree, report, env):
    args = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "aiofiles_in_use", f"--junitxml={report}",
            *SUITES[name]]
    if name == "aiofiles":
        left_out = AIOFILES_INTERNALS | (AS_ROOT if os.geteuid() == 0 else set())
        args += [f"--deselect={t}" if "::" in t else f"--ignore={t}" for t in sorted(left_out)]
    started = time.monotonic()
    plugins = os.pathsep.join([str(HERE / "plugins"), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run([str(a) for a in args], cwd=tree, capture_output=True, text=True, timeout=1200,
                         env={**os.environ, "PYTHONPATH": plugins, **env})
    took = time.monotonic() - started
    if not report.exists():
        sys.exit(f"real-projects: {name}'s suite did not run:\n{out.stdout[-4000:]}{out.stderr[-4000:]}")
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            outcome = "skipped"
        elif case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        else:
            outcome = "passed"
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return outcomes, took, out


def counts(outcomes):
    out = {}
    for o in outcomes.values():
        out[o] = out.get(o, 0) + 1
    return ", ".join(f"{n} {o}" for o, n in sorted(out.items(), key=lambda x: ("passed failed error skipped"
                                                                               .index(x[0]))))


#: Each run: its name, whether on blockio's compatibility package, its
#: environment and the suites it runs. The compatibility package runs on
#: blockio's default backend (io_uring here), and on the thread-pool
#: fallback for all but sanic's suite (the longest; the files it serves
#: are read as quart's are).
RUNS = [
    ("aiofiles", False, {}, list(SUITES)),
    ("blockio", True, {}, list(SUITES)),
    ("blockio, threads backend", True, {"BLOCKIO_BACKEND": "threads"},
     ["quart", "aiocsv", "aiogram", "aiohttp-client-cache", "aiofiles"]),
]


def localhost_sockets():
    """Listening sockets on one port the kernel chose free, on each address
    ``localhost`` resolves to (127.0.0.1, and ::1 where it is named):
    aiohttp keeps no cookie from a server named by its IP address, and
    aiohttp-client-cache's tests check cookies."""
    others = {a[4][0]: a[0] for a in socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)}
    others.pop("127.0.0.1", None)
    while True:
        socks = [socket.socket()]
        socks[0].bind(("127.0.0.1", 0))
        port = socks[0].getsockname()[1]
        for address, family in others.items():
            sock = socket.socket(family)
            try:
                sock.bind((address, port))
                socks.append(sock)
            except OSError as e:
                sock.close()
                if e.errno == errno.EADDRINUSE:
                    break
                # (an address this machine cannot bind, such as ::1
                # without IPv6: clients fall back to the others)
        else:
            for s in socks:
                s.listen(128)
            return socks, port
        # (the port is taken on another of the addresses: another port)
        for s in socks:
            s.close()


@contextlib.contextmanager
def gunicorn(py, app, cwd, workers, probe, log):
    """Serves the WSGI ``app`` (gunicorn's ``module:variable``, imported
    from ``cwd``) with the gunicorn of ``py``'s venv, at ``localhost`` on
    a port the kernel chose free: the sockets are bound and listening here
    and handed to gunicorn (``fd://``), so that no other program can take
    the port in between. Yields the server's address once it has answered
    a request for ``probe`` (a path); stops it on exit. Its log goes to
    ``log``."""
    socks, port = localhost_sockets()
    url = f"http://localhost:{port}/"
    binds = [a for s in socks for a in ("--bind", f"fd://{s.fileno()}")]
    with open(log, "wb") as out:
        server = subprocess.Popen([str(py), "-m", "gunicorn", *binds, "--workers", str(workers), app], cwd=cwd,
                                  pass_fds=[s.fileno() for s in socks], stdout=out, stderr=subprocess.STDOUT)
    # (this process's copies of the sockets are closed: should gunicorn
    # exit, the request below is refused rather than left waiting)
    for s in socks:
        s.close()
    try:
        try:
            # (straight to the server, whatever proxy the environment names)
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url + probe, timeout=120).read()
        except OSError as e:
            sys.exit(f"real-projects: gunicorn serving {app} at {url} did not answer {probe} ({e}):\n"
                     f"{log.read_text(errors='replace')[-4000:]}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)


@contextlib.contextmanager
def acc_servers(py, into):
    """The servers aiohttp-client-cache's tests request from, served by the
    venv of ``py`` from its tree unpacked in ``into``: httpbin, and the
    Flask app of its ``test/server``. Yields the environment that points
    the tests at them: ``HTTPBIN_URL`` (their conftest's) and
    ``HTTPBIN_CUSTOM_URL`` (``plugins/acc_custom_server.py``)."""
    into.mkdir(parents=True, exist_ok=True)
    tree = unpack("aiohttp-client-cache", into)
    with gunicorn(py, "httpbin:app", tree, 2, "get", into / "httpbin.log") as httpbin, \
            gunicorn(py, "server:app", tree / "test", 1, "cache/1", into / "custom-server.log") as custom:
        yield {"HTTPBIN_URL": httpbin, "HTTPBIN_CUSTOM_URL": custom}


#: The servers a suite's tests need, started once for all its runs: a
#: context manager of (a python of the suite's venvs, a directory of its
#: own) yielding the environment that names them to the tests.
SERVERS = {"aiohttp-client-cache": acc_servers}

#: The suites whose every test must pass with aiofiles: those that request
#: from the servers ``SERVERS`` starts.
ALL_PASS = set(SERVERS)

#: The suites whose tests get a temporary directory of their own in each
#: run: aiohttp-client-cache's file cache lives in the temporary directory
#: under fixed names (``pytest_cache_0``...), which its runs elsewhere on
#: the machine would share.
OWN_TMPDIR = {"aiohttp-client-cache"}


def run_all(pys, chosen):
    """{(run, suite): (outcomes, seconds, pytest's output)} for the
    ``chosen`` suites."""
    results = {}
    with contextlib.ExitStack() as servers:
        served = {name: servers.enter_context(start(pys[venv_name(name, False)], WORK / f"servers-{name}"))
                  for name, start in SERVERS.items() if name in chosen}
        for n, (kind, compat, env, suites) in enumerate(RUNS):
            trees = WORK / f"src-{n}"
            trees.mkdir(parents=True, exist_ok=True)
            for name in [s for s in suites if s in chosen]:
                tree = unpack(name, trees)
                if name == "aiocsv":
                    # Its sdist lacks the CSV files its tests read: made from
                    # the values the tests expect, with the csv module.
                    sh(pys[venv_name(name, compat)], HERE / "aiocsv_data.py", cwd=tree)
                report = trees / f"{name}.xml"
                report.unlink(missing_ok=True)
                suite_env = {**env, **served.get(name, {}),
                             "REAL_PROJECTS_AIOFILES": "blockio-aiofiles" if compat else "aiofiles"}
                if name in OWN_TMPDIR:
                    suite_env["TMPDIR"] = str(tree / ".tmp")
                    os.mkdir(suite_env["TMPDIR"])
                results[kind, name] = run_suite(pys[venv_name(name, compat)], name, tree, report, suite_env)
    return results


def main():
    os.chdir(ROOT)
    args = sys.argv[1:]
    venvs_only = "--venvs" in args
    args = [a for a in args if a != "--venvs"]
    chosen = args or list(SUITES)
    unknown = [s for s in chosen if s not in SUITES]
    if unknown:
        sys.exit(f"real-projects: no suite named {', '.join(unknown)} (the suites: {', '.join(SUITES)})")
    # (the venvs are made two at a time: mostly downloads; the suites then
    # run one at a time, so that no test of theirs runs on a busier machine
    # in one run than in the other)
    needed = {(venv_name(s, compat), compat, REQUIREMENTS.get(s, "requirements.txt"))
              for s in chosen for compat in (False, True)}
    make = pinned_part if venvs_only else make_venv
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        made = {name: pool.submit(make, WORK / name, compat, req) for name, compat, req in sorted(needed)}
        pys = {name: f.result() for name, f in made.items()}
    if venvs_only:
        print(f"real-projects: {len(pys)} venvs ready (without blockio) in {WORK}")
        return
    results = run_all(pys, chosen)
    failed = False
    print("real-projects: each suite's tests with aiofiles, then with blockio's compatibility package")
    for name in chosen:
        theirs, took, out = results["aiofiles", name]
        print(f"  {name}, aiofiles: {counts(theirs)} ({took:.0f} s)")
        if "passed" not in theirs.values():
            # (a suite that cannot even be collected compares equal to itself)
            failed = True
            print(f"    no test of {name} passed with aiofiles:", out.stdout[-6000:], out.stderr[-2000:])
        elif name in ALL_PASS and set(theirs.values()) != {"passed"}:
            # (a server of ours not serving what the tests expect would
            # fail them alike in every run)
            failed = True
            print(f"    not every test of {name} passed with aiofiles:", out.stdout[-6000:], out.stderr[-2000:])
        for kind, _, _, suites in RUNS[1:]:
            if name not in suites:
                continue
            ours, took, out = results[kind, name]
            print(f"  {name}, {kind}: {counts(ours)} ({took:.0f} s)")
            differ = sorted(t for t in set(theirs) | set(ours) if theirs.get(t) != ours.get(t))
            for t in differ:
                print(f"    {t}: {theirs.get(t, 'not run')} with aiofiles, {ours.get(t, 'not run')} with {kind}")
            if differ or not ours:
                failed = True
                print(out.stdout[-6000:], out.stderr[-2000:])
    if failed:
        sys.exit("real-projects: the compatibility package's results differ from aiofiles'")
    same = sum(len(results[kind, name][0]) for kind, _, _, suites in RUNS[1:] for name in suites if name in chosen)
    print(f"real-projects: the outcome of each of the {same} tests is the same with blockio as with aiofiles")


if __name__ == "__main__":
    main()
