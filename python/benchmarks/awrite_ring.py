"""``Engine.awrite`` on blockio's event loop on io_uring: N writes of
4 KiB to a regular file, one at a time, on the loop's ring (``ring``) or
through the engine (``engine``: the ring's route turned off, as before
writes went on the ring). Prints the process's CPU seconds; run under
``strace -f -c`` to count the system calls (futex wake-ups, eventfd
writes) per write.

    python awrite_ring.py ring|engine N
"""

import asyncio
import os
import sys
import tempfile
import time

import blockio
from blockio._engine import Engine
from blockio._loop import UringEventLoop


async def _engine_only(*_args: object) -> None:
    return None


def main() -> None:
    route, n = sys.argv[1], int(sys.argv[2])
    if route == "engine":
        Engine._awrite_on_loop_ring = _engine_only  # type: ignore[method-assign,assignment]
    d = tempfile.mkdtemp()
    path = os.path.join(d, "f")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    engine = blockio.Engine()
    block = b"w" * 4096

    async def writes() -> None:
        for i in range(n):
            await engine.awrite(fd, block, (i % 256) * 4096)

    loop = UringEventLoop()
    start = time.process_time()
    loop.run_until_complete(writes())
    print(f"{time.process_time() - start:.4f}")
    loop.close()
    engine.close()
    os.close(fd)
    os.unlink(path)
    os.rmdir(d)


if __name__ == "__main__":
    main()
