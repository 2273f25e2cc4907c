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


#: The calls of one direction in flight, per socket object: a socket is a
#: key while a call holds its turn, with ``None`` (or an empty deque) while
#: nobody waits, else the waiters' futures in the order of their calls. A
#: call takes its turn with ``if sock in turns: await wait(turns, loop,
#: sock)`` else ``turns[sock] = None`` (a plain dictionary, so that taking a
#: turn nobody holds, the common case, costs one insertion), and ends it
#: with :func:`leave` (inline: ``waiters = turns.pop(sock, None)``, then
#: :func:`hand_on` if any), whatever happens.
Turns = Dict[socket.socket, Optional[Deque[Any]]]


async def wait(turns: Turns, loop: Any, sock: socket.socket) -> None:
    """Returns once ``sock``'s turn, held by another call, is the caller's
    (who then ends it whatever happens next). Cancelled, it holds nothing:
    a turn handed to it meanwhile goes on."""
    queue = turns[sock]
    if queue is None:
        queue = turns[sock] = collections.deque()
    waiter = loop.create_future()
    queue.append(waiter)
    try:
        await waiter
    except BaseException:  # cancelled, or an exception thrown in
        if waiter.done() and not waiter.cancelled():
            leave(turns, sock)  # handed the turn, which goes on to the next
        else:
            waiter.cancel()
            # (a caller retrying with timeouts leaves no trail)
            with contextlib.suppress(ValueError):
                queue.remove(waiter)
        raise


async def run(turns: Turns, loop: Any, sock: socket.socket, call: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Awaits ``call(*args)`` in ``sock``'s turn."""
    if sock in turns:
        await wait(turns, loop, sock)
    else:
        turns[sock] = None
    try:
        return await call(*args)
    finally:
        leave(turns, sock)


def leave(turns: Turns, sock: socket.socket) -> None:
    """Ends the caller's turn on ``sock``."""
    waiters = turns.pop(sock, None)
    if waiters:
        hand_on(turns, sock, waiters)


def hand_on(turns: Turns, sock: socket.socket, waiters: Deque[Any]) -> None:
    """Hands the turn on ``sock`` that ended to the first of ``waiters``
    still waiting, if any."""
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            turns[sock] = waiters
            return
