"""blockio's compatibility package (``python/compat``, imported as
``aiofiles``), against aiofiles itself where it is called.

The package is imported in a child process whose ``sys.path`` has
``python/compat`` first, so that its ``aiofiles`` is found before the
installed one; the reference runs with the installed aiofiles. (quart's,
sanic's, aiocsv's, aiogram's, aiohttp-client-cache's and aiofiles' own
suites run on it in ``scripts/python-real-projects``.)"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

COMPAT = Path(__file__).resolve().parents[1] / "compat"


def run_py(code, compat, stdin=b"", stdout=None, backend="auto"):
    """``code`` in a child Python, with the compatibility package as
    ``aiofiles`` (``compat``) or the installed aiofiles; its stdout's
    bytes (unless ``stdout`` is given, a file it goes to)."""
    env = {**os.environ, "BLOCKIO_BACKEND": backend}
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONUNBUFFERED", None)  # (sys.stdout holds what print() writes, as it usually does)
    if compat:
        env["PYTHONPATH"] = str(COMPAT)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=stdin,
                         stdout=stdout if stdout is not None else subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


def test_the_package_is_blockio_open_and_blockio_os():
    out = run_py("""
        import aiofiles, aiofiles.os, aiofiles.ospath, aiofiles.base, aiofiles.tempfile
        import aiofiles.threadpool, aiofiles.threadpool.binary, aiofiles.threadpool.text
        import blockio, blockio.os, blockio.ospath
        assert aiofiles.open is aiofiles.threadpool.open
        assert aiofiles.threadpool.sync_open is open  # (not replaced: every file is blockio's)
        async def main():
            async with aiofiles.open(__file__ if False else "/dev/null", "rb") as f:
                assert isinstance(f, blockio.AsyncFile), f
        import asyncio
        asyncio.run(main())
        assert aiofiles.os.stat is blockio.os.stat and aiofiles.os.wrap is blockio.os.wrap
        assert aiofiles.os.path is aiofiles.ospath
        assert aiofiles.ospath.exists is blockio.ospath.exists
        assert sorted(aiofiles.os.__all__) == sorted(blockio.os.__all__)
        print(aiofiles.__file__)
    """, compat=True)
    assert Path(out.decode().strip()).is_relative_to(COMPAT)


#: For each way of opening, which of aiofiles' classes the file is an
#: instance of, and whether ``open``'s result is an AiofilesContextManager.
KINDS = """
    import asyncio, json, sys
    import aiofiles
    from aiofiles.base import AiofilesContextManager, AsyncBase
    from aiofiles.threadpool.binary import AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO
    from aiofiles.threadpool.text import AsyncTextIOWrapper

    CLASSES = [AsyncBase, AsyncBufferedIOBase, AsyncBufferedReader, AsyncFileIO, AsyncTextIOWrapper]

    async def main(path):
        out = {}
        for mode, buffering in [("rb", -1), ("rb+", -1), ("wb", -1), ("ab", -1), ("rb", 0), ("wb", 0),
                                ("r", -1), ("w+", -1)]:
            opener = aiofiles.open(path, mode, buffering=buffering)
            async with opener as f:
                out[f"{mode} {buffering}"] = [isinstance(opener, AiofilesContextManager)] + [
                    isinstance(f, c) for c in CLASSES]
        return out

    print(json.dumps(asyncio.run(main(sys.argv[1]))))
"""


def test_files_are_instances_of_the_classes_aiofiles_gives(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    code = KINDS.replace("sys.argv[1]", repr(str(p)))
    theirs = json.loads(run_py(code, compat=False))
    ours = json.loads(run_py(code, compat=True))
    assert ours == theirs
    assert theirs["rb -1"] == [True, True, True, True, False, False]  # (the reference tells kinds apart)


STDIO = """
    import asyncio, sys
    import aiofiles

    async def main():
        first = await aiofiles.stdin.readline()
        second = await aiofiles.stdin.read(3)
        rest = await aiofiles.stdin.read()
        print("printed before")
        await aiofiles.stdout.write(f"[{first!r} {second!r} {rest!r}]\\n")
        print("printed between")
        await aiofiles.stdout.writelines(["two ", "lines\\n"])
        await aiofiles.stderr.write("to stderr\\n")
        print("printed after")

    asyncio.run(main())
"""


@pytest.mark.parametrize("backend", ["auto", "threads"])
@pytest.mark.parametrize("to_file", [False, True], ids=["pipe", "file"])
def test_standard_streams_on_descriptors_read_and_write_in_order_as_aiofiles(tmp_path, backend, to_file):
    """stdin a pipe, stdout a pipe or a regular file: reads keep what they
    read ahead for the next, writes land in the order made, between the
    program's own prints."""
    outs = []
    for compat in (False, True):
        if to_file:
            path = tmp_path / f"out-{compat}"
            with open(path, "wb") as f:
                run_py(STDIO, compat, stdin=b"line one\nxyz and the rest\n", stdout=f, backend=backend)
            outs.append(path.read_bytes())
        else:
            outs.append(run_py(STDIO, compat, stdin=b"line one\nxyz and the rest\n", backend=backend))
    assert outs[1] == outs[0]
    assert outs[0] == (b"printed before\n['line one\\n' 'xyz' ' and the rest\\n']\n"
                       b"printed between\ntwo lines\nprinted after\n")


BOM_WRITES = """
    import asyncio
    import aiofiles

    async def main():
        print("p1")
        await aiofiles.stdout.write("a1\\n")
        await aiofiles.stdout.writelines(["a2", "\\n"])
        print("p2")
        await aiofiles.stdout.write("a3\\n")

    asyncio.run(main())
"""


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
@pytest.mark.parametrize("to_file", [False, True], ids=["pipe", "file"])
def test_text_writes_to_a_stream_with_a_bom_codec_add_no_bom_in_the_middle(tmp_path, monkeypatch, encoding, to_file):
    """``aiofiles.stdout`` on a pipe with a codec that writes a BOM
    (``PYTHONIOENCODING=utf-16``): each write made a file of its own whose
    encoder took the pipe for a fresh start and wrote the BOM before every
    write, in the middle of the output; the bytes are aiofiles' (whose
    writes go through ``sys.stdout``), on a regular file too."""
    monkeypatch.setenv("PYTHONIOENCODING", encoding)
    outs = []
    for compat in (False, True):
        if to_file:
            path = tmp_path / f"out-{compat}"
            with open(path, "wb") as f:
                run_py(BOM_WRITES, compat, stdout=f)
            outs.append(path.read_bytes())
        else:
            outs.append(run_py(BOM_WRITES, compat))
    assert outs[1] == outs[0]
    assert outs[0].decode(encoding).replace("\ufeff", "") == "p1\na1\na2\np2\na3\n"


STDIN_BYTES = """
    import asyncio
    import aiofiles

    async def main():
        head = await aiofiles.stdin_bytes.read(3)
        line = await aiofiles.stdin_bytes.readline()
        rest = await aiofiles.stdin_bytes.read()
        await aiofiles.stdout_bytes.write(repr([head, line, rest]).encode())

    asyncio.run(main())
"""


@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_standard_input_bytes_keep_what_was_read_ahead_as_aiofiles(backend):
    data = b"abcdef\nsecond line\n" + b"z" * 100_000
    theirs = run_py(STDIN_BYTES, False, stdin=data, backend=backend)
    assert run_py(STDIN_BYTES, True, stdin=data, backend=backend) == theirs
    assert theirs == repr([b"abc", b"def\n", b"second line\n" + b"z" * 100_000]).encode()


TEMPFILES = """
    import asyncio, json, os
    import aiofiles.tempfile as t

    async def main():
        seen = {}
        async with t.NamedTemporaryFile("w+", delete_on_close=True) as f:
            await f.write("x")
            await f.close()
            seen["delete_on_close: after close"] = os.path.exists(f.name)
        async with t.NamedTemporaryFile("wb+", delete_on_close=False) as f:
            await f.write(b"x")
            await f.close()
            seen["kept: after close"] = os.path.exists(f.name)
        seen["kept: after exit"] = os.path.exists(f.name)
        async with t.NamedTemporaryFile("wb", delete=False) as f:
            name = f.name
        seen["not deleted: after exit"] = os.path.exists(name)
        os.unlink(name)
        async with t.TemporaryFile("w+") as f:
            await f.write("one\\ntwo\\n")
            await f.seek(0)
            seen["unnamed"] = [type(f.name).__name__, [line async for line in f]]
        async with t.TemporaryDirectory(prefix="p", suffix="s") as d:
            seen["dir"] = [os.path.isdir(d), os.path.basename(d)[0] + d[-1]]
        seen["dir after"] = os.path.exists(d)
        return seen

    print(json.dumps(asyncio.run(main())))
"""


def test_temporary_files_are_kept_and_removed_as_named_temporary_file_does():
    # (as tempfile.NamedTemporaryFile of Python 3.12, which aiofiles follows
    # there; its delete_on_close is taken on every version here)
    assert json.loads(run_py(TEMPFILES, compat=True)) == {
        "delete_on_close: after close": False, "kept: after close": True, "kept: after exit": False,
        "not deleted: after exit": True, "unnamed": ["int", ["one\n", "two\n"]], "dir": [True, "ps"],
        "dir after": False,
    }


#: aiofiles' README "Writing tests" pattern (as aiogram's tests use it): the
#: mock's type registered with ``wrap``, ``sync_open`` replaced; then what
#: the mock was called with, and which calls are awaitable.
MOCKED = """
    import asyncio, json
    from unittest.mock import MagicMock, patch
    import aiofiles, aiofiles.threadpool
    from aiofiles.threadpool.binary import AsyncBufferedIOBase

    aiofiles.threadpool.wrap.register(MagicMock)(
        lambda *args, **kwargs: aiofiles.threadpool.AsyncBufferedIOBase(*args, **kwargs))

    async def main():
        mock_file = MagicMock()
        mock_file.read.return_value = b"mocked"
        with patch("aiofiles.threadpool.sync_open", return_value=mock_file) as sync_open:
            async with aiofiles.open("/nonexistent/x", "wb", buffering=0) as f:
                await f.write(b"data")
                got = await f.read(3)
                kind = isinstance(f, AsyncBufferedIOBase)
                readable = f.readable()  # (called directly, as aiofiles')
                awaited = asyncio.iscoroutine(f.seekable())
        mock_file.write.assert_called_once_with(b"data")
        mock_file.read.assert_called_once_with(3)
        try:
            aiofiles.threadpool.wrap(object())
        except TypeError as e:
            unsupported = str(e).startswith("Unsupported io type")
        return [got.decode(), kind, isinstance(readable, MagicMock), awaited, mock_file.__exit__.call_count,
                mock_file.close.call_count, sync_open.call_args.args, sorted(sync_open.call_args.kwargs.items()), unsupported]

    print(json.dumps(asyncio.run(main()), default=str))
"""


def test_the_writing_tests_pattern_of_aiofiles_readme_works_as_with_aiofiles():
    """``wrap.register(MagicMock)`` and a patched ``sync_open``: ``open``
    hands the mock to the registered wrapper, whose calls reach the mock;
    the same results as with aiofiles. (Without ``wrap`` and the
    ``sync_open`` hook, aiogram's ``test_download_file`` failed.)"""
    theirs = json.loads(run_py(MOCKED, compat=False))
    ours = json.loads(run_py(MOCKED, compat=True))
    assert ours == theirs
    assert theirs[:6] == ["mocked", True, True, True, 1, 0]


#: Which of a file's calls are awaitable, per kind of file.
AWAITABLE = """
    import asyncio, inspect, json, sys
    import aiofiles, aiofiles.tempfile

    async def main(path):
        out = {}
        for mode, buffering in [("r", -1), ("w", -1), ("r+", -1), ("rb", -1), ("wb", 0)]:
            async with aiofiles.open(path, mode, buffering=buffering) as f:
                row = []
                for name in ("readable", "writable", "seekable"):
                    got = getattr(f, name)()
                    if inspect.isawaitable(got):
                        got = ["awaited", await got]
                    row.append(got)
                out[f"{mode} {buffering}"] = row
        async with aiofiles.tempfile.SpooledTemporaryFile(max_size=10) as f:
            await f.write(b"x" * 5)
            await f.rollover()
            await f.write(b"y" * 20)
            await f.seek(0)
            out["spooled"] = [(await f.read()).decode(), inspect.isawaitable(f.fileno())]
        async with aiofiles.tempfile.SpooledTemporaryFile(mode="w+") as f:
            await f.write("text")
            await f.rollover()
            await f.seek(0)
            out["spooled text"] = await f.read()
        return out

    print(json.dumps(asyncio.run(main(sys.argv[1]))))
"""


@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_readable_writable_seekable_and_rollover_are_awaitable_as_aiofiles(tmp_path, backend):
    """A text file's ``readable``, ``writable`` and ``seekable`` are
    awaitable (a binary file's ``readable`` is not), as aiofiles' are; a
    spooled temporary file has an awaitable ``rollover`` (and ``fileno``),
    after which it reads back all that was written."""
    p = tmp_path / "f"
    p.write_bytes(b"x")
    code = AWAITABLE.replace("sys.argv[1]", repr(str(p)))
    theirs = json.loads(run_py(code, compat=False))
    ours = json.loads(run_py(code, compat=True, backend=backend))
    assert ours == theirs
    assert theirs["r -1"][0] == ["awaited", True] and theirs["rb -1"][0] is True
    assert theirs["spooled"] == ["x" * 5 + "y" * 20, True]


#: A spooled temporary file of each mode past its ``max_size``, and names
#: of aiofiles' modules that code for type hints imports.
SPOOLED_AND_NAMES = """
    import asyncio, json, os
    import aiofiles, aiofiles.os, aiofiles.tempfile, aiofiles.threadpool
    from aiofiles.tempfile.temptypes import AsyncSpooledTemporaryFile, AsyncTemporaryDirectory

    async def main():
        out = []
        for mode in ("w+b", "w+"):
            async with aiofiles.tempfile.SpooledTemporaryFile(max_size=10, mode=mode) as f:
                data = b"x" * 20 if "b" in mode else "x" * 20
                out.append([await f.write(data), await f.seek(0), await f.read() == data])
        return out

    names = [hasattr(aiofiles.threadpool, n) for n in ("AsyncTextIndirectIOWrapper", "AsyncIndirectBufferedIOBase")]
    print(json.dumps([asyncio.run(main()), names, aiofiles.os.os is os]))
"""


def _installed_over_aiofiles(tmp_path):
    """A directory holding aiofiles as pip leaves it when the compatibility
    package is installed over an installed aiofiles: aiofiles' files, then
    the package's written over them (those it lacks stay)."""
    import shutil

    theirs = json.loads(run_py("import aiofiles, json, os; print(json.dumps(os.path.dirname(aiofiles.__file__)))",
                               compat=False))
    site = tmp_path / "site"
    shutil.copytree(theirs, site / "aiofiles", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(COMPAT / "aiofiles", site / "aiofiles", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_spooled_files_and_type_names_as_aiofiles_also_installed_over_it(tmp_path, backend):
    theirs = json.loads(run_py(SPOOLED_AND_NAMES, compat=False))
    assert theirs == [[[20, 0, True], [20, 0, True]], [True, True], True]
    assert json.loads(run_py(SPOOLED_AND_NAMES, compat=True, backend=backend)) == theirs
    # (installed over aiofiles, its `tempfile` package must replace
    # aiofiles' own, which a module `tempfile.py` beside it would not)
    site = _installed_over_aiofiles(tmp_path)
    env = {**os.environ, "BLOCKIO_BACKEND": backend, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SPOOLED_AND_NAMES)], capture_output=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout) == theirs
    where = subprocess.run([sys.executable, "-c", "import aiofiles.tempfile as t, blockio; print(t.blockio.__name__)"],
                           capture_output=True, env=env, timeout=120)
    assert where.stdout.decode().strip() == "blockio", where.stderr.decode()


#: The public names of aiofiles' modules (code imports the standard
#: library's names from them too: ``from aiofiles.threadpool import
#: FileIO``).
MODULE_NAMES = """
    import importlib, json
    MODULES = ["aiofiles", "aiofiles.os", "aiofiles.ospath", "aiofiles.base", "aiofiles.threadpool",
               "aiofiles.threadpool.binary", "aiofiles.threadpool.text", "aiofiles.threadpool.utils",
               "aiofiles.tempfile", "aiofiles.tempfile.temptypes"]
    print(json.dumps({m: sorted(n for n in dir(importlib.import_module(m)) if not n.startswith("_"))
                      for m in MODULES}))
"""


def test_every_public_name_of_aiofiles_modules_is_there():
    theirs = json.loads(run_py(MODULE_NAMES, compat=False))
    ours = json.loads(run_py(MODULE_NAMES, compat=True))
    assert "delegate_to_executor" in theirs["aiofiles.threadpool.utils"]
    assert "AiofilesContextManagerTempDir" in theirs["aiofiles.tempfile"]
    assert {m: sorted(set(names) - set(ours[m])) for m, names in theirs.items()} == {m: [] for m in theirs}


#: A class of its own made with ``aiofiles.threadpool.utils``' decorators
#: around a synchronous file that records each call and the thread it ran
#: on (the executor's threads are named ``mine``), before and after the
#: file rolls over (``_rolled``).
UTILS = """
    import asyncio, json, threading
    from concurrent.futures import ThreadPoolExecutor
    from aiofiles.tempfile import AiofilesContextManagerTempDir, TemporaryDirectory
    from aiofiles.threadpool.utils import (cond_delegate_to_executor, delegate_to_executor,
                                           proxy_method_directly, proxy_property_directly)

    class Recorder:
        def __init__(self, rolled):
            self._rolled, self.calls, self.name, self.closed = rolled, [], "rec", False
        def _note(self, what, *args):
            self.calls.append([what, list(args), threading.current_thread().name.split("_")[0]])
        def read(self, n=-1):
            self._note("read", n)
            return b"x" * n
        def seek(self, at, whence=0):
            self._note("seek", at, whence)
            return at
        def write(self, b):
            self._note("write", b.decode())
            return len(b)
        def tell(self):
            self._note("tell")
            return 7
        def fileno(self):
            self._note("fileno")
            return 3
        def fail(self):
            self._note("fail")
            raise ValueError("failed in the file")

    @delegate_to_executor("read", "seek", "fail")
    @cond_delegate_to_executor("write", "tell")
    @proxy_method_directly("fileno")
    @proxy_property_directly("name", "closed")
    class Wrapper:
        def __init__(self, file, executor):
            self._file, self._executor = file, executor
        @property
        def _loop(self):
            return asyncio.get_running_loop()

    async def main():
        out = {}
        with ThreadPoolExecutor(2, thread_name_prefix="mine") as ex:
            for rolled in (False, True):
                f = Recorder(rolled)
                w = Wrapper(f, ex)
                got = [await w.read(3), await w.seek(5, whence=1), await w.write(b"ab"), await w.tell(),
                       w.fileno(), w.name, w.closed]
                try:
                    await w.fail()
                except ValueError as e:
                    got.append(repr(e))
                out[str(rolled)] = [repr(g) for g in got] + [f.calls]
        out["coroutines"] = {n: asyncio.iscoroutinefunction(getattr(Wrapper, n))
                             for n in ("read", "seek", "write", "tell", "fileno", "fail")}
        out["properties"] = sorted(n for n in ("name", "closed") if isinstance(Wrapper.__dict__[n], property))
        try:
            w.name = "other"
            out["set"] = "set"
        except AttributeError:
            out["set"] = "AttributeError"
        manager = TemporaryDirectory()
        async with manager as d:
            out["tempdir"] = [isinstance(manager, AiofilesContextManagerTempDir), type(d).__name__]
        return out

    print(json.dumps(asyncio.run(main())))
"""


def test_threadpool_utils_decorators_make_the_methods_aiofiles_makes():
    theirs = json.loads(run_py(UTILS, compat=False))
    assert theirs["True"][-1] == [["read", [3], "mine"], ["seek", [5, 1], "mine"], ["write", ["ab"], "mine"],
                                  ["tell", [], "mine"], ["fileno", [], "MainThread"], ["fail", [], "mine"]]
    assert theirs["False"][-1][2:4] == [["write", ["ab"], "MainThread"], ["tell", [], "MainThread"]]
    assert theirs["tempdir"] == [True, "str"] and theirs["set"] == "AttributeError"
    assert json.loads(run_py(UTILS, compat=True)) == theirs
