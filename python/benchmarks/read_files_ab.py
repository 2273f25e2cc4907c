"""``Engine.read_files`` cold, side by side with another build of the
package and with thread pools of ``Path.read_bytes``, in one process.

The tree is ``peers.py``'s (``--files`` files of 4-64 KiB under
``--tree``); every file is evicted with ``posix_fadvise(DONTNEED)`` before
each contender (never the machine-wide ``drop_caches``), the contenders run
in alternating order round after round, and each result's total length is
checked. ``--against`` names another build's ``_blockio`` extension module
(a ``.so`` file, for example one installed from an earlier commit's wheel
in another venv): its ``read_files`` runs in the same rounds, so a change
is measured under the same load as what it replaces. ``--threads`` gives
the sizes of the thread pools; their best is what the device gives to
threads alone.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List

import blockio
from bench import evict
from peers import make_tree, spread


def other_build(so: str) -> Any:
    """The core of another build of the extension module, loaded under its
    own module name so that it lives beside the installed one."""
    loader = importlib.machinery.ExtensionFileLoader("_blockio", so)
    spec = importlib.util.spec_from_file_location("_blockio", so, loader=loader)
    if spec is None:
        raise SystemExit(f"read_files_ab: cannot load {so}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module.Core(256, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default="bench-data/py-tree")
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--against", metavar="SO", help="another build's _blockio extension module")
    ap.add_argument("--threads", default="8", help="thread pool sizes, comma-separated (default 8)")
    ap.add_argument("--loop", action="store_true", help="also a plain loop of read_bytes")
    args = ap.parse_args()
    sizes = [int(t) for t in args.threads.split(",") if t]
    if args.rounds < 1 or args.files < 1 or not sizes or min(sizes) < 1:
        ap.error("--rounds and --files must be at least 1, --threads positive integers")
    paths = make_tree(Path(args.tree), args.files)
    raw = [os.fsencode(p) for p in paths]
    e = blockio.Engine()
    runs: Dict[str, Callable[[], List[bytes]]] = {"Engine.read_files": lambda: e.read_files(paths)}
    if args.against:
        old = other_build(args.against)
        runs["Engine.read_files (--against)"] = lambda: old.read_files(raw)[0]
    pools = {n: ThreadPoolExecutor(n) for n in sizes}
    for n, pool in pools.items():
        runs[f"ThreadPoolExecutor({n}) read_bytes"] = lambda pool=pool: list(pool.map(Path.read_bytes, paths))
    if args.loop:
        runs["loop of read_bytes"] = lambda: [p.read_bytes() for p in paths]
    total = sum(p.stat().st_size for p in paths)
    res: Dict[str, List[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        order = list(runs.items())
        if r % 2:
            order.reverse()
        for name, fn in order:
            for p in paths:
                evict(str(p))
            start = time.perf_counter()
            out = fn()
            res[name].append(len(paths) / (time.perf_counter() - start))
            if len(out) != len(paths) or sum(map(len, out)) != total:
                raise SystemExit(f"read_files_ab: {name} read {sum(map(len, out))} bytes of {total}")
    print(f"read_files, cold: {len(paths)} files of 4-64 KiB ({total >> 20} MiB); files/s, median "
          f"(lowest-highest) of {args.rounds} alternating rounds")
    for name in runs:
        print(f"  {name:<34} {spread(res[name])}")
    pool8 = statistics.median(res[f"ThreadPoolExecutor({sizes[0]}) read_bytes"])
    for name in [k for k in runs if k.startswith("Engine")]:
        print(f"  {name} / thread pool of {sizes[0]}: {statistics.median(res[name]) / pool8:.2f}")
    for pool in pools.values():
        pool.shutdown()
    e.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
