"""Large reads: cached reads up to ``CACHED_MAX`` are served on the
calling thread, and longer ones go to the engine, in pieces, into their
``bytes`` object. Both backends, asyncio and uvloop."""

import asyncio
import os

import pytest

import blockio
from blockio._blockio import set_turn_count

LOOPS = pytest.mark.parametrize("loop_factory", ["asyncio", "uvloop"])

#: The longest read served on the calling thread (the core's CACHED_MAX).
CACHED_MAX = 8 << 20


def run(coro, loop_factory):
    if loop_factory == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@LOOPS
@pytest.mark.parametrize("length", [1 << 20, 3 << 20, CACHED_MAX])
@pytest.mark.parametrize("api", ["open", "aread"])
def test_large_cached_reads_are_served_on_the_calling_thread(tmp_path, engine, loop_factory, length, api):
    """A cached read of up to ``CACHED_MAX`` bytes is one ``preadv2`` into
    the bytes returned, on the calling thread (no ring round trip, no
    wake-up of the loop, no copy out of a buffer of the engine's): the
    call returns before a callback scheduled just before it runs."""
    p = tmp_path / "f"
    data = os.urandom(length + 4096)
    p.write_bytes(data)

    async def main():
        with open(p, "rb") as plain:
            plain.read()
            async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
                await f.seek(100)
                ran = []
                asyncio.get_running_loop().call_soon(ran.append, 1)
                set_turn_count(0)
                if api == "open":
                    got = await f.read(length)
                else:
                    got = await engine.aread(plain, offset=100, length=length)
                return got, list(ran)  # (before the close, which waits)

    got, ran = run(main(), loop_factory)
    assert got == data[100:100 + length]
    assert ran == []


@LOOPS
@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("api", ["open", "aread"])
def test_reads_longer_than_cached_max_go_to_the_engine_in_pieces(tmp_path, engine, loop_factory, cached, api):
    """A read longer than ``CACHED_MAX`` (or not cached) goes through the
    engine, in pieces read into the bytes returned, while the loop runs the
    other tasks: the bytes are right, a short read at the end is cut to
    what the file holds."""
    p = tmp_path / "f"
    size = CACHED_MAX + (5 << 20) + 123
    data = os.urandom(size)
    p.write_bytes(data)
    if not cached:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    async def main():
        ran = []
        async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
            with open(p, "rb") as plain:
                out = []
                for at, length in [(7, size - 7), (1 << 20, size), (size - 10, 1 << 20), (size + 5, 1 << 20)]:
                    asyncio.get_running_loop().call_soon(ran.append, at)
                    if api == "open":
                        await f.seek(at)
                        out.append(await f.read(length))
                    else:
                        out.append(await engine.aread(plain, offset=at, length=length))
        return out, ran

    out, ran = run(main(), loop_factory)
    assert out == [data[7:], data[1 << 20:], data[-10:], b""]
    assert ran[:2] == [7, 1 << 20]


@pytest.mark.parametrize("length", [100, 1 << 20])
def test_a_large_read_fails_as_a_small_one(tmp_path, engine, length):
    """A read the descriptor refuses fails alike whatever its length (in
    pieces or not): ``OSError`` with its errno and the file's name."""
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)

    async def main():
        with open(p, "ab") as w:
            with pytest.raises(OSError) as err:
                await engine.aread(w, offset=0, length=length)
            return err.value

    err = asyncio.run(main())
    assert err.errno == 9 and err.filename == str(p)
