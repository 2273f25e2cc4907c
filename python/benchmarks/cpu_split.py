"""Where a sequential ``read(n)`` loop's CPU time goes: ``blockio.open``
against an ``os.pread`` loop over a cached file, alternating, each loop's
user and system time, minor faults and context switches of the reading
thread (``getrusage(RUSAGE_THREAD)``), median of PASSES passes::

    python cpu_split.py FILE PASSES SIZES_KIB   (e.g. 9 16,256,1024,8192)

``--only blockio|pread --size KIB`` runs one contender's loop alone,
PASSES times, and prints nothing: the program to profile (``perf record
-e cpu-clock``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
from typing import List

import blockio


def usage() -> List[float]:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return [r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_nvcsw, r.ru_nivcsw]


def since(before: List[float]) -> List[float]:
    return [b - a for a, b in zip(before, usage())]


async def blockio_loop(path: str, n: int) -> List[float]:
    async with blockio.open(path, "rb") as f:
        before = usage()
        while await f.read(n):
            pass
        return since(before)


def pread_loop(path: str, n: int) -> List[float]:
    fd = os.open(path, os.O_RDONLY)
    try:
        before = usage()
        pos = 0
        while True:
            chunk = os.pread(fd, n, pos)
            if not chunk:
                return since(before)
            pos += len(chunk)
    finally:
        os.close(fd)


async def compare(path: str, passes: int, sizes: List[int]) -> None:
    for n in sizes:
        got: dict = {"blockio": [], "os.pread": []}
        for _ in range(passes):
            got["blockio"].append(await blockio_loop(path, n))
            got["os.pread"].append(pread_loop(path, n))
        for name, runs in got.items():
            m = [statistics.median(r[i] for r in runs) for i in range(5)]
            print(f"{n >> 10:5d} KiB {name:9s} user {m[0] * 1e3:7.2f} ms  system {m[1] * 1e3:7.2f} ms  "
                  f"minor faults {m[2]:6.0f}  switches {m[3]:.0f} voluntary, {m[4]:.0f} involuntary")


async def only(path: str, name: str, passes: int, n: int) -> None:
    for _ in range(passes):
        if name == "blockio":
            await blockio_loop(path, n)
        else:
            pread_loop(path, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("passes", type=int)
    ap.add_argument("sizes", nargs="?", default="16,256,1024,8192", help="read sizes in KiB, comma-separated")
    ap.add_argument("--only", choices=["blockio", "pread"])
    ap.add_argument("--size", type=int, default=1024, help="KiB per read with --only")
    args = ap.parse_args()
    if args.only:
        asyncio.run(only(args.file, args.only, args.passes, args.size << 10))
    else:
        asyncio.run(compare(args.file, args.passes, [int(s) << 10 for s in args.sizes.split(",")]))


if __name__ == "__main__":
    main()
