"""Files open and written at once under a descriptor limit
(``RLIMIT_NOFILE``), ``blockio.open`` against ``aiofiles.open``: each run
is a child process that lowers its soft limit to ``--limit``, opens
``--files`` files in a fresh directory at once, writes 64 KiB to each at
once, closes them, and counts the opens and writes that failed and the
files that hold their bytes. A count, not a time: one run says it.
``--one`` instead counts the descriptors open at most (``/proc/self/fd``,
checked after each step) while one file is opened, written, closed,
opened again, read and closed, and the kinds of those the library added
(the file's own, the engine's).

    .venv/bin/python python/benchmarks/descriptor_limit.py --files 600 1000
    BLOCKIO_BACKEND=threads .venv/bin/python python/benchmarks/descriptor_limit.py
    .venv/bin/python python/benchmarks/descriptor_limit.py --one
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap

CHILD = """
import asyncio, os, resource, sys, tempfile
lib, n, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
if lib == "blockio":
    from blockio import open as opener
else:
    from aiofiles import open as opener
d = tempfile.mkdtemp()
paths = [os.path.join(d, f"f{i}") for i in range(n)]

async def main():
    fs = await asyncio.gather(*(opener(p, "wb") for p in paths), return_exceptions=True)
    opened = [f for f in fs if not isinstance(f, BaseException)]
    got = await asyncio.gather(*(f.write(b"x" * 65536) for f in opened), return_exceptions=True)
    await asyncio.gather(*(f.close() for f in opened), return_exceptions=True)
    whole = sum(os.path.exists(p) and os.path.getsize(p) == 65536 for p in paths)
    print(n - len(opened), sum(g != 65536 for g in got), whole)

asyncio.run(main())
"""

ONE = """
import asyncio, collections, os, sys, tempfile
lib = sys.argv[1]
if lib == "blockio":
    from blockio import open as opener
else:
    from aiofiles import open as opener
peak, seen = 0, {}

def step():
    global peak
    fds = os.listdir("/proc/self/fd")
    peak = max(peak, len(fds) - 1)  # (less the listing's own)
    for n in fds:
        try:
            seen.setdefault(int(n), os.readlink(f"/proc/self/fd/{n}"))
        except OSError:
            pass

async def main():
    p = os.path.join(tempfile.mkdtemp(), "one")
    step()
    before = set(seen)
    f = await opener(p, "wb"); step()
    await f.write(b"x" * 1000); step()
    await f.close(); step()
    f = await opener(p, "rb"); step()
    assert await f.read() == b"x" * 1000; step()
    await f.close(); step()
    kinds = collections.Counter(seen[n][len("anon_inode:"):] if seen[n].startswith("anon_inode:") else "file"
                                for n in set(seen) - before)
    print(peak, ",".join(f"{k}x{c}" for k, c in sorted(kinds.items())))

asyncio.run(main())
"""


def one() -> None:
    print(f"{'library':10} {'most open':>10}  added")
    for lib in ("blockio", "aiofiles"):
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(ONE), lib], capture_output=True, text=True,
                             timeout=600, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            print(f"{lib:10} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        most, added = out.stdout.split()
        print(f"{lib:10} {most:>10}  {added}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[600, 1000])
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument("--one", action="store_true", help="the descriptors one file's calls take")
    args = ap.parse_args()
    if args.one:
        one()
        return
    print(f"{'library':10} {'files':>6} {'open failed':>12} {'write failed':>13} {'written whole':>14}")
    for n in args.files:
        for lib in ("blockio", "aiofiles"):
            out = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), lib, str(n), str(args.limit)],
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                print(f"{lib:10} {n:>6} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            failed_open, failed_write, whole = out.stdout.split()
            print(f"{lib:10} {n:>6} {failed_open:>12} {failed_write:>13} {whole:>14}")


if __name__ == "__main__":
    main()
