"""aiofiles' own tests of ``aiofiles.open`` and ``aiofiles.os``, run
against ``blockio.open`` and ``blockio.os``.

The pinned sdist is downloaded at test time (pip, checked against its
sha256), its ``tests/threadpool``, ``tests/test_simple.py`` and
``tests/test_os.py`` run with our ``aiofiles_suite/blockio_conftest.py``
beside them as their ``conftest.py``. Every test must pass but those in
``INTERNALS``, which test aiofiles' own machinery rather than the file
interface, and those in ``AS_ROOT`` when the suite runs as root; python/README.md
lists them too. aiofiles' ``tempfile`` and stdio tests, whose modules
blockio itself does not have, run on the compatibility package
(``python/compat``) in ``scripts/python-real-projects``, with the whole
suite.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

AIOFILES = "25.1.0"
SHA256 = "a8d728f0a29de45dc521f18f07297428d56992a742f0cd2701ba86e44d23d5b2"

#: Tests that need aiofiles' internals, and why.
INTERNALS = {
    # Slows down aiofiles' private `sync_open` hook with a 1 s sleep to see
    # the loop keep ticking; blockio.open never calls that hook, so the
    # open is not slow and the tick count it asserts is not reached.
    # test_open_does_not_block_the_loop covers the same property.
    "tests/threadpool/test_concurrency.py::test_slow_file",
}

#: Tests that cannot pass as root, on aiofiles itself either, and why.
AS_ROOT = {
    # Expects os.access(W_OK) to be False on a 0o444 file; root may write
    # it, so os.access (and aiofiles.os.access, and blockio.os.access) say
    # True.
    "tests/test_os.py::test_access",
}


def fetch_suite(into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         f"aiofiles=={AIOFILES}", "-d", str(into)],
        check=True,
    )
    sdist = into / f"aiofiles-{AIOFILES}.tar.gz"
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert digest == SHA256, f"aiofiles {AIOFILES} sdist has sha256 {digest}, expected {SHA256}"
    with tarfile.open(sdist) as t:
        t.extractall(into, filter="data") if sys.version_info >= (3, 12) else t.extractall(into)
    return into / f"aiofiles-{AIOFILES}"


def test_aiofiles_suite_passes_on_blockio_open(tmp_path):
    import aiofiles  # the installed aiofiles must be the suite's version

    assert getattr(aiofiles, "__version__", AIOFILES) in (AIOFILES,), aiofiles.__file__
    root = fetch_suite(tmp_path)
    shutil.copy(Path(__file__).parent / "aiofiles_suite" / "blockio_conftest.py", root / "tests" / "conftest.py")
    calls = tmp_path / "calls"
    report = tmp_path / "report.xml"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
            "tests/threadpool", "tests/test_simple.py", "tests/test_os.py"]
    left_out = INTERNALS | (AS_ROOT if os.geteuid() == 0 else set())
    args += [f"--deselect={t}" for t in left_out]
    out = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "BLOCKIO_OPEN_CALLS": str(calls)})
    cases = ET.parse(report).getroot().iter("testcase")
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in cases
              if c.find("failure") is not None or c.find("error") is not None]
    assert out.returncode == 0 and not failed, out.stdout[-6000:] + out.stderr[-2000:]
    passed = int(ET.parse(report).getroot().find("testsuite").get("tests")) - len(failed)
    # 154 tests of open and 38 of os: all but the deselected ones ran and passed.
    assert passed == 154 + 38 - len(left_out), out.stdout[-2000:]
    opens, os_calls = map(int, calls.read_text().split())
    # All but a few (a server that reads synchronously, wrap()) open files.
    assert opens >= 140, "aiofiles' tests did not go through blockio.open"
    assert os_calls >= 70, "aiofiles' os tests did not go through blockio.os"
