"""CPU per ``blockio.open`` + close of a regular file on blockio's io_uring
loop, with and without the ``fstat`` that tells a FIFO or terminal opened on
the loop's ring (``blockio._engine._waits_not``), in alternating rounds.

    .venv/bin/python python/benchmarks/open_check.py
"""
import os
import statistics
import tempfile
import time
from typing import Callable, Dict, List

import blockio
import blockio._engine as engine_module
from blockio._loop import UringEventLoop


def main() -> None:
    path = os.path.join(tempfile.mkdtemp(), "f")
    with open(path, "wb") as f:
        f.write(b"x" * 100)
    checked = engine_module._waits_not
    variants: Dict[str, Callable[[int], bool]] = {"fstat check": checked, "no check": lambda fd: True}

    async def work(n: int) -> None:
        for _ in range(n):
            g = await blockio.open(path, "rb")
            await g.close()

    results: Dict[str, List[float]] = {name: [] for name in variants}
    loop = UringEventLoop()
    try:
        loop.run_until_complete(work(200))
        for _ in range(7):
            for name, check in variants.items():
                setattr(engine_module, "_waits_not", check)
                start = time.process_time()
                loop.run_until_complete(work(3000))
                results[name].append((time.process_time() - start) / 3000 * 1e6)
    finally:
        engine_module._waits_not = checked
        loop.close()
    for name, v in results.items():
        print(f"{name}: CPU us per open+close median {statistics.median(v):.2f} "
              f"({min(v):.2f}-{max(v):.2f}), {len(v)} rounds")


if __name__ == "__main__":
    main()
