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
``sock_sendto``) once the sends before it have; on the epoll fallback an
accept (``sock_accept``) likewise, where asyncio's one reader per
descriptor would leave the first of two waiting for ever. So the first call gets the
first bytes, and each ``sock_sendall``'s bytes go out whole, in the order of
the calls. A call cancelled while it waits for its turn takes nothing; one
cancelled after its turn came hands the turn on (and a receive cancelled
after its bytes came keeps them for the next, as before).

The cost when no other call is in flight is one dictionary insertion and
one removal per call. ``sock_sendfile``'s native send takes the turn of
sends too (its fallback is made of ``sock_sendall`` calls, each of which
takes it in its time). Accepts on
io_uring take none: each is an accept of its own in the kernel, and none
can take another's connection.

Turns are kept by the socket object's identity (``id``, which no other
object takes while a call holds the socket), so that a socket class that
defines ``__eq__`` without ``__hash__`` works too. Cancelling one of many
waiters costs a constant time (they are an ordered dictionary). A loop
closed with calls waiting for their turn hands the turn to none of them.
"""

from __future__ import annotations

import collections
from typing import Any, Awaitable, Callable, Dict, Optional, TypeVar

T = TypeVar("T")

#: The calls of one direction in flight, keyed by the socket object's
#: ``id``: a key while a call holds that socket's turn, with ``None`` (or
#: no waiter) while nobody waits, else the waiters' futures in the order of
#: their calls (as the keys of an ordered dictionary: removing a cancelled
#: one costs no scan). A call takes its turn
#: with ``if key in turns: await wait(turns, loop, key)`` else ``turns[key]
#: = None`` (a plain dictionary, so that taking a turn nobody holds, the
#: common case, costs one insertion), and ends it with :func:`leave`
#: (inline: ``waiters = turns.pop(key, None)``, then :func:`hand_on` if
#: any), whatever happens.
Turns = Dict[int, Optional["collections.OrderedDict[Any, None]"]]


async def wait(turns: Turns, loop: Any, key: int) -> None:
    """Returns once the turn of socket ``key``, held by another call, is the
    caller's (who then ends it whatever happens next). Cancelled (or an
    exception thrown in), it holds nothing: a turn handed to it meanwhile
    goes on."""
    waiters = turns[key]
    if waiters is None:
        waiters = turns[key] = collections.OrderedDict()
    waiter = loop.create_future()
    waiters[waiter] = None
    try:
        await waiter
    except BaseException:
        if waiter.done() and not waiter.cancelled():
            leave(turns, key)  # handed the turn, which goes on to the next
        else:
            # Not handed the turn: it is not asked for any more (and a
            # caller retrying with timeouts leaves no trail).
            waiters.pop(waiter, None)
        raise


async def run(turns: Turns, loop: Any, sock: Any, call: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Awaits ``call(*args)`` in ``sock``'s turn."""
    key = id(sock)
    if key in turns:
        await wait(turns, loop, key)
    else:
        turns[key] = None
    try:
        return await call(*args)
    finally:
        leave(turns, key)


def leave(turns: Turns, key: int) -> None:
    """Ends the caller's turn on socket ``key``."""
    waiters = turns.pop(key, None)
    if waiters:
        hand_on(turns, key, waiters)


def hand_on(turns: Turns, key: int, waiters: "collections.OrderedDict[Any, None]") -> None:
    """Hands the turn on socket ``key`` that ended to the first of
    ``waiters`` still waiting, if any (none once their loop is closed:
    nothing would run them)."""
    while waiters:
        waiter, _ = waiters.popitem(last=False)
        if waiter.done():
            continue
        if waiter.get_loop().is_closed():
            return
        waiter.set_result(None)
        turns[key] = waiters
        return
