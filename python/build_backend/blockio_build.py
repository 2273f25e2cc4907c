"""The package's build backend: maturin's, refusing to start without Rust.

blockio's core is Rust, so building it from source needs ``cargo``. When
cargo is missing, maturin would quietly download a temporary Rust
toolchain (several hundred megabytes) through puccinialin; this wrapper
stops first with a message that says what to install instead. Set
``BLOCKIO_ALLOW_RUST_DOWNLOAD=1`` to let maturin download it anyway.
"""

import os
import shutil

import maturin
from maturin import (  # noqa: F401  (re-exported build hooks)
    build_editable,
    build_sdist,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_wheel,
)

_MESSAGE = """
blockio is built from source with Rust, and no `cargo` was found on PATH.

Install a Rust toolchain (1.80 or later), then run the same command again:

    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
    . "$HOME/.cargo/env"

(or, on Debian 13 and later: apt-get install cargo).
To let the build download a temporary toolchain instead (several hundred
megabytes, removed afterwards), set BLOCKIO_ALLOW_RUST_DOWNLOAD=1.
"""


def _check_rust() -> None:
    if os.environ.get("BLOCKIO_ALLOW_RUST_DOWNLOAD") == "1":
        return
    if shutil.which("cargo") is None:
        raise SystemExit(_MESSAGE)
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"


def get_requires_for_build_wheel(config_settings=None):
    _check_rust()
    return maturin.get_requires_for_build_wheel(config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check_rust()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
