"""The event loop's longest gap beside a sequential ``read(n)`` loop over a
cached file, with blockio's turns by time (the default), by the count
alone (``set_turn_time(0)``, the turns before they went by time) and with
aiofiles, in alternating rounds in one process: per round the longest gap
of each (a timer due every millisecond records how late the loop ran it,
``large_reads.Gaps``) and the CPU time of the loop's thread per 256 MiB;
then each one's median (lowest-highest) and the per-round ratios of the
longest gap over aiofiles'.

    python turn_gaps.py --file F [--sizes 16384,1048576,8388608] [--rounds 7] [--turn-ns NS]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Dict, List, Tuple

import aiofiles

import blockio
from blockio._blockio import TURN_TIME_NS, set_turn_time

from large_reads import Gaps

MODES = ["by time", "by count", "aiofiles"]

#: The time between turns "by time" takes (``--turn-ns``; ``TURN_TIME_NS``
#: by default).
TIME_NS = TURN_TIME_NS


async def one(mode: str, path: str, n: int) -> Tuple[float, float]:
    """The longest gap (ms) and the loop thread's CPU seconds of one loop."""
    set_turn_time(0 if mode == "by count" else TIME_NS)
    opener = aiofiles.open if mode == "aiofiles" else blockio.open
    async with opener(path, "rb") as f:
        gaps = Gaps()
        await asyncio.sleep(0)
        start = time.thread_time()
        while await f.read(n):
            pass
        took = time.thread_time() - start
        return await gaps.stop() * 1000, took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--sizes", default="16384,1048576,8388608")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--turn-ns", type=int, default=TURN_TIME_NS)
    args = ap.parse_args()
    global TIME_NS
    TIME_NS = args.turn_ns
    for n in [int(s) for s in args.sizes.split(",")]:
        gap: Dict[str, List[float]] = {m: [] for m in MODES}
        cpu: Dict[str, List[float]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            for mode in MODES[r % 3:] + MODES[:r % 3]:
                g, c = asyncio.run(one(mode, args.file, n))
                gap[mode].append(g)
                cpu[mode].append(c)
        set_turn_time(TURN_TIME_NS)
        print(f"read({n >> 10} KiB), {args.rounds} rounds: longest gap ms, loop-thread CPU s; median (lowest-highest)")
        for m in MODES:
            print(f"  {m:<9} gap {statistics.median(gap[m]):7.2f} ({min(gap[m]):.2f}-{max(gap[m]):.2f})"
                  f"   cpu {statistics.median(cpu[m]):.3f} ({min(cpu[m]):.3f}-{max(cpu[m]):.3f})")
        for m in ("by time", "by count"):
            ratios = [a / b for a, b in zip(gap[m], gap["aiofiles"])]
            print(f"  {m} gap / aiofiles' per round: {statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
