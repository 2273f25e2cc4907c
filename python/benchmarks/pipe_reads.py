"""Reads of pipes through ``blockio.open`` beside ``aiofiles.open``.

``pending``: a child process lowers its soft descriptor limit to
``--limit``, makes ``--pipes`` pipes, opens each read end
(``buffering=0``) and starts one ``read(100)`` on each; once every read
waits (blockio's in the event loop's poll; aiofiles' after two seconds),
it counts the descriptors and threads added since the reads started,
writes two bytes to each pipe and counts the reads that got them. A
count, not a time: one run says it.

``throughput``: 256 MiB from ``dd`` through a pipe, ``read(--size)`` in a
loop until the end, by a file that owns the read end (``closefd=True``),
one that does not (``closefd=False``, read the same way: reads that
never wait, and waits in the loop's poll) and aiofiles; MiB/s, the median and spread of ``--rounds``
rounds, the three alternating in order each round.

    .venv/bin/python python/benchmarks/pipe_reads.py pending
    BLOCKIO_BACKEND=threads .venv/bin/python python/benchmarks/pipe_reads.py throughput --size 65536
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import textwrap
import time

PENDING = """
import asyncio, os, resource, sys
lib, n, limit, tests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, tests)
from waits import await_until, watched
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
if lib == "blockio":
    from blockio import open as opener
else:
    from aiofiles import open as opener

def count(what):
    return len(os.listdir(f"/proc/self/{what}"))

async def main():
    pipes = [os.pipe() for _ in range(n)]
    files = [await opener(r, "rb", buffering=0) for r, w in pipes]
    fds, threads = count("fd"), count("task")
    tasks = [asyncio.ensure_future(f.read(100)) for f in files]
    if lib == "blockio":
        await await_until(lambda: watched(*(r for r, w in pipes)), "every read waits")
    else:
        await asyncio.sleep(2)  # (its reads wait on its executor's threads: no event to see)
    more_fds, more_threads, all_threads = count("fd") - fds, count("task") - threads, count("task")
    for r, w in pipes:
        os.write(w, b"hi")
    got = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    for f in files:
        await f.close()
    for r, w in pipes:
        os.close(w)
    print(sum(g == b"hi" for g in got), more_fds, more_threads, all_threads)

asyncio.run(main())
"""


def pending(args: argparse.Namespace) -> None:
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
    print(f"{'library':10} {'reads ok':>10} {'+descriptors':>13} {'+threads':>9} {'threads':>8}")
    for lib in ("blockio", "aiofiles"):
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(PENDING), lib, str(args.pipes),
                              str(args.limit), tests], capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            print(f"{lib:10} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        ok, fds, threads, total = out.stdout.split()
        print(f"{lib:10} {ok + '/' + str(args.pipes):>10} {fds:>13} {threads:>9} {total:>8}")


MIB = 256


async def read_through(how: str, size: int) -> float:
    import aiofiles
    import blockio

    r, w = os.pipe()
    dd = subprocess.Popen(["dd", "if=/dev/zero", "bs=64k", f"count={MIB * 16}", "status=none"], stdout=w)
    os.close(w)
    t0 = time.perf_counter()
    if how == "aiofiles":
        f = await aiofiles.open(r, "rb", buffering=0)
    else:
        f = await blockio.open(r, "rb", buffering=0, closefd=how == "owned")
    got = 0
    while True:
        b = await f.read(size)
        if not b:
            break
        got += len(b)
    dt = time.perf_counter() - t0
    await f.close()
    if how == "not owned":
        os.close(r)
    dd.wait()
    assert got == MIB << 20, got
    return MIB / dt


def throughput(args: argparse.Namespace) -> None:
    hows = ["owned", "not owned", "aiofiles"]
    res: dict = {h: [] for h in hows}

    async def rounds() -> None:
        for i in range(args.rounds):
            for h in hows if i % 2 == 0 else hows[::-1]:
                res[h].append(await read_through(h, args.size))

    asyncio.run(rounds())
    backend = os.environ.get("BLOCKIO_BACKEND") or "uring"
    for h in hows:
        v = res[h]
        print(f"{backend:8} read({args.size}) {h:10} median {statistics.median(v):6.0f} MiB/s, "
              f"spread {min(v):.0f}-{max(v):.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("pending")
    p.add_argument("--pipes", type=int, default=450)
    p.add_argument("--limit", type=int, default=1024)
    t = sub.add_parser("throughput")
    t.add_argument("--size", type=int, default=65536)
    t.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    pending(args) if args.what == "pending" else throughput(args)


if __name__ == "__main__":
    main()
