"""Servers on four event loops, side by side in one run: asyncio's default
loop, uvloop, rloop (when installed: ``pip install rloop==0.5.0``) and
blockio's (``blockio.new_event_loop``).

Workloads (``--workloads``):

- ``echo-protocol``, ``echo-streams``, ``echo-sock``: a TCP echo server
  written as an ``asyncio.Protocol``, with asyncio's streams
  (``start_server``, ``read``/``write``/``drain``), and with the loop's
  ``sock_accept``/``sock_recv``/``sock_sendall``; ``--sizes`` bytes per
  message, ``--conns`` connections, each with one message in flight. The
  client (this process, on uvloop when installed) checks the length of
  every echo and times each round trip (p99).
- ``http-protocol``, ``http-streams``: a fixed 13-byte HTTP/1.1 body,
  keep-alive, from a ``Protocol`` and from a streams server
  (``readuntil``); ``wrk`` at ``--http-conns`` connections (one thread)
  is the client, and gives the p99.
- ``http-idle``: ``http-protocol`` at ``--http-conns`` connections beside
  ``--idle`` idle connections (opened before the load, held through it,
  nothing sent on them).

Each round starts a fresh server process per loop, in an order rotated
every round, pinned to CPU 0; the client is pinned to CPU 1. Printed per
workload and loop: requests (messages) per second, median of the rounds
and lowest-highest, p99 latency (median of the rounds), the server's CPU
time per request (user + system over the requests it served: the loop's
cost, also where the client is the ceiling; in brackets the CPU of the
load alone, without the server's start and the idle connections' setup,
read from ``/proc/PID/stat`` before and after it, and the system part of
that; for ``http-idle``, the server's CPU per idle connection while they
were set up: accept, transport, one request), its peak RSS, its system
calls per request (``perf stat -e raw_syscalls:sys_enter`` on the server
while the load runs, with ``--syscalls``), and the rate's ratio to uvloop
and to asyncio.

    python python/benchmarks/loop.py [--rounds 3] [--seconds 2] [--syscalls]
        [--workloads echo-protocol,http-protocol] [--sizes 1024,10240,102400]
        [--conns 1,50,500] [--http-conns 50,1000] [--idle 10000]
        [--loops asyncio,uvloop,rloop,blockio] [--baseline DIR]

``--baseline DIR`` adds a contender, ``blockio-base``: blockio's loop
imported from ``DIR`` (a directory holding another build of the
``blockio`` package, put first on the server's ``PYTHONPATH``), so that
two versions of the loop are measured side by side in the same rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time

LOOPS = ("asyncio", "uvloop", "rloop", "blockio")
ECHO = ("echo-protocol", "echo-streams", "echo-sock")
HTTP = ("http-protocol", "http-streams")
#: Workloads with idle connections beside the load, and the server each runs.
IDLE = {"http-idle": "http-protocol"}
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, world!"


def _new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name == "rloop":
        import rloop  # type: ignore[import-untyped]

        loop: asyncio.AbstractEventLoop = rloop.new_event_loop()
        return loop
    if name in ("blockio", "blockio-base"):
        import blockio

        return blockio.new_event_loop()
    return asyncio.new_event_loop()


def _available(name: str) -> bool:
    try:
        _new_loop(name).close()
    except ImportError:
        return False
    return True


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


class _Http(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        data = self.pending + data
        n = data.count(b"\r\n\r\n")
        self.pending = data[data.rfind(b"\r\n\r\n") + 4 :] if n else data
        if n:
            self.transport.write(RESPONSE * n)  # type: ignore[attr-defined]


async def _echo_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _http_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


async def _start(loop: asyncio.AbstractEventLoop, kind: str) -> tuple[int, object]:
    """Starts the ``kind`` server; (its port, what keeps it)."""
    if kind in ("echo-protocol", "http-protocol"):
        server = await loop.create_server(_Echo if kind == "echo-protocol" else _Http, "127.0.0.1", 0, backlog=4096)
        return server.sockets[0].getsockname()[1], server
    if kind in ("echo-streams", "http-streams"):
        handler = _echo_stream if kind == "echo-streams" else _http_stream
        server = await asyncio.start_server(handler, "127.0.0.1", 0, backlog=4096)
        return server.sockets[0].getsockname()[1], server
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    listener.setblocking(False)

    async def conn(c: socket.socket) -> None:
        with c:
            while data := await loop.sock_recv(c, 65536):
                await loop.sock_sendall(c, data)

    async def accept() -> None:
        while True:
            c, _ = await loop.sock_accept(listener)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            loop.create_task(conn(c))

    return listener.getsockname()[1], loop.create_task(accept())


def _peak_rss_kib() -> int:
    """This process's peak RSS since its exec (``VmHWM``; ``ru_maxrss``
    would be the forking client's, which the exec keeps)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit("no VmHWM in /proc/self/status")


def _all_descriptors() -> None:
    """Raises the soft descriptor limit to the hard one (idle connections)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


#: The CPU the servers run on, and the one the client (wrk or the echo
#: client) runs on.
SERVER_CPU, CLIENT_CPU = 0, 1


def start_server(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A fresh server process, ``argv``, pinned to :data:`SERVER_CPU`,
    with text pipes on its stdin and stdout."""
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: os.sched_setaffinity(0, {SERVER_CPU}))


def pin_client() -> None:
    """Pins this process (the client) to :data:`CLIENT_CPU` and raises its
    descriptor limit to the hard one."""
    os.sched_setaffinity(0, {CLIENT_CPU})
    _all_descriptors()


def rotated(names: list[str], r: int) -> list[str]:
    """The order of the contenders in round ``r``: rotated every round."""
    return names[r % len(names) :] + names[: r % len(names)]


def _idle(port: int, n: int) -> list[socket.socket]:
    """``n`` keep-alive connections to the server, each served one request
    (so the server holds each, waiting for the next) before the load starts."""
    conns = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"GET / HTTP/1.1\r\nHost: idle\r\n\r\n")
        got = b""
        while len(got) < len(RESPONSE):
            chunk = c.recv(len(RESPONSE) - len(got))
            if not chunk:
                raise SystemExit("an idle connection was closed by the server")
            got += chunk
        if got != RESPONSE:
            raise SystemExit(f"an idle connection got {got!r}")
        conns.append(c)
    return conns


def serve(name: str, kind: str) -> None:
    """The server: prints its port, serves until a line on stdin, prints
    its CPU seconds and peak RSS (KiB). Pins itself to :data:`SERVER_CPU`
    (as :func:`start_server` pins its child), so that ``--serve`` run
    directly, under callgrind or perf, is on that CPU too."""
    os.sched_setaffinity(0, {SERVER_CPU})
    _all_descriptors()
    kind = IDLE.get(kind, kind)
    loop = _new_loop(name)
    asyncio.set_event_loop(loop)

    async def main() -> None:
        port, _keep = await _start(loop, kind)
        print(port, flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)

    start = time.process_time()
    loop.run_until_complete(main())
    cpu = time.process_time() - start
    print(cpu, _peak_rss_kib(), flush=True)
    os._exit(0)


async def _echo_client(port: int, conns: int, size: int, seconds: float) -> tuple[int, list[float]]:
    msg = b"x" * size
    stop = time.monotonic() + seconds
    counts = [0] * conns
    rtts: list[float] = []

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        while (now := time.monotonic()) < stop:
            writer.write(msg)
            got = await reader.readexactly(size)
            if len(got) != size:
                raise SystemExit(f"echo of {size} B came back as {len(got)} B")
            rtts.append(time.monotonic() - now)
            counts[i] += 1
        writer.close()

    await asyncio.gather(*(one(i) for i in range(conns)))
    return sum(counts), rtts


def _client_loop() -> asyncio.AbstractEventLoop:
    return _new_loop("uvloop") if _available("uvloop") else asyncio.new_event_loop()


def wrk(port: int, conns: int, seconds: float, path: str = "/", timeout: float = 2.0,
        script: str | None = None) -> tuple[int, float, float, int]:
    """(requests, seconds, p99 seconds, timeouts) of one wrk run (one
    thread, on :data:`CLIENT_CPU`) on ``path`` (or the paths the Lua
    ``script`` asks for); fails unless every
    response is a 2xx or 3xx and no connection failed (a response slower
    than ``timeout`` seconds is counted, not a failure)."""
    out = subprocess.run(
        ["taskset", "-c", str(CLIENT_CPU), "wrk", "-t1", f"-c{conns}", f"-d{max(1, round(seconds))}s",
         f"--timeout={timeout:g}s", "--latency", *(["-s", script] if script else []),
         f"http://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if "Non-2xx" in out or errors and any(int(e) for e in errors.groups()[:3]):
        raise SystemExit(f"wrk saw errors:\n{out}")
    timeouts = int(errors.group(4)) if errors else 0
    n = int(re.search(r"(\d+) requests in ([\d.]+)(\w+)", out).group(1))  # type: ignore[union-attr]
    took = re.search(r"requests in ([\d.]+)(m?s)", out)
    secs = float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    unit = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[p99.group(2)]  # type: ignore[union-attr]
    return n, secs, float(p99.group(1)) * unit, timeouts  # type: ignore[union-attr]


def cpu_seconds(pid: int) -> tuple[float, float]:
    """Process ``pid``'s CPU time so far: (user, system), ``/proc/PID/stat``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def perf_syscalls(pid: int) -> subprocess.Popen[str]:
    """``perf stat`` counting the system calls of process ``pid``."""
    return subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def perf_count(perf: subprocess.Popen[str]) -> int:
    """The count of a :func:`perf_syscalls` run, stopped."""
    perf.send_signal(signal.SIGINT)
    _, err = perf.communicate()
    for line in err.splitlines():
        if "raw_syscalls:sys_enter" in line:
            return int(line.split(",")[0])
    raise SystemExit(f"perf stat gave no count: {err}")


def one_round(name: str, kind: str, conns: int, size: int, args: argparse.Namespace) -> dict[str, float]:
    """The figures of one fresh server process under one load."""
    env = None
    if name == "blockio-base":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [args.baseline, os.environ.get("PYTHONPATH")]))}
    server = start_server([sys.executable, __file__, "--serve", name, kind], env)
    assert server.stdin is not None and server.stdout is not None
    port = int(server.stdout.readline())
    cpu_started = sum(cpu_seconds(server.pid))
    idle = _idle(port, args.idle) if kind in IDLE else []
    perf = perf_syscalls(server.pid) if args.syscalls else None
    user_before, sys_before = cpu_seconds(server.pid)
    timeouts = 0
    if kind in HTTP or kind in IDLE:
        n, took, p99, timeouts = wrk(port, conns, args.seconds)
    else:
        loop = _client_loop()
        start = time.monotonic()
        n, rtts = loop.run_until_complete(_echo_client(port, conns, size, args.seconds))
        took = time.monotonic() - start
        loop.close()
        p99 = statistics.quantiles(rtts, n=100)[98] if len(rtts) > 1 else float("nan")
    user_after, sys_after = cpu_seconds(server.pid)
    load_cpu = user_after + sys_after - user_before - sys_before
    calls = perf_count(perf) if perf else 0
    for c in idle:
        c.close()
    server.stdin.write("stop\n")
    server.stdin.flush()
    cpu, rss = server.stdout.readline().split()
    if server.wait() != 0:
        raise SystemExit(f"the {name} {kind} server failed")
    setup = (user_before + sys_before - cpu_started) / len(idle) if idle else 0.0
    return {"rate": n / took, "p99": p99, "cpu": float(cpu) / n, "load_cpu": load_cpu / n,
            "load_sys": (sys_after - sys_before) / n, "setup": setup, "rss": int(rss) / 1024, "calls": calls / n,
            "timeouts": timeouts}


def _report(title: str, got: dict[str, list[dict[str, float]]]) -> None:
    print(title)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in got.items()}
    for n, rs in got.items():
        rates = [r["rate"] for r in rs]
        m = med[n]
        ratio = "  ".join(f"x{m['rate'] / med[o]['rate']:.2f} {o}" for o in ("uvloop", "asyncio") if o in med)
        calls = f"  {m['calls']:5.2f} calls/req" if m["calls"] else ""
        late = sum(r["timeouts"] for r in rs)
        calls += f"  {late} over 2 s" if late else ""
        setup = f"  setup {m['setup'] * 1e6:5.1f} us/conn" if m["setup"] else ""
        load = [r["load_cpu"] * 1e6 for r in rs]
        user = [(r["load_cpu"] - r["load_sys"]) * 1e6 for r in rs]
        print(f"  {n:12} {m['rate']:9.0f}/s ({min(rates):.0f}-{max(rates):.0f})  p99 {m['p99'] * 1e3:7.2f} ms  "
              f"CPU {m['cpu'] * 1e6:6.1f} us/req (load {m['load_cpu'] * 1e6:5.1f} [{min(load):.1f}-{max(load):.1f}], "
              f"sys {m['load_sys'] * 1e6:4.1f}, user {statistics.median(user):4.1f} [{min(user):.1f}-{max(user):.1f}])"
              f"{setup}  RSS {m['rss']:5.1f} MiB{calls}  {ratio}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--workloads", default=",".join(ECHO + HTTP))
    ap.add_argument("--sizes", default="1024,10240,102400")
    ap.add_argument("--conns", default="1,50,500")
    ap.add_argument("--http-conns", default="50,1000")
    ap.add_argument("--idle", type=int, default=10000, help="idle connections of http-idle")
    ap.add_argument("--loops", default=",".join(LOOPS))
    ap.add_argument("--syscalls", action="store_true", help="count the server's system calls with perf")
    ap.add_argument("--baseline", help="a directory with another build of blockio: adds the loop blockio-base")
    args = ap.parse_args()
    if args.baseline and "blockio-base" not in args.loops.split(","):
        args.loops += ",blockio-base"
    if "blockio-base" in args.loops.split(",") and not args.baseline:
        raise SystemExit("--loops blockio-base: give the other build's directory with --baseline DIR")
    if args.serve:
        serve(*args.serve)
        return
    pin_client()
    loops = [n for n in args.loops.split(",") if _available(n)]
    missing = sorted(set(args.loops.split(",")) - set(loops))
    print(f"loops: {', '.join(loops)}" + (f" (not installed: {', '.join(missing)})" if missing else ""))
    loads = []
    for kind in args.workloads.split(","):
        if kind in HTTP or kind in IDLE:
            loads += [(kind, int(c), 0) for c in args.http_conns.split(",")]
        else:
            loads += [(kind, int(c), int(s)) for s in args.sizes.split(",") for c in args.conns.split(",")]
    for kind, conns, size in loads:
        got: dict[str, list[dict[str, float]]] = {n: [] for n in loops}
        for r in range(args.rounds):
            for name in rotated(loops, r):
                got[name].append(one_round(name, kind, conns, size, args))
        what = f"{size // 1024} KiB, " if size else f"beside {args.idle} idle, " if kind in IDLE else ""
        _report(f"{kind}, {what}{conns} connections, {args.rounds} rounds of {args.seconds} s", got)


if __name__ == "__main__":
    main()
