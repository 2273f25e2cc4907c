"""CPU time per callback of an event loop's turns, with no I/O: blockio's
loops (io_uring and epoll) against asyncio's and uvloop's, and against
another build of blockio (``--baseline DIR``, put first on that
contender's ``PYTHONPATH``), measured side by side in the same rounds.

Workloads, each on a fresh loop in a fresh process per round (the order of
the contenders rotated every round), pinned to one CPU:

- ``chain``: one callback per turn, each scheduling the next with
  ``call_soon`` (the cost of a turn itself);
- ``fan``: 100 callbacks per turn, each scheduling its successor (the cost
  of running a ready handle);
- ``tasks``: 100 tasks each awaiting ``asyncio.sleep(0)`` in a loop (a
  task step per handle, as coroutine servers run);
- ``timers``: 100 callbacks per turn, each scheduling its successor with
  ``call_later(0)`` (the timer heap);
- ``sock`` (not in the default list, as it does I/O): one coroutine
  making ``sock_sendall`` of 64 bytes then ``sock_recv`` of them on a
  socket pair, each pair counted as a callback (the cost of the loop's
  low-level socket calls, their turns included);
- ``sock-wait`` (not in the default list either): two coroutines passing
  64 bytes back and forth over a socket pair, each receive made before
  its bytes are sent (as a request-response server's is), each exchange
  (a ``sock_sendall`` and a ``sock_recv`` that waits) counted as a
  callback.

Printed per workload and contender: nanoseconds of process CPU time
(``time.process_time``) per callback, median of the rounds and
lowest-highest, and the ratio of the median to each baseline's median
measured in the same run::

    python python/benchmarks/loop_turns.py [--rounds 5] [--n 400000]
        [--workloads chain,fan,tasks,timers] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import socket
import subprocess
import sys
import time

CONTENDERS = ["blockio-uring", "blockio-epoll", "asyncio", "uvloop"]
WORKLOADS = ["chain", "fan", "tasks", "timers"]
WIDTH = 100


def make_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new loop of contender ``name`` (``blockio-base-*``: the baseline's)."""
    if name == "asyncio":
        return asyncio.new_event_loop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    from blockio._loop import EpollEventLoop, UringEventLoop

    return UringEventLoop() if name.endswith("uring") else EpollEventLoop()


def workload(loop: asyncio.AbstractEventLoop, kind: str, n: int) -> None:
    """Runs ``n`` callbacks of workload ``kind`` on ``loop``."""
    done = loop.create_future()
    if kind == "tasks":

        async def task(k: int) -> None:
            for _ in range(k):
                await asyncio.sleep(0)

        async def main() -> None:
            await asyncio.gather(*(task(n // WIDTH) for _ in range(WIDTH)))

        loop.run_until_complete(main())
        return
    if kind == "sock":
        loop.run_until_complete(ping_pong(loop, n))
        return
    if kind == "sock-wait":
        loop.run_until_complete(back_and_forth(loop, n))
        return
    left = [n]
    later = kind == "timers"

    def step() -> None:
        left[0] -= 1
        if left[0] > 0:
            if later:
                loop.call_later(0, step)
            else:
                loop.call_soon(step)
        elif not done.done():
            done.set_result(None)

    for _ in range(1 if kind == "chain" else WIDTH):
        loop.call_soon(step)
    loop.run_until_complete(done)


async def ping_pong(loop: asyncio.AbstractEventLoop, n: int) -> None:
    """``n`` times ``sock_sendall`` of 64 bytes, then ``sock_recv`` of them."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        for _ in range(n):
            await loop.sock_sendall(b, b"x" * 64)
            await loop.sock_recv(a, 100)
    finally:
        a.close()
        b.close()


async def back_and_forth(loop: asyncio.AbstractEventLoop, n: int) -> None:
    """``n`` exchanges of 64 bytes between two coroutines on a socket pair,
    each waiting in ``sock_recv`` for the other's ``sock_sendall``."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def side(sock: socket.socket, first: bool, times: int) -> None:
        if first:
            await loop.sock_sendall(sock, b"x" * 64)
        for _ in range(times):
            await loop.sock_recv(sock, 100)
            await loop.sock_sendall(sock, b"x" * 64)

    try:
        await asyncio.gather(side(a, True, n // 2), side(b, False, n // 2))
    finally:
        a.close()
        b.close()


def child(name: str, kind: str, n: int) -> None:
    """Prints the CPU nanoseconds per callback of one measurement."""
    os.sched_setaffinity(0, {0})
    loop = make_loop(name)
    try:
        workload(loop, kind, n // 10)  # (warm-up)
        t0 = time.process_time_ns()
        workload(loop, kind, n)
        took = time.process_time_ns() - t0
    finally:
        loop.close()
    print(took / n)


def measure(name: str, kind: str, n: int, baseline: str | None) -> float:
    env = dict(os.environ)
    if name.startswith("blockio-base"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [baseline, env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, kind, str(n)],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    return float(out.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=400_000, help="callbacks per measurement")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--baseline", help="a directory with another build of blockio")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        name, kind, n = args.child
        child(name, kind, int(n))
        return
    names = list(CONTENDERS)
    if args.baseline:
        names[2:2] = ["blockio-base-uring", "blockio-base-epoll"]
    for kind in args.workloads.split(","):
        got: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                got[name].append(measure(name, kind, args.n, args.baseline))
        med = {name: statistics.median(v) for name, v in got.items()}
        bases = [b for b in ("blockio-base-uring", "blockio-base-epoll", "asyncio", "uvloop") if b in med]
        print(f"{kind} ({args.rounds} rounds, {args.n} callbacks each): ns CPU per callback, median (lowest-highest)")
        for name in names:
            ratios = "  ".join(f"/{b} {med[name] / med[b]:.2f}" for b in bases if b != name)
            print(f"  {name:20} {med[name]:7.1f} ({min(got[name]):.1f}-{max(got[name]):.1f})  {ratios}")


if __name__ == "__main__":
    main()
