"""Against the io_uring peers: blockio's asyncio calls beside turbofile,
urio and aiofile (on caio's io_uring backend), with aiofiles as the
thread-pool reference; and ``Engine.read_files`` on a tree of small files.

Random 4 KiB reads of one file by 64 tasks, warm (the file in the page
cache) and cold (the file's pages evicted with ``posix_fadvise`` before each
contender's run, and every block read at most once per run), for a number
of seconds per contender; rounds in alternating order, each contender's
median and spread (lowest to highest) printed. Every contender's bytes are
first checked against ``os.pread`` on 256 random blocks. blockio runs with
both of its APIs: ``Engine.aread`` and a ``blockio.open`` file per task
(``seek`` + ``read``), as turbofile, urio and aiofiles run (one file object
per task: seek and read share its position). aiofile reads positionally
(``AIOFile.read(size, offset)``), one shared file. The ratios to the
targets are printed twice: of the medians, and round by round (both
contenders ran in the same round), median and spread. ``--contenders``
runs only the ones named (for example ``"blockio.open
seek+read,turbofile"``).

A contender that cannot be imported or does not work here is not run; the
output says exactly why (its import or setup error).

``--read-files``: a tree of small files (``--files``, 4-64 KiB each) read
whole, cold (each file evicted with ``posix_fadvise`` before each run; the
kernel's inode and directory caches are not dropped, which would take a
machine-wide ``drop_caches``), by ``Engine.read_files``, a
``ThreadPoolExecutor`` of 8 threads running ``Path.read_bytes``, and a plain
loop of ``Path.read_bytes``.

``--calls``: the cost of one call on a file object (``readline``,
``tell``, a small ``write``, ...) against turbofile, aiofiles and the
built-in ``open`` (see ``calls.py``).

``--large-reads``: sequential ``read(n)`` loops from 4 KiB to 8 MiB, 1,000
concurrent ``read()`` of 10 KiB files, and ``read()`` of a 512 MiB file,
against aiofiles and an ``os.pread`` loop (see ``large_reads.py``).

turbofile and urio need Python 3.12 or later: scripts/python-bench-peers
makes a venv on one and runs this file there.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import blockio
import calls
import large_reads
from bench import evict, make_file, warm  # the data file and cache control the main benchmark uses

BLOCK = 4096
TASKS = 64


# -- contenders: each an async factory of `read(task, offset) -> bytes`
# and a closer, made before the clock starts -----------------------------

Reader = Tuple[Callable[[int, int], Awaitable[bytes]], Callable[[], Awaitable[None]]]


async def c_blockio_aread(path: str) -> Reader:
    e = blockio.default_engine()
    f = open(path, "rb")

    async def close() -> None:
        f.close()

    return (lambda _, off: e.aread(f, offset=off, length=BLOCK)), close


async def per_task_files(opener: Callable[[], Awaitable[Any]]) -> Reader:
    files = [await opener() for _ in range(TASKS)]

    async def read(i: int, off: int) -> bytes:
        f = files[i]
        await f.seek(off)
        data: bytes = await f.read(BLOCK)
        return data

    async def close() -> None:
        for f in files:
            await f.close()

    return read, close


async def c_blockio_open(path: str) -> Reader:
    return await per_task_files(lambda: blockio.open(path, "rb"))


async def c_turbofile(path: str) -> Reader:
    import turbofile

    return await per_task_files(lambda: turbofile.open(path, "rb"))


async def c_urio(path: str) -> Reader:
    import urio

    urio.set_backend("uring")  # raises where io_uring is not available
    return await per_task_files(lambda: urio.open(path, "rb"))


async def c_aiofile_uring(path: str) -> Reader:
    import caio
    from aiofile import AIOFile

    if caio.linux_uring_asyncio is None:
        raise RuntimeError("caio has no linux_uring backend here (it failed to import)")
    ctx = caio.linux_uring_asyncio.AsyncioContext(max_requests=TASKS * 2)
    afp = AIOFile(path, "rb", context=ctx)
    await afp.open()

    async def read(_: int, off: int) -> bytes:
        data: bytes = await afp.read(BLOCK, off)
        return data

    async def close() -> None:
        await afp.close()
        ctx.close()

    return read, close


async def c_aiofiles(path: str) -> Reader:
    import aiofiles

    return await per_task_files(lambda: aiofiles.open(path, "rb"))


CONTENDERS: Dict[str, Callable[[str], Awaitable[Reader]]] = {
    "blockio aread": c_blockio_aread,
    "blockio.open seek+read": c_blockio_open,
    "turbofile": c_turbofile,
    "urio": c_urio,
    "aiofile (caio linux_uring)": c_aiofile_uring,
    "aiofiles": c_aiofiles,
}
PEERS = ["turbofile", "urio", "aiofile (caio linux_uring)"]


async def check(name: str, path: str, blocks: int) -> Optional[str]:
    """None if ``name`` reads the same bytes as ``os.pread``; else why it
    cannot be run here."""
    try:
        read, close = await CONTENDERS[name](path)
    except Exception as e:  # an import or setup failure, reported as is
        return f"{type(e).__name__}: {e}"
    try:
        rnd = random.Random(11)
        fd = os.open(path, os.O_RDONLY)
        try:
            for k in range(256):
                off = rnd.randrange(blocks) * BLOCK
                got = await read(k % TASKS, off)
                if got != os.pread(fd, BLOCK, off):
                    return f"read the wrong bytes at offset {off}"
        finally:
            os.close(fd)
    except Exception as e:
        return f"{type(e).__name__} while reading: {e}"
    finally:
        await close()
    return None


async def timed(name: str, path: str, blocks: int, seconds: float, cold: bool) -> float:
    read, close = await CONTENDERS[name](path)
    order = list(range(blocks))
    random.Random(blocks).shuffle(order)
    offs = iter([b * BLOCK for b in order])
    count = [0]
    try:
        if cold:
            evict(path)
        end = time.perf_counter() + seconds

        async def task(i: int) -> None:
            for off in offs:
                if time.perf_counter() >= end:
                    break
                await read(i, off)
                count[0] += 1

        start = time.perf_counter()
        await asyncio.gather(*(task(i) for i in range(TASKS)))
        return count[0] / (time.perf_counter() - start)
    finally:
        await close()


def spread(v: List[float]) -> str:
    return f"{statistics.median(v):>10.0f}  ({min(v):.0f}-{max(v):.0f})"


def paired(ours: List[float], theirs: List[float]) -> str:
    """The ratio of the two contenders' rates round by round (each round
    runs both, one after the other): median and spread."""
    r = [a / b for a, b in zip(ours, theirs)]
    return f"; per round {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})"


def contender_list(text: str) -> List[str]:
    """``--contenders``' names, each one of ``CONTENDERS``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in CONTENDERS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown contender {bad[0] if bad else text!r}; "
                                         f"choose from: {', '.join(CONTENDERS)}")
    return names


def peers(args: argparse.Namespace) -> None:
    path = args.file
    size = args.size_mib << 20
    make_file(path, size)
    blocks = size // BLOCK
    chosen = list(CONTENDERS) if args.contenders is None else args.contenders
    skipped: Dict[str, str] = {}
    for name in chosen:
        why = asyncio.run(check(name, path, blocks))
        if why is not None:
            skipped[name] = why
    names = [n for n in chosen if n not in skipped]
    print(f"Python {sys.version.split()[0]}, kernel {os.uname().release}, {TASKS} tasks, random {BLOCK} B "
          f"reads of a {args.size_mib} MiB file, {args.seconds} s per run, {args.rounds} rounds alternating")
    for name, why in skipped.items():
        print(f"  not run: {name}: {why}")
    for phase in args.phases.split(","):
        res: Dict[str, List[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                if phase == "warm":
                    warm(path)
                res[n].append(asyncio.run(timed(n, path, blocks, args.seconds, phase == "cold")))
        print(f"\n{phase}: reads/s, median (lowest-highest) of {args.rounds} rounds")
        for n in names:
            print(f"  {n:<28} {spread(res[n])}")
        ran_peers = [p for p in PEERS if p in res]
        if not ran_peers:
            continue
        best = max(ran_peers, key=lambda p: statistics.median(res[p]))
        for ours in ("blockio aread", "blockio.open seek+read"):
            if ours not in res:
                continue
            if phase == "warm" and "turbofile" in res:
                ratio = statistics.median(res[ours]) / statistics.median(res["turbofile"])
                print(f"  {ours} / turbofile: {ratio:.2f}{paired(res[ours], res['turbofile'])} (target >= 1.0)")
            if phase == "cold":
                ratio = statistics.median(res[ours]) / statistics.median(res[best])
                print(f"  {ours} / best peer ({best}): {ratio:.2f}{paired(res[ours], res[best])} (target >= 1.2)")


def make_tree(root: Path, n: int) -> List[Path]:
    rnd = random.Random(n)
    paths = [root / f"d{i % 100:02d}" / f"f{i:05d}.bin" for i in range(n)]
    marker = root / f".complete-{n}"
    if not marker.exists():
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(os.urandom(rnd.randrange(4096, 65537)))
        os.sync()
        marker.touch()
    return paths


def read_files_bench(args: argparse.Namespace) -> None:
    paths = make_tree(Path(args.tree), args.files)
    e = blockio.Engine()
    want = [p.read_bytes() for p in paths[:200]]
    assert e.read_files(paths[:200]) == want
    pool = ThreadPoolExecutor(8)

    def evict_all() -> None:
        for p in paths:
            evict(str(p))

    runs: Dict[str, Callable[[], List[bytes]]] = {
        "Engine.read_files": lambda: e.read_files(paths),
        "ThreadPoolExecutor(8) read_bytes": lambda: list(pool.map(Path.read_bytes, paths)),
        "loop of read_bytes": lambda: [p.read_bytes() for p in paths],
    }
    res: Dict[str, List[float]] = {k: [] for k in runs}
    total = sum(p.stat().st_size for p in paths)
    for r in range(args.rounds):
        order = list(runs.items())
        if r % 2:
            order.reverse()
        for name, fn in order:
            evict_all()
            start = time.perf_counter()
            out = fn()
            res[name].append(len(paths) / (time.perf_counter() - start))
            assert len(out) == len(paths) and sum(map(len, out)) == total
    print(f"\nread_files, cold: {len(paths)} files of 4-64 KiB ({total >> 20} MiB); files/s, median "
          f"(lowest-highest) of {args.rounds} rounds")
    for name in runs:
        print(f"  {name:<34} {spread(res[name])}")
    ratio = statistics.median(res["Engine.read_files"]) / statistics.median(res["ThreadPoolExecutor(8) read_bytes"])
    print(f"  Engine.read_files / thread pool: {ratio:.2f} (target >= 1.5)")
    pool.shutdown()
    e.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default="bench-data/py-peers-256m.dat")
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phases", default="warm,cold", choices=["warm,cold", "warm", "cold"],
                    help="the page cache states to run: warm, cold, or both (the default)")
    ap.add_argument("--contenders", type=contender_list, default=None,
                    help="comma-separated names of the contenders to run (default: all): "
                         + ", ".join(CONTENDERS))
    ap.add_argument("--read-files", action="store_true", help="also the small-files benchmark")
    ap.add_argument("--only-read-files", action="store_true", help="only the small-files benchmark")
    ap.add_argument("--calls", action="store_true", help="also the cost of one call on a file object (calls.py)")
    ap.add_argument("--only-calls", action="store_true", help="only the cost of one call on a file object")
    ap.add_argument("--call-seconds", type=float, default=0.5, help="seconds per call and contender (--calls)")
    ap.add_argument("--large-reads", action="store_true",
                    help="also sequential, whole-file and 512 MiB reads against aiofiles (large_reads.py)")
    ap.add_argument("--only-large-reads", action="store_true", help="only those")
    ap.add_argument("--tree", default="bench-data/py-tree")
    ap.add_argument("--files", type=int, default=10000)
    args = ap.parse_args()
    if args.size_mib < 8 or args.seconds <= 0 or args.call_seconds <= 0 or args.rounds < 1 or args.files < 1:
        ap.error("--size-mib must be at least 8, --seconds and --call-seconds above 0, --rounds and --files "
                 "at least 1")
    if not (args.only_read_files or args.only_calls or args.only_large_reads):
        peers(args)
    if args.large_reads or args.only_large_reads:
        large_reads.run(args.file, args.size_mib, args.rounds)
    if args.calls or args.only_calls:
        make_file(args.file, args.size_mib << 20)
        warm(args.file)
        calls.run(args.file, "bench-data/py-lines.txt", "bench-data/py-calls-scratch.bin", args.rounds,
                  args.call_seconds)
    if args.read_files or args.only_read_files:
        read_files_bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
