"""The low-level socket calls of one socket, one at a time, in the order made.

Two ``sock_recv`` calls in flight at once on one socket give asyncio's
selector loop a problem and io_uring another:

* asyncio's selector loop (and uvloop) keeps one reader per descriptor: the
  second call's replaces the first's, and the first call waits for ever;
  two ``sock_sendall`` calls likewise leave the first waiting for ever.
* On io_uring both receives are in the kernel at once, and the kernel wakes
  the receive armed *last* first: the second call gets the first bytes.
  Two ``sock_sendall`` calls of large buffers each send what the socket
  takes, then the rest: their bytes interleave on the stream.

blockio's loops (both backends) instead give each socket one turn per
direction: a receive (``sock_recv``, ``sock_recv_into``, ``sock_recvfrom``,
``sock_recvfrom_into``) starts only once the receives called before it on
the same socket object have ended, and a send (``sock_sendall``,
``sock_sendto``) once the sends before it have. So the first call gets the
first bytes, and each ``sock_sendall``'s bytes go out whole, in the order of
the calls. A call cancelled while it waits for its turn takes nothing; one
cancelled after its turn came hands the turn on (and a receive cancelled
after its bytes came keeps them for the next, as before).

The cost when no other call is in flight is one dictionary insertion and
one removal per call. ``sock_sendfile`` and ``sock_accept`` take no turn:
the fallback of ``sock_sendfile`` is made of ``sock_sendall`` calls, and
accepts on one listener are independent of each other.
"""

from __future__ import annotations

import collections
import contextlib
import socket
from typing import Any, Awaitable, Callable, Deque, Dict, Optional, TypeVar

T = TypeVar("T")


class Turns:
    """The calls of one direction in flight, per socket object: ``None``
    while one call holds the turn and none waits, else the waiters'
    futures in the order of their calls."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: Dict[socket.socket, Optional[Deque[Any]]] = {}

    def try_take(self, sock: socket.socket) -> bool:
        """Takes ``sock``'s turn if nobody holds it (the common case, with
        no await); else False, and the caller awaits :meth:`wait`."""
        queues = self._queues
        if sock in queues:
            return False
        queues[sock] = None
        return True

    async def wait(self, loop: Any, sock: socket.socket) -> None:
        """Returns once ``sock``'s turn, held by another call, is the
        caller's (who then calls :meth:`give_back` whatever happens next).
        Cancelled, it holds nothing: a turn handed to it meanwhile goes on."""
        queue = self._queues[sock]
        if queue is None:
            queue = self._queues[sock] = collections.deque()
        waiter = loop.create_future()
        queue.append(waiter)
        try:
            await waiter
        except BaseException:  # cancelled, or an exception thrown in
            if waiter.done() and not waiter.cancelled():
                self.give_back(sock)  # handed the turn, which goes on to the next
            else:
                waiter.cancel()
                # (a caller retrying with timeouts leaves no trail)
                with contextlib.suppress(ValueError):
                    queue.remove(waiter)
            raise

    async def run(self, loop: Any, sock: socket.socket, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Awaits ``call(sock, *args)`` in ``sock``'s turn."""
        if not self.try_take(sock):
            await self.wait(loop, sock)
        try:
            return await call(sock, *args)
        finally:
            self.give_back(sock)

    def give_back(self, sock: socket.socket) -> None:
        """Ends the caller's turn on ``sock``: the first call still
        waiting has it, or nobody does."""
        queue = self._queues.get(sock)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._queues.pop(sock, None)
