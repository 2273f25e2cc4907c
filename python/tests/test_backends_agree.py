"""What a hostile pass found the two backends disagreeing on, or either
doing what ``os.read`` does not: a pidfd read, a cancelled read of an
empty pipe or socket, a synchronous wait cut short by ``close()``, an
explicit backend against ``BLOCKIO_BACKEND``, and a path holding a NUL
byte among ``read_files``' paths. Each test runs on both backends."""

import asyncio
import errno
import os
import socket
import threading
import time

import pytest

import blockio
from waits import await_until, blocked_in, wait_until, watched


def test_a_pidfd_read_fails_at_once_with_einval_as_os_read(engine):
    """A pidfd has no read: ``os.read`` fails with ``EINVAL`` at once,
    where io_uring's read waited for the process to exit (never, for this
    one) and the synchronous batch waited for readiness as long."""
    pfd = os.pidfd_open(os.getpid())
    try:
        with pytest.raises(OSError) as want:
            os.read(pfd, 10)
        with pytest.raises(OSError) as got:
            engine.read_batch(pfd, offsets=[0], length=10)
        assert got.value.errno == want.value.errno == errno.EINVAL

        async def main():
            with pytest.raises(OSError) as got:
                await asyncio.wait_for(engine.aread(pfd, offset=0, length=10), 30)
            return got.value.errno

        assert asyncio.run(main()) == errno.EINVAL
    finally:
        os.close(pfd)


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_a_cancelled_read_of_an_empty_stream_leaves_the_next_bytes_to_the_next_read(engine, kind):
    """An ``aread`` of an empty pipe or socket cancelled by ``wait_for``
    takes none of the bytes written right after it: the next read gets
    them (on the thread backend the cancelled read's thread does not stay
    in ``read`` to take them)."""
    if kind == "socket":
        a, b = socket.socketpair()
        rfd, send, closing = a.fileno(), b.send, (a, b)
    else:
        rfd, wfd = os.pipe()
        send, closing = (lambda d: os.write(wfd, d)), ()

    async def main():
        got = []
        for i in range(5):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(engine.aread(rfd, offset=0, length=10), 0.05)
            send(b"after%d" % i)
            got.append(await asyncio.wait_for(engine.aread(rfd, offset=0, length=10), 30))
        return got

    try:
        assert asyncio.run(main()) == [b"after%d" % i for i in range(5)]
    finally:
        for s in closing:
            s.close()
        if kind == "pipe":
            os.close(rfd)
            os.close(wfd)


@pytest.mark.parametrize("call", ["read_batch", "readinto_batch"])
def test_close_ends_a_synchronous_read_waiting_in_another_thread(call):
    """``Engine.close()`` from one thread ends a synchronous read that
    another thread has waiting on an empty pipe, with ``ECANCELED``, as it
    cancels the asynchronous ones; the pipe's later bytes stay in it."""
    for backend in ("uring", "threads"):
        engine = blockio.Engine(backend=backend)
        rfd, wfd = os.pipe()
        out = []

        def reader():
            try:
                if call == "read_batch":
                    out.append(engine.read_batch(rfd, offsets=[0], length=10))
                else:
                    out.append(engine.readinto_batch([(rfd, bytearray(10), 0)]))
            except OSError as e:
                out.append(e)

        t = threading.Thread(target=reader)
        t.start()
        wait_until(lambda: blocked_in("poll", tid=t.native_id), "the read waits for the pipe")
        engine.close()
        t.join(30)
        try:
            assert not t.is_alive()
            assert isinstance(out[0], OSError) and out[0].errno == errno.ECANCELED, (backend, out)
            assert "closed" in str(out[0])
            os.write(wfd, b"late")
            assert os.read(rfd, 10) == b"late"
        finally:
            os.close(rfd)
            os.close(wfd)


@pytest.mark.parametrize("env,arg", [("threads", "uring"), ("uring", "threads")])
def test_an_explicit_backend_that_contradicts_the_environment_is_refused(monkeypatch, env, arg):
    """``BLOCKIO_BACKEND`` chooses every engine's backend; an explicit
    ``backend=`` that says otherwise raises ``ValueError`` naming both,
    never silently gives the other backend."""
    monkeypatch.setenv("BLOCKIO_BACKEND", env)
    with pytest.raises(ValueError, match=f"backend=\"{arg}\".*BLOCKIO_BACKEND"):
        blockio.Engine(backend=arg)
    e = blockio.Engine(backend="auto")
    try:
        assert e.backend == ("threads" if env == "threads" else "uring")
    finally:
        e.close()
    same = blockio.Engine(backend="threads" if env == "threads" else "uring")
    same.close()


@pytest.mark.parametrize("how", ["blocking", "async"])
def test_a_path_with_a_nul_byte_fails_in_its_place(engine, tmp_path, how):
    """A path holding a NUL byte is the built-in ``open``'s ``ValueError``
    in its place with ``return_exceptions=True`` (the other files are
    read), and raised without it."""
    good = tmp_path / "good"
    good.write_bytes(b"data")
    paths = [good, str(tmp_path / "bad\0name"), tmp_path / "missing"]
    with pytest.raises(ValueError) as want:
        open(paths[1], "rb")

    def run(return_exceptions):
        if how == "blocking":
            return engine.read_files(paths, return_exceptions=return_exceptions)
        return asyncio.run(engine.aread_files(paths, return_exceptions=return_exceptions))

    got = run(True)
    assert got[0] == b"data"
    assert type(got[1]) is ValueError and str(got[1]) == str(want.value)
    assert isinstance(got[2], FileNotFoundError)
    with pytest.raises(ValueError, match="embedded null byte"):
        run(False)


def test_reads_and_writes_of_no_bytes_on_a_stream_return_at_once(engine):
    """Operations of no bytes on an empty pipe (or a full one, to write)
    return at once, as ``os.read(fd, 0)`` and ``os.write(fd, b"")`` do:
    nothing waits for the descriptor to become ready."""
    r, w = os.pipe()
    try:
        os.set_blocking(w, False)
        while True:  # fill the pipe
            try:
                os.write(w, b"x" * 65536)
            except BlockingIOError:
                break
        os.set_blocking(w, True)
        assert engine.readinto_batch([(r, bytearray(0), 0)]) == [0]
        assert engine.write_batch([(w, b"", 0)]) == [0]
        assert engine.read_batch(r, offsets=[0], length=0) == [b""]

        async def main():
            return (await asyncio.wait_for(engine.aread(r, offset=0, length=0), 30),
                    await asyncio.wait_for(engine.areadinto(r, bytearray(0), offset=0), 30),
                    await asyncio.wait_for(engine.aread_batch(r, offsets=[0, 0], length=0), 30))

        assert asyncio.run(main()) == (b"", 0, [b"", b""])
    finally:
        os.close(r)
        os.close(w)


def test_a_non_blocking_pipe_is_read_when_data_comes_on_both_backends(engine):
    """An empty pipe whose descriptor is non-blocking is waited for, as
    io_uring's read of it waits (``os.read`` would raise
    ``BlockingIOError``): both backends give the bytes once written."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        async def main():
            task = asyncio.ensure_future(engine.aread(r, offset=0, length=16))
            await await_until(lambda: watched(r), "the read waits for the pipe")
            os.write(w, b"late")
            return await asyncio.wait_for(task, 30)

        assert asyncio.run(main()) == b"late"
        assert not os.get_blocking(r)  # (the caller's flag is left as it was)
    finally:
        os.close(r)
        os.close(w)


def test_close_ends_synchronous_waits_beside_asynchronous_reads():
    """With an asynchronous read of an empty pipe in flight (which
    ``close`` waits a second for, then cancels), a synchronous
    ``read_batch`` waiting on another pipe in another thread ends with
    ``ECANCELED`` too (it looks at whether ``close`` has started, every
    100 ms), and the asynchronous read is cancelled."""
    for backend in ("uring", "threads"):
        engine = blockio.Engine(backend=backend)
        ra, wa = os.pipe()
        rs, ws = os.pipe()
        ended = []

        def reader():
            try:
                engine.read_batch(rs, offsets=[0], length=8)
            except OSError as e:
                ended.append((time.monotonic(), e.errno))

        async def main():
            task = asyncio.ensure_future(engine.aread(ra, offset=0, length=8))
            t = threading.Thread(target=reader)
            t.start()
            await await_until(lambda: watched(ra) and blocked_in("poll", tid=t.native_id),
                              "both reads wait for their pipes")
            engine.close()
            closed_at = time.monotonic()
            t.join(30)
            with pytest.raises(OSError):
                await task
            return closed_at

        try:
            asyncio.run(main())
            assert ended and ended[0][1] == errno.ECANCELED, (backend, ended)
        finally:
            for fd in (ra, wa, rs, ws):
                os.close(fd)


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_a_stream_is_read_once_at_offset_0_and_refused_at_another_as_os_pread(engine, kind):
    """An ``aread`` of a pipe or socket larger than what it holds returns
    what it holds, as one ``os.read`` does, on both backends (io_uring read
    on past it, waiting for more, once the read was past 64 KiB; the thread
    pool returned it); at an offset other than 0 it raises ``ESPIPE``, as
    ``os.pread`` does, and takes nothing from the stream (io_uring ignored
    the offset and read)."""
    if kind == "socket":
        a, b = socket.socketpair()
        rfd, send, closing = a.fileno(), b.sendall, [a, b]
    else:
        rfd, wfd = os.pipe()
        send, closing = (lambda d: os.write(wfd, d)), []
    try:
        with pytest.raises(OSError) as want:
            os.pread(rfd, 10, 5)
        assert want.value.errno == errno.ESPIPE

        async def main():
            send(b"a" * 40_000)
            first = await asyncio.wait_for(engine.aread(rfd, offset=0, length=200_000), 30)
            send(b"b" * 1000)
            with pytest.raises(OSError) as refused:
                await asyncio.wait_for(engine.aread(rfd, offset=5, length=200_000), 30)
            with pytest.raises(OSError) as small:
                await asyncio.wait_for(engine.aread(rfd, offset=5, length=10), 30)
            rest = await asyncio.wait_for(engine.aread(rfd, offset=0, length=200_000), 30)
            return first, refused.value, small.value, rest

        first, refused, small, rest = asyncio.run(main())
        assert first == b"a" * 40_000
        assert refused.errno == small.errno == errno.ESPIPE
        assert "offset 5" in str(refused), str(refused)
        assert rest == b"b" * 1000
    finally:
        for s in closing:
            s.close()
        if kind == "pipe":
            os.close(rfd)
            os.close(wfd)


def test_batch_reads_of_a_pipe_are_refused_at_an_offset_other_than_0_as_os_pread(engine):
    """``read_batch``, ``aread_batch``, ``readinto_batch`` and
    ``areadinto_batch`` of a pipe: each read at an offset other than 0
    fails with ``ESPIPE`` in its place, as ``os.pread`` (and ``aread``),
    and takes nothing from the pipe (io_uring ignored the offset and
    read); a read at 0 in the same batch reads, on both backends."""
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, bytes(range(100)))

        def results(got):
            return [r if isinstance(r, bytes) else r.errno if isinstance(r, OSError) else r for r in got]

        assert results(engine.read_batch(rfd, offsets=[0, 5], length=10, return_exceptions=True)) == [
            bytes(range(10)), errno.ESPIPE]
        buf = bytearray(10)
        assert results(engine.readinto_batch([(rfd, buf, 5), (rfd, buf, 0)], return_exceptions=True)) == [
            errno.ESPIPE, 10]
        assert buf == bytes(range(10, 20))

        async def main():
            a = await asyncio.wait_for(engine.aread_batch(rfd, offsets=[5, 0], length=10, return_exceptions=True), 30)
            b = bytearray(10)
            c = await asyncio.wait_for(engine.areadinto_batch([(rfd, b, 0), (rfd, b, 7)], return_exceptions=True), 30)
            with pytest.raises(OSError) as refused:
                await asyncio.wait_for(engine.aread_batch(rfd, offsets=[5], length=10), 30)
            return results(a), results(c), bytes(b), refused.value

        a, c, b, refused = asyncio.run(main())
        assert a == [errno.ESPIPE, bytes(range(20, 30))]
        assert c == [10, errno.ESPIPE] and b == bytes(range(30, 40))
        assert refused.errno == errno.ESPIPE and "offset 5" in str(refused), str(refused)
        assert os.read(rfd, 100) == bytes(range(40, 100))  # (nothing taken by a refused read)
    finally:
        os.close(rfd)
        os.close(wfd)


class _Named:
    """A file-like object with a name, over descriptor ``fd``."""

    def __init__(self, fd, name):
        self.fd, self.name = fd, name

    def fileno(self):
        return self.fd


@pytest.mark.parametrize("length", [10, 100_000])  # (the second: a read into its own bytes object)
def test_a_batch_read_refused_for_its_offset_names_the_read_and_the_file(engine, length):
    """Each batch API's ``ESPIPE`` for a read at an offset other than 0 of
    a socket is an ``OSError`` worded as ``os.pread``'s and ``aread``'s:
    the read's length and offset, the descriptor, "Illegal seek", and the
    file's name as its ``filename``; raised when the batch does not return
    exceptions, and nothing taken from the stream."""
    a, b = socket.socketpair()
    try:
        fd = a.fileno()
        f = _Named(fd, "the-stream")
        b.sendall(bytes(range(50)))
        want = f"read of {length} bytes at offset 7 on fd {fd} failed: Illegal seek"
        buf = bytearray(length)

        def check(e):
            assert type(e) is OSError and e.errno == errno.ESPIPE, repr(e)
            assert e.strerror == want and e.filename == "the-stream", repr(e)

        for got in (engine.read_batch(f, offsets=[7], length=length, return_exceptions=True),
                    engine.readinto_batch([(f, buf, 7)], return_exceptions=True)):
            check(got[0])
        with pytest.raises(OSError) as raised:
            engine.read_batch(f, offsets=[7], length=length)
        check(raised.value)

        async def main():
            got = [await engine.aread_batch(f, offsets=[7], length=length, return_exceptions=True),
                   await engine.areadinto_batch([(f, buf, 7)], return_exceptions=True)]
            with pytest.raises(OSError) as raised:
                await engine.areadinto_batch([(f, buf, 7)])
            return [g[0] for g in got] + [raised.value]

        for e in asyncio.run(main()):
            check(e)
        assert engine.read_batch(f, offsets=[0], length=50) == [bytes(range(50))]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("length", [5, 100_000])  # (the second: a read into its own bytes object)
def test_a_fifo_opened_by_its_path_is_refused_at_an_offset_other_than_0(engine, tmp_path, length):
    """A FIFO opened by its path has ``open``'s flags, as a regular file
    has; still every batch read at an offset other than 0 of it fails with
    ``ESPIPE`` (as ``os.pread``'s) on both backends, takes nothing from the
    stream and, the FIFO drained, does not wait for bytes."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(path, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as pread:
            os.pread(r, 5, 7)
        assert pread.value.errno == errno.ESPIPE

        def refused(got):
            assert type(got) is OSError and got.errno == errno.ESPIPE, repr(got)

        async def batches():
            return [(await engine.aread_batch(r, offsets=[7], length=length, return_exceptions=True))[0],
                    (await engine.areadinto_batch([(r, bytearray(5), 7)], return_exceptions=True))[0]]

        for got in asyncio.run(batches()):  # (drained: a read made would wait)
            refused(got)
        os.write(w, b"abcde")
        got = engine.read_batch(r, offsets=[0, 7], length=length, return_exceptions=True)
        assert got[0] == b"abcde"  # (all the stream: nothing taken by the read at 7)
        refused(got[1])
        os.write(w, b"klmno")
        refused(engine.readinto_batch([(r, bytearray(5), 7)], return_exceptions=True)[0])
        for got in asyncio.run(batches()):
            refused(got)
        assert os.read(r, 100) == b"klmno"
    finally:
        os.close(r)
        os.close(w)


def test_an_o_path_descriptor_fails_a_batch_read_with_ebadf_as_os_pread(engine, tmp_path):
    """An ``O_PATH`` descriptor of a FIFO (``fstat`` sees the FIFO) is not
    read: ``EBADF``, as ``os.pread``'s, not the ``ESPIPE`` of an offset;
    and reads into one buffer twice are refused as on any file."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    fd = os.open(path, os.O_PATH)
    try:
        with pytest.raises(OSError) as pread:
            os.pread(fd, 5, 7)
        assert pread.value.errno == errno.EBADF
        got = engine.read_batch(fd, offsets=[7], length=5, return_exceptions=True)
        assert type(got[0]) is OSError and got[0].errno == errno.EBADF, repr(got[0])
        buf = bytearray(5)
        got = engine.readinto_batch([(fd, buf, 7)], return_exceptions=True)
        assert type(got[0]) is OSError and got[0].errno == errno.EBADF, repr(got[0])
        with pytest.raises(ValueError):
            engine.readinto_batch([(fd, buf, 7), (fd, buf, 7)], return_exceptions=True)
    finally:
        os.close(fd)


def test_a_character_device_with_offsets_is_read_at_any_offset(engine):
    """``/dev/zero`` takes ``pread`` at any offset: so does ``aread`` on
    both backends, one read of the length asked (past 64 KiB too)."""
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        assert os.pread(fd, 10, 5) == bytes(10)

        async def main():
            return (await asyncio.wait_for(engine.aread(fd, offset=5, length=10), 30),
                    await asyncio.wait_for(engine.aread(fd, offset=5, length=200_000), 30))

        assert asyncio.run(main()) == (bytes(10), bytes(200_000))
    finally:
        os.close(fd)
