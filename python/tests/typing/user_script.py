"""A user's script that touches every public call of blockio; type-checked
with ``mypy --strict`` by ``test_typing.py`` (and run, so it stays true)."""

import asyncio
import os
import sys
from typing import List, Union

import blockio

if sys.version_info >= (3, 11):
    from typing import assert_type
else:  # pragma: no cover
    from typing_extensions import assert_type


async def files(path: str) -> None:
    async with blockio.open(path, "wb") as fb:
        assert_type(fb, blockio.AsyncFile)
        n: int = await fb.write(b"line 1\nline 2\n")
        await fb.writelines([b"x", bytearray(b"y\n")])
        await fb.flush()
        await fb.fsync()
        assert n == 14 and await fb.writable() and not fb.readable()
    async with blockio.open(path, "rb", buffering=0) as fr:
        assert_type(fr, blockio.AsyncFile)
        first: bytes = await fr.readline()
        rest: List[bytes] = await fr.readlines()
        await fr.seek(0)
        buf = bytearray(4)
        got: int = await fr.readinto(buf)
        peeked: bytes = await fr.peek(1)
        one: bytes = await fr.read1(1)
        everything: bytes = await fr.readall()
        pos: int = await fr.tell()
        assert first and rest and got == 4 and peeked is not None and one and everything and pos
        assert await fr.seekable() and not await fr.isatty() and fr.fileno() >= 0
        async for line_b in fr:
            assert_type(line_b, bytes)
    async with blockio.open(path, "r+", encoding="utf-8", errors="strict", newline=None) as ft:
        assert_type(ft, blockio.AsyncTextFile)
        text: str = await ft.read(3)
        line: str = await ft.readline()
        lines: List[str] = await ft.readlines()
        await ft.seek(0)
        async for line_t in ft:
            assert_type(line_t, str)
        await ft.write("more\n")
        await ft.writelines(["a", "b\n"])
        size: int = await ft.truncate()
        assert text and line is not None and lines is not None and size > 0
        where: int = await ft.tell()
        assert where == size
    f = await blockio.open(path, "ab", loop=asyncio.get_running_loop(), executor=None)  # (aiofiles': ignored)
    assert_type(f, blockio.AsyncFile)
    assert f.mode == "ab"
    raw = f.detach()
    raw.close()
    t = await blockio.open(os.open(path, os.O_RDONLY), "r", closefd=True)
    assert_type(t, blockio.AsyncTextFile)
    await t.close()


async def engine_calls(e: blockio.Engine, path: str) -> None:
    with open(path, "rb") as f:
        page: bytes = await e.aread(f, offset=0, length=4)
        pages = await e.aread_batch(f, offsets=[0, 2], length=2)
        assert_type(pages, List[bytes])
        maybe = await e.aread_batch(f, offsets=[0], length=2, return_exceptions=True)
        assert_type(maybe, List[Union[bytes, OSError]])
        n: int = await e.areadinto(f, bytearray(4), 0)
        ns = await e.areadinto_batch([(f, bytearray(4), 0)])
        assert page and pages and n and ns
    with open(path, "r+b") as w:
        wrote: int = await e.awrite(w, b"ab", 0)
        await e.awrite_batch([(w, b"cd", 2)])
        await e.afsync(w)
        await e.afdatasync(w)
        assert wrote == 2
    whole = await e.aread_files([path, os.fsencode(path)])
    assert_type(whole, List[bytes])
    some = await e.aread_files([path], return_exceptions=True)
    assert_type(some, List[Union[bytes, OSError, MemoryError, ValueError]])
    assert whole[0] == whole[1] and some


def main() -> None:
    path = sys.argv[1]
    e = blockio.Engine(queue_depth=64, backend="auto")
    backend: str = e.backend
    reason = e.fallback_reason
    assert backend in ("uring", "threads") and (reason is None or isinstance(reason, str))
    asyncio.run(files(path))
    with open(path, "rb") as f:
        pages = e.read_batch(f, offsets=[0], length=4, return_exceptions=True)
        assert_type(pages, List[Union[bytes, OSError]])
        counts = e.readinto_batch([(f, bytearray(2), 0)])
        assert_type(counts, List[int])
        assert pages and counts
    with open(path, "r+b") as w:
        assert e.write_batch([(w, b"zz", 0)]) == [2]
        e.fsync(w)
        e.fdatasync(w)
    asyncio.run(engine_calls(e, path))
    contents = e.read_files([path])
    assert_type(contents, List[bytes])
    assert contents
    buf: memoryview = blockio.aligned_buffer(4096)
    version: str = blockio.__version__
    assert len(buf) == 4096 and version and blockio.default_engine() is not None
    e.close()
    assert e.closed


if __name__ == "__main__":
    main()
