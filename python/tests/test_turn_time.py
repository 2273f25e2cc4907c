"""The time between turns of the event loop: calls served without
suspending take a turn once ``TURN_TIME_NS`` has passed since the
thread's last turn, checked when the count reaches ``TURN_BUDGET``; before
that no turn is taken, not even between the pieces of a large cached
read. (The
tests that count turns by the count alone set the time to 0: see
``turns_by_count``.) Both backends, asyncio and uvloop."""

import asyncio
import os
import time

import pytest

import blockio
from blockio._blockio import INLINE_MAX, INLINE_PIECE, TURN_BUDGET, TURN_TIME_NS, set_turn_count, set_turn_time

LOOPS = pytest.mark.parametrize("loop_factory", ["asyncio", "uvloop"])


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


@pytest.fixture
def turn_time():
    """Sets the time between turns for a test (``turn_time(ns)``),
    restoring the default after."""
    before = []

    def set_(ns):
        before.append(set_turn_time(ns))

    yield set_
    if before:
        set_turn_time(before[0])


@pytest.fixture(scope="module")
def cached_file(tmp_path_factory):
    """A 32 MiB file of random bytes (and its bytes), read once so that it
    is in the page cache."""
    p = tmp_path_factory.mktemp("turns") / "f"
    data = os.urandom(32 << 20)
    p.write_bytes(data)
    with open(p, "rb") as f:
        f.read()
    return p, data


def test_the_default_time_is_one_millisecond():
    """The default: 1 ms (``docs/benchmarks.md``, "Turns by time"), and
    ``set_turn_time`` answers the value it replaces."""
    assert TURN_TIME_NS == 1_000_000
    before = set_turn_time(TURN_TIME_NS)
    assert before == TURN_TIME_NS


@LOOPS
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_no_turn_before_the_time_has_passed(cached_file, turn_time, loop_factory, backend):
    """With an hour between turns, a loop of cached 8 MiB reads (each two
    pieces) and of 4 KiB reads, far more than ``TURN_BUDGET`` units, takes
    no turn once its first has been taken: another task never runs in
    between, and every byte is right."""
    path, data = cached_file
    turn_time(3600 * 10**9)
    engine = blockio.Engine(backend=backend)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            assert await f.read(4096) == data[:4096]
            set_turn_count(TURN_BUDGET - 1)
            assert await f.read(4096) == data[4096:8192]  # (takes its turn: the clock starts)
            t = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            ticks = 0
            got = [await f.read(4096) for _ in range(3 * TURN_BUDGET)]
            await f.seek(0)
            for _ in range(len(data) // INLINE_MAX):  # (not the end's read, which may suspend)
                got.append(await f.read(INLINE_MAX))
            during = ticks
            t.cancel()
            return got, during

    try:
        got, during = run(main(), loop_factory)
    finally:
        engine.close()
    assert during == 0
    assert b"".join(got[:3 * TURN_BUDGET]) == data[8192:8192 + 3 * TURN_BUDGET * 4096]
    assert b"".join(got[3 * TURN_BUDGET:]) == data
    assert len(data) % INLINE_MAX == 0 and INLINE_MAX > INLINE_PIECE


@LOOPS
@pytest.mark.parametrize("size", [4096, INLINE_MAX])
def test_a_turn_comes_once_the_time_has_passed(cached_file, turn_time, loop_factory, size):
    """With 50 ms between turns, a task reading cached bytes in a loop
    lets another run again, and not before 50 ms after the call whose
    turn first let it run (the turn waits for the clock, not for a
    count): the seeks and reads go on until the other task has run twice
    (a bound on them fails the test if it never does). The clock is read
    before each call, so the bound holds however the threads are
    scheduled: the turn's own clock reading comes after it. (An engine of
    its own: the default engine's count of inline misses in a row, which
    other tests' reads at a file's end raise, would send the first reads
    through the engine.)"""
    path, data = cached_file
    wait = 50_000_000
    turn_time(wait)
    engine = blockio.Engine()

    async def main():
        runs = []

        async def ticker():
            while True:
                await asyncio.sleep(0)
                runs.append(time.monotonic_ns())

        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(TURN_BUDGET - 1)
            await f.read(size)  # (takes its turn: the clock starts)
            t = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            runs.clear()
            reads = 0
            first = None  # the clock before the call whose turn ran it first

            async def call(start):
                nonlocal first
                before = time.monotonic_ns()
                got = await start()
                if first is None and runs:
                    first = before
                return got

            while len(runs) < 2 and reads < 5_000_000:
                # (never at the end, whose read would suspend on the engine)
                off = reads * size % (len(data) - size + 1)
                await call(lambda: f.seek(off))
                assert await call(lambda: f.read(size)) == data[off:off + size]
                reads += 1
            t.cancel()
            return runs, first, reads

    try:
        runs, first, reads = run(main(), loop_factory)
    finally:
        engine.close()
    assert len(runs) == 2, reads
    assert runs[1] - first >= wait
