"""What the loop waits for on its own is no task of the program's: an
unconnected datagram endpoint's receive (a ``recvfrom``, then a
``recvmsg`` on the ring when nothing had come) is not in ``asyncio.all_tasks()``, so the usual
shutdown (cancel every other task, gather them) leaves the endpoint
receiving, and ``asyncio.run`` ending with it open prints nothing; the
call made when the socket is ready still comes behind the callbacks
queued before the wait, as on asyncio's loop. Each test runs the same program on asyncio's loop and on blockio's (both
backends) and expects asyncio's outcome."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest

from loops import FACTORIES
from waits import DEADLINE

LOOPS = pytest.mark.parametrize("name", ["asyncio", "blockio-uring", "blockio-epoll"])


class _Counting(asyncio.DatagramProtocol):
    """Counts the datagrams received; records what else it is told."""

    def __init__(self):
        self.got = []
        self.told = []
        self.arrived = None

    def datagram_received(self, data, addr):
        self.got.append(data)
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(data)

    def error_received(self, exc):
        self.told.append(f"error_received {exc!r}")

    def connection_lost(self, exc):
        self.told.append(f"connection_lost {exc!r}")


def _run(name, main):
    """Runs ``main()`` on a new loop called ``name`` (its only task, as
    under ``asyncio.run``), recording what reaches the loop's exception
    handler; returns both."""
    loop = FACTORIES[name]()
    handled = []
    loop.set_exception_handler(lambda lp, context: handled.append(context.get("message")))
    try:
        return loop.run_until_complete(main()), handled
    finally:
        loop.close()


@LOOPS
def test_datagram_endpoints_add_no_task(name):
    """An unconnected and a connected datagram endpoint, each receiving
    (the unconnected one again after a datagram): ``asyncio.all_tasks()``
    is as it was before them."""

    async def main():
        loop = asyncio.get_running_loop()
        before = len(asyncio.all_tasks())
        tr1, p1 = await loop.create_datagram_endpoint(_Counting, local_addr=("127.0.0.1", 0))
        tr2, _ = await loop.create_datagram_endpoint(_Counting, remote_addr=tr1.get_extra_info("sockname"))
        p1.arrived = loop.create_future()
        tr2.sendto(b"x")
        await asyncio.wait_for(p1.arrived, DEADLINE)
        after = len(asyncio.all_tasks())
        tr1.close()
        tr2.close()
        return after - before

    added, handled = _run(name, main)
    assert added == 0
    assert handled == []


@LOOPS
def test_cancelling_every_other_task_leaves_a_datagram_endpoint_receiving(name):
    """The usual graceful shutdown (cancel every task but the current one,
    gather them) cancels nothing of the endpoint's: it goes on receiving,
    is not closing, is told nothing, and the loop's exception handler
    hears of nothing."""

    async def main():
        loop = asyncio.get_running_loop()
        tr, proto = await loop.create_datagram_endpoint(_Counting, local_addr=("127.0.0.1", 0))
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        proto.arrived = loop.create_future()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"after the shutdown", tr.get_extra_info("sockname"))
            got = await asyncio.wait_for(proto.arrived, DEADLINE)
        closing, told = tr.is_closing(), list(proto.told)
        tr.close()
        return got, closing, told

    (got, closing, told), handled = _run(name, main)
    assert got == b"after the shutdown"
    assert not closing
    assert told == []
    assert handled == []


_RUN_END = """
import asyncio, os, sys
import blockio

async def main():
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
    await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=("127.0.0.1", 9))
    print(len(asyncio.all_tasks()))

(asyncio.run if sys.argv[1] == "asyncio" else blockio.run)(main())
print("exit")
"""


@LOOPS
def test_a_run_ending_with_datagram_endpoints_open_prints_nothing_else(name):
    """``asyncio.run`` (``blockio.run``) ending while datagram endpoints are
    open: only the program's own lines are printed, no traceback."""
    env = dict(os.environ, BLOCKIO_BACKEND="threads" if name == "blockio-epoll" else "uring")
    out = subprocess.run([sys.executable, "-c", _RUN_END, name], env=env, capture_output=True, text=True,
                         timeout=DEADLINE * 2)
    assert (out.returncode, out.stdout, out.stderr) == (0, "1\nexit\n", "")


@LOOPS
def test_a_sock_recvfrom_cancelled_by_a_callback_queued_before_its_datagram_leaves_the_datagram(name):
    """A ``sock_recvfrom`` waiting for a datagram is cancelled by a callback
    queued before the loop's wait that sees the datagram arrive: the
    callback runs first, the receive is never made, and the datagram goes
    to the next ``sock_recvfrom``."""

    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setblocking(False)
        started = loop.create_future()

        async def receiver():
            started.set_result(None)
            return await loop.sock_recvfrom(a, 100)

        with a, b:
            task = asyncio.ensure_future(receiver())
            await started  # (the receiver waits in sock_recvfrom now)
            b.send(b"one")
            loop.call_soon(task.cancel)
            try:
                first = await task
            except asyncio.CancelledError:
                first = "cancelled"
            data, _ = await asyncio.wait_for(loop.sock_recvfrom(a, 100), DEADLINE)
        return first, data

    got, handled = _run(name, main)
    assert got == ("cancelled", b"one")
    assert handled == []
