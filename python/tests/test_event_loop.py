"""blockio's asyncio event loop (``blockio.new_event_loop``) on both backends:
streams over TCP and Unix sockets, wake-ups from other threads, timers,
``add_reader``, signals, subprocesses, close with operations in flight, and
fork. The ``uring`` runs check that the loop really is on io_uring, the
``epoll`` runs force the fallback with ``BLOCKIO_BACKEND=threads``."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings

import pytest

import blockio
from blockio import _blockio
from waits import DEADLINE, await_until, watched


@pytest.fixture(params=["uring", "epoll"])
def backend(request, monkeypatch):
    if request.param == "epoll":
        monkeypatch.setenv("BLOCKIO_BACKEND", "threads")
    else:
        monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    return request.param


@pytest.fixture
def loop(backend):
    lp = blockio.new_event_loop()
    assert lp.backend == backend
    yield lp
    lp.close()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def _round_trips(reader, writer, messages):
    got = []
    for m in messages:
        writer.write(m)  # buffered whole: the echo is read before draining
        got.append(await reader.readexactly(len(m)))
        await writer.drain()
    writer.write_eof()
    assert await reader.read() == b""
    writer.close()
    await writer.wait_closed()
    return got


MESSAGES = [b"x", b"hello" * 100, os.urandom(1 << 20), b"end"]


def test_tcp_echo_with_streams(loop):
    async def main():
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = await _round_trips(reader, writer, MESSAGES)
        server.close()
        await server.wait_closed()
        return got

    assert loop.run_until_complete(main()) == MESSAGES


def test_unix_echo_with_streams(loop, tmp_path):
    path = str(tmp_path / "echo.sock")

    async def main():
        server = await asyncio.start_unix_server(_echo, path)
        reader, writer = await asyncio.open_unix_connection(path)
        got = await _round_trips(reader, writer, MESSAGES)
        server.close()
        await server.wait_closed()
        return got

    assert loop.run_until_complete(main()) == MESSAGES


def test_many_clients_at_once(loop):
    async def client(port, i):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return await _round_trips(reader, writer, [b"%d" % i * 1000])

    async def main():
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        got = await asyncio.gather(*(client(port, i) for i in range(50)))
        server.close()
        await server.wait_closed()
        return got

    assert loop.run_until_complete(main()) == [[b"%d" % i * 1000] for i in range(50)]


def test_call_soon_threadsafe_wakes_a_waiting_loop(loop):
    async def main():
        fut = loop.create_future()
        started = threading.Event()

        def other():
            started.wait()
            loop.call_soon_threadsafe(fut.set_result, threading.get_ident())

        t = threading.Thread(target=other)
        t.start()
        # The loop has nothing else to do: only the wake-up can end its wait.
        loop.call_soon(started.set)
        ident = await fut
        t.join()
        return ident, t.ident

    ident, thread_ident = loop.run_until_complete(main())
    assert ident == thread_ident


def test_timers_fire_in_deadline_order(loop):
    async def main():
        fired = []
        done = loop.create_future()
        start = loop.time()
        for delay in (0.03, 0.01, 0.02):
            loop.call_later(delay, fired.append, delay)
        loop.call_at(start + 0.04, done.set_result, None)
        cancelled = loop.call_later(0.015, fired.append, "cancelled")
        cancelled.cancel()
        await done
        return fired

    assert loop.run_until_complete(main()) == [0.01, 0.02, 0.03]


def test_add_reader_is_level_triggered_and_removable(loop):
    a, b = socket.socketpair()
    a.setblocking(False)
    calls = []

    async def main():
        done = loop.create_future()

        def readable():
            calls.append(a.recv(1))  # one byte per call: the rest stays readable
            if len(calls) == 3:
                assert loop.remove_reader(a)
                done.set_result(None)

        loop.add_reader(a, readable)
        b.send(b"abcdef")
        await done
        assert not loop.remove_reader(a)

    loop.run_until_complete(main())
    assert calls == [b"a", b"b", b"c"]
    a.close()
    b.close()


def test_add_writer_fires_on_a_writable_socket(loop):
    a, b = socket.socketpair()

    async def main():
        done = loop.create_future()
        loop.add_writer(b, lambda: (loop.remove_writer(b), done.set_result("writable")))
        return await done

    assert loop.run_until_complete(main()) == "writable"
    a.close()
    b.close()


def test_add_reader_refused_for_a_transports_descriptor(loop):
    async def main():
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        with pytest.raises(RuntimeError, match="is used by transport"):
            loop.add_reader(sock.fileno(), lambda: None)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_signal_handler_runs_in_the_loop(loop):
    async def main():
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, lambda: got.set_result(threading.get_ident()))
        loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        ident = await got
        assert loop.remove_signal_handler(signal.SIGUSR1)
        return ident

    assert loop.run_until_complete(main()) == threading.get_ident()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_subprocess_pipes_and_exit_status(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; data = sys.stdin.buffer.read(); sys.stdout.buffer.write(data[::-1]); sys.exit(3)",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate(b"0123456789" * 10000)
        return out, proc.returncode

    out, code = loop.run_until_complete(main())
    assert out == (b"0123456789" * 10000)[::-1]
    assert code == 3


def test_sock_calls_and_a_cancelled_recv_loses_nothing(loop):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def main():
        recv = asyncio.ensure_future(loop.sock_recv(a, 100))
        await asyncio.sleep(0)
        recv.cancel()
        await loop.sock_sendall(b, b"after the cancel")
        # Whatever the cancelled receive took off the socket comes back here.
        got = b""
        while len(got) < len(b"after the cancel"):
            got += await loop.sock_recv(a, 100)
        return got

    assert loop.run_until_complete(main()) == b"after the cancel"
    a.close()
    b.close()


def _cancelled_after_its_bytes_came(lp, recv):
    """A receive (``recv(sock)``, a coroutine) on ``lp`` whose task is
    cancelled right after the completion resolved the receive's future,
    in the same loop turn, before the task resumed; then receives until
    every byte sent came. Returns the bytes received, in order, and
    whether the cancel did land between the completion and the resume."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    landed = []

    async def main():
        async def receive():
            # This turn arms the receive (nothing is queued, so it waits);
            # send_first runs in the next and queues cancel_if_resolved,
            # which runs in the one after, behind the bytes' arrival:
            # after that turn's wait reaped the completion and before the
            # task's wake-up, which the completion queued behind it.
            lp.call_soon(send_first)
            return await recv(a)

        def send_first():
            b.send(b"first")
            lp.call_soon(cancel_if_resolved)

        def cancel_if_resolved():
            waiter = task._fut_waiter
            if waiter is not None and waiter.done():
                landed.append(task.cancel())

        task = lp.create_task(receive())
        try:
            got = await task
        except asyncio.CancelledError:
            got = b""
        b.send(b" second")
        try:
            while len(got) < len(b"first second"):
                got += await asyncio.wait_for(recv(a), DEADLINE)
        except asyncio.TimeoutError:
            pass  # bytes were lost: the caller's comparison shows which
        return got

    try:
        return lp.run_until_complete(main()), landed == [True]
    finally:
        a.close()
        b.close()


async def _sock_recv_into(sock):
    buf = bytearray(100)
    n = await asyncio.get_running_loop().sock_recv_into(sock, buf)
    return bytes(buf[:n])


@pytest.mark.parametrize("call", ["sock_recv", "sock_recv_into"])
def test_a_receive_cancelled_after_its_bytes_came_hands_them_to_the_next(loop, call):
    """The bytes of a ``sock_recv`` (``sock_recv_into``) whose task was
    cancelled after the completion resolved its future go to the next
    receive, as on asyncio's loop, where nothing is lost either."""

    def recv(sock):
        if call == "sock_recv":
            return asyncio.get_running_loop().sock_recv(sock, 100)
        return _sock_recv_into(sock)

    reference = asyncio.new_event_loop()
    try:
        expected, _ = _cancelled_after_its_bytes_came(reference, recv)
    finally:
        reference.close()
    got, landed = _cancelled_after_its_bytes_came(loop, recv)
    assert expected == b"first second"
    assert got == expected
    # On io_uring the completion resolves the receive's future in the wait,
    # so the cancel comes between it and the resume (on epoll, as on
    # asyncio's loop, the bytes are received in the readiness callback,
    # which runs after the cancel's check).
    assert landed == (loop.backend == "uring")


def _datagrams_received(lp, kind):
    """The size and last byte of the datagrams (``SOCK_DGRAM``, or
    ``SOCK_SEQPACKET`` messages) that ``sock_recv(s, 4096)`` on ``lp``
    returns for a message
    of 3000 bytes, then one of 5, then one of 3000 read with ``sock_recv(s,
    2048)`` (cut there: the rest is dropped), then one of 5; and the sizes
    a connected datagram endpoint's protocol gets for 3000 bytes then 5."""
    if kind == socket.SOCK_DGRAM:
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        r.bind(("127.0.0.1", 0))
        w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        w.connect(r.getsockname())
    else:
        r, w = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r.setblocking(False)

    async def main():
        for m in (b"a" * 2999 + b"z", b"HELLO", b"b" * 3000, b"WORLD"):
            w.send(m)
        got = []
        for n in (4096, 4096, 2048, 4096):
            try:
                d = await asyncio.wait_for(lp.sock_recv(r, n), DEADLINE)
            except asyncio.TimeoutError:
                got.append("none came")  # merged into an earlier one
                break
            got.append((len(d), d[-1:]))
        if kind != socket.SOCK_DGRAM:
            return got
        sizes = []

        class Protocol(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                sizes.append(len(data))

        t, _ = await lp.create_datagram_endpoint(Protocol, remote_addr=w.getsockname())
        w.sendto(b"c" * 3000, t.get_extra_info("sockname"))
        w.sendto(b"WORLD", t.get_extra_info("sockname"))
        await await_until(lambda: len(sizes) >= 2, "two datagrams")
        t.close()
        return got, sizes

    try:
        return lp.run_until_complete(main())
    finally:
        r.close()
        w.close()


@pytest.mark.parametrize("kind", ["SOCK_DGRAM", "SOCK_SEQPACKET"])
def test_a_datagram_larger_than_a_receive_s_first_buffer_is_received_whole_and_alone(loop, kind):
    """A datagram (or ``SOCK_SEQPACKET`` message) comes whole in one
    receive, and the next comes in the next, as on asyncio's loop: beyond
    a stream socket's first buffer there is no "rest" to take, the kernel
    dropped what did not fit."""
    reference = asyncio.new_event_loop()
    try:
        expected = _datagrams_received(reference, getattr(socket, kind))
    finally:
        reference.close()
    got = _datagrams_received(loop, getattr(socket, kind))
    sock_recvs = [(3000, b"z"), (5, b"O"), (2048, b"b"), (5, b"D")]
    assert expected == (sock_recvs if kind == "SOCK_SEQPACKET" else (sock_recvs, [3000, 5]))
    assert got == expected


def receiving(loop, socks, n):
    """Whether ``n`` receives on ``socks`` wait: in the ring on io_uring,
    in the loop's epoll set on the fallback."""
    if loop.backend == "uring":
        return loop._proactor._ring.in_flight() >= n
    return watched(*(s.fileno() for s in socks))


def test_close_with_operations_in_flight(loop):
    socks = [socket.socketpair() for _ in range(40)]
    for a, _ in socks:
        a.setblocking(False)
    bufs = [bytearray(4096) for _ in socks[20:]]

    async def main():
        # (one receive per socket: a second would wait for its turn)
        tasks = [asyncio.ensure_future(loop.sock_recv(a, 4096)) for a, _ in socks[:20]]
        tasks += [asyncio.ensure_future(loop.sock_recv_into(a, buf)) for (a, _), buf in zip(socks[20:], bufs)]
        await await_until(lambda: receiving(loop, [a for a, _ in socks], len(tasks)),
                          "every receive is in flight")
        return tasks

    tasks = loop.run_until_complete(main())
    assert not any(t.done() for t in tasks)
    if loop.backend == "uring":
        assert loop._proactor._ring.in_flight() >= len(tasks)
    for t in tasks:
        t.cancel()
    loop.close()
    if loop.backend == "uring":
        assert loop._proactor is None
    # The buffers the kernel held are the caller's again (resizable).
    for buf in bufs:
        buf.extend(b"x")
    for a, b in socks:
        a.close()
        b.close()


def test_a_ring_refuses_use_after_close():
    ring = _blockio.LoopRing()
    ring.close()
    with pytest.raises(RuntimeError, match="closed"):
        ring.poll(0, 1)
    ring.close()  # idempotent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_gets_its_own_loop(loop):
    """The child refuses the parent's ring and runs a loop of its own; the
    parent's operation in flight is untouched by the child."""
    a, b = socket.socketpair()
    a.setblocking(False)
    r, w = os.pipe()

    async def parent_recv():
        return await loop.sock_recv(a, 100)

    task = loop.create_task(parent_recv())
    loop.run_until_complete(await_until(lambda: receiving(loop, [a], 1), "the parent's receive waits"))
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            if loop.backend == "uring":
                try:
                    loop._proactor._ring.poll(a.fileno(), 1)
                except RuntimeError as e:
                    assert "parent process" in str(e)
                else:
                    raise AssertionError("the parent's ring was usable in the child")
            child = blockio.new_event_loop()
            assert child.run_until_complete(asyncio.sleep(0, result=7)) == 7
            child.close()
            os.write(w, b"ok")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.read(r, 10) == b"ok"
    b.send(b"to the parent")
    assert loop.run_until_complete(task) == b"to the parent"
    for f in (a, b):
        f.close()
    os.close(r)
    os.close(w)


def test_a_loops_ring_is_refused_in_a_child_made_without_fork_handlers():
    """glibc's _Fork() runs no fork handlers (``os.register_at_fork``'s
    included): the ring still tells the child from its maker (by the word
    the kernel wipes in a child), and the parent's ring stays its own."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ring = _blockio.LoopRing()
    a, b = socket.socketpair()
    pid = libc._Fork()
    if pid == 0:
        code = 1
        try:
            try:
                ring.poll(a.fileno(), 1)
            except RuntimeError as e:
                code = 0 if "parent process" in str(e) else 2
        finally:
            os._exit(code)
    assert pid > 0, ctypes.get_errno()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ring.in_flight() == 0
    ring.close()
    a.close()
    b.close()


_CHILD_EXITS = r"""
import asyncio, ctypes, os, sys, tempfile
import blockio

libc = ctypes.CDLL(None)
fd0, path = tempfile.mkstemp()
os.write(fd0, b"k" * 4096)
os.close(fd0)
loop = blockio.new_event_loop()


async def read_all():
    async with blockio.open(path, "rb") as f:
        return await f.read()


assert loop.run_until_complete(read_all()) == b"k" * 4096
pid = os.fork() if sys.argv[1] == "fork" else libc._Fork()
if pid == 0:
    # The default engine and the loop are the parent's: blockio.open makes
    # the child an engine of its own, and the exit lets go of the loop.
    assert asyncio.run(read_all()) == b"k" * 4096
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
assert loop.run_until_complete(read_all()) == b"k" * 4096
loop.close()
os.unlink(path)
"""


@pytest.mark.parametrize("make", ["fork", "_Fork"])
def test_a_child_that_exits_with_an_inherited_loop_says_nothing_and_opens_files_of_its_own(make, tmp_path):
    """A child (made by os.fork() or by glibc's _Fork(), which runs no fork
    handlers) of a process with a blockio loop and a default engine in use:
    ``blockio.open`` works there on an engine of its own, and its normal
    exit, which lets go of the inherited loop, prints nothing (the loop's
    cancels leave the parent's ring alone); the parent goes on with both."""
    script = tmp_path / "child_exits.py"
    script.write_text(_CHILD_EXITS)
    run = subprocess.run([sys.executable, str(script), make], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_run_and_loop_factory_and_install(backend):
    async def which():
        return asyncio.get_running_loop().backend

    assert blockio.run(which()) == backend
    if sys.version_info >= (3, 12):
        assert asyncio.run(which(), loop_factory=blockio.new_event_loop) == backend
    old = asyncio.get_event_loop_policy()
    try:
        blockio.install()
        assert asyncio.run(which()) == backend
    finally:
        asyncio.set_event_loop_policy(old)


def test_bad_backend_variable_is_named(monkeypatch):
    monkeypatch.setenv("BLOCKIO_BACKEND", "bogus")
    with pytest.raises(ValueError, match="BLOCKIO_BACKEND='bogus'"):
        blockio.new_event_loop()


def test_a_ring_dropped_with_a_receive_in_flight_releases_its_buffer_after_the_kernel():
    a, b = socket.socketpair()
    buf = bytearray(100)
    ring = _blockio.LoopRing()
    ring.recv_into(a.fileno(), buf, 0, True)
    assert ring.wait(0) == []  # submitted, nothing to receive yet
    assert ring.in_flight() == 1
    with pytest.raises(BufferError):
        buf.extend(b"x")  # exported to the kernel's operation
    del ring
    gc.collect()
    buf.extend(b"x")  # released: the operation was cancelled and answered
    b.send(b"still there")
    assert a.recv(100) == b"still there"  # the cancelled receive took nothing
    a.close()
    b.close()


def reap(ring, n=1):
    """The next ``n`` completions on ``ring`` (a ``LoopRing``); fails the
    test if they have not all come within ``DEADLINE``."""
    deadline = time.monotonic() + DEADLINE
    got = []
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"not within {DEADLINE} s: {n} completions, {len(got)} came"
        got += ring.wait(left)
    return got


def test_a_socket_receive_takes_a_small_message_or_up_to_256_kib_and_a_cancelled_one_nothing():
    """A socket receive into new bytes lends the kernel a small first
    buffer; when that fills, the rest of what the socket holds is taken at
    once (at most 256 KiB in all). One cancelled while it waits takes
    nothing."""
    a, b = socket.socketpair()
    ring = _blockio.LoopRing()
    token = ring.recv(a.fileno(), 1 << 20, True, True)
    assert ring.wait(0) == []  # waiting, nothing to receive yet
    b.send(b"hi")
    assert reap(ring) == [(token, 2, b"hi")]
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    b.setblocking(False)
    data = os.urandom(300 << 10)
    sent = b.send(data)
    assert sent > 256 << 10
    token = ring.recv(a.fileno(), 1 << 20, True, True)
    assert reap(ring) == [(token, 256 << 10, data[: 256 << 10])]
    assert a.recv(1 << 20) == data[256 << 10 : sent]
    token = ring.recv(a.fileno(), 100, True, True)
    assert ring.wait(0) == []
    assert ring.cancel(token)
    assert reap(ring) == [(token, -errno.ECANCELED, None)]
    b.send(b"kept")
    assert a.recv(100) == b"kept"
    ring.close()
    a.close()
    b.close()


def test_a_finished_operation_s_token_is_never_given_again_nor_answers_a_cancel():
    """The ring's tokens: each operation its own, even where it takes the
    place a finished one left (the ring reuses it); the token of one that
    finished cancels nothing, not even the operation now in its place."""
    pairs = [socket.socketpair() for _ in range(3)]
    ring = _blockio.LoopRing()
    waiting = [ring.recv(a.fileno(), 100, True, True) for a, _ in pairs]
    assert ring.in_flight() == 3
    seen = set(waiting)
    assert len(seen) == 3 and 0 not in seen
    for i in range(20):
        a, b = pairs[i % 3]
        b.send(b"m%d" % i)
        assert reap(ring) == [(waiting[i % 3], len(b"m%d" % i), b"m%d" % i)]
        done = waiting[i % 3]
        assert not ring.cancel(done)  # finished: nothing to cancel
        token = ring.recv(a.fileno(), 100, True, True)
        assert token not in seen
        seen.add(token)
        waiting[i % 3] = token
        assert not ring.cancel(done)  # nor the receive in the place it left
        assert ring.in_flight() == 3
    for token in waiting:
        assert ring.cancel(token)
    answered = reap(ring, 3)
    assert sorted(answered) == sorted((t, -errno.ECANCELED, None) for t in waiting)
    assert ring.in_flight() == 0
    ring.close()
    for a, b in pairs:
        a.close()
        b.close()


_SIGINT_WHILE_WAITING = """

import asyncio, os, platform, signal, sys, threading, time, blockio
# Python leaves SIGINT ignored when it starts with it ignored (a job started
# in the background by a shell without job control): Ctrl-C's handler here.
signal.signal(signal.SIGINT, signal.default_int_handler)
other_thread = sys.argv[1] == "other-thread"
if other_thread:  # the loop's thread blocks SIGINT: it lands on the other one
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
loop = blockio.new_event_loop()
waiting = threading.Event()
LOOP_THREAD = threading.get_native_id()
# io_uring_enter, and the epoll waits
WAITS = {"x86_64": {426, 232, 281, 441}, "aarch64": {426, 22, 441}}[platform.machine()]
def in_the_wait():
    # (polled: the loop's thread blocked in the kernel's wait)
    while True:
        with open(f"/proc/self/task/{LOOP_THREAD}/syscall") as f:
            fields = f.read().split()
        if fields and fields[0] != "running" and int(fields[0]) in WAITS:
            return
        time.sleep(0.001)
def interrupt():
    if other_thread:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    waiting.wait()
    in_the_wait()
    os.kill(os.getpid(), signal.SIGINT)
t = threading.Thread(target=interrupt)
t.start()
async def forever():
    loop.call_soon(waiting.set)
    await loop.create_future()
try:
    loop.run_until_complete(forever())
except KeyboardInterrupt:
    print("KeyboardInterrupt")
t.join()
print(loop.run_until_complete(asyncio.sleep(0, result="usable")))
# Woken still, from another thread and by a signal: the wait's wake-up
# socket kept its receive through the interrupted wait.
woken = loop.create_future()
def wake():
    in_the_wait()
    loop.call_soon_threadsafe(woken.set_result, "woken")
threading.Thread(target=wake).start()
print(loop.run_until_complete(asyncio.wait_for(woken, 30)))
handled = loop.create_future()
loop.add_signal_handler(signal.SIGTERM, handled.set_result, "handled")
def term():
    in_the_wait()
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=term).start()
print(loop.run_until_complete(asyncio.wait_for(handled, 30)))
"""


def _interrupted_while_waiting(backend_env, where):
    """Runs ``_SIGINT_WHILE_WAITING`` in a fresh process on ``backend_env``,
    the signal landing on the loop's thread or (``"other-thread"``) not;
    a hang fails at the 120 s bound."""
    import subprocess

    env = dict(os.environ, BLOCKIO_BACKEND=backend_env)
    return subprocess.run([sys.executable, "-c", _SIGINT_WHILE_WAITING, where], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("backend_env", ["uring", "threads"])
def test_ctrl_c_while_waiting_raises_keyboard_interrupt(backend_env):
    """SIGINT from another thread while the loop waits with nothing to do
    ends run_until_complete with KeyboardInterrupt; the loop stays usable,
    and a thread's ``call_soon_threadsafe`` and a signal handler still
    wake it.
    In a fresh process: the signal's wake-up goes through Python's wake-up
    descriptor, process-wide state that earlier tests of this process may
    have left set."""
    out = _interrupted_while_waiting(backend_env, "loop-thread")
    assert out.stdout.split() == ["KeyboardInterrupt", "usable", "woken", "handled"], out.stderr


def test_a_running_loop_holds_the_wakeup_fd_on_the_main_thread(loop):
    """While it runs on the main thread, each backend's loop holds Python's
    wake-up descriptor (a signal whose handler has not run yet when the loop
    enters the kernel then ends the wait), and gives it back afterwards."""
    held = []

    async def look():
        fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(fd)
        held.append(fd)

    assert signal.set_wakeup_fd(-1) == -1
    loop.run_until_complete(look())
    assert held[0] == loop._csock.fileno()
    assert signal.set_wakeup_fd(-1) == -1


def _close_other_loops_meanwhile():
    """What a program may do while a loop runs: another loop made and
    closed, another collected unclosed, another given a signal handler and
    closed. (BaseProactorEventLoop.close and asyncio's removal of a loop's
    last signal handler each cleared Python's wake-up descriptor, whoever
    held it.)"""
    other = blockio.new_event_loop()
    other.close()
    unclosed = blockio.new_event_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del unclosed
        gc.collect()
    handled = blockio.new_event_loop()
    handled.add_signal_handler(signal.SIGUSR1, lambda: None)
    handled.close()


def test_ctrl_c_on_another_thread_ends_the_wait_after_other_loops_closed_meanwhile(loop):
    """In this process, with SIGINT blocked on the loop's thread so that it
    lands on another: while the loop runs, other loops are made and closed
    (or collected); SIGINT then still ends the wait with KeyboardInterrupt,
    the running loop keeping Python's wake-up descriptor. A wait that does
    not end within the deadline is woken from the signalling thread, and
    the test fails instead of hanging."""
    waiting = threading.Event()
    finished = threading.Event()
    rescued = []

    def interrupt():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        waiting.wait()
        os.kill(os.getpid(), signal.SIGINT)
        if not finished.wait(DEADLINE):
            rescued.append("the wait did not end")
            loop.call_soon_threadsafe(loop.stop)  # (fails the test, never hangs it)

    async def forever():
        _close_other_loops_meanwhile()
        loop.call_soon(waiting.set)
        await loop.create_future()

    # (Ctrl-C's handler, which a process started with SIGINT ignored lacks:
    # without it the signal is dropped and the loop waits for ever)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    t = threading.Thread(target=interrupt)
    try:
        t.start()
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(forever())
    finally:
        finished.set()
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        signal.signal(signal.SIGINT, old_handler)
        t.join()
    assert rescued == []
    assert loop.run_until_complete(asyncio.sleep(0, result="usable")) == "usable"
    assert signal.set_wakeup_fd(-1) == -1  # given back after the run


def test_a_loop_runs_holding_the_wakeup_fd_of_a_loop_with_signal_handlers_and_gives_it_back(loop):
    """Another loop, not running, has a signal handler (and so Python's
    wake-up descriptor). While this one runs it holds the descriptor (a
    Ctrl-C landing on another thread must end its wait), hands the other
    loop the signal that loop has a handler for, and gives the descriptor
    back after the run."""
    standby = blockio.new_event_loop()
    got = []
    standby.add_signal_handler(signal.SIGUSR1, got.append, "usr1")
    theirs = standby._csock.fileno()
    held = []

    async def signalled():
        fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(fd)
        held.append(fd)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
        await await_until(lambda: standby._ready, "the signal handed to the loop with its handler")

    try:
        loop.run_until_complete(signalled())
        after = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(after)
        standby.run_until_complete(asyncio.sleep(0))
    finally:
        standby.close()
    assert held == [loop._csock.fileno()]
    assert after == theirs
    assert got == ["usr1"]
    assert signal.set_wakeup_fd(-1) == -1  # the closed loop's cleared


@pytest.mark.parametrize("backend_env", ["uring", "threads"])
def test_ctrl_c_landing_on_another_thread_ends_the_wait(backend_env):
    """SIGINT handled by a thread other than the loop's (the loop's thread
    blocks it) still ends the loop's wait, on io_uring and on the epoll
    fallback: the handler writes to Python's wake-up descriptor, which the
    loop holds while it runs, and the wake-up socket becomes readable."""
    out = _interrupted_while_waiting(backend_env, "other-thread")
    assert out.stdout.split() == ["KeyboardInterrupt", "usable", "woken", "handled"], out.stderr


def test_udp_echo(loop):
    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport):
            self.transport = transport

        def datagram_received(self, data, addr):
            self.transport.sendto(data.upper(), addr)

    class Client(asyncio.DatagramProtocol):
        def __init__(self):
            self.got = loop.create_future()

        def datagram_received(self, data, addr):
            if not self.got.done():
                self.got.set_result(data)

    async def main():
        server, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        addr = server.get_extra_info("sockname")
        client, proto = await loop.create_datagram_endpoint(Client, remote_addr=addr)
        client.sendto(b"ping")
        got = await proto.got
        client.close()
        server.close()
        return got

    assert loop.run_until_complete(main()) == b"PING"


def test_a_write_from_resume_writing_after_close_goes_out(loop):
    """What a protocol writes when told to resume writing after ``close()``
    still reaches the peer, before the end, as on asyncio's selector loop
    (``SSLProtocol`` writes its ``close_notify`` there when its shutdown came
    while the transport was backed up)."""
    big = os.urandom(8 << 20)

    class Backlogged(asyncio.Protocol):
        paused = False

        def connection_made(self, transport):
            self.transport = transport
            self.lost = loop.create_future()

        def pause_writing(self):
            self.paused = True

        def resume_writing(self):
            self.transport.write(b"tail")

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        a, b = socket.socketpair()
        b.setblocking(False)
        transport, proto = await loop.create_connection(Backlogged, sock=a)
        transport.write(big)
        assert proto.paused and transport.get_write_buffer_size() > 0
        transport.close()
        received = bytearray()
        while chunk := await loop.sock_recv(b, 1 << 20):
            received += chunk
        b.close()
        return bytes(received), await proto.lost

    received, exc = loop.run_until_complete(main())
    assert exc is None
    assert len(received) == len(big) + 4 and received == big + b"tail"


def _tls_contexts():
    """A server context with CPython's test certificate and a client context
    that does not verify it."""
    import ssl

    from test.test_asyncio import utils as test_utils

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(test_utils.ONLYCERT, test_utils.ONLYKEY)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    return server_ctx, client_ctx


async def _tls_peer_shutting_down_first(loop, sock, server_ctx, started_backlog):
    """The TLS peer, on MemoryBIOs over a plain socket: it answers ``ping``
    with ``pong``, sends close_notify once the other side has a backlog, then
    reads everything until the other side's close_notify; returns the number
    of bytes read."""
    import ssl

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = server_ctx.wrap_bio(incoming, outgoing, server_side=True)

    async def flush():
        if outgoing.pending:
            await loop.sock_sendall(sock, outgoing.read())

    async def feed():
        data = await loop.sock_recv(sock, 65536)
        assert data, "the connection ended before close_notify"
        incoming.write(data)

    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            await flush()
            await feed()
    await flush()
    while True:
        try:
            assert tls.read(4) == b"ping"
            break
        except ssl.SSLWantReadError:
            await feed()
    tls.write(b"pong")
    await flush()
    await started_backlog
    with pytest.raises(ssl.SSLWantReadError):
        tls.unwrap()  # close_notify sent, the peer's not yet received
    await flush()
    got = 0
    while True:
        try:
            got += len(tls.read(65536))
        except ssl.SSLWantReadError:
            await feed()
        except ssl.SSLZeroReturnError:
            break
    tls.unwrap()  # the close_notify came
    sock.close()
    return got


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio's SSLProtocol before 3.11 has no write backlog to fill")
def test_tls_close_notify_follows_a_backlog_when_the_peer_shuts_down_first(loop):
    """The peer sends ``close_notify`` while our side has a write backlog
    larger than the transport's buffer: the backlog and then our
    ``close_notify`` reach the peer (CPython's
    ``test_remote_shutdown_receives_trailing_data``, with the peer on the
    same loop)."""
    server_ctx, client_ctx = _tls_contexts()
    backlog = 4 << 20

    async def client(port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="")
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"pong"
        # A backlog larger than the transport's buffer, unwritten when the
        # close_notify arrives.
        writer.transport._test__append_write_backlog(b"x" * backlog)
        started_backlog.set_result(None)
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()

    async def main():
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        port = listener.getsockname()[1]
        accepting = loop.create_task(loop.sock_accept(listener))
        client_done = loop.create_task(client(port))
        conn, _ = await accepting
        listener.close()
        conn.setblocking(False)
        got = await asyncio.wait_for(_tls_peer_shutting_down_first(loop, conn, server_ctx, started_backlog), 60)
        await client_done
        return got

    started_backlog = loop.create_future()
    assert loop.run_until_complete(main()) == backlog


def test_read_pipe_transport_ends_at_end_of_file(loop):
    """At the end of a pipe the read transport closes and reports
    ``connection_lost`` although ``StreamReaderProtocol.eof_received`` asks
    to stay open, as asyncio's Unix pipe transport does (else it is left
    unclosed, and warned about when collected)."""

    class Reader(asyncio.StreamReaderProtocol):
        def connection_lost(self, exc):
            super().connection_lost(exc)
            lost.set_result(exc)

    async def main():
        r, w = os.pipe()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(lambda: Reader(reader), open(r, "rb", 0))
        os.write(w, b"data")
        os.close(w)
        assert await reader.read() == b"data"
        exc = await asyncio.wait_for(lost, 60)
        return exc, transport.is_closing()

    lost = loop.create_future()
    assert loop.run_until_complete(main()) == (None, True)


_IDLE_CONNECTIONS = """
import asyncio, resource, socket, sys, blockio

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
loop = blockio.new_event_loop()
made = []
enough = loop.create_future()
want = 0

class Idle(asyncio.Protocol):
    def connection_made(self, transport):
        made.append(transport)
        if len(made) == want and not enough.done():
            enough.set_result(None)

async def connect(port, n):
    global enough, want
    enough, want = loop.create_future(), len(made) + n
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        await loop.sock_connect(s, ("127.0.0.1", port))
        socks.append(s)
    await enough  # woken after each transport's first receive was submitted
    return socks

async def main(n):
    server = await loop.create_server(Idle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    warm = await connect(port, 200)
    before = rss()
    idle = await connect(port, n)
    per = (rss() - before) // n
    assert loop.backend == "epoll" or all(t._read_fut is not None for t in made)
    for s in warm + idle:
        s.close()
    server.close()
    return per

print(loop.run_until_complete(main(int(sys.argv[1]))))
loop.close()
"""


@pytest.mark.parametrize("backend_env", ["uring", "threads"])
def test_an_idle_connection_pins_no_receive_buffer(backend_env):
    """2,000 idle connections, each with its receive waiting, cost each a
    few KiB of the server's memory (its socket, transport and protocol
    objects, and the client's socket in the same process), not the 64 KiB
    receive buffer per connection that asyncio's proactor transports keep.
    In a fresh process, so that memory freed by earlier tests does not
    hide the growth."""
    import subprocess

    env = dict(os.environ, BLOCKIO_BACKEND=backend_env)
    out = subprocess.run([sys.executable, "-c", _IDLE_CONNECTIONS, "2000"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    per_connection = int(out.stdout)
    assert per_connection < 24 * 1024, f"{per_connection} bytes of RSS per idle connection"
