"""Descriptors at the process's limit (``RLIMIT_NOFILE``): a
``blockio.open`` file owns its descriptor, and its operations use that
number with no duplicate each, so a program can have as many files
written at once as the limit holds, as with aiofiles. A file's close waits
for its operations whose task was cancelled, so none can reach a file
opened later under the same number. Each run is a child process with its
own limit."""

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest

import blockio

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
WATCHDOG = 120  # seconds: far beyond any run that works


def run_limited(code, backend, cwd):
    env = dict(os.environ)
    if backend == "threads":
        env["BLOCKIO_BACKEND"] = "threads"
    else:
        env.pop("BLOCKIO_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=WATCHDOG, cwd=cwd, env=env)
    return out.returncode, out.stdout + out.stderr


@BACKENDS
@pytest.mark.parametrize("files", [600, 1000])
@pytest.mark.parametrize("mode", ["wb", "ab"])
def test_files_written_at_once_up_to_the_descriptor_limit(tmp_path, backend, files, mode):
    """Under a limit of 1,024 descriptors, ``files`` files open
    at once are each written (64 KiB, through the engine), synced and
    closed, concurrently; every write succeeds and every file holds its
    bytes. (When each operation held a duplicate descriptor, hundreds of
    the writes and fsyncs failed with EMFILE, and most of them with 1,000
    files.)"""
    code, out = run_limited(f"""
        import asyncio, resource
        import blockio

        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        async def main():
            fs = await asyncio.gather(*(blockio.open(f"f{{i}}", {mode!r}) for i in range({files})))
            got = await asyncio.gather(*(f.write(bytes([i % 251]) * 65536) for i, f in enumerate(fs)),
                                       return_exceptions=True)
            bad = [g for g in got if g != 65536]
            synced = await asyncio.gather(*(f.fsync() for f in fs), return_exceptions=True)
            bad += [s for s in synced if s is not None]
            await asyncio.gather(*(f.close() for f in fs))
            print(len(bad), bad[:3])

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("0 []"), out
    for i in range(files):
        assert (tmp_path / f"f{i}").read_bytes() == bytes([i % 251]) * 65536, i


@BACKENDS
def test_a_files_close_waits_for_its_cancelled_reads(tmp_path, backend):
    """A read whose task is cancelled may still be in the engine when the
    file is closed: the descriptor's number is closed only once it has
    completed, so a file opened right after (which may get that number)
    is never read or written by it, and the bytes of both files stay
    whole; every descriptor of the files is closed by the end."""
    data = os.urandom(1 << 20)
    (tmp_path / "src").write_bytes(data)

    async def main():
        with blockio.Engine(backend=backend) as e:
            for trial in range(50):
                f = await blockio.open(tmp_path / "src", "rb", buffering=0, engine=e)
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # (not cached: through the engine)
                task = asyncio.ensure_future(f.read(len(data)))
                await asyncio.sleep(0)
                task.cancel()
                await f.close()
                g = await blockio.open(tmp_path / f"out{trial}", "wb", buffering=0, engine=e)
                assert await g.write(b"x" * 1000) == 1000
                await g.close()
                try:
                    assert await task == data
                except asyncio.CancelledError:
                    pass
                assert (tmp_path / f"out{trial}").read_bytes() == b"x" * 1000

    asyncio.run(main())
    assert (tmp_path / "src").read_bytes() == data
    assert _open_under(tmp_path) == []


def _open_under(directory):
    """The descriptors of this process open on files under ``directory``."""
    names = []
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            continue  # (the listing's own, closed by now)
        if target.startswith(str(directory)):
            names.append(target)
    return names


@BACKENDS
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("case", ["write", "write0", "read", "text"])
def test_an_open_file_finishes_its_calls_with_no_descriptor_free(tmp_path, backend, loop, case):
    """The first file a process opens, then every free descriptor taken
    by the program: the file still writes (buffered and unbuffered),
    reads and closes, because what its engine needs (ring and eventfd, or
    the thread pool's epoll, eventfd and timerfd) is made by
    ``blockio.open``, which is what fails with EMFILE when they cannot be.
    (When the engine made them at the first read or write, every call
    raised EMFILE and close dropped the buffered bytes.)"""
    pytest.importorskip("uvloop") if loop == "uvloop" else None
    (tmp_path / "src").write_bytes(b"some bytes\n" * 100000)
    mode, kw, call = {
        "write": ("wb", "", "await f.write(b'important data\\n' * 1000)"),
        "write0": ("wb", ", buffering=0", "await f.write(b'important data\\n' * 1000)"),
        "read": ("rb", "", "got = await f.read(); assert got == b'some bytes\\n' * 100000, len(got)"),
        "text": ("r", "", "got = await f.read(); assert got == 'some bytes\\n' * 100000, len(got)"),
    }[case]
    path = "out" if mode == "wb" else "src"
    code, out = run_limited(f"""
        import asyncio, os, resource
        import blockio

        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        async def main():
            f = await blockio.open({path!r}, {mode!r}{kw})
            filler = []
            while True:
                try:
                    filler.append(os.open("/dev/null", os.O_RDONLY))
                except OSError:
                    break
            {call}
            await f.close()
            for fd in filler:
                os.close(fd)
            print("ok", len(filler))

        if {loop!r} == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("ok "), out
    if mode == "wb":
        assert (tmp_path / "out").read_bytes() == b"important data\n" * 1000


@BACKENDS
def test_open_fails_with_emfile_when_the_engine_cannot_be_made(tmp_path, backend):
    """With one descriptor free, the file could be opened but its engine
    not made: ``blockio.open`` raises EMFILE, as the built-in ``open``
    does when out of descriptors, and leaves no descriptor open; once
    descriptors are free again, the same engine opens and writes files."""
    code, out = run_limited("""
        import asyncio, errno, os, resource
        import blockio

        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        async def main():
            blockio.default_engine()  # (the engine object; its rings are not made yet)
            filler = []
            while True:
                try:
                    filler.append(os.open("/dev/null", os.O_RDONLY))
                except OSError:
                    break
            os.close(filler.pop())  # one free: the file's own
            try:
                await blockio.open("out", "wb")
            except OSError as e:
                assert e.errno == errno.EMFILE, e
            else:
                raise AssertionError("open succeeded with no descriptor for the engine")
            probe = os.open("/dev/null", os.O_RDONLY)  # the file's descriptor was closed
            os.close(probe)
            for fd in filler:
                os.close(fd)
            async with blockio.open("out", "wb") as f:
                await f.write(b"later\\n")
            print("ok")

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("ok"), out
    assert (tmp_path / "out").read_bytes() == b"later\n"
