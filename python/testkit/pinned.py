"""What the runners of other projects' test suites share: a download kept
while its sha256 is the pinned one, and a venv kept while its pinned
requirements are the same, with blockio's wheel installed anew.

Not part of the ``blockio`` package: the runners load it by putting this
directory (which holds nothing named ``blockio``) on ``sys.path``.
"""

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sh(*args, **kwargs):
    """Runs a command (its arguments made strings); raises if it fails."""
    return subprocess.run([str(a) for a in args], check=True, **kwargs)


def sha256(path):
    """The sha256 of the file ``path``, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pinned_file(path, digest, download, who):
    """``path``, fetched by ``download()`` unless already there with the
    pinned sha256 ``digest``; exits naming the file when what was fetched
    has another. ``who`` begins the message."""
    if path.exists() and sha256(path) == digest:
        return path
    download()
    got = sha256(path) if path.exists() else "(no file)"
    if got != digest:
        sys.exit(f"{who}: {path} has sha256 {got}, expected {digest}")
    return path


def pip_download(spec, into, no_binary=":all:"):
    """Downloads the sdist of ``spec`` (``name==version``) into ``into``
    with pip, without its dependencies; ``no_binary``: the packages pip
    must not take as wheels."""
    sh(sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
       "--no-binary", no_binary, spec, "-d", into)


def debian_archive():
    """The address of the Debian archive apt is configured with (its main
    suite's, not the security one's), ending in ``/``. apt knows it once
    its lists have been fetched: ``apt-get update`` first if they have not."""
    for attempt in range(2):
        out = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE)"], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            uri, release = line.split()
            if "-" not in release:
                return uri if uri.endswith("/") else uri + "/"
        if attempt == 0:
            sh(*([] if os.geteuid() == 0 else ["sudo"]), "apt-get", "update", "-qq")
    sys.exit("apt is configured with no Debian archive (apt-get indextargets)")


def apt_download(what, path, digest):
    """Downloads ``what``, a path in the Debian archive apt is configured
    with (``pool/main/...``), to ``path`` with apt's ``apt-helper``, which
    checks it against the sha256 ``digest``."""
    # (as the user running this, into its own directory: not as apt's "_apt")
    sh("/usr/lib/apt/apt-helper", "-o", "APT::Sandbox::User=" + pwd.getpwuid(os.geteuid()).pw_name,
       "download-file", debian_archive() + what, path, f"SHA256:{digest}")


def pip_install(py):
    """The command that installs into the venv of ``py`` with pip."""
    return [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]


def pinned_venv(path, requirements, fresh=None):
    """The python of a venv at ``path`` with the pinned ``requirements``,
    kept while that file is the same (its sha256 stamped in the venv);
    ``fresh(py)`` runs once on a venv made anew, before the stamp."""
    stamp = path / "requirements.sha256"
    want = sha256(requirements)
    py = path / "bin" / "python"
    if not (stamp.exists() and stamp.read_text() == want):
        shutil.rmtree(path, ignore_errors=True)
        # symlinks: the venv's python links to this one rather than being a
        # copy. Venvs are made two at a time (threads); a copy still open
        # for writing is inherited by the other thread's child between its
        # fork and exec, and running the new copy then fails with ETXTBSY
        # ("Text file busy"). The CLI (`python -m venv`) links on Linux too.
        venv.create(path, with_pip=True, symlinks=True)
        sh(*pip_install(py), "-r", requirements)
        if fresh:
            fresh(py)
        stamp.write_text(want)
    return py


def install_wheel(py, who):
    """Installs blockio's newest wheel (``target/wheels``, from
    ``scripts/python-setup``) into the venv of ``py``, anew; exits when
    there is none. ``who`` begins the message."""
    wheels = sorted((ROOT / "target" / "wheels").glob("blockio-*.whl"))
    if not wheels:
        sys.exit(f"{who}: no blockio wheel in target/wheels: run scripts/python-setup first")
    sh(*pip_install(py), "--force-reinstall", "--no-deps", wheels[-1])
