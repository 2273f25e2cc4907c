"""CPU time of ``Engine.aread`` calls that the page cache cannot serve on
the calling thread: each reads at an offset past the end of a regular file
opened by path (the try on the loop's thread comes back short, as a read
of cold data does), so the read goes through the engine, or on blockio's
loop on io_uring through the loop's ring. What it measures is the route
such a read takes in Python (the descriptor's ``F_GETFL`` and ``fstat``),
not the device.

    python aread_miss.py asyncio|blockio N    # prints the process's CPU seconds
"""

import asyncio
import os
import sys
import tempfile
import time

import blockio
from blockio._loop import UringEventLoop


def main() -> None:
    which, n = sys.argv[1], int(sys.argv[2])
    d = tempfile.mkdtemp()
    path = os.path.join(d, "f")
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
    fd = os.open(path, os.O_RDONLY)
    engine = blockio.Engine()

    async def reads() -> None:
        for _ in range(n):
            await engine.aread(fd, offset=1 << 20, length=4096)

    loop = asyncio.new_event_loop() if which == "asyncio" else UringEventLoop()
    start = time.process_time()
    loop.run_until_complete(reads())
    print(f"{time.process_time() - start:.4f}")
    loop.close()
    engine.close()
    os.close(fd)
    os.unlink(path)
    os.rmdir(d)


if __name__ == "__main__":
    main()
