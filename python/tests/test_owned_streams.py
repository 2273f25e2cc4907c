"""Reads of a stream that a ``blockio.open`` file owns (``closefd=True``),
which wait for bytes in the event loop's poll, with no thread and no
duplicate descriptor: nothing read is lost or held back when a read is
cancelled, whatever the stream (a pipe, a FIFO opened by path, a
terminal, a datagram socket); an error is never dropped; the descriptor is
left as it was found (blocking); ``close`` ends a wait however the bytes
went, and one that was cancelled leaves the file as it was. On both
backends, under asyncio, uvloop and trio where the loop matters.

Every call that must return is bounded by a guard far beyond any run that
works; the events a test needs are waited for, never slept for."""

import errno
import io
import os
import socket
import struct
import tty

import anyio
import anyio.lowlevel
import pytest

import blockio
import blockio._file
from blockio._aio import Stops, wait_readable
from waits import await_until, blocked_in, wait_until, watched

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
