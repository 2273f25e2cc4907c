"""The ceiling of ``auto`` at one read in flight on cold data, as in
``docs/benchmarks.md`` ("Cold ``auto`` at one read in flight against the
device"): each round is fio's ``psync`` job at depth 1 on the
cold file (its page cache dropped by fio's ``--invalidate=1``), then one
``blockio-bench read`` process with ``sync`` and ``auto`` at ``--qd 1``
on the same file (the order swapped every round).

    python3 python/benchmarks/cold_ceiling.py DIR

``DIR`` holds ``fio.I.json`` (fio's ``--output-format=json``) and
``cold.I.json`` (``blockio-bench read --json``) for each round ``I``.
Prints, as median (lowest-highest round), every figure truncated to three
decimals (never rounded up): fio's reads per second and mean latency
(µs) and median latency, ``sync``'s and ``auto``'s reads per second over fio's in the same
round, ``auto`` over ``sync``, fio's rate over the one of the round
before (the device's own drift from one round to the next, no program
changed), and ``auto``'s and ``sync``'s CPU µs per read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from read_rounds import spread, trunc


def fio_round(f: Path) -> Optional[Dict[str, float]]:
    """fio's reads per second, mean and median latency (µs), or None (a
    job that made no read: fio's error report)."""
    try:
        job = json.loads(f.read_text())["jobs"][0]["read"]
        if not job["total_ios"]:
            return None
        return {
            "iops": float(job["iops"]),
            "lat_us": float(job["lat_ns"]["mean"]) / 1000,
            "p50_us": float(job["clat_ns"]["percentile"]["50.000000"]) / 1000,
        }
    except (ValueError, KeyError, IndexError):
        return None


def bench_round(f: Path) -> Optional[Dict[str, Dict[str, Any]]]:
    """The one-thread, depth-1 rows of ``sync`` and ``auto``, or None."""
    try:
        rows = json.loads(f.read_text())["rows"]
    except (ValueError, KeyError):
        return None
    out: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        if r["strategy"] in ("sync", "auto") and r["qd"] == 1 and r.get("threads", 1) == 1:
            out.setdefault(r["strategy"], r)
    return out if len(out) == 2 else None


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: cold_ceiling.py DIR")
    d = Path(sys.argv[1])
    if not d.is_dir():
        sys.exit(f"cold_ceiling.py: {d} is not a directory")
    fio: Dict[int, Dict[str, float]] = {}
    bench: Dict[int, Dict[str, Dict[str, Any]]] = {}
    skipped = 0
    for f in d.glob("fio.*.json"):
        got = fio_round(f)
        if got is None:
            skipped += 1
        else:
            fio[int(f.name.split(".")[1])] = got
    for f in d.glob("cold.*.json"):
        rows = bench_round(f)
        if rows is None:
            skipped += 1
        else:
            bench[int(f.name.split(".")[1])] = rows
    both = sorted(set(fio) & set(bench))
    print(f"{len(both)} rounds with fio and both rows; {skipped} files skipped")
    figs: Dict[str, List[float]] = {
        "fio psync qd1 reads/s": [fio[i]["iops"] for i in both],
        "fio mean latency us": [fio[i]["lat_us"] for i in both],
        "1e6 / fio mean latency (reads/s)": [1e6 / fio[i]["lat_us"] for i in both],
        "fio p50 latency us": [fio[i]["p50_us"] for i in both],
        "sync / fio reads/s": [bench[i]["sync"]["iops"] / fio[i]["iops"] for i in both],
        "auto / fio reads/s": [bench[i]["auto"]["iops"] / fio[i]["iops"] for i in both],
        "auto / sync reads/s": [bench[i]["auto"]["iops"] / bench[i]["sync"]["iops"] for i in both],
        "fio / fio of the round before": [
            fio[i]["iops"] / fio[i - 1]["iops"] for i in both if i - 1 in fio
        ],
        "auto CPU us per read": [bench[i]["auto"]["cpu_us_per_op"] for i in both],
        "sync CPU us per read": [bench[i]["sync"]["cpu_us_per_op"] for i in both],
        "auto / sync CPU per read": [
            bench[i]["auto"]["cpu_us_per_op"] / bench[i]["sync"]["cpu_us_per_op"] for i in both
        ],
        "auto p50 us": [bench[i]["auto"]["p50_us"] for i in both if bench[i]["auto"]["p50_us"]],
        "sync p50 us": [bench[i]["sync"]["p50_us"] for i in both if bench[i]["sync"]["p50_us"]],
    }
    for name, values in figs.items():
        print(f"{name}: {spread(values)}")


if __name__ == "__main__":
    main()
