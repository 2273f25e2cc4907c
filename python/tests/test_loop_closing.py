"""How a transport's close and abort end its socket, on asyncio's loop and on
blockio's (both backends) alike: the socket is closed, not shut down first,
so that another holder of it (a duplicate) keeps it usable, a reset
(``SO_LINGER`` 0, bytes left unread) reaches the peer as a reset, and the
peer sees the end as the transport closes, also when the loop ends right
after the close."""

import asyncio
import os
import socket
import struct

import pytest

from loops import run_on
from waits import DEADLINE, await_until

LOOPS = ["asyncio", "blockio-uring", "blockio-epoll"]

LINGER0 = struct.pack("ii", 1, 0)


class _Ends(asyncio.Protocol):
    """A protocol whose ``lost`` future is done with the connection's loss;
    ``pause`` pauses reading at the first bytes and makes ``paused`` done."""

    def __init__(self, pause=False):
        loop = asyncio.get_running_loop()
        self.lost = loop.create_future()
        self.paused = loop.create_future()
        self.pause = pause

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if self.pause and not self.paused.done():
            self.transport.pause_reading()
            self.paused.set_result(data)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


async def _connected(kind, protocol):
    """A transport of ``protocol`` on a new connection, and its peer (a
    blocking socket): over TCP on loopback, or a Unix socket pair."""
    loop = asyncio.get_running_loop()
    if kind == "tcp":
        with socket.create_server(("127.0.0.1", 0)) as ls:
            t, p = await loop.create_connection(protocol, *ls.getsockname())
            peer, _ = ls.accept()
    else:
        ours, peer = socket.socketpair()
        t, p = await loop.create_connection(protocol, sock=ours)
    peer.settimeout(DEADLINE)
    return t, p, peer


def _read_to_end(peer):
    """What ``peer`` reads until the end of stream: ``(bytes, "eof")``, or
    ``(bytes, "reset")`` when the connection was reset instead."""
    got = b""
    while True:
        try:
            data = peer.recv(1 << 16)
        except ConnectionResetError:
            return got, "reset"
        if not data:
            return got, "eof"
        got += data


async def _peer_reads_to_end(peer):
    return await asyncio.get_running_loop().run_in_executor(None, _read_to_end, peer)


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("name", LOOPS)
def test_a_duplicate_of_a_closed_transport_s_socket_still_sends(name, kind):
    async def main():
        t, p, peer = await _connected(kind, _Ends)
        with peer:
            keep = os.dup(t.get_extra_info("socket").fileno())
            try:
                t.close()
                await p.lost
                sent = os.write(keep, b"via-dup")
            finally:
                os.close(keep)
            return sent, await _peer_reads_to_end(peer)

    assert run_on(name, main()) == (7, (b"via-dup", "eof"))


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("name", LOOPS)
def test_a_close_with_linger_0_resets_the_connection(name, how):
    async def main():
        t, p, peer = await _connected("tcp", _Ends)
        with peer:
            t.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
            getattr(t, how)()
            await p.lost
            return await _peer_reads_to_end(peer)

    assert run_on(name, main()) == (b"", "reset")


async def _paused_then_sent(p, peer):
    # The protocol pauses reading at the first bytes; what the peer sends
    # next is never read (the kernel resets a socket closed with bytes
    # left in its queue).
    peer.sendall(b"first")
    assert await p.paused == b"first"
    peer.sendall(b"u" * 10000)


async def _sent_as_it_closes(p, peer):
    # The peer's bytes come in the step that closes the transport: the
    # protocol never gets them (on blockio's ring the transport's receive
    # may take them as the close cancels it).
    peer.sendall(b"too late")


@pytest.mark.parametrize("unread", [_paused_then_sent, _sent_as_it_closes], ids=["paused", "arriving"])
@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("name", LOOPS)
def test_bytes_the_protocol_never_read_make_the_close_a_reset(name, how, unread):
    async def main():
        t, p, peer = await _connected("tcp", lambda: _Ends(pause=unread is _paused_then_sent))
        with peer:
            await unread(p, peer)
            getattr(t, how)()
            await p.lost
            return await _peer_reads_to_end(peer)

    assert run_on(name, main()) == (b"", "reset")


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("name", LOOPS)
def test_the_peer_sees_the_end_as_an_idle_transport_closes(name, kind, how):
    # The transport's receive waits on the socket when it closes: its
    # socket ends there, with what was written before, and on blockio's
    # ring nothing of the transport is left in flight.
    async def main():
        ring = getattr(asyncio.get_running_loop(), "_proactor", None)
        ring = getattr(ring, "_ring", None)
        before = ring.in_flight() if ring is not None else 0
        t, p, peer = await _connected(kind, _Ends)
        with peer:
            t.write(b"last words")
            getattr(t, how)()
            await p.lost
            ended = await _peer_reads_to_end(peer), t.get_extra_info("socket").fileno()
            if ring is not None:
                await await_until(lambda: ring.in_flight() == before, "the ring's operations back to the loop's own")
            return ended

    assert run_on(name, main()) == ((b"last words", "eof"), -1)


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("name", LOOPS)
def test_the_peer_sees_the_end_when_writes_were_backed_up(name, how):
    # A send waits on the ring when the transport ends: close() sends
    # everything first, abort() drops what the transport still holds; the
    # peer reads to the end of stream either way.
    payload = os.urandom(16 << 20)

    async def main():
        t, p, peer = await _connected("tcp", _Ends)
        with peer:
            t.write(payload)
            assert t.get_write_buffer_size() > 0  # backed up: the peer reads nothing yet
            getattr(t, how)()
            got, end = await _peer_reads_to_end(peer)
            await p.lost
            return len(got), got == payload[: len(got)], end

    n, prefix, end = run_on(name, main())
    assert (prefix, end) == (True, "eof")
    if how == "close":
        assert n == len(payload)


@pytest.mark.parametrize("how", ["close", "abort"])
@pytest.mark.parametrize("name", LOOPS)
def test_the_peer_sees_the_end_when_the_loop_ends_right_after_the_close(name, how):
    # As a program run by asyncio.run whose main coroutine closes its
    # transport and returns: the loop closes without waiting for anything
    # of the transport, and the peer still gets the end of stream.
    made = {}

    async def main():
        t, p, peer = await _connected("tcp", _Ends)
        made["peer"], made["sock"] = peer, t.get_extra_info("socket")
        t.write(b"bye")
        getattr(t, how)()

    run_on(name, main())
    with made["peer"] as peer:
        assert _read_to_end(peer) == (b"bye", "eof")
    assert made["sock"].fileno() == -1


@pytest.mark.parametrize("name", LOOPS)
def test_a_stream_its_peer_reset_closes_and_reports_its_loss_once(name):
    async def main():
        t, p, peer = await _connected("tcp", _Ends)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
        peer.close()
        exc = await p.lost
        t.close()  # nothing more to end: no second connection_lost
        return type(exc).__name__, t.is_closing(), t.get_extra_info("socket").fileno()

    assert run_on(name, main()) == ("ConnectionResetError", True, -1)


@pytest.mark.parametrize("name", LOOPS)
def test_an_unconnected_datagram_transport_closes_and_reports_its_loss(name):
    async def main():
        loop = asyncio.get_running_loop()
        lost = loop.create_future()

        class Proto(asyncio.DatagramProtocol):
            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.create_datagram_endpoint(Proto, local_addr=("127.0.0.1", 0))
        sock = t.get_extra_info("socket")
        t.close()
        return await lost, sock.fileno()

    assert run_on(name, main()) == (None, -1)
