"""Whole-file and sequential reads: ``blockio.open`` beside aiofiles (and,
for the sequential loops, a plain ``os.pread`` loop, the floor), in
alternating rounds, each contender's median and spread (lowest to highest)
printed, and the ratios round by round.

``--sequential``: ``while chunk := await f.read(n)`` over a cached file
(256 MiB by default), n from 4 KiB to 8 MiB; MiB/s, and the event loop's
longest gap while reading (a timer due every millisecond records how
late the loop ran it). With ``--cpu``, each loop's time is its thread's
CPU time (``time.thread_time``, the system calls' time in the kernel
included) instead of the wall clock's: on a loaded machine the wall clock
counts the time other processes ran, which spreads the rates far wider
than any difference between the contenders. aiofiles is left out then:
its reads run on a thread pool's threads, whose time the loop's thread
does not count (blockio's reads of cached bytes run on the loop's thread).
With ``--turns``, two more contenders split off what the turns of the
event loop cost: blockio's loop with them skipped, and the ``os.pread``
loop with a bare turn where blockio's loop takes one.

``--whole``: 1,000 concurrent ``async with open(p, "rb") as f: await
f.read()`` of 10 KiB cached files, each round in a new process: the time,
and the growth of the process's RSS at its peak over the run (the peak
started again from the RSS before it, with ``/proc/self/clear_refs``).

``--big``: ``await f.read()`` of a cached 512 MiB file: the time, and the
event loop's longest gap while reading.

``--past-inline``: reads past ``INLINE_MAX`` (8 MiB), which go to the
engine: ``while await f.read(n)`` over the cached ``--file`` with n of 16,
64 and 256 MiB, and one ``await f.read()`` of it, each run in a new
process: the time, the loop's longest gap and the growth of the peak RSS
over the run (a read that held a second buffer of its size shows it).

``--text``: whole-file line and text reads of a cached file of 100-byte
lines (``--size-mib``, 256 by default), in UTF-8 and in a second codec
(``--codec``, Latin-1 by default), each run in a new process: binary
``readlines()``; text ``read()``, ``while await f.read(64 MiB)`` and
``readlines()``; and ``async for line in f`` over the first
``--iter-mib`` of it (4 by default: aiofiles hands each line to a thread,
about 0.1 ms a line). The time and the loop's longest gap, blockio over
aiofiles.

    python large_reads.py [--sequential [--cpu]] [--whole] [--big] [--past-inline] [--text] [--rounds N]

Run by ``peers.py --large-reads`` (``scripts/python-bench-peers
--only-large-reads``: all three).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import blockio
from blockio._blockio import TURN_BUDGET, TURN_UNIT, set_turn_count

from bench import make_file, warm

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 8 << 20]


def opener(name: str) -> Callable[..., Any]:
    if name in ("blockio.open", NO_TURNS):
        return blockio.open
    import aiofiles

    open_: Callable[..., Any] = aiofiles.open
    return open_


class Gaps:
    """The event loop's longest gap: a timer callback due every
    millisecond, which records how late the loop ran it (the time the
    loop spent in one step of some task, or in its own work)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(0.001, self._tick, self._loop.time() + 0.001)

    def _tick(self, due: float) -> None:
        self.longest = max(self.longest, self._loop.time() - due)
        self._timer = self._loop.call_later(0.001, self._tick, self._loop.time() + 0.001)

    async def stop(self) -> float:
        """The longest gap, once the timer has run after the work (a loop
        held all along shows as one gap)."""
        await asyncio.sleep(0.003)
        self._timer.cancel()
        return self.longest


#: The contenders ``--turns`` adds: blockio's loop with every turn of the
#: event loop skipped (``set_turn_count(0)`` before each read), and the
#: ``os.pread`` loop with a bare turn (``asyncio.sleep(0)``) after every
#: ``TURN_BYTES`` read, where blockio's loop took its turns when they came
#: by the count alone (``set_turn_time(0)``; by default they come once
#: ``TURN_TIME_NS`` has passed since the last).
TURN_BYTES = TURN_BUDGET * TURN_UNIT
NO_TURNS = "blockio, no turns"
PREAD_TURNS = "os.pread + turns"


async def read_loop(name: str, path: str, n: int, clock: Callable[[], float] = time.perf_counter
                    ) -> Tuple[float, float, int]:
    """Seconds by ``clock``, the loop's longest gap and the bytes read by
    ``name``'s loop of ``read(n)`` over ``path``."""
    got = 0
    if name in ("os.pread", PREAD_TURNS):
        every = TURN_BYTES if name == PREAD_TURNS else 0
        fd = os.open(path, os.O_RDONLY)
        gaps = Gaps()
        await asyncio.sleep(0)
        start = clock()
        due = every
        while chunk := os.pread(fd, n, got):
            got += len(chunk)
            if every and got >= due:
                due += every
                await asyncio.sleep(0)
        took = clock() - start
        os.close(fd)
        return took, await gaps.stop(), got
    async with opener(name)(path, "rb") as f:
        gaps = Gaps()
        await asyncio.sleep(0)
        start = clock()
        if name == NO_TURNS:
            while True:
                set_turn_count(0)
                chunk = await f.read(n)
                if not chunk:
                    break
                got += len(chunk)
        else:
            while chunk := await f.read(n):
                got += len(chunk)
        took = clock() - start
    return took, await gaps.stop(), got


def spread(v: List[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(statistics.median(v)):>9}  ({fmt.format(min(v))}-{fmt.format(max(v))})"


def ratios(a: List[float], b: List[float]) -> str:
    r = [x / y for x, y in zip(a, b)]
    return f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})"


def sequential(path: str, size_mib: int, rounds: int, cpu: bool = False, turns: bool = False) -> None:
    make_file(path, size_mib << 20)
    names = ["blockio.open", "os.pread"] if cpu else ["blockio.open", "aiofiles", "os.pread"]
    if turns:
        names += [NO_TURNS, PREAD_TURNS]
    clock = time.thread_time if cpu else time.perf_counter
    per = "MiB per CPU second of the loop's thread" if cpu else "MiB/s"
    unit = "MiB/CPU s" if cpu else "MiB/s"
    print(f"\nsequential read(n) loops over a cached {size_mib} MiB file: {per} and the loop's longest gap (ms), "
          f"median (lowest-highest) of {rounds} rounds alternating")
    for n in SIZES:
        rate: Dict[str, List[float]] = {k: [] for k in names}
        gap: Dict[str, List[float]] = {k: [] for k in names}
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                warm(path)
                took, longest, got = asyncio.run(read_loop(name, path, n, clock))
                assert got == size_mib << 20, (name, got)
                rate[name].append(size_mib / took)
                gap[name].append(longest * 1e3)
        print(f"  read({n >> 10} KiB)")
        for name in names:
            print(f"    {name:<14} {spread(rate[name])} {unit}   gap {spread(gap[name], '{:.2f}')} ms")
        over = "" if cpu else f"/ aiofiles {ratios(rate['blockio.open'], rate['aiofiles'])}, "
        print(f"    blockio.open {over}/ os.pread {ratios(rate['blockio.open'], rate['os.pread'])} (targets >= 1.0)")
        if turns:
            print(f"    {NO_TURNS} / os.pread {ratios(rate[NO_TURNS], rate['os.pread'])}; "
                  f"{PREAD_TURNS} / os.pread {ratios(rate[PREAD_TURNS], rate['os.pread'])}")


def make_small_files(root: Path, count: int, size: int) -> List[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = [str(root / f"f{i:05d}") for i in range(count)]
    for p in paths:
        if not os.path.exists(p) or os.path.getsize(p) != size:
            with open(p, "wb") as f:
                f.write(os.urandom(size))
    return paths


def rss(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (the peak) of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    raise RuntimeError(f"no {field} in /proc/self/status")


def start_peak() -> int:
    """Starts the peak RSS again from the RSS now (``clear_refs`` 5); the
    RSS now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss("VmRSS")


async def whole_files(name: str, paths: List[str]) -> int:
    open_ = opener(name)

    async def one(p: str) -> int:
        async with open_(p, "rb") as f:
            return len(await f.read())

    return sum(await asyncio.gather(*(one(p) for p in paths)))


async def big_read(name: str, path: str) -> Tuple[int, float]:
    async with opener(name)(path, "rb") as f:
        gaps = Gaps()
        await asyncio.sleep(0.002)
        data = await f.read()
        await asyncio.sleep(0.002)
        return len(data), await gaps.stop()


async def read_in_reads(name: str, path: str, n: int) -> Tuple[int, float]:
    """The bytes read by ``read(n)`` calls to the end of ``path`` (one
    ``read()`` when ``n`` is 0), each call's bytes dropped before the
    next, and the loop's longest gap."""
    async with opener(name)(path, "rb") as f:
        gaps = Gaps()
        await asyncio.sleep(0.002)
        got = 0
        while True:
            k = len(await (f.read(n) if n else f.read()))
            got += k
            if not k or not n:
                break
        await asyncio.sleep(0.002)
        return got, await gaps.stop()


#: ``--text``'s calls: name, the file's mode, and what is measured.
TEXT_OPS = ["binary readlines()", "read()", "read(64 MiB) loop", "readlines()", "async for line"]


def make_text_file(path: str, size: int, codec: str) -> None:
    """A file of about ``size`` bytes of numbered 100-character lines,
    with a few characters past ASCII, in ``codec``."""
    if os.path.exists(path) and os.path.getsize(path) >= size:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz" * 4
    block = "".join(f"{i:07d} {letters[i % 26:i % 26 + 86]} é ü\n" for i in range(4096)).encode(codec)
    with open(path + ".partial", "wb") as f:
        for _ in range(-(-size // len(block))):
            f.write(block)
    os.rename(path + ".partial", path)


async def text_op(name: str, op: str, path: str, codec: str, most: int) -> Tuple[int, float, float]:
    """``op`` (one of :data:`TEXT_OPS`) over ``path`` (``async for``: its
    first ``most`` characters): how much it returned, the seconds and the
    loop's longest gap."""
    binary = op.startswith("binary")
    async with opener(name)(path, "rb" if binary else "r", **({} if binary else {"encoding": codec})) as f:
        await f.read(0)
        gaps = Gaps()
        await asyncio.sleep(0.002)
        start = time.perf_counter()
        got = 0
        lines: List[Any] = []
        if op in ("binary readlines()", "readlines()"):
            lines = await f.readlines()
        elif op == "read()":
            got = len(await f.read())
        elif op == "read(64 MiB) loop":
            while chunk := await f.read(64 << 20):
                got += len(chunk)
        else:
            async for line in f:
                got += len(line)
                if got >= most:
                    break
        took = time.perf_counter() - start
        longest = await gaps.stop()  # (before the lines are freed, which is no part of the call)
        got += sum(map(len, lines))  # (after the gap's end: counting 2.6 M lines takes ~80 ms)
        return got, took, longest


def child(args: argparse.Namespace) -> None:
    """One measured run, in this process: prints seconds, the peak RSS's
    growth over the run and (``--big``) the loop's longest gap."""
    if args.child == "text":
        warm(args.file)
        got, took, longest = asyncio.run(text_op(args.name, args.op, args.file, args.codec, args.iter_mib << 20))
        print(took, 0, longest)
        return
    if args.child == "whole":
        paths = make_small_files(Path(args.tree), args.files, args.file_kib << 10)
        for p in paths:
            with open(p, "rb") as f:
                f.read()
        asyncio.run(whole_files(args.name, paths[:8]))  # (imports and engines made before the count)
        before = start_peak()
        start = time.perf_counter()
        got = asyncio.run(whole_files(args.name, paths))
        took = time.perf_counter() - start
        assert got == args.files * (args.file_kib << 10), got
        print(took, rss("VmHWM") - before, 0.0)
    else:
        path = args.big_file if args.child == "big" else args.file
        warm(path)
        before = start_peak()
        start = time.perf_counter()
        if args.child == "big":
            got, longest = asyncio.run(big_read(args.name, path))
        else:
            got, longest = asyncio.run(read_in_reads(args.name, path, args.n))
        took = time.perf_counter() - start
        assert got == os.path.getsize(path)
        print(took, rss("VmHWM") - before, longest)


def in_children(kind: str, rounds: int, extra: List[str]) -> Dict[str, List[Tuple[float, float, float]]]:
    names = ["blockio.open", "aiofiles"]
    out: Dict[str, List[Tuple[float, float, float]]] = {k: [] for k in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            res = subprocess.run([sys.executable, __file__, "--child", kind, "--name", name] + extra,
                                 check=True, capture_output=True, text=True)
            took, rss, gap = map(float, res.stdout.split())
            out[name].append((took, rss, gap))
    return out


def whole(args: argparse.Namespace) -> None:
    extra = ["--tree", args.tree, "--files", str(args.files), "--file-kib", str(args.file_kib)]
    make_small_files(Path(args.tree), args.files, args.file_kib << 10)
    res = in_children("whole", args.rounds, extra)
    print(f"\n{args.files} concurrent read() of {args.file_kib} KiB cached files, a new process per run: ms and "
          f"peak RSS growth (MiB), median (lowest-highest) of {args.rounds} rounds alternating")
    for name, runs in res.items():
        print(f"  {name:<14} {spread([t * 1e3 for t, _, _ in runs])} ms   "
              f"RSS +{spread([m / 2**20 for _, m, _ in runs], '{:.1f}')} MiB")
    b, a = res["blockio.open"], res["aiofiles"]
    print(f"  time blockio.open / aiofiles {ratios([t for t, _, _ in b], [t for t, _, _ in a])} (target <= 1.0); "
          f"RSS growth {ratios([max(m, 1.0) for _, m, _ in b], [max(m, 1.0) for _, m, _ in a])} (target <= 2.0)")


def big(args: argparse.Namespace) -> None:
    make_file(args.big_file, 512 << 20)
    res = in_children("big", args.rounds, ["--big-file", args.big_file])
    print(f"\nawait f.read() of a cached 512 MiB file, a new process per run: ms, the loop's longest gap (ms), "
          f"median (lowest-highest) of {args.rounds} rounds alternating")
    for name, runs in res.items():
        print(f"  {name:<14} {spread([t * 1e3 for t, _, _ in runs])} ms   "
              f"gap {spread([g * 1e3 for _, _, g in runs], '{:.1f}')} ms")
    b, a = res["blockio.open"], res["aiofiles"]
    print(f"  gap blockio.open / aiofiles {ratios([g for _, _, g in b], [g for _, _, g in a])} (target <= 2.0)")


def past_inline(args: argparse.Namespace) -> None:
    make_file(args.file, args.size_mib << 20)
    print(f"\nreads past INLINE_MAX over a cached {args.size_mib} MiB file, a new process per run: ms, the loop's "
          f"longest gap (ms) and peak RSS growth (MiB), median (lowest-highest) of {args.rounds} rounds alternating")
    for n in [16, 64, 256, 0]:
        res = in_children("loop", args.rounds, ["--file", args.file, "--n", str(n << 20)])
        print(f"  {'read()' if n == 0 else f'read({n} MiB) loop'}")
        for name, runs in res.items():
            print(f"    {name:<14} {spread([t * 1e3 for t, _, _ in runs])} ms   "
                  f"gap {spread([g * 1e3 for _, _, g in runs], '{:.1f}')} ms   "
                  f"RSS +{spread([m / 2**20 for _, m, _ in runs])} MiB")
        b, a = res["blockio.open"], res["aiofiles"]
        print(f"    blockio.open / aiofiles: gap {ratios([g for _, _, g in b], [g for _, _, g in a])} (target <= 2.0), "
              f"RSS growth {ratios([m for _, m, _ in b], [m for _, m, _ in a])}")


def text(args: argparse.Namespace) -> None:
    print(f"\nwhole-file line and text reads of a cached {args.size_mib} MiB file of 100-character lines (async for: "
          f"its first {args.iter_mib} MiB), a new process per run: ms and the loop's longest gap (ms), median "
          f"(lowest-highest) of {args.rounds} rounds alternating")
    for codec in ["utf-8", args.codec]:
        path = os.path.join(os.path.dirname(args.file) or ".", f"py-text-{args.size_mib}m-{codec}.txt")
        make_text_file(path, args.size_mib << 20, codec)
        for op in TEXT_OPS:
            if op.startswith("binary") and codec != "utf-8":
                continue
            res = in_children("text", args.rounds, ["--file", path, "--op", op, "--codec", codec,
                                                    "--iter-mib", str(args.iter_mib)])
            print(f"  {op}{'' if op.startswith('binary') else ', ' + codec}")
            for name, runs in res.items():
                print(f"    {name:<14} {spread([t * 1e3 for t, _, _ in runs])} ms   "
                      f"gap {spread([g * 1e3 for _, _, g in runs], '{:.1f}')} ms")
            b, a = res["blockio.open"], res["aiofiles"]
            print(f"    blockio.open / aiofiles: gap {ratios([g for _, _, g in b], [g for _, _, g in a])} "
                  f"(target <= 2.0), time {ratios([t for t, _, _ in b], [t for t, _, _ in a])} (target <= 1.0)")


def run(path: str, size_mib: int, rounds: int) -> None:
    """All three, with the default files beside ``path`` (peers.py's)."""
    here = os.path.dirname(path) or "."
    args = argparse.Namespace(rounds=rounds, tree=os.path.join(here, "py-small-10k"), files=1000, file_kib=10,
                              big_file=os.path.join(here, "py-512m.dat"))
    sequential(path, size_mib, rounds)
    whole(args)
    big(args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequential", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="time the sequential loops by their thread's CPU time")
    ap.add_argument("--turns", action="store_true",
                    help="with --sequential: also blockio's loop with its turns of the event loop skipped, and "
                         "the os.pread loop with a bare turn per TURN_BYTES read")
    ap.add_argument("--whole", action="store_true")
    ap.add_argument("--big", action="store_true")
    ap.add_argument("--past-inline", action="store_true")
    ap.add_argument("--text", action="store_true")
    ap.add_argument("--codec", default="latin-1", help="with --text: the codec besides UTF-8")
    ap.add_argument("--iter-mib", type=int, default=4, help="with --text: the MiB async for reads")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--file", default="bench-data/py-peers-256m.dat")
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--big-file", default="bench-data/py-512m.dat")
    ap.add_argument("--tree", default="bench-data/py-small-10k")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--file-kib", type=int, default=10)
    ap.add_argument("--child", choices=["whole", "big", "loop", "text"], help=argparse.SUPPRESS)
    ap.add_argument("--op", choices=TEXT_OPS, help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.sequential:
        sequential(args.file, args.size_mib, args.rounds, args.cpu, args.turns)
    if args.whole:
        whole(args)
    if args.big:
        big(args)
    if args.past_inline:
        past_inline(args)
    if args.text:
        text(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
