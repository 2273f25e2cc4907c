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
