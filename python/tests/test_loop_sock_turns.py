"""Low-level socket calls in flight at once on one socket, on blockio's loop
(both backends): each call of a direction waits for the ones made before
it (``blockio._sock_turns``), so the first receive gets the first bytes
and each ``sock_sendall`` goes out whole, in the order of the calls.

asyncio's selector loop (and uvloop) instead leave the first of two such
calls waiting for ever (one reader or writer per descriptor), and on
io_uring the kernel wakes the receive armed last first; these tests hold
blockio's loop to the order of the calls, which neither gives."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import socket
import sys
import warnings

import pytest

from waits import DEADLINE, await_until


def _pair(kind=socket.SOCK_STREAM):
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


async def _settle():
    """A few turns of the loop: the receives made before are armed."""
    for _ in range(4):
        await asyncio.sleep(0)


def _receive(loop, sock, how):
    """A receive of ``sock`` by ``how`` (``recv``, ``recv_into``,
    ``recvfrom``), whose result is the bytes received."""
    if how == "recv":
        return loop.sock_recv(sock, 100)
    if how == "recvfrom":

        async def recvfrom():
            return (await loop.sock_recvfrom(sock, 100))[0]

        return recvfrom()

    async def recv_into():
        buf = bytearray(100)
        return bytes(buf[: await loop.sock_recv_into(sock, buf)])

    return recv_into()


@pytest.mark.parametrize("first_how, second_how, kind", [
    ("recv", "recv", socket.SOCK_STREAM),
    ("recv_into", "recv", socket.SOCK_STREAM),
    ("recvfrom", "recvfrom", socket.SOCK_DGRAM),
])
def test_the_first_of_two_receives_gets_the_first_bytes(loop, first_how, second_how, kind):
    a, b = _pair(kind)

    async def main():
        first = loop.create_task(_receive(loop, a, first_how))
        await _settle()
        second = loop.create_task(_receive(loop, a, second_how))
        await _settle()
        b.send(b"one")
        await await_until(lambda: first.done() or second.done(), "a receive ends")
        assert first.done() and not second.done()
        b.send(b"two")
        return await first, await asyncio.wait_for(second, DEADLINE)

    assert loop.run_until_complete(main()) == (b"one", b"two")
    a.close()
    b.close()


def test_two_sendalls_in_flight_go_out_whole_in_order(loop):
    a, b = _pair()
    size = 4 << 20  # many times what the socket holds: each send is split

    async def main():
        got = bytearray()

        async def read_all():
            while len(got) < 2 * size:
                data = await loop.sock_recv(b, 1 << 20)
                assert data, "end of stream before every byte came"
                got.extend(data)

        sends = [loop.create_task(loop.sock_sendall(a, c * size)) for c in (b"A", b"B")]
        await asyncio.wait_for(asyncio.gather(*sends, read_all()), DEADLINE)
        return bytes(got)

    got = loop.run_until_complete(main())
    assert got[:size] == b"A" * size
    assert got[size:] == b"B" * size
    a.close()
    b.close()


def test_a_receive_cancelled_while_waiting_for_its_turn_takes_nothing(loop):
    a, b = _pair()

    async def main():
        first = loop.create_task(loop.sock_recv(a, 100))
        await _settle()
        waiting = loop.create_task(loop.sock_recv(a, 100))
        await _settle()
        waiting.cancel()
        await await_until(waiting.done, "the cancelled receive ends")
        assert waiting.cancelled()
        b.send(b"one")
        one = await asyncio.wait_for(first, DEADLINE)
        b.send(b"two")
        return one, await asyncio.wait_for(loop.sock_recv(a, 100), DEADLINE)

    assert loop.run_until_complete(main()) == (b"one", b"two")
    a.close()
    b.close()


def test_a_receive_cancelled_once_its_turn_came_hands_the_turn_on(loop):
    a, b = _pair()

    async def main():
        async def first_then_cancel_the_next():
            data = await loop.sock_recv(a, 100)
            # The turn was handed to `handed` as this receive ended, in
            # this very step: it is cancelled before it resumes.
            handed.cancel()
            return data

        first = loop.create_task(first_then_cancel_the_next())
        await _settle()
        handed = loop.create_task(loop.sock_recv(a, 100))
        await _settle()
        b.send(b"one")
        one = await asyncio.wait_for(first, DEADLINE)
        await await_until(handed.done, "the cancelled receive ends")
        assert handed.cancelled()
        b.send(b"two")
        return one, await asyncio.wait_for(loop.sock_recv(a, 100), DEADLINE)

    assert loop.run_until_complete(main()) == (b"one", b"two")
    a.close()
    b.close()


def test_receives_cancelled_behind_a_long_one_leave_no_trail(loop):
    a, b = _pair()

    async def main():
        first = loop.create_task(loop.sock_recv(a, 100))
        await _settle()
        for _ in range(100):
            behind = loop.create_task(loop.sock_recv(a, 100))
            await _settle()
            behind.cancel()
            await await_until(behind.done, "the cancelled receive ends")
        # Nothing is left waiting behind the first receive.
        assert not loop._receive_turns[id(a)]
        b.send(b"one")
        one = await asyncio.wait_for(first, DEADLINE)
        b.send(b"two")
        return one, await asyncio.wait_for(loop.sock_recv(a, 100), DEADLINE)

    assert loop.run_until_complete(main()) == (b"one", b"two")
    # Every turn was given back.
    assert id(a) not in loop._receive_turns
    a.close()
    b.close()


def test_a_send_that_fails_once_its_turn_came_hands_the_turn_on(loop):
    a, b = _pair()
    size = 4 << 20

    async def main():
        first = loop.create_task(loop.sock_sendall(a, b"A" * size))
        await _settle()
        assert not first.done()  # the socket is full: the turn is held
        failing = loop.create_task(loop.sock_sendall(a, "not bytes"))
        await _settle()
        got = bytearray()
        while len(got) < size:
            got.extend(await asyncio.wait_for(loop.sock_recv(b, 1 << 20), DEADLINE))
        await first
        with pytest.raises(TypeError):
            await failing
        await asyncio.wait_for(loop.sock_sendall(a, b"after"), DEADLINE)
        while len(got) < size + 5:
            got.extend(await asyncio.wait_for(loop.sock_recv(b, 1 << 20), DEADLINE))
        return bytes(got)

    assert loop.run_until_complete(main()) == b"A" * size + b"after"
    a.close()
    b.close()


def test_a_send_on_a_closed_socket_raises_asyncios_error(loop):
    def outcome(lp):
        a, b = _pair()
        a.close()

        async def main():
            with pytest.raises(OSError) as e:
                await lp.sock_sendall(a, b"x")
            return e.value.errno

        try:
            return lp.run_until_complete(main())
        finally:
            b.close()

    reference = asyncio.new_event_loop()
    try:
        expected = outcome(reference)
    finally:
        reference.close()
    assert expected == errno.EBADF
    assert outcome(loop) == expected
    # The loop is whole afterwards: it runs, and closes.
    assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"


def test_a_receive_cancelled_as_its_bytes_come_loses_none(loop):
    a, b = _pair()
    landed = []

    async def main():
        task = loop.create_task(loop.sock_recv(a, 100))
        await _settle()

        def cancel_once_woken():
            # Runs every turn, ahead of what that turn's wait queues: once
            # the receive's wait is answered, the task is cancelled before
            # it resumes.
            waiter = task._fut_waiter
            if waiter is not None and waiter.done():
                landed.append(task.cancel())
            elif not task.done():
                loop.call_soon(cancel_once_woken)

        b.send(b"first")
        loop.call_soon(cancel_once_woken)
        with pytest.raises(asyncio.CancelledError):
            await task
        b.send(b" second")
        got = b""
        while len(got) < len(b"first second"):
            got += await asyncio.wait_for(loop.sock_recv(a, 100), DEADLINE)
        return got

    assert loop.run_until_complete(main()) == b"first second"
    assert landed == [True]
    a.close()
    b.close()


def test_an_exception_thrown_into_a_waiting_receive_leaves_the_next_bytes(loop):
    a, b = _pair()

    async def main():
        receive = loop.sock_recv(a, 100)
        receive.send(None)  # (now waiting)
        with pytest.raises(KeyboardInterrupt):
            receive.throw(KeyboardInterrupt)
        await _settle()
        b.send(b"next")
        return await asyncio.wait_for(loop.sock_recv(a, 100), DEADLINE)

    assert loop.run_until_complete(main()) == b"next"
    a.close()
    b.close()


def test_a_loop_closed_with_calls_waiting_for_their_turn_reports_no_error(loop, monkeypatch):
    a, b = _pair()
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    async def main():
        tasks = [loop.create_task(loop.sock_recv(a, 100)) for _ in range(4)]
        await _settle()
        return tasks

    tasks = loop.run_until_complete(main())
    assert not any(t.done() for t in tasks)
    loop.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        del tasks
        gc.collect()
    assert [u.exc_value for u in unraisable] == []
    a.close()
    b.close()


class _Unhashable(socket.socket):
    def __eq__(self, other):
        return self is other  # (and so no __hash__)


def test_a_socket_class_without_hash_takes_turns(loop):
    a = _Unhashable(socket.AF_UNIX, socket.SOCK_STREAM)
    b = _Unhashable(socket.AF_UNIX, socket.SOCK_STREAM)
    a.close()
    b.close()
    x, y = socket.socketpair()
    a = _Unhashable(fileno=x.detach())
    b = _Unhashable(fileno=y.detach())
    a.setblocking(False)
    b.setblocking(False)

    async def main():
        first = loop.create_task(loop.sock_recv(a, 100))
        await _settle()
        await loop.sock_sendall(b, b"one")
        return await asyncio.wait_for(first, DEADLINE)

    assert loop.run_until_complete(main()) == b"one"
    a.close()
    b.close()


def test_two_accepts_in_flight_each_get_a_connection(loop):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0blockio-two-accepts-%d-%d" % (os.getpid(), id(loop)))
    listener.listen()
    listener.setblocking(False)

    async def main():
        accepts = [loop.create_task(loop.sock_accept(listener)) for _ in range(2)]
        await _settle()
        clients = []
        for _ in range(2):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(listener.getsockname())
            clients.append(c)
        done = await asyncio.wait_for(asyncio.gather(*accepts), DEADLINE)
        for conn, _ in done:
            conn.close()
        for c in clients:
            c.close()
        return len(done)

    assert loop.run_until_complete(main()) == 2
    listener.close()


@pytest.mark.parametrize("first", ["sendall", "sendfile"])
def test_a_sendfile_and_a_sendall_in_flight_go_out_whole_in_order(loop, tmp_path, first):
    a, b = _pair()
    size = 4 << 20  # many times what the socket holds
    path = tmp_path / "f.bin"
    path.write_bytes(b"F" * size)

    async def main():
        got = bytearray()

        async def read_all():
            while len(got) < 2 * size:
                data = await loop.sock_recv(b, 1 << 20)
                assert data, "end of stream before every byte came"
                got.extend(data)

        with open(path, "rb") as f:
            calls = {"sendall": lambda: loop.sock_sendall(a, b"A" * size),
                     "sendfile": lambda: loop.sock_sendfile(a, f)}
            order = [first, "sendfile" if first == "sendall" else "sendall"]
            sends = [loop.create_task(calls[name]()) for name in order]
            await asyncio.wait_for(asyncio.gather(*sends, read_all()), DEADLINE)
        return bytes(got), order

    got, order = loop.run_until_complete(main())
    expected = b"".join((b"A" if name == "sendall" else b"F") * size for name in order)
    assert got == expected
    a.close()
    b.close()


def test_an_exception_thrown_into_a_waiting_accept_leaves_the_next_connection(loop):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0blockio-thrown-accept-%d-%d" % (os.getpid(), id(loop)))
    listener.listen()
    listener.setblocking(False)

    async def main():
        accept = loop.sock_accept(listener)
        accept.send(None)  # (now waiting)
        with pytest.raises(KeyboardInterrupt):
            accept.throw(KeyboardInterrupt)
        await _settle()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(listener.getsockname())
        conn, _ = await asyncio.wait_for(loop.sock_accept(listener), DEADLINE)
        with conn, client:
            conn.sendall(b"yours")
            return client.recv(100)

    assert loop.run_until_complete(main()) == b"yours"
    listener.close()
