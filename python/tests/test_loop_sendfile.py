"""``loop.sendfile`` of a ``blockio.open`` file on blockio's event loop,
on both loop backends (io_uring, and the epoll fallback, asyncio's
selector loop) and both engine backends: the file goes from its
descriptor to the socket (``os.sendfile``), every byte at every offset,
after the bytes the file still buffers or has in its write queue have
landed; the file's position is then where the sendfile stopped, set by the
file's own ``seek`` (as asyncio leaves a built-in file's), also when the
peer goes away first, with asyncio's error."""

import asyncio
import ctypes
import errno
import io
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import aiofiles
import pytest

import blockio
from blockio import _blockio
from loops import FACTORIES
from test_inline_reads import evict
from test_inline_writes import fs_type
from waits import DEADLINE

SIZES = [0, 1, 4095, 4096, (1 << 20) + 1]


@pytest.fixture(params=["blockio-uring", "blockio-epoll"])
def loop(request):
    """blockio's event loop on each backend, made directly (the engine's
    backend is the ``engine`` fixture's), closed after the test."""
    lp = FACTORIES[request.param]()
    yield lp
    lp.close()


async def _pair(loop, protocol=asyncio.Protocol):
    """A transport connected to a peer socket (blocking, for a thread),
    with the protocol ``protocol()`` made: (transport, peer, protocol)."""
    ls = socket.create_server(("127.0.0.1", 0))
    t, proto = await loop.create_connection(protocol, *ls.getsockname())
    peer, _ = ls.accept()
    ls.close()
    return t, peer, proto


async def _sent(loop, send):
    """(what ``send(transport)`` returned, every byte the peer got until
    the transport was closed)."""
    t, peer, _ = await _pair(loop)
    got = loop.run_in_executor(None, _read_all, peer)
    try:
        n = await send(t)
    finally:
        t.close()
    return n, await got


def _read_all(peer):
    chunks = []
    with peer:
        while chunk := peer.recv(1 << 20):
            chunks.append(chunk)
    return b"".join(chunks)


def _cases():
    for size in SIZES:
        for offset in sorted({0, 1, size // 2, max(size - 1, 0), size}):
            for count in (None, 1, 4096):
                yield size, offset, count


@pytest.mark.parametrize("size", SIZES)
def test_sendfile_of_a_blockio_file_moves_every_byte_at_every_offset(loop, engine, tmp_path, size):
    data = random.Random(size).randbytes(size)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def main():
        for _, offset, count in (c for c in _cases() if c[0] == size):
            async with blockio.open(path, "rb", engine=engine) as f:

                async def send(t):
                    return await loop.sendfile(t, f, offset, count)

                n, got = await _sent(loop, send)
                want = data[offset:offset + count if count else None]
                assert (n, got) == (len(want), want), (offset, count)
                # asyncio leaves the position after the bytes sent (where
                # it was if none was)
                assert await f.tell() == (offset + n if n else 0), (offset, count)
                # and reads go on from there
                assert await f.read() == (data[offset + n:] if n else data)

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))


def test_sendfile_of_a_blockio_file_sends_the_bytes_written_before_it(loop, engine, tmp_path):
    path = tmp_path / "w"
    head = random.Random(1).randbytes(1000)  # less than the buffer holds

    async def main():
        async with blockio.open(path, "w+b", engine=engine) as f:
            await f.write(head)  # buffered or queued: not yet in the file

            async def send(t):
                return await loop.sendfile(t, f, 0)

            n, got = await _sent(loop, send)
            assert (n, got) == (len(head), head)
            await f.write(b"tail")
        assert path.read_bytes() == head + b"tail"

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))


@pytest.mark.parametrize("steps", ["os.sendfile", "read-on-the-ring"])
def test_sendfile_of_a_blockio_file_to_a_peer_that_resets(loop, engine, tmp_path, monkeypatch, steps):
    # Its steps go out with os.sendfile (the file is cached), or on the
    # io_uring loop are read on the ring (every range counted as not
    # cached; the epoll loop's sendfile is asyncio's either way).
    if steps == "read-on-the-ring":
        monkeypatch.setattr(_blockio, "range_cached", lambda fd, offset, length: False)
    path = tmp_path / "big"
    data = os.urandom(16 << 20)
    path.write_bytes(data)

    async def main():
        t, peer, _ = await _pair(loop)
        async with blockio.open(path, "rb", engine=engine) as f:
            task = asyncio.ensure_future(loop.sendfile(t, f))
            peer.setblocking(False)
            first = await loop.sock_recv(peer, 1)  # the transfer is under way
            assert first == data[:1]
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()
            with pytest.raises(ConnectionResetError):
                await task
            # The position is after what went out, as asyncio leaves it.
            at = await f.tell()
            assert 0 < at < len(data)
            assert await f.read(10) == data[at:at + 10]
        t.close()

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))


def test_sock_sendfile_of_a_device_sends_the_count_asked(loop):
    # /dev/zero's size is 0: the count says how much, as on asyncio's loop.
    async def main():
        a, b = socket.socketpair()
        with a, b, open("/dev/zero", "rb") as f:
            a.setblocking(False)
            n = await loop.sock_sendfile(a, f, 0, 1000)
            got = b""
            b.settimeout(DEADLINE)
            while len(got) < n:
                got += b.recv(4096)
        return n, got

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (1000, bytes(1000))


def test_a_sock_sendfile_of_no_bytes_leaves_an_aiofiles_file_reading_on(loop, tmp_path):
    # An offset at the end sends nothing: the file's next reads go on from
    # where they were (its buffered reader reads the descriptor's offset).
    data = os.urandom(70000)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def main():
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            async with aiofiles.open(path, "rb") as f:
                first = await f.read(10)
                sent = await loop.sock_sendfile(a, f, len(data))
                rest = await f.read()
        return sent, first + rest

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (0, data)


class _Kept(asyncio.Protocol):
    """A protocol keeping what it receives, with a future per message count."""

    def __init__(self):
        self.got = b""
        self.waiters = []

    def data_received(self, data):
        self.got += data
        for want, fut in self.waiters:
            if len(self.got) >= want and not fut.done():
                fut.set_result(None)

    async def wait_for(self, n):
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((n, fut))
        self.data_received(b"")
        await fut


def test_a_sendfile_leaves_the_transport_receiving_and_sends_after_earlier_writes(loop, engine, tmp_path):
    # The transport receives what the peer sends before and after the
    # sendfile, and the bytes written before it go out before the file's.
    data = random.Random(5).randbytes(50000)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def main():
        t, peer, proto = await _pair(loop, _Kept)
        got = loop.run_in_executor(None, _read_all, peer)
        peer.sendall(b"before")
        await proto.wait_for(6)
        t.write(b"head")
        async with blockio.open(path, "rb", engine=engine) as f:
            n = await loop.sendfile(t, f, 10, 20000)
            at = await f.tell()
        assert t.is_reading()
        peer.sendall(b"after")
        await proto.wait_for(11)
        t.close()
        return n, at, proto.got, await got

    n, at, received, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, at, received) == (20000, 10 + 20000, b"beforeafter")
    assert sent == b"head" + data[10:10 + 20000]


def test_a_sendfile_behind_a_write_still_going_out_sends_in_order(loop, engine, tmp_path):
    # A write the socket did not take whole is still going out: the file
    # follows it, from the offset asked for, its position after it.
    data = random.Random(6).randbytes(3 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)
    chunk = random.Random(7).randbytes(1 << 20)
    head = []

    async def main():
        t, peer, _ = await _pair(loop)
        while not t.get_write_buffer_size():  # (until the socket takes no more at once)
            t.write(chunk)
            head.append(chunk)
        got = loop.run_in_executor(None, _read_all, peer)
        async with blockio.open(path, "rb", engine=engine) as f:
            n = await loop.sendfile(t, f, 100)
            at = await f.tell()
        t.close()
        return n, at, await got

    n, at, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, at) == (len(data) - 100, len(data))
    assert sent == b"".join(head) + data[100:]


def test_a_sendfile_the_socket_takes_in_part_sends_the_rest_and_places_the_file(loop, engine, tmp_path):
    # More than the socket takes at once: the rest goes out as the peer
    # reads, every byte once, and the position is after the last.
    data = random.Random(8).randbytes(16 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def main():
        t, peer, _ = await _pair(loop)
        got = loop.run_in_executor(None, _read_all, peer)
        async with blockio.open(path, "rb", engine=engine) as f:
            assert await f.read(5) == data[:5]
            n = await loop.sendfile(t, f, 1, (16 << 20) - 2)
            at = await f.tell()
            rest = await f.read()
        t.close()
        return n, at, rest, await got

    n, at, rest, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, at, rest) == ((16 << 20) - 2, (16 << 20) - 1, data[-1:])
    assert sent == data[1:-1]



#: The file systems whose pages are the file (POSIX_FADV_DONTNEED drops none).
UNDROPPABLE = ("tmpfs", "ramfs")


@pytest.fixture
def disk_path(tmp_path):
    """A directory on a file system whose pages the kernel drops from the
    page cache (``evict``): pytest's, or else one under /var/tmp or
    beside these tests; a failure naming them if none is."""
    if fs_type(tmp_path) not in UNDROPPABLE:
        yield tmp_path
        return
    for base in ("/var/tmp", os.path.dirname(os.path.abspath(__file__))):
        if os.access(base, os.W_OK) and fs_type(base) not in UNDROPPABLE:
            d = tempfile.mkdtemp(dir=base, prefix="blockio-sendfile-")
            try:
                yield Path(d)
            finally:
                shutil.rmtree(d)
            return
    pytest.fail(f"{tmp_path}, /var/tmp and {os.path.dirname(__file__)} are on {', '.join(UNDROPPABLE)} or not "
                "writable: a file's pages cannot be dropped from the page cache there")


@pytest.fixture
def uring_loop():
    """blockio's io_uring loop (asyncio's selector loop, the epoll
    fallback, neither awaits an async file's seek nor sees a close during
    its sendfile)."""
    lp = FACTORIES["blockio-uring"]()
    yield lp
    lp.close()


def _big_file(tmp_path, seed):
    """A file larger than a socket takes at once: a sendfile of it runs
    over several of the loop's steps."""
    data = random.Random(seed).randbytes(16 << 20)
    path = tmp_path / "big"
    path.write_bytes(data)
    return path, data


def test_a_write_while_a_sendfile_of_an_aiofiles_file_runs_is_refused(loop, tmp_path):
    # (aiofiles' seek yields to the loop.) Another task's write while the
    # sendfile runs gets asyncio's RuntimeError: the file's bytes go out
    # alone, none of the write's among them.
    path, data = _big_file(tmp_path, 11)
    refused = []

    async def main():
        t, peer, _ = await _pair(loop)

        async def other():  # (runs in the step after the sendfile's first)
            try:
                t.write(b"MARK")
            except RuntimeError as exc:
                refused.append(str(exc))
            # (the peer reads from now on: until then the file does not fit)
            return loop.run_in_executor(None, _read_all, peer)

        async with aiofiles.open(path, "rb") as f:
            send = asyncio.ensure_future(loop.sendfile(t, f))
            write = asyncio.ensure_future(other())
            got = await write
            n = await send
            at = await f.tell()
        t.close()
        return n, at, await got

    n, at, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert refused == ["unable to write; sendfile is in progress"]
    assert (n, at) == (len(data), len(data))
    assert sent == data


class _Answering(asyncio.Protocol):
    """Answers each message it receives with ``ACK``."""

    def __init__(self):
        self.answered = None

    def connection_made(self, transport):
        self.transport = transport
        self.answered = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        self.transport.write(b"ACK")
        if not self.answered.done():
            self.answered.set_result(data)


def test_a_message_received_during_a_sendfile_is_answered_after_the_files_bytes(loop, engine, disk_path):
    # The peer's message is there before the sendfile begins; reading is
    # paused while it runs, so the protocol's answer follows the file.
    from test_loop_files import drop_cache

    data = random.Random(12).randbytes(200_000)
    path = disk_path / "f"
    path.write_bytes(data)

    async def main():
        t, peer, proto = await _pair(loop, _Answering)
        got = loop.run_in_executor(None, _read_all, peer)
        async with blockio.open(path, "rb", engine=engine) as f:
            drop_cache(path)
            peer.sendall(b"ping")
            n = await loop.sendfile(t, f)
        message = await proto.answered
        t.close()
        return n, message, await got

    n, message, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, message) == (len(data), b"ping")
    assert sent == data + b"ACK"


@pytest.mark.parametrize("steps", ["os.sendfile", "read-on-the-ring"])
def test_a_sendfile_of_an_aiofiles_file_cancelled_leaves_it_after_the_bytes_sent(
    uring_loop, tmp_path, monkeypatch, steps
):
    loop = uring_loop
    # Cancelled once the peer has bytes (it reads none until then): the
    # file's position is after the last byte the peer got, whether its
    # steps go out with os.sendfile (the file is cached) or are read on
    # the ring (every range counted as not cached).
    if steps == "read-on-the-ring":
        monkeypatch.setattr(_blockio, "range_cached", lambda fd, offset, length: False)
    path, data = _big_file(tmp_path, 13)

    async def main():
        t, peer, _ = await _pair(loop)
        async with aiofiles.open(path, "rb") as f:
            send = asyncio.ensure_future(loop.sendfile(t, f))
            await loop.run_in_executor(None, select.select, [peer], [], [], DEADLINE)
            send.cancel()
            with pytest.raises(asyncio.CancelledError):
                await send
            at = await f.tell()
        t.close()
        return at, await loop.run_in_executor(None, _read_all, peer)

    at, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert 0 < at == len(sent) < len(data)
    assert sent == data[:at]


@pytest.mark.parametrize("how", ["close", "abort"])
def test_a_transport_closed_during_a_sendfile_of_an_aiofiles_file_ends_it(uring_loop, tmp_path, how):
    loop = uring_loop
    # Closed by another task while the sendfile runs: asyncio's
    # ConnectionAbortedError, counting the bytes the peer got, and the
    # file's position after them.
    path, data = _big_file(tmp_path, 14)
    proactor = loop._proactor
    closing = []

    def then_close(send):
        # (closed in the step after the sendfile's first send: os.sendfile
        # where the kernel says the range is cached, else a send of bytes
        # read on the ring; the peer reads nothing until the sendfile
        # ends, so the file does not fit)
        def first_then_close(*args):
            fut = send(*args)
            if not closing:
                closing.append(loop.call_soon(getattr(t, how)))
            return fut

        return first_then_close

    async def main():
        nonlocal t
        t, peer, _ = await _pair(loop)
        proactor.sendfile_some = then_close(proactor.sendfile_some)
        proactor.send_some = then_close(proactor.send_some)
        async with aiofiles.open(path, "rb") as f:
            send = asyncio.ensure_future(loop.sendfile(t, f))
            with pytest.raises(ConnectionAbortedError) as err:
                await send
            at = await f.tell()
        return str(err.value), at, await loop.run_in_executor(None, _read_all, peer)

    t = None
    message, at, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert closing
    assert message.endswith(f"the socket was closed after {len(sent)} bytes")
    assert 0 < len(sent) < len(data)
    assert sent == data[:len(sent)]
    assert at == len(sent)


# -- a range not in the page cache: read on the loop's ring, then sent ------


def _cachestat_refused(fd):
    """Whether the kernel refuses ``cachestat`` (syscall 451 on every
    architecture) on ``fd``: ``ENOSYS`` before Linux 6.5, ``EPERM`` for a
    file the caller neither owns nor may write. Called through libc's
    ``syscall``, as blockio calls it."""
    libc = ctypes.CDLL(None, use_errno=True)
    rng = (ctypes.c_uint64 * 2)(0, 4096)
    stat = (ctypes.c_uint64 * 5)()
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(451), ctypes.c_long(fd), rng, stat, ctypes.c_long(0))
    return r != 0 and ctypes.get_errno() in (errno.ENOSYS, errno.EPERM)


def test_range_cached_says_whether_every_page_of_a_range_is_cached(disk_path):
    path = disk_path / "f"
    path.write_bytes(random.Random(20).randbytes(5 * 4096))
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    # Where the kernel refuses cachestat it cannot tell: never cached.
    tells = not _cachestat_refused(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # (no readahead: a read caches its own pages)
    try:
        assert not _blockio.range_cached(fd, 0, 5 * 4096)
        os.pread(fd, 4096, 4096)  # the second page only
        assert _blockio.range_cached(fd, 4096, 4096) == tells
        assert _blockio.range_cached(fd, 4097, 100) == tells
        assert not _blockio.range_cached(fd, 4096, 4097)  # into the third
        assert not _blockio.range_cached(fd, 4095, 2)  # and the first
        os.pread(fd, 5 * 4096, 0)
        assert _blockio.range_cached(fd, 0, 5 * 4096) == tells
        assert not _blockio.range_cached(fd, 0, 0)  # (no range)
    finally:
        os.close(fd)
    assert not _blockio.range_cached(fd, 0, 4096)  # (closed: the kernel cannot tell)


def test_a_sendfile_of_an_uncached_file_reads_it_on_the_ring_while_the_loop_runs(uring_loop, engine, disk_path):
    loop = uring_loop
    path, data = _big_file(disk_path, 21)
    evict(path)
    reads = []
    pread = loop._proactor.pread
    other_ran = asyncio.Event()

    def gated(fd, offset, length):
        # The sendfile's read waits on another task's step: the sendfile
        # awaits it (a read on the loop's thread would stop that task).
        reads.append((offset, length))

        async def after_other():
            await other_ran.wait()
            return await pread(fd, offset, length)

        return asyncio.ensure_future(after_other())

    async def main():
        loop._proactor.pread = gated
        async with blockio.open(path, "rb", engine=engine) as f:

            async def send(t):
                loop.call_soon(other_ran.set)
                return await loop.sendfile(t, f)

            n, got = await _sent(loop, send)
            assert await f.tell() == len(data)
        return n, got

    n, got = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, got == data) == (len(data), True)
    # every byte read on the ring, in steps of at most 256 KiB
    assert reads[0] == (0, 256 << 10)
    assert [o for o, _ in reads] == list(range(0, len(data), 256 << 10))


@pytest.fixture
def ring_reads(monkeypatch):
    """Every range of a sendfile counted as not cached: read on the ring
    (the native send of a cached range, which asks the cache itself, off)."""
    monkeypatch.setattr(_blockio, "range_cached", lambda fd, offset, length: False)
    monkeypatch.setattr(blockio._loop, "_plain_sendfile", lambda file, offset, count: None)


@pytest.mark.parametrize("size", SIZES)
def test_a_sendfile_read_on_the_ring_moves_every_byte_at_every_offset(uring_loop, ring_reads, tmp_path, size):
    loop = uring_loop
    data = random.Random(size).randbytes(size)
    path = tmp_path / "f"
    path.write_bytes(data)

    async def main():
        for _, offset, count in (c for c in _cases() if c[0] == size):
            async with aiofiles.open(path, "rb") as f:

                async def send(t):
                    return await loop.sendfile(t, f, offset, count)

                n, got = await _sent(loop, send)
                want = data[offset:offset + count if count else None]
                assert (n, got) == (len(want), want), (offset, count)
                assert await f.tell() == (offset + n if n else 0), (offset, count)

    loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))


@pytest.mark.parametrize("how", ["close", "abort"])
def test_a_transport_closed_during_a_sendfile_read_on_the_ring_ends_it(uring_loop, ring_reads, tmp_path, how):
    loop = uring_loop
    path, data = _big_file(tmp_path, 23)
    send_some = loop._proactor.send_some

    def then_close(sock, view):
        # (closed in the step after the first send of bytes read; the peer
        # reads nothing until the sendfile ends, so the file does not fit)
        fut = send_some(sock, view)
        if not closing:
            closing.append(loop.call_soon(getattr(t, how)))
        return fut

    closing = []

    async def main():
        nonlocal t
        t, peer, _ = await _pair(loop)
        loop._proactor.send_some = then_close
        async with aiofiles.open(path, "rb") as f:
            send = asyncio.ensure_future(loop.sendfile(t, f))
            with pytest.raises(ConnectionAbortedError) as err:
                await send
            at = await f.tell()
        return str(err.value), at, await loop.run_in_executor(None, _read_all, peer)

    t = None
    message, at, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert message.endswith(f"the socket was closed after {len(sent)} bytes")
    assert 0 < len(sent) < len(data)
    assert sent == data[:len(sent)]
    assert at == len(sent)


def test_a_sendfile_of_an_uncached_o_direct_file_sends_every_byte(uring_loop, disk_path):
    # The ring's read of an O_DIRECT file fails (EINVAL) where the new
    # buffer is not aligned to the device's blocks: the range then goes out
    # with os.sendfile. Either way every byte is sent.
    loop = uring_loop
    path = disk_path / "direct"
    data = random.Random(25).randbytes(1 << 20)  # (whole blocks: os.sendfile takes it)
    path.write_bytes(data)
    evict(path)
    reads = []
    pread = loop._proactor.pread

    def recorded(fd, offset, length):
        fut = pread(fd, offset, length)
        reads.append(fut)
        return fut

    async def main():
        loop._proactor.pread = recorded
        with open(os.open(path, os.O_RDONLY | os.O_DIRECT), "rb", buffering=0) as f:

            async def send(t):
                return await loop.sendfile(t, f)

            return await _sent(loop, send)

    n, sent = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, sent == data) == (len(data), True)
    assert reads and all(f.exception() is None or f.exception().errno == errno.EINVAL for f in reads)


@pytest.mark.parametrize("refused", [errno.EINVAL, errno.EAGAIN])
def test_a_range_whose_ring_read_is_refused_goes_out_with_os_sendfile(uring_loop, ring_reads, tmp_path, refused):
    loop = uring_loop
    path, data = _big_file(tmp_path, 26)
    reads = []

    def refusing(fd, offset, length):
        reads.append(offset)
        fut = loop.create_future()
        fut.set_exception(OSError(refused, os.strerror(refused)))
        return fut

    async def main():
        loop._proactor.pread = refusing
        async with aiofiles.open(path, "rb") as f:

            async def send(t):
                return await loop.sendfile(t, f, 1)

            n, got = await _sent(loop, send)
            return n, got, await f.tell()

    n, got, at = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert (n, got == data[1:], at) == (len(data) - 1, True, len(data))
    assert reads[0] == 1  # (tried on the ring first)


def test_a_read_error_other_than_a_refusal_ends_the_sendfile(uring_loop, ring_reads, tmp_path):
    loop = uring_loop
    path, _ = _big_file(tmp_path, 27)

    def failing(fd, offset, length):
        fut = loop.create_future()
        fut.set_exception(OSError(errno.EIO, os.strerror(errno.EIO)))
        return fut

    async def main():
        t, peer, _ = await _pair(loop)
        loop._proactor.pread = failing
        with open(path, "rb") as f:
            with pytest.raises(OSError) as err:
                await loop.sendfile(t, f)
            at = f.tell()
        t.close()
        peer.close()
        return err.value.errno, at

    assert loop.run_until_complete(asyncio.wait_for(main(), DEADLINE)) == (errno.EIO, 0)


@pytest.mark.parametrize("offset, count", [(0, None), (4096, None), (0, (1 << 20) + 4096), (0, 1 << 20)])
def test_an_o_direct_file_whose_size_is_not_a_block_multiple_is_sent_to_its_end(uring_loop, disk_path, monkeypatch,
                                                                                offset, count):
    # Every range counted as cached: os.sendfile to the file's end, whose
    # last step the kernel refuses (EINVAL) as a count that is not a whole
    # number of blocks, and takes as one rounded up (it stops at the end),
    # within the caller's count; a count ending before the file's end is
    # sent and no more. (asyncio's selector loop asks for the file's size
    # in each step without a count, and for the rest of the count with
    # one: 777 for a count that ends at the file's end, refused.)
    loop = uring_loop
    monkeypatch.setattr(_blockio, "range_cached", lambda fd, offset, length: True)
    path = disk_path / "direct"
    data = random.Random(28).randbytes((1 << 20) + 777)
    path.write_bytes(data)

    async def main():
        with open(os.open(path, os.O_RDONLY | os.O_DIRECT), "rb", buffering=0) as f:

            async def send(t):
                return await loop.sendfile(t, f, offset, count)

            n, got = await _sent(loop, send)
            return n, got, f.tell()

    n, got, at = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    want = data[offset:offset + count if count else None]
    assert (n, got == want, at) == (len(want), True, offset + len(want))


@pytest.mark.parametrize("count", [5000, 6000])
def test_a_count_is_kept_when_the_file_grows_during_the_sendfile(uring_loop, tmp_path, monkeypatch, count):
    # A file of 5000 bytes grows before the sendfile's os.sendfile: no
    # more than the caller's count goes out, however the count of a step
    # reaching the file's end is rounded (past it, the bytes the file
    # gains are not the caller's), and no fewer than the 5000 it held.
    loop = uring_loop
    monkeypatch.setattr(_blockio, "range_cached", lambda fd, offset, length: True)
    path = tmp_path / "growing"
    data = random.Random(29).randbytes(20000)
    path.write_bytes(data[:5000])
    sendfile_some = loop._proactor.sendfile_some

    def grown_first(sock, fd, offset, n):
        if path.stat().st_size < len(data):
            with open(path, "ab") as f:
                f.write(data[5000:])
        return sendfile_some(sock, fd, offset, n)

    async def main():
        loop._proactor.sendfile_some = grown_first
        with open(path, "rb") as f:

            async def send(t):
                return await loop.sendfile(t, f, 0, count)

            return await _sent(loop, send)

    n, got = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert 5000 <= n <= count
    assert got == data[:n]


#: An LD_PRELOAD library whose ``syscall(451, ...)`` (cachestat) fails with
#: ENOSYS, as on a kernel before Linux 6.5 (5.6 to 6.4 have io_uring but
#: not cachestat).
NOSYS_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
long syscall(long n, ...) {
    va_list ap;
    va_start(ap, n);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (n == 451) {
        errno = ENOSYS;
        return -1;
    }
    static long (*real)(long, ...);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(n, a, b, c, d, e, f);
}
"""


def test_this_file_passes_where_the_kernel_has_no_cachestat(tmp_path):
    # This file's tests on the io_uring loop again (the epoll fallback's
    # sendfile is asyncio's, which asks no cachestat), in a process whose
    # cachestat fails with ENOSYS (the library built here with cc, the
    # linker of blockio's own build): every range then counts as not cached.
    lib = tmp_path / "nosys.so"
    (tmp_path / "nosys.c").write_text(NOSYS_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", lib, tmp_path / "nosys.c", "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(lib))
    probe = ("import os, sys; from blockio import _blockio\n"
             "sys.path.insert(0, sys.argv[1]); from test_loop_sendfile import _cachestat_refused\n"
             "fd = os.open(sys.argv[2], os.O_RDONLY); os.pread(fd, 4096, 0)\n"
             "print(_cachestat_refused(fd), _blockio.range_cached(fd, 0, 4096))")
    here = os.path.dirname(os.path.abspath(__file__))
    warm = tmp_path / "warm"
    warm.write_bytes(bytes(4096))
    out = subprocess.run([sys.executable, "-c", probe, here, warm], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]  # (refused: a warm page counts as not cached)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"--basetemp={tmp_path / 'inner'}", "-k", "not where_the_kernel_has_no_cachestat and not epoll",
                          os.path.abspath(__file__)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


@pytest.mark.parametrize("name", ["asyncio", "blockio-uring", "blockio-epoll"])
@pytest.mark.parametrize("via", ["transport", "socket"])
@pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])
def test_a_sendfile_of_a_write_only_file_fails_as_on_asyncio(name, via, cached, tmp_path):
    # asyncio's os.sendfile fails (EBADF) before any byte: the sendfile is
    # "not available" (SendfileNotAvailableError with fallback=False), and
    # its fallback reads the file (io.UnsupportedOperation: read).
    p = tmp_path / "f"
    p.write_bytes(b"x" * 5000)
    lp = FACTORIES[name]()

    async def attempt(f, fallback):
        if via == "transport":
            t, peer, _ = await _pair(lp)
            with peer:
                try:
                    return await lp.sendfile(t, f, fallback=fallback)
                finally:
                    t.close()
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            return await lp.sock_sendfile(a, f, fallback=fallback)

    async def main():
        got = []
        for fallback in (False, True):
            with open(p, "ab") as f:
                if not cached:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                try:
                    got.append(await attempt(f, fallback))
                except Exception as exc:
                    got.append((type(exc), str(exc)))
        return got

    try:
        got = lp.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    finally:
        lp.close()
    assert got == [
        (asyncio.exceptions.SendfileNotAvailableError, "os.sendfile call failed"),
        (io.UnsupportedOperation, "read"),
    ]
