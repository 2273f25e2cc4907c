"""Sequential ``read(n)`` loops over a file, the pattern of issue 59's
speed target (``while chunk := await f.read(n)``), at the sizes it names:
4 KiB, 64 KiB, 1 MiB and 8 MiB, cached or not, on both backends. Each
read's bytes are the file's, the last one cut short at its end; a read of
64 KiB or more that goes to the engine returns the very object the
kernel's reads filled (one copy, kernel to ``bytes``: none on the loop's
thread); and a large read cancelled while the kernel fills its object
keeps that object alive until the kernel is done with it."""

import asyncio
import os

import pytest

import blockio
from blockio._blockio import pieces_in_flight_peak

from waits import await_until

#: The sizes of issue 59's sequential-read target.
SIZES = [4 << 10, 64 << 10, 1 << 20, 8 << 20]

#: From this size on a read through the engine is made into its own
#: ``bytes`` object (the core's ``FRESH_MIN``); below it, into the core's
#: reused buffers, then copied.
FRESH_MIN = 64 << 10


# The page-cache eviction and the engine-result spy are the suite's own.
from test_inline_reads import evict as drop_from_the_page_cache  # noqa: E402
from test_large_reads import engine_results  # noqa: E402


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("cached", [True, False])
def test_a_read_loop_returns_the_files_bytes_at_every_size(tmp_path, engine, size, cached):
    """``while chunk := await f.read(n)`` over a file of two reads and 123
    bytes: two chunks of ``n``, then the 123 bytes (a read cut short at
    the end), then ``b""``, together the file's bytes. Each chunk of 64 KiB
    or more that an engine's read produced (the file not cached: at least
    the first) is that read's own object, not a copy of it.

    A try on the calling thread (``preadv2(RWF_NOWAIT)``) starts the
    readahead of the pages it misses, which a fast disk may finish within
    the call, for stretches at a time: the file not cached is written
    afresh and read again, up to 50 times, until a read goes to the
    engine (every run's bytes checked)."""
    p = tmp_path / "f"

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            results = engine_results(engine)
            chunks = []
            while chunk := await f.read(size):
                chunks.append(chunk)
            return chunks, results

    for _ in range(1 if cached else 50):
        data = os.urandom(2 * size + 123)
        p.write_bytes(data)
        if not cached:
            drop_from_the_page_cache(p)
        chunks, results = asyncio.run(main())
        assert [len(c) for c in chunks] == [size, size, 123]
        assert b"".join(chunks) == data
        if results:
            break
    if not cached:
        assert results, "no first read of a file not cached went to the engine in 50 runs"
    if size >= FRESH_MIN:
        engine_made = [c for c in chunks if any(c == r for r in results)]
        assert all(any(c is r for r in results) for c in engine_made)


@pytest.mark.parametrize("size, cached", [(8 << 20, False), (16 << 20, True)])
@pytest.mark.parametrize("api", ["open", "aread"])
def test_a_cancelled_large_read_keeps_its_object_until_the_kernel_is_done(tmp_path, engine, size, cached, api):
    """A read through the engine (8 MiB not cached; 16 MiB, past the most
    served inline, cached), by a ``blockio.open`` file (whose batch stays
    until its operations complete) or by ``Engine.aread`` of a built-in
    file (whose batch is given up, its operations left to the kernel),
    cancelled while its pieces are in flight: the object the kernel fills
    stays alive until its last piece completes, so objects of the same
    size made right after the cancellation (where its memory, freed, would
    be handed out again) keep their bytes while the kernel finishes. The
    file's position has not moved, and the next read returns the bytes
    from it."""
    p = tmp_path / "f"
    data = os.urandom(size + 123)
    p.write_bytes(data)
    if not cached:
        drop_from_the_page_cache(p)
    pattern = b"\x5a" * size

    async def main():
        with open(p, "rb") as plain:
            async with blockio.open(p, "rb", engine=engine) as f:
                await f.seek(10)
                pieces_in_flight_peak()
                if api == "open":
                    task = asyncio.ensure_future(f.read(size))
                else:
                    task = asyncio.ensure_future(engine.aread(plain, offset=10, length=size))
                # Polled at every turn of the loop: the turn after the
                # read's first step submitted its pieces, before their
                # completions can have resumed it (a wait of any length
                # here could let a loaded machine finish the read first).
                await await_until(lambda: task.done() or pieces_in_flight_peak() > 0, "a piece of the read in flight",
                                  sleep=lambda _: asyncio.sleep(0))
                assert not task.done()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                fillers = [b"\x5a" * size for _ in range(4)]
                await await_until(lambda: pieces_in_flight_peak() == 0, "the cancelled read's pieces completed")
                kept = all(x == pattern for x in fillers)
                if api == "open":
                    return kept, await f.tell(), await f.read(size)
                return kept, 10, await engine.aread(plain, offset=10, length=size)

    kept, pos, after = asyncio.run(main())
    assert kept, "the cancelled read's kernel wrote into memory freed and handed out again"
    assert pos == 10
    assert after == data[10:10 + size]
