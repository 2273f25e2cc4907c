"""Engine.fallocate and Engine.afallocate on both backends, checked
against the file's size, its bytes and the kernel's errors."""

import asyncio
import errno
import io
import os

import pytest

import blockio


def seven_file(tmp_path, name="f.bin"):
    """A file of 16 KiB of sevens, opened for reading and writing."""
    p = tmp_path / name
    p.write_bytes(b"\7" * 16384)
    return open(p, "r+b")


def test_fallocate_grows_keeps_size_and_punches_holes(engine, tmp_path):
    with seven_file(tmp_path) as f:
        engine.fallocate(f, offset=8192, length=16384)
        assert os.fstat(f.fileno()).st_size == 24576
        blocks = os.fstat(f.fileno()).st_blocks
        engine.fallocate(f.fileno(), offset=24576, length=65536, mode=blockio.FALLOC_FL_KEEP_SIZE)
        st = os.fstat(f.fileno())
        assert (st.st_size, st.st_blocks >= blocks + 128) == (24576, True)
        hole = blockio.FALLOC_FL_PUNCH_HOLE | blockio.FALLOC_FL_KEEP_SIZE
        engine.fallocate(f, offset=4096, length=4096, mode=hole)
        data = os.pread(f.fileno(), 30000, 0)
        assert data == b"\7" * 4096 + b"\0" * 4096 + b"\7" * 8192 + b"\0" * 8192


def test_fallocate_errors_are_the_kernels_and_arguments_are_checked(engine, tmp_path):
    with seven_file(tmp_path) as f:
        with pytest.raises(OSError) as ei:
            engine.fallocate(f, offset=0, length=0)
        assert ei.value.errno == errno.EINVAL
        # A hole must keep the size: the kernel refuses it otherwise.
        with pytest.raises(OSError) as ei:
            engine.fallocate(f, offset=0, length=4096, mode=blockio.FALLOC_FL_PUNCH_HOLE)
        assert ei.value.errno == errno.EOPNOTSUPP
        with pytest.raises(ValueError, match="offset must be at least 0"):
            engine.fallocate(f, offset=-1, length=4096)
        with pytest.raises(ValueError, match="length must be at least 0"):
            engine.fallocate(f, offset=0, length=-1)
        with pytest.raises(TypeError):
            engine.fallocate(f, 0, 4096)  # offset and length are keyword-only
    with open(tmp_path / "f.bin", "rb") as ro:
        with pytest.raises(OSError) as ei:
            engine.fallocate(ro, offset=0, length=4096)
        assert ei.value.errno == errno.EBADF


def test_afallocate_does_what_fallocate_does(engine, tmp_path):
    async def main():
        with seven_file(tmp_path) as f:
            await engine.afallocate(f, offset=16384, length=4096)
            hole = blockio.FALLOC_FL_PUNCH_HOLE | blockio.FALLOC_FL_KEEP_SIZE
            await engine.afallocate(f.fileno(), offset=0, length=8192, mode=hole)
            assert os.pread(f.fileno(), 30000, 0) == b"\0" * 8192 + b"\7" * 8192 + b"\0" * 4096
            with pytest.raises(OSError) as ei:
                await engine.afallocate(f, offset=0, length=0)
            assert ei.value.errno == errno.EINVAL
        with open(tmp_path / "f.bin", "rb") as ro:
            with pytest.raises(OSError) as ei:
                await engine.afallocate(ro, offset=0, length=4096)
            assert ei.value.errno == errno.EBADF

    asyncio.run(main())


def test_a_blockio_open_files_fallocate_sees_its_buffered_writes(engine, tmp_path):
    async def main():
        async with blockio.open(tmp_path / "o.bin", "w+b", engine=engine) as f:
            assert await f.write(b"\5" * 8192) == 8192  # buffered until the fallocate
            await f.fallocate(offset=8192, length=8192)
            assert await f.seek(0, os.SEEK_END) == 16384
            await f.seek(0)
            assert await f.read(100) == b"\5" * 100
            hole = blockio.FALLOC_FL_PUNCH_HOLE | blockio.FALLOC_FL_KEEP_SIZE
            await f.fallocate(offset=0, length=4096, mode=hole)
            assert await f.tell() == 100
            assert await f.read() == b"\0" * 3996 + b"\5" * 4096 + b"\0" * 8192
        async with blockio.open(tmp_path / "o.bin", "rb", engine=engine) as r:
            with pytest.raises(io.UnsupportedOperation, match="fallocate"):
                await r.fallocate(offset=0, length=4096)

    asyncio.run(main())
