"""A write cancelled while it waits for its turn behind another task's call
on the same file object still runs when its turn comes: bytes ``write()``
accepted always reach the file (the README's promise), as aiofiles' thread
runs a call whose task was cancelled. Nor are buffered bytes dropped by a
flush that fails because the file's engine was closed.
"""

import asyncio

import pytest

import blockio
from waits import await_until, blocked_in


@pytest.mark.parametrize("text,buffering", [(False, -1), (False, 0), (True, -1)])
def test_write_cancelled_while_queued_still_reaches_the_file(tmp_path, text, buffering):
    p = tmp_path / "w.bin"

    async def main():
        # (a seek from the end, of a binary or a text file, is placed at
        # once, and a write behind it joins it: an fsync is not placed, and
        # a write waits behind it)
        mode = "w+" if text else "w+b"
        rec = "X" * 10 if text else b"X" * 10
        async with blockio.open(p, mode, buffering=buffering) as f:
            # The first call holds the file's queue while it waits on the
            # engine's threads; the write queues behind it and is
            # cancelled there, before its turn has come.
            ahead = asyncio.ensure_future(f.fsync())
            queued = asyncio.ensure_future(f.write(rec))
            await asyncio.sleep(0)
            assert not ahead.done() and not queued.done()
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            assert await ahead is None
            await f.write("Y" * 5 if text else b"Y" * 5)
            assert await f.tell() == 15
        assert p.read_bytes() == b"X" * 10 + b"Y" * 5

    asyncio.run(main())


def test_write_cancelled_by_wait_for_while_queued_is_kept(tmp_path):
    # The finding's program: a write behind another task's read, cancelled
    # by wait_for's timeout.
    p = tmp_path / "w.bin"
    p.write_bytes(b"")

    async def main():
        async with blockio.open(p, "w+b") as f:
            async def a():
                return await f.read(70000)

            async def b():
                try:
                    await asyncio.wait_for(f.write(b"X" * 8193), 1e-6)
                except asyncio.TimeoutError:
                    pass
                await f.write(b"Y" * 100)
                return await f.tell()

            _, pos = await asyncio.gather(a(), b())
        data = p.read_bytes()
        assert pos == len(data)
        assert data.count(b"Y") == 100
        assert data == b"X" * 8193 + b"Y" * 100

    asyncio.run(main())


@pytest.mark.parametrize("call", ["flush", "seek", "read", "truncate"])
def test_buffered_bytes_kept_when_a_flush_meets_a_closed_engine(tmp_path, call):
    # The engine closed under the file: a call that must flush first fails,
    # and the bytes write() accepted stay buffered; close() writes them.
    p = tmp_path / "e.bin"

    async def main():
        e = blockio.Engine()
        f = await blockio.open(p, "w+b", engine=e)
        assert await f.write(b"h" * 500) == 500
        e.close()
        with pytest.raises(RuntimeError, match="engine is closed"):
            if call == "seek":
                await f.seek(0, 1)
            else:
                await getattr(f, call)()
        await f.close()
        assert p.read_bytes() == b"h" * 500

    asyncio.run(main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_write_cancelled_behind_a_slow_pipe_write_still_arrives(engine, loop):
    # A write given up by wait_for while it waits behind another task's
    # write to a pipe whose reader starts draining only after the
    # cancellation's grace (a second): the write ahead ends, so the queued
    # one runs when its turn comes, and every byte arrives in order. It was
    # given up after the grace, its bytes never written.
    import os
    import threading
    import time

    r, w = os.pipe()
    got = bytearray()

    def drain():
        time.sleep(1.5)  # (a reader slower than the cancellation's grace: the behaviour under test)
        while True:
            d = os.read(r, 1 << 20)
            if not d:
                return
            got.extend(d)

    reader = threading.Thread(target=drain)
    reader.start()

    async def main():
        f = await blockio.open(w, "wb", buffering=0, engine=engine)
        ahead = asyncio.ensure_future(f.write(b"A" * (1 << 20)))
        await await_until(lambda: blocked_in("write", w), "the write ahead waits for room in the pipe")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(f.write(b"B" * 10), 0.05)
        assert await ahead == 1 << 20
        await f.close()

    try:
        if loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    finally:
        reader.join(timeout=60)
        os.close(r)
    assert bytes(got) == b"A" * (1 << 20) + b"B" * 10
