"""A read cancelled part-way (after taking buffered bytes, or between the
lines of a ``readlines``) leaves the position where it was: the bytes it
had taken are put back, in binary and text mode (the README's promise for
cancelled reads).

Each program is run with the cancellation delivered after 0, 1, 2, ...
turns of the event loop; the assertions hold for every run.
"""

import asyncio

import pytest

import blockio

TURNS = range(12)


async def cancel_after(aw, turns):
    """Starts ``aw`` as a task, cancels it after ``turns`` loop turns; its
    result, or None if the cancellation took effect."""
    t = asyncio.ensure_future(aw)
    for _ in range(turns):
        await asyncio.sleep(0)
    t.cancel()
    try:
        return await t
    except asyncio.CancelledError:
        return None


@pytest.mark.parametrize("turns", TURNS)
@pytest.mark.parametrize("first", [1, 5, 100])
def test_read_all_cancelled_after_buffered_read_keeps_position(tmp_path, turns, first):
    # read(first) fills the read buffer; read() takes the buffered bytes
    # and then waits for the file's size: cancelled there, the buffered
    # bytes go back.
    data = bytes(range(256)) * 5
    p = tmp_path / "r.bin"
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "r+b") as f:
            assert await f.read(first) == data[:first]
            got = await cancel_after(f.read(), turns)
            if got is None:
                assert await f.tell() == first
                assert await f.read() == data[first:]
            else:
                assert got == data[first:]
                assert await f.tell() == len(data)

    asyncio.run(main())


def _lines(n):
    return [b"line %06d %s\n" % (i, b"x" * (i % 13)) for i in range(n)]


@pytest.mark.parametrize("turns", TURNS)
def test_readlines_cancelled_keeps_position_binary(tmp_path, turns):
    lines = _lines(20000)
    data = b"".join(lines)
    p = tmp_path / "l.bin"
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb") as f:
            assert await f.seek(17) == 17
            got = await cancel_after(f.readlines(), turns)
            if got is None:
                assert await f.tell() == 17
                assert await f.read() == data[17:]
            else:
                assert b"".join(got) == data[17:]

    asyncio.run(main())


@pytest.mark.parametrize("turns", TURNS)
def test_readlines_cancelled_keeps_position_text(tmp_path, turns):
    lines = [line.decode() for line in _lines(20000)]
    p = tmp_path / "l.txt"
    p.write_text("".join(lines), encoding="utf-8")

    async def main():
        async with blockio.open(p, "r", encoding="utf-8") as f:
            assert await f.readline() == lines[0]
            got = await cancel_after(f.readlines(), turns)
            if got is None:
                assert await f.readline() == lines[1]
                assert await f.read() == "".join(lines[2:])
            else:
                assert got == lines[1:]

    asyncio.run(main())
