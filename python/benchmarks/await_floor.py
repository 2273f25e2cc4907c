"""The floor of an awaitable read, counted in instructions: a fixed number
of cached sequential reads of SIZE bytes inside a coroutine, four ways,
for ``valgrind --tool=callgrind`` run at two counts (the difference over
the difference of the counts is one read, start-up excluded).

    python await_floor.py MODE READS FILE SIZE

MODE is ``pread`` (an ``os.pread`` loop: no await at all), ``pread-await``
(the same, each read beside an ``await`` of a finished future: the
cheapest await asyncio has), ``pread-coro`` (each ``os.pread`` in an
``async def`` awaited: the cheapest awaitable read API written in
Python), or ``blockio`` (``await f.read(SIZE)`` on a ``blockio.open``
unbuffered file). FILE must be in the page cache.
"""

from __future__ import annotations

import asyncio
import os
import sys


async def _pread(fd: int, reads: int, size: int, wrap: int, with_await: bool) -> int:
    """``reads`` reads in order, wrapping round at ``wrap``; with an await
    of a finished future beside each if ``with_await``."""
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    pos = got = 0
    for _ in range(reads):
        if with_await:
            await fut
        data = os.pread(fd, size, pos)
        pos += len(data)
        got += len(data)
        if pos >= wrap:
            pos = 0
    return got


async def _pread_coro(fd: int, reads: int, size: int, wrap: int) -> int:
    """As `_pread`, each read an awaited ``async def``."""

    async def read_at(at: int) -> bytes:
        return os.pread(fd, size, at)

    pos = got = 0
    for _ in range(reads):
        data = await read_at(pos)
        pos += len(data)
        got += len(data)
        if pos >= wrap:
            pos = 0
    return got


async def _blockio(path: str, reads: int, size: int) -> int:
    import blockio

    got = 0
    async with blockio.open(path, "rb", buffering=0) as f:
        for _ in range(reads):
            data = await f.read(size)
            if not data:
                await f.seek(0)
                data = await f.read(size)
            got += len(data)
    return got


async def run(mode: str, reads: int, path: str, size: int) -> int:
    """The bytes read by ``reads`` reads of ``size`` bytes of ``path``."""
    if mode == "blockio":
        return await _blockio(path, reads, size)
    fd = os.open(path, os.O_RDONLY)
    wrap = os.path.getsize(path) // size * size
    try:
        if mode == "pread-coro":
            return await _pread_coro(fd, reads, size, wrap)
        return await _pread(fd, reads, size, wrap, mode == "pread-await")
    finally:
        os.close(fd)


def main() -> int:
    modes = ("pread", "pread-await", "pread-coro", "blockio")
    if len(sys.argv) != 5 or sys.argv[1] not in modes:
        print(f"usage: await_floor.py {{{','.join(modes)}}} READS FILE SIZE", file=sys.stderr)
        return 2
    mode, reads, path, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    got = asyncio.run(run(mode, reads, path, size))
    if got != reads * size:
        print(f"read {got} bytes, expected {reads * size}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
