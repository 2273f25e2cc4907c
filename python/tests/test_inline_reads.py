"""``aread`` of bytes in the page cache: copied on the calling thread
(``Core.read_inline``, ``preadv2`` with ``RWF_NOWAIT``) without a ring
round trip or a loop wake-up, with the same results as the engine's reads;
anything else (evicted pages, end of file, pipes, ``O_DIRECT``, a closed
engine) goes through the engine. Both backends, asyncio and uvloop."""

import asyncio
import gc
import os
import random

import pytest

import blockio
import loops as loop_kinds
from blockio._blockio import TURN_BUDGET, TURN_UNIT, set_turn_count

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])

#: The turns these tests count are those of the count alone (see
#: ``turns_by_count``; the time between turns is tested on its own).
pytestmark = pytest.mark.usefixtures("turns_by_count")


#: More reads in a row than the inline reads' bound on misses before they
#: skip (``MISSES_BEFORE_SKIPPING``, 16, in ``python/src/inline_read.rs``).
MANY = 40


LOOPS = pytest.mark.parametrize("loop_factory", list(loop_kinds.FACTORIES.values()), ids=loop_kinds.NAMES)


def run(coro, loop_factory):
    loop = loop_factory()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@BACKENDS
def test_read_inline_serves_only_whole_cached_reads(data_file, backend):
    path, data = data_file
    with blockio.Engine(backend=backend) as e, open(path, "rb") as f:
        fd = f.fileno()
        f.read()  # in the page cache
        assert e._core.read_inline(fd, 4096, 4096) == data[4096:8192]
        assert e._core.read_inline(fd, 1, 100_000) == data[1:100_001]
        # The end of the file (a short read) and past it: for the engine.
        assert e._core.read_inline(fd, len(data) - 10, 4096) is None
        assert e._core.read_inline(fd, len(data) + 10, 4096) is None
        assert e._core.read_inline(fd, -1, 10) is None and e._core.read_inline(fd, 0, 0) is None
        r, w = os.pipe()
        try:
            os.write(w, b"abc")
            assert e._core.read_inline(r, 0, 3) is None  # ESPIPE: for the engine
            assert os.read(r, 3) == b"abc"  # and nothing was taken from the pipe
        finally:
            os.close(r)
            os.close(w)
        d = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            assert e._core.read_inline(d, 0, 4096) is None
        finally:
            os.close(d)
        e.close()
        assert e._core.read_inline(fd, 0, 4096) is None


#: Of the reads after that many misses, at most one in this many is tried
#: inline (``SKIP``, 32, in ``python/src/inline_read.rs``).
SKIP = 32


@BACKENDS
def test_stream_reads_leave_the_cached_reads_after_them_inline(data_file, backend):
    """``Engine.aread`` of a pipe is refused inline (``ESPIPE``: a pipe has
    no page cache) and read through the engine; those refusals are not
    misses, so after many of them every cached read of a file on the same
    engine is still served inline (none through the engine)."""
    path, data = data_file
    with blockio.Engine(backend=backend) as e, open(path, "rb") as f:
        fd = f.fileno()
        f.read()  # in the page cache
        r, w = os.pipe()

        async def main():
            for _ in range(MANY):
                os.write(w, b"abcdefghij")
                assert await e.aread(r, offset=0, length=10) == b"abcdefghij"
            before = e._core.reads_started
            for i in range(MANY):
                off = (i * 7919) % (len(data) - 4096)
                assert await e.aread(fd, offset=off, length=4096) == data[off:off + 4096]
            return e._core.reads_started - before

        try:
            assert asyncio.run(main()) == 0
        finally:
            os.close(r)
            os.close(w)


@BACKENDS
def test_reads_at_the_end_are_not_misses(data_file, backend):
    """Reads at the file's end (past it: empty; or cut short by it) are not
    misses: after many of them the next cached read is served inline."""
    path, data = data_file
    with blockio.Engine(backend=backend) as e, open(path, "rb") as f:
        fd = f.fileno()
        f.read()  # in the page cache
        for _ in range(MANY):
            assert e._core.read_inline(fd, len(data) + 5, 10) is None
            assert e._core.read_inline(fd, len(data) - 10, 4096) is None
        assert e._core.read_inline(fd, 0, 4096) == data[:4096]


@BACKENDS
def test_after_uncached_reads_a_cached_read_is_served_inline_within_the_bound(tmp_path, backend):
    """Uncached reads (``EAGAIN``) are misses: after 16 in a row the tries
    are skipped, so the cached reads right after a cold run may go to the
    engine, but no more than ``SKIP`` - 1 of them: one is tried within
    ``SKIP`` reads, hits, and from it on all are served inline again."""
    cold, warm = tmp_path / "cold.bin", tmp_path / "warm.bin"
    cold.write_bytes(os.urandom(8 << 20))
    data = os.urandom(1 << 20)
    warm.write_bytes(data)
    with blockio.Engine(backend=backend) as e, open(cold, "rb") as c, open(warm, "rb") as f:
        os.fsync(c.fileno())
        f.read()  # in the page cache
        tried = []
        for i in range(2 * MANY):
            # (each try evicts again, and asks for a page no earlier one
            # read ahead: see test_evicted_pages_are_not_served_inline)
            os.posix_fadvise(c.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            tried.append(e._core.read_inline(c.fileno(), (i * 37 % 64) << 17, 4096))
        served = [e._core.read_inline(f.fileno(), (i * 7919) % (len(data) - 4096), 4096) is not None
                  for i in range(2 * SKIP)]
        assert True in served[:SKIP]  # (tried within the bound, and hit)
        assert all(served[served.index(True):])  # (the skipping ended)
        if all(t is None for t in tried):  # (16 misses at least: the tries were skipped)
            assert not served[0]


def test_evicted_pages_are_not_served_inline(tmp_path):
    p = tmp_path / "cold.bin"
    # A miss starts readahead of the page, and a fast disk can finish it
    # before the call returns, for stretches of tens of milliseconds: so
    # each try evicts again and asks for a page no earlier try read ahead
    # (128 KiB apart), and a fresh file is written (and synced) after
    # every 8 tries, up to 50 files, until one try is refused. Whatever
    # is served must be the file's bytes.
    got = []
    with blockio.Engine() as e:
        for _ in range(50):
            data = os.urandom(1 << 20)
            p.write_bytes(data)
            with open(p, "rb") as f:
                os.fsync(f.fileno())
                for off in range(0, len(data), 128 << 10):
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    page = e._core.read_inline(f.fileno(), off, 4096)
                    assert page is None or page == data[off:off + 4096]
                    got.append(page)
            if None in got or fs_type(p) in ("tmpfs", "ramfs"):
                break
    if fs_type(p) in ("tmpfs", "ramfs"):
        assert None not in got  # its pages are the file: never evicted
    else:
        assert None in got, f"all {len(got)} tries of evicted pages were served"


def fs_type(path):
    """The type of the file system ``path`` is on, from /proc/self/mounts."""
    best, kind = "", ""
    for line in open("/proc/self/mounts"):
        mnt, typ = line.split()[1], line.split()[2]
        if (str(path).startswith(mnt.rstrip("/") + "/") or str(path) == mnt) and len(mnt) >= len(best):
            best, kind = mnt, typ
    return kind


@LOOPS
@BACKENDS
def test_cached_areads_need_no_wakeup_and_match_the_file(data_file, loop_factory, backend):
    path, data = data_file
    e = blockio.Engine(backend=backend)
    wakeups = []
    on_ready = e._on_ready

    def counted(loop):
        wakeups.append(1)
        on_ready(loop)

    e._on_ready = counted

    async def main():
        with open(path, "rb") as f:
            f.read()
            for i in range(500):
                off = (i * 7919) % (len(data) - 4096)
                assert await e.aread(f, offset=off, length=4096) == data[off:off + 4096]
            assert wakeups == []  # every read served on the calling thread
            tail = await e.aread(f, offset=len(data) - 10, length=4096)  # short: through the engine
            assert tail == data[-10:]
            assert await e.aread(f, offset=len(data) + 5, length=10) == b""

    try:
        run(main(), loop_factory)
    finally:
        e.close()


class Ticker:
    """A task looping on ``sleep(0)``: ``ticks`` counts its turns, so the
    ticks over a stretch of code that never waits are the turns that code
    gave the loop."""

    def __init__(self):
        self.ticks = 0
        self._stop = False

    async def _run(self):
        while not self._stop:
            self.ticks += 1
            await asyncio.sleep(0)

    async def __aenter__(self):
        self._task = asyncio.ensure_future(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc):
        self._stop = True
        await self._task


async def ticks_during(body):
    """How many turns a ticker task (a loop of ``sleep(0)``) gets while
    ``body()`` runs: how often ``body`` lets the loop's other tasks run
    (see :class:`Ticker`)."""
    async with Ticker() as t:
        start = t.ticks
        await body()
        return t.ticks - start


@LOOPS
@pytest.mark.parametrize("length", [4096, 128 << 10])
def test_a_task_reading_cached_data_lets_the_others_run(data_file, loop_factory, length):
    """``aread``s of cached bytes yield to the loop at least once in
    ``TURN_BUDGET`` of them, and sooner when they are large: a read counts
    one unit, and one more per ``TURN_UNIT`` bytes."""
    path, data = data_file
    e = blockio.Engine()
    count = 10 * TURN_BUDGET if length == 4096 else 320
    units = count * (1 + length // TURN_UNIT)

    async def reads():
        with open(path, "rb") as f:
            f.read()
            for i in range(count):
                off = (i * length) % len(data)
                assert await e.aread(f, offset=off, length=length) == data[off:off + length]

    async def main():
        return await ticks_during(reads)

    try:
        assert run(main(), loop_factory) >= units // TURN_BUDGET - 1
    finally:
        e.close()


@LOOPS
@BACKENDS
@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_file_objects_cached_seek_and_read_need_no_wakeup_and_match_the_file(data_file, loop_factory, backend,
                                                                               buffering):
    """``blockio.open``'s ``seek`` + ``read`` of cached bytes are served on
    the calling thread as ``aread``'s are, and a ``read`` that follows in
    sequence (read ahead, or not) continues where the last one ended."""
    path, data = data_file
    e = blockio.Engine(backend=backend)
    wakeups = []
    on_ready = e._on_ready

    def counted(loop):
        wakeups.append(1)
        on_ready(loop)

    async def main():
        with open(path, "rb") as warm:
            warm.read()
        async with blockio.open(path, "rb", buffering=buffering, engine=e) as f:
            e._on_ready = counted
            for i in range(300):
                off = (i * 7919) % (len(data) - 8192)
                assert await f.seek(off) == off
                assert await f.read(4096) == data[off:off + 4096]
                assert await f.read(100) == data[off + 4096:off + 4196]
                assert await f.tell() == off + 4196
            assert wakeups == []
            await f.seek(len(data) - 10)
            assert await f.read(4096) == data[-10:]  # short: through the engine
            assert await f.read(4096) == b""

    try:
        run(main(), loop_factory)
    finally:
        e.close()


@LOOPS
@BACKENDS
def test_sequential_small_reads_read_ahead_more_until_a_seek(tmp_path, loop_factory, backend):
    """A run of small reads in order, served inline, reads ahead twice as
    much each time the buffer is empty, from the buffer's size up to
    128 KiB (one ``preadv2`` per 32 reads of 4 KiB, not one per two), with
    the file's bytes; a seek starts the run again, and a read as large as
    the buffer reads no more than it asks."""
    data = os.urandom(1 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)
    e = blockio.Engine(backend=backend)

    async def main():
        async with blockio.open(path, "rb", engine=e) as f:
            fills = []
            got = []
            for _ in range(94):  # (8 + 16 + 32 + 64 + 128 + 128 KiB)
                got.append(await f.read(4096))
                if f._roff == 4096:  # (this read filled the buffer)
                    fills.append(len(f._rbuf))
            assert b"".join(got) == data[:94 * 4096]
            assert fills == [8192, 16384, 32768, 65536, 131072, 131072]
            await f.seek(8192)
            assert await f.read(4096) == data[8192:12288]
            assert f._rbuf == b""  # (the first read after a seek reads what it asks)
            assert await f.read(4096) == data[12288:16384]
            assert len(f._rbuf) == 8192
            assert await f.read(4096) == data[16384:20480] and f._rbuf == b""
            assert await f.read(8192) == data[20480:28672] and f._rbuf == b""

    try:
        run(main(), loop_factory)
    finally:
        e.close()


@LOOPS
@BACKENDS
def test_reads_ahead_to_the_end_of_the_file_stay_inline(tmp_path, loop_factory, backend):
    """A read ahead that the end of the file cuts short is served inline
    with what is there (as long as the read's own bytes are): a file of
    100 KiB read 4 KiB at a time needs no engine round trip until the read
    that finds its end."""
    data = os.urandom(100 << 10)
    path = tmp_path / "f"
    path.write_bytes(data)
    e = blockio.Engine(backend=backend)
    wakeups = []
    on_ready = e._on_ready

    def counted(loop):
        wakeups.append(1)
        on_ready(loop)

    async def main():
        async with blockio.open(path, "rb", engine=e) as f:
            e._on_ready = counted
            got = [await f.read(4096) for _ in range(25)]
            assert b"".join(got) == data
            assert wakeups == []
            assert await f.read(4096) == b""

    try:
        run(main(), loop_factory)
    finally:
        e.close()


@LOOPS
@BACKENDS
@pytest.mark.parametrize("mode", ["rb", "r"])
def test_reads_at_a_files_end_leave_the_cached_reads_after_them_inline(tmp_path, loop_factory, backend, mode):
    """Reads at a file's end, empty or cut short by it (``readline()`` and
    ``read(n)`` there, many in a row), are not misses of the inline reads:
    the cached reads after them, on another file of the same engine, are
    all still served on the calling thread (none through the engine, none
    on the loop's ring)."""
    small = tmp_path / "small.txt"
    small.write_bytes(b"one\ntwo\nthree\n")
    data = os.urandom(1 << 20)
    big = tmp_path / "big.bin"
    big.write_bytes(data)
    e = blockio.Engine(backend=backend)

    def reads_not_inline():
        loop = asyncio.get_running_loop()
        ring = getattr(getattr(loop, "_proactor", None), "_ring", None)
        return e._core.reads_started + (ring.file_reads if ring is not None else 0)

    async def main():
        empty = b"" if mode == "rb" else ""
        async with blockio.open(small, mode, engine=e) as f:
            for _ in range(MANY):
                await f.seek(0)
                assert len(await f.read()) == 14
                assert await f.readline() == empty  # (at the end: empty)
                assert await f.read(100) == empty
        async with blockio.open(small, "rb", buffering=0, engine=e) as f:
            for _ in range(MANY):
                await f.seek(10)
                assert await f.read(100) == b"ree\n"  # (cut short by the end)
        async with blockio.open(big, "rb", buffering=0, engine=e) as f:
            before = reads_not_inline()
            for i in range(2 * MANY):
                off = (i * 7919) % (len(data) - 4096)
                await f.seek(off)
                assert await f.read(4096) == data[off:off + 4096]
            assert reads_not_inline() == before

    try:
        run(main(), loop_factory)
    finally:
        e.close()


@LOOPS
@pytest.mark.parametrize("length, buffering", [(4096, -1), (128 << 10, 0)])
def test_a_task_reading_cached_data_from_a_file_object_lets_the_others_run(data_file, loop_factory, length,
                                                                           buffering):
    """A file's reads of cached bytes (and of its buffer) yield to the
    loop at least once in ``TURN_BUDGET`` of them, and sooner when they
    copy much: large unbuffered reads count one unit, and one more per
    ``TURN_UNIT`` bytes."""
    path, data = data_file
    passes = 3 if length == 4096 else 10
    reads_made = passes * len(data) // length
    units = reads_made * (1 + (length // TURN_UNIT if buffering == 0 else 0))

    async def reads():
        async with blockio.open(path, "rb", buffering=buffering) as f:
            for _ in range(passes):
                await f.seek(0)
                got = []
                while chunk := await f.read(length):
                    got.append(chunk)
                assert b"".join(got) == data

    async def main():
        return await ticks_during(reads)

    assert run(main(), loop_factory) >= units // TURN_BUDGET - 1


CALLS = TURN_BUDGET * 10


@LOOPS
@pytest.mark.parametrize("call", ["read(1)", "read(100), 256 KiB buffer", "tell", "readline", "peek", "text readline",
                                  "write", "write, wb", "text write"])
def test_a_task_making_calls_served_inline_in_a_loop_lets_the_others_run(tmp_path, loop_factory, call):
    """Calls served without suspending (reads from the file's buffer, tell,
    readline and peek of buffered bytes, writes into the buffer) take a
    turn of the loop at least once in ``TURN_BUDGET`` calls, as cached
    reads do: a task making them in a loop lets a ticker task run at least
    once per ``TURN_BUDGET`` calls, whatever the buffer's size."""
    p = tmp_path / "lines"
    p.write_bytes(b"ab\n" * (CALLS * 40))
    with open(p, "rb") as warm:
        warm.read()

    async def loop(f):
        for _ in range(CALLS):
            if call == "read(1)" or call.startswith("read(100)"):
                assert await f.read(1 if call == "read(1)" else 100)
            elif call == "tell":
                await f.tell()
            elif call == "peek":
                assert await f.peek(1)
            elif "write" in call:
                await f.write("x" if call == "text write" else b"x")
            else:
                assert await f.readline()

    async def main():
        mode = {"text readline": "r", "write": "ab", "write, wb": "wb", "text write": "a"}.get(call, "rb")
        buffering = 256 << 10 if "256 KiB" in call else -1
        async with blockio.open(p, mode, buffering=buffering) as f:
            # (the calls alone: opening and closing suspend, and let the
            # ticker run)
            return await ticks_during(lambda: loop(f))

    assert run(main(), loop_factory) >= CALLS // TURN_BUDGET - 1


@LOOPS
@pytest.mark.parametrize("buffering", [-1, 0])
def test_the_cached_read_that_yields_keeps_its_place_and_reads_nothing_if_cancelled(data_file, loop_factory,
                                                                                     buffering):
    """The cached ``read`` that yields to the loop (its turn due) holds the
    file's place while it does: a call made after it takes effect after it,
    and a cancellation there moves nothing, so the next read gets the same
    bytes."""
    path, data = data_file
    e = blockio.Engine()

    async def main():
        with open(path, "rb") as warm:
            warm.read()
        async with blockio.open(path, "rb", buffering=buffering, engine=e) as f:
            await f.seek(4096)
            set_turn_count(TURN_BUDGET - 1)  # the next cached read is the one that yields
            reading = asyncio.ensure_future(f.read(100))
            await asyncio.sleep(0)  # it has started, and yields
            assert not reading.done()
            assert await f.seek(0) == 0  # made after it, while it yields: waits for it
            assert reading.done() and reading.result() == data[4096:4196]
            assert await f.tell() == 0

            await f.seek(8192)
            set_turn_count(TURN_BUDGET - 1)
            reading = asyncio.ensure_future(f.read(100))
            await asyncio.sleep(0)
            assert not reading.done()
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            assert await f.tell() == 8192
            assert await f.read(100) == data[8192:8292]

    try:
        run(main(), loop_factory)
    finally:
        e.close()


@LOOPS
@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("end", ["closed", "thrown into", "collected"])
def test_a_read_ended_during_its_own_turn_hands_the_files_queue_on(data_file, loop_factory, backend, end):
    """A cached ``read`` whose turn is due, in an asyncio task, takes the
    turn itself: it holds the file's call queue while it yields (bare, no
    coroutine of its own). Closed, thrown into or collected there, it has
    read nothing and hands the queue on: the next call runs, from where the
    file was."""
    path, data = data_file
    e = blockio.Engine(backend=backend)

    async def main():
        with open(path, "rb") as warm:
            warm.read()
        async with blockio.open(path, "rb", buffering=0, engine=e) as f:
            await f.seek(4096)
            set_turn_count(TURN_BUDGET - 1)  # the next cached read is the one that yields
            call = f.read(100)
            assert call.send(None) is None  # its turn, the queue held
            # (a bare yield of its own: no coroutine awaited, a generator's frame)
            assert call.cr_await is None and call.cr_frame.f_code.co_name == "_at_a_turn"
            assert f._calls.free == []
            if end == "closed":
                call.close()
            elif end == "thrown into":
                with pytest.raises(KeyError):
                    call.throw(KeyError("x"))
            else:
                del call
                gc.collect()
            assert f._calls.free == [None]
            return await f.read(100)

    try:
        assert run(main(), loop_factory) == data[4096:4196]
    finally:
        e.close()


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_read_after_its_own_turn_leaves_a_shared_descriptors_offset_at_the_position(data_file, backend,
                                                                                      buffering):
    """A cached ``read`` that took its turn of the event loop itself ends
    as the calls served inline do, with no queued call's ending: a
    descriptor whose number was given out (``fileno()``) is still left at
    the file's position, as the built-in file leaves it."""
    path, data = data_file
    e = blockio.Engine(backend=backend)

    async def main():
        with open(path, "rb") as warm:
            warm.read()
        async with blockio.open(path, "rb", buffering=buffering, engine=e) as f:
            fd = f.fileno()
            await f.seek(4096)
            set_turn_count(TURN_BUDGET - 1)  # the next cached read takes its turn
            call = f.read(100)
            assert call.send(None) is None  # (its own turn)
            assert call.cr_await is None and call.cr_frame.f_code.co_name == "_at_a_turn"
            try:
                call.send(None)
            except StopIteration as done:
                got = done.value
            return got, await f.tell(), os.lseek(fd, 0, os.SEEK_CUR), f._calls.free

    try:
        assert asyncio.run(main()) == (data[4096:4196], 4196, 4196, [None])
    finally:
        e.close()


@LOOPS
def test_calls_on_one_file_object_from_many_tasks_keep_their_order_on_cached_data(tmp_path, loop_factory):
    """Reads served inline (cached bytes, the read buffer) and calls that
    wait for the engine (``readinto``, the end of the file) from many
    tasks on one file object take effect one at a time: together they read
    the file exactly once, each where its predecessor ended."""
    path = tmp_path / "words.bin"
    data = b"".join((8 * i).to_bytes(8, "big") for i in range(12_500))  # each 8-byte word: its offset
    path.write_bytes(data)

    async def main():
        async with blockio.open(path, "rb") as f:

            async def reader(i):
                got = []
                for _ in range(20):
                    if i % 2:
                        b = bytearray(1000 + 8 * i)
                        got.append(bytes(b[:await f.readinto(b)]))
                    else:
                        got.append(await f.read(1000 + 8 * i))
                return got

            results = await asyncio.gather(*(reader(i) for i in range(8)))
            end = await f.tell()
        return results, end

    results, end = run(main(), loop_factory)
    assert end == len(data)
    chunks = sorted((int.from_bytes(c[:8], "big"), c) for r in results for c in r if c)
    at = 0
    for off, c in chunks:
        assert off == at and c == data[off:off + len(c)]
        at += len(c)
    assert at == len(data)


def evict(path):
    """``path``'s pages dropped from the page cache (written back first, so
    that the kernel drops them all)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@LOOPS
@BACKENDS
@pytest.mark.parametrize("busy", ["engine read", "read at its turn"])
@pytest.mark.parametrize("call", ["readline", "tell", "seek", "read"])
def test_a_call_served_inline_waits_for_the_call_in_progress(tmp_path, loop_factory, backend, busy, call):
    """``readline``, ``tell``, ``seek`` and ``read`` are served inline only
    while no call on the file is in progress: made while another task's
    read waits for the engine (evicted pages), or takes its turn of the
    event loop with bytes still in the buffer, each waits for it and
    starts where it ended, as aiofiles' calls do."""
    path = tmp_path / "lines"
    lines = [b"%07d\n" % i for i in range(200_000)]  # 8 bytes each
    path.write_bytes(b"".join(lines))
    e = blockio.Engine(backend=backend)

    async def main():
        async with blockio.open(path, "rb", engine=e) as f:
            assert await f.readline() == lines[0]  # (the buffer holds more lines)
            if busy == "engine read":
                evict(path)
                first = asyncio.ensure_future(f.read(800_000))  # from offset 8: through the engine
            else:
                set_turn_count(TURN_BUDGET - 1)
                first = asyncio.ensure_future(f.read(800_000 if call == "tell" else 8))  # from the buffer
            await asyncio.sleep(0)  # (it has started, and waits)
            if call == "readline":
                second = await f.readline()
            elif call == "tell":
                second = await f.tell()
            elif call == "seek":
                second = (await f.seek(16), await f.read(8))
            else:
                second = await f.read(8)
            return await first, second

    try:
        first, second = run(main(), loop_factory)
    finally:
        e.close()
    n = 100_000 if busy == "engine read" or call == "tell" else 1
    assert first == b"".join(lines[1:1 + n])
    assert second == {"readline": lines[1 + n], "tell": 8 + 8 * n, "seek": (16, lines[2]), "read": lines[1 + n]}[call]


@LOOPS
@pytest.mark.parametrize("busy", ["engine read", "read at its turn"])
def test_a_text_readline_served_inline_waits_for_the_call_in_progress(tmp_path, loop_factory, busy):
    """A text file's ``readline`` of a line decoded ahead is served inline
    only while no call on the file is in progress: made while another
    task's ``read`` waits for the engine or takes its turn, it waits for it
    and reads the line after what that read returned."""
    path = tmp_path / "lines"
    lines = ["%07d\n" % i for i in range(200_000)]  # 8 characters each
    path.write_text("".join(lines))

    async def main():
        async with blockio.open(path, "r") as f:
            assert await f.readline() == lines[0]  # (more lines decoded ahead)
            if busy == "engine read":
                evict(path)
                first = asyncio.ensure_future(f.read(800_000))
            else:
                set_turn_count(TURN_BUDGET - 1)
                first = asyncio.ensure_future(f.read(8))
            await asyncio.sleep(0)  # (it has started, and waits)
            second = await f.readline()
            return await first, second

    first, second = run(main(), loop_factory)
    n = 100_000 if busy == "engine read" else 1
    assert first == "".join(lines[1:1 + n]) and second == lines[1 + n]


@LOOPS
@pytest.mark.parametrize("call", ["readline", "async for", "tell"])
def test_readline_and_tell_served_inline_take_their_turns(tmp_path, loop_factory, call):
    """Lines served from the buffer and ``tell``s, each one call served at
    once, count towards the thread's turn as the others do, counted with
    the bytes they copy."""
    p = tmp_path / "lines"
    line = b"x" * 999 + b"\n"
    p.write_bytes(line * 3000)
    calls = 3000

    async def body(f):
        if call == "readline":
            for _ in range(calls):
                assert await f.readline() == line
        elif call == "async for":
            n = 0
            async for got in f:
                assert got == line
                n += 1
            assert n == calls
        else:
            for _ in range(calls):
                assert await f.tell() == 0

    async def main():
        async with blockio.open(p, "rb", buffering=4 << 20) as f:
            if call != "tell":
                assert await f.peek(1)  # (the whole file in the buffer: every line served inline)
            set_turn_count(0)
            return await ticks_during(lambda: body(f))

    assert run(main(), loop_factory) >= turns_at_least(calls, 0 if call == "tell" else len(line))


@LOOPS
@pytest.mark.parametrize("buffering", [-1, 4096])
def test_a_write_served_inline_waits_for_the_call_in_progress(tmp_path, loop_factory, buffering):
    """A ``write`` joining bytes already buffered is served inline only
    while no call on the file is in progress: made while a ``seek`` takes
    its turn of the event loop (before it runs), it waits for the seek, and
    its bytes land where the seek went."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")

    async def main():
        async with blockio.open(p, "r+b", buffering=buffering) as f:
            await f.write(b"a")
            set_turn_count(TURN_BUDGET - 1)
            seek = asyncio.ensure_future(f.seek(5))
            await asyncio.sleep(0)  # (the seek holds the file, at its turn)
            assert await f.write(b"b") == 1
            assert await seek == 5
            return await f.tell()

    assert run(main(), loop_factory) == 6
    assert p.read_bytes() == b"a1234b6789"


def turns_at_least(calls, nbytes):
    """The fewest turns ``calls`` calls served without suspending, each
    copying ``nbytes``, must take: a call counts one unit and one more per
    ``TURN_UNIT`` bytes; once the count reaches ``TURN_BUDGET - 1`` the
    next call takes the turn (less one, for what the thread's count held
    before)."""
    per_call = 1 + nbytes // TURN_UNIT
    period = -(-(TURN_BUDGET - 1) // per_call) + 1
    return calls // period - 1


@LOOPS
@pytest.mark.parametrize("call", ["read(1 MiB) from a 16 MiB buffer", "peek of a 16 MiB buffer",
                                  "write(1 MiB) into a 64 MiB buffer"])
def test_large_copies_from_and_into_a_files_buffer_take_their_turns(tmp_path, loop_factory, call):
    """Reads and peeks served from a large read buffer, and writes into a
    large write buffer, count the bytes they copy as cached reads do: a
    loop of 1 MiB copies takes a turn about every 4 MiB, not once in 256
    calls."""
    p = tmp_path / "big"
    data = os.urandom(16 << 20)
    p.write_bytes(data)
    mib = 1 << 20

    async def main():
        async with Ticker() as t:
            if call.startswith("write"):
                async with blockio.open(tmp_path / "out", "wb", buffering=64 << 20) as f:
                    start = t.ticks
                    for _ in range(32):
                        await f.write(data[:mib])
                    return t.ticks - start, turns_at_least(32, mib)
            async with blockio.open(p, "rb", buffering=16 << 20) as f:
                assert await f.read(1) == data[:1]  # fills the buffer (through the engine)
                start = t.ticks
                if call.startswith("peek"):
                    for _ in range(40):
                        assert len(await f.peek()) == len(data) - 1
                    return t.ticks - start, turns_at_least(40, len(data) - 1)
                got = [data[:1]]
                for _ in range(15):
                    got.append(await f.read(mib))
                turns = t.ticks - start
                assert b"".join(got) + await f.read() == data
                return turns, turns_at_least(15, mib)

    turns, least = run(main(), loop_factory)
    assert least >= 2
    assert turns >= least
    if call.startswith("write"):
        assert (tmp_path / "out").read_bytes() == data[:mib] * 32


@LOOPS
def test_calls_on_files_and_areads_of_other_engines_share_one_count(data_file, loop_factory):
    """A file's cached reads and ``aread``s of another engine, alternating
    on one thread, are counted together: at most ``TURN_BUDGET`` of them
    between two turns, not that many of each."""
    path, data = data_file
    e1, e2 = blockio.Engine(), blockio.Engine()

    async def main():
        with open(path, "rb") as plain:
            plain.read()
            async with blockio.open(path, "rb", buffering=0, engine=e1) as f, Ticker() as t:
                longest = since = 0
                last = t.ticks
                for i in range(10 * TURN_BUDGET):
                    off = (i * 4096) % len(data)
                    await f.seek(off)
                    assert await f.read(4096) == data[off:off + 4096]
                    assert await e2.aread(plain, offset=off, length=4096) == data[off:off + 4096]
                    since += 2
                    if t.ticks != last:
                        last = t.ticks
                        since = 0
                    longest = max(longest, since)
                return longest

    try:
        assert run(main(), loop_factory) <= TURN_BUDGET
    finally:
        e1.close()
        e2.close()


@LOOPS
@pytest.mark.parametrize("mode", ["rb", "r"])
def test_readlines_of_many_buffered_lines_takes_turns(tmp_path, loop_factory, mode):
    """One ``readlines`` call gathering many lines from the file's buffer
    takes a turn of the loop as a loop of ``readline`` would: at least
    once in ``TURN_BUDGET`` lines."""
    p = tmp_path / "lines"
    lines = 40 * TURN_BUDGET
    p.write_bytes(b"abc\n" * lines)  # whole buffers: no short read at the end
    with open(p, "rb") as warm:
        warm.read()

    async def main():
        async with blockio.open(p, mode) as f, Ticker() as t:
            start = t.ticks
            # (the hint stops it at the last line, before a read at the
            # end of the file, which would wait for the engine)
            got = await f.readlines(4 * lines - 5)
            assert len(got) == lines - 1
            return t.ticks - start

    assert run(main(), loop_factory) >= turns_at_least(lines - 1, 4)


@LOOPS
@pytest.mark.parametrize("mode", ["rb", "r"])
def test_readlines_cancelled_at_a_turn_between_lines_moves_nothing(tmp_path, loop_factory, mode):
    """A ``readlines`` cancelled at one of its turns between lines leaves
    the position where it was: the next ``readlines`` gets every line.
    (With a hint, which reads line by line; without one, ``readlines`` is
    one read split at once: ``test_lines_bulk.py``.)"""
    p = tmp_path / "lines"
    p.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    expected = p.read_bytes().splitlines(keepends=True)
    if mode == "r":
        expected = [x.decode() for x in expected]

    async def main():
        async with blockio.open(p, mode) as f:
            assert await f.readline() == expected[0]
            reading = asyncio.ensure_future(f.readlines(1 << 30))
            set_turn_count(0)
            await asyncio.sleep(0)  # it starts, and reads lines
            for _ in range(5):
                if reading.done():
                    break
                set_turn_count(TURN_BUDGET - 1)  # its next line is at its turn
                await asyncio.sleep(0)
            assert not reading.done()
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
            assert await f.readlines() == expected[1:]

    run(main(), loop_factory)


@LOOPS
@pytest.mark.parametrize("api", ["aread", "read, buffering=0", "read, buffered"])
def test_the_call_that_takes_the_turn_counts_its_bytes(data_file, loop_factory, api):
    """Cached reads just under ``INLINE_MAX`` (256 KiB) copy at most
    ``TURN_BUDGET * TURN_UNIT`` bytes (4 MiB) between two turns: the read
    made after its turn counts the bytes it copied too."""
    path, data = data_file
    length = (256 << 10) - 1
    e = blockio.Engine()

    async def main():
        with open(path, "rb") as plain:
            plain.read()
            buffering = -1 if api == "read, buffered" else 0
            async with blockio.open(path, "rb", buffering=buffering, engine=e) as f, Ticker() as t:
                most = since = 0
                last = t.ticks
                for i in range(200):
                    off = (i * 7919 * 4096) % (len(data) - length)
                    if api == "aread":
                        got = await e.aread(plain, offset=off, length=length)
                    else:
                        await f.seek(off)
                        got = await f.read(length)
                    assert got == data[off:off + length]
                    if t.ticks != last:
                        last = t.ticks
                        since = 0
                    since += len(got)
                    most = max(most, since)
                return most

    try:
        assert run(main(), loop_factory) <= TURN_BUDGET * TURN_UNIT
    finally:
        e.close()


def _mixed_steps(rng):
    """A mix of ``readinto``, ``read``, ``write``, ``seek`` and ``tell``
    calls over a file of 64 KiB: (name, argument)."""
    steps = []
    for _ in range(300):
        k = rng.random()
        if k < 0.35:
            steps.append(("readinto", rng.choice([0, 1, 100, 4095, 4096, 8193, 70_000, 300_000])))
        elif k < 0.5:
            steps.append(("read", rng.choice([1, 100, 5000])))
        elif k < 0.75:
            steps.append(("write", rng.randbytes(rng.choice([1, 7, 100, 4095, 9000]))))
        elif k < 0.9:
            steps.append(("seek", rng.randrange(0, 80_000)))
        else:
            steps.append(("tell", None))
    return steps


def _apply(f, name, arg):
    """One step on a built-in file ``f``: its result (``readinto``: the
    count and the bytes read)."""
    if name == "readinto":
        b = bytearray(arg)
        n = f.readinto(b)
        return n, bytes(b[:n])
    if name == "tell":
        return f.tell()
    return getattr(f, name)(arg)


async def _apply_async(f, name, arg):
    if name == "readinto":
        b = bytearray(arg)
        n = await f.readinto(b)
        return n, bytes(b[:n])
    if name == "tell":
        return await f.tell()
    return await getattr(f, name)(arg)


@BACKENDS
@pytest.mark.parametrize("buffering", [-1, 0, 65536])
@pytest.mark.parametrize("seed", [1, 2])
def test_readinto_and_writes_mixed_with_other_calls_match_the_builtin(tmp_path, backend, buffering, seed):
    """``readinto`` served inline (straight into the buffer, from the read
    buffer or the page cache) and the first write after a flush served
    inline leave the built-in file's results, positions and bytes, in any
    order with reads, seeks, tells and other writes; ``readinto`` larger
    than the bytes held or the file's rest included."""
    rng = random.Random(seed)
    steps = _mixed_steps(rng)
    start = rng.randbytes(65536)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.write_bytes(start)
    theirs.write_bytes(start)
    with open(theirs, "rb+", buffering=buffering) as f:
        want = [_apply(f, name, arg) for name, arg in steps]

    async def main(e):
        async with blockio.open(mine, "rb+", buffering=buffering, engine=e) as f:
            return [await _apply_async(f, name, arg) for name, arg in steps]

    with blockio.Engine(backend=backend) as e:
        got = asyncio.run(main(e))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, (i, steps[i][0])
    assert len(got) == len(want)
    assert mine.read_bytes() == theirs.read_bytes()
