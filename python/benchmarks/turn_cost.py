"""What one bare turn of an asyncio event loop (``await asyncio.sleep(0)``)
costs in the middle of an ``os.pread`` loop over a cached file, by how
many bytes the loop copied since the turn before: after 4 MiB (where a
``blockio.open`` loop takes its turns) it runs with caches the copies
emptied, and costs about ten times what it costs after one small read::

    python turn_cost.py FILE [PASSES]

Prints, for reads of 16 and 256 KiB and a turn after every read or after
every 4 MiB, the median (10th-90th percentile) wall time of a turn, in
microseconds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from typing import List


async def turns(path: str, n: int, every: int, passes: int) -> List[int]:
    """Nanoseconds of each turn taken after every ``every`` bytes of a loop
    of ``os.pread(n)`` over ``path``, ``passes`` times over."""
    took: List[int] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(passes):
            pos = 0
            while chunk := os.pread(fd, n, pos):
                pos += len(chunk)
                if pos % every == 0:
                    start = time.perf_counter_ns()
                    await asyncio.sleep(0)
                    took.append(time.perf_counter_ns() - start)
    finally:
        os.close(fd)
    return took


def main() -> int:
    path = sys.argv[1]
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    for n in (16 << 10, 256 << 10):
        for every in (n, 4 << 20):
            t = sorted(asyncio.run(turns(path, n, every, passes)))
            print(f"read({n >> 10} KiB), a turn every {every >> 10} KiB: {statistics.median(t) / 1e3:.1f} us "
                  f"({t[len(t) // 10] / 1e3:.1f}-{t[len(t) * 9 // 10] / 1e3:.1f}) per turn, {len(t)} turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
