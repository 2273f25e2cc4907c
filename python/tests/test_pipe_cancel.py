"""A read of a pipe cancelled while it waits for bytes: the bytes the
kernel hands over afterwards are not lost, on both backends, binary and
text. A file that owns the pipe waits for bytes in the event loop's poll,
taking nothing, so they stay in the pipe; one that does not
(``closefd=False``) reads it on a thread, and a read blocked in the kernel
cannot be taken back, so the file keeps it, and its bytes come first in the
file's next read, after what the cancelled call had already read (which it
put back).

Every call that must return is bounded by a 30 s guard; the cancelled one
is cancelled while it waits for a line or bytes that are not there."""

import asyncio
import fcntl
import os
import struct
import termios
import threading
import time

import pytest

import blockio
from waits import await_until, waits_for_bytes, watched

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
MODES = pytest.mark.parametrize("mode", ["rb", "r"])


def text(mode, b):
    return b if "b" in mode else b.decode()


async def readline(f):
    return await f.readline()


async def read100(f):
    return await f.read(100)


async def readall(f):
    return await f.read()


async def readlines(f):
    return await f.readlines()


async def cancelled_while_waiting(f, call):
    """Starts ``call(f)``, lets it wait for bytes that are not in the pipe
    yet, and cancels it."""
    task = asyncio.ensure_future(call(f))
    # (blocked in a read: whatever the pipe held is taken, more is awaited)
    await await_until(lambda: waits_for_bytes(f.fileno()), "the call waits for the pipe")
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@BACKENDS
@MODES
@pytest.mark.parametrize("call", [readline, read100, readall, readlines])
def test_cancelled_pipe_read_then_writer_closes_loses_nothing(backend, mode, call):
    """``abc`` in the pipe, a read cancelled waiting for more, then
    ``def\\nghi\\n`` written and the writer closed: ``read()`` returns all
    of ``abcdef\\nghi\\n``."""

    async def main():
        with blockio.Engine(backend=backend) as e:
            r, w = os.pipe()
            f = await blockio.open(r, mode, engine=e)
            try:
                os.write(w, b"abc")
                await cancelled_while_waiting(f, call)
                os.write(w, b"def\nghi\n")
                os.close(w)
                assert await asyncio.wait_for(f.read(), 30) == text(mode, b"abcdef\nghi\n")
            finally:
                await f.close()

    asyncio.run(main())


@BACKENDS
@MODES
@pytest.mark.parametrize("call", [readline, read100, readall, readlines])
def test_cancelled_pipe_read_then_next_readline_returns_the_whole_line(backend, mode, call):
    """The writer kept open: after the cancelled read and a write of
    ``def\\nghi\\n``, the next ``readline()`` returns ``abcdef\\n`` (the
    lines are in the pipe: it must not wait), and then ``ghi\\n``."""

    async def main():
        with blockio.Engine(backend=backend) as e:
            r, w = os.pipe()
            f = await blockio.open(r, mode, engine=e)
            try:
                os.write(w, b"abc")
                await cancelled_while_waiting(f, call)
                os.write(w, b"def\nghi\n")
                assert await asyncio.wait_for(f.readline(), 30) == text(mode, b"abcdef\n")
                assert await asyncio.wait_for(f.readline(), 30) == text(mode, b"ghi\n")
                os.close(w)
                assert await asyncio.wait_for(f.read(), 30) == text(mode, b"")
            finally:
                await f.close()

    asyncio.run(main())


@BACKENDS
def test_read_cancelled_in_one_loop_hands_its_bytes_to_the_next_loop(backend):
    """The read left running by a cancelled call is taken by the file's
    next read even in another event loop."""
    r, w = os.pipe()
    with blockio.Engine(backend=backend) as e:

        async def first():
            f = await blockio.open(r, "rb", engine=e)
            await cancelled_while_waiting(f, readline)
            return f

        f = asyncio.run(first())
        os.write(w, b"one\ntwo\n")
        os.close(w)

        async def second():
            try:
                return await asyncio.wait_for(f.read(), 30)
            finally:
                await f.close()

        assert asyncio.run(second()) == b"one\ntwo\n"


@BACKENDS
@MODES
@pytest.mark.parametrize("closefd", [True, False], ids=["owned", "not-owned"])
def test_a_pipe_read_cancelled_after_its_bytes_arrived_leaves_them_to_the_next_read(backend, mode, closefd):
    """The cancellation comes after the bytes reached the pipe but before
    the waiting task runs again (so the task ends cancelled, not with the
    bytes): the next read returns them, and every line written arrives
    once, in order. The file has taken nothing, whoever owns the
    descriptor: its read waits in the event loop's poll, whose reader has
    fired (the loop no longer watches the pipe) and scheduled the read's
    task when it is cancelled."""

    async def main():
        with blockio.Engine(backend=backend) as e:
            r, w = os.pipe()
            f = await blockio.open(r, mode, engine=e, closefd=closefd)
            try:
                binary = f if "b" in mode else f.buffer
                task = asyncio.ensure_future(f.readline())
                await await_until(lambda: watched(r), "the read waits in the loop's poll")
                os.write(w, b"first\n")
                # Until the loop's reader has fired (it stops watching
                # the pipe as it wakes the read): the read's task is
                # then scheduled, behind this one, and has not run.
                while watched(r):
                    await asyncio.sleep(0)
                assert not task.done()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                os.write(w, b"second\n")
                os.close(w)
                assert await asyncio.wait_for(f.readline(), 30) == text(mode, b"first\n")
                assert await asyncio.wait_for(f.read(), 30) == text(mode, b"second\n")
            finally:
                await f.close()
                if not closefd:
                    os.close(r)

    asyncio.run(main())


@BACKENDS
@MODES
def test_lines_read_under_random_cancellation_all_arrive_in_order(backend, mode):
    """A reader whose every ``readline`` is given 0.1 ms (most are
    cancelled, some just after their bytes came) gets every line once, in
    order."""
    lines = [b"%d\n" % i for i in range(200)]

    def writer(w):
        for line in lines:
            os.write(w, line)
            time.sleep(0.001)  # (lines come apart, some while a read is being cancelled)
        os.close(w)

    async def main():
        with blockio.Engine(backend=backend) as e:
            r, w = os.pipe()
            t = threading.Thread(target=writer, args=(w,))
            t.start()
            got = []
            f = await blockio.open(r, mode, engine=e)
            try:
                while True:
                    try:
                        line = await asyncio.wait_for(f.readline(), 0.0001)
                    except asyncio.TimeoutError:
                        continue
                    if not line:
                        break
                    got.append(line)
            finally:
                await f.close()
                t.join()
            assert got == [text(mode, x) for x in lines]

    asyncio.run(main())


TRIALS = 50


async def _cancelled_aread_then_aread(e, r, w, submitted):
    """An ``Engine.aread`` of the empty pipe ``r``, cancelled just after
    bytes reach the pipe (before the loop has run again), or once its
    read is in the engine (``submitted``: the pipe had its bytes before,
    and the read started after waiting for them); then the next read."""
    if submitted:
        os.write(w, b"hello")
    task = asyncio.ensure_future(e.aread(r, offset=0, length=100))
    if submitted:
        while e._core.pending() == 0 and not task.done():  # (until the read is in the engine)
            await asyncio.sleep(0)
    else:
        for _ in range(3):
            await asyncio.sleep(0)
        os.write(w, b"hello")
    task.cancel()
    try:
        first = await task
    except asyncio.CancelledError:
        first = b""
    if first:
        return first
    return await asyncio.wait_for(e.aread(r, offset=0, length=100), 30)


@BACKENDS
@pytest.mark.parametrize("submitted", [False, True], ids=["waiting", "submitted"])
def test_engine_aread_of_a_pipe_cancelled_leaves_its_bytes_to_the_next_read(backend, submitted):
    """On a pipe, an ``Engine.aread`` whose task is cancelled as
    bytes arrive loses none of them: the next read gets them (as a
    ``blockio.open`` file's next read does), in every trial, whether the
    cancellation came while the read waited for the pipe or once its read
    was in the engine."""
    e = blockio.Engine(backend=backend)
    try:
        for trial in range(TRIALS):
            r, w = os.pipe()
            try:
                got = asyncio.run(_cancelled_aread_then_aread(e, r, w, submitted))
            finally:
                os.close(r)
                os.close(w)
            assert got == b"hello", trial
    finally:
        e.close()


@BACKENDS
def test_engine_aread_of_a_pipe_cancelled_under_trio_leaves_its_bytes_to_the_next_read(backend):
    """Under trio: an ``Engine.aread`` of an empty pipe whose
    cancel scope is cancelled just after bytes reach the pipe (before the
    run has looked at it again) loses none of them: the next read gets
    them, in every trial."""
    import trio
    import trio.testing

    e = blockio.Engine(backend=backend)

    async def trial(r, w):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as n:
                async def reader():
                    await e.aread(r, offset=0, length=100)

                n.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                os.write(w, b"hello")
                scope.cancel()
        with trio.fail_after(30):
            return await e.aread(r, offset=0, length=100)

    try:
        for k in range(TRIALS):
            r, w = os.pipe()
            try:
                got = trio.run(trial, r, w)
            finally:
                os.close(r)
                os.close(w)
            assert got == b"hello", k
    finally:
        e.close()


FIFO_TRIALS = 200


def _queued(fd):
    """How many bytes the pipe or FIFO ``fd`` holds (``FIONREAD``)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


async def _read_by(e, r, call):
    """One read of up to 100 bytes of ``r`` at offset 0 by ``call``
    (``aread`` or ``areadinto``)."""
    if call == "aread":
        return await e.aread(r, offset=0, length=100)
    buf = bytearray(100)
    n = await e.areadinto(r, buf, 0)
    return bytes(buf[:n])


async def _fifo_race(e, r, w, call="aread"):
    """``FIFO_TRIALS`` reads of the FIFO ``r`` by ``call``, each cancelled
    at another point: while it waits for the FIFO, just after its bytes
    arrive, or (every third trial) once its read has taken the bytes from
    the FIFO (``FIONREAD`` says none is left) and before its task has
    them, the point where a read that drops what it took loses them; then
    the rest read to the end. Returns what came out, in order, and what
    was written, and how many trials were cancelled at that last point."""
    sent = []
    got = []
    taken = 0
    for trial in range(FIFO_TRIALS):
        chunk = b"<%03d>" % trial
        if trial % 3 == 2:
            os.write(w, chunk)
            task = asyncio.ensure_future(_read_by(e, r, call))
            while _queued(r) and not task.done():
                await asyncio.sleep(0)
            taken += not task.done()
        else:
            task = asyncio.ensure_future(_read_by(e, r, call))
            for _ in range(trial % 4):
                await asyncio.sleep(0)
            os.write(w, chunk)
            for _ in range(trial % 5):
                await asyncio.sleep(0)
        sent.append(chunk)
        task.cancel()
        try:
            got.append(await task)
        except asyncio.CancelledError:
            pass
    os.close(w)
    while True:
        more = await asyncio.wait_for(_read_by(e, r, call), 30)
        if not more:
            return b"".join(got), b"".join(sent), taken
        got.append(more)


@BACKENDS
@pytest.mark.parametrize("call", ["aread", "areadinto"])
@pytest.mark.parametrize("loop_name", ["asyncio", "blockio-uring", "blockio-epoll"])
def test_engine_aread_of_a_fifo_opened_by_number_cancelled_loses_no_byte(tmp_path, backend, loop_name, call):
    """A FIFO opened with ``os.open`` (``O_RDONLY | O_NONBLOCK``: its flags
    are a regular file's) and read by number with ``Engine.aread`` or
    ``areadinto``, each read cancelled at another point of the race with
    its bytes: every byte written arrives, once, in order, as from a pipe
    (the bytes a cancelled read took are kept for the next read; they
    used to be dropped). Some
    trials are cancelled after the read took its bytes, the point that
    loses them when they are dropped."""
    from loops import run_on

    path = tmp_path / "fifo"
    os.mkfifo(path)
    r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    e = blockio.Engine(backend=backend)
    try:
        got, sent, taken = run_on(loop_name, _fifo_race(e, r, w, call))
    finally:
        e.close()
        os.close(r)
    assert got == sent
    assert taken >= 1, "no read was cancelled after taking its bytes: the race proves nothing"


@BACKENDS
def test_engine_aread_of_a_fifo_opened_by_number_cancelled_under_trio_loses_no_byte(tmp_path, backend):
    """Under trio: an ``Engine.aread`` of an empty FIFO opened with
    ``os.open`` whose cancel scope is cancelled just after bytes reach the
    FIFO loses none of them: the next read gets them, in every trial."""
    import trio
    import trio.testing

    path = tmp_path / "fifo"
    os.mkfifo(path)
    e = blockio.Engine(backend=backend)

    async def trial(r, w, chunk):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as n:
                async def reader():
                    await e.aread(r, offset=0, length=100)

                n.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                os.write(w, chunk)
                scope.cancel()
        with trio.fail_after(30):
            return await e.aread(r, offset=0, length=100)

    r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        for k in range(TRIALS):
            chunk = b"<%03d>" % k
            assert trio.run(trial, r, w, chunk) == chunk, k
    finally:
        e.close()
        os.close(r)
        os.close(w)
