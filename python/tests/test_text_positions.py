"""Text files against the built-in ``open`` on the same input: BOMs when
appending, ``seek(tell())`` after a line ended by a lone ``\\r`` and after
random reads, and a write at the start of a UTF-16 file followed by a
read."""

import asyncio
import codecs
import io
import os
import random
import sys
import tracemalloc

import pytest

import blockio

BOMS = pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])


@BOMS
@pytest.mark.parametrize("mode", ["a", "a+"])
@pytest.mark.parametrize("text", ["日本\n", ""])
def test_appending_to_a_bom_file_adds_no_bom(tmp_path, encoding, mode, text):
    """F-2: appending to a non-empty UTF-16/32/utf-8-sig file writes no
    second BOM in the middle of it (the built-in writes none)."""
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    for p in (ref, ours):
        p.write_bytes("line1\n".encode(encoding))
    with open(ref, mode, encoding=encoding) as f:
        f.write(text)

    async def main():
        async with blockio.open(ours, mode, encoding=encoding) as f:
            await f.write(text)

    asyncio.run(main())
    assert ours.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16", "utf-32", "gb18030"])
@pytest.mark.parametrize("newline", [None, ""])
def test_seek_to_tell_after_a_line_ended_by_a_lone_cr(tmp_path, encoding, newline):
    """F-11: seek(tell()) taken after a line ending in a lone \\r reads the
    next line whole, as the built-in does (no character skipped)."""
    p = tmp_path / "f"
    p.write_bytes("foo\rbar\nbaz\rqux\r\nend\n\r\rx\r\r\r\n\r".encode(encoding))
    with open(p, "r", encoding=encoding, newline=newline) as f:
        want = []
        while True:
            line = f.readline()
            if not line:
                break
            f.seek(f.tell())
            want.append(line)

    async def main():
        got = []
        async with blockio.open(p, "r", encoding=encoding, newline=newline) as f:
            while True:
                line = await f.readline()
                if not line:
                    break
                await f.seek(await f.tell())
                got.append(line)
        return got

    assert asyncio.run(main()) == want


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "utf-16"])
@pytest.mark.parametrize("newline", [None, "", "\n", "\r", "\r\n"])
def test_seek_to_tell_anywhere_continues_as_the_builtin(tmp_path, encoding, newline):
    """Random reads and readlines of texts rich in \r and \n, each followed
    by seek(tell()): every call returns what the built-in's returns (whose
    own tell() is never used), and so does the rest of the file read after
    them. Fixed seeds."""
    alphabet = ["a", "\n", "\r", "\r\n", "é" if encoding != "latin-1" else "e", "b" * 8190]

    async def one(rng, p):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        with open(p, "w", encoding=encoding, newline="") as g:
            g.write(text)
        ref = open(p, "r", encoding=encoding, newline=newline)
        f = await blockio.open(p, "r", encoding=encoding, newline=newline, buffering=rng.choice([-1, 16]))
        try:
            for step in range(rng.randint(1, 6)):
                if rng.random() < 0.5:
                    n = rng.choice([1, 2, 3, 5, 100, 8191])
                    a, b = ref.read(n), await f.read(n)
                else:
                    n = rng.choice([-1, -1, 1, 2])
                    a, b = ref.readline(n), await f.readline(n)
                assert a == b, (text[:40], step)
                await f.seek(await f.tell())
            assert ref.read() == await f.read(), text[:40]
        finally:
            ref.close()
            await f.close()

    async def main():
        rng = random.Random(20261124)
        for k in range(60):
            await one(rng, tmp_path / f"t{k}")

    asyncio.run(main())


def test_utf16_write_at_the_start_then_readline(tmp_path):
    """F-3: readline, seek(0), write(""), readline in r+ UTF-16 returns
    the first line, as the built-in does (no 'stream does not start with
    BOM' error). (The built-in of Python 3.13 raises that error itself
    here; on it, the first line is what blockio's must return.)"""
    p = tmp_path / "f"
    p.write_bytes("line1\nline2\n".encode("utf-16"))
    with open(p, "r+", encoding="utf-16") as f:
        f.readline()
        f.seek(0)
        f.write("")
        try:
            want = f.readline()
        except UnicodeDecodeError:
            assert sys.version_info >= (3, 13)
            want = "line1\n"

    async def main():
        async with blockio.open(p, "r+", encoding="utf-16") as f:
            await f.readline()
            await f.seek(0)
            await f.write("")
            return await f.readline()

    assert asyncio.run(main()) == want == "line1\n"


@pytest.mark.parametrize("newline", [None, ""])
def test_a_write_after_seek_tell_lands_where_the_reader_is_after_a_cr(tmp_path, newline):
    """A read that returned a \\r (as "\\n" or "\\r") had to decode the next
    character to see whether "\\n" followed. seek(tell()) then puts a write
    right after what the read returned, on purpose: the built-in's write
    lands after the character decoded ahead (its tell() is one character
    too far for writing). README: "A write after a read"."""
    p = tmp_path / "f"
    p.write_bytes(b"x\rlmn\n")

    async def main():
        async with blockio.open(p, "r+", newline=newline) as f:
            got = await f.read(2)
            await f.seek(await f.tell())
            await f.write("U")
        return got

    assert asyncio.run(main()) == ("x\n" if newline is None else "x\r")
    assert p.read_bytes() == b"x\rUmn\n"
    with open(p, "r+", newline=newline) as f:
        f.read(2)
        f.seek(f.tell())
        f.write("U")
    assert p.read_bytes() == b"x\rUUn\n", "the built-in's write lands one byte on"


@pytest.mark.parametrize("line", [65_000, 3 << 20])
def test_reading_long_lines_holds_memory_in_proportion_to_a_line_not_the_file(tmp_path, line):
    """Lines longer than a read: the bytes kept for ``tell`` are dropped
    once their characters are returned, and a line is read in chunks that
    double, so reading a file line by line holds about a line, never the
    file (which made the time grow with the square of the line's length),
    and every line comes back whole, as the built-in's."""
    p = tmp_path / "long.txt"
    lines = 200 if line < (1 << 20) else 4
    p.write_text(("é" * (line // 2) + "\r\n") * lines, encoding="utf-8")
    with open(p, encoding="utf-8") as ref:
        want = ref.readlines()

    async def main():
        got = []
        tracemalloc.start()
        try:
            async with blockio.open(p, encoding="utf-8") as f:
                async for text in f:
                    got.append(len(text))
                    if len(got) == lines // 2:
                        mid = await f.tell()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return got, mid, peak

    got, mid, peak = asyncio.run(main())
    assert got == [len(t) for t in want]
    assert mid == (line + 2) * (lines // 2)
    # The lines returned are not kept here, so what the file object holds
    # is what the peak measures: a few lines' worth at most.
    assert peak < 8 * (line + 2) + (1 << 20), peak


def test_tell_after_a_chunk_that_cannot_be_decoded_is_where_the_next_read_starts(tmp_path):
    """The read that meets undecodable bytes raises, as the built-in's;
    ``tell()`` then gives the built-in's offset, past the bytes that read
    took, and the next read starts there."""
    p = tmp_path / "bad.txt"
    p.write_bytes(b"ab\xa9cd\n")
    with open(p, encoding="utf-8") as ref:
        ref.seek(2)
        with pytest.raises(UnicodeDecodeError):
            ref.readline()
        want = (ref.tell(), ref.read())

    async def main():
        async with blockio.open(p, encoding="utf-8") as f:
            await f.seek(2)
            with pytest.raises(UnicodeDecodeError):
                await f.readline()
            return await f.tell(), await f.read()

    assert asyncio.run(main()) == want == (6, "")


@pytest.mark.parametrize("errors", ["replace", "surrogateescape", "backslashreplace"])
def test_tell_after_a_replaced_cut_sequence_is_where_the_next_character_starts(tmp_path, errors):
    """A sequence cut short (``\\xe2\\x82`` before ``a``) is replaced only
    once the next character is decoded, both coming out together:
    ``seek(tell())`` after the replacement reads on from there, as the
    built-in's does; nothing is skipped."""
    p = tmp_path / "cut.txt"
    p.write_bytes(b"\xe2\x82abc\n")
    with open(p, encoding="utf-8", errors=errors) as ref:
        first = ref.read(1)
        ref.seek(ref.tell())
        want = (first, ref.read())

    async def main():
        async with blockio.open(p, encoding="utf-8", errors=errors) as f:
            first = await f.read(1)
            await f.seek(await f.tell())
            return first, await f.read()

    got = asyncio.run(main())
    if errors == "backslashreplace":
        # Returned in part, `\\xe2` has no byte offset inside it: it is
        # read again whole, never skipped.
        assert got[0] == want[0] and got[1].endswith(want[1]) and got[1] == "\\xe2\\x82abc\n"
    else:
        assert got == want


def test_tell_after_a_cancelled_read_counts_the_bytes_the_decoder_holds(tmp_path):
    """A read cancelled while it waits for more bytes leaves ``tell()`` at
    the next character, also when the decoder holds half of it (a
    character cut by a chunk's end): ``seek(tell())`` then reads on as the
    built-in does, whichever point the cancellation met."""
    p = tmp_path / "cut.txt"
    p.write_bytes(b"a" * 8190 + b"\n" + "中文\n".encode() * 100)
    with open(p, encoding="utf-8") as ref:
        want = ref.readlines()

    async def main():
        for attempt in range(30):
            async with blockio.open(p, encoding="utf-8") as f:
                got = [await f.readline()]
                task = asyncio.ensure_future(f.readline())
                for _ in range(attempt % 3):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    got.append(await task)
                except asyncio.CancelledError:
                    pass
                await f.seek(await f.tell())
                got += await f.readlines()
                assert got == want, attempt

    asyncio.run(main())


@pytest.mark.parametrize("data", [
    b"a" * 70000 + b"\n" + b"b" * 20000 + b"\xff\n" + b"tail line\n",
    b"x" * 8191 + b"\xe2\x82ab\n",
    b"ab\xa9cd\n",
    b"a" * 9000 + b"\n" + b"bbbb\n" + b"cc\xa9dd\n" + b"line4\n" + b"e" * 9000 + b"\n",
], ids=["a-line-then-bad-bytes", "cut-then-bad", "bad-at-once", "bad-in-the-second-chunk"])
def test_lines_around_undecodable_bytes_come_back_as_the_builtins(tmp_path, data):
    """Lines read whole before the bytes that cannot be decoded are
    returned before the error, however far a long line made the file read
    ahead; after it, the same lines (or errors) as the built-in's."""
    p = tmp_path / "bad.txt"
    p.write_bytes(data)

    def outcome(line):
        return "error" if isinstance(line, UnicodeDecodeError) else line

    with open(p, encoding="utf-8") as ref:
        want = []
        for _ in range(6):
            try:
                want.append(ref.readline())
            except UnicodeDecodeError as e:
                want.append(outcome(e))

    async def main():
        got = []
        async with blockio.open(p, encoding="utf-8") as f:
            for _ in range(6):
                try:
                    got.append(await f.readline())
                except UnicodeDecodeError as e:
                    got.append(outcome(e))
        return got

    assert asyncio.run(main()) == want


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le"])
def test_a_tailer_meets_a_character_cut_by_the_writer_and_reads_it_once_completed(tmp_path, encoding):
    """The file ends in the middle of a character: each read raises, as the
    built-in's does, and once the writer completes the character the line
    comes back whole, and the next."""
    p = tmp_path / "tail.txt"
    whole = "中\nnext\n".encode(encoding)
    cut = 1 if encoding == "utf-8" else 1
    head = "abc\n".encode(encoding) + whole[:cut]

    def run_ref():
        p.write_bytes(head)
        out = []
        with open(p, encoding=encoding) as f:
            for i in range(6):
                if i == 3:
                    with open(p, "ab") as w:
                        w.write(whole[cut:])
                try:
                    out.append(f.readline())
                except UnicodeDecodeError:
                    out.append("error")
        return out

    async def run_ours():
        p.write_bytes(head)
        out = []
        async with blockio.open(p, encoding=encoding) as f:
            for i in range(6):
                if i == 3:
                    with open(p, "ab") as w:
                        w.write(whole[cut:])
                try:
                    out.append(await f.readline())
                except UnicodeDecodeError:
                    out.append("error")
        return out

    want = run_ref()
    assert asyncio.run(run_ours()) == want == ["abc\n", "error", "error", "中\n", "next\n", ""]


@pytest.mark.parametrize("encoding,errors,data,k", [
    ("gb18030", "replace", b"a\x810\x81\rz\n", 2),
    ("gb18030", "replace", b"a\x810\x810\x810zz\n", 3),
    ("big5", "replace", b"a\x81\x81z", 2),
    ("euc_jp", "surrogateescape", b"a\x81\x81z", 2),
])
def test_tell_after_a_looking_ahead_codecs_replacement_reads_on_as_the_builtin(tmp_path, encoding, errors, data, k):
    """Codecs that look ahead (GB18030, Big5, EUC-JP) give a replacement
    for a bad byte only once later bytes arrive, or one replacement for
    several bytes: ``seek(tell())`` after it reads on from the byte after
    the one replaced, as the built-in's does."""
    p = tmp_path / "cjk.txt"
    p.write_bytes(data)
    with open(p, encoding=encoding, errors=errors) as ref:
        first = ref.read(k)
        ref.seek(ref.tell())
        want = (first, ref.read())

    async def main():
        async with blockio.open(p, encoding=encoding, errors=errors) as f:
            first = await f.read(k)
            await f.seek(await f.tell())
            return first, await f.read()

    assert asyncio.run(main()) == want


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_seek_past_the_start_of_an_empty_file_does_not_fix_its_byte_order(tmp_path, encoding):
    """In ``"w+"`` the file is empty at first: a seek past its start then
    learns no byte order, and once text (with its BOM) is written, reading
    from past the BOM decodes it, as the built-in's does."""
    p = tmp_path / "bom.txt"
    p.write_bytes(b"")
    bom = len("".encode(encoding))

    async def main():
        async with blockio.open(p, "w+", encoding=encoding) as f:
            await f.seek(4)
            await f.seek(0)
            await f.write("abc\n")
            await f.seek(bom)
            return await f.read()

    assert asyncio.run(main()) == "abc\n"


@pytest.mark.parametrize("first", ["ascii first", "shifted first"])
@pytest.mark.parametrize("encoding", ["utf-7", "iso2022_jp", "iso2022_kr", "hz"])
def test_a_stateful_codecs_tell_works_at_line_starts_and_refuses_elsewhere(tmp_path, encoding, first):
    """Codecs with shift states (UTF-7, ISO-2022, HZ) have none at a line
    start, where ``tell()`` and ``seek`` work as the built-in's; inside a
    line no byte offset can hold the decoder's state, and ``tell()`` raises
    ``OSError`` saying so rather than give a position whose ``seek`` would
    read other text."""
    wide = {"utf-7": "\u4e2d\u00e9\u20ac", "iso2022_kr": "\ud55c\uae00"}.get(encoding, "\u4e2d\u6587")
    text = (wide + "\n\n" if first == "shifted first" else "") + f"ab {wide} cd\n{wide} xyz\nplain line\n" * 50
    p = tmp_path / "f"
    p.write_bytes(text.encode(encoding))
    lines = text.splitlines(keepends=True)

    async def main():
        async with blockio.open(p, "r", encoding=encoding) as f:
            marks = []
            for line in lines[:20]:
                marks.append((await f.tell(), line))
                assert await f.readline() == line
            for t, line in reversed(marks):
                await f.seek(t)
                assert await f.readline() == line
            await f.seek(marks[3][0])
            assert await f.read(4) == lines[3][:4]
            with pytest.raises(OSError, match="can't reconstruct logical file position"):
                await f.tell()
            assert await f.read(3) == lines[3][4:7]  # (nothing moved)

    asyncio.run(main())


def test_newlines_are_kept_across_seeks_and_forgotten_at_the_start_or_end(tmp_path):
    """``newlines`` holds the line endings read so far: a seek inside the
    file keeps them, a seek to the start or the end forgets them, as the
    built-in's seek resets its decoder there."""
    p = tmp_path / "f"
    p.write_bytes(b"a\r\nb\rc\nd\n" * 3000)

    async def main():
        async with blockio.open(p, "r", newline=None) as f:
            got = []
            await f.readline()
            got.append(f.newlines)
            await f.seek(await f.tell())
            got.append(f.newlines)
            await f.read(3)
            got.append(f.newlines)
            await f.seek(0)
            got.append(f.newlines)
            await f.read()
            got.append(f.newlines)
            await f.seek(0, os.SEEK_END)
            got.append(f.newlines)
            return got

    async def after_a_write():
        async with blockio.open(p, "r+", newline=None) as f:
            await f.readline()
            seen = f.newlines
            await f.seek(await f.tell())
            await f.write("X")  # (as the built-in's write, which resets its decoder: forgotten)
            return seen, f.newlines

    every = ("\r", "\n", "\r\n")
    assert asyncio.run(main()) == [every, every, every, None, every, None]
    assert asyncio.run(after_a_write()) == (every, None)
    with open(p, "r", newline=None) as f:
        f.readline()
        assert f.newlines == every
        f.seek(0)
        assert f.newlines is None


@BOMS
@pytest.mark.parametrize("call", ["read(1)", "read(70000)", "readline()", "readlines()", "read()"])
def test_tell_in_a_file_holding_only_its_bom_is_past_the_bom(tmp_path, encoding, call):
    """A file holding only its BOM: after a read that returns nothing,
    ``tell`` is past the BOM, as the built-in's, so that ``truncate(tell())``
    and a write there keep the BOM (before, a sized read left ``tell`` at 0
    and the write left NULs where the BOM had been)."""
    p = tmp_path / "f"
    bom = {"utf-16": codecs.BOM_UTF16_LE, "utf-32": codecs.BOM_UTF32_LE, "utf-8-sig": codecs.BOM_UTF8}[encoding]
    p.write_bytes(bom)
    with open(p, "r+", encoding=encoding) as f:
        want_read = eval("f." + call)
        want_tell = f.tell()
        f.truncate(f.tell())
        f.write("hello\n")
    want = p.read_bytes()
    p.write_bytes(bom)

    async def main():
        async with blockio.open(p, "r+", encoding=encoding) as f:
            got_read = await eval("f." + call)
            got_tell = await f.tell()
            await f.truncate(await f.tell())
            await f.write("hello\n")
        return got_read, got_tell

    assert asyncio.run(main()) == (want_read, want_tell) == (want_read, len(bom))
    got = p.read_bytes()
    assert got.startswith(bom) and got.decode(encoding) == "hello\n"
    # (the built-in writes a second BOM there, which decodes to a U+FEFF)
    assert want.decode(encoding).lstrip("\ufeff") == "hello\n"


@BOMS
@pytest.mark.parametrize("mode", ["w", "w+"])
def test_writelines_of_nothing_writes_no_bom(tmp_path, encoding, mode):
    """``writelines([])`` on a new UTF-16/32 or utf-8-sig file writes
    nothing (the built-in's calls no ``write``), where ``write("")``
    writes the BOM in both."""
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    with open(ref, mode, encoding=encoding) as f:
        f.writelines([])
        want_tell = f.tell()

    async def main():
        async with blockio.open(ours, mode, encoding=encoding) as f:
            await f.writelines([])
            return await f.tell()

    assert (asyncio.run(main()), ours.read_bytes()) == (want_tell, ref.read_bytes()) == (0, b"")


@pytest.mark.parametrize("args", [(0, 2**63), (0, -(2**63) - 1), (0, 2**31), (2**63,), (10**30,)])
def test_a_text_seeks_out_of_range_arguments_raise_the_builtins_types(tmp_path, args):
    """A whence past a C int raises ``OverflowError`` and an offset past
    2**63 - 1 ``OSError(EINVAL)``, as the built-in text file's seek."""
    p = tmp_path / "f"
    p.write_text("hello\n")
    with open(p, "r") as f:
        with pytest.raises(Exception) as want:
            f.seek(*args)

    async def main():
        async with blockio.open(p, "r") as f:
            with pytest.raises(Exception) as got:
                await f.seek(*args)
            return got.value, await f.read()

    got, rest = asyncio.run(main())
    assert type(got) is type(want.value) and rest == "hello\n"
    assert getattr(got, "errno", None) == getattr(want.value, "errno", None)


@pytest.mark.parametrize("encoding, bad", [("ascii", "\u00e9"), ("utf-8-sig", "\ud800"), ("utf-16", "\ud800"),
                                           ("latin-1", "\u20ac")])
@pytest.mark.parametrize("newline", ["\r\n", "\r", None, ""])
def test_writelines_that_cannot_encode_a_line_writes_the_lines_before_it_as_the_builtin(
        tmp_path, engine, encoding, bad, newline):
    """The lines before the one that cannot be encoded land as the built-in
    file's ``writelines`` (a ``write`` per line) leaves them, newlines
    translated and the BOM first; then its error, the same, is raised."""
    lines = ["ab\n", "c\nd", bad, "e\n"]
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    with pytest.raises(UnicodeEncodeError) as want:
        with open(ref, "w", encoding=encoding, newline=newline) as f:
            f.writelines(lines)

    async def main():
        async with blockio.open(ours, "w", encoding=encoding, newline=newline, engine=engine) as f:
            await f.writelines(lines)

    with pytest.raises(UnicodeEncodeError) as got:
        asyncio.run(main())
    assert str(got.value) == str(want.value)
    assert ours.read_bytes() == ref.read_bytes() != b""


@pytest.mark.parametrize("errors", ["xmlcharrefreplace", "backslashreplace", "namereplace", "strict", "replace"])
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "ascii"])
def test_seek_to_the_end_of_undecodable_text_as_the_builtin(tmp_path, engine, errors, encoding):
    """``seek(0, SEEK_END)`` of a file whose bytes the codec refuses moves
    to the end whatever ``errors`` says (an error handler made for
    encoding, which the decoder's call refuses with ``TypeError``,
    included), and a ``read`` then raises what the built-in's raises."""
    p = tmp_path / "f"
    p.write_bytes("\ufeffab".encode("utf-16")[:4] + b"\xff\xfe\x00\xd8cd\x80\x81")
    with open(p, "r", encoding=encoding, errors=errors) as f:
        want_end = f.seek(0, os.SEEK_END)
        want_tail = f.read()
        f.seek(0)
        try:
            want_all: object = f.read()
        except (UnicodeError, TypeError) as e:
            want_all = type(e)

    async def main():
        async with blockio.open(p, "r", encoding=encoding, errors=errors, engine=engine) as f:
            end = await f.seek(0, os.SEEK_END)
            tail = await f.read()
            await f.seek(0)
            try:
                got_all: object = await f.read()
            except (UnicodeError, TypeError) as e:
                got_all = type(e)
            return end, tail, got_all

    assert asyncio.run(main()) == (want_end, want_tail, want_all)
