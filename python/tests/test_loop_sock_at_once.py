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


def _holds_on_both(lp, program):
    """``program`` returns True on ``lp`` and on asyncio's loop."""
    got, expected = _on(lp, program)
    assert expected is True
    assert got is True


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

    _holds_on_both(loop, program)


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
    a, b = _pair()
    try:
        proactor = lp._proactor
        fd = a.fileno()
        pattern = []
        for _ in range(80):
            if proactor._skip_at_once(fd):
                pattern.append("s")
            else:
                proactor._missed_at_once(fd)
                pattern.append("t")
        expected = "".join("t" + "s" * k for k in (1, 2, 4, 8, 16, 16, 16))
        assert "".join(pattern) == (expected + "t" + "s" * 80)[:80]
        assert not proactor._skip_at_once(b.fileno())  # (another socket: tried)
        while proactor._skip_at_once(fd):
            pass
        assert proactor.recv_at_once(a, 100) is None  # (a try, which finds nothing)
        while proactor._skip_at_once(fd):
            pass
        b.send(b"there")
        assert proactor.recv_at_once(a, 100) == b"there"
        assert not proactor._skip_at_once(fd)  # (the backoff ended)
    finally:
        a.close()
        b.close()
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

    _holds_on_both(loop, program)


def _fill(sock):
    """Sends to ``sock`` until it takes no more; the bytes sent."""
    sent = bytearray()
    piece = bytes(range(256)) * 64
    while True:
        try:
            n = sock.send(piece)
        except BlockingIOError:
            return bytes(sent)
        sent += piece[:n]


@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_a_task_receiving_queued_bytes_in_a_loop_lets_the_others_run(loop, how, turns_by_count):
    """A task receiving in 16-byte pieces what fills a socket's queue
    (thousands of receives, each served at once) lets the loop turn now and
    then, as a task reading a cached file does: another task makes steps
    meanwhile. (On asyncio's loop the other task makes none until the
    receiving ends: its receives never suspend; the epoll backend, which
    is asyncio's selector loop, behaves the same way, which this test
    does not hold it to.)"""
    a, b = _pair()
    steps = []

    async def program():
        queued = _fill(b)
        done = False

        async def other():
            while not done:
                steps.append(None)
                await asyncio.sleep(0)

        other_task = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # (the other task runs)
        before = len(steps)
        got = bytearray()
        while len(got) < len(queued):
            got += await _receive(loop, a, how, 16)
        during = len(steps) - before
        done = True
        await other_task
        return bytes(got) == queued, len(queued) // 16, during

    try:
        whole, receives, during = loop.run_until_complete(program())
    finally:
        a.close()
        b.close()
    assert whole
    assert receives > 2000
    if loop.backend == "uring":
        # one turn in 256 receives at most, by the count alone
        assert during >= receives // 512


@pytest.mark.parametrize("call", ["sock_recv", "sock_recv_into"])
def test_a_forked_child_is_refused_both_receives_on_the_parents_ring(call):
    """In a child made by fork(), the inherited loop's receive with bytes
    queued raises the RuntimeError that says the ring is the parent's,
    for ``sock_recv`` and ``sock_recv_into`` alike (``sock_recv_into`` made
    the receive on the inherited socket)."""
    import os

    from blockio._loop import UringEventLoop

    lp = UringEventLoop()
    a, b = _pair()
    r, w = os.pipe()
    try:
        b.send(b"queued")
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                if call == "sock_recv":
                    coro = lp.sock_recv(a, 100)
                else:
                    coro = lp.sock_recv_into(a, bytearray(100))
                try:
                    coro.send(None)
                except RuntimeError as exc:
                    os.write(w, str(exc).encode())
                except BaseException as exc:
                    os.write(w, repr(exc).encode())
                except StopIteration as stop:
                    os.write(w, repr(stop.value).encode())
                else:
                    os.write(w, b"suspended")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        told = os.read(r, 1000).decode()
        assert "belongs to the parent process" in told, told
        assert a.recv(100) == b"queued"  # (the child took nothing)
    finally:
        for s in (a, b):
            s.close()
        os.close(r)
        os.close(w)
        lp.close()


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET])
@pytest.mark.parametrize("how", ["recv", "recv_into"])
def test_a_receive_of_no_bytes_takes_nothing_and_does_not_wait(loop, how, kind):
    """``sock_recv(s, 0)`` and ``sock_recv_into(s, bytearray(0))`` end at
    once with nothing, as ``socket.recv(0)`` does, leaving a queued
    datagram or message for the next receive (the ring's receive of no
    room dropped it), and waiting for nothing where nothing is queued."""

    async def program(lp):
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.setblocking(False)
        b.setblocking(False)
        try:
            out = [_at_once(_receive(lp, a, how, 0))]  # nothing queued
            b.send(b"message")
            out.append(_at_once(_receive(lp, a, how, 0)))
            out.append(await asyncio.wait_for(_receive(lp, a, how), DEADLINE))
            return out
        finally:
            a.close()
            b.close()

    got, expected = _on(loop, program)
    assert expected == [b"", b"", b"message"]
    assert got == expected


def test_bytes_kept_by_a_cancelled_receive_survive_bad_sizes_and_a_receive_of_none():
    """Bytes a cancelled receive kept for its socket (on io_uring, where a
    cancelled receive's bytes may have come) stay for the next receive when
    a receive is refused (``sock_recv(s, 3.0)``: ``socket.recv``'s
    ``TypeError``, where the bytes were taken, then lost; sizes beyond
    ``ssize_t``: its ``OverflowError``, where they were returned) or asks for no
    bytes (which took them all, or failed after taking them into no room);
    a size given by ``__index__`` is taken."""
    from blockio._loop import UringEventLoop

    class Size:
        def __index__(self):
            return 100

    lp = UringEventLoop()
    a, b = _pair()

    async def program():
        lp._proactor.keep_received(a, b"kept")
        out = []
        with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
            await lp.sock_recv(a, 3.0)
        for huge in (2**63, 2**70, -(2**70)):
            with pytest.raises(OverflowError) as raised:
                await lp.sock_recv(a, huge)
            with pytest.raises(OverflowError) as expected:
                a.recv(huge)
            assert str(raised.value) == str(expected.value)
        out.append(_at_once(lp.sock_recv(a, 0)))
        out.append(_at_once(lp.sock_recv_into(a, bytearray(0))))
        out.append(_at_once(lp.sock_recv(a, Size())))
        return out

    try:
        assert lp.run_until_complete(program()) == [b"", 0, b"kept"]
    finally:
        a.close()
        b.close()
        lp.close()


def test_sock_sendall_takes_any_buffer_socket_send_takes(loop):
    """``sock_sendall`` of an ``array('i')`` sends its 12 bytes, as
    ``socket.send`` and uvloop do (asyncio's loop counts the array's items
    as bytes and never ends), and a non-contiguous view or a ``str`` is
    refused with ``socket.send``'s own exception."""
    import array

    a, b = _pair()
    try:
        import numpy

        odd = (memoryview(bytearray(10))[::2], "text", numpy.zeros((4, 4), dtype=numpy.int32, order="F"))
        refusals = []
        for bad in odd:
            try:
                a.send(bad)
            except (BufferError, TypeError, ValueError) as exc:
                refusals.append((type(exc), str(exc)))

        async def program():
            out = []
            await asyncio.wait_for(loop.sock_sendall(a, array.array("i", [1, 2, 3])), DEADLINE)
            out.append(b.recv(100))
            for bad in odd:
                try:
                    await loop.sock_sendall(a, bad)
                except (BufferError, TypeError, ValueError) as exc:
                    out.append((type(exc), str(exc)))
            return out

        got = loop.run_until_complete(program())
    finally:
        a.close()
        b.close()
    assert got == [array.array("i", [1, 2, 3]).tobytes()] + refusals
    assert [t for t, _ in refusals] == [BufferError, TypeError, ValueError]


def test_a_socket_call_on_a_closed_loop_says_the_loop_is_closed():
    """``sock_recv``, ``sock_recv_into`` and ``sock_sendall`` on a closed
    io_uring loop raise ``RuntimeError('Event loop is closed')``, not an
    ``AttributeError`` of its insides."""
    from blockio._loop import UringEventLoop

    lp = UringEventLoop()
    lp.close()
    a, b = _pair()
    try:
        for coro in (lp.sock_recv(a, 10), lp.sock_recv_into(a, bytearray(10)), lp.sock_sendall(a, b"x")):
            with pytest.raises(RuntimeError, match="Event loop is closed"):
                coro.send(None)
    finally:
        a.close()
        b.close()
