"""What a transport does around ``loop.sendfile``, the same program run on
asyncio's own loop (the selector loop, Linux's default) and on blockio's
loop on both backends, each with the same observable result: the peer's
bytes that arrive while a sendfile runs reach the protocol after the
sendfile has ended, in order and whole (also when it fails or is
cancelled, and for a ``BufferedProtocol``), a protocol that paused
reading before the sendfile stays paused after it, and a second sendfile
or a write on a transport with a sendfile in progress is refused with
asyncio's exception and message. (uvloop has no ``loop.sendfile``: it
raises ``NotImplementedError``.)"""

import asyncio
import errno
import os
import random
import socket
import sys

import pytest

from loops import run_on
from waits import DEADLINE

#: The size of each of the two sockets' buffers (sending, receiving),
#: set so that the kernel does not grow them.
BUFFER = 256 * 1024

#: Far more than those buffers hold (the kernel doubles a size set, for its
#: own accounting): a sendfile of it runs until the peer reads.
SIZE = 16 << 20

BLOCKIO = ["blockio-uring", "blockio-epoll"]


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    data = random.Random(21).randbytes(SIZE)
    path = tmp_path_factory.mktemp("order") / "big"
    path.write_bytes(data)
    return path, data


async def _pair(protocol):
    """A transport on the running loop connected to a blocking peer socket,
    with buffers of ``BUFFER`` bytes: (transport, peer, protocol)."""
    loop = asyncio.get_running_loop()
    ls = socket.create_server(("127.0.0.1", 0))
    with ls:
        t, proto = await loop.create_connection(protocol, *ls.getsockname())
        peer, _ = ls.accept()
    t.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
    return t, peer, proto


def _read_all(peer):
    """Every byte the peer gets until the end of the stream, or a reset
    (a socket closed with received bytes unread: the kernel resets it)."""
    chunks = []
    with peer:
        try:
            while chunk := peer.recv(1 << 20):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    return b"".join(chunks)


async def _turns(n):
    """Lets the loop run ``n`` iterations (a callback scheduled now runs
    in the next one)."""
    loop = asyncio.get_running_loop()
    for _ in range(n):
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut


class _Recording:
    """What a protocol was told, in order: ``("data", bytes)`` (bytes
    following bytes are joined: how a stream is cut into receives is the
    kernel's), and the test's own entries; ``got(n)`` waits for ``n``
    bytes."""

    def __init__(self):
        self.events = []
        self.count = 0
        self.waiters = []
        self.closed = asyncio.get_running_loop().create_future()

    def _got(self, data):
        if self.events and self.events[-1][0] == "data":
            self.events[-1] = ("data", self.events[-1][1] + data)
        else:
            self.events.append(("data", data))
        self.count += len(data)
        for n, fut in self.waiters:
            if self.count >= n and not fut.done():
                fut.set_result(None)

    async def got(self, n):
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((n, fut))
        self._got(b"")
        await fut

    def connection_lost(self, exc):
        self.events.append(("lost", None if exc is None else type(exc).__name__))
        self.closed.set_result(None)


class _Plain(_Recording, asyncio.Protocol):
    def data_received(self, data):
        self._got(bytes(data))


class _Buffered(_Recording, asyncio.BufferedProtocol):
    def __init__(self):
        super().__init__()
        self.buf = bytearray(3)  # (a message takes several buffers)

    def get_buffer(self, sizehint):
        return self.buf

    def buffer_updated(self, nbytes):
        self._got(bytes(self.buf[:nbytes]))


def _outcome(exc):
    if isinstance(exc, OSError):
        return type(exc).__name__, errno.errorcode.get(exc.errno)
    return (type(exc).__name__,)


async def _message_during_a_sendfile(path, protocol, how):
    """A sendfile of ``path`` to a peer that, once it has some of the
    file's bytes, sends ``ping`` and ``pong``; ``how`` the sendfile ends:
    ``ends`` (the peer reads it all), ``fails`` (its descriptor then names
    the file open for writing only: the next step's ``EBADF``),
    ``cancelled``, ``paused`` (ends, the protocol having paused reading
    before it). The protocol's events, with the sendfile's end and whether
    the transport reads then, and what the peer got."""
    loop = asyncio.get_running_loop()
    t, peer, proto = await _pair(protocol)
    f = open(path, "rb")

    async def send():
        try:
            proto.events.append(("end", await loop.sendfile(t, f)))
        except (Exception, asyncio.CancelledError) as exc:
            proto.events.append(("end", *_outcome(exc)))
        proto.events.append(("reading", t.is_reading()))

    def peer_side():
        got = peer.recv(65536)
        peer.sendall(b"ping")
        got += peer.recv(65536)
        peer.sendall(b"pong")
        if how == "fails":
            wfd = os.open(path, os.O_WRONLY)
            os.dup2(wfd, f.fileno())
            os.close(wfd)
        elif how == "cancelled":
            loop.call_soon_threadsafe(sending.cancel)
        return got + _read_all(peer)

    with f:
        if how == "paused":
            t.pause_reading()
        sending = asyncio.ensure_future(send())
        sent = loop.run_in_executor(None, peer_side)
        await sending
        if how == "paused":
            await _turns(3)  # (a delivery resume_reading would schedule, and the next)
            proto.events.append(("resumed",))
            t.resume_reading()
        await proto.got(8)
        t.close()
        await proto.closed
        return proto.events, await sent


HOWS = {
    "ends": [("end", SIZE), ("reading", True), ("data", b"pingpong")],
    "fails": [("end", "OSError", "EBADF"), ("reading", True), ("data", b"pingpong")],
    "cancelled": [("end", "CancelledError"), ("reading", True), ("data", b"pingpong")],
    "paused": [("end", SIZE), ("reading", False), ("resumed",), ("data", b"pingpong")],
}


@pytest.mark.parametrize("how", list(HOWS))
@pytest.mark.parametrize("protocol", [_Plain, _Buffered], ids=["Protocol", "BufferedProtocol"])
@pytest.mark.parametrize("name", BLOCKIO)
def test_bytes_arriving_during_a_sendfile_reach_the_protocol_after_it(big_file, name, protocol, how):
    path, data = big_file
    results = {}
    for loop in ("asyncio", name):

        async def main():
            return await asyncio.wait_for(_message_during_a_sendfile(path, protocol, how), DEADLINE)

        events, sent = run_on(loop, main())
        # the file's bytes and nothing else, all of them unless it stopped
        assert data.startswith(sent) and len(sent) >= 2, loop
        if how in ("ends", "paused"):
            assert sent == data, loop
        results[loop] = events
    assert results[name] == results["asyncio"] == HOWS[how] + [("lost", None)]


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("protocol", [_Plain, _Buffered], ids=["Protocol", "BufferedProtocol"])
def test_bytes_arriving_during_a_sendfile_go_with_a_transport_closed_then(big_file, protocol, how):
    # asyncio's own loop waits for ever in a sendfile whose transport is
    # closed: only blockio's io_uring loop ends it (ConnectionAbortedError).
    # The bytes that arrived meanwhile are not handed on after the close
    # (asyncio's "no more data will be received").
    path, data = big_file

    async def main():
        loop = asyncio.get_running_loop()
        t, peer, proto = await _pair(protocol)

        def peer_side():
            got = peer.recv(65536)
            peer.sendall(b"ping")
            got += peer.recv(65536)
            peer.sendall(b"pong")
            loop.call_soon_threadsafe(getattr(t, how))
            return got + _read_all(peer)

        sent = loop.run_in_executor(None, peer_side)
        with open(path, "rb") as f:
            try:
                await loop.sendfile(t, f)
            except ConnectionAbortedError:
                proto.events.append(("end", "ConnectionAbortedError"))
        await proto.closed
        await _turns(3)  # (a delivery scheduled meanwhile, and the next)
        return proto.events, await sent

    events, sent = run_on("blockio-uring", asyncio.wait_for(main(), DEADLINE))
    assert data.startswith(sent) and len(sent) >= 2
    assert sorted(events) == [("end", "ConnectionAbortedError"), ("lost", None)]


async def _second_sendfile(path):
    """A second ``loop.sendfile`` and writes on a transport whose first
    sendfile runs: what each raised (the socket's number as ``<fd>``), what
    the first returned, what the peer got."""
    loop = asyncio.get_running_loop()
    t, peer, _ = await _pair(asyncio.Protocol)
    fd = t.get_extra_info("socket").fileno()
    refused = []

    def refusal(exc):
        return type(exc), tuple("<fd>" if a == fd else a for a in exc.args)

    with open(path, "rb") as f, open(path, "rb") as g:
        first = asyncio.ensure_future(loop.sendfile(t, f))
        await _turns(1)  # (the first has begun: its file does not fit)
        try:
            await loop.sendfile(t, g)
        except Exception as exc:
            refused.append(refusal(exc))
        for write in (lambda: t.write(b"MARK"), lambda: t.write(b""), lambda: t.writelines([b"MA", b"RK"])):
            try:
                write()
            except Exception as exc:
                refused.append(refusal(exc))
        sent = loop.run_in_executor(None, _read_all, peer)
        n = await first
        positions = f.tell(), g.tell()
    t.close()
    return refused, n, positions, await sent


@pytest.mark.parametrize("name", BLOCKIO)
def test_a_second_sendfile_and_writes_during_a_sendfile_are_refused_as_on_asyncio(big_file, name):
    path, data = big_file
    results = {loop: run_on(loop, asyncio.wait_for(_second_sendfile(path), DEADLINE)) for loop in ("asyncio", name)}
    write = (RuntimeError, ("unable to write; sendfile is in progress",))
    # (asyncio's selector transport has a writelines of its own since 3.12)
    lines = (RuntimeError, ("unable to writelines; sendfile is in progress",)) if sys.version_info >= (3, 12) else write
    # asyncio's selector loop takes the transport out of its table of
    # transports while a sendfile runs: a second finds it gone (KeyError).
    expected = ([(KeyError, ("<fd>",)), write, write, lines], SIZE, (SIZE, 0))
    for loop, (_, _, _, sent) in results.items():
        assert sent == data, loop
    assert results[name][:3] == results["asyncio"][:3] == expected

