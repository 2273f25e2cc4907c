"""blockio under a limit on address space (``ulimit -v``, ``RLIMIT_AS``):
its threads are started as the work needs them, with small stacks, so a
small read starts a few threads where it started 66; and a thread that
cannot be started leaves its work to the threads running, so calls made
once the limit leaves no room for a new thread still succeed; and its
threads share one malloc arena, so a whole program runs at limits at or
below aiofiles' own floor. Each case runs in a child process, whose limit
is its own."""

import json
import os
import subprocess
import sys

import pytest

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])

_THREADS = r"""
import asyncio, json, os, sys
import blockio
path = sys.argv[1]
FILES = %d

def blockio_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sum(n.startswith("blockio") for n in names)

async def main():
    async with blockio.open(path, "rb") as f:
        await f.read()
    after_read = blockio_threads()
    for i in range(FILES):
        async with blockio.open(path + ".w", "wb") as f:
            await f.write(b"y" * 10)
    return [after_read, blockio_threads()]

print(json.dumps(asyncio.run(main())))
"""

_NO_ROOM = r"""
import asyncio, errno, json, os, resource, sys
import blockio
d = sys.argv[1]

async def one(i):
    p = os.path.join(d, f"f{i}")
    async with blockio.open(p, "wb") as f:
        await f.write(b"x" * 1000)
    async with blockio.open(p, "rb") as f:
        return len(await f.read())

async def many(n):
    return await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)

asyncio.run(many(1))  # (the engine, and the threads one call needs)
vm = int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize")][0]) << 10
resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 20), resource.RLIM_INFINITY))
def named(g):
    if isinstance(g, OSError) and g.errno in errno.errorcode:
        return errno.errorcode[g.errno]
    return g if isinstance(g, int) else repr(g)
print(json.dumps([named(g) for g in asyncio.run(many(40))]))
"""


def _child(code, arg, backend):
    env = dict(os.environ, BLOCKIO_BACKEND=backend)
    out = subprocess.run([sys.executable, "-c", code, str(arg)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


#: Files written one after the other.
FILES = 5
#: Threads there from the first call whatever the calls: the engine's
#: pools' first workers and the network poller's.
FIXED = 3
#: More than the jobs a file's open, read or write, flush and close send.
JOBS_PER_FILE = 6


@BACKENDS
def test_a_small_read_and_writes_one_at_a_time_start_few_threads(tmp_path, backend):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 10)
    after_read, after_writes = _child(_THREADS % FILES, p, backend)
    # Bounds no scheduling can exceed: a pool starts a thread only for a
    # job sent to it, at most one per job, beyond the one each engine
    # pool starts at once; besides, the thread of the network poller.
    # Starting every worker at once, as before, gave 67 and 133.
    assert after_read <= FIXED + JOBS_PER_FILE, after_read
    assert after_writes <= FIXED + JOBS_PER_FILE * (1 + FILES), after_writes


@BACKENDS
def test_calls_succeed_or_are_refused_when_no_thread_can_be_started(tmp_path, backend):
    """40 calls at once, made once the limit leaves about 2 MiB of address
    space: the reads and writes that cannot start a thread are left to
    those running; an open or close that finds every thread that opens
    and closes busy and none can start raises EAGAIN (they may all wait
    for good, in opens of FIFOs); nothing else fails."""
    got = _child(_NO_ROOM, tmp_path, backend)
    assert len(got) == 40
    assert set(got) <= {1000, "EAGAIN"}, got


_ALL_BLOCKED = r"""
import asyncio, errno, json, mmap, os, resource, sys
import blockio
d = sys.argv[1]

def fs_threads():
    tasks = os.listdir("/proc/self/task")
    return [t for t in tasks if open(f"/proc/self/task/{t}/comm").read().strip() == "blockio-fs"]

def in_fifo_open():
    return sum(open(f"/proc/self/task/{t}/wchan").read() == "wait_for_partner" for t in fs_threads())

async def main():
    p = os.path.join(d, "f")
    with open(p, "wb") as f:
        f.write(b"x")
    async with blockio.open(p, "rb") as f:
        await f.read()
    # No room for another thread: the room the limit leaves taken, all
    # but 192 KiB (for this program's own allocations; a thread's stack
    # is 256 KiB).
    vm = int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize")][0]) << 10
    resource.setrlimit(resource.RLIMIT_AS, (vm + (4 << 20), resource.RLIM_INFINITY))
    held = []
    fifos, opens = [], []

    def take_the_room():
        while True:
            try:
                held.append(mmap.mmap(-1, 64 << 10))
            except OSError:
                break
        for m in held[-3:]:
            m.close()
        del held[-3:]

    async def block_every_thread():
        # Every thread of the pool that opens files waits in the open of
        # a FIFO that no writer has opened.
        while in_fifo_open() < len(fs_threads()):
            fifo = os.path.join(d, f"p{len(fifos)}")
            os.mkfifo(fifo)
            fifos.append(fifo)
            opens.append(asyncio.ensure_future(blockio.open(fifo, "rb")))
            while in_fifo_open() < len(fifos):
                await asyncio.sleep(0.001)

    # The interpreter may give memory back to the system at any point
    # (a freed arena), which makes room for a thread after all: an open
    # served by a thread started in that room is no answer to the case,
    # so its thread is blocked too and the room taken again.
    for attempt in range(5):
        await block_every_thread()
        take_the_room()
        threads = len(fs_threads())
        try:
            async with await asyncio.wait_for(blockio.open(p, "rb"), 20) as f:
                got = repr(await f.read())
        except asyncio.TimeoutError:
            got = "hangs"
        except OSError as e:
            got = errno.errorcode.get(e.errno, repr(e))
        if got == "EAGAIN" or len(fs_threads()) == threads:
            break
    for fifo in fifos:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    for f in await asyncio.gather(*opens):
        await f.close()
    return [got, len(opens)]

print(json.dumps(asyncio.run(main())))
"""


@BACKENDS
def test_a_call_no_thread_can_take_is_refused_when_all_wait_in_fifo_opens(tmp_path, backend):
    """Every thread that opens files blocked in the open of a FIFO, and no
    room for another: an open raises EAGAIN, where it would wait behind
    them until a writer comes."""
    got, blocked = _child(_ALL_BLOCKED, tmp_path, backend)
    assert blocked >= 1
    assert got == "EAGAIN"


def _floor_program():
    """``python/benchmarks/address_floor.py``'s child program: a whole
    program that sets its ``RLIMIT_AS`` first, then writes files from many
    tasks at once and reads each back."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "address_floor.py")
    spec = importlib.util.spec_from_file_location("address_floor", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CHILD


#: Limits at or below aiofiles' own floor with that program (450 MiB,
#: ``docs/benchmarks.md``, "malloc's arenas under ``ulimit -v``"), where
#: blockio failed with ``MemoryError`` when each of its threads took a
#: 64 MiB arena of the room (300 MiB), and, with a second arena shared by
#: its threads, now and then with ``EAGAIN`` from the engine's ring
#: (100 MiB). (200 tasks of 1 KiB passed there before the bound too, so
#: they are not run here.)
FLOOR_LIMITS = [100, 300, 450]


@BACKENDS
def test_a_whole_program_runs_at_aiofiles_floor(tmp_path, backend):
    """20 tasks each writing and reading back 1 MiB at once, in a process
    limited to each of ``FLOOR_LIMITS``: every task reads back exactly the
    bytes it wrote."""
    code = _floor_program()
    env = dict(os.environ, BLOCKIO_BACKEND=backend)
    for mib in FLOOR_LIMITS:
        d = tmp_path / f"1mib-{mib}"
        d.mkdir()
        out = subprocess.run([sys.executable, "-c", code, "blockio", "1mib", str(mib), str(d)],
                             capture_output=True, text=True, timeout=60, env=env)
        assert (out.returncode, out.stdout.strip()) == (0, "ok"), (mib, out.stdout, out.stderr[-2000:])


_READ_FILES_FIRST = r"""
import os, resource, sys
d = sys.argv[1]
paths = [os.path.join(d, "f%d" % i).encode() for i in range(20)]
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]) << 20, resource.RLIM_INFINITY))
import blockio
got = blockio.default_engine().read_files(paths)
got = got[0] if isinstance(got, tuple) else got
print("ok" if [bytes(g) for g in got] == [bytes([i]) * (1 << 20) for i in range(20)]
      else [type(g).__name__ for g in got])
"""


#: Limits where ``Engine.read_files`` as a program's first call failed
#: (io_uring) in about 2 trials of 5 when its threads took arenas of their
#: own: ``MemoryError``, or at 100 MiB a reader thread that could not be
#: started ending the call ("its reading thread ended without a result").
READ_FILES_LIMITS = [100, 110, 115, 120]


@BACKENDS
def test_read_files_as_a_programs_first_call_keeps_to_one_arena(tmp_path, backend):
    """``Engine.read_files`` of 20 files of 1 MiB as the first blockio
    call, twice at each of ``READ_FILES_LIMITS``: its threads start after
    the arena bound too, and every file's bytes come back."""
    for i in range(20):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * (1 << 20))
    env = dict(os.environ, BLOCKIO_BACKEND=backend)
    for mib in READ_FILES_LIMITS * 2:
        out = subprocess.run([sys.executable, "-c", _READ_FILES_FIRST, str(tmp_path), str(mib)],
                             capture_output=True, text=True, timeout=60, env=env)
        assert (out.returncode, out.stdout.strip()) == (0, "ok"), (mib, out.stdout, out.stderr[-2000:])
