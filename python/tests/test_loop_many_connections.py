"""A server's event loop with many connections at once: the connections
waiting in a listener's backlog are taken within a few turns of the loop
(asyncio's selector loop accepts up to the server's ``backlog`` per
readiness), not one per turn. Turns are counted by a callback that puts
itself back on the loop's ready queue at each turn, never by time; every
loop kind runs them (asyncio's is the reference), and uvloop, which takes
one connection per turn, is not held to the turn bound."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import os
import socket
import tempfile
from collections.abc import Callable, Iterator

import pytest

import loops as loop_kinds
from blockio import _blockio, _proactor

#: Connections made before the server accepts.
WAITING = 64

#: The most turns of the loop from its first until every one of them is a
#: transport whose protocol was made: an accept, its dispatch, the
#: transports' ``connection_made`` (scheduled by each transport) and a few
#: to spare; one connection per turn takes at least ``WAITING``.
TURN_BOUND = 8


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


#: The listeners' families: the kernel tells a ring accept whether more
#: connections wait for TCP only, never for ``AF_UNIX``.
FAMILIES = ["tcp", "unix"]


@contextlib.contextmanager
def _listening(family: str, backlog: int) -> Iterator[tuple[socket.socket, Callable[[], socket.socket]]]:
    """A listener of ``family`` (``"tcp"`` on the loopback, ``"unix"`` at a
    path in a new directory) and a function connecting a client to it;
    each connect returns once the connection waits in the backlog."""
    if family == "tcp":
        listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        with listener:
            yield listener, lambda: socket.create_connection(listener.getsockname())
        return
    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "s")
        listener = socket.socket(socket.AF_UNIX)
        with listener:
            listener.bind(path)
            listener.listen(backlog)

            def connect() -> socket.socket:
                client = socket.socket(socket.AF_UNIX)
                client.connect(path)
                return client

            yield listener, connect


def _served_turns(kind: str, backlog: int, family: str = "tcp") -> tuple[list[int], list[bytes]]:
    """Makes ``WAITING`` connections to a ``family`` listener, then serves
    it with an echo server on a ``kind`` loop (``create_server(sock=...,
    backlog=)``); returns the turn at which each protocol's
    ``connection_made`` ran (counted from the first turn after
    ``create_server``) and what each client got back for its message."""
    with _listening(family, WAITING * 2) as (listener, connect):
        clients = [connect() for _ in range(WAITING)]
        try:
            return _serve_counting(kind, backlog, listener, clients)
        finally:
            for c in clients:
                c.close()


def _serve_counting(
    kind: str, backlog: int, listener: socket.socket, clients: list[socket.socket]
) -> tuple[list[int], list[bytes]]:
    """:func:`_served_turns`' serving, of ``clients`` waiting on ``listener``."""
    made: list[int] = []

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        all_made = loop.create_future()
        turns = 0

        def tick() -> None:
            nonlocal turns
            turns += 1
            if not all_made.done():
                loop.call_soon(tick)

        class Counted(Echo):
            def connection_made(self, transport):
                super().connection_made(transport)
                made.append(turns)
                if len(made) == WAITING and not all_made.done():
                    all_made.set_result(None)

        server = await loop.create_server(Counted, sock=listener, backlog=backlog)
        loop.call_soon(tick)
        await asyncio.wait_for(all_made, 30)
        got = []
        for i, c in enumerate(clients):
            c.setblocking(False)
            await loop.sock_sendall(c, b"%02d" % i)
            got.append(await loop.sock_recv(c, 2))
        server.close()
        await server.wait_closed()
        return got

    got = loop_kinds.run_on(kind, main())
    return made, got


#: The loops held to :data:`TURN_BOUND`: uvloop takes one connection per
#: turn (64 connections, made at turns 1 to 64); it runs only the next
#: test.
BOUNDED = [kind for kind in loop_kinds.NAMES if kind != "uvloop"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", BOUNDED)
def test_connections_waiting_in_the_backlog_are_made_within_a_few_turns(kind, family):
    """64 connections waiting in the backlog of a TCP or a Unix listener
    when the server starts are all made into transports within 8 turns of
    the loop, and each is then served (its message echoed)."""
    made, got = _served_turns(kind, backlog=100, family=family)
    assert len(made) == WAITING
    assert max(made) <= TURN_BOUND, f"connections made at turns {sorted(made)}"
    assert got == [b"%02d" % i for i in range(WAITING)]


#: The server's backlog in the next test: asyncio's bound on the
#: connections taken per readiness.
SMALL_BACKLOG = 8


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_a_server_s_backlog_bounds_what_one_accept_takes_and_every_connection_is_served(kind, family):
    """With ``backlog=8`` no turn of the loop makes more than 8 of the 64
    waiting connections into transports (one accept's completion, or
    asyncio's readiness, takes at most ``backlog``); on the loops that
    take the backlog per completion (not uvloop's, one per turn) they take
    up to 8 at once, so that all 64 are made within 8 turns for the 8
    accepts and :data:`TURN_BOUND` to spare. Every connection is served: a
    completion that stops at the bound arms the next accept."""
    made, got = _served_turns(kind, backlog=SMALL_BACKLOG, family=family)
    assert len(made) == WAITING
    per_turn = collections.Counter(made)
    assert max(per_turn.values()) <= SMALL_BACKLOG, f"connections made per turn: {sorted(per_turn.items())}"
    if kind in BOUNDED:
        assert max(made) <= WAITING // SMALL_BACKLOG + TURN_BOUND, f"connections made per turn: {sorted(per_turn.items())}"
    assert got == [b"%02d" % i for i in range(WAITING)]


def test_accept_now_takes_a_waiting_connection_non_blocking_or_says_none_waits():
    """``LoopRing.accept_now``: None on a listener with no connection
    waiting; a waiting one as ``(descriptor, address)``, the descriptor
    non-blocking and close-on-exec (as the ring's accept makes it) and the
    address the client's own; ``OSError`` (EINVAL) for a socket that is
    not listening."""
    ring = _blockio.LoopRing()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        assert ring.accept_now(listener.fileno()) is None
        with socket.create_connection(listener.getsockname()) as client:
            got = ring.accept_now(listener.fileno())
            assert got is not None
            fd, addr = got
            try:
                assert addr == client.getsockname()
                assert not os.get_blocking(fd)
                assert not os.get_inheritable(fd)
            finally:
                os.close(fd)
        with socket.socket() as plain:
            with pytest.raises(OSError) as raised:
                ring.accept_now(plain.fileno())
            assert raised.value.errno == errno.EINVAL
    finally:
        listener.close()
        ring.close()


def test_a_failed_accept_of_the_waiting_connections_reports_and_accepts_again(monkeypatch):
    """On the io_uring loop, the first accept of the connections waiting
    behind a completed one fails with EMFILE: the loop's exception handler
    is told (asyncio's "socket.accept() out of system resource"), the
    server accepts again after asyncio's retry delay, and every connection
    is served."""
    calls = []
    waiting = _proactor.RingProactor.accept_waiting

    def failing_once(self, listener):
        calls.append(listener)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return waiting(self, listener)

    monkeypatch.setattr(_proactor.RingProactor, "accept_waiting", failing_once)
    listener = socket.create_server(("127.0.0.1", 0), backlog=32)
    clients = [socket.create_connection(listener.getsockname()) for _ in range(8)]
    reported = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["message"]))
        made = []
        all_made = loop.create_future()

        class Counted(Echo):
            def connection_made(self, transport):
                super().connection_made(transport)
                made.append(transport)
                if len(made) == len(clients):
                    all_made.set_result(None)

        server = await loop.create_server(Counted, sock=listener)
        await asyncio.wait_for(all_made, 30)
        got = []
        for i, c in enumerate(clients):
            c.setblocking(False)
            await loop.sock_sendall(c, b"%d" % i)
            got.append(await loop.sock_recv(c, 1))
        server.close()
        await server.wait_closed()
        return got

    try:
        got = loop_kinds.run_on("blockio-uring", main())
    finally:
        for c in clients:
            c.close()
        listener.close()
    assert reported == ["socket.accept() out of system resource"]
    assert got == [b"%d" % i for i in range(len(clients))]


#: Connections each sent one message at once: more than the io_uring
#: loop's submission queue holds (256 entries), so that re-arming their
#: receives flushes it in the middle of a dispatch.
SENDING = 300


@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_every_connection_with_a_message_waiting_is_answered_within_a_few_turns(kind):
    """300 connections, made and idle, are each sent one message in one
    step of the loop: every one of them gets its ``data_received`` within
    4 turns (one turn reaps and dispatches what the kernel finished, with
    no connection left for later turns) and its echo back."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=SENDING)
    clients = [socket.create_connection(listener.getsockname()) for _ in range(SENDING)]
    received: list[int] = []

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        made, all_received = [], loop.create_future()
        all_made = loop.create_future()
        turns = 0

        def tick() -> None:
            nonlocal turns
            turns += 1
            if not all_received.done():
                loop.call_soon(tick)

        class Counted(Echo):
            def connection_made(self, transport):
                super().connection_made(transport)
                made.append(transport)
                if len(made) == SENDING:
                    all_made.set_result(None)

            def data_received(self, data):
                super().data_received(data)
                received.append(turns)
                if len(received) == SENDING:
                    all_received.set_result(None)

        server = await loop.create_server(Counted, sock=listener, backlog=SENDING)
        # No turn is waited for the receives to be armed: asyncio's proactor
        # and selector transports (blockio's are built on them) queue the
        # callback arming theirs right behind connection_made, so all are
        # armed before this coroutine resumes (turns after the last
        # connection_made, through the future's callbacks). A message sent
        # before its receive is armed waits in the socket's buffer anyway.
        await asyncio.wait_for(all_made, 30)
        for i, c in enumerate(clients):
            c.sendall(b"%03d" % i)
        loop.call_soon(tick)
        await asyncio.wait_for(all_received, 30)
        got = []
        for c in clients:
            c.setblocking(False)
            got.append(await loop.sock_recv(c, 3))
        server.close()
        await server.wait_closed()
        return got

    try:
        got = loop_kinds.run_on(kind, main())
    finally:
        for c in clients:
            c.close()
        listener.close()
    assert len(received) == SENDING
    assert max(received) <= 4, f"messages dispatched at turns {sorted(set(received))}"
    assert got == [b"%03d" % i for i in range(SENDING)]


def _kernel_tells_nonempty() -> bool:
    """Whether accept completions say when more connections wait
    (``IORING_CQE_F_SOCK_NONEMPTY``, Linux 6.10 and later)."""
    major, minor = (int(p) for p in os.uname().release.split(".")[:2] if p.isdigit())
    return (major, minor) >= (6, 10)


def test_accept_now_after_a_ring_accept_takes_the_kernel_s_word_on_the_backlog():
    """Right after a ring accept on a TCP listener finished with no
    connection behind it, ``accept_now(fd, tcp=True)`` answers None
    without asking the kernel (where the kernel says so: 6.10 and later), even for a connection made since, which
    the next call takes; after one that finished with another behind it,
    it takes that one. Elsewhere every call asks the kernel."""
    ring = _blockio.LoopRing()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    fd = listener.fileno()
    clients, accepted = [], []

    def ring_accept() -> None:
        token = ring.accept(fd)
        done = ring.wait(None)
        assert [(t, res >= 0) for t, res, _ in done] == [(token, True)]
        accepted.append(done[0][2][0])

    def connect() -> tuple[str, int]:
        clients.append(socket.create_connection(listener.getsockname()))
        return clients[-1].getsockname()

    try:
        connect()
        ring_accept()
        late = connect()
        got = ring.accept_now(fd, True)
        if _kernel_tells_nonempty():
            assert got is None
            got = ring.accept_now(fd, True)
        assert got is not None and got[1] == late
        accepted.append(got[0])
        connect()
        behind = connect()
        ring_accept()
        got = ring.accept_now(fd, True)
        assert got is not None and got[1] == behind
        accepted.append(got[0])
    finally:
        for conn in accepted:
            os.close(conn)
        for c in clients:
            c.close()
        listener.close()
        ring.close()


def test_accept_now_asks_the_kernel_for_a_unix_listener_whatever_a_tcp_accept_said():
    """The kernel never says that connections wait behind an ``AF_UNIX``
    accept: after a ring accept on a Unix listener with another connection
    waiting, ``accept_now(fd, tcp=False)`` takes that one, also on a ring
    whose TCP accept had the kernel's word that more waited."""
    ring = _blockio.LoopRing()
    accepted: list[int] = []
    with _listening("tcp", 8) as (tcp, tcp_connect), _listening("unix", 8) as (unix, unix_connect):
        clients = [tcp_connect(), tcp_connect(), unix_connect(), unix_connect()]
        try:
            for listener in (tcp, unix):
                listener.setblocking(False)
                token = ring.accept(listener.fileno())
                done = ring.wait(None)
                assert [(t, res >= 0) for t, res, _ in done] == [(token, True)]
                accepted.append(done[0][2][0])
            got = ring.accept_now(unix.fileno(), False)
            assert got is not None
            accepted.append(got[0])
            assert ring.accept_now(unix.fileno(), False) is None
        finally:
            for conn in accepted:
                os.close(conn)
            for c in clients:
                c.close()
            ring.close()
