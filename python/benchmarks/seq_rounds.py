"""Sequential ``read(n)`` and ``readinto`` loops over a cached file,
``blockio.open`` against an ``os.pread`` / ``os.preadv`` loop and
aiofiles, side by side: each round a new process per build (``--build
NAME=DIR``, DIR put first on ``sys.path``; ``.`` for the installed
package), builds alternating, every contender of every n in each
process in an order turned round from one round to the next. Per
contender and n, the loop's thread's CPU time (``time.thread_time``, its
system calls' time in the kernel included) and the wall time, as rates;
printed as the median (lowest-highest) of the rounds of each ratio taken
within one process: blockio's ``read(n)`` over the ``os.pread`` loop's and
over aiofiles' (wall time only: aiofiles reads on its threads, whose CPU
time the loop's thread does not count), ``readinto`` over the
``os.preadv`` loop's (one ``bytearray`` of n bytes), and the ``os.pread``
loop's over a bare copy's (``bytes(src[i:i + n])`` over a copy of the
file in memory: the memory-copy ceiling a read into a new object cannot
pass).

    python seq_rounds.py --file F [--rounds 5] [--sizes 4096,65536,...]
        [--build before=DIR --build after=DIR] [--loop asyncio|blockio] [--no-aiofiles]
        [--digits 2] [--no-turns]

``--no-turns`` adds a contender, ``read(n)`` with the event loop's turns
by time switched off (``set_turn_time`` of a day: the calls served
without suspending never yield), printed over the ``os.pread`` loop's:
what the turns cost, which keep the loop's longest gap bounded.
``--loop blockio`` runs blockio's loops on ``blockio.run`` (its own event
loop); the ``os.pread`` and aiofiles loops stay on asyncio's. F must be
cached (it is read once before each round).
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
from typing import Callable, Dict, List, Tuple

SIZES = [4 << 10, 64 << 10, 1 << 20, 8 << 20]
Clocks = Tuple[float, float]


def pread_loop(path: str, n: int) -> Tuple[Clocks, int]:
    fd = os.open(path, os.O_RDONLY)
    got = 0
    c, w = time.thread_time(), time.perf_counter()
    while chunk := os.pread(fd, n, got):
        got += len(chunk)
    took = (time.thread_time() - c, time.perf_counter() - w)
    os.close(fd)
    return took, got


def copy_loop(path: str, n: int) -> Tuple[Clocks, int]:
    """The memory-copy ceiling: the file's bytes, held in memory (read
    once, as big as the file: no CPU cache holds them), copied ``n`` at a
    time into a new ``bytes`` object each (an allocation and a ``memcpy``,
    as a read of the page cache into a new object is, without the system
    call and the page cache's lookup)."""
    with open(path, "rb") as f:
        src = memoryview(f.read())
    got = 0
    c, w = time.thread_time(), time.perf_counter()
    while chunk := bytes(src[got:got + n]):
        got += len(chunk)
    return (time.thread_time() - c, time.perf_counter() - w), got


def preadv_loop(path: str, n: int) -> Tuple[Clocks, int]:
    fd = os.open(path, os.O_RDONLY)
    got, buf = 0, bytearray(n)
    c, w = time.thread_time(), time.perf_counter()
    while k := os.preadv(fd, [buf], got):
        got += k
    took = (time.thread_time() - c, time.perf_counter() - w)
    os.close(fd)
    return took, got


async def blockio_read(path: str, n: int) -> Tuple[Clocks, int]:
    import blockio

    got = 0
    async with blockio.open(path, "rb") as f:
        c, w = time.thread_time(), time.perf_counter()
        while chunk := await f.read(n):
            got += len(chunk)
        return (time.thread_time() - c, time.perf_counter() - w), got


async def blockio_readinto(path: str, n: int) -> Tuple[Clocks, int]:
    import blockio

    got, buf = 0, bytearray(n)
    async with blockio.open(path, "rb") as f:
        c, w = time.thread_time(), time.perf_counter()
        while k := await f.readinto(buf):
            got += k
        return (time.thread_time() - c, time.perf_counter() - w), got


async def aiofiles_read(path: str, n: int) -> Tuple[Clocks, int]:
    import aiofiles  # type: ignore[import-untyped]

    got = 0
    async with aiofiles.open(path, "rb") as f:
        c, w = time.thread_time(), time.perf_counter()
        while chunk := await f.read(n):
            got += len(chunk)
        return (time.thread_time() - c, time.perf_counter() - w), got


def warm(path: str) -> None:
    """Reads ``path`` whole into one buffer: before each contender's loop,
    so that pages other processes' memory use evicted since are back in
    the page cache (blockio's reads of them would go to the engine, and
    ``os.pread`` would wait for the disk), for every contender alike."""
    fd, buf, at = os.open(path, os.O_RDONLY), bytearray(8 << 20), 0
    try:
        while k := os.preadv(fd, [buf], at):
            at += k
    finally:
        os.close(fd)


def without_turns(run: Callable[[], Tuple[Clocks, int]]) -> Tuple[Clocks, int]:
    """``run()`` with the turns of the event loop by time switched off."""
    from blockio._blockio import set_turn_time

    before = set_turn_time(86400 * 10**9)
    try:
        return run()
    finally:
        set_turn_time(before)


def child(path: str, sizes: List[int], flip: bool, loop: str, aio: bool, turnless: bool) -> None:
    """One round in this process: ``{contender: {n: [cpu s, wall s]}}`` as JSON."""
    import blockio

    run_blockio: Callable[..., Tuple[Clocks, int]] = blockio.run if loop == "blockio" else asyncio.run
    runs: Dict[str, Callable[[int], Tuple[Clocks, int]]] = {
        "os.pread": lambda n: pread_loop(path, n),
        "os.preadv": lambda n: preadv_loop(path, n),
        "memcpy": lambda n: copy_loop(path, n),
        "read": lambda n: run_blockio(blockio_read(path, n)),
        "readinto": lambda n: run_blockio(blockio_readinto(path, n)),
    }
    if aio:
        runs["aiofiles"] = lambda n: asyncio.run(aiofiles_read(path, n))
    if turnless:
        runs["read-no-turns"] = lambda n: without_turns(lambda: run_blockio(blockio_read(path, n)))
    names = list(runs)[::-1] if flip else list(runs)
    out: Dict[str, Dict[int, Clocks]] = {k: {} for k in names}
    size = os.path.getsize(path)
    for n in sizes:
        for name in names:
            warm(path)
            took, got = runs[name](n)
            assert got == size, (name, n, got)
            out[name][n] = took
    print(json.dumps(out))


def spread(v: List[float], digits: int = 2) -> str:
    v = sorted(v)
    return f"{statistics.median(v):.{digits}f} ({v[0]:.{digits}f}-{v[-1]:.{digits}f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--build", action="append", default=[], help="NAME=DIR, first on sys.path")
    ap.add_argument("--loop", choices=["asyncio", "blockio"], default="asyncio")
    ap.add_argument("--no-aiofiles", action="store_true")
    ap.add_argument("--digits", type=int, default=2, help="decimals of the ratios printed")
    ap.add_argument("--no-turns", action="store_true", help="also read(n) with no turns of the loop by time")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--flip", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.child:
        child(a.file, sizes, a.flip, a.loop, not a.no_aiofiles, a.no_turns)
        return 0
    builds = [b.split("=", 1) for b in a.build] or [["installed", "."]]
    res: Dict[str, List[Dict[str, Dict[str, Clocks]]]] = {b: [] for b, _ in builds}
    for r in range(a.rounds):
        for name, d in builds if r % 2 == 0 else builds[::-1]:
            with open(a.file, "rb") as f:
                while f.read(8 << 20):
                    pass
            env = dict(os.environ)
            if d != ".":
                env["PYTHONPATH"] = os.path.abspath(d) + os.pathsep + env.get("PYTHONPATH", "")
            cmd = [sys.executable, __file__, "--child", "--file", a.file, "--sizes", a.sizes, "--loop", a.loop]
            cmd += ["--flip"] * (r % 2) + ["--no-aiofiles"] * a.no_aiofiles + ["--no-turns"] * a.no_turns
            res[name].append(json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True,
                                                       text=True).stdout))
    for name, _ in builds:
        print(f"{name} ({a.rounds} rounds, loop {a.loop}): rate over the floor's, median (lowest-highest)")
        for n in sizes:
            k = str(n)
            line = []
            for what, floor in (("read", "os.pread"), ("read-no-turns", "os.pread"), ("readinto", "os.preadv"),
                                ("read", "aiofiles"),
                                ("os.pread", "memcpy")):
                if floor not in res[name][0] or what not in res[name][0]:
                    continue
                for i, clock in ((0, "cpu"), (1, "wall")):
                    if floor == "aiofiles" and clock == "cpu":
                        continue
                    rs = [p[floor][k][i] / p[what][k][i] for p in res[name]]
                    line.append(f"{what}/{floor} {clock} {spread(rs, a.digits)}")
            print(f"  n={n >> 10:>5} KiB  " + "; ".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
