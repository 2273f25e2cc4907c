"""A fixed number of batches of four 4 KiB reads of a cached regular file,
for counting the cost of one batch with a deterministic tool: run it twice
under ``strace -c -f`` (or ``valgrind --tool=callgrind``) with two batch
counts, and the difference divided by the difference of the counts is the
system calls (or instructions) of one batch, start-up excluded.

    python batch_checks.py API BATCHES [--file PATH]

API is ``read_batch``, ``readinto_batch``, ``aread_batch`` or
``areadinto_batch`` (of the default engine). The file (``--file``,
``batch-checks.dat`` in the current directory by default) is made of
1 MiB if missing, and read once first, so its pages are cached.
"""

from __future__ import annotations

import argparse
import asyncio
import os

OFFSETS = [0, 65536, 131072, 196608]
LENGTH = 4096


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("api", choices=["read_batch", "readinto_batch", "aread_batch", "areadinto_batch"])
    ap.add_argument("batches", type=int)
    ap.add_argument("--file", default="batch-checks.dat")
    args = ap.parse_args()
    if not os.path.exists(args.file):
        with open(args.file, "wb") as out:
            out.write(os.urandom(1 << 20))
    import blockio

    e = blockio.default_engine()
    bufs = [bytearray(LENGTH) for _ in OFFSETS]
    with open(args.file, "rb") as f:
        f.read()
        ops = [(f, b, off) for b, off in zip(bufs, OFFSETS)]
        if args.api == "read_batch":
            for _ in range(args.batches):
                e.read_batch(f, offsets=OFFSETS, length=LENGTH)
        elif args.api == "readinto_batch":
            for _ in range(args.batches):
                e.readinto_batch(ops)
        else:

            async def run() -> None:
                for _ in range(args.batches):
                    if args.api == "aread_batch":
                        await e.aread_batch(f, offsets=OFFSETS, length=LENGTH)
                    else:
                        await e.areadinto_batch(ops)

            asyncio.run(run())


if __name__ == "__main__":
    main()
