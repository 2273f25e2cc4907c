"""asyncio: results checked against os.pread, cancellation, uvloop, exit."""

import asyncio
import gc
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import blockio
import loops as loop_kinds


def run(coro, loop_factory=None):
    if loop_factory is None:
        return asyncio.run(coro)
    loop = loop_factory()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.mark.parametrize("loop_factory", [None, *list(loop_kinds.FACTORIES.values())[1:]], ids=loop_kinds.NAMES)
@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_many_tasks_read_the_right_bytes(data_file, loop_factory, backend):
    path, data = data_file
    e = blockio.Engine(backend=backend)

    async def main():
        with open(path, "rb") as f:
            rnd = random.Random(3)

            async def task(i):
                for _ in range(20):
                    off = rnd.randrange(len(data))
                    b = await e.aread(f, offset=off, length=4096)
                    assert b == data[off:off + 4096]
                buf = np.zeros(512, dtype=np.uint8)
                n = await e.areadinto(f, buf, i * 512)
                assert n == 512 and buf.tobytes() == data[i * 512:(i + 1) * 512]
                batch = await e.aread_batch(f, offsets=[i, i + 10, len(data) - 3], length=100)
                assert batch == [data[i:i + 100], data[i + 10:i + 110], data[-3:]]

            await asyncio.gather(*(task(i) for i in range(64)))

    run(main(), loop_factory)
    e.close()


def test_async_errors_and_writes(tmp_path):
    e = blockio.Engine()
    p = tmp_path / "w.bin"

    async def main():
        with open(p, "w+b") as f:
            assert await e.awrite(f, b"hello world", 0) == 11
            await e.afsync(f)
            await e.afdatasync(f)
            assert await e.aread(f, offset=6, length=5) == b"world"
            with pytest.raises(OSError) as ei:
                await e.aread(987654, offset=0, length=1)
            assert ei.value.errno == 9
            res = await e.aread_batch(987654, offsets=[0], length=1, return_exceptions=True)
            assert isinstance(res[0], OSError)

    asyncio.run(main())
    e.close()


def test_cancellation_storm_leaves_other_reads_intact(data_file):
    """Thousands of reads cancelled in flight, their buffers dropped at once,
    while other reads' data is checked; the kernel never writes into freed
    memory (the core holds each buffer until its completion)."""
    path, data = data_file
    e = blockio.Engine()

    async def main():
        with open(path, "rb") as f:
            rnd = random.Random(5)
            checked = 0
            for round_ in range(20):
                victims = []
                for _ in range(200):
                    buf = bytearray(4096)
                    victims.append(asyncio.ensure_future(e.areadinto(f, buf, rnd.randrange(len(data) - 4096))))
                keepers = [(o, asyncio.ensure_future(e.aread(f, offset=o, length=4096)))
                           for o in (rnd.randrange(len(data) - 4096) for _ in range(50))]
                await asyncio.sleep(0)
                for v in victims:
                    v.cancel()
                del victims, buf
                gc.collect()
                # Fresh allocations that would reuse freed memory.
                junk = [bytearray(4096) for _ in range(200)]
                for o, k in keepers:
                    assert await k == data[o:o + 4096]
                    checked += 1
                assert all(b == bytearray(4096) for b in junk), "nothing wrote into reused memory"
            return checked

    assert asyncio.run(main()) == 1000
    e.close()  # waits for whatever is still in flight
    assert e._core.pending() == 0


def test_one_loop_iteration_shares_kernel_calls(data_file):
    """64 tasks started together all finish; the batch API is one future."""
    path, data = data_file
    e = blockio.Engine()

    async def main():
        with open(path, "rb") as f:
            offs = list(range(0, 64 * 4096, 4096))
            res = await asyncio.gather(*(e.aread(f, offset=o, length=4096) for o in offs))
            assert res == [data[o:o + 4096] for o in offs]

    asyncio.run(main())
    e.close()


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "o_direct"])
def test_interpreter_exit_with_operations_in_flight(data_file, direct, backend):
    """Tasks cancelled by the exit leave their reads in flight; the driver
    drops those buffers later, without the GIL, while the interpreter
    finalizes. Repeated: the window is a race."""
    path, _ = data_file
    opener = f"os.open({str(path)!r}, os.O_RDONLY | os.O_DIRECT)" if direct else f"open({str(path)!r}, 'rb')"
    code = f"""
import asyncio, blockio, mmap, os
e = blockio.Engine(backend={backend!r})
f = {opener}
async def main():
    for i in range(500):
        asyncio.ensure_future(e.areadinto(f, mmap.mmap(-1, 65536), i * 4096))
    await asyncio.sleep(0)
    raise SystemExit(0)
asyncio.run(main())
"""
    for _ in range(8):
        # (cwd: the installed package, not the source tree, is imported)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             cwd=path.parent)
        assert out.returncode == 0, out.stderr


def test_aiofiles_style_open(tmp_path):
    p = tmp_path / "lines.txt"
    text = "".join(f"line {i} é\n" for i in range(5000)) + "no newline at end"
    p.write_text(text, encoding="utf-8")

    async def main():
        async with blockio.open(p, "r") as f:
            lines = [line async for line in f]
        assert "".join(lines) == text
        assert lines[1] == "line 1 é\n"
        async with blockio.open(p, "rb") as f:
            head = await f.read(5)
            assert head == b"line " and await f.tell() == 5
            await f.seek(-3, os.SEEK_END)
            assert await f.read() == b"end"
            await f.seek(0)
            buf = bytearray(4)
            assert await f.readinto(buf) == 4 and bytes(buf) == b"line"
            assert await f.read() == text.encode()[4:]
        f = await blockio.open(tmp_path / "out.bin", "wb")
        assert await f.write(b"abc") == 3
        assert await f.write(memoryview(b"defg")) == 4
        await f.fsync()
        await f.close()
        assert (tmp_path / "out.bin").read_bytes() == b"abcdefg"
        async with blockio.open(tmp_path / "out.bin", "ab") as f:
            await f.write(b"!")
        assert (tmp_path / "out.bin").read_bytes() == b"abcdefg!"

    asyncio.run(main())


def open_direct(path):
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:  # pragma: no cover - the CI file system has O_DIRECT
        pytest.fail(f"O_DIRECT is needed on the test file system: {e}")


@pytest.mark.parametrize("loop_factory", [None, *list(loop_kinds.FACTORIES.values())[1:]], ids=loop_kinds.NAMES)
def test_direct_descriptors_many_tasks_and_cancellations(data_file, loop_factory):
    """O_DIRECT descriptors go to the ring the event loop drives itself:
    results checked against the file, reads cancelled in flight with their
    (page-aligned mmap) buffers dropped, and other reads still intact."""
    import mmap

    path, data = data_file
    e = blockio.Engine()
    fd = open_direct(path)
    blocks = len(data) // 4096

    async def main():
        rnd = random.Random(11)

        async def task(i):
            for _ in range(20):
                off = rnd.randrange(blocks) * 4096
                assert await e.aread(fd, offset=off, length=4096) == data[off:off + 4096]
            buf = mmap.mmap(-1, 8192)
            assert await e.areadinto(fd, buf, i * 4096) == 8192
            assert buf[:] == data[i * 4096:i * 4096 + 8192]

        await asyncio.gather(*(task(i) for i in range(64)))
        for _ in range(5):
            victims = [asyncio.ensure_future(e.areadinto(fd, mmap.mmap(-1, 4096), rnd.randrange(blocks) * 4096))
                       for _ in range(200)]
            keepers = [(o, asyncio.ensure_future(e.aread(fd, offset=o, length=4096)))
                       for o in (rnd.randrange(blocks) * 4096 for _ in range(50))]
            await asyncio.sleep(0)
            for v in victims:
                v.cancel()
            del victims
            gc.collect()
            junk = [mmap.mmap(-1, 4096) for _ in range(200)]
            for o, k in keepers:
                assert await k == data[o:o + 4096]
            assert all(j[:] == bytes(4096) for j in junk), "nothing wrote into reused memory"

    try:
        run(main(), loop_factory)
        e.close()  # waits for the cancelled reads still in flight
        assert e._core.pending() == 0
    finally:
        os.close(fd)
