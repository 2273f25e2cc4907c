"""Files on blockio's event loop: on io_uring, a read of a ``blockio.open``
file or of ``Engine.aread`` that the page cache cannot serve goes on the
loop's own ring (``LoopRing.pread``: counted by its ``file_reads``), and
none through the engine (its ``reads_started`` does not move); on the
loop's epoll fallback, asyncio's loop and uvloop, reads go through the
engine. Pages are dropped from the cache with
``posix_fadvise(DONTNEED)`` after an ``fsync``, so that a read finds them
uncached; the counts, not any timing, say where each read went."""

import asyncio
import ctypes
import errno
import gc
import mmap
import os
import random
import resource
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import uvloop

import blockio
from blockio._engine import default_engine
from blockio._loop import EpollEventLoop, UringEventLoop
from fdnumbers import move_to, names
from loops import abandon
from test_inline_reads import evict
from waits import await_until, wait_until

SIZE = 1 << 20
PIECE = 4096


@pytest.fixture
def data_path(tmp_path):
    """A 1 MiB file of random bytes, written out to the disk."""
    data = random.Random(63).randbytes(SIZE)
    p = tmp_path / "data.bin"
    with open(p, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return p, data


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def cached_pages(path, at=0, size=None):
    """The offsets of the pages of ``path`` in ``[at, at + size)`` (to its
    end if ``size`` is None) the page cache holds, as ``mincore`` reports
    them for a mapping of the file that is never touched (a probe by
    reading, even ``RWF_NOWAIT``, starts the read ahead it looks for)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        length = os.fstat(fd).st_size
        if length == 0:
            return []
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), f"mmap of {path}")
        try:
            pages = (length + PIECE - 1) // PIECE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, length, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path}")
            end = length if size is None else min(length, at + size)
            return [p * PIECE for p in range(at // PIECE, (end + PIECE - 1) // PIECE) if vec.raw[p] & 1]
        finally:
            _libc.munmap(addr, length)
    finally:
        os.close(fd)


def drop_cache(path, at=0, size=None, tries=1000):
    """Drops a file's pages (those in ``[at, at + size)``, the whole file
    by default) from the page cache, written out first. The advice is
    best effort: a page the kernel still holds (in another CPU's batch of
    pages on their way to its lists, say) is kept; so the pages are
    checked and evicted again until the cache holds none of them."""
    for _ in range(tries):
        evict(path)
        held = cached_pages(path, at, size)
        if not held:
            return
    raise AssertionError(f"{path}: the page cache still holds {len(held)} page(s) "
                         f"(first at offset {held[0]}) after {tries} evictions")


def run_on(new_loop, coro):
    loop = new_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


async def read_on_ring(f, path, at, size, attempts=3000):
    """A task reading ``size`` bytes of ``f`` (unbuffered, or with nothing
    buffered) at ``at``, started once its read is on the running loop's
    ring. The pages are dropped from the cache first; the page cache's own
    read ahead (which the try on the loop's thread starts) may still bring
    them back before the read is made, and the read is served there: it is
    then made again. Waits for events (turns of the loop), not time. (On
    a loaded machine the try is preempted long enough for the disk to
    answer about 99 times in 100, measured: hence the many attempts.)"""
    for _ in range(attempts):
        await f.seek(at)
        drop_cache(path, at, size)
        before = ring_reads()
        task = asyncio.ensure_future(f.read(size))
        while ring_reads() == before and not task.done():
            await asyncio.sleep(0)
        if ring_reads() > before:
            return task
        await task
    raise AssertionError(f"no read went on the loop's ring in {attempts} attempts")


def ring_reads():
    """The running loop's count of file reads on its ring (0 off it)."""
    loop = asyncio.get_running_loop()
    ring = getattr(getattr(loop, "_proactor", None), "_ring", None)
    return ring.file_reads if ring is not None else 0


async def random_reads(path, data, tasks=64, per_task=8):
    """``tasks`` tasks each reading ``per_task`` random 4 KiB pieces, each
    through its own unbuffered ``blockio.open`` file, the file's pages
    dropped from the cache first; every piece checked. Returns the counts
    of reads on the loop's ring and through the engine meanwhile."""
    drop_cache(path)
    engine = default_engine()
    before = (ring_reads(), engine._core.reads_started)

    async def reader(seed):
        rnd = random.Random(seed)
        async with blockio.open(path, "rb", buffering=0) as f:
            for _ in range(per_task):
                at = rnd.randrange(SIZE // PIECE) * PIECE
                await f.seek(at)
                got = await f.read(PIECE)
                assert got == data[at:at + PIECE], f"wrong bytes at {at}"

    await asyncio.gather(*(reader(i) for i in range(tasks)))
    return ring_reads() - before[0], engine._core.reads_started - before[1]


def random_reads_that_missed(new_loop, path, data, attempts=100, **kw):
    """``random_reads`` on a new ``new_loop``, made again until a read went
    on the loop's ring or through the engine: a read of a page dropped from
    the cache may still be served on the calling thread, since its try there
    (``preadv2(RWF_NOWAIT)``) starts the page's read from the disk, which
    the disk can answer before the try looks at the page; in a run where
    every read is served so, the counts prove nothing."""
    for _ in range(attempts):
        counts = run_on(new_loop, random_reads(path, data, **kw))
        if sum(counts):
            return counts
    raise AssertionError(f"every read was served on the calling thread in {attempts} runs")


def test_uncached_reads_go_on_the_loops_ring_and_never_through_the_engine(data_path):
    path, data = data_path
    on_ring, through_engine = random_reads_that_missed(UringEventLoop, path, data)
    assert on_ring >= 1, "no read went on the loop's ring"
    assert through_engine == 0, f"{through_engine} reads went through the engine"


@pytest.mark.parametrize("new_loop", [EpollEventLoop, asyncio.new_event_loop, uvloop.new_event_loop],
                         ids=["blockio-epoll", "asyncio", "uvloop"])
def test_uncached_reads_go_through_the_engine_on_other_loops(data_path, new_loop):
    path, data = data_path
    on_ring, through_engine = random_reads_that_missed(new_loop, path, data, tasks=8, per_task=4)
    assert on_ring == 0
    assert through_engine >= 1, "the engine counted no read: the count would prove nothing on the ring"


def test_engine_aread_goes_on_the_loops_ring(data_path):
    path, data = data_path

    async def main():
        engine = blockio.Engine()
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                drop_cache(path)
                before = (ring_reads(), engine._core.reads_started)
                got = await asyncio.gather(*(engine.aread(fd, offset=at, length=PIECE)
                                             for at in range(0, SIZE, SIZE // 16)))
                # (at the end: a short read, and past it nothing)
                tail = await engine.aread(fd, offset=SIZE - 100, length=PIECE)
                past = await engine.aread(fd, offset=SIZE + PIECE, length=PIECE)
                counts = (ring_reads() - before[0], engine._core.reads_started - before[1])
            finally:
                os.close(fd)
        finally:
            engine.close()
        return got, tail, past, counts

    # (made again until a read missed the cache: see random_reads_that_missed)
    for _ in range(100):
        got, tail, past, (on_ring, through_engine) = run_on(UringEventLoop, main())
        assert got == [data[at:at + PIECE] for at in range(0, SIZE, SIZE // 16)]
        assert tail == data[-100:]
        assert past == b""
        assert through_engine == 0
        if on_ring:
            break
    assert on_ring >= 1, "every read was served on the calling thread in 100 runs"


def test_a_cancelled_read_on_the_ring_moves_nothing(data_path):
    path, data = data_path

    async def main():
        async with blockio.open(path, "rb") as f:
            task = await read_on_ring(f, path, PIECE, PIECE)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            told = await f.tell()
            after = await f.read(PIECE)
        return told, after

    told, after = run_on(UringEventLoop, main())
    assert told == PIECE
    assert after == data[PIECE:2 * PIECE]


def test_a_cancelled_read_lets_the_file_close_and_the_number_be_reused(data_path, tmp_path):
    """The cancelled read's file is closed while the read may still be in
    the kernel; a file opened next under the same number, its pages not
    in the cache either, reads its own bytes on the ring, and the read's
    completion reaches nothing."""
    path, data = data_path
    other = tmp_path / "other.bin"
    theirs = random.Random(64).randbytes(PIECE)
    other.write_bytes(theirs)

    async def main():
        f = await blockio.open(path, "rb", buffering=0)
        number = f.fileno()
        task = await read_on_ring(f, path, 0, PIECE)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        inode = os.stat(path).st_ino
        await f.close()
        assert not names(number, inode), "the close left the number on the file"
        move_to(os.open(other, os.O_RDONLY), number)  # `other` on the number just freed
        async with blockio.open(number, "rb", buffering=0) as g:
            got = await (await read_on_ring(g, other, 0, PIECE))
            got += await g.read()  # (after the cancelled read's completion, if it came)
        return got

    assert run_on(UringEventLoop, main()) == theirs


def test_a_read_on_the_ring_reads_its_file_though_the_number_is_closed_and_reused(data_path, tmp_path):
    """``Engine.aread`` of a descriptor whose number is closed, and taken
    by another file, while the read is on the ring: the read's bytes are
    its own file's, never the other's."""
    path, data = data_path
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * PIECE)

    async def main():
        engine = default_engine()
        fd = os.open(path, os.O_RDONLY)
        drop_cache(path)
        before = ring_reads()
        task = asyncio.ensure_future(engine.aread(fd, offset=PIECE, length=PIECE))
        while ring_reads() == before and not task.done():
            await asyncio.sleep(0)
        # The number is closed and taken by the other file at once (no
        # other thread's close can hand out a lower number meanwhile).
        fd2 = os.open(other, os.O_RDONLY)
        os.dup2(fd2, fd)
        os.close(fd2)
        fd2 = fd
        try:
            return await task, ring_reads() - before
        finally:
            os.close(fd2)

    # (made again until the read missed the cache: see random_reads_that_missed)
    for _ in range(100):
        got, on_ring = run_on(UringEventLoop, main())
        assert got == data[PIECE:2 * PIECE]
        if on_ring:
            break
    else:
        raise AssertionError("the read was served on the calling thread in 100 runs")
    assert on_ring == 1


def test_large_reads_on_the_ring_read_their_file_though_the_number_is_reused_at_once(data_path, tmp_path):
    """Reads of 1 MiB go to the kernel's worker threads, which look a
    descriptor up only when they start a read: 32 of them handed to the
    ring at once, then the number taken by another file before the loop
    runs again, every read still returns its own file's bytes (each holds
    a duplicate of the descriptor from its submission)."""
    path, data = data_path
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * SIZE)

    async def main():
        loop = asyncio.get_running_loop()
        fd = os.open(path, os.O_RDONLY)
        try:
            futs = [loop._ring_pread(fd, 0, SIZE) for _ in range(32)]
            fd2 = os.open(other, os.O_RDONLY)
            os.dup2(fd2, fd)
            os.close(fd2)
            return await asyncio.gather(*futs, return_exceptions=True)
        finally:
            os.close(fd)

    got = run_on(UringEventLoop, main())
    assert [g == data for g in got] == [True] * 32, [type(g) for g in got]


def test_loop_close_with_a_file_read_in_flight(data_path):
    """The loop is closed while a file's read is on its ring, its task
    waiting: the loop is stopped in the turn that submits the read (its
    ring's read wrapped to stop it), so no wait for completions comes
    between the submission and the close (a read the page cache served
    ends its turn too, and is made again). The close leaves the task
    pending (the ring frees the read's memory once the kernel has
    answered), and the file, which outlives the loop, is closed on
    another, its close saying that its read was cut short, as on every
    loop."""
    path, data = data_path
    loop = UringEventLoop()
    submit = loop._ring_pread

    def submit_and_stop(*args):
        fut = submit(*args)
        loop.stop()
        return fut

    try:
        f = loop.run_until_complete(blockio.open(path, "rb", buffering=0))
        loop._ring_pread = submit_and_stop
        for _ in range(1000):
            drop_cache(path)
            task = loop.create_task(f.read(PIECE))
            task.add_done_callback(lambda _: loop.stop())
            loop.run_forever()
            if not task.done():
                break
            assert task.result() == data[:PIECE]
            loop.run_until_complete(f.seek(0))
    finally:
        loop.close()
    assert not task.done(), "each of 1000 reads was served by the page cache, or the close completed one"
    assert loop._proactor is None
    with pytest.raises(RuntimeError, match="its event loop was closed while it was in progress"):
        run_on(UringEventLoop, f.close())
    assert f.closed
    del task


@pytest.mark.parametrize("flags", [os.O_WRONLY, os.O_RDONLY | os.O_DIRECT, os.O_RDONLY | os.O_NONBLOCK],
                         ids=["write-only", "O_DIRECT", "non-blocking"])
def test_a_read_the_ring_cannot_serve_goes_through_the_engine_before_any_wait(data_path, tmp_path, flags):
    """A descriptor the ring does not serve is sent to the engine when the
    call is made, which holds its own duplicate: the number closed (and
    taken by another file) while the read waits changes nothing. A
    write-only descriptor's ``EBADF`` names the file, offset and length."""
    path, data = data_path
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * SIZE)

    async def main():
        engine = default_engine()
        fd = os.open(path, flags)
        drop_cache(path)
        before = (ring_reads(), engine._core.reads_started)
        task = asyncio.ensure_future(engine.aread(fd, offset=0, length=PIECE))
        await asyncio.sleep(0)
        # The number is closed and taken by the other file at once (no
        # other thread's close can hand out a lower number meanwhile).
        fd2 = os.open(other, os.O_RDONLY)
        os.dup2(fd2, fd)
        os.close(fd2)
        fd2 = fd
        try:
            try:
                got = await task
            except OSError as e:
                got = e
        finally:
            os.close(fd2)
        return fd, got, ring_reads() - before[0], engine._core.reads_started - before[1]

    fd, got, on_ring, through_engine = run_on(UringEventLoop, main())
    assert on_ring == 0
    if flags == os.O_WRONLY:
        assert isinstance(got, OSError) and got.errno == errno.EBADF
        assert str(got) == f"[Errno 9] read of {PIECE} bytes at offset 0 on fd {fd} failed: Bad file descriptor"
    else:
        assert got == data[:PIECE]
        assert through_engine == 1


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
def test_a_fifo_or_device_opened_by_path_is_never_read_on_the_ring(tmp_path, kind):
    """A FIFO or character device opened with ``os.open`` (whose flags
    look like a regular file's) is told apart by ``fstat`` and read as on
    every loop, never by the ring's ``pread``."""

    async def main():
        engine = default_engine()
        if kind == "fifo":
            path = tmp_path / "fifo"
            os.mkfifo(path)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            wfd = os.open(path, os.O_WRONLY)
            os.write(wfd, b"m" * 100)
        else:
            fd, wfd = os.open("/dev/zero", os.O_RDONLY), None
        try:
            before = (ring_reads(), engine._core.reads_started)
            got = await engine.aread(fd, offset=0, length=PIECE)
            return got, ring_reads() - before[0], engine._core.reads_started - before[1]
        finally:
            os.close(fd)
            if wfd is not None:
                os.close(wfd)

    got, on_ring, through_engine = run_on(UringEventLoop, main())
    assert got == (b"m" * 100 if kind == "fifo" else bytes(PIECE))
    assert on_ring == 0
    if kind == "fifo":  # (/dev/zero's read is served on the loop's thread, where the page cache's are)
        assert through_engine == 1


@pytest.mark.parametrize("into", [False, True], ids=["aread", "areadinto"])
def test_a_read_the_ring_fails_raises_its_error_naming_the_file(data_path, into):
    """A read the kernel fails on the ring raises that error, worded as
    the engine's (the file, offset and length), and is not made again
    through the engine by the number, which may name another file by
    then. The failure is the loop's: its ring's read is replaced by one
    whose future fails with ``EIO``."""
    path, data = data_path

    def failing(*args):
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(OSError(errno.EIO, os.strerror(errno.EIO)))
        return fut

    async def main():
        loop = asyncio.get_running_loop()
        loop._ring_pread = loop._ring_pread_into = failing
        engine = default_engine()
        before = engine._core.reads_started
        async with blockio.open(path, "rb", buffering=0) as f:
            drop_cache(path)
            with pytest.raises(OSError) as e:
                if into:
                    await engine.areadinto(f, bytearray(PIECE), PIECE)
                else:
                    await engine.aread(f, offset=PIECE, length=PIECE)
            return f.fileno(), e.value, engine._core.reads_started - before

    fd, e, through_engine = run_on(UringEventLoop, main())
    assert e.errno == errno.EIO
    assert e.filename == str(path)
    assert e.strerror == f"read of {PIECE} bytes at offset {PIECE} on fd {fd} failed: {os.strerror(errno.EIO)}"
    assert through_engine == 0


def test_a_large_read_on_the_ring_holds_its_length_once(tmp_path):
    """The kernel reads into the ``bytes`` object the read returns: a read
    of 64 MiB on the ring raises the process's peak memory (its
    ``VmHWM``, in a fresh interpreter) by about 64 MiB, not the 128
    MiB of a buffer of the ring's and then a copy of it (the peak reset
    first through ``/proc/self/clear_refs``)."""
    size = 64 << 20
    p = tmp_path / "big.bin"
    with open(p, "wb") as f:
        f.write(b"\x5a" * size)
        f.flush()
        os.fsync(f.fileno())
    drop_cache(p)
    program = textwrap.dedent(f"""
        import asyncio, os
        from blockio._engine import default_engine
        from blockio._loop import UringEventLoop

        def peak(reset=False):
            # The peak of the process's resident memory in KiB (VmHWM),
            # reset to what it holds now first if `reset`.
            if reset:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))

        async def main():
            engine = default_engine()
            fd = os.open({str(p)!r}, os.O_RDONLY)
            ring = asyncio.get_running_loop()._proactor._ring
            await engine.aread(fd, offset=0, length=4096)  # (the engine's own set-up, before the count)
            before = (peak(reset=True), ring.file_reads)
            got = await engine.aread(fd, offset=4096, length={size} - 4096)
            after = (peak(), ring.file_reads)
            assert got == b"\\x5a" * ({size} - 4096)
            print(after[0] - before[0], after[1] - before[1])

        loop = UringEventLoop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    """)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    grown_kib, on_ring = map(int, out.stdout.split())
    assert on_ring == 1
    assert grown_kib < (size * 3 // 2) >> 10, f"the read raised the peak by {grown_kib} KiB for {size >> 10} KiB"


def thread_faults():
    """The calling thread's minor page faults so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


async def large_read(path, how, size):
    """A read of the ``size`` bytes of ``path`` on the running loop's ring,
    made ``how``: ``Engine.aread``, ``Engine.areadinto`` into a fresh
    anonymous mapping (kept from huge pages: one fault per 4 KiB page),
    or a ``blockio.open`` file's ``read()``. Returns the bytes read, the
    page faults the loop's thread took while the read was awaited and the
    count of reads on the ring meanwhile."""
    engine = default_engine()
    on_ring = ring_reads()
    if how == "read":
        async with blockio.open(path, "rb") as f:
            faults = thread_faults()
            got = await f.read()
            faults = thread_faults() - faults
        return got, faults, ring_reads() - on_ring
    fd = os.open(path, os.O_RDONLY)
    try:
        if how == "aread":
            faults = thread_faults()
            got = await engine.aread(fd, offset=0, length=size)
            faults = thread_faults() - faults
            return got, faults, ring_reads() - on_ring
        buf = mmap.mmap(-1, size)
        buf.madvise(mmap.MADV_NOHUGEPAGE)
        faults = thread_faults()
        n = await engine.areadinto(fd, buf, 0)
        faults = thread_faults() - faults
        return buf[:n], faults, ring_reads() - on_ring
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["aread", "areadinto", "read"])
def test_a_large_read_on_the_ring_is_copied_off_the_loops_thread(tmp_path, how):
    """A read of 64 MiB of cached bytes on the loop's ring lands in memory
    nothing has touched yet, so the thread that copies it takes a page
    fault per page (16,384). The loop's thread takes almost none of them:
    a read this large goes to the kernel's worker threads
    (``IOSQE_ASYNC``), and the loop runs its other tasks while they copy.
    Tried at its submission, as a small read is, the whole read would be
    copied on the loop's thread, which would take every one of those
    faults (and run nothing else meanwhile)."""
    size = 64 << 20
    data = bytes(range(256)) * (size >> 8)
    p = tmp_path / "big.bin"
    p.write_bytes(data)  # (its pages are in the cache: just written)
    got, faults, on_ring = run_on(UringEventLoop, large_read(p, how, size))
    assert got == data
    assert on_ring >= 1
    pages = size // mmap.PAGESIZE
    assert faults < pages // 4, f"the loop's thread took {faults} page faults reading {pages} pages"


@pytest.mark.parametrize("buffering", [-1, 0])
def test_reading_a_whole_uncached_file_goes_on_the_loops_ring(data_path, buffering):
    path, data = data_path

    async def main():
        engine = default_engine()
        drop_cache(path)
        before = (ring_reads(), engine._core.reads_started)
        async with blockio.open(path, "rb", buffering=buffering) as f:
            got = await f.read()
        return got, ring_reads() - before[0], engine._core.reads_started - before[1]

    # (a run whose every read the try on the loop's thread served, the
    # disk answering within it, proves nothing: see random_reads_that_missed)
    for _ in range(100):
        got, on_ring, through_engine = run_on(UringEventLoop, main())
        assert got == data
        assert through_engine == 0
        if on_ring:
            break
    assert on_ring >= 1, "every read was served on the calling thread in 100 runs"


def test_a_forked_child_reads_on_its_own_loops_ring(data_path):
    """After ``fork()`` the child's new loop has a ring of its own, and the
    child's reads go there (the default engine is the child's own too)."""
    path, data = data_path

    async def child_main():
        drop_cache(path)
        before = (ring_reads(), default_engine()._core.reads_started)
        async with blockio.open(path, "rb") as f:
            got = await f.read()
        return got == data, ring_reads() - before[0], default_engine()._core.reads_started - before[1]

    run_on(UringEventLoop, random_reads(path, data, tasks=2, per_task=2))  # (the parent's engine and a ring used)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            # (made again until the read missed the cache: see
            # random_reads_that_missed)
            for _ in range(100):
                same, on_ring, through_engine = run_on(UringEventLoop, child_main())
                if not same or through_engine != 0 or on_ring >= 1:
                    break
            code = 0 if same and on_ring >= 1 and through_engine == 0 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("buffering", [-1, 0])
def test_readinto_goes_on_the_loops_ring(data_path, buffering):
    path, data = data_path

    async def main():
        engine = default_engine()
        buf = bytearray(3 * PIECE)
        async with blockio.open(path, "rb", buffering=buffering) as f:
            await f.seek(5)
            drop_cache(path)
            before = (ring_reads(), engine._core.reads_started)
            n = await f.readinto(buf)
            told = await f.tell()
            # (past the end: a short read, then nothing)
            await f.seek(SIZE - 10)
            tail = bytearray(PIECE)
            m = await f.readinto(tail)
            o = await f.readinto(tail)
        return n, bytes(buf), told, m, bytes(tail[:m]), o, ring_reads() - before[0], \
            engine._core.reads_started - before[1]

    # (made again until a read missed the cache: see random_reads_that_missed)
    for _ in range(100):
        n, got, told, m, tail, o, on_ring, through_engine = run_on(UringEventLoop, main())
        assert (n, told) == (3 * PIECE, 5 + 3 * PIECE)
        assert got == data[5:5 + 3 * PIECE]
        assert (m, tail, o) == (10, data[-10:], 0)
        assert through_engine == 0
        if on_ring:
            break
    else:
        raise AssertionError("every read was served on the calling thread in 100 runs")


def test_readinto_a_buffer_the_ring_refuses_is_refused_as_before(data_path):
    path, _data = data_path

    async def main():
        async with blockio.open(path, "rb", buffering=0) as f:
            with pytest.raises(TypeError):
                await f.readinto(b"read-only")
            return await f.tell()

    assert run_on(UringEventLoop, main()) == 0


def ring_writes():
    """The running loop's count of file writes on its ring (0 off it)."""
    loop = asyncio.get_running_loop()
    ring = getattr(getattr(loop, "_proactor", None), "_ring", None)
    return ring.file_writes if ring is not None else 0


@pytest.mark.parametrize("new_loop", [UringEventLoop, EpollEventLoop, asyncio.new_event_loop],
                         ids=["blockio-uring", "blockio-epoll", "asyncio"])
def test_engine_awrite_goes_on_the_loops_ring(tmp_path, new_loop):
    """``Engine.awrite`` of a regular file: on blockio's loop on io_uring
    each write is a ``pwrite`` on the loop's ring (its ``file_writes``
    counts them), elsewhere none is; every byte lands where it was
    written, and the counts returned are the lengths."""
    path = tmp_path / "out.bin"
    data = random.Random(64).randbytes(SIZE)

    async def main():
        engine = blockio.Engine()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            before = ring_writes()
            counts = await asyncio.gather(*(engine.awrite(fd, data[at:at + SIZE // 16], at)
                                            for at in range(0, SIZE, SIZE // 16)))
            return counts, ring_writes() - before
        finally:
            os.close(fd)
            engine.close()

    counts, on_ring = run_on(new_loop, main())
    assert counts == [SIZE // 16] * 16
    assert on_ring == (16 if new_loop is UringEventLoop else 0)
    assert path.read_bytes() == data


def test_a_cancelled_write_on_the_ring_lands_before_the_loop_closes(tmp_path):
    """An ``Engine.awrite`` on the loop's ring whose task is cancelled once
    the write is submitted: the task ends cancelled at once, the loop is
    closed right after, and the write's bytes are in the file (the ring
    never cancels a file write; its close waits for it)."""
    path = tmp_path / "out.bin"
    data = random.Random(65).randbytes(SIZE)
    loop = UringEventLoop()
    engine = blockio.Engine()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

    async def main():
        before = ring_writes()
        task = asyncio.ensure_future(engine.awrite(fd, data, 0))
        while ring_writes() == before and not task.done():
            await asyncio.sleep(0)
        assert ring_writes() == before + 1
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "done"

    try:
        outcome = loop.run_until_complete(main())
    finally:
        loop.close()
        os.close(fd)
        engine.close()
    assert outcome in ("cancelled", "done")
    assert path.read_bytes() == data


def test_an_engine_write_the_ring_fails_raises_its_error_naming_the_descriptor(tmp_path):
    """A write the kernel refuses on the loop's ring (``EFBIG``: an offset
    past the largest a file may have) raises ``OSError`` with the kernel's
    errno and a message naming the write, its offset and the descriptor,
    as the engine's."""
    path = tmp_path / "out.bin"

    async def main():
        engine = blockio.Engine()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        try:
            before = ring_writes()
            with pytest.raises(OSError) as info:
                await engine.awrite(fd, b"x" * 10, (1 << 63) - 5)
            return info.value, ring_writes() - before, fd
        finally:
            os.close(fd)
            engine.close()

    err, on_ring, fd = run_on(UringEventLoop, main())
    assert on_ring == 1
    assert err.errno in (errno.EFBIG, errno.EINVAL)
    assert f"write of 10 bytes at offset {(1 << 63) - 5} on fd {fd} failed" in str(err)


def counting_engine_jobs(engine, name):
    """Counts the jobs ``engine`` starts on its own threads through its
    core's ``name`` (``submit_open``, ``submit_close``) from now on: a list
    whose length is that count."""
    jobs = []
    run = engine._run
    start_of = getattr(engine._core, name)

    async def counted(keep, start, *args):
        if start == start_of:
            jobs.append(args[0])
        return await run(keep, start, *args)

    engine._run = counted
    return jobs


def counting_engine_opens(engine):
    """Counts the opens ``engine`` starts on its own threads (its
    ``submit_open`` batches) from now on: a list whose length is that count."""
    return counting_engine_jobs(engine, "submit_open")


def ring_opens():
    """The running loop's count of opens on its ring (0 off it)."""
    loop = asyncio.get_running_loop()
    ring = getattr(getattr(loop, "_proactor", None), "_ring", None)
    return ring.file_opens if ring is not None else 0


async def open_read_write(tmp_path, engine, n=20):
    """``n`` files written through ``blockio.open`` (``"wb"``) and read back
    (``"rb"``), each checked; the counts of opens on the loop's ring and
    through the engine meanwhile."""
    opens = counting_engine_opens(engine)
    before = ring_opens()
    for i in range(n):
        path = tmp_path / f"f{i}"
        async with blockio.open(path, "wb", engine=engine) as f:
            await f.write(b"%d" % i * 100)
        async with blockio.open(path, "rb", engine=engine) as f:
            assert await f.read() == b"%d" % i * 100
    return ring_opens() - before, len(opens)


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_opens_go_on_the_loops_ring_and_never_through_the_engine(tmp_path, backend):
    engine = blockio.Engine(backend=backend)
    try:
        on_ring, through_engine = run_on(UringEventLoop, open_read_write(tmp_path, engine))
    finally:
        engine.close()
    assert (on_ring, through_engine) == (40, 0)


@pytest.mark.parametrize("new_loop", [EpollEventLoop, asyncio.new_event_loop, uvloop.new_event_loop],
                         ids=["blockio-epoll", "asyncio", "uvloop"])
def test_opens_go_through_the_engine_on_other_loops(tmp_path, new_loop):
    engine = blockio.Engine()
    try:
        on_ring, through_engine = run_on(new_loop, open_read_write(tmp_path, engine, n=5))
    finally:
        engine.close()
    assert (on_ring, through_engine) == (0, 10)


@pytest.mark.parametrize("mode, make", [("rb", False), ("xb", True), ("wb", "dir")],
                         ids=["missing", "exists", "directory"])
def test_an_open_the_ring_fails_raises_the_builtin_opens_error(tmp_path, mode, make):
    path = tmp_path / "p"
    if make == "dir":
        path.mkdir()
    elif make:
        path.write_bytes(b"")
    with pytest.raises(OSError) as builtin:
        open(path, mode)

    async def main():
        before = ring_opens()
        with pytest.raises(OSError) as ours:
            await blockio.open(path, mode)
        return ours.value, ring_opens() - before

    err, on_ring = run_on(UringEventLoop, main())
    assert on_ring == 1
    assert (type(err), err.errno, str(err)) == (type(builtin.value), builtin.value.errno, str(builtin.value))


def descriptors_of(path):
    """How many of this process's descriptors name ``path``: counting
    only those keeps descriptors that other objects close meanwhile
    (collected loops, engines) out of the count."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass  # (closed since the listing)
    return n


def test_a_cancelled_open_on_the_ring_leaks_no_descriptor(tmp_path):
    path = tmp_path / "c"
    path.write_bytes(b"x")

    async def main():
        loop = asyncio.get_running_loop()
        ring = loop._proactor._ring
        idle = ring.in_flight()  # (the wake-up receive is always in flight)
        # Cancelled before the loop reaps the open's completion: the kernel
        # opened the file (a local open is done at its submission) and the
        # descriptor is closed when the completion comes.
        futs = [loop._proactor.openat(os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC, 0) for _ in range(10)]
        for fut in futs:
            fut.cancel()
        while ring.in_flight() > idle:  # (until the kernel has answered them)
            await asyncio.sleep(0)
        after_cancels = descriptors_of(path)
        # A task cancelled while its blockio.open waits on the ring.
        tasks = [asyncio.ensure_future(blockio.open(path, "rb")) for _ in range(10)]
        await asyncio.sleep(0)
        for t in tasks:
            t.cancel()
        got = await asyncio.gather(*tasks, return_exceptions=True)
        for f in got:
            if not isinstance(f, BaseException):
                await f.close()
        while ring.in_flight() > idle:  # (until the kernel has answered them)
            await asyncio.sleep(0)
        return after_cancels, descriptors_of(path)

    assert run_on(UringEventLoop, main()) == (0, 0)


def test_loop_close_with_opens_in_flight_leaks_no_descriptor(tmp_path):
    path = tmp_path / "c"
    path.write_bytes(b"x")
    loop = UringEventLoop()
    # Submitted, and the loop closed before it ever waited: no completion
    # was reaped, so the ring's close gets the descriptors and closes them.
    futs = [loop._proactor.openat(os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC, 0) for _ in range(10)]
    # (the kernel opens them at the submission, or on its workers soon after)
    wait_until(lambda: descriptors_of(path) == 10, "the 10 opens done by the kernel")
    loop.close()
    assert not any(f.done() and not f.cancelled() for f in futs)
    assert descriptors_of(path) == 0


def _opens_answered_but_untaken(loop, path, n, engine_used=True):
    """Begins ``n`` opens of ``path`` on ``loop``'s ring, waits until the
    kernel opened them all and the loop's wait, alone, reaped them (each
    future holds its descriptor; the tasks, scheduled, have not run):
    their tasks. ``engine_used``: a file is closed through the engine on
    the loop first (else the engine never meets the loop)."""
    ring = loop._proactor._ring

    async def warm():
        if engine_used:
            # (the engine's wake-up stays in flight beside the loop's own)
            await (await blockio.open(path, "rb")).close()
        else:
            await asyncio.sleep(0)  # (the loop's own wake-up in flight)

    loop.run_until_complete(warm())
    idle = ring.in_flight()
    tasks = []

    async def begin():
        tasks.extend(asyncio.ensure_future(blockio.open(path, "rb")) for _ in range(n))
        await asyncio.sleep(0)  # (each task runs to its openat on the ring)
        loop.stop()  # (before the loop's next wait reaps any of them)

    loop.create_task(begin())
    loop.run_forever()
    assert ring.in_flight() == idle + n
    wait_until(lambda: descriptors_of(path) == n, f"the kernel opened all {n}")
    wait_until(lambda: loop._proactor.select(0) == () and ring.in_flight() == idle, f"the {n} opens reaped")
    assert not any(t.done() for t in tasks)
    return tasks


@pytest.mark.parametrize("end", ["loop closed", "tasks cancelled"])
def test_opens_the_ring_answered_but_no_task_took_leak_no_descriptor(tmp_path, end):
    # 200 opens on the loop's ring, answered by the kernel and reaped by
    # the loop's wait (each future holds its descriptor), then the loop
    # closed before any of the tasks resumes, or each task cancelled
    # there: every descriptor is closed, none handed to a task.
    path = tmp_path / "c"
    path.write_bytes(b"x")
    loop = UringEventLoop()
    tasks = []
    try:
        tasks += _opens_answered_but_untaken(loop, path, 200)
        if end == "tasks cancelled":
            for t in tasks:
                t.cancel()
            outcomes = loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
            assert descriptors_of(path) == 0
    finally:
        loop.close()
        abandon(loop, tasks)  # (the opens' tasks, never resumed)
    assert descriptors_of(path) == 0


def test_opens_the_ring_answered_on_a_loop_dropped_unclosed_leak_no_descriptor(tmp_path):
    # 200 opens on the loop's ring, answered and reaped but not taken (as
    # above), then the loop dropped without being closed: its tasks are
    # collected pending, each coroutine closed where it waited for its
    # open (GeneratorExit there): every descriptor is closed all the same.
    path = tmp_path / "d"
    path.write_bytes(b"x")

    def drop():
        loop = UringEventLoop()
        # (the engine keeps each loop it served until the loop is closed:
        # this one, never closed, must not meet it to be collected)
        abandon(loop, _opens_answered_but_untaken(loop, path, 200, engine_used=False))  # (collected pending, on purpose)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (the unclosed loop, collected)
        drop()
        # (a collection may find only part of the cycles: collect until none is left open)
        wait_until(lambda: gc.collect() >= 0 and descriptors_of(path) == 0, "every descriptor closed")


@pytest.mark.parametrize("mode", ["rb", "r+b", "ab", "wb"])
def test_an_open_cancelled_at_any_step_leaks_no_descriptor(tmp_path, mode):
    # Cancelled k loop steps after it began: before the openat is reaped,
    # after the loop has reaped it but before the task resumes (the
    # descriptor is in the future then), or after the open returned.
    path = tmp_path / "k"
    path.write_bytes(b"x")

    async def main():
        ring = asyncio.get_running_loop()._proactor._ring
        # One open and close first, after which the engine's wake-up (the
        # close's) stays in flight beside the loop's own.
        await (await blockio.open(path, mode)).close()
        idle = ring.in_flight()
        outcomes = set()
        for k in range(6):
            for _ in range(20):
                task = asyncio.ensure_future(blockio.open(path, mode))
                for _ in range(k):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    f = await task
                except asyncio.CancelledError:
                    outcomes.add((k, "cancelled"))
                else:
                    outcomes.add((k, "opened"))
                    await f.close()
        while ring.in_flight() > idle:  # (until the kernel has answered them)
            await asyncio.sleep(0)
        # An open cancelled while its file looked up its size ("ab": the
        # position at the end) closes its descriptor once that lookup, on
        # the engine's threads, is done: waited for, not raced.
        await await_until(lambda: descriptors_of(path) == 0, "every cancelled open's descriptor closed")
        return outcomes, descriptors_of(path)

    outcomes, left = run_on(UringEventLoop, main())
    assert (0, "cancelled") in outcomes
    assert left == 0


def test_a_fifo_opened_for_reading_on_the_ring_waits_for_a_writer_as_the_builtin(tmp_path):
    # The kernel's inline openat is non-blocking: with no writer there yet,
    # the open returned at once and the read got b''.
    path = tmp_path / "fifo"
    os.mkfifo(path)

    def writer():  # (its open blocks until a reader's is made)
        try:
            with open(path, "wb") as w:
                w.write(b"hello")
        except BrokenPipeError:
            pass  # (the reader gone: the assertion tells)

    engine = blockio.Engine()

    async def read():
        async with blockio.open(path, "rb", engine=engine) as f:
            return await f.read()

    async def main():
        engine_opens = counting_engine_opens(engine)
        task = asyncio.ensure_future(read())
        # The writer starts once our open waits (on the engine's threads),
        # or once ours is done without one.
        while not task.done() and not engine_opens:
            await asyncio.sleep(0)
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            return await task
        finally:
            if thread.is_alive():
                # (ours ended before the writer came: an open for reading
                # and writing never waits, and lets the writer's end)
                os.close(os.open(path, os.O_RDWR))
            await asyncio.get_running_loop().run_in_executor(None, thread.join)

    try:
        assert run_on(UringEventLoop, main()) == b"hello"
    finally:
        engine.close()


def counting_engine_closes(engine):
    """Counts the closes ``engine`` makes on its own threads (its
    ``submit_close`` jobs) from now on: a list whose length is that count."""
    return counting_engine_jobs(engine, "submit_close")


def is_open(fd):
    try:
        os.fstat(fd)
    except OSError as e:
        assert e.errno == errno.EBADF
        return False
    return True


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("new_loop", [UringEventLoop, EpollEventLoop, asyncio.new_event_loop],
                         ids=["blockio-uring", "blockio-epoll", "asyncio"])
def test_a_read_only_files_close_is_made_on_blockios_loops_thread(tmp_path, backend, new_loop):
    # On blockio's loop on io_uring a file that only reads is closed on the
    # loop's thread, none through the engine; a file open for writing is
    # closed through the engine, its writes landed first; on other loops
    # every close goes through the engine.
    engine = blockio.Engine(backend=backend)
    path = tmp_path / "f"

    async def main():
        closes = counting_engine_closes(engine)
        async with blockio.open(path, "wb", engine=engine) as f:
            await f.write(b"written")  # buffered: the close writes it
        assert path.read_bytes() == b"written"
        async with blockio.open(path, "r+b", engine=engine) as f:
            await f.write(b"W")
        after_writers = len(closes)
        async with blockio.open(path, "rb", engine=engine) as f:
            fd = f.fileno()
            assert await f.read() == b"Written"
        assert not is_open(fd)
        return after_writers, len(closes)

    try:
        on_uring = new_loop is UringEventLoop
        assert run_on(new_loop, main()) == (2, 2 if on_uring else 3)
        assert path.read_bytes() == b"Written"
    finally:
        engine.close()


def test_a_read_only_files_failed_close_on_the_loops_thread_is_reported_once(tmp_path):
    # The close's error is the file's close's (as through the engine); the
    # number is not closed again by a second close, when another file has
    # taken it.
    path = tmp_path / "f"
    path.write_bytes(b"abc")

    async def main():
        closes = counting_engine_closes(default_engine())
        f = await blockio.open(path, "rb")
        fd = f.fileno()
        os.close(fd)  # behind the file's back
        with pytest.raises(OSError) as e:
            await f.close()
        assert e.value.errno == errno.EBADF
        assert f.closed
        move_to(os.open(path, os.O_RDONLY), fd)  # (another file takes the number)
        try:
            await f.close()
            assert is_open(fd)
        finally:
            os.close(fd)
        return closes

    assert run_on(UringEventLoop, main()) == []


def test_a_read_only_files_close_leaves_a_shared_offset_where_it_is(tmp_path):
    # Its last call left the descriptor's offset at its position: the
    # close, with nothing to write, moves it no more (as the built-in
    # reader's close), here after another holder of the open file moved it.
    path = tmp_path / "f"
    path.write_bytes(bytes(range(100)))

    async def main():
        f = await blockio.open(path, "rb")
        dup = os.dup(f.fileno())  # (shares the offset)
        try:
            assert await f.read(3) == bytes(range(3))
            assert os.lseek(dup, 0, os.SEEK_CUR) == 3
            os.lseek(dup, 7, os.SEEK_SET)
            await f.close()
            return os.lseek(dup, 0, os.SEEK_CUR)
        finally:
            os.close(dup)

    assert run_on(UringEventLoop, main()) == 7


@pytest.mark.parametrize("mode", ["rb", "r", "wb", "ab", "r+b"])
def test_a_file_opened_by_path_on_the_ring_starts_where_the_builtins_does(tmp_path, mode):
    # The open's own fstat gives the position (0, the end in append mode)
    # and the write buffer's size (FileIO's preferred I/O size) with no
    # lseek or fstat of the file's own.
    path = tmp_path / "f"

    async def main():
        path.write_bytes(b"0123456789")
        async with blockio.open(path, mode) as f:
            at = await f.tell()
            rest = await f.read() if "r" in mode and "+" not in mode else None
            size = f._wbufsize if "b" in mode else None
        return at, rest, size

    at, rest, size = run_on(UringEventLoop, main())
    path.write_bytes(b"0123456789")
    with open(path, mode) as builtin:
        want_at = builtin.tell()
        want_rest = builtin.read() if "r" in mode and "+" not in mode else None
        want_size = builtin.raw._blksize if "b" in mode else None
    assert (at, rest, size) == (want_at, want_rest, want_size)


def counting_engine_sizes(engine):
    """Counts the size look-ups ``engine`` makes on its own threads (its
    ``submit_size`` jobs) from now on: a list whose length is that count."""
    sizes = []
    run = engine._run

    async def counted(keep, start, *args):
        if start == engine._core.submit_size:
            sizes.append(args[0])
        return await run(keep, start, *args)

    engine._run = counted
    return sizes


@pytest.mark.parametrize("new_loop", [UringEventLoop, asyncio.new_event_loop], ids=["blockio-uring", "asyncio"])
def test_a_read_only_files_uncached_read_of_the_rest_looks_its_size_up_on_the_loops_thread(data_path, new_loop):
    # read() of the rest of an uncached file, which only reads: the size
    # is an fstat on blockio's loop's thread, none through the engine,
    # and taken at the read (bytes added since the open are read too); on
    # other loops it goes through the engine.
    path, data = data_path
    engine = blockio.Engine()

    async def main():
        sizes = counting_engine_sizes(engine)
        async with blockio.open(path, "rb", engine=engine) as f:
            with open(path, "ab") as more:
                more.write(b"added")
            drop_cache(path)
            got = await f.read()
        return got, len(sizes)

    try:
        got, sizes = run_on(new_loop, main())
    finally:
        engine.close()
    assert got == data + b"added"
    assert sizes == (0 if new_loop is UringEventLoop else 1)
