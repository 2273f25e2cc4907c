"""Cold buffered reads of the async API against fio's io_uring job at the
same depth, as in ``docs/benchmarks.md`` ("Cold async reads at 64 tasks
against fio's io_uring at depth 64"): each round runs ``blockio-bench read
--profiles cold --strategies pool-blocking,async --qd 1 --tasks 64`` once
per build (or configuration) ``B``, the order rotated every round, then
fio's io_uring job at depth 64 on the same file, buffered (``fio.0.I.json``)
and ``O_DIRECT`` (``fio.1.I.json``), each after ``--invalidate=1``.

    python3 python/benchmarks/cold_gap.py DIR NAME0 [NAME1 ...]

``DIR`` holds ``cold.B.I.json`` (``blockio-bench read --json``) for each
build ``B`` (0, 1, ... in the order of the names) and round ``I``, and
the two fio files of each round. Prints, as median (lowest-highest round),
every figure truncated to three decimals (never rounded up): fio's rates
and its CPU µs and context switches per read (from its own ``usr_cpu``,
``sys_cpu`` and ``ctx``); per build, the async rows' rate over
``spawn_blocking``'s (the same process) and over fio's buffered rate (the
same round), its rate, CPU µs and context switches per read; and each
build after the first over the first, paired by round.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from read_rounds import spread


def fio_round(f: Path) -> Optional[Dict[str, float]]:
    """fio's reads per second, CPU µs and context switches per read, or
    None (a missing file, or a job that made no read)."""
    try:
        job = json.loads(f.read_text())["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    iops = float(job["read"]["iops"])
    n = float(job["read"]["total_ios"])
    if not n or not iops:
        return None
    return {
        "iops": iops,
        # usr_cpu and sys_cpu are percent of one CPU over the run.
        "cpu_us": (float(job["usr_cpu"]) + float(job["sys_cpu"])) * 1e4 / iops,
        "ctx": float(job["ctx"]) / n,
    }


def bench_round(f: Path) -> Optional[Dict[str, Dict[str, Any]]]:
    """The ``async`` and ``pool-blocking`` rows of one bench run, or None."""
    try:
        rows = json.loads(f.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return None
    out = {r["strategy"]: r for r in rows if r["strategy"] in ("async", "pool-blocking")}
    return out if len(out) == 2 and out["async"]["ops"] else None


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: cold_gap.py DIR NAME0 [NAME1 ...]")
    d = Path(sys.argv[1])
    if not d.is_dir():
        sys.exit(f"cold_gap.py: {d} is not a directory")
    names = sys.argv[2:]
    figs: Dict[str, List[float]] = {}

    def add(name: str, x: float) -> None:
        figs.setdefault(name, []).append(x)

    rounds = sorted({int(f.name.split(".")[2]) for f in d.glob("fio.0.*.json")})
    used = 0
    for i in rounds:
        buf, direct = fio_round(d / f"fio.0.{i}.json"), fio_round(d / f"fio.1.{i}.json")
        runs = [bench_round(d / f"cold.{b}.{i}.json") for b in range(len(names))]
        if buf is None or direct is None or any(r is None for r in runs):
            continue
        used += 1
        add("fio buffered reads/s", buf["iops"])
        add("fio O_DIRECT reads/s", direct["iops"])
        add("fio buffered / fio O_DIRECT", buf["iops"] / direct["iops"])
        add("fio buffered CPU us per read", buf["cpu_us"])
        add("fio buffered context switches per read", buf["ctx"])
        first: Optional[Dict[str, Any]] = None
        for name, run in zip(names, runs):
            assert run is not None
            a, sb = run["async"], run["pool-blocking"]
            add(f"{name}: async / spawn_blocking", a["iops"] / sb["iops"])
            add(f"{name}: fio buffered / spawn_blocking", buf["iops"] / sb["iops"])
            add(f"{name}: fio O_DIRECT / spawn_blocking", direct["iops"] / sb["iops"])
            add(f"{name}: async / fio buffered", a["iops"] / buf["iops"])
            add(f"{name}: async reads/s", a["iops"])
            add(f"{name}: async CPU us per read", a["cpu_us_per_op"])
            add(f"{name}: async context switches per read", a["ctx_switches"] / a["ops"])
            if first is None:
                first = a
            else:
                add(f"{name} / {names[0]}: async reads/s", a["iops"] / first["iops"])
                add(
                    f"{name} / {names[0]}: async CPU per read",
                    a["cpu_us_per_op"] / first["cpu_us_per_op"],
                )
    print(f"{used} rounds with fio and every build's rows")
    for name, values in figs.items():
        print(f"{name}: {spread(values)}")


if __name__ == "__main__":
    main()
