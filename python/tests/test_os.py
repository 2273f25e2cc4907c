"""``blockio.os.stat``: a ``statx`` through the engine, with the same
``os.stat_result`` (every field) and the same errors as ``os.stat``, on
both backends, under asyncio and uvloop. The other ``blockio.os`` calls
run aiofiles' own tests (``test_aiofiles_suite.py``)."""

import asyncio
import errno
import os

import pytest

import blockio
import blockio._engine
import blockio.os

FIELDS = ["st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime",
          "st_ctime", "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev"]


def loops():
    import uvloop

    return [asyncio.new_event_loop, uvloop.new_event_loop]


@pytest.mark.parametrize("loop_factory", loops(), ids=["asyncio", "uvloop"])
@pytest.mark.parametrize("backend", ["io_uring", "threads"])
def test_stat_matches_os_stat_field_by_field(tmp_path, monkeypatch, loop_factory, backend):
    monkeypatch.setattr(blockio._engine, "_default", blockio.Engine(backend=backend))
    through_engine = []
    astat = blockio.Engine._astat

    async def counted(self, *args):
        through_engine.append(args)
        return await astat(self, *args)

    monkeypatch.setattr(blockio.Engine, "_astat", counted)
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 12345)
    link = tmp_path / "link"
    link.symlink_to(f)
    cases = [(f, True), (tmp_path, True), (link, True), (link, False), ("/dev/null", True), (bytes(f), True)]

    async def main():
        for path, follow in cases:
            want = os.stat(path, follow_symlinks=follow)
            got = await blockio.os.stat(path, follow_symlinks=follow)
            assert isinstance(got, os.stat_result)
            assert {k: getattr(got, k) for k in FIELDS} == {k: getattr(want, k) for k in FIELDS}, path
        with pytest.raises(FileNotFoundError) as ei:
            await blockio.os.stat(tmp_path / "missing")
        with pytest.raises(FileNotFoundError) as ref:
            os.stat(tmp_path / "missing")
        assert str(ei.value) == str(ref.value) and ei.value.errno == errno.ENOENT
        assert len(through_engine) == len(cases) + 1  # every path went through the engine
        fd = os.open(f, os.O_RDONLY)
        try:
            assert (await blockio.os.stat(fd)).st_size == 12345  # a descriptor: on a thread
        finally:
            os.close(fd)
        assert len(through_engine) == len(cases) + 1

    loop = loop_factory()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        blockio._engine._default.close()
