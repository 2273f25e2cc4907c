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
