"""A write still running when ``asyncio.run`` (or ``uvloop.run``) ends:
the run cancels every task of its loop, the one a file object's write
shields itself in too, and closes the loop. The write's bytes still land,
and the next loop's ``tell()`` is past them, so its write follows them
instead of overwriting them; on both backends, buffered and not, for a
small write and a 20 MB one."""

import asyncio

import pytest
import uvloop

import blockio

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])


RUNNERS = [pytest.param(asyncio.run, id="asyncio"), pytest.param(uvloop.run, id="uvloop")]


@BACKENDS
@pytest.mark.parametrize("buffering", [0, -1])
@pytest.mark.parametrize("size", [1000, 20_000_000])
@pytest.mark.parametrize("run", RUNNERS)
def test_write_running_when_the_loop_ends_lands_and_moves_the_position(tmp_path, backend, buffering, size, run):
    p = tmp_path / "out"
    with blockio.Engine(backend=backend) as e:
        box = {}

        async def first():
            f = box["f"] = await blockio.open(p, "wb", buffering=buffering, engine=e)
            asyncio.ensure_future(f.write(b"a" * size))
            await asyncio.sleep(0)

        async def second():
            f = box["f"]
            await f.write(b"c" * 10)
            at = await f.tell()
            await f.close()
            return at

        run(first())
        assert run(second()) == size + 10
    data = p.read_bytes()
    assert len(data) == size + 10
    assert data[:size] == b"a" * size and data[size:] == b"c" * 10
