"""Text that cannot be decoded (``errors='strict'``), against the built-in
``open`` on the same bytes: the call that meets the bad bytes (``read()``,
``read(n)``, ``readline()``, ``readlines()`` with and without a hint,
iteration) raises the built-in's error, and the reads after it return what
the built-in's return, from where the built-in's position is:
``readlines()`` and iteration consume the chunk at fault as the built-in's
``readline`` loop does, ``read(n)`` the chunk at fault of those the
built-in's reads (as many bytes as it lacks characters), ``read()`` the
rest. UTF-8, UTF-16 and Latin-1 (which cannot fail, and reads on as the
built-in's)."""

import asyncio

import pytest

import blockio

#: Bytes that do not decode, by encoding (Latin-1 decodes any byte).
BAD = {"utf-8": b"\xff\xfe", "utf-16": "\ud800".encode("utf-16-le", "surrogatepass") + "a".encode("utf-16-le"),
       "latin-1": b"\xff\xfe"}

#: Where the bad bytes go, in characters of 20-character lines: in the
#: first line, near the end of the built-in's first 8 KiB chunk, well past
#: it, and in the last line.
WHERE = [5, 8000, 30000, -3]


def content(encoding, where):
    """Lines of text with the bad bytes at character ``where`` (at a code
    unit's boundary), encoded; for UTF-16, with its BOM."""
    text = "".join(f"line {i:05d} of text\n" for i in range(2000))
    at = where % len(text)
    head, tail = text[:at], text[at:]
    if encoding == "utf-16":
        return b"\xff\xfe" + head.encode("utf-16-le") + BAD[encoding] + tail.encode("utf-16-le")
    return head.encode(encoding) + BAD[encoding] + tail.encode(encoding)


def outcome(call):
    """What ``call()`` returned, or its error's type and message."""
    try:
        return "ok", call()
    except Exception as e:
        return type(e).__name__, str(e)


async def aoutcome(call):
    try:
        return "ok", await call()
    except Exception as e:
        return type(e).__name__, str(e)


async def collect(f):
    return [line async for line in f]


FIRST = {
    "read()": (lambda f: f.read(), lambda f: f.read()),
    "readline() x 600": (lambda f: [f.readline() for _ in range(600)], None),
    "readlines()": (lambda f: f.readlines(), lambda f: f.readlines()),
    "readlines(5000)": (lambda f: f.readlines(5000), lambda f: f.readlines(5000)),
    "iteration": (lambda f: list(f), collect),
    "read(5000) x 3": (lambda f: [f.read(5000) for _ in range(3)], None),
    "read(20000)": (lambda f: f.read(20000), lambda f: f.read(20000)),
    "read(100000)": (lambda f: f.read(100000), lambda f: f.read(100000)),
}

THEN = {
    "read()": (lambda f: f.read(), lambda f: f.read()),
    "readline() x 3": (lambda f: [f.readline() for _ in range(3)], None),
    "readlines()": (lambda f: f.readlines(), lambda f: f.readlines()),
}


async def _readlines_async(f, n):
    return [await f.readline() for _ in range(n)]


async def _read_5000_x_3(f):
    return [await f.read(5000) for _ in range(3)]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "latin-1"])
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("first", list(FIRST))
@pytest.mark.parametrize("then", list(THEN))
def test_reads_after_a_decoding_error_are_the_builtins(tmp_path, encoding, where, first, then):
    p = tmp_path / "f"
    p.write_bytes(content(encoding, where))
    sync_first, async_first = FIRST[first]
    sync_then, async_then = THEN[then]
    if first == "read(5000) x 3":
        async_first = _read_5000_x_3
    elif async_first is None:
        async_first = lambda f: _readlines_async(f, 600)  # noqa: E731
    if async_then is None:
        async_then = lambda f: _readlines_async(f, 3)  # noqa: E731

    with open(p, encoding=encoding, errors="strict") as f:
        want = [outcome(lambda: sync_first(f)), outcome(lambda: sync_then(f)), outcome(lambda: sync_then(f))]

    async def main():
        async with blockio.open(p, encoding=encoding, errors="strict") as f:
            return [await aoutcome(lambda: async_first(f)), await aoutcome(lambda: async_then(f)),
                    await aoutcome(lambda: async_then(f))]

    got = asyncio.run(main())
    assert got == want
    if encoding == "latin-1":
        assert all(kind == "ok" for kind, _ in want)
    elif first in ("read()", "readlines()", "iteration", "read(100000)"):
        assert want[0][0] != "ok"  # (each reads past the bad bytes)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
@pytest.mark.parametrize("where", WHERE)
def test_the_position_after_a_failed_read_is_the_builtins(tmp_path, encoding, where):
    """``tell()`` after ``read()`` failed on bad bytes is the built-in's
    (the end: the rest was consumed), and a read there returns ``""``."""
    p = tmp_path / "f"
    p.write_bytes(content(encoding, where))
    with open(p, encoding=encoding, errors="strict") as f:
        want = [outcome(f.read), outcome(f.tell), outcome(f.read)]

    async def main():
        async with blockio.open(p, encoding=encoding, errors="strict") as f:
            return [await aoutcome(f.read), await aoutcome(f.tell), await aoutcome(f.read)]

    got = asyncio.run(main())
    assert want[0][0] != "ok" and want[2] == ("ok", "")
    assert got == want



def _cut_by_a_chunk(cut, back):
    """2 MiB of lines ending in ``\r\n``, filler, then ``cut`` (a
    character of several bytes, whole or cut short, or a line ending)
    starting ``back`` bytes before an 8 KiB boundary, then the bad bytes
    and a few lines."""
    line = "ligne é ü € 0123456789\r\n".encode()
    body = line * ((2 << 20) // len(line))
    body += b"x" * (-(len(body) + back) % 8192)
    return body + cut + BAD["utf-8"] + line * 3


@pytest.mark.parametrize("newline", [None, "", "\r\n"])
@pytest.mark.parametrize("cut, back", [("€".encode(), 1), ("€".encode(), 2), ("€".encode()[:2], 1), (b"\r\n", 1),
                                       (b"", 0)])
@pytest.mark.parametrize("skipped", [0, 1])
def test_readlines_of_a_large_file_fails_where_the_builtins_does(tmp_path, newline, cut, back, skipped):
    """``readlines()`` of 2 MiB whose bad bytes follow a character (or
    its first bytes) or a ``\r\n`` cut by one of the built-in's 8 KiB
    chunks (from the file's start, or from a line in, with characters
    pending) raises the
    built-in's error, and the reads after it return what the built-in's
    do: the lines before the chunk at fault are not read one by one, and
    the position and the decoder's state are still the loop's."""
    p = tmp_path / "f"
    p.write_bytes(_cut_by_a_chunk(cut, back))

    with open(p, encoding="utf-8", newline=newline) as f:
        first = [f.readline() for _ in range(skipped)]
        want = [first, outcome(f.readlines), outcome(f.readline), outcome(f.read), f.newlines]

    async def main():
        async with blockio.open(p, encoding="utf-8", newline=newline) as f:
            first = [await f.readline() for _ in range(skipped)]
            return [first, await aoutcome(f.readlines), await aoutcome(f.readline), await aoutcome(f.read),
                    f.newlines]

    got = asyncio.run(main())
    assert want[1][0] == "UnicodeDecodeError"
    assert got == want
