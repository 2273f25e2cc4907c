"""An aiohttp web application served on one event loop, for
``run.py`` (the checks) and ``python/benchmarks/framework.py`` (the
figures).

Usage: ``python server.py LOOP FILES`` with LOOP one of ``asyncio``,
``blockio`` (``blockio.new_event_loop``: its backend as
``BLOCKIO_BACKEND`` says) or ``uvloop``, and FILES the directory whose
files ``/static/NAME`` serves. Prints one JSON line, ``{"port", "loop",
"backend"}``, once it listens on 127.0.0.1. Each line ``stats`` on stdin
prints a JSON line: how often the loop's native sendfile and asyncio's
read-and-send fallback have run, and every error the loop's exception
handler has been given; any other line (or the end of stdin) stops the
server, which prints that line a last time.

Routes:

- ``GET /fixed``: a fixed 13-byte body.
- ``POST /echo``: the JSON document of the request, parsed and sent back
  (``web.json_response``).
- ``GET /stream``: :data:`STREAM` in chunks (chunked transfer encoding).
- ``GET /static/NAME``: ``web.FileResponse`` (``loop.sendfile``; ranges).
- ``GET /ws``: a websocket that echoes every text and binary message.
- ``GET /peer``: the client's port, by which a client sees its requests
  share one connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from aiohttp import WSMsgType, web

#: The body of ``/fixed``.
FIXED = b"Hello, world!"

#: The chunks ``/stream`` writes, one ``write`` each: sizes from one byte
#: to more than a socket buffer, each chunk its own byte value.
STREAM = [bytes([65 + i]) * n for i, n in enumerate((1, 100, 4096, 65536, 300_000, 7))]


def make_app(files: Path) -> web.Application:
    """The application, serving ``files`` under ``/static``."""

    async def fixed(request: web.Request) -> web.Response:
        return web.Response(body=FIXED, content_type="text/plain")

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(await request.json())

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        resp.content_type = "application/octet-stream"
        await resp.prepare(request)
        for chunk in STREAM:
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def static(request: web.Request) -> web.FileResponse:
        name = request.match_info["name"]
        if "/" in name or name.startswith("."):
            raise web.HTTPNotFound()
        return web.FileResponse(files / name)

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse(max_msg_size=4 << 20)
        await sock.prepare(request)
        async for msg in sock:
            if msg.type == WSMsgType.TEXT:
                await sock.send_str(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await sock.send_bytes(msg.data)
        return sock

    async def peer(request: web.Request) -> web.Response:
        return web.json_response({"port": request.transport.get_extra_info("peername")[1]})

    app = web.Application(client_max_size=4 << 20)
    app.router.add_get("/fixed", fixed)
    app.router.add_post("/echo", echo)
    app.router.add_get("/stream", stream)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/ws", ws)
    app.router.add_get("/peer", peer)
    return app


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new event loop of the kind ``name``."""
    if name == "blockio":
        import blockio

        return blockio.new_event_loop()
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if name == "asyncio":
        return asyncio.new_event_loop()
    raise SystemExit(f"server.py: unknown loop {name!r} (expected asyncio, blockio or uvloop)")


def count_sendfile(loop: asyncio.AbstractEventLoop, counts: dict[str, int]) -> None:
    """Counts in ``counts`` the loop's native sendfiles (``native``), those
    that found the native path unavailable (``unavailable``) and asyncio's
    read-and-send copies (``fallback``). Loops without asyncio's sendfile
    machinery (uvloop: ``loop.sendfile`` raises ``NotImplementedError``, and
    aiohttp copies the file itself) count nothing."""
    native = getattr(loop, "_sendfile_native", None)
    fallback = getattr(loop, "_sendfile_fallback", None)
    if native is None or fallback is None:
        return

    async def counted_native(*args):
        counts["native"] += 1
        try:
            return await native(*args)
        except asyncio.SendfileNotAvailableError:
            counts["unavailable"] += 1
            raise

    async def counted_fallback(*args):
        counts["fallback"] += 1
        return await fallback(*args)

    loop._sendfile_native = counted_native  # type: ignore[attr-defined]
    loop._sendfile_fallback = counted_fallback  # type: ignore[attr-defined]


def main() -> None:
    """Serves on the loop of ``argv[1]`` until stdin says to stop."""
    name, files = sys.argv[1], Path(sys.argv[2])
    loop = new_loop(name)
    asyncio.set_event_loop(loop)
    counts = {"native": 0, "unavailable": 0, "fallback": 0}
    count_sendfile(loop, counts)
    errors: list[str] = []

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        errors.append(f"{context.get('message')}: {context.get('exception')!r}")
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)

    async def serve() -> None:
        runner = web.AppRunner(make_app(files), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(json.dumps({"port": port, "loop": type(loop).__name__, "backend": getattr(loop, "backend", None)}),
              flush=True)
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "stats":
            print(json.dumps({"sendfile": counts, "errors": errors}), flush=True)
        await runner.cleanup()

    loop.run_until_complete(serve())
    loop.close()
    print(json.dumps({"sendfile": counts, "errors": errors}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
