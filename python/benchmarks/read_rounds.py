"""Summary of ``blockio-bench read`` rounds run one process per round, as
in ``docs/benchmarks.md`` ("The async API on ``scripts/bench``'s own file,
re-measured"): the ratios the async API and ``auto`` are held to, paired
within each round, as median (lowest-highest round), every figure
truncated to three decimals (never rounded up).

    python3 python/benchmarks/read_rounds.py DIR

``DIR`` holds ``warm.B.I.json`` and ``cold.B.I.json``, the ``--json``
output of build ``B``'s round ``I``: warm with ``--strategies
sync,uring,async --qd 64,256 --tasks 64,256``, cold with ``--strategies
sync,auto,pool-blocking,async --qd 1 --tasks 64``. A file that does not
parse (a round cut short) is left out and counted. For each build it
prints, over the rounds that have both rows of a ratio:

* warm ``async`` / ``uring`` IOPS at 64 and 256 tasks, and by CPU
  (``uring``'s CPU µs per read over ``async``'s), with the median CPU µs
  per read of ``async``, ``uring`` and ``sync``; and the same CPU ratio
  for the ``pread`` loop (``uring``'s over ``sync``'s), the bound of a
  read that is one system call of its own, and ``sync``'s over
  ``async``'s;
* cold ``async`` / ``pool-blocking`` (``spawn_blocking``) IOPS at 64
  tasks;
* cold ``auto`` / ``sync`` at one read in flight, by IOPS, by CPU (CPU
  µs per read of ``auto`` over ``sync``'s) and the p50 latency of each;
* the ``async`` rows' own CPU µs per read (warm, 64 and 256 tasks; cold,
  64) and cold IOPS.

With two builds, each of these per-round figures of the higher-numbered
build is also paired with the other's in the same round (build 1 over
build 0).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

Rows = Dict[Tuple[str, int], Dict[str, float]]


def trunc(x: float) -> str:
    """``x`` truncated (toward zero) to three decimals."""
    return f"{math.trunc(x * 1000) / 1000:.3f}"


def spread(values: List[float]) -> str:
    """Median (lowest-highest) of ``values``, truncated, and their count."""
    if not values:
        return "no rounds"
    v = sorted(values)
    return f"{trunc(statistics.median(v))} ({trunc(v[0])}-{trunc(v[-1])}) n={len(v)}"


def load(d: Path, kind: str, build: str) -> Tuple[Dict[int, Rows], int]:
    """Round number -> rows keyed by (strategy, qd), and the files skipped."""
    rounds: Dict[int, Rows] = {}
    bad = 0
    for f in d.glob(f"{kind}.{build}.*.json"):
        try:
            rows = json.loads(f.read_text())["rows"]
        except (ValueError, KeyError):
            bad += 1
            continue
        rounds[int(f.name.split(".")[2])] = {(r["strategy"], r["qd"]): r for r in rows}
    return rounds, bad


def ratio(r: Rows, a: Tuple[str, int], b: Tuple[str, int], key: str) -> Optional[float]:
    """``r[a][key] / r[b][key]`` where both rows ran and ``b``'s is not 0."""
    if a in r and b in r and r[b][key]:
        return r[a][key] / r[b][key]
    return None


def figures(warm: Dict[int, Rows], cold: Dict[int, Rows]) -> Dict[str, Dict[int, float]]:
    """Each named figure's value per round."""
    out: Dict[str, Dict[int, float]] = {}

    def put(name: str, rounds: Dict[int, Rows], a: Tuple[str, int], b: Tuple[str, int], key: str) -> None:
        for i, r in rounds.items():
            x = ratio(r, a, b, key)
            if x is not None:
                out.setdefault(name, {})[i] = x

    for t in (64, 256):
        put(f"warm async/uring {t} IOPS", warm, ("async", t), ("uring", t), "iops")
        put(f"warm uring/async {t} CPU per read", warm, ("uring", t), ("async", t), "cpu_us_per_op")
        # The bound of a read that is one system call of its own.
        put(f"warm uring/sync {t} CPU per read (the pread loop's bound)", warm, ("uring", t), ("sync", 1), "cpu_us_per_op")
        put(f"warm sync/async {t} CPU per read", warm, ("sync", 1), ("async", t), "cpu_us_per_op")
    put("cold async 64/spawn_blocking 64 IOPS", cold, ("async", 64), ("pool-blocking", 64), "iops")
    put("cold auto qd1/sync IOPS", cold, ("auto", 1), ("sync", 1), "iops")
    put("cold auto qd1/sync CPU per read", cold, ("auto", 1), ("sync", 1), "cpu_us_per_op")
    # Single rows, for the pairing of two builds.
    for name, rounds, row, key in (
        ("warm async 64 CPU us per read", warm, ("async", 64), "cpu_us_per_op"),
        ("warm async 256 CPU us per read", warm, ("async", 256), "cpu_us_per_op"),
        ("cold async 64 IOPS", cold, ("async", 64), "iops"),
        ("cold async 64 CPU us per read", cold, ("async", 64), "cpu_us_per_op"),
    ):
        for i, r in rounds.items():
            if row in r:
                out.setdefault(name, {})[i] = r[row][key]
    return out


def medians(rounds: Dict[int, Rows], key: str, rows: List[Tuple[str, int]]) -> str:
    """The median of ``key`` of each of ``rows`` over the rounds."""
    parts = []
    for row in rows:
        v = [r[row][key] for r in rounds.values() if row in r]
        parts.append(f"{row[0]} {row[1]}: {trunc(statistics.median(v)) if v else '-'}")
    return ", ".join(parts)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: read_rounds.py DIR")
    d = Path(sys.argv[1])
    if not d.is_dir():
        sys.exit(f"read_rounds.py: {d} is not a directory")
    builds = sorted({f.name.split(".")[1] for f in d.glob("*.*.*.json")})
    per_build: Dict[str, Dict[str, Dict[int, float]]] = {}
    for b in builds:
        warm, bad_w = load(d, "warm", b)
        cold, bad_c = load(d, "cold", b)
        per_build[b] = figures(warm, cold)
        print(f"== build {b} ({len(warm)} warm, {len(cold)} cold rounds; {bad_w + bad_c} files skipped)")
        for name, vals in per_build[b].items():
            print(f"{name}: {spread(list(vals.values()))}")
        print("warm CPU us per read, median:", medians(warm, "cpu_us_per_op", [("async", 64), ("uring", 64), ("sync", 1)]))
        print("cold CPU us per read, median:", medians(cold, "cpu_us_per_op", [("auto", 1), ("sync", 1)]))
        print("cold p50 us, median:", medians(cold, "p50_us", [("auto", 1), ("sync", 1)]))
    if len(builds) == 2:
        old, new = per_build[builds[0]], per_build[builds[1]]
        print(f"== build {builds[1]} / build {builds[0]}, paired by round")
        for name, base in old.items():
            other = new.get(name, {})
            both = [other[i] / x for i, x in base.items() if i in other and x]
            print(f"{name}: {spread(both)}")


if __name__ == "__main__":
    main()
