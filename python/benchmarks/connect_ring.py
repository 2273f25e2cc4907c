"""``sock_connect`` on blockio's io_uring loop, one connection at a time
to a local listener (each accepted and closed on this thread): ROUTE
``ring`` (a ``connect`` on the loop's ring) or ``poll`` (the readiness
path: ``connect`` now, a ring poll, ``SO_ERROR``; the packing of the
address switched off in this process). Prints the process's CPU time per
connect.

    python python/benchmarks/connect_ring.py ring|poll N
"""
import asyncio
import socket
import sys
import time
from typing import Any, Optional

from blockio import _proactor
from blockio._loop import UringEventLoop

route, n = sys.argv[1], int(sys.argv[2])
if route == "poll":
    def unpacked(conn: socket.socket, address: Any) -> Optional[bytes]:
        return None
    setattr(_proactor, "_sockaddr", unpacked)
loop: asyncio.AbstractEventLoop = UringEventLoop()
ls = socket.create_server(("127.0.0.1", 0), backlog=4096)
ls.setblocking(False)
addr = ls.getsockname()


async def main() -> float:
    start = time.process_time()
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        await loop.sock_connect(s, addr)
        c, _ = ls.accept()
        c.close()
        s.close()
    return (time.process_time() - start) / n


print(route, f"{loop.run_until_complete(main()) * 1e6:.1f} us/connect")
