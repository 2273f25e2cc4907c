"""Cancelled calls on a file object lose nothing a finished call would
have kept, and a file over a descriptor keeps that descriptor's offset.

The reference is aiofiles over the built-in ``open`` on the same program:
a call whose task is cancelled either took effect entirely or not at all,
and bytes ``write()`` accepted reach the file. Each program is run with the
cancellation delivered after 0, 1, 2, ... turns of the event loop, so that
some runs cancel the call while its I/O is in flight, whatever the speed of
the machine; the assertions hold for every run.
"""

import asyncio
import os
import subprocess
import sys

import aiofiles
import pytest

import blockio

OPENERS = pytest.mark.parametrize("opener", [aiofiles.open, blockio.open], ids=["aiofiles", "blockio"])
TURNS = range(8)


async def cancel_after(aw, turns):
    """Starts ``aw`` as a task, cancels it after ``turns`` loop turns; its
    result, or None if the cancellation took effect."""
    t = asyncio.ensure_future(aw)
    for _ in range(turns):
        await asyncio.sleep(0)
    t.cancel()
    try:
        return await t
    except asyncio.CancelledError:
        return None


@OPENERS
@pytest.mark.parametrize("turns", TURNS)
def test_a_cancelled_flush_keeps_the_bytes_write_accepted(tmp_path, opener, turns):
    """F-1: write() returned 5, so the 5 bytes reach the file even if the
    flush that writes them is cancelled."""
    p = tmp_path / "f"

    async def main():
        async with opener(p, "wb") as f:
            assert await f.write(b"hello") == 5
            await cancel_after(f.flush(), turns)
            await f.write(b" world")

    asyncio.run(main())
    assert p.read_bytes() == b"hello world"


@OPENERS
@pytest.mark.parametrize("turns", TURNS)
def test_a_cancelled_write_that_overflows_the_buffer_keeps_earlier_writes(tmp_path, opener, turns):
    """F-1: a later write() that flushes, cancelled, never takes the bytes
    an earlier write() accepted with it; the position matches the file."""
    p = tmp_path / "f"

    async def main():
        async with opener(p, "wb") as f:
            a = asyncio.ensure_future(f.write(b"A"))
            big = await cancel_after(f.write(b"B" * 70000), turns)
            assert await a == 1
            return big, await f.tell()

    big, told = asyncio.run(main())
    data = p.read_bytes()
    # (aiofiles runs each call on one of its executor's threads, so the
    # second write may overtake the first there: seen on Python 3.13)
    racing = () if opener is blockio.open else (b"B" * 70000 + b"A",)
    assert data in (b"A", b"A" + b"B" * 70000) + racing, len(data)
    if opener is blockio.open:
        # (aiofiles' tell can race with the cancelled write still running
        # on another of its executor's threads)
        assert told == len(data)
    if big is not None:
        assert data == b"A" + b"B" * 70000


@pytest.mark.parametrize("turns", TURNS)
@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_cancelled_write_lands_whole_or_not_at_all_and_moves_the_position(tmp_path, turns, buffering):
    """A cancelled write is either in the file with the position past it,
    or not at all; the next write never lands on top of it. (aiofiles is
    no reference here: its thread goes on writing after the cancellation
    while the next write runs on another thread, so where the bytes land
    depends on the scheduler.)"""
    opener = blockio.open
    p = tmp_path / "f"
    big = b"A" * (8 << 20)

    async def main():
        async with opener(p, "wb", buffering=buffering) as f:
            await cancel_after(f.write(big), turns)
            await f.write(b"B" * 10)
            return await f.tell()

    told = asyncio.run(main())
    data = p.read_bytes()
    assert data in (b"B" * 10, big + b"B" * 10), (len(data), data[:3], data[-3:])
    assert told == len(data)


@pytest.mark.parametrize("turns", TURNS)
@pytest.mark.parametrize("call", ["readline", "read"])
@pytest.mark.parametrize("buffering", [-1, 0])
def test_a_cancelled_read_loses_nothing(tmp_path, turns, call, buffering):
    """F-17: a readline() or read(n) cancelled part-way leaves the position
    where it was: the next call returns what the built-in file's call
    returns (the whole line, or the bytes). (aiofiles is no reference
    here: its thread finishes the call and the line is lost with it.)"""
    opener = blockio.open
    p = tmp_path / "f"
    first = os.urandom(20000).replace(b"\n", b"x") + b"\n"
    p.write_bytes(first + b"second\n")

    async def main():
        async with opener(p, "rb", buffering=buffering) as f:
            if call == "readline":
                got = await cancel_after(f.readline(), turns)
                nxt = await f.readline()
            else:
                got = await cancel_after(f.read(len(first)), turns)
                nxt = await f.read(len(first))
            return got, nxt, await f.tell()

    with open(p, "rb") as f:
        assert (f.readline() if call == "readline" else f.read(len(first))) == first
    got, nxt, told = asyncio.run(main())
    if got is None:
        assert nxt == first and told == len(first)
    else:
        assert got == first and nxt == b"second\n"[: len(nxt)] and told == len(first) + len(nxt)


@OPENERS
@pytest.mark.parametrize("buffering", [-1, 0])
def test_readinto_fills_the_buffer_unless_at_end_of_file(tmp_path, opener, buffering):
    """F-10: readinto() is short only at end of file, as the built-in
    buffered file's (and FileIO's, on a regular file)."""
    p = tmp_path / "f"
    data = os.urandom(100000)
    p.write_bytes(data)

    async def main():
        async with opener(p, "rb", buffering=buffering) as f:
            await f.seek(7)
            await f.readline() if buffering == 0 else await f.read(100)
            start = await f.tell()
            b = bytearray(70000)
            n = await f.readinto(b)
            return start, n, bytes(b[:n]), await f.tell()

    start, n, got, told = asyncio.run(main())
    assert n == 70000 and got == data[start:start + n] and told == start + n


@OPENERS
def test_a_descriptor_is_read_from_its_offset_and_left_past_what_was_read(tmp_path, opener):
    """F-15: open(fd) starts at the descriptor's offset and moves it."""
    p = tmp_path / "f"
    p.write_bytes(b"abcdef")
    fd = os.open(p, os.O_RDONLY)
    try:
        os.lseek(fd, 3, os.SEEK_SET)

        async def main():
            async with opener(fd, "rb", closefd=False) as f:
                return await f.read()

        assert asyncio.run(main()) == b"def"
        assert os.lseek(fd, 0, os.SEEK_CUR) == 6
    finally:
        os.close(fd)


@pytest.mark.parametrize("opener", ["aiofiles", "blockio"])
def test_writing_to_an_inherited_descriptor_continues_after_what_is_there(tmp_path, opener):
    """F-15: `{ echo header; prog; } > out`: the program's writes to its
    stdout follow the shell's, never overwrite them."""
    out = tmp_path / "out"
    prog = (f"import asyncio, sys, {opener}\n"
            "async def main():\n"
            f"    async with {opener}.open(sys.stdout.fileno(), 'wb', closefd=False) as f:\n"
            "        await f.write(b'body\\n')\n"
            "asyncio.run(main())\n")
    with open(out, "wb") as f:
        f.write(b"header line\n")
        f.flush()
        subprocess.run([sys.executable, "-c", prog], stdout=f, check=True, timeout=60)
    assert out.read_bytes() == b"header line\nbody\n"


@OPENERS
def test_a_child_writing_to_fileno_after_a_flush_follows_the_file(tmp_path, opener):
    """F-15: after flush(), the descriptor's offset is past what the file
    wrote, so a child process given fileno() appends to it."""
    p = tmp_path / "log"

    async def main():
        async with opener(p, "wb") as f:
            await f.write(b"# header\n")
            await f.flush()
            subprocess.run(["echo", "child output"], stdout=f.fileno(), check=True, timeout=60)

    asyncio.run(main())
    assert p.read_bytes() == b"# header\nchild output\n"


@OPENERS
@pytest.mark.parametrize("mode", ["rb", "r", "r+b", "ab", "a"])
def test_a_cancelled_open_leaks_no_descriptor(tmp_path, opener, mode):
    """F-19: an open whose task is cancelled at any point either gives the
    file (which is then closed) or leaves no descriptor open."""
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100000)

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    async def main():
        # The first open makes what the process keeps for every file after
        # it (blockio's default engine: its ring and eventfds): counted
        # before the base, so that the test run alone counts only the
        # cancelled opens' descriptors.
        f = await opener(p, mode)
        await f.close()
        base = open_fds()
        for turns in range(8):
            for _ in range(4):
                f = await cancel_after(opener(p, mode), turns)
                if f is not None:
                    await f.close()
        # Descriptors opened for cancelled tasks are closed in the
        # background: wait for them (a watchdog, not a timing assumption).
        for _ in range(1000):
            if open_fds() <= base:
                break
            await asyncio.sleep(0.01)
        return open_fds() - base

    assert asyncio.run(main()) <= 0


@pytest.mark.parametrize("buffering", [-1, 0])
def test_read_of_a_negative_length_other_than_minus_one(tmp_path, buffering):
    """F-b: read(-5) raises ValueError on a buffered binary file, as the
    built-in's (and aiofiles') does; unbuffered, it reads all, as FileIO."""
    p = tmp_path / "f"
    p.write_bytes(b"abcdef")
    with open(p, "rb", buffering=buffering) as f:
        try:
            want = f.read(-5)
        except ValueError as e:
            want = e

    async def main():
        async with blockio.open(p, "rb", buffering=buffering) as f:
            try:
                return await f.read(-5)
            except ValueError as e:
                return e

    got = asyncio.run(main())
    assert type(got) is type(want) and str(got) == str(want)


@pytest.mark.parametrize("buffering", [-1, 0])
def test_append_tell_after_read_then_write_is_the_end_of_the_file(tmp_path, buffering):
    """F-a: in binary a+, tell() after a read then a write is the file's
    true end, as the README says (the built-in's says 15 here: a
    documented difference)."""
    p = tmp_path / "f"
    p.write_bytes(b"x" * 1000)

    async def main():
        async with blockio.open(p, "a+b", buffering=buffering) as f:
            await f.seek(0)
            assert await f.read(5) == b"xxxxx"
            await f.write(b"z" * 10)
            return await f.tell()

    assert asyncio.run(main()) == 1010 == os.path.getsize(p)


@pytest.mark.parametrize("opener", ["builtin", "aiofiles", "blockio"])
@pytest.mark.parametrize("buffering", [0, -1])
def test_a_write_cut_short_by_the_file_size_limit(tmp_path, opener, buffering):
    """A write that lands in part (EFBIG past RLIMIT_FSIZE): unbuffered, it
    returns the count that landed and the position is past them, as
    FileIO.write does; buffered, the flush raises and keeps the bytes that
    did not land in the buffer, the position past them, as the built-in
    buffered file keeps them (for a later flush or close to try again)."""
    import resource
    import signal

    p = tmp_path / "f"
    code = f"""
import asyncio, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (10000, resource.RLIM_INFINITY))
opener = {opener!r}
p = {str(p)!r}
async def main():
    if opener == "builtin":
        class F:
            def __init__(self): self.f = open(p, "wb", buffering={buffering})
            async def write(self, b): return self.f.write(b)
            async def flush(self): return self.f.flush()
            async def tell(self): return self.f.tell()
        f = F()
    else:
        mod = __import__(opener)
        f = await mod.open(p, "wb", buffering={buffering})
    await f.write(b"a" * 6000)
    await f.flush()
    try:
        n = await f.write(b"b" * 6000)
        await f.flush()
    except OSError as e:
        n = "raised"
    print(n, await f.tell(), os.path.getsize(p))
    os._exit(0)
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    n, told, size = out.stdout.split()
    assert size == "10000", out
    if buffering == 0:
        assert n == "4000" and told == "10000", out.stdout
    else:
        assert n == "raised", out.stdout
        if opener != "aiofiles":
            assert told == "12000", out.stdout


@pytest.mark.parametrize("whence", ["SEEK_DATA", "SEEK_HOLE"])
@pytest.mark.parametrize("offset", [0, 3, 6, 100])
def test_seek_data_and_hole_as_the_builtin(tmp_path, whence, offset):
    """F-c: seek(x, os.SEEK_DATA / SEEK_HOLE) as the built-in file's on
    Linux (the position, or the same OSError past the end)."""
    p = tmp_path / "f"
    p.write_bytes(b"abcdef")
    w = getattr(os, whence)
    with open(p, "rb") as f:
        try:
            want = (f.seek(offset, w), f.read())
        except OSError as e:
            want = e.errno

    async def main():
        async with blockio.open(p, "rb") as f:
            try:
                return (await f.seek(offset, w), await f.read())
            except OSError as e:
                return e.errno

    assert asyncio.run(main()) == want


@pytest.mark.parametrize("mode", ["wb", "ab", "w"])
def test_closing_a_file_whose_engine_was_closed_keeps_its_buffered_bytes(tmp_path, mode):
    """An explicit engine closed under an open file: the file's close still
    writes what write() accepted (as the built-in file's close would) and
    closes the descriptor, instead of raising and dropping the bytes."""
    p = tmp_path / "f"
    p.write_bytes(b"old:")

    async def main():
        e = blockio.Engine()
        f = await blockio.open(p, mode, engine=e)
        await f.write(b"hello" if "b" in mode else "hello")
        e.close()
        await f.close()
        return f.closed

    assert asyncio.run(main())
    assert p.read_bytes() == (b"old:hello" if "a" in mode else b"hello")


@pytest.mark.parametrize("how", ["fileno", "raw.fileno", "raw.fd", "_file.fileno"])
def test_the_descriptor_offset_is_the_position_once_its_number_is_given_out(tmp_path, how):
    """A file opened by path keeps the descriptor's offset at its position
    from the moment its number is given out (first at once, then after
    every call), so a child given the number continues where it ended."""
    p = tmp_path / "f"
    p.write_bytes(bytes(range(256)) * 4)

    def number(f):
        if how == "fileno":
            return f.fileno()
        if how == "raw.fileno":
            return f.raw.fileno()
        if how == "raw.fd":
            return f.raw.fd
        return f._file.fileno()

    async def main():
        async with blockio.open(p, "rb") as f:
            await f.read(10)
            await f.seek(100)
            assert await f.read(5) == bytes(range(100, 105))
            fd = number(f)
            assert os.lseek(fd, 0, os.SEEK_CUR) == 105
            assert await f.read(3) == bytes(range(105, 108))
            assert os.lseek(fd, 0, os.SEEK_CUR) == 108
            await f.seek(700)
            assert os.lseek(fd, 0, os.SEEK_CUR) == 700
            assert os.read(fd, 2) == bytes([700 % 256, 701 % 256])  # what a child given fd would read

    asyncio.run(main())


@pytest.mark.parametrize("buffering", [-1, 0, 7])
def test_calls_served_inline_keep_a_given_out_descriptors_offset_at_the_position(tmp_path, buffering):
    """Once the descriptor's number is given out, ``seek``, ``read``,
    ``readline`` and ``tell`` (served inline from the buffer or the page
    cache, or not) each leave the descriptor's offset at the file's
    position, which is where the built-in file's position is after the
    same calls."""
    p = tmp_path / "f"
    p.write_bytes(b"".join(b"%d:%s\n" % (i, b"y" * (i % 37)) for i in range(2000)))
    steps = [("readline", -1), ("readline", 5), ("read", 3), ("tell", None), ("seek", 1000), ("readline", -1),
             ("readline", -1), ("read", 100), ("seek", 7), ("read", 0), ("readline", 2), ("tell", None)] * 3

    async def main():
        with open(p, "rb", buffering=buffering) as ref:
            async with blockio.open(p, "rb", buffering=buffering) as f:
                fd = f.fileno()
                for k, (name, arg) in enumerate(steps):
                    if name == "tell":
                        got, want = await f.tell(), ref.tell()
                    else:
                        got = await getattr(f, name)(arg)
                        want = getattr(ref, name)(arg)
                    assert got == want, (k, name, arg)
                    assert os.lseek(fd, 0, os.SEEK_CUR) == ref.tell(), (k, name, arg)

    asyncio.run(main())


def test_writes_served_inline_leave_a_given_out_descriptors_offset_where_the_buffered_bytes_go(tmp_path):
    """Writes buffered behind others (served inline) leave the given-out
    descriptor's offset where the buffered bytes will go, as the first
    buffered write does; the flush moves it past them."""
    p = tmp_path / "f"
    p.write_bytes(b"." * 100)

    async def main():
        async with blockio.open(p, "r+b") as f:
            fd = f.fileno()
            await f.seek(10)
            await f.write(b"aa")
            assert os.lseek(fd, 0, os.SEEK_CUR) == 10
            await f.write(b"bb")
            assert os.lseek(fd, 0, os.SEEK_CUR) == 10 and await f.tell() == 14
            await f.flush()
            assert os.lseek(fd, 0, os.SEEK_CUR) == 14

    asyncio.run(main())
    assert p.read_bytes() == b"." * 10 + b"aabb" + b"." * 86


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "array"])
@pytest.mark.parametrize("buffering", [-1, 0, 4096])
def test_a_write_waiting_for_its_turn_writes_the_bytes_it_was_given(tmp_path, kind, buffering):
    """A ``write`` made while another call is in progress waits for its
    turn, and writes the bytes its buffer held when it was made (as the
    built-in's write, made at once, does): changing, growing or clearing
    the buffer meanwhile changes nothing, and it returns their count."""
    import array

    from blockio._blockio import TURN_BUDGET, set_turn_count

    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    store = bytearray(b"B" * 1000)
    data = {"bytearray": store, "memoryview": memoryview(store), "array": array.array("B", store)}[kind]

    async def main():
        async with blockio.open(p, "r+b", buffering=buffering) as f:
            await f.seek(10)
            set_turn_count(TURN_BUDGET - 1)
            told = asyncio.ensure_future(f.tell())  # (at its turn of the loop: it takes it, holding the file)
            write = asyncio.ensure_future(f.write(data))
            await asyncio.sleep(0)  # (both have started, in that order: the write waits for the tell)
            if kind == "array":
                data[0:1000] = array.array("B", b"C" * 1000)
                data.extend(b"D" * 5000)
            else:
                store[:] = b"C" * 1000
                if kind == "bytearray":
                    store.extend(b"D" * 5000)
            assert await told == 10
            return await write

    assert asyncio.run(main()) == 1000
    assert p.read_bytes() == b"0123456789" + b"B" * 1000
