"""``detach()`` hands the descriptor back only when no other call on the
file is in progress or waiting: the built-in file's ``detach`` waits for
such a call (its lock); a plain method cannot wait without blocking the
event loop, so ours refuses with ``ValueError``. A call left running after
the descriptor was handed back would go on reading or writing it, and so,
once the caller closes it, whatever file takes its number. Both backends,
binary and text."""

import asyncio
import os

import pytest

import blockio
from fdnumbers import move_to
from waits import await_until, blocked_in, waits_for_bytes


async def cancelled_once_started(call, waits):
    """Runs ``call`` (a coroutine) as a task, cancels it once it waits
    (``waits()`` is true), and awaits the cancellation."""
    task = asyncio.ensure_future(call)
    await await_until(waits, "the call waits")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("mode", ["rb", "r"])
def test_detach_during_a_read_is_refused_and_the_read_keeps_its_file(tmp_path, engine, mode):
    p, other = tmp_path / "f", tmp_path / "other"
    # (more than a read served inline takes, 8 MiB: the read goes to the engine)
    p.write_bytes(b"A" * (16 << 20))
    other.write_bytes(b"B" * (4 << 20))

    async def main():
        f = await blockio.open(p, mode, engine=engine)
        reading = asyncio.ensure_future(f.read())
        await asyncio.sleep(0)  # the read has started: it waits for the engine
        with pytest.raises(ValueError, match="in progress"):
            f.detach()
        data = await reading
        raw = f.detach()  # nothing in progress now
        num = raw.fileno()
        # The number now names another file: dup2 closes the detached one
        # and puts `other` in its place at once. (Closing it and opening
        # `other` gets the lowest free number, which another thread's
        # close may have made a lower one.)
        move_to(os.open(other, os.O_RDONLY), num)
        try:
            with pytest.raises(ValueError, match="detached"):
                await f.read(1)
        finally:
            raw.close()  # (`other`'s, at that number)
        return data

    data = asyncio.run(main())
    assert len(data) == 16 << 20
    assert set(data) == ({"A"} if mode == "r" else {ord("A")})


def _dsync(path, flags):
    return os.open(path, flags | os.O_DSYNC, 0o666)


def test_detach_during_a_flush_is_refused_and_the_bytes_land_in_their_file(tmp_path, engine):
    p, other = tmp_path / "f", tmp_path / "other"
    other.write_bytes(b"B" * 100)

    async def main():
        # (O_DSYNC: the flush goes to the engine, and is in progress
        # meanwhile, also with the engine's `inline_writes` on, where a
        # buffered file's write may be made on the loop's thread)
        f = await blockio.open(p, "w+b", engine=engine, opener=_dsync)
        await f.write(b"x" * 10)  # buffered
        flushing = asyncio.ensure_future(f.flush())
        await asyncio.sleep(0)  # the flush has started (its buffer taken)
        with pytest.raises(ValueError, match="in progress"):
            f.detach()
        await flushing
        raw = f.detach()
        try:
            assert raw.tell() == 10  # as the built-in's
        finally:
            raw.close()

    asyncio.run(main())
    assert p.read_bytes() == b"x" * 10
    assert other.read_bytes() == b"B" * 100


def test_detach_with_a_call_waiting_its_turn_is_refused(engine):
    r, w = os.pipe()

    async def main():
        f = await blockio.open(r, "rb", engine=engine)
        first = asyncio.ensure_future(f.read(5))  # waits for the pipe
        second = asyncio.ensure_future(f.read(5))  # waits for its turn
        await await_until(lambda: waits_for_bytes(r), "the first read waits for the pipe")
        with pytest.raises(ValueError, match="in progress or waiting"):
            f.detach()
        os.write(w, b"0123456789")
        assert await first == b"01234"
        assert await second == b"56789"
        raw = f.detach()
        os.close(w)
        assert raw.read() == b""
        raw.close()

    asyncio.run(main())


def test_an_unbuffered_readline_keeps_nothing_past_the_line_as_the_builtin(tmp_path, engine):
    """``buffering=0``: as the built-in's ``FileIO``, what follows a line is
    read from the file as it is when asked for, not from a read ahead."""
    p = tmp_path / "f"

    def builtin():
        p.write_bytes(b"line1\nold-data\n")
        with open(p, "r+b", buffering=0) as f:
            line = f.readline()
            os.pwrite(f.fileno(), b"NEW", 6)  # another writer, after the line
            return line, f.read(3), f.readline()

    async def ours():
        p.write_bytes(b"line1\nold-data\n")
        async with blockio.open(p, "r+b", buffering=0, engine=engine) as f:
            line = await f.readline()
            os.pwrite(f.fileno(), b"NEW", 6)
            return line, await f.read(3), await f.readline()

    want = builtin()
    assert want == (b"line1\n", b"NEW", b"-data\n")
    assert asyncio.run(ours()) == want


@pytest.mark.parametrize("closefd", [True, False], ids=["owned", "not-owned"])
def test_detach_after_a_cancelled_read_of_a_pipe_hands_every_byte_on(engine, closefd):
    """A file reads a pipe without waiting in the kernel, whoever owns the
    descriptor: a read cancelled while it waits (in the event loop's
    poll) has taken nothing, so ``detach()`` hands the pipe back at once,
    and the raw file reads every byte written afterwards."""
    r, w = os.pipe()

    async def main():
        f = await blockio.open(r, "rb", engine=engine, closefd=closefd)
        await cancelled_once_started(f.read(100), lambda: waits_for_bytes(r))
        raw = f.detach()
        os.write(w, b"hello")
        os.close(w)
        assert raw.read() == b"hello"
        raw.close()

    try:
        asyncio.run(main())
    finally:
        if not closefd:
            os.close(r)


def test_detach_after_a_cancelled_pipe_write_waits_for_flush(engine):
    """A pipe write whose call was cancelled runs to its end on its thread;
    handed back meanwhile, the caller's own writes would land inside it.
    ``flush()`` waits for it."""
    import fcntl
    import threading

    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: the write blocks after 4 KiB
    got = bytearray()
    draining = threading.Event()

    def drain() -> None:
        draining.wait()
        while True:
            more = os.read(r, 1 << 20)
            if not more:
                return
            got.extend(more)

    reader = threading.Thread(target=drain)
    reader.start()

    async def main():
        f = await blockio.open(w, "wb", buffering=0, engine=engine)
        await cancelled_once_started(f.write(b"A" * 65536), lambda: blocked_in("write", w))
        with pytest.raises(ValueError, match="await flush"):
            f.detach()
        draining.set()  # the pipe empties: the write can end
        await f.flush()
        raw = f.detach()
        raw.write(b"Z" * 10)
        raw.close()  # (the last writer: the reader sees the end)

    try:
        asyncio.run(main())
    finally:
        draining.set()
        reader.join()
        os.close(r)
    assert bytes(got) == b"A" * 65536 + b"Z" * 10


def test_detach_of_an_unbuffered_pipe_holding_read_ahead_bytes_is_refused(engine):
    """``peek()`` of an unbuffered pipe reads ahead (a pipe cannot be read
    again); handing the pipe back would lose those bytes."""
    r, w = os.pipe()
    os.write(w, b"one\ntwo\n")
    os.close(w)

    async def main():
        f = await blockio.open(r, "rb", buffering=0, engine=engine)
        assert await f.peek() == b"o"  # (one read of one byte, as the buffer size is 0)
        with pytest.raises(ValueError, match="lose 1 byte already"):
            f.detach()
        assert await f.read1() == b"o"
        raw = f.detach()
        assert raw.read() == b"ne\ntwo\n"
        raw.close()

    asyncio.run(main())


def test_detach_of_an_unbuffered_pipe_after_readline_hands_on_the_rest(engine):
    """``readline()`` of an unbuffered pipe reads no byte past the line,
    as the built-in's FileIO: the detached descriptor reads the rest."""
    r, w = os.pipe()
    os.write(w, b"one\ntwo\nthree\n")
    os.close(w)

    async def main():
        f = await blockio.open(r, "rb", buffering=0, engine=engine)
        assert await f.readline() == b"one\n"
        raw = f.detach()
        assert raw.read() == b"two\nthree\n"
        raw.close()

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["a+b", "ab"])
def test_detach_in_append_mode_leaves_the_position_as_the_builtin(tmp_path, engine, mode):
    p = tmp_path / "f"

    def builtin():
        p.write_bytes(b"0123456789")
        f = open(p, mode, buffering=0)
        f.seek(3)
        if "+" in mode:
            f.read(3)
        return f.tell()

    async def ours():
        p.write_bytes(b"0123456789")
        f = await blockio.open(p, mode, buffering=0, engine=engine)
        await f.seek(3)
        if "+" in mode:
            await f.read(3)
        raw = f.detach()
        try:
            return raw.tell()
        finally:
            raw.close()

    want = builtin()
    assert want == (6 if "+" in mode else 3)
    assert asyncio.run(ours()) == want
