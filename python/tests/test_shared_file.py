"""One file object shared by many tasks: its calls take effect one at a
time, in the order they were made, as aiofiles' do; each call starts where
its predecessor left the position. Checked against aiofiles on the same
programs, under asyncio and uvloop."""

import asyncio
import os
import random
from concurrent.futures import ThreadPoolExecutor

import aiofiles
import pytest

import blockio


def loops():
    import uvloop

    return [asyncio.new_event_loop, uvloop.new_event_loop]


LOOPS = pytest.mark.parametrize("loop_factory", loops(), ids=["asyncio", "uvloop"])


def run(coro, loop_factory):
    loop = loop_factory()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@LOOPS
@pytest.mark.parametrize("buffering", [-1, 0])
def test_concurrent_writers_keep_every_record(tmp_path, loop_factory, buffering):
    p = tmp_path / "w.bin"

    async def main():
        async with blockio.open(p, "wb", buffering=buffering) as f:
            counts = await asyncio.gather(*(f.write(bytes([65 + i]) * 10000) for i in range(4)))
            assert counts == [10000] * 4
            assert await f.tell() == 40000

    run(main(), loop_factory)
    assert p.read_bytes() == b"".join(bytes([65 + i]) * 10000 for i in range(4))


@LOOPS
@pytest.mark.parametrize("buffering", [-1, 0])
def test_concurrent_readers_get_consecutive_chunks(data_file, loop_factory, buffering):
    path, data = data_file

    async def main():
        async with blockio.open(path, "rb", buffering=buffering) as f:
            chunks = await asyncio.gather(*(f.read(100_000) for _ in range(8)))
            assert chunks == [data[i * 100_000:(i + 1) * 100_000] for i in range(8)]
            assert await f.tell() == 800_000

    run(main(), loop_factory)


@LOOPS
def test_shared_log_keeps_every_line(tmp_path, loop_factory):
    """16 tasks appending records to one text file object opened with "w"."""
    p = tmp_path / "log.txt"

    async def main():
        async with blockio.open(p, "w") as f:
            async def task(t):
                for i in range(200):
                    await f.write(f"task {t:2} record {i:4}\n")

            await asyncio.gather(*(task(t) for t in range(16)))

    run(main(), loop_factory)
    lines = p.read_text().splitlines()
    assert sorted(lines) == sorted(f"task {t:2} record {i:4}" for t in range(16) for i in range(200))


def random_program(rnd, binary, size):
    """A list of (task, call, await_it) steps: the order calls are made in."""
    steps = []
    for _ in range(60):
        k = rnd.random()
        if k < 0.25:
            call = ("read", rnd.choice([-1, 0, 1, 7, 100, 5000, 20000]))
        elif k < 0.5:
            n = rnd.choice([1, 3, 100, 4000, 9000])
            payload = bytes(rnd.randrange(97, 123) for _ in range(n))
            call = ("write", payload if binary else payload.decode("ascii").replace("q", "\n"))
        elif k < 0.62:
            call = ("readline",)
        elif k < 0.75:
            call = ("seek", rnd.randrange(size + 100), 0) if binary else ("seek", 0, rnd.choice([0, 2]))
        elif k < 0.87:
            call = ("tell",)
        elif k < 0.93:
            call = ("flush",)
        else:
            call = ("seek", 0, 2)
        steps.append((rnd.randrange(6), call, rnd.random() < 0.3))
    return steps


async def play(f, steps):
    """Runs ``steps`` from six tasks: each makes its calls in its turn (as a
    task of its own, so that several are outstanding at once), and awaits
    some of them before its next turn. The results, in program order."""
    turns = [asyncio.Event() for _ in range(len(steps) + 1)]
    results = [None] * len(steps)
    started = [None] * len(steps)

    async def worker(w):
        for i, (who, call, wait) in enumerate(steps):
            if who != w:
                continue
            await turns[i].wait()
            name, *args = call
            started[i] = asyncio.ensure_future(getattr(f, name)(*args))
            await asyncio.sleep(0)  # the call has been made: it is in line
            turns[i + 1].set()
            if wait:
                await asyncio.wait([started[i]])

    turns[0].set()
    await asyncio.gather(*(worker(w) for w in range(6)))
    for i, t in enumerate(started):
        try:
            results[i] = ("ok", await t)
        except Exception as e:  # compared by type and errno
            results[i] = ("error", type(e).__name__, getattr(e, "errno", None))
    return results


@LOOPS
@pytest.mark.parametrize("mode,buffering", [("r+b", -1), ("r+b", 0), ("r+b", 64), ("w+b", -1), ("a+b", 0), ("ab", 0), ("r", -1), ("w", -1), ("a", -1)])
def test_random_concurrent_programs_match_aiofiles(tmp_path, loop_factory, mode, buffering):
    binary = "b" in mode
    initial = bytes(random.Random(1).randrange(97, 123) for _ in range(30000)).replace(b"q", b"\n")
    pool = ThreadPoolExecutor(1)  # aiofiles' calls, one at a time in the order made
    try:
        for seed in range(12):
            steps = random_program(random.Random(seed), binary, len(initial))
            outcome = {}
            for lib in ("aiofiles", "blockio"):
                p = tmp_path / f"{lib}.bin"
                p.write_bytes(initial)

                async def main():
                    if lib == "aiofiles":
                        opened = aiofiles.open(p, mode, buffering=buffering, executor=pool)
                    else:
                        opened = blockio.open(p, mode, buffering=buffering)
                    async with opened as f:
                        return await play(f, steps)

                results = run(main(), loop_factory)
                outcome[lib] = (results, p.read_bytes())
            for i, (a, b) in enumerate(zip(outcome["aiofiles"][0], outcome["blockio"][0])):
                assert a == b, f"seed {seed}, step {i} {steps[i][1][:1]}: aiofiles {a!r:.200}, blockio {b!r:.200}"
            assert outcome["aiofiles"][1] == outcome["blockio"][1], f"seed {seed}: final content differs"
    finally:
        pool.shutdown()


@pytest.mark.parametrize("buffering", [-1, 1])
def test_text_write_after_readline_lands_where_the_builtins_does(tmp_path, buffering):
    """The built-in text file drops the text it decoded ahead and writes at
    its binary file's position, past that read-ahead; so does blockio."""
    for name in ("builtin.txt", "blockio.txt"):
        (tmp_path / name).write_text("")
    with open(tmp_path / "builtin.txt", "w+", buffering=buffering) as f:
        f.write("line 1\nline 2\nline 3\n")
        f.seek(0)
        first = f.readline()
        f.write("X\n")
        after = f.tell()

    async def main():
        async with blockio.open(tmp_path / "blockio.txt", "w+", buffering=buffering) as f:
            await f.write("line 1\nline 2\nline 3\n")
            await f.seek(0)
            assert await f.readline() == first
            await f.write("X\n")
            assert await f.tell() == after

    asyncio.run(main())
    assert (tmp_path / "blockio.txt").read_bytes() == (tmp_path / "builtin.txt").read_bytes()


@LOOPS
@pytest.mark.parametrize("mode", ["r", "rb"])
def test_a_tailer_reads_lines_appended_after_end_of_file(tmp_path, loop_factory, mode):
    """A log tailer: at end of file readline returns the empty value; once
    another writer appends, it returns the new lines (as the built-in's and
    aiofiles' do)."""
    p = tmp_path / "tail.log"
    p.write_text("first\n")
    empty = b"" if "b" in mode else ""

    async def main():
        seen = []
        async with blockio.open(p, mode) as f:
            seen += [line async for line in f]
            assert await f.readline() == empty
            for i in range(11):
                with open(p, "a") as w:
                    w.write(f"line {i}\n")
                seen.append(await f.readline())
                assert await f.readline() == empty
                assert await f.read() == empty
            with open(p, "a") as w:
                w.write("tail\n")
            seen.append(await f.read())
        return seen

    seen = run(main(), loop_factory)
    expect = ["first\n"] + [f"line {i}\n" for i in range(11)] + ["tail\n"]
    assert seen == [s.encode() for s in expect] if "b" in mode else seen == expect


@pytest.mark.parametrize("opener", [aiofiles.open, blockio.open], ids=["aiofiles", "blockio"])
def test_one_file_object_used_from_loops_in_several_threads_never_hangs(tmp_path, opener):
    """F-4: event loops in four threads writing through one file object at
    once: each thread's calls either work or raise RuntimeError (blockio:
    the file is in use by another thread's loop; aiofiles: its file is
    bound to the loop that opened it), and none waits for ever. Every
    record a call returned from is in the file."""
    import threading

    p = tmp_path / "shared"
    p.write_bytes(b"")
    async def open_it():
        return await opener(p, "ab")

    f = asyncio.run(open_it())
    start = threading.Barrier(4)
    wrote, errors = [], []

    def worker(i):
        async def go():
            start.wait()
            for j in range(200):
                rec = b"%d:%04d\n" % (i, j)
                await f.write(rec)
                wrote.append(rec)
            await f.flush()

        try:
            asyncio.run(go())
        except RuntimeError as e:
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)  # a watchdog far beyond any run that works
    assert not any(t.is_alive() for t in ts), "a thread hangs"
    if opener is blockio.open:
        assert all("another thread" in str(e) for e in errors), errors
        asyncio.run(f.close())
        lines = set(p.read_bytes().splitlines(keepends=True))
        assert set(wrote) <= lines


def test_seeks_and_cached_reads_on_one_file_object_from_several_threads_never_mix_state(tmp_path):
    """Loops in four threads seeking and reading one file object at once
    (calls served inline from the page cache): each call works or raises
    RuntimeError (the file is in use by another thread's loop), none
    waits for ever, and every read returns bytes of the file that follow
    one another from where some call left the position."""
    import threading

    p = tmp_path / "words"
    data = b"".join((8 * i).to_bytes(8, "big") for i in range(1 << 15))  # each 8-byte word: its offset
    p.write_bytes(data)
    f = asyncio.run(_open_rb(p))
    start = threading.Barrier(4)
    reads, errors = [], []

    def worker(i):
        async def go():
            start.wait()
            for j in range(2000):
                try:
                    await f.seek(8 * ((i * 7919 + j * 104729) % (1 << 15)))
                    chunk = await f.read(64)
                except RuntimeError as e:
                    errors.append(e)
                    continue
                reads.append(chunk)

        asyncio.run(go())

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)  # a watchdog far beyond any run that works
    assert not any(t.is_alive() for t in ts), "a thread hangs"
    assert all("another thread" in str(e) for e in errors), errors
    assert reads
    for c in reads:
        at = int.from_bytes(c[:8], "big")
        assert at % 8 == 0 and c == data[at:at + len(c)] and len(c) == min(64, len(data) - at)
    asyncio.run(f.close())


async def _open_rb(p):
    return await blockio.open(p, "rb")

