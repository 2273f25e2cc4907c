"""A text file's ``seek`` and ``truncate`` keep their place in the file's
order once made, as its writes do: started in tasks just before the event
loop ends (``asyncio.run``'s cancellation of every task, a program's own
``for t in asyncio.all_tasks(): t.cancel()``, ``loop.close()`` with the
tasks pending) or cancelled on their own, they still happen, and the writes
made behind them land where they leave the position. Random sequences of
writes, seeks and truncations are compared with the built-in ``open``'s
file doing the same in order: the same bytes, and the next loop's ``tell()``
is the built-in's."""

import asyncio
import random

import pytest

import blockio
from loops import abandon, record_test_tasks

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])

#: Random sequences per case: each runs in a few milliseconds.
TRIALS = 40


def _sequence(rnd):
    ops = []
    for i in range(rnd.randint(2, 8)):
        k = rnd.random()
        if k < 0.6:
            ops.append(("write", f"{i}é" * rnd.randint(1, 300)))
        elif k < 0.8:
            ops.append(("seek", rnd.choice([0, 0, 3, 10])))
        elif k < 0.9:
            ops.append(("seek_end", 0))
        else:
            ops.append(("truncate", rnd.choice([None, rnd.randint(0, 50)])))
    return ops


#: What an ``r+`` file holds before the calls.
BEFORE = "héllo\n" * 20


def _prepare(path, mode, encoding):
    if mode == "r+":
        path.write_text(BEFORE, encoding=encoding)


def _builtin(path, mode, ops, encoding):
    _prepare(path, mode, encoding)
    with open(path, mode, encoding=encoding) as f:
        for op, arg in ops:
            if op == "write":
                f.write(arg)
            elif op == "seek":
                f.seek(arg)
            elif op == "seek_end":
                f.seek(0, 2)
            else:
                f.truncate(arg)
        return f.tell()


def _call(f, op, arg):
    if op == "write":
        return f.write(arg)
    if op == "seek":
        return f.seek(arg)
    if op == "seek_end":
        return f.seek(0, 2)
    return f.truncate(arg)


def _started_then_ended(path, mode, ops, ending, engine, encoding):
    """Starts each call of ``ops`` in a task of its own (its first step run),
    then ends the loop as ``ending`` says; the file object, for the next loop."""
    box = {}
    _prepare(path, mode, encoding)

    async def main():
        f = box["f"] = await blockio.open(path, mode, encoding=encoding, engine=engine)
        tasks = []
        for op, arg in ops:
            tasks.append(asyncio.ensure_future(_call(f, op, arg)))
            await asyncio.sleep(0)  # (the call has begun)
        if ending == "cancel-all":
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()
            await asyncio.sleep(0)
        elif ending == "cancel-seeks":
            for t, (op, _) in zip(tasks, ops):
                if op != "write":
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    if ending == "loop-close":
        loop = asyncio.new_event_loop()
        made = record_test_tasks(loop)
        loop.run_until_complete(main())
        loop.close()
        abandon(loop, made)  # (the calls left pending: the test checks what they did)
    else:
        asyncio.run(main())
    return box["f"]


async def _tell_and_close(f):
    at = await f.tell()
    await f.close()
    return at


@BACKENDS
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-8-sig"])
@pytest.mark.parametrize("mode", ["w", "w+", "r+"])
@pytest.mark.parametrize("ending", ["asyncio-run", "cancel-all", "cancel-seeks", "loop-close"])
def test_text_seek_and_truncate_keep_their_place_when_cancelled(tmp_path, backend, encoding, mode, ending):
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            ops = _sequence(random.Random(trial))
            ref, got = tmp_path / f"ref{trial}", tmp_path / f"got{trial}"
            want_tell = _builtin(ref, mode, ops, encoding)
            f = _started_then_ended(got, mode, ops, ending, e, encoding)
            at = asyncio.run(_tell_and_close(f))
            assert (got.read_bytes(), at) == (ref.read_bytes(), want_tell), (trial, ops)


@BACKENDS
def test_text_seek_made_behind_a_write_and_cancelled_still_moves_the_write_behind_it(tmp_path, backend):
    p = tmp_path / "f"
    with blockio.Engine(backend=backend) as e:

        async def main():
            async with blockio.open(p, "w", encoding="utf-8", engine=e) as f:
                w1 = asyncio.ensure_future(f.write("A" * 100))
                await asyncio.sleep(0)
                s = asyncio.ensure_future(f.seek(0))
                await asyncio.sleep(0)
                w2 = asyncio.ensure_future(f.write("B" * 10))
                await asyncio.sleep(0)
                s.cancel()
                await asyncio.gather(w1, s, w2, return_exceptions=True)
                return await f.tell()

        assert asyncio.run(main()) == 10
    assert p.read_text() == "B" * 10 + "A" * 90


@BACKENDS
def test_text_seek_refused_leaves_the_reader_where_it_was(tmp_path, backend):
    p = tmp_path / "f"
    p.write_text("line one\nline two\n")
    with blockio.Engine(backend=backend) as e:

        async def main():
            async with blockio.open(p, "r+", encoding="utf-8", engine=e) as f:
                assert await f.readline() == "line one\n"
                with pytest.raises(OSError):
                    await f.seek(1 << 62)  # (past what the file system takes)
                return await f.readline(), await f.tell()

        assert asyncio.run(main()) == ("line two\n", 18)


@BACKENDS
@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_text_seek_past_the_bom_then_read_decodes_with_its_byte_order(tmp_path, backend, encoding):
    p = tmp_path / "f"
    p.write_text("ab\ncd\n", encoding=encoding)
    with open(p, encoding=encoding) as g:
        g.readline()
        at = g.tell()
        g.seek(at)
        want = g.read()
    with blockio.Engine(backend=backend) as e:

        async def main():
            async with blockio.open(p, "r", encoding=encoding, engine=e) as f:
                await f.readline()
                here = await f.tell()
                await f.seek(here)
                return await f.read()

        assert asyncio.run(main()) == want == "cd\n"
