"""blockio's event loop where programs and peers misbehave: sockets closed
or aborted with operations in flight, peers that reset, descriptors that
run out, cancellations that race with the kernel. Each test runs on both
backends (``io_uring``, and the ``epoll`` fallback, which is asyncio's own
selector loop) and checks asyncio's behaviour, or where asyncio's is a
hang, that nothing reaches the wrong socket."""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import gc
import os
import resource
import socket
import struct
import warnings
import weakref

import pytest

import blockio
from blockio import _proactor
from fdnumbers import move_to, names
from waits import DEADLINE, await_until


def _pairs(n):
    """``n`` non-blocking socketpairs: new descriptors that take the
    numbers just freed."""
    made = [socket.socketpair() for _ in range(n)]
    for a, b in made:
        a.setblocking(False)
        b.setblocking(False)
    return made


def _pair_on(n):
    """A non-blocking socketpair whose first socket has descriptor number
    ``n``, which the caller has just closed: dup2 puts it there. (A new
    descriptor takes the lowest free number, and another thread, or
    another test's garbage, may have freed a lower one meanwhile.)"""
    x, y = socket.socketpair()
    if y.fileno() == n:  # dup2 onto the number would close y
        x, y = y, x
    if x.fileno() != n:
        x = socket.socket(fileno=move_to(x.detach(), n))
    x.setblocking(False)
    y.setblocking(False)
    return x, y


def _replace(a):
    """Closes socket ``a`` and returns ``_pair_on`` its number, having
    checked that the close let go of the number: it no longer names
    ``a``'s socket (compared by inode, which a file another thread opens
    on the number cannot share)."""
    n, inode = a.fileno(), os.fstat(a.fileno()).st_ino
    a.close()
    assert not names(n, inode), "the close left the number on the old socket"
    return _pair_on(n)


def _waiting_bytes(pairs):
    """Bytes waiting on either end of ``pairs`` (which nothing wrote to)."""
    n = 0
    for pair in pairs:
        for s in pair:
            try:
                n += len(s.recv(1 << 22))
            except BlockingIOError:
                pass
    return n


def test_sendfile_aborted_sends_nothing_to_a_socket_reusing_the_number(loop, tmp_path):
    path = tmp_path / "big"
    path.write_bytes(os.urandom(16 << 20))

    async def main():
        got = []
        lost = loop.create_future()

        class Sink(asyncio.Protocol):
            def data_received(self, data):
                got.append(len(data))

        class Client(asyncio.Protocol):
            def connection_lost(self, exc):
                lost.set_result(exc)

        srv = await loop.create_server(Sink, "127.0.0.1", 0)
        t, _ = await loop.create_connection(Client, *srv.sockets[0].getsockname())
        fd = t.get_extra_info("socket").fileno()
        inode = os.fstat(fd).st_ino
        with open(path, "rb") as f:
            task = asyncio.ensure_future(loop.sendfile(t, f))
            await await_until(lambda: got, "the first bytes of the sendfile at the peer")
            t.abort()
            held = names(fd, inode)
            # Made before the loop runs again: the sendfile's operation is
            # in flight, and so must hold the number (made after the
            # transfer's end, a pair may rightly take it).
            pairs = _pairs(3)
            await lost
            if loop.backend == "uring":
                # The transfer ends with an error naming the close, not EBADF.
                with pytest.raises(ConnectionAbortedError, match="socket was closed"):
                    await task
            else:  # asyncio's selector loop leaves it pending
                task.cancel()
            reused = any(fd in (a.fileno(), b.fileno()) for a, b in pairs)
            leaked = _waiting_bytes(pairs)
        srv.close()
        return held, reused, leaked

    held, reused, leaked = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert leaked == 0
    if loop.backend == "uring":
        # The number stayed on the aborted socket until the sendfile ended
        # (checked by its inode: the pairs may take lower numbers).
        assert held and not reused


def test_sock_sendall_pending_on_a_closed_socket_writes_to_no_other(loop):
    a, b = _pairs(1)[0]
    data = b"S" * (4 << 20)

    async def main():
        send = asyncio.ensure_future(loop.sock_sendall(a, data))
        first = await loop.sock_recv(b, 1)
        a.close()
        pairs = _pairs(3)
        total = len(first)
        if loop.backend == "uring":
            # The send still goes to its own socket's peer, and ends there.
            while total < len(data):
                total += len(await loop.sock_recv(b, 1 << 20))
            await send
        else:  # asyncio's selector loop leaves the call pending
            send.cancel()
        return total, _waiting_bytes(pairs)

    total, leaked = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert leaked == 0
    if loop.backend == "uring":
        assert total == len(data)
    b.close()


def test_a_receive_cancelled_in_its_turn_takes_nothing_from_a_socket_reusing_the_number(loop):
    """A receive started and cancelled in one turn, its socket then closed
    and the number taken by a new socket that already has bytes waiting:
    the cancelled receive is handed to the kernel with its cancel before
    the close, on its own socket, so the new socket keeps its bytes."""
    a, b = _pairs(1)[0]

    async def main():
        recv = asyncio.ensure_future(loop.sock_recv(a, 100))
        await asyncio.sleep(0)  # the receive's task starts it
        recv.cancel()
        x, y = _replace(a)  # a closed, a new socket on its number
        y.send(b"for x")
        got = await loop.sock_recv(x, 100)
        for s in (x, y):
            s.close()
        return got

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == b"for x"
    b.close()


def _is_open(fd):
    """Whether descriptor ``fd`` names an open file."""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_socket_its_owner_closes_in_data_received_gives_no_new_socket_s_bytes_to_the_transport(loop):
    """The owner of a transport's socket closes it in ``data_received``
    (the transport's next receive is armed by then) and a new socket takes
    the number if it is free: the new socket gets its own bytes, the
    transport none of them. On io_uring the receive in flight took over
    the finished one's hold on the socket: the number stays the old
    socket's until the transport ends, and is closed then."""
    a, b = _pairs(1)[0]
    old = a.fileno()

    async def main():
        got = []
        first = loop.create_future()
        lost = loop.create_future()

        class Closer(asyncio.Protocol):
            def data_received(self, data):
                got.append(data)
                if not first.done():
                    a.close()
                    first.set_result(None)

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.connect_accepted_socket(Closer, a)
        b.send(b"first")
        await first
        held = _is_open(old)
        if loop.backend == "uring":
            # (else the transport's receive, still in flight, would read the new socket)
            assert held, "the next receive holds the socket its owner closed"
        if held:
            x, y = _pairs(1)[0]
        else:
            x, y = _pair_on(old)
        y.send(b"for x")
        mine = await loop.sock_recv(x, 100)
        for s in (x, y):
            s.close()
        t.close()
        await lost
        await await_until(lambda: not _is_open(old), "the old socket's close once its transport ended")
        return mine, got

    mine, got = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    b.close()
    assert mine == b"for x"
    assert got == [b"first"]


def test_a_transport_paused_in_data_received_closes_its_socket_when_it_ends(loop):
    """Reading paused in ``data_received`` (the next receive is armed by
    then), bytes that receive takes while reading is paused (no receive is
    armed after it), then the transport closed: its socket is closed with
    connection_lost, no hold on it left behind."""
    a, b = _pairs(1)[0]
    old = a.fileno()

    async def main():
        first = loop.create_future()
        lost = loop.create_future()

        class Pausing(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport = transport

            def data_received(self, data):
                self.transport.pause_reading()
                first.set_result(data)

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.connect_accepted_socket(Pausing, a)
        b.send(b"one")
        assert await first == b"one"
        b.send(b"two")
        if loop.backend == "uring":
            # (asyncio's selector loop reads nothing while paused)
            await await_until(
                lambda: getattr(t, "_data", None) == b"two", "the bytes the receive armed before the pause took"
            )
        t.close()
        assert await lost is None
        return _is_open(old)

    still_open = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    b.close()
    assert not still_open


def test_a_reset_while_writes_are_backed_up_is_no_end_of_stream(loop):
    ls = socket.create_server(("127.0.0.1", 0))

    async def main():
        events = []
        lost = loop.create_future()

        class Client(asyncio.Protocol):
            def eof_received(self):
                events.append("eof_received")

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.create_connection(Client, *ls.getsockname())
        peer, _ = ls.accept()
        t.write(b"q" * (8 << 20))  # far more than the socket buffers hold
        await await_until(lambda: t.get_write_buffer_size() > 0, "writes backed up")
        # Closed with a zero linger: the peer resets, as a killed process does.
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        return events, await lost

    events, exc = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    ls.close()
    assert events == []
    assert isinstance(exc, ConnectionResetError)


def test_streams_read_raises_on_a_reset_while_writes_are_backed_up(loop):
    ls = socket.create_server(("127.0.0.1", 0))

    async def main():
        r, w = await asyncio.open_connection(*ls.getsockname())
        peer, _ = ls.accept()
        w.write(b"q" * (8 << 20))
        read = asyncio.ensure_future(r.read(100))
        await await_until(lambda: w.transport.get_write_buffer_size() > 0, "writes backed up")
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        with pytest.raises(ConnectionResetError):
            await read
        w.close()

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    ls.close()


def test_a_server_out_of_descriptors_retries_its_accept(loop):
    async def handle(reader, writer):
        writer.write(await reader.read(4))
        await writer.drain()
        writer.close()

    async def main():
        errors = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = socket.socket()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        filler = []
        try:
            # A low limit bounds the descriptors it takes to fill the table.
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(n) for n in os.listdir("/proc/self/fd")) + 64, hard))
            try:
                while True:
                    filler.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                pass
            client.connect(srv.sockets[0].getsockname())
            await await_until(lambda: errors, "the failed accept reported")
        finally:
            for fd in filler:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        # What was reported while the table was full. asyncio's selector
        # loop schedules a retry for each failed accept of its backlog's
        # loop, each due ACCEPT_RETRY_DELAY after its own failure; the
        # first one due serves the connection, and those due after the
        # server is closed below report an exception in _start_serving on
        # the closed socket: asyncio's own, not the retry under test.
        reported = list(errors)
        client.sendall(b"ping")
        client.setblocking(False)
        echo = await loop.sock_recv(client, 4)
        serving = srv.is_serving()
        client.close()
        srv.close()
        await srv.wait_closed()
        return reported, echo, serving

    errors, echo, serving = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    # (asyncio's selector loop tries its backlog's worth of accepts, each reported)
    assert {c["message"] for c in errors} == {"socket.accept() out of system resource"}
    assert {c["exception"].errno for c in errors} == {24}  # EMFILE
    assert echo == b"ping"  # accepted once descriptors were free again
    assert serving


def test_cancelled_sock_accept_loses_no_connection(loop):
    n = 60
    ls = socket.create_server(("127.0.0.1", 0), backlog=n)
    ls.setblocking(False)
    clients = [socket.create_connection(ls.getsockname()) for _ in range(n)]

    async def main():
        accepted = []
        for i in range(20 * n):
            if len(accepted) == n:
                break
            task = asyncio.ensure_future(loop.sock_accept(ls))
            for _ in range(i % 3):
                await asyncio.sleep(0)
            cancel = i % 5 < 3
            if cancel:
                task.cancel()
            try:
                accepted.append((await task)[0])
            except asyncio.CancelledError:
                if not cancel:
                    raise  # main() itself was cancelled
        return accepted

    accepted = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert len(accepted) == n
    # Each client is served by one of them: none was closed by the server.
    for conn in accepted:
        conn.setblocking(True)
        conn.sendall(b"!")
    for c in clients:
        c.settimeout(DEADLINE)
        assert c.recv(1) == b"!"
        c.close()
    for conn in accepted:
        conn.close()
    ls.close()


def test_sock_accept_cancelled_as_its_connection_comes_hands_it_to_the_next(loop):
    """A client connects while an accept waits, and the accept is cancelled
    in the turn its readiness (completion) is handled: the connection goes
    to the next accept. (asyncio's selector loop accepts it for the
    cancelled caller, fails with ``InvalidStateError`` and loses it.)"""

    async def main():
        errors = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        for _ in range(20):
            ls = socket.create_server(("127.0.0.1", 0))
            ls.setblocking(False)
            task = asyncio.ensure_future(loop.sock_accept(ls))
            await asyncio.sleep(0)  # the accept waits
            client = socket.create_connection(ls.getsockname())
            await asyncio.sleep(0)  # the connection is seen in this turn...
            task.cancel()  # ...and the accept cancelled in it
            try:
                conn, _ = await task
            except asyncio.CancelledError:
                conn, _ = await loop.sock_accept(ls)
            conn.setblocking(True)
            conn.sendall(b"!")
            client.settimeout(DEADLINE)
            assert client.recv(1) == b"!"
            for s in (conn, client, ls):
                s.close()
        return errors

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == []


def test_add_reader_refuses_a_closed_descriptor_and_a_closed_one_never_fires(loop):
    async def main():
        calls = []
        unused = os.open("/dev/null", os.O_RDONLY)
        os.close(unused)
        with pytest.raises(OSError) as err:
            loop.add_reader(unused, calls.append, "not open")
        assert err.value.errno == 9  # EBADF, as asyncio's epoll says
        c, d = socket.socketpair()
        loop.add_reader(c.fileno(), calls.append, "closed")
        fd = c.fileno()
        c.close()
        # Many turns of the loop: a callback that fires would fire in them.
        for _ in range(200):
            await asyncio.sleep(0)
        loop.remove_reader(fd)
        d.close()
        return calls

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == []


def test_connected_udp_error_received_has_the_errno(loop):
    async def main():
        errors = loop.create_future()

        class C(asyncio.DatagramProtocol):
            def error_received(self, exc):
                if not errors.done():
                    errors.set_result(exc)

        srv, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        t, _ = await loop.create_datagram_endpoint(C, remote_addr=srv.get_extra_info("sockname"))
        t.sendto(b"u" * 70000)  # larger than any datagram
        exc = await errors
        t.close()
        srv.close()
        return exc

    exc = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert type(exc) is OSError
    assert (exc.errno, exc.strerror) == (90, "Message too long")  # EMSGSIZE


def test_transport_errors_say_what_asyncio_says(loop):
    async def main():
        srv = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        t, _ = await loop.create_connection(asyncio.Protocol, *srv.sockets[0].getsockname())
        with pytest.raises(TypeError, match="^data argument must be a bytes-like object, not 'str'$"):
            t.write("str")
        t.write_eof()
        with pytest.raises(RuntimeError, match=r"^Cannot call write\(\) after write_eof\(\)$"):
            t.write(b"x")
        t.close()
        srv.close()

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))


def test_an_empty_buffer_from_get_buffer_is_named_in_the_error(loop):
    async def main():
        errors = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        lost = loop.create_future()

        class Empty(asyncio.BufferedProtocol):
            def get_buffer(self, hint):
                return bytearray(0)

            def buffer_updated(self, n):
                pass

            def connection_lost(self, exc):
                lost.set_result(exc)

        srv = await loop.create_server(Empty, "127.0.0.1", 0)
        c = socket.create_connection(srv.sockets[0].getsockname())
        c.sendall(b"abc")
        exc = await lost
        c.close()
        srv.close()
        return exc, errors

    exc, errors = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert isinstance(exc, RuntimeError) and str(exc) == "get_buffer() returned an empty buffer"
    assert [c["message"] for c in errors] == ["Fatal error: protocol.get_buffer() call failed."]


def test_a_read_only_buffer_from_get_buffer_ends_the_connection(loop):
    """A buffered protocol's ``get_buffer`` returns a buffer the bytes
    cannot be written into: the connection ends with the error, as
    asyncio's receive into that buffer ends it."""

    async def main():
        errors = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        lost = loop.create_future()
        updated = []

        class ReadOnly(asyncio.BufferedProtocol):
            def get_buffer(self, hint):
                return b"read-only"

            def buffer_updated(self, n):
                updated.append(n)

            def connection_lost(self, exc):
                lost.set_result(exc)

        a, b = _pairs(1)[0]
        t, _ = await loop.connect_accepted_socket(ReadOnly, a)
        b.send(b"abc")
        exc = await lost
        b.close()
        return exc, errors, updated, t.is_closing()

    exc, errors, updated, closing = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert isinstance(exc, TypeError)
    assert [c["message"] for c in errors] == ["Fatal read error on socket transport"]
    assert errors[0]["exception"] is exc
    assert updated == []
    assert closing


def test_sendfile_to_a_peer_that_resets_raises_connection_reset(loop, tmp_path):
    path = tmp_path / "big"
    path.write_bytes(os.urandom(16 << 20))
    ls = socket.create_server(("127.0.0.1", 0))

    async def main():
        t, _ = await loop.create_connection(asyncio.Protocol, *ls.getsockname())
        peer, _ = ls.accept()
        with open(path, "rb") as f:
            task = asyncio.ensure_future(loop.sendfile(t, f))
            peer.setblocking(False)
            await loop.sock_recv(peer, 1)  # the transfer is under way
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()
            with pytest.raises(ConnectionResetError):
                await task
        t.close()

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    ls.close()


def test_connected_udp_reports_each_port_unreachable(loop):
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.1", 0))
    addr = closed.getsockname()
    closed.close()  # nothing listens there now: each datagram brings an ICMP error

    async def main():
        errors = asyncio.Queue()

        class C(asyncio.DatagramProtocol):
            def error_received(self, exc):
                errors.put_nowait(exc)

        t, _ = await loop.create_datagram_endpoint(C, remote_addr=addr)
        got = []
        for _ in range(5):
            t.sendto(b"hi")
            got.append(await errors.get())
        t.close()
        return got

    got = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert [type(e) for e in got] == [ConnectionRefusedError] * 5


def _sentinel(loop, turns):
    """A future done once a reader on a socket kept readable has run
    ``turns`` times: by then a poll armed beside it in the same turns has
    been answered too."""
    s, t = _pairs(1)[0]
    t.send(b"!")
    done = loop.create_future()
    runs = []

    def ran():
        runs.append(1)
        if len(runs) == turns:
            loop.remove_reader(s)
            done.set_result(None)

    loop.add_reader(s, ran)
    done.add_done_callback(lambda _f: (s.close(), t.close()))
    return done


def test_a_reader_closed_in_its_callback_never_runs_for_the_file_reusing_the_number(loop):
    """The callback closes its socket without remove_reader() and a new,
    readable socket takes the number: the callback is not run for it (the
    re-armed poll watches the file the reader was added for, as epoll
    does), and it runs once, as on asyncio's loop and uvloop."""

    async def main():
        a, b = _pairs(1)[0]
        n = a.fileno()
        calls = []
        kept = []
        waited = []

        def old():
            calls.append(loop.time())
            if len(calls) == 1:
                x, y = _replace(a)
                y.send(b"for x")  # the new file is readable
                kept.append((x, y))
                waited.append(_sentinel(loop, 3))

        loop.add_reader(n, old)
        b.send(b"for a")
        await await_until(lambda: waited, "the reader ran")
        await waited[0]
        loop.remove_reader(n)
        x, y = kept[0]
        got = x.recv(100)
        for s in (b, x, y):
            s.close()
        return len(calls), got

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (1, b"for x")


def test_readers_removed_closed_and_added_again_each_run_for_their_own_file(loop):
    """In a reader's callback: remove_reader(), close, a new socket on the
    same number, add_reader() for it. The old callback never runs again,
    the new one runs for the new socket only, and the old socket's answer
    (its peer keeps writing) reaches neither."""

    async def main():
        a, b = _pairs(1)[0]
        n = a.fileno()
        calls = []
        kept = []
        got = loop.create_future()

        def new():
            calls.append("new")
            x = kept[0][0]
            if not got.done():
                got.set_result(x.recv(100))
            loop.remove_reader(n)

        def old():
            calls.append("old")
            loop.remove_reader(n)
            x, y = _replace(a)
            kept.append((x, y))
            loop.add_reader(n, new)
            y.send(b"for x")

        loop.add_reader(n, old)
        b.send(b"for a")
        data = await got
        await _sentinel(loop, 3)
        for s in (b, *kept[0]):
            s.close()
        return calls, data

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (["old", "new"], b"for x")


def test_add_reader_on_a_number_closed_without_remove_watches_the_new_file(loop):
    """A reader's socket closed without remove_reader(), a new socket on the
    number, add_reader() for it: the new callback runs when the new socket
    is readable, the old one never. (asyncio's selector loop takes the call
    for a change of callback on the forgotten registration and never
    reports the new socket; that backend is checked for the old callback
    only.)"""

    async def main():
        a, b = _pairs(1)[0]
        n = a.fileno()
        calls = []
        loop.add_reader(n, calls.append, "old")
        b.send(b"for a")  # the old file is readable, for as long as it lives
        await await_until(lambda: calls, "the old reader ran")
        x, y = _replace(a)
        del calls[:]
        loop.add_reader(n, calls.append, "new")
        y.send(b"for x")
        await _sentinel(loop, 3)
        loop.remove_reader(n)
        for s in (b, x, y):
            s.close()
        return calls

    calls = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert "old" not in calls
    if loop.backend == "uring":
        assert calls and set(calls) == {"new"}


def test_server_close_leaves_no_accepted_connection_open(loop):
    """server.close() while clients wait in the backlog, with its accept in
    flight (and so perhaps already done by the kernel): every client is
    ended (the end of stream or a reset), none is left connected to a
    socket that nothing serves; connections the program took stay its own
    until it closes them, as on asyncio's loop."""
    n = 8

    async def main():
        taken = []

        class Keep(asyncio.Protocol):
            def connection_made(self, transport):
                taken.append(transport)

        srv = await loop.create_server(Keep, "127.0.0.1", 0, backlog=2 * n)
        addr = srv.sockets[0].getsockname()
        first = [socket.create_connection(addr) for _ in range(n)]
        await await_until(lambda: len(taken) == n, "the first clients served")
        waiting = [socket.create_connection(addr) for _ in range(n)]
        srv.close()
        ended = []
        for c in waiting:
            c.setblocking(False)
            try:
                ended.append(await loop.sock_recv(c, 1))
            except ConnectionResetError:
                ended.append("reset")
        still_open = [t.is_closing() for t in taken]
        for t in taken:
            t.close()
        for c in first:
            c.setblocking(False)
            ended.append(await loop.sock_recv(c, 1))
        for c in first + waiting:
            c.close()
        return ended, still_open

    ended, still_open = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert set(ended) <= {b"", "reset"} and len(ended) == 2 * n
    assert still_open == [False] * n


def test_a_transport_kept_after_the_loop_closes_keeps_only_its_own_socket_open(loop):
    """Connections left open when the loop closes, the program keeping one
    transport: every other connection's socket is closed once its objects
    are gone (the receives of the transports, each keeping the loop's
    tables, keep no other connection's socket)."""
    pairs = _pairs(8)
    fds = [a.fileno() for a, _b in pairs]

    async def connect():
        return [(await loop.connect_accepted_socket(asyncio.Protocol, a))[0] for a, _b in pairs]

    transports = loop.run_until_complete(asyncio.wait_for(connect(), DEADLINE))
    loop.close()
    for _a, b in pairs:
        b.close()
    kept = transports[-1]
    del transports, pairs, _a, b
    gc.collect()
    assert [_is_open(fd) for fd in fds] == [False] * (len(fds) - 1) + [True]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (the kept transport was never closed)
        del kept
        gc.collect()
    assert not _is_open(fds[-1])


def test_a_connection_accepted_as_its_server_closes_is_ended_not_served(monkeypatch):
    """A server closed by a callback that runs after the kernel completed an
    accept and before the loop's own callback for that accept (in one batch
    of completions: aiohttp's shutdown under wrk's load): the connection is
    reset, not handed to a protocol of the closed server (asyncio's
    ``Server._attach`` asserts that the server still serves), and nothing
    reaches the exception handler. On io_uring only: the epoll backend's
    accept is asyncio's selector loop's, a ``sock.accept()`` in a reader
    callback, with no completion to race with."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    assert loop.backend == "uring"
    servers = []
    real_deliver = _proactor.ServerAccept.deliver

    def deliver(acc, conn, exc):
        # The accept has completed and its outcome is being handed to the
        # loop's callback: the server is closed first, as a callback of the
        # same batch would close it.
        if conn is not None:
            servers[0].close()
        real_deliver(acc, conn, exc)

    monkeypatch.setattr(_proactor.ServerAccept, "deliver", deliver)

    async def main():
        errors = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        served = []

        class Keep(asyncio.Protocol):
            def connection_made(self, transport):
                served.append(transport)

        srv = await loop.create_server(Keep, "127.0.0.1", 0)
        servers.append(srv)
        client = socket.create_connection(srv.sockets[0].getsockname())
        client.setblocking(False)
        try:
            end = await loop.sock_recv(client, 1)
        except ConnectionResetError:
            end = "reset"
        await srv.wait_closed()
        client.close()
        return errors, served, end

    try:
        errors, served, end = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert [c.get("exception") or c["message"] for c in errors] == []
    assert served == []
    # Reset, as the connections in a closed listener's backlog are, and as
    # uvloop's are: the client sees it was not served.
    assert end == "reset"


async def _served(addr):
    """What a client connecting to ``addr`` reads until the end of stream
    (a reset counts as nothing read)."""
    reader, writer = await asyncio.open_connection(*addr)
    try:
        return await asyncio.wait_for(reader.read(), DEADLINE)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def _tagging(tag):
    class Tag(asyncio.Protocol):
        def connection_made(self, transport):
            transport.write(tag)
            transport.close()

    return Tag


def test_two_servers_sharing_a_listener_serve_every_connection(loop):
    """Two servers on one listening socket (``create_server(sock=...)``
    twice): each connection is served by one of them; none is taken by a
    server's accept and then dropped as if its server were closed."""

    async def main():
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(100)
        addr = lsock.getsockname()
        first = await loop.create_server(_tagging(b"A"), sock=lsock)
        second = await loop.create_server(_tagging(b"B"), sock=lsock)
        got = [await _served(addr) for _ in range(20)]
        first.close()  # closes the shared listener
        # The epoll loop is asyncio's selector loop here, whose close of
        # the second server raises ValueError for the closed listener.
        with contextlib.suppress(ValueError):
            second.close()
        return got

    got = loop.run_until_complete(main())
    assert all(g in (b"A", b"B") for g in got), got


def test_a_server_accepts_on_after_its_protocol_factory_raises(loop):
    """A protocol factory that raises for a connection: the server serves
    the next one, as asyncio's selector loop does (``_accept_connection2``),
    and the error reaches the exception handler in debug mode only, as
    there. On io_uring the failed connection is closed at once (asyncio's
    leaves it to the garbage collector)."""
    calls = []
    errors = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))

    def factory():
        calls.append(None)
        if len(calls) in (1, 3):
            raise ValueError("no protocol")
        return _tagging(b"hi")()

    async def main():
        srv = await loop.create_server(factory, "127.0.0.1", 0)
        addr = srv.sockets[0].getsockname()
        got = []
        for debug in (False, True):
            loop.set_debug(debug)
            reader, writer = await asyncio.open_connection(*addr)
            await await_until(lambda: len(calls) in (1, 3), "the factory's call")
            if loop.backend == "uring":
                assert await asyncio.wait_for(reader.read(), DEADLINE) == b""
            writer.close()
            got.append(await _served(addr))
        srv.close()
        await srv.wait_closed()
        return got

    got = loop.run_until_complete(main())
    assert got == [b"hi", b"hi"]
    assert [type(c.get("exception")) for c in errors] == [ValueError], errors
    assert errors[0]["message"] == "Error on transport creation for incoming connection"


def test_a_server_accepts_on_after_its_protocol_factory_lets_keyboard_interrupt_out(loop):
    """``KeyboardInterrupt`` from a protocol factory ends the run, as in
    asyncio; the server still serves in the next run."""
    calls = []

    def factory():
        calls.append(None)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return _tagging(b"hi")()

    srv = loop.run_until_complete(loop.create_server(factory, "127.0.0.1", 0))
    addr = srv.sockets[0].getsockname()
    client = socket.create_connection(addr)
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(loop.create_future())
    client.close()
    try:
        assert loop.run_until_complete(_served(addr)) == b"hi"
    finally:
        srv.close()
        loop.run_until_complete(srv.wait_closed())


def test_bytes_taken_by_a_closed_transport_s_receive_are_dropped(monkeypatch):
    """Transports closed as their peers' bytes arrive (their receives took
    them and are cancelled by the close): the bytes are dropped, not kept
    for the descriptors, and another transport's receives are armed
    without the proactor's Python ``receive`` (which kept bytes of any
    descriptor used to send every transport through). io_uring only: the
    epoll loop keeps nothing."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    calls = []
    receive = _proactor.RingProactor.receive

    def counting(self, *args):
        calls.append(args)
        return receive(self, *args)

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    async def main():
        made = []
        lost = []

        class Keep(asyncio.Protocol):
            def connection_made(self, transport):
                made.append(transport)

            def connection_lost(self, exc):
                lost.append(exc)

        srv = await loop.create_server(Keep, "127.0.0.1", 0)
        clients = [socket.create_connection(srv.sockets[0].getsockname()) for _ in range(20)]
        await await_until(lambda: len(made) == 20, "the connections")
        for client, transport in zip(clients, made):
            client.send(b"z" * 100)
            transport.close()
        await await_until(lambda: len(lost) == 20, "the connections' ends")
        proactor = loop._proactor
        receives = [transport._rx for transport in made]
        await await_until(
            lambda: not any(rx in receives for rx in proactor._ring.receives()),
            "the cancelled receives' completions",
        )
        kept = dict(proactor._kept)
        echo = await loop.create_server(Echo, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*echo.sockets[0].getsockname())
        monkeypatch.setattr(_proactor.RingProactor, "receive", counting)
        for i in range(100):
            writer.write(b"%04d" % i)
            assert await reader.readexactly(4) == b"%04d" % i
        monkeypatch.setattr(_proactor.RingProactor, "receive", receive)
        writer.close()
        for client in clients:
            client.close()
        srv.close()
        echo.close()
        await echo.wait_closed()
        return kept

    try:
        kept = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert kept == {}
    assert calls == []


def test_a_write_pipe_closed_by_its_owner_writes_to_no_file_taking_its_number(loop, tmp_path):
    """A write pipe transport with a write backed up (more than the pipe
    holds); its owner closes the file object it gave and another file takes
    the number: what is left of the write never reaches that file. On
    io_uring it still goes to the pipe (the transport holds the pipe, as it
    holds a socket); asyncio's selector loop stops writing (epoll forgets
    the closed descriptor)."""
    data = os.urandom(1 << 20)
    other = tmp_path / "other"

    async def main():
        r, w = os.pipe()
        wfile = open(w, "wb", buffering=0)
        t, _ = await loop.connect_write_pipe(asyncio.Protocol, wfile)
        t.write(data)
        assert t.get_write_buffer_size() > 0 or loop.backend == "uring"
        wfile.close()
        fd = os.open(other, os.O_WRONLY | os.O_CREAT)
        if fd != w:  # the number the transport's caller gave now names the file
            os.dup2(fd, w)
            os.close(fd)
        got = bytearray()
        done = loop.create_future()

        class Sink(asyncio.Protocol):
            def data_received(self, chunk):
                got.extend(chunk)
                if len(got) == len(data):
                    done.set_result(None)

        rt, _ = await loop.connect_read_pipe(Sink, open(r, "rb", buffering=0))
        if loop.backend == "uring":
            await done
            await _sentinel(loop, 3)
        else:
            # (asyncio's selector loop: the transport is stuck; the new
            # file's number is still registered for it, so a sentinel's
            # socket taking a number freed meanwhile would never be
            # reported. Many turns of the loop instead.)
            for _ in range(200):
                await asyncio.sleep(0)
        # (asyncio's abort then asks epoll to change the registration of
        # a number epoll no longer has: an OSError on that backend)
        with contextlib.suppress(OSError):
            t.abort()
        rt.close()
        if loop.backend == "uring":
            os.close(w)  # still the file's: the transport closed only what it holds
        else:
            with contextlib.suppress(OSError):  # (asyncio's transport may have closed it)
                os.close(w)
        return bytes(got)

    got = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert other.stat().st_size == 0
    assert data.startswith(got)
    if loop.backend == "uring":
        assert got == data


def test_a_read_pipe_closed_by_its_owner_takes_nothing_from_a_file_taking_its_number(loop):
    """A read pipe transport waiting on an empty pipe; its owner closes the
    file object it gave, and another pipe with bytes waiting takes the
    number: those bytes stay for the new pipe's reader. On io_uring the
    transport still reads its own pipe (it holds it); asyncio's selector
    loop stops reading (epoll forgets the closed descriptor)."""

    async def main():
        r, w = os.pipe()
        rfile = open(r, "rb", buffering=0)
        got = asyncio.Queue()

        class Source(asyncio.Protocol):
            def data_received(self, chunk):
                got.put_nowait(chunk)

        t, _ = await loop.connect_read_pipe(Source, rfile)
        await _sentinel(loop, 3)  # the transport's read is waiting
        rfile.close()
        r2, w2 = os.pipe()
        os.write(w2, b"for the new pipe")
        if r2 != r:  # the number the transport's caller gave now names the new pipe
            os.dup2(r2, r)
            os.close(r2)
        # (on asyncio's selector loop nothing holds the old pipe's read end)
        with contextlib.suppress(BrokenPipeError):
            os.write(w, b"for the old pipe")
        if loop.backend == "uring":
            assert await got.get() == b"for the old pipe"
            await _sentinel(loop, 3)
        else:  # (see the write pipe's test above)
            for _ in range(200):
                await asyncio.sleep(0)
        with contextlib.suppress(OSError):  # (asyncio's selector loop: see above)
            t.close()
        os.set_blocking(r, False)
        left = os.read(r, 100)
        for fd in (r, w, w2):
            with contextlib.suppress(OSError):
                os.close(fd)
        return left

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == b"for the new pipe"


@pytest.mark.parametrize("connected", [False, True])
def test_datagram_close_sends_what_was_buffered_then_reports_the_loss(loop, connected):
    """``close()`` right after many ``sendto()``: every datagram reaches the
    peer, ``connection_lost`` comes, and the socket is closed."""
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

    async def main():
        lost = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def connection_lost(self, exc):
                lost.set_result(exc)

        where = {"remote_addr": peer.getsockname()} if connected else {"local_addr": ("127.0.0.1", 0)}
        t, _ = await loop.create_datagram_endpoint(P, **where)
        sock = t.get_extra_info("socket")
        for i in range(50):
            t.sendto(b"%d" % i, None if connected else peer.getsockname())
        t.close()
        assert await lost is None
        return sock.fileno()

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == -1
    peer.setblocking(False)
    got = []
    with contextlib.suppress(BlockingIOError):
        while True:
            got.append(peer.recv(100))
    peer.close()
    assert got == [b"%d" % i for i in range(50)]


@pytest.mark.parametrize("connected", [False, True])
def test_datagram_endpoint_receives_empty_datagrams(loop, connected):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))

    async def main():
        got = asyncio.Queue()

        class D(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                got.put_nowait((data, addr))

        where = {"remote_addr": s.getsockname()} if connected else {}
        t, _ = await loop.create_datagram_endpoint(D, local_addr=("127.0.0.1", 0), **where)
        for d in (b"", b"x", b""):
            s.sendto(d, t.get_extra_info("sockname"))
        seen = [await got.get() for _ in range(3)]
        t.close()
        return seen

    seen = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    addr = s.getsockname()
    s.close()
    assert seen == [(b"", addr), (b"x", addr), (b"", addr)]


def test_datagram_buffered_while_the_peer_is_full_pauses_writing(loop, tmp_path):
    """A datagram the socket cannot take is buffered, counted in
    ``get_write_buffer_size()`` and pauses the protocol's writing (high
    water 0); once the peer reads, it goes out and writing resumes."""
    path = str(tmp_path / "peer")
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    peer.bind(path)
    peer.setblocking(False)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setblocking(False)
    queued = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            s.sendto(b"x" * 1024, path)
            queued += 1

    async def main():
        events = []
        resumed = loop.create_future()

        class P(asyncio.DatagramProtocol):
            def pause_writing(self):
                events.append(("pause", t.get_write_buffer_size()))

            def resume_writing(self):
                events.append(("resume", t.get_write_buffer_size()))
                resumed.set_result(None)

        t, _ = await loop.create_datagram_endpoint(P, sock=s)
        t.set_write_buffer_limits(high=0)
        t.sendto(b"y" * 1024, path)
        buffered = t.get_write_buffer_size()
        drained = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                drained += len(peer.recv(2048))
        await resumed
        last = await loop.sock_recv(peer, 2048)
        t.close()
        return events, buffered, drained, last

    events, buffered, drained, last = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    peer.close()
    assert queued > 0 and drained == queued * 1024
    assert buffered >= 1024
    assert events == [("pause", buffered), ("resume", 0)]
    assert last == b"y" * 1024


@pytest.mark.parametrize("resume", ["soon", "later"])
def test_buffered_protocol_paused_in_buffer_updated_gets_nothing_until_resumed(loop, resume):
    """A ``BufferedProtocol`` with a buffer smaller than what one receive
    takes pauses reading in each ``buffer_updated()``: no call comes while
    it is paused, and every byte comes in order."""
    data = os.urandom(1 << 20)
    a, b = socket.socketpair()

    async def main():
        got = bytearray()
        while_paused = []
        eof = loop.create_future()

        class P(asyncio.BufferedProtocol):
            paused = False

            def connection_made(self, transport):
                self.t = transport
                self.buf = bytearray(65536)

            def get_buffer(self, hint):
                return self.buf

            def buffer_updated(self, n):
                if self.paused:
                    while_paused.append(n)
                got.extend(self.buf[:n])
                self.t.pause_reading()
                self.paused = True
                if resume == "soon":
                    loop.call_soon(self.go_on)
                else:
                    loop.call_later(0.001, self.go_on)

            def go_on(self):
                self.paused = False
                self.t.resume_reading()

            def eof_received(self):
                eof.set_result(None)

        t, _ = await loop.create_connection(P, sock=a)
        await loop.run_in_executor(None, b.sendall, data)
        b.shutdown(socket.SHUT_WR)
        await eof
        t.close()
        return bytes(got), while_paused

    got, while_paused = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    b.close()
    assert while_paused == []
    assert got == data


@pytest.mark.parametrize("which", ["reader", "writer"])
def test_remove_reader_and_writer_find_a_socket_closed_since_it_was_added(loop, which):
    """``remove_reader(sock)`` after ``sock.close()`` removes its watch and
    says so, as asyncio's selector finds the object it was added with; a
    closed socket that was never added is still an invalid descriptor."""

    async def main():
        calls = []
        a, b = socket.socketpair()
        getattr(loop, "add_" + which)(a, calls.append, "fired")
        a.close()
        removed = getattr(loop, "remove_" + which)(a)
        with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
            getattr(loop, "remove_" + which)(a)
        b.close()
        for _ in range(20):
            await asyncio.sleep(0)
        return removed, calls

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (True, [])


def test_sock_receives_refuse_a_socket_a_transport_owns(loop):
    """``sock_recv``, ``sock_recv_into``, ``sock_recvfrom`` and
    ``sock_recvfrom_into`` on a socket a transport reads are refused with
    asyncio's ``RuntimeError``, and the transport still gets every byte."""

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        got = asyncio.Queue()

        class P(asyncio.Protocol):
            def data_received(self, data):
                got.put_nowait(data)

        t, _ = await loop.create_connection(P, sock=a)
        d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        d.bind(("127.0.0.1", 0))
        d.setblocking(False)
        dt, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=d)
        calls = [
            (a, lambda: loop.sock_recv(a, 100)),
            (a, lambda: loop.sock_recv_into(a, bytearray(10))),
            (d, lambda: loop.sock_recvfrom(d, 100)),
            (d, lambda: loop.sock_recvfrom_into(d, bytearray(10))),
        ]
        for sock, call in calls:
            with pytest.raises(RuntimeError, match=f"File descriptor {sock.fileno()} is used by transport"):
                await call()
        b.send(b"hello")
        data = await got.get()
        t.close()
        dt.close()
        b.close()
        return data

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == b"hello"


def test_pipe_transports_refuse_a_regular_file(loop, tmp_path):
    """``connect_read_pipe``/``connect_write_pipe`` refuse a regular file
    with asyncio's ``ValueError`` and messages, leaving the file open."""
    path = tmp_path / "regular"
    path.write_bytes(b"data")

    async def main():
        messages = []
        for connect, mode in ((loop.connect_read_pipe, "rb"), (loop.connect_write_pipe, "wb")):
            with open(path, mode) as f:
                with pytest.raises(ValueError) as err:
                    await connect(asyncio.Protocol, f)
                messages.append(str(err.value))
                assert not f.closed
                os.fstat(f.fileno())  # still open
        return messages

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == [
        "Pipe transport is for pipes/sockets only.",
        "Pipe transport is only for pipes, sockets and character devices",
    ]


def test_cancelled_sock_recv_into_loses_no_byte(loop):
    """A ``sock_recv_into`` cancelled as its bytes come may have written
    them into its buffer, but they also go to the next receive: none is
    lost."""

    async def main():
        lost = 0
        for i in range(40):
            a, b = socket.socketpair()
            a.setblocking(False)
            buf = bytearray(b"." * 16)
            task = asyncio.ensure_future(loop.sock_recv_into(a, buf))
            await asyncio.sleep(0)  # the receive waits
            b.send(b"DATA%03d" % i)
            await asyncio.sleep(0)  # its bytes come in this turn...
            task.cancel()  # ...and it is cancelled in it
            try:
                n = await task
                got = bytes(buf[:n])
            except asyncio.CancelledError:
                other = bytearray(16)
                n = await loop.sock_recv_into(a, other)
                got = bytes(other[:n])
            lost += got != b"DATA%03d" % i
            a.close()
            b.close()
        return lost

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == 0


@pytest.mark.parametrize("receiving", [True, False])
def test_aborted_datagram_transport_closes_its_socket_in_the_next_turn(loop, receiving):
    """``abort()`` on a datagram endpoint whose receive waits for the
    socket to be readable (or has not started yet): as on asyncio's loop,
    the socket is closed for real one turn of the loop later, not held
    open a turn longer by the receive being cancelled."""

    async def main():
        t, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        sock = t.get_extra_info("socket")
        if receiving:
            await _sentinel(loop, 3)  # the receive waits
        t.abort()
        await asyncio.sleep(0)
        return sock.fileno()

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == -1


@pytest.mark.parametrize("make", [lambda: memoryview(bytearray(64))[::2], lambda: memoryview(b"\0" * 32), lambda: b"abc"])
def test_sock_recv_into_refuses_a_buffer_it_cannot_write_before_taking_bytes(loop, make):
    """A read-only or non-contiguous buffer gets ``socket.recv_into``'s
    ``TypeError``, as on asyncio's loop, and the bytes waiting stay for the
    next receive; an ``array`` of ints is received into as bytes."""

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.send(b"HELLO")
        try:
            with pytest.raises(TypeError, match="must be read-write bytes-like object"):
                await loop.sock_recv_into(a, make())
            got = await loop.sock_recv(a, 100)
            b.send(b"12345678")
            arr = array.array("i", [0, 0, 0, 0])
            n = await loop.sock_recv_into(a, arr)
            return got, n, arr.tobytes()[:n]
        finally:
            a.close()
            b.close()

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (b"HELLO", 8, b"12345678")


def test_datagram_close_completes_when_error_received_raises_while_buffered_sends_drain(loop, tmp_path):
    """``error_received`` raising for a buffered datagram's failed send goes
    to the loop's exception handler, as on asyncio's loop, and the rest of
    the buffer is still sent (each failure reported) and ``close()`` still
    ends in ``connection_lost``."""

    async def main():
        handled = []
        loop.set_exception_handler(lambda _, ctx: handled.append(ctx.get("exception")))
        b = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        b.bind(str(tmp_path / "b"))
        a = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.bind(str(tmp_path / "a"))
        a.connect(str(tmp_path / "b"))
        a.setblocking(False)
        lost = loop.create_future()
        errors = []

        class Proto(asyncio.DatagramProtocol):
            def error_received(self, exc):
                errors.append(exc)
                if len(errors) == 1:
                    raise RuntimeError("from error_received")

            def connection_lost(self, exc):
                lost.set_result(exc)

        t, _ = await loop.create_datagram_endpoint(Proto, sock=a)
        while t.get_write_buffer_size() == 0:
            t.sendto(b"x" * 100)
        for _ in range(3):
            t.sendto(b"y" * 100)
        b.close()  # the buffered sends now fail
        await await_until(lambda: t.get_write_buffer_size() == 0, "the buffer drained")
        t.close()
        return await lost, len(errors), handled

    exc, nerrors, handled = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert exc is None
    assert nerrors >= 2
    assert [type(e) for e in handled] == [RuntimeError]


def test_sock_accept_on_a_closed_listener_fails_and_closes_its_kept_connections(loop):
    """A connection a cancelled ``sock_accept`` kept for its listener,
    closed since: the next ``sock_accept`` on it fails with EBADF, as on
    asyncio's loop, and the kept connection is closed (its client sees it
    end), as one left in the closed listener's backlog is."""

    async def main():
        loop.set_exception_handler(lambda _loop, ctx: None)
        kept = 0
        for i in range(30):
            ls = socket.create_server(("127.0.0.1", 0))
            ls.setblocking(False)
            task = asyncio.ensure_future(loop.sock_accept(ls))
            await asyncio.sleep(0)  # the accept waits
            client = socket.create_connection(ls.getsockname())
            for _ in range(i % 3):
                await asyncio.sleep(0)
            task.cancel()
            try:
                (await task)[0].close()
            except asyncio.CancelledError:
                kept += 1
                ls.close()
                with pytest.raises(OSError) as err:
                    await loop.sock_accept(ls)
                assert err.value.errno == 9
                client.settimeout(DEADLINE)
                with contextlib.suppress(ConnectionResetError):
                    assert client.recv(1) == b""
            client.close()
            ls.close()
        return kept

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) > 0


def test_a_socket_closed_before_its_waiting_receive_starts_keeps_its_number_until_it_ends(monkeypatch):
    """A ``sock_recvfrom`` that must wait, its socket closed by a callback
    that runs before the waiting task's first step: the socket's number
    is not handed to a socket made meanwhile, so the receive's poll never
    reaches another socket. On io_uring only: the epoll backend's
    ``sock_recvfrom`` is asyncio's, whose reader is registered before the
    close (and removed from epoll by it)."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    loop = blockio.new_event_loop()
    assert loop.backend == "uring"

    async def main():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        old = a.fileno()
        made = []

        def close_and_make():
            a.close()
            made.extend(socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))

        async def receiver():
            loop.call_soon(close_and_make)  # before the waiting task's first step
            return await loop.sock_recvfrom(a, 100)

        task = asyncio.ensure_future(receiver())
        await await_until(lambda: made, "the socket closed and new ones made")
        numbers = [s.fileno() for s in made]
        made[1].send(b"for the new socket")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        got = made[0].recv(100)
        for s in (b, *made):
            s.close()
        return old, numbers, got

    try:
        old, numbers, got = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        loop.close()
    assert old not in numbers
    assert got == b"for the new socket"


def _watch_outcome(lp, which, path):
    """What ``add_reader``/``add_writer`` (``which``) on a descriptor of
    ``path`` does on loop ``lp``: the exception's type and errno, or
    "accepted"; and whether ``remove_*`` then finds a watch."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            getattr(lp, "add_" + which)(fd, lambda: None)
            outcome = "accepted"
        except OSError as e:
            outcome = (type(e).__name__, e.errno)
        return outcome, getattr(lp, "remove_" + which)(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("which", ["reader", "writer"])
@pytest.mark.parametrize("what", ["a regular file", "a directory", "/dev/null", "a FIFO"])
def test_add_reader_and_writer_refuse_a_file_without_readiness_as_asyncio_does(loop, tmp_path, which, what):
    """A file epoll cannot watch (a regular file, a directory, /dev/null)
    is refused with asyncio's selector loop's ``PermissionError`` (EPERM)
    and leaves no watch; a FIFO, which has readiness, is watched on both."""
    path = {"a regular file": tmp_path / "f", "a directory": tmp_path, "/dev/null": "/dev/null",
            "a FIFO": tmp_path / "fifo"}[what]
    if what == "a regular file":
        path.write_bytes(b"x")
    elif what == "a FIFO":
        os.mkfifo(path)
        keep_open = os.open(path, os.O_RDWR)  # (so that the read-only open does not wait for a writer)
    reference = asyncio.SelectorEventLoop()
    try:
        want = _watch_outcome(reference, which, path)
    finally:
        reference.close()
    try:
        got = _watch_outcome(loop, which, path)
    finally:
        if what == "a FIFO":
            os.close(keep_open)
    expected = ("accepted", True) if what == "a FIFO" else (("PermissionError", errno.EPERM), False)
    assert want == expected
    assert got == want


def _watch_at_the_limit(lp, tmp_path, what):
    """What ``add_reader`` on loop ``lp`` does with every descriptor of the
    limit in use: on an eventfd it already watches (a new callback; then
    whether that callback runs), or on a regular file."""
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    (tmp_path / "f").write_bytes(b"x")
    regular = os.open(tmp_path / "f", os.O_RDONLY)
    lp.add_reader(efd, lambda: None)
    fired = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    filler = []
    try:
        # A low limit bounds the descriptors it takes to fill the table.
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(n) for n in os.listdir("/proc/self/fd")) + 64, hard))
        try:
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        try:
            if what == "a regular file":
                lp.add_reader(regular, lambda: None)
            else:
                lp.add_reader(efd, lambda: fired.append(os.eventfd_read(efd)))
                os.eventfd_write(efd, 1)
                lp.run_until_complete(asyncio.wait_for(await_until(lambda: fired, "the new callback run"), DEADLINE))
            outcome = "accepted"
        except OSError as e:
            outcome = (type(e).__name__, e.errno)
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        lp.remove_reader(efd)
        lp.remove_reader(regular)
        os.close(efd)
        os.close(regular)
    return outcome, fired


@pytest.mark.parametrize("what", ["a watched eventfd", "a regular file"])
def test_add_reader_at_the_descriptor_limit_answers_as_asyncio_does(loop, tmp_path, what):
    """With every descriptor in use, ``add_reader`` again on a descriptor
    already watched replaces its callback, and on a regular file raises
    ``PermissionError``, as on asyncio's selector loop: neither opens a
    descriptor to ask whether the file has readiness."""
    reference = asyncio.SelectorEventLoop()
    try:
        want = _watch_at_the_limit(reference, tmp_path, what)
    finally:
        reference.close()
    assert want == (("accepted", [1]) if what == "a watched eventfd" else (("PermissionError", errno.EPERM), []))
    assert _watch_at_the_limit(loop, tmp_path, what) == want


@pytest.mark.parametrize("gone", ["closed", "closed and collected"])
def test_connections_kept_for_a_listener_end_when_it_is_closed(loop, gone):
    """A connection that a cancelled ``sock_accept`` took (the accept done,
    its caller cancelled before it resumed) is kept for the next accept;
    once the listener is closed (and collected) there is none, and the
    peer sees the end of the connection (a reset, as for one left in a
    closed listener's backlog) without another accept."""

    async def main():
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.setblocking(False)
        coro = loop.sock_accept(lsock)
        accept = coro.send(None)  # the accept's future, the connection not yet there
        client = socket.create_connection(lsock.getsockname())
        await asyncio.wait({accept})
        with pytest.raises(asyncio.CancelledError):
            coro.throw(asyncio.CancelledError())
        assert isinstance(accept.result()[0], socket.socket)  # the connection was taken, then kept
        del coro, accept
        lsock.close()
        if gone == "closed and collected":
            del lsock
            gc.collect()
        client.settimeout(DEADLINE)
        try:
            end = await loop.run_in_executor(None, client.recv, 1)
        except ConnectionResetError:
            end = "reset"
        except TimeoutError:
            end = "no end"
        client.close()
        return end

    assert loop.run_until_complete(asyncio.wait_for(main(), 2 * DEADLINE)) in (b"", "reset")


def test_connections_kept_and_handed_over_leave_no_finalizer_behind(loop):
    """A connection kept from a cancelled ``sock_accept`` and then handed
    to the next accept, many times over on one live listener, leaves the
    loop holding no finalizer for it (one would be registered per cycle
    and kept while the listener lives)."""

    async def main():
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.setblocking(False)
        before = len(weakref.finalize._registry)
        for _ in range(20):
            coro = loop.sock_accept(lsock)
            accept = coro.send(None)  # the accept's future, the connection not yet there
            client = socket.create_connection(lsock.getsockname())
            await asyncio.wait({accept})
            with pytest.raises(asyncio.CancelledError):
                coro.throw(asyncio.CancelledError())
            conn, _ = await loop.sock_accept(lsock)  # the kept one
            conn.close()
            client.close()
        gc.collect()
        grown = len(weakref.finalize._registry) - before
        lsock.close()
        return grown

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == 0


def _two_writes(lp, family, writes=(b"one", b"two")):
    """How many loop iterations after ``writes`` made in one step a peer
    transport on the same loop ``lp`` has them all, and the sizes of its
    ``data_received`` calls (over a Unix ``socketpair`` or a loopback TCP
    connection, by ``family``)."""

    async def main():
        got = []

        class P(asyncio.Protocol):
            def data_received(self, data):
                got.append(data)

        if family == socket.AF_UNIX:
            a, b = socket.socketpair()
        else:
            with socket.create_server(("127.0.0.1", 0)) as listener:
                a = socket.create_connection(listener.getsockname())
                b, _ = listener.accept()
        ta, _ = await lp.create_connection(asyncio.Protocol, sock=a)
        tb, _ = await lp.create_connection(P, sock=b)
        for _ in range(3):
            await asyncio.sleep(0)  # (both transports' first receives are waiting)
        for w in writes:
            ta.write(w)
        n = 0
        while b"".join(got) != b"".join(writes):
            await asyncio.sleep(0)
            n += 1
        ta.close()
        tb.close()
        return n, [len(g) for g in got]

    return lp.run_until_complete(asyncio.wait_for(main(), DEADLINE))


@pytest.mark.parametrize("sizes", [(3, 3), (1500, 1500), (3000, 5000)], ids=["small", "past-first-buffer", "large"])
@pytest.mark.parametrize("family", [socket.AF_UNIX, socket.AF_INET], ids=["unix", "tcp"])
def test_two_writes_in_one_step_reach_a_peer_on_the_same_loop_as_on_asyncio(loop, family, sizes):
    """The second of two writes made in one step reaches a peer transport
    on the same loop with the first, after as many iterations as on
    asyncio's selector loop (on io_uring the first send finishes the peer's
    waiting receive as the system call returns; what the second sent is
    taken with it, past the receive's first buffer too)."""
    writes = tuple(bytes([65 + i]) * n for i, n in enumerate(sizes))
    reference = asyncio.SelectorEventLoop()
    try:
        want = _two_writes(reference, family, writes)
    finally:
        reference.close()
    assert want[1] == [sum(sizes)]
    assert _two_writes(loop, family, writes) == want


def _reset_after_two_sends(lp, second):
    """What a socket's two receives on loop ``lp`` give when, in one step,
    the loop sends b"x" to it from its peer, then ``second`` ("empty": an
    empty send on the same socket; "reused number": a send on a new socket
    that took the number of the peer, closed in between) and the peer is
    closed holding unread bytes (so the socket is reset)."""

    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        b.send(b"unread")  # (a's close with these unread resets b)
        r = asyncio.ensure_future(lp.sock_recv(b, 65536))
        for _ in range(3):
            await asyncio.sleep(0)  # (the receive is waiting)
        held = []

        def swap():
            held.extend(_replace(a))

        async def send_new():
            await lp.sock_sendall(held[0], b"x")

        asyncio.ensure_future(lp.sock_sendall(a, b"x"))
        if second == "empty":
            asyncio.ensure_future(lp.sock_sendall(a, b""))
            lp.call_soon(a.close)
        else:
            lp.call_soon(swap)
            asyncio.ensure_future(send_new())
        first = await r
        try:
            then = await lp.sock_recv(b, 65536)
        except OSError as e:
            then = type(e).__name__
        for s in [b, *held]:
            s.close()
        return first, then

    return lp.run_until_complete(asyncio.wait_for(main(), DEADLINE))


@pytest.mark.parametrize("second", ["empty", "reused number"])
def test_a_reset_after_two_sends_in_one_step_is_reported_as_on_asyncio(loop, second):
    """A peer's reset that follows two sends of the loop's own in one step
    reaches the next receive as ``ConnectionResetError``, as on asyncio's
    selector loop: taking the second send's bytes with the first receive
    asks only for what the socket holds, so the reset (reported once) is
    not consumed there."""
    reference = asyncio.SelectorEventLoop()
    try:
        want = _reset_after_two_sends(reference, second)
    finally:
        reference.close()
    assert want == (b"x", "ConnectionResetError")
    assert _reset_after_two_sends(loop, second) == want


def _watches_held(loop):
    """What the loop holds for its watches and operations: on io_uring the
    proactor's ``_ops`` entries and the ring's operations in flight; on
    the epoll fallback, the selector's registrations."""
    proactor = getattr(loop, "_proactor", None)
    if proactor is None:
        return len(loop._selector.get_map())
    return len(proactor._ops), proactor._ring.in_flight()


def test_readers_added_and_removed_without_a_turn_keep_no_descriptor(loop):
    """20,000 ``add_reader``/``remove_reader`` pairs on one pipe, the loop
    not run in between, under a limit of 256 descriptors: none fails (on
    io_uring each watch's duplicate of the descriptor used to stay open
    until the loop's next turn, and the pairs ran out of descriptors with
    ``EMFILE``, where asyncio's selector loop grows by none), no more
    descriptors are open after than before, and a reader added then runs
    when the pipe is readable. The pairs' polls and their answers (beyond
    the ring's completion queue, some in the kernel's overflow list) are
    all gone after a few turns that never block, as the epoll fallback's
    registrations are: they used to stay in the proactor's ``_ops`` and
    the ring (~0.9 KiB each) until a turn that blocked."""
    r, w = os.pipe2(os.O_NONBLOCK)
    loop.run_until_complete(asyncio.sleep(0))  # (the loop's own watches set up)
    held = _watches_held(loop)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = len(os.listdir("/proc/self/fd"))
    # 256, or more if this process already holds nearly that many
    limit = max(256, max(int(n) for n in os.listdir("/proc/self/fd")) + 64)
    failed = None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        try:
            for _ in range(20_000):
                loop.add_reader(r, lambda: None)
                assert loop.remove_reader(r)
        except OSError as e:
            failed = e
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert failed is None
    assert len(os.listdir("/proc/self/fd")) <= before

    async def turns():
        for _ in range(4):
            await asyncio.sleep(0)
        return _watches_held(loop)

    assert loop.run_until_complete(turns()) == held

    async def main():
        fired = loop.create_future()
        loop.add_reader(r, lambda: fired.done() or fired.set_result(os.read(r, 10)))
        os.write(w, b"ready")
        try:
            return await fired
        finally:
            loop.remove_reader(r)

    try:
        assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == b"ready"
    finally:
        os.close(r)
        os.close(w)
