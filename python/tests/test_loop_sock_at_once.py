"""A ``sock_recv`` (``sock_recv_into``) whose bytes are already there is
served in the caller's step, without suspending, as asyncio's loop and
uvloop serve it (they try ``recv`` first): on io_uring too, where it used
to wait for a ring operation's completion, a turn of the loop later. Each
test runs the same program on asyncio's loop and expects its result."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from waits import DEADLINE

SUSPENDED = "suspended"


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _at_once(coro):
    """The value (or exception) of ``coro`` if it ends without suspending,
    else ``SUSPENDED`` (and the coroutine is closed: its call abandoned)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    except OSError as exc:
        return type(exc)
    coro.close()
    return SUSPENDED


def _receive(loop, sock, how, n=100):
    if how == "recv":
        return loop.sock_recv(sock, n)

    async def recv_into():
        buf = bytearray(n)
        return bytes(buf[: await loop.sock_recv_into(sock, buf)])

    return recv_into()


def _on(lp, program):
    """``program(lp)``'s result on ``lp`` and on asyncio's loop."""
    reference = asyncio.new_event_loop()
    try:
        expected = reference.run_until_complete(program(reference))
    finally:
        reference.close()
    return lp.run_until_complete(program(lp)), expected


@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_bytes_already_there_are_received_without_suspending(loop, how):
    async def program(lp):
        (a, b), (c, d) = _pair(), _pair()
        try:
            out = []
            b.send(b"queued")
            out.append(_at_once(_receive(lp, a, how)))
            b.send(b"x" * 300)
            out.append(_at_once(_receive(lp, a, how, 200)))  # cut to what was asked
            out.append(_at_once(_receive(lp, a, how, 200)))
            b.close()
            out.append(_at_once(_receive(lp, a, how)))  # end of stream
            out.append(_at_once(_receive(lp, c, how)))  # nothing there
            return out
        finally:
            for s in (a, b, c, d):
                s.close()

    got, expected = _on(loop, program)
    assert expected == [b"queued", b"x" * 200, b"x" * 100, b"", SUSPENDED]
    assert got == expected


@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_a_reset_already_there_is_raised_without_suspending(loop, how):
    async def program(lp):
        listener = socket.create_server(("127.0.0.1", 0))
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
        listener.close()
        a.setblocking(False)
        try:
            b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            b.close()  # (a reset, sent before close returns)
            return _at_once(_receive(lp, a, how))
        finally:
            a.close()

    got, expected = _on(loop, program)
    assert expected is ConnectionResetError
    assert got == expected


@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_a_stream_received_at_once_in_large_pieces_is_whole_and_in_order(loop, how):
    """4 MiB sent while receives of 1 MiB take what is there: every byte
    once, in order (a receive at once takes at most 256 KiB on io_uring,
    fewer than asked, as a receive may)."""
    data = bytes(range(256)) * (4 * 4096)

    async def program(lp):
        a, b = _pair()
        try:
            sending = asyncio.ensure_future(lp.sock_sendall(b, data))
            got = bytearray()
            while len(got) < len(data):
                piece = await asyncio.wait_for(_receive(lp, a, how, 1 << 20), DEADLINE)
                assert piece
                got += piece
            await sending
            return bytes(got) == data
        finally:
            a.close()
            b.close()

    got, expected = _on(loop, program)
    assert expected is True
    assert got is True


@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_bytes_after_a_cancelled_receive_come_after_what_it_took(loop, how):
    """A receive waits on the ring; the peer sends, the receive's task is
    cancelled, the peer sends again, and a second receive starts in the
    step right after the cancelled one's, before the loop's next wait:
    whatever the cancelled receive took comes first, before the bytes the
    second finds there at once (a receive at once is not made while a
    receive of the socket is still on the ring)."""

    async def program(lp):
        a, b = _pair()
        try:
            first = asyncio.ensure_future(_receive(lp, a, how))
            for _ in range(4):
                await asyncio.sleep(0)  # (the receive waits)
            b.send(b"first")
            first.cancel()
            b.send(b" second")
            second = asyncio.ensure_future(_receive(lp, a, how))
            got = b""
            try:
                got = await first
            except asyncio.CancelledError:
                pass
            got += await asyncio.wait_for(second, DEADLINE)
            while len(got) < len(b"first second"):
                got += await asyncio.wait_for(_receive(lp, a, how), DEADLINE)
            return got
        finally:
            a.close()
            b.close()

    got, expected = _on(loop, program)
    assert expected == b"first second"
    assert got == expected


def test_tries_that_find_nothing_back_off_and_one_that_finds_bytes_ends_it():
    """After a try at once that found nothing, a socket's next receives go
    straight to the ring: 1, then twice as many after each further miss,
    up to 16; a try that finds bytes ends the backoff (a request-response
    server's receive, made before the next request comes, would otherwise
    cost a failed ``recv`` per request)."""
    from blockio._loop import UringEventLoop

    lp = UringEventLoop()
    try:
        proactor = lp._proactor
        pattern = []
        for _ in range(80):
            if proactor._skip_at_once(7):
                pattern.append("s")
            else:
                proactor._tried_at_once(7, False)
                pattern.append("t")
        expected = "".join("t" + "s" * k for k in (1, 2, 4, 8, 16, 16, 16))
        assert "".join(pattern) == (expected + "t" + "s" * 80)[:80]
        assert not proactor._skip_at_once(8)  # (another socket: tried)
        proactor._tried_at_once(7, True)
        assert not proactor._skip_at_once(7)
        assert not proactor._skip_at_once(7)
    finally:
        lp.close()


@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_request_response_after_misses_loses_and_reorders_nothing(loop, how):
    """A client and a server in one loop exchange 300 requests of growing
    size (the server's receive is made before each request, so its tries
    find nothing and back off; some requests come in two pieces, the
    second found at once): every byte arrives, in order."""

    async def program(lp):
        a, b = _pair()
        try:
            async def server():
                for i in range(300):
                    want = 10 + i
                    got = b""
                    while len(got) < want:
                        got += await _receive(lp, a, how, 4096)
                    await lp.sock_sendall(a, got[::-1])

            serving = asyncio.ensure_future(server())
            answers = []
            for i in range(300):
                request = bytes((i + k) % 256 for k in range(10 + i))
                await lp.sock_sendall(b, request[:5])
                if i % 3 == 0:
                    await asyncio.sleep(0)
                await lp.sock_sendall(b, request[5:])
                got = b""
                while len(got) < len(request):
                    got += await asyncio.wait_for(_receive(lp, b, how, 4096), DEADLINE)
                answers.append(got == request[::-1])
            await serving
            return all(answers)
        finally:
            a.close()
            b.close()

    got, expected = _on(loop, program)
    assert expected is True
    assert got is True
