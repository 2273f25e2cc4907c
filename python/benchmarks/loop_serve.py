"""File serving over HTTP on event loops, side by side in one run (issue
63's workload 4): each request names one of a set of files of random
sizes (4-64 KiB); the server opens it, sends it whole with a
``Content-Length`` and closes it.

Contenders (each round a fresh server process per contender, in an order
rotated every round, pinned to CPU 0; ``wrk`` pinned to CPU 1):

* ``blockio-sendfile``: blockio's loop, ``blockio.open`` and
  ``loop.sendfile`` (``os.sendfile`` from the file to the socket);
* ``blockio-read``: blockio's loop, ``blockio.open`` and ``read()`` of
  the whole file, written to the transport;
* ``uvloop-aiofiles``: uvloop, ``aiofiles.open`` and ``read()``, written
  to the transport;
* ``blockio-sendfile-engine`` (only when asked for): ``blockio-sendfile``
  with the open through the engine's threads, as before it went on the
  loop's ring (the loop's ``_ring_open`` switched off in that process);
* ``asyncio-sendfile``: asyncio's default loop, the built-in ``open``
  (on the loop's thread) and ``loop.sendfile`` (``os.sendfile``).

Workloads: ``warm`` (the set read once before the round, so that every
page is cached) and ``cold`` (the set's pages dropped with
``posix_fadvise(DONTNEED)`` before the round; a file requested twice in
the round is cached the second time). Printed per contender: requests
per second (median of the rounds, lowest-highest), p99 latency (median),
the server's CPU time per request over the load (user + system, median
and lowest-highest: the loop's cost, also where ``wrk`` is the ceiling),
how busy the server was (``busy``: its CPU seconds, all its threads, per
second of the load, median) and how long its threads waited to run
(``waited``: seconds runnable but not running, summed over the threads
alive at the end, per second of the load, median): where other work
shares CPU 0, a server whose reads run on several threads gets more of
it than one whose loop's thread does all the work, and the rates follow
that share,
its system calls per request (``--syscalls``: ``perf stat``) and the
rate's ratio to ``uvloop-aiofiles`` (of the medians; lowest-highest of
the ratios within each round, then each round's ratio in order).
Before each round, the server's answers to a few requests are compared
byte for byte with the files.

    python python/benchmarks/loop_serve.py [--rounds 5] [--seconds 3]
        [--set-mib 1024] [--conns 50] [--workloads warm,cold] [--syscalls]
        [--dir /tmp/loop-serve] [--contenders blockio-sendfile,...]
        [--baseline DIR]

The set (``--set-mib`` MiB) is made in ``--dir`` and kept for later runs.
``--baseline DIR`` adds, for each blockio contender ``X`` named, a
contender ``X-base``: the same server with the ``blockio`` package
imported from ``DIR`` (a directory holding another build of it, put
first on the server's ``PYTHONPATH``), measured in the same rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop import cpu_seconds, perf_count, perf_syscalls, pin_client, rotated, start_server, wrk  # noqa: E402

CONTENDERS = ["blockio-sendfile", "blockio-read", "uvloop-aiofiles", "asyncio-sendfile"]
WORKLOADS = ["warm", "cold"]
LOW, HIGH = 4 << 10, 64 << 10


def make_set(d: Path, mib: int) -> int:
    """Makes (once) ``d/files/0..n-1`` of random sizes adding up to about
    ``mib`` MiB; returns ``n``."""
    files = d / "files"
    marker = d / f"set-{mib}"
    if marker.exists():
        return int(marker.read_text())
    files.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(4)
    total, n = 0, 0
    chunk = os.urandom(HIGH)
    while total < mib << 20:
        size = rnd.randint(LOW, HIGH)
        with open(files / str(n), "wb") as f:
            f.write(chunk[:size - 8] + n.to_bytes(8, "little"))
        total += size
        n += 1
    os.sync()
    marker.write_text(str(n))
    return n


def set_cache(d: Path, n: int, warm: bool) -> None:
    """Reads every file of the set (warm) or drops its pages (cold)."""
    for i in range(n):
        fd = os.open(d / "files" / str(i), os.O_RDONLY)
        try:
            if warm:
                while os.read(fd, 1 << 20):
                    pass
            else:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _header(size: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n" % size


def _new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name.startswith("blockio"):
        import blockio

        return blockio.new_event_loop()
    if name.startswith("uvloop"):
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _handler(name: str, root: str):  # type: ignore[no-untyped-def]
    """The connection handler of contender ``name``: serves ``GET /N``."""
    loop = asyncio.get_event_loop()

    def path_of(request: bytes) -> str:
        return os.path.join(root, request.split(b" ", 2)[1][1:].decode())

    if name in ("blockio-sendfile", "blockio-sendfile-engine"):
        import blockio

        if name == "blockio-sendfile-engine":
            # (opens through the engine's threads, as before they went on
            # the loop's ring: the loop's `_ring_open` switched off)
            from blockio._loop import UringEventLoop

            UringEventLoop._ring_open = None  # type: ignore[assignment]

        async def send(writer: asyncio.StreamWriter, path: str) -> None:
            async with blockio.open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                writer.write(_header(size))
                await loop.sendfile(writer.transport, f)  # type: ignore[arg-type]  # (typeshed: IO[bytes] only)
    elif name == "blockio-read":
        import blockio

        async def send(writer: asyncio.StreamWriter, path: str) -> None:
            async with blockio.open(path, "rb") as f:
                data = await f.read()
            writer.write(_header(len(data)) + data)
    elif name == "uvloop-aiofiles":
        import aiofiles  # type: ignore[import-untyped]

        async def send(writer: asyncio.StreamWriter, path: str) -> None:
            async with aiofiles.open(path, "rb") as f:
                data = await f.read()
            writer.write(_header(len(data)) + data)
    elif name == "asyncio-sendfile":

        async def send(writer: asyncio.StreamWriter, path: str) -> None:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                writer.write(_header(size))
                await loop.sendfile(writer.transport, f)
    else:
        raise SystemExit(f"no contender {name}")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                await send(writer, path_of(request))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return serve


def serve(name: str, root: str) -> None:
    """The server: prints its port, serves until a line on stdin."""
    os.sched_setaffinity(0, {0})
    loop = _new_loop(name)
    asyncio.set_event_loop(loop)

    async def main() -> None:
        server = await asyncio.start_server(_handler(name, root), "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        server.close()

    loop.run_until_complete(main())
    os._exit(0)


def check(port: int, root: Path, n: int) -> None:
    """Fails unless the server's answers to a few requests, on one
    keep-alive connection, are the files' bytes."""
    with socket.create_connection(("127.0.0.1", port)) as c:
        f = c.makefile("rb")
        for i in random.Random(n).sample(range(n), min(n, 20)):
            c.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += f.readline()
            size = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            body = f.read(size)
            if body != (root / "files" / str(i)).read_bytes():
                raise SystemExit(f"file {i} was served wrong ({len(body)} bytes)")


def run_queue_wait(pid: int) -> float:
    """The seconds the threads of process ``pid`` alive now have spent
    runnable but not running (``/proc/PID/task/*/schedstat``, its second
    field): time the scheduler gave to other work."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # (a thread gone meanwhile)
    return total / 1e9


def lua_script(d: Path, n: int) -> Path:
    """A wrk script asking for random files of the set."""
    p = d / f"random-{n}.lua"
    p.write_text(f'math.randomseed(os.time())\nrequest = function()\n'
                 f'  return wrk.format("GET", "/" .. math.random(0, {n - 1}))\nend\n')
    return p


def one_round(name: str, kind: str, n: int, args: argparse.Namespace) -> dict[str, float]:
    d = Path(args.dir)
    set_cache(d, n, kind == "warm")
    env = None
    if name.endswith("-base"):
        # (the same server, on the blockio package of --baseline)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [args.baseline, os.environ.get("PYTHONPATH")]))}
    server = start_server([sys.executable, __file__, "--serve", name.removesuffix("-base"), str(d / "files")], env)
    assert server.stdin is not None and server.stdout is not None
    port = int(server.stdout.readline())
    check(port, d, n)
    if kind == "cold":
        set_cache(d, n, False)
    perf = perf_syscalls(server.pid) if args.syscalls else None
    u0, s0 = cpu_seconds(server.pid)
    w0 = run_queue_wait(server.pid)
    reqs, took, p99, _ = wrk(port, args.conns, args.seconds, timeout=5.0, script=str(lua_script(d, n)))
    u1, s1 = cpu_seconds(server.pid)
    w1 = run_queue_wait(server.pid)
    calls = perf_count(perf) if perf else 0
    server.stdin.write("stop\n")
    server.stdin.flush()
    if server.wait() != 0:
        raise SystemExit(f"the {name} server failed")
    return {"rate": reqs / took, "p99": p99, "cpu": (u1 + s1 - u0 - s0) / reqs, "sys": (s1 - s0) / reqs,
            "calls": calls / reqs, "busy": (u1 + s1 - u0 - s0) / took, "waited": max(w1 - w0, 0.0) / took}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--set-mib", type=int, default=1024)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--syscalls", action="store_true")
    ap.add_argument("--dir", default="/tmp/loop-serve")
    ap.add_argument("--baseline", help="a directory with another build of blockio: adds X-base per blockio contender X")
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    pin_client()
    n = make_set(Path(args.dir), args.set_mib)
    names = args.contenders.split(",")
    if args.baseline:
        names += [f"{c}-base" for c in names if c.startswith("blockio")]
    print(f"{n} files, {args.set_mib} MiB, {args.conns} connections, {args.rounds} rounds of {args.seconds} s")
    for kind in args.workloads.split(","):
        got: dict[str, list[dict[str, float]]] = {c: [] for c in names}
        for r in range(args.rounds):
            for name in rotated(names, r):
                got[name].append(one_round(name, kind, n, args))
        base = [x["rate"] for x in got["uvloop-aiofiles"]] if "uvloop-aiofiles" in got else None
        print(kind)
        for name, rs in got.items():
            rate = [x["rate"] for x in rs]
            cpu = [x["cpu"] * 1e6 for x in rs]
            # (and the lowest-highest of the rounds' ratios, each of one
            # round's rates side by side)
            ratio = ""
            if base:
                each = [a / b for a, b in zip(rate, base)]
                ratio = (f"  x{statistics.median(rate) / statistics.median(base):.2f} uvloop-aiofiles"
                         f" ({min(each):.2f}-{max(each):.2f}; rounds {' '.join(f'{x:.2f}' for x in each)})")
            calls = f"  {statistics.median(x['calls'] for x in rs):5.2f} calls/req" if args.syscalls else ""
            print(f"  {name:22} {statistics.median(rate):8.0f}/s ({min(rate):.0f}-{max(rate):.0f})  "
                  f"p99 {statistics.median(x['p99'] for x in rs) * 1e3:6.2f} ms  "
                  f"CPU {statistics.median(cpu):6.1f} us/req ({min(cpu):.1f}-{max(cpu):.1f}, "
                  f"sys {statistics.median(x['sys'] for x in rs) * 1e6:5.1f}){calls}  "
                  f"busy {statistics.median(x['busy'] for x in rs):.2f} "
                  f"waited {statistics.median(x['waited'] for x in rs):.2f}{ratio}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
