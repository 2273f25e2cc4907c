"""``Engine.read_files`` / ``aread_files``: many small files whole, in one
call, on both backends; every result checked against ``Path.read_bytes``,
errors against the built-in ``open``'s."""

import asyncio
import errno
import os
import random
import subprocess
import sys

import pytest

import blockio

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])


def tree(tmp_path, n, rnd):
    paths = []
    for i in range(n):
        d = tmp_path / f"d{i % 7}"
        d.mkdir(exist_ok=True)
        p = d / f"f{i}.bin"
        p.write_bytes(rnd.randbytes(rnd.choice([0, 1, 4095, 4096, 4097, rnd.randrange(4096, 65537)])))
        paths.append(p)
    return paths


@BACKENDS
def test_read_files_returns_each_file_whole_in_order(tmp_path, backend):
    # More files than all the reading threads hold at once (256), sizes at the
    # page edges and empty files among them.
    paths = tree(tmp_path, 600, random.Random(5))
    with blockio.Engine(backend=backend) as e:
        got = e.read_files(paths)
        assert got == [p.read_bytes() for p in paths]
        assert e.read_files([str(p) for p in paths[:3]]) == e.read_files([bytes(p) for p in paths[:3]])
        assert e.read_files([]) == []


@BACKENDS
def test_read_files_keeps_each_result_in_its_place_across_the_reading_threads(tmp_path, backend):
    """Rounds are read by several threads at once, finishing in any order:
    every result, file or error, still lands at its own path's index."""
    rnd = random.Random(11)
    files = tree(tmp_path, 700, rnd)
    odd = [tmp_path / "missing", tmp_path, "/proc/self/status", tmp_path / "d0"]
    paths = [rnd.choice(odd) if rnd.random() < 0.1 else rnd.choice(files) for _ in range(2000)]
    with blockio.Engine(backend=backend) as e:
        got = e.read_files(paths, return_exceptions=True)
    assert len(got) == len(paths)
    for p, g in zip(paths, got):
        if str(p).startswith("/proc"):
            assert g.startswith(b"Name:")
        elif p == tmp_path / "missing":
            assert isinstance(g, FileNotFoundError) and g.filename == str(p)
        elif p in (tmp_path, tmp_path / "d0"):
            assert isinstance(g, IsADirectoryError) and g.filename == str(p)
        else:
            assert g == p.read_bytes()


@BACKENDS
def test_read_files_errors_read_as_open_does(tmp_path, backend):
    ok = tmp_path / "ok"
    ok.write_bytes(b"abc")
    missing = tmp_path / "missing"
    paths = [ok, missing, tmp_path, ok]
    with blockio.Engine(backend=backend) as e:
        got = e.read_files(paths, return_exceptions=True)
        assert got[0] == got[3] == b"abc"
        for i in (1, 2):
            with pytest.raises(OSError) as ref:
                open(paths[i], "rb")
            assert type(got[i]) is type(ref.value) and str(got[i]) == str(ref.value)
            assert got[i].filename == str(paths[i])
        assert got[2].errno == errno.EISDIR
        with pytest.raises(FileNotFoundError) as ei:
            e.read_files(paths)
        assert ei.value.filename == str(missing)
        with pytest.raises(ValueError, match="null"):
            e.read_files(["a\0b"])


@BACKENDS
def test_read_files_closes_every_file_it_opens(tmp_path, backend):
    paths = tree(tmp_path, 300, random.Random(9)) + [tmp_path / "missing", tmp_path]

    def open_in_tree():
        # Descriptors naming the tree's files; the engine's own (a ring for
        # each thread that reads rounds of a long list, as many as ran at
        # once) name none.
        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                names.append(os.readlink(f"/proc/self/fd/{fd}"))
            except FileNotFoundError:
                pass  # the listing's own descriptor, closed since
        return [n for n in names if n.startswith(str(tmp_path))]

    with blockio.Engine(backend=backend) as e:
        for _ in range(3):
            e.read_files(paths, return_exceptions=True)
            assert open_in_tree() == []


@BACKENDS
def test_read_files_reads_on_past_a_size_that_grew(tmp_path, backend):
    """A file longer than its first read (as one growing between the
    statx and the read would be, here a file in /proc whose statx size is 0)
    is read to its end."""
    with blockio.Engine(backend=backend) as e:
        got = e.read_files(["/proc/self/maps", "/proc/self/status"])
    assert got[0].endswith(b"\n") and b"[stack]" in got[0]
    assert got[1].startswith(b"Name:") and got[1].endswith(b"\n")


@BACKENDS
def test_aread_files_under_asyncio_and_uvloop(tmp_path, backend):
    import uvloop

    paths = tree(tmp_path, 300, random.Random(3))
    e = blockio.Engine(backend=backend)

    async def main():
        got = await asyncio.gather(e.aread_files(paths[:150]), e.aread_files(paths[150:] + [tmp_path / "x"],
                                                                            return_exceptions=True))
        assert got[0] + got[1][:-1] == [p.read_bytes() for p in paths]
        assert isinstance(got[1][-1], FileNotFoundError) and got[1][-1].filename == str(tmp_path / "x")
        with pytest.raises(FileNotFoundError):
            await e.aread_files([tmp_path / "x"])

    try:
        asyncio.run(main())
        loop = uvloop.new_event_loop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    finally:
        e.close()


@BACKENDS
def test_read_files_of_a_file_larger_than_memory_raises_memory_error(tmp_path, backend):
    """F-6: a (sparse) file no machine's memory holds fails with MemoryError,
    as Path.read_bytes does, in its place with return_exceptions=True,
    while the other files are read; never an abort of the process."""
    huge = tmp_path / "huge"
    with open(huge, "wb") as f:
        f.truncate(1 << 40)
    small = tmp_path / "small"
    small.write_bytes(b"small\n")
    with pytest.raises(MemoryError):
        huge.read_bytes()
    e = blockio.Engine(backend=backend)
    try:
        got = e.read_files([huge, small], return_exceptions=True)
        assert isinstance(got[0], MemoryError) and got[1] == small.read_bytes()
        with pytest.raises(MemoryError):
            e.read_files([small, huge])
        got = asyncio.run(e.aread_files([huge, small], return_exceptions=True))
        assert isinstance(got[0], MemoryError) and got[1] == small.read_bytes()
    finally:
        e.close()


@BACKENDS
def test_read_files_of_a_file_that_fits_in_memory_once_but_not_twice(tmp_path, backend):
    """A 1 GiB (sparse) file under a 1.6 GiB address-space limit: its
    bytes can be read, but not copied again into a bytes object. That is a
    MemoryError in its place too (as Path.read_bytes raises it when it
    cannot allocate), for read_files and aread_files, never a panic, and
    never a task left waiting; the engine goes on working after it."""
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    small = tmp_path / "small"
    small.write_bytes(b"ok")
    code = f"""
import asyncio, resource, blockio
e = blockio.Engine(backend={backend!r})
resource.setrlimit(resource.RLIMIT_AS, (int(1.6 * (1 << 30)), resource.RLIM_INFINITY))
paths = [{str(small)!r}, {str(big)!r}, {str(small)!r}]
def shown(r):
    return [x if isinstance(x, bytes) else type(x).__name__ for x in r]
print(shown(e.read_files(paths, return_exceptions=True)))
async def main():
    got = await asyncio.wait_for(e.aread_files(paths, return_exceptions=True), 60)
    return shown(got), await e.aread_files([{str(small)!r}])
print(*asyncio.run(main()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    want = "[b'ok', 'MemoryError', b'ok']"
    assert out.stdout.splitlines() == [want, want + " [b'ok']"], out


@BACKENDS
@pytest.mark.parametrize("limit", [40, 256])
def test_read_files_near_the_descriptor_limit_reads_what_a_loop_reads(tmp_path, backend, limit):
    """F-14: with few descriptors left (RLIMIT_NOFILE), read_files reads
    every file a loop of Path.read_bytes reads, instead of failing those
    its own round of opens crowded out."""
    import subprocess
    import sys

    for i in range(1000):
        (tmp_path / f"f{i:04}").write_bytes(b"%d" % i * 10)
    code = f"""
import asyncio, pathlib, resource, blockio
e = blockio.Engine(backend={backend!r})
paths = sorted(pathlib.Path({str(tmp_path)!r}).iterdir())
e.read_files(paths[:1])  # (the engine's own descriptors made first)
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
want = [p.read_bytes() for p in paths]
got = e.read_files(paths, return_exceptions=True)
agot = asyncio.run(e.aread_files(paths, return_exceptions=True))
print(sum(g != w for g, w in zip(got, want)), sum(g != w for g, w in zip(agot, want)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "0"], out.stdout + out.stderr


@BACKENDS
def test_read_files_reads_a_fifo_as_read_bytes_does(tmp_path, backend):
    """F-7: a FIFO whose writer is waiting reads as Path.read_bytes reads
    it (the writer's bytes), not ESPIPE, and the writer sees no EPIPE."""
    import threading

    fifo = tmp_path / "fifo"
    small = tmp_path / "small"
    small.write_bytes(b"small")
    e = blockio.Engine(backend=backend)
    try:
        for reader in ("reference", "blockio"):
            os.mkfifo(fifo)
            wrote = []

            def writer():
                with open(fifo, "wb") as w:
                    w.write(b"y" * 100)
                wrote.append(True)

            t = threading.Thread(target=writer, daemon=True)
            t.start()
            if reader == "reference":
                assert fifo.read_bytes() == b"y" * 100
            else:
                # Opened while the writer waits (no writer yet would read
                # as empty): retried until the writer's bytes arrive.
                got = b""
                for _ in range(1000):
                    got = e.read_files([fifo, small])
                    if got[0]:
                        break
                assert got == [b"y" * 100, b"small"]
            t.join(60)
            assert wrote == [True]
            fifo.unlink()
    finally:
        e.close()


@BACKENDS
@pytest.mark.parametrize("free", [1, 2, 3, 5, 8, 12, 17, 20, 40])
def test_read_files_with_few_descriptors_free_reads_every_file(tmp_path, backend, free):
    """With only ``free`` descriptor numbers below RLIMIT_NOFILE (counted
    after the event loop and the engine made theirs), read_files and
    aread_files with return_exceptions=True read every one of 300 files,
    as a loop of Path.read_bytes does: the call never fails as a whole,
    and no file fails for the limit, whatever the number free."""
    import subprocess
    import sys

    for i in range(300):
        (tmp_path / f"r{i:03}").write_bytes(bytes([i % 256]) * (100 + i))
    code = f"""
import asyncio, os, pathlib, resource, blockio
e = blockio.Engine(backend={backend!r})
paths = sorted(pathlib.Path({str(tmp_path)!r}).iterdir())
want = [p.read_bytes() for p in paths]
e.read_files(paths[:2]); asyncio.run(e.aread_files(paths[:2]))
loop = asyncio.new_event_loop()
loop.run_until_complete(e.aread_files(paths[:2]))
def is_open(n):
    try:
        os.fstat(n)
        return True
    except OSError:
        return False
limit, left = 0, {free}
while left:
    left -= not is_open(limit)
    limit += 1
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
assert [p.read_bytes() for p in paths] == want
got = e.read_files(paths, return_exceptions=True)
agot = loop.run_until_complete(e.aread_files(paths, return_exceptions=True))
print(sum(g != w for g, w in zip(got, want)), sum(g != w for g, w in zip(agot, want)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "0"], out.stdout + out.stderr


@BACKENDS
def test_read_files_waiting_on_a_fifo_is_interrupted_by_ctrl_c(tmp_path, backend):
    """A FIFO whose writer stays open never ends: read_files waiting on it
    is interrupted by SIGINT (KeyboardInterrupt), as os.read and
    Path.read_bytes are, and the engine reads other files afterwards."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    small = tmp_path / "small"
    small.write_bytes(b"ok")
    # Held open for writing (O_RDWR opens a FIFO without waiting) until
    # the child is done: the child's read never sees the end.
    writer = os.open(fifo, os.O_RDWR)
    try:
        os.write(writer, b"partial")
        code = f"""
import os, signal, threading, blockio
# Python leaves SIGINT alone when it starts ignored (a job started in the
# background by a shell that has no job control): Ctrl-C's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
e = blockio.Engine(backend={backend!r})
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    e.read_files([{str(fifo)!r}])
    print("returned")
except KeyboardInterrupt:
    print("interrupted", e.read_files([{str(small)!r}]))
"""
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    finally:
        os.close(writer)
    assert out.stdout.split("\n")[0] == "interrupted [b'ok']", out


@pytest.mark.parametrize("one", ["data", b"data", "pathlib"])
def test_one_path_instead_of_a_list_is_a_type_error_naming_paths(tmp_path, monkeypatch, one):
    """A path given alone is not taken for a list of one-character paths
    (a file ``d``, ``a``, ...): ``TypeError`` naming ``paths``, from both
    calls, and nothing is read."""
    import pathlib

    monkeypatch.chdir(tmp_path)
    for name in "dat":
        (tmp_path / name).write_bytes(b"x")
    arg = pathlib.Path("data") if one == "pathlib" else one
    with blockio.Engine() as e:
        with pytest.raises(TypeError, match="paths"):
            e.read_files(arg)
        with pytest.raises(TypeError, match="paths"):
            asyncio.run(e.aread_files(arg))


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_read_files_does_not_wait_for_a_fifos_writer(tmp_path, backend):
    """A FIFO with no writer reads as empty on either backend, as the
    docstring says: the thread backend's open waited for a writer, for
    good. In a child killed after 30 s, so a hang fails the test."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    small = tmp_path / "small"
    small.write_bytes(b"x" * 100)
    script = f"""
import asyncio, blockio
e = blockio.Engine(backend={backend!r})
assert e.read_files([{str(fifo)!r}, {str(small)!r}]) == [b"", b"x" * 100]
assert asyncio.run(e.aread_files([{str(fifo)!r}])) == [b""]
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
