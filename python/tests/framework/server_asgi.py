"""The routes of ``server.py`` as a Starlette application served by
uvicorn (its h11 HTTP protocol and wsproto websockets) on one event loop,
for ``run.py``.

Usage and output as ``server.py``'s: ``python server_asgi.py LOOP FILES``.
Starlette's ``FileResponse`` reads the file in chunks on a worker thread
and sends each one (uvicorn offers no zero-copy send): the loop's sendfile
never runs, which the counts printed show.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from server import FIXED, STREAM, count_sendfile, new_loop


def make_app(files: Path) -> Starlette:
    """The application, serving ``files`` under ``/static``."""

    async def fixed(request: Request) -> Response:
        return Response(FIXED, media_type="text/plain")

    async def echo(request: Request) -> Response:
        # json.dumps as aiohttp's json_response writes it: the same bytes
        # back as the client's document.
        return Response(json.dumps(await request.json()).encode(), media_type="application/json")

    async def chunks():
        for chunk in STREAM:
            yield chunk

    async def stream(request: Request) -> StreamingResponse:
        return StreamingResponse(chunks(), media_type="application/octet-stream")

    async def static(request: Request) -> FileResponse:
        name = request.path_params["name"]
        if "/" in name or name.startswith(".") or not (files / name).is_file():
            raise HTTPException(404)
        return FileResponse(files / name)

    async def ws(sock: WebSocket) -> None:
        await sock.accept()
        try:
            while True:
                msg = await sock.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                if msg.get("text") is not None:
                    await sock.send_text(msg["text"])
                else:
                    await sock.send_bytes(msg.get("bytes") or b"")
        except WebSocketDisconnect:
            pass

    async def peer(request: Request) -> JSONResponse:
        return JSONResponse({"port": request.client.port if request.client else None})

    return Starlette(routes=[
        Route("/fixed", fixed), Route("/echo", echo, methods=["POST"]), Route("/stream", stream),
        Route("/static/{name}", static), WebSocketRoute("/ws", ws), Route("/peer", peer),
    ])


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
        sock = socket.create_server(("127.0.0.1", 0))
        config = uvicorn.Config(make_app(files), loop="none", lifespan="off", http="h11", ws="wsproto",
                                log_level="warning", access_log=False, ws_max_size=4 << 20)
        server = uvicorn.Server(config)
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        print(json.dumps({"port": sock.getsockname()[1], "loop": type(loop).__name__,
                          "backend": getattr(loop, "backend", None)}), flush=True)
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "stats":
            print(json.dumps({"sendfile": counts, "errors": errors}), flush=True)
        server.should_exit = True
        await task

    loop.run_until_complete(serve())
    loop.close()
    print(json.dumps({"sendfile": counts, "errors": errors}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
