"""CPU time per UDP round trip on one event loop: a client protocol and an
echo protocol (``create_datagram_endpoint``, neither connected, so that
each receive is a ``recvfrom``, on 127.0.0.1), on blockio's loops against
asyncio's and uvloop's, measured side by side in the same rounds.

Contenders: ``blockio-uring`` (an endpoint's receive is a ``recvmsg``
kept armed on the ring), ``blockio-epoll``, ``asyncio``, ``uvloop``.

Workloads: ``pingpong`` (one datagram in flight: the client sends the
next when the echo comes back) and ``burst`` (32 in flight: each echo
received sends one more). Each round runs every contender in a fresh
process, pinned to one CPU, the order rotated every round; printed per
workload and contender: microseconds of process CPU time
(``time.process_time``) per round trip (two sends and two receives),
median of the rounds and lowest-highest, and the ratio of the median to
asyncio's and uvloop's medians of the same run. With ``--baseline DIR``
(a directory holding another build's ``blockio`` package, such as a copy
of an installed one), a contender ``baseline``, ``blockio-uring`` run
with ``DIR`` first on ``PYTHONPATH``, is measured in the same rounds and
every median is also given as a ratio to its::

    python python/benchmarks/udp_echo.py [--rounds 7] [--n 20000]
        [--workloads pingpong,burst] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

CONTENDERS = ["blockio-uring", "blockio-epoll", "asyncio", "uvloop"]
WORKLOADS = {"pingpong": 1, "burst": 32}


def make_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new loop of contender ``name``."""
    if name == "asyncio":
        return asyncio.new_event_loop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    from blockio._loop import EpollEventLoop, UringEventLoop

    return UringEventLoop() if name == "blockio-uring" else EpollEventLoop()


async def echo(n: int, in_flight: int) -> float:
    """CPU seconds per round trip of ``n`` round trips, ``in_flight`` at once."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport

        def datagram_received(self, data: bytes, addr: object) -> None:
            self.t.sendto(data, addr)  # type: ignore[attr-defined]

    class Client(asyncio.DatagramProtocol):
        def __init__(self) -> None:
            self.got = 0
            self.sent = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport

        def datagram_received(self, data: bytes, addr: object) -> None:
            self.got += 1
            if self.got == n:
                done.set_result(None)
            elif self.sent < n:
                self.sent += 1
                self.t.sendto(data, addr)  # type: ignore[attr-defined]

    server, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
    addr = server.get_extra_info("sockname")
    client, proto = await loop.create_datagram_endpoint(Client, local_addr=("127.0.0.1", 0))
    start = time.process_time()
    for _ in range(in_flight):
        proto.sent += 1
        client.sendto(b"x" * 64, addr)
    await done
    spent = time.process_time() - start
    client.close()
    server.close()
    return spent / n


def child(name: str, workload: str, n: int) -> None:
    """Runs one contender's workload and prints its CPU time per round trip."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    loop = make_loop(name)
    try:
        print(loop.run_until_complete(echo(n, WORKLOADS[workload])))
    finally:
        loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--baseline", help="a directory with another build's blockio package")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.n)
        return
    contenders = CONTENDERS + (["baseline"] if args.baseline else [])
    for workload in args.workloads.split(","):
        times: dict[str, list[float]] = {c: [] for c in contenders}
        for r in range(args.rounds):
            order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
            for name in order:
                env = None
                if name == "baseline":
                    path = os.environ.get("PYTHONPATH")
                    env = {**os.environ, "PYTHONPATH": args.baseline + (os.pathsep + path if path else "")}
                child_name = "blockio-uring" if name == "baseline" else name
                out = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--child", child_name, workload],
                                     capture_output=True, text=True, env=env)
                if out.returncode:
                    sys.exit(f"{name} {workload} failed ({out.returncode}):\n{out.stderr}")
                times[name].append(float(out.stdout))
        med = {c: statistics.median(v) for c, v in times.items()}
        print(f"{workload} ({WORKLOADS[workload]} in flight), {args.rounds} rounds of {args.n} round trips:")
        for name in contenders:
            v = times[name]
            base = f"  {med[name] / med['baseline']:.2f}x baseline" if args.baseline else ""
            print(f"  {name:20} {med[name] * 1e6:7.2f} us ({min(v) * 1e6:.2f}-{max(v) * 1e6:.2f})"
                  f"  {med[name] / med['asyncio']:.2f}x asyncio  {med[name] / med['uvloop']:.2f}x uvloop{base}")


if __name__ == "__main__":
    main()
