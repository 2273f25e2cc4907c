"""Datagrams and Unix connects on the io_uring loop's ring: a datagram
receive that would wait is a ``recvmsg`` on the ring, a datagram send the
socket cannot take yet a ``sendmsg``, and a Unix stream socket's
``sock_connect`` a ``connect``. Each test runs the same program on
asyncio's loop and on blockio's (both backends) and expects asyncio's
outcome; on the io_uring loop it also asserts that the ring's operation
ran (its counters ``msg_receives`` and ``msg_sends``, or no ``connect``
call on the socket object), so that a test cannot pass by the readiness
path."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import pytest

from loops import FACTORIES
from waits import DEADLINE, await_until

NAMES = ["asyncio", "blockio-uring", "blockio-epoll"]
LOOPS = pytest.mark.parametrize("name", NAMES)


def _ring(loop):
    """The io_uring loop's ring, None on the other loops."""
    proactor = getattr(loop, "_proactor", None)
    return getattr(proactor, "_ring", None)


def _run(name, main):
    """Runs ``main()`` on a new loop called ``name``; returns its result
    and the ring's counters of datagram operations after it (None off the
    io_uring loop)."""
    loop = FACTORIES[name]()
    try:
        result = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
        ring = _ring(loop)
        # (0 where the ring has no such counters: no datagram on the ring)
        counts = None if ring is None else (getattr(ring, "msg_receives", 0), getattr(ring, "msg_sends", 0))
        return result, counts
    finally:
        loop.close()


def _outcomes(main):
    """``main``'s result on each loop of ``NAMES``, and the io_uring
    loop's counters."""
    results = {}
    counts = None
    for name in NAMES:
        results[name], c = _run(name, main)
        if c is not None:
            counts = c
    return results, counts


async def _waiting_recvfrom(sock, nbytes, into=False):
    """A task in ``sock_recvfrom`` (``sock_recvfrom_into`` a new buffer of
    ``nbytes``: the result is then the buffer's bytes and the address) on
    ``sock``, which has already made its receive (nothing had come) when
    this returns."""
    loop = asyncio.get_running_loop()
    started = loop.create_future()

    async def receive():
        started.set_result(None)
        if into:
            buf = bytearray(nbytes)
            n, addr = await loop.sock_recvfrom_into(sock, buf)
            return bytes(buf[:n]), addr
        return await loop.sock_recvfrom(sock, nbytes)

    task = asyncio.ensure_future(receive())
    await started
    return task


def _udp_pair(family, host):
    a = socket.socket(family, socket.SOCK_DGRAM)
    b = socket.socket(family, socket.SOCK_DGRAM)
    for s in (a, b):
        s.bind((host, 0))
        s.setblocking(False)
    return a, b


def test_a_datagram_longer_than_the_waiting_receive_is_cut_as_recvfrom_cuts_it():
    """A receive of 4 bytes waiting when an 11-byte datagram comes gets
    its first 4 bytes, and the rest is dropped (the next receive gets the
    next datagram), as ``socket.recvfrom`` cuts it (``MSG_TRUNC``)."""

    async def main():
        r, s = _udp_pair(socket.AF_INET, "127.0.0.1")
        with r, s:
            got = []
            for into in (False, True):
                task = await _waiting_recvfrom(r, 4, into)
                s.sendto(b"hello world", r.getsockname())
                s.sendto(b"next", r.getsockname())
                got.append(await task)
                got.append(await asyncio.get_running_loop().sock_recvfrom(r, 100))
            # (queued before the receive: taken at once, cut alike)
            s.sendto(b"hello world", r.getsockname())
            s.sendto(b"next", r.getsockname())
            got.append(await asyncio.get_running_loop().sock_recvfrom(r, 4))
            got.append(await asyncio.get_running_loop().sock_recvfrom(r, 100))
            return got, s.getsockname()

    results, counts = _outcomes(main)
    for name in NAMES:
        got, sender = results[name]
        assert got == [(b"hell", sender), (b"next", sender)] * 3, name
    assert counts[0] >= 2  # (the two waiting receives went to the ring)


def test_an_ipv6_sender_s_address_is_the_four_tuple_recvfrom_gives():
    """An IPv6 datagram's sender is ``(host, port, flowinfo, scope_id)``,
    as ``socket.recvfrom`` (and ``getsockname``) spell it."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6")

    async def main():
        try:
            r, s = _udp_pair(socket.AF_INET6, "::1")
        except OSError as exc:
            pytest.skip(f"no IPv6 loopback: {exc}")
        with r, s:
            got = []
            for into in (False, True):
                task = await _waiting_recvfrom(r, 100, into)
                s.sendto(b"six", r.getsockname())
                got.append(await task)
            return got, s.getsockname()

    results, counts = _outcomes(main)
    for name in NAMES:
        got, sender = results[name]
        assert len(sender) == 4
        assert got == [(b"six", sender)] * 2, name
    assert counts[0] >= 2


def test_a_unix_datagram_s_sender_is_its_path_its_abstract_name_or_none(tmp_path):
    """A Unix datagram's sender is what ``socket.recvfrom`` gives: the
    sender's path (``str``), its abstract name (``bytes`` with the leading
    NUL) or None for an unnamed socket."""
    here = str(tmp_path / "r")

    async def main():
        loop = asyncio.get_running_loop()
        r = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(here)
        r.bind(here)
        r.setblocking(False)
        got = []
        with r:
            for i, name in enumerate([str(tmp_path / "s"), b"\0blockio-dgram-%d" % os.getpid(), None]):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                with s:
                    if isinstance(name, str):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(name)
                    if name is not None:
                        s.bind(name)
                    task = await _waiting_recvfrom(r, 100, into=i == 1)
                    s.sendto(b"u%d" % i, here)
                    got.append(await task)
            # (a datagram already there: the receive tried at once)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            with s:
                s.sendto(b"now", here)
                got.append(await loop.sock_recvfrom(r, 100))
        return got

    results, counts = _outcomes(main)
    expected = [(b"u0", str(tmp_path / "s")), (b"u1", b"\0blockio-dgram-%d" % os.getpid()), (b"u2", None),
                (b"now", None)]
    for name in NAMES:
        assert results[name] == expected, name
    assert counts[0] >= 3


@pytest.mark.parametrize("how", ["next_step", "at_once"])
def test_a_receive_cancelled_after_its_datagram_came_leaves_it_for_the_next_receive(how):
    """A ``sock_recvfrom`` waiting on the ring is cancelled after its
    datagram came (sent before the cancel: taken by the kernel's receive,
    whose completion is dispatched before the cancel runs, in the loop's
    next step, or reaches the ring after the cancel asked for, at once):
    the next receive gets that datagram, then the one sent after it, in
    order."""

    async def main():
        loop = asyncio.get_running_loop()
        r, s = _udp_pair(socket.AF_INET, "127.0.0.1")
        with r, s:
            got = []
            for into in (False, True):
                task = await _waiting_recvfrom(r, 100, into)
                s.sendto(b"one", r.getsockname())
                if how == "at_once":
                    task.cancel()
                else:
                    loop.call_soon(task.cancel)
                try:
                    got.append(await task)
                except asyncio.CancelledError:
                    got.append("cancelled")
                s.sendto(b"two", r.getsockname())
                got.append((await loop.sock_recvfrom(r, 100))[0])
                got.append((await loop.sock_recvfrom(r, 100))[0])
            return got

    results, counts = _outcomes(main)
    for name in NAMES:
        assert results[name] == ["cancelled", b"one", b"two"] * 2, name
    assert counts[0] >= 2


@pytest.mark.parametrize("connected", [False, True])
def test_a_thousand_datagrams_written_while_the_peer_does_not_read_all_arrive_in_order(tmp_path, connected):
    """1,000 datagrams written to a datagram transport whose Unix peer
    does not read (the socket's queue fills: most are buffered, and each
    goes to the ring's ``sendmsg`` in turn) all arrive, in the order they
    were written, once the peer reads; the transport's buffer drains."""
    path = str(tmp_path / "peer")

    async def main():
        loop = asyncio.get_running_loop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        peer.bind(path)
        peer.setblocking(False)
        with peer:
            drained = loop.create_future()

            class P(asyncio.DatagramProtocol):
                def resume_writing(self):
                    if not drained.done():
                        drained.set_result(None)

            if connected:
                t, _ = await loop.create_datagram_endpoint(P, remote_addr=path, family=socket.AF_UNIX)
            else:
                t, _ = await loop.create_datagram_endpoint(P, family=socket.AF_UNIX,
                                                           local_addr=str(tmp_path / "me"))
            t.set_write_buffer_limits(high=0)
            for i in range(1000):
                t.sendto(b"%04d" % i, None if connected else path)
            buffered = t.get_write_buffer_size() > 0
            got = [await loop.sock_recv(peer, 100) for _ in range(1000)]
            if t.get_write_buffer_size():
                await drained
            left = t.get_write_buffer_size()
            t.close()
        return buffered, got, left

    results, counts = _outcomes(main)
    for name in NAMES:
        assert results[name] == (True, [b"%04d" % i for i in range(1000)], 0), name
    assert counts[1] >= 1  # (the buffered datagrams went out by sendmsg)


def test_a_sock_sendto_the_socket_cannot_take_yet_waits_and_its_datagram_comes_last(tmp_path):
    """A ``sock_sendto`` to a Unix peer whose queue is full waits (for the
    socket to be writable: no ``sendmsg`` on the ring, see the next test)
    until the peer reads, and its datagram comes after those queued
    before it."""
    path = str(tmp_path / "peer")

    async def main():
        loop = asyncio.get_running_loop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        peer.bind(path)
        peer.setblocking(False)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        with peer, s:
            queued = 0
            with contextlib.suppress(BlockingIOError):
                while True:
                    s.sendto(b"q", path)
                    queued += 1
            send = asyncio.ensure_future(loop.sock_sendto(s, b"last", path))
            await asyncio.sleep(0)
            waited = not send.done()
            got = [await loop.sock_recv(peer, 100) for _ in range(queued + 1)]
            return waited, await send, got == [b"q"] * queued + [b"last"]

    results, counts = _outcomes(main)
    for name in NAMES:
        assert results[name] == (True, 4, True), name
    assert counts[1] == 0


def test_a_sock_sendto_cancelled_while_it_waits_sends_nothing(tmp_path):
    """A ``sock_sendto`` to a Unix peer whose queue is full, cancelled
    while it waits (the peer making room for one datagram, or not, zero to
    two steps before the cancel), never delivers its datagram, as on
    asyncio's loop: a caller who retries a cancelled send would otherwise
    send it twice. (A ``sendmsg`` left on the ring delivered 16 cancelled
    datagrams in these 60 rounds' pattern of 100.)"""

    async def main():
        loop = asyncio.get_running_loop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path / "r")
        r = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        r.bind(str(tmp_path / "r"))
        r.setblocking(False)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        cancelled_yet_delivered = 0
        with r, s:
            for rnd in range(60):
                with contextlib.suppress(BlockingIOError):
                    while True:
                        s.sendto(b"fill", str(tmp_path / "r"))
                mine = b"M%d" % rnd
                send = asyncio.ensure_future(loop.sock_sendto(s, mine, str(tmp_path / "r")))
                for _ in range(rnd % 3):
                    await asyncio.sleep(0)
                if rnd % 2:
                    r.recv(100)  # room for one: the send may go now
                for _ in range((rnd // 2) % 3):
                    await asyncio.sleep(0)
                send.cancel()
                try:
                    await send
                    done = True
                except asyncio.CancelledError:
                    done = False
                got = []
                with contextlib.suppress(BlockingIOError):
                    while True:
                        got.append(r.recv(100))
                if not done and mine in got:
                    cancelled_yet_delivered += 1
        return cancelled_yet_delivered

    results, _ = _outcomes(main)
    for name in NAMES:
        assert results[name] == 0, name


def test_a_datagram_transport_closed_with_its_receive_in_flight_ends_it():
    """A datagram transport closed while its receive waits on the ring
    reports ``connection_lost(None)`` and nothing else, closes its socket,
    and its receive leaves the ring (its completion reaped: its memory is
    freed then)."""

    async def main():
        loop = asyncio.get_running_loop()
        ring = _ring(loop)
        before = None if ring is None else ring.in_flight()
        lost = loop.create_future()
        told = []

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                told.append(data)

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.create_datagram_endpoint(P, local_addr=("127.0.0.1", 0))
        sock = t.get_extra_info("socket")
        addr = sock.getsockname()
        # (the transport's first receive was made before the endpoint was
        # handed over: asyncio schedules it before the waiter's result)
        during = None if ring is None else ring.in_flight()
        t.close()
        exc = await lost
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"late", addr)
        if ring is not None:
            # (the cancelled receive leaves the ring once the kernel has
            # answered it; the test's bound ends a wait that never ends)
            while ring.in_flight() > before:
                await asyncio.sleep(0)
        await asyncio.sleep(0)  # (a datagram_received after the close would run by now)
        left = None if ring is None else (during - before, ring.in_flight() - before)
        return exc, told, sock.fileno(), left

    results, counts = _outcomes(main)
    for name in NAMES:
        exc, told, fd, left = results[name]
        assert (exc, told, fd) == (None, [], -1), name
        if name == "blockio-uring":
            assert left == (1, 0)
    assert counts[0] >= 1


class _Recording(socket.socket):
    """A socket that records its ``connect`` calls."""

    calls: list

    def connect(self, address):
        self.calls.append(address)
        return super().connect(address)


def test_a_unix_stream_sock_connect_connects_on_the_ring_or_fails_as_on_asyncio(tmp_path):
    """``sock_connect`` of a Unix stream socket to a path and to an
    abstract name connects (on the io_uring loop by the ring's
    ``connect``, not the socket's ``connect`` call); to a path nothing is
    at it fails with ``FileNotFoundError``, to a socket that does not
    listen with ``ConnectionRefusedError``, each with asyncio's message."""
    path = str(tmp_path / "srv")
    dead = str(tmp_path / "dead")
    abstract = b"\0blockio-connect-%d" % os.getpid()

    async def main():
        loop = asyncio.get_running_loop()
        out = []
        calls = []
        kept = []
        for p in (path, dead):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen()
        srv2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv2.bind(abstract)
        srv2.listen()
        not_listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        not_listening.bind(dead)
        with srv, srv2, not_listening:
            # (a backlog nobody accepts from fills: the last connects find
            # it full, EAGAIN, which asyncio's loop waits on)
            srv2.listen(1)
            for target in (path, abstract, str(tmp_path / "nothing"), dead, abstract, abstract, abstract):
                c = _Recording(socket.AF_UNIX, socket.SOCK_STREAM)
                c.calls = calls
                c.setblocking(False)
                kept.append(c)
                try:
                    await loop.sock_connect(c, target)
                    out.append(c.getpeername())
                except OSError as exc:
                    out.append((type(exc).__name__, str(exc)))
        for c in kept:
            c.close()
        return out, calls

    results, _ = _outcomes(main)
    expected = [path, abstract, ("FileNotFoundError", "[Errno 2] No such file or directory"),
                ("ConnectionRefusedError", "[Errno 111] Connection refused")]
    assert results["asyncio"][0][:4] == expected
    for name in NAMES:
        assert results[name][0] == results["asyncio"][0], name
    assert results["blockio-uring"][1] == []


def test_a_receive_of_more_bytes_than_memory_holds_raises_memory_error():
    """``sock_recvfrom`` and ``sock_recv`` on a datagram socket asked for
    1 TiB raise ``MemoryError``, as ``socket.recvfrom`` does on asyncio's
    loop, whether a datagram is queued or not; the loop goes on."""

    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        with a, b:
            raised = []
            for call in (loop.sock_recvfrom, loop.sock_recv):
                for queued in (False, True):
                    if queued:
                        b.send(b"x")
                    try:
                        await asyncio.wait_for(call(a, 1 << 40), DEADLINE)
                        raised.append("returned")
                    except MemoryError:
                        raised.append("MemoryError")
                    except asyncio.TimeoutError:
                        raised.append("waited")
                    if queued:
                        with contextlib.suppress(BlockingIOError):
                            a.recv(10)
            b.send(b"after")
            return raised, await loop.sock_recv(a, 100)

    results, _ = _outcomes(main)
    assert results["asyncio"] == (["MemoryError"] * 4, b"after")
    for name in NAMES:
        assert results[name] == results["asyncio"], name


def test_sock_recvfrom_into_takes_and_refuses_the_buffers_asyncio_does():
    """``sock_recvfrom_into`` into an ``array('i')`` (``nbytes`` counted in
    items, as asyncio's loop counts them), queued or waited for, and into a
    read-only buffer (``TypeError``), as on asyncio's loop."""
    import array

    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        out = []
        with a, b:
            for queued in (True, False):
                buf = array.array("i", [0] * 10)
                if queued:
                    b.send(b"0123456789" * 10)
                    n, _ = await loop.sock_recvfrom_into(a, buf)
                else:
                    task = await _waiting_recvfrom_into(a, buf)
                    b.send(b"0123456789" * 10)
                    n, _ = await asyncio.wait_for(task, DEADLINE)
                out.append((n, buf.tobytes()))
            try:
                await loop.sock_recvfrom_into(a, b"read-only")
            except Exception as e:  # noqa: BLE001 (the type is what is compared)
                out.append(type(e).__name__)
        return out

    results, _ = _outcomes(main)
    assert results["asyncio"][2] == "TypeError"
    for name in NAMES:
        assert results[name] == results["asyncio"], name


async def _waiting_recvfrom_into(sock, buf):
    """A task in ``sock_recvfrom_into(sock, buf)`` that has made its
    receive (nothing had come) when this returns."""
    loop = asyncio.get_running_loop()
    started = loop.create_future()

    async def receive():
        started.set_result(None)
        return await loop.sock_recvfrom_into(sock, buf)

    task = asyncio.ensure_future(receive())
    await started
    await asyncio.sleep(0)
    return task


def _sender(addr):
    """A blocking client socket that sends to ``addr``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(addr)
    return s


def test_a_datagram_endpoint_s_receive_waits_on_the_ring_and_reaches_the_protocol_from_its_dispatch():
    """On the io_uring loop a datagram endpoint's waiting receive is kept
    in the ring's slab, with no future in the proactor's tables, and its
    datagram reaches ``datagram_received`` from the ring's dispatch: no
    frame of the transport's Python stands between the loop's turn and
    the protocol."""

    async def main():
        loop = asyncio.get_running_loop()
        got = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                names = [f.name for f in __import__("traceback").extract_stack()]
                got.set_result((data, names))

        t, _ = await loop.create_datagram_endpoint(P, local_addr=("127.0.0.1", 0))
        await await_until(lambda: t._read_fut is not None, "the endpoint's first receive armed")
        sock = t.get_extra_info("socket")
        ops = [op for op in loop._proactor._ops.values() if isinstance(op[2], tuple) and sock in op[2]]
        receives = loop._proactor._ring.receives()
        waiting = t._read_fut
        with _sender(t.get_extra_info("sockname")) as s:
            s.send(b"one")
            data, names = await got
        t.close()
        return ops, waiting in receives, data, names

    loop = FACTORIES["blockio-uring"]()
    try:
        ops, in_ring, data, names = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert data == b"one"
    assert ops == [] and in_ring
    assert "_loop_reading" not in names and "_datagram" not in names, names


@LOOPS
def test_a_protocol_raising_in_datagram_received_goes_to_the_exception_handler_and_reading_goes_on(name):
    """An exception from ``datagram_received`` goes to the loop's
    exception handler, as one from asyncio's read callback does, and the
    endpoint goes on reading: the datagrams after it arrive, in order."""

    async def main():
        loop = asyncio.get_running_loop()
        handled = []
        loop.set_exception_handler(lambda _loop, context: handled.append(context.get("exception")))
        told = []
        done = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                told.append(data)
                if data == b"1":
                    raise ValueError("from datagram_received")
                if len(told) == 3:
                    done.set_result(None)

        t, _ = await loop.create_datagram_endpoint(P, local_addr=("127.0.0.1", 0))
        with _sender(t.get_extra_info("sockname")) as s:
            for i in (b"1", b"2", b"3"):
                s.send(i)
            await done
        t.close()
        return told, [repr(e) for e in handled]

    loop = FACTORIES[name]()
    try:
        told, handled = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert told == [b"1", b"2", b"3"]
    assert handled == [repr(ValueError("from datagram_received"))]


@LOOPS
@pytest.mark.parametrize("how", ["close", "abort"])
def test_a_datagram_endpoint_ended_in_datagram_received_is_handed_no_datagram_after(name, how):
    """An endpoint closed (or aborted) by its protocol's
    ``datagram_received`` while more datagrams are queued (on the io_uring
    loop the next one was already taken by the receive armed before the
    protocol was called) hands the protocol none of them: it reports
    ``connection_lost(None)``, closes its socket, and leaves nothing on
    the ring."""

    async def main():
        loop = asyncio.get_running_loop()
        ring = _ring(loop)
        lost = loop.create_future()
        told = []

        class P(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.t = transport

            def datagram_received(self, data, addr):
                told.append(data)
                getattr(self.t, how)()

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.create_datagram_endpoint(P, local_addr=("127.0.0.1", 0))
        sock = t.get_extra_info("socket")
        if ring is not None:
            await await_until(lambda: t._read_fut is not None, "the endpoint's first receive armed")
        before = None if ring is None else ring.in_flight()
        with _sender(t.get_extra_info("sockname")) as s:
            for i in (b"1", b"2", b"3"):
                s.send(i)
        exc = await lost
        if ring is not None:
            # (a receive cancelled on the ring leaves it once the kernel
            # has answered; the test's bound ends a wait that never ends)
            while ring.in_flight() >= before:
                await asyncio.sleep(0)
        for _ in range(3):
            await asyncio.sleep(0)  # (a datagram_received after the end would run by now)
        return exc, told, sock.fileno()

    loop = FACTORIES[name]()
    try:
        exc, told, fd = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert (exc, told, fd) == (None, [b"1"], -1)


@LOOPS
def test_a_protocol_set_by_set_protocol_in_datagram_received_gets_the_next_datagrams(name):
    """``set_protocol`` from ``datagram_received`` hands the next
    datagrams, already queued, to the new protocol, as asyncio's transport
    does (on the io_uring loop: the protocol the ring's dispatch calls is
    the new one from then on)."""

    async def main():
        loop = asyncio.get_running_loop()
        told = []
        done = loop.create_future()

        class Then(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                told.append(("then", data))
                if len(told) == 3:
                    done.set_result(None)

        class First(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.t = transport

            def datagram_received(self, data, addr):
                told.append(("first", data))
                self.t.set_protocol(Then())

        t, _ = await loop.create_datagram_endpoint(First, local_addr=("127.0.0.1", 0))
        with _sender(t.get_extra_info("sockname")) as s:
            for i in (b"1", b"2", b"3"):
                s.send(i)
            await done
        t.close()
        return told

    assert _run(name, main)[0] == [("first", b"1"), ("then", b"2"), ("then", b"3")]


@LOOPS
def test_a_burst_of_datagrams_queued_before_the_endpoint_reads_is_each_taken_by_a_receive_on_the_ring(name):
    """32 datagrams queued at once on an endpoint whose receive waits all
    reach ``datagram_received``, in order; on the io_uring loop each was
    taken by a ``recvmsg`` on the ring (the ring's ``msg_receives`` grows
    by one per datagram: the receive waiting when they were sent was
    counted before), none by a
    ``recvmsg`` made in the loop's thread when a receive is armed, which
    would have found the next datagram already queued at every arming."""
    count = 32

    async def main():
        loop = asyncio.get_running_loop()
        ring = _ring(loop)
        told = []
        done = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                told.append(data)
                if len(told) == count:
                    done.set_result(None)

        t, _ = await loop.create_datagram_endpoint(P, local_addr=("127.0.0.1", 0))
        if ring is not None:
            await await_until(lambda: t._read_fut is not None, "the endpoint's first receive armed")
        before = None if ring is None else ring.msg_receives
        with _sender(t.get_extra_info("sockname")) as s:
            for i in range(count):
                s.send(b"%02d" % i)  # (all queued before the loop runs again)
            await done
        receives = None if ring is None else ring.msg_receives - before
        t.close()
        return told, receives

    told, receives = _run(name, main)[0]
    assert told == [b"%02d" % i for i in range(count)]
    if name == "blockio-uring":
        assert receives == count


@LOOPS
@pytest.mark.parametrize("family", ["ipv4", "ipv6", "unix"])
def test_the_longest_datagram_of_each_family_reaches_the_endpoint_whole(name, family, tmp_path):
    """A datagram endpoint's receive holds the longest datagram its socket
    can get: 65,507 bytes over UDP on IPv4 and 65,527 on IPv6 (an IP
    endpoint's receive is 64 KiB, not asyncio's 256 KiB ``max_size``),
    and 150,000 bytes on a Unix socket (whose receive stays ``max_size``);
    each reaches ``datagram_received`` whole, as on asyncio's loop."""
    size = {"ipv4": 65_507, "ipv6": 65_527, "unix": 150_000}[family]
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    here = str(tmp_path / "r")

    async def main():
        loop = asyncio.get_running_loop()
        got = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.set_result(data)

        if family == "unix":
            t, _ = await loop.create_datagram_endpoint(P, local_addr=here, family=socket.AF_UNIX)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        else:
            host = "127.0.0.1" if family == "ipv4" else "::1"
            t, _ = await loop.create_datagram_endpoint(P, local_addr=(host, 0))
            s = socket.socket(socket.AF_INET if family == "ipv4" else socket.AF_INET6, socket.SOCK_DGRAM)
        if _ring(loop) is not None:
            await await_until(lambda: t._read_fut is not None, "the endpoint's first receive armed")
        with s:
            s.sendto(payload, t.get_extra_info("sockname"))
            data = await got
        t.close()
        return data

    got, counts = _run(name, main)
    assert len(got) == size and got == payload
    if counts is not None:
        assert counts[0] >= 1, "the datagram was not taken by a receive on the ring"


@LOOPS
@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_each_datagram_from_many_peers_in_turn_names_its_own_sender(name, family):
    """An endpoint that hears from 20 peers in turn, each three times,
    is told each datagram's own sender, as ``socket.recvfrom`` tells it:
    the io_uring loop hands a recent peer's address tuple out again (a
    few per thread), and must never hand out another peer's."""
    host = "127.0.0.1" if family == "ipv4" else "::1"
    fam = socket.AF_INET if family == "ipv4" else socket.AF_INET6

    async def main():
        loop = asyncio.get_running_loop()
        got = []
        done = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.append((data, addr))
                if len(got) == 60:
                    done.set_result(None)

        t, _ = await loop.create_datagram_endpoint(P, local_addr=(host, 0))
        peers = [socket.socket(fam, socket.SOCK_DGRAM) for _ in range(20)]
        try:
            for p in peers:
                p.bind((host, 0))
            here = t.get_extra_info("sockname")
            for turn in range(3):
                for i, p in enumerate(peers):
                    p.sendto(b"%d" % i, here)
            await done
            names = [p.getsockname() for p in peers]
        finally:
            for p in peers:
                p.close()
        t.close()
        return got, names

    got, counts = _run(name, main)
    got, names = got
    assert sorted(data for data, _ in got) == sorted(b"%d" % i for i in range(20) for _ in range(3))
    for data, addr in got:
        assert addr == names[int(data)], (data, addr)


@pytest.mark.parametrize("name", ["blockio-uring", "blockio-epoll"])
@pytest.mark.parametrize("family", ["ipv4", "ipv6", "unix", "netlink"])
def test_an_ip_endpoint_receives_into_64_kib_and_every_other_into_max_size(name, family, tmp_path):
    """blockio's endpoint receive asks for 64 KiB on an IP socket, whose
    datagrams are never longer, and for asyncio's ``max_size`` (256 KiB)
    on every other family: a Unix socket's, a netlink socket's (given as
    ``sock=``) may be longer. (The io_uring loop's ring receive is that
    long; the epoll loop's ``recvfrom`` asks for the transport's
    ``max_size``.)"""

    async def main():
        loop = asyncio.get_running_loop()
        if family == "netlink":
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
            s.bind((0, 0))
            t, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=s)
        elif family == "unix":
            t, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=str(tmp_path / "u"),
                                                       family=socket.AF_UNIX)
        else:
            host = "127.0.0.1" if family == "ipv4" else "::1"
            t, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=(host, 0))
        if _ring(loop) is not None:
            await await_until(lambda: t._read_fut is not None, "the endpoint's first receive armed")
            room = t._rx.nbytes
        else:
            room = t.max_size
        t.close()
        return room

    room, _ = _run(name, main)
    assert room == (64 * 1024 if family in ("ipv4", "ipv6") else 256 * 1024)
