"""The loop's own cost of serving a file the page cache does not hold with
``loop.sendfile``, as ``loop_serve.py``'s ``blockio-sendfile`` server
does per request (``blockio.open``, ``fstat``, the header's
``transport.write``, ``loop.sendfile``, the close), in one process per
build with no load generator beside it: the Python calls per request
(``sys.setprofile``'s ``call`` events: exact, whatever the machine does)
and the loop thread's CPU time per request (``time.thread_time``).

Each round runs, per build, a fresh process that serves ``--files``
files of 4-64 KiB (their pages dropped first, each file served once) to
a transport whose peer a thread reads; once counting calls, once timing
(other files). ``--baseline DIR`` adds the ``blockio`` package in ``DIR``
as build ``base``, run in the same rounds, the order alternated every
round. Printed per build: calls per request, CPU us per request (median
of the rounds, lowest-highest), and this build's ratio to ``base``.

    python python/benchmarks/loop_sendfile_cold.py [--rounds 5] [--files 300]
        [--dir /var/tmp/loop-sendfile-cold] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def _make(d: Path, n: int) -> list[Path]:
    """``n`` files of random sizes (4-64 KiB) in ``d``, made once."""
    d.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(7)
    paths = []
    for i in range(n):
        p = d / str(i)
        if not p.exists():
            p.write_bytes(rnd.randbytes(rnd.randint(4 << 10, 64 << 10)))
        paths.append(p)
    os.sync()
    return paths


def _drop(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _child(paths: list[Path], profile: bool) -> dict[str, float]:
    """Serves ``paths`` on blockio's loop; calls or CPU per request."""
    import blockio

    loop = blockio.new_event_loop()
    asyncio.set_event_loop(loop)
    header = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"

    async def main() -> dict[str, float]:
        ls = socket.create_server(("127.0.0.1", 0))
        t, _ = await loop.create_connection(asyncio.Protocol, *ls.getsockname())
        peer, _ = ls.accept()
        ls.close()
        total = sum(p.stat().st_size for p in paths)

        def drain() -> None:
            left = total + sum(len(header % p.stat().st_size) for p in paths)
            while left > 0:
                left -= len(peer.recv(1 << 20))

        reader = threading.Thread(target=drain)
        reader.start()
        calls = 0

        def count(frame: object, event: str, arg: object) -> None:
            nonlocal calls
            if event == "call":
                calls += 1

        start = time.thread_time()
        if profile:
            sys.setprofile(count)
        for p in paths:
            async with blockio.open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                t.write(header % size)
                await loop.sendfile(t, f)  # type: ignore[arg-type]
        sys.setprofile(None)
        cpu = time.thread_time() - start
        await loop.run_in_executor(None, reader.join)
        t.close()
        return {"calls": calls / len(paths), "cpu": cpu / len(paths) * 1e6}

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--dir", default="/var/tmp/loop-sendfile-cold")
    ap.add_argument("--baseline")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        first, profile = map(int, args.child)
        paths = [Path(args.dir) / str(i) for i in range(first, first + args.files)]
        print(json.dumps(_child(paths, bool(profile))))
        return
    builds = [("this", None)] + ([("base", args.baseline)] if args.baseline else [])
    per_round = len(builds) * 2 * args.files
    paths = _make(Path(args.dir), per_round)
    got: dict[str, dict[str, list[float]]] = {b: {"calls": [], "cpu": []} for b, _ in builds}
    for r in range(args.rounds):
        _drop(paths)
        order = builds if r % 2 == 0 else builds[::-1]
        for k, (name, base) in enumerate(order):
            env = dict(os.environ)
            if base:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [base, env.get("PYTHONPATH")]))
            for profile in (1, 0):
                first = (2 * k + profile) * args.files
                out = subprocess.run([sys.executable, __file__, "--dir", args.dir, "--files", str(args.files),
                                      "--child", str(first), str(profile)],
                                     env=env, check=True, capture_output=True, text=True).stdout
                key = "calls" if profile else "cpu"
                got[name][key].append(json.loads(out)[key])
    print(f"{args.files} cold files of 4-64 KiB per process, {args.rounds} rounds")
    for name, xs in got.items():
        calls, cpu = xs["calls"], xs["cpu"]
        line = (f"  {name:5} {statistics.median(calls):7.1f} calls/req ({min(calls):.1f}-{max(calls):.1f})"
                f"  CPU {statistics.median(cpu):6.1f} us/req ({min(cpu):.1f}-{max(cpu):.1f})")
        if name != "base" and "base" in got:
            b = got["base"]
            ratios = [a / c for a, c in zip(cpu, b["cpu"])]
            line += (f"  calls x{statistics.median(calls) / statistics.median(b['calls']):.3f},"
                     f" CPU x{statistics.median(cpu) / statistics.median(b['cpu']):.3f}"
                     f" ({min(ratios):.3f}-{max(ratios):.3f}) of base")
        print(line)


if __name__ == "__main__":
    main()
