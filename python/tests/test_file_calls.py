"""A binary file's ``read``, ``readinto``, ``seek``, ``tell``, ``readline`` and ``write`` return a ``FileCall``
(``python/src/call.rs``), a coroutine object whose first step serves the
call inline (returning at once) or runs the queued call's coroutine. It
must pass for a coroutine wherever one is taken: ``await``, asyncio's tasks
(``create_task``, ``ensure_future``, ``wait_for``, ``gather``), trio's
``start_soon`` and anyio's task groups, ``send``, ``throw``, ``close``;
and, as a coroutine, do nothing until it is first stepped. Both backends;
asyncio, uvloop, trio and anyio on both."""

import array
import asyncio
import collections.abc
import gc
import inspect
import os
import tracemalloc
import warnings
from unittest import mock

import anyio
import pytest
import trio
import uvloop

import blockio
import loops
from blockio._blockio import TURN_BUDGET, FileCall, set_turn_count

DATA = bytes(range(256)) * 64  # 16 KiB


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "data.bin"
    p.write_bytes(DATA)
    p.read_bytes()  # (in the page cache: reads of it are served inline)
    return p


def run(loop_name, main):
    if loop_name == "uvloop":
        return uvloop.run(main())
    if loop_name in loops.FACTORIES and loop_name != "asyncio":
        return loops.run_on(loop_name, main())
    return asyncio.run(main())


LOOPS = pytest.mark.parametrize("loop_name", loops.NAMES)


def first_step(call):
    """Steps ``call`` once: ``("returned", value)`` if it returned there
    (served inline), ``("yielded", value)`` if it suspended."""
    try:
        return "yielded", call.send(None)
    except StopIteration as done:
        return "returned", done.value


@LOOPS
def test_calls_served_inline_return_at_their_first_step(path, engine, loop_name):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(0)
            r, t, s = f.read(10), f.tell(), f.seek(100)
            assert (type(r), type(t), type(s)) == (FileCall, FileCall, FileCall)
            assert f._pos == 0  # (made, not started: nothing done yet)
            got = [first_step(r)]
            assert f._pos == 10
            got += [first_step(t), first_step(s)]
            return got, f._pos, await f.read(3)

    got, pos, more = run(loop_name, main)
    assert got == [("returned", DATA[:10]), ("returned", 10), ("returned", 100)]
    assert (pos, more) == (100, DATA[100:103])


@LOOPS
def test_calls_not_served_inline_run_the_queued_call(path, engine, loop_name):
    async def main():
        async with blockio.open(path, "r+b", engine=engine) as f:
            await f.seek(4)
            assert await f.write(b"xy") == 2  # buffered: tell and read flush it
            t = f.tell()
            assert type(t) is FileCall
            told = await t
            set_turn_count(TURN_BUDGET - 1)  # (the next read takes its turn)
            r = f.read(4)
            how, _ = first_step(r)  # (suspends: the read goes through the queue)
            got = await r
            set_turn_count(0)
            return told, how, got

    assert run(loop_name, main) == (6, "yielded", DATA[6:10])


@LOOPS
def test_readline_and_write_are_file_calls_served_at_their_first_step(tmp_path, engine, loop_name):
    """``readline`` and ``write`` return a ``FileCall`` too, named as its
    method: a line in the read buffer, and bytes that go into the write
    buffer, are served at the call's first step; else the queued call
    runs (the first line, which fills the buffer; the first write after a
    seek), in order with the file's other calls."""
    p = tmp_path / "lines.bin"
    p.write_bytes(b"one\ntwo\nthree\n")

    async def main():
        async with blockio.open(p, "r+b", engine=engine) as f:
            first = f.readline()
            assert type(first) is FileCall
            assert (first.__name__, first.__qualname__) == ("readline", "AsyncFile.readline")
            assert await first == b"one\n"
            set_turn_count(0)
            got = [first_step(f.readline())]  # (in the buffer)
            await f.seek(0, os.SEEK_END)
            w = f.write(b"four\n")
            assert type(w) is FileCall
            assert (w.__name__, w.__qualname__) == ("write", "AsyncFile.write")
            assert await w == 5
            set_turn_count(0)
            got.append(first_step(f.write(b"five\n")))  # (into the buffer)
            got.append(await f.tell())
        return got

    assert run(loop_name, main) == [("returned", b"two\n"), ("returned", 5), 24]
    assert p.read_bytes() == b"one\ntwo\nthree\nfour\nfive\n"


@LOOPS
def test_readinto_is_a_file_call_served_straight_into_the_buffer(path, engine, loop_name):
    """``readinto`` returns a ``FileCall`` named as its method; into a
    writable buffer of bytes (a ``bytearray``, a ``memoryview`` of one),
    cached bytes and bytes in the read buffer are read at its first step,
    the queued ``_readinto`` never called; at the file's end it stops
    short, as the built-in's. A buffer of another format, a turn due and
    a read-only buffer go through the queued call, with the built-in's
    results and errors; after its turn, it too reads cached bytes into
    the buffer itself, not through the engine."""
    calls = []
    queued = blockio.AsyncFile._readinto

    def counted(self, buf):
        calls.append(len(memoryview(buf).cast("B")))
        return queued(self, buf)

    async def main():
        with mock.patch.object(blockio.AsyncFile, "_readinto", counted):
            async with blockio.open(path, "rb", engine=engine) as f:
                b = bytearray(100)
                call = f.readinto(b)
                assert type(call) is FileCall
                assert (call.__name__, call.__qualname__) == ("readinto", "AsyncFile.readinto")
                set_turn_count(0)
                got = [first_step(call), bytes(b)]
                assert await f.read(10) == DATA[100:110]  # (reads ahead: bytes held)
                m = memoryview(bytearray(20))
                set_turn_count(0)
                got += [first_step(f.readinto(m)), bytes(m)]  # (from the read buffer)
                await f.seek(len(DATA) - 5)
                set_turn_count(0)
                got += [first_step(f.readinto(b)), bytes(b[:5])]  # (short: the end)
                assert calls == []
                await f.seek(0)
                a = array.array("h", [0] * 4)  # (not of bytes: queued)
                assert await f.readinto(a) == 8 and a.tobytes() == DATA[:8]
                set_turn_count(TURN_BUDGET - 1)  # (the turn is due: queued)
                c = bytearray(4)
                before = engine._core.reads_started
                assert await f.readinto(c) == 4 and c == DATA[8:12]
                # (read from the page cache after its turn, not by the engine)
                assert engine._core.reads_started == before
                set_turn_count(0)
                with pytest.raises(TypeError, match="read-write bytes-like object"):
                    await f.readinto(b"read-only")
                return got, calls, await f.tell()

    got, queued_calls, pos = run(loop_name, main)
    assert got == [("returned", 100), DATA[:100], ("returned", 20), DATA[110:130],
                   ("returned", 5), DATA[-5:]]
    assert queued_calls == [8, 4, 9]
    assert pos == 12


@LOOPS
@pytest.mark.parametrize("n", [1, 100, 4096, 5000, 8191])
def test_small_readintos_read_ahead_as_reads_do(tmp_path, engine, loop_name, n):
    """A buffered file's ``readinto`` of a buffer smaller than its own
    reads ahead, as ``read(n)`` does and the built-in buffered file's
    ``readinto`` does (one system call per buffer, not per call): after
    the first call (a read since the open, not since a seek) bytes are
    held; every call of a loop over 1 MiB (64 KiB for 1 and 100 bytes) is
    served at its first step,
    those that run past the bytes held included (5000 and 8191 bytes
    divide no buffer), the engine never used; the bytes are the file's,
    the last call short at its end, then 0. After a seek the first call
    reads what it asks for and no more, as a read does."""
    data = os.urandom((1 << 20) if n > 100 else (64 << 10))  # (fewer calls of 1 and 100 bytes)
    p = tmp_path / "big.bin"
    p.write_bytes(data)
    p.read_bytes()  # (in the page cache)

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            before = engine._core.reads_started
            buf, out, steps, held = bytearray(n), [], set(), []
            while True:
                set_turn_count(0)
                step, k = first_step(f.readinto(buf))
                steps.add(step)
                if not k:
                    break
                out.append(bytes(buf[:k]))
                held.append(f._held())
            reads = engine._core.reads_started - before
            await f.seek(3)
            set_turn_count(0)
            after_seek = first_step(f.readinto(buf)), f._held(), await f.tell()
            return b"".join(out), steps, held[0], reads, after_seek

    got, steps, first_held, reads, after_seek = run(loop_name, main)
    assert got == data
    assert steps == {"returned"}
    assert first_held > 0
    assert reads == 0
    assert after_seek == (("returned", n), 0, 3 + n)


@LOOPS
def test_the_first_write_after_a_flush_is_served_at_its_first_step(tmp_path, engine, loop_name):
    """A buffered file's write that fits its empty buffer, the position
    known, is served inline, the queued ``_write_queued`` never called:
    it sets where the buffer goes, and ``seek``, ``tell`` and reads after
    it flush the buffer first (queued), as the built-in's. Not in append
    mode, where the position is the end still to look up."""
    p = tmp_path / "w.bin"
    p.write_bytes(b"0123456789")
    calls = []
    queued = blockio.AsyncFile._write_queued

    def counted(self, data):
        calls.append(bytes(data))
        return queued(self, data)

    async def main():
        with mock.patch.object(blockio.AsyncFile, "_write_queued", counted):
            async with blockio.open(p, "r+b", engine=engine) as f:
                await f.seek(3)
                set_turn_count(0)
                got = [first_step(f.write(b"ab")), f._inline, f._inline_read]
                got += [await f.tell(), await f.read(2), await f.seek(0), await f.read(5)]
                got.append(first_step(f.write(b"Z")))  # (after a read: the buffer, flushed)
            async with blockio.open(p, "ab", engine=engine) as f:
                assert await f.write(b"!") == 1
        return got

    got = run(loop_name, main)
    assert got == [("returned", 2), False, False, 5, b"56", 0, b"012ab", ("returned", 1)]
    assert calls == [b"!"]
    assert p.read_bytes() == b"012abZ6789!"


@LOOPS
def test_file_calls_run_as_asyncio_tasks(path, engine, loop_name):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(0)
            r = f.read(4)
            assert asyncio.iscoroutine(r)
            assert isinstance(r, collections.abc.Coroutine)
            assert inspect.isawaitable(r)
            task = asyncio.create_task(r)
            first = await task
            fut = asyncio.ensure_future(f.read(4))
            assert isinstance(fut, asyncio.Task)
            second = await fut
            third = await asyncio.wait_for(f.read(4), timeout=60)
            rest = await asyncio.gather(f.seek(20), f.tell(), f.read(2))
            return first, second, third, rest

    got = run(loop_name, main)
    assert got == (DATA[:4], DATA[4:8], DATA[8:12], [20, 20, DATA[20:22]])


def test_file_calls_are_named_as_their_methods(path, engine):
    """A call's ``__name__`` and ``__qualname__`` are its method's, as a
    coroutine's are its function's: a task running one says which call it
    runs in its repr (not ``<FileCall without __name__>``)."""

    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            calls = [f.read(1), f.seek(0), f.tell()]
            names = [(c.__name__, c.__qualname__) for c in calls]
            task = asyncio.ensure_future(calls[0])
            shown = repr(task)
            await task
            for c in calls[1:]:
                await c
            return names, shown

    names, shown = run("asyncio", main)
    assert names == [("read", "AsyncFile.read"), ("seek", "AsyncFile.seek"), ("tell", "AsyncFile.tell")]
    assert "AsyncFile.read()" in shown, shown


def test_a_file_calls_name_is_read_while_it_runs(path, engine):
    """A call's name is read while the call is being thrown into (asyncio
    formats a task's repr, which asks it, from inside a ``throw``): here
    by the exception thrown in, made inside the call's ``throw``. And a
    step from inside the call's own step is refused, as a running
    coroutine's."""
    names = []
    calls = []

    class Probe(Exception):
        def __init__(self, *args):
            super().__init__(*args)
            names.append(calls[0].__qualname__)
            with pytest.raises(ValueError, match="already executing"):
                calls[0].send(None)

    async def main():
        async with blockio.open(path, "a+b", engine=engine) as f:
            calls.append(f.seek(0, 2))  # (from the end, in append mode: it waits for the size)
            calls[0].send(None)
            with pytest.raises(Probe):
                calls[0].throw(Probe)
            return await f.tell()

    run("asyncio", main)
    assert names == ["AsyncFile.seek"]


def test_file_calls_step_as_coroutines(path, engine):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(0)
            r = f.read(5)
            with pytest.raises(StopIteration) as done:
                r.send(None)
            assert done.value.value == DATA[:5]
            with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
                await r  # (awaited a second time)

            r = f.tell()
            assert r.__await__() is r and iter(r) is r
            with pytest.raises(StopIteration) as done:
                next(r)
            assert done.value.value == 5

            r = f.seek(7)
            with pytest.raises(TypeError, match="non-None"):
                r.send(1)
            assert await r == 7  # (still to run: the send was refused)

            # Thrown into, or closed, before its first step: it raises
            # (or ends) having done nothing.
            r = f.read(1)
            with pytest.raises(KeyError):
                r.throw(KeyError("k"))
            with pytest.raises(RuntimeError):
                r.send(None)
            with pytest.raises(ValueError, match="v"):
                f.read(1).throw(ValueError, "v")
            r = f.read(1)
            r.close()
            with pytest.raises(RuntimeError):
                await r
            assert f._pos == 7

            # Thrown into while its queued call waits: the queued call
            # takes the exception (a cancelled read reads nothing).
            set_turn_count(TURN_BUDGET - 1)
            r = f.read(2)
            assert first_step(r)[0] == "yielded"
            with pytest.raises(asyncio.CancelledError):
                r.throw(asyncio.CancelledError())
            set_turn_count(0)
            r = f.read(2)
            assert first_step(r)[0] == "returned"
            r.close()  # (after its end: nothing to do)
            return f._pos

    assert asyncio.run(main()) == 9


def test_file_calls_never_awaited_do_nothing_warn_of_nothing_and_hold_nothing(path, engine):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(0)
            tracemalloc.start()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    before = tracemalloc.get_traced_memory()[0]
                    for _ in range(2000):
                        f.read(4096)  # (never awaited: dropped at once)
                        f.seek(100)
                        f.tell()
                    gc.collect()
                    grown = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            return f._pos, grown, [str(w.message) for w in caught]

    pos, grown, caught = asyncio.run(main())
    assert pos == 0  # (none of them ran)
    assert caught == []
    assert grown < (100 << 10), f"{grown} bytes held after 6000 calls never awaited"


def test_cancelled_before_its_first_step_a_read_reads_nothing(path, engine):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(0)
            t = asyncio.ensure_future(f.read(10))
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            return await f.read(4)

    assert asyncio.run(main()) == DATA[:4]


@pytest.mark.parametrize("runner", ["trio", "anyio-asyncio", "anyio-trio"])
def test_file_calls_under_trio_and_anyio(path, engine, runner):
    async def main():
        f = await blockio.open(path, "rb", buffering=0, engine=engine)
        try:
            set_turn_count(0)
            first = f.read(4)
            assert type(first) is FileCall
            got = [await first]
            if runner == "trio":
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(f.seek, 10)  # (called by trio, its FileCall run as a task)
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(f.seek, 10)
            got.append(await f.tell())
            got.append(await f.read(3))
            return got
        finally:
            await f.close()

    if runner == "trio":
        got = trio.run(main)
    else:
        got = anyio.run(main, backend=runner.split("-")[1])
    assert got == [DATA[:4], 10, DATA[10:13]]


# -- coroutine functions, as aiofiles' methods are --------------------------

#: Every coroutine method of a binary file (aiofiles' plain methods
#: ``fileno``, ``readable`` and ``detach`` are plain here too).
COROUTINE_METHODS = ["read", "seek", "tell", "write", "readline", "readlines", "read1", "readall", "readinto",
                     "peek", "flush", "truncate", "seekable", "writable", "isatty", "close", "writelines"]


@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_files_methods_are_coroutine_functions_to_inspect_and_asyncio(path, engine, buffering):
    async def main():
        async with blockio.open(path, "r+b", buffering=buffering, engine=engine) as f:
            bound = {m: getattr(f, m) for m in COROUTINE_METHODS}
            in_class = {m: getattr(type(f), m) for m in ("read", "seek", "tell", "readline", "write")}
            assert [m for m, b in bound.items() if not inspect.iscoroutinefunction(b)] == []
            assert [m for m, b in bound.items() if not asyncio.iscoroutinefunction(b)] == []
            assert [m for m, b in in_class.items() if not inspect.iscoroutinefunction(b)] == []
            assert [m for m in ("fileno", "readable", "detach") if inspect.iscoroutinefunction(getattr(f, m))] == []
            # (the signatures the methods take, as the calls check them)
            assert str(inspect.signature(f.read)) == "(size=-1)"
            assert str(inspect.signature(f.seek)) == "(offset, whence=0)"
            assert str(inspect.signature(f.tell)) == "()"
            assert str(inspect.signature(f.readline)) == "(size=-1)"
            assert str(inspect.signature(f.write)) == "(data)"
            assert (f.read.__name__, f.read.__qualname__) == ("read", "AsyncFile.read")
            # (taken as values, called later, through the class, by keyword)
            read, seek = f.read, f.seek
            assert await seek(offset=3) == 3
            assert await read(size=2) == DATA[3:5]
            assert await type(f).tell(f) == 5
            assert await type(f).read(f, None) == DATA[5:]
            with pytest.raises(TypeError, match="read"):
                f.read(1, 2)
            with pytest.raises(TypeError, match="offset"):
                f.seek()
            with pytest.raises(TypeError):
                type(f).read(object())  # (not a file)

    asyncio.run(main())


def test_readline_and_write_called_wrongly_say_so_counting_the_file(path, engine):
    """A wrong call of ``readline`` or ``write`` raises the ``TypeError``
    the ``async def``s they were raised (and the built-in's bound methods
    do): the file counted among the positional arguments."""
    async def main():
        async with blockio.open(path, "r+b", engine=engine) as f:
            for call, message in [
                (lambda: f.write(b"a", b"b"), "AsyncFile.write() takes 2 positional arguments but 3 were given"),
                (lambda: f.write(), "AsyncFile.write() missing 1 required positional argument: 'data'"),
                (lambda: f.readline(1, 2),
                 "AsyncFile.readline() takes from 1 to 2 positional arguments but 3 were given"),
                (lambda: f.write(b"x", self=f), "AsyncFile.write() got multiple values for argument 'self'"),
            ]:
                with pytest.raises(TypeError) as raised:
                    call()
                assert str(raised.value) == message
            assert await f.readline(size=3) == DATA[:3]  # (by keyword still)

    asyncio.run(main())


def test_an_async_mock_specced_on_a_file_makes_awaitable_methods(path, engine):
    async def main():
        async with blockio.open(path, "rb", engine=engine) as f:
            m = mock.AsyncMock(spec=f)
            assert all(isinstance(getattr(m, n), mock.AsyncMock) for n in ("read", "seek", "tell", "readline", "write"))
            m.read.return_value = b"abc"
            m.seek.return_value = 1
            got = [await m.read(3), await m.seek(1)]
            m.read.assert_awaited_once_with(3)
            assert asyncio.iscoroutinefunction(m.read)  # (Python 3.9's inspect says False of any AsyncMock)
            return got

    assert asyncio.run(main()) == [b"abc", 1]


@LOOPS
def test_a_file_calls_state_reads_as_a_coroutines(path, engine, loop_name):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            set_turn_count(0)
            served = f.read(4)
            assert inspect.getcoroutinestate(served) == inspect.CORO_CREATED
            assert served.cr_code is f.read.__code__
            assert served.cr_frame.f_locals["size"] == 4  # (the call's arguments, before it runs)
            assert (served.cr_running, served.cr_await) == (False, None)
            assert await served == DATA[:4]
            assert inspect.getcoroutinestate(served) == inspect.CORO_CLOSED
            assert served.cr_frame is None

            set_turn_count(TURN_BUDGET - 1)  # (the next read takes its turn: it suspends)
            queued = f.read(4)
            assert first_step(queued) == ("yielded", None)  # (a bare yield: its own turn, in a task)
            assert inspect.getcoroutinestate(queued) == inspect.CORO_SUSPENDED
            assert queued.cr_await is None and queued.cr_frame.f_code.co_name == "_at_a_turn"
            assert first_step(queued) == ("returned", DATA[4:8])
            assert inspect.getcoroutinestate(queued) == inspect.CORO_CLOSED
            assert (queued.cr_await, queued.cr_frame, queued.cr_suspended) == (None, None, False)

            assert f._calls.free == [None]  # (the queue it held, handed on)
            return await f.read(4)

    assert run(loop_name, main) == DATA[8:12]


def test_a_cleared_frame_of_a_read_at_its_turn_is_not_the_next_ones(path, engine):
    """Reads waiting for their own turn of the event loop show a frame of a
    generator at a bare ``yield``; ``frame.clear()`` on one (which closes
    that generator on Python 3.9 to 3.12, and is refused from 3.13 on)
    leaves the read itself whole and is not what the next such read shows:
    that one's frame is of a generator still suspended."""

    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            got, frames = [], []
            for _ in range(2):
                set_turn_count(TURN_BUDGET - 1)  # (the next read takes its turn)
                call = f.read(4)
                assert first_step(call) == ("yielded", None)
                frame = call.cr_frame
                assert frame.f_code.co_name == "_at_a_turn" and frame not in frames
                frames.append(frame)
                try:
                    frame.clear()
                except RuntimeError:  # (Python 3.13 on: a suspended frame is not cleared)
                    pass
                got.append(first_step(call))
            return got

    assert asyncio.run(main()) == [("returned", DATA[:4]), ("returned", DATA[4:8])]


def test_a_file_call_asked_for_its_frame_and_never_awaited_warns_of_nothing(path, engine):
    async def main():
        async with blockio.open(path, "rb", buffering=0, engine=engine) as f:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for call in (f.read(4), f.seek(3), f.tell()):
                    assert call.cr_frame is not None
                    del call
                closed = f.read(4)
                assert closed.cr_frame is not None
                closed.close()
                assert inspect.getcoroutinestate(closed) == inspect.CORO_CLOSED
                gc.collect()
            return f._pos, [str(w.message) for w in caught]

    assert asyncio.run(main()) == (0, [])
