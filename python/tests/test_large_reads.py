"""Whole-file and large reads: ``read()`` asks for what the file's size
says is left and a byte more (as the built-in ``readall``), reading on only
if the file grew; its bytes are read into the object returned, never
copied on the event loop's thread; cached reads up to ``INLINE_PIECE`` are
served on the calling thread at once, a file's cached ``read(n)`` up to
``INLINE_MAX`` in pieces of ``INLINE_PIECE`` with a turn of the event
loop between two, and longer ones go to the engine, in pieces, into their
``bytes`` object. Both backends, asyncio and uvloop."""

import asyncio
import os
import tracemalloc

import pytest
import trio

import blockio
from blockio._blockio import INLINE_MAX, INLINE_PIECE, TURN_BUDGET, pieces_in_flight_peak, set_turn_count

LOOPS = pytest.mark.parametrize("loop_factory", ["asyncio", "uvloop"])

#: The turns these tests count are those of the count alone (see
#: ``turns_by_count``; the time between turns is tested on its own).
pytestmark = pytest.mark.usefixtures("turns_by_count")

#: The bytes of one piece of a read through the engine (the core's PIECE).
PIECE = 4 << 20


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


def lengths_asked(engine):
    """Records the length of every read ``engine`` is asked for (by
    ``aread``, ``aread_batch`` and ``_aread_after``, a read after bytes
    held), in a list it returns."""
    asked = []
    aread, aread_batch, aread_after = engine.aread, engine.aread_batch, engine._aread_after

    async def spy_aread(file, *, offset, length):
        asked.append(length)
        return await aread(file, offset=offset, length=length)

    async def spy_batch(file, *, offsets, length, return_exceptions=False):
        offsets = list(offsets)
        asked.extend([length] * len(offsets))
        return await aread_batch(file, offsets=offsets, length=length, return_exceptions=return_exceptions)

    async def spy_after(file, head, offset, length):
        asked.append(length)
        return await aread_after(file, head, offset, length)

    engine.aread, engine.aread_batch, engine._aread_after = spy_aread, spy_batch, spy_after
    return asked


def queued():
    """Makes the next call on a file go through its call queue (its turn
    of the event loop is due), not be served inline."""
    set_turn_count(TURN_BUDGET - 1)


@LOOPS
@pytest.mark.parametrize("size", [0, 1, 10 << 10, 300 << 10, (9 << 20) + 5])
@pytest.mark.parametrize("buffering", [-1, 0])
def test_read_of_a_whole_file_asks_for_its_size_and_a_byte_more(tmp_path, engine, loop_factory, size, buffering):
    """``read()`` asks the engine for the bytes the file's size says are
    left and one more (which comes back only if the file grew), as the
    built-in ``readall``; never for a block of its own size (a 10 KiB file
    read with 1 MiB reads held 1 MiB per call)."""
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", buffering=buffering, engine=engine) as f:
            asked = lengths_asked(engine)
            queued()
            got = await f.read()
            return got, asked, await f.tell()

    got, asked, pos = run(main(), loop_factory)
    assert got == data and pos == size
    assert asked and max(asked) <= max(size + 1, 8192), asked


@LOOPS
@pytest.mark.parametrize("size", [0, 1, 10 << 10, INLINE_PIECE - 1])
@pytest.mark.parametrize("buffering", [-1, 0])
def test_read_of_the_cached_rest_of_a_file_is_served_inline(tmp_path, engine, loop_factory, size, buffering):
    """``read()`` of a file whose rest is all cached, fewer than
    ``INLINE_PIECE`` bytes, is one ``preadv2`` of those bytes and one more on the calling
    thread (its size asked of the kernel without waiting): no engine read,
    no suspension (a callback scheduled before it has not run)."""
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", buffering=buffering, engine=engine) as f:
            await f.seek(min(size, 3))
            asked = lengths_asked(engine)
            ran = []
            asyncio.get_running_loop().call_soon(ran.append, 1)
            set_turn_count(0)
            got = await f.read()
            ran_then = list(ran)
            return got, asked, ran_then, await f.tell(), await f.read()

    got, asked, ran, pos, more = run(main(), loop_factory)
    assert (got, pos, more) == (data[3:], size, b"")
    assert asked == [] and ran == []


@LOOPS
@pytest.mark.parametrize("lead", ["read(5)", "readline()", "seek(7)"])
def test_read_of_the_rest_after_other_calls(tmp_path, engine, loop_factory, lead):
    """``read()`` after a read (whose buffer holds bytes read ahead), a
    line or a seek returns the rest from the position, as the built-in's."""
    p = tmp_path / "f"
    data = b"first line\n" + os.urandom(100 << 10)
    p.write_bytes(data)
    with open(p, "rb") as f:
        eval("f." + lead)
        want = f.read()

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            await eval("f." + lead)
            asked = lengths_asked(engine)
            return await f.read(), asked

    got, asked = run(main(), loop_factory)
    assert got == want and max(asked, default=0) <= len(data) + 1


@LOOPS
@pytest.mark.parametrize("change", ["grows", "grows a lot", "shrinks"])
def test_read_of_a_file_that_changes_after_its_size_was_looked_up(tmp_path, engine, loop_factory, change):
    """The file grows (or shrinks) between the size lookup and the read:
    ``read()`` returns what the file holds then, reading on with larger
    reads while they come back full."""
    p = tmp_path / "f"
    data = os.urandom(50_000)
    p.write_bytes(data)
    extra = os.urandom({"grows": 3, "grows a lot": 3 << 20, "shrinks": 0}[change])

    async def main():
        size_of = engine._asize

        async def changing(file):
            size = await size_of(file)
            if change == "shrinks":
                os.truncate(p, 20_000)
            else:
                with open(p, "ab") as g:
                    g.write(extra)
            return size

        engine._asize = changing
        try:
            async with blockio.open(p, "rb", engine=engine) as f:
                queued()  # (served inline, it would not ask the size)
                return await f.read(), await f.tell()
        finally:
            engine._asize = size_of

    got, pos = run(main(), loop_factory)
    want = data[:20_000] if change == "shrinks" else data + extra
    assert got == want and pos == len(want)


@pytest.mark.parametrize("path", ["/proc/version", "/proc/self/cmdline"])
def test_read_of_a_file_whose_size_says_nothing_reads_to_its_end(engine, path):
    """A procfs file's size is 0: ``read()`` reads on until a read returns
    nothing, as the built-in's."""
    with open(path, "rb") as f:
        want = f.read()

    async def main():
        async with blockio.open(path, "rb", engine=engine) as f:
            return await f.read()

    assert want and asyncio.run(main()) == want


def test_read_of_a_whole_file_holds_no_copy_of_it(tmp_path, engine):
    """The bytes of ``read()`` are read into the object returned: the
    Python memory it takes at its peak is the file's size, not twice that
    (blocks read, then joined on the event loop's thread)."""
    size = 24 << 20
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            tracemalloc.start()
            try:
                got = await f.read()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            return got, peak

    got, peak = asyncio.run(main())
    assert got == data
    assert peak < size + (2 << 20), peak


@LOOPS
@pytest.mark.parametrize("length", [300 << 10, INLINE_PIECE])
@pytest.mark.parametrize("api", ["open", "aread"])
def test_large_cached_reads_are_served_on_the_calling_thread(tmp_path, engine, loop_factory, length, api):
    """A cached read of up to ``INLINE_PIECE`` bytes is one ``preadv2`` into
    the bytes returned, on the calling thread (no ring round trip, no
    wake-up of the loop, no copy out of a buffer of the engine's): the
    call returns before a callback scheduled just before it runs."""
    p = tmp_path / "f"
    data = os.urandom(length + 4096)
    p.write_bytes(data)

    async def main():
        with open(p, "rb") as plain:
            plain.read()
            async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
                await f.seek(100)
                ran = []
                asyncio.get_running_loop().call_soon(ran.append, 1)
                set_turn_count(0)
                if api == "open":
                    got = await f.read(length)
                else:
                    got = await engine.aread(plain, offset=100, length=length)
                return got, list(ran)  # (before the close, which waits)

    got, ran = run(main(), loop_factory)
    assert got == data[100:100 + length]
    assert ran == []


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("api", ["open", "aread"])
def test_reads_longer_than_cached_max_go_to_the_engine_in_pieces(tmp_path, engine, cached, api):
    """A read longer than ``INLINE_MAX`` (or not cached) goes through the
    engine, in pieces read into the bytes returned, while the loop runs the
    other tasks: the bytes are right, a short read at the end is cut to
    what the file holds."""
    p = tmp_path / "f"
    size = INLINE_MAX + (5 << 20) + 123
    data = os.urandom(size)
    p.write_bytes(data)
    if not cached:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    async def main():
        ran = []
        async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
            with open(p, "rb") as plain:
                out = []
                for at, length in [(7, size - 7), (1 << 20, size), (size - 10, 1 << 20), (size + 5, 1 << 20)]:
                    asyncio.get_running_loop().call_soon(ran.append, at)
                    if api == "open":
                        await f.seek(at)
                        out.append(await f.read(length))
                    else:
                        out.append(await engine.aread(plain, offset=at, length=length))
        return out, ran

    out, ran = run(main(), "asyncio")
    assert out == [data[7:], data[1 << 20:], data[-10:], b""]
    assert ran[:2] == [7, 1 << 20]


@pytest.mark.parametrize("length", [100, 1 << 20])
def test_a_large_read_fails_as_a_small_one(tmp_path, engine, length):
    """A read the descriptor refuses fails alike whatever its length (in
    pieces or not): ``OSError`` with its errno and the file's name."""
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)

    async def main():
        with open(p, "ab") as w:
            with pytest.raises(OSError) as err:
                await engine.aread(w, offset=0, length=length)
            return err.value

    err = asyncio.run(main())
    assert err.errno == 9 and err.filename == str(p)


@pytest.mark.parametrize("size", [10 << 10, INLINE_PIECE + 5, INLINE_MAX + (3 << 20)])
def test_whole_and_large_reads_under_trio(tmp_path, engine, size):
    """Under trio too: ``read()`` (served inline, or through the engine
    in pieces), a ``read(n)`` served inline in pieces (trio's checkpoints
    between them) or past ``INLINE_MAX``, and ``Engine.aread`` return the
    file's bytes."""
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            whole = await f.read()
            await f.seek(5)
            part = await f.read(size)
        with open(p, "rb") as plain:
            positional = await engine.aread(plain, offset=1, length=size)
        return whole, part, positional

    assert trio.run(main) == (data, data[5:], data[1:])



@pytest.mark.parametrize("api", ["open", "aread"])
def test_a_large_read_keeps_half_the_cpus_reading_at_most(tmp_path, engine, api):
    """The pieces of a large read are not all in flight at once: on the
    thread pool, all of them at once ran a copy per piece on its own
    thread (64 threads for 256 MiB), and the event loop's thread waited
    hundreds of milliseconds for a core. At most half the CPUs' worth of
    pieces (one on two) are in flight at once; the bytes are the file's."""
    lanes = max(1, len(os.sched_getaffinity(0)) // 2)
    p = tmp_path / "f"
    # More pieces of 4 MiB than lanes, and more than INLINE_MAX: the read
    # goes to the engine, and a bound that held nothing back would show.
    data = os.urandom(max(INLINE_MAX, PIECE * (lanes + 1)) + PIECE)
    p.write_bytes(data)

    async def main():
        if api == "aread":
            with open(p, "rb") as f:
                return await engine.aread(f, offset=0, length=len(data))
        async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
            return await f.read(len(data))

    pieces_in_flight_peak()
    got = asyncio.run(main())
    peak = pieces_in_flight_peak()
    assert got == data
    assert 1 <= peak <= lanes, (peak, lanes)


class Ticker:
    """A task looping on ``sleep(0)``: ``ticks`` counts its turns, the
    turns of the event loop the code around it gave the loop's other tasks
    (counted, not timed)."""

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


@LOOPS
@pytest.mark.parametrize("size", [INLINE_PIECE, INLINE_PIECE + 5, INLINE_MAX])
@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_loop_of_large_cached_reads_lets_the_other_tasks_run(tmp_path, engine, loop_factory, size, buffering):
    """``while chunk := await f.read(n)`` over a cached file: the loop's
    thread copies at most ``INLINE_PIECE`` bytes between two turns of the
    event loop, so a task looping on ``sleep(0)`` runs before every piece
    of a read but the first read's first, whatever ``n`` (an 8 MiB read was
    one copy on the loop's thread, two or three of which a task waiting
    on a timer waited for: 34-60 ms under load where aiofiles' longest
    gap was 3.4-6.9 ms)."""
    p = tmp_path / "f"
    data = os.urandom(2 * INLINE_MAX + INLINE_PIECE + 123)
    p.write_bytes(data)
    pieces = -(-size // INLINE_PIECE)

    async def main():
        async with blockio.open(p, "rb", buffering=buffering, engine=engine) as f, Ticker() as t:
            got, per_read = [], []
            set_turn_count(0)
            while True:
                before = t.ticks
                chunk = await f.read(size)
                per_read.append((len(chunk), t.ticks - before))
                if not chunk:
                    return b"".join(got), per_read
                got.append(chunk)

    whole, per_read = run(main(), loop_factory)
    assert whole == data
    full = [ticks for n, ticks in per_read if n == size]
    assert len(full) == len(data) // size
    assert full[0] >= pieces - 1, per_read
    # (a turn before each piece after the first; and before the first too
    # when the read before ended with a whole piece)
    assert min(full[1:]) >= (pieces if size % INLINE_PIECE == 0 else pieces - 1), per_read
    assert sum(ticks for _, ticks in per_read) >= len(data) // INLINE_PIECE - 1, per_read


@LOOPS
def test_a_read_in_pieces_cancelled_between_two_reads_nothing(tmp_path, engine, loop_factory):
    """Cancelled during a turn between two of its pieces, a read returns
    nothing and moves nothing: the position stays, the next read reads
    from it."""
    p = tmp_path / "f"
    data = os.urandom(INLINE_MAX + 100)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
            await f.seek(10)
            set_turn_count(0)
            task = asyncio.ensure_future(f.read(INLINE_MAX))
            await asyncio.sleep(0)  # (its first piece read, it waits for its turn)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await f.tell(), await f.read(100), await f.read(INLINE_MAX)

    assert run(main(), loop_factory) == (10, data[10:110], data[110:110 + INLINE_MAX])


@LOOPS
def test_a_read_in_pieces_holds_the_files_place_until_its_last(tmp_path, engine, loop_factory):
    """Calls made on the file while a read goes on in pieces wait for it,
    as behind any call in progress: they read what follows its bytes."""
    p = tmp_path / "f"
    data = os.urandom(INLINE_MAX + 100)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            set_turn_count(0)
            first = asyncio.ensure_future(f.read(INLINE_MAX))
            await asyncio.sleep(0)  # (its first piece read)
            assert not first.done()
            after = await f.read(10)
            assert first.done()
            return await first, after, await f.tell()

    assert run(main(), loop_factory) == (data[:INLINE_MAX], data[INLINE_MAX:][:10], INLINE_MAX + 10)


def test_a_read_in_pieces_whose_later_piece_is_not_cached_reads_through_the_engine(tmp_path, engine):
    """A piece not all in the page cache: the read goes to the engine, from
    its start (the pieces read are dropped), and returns the file's bytes.
    (What is dropped from the page cache starts at a multiple of 2 MiB:
    the cache keeps a file's pages in folios of up to 2 MiB, dropped whole
    or not at all.)"""
    p = tmp_path / "f"
    dropped = max(INLINE_PIECE, 2 << 20)
    data = os.urandom(dropped + INLINE_PIECE)
    p.write_bytes(data)

    def drop_from_the_page_cache():
        # (not checked here with a read: even an RWF_NOWAIT read of pages
        # not cached starts reading them back; the engine's read asked for
        # below is what shows the piece was not cached)
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, dropped, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    async def main():
        async with blockio.open(p, "rb", buffering=0, engine=engine) as f:
            asked = lengths_asked(engine)
            set_turn_count(0)
            task = asyncio.ensure_future(f.read(len(data)))
            await asyncio.sleep(0)  # (its first piece read, it waits for its turn)
            assert not task.done() and asked == []
            drop_from_the_page_cache()
            return await task, asked, await f.tell()

    got, asked, pos = asyncio.run(main())
    assert got == data and pos == len(data)
    assert asked == [len(data)]


#: A read longer than ``INLINE_MAX`` that goes to the engine: 16 MiB and
#: 64 MiB, the sizes at which a copy on the loop's thread was found.
ENGINE_SIZES = [16 << 20, 64 << 20]


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """A 64 MiB + 123 byte file of random bytes (and its bytes), made once
    for the tests below."""
    p = tmp_path_factory.mktemp("big") / "f"
    data = os.urandom((64 << 20) + 123)
    p.write_bytes(data)
    return p, data


def engine_results(engine):
    """Records every object ``engine.aread`` and ``engine._aread_after``
    (a read after bytes held) return, in a list it returns."""
    results = []
    aread, aread_after = engine.aread, engine._aread_after

    async def spy_aread(file, *, offset, length):
        got = await aread(file, offset=offset, length=length)
        results.append(got)
        return got

    async def spy_after(file, head, offset, length):
        got = await aread_after(file, head, offset, length)
        results.append(got)
        return got

    engine.aread, engine._aread_after = spy_aread, spy_after
    return results


@LOOPS
@pytest.mark.parametrize("size", ENGINE_SIZES)
@pytest.mark.parametrize("lead", [0, 10])
def test_a_loop_of_reads_past_the_inline_max_copies_nothing_on_the_loops_thread(big_file, engine, loop_factory,
                                                                                size, lead):
    """``while chunk := await f.read(n)`` with n past ``INLINE_MAX``, after
    a small read whose buffer holds bytes read ahead (``lead``) or not:
    each read's ``bytes`` is the very object the engine's read filled (off
    the loop's thread, in pieces; the bytes held copied into its start
    first), not a copy joined on the loop's thread (which at 256 MiB held
    the loop 200 ms and two full-size buffers)."""
    p, data = big_file

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            head = await f.read(lead)
            results = engine_results(engine)
            got = [head]
            while True:
                chunk = await f.read(size)
                if not chunk:
                    return b"".join(got), got[1:], results
                got.append(chunk)

    whole, chunks, results = run(main(), loop_factory)
    assert whole == data
    full = [chunk for chunk in chunks if len(chunk) == size]
    assert len(full) == (len(data) - lead) // size
    for chunk in full:
        assert any(chunk is r for r in results)


@LOOPS
@pytest.mark.parametrize("size", ENGINE_SIZES)
@pytest.mark.parametrize("lead", [0, 10])
def test_a_read_past_the_inline_max_cancelled_moves_nothing(big_file, engine, loop_factory, size, lead):
    """Cancelled while its pieces are read, a read past ``INLINE_MAX``
    returns nothing and moves nothing, also with bytes read ahead held
    before it: the next reads return the bytes from where it started."""
    p, data = big_file

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            head = await f.read(lead)
            task = asyncio.ensure_future(f.read(size))
            await asyncio.sleep(0)  # (its read started, its bytes not yet come)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return head, await f.tell(), await f.read(100), await f.read(size)

    head, pos, small, big = run(main(), loop_factory)
    assert (head, pos, small) == (data[:lead], lead, data[lead:lead + 100])
    assert big == data[lead + 100:lead + 100 + size]


PEAK_SCRIPT = r"""
import asyncio, sys
import blockio

path, backend, lead, call = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
size = 64 << 20


def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith(field + ":"))


async def main():
    engine = blockio.Engine(backend=backend)
    async with blockio.open(path, "rb", engine=engine) as f:
        await f.read(1 << 20)  # (the engine and its threads started)
        await f.seek(0)
        await f.read(lead)
        with open("/proc/self/clear_refs", "w") as c:
            c.write("5")  # (the peak starts again from the RSS now)
        before = status("VmRSS")
        got = await (f.read() if call == "read()" else f.read(size))
        peak = status("VmHWM")
        print(len(got), peak - before)
    engine.close()


asyncio.run(main())
"""


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("lead", [0, 10])
@pytest.mark.parametrize("call", ["read(n)", "read()"])
def test_a_large_read_holds_one_buffer_of_its_size(big_file, backend, lead, call):
    """A 64 MiB ``read(n)`` (and ``read()`` of a 64 MiB rest), with bytes
    read ahead held before it or not, grows the process's peak RSS by its
    bytes and less than two pieces more, not by a second full-size buffer
    (its bytes joined to what was held, on the loop's thread). Counted by
    the kernel (``VmHWM``, started again from the RSS before the read), in
    a process of its own: the engine's memory is Rust's, which
    ``tracemalloc`` does not see, and ``ru_maxrss`` keeps the peak of the
    process that forked it."""
    import subprocess
    import sys

    p, data = big_file
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(p), backend, str(lead), call],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    n, grew = map(int, out.stdout.split())
    assert n == (64 << 20 if call == "read(n)" else len(data) - lead)
    assert n <= grew < n + 2 * PIECE, (n, grew)


@pytest.mark.parametrize("size", [INLINE_PIECE + 5, 12 << 20])
def test_a_large_read_the_buffer_holds_is_served_from_it(big_file, engine, size):
    """With ``buffering`` larger than a piece, a read past a piece that the
    buffer holds takes its bytes from the buffer (one copy, as the
    README says), also through the call queue (made while a read ahead
    of it holds the queue for its turn of the event loop): the buffer is
    not dropped and read again, as it is for a read longer than what it
    holds."""
    p, data = big_file

    async def main():
        async with blockio.open(p, "rb", buffering=16 << 20, engine=engine) as f:
            head = await f.read(10)
            asked = lengths_asked(engine)
            queued()
            first = asyncio.ensure_future(f.read(1))  # (its turn due: it holds the queue through it)
            second = asyncio.ensure_future(f.read(size))
            one, got = await asyncio.gather(first, second)
            return head + one, got, asked, await f.tell()

    head, got, asked, pos = asyncio.run(main())
    assert (head, got, pos) == (data[:11], data[11:11 + size], 11 + size)
    assert asked == []


def _rewrite_past(p, at):
    """Another writer's change: every byte of ``p`` from ``at`` on becomes
    ``B``."""
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"B" * (os.fstat(fd).st_size - at), at)
    finally:
        os.close(fd)


@LOOPS
@pytest.mark.parametrize("change", ["rewritten", "truncated"])
@pytest.mark.parametrize("size", [1 << 20, INLINE_PIECE + 1, 16 << 20, -1])
def test_a_large_read_after_a_small_one_returns_the_bytes_held_as_the_builtins(tmp_path, engine, loop_factory,
                                                                                change, size):
    """``read(10)``, then another writer rewrites the file past those bytes
    (or truncates it to 5 bytes), then ``read(n)`` or ``read()``: the bytes
    the buffer read ahead come first, as the built-in's (and aiofiles')
    read returns them; a large read does not drop them to read the
    changed file again. Same ``buffering`` on both sides, so the same
    bytes are held."""
    p = tmp_path / "f"
    bufsize = 8192

    def make():
        p.write_bytes(b"A" * (17 << 20))

    def changed():
        if change == "truncated":
            os.truncate(p, 5)
        else:
            _rewrite_past(p, 10)

    make()
    with open(p, "rb", buffering=bufsize) as f:
        f.read(10)
        changed()
        want = f.read(size), f.tell()

    async def main():
        make()
        async with blockio.open(p, "rb", buffering=bufsize, engine=engine) as f:
            await f.read(10)
            changed()
            return await f.read(size), await f.tell()

    got, pos = run(main(), loop_factory)
    assert pos == want[1]
    assert got == want[0], (len(got), got.count(b"A"), len(want[0]), want[0].count(b"A"))


@pytest.mark.parametrize("api", ["open", "aread"])
def test_a_large_read_of_a_character_device_reads_on_past_a_short_read(engine, api):
    """``/dev/zero``: a character device may return fewer bytes than asked
    anywhere (io_uring's reads of it stop short when the reading thread is
    due to be rescheduled), so a short piece is the end only where a read
    returning nothing confirms it (or a regular file's size says so): a
    64 MiB read returns 64 MiB (``Engine.aread`` returned 2-17 MiB of
    64-256 MiB on io_uring, the pieces after the first short one
    dropped)."""
    size = 64 << 20

    async def main():
        with open("/dev/zero", "rb") as plain:
            if api == "aread":
                return await engine.aread(plain, offset=0, length=size)
            async with blockio.open(plain.fileno(), "rb", closefd=False, engine=engine) as f:
                await f.read(10)  # (bytes held: the large read starts with them)
                return await f.read(size)

    got = asyncio.run(main())
    assert len(got) == size and got.count(0) == size


def test_a_large_read_of_a_procfs_file_reads_on_past_each_short_read(engine):
    """``/proc/kallsyms``: a procfs file is "regular" with size 0 and
    returns at most a page per read, every time, so a buffered file's
    large read after a small one must read on past each short read to the
    end a read returning nothing confirms (its size says nothing): as the
    built-in's. (A size of 0 taken for the end returned one page of 5 MiB.)
    An unbuffered read is one read(2), as ``FileIO``'s
    (test_file_compat.py's ``test_an_unbuffered_read_is_one_read_as_fileios``),
    and so is ``Engine.aread``'s of such a file."""
    path = "/proc/kallsyms"
    with open(path, "rb") as plain:
        want = plain.read()
    assert len(want) > 1 << 20, "the file this test reads is too small to need pieces"

    async def main():
        with open(path, "rb") as plain:
            async with blockio.open(plain.fileno(), "rb", closefd=False, engine=engine) as f:
                head = await f.read(10)
                return head + await f.read(len(want) + (4 << 20))

    got = asyncio.run(main())
    assert len(got) == len(want) and got == want


@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_read_past_one_reads_limit_is_one_object_buffered_and_one_read_unbuffered(big_file, engine, monkeypatch,
                                                                                   buffering):
    """A ``read(n)`` past ``_MAX_IO`` (the most one ``read(2)`` returns,
    about 2 GiB; 16 MiB here, so that the test stays small) after bytes
    read ahead: buffered, one object the engine fills in pieces, asked of
    it at once (its parts were joined on the loop's thread, a copy of the
    whole); unbuffered, one read of at most ``_MAX_IO``, as ``FileIO``'s."""
    from blockio import _file

    monkeypatch.setattr(_file, "_MAX_IO", 16 << 20)
    p, data = big_file
    size = 40 << 20

    async def main():
        async with blockio.open(p, "rb", buffering=buffering, engine=engine) as f:
            if buffering:
                await f.read(10)  # (bytes read ahead held)
            else:
                await f.seek(10)
            asked = lengths_asked(engine)
            results = engine_results(engine)
            got = await f.read(size)
            return got, asked, results, await f.tell()

    got, asked, results, pos = asyncio.run(main())
    if buffering:
        assert (got, pos) == (data[10:10 + size], 10 + size)
        assert len(asked) == 1 and asked[0] > 16 << 20, asked
        assert any(got is r for r in results)
    else:
        assert (got, pos) == (data[10:10 + (16 << 20)], 10 + (16 << 20))


@pytest.mark.parametrize("lead", [0, 10])
def test_a_read_of_a_rest_past_one_reads_limit_is_one_object(big_file, engine, monkeypatch, lead):
    """``read()`` of a rest past ``_MAX_IO`` (about 2 GiB; 16 MiB here, so
    that the test stays small), after bytes read ahead or not: one object
    the engine fills in pieces, asked of it at once (its parts were joined
    on the loop's thread, a copy of the whole)."""
    from blockio import _file

    monkeypatch.setattr(_file, "_MAX_IO", 16 << 20)
    p, data = big_file

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            await f.read(lead)
            asked = lengths_asked(engine)
            results = engine_results(engine)
            queued()  # (served inline, it would not ask the size)
            got = await f.read()
            return got, asked, results, await f.tell()

    got, asked, results, pos = asyncio.run(main())
    assert (got, pos) == (data[lead:], len(data))
    assert len(asked) == 1 and asked[0] > 16 << 20, asked
    assert any(got is r for r in results)


@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_read_of_more_than_memory_after_a_small_one_reads_what_the_file_has(tmp_path, engine, buffering):
    """``read(1 << 40)`` after ``read(10)``: the bytes the file has, as the
    README says of a size past what one read returns, not a
    ``MemoryError`` for an object of the size asked allocated before the
    read (the built-in's ``read`` raises one)."""
    p = tmp_path / "f"
    data = os.urandom(100_000)
    p.write_bytes(data)

    async def main():
        async with blockio.open(p, "rb", buffering=buffering, engine=engine) as f:
            await f.read(10)
            return await f.read(1 << 40), await f.tell()

    assert asyncio.run(main()) == (data[10:], len(data))
