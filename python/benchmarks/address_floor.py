"""The lowest limit on address space (``ulimit -v``, ``RLIMIT_AS``) a whole
program runs under, ``blockio.open`` on both backends against
``aiofiles.open``.

Each trial is a fresh child process that sets its ``RLIMIT_AS`` to the
limit first, then imports the library and runs one workload under
``asyncio.run``:

* ``1mib``: 20 tasks at once, each writes 1 MiB of its own bytes to a file
  of its own, then opens it again and reads it back;
* ``small``: the same with 200 tasks and 1 KiB files;
* ``aread``: 20 files of 1 MiB written with ``os.write``, then read by 20
  tasks at once with ``blockio.default_engine().aread`` (blockio only).

A trial passes when the child exits 0 having read back every byte it
wrote. Otherwise it is counted as one of: ``error`` (a Python exception
the program caught; the first is shown), ``crash`` (the child died of a
signal or exited non-zero without saying why) or ``hang`` (no exit within
``--timeout`` seconds). Per limit the table gives the trials that passed
out of ``--trials``, and per contender the *floor*: the lowest tested
limit from which every higher tested limit passed every trial.

    .venv/bin/python python/benchmarks/address_floor.py
    .venv/bin/python python/benchmarks/address_floor.py --limits 150 200 300 --trials 5 --json
    .venv/bin/python python/benchmarks/address_floor.py --contenders blockio-uring --workloads 1mib --show

``--show`` prints each failure's message. The pass counts are counts,
not times: the machine being busy changes nothing but how long the ladder
takes.

``--cost ROUNDS`` instead runs each blockio workload at ``--limits``'
highest limit, alternating blockio's own arena bound with glibc's default
bound, 8 arenas per CPU (``GLIBC_TUNABLES=glibc.malloc.arena_max=``
8 × ``os.cpu_count()``, which blockio leaves in place), and prints the
child's CPU time (user + system), median (lowest-highest). blockio bounds
the arenas only under a limit below 8 × CPUs × 64 MiB plus what the
process maps, so the limit must be below 8 × CPUs × 64 MiB (and high
enough for glibc's own arenas; 1000 MiB on 2 CPUs):

    .venv/bin/python python/benchmarks/address_floor.py --cost 9 --limits 1000 --workloads 1mib small
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

CONTENDERS = ["blockio-uring", "blockio-threads", "aiofiles"]
WORKLOADS = ["1mib", "small", "aread"]
LIMITS = [150, 200, 250, 300, 350, 400, 450, 500, 550, 600, 700, 800, 1000, 1400]

CHILD = r"""
import os, resource, sys
lib, work, mib, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
resource.setrlimit(resource.RLIMIT_AS, (mib << 20, resource.getrlimit(resource.RLIMIT_AS)[1]))

def payload(i, size):
    stamp = b"%06d." % i
    return (stamp * (size // len(stamp) + 1))[:size]

def main():
    import asyncio
    if lib == "aiofiles":
        from aiofiles import open as opener
    else:
        import blockio
        opener = blockio.open
    tasks, size = (200, 1024) if work == "small" else (20, 1 << 20)

    async def one(i):
        p = os.path.join(d, "f%d" % i)
        async with opener(p, "wb") as f:
            await f.write(payload(i, size))
        async with opener(p, "rb") as f:
            return await f.read()

    async def by_aread(i):
        fd = os.open(os.path.join(d, "f%d" % i), os.O_RDONLY)
        try:
            return await blockio.default_engine().aread(fd, offset=0, length=size)
        finally:
            os.close(fd)

    if work == "aread":
        for i in range(tasks):
            with open(os.path.join(d, "f%d" % i), "wb") as f:
                f.write(payload(i, size))
        run = by_aread
    else:
        run = one

    async def all_of_them():
        return await asyncio.gather(*(run(i) for i in range(tasks)), return_exceptions=True)

    got = asyncio.run(all_of_them())
    bad = [(i, g) for i, g in enumerate(got) if g != payload(i, size)]
    if bad:
        i, g = bad[0]
        what = repr(g) if isinstance(g, BaseException) else "task %d read back %d bytes, not its own" % (i, len(g))
        print("%d of %d tasks failed; first: %s" % (len(bad), tasks, what))
        sys.exit(1)
    print("ok")

try:
    main()
except SystemExit:
    raise
except BaseException as e:
    print("raised %r" % (e,))
    sys.exit(1)
"""


def trial(contender: str, work: str, mib: int, timeout: float,
          tunables: Optional[str] = None) -> Dict[str, str]:
    """One child process, with ``tunables`` added to its ``GLIBC_TUNABLES``
    if given; its outcome (``pass``, ``error``, ``crash`` or ``hang``) and
    what it printed."""
    lib = "aiofiles" if contender == "aiofiles" else "blockio"
    env = dict(os.environ)
    if tunables is not None:
        env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), tunables) if t)
    if contender == "blockio-threads":
        env["BLOCKIO_BACKEND"] = "threads"
    else:
        env.pop("BLOCKIO_BACKEND", None)
    with tempfile.TemporaryDirectory() as d:
        try:
            out = subprocess.run([sys.executable, "-c", CHILD, lib, work, str(mib), d],
                                 capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"outcome": "hang", "message": f"no exit within {timeout} s"}
    said = (out.stdout.strip().splitlines() or [""])[-1]
    if out.returncode == 0 and said == "ok":
        return {"outcome": "pass", "message": ""}
    if out.returncode == 1 and said:
        return {"outcome": "error", "message": said}
    tail = " / ".join(out.stderr.strip().splitlines()[-3:])
    return {"outcome": "crash", "message": f"exit status {out.returncode}: {tail}"}


def glibc_arena_max() -> int:
    """glibc's default bound on arenas on a 64-bit target: 8 per CPU."""
    return 8 * (os.cpu_count() or 1)


def cost(contender: str, work: str, mib: int, rounds: int) -> Dict[str, List[float]]:
    """CPU seconds of each trial, with blockio's arena bound and with
    glibc's own, alternated."""
    import resource
    glibc = f"arena_max={glibc_arena_max()}"
    got: Dict[str, List[float]] = {"bound": [], glibc: []}
    for _ in range(rounds):
        for name, times in got.items():
            tunables = f"glibc.malloc.{glibc}" if name == glibc else None
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            outcome = trial(contender, work, mib, 60.0, tunables)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if outcome["outcome"] != "pass":
                raise SystemExit(f"{work} {contender} {name} at {mib} MiB: {outcome}")
            times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return got


def floor(passes: Dict[int, int], trials: int) -> Optional[int]:
    """The lowest limit from which every higher tested limit passed every
    trial; None if the highest did not."""
    best = None
    for mib in sorted(passes, reverse=True):
        if passes[mib] != trials:
            break
        best = mib
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limits", type=int, nargs="+", default=LIMITS, help="limits to test, MiB")
    ap.add_argument("--trials", type=int, default=3, help="child processes per limit")
    ap.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    ap.add_argument("--workloads", nargs="+", default=WORKLOADS, choices=WORKLOADS)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a trial counts as a hang")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--show", action="store_true", help="print each failure's message")
    ap.add_argument("--cost", type=int, metavar="ROUNDS",
                    help="compare the CPU time with and without blockio's arena bound instead")
    args = ap.parse_args()
    if args.trials < 1:
        ap.error(f"--trials must be at least 1, not {args.trials}")
    if any(m < 1 for m in args.limits):
        ap.error(f"--limits must be positive MiB, not {args.limits}")
    limits = sorted(set(args.limits))
    if args.cost is not None:
        if args.cost < 1:
            ap.error(f"--cost must be at least 1 round, not {args.cost}")
        room = glibc_arena_max() * 64
        if limits[-1] >= room:
            ap.error(f"--cost needs --limits below {room} MiB (8 x CPUs x 64 MiB), where blockio "
                     f"bounds the arenas, not {limits[-1]}")
        for work in args.workloads:
            for contender in args.contenders:
                if contender == "aiofiles":
                    continue
                for name, t in cost(contender, work, limits[-1], args.cost).items():
                    print(f"{work} {contender} {name}: CPU {statistics.median(t) * 1e3:.0f} ms "
                          f"({min(t) * 1e3:.0f}-{max(t) * 1e3:.0f}), {len(t)} rounds")
        return
    results: List[Dict[str, object]] = []
    for work in args.workloads:
        for contender in args.contenders:
            if work == "aread" and contender == "aiofiles":
                continue
            passes: Dict[int, int] = {}
            failures: Dict[int, List[Dict[str, str]]] = {}
            # Trials interleaved over the limits, so a busy spell on the
            # machine does not fall on one limit's trials only.
            for _ in range(args.trials):
                for mib in limits:
                    got = trial(contender, work, mib, args.timeout)
                    passes[mib] = passes.get(mib, 0) + (got["outcome"] == "pass")
                    if got["outcome"] != "pass":
                        failures.setdefault(mib, []).append(got)
                        if args.show and not args.json:
                            print(f"  {work} {contender} {mib} MiB: {got['outcome']}: {got['message']}",
                                  file=sys.stderr)
            results.append({"workload": work, "contender": contender, "trials": args.trials,
                            "passes": {str(m): passes[m] for m in limits},
                            "floor": floor(passes, args.trials),
                            "failures": {str(m): f for m, f in failures.items()}})
    if not results:
        ap.error("nothing to run: aiofiles has no aread workload")
    if args.json:
        print(json.dumps({"limits_mib": limits, "results": results}, indent=1))
        return
    width = max(len(f"{r['workload']} {r['contender']}") for r in results)
    print(f"{'limit (MiB)':<{width}} | " + " | ".join(f"{m:>4}" for m in limits) + " | floor")
    for r in results:
        row = r["passes"]
        assert isinstance(row, dict)
        name = f"{r['workload']} {r['contender']}"
        print(f"{name:<{width}} | "
              + " | ".join(f"{row[str(m)]:>4}" for m in limits) + f" | {r['floor']}")
    print(f"(trials passed of {args.trials} per limit; floor: the lowest limit from which every "
          "higher one passed every trial)")


if __name__ == "__main__":
    main()
