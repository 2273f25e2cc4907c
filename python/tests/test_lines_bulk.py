"""``readlines()`` and ``writelines()`` as bulk operations: ``readlines``
(no ``hint``, a file that is not a stream) is one ``read()`` split into
lines in C, and ``writelines`` one join (and, for text, one encoding),
with the built-in file's results, line ends and errors. (A ``readline`` or
an encoding per line cost microseconds per line on the loop's thread.)"""

import asyncio

import pytest
import uvloop

import blockio
from blockio._file import AsyncFile
from blockio._text import AsyncTextFile

RUNNERS = [pytest.param(asyncio.run, id="asyncio"), pytest.param(uvloop.run, id="uvloop")]

#: Text with every line end each newline mode knows, and some that only
#: str.splitlines would take for one.
TEXT = "one\ntwo\r\nthree\rfour\x0cfive\u2028six\x1cseven\n\nlast, no end"
LINES = 20000


def _count_calls(monkeypatch, cls, name):
    calls = []
    inner = getattr(cls, name)

    def counting(self, *args, **kwargs):
        calls.append(1)
        return inner(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counting)
    return calls


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize("newline", [None, "", "\n", "\r", "\r\n"])
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "latin-1"])
def test_text_readlines_gives_the_built_in_files_lines(tmp_path, engine, run, newline, encoding):
    p = tmp_path / "t.txt"
    p.write_bytes(TEXT.replace("\u2028", "").encode(encoding) if encoding == "latin-1" else TEXT.encode(encoding))
    with open(p, encoding=encoding, newline=newline) as f:
        f.readline()
        want = f.readlines()
        want_newlines = f.newlines

    async def main():
        async with blockio.open(p, encoding=encoding, newline=newline, engine=engine) as f:
            await f.readline()
            got = await f.readlines()
            return got, f.newlines, await f.read(), await f.tell()

    got, newlines, rest, at = run(main())
    assert got == want and newlines == want_newlines
    assert rest == "" and at == p.stat().st_size


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize("buffering", [-1, 0])
def test_binary_readlines_gives_the_built_in_files_lines(tmp_path, engine, run, buffering):
    data = TEXT.encode() + b"\r\n\x00\n"
    p = tmp_path / "b"
    p.write_bytes(data)
    with open(p, "rb", buffering=buffering) as f:
        f.read(2)
        want = f.readlines()

    async def main():
        async with blockio.open(p, "rb", buffering=buffering, engine=engine) as f:
            await f.read(2)
            return await f.readlines(), await f.read()

    assert run(main()) == (want, b"")


@pytest.mark.parametrize("mode", ["r", "rb"])
def test_readlines_is_one_read_not_a_readline_per_line(tmp_path, engine, monkeypatch, mode):
    p = tmp_path / "many"
    p.write_text("".join(f"{i:06d} some line of text\n" for i in range(LINES)))
    calls = _count_calls(monkeypatch, AsyncFile, "readline")
    text_calls = _count_calls(monkeypatch, AsyncTextFile, "readline")

    async def main():
        async with blockio.open(p, mode, engine=engine) as f:
            return await f.readlines()

    lines = asyncio.run(main())
    assert len(lines) == LINES and lines[-1].strip() in ("019999 some line of text", b"019999 some line of text")
    assert len(calls) + len(text_calls) == 0


def test_readlines_with_a_hint_stops_where_the_built_ins_does(tmp_path, engine):
    p = tmp_path / "h"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    with open(p) as f:
        want = f.readlines(50), f.readline()

    async def main():
        async with blockio.open(p, engine=engine) as f:
            return await f.readlines(50), await f.readline()

    assert asyncio.run(main()) == want


@pytest.mark.parametrize("run", RUNNERS)
def test_a_cancelled_readlines_leaves_the_position_where_it_was(tmp_path, engine, run):
    """Cancelled while its read is in the engine, ``readlines`` leaves
    the file where it was: the next call reads every line."""
    p = tmp_path / "c"
    p.write_bytes(b"x" * 100 + b"\n" + b"y" * (8 << 20))

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            await f.readline()
            for _ in range(20):
                task = asyncio.ensure_future(f.readlines())
                await asyncio.sleep(0)
                task.cancel()
                try:
                    got = await task
                except asyncio.CancelledError:
                    assert await f.tell() == 101
                else:
                    assert got == [b"y" * (8 << 20)]
                    await f.seek(101)
            return await f.readlines()

    assert run(main()) == [b"y" * (8 << 20)]


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize("encoding, newline", [("utf-8", None), ("utf-16", "\r\n"), ("utf-8-sig", "\r")])
def test_text_writelines_writes_the_built_in_files_bytes_in_one_encoding(tmp_path, engine, monkeypatch, run,
                                                                          encoding, newline):
    lines = [f"{i} é\n" for i in range(LINES)]
    with open(tmp_path / "want", "w", encoding=encoding, newline=newline) as f:
        f.writelines(lines)
    calls = _count_calls(monkeypatch, AsyncTextFile, "_encode")

    async def main():
        async with blockio.open(tmp_path / "got", "w", encoding=encoding, newline=newline, engine=engine) as f:
            await f.writelines(lines)

    run(main())
    assert (tmp_path / "got").read_bytes() == (tmp_path / "want").read_bytes()
    assert len(calls) == 1


@pytest.mark.parametrize("encoding", ["ascii", "utf-8-sig", "utf-16"])
@pytest.mark.parametrize("bad", ["\ud800", "é", 7])
def test_text_writelines_with_a_bad_string_writes_what_the_built_in_does(tmp_path, engine, encoding, bad):
    """A string that cannot be encoded (or is not a str) in the list: the
    strings before it land, with the BOM and the line ends translated, and
    the built-in's error is raised, as with its ``writelines``."""
    if encoding != "ascii" and bad == "é":
        bad = "\udfff"
    lines = ["ab\n", bad, "c"]
    with open(tmp_path / "want", "w", encoding=encoding, newline="\r\n") as f:
        with pytest.raises((UnicodeEncodeError, TypeError)) as want:
            f.writelines(lines)

    async def main():
        async with blockio.open(tmp_path / "got", "w", encoding=encoding, newline="\r\n", engine=engine) as f:
            with pytest.raises(want.type):
                await f.writelines(lines)
            await f.write("d")

    asyncio.run(main())
    with open(tmp_path / "want", "a", encoding=encoding, newline="\r\n") as f:
        f.write("d")
    assert (tmp_path / "got").read_bytes() == (tmp_path / "want").read_bytes()


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize("buffering", [-1, 0])
def test_binary_writelines_joins_in_one_write(tmp_path, engine, monkeypatch, run, buffering):
    lines = [b"%d\n" % i for i in range(LINES)] + [bytearray(b"ba"), memoryview(b"mv")]
    calls = _count_calls(monkeypatch, AsyncFile, "write")

    async def main():
        async with blockio.open(tmp_path / "got", "wb", buffering=buffering, engine=engine) as f:
            await f.writelines(lines)
            with pytest.raises(TypeError, match="bytes-like"):
                await f.writelines([b"x", "not bytes", b"y"])

    run(main())
    assert (tmp_path / "got").read_bytes() == b"".join(lines) + b"x"
    assert len(calls) == 2
