"""A buffered ``blockio.open`` file's writes (its flushes) made on the
loop's thread (``WriteQueue.write_now``) when none of the file's writes is
unfinished and the kernel takes them at once: counted as made inline, not
submitted to the engine, with the built-in file's positions, reads and
bytes under mixes of writes, seeks, truncations and reads, in every binary
and text mode; anything else (a file that is not a regular one, an
unbuffered file) goes through the engine. Both backends. Only with the
engine's ``inline_writes`` on (off by default: then no write is made
there)."""

import asyncio
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile

import pytest

import blockio
from blockio._blockio import INLINE_WRITE_AFTER_WAIT, TURN_BUDGET, TURN_UNIT

#: The turns these tests count are those of the count alone (see
#: ``turns_by_count``; the time between turns is tested on its own in
#: test_turn_time.py): with the clock, a loop of writes faster than
#: ``TURN_TIME`` per budget takes its turn only at a later check.
pytestmark = pytest.mark.usefixtures("turns_by_count")

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])

#: The file systems on which writes are made on the loop's thread
#: (``inline_write::find_way``).
INLINE_FS = ("ext2", "ext3", "ext4", "tmpfs")


def fs_type(path):
    """The type of the file system ``path`` is on (``/proc/self/mounts``'s
    longest mount point holding it)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    with open("/proc/self/mounts") as m:
        for line in m:
            mnt, fs = line.split()[1:3]
            mnt = mnt.replace("\\040", " ")
            inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, kind = mnt, fs
    return kind


@pytest.fixture
def tmp_path(tmp_path):
    """A directory on a file system whose writes are made on the loop's
    thread: pytest's, or else one under /dev/shm (tmpfs), as where
    pytest's is on another (XFS, overlayfs) every write goes to the
    engine and the counts asserted here would say nothing; a failure
    naming both file systems if neither is one."""
    if fs_type(tmp_path) in INLINE_FS:
        yield tmp_path
        return
    if fs_type("/dev/shm") != "tmpfs":
        pytest.fail(f"{tmp_path} is on {fs_type(tmp_path)} and /dev/shm on {fs_type('/dev/shm')}: "
                    f"writes are made on the loop's thread only on {', '.join(INLINE_FS)}")
    d = tempfile.mkdtemp(dir="/dev/shm", prefix="blockio-inline-")
    try:
        yield type(tmp_path)(d)
    finally:
        shutil.rmtree(d)


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

    with blockio.Engine(backend=backend, inline_writes=True) as e:
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

    with blockio.Engine(backend=backend, inline_writes=True) as e:
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
    with blockio.Engine(backend=backend, inline_writes=True) as e:
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
    # 300 writes of 64 KiB (each written through, made inline without
    # suspending): each counts toward the loop's turn its call and the
    # bytes it copied, 1 + 64 KiB / TURN_UNIT units; the turn, due once in
    # TURN_BUDGET units, is taken by the write that finds it due, and the
    # other task runs. Counting the calls alone would let 255 writes in a
    # row go by without a turn.
    n, size = 300, 64 << 10
    units = 1 + size // TURN_UNIT
    assert units > 1

    async def main():
        ran = False
        done = False

        async def other():
            nonlocal ran
            while not done:
                await asyncio.sleep(0)
                ran = True

        t = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        # (the longest run of writes in a row in whose course the other
        # task did not run, and the writes in whose course it ran)
        longest = row = let_run = 0
        async with blockio.open(tmp_path / "out", "wb", engine=e) as f:
            for _ in range(n):
                ran = False
                await f.write(b"z" * size)
                row = 0 if ran else row + 1
                longest = max(longest, row)
                let_run += ran
            c = counts(f)
        done = True
        await t
        return longest, let_run, c

    with blockio.Engine(backend=backend, inline_writes=True) as e:
        longest, let_run, (made, engine, waited) = asyncio.run(main())
    assert made > 0
    # (a turn due once the count reaches TURN_BUDGET - 1 units, each write
    # counting `units`: at most that many writes in a row go by, the one
    # that finds it due taking it; a slow write, sending the next ones to
    # the engine, only makes the runs shorter)
    most = -(-(TURN_BUDGET - 1) // units)
    assert longest <= most < TURN_BUDGET // 2, (longest, let_run, made, engine, waited)
    assert let_run >= 1
    assert (tmp_path / "out").stat().st_size == n * size


@BACKENDS
def test_writes_are_made_through_the_engine_unless_asked(tmp_path, backend):
    async def main():
        async with blockio.open(tmp_path / "out", "wb", engine=e) as f:
            for _ in range(50):
                await f.write(b"x" * 5000)
            await f.flush()
            return counts(f)

    with blockio.Engine(backend=backend) as e:
        made, engine, waited = asyncio.run(main())
    assert made == 0 and engine == 50
    assert (tmp_path / "out").read_bytes() == b"x" * 250_000


_DEFAULT = """
import asyncio, sys, blockio
async def main():
    async with blockio.open(sys.argv[1], "wb") as f:
        for _ in range(20):
            await f.write(b"x" * 5000)
        return f._file.writes.write_counts()[0]
print(asyncio.run(main()))
"""


@pytest.mark.parametrize("value, made", [("1", True), ("0", False), ("", False)])
def test_the_default_engine_makes_writes_inline_when_the_environment_asks(tmp_path, value, made):
    env = dict(os.environ, BLOCKIO_INLINE_WRITES=value)
    out = subprocess.run([sys.executable, "-c", _DEFAULT, str(tmp_path / "out")], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert (int(out) > 0) == made, out


def test_a_bad_value_of_the_variable_is_refused_naming_it(tmp_path):
    env = dict(os.environ, BLOCKIO_INLINE_WRITES="yes")
    r = subprocess.run([sys.executable, "-c", _DEFAULT, str(tmp_path / "out")], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "BLOCKIO_INLINE_WRITES='yes'" in r.stderr, r.stderr
