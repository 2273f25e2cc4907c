"""``blockio.os.stat``: a ``statx`` through the engine, with the same
``os.stat_result`` (every field) and the same errors as ``os.stat``, on
both backends, under asyncio and uvloop. The other ``blockio.os`` calls
run aiofiles' own tests (``test_aiofiles_suite.py``)."""

import asyncio
import errno
import os

import pytest

import blockio
import blockio._engine
import blockio.os

FIELDS = ["st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime",
          "st_ctime", "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev"]


def loops():
    import uvloop

    return [asyncio.new_event_loop, uvloop.new_event_loop]


@pytest.mark.parametrize("loop_factory", loops(), ids=["asyncio", "uvloop"])
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_stat_matches_os_stat_field_by_field(tmp_path, monkeypatch, loop_factory, backend):
    monkeypatch.setattr(blockio._engine, "_default", blockio.Engine(backend=backend))
    through_engine = []
    astat = blockio.Engine._astat

    async def counted(self, *args):
        through_engine.append(args)
        return await astat(self, *args)

    monkeypatch.setattr(blockio.Engine, "_astat", counted)
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 12345)
    link = tmp_path / "link"
    link.symlink_to(f)
    cases = [(f, True), (tmp_path, True), (link, True), (link, False), ("/dev/null", True), (bytes(f), True)]

    async def main():
        for path, follow in cases:
            want = os.stat(path, follow_symlinks=follow)
            got = await blockio.os.stat(path, follow_symlinks=follow)
            assert isinstance(got, os.stat_result)
            assert {k: getattr(got, k) for k in FIELDS} == {k: getattr(want, k) for k in FIELDS}, path
        with pytest.raises(FileNotFoundError) as ei:
            await blockio.os.stat(tmp_path / "missing")
        with pytest.raises(FileNotFoundError) as ref:
            os.stat(tmp_path / "missing")
        assert str(ei.value) == str(ref.value) and ei.value.errno == errno.ENOENT
        assert len(through_engine) == len(cases) + 1  # every path went through the engine
        fd = os.open(f, os.O_RDONLY)
        try:
            assert (await blockio.os.stat(fd)).st_size == 12345  # a descriptor: on a thread
        finally:
            os.close(fd)
        assert len(through_engine) == len(cases) + 1

    loop = loop_factory()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        blockio._engine._default.close()


@pytest.mark.parametrize("loop_factory", loops(), ids=["asyncio", "uvloop"])
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_mkdir_and_symlink_go_through_the_engine_as_os_does(tmp_path, monkeypatch, loop_factory, backend):
    """``mkdir`` and ``symlink`` of a path go through the engine's
    ``mkdirat`` and ``symlinkat`` jobs (``Core.submit_mkdir`` and
    ``submit_symlink``), not ``os`` on a thread, with ``os``'s results (the mode, before the umask;
    the link's target) and ``os``'s errors, message included."""
    monkeypatch.setattr(blockio._engine, "_default", blockio.Engine(backend=backend))
    calls = []
    core = blockio._engine._default._core

    class Counting:
        def __getattr__(self, name):
            attr = getattr(core, name)
            if name in ("submit_mkdir", "submit_symlink"):
                return lambda *a: (calls.append(name), attr(*a))[1]
            return attr

    monkeypatch.setattr(blockio._engine._default, "_core", Counting())
    old = os.umask(0o022)

    async def main():
        await blockio.os.mkdir(tmp_path / "a")
        await blockio.os.mkdir(bytes(tmp_path / "b"), 0o700)
        await blockio.os.mkdir(str(tmp_path / "c"), mode=0o777)
        await blockio.os.symlink("a", tmp_path / "l1")
        await blockio.os.symlink(bytes(tmp_path / "missing"), str(tmp_path / "l2"))
        assert calls == ["submit_mkdir"] * 3 + ["submit_symlink"] * 2
        for name, want in [("a", 0o755), ("b", 0o700), ("c", 0o755)]:
            st = os.lstat(tmp_path / name)
            assert st.st_mode & 0o7777 == want and os.path.isdir(tmp_path / name)
        assert os.readlink(tmp_path / "l1") == "a" and os.path.isdir(tmp_path / "l1")
        assert os.readlink(tmp_path / "l2") == str(tmp_path / "missing")
        for ours, theirs in [
            (blockio.os.mkdir(tmp_path / "a"), lambda: os.mkdir(tmp_path / "a")),
            (blockio.os.mkdir(tmp_path / "no" / "x"), lambda: os.mkdir(tmp_path / "no" / "x")),
            (blockio.os.symlink("a", tmp_path / "l1"), lambda: os.symlink("a", tmp_path / "l1")),
            (blockio.os.symlink("a", tmp_path / "no" / "l"), lambda: os.symlink("a", tmp_path / "no" / "l")),
        ]:
            with pytest.raises(OSError) as ref:
                theirs()
            with pytest.raises(OSError) as got:
                await ours
            assert type(got.value) is type(ref.value) and str(got.value) == str(ref.value)
        with pytest.raises(ValueError, match="null"):
            await blockio.os.mkdir("a\0b")
        # With dir_fd: os.mkdir on a thread, not through the engine.
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            await blockio.os.mkdir("d", dir_fd=fd)
            await blockio.os.symlink("d", "l3", dir_fd=fd)
        finally:
            os.close(fd)
        assert os.path.isdir(tmp_path / "d") and os.readlink(tmp_path / "l3") == "d"
        assert len(calls) == 9  # the five above and the four errors

    loop = loop_factory()
    try:
        loop.run_until_complete(main())
    finally:
        os.umask(old)
        loop.close()
        core.close()


@pytest.mark.parametrize("path", ["", b""])
@pytest.mark.parametrize("follow_symlinks", [True, False])
def test_stat_of_an_empty_path_raises_as_os_stat(path, follow_symlinks):
    """F-8: os.stat("") raises FileNotFoundError; so does blockio.os.stat,
    never the current directory's stat."""
    import blockio.os as bos

    with pytest.raises(FileNotFoundError) as ref:
        os.stat(path, follow_symlinks=follow_symlinks)
    with pytest.raises(FileNotFoundError) as ours:
        asyncio.run(bos.stat(path, follow_symlinks=follow_symlinks))
    assert str(ours.value) == str(ref.value)



@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_a_file_call_waiting_on_its_file_holds_up_no_other(tmp_path, backend):
    """A file-system call that waits on its file holds up no other: while
    ``aread_files`` waits in the open of a file whose write lease this
    process holds (the open waits for the lease to be given up) and an
    ``open`` of a FIFO waits for a writer, a ``stat``, a size, an open and
    a close of other files complete; the two waiting calls complete once
    the lease is given up and a writer comes. Order is asserted, not time:
    the bounded wait only keeps a regression from hanging the suite."""
    import fcntl
    import signal

    eng = blockio.Engine(backend=backend)
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 100)
    leased = tmp_path / "leased"
    leased.write_bytes(b"leased")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # The lease break is announced with SIGIO, whose default action ends
    # the process.
    old_handler = signal.signal(signal.SIGIO, lambda *_: None)
    lease = os.open(leased, os.O_RDONLY)
    fcntl.fcntl(lease, fcntl.F_SETLEASE, fcntl.F_WRLCK)

    async def main():
        reading = asyncio.ensure_future(eng.aread_files([leased]))
        # While an open waits for the lease, F_GETLEASE gives the type the
        # lease is being broken to.
        while fcntl.fcntl(lease, fcntl.F_GETLEASE) == fcntl.F_WRLCK and not reading.done():
            await asyncio.sleep(0.01)
        opening = asyncio.ensure_future(eng._aopen(fifo, os.O_RDONLY, 0))
        fd = os.open(f, os.O_RDONLY)
        others = asyncio.ensure_future(asyncio.gather(
            eng._astat(f, True), eng._asize(fd), eng._aopen(f, os.O_RDONLY, 0), eng._aclose(os.dup(fd))))
        done, _ = await asyncio.wait({reading, opening, others}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        fcntl.fcntl(lease, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        writer = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)
        os.close(writer)
        assert done == {others}
        st, size, fd2, _ = others.result()
        assert st.st_size == size == os.fstat(fd2).st_size == 100
        os.close(fd)
        os.close(fd2)
        assert await reading == [b"leased"]
        os.close(await opening)

    try:
        asyncio.run(main())
    finally:
        eng.close()
        os.close(lease)
        signal.signal(signal.SIGIO, old_handler)


@pytest.mark.parametrize("call", [
    lambda m: m.stat(None),
    lambda m: m.stat(1.5),
    lambda m: m.mkdir(None),
    lambda m: m.symlink(None, "x"),
    lambda m: m.symlink("x", 3.0),
])
def test_a_path_of_the_wrong_type_is_os_s_type_error(call):
    """A path that is neither str, bytes, path-like nor (for ``stat``) a
    descriptor is the ``os`` call's own ``TypeError``, word for word."""
    with pytest.raises(TypeError) as want:
        call(os)

    async def main():
        await call(blockio.os)

    with pytest.raises(TypeError) as got:
        asyncio.run(main())
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_mkdir_takes_every_mode_os_mkdir_takes(tmp_path, monkeypatch, backend):
    """Any C ``int`` mode, as ``os.mkdir`` takes it (-1: every permission
    bit, before the umask), with ``os.mkdir``'s errors past that range and
    for a non-integer; -1 raised an ``OverflowError`` naming nothing."""
    monkeypatch.setattr(blockio._engine, "_default", blockio.Engine(backend=backend))

    async def main():
        for i, mode in enumerate([-1, 0o7777, 2**31 - 1, -(2**31)]):
            ours, theirs = tmp_path / f"b{i}", tmp_path / f"o{i}"
            await blockio.os.mkdir(ours, mode)
            os.mkdir(theirs, mode)
            assert os.stat(ours).st_mode == os.stat(theirs).st_mode, oct(mode)
        for bad in [2**31, -(2**31) - 1, 2**40, 1.5, "7"]:
            with pytest.raises((OverflowError, TypeError)) as ref:
                os.mkdir(tmp_path / "r", bad)
            with pytest.raises((OverflowError, TypeError)) as got:
                await blockio.os.mkdir(tmp_path / "g", bad)
            assert type(got.value) is type(ref.value) and str(got.value) == str(ref.value), bad

    old = os.umask(0o022)
    try:
        asyncio.run(main())
    finally:
        os.umask(old)


@pytest.mark.parametrize("path", ["f\0x", b"f\0x"])
@pytest.mark.parametrize("call", ["stat", "mkdir", "symlink"])
def test_a_path_with_a_nul_byte_raises_the_os_calls_error(tmp_path, path, call):
    """A str or bytes path holding a NUL byte raises ``os``'s own
    ``ValueError`` (``stat: embedded null character in path``), as
    ``aiofiles.os`` does, rather than the engine's wording."""
    args = (path,) if call != "symlink" else (path, "dst")
    with pytest.raises(ValueError) as want:
        getattr(os, call)(*args)

    async def main():
        with pytest.raises(ValueError) as got:
            await getattr(blockio.os, call)(*args)
        return str(got.value)

    assert asyncio.run(main()) == str(want.value)
