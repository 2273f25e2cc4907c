"""Differences from the reference (the built-in ``open`` and aiofiles):
pipes on both backends, UTF-16 seek(tell()), arguments checked at the call,
``newlines`` and ``raw``, and a cancelled read into a bytearray."""

import asyncio
import errno
import io
import os

import pytest

import blockio


@pytest.mark.parametrize("mode", ["rb", "r"])
def test_blockio_open_on_a_pipe_reads_it_on_both_backends(engine, mode):
    """Point 10: the same lines on io_uring and on the thread pool (which
    said "Illegal seek" after the first line)."""
    r, w = os.pipe()
    lines = [f"line {i}\n" for i in range(2000)]
    os.set_blocking(w, True)

    async def main():
        async with blockio.open(r, mode, engine=engine) as f:
            loop = asyncio.get_running_loop()
            writer = loop.run_in_executor(None, lambda: (os.write(w, "".join(lines).encode()), os.close(w)))
            got = [line async for line in f]
            await writer
            assert await f.read() in (b"", "")
            with pytest.raises(OSError) as ei:
                await f.tell()
            if "b" in mode:
                assert ei.value.errno == errno.ESPIPE  # (FileIO's, as the built-in's)
            else:
                assert isinstance(ei.value, io.UnsupportedOperation)  # (the built-in text file's)
            return got

    got = asyncio.run(main())
    assert got == ([s.encode() for s in lines] if "b" in mode else lines)


def test_blockio_open_writes_a_pipe_on_both_backends(engine):
    r, w = os.pipe()

    async def main():
        async with blockio.open(w, "wb", buffering=0, engine=engine) as f:
            assert await f.write(b"hello ") == 6
            assert await f.write(memoryview(b"pipe")) == 4
        async with blockio.open(r, "rb", engine=engine) as f:
            buf = bytearray(20)
            n = await f.readinto(buf)
            return bytes(buf[:n]) + await f.read()

    assert asyncio.run(main()) == b"hello pipe"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_seek_to_tell_at_a_line_start_in_a_bom_encoding(tmp_path, encoding):
    """Point 11: seek(tell()) at a line start comes back to that line, as
    with the built-in file (the decoder knows the BOM's byte order), and a
    write there adds no BOM."""
    p = tmp_path / "t.txt"
    lines = [f"line {i} é\n" for i in range(5)]
    p.write_text("".join(lines), encoding=encoding)

    async def main():
        async with blockio.open(p, "r+", encoding=encoding) as f:
            assert await f.readline() == lines[0]
            at = await f.tell()
            assert await f.readline() == lines[1]
            assert await f.seek(at) == at
            assert await f.readline() == lines[1]
            assert [line async for line in f] == lines[2:]
            await f.seek(at)
            await f.write("LINE 1 é\n")
        async with blockio.open(p, "r", encoding=encoding) as f:
            at2 = None
            await f.readline()
            at2 = await f.tell()
        async with blockio.open(p, "r", encoding=encoding) as f:  # a fresh file, seeking first
            await f.seek(at2)
            return await f.read()

    rest = asyncio.run(main())
    assert rest == "LINE 1 é\n" + "".join(lines[2:])
    assert p.read_text(encoding=encoding) == lines[0] + "LINE 1 é\n" + "".join(lines[2:])


def test_file_arguments_are_checked_at_the_call(tmp_path):
    """Point 14: seek(1.5) and read(2.5) raise TypeError at the call, as the
    built-in file's do, and nothing changes."""
    p = tmp_path / "a.bin"
    p.write_bytes(b"0123456789")

    async def main():
        for mode in ("rb", "r"):
            async with blockio.open(p, mode) as f:
                with pytest.raises(TypeError, match="offset must be an integer, not 'float'"):
                    await f.seek(1.5)
                with pytest.raises(TypeError, match="argument should be integer or None, not 'float'"):
                    await f.read(2.5)
                # (a text file's readline takes an int only, as the built-in's)
                line_size = "argument should be integer or None, not 'str'" if mode == "rb" else \
                    "'str' object cannot be interpreted as an integer"
                with pytest.raises(TypeError, match=line_size):
                    await f.readline("3")
                assert await f.read(3) in (b"012", "012")  # the position did not move

    asyncio.run(main())


def test_huge_ints_raise_value_error_naming_the_argument(engine, tmp_path):
    """Point 14: ints beyond 64 bits raise ValueError naming the argument
    (the README's promise), not OverflowError."""
    p = tmp_path / "a.bin"
    p.write_bytes(b"x" * 100)
    with open(p, "r+b") as f:
        with pytest.raises(ValueError, match="length"):
            engine.read_batch(f, offsets=[0], length=2**63)
        with pytest.raises(ValueError, match=r"offsets: offset 18446744073709551616 \(item 1\)"):
            engine.read_batch(f, offsets=[0, 2**64], length=1)
        with pytest.raises(ValueError, match="ops: offset"):
            engine.readinto_batch([(f, bytearray(1), 2**70)])
        with pytest.raises(ValueError, match="ops: offset must be at least 0"):
            engine.write_batch([(f, b"x", -2**70)])

        async def main():
            with pytest.raises(ValueError, match="length"):
                await engine.aread(f, offset=0, length=2**63)
            with pytest.raises(ValueError, match="offset"):
                await engine.aread(f, offset=2**64, length=1)
            with pytest.raises(ValueError, match="offsets"):
                await engine.aread_batch(f, offsets=[2**64], length=1)
            with pytest.raises(ValueError, match="ops"):
                await engine.awrite_batch([(f, b"x", 2**64)])

        asyncio.run(main())


def test_text_newlines_and_binary_raw(tmp_path):
    """Point 15: text files have ``newlines`` and binary files ``raw``, as
    the built-in's."""
    p = tmp_path / "nl.txt"
    p.write_bytes(b"a\r\nb\nc\rd")

    async def main():
        async with blockio.open(p, "r") as f:
            assert f.newlines is None
            await f.readline()
            first = f.newlines
            await f.read()
            return first, f.newlines

    with open(p, "r") as ref:
        ref.readline()
        ref_first = ref.newlines
        ref.read()
        ref_all = ref.newlines
    assert asyncio.run(main()) == (ref_first, ref_all)

    async def raw():
        async with blockio.open(p, "rb") as f:
            assert f.raw.fileno() == f.fileno()
            assert f.raw.name == f.name and f.raw.closed is False

    asyncio.run(raw())


def test_a_cancelled_areadinto_on_a_pipe_releases_the_bytearray(engine):
    """Point 15: the bytearray of a read cancelled in flight becomes
    resizable again once the kernel lets go of it, without any further
    blockio call."""
    r, w = os.pipe()

    async def main():
        buf = bytearray(16)
        task = asyncio.ensure_future(engine.areadinto(r, buf, 0))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        # Cancelled in flight on io_uring; on the thread pool pread on a
        # pipe has failed at once (ESPIPE), so nothing is in flight there.
        (outcome,) = await asyncio.gather(task, return_exceptions=True)
        assert isinstance(outcome, (asyncio.CancelledError, OSError)), outcome
        for _ in range(6000):  # a watchdog of about a minute, not a timing window
            try:
                buf.append(1)
                return True
            except BufferError:
                await asyncio.sleep(0.01)
        return False

    try:
        assert asyncio.run(main()), "the bytearray stayed exported"
    finally:
        os.close(r)
        os.close(w)


def test_detach_on_a_pipe_hands_back_the_unread_stream(engine):
    """detach() of a pipe's file hands back a synchronous file that reads
    on from where the pipe is (a pipe has no position to set)."""
    r, w = os.pipe()
    os.write(w, b"abc")
    os.close(w)

    async def main():
        f = await blockio.open(r, "rb", buffering=0, engine=engine)
        assert await f.read(1) == b"a"
        return f.detach()

    sync = asyncio.run(main())
    try:
        assert sync.read() == b"bc"
    finally:
        sync.close()


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_aread_type_error_names_its_offset_argument(tmp_path, backend):
    """aread(offset=1.0) raises TypeError naming 'offset', the argument
    the caller gave, not the core's list 'offsets'."""
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    e = blockio.Engine(backend=backend)
    fd = os.open(p, os.O_RDONLY)

    async def main():
        with pytest.raises(TypeError, match="argument 'offset':"):
            await e.aread(fd, offset=1.0, length=1)

    try:
        asyncio.run(main())
    finally:
        os.close(fd)
        e.close()


def test_a_descriptor_beyond_32_bits_is_named_as_the_file(engine):
    """A descriptor number no descriptor can have is a ``ValueError``
    naming the file argument, not the offsets."""
    with pytest.raises(ValueError, match=r"^file: a file descriptor is out of range"):
        engine.read_batch(2**40, offsets=[0], length=5)
    with pytest.raises(ValueError, match=r"^ops: a file descriptor is out of range"):
        engine.readinto_batch([(2**40, bytearray(1), 0)])

    async def main():
        with pytest.raises(ValueError, match=r"^file: a file descriptor is out of range"):
            await engine.aread(2**40, offset=0, length=5)

    asyncio.run(main())
