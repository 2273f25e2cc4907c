"""A read on blockio's io_uring loop's ring of a file range the page cache
does not hold (``loop.sendfile``'s step of an uncached range, a
``blockio.open`` file's ``read()`` that the cache cannot serve) is copied
by the kernel's worker threads, its file held in a slot of the ring's
file table, so that the loop's thread never starts the disk's reads
itself (see ``INLINE_PREAD_MAX`` in ``event_loop/ops.rs``). Which path
ran is seen in the slot the read holds while in flight
(``LoopRing.free_file_slots``). The sendfile's outcome is compared with
asyncio's loop: what it returned, what the peer got, where the file's
position is, when the file is cut short, the task cancelled, the peer
gone; and a loop closed with such a read in flight closes."""

import asyncio
import os
import random
import socket
import struct

import pytest

import blockio
from loops import FACTORIES
from test_inline_reads import evict
from test_loop_sendfile import _pair, _read_all, disk_path  # noqa: F401  (a fixture)
from waits import DEADLINE, await_until

#: The loops compared: asyncio's (its selector loop) and blockio's on io_uring.
LOOPS = ["asyncio", "blockio-uring"]


def _cold_file(directory, size, seed=0):
    """A file of ``size`` random bytes, none of its pages in the page cache."""
    data = random.Random(seed).randbytes(size)
    path = directory / f"cold{size}"
    path.write_bytes(data)
    evict(path)
    return path, data


class _Reads:
    """The ring reads of a blockio loop, watched: each read's
    ``(offset, length)`` and the free slots of the ring's file table right
    after its submission; ``before`` (a coroutine function of the read's
    offset), awaited before each read is submitted."""

    def __init__(self, loop, before=None):
        self.made = []
        self.free_after = []
        ring = loop._proactor._ring
        self.free = ring.free_file_slots
        pread = loop._proactor.pread

        def watched(fd, offset, length):
            async def submit():
                if before is not None:
                    await before(offset)
                self.made.append((offset, length))
                fut = pread(fd, offset, length)
                self.free_after.append(ring.free_file_slots)
                return await fut

            return asyncio.ensure_future(submit())

        loop._proactor.pread = watched


def _run(name, main, before=None):
    """``main(loop, reads)`` run on a new loop ``name`` (``reads`` the
    blockio loop's :class:`_Reads`, None on asyncio's), which is then
    closed."""
    loop = FACTORIES[name]()
    try:
        reads = _Reads(loop, before) if name != "asyncio" else None
        return loop.run_until_complete(asyncio.wait_for(main(loop, reads), DEADLINE)), reads
    finally:
        loop.close()


@pytest.mark.parametrize("size, offset, count", [(4096, 0, None), (40000, 0, None), (65536 + 5, 100, None),
                                                 (40000, 5, 1000), (300000, 0, None)])
def test_an_uncached_range_is_read_by_the_kernels_workers_and_sent_as_on_asyncio(disk_path, size, offset, count):  # noqa: F811
    results = {}
    for name in LOOPS:
        path, data = _cold_file(disk_path, size)

        async def main(loop, reads):
            t, peer, _ = await _pair(loop)
            got = loop.run_in_executor(None, _read_all, peer)
            with open(path, "rb") as f:
                n = await loop.sendfile(t, f, offset, count)
                t.close()
                return n, await got, f.tell()

        results[name], reads = _run(name, main)
        want = data[offset:offset + count if count else None]
        assert results[name] == (len(want), want, offset + len(want)), name
    assert results["blockio-uring"] == results["asyncio"]
    # Every read held its file in a slot of the ring's file table while in
    # flight (a slot is free again once the read's and the emptying
    # entry's completions are reaped): the kernel's workers copied it.
    assert reads.made and all(free < reads.free for free in reads.free_after)


@pytest.mark.parametrize("size", [1, 4096, 40000, 65536])
def test_a_read_of_a_whole_uncached_file_is_read_by_the_kernels_workers(disk_path, size):  # noqa: F811
    # The read's first try on the loop's thread (preadv2 with RWF_NOWAIT)
    # starts the kernel's readahead of the pages it misses, and on a fast
    # disk that readahead may finish within the call, which then returns
    # the bytes: no ring read is made, rightly. This disk does so for
    # stretches of tens of milliseconds, every try in them served. So
    # each of up to 100 fresh uncached files is read until one read goes
    # to the ring; each read must return the file whole, and every ring
    # read must hold its file in a slot (the kernel's workers copied it).
    ring_reads = []
    for seed in range(100):
        path, data = _cold_file(disk_path, size, seed=seed)

        async def main(loop, reads):
            async with blockio.open(path, "rb") as f:
                return await f.read(), await f.tell()

        got, reads = _run("blockio-uring", main)
        assert got == (data, size), seed
        assert all(free < reads.free for free in reads.free_after), seed
        ring_reads += reads.made
        if ring_reads:
            break
    assert ring_reads, "no read of 100 uncached files went to the loop's ring"


def test_a_file_cut_short_before_its_read_ends_the_sendfile_as_on_asyncio(disk_path):  # noqa: F811
    size = 40000
    results = {}
    for name in LOOPS:
        path, data = _cold_file(disk_path, size, seed=2)

        async def cut(offset):
            # (blockio's loop: the size taken, the read not yet submitted)
            os.truncate(path, size // 2)

        async def main(loop, reads):
            t, peer, _ = await _pair(loop)
            got = loop.run_in_executor(None, _read_all, peer)
            with open(path, "rb") as f:
                if reads is None:
                    os.truncate(path, size // 2)
                n = await loop.sendfile(t, f)
                t.close()
                return n, await got, f.tell()

        results[name], reads = _run(name, main, cut)
        assert results[name] == (size // 2, data[:size // 2], size // 2), name
    assert reads.made[0] == (0, size)
    assert reads.free_after[0] < reads.free  # (read by the kernel's workers)


def test_a_sendfile_cancelled_during_its_read_gives_the_slot_back_and_sends_nothing(disk_path):  # noqa: F811
    size = 40000
    results = {}
    for name in LOOPS:
        path, data = _cold_file(disk_path, size, seed=3)

        async def main(loop, reads):
            t, peer, _ = await _pair(loop)
            with open(path, "rb") as f:
                task = asyncio.ensure_future(loop.sendfile(t, f))
                if reads is None:
                    await asyncio.sleep(0)  # (asyncio's: under way, or done)
                else:
                    while not reads.made:
                        await asyncio.sleep(0)
                task.cancel()
                try:
                    n = await task
                except asyncio.CancelledError:
                    n = None
                t.close()
                got = await loop.run_in_executor(None, _read_all, peer)
                if reads is not None:
                    ring = loop._proactor._ring
                    await await_until(lambda: ring.free_file_slots == reads.free, "the slot given back")
                return n, got, f.tell()

        results[name], reads = _run(name, main)
    # Cancelled on both, the file's position left where it was; asyncio's
    # os.sendfile sent the file (or a part) in its first step, before the
    # cancellation landed, blockio's read was in flight on a worker, and
    # the cancellation ended the sendfile with nothing sent.
    n, got, at = results["asyncio"]
    assert (n, at, got) == (None, 0, data[:len(got)])
    assert results["blockio-uring"] == (None, b"", 0)
    assert reads.free_after == [reads.free - 1]  # (held while in flight, then given back)


def test_a_sendfile_to_a_peer_that_resets_during_its_read_fails_as_on_asyncio(disk_path):  # noqa: F811
    size = 40000
    results = {}
    for name in LOOPS:
        path, data = _cold_file(disk_path, size, seed=4)
        peers = []

        async def reset(offset):
            # (blockio's loop: the peer resets before the read is submitted)
            peers[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peers[0].close()  # (on loopback, the reset reaches the socket in this call)

        async def main(loop, reads):
            t, peer, _ = await _pair(loop)
            peers.append(peer)
            with open(path, "rb") as f:
                if reads is None:
                    await reset(0)
                try:
                    await loop.sendfile(t, f)
                except OSError as e:
                    return type(e), f.tell()
                finally:
                    t.close()
            return None, None

        results[name], reads = _run(name, main, reset)
    # A ConnectionError on both. The position: blockio's is after the
    # bytes sent, none; asyncio's os.sendfile fails before any byte, and
    # its fallback, which reads the file's first piece before it finds the
    # transport closed, leaves it after that piece.
    assert issubclass(results["asyncio"][0], ConnectionError)
    assert issubclass(results["blockio-uring"][0], ConnectionError)
    assert results["blockio-uring"][1] == 0
    assert reads.made == [(0, size)]
    assert reads.free_after == [reads.free - 1]


def test_a_loop_closed_with_a_cold_read_in_flight_closes(disk_path):  # noqa: F811
    path, data = _cold_file(disk_path, 65536, seed=5)
    loop = FACTORIES["blockio-uring"]()
    reads = _Reads(loop)

    async def main():
        t, peer, _ = await _pair(loop)
        f = open(path, "rb")
        task = asyncio.ensure_future(loop.sendfile(t, f))
        while not reads.made:
            await asyncio.sleep(0)
        return task, t, peer, f

    task, t, peer, f = loop.run_until_complete(asyncio.wait_for(main(), DEADLINE))
    assert reads.free_after == [reads.free - 1]
    loop.close()  # (the read in flight: waited for, its slot emptied)
    assert loop.is_closed()
    f.close()
    peer.close()
    t._sock.close()  # (the transport of a closed loop: its socket closed here)
