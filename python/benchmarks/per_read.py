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
in order, ``await f.write(SIZE bytes)`` alone), ``open-write-seek`` (the
same, each write followed by ``await f.seek(-SIZE, os.SEEK_CUR)``, a seek
not served inline: its cost is this one's less ``open-write``'s) or
``builtin-write`` (an ``os.write`` loop, its floor); ``open-buffered-write``
(``open-write`` on a buffered file: most writes go into its buffer),
``open-readinto-seq`` (``open-seq`` with ``await f.readinto(buf)`` into
one ``bytearray`` of SIZE bytes), ``builtin-readinto-seq`` (its floor, an
``os.preadv`` loop into one buffer) or
``open-readline`` (``await f.readline()`` of a buffered file of lines of
SIZE bytes, made anew as ``--file``, ``per-readline.dat`` by default,
wrapping round at its end). SIZE is ``--size`` (4096 by default; the
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
from typing import Any, Callable, Iterator

BLOCK = 4096
TASKS = 64


def _offsets(path: str, reads: int) -> "Iterator[int]":
    """``reads`` random 4 KiB-aligned offsets within ``path`` (seeded)."""
    blocks = max(os.path.getsize(path) // BLOCK, 1) if os.path.exists(path) else 1
    rnd = random.Random(5)
    return iter([rnd.randrange(blocks) * BLOCK for _ in range(reads)])


async def _aread(path: str, reads: int, size: int) -> int:
    import blockio

    e = blockio.default_engine()
    offs, got = _offsets(path, reads), [0]
    with open(path, "rb") as f:

        async def task(_: int) -> None:
            for off in offs:
                data = await e.aread(f, offset=off, length=BLOCK)
                got[0] += len(data)  # (after the await: the tasks share the count)

        await asyncio.gather(*(task(i) for i in range(TASKS)))
    return got[0]


async def _builtin(path: str, reads: int, size: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    got = sum(len(os.pread(fd, BLOCK, off)) for off in _offsets(path, reads))
    os.close(fd)
    return got


async def _builtin_seq(path: str, reads: int, size: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    pos = got = 0
    for _ in range(reads):
        data = os.pread(fd, size, pos)
        if len(data) < size:
            pos = 0
            data = os.pread(fd, size, pos)
        pos += len(data)
        got += len(data)
    os.close(fd)
    return got


async def _open_write(path: str, reads: int, size: int) -> int:
    import blockio

    data, got = os.urandom(size), 0
    f = await blockio.open(path, "wb", buffering=0)
    for _ in range(reads):
        got += await f.write(data)
    await f.close()
    return got


async def _open_write_seek(path: str, reads: int, size: int) -> int:
    import blockio

    data, got = os.urandom(size), 0
    f = await blockio.open(path, "wb", buffering=0)
    for _ in range(reads):
        got += await f.write(data)
        await f.seek(-size, os.SEEK_CUR)
    await f.close()
    return got


async def _open_readline(path: str, reads: int, size: int) -> int:
    import blockio

    with open(path, "wb") as out:  # (made anew: lines of SIZE bytes, 1 MiB)
        out.write((b"x" * (size - 1) + b"\n") * max((1 << 20) // size, 1))
    got = 0
    f = await blockio.open(path, "rb")
    for _ in range(reads):
        line = await f.readline()
        if not line:
            await f.seek(0)
            line = await f.readline()
        got += len(line)
    await f.close()
    return got


async def _open_write_buffered(path: str, reads: int, size: int) -> int:
    import blockio

    data, got = os.urandom(size), 0
    f = await blockio.open(path, "wb")
    for _ in range(reads):
        got += await f.write(data)
    await f.close()
    return got


async def _builtin_write(path: str, reads: int, size: int) -> int:
    data, got = os.urandom(size), 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(reads):
        got += os.write(fd, data)
    os.close(fd)
    return got


async def _open_seq(path: str, reads: int, size: int) -> int:
    import blockio

    got = 0
    f = await blockio.open(path, "rb")
    for _ in range(reads):
        data = await f.read(size)
        if len(data) < size:
            await f.seek(0)
            data = await f.read(size)
        got += len(data)
    await f.close()
    return got


async def _open_readinto_seq(path: str, reads: int, size: int) -> int:
    import blockio

    got, buf = 0, bytearray(size)
    f = await blockio.open(path, "rb")
    for _ in range(reads):
        n = await f.readinto(buf)
        if n < size:
            await f.seek(0)
            n = await f.readinto(buf)
        got += n
    await f.close()
    return got


async def _builtin_readinto_seq(path: str, reads: int, size: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    pos = got = 0
    buf = bytearray(size)
    for _ in range(reads):
        n = os.preadv(fd, [buf], pos)
        if n < size:
            pos = 0
            n = os.preadv(fd, [buf], pos)
        pos += n
        got += n
    os.close(fd)
    return got


async def _seek_and_read(opener: "Callable[[], Any]", path: str, reads: int) -> int:
    """64 tasks, a file object each from ``opener``, ``seek`` + ``read(4096)``."""
    offs, got = _offsets(path, reads), [0]
    files = [await opener() for _ in range(TASKS)]

    async def ftask(i: int) -> None:
        f = files[i]
        for off in offs:
            await f.seek(off)
            data = await f.read(BLOCK)
            got[0] += len(data)  # (after the await: the tasks share the count)

    await asyncio.gather(*(ftask(i) for i in range(TASKS)))
    for f in files:
        await f.close()
    return got[0]


async def _open(path: str, reads: int, size: int) -> int:
    import blockio

    return await _seek_and_read(lambda: blockio.open(path, "rb"), path, reads)


async def _turbofile(path: str, reads: int, size: int) -> int:
    import turbofile

    return await _seek_and_read(lambda: turbofile.open(path, "rb"), path, reads)


#: Each contender: its run, taking the path, the count and the size.
CONTENDERS = {
    "aread": _aread, "open": _open, "open-seq": _open_seq, "turbofile": _turbofile, "builtin": _builtin,
    "builtin-seq": _builtin_seq, "open-write": _open_write, "builtin-write": _builtin_write,
    "open-write-seek": _open_write_seek, "open-readline": _open_readline,
    "open-buffered-write": _open_write_buffered, "open-readinto-seq": _open_readinto_seq,
    "builtin-readinto-seq": _builtin_readinto_seq,
}


async def run(name: str, path: str, reads: int, size: int = BLOCK) -> int:
    """Runs the contender ``name``: the bytes it read (or wrote)."""
    return await CONTENDERS[name](path, reads, size)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("contender", choices=list(CONTENDERS))
    ap.add_argument("reads", type=int, help="how many reads (or writes)")
    ap.add_argument("--file", default=None,
                    help="the file read (bench-data/py-peers-256m.dat), or written (per-write.dat)")
    ap.add_argument("--size", type=int, default=BLOCK,
                    help="bytes per read of open-seq and builtin-seq, per write of open-write and builtin-write")
    args = ap.parse_args()
    if args.size < 1:
        ap.error(f"--size must be at least 1, not {args.size}")
    writes = args.contender.endswith("-write")
    lines = args.contender == "open-readline"
    seq = args.contender.endswith("-seq") or writes or lines
    size = args.size if seq else BLOCK
    made = "per-readline.dat" if lines else "per-write.dat"
    path = args.file or (made if writes or lines else "bench-data/py-peers-256m.dat")
    n = asyncio.run(run(args.contender, path, args.reads, size))
    if n != args.reads * size:
        print(f"read {n} bytes, expected {args.reads * size}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
