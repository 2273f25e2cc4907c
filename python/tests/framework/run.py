"""aiohttp's web server, and uvicorn with Starlette, on blockio's event
loop under real traffic, with the same results as on asyncio's loop.

``server.py`` (an aiohttp ``web.Application``: a fixed body, a JSON echo,
a chunked stream, static files through ``web.FileResponse``, a websocket
echo) and ``server_asgi.py`` (the same routes in Starlette, under
uvicorn) run on asyncio's default loop, on blockio's loop on io_uring
(``BLOCKIO_BACKEND=uring``) and on blockio's loop on epoll
(``BLOCKIO_BACKEND=threads``), one fresh server process each, the three
loops' at once. Against each (uvicorn's under wrk on four of the routes):

- ``wrk`` sends each route's request for a second over several keep-alive
  connections, and its Lua script (``check.lua``) compares every
  response's status and whole body with the expected ones;
- an aiohttp client (on asyncio's loop, in this process) fetches every
  route once and records each response's status, length, sha256 and the
  headers that say how it was sent; it also sends byte ranges of the
  files, exchanges websocket messages of several sizes, checks that
  requests share one connection, and sends requests pipelined (five in one
  write: static files between the others), each response checked;
- ``curl`` fetches every static file on one connection (its
  ``num_connects``: one connect, then reuse) and the bytes are checked
  against each file's sha256;
- the server reports how often the loop's native sendfile ran and how
  often asyncio's read-and-send fallback did, and the errors its loop's
  exception handler saw.

The aiohttp client's checks also run on blockio's loop (each backend)
against aiohttp's server on asyncio's loop.

It fails unless, on every loop: every wrk response matched, wrk saw no
socket or status error, the client's records equal the expected ones
(the same on every loop), aiohttp's ``FileResponse`` went through the
native sendfile and never the fallback (for the client's and curl's
requests; wrk's connections, closed at the end of its run in the middle of
a response, may make asyncio's own sendfile fall back), and no error
reached the loop's exception handler.

aiohttp and uvicorn are pinned (``requirements.txt``) in a venv kept in
``target/framework-tests/venv`` while the pins are the same; blockio's
wheel (``target/wheels``, from ``scripts/python-setup``) is installed
anew on every run.

Usage: ``python3 python/tests/framework/run.py`` from the repository root
(about 30 s; the first run also makes the venv).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
WORK = ROOT / "target" / "framework-tests"

#: The static files: name and size.
FILES = {"empty": 0, "1k": 1024, "1m": 1 << 20, "20m": 20 << 20}

#: The JSON echo's request bodies: name and (about) size.
ECHOES = {"echo-1k": 1024, "echo-1m": 1 << 20}

#: Each run: its name, the loop ``server.py`` makes, its environment, the
#: ``backend`` the loop must say it runs on.
RUNS = [
    ("asyncio", "asyncio", {}, None),
    ("blockio, io_uring", "blockio", {"BLOCKIO_BACKEND": "uring"}, "uring"),
    ("blockio, epoll", "blockio", {"BLOCKIO_BACKEND": "threads"}, "epoll"),
]

#: The sendfiles the client's and curl's requests make: per file that is
#: not empty, the whole file and three ranges (the client's), the whole
#: file again among the pipelined requests, and once more (curl's); aiohttp
#: sends an empty file without one.
SENDFILES = 6 * sum(1 for size in FILES.values() if size)

#: Each framework: its server program, the wrk routes it is loaded on
#: (all when None), the native sendfiles its client checks make (uvicorn
#: has no zero-copy send: Starlette's FileResponse sends chunks it reads).
FRAMEWORKS = {
    "aiohttp": ("server.py", None, SENDFILES),
    "uvicorn+starlette": ("server_asgi.py", ("fixed", "fixed-1000", "echo-1k", "stream", "static-1m"), 0),
}

#: wrk's connections per route (8; 1,000 for ``fixed-1000``: more than a
#: listening socket's backlog, the accepts racing with the requests and,
#: at the end, with the server's close) and seconds (two for the 20 MiB
#: file: a busy machine still completes some in that time), and its
#: timeout per response, long enough that a slow response on a busy
#: machine is not counted as an error.
WRK_CONNS = {"fixed-1000": 1000}
WRK_SECONDS = {"static-20m": 2}
WRK_TIMEOUT = "30s"


def setup() -> Path:
    """The test venv's python, with the pinned requirements and blockio's
    newest wheel."""
    sys.path.insert(0, str(ROOT / "python" / "testkit"))
    from pinned import install_wheel, pinned_venv

    py = pinned_venv(WORK / "venv", HERE / "requirements.txt")
    install_wheel(py, "framework-tests")
    return py


def make_data() -> Path:
    """The static files and the expected bodies in ``WORK/data``: random
    bytes, the same on every run."""
    data = WORK / "data"
    files = data / "files"
    files.mkdir(parents=True, exist_ok=True)
    rng = random.Random(63)
    for name, size in FILES.items():
        body = rng.randbytes(size)
        path = files / name
        if not path.exists() or path.read_bytes() != body:
            path.write_bytes(body)
    for name, size in ECHOES.items():
        doc = {"name": name, "data": "".join(rng.choice("abcdefghij\u00e9\u4e2d") for _ in range(size // 2))}
        (data / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
    return data


def digest(body: bytes) -> str:
    """The sha256 of ``body``, in hex."""
    return hashlib.sha256(body).hexdigest()


def ranges(size: int) -> list[tuple[int, int]]:
    """The byte ranges (first, last) the client asks of a file of ``size``
    bytes: its first byte, from the second to the middle, its last two
    thirds; none of an empty file."""
    return [(0, 0), (1, size // 2), (size // 3, size - 1)] if size else []


def expected(data: Path) -> dict[str, dict]:
    """What the client must record for each check (``client_checks``)."""
    sys.path.insert(0, str(HERE))
    from server import FIXED, STREAM

    want = {"fixed": {"status": 200, "length": len(FIXED), "sha256": digest(FIXED), "chunked": False},
            "stream": {"status": 200, "length": sum(map(len, STREAM)), "sha256": digest(b"".join(STREAM)),
                       "chunked": True}}
    for name in ECHOES:
        body = (data / f"{name}.json").read_bytes()
        want[name] = {"status": 200, "length": len(body), "sha256": digest(body), "chunked": False}
    for name in FILES:
        body = (data / "files" / name).read_bytes()
        want[f"static-{name}"] = {"status": 200, "length": len(body), "sha256": digest(body), "chunked": False}
        for first, last in ranges(len(body)):
            part = body[first:last + 1]
            want[f"range-{name}-{first}-{last}"] = {"status": 206, "length": len(part), "sha256": digest(part),
                                                   "chunked": False}
    big = bytes(range(256)) * 4096
    want["ws"] = [["text", 11, digest(b"hello world")], ["binary", 0, digest(b"")],
                  ["binary", len(big), digest(big)], ["text", 75_000, digest("\u00e9t\u00e9".encode() * 25_000)]]
    want["keep-alive"] = True
    want["pipelined"] = [[200, want[name]["sha256"]] for name, _ in pipelined(data)]
    return want


def pipelined(data: Path) -> list[tuple[str, bytes]]:
    """The requests the client sends in one write, each named by the check
    whose body its response must have; the last closes the connection."""
    echo = (data / "echo-1k.json").read_bytes()
    post = (b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(echo), echo))
    return [("static-1m", b"GET /static/1m HTTP/1.1\r\nHost: t\r\n\r\n"),
            ("fixed", b"GET /fixed HTTP/1.1\r\nHost: t\r\n\r\n"),
            ("echo-1k", post),
            ("static-20m", b"GET /static/20m HTTP/1.1\r\nHost: t\r\n\r\n"),
            ("static-1k", b"GET /static/1k HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")]


async def pipelined_responses(port: int, data: Path) -> list[list]:
    """[status, body's sha256] of each response to :func:`pipelined`'s
    requests, sent in one write on one connection: the server reads the
    next requests while (and after) it sends a file."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(req for _, req in pipelined(data)))
    got = []
    for _ in pipelined(data):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in head[1:] if line)
        body = await reader.readexactly(int(fields["content-length"]))
        got.append([int(head[0].split()[1]), digest(body)])
    if await reader.read(1) != b"":
        got.append("more than the responses")
    writer.close()
    return got


async def client_checks(port: int, data: Path) -> dict[str, object]:
    """Each route fetched once by an aiohttp client: {check: record}."""
    import aiohttp

    base = f"http://127.0.0.1:{port}"
    got: dict[str, object] = {}

    async def record(name, resp):
        body = await resp.read()
        got[name] = {"status": resp.status, "length": len(body), "sha256": digest(body),
                     "chunked": resp.headers.get("Transfer-Encoding") == "chunked"}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as s:
        for name in ("fixed", "stream"):
            async with s.get(f"{base}/{name}") as resp:
                await record(name, resp)
        for name in ECHOES:
            body = (data / f"{name}.json").read_bytes()
            async with s.post(f"{base}/echo", data=body, headers={"Content-Type": "application/json"}) as resp:
                await record(name, resp)
        for name in FILES:
            size = (data / "files" / name).stat().st_size
            async with s.get(f"{base}/static/{name}") as resp:
                await record(f"static-{name}", resp)
            for first, last in ranges(size):
                async with s.get(f"{base}/static/{name}", headers={"Range": f"bytes={first}-{last}"}) as resp:
                    await record(f"range-{name}-{first}-{last}", resp)
        ports = set()
        for _ in range(3):
            async with s.get(f"{base}/peer") as resp:
                ports.add((await resp.json())["port"])
        got["keep-alive"] = len(ports) == 1
        echoes = []
        async with s.ws_connect(f"{base}/ws", max_msg_size=4 << 20) as ws:
            big = bytes(range(256)) * 4096
            for kind, msg in (("text", "hello world"), ("binary", b""), ("binary", big),
                              ("text", "\u00e9t\u00e9" * 25_000)):
                await (ws.send_str(msg) if kind == "text" else ws.send_bytes(msg))
                back = await ws.receive()
                raw = back.data.encode() if isinstance(back.data, str) else back.data
                echoes.append([back.type.name.lower(), len(back.data), digest(raw)])
        got["ws"] = echoes
    got["pipelined"] = await pipelined_responses(port, data)
    return got


def curl_files(port: int, data: Path) -> list[str]:
    """Problems seen fetching every static file on one curl connection."""
    names = list(FILES)
    out = WORK / f"curl-{port}"
    out.mkdir(exist_ok=True)
    cmd = ["curl", "-sS", "--max-time", "60", "-w", "%{http_code} %{num_connects}\\n"]
    for name in names:
        cmd += ["-o", str(out / name), f"http://127.0.0.1:{port}/static/{name}"]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    problems = [f"curl exited {run.returncode}: {run.stderr.strip()}"] if run.returncode else []
    lines = run.stdout.split()
    codes, connects = lines[0::2], lines[1::2]
    if codes != ["200"] * len(names):
        problems.append(f"curl's statuses: {codes}")
    if connects != ["1"] + ["0"] * (len(names) - 1):
        problems.append(f"curl's new connections per file (1 then 0s: keep-alive): {connects}")
    for name in names:
        got = out / name
        if not got.exists() or digest(got.read_bytes()) != digest((data / "files" / name).read_bytes()):
            problems.append(f"curl: /static/{name} differs from the file")
        got.unlink(missing_ok=True)
    out.rmdir()
    return problems


def wrk_routes(data: Path) -> dict[str, tuple[str, str, str, Path]]:
    """Each route wrk loads: (method, path, request body file or "-",
    expected body file)."""
    sys.path.insert(0, str(HERE))
    from server import FIXED, STREAM

    (data / "fixed").write_bytes(FIXED)
    (data / "stream").write_bytes(b"".join(STREAM))
    routes = {"fixed": ("GET", "/fixed", "-", data / "fixed"), "stream": ("GET", "/stream", "-", data / "stream")}
    for name in ECHOES:
        routes[name] = ("POST", "/echo", str(data / f"{name}.json"), data / f"{name}.json")
    for name in FILES:
        routes[f"static-{name}"] = ("GET", f"/static/{name}", "-", data / "files" / name)
    # Last: a server takes a while to take 1,000 connections and to end
    # them, and the routes loaded after it would count that time.
    routes["fixed-1000"] = ("GET", "/fixed", "-", data / "fixed")
    return routes


#: The longest wrk run of a route that got no response in a shorter one.
WRK_MAX_SECONDS = 16


def wrk(port: int, route: str, method: str, path: str, body: str, want: Path) -> dict:
    """wrk's summary (``check.lua``'s JSON line) of one route. A run that
    got no response at all (1,000 connections still being accepted when
    a second ends, on a busy machine) is made again for twice as long, up
    to ``WRK_MAX_SECONDS``: the check is that responses come and are
    right, not how many come in a given time."""
    seconds = WRK_SECONDS.get(route, 1)
    while True:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{WRK_CONNS.get(route, 8)}", f"-d{seconds}s", "--timeout", WRK_TIMEOUT,
             "-s", str(HERE / "check.lua"),
             f"http://127.0.0.1:{port}{path}", "--", method, body, "200", str(want)],
            capture_output=True, text=True, check=False, timeout=120)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode or not lines:
            return {"failed": f"wrk exited {out.returncode}: {out.stdout[-2000:]} {out.stderr[-2000:]}"}
        got: dict = json.loads(lines[-1])
        if got["requests"] or got["mismatch"] or seconds >= WRK_MAX_SECONDS:
            return got
        seconds *= 2


def wrk_problems(route: str, got: dict) -> list[str]:
    """What is wrong in one wrk summary."""
    if "failed" in got:
        return [f"wrk {route}: {got['failed']}"]
    problems = []
    if got["mismatch"] or got["ok"] == 0 or got["ok"] != got["requests"]:
        problems.append(f"wrk {route}: {got['ok']} responses matched, {got['mismatch']} did not, "
                        f"of {got['requests']}")
    if any(got["errors"].values()):
        problems.append(f"wrk {route}: errors {got['errors']}")
    if set(got["statuses"]) != {"200"}:
        problems.append(f"wrk {route}: statuses {got['statuses']}")
    return problems


def run_one(py: Path, framework: str, run: tuple, data: Path, want: dict, routes: dict) -> tuple[list[str], dict]:
    """(problems, wrk summaries) of one server process."""
    import asyncio

    program, only, sendfiles = FRAMEWORKS[framework]
    name, loop, env, backend = run
    log = WORK / f"{program}-{loop}-{env.get('BLOCKIO_BACKEND', 'default')}.log"
    with open(log, "w") as err:
        server = subprocess.Popen([str(py), str(HERE / program), loop, str(data / "files")], cwd=WORK,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                  env={**os.environ, **env})
    assert server.stdin is not None and server.stdout is not None
    first = server.stdout.readline()
    if not first:
        server.wait()
        return [f"the server did not start (exit {server.returncode})"], {}
    info = json.loads(first)
    port = info["port"]
    problems = []
    if backend and info["backend"] != backend:
        problems.append(f"the loop runs on {info['backend']}, not {backend}")
    got = asyncio.run(client_checks(port, data))
    for check in sorted(set(want) | set(got)):
        if got.get(check) != want.get(check):
            problems.append(f"{check}: got {got.get(check)}, expected {want.get(check)}")
    problems += curl_files(port, data)
    server.stdin.write("stats\n")
    server.stdin.flush()
    sendfile = json.loads(server.stdout.readline())["sendfile"]
    if sendfile != {"native": sendfiles, "unavailable": 0, "fallback": 0}:
        problems.append(f"FileResponse did not go through the loop's native sendfile alone: {sendfile}, "
                        f"expected {sendfiles} native")
    summaries = {}
    for route, (method, path, body, expect) in routes.items():
        if only is not None and route not in only:
            continue
        summaries[route] = wrk(port, route, method, path, body, expect)
        problems += wrk_problems(route, summaries[route])
    server.stdin.write("stop\n")
    server.stdin.flush()
    last = server.stdout.readline()
    if server.wait() != 0 or not last:
        problems.append(f"the server failed (exit {server.returncode})")
        return problems, summaries
    stats = json.loads(last)
    problems += [f"the loop's exception handler got: {e}" for e in stats["errors"]]
    summaries["sendfile"] = stats["sendfile"]
    # What the framework logged: a handler writing to a connection wrk
    # closed at the end of its run (counted, not a failure: it ends wrk's
    # runs on every loop).
    summaries["logged"] = log.read_text().count("Traceback")
    return problems, summaries


def client_on_blockio(py: Path, data: Path, want: dict) -> list[str]:
    """Problems of the aiohttp client's checks (:func:`client_checks`) run
    on blockio's loop, on each backend, against aiohttp's server on
    asyncio's loop."""
    import blockio

    server = subprocess.Popen([str(py), str(HERE / "server.py"), "asyncio", str(data / "files")], cwd=WORK,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    port = json.loads(server.stdout.readline())["port"]
    problems = []
    for backend, env in (("uring", "uring"), ("epoll", "threads")):
        os.environ["BLOCKIO_BACKEND"] = env
        loop = blockio.new_event_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        try:
            got = loop.run_until_complete(client_checks(port, data))
        finally:
            loop.close()
            del os.environ["BLOCKIO_BACKEND"]
        where = f"aiohttp's client on blockio's loop ({backend})"
        if loop.backend != backend:
            problems.append(f"{where}: the loop runs on {loop.backend}")
        problems += [f"{where}, {check}: got {got.get(check)}, expected {want.get(check)}"
                     for check in sorted(set(want) | set(got)) if got.get(check) != want.get(check)]
        problems += [f"{where}: the loop's exception handler got: {c.get('message')} {c.get('exception')!r}"
                     for c in errors]
    server.stdin.write("stop\n")
    server.stdin.flush()
    server.wait()
    return problems


def main() -> None:
    """Makes the venv and runs the checks in it (``--in-venv``)."""
    os.chdir(ROOT)
    if sys.argv[1:] != ["--in-venv"]:
        # The checks need aiohttp: they run in the test venv.
        py = setup()
        sys.exit(subprocess.run([str(py), __file__, "--in-venv"], check=False).returncode)
    started = time.monotonic()
    py = Path(sys.executable)
    # Descriptors for wrk's 1,000 connections and each server's ends of
    # them (the limit the servers and wrk inherit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want_fds = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft != resource.RLIM_INFINITY and soft < want_fds:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want_fds, hard))
    data = make_data()
    want = expected(data)
    routes = wrk_routes(data)
    failed = False
    for framework in FRAMEWORKS:
        # The loops' servers at once: the checks wait for each response,
        # whatever the time it takes.
        with concurrent.futures.ThreadPoolExecutor(len(RUNS)) as pool:
            jobs = [pool.submit(run_one, py, framework, run, data, want, routes) for run in RUNS]
            for run, job in zip(RUNS, jobs):
                problems, summaries = job.result()
                rates = ", ".join(f"{r} {s['requests']}" for r, s in summaries.items()
                                  if isinstance(s, dict) and "requests" in s)
                print(f"  {framework} on {run[0]}: {len(want)} client checks; wrk responses checked: {rates}; "
                      f"sendfile {summaries.get('sendfile')}; {summaries.get('logged')} tracebacks logged "
                      f"(requests cut short by wrk's end)")
                for p in problems:
                    print(f"    {p}")
                failed = failed or bool(problems)
    problems = client_on_blockio(py, data, want)
    print(f"  aiohttp's client on blockio's loop (io_uring, epoll) against aiohttp's server on asyncio's: "
          f"{len(want)} checks each")
    for p in problems:
        print(f"    {p}")
    failed = failed or bool(problems)
    print(f"framework-tests: {' and '.join(FRAMEWORKS)} on asyncio's loop and blockio's "
          f"({time.monotonic() - started:.0f} s)")
    if failed:
        sys.exit("framework-tests: blockio's loop does not serve as asyncio's")
    print("framework-tests: every response matched, on every loop")


if __name__ == "__main__":
    main()
