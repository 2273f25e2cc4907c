"""``sock_connect`` on blockio's event loop, on both backends: on
io_uring an IPv4 or IPv6 stream socket is connected by a ``connect`` on
the loop's ring (one operation, its completion the outcome: no readiness
poll and no ``SO_ERROR`` look-up); the outcomes and errors are asyncio's
on both."""

import asyncio
import socket

import pytest

from blockio import _proactor
from blockio._loop import UringEventLoop
from waits import DEADLINE


def _has_ipv6():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


FAMILIES = [(socket.AF_INET, "127.0.0.1")] + ([(socket.AF_INET6, "::1")] if _has_ipv6() else [])


@pytest.mark.parametrize("family, host", FAMILIES, ids=[f[1] for f in FAMILIES])
def test_sock_connect_connects_and_a_refused_one_raises_asyncios_error(loop, family, host):
    listener = socket.create_server((host, 0), family=family)
    addr = listener.getsockname()

    async def main():
        with socket.socket(family) as s:
            s.setblocking(False)
            assert await loop.sock_connect(s, addr) is None
            peer, _ = listener.accept()
            with peer:
                await loop.sock_sendall(s, b"hello")
                peer.settimeout(DEADLINE)
                assert peer.recv(5) == b"hello"
            assert s.getpeername()[:2] == addr[:2]
        listener.close()  # nothing listens there now
        with socket.socket(family) as s:
            s.setblocking(False)
            with pytest.raises(ConnectionRefusedError) as info:
                await loop.sock_connect(s, addr)
            assert str(info.value) == f"[Errno 111] Connect call failed {addr}"

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))


def test_a_tcp_connect_on_io_uring_is_one_operation_on_the_ring():
    loop = UringEventLoop()
    listener = socket.create_server(("127.0.0.1", 0))

    async def main():
        with socket.socket() as s:
            s.setblocking(False)
            proactor = loop._proactor
            fut = proactor.connect(s, listener.getsockname())
            kinds = [kind for _, kind, _ in proactor._ops.values()]
            assert _proactor._CONNECT in kinds  # (a ring operation, not a readiness poll)
            assert _proactor._POLL not in kinds
            assert await fut is None
            assert s.getpeername() == listener.getsockname()

    try:
        loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
        listener.close()


def _full_listener():
    """A listener whose backlog (``listen(0)``) three non-blocking connects
    have filled, so that the kernel drops the next SYN; and those three
    sockets, for the caller to close."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        fillers.append(c)
        try:
            c.connect(full.getsockname())
        except BlockingIOError:
            pass
    return full, fillers


def test_a_cancelled_sock_connect_leaves_the_loop_usable(loop):
    listener = socket.create_server(("127.0.0.1", 0))
    # A connect to a listener whose backlog is full stays under way, on the
    # loop's ring on io_uring, until it is cancelled.
    full, fillers = _full_listener()

    async def main():
        ring = getattr(getattr(loop, "_proactor", None), "_ring", None)
        idle = ring.in_flight() if ring is not None else 0
        with socket.socket() as s:
            s.setblocking(False)
            task = asyncio.ensure_future(loop.sock_connect(s, full.getsockname()))
            await asyncio.sleep(0)  # (the task's first step: the connect is made)
            assert not task.done()
            if ring is not None:
                assert ring.in_flight() > idle  # (the ring's connect is under way)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        with socket.socket() as s:
            s.setblocking(False)
            assert await loop.sock_connect(s, listener.getsockname()) is None
        if ring is not None:
            while ring.in_flight() > idle:  # (the cancelled connect answered)
                await asyncio.sleep(0)

    try:
        loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        listener.close()
        full.close()
        for c in fillers:
            c.close()


def test_sock_connect_of_a_connected_or_closed_socket_answers_as_asyncio(loop):
    listener = socket.create_server(("127.0.0.1", 0))
    addr = listener.getsockname()

    async def main():
        with socket.socket() as s:
            s.setblocking(False)
            await loop.sock_connect(s, addr)
            # (connected already: asyncio's loop leaves it so)
            assert await loop.sock_connect(s, addr) is None
            peer, _ = listener.accept()
            peer.close()
        s = socket.socket()
        s.setblocking(False)
        s.close()
        with pytest.raises(OSError) as info:
            await loop.sock_connect(s, addr)
        assert str(info.value) == "[Errno 9] Bad file descriptor"

    try:
        loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        listener.close()


def test_a_second_sock_connect_while_one_is_under_way_waits_for_it_as_asyncio(loop):
    # The first connect to a listener whose backlog is full stays under way
    # until the backlog is drained and the SYN sent again.
    full, fillers = _full_listener()
    addr = full.getsockname()

    async def main():
        with socket.socket() as s:
            s.setblocking(False)
            first = asyncio.ensure_future(loop.sock_connect(s, addr))
            await asyncio.sleep(0)  # (the first one's step: its connect is made)
            second = asyncio.ensure_future(loop.sock_connect(s, addr))
            await asyncio.sleep(0)
            assert not second.done() or second.exception() is None
            full.setblocking(False)
            while not second.done():
                # Room in the backlog for the SYN the kernel sends again.
                accepting = asyncio.ensure_future(loop.sock_accept(full))
                await asyncio.wait({second, accepting}, return_when=asyncio.FIRST_COMPLETED)
                if accepting.done():
                    accepting.result()[0].close()
                else:
                    accepting.cancel()
            assert second.result() is None
            # (asyncio's own loop leaves the first one waiting: its writer
            # callback was the second's since)
            first.cancel()

    try:
        loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        full.close()
        for c in fillers:
            c.close()
