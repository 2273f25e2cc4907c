"""A buffered ``blockio.open`` file's writes (its flushes) made on the
loop's thread (``WriteQueue.write_now``) when none of the file's writes is
unfinished and the kernel takes them at once: counted as made inline, not
submitted to the engine, with the built-in file's positions, reads and
bytes under mixes of writes, seeks, truncations and reads, in every binary
and text mode; anything else (a file that is not a regular one, an
unbuffered file) goes through the engine. Both backends."""

import asyncio
import io
import os
import random

import pytest

import blockio
from blockio._blockio import INLINE_WRITE_AFTER_WAIT, TURN_BUDGET

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])


def counts(f):
    """(made inline, submitted to the engine, inline ones that were slow) of
    the file object ``f`` (binary or text)."""
    raw = f.buffer if hasattr(f, "buffer") else f
    made, engine, waited = raw._file.writes.write_counts()
    return made, engine, waited


def assert_inline(made, engine, waited, writes):
    # Every write made inline, but those the slow ones sent to the engine
    # (a write that took over 2 ms, waiting in the kernel or preempted,
    # sends the next ones there).
    # And a write that finds the loop's turn due goes to the engine, whose
    # await takes it: once in TURN_BUDGET units, of which each write call
    # counts at most two (its own, and one its write's bytes, under 16 KiB).
    assert made + engine >= writes
    turns = 2 * writes // (TURN_BUDGET - 1) + 1
    assert engine <= waited * INLINE_WRITE_AFTER_WAIT + turns, (made, engine, waited)
    assert made >= writes - engine


@BACKENDS
@pytest.mark.parametrize("size", [100, 4096, 10_000])
def test_a_buffered_files_flushes_are_made_inline(tmp_path, backend, size):
    p = tmp_path / "out"
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    n = 300

    async def main():
        async with blockio.open(p, "wb", engine=e) as f:
            for _ in range(n):
                assert await f.write(data) == size
            await f.flush()
            return counts(f)

    with blockio.Engine(backend=backend) as e:
        made, engine, waited = asyncio.run(main())
    assert p.read_bytes() == data * n
    # (the 4 KiB buffer's flushes; a write longer than the buffer is
    # written through, one write)
    writes = size * n // 4096 if size < 4096 else n
    assert made > 0
    assert_inline(made, engine, waited, writes)


@BACKENDS
def test_writes_to_a_device_and_unbuffered_writes_go_to_the_engine(tmp_path, backend):
    async def main():
        async with blockio.open(os.devnull, "wb", engine=e) as f:
            for _ in range(10):
                await f.write(b"x" * 5000)
            dev = counts(f)
        async with blockio.open(tmp_path / "raw", "wb", buffering=0, engine=e) as f:
            for _ in range(10):
                await f.write(b"y" * 5000)
            raw = counts(f)
        return dev, raw

    with blockio.Engine(backend=backend) as e:
        dev, raw = asyncio.run(main())
    assert dev[0] == 0 and dev[1] == 10
    assert raw[0] == 0 and raw[1] == 10
    assert (tmp_path / "raw").read_bytes() == b"y" * 50_000


def _steps(rng, text):
    """A mix of calls: (name, args)."""
    steps = []
    for _ in range(120):
        k = rng.random()
        if k < 0.5:
            n = rng.choice([1, 7, 100, 1000, 4095, 4096, 4097, 9000])
            if text:
                steps.append(("write", ("".join(rng.choice("ab\nç") for _ in range(n)),)))
            else:
                steps.append(("write", (rng.randbytes(n),)))
        elif k < 0.62 and not text:
            steps.append(("seek", (rng.randrange(0, 20_000), 0)))
        elif k < 0.68:
            steps.append(("seek", (0, rng.choice([0, 2]))))
        elif k < 0.72 and not text:
            steps.append(("seek", (rng.randrange(-50, 50), 1)))
        elif k < 0.8:
            steps.append(("truncate", (rng.choice([None, rng.randrange(0, 20_000)]),)))
        elif k < 0.9:
            steps.append(("read", (rng.choice([1, 100, 5000]),)))
        else:
            steps.append(("flush", ()))
    return steps


def _builtin(path, mode, steps):
    got = []
    with open(path, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
        for name, args in steps:
            got.append(_one(lambda: getattr(f, name)(*args), name))
            got.append(("tell", f.tell()))
    return got


def _one(call, name):
    try:
        r = call()
    except (OSError, ValueError, io.UnsupportedOperation) as e:
        return (name, type(e).__name__)
    return (name, None if name == "flush" else r)


async def _blockio(path, mode, steps, e):
    got = []
    kw = {"encoding": "utf-8"} if "b" not in mode else {}
    async with blockio.open(path, mode, engine=e, **kw) as f:
        for name, args in steps:
            try:
                r = await getattr(f, name)(*args)
            except (OSError, ValueError, io.UnsupportedOperation) as x:
                got.append((name, type(x).__name__))
            else:
                got.append((name, None if name == "flush" else r))
            got.append(("tell", await f.tell()))
        return got, counts(f)


@BACKENDS
@pytest.mark.parametrize("mode", ["wb+", "rb+", "ab+", "ab", "w+", "a+"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixes_of_calls_match_the_builtin(tmp_path, backend, mode, seed):
    rng = random.Random(seed)
    text = "b" not in mode
    steps = _steps(rng, text)
    if "+" not in mode:
        steps = [s for s in steps if s[0] != "read"]
    if "a" in mode:
        # (the built-in buffered file's tell in append mode, before a
        # flush, is where the position was plus the bytes buffered, not the
        # end, which blockio's says: compared are the calls' results and
        # the bytes)
        steps = [s for s in steps if s[0] not in ("seek", "read")]
    start = rng.randbytes(6000) if not text else b"start\n" * 1000
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.write_bytes(start)
    theirs.write_bytes(start)
    want = _builtin(theirs, mode, steps)
    with blockio.Engine(backend=backend) as e:
        got, (made, engine, waited) = asyncio.run(_blockio(mine, mode, steps, e))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if "a" in mode and g[0] == "tell":
            continue
        assert g == w, (i, steps[i // 2][0])
    assert mine.read_bytes() == theirs.read_bytes()
    assert made > 0  # (the path under test was taken)


@BACKENDS
def test_a_loop_of_inline_writes_lets_the_other_tasks_run(tmp_path, backend):
    # 2,000 writes of 4 KiB, each made inline without suspending: the
    # thread's count of such calls gives the loop a turn at least once in
    # TURN_BUDGET of them, in which the other task runs.
    n = 2000

    async def main():
        ticks = 0
        done = False

        async def other():
            nonlocal ticks
            while not done:
                await asyncio.sleep(0)
                ticks += 1

        t = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        async with blockio.open(tmp_path / "out", "wb", engine=e) as f:
            start = ticks
            for _ in range(n):
                await f.write(b"z" * 4096)
            during = ticks - start
            made = counts(f)[0]
        done = True
        await t
        return during, made

    with blockio.Engine(backend=backend) as e:
        during, made = asyncio.run(main())
    assert made > 0
    assert during >= made // TURN_BUDGET, (during, made)
    assert (tmp_path / "out").stat().st_size == n * 4096
