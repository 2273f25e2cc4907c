"""What a transport of blockio's event loop keeps once its connection is
lost: nothing of the connection's. The transport lets go of its protocol
(and with it the protocol's buffers), its socket and its loop, as asyncio's
selector transports do, so that a protocol that keeps its transport
(``self.transport = transport``, the common case) and the transport go
with their last reference, with no collection: the collector is off in
every test here, and each waits for the objects' weak references to die
(a cancelled receive is the ring's until the kernel answers the cancel),
failing as soon as nothing is left to happen (no callback queued, nothing
more in flight on the ring than before the test) with one still alive.

Stream transports (TCP and Unix, client and server side, plain and
buffered protocols), datagram transports, pipe transports and SSL
(asyncio's ``SSLProtocol`` over the loop's transports), ended by
``close()``, ``abort()`` and the peer; TCP connections reset by their
peer (RST), also with writes in flight, and ended by a protocol callback
that raised (the exception's traceback must not keep them); a datagram
transport that received an error; the loop's close with connections
open; a closed server's protocol factory; and what a closed transport
answers (``get_protocol()``, ``is_closing()``, ``get_extra_info()``),
beside asyncio's selector loop. Both backends of blockio's loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import struct
import tempfile
import threading
import warnings
import weakref

import pytest

import loops as loop_kinds
from test_event_loop import _tls_contexts
from waits import DEADLINE

#: blockio's loops, by their name in ``loops.FACTORIES``.
OURS = ["blockio-uring", "blockio-epoll"]

MESSAGE = bytes(range(256)) * 4  # 1 KiB


@contextlib.contextmanager
def collector_off():
    """The cycle collector off for the block (on again after it, if it was)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def run_collector_off(kind, main):
    """Runs ``main(loop)`` on a new loop of ``kind`` with the collector off,
    then closes the loop: what ``main`` returned."""
    loop = loop_kinds.FACTORIES[kind]()
    with collector_off():
        try:
            return loop.run_until_complete(main(loop))
        finally:
            loop.close()


def _in_flight(loop) -> int:
    """Operations the kernel has not answered on ``loop``'s ring (0 on epoll)."""
    proactor = getattr(loop, "_proactor", None)
    ring = getattr(proactor, "_ring", None)
    return 0 if ring is None else ring.in_flight()


async def all_gone(refs: dict, baseline: int) -> None:
    """Waits until every object of ``refs`` (name -> weak reference) is
    gone; fails naming those left once nothing more can happen: no
    callback queued and no more operations in flight than ``baseline``
    (or after ``DEADLINE``, which only a bug reaches)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        alive = sorted(name for name, ref in refs.items() if ref() is not None)
        if not alive:
            return
        # (this task's step, running, is no longer in the ready queue)
        settled = len(loop._ready) == 0 and _in_flight(loop) <= baseline
        if settled or loop.time() > deadline:
            held = {name: [type(r).__name__ for r in gc.get_referrers(refs[name]())] for name in alive[:4]}
            raise AssertionError(f"{len(alive)} of {len(refs)} alive without a collection: {alive[:20]}; "
                                 f"the first referred to by {held}")
        await asyncio.sleep(0)


async def start(loop) -> int:
    """The ring's operations in flight once the loop runs (its wake-up
    socket's receive): what :func:`all_gone` waits down to."""
    await asyncio.sleep(0)
    return _in_flight(loop)


class Keeps(asyncio.Protocol):
    """Keeps its transport and a buffer, as most protocols do; echoes
    what it receives when ``echo`` is set; ``got`` is done once a whole
    message has come, ``lost`` the type of the exception that ended the connection (the
    exception itself, kept, would keep its traceback's frames)."""

    echo = False

    def __init__(self):
        loop = asyncio.get_running_loop()
        self.got = loop.create_future()
        self.lost = loop.create_future()
        self.data = bytearray()
        self.buffer = bytearray(64 * 1024)

    def connection_made(self, transport):
        self.transport = transport

    def _took(self, data):
        self.data += data
        if self.echo:
            self.transport.write(data)
        if not self.got.done() and len(self.data) >= len(MESSAGE):
            self.got.set_result(None)

    def data_received(self, data):
        self._took(data)

    def datagram_received(self, data, addr):
        self._took(data)

    def eof_received(self):
        return None  # the transport closes

    def connection_lost(self, exc):
        self.lost.set_result(type(exc))


class KeepsBuffered(asyncio.BufferedProtocol, Keeps):
    """:class:`Keeps` as a ``BufferedProtocol``: receives into ``buffer``."""

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        self._took(bytes(self.buffer[:nbytes]))


def _protocols(buffered):
    base = KeepsBuffered if buffered else Keeps
    return type("Echo", (base,), {"echo": True}), base


def _end(how, client_tr, server_tr):
    {"close": client_tr.close, "abort": client_tr.abort,
     "peer close": server_tr.close, "peer abort": server_tr.abort}[how]()


async def _stream(loop, family, buffered, how, refs, ssl_pair=None):
    """A connection of ``family`` through a server of the loop, a message
    echoed, ended by ``how``; fills ``refs`` with weak references to both
    sides' protocols and transports (and, over SSL, the SSL protocols and
    the raw transports beneath)."""
    server_side, client_side = _protocols(buffered)
    served = []

    def factory():
        served.append(server_side())
        return served[-1]

    sctx, cctx = ssl_pair or (None, None)
    tls = {"ssl": cctx, "server_hostname": "localhost"} if cctx else {}
    with tempfile.TemporaryDirectory() as tmp:
        if family == "unix":
            path = os.path.join(tmp, "s")
            server = await loop.create_unix_server(factory, path, ssl=sctx)
            tr, pr = await loop.create_unix_connection(client_side, path, **tls)
        else:
            server = await loop.create_server(factory, "127.0.0.1", 0, ssl=sctx)
            port = server.sockets[0].getsockname()[1]
            tr, pr = await loop.create_connection(client_side, "127.0.0.1", port, **tls)
        tr.write(MESSAGE)
        await asyncio.wait_for(pr.got, DEADLINE)
        spr = served.pop()
        s_tr = spr.transport
        for side, (t, p) in {"client": (tr, pr), "server": (s_tr, spr)}.items():
            refs[f"{side} protocol"] = weakref.ref(p)
            refs[f"{side} transport"] = weakref.ref(t)
            if cctx is not None:
                refs[f"{side} SSL protocol"] = weakref.ref(t._ssl_protocol)
                refs[f"{side} raw transport"] = weakref.ref(t._ssl_protocol._transport)
        _end(how, tr, s_tr)
        assert await asyncio.wait_for(pr.lost, DEADLINE) in (type(None), ConnectionResetError)
        assert await asyncio.wait_for(spr.lost, DEADLINE) in (type(None), ConnectionResetError)
        assert bytes(pr.data) == MESSAGE
        server.close()
        await server.wait_closed()


def _run(kind, body):
    """Runs ``body(loop, refs)`` on a new loop of ``kind`` with the
    collector off, then waits until every object ``refs`` names is gone."""

    async def main(loop):
        baseline = await start(loop)
        refs: dict = {}
        await body(loop, refs)
        assert refs
        await all_gone(refs, baseline)

    run_collector_off(kind, main)


@pytest.mark.parametrize("how", ["close", "abort", "peer close", "peer abort"])
@pytest.mark.parametrize("protocol", ["plain", "buffered"])
@pytest.mark.parametrize("family", ["tcp", "unix"])
@pytest.mark.parametrize("kind", OURS)
def test_a_closed_stream_s_transports_and_protocols_go_with_their_last_reference(kind, family, protocol, how):
    """A TCP or Unix connection through a server of the loop, both
    protocols keeping their transport, a message echoed: once each side's
    ``connection_lost`` has been called, both sides' protocols and
    transports are gone with no collection, whichever side ended it and
    how. (On io_uring the transport kept its protocol, a cycle with a
    protocol that keeps its transport; on epoll asyncio's transport keeps
    its read callback, a bound method of its own.) A "peer abort" here
    comes after the peer has read everything, so the kernel ends the
    connection with an end of stream, not a reset: resets are
    :func:`test_a_connection_reset_by_its_peer_leaves_nothing`'s."""
    _run(kind, lambda loop, refs: _stream(loop, family, protocol == "buffered", how, refs))


@pytest.mark.parametrize("how", ["close", "abort", "peer close"])
@pytest.mark.parametrize("kind", OURS)
def test_a_closed_ssl_connection_s_objects_go_with_their_last_reference(kind, how):
    """SSL (asyncio's ``SSLProtocol`` over the loop's transport): once both
    sides' connections are lost, the application protocols, their
    transports, the SSL protocols and the raw transports beneath are gone
    with no collection. (The raw transport kept the SSL protocol.)"""
    _run(kind, lambda loop, refs: _stream(loop, "tcp", False, how, refs, _tls_contexts()))


async def _datagrams(loop, how, refs):
    """Two datagram endpoints (one connected), a datagram each way, then
    both ended by ``how``."""
    a_tr, a_pr = await loop.create_datagram_endpoint(Keeps, local_addr=("127.0.0.1", 0))
    b_tr, b_pr = await loop.create_datagram_endpoint(Keeps, remote_addr=a_tr.get_extra_info("sockname"))
    b_tr.sendto(MESSAGE)
    await asyncio.wait_for(a_pr.got, DEADLINE)
    a_tr.sendto(MESSAGE, b_tr.get_extra_info("sockname"))
    await asyncio.wait_for(b_pr.got, DEADLINE)
    for name, (t, p) in {"a": (a_tr, a_pr), "b": (b_tr, b_pr)}.items():
        refs[f"{name} protocol"] = weakref.ref(p)
        refs[f"{name} transport"] = weakref.ref(t)
        getattr(t, how)()
        assert await asyncio.wait_for(p.lost, DEADLINE) is type(None)


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("kind", OURS)
def test_a_closed_datagram_transport_and_its_protocol_go_with_their_last_reference(kind, how):
    """Datagram endpoints whose protocols keep their transport: once
    closed or aborted, protocols and transports are gone with no
    collection. (The io_uring loop's transport kept its protocol.)"""
    _run(kind, lambda loop, refs: _datagrams(loop, how, refs))


class KeepsErrors(Keeps):
    """:class:`Keeps` whose ``got`` is the type of the first error received."""

    def error_received(self, exc):
        if not self.got.done():
            self.got.set_result(type(exc))


async def _datagram_error(loop, refs):
    """A connected datagram endpoint sends to a port nobody listens on
    (the kernel's ICMP answer is an error on its next receive), then is
    closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gone:
        gone.bind(("127.0.0.1", 0))
        addr = gone.getsockname()
    tr, pr = await loop.create_datagram_endpoint(KeepsErrors, remote_addr=addr)
    refs["protocol"] = weakref.ref(pr)
    refs["transport"] = weakref.ref(tr)
    tr.sendto(MESSAGE)
    assert await asyncio.wait_for(pr.got, DEADLINE) is ConnectionRefusedError
    tr.close()
    assert await asyncio.wait_for(pr.lost, DEADLINE) is type(None)


@pytest.mark.parametrize("kind", OURS)
def test_a_datagram_transport_that_received_an_error_goes_with_its_last_reference(kind):
    """A connected datagram endpoint whose receive failed (the peer's port
    refused it: ``error_received``), then closed: its protocol and
    transport are gone with no collection. (On io_uring the failed
    receive's future held its exception, whose traceback held the
    transport's read frame, which held the future.)"""
    _run(kind, _datagram_error)


async def _pipes(loop, how, refs):
    """A pipe with a read and a write transport on it, bytes through it,
    then ended by ``how``: the write transport's ``close()`` or
    ``abort()`` (the reader sees the end of the pipe), or the read
    transport's ``close()`` (the writer sees its reader gone)."""
    r, w = os.pipe()
    r_tr, r_pr = await loop.connect_read_pipe(Keeps, os.fdopen(r, "rb", 0))
    w_tr, w_pr = await loop.connect_write_pipe(Keeps, os.fdopen(w, "wb", 0))
    w_tr.write(MESSAGE)
    await asyncio.wait_for(r_pr.got, DEADLINE)
    for name, (t, p) in {"read": (r_tr, r_pr), "write": (w_tr, w_pr)}.items():
        refs[f"{name} protocol"] = weakref.ref(p)
        refs[f"{name} transport"] = weakref.ref(t)
    if how == "reader close":
        r_tr.close()
    else:
        getattr(w_tr, how)()
    assert await asyncio.wait_for(r_pr.lost, DEADLINE) is type(None)
    assert await asyncio.wait_for(w_pr.lost, DEADLINE) in (type(None), BrokenPipeError)


@pytest.mark.parametrize("how", ["close", "abort", "reader close"])
@pytest.mark.parametrize("kind", OURS)
def test_closed_pipe_transports_and_their_protocols_go_with_their_last_reference(kind, how):
    """``connect_read_pipe`` and ``connect_write_pipe`` on one pipe, each
    protocol keeping its transport: once both connections are lost,
    protocols and transports are gone with no collection. (The io_uring
    loop's transports kept their protocols.)"""
    _run(kind, lambda loop, refs: _pipes(loop, how, refs))


def _reset(sock):
    """Closes ``sock`` with SO_LINGER 0: the kernel sends its peer a reset
    (RST), not an end of stream, whatever is left unread or unsent."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def _raw_peer(loop, side, protocol, refs):
    """A TCP connection between a transport of the loop (the server's
    when ``side`` is "server", else the client's), whose protocol (made by
    ``protocol``) keeps it, and a plain socket of the test's, the peer;
    returns ``(transport, protocol, peer socket)``, the transport and
    protocol also in ``refs``."""
    if side == "server":
        made = loop.create_future()

        class Served(protocol):
            def connection_made(self, transport):
                super().connection_made(transport)
                made.set_result(self)

        server = await loop.create_server(Served, "127.0.0.1", 0)
        peer = socket.socket()
        peer.setblocking(False)
        await loop.sock_connect(peer, server.sockets[0].getsockname())
        pr = await asyncio.wait_for(made, DEADLINE)
        del made
        tr = pr.transport
        server.close()  # (the connection made is not the server's to end)
    else:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            listener.setblocking(False)
            accepting = asyncio.ensure_future(loop.sock_accept(listener))
            tr, pr = await loop.create_connection(protocol, *listener.getsockname())
            peer, _ = await asyncio.wait_for(accepting, DEADLINE)
        peer.setblocking(False)
    refs["protocol"] = weakref.ref(pr)
    refs["transport"] = weakref.ref(tr)
    return tr, pr, peer


async def _reset_on_receive(loop, side, buffered, refs):
    """A message echoed by the loop's side, then the peer's reset."""
    echo, _ = _protocols(buffered)
    tr, pr, peer = await _raw_peer(loop, side, echo, refs)
    with peer:
        await loop.sock_sendall(peer, MESSAGE)
        got = b""
        while len(got) < len(MESSAGE):
            data = await asyncio.wait_for(loop.sock_recv(peer, 65536), DEADLINE)
            assert data
            got += data
        assert got == MESSAGE
        _reset(peer)
    assert await asyncio.wait_for(pr.lost, DEADLINE) is ConnectionResetError
    assert tr.is_closing()


@pytest.mark.parametrize("protocol", ["plain", "buffered"])
@pytest.mark.parametrize("side", ["server", "client"])
@pytest.mark.parametrize("kind", OURS)
def test_a_connection_reset_by_its_peer_leaves_nothing(kind, side, protocol):
    """A TCP connection whose peer resets it (RST) once a message is
    echoed: ``connection_lost`` gets ``ConnectionResetError``, then the
    protocol and its transport are gone with no collection. (On io_uring
    the transport kept the exception, whose traceback held the frames, and
    so the transport, it was raised through.)"""
    _run(kind, lambda loop, refs: _reset_on_receive(loop, side, protocol == "buffered", refs))


async def _reset_while_writing(loop, how, refs):
    """The loop's client side writes 64 MiB to a peer that reads none of
    it (with its own reading on; paused; or ended by ``close()``, which
    waits for the writes: then the send in flight is what meets the
    reset), then the peer resets the connection."""
    tr, pr, peer = await _raw_peer(loop, "client", Keeps, refs)
    with peer:
        if how == "reading paused":
            tr.pause_reading()
        for _ in range(64):
            tr.write(bytes(1 << 20))
        assert tr.get_write_buffer_size() > 0  # not all taken by the socket
        if how == "closed":
            tr.close()
        _reset(peer)
    assert await asyncio.wait_for(pr.lost, DEADLINE) is ConnectionResetError
    assert tr.is_closing()


@pytest.mark.parametrize("how", ["reading", "reading paused", "closed"])
@pytest.mark.parametrize("kind", OURS)
def test_a_connection_reset_with_writes_in_flight_leaves_nothing(kind, how):
    """A connection reset by its peer while megabytes of the loop's side's
    writes are still buffered and in flight: ``connection_lost`` gets
    ``ConnectionResetError``, also after ``close()``, then the protocol
    and its transport are gone with no collection. (On io_uring the
    receive's error, held by the frames that handed it on, held the
    transport; after ``close()`` the send's error, held by its future,
    which the frame in its traceback held.)"""
    _run(kind, lambda loop, refs: _reset_while_writing(loop, how, refs))


class Raises(Keeps):
    """Keeps its transport; raises from ``data_received``."""

    def data_received(self, data):
        raise ValueError("refused by the protocol")


class RaisesBuffered(asyncio.BufferedProtocol, Raises):
    """:class:`Raises` as a ``BufferedProtocol``: raises from ``buffer_updated``."""

    def get_buffer(self, sizehint):
        return self.buffer

    def buffer_updated(self, nbytes):
        raise ValueError("refused by the protocol")


async def _protocol_raises(loop, side, buffered, refs):
    """The loop's side's protocol raises from the call that hands it the
    peer's message: the loop reports it and ends the connection."""
    reported = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    tr, pr, peer = await _raw_peer(loop, side, RaisesBuffered if buffered else Raises, refs)
    with peer:
        await loop.sock_sendall(peer, MESSAGE)
        assert await asyncio.wait_for(pr.lost, DEADLINE) is ValueError
        assert await asyncio.wait_for(loop.sock_recv(peer, 65536), DEADLINE) == b""  # ended by the loop's side
    assert tr.is_closing()
    call = "buffer_updated" if buffered else "data_received"
    assert reported == [f"Fatal error: protocol.{call}() call failed."]


@pytest.mark.parametrize("protocol", ["plain", "buffered"])
@pytest.mark.parametrize("side", ["server", "client"])
@pytest.mark.parametrize("kind", OURS)
def test_a_connection_its_protocol_s_callback_ended_leaves_nothing(kind, side, protocol):
    """A protocol whose ``data_received`` (``buffer_updated``) raises: the
    loop reports it, ``connection_lost`` gets the exception, then the
    protocol and its transport are gone with no collection. (On io_uring
    the transport kept the exception, whose traceback held the protocol's
    frame.)"""
    _run(kind, lambda loop, refs: _protocol_raises(loop, side, protocol == "buffered", refs))


class Child(asyncio.SubprocessProtocol):
    """Keeps its subprocess transport; ``lost`` is its ``connection_lost``."""

    def __init__(self):
        loop = asyncio.get_running_loop()
        self.lost = loop.create_future()
        self.out = bytearray()

    def connection_made(self, transport):
        self.transport = transport

    def pipe_data_received(self, fd, data):
        self.out += data

    def connection_lost(self, exc):
        self.lost.set_result(type(exc))


async def _child(loop, refs):
    """A child that echoes its stdin to its stdout, the subprocess protocol
    keeping its transport; stdin written and closed, the child's end
    awaited (the transport's ``connection_lost``: the child has exited and
    every pipe is closed)."""
    tr, pr = await loop.subprocess_exec(Child, "cat", stdin=-1, stdout=-1)
    refs["protocol"] = weakref.ref(pr)
    refs["transport"] = weakref.ref(tr)
    for fd in (0, 1):
        pipe = tr.get_pipe_transport(fd)
        refs[f"pipe {fd} transport"] = weakref.ref(pipe)
        refs[f"pipe {fd} protocol"] = weakref.ref(pipe.get_protocol())
    tr.get_pipe_transport(0).write(MESSAGE)
    tr.get_pipe_transport(0).close()
    assert await asyncio.wait_for(pr.lost, DEADLINE) is type(None)
    assert bytes(pr.out) == MESSAGE
    assert tr.get_returncode() == 0
    tr.close()
    # On epoll, asyncio's child watcher's thread holds the transport (its
    # callback's arguments) until it ends, just after reporting the exit.
    for thread in threading.enumerate():
        if "waitpid-" in thread.name:  # (asyncio-waitpid-N)
            thread.join(DEADLINE)


@pytest.mark.parametrize("kind", OURS)
def test_a_finished_subprocess_s_transports_and_protocols_go_with_their_last_reference(kind):
    """``subprocess_exec`` with pipes (asyncio's subprocess transport over
    the loop's pipe transports): once the child has exited and its pipes
    are closed, the subprocess protocol and transport and each pipe's
    transport and protocol are gone with no collection. (The io_uring
    loop's pipe transports kept their protocols, which keep them.)"""
    _run(kind, _child)


@pytest.mark.parametrize("kind", OURS)
def test_a_thousand_echoed_and_closed_connections_leave_no_protocol_or_transport(kind):
    """1,000 TCP connections to an echo server, each protocol keeping its
    transport, a 1 KiB message echoed on each, then closed by the client:
    no protocol and no transport of either side is left, with no
    collection (``docs/benchmarks.md`` gives this count)."""
    protocols, transports = weakref.WeakSet(), weakref.WeakSet()

    class Server(Keeps):
        echo = True

        def connection_made(self, transport):
            super().connection_made(transport)
            protocols.add(self)
            transports.add(transport)

    async def main(loop):
        baseline = await start(loop)
        server = await loop.create_server(Server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for _ in range(1000):
            tr, pr = await loop.create_connection(Keeps, "127.0.0.1", port)
            protocols.add(pr)
            transports.add(tr)
            tr.write(MESSAGE)
            await asyncio.wait_for(pr.got, DEADLINE)
            tr.close()
            await asyncio.wait_for(pr.lost, DEADLINE)
            del tr, pr
        server.close()
        await server.wait_closed()
        refs = {f"{type(o).__name__} {i}": weakref.ref(o) for i, o in enumerate([*protocols, *transports])}
        await all_gone(refs, baseline)
        return len(protocols), len(transports)

    assert run_collector_off(kind, main) == (0, 0)


class KeepsWeakly(Keeps):
    """Keeps only a weak reference to its transport (a protocol that does
    keep it makes a cycle with an open transport, on every loop)."""

    def connection_made(self, transport):
        self.transport = weakref.proxy(transport)


@pytest.mark.parametrize("kind", OURS)
def test_the_loop_s_close_with_connections_open_leaves_no_cycle_of_the_loop_s(kind):
    """Connections left open when the loop closes (TCP, both sides;
    datagram; pipes), their protocols keeping no strong reference to their
    transports: once the loop is closed and the test drops its references,
    every protocol and transport is gone with no collection, each
    transport with asyncio's "unclosed transport" warning (its socket
    closed by its finaliser). (On io_uring the native write and the
    transport held each other; on epoll the transport held its own read
    callback.)"""
    loop = loop_kinds.FACTORIES[kind]()
    refs: dict = {}

    async def main():
        echo = type("Echo", (KeepsWeakly,), {"echo": True})
        server = await loop.create_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(KeepsWeakly, "127.0.0.1", port)
        tr.write(MESSAGE)
        await asyncio.wait_for(pr.got, DEADLINE)
        d_tr, d_pr = await loop.create_datagram_endpoint(KeepsWeakly, local_addr=("127.0.0.1", 0))
        r, w = os.pipe()
        r_tr, r_pr = await loop.connect_read_pipe(KeepsWeakly, os.fdopen(r, "rb", 0))
        w_tr, w_pr = await loop.connect_write_pipe(KeepsWeakly, os.fdopen(w, "wb", 0))
        for name, (t, p) in {"client": (tr, pr), "datagram": (d_tr, d_pr),
                             "read pipe": (r_tr, r_pr), "write pipe": (w_tr, w_pr)}.items():
            refs[f"{name} protocol"] = weakref.ref(p)
            refs[f"{name} transport"] = weakref.ref(t)
        return server

    shown: list[str] = []
    with collector_off(), warnings.catch_warnings():
        warnings.simplefilter("always", ResourceWarning)
        # (only the text: a recorded warning keeps its source, the transport)
        warnings.showwarning = lambda message, *args, **kw: shown.append(str(message))
        try:
            server = loop.run_until_complete(main())
        finally:
            loop.close()
        # (the server's own listening socket is asyncio's Server's, closed with it)
        del server
        alive = sorted(name for name, ref in refs.items() if ref() is not None)
    assert alive == []
    unclosed = [text for text in shown if text.startswith("unclosed transport")]
    assert len(unclosed) == len(refs) // 2 + 1, shown  # (and the server side's)


@pytest.mark.parametrize("kind", OURS)
def test_a_closed_server_s_protocol_factory_goes_with_its_last_reference(kind):
    """A server that served a connection and was closed: its protocol
    factory (and what it holds) is gone with no collection once the test
    drops it. (On io_uring the server's accept and its callback, a closure
    holding the factory, held each other.)"""

    class Factory:
        def __call__(self):
            return Keeps()

    async def main(loop):
        baseline = await start(loop)
        factory = Factory()
        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(Keeps, "127.0.0.1", port)
        tr.close()
        await asyncio.wait_for(pr.lost, DEADLINE)
        server.close()
        await server.wait_closed()
        refs = {"factory": weakref.ref(factory), "server": weakref.ref(server)}
        del factory, server, tr, pr
        await all_gone(refs, baseline)

    run_collector_off(kind, main)


# -- what a closed transport answers, beside asyncio's loop ------------------


def _answers(tr, before):
    """What ``tr`` answers about itself, in terms comparable across loops:
    its protocol (None or the protocol's class name), ``is_closing()``,
    and for each extra key asked before the close, whether the value is
    the same object or equal to the one before, or else its type."""

    def same(key):
        now = tr.get_extra_info(key)
        if now is before[key]:
            return "same object"
        if now == before[key]:
            return "equal"
        return type(now).__name__

    proto = tr.get_protocol()
    answers = {
        "get_protocol": None if proto is None else type(proto).__name__,
        "is_closing": tr.is_closing(),
        **{key: same(key) for key in before},
    }
    sock = tr.get_extra_info("socket")
    if sock is not None:
        answers["socket fileno"] = sock.fileno()
    return answers


def _extras(tr, keys):
    return {key: tr.get_extra_info(key) for key in keys}


async def _closed_answers(loop):
    """The answers (see :func:`_answers`) of closed transports of every
    kind: a TCP client, a TCP server side aborted, a Unix client, a
    datagram endpoint, a read and a write pipe, an SSL client."""
    out = {}
    stream_keys = ("peername", "sockname", "socket", "no such key")
    with tempfile.TemporaryDirectory() as tmp:
        served = []
        server = await loop.create_server(lambda: served.append(Keeps()) or served[-1], "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(Keeps, "127.0.0.1", port)
        before = _extras(tr, stream_keys)
        tr.close()
        await asyncio.wait_for(pr.lost, DEADLINE)
        out["tcp client, close()"] = _answers(tr, before)
        await served[0].lost
        out["tcp server side, closed by the peer"] = _answers(served[0].transport, _extras(served[0].transport, ()))
        tr, pr = await loop.create_connection(Keeps, "127.0.0.1", port)
        before = _extras(tr, stream_keys)
        tr.abort()
        await asyncio.wait_for(pr.lost, DEADLINE)
        out["tcp client, abort()"] = _answers(tr, before)
        server.close()
        await server.wait_closed()

        path = os.path.join(tmp, "s")
        server = await loop.create_unix_server(Keeps, path)
        tr, pr = await loop.create_unix_connection(Keeps, path)
        before = _extras(tr, stream_keys)
        tr.close()
        await asyncio.wait_for(pr.lost, DEADLINE)
        out["unix client"] = _answers(tr, before)
        server.close()
        await server.wait_closed()

        d_tr, d_pr = await loop.create_datagram_endpoint(Keeps, local_addr=("127.0.0.1", 0))
        before = _extras(d_tr, ("sockname", "peername", "socket"))
        d_tr.close()
        await asyncio.wait_for(d_pr.lost, DEADLINE)
        out["datagram"] = _answers(d_tr, before)

        r, w = os.pipe()
        r_tr, r_pr = await loop.connect_read_pipe(Keeps, os.fdopen(r, "rb", 0))
        w_tr, w_pr = await loop.connect_write_pipe(Keeps, os.fdopen(w, "wb", 0))
        r_before, w_before = _extras(r_tr, ("pipe",)), _extras(w_tr, ("pipe",))
        w_tr.close()
        await asyncio.wait_for(w_pr.lost, DEADLINE)
        await asyncio.wait_for(r_pr.lost, DEADLINE)
        out["read pipe"] = _answers(r_tr, r_before)
        out["write pipe"] = _answers(w_tr, w_before)
        out["read pipe's file closed"] = r_before["pipe"].closed

        sctx, cctx = _tls_contexts()
        server = await loop.create_server(Keeps, "127.0.0.1", 0, ssl=sctx)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(Keeps, "127.0.0.1", port, ssl=cctx, server_hostname="localhost")
        before = _extras(tr, ("peername", "sockname", "sslcontext", "cipher", "socket"))
        tr.close()
        await asyncio.wait_for(pr.lost, DEADLINE)
        out["ssl client"] = _answers(tr, before)
        server.close()
        await server.wait_closed()
    return out


def _answers_on(kind):
    loop = loop_kinds.FACTORIES[kind]()
    try:
        return loop.run_until_complete(_closed_answers(loop))
    finally:
        loop.close()


@pytest.mark.parametrize("kind", OURS)
def test_a_closed_transport_answers_as_on_asyncio_s_loop(kind):
    """Closed transports of every kind answer ``get_protocol()``,
    ``is_closing()`` and ``get_extra_info()`` as asyncio's selector
    loop's do, side by side: no protocol, closing, the extra information
    of before the close (a socket's closed: its number -1). (The io_uring
    loop's transports still gave their protocol.)"""
    ours = _answers_on(kind)
    theirs = _answers_on("asyncio")
    assert ours == theirs
    assert theirs["tcp client, close()"]["get_protocol"] is None  # (what is compared)


