"""The cost of one call on a file object, for the calls programs make most:
``readline`` (binary and text), ``tell``, a 100-byte ``write``, a
100-byte ``read`` in sequence, and a ``seek`` + 4 KiB ``read`` of a cached
block. Contenders: ``blockio.open``, turbofile, aiofiles, and the built-in
``open`` called directly (no ``await``, no event loop: the floor).

Each contender makes each call in a loop for ``--call-seconds`` on one
task (nothing else runs on the loop), in rounds of alternating order;
printed: nanoseconds per call, median (lowest-highest) of the rounds, and
for each peer the ratio of its median to blockio's (above 1: blockio is
faster). A contender that cannot be imported here is not run; the output
says why. Run by ``peers.py --calls`` (``scripts/python-bench-peers
--calls``), which makes the 256 MiB file the last call reads; the lines
file (16 MiB of 80-byte lines) is made here.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional

BLOCK = 4096
#: Calls between two looks at the clock.
BATCH = 64

CALLS = ["readline, binary", "readline, text", "tell", "write 100 B", "read 100 B in sequence",
         "seek + read 4 KiB, cached"]


def make_lines(path: str) -> None:
    """16 MiB of numbered 80-byte lines."""
    if os.path.exists(path) and os.path.getsize(path) == 200_000 * 80:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".partial", "wb") as f:
        for i in range(200_000):
            f.write(b"%08d a line of a log file, eighty bytes long with its newline...........\n" % i)
    os.rename(path + ".partial", path)


Opener = Callable[[str, str], Awaitable[Any]]


def openers() -> Dict[str, Optional[Opener]]:
    """The asynchronous contenders' ``open``, or None where it cannot be
    imported (the built-in is measured apart: see `sync_call`)."""
    import blockio

    out: Dict[str, Optional[Opener]] = {"blockio.open": lambda p, m: blockio.open(p, m)}
    for name in ("turbofile", "aiofiles"):
        try:
            mod = __import__(name)
        except ImportError:
            out[name] = None
        else:
            out[name] = (lambda mod: lambda p, m: mod.open(p, m))(mod)
    return out


async def async_call(opener: Opener, call: str, lines: str, data: str, scratch: str, seconds: float) -> float:
    """Nanoseconds per ``call`` on a file ``opener`` opened."""
    n = 0
    if call.startswith("readline"):
        f = await opener(lines, "r" if call.endswith("text") else "rb")
    elif call == "write 100 B":
        f = await opener(scratch, "wb")
    elif call.startswith("seek"):
        f = await opener(data, "rb")
    else:
        f = await opener(lines, "rb")
    blocks = os.path.getsize(data) // BLOCK
    offs = [random.Random(5).randrange(blocks) * BLOCK for _ in range(BATCH)]
    record = b"r" * 99 + b"\n"
    try:
        end = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            if call.startswith("readline"):
                for _ in range(BATCH):
                    if not await f.readline():
                        await f.seek(0)
            elif call == "tell":
                for _ in range(BATCH):
                    await f.tell()
            elif call == "write 100 B":
                for _ in range(BATCH):
                    await f.write(record)
            elif call.startswith("read 100"):
                for _ in range(BATCH):
                    if not await f.read(100):
                        await f.seek(0)
            else:
                for off in offs:
                    await f.seek(off)
                    await f.read(BLOCK)
            n += BATCH
        took = time.perf_counter() - start
    finally:
        await f.close()
    return took / n * 1e9


def sync_call(call: str, lines: str, data: str, scratch: str, seconds: float) -> float:
    """Nanoseconds per ``call`` on a built-in file, called directly."""
    n = 0
    if call.startswith("readline"):
        f: Any = open(lines, "r" if call.endswith("text") else "rb")
    elif call == "write 100 B":
        f = open(scratch, "wb")
    elif call.startswith("seek"):
        f = open(data, "rb")
    else:
        f = open(lines, "rb")
    blocks = os.path.getsize(data) // BLOCK
    offs = [random.Random(5).randrange(blocks) * BLOCK for _ in range(BATCH)]
    record = b"r" * 99 + b"\n"
    with f:
        end = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            if call.startswith("readline"):
                for _ in range(BATCH):
                    if not f.readline():
                        f.seek(0)
            elif call == "tell":
                for _ in range(BATCH):
                    f.tell()
            elif call == "write 100 B":
                for _ in range(BATCH):
                    f.write(record)
            elif call.startswith("read 100"):
                for _ in range(BATCH):
                    if not f.read(100):
                        f.seek(0)
            else:
                for off in offs:
                    f.seek(off)
                    f.read(BLOCK)
            n += BATCH
        took = time.perf_counter() - start
    return took / n * 1e9


def run(data: str, lines: str, scratch: str, rounds: int, seconds: float) -> None:
    """Prints every contender's cost per call, and each peer's ratio to
    blockio's."""
    make_lines(lines)
    ops = openers()
    for name, op in ops.items():
        if op is None:
            print(f"  not run: {name}: it cannot be imported here")
    names = [n for n, op in ops.items() if op is not None] + ["built-in open"]
    print(f"\nper call: ns, one task, {seconds} s per call and contender, median (lowest-highest) of {rounds} rounds")
    try:
        for call in CALLS:
            res: Dict[str, List[float]] = {n: [] for n in names}
            for r in range(rounds):
                for n in (names if r % 2 == 0 else names[::-1]):
                    if n == "built-in open":
                        res[n].append(sync_call(call, lines, data, scratch, seconds))
                    else:
                        op = ops[n]
                        assert op is not None
                        res[n].append(asyncio.run(async_call(op, call, lines, data, scratch, seconds)))
            ours = statistics.median(res["blockio.open"])
            cells = []
            for n in names:
                v = res[n]
                ratio = "" if n == "blockio.open" else f" = {statistics.median(v) / ours:.2f}x"
                cells.append(f"{n} {statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f}){ratio}")
            print(f"  {call}: " + "; ".join(cells))
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
