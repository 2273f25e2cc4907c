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


@pytest.fixture(params=["uring", "epoll"])
def loop(request, monkeypatch):
    """blockio's event loop on each backend, closed after the test."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "threads" if request.param == "epoll" else "uring")
    lp = blockio.new_event_loop()
    assert lp.backend == request.param
    yield lp
    lp.close()


@pytest.fixture
def turns_by_count():
    """Makes a turn of the event loop depend on the count of calls served
    without suspending alone (``set_turn_time(0)``): every check of the
    count turns, whatever time has passed since the last turn, so that a
    test can count the turns a loop of calls takes. Restored after."""
    from blockio._blockio import set_turn_time

    before = set_turn_time(0)
    yield
    set_turn_time(before)
