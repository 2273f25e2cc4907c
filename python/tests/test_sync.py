"""Synchronous batches, checked against os.pread / the file's bytes."""

import errno
import mmap
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import blockio


@pytest.fixture(params=["auto", "threads"])
def engine(request):
    e = blockio.Engine(queue_depth=64, backend=request.param)
    yield e
    e.close()


def test_backend_is_reported(engine):
    assert engine.backend in ("uring", "threads")
    if engine.backend == "threads":
        assert engine.fallback_reason


def test_read_batch_matches_pread(engine, data_file):
    path, data = data_file
    rnd = random.Random(1)
    with open(path, "rb") as f:
        offsets = [rnd.randrange(len(data) + 100) for _ in range(500)]
        got = engine.read_batch(f, offsets=offsets, length=3000)
        for off, b in zip(offsets, got):
            assert b == os.pread(f.fileno(), 3000, off)
        # An int descriptor works too.
        assert engine.read_batch(f.fileno(), offsets=[5], length=10) == [data[5:15]]


def test_readinto_numpy_memoryview_mmap_without_copy(engine, data_file):
    path, data = data_file
    arr = np.zeros(1024, dtype=np.float32)  # 4096 bytes, not uint8
    ba = bytearray(5000)
    mv = memoryview(bytearray(100))[10:60]
    mm = mmap.mmap(-1, 8192)
    with open(path, "rb") as f:
        n = engine.readinto_batch([(f, arr, 4096), (f, ba, 1), (f, mv, 7), (f, mm, 3)])
    assert n == [4096, 5000, 50, 8192]
    assert arr.tobytes() == data[4096:8192]
    assert bytes(ba) == data[1:5001]
    assert bytes(mv) == data[7:57]
    assert mm[:] == data[3:8195]


def test_read_only_buffer_is_refused(engine, data_file):
    path, _ = data_file
    with open(path, "rb") as f, pytest.raises(TypeError, match="writable"):
        engine.readinto_batch([(f, b"immutable", 0)])


def test_errors_are_oserror_with_errno_and_filename(engine, data_file, tmp_path):
    path, data = data_file
    with open(path, "rb") as f:
        with pytest.raises(OSError) as ei:
            engine.write_batch([(f, b"x", 0)])
        assert ei.value.errno == errno.EBADF
        assert ei.value.filename == str(path)
        res = engine.read_batch(f, offsets=[0], length=4)
        assert res == [data[:4]]
    # In place, with the good results around it.
    with open(path, "rb") as f:
        out = engine.readinto_batch([(f, bytearray(4), 0), (12345, bytearray(4), 0), (f, bytearray(2), 2)],
                                    return_exceptions=True)
    assert out[0] == 4 and out[2] == 2
    assert isinstance(out[1], OSError) and out[1].errno == errno.EBADF
    # read_batch on a closed descriptor and on a write-only file: every read
    # fails in its place, nothing is returned as data.
    for fd_of in (lambda: 12345, lambda: os.open(path, os.O_WRONLY)):
        fd = fd_of()
        try:
            out = engine.read_batch(fd, offsets=[0, 4096, 1 << 30], length=4096, return_exceptions=True)
        finally:
            if fd != 12345:
                os.close(fd)
        assert [type(x) for x in out] == [OSError] * 3
        assert all(x.errno == errno.EBADF for x in out)


def test_write_batch_and_fsync_round_trip(engine, tmp_path):
    p = tmp_path / "w.bin"
    with open(p, "w+b") as f:
        chunks = [(f, bytes([i]) * 4096, i * 4096) for i in range(64)]
        assert engine.write_batch(chunks) == [4096] * 64
        engine.fsync(f)
        engine.fdatasync(f)
    assert p.read_bytes() == b"".join(bytes([i]) * 4096 for i in range(64))


def test_direct_io_reads_use_aligned_buffers(engine, data_file):
    path, data = data_file
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        pytest.fail(f"O_DIRECT is needed on the test file system: {e}")
    try:
        got = engine.read_batch(fd, offsets=[0, 4096 * 10, 4096 * 100], length=4096)
        assert got == [data[0:4096], data[40960:45056], data[409600:413696]]
    finally:
        os.close(fd)


def test_gil_is_released_while_waiting(engine, data_file):
    """Another thread runs Python code while a batch is in flight."""
    import threading

    path, _ = data_file
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)

    t = threading.Thread(target=ticker)
    t.start()
    with open(path, "rb") as f:
        for _ in range(50):
            engine.read_batch(f, offsets=range(0, 4 << 20, 4096), length=4096)
    stop.set()
    t.join()
    assert len(ticks) > 100


def test_forced_fallback_through_the_environment(data_file):
    path, data = data_file
    code = (
        "import blockio; e = blockio.Engine(); print(e.backend); "
        f"print(e.read_batch(open({str(path)!r}, 'rb'), offsets=[3], length=5) == [{data[3:8]!r}])"
    )
    env = dict(os.environ, BLOCKIO_BACKEND="threads")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=path.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["threads", "True"]


def test_engine_is_not_usable_after_fork(data_file):
    path, _ = data_file
    e = blockio.Engine()
    pid = os.fork()
    if pid == 0:
        # (the child never returns into pytest, whatever is raised)
        code = 1
        try:
            e.read_batch(os.open(path, os.O_RDONLY), offsets=[0], length=1)
        except RuntimeError as ex:
            code = 0 if "fork" in str(ex) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    e.close()


def test_an_engine_is_not_used_in_a_child_made_without_fork_handlers():
    # glibc's _Fork() runs no pthread_atfork handlers (nor does a raw
    # clone): the engine's check still tells the child from its maker,
    # so the child's loop never submits to the parent's rings.
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    e = blockio.Engine()
    assert e._usable_here
    pid = libc._Fork()
    if pid == 0:
        os._exit(3 if e._usable_here else 0)
    assert pid > 0, ctypes.get_errno()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    e.close()


def test_the_core_refuses_a_child_made_without_fork_handlers_and_serves_its_own_engine(data_file):
    # The core's own guard (the word the kernel wipes in a child) sees a
    # child made by glibc's _Fork(): the inherited engine's calls are
    # refused there, an engine made in the child serves it, and that
    # engine is refused in the child's own _Fork() child in turn.
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    path, data = data_file
    e = blockio.Engine()
    pid = libc._Fork()
    if pid == 0:
        code = 1
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                e.read_batch(fd, offsets=[0], length=1)
            except RuntimeError as ex:
                if "fork" in str(ex):
                    mine = blockio.Engine()
                    results = mine.read_batch(fd, offsets=[0], length=1)
                    grandchild = libc._Fork()
                    if grandchild == 0:
                        os._exit(0 if not mine._usable_here else 4)
                    _, status = os.waitpid(grandchild, 0)
                    served = results == [data[:1]] and mine._usable_here
                    code = 0 if served and os.waitstatus_to_exitcode(status) == 0 else 5
        finally:
            os._exit(code)
    assert pid > 0, ctypes.get_errno()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    e.close()


_WITHOUT_THE_WIPE_MARK = r"""
import ctypes, json, os, sys
import blockio
from blockio import _blockio

libc = ctypes.CDLL(None, use_errno=True)
engine = blockio.Engine(backend="uring")
ring = _blockio.LoopRing()
with open("/proc/self/smaps") as f:
    wiped = sum(1 for line in f if line.startswith("VmFlags") and " wf" in line)
path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
r, w = os.pipe()
pid = libc._Fork()
if pid == 0:
    out = {}
    try:
        for name, call in (("engine", lambda: engine.read_batch(fd, offsets=[0], length=1)),
                           ("ring", lambda: ring.poll(0, 1))):
            try:
                call()
                out[name] = "used"
            except RuntimeError as e:
                out[name] = "refused" if "fork" in str(e) or "parent" in str(e) else repr(e)
        mine = blockio.Engine(backend="uring")
        out["own"] = mine.read_batch(fd, offsets=[0], length=1)[0].hex()
    finally:
        os.write(w, json.dumps(out).encode())
        os._exit(0)
os.close(w)
child = json.loads(os.read(r, 4096))
os.waitpid(pid, 0)
print(json.dumps({"wiped": wiped, "child": child}))
"""


def test_a_child_made_without_fork_handlers_is_told_by_its_id_where_the_kernel_refuses_the_mark(data_file):
    # Where the kernel refuses MADV_WIPEONFORK (before Linux 4.14; here by
    # strace failing every madvise with EINVAL), the core's fork guard
    # falls back on the process id: a child made by glibc's _Fork(), which
    # runs no fork handler, still refuses its parent's engine and event
    # loop ring, and serves an engine of its own.
    import json

    path, data = data_file
    run = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=madvise", "-e", "inject=madvise:error=EINVAL",
         sys.executable, "-c", _WITHOUT_THE_WIPE_MARK, path],
        capture_output=True, text=True, check=True,
    )
    got = json.loads(run.stdout)
    assert got["wiped"] == 0, "the mark was not refused: the test does not reach the fallback"
    assert got["child"] == {"engine": "refused", "ring": "refused", "own": data[:1].hex()}


def test_closed_engine_raises(data_file):
    e = blockio.Engine()
    e.close()
    e.close()
    with pytest.raises(RuntimeError, match="closed"):
        e.read_batch(0, offsets=[0], length=1)
