"""A fixed number of warm random 4 KiB reads by 64 tasks, for counting the
cost of one read with a deterministic tool instead of a clock: run it twice
under ``valgrind --tool=callgrind`` (or ``strace -c -f``) with two read
counts, and the difference divided by the difference of the counts is the
instructions (or system calls) of one read, start-up excluded.

    python per_read.py CONTENDER READS [--file PATH]

CONTENDER is ``aread``, ``open`` (a ``blockio.open`` file per task,
``seek`` + ``read``), ``open-seq`` (one ``blockio.open`` file read in order,
``await f.read(SIZE)`` alone, wrapping round at its end), ``turbofile``,
``builtin`` (a synchronous ``os.pread`` loop, the floor) or ``builtin-seq``
(``os.pread`` of SIZE bytes in order, wrapping round: the floor of
``open-seq``), ``open-write`` (one unbuffered ``blockio.open`` file written
in order, ``await f.write(SIZE bytes)`` alone) or ``builtin-write`` (an
``os.write`` loop, its floor). SIZE is ``--size`` (4096 by default; the
others read 4 KiB). The file read must exist and be in the page cache
(``peers.py`` makes and warms it); the writes go to ``--file`` made anew
(``per-write.dat`` in the current directory by default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys

BLOCK = 4096
TASKS = 64


async def run(name: str, path: str, reads: int, size: int = BLOCK) -> int:
    blocks = max(os.path.getsize(path) // BLOCK, 1) if os.path.exists(path) else 1
    rnd = random.Random(5)
    offs = iter([rnd.randrange(blocks) * BLOCK for _ in range(reads)])
    got = [0]
    if name == "aread":
        import blockio

        e = blockio.default_engine()
        f = open(path, "rb")

        async def task(_: int) -> None:
            for off in offs:
                data = await e.aread(f, offset=off, length=BLOCK)
                got[0] += len(data)

        await asyncio.gather(*(task(i) for i in range(TASKS)))
        f.close()
        return got[0]
    if name == "builtin":
        fd = os.open(path, os.O_RDONLY)
        for off in offs:
            got[0] += len(os.pread(fd, BLOCK, off))
        os.close(fd)
        return got[0]
    if name == "builtin-seq":
        fd = os.open(path, os.O_RDONLY)
        pos = 0
        for _ in range(reads):
            data = os.pread(fd, size, pos)
            if len(data) < size:
                pos = 0
                data = os.pread(fd, size, pos)
            pos += len(data)
            got[0] += len(data)
        os.close(fd)
        return got[0]
    if name == "open-write":
        import blockio

        data = os.urandom(size)
        f = await blockio.open(path, "wb", buffering=0)
        for _ in range(reads):
            got[0] += await f.write(data)
        await f.close()
        return got[0]
    if name == "builtin-write":
        data = os.urandom(size)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(reads):
            got[0] += os.write(fd, data)
        os.close(fd)
        return got[0]
    if name == "open-seq":
        import blockio

        f = await blockio.open(path, "rb")
        for _ in range(reads):
            data = await f.read(size)
            if len(data) < size:
                await f.seek(0)
                data = await f.read(size)
            got[0] += len(data)
        await f.close()
        return got[0]
    if name == "open":
        import blockio

        opener = lambda: blockio.open(path, "rb")  # noqa: E731
    elif name == "turbofile":
        import turbofile

        opener = lambda: turbofile.open(path, "rb")  # noqa: E731
    else:
        raise SystemExit(f"unknown contender {name!r}")
    files = [await opener() for _ in range(TASKS)]

    async def ftask(i: int) -> None:
        f = files[i]
        for off in offs:
            await f.seek(off)
            data = await f.read(BLOCK)
            got[0] += len(data)

    await asyncio.gather(*(ftask(i) for i in range(TASKS)))
    for f in files:
        await f.close()
    return got[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("contender", choices=["aread", "open", "open-seq", "turbofile", "builtin", "builtin-seq",
                                          "open-write", "builtin-write"])
    ap.add_argument("reads", type=int, help="how many reads (or writes)")
    ap.add_argument("--file", default=None,
                    help="the file read (bench-data/py-peers-256m.dat), or written (per-write.dat)")
    ap.add_argument("--size", type=int, default=BLOCK,
                    help="bytes per read of open-seq and builtin-seq, per write of open-write and builtin-write")
    args = ap.parse_args()
    if args.size < 1:
        ap.error(f"--size must be at least 1, not {args.size}")
    writes = args.contender.endswith("-write")
    seq = args.contender in ("open-seq", "builtin-seq") or writes
    size = args.size if seq else BLOCK
    path = args.file or ("per-write.dat" if writes else "bench-data/py-peers-256m.dat")
    n = asyncio.run(run(args.contender, path, args.reads, size))
    if n != args.reads * size:
        print(f"read {n} bytes, expected {args.reads * size}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
