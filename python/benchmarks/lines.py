#!/usr/bin/env python3
"""``readlines()`` and ``writelines()`` of 45,000 lines of about 90 bytes
(a cached file), blockio against aiofiles, in alternating rounds: each
round times both, one after the other, for text and binary; the median
and range over the rounds, in ms, and blockio's time over aiofiles'.

Usage: python lines.py [--rounds N] [--lines N]"""
import argparse
import asyncio
import os
import statistics
import tempfile
import time

import aiofiles

import blockio


def line(i):
    return "%06d some log text, about ninety bytes per line ................. é\n" % i


async def read_lines(m, path, mode):
    async with m.open(path, mode) as f:
        t0 = time.perf_counter()
        n = len(await f.readlines())
        return time.perf_counter() - t0, n


async def write_lines(m, path, mode, lines):
    async with m.open(path, mode) as f:
        t0 = time.perf_counter()
        await f.writelines(lines)
        took = time.perf_counter() - t0
    return took, len(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--lines", type=int, default=45000)
    args = ap.parse_args()
    d = tempfile.mkdtemp()
    src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
    text = [line(i) for i in range(args.lines)]
    binary = [s.encode() for s in text]
    with open(src, "w") as f:
        f.writelines(text)
    cases = {
        "readlines text": lambda m: read_lines(m, src, "r"),
        "readlines binary": lambda m: read_lines(m, src, "rb"),
        "writelines text": lambda m: write_lines(m, dst, "w", text),
        "writelines binary": lambda m: write_lines(m, dst, "wb", binary),
    }
    times = {(c, name): [] for c in cases for name in ("blockio", "aiofiles")}
    try:
        for r in range(args.rounds):
            order = (("blockio", blockio), ("aiofiles", aiofiles))
            for case, run in cases.items():
                for name, m in order if r % 2 == 0 else order[::-1]:
                    took, n = asyncio.run(run(m))
                    assert n == args.lines, (case, name, n)
                    times[case, name].append(took * 1000)
    finally:
        for p in (src, dst):
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(d)
    for case in cases:
        b, a = times[case, "blockio"], times[case, "aiofiles"]
        ratios = [x / y for x, y in zip(b, a)]
        print(f"{case:18s} blockio {statistics.median(b):7.1f} ms ({min(b):.1f}-{max(b):.1f})  "
              f"aiofiles {statistics.median(a):7.1f} ms ({min(a):.1f}-{max(a):.1f})  "
              f"blockio/aiofiles {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
