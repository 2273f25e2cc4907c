"""The socket transport of blockio's event loop, as protocols see it: a
receive's completion reaches ``data_received`` from the loop's dispatch of
its batch, with no future per message; and asyncio's order is kept where
that matters (callbacks queued before a completion run before the protocol
sees it; nothing while reading is paused; an exception that escapes a
protocol loses no other connection's bytes). Both backends where the
behaviour is asyncio's; the count of futures is the io_uring loop's own."""

from __future__ import annotations

import asyncio
import collections
import fcntl
import gc
import hashlib
import os
import random
import socket
import struct
import sys
import tempfile
import termios
import threading
import traceback
import weakref

import pytest

import blockio
import loops as loop_kinds
from blockio import _proactor
from waits import await_until
from waits import DEADLINE, await_until


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class Collect(asyncio.Protocol):
    """Keeps what it receives and the order of its calls."""

    def __init__(self):
        self.data = bytearray()
        self.calls: list[str] = []
        self.lost = asyncio.get_running_loop().create_future()
        self.made = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.calls.append("made")
        self.made.set_result(None)

    def data_received(self, data):
        self.calls.append("data")
        self.data += data

    def eof_received(self):
        self.calls.append("eof")

    def connection_lost(self, exc):
        self.calls.append("lost")
        self.lost.set_result(exc)


def test_a_message_reaches_data_received_with_no_future(monkeypatch):
    """200 round trips between two protocols on the io_uring loop make no
    ``OpFuture``: each receive's completion calls the transport from the
    dispatch (each send goes out at once)."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    made = []
    init = _proactor.OpFuture.__init__

    def counting(self, *args, **kw):
        made.append(self)
        init(self, *args, **kw)

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(Collect, "127.0.0.1", port)
        tr.write(b"warm")
        await await_until(lambda: bytes(pr.data) == b"warm", "the first echo")
        monkeypatch.setattr(_proactor.OpFuture, "__init__", counting)
        for i in range(200):
            want = len(pr.data) + 8
            tr.write(b"%08d" % i)
            await await_until(lambda: len(pr.data) >= want, f"echo {i}")
        monkeypatch.setattr(_proactor.OpFuture, "__init__", init)
        tr.close()
        await pr.lost
        server.close()
        await server.wait_closed()
        return bytes(pr.data)

    try:
        got = loop.run_until_complete(main())
    finally:
        loop.close()
    assert got == b"warm" + b"".join(b"%08d" % i for i in range(200))
    assert made == [], f"{len(made)} futures for 200 round trips"


def _blockio_calls_per_echo(n: int) -> collections.Counter:
    """The Python functions of blockio's own modules that an echo server on
    the io_uring loop runs while a blocking client in a thread makes ``n``
    round trips of 64 bytes (the server's thread only: ``sys.setprofile``
    is per thread)."""
    loop = blockio.new_event_loop()
    calls: collections.Counter = collections.Counter()
    ours = os.path.dirname(blockio.__file__)

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(ours):
            calls[frame.f_code.co_name] += 1

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        go, profiled = threading.Event(), threading.Event()
        done = loop.create_future()
        failed: list[BaseException] = []

        def client():
            try:
                with socket.create_connection(("127.0.0.1", port)) as c:
                    c.settimeout(DEADLINE)
                    c.sendall(b"warm")
                    assert c.recv(64) == b"warm"
                    go.set()
                    assert profiled.wait(DEADLINE), "the server's profile"
                    for i in range(n):
                        c.sendall(b"%064d" % i)
                        got = b""
                        while len(got) < 64:
                            got += c.recv(64 - len(got))
                        assert got == b"%064d" % i
            except BaseException as exc:
                failed.append(exc)
            finally:
                go.set()
                profiled.set()
                loop.call_soon_threadsafe(done.set_result, None)

        thread = threading.Thread(target=client)
        thread.start()
        await loop.run_in_executor(None, go.wait)
        sys.setprofile(profile)
        profiled.set()
        try:
            await done
        finally:
            sys.setprofile(None)
        thread.join()
        server.close()
        await server.wait_closed()
        assert not failed, failed

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return calls


def test_a_message_runs_no_loop_code_in_python_but_the_loops_run_once(monkeypatch):
    """Between a socket's completion and the echo's send, blockio's Python
    code is the loop's ``_run_once`` (one per turn, which hands the turn to
    Rust: the proactor's ``select`` runs there, without its Python frame):
    the dispatch of the batch, the hand-over of the bytes to a plain protocol's
    ``data_received`` with the next receive's arming (what the transport's
    ``_received`` does, in Rust while the transport reads on) and the
    transport's ``write`` (``_blockio.StreamTx.write`` while nothing is in
    flight or buffered) are the ring's, in Rust. (Before, 16 Python calls
    per message: the dispatch's ``_finish``, ``_finish_stream`` and
    ``deliver``, the socket's release, the arming's ``_receive`` and
    ``receive``, the write's ``_write_now`` and ``send_or_future``...; then
    ``_received`` and ``write``; then ``write``.)"""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    n = 300
    calls = _blockio_calls_per_echo(n)
    # The end (the client's close, the wake-up of call_soon_threadsafe,
    # the server's close) runs some calls once.
    frequent = {name for name, count in calls.items() if count > 10}
    assert frequent <= {"_run_once"}, calls
    # _received only for the end of stream; no write of Python's.
    assert calls["write"] == 0 and calls["_write_slow"] == 0 and calls["_received"] <= 2, calls
    assert calls["_run_once"] >= n and calls["select"] == 0, calls
    assert sum(calls.values()) - calls["_run_once"] < 60, calls


def test_an_exception_from_data_received_ends_the_connection(loop):
    """An exception that a plain protocol's ``data_received`` lets out is
    the transport's fatal error, as on asyncio's selector loop and uvloop:
    the loop's exception handler gets it with asyncio's message, and the
    protocol's ``connection_lost`` gets the exception."""
    seen = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))

    class Failing(Collect):
        def data_received(self, data):
            super().data_received(data)
            raise ValueError("the protocol failed")

    a, b = socket.socketpair()

    async def main():
        _tr, pr = await loop.connect_accepted_socket(Failing, a)
        b.sendall(b"one")
        return pr, await asyncio.wait_for(pr.lost, DEADLINE)

    try:
        pr, lost = loop.run_until_complete(main())
        b.settimeout(DEADLINE)
        assert b.recv(10) == b""  # the connection is ended
    finally:
        b.close()
    assert isinstance(lost, ValueError)
    assert bytes(pr.data) == b"one"
    assert len(seen) == 1
    assert isinstance(seen[0]["exception"], ValueError)
    assert seen[0]["message"] == "Fatal error: protocol.data_received() call failed."


def test_an_exception_from_data_received_keeps_its_traceback(loop):
    """The exception that ends the connection carries its traceback to the
    exception handler and to ``connection_lost``, as on asyncio's loop: its
    frames name the protocol's own code (the default handler logs them)."""
    seen = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))

    class Failing(Collect):
        def data_received(self, data):
            super().data_received(data)
            self.failing_step()

        def failing_step(self):
            raise ValueError("the protocol failed")

    a, b = socket.socketpair()

    async def main():
        _tr, pr = await loop.connect_accepted_socket(Failing, a)
        b.sendall(b"one")
        return await asyncio.wait_for(pr.lost, DEADLINE)

    try:
        lost = loop.run_until_complete(main())
    finally:
        b.close()
    assert isinstance(lost, ValueError)
    assert len(seen) == 1 and seen[0]["exception"] is lost
    names = [frame.name for frame in traceback.extract_tb(lost.__traceback__)]
    assert "data_received" in names and "failing_step" in names, names


def test_a_data_received_replaced_on_the_protocol_is_called(loop):
    """``data_received`` is looked up on the protocol per message, as
    asyncio's transports do: one assigned to the protocol object while the
    connection reads on gets the next bytes."""
    replaced = []

    class Replacing(Collect):
        def data_received(self, data):
            super().data_received(data)
            self.data_received = replaced.append

    a, b = socket.socketpair()

    async def main():
        _tr, pr = await loop.connect_accepted_socket(Replacing, a)
        b.sendall(b"one")
        await await_until(lambda: bytes(pr.data) == b"one", "the first bytes")
        b.sendall(b"two")
        await await_until(lambda: b"".join(replaced) == b"two", "the replaced data_received")
        return pr

    try:
        pr = loop.run_until_complete(main())
    finally:
        b.close()
    assert bytes(pr.data) == b"one"
    assert b"".join(replaced) == b"two"


def test_a_closed_connection_s_receive_is_collected(monkeypatch):
    """A transport's receive keeps its proactor's tables (Rust fields, seen
    by the cycle collector): once the connections are closed and the loop
    too, none of their ``StreamReceive`` objects is left."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")

    def receives() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, _proactor.StreamReceive))

    before = receives()
    loop = blockio.new_event_loop()

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for i in range(20):
            tr, pr = await loop.create_connection(Collect, "127.0.0.1", port)
            tr.write(b"%d" % i)
            await await_until(lambda: bytes(pr.data) == b"%d" % i, "the echo")
            tr.close()
            await pr.lost
        server.close()
        await server.wait_closed()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    del loop
    assert receives() <= before


def test_a_server_s_connection_makes_no_future_and_its_socket_is_non_blocking(monkeypatch):
    """A server's accept on the io_uring loop calls back from the dispatch
    (``ServerAccept``): 30 connections served go through no future-making
    ``RingProactor.accept``; each accepted socket is non-blocking (made so
    by the ring's accept, and so marked in the object without a
    ``setblocking`` call) and a plain stream socket to its user."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    accepts = []
    accept = _proactor.RingProactor.accept

    def counting(self, *args, **kw):
        accepts.append(args)
        return accept(self, *args, **kw)

    monkeypatch.setattr(_proactor.RingProactor, "accept", counting)
    socks = []

    class Keep(Echo):
        def connection_made(self, transport):
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            # The descriptor's own mode (O_NONBLOCK), not the object's idea
            # of it.
            socks.append((os.get_blocking(sock.fileno()), sock.gettimeout(), sock.type))

    async def main():
        server = await loop.create_server(Keep, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        clients = []
        for i in range(30):
            c = socket.create_connection(("127.0.0.1", port))
            c.setblocking(False)
            clients.append(c)
            await loop.sock_sendall(c, b"%02d" % i)
            assert await loop.sock_recv(c, 2) == b"%02d" % i
        for c in clients:
            c.close()
        server.close()
        await server.wait_closed()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert accepts == []
    assert len(socks) == 30
    assert set(socks) == {(False, 0.0, socket.SOCK_STREAM)}, socks


def test_callbacks_queued_before_a_completion_run_before_the_protocol_sees_it(loop):
    """The server writes as soon as it has the connection, so the bytes are
    there when the client's first receive is submitted: the coroutine that
    made the connection still resumes (its wake-up was queued first) before
    ``data_received``, as on asyncio's loops."""

    class Greet(asyncio.Protocol):
        def connection_made(self, transport):
            transport.write(b"hello")

    seen = []

    class Client(Collect):
        def data_received(self, data):
            seen.append(resumed)
            super().data_received(data)

    resumed = False

    async def main():
        nonlocal resumed
        server = await loop.create_server(Greet, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for _ in range(20):
            resumed = False
            tr, pr = await loop.create_connection(Client, "127.0.0.1", port)
            resumed = True
            await await_until(lambda: bytes(pr.data) == b"hello", "the greeting")
            tr.close()
            await pr.lost
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    assert seen == [True] * 20


def test_no_protocol_call_while_reading_is_paused(loop):
    """A protocol that pauses reading gets no call until it resumes; then
    every byte, in order, and the end of the stream after them."""
    a, b = socket.socketpair()

    class Pausing(Collect):
        def data_received(self, data):
            super().data_received(data)
            self.transport.pause_reading()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Pausing, a)
        b.sendall(b"first")
        await await_until(lambda: pr.calls == ["made", "data"], "the first message")
        assert not tr.is_reading()
        b.sendall(b"second")
        b.shutdown(socket.SHUT_WR)
        # The loop turns many times with the bytes and the end waiting.
        for _ in range(50):
            await asyncio.sleep(0)
        assert pr.calls == ["made", "data"], pr.calls
        while not pr.lost.done():
            tr.resume_reading()
            await asyncio.sleep(0)
        return pr

    pr = loop.run_until_complete(main())
    b.close()
    assert bytes(pr.data) == b"firstsecond"
    assert pr.calls[-2:] == ["eof", "lost"]
    assert pr.calls.count("lost") == 1


async def _settled(loop, tr):
    """Waits until nothing can be on its way to ``tr``'s protocol: no
    receive of the transport's is left in the ring (its completion is
    dispatched), and every callback queued before has run."""
    if loop.backend == "uring":
        rx = tr._rx
        ring = loop._proactor._ring
        await await_until(lambda: not any(r is rx for r in ring.receives()), "the receive's completion")
    turn = loop.create_future()
    loop.call_soon(turn.set_result, None)
    await turn


def test_no_data_is_received_after_close(loop):
    """``close()``: "no more data will be received" (asyncio's documented
    contract; its selector loop and uvloop stop reading at once). Bytes
    that reach the socket just before ``close()``, with a receive armed
    that takes them, and an end of stream after them, never reach the
    protocol: uvicorn's h11 protocol, closing an idle keep-alive connection
    as a request came in, took the request's bytes on its closed
    connection for an invalid request."""
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        b.sendall(b"first")
        await await_until(lambda: pr.calls == ["made", "data"], "the first message")
        b.sendall(b"after")
        b.shutdown(socket.SHUT_WR)
        tr.close()
        await pr.lost
        await _settled(loop, tr)
        return pr

    pr = loop.run_until_complete(main())
    b.close()
    assert bytes(pr.data) == b"first"
    assert pr.calls == ["made", "data", "lost"]


class Buffered(asyncio.BufferedProtocol):
    """A buffered protocol that keeps what it receives; once it holds
    ``switch_at`` bytes it hands the transport to ``then``."""

    def __init__(self, switch_at, then):
        self.data = bytearray()
        self.buf = bytearray(64)
        self.switch_at = switch_at
        self.then = then

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.data += self.buf[:nbytes]
        if len(self.data) >= self.switch_at and self.then is not None:
            then, self.then = self.then, None
            self.transport.set_protocol(then)

    def data_received(self, data):  # a plain protocol's call, never a buffered one's
        raise AssertionError(f"data_received({data!r}) on a BufferedProtocol")


def test_set_protocol_between_a_plain_and_a_buffered_protocol_sends_each_its_bytes(loop):
    """A protocol swapped by ``set_protocol`` in the middle of a connection
    (as ``start_tls`` swaps in its ``SSLProtocol``), from a plain one to a
    buffered one and back to another plain one: each message reaches the
    protocol set when it arrives, by that protocol's own calls
    (``get_buffer``/``buffer_updated`` for the buffered one, which must get
    no ``data_received``), every byte once and in order. The first wrong
    delivery (bytes that are not a start of the protocol's message, or an
    error the loop reports) fails the test at once. The code under test is
    the io_uring loop's transport (its ``set_protocol`` and receive path);
    on the epoll backend the transport is asyncio's selector one, so that
    case checks the reference behaviour the io_uring one must match."""
    a, b = socket.socketpair()
    last = None
    errors: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx["message"]))

    class Switching(Collect):
        def data_received(self, data):
            super().data_received(data)
            if len(self.data) >= len(b"first") and self.then is not None:
                then, self.then = self.then, None
                then.transport = self.transport
                self.transport.set_protocol(then)

    async def main():
        nonlocal last
        last = Collect()
        buffered = Buffered(len(b"second"), last)

        def first():
            p = Switching()
            p.then = buffered
            return p

        tr, pr = await loop.connect_accepted_socket(first, a)

        def so_far(cond):
            # Fails at the first wrong delivery rather than at the deadline.
            def check():
                assert not errors, errors
                assert not tr.is_closing(), "the transport was closed"
                for p, want in ((pr, b"first"), (buffered, b"second"), (last, b"third")):
                    got = bytes(p.data)
                    assert want.startswith(got), f"{type(p).__name__} got {got!r}, not a start of {want!r}"
                return cond()

            return check

        b.sendall(b"first")
        await await_until(so_far(lambda: tr.get_protocol() is buffered), "the switch to the buffered protocol")
        b.sendall(b"second")
        await await_until(so_far(lambda: tr.get_protocol() is last), "the switch back to a plain protocol")
        b.sendall(b"third")
        await await_until(so_far(lambda: bytes(last.data) == b"third"), "the third message")
        assert tr.is_reading()
        tr.close()
        await last.lost
        return pr, buffered

    pr, buffered = loop.run_until_complete(main())
    b.close()
    assert bytes(pr.data) == b"first"
    assert bytes(buffered.data) == b"second"
    assert bytes(last.data) == b"third"
    assert last.calls == ["data", "lost"]


def test_a_protocol_assigned_to_the_transport_s_attribute_gets_the_next_bytes(loop):
    """A protocol put in place by assigning the transport's ``_protocol``
    (not through ``set_protocol``) from ``data_received`` gets the bytes
    that come next, by its own ``data_received``, and the first protocol
    none of them: on the io_uring loop the dispatch hands a plain
    protocol's bytes to the ``data_received`` it took when the transport's
    state last changed, so that change must be seen however it is made. On
    the epoll backend (asyncio's selector transport) this is the reference
    behaviour."""
    a, b = socket.socketpair()
    then = None

    class Handing(Collect):
        def data_received(self, data):
            super().data_received(data)
            if then is not None and self.transport._protocol is self:
                then.transport = self.transport
                self.transport._protocol = then

    async def main():
        nonlocal then
        then = Collect()
        tr, pr = await loop.connect_accepted_socket(Handing, a)
        b.sendall(b"first")
        await await_until(lambda: tr._protocol is then, "the first message")
        for chunk in (b"second", b"third"):
            b.sendall(chunk)
            # (fails at once when the first protocol gets bytes again)
            await await_until(lambda: bytes(then.data).endswith(chunk) or bytes(pr.data) != b"first", "the next message")
        tr.close()
        await then.lost
        return pr

    pr = loop.run_until_complete(main())
    b.close()
    assert bytes(pr.data) == b"first"
    assert bytes(then.data) == b"secondthird"
    assert then.calls == ["data", "data", "lost"]


def test_a_bytes_write_larger_than_the_socket_takes_reaches_the_peer_whole_and_in_order(loop):
    """A ``bytes`` write of 1 MiB to a socket whose buffer takes a few KiB
    at once (the part taken at once from the object in place, the rest
    sent later from it), then a ``bytearray`` written behind it: the peer
    gets every byte once and in order. The code under test is the io_uring
    loop's send (``LoopRing.send``); on the epoll backend the transport is
    asyncio's selector one, so that case checks the reference behaviour
    the io_uring one must match."""
    a, b = _tight_pair()
    big = random.Random(63).randbytes(1 << 20)
    tail = bytearray(b"and the tail, written while the rest is on its way")
    want = len(big) + len(tail)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        tr.write(big)
        tr.write(tail)
        got = await _read_all(loop, b, want)
        tr.close()
        await pr.lost
        return got

    try:
        got = loop.run_until_complete(main())
    finally:
        b.close()
    assert len(got) == want
    assert got == big + tail


class Small(asyncio.BufferedProtocol):
    """A buffered protocol whose buffer holds 4 bytes: a receive of more
    takes several ``get_buffer``/``buffer_updated`` turns. Once it holds
    ``switch_at`` bytes it hands the transport to ``then``; once it holds
    ``total`` it resolves ``done``. ``wrong`` is failed by the first call
    a buffered protocol must not get."""

    def __init__(self, wrong, switch_at=0, then=None, total=0, done=None):
        self.buf = bytearray(4)
        self.data = bytearray()
        self.updates: list[int] = []
        self.wrong = wrong
        self.switch_at = switch_at
        self.then = then
        self.total = total
        self.done = done

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self.updates.append(nbytes)
        self.data += self.buf[:nbytes]
        if self.then is not None and len(self.data) >= self.switch_at:
            then, self.then = self.then, None
            self.transport.set_protocol(then)
        if self.done is not None and len(self.data) >= self.total and not self.done.done():
            self.done.set_result(None)

    def data_received(self, data):  # a plain protocol's call, never a buffered one's
        _fail(self.wrong, f"data_received({data!r}) on a BufferedProtocol")

    def connection_lost(self, exc):
        _fail(self.wrong, f"connection_lost({exc!r}) before the transport was closed")


class Upto(asyncio.Protocol):
    """A plain protocol that resolves ``done`` once it holds ``want`` and
    fails ``wrong`` on any byte beyond it or any other call; ``then``, if
    given, is set as the transport's protocol inside ``data_received``."""

    def __init__(self, want, done, wrong, then=None):
        self.want, self.done, self.wrong, self.then = want, done, wrong, then
        self.data = bytearray()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data
        if not self.want.startswith(bytes(self.data)):
            _fail(self.wrong, f"data_received gave {bytes(self.data)!r}, not a start of {self.want!r}")
        elif bytes(self.data) == self.want and not self.done.done():
            if self.then is not None:
                self.then.transport = self.transport
                self.transport.set_protocol(self.then)
            self.done.set_result(None)

    def connection_lost(self, exc):
        _fail(self.wrong, f"connection_lost({exc!r}) before the transport was closed")


def _fail(wrong, what):
    if not wrong.done():
        wrong.set_exception(AssertionError(what))


async def _first_of(done, wrong):
    """Waits for ``done``; the first wrong delivery (``wrong``) fails at
    once rather than at the deadline."""
    await asyncio.wait([done, wrong], timeout=DEADLINE, return_when=asyncio.FIRST_COMPLETED)
    if wrong.done():
        wrong.result()  # raises the wrong delivery's AssertionError
    assert done.done(), f"not within {DEADLINE} s"


def _end(tr, wrong):
    """Aborts ``tr`` once the test has seen what it waited for: the
    connection_lost that follows is not a wrong delivery."""
    if not wrong.done():
        wrong.set_result(None)
    tr.abort()


@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_a_plain_protocol_set_inside_buffer_updated_gets_the_rest_of_the_receive(kind):
    """A buffered protocol with a 4-byte buffer hands the transport to a
    plain protocol (``set_protocol``) inside its first ``buffer_updated``,
    the peer having sent 16 bytes at once: the buffered protocol gets the
    first 4, the plain one the other 12 by ``data_received``, and the
    connection goes on with no error. On blockio's io_uring loop the 16
    bytes are one receive that the transport feeds to the protocol itself;
    asyncio's, uvloop's and blockio's epoll loop (asyncio's selector
    transport) receive into the protocol's buffer and are the reference."""
    a, b = socket.socketpair()

    async def main():
        loop = asyncio.get_running_loop()
        done, wrong = loop.create_future(), loop.create_future()
        loop.set_exception_handler(lambda _loop, ctx: _fail(wrong, ctx["message"]))
        plain = Upto(b"EFGHIJKLMNOP", done, wrong)
        small = Small(wrong, switch_at=1, then=plain)
        b.sendall(b"ABCDEFGHIJKLMNOP")  # queued before the first receive
        tr, _ = await loop.connect_accepted_socket(lambda: small, a)
        await _first_of(done, wrong)
        assert not tr.is_closing()
        _end(tr, wrong)
        return small, plain

    try:
        small, plain = loop_kinds.run_on(kind, main())
    finally:
        b.close()
    assert bytes(small.data) == b"ABCD"
    assert small.updates == [4]
    assert bytes(plain.data) == b"EFGHIJKLMNOP"


@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_a_buffered_protocol_set_inside_data_received_gets_the_next_bytes_by_get_buffer(kind):
    """The reverse swap: a plain protocol hands the transport to a buffered
    one with a 4-byte buffer inside ``data_received``; the peer's next 16
    bytes, sent at once, reach the buffered protocol by ``get_buffer``/
    ``buffer_updated`` in 4-byte pieces, in order, and none by
    ``data_received``. Every loop (asyncio's, uvloop's and blockio's epoll
    one are the reference for blockio's io_uring transport)."""
    a, b = socket.socketpair()

    async def main():
        loop = asyncio.get_running_loop()
        first, done, wrong = loop.create_future(), loop.create_future(), loop.create_future()
        loop.set_exception_handler(lambda _loop, ctx: _fail(wrong, ctx["message"]))
        small = Small(wrong, total=16, done=done)
        plain = Upto(b"ABCD", first, wrong, then=small)
        tr, _ = await loop.connect_accepted_socket(lambda: plain, a)
        b.sendall(b"ABCD")
        await _first_of(first, wrong)
        assert tr.get_protocol() is small
        b.sendall(b"EFGHIJKLMNOPQRST")
        await _first_of(done, wrong)
        assert not tr.is_closing()
        _end(tr, wrong)
        return small, plain

    try:
        small, plain = loop_kinds.run_on(kind, main())
    finally:
        b.close()
    assert bytes(plain.data) == b"ABCD"
    assert bytes(small.data) == b"EFGHIJKLMNOPQRST"
    assert small.updates == [4, 4, 4, 4]


def _unread(sock):
    """The bytes waiting in ``sock``'s receive queue (``FIONREAD``)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


def test_no_data_is_received_after_a_close_queued_ahead_of_the_delivery(loop):
    """A batch whose completion brings bytes while callbacks are queued
    hands them on behind those callbacks; one of them closes the
    transport: the bytes never reach the protocol (asyncio's selector loop
    reads nothing after ``close()``)."""
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        done = loop.create_future()
        turns = {"n": 0}

        def ping():
            # Always queued, so the completion's delivery waits behind it.
            turns["n"] += 1
            if turns["n"] == 1:
                b.sendall(b"late")
            elif _unread(a) == 0 or turns["n"] > 100_000:
                pr.calls.append("close" if _unread(a) == 0 else "close, the bytes unread")
                tr.close()
                done.set_result(None)
                return
            loop.call_soon(ping)

        loop.call_soon(ping)
        await done
        await pr.lost
        return pr

    pr = loop.run_until_complete(main())
    b.close()
    assert "close" in pr.calls, pr.calls
    assert pr.calls[pr.calls.index("close") + 1 :] == ["lost"], pr.calls



def test_no_data_is_received_after_a_resume_then_close(loop):
    """Reading resumed, then the transport closed before the loop's next
    turn (uvicorn: a response done, reading resumed, the connection
    closed): bytes a receive took while reading was paused are not handed
    to the protocol after ``close()``, as on asyncio's selector loop, which
    leaves them in the socket."""
    a, b = socket.socketpair()

    class Pausing(Collect):
        def data_received(self, data):
            super().data_received(data)
            self.transport.pause_reading()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Pausing, a)
        b.sendall(b"first")
        await await_until(lambda: pr.calls == ["made", "data"], "the first message")
        b.sendall(b"kept")
        if loop.backend == "uring":
            # The receive armed before the pause takes them, and its
            # completion leaves them with the paused transport (the epoll
            # loop reads nothing while paused).
            await await_until(lambda: _unread(a) == 0, "the receive in flight took the bytes")
            await await_until(lambda: tr._read_fut is None, "the receive's completion dispatched")
        tr.resume_reading()
        tr.close()
        await pr.lost
        await _settled(loop, tr)
        return pr

    pr = loop.run_until_complete(main())
    b.close()
    assert bytes(pr.data) == b"first"
    assert pr.calls == ["made", "data", "lost"]


def test_an_exception_escaping_a_protocol_loses_no_other_connections_bytes(loop):
    """``KeyboardInterrupt`` from one protocol's ``data_received`` ends the
    run; the other connection, whose bytes came in the same wake-up, still
    gets them in the next run."""
    raised = []

    class Interrupting(Collect):
        def data_received(self, data):
            super().data_received(data)
            if not raised:
                raised.append(self)
                raise KeyboardInterrupt

    pairs = [socket.socketpair() for _ in range(2)]

    async def connect():
        return [(await loop.connect_accepted_socket(Interrupting, a))[1] for a, _b in pairs]

    protocols = loop.run_until_complete(connect())
    for _a, b in pairs:
        b.sendall(b"payload")
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(await_until(lambda: False, "the interrupt"))

    async def rest():
        await await_until(lambda: all(bytes(p.data) == b"payload" for p in protocols), "both payloads")
        for p in protocols:
            p.transport.close()
            await p.lost

    loop.run_until_complete(rest())
    for a, b in pairs:
        b.close()
    assert len(raised) == 1


def test_a_write_after_the_loop_s_close_goes_out_as_on_asyncio_s_loop(loop):
    """A transport left open when its loop is closed: a write that the
    socket takes at once still goes out (asyncio's selector loop sends it
    from ``write``); one it cannot take raises ``RuntimeError``."""
    a, b = socket.socketpair()
    tr, _pr = loop.run_until_complete(loop.create_connection(asyncio.Protocol, sock=a))
    loop.close()
    try:
        tr.write(b"x")
        tr.write(bytearray(b"y"))
        b.settimeout(DEADLINE)
        assert b.recv(10) == b"xy"
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            tr.write(b"z" * (64 << 20))
    finally:
        a.close()
        b.close()


def test_bytes_a_cancelled_receive_kept_reach_a_transport_s_receive_in_flight_first(monkeypatch):
    """A transport's receive is in flight (kept in the ring's slab, not in
    the proactor's tables) when bytes a cancelled receive took on its
    socket are kept (as a ``sock_recv`` cancelled after its bytes came
    keeps them): that receive is cancelled and served from them, so the
    protocol gets them before what the peer sends next, in order."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        fd = a.fileno()
        proactor = loop._proactor
        await await_until(lambda: proactor._ring.receiving(fd) is not None, "the transport's receive")
        proactor.keep_received(a, b"first")
        await await_until(lambda: bytes(pr.data) == b"first", "the kept bytes")
        b.sendall(b"second")
        await await_until(lambda: len(pr.data) >= 11, "the next bytes")
        b.close()
        await pr.lost
        return pr

    try:
        pr = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert bytes(pr.data) == b"firstsecond"
    assert pr.calls == ["made", "data", "data", "eof", "lost"]


def test_closing_the_loop_ends_the_hold_of_a_transport_s_receive_in_flight(monkeypatch):
    """A transport's receive in flight holds its socket open (its real
    close waits); the loop's close cancels it and ends the hold, so a close
    of the socket afterwards closes its descriptor."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        await await_until(lambda: any(r is tr._rx for r in loop._proactor._ring.receives()), "the receive")
        return tr

    try:
        tr = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
        held = a._io_refs
    finally:
        loop.close()
    assert held == 1
    assert a._io_refs == 0
    assert tr._rx.cancelled
    a.close()
    b.close()
    assert a.fileno() == -1


def test_cancel_op_of_a_transport_s_receive_says_the_kernel_took_it_and_ends_its_hold(monkeypatch):
    """``cancel_op`` reaches a transport's receive although it is kept in
    the ring's slab, not in the proactor's ``_ops``: it returns True once
    the kernel took the cancel, the receive's hold on its socket ended then
    (not at its completion); a second cancel of it, and a token that is not
    an integer (kept bytes' marker), return False."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        fd = a.fileno()
        proactor = loop._proactor
        await await_until(lambda: proactor._ring.receiving(fd) is not None, "the transport's receive")
        rx = tr._rx
        token = rx.token
        assert token == proactor._ring.receiving(fd) and token not in proactor._ops
        held = a._io_refs
        rx.cancelled = True  # as StreamReceive.cancel does before cancel_op
        taken = proactor.cancel_op(token)
        return held, taken, a._io_refs, proactor.cancel_op(token), proactor.cancel_op(object())

    try:
        held, taken, after, again, marker = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
        a.close()
        b.close()
    assert held == 1
    assert taken is True
    assert after == 0
    assert again is False
    assert marker is False


def test_the_loop_s_close_lands_a_file_write_and_ends_a_transport_receive_s_hold(monkeypatch, tmp_path):
    """A transport's receive (in the ring's slab, holding its socket) and a
    file write (``Engine.awrite``'s ``pwrite``) in flight on one ring:
    ``cancel_op`` refuses the write (False, the write goes on), and the
    loop's close lands the write's bytes and hands the receive back
    cancelled with its hold ended."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    a, b = socket.socketpair()
    path = tmp_path / "out.bin"
    data = os.urandom(1 << 20)
    wfd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        proactor = loop._proactor
        await await_until(lambda: proactor._ring.receiving(a.fileno()) is not None, "the transport's receive")
        before = proactor._ring.in_flight()
        write = proactor.pwrite(wfd, 0, data)
        refused = proactor.cancel_op(write._token)
        return tr, before, proactor._ring.in_flight(), refused, a._io_refs

    try:
        tr, before, during, refused, held = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
        os.close(wfd)
    try:
        assert during == before + 1  # the write, still in the slab
        assert refused is False
        assert held == 1
        assert a._io_refs == 0
        assert tr._rx.cancelled
        assert path.read_bytes() == data
    finally:
        a.close()
        b.close()


class Chunks(asyncio.Protocol):
    """Keeps every bytes object it is handed, with its digest then, and
    lets a test wait for a count of bytes in all (``received``)."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.digests: list[bytes] = []
        self.total = 0
        self._want = 0
        self._until: asyncio.Future | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.chunks.append(data)
        self.digests.append(hashlib.sha256(data).digest())
        self.total += len(data)
        if self._until is not None and self.total >= self._want and not self._until.done():
            self._until.set_result(None)

    def connection_lost(self, exc):
        self.lost.set_result(exc)

    async def received(self, total):
        """Returns once ``total`` bytes in all have come."""
        if self.total < total:
            self._want = total
            self._until = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(self._until, DEADLINE)
        assert self.total == total, (self.total, total)

    def unchanged(self):
        """Whether every object kept still has the digest it had when it
        was handed on."""
        return [hashlib.sha256(c).digest() for c in self.chunks] == self.digests


def _send_at_once(sock, data):
    """Queues all of ``data`` on ``sock`` in one system call, from the
    loop's thread: a receive the loop armed runs after it returns, so it
    finds the whole message there."""
    sock.setblocking(False)
    assert sock.send(data) == len(data)


def test_a_receive_s_first_buffer_grows_after_a_large_message_and_shrinks_after_small_ones(monkeypatch):
    """On the io_uring loop a transport's receive lends the kernel a 2 KiB
    first buffer; a message that fills it (whose rest then takes a
    ``FIONREAD`` and a second ``recv``) grows the next one to the power of
    two above the message (128 KiB for 100 KiB taken at once), so that the
    next such message is one receive, and small messages halve it back to
    2 KiB (an idle connection pins 2 KiB again). Every byte arrives once
    and in order through the growth and the shrinking."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    big = random.Random(7).randbytes(100 * 1024)
    a, b = socket.socketpair()
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Chunks, a)
        rx = tr._rx
        assert rx.first == 2048
        _send_at_once(b, big)
        await pr.received(len(big))
        assert rx.first == 128 * 1024, rx.first
        expected = bytearray(big)
        for i in range(7):
            expected += b"%d" % i
            _send_at_once(b, b"%d" % i)
            await pr.received(len(expected))
        assert rx.first == 2048, rx.first
        _send_at_once(b, big)
        expected += big
        await pr.received(len(expected))
        assert b"".join(pr.chunks) == bytes(expected)
        tr.close()
        await pr.lost

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        b.close()


def test_a_message_over_a_grown_buffer_arrives_whole_and_kept_bytes_never_change(monkeypatch):
    """A 260 KiB message on a connection whose receive grew to 128 KiB
    fills that buffer; the rest the socket holds (up to 256 KiB in all) is
    taken at once and put behind it, so the protocol gets 256 KiB then 4
    KiB, every byte in order. The receives after it lend the kernel new
    ``bytes`` objects, handed on cut to size: each object the protocol
    keeps stays as it was handed on while later messages arrive."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    rng = random.Random(11)
    first = rng.randbytes(100 * 1024)
    big = rng.randbytes(260 * 1024)
    later = [rng.randbytes(n) for n in (100 * 1024, 70 * 1024, 3000, 200 * 1024, 65 * 1024)]
    a, b = socket.socketpair()
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Chunks, a)
        rx = tr._rx
        _send_at_once(b, first)
        await pr.received(len(first))
        assert rx.first == 128 * 1024, rx.first
        _send_at_once(b, big)
        await pr.received(len(first) + len(big))
        sizes = [len(c) for c in pr.chunks]
        assert sizes[1:] == [256 * 1024, 4 * 1024], sizes
        total = pr.total
        for m in later:
            _send_at_once(b, m)
            total += len(m)
            await pr.received(total)
        assert [len(c) for c in pr.chunks[3:]] == [len(m) for m in later]
        assert pr.unchanged()
        assert b"".join(pr.chunks) == first + big + b"".join(later)
        tr.close()
        await pr.lost

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        b.close()


def test_a_peer_on_the_loop_writing_twice_in_a_step_reaches_a_grown_receive_at_once(monkeypatch):
    """Both ends of a connection on the io_uring loop, the receiving one's
    buffer grown to 128 KiB: two writes in one step reach
    ``data_received`` in one call, as on asyncio's selector loop: the
    first write's bytes were taken by the receive as the write returned,
    and the second write's are received at once into the rest of the same
    grown ``bytes`` object before it is handed on."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    rng = random.Random(13)
    first = rng.randbytes(100 * 1024)
    one, two = rng.randbytes(3000), rng.randbytes(5000)
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Chunks, a)
        peer, _ = await loop.connect_accepted_socket(asyncio.Protocol, b)
        peer.write(first)
        await pr.received(len(first))
        assert tr._rx.first == 128 * 1024, tr._rx.first
        await _receives_armed_and_submitted(tr)
        peer.write(one)
        peer.write(two)
        await pr.received(len(first) + len(one) + len(two))
        assert pr.chunks[-1] == one + two, [len(c) for c in pr.chunks]
        assert pr.unchanged()
        peer.close()
        tr.close()
        await pr.lost

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


async def _receives_armed_and_submitted(*transports):
    """Returns once each transport's next receive is armed (on blockio's
    io_uring loop, the ring names one for its socket) and the loop has
    waited once since, its wait handing the armed receives to the kernel;
    on the other loops, after that one wait."""
    loop = asyncio.get_running_loop()
    ring = getattr(getattr(loop, "_proactor", None), "_ring", None)
    if ring is not None:
        fds = [tr.get_extra_info("socket").fileno() for tr in transports]
        await await_until(
            lambda: all(ring.receiving(fd) is not None for fd in fds),
            "the transports' next receives armed",
        )
    # One pass of the loop: its wait submits what was armed.
    await asyncio.sleep(0)


def _two_sends_after_a_grown_receive(kind, seed, one_len, two_len):
    """On loop ``kind``: a 100 KiB message (which grows a connection's
    receive to 128 KiB on blockio's io_uring loop), then two sends of
    ``one_len`` and ``two_len`` bytes in one step of the loop, reach
    ``data_received`` in two calls, the second holding both sends, every
    byte once and in order."""
    rng = random.Random(seed)
    first = rng.randbytes(100 * 1024)
    one, two = rng.randbytes(one_len), rng.randbytes(two_len)
    a, b = socket.socketpair()
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    async def main():
        tr, pr = await asyncio.get_running_loop().connect_accepted_socket(Chunks, a)
        _send_at_once(b, first)
        await pr.received(len(first))
        if kind == "blockio-uring":
            assert tr._rx.first == 128 * 1024, tr._rx.first
        await _receives_armed_and_submitted(tr)
        _send_at_once(b, one)
        _send_at_once(b, two)
        await pr.received(len(first) + len(one) + len(two))
        assert [len(c) for c in pr.chunks] == [len(first), len(one) + len(two)]
        assert b"".join(pr.chunks) == first + one + two
        assert pr.unchanged()
        tr.close()
        await pr.lost

    try:
        loop_kinds.run_on(kind, main())
    finally:
        b.close()


@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_a_message_whose_rest_comes_after_its_first_piece_reaches_the_protocol_whole(kind):
    """A 100 KiB message sent in two pieces (64 KiB, then 36 KiB) in one
    step of the loop reaches ``data_received`` in one call, as on asyncio's
    selector loop, whose ``recv`` runs after both. On blockio's io_uring
    loop the connection's next receive (grown to 128 KiB after a first
    100 KiB message) waits for readiness, lending nothing, and receives
    as it is dispatched; if that takes only the first piece (half its
    buffer, likely part of a message) it takes what the socket holds by
    then into the rest of the same ``bytes``. Every
    byte arrives once and in order."""
    _two_sends_after_a_grown_receive(kind, 19, 64 * 1024, 36 * 1024)


@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_a_grown_receive_takes_what_arrived_by_its_dispatch(kind):
    """Two sends of one step of the loop, 10 KiB then 20 KiB, reach
    ``data_received`` in one call, as on asyncio's selector loop, whose
    ``recv`` runs after both. On blockio's io_uring loop the connection's
    receive is grown (128 KiB, after a first 100 KiB message): it waits for
    readiness, lent no buffer, and receives as it is dispatched, into a
    ``bytes`` object made then, so it takes both sends; a buffer lent to
    the kernel while it waited took the first 10 KiB as that send
    returned. Every byte arrives once and in order."""
    _two_sends_after_a_grown_receive(kind, 23, 10 * 1024, 20 * 1024)


@pytest.mark.parametrize("kind", loop_kinds.NAMES)
def test_a_ready_receive_whose_bytes_another_reader_took_waits_for_the_next(kind):
    """Two connections, each after a 100 KiB message (a grown receive on
    blockio's io_uring loop), get 10 KiB each in one step; the first one's
    ``data_received`` takes the second's bytes from its socket before
    they are dispatched. The second connection's receive then finds
    nothing (on the io_uring loop its readiness answered, its ``recv``
    gets ``EAGAIN`` and it waits again, under the same token) and its
    protocol gets the next message, whole: nothing is lost or handed on
    twice, on every loop."""
    rng = random.Random(29)
    first = rng.randbytes(100 * 1024)
    for_x, for_y, later = (rng.randbytes(10 * 1024) for _ in range(3))
    (ax, bx), (ay, by) = socket.socketpair(), socket.socketpair()
    for b in (bx, by):
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    stolen = bytearray()

    class Thief(Chunks):
        def data_received(self, data):
            super().data_received(data)
            if data == for_x:
                stolen.extend(ay.recv(1 << 20))

    async def main():
        loop = asyncio.get_running_loop()
        trx, prx = await loop.connect_accepted_socket(Thief, ax)
        try_, pry = await loop.connect_accepted_socket(Chunks, ay)
        for b, pr in ((bx, prx), (by, pry)):
            _send_at_once(b, first)
            await pr.received(len(first))
        await _receives_armed_and_submitted(trx, try_)
        _send_at_once(bx, for_x)
        _send_at_once(by, for_y)
        await prx.received(len(first) + len(for_x))
        assert bytes(stolen) == for_y
        _send_at_once(by, later)
        await pry.received(len(first) + len(later))
        assert b"".join(pry.chunks) == first + later
        assert b"".join(prx.chunks) == first + for_x
        for tr, pr in ((trx, prx), (try_, pry)):
            tr.close()
            await pr.lost

    try:
        loop_kinds.run_on(kind, main())
    finally:
        bx.close()
        by.close()


def test_every_connection_after_a_large_message_gets_a_grown_receive(monkeypatch):
    """A grown receive is lent no buffer while it waits (a readiness poll,
    its ``bytes`` made as it is dispatched), so no budget limits how many
    connections take one: 300 connections whose last message was 200 KiB
    all ask for 256 KiB at their next receive (the first buffer a
    bounded number of receives would cut to 2 KiB), every byte of their
    next messages arrives in order, and small messages on one halve what
    it asks for, down to 2 KiB."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    message = random.Random(17).randbytes(200 * 1024)
    pairs = [socket.socketpair() for _ in range(300)]
    for _a, b in pairs:
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    async def main():
        ring = loop._proactor._ring
        ends = [await loop.connect_accepted_socket(Chunks, a) for a, _b in pairs]
        for (_tr, pr), (_a, b) in zip(ends, pairs):
            _send_at_once(b, message)
            await pr.received(len(message))
        await _receives_armed_and_submitted(*(tr for tr, _pr in ends))
        assert {ring.first_lent(tr._rx.token) for tr, _pr in ends} == {256 * 1024}
        for (_tr, pr), (_a, b) in zip(ends, pairs):
            _send_at_once(b, message[:150 * 1024])
        for _tr, pr in ends:
            await pr.received(len(message) + 150 * 1024)
            assert b"".join(pr.chunks) == message + message[:150 * 1024]
        tr, pr = ends[-1]
        for i in range(7):
            _send_at_once(pairs[-1][1], b"%d" % i)
            await pr.received(len(message) + 150 * 1024 + i + 1)
        assert tr._rx.first == 2048, tr._rx.first
        assert b"".join(pr.chunks) == message + message[:150 * 1024] + b"0123456"
        for tr, pr in ends:
            tr.close()
            await pr.lost

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        for _a, b in pairs:
            b.close()


class Flow(Collect):
    """Collect, with the calls of writing's flow control in ``calls``."""

    def pause_writing(self):
        self.calls.append("pause")

    def resume_writing(self):
        self.calls.append("resume")


def _tight_pair():
    """A connected socket pair whose first socket takes a few KiB of a
    write at once (``SO_SNDBUF`` 4096) and whose second is non-blocking."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setblocking(False)
    return a, b


def _queued(sock):
    """The bytes waiting in ``sock``'s receive queue (``FIONREAD``)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


async def _read_all(loop, sock, want):
    got = bytearray()
    while len(got) < want:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), DEADLINE)
        assert chunk, f"the stream ended after {len(got)} bytes"
        got += chunk
    return got


@pytest.mark.parametrize("kind", ["bytearray", "memoryview"])
def test_a_mutable_buffer_changed_after_write_returns_changes_nothing_sent(loop, kind):
    """A ``bytearray`` (or a ``memoryview`` of one) of 1 MiB written to a
    socket that takes a few KiB at once, then overwritten: the peer gets
    what it held at the write (the io_uring loop's native write sends the
    rest from a copy; asyncio's copies into its buffer)."""
    a, b = _tight_pair()
    original = random.Random(64).randbytes(1 << 20)
    buf = bytearray(original)
    data = buf if kind == "bytearray" else memoryview(buf)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        tr.write(data)
        assert tr.get_write_buffer_size() > 0  # not all of it went out at once
        buf[:] = bytes(len(buf))
        got = await _read_all(loop, b, len(original))
        tr.close()
        await pr.lost
        return got

    try:
        got = loop.run_until_complete(main())
    finally:
        b.close()
    assert got == original


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_the_write_buffer_size_counts_only_what_the_socket_did_not_take(loop, kind):
    """A write the socket takes in part counts in ``get_write_buffer_size``
    only what is still to go out, as on asyncio's loops: the bytes the
    peer's receive queue holds at once (``FIONREAD``; the peer reads
    nothing, so the rest cannot move) are not counted. On io_uring the
    rest goes to the ring and is counted whole until its send ends."""
    a, b = _tight_pair()
    original = random.Random(66).randbytes(256 * 1024)
    data = {"bytes": original, "bytearray": bytearray(original), "memoryview": memoryview(original)}[kind]

    async def main():
        tr, pr = await loop.connect_accepted_socket(Flow, a)
        await pr.made
        tr.write(data)
        queued = _queued(b)
        assert 0 < queued < len(original)
        assert tr.get_write_buffer_size() == len(original) - queued
        got = await _read_all(loop, b, len(original))
        await await_until(lambda: tr.get_write_buffer_size() == 0, "the write to go out")
        tr.close()
        await pr.lost
        return got

    try:
        got = loop.run_until_complete(main())
    finally:
        b.close()
    assert got == original


def test_a_write_buffered_behind_a_send_counts_only_what_the_socket_did_not_take_of_it(loop):
    """A write buffered behind a send in flight is sent once that send
    ends, and the socket takes part of it: the write buffer's size is then
    the part it did not take (the peer's receive queue holds the rest;
    the peer reads nothing meanwhile, so neither can move)."""
    a, b = _tight_pair()
    first = random.Random(67).randbytes(256 * 1024)
    second = random.Random(68).randbytes(256 * 1024)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Flow, a)
        await pr.made
        tr.write(first)
        tr.write(second)  # buffered behind the first's rest
        got = bytearray()
        while len(got) < len(first):
            await await_until(lambda: _queued(b) > 0, "the first write's bytes")
            got += b.recv(len(first) - len(got))
        assert got == first
        await await_until(lambda: _queued(b) > 0, "the second write's first part")
        assert tr.get_write_buffer_size() == len(second) - _queued(b)
        got = await _read_all(loop, b, len(second))
        tr.close()
        await pr.lost
        return got

    try:
        got = loop.run_until_complete(main())
    finally:
        b.close()
    assert got == second


def test_writes_past_the_high_mark_pause_the_protocol_until_they_are_out(loop):
    """A write the socket does not take whole counts in
    ``get_write_buffer_size`` and, past the high mark, pauses the
    protocol's writing; writes meanwhile are buffered behind it, in order;
    once everything is out the protocol is resumed, the size is 0, and the
    next write goes out at once (on io_uring, by the native write again:
    not through the transport's ``_write_slow``)."""
    a, b = _tight_pair()
    first = random.Random(65).randbytes(256 * 1024)
    second = b"behind it"

    async def main():
        tr, pr = await loop.connect_accepted_socket(Flow, a)
        await pr.made
        tr.set_write_buffer_limits(high=1024)
        tr.write(first)
        assert pr.calls == ["made", "pause"]
        tr.write(second)
        size = tr.get_write_buffer_size()
        assert len(second) < size <= len(first) + len(second)
        got = await _read_all(loop, b, len(first) + len(second))
        await await_until(lambda: "resume" in pr.calls, "resume_writing")
        assert pr.calls == ["made", "pause", "resume"]
        assert tr.get_write_buffer_size() == 0
        slow = []
        if loop.backend == "uring":
            assert type(tr.write).__name__ == "builtin_function_or_method"
            # (the native write calls the instance's _write_slow for what
            # it does not send itself)
            write_slow = tr._write_slow
            tr._write_slow = lambda data: (slow.append(data), write_slow(data))
        tr.write(b"then")
        assert tr.get_write_buffer_size() == 0  # out at once
        assert slow == []  # (on io_uring) by the native write, not by _write_slow
        got += await _read_all(loop, b, 4)
        tr.close()
        await pr.lost
        return got

    try:
        got = loop.run_until_complete(main())
    finally:
        b.close()
    assert got == first + second + b"then"


def test_writes_after_an_abort_are_dropped_and_logged_as_asyncio_logs_them(loop, caplog):
    """Writes after ``abort()`` send nothing and raise nothing; from the
    fifth lost write on, each logs asyncio's "socket.send() raised
    exception." warning (6 of 10 writes, as on asyncio's loops)."""
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        await pr.made
        tr.abort()
        with caplog.at_level("WARNING", logger="asyncio"):
            for _ in range(10):
                tr.write(b"lost")
        assert await pr.lost is None

    try:
        loop.run_until_complete(main())
        b.setblocking(False)
        assert b.recv(64) == b""  # nothing sent before the end of stream
    finally:
        b.close()
    logged = [r for r in caplog.records if r.getMessage() == "socket.send() raised exception."]
    assert len(logged) == 6, [r.getMessage() for r in caplog.records]


def test_writelines_empty_writes_and_bad_writes_as_on_asyncio(loop):
    """``writelines`` of mixed buffers sends them in order; empty writes
    send nothing; a ``str`` is a ``TypeError``; a write after
    ``write_eof()`` is asyncio's ``RuntimeError``, and the peer sees the
    end of stream after the bytes."""
    a, b = socket.socketpair()
    b.setblocking(False)

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        await pr.made
        tr.write(b"")
        tr.write(bytearray())
        tr.write(memoryview(b""))
        tr.writelines([b"one,", bytearray(b"two,"), memoryview(b"three,")])
        tr.write(memoryview(struct.pack("=2H", 0x3031, 0x3233)))  # a non-byte format
        with pytest.raises(TypeError, match="bytes-like"):
            tr.write("text")
        tr.write_eof()
        with pytest.raises(RuntimeError, match="write_eof"):
            tr.write(b"after")
        got = await _read_all(loop, b, 10 + 4)
        end = await asyncio.wait_for(loop.sock_recv(b, 64), DEADLINE)
        tr.close()
        await pr.lost
        return got, end

    try:
        got, end = loop.run_until_complete(main())
    finally:
        b.close()
    assert got == b"one,two,three," + struct.pack("=2H", 0x3031, 0x3233)
    assert end == b""


def test_a_write_to_a_closed_peer_ends_the_connection_through_connection_lost(loop):
    """A write whose send fails (the peer closed: ``EPIPE``) ends the
    connection with the error through ``connection_lost``, with nothing for
    the loop's exception handler, as asyncio's loops do."""
    a, b = socket.socketpair()
    handled = []
    loop.set_exception_handler(lambda _loop, context: handled.append(context))

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        await pr.made
        b.close()
        tr.write(b"to no one")  # in the same step: the end of stream is not seen yet
        return await asyncio.wait_for(pr.lost, DEADLINE), tr

    exc, tr = loop.run_until_complete(main())
    assert isinstance(exc, BrokenPipeError), exc
    assert tr.is_closing()
    assert handled == []


class KeepsWrite(asyncio.Protocol):
    """Keeps its transport's ``write`` and only a weak reference to the
    transport; reading paused (no receive in flight holds the transport)."""

    def __init__(self):
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.write = transport.write
        self.transport = weakref.ref(transport)
        transport.pause_reading()

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def test_a_kept_write_keeps_its_transport_open_as_asyncio_s_bound_write_does(loop):
    """A protocol that keeps ``transport.write`` (a common shortcut) and
    drops the transport: after a collection the transport is still alive
    and its connection open (the kept write's bytes reach the peer, and a
    later one's after a round trip: no end of stream), as asyncio's bound
    method keeps its transport; after ``close()`` the kept write is dropped
    with no error, as on asyncio's loops. (The io_uring loop's native write
    held the transport weakly: the transport was collected, its socket
    closed, and the write raised ``ReferenceError``.)"""
    a, b = socket.socketpair()
    b.setblocking(False)

    async def main():
        _tr, pr = await loop.connect_accepted_socket(KeepsWrite, a)
        del _tr
        gc.collect()
        assert pr.transport() is not None
        pr.write(b"hello")
        assert await _read_all(loop, b, 5) == b"hello"
        pr.write(b"again")
        assert await _read_all(loop, b, 5) == b"again"
        pr.transport().close()
        assert await pr.lost is None
        gc.collect()
        assert pr.transport() is not None  # (held by the kept write)
        pr.write(b"late")  # dropped, as a write after close() is
        return await asyncio.wait_for(loop.sock_recv(b, 64), DEADLINE)

    try:
        end = loop.run_until_complete(main())
    finally:
        b.close()
    assert end == b""  # the end of stream, nothing after "again"


def test_a_write_during_a_sendfile_is_refused_and_the_stream_stays_whole(loop):
    """A write while ``loop.sendfile`` sends on the transport (the peer has
    the file's first byte and reads no more, so the sendfile of 4 MiB
    cannot have ended) raises asyncio's ``RuntimeError`` for every kind of
    buffer and sends nothing; the peer gets the write before, the whole
    file and the write after, in order. (On io_uring the native write must
    not take a write then: it is told at the sendfile's start; and it
    takes the write after the sendfile, told at its end.)"""
    a, b = socket.socketpair()
    b.setblocking(False)
    body = random.Random(66).randbytes(4 << 20)
    head, tail = b"head;", b";tail"

    async def main():
        tr, pr = await loop.connect_accepted_socket(Collect, a)
        await pr.made
        with tempfile.TemporaryFile() as f:
            f.write(body)
            f.flush()
            f.seek(0)
            tr.write(head)
            sending = asyncio.ensure_future(loop.sendfile(tr, f))
            got = await _read_all(loop, b, len(head) + 1)  # the sendfile runs
            for data in (b"mid", bytearray(b"mid"), memoryview(b"mid")):
                with pytest.raises(RuntimeError, match="^unable to write; sendfile is in progress$"):
                    tr.write(data)
            got += await _read_all(loop, b, len(head) + len(body) - len(got))
            sent = await asyncio.wait_for(sending, DEADLINE)
        slow = []
        if loop.backend == "uring":
            write_slow = tr._write_slow
            tr._write_slow = lambda data: (slow.append(data), write_slow(data))
        tr.write(tail)
        assert slow == []  # (on io_uring) the native write takes writes again
        got += await _read_all(loop, b, len(head) + len(body) + len(tail) - len(got))
        tr.close()
        await pr.lost
        return sent, got

    try:
        sent, got = loop.run_until_complete(main())
    finally:
        b.close()
    assert sent == len(body)
    assert got == head + body + tail


class Ends(asyncio.Protocol):
    """Keeps no reference to its transport; ``lost`` is its end."""

    def __init__(self):
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def test_a_closed_transport_s_protocol_goes_with_its_last_reference(loop):
    """Once a transport's connection is lost, dropping the last references
    to the transport and its protocol (one that keeps no reference to its
    transport) frees the protocol with no collection (the collector off),
    as on asyncio's loops: CPython's
    test_ssl counts on it (an ``SSLContext`` that the protocol held freed
    by reference counting alone). The io_uring loop's native write holds
    its transport, which holds it back while the connection is open; the
    transport lets go of it at ``connection_lost``, leaving no cycle."""
    a, b = socket.socketpair()

    async def main():
        tr, pr = await loop.connect_accepted_socket(Ends, a)
        tr.write(b"some")
        tr.close()
        assert await pr.lost is None
        return weakref.ref(pr)

    was_on = gc.isenabled()
    gc.disable()
    try:
        gone = loop.run_until_complete(main())
        assert gone() is None
    finally:
        if was_on:
            gc.enable()
        b.close()
