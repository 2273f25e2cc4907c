"""The pool of small receive buffers of blockio's io_uring loop (a
provided buffer ring): a small socket receive lends no buffer of its own
while it waits, the kernel picks one of the pool's as the data arrives,
and a receive that finds the pool empty (``ENOBUFS``) lends its own
instead, losing nothing. The pool outlives every receive that may pick
from it: a loop closed with such receives in flight, and a fork, with the
child's pool its own."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time

import pytest

import blockio
from blockio import _blockio
from waits import DEADLINE, await_until

# Buffers in a ring's pool (`pool.rs`).
POOL = 128
# More connections than that, each with a message waiting at once.
CONNS = 200


def _kernel_has_buffer_rings() -> bool:
    major, minor = (int(p) for p in os.uname().release.split(".")[:2])
    return (major, minor) >= (5, 19)


def _ring() -> _blockio.LoopRing:
    """A ring, with its pool where the kernel has buffer rings."""
    if not _kernel_has_buffer_rings():
        pytest.skip(f"kernel {os.uname().release} is before 5.19: no buffer rings, no pool")
    ring = _blockio.LoopRing()
    assert ring.pool_buffers == POOL
    return ring


def _reap(ring, n):
    """The next ``n`` completions on ``ring``, by token; fails the test if
    they have not all come within ``DEADLINE``."""
    deadline = time.monotonic() + DEADLINE
    got = {}
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"not within {DEADLINE} s: {n} completions, {len(got)} came"
        for token, res, value in ring.wait(left):
            assert token not in got
            got[token] = (res, value)
    return got


def _messages(seed, n, size=1500):
    rnd = random.Random(seed)
    return [rnd.randbytes(size) for _ in range(n)]


def _exchange(ring, pairs, seed):
    """One receive armed on each pair's first end, then a message sent on
    each second end, all before the ring's next wait: every receive's
    value is its own message, whole. Returns the pool's misses since."""
    before = ring.pool_misses
    msgs = _messages(seed, len(pairs))
    tokens = [ring.recv(a.fileno(), 64 * 1024, True, True) for a, _b in pairs]
    assert ring.wait(0) == []  # submitted, nothing to receive yet
    for (_a, b), m in zip(pairs, msgs):
        assert b.send(m) == len(m)
    got = _reap(ring, len(pairs))
    for t, m in zip(tokens, msgs):
        assert got[t] == (len(m), m)
    return ring.pool_misses - before


def test_more_messages_waiting_than_pool_buffers_all_arrive_whole():
    """200 receives waiting, a message of 1,500 bytes sent to each in one
    step: the kernel picks the pool's 128 buffers for the first ones and
    answers ``ENOBUFS`` to the others, which lend a buffer of their own
    and take their message; every message arrives whole, each to its own
    receive, round after round."""
    ring = _ring()
    pairs = [socket.socketpair() for _ in range(CONNS)]
    try:
        misses = [_exchange(ring, pairs, seed) for seed in range(3)]
        assert all(m >= CONNS - POOL for m in misses), misses
        # A few at a time: the pool suffices, no receive lends its own.
        assert _exchange(ring, pairs[:10], 99) == 0
    finally:
        ring.close()
        for a, b in pairs:
            a.close()
            b.close()


class Chunks(asyncio.Protocol):
    def __init__(self):
        self.data = bytearray()
        self.waiter: asyncio.Future | None = None
        self.want = 0

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data
        if self.waiter is not None and len(self.data) >= self.want and not self.waiter.done():
            self.waiter.set_result(None)

    async def received(self, total):
        if len(self.data) < total:
            self.want = total
            self.waiter = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(self.waiter, DEADLINE)
        assert len(self.data) == total


def test_transports_with_more_messages_waiting_than_pool_buffers_keep_every_byte_in_order(monkeypatch):
    """200 transports, their receives armed, a message sent to each in one
    step of the loop, four times: the receives past the pool's buffers
    lend their own, and each protocol gets its four messages in order."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    _ring().close()  # (the kernel has buffer rings)
    loop = blockio.new_event_loop()
    pairs = [socket.socketpair() for _ in range(CONNS)]
    rounds = [_messages(seed, CONNS) for seed in range(4)]

    async def main():
        ring = loop._proactor._ring
        assert ring.pool_buffers == POOL
        ends = [await loop.connect_accepted_socket(Chunks, a) for a, _b in pairs]
        fds = [a.fileno() for a, _b in pairs]
        misses = []
        for n, msgs in enumerate(rounds, 1):
            await await_until(
                lambda: all(ring.receiving(fd) is not None for fd in fds),
                "every transport's next receive armed",
            )
            await asyncio.sleep(0)  # (the loop's wait submits them)
            before = ring.pool_misses
            for (_a, b), m in zip(pairs, msgs):
                b.setblocking(False)
                assert b.send(m) == len(m)
            for _tr, pr in ends:
                await pr.received(n * 1500)
            misses.append(ring.pool_misses - before)
        for i, (_tr, pr) in enumerate(ends):
            assert bytes(pr.data) == b"".join(r[i] for r in rounds)
        for tr, _pr in ends:
            tr.close()
        return misses

    try:
        misses = loop.run_until_complete(main())
    finally:
        loop.close()
        for a, b in pairs:
            a.close()
            b.close()
    assert all(m > 0 for m in misses), misses


def test_a_loop_closed_with_receives_picking_from_the_pool_in_flight(monkeypatch):
    """A loop closed while 200 transports' receives wait on the pool, the
    completions of those that took a message reaped but not dispatched
    (their pool buffers held) and those past the pool resubmitted with
    buffers of their own: the close ends every receive's hold on its
    socket, and a new loop's pool serves the same sockets' peers again."""
    monkeypatch.setenv("BLOCKIO_BACKEND", "uring")
    _ring().close()
    loop = blockio.new_event_loop()
    pairs = [socket.socketpair() for _ in range(CONNS)]

    async def main():
        ring = loop._proactor._ring
        ends = [await loop.connect_accepted_socket(Chunks, a) for a, _b in pairs]
        fds = [a.fileno() for a, _b in pairs]
        await await_until(
            lambda: all(ring.receiving(fd) is not None for fd in fds),
            "every transport's receive armed",
        )
        await asyncio.sleep(0)
        return ring, ends

    try:
        ring, ends = loop.run_until_complete(main())
        for (_a, b), m in zip(pairs, _messages(5, CONNS)):
            assert b.send(m) == len(m)
        ring.fill(0)  # reaped, not dispatched: the pool's buffers held
        assert ring.pool_misses >= CONNS - POOL
        assert all(a._io_refs == 1 for a, _b in pairs)
    finally:
        loop.close()
    assert all(a._io_refs == 0 for a, _b in pairs)
    for a, b in pairs:
        a.close()
        b.close()
    with pytest.raises(RuntimeError, match="closed"):
        ring.pool_misses
    fresh = _ring()
    again = [socket.socketpair() for _ in range(CONNS)]
    try:
        assert _exchange(fresh, again, 6) >= CONNS - POOL
    finally:
        fresh.close()
        for a, b in again:
            a.close()
            b.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_s_pool_is_its_own_and_the_parent_s_receives_keep_theirs():
    """A fork while 200 receives of the parent's ring wait on its pool:
    the child's own ring (and pool) passes the exhaustion exchange, and
    then the parent's receives take their messages whole, from the
    parent's pool (the child's exit unmapped only its copy)."""
    ring = _ring()
    pairs = [socket.socketpair() for _ in range(CONNS)]
    msgs = _messages(7, CONNS)
    tokens = [ring.recv(a.fileno(), 64 * 1024, True, True) for a, _b in pairs]
    assert ring.wait(0) == []
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            child = _blockio.LoopRing()
            assert child.pool_buffers == POOL
            mine = [socket.socketpair() for _ in range(CONNS)]
            assert _exchange(child, mine, 8) >= CONNS - POOL
            child.close()
            os.write(w, b"ok")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.read(r, 10) == b"ok"
    try:
        for (_a, b), m in zip(pairs, msgs):
            assert b.send(m) == len(m)
        got = _reap(ring, CONNS)
        for t, m in zip(tokens, msgs):
            assert got[t] == (len(m), m)
        assert ring.pool_misses >= CONNS - POOL
    finally:
        ring.close()
        os.close(r)
        os.close(w)
        for a, b in pairs:
            a.close()
            b.close()
