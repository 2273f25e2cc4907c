"""Writes whose task is cancelled, or whose event loop ends, while they or
the bytes before them are on their way: bytes a ``write()`` accepted reach
the file; a write that was made is never cut short, nor is a
``writelines`` cut to a prefix of its list; and writes to a pipe reach it
whole and in the order they were made, as aiofiles' writes do. On both
backends, under asyncio and uvloop."""

import asyncio
import os
import threading

import pytest
import uvloop

import blockio

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
RUNNERS = pytest.mark.parametrize(
    "run", [pytest.param(asyncio.run, id="asyncio"), pytest.param(uvloop.run, id="uvloop")]
)


async def _cancel_after(call, turns):
    """Runs ``call`` as a task and cancels it after ``turns`` loop turns."""
    task = asyncio.ensure_future(call)
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


@BACKENDS
@RUNNERS
def test_bytes_accepted_survive_the_loop_ending_while_a_later_write_flushes_them(tmp_path, backend, run):
    # `main` returns at once: the run cancels the task of the second write
    # while it flushes the first write's bytes, and the task the flush runs
    # in, before that has started.
    p = tmp_path / "out"
    with blockio.Engine(backend=backend) as e:
        box = {}

        async def main():
            f = box["f"] = await blockio.open(p, "wb", engine=e)
            assert await f.write(b"A" * 5000) == 5000
            asyncio.get_running_loop().create_task(f.write(b"B" * 5000))

        async def close():
            await box["f"].close()

        run(main())
        run(close())
    data = p.read_bytes()
    assert data[:5000] == b"A" * 5000
    assert data[5000:] in (b"", b"B" * 5000)


@BACKENDS
@RUNNERS
@pytest.mark.parametrize("turns", [1, 2, 3, 4, 5, 8])
def test_a_write_cancelled_while_the_bytes_before_it_are_flushed_keeps_its_own(tmp_path, backend, run, turns):
    p = tmp_path / "out"

    async def main():
        async with blockio.open(p, "wb", engine=e) as f:
            await f.write(b"A" * 5000)
            # 10,000 bytes do not fit the 8 KiB buffer: the A's are
            # flushed first, then the B's written.
            await _cancel_after(f.write(b"B" * 5000), turns)

    with blockio.Engine(backend=backend) as e:
        run(main())
    assert p.read_bytes() == b"A" * 5000 + b"B" * 5000


@BACKENDS
@RUNNERS
@pytest.mark.parametrize("mode", ["wb", "w"])
@pytest.mark.parametrize("turns", [1, 2, 3, 5, 8, 20])
def test_a_cancelled_writelines_writes_all_or_nothing(tmp_path, backend, run, mode, turns):
    p = tmp_path / "out"
    records = [chr(65 + i) * 3000 for i in range(10)]
    lines = records if mode == "w" else [r.encode() for r in records]

    async def main():
        async with blockio.open(p, mode, engine=e) as f:
            await _cancel_after(f.writelines(lines), turns)

    with blockio.Engine(backend=backend) as e:
        run(main())
    assert p.read_bytes() in (b"", "".join(records).encode())


def _runs(data):
    """``data`` as (byte, run length) pairs."""
    out = []
    for b in data:
        if out and out[-1][0] == b:
            out[-1][1] += 1
        else:
            out.append([b, 1])
    return [(chr(b), n) for b, n in out]


@BACKENDS
def test_pipe_writes_given_up_by_wait_for_still_arrive_whole_and_in_order(backend):
    r, w = os.pipe()
    got = bytearray()

    def reader():
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            got.extend(chunk)

    async def main():
        f = await blockio.open(w, "wb", engine=e)
        # Each is 300,000 bytes into a pipe of 64 KiB that nobody reads
        # yet: none can finish, so every wait_for gives up.
        for c in b"ABC":
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(f.write(bytes([c]) * 300_000), 0.05)
        t = threading.Thread(target=reader)
        t.start()
        await f.write(b"Z" * 10)
        await f.close()
        return t

    with blockio.Engine(backend=backend) as e:
        t = asyncio.run(main())
    t.join(30)
    os.close(r)
    assert _runs(got) == [("A", 300_000), ("B", 300_000), ("C", 300_000), ("Z", 10)]


@BACKENDS
@RUNNERS
@pytest.mark.parametrize("buffering", [0, -1])
def test_a_cancelled_write_the_kernel_has_is_waited_for_however_long_it_takes(tmp_path, monkeypatch, backend, run,
                                                                             buffering):
    # With no grace period, a write is given up the moment its task is
    # cancelled, unless the kernel has it: then it is waited for to its
    # end, as long as it takes, or its bytes would land after the file's
    # next write, over it. Either way the position says what happened.
    monkeypatch.setattr("blockio._aio.CANCEL_GRACE", 0.0)
    monkeypatch.setattr("blockio._engine.CANCEL_GRACE", 0.0)
    p = tmp_path / "out"
    data = os.urandom(1 << 20) * 64

    async def main():
        async with blockio.open(p, "wb", buffering=buffering, engine=e) as f:
            await _cancel_after(f.write(data), 1)
            pos = await f.tell()
            await f.write(b"tail")
        return pos

    with blockio.Engine(backend=backend) as e:
        pos = run(main())
    assert pos in (0, len(data))
    assert p.read_bytes() == data[:pos] + b"tail"


@BACKENDS
@RUNNERS
def test_the_rest_of_a_cancelled_write_still_queued_a_second_later_is_withdrawn(monkeypatch, tmp_path, backend, run):
    # The kernel writes a part of a write and the task was cancelled
    # meanwhile (as with a write of more than 2 GiB, which the kernel
    # takes in two calls): the rest goes in a second write, which here
    # waits behind a read of an empty pipe holding the engine's one slot.
    # It is withdrawn once the grace period (none here) is over, the
    # cancellation is raised and the position is past the part that
    # landed; nothing more lands once the pipe read completes.
    monkeypatch.setattr("blockio._aio.CANCEL_GRACE", 0.0)
    monkeypatch.setattr("blockio._engine.CANCEL_GRACE", 0.0)
    from blockio._engine import _KeptCancel
    p = tmp_path / "out"
    data = os.urandom(1 << 20)
    half = len(data) // 2
    r, w = os.pipe()
    original = blockio.Engine._awrite_kept
    calls = []

    async def first_part_then_a_cancel(self, file, view, offset, cancelled=None, placed=None, follows=True):
        calls.append(cancelled)
        if len(calls) > 1:
            return await original(self, file, view, offset, cancelled, placed, follows)
        n = await original(self, file, view[:half], offset, None, placed, follows)
        # (a batch: an aread of a stream waits in the loop's poll, holding no slot)
        box["read"] = asyncio.ensure_future(self.aread_batch(r, offsets=[0], length=10))
        for _ in range(3):
            await asyncio.sleep(0)
        raise _KeptCancel(n, asyncio.CancelledError())

    monkeypatch.setattr(blockio.Engine, "_awrite_kept", first_part_then_a_cancel)
    box = {}

    async def main():
        async with blockio.open(p, "wb", buffering=0, engine=e) as f:
            try:
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(f.write(data)), 20)  # (TimeoutError if it hangs)
                box["tell"] = await f.tell()
            finally:
                os.write(w, b"x")
            assert await box["read"] == [b"x"]
            await f.write(b"tail")

    try:
        with blockio.Engine(backend=backend, queue_depth=1) as e:
            run(main())
    finally:
        os.close(r)
        os.close(w)
    assert isinstance(calls[1], asyncio.CancelledError)  # the rest knew of the cancellation
    assert calls[2:] == [None]  # ("tail")
    assert box["tell"] == half
    assert p.read_bytes() == data[:half] + b"tail"


def test_a_batch_no_longer_pending_is_never_called_withdrawn():
    # (Finished and drained by another loop, its results on their way:
    # the write's caller must wait for them, not take it as never done.)
    with blockio.Engine() as e:
        assert e._core.withdraw(123456789) is False


TRIALS = 200


async def _cancel_every_task(wait):
    """The usual shutdown of a program: every task but this one is
    cancelled (``asyncio.all_tasks()``, blockio's own included, were there
    any), then awaited, or left to the end of the run."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    if wait:
        await asyncio.gather(*tasks, return_exceptions=True)


@BACKENDS
@RUNNERS
@pytest.mark.parametrize("wait", [True, False], ids=["gathered", "left-to-the-run"])
def test_writes_begun_when_every_task_is_cancelled_all_land_in_order(tmp_path, backend, run, wait):
    """The usual shutdown pattern: on a ``buffering=0`` file, tasks
    begin their writes (each task has run up to its write's first await:
    the first write is in the engine, the others wait their turn in the
    file's queue), then the program cancels every task of the loop and
    ends. Each write begun lands, in the order made, and ``tell()`` in the
    next loop is past them all, in every trial. (A write that ran in a
    task of blockio's own was cancelled with the others before it ran:
    lost, and the next write landed in its place.)"""
    with blockio.Engine(backend=backend) as e:
        for trial in range(TRIALS):
            p = tmp_path / f"out{trial}"
            records = [b"%03d:%04d\n" % (k, trial) for k in range(4)]
            box = {}

            async def main():
                f = box["f"] = await blockio.open(p, "wb", buffering=0, engine=e)
                for r in records:
                    asyncio.ensure_future(f.write(r))
                await asyncio.sleep(0)  # (each task runs to its write's first await)
                await _cancel_every_task(wait)

            async def after():
                f = box["f"]
                at = await f.tell()
                await f.close()
                return at

            run(main())
            assert run(after()) == sum(map(len, records)), trial
            assert p.read_bytes() == b"".join(records), trial


@BACKENDS
@pytest.mark.parametrize("cancelled", [0, 1])
def test_a_cancelled_write_with_writes_queued_behind_it_is_kept(monkeypatch, tmp_path, backend, cancelled):
    # Three writes wait in the file's write queue (the first for the
    # engine's one slot, held by a read of an empty pipe); the first or
    # the second is cancelled, and its grace period (none here) is over
    # before the slot frees. It is not taken back: the writes behind it
    # were planned after its bytes, and would land past a hole, or be
    # refused as if it had failed. It runs, as a write the kernel has
    # does, and its call raises the cancellation once it has landed.
    monkeypatch.setattr("blockio._aio.CANCEL_GRACE", 0.0)
    monkeypatch.setattr("blockio._engine.CANCEL_GRACE", 0.0)
    p = tmp_path / "out"
    records = [bytes([65 + k]) * 1000 for k in range(3)]
    r, w = os.pipe()

    async def main():
        async with blockio.open(p, "wb", buffering=0, engine=e) as f:
            read = asyncio.ensure_future(e.aread_batch(r, offsets=[0], length=10))
            await asyncio.sleep(0)
            writes = [asyncio.ensure_future(f.write(rec)) for rec in records]
            for _ in range(3):
                await asyncio.sleep(0)
            writes[cancelled].cancel()
            for _ in range(3):
                await asyncio.sleep(0)  # (the cancelled call's withdrawal, refused)
            os.write(w, b"x")
            assert await read == [b"x"]
            got = await asyncio.gather(*writes, return_exceptions=True)
            assert isinstance(got[cancelled], asyncio.CancelledError), got
            assert [g for k, g in enumerate(got) if k != cancelled] == [1000, 1000], got
            assert await f.tell() == 3000

    try:
        with blockio.Engine(backend=backend, queue_depth=1) as e:
            asyncio.run(main())
    finally:
        os.close(r)
        os.close(w)
    assert p.read_bytes() == b"".join(records)
