"""``detach()`` hands the descriptor back only when no other call on the
file is in progress or waiting: the built-in file's ``detach`` waits for
such a call (its lock); a plain method cannot wait without blocking the
event loop, so ours refuses with ``ValueError``. A call left running after
the descriptor was handed back would go on reading or writing it, and so,
once the caller closes it, whatever file takes its number. Both backends,
binary and text."""

import asyncio
import os

import pytest

import blockio


@pytest.fixture(params=["io_uring", "threads"])
def engine(request):
    e = blockio.Engine(backend=request.param)
    yield e
    e.close()


@pytest.mark.parametrize("mode", ["rb", "r"])
def test_detach_during_a_read_is_refused_and_the_read_keeps_its_file(tmp_path, engine, mode):
    p, other = tmp_path / "f", tmp_path / "other"
    p.write_bytes(b"A" * (4 << 20))
    other.write_bytes(b"B" * (4 << 20))

    async def main():
        f = await blockio.open(p, mode, engine=engine)
        reading = asyncio.ensure_future(f.read())
        await asyncio.sleep(0)  # the read has started: it waits for the engine
        with pytest.raises(ValueError, match="in progress"):
            f.detach()
        data = await reading
        raw = f.detach()  # nothing in progress now
        num = raw.fileno()
        raw.close()
        fd = os.open(other, os.O_RDONLY)  # (takes the number back)
        try:
            assert fd == num
            with pytest.raises(ValueError, match="detached"):
                await f.read(1)
        finally:
            os.close(fd)
        return data

    data = asyncio.run(main())
    assert len(data) == 4 << 20
    assert set(data) == ({"A"} if mode == "r" else {ord("A")})


def test_detach_during_a_flush_is_refused_and_the_bytes_land_in_their_file(tmp_path, engine):
    p, other = tmp_path / "f", tmp_path / "other"
    other.write_bytes(b"B" * 100)

    async def main():
        f = await blockio.open(p, "w+b", engine=engine)
        await f.write(b"x" * 10)  # buffered
        flushing = asyncio.ensure_future(f.flush())
        await asyncio.sleep(0)  # the flush has started (its buffer taken)
        with pytest.raises(ValueError, match="in progress"):
            f.detach()
        await flushing
        raw = f.detach()
        try:
            assert raw.tell() == 10  # as the built-in's
        finally:
            raw.close()

    asyncio.run(main())
    assert p.read_bytes() == b"x" * 10
    assert other.read_bytes() == b"B" * 100


def test_detach_with_a_call_waiting_its_turn_is_refused(engine):
    r, w = os.pipe()

    async def main():
        f = await blockio.open(r, "rb", engine=engine)
        first = asyncio.ensure_future(f.read(5))  # waits for the pipe
        second = asyncio.ensure_future(f.read(5))  # waits for its turn
        await asyncio.sleep(0.05)
        with pytest.raises(ValueError, match="in progress or waiting"):
            f.detach()
        os.write(w, b"0123456789")
        assert await first == b"01234"
        assert await second == b"56789"
        raw = f.detach()
        os.close(w)
        assert raw.read() == b""
        raw.close()

    asyncio.run(main())


def test_an_unbuffered_readline_keeps_nothing_past_the_line_as_the_builtin(tmp_path, engine):
    """``buffering=0``: as the built-in's ``FileIO``, what follows a line is
    read from the file as it is when asked for, not from a read ahead."""
    p = tmp_path / "f"

    def builtin():
        p.write_bytes(b"line1\nold-data\n")
        with open(p, "r+b", buffering=0) as f:
            line = f.readline()
            os.pwrite(f.fileno(), b"NEW", 6)  # another writer, after the line
            return line, f.read(3), f.readline()

    async def ours():
        p.write_bytes(b"line1\nold-data\n")
        async with blockio.open(p, "r+b", buffering=0, engine=engine) as f:
            line = await f.readline()
            os.pwrite(f.fileno(), b"NEW", 6)
            return line, await f.read(3), await f.readline()

    want = builtin()
    assert want == (b"line1\n", b"NEW", b"-data\n")
    assert asyncio.run(ours()) == want
