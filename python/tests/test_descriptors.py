"""Descriptors at the process's limit (``RLIMIT_NOFILE``): a
``blockio.open`` file owns its descriptor, and its operations use that
number with no duplicate each, so a program can have as many files
written at once as the limit holds, as with aiofiles. A file's close waits
for its operations whose task was cancelled, so none can reach a file
opened later under the same number. Each run is a child process with its
own limit."""

import asyncio
import errno
import os
import subprocess
import sys
import textwrap

import pytest

import blockio
from waits import await_until, blocked_in, watched

BACKENDS = pytest.mark.parametrize("backend", ["uring", "threads"])
WATCHDOG = 120  # seconds: far beyond any run that works


# What every child program starts with: the modules it uses, and how it
# sets its limit and uses up its descriptors.
PRELUDE = '''
import asyncio, errno, os, resource
import blockio


def limit_descriptors(n):
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def fill():
    """Opens /dev/null until the process is out of descriptors; the numbers."""
    filler = []
    while True:
        try:
            filler.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            return filler
'''


def run_limited(code, backend, cwd):
    """Runs ``code`` (after ``PRELUDE``) in a child process on ``backend``:
    its exit code and its output."""
    env = dict(os.environ)
    if backend == "threads":
        env["BLOCKIO_BACKEND"] = "threads"
    else:
        env.pop("BLOCKIO_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=WATCHDOG, cwd=cwd, env=env)
    return out.returncode, out.stdout + out.stderr


@BACKENDS
@pytest.mark.parametrize("files", [600, 1000])
@pytest.mark.parametrize("mode", ["wb", "ab"])
def test_files_written_at_once_up_to_the_descriptor_limit(tmp_path, backend, files, mode):
    """Under a limit of 1,024 descriptors, ``files`` files open
    at once are each written (64 KiB, through the engine), synced and
    closed, concurrently; every write succeeds and every file holds its
    bytes. (When each operation held a duplicate descriptor, hundreds of
    the writes and fsyncs failed with EMFILE, and most of them with 1,000
    files.)"""
    code, out = run_limited(f"""
        limit_descriptors(1024)

        async def main():
            fs = await asyncio.gather(*(blockio.open(f"f{{i}}", {mode!r}) for i in range({files})))
            got = await asyncio.gather(*(f.write(bytes([i % 251]) * 65536) for i, f in enumerate(fs)),
                                       return_exceptions=True)
            bad = [g for g in got if g != 65536]
            synced = await asyncio.gather(*(f.fsync() for f in fs), return_exceptions=True)
            bad += [s for s in synced if s is not None]
            await asyncio.gather(*(f.close() for f in fs))
            print(len(bad), bad[:3])

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("0 []"), out
    for i in range(files):
        assert (tmp_path / f"f{i}").read_bytes() == bytes([i % 251]) * 65536, i


@BACKENDS
def test_a_files_close_waits_for_its_cancelled_reads(tmp_path, backend):
    """A read whose task is cancelled may still be in the engine when the
    file is closed: the descriptor's number is closed only once it has
    completed, so a file opened right after (which may get that number)
    is never read or written by it, and the bytes of both files stay
    whole; every descriptor of the files is closed by the end."""
    data = os.urandom(1 << 20)
    (tmp_path / "src").write_bytes(data)

    async def main():
        with blockio.Engine(backend=backend) as e:
            for trial in range(50):
                f = await blockio.open(tmp_path / "src", "rb", buffering=0, engine=e)
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # (not cached: through the engine)
                task = asyncio.ensure_future(f.read(len(data)))
                await asyncio.sleep(0)
                task.cancel()
                await f.close()
                g = await blockio.open(tmp_path / f"out{trial}", "wb", buffering=0, engine=e)
                assert await g.write(b"x" * 1000) == 1000
                await g.close()
                try:
                    assert await task == data
                except asyncio.CancelledError:
                    pass
                assert (tmp_path / f"out{trial}").read_bytes() == b"x" * 1000

    asyncio.run(main())
    assert (tmp_path / "src").read_bytes() == data
    assert _open_under(tmp_path) == []


def _open_under(directory):
    """The descriptors of this process open on files under ``directory``."""
    names = []
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            continue  # (the listing's own, closed by now)
        if target.startswith(str(directory)):
            names.append(target)
    return names


@BACKENDS
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("case", ["write", "write0", "read", "text"])
def test_an_open_file_finishes_its_calls_with_no_descriptor_free(tmp_path, backend, loop, case):
    """The first file a process opens, then every free descriptor taken
    by the program: the file still writes (buffered and unbuffered),
    reads and closes, because what its engine needs (ring and eventfd, or
    the thread pool's epoll, eventfd and timerfd) is made by
    ``blockio.open``, which is what fails with EMFILE when they cannot be.
    (When the engine made them at the first read or write, every call
    raised EMFILE and close dropped the buffered bytes.)"""
    pytest.importorskip("uvloop") if loop == "uvloop" else None
    (tmp_path / "src").write_bytes(b"some bytes\n" * 100000)
    mode, kw, call = {
        "write": ("wb", "", "await f.write(b'important data\\n' * 1000)"),
        "write0": ("wb", ", buffering=0", "await f.write(b'important data\\n' * 1000)"),
        "read": ("rb", "", "got = await f.read(); assert got == b'some bytes\\n' * 100000, len(got)"),
        "text": ("r", "", "got = await f.read(); assert got == 'some bytes\\n' * 100000, len(got)"),
    }[case]
    path = "out" if mode == "wb" else "src"
    code, out = run_limited(f"""
        limit_descriptors(64)

        async def main():
            f = await blockio.open({path!r}, {mode!r}{kw})
            filler = fill()
            {call}
            await f.close()
            for fd in filler:
                os.close(fd)
            print("ok", len(filler))

        if {loop!r} == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("ok "), out
    if mode == "wb":
        assert (tmp_path / "out").read_bytes() == b"important data\n" * 1000


@BACKENDS
def test_open_fails_with_emfile_when_the_engine_cannot_be_made(tmp_path, backend):
    """With one descriptor free, the file could be opened but its engine
    not made: ``blockio.open`` raises EMFILE, as the built-in ``open``
    does when out of descriptors, and leaves no descriptor open; once
    descriptors are free again, the same engine opens and writes files."""
    code, out = run_limited("""
        limit_descriptors(64)

        async def main():
            blockio.default_engine()  # (the engine object; its rings are not made yet)
            filler = fill()
            os.close(filler.pop())  # one free: the file's own
            try:
                await blockio.open("out", "wb")
            except OSError as e:
                assert e.errno == errno.EMFILE, e
            else:
                raise AssertionError("open succeeded with no descriptor for the engine")
            probe = os.open("/dev/null", os.O_RDONLY)  # the file's descriptor was closed
            os.close(probe)
            for fd in filler:
                os.close(fd)
            async with blockio.open("out", "wb") as f:
                await f.write(b"later\\n")
            print("ok")

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("ok"), out
    assert (tmp_path / "out").read_bytes() == b"later\n"


@BACKENDS
def test_a_failed_open_has_closed_every_descriptor_it_made_when_it_raises(tmp_path, backend):
    """With one descriptor free and the engine's file engine not made
    yet, ``blockio.open`` raises EMFILE; at that moment every descriptor
    the failed setup made is closed already, so a descriptor opened right
    after it is free, every time of 200 in a row. (The driver thread sent
    its ring's error before dropping its wake eventfd, so an ``os.open``
    right after the failed open often found the process still out of
    descriptors.)"""
    code, out = run_limited("""
        limit_descriptors(64)

        async def main():
            blockio.default_engine()  # (the engine object; its file engine is not made yet)
            filler = fill()
            os.close(filler.pop())  # one free
            held = 0
            for _ in range(200):
                try:
                    await blockio.open("out", "wb")
                except OSError as e:
                    assert e.errno == errno.EMFILE, e
                else:
                    raise AssertionError("open succeeded with one descriptor free")
                try:
                    os.close(os.open("/dev/null", os.O_RDONLY))
                except OSError:
                    held += 1
            print("still held right after the error:", held)

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("still held right after the error: 0\n"), out


@BACKENDS
@pytest.mark.parametrize("kw,call,want", [
    (", buffering=0", "f.read(100)", b"hi\n"),
    ("", "f.readline()", b"hi\n"),
])
def test_pipes_read_at_once_up_to_the_descriptor_limit(tmp_path, backend, kw, call, want):
    """Under a limit of 1,024 descriptors, 450 pipes (900 descriptors),
    each read end in a ``blockio.open`` file with one read waiting for
    bytes: the waiting reads hold no descriptor and no thread each (they
    wait in the event loop's poll: one descriptor for all of them, the
    private ``epoll`` the loop watches), nor any place in the engine's bound
    on operations in flight (a file written meanwhile is written), and
    every read gets its pipe's bytes once they come. (When each waiting
    read held a duplicate descriptor and a thread, about 340 of the 450
    reads failed with EMFILE.)"""
    code, out = run_limited(f"""
        import asyncio, os, resource, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from waits import await_until, watched
        import blockio

        limit_descriptors(1024)

        def count(what):
            return len(os.listdir(f"/proc/self/{{what}}"))

        async def main():
            pipes = [os.pipe() for _ in range(450)]
            files = [await blockio.open(r, "rb"{kw}) for r, w in pipes]
            fds, threads = count("fd"), count("task")
            tasks = [asyncio.ensure_future({call}) for f in files]
            await await_until(lambda: watched(*(r for r, w in pipes)), "every read waits for its pipe")
            more_fds, more_threads = count("fd") - fds, count("task") - threads
            async with blockio.open("out", "wb", buffering=0) as g:
                await asyncio.wait_for(g.write(b"x" * 100000), 30)
            for r, w in pipes:
                os.write(w, b"hi\\n")
            got = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
            bad = [g for g in got if g != {want!r}]
            for f in files:
                await f.close()
            for r, w in pipes:
                os.close(w)
            print(len(bad), bad[:3], "more descriptors:", more_fds, "more threads:", more_threads)

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("0 [] more descriptors: 1 more threads: 0\n"), out
    assert (tmp_path / "out").read_bytes() == b"x" * 100000


async def _read100(f):
    return await f.read(100)


async def _readline(f):
    return await f.readline()


@BACKENDS
@pytest.mark.parametrize("mode,buffering,call", [
    ("rb", 0, _read100),
    ("rb", 0, _readline),
    ("rb", -1, _read100),
    ("r", -1, _readline),
])
def test_close_ends_a_waiting_pipe_read_which_never_reaches_the_next_pipe(backend, mode, buffering, call):
    """A read of a pipe waiting for bytes, then ``close()`` from another
    task: the close does not wait for a writer; it ends the read, which
    raises ``OSError`` (``ECANCELED``) having read nothing, then closes
    the descriptor (a write to the old pipe fails with ``EPIPE``). A pipe
    made next, which most often gets the same number, keeps its bytes
    whole for its own reader: nothing of the ended read reaches it.
    (When a waiting read held the file's queue and a duplicate, the close
    waited for the old pipe's writer.)"""
    reused = 0

    async def main():
        nonlocal reused
        with blockio.Engine(backend=backend) as e:
            for trial in range(20):
                r, w = os.pipe()
                f = await blockio.open(r, mode, buffering=buffering, engine=e)
                task = asyncio.ensure_future(call(f))
                await await_until(lambda: watched(r), "the read waits for the pipe")
                await asyncio.wait_for(f.close(), 30)
                with pytest.raises(OSError) as err:
                    await task
                assert err.value.errno == errno.ECANCELED, err.value
                r2, w2 = os.pipe()
                reused += r2 == r
                with pytest.raises(BrokenPipeError):
                    os.write(w, b"old\n")
                os.write(w2, b"new\n")
                os.close(w2)  # (a buffered read of 100 bytes returns at the end)
                g = await blockio.open(r2, mode, buffering=buffering, engine=e)
                got = await asyncio.wait_for(call(g), 30)
                assert got == (b"new\n" if "b" in mode else "new\n"), (trial, got)
                await g.close()
                os.close(w)

    asyncio.run(main())
    assert reused > 0  # (the case the test is for: the number was given to the next pipe)


@BACKENDS
@pytest.mark.parametrize("loop", ["asyncio", "uvloop", "trio"])
def test_pipe_reads_wait_in_each_loops_poll_and_close_ends_them(backend, loop):
    """Under asyncio, uvloop and trio: a read of an owned pipe waits in the
    loop's poll and gets the bytes once they come; the descriptor stays
    blocking, as it was (uvloop's reader makes it non-blocking: the next
    read would raise ``BlockingIOError`` instead of waiting); a second
    read waits too, and ``close()`` from another task ends it with
    ``OSError`` (``ECANCELED``)."""
    r, w = os.pipe()
    out = []

    def waiting(f):
        # (a wait registered in the file; trio keeps a descriptor in its
        # epoll set between waits, so the set says nothing there)
        return bool(f._stream_waits) and (loop == "trio" or watched(r))

    async def body(sleep, spawn):
        with blockio.Engine(backend=backend) as e:
            f = await blockio.open(r, "rb", buffering=0, engine=e)

            async def reader():
                try:
                    out.append(await f.read(100))
                except OSError as err:
                    out.append(err.errno)

            for expect in (b"abc", b"def"):
                await spawn(reader)
                await await_until(lambda: waiting(f), "the read waits for the pipe", sleep=sleep)
                os.write(w, expect)
                await await_until(lambda: len(out) == 1, "the read returns", sleep=sleep)
                assert out.pop() == expect
                assert os.get_blocking(r)
            await spawn(reader)
            await await_until(lambda: waiting(f), "the read waits for the pipe", sleep=sleep)
            await f.close()
            await await_until(lambda: len(out) == 1, "the read returns", sleep=sleep)
            assert out == [errno.ECANCELED]

    if loop == "trio":
        trio = pytest.importorskip("trio")

        async def main():
            async with trio.open_nursery() as n:
                async def spawn(fn):
                    n.start_soon(fn)
                await body(trio.sleep, spawn)

        trio.run(main)
    else:
        async def spawn(fn):
            asyncio.ensure_future(fn())

        if loop == "uvloop":
            uvloop = pytest.importorskip("uvloop")
            uvloop.run(body(asyncio.sleep, spawn))
        else:
            asyncio.run(body(asyncio.sleep, spawn))
    os.close(w)


@BACKENDS
def test_pipe_writes_waiting_at_once_up_to_the_descriptor_limit(tmp_path, backend):
    """Under a limit of 1,024 descriptors, 420 pipes (840 descriptors),
    each full, each write end in a ``blockio.open`` file (``buffering=0``)
    with one write waiting for room: the waiting writes hold no
    descriptor each (the file owns its number, and its close leaves it to
    a write still running: see the next test), a file opened and written
    meanwhile is written, and once the pipes are read every write lands
    whole, behind the bytes that filled its pipe. (When each waiting write
    held a duplicate descriptor, 248 of the 420 failed with EMFILE, and so
    did the other file's open.)"""
    code, out = run_limited(f"""
        import asyncio, os, resource, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from waits import await_until, blocked_in
        import blockio

        limit_descriptors(1024)
        N = 420

        def count(what):
            return len(os.listdir(f"/proc/self/{{what}}"))

        def fill(w):
            os.set_blocking(w, False)
            n = 0
            try:
                while True:
                    n += os.write(w, b"f" * 65536)
            except BlockingIOError:
                pass
            os.set_blocking(w, True)
            return n

        def drain(r, n):
            got = b""
            while len(got) < n:
                got += os.read(r, n - len(got))
            return got

        async def main():
            pipes = [os.pipe() for _ in range(N)]
            filled = [fill(w) for r, w in pipes]
            files = [await blockio.open(w, "wb", buffering=0) for r, w in pipes]
            fds = count("fd")
            tasks = [asyncio.ensure_future(f.write(b"p" * 1000)) for f in files]
            await await_until(lambda: blocked_in("write", threads=N - sum(t.done() for t in tasks)),
                              "every write waits for room in its pipe (in a thread blocked in write), "
                              "or has failed")
            more_fds = count("fd") - fds
            async with blockio.open("out", "wb") as g:
                await asyncio.wait_for(g.write(b"x" * 100000), 30)
            read = await asyncio.wait_for(asyncio.gather(
                *(asyncio.to_thread(drain, r, filled[i] + 1000) for i, (r, w) in enumerate(pipes))), 60)
            got = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
            bad = [g for g in got if g != 1000]
            bad += [i for i, b in enumerate(read) if b != b"f" * filled[i] + b"p" * 1000]
            for f in files:
                await f.close()
            bad += [i for i, (r, w) in enumerate(pipes) if os.read(r, 1) != b""]  # (each at its end)
            for r, w in pipes:
                os.close(r)
            print(len(bad), bad[:3], "more descriptors:", more_fds)

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("0 [] more descriptors: 0\n"), out
    assert (tmp_path / "out").read_bytes() == b"x" * 100000


@BACKENDS
@pytest.mark.parametrize("how", ["close", "engine closed"])
def test_a_pipe_files_close_leaves_its_number_to_a_write_still_running(backend, how):
    """A write to a full pipe, its task cancelled while it waits for room
    (it runs on, as a write to a stream does), then the file closed
    (with its engine open, or closed before): the close does not wait for the
    write, which may never end, and the number stays open, naming the
    same pipe, while the write may still use it, so that no file opened
    meanwhile can get the number and the write's bytes; once the pipe
    is read, the write lands whole, then the number is closed (the
    reader sees the end, and the number is free)."""
    import threading

    async def main():
        with blockio.Engine(backend=backend) as e:
            r, w = os.pipe()
            os.set_blocking(w, False)
            filled = 0
            try:
                while True:
                    filled += os.write(w, b"f" * 65536)
            except BlockingIOError:
                pass
            os.set_blocking(w, True)
            f = await blockio.open(w, "wb", buffering=0, engine=e)
            task = asyncio.ensure_future(f.write(b"p" * 1000))
            await await_until(lambda: blocked_in("write", w), "the write waits for room")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            if how == "engine closed":
                e.close()  # (the file's close then closes the number without the engine)
            await asyncio.wait_for(f.close(), 30)
            assert os.fstat(w).st_ino == os.fstat(r).st_ino  # (still the pipe's)
            got = bytearray()
            ended = threading.Event()

            def drain():
                while piece := os.read(r, 1 << 20):
                    got.extend(piece)
                ended.set()

            threading.Thread(target=drain, daemon=True).start()
            await await_until(ended.is_set, "the reader sees the pipe's end")
            assert bytes(got) == b"f" * filled + b"p" * 1000
            with pytest.raises(OSError) as err:
                os.fstat(w)
            assert err.value.errno == errno.EBADF
            os.close(r)

    asyncio.run(main())


@BACKENDS
@pytest.mark.parametrize("mode", ["wb", "ab", "xb", "w"])
def test_an_open_that_fails_with_emfile_creates_no_file(tmp_path, backend, mode):
    """With one descriptor free, the file's own, and the engine's not made
    yet: ``blockio.open`` of a new path raises EMFILE and leaves no file
    behind, as the built-in ``open`` does (the engine's descriptors are
    made before the path is opened); once descriptors are free again the
    open creates and writes it. (When the engine was made after the
    open, the failed open left an empty file.)"""
    code, out = run_limited(f"""
        limit_descriptors(64)

        async def main():
            blockio.default_engine()  # (the engine object; its asynchronous engine is not made yet)
            filler = fill()
            os.close(filler.pop())  # one free: the file's own
            try:
                await blockio.open("new", {mode!r})
            except OSError as e:
                assert e.errno == errno.EMFILE, e
            else:
                raise AssertionError("open succeeded with no descriptor for the engine")
            print("left:", os.path.exists("new"))
            for fd in filler:
                os.close(fd)
            async with blockio.open("new", {mode!r}) as f:
                await f.write({'"later"' if "b" not in mode else 'b"later"'})
            print("ok")

        asyncio.run(main())
    """, backend, tmp_path)
    assert code == 0 and out.startswith("left: False\nok\n"), out
    assert (tmp_path / "new").read_bytes() == b"later"


@BACKENDS
def test_an_open_whose_opener_adds_o_direct_and_fails_with_emfile_creates_no_file(tmp_path, backend):
    """An opener that adds ``O_DIRECT``, with k = 1, 2, ... descriptors
    free (the engine object made, none of its file engines) until the open
    succeeds: each failure is EMFILE and leaves no file behind, as the
    built-in ``open`` does; the open that succeeds has an ``O_DIRECT``
    descriptor (so the ring of ``O_DIRECT`` files was needed). (That ring
    was made after the opener had created the file: with one descriptor
    short on io_uring the failed open left an empty file.)"""
    seen = []
    for k in range(1, 8):  # (a new process each: the engine's parts are made once)
        code, out = run_limited(f"""
            import concurrent.futures.thread, fcntl

            limit_descriptors(64)

            def opener(path, flags):
                return os.open(path, flags | os.O_DIRECT, 0o666)

            async def main():
                blockio.default_engine()  # (the engine object; its file engines are not made yet)
                filler = fill()
                for fd in filler[-{k}:]:
                    os.close(fd)  # ({k} free)
                try:
                    f = await blockio.open("new", "wb", buffering=0, opener=opener)
                except OSError as e:
                    print("failed", e.errno == errno.EMFILE, "left:", os.path.exists("new"), "|", e)
                else:
                    print("ok direct:", bool(fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_DIRECT))
                    await f.close()

            asyncio.run(main())
        """, backend, tmp_path)
        assert code == 0, out
        seen.append((k, out.strip()))
        if out.startswith("ok"):
            break
    assert seen[-1][1] == "ok direct: True", seen
    assert len(seen) > 1, seen  # (one descriptor free was never enough)
    for k, line in seen[:-1]:
        assert line.startswith("failed True left: False |"), seen


@BACKENDS
def test_the_first_open_short_of_descriptors_says_what_it_could_not_make(tmp_path, backend):
    """The first ``blockio.open`` of a process (the engine not made yet),
    with k = 1, 2, ... descriptors free until it succeeds: each failure is
    ``OSError`` with errno EMFILE, and says what could not be made: a part
    of blockio's engine (no path in the error; it names the part, and says
    that the first open needs 4 free descriptors), or the file itself (its
    path in the error and nothing else, as the built-in ``open``'s). It
    succeeds with 4 free (the file's and the engine's 3,
    on both backends: the ring of the synchronous calls is made at the
    first of them). (A part of the engine that could not be made raised a
    bare ``[Errno 24] Too many open files``, and on io_uring 5 were
    needed.)"""
    seen = []
    for k in range(1, 8):  # (a new process each: the engine is made once)
        code, out = run_limited(f"""
            limit_descriptors(64)

            async def main():
                filler = fill()
                for fd in filler[-{k}:]:
                    os.close(fd)  # ({k} free)
                try:
                    async with blockio.open("f", "w") as f:
                        await f.write("x")
                except OSError as e:
                    print("failed", e.errno == errno.EMFILE, e.filename, "|", e.strerror)
                else:
                    print("ok")

            asyncio.run(main())
        """, backend, tmp_path)
        assert code == 0, out
        seen.append((k, out.strip()))
        if out.startswith("ok"):
            break
    assert seen[-1][1] == "ok" and seen[-1][0] <= 4, seen
    for k, line in seen[:-1]:
        head, _, text = line.partition(" | ")
        assert head.startswith("failed True "), seen
        filename = head[len("failed True "):]
        if filename == "f":  # the file's own open
            assert text == "Too many open files", seen
        else:  # a part of the engine
            assert filename == "None", seen
            assert text.startswith("Too many open files: blockio's engine could not make "), seen
            assert "a process's first blockio.open needs 4 free descriptors" in text, seen
    # (with 3 free the engine is made and the file's own open fails)
    assert [k for k, line in seen if line.startswith("failed True f |")] == [3], seen


def test_a_large_read_on_the_ring_needs_no_free_descriptor(tmp_path):
    """With every descriptor of the process taken, a read of more than
    256 KiB on blockio's loop's ring, which would take a duplicate of its
    descriptor, still reads its bytes (on the caller's number, tried at
    submission), as ``os.pread`` does."""
    (tmp_path / "data").write_bytes(os.urandom(1 << 20))
    code, out = run_limited("""
        from blockio._loop import UringEventLoop

        async def main():
            want = open("data", "rb").read()
            fd = os.open("data", os.O_RDONLY)
            limit_descriptors(max(int(n) for n in os.listdir("/proc/self/fd")) + 4)
            fill()
            try:
                os.open("/dev/null", os.O_RDONLY)
            except OSError as e:
                print("full:", e.errno == errno.EMFILE)
            got = await asyncio.get_running_loop()._ring_pread(fd, 0, len(want))
            print("read:", got == want)

        loop = UringEventLoop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    """, "uring", tmp_path)
    assert (code, out.split()) == (0, ["full:", "True", "read:", "True"]), out
