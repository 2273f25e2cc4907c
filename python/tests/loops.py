"""The event loops the file tests run on, by name: asyncio's, uvloop's, and
blockio's own on each of its backends (``blockio-uring``, whose files'
reads that the page cache cannot serve go on the loop's own ring, and its
epoll fallback, ``blockio-epoll``), made directly so that the engine's
backend (``BLOCKIO_BACKEND``) stays free."""

import asyncio

import uvloop

from blockio._loop import EpollEventLoop, UringEventLoop

#: name -> a function making a new loop of that kind.
FACTORIES = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
    "blockio-uring": UringEventLoop,
    "blockio-epoll": EpollEventLoop,
}

#: The names, in the order tests are parametrized.
NAMES = list(FACTORIES)


def run_on(name, coro):
    """Runs ``coro`` to its end on a new loop called ``name``, then closes it."""
    loop = FACTORIES[name]()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
