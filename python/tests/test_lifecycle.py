"""Engines across loops, threads, forks, signals and close: every
operation completes or raises, and nothing hangs. Calls that would hang
run in a child process or thread under a generous watchdog; no test
asserts how long anything takes."""

import asyncio
import errno
import gc
import multiprocessing
import os
import random
import select
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

import blockio
import loops as loop_kinds
from waits import await_until, blocked_in, waits_for_bytes

WATCHDOG = 120  # seconds: far beyond any run that works
#: How long a parent waits for a forked child (seconds, within WATCHDOG).
CHILD_DEADLINE = 60


LOOPS = pytest.mark.parametrize("loop_factory", list(loop_kinds.FACTORIES.values()), ids=loop_kinds.NAMES)


def run_child(code, cwd, env=None):
    """Runs ``code`` in a new interpreter; its exit status and output."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=WATCHDOG, cwd=cwd, env={**os.environ, **(env or {})})
    return out.returncode, out.stdout + out.stderr


@LOOPS
@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_one_engine_serves_loops_in_several_threads(data_file, loop_factory, backend, tmp_path):
    """Point 4: loops in four threads share one engine (and the default
    engine through blockio.open); every read and write completes."""
    path, data = data_file
    engine = blockio.Engine(backend=backend)
    failures = []

    def worker(k):
        async def main():
            for i in range(30):
                off = (k * 7919 + i * 4093) % (len(data) - 4096)
                assert await engine.aread(path_fd, offset=off, length=4096) == data[off:off + 4096]
                async with blockio.open(path, "rb") as f:
                    await f.seek(off)
                    assert await f.read(100) == data[off:off + 100]
                async with blockio.open(tmp_path / f"out{k}", "ab", engine=engine) as f:
                    await f.write(b"x")

        loop = loop_factory()
        try:
            loop.run_until_complete(main())
        except BaseException as e:  # reported by the main thread
            failures.append(repr(e))
        finally:
            loop.close()

    path_fd = os.open(path, os.O_RDONLY)
    try:
        for _round in range(3):
            threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(4)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + WATCHDOG
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            assert not any(t.is_alive() for t in threads), "a loop sharing the engine hung"
            assert not failures, failures
        for k in range(4):
            assert (tmp_path / f"out{k}").read_bytes() == b"x" * 90
    finally:
        os.close(path_fd)
        engine.close()


def test_a_loop_closed_with_a_read_in_flight_does_not_break_the_next(data_file):
    """Point 5: a loop is closed while its task awaits a pipe read; the read
    completes in the same wake-up as a read of the next loop, which gets
    its result."""
    path, data = data_file
    e = blockio.Engine()
    r, w = os.pipe()
    try:
        first = asyncio.new_event_loop()

        async def leave_a_read_in_flight():
            first.create_task(e.aread(r, offset=0, length=5))
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        first.run_until_complete(leave_a_read_in_flight())
        first.close()

        async def main():
            with open(path, "rb") as f:
                os.write(w, b"hello")  # the old loop's read completes
                time.sleep(0.2)  # (its completion waits in the eventfd)
                task = asyncio.ensure_future(e.aread(f, offset=4096, length=4096))
                # After the task's first step (which submits the read) and
                # before the loop looks at the eventfd: the new read
                # completes too, so one wake-up brings both.
                asyncio.get_running_loop().call_soon(time.sleep, 0.2)
                return await asyncio.wait_for(task, WATCHDOG)

        assert asyncio.run(main()) == data[4096:8192]
    finally:
        e.close()
        os.close(r)
        os.close(w)


def leave_a_call_pending(loop, make_call, waits):
    """Starts ``make_call()`` as a task of ``loop``, runs the loop until the
    call waits (``waits()`` is true), and stops the loop with the call
    still in progress; the task, abandoned (see ``loops.abandon``: it is
    left pending on purpose, never to run again once the loop is closed)."""
    task = loop.create_task(make_call())
    loop.run_until_complete(await_until(waits, "the call waits"))
    assert not task.done()
    task._log_destroy_pending = False
    return task


@LOOPS
def test_a_call_abandoned_by_a_closed_loop_raises_rather_than_hangs(loop_factory, tmp_path):
    """A file's read is in progress when its loop is closed (the task kept,
    not cancelled, so the call never ends). On the next loop, a read raises
    RuntimeError saying why, as aiofiles' read of a file of a closed loop
    does, where it waited for ever; close closes the file."""
    r, w = os.pipe()
    theirs = None
    try:
        first = loop_factory()
        f = first.run_until_complete(blockio.open(r, "rb", buffering=0, closefd=False))
        import aiofiles

        theirs = first.run_until_complete(aiofiles.open(r, "rb", buffering=0, closefd=False))
        # (aiofiles' first: its thread's read then waits in the kernel, on
        # the blocking descriptor that uvloop's reader for ours makes
        # non-blocking while it waits)
        kept_theirs = leave_a_call_pending(first, lambda: theirs.read(10), lambda: blocked_in("read", r))
        kept = [leave_a_call_pending(first, lambda: f.read(10), lambda: waits_for_bytes(r)), kept_theirs]
        del kept_theirs
        first.close()
        os.write(w, b"hello")

        async def main():
            for file in (f, theirs):
                with pytest.raises(RuntimeError) as raised:
                    await asyncio.wait_for(file.read(10), WATCHDOG)
                if file is f:
                    assert "event loop was closed" in str(raised.value)
            with pytest.raises(RuntimeError, match="the file is closed, but a call on it never ended"):
                await asyncio.wait_for(f.close(), WATCHDOG)
            assert f.closed
            await f.close()  # (once said)
            with pytest.raises(ValueError):
                await f.read(1)

        second = loop_factory()
        try:
            second.run_until_complete(main())
        finally:
            second.close()
        # Collected now that close took the queue from it, the abandoned
        # call's coroutine ends without handing the queue on a second time.
        os.write(w, b"hello")  # (the second of the two reads gets these)
        ours = weakref.ref(kept[0])
        del kept
        for _ in range(WATCHDOG * 10):  # until its read's thread lets go
            gc.collect()
            if ours() is None:
                break
            time.sleep(0.1)
        assert ours() is None
        assert f._calls.free == [None]
    finally:
        os.close(r)
        os.close(w)


@LOOPS
def test_a_write_abandoned_by_a_closed_loop_still_arrives_whole(loop_factory):
    """A write blocked on a full pipe when its loop is closed: later writes
    raise RuntimeError, close does not wait for it, and the reader still
    gets every byte the write was given, once, in order."""
    r, w = os.pipe()
    try:
        size = 1 << 20
        data = bytes(random.Random(7).randbytes(size))
        first = loop_factory()
        f = first.run_until_complete(blockio.open(w, "wb", buffering=0, closefd=False))
        kept = leave_a_call_pending(first, lambda: f.write(data), lambda: blocked_in("write", w))
        first.close()

        async def main():
            with pytest.raises(RuntimeError, match="event loop was closed"):
                await asyncio.wait_for(f.write(b"more"), WATCHDOG)
            with pytest.raises(RuntimeError, match="may not have reached the file"):
                await asyncio.wait_for(f.close(), WATCHDOG)

        second = loop_factory()
        try:
            second.run_until_complete(main())
        finally:
            second.close()
        got = bytearray()
        while len(got) < size:
            got += os.read(r, size)
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # nothing after it
        assert bytes(got) == data and kept is not None
    finally:
        os.close(r)
        os.close(w)


@LOOPS
def test_a_call_of_a_loop_that_is_only_stopped_raises_and_can_still_end(loop_factory):
    """A read is in progress on a loop that is stopped, not closed; a call
    from another loop of the same thread raises RuntimeError (waiting would
    hang: the first loop cannot run meanwhile). Run again, the first loop
    finishes its read, and the file works on."""
    r, w = os.pipe()
    try:
        first = loop_factory()
        f = first.run_until_complete(blockio.open(r, "rb", buffering=0, closefd=False))
        pending = leave_a_call_pending(first, lambda: f.read(10), lambda: waits_for_bytes(r))

        async def meanwhile():
            with pytest.raises(RuntimeError, match="another event loop of this thread"):
                await asyncio.wait_for(f.read(10), WATCHDOG)

        second = loop_factory()
        try:
            second.run_until_complete(meanwhile())
        finally:
            second.close()
        os.write(w, b"hello")
        try:
            assert first.run_until_complete(asyncio.wait_for(pending, WATCHDOG)) == b"hello"
            os.write(w, b"again")
            assert first.run_until_complete(f.read(10)) == b"again"
            first.run_until_complete(f.close())
        finally:
            first.close()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("call", ["write", "flush", "read"])
def test_close_says_so_when_a_write_abandoned_by_a_closed_loop_may_not_have_landed(tmp_path, call):
    """A call on a regular file whose loop was stopped once it had started,
    then closed. A write (unbuffered) or a ``flush()`` of bytes write()
    accepted (buffered): its bytes were in the file's write queue in the
    core before it first yielded, so they land although the call never
    runs on, and close succeeds. A ``read()``, which is not placed in that
    queue (it flushes the bytes buffered before it, then reads): close,
    which closes the file, raises RuntimeError saying that what the call
    was writing may not have reached the file rather than return as if all
    were written."""
    p = tmp_path / "f"
    first = asyncio.new_event_loop()
    # (O_DSYNC: a buffered file's flush goes to the engine, also with
    # BLOCKIO_INLINE_WRITES=1, where one may be made on the loop's thread
    # and never yield)
    f = first.run_until_complete(blockio.open(p, "w+b", buffering=0 if call == "write" else -1,
                                              opener=lambda path, flags: os.open(path, flags | os.O_DSYNC, 0o666)))
    if call == "write":
        task = first.create_task(f.write(b"accepted\n"))
    else:
        assert first.run_until_complete(f.write(b"accepted\n")) == 9
        task = first.create_task(f.flush() if call == "flush" else f.read())
    first.call_soon(first.stop)
    first.run_forever()  # (one step: the call starts)
    assert not task.done()
    first.close()

    async def main():
        if call == "read":
            with pytest.raises(RuntimeError, match="may not have reached the file"):
                await asyncio.wait_for(f.close(), WATCHDOG)
        else:
            await asyncio.wait_for(f.close(), WATCHDOG)
        assert f.closed

    asyncio.run(main())
    if call != "read":
        assert p.read_bytes() == b"accepted\n"


@LOOPS
def test_closing_a_text_file_after_a_call_abandoned_by_a_closed_loop_closes_it(loop_factory):
    """As the binary file: the text file's close takes the queue over from
    the abandoned readline, closes, and then says what happened."""
    r, w = os.pipe()
    try:
        first = loop_factory()
        f = first.run_until_complete(blockio.open(r, "r", closefd=False))
        kept = leave_a_call_pending(first, f.readline, lambda: waits_for_bytes(r))
        first.close()

        async def main():
            with pytest.raises(RuntimeError, match="event loop was closed"):
                await asyncio.wait_for(f.readline(), WATCHDOG)
            with pytest.raises(RuntimeError, match="the file is closed"):
                await asyncio.wait_for(f.close(), WATCHDOG)
            assert f.closed

        second = loop_factory()
        try:
            second.run_until_complete(main())
        finally:
            second.close()
        assert kept is not None
    finally:
        os.close(w)  # (ends the abandoned read's thread)
        os.close(r)


@pytest.mark.parametrize("first_loop", ["closed", "stopped"])
def test_a_trio_call_behind_an_asyncio_call_that_cannot_end_raises_rather_than_hangs(first_loop):
    """A trio run after an asyncio loop left a call in progress (closed, or
    only stopped): trio's call raises RuntimeError, as another asyncio
    loop's does, where it waited for ever."""
    import trio

    r, w = os.pipe()
    try:
        first = asyncio.new_event_loop()
        f = first.run_until_complete(blockio.open(r, "rb", buffering=0, closefd=False))
        kept = leave_a_call_pending(first, lambda: f.read(10), lambda: waits_for_bytes(r))
        if first_loop == "closed":
            first.close()

        async def main():
            with trio.fail_after(WATCHDOG):
                with pytest.raises(RuntimeError, match="event loop was closed" if first_loop == "closed"
                                   else "another event loop of this thread"):
                    await f.read(10)

        trio.run(main)
        if first_loop == "stopped":
            os.write(w, b"hello")
            assert first.run_until_complete(asyncio.wait_for(kept, WATCHDOG)) == b"hello"
            first.run_until_complete(f.close())
            first.close()
    finally:
        os.close(r)
        os.close(w)


def test_a_call_abandoned_by_a_closed_loop_of_a_finished_thread_is_reported_as_such():
    """The call's thread ended after closing its loop: the main thread's
    calls say the call never ended, not that another thread is using the
    file (which could never stop)."""
    r, w = os.pipe()
    box = {}

    def worker():
        loop = asyncio.new_event_loop()
        box["f"] = loop.run_until_complete(blockio.open(r, "rb", buffering=0, closefd=False))
        box["kept"] = leave_a_call_pending(loop, lambda: box["f"].read(10), lambda: waits_for_bytes(r))
        loop.close()

    try:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        f = box["f"]

        async def main():
            with pytest.raises(RuntimeError, match="event loop was closed"):
                await asyncio.wait_for(f.read(1), WATCHDOG)
            with pytest.raises(RuntimeError, match="the file is closed"):
                await asyncio.wait_for(f.close(), WATCHDOG)

        asyncio.run(main())
    finally:
        os.close(w)
        os.close(r)


def test_a_call_on_a_closed_file_leaves_the_callers_descriptor_alone(tmp_path):
    """closefd=False: close leaves the descriptor at the file's position,
    as the built-in's does; a call refused afterwards (the file is closed)
    never moves it again, where it moved it back over the caller's seek."""
    p = tmp_path / "f"
    p.write_bytes(bytes(100))
    fd = os.open(p, os.O_RDONLY)
    try:
        async def main():
            f = await blockio.open(fd, "rb", closefd=False)
            await f.read(10)
            await f.close()
            assert os.lseek(fd, 0, os.SEEK_CUR) == 10
            os.lseek(fd, 50, os.SEEK_SET)
            for call in (f.tell, f.read, f.flush):
                with pytest.raises(ValueError):
                    await call()
            return os.lseek(fd, 0, os.SEEK_CUR)

        assert asyncio.run(main()) == 50
    finally:
        os.close(fd)


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_close_resolves_every_pending_future(data_file, backend):
    """Point 6 (and 8: close does not hang on reads that never complete):
    tasks awaiting pipe reads and file reads when close() is called all
    resolve: the file reads with their data (or the cancellation error),
    the pipe reads with OSError(ECANCELED) naming close."""
    path, _ = data_file
    code, out = run_child(f"""
        import asyncio, errno, os, blockio
        e = blockio.Engine(backend={backend!r})
        r, w = os.pipe()
        f = open({str(path)!r}, "rb")
        data = f.read()

        async def main():
            pipe = [asyncio.ensure_future(e.aread(r, offset=0, length=10)) for _ in range(16)]
            files = [asyncio.ensure_future(e.aread(f, offset=i * 4096, length=4096)) for i in range(16)]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            e.close()
            res = await asyncio.wait_for(asyncio.gather(*pipe, *files, return_exceptions=True), 60)
            for x in res[:16]:
                if {backend!r} == "threads":  # pread on a pipe: ESPIPE at once
                    assert isinstance(x, OSError) and x.errno in (errno.ECANCELED, errno.ESPIPE), repr(x)
                else:
                    assert isinstance(x, OSError) and x.errno == errno.ECANCELED, repr(x)
                    assert "close" in str(x), str(x)
            for i, x in enumerate(res[16:]):
                assert x == data[i * 4096:(i + 1) * 4096] or (isinstance(x, OSError) and x.errno == errno.ECANCELED)
            print("resolved", len(res))

        asyncio.run(main())
    """, cwd=path.parent)
    assert code == 0 and "resolved 32" in out, out


def test_close_cut_short_by_a_signal_still_resolves_every_future(tmp_path):
    """Point 6 with point 8: a signal handler that raises while close()
    waits for pipe reads stops the wait (close raises its exception), and
    every task awaiting the engine is still resolved, with ECANCELED."""
    code, out = run_child("""
        import asyncio, errno, os, signal, blockio

        class Stop(Exception):
            pass

        def stop(*_):
            raise Stop()

        e = blockio.Engine(backend="uring")
        r, w = os.pipe()

        async def main():
            # (batches: an aread of a stream waits in the loop's poll, not in the engine)
            reads = [asyncio.ensure_future(e.aread_batch(r, offsets=[0], length=10)) for _ in range(8)]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            signal.signal(signal.SIGALRM, stop)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            try:
                e.close()
            except Stop:
                print("close interrupted")
            res = await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), 60)
            assert all(isinstance(x, OSError) and x.errno == errno.ECANCELED for x in res), res
            print("resolved", len(res))

        asyncio.run(main())
    """, cwd=tmp_path)
    assert code == 0 and "close interrupted" in out and "resolved 8" in out, out


def test_close_and_exit_do_not_hang_on_a_pipe_read_in_flight(tmp_path):
    """Point 8: interpreter exit (which closes every engine) with a pipe
    read in flight that nothing will ever complete."""
    code, out = run_child("""
        import asyncio, os, blockio
        r, w = os.pipe()
        e = blockio.Engine()

        async def main():
            asyncio.get_running_loop().create_task(e.aread(r, offset=0, length=10))
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        loop = asyncio.new_event_loop()
        loop.run_until_complete(main())
        print("exiting")
    """, cwd=tmp_path)
    assert code == 0 and "exiting" in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("reader", ["os", "pipe", "read_batch", "read_files"])
def test_exit_with_daemon_threads_in_synchronous_calls_exits_cleanly(tmp_path, backend, reader):
    """F-18: daemon threads inside read_batch / read_files when the program
    ends (a data loader) let the interpreter exit with status 0, as daemon
    threads in os.pread (reader "os", the reference) do: no abort, no crash."""
    (tmp_path / "data").write_bytes(os.urandom(4 << 20))
    code, out = run_child(f"""
        import os, threading, blockio
        e = blockio.Engine(backend={backend!r})
        fd = os.open("data", os.O_RDONLY)
        r, w = os.pipe()
        started = threading.Semaphore(0)

        def loader():
            started.release()
            while True:
                if {reader!r} == "os":
                    for off in range(0, 4 << 20, 1 << 20):
                        os.pread(fd, 1 << 20, off)
                elif {reader!r} == "pipe":
                    e.read_batch(r, offsets=[0], length=10)
                elif {reader!r} == "read_batch":
                    e.read_batch(fd, offsets=list(range(0, 4 << 20, 1 << 20)), length=1 << 20)
                else:
                    e.read_files(["data", "data"])

        for _ in range(4):
            threading.Thread(target=loader, daemon=True).start()
        for _ in range(4):
            started.acquire()
        print("exiting")
    """, cwd=tmp_path)
    assert code == 0 and "exiting" in out, (code, out)


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("call", ["read_batch", "readinto_batch"])
def test_sigint_interrupts_a_batch_blocked_on_an_empty_pipe(tmp_path, backend, call):
    """Point 8: Ctrl-C stops a synchronous batch waiting on an empty pipe
    with KeyboardInterrupt, as it stops os.read."""
    code, out = run_child(f"""
        import os, signal, threading, blockio
        e = blockio.Engine(backend={backend!r})
        r, w = os.pipe()
        # Python leaves SIGINT ignored when it starts with it ignored (a
        # job started in the background by a non-interactive shell); the
        # test is about the handler Python installs, so install it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            if {call!r} == "read_batch":
                e.read_batch(r, offsets=[0], length=10)
            else:
                e.readinto_batch([(r, bytearray(10), 0)])
        except KeyboardInterrupt:
            print("interrupted")
        else:
            print("not interrupted")
    """, cwd=tmp_path)
    assert code == 0 and "interrupted" in out and "not interrupted" not in out, out


def test_a_forked_child_gets_a_new_default_engine(data_file):
    """Point 9: blockio.open works in a child forked after the parent used
    the default engine."""
    path, data = data_file

    async def head():
        async with blockio.open(path, "rb") as f:
            return await f.read(1000)

    assert asyncio.run(head()) == data[:1000]
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            code = 0 if asyncio.run(head()) == data[:1000] else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("backend", ["auto", "threads"])
@pytest.mark.parametrize("how", ["exit", "with"])
@pytest.mark.parametrize("fork", ["os.fork", "libc.fork"])
def test_a_forked_child_that_exits_normally_forgets_the_parents_engines(data_file, tmp_path, backend, how, fork):
    """A child forked after the parent used an engine (its own, and the
    default one through blockio.open) and exits normally, running the
    exit hooks: the inherited engines are forgotten, with nothing on
    stderr, where the exit hook's close raised "created before fork()".
    The same for a child that leaves the engine's ``with`` block, and for
    a child forked by C code (``fork()`` called through ctypes), which
    runs none of Python's fork hooks."""
    path, _ = data_file
    code, out = run_child(f"""
        import asyncio, ctypes, os, sys
        import blockio

        libc = ctypes.CDLL(None, use_errno=True)

        async def use(e):
            async with blockio.open({str(path)!r}, "rb") as f:
                await f.read(10)
            fd = os.open({str(path)!r}, os.O_RDONLY)
            await e.aread(fd, offset=0, length=10)
            os.close(fd)

        with blockio.Engine() as e:
            asyncio.run(use(e))
            pid = {fork}()
            if pid == 0 and {how!r} == "exit":
                sys.exit(0)  # (the exit hooks run)
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """, cwd=tmp_path, env={"BLOCKIO_BACKEND": backend} if backend == "threads" else None)
    assert code == 0 and out == "child 0\n", out


#: What the child of the fork in the middle of writes does, on which loop:
#: returns (asyncio.run's end cancels the writes), awaits the writes, or
#: waits with its loop running until the parent's writes have landed, then
#: awaits them (not on blockio's loop on io_uring, whose ring a child
#: cannot wait on). Not on uvloop: libuv batches its epoll_ctl calls
#: through an io_uring whose queue the child shares with the parent, so a
#: uvloop run or closed in a forked child aborts one of the two now and
#: then (about one run in twenty here, a program of uvloop alone too:
#: "uv__epoll_ctl_flush: Assertion `*ctl->sqhead == *ctl->sqtail'").
FORKED_CHILDREN = [(child, name) for child in ("returns", "awaits") for name in loop_kinds.NAMES
                   if name != "uvloop"] + [("waits", "asyncio"), ("waits", "blockio-epoll")]


@pytest.mark.parametrize("child, loop_name", FORKED_CHILDREN, ids=["-".join(c) for c in FORKED_CHILDREN])
@pytest.mark.parametrize("backend", ["auto", "threads"])
def test_a_forked_child_ends_the_writes_its_parent_had_in_flight(tmp_path, loop_name, backend, child):
    """A coroutine forks while sixteen writes of a file, each in a task,
    are in flight on the engine, whose threads or ring only the parent
    has. In the child, each fails at once with RuntimeError saying it
    belongs to the parent process (a child that awaits them gets that),
    and a child that returns ends through asyncio.run's cancellation of
    the tasks left, which end cancelled: either exits 0, with nothing on
    stderr. The parent's writes all land, in order, and the child writes
    none of them; its loop running meanwhile (which shares the parent's
    epoll instance and sees the engine's eventfd) takes none of the
    parent's wake-ups. The parent waits for the child at most
    CHILD_DEADLINE seconds (its pidfd), then kills it and says so."""
    code, out = run_child(f"""
        import asyncio, os, select, signal, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import blockio, loops

        SIZE = 1 << 18
        landed_r, landed_w = os.pipe()

        async def parent():
            f = await blockio.open("out", "wb", buffering=0)
            tasks = [asyncio.create_task(f.write(bytes([65 + i]) * SIZE)) for i in range(16)]
            await asyncio.sleep(0)  # (each task hands its write to the engine)
            loop = asyncio.get_running_loop()  # (which the child is not told)
            pid = os.fork()
            if pid == 0:
                if {child!r} == "waits":
                    landed = loop.create_future()
                    loop.add_reader(landed_r, landed.set_result, None)
                    await landed
                    loop.remove_reader(landed_r)
                if {child!r} != "returns":
                    got = await asyncio.gather(*tasks, return_exceptions=True)
                    print("child:", len(got), {{repr(e) for e in got}}, flush=True)
                return None  # (asyncio.run's end cancels the tasks left)
            await asyncio.gather(*tasks)
            await f.close()
            os.write(landed_w, b"x")
            return pid

        with asyncio.Runner(loop_factory=loops.FACTORIES[{loop_name!r}]) as r:
            pid = r.run(parent())
        if pid is None:
            sys.exit(0)  # the child (the exit hooks run)
        pidfd = os.pidfd_open(pid)
        if not select.select([pidfd], [], [], {CHILD_DEADLINE})[0]:
            os.kill(pid, signal.SIGKILL)
            print("the child hung")
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        with open("out", "rb") as f:
            print("parent's file", f.read() == b"".join(bytes([65 + i]) * SIZE for i in range(16)))
    """, cwd=tmp_path, env={"BLOCKIO_BACKEND": backend} if backend == "threads" else None)
    parents = repr(RuntimeError(blockio._engine._PARENTS))
    awaited = f"child: 16 {{{parents!r}}}\n" if child != "returns" else ""
    assert code == 0 and out == awaited + "child exit 0\nparent's file True\n", out
    assert "belongs to the parent process" in parents


@pytest.mark.parametrize("kind", ["pipe", "file"])
def test_a_forked_child_closes_what_it_inherited_writing_what_it_buffered(tmp_path, kind):
    """A file opened before fork(): the child's close writes what the child
    buffered and closes the child's descriptor, as the built-in file's
    close does, where it raised (the parent's engine) and kept the
    descriptor, so a pipe's reader never saw its end while the child
    lived. The child's other calls that need the engine raise."""
    if kind == "pipe":
        r, w = os.pipe()
        target = w
    else:
        r = None
        target = str(tmp_path / "f")

    async def opened():
        f = await blockio.open(target, "wb")
        await f.write(b"parent\n")
        await f.flush()
        return f

    f = asyncio.run(opened())
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            async def child():
                await f.write(b"child\n")  # (buffered)
                await f.close()
                return f.closed

            code = 0 if asyncio.run(child()) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    asyncio.run(f.close())
    if kind == "pipe":
        got = b""
        while True:  # both ends closed: the end comes
            part = os.read(r, 100)
            if not part:
                break
            got += part
        os.close(r)
        assert got == b"parent\nchild\n"
    else:
        assert (tmp_path / "f").read_bytes() == b"parent\nchild\n"


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_forked_childs_calls_on_an_inherited_file_name_the_fork_with_bytes_buffered(tmp_path, backend):
    """A file opened before fork() whose child has buffered bytes: the
    child's calls that flush them (flush, seek, read, truncate, a write
    past the buffer) raise the fork's RuntimeError, as the same calls do
    with nothing buffered, where they said "the engine is closed" (the
    program closed no engine); close() still writes the bytes."""
    engine = blockio.Engine(backend=backend)
    path = tmp_path / "f"

    async def opened():
        f = await blockio.open(path, "w+b", engine=engine)
        await f.write(b"parent\n")
        await f.flush()
        return f

    f = asyncio.run(opened())
    back_r, back_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            async def child():
                said = []
                for call in (f.flush, lambda: f.seek(0), f.read, lambda: f.truncate(3),
                             lambda: f.write(b"y" * 100_000)):
                    await f.write(b"child\n")  # (buffered)
                    try:
                        await call()
                        said.append("no error")
                    except RuntimeError as e:
                        said.append(str(e))
                await f.close()
                return said

            said = asyncio.run(child())
            os.write(back_w, repr(said).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(back_w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(back_r, "rb") as r:
        said = eval(r.read())
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(said) == 5 and all("before fork()" in s for s in said), said
    asyncio.run(f.close())
    engine.close()
    assert path.read_bytes() == b"parent\n" + b"child\n" * 5


def test_a_forked_child_reads_a_pipe_whose_parent_left_a_read_running():
    """A read cancelled in the parent is left running on a thread (its
    bytes are the file's next read); the child, which has no such thread,
    reads the pipe anew rather than wait for it for ever. The two reads
    share what the pipe gets, as two processes' reads of one pipe do."""
    r, w = os.pipe()
    back_r, back_w = os.pipe()
    loop = asyncio.new_event_loop()
    try:
        f = loop.run_until_complete(blockio.open(r, "rb", buffering=0, closefd=False))

        async def leave_a_read_running():
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(f.read(5), 0.1)  # (nothing written yet)

        loop.run_until_complete(leave_a_read_running())
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.write(w, b"helloworld")
                got = asyncio.run(asyncio.wait_for(f.read(5), WATCHDOG))
                os.write(back_w, got)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        child = os.read(back_r, 100)
        parent = loop.run_until_complete(asyncio.wait_for(f.read(5), WATCHDOG))
        assert sorted([child, parent]) == [b"hello", b"world"]
        loop.run_until_complete(f.close())
    finally:
        loop.close()
        for fd in (r, w, back_r, back_w):
            os.close(fd)


def _pool_head(path):
    async def head():
        async with blockio.open(path, "rb") as f:
            return await f.read(10)

    return asyncio.run(head())


def test_multiprocessing_fork_pool_workers_use_blockio_open(data_file):
    path, data = data_file
    assert _pool_head(path) == data[:10]  # the parent's default engine exists
    with multiprocessing.get_context("fork").Pool(2) as pool:
        res = pool.map_async(_pool_head, [path] * 4)
        assert res.get(WATCHDOG) == [data[:10]] * 4


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_errors_name_the_callers_descriptor(tmp_path, backend):
    """Point 12: an asynchronous operation's error names the caller's
    descriptor, not the duplicate it ran on."""
    e = blockio.Engine(backend=backend)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)

    async def main():
        with pytest.raises(OSError) as ei:
            await e.aread(fd, offset=0, length=10)
        assert ei.value.errno == errno.EISDIR
        assert f"fd {fd} " in str(ei.value), str(ei.value)

    try:
        asyncio.run(main())
    finally:
        os.close(fd)
        e.close()


#: A seccomp filter (x86-64) that makes io_uring_setup fail with EPERM, as
#: kernel.io_uring_disabled=2 or a container's profile does.
DENY_IO_URING = """
import ctypes, platform
assert platform.machine() == "x86_64"
class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
EPERM, IO_URING_SETUP, AUDIT_ARCH_X86_64 = 1, 425, 0xC000003E
prog = (Filter * 6)(
    Filter(0x20, 0, 0, 4),                      # ld arch
    Filter(0x15, 1, 0, AUDIT_ARCH_X86_64),      # jeq x86-64: go on
    Filter(0x06, 0, 0, 0x7FFF0000),             # ret allow
    Filter(0x20, 0, 0, 0),                      # ld nr
    Filter(0x15, 0, 1, IO_URING_SETUP),         # jeq io_uring_setup
    Filter(0x06, 0, 0, 0x00050000 | EPERM),     # ret errno(EPERM)
)
prog = (Filter * 7)(*prog, Filter(0x06, 0, 0, 0x7FFF0000))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
fprog = Prog(len(prog), prog)
assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER
"""


def test_io_uring_denied_reports_eperm(tmp_path):
    """Point 13: where io_uring_setup is denied (EPERM), a required
    io_uring raises OSError with errno EPERM, and auto falls back saying
    why."""
    code, out = run_child(DENY_IO_URING + """
import errno, blockio
try:
    blockio.Engine(backend="uring")
except OSError as e:
    assert e.errno == errno.EPERM, (e.errno, str(e))
    assert "EPERM" in str(e), str(e)
else:
    raise AssertionError("io_uring was denied, yet the engine was made")
e = blockio.Engine()
assert e.backend == "threads" and "EPERM" in e.fallback_reason, e.fallback_reason
print("eperm reported")
""", cwd=tmp_path, env={"BLOCKIO_BACKEND": ""})
    assert code == 0 and "eperm reported" in out, out


def test_io_uring_denied_after_an_auto_engine_is_made_fails_its_first_synchronous_call(tmp_path):
    """An engine made with ``backend="auto"`` on io_uring makes the ring
    of its synchronous calls at the first of them; where io_uring_setup
    is denied by then (EPERM), that call raises OSError with errno EPERM
    saying which ring could not be made and that the engine keeps its
    backend (no fallback: its other rings are io_uring's), not that
    io_uring "was required"; ``backend`` still says io_uring, and the
    engine's asynchronous reads still work."""
    code, out = run_child("""
import asyncio, errno, os, blockio
with open("f", "wb") as f:
    f.write(b"x")
fd = os.open("f", os.O_RDONLY)
e = blockio.Engine()
assert e.backend == "uring", e.backend
async def aread():
    return await e.aread(fd, offset=0, length=1)
assert asyncio.run(aread()) == b"x"  # (its file engine is made now, before the filter)
""" + DENY_IO_URING + """
try:
    e.read_files(["f"])
except OSError as x:
    assert x.errno == errno.EPERM, (x.errno, str(x))
    assert "could not make the io_uring ring of its synchronous calls" in str(x), str(x)
    assert "required" not in str(x) and "do not fall back to the thread pool" in str(x), str(x)
else:
    raise AssertionError("io_uring was denied, yet the synchronous call's ring was made")
assert e.backend == "uring", e.backend
assert asyncio.run(aread()) == b"x"
print("said what failed")
""", cwd=tmp_path, env={"BLOCKIO_BACKEND": ""})
    assert code == 0 and "said what failed" in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_aread_on_an_epoll_descriptor_completes_or_raises(backend, tmp_path):
    """Point 7: a descriptor the ring cannot read (an epoll instance, what a
    stale number becomes under asyncio) gives an error on both backends."""
    code, out = run_child(f"""
        import asyncio, select, blockio
        e = blockio.Engine(backend={backend!r})
        ep = select.epoll()

        async def main():
            try:
                await asyncio.wait_for(e.aread(ep.fileno(), offset=0, length=10), 60)
            except asyncio.TimeoutError:  # (an OSError too: caught first)
                print("never completed")
            except OSError as x:
                print("raised", x.errno, x)
            else:
                print("completed")

        asyncio.run(main())
        e.close()
    """, cwd=tmp_path)
    assert code == 0 and ("raised" in out or "completed" in out) and "never" not in out, out
    if "raised" in out:
        # named as any failed read is: what, where, on which descriptor, why
        assert "raised 22 [Errno 22] read of 10 bytes at offset 0 on fd " in out and "epoll" in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_synchronous_batch_returns_an_epoll_descriptors_error_in_its_place(backend, tmp_path):
    """With ``return_exceptions=True`` a synchronous batch gives the error
    of each operation on an epoll instance in its place, as the
    asynchronous ones do, and runs the others."""
    code, out = run_child(f"""
        import errno, os, select, blockio
        e = blockio.Engine(backend={backend!r})
        ep = select.epoll()
        p = "f"
        with open(p, "wb") as f:
            f.write(b"0123456789")
        fd = os.open(p, os.O_RDWR)
        got = e.read_batch(ep.fileno(), offsets=[0, 4], length=4, return_exceptions=True)
        print("read", [type(x).__name__ for x in got], all(getattr(x, "errno", None) == errno.EINVAL for x in got))
        buf = bytearray(4)
        got = e.readinto_batch([(fd, buf, 2), (ep.fileno(), bytearray(4), 0)], return_exceptions=True)
        print("readinto", got[0], bytes(buf), getattr(got[1], "errno", None) == errno.EINVAL)
        got = e.write_batch([(ep.fileno(), b"x", 0), (fd, b"AB", 0)], return_exceptions=True)
        print("write", getattr(got[0], "errno", None) == errno.EINVAL, got[1], os.pread(fd, 4, 0))
        e.close()
    """, cwd=tmp_path)
    assert code == 0, out
    assert "read ['OSError', 'OSError'] True" in out, out
    assert "readinto 4 b'2345' True" in out, out
    assert "write True 2 b'AB23'" in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
@pytest.mark.parametrize("call", ["read_batch", "readinto_batch", "write_batch"])
def test_a_synchronous_batch_on_an_epoll_descriptor_raises_einval(backend, tmp_path, call):
    """F-9: a synchronous batch on an epoll instance fails with EINVAL at
    once, as os.read of it does, instead of waiting for ever."""
    code, out = run_child(f"""
        import errno, os, select, blockio
        e = blockio.Engine(backend={backend!r})
        ep = select.epoll()
        try:
            os.read(ep.fileno(), 10)
        except OSError as x:
            assert x.errno == errno.EINVAL
        try:
            if {call!r} == "read_batch":
                e.read_batch(ep.fileno(), offsets=[0], length=10)
            elif {call!r} == "readinto_batch":
                e.readinto_batch([(ep.fileno(), bytearray(10), 0)])
            else:
                e.write_batch([(ep.fileno(), b"x", 0)])
        except OSError as x:
            print("raised", x.errno == errno.EINVAL, f"on fd {{ep.fileno()}} failed" in str(x) and "epoll" in str(x))
        else:
            print("completed")
        e.close()
    """, cwd=tmp_path)
    assert code == 0 and "raised True True" in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_stale_descriptor_number_reused_by_the_engine_raises_ebadf(backend, tmp_path):
    """F-5: a number the caller closed, which the engine's own descriptors
    (made on first use) then take, fails with EBADF, as os.pread of the
    closed number does, instead of waiting on the engine's eventfd."""
    (tmp_path / "data").write_bytes(os.urandom(1 << 16))
    code, out = run_child(f"""
        import asyncio, errno, os, blockio
        e = blockio.Engine(backend={backend!r})

        async def main():
            # Closed once the loop is running: the next descriptor made is
            # the engine's own, on its first asynchronous call.
            fd = os.open("data", os.O_RDONLY)
            os.close(fd)
            try:
                os.pread(fd, 10, 0)
            except OSError as x:
                assert x.errno == errno.EBADF
            try:
                await asyncio.wait_for(e.aread(fd, offset=0, length=40960), 60)
            except asyncio.TimeoutError:  # (an OSError too: caught first)
                print("never completed")
            except OSError as x:
                print("raised", x.errno == errno.EBADF)
            else:
                print("completed")

        asyncio.run(main())
        e.close()
    """, cwd=tmp_path)
    assert code == 0 and "raised True" in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_one_buffer_twice_in_a_read_batch_is_refused(data_file, backend):
    """Two reads into the same memory in one batch are refused before any
    is submitted, naming the items; distinct slices of one buffer are
    fine."""
    path, data = data_file
    e = blockio.Engine(backend=backend)
    buf = bytearray(8192)
    view = memoryview(buf)
    with open(path, "rb") as f:
        for ops in ([(f, buf, 0), (f, buf, 100)], [(f, view[:5000], 0), (f, view[4000:], 100)],
                    [(f, bytearray(1), 0), (f, view, 0), (f, view[10:20], 0)]):
            with pytest.raises(ValueError, match=r"ops: items \d and \d read into the same memory"):
                e.readinto_batch(ops)

            async def main():
                with pytest.raises(ValueError, match=r"ops: items \d and \d read into the same memory"):
                    await e.areadinto_batch(ops)

            asyncio.run(main())
        assert e.readinto_batch([(f, view[:4096], 0), (f, view[4096:], 4096)]) == [4096, 4096]
        assert bytes(buf) == data[:8192]
    e.close()


@pytest.mark.parametrize("mode", ["r+b", "wb", "w", "r+"])
def test_a_file_dropped_unclosed_writes_its_buffered_bytes_at_once(tmp_path, mode):
    """A file dropped without ``close()`` writes what it buffered as soon
    as its last reference goes (with a ``ResourceWarning``), as the
    built-in's and aiofiles' do, not whenever the cycle collector runs: by
    then another writer may have rewritten the file, and the stale bytes
    would land over the new ones."""
    import gc
    import warnings

    p = tmp_path / "f"
    p.write_bytes(b"old-contents\n")
    text = "b" not in mode

    async def main():
        f = await blockio.open(p, mode)
        await f.seek(0)
        if "r" in mode:
            await f.readline()
            await f.seek(0)
        await f.write("X" if text else b"X")
        await f.tell()
        await f.write("YZ" if text else b"YZ")  # (joins the buffer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del f
        return p.read_bytes()

    gc.disable()
    try:
        got = asyncio.run(main())
    finally:
        gc.enable()
    assert got == (b"XYZ-contents\n" if "r" in mode else b"XYZ")


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_reads_left_in_flight_at_exit_are_reported_once_by_asyncio_not_again_by_the_engine(tmp_path, backend):
    """A loop left with tasks awaiting reads of an empty pipe at exit: the
    exit closes the engine, which ends those reads with ``ECANCELED``;
    asyncio reports each task destroyed while pending, and the engine's
    futures add no "Future exception was never retrieved" of their own."""
    code, out = run_child(f"""
        import asyncio, os, blockio
        eng = blockio.Engine(backend={backend!r})
        r, w = os.pipe()
        loop = asyncio.new_event_loop()
        async def main():
            for _ in range(2):  # (batches: an aread of a stream waits in the loop's poll)
                asyncio.ensure_future(eng.aread_batch(r, offsets=[0], length=10))
            while eng._core.pending() < 2:  # (until both reads are in the engine; the run has a watchdog)
                await asyncio.sleep(0.001)
        loop.run_until_complete(main())
        print("ran")
    """, tmp_path)
    assert code == 0 and "ran" in out, out
    assert out.count("Task was destroyed but it is pending") == 2, out
    assert "never retrieved" not in out, out


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_dropped_unclosed_loop_that_used_the_default_engine_is_collected(tmp_path, backend):
    """Loops that read and wrote files through the default engine (which
    lives as long as the process), then were dropped without being closed,
    are collected: the engine keeps no loop alive, neither the last that
    used it nor those watching its completions; and the next loop still
    gets its results. (When the engine kept every loop it served, each
    such loop stayed in memory for good.)"""
    env = {"BLOCKIO_BACKEND": backend}
    code, out = run_child("""
        import asyncio, gc, warnings, weakref
        import blockio

        async def use():
            async with blockio.open("f", "wb") as f:
                await f.write(b"x" * 100)
            async with blockio.open("f", "rb") as f:
                return await f.read()

        warnings.simplefilter("ignore", ResourceWarning)  # (the loops are dropped unclosed on purpose)
        refs = []
        for _ in range(3):
            loop = asyncio.new_event_loop()
            assert loop.run_until_complete(use()) == b"x" * 100
            refs.append(weakref.ref(loop))
            del loop
        gc.collect()
        alive = sum(r() is not None for r in refs)
        last = asyncio.new_event_loop()
        got = last.run_until_complete(use())
        last.close()
        print("alive", alive, got == b"x" * 100)
    """, tmp_path, env)
    assert code == 0 and out.startswith("alive 0 True\n"), out
