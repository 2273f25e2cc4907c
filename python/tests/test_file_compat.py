"""``blockio.open`` against the built-in ``open`` on the same input: the
same sequence of calls on two copies of a file must return the same values
and leave the same bytes. The built-in file is the reference."""

import array
import asyncio
import collections
import io
import mmap
import os
import random
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import blockio

from test_asyncio import run
from waits import a_thread_sleeps_in, await_until

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# One binary call: (name, argument). Not read1: CPython's BufferedRandom
# serves read1 after a write from stale data and writes the buffered bytes
# after it (3.11: write(b"\x01") then read1(1) on b"\x00" leaves
# b"\x00\x01"), so it cannot be the reference there.
binary_calls = st.one_of(
    st.tuples(st.just("read"), st.integers(-1, 70)),
    st.tuples(st.just("readline"), st.integers(-1, 30)),
    st.tuples(st.just("readinto"), st.integers(0, 40)),
    st.tuples(st.just("write"), st.binary(max_size=40)),
    st.tuples(st.just("seek"), st.tuples(st.integers(0, 120), st.sampled_from([0, 1, 2]))),
    st.tuples(st.just("tell"), st.none()),
    st.tuples(st.just("flush"), st.none()),
    st.tuples(st.just("truncate"), st.one_of(st.none(), st.integers(0, 120))),
    st.tuples(st.just("readlines"), st.none()),
)


def seek_args(arg):
    off, whence = arg
    # Relative seeks stay non-negative on both files.
    return (off, 0) if whence == 0 else (off % 4, whence)


def sync_call(f, name, arg):
    if name == "seek":
        return f.seek(*seek_args(arg))
    if name == "readinto":
        b = bytearray(arg)
        n = f.readinto(b)
        return n, bytes(b[:n])
    if name == "read1":
        return f.read1(arg) if hasattr(f, "read1") else f.read(arg)  # FileIO has no read1
    if arg is None:
        return getattr(f, name)()
    return getattr(f, name)(arg)


async def async_call(f, name, arg):
    if name == "seek":
        return await f.seek(*seek_args(arg))
    if name == "readinto":
        b = bytearray(arg)
        n = await f.readinto(b)
        return n, bytes(b[:n])
    if name == "read1":
        return await f.read1(arg)
    if arg is None:
        return await getattr(f, name)()
    return await getattr(f, name)(arg)


def outcome(fn):
    try:
        return ("ok", fn())
    except (OSError, ValueError) as e:
        return ("error", type(e).__name__)


async def aoutcome(coro):
    try:
        return ("ok", await coro)
    except (OSError, ValueError) as e:
        return ("error", type(e).__name__)


@SETTINGS
@given(
    content=st.binary(max_size=100).map(lambda b: b.replace(b"\r", b"\n")),
    mode=st.sampled_from(["rb", "rb+", "wb", "wb+", "ab", "ab+", "xb"]),
    buffering=st.sampled_from([-1, 0, 7, 64]),
    calls=st.lists(binary_calls, max_size=12),
)
def test_binary_calls_match_the_builtin_file(tmp_path, content, mode, buffering, calls):
    # Buffered append mode: the built-in's position after a write counts on
    # from its last seek, though O_APPEND put the bytes at the end; ours is
    # the true end of the file (python/README.md, and the test below).
    assume("a" not in mode or buffering == 0)
    ours, ref = tmp_path / "ours", tmp_path / "ref"
    for p in (ours, ref):
        p.unlink(missing_ok=True)
        if "x" not in mode:
            p.write_bytes(content)
    if buffering == 1:
        buffering = -1
    with open(ref, mode, buffering=buffering) as f:
        expected = [outcome(lambda c=c: sync_call(f, *c)) for c in calls]

    async def main():
        async with blockio.open(ours, mode, buffering=buffering) as f:
            return [await aoutcome(async_call(f, *c)) for c in calls]

    got = run(main())
    for (name, _), e, g in zip(calls, expected, got):
        assert g == e, (name, calls)
    assert ours.read_bytes() == ref.read_bytes(), calls


def test_buffered_append_tell_is_the_true_end_of_file(tmp_path):
    p = tmp_path / "log"
    p.write_bytes(b"x")

    async def main():
        async with blockio.open(p, "ab", buffering=7) as f:
            await f.seek(0)
            await f.write(b"1234567")
            return await f.tell()

    assert run(main()) == 8 == p.stat().st_size


text_calls = st.one_of(
    st.tuples(st.just("read"), st.integers(-1, 30)),
    st.tuples(st.just("readline"), st.integers(-1, 20)),
    st.tuples(st.just("readlines"), st.none()),
)


@SETTINGS
@given(
    text=st.text(alphabet=st.sampled_from("ab\n\r\u00e9\u20ac\U0001f600 "), max_size=80),
    encoding=st.sampled_from(["utf-8", "latin-1", "utf-16-le", "cp1252"]),
    newline=st.sampled_from([None, "", "\n", "\r", "\r\n"]),
    calls=st.lists(text_calls, max_size=8),
)
def test_text_reads_match_the_builtin_file(tmp_path, text, encoding, newline, calls):
    p = tmp_path / "t.txt"
    p.write_bytes(text.encode(encoding, errors="replace"))
    with open(p, "r", encoding=encoding, newline=newline) as f:
        expected = [outcome(lambda c=c: sync_call(f, *c)) for c in calls] + [outcome(f.read)]

    async def main():
        async with blockio.open(p, "r", encoding=encoding, newline=newline) as f:
            got = [await aoutcome(async_call(f, *c)) for c in calls]
            return got + [await aoutcome(f.read())]

    assert run(main()) == expected


@SETTINGS
@given(data=st.binary(max_size=60), errors=st.sampled_from(["strict", "replace", "ignore", "surrogateescape"]))
def test_text_errors_match_the_builtin_file(tmp_path, data, errors):
    p = tmp_path / "bad.txt"
    p.write_bytes(data)
    with open(p, encoding="utf-8", errors=errors) as f:
        expected = outcome(lambda: [f.read(3), f.read()])

    async def main():
        async with blockio.open(p, encoding="utf-8", errors=errors) as f:
            return await aoutcome(_reads(f))

    async def _reads(f):
        return [await f.read(3), await f.read()]

    got = run(main())
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert got == expected


@SETTINGS
@given(
    parts=st.lists(st.text(alphabet=st.sampled_from("xy\n\r\u00e9"), max_size=10), max_size=6),
    newline=st.sampled_from([None, "", "\n", "\r", "\r\n"]),
)
def test_text_writes_match_the_builtin_file(tmp_path, parts, newline):
    ours, ref = tmp_path / "ours.txt", tmp_path / "ref.txt"
    with open(ref, "w", encoding="utf-8", newline=newline) as f:
        counts = [f.write(s) for s in parts]

    async def main():
        async with blockio.open(ours, "w", encoding="utf-8", newline=newline) as f:
            return [await f.write(s) for s in parts]

    assert run(main()) == counts
    assert ours.read_bytes() == ref.read_bytes()


def test_text_tell_and_seek_come_back_to_the_same_character(tmp_path):
    p = tmp_path / "t.txt"
    text = "".join(f"l\u00e9ne {i} \u20ac\r\n" for i in range(3000))
    p.write_bytes(text.encode("utf-8"))

    async def main():
        async with blockio.open(p, encoding="utf-8") as f:
            await f.read(7)
            marks = []
            for _ in range(50):
                marks.append((await f.tell(), await f.read(13)))
                await f.readline()
            for pos, chunk in reversed(marks):
                await f.seek(pos)
                assert await f.read(13) == chunk

    run(main())


def test_flush_semantics_match_a_buffered_file(tmp_path):
    p = tmp_path / "f.bin"

    async def main():
        async with blockio.open(p, "wb") as f:
            await f.write(b"0")
            assert p.read_bytes() == b""  # buffered
            await f.flush()
            assert p.read_bytes() == b"0"
            await f.write(b"x" * (io.DEFAULT_BUFFER_SIZE + 1))  # larger than the buffer: written
            assert p.stat().st_size == io.DEFAULT_BUFFER_SIZE + 2
            await f.write(b"tail")
        assert p.read_bytes().endswith(b"tail")  # flushed on close
        async with blockio.open(p, "wb", buffering=0) as f:
            await f.write(b"now")
            assert p.read_bytes() == b"now"

    run(main())


def test_unsupported_operations_raise_io_unsupported(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("abc")

    async def main():
        async with blockio.open(p, "w") as f:
            with pytest.raises(io.UnsupportedOperation):
                await f.read()
            assert not await f.readable() and await f.writable()
        async with blockio.open(p, "rb") as f:
            with pytest.raises(io.UnsupportedOperation):
                await f.write(b"x")
            with pytest.raises(io.UnsupportedOperation):
                await f.truncate()
            assert f.readable() and not await f.writable() and await f.seekable()
        f = await blockio.open(p, "rb")
        await f.close()
        with pytest.raises(ValueError, match="closed file"):
            await f.read()

    run(main())


def test_open_errors_read_as_the_builtin_opens(tmp_path):
    missing = str(tmp_path / "missing")
    for mode in ("r", "rb", "w+"):
        with pytest.raises(OSError) as ref:
            open(tmp_path if mode == "w+" else missing, mode)

        async def main():
            await blockio.open(tmp_path if mode == "w+" else missing, mode)

        with pytest.raises(OSError) as ours:
            run(main())
        assert type(ours.value) is type(ref.value) and str(ours.value) == str(ref.value)
    present = tmp_path / "present"
    present.write_bytes(b"")
    for bad, kw in (("rw", {}), ("rb", {"encoding": "utf-8"}), ("r", {"buffering": 0}), ("r", {"newline": "x"})):
        with pytest.raises(ValueError) as ref:
            open(present, bad, **kw)
        with pytest.raises(ValueError) as ours:
            blockio.open(present, bad, **kw)
        assert str(ours.value) == str(ref.value)


@pytest.mark.parametrize("mode, kw", [
    ("r", {"buffering": "x"}), ("r", {"buffering": 1.5}), ("r", {"buffering": None}),
    ("r", {"encoding": 5}), ("r", {"errors": 5}), ("r", {"newline": 5}), ("rb", {"newline": b"\n"}),
    ("r", {"closefd": "x"}), ("r", {"closefd": None}), ("r", {"opener": 5}),
    ("rr", {"buffering": "x"}), ("rb", {"errors": 5, "encoding": "utf-8"}), (None, {}), (b"r", {}),
], ids=repr)
def test_open_refuses_arguments_of_the_wrong_type_as_the_builtin_open(tmp_path, mode, kw):
    """An argument of the wrong type raises the built-in ``open``'s error,
    in its order, before anything is opened: ``errors=5`` and
    ``closefd="x"`` were taken (``errors`` then failed at the first
    decode), ``newline=5`` raised ``ValueError`` and ``encoding=5``
    ``codecs.lookup``'s message."""
    present = tmp_path / "present"
    present.write_bytes(b"abc\n")
    with pytest.raises(Exception) as ref:
        with open(present, mode, **kw) as f:
            f.read()

    async def main():
        async with blockio.open(present, mode, **kw) as f:
            await f.read()

    with pytest.raises(Exception) as ours:
        run(main())
    assert (type(ours.value), str(ours.value)) == (type(ref.value), str(ref.value))


def test_open_takes_descriptors_closefd_and_opener(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"hello")

    async def main():
        fd = os.open(p, os.O_RDONLY)
        async with blockio.open(fd, "rb", closefd=False) as f:
            assert await f.read() == b"hello"
        os.fstat(fd)  # still open
        assert os.lseek(fd, 0, os.SEEK_CUR) == 5  # left past what was read, as the built-in's
        os.lseek(fd, 0, os.SEEK_SET)
        async with blockio.open(fd, "rb") as f:
            assert await f.read(2) == b"he"
        with pytest.raises(OSError):
            os.fstat(fd)  # closed with the file
        seen = []

        def opener(path, flags):
            seen.append(threading.get_ident())
            return os.open(path, flags)

        async with blockio.open(p, "rb", opener=opener) as f:
            assert await f.read() == b"hello"
        assert seen and seen[0] != threading.get_ident()  # not on the loop's thread

    run(main())


def test_open_does_not_block_the_loop(tmp_path):
    """Opening a FIFO blocks until a writer comes: the loop keeps ticking
    meanwhile (aiofiles' test_slow_file checks the same with a patched
    open). The writer comes only after the loop has ticked 20 times during
    the open, so the test depends on what ran, not on how fast: a blocked
    loop never ticks, and a watchdog writer then ends the open with too
    few ticks."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    WANT = 20

    def let_the_open_finish():
        os.close(os.open(fifo, os.O_WRONLY))

    async def main():
        ticks = 0
        writer = None

        async def ticker():
            nonlocal ticks, writer
            while ticks < WANT:
                ticks += 1
                await asyncio.sleep(0.005)  # (ticks that count the loop's turns while the open waits)
            writer = threading.Thread(target=let_the_open_finish)
            writer.start()

        watchdog = threading.Timer(60, let_the_open_finish)
        watchdog.start()
        t = asyncio.ensure_future(ticker())
        try:
            async with blockio.open(fifo, "rb"):
                ticked_during_open = ticks
        finally:
            watchdog.cancel()
        # The writer let the open finish, so the ticker has ended; after a
        # watchdog's rescue it has not, and must not open the FIFO again.
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        if writer is not None:
            writer.join()
        return ticked_during_open

    assert run(main()) == WANT


def test_a_cancelled_open_leaks_no_descriptor(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    async def open_fifo():
        return await blockio.open(fifo, "rb")

    async def main():
        async with blockio.open(tmp_path / "other", "wb"):
            pass  # the engine and its threads exist from here on
        before = sorted(os.listdir("/proc/self/fd"))
        for _ in range(5):
            t = asyncio.ensure_future(open_fifo())
            await await_until(lambda: a_thread_sleeps_in("wait_for_partner"), "the open waits for a writer")
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            # A blocked open now completes, for nobody. O_RDWR never
            # blocks, so an open that was cancelled before it started
            # (it then never starts) cannot hang the test here.
            os.close(os.open(fifo, os.O_RDWR))
        async with blockio.open(tmp_path / "other", "wb"):
            pass
        # Each open completed for nobody is closed once its completion is
        # seen; a watchdog of about a minute, not a timing window.
        for _ in range(6000):
            if sorted(os.listdir("/proc/self/fd")) == before:
                break
            await asyncio.sleep(0.01)
        assert sorted(os.listdir("/proc/self/fd")) == before

    run(main())


def test_detach_hands_back_a_positioned_file(tmp_path):
    p = tmp_path / "f.txt"
    p.write_bytes(b"0123456789")

    async def main():
        f = await blockio.open(p, "r")
        assert await f.read(3) == "012"
        raw = f.detach()
        with pytest.raises(ValueError):
            await f.read()
        with pytest.raises(ValueError):
            await f.close()
        assert raw.read() == b"3456789"
        raw.close()

    run(main())


def test_readall_peek_read1_and_writelines(tmp_path):
    p = tmp_path / "f.bin"

    async def main():
        async with blockio.open(p, "wb+") as f:
            await f.writelines([b"a\n", b"b\n", b"c"])
            await f.seek(0)
            assert (await f.peek())[:1] == b"a"
            assert await f.read1(2) == b"a\n"
            assert await f.readlines() == [b"b\n", b"c"]
            await f.seek(0)
            assert await f.readall() == b"a\nb\nc"
            assert await f.truncate(2) == 2
            assert await f.tell() == 5  # truncate does not move the position
        assert p.read_bytes() == b"a\n"

    run(main())


def test_negative_descriptor_and_binary_line_buffering_as_the_builtin(tmp_path):
    """Open arguments the built-in refuses or warns about: a negative
    descriptor is ValueError('negative file descriptor'), and buffering=1
    in binary mode gives the built-in's RuntimeWarning."""
    with pytest.raises(ValueError) as ref:
        open(-1, "rb")
    with pytest.raises(ValueError) as ours:
        asyncio.run(_open_and_close(-1, "rb"))
    assert str(ours.value) == str(ref.value)
    p = tmp_path / "f"
    p.write_bytes(b"x")
    with pytest.warns(RuntimeWarning) as ref_w:
        open(p, "rb", buffering=1).close()
    with pytest.warns(RuntimeWarning) as our_w:
        asyncio.run(_open_and_close(p, "rb", buffering=1))
    assert str(our_w[0].message) == str(ref_w[0].message)


async def _open_and_close(file, mode, **kw):
    f = await blockio.open(file, mode, **kw)
    await f.close()


@pytest.mark.parametrize("mode, kwargs, lines", [
    ("w", {"encoding": "latin-1"}, ["one\n", "two\n", "\u20ac\n", "four\n"]),
    ("w", {"encoding": "utf-8"}, ["one\n", 2, "three\n"]),
    ("wb", {}, [b"one\n", bytearray(b"two\n"), "bad", b"four\n"]),
    ("wb", {}, [b"one\n", 5]),
    ("wb", {"buffering": 0}, [b"one\n", None]),
])
def test_writelines_with_a_bad_item_writes_the_items_before_it_as_the_builtin_file(tmp_path, mode, kwargs, lines):
    """The items before the bad one are written, and the error is the one
    the built-in file's ``writelines`` raises for it."""
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    with pytest.raises(Exception) as want:
        with open(ref, mode, **kwargs) as f:
            f.writelines(lines)

    async def main():
        async with blockio.open(ours, mode, **kwargs) as f:
            await f.writelines(lines)

    with pytest.raises(type(want.value)) as got:
        run(main())
    assert str(got.value) == str(want.value)
    assert ours.read_bytes() == ref.read_bytes()


_WRONG_ITEMS = {"None": None, "int": 5, "deque": collections.deque(), "array": array.array("u", "ab"),
                "str": "text", "object": object()}


@pytest.mark.parametrize("mode, buffering, item", [
    pytest.param(mode, buffering, item, id=f"{mode}-{buffering}-{name}")
    for mode, buffering in [("w", -1), ("wb", -1), ("wb", 0)]
    for name, item in _WRONG_ITEMS.items()
    # (what the file takes is no wrong type there)
    if not (mode == "w" and name == "str" or mode == "wb" and name == "array")
])
@pytest.mark.parametrize("call", ["write", "writelines"])
def test_a_write_of_the_wrong_type_says_what_the_builtin_files_says(tmp_path, mode, buffering, call, item):
    """The ``TypeError`` of a write (or ``writelines`` item) of the wrong
    type reads as the built-in file's: the type by its C name
    (``collections.deque``, ``array.array``), ``None`` by name in text,
    never ``memoryview``'s own message ("memoryview: a bytes-like object
    is required")."""
    arg = item if call == "write" else [item]
    with pytest.raises(TypeError) as want:
        with open(tmp_path / "ref", mode, buffering=buffering) as f:
            getattr(f, call)(arg)

    async def main():
        async with blockio.open(tmp_path / "ours", mode, buffering=buffering) as f:
            await getattr(f, call)(arg)

    with pytest.raises(TypeError) as got:
        run(main())
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("lines", [None, 5])
def test_writelines_of_no_iterable_on_a_reader_raises_the_builtins_type_error(tmp_path, lines):
    """A read-only buffered file's ``writelines`` of something that is not
    iterable raises the built-in's ``TypeError`` (it asks for the
    iterator first), not ``UnsupportedOperation``."""
    path = tmp_path / "f"
    path.write_bytes(b"data")
    with pytest.raises(Exception) as want:
        with open(path, "rb") as f:
            f.writelines(lines)

    async def main():
        async with blockio.open(path, "rb") as f:
            await f.writelines(lines)

    with pytest.raises(type(want.value)) as got:
        run(main())
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("mode", ["r", "rb"])
@pytest.mark.parametrize("hint", ["x", 1.5, None, True, 3, 4, 5, 8, 9])
def test_readlines_hint_is_taken_or_refused_as_the_builtin_file(tmp_path, mode, hint):
    """``readlines``' hint: an integer (or anything with ``__index__``) or
    None, as the built-in file takes it, reading on until the lines hold
    more than ``hint`` (4 gives two lines of 4, as the built-in: it gave
    one); anything else is the built-in's ``TypeError``, not one from
    comparing it with a count."""
    p = tmp_path / "f"
    p.write_bytes(b"one\ntwo\nthree\n")
    with open(p, mode) as f:
        try:
            want = ("ok", f.readlines(hint))
        except TypeError as e:
            want = ("TypeError", str(e))

    async def main():
        async with blockio.open(p, mode) as f:
            try:
                return ("ok", await f.readlines(hint))
            except TypeError as e:
                return ("TypeError", str(e))

    assert run(main()) == want


@pytest.mark.parametrize("mode,buffering,call", [
    ("rb", 0, "read"), ("rb", 0, "readline"),  # (FileIO has no read1 or peek)
    ("rb", -1, "read"), ("rb", -1, "readline"), ("rb", -1, "read1"), ("rb", -1, "peek"),
    ("r", -1, "read"), ("r", -1, "readline"),
    ("rb", 0, "readlines"), ("rb", -1, "readlines"), ("r", -1, "readlines"),
])
@pytest.mark.parametrize("size", [2**63, -2**63 - 1, 2**31, 2**31 + 7, 0x7FFFF000])
def test_sizes_past_one_read_or_a_ssize_t_are_taken_or_refused_as_the_builtin_file(tmp_path, mode, buffering, call,
                                                                                   size):
    """A size no ``ssize_t`` holds raises ``OverflowError``, as the
    built-in file's does (a ``readline`` limit too, where one was taken as
    no limit); a size past what one read returns on Linux (2 GiB less a
    page) reads what the file has, as the built-in's does, where it was
    refused."""
    p = tmp_path / "f"
    p.write_bytes(b"one\ntwo\n")
    with open(p, mode, buffering=buffering) as f:
        try:
            want = ("ok", getattr(f, call)(size), f.tell())
        except OverflowError as e:
            want = ("OverflowError", str(e))

    async def main():
        async with blockio.open(p, mode, buffering=buffering) as f:
            try:
                return ("ok", await getattr(f, call)(size), await f.tell())
            except OverflowError as e:
                return ("OverflowError", str(e))

    assert run(main()) == want


@pytest.mark.parametrize("buffering", [0, -1])
def test_readinto_a_buffer_past_one_read_fills_it_as_the_builtin_file(tmp_path, buffering):
    """A buffer of 2 GiB and a page, more than one read returns on Linux:
    buffered, filled to the end as the built-in buffered file fills it;
    unbuffered, one read of 2 GiB less a page, as ``FileIO``'s. (A sparse
    file, with a mark in the last page the buffer takes; on tmpfs where
    there is one, whose holes read as the shared zero page, where ext4
    fills 2 GiB of page cache with zeros for each read.)"""
    size = (1 << 31) + 4096
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else tmp_path) as d:
        p = os.path.join(d, "sparse")
        with open(p, "wb") as f:
            f.seek(size - 4)
            f.write(b"MARK")
            f.write(bytes(4096))
        _readinto_past_one_read(p, size, buffering)


def _readinto_past_one_read(p, size, buffering):
    buf = bytearray(size)
    with open(p, "rb", buffering=buffering) as f:
        want = (f.readinto(buf), bytes(buf[-4:]), f.tell())
    buf[-4:] = bytes(4)

    async def main():
        async with blockio.open(p, "rb", buffering=buffering) as f:
            n = await f.readinto(buf)
            return n, bytes(buf[-4:]), await f.tell()

    assert run(main()) == want
    assert want[0] == (size if buffering else 0x7FFFF000)


@pytest.mark.parametrize("buffering", [0, -1])
def test_readinto_a_non_contiguous_buffer_raises_before_taking_a_byte_as_the_builtin(tmp_path, buffering):
    """A strided view (``memoryview(b)[::2]``) is refused with the built-in's
    ``TypeError`` before the position moves, where a buffered file took
    the bytes first."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789abcdefghij")
    results = []
    with open(p, "rb", buffering=buffering) as f:
        f.read(3)
        with pytest.raises(TypeError) as want:
            f.readinto(memoryview(bytearray(20))[::2])
        results.append((str(want.value), f.tell(), f.read(5)))

    async def main():
        async with blockio.open(p, "rb", buffering=buffering) as f:
            await f.read(3)
            with pytest.raises(TypeError) as got:
                await f.readinto(memoryview(bytearray(20))[::2])
            return str(got.value), await f.tell(), await f.read(5)

    assert run(main()) == results[0] == (results[0][0], 3, b"34567")


@pytest.mark.parametrize("mode,call", [("rb", "peek"), ("rb", "read1"), ("r", "readline")])
@pytest.mark.parametrize("size", [None, 1.5, "3"])
def test_a_size_the_builtin_takes_as_an_int_only_refuses_none_at_the_call(tmp_path, mode, call, size):
    """``peek``, ``read1`` and a text file's ``readline`` take an int and
    nothing else (None included), with the built-in's ``TypeError`` and
    message, before the position moves."""
    p = tmp_path / "f"
    p.write_bytes(b"012\n456\n89")
    with open(p, mode) as f:
        f.read(1)
        with pytest.raises(TypeError) as want:
            getattr(f, call)(size)
        want_after = (f.tell(), f.read(4))

    async def main():
        async with blockio.open(p, mode) as f:
            await f.read(1)
            with pytest.raises(TypeError) as got:
                await getattr(f, call)(size)
            return str(got.value), (await f.tell(), await f.read(4))

    assert run(main()) == (str(want.value), want_after)


def _strided(kind):
    if kind == "numpy":
        import numpy

        return numpy.frombuffer(b"xyzxyz", dtype=numpy.uint8)[::2]
    return memoryview(b"xyzxyz")[::2]


@pytest.mark.parametrize("buffering", [0, -1])
@pytest.mark.parametrize("kind", ["memoryview", "numpy"])
@pytest.mark.parametrize("call", ["write", "writelines"])
def test_a_strided_write_raises_the_builtins_error_and_writes_nothing(tmp_path, buffering, kind, call):
    """A non-contiguous buffer given to ``write`` or ``writelines`` raises
    the built-in's error (its exporter's: a memoryview's ``BufferError``,
    numpy's ``ValueError``), and neither the file nor the position
    changes."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    arg = _strided(kind)
    if call == "writelines":
        arg = [arg]
    with open(p, "r+b", buffering=buffering) as f:
        f.write(b"ab")
        with pytest.raises((BufferError, ValueError)) as want:
            getattr(f, call)(arg)
        f.write(b"c")
    want_bytes = p.read_bytes()
    p.write_bytes(b"0123456789")

    async def main():
        async with blockio.open(p, "r+b", buffering=buffering) as f:
            await f.write(b"ab")
            with pytest.raises((BufferError, ValueError)) as got:
                await getattr(f, call)(arg)
            await f.write(b"c")
        return type(got.value), str(got.value)

    assert (run(main()), p.read_bytes()) == ((type(want.value), str(want.value)), want_bytes)
    assert want_bytes == b"abc3456789"


BAD_CALLS = {
    "truncate(1.5)": lambda f: f.truncate(1.5),
    "truncate('3')": lambda f: f.truncate("3"),
    "readinto(bytes)": lambda f: f.readinto(b"x"),
    "readinto(None)": lambda f: f.readinto(None),
    "writelines([1])": lambda f: f.writelines([1]),
    "writelines([strided])": lambda f: f.writelines([memoryview(b"abcd")[::2]]),
}


WRONG_MODE_CALLS = {
    "write": lambda f, text: f.write("x" if text else b"x"),
    "writelines": lambda f, text: f.writelines(["x"] if text else [b"x"]),
    "truncate": lambda f, text: f.truncate(1),
    "read": lambda f, text: f.read(1),
    "readline": lambda f, text: f.readline(),
    "readinto": lambda f, text: f.readinto(bytearray(2)),
    "read1": lambda f, text: f.read1(1),
}


def _wrong_mode_cases():
    """Each call the built-in file of that mode has, on a file not open
    for it."""
    cases = []
    for mode, buffering in [("rb", 0), ("rb", -1), ("wb", 0), ("wb", -1), ("r", -1), ("w", -1)]:
        with open(os.devnull, mode, buffering=buffering) as f:
            for call in sorted(WRONG_MODE_CALLS):
                if hasattr(f, call) and (call in ("write", "writelines", "truncate")) == ("r" in mode):
                    cases.append((mode, buffering, call))
    return cases


@pytest.mark.parametrize("mode,buffering,call", _wrong_mode_cases())
def test_a_call_the_mode_does_not_allow_raises_the_builtins_words(tmp_path, mode, buffering, call):
    """``UnsupportedOperation`` with the built-in's message: FileIO's
    "File not open for reading" unbuffered, the buffered file's call name,
    the text file's "not readable"."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    text = "b" not in mode
    with open(p, mode, buffering=buffering) as f:
        with pytest.raises(io.UnsupportedOperation) as want:
            WRONG_MODE_CALLS[call](f, text)
    p.write_bytes(b"0123456789")

    async def main():
        async with blockio.open(p, mode, buffering=buffering) as f:
            with pytest.raises(io.UnsupportedOperation) as got:
                await WRONG_MODE_CALLS[call](f, text)
        return str(got.value)

    assert run(main()) == str(want.value)


@pytest.mark.parametrize("mode", ["rb", "wb"])
@pytest.mark.parametrize("buffering", [0, -1])
@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("call", sorted(BAD_CALLS))
def test_a_bad_argument_and_a_wrong_mode_raise_in_the_builtins_order(tmp_path, mode, buffering, closed, call):
    """When the argument and the file's mode (or its being closed) are both
    wrong, the error the built-in checks first is the one raised, and
    the file is unchanged."""
    p = tmp_path / "f"

    def outcome(run_call):
        p.write_bytes(b"0123456789")
        try:
            run_call()
        except Exception as e:  # (the type is what is compared)
            return type(e), p.read_bytes()
        return None, p.read_bytes()

    def builtin():
        f = open(p, mode, buffering=buffering)
        if closed:
            f.close()
        try:
            BAD_CALLS[call](f)
        finally:
            f.close()

    def ours():
        async def main():
            f = await blockio.open(p, mode, buffering=buffering)
            if closed:
                await f.close()
            try:
                await BAD_CALLS[call](f)
            finally:
                await f.close()
        run(main())

    want = outcome(builtin)
    assert want[0] is not None
    assert outcome(ours) == want


def test_a_strided_item_of_writelines_raises_buffer_error_after_the_items_before_it(tmp_path):
    """As the built-in's ``writelines``: the items before the strided one
    are written, then its ``BufferError`` is raised."""
    lines = [b"ab", memoryview(b"xyzxyz")[::2], b"c"]
    p = tmp_path / "f"
    with open(p, "wb") as f:
        with pytest.raises(BufferError) as want:
            f.writelines(lines)
    want_bytes = p.read_bytes()

    async def main():
        async with blockio.open(p, "wb") as f:
            with pytest.raises(BufferError) as got:
                await f.writelines(lines)
        return str(got.value)

    assert (run(main()), p.read_bytes()) == (str(want.value), want_bytes) == (str(want.value), b"ab")


def test_an_unbuffered_write_past_what_one_write_takes_returns_fileios_short_count():
    """``FileIO.write`` is one ``write(2)``, which takes at most 2 GiB less
    a page on Linux: an unbuffered file's write of more returns that count,
    as FileIO's does. (To ``/dev/null`` from untouched anonymous memory,
    so that nothing is copied or stored.)"""
    big = mmap.mmap(-1, (2 << 30) + 3 * 4096)
    with open("/dev/null", "wb", buffering=0) as f:
        want = f.write(big)

    async def main():
        async with blockio.open("/dev/null", "wb", buffering=0) as f:
            return await f.write(big)

    assert run(main()) == want == (2 << 30) - 4096
    big.close()


@pytest.mark.parametrize("mode,buffering", [("rb", 0), ("rb", -1), ("r", -1)])
@pytest.mark.parametrize("whence", [-1, 5, 7])
def test_a_bad_whence_raises_the_builtin_files_error(tmp_path, mode, buffering, whence):
    """``FileIO``'s ``OSError(EINVAL)`` unbuffered, the buffered and text
    files' ``ValueError``, before the position moves."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    with open(p, mode, buffering=buffering) as f:
        f.read(3)
        with pytest.raises((OSError, ValueError)) as want:
            f.seek(0, whence)
        want_pos = f.tell()

    async def main():
        async with blockio.open(p, mode, buffering=buffering) as f:
            await f.read(3)
            with pytest.raises((OSError, ValueError)) as got:
                await f.seek(0, whence)
            return got, await f.tell()

    got, pos = run(main())
    assert type(got.value) is type(want.value)
    assert getattr(got.value, "errno", None) == getattr(want.value, "errno", None)
    assert pos == want_pos == 3


@pytest.mark.parametrize("mode,buffering", [("rb", 0), ("rb", -1), ("r", -1)])
@pytest.mark.parametrize("offset,whence", [(None, 5), ("1", -1), (None, 0), (3, 7)])
def test_a_bad_offset_and_a_bad_whence_raise_what_the_builtin_checks_first(tmp_path, mode, buffering, offset, whence):
    """The buffered and text files check ``whence`` before the offset's
    type (``ValueError``), FileIO the offset first (``TypeError``)."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    with open(p, mode, buffering=buffering) as f:
        with pytest.raises(Exception) as want:
            f.seek(offset, whence)

    async def main():
        async with blockio.open(p, mode, buffering=buffering) as f:
            with pytest.raises(Exception) as got:
                await f.seek(offset, whence)
            return got

    assert type(run(main()).value) is type(want.value)


@pytest.mark.parametrize("mode,buffering", [("r+b", 0), ("r+b", -1), ("r+", -1)])
@pytest.mark.parametrize("offset", [1 << 40, (1 << 40) + 1, 1 << 41, 1 << 44, (1 << 63) - 1])
def test_a_seek_the_file_system_refuses_fails_at_the_seek_as_the_builtin(tmp_path, mode, buffering, offset):
    """An offset past what the file system takes (16 TiB on ext4, where the
    tests run) raises the built-in's ``OSError(EINVAL)`` at the seek,
    leaving the position, where it was taken and the error came with a
    later write or close; one it takes is taken by both."""
    p = tmp_path / "f"
    p.write_bytes(b"ab")

    def outcome(call):
        try:
            return ("ok", call())
        except OSError as e:
            return ("OSError", e.errno)

    with open(p, mode, buffering=buffering) as f:
        f.read(2)
        want = (outcome(lambda: f.seek(offset)), f.tell() == offset)
        f.seek(2)
        f.write(b"Q" if "b" in mode else "Q")

    async def main():
        async with blockio.open(p, mode, buffering=buffering) as f:
            await f.read(2)
            seek = f.seek(offset)
            try:
                got = ("ok", await seek)
            except OSError as e:
                got = ("OSError", e.errno)
            got = (got, await f.tell() == offset)
            await f.seek(2)
            await f.write(b"Q" if "b" in mode else "Q")
            return got

    assert run(main()) == want
    assert p.read_bytes() == b"abQ"


def test_a_refused_text_seek_leaves_the_reader_where_it_was(tmp_path):
    """A text seek the file refuses (past 2**63 - 1) leaves the reader at
    its character, as the built-in's does, where the text decoded ahead
    was dropped and the next read started past it."""
    p = tmp_path / "f"
    p.write_text("hello\nworld\n" + "x" * 5000 + "\nlast\n")
    with open(p) as f:
        f.read(3)
        with pytest.raises(OSError):
            f.seek(2**63)
        want = (f.tell(), f.read(4))

    async def main():
        async with blockio.open(p) as f:
            await f.read(3)
            with pytest.raises(OSError, match="offset"):
                await f.seek(2**63)
            return await f.tell(), await f.read(4)

    assert run(main()) == want == (3, "lo\nw")


@pytest.mark.parametrize("mode,buffering", [("ab", 0), ("ab", -1), ("a+b", 0), ("a+b", -1), ("a", -1), ("a+", -1)])
@pytest.mark.parametrize("how", ["fd", "opener"])
def test_append_mode_over_a_descriptor_without_o_append_writes_at_the_end_as_the_builtin(tmp_path, mode, buffering,
                                                                                      how):
    # The built-in's FileIO seeks to the end once and writes on from there;
    # positional writes at 0 (which O_APPEND would have sent to the end)
    # overwrote the file's start.
    data = [b"x1\n", b"x2\n"] if "b" in mode else ["x1\n", "x2\n"]

    def opener(path, flags):
        return os.open(path, os.O_RDWR if "+" in mode else os.O_WRONLY)

    def builtin(p):
        if how == "fd":
            f = open(opener(p, 0), mode, buffering=buffering)
        else:
            f = open(p, mode, buffering=buffering, opener=opener)
        with f:
            for d in data:
                f.write(d)
            f.flush()
            return f.tell()

    async def ours(p):
        if how == "fd":
            f = await blockio.open(opener(p, 0), mode, buffering=buffering)
        else:
            f = await blockio.open(p, mode, buffering=buffering, opener=opener)
        async with f:
            for d in data:
                await f.write(d)
            await f.flush()
            return await f.tell()

    want, got = tmp_path / "want", tmp_path / "got"
    for p in (want, got):
        p.write_bytes(b"HEADER\nb1\n")
    assert run(ours(got)) == builtin(want)
    assert got.read_bytes() == want.read_bytes() == b"HEADER\nb1\nx1\nx2\n"


@pytest.mark.parametrize("mode,buffering", [("rb+", 0), ("rb+", -1), ("rb+", 8192), ("r+", -1)])
@pytest.mark.parametrize("how", ["fd", "opener"])
def test_a_descriptor_with_o_append_in_another_writing_mode_tells_the_end_after_a_flush_as_the_builtin(
        tmp_path, engine, mode, buffering, how):
    # The kernel puts each write of an O_APPEND descriptor at the end
    # whatever the offset; the position stayed where the write was asked
    # (tell() 4 where the built-in says 12), and the reads after it came
    # from there.
    def fd(p, flags=0):
        return os.open(p, os.O_RDWR | os.O_APPEND)

    data = (b"ab", b"cd") if "b" in mode else ("ab", "cd")

    def calls(f):
        out = [f.seek(2)]
        f.write(data[0])
        f.flush()
        out.append(f.tell())
        f.write(data[1])
        f.flush()
        out += [f.tell(), f.read(), f.seek(0), f.read()]
        return out

    def builtin(p):
        f = open(fd(p), mode, buffering=buffering) if how == "fd" else open(p, mode, buffering=buffering, opener=fd)
        with f:
            return calls(f)

    async def ours(p):
        if how == "fd":
            f = await blockio.open(fd(p), mode, buffering=buffering, engine=engine)
        else:
            f = await blockio.open(p, mode, buffering=buffering, opener=fd, engine=engine)
        async with f:
            out = [await f.seek(2)]
            await f.write(data[0])
            await f.flush()
            out.append(await f.tell())
            await f.write(data[1])
            await f.flush()
            out += [await f.tell(), await f.read(), await f.seek(0), await f.read()]
            return out

    want, got = tmp_path / "want", tmp_path / "got"
    for p in (want, got):
        p.write_bytes(b"0123456789")
    expected = builtin(want)
    assert run(ours(got)) == expected
    assert expected[1] == 12
    assert got.read_bytes() == b"0123456789abcd"


@pytest.mark.parametrize("buffering", [0, -1, 8192])
def test_append_mode_after_reads_writes_only_the_bytes_written_as_the_unbuffered_builtin(tmp_path, engine, buffering):
    # read, write, read, write in "ab+": the built-in's buffered file
    # (BufferedRandom, CPython gh-64281) appends the byte the second read
    # took along with the two written, so it is no reference here; its
    # unbuffered FileIO, which every buffering of blockio's matches, is.
    start = bytes(range(256)) * 4

    def builtin(p):
        with open(p, "ab+", buffering=0) as f:
            return [f.seek(100), f.read(50), f.write(b"A"), f.read(1), f.write(b"B"), f.tell()]

    async def ours(p):
        async with blockio.open(p, "ab+", buffering=buffering, engine=engine) as f:
            return [await f.seek(100), await f.read(50), await f.write(b"A"), await f.read(1),
                    await f.write(b"B"), await f.tell()]

    want, got = tmp_path / "want", tmp_path / "got"
    for p in (want, got):
        p.write_bytes(start)
    assert run(ours(got)) == builtin(want) == [100, start[100:150], 1, b"", 1, len(start) + 2]
    assert got.read_bytes() == want.read_bytes() == start + b"AB"


def _pipe_fed_in_two_parts(first, second, reader_took_first):
    """A pipe whose writer thread sends ``first``, waits (at most 20 s,
    the way out of a test that would hang) until ``reader_took_first()``
    says so, then sends ``second`` and closes; the read end."""
    r, w = os.pipe()

    def feed():
        os.write(w, first)
        for _ in range(2000):
            if reader_took_first(r):
                break
            time.sleep(0.01)
        os.write(w, second)
        os.close(w)

    threading.Thread(target=feed, daemon=True).start()
    return r


def _pipe_empty(r):
    import fcntl
    import termios
    return int.from_bytes(fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"), "little") == 0


@pytest.mark.parametrize("call", ["read", "read1", "readinto"])
def test_an_unbuffered_pipe_returns_what_one_read_gives_as_fileio(call):
    # FileIO makes one read(2): what the peer sent so far, never waiting for
    # more (a reply to a prompt). The writer sends the rest only once the
    # first part has been returned.
    returned = threading.Event()

    async def main():
        r = _pipe_fed_in_two_parts(b"a" * 10, b"b" * 10, lambda _r: returned.is_set())
        async with blockio.open(r, "rb", buffering=0) as f:
            if call == "readinto":
                b = bytearray(20)
                got = bytes(b[:await f.readinto(b)])
            else:
                got = await getattr(f, call)(20)
            returned.set()
            return got, await f.read()

    assert run(main()) == (b"a" * 10, b"b" * 10)


def test_a_buffered_pipe_fills_readinto_as_the_builtin():
    # The built-in buffered file's readinto reads on until the buffer is
    # full or the stream ends. The writer sends the second part only once
    # the first has left the pipe.
    def builtin():
        with open(_pipe_fed_in_two_parts(b"a" * 10, b"b" * 10, _pipe_empty), "rb") as f:
            b = bytearray(20)
            return bytes(b[:f.readinto(b)])

    async def ours():
        async with blockio.open(_pipe_fed_in_two_parts(b"a" * 10, b"b" * 10, _pipe_empty), "rb") as f:
            b = bytearray(20)
            return bytes(b[:await f.readinto(b)])

    assert run(ours()) == builtin() == b"a" * 10 + b"b" * 10


@pytest.mark.parametrize("buffering", [0, -1])
@pytest.mark.parametrize("source", ["pipe", "file"])
@pytest.mark.parametrize("arg", [b"xxxxx", memoryview(b"xxxxx"), "xxxxx", 5, "closed mmap"],
                         ids=["bytes", "view", "str", "int", "closed-mmap"])
def test_readinto_a_read_only_buffer_raises_before_taking_a_byte(tmp_path, buffering, source, arg):
    # The built-in raises TypeError before it reads; reading first lost the
    # bytes read for the buffer that could not hold them. A closed mmap
    # exports no buffer (ValueError from memoryview): TypeError all the
    # same, as the built-in's argument parsing raises.
    if arg == "closed mmap":
        arg = mmap.mmap(-1, 4096)
        arg.close()
    def fd():
        if source == "file":
            p = tmp_path / "f"
            p.write_bytes(b"hello world")
            return os.open(p, os.O_RDONLY)
        r, w = os.pipe()
        os.write(w, b"hello world")
        os.close(w)
        return r

    def builtin():
        with open(fd(), "rb", buffering=buffering) as f:
            first = f.read(1) if source == "file" else b""
            with pytest.raises(TypeError) as e:
                f.readinto(arg)
            return first + f.read(), str(e.value)

    async def ours():
        async with blockio.open(fd(), "rb", buffering=buffering) as f:
            first = await f.read(1) if source == "file" else b""
            with pytest.raises(TypeError) as e:
                await f.readinto(arg)
            return first + await f.read(), str(e.value)

    assert run(ours()) == builtin()
    assert builtin()[0] == b"hello world"


@pytest.mark.parametrize("mode", ["ab", "a+b", "a", "a+"])
@pytest.mark.parametrize("flags", [os.O_WRONLY, os.O_WRONLY | os.O_APPEND])
def test_append_mode_moves_the_descriptor_to_the_end_at_open_as_the_builtin(tmp_path, mode, flags):
    # A child given the number right after the open (`>> out`) writes at
    # the end, not over the file's start.
    if "+" in mode:
        flags = flags & ~os.O_WRONLY | os.O_RDWR

    def child_writes(fd):
        os.write(fd, b"child\n")

    def builtin(p):
        fd = os.open(p, flags)
        with open(fd, mode):
            child_writes(fd)
        return os.path.getsize(p)

    async def ours(p):
        fd = os.open(p, flags)
        async with await blockio.open(fd, mode):
            child_writes(fd)
        return os.path.getsize(p)

    want, got = tmp_path / "want", tmp_path / "got"
    for p in (want, got):
        p.write_bytes(b"0123456789\n")
    assert run(ours(got)) == builtin(want)
    assert got.read_bytes() == want.read_bytes() == b"0123456789\nchild\n"


@pytest.mark.parametrize("mode", ["r+", "a+"])
def test_a_text_seek_to_the_current_position_moves_the_file_where_the_reader_is(tmp_path, mode):
    # seek(0, SEEK_CUR) is seek(tell()) on the built-in text file: a write
    # after it lands where the reader is, not past the text decoded ahead.
    def go_builtin(f):
        if mode == "a+":
            f.seek(0)
        line = f.readline()
        f.seek(0, os.SEEK_CUR)
        f.write("Q")
        return line, f.tell()

    async def go_ours(f):
        if mode == "a+":
            await f.seek(0)
        line = await f.readline()
        await f.seek(0, os.SEEK_CUR)
        await f.write("Q")
        return line, await f.tell()

    want, got = tmp_path / "want", tmp_path / "got"
    for p in (want, got):
        p.write_bytes(b"0123456789\nabcdef\n")
    with open(want, mode) as f:
        expected = go_builtin(f)

    async def ours():
        async with blockio.open(got, mode) as f:
            return await go_ours(f)

    assert run(ours()) == expected
    assert got.read_bytes() == want.read_bytes()


@pytest.mark.parametrize("call", ["read", "read1", "peek", "readinto", "readline3"])
def test_a_call_after_a_cancelled_unbuffered_pipe_readline_does_not_wait_for_a_newline(call):
    # The cancelled readline's read goes on, and the next call takes what
    # it gets: a prompt without a newline is returned, never held back.
    r, w = os.pipe()

    async def main():
        f = await blockio.open(r, "rb", buffering=0)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(f.readline(), 0.05)  # (the pipe is empty: it cannot complete)
        os.write(w, b"Password:")  # (9 bytes: three readline(3)s)
        got = b""
        while len(got) < 9:
            if call == "readinto":
                b = bytearray(100)
                part = bytes(b[:await asyncio.wait_for(f.readinto(b), 20)])
            elif call == "readline3":
                part = await asyncio.wait_for(f.readline(3), 20)
            else:
                part = await asyncio.wait_for(getattr(f, call)(100), 20)
                if call == "peek":
                    part = await f.read1(len(part))
            assert part  # (TimeoutError above if it waited for a newline)
            got += part
        os.close(w)
        assert await f.read() == b""
        await f.close()
        return got

    assert run(main()) == b"Password:"


def _socketpair():
    import socket

    a, b = socket.socketpair()
    return a.detach(), b.detach()


def _fifo():
    """A FIFO's read and write ends, opened by path."""
    import tempfile

    d = tempfile.mkdtemp()
    p = os.path.join(d, "fifo")
    os.mkfifo(p)
    r = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(p, os.O_WRONLY)
    os.set_blocking(r, True)
    os.unlink(p)
    os.rmdir(d)
    return r, w


STREAMS = {"pipe": os.pipe, "socketpair": _socketpair}


@pytest.mark.parametrize("kind", sorted(STREAMS))
@pytest.mark.parametrize("limit", [-1, 2, 4096, 5000])
def test_an_unbuffered_stream_readline_takes_no_byte_past_the_line(kind, limit):
    # As FileIO's readline, which reads one byte at a time: whoever reads
    # the descriptor next (here, the descriptor itself) gets the rest.
    text = b"one\n" + b"x" * 4500 + b"\ntail"
    make = STREAMS[kind]

    def builtin():
        r, w = make()
        os.write(w, text)
        f = open(r, "rb", buffering=0, closefd=False)
        lines = [f.readline(limit), f.readline(limit)]
        os.close(w)
        rest = os.read(r, 10000)
        os.close(r)
        return lines, rest

    async def ours():
        r, w = make()
        os.write(w, text)
        f = await blockio.open(r, "rb", buffering=0, closefd=False)
        lines = [await f.readline(limit), await f.readline(limit)]
        f.detach()  # (holds nothing: refuses otherwise)
        os.close(w)
        rest = os.read(r, 10000)
        os.close(r)
        return lines, rest

    want = builtin()
    assert want[1]  # (something is left for the next reader)
    assert run(ours()) == want


def _line_then_rest(main, line, rest, blocking=True):
    """Runs ``main(r, w)`` on a new pipe, which must return ``line``; the
    pipe must then hold ``rest`` (read once the write end is closed, so
    that bytes taken past the line fail the test rather than block it)."""
    r, w = os.pipe()
    os.set_blocking(r, blocking)
    try:
        assert run(main(r, w)) == line
    finally:
        os.close(w)
    try:
        assert os.read(r, 100) == rest
    finally:
        os.close(r)


def test_an_unbuffered_pipe_readline_waits_for_the_rest_of_its_line_and_no_more():
    # The line arrives in parts; bytes written after it stay in the pipe.
    async def main(r, w):
        def writer():
            for part in (b"abc", b"def", b"\nnext"):
                time.sleep(0.02)
                os.write(w, part)

        f = await blockio.open(r, "rb", buffering=0, closefd=False)
        t = threading.Thread(target=writer)
        t.start()
        line = await asyncio.wait_for(f.readline(), 20)
        t.join()
        return line

    _line_then_rest(main, b"abcdef\n", b"next")


def test_a_cancelled_unbuffered_pipe_readline_puts_its_bytes_back_and_takes_no_more():
    # Cancelled while waiting for the rest of its line: the part read is
    # the next readline's, and a child handed the descriptor after that
    # line reads what follows it.
    async def main(r, w):
        f = await blockio.open(r, "rb", buffering=0, closefd=False)
        os.write(w, b"par")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(f.readline(), 0.05)
        os.write(w, b"tial\nchild\n")
        line = await asyncio.wait_for(f.readline(), 20)
        f.detach()
        return line

    _line_then_rest(main, b"partial\n", b"child\n")


def test_an_unbuffered_terminal_readline_returns_its_lines():
    # A terminal refuses reads that never wait: its lines are read ahead,
    # and every byte still reaches the file's reads, in order.
    import pty

    m, s = pty.openpty()
    import termios
    attrs = termios.tcgetattr(s)
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(s, termios.TCSANOW, attrs)

    async def main():
        f = await blockio.open(s, "rb", buffering=0, closefd=False)
        os.write(m, b"one\ntwo\n")
        got = [await asyncio.wait_for(f.readline(), 20), await asyncio.wait_for(f.readline(), 20)]
        await f.close()
        return got

    try:
        assert run(main()) == [b"one\n", b"two\n"]
    finally:
        os.close(m)
        os.close(s)


def test_an_unbuffered_fifo_readline_reads_ahead_and_loses_nothing():
    # A FIFO opened by path refuses reads that never wait: its lines are
    # read ahead (as the README says), and what follows them is the next
    # read's, in order; detach() refuses while the file holds it.
    r, w = _fifo()
    os.write(w, b"one\ntwo\n")
    os.close(w)

    async def main():
        f = await blockio.open(r, "rb", buffering=0)
        got = [await f.readline()]
        with pytest.raises(ValueError, match="lose 4 bytes"):
            f.detach()
        got.append(await f.read1(100))
        got.append(await f.readline())
        await f.close()
        return got

    assert run(main()) == [b"one\n", b"two\n", b""]


def test_an_unbuffered_nonblocking_pipe_readline_raises_blocking_io_error_and_loses_nothing():
    # As the file's read does there (and the built-in's FileIO raises); the
    # part of the line read is put back for the next readline.
    async def main(r, w):
        f = await blockio.open(r, "rb", buffering=0, closefd=False)
        os.write(w, b"par")
        with pytest.raises(BlockingIOError):
            await f.readline()
        os.write(w, b"t\nnext")
        line = await f.readline()
        f.detach()
        return line

    _line_then_rest(main, b"part\n", b"next", blocking=False)


def test_an_unbuffered_socket_readline_reports_a_reset_after_part_of_a_line():
    # The reset is reported once by the kernel (the next read returns 0):
    # the readline returns the bytes read before it (FileIO's raises and
    # loses them), and the next raises it: never the error before them.
    import socket
    import struct

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    c = socket.create_connection(srv.getsockname())
    s, _ = srv.accept()
    srv.close()

    async def main():
        f = await blockio.open(s.fileno(), "rb", buffering=0, closefd=False)
        c.sendall(b"abc")  # (queued before the reset, in order)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # (a reset: linger on with a time of 0)
        got = [await asyncio.wait_for(f.readline(), 20)]
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(f.readline(), 20)
        got.append(await asyncio.wait_for(f.readline(), 20))
        f.detach()
        return got

    try:
        assert run(main()) == [b"abc", b""]
    finally:
        s.close()


def test_closing_an_unbuffered_socket_file_after_a_cancelled_readline_lets_the_socket_go():
    # The wait a cancelled readline leaves running holds a duplicate of the
    # descriptor: closing the file ends it, so the peer sees the close.
    import socket

    a, b = socket.socketpair()

    async def main():
        f = await blockio.open(a.detach(), "rb", buffering=0)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(f.readline(), 0.05)
        await f.close()

    try:
        run(main())
        b.settimeout(20)
        assert b.recv(10) == b""  # (a time-out here: the socket is still held open)
    finally:
        b.close()


def test_an_empty_record_ends_an_unbuffered_seqpacket_readline_as_fileio():
    # An empty record reads as b"", which ends FileIO's line; the records
    # after it stay in the socket.
    import socket

    def records():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for r in (b"a", b"", b"c\n", b"d\n"):
            b.send(r)
        return a, b

    def builtin():
        a, b = records()
        with open(a.fileno(), "rb", buffering=0, closefd=False) as f:
            line = f.readline()
        rest = a.recv(10)
        a.close()
        b.close()
        return line, rest

    async def ours():
        a, b = records()
        f = await blockio.open(a.fileno(), "rb", buffering=0, closefd=False)
        line = await asyncio.wait_for(f.readline(), 20)
        f.detach()
        rest = a.recv(10)
        a.close()
        b.close()
        return line, rest

    assert builtin() == (b"a", b"c\n")
    assert run(ours()) == builtin()


@pytest.mark.parametrize("mode", ["rb", "r", "wb"])
def test_open_checks_a_descriptor_as_the_builtin_does(tmp_path, mode):
    """A number that is no open descriptor, or one of a directory, fails
    at open with the built-in's error, not at the first read; the
    directory's descriptor stays the caller's."""
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    closed = 99999  # (above what the event loop's own descriptors take)

    async def main():
        for fd in (closed, dfd):
            with pytest.raises(OSError) as ref:
                open(fd, mode, closefd=False)
            with pytest.raises(OSError) as got:
                await blockio.open(fd, mode, closefd=False)
            assert type(got.value) is type(ref.value), fd
            assert got.value.errno == ref.value.errno, fd

    try:
        asyncio.run(main())
        os.fstat(dfd)  # still open
    finally:
        os.close(dfd)


@pytest.mark.parametrize("mode", ["rb", "r"])
def test_open_checks_an_openers_descriptor_as_the_builtin_does(tmp_path, mode):
    """An opener that returns a directory's descriptor fails at open with
    the built-in's ``IsADirectoryError``, and that descriptor is closed, as
    the built-in closes it."""
    made = []

    def opener(path, flags):
        made.append(os.open(tmp_path, os.O_RDONLY))
        return made[-1]

    with pytest.raises(IsADirectoryError):
        open(tmp_path / "x", mode, opener=opener)

    async def main():
        with pytest.raises(IsADirectoryError):
            await blockio.open(tmp_path / "x", mode, opener=opener)

    asyncio.run(main())
    for fd in made:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed by whichever open made it


@pytest.mark.parametrize("number", [2**31, -(2**31) - 1, 2**40, -1, -(2**31)])
def test_open_of_a_number_out_of_range_fails_as_the_builtins(tmp_path, number):
    """A descriptor number that is not a C ``int`` is taken by the
    built-in's FileIO for a path, which an int is not (``TypeError``); a
    negative one is a ``ValueError``. Same types, raised at open."""
    with pytest.raises(Exception) as ref:
        open(number, "rb")

    async def main():
        with pytest.raises(type(ref.value)) as got:
            await blockio.open(number, "rb")
        return got.value

    got = asyncio.run(main())
    assert type(got) is type(ref.value) and str(got) == str(ref.value), (got, ref.value)


@pytest.mark.parametrize("returned", ["a", None, 1.5, -1, -7, 2**31, 2**40])
def test_an_openers_bad_result_fails_as_the_builtins(tmp_path, returned):
    """An opener that returns something other than a descriptor number
    fails with the built-in's exception type: ``TypeError`` for a
    non-int, ``ValueError`` for a negative one, ``OverflowError`` past a
    C int; the message names the opener."""
    def opener(path, flags):
        return returned

    with pytest.raises(Exception) as ref:
        open(tmp_path / "x", "wb", opener=opener)

    async def main():
        with pytest.raises(type(ref.value)) as got:
            await blockio.open(tmp_path / "x", "wb", opener=opener)
        return got.value

    got = asyncio.run(main())
    assert type(got) is type(ref.value) and "opener" in str(got), (got, ref.value)


@pytest.mark.parametrize("buffering", [0, -1])
@pytest.mark.parametrize("offset,whence", [
    (2**63, os.SEEK_DATA), (2**63, os.SEEK_HOLE), (2**63, os.SEEK_SET), (-2**63 - 1, os.SEEK_SET),
    (-2**64, os.SEEK_END), (0, 2**31), (0, -2**31 - 1), (2**63 - 1, os.SEEK_CUR), (2**63 - 1, os.SEEK_END),
    (2**62, os.SEEK_CUR), (-2**63, os.SEEK_SET)])
def test_a_seek_out_of_range_raises_the_builtins_exception_and_moves_nothing(tmp_path, buffering, offset, whence):
    """An offset that is no 64-bit file offset (the buffered file's
    ``ValueError``, FileIO's ``OverflowError``), a whence that is no C int
    (``OverflowError``), a position computed past 2**63 - 1 or before 0
    (lseek's ``OSError(EINVAL)``): the built-in's exception, at the seek,
    and the position stays."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789" * 10)
    with open(p, "rb", buffering=buffering) as f:
        f.read(3)
        with pytest.raises(Exception) as want:
            f.seek(offset, whence)
        want_pos = f.tell()

    async def main():
        async with blockio.open(p, "rb", buffering=buffering) as f:
            await f.read(3)
            with pytest.raises(Exception) as got:
                await f.seek(offset, whence)
            return got.value, await f.tell(), await f.read(2)

    got, pos, after = run(main())
    assert type(got) is type(want.value), (got, want.value)
    assert getattr(got, "errno", None) == getattr(want.value, "errno", None)
    assert pos == want_pos == 3 and after == b"34"


@pytest.mark.parametrize("seed", range(4))
def test_small_calls_from_a_large_read_buffer_match_the_builtin_file(tmp_path, seed):
    """Reads, line reads and seeks of a few bytes through a 256 KiB read
    buffer (taken from its front in place, not by copying its rest), with
    writes between them: every result, and the file, as the built-in's."""
    rnd = random.Random(seed)
    content = b"".join(b"%d:%s\n" % (i, b"x" * rnd.randrange(0, 90)) for i in range(20000))
    size = len(content)

    def one():
        kind = rnd.choice(["read", "read", "readline", "readline", "readinto", "tell", "seek", "write"])
        if kind == "read":
            return (kind, rnd.choice([0, 1, 7, 100, 5000, 70000, 300000]))
        if kind == "readline":
            return (kind, rnd.choice([-1, -1, 3, 50]))
        if kind == "readinto":
            return (kind, rnd.choice([1, 100, 9000]))
        if kind == "seek":
            return (kind, (rnd.randrange(size), 0))
        if kind == "write":
            return (kind, b"W" * rnd.randrange(1, 30))
        return (kind, None)

    calls = [one() for _ in range(300)]
    ours, ref = tmp_path / "ours", tmp_path / "ref"
    ours.write_bytes(content)
    ref.write_bytes(content)
    with open(ref, "r+b", buffering=256 << 10) as f:
        expected = [outcome(lambda c=c: sync_call(f, *c)) for c in calls]

    async def main():
        async with blockio.open(ours, "r+b", buffering=256 << 10) as f:
            return [await aoutcome(async_call(f, *c)) for c in calls]

    got = run(main())
    for k, (c, e, g) in enumerate(zip(calls, expected, got)):
        assert g == e, (k, c, calls[max(0, k - 5):k])
    assert ours.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("buffering", [0, -1])
@pytest.mark.parametrize("path,offset", [("/proc/version", 5), ("/proc/cpuinfo", 0), ("/dev/null", -1), ("/dev/null", 7)])
def test_seek_end_of_a_file_whose_size_says_nothing_is_the_builtins(path, offset, buffering):
    """A file whose size is 0 may have its end elsewhere: procfs refuses
    ``SEEK_END`` (``OSError(EINVAL)``, the position stays), a character
    device takes any offset. Both as the built-in's seek, and the next
    read returns the built-in's bytes."""
    with open(path, "rb", buffering=buffering) as f:
        try:
            want = ("ok", f.seek(offset, os.SEEK_END))
        except OSError as e:
            want = ("OSError", e.errno)
        want_next = f.read(3)

    async def main():
        async with blockio.open(path, "rb", buffering=buffering) as f:
            try:
                got = ("ok", await f.seek(offset, os.SEEK_END))
            except OSError as e:
                got = ("OSError", e.errno)
            return got, await f.read(3)

    assert run(main()) == (want, want_next)


def test_an_unbuffered_read_is_one_read_as_fileios():
    """Unbuffered, ``read(n)`` is one read(2), as FileIO's: on a procfs
    file, whose reads stop at a page's worth of lines, it returns what that
    one read gives rather than reading on until it has ``n`` bytes."""
    path = "/proc/kallsyms"  # (more than one read's worth, and the same in every process)
    with open(path, "rb", buffering=0) as f:
        want = f.read(100_000)
    assert 0 < len(want) < 100_000

    async def main():
        async with blockio.open(path, "rb", buffering=0) as f:
            return await f.read(100_000)

    assert run(main()) == want


class _Index:
    def __init__(self, n):
        self.n = n

    def __index__(self):
        return self.n


@pytest.mark.parametrize("kind", ["numpy", "index"])
@pytest.mark.parametrize("value", ["fd", -1, 2**31 - 1])
def test_open_takes_any_integer_as_a_descriptor_as_the_builtin(tmp_path, kind, value):
    """A number of another type (numpy's, anything with ``__index__``) is
    a descriptor to ``open``, as to the built-in's: opened, or refused with
    the built-in's exception."""
    import numpy

    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    fd = os.open(p, os.O_RDONLY)
    try:
        n = fd if value == "fd" else value
        number = numpy.int64(n) if kind == "numpy" else _Index(n)
        try:
            want = ("ok", open(number, "rb", closefd=False).read(4))
        except Exception as e:
            want = ("error", type(e))
        os.lseek(fd, 0, os.SEEK_SET)

        async def main():
            try:
                async with blockio.open(number, "rb", closefd=False) as f:
                    return ("ok", await f.read(4))
            except Exception as e:
                return ("error", type(e))

        assert run(main()) == want
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", ["r+b", "w+b", "a+b", "r+"])
@pytest.mark.parametrize("closefd", [True, False])
def test_an_update_mode_on_a_pipe_is_refused_as_the_builtin(mode, closefd):
    """The built-in's buffered reader and writer of one file needs a
    seekable one: ``io.UnsupportedOperation`` at open, the descriptor
    closed unless ``closefd=False``. Unbuffered, FileIO takes it."""
    def outcome(opens, **kw):
        """Whether opening a pipe's read end is refused, and whether the
        descriptor is open afterwards (the file, if made, left unclosed)."""
        r, w = os.pipe()
        kept = []
        try:
            try:
                kept.append(opens(r, **kw))
                got = "opened"
            except io.UnsupportedOperation:
                got = "refused"
            try:
                os.fstat(r)
                return got, "open"
            except OSError:
                return got, "closed"
        finally:
            for fd in (r, w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def ours(r, **kw):
        async def main():
            return await blockio.open(r, **kw)
        return run(main())

    kw = {"mode": mode, "closefd": closefd}
    assert outcome(ours, **kw) == outcome(open, **kw) == ("refused", "closed" if closefd else "open")
    kw = {"mode": "r+b", "buffering": 0, "closefd": False}
    assert outcome(ours, **kw) == outcome(open, **kw) == ("opened", "open")


def test_a_closed_unbuffered_files_seek_says_closed_first(tmp_path):
    """FileIO's ``seek`` checks for a closed file before the offset's
    range: ``ValueError``, as the built-in's."""
    p = tmp_path / "f"
    p.write_bytes(b"x")

    async def main():
        f = await blockio.open(p, "rb", buffering=0)
        await f.close()
        with pytest.raises(ValueError, match="closed"):
            await f.seek(2**63)

    run(main())


@pytest.mark.parametrize("mode,buffering", [("rb", -1), ("rb", 0), ("r", -1), ("wb", -1), ("w", -1)])
@pytest.mark.parametrize("call", ["seek(0)", "seek(0, 2)", "tell"])
def test_seek_and_tell_of_a_pipe_raise_the_builtins_exception(mode, buffering, call):
    """On a pipe, FileIO's ``seek`` and ``tell`` raise ``OSError(ESPIPE)``;
    the buffered file's ``seek`` and the text file's ``seek`` and ``tell``
    ``io.UnsupportedOperation``: the same types here."""
    def outcome(f, do):
        try:
            do(f)
            return "ok"
        except io.UnsupportedOperation:
            return "UnsupportedOperation"
        except OSError as e:
            return ("OSError", e.errno)

    def sync(f):
        return f.seek(0) if call == "seek(0)" else f.seek(0, 2) if call == "seek(0, 2)" else f.tell()

    async def ours(f):
        return await (f.seek(0) if call == "seek(0)" else f.seek(0, 2) if call == "seek(0, 2)" else f.tell())

    r, w = os.pipe()
    fd = r if "r" in mode else w
    try:
        with open(fd, mode, buffering=buffering, closefd=False) as f:
            want = outcome(f, sync)

        async def main():
            f = await blockio.open(fd, mode, buffering=buffering, closefd=False)
            try:
                try:
                    await ours(f)
                    return "ok"
                except io.UnsupportedOperation:
                    return "UnsupportedOperation"
                except OSError as e:
                    return ("OSError", e.errno)
            finally:
                await f.close()

        assert run(main()) == want
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("mode", ["rb", "r", "r+b"])
def test_closefd_false_with_a_float_is_the_builtins_type_error(tmp_path, mode):
    """A float is no descriptor and no path: the built-in's ``TypeError``,
    before ``closefd=False`` is refused for a path."""
    with pytest.raises(TypeError):
        open(3.0, mode, closefd=False)

    async def main():
        with pytest.raises(TypeError):
            await blockio.open(3.0, mode, closefd=False)

    run(main())


@pytest.mark.parametrize("mode", ["rb", "wb", "r+b", "r", "w"])
def test_detach_returns_what_the_builtins_returns(tmp_path, mode):
    """A binary file's ``detach`` returns the raw ``FileIO``, a text file's
    its buffered binary file, as the built-in's do; reading on from either
    gives the bytes after the position."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    raw = open(p, mode).detach()
    want = type(raw)
    raw.close()

    async def main():
        f = await blockio.open(p, mode)
        if "r" in mode:
            await f.read(3)
        got = f.detach()
        try:
            return type(got), (got.read(2) if "r" in mode else None)
        finally:
            got.close()

    got_type, after = run(main())
    assert got_type is want
    assert after in (None, b"34")


_MODE_CALLS = [("write", (b"x",)), ("write", ("s",)), ("read", (1,)), ("read", (-1,)), ("read", (2.0,)), ("read", (-5,)),
               ("read1", (1,)), ("read1", (2.0,)), ("readline", ()), ("readline", (2.0,)),
               ("readinto", (bytearray(1),)), ("readinto", (b"x",)), ("writable", ()), ("readable", ()),
               ("truncate", ()), ("writelines", ([b"x"],)), ("writelines", (["x"],)), ("readlines", ()),
               ("readlines", (2.0,)), ("flush", ()), ("tell", ()), ("seek", (0,)), ("seek", ("a",)), ("seek", (0, 7)),
               ("seek", (0, "x")), ("seekable", ())]


@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
@pytest.mark.parametrize("mode,buffering", [(m, b) for m in ("rb", "wb", "ab", "r+b") for b in (-1, 0)]
                         + [(m, -1) for m in ("r", "w", "a", "r+")])
def test_a_call_the_mode_refuses_fails_as_the_builtins_does(tmp_path, mode, buffering, closed):
    """Each call on a file whose mode refuses it, or that is closed, or
    with an argument of the wrong type, raises what the built-in file's
    raises, checked in the same order: for a buffered file, a method its
    class lacks (``write`` on a reader, the reads on a writer) is refused
    first; then the argument; then whether the file is closed; then the
    mode. ``UnsupportedOperation``'s message is the built-in's too."""
    p = tmp_path / "f"

    def outcome(r):
        return ("ok", bytes(r) if isinstance(r, (bytes, bytearray)) else r)

    def failed(e):
        return (type(e).__name__, str(e) if isinstance(e, io.UnsupportedOperation) else "")

    async def main():
        mismatches = []
        for call, args in _MODE_CALLS:
            p.write_bytes(b"abc\n")
            f = open(p, mode, buffering=buffering)
            if closed:
                f.close()
            m = getattr(f, call, None)
            if m is None:
                continue  # (FileIO has no read1: blockio's has, as aiofiles' does)
            try:
                want = outcome(m(*args))
            except Exception as e:
                want = failed(e)
            f.close()
            p.write_bytes(b"abc\n")
            g = await blockio.open(p, mode, buffering=buffering)
            if closed:
                await g.close()
            try:
                r = getattr(g, call)(*args)
                got = outcome(await r if asyncio.iscoroutine(r) else r)
            except Exception as e:
                got = failed(e)
            await g.close()
            if got != want:
                mismatches.append((call, args, want, got))
        return mismatches

    assert run(main()) == []
