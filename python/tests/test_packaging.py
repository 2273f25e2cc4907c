"""The user's install route: ``pip install ./python`` into a plain venv,
and the message a machine without Rust gets instead of a toolchain
download."""

import os
import subprocess
import sys
import venv
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent


def make_venv(where: Path) -> Path:
    venv.create(where, with_pip=True, system_site_packages=False)
    return where / "bin" / "python"


def test_pip_install_into_a_plain_venv(tmp_path):
    py = make_venv(tmp_path / "venv")
    # The workspace's target directory: the build reuses what the test
    # setup compiled.
    env = {**os.environ, "CARGO_TARGET_DIR": str(REPO / "target")}
    out = subprocess.run([str(py), "-m", "pip", "install", "-q", str(PYTHON_DIR)], env=env,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    check = ("import blockio, importlib.metadata as m; "
             "print(blockio.__version__); print(m.metadata('blockio')['Description'][:40])")
    got = subprocess.run([str(py), "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    version, description = got.stdout.splitlines()[:2]
    assert version == "0.1.0"
    assert description.startswith("# blockio for Python")


def test_a_build_without_rust_says_what_to_install(tmp_path):
    py = make_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO_HOME", "RUSTUP_HOME")}
    env["PATH"] = f"{py.parent}:/usr/local/bin:/usr/bin:/bin"  # no ~/.cargo/bin
    assert subprocess.run(["sh", "-c", "command -v cargo"], env=env).returncode != 0, "cargo is in a system path"
    out = subprocess.run([str(py), "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "w"), str(PYTHON_DIR)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "no `cargo` was found" in text and "sh.rustup.rs" in text, text[-3000:]
    assert "puccinialin" not in text


def test_import_leaves_package_metadata_until_the_version_is_asked_for():
    # importlib.metadata is half of `import blockio`'s time and some 3.5 MB
    # of address space: only `blockio.__version__` needs it.
    check = ("import sys, blockio; print('importlib.metadata' in sys.modules); "
             "v = blockio.__version__; import importlib.metadata as m; "
             "print(v == m.version('blockio'), v is blockio.__version__, 'nope' in dir(blockio))")
    got = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["False", "True", "True", "False"]
    missing = subprocess.run([sys.executable, "-c", "import blockio; blockio.nope"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert "AttributeError: module 'blockio' has no attribute 'nope'" in missing.stderr
