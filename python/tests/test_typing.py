"""The package's types, as a user sees them: ``mypy --strict`` on a script
that calls every public function (which is then run, so its assertions
hold), and ``mypy.stubtest`` on the Rust core's stubs. Both check the
installed package, from a directory outside the source tree."""

import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "typing" / "user_script.py"


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_script_using_every_public_call_passes_mypy_strict(tmp_path):
    script = tmp_path / "user_script.py"
    shutil.copy(SCRIPT, script)
    out = run(["mypy", "--strict", "--no-incremental", str(script)], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    ran = subprocess.run([sys.executable, str(script), str(tmp_path / "data.txt")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr


def test_a_type_error_is_caught(tmp_path):
    """The check above can fail: a str written to a binary file is an error."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import blockio\n"
        "async def f() -> None:\n"
        "    async with blockio.open('x', 'rb') as fb:\n"
        "        await fb.write('text')\n"
        "    async with blockio.open('x') as ft:\n"
        "        b: bytes = await ft.read()\n"
    )
    out = run(["mypy", "--strict", "--no-incremental", str(bad)], tmp_path)
    assert out.returncode == 1 and "bad.py:6" in out.stdout, out.stdout


def test_the_core_stubs_match_the_extension(tmp_path):
    out = run(["mypy.stubtest", "blockio._blockio"], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_path_where_a_file_is_needed_is_a_type_error(tmp_path):
    """``FileLike`` is an int or an object with ``fileno()``: mypy refuses a
    path (a str), which would fail at run time."""
    bad = tmp_path / "bad_file.py"
    bad.write_text(
        "import blockio\n"
        "e = blockio.Engine()\n"
        "with open('x', 'rb') as f:\n"
        "    ok = e.read_batch(f, offsets=[0], length=1)\n"
        "    ok2 = e.read_batch(3, offsets=[0], length=1)\n"
        "bad = e.read_batch('x', offsets=[0], length=1)\n"
    )
    out = run(["mypy", "--strict", "--no-incremental", str(bad)], tmp_path)
    assert out.returncode == 1 and "bad_file.py:6" in out.stdout and "bad_file.py:4" not in out.stdout, out.stdout


def test_the_package_itself_passes_mypy_strict_on_old_and_new_pythons(tmp_path):
    """The package's own annotations and the core's stubs hold together:
    what the core hands back (waiters, results) is typed, so a caller that
    misuses it is caught. 3.12 takes ``Buffer`` from ``collections.abc``,
    older versions from ``typing_extensions``."""
    for version in ("3.11", "3.12"):
        out = run(["mypy", "--strict", "--no-incremental", "--python-version", version, "-p", "blockio"], tmp_path)
        assert out.returncode == 0, version + "\n" + out.stdout + out.stderr


def test_the_core_stubs_name_real_types_not_any():
    """Every argument and result of the core's stubs has its real type:
    ``Any`` is neither imported nor used there."""
    import ast

    import blockio

    stub = Path(blockio.__file__).parent / "_blockio.pyi"
    names = {n.id for n in ast.walk(ast.parse(stub.read_text())) if isinstance(n, ast.Name)}
    imported = {a.name for n in ast.walk(ast.parse(stub.read_text())) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "Any" not in names | imported
    assert "Buffer" in imported


def test_a_misused_waiter_is_a_type_error(tmp_path):
    """A waiter is ``(future or None, anything kept alive)``, handed back
    with its results: a waiter that holds no future, and a call the future
    does not have, are caught by mypy."""
    bad = tmp_path / "bad_waiter.py"
    bad.write_text(
        "import asyncio\n"
        "from typing import Any, List\n"
        "from blockio._blockio import Core\n"
        "def f(core: Core, fut: 'asyncio.Future[List[Any]]') -> None:\n"
        "    core.submit_size((fut, None), 0)\n"
        "    core.submit_size((None, object()), 0)\n"
        "    core.submit_size((1, None), 0)\n"
        "    for (waiting, _), results in core.drain():\n"
        "        if waiting is not None:\n"
        "            waiting.done()\n"
        "            waiting.not_a_method()\n"
    )
    out = run(["mypy", "--strict", "--no-incremental", str(bad)], tmp_path)
    lines = {line.split(":")[1] for line in out.stdout.splitlines() if line.startswith("bad_waiter.py:")}
    assert out.returncode == 1 and lines == {"7", "11"}, out.stdout
