"""What code written for ``aiofiles.open`` passes or reads back that the
built-in ``open`` does not take or say: ``loop`` and ``executor``, and the
binary file's ``mode`` (the built-in ``FileIO``'s spelling, which aiofiles
hands on). aiofiles itself is the reference where it is called."""

import asyncio
import concurrent.futures

import aiofiles
import pytest

import blockio

from test_asyncio import run

BINARY = ["rb", "r+b", "rb+", "br", "br+", "wb", "w+b", "bw", "ab", "a+b", "ba+", "xb", "x+b"]
TEXT = ["r", "rt", "r+", "tr+", "w", "w+", "wt", "a", "a+", "x", "x+"]


def _fresh(tmp_path, mode, name):
    p = tmp_path / name
    if "x" not in mode:
        p.write_bytes(b"abc\n")
    return p


@pytest.mark.parametrize("mode", BINARY)
@pytest.mark.parametrize("buffering", [-1, 0])
def test_binary_mode_reads_back_as_the_builtin_and_aiofiles_say(tmp_path, mode, buffering):
    with open(_fresh(tmp_path, mode, "builtin"), mode, buffering=buffering) as f:
        expected = f.mode

    async def main():
        async with aiofiles.open(_fresh(tmp_path, mode, "aiofiles"), mode, buffering=buffering) as f:
            theirs = f.mode
        async with blockio.open(_fresh(tmp_path, mode, "blockio"), mode, buffering=buffering) as f:
            return theirs, f.mode

    assert run(main()) == (expected, expected)


@pytest.mark.parametrize("mode", TEXT)
def test_text_mode_and_its_buffers_mode_read_back_as_the_builtin_says(tmp_path, mode):
    with open(_fresh(tmp_path, mode, "builtin"), mode) as f:
        expected = (f.mode, f.buffer.mode)

    async def main():
        async with blockio.open(_fresh(tmp_path, mode, "blockio"), mode) as f:
            return f.mode, f.buffer.mode

    assert run(main()) == expected


class _CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_loop_and_executor_are_taken_and_ignored(tmp_path, backend):
    p = tmp_path / "f"
    p.write_bytes(b"one\ntwo\n")
    engine = blockio.Engine(backend=backend)
    pool = _CountingExecutor(1)

    async def main():
        loop = asyncio.get_running_loop()
        async with blockio.open(p, "rb", loop=loop, executor=pool, engine=engine) as f:
            binary = await f.read()
        f = await blockio.open(p, "r", loop=None, executor=None, engine=engine)
        try:
            text = await f.readline()
        finally:
            await f.close()
        async with blockio.open(p, "a", loop=loop, executor=pool, engine=engine) as f:
            await f.write("three\n")
        return binary, text

    try:
        assert run(main()) == (b"one\ntwo\n", "one\n")
        assert p.read_bytes() == b"one\ntwo\nthree\n"
        assert pool.submitted == 0  # (nothing was handed to it)
    finally:
        pool.shutdown()
        engine.close()


def test_text_files_buffer_is_an_async_binary_file_over_the_same_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"line one\nline two\n")

    async def main():
        async with blockio.open(p, "r+", encoding="ascii") as f:
            buf = f.buffer
            assert isinstance(buf, blockio.AsyncFile)
            assert (buf.name, buf.mode, buf.fileno()) == (f.name, "rb+", f.fileno())
            assert await f.read() == "line one\nline two\n"
            # The text file's position is the binary file's: a write through
            # the buffer goes at the end, and a seek of either moves both.
            assert await buf.tell() == 18
            await buf.write(b"line three\n")
            await buf.flush()
            await f.seek(0)
            assert await buf.read(4) == b"line"
        return p.read_bytes()

    assert run(main()) == b"line one\nline two\nline three\n"


def _reused_opener(open_, path):
    """What an opener awaited, then entered, then entered again gives:
    each step's outcome and the file's bytes after it."""
    said = []

    async def main():
        cm = open_(path, "w")
        f = await cm
        again = await cm  # (the same file: one open, one truncation)
        said.append(("awaited twice, same file", again is f))
        await f.write("data")
        await f.close()
        async with cm as g:  # (the file awaited, closed: not opened again)
            said.append(("entered after await", g is f, g.closed))
        said.append(("bytes", path.read_bytes()))
        try:
            async with cm:
                said.append(("entered again", "opened"))
        except RuntimeError as e:
            said.append(("entered again", str(e)))
        said.append(("bytes", path.read_bytes()))

    run(main())
    return said


def test_an_opener_awaited_again_or_entered_after_await_is_the_same_file_as_on_aiofiles(tmp_path):
    """aiofiles' context manager keeps the file it opened: awaited again,
    or entered with ``async with`` after an ``await``, it gives that file,
    never a second open, which for a ``"w"`` file truncated again what was
    written through the first (data lost); once that ``async with`` has
    closed it, a third use raises ``RuntimeError``, as awaiting a used
    coroutine does, rather than open (and truncate) the file again."""
    want = _reused_opener(aiofiles.open, tmp_path / "aiofiles")
    got = _reused_opener(blockio.open, tmp_path / "blockio")
    assert want == [("awaited twice, same file", True), ("entered after await", True, True), ("bytes", b"data"),
                    ("entered again", "cannot reuse already awaited coroutine"), ("bytes", b"data")]
    assert got == want
