"""What no input may do: misdirect a write, abort the interpreter, or fail
with an error that does not name the argument at fault."""

import asyncio
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockio

import loops as loop_kinds
from test_asyncio import run
from waits import await_until, watched


@pytest.mark.parametrize("loop_factory", [None, loop_kinds.FACTORIES["uvloop"]], ids=["asyncio", "uvloop"])
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_cancelled_write_never_lands_in_another_file(tmp_path, loop_factory, backend):
    """The reported case: the queue is full of reads waiting on pipes, a
    write times out, its file is closed and the number reused for B."""
    a, b = tmp_path / "A", tmp_path / "B"

    async def main():
        engine = blockio.Engine(backend=backend)
        pipes = [os.pipe() for _ in range(256)]
        # (batches: an aread of a stream waits in the loop's poll, holding no place)
        reads = [asyncio.ensure_future(engine.aread_batch(r, offsets=[0], length=1)) for r, _ in pipes]
        await await_until(lambda: engine._core.pending() >= len(pipes), "every read is in the engine")
        async with blockio.open(a, "wb", buffering=0, engine=engine) as f:
            fd_a = f.fileno()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(f.write(b"SECRET"), 0.1)
        fd_b = os.open(b, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            # The number was reused, as in the report.
            assert fd_b == fd_a
            for _, w in pipes:
                os.write(w, b"x")
            assert await asyncio.gather(*reads) == [[b"x"]] * len(pipes)
            # Anything still queued behind the reads has run by now.
            await engine.awrite_batch([(fd_b, b"", 0)])
            await asyncio.sleep(0.1)  # (a margin for a stray write, which no event would announce)
        finally:
            os.close(fd_b)
            for r, w in pipes:
                os.close(r)
                os.close(w)
            engine.close()

    run(main(), loop_factory)
    assert b.read_bytes() == b"", "the cancelled write reached another file"
    # Cancelled before it reached the kernel: never submitted.
    assert a.read_bytes() == b""


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_cancelled_write_in_flight_stays_with_its_file(tmp_path, backend):
    """A write already in the kernel when cancelled completes into its own
    file even though the file object is closed at once."""
    a = tmp_path / "A"

    async def main():
        engine = blockio.Engine(backend=backend)
        try:
            for i in range(200):
                async with blockio.open(a, "ab", buffering=0, engine=engine) as f:
                    t = asyncio.ensure_future(f.write(b"%04d" % i))
                    await asyncio.sleep(0)
                    t.cancel()
        finally:
            engine.close()

    run(main())
    data = a.read_bytes()
    # Each write landed whole in A or not at all, and nothing else did.
    assert len(data) % 4 == 0
    got = [int(data[i : i + 4]) for i in range(0, len(data), 4)]
    assert len(got) == len(set(got)) and all(0 <= n < 200 for n in got)


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_cancelled_reads_buffer_is_released(backend):
    """A read into a bytearray from a pipe, cancelled while it waits for
    data, leaves the bytearray free at once (the read goes into the
    engine's own buffer, kept until the kernel completes it), and data
    that arrives later never lands in it."""

    async def main():
        engine = blockio.Engine(backend=backend)
        r, w = os.pipe()
        buf = bytearray(16)
        try:
            t = asyncio.ensure_future(engine.areadinto(r, buf, 0))
            # (a read of a stream waits in the loop's poll, then in the engine)
            await await_until(lambda: watched(r) or engine._core.pending() >= 1 or t.done(), "the read waits")
            t.cancel()
            (outcome,) = await asyncio.gather(t, return_exceptions=True)
            # (the thread pool's pread on a pipe fails at once instead)
            assert isinstance(outcome, (asyncio.CancelledError, OSError)), outcome
            buf.extend(b"x")  # not lent to anything
            os.write(w, b"data")
            await asyncio.sleep(0.05)  # (time for a stray completion to land, which no event announces)
            assert bytes(buf) == bytes(16) + b"x"
        finally:
            os.close(r)
            os.close(w)
            engine.close()

    run(main())


def test_huge_lengths_raise_instead_of_aborting(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 8192)
    e = blockio.Engine()
    fd = os.open(p, os.O_RDONLY)
    dfd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    try:
        for call in (
            lambda: e.read_batch(fd, offsets=[0], length=1 << 40),
            lambda: e.read_batch(dfd, offsets=[0], length=1 << 40),
            lambda: run(e.aread(fd, offset=0, length=1 << 40)),
            lambda: run(e.aread(dfd, offset=0, length=1 << 40)),
        ):
            with pytest.raises(ValueError, match="length 1099511627776 is more than one read"):
                call()
        # Within one read's limit, but more than the machine's memory.
        for call in (
            lambda: e.read_batch(dfd, offsets=[0] * (1 << 20), length=0x7FFFF000),
            lambda: e.read_batch(fd, offsets=[0] * (1 << 20), length=0x7FFFF000),
            lambda: run(e.aread_batch(fd, offsets=[0] * (1 << 20), length=0x7FFFF000)),
        ):
            with pytest.raises(MemoryError, match="more than this machine's memory"):
                call()
        # The engine still works.
        assert e.read_batch(fd, offsets=[0], length=4) == [b"xxxx"]
    finally:
        os.close(fd)
        os.close(dfd)
        e.close()


def test_negative_arguments_are_named(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    e = blockio.Engine()
    fd = os.open(p, os.O_RDWR)
    try:
        with pytest.raises(ValueError, match="offset must be at least 0, got -1"):
            e.read_batch(fd, offsets=[-1], length=10)
        with pytest.raises(ValueError, match=r"offset must be at least 0, got -5 \(item 1 of the batch\)"):
            e.read_batch(fd, offsets=[0, -5], length=10)
        with pytest.raises(ValueError, match="length must be at least 0, got -3"):
            e.read_batch(fd, offsets=[0], length=-3)
        with pytest.raises(ValueError, match="length must be at least 0"):
            run(e.aread(fd, offset=0, length=-1))
        with pytest.raises(ValueError, match="offset must be at least 0"):
            run(e.aread(fd, offset=-1, length=1))
        with pytest.raises(ValueError, match="offset must be at least 0"):
            e.write_batch([(fd, b"x", -1)])
        with pytest.raises(ValueError, match="offset must be at least 0"):
            run(e.awrite(fd, b"x", -1))
        with pytest.raises(ValueError, match="offset must be at least 0"):
            e.readinto_batch([(fd, bytearray(1), -2)])
    finally:
        os.close(fd)
        e.close()
    for q in (-1, 0, 32768, 1 << 40):
        with pytest.raises(ValueError, match=rf"^queue_depth must be 1\.\.=32767, got {q}$"):
            blockio.Engine(queue_depth=q)


def test_queue_depth_takes_the_engines_rule(tmp_path):
    """One rule for ``queue_depth``: 0 and the ceiling + 1 are refused with
    the argument named, the ceiling (32,767) is taken by both the batch
    engine and the async engine behind ``Engine``."""
    for q in (0, 32768):
        with pytest.raises(ValueError, match=rf"^queue_depth must be 1\.\.=32767, got {q}$"):
            blockio.Engine(queue_depth=q)
    p = tmp_path / "f"
    p.write_bytes(b"abcd")
    fd = os.open(p, os.O_RDONLY)
    e = blockio.Engine(queue_depth=32767)
    try:
        assert e.read_batch(fd, offsets=[0], length=4) == [b"abcd"]
        assert run(e.aread_batch(fd, offsets=[0], length=4)) == [b"abcd"]
    finally:
        os.close(fd)
        e.close()


_ints = st.one_of(
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.sampled_from([0, 1, 4095, 4096, 0x7FFFF000, 0x7FFFF001, -1, 1 << 40]),
)
_ok_errors = (ValueError, MemoryError, OSError, OverflowError, TypeError)

_engine = None


def _fuzz_engine():
    global _engine
    if _engine is None:
        _engine = blockio.Engine()
    return _engine


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=_ints, length=_ints, count=st.integers(min_value=0, max_value=4), direct=st.booleans())
def test_fuzz_reads_raise_or_return(tmp_path, offset, length, count, direct):
    """Any integers reach the reads as a Python exception or a result, never
    a panic or an abort (either would end this process)."""
    p = tmp_path / "fuzz"
    if not p.exists():
        p.write_bytes(os.urandom(16384))
    fd = os.open(p, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    e = _fuzz_engine()
    try:
        for call in (
            lambda: e.read_batch(fd, [offset] * count, length),
            lambda: run(e.aread_batch(fd, [offset] * count, length)),
            lambda: e.readinto_batch([(fd, bytearray(64), offset)]),
            lambda: e.write_batch([(fd, b"", offset)]),
        ):
            try:
                out = call()
            except _ok_errors:
                continue
            assert isinstance(out, list)
    finally:
        os.close(fd)


@settings(max_examples=100, deadline=None)
@given(q=_ints, backend=st.sampled_from([None, "auto", "threads", "uring", "io_uring", "", "bogus"]))
def test_fuzz_engine_arguments(q, backend):
    try:
        blockio.Engine(queue_depth=q, backend=backend).close()
    except _ok_errors:
        pass


def test_o_direct_einval_names_the_alignment(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(os.urandom(1 << 16))
    fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    e = blockio.Engine()
    try:
        with pytest.raises(OSError) as sync_err:
            e.read_batch(fd, offsets=[3], length=4096)
        with pytest.raises(OSError) as buf_err:
            # One byte past a page boundary: misaligned for any device.
            e.readinto_batch([(fd, blockio.aligned_buffer(8192)[1:4097], 0)])
        with pytest.raises(OSError) as async_err:
            run(e.aread(fd, offset=3, length=4096))
        for err in (sync_err.value, buf_err.value, async_err.value):
            assert err.errno == 22
            assert "O_DIRECT on this file needs offsets and lengths that are multiples of" in str(err)
            assert "blockio.aligned_buffer" in str(err)
        # The helper's buffers are what O_DIRECT takes.
        buf = blockio.aligned_buffer(8192)
        assert e.readinto_batch([(fd, buf, 4096)]) == [8192]
        assert bytes(buf) == p.read_bytes()[4096:12288]
        buf[:4] = b"abcd"
        assert e.write_batch([(fd, buf[:4096], 0)]) == [4096]
    finally:
        os.close(fd)
        e.close()
    assert p.read_bytes()[:4] == b"abcd"


def test_aligned_buffer_arguments():
    import ctypes

    for align in (512, 4096, 1 << 16):
        b = blockio.aligned_buffer(10_000, align)
        assert len(b) == 10_000 and not b.readonly and bytes(b[:3]) == b"\0\0\0"
        assert ctypes.addressof(ctypes.c_char.from_buffer(b)) % align == 0
    assert len(blockio.aligned_buffer(0)) == 0
    with pytest.raises(ValueError, match="size"):
        blockio.aligned_buffer(-1)
    with pytest.raises(ValueError, match="alignment"):
        blockio.aligned_buffer(10, 3000)
    with pytest.raises(MemoryError):
        blockio.aligned_buffer(1 << 60)


def test_offset_and_length_are_keyword_only(tmp_path):
    """The old order (offset, length) and os.pread's (length, offset) are
    both ints: a positional call fails instead of reading the wrong bytes."""
    p = tmp_path / "f.bin"
    p.write_bytes(b"0123456789")
    e = blockio.Engine()
    with open(p, "rb") as f:
        with pytest.raises(TypeError):
            e.read_batch(f, [0], 4)
        with pytest.raises(TypeError):
            run(e.aread(f, 4, 0))
        with pytest.raises(TypeError):
            run(e.aread_batch(f, [0], 4))
        assert e.read_batch(f, length=4, offsets=[2]) == [b"2345"]
        assert run(e.aread(f, length=2, offset=8)) == b"89"
    e.close()


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_batches_on_the_wrong_end_of_a_pipe_fail_at_once(backend):
    """A batch read of a pipe's write end, or write to its read end, fails
    with EBADF at once, as ``os.read``/``os.write`` (and ``aread``/``awrite``)
    do; it waited for the end to become ready, which it never does. Each
    runs in a child killed after 30 s, so a hang fails the test."""
    script = f"""
import errno, os, blockio
e = blockio.Engine(backend={backend!r})
r, w = os.pipe()
for name, call in [
    ("read_batch", lambda: e.read_batch(w, offsets=[0], length=4)),
    ("readinto_batch", lambda: e.readinto_batch([(w, bytearray(4), 0)])),
    ("write_batch", lambda: e.write_batch([(r, b"zz", 0)])),
]:
    try:
        call()
    except OSError as err:
        assert err.errno == errno.EBADF, (name, err)
        print(name, "EBADF")
    else:
        raise SystemExit(name + " did not fail")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["read_batch", "EBADF", "readinto_batch", "EBADF", "write_batch", "EBADF"]


def test_batch_arguments_of_the_wrong_type_are_named(tmp_path):
    """A non-iterable ``offsets`` and an item whose buffer is no buffer
    raise a ``TypeError`` naming the argument or the item (``ops[1]``),
    as the README promises of every bad argument."""
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    e = blockio.Engine()
    with open(p, "r+b") as f:
        with pytest.raises(TypeError, match=r"^offsets: .*'NoneType'"):
            e.read_batch(f, offsets=None, length=4)
        with pytest.raises(TypeError, match=r"^ops\[1\]: .*'str'"):
            e.readinto_batch([(f, bytearray(4), 0), (f, "str", 0)])
        with pytest.raises(TypeError, match=r"^ops\[0\]: .*'NoneType'"):
            e.write_batch([(f, None, 0)])

        async def main():
            with pytest.raises(TypeError, match=r"^offsets: "):
                await e.aread_batch(f, offsets=3, length=4)
            with pytest.raises(TypeError, match=r"^ops\[0\]: "):
                await e.awrite_batch([(f, 1.5, 0)])

        asyncio.run(main())
    e.close()


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_zero_length_read_batch_of_a_write_only_descriptor_fails(tmp_path, backend):
    """``read_batch(length=0)`` of a descriptor not open for reading fails
    with EBADF, as ``os.read(fd, 0)`` and the batch's other reads do; it
    returned empty bytes. Of a readable one it still returns them."""
    import errno

    e = blockio.Engine(backend=backend)
    r, w = os.pipe()
    wo = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        for fd in (w, wo):
            with pytest.raises(OSError) as ref:
                os.read(fd, 0)
            with pytest.raises(OSError) as got:
                e.read_batch(fd, offsets=[0], length=0)
            assert got.value.errno == ref.value.errno == errno.EBADF
        assert e.read_batch(r, offsets=[0, 0], length=0) == [b"", b""]
    finally:
        for fd in (r, w, wo):
            os.close(fd)
        e.close()
