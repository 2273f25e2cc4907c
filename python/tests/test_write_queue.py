"""Writes begun on a file whose event loop is then closed, with no Python
code running for them again: every write whose call has begun reaches
the file, in the order the writes were made (each is in the file's write
queue in the core before its call first yields, and the core submits the
next when the one ahead completes); ``tell()`` in the next loop is past
them all, and ``close()`` succeeds. Unbuffered, buffered (writes larger
than the buffer, whose flushes are writes too) and in append mode; on both
backends, under asyncio and uvloop. A ``seek``, ``truncate``, ``flush`` or
``tell`` made among them is done at once or placed in that queue too (a
truncation is an entry the core runs in order), so the writes behind it
land as well, where the built-in file run in the same order puts them."""

import asyncio
import os

import pytest

import blockio
import loops as loop_kinds
from loops import abandon, record_test_tasks

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
LOOPS = pytest.mark.parametrize("new_loop", [pytest.param(f, id=n) for n, f in loop_kinds.FACTORIES.items()])
TRIALS = 10


def _run(new_loop, coro):
    """Runs ``coro`` to its end on a new loop of ``new_loop``, then closes
    the loop (tasks left pending stay so: nothing cancels them; they are
    abandoned, the test checks what their calls did)."""
    loop = new_loop()
    made = record_test_tasks(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
        abandon(loop, made)


def _begin_writes_then_close_the_loop(new_loop, open_file, records):
    """Opens a file, starts a task per record writing it, runs the loop until
    each task has begun its write (one turn), and closes the loop: the
    file."""

    async def main():
        f = await open_file()
        for r in records:
            asyncio.ensure_future(f.write(r))
        await asyncio.sleep(0)  # (each task runs to its write's first await)
        return f

    return _run(new_loop, main())


def _tell_and_close(new_loop, f):
    """``tell()`` and ``close()`` in a new loop: the position."""

    async def main():
        at = await f.tell()
        await f.close()
        return at

    return _run(new_loop, main())


def _assert_every_write_lands(new_loop, p, open_file, records, trial, head=b""):
    """Writes ``records`` as `_begin_writes_then_close_the_loop` does, on
    the file ``open_file`` opens at ``p``: ``tell()`` in a new loop is past
    them all, ``close()`` succeeds, and ``p`` holds ``head`` then them, in
    order (``trial`` named if not)."""
    f = _begin_writes_then_close_the_loop(new_loop, open_file, records)
    assert _tell_and_close(new_loop, f) == len(head) + sum(map(len, records)), trial
    assert p.read_bytes() == head + b"".join(records), trial


@BACKENDS
@LOOPS
@pytest.mark.parametrize("count", [2, 20])
def test_writes_begun_before_the_loop_closes_all_land_in_order(tmp_path, backend, new_loop, count):
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p = tmp_path / f"out{trial}"
            records = [b"%03d:%04d\n" % (k, trial) for k in range(count)]
            _assert_every_write_lands(new_loop, p, lambda: blockio.open(p, "wb", buffering=0, engine=e), records, trial)


@BACKENDS
@LOOPS
def test_buffered_writes_larger_than_the_buffer_begun_before_the_loop_closes_all_land(tmp_path, backend, new_loop):
    # Each write overflows the 4096-byte buffer, which holds the tail of the
    # one before: the flush of both is one write, queued in the core.
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p = tmp_path / f"out{trial}"
            records = [bytes([65 + k]) * (1500 + 700 * k) for k in range(8)]
            _assert_every_write_lands(new_loop, p, lambda: blockio.open(p, "wb", buffering=4096, engine=e), records,
                                      trial)


@BACKENDS
@LOOPS
def test_appends_begun_before_the_loop_closes_all_land_in_order(tmp_path, backend, new_loop):
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p = tmp_path / f"out{trial}"
            p.write_bytes(b"head\n")
            records = [b"%03d\n" % k for k in range(20)]
            _assert_every_write_lands(new_loop, p, lambda: blockio.open(p, "ab", buffering=0, engine=e), records, trial,
                                      head=b"head\n")


@BACKENDS
def test_writes_made_while_one_is_in_progress_run_at_once_and_keep_their_order(tmp_path, backend):
    """In a live loop: writes made while one is in progress do not wait for
    their turn (they join it), each call's count is its own, and a read
    made after them waits for all of them."""
    p = tmp_path / "out"

    async def main():
        async with blockio.open(p, "w+b", buffering=0, engine=e) as f:
            records = [b"%03d|" % k * 100 for k in range(30)]
            counts = await asyncio.gather(*(f.write(r) for r in records), f.seek(0), f.read())
            assert counts[:30] == [len(r) for r in records]
            assert counts[31] == b"".join(records)
            assert await f.tell() == sum(map(len, records))

    with blockio.Engine(backend=backend) as e:
        asyncio.run(main())


@BACKENDS
def test_a_failed_write_whose_call_never_ended_is_reported_by_the_next_call(tmp_path, backend):
    # The file's descriptor is read-only underneath (an ``opener``), so
    # the write fails in the kernel (EBADF) with its loop already closed:
    # nobody took its result, and the next call raises it; close then
    # succeeds.
    p = tmp_path / "out"
    p.write_bytes(b"")

    def opener(path, flags):
        return os.open(path, os.O_RDONLY)

    with blockio.Engine(backend=backend) as e:
        f = _begin_writes_then_close_the_loop(
            asyncio.new_event_loop, lambda: blockio.open(p, "wb", buffering=0, opener=opener, engine=e), [b"x"])

        async def after():
            with pytest.raises(OSError) as raised:
                await f.tell()
            await f.close()
            return raised.value.errno

        assert _run(asyncio.new_event_loop, after()) == 9  # EBADF
    assert p.read_bytes() == b""


@BACKENDS
@LOOPS
def test_a_write_waiting_behind_a_read_when_the_loop_closes_is_reported_by_close(tmp_path, backend, new_loop):
    # The read waits behind the first write, the second write behind the
    # read: its position depends on a call that never ended, so it is not
    # written, and close() says so (after closing the file).
    p = tmp_path / "out"
    with blockio.Engine(backend=backend) as e:
        f = _begin_writes_then_close_the_loop(new_loop, lambda: blockio.open(p, "w+b", buffering=0, engine=e), [])

        async def begin():
            for call in (lambda: f.write(b"first\n"), f.read, lambda: f.write(b"second\n")):
                asyncio.ensure_future(call())
            await asyncio.sleep(0)

        _run(new_loop, begin())

        async def after():
            # (if the first write's end reached the loop before it closed,
            # the read had the turn, and it is the call that never ended)
            try:
                assert await f.tell() == 6
            except RuntimeError as e:
                assert "never ended" in str(e)
            with pytest.raises(RuntimeError, match="a call on it never ended"):
                await f.close()
            assert f.closed

        _run(new_loop, after())
    assert p.read_bytes() == b"first\n"


_FAILED_MIDWAY = r"""
import asyncio, resource, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, resource.RLIM_INFINITY))

async def main():
    engine = blockio.Engine(backend=backend)
    async with blockio.open(path, "wb", buffering=0, engine=engine) as f:
        writes = [asyncio.ensure_future(f.write(r)) for r in (b"a" * 8192, b"b" * 8192, b"c" * 100)]
        got = await asyncio.gather(*writes, return_exceptions=True)
        at = await f.tell()
    engine.close()
    print(repr(got[0]), repr(got[1]), type(got[2]).__name__, str(got[2]), at)

asyncio.run(main())
"""


@BACKENDS
def test_writes_queued_behind_one_that_fails_are_not_made(tmp_path, backend):
    """A write that fails part-way (past ``RLIMIT_FSIZE``: ``EFBIG``) with
    writes queued behind it in the core: those are not made (written at
    their planned offsets, they would leave a gap where the failed one's
    bytes should be) and their calls raise, naming the write that failed;
    the failed one returns the bytes that landed, as ``FileIO.write``
    does, and the position is past them: the file holds exactly what the
    calls said landed."""
    import subprocess
    import sys

    p = tmp_path / "f"
    out = subprocess.run([sys.executable, "-c", _FAILED_MIDWAY, str(p), backend],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second, kind, rest = out.stdout.split(" ", 3)
    assert (first, second, kind) == ("8192", "4096", "OSError"), out.stdout
    assert "a write of 100 bytes at offset 16384" in rest, out.stdout
    assert "was not made: the write before it failed at offset 12288" in rest, out.stdout
    assert int(rest.split()[-1]) == 12288, out.stdout
    assert p.read_bytes() == b"a" * 8192 + b"b" * 4096


def _run_script(script, *args):
    """Runs ``script`` in a new interpreter with ``args``: its output."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


_REFUSED_AT_THE_LIMIT = r"""
import asyncio, resource, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, resource.RLIM_INFINITY))

async def main():
    engine = blockio.Engine(backend=backend)
    async with blockio.open(path, "wb", buffering=0, engine=engine) as f:
        await f.seek(12288)
        writes = [asyncio.ensure_future(f.write(r)) for r in (b"x" * 100, b"y" * 100, b"z" * 100)]
        got = await asyncio.gather(*writes, return_exceptions=True)
        at = await f.tell()
    engine.close()
    print(*(getattr(g, "errno", "-") for g in got), at)

asyncio.run(main())
"""


@BACKENDS
def test_writes_refused_behind_a_failed_one_leave_the_position_where_the_bytes_stopped(tmp_path, backend):
    """The first write fails with nothing written (at ``RLIMIT_FSIZE``:
    ``EFBIG``), the two behind it are refused: each call raises
    ``EFBIG`` too (the built-in's, at the offset where the bytes
    stopped), and the
    position stays where the failed write began, not at the planned
    offset of the last refused one, past bytes that never landed."""
    p = tmp_path / "f"
    out = _run_script(_REFUSED_AT_THE_LIMIT, p, backend).split()
    assert out == ["27", "27", "27", "12288"], out  # (EFBIG; the refusals with the failure's errno)
    assert p.read_bytes() == b""


_LOST_BEHIND_A_FAILURE = r"""
import asyncio, resource, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, resource.RLIM_INFINITY))

def run(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()

async def begin(f, records):
    for r in records:
        asyncio.ensure_future(f.write(r))
    await asyncio.sleep(0)

async def tell(f):
    try:
        return await f.tell()
    except OSError as e:
        return "%s:%s" % (e.errno, e)

async def seek_and_close(f):
    await f.seek(0)
    await f.close()

engine = blockio.Engine(backend=backend)
f = run(blockio.open(path, "wb", buffering=0, engine=engine))
run(begin(f, [b"a" * 8192, b"b" * 8192, b"c" * 100, b"d" * 100]))
first = run(tell(f))
run(f.seek(0))
run(begin(f, [b"z"]))
second = run(tell(f))
run(f.close())
engine.close()
print(repr(first))
print(repr(second))
"""


@BACKENDS
def test_a_failure_whose_call_never_ended_is_reported_once_with_the_writes_it_refused(tmp_path, backend):
    """Four writes of a closed loop: the second fails part-way (``EFBIG``),
    the two behind it are refused. The next call raises that failure,
    naming the file and the two writes refused; the refusals it caused
    are not raised again by a later call (here the
    ``tell`` taking over the next write of a closed loop)."""
    p = tmp_path / "f"
    first, second = _run_script(_LOST_BEHIND_A_FAILURE, p, backend).splitlines()
    assert first[1:].startswith("27:") and str(p) in first, first
    assert first.count("was not made") == 2, first
    assert second == "1", second
    assert p.read_bytes()[:1] == b"z"


@BACKENDS
def test_close_taking_over_from_a_failed_write_closes_the_file_then_raises(tmp_path, backend):
    # As above (a read-only descriptor underneath, the write's loop
    # closed), but close() is the call that takes the queue over: it
    # closes the file and its descriptor, then raises the write's failure.
    p = tmp_path / "out"
    p.write_bytes(b"")
    fds = []

    def opener(path, flags):
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]

    with blockio.Engine(backend=backend) as e:
        f = _begin_writes_then_close_the_loop(
            asyncio.new_event_loop, lambda: blockio.open(p, "wb", buffering=0, opener=opener, engine=e), [b"x"])

        async def after():
            with pytest.raises(OSError) as raised:
                await f.close()
            return raised.value.errno

        assert _run(asyncio.new_event_loop, after()) == 9  # EBADF
        assert f.closed
        with pytest.raises(OSError):
            os.fstat(fds[0])


def test_a_write_closed_after_its_queue_was_taken_over_and_freed_changes_nothing():
    """The coroutine of a write whose loop was closed, closed (collected)
    only after another call took the queue over and freed it, neither
    syncs the offset nor frees the queue a second time."""
    from blockio._calls import CallQueue, one_at_a_time, one_at_a_time_kept

    class Calls:
        def __init__(self):
            self._calls = CallQueue()
            self.synced = 0

        def _sync_offset(self):
            self.synced += 1

        @one_at_a_time_kept
        async def write(self, never):
            await never

        @one_at_a_time
        async def tell(self):
            return 0

    c = Calls()

    async def begin():
        never = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(c.write(never))
        await asyncio.sleep(0)
        return task

    task = _run(asyncio.new_event_loop, begin())
    assert _run(asyncio.new_event_loop, c.tell()) == 0
    synced, q = c.synced, c._calls
    assert q._owner is None and q.free == [None]
    task.get_coro().close()
    assert c.synced == synced
    assert q._owner is None and q.free == [None]


@BACKENDS
def test_a_write_that_would_end_past_the_largest_offset_is_refused_naming_fd_and_offset(tmp_path, backend):
    # (a file object's position never gets there: the kernel refuses such
    # a seek; the queue refuses it itself rather than submit an offset
    # that wrapped)
    from blockio._blockio import WriteQueue

    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        with blockio.Engine(backend=backend) as e:
            at = 2**63 - 10
            with pytest.raises(ValueError, match=f"a write of 100 bytes at offset {at} on fd {fd} would end past"):
                WriteQueue().start(e._core, None, fd, b"x" * 100, at)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b""


_JOINED_FLUSHES_FAIL = r"""
import asyncio, resource, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, resource.RLIM_INFINITY))

async def main():
    engine = blockio.Engine(backend=backend)
    async with blockio.open(path, "wb", buffering=4096, engine=engine) as f:
        await f.seek(12288)
        await f.write(b"0" * 100)
        writes = [asyncio.ensure_future(f.write(r)) for r in (b"A" * 5000, b"s" * 10, b"B" * 5000)]
        got = await asyncio.gather(*writes, return_exceptions=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        await f.flush()
        at = await f.tell()
    engine.close()
    print(*(getattr(g, "errno", g) for g in got), at)

asyncio.run(main())
"""


@BACKENDS
def test_joined_flushes_that_fail_keep_what_was_buffered_in_the_order_it_was_written(tmp_path, backend):
    """Two flushes queued one behind the other (each write larger than
    what the buffer has room for, the second joined behind the first with
    a small write buffered between them) fail at ``RLIMIT_FSIZE``, the
    first with nothing written, the second refused behind it. Their writes
    raise, and their bytes are not kept (the built-in's write whose flush
    failed accepted none); the bytes buffered before and between them, which
    their writes had accepted, are kept in the order they were written, and
    land there once the limit is lifted."""
    p = tmp_path / "f"
    out = _run_script(_JOINED_FLUSHES_FAIL, p, backend).split()
    assert out == ["27", "10", "27", str(12288 + 110)], out  # (the refused one with the failure's errno)
    assert p.read_bytes() == bytes(12288) + b"0" * 100 + b"s" * 10


#: Calls made one after the other on one file, each as a task started in
#: the same turn of the loop: (mode, buffering, what the file holds before,
#: [(method, *args)]).
_ORDERS = {
    "seek": ("wb", 0, b"", [("write", b"A" * 8), ("seek", 0), ("write", b"BB")]),
    "seek-cur": ("wb", 0, b"", [("write", b"A" * 8), ("seek", -5, 1), ("write", b"BB"), ("seek", 1, 1),
                                ("write", b"C")]),
    "seek-end": ("wb", 0, b"", [("write", b"A" * 8), ("seek", 0), ("write", b"BB"), ("seek", 0, 2),
                                ("write", b"CC"), ("seek", -3, 2), ("write", b"D")]),
    "truncate": ("wb", 0, b"", [("write", b"A" * 8), ("truncate", 3), ("write", b"BB")]),
    "truncate-at-position": ("wb", 0, b"", [("write", b"A" * 8), ("seek", 5), ("truncate",), ("write", b"BB"),
                                            ("tell",)]),
    "truncate-then-seek-end": ("r+b", 0, b"0123456789", [("write", b"AAA"), ("truncate", 5), ("seek", 0, 2),
                                                         ("write", b"Z"), ("flush",)]),
    "buffered-flush": ("wb", -1, b"", [("write", b"a" * 5), ("flush",), ("write", b"b" * 3)]),
    "buffered-seek": ("wb", -1, b"", [("write", b"a" * 5), ("seek", 0), ("write", b"bb")]),
    "buffered-truncate": ("wb", -1, b"", [("write", b"a" * 5), ("truncate", 2), ("write", b"bb")]),
    "buffered-seek-end": ("w+b", -1, b"", [("write", b"a" * 5), ("seek", 1), ("write", b"b"), ("seek", 0, 2),
                                           ("write", b"cc")]),
    "truncate-0-then-seek-end": ("r+b", 0, b"0123456789", [("write", b"AB"), ("truncate", 0), ("seek", 0, 2),
                                                           ("write", b"C")]),
    "buffered-truncate-0-then-seek-end": ("r+b", -1, b"0123456789", [("write", b"AB"), ("truncate", 0),
                                                                     ("seek", 0, 2), ("write", b"C")]),
    "seek-end-first": ("r+b", 0, b"0123456789", [("seek", 0, 2), ("write", b"XY")]),
    "buffered-seek-end-first": ("r+b", -1, b"0123456789", [("seek", -3, 2), ("write", b"XY"), ("tell",)]),
    "small-buffer": ("wb", 16, b"", [("write", b"a" * 40), ("seek", 3), ("write", b"b" * 20), ("truncate", 30),
                                     ("write", b"c" * 20), ("seek", -2, 2), ("write", b"d" * 5), ("flush",)]),
    # Append mode: a position that depends on the end is the end at the
    # time, taken in the file's write queue in order.
    "append-truncate": ("a+b", 0, b"0123456789" * 4, [("write", b"A" * 6), ("truncate", 10), ("write", b"D" * 5)]),
    "append-truncate-tell": ("a+b", 0, b"0123456789", [("write", b"AAAA"), ("truncate", 5), ("tell",),
                                                       ("write", b"B"), ("tell",)]),
    "append-truncate-at-end": ("a+b", 0, b"0123456789", [("write", b"AAAA"), ("truncate",), ("write", b"B")]),
    "append-tell": ("a+b", 0, b"0123456789", [("write", b"A" * 6), ("tell",), ("write", b"B" * 3), ("tell",)]),
    "append-seek-end": ("a+b", 0, b"0123456789", [("write", b"AA"), ("seek", -3, 2), ("tell",), ("write", b"B"),
                                                  ("seek", 0, 2), ("truncate", 4), ("tell",), ("write", b"C")]),
    "append-seek-start": ("a+b", 0, b"0123456789", [("write", b"AA"), ("seek", 2), ("tell",), ("seek", 3, 1),
                                                    ("write", b"B"), ("tell",)]),
    "append-first-tell": ("ab", 0, b"0123456789", [("tell",), ("write", b"AB"), ("seek", 0, 1), ("write", b"C")]),
    "buffered-append": ("a+b", -1, b"0123456789", [("write", b"aaa"), ("tell",), ("write", b"bb"), ("seek", 1, 2),
                                                   ("truncate", 11)]),
    # (`truncate()` at the position of a seek from the end not answered
    # yet: cut there, relative to that seek's mark of the end)
    "append-seek-end-truncate": ("ab", 0, b"0123", [("write", b"A" * 10), ("seek", -4, 2), ("truncate",),
                                                    ("write", b"BBB")]),
    "append-seek-end-truncate-tell": ("a+b", 0, b"0123456789", [("write", b"x" * 20), ("seek", -3, 2),
                                                                ("truncate",), ("tell",), ("write", b"ZZ"),
                                                                ("tell",)]),
}


def _builtin_order(p, order):
    """What the built-in ``open`` does with ``order``: each call's result,
    the position after them, and the file's bytes after its close."""
    mode, buffering, head, calls = order
    p.write_bytes(head)
    with open(p, mode, buffering=buffering) as f:
        results = [getattr(f, name)(*args) for name, *args in calls]
        at = f.tell()
    return results, at, p.read_bytes()


def _calls(f, order):
    return [getattr(f, name)(*args) for name, *args in order[3]]


@BACKENDS
@LOOPS
@pytest.mark.parametrize("name", sorted(_ORDERS))
def test_writes_behind_a_seek_truncate_or_flush_land_when_the_loop_closes(tmp_path, backend, new_loop, name):
    """The calls of ``name`` are all started, then the loop is closed with
    none of them ended but the ones done at once: every write lands where
    the built-in file, run in the same order, puts it (behind a seek, a
    truncation or a flush as behind a write), ``tell()`` in a new loop
    agrees with it, and ``close()`` succeeds."""
    order = _ORDERS[name]
    _, want_at, want = _builtin_order(tmp_path / "builtin", order)
    p = tmp_path / "out"
    p.write_bytes(order[2])
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p.write_bytes(order[2])

            async def main():
                f = await blockio.open(p, order[0], buffering=order[1], engine=e)
                for call in _calls(f, order):
                    asyncio.ensure_future(call)
                await asyncio.sleep(0)  # (each task runs to its first await)
                return f

            f = _run(new_loop, main())
            assert _tell_and_close(new_loop, f) == want_at, trial
            assert p.read_bytes() == want, trial


@BACKENDS
@pytest.mark.parametrize("name", ["buffered-seek", "buffered-flush", "seek", "truncate-at-position"])
def test_writes_behind_a_call_whose_turn_of_the_loop_is_due_land_too(tmp_path, backend, name):
    """As above, the first call awaited, the others started as tasks with
    every call's turn of the event loop due (it comes now and then: see
    ``one_at_a_time_taking_turns``): a seek, tell or flush that takes the
    queue yields only after it ran, so the write behind it still joins it
    rather than wait."""
    order = _ORDERS[name]
    _, want_at, want = _builtin_order(tmp_path / "builtin", order)
    p = tmp_path / "out"
    p.write_bytes(order[2])
    with blockio.Engine(backend=backend) as e:

        async def main():
            f = await blockio.open(p, order[0], buffering=order[1], engine=e)
            first, *rest = order[3]
            await getattr(f, first[0])(*first[1:])
            f._calls.turn_due = lambda nbytes=0: True
            for name, *args in rest:
                asyncio.ensure_future(getattr(f, name)(*args))
            await asyncio.sleep(0)
            return f

        f = _run(asyncio.new_event_loop, main())
        assert _tell_and_close(asyncio.new_event_loop, f) == want_at
    assert p.read_bytes() == want


@BACKENDS
@LOOPS
@pytest.mark.parametrize("name", sorted(_ORDERS))
def test_calls_made_behind_writes_in_a_live_loop_return_what_the_builtin_returns(
        tmp_path, backend, new_loop, name):
    """The same calls, awaited together in a live loop: each returns what
    the built-in file's returns in that order, and the file ends the same."""
    order = _ORDERS[name]
    want_results, want_at, want = _builtin_order(tmp_path / "builtin", order)
    p = tmp_path / "out"
    p.write_bytes(order[2])

    async def main():
        async with blockio.open(p, order[0], buffering=order[1], engine=e) as f:
            results = await asyncio.gather(*_calls(f, order))
            return results, await f.tell()

    with blockio.Engine(backend=backend) as e:
        assert _run(new_loop, main()) == (want_results, want_at)
    assert p.read_bytes() == want


@BACKENDS
@LOOPS
@pytest.mark.parametrize("name", sorted(_ORDERS))
def test_calls_cancelled_by_the_end_of_asyncio_run_end_as_the_builtin(tmp_path, backend, new_loop, name):
    """The same calls, each begun in a task of its own, in order, and left
    to the end of ``asyncio.run`` (a runner on ``new_loop``), which
    cancels every task: every call begun takes effect, in order (a
    truncation among them is not skipped while the writes behind it are
    made), so the file ends as the built-in's, and ``tell()`` in the next
    loop agrees."""
    order = _ORDERS[name]
    _, want_at, want = _builtin_order(tmp_path / "builtin", order)
    p = tmp_path / "out"
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p.write_bytes(order[2])

            async def main():
                f = await blockio.open(p, order[0], buffering=order[1], engine=e)
                for call in _calls(f, order):
                    asyncio.ensure_future(call)
                    await asyncio.sleep(0)  # (the call has begun)
                return f

            with asyncio.Runner(loop_factory=new_loop) as runner:
                f = runner.run(main())
            assert _tell_and_close(new_loop, f) == want_at, trial
            assert p.read_bytes() == want, trial


_SHORT_WRITE_AT_THE_LIMIT = r"""
import asyncio, os, resource, signal, sys
import uvloop
import blockio
path, backend, loop_name = sys.argv[1], sys.argv[2], sys.argv[3]
new_loop = uvloop.new_event_loop if loop_name == "uvloop" else asyncio.new_event_loop
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
ORDERS = {
    "tell-truncate": [("write", b"a" * 60), ("write", b"b" * 60), ("tell",), ("truncate", 50)],
    "cut-then-write": [("write", b"a" * 90), ("write", b"b" * 20), ("truncate", 30), ("seek", 0), ("write", b"Z"),
                       ("tell",)],
    "refused-tell": [("write", b"a" * 60), ("write", b"b" * 60), ("write", b"c" * 7), ("tell",), ("write", b"d"),
                     ("truncate", 20)],
    # (a seek from the position or the end goes from where the bytes
    # stopped, and the writes behind it are made there, under the limit)
    "seek-cur-then-write": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -5, 1), ("write", b"ccc"),
                            ("tell",)],
    "seek-end-then-write": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -5, 2), ("write", b"ccc"),
                            ("tell",)],
    "refused-then-truncate": [("write", b"a" * 60), ("write", b"b" * 60), ("write", b"c" * 7), ("truncate",),
                              ("tell",)],
    "refused-then-seek-cur": [("write", b"a" * 90), ("write", b"b" * 20), ("write", b"c" * 4), ("seek", -8, 1),
                              ("write", b"dd"), ("truncate",), ("tell",)],
    # (a seek whose target, from where the bytes stopped, is before the
    # start fails with EINVAL, the position staying there, and the writes
    # behind it are refused: nothing lands at the start)
    "seek-cur-before-the-start": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -105, 1),
                                  ("write", b"ccc"), ("tell",)],
    "seek-end-before-the-start": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -108, 2),
                                  ("write", b"ccc"), ("tell",)],
    # (a seek from the end behind a truncation to an explicit size goes from
    # that size, whatever the short write ahead never landed)
    "truncate-then-seek-end": [("write", b"a" * 90), ("write", b"b" * 20), ("truncate", 62), ("seek", -25, 2),
                               ("write", b"XYZ"), ("tell",)],
    # (a write past the limit behind a seek from the position fails whole,
    # and the position stays where it was tried)
    "seek-cur-then-failed-write": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", 5, 1), ("write", b"ccc"),
                                   ("tell",)],
    "two-seeks-cur-then-failed-write": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -5, 1),
                                        ("write", b"ccc"), ("seek", 2, 1), ("write", b"ccc"), ("tell",)],
    # (a seek from the start after one from the position: the writes after
    # it are made where the program put them)
    # (a seek from the end after one from the start goes from the end the
    # built-in's has, not the one the short write planned)
    "seek-set-then-seek-end": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -8, 1), ("seek", 2, 0),
                               ("seek", -2, 2), ("write", b"YY"), ("tell",)],
    # (a seek from the start behind a short write and a write it refused:
    # the position is the seek's, whatever those calls end with)
    "seek-set-behind-a-refused-write": [("write", b"a" * 90), ("write", b"b" * 20), ("write", b"c" * 6),
                                        ("seek", 101, 0), ("tell",)],
    "seek-cur-then-seek-set": [("write", b"a" * 90), ("write", b"b" * 20), ("seek", -5, 1), ("seek", 3, 0),
                               ("write", b"x"), ("write", b"yy"), ("tell",)],
}

def r(x):
    return "E%s" % x.errno if isinstance(x, OSError) else x

def builtin(calls):
    out = []
    with open(path, "w+b", buffering=0) as f:
        for name, *args in calls:
            try:
                out.append(r(getattr(f, name)(*args)))
            except OSError as x:
                out.append(r(x))
        at = f.tell()
    return out, at, open(path, "rb").read()

def run(coro):
    loop = new_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()

async def safe(c):
    try:
        return r(await c)
    except OSError as x:
        return r(x)

async def after(f):
    # (a failure no call took is raised once, by the next call)
    try:
        await f.tell()
    except OSError:
        pass
    at = await f.tell()
    await f.close()
    return at

def gathered(calls):
    async def main():
        f = await blockio.open(path, "w+b", buffering=0, engine=engine)
        out = []
        tasks = []
        for name, *args in calls:
            tasks.append(asyncio.ensure_future(safe(getattr(f, name)(*args))))
            await asyncio.sleep(0)
        out = await asyncio.gather(*tasks)
        at = await f.tell()
        await f.close()
        return list(out), at
    out, at = run(main())
    return out, at, open(path, "rb").read()

def closed(calls):
    async def main():
        f = await blockio.open(path, "w+b", buffering=0, engine=engine)
        for name, *args in calls:
            asyncio.ensure_future(getattr(f, name)(*args))
        await asyncio.sleep(0)
        return f
    f = run(main())
    return run(after(f)), open(path, "rb").read()

def cancelled(calls):
    async def main():
        f = await blockio.open(path, "w+b", buffering=0, engine=engine)
        for name, *args in calls:
            asyncio.ensure_future(getattr(f, name)(*args))
            await asyncio.sleep(0)
        return f
    with asyncio.Runner(loop_factory=new_loop) as runner:
        f = runner.run(main())
    return run(after(f)), open(path, "rb").read()

engine = blockio.Engine(backend=backend)
for name, calls in ORDERS.items():
    want = builtin(calls)
    print(name, repr((want, gathered(calls), closed(calls), cancelled(calls))))
engine.close()
"""


@BACKENDS
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_calls_behind_a_short_write_at_the_size_limit_end_as_the_builtins(tmp_path, backend, loop_name):
    """Under ``RLIMIT_FSIZE`` 100 bytes, on an unbuffered file, a write
    behind another stops short at the limit, with calls begun behind it.
    Each call's result is the built-in's in the same order: a ``tell``
    says where the bytes stopped (not the planned position), a write
    planned past them is refused with the kernel's ``EFBIG``, a truncation
    to an explicit size is made (the file is cut as the program asked),
    and the rest of the short write is not written again behind the calls
    made since (a write after a seek from the start among them is made);
    a seek from the position or the end goes from where the bytes
    stopped, and the writes behind it are made there, under the limit.
    Awaited together, left to a closed loop, and cancelled by the end of
    ``asyncio.run``, the file ends as the built-in's and ``tell()`` in the
    next loop agrees."""
    p = tmp_path / "f"
    for line in _run_script(_SHORT_WRITE_AT_THE_LIMIT, p, backend, loop_name).splitlines():
        name, outcome = line.split(" ", 1)
        (want, want_at, want_bytes), gathered, closed, cancelled = eval(outcome)
        assert gathered == (want, want_at, want_bytes), name
        assert closed == (want_at, want_bytes), name
        assert cancelled == (want_at, want_bytes), name


_TRUNCATE_FAILS = r"""
import asyncio, resource, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (12288, resource.RLIM_INFINITY))

def run(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()

async def begin(f, calls):
    for call in calls:
        asyncio.ensure_future(call())
    await asyncio.sleep(0)

async def tell(f):
    try:
        return await f.tell()
    except OSError as e:
        return "%s:%s" % (e.errno, e)

async def live(f):
    got = await asyncio.gather(f.write(b"b" * 10), f.truncate(1 << 20), return_exceptions=True)
    return [getattr(g, "errno", g) for g in got] + [await f.tell(), await f.tell()]

engine = blockio.Engine(backend=backend)
f = run(blockio.open(path, "wb", buffering=0, engine=engine))
run(begin(f, [lambda: f.write(b"a" * 100), lambda: f.truncate(1 << 20)]))
first = run(tell(f))
second = run(tell(f))
third = run(live(f))
run(f.close())
engine.close()
print(repr(first))
print(repr(second))
print(repr(third))
"""


@BACKENDS
def test_a_failed_truncation_is_reported_once(tmp_path, backend):
    """A truncation placed behind a write fails in the core (past
    ``RLIMIT_FSIZE``: ``EFBIG``). Its loop closed before it ended, the
    file's next call raises the failure, naming the truncation, and the
    one after it does not; in a live loop, the ``truncate`` call raises it
    itself, and no later call does. The writes land."""
    p = tmp_path / "f"
    first, second, third = _run_script(_TRUNCATE_FAILS, p, backend).splitlines()
    assert first[1:].startswith("27:") and "truncate" in first and "1048576" in first and str(p) in first, first
    assert second == "100", second
    assert third == "[10, 27, 110, 110]", third
    assert p.read_bytes() == b"a" * 100 + b"b" * 10


@BACKENDS
@pytest.mark.parametrize("buffering", [0, -1])
def test_a_write_behind_a_first_seek_from_the_end_lands_at_the_end_when_asyncio_run_cancels_both(
        tmp_path, backend, buffering):
    """``seek(0, 2)`` as the file's first call, then a write, both begun as
    tasks that ``asyncio.run`` cancels as ``main()`` returns: the seek is
    placed before it first yields (the size looked up on the loop's
    thread), so the write lands at the end, as the built-in's, and
    ``tell()`` in the next loop agrees."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    with blockio.Engine(backend=backend) as e:

        async def main():
            f = await blockio.open(p, "r+b", buffering=buffering, engine=e)
            asyncio.ensure_future(f.seek(0, 2))
            asyncio.ensure_future(f.write(b"XY"))
            await asyncio.sleep(0)
            return f

        f = asyncio.run(main())
        assert _tell_and_close(asyncio.new_event_loop, f) == 12
    assert p.read_bytes() == b"0123456789XY"


def test_a_cancelled_seek_waiting_behind_another_ends_cancelled(tmp_path):
    """Calls waiting their turn, cancelled by ``asyncio.run`` as ``main()``
    returns, leave the queue without formatting their task (whose repr
    asks the coroutine being thrown into for its name): each ends
    cancelled, none with ``RuntimeError``."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    tasks = []

    async def main():
        f = await blockio.open(p, "r+b")  # (the seeks wait behind the fsync)
        tasks.extend(asyncio.ensure_future(c) for c in (f.fsync(), f.seek(1), f.seek(0, 2), f.tell()))
        await asyncio.sleep(0)

    asyncio.run(main())
    assert [t.cancelled() or repr(t.exception()) for t in tasks] == [True, True, True, True]


_FAILURES_AS_THE_BUILTIN = r"""
import asyncio, os, resource, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_FSIZE, (50, resource.RLIM_INFINITY))
data = bytes(range(65, 65 + 60))

def r(x):
    return "E%s" % x.errno if isinstance(x, OSError) else x

def run(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()

async def safe(c):
    try:
        return r(await c)
    except OSError as x:
        return r(x)

def builtin(mode, buffering, calls):
    open(path, "wb").close()
    f = open(path, mode, buffering=buffering)
    out = []
    for name, *args in calls:
        try:
            out.append(r(getattr(f, name)(*args)))
        except OSError as x:
            out.append(r(x))
    out.append(f.tell())
    try:
        f.close()
    except OSError as x:
        out.append(r(x))
    return out, open(path, "rb").read()

def ours(mode, buffering, calls):
    open(path, "wb").close()
    async def main():
        f = await blockio.open(path, mode, buffering=buffering, engine=engine)
        if calls[0][0] == "write" and buffering:
            out = [await f.write(*calls[0][1:])]  # (buffered before the rest)
            rest = calls[1:]
        else:
            out, rest = [], calls
        out += await asyncio.gather(*[safe(getattr(f, name)(*args)) for name, *args in rest])
        out.append(await f.tell())
        try:
            await f.close()
        except OSError as x:
            out.append(r(x))
        return out
    return run(main()), open(path, "rb").read()

def closed(calls, buffering=0):
    open(path, "wb").close()
    f = run(blockio.open(path, "r+b", buffering=buffering, engine=engine))
    async def begin():
        for name, *args in calls:
            asyncio.ensure_future(getattr(f, name)(*args))
        await asyncio.sleep(0)
    run(begin())
    async def after():
        try:
            first = await f.tell()
        except OSError as x:
            first = "E%s %s" % (x.errno, x)
        return [first, await f.tell(), await f.close()]
    return run(after()), open(path, "rb").read()

engine = blockio.Engine(backend=backend)
cases = {
    "seek-flush-fails": ("r+b", -1, [("write", data), ("seek", 0), ("write", b"#####")]),
    "truncate-fails": ("r+b", 0, [("write", b"a" * 40), ("truncate", 100), ("write", b"b" * 5)]),
    "short-write-then-seek": ("r+b", 0, [("write", b"a" * 60), ("seek", 0), ("write", b"b" * 5)]),
}
for name, (mode, buffering, calls) in cases.items():
    print(name, builtin(mode, buffering, calls) == ours(mode, buffering, calls), builtin(mode, buffering, calls),
          ours(mode, buffering, calls))
for name, calls in {"write-fails": [("write", b"a" * 60), ("write", b"b" * 5)],
                    "truncate-fails": [("write", b"a" * 40), ("truncate", 100), ("write", b"b" * 5)],
                    "short-write-then-seek": [("write", b"a" * 60), ("seek", 0), ("write", b"b" * 5)],
                    "truncate-fails-then-write-fails": [("write", b"a" * 40), ("seek", 60), ("truncate",),
                                                        ("write", b"c")]}.items():
    print("closed-" + name, repr(closed(calls)))
print("closed-buffered-seek-flush-fails", repr(closed(cases["seek-flush-fails"][2], -1)))
overflow = ("r+b", 64, [("write", data), ("seek", 0), ("write", b"#" * 100)])
print("seek-flush-fails-then-overflow", repr((builtin(*overflow), ours(*overflow))))
engine.close()
"""


@BACKENDS
def test_failures_behind_placed_calls_end_as_the_builtins(tmp_path, backend):
    """Past ``RLIMIT_FSIZE`` (``EFBIG``): a seek whose flush fails raises
    and leaves the position where the built-in's does, the write made
    behind it buffered after the bytes the flush kept (nothing written at
    the seek's target); a write behind a failed truncation is made, as the
    built-in's, and so is one behind a short write and a seek from the
    start. Their loop closed before they ended: the next call raises the
    failures, naming the file, each failed entry and the write refused
    behind a short one, and ``tell()`` then says where the bytes stopped,
    as the built-in's; bytes buffered behind a seek whose flush failed
    are not written at the seek's target, and the error says so. A write
    behind that seek too large for the buffer is refused, not written at
    the seek's target."""
    p = tmp_path / "f"
    lines = dict(line.split(" ", 1) for line in _run_script(_FAILURES_AS_THE_BUILTIN, p, backend).splitlines())
    assert lines["seek-flush-fails"].startswith("True"), lines["seek-flush-fails"]
    assert lines["truncate-fails"].startswith("True"), lines["truncate-fails"]
    assert lines["short-write-then-seek"].startswith("True"), lines["short-write-then-seek"]
    (first, *rest), landed = eval(lines["closed-write-fails"])
    assert first.startswith("E") and str(p) in first and "a write of 5 bytes" in first, first
    assert (rest, landed) == ([50, None], b"a" * 50)
    (first, *rest), landed = eval(lines["closed-truncate-fails"])
    assert first.startswith("E27") and str(p) in first and "truncate" in first, first
    assert (rest, landed) == ([45, None], b"a" * 40 + b"b" * 5)
    (first, *rest), landed = eval(lines["closed-short-write-then-seek"])
    assert first.startswith("E27") and str(p) in first, first
    assert (rest, landed) == ([5, None], b"b" * 5 + b"a" * 45)
    (first, *rest), landed = eval(lines["closed-truncate-fails-then-write-fails"])
    assert first.startswith("E27") and str(p) in first and "truncate" in first and "write of 1 bytes" in first, first
    assert (rest, landed) == ([60, None], b"a" * 40)
    (first, *rest), landed = eval(lines["closed-buffered-seek-flush-fails"])
    assert first.startswith("E27") and str(p) in first and "5 bytes buffered for offset 0 were not written" in first
    assert (rest, landed) == ([50, None], bytes(range(65, 65 + 50)))
    # (the write that overflows the buffer behind the failed seek is
    # refused, EIO, where the built-in's raises the flush's EFBIG again)
    (want, want_bytes), (got, got_bytes) = eval(lines["seek-flush-fails-then-overflow"])
    assert (got[:2], got[3:], got_bytes) == (want[:2], want[3:], want_bytes), (got, want)


def _results(results):
    """Each result, an ``OSError`` as ``"E<errno>"``."""
    return ["E%d" % r.errno if isinstance(r, OSError) else r for r in results]


def _builtin_results(p, order):
    """As `_builtin_order`, each call's ``OSError`` as ``"E<errno>"``."""
    mode, buffering, head, calls = order
    p.write_bytes(head)
    results = []
    with open(p, mode, buffering=buffering) as f:
        for name, *args in calls:
            try:
                results.append(getattr(f, name)(*args))
            except OSError as e:
                results.append("E%d" % e.errno)
        at = f.tell()
    return results, at, p.read_bytes()


#: Append-mode calls that wait for their turn rather than join the writes
#: in progress (a ``truncate()`` or a ``seek`` from the position made
#: while the answer of a seek from the end has not come), with a write
#: behind them.
_WAITING_ORDERS = {
    "append-truncate-behind-seek-end": ("ab", 0, b"0123", [("write", b"A" * 10), ("seek", -4, 2), ("truncate",),
                                                          ("write", b"BBB")]),
    "append-seek-cur-behind-seek-end": ("a+b", 0, b"0123", [("write", b"A" * 10), ("seek", -4, 2), ("seek", -2, 1),
                                                           ("truncate",), ("write", b"BBB")]),
}


@BACKENDS
@LOOPS
@pytest.mark.parametrize("name", sorted(_WAITING_ORDERS))
def test_a_call_cancelled_while_it_waits_for_its_turn_is_made_before_the_write_behind_it(
        tmp_path, backend, new_loop, name):
    """The calls of ``name`` begun in one turn of the loop (so the
    ``truncate()`` sees the seek from the end not answered, and waits for
    its turn), then cancelled by the end of ``asyncio.run`` while it still
    waits: it keeps its place and is made, in order, before the write kept
    behind it, as the built-in's (not skipped while that write lands)."""
    order = _WAITING_ORDERS[name]
    _, want_at, want = _builtin_order(tmp_path / "builtin", order)
    p = tmp_path / "out"
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p.write_bytes(order[2])

            async def main():
                f = await blockio.open(p, order[0], buffering=order[1], engine=e)
                for call in _calls(f, order):
                    asyncio.ensure_future(call)
                await asyncio.sleep(0)  # (each task runs to its first await)
                return f

            with asyncio.Runner(loop_factory=new_loop) as runner:
                f = runner.run(main())
            assert _tell_and_close(new_loop, f) == want_at, trial
            assert p.read_bytes() == want, trial


@BACKENDS
@pytest.mark.parametrize("name", sorted(_WAITING_ORDERS))
def test_a_truncation_whose_turn_came_is_made_before_the_write_behind_it_when_asyncio_run_cancels_both(
        tmp_path, backend, name):
    """The calls of ``name`` each begun in a turn of its own, then
    cancelled by the end of ``asyncio.run``: in some trials the
    truncation's turn has come by then (the seek's answer taken), in
    others not; either way it is made before the write behind it, never
    left running on a file-system thread after that write landed (where it
    would cut it), nor skipped. Many trials, for the turn to come in
    some."""
    order = _WAITING_ORDERS[name]
    _, want_at, want = _builtin_order(tmp_path / "builtin", order)
    p = tmp_path / "out"
    seen = []
    with blockio.Engine(backend=backend) as e:
        for trial in range(_TURN_TRIALS):
            p.write_bytes(order[2])

            async def main():
                f = await blockio.open(p, order[0], buffering=order[1], engine=e)
                for call in _calls(f, order):
                    asyncio.ensure_future(call)
                    await asyncio.sleep(0)  # (the call has begun)
                return f

            f = asyncio.run(main())
            seen.append((_tell_and_close(asyncio.new_event_loop, f), p.read_bytes()))
    assert [s for s in seen if s != (want_at, want)] == []


#: Trials of the test above.
_TURN_TRIALS = 200


#: Append-mode seeks from the end to before the start, with a call made
#: behind them (which moves the position again, or reads it).
_APPEND_SEEK_ORDERS = {
    "write-behind": ("ab", 0, b"9", [("seek", -8, 2), ("write", b"BB")]),
    "seek-end-behind": ("ab", 0, b"9545169853", [("seek", -13, 2), ("seek", -2, 2)]),
    "seek-start-behind": ("a+b", 0, b"93371", [("seek", -11, 2), ("seek", 79, 0)]),
    "truncate-behind-failed-seek": ("a+b", 0, b"48", [("write", b"B" * 13), ("seek", -22, 1), ("truncate", 32),
                                                      ("read", 1)]),
    "buffered-truncate-behind-failed-seek": ("a+b", 16, b"48", [("write", b"B" * 13), ("seek", -22, 1),
                                                                ("truncate", 32), ("read", 1)]),
}


@BACKENDS
@LOOPS
@pytest.mark.parametrize("name", sorted(_APPEND_SEEK_ORDERS))
def test_an_append_mode_seek_before_the_start_raises_einval_and_leaves_the_position_at_the_end(
        tmp_path, backend, new_loop, name):
    """A seek from the end (or from the position, at the end) to before
    the start in append mode, each call begun in a task of its own in
    order, then gathered: the seek raises ``EINVAL`` (never returns a
    negative position), even when a call behind it has moved the position
    since, and the position stays at the end its mark answered, where a
    ``truncate(n)`` behind it leaves it and a read reads, as the
    built-in's."""
    order = _APPEND_SEEK_ORDERS[name]
    want = _builtin_results(tmp_path / "builtin", order)
    p = tmp_path / "out"
    p.write_bytes(order[2])

    async def main():
        async with blockio.open(p, order[0], buffering=order[1], engine=e) as f:
            tasks = []
            for call in _calls(f, order):
                tasks.append(asyncio.ensure_future(call))
                await asyncio.sleep(0)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            return _results(results), await f.tell()

    with blockio.Engine(backend=backend) as e:
        results, at = _run(new_loop, main())
    assert (results, at, p.read_bytes()) == want


@BACKENDS
@pytest.mark.parametrize("buffering", [0, -1])
def test_tell_after_buffered_appends_behind_a_seek_is_the_end(tmp_path, backend, buffering):
    """Append mode: a write, a seek from the position begun behind it, then
    writes (buffered or not): ``tell()`` is the end after them, where the
    next write goes (the built-in buffered file's says 16 here, the
    position it planned from before the appends: not followed), never the
    seek's target, however the writes that follow it were made."""
    calls = [("write", b"A" * 10), ("seek", -5, 1), ("write", b"D" * 3), ("write", b"E" * 4)]
    p = tmp_path / "f"
    p.write_bytes(b"0123")

    async def main():
        async with blockio.open(p, "ab", buffering=buffering, engine=e) as f:
            tasks = []
            for name, *args in calls:
                tasks.append(asyncio.ensure_future(getattr(f, name)(*args)))
                await asyncio.sleep(0)
            return await asyncio.gather(*tasks), await f.tell()

    with blockio.Engine(backend=backend) as e:
        assert asyncio.run(main()) == ([10, 9, 3, 4], 21)
    assert p.read_bytes() == b"0123" + b"A" * 10 + b"DDDEEEE"


#: The engine's file-system threads at most (`MAX_THREADS`, fsjobs.rs).
_FS_THREADS = 8


@BACKENDS
@pytest.mark.parametrize("writes", [0, 1])
def test_the_end_of_an_append_mode_seek_is_looked_up_on_the_file_system_threads(tmp_path, backend, writes):
    """Append mode: ``seek(0, 2)``, with nothing in progress or behind a
    write, takes the file's size on the engine's file-system threads,
    never on the loop's (where a slow file system would stall it): with
    every one of them held by an open of a FIFO that has no writer yet,
    the seek does not end, however many turns the loop takes (once the
    write ahead has landed), until a writer comes and frees them."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    fifos = [tmp_path / f"fifo{i}" for i in range(_FS_THREADS)]
    for fifo in fifos:
        os.mkfifo(fifo)

    async def main():
        f = await blockio.open(p, "a+b", buffering=0, engine=e)
        if writes:
            w = asyncio.ensure_future(f.write(b"AB"))
            await asyncio.sleep(0)
        opens = [asyncio.ensure_future(blockio.open(fifo, "rb", engine=e)) for fifo in fifos]
        await asyncio.sleep(0)  # (every thread now has, or will have, an open that waits)
        seek = asyncio.ensure_future(f.seek(0, 2))
        if writes:
            await w  # (the seek's mark is answered once the write has landed)
        for _ in range(50):
            await asyncio.sleep(0)
        ended_while_held = seek.done()
        writers = [os.open(fifo, os.O_RDWR) for fifo in fifos]  # (frees the opens)
        try:
            readers = await asyncio.gather(*opens)
            for r in readers:
                await r.close()
        finally:
            for fd in writers:
                os.close(fd)
        at = await seek
        await f.close()
        return ended_while_held, at

    with blockio.Engine(backend=backend) as e:
        assert asyncio.run(main()) == (False, 10 + 2 * writes)


_SEEK_BEHIND_A_SHORT_WRITE = r"""
import asyncio, resource, signal, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
engine = blockio.Engine(backend=backend)
loop = asyncio.new_event_loop()

async def begin():
    f = await blockio.open(path, "r+b", buffering=0, engine=engine)
    tasks = []
    for call in (lambda: f.write(b"a" * 90), lambda: f.write(b"b" * 20), lambda: f.seek(5)):
        tasks.append(asyncio.ensure_future(call()))
        await asyncio.sleep(0)
    return f, tasks[1]

f, short = loop.run_until_complete(begin())
# (whether the short write's call took its result before the loop closed)
took = short.done() and not short.cancelled() and short.exception() is None
print(short.result() if took else "-")
loop.close()

async def after():
    try:
        first = await f.tell()
    except OSError as e:
        first = e.errno
    out = [first, await f.write(b"Z"), await f.tell()]
    await f.close()
    return out

print(*asyncio.run(after()))
engine.close()
"""


@BACKENDS
def test_a_seek_from_the_start_behind_a_short_write_stands_when_the_loop_closes(tmp_path, backend):
    """At ``RLIMIT_FSIZE``: a write that stops short, then a seek from the
    start, each begun in a task, and the loop closed. The next call raises
    the short write's ``EFBIG`` if nobody took it (its call, woken by the
    write's end before the loop closed, may have: it then returned its
    short count, as the built-in's, and nothing is raised), and either way
    the position is the seek's, not where the bytes stopped: the next
    write lands there, as the built-in's after its seek."""
    p = tmp_path / "f"
    p.write_bytes(b"")
    took, *out = _run_script(_SEEK_BEHIND_A_SHORT_WRITE, p, backend).split()
    if took == "-":
        assert out == ["27", "1", "6"]
    else:
        assert (took, out) == ("10", ["5", "1", "6"])
    assert p.read_bytes() == b"a" * 5 + b"Z" + b"a" * 84 + b"b" * 10


@BACKENDS
@LOOPS
def test_a_truncation_made_before_a_seeks_answer_is_placed_at_once(tmp_path, backend, new_loop):
    """Append mode: ``truncate()`` made while the answer of a seek from the
    end has not come does not wait for it: its ``ftruncate`` is placed in
    the file's write queue at once, at the position that seek's mark of
    the end gives, so a write made behind it (here once the seek has
    answered) lands after the cut even if the loop is closed at once."""
    p = tmp_path / "f"
    p.write_bytes(b"0123")

    async def main():
        f = await blockio.open(p, "ab", buffering=0, engine=e)
        ahead = [asyncio.ensure_future(f.write(b"A" * 10)), asyncio.ensure_future(f.seek(-4, 2))]
        asyncio.ensure_future(f.truncate())
        await asyncio.wait(ahead)
        asyncio.ensure_future(f.write(b"BBB"))
        await asyncio.sleep(0)
        return f

    with blockio.Engine(backend=backend) as e:
        f = _run(new_loop, main())
        assert _tell_and_close(new_loop, f) == 13
    assert p.read_bytes() == b"0123" + b"A" * 6 + b"BBB"


_APPEND_FLUSH_FAILS = r"""
import asyncio, os, resource, signal, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (120, resource.RLIM_INFINITY))

def r(x):
    return "E%s" % x.errno if isinstance(x, OSError) else x

def builtin():
    out = []
    with open(path, "wb") as g:
        g.write(b"5" * 51)
    g = open(path, "a+b")
    for call in (lambda: g.write(b"B" * 32), lambda: g.write(b"C" * 47), g.flush, g.tell, g.tell, g.tell, g.close):
        try:
            out.append(r(call()))
        except OSError as x:
            out.append(r(x))
    return out, os.path.getsize(path)

def mine():
    with open(path, "wb") as g:
        g.write(b"5" * 51)
    engine = blockio.Engine(backend=backend)

    async def calls(f):
        out = []
        for call in (lambda: f.write(b"B" * 32), lambda: f.write(b"C" * 47), f.flush, f.tell, f.tell, f.tell,
                     f.close):
            try:
                out.append(r(await call()))
            except OSError as x:
                out.append(r(x))
        return out

    async def main():
        f = await blockio.open(path, "a+b", engine=engine)
        return await calls(f)

    out = asyncio.run(main())
    engine.close()
    return out, os.path.getsize(path)

print(repr((builtin(), mine())))
"""


@BACKENDS
def test_tell_after_a_failed_append_flush_counts_the_kept_bytes_without_writing_them(tmp_path, backend):
    """Under ``RLIMIT_FSIZE`` 120, an ``a+b`` file holding 51 bytes:
    writes of 32 and 47 bytes are buffered, and their ``flush`` stops at
    the limit (``EFBIG``, 10 bytes kept). Each ``tell`` after it returns
    the end plus the bytes kept, as the built-in's (which counts them
    without writing them), where each raised ``EFBIG`` again, trying them
    again; ``close`` raises it once."""
    want, got = eval(_run_script(_APPEND_FLUSH_FAILS, tmp_path / "f", backend))
    assert got == want
    assert want == ([32, 47, "E27", 130, 130, 130, "E27"], 120)


_AWAITED_BEHIND_A_REBASING_SEEK = r"""
import asyncio, resource, signal, sys
import blockio
path, backend = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
ORDERS = {
    "seek-set": ([("write", b"a" * 90), ("write", b"b" * 20), ("seek", -5, 1), ("seek", 3, 0), ("write", b"x")],
                 [("write", b"yy"), ("tell",), ("seek", -2, 1), ("write", b"zz"), ("tell",)]),
    "seek-end-after-seek-set": ([("write", b"a" * 90), ("write", b"b" * 20), ("seek", -8, 1), ("seek", 2, 0),
                                 ("seek", -2, 2)], [("write", b"YY"), ("tell",)]),
    "failed-write": ([("write", b"a" * 90), ("write", b"b" * 20), ("seek", 5, 1), ("write", b"ccc")],
                     [("tell",), ("seek", -20, 1), ("write", b"zz"), ("tell",)]),
}
# (buffered: a seek behind a flush that stopped short is not answered from
# where the bytes stopped; the bytes written behind it are not made, as
# the built-in's, whose failed flush keeps them buffered)
BUFFERED = {
    "flush-then-seek-cur": [("write", b"a" * 90), ("flush",), ("write", b"b" * 20), ("flush",), ("seek", -5, 1),
                            ("write", b"ccc"), ("flush",)],
}

def r(x):
    return "E%s" % x.errno if isinstance(x, OSError) else x

def builtin(first, then, buffering=0):
    out = []
    f = open(path, "w+b", buffering=buffering)
    for name, *args in first + then:
        try:
            out.append(r(getattr(f, name)(*args)))
        except OSError as x:
            out.append(r(x))
    try:
        f.close()
    except OSError:
        pass  # (a buffered file's last flush, past the limit)
    return out, open(path, "rb").read()

async def safe(c):
    try:
        return r(await c)
    except OSError as x:
        return r(x)

async def ours(first, then, buffering=0):
    f = await blockio.open(path, "w+b", buffering=buffering, engine=engine)
    tasks = []
    for name, *args in first:
        tasks.append(asyncio.ensure_future(safe(getattr(f, name)(*args))))
        await asyncio.sleep(0)
    out = list(await asyncio.gather(*tasks))
    for name, *args in then:
        out.append(await safe(getattr(f, name)(*args)))
    try:
        await f.close()
    except OSError:
        pass
    return out, open(path, "rb").read()

engine = blockio.Engine(backend=backend)
for name, (first, then) in ORDERS.items():
    # (which of two orders the core meets them in varies from run to run)
    for _ in range(10):
        print(name, repr((builtin(first, then), asyncio.run(ours(first, then)))))
for name, first in BUFFERED.items():
    # (the file's bytes: each call's result is not the built-in's there)
    print(name, repr(((None, builtin(first, [], 8192)[1]), (None, asyncio.run(ours(first, [], 8192))[1]))))
engine.close()
"""


@BACKENDS
def test_calls_awaited_after_a_seek_placed_behind_a_short_write_end_as_the_builtins(tmp_path, backend):
    """Under ``RLIMIT_FSIZE`` 100 bytes, unbuffered: a write stops short,
    with a seek from the position and more calls begun behind it, all
    awaited together; then calls awaited one by one. A seek from the start
    after the one from the position leaves the writes after it where the
    program put them (not moved back by what never landed), a seek from
    the end after it goes from the built-in's end, and a write behind the
    seek that fails whole leaves the position where it was tried: each
    call's result and the file are the built-in's."""
    p = tmp_path / "f"
    for line in _run_script(_AWAITED_BEHIND_A_REBASING_SEEK, p, backend).splitlines():
        name, outcome = line.split(" ", 1)
        want, got = eval(outcome)
        assert got == want, name


_WRITES_LEFT_TO_THE_RUNNER = r"""
import asyncio, sys
import blockio
path, runner = sys.argv[1], sys.argv[2]

async def main():
    f = await blockio.open(path, "wb", buffering=0)
    for k in range(200):
        asyncio.ensure_future(f.write(b"%03d\n" % k))
    await asyncio.sleep(0)  # (the writes have begun; none is awaited)

(asyncio.run if runner == "asyncio" else blockio.run)(main())
"""


@BACKENDS
@pytest.mark.parametrize("runner", ["asyncio", "blockio"])
def test_writes_begun_in_tasks_a_program_never_awaits_land_in_order_unreported(tmp_path, backend, runner):
    """A program that begins 200 writes in tasks of its own and returns
    from its main without awaiting them, run by ``asyncio.run`` or
    ``blockio.run`` (which cancel the tasks left, then close the loop):
    every byte lands, in the order the writes began, and asyncio reports
    no task of it destroyed pending ("Task was destroyed but it is
    pending!") on the way out."""
    import subprocess
    import sys

    p = tmp_path / "f"
    out = subprocess.run([sys.executable, "-c", _WRITES_LEFT_TO_THE_RUNNER, str(p), runner],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "BLOCKIO_BACKEND": backend})
    assert out.returncode == 0, out.stderr
    assert "Task was destroyed but it is pending!" not in out.stderr, out.stderr
    assert out.stderr == "", out.stderr
    assert p.read_bytes() == b"".join(b"%03d\n" % k for k in range(200))
