"""blockio under a limit on address space (``ulimit -v``, ``RLIMIT_AS``):
its threads are started as the work needs them, with small stacks, so a
small read starts a few threads where it started 66; and a thread that
cannot be started leaves its work to the threads running, so calls made
once the limit leaves no room for a new thread still succeed. Each case
runs in a child process, whose limit is its own."""

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

def blockio_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sum(n.startswith("blockio") for n in names)

async def main():
    async with blockio.open(path, "rb") as f:
        await f.read()
    after_read = blockio_threads()
    for i in range(200):
        async with blockio.open(path + ".w", "wb") as f:
            await f.write(b"y" * 10)
    return [after_read, blockio_threads()]

print(json.dumps(asyncio.run(main())))
"""

_NO_ROOM = r"""
import asyncio, json, os, resource, sys
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
print(json.dumps([g if isinstance(g, int) else repr(g) for g in asyncio.run(many(40))]))
"""


def _child(code, arg, backend):
    env = dict(os.environ, BLOCKIO_BACKEND=backend)
    out = subprocess.run([sys.executable, "-c", code, str(arg)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@BACKENDS
def test_a_small_read_and_writes_one_at_a_time_start_few_threads(tmp_path, backend):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 10)
    after_read, after_writes = _child(_THREADS, p, backend)
    # (one worker of each pool a call goes through, and a second one a
    # call queued as the first ends its last may start)
    assert after_read <= 4, after_read
    assert after_writes <= 8, after_writes


@BACKENDS
def test_calls_succeed_when_no_thread_can_be_started(tmp_path, backend):
    """40 calls at once, made once the limit leaves about 2 MiB of address
    space: the threads that cannot be started leave the calls to those
    running."""
    assert _child(_NO_ROOM, tmp_path, backend) == [1000] * 40
