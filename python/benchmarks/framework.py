"""aiohttp's web server on asyncio's default loop, uvloop and blockio's
loop, side by side in one run: the application of
``python/tests/framework/server.py`` under ``wrk``.

Workloads (``--workloads``): ``fixed`` (``GET /fixed``, a 13-byte body)
and ``static-1m`` (``GET /static/1m``, a 1 MiB file through
``web.FileResponse``: ``loop.sendfile`` on asyncio's and blockio's loops;
aiohttp's own read-and-write copy on uvloop, whose ``loop.sendfile``
raises ``NotImplementedError``), at ``--conns`` keep-alive connections.

Each round starts a fresh server process per loop, in an order rotated
every round, pinned to CPU 0; ``wrk`` (one thread) is pinned to CPU 1.
Printed per workload and loop: requests per second, median of the rounds
and lowest-highest, p99 latency (median of the rounds, wrk's), the
server's CPU time per request over the load (user + system, from
``/proc/PID/stat``), its system calls per request (``perf stat -e
raw_syscalls:sys_enter`` on the server while the load runs, with
``--syscalls``), and the rate's ratio to uvloop and to asyncio.

Runs in the framework test's venv (aiohttp, uvloop and blockio's wheel:
``python3 python/tests/framework/run.py`` makes it), which also holds the
files served::

    target/framework-tests/venv/bin/python python/benchmarks/framework.py \\
        [--rounds 5] [--seconds 2] [--conns 50] [--workloads fixed,static-1m] \\
        [--loops asyncio,uvloop,blockio] [--syscalls]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# loop.py's server start, CPU pinning, wrk run and counts, shared.
from loop import cpu_seconds, perf_count, perf_syscalls, pin_client, rotated, start_server, wrk

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "python" / "tests" / "framework" / "server.py"
FILES = ROOT / "target" / "framework-tests" / "data" / "files"
PATHS = {"fixed": "/fixed", "static-1m": "/static/1m"}


def one_round(loop: str, workload: str, args: argparse.Namespace) -> dict[str, float]:
    """The figures of one fresh server process under one load; fails on
    any socket error, status other than 2xx/3xx, or response slower than
    10 s."""
    server = start_server([sys.executable, str(SERVER), loop, str(FILES)])
    assert server.stdin is not None and server.stdout is not None
    info = json.loads(server.stdout.readline())
    if loop == "blockio" and info["backend"] != "uring":
        raise SystemExit(f"blockio's loop runs on {info['backend']}, not io_uring")
    perf = perf_syscalls(server.pid) if args.syscalls else None
    before = sum(cpu_seconds(server.pid))
    n, took, p99, timeouts = wrk(info["port"], args.conns, args.seconds, PATHS[workload], timeout=10)
    if timeouts:
        raise SystemExit(f"wrk: {timeouts} responses of the {loop} server took over 10 s")
    cpu = sum(cpu_seconds(server.pid)) - before
    calls = perf_count(perf) if perf else 0
    server.stdin.write("stop\n")
    server.stdin.flush()
    server.stdout.readline()
    if server.wait() != 0:
        raise SystemExit(f"the {loop} server failed")
    return {"rate": n / took, "p99": p99, "cpu": cpu / n, "calls": calls / n}


def _report(title: str, got: dict[str, list[dict[str, float]]]) -> None:
    print(title)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in got.items()}
    for n, rs in got.items():
        rates = [r["rate"] for r in rs]
        m = med[n]
        ratio = "  ".join(f"x{m['rate'] / med[o]['rate']:.2f} {o}" for o in ("uvloop", "asyncio") if o in med)
        calls = f"  {m['calls']:5.2f} calls/req" if m["calls"] else ""
        print(f"  {n:8} {m['rate']:8.0f}/s ({min(rates):.0f}-{max(rates):.0f})  p99 {m['p99'] * 1e3:7.2f} ms  "
              f"CPU {m['cpu'] * 1e6:6.1f} us/req{calls}  {ratio}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=2)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--workloads", default=",".join(PATHS))
    ap.add_argument("--loops", default="asyncio,uvloop,blockio")
    ap.add_argument("--syscalls", action="store_true", help="count the server's system calls with perf")
    args = ap.parse_args()
    if not (FILES / "1m").exists():
        raise SystemExit(f"no {FILES / '1m'}: run python3 python/tests/framework/run.py first")
    pin_client()
    loops = args.loops.split(",")
    for workload in args.workloads.split(","):
        if workload not in PATHS:
            raise SystemExit(f"--workloads: unknown workload {workload!r} (expected {', '.join(PATHS)})")
        got: dict[str, list[dict[str, float]]] = {n: [] for n in loops}
        for r in range(args.rounds):
            for name in rotated(loops, r):
                got[name].append(one_round(name, workload, args))
        _report(f"aiohttp {workload}, {args.conns} connections, {args.rounds} rounds of {args.seconds} s", got)


if __name__ == "__main__":
    main()
