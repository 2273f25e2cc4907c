"""Echo over TCP on three event loops, side by side in one run: asyncio's
default loop, uvloop, and blockio's (``blockio.new_event_loop``).

Each round starts a fresh server process per loop (in rotated order),
pinned to CPU 0, running an ``asyncio.Protocol`` echo server; the client, in
this process pinned to CPU 1, keeps ``--conns`` connections each sending a
``--size``-byte message and waiting for its whole echo, for ``--seconds``.
Printed per loop: messages per second (median of the rounds, and the
lowest and highest), the server's CPU time per message (its user + system
time over the messages it echoed: what the loop costs, also where the
client is the ceiling), and the ratios to asyncio and uvloop.

    python python/benchmarks/loop.py [--rounds 5] [--seconds 2] [--conns 10] [--size 1024]

The client runs on uvloop when it is installed (the fastest of the
three here), else on asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

LOOPS = ("asyncio", "uvloop", "blockio")


def _new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name == "blockio":
        import blockio

        return blockio.new_event_loop()
    return asyncio.new_event_loop()


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


def serve(name: str) -> None:
    """The server: prints its port, echoes until a line on stdin, prints its CPU time."""
    os.sched_setaffinity(0, {0})
    loop = _new_loop(name)

    async def main() -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        server.close()

    start = time.process_time()
    loop.run_until_complete(main())
    print(time.process_time() - start, flush=True)
    loop.close()


async def _client(port: int, conns: int, size: int, seconds: float) -> int:
    msg = b"x" * size
    stop = time.monotonic() + seconds
    counts = [0] * conns

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < stop:
            writer.write(msg)
            await reader.readexactly(size)
            counts[i] += 1
        writer.close()
        await writer.wait_closed()

    await asyncio.gather(*(one(i) for i in range(conns)))
    return sum(counts)


def _client_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def one_round(name: str, args: argparse.Namespace) -> tuple[float, float]:
    """(messages per second, server CPU seconds per message) of one server run."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdin is not None and server.stdout is not None
    port = int(server.stdout.readline())
    loop = _client_loop()
    start = time.monotonic()
    n = loop.run_until_complete(_client(port, args.conns, args.size, args.seconds))
    elapsed = time.monotonic() - start
    loop.close()
    server.stdin.write("stop\n")
    server.stdin.flush()
    cpu = float(server.stdout.readline())
    if server.wait() != 0:
        raise SystemExit(f"the {name} server failed")
    return n / elapsed, cpu / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", choices=LOOPS, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    os.sched_setaffinity(0, {1})
    rates: dict[str, list[float]] = {n: [] for n in LOOPS}
    costs: dict[str, list[float]] = {n: [] for n in LOOPS}
    for r in range(args.rounds):
        order = LOOPS[r % len(LOOPS) :] + LOOPS[: r % len(LOOPS)]
        for name in order:
            rate, cost = one_round(name, args)
            rates[name].append(rate)
            costs[name].append(cost)
    print(f"echo, {args.conns} connections, {args.size} B messages, {args.rounds} rounds of {args.seconds} s")
    med = {n: statistics.median(rates[n]) for n in LOOPS}
    for n in LOOPS:
        print(
            f"{n:8} {med[n]:10.0f} msg/s (range {min(rates[n]):.0f}-{max(rates[n]):.0f})  "
            f"server CPU {statistics.median(costs[n]) * 1e6:6.1f} us/msg  "
            f"x{med[n] / med['asyncio']:.2f} asyncio  x{med[n] / med['uvloop']:.2f} uvloop"
        )


if __name__ == "__main__":
    main()
