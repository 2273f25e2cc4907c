"""What a text ``readlines()`` costs when the file's bytes stop decoding
near its end: 24 MiB of UTF-8 lines with a bad byte 2 bytes before the
end, read by ``blockio.open(...).readlines()`` under each Python given
(each with its own blockio installed: two checkouts side by side) and by
the built-in ``open`` under this one, each run a new process::

    python readlines_decode_error.py DIR NAME=PYTHON [NAME=PYTHON ...] [--rounds N]

The file is written in DIR and removed at the end. Rounds alternate the
order; prints, for each, the median (lowest-highest) time of the call in
its process, and each over the first one's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from typing import Dict, List

LINE = ("line of text é " * 3 + "\n").encode()

CHILD = r"""
import asyncio, sys, time
path = sys.argv[1]
if sys.argv[2] == "builtin":
    t = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        try:
            f.readlines()
            sys.exit("decoded: the bad byte is missing")
        except UnicodeDecodeError:
            pass
    print(time.perf_counter() - t)
else:
    import blockio
    async def main():
        async with blockio.open(path, encoding="utf-8") as f:
            t = time.perf_counter()
            try:
                await f.readlines()
                sys.exit("decoded: the bad byte is missing")
            except UnicodeDecodeError:
                return time.perf_counter() - t
    print(asyncio.run(main()))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("pythons", nargs="+", help="NAME=PYTHON, a Python with blockio installed")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    who: Dict[str, List[str]] = {}
    for spec in args.pythons:
        name, sep, python = spec.partition("=")
        if not sep:
            ap.error(f"{spec!r}: expected NAME=PYTHON")
        who[name] = [python, "blockio"]
    who["built-in"] = [sys.executable, "builtin"]
    path = os.path.join(args.dir, "readlines_decode_error.txt")
    body = LINE * ((24 << 20) // len(LINE))
    with open(path, "wb") as f:
        f.write(body[:-2] + b"\xff" + body[-2:])
    took: Dict[str, List[float]] = {name: [] for name in who}
    try:
        for r in range(args.rounds):
            for name in (list(who) if r % 2 == 0 else list(reversed(who))):
                python, kind = who[name]
                out = subprocess.run([python, "-c", CHILD, path, kind], capture_output=True, text=True, check=True)
                took[name].append(float(out.stdout))
    finally:
        os.unlink(path)
    first = statistics.median(next(iter(took.values())))
    for name, times in took.items():
        med = statistics.median(times)
        print(f"{name:<10} {med:.3f} s ({min(times):.3f}-{max(times):.3f})  {med / first:.2f}x")


if __name__ == "__main__":
    main()
