"""The asynchronous API under every event loop it supports: asyncio,
uvloop, trio, and anyio on asyncio and on trio. The same programs run on
each (written with anyio's task groups, which all five take), on both
backends; results are checked against ``os.pread`` and the built-in
``open``, and the shared-file rule against the expected bytes."""

import errno
import os
import random
import threading

import anyio
import numpy as np
import pytest
import trio

import blockio
import blockio._engine
import blockio.os
from waits import await_until, blocked_in, watched


def run_on(runner, fn, *args):
    if runner == "trio":
        return trio.run(fn, *args)
    if runner == "anyio-trio":
        return anyio.run(fn, *args, backend="trio")
    if runner == "anyio-asyncio":
        return anyio.run(fn, *args, backend="asyncio")
    if runner == "uvloop":
        return anyio.run(fn, *args, backend="asyncio", backend_options={"use_uvloop": True})
    import asyncio

    return asyncio.run(fn(*args))


RUNNERS = pytest.mark.parametrize("runner", ["asyncio", "uvloop", "trio", "anyio-asyncio", "anyio-trio"])
BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
GUARD = 60  # seconds: far beyond any run that works


@pytest.fixture
def default_engine(monkeypatch, backend):
    e = blockio.Engine(backend=backend)
    monkeypatch.setattr(blockio._engine, "_default", e)
    yield e
    e.close()


@RUNNERS
@BACKENDS
def test_many_tasks_read_and_write_the_right_bytes(data_file, tmp_path, runner, backend):
    path, data = data_file
    e = blockio.Engine(backend=backend)
    out = tmp_path / "out.bin"

    async def main():
        with open(path, "rb") as f, open(out, "wb") as w:

            async def task(i):
                rnd = random.Random(i)
                for _ in range(10):
                    off = rnd.randrange(len(data))
                    assert await e.aread(f, offset=off, length=4096) == data[off:off + 4096]
                buf = np.zeros(512, dtype=np.uint8)
                assert await e.areadinto(f, buf, i * 512) == 512
                assert buf.tobytes() == data[i * 512:(i + 1) * 512]
                batch = await e.aread_batch(f, offsets=[i, len(data) - 3], length=100)
                assert batch == [data[i:i + 100], data[-3:]]
                assert await e.awrite(w, data[i * 4096:(i + 1) * 4096], i * 4096) == 4096

            async with anyio.create_task_group() as tg:
                for i in range(32):
                    tg.start_soon(task, i)
            await e.afsync(w)
        assert out.read_bytes() == data[:32 * 4096]

    try:
        run_on(runner, main)
    finally:
        e.close()


@RUNNERS
@BACKENDS
def test_shared_file_calls_take_effect_one_at_a_time(tmp_path, runner, backend, default_engine):
    """The shared-file rule (issue points 1 and 2) holds under every loop:
    four tasks writing to one file object keep all 40,000 bytes, eight
    readers get consecutive chunks; text lines read back as written."""
    p = tmp_path / "w.bin"

    async def main():
        async with blockio.open(p, "wb") as f:

            async def write(i):
                assert await f.write(bytes([65 + i]) * 10000) == 10000

            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(write, i)
            assert await f.tell() == 40000
        got = []
        async with blockio.open(p, "rb") as f:

            async def read():
                got.append(await f.read(5000))

            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(read)
        assert b"".join(got) == p.read_bytes() and [len(c) for c in got] == [5000] * 8
        t = tmp_path / "t.txt"
        async with blockio.open(t, "w", encoding="utf-8") as f:
            await f.write("one\ntwo\n")
        async with blockio.open(t, "r", encoding="utf-8") as f:
            assert [line async for line in f] == ["one\n", "two\n"]

    run_on(runner, main)
    chunks = [p.read_bytes()[i * 10000:(i + 1) * 10000] for i in range(4)]
    assert all(len(set(c)) == 1 for c in chunks) and sorted(c[0] for c in chunks) == [65, 66, 67, 68]


@RUNNERS
@BACKENDS
def test_a_cancelled_read_is_given_up_and_the_engine_goes_on(data_file, runner, backend):
    """A read of an empty pipe cancelled by the loop's own timeout
    (``anyio.move_on_after``) is abandoned: the engine has nothing left
    pending for it, and the next reads complete."""
    path, data = data_file
    e = blockio.Engine(backend=backend)
    r, w = os.pipe()

    async def main():
        with anyio.move_on_after(0.2) as scope:
            await e.aread(r, offset=0, length=10)
        assert scope.cancelled_caught or backend == "threads"
        with open(path, "rb") as f:
            assert await e.aread(f, offset=100, length=50) == data[100:150]
        assert e._core.pending() == 0

    try:
        run_on(runner, main)
    finally:
        os.close(r)
        os.close(w)
        e.close()


@RUNNERS
@BACKENDS
def test_os_calls_and_read_files(tmp_path, runner, backend, default_engine):
    files = [tmp_path / f"{i}.bin" for i in range(5)]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * (1000 * i))

    async def main():
        assert (await blockio.os.stat(files[3])).st_size == 3000
        await blockio.os.mkdir(tmp_path / "d")
        await blockio.os.symlink(files[1], tmp_path / "d" / "l")
        assert await blockio.os.path.islink(tmp_path / "d" / "l")
        assert await blockio.os.listdir(tmp_path / "d") == ["l"]
        assert await default_engine.aread_files(files) == [f.read_bytes() for f in files]

    run_on(runner, main)


def test_engine_serves_trio_and_asyncio_threads_at_once(data_file):
    """One engine, used at the same time by a ``trio.run`` and an
    ``asyncio.run`` in two threads: each gets its own reads."""
    import asyncio

    path, data = data_file
    e = blockio.Engine()
    errors = []

    async def reads(sleep):
        with open(path, "rb") as f:
            for i in range(300):
                off = (i * 7919) % (len(data) - 4096)
                assert await e.aread(f, offset=off, length=4096) == data[off:off + 4096]
                await sleep(0)

    def in_thread(fn):
        try:
            fn()
        except BaseException as x:  # reported below
            errors.append(x)

    ts = [threading.Thread(target=in_thread, args=(lambda: trio.run(reads, trio.sleep),)),
          threading.Thread(target=in_thread, args=(lambda: asyncio.run(reads(asyncio.sleep)),))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    try:
        assert not any(t.is_alive() for t in ts), "a loop sharing the engine hung"
        assert errors == []
    finally:
        e.close()


def test_close_resolves_a_trio_task_awaiting_a_pipe_read():
    """``Engine.close()`` with a trio task awaiting a read that never
    completes resolves it with ``ECANCELED`` (and the run then ends: the
    engine's watching task does not keep it alive)."""
    e = blockio.Engine(backend="uring")
    r, w = os.pipe()
    got = []

    async def main():
        async def reader():
            try:
                await e.aread(r, offset=0, length=10)
            except OSError as x:
                got.append(x.errno)

        async with trio.open_nursery() as n:
            n.start_soon(reader)
            await await_until(lambda: watched(r) or blocked_in("read", r), "the read waits for the pipe",
                              sleep=trio.sleep)
            e.close()

    async def bounded():
        with trio.fail_after(30):
            await main()

    try:
        trio.run(bounded)
    finally:
        os.close(r)
        os.close(w)
    assert got == [errno.ECANCELED]


def test_outside_any_loop_the_error_names_the_supported_ones():
    e = blockio.Engine()
    coro = e.aread(0, offset=0, length=1)
    with pytest.raises(RuntimeError, match="asyncio .*trio"):
        coro.send(None)
    e.close()


@RUNNERS
@BACKENDS
def test_reads_waiting_on_idle_pipes_hold_up_no_other_operation(tmp_path, runner, backend):
    """More ``Engine.aread`` calls than the engine's bound on
    operations in flight (``queue_depth``, 256 here) wait on pipes nobody
    writes yet; a write to a file through the same engine still completes
    (it waited for ever: every slot was a pipe's), then each pipe's read
    gets its own bytes. Bounded by the guard, which fails the test rather
    than hang (liveness, not speed)."""
    e = blockio.Engine(backend=backend)
    pipes = [os.pipe() for _ in range(300)]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    got = {}

    async def main():
        async def reader(i, r):
            got[i] = await e.aread(r, offset=0, length=100)

        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tg:
                for i, (r, _) in enumerate(pipes):
                    tg.start_soon(reader, i, r)
                await anyio.wait_all_tasks_blocked()
                assert await e.awrite(fd, b"still served", 0) == 12
                await e.afsync(fd)
                for i, (_, w) in enumerate(pipes):
                    os.write(w, b"pipe %d" % i)

    try:
        run_on(runner, main)
        assert got == {i: b"pipe %d" % i for i in range(len(pipes))}
        assert os.pread(fd, 100, 0) == b"still served"
    finally:
        e.close()
        os.close(fd)
        for r, w in pipes:
            os.close(r)
            os.close(w)
