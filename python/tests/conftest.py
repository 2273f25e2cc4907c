import os
import random

import pytest

import blockio


@pytest.fixture
def data_file(tmp_path):
    """A 4 MiB file of random bytes (and its bytes)."""
    rnd = random.Random(7)
    data = bytes(rnd.getrandbits(8) for _ in range(1 << 16)) * 64
    p = tmp_path / "data.bin"
    p.write_bytes(data)
    return p, data


@pytest.fixture(params=["uring", "threads"])
def engine(request):
    """An engine on each backend, closed after the test."""
    e = blockio.Engine(backend=request.param)
    yield e
    e.close()
