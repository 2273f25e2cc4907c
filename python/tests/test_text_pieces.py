"""Large text reads and ``readlines()`` in pieces: a text ``read(n)``
decodes a piece (``_text._PIECE`` bytes) at a time and joins the pieces
once; a text ``read()`` and ``readlines()`` decode (and split) the rest of
the file a piece at a time, and a binary ``readlines()`` splits it a piece
(``_lines.SPLIT_PIECE``) at a time, a turn of the event loop between two.
The characters, lines, positions and errors are the built-in file's for
the same calls, whatever the pieces' size; a call cancelled between two
pieces returns nothing and moves nothing. Both backends, asyncio and
uvloop."""

import asyncio
import codecs

import pytest
import uvloop

import blockio
from blockio import _file, _text

RUNNERS = [pytest.param(asyncio.run, id="asyncio"), pytest.param(uvloop.run, id="uvloop")]

#: Lines with every line end a newline mode knows, characters of 1 to 4
#: bytes in UTF-8 (1 or 2 units in UTF-16), and one that ``str.splitlines``
#: alone takes for a line end.
LINE = "ab\u00e9\u20ac\U0001f600 x\r\ny\rz\x0cw\n\n"


def text_for(encoding):
    line = LINE if encoding != "latin-1" else LINE.replace("\u20ac\U0001f600", "\u00fc")
    return "".join(f"{i} {line}" for i in range(300)) + "tail without an end"


@pytest.fixture(params=[5, 64], ids=["piece5", "piece64"])
def pieces(request, monkeypatch):
    """The pieces' size, in bytes for decoding and splitting alike: 5 cuts
    every character and line end somewhere."""
    monkeypatch.setattr(_text, "_PIECE", request.param)
    monkeypatch.setattr(_file, "SPLIT_PIECE", request.param)
    return request.param


def builtin_calls(path, calls, **kw):
    """What the built-in text file returns for ``calls`` (name, argument)
    in order; ``("tell-seek", n)`` reads ``n`` characters at the position
    ``tell`` gives, seeks back there and reads them again."""
    out = []
    with open(path, **kw) as f:
        for name, arg in calls:
            if name == "tell-seek":
                at = f.tell()
                first = f.read(arg)
                f.seek(at)
                out.append((first, f.read(arg)))
            else:
                out.append(getattr(f, name)(arg))
    return out


async def blockio_calls(path, calls, engine, **kw):
    out = []
    async with blockio.open(path, engine=engine, **kw) as f:
        for name, arg in calls:
            if name == "tell-seek":
                at = await f.tell()
                first = await f.read(arg)
                await f.seek(at)
                out.append((first, await f.read(arg)))
            else:
                out.append(await getattr(f, name)(arg))
    return out


CALLS = {
    "reads": [("read", 1), ("read", 1000), ("tell-seek", 50), ("read", 3001), ("readline", -1), ("read", 7),
              ("tell-seek", 9), ("read", -1), ("read", 5)],
    "lines": [("read", 3), ("readline", -1), ("tell-seek", 20), ("readlines", -1), ("read", -1)],
    "read-all": [("readline", -1), ("read", -1), ("readline", -1)],
}


@pytest.mark.parametrize("calls", list(CALLS), ids=list(CALLS))
@pytest.mark.parametrize("newline", [None, "", "\n", "\r", "\r\n"])
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "latin-1"])
def test_text_reads_in_pieces_return_the_builtins_characters(tmp_path, engine, pieces, calls, newline, encoding):
    p = tmp_path / "t.txt"
    p.write_bytes(text_for(encoding).encode(encoding))
    want = builtin_calls(p, CALLS[calls], encoding=encoding, newline=newline)
    assert asyncio.run(blockio_calls(p, CALLS[calls], engine, encoding=encoding, newline=newline)) == want


@pytest.mark.parametrize("run", RUNNERS)
def test_binary_readlines_in_pieces_returns_the_builtins_lines(tmp_path, engine, pieces, run):
    data = text_for("utf-8").encode() + b"\r\n\x00\n\r"
    p = tmp_path / "b"
    p.write_bytes(data)
    with open(p, "rb") as f:
        f.read(3)
        want = f.readlines()

    async def main():
        async with blockio.open(p, "rb", engine=engine) as f:
            await f.read(3)
            return await f.readlines(), await f.read()

    assert run(main()) == (want, b"")


async def turns_during(call, counted):
    """How many times a task looping on ``asyncio.sleep(0)`` ran while
    ``call`` (a coroutine) ran and ``counted()`` was true, and the call's
    result."""
    ran = [0]
    done = False

    async def other():
        while not done:
            ran[0] += counted()
            await asyncio.sleep(0)

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0)
    ran[0] = 0
    try:
        result = await call
    finally:
        done = True
    await task
    return ran[0], result


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize("call", ["read()", "read(n)", "readlines()", "binary readlines()"])
def test_a_large_read_takes_a_turn_of_the_loop_between_two_pieces(tmp_path, engine, monkeypatch, run, call):
    """Over a cached 4 MiB file cut in 128 pieces of 32 KiB, the other task
    runs at least once between two pieces, for each piece after the
    first: no piece's decoding or splitting waits for the others. Only its
    turns in the pauses between pieces count: those the read's own I/O
    gives (a worker's read, the binary read's turns) do not."""
    monkeypatch.setattr(_text, "_PIECE", 32 << 10)
    monkeypatch.setattr(_file, "SPLIT_PIECE", 32 << 10)
    between = [False]
    pause = _text.pause

    async def marked_pause():
        between[0] = True
        try:
            await pause()
        finally:
            between[0] = False

    monkeypatch.setattr(_text, "pause", marked_pause)
    monkeypatch.setattr(_file, "pause", marked_pause)
    p = tmp_path / "big.txt"
    p.write_text("".join(f"{i:07d} {'é' * 40} some text\n" for i in range(40000)), encoding="utf-8")
    size = p.stat().st_size
    want_pieces = size // _text._PIECE
    assert want_pieces >= 120

    async def main():
        async with blockio.open(p, "rb" if call.startswith("binary") else "r", encoding=None if
                                call.startswith("binary") else "utf-8", engine=engine) as f:
            await f.read(0)
            if call == "read()":
                return await turns_during(f.read(), lambda: between[0])
            if call == "read(n)":
                return await turns_during(f.read(size), lambda: between[0])
            return await turns_during(f.readlines(), lambda: between[0])

    ran, result = run(main())
    with open(p, "rb" if call.startswith("binary") else "r", encoding=None if call.startswith("binary") else "utf-8") as f:
        want = f.readlines() if call.endswith("readlines()") else f.read()
    assert result == want
    assert ran >= want_pieces - 1, (ran, want_pieces)


@pytest.mark.parametrize("run", RUNNERS)
@pytest.mark.parametrize("call", ["read()", "read(n)", "readlines()"])
@pytest.mark.parametrize("at_pause", [1, 2, 7])
def test_a_text_read_cancelled_between_pieces_moves_nothing(tmp_path, engine, monkeypatch, run, call, at_pause):
    """Cancelled at its ``at_pause``-th turn of the loop between two pieces
    (the task cancels itself there), the call returns nothing: then
    ``tell()`` is where it was and the next calls return what the
    built-in's return from there."""
    monkeypatch.setattr(_text, "_PIECE", 64 << 10)
    paused = [0]
    cancel_at = [None]
    pause = _text.pause

    async def cancelling_pause():
        paused[0] += 1
        if paused[0] == cancel_at[0]:
            asyncio.current_task().cancel()
        await pause()

    monkeypatch.setattr(_text, "pause", cancelling_pause)
    p = tmp_path / "c.txt"
    p.write_text("".join(f"{i:07d} {'é€' * 30} line\r\n" for i in range(4 << 20 >> 7)), encoding="utf-8")
    with open(p, encoding="utf-8") as f:
        head = f.read(5)
        want_rest = f.read()
    n = len(want_rest) - 10

    async def main():
        async with blockio.open(p, encoding="utf-8", engine=engine) as f:
            assert await f.read(5) == head
            at = await f.tell()
            paused[0], cancel_at[0] = 0, at_pause
            coro = f.read() if call == "read()" else f.read(n) if call == "read(n)" else f.readlines()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.ensure_future(coro)
            cancel_at[0] = None
            assert paused[0] == at_pause  # (cancelled there, not after)
            assert await f.tell() == at
            assert await f.read(n) == want_rest[:n]
            assert await f.read() == want_rest[n:]

    run(main())


@pytest.mark.parametrize("encoding, bad_at", [("utf-8", 3 << 20), ("utf-16-le", 2 << 20)])
def test_a_text_read_in_pieces_raises_the_builtins_decoding_error(tmp_path, engine, encoding, bad_at):
    """Bytes that do not decode in a later piece of ``read()`` raise the
    error decoding the whole rest raises (its positions in the rest), as
    the built-in's; the next ``read()`` returns what the built-in's does."""
    good = ("abc é\n" * (600 << 10)).encode(encoding)
    p = tmp_path / "bad.txt"
    p.write_bytes(good[:bad_at] + b"\xff\xd8" + good[bad_at:])

    def outcome(f):
        try:
            return f.read()
        except UnicodeDecodeError as e:
            return ("error", str(e))

    with open(p, encoding=encoding) as f:
        f.read(10)
        want = [outcome(f), outcome(f)]

    async def aoutcome(f):
        try:
            return await f.read()
        except UnicodeDecodeError as e:
            return ("error", str(e))

    async def main():
        async with blockio.open(p, encoding=encoding, engine=engine) as f:
            await f.read(10)
            return [await aoutcome(f), await aoutcome(f)]

    got = asyncio.run(main())
    assert got[0][0] == "error" and got == want


class HandlerFailed(Exception):
    """Raised by the ``blockio-test-fails`` error handler."""


def failing_handler(error):
    raise HandlerFailed(error.start)


codecs.register_error("blockio-test-fails", failing_handler)


@pytest.mark.parametrize("errors", ["xmlcharrefreplace", "no-such-handler", "blockio-test-fails"])
def test_a_text_read_failing_otherwise_than_decoding_reads_on_as_the_builtins(tmp_path, engine, pieces, errors):
    """A ``read()`` whose ``errors=`` handler fails (``TypeError`` from an
    encoding-only handler, ``LookupError`` from an unknown name, a
    handler's own exception) raises that error, and the bytes are read:
    the next ``read()`` and ``tell()`` are the built-in's, as after a
    decoding error."""
    p = tmp_path / "x.txt"
    p.write_bytes(b"hello \xff world\n" * 3)

    def outcome(call):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 (the error's type is compared)
            return type(e).__name__

    with open(p, encoding="utf-8", errors=errors) as f:
        want = [outcome(f.read), outcome(f.read), f.tell()]

    async def aoutcome(call):
        try:
            return await call()
        except Exception as e:  # noqa: BLE001
            return type(e).__name__

    async def main():
        async with blockio.open(p, encoding="utf-8", errors=errors, engine=engine) as f:
            return [await aoutcome(f.read), await aoutcome(f.read), await f.tell()]

    got = asyncio.run(main())
    assert got[0] in ("TypeError", "LookupError", "HandlerFailed") and got == want


@pytest.mark.parametrize("piece", [3, 64 << 10], ids=["bom-piece", "piece64k"])
@pytest.mark.parametrize("call", ["read()", "read(n)", "readlines()"])
def test_a_read_cancelled_at_the_start_of_a_file_with_a_bom_leaves_tell_at_0(tmp_path, engine, monkeypatch, call,
                                                                            piece):
    """A ``utf-8-sig`` file read from its start, the call cancelled at its
    first turn between two pieces (it returned nothing; with pieces of 3
    bytes, it had decoded the BOM alone): ``tell()`` is 0, the built-in's
    before any read, not past the BOM, and the next reads return the
    built-in's characters."""
    monkeypatch.setattr(_text, "_PIECE", piece)
    cancel = [True]
    pause = _text.pause

    async def cancelling_pause():
        if cancel[0]:
            cancel[0] = False
            asyncio.current_task().cancel()
        await pause()

    monkeypatch.setattr(_text, "pause", cancelling_pause)
    p = tmp_path / "sig.txt"
    p.write_text("abc é\n" * (100 << 10 if piece > 3 else 100), encoding="utf-8-sig")
    with open(p, encoding="utf-8-sig") as f:
        want = (f.tell(), f.read(4), f.read())

    async def main():
        async with blockio.open(p, encoding="utf-8-sig", engine=engine) as f:
            n = 500 if piece == 3 else 600 << 10
            coro = f.read() if call == "read()" else f.read(n) if call == "read(n)" else f.readlines()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.ensure_future(coro)
            assert not cancel[0]
            return (await f.tell(), await f.read(4), await f.read())

    assert asyncio.run(main()) == want


@pytest.mark.parametrize("call", ["read()", "readlines()"])
def test_a_read_of_the_bytes_failing_between_pieces_moves_nothing(tmp_path, engine, monkeypatch, call):
    """The binary file's read of a later piece raising ``OSError``: the
    text call raises it with the file where it was, and the next reads
    return the built-in's characters from there."""
    monkeypatch.setattr(_text, "_PIECE", 64 << 10)
    p = tmp_path / "e.txt"
    p.write_text("".join(f"{i:07d} é€ line\n" for i in range(30000)), encoding="utf-8")
    with open(p, encoding="utf-8") as f:
        head = f.read(7)
        want = f.read()

    async def main():
        async with blockio.open(p, encoding="utf-8", engine=engine) as f:
            assert await f.read(7) == head
            at = await f.tell()
            read = f.buffer.read
            calls = [0]

            async def failing_read(*args):
                calls[0] += 1
                if calls[0] == 3:
                    raise OSError(5, "injected")
                return await read(*args)

            f.buffer.read = failing_read
            with pytest.raises(OSError, match="injected"):
                await (f.read() if call == "read()" else f.readlines())
            del f.buffer.read
            assert calls[0] == 3
            return await f.tell() == at, await f.read()

    assert asyncio.run(main()) == (True, want)
