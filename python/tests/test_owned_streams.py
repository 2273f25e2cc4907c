"""Reads of a stream by a ``blockio.open`` file (one that owns the
descriptor, ``closefd=True``, or not), which wait for bytes in the event
loop's poll, with no thread and no duplicate descriptor: nothing read is
lost or held back when a read is cancelled, whatever the stream (a pipe,
a FIFO opened by path, a terminal, a datagram socket, whose messages stay
apart); an error is never dropped, nor raised before the bytes that came
ahead of it; the descriptor is left as it was found (blocking), and a
read through another file or number of it meanwhile waits; ``close``
ends a wait however the bytes went, leaving a descriptor the caller owns
open and unread, and one that was cancelled leaves the file as it was.
On both backends, under asyncio, uvloop and trio where the loop matters.

Every call that must return is bounded by a guard far beyond any run that
works; the events a test needs are waited for, never slept for."""

import asyncio
import errno
import gc
import io
import os
import socket
import struct
import tty

import uvloop

import anyio
import anyio.lowlevel
import pytest

import blockio
import blockio._file
from blockio._aio import Stops, wait_readable
from loops import abandon
from waits import await_until, blocked_in, wait_until, waits_for_bytes, watched

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
RUNNERS = pytest.mark.parametrize("runner", ["asyncio", "uvloop", "trio"])
GUARD = 30  # seconds: far beyond any run that works


def run_on(runner, fn, *args):
    if runner == "trio":
        return anyio.run(fn, *args, backend="trio")
    return anyio.run(fn, *args, backend="asyncio", backend_options={"use_uvloop": runner == "uvloop"})


def until(cond, what):
    return await_until(cond, what, sleep=anyio.sleep)


def fifo_by_path(tmp_path):
    """A FIFO opened by path (its descriptors refuse reads that never
    wait): a blocking read end and a write end."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(path, os.O_WRONLY)
    os.set_blocking(r, True)
    return r, w


def terminal():
    """A pseudo-terminal in raw mode: its reading end (the slave, which
    refuses reads that never wait) and the master, which writes to it."""
    master, slave = os.openpty()
    tty.setraw(slave)
    return slave, master


STREAMS = {"fifo": fifo_by_path, "terminal": lambda tmp_path: terminal()}


async def cancelled_read(f, size, cancel_when):
    """Starts ``f.read(size)``, awaits ``cancel_when()``, cancels the read
    and waits for it to end: what it returned, if it did (b"" if it was
    cancelled)."""
    got = []
    ended = anyio.Event()
    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        async def reader():
            try:
                with scope:
                    got.append(await f.read(size))
            finally:
                ended.set()

        tg.start_soon(reader)
        await cancel_when()
        scope.cancel()
        with anyio.fail_after(GUARD):
            await ended.wait()
    return b"".join(got)


@RUNNERS
@BACKENDS
@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_a_read_cancelled_at_any_point_after_its_bytes_came_loses_none(tmp_path, runner, backend, kind):
    """A FIFO opened by path and a terminal refuse reads that never wait.
    A read waits for bytes; they come; the read is cancelled after 0 to 7
    turns of the loop (so at every point between the readiness and the
    read's return: a read in the kernel or the engine included). What the
    cancelled read returned and the next reads return, with no byte
    written meanwhile, are each time exactly the bytes written."""
    r, w = STREAMS[kind](tmp_path)

    async def main():
        with blockio.Engine(backend=backend) as e:
            async with await blockio.open(r, "rb", buffering=0, engine=e) as f:
                for k in range(8):
                    msg = b"ping %d\n" % k

                    async def after_k_turns():
                        await until(lambda: watched(r), "the read waits for the stream")
                        os.write(w, msg)
                        for _ in range(k):
                            await anyio.lowlevel.checkpoint()

                    got = await cancelled_read(f, 100, after_k_turns)
                    with anyio.fail_after(GUARD):
                        while len(got) < len(msg):
                            got += await f.read(100)
                    assert got == msg, k

    try:
        run_on(runner, main)
    finally:
        os.close(w)


@RUNNERS
@BACKENDS
def test_bytes_kept_from_a_cancelled_engine_read_come_in_the_next_read_and_stop_detach(runner, backend):
    """A terminal is read through the engine once readable; its read
    cancelled once the engine's read is under way keeps what that read
    got. With nothing more written, the file's next read returns those
    bytes (it must not wait in the poll for more), and ``detach`` before
    it refuses, naming the bytes it would lose."""
    r, w = terminal()

    async def main():
        with blockio.Engine(backend=backend) as e:
            f = await blockio.open(r, "rb", buffering=0, engine=e)
            entered = anyio.Event()
            orig = e._read_kept

            async def spy(*args):
                entered.set()
                return await orig(*args)

            e._read_kept = spy

            async def engine_read_started():
                await until(lambda: watched(r), "the read waits for the terminal")
                os.write(w, b"ping\n")
                with anyio.fail_after(GUARD):
                    await entered.wait()

            got = await cancelled_read(f, 100, engine_read_started)
            assert got == b""  # (cancelled: its bytes are kept)
            with pytest.raises(ValueError, match="5 bytes"):
                f.detach()
            with anyio.fail_after(GUARD):
                assert await f.read(100) == b"ping\n"
            raw = f.detach()
            assert isinstance(raw, io.FileIO) and raw.fileno() == r
            raw.close()

    try:
        run_on(runner, main)
    finally:
        os.close(w)


@RUNNERS
@BACKENDS
def test_close_ends_a_fifo_read_whose_bytes_another_reader_took(tmp_path, runner, backend):
    """A FIFO opened by path with a second reader: the file's read sees
    the FIFO readable, but the other reader takes the byte first. The
    read waits again (nothing in the kernel), so ``close`` ends it at
    once, with no writer: the read raises ``OSError(ECANCELED)``."""
    r, w = fifo_by_path(tmp_path)
    other = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    real = blockio._file.wait_readable
    taken = []

    async def other_reader_first(fd, stops):
        waited = await real(fd, stops)
        if not taken:
            taken.append(os.read(other, 100))
        return waited

    async def main():
        with blockio.Engine(backend=backend) as e:
            f = await blockio.open(r, "rb", buffering=0, engine=e)
            out = []
            async with anyio.create_task_group() as tg:
                async def reader():
                    try:
                        out.append(await f.read(100))
                    except OSError as err:
                        out.append(err.errno)

                tg.start_soon(reader)
                await until(lambda: watched(r), "the read waits for the FIFO")
                os.write(w, b"x")
                await until(lambda: taken and watched(r), "the other reader took the byte, the read waits again")
                with anyio.fail_after(GUARD):
                    await f.close()
            assert out == [errno.ECANCELED] and taken == [b"x"]

    blockio._file.wait_readable = other_reader_first
    try:
        run_on(runner, main)
    finally:
        blockio._file.wait_readable = real
        os.close(w)
        os.close(other)


@RUNNERS
@BACKENDS
@pytest.mark.parametrize("kind", ["SOCK_DGRAM", "SOCK_SEQPACKET"])
def test_datagrams_are_read_whole_and_one_at_a_time(runner, backend, kind):
    """A 100,000-byte datagram then a 10-byte one: ``read(200000)``
    returns the first whole and the second alone, as ``FileIO.read``
    does (a first read of less would cut the datagram, a second would
    join the next one to it)."""

    def pair():
        a, b = socket.socketpair(socket.AF_UNIX, getattr(socket, kind))
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        b.send(b"A" * 100000)
        b.send(b"B" * 10)
        return a, b

    a, b = pair()
    with io.FileIO(a.detach(), "rb") as raw:
        want = [raw.read(200000), raw.read(200000)]
    b.close()
    assert want == [b"A" * 100000, b"B" * 10]
    a, b = pair()

    async def main():
        with blockio.Engine(backend=backend) as e:
            async with await blockio.open(a.detach(), "rb", buffering=0, engine=e) as f:
                with anyio.fail_after(GUARD):
                    return [await f.read(200000), await f.read(200000)]

    try:
        assert run_on(runner, main) == want
    finally:
        b.close()


def reset_connection():
    """A TCP connection whose peer sent 65,536 bytes, then reset it
    (``SO_LINGER`` 0), both already arrived: the receiving socket."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname())
    s, _ = srv.accept()
    srv.close()
    c.sendall(b"z" * 65536)
    wait_until(lambda: len(s.recv(1 << 17, socket.MSG_PEEK | socket.MSG_DONTWAIT)) == 65536, "the bytes arrive")
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
    tcp_close = 7  # (tcpi_state, the first byte of TCP_INFO)
    wait_until(lambda: s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == tcp_close, "the reset arrives")
    return s


@BACKENDS
def test_an_error_after_the_bytes_of_a_read_comes_with_the_next_read(backend):
    """The peer sent 65,536 bytes and reset the connection: the first
    ``read(200000)`` returns the bytes, the next raises
    ``ConnectionResetError``, as with ``FileIO`` (the kernel reports a
    reset once: dropped, the next read would return b"", a clean end)."""

    def outcomes(read):
        out = []
        for _ in range(2):
            try:
                out.append(len(read()))
            except OSError as err:
                out.append(type(err).__name__)
        return out

    with io.FileIO(reset_connection().detach(), "rb") as raw:
        want = outcomes(lambda: raw.read(200000))
    assert want == [65536, "ConnectionResetError"]

    async def main():
        with blockio.Engine(backend=backend) as e:
            async with await blockio.open(reset_connection().detach(), "rb", buffering=0, engine=e) as f:
                out = []
                for _ in range(2):
                    try:
                        with anyio.fail_after(GUARD):
                            out.append(len(await f.read(200000)))
                    except OSError as err:
                        out.append(type(err).__name__)
                return out

    assert run_on("asyncio", main) == want


@pytest.mark.parametrize("runner", ["asyncio", "uvloop"])
@BACKENDS
def test_a_cancelled_wait_leaves_the_descriptor_blocking(runner, backend):
    """uvloop's reader makes a descriptor non-blocking while it watches
    it: a read of an owned pipe, and an ``Engine.aread`` of the caller's
    pipe, each cancelled while it waits, leave the descriptor blocking,
    so the next read waits for bytes (not ``BlockingIOError``) and
    ``detach`` hands back a blocking ``FileIO``."""
    r, w = os.pipe()
    r2, w2 = os.pipe()

    async def main():
        with blockio.Engine(backend=backend) as e:
            f = await blockio.open(r, "rb", buffering=0, engine=e)

            async def waits(fd):
                await until(lambda: watched(fd), "the read waits for the pipe")

            assert await cancelled_read(f, 100, lambda: waits(r)) == b""
            assert os.get_blocking(r)
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def aread():
                    with scope:
                        await e.aread(r2, offset=0, length=100)

                tg.start_soon(aread)
                await waits(r2)
                scope.cancel()
            assert os.get_blocking(r2)
            got = []
            async with anyio.create_task_group() as tg:
                async def reader():
                    with anyio.fail_after(GUARD):
                        got.append(await f.read(100))

                tg.start_soon(reader)
                await waits(r)
                os.write(w, b"hello")
            assert got == [b"hello"]
            raw = f.detach()
            assert os.get_blocking(raw.fileno())
            raw.close()

    try:
        run_on(runner, main)
    finally:
        for fd in (w, r2, w2):
            os.close(fd)


@BACKENDS
def test_a_cancelled_close_leaves_the_file_readable(backend):
    """``close`` cancelled while it waits for its turn (behind a write
    that the peer does not read yet): the file stays open, and its next
    read waits for bytes and returns them, instead of failing as a read
    that ``close`` ended."""
    a, b = socket.socketpair()

    async def main():
        with blockio.Engine(backend=backend) as e:
            f = await blockio.open(a.detach(), "r+b", buffering=0, engine=e)
            async with anyio.create_task_group() as tg:
                tg.start_soon(f.write, b"x" * (8 << 20))
                await until(lambda: blocked_in("write", f.fileno()), "the write waits for the peer")
                closing = anyio.CancelScope()

                async def close():
                    with closing:
                        await f.close()

                tg.start_soon(close)
                await until(lambda: f._stream_waits.ended, "close() ends the waits")
                closing.cancel()
                got = 0
                while got < 8 << 20:
                    got += len(await anyio.to_thread.run_sync(b.recv, 1 << 20))
            assert not f.closed
            async with anyio.create_task_group() as tg:
                out = []

                async def reader():
                    with anyio.fail_after(GUARD):
                        out.append(await f.read(100))

                tg.start_soon(reader)
                await until(lambda: watched(f.fileno()), "the read waits for the socket")
                b.send(b"reply")
            assert out == [b"reply"]
            await f.close()

    try:
        run_on("asyncio", main)
    finally:
        b.close()


@RUNNERS
def test_a_wait_begun_after_its_stops_ended_ends_at_once(runner):
    """What ends the waits of a closing file ends one that joins after
    (one that raced the close on another thread): it returns at once,
    on an empty pipe."""
    r, w = os.pipe()

    async def main():
        stops = Stops()
        stops.end()
        with anyio.fail_after(GUARD):
            assert await wait_readable(r, stops)
        assert not stops

    try:
        run_on(runner, main)
    finally:
        os.close(r)
        os.close(w)


@BACKENDS
@pytest.mark.parametrize("closefd", [True, False])
@pytest.mark.parametrize("buffering,call", [(-1, "read()"), (-1, "read(200000)"), (-1, "readline()"),
                                            (0, "read()"), (8192, "readinto(200000)"), (-1, "readlines()"),
                                            (0, "readlines()"), (-1, "text readlines()")])
def test_the_bytes_ahead_of_an_error_come_before_it(backend, closefd, buffering, call):
    """The peer sent 65,536 bytes and reset the connection. A read that
    asks for more than there is (to the end, 200,000 bytes, a line with
    no ``\\n``), buffered or not, returns the 65,536 bytes; the next read
    raises ``ConnectionResetError`` (kept: the kernel reports a reset
    once), the one after returns b"" (the stream's end); ``readlines``
    returns its lines (a text file's: 65,536 characters) the same way.
    Never the error first, with the bytes after it."""

    async def read(f):
        if call == "readinto(200000)":
            buf = bytearray(200000)
            return buf[:await f.readinto(buf)]
        if call.endswith("readlines()"):
            return "".join(await f.readlines()) if call.startswith("text") else b"".join(await f.readlines())
        return await (f.read() if call == "read()" else f.read(200000) if call == "read(200000)" else f.readline())

    async def main():
        s = reset_connection()
        fd = s.detach() if closefd else s.fileno()
        try:
            with blockio.Engine(backend=backend) as e:
                mode = "r" if call.startswith("text") else "rb"
                async with await blockio.open(fd, mode, buffering=buffering, closefd=closefd, engine=e) as f:
                    out = []
                    for _ in range(3):
                        try:
                            with anyio.fail_after(GUARD):
                                out.append(len(await read(f)))
                        except OSError as err:
                            out.append(type(err).__name__)
                    return out
        finally:
            if not closefd:
                s.close()

    assert run_on("asyncio", main) == [65536, "ConnectionResetError", 0]


@RUNNERS
@BACKENDS
@pytest.mark.parametrize("method", ["read", "readline"])
@pytest.mark.parametrize("buffering", [0, -1])
def test_close_ends_a_waiting_read_of_a_stream_the_caller_owns(runner, backend, method, buffering):
    """``closefd=False`` over an idle pipe, a read (or line read) waiting
    for bytes: ``close()`` returns at once, the read raises
    ``OSError(ECANCELED)``, and the caller's descriptor is still open,
    with nothing taken from it: the bytes written after the close are all
    there for the caller."""
    r, w = os.pipe()

    async def main():
        with blockio.Engine(backend=backend) as e:
            f = await blockio.open(r, "rb", buffering=buffering, closefd=False, engine=e)
            out = []
            async with anyio.create_task_group() as tg:
                async def reader():
                    try:
                        out.append(await (f.read(100) if method == "read" else f.readline()))
                    except OSError as err:
                        out.append(err.errno)

                tg.start_soon(reader)
                await until(lambda: waits_for_bytes(r), "the read waits for the pipe")
                with anyio.fail_after(GUARD):
                    await f.close()
            assert out == [errno.ECANCELED]

    try:
        run_on(runner, main)
        assert os.get_blocking(r)
        os.write(w, b"after the close\n")
        os.set_blocking(r, False)
        assert os.read(r, 100) == b"after the close\n"
    finally:
        os.close(r)
        os.close(w)


@RUNNERS
@BACKENDS
@pytest.mark.parametrize("family", ["AF_UNIX", "AF_INET"])
def test_a_cancelled_read_of_datagrams_puts_each_back_alone(runner, backend, family):
    """Two datagrams, 3,000 and 5 bytes, then ``read()`` (to the end, which
    a datagram socket never reaches) on an unbuffered file, cancelled once
    it has taken both and waits for more: the next reads return each
    datagram alone, as ``FileIO.read`` returns one, never the two joined."""
    if family == "AF_UNIX":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    else:
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a.bind(("127.0.0.1", 0))
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b.connect(a.getsockname())
    b.send(b"C" * 3000)
    b.send(b"D" * 5)
    wait_until(lambda: len(a.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)) == 3000, "the datagrams arrive")
    fd = a.detach()

    async def main():
        with blockio.Engine(backend=backend) as e:
            async with await blockio.open(fd, "rb", buffering=0, engine=e) as f:
                assert await cancelled_read(f, -1, lambda: until(lambda: watched(fd), "read() waits")) == b""
                with anyio.fail_after(GUARD):
                    return [await f.read(65536), await f.read(65536)]

    try:
        assert run_on(runner, main) == [b"C" * 3000, b"D" * 5]
    finally:
        b.close()


@BACKENDS
@pytest.mark.parametrize("runner,second", [("asyncio", "same number, closefd=False"),
                                           ("uvloop", "same number, closefd=False"),
                                           ("trio", "same number, closefd=False"),
                                           ("uvloop", "a duplicate, owned")])
def test_a_read_waits_while_another_file_of_the_stream_waits(runner, backend, second):
    """Two files over one pipe: one owning the read end, the other over
    the same number (``closefd=False``) or, under uvloop, over a
    duplicate the user made (uvloop's reader, were it to watch the pipe
    itself, would make the open file description they share
    non-blocking). The first file's read waits; the second's read must
    wait too, not raise ``BlockingIOError``; both get their bytes, and
    the descriptor is blocking afterwards. (A duplicate under asyncio or
    trio, whose polls change no flag, is left out: it has nothing more to
    show.)"""
    r, w = os.pipe()
    r2 = r if second.startswith("same") else os.dup(r)
    real = blockio._file.wait_readable
    entered = []

    async def counting(fd, stops):
        entered.append(fd)
        return await real(fd, stops)

    async def main():
        with blockio.Engine(backend=backend) as e:
            f1 = await blockio.open(r, "rb", buffering=0, engine=e)
            f2 = await blockio.open(r2, "rb", buffering=0, closefd=r2 != r, engine=e)
            out = []
            async with anyio.create_task_group() as tg:
                async def reader(f):
                    try:
                        with anyio.fail_after(GUARD):
                            out.append(await f.read(3))
                    except OSError as err:
                        out.append(type(err).__name__)

                tg.start_soon(reader, f1)
                await until(lambda: len(entered) == 1, "the first read waits")
                tg.start_soon(reader, f2)
                await until(lambda: len(entered) == 2 or out, "the second read waits, or fails")
                os.write(w, b"aaabbb")
            assert sorted(out, key=str) == [b"aaa", b"bbb"]
            assert os.get_blocking(r)
            await f2.close()
            await f1.close()

    blockio._file.wait_readable = counting
    try:
        run_on(runner, main)
    finally:
        blockio._file.wait_readable = real
        os.close(w)


@BACKENDS
def test_a_write_to_a_socket_a_read_waits_on_waits_for_room(backend):
    """Under uvloop, a read waiting on a socket leaves it blocking; a
    write of 8 MiB through another file over the same number, more than
    the socket's buffers hold, waits for room as a blocking write does
    (not raise ``BlockingIOError``): once it waits (or has ended), the
    peer reads, and all of it arrives."""
    a, b = socket.socketpair()
    size = 8 << 20

    async def main():
        with blockio.Engine(backend=backend) as e:
            reading = await blockio.open(a.fileno(), "rb", buffering=0, closefd=False, engine=e)
            writing = await blockio.open(a.fileno(), "wb", buffering=0, closefd=False, engine=e)
            wrote = []
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def reader():
                    with scope:
                        await reading.read(100)

                async def writer():
                    try:
                        with anyio.fail_after(GUARD):
                            wrote.append(await writing.write(b"w" * size))
                    except OSError as err:
                        wrote.append(type(err).__name__)
                    finally:
                        a.shutdown(socket.SHUT_WR)  # (the peer's end, however the write went)
                        scope.cancel()

                tg.start_soon(reader)
                await until(lambda: watched(a.fileno()), "the read waits")
                assert os.get_blocking(a.fileno())
                tg.start_soon(writer)
                await until(lambda: wrote or blocked_in("write"), "the write waits for room, or has ended")

                def peer():
                    n = 0
                    while more := len(b.recv(1 << 20)):
                        n += more
                    return n

                with anyio.fail_after(GUARD):
                    got = await anyio.to_thread.run_sync(peer)
            assert wrote == [size] and got == size
            await writing.close()
            await reading.close()

    try:
        run_on("uvloop", main)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("closefd", [True, False])
def test_a_waiting_read_under_uvloop_leaves_the_descriptor_blocking(closefd):
    """A read waiting on a pipe under uvloop leaves its open file
    description as it was (blocking), which other holders of it share (a
    child given it as its stdin, a terminal the next program reads):
    while it waits, and after its loop is closed with the read still
    waiting. uvloop sets ``O_NONBLOCK`` on what its readers watch: the
    loop must watch blockio's own descriptor, not the caller's. (asyncio
    and trio change no flag: nothing to show there.)"""
    r, w = os.pipe()
    fd = os.dup(r) if closefd else r
    states = []

    async def main():
        f = await blockio.open(fd, "rb", buffering=0, closefd=closefd)
        reading = asyncio.ensure_future(f.read(10))
        await await_until(lambda: watched(r), "the read waits")
        states.append(os.get_blocking(r))
        return f, reading  # (the read still waits when the loop closes)

    try:
        loop = uvloop.new_event_loop()
        try:
            kept = loop.run_until_complete(main())
        finally:
            loop.close()
            abandon(loop, [kept[1]])  # (the read left waiting)
        states.append(os.get_blocking(r))
        del kept
        assert states == [True, True]
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("runner", ["asyncio", "uvloop"])
def test_an_abandoned_read_never_touches_the_number_after(runner):
    """A read left waiting by a closed loop; its file closed from another
    loop. The number goes to a socket the program makes non-blocking; the
    abandoned read's task, collected then, must not touch the number: the
    socket is still non-blocking (a recv of it would wait for ever else)."""
    new_loop = uvloop.new_event_loop if runner == "uvloop" else asyncio.new_event_loop
    r, w = os.pipe()
    a, b = socket.socketpair()
    gc.disable()  # (the read's task is collected when the test says)
    try:
        first = new_loop()
        try:
            f = first.run_until_complete(blockio.open(r, "rb", buffering=0))
            reading = first.create_task(f.read(10))
            first.run_until_complete(await_until(lambda: watched(r), "the read waits"))
        finally:
            first.close()
        second = new_loop()
        try:
            second.run_until_complete(f.close())
        except RuntimeError:
            pass  # (the abandoned read's loop is closed: what close says of it is not the point)
        finally:
            second.close()
        os.dup2(a.fileno(), r)  # (the number, the socket's now)
        os.set_blocking(r, False)
        del f, reading
        gc.collect()
        assert not os.get_blocking(r)
    finally:
        gc.enable()
        os.close(r)
        os.close(w)
        a.close()
        b.close()


def test_a_descriptor_made_non_blocking_after_a_closed_loops_wait_raises():
    """A read of a pipe left waiting under uvloop by a loop that was
    closed (its task kept); the caller then makes the pipe non-blocking
    on purpose: a read of it by another file raises ``BlockingIOError``,
    as documented, instead of waiting."""
    r, w = os.pipe()
    kept = []

    async def first():
        f = await blockio.open(r, "rb", closefd=False)
        kept.append((f, asyncio.ensure_future(f.read(10))))
        await await_until(lambda: watched(r), "the read waits")

    async def second():
        g = await blockio.open(r, "rb", buffering=0, closefd=False)
        with pytest.raises(BlockingIOError):
            await asyncio.wait_for(g.read(10), GUARD)

    try:
        loop = uvloop.new_event_loop()
        try:
            loop.run_until_complete(first())
        finally:
            loop.close()
            abandon(loop, [t for _, t in kept])  # (the read left waiting)
        os.set_blocking(r, False)
        asyncio.run(second())
    finally:
        kept.clear()
        os.close(r)
        os.close(w)


@RUNNERS
def test_a_terminal_the_caller_opened_non_blocking_raises_while_another_read_waits(runner):
    """One file's read waits on a terminal; the caller opens the terminal
    again, non-blocking (an open file description of its own, with the
    same device and inode): a read of it by another file raises
    ``BlockingIOError`` at once, as documented, instead of waiting."""
    slave, master = terminal()
    nb = os.open(os.ttyname(slave), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)

    async def main():
        f1 = await blockio.open(slave, "rb", buffering=0, closefd=False)
        f2 = await blockio.open(nb, "rb", buffering=0, closefd=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(f1.read, 10)
            await until(lambda: watched(slave), "the first read waits")
            with pytest.raises(BlockingIOError), anyio.fail_after(GUARD):
                await f2.read(10)
            tg.cancel_scope.cancel()
        await f2.close()
        await f1.close()

    try:
        run_on(runner, main)
    finally:
        os.close(nb)
        os.close(slave)
        os.close(master)
