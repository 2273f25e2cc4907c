"""Reads on blockio's event loop's own ring (the ``"uring"`` loop), this
build beside another (``--baseline DIR``, a directory holding another
build's ``blockio`` package) and beside aiofiles on the same loop, each
run a new process, contenders rotated from round to round; medians and
spread (lowest-highest) over the rounds.

``--gaps``: a cached 512 MiB file read by ``await f.read()`` (``all``),
``while await f.read(64 MiB)`` (``chunk64``) and ``while await
f.read(8 MiB)`` (``chunk8``), with a task sleeping 1 ms in a loop beside
it: the event loop's longest gap is that sleep's longest time between two
wake-ups.

``--small``: the process's CPU time per read of a cached file on the
loop's ring (``loop._ring_pread``, awaited one at a time, 2,000 reads per
size after 50 not counted) for 4, 16, 64 and 256 KiB, and 300 reads of 1
and 4 MiB (with the wall time per read).

    python python/benchmarks/ring_large_reads.py --gaps --small --rounds 7 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

MODES = {"all": 0, "chunk64": 64 << 20, "chunk8": 8 << 20}
SMALL = [(4 << 10, 2000), (16 << 10, 2000), (64 << 10, 2000), (256 << 10, 2000), (1 << 20, 300), (4 << 20, 300)]


def make(path: str, size: int) -> None:
    if not os.path.exists(path) or os.path.getsize(path) != size:
        with open(path, "wb") as f:
            block = bytes(range(256)) * 4096
            for _ in range(size // len(block)):
                f.write(block)
    with open(path, "rb") as f:  # (in the page cache)
        while f.read(64 << 20):
            pass


async def gap_child(impl: str, path: str, mode: str) -> dict:
    if impl == "aiofiles":
        import aiofiles
        opener = aiofiles.open
    else:
        import blockio
        opener = blockio.open
    gap, stop = 0.0, False

    async def ticker() -> None:
        nonlocal gap
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gap, last = max(gap, now - last), now

    task = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.01)
    gap, total, t0 = 0.0, 0, time.perf_counter()
    async with opener(path, "rb") as f:
        if mode == "all":
            total = len(await f.read())
        else:
            while chunk := await f.read(MODES[mode]):
                total += len(chunk)
    elapsed = time.perf_counter() - t0
    stop = True
    await task
    return {"gap_ms": gap * 1000, "ms": elapsed * 1000, "bytes": total}


async def small_child(path: str) -> dict:
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_RDONLY)
    out = {}
    try:
        for size, n in SMALL:
            span = (64 << 20) // size
            for i in range(50):
                await loop._ring_pread(fd, (i % span) * size, size)
            c0, w0 = time.process_time(), time.perf_counter()
            for i in range(n):
                await loop._ring_pread(fd, (i % span) * size, size)
            out[f"{size >> 10}K"] = [(time.process_time() - c0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6]
    finally:
        os.close(fd)
    return out


def child(args: argparse.Namespace) -> None:
    from blockio._loop import UringEventLoop

    loop = UringEventLoop()
    try:
        if args.child == "gap":
            res = loop.run_until_complete(gap_child(args.impl, args.file, args.mode))
        else:
            res = loop.run_until_complete(small_child(args.small_file))
    finally:
        loop.close()
    print(json.dumps(res))


def run(args: argparse.Namespace, build: str, extra: list) -> dict:
    env = dict(os.environ, BLOCKIO_BACKEND="uring")
    if build == "base":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.baseline, os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, __file__, "--file", args.file, "--small-file", args.small_file] + extra,
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)


def spread(values: list) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gaps", action="store_true")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", help="a directory with another build of blockio")
    ap.add_argument("--file", default="bench-data/py-512m.dat")
    ap.add_argument("--small-file", default="bench-data/py-64m.dat")
    ap.add_argument("--child", choices=["gap", "small"], help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    print(f"load average before: {os.getloadavg()}")
    builds = ["this"] + (["base"] if args.baseline else [])
    if args.gaps:
        make(args.file, 512 << 20)
        contenders = [(b, "blockio") for b in builds] + [("this", "aiofiles")]
        for mode in MODES:
            got: dict = {c: [] for c in contenders}
            for r in range(args.rounds):
                for c in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
                    got[c].append(run(args, c[0], ["--child", "gap", "--impl", c[1], "--mode", mode])["gap_ms"])
            ratio = [a / b for a, b in zip(got[("this", "blockio")], got[("this", "aiofiles")])]
            print(f"{mode}: longest gap, ms: " + "; ".join(f"{b} {i} {spread(v)}" for (b, i), v in got.items())
                  + f"; this/aiofiles by round {spread(ratio)}")
    if args.small:
        make(args.small_file, 64 << 20)
        got2: dict = {b: [] for b in builds}
        for r in range(args.rounds):
            for b in builds[r % len(builds):] + builds[:r % len(builds)]:
                got2[b].append(run(args, b, ["--child", "small"]))
        for size, _ in SMALL:
            key = f"{size >> 10}K"
            print(f"{key}: CPU us per read: " + "; ".join(f"{b} {spread([g[key][0] for g in v])}" for b, v in got2.items())
                  + "; wall: " + "; ".join(f"{b} {spread([g[key][1] for g in v])}" for b, v in got2.items()))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
