"""``loop.sendfile`` of a cached file on an idle transport of blockio's
io_uring loop is one native call (``StreamTx.sendfile``: ``fstat``,
``cachestat``, ``sendfile`` as far as the socket takes it), with
asyncio's behaviour: each test runs the same sendfile on asyncio's loop
and on blockio's, and compares what each returned, sent and left (the
file's position, the error); an asynchronous file's position, which
asyncio's loop does not await, is checked on blockio's loops alone. What the native call does not finish (the
socket full, bytes still going out before it, a peer gone, a file cut
short, a file that is not a regular one) goes on as asyncio's sendfile."""

import asyncio
import io
import os
import random
import socket
import struct
import threading

import aiofiles
import pytest

import blockio
from loops import run_on
from test_loop_sendfile import _pair, _read_all
from waits import DEADLINE

#: The loops compared: asyncio's (its selector loop) and blockio's on io_uring.
LOOPS = ["asyncio", "blockio-uring"]


def _file(tmp_path, size, seed=0):
    """A file of ``size`` random bytes (in the page cache: just written)."""
    data = random.Random(seed).randbytes(size)
    path = tmp_path / f"f{size}"
    path.write_bytes(data)
    return path, data


async def _send(path, offset, count, opener):
    """Sends ``path`` from ``offset`` (``count`` bytes) on a new transport:
    (what sendfile returned, the bytes the peer got, the file's position
    after, the next 10 bytes read from there)."""
    loop = asyncio.get_running_loop()
    t, peer, _ = await _pair(loop)
    got = loop.run_in_executor(None, _read_all, peer)
    try:
        if opener == "blockio":
            async with blockio.open(path, "rb") as f:
                n = await loop.sendfile(t, f, offset, count)
                t.close()
                return n, await got, await f.tell(), await f.read(10)
        with open(path, "rb") as f:
            n = await loop.sendfile(t, f, offset, count)
            t.close()
            return n, await got, f.tell(), f.read(10)
    finally:
        t.close()


CASES = [
    (size, offset, count)
    for size in (0, 1, 4095, 4096, 70000, (1 << 20) + 1)
    for offset in sorted({0, 1, size // 2, max(size - 1, 0), size, size + 7})
    for count in (None, 1, 4096, size + 100)
]


@pytest.mark.parametrize("offset, count", [(0, 1 << 64), (5, 1 << 70), (1 << 64, None), (1 << 64, 10)])
def test_an_offset_or_count_past_64_bits_is_taken_as_any_past_the_files_end(tmp_path, offset, count):
    # (asyncio's selector loop raises OverflowError here, converting them
    # for os.sendfile; blockio's loop, whose native call's arithmetic is
    # 64-bit, takes them as any offset or count past the file's end: the
    # file to its end, or nothing from an offset past it)
    path, data = _file(tmp_path, 5000)
    got = run_on("blockio-uring", asyncio.wait_for(_send(path, offset, count, "builtin"), DEADLINE))
    n = max(len(data) - offset, 0)
    at = offset + n if n else 0
    assert got == (n, data[offset:], at, data[at:at + 10])


@pytest.mark.parametrize("opener", ["builtin", "blockio"])
def test_a_cached_sendfile_returns_sends_and_places_the_file_as_on_asyncio(tmp_path, opener):
    # On asyncio's loop the file is the built-in's (asyncio does not await
    # an asynchronous file's seek); on blockio's, the built-in's or a
    # blockio.open file. Sizes past what the socket takes at once (1 MiB)
    # send their rest in steps.
    paths = {size: _file(tmp_path, size, size)[0] for size in {c[0] for c in CASES}}

    async def every(name):
        out = []
        for size, offset, count in CASES:
            out.append(await asyncio.wait_for(
                _send(paths[size], offset, count, "builtin" if name == "asyncio" else opener), DEADLINE))
        return out

    want = run_on("asyncio", every("asyncio"))
    got = run_on("blockio-uring", every("blockio-uring"))
    for case, a, b in zip(CASES, want, got):
        assert b == a, case


def test_a_cached_sendfile_on_an_idle_transport_neither_pauses_reading_nor_waits(tmp_path):
    # One native call: reading is not paused and resumed, no empty-buffer
    # waiter is made (asyncio's machinery around a sendfile); a file larger
    # than the socket takes at once goes on in asyncio's steps.
    small, small_data = _file(tmp_path, 30000)
    big, big_data = _file(tmp_path, 16 << 20, 1)
    calls = []

    async def main():
        loop = asyncio.get_running_loop()
        results = []
        for path in (small, big):
            t, peer, _ = await _pair(loop)
            for name in ("pause_reading", "_make_empty_waiter"):
                method = getattr(t, name)

                def spy(*args, _name=name, _method=method):
                    calls.append((path.name, _name))
                    return _method(*args)

                setattr(t, name, spy)
            got = loop.run_in_executor(None, _read_all, peer)
            async with blockio.open(path, "rb") as f:
                n = await loop.sendfile(t, f)
                results.append((n, await f.tell()))
            t.close()
            results.append(await got)
        return results

    results = run_on("blockio-uring", asyncio.wait_for(main(), DEADLINE))
    assert results == [(len(small_data), len(small_data)), small_data, (len(big_data), len(big_data)), big_data]
    assert calls == [(big.name, "pause_reading"), (big.name, "_make_empty_waiter")]


@pytest.mark.parametrize("name", ["blockio-uring", "blockio-epoll"])
def test_a_write_while_an_aiofiles_files_position_is_set_after_its_bytes_is_refused(tmp_path, name):
    # (asyncio's loop does not await an asynchronous file's seek.) The
    # file's bytes go out in one call, then aiofiles' seek runs in a
    # thread: the sendfile is still in progress (as where it goes in
    # steps), so another task's write then gets asyncio's RuntimeError and
    # the peer gets the file's bytes alone.
    path, data = _file(tmp_path, 30000)
    refused = []

    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        got = loop.run_in_executor(None, _read_all, peer)

        async def other():  # (runs once the sendfile waits for the seek)
            try:
                t.write(b"MARK")
            except RuntimeError as exc:
                refused.append(str(exc))

        async with aiofiles.open(path, "rb") as f:
            send = asyncio.ensure_future(loop.sendfile(t, f))
            write = asyncio.ensure_future(other())
            n = await send
            await write
            at = await f.tell()
        t.close()
        return n, at, await got

    n, at, got = run_on(name, asyncio.wait_for(main(), DEADLINE))
    assert refused == ["unable to write; sendfile is in progress"]
    assert (n, at, got == data) == (len(data), len(data), True)


@pytest.mark.parametrize("name", LOOPS)
def test_a_sendfile_behind_bytes_still_going_out_sends_after_them_as_on_asyncio(tmp_path, name):
    # A write the socket did not take whole is still going out when the
    # socket has room again (the peer emptied it while the loop's thread
    # was held, so the loop has not sent more of the write): the sendfile
    # waits for the write (no native call), and the peer gets the write's
    # bytes, then the file's.
    path, data = _file(tmp_path, 50000)
    head = random.Random(2).randbytes(8 << 20)
    emptied = threading.Event()

    def read(peer):
        chunks = []
        peer.setblocking(False)
        try:
            while True:
                chunks.append(peer.recv(1 << 20))
        except BlockingIOError:
            pass
        peer.setblocking(True)
        emptied.set()
        return b"".join(chunks) + _read_all(peer)

    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        t.write(head)
        assert t.get_write_buffer_size() > 0  # (a rest in flight)
        got = loop.run_in_executor(None, read, peer)
        assert emptied.wait(DEADLINE)  # (the loop's thread held meanwhile)
        with open(path, "rb") as f:
            n = await loop.sendfile(t, f)
            at = f.tell()
        t.close()
        return n, at, await got

    n, at, got = run_on(name, asyncio.wait_for(main(), DEADLINE))
    assert (n, at, len(got), got == head + data) == (len(data), len(data), len(head) + len(data), True)


@pytest.mark.parametrize("name", LOOPS)
@pytest.mark.parametrize("when", ["before", "during"])
def test_a_peer_reset_ends_a_cached_sendfile_with_asyncios_error(tmp_path, name, when):
    # The peer resets once the file's bytes are under way:
    # ConnectionResetError on both loops, the position after what went
    # out. A reset before the first call is a ConnectionError (asyncio's
    # selector loop takes a first call's failure for sendfile being
    # unavailable, and its fallback, having read a block, finds the
    # transport closing: "Connection closed by peer"); blockio's leaves the
    # file where it was, as nothing went out.
    path, data = _file(tmp_path, 16 << 20, 3)

    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with open(path, "rb") as f:
            if when == "before":
                peer.close()
                with pytest.raises(ConnectionError):
                    await loop.sendfile(t, f)
                if name != "asyncio":
                    assert f.tell() == 0
            else:
                task = asyncio.ensure_future(loop.sendfile(t, f))
                peer.setblocking(False)
                assert await loop.sock_recv(peer, 1) == data[:1]  # under way
                peer.close()
                with pytest.raises(ConnectionResetError):
                    await task
                assert 0 < f.tell() < len(data)
        t.close()

    run_on(name, asyncio.wait_for(main(), DEADLINE))


@pytest.mark.parametrize("name", LOOPS)
def test_a_file_cut_short_during_a_sendfile_ends_it_where_the_file_ends_as_on_asyncio(tmp_path, name):
    # The socket takes some of the file (small buffers, a peer not reading
    # yet), then the file is truncated; the sendfile stops at its new end.
    path, data = _file(tmp_path, 4 << 20, 4)
    cut = 1 << 20
    truncated = threading.Event()

    def read_once_cut(peer):
        truncated.wait()
        return _read_all(peer)

    def truncate():
        os.truncate(path, cut)
        truncated.set()

    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        t.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 << 10)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
        got = loop.run_in_executor(None, read_once_cut, peer)
        with open(path, "rb") as f:
            # (runs once the sendfile waits for the socket)
            loop.call_soon(truncate)
            n = await loop.sendfile(t, f)
            at = f.tell()
        t.close()
        return n, at, await got

    n, at, got = run_on(name, asyncio.wait_for(main(), DEADLINE))
    assert (n, at, got == data[:cut]) == (cut, cut, True)


@pytest.mark.parametrize("name", LOOPS)
@pytest.mark.parametrize("fallback", [True, False])
def test_a_file_without_a_descriptor_falls_back_as_on_asyncio(name, fallback):
    # No descriptor (io.BytesIO): asyncio's SendfileNotAvailableError,
    # then its read-and-write copy, or the error itself without fallback.
    data = random.Random(5).randbytes(100000)

    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        got = loop.run_in_executor(None, _read_all, peer)
        f = io.BytesIO(data)
        try:
            n = await loop.sendfile(t, f, 10, fallback=fallback)
        except asyncio.SendfileNotAvailableError:
            n = None
        at = f.tell()
        t.close()
        return n, at, await got

    n, at, got = run_on(name, asyncio.wait_for(main(), DEADLINE))
    if fallback:
        assert (n, at, got == data[10:]) == (len(data) - 10, len(data), True)
    else:
        assert (n, at, got) == (None, 0, b"")


@pytest.mark.parametrize("name", LOOPS)
def test_a_pipe_opened_rb_is_sent_as_on_asyncio(name):
    # Not a regular file (its size is 0): the native call leaves it to
    # asyncio's path, which sends nothing without a count, as asyncio's.
    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        got = loop.run_in_executor(None, _read_all, peer)
        r, w = os.pipe()
        os.write(w, b"pipe bytes")
        with open(r, "rb") as f, open(w, "wb"):
            n = await loop.sendfile(t, f)
        t.close()
        return n, await got

    assert run_on(name, asyncio.wait_for(main(), DEADLINE)) == (0, b"")


@pytest.mark.parametrize("name", LOOPS)
@pytest.mark.parametrize("count", [None, 3, 100])
def test_a_file_whose_size_says_nothing_of_its_bytes_is_sent_as_on_asyncio(name, count):
    # A /proc file's size is 0: given a count, asyncio sends that many of
    # its bytes (up to its end); without one, none.
    async def main():
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        got = loop.run_in_executor(None, _read_all, peer)
        with open("/proc/sys/kernel/ostype", "rb") as f:
            n = await loop.sendfile(t, f, 0, count)
            at = f.tell()
        t.close()
        return n, at, await got

    want = run_on("asyncio", asyncio.wait_for(main(), DEADLINE))
    assert want[0] == (len(b"Linux\n"[:count]) if count else 0)
    assert run_on(name, asyncio.wait_for(main(), DEADLINE)) == want


@pytest.mark.parametrize("name", ["blockio-uring", "blockio-epoll"])
@pytest.mark.parametrize("fallback", [True, False])
@pytest.mark.parametrize("bad", [None, "text", "offset"])
def test_a_sendfile_after_write_eof_fails_as_on_asyncio(name, fallback, bad):
    # asyncio's selector loop: the socket's writing end is shut, so its
    # os.sendfile fails before any byte and the sendfile is not
    # available; its fallback's write then raises the transport's error.
    def outcome(name):
        async def main():
            loop = asyncio.get_running_loop()
            t, peer, _ = await _pair(loop)
            t.write_eof()
            try:
                # (a bad argument is reported as such first, as asyncio does)
                with open("/proc/self/exe", "r" if bad == "text" else "rb") as f:
                    await loop.sendfile(t, f, -1 if bad == "offset" else 0, 10000, fallback=fallback)
            except Exception as e:
                return type(e), str(e)
            finally:
                t.close()
                peer.close()
            return None

        return run_on(name, asyncio.wait_for(main(), DEADLINE))

    want = outcome("asyncio")
    assert want is not None
    assert outcome(name) == want


@pytest.mark.parametrize("size", [4096, 1 << 20])
def test_an_o_direct_file_is_left_to_the_general_path_and_sent_as_on_asyncio(tmp_path, size):
    # The page cache holds the file, but an O_DIRECT file's sendfile(2)
    # reads the device: the native call, which holds the GIL and runs on
    # the loop's thread, leaves it alone; the bytes, count and position
    # are asyncio's.
    path, data = _file(tmp_path, size, 9)
    native = []

    async def main(name):
        loop = asyncio.get_running_loop()
        t, peer, _ = await _pair(loop)
        tx = getattr(t, "_tx", None)
        if tx is not None:
            t._tx = _Spy(tx, native)
        got = loop.run_in_executor(None, _read_all, peer)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        with open(fd, "rb", buffering=0) as f:
            n = await loop.sendfile(t, f, 0, None)
            at = f.tell()
        t.close()
        return n, at, await got == data

    want = run_on("asyncio", asyncio.wait_for(main("asyncio"), DEADLINE))
    assert want == (size, size, True)
    assert run_on("blockio-uring", asyncio.wait_for(main("blockio-uring"), DEADLINE)) == want
    assert native and all(r is None for r in native)


class _Spy:
    """A transport's ``_tx`` whose ``sendfile`` (the native call) records
    what it returned in ``results``."""

    def __init__(self, tx, results):
        self._tx = tx
        self._results = results

    def __getattr__(self, name):
        return getattr(self._tx, name)

    def sendfile(self, *args):
        r = self._tx.sendfile(*args)
        self._results.append(r)
        return r
