"""Files on the event loop's own ring, side by side: blockio's loop with a
file's reads on its ring (``blockio-ring``), the same loop with them
through the engine's ring and driver thread (``blockio-engine``: the
loop's ``_ring_pread`` switched off in that process), and uvloop with
aiofiles (``uvloop-aiofiles``).

Workloads (each round a fresh process per contender, contenders rotated
from round to round, median and spread over the rounds, CPU time of the
whole process per read):

* ``random``: 64 tasks, each with its own unbuffered file, reading random
  4 KiB pieces of one 256 MiB file whose pages are dropped from the cache
  (``posix_fadvise(DONTNEED)``) before the round;
* ``serve-cold`` / ``serve-warm``: the file work of a file server without
  the network: 64 tasks, each taking random files of 4-64 KiB from a set
  of 2,000 (67 MiB) and, per request, opening the file, reading it whole
  (``read()``) and closing it; the set dropped from the cache before the
  round (cold) or read once before it (warm).

    python python/benchmarks/loop_files.py --rounds 7 --dir /tmp/loop-files

The data (about 330 MiB) is made in ``--dir`` and removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONTENDERS = ["blockio-ring", "blockio-engine", "uvloop-aiofiles"]
WORKLOADS = ["random", "serve-cold", "serve-warm"]
TASKS = 64
BIG = 256 << 20
PIECE = 4096
FILES = 2000


def make_data(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    big = d / "big.bin"
    if not big.exists() or big.stat().st_size != BIG:
        with open(big, "wb") as f:
            for _ in range(BIG >> 20):
                f.write(os.urandom(1 << 20))
            os.fsync(f.fileno())
    files = d / "files"
    if not files.exists():
        files.mkdir()
        rnd = random.Random(1)
        for i in range(FILES):
            (files / f"{i}.bin").write_bytes(os.urandom(rnd.randrange(4 << 10, 64 << 10 + 1)))
        os.sync()


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def prepare(d: Path, workload: str) -> None:
    """The cache state the round starts from."""
    if workload == "random":
        drop(d / "big.bin")
        return
    for p in (d / "files").iterdir():
        if workload == "serve-cold":
            drop(p)
        else:
            p.read_bytes()


async def random_reads(opener, path: Path, per_task: int) -> int:
    async def one(seed: int) -> int:
        rnd = random.Random(seed)
        async with opener(path, "rb", buffering=0) as f:
            for _ in range(per_task):
                await f.seek(rnd.randrange(BIG // PIECE) * PIECE)
                if len(await f.read(PIECE)) != PIECE:
                    raise AssertionError("short read")
        return per_task

    return sum(await asyncio.gather(*(one(i) for i in range(TASKS))))


async def serve(opener, d: Path, per_task: int) -> int:
    names = [d / "files" / f"{i}.bin" for i in range(FILES)]

    async def one(seed: int) -> int:
        rnd = random.Random(seed)
        for _ in range(per_task):
            async with opener(rnd.choice(names), "rb") as f:
                if not await f.read():
                    raise AssertionError("empty file")
        return per_task

    return sum(await asyncio.gather(*(one(i) for i in range(TASKS))))


def run_one(name: str, workload: str, d: Path, per_task: int) -> dict[str, float]:
    """One round of ``workload`` on contender ``name``, in this process."""
    if name == "uvloop-aiofiles":
        import aiofiles
        import uvloop

        loop = uvloop.new_event_loop()
        opener = aiofiles.open
    else:
        import blockio
        from blockio._loop import UringEventLoop

        if name == "blockio-engine":
            UringEventLoop._ring_pread = None  # (the reads go through the engine)
        loop = UringEventLoop()
        opener = blockio.open
    prepare(d, workload)
    work = random_reads(opener, d / "big.bin", per_task) if workload == "random" else serve(opener, d, per_task)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        n = loop.run_until_complete(work)
    finally:
        t1 = time.perf_counter()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        loop.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"rate": n / (t1 - t0), "cpu_us": cpu / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", default="/tmp/loop-files")
    ap.add_argument("--per-task", type=int, default=64)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--keep", action="store_true", help="keep the data afterwards")
    ap.add_argument("--one", nargs=2, metavar=("CONTENDER", "WORKLOAD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    d = Path(args.dir)
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], d, args.per_task)))
        return
    make_data(d)
    try:
        for workload in args.workloads.split(","):
            got: dict[str, list[dict[str, float]]] = {c: [] for c in CONTENDERS}
            for r in range(args.rounds):
                order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[:r % len(CONTENDERS)]
                for c in order:
                    out = subprocess.run([sys.executable, __file__, "--one", c, workload, "--dir", str(d),
                                          "--per-task", str(args.per_task)],
                                         capture_output=True, text=True, check=True)
                    got[c].append(json.loads(out.stdout))
            print(f"{workload}: {TASKS} tasks x {args.per_task}, {args.rounds} rounds, median (min-max)")
            base = statistics.median(x["rate"] for x in got["uvloop-aiofiles"])
            for c in CONTENDERS:
                rates = [x["rate"] for x in got[c]]
                cpus = [x["cpu_us"] for x in got[c]]
                print(f"  {c:16} {statistics.median(rates):9.0f}/s ({min(rates):.0f}-{max(rates):.0f})"
                      f"  x{statistics.median(rates) / base:4.2f} of uvloop-aiofiles"
                      f"  CPU {statistics.median(cpus):6.1f} us/op ({min(cpus):.1f}-{max(cpus):.1f})")
            sys.stdout.flush()
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
