"""The Python package's benchmark: random 4 KiB reads over a 1 GiB file it
creates, 64 in flight, every figure a ratio to a baseline measured in the
same run (median of --rounds alternating rounds).

* ``read_batch`` (batches of 64, O_DIRECT) against the Rust engine's own
  batch loop on the same descriptor (target >= 0.9);
* the asyncio API, 64 tasks each awaiting ``aread``, against aiofiles
  (target >= 10x) and aiofile/caio (target >= 2x) at the same concurrency.
  aiofiles and aiofile cannot read O_DIRECT (they read into unaligned
  buffers of their own), so that comparison runs on the *cold* buffered
  file (evicted with posix_fadvise before every run, and every block read
  at most once per run) for all three; the O_DIRECT asyncio figure is
  printed beside it;
* warm cached reads: ``read_batch`` of 64 against ``os.pread`` in a loop
  (the target, >= 1.0), against a list of 64 ``os.pread`` results (the same
  output as ``read_batch``), and single-read ``read_batch`` calls against
  the loop.

Run it with scripts/python-bench (which builds and installs the package).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from typing import Any, Awaitable, Callable, Iterator

import blockio
# The Rust engine's own batch loop, a benchmark baseline kept out of the
# package's public API.
from blockio._blockio import bench_engine

BLOCK = 4096
TASKS = 64


def make_file(path: str, size: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    chunk = os.urandom(1 << 20)
    with open(path + ".partial", "wb") as f:
        for i in range(size >> 20):
            f.write(chunk[i % 4096:] + chunk[: i % 4096])
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".partial", path)


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def offsets(rnd: random.Random, blocks: int, n: int) -> list:
    return [rnd.randrange(blocks) * BLOCK for _ in range(n)]


def sync_read_batch(engine: blockio.Engine, fd: int, blocks: int, seconds: float, batch: int) -> float:
    # Offsets made before the clock starts: the loop measures read_batch,
    # not Python's random number generator.
    rnd = random.Random(1)
    pool = [offsets(rnd, blocks, batch) for _ in range(max(4096 // batch, 64))]
    done = 0
    i = 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        res = engine.read_batch(fd, offsets=pool[i % len(pool)], length=BLOCK)
        i += 1
        done += len(res)
    return done / (time.perf_counter() - start)


def pread_loop(fd: int, blocks: int, seconds: float, keep: bool = False) -> float:
    """``os.pread`` in a loop, 64 offsets at a time. With ``keep`` the 64
    results are kept in a list, as ``read_batch`` returns them; without, each
    is dropped at once (so its memory is reused, hot in the CPU cache)."""
    rnd = random.Random(2)
    pool = [offsets(rnd, blocks, 64) for _ in range(64)]
    pread = os.pread
    done = 0
    i = 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        if keep:
            _ = [pread(fd, BLOCK, off) for off in pool[i % len(pool)]]
        else:
            for off in pool[i % len(pool)]:
                pread(fd, BLOCK, off)
        i += 1
        done += 64
    return done / (time.perf_counter() - start)


def shuffled(blocks: int) -> Iterator[int]:
    """Every block's offset once, in random order, shared by a run's tasks.

    A cold run must not read a block twice: the second read would hit the
    page cache the first one filled, a gain that grows with the reads done,
    so the faster contender would gain the most (at 90k reads a second,
    about 8 % of a 1 GiB file's blocks repeat within one second)."""
    order = list(range(blocks))
    random.Random(blocks).shuffle(order)
    return iter([b * BLOCK for b in order])


async def run_tasks(blocks: int, seconds: float, read: Callable[[int, int], Awaitable[Any]]) -> float:
    """IOPS of TASKS tasks calling ``read(task, offset)`` for ``seconds``,
    each offset taken once from one shared shuffled order."""
    offs = shuffled(blocks)
    end = time.perf_counter() + seconds
    count = [0]

    async def task(i: int) -> None:
        for off in offs:
            if time.perf_counter() >= end:
                break
            await read(i, off)
            count[0] += 1

    start = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(TASKS)))
    return count[0] / (time.perf_counter() - start)


async def tasks_blockio(engine: blockio.Engine, fd: int, blocks: int, seconds: float) -> float:
    return await run_tasks(blocks, seconds, lambda _, off: engine.aread(fd, offset=off, length=BLOCK))


async def tasks_aiofiles(path: str, blocks: int, seconds: float) -> float:
    import aiofiles

    # One file per task (seek and read share its position), opened before
    # the clock starts, as aiofile's is.
    files = [await aiofiles.open(path, "rb") for _ in range(TASKS)]

    async def read(i: int, off: int) -> None:
        await files[i].seek(off)
        await files[i].read(BLOCK)

    try:
        return await run_tasks(blocks, seconds, read)
    finally:
        for f in files:
            await f.close()


async def tasks_aiofile(path: str, blocks: int, seconds: float) -> float:
    from aiofile import AIOFile

    async with AIOFile(path, "rb") as afp:
        return await run_tasks(blocks, seconds, lambda _, off: afp.read(BLOCK, off))


def parse_args() -> argparse.Namespace:
    """The command line's options, checked."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default="bench-data/py-bench-1g.dat")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.size_mib < 8 or args.seconds <= 0 or args.rounds < 1:
        ap.error("--size-mib must be at least 8, --seconds above 0, --rounds at least 1")
    return args


def make_plans(args: argparse.Namespace, engine: blockio.Engine, direct: int, buffered: int,
               size: int) -> tuple[dict, dict]:
    """The runs on a cold (or O_DIRECT) file and the runs on a warm one, by name."""
    blocks = size // BLOCK

    def cold(fn):
        def run():
            evict(args.file)
            return fn()
        return run

    plans = {
        # O_DIRECT
        "rust_engine_direct": lambda: bench_engine(direct, size, BLOCK, TASKS, args.seconds),
        "read_batch_direct": lambda: sync_read_batch(engine, direct, blocks, args.seconds, TASKS),
        "asyncio_direct": lambda: asyncio.run(tasks_blockio(engine, direct, blocks, args.seconds)),
        # cold, buffered
        "asyncio_cold": cold(lambda: asyncio.run(tasks_blockio(engine, buffered, blocks, args.seconds))),
        "aiofiles_cold": cold(lambda: asyncio.run(tasks_aiofiles(args.file, blocks, args.seconds))),
        "aiofile_cold": cold(lambda: asyncio.run(tasks_aiofile(args.file, blocks, args.seconds))),
    }
    warm_plans = {
        "pread_warm": lambda: pread_loop(buffered, blocks, args.seconds),
        "pread_keep_warm": lambda: pread_loop(buffered, blocks, args.seconds, keep=True),
        "read_batch64_warm": lambda: sync_read_batch(engine, buffered, blocks, args.seconds, 64),
        "read_batch1_warm": lambda: sync_read_batch(engine, buffered, blocks, args.seconds, 1),
    }
    return plans, warm_plans


def run_rounds(group: dict, rounds: int, results: dict, say: Callable[..., None]) -> None:
    """Every plan once per round, in reverse order every other round."""
    for r in range(rounds):
        order = list(group.items())
        if r % 2:
            order.reverse()
        for name, fn in order:
            say(f"round {r + 1}/{rounds}: {name}")
            results[name].append(fn())


def measure(args: argparse.Namespace, say: Callable[..., None]) -> dict:
    """Every run's IOPS per round, by name: the cold runs, then the warm ones."""
    size = args.size_mib << 20
    make_file(args.file, size)
    engine = blockio.Engine(queue_depth=256)
    direct = os.open(args.file, os.O_RDONLY | os.O_DIRECT)
    buffered = os.open(args.file, os.O_RDONLY)
    plans, warm_plans = make_plans(args, engine, direct, buffered, size)
    results: dict = {k: [] for k in list(plans) + list(warm_plans)}
    run_rounds(plans, args.rounds, results, say)
    warm(args.file)
    run_rounds(warm_plans, args.rounds, results, say)
    os.close(direct)
    os.close(buffered)
    engine.close()
    return results


def ratios_of(med: dict) -> list:
    """The compared pairs: what, the ratio of their medians, the target (or None)."""
    def ratio(a: str, b: str) -> float:
        return med[a] / med[b]

    return [
        ("read_batch / Rust engine (O_DIRECT)", ratio("read_batch_direct", "rust_engine_direct"), 0.9),
        ("asyncio / aiofiles (cold, 64 tasks)", ratio("asyncio_cold", "aiofiles_cold"), 10.0),
        ("asyncio / aiofile-caio (cold, 64 tasks)", ratio("asyncio_cold", "aiofile_cold"), 2.0),
        ("asyncio O_DIRECT / aiofiles cold", ratio("asyncio_direct", "aiofiles_cold"), None),
        ("read_batch of 64 / os.pread loop (warm)", ratio("read_batch64_warm", "pread_warm"), 1.0),
        ("read_batch of 64 / os.pread list of 64 (warm)", ratio("read_batch64_warm", "pread_keep_warm"), None),
        ("read_batch of 1 / os.pread loop (warm)", ratio("read_batch1_warm", "pread_warm"), None),
    ]


def print_table(med: dict, ratios: list) -> None:
    """The medians and ratios as a table on stdout."""
    print(f"{'run':<24} {'IOPS (median)':>14}")
    for k, v in med.items():
        print(f"{k:<24} {v:>14.0f}")
    print("\nratios from this run (truncated to 2 decimals, never rounded up):")
    for w, r, t in ratios:
        tgt = f"target >= {t}" if t else ""
        print(f"  {w:<46} {int(r * 100) / 100:>7.2f}  {tgt}")


def main() -> int:
    args = parse_args()
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr))
    results = measure(args, say)
    med = {k: statistics.median(v) for k, v in results.items()}
    ratios = ratios_of(med)
    if args.json:
        print(json.dumps({
            "backend": blockio.Engine().backend,
            "iops": med,
            "ratios": [{"what": w, "ratio": r, "target": t} for w, r, t in ratios],
            "config": vars(args),
        }, indent=2))
    else:
        print_table(med, ratios)
    return 0

if __name__ == "__main__":
    sys.exit(main())
