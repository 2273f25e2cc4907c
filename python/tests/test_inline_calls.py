"""``blockio.open``'s ``seek`` and ``read`` served inline (no await, no
queue) rely on a record of the file's state (``AsyncFile._update_inline``) kept
as queued calls end. These tests change that state in every way it can
change, then check the calls that follow against the built-in ``open`` on
the same steps: a record left saying "served inline" would let a ``seek``
skip the flush of buffered writes, or a ``read`` reach a detached or closed
descriptor. And once the change is over, the calls are served inline
again. Both backends."""

import asyncio
import contextlib
import os

import pytest

import blockio
from blockio._blockio import set_turn_count
from fdnumbers import move_to

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])


def served_inline(coro):
    """What ``coro`` returns, if it finishes without suspending (served
    inline); raises ``AssertionError`` if it suspends. The thread's count
    of calls served inline (kept across tests) starts again first, so that
    the call is not the one whose turn of the event loop is due, which
    suspends once by design."""
    set_turn_count(0)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the call suspended: it was not served inline")


@contextlib.contextmanager
def another_file_on(number, tmp_path):
    """Another file, open on descriptor ``number`` (which a file just
    closed or detached gave back) while the block runs: dup2 puts it there,
    as a new descriptor takes the lowest free number, which another thread
    may have made a lower one."""
    other = tmp_path / "other"
    other.write_bytes(b"other file")
    move_to(os.open(other, os.O_RDONLY), number)
    try:
        yield number
    finally:
        os.close(number)


def with_engine(backend, main):
    e = blockio.Engine(backend=backend)
    try:
        return asyncio.run(main(e))
    finally:
        e.close()


@BACKENDS
def test_a_seek_after_buffered_writes_flushes_them_as_the_builtin(tmp_path, backend):
    ours, ref = tmp_path / "ours", tmp_path / "ref"
    for p in (ours, ref):
        p.write_bytes(b"." * 100)

    async def main(e):
        async with blockio.open(ours, "r+b", engine=e) as f:
            assert served_inline(f.seek(10)) == 10
            assert await f.write(b"abc") == 3  # buffered
            assert await f.seek(50) == 50  # flushes first
            got = await f.read(5)
            await f.seek(8)
            again = await f.read(7)
        return got, again

    got = with_engine(backend, main)
    with open(ref, "r+b") as f:
        f.seek(10)
        f.write(b"abc")
        f.seek(50)
        want = f.read(5)
        f.seek(8)
        want_again = f.read(7)
    assert got == (want, want_again) == (b".....", b"..abc..")
    assert ours.read_bytes() == ref.read_bytes()


@BACKENDS
def test_calls_are_served_inline_again_once_the_writes_are_flushed(tmp_path, backend):
    p = tmp_path / "f"
    p.write_bytes(bytes(range(256)) * 64)

    async def main(e):
        async with blockio.open(p, "r+b", engine=e) as f:
            assert served_inline(f.seek(1000)) == 1000
            await f.write(b"xyz")
            await f.flush()
            assert served_inline(f.seek(999)) == 999
            assert served_inline(f.read(5)) == bytes([999 % 256]) + b"xyz" + bytes([1003 % 256])

    with_engine(backend, main)


@BACKENDS
def test_append_mode_reads_as_the_builtin_after_writes_at_the_end(tmp_path, backend):
    ours, ref = tmp_path / "ours", tmp_path / "ref"
    for p in (ours, ref):
        p.write_bytes(b"0123456789")

    async def main(e):
        async with blockio.open(ours, "a+b", engine=e) as f:
            first = await f.tell()
            await f.write(b"AB")
            after = await f.tell()
            await f.seek(8)
            got = await f.read(4)
            await f.write(b"C")  # at the end, whatever the position
            await f.seek(0)
            whole = await f.read()
        return first, after, got, whole

    got = with_engine(backend, main)
    with open(ref, "a+b") as f:
        first = f.tell()
        f.write(b"AB")
        after = f.tell()
        f.seek(8)
        part = f.read(4)
        f.write(b"C")
        f.seek(0)
        whole = f.read()
    assert got == (first, after, part, whole)
    assert ours.read_bytes() == ref.read_bytes() == b"0123456789ABC"


@BACKENDS
def test_a_seek_from_the_position_is_served_inline_and_lands_where_the_builtins_does(tmp_path, backend):
    """``seek(n, SEEK_CUR)`` is arithmetic on the known position, served at
    the call's first step; one that would go before the start is not, and
    raises the built-in's ``EINVAL`` with the position unmoved."""
    p = tmp_path / "f"
    p.write_bytes(bytes(range(100)))

    async def main(e):
        async with blockio.open(p, "rb", engine=e) as f:
            assert served_inline(f.seek(10)) == 10
            assert served_inline(f.read(5)) == bytes(range(10, 15))
            assert served_inline(f.seek(20, os.SEEK_CUR)) == 35
            assert served_inline(f.seek(-30, os.SEEK_CUR)) == 5
            with pytest.raises(OSError) as raised:
                await f.seek(-6, os.SEEK_CUR)
            assert raised.value.errno == 22
            return await f.read(3)

    assert with_engine(backend, main) == bytes(range(5, 8))
    with open(p, "rb") as f:
        f.seek(10)
        f.read(5)
        assert (f.seek(20, os.SEEK_CUR), f.seek(-30, os.SEEK_CUR)) == (35, 5)


@BACKENDS
def test_a_detached_file_refuses_seek_and_read_as_the_builtin(tmp_path, backend):
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")

    async def main(e):
        f = await blockio.open(p, "rb", engine=e)
        assert served_inline(f.seek(2)) == 2
        assert served_inline(f.read(2)) == b"23"
        raw = f.detach()
        number = raw.fileno()
        try:
            for call in (lambda: f.seek(0), lambda: f.read(3), lambda: f.read(0)):
                with pytest.raises(ValueError, match="detached"):
                    await call()
            assert raw.read() == b"456789"
        finally:
            raw.close()
        # The descriptor's number, now free, names another file: still
        # nothing of it is read through the detached file.
        with another_file_on(number, tmp_path):
            with pytest.raises(ValueError, match="detached"):
                await f.read(5)

    with_engine(backend, main)
    b = open(p, "rb")
    b.detach()
    with pytest.raises(ValueError, match="detached"):
        b.seek(0)


@BACKENDS
def test_a_closed_file_refuses_seek_and_read_as_the_builtin(tmp_path, backend):
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")

    async def main(e):
        f = await blockio.open(p, "rb", engine=e)
        assert served_inline(f.seek(0)) == 0
        assert served_inline(f.read(3)) == b"012"
        number = f.fileno()
        await f.close()
        with another_file_on(number, tmp_path):
            for call in (lambda: f.seek(0), lambda: f.read(3)):
                with pytest.raises(ValueError, match="closed file"):
                    await call()

    with_engine(backend, main)
    b = open(p, "rb")
    b.close()
    with pytest.raises(ValueError, match="closed file"):
        b.seek(0)


@BACKENDS
@pytest.mark.parametrize("kind", ["regular", "pipe"])
def test_the_file_keeps_its_state_in_the_core_alone(tmp_path, backend, kind):
    """Every field of a binary file is one of the core's ``FileState``'s:
    after writes, reads, seeks, lines, a flush and ``fileno()`` (on a
    regular file, or on a pipe's streams), the Python object holds nothing
    of its own (no slot, an empty ``__dict__``), and what the calls
    changed reads back from the core's fields: the position, the write
    buffer, and the descriptor's number known outside once given out."""
    from blockio._blockio import FileState

    async def regular(e):
        p = tmp_path / "f"
        p.write_bytes(b"line one\nline two\n" * 100)
        f = await blockio.open(p, "r+b", engine=e)
        assert f._shared is False
        assert await f.readline() == b"line one\n"
        await f.seek(0, os.SEEK_END)
        await f.write(b"more")
        assert bytes(f._wbuf) == b"more"  # (buffered, in the core's field)
        await f.flush()
        assert f._wbuf == bytearray() and f._pos == 1804
        await f.seek(9)
        assert await f.read(8) == b"line two"
        f.fileno()
        assert f._shared is True and os.lseek(f.fileno(), 0, os.SEEK_CUR) == 17
        return f

    async def pipe(e):
        r, w = os.pipe()
        fr = await blockio.open(r, "rb", engine=e)
        fw = await blockio.open(w, "wb", buffering=0, engine=e)
        await fw.write(b"ab\ncd")
        assert await fr.readline() == b"ab\n"
        assert await fr.read(2) == b"cd"
        assert fr._stream and fw._stream
        await fw.close()
        return fr

    async def main(e):
        f = await (regular(e) if kind == "regular" else pipe(e))
        try:
            assert type(f).__slots__ == ("__dict__", "__weakref__")
            assert isinstance(f, FileState) and vars(f) == {}
            assert not hasattr(f.raw, "shared")  # (whether it is given out is the file's field)
        finally:
            await f.close()

    with_engine(backend, main)
