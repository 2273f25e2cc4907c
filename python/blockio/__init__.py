"""Batched io_uring disk I/O for Python, synchronous and asyncio.

A thin layer over the Rust core (``blockio._blockio``)::

    import blockio
    engine = blockio.Engine()
    with open("data.bin", "rb") as f:
        pages = engine.read_batch(f, offsets=[0, 8192, 65536], length=4096)  # GIL released
        n = engine.readinto_batch([(f, bytearray(4096), 0)])    # no copy

    async def main():
        page = await engine.aread(f, offset=4096, length=4096)
        pages = await engine.aread_batch(f, offsets=range(0, 1 << 20, 4096), length=4096)
        async with blockio.open("data.bin", "rb") as af:
            async for line in af:
                ...

Naming: the synchronous batch calls are ``read_batch``, ``readinto_batch``,
``write_batch``, ``fsync``, ``fdatasync``, ``fallocate``; their asyncio forms carry an
``a`` prefix (``aread_batch``, ``aread``, ``areadinto``, ...), so that one
name never means both a blocking call and a coroutine.

``offset`` and ``length`` are keyword-only in the read calls: see
:mod:`blockio._engine` for why. :func:`open` is a drop-in for
``aiofiles.open``; see :mod:`blockio._file` and :mod:`blockio._text`.

blockio is also an asyncio event loop (sockets, pipes, timers, signals
and subprocesses on io_uring; see :mod:`blockio._loop`)::

    blockio.run(main())        # or asyncio.run(main(), loop_factory=blockio.new_event_loop)
    blockio.install()          # the event loop policy, as uvloop.install()
"""

from __future__ import annotations

from typing import Any

from ._blockio import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE
from ._buffers import aligned_buffer
from ._engine import Engine, default_engine
from ._file import AsyncFile
from ._loop import EpollEventLoop, EventLoopPolicy, UringEventLoop, install, new_event_loop, run
from ._open import open
from ._text import AsyncTextFile

__version__: str  # given by __getattr__ below


def __getattr__(name: str) -> Any:
    """``blockio.__version__``, looked up when first asked for.

    ``importlib.metadata`` costs about half of ``import blockio``'s time
    and some 3.5 MB of address space, which a program at a tight
    ``ulimit -v`` may not have: it is imported only here.
    """
    if name != "__version__":
        raise AttributeError(f"module 'blockio' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("blockio")
    except PackageNotFoundError:  # imported from a source tree
        found = "0+unknown"
    globals()["__version__"] = found
    return found


__all__ = [
    "Engine", "open", "AsyncFile", "AsyncTextFile", "aligned_buffer", "default_engine", "__version__",
    "new_event_loop", "run", "install", "EventLoopPolicy", "UringEventLoop", "EpollEventLoop",
    "FALLOC_FL_KEEP_SIZE", "FALLOC_FL_PUNCH_HOLE", "FALLOC_FL_ZERO_RANGE",
]
