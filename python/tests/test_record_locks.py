"""POSIX record locks (``fcntl.lockf``) the process holds on a file,
which Linux releases when the process closes any descriptor of the file,
across reads and writes through blockio that make no descriptor of their
own: on blockio's event loop on io_uring (a read of more than 256 KiB on
the loop's ring holds its file in a slot of the ring's registered-file
table, whose emptying closes no descriptor), a ``blockio.open`` file's
calls on any loop (they use the file's own descriptor) and the
synchronous batches. ``Engine``'s asynchronous calls on a caller's
descriptor that go through the engine (on asyncio's loop, uvloop and
trio, and ``aread_batch`` anywhere) work on a duplicate whose close
releases them, on both backends: ``python/README.md`` says so, and the
thread-pool backend's case is asserted here.

The pages of the file are dropped from the cache before it is locked
(dropping them later would open and close a descriptor of the file here),
so that the reads are not served on the calling thread but go to a ring
or the pool. A second process tells whether the lock still holds: it
tries to take it without waiting (``lockf(F_TLOCK)``)."""

import asyncio
import fcntl
import os
import random
import resource
import subprocess
import sys
import textwrap

import pytest

import blockio
from loops import run_on
from test_loop_files import drop_cache

SIZES = [4 << 10, 128 << 10, 1 << 20, 8 << 20]
FILE_SIZE = 16 << 20
LOOPS = ["asyncio", "uvloop", "blockio-uring"]

# Exits 0 when the lock on the file named by argv[1] is someone else's
# (the try to take it fails with EAGAIN or EACCES), 1 when it is free.
CHECK = """
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError as e:
    sys.exit(0 if e.errno in (errno.EAGAIN, errno.EACCES) else 2)
sys.exit(1)
"""


def lock_held_elsewhere(path):
    """Whether another process finds ``path`` locked (by this one)."""
    code = subprocess.run([sys.executable, "-c", CHECK, str(path)], timeout=60).returncode
    assert code in (0, 1), f"the checking process failed ({code})"
    return code == 0


@pytest.fixture
def data_path(tmp_path, monkeypatch):
    """A 16 MiB file of random bytes, out of the page cache, and its bytes;
    ``BLOCKIO_BACKEND`` unset, so that each test's engine is on the backend
    it names."""
    monkeypatch.delenv("BLOCKIO_BACKEND", raising=False)
    data = random.Random(59).randbytes(FILE_SIZE)
    p = tmp_path / "locked.bin"
    p.write_bytes(data)
    drop_cache(p)
    return p, data


def locked(path):
    """A read-write descriptor of ``path`` that holds a lock on all of it."""
    fd = os.open(path, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    assert lock_held_elsewhere(path)
    return fd


async def ring_call(engine, call, fd, size, data):
    """Makes ``call`` of ``size`` bytes on ``fd`` through ``engine`` on
    blockio's loop, and checks what it read or wrote."""
    if call == "aread":
        assert await engine.aread(fd, offset=size, length=size) == data[size:2 * size]
    elif call == "areadinto":
        buf = bytearray(size)
        assert await engine.areadinto(fd, buf, size) == size
        assert buf == data[size:2 * size]
    elif call == "awrite":
        new = bytes(reversed(data[:size]))
        assert await engine.awrite(fd, new, size) == size
        assert os.pread(fd, size, size) == new
    else:
        raise AssertionError(call)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("call", ["aread", "areadinto", "awrite"])
def test_calls_on_blockio_loops_ring_keep_the_callers_locks(data_path, call, size):
    """``Engine`` calls on a caller's descriptor on blockio's loop on
    io_uring go on the loop's ring; a read of more than 256 KiB there
    holds its file in a slot of the ring's file table, not a duplicate."""
    path, data = data_path
    fd = locked(path)
    try:
        with blockio.Engine(backend="uring") as engine:
            run_on("blockio-uring", ring_call(engine, call, fd, size, data))
        assert lock_held_elsewhere(path)
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", SIZES)
def test_a_read_batch_keeps_the_callers_locks(data_path, size):
    """The synchronous batch reads the caller's descriptor itself."""
    path, data = data_path
    fd = locked(path)
    try:
        with blockio.Engine(backend="uring") as engine:
            assert engine.read_batch(fd, offsets=[size], length=size) == [data[size:2 * size]]
        assert lock_held_elsewhere(path)
    finally:
        os.close(fd)


async def file_calls(path, size, data):
    """Locks ``path`` through a ``blockio.open`` file's own descriptor,
    reads and writes ``size`` bytes through the file, and tells whether
    another process still found the lock held (before the file's close,
    which releases it)."""
    async with blockio.open(path, "r+b") as f:
        fcntl.lockf(f.fileno(), fcntl.LOCK_EX)
        assert lock_held_elsewhere(path)
        await f.seek(size)
        assert await f.read(size) == data[size:2 * size]
        await f.seek(0)
        new = bytes(reversed(data[:size]))
        assert await f.write(new) == size
        await f.flush()
        return lock_held_elsewhere(path)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_blockio_open_files_calls_keep_its_locks(data_path, loop_name, size):
    """A file's reads and writes use its own descriptor, on whichever
    backend ``BLOCKIO_BACKEND`` chooses: on asyncio's loop through the
    engine, borrowed with no duplicate (``Owned::hold_for_batch``); on
    blockio's loop on io_uring on the loop's ring, a read of more than
    256 KiB through a slot of the ring's file table."""
    path, data = data_path
    assert run_on(loop_name, file_calls(path, size, data))


@pytest.mark.parametrize("size", [4 << 10, 1 << 20])
def test_the_thread_pool_backend_releases_the_locks_as_documented(data_path, size):
    """The thread-pool backend has no registered-file table: a read of the
    caller's descriptor that goes to the pool works on a duplicate, whose
    close releases the process's locks on the file (``python/README.md``,
    Notes)."""
    path, data = data_path
    fd = locked(path)
    try:
        with blockio.Engine(backend="threads") as engine:
            got = asyncio.run(engine.aread(fd, offset=size, length=size))
            assert got == data[size:2 * size]
        assert not lock_held_elsewhere(path)
    finally:
        os.close(fd)



def on_ring(slots, coro_fn):
    """Runs ``coro_fn(loop, ring)`` on a new blockio loop whose ring has
    ``slots`` registered-file slots; its value."""
    from blockio._blockio import LoopRing
    from blockio._loop import UringEventLoop

    ring = LoopRing(file_slots=slots)
    loop = UringEventLoop(ring)
    try:
        return loop.run_until_complete(coro_fn(loop, ring))
    finally:
        loop.close()


def test_a_read_beyond_the_rings_file_slots_takes_a_duplicate(data_path):
    """A loop ring whose registered-file table is full (one slot here, two
    reads of 1 MiB in flight at once) reads the second read's file through
    a duplicate of its descriptor, as where the kernel refuses the table:
    both read their bytes, and the duplicate's close releases the lock
    (``python/README.md``, Notes)."""
    path, data = data_path
    size = 1 << 20
    fd = locked(path)
    try:
        async def reads(loop, ring):
            first = loop._ring_pread(fd, 0, size)
            assert ring.free_file_slots == 0
            return await asyncio.gather(first, loop._ring_pread(fd, size, size))

        assert on_ring(1, reads) == [data[:size], data[size:2 * size]]
        assert not lock_held_elsewhere(path)
    finally:
        os.close(fd)


@pytest.mark.parametrize("slots", [0, 1])
def test_a_large_read_keeps_the_lock_in_a_slot_and_releases_it_on_a_duplicate(data_path, slots):
    """One read of 1 MiB on a ring with one slot keeps the lock; on a ring
    with none (as where the kernel refuses the table) it takes a
    duplicate, whose close releases it."""
    path, data = data_path
    size = 1 << 20
    fd = locked(path)
    try:
        async def read(loop, ring):
            return await loop._ring_pread(fd, size, size)

        assert on_ring(slots, read) == data[size:2 * size]
        assert lock_held_elsewhere(path) == (slots == 1)
    finally:
        os.close(fd)


@pytest.mark.parametrize("cancel", [False, True], ids=["read", "cancelled"])
def test_a_rings_file_slot_serves_read_after_read(data_path, cancel):
    """On a ring with one slot, five reads of 1 MiB one after the other
    (each, with ``cancelled``, after a read cancelled on the ring) all
    hold their file in the slot: it is free again once the read and the
    entry that empties it have completed, and no read took a duplicate,
    whose close would have released the lock."""
    from waits import await_until

    path, data = data_path
    size = 1 << 20
    fd = locked(path)
    try:
        async def reads(loop, ring):
            async def read(at):
                return await loop._ring_pread(fd, at, size)

            for i in range(5):
                if cancel:
                    task = asyncio.ensure_future(read((2 * i + 1) * size))
                    await asyncio.sleep(0)  # (the task starts: its read is on the ring)
                    assert ring.free_file_slots == 0
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    await await_until(lambda: ring.free_file_slots == 1, "the slot free again")
                got = loop._ring_pread(fd, 2 * i * size, size)
                assert ring.free_file_slots == 0
                assert await got == data[2 * i * size:(2 * i + 1) * size]
                await await_until(lambda: ring.free_file_slots == 1, "the slot free again")

        on_ring(1, reads)
        assert lock_held_elsewhere(path)
    finally:
        os.close(fd)


def run_child(code, path, soft_limit):
    """Runs ``code`` in a child process whose soft ``RLIMIT_NOFILE`` is
    ``soft_limit``, with ``lock_held_elsewhere`` and ``path`` (a ``str``)
    defined; its exit code and output."""
    prelude = f"""
import asyncio, fcntl, os, resource, subprocess, sys
import blockio
from blockio._blockio import LoopRing
from blockio._loop import UringEventLoop
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft_limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
CHECK = {CHECK!r}
path = {str(path)!r}
def lock_held_elsewhere(path):
    return subprocess.run([sys.executable, "-c", CHECK, path], timeout=60).returncode == 0
"""
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120, cwd=os.path.dirname(__file__))
    return out.returncode, out.stdout + out.stderr


def test_a_large_read_keeps_the_lock_under_a_descriptor_limit_below_the_tables_size(data_path):
    """Under a soft ``RLIMIT_NOFILE`` of 512 (below the 1,024 slots a loop
    ring's table has by default, a table the kernel refuses with
    ``EMFILE``), blockio's loop still has a table, of 512 slots, and a
    read of 1 MiB on its ring keeps the process's lock; with no table it
    took a duplicate, whose close released the lock."""
    path, data = data_path
    code, out = run_child("""
        async def main():
            loop = asyncio.get_running_loop()
            print("slots", loop._proactor._ring.free_file_slots)
            fd = os.open(path, os.O_RDWR)
            fcntl.lockf(fd, fcntl.LOCK_EX)
            assert lock_held_elsewhere(path)
            got = await loop._ring_pread(fd, 0, 1 << 20)
            print("read", len(got), "held", lock_held_elsewhere(path))

        loop = blockio.new_event_loop()
        assert type(loop).__name__ == "UringEventLoop", type(loop)
        loop.run_until_complete(main())
        loop.close()
    """, path, 512)
    assert code == 0, out
    assert out.splitlines() == ["slots 512", "read 1048576 held True"], out


def test_a_table_of_more_than_1024_slots_gives_every_slot_back(tmp_path):
    """A loop ring made with 2,048 slots (under a descriptor limit that
    allows them), 1,100 reads of more than 256 KiB in flight at once: once
    all are done, every slot is free again, those numbered 1,024 and up
    too (they were never given back)."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2048:
        pytest.skip("the hard RLIMIT_NOFILE is below 2,048: no table of 2,048 slots")
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 4096)
    code, out = run_child("""
        from waits import await_until
        ring = LoopRing(1024, 2048)
        loop = UringEventLoop(ring)
        fd = os.open(path, os.O_RDONLY)

        async def main():
            print("free", ring.free_file_slots)
            reads = [loop._ring_pread(fd, 0, 300 << 10) for _ in range(1100)]
            print("free", ring.free_file_slots)
            got = await asyncio.gather(*reads)
            assert all(g == b"x" * 4096 for g in got)
            await await_until(lambda: ring.free_file_slots == 2048, "every slot free again", timeout=20)
            print("free", ring.free_file_slots)

        loop.run_until_complete(main())
        loop.close()
    """, small, 4096)
    assert code == 0, out
    assert out.splitlines() == ["free 2048", "free 948", "free 2048"], out
