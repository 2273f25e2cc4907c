"""``loop.sendfile`` on blockio's io_uring loop of a small range the page
cache does not hold (at most 256 KiB), to a transport with nothing in
flight or buffered: one read of the range on the ring, then one ``send``
of its bytes, with no step of the general path (no ``send_some`` nor
``sendfile_some`` future) when the socket takes them all. The transport
is in asyncio's sendfile state throughout the read (reading paused,
writes and a second sendfile refused), the bytes written before and after
arrive around the file's, a socket that takes only part of the bytes gets
the rest from the general path, and a sendfile cancelled during its read
leaves the transport as usable as before."""

import asyncio
import socket

import pytest

from test_loop_cold_reads import _cold_file, _run
from test_loop_sendfile import _pair, _read_all, disk_path  # noqa: F401  (a fixture)
from waits import await_until


class _Peer(asyncio.Protocol):
    """A protocol that keeps what it receives."""

    def __init__(self):
        self.got = bytearray()

    def data_received(self, data):
        self.got += data


def _count_steps(loop):
    """The general path's send steps on ``loop``, counted: a list of the
    names of the proactor's calls made (``send_some``, ``sendfile_some``)."""
    steps = []
    proactor = loop._proactor
    for name in ("send_some", "sendfile_some"):
        call = getattr(proactor, name)

        def counted(*args, _call=call, _name=name):
            steps.append(_name)
            return _call(*args)

        setattr(proactor, name, counted)
    return steps


@pytest.mark.parametrize("size, count", [(4096, None), (40000, None), (65536, 30000), (256 * 1024, None)])
def test_a_small_cold_range_goes_out_in_one_read_and_one_send(disk_path, size, count):  # noqa: F811
    path, data = _cold_file(disk_path, size, seed=size)

    async def main(loop, reads):
        steps = _count_steps(loop)
        t, peer, _ = await _pair(loop)
        got = loop.run_in_executor(None, _read_all, peer)
        with open(path, "rb") as f:
            t.write(b"head")
            n = await loop.sendfile(t, f, 0, count)
            t.write(b"tail")
            at = f.tell()
        t.close()
        return n, await got, at, steps

    (n, got, at, steps), reads = _run("blockio-uring", main)
    want = data[:count] if count else data
    assert (n, at) == (len(want), len(want))
    assert got == b"head" + want + b"tail"
    assert reads.made == [(0, len(want))]
    assert steps == []


def test_the_transport_is_in_a_sendfile_while_its_cold_read_is_in_flight(disk_path):  # noqa: F811
    path, data = _cold_file(disk_path, 40000, seed=5)
    seen = {}
    held = {}

    async def before(offset):
        # (the read held back until the transport's state was looked at)
        await held["gate"]

    async def main(loop, reads):
        t, peer, proto = await _pair(loop, _Peer)
        got = loop.run_in_executor(None, _read_all, peer)
        held["gate"] = gate = loop.create_future()
        with open(path, "rb") as f:
            task = asyncio.ensure_future(loop.sendfile(t, f))
            await asyncio.sleep(0)
            seen["reading"] = t.is_reading()
            with pytest.raises(RuntimeError):
                t.write(b"during")
            with pytest.raises((KeyError, RuntimeError)):
                await loop.sendfile(t, f)
            peer.sendall(b"ping")
            # (taken by the transport's receive and kept, not handed on)
            await await_until(lambda: t._pending_data_length > -1, "the peer's bytes taken while paused")
            seen["got while paused"] = bytes(proto.got)
            gate.set_result(None)
            n = await task
            seen["reading after"] = t.is_reading()
            await await_until(lambda: proto.got == b"ping", "the bytes sent during the sendfile received after it")
            t.write(b"after")
        t.close()
        return n, await got

    results, reads = _run("blockio-uring", main, before=before)
    assert seen == {"reading": False, "got while paused": b"", "reading after": True}
    assert results == (len(data), data + b"after")
    assert reads.made == [(0, len(data))]


def test_a_cold_sendfile_cancelled_during_its_read_leaves_the_transport_usable(disk_path):  # noqa: F811
    path, data = _cold_file(disk_path, 40000, seed=6)

    async def main(loop, reads):
        t, peer, proto = await _pair(loop, _Peer)
        got = loop.run_in_executor(None, _read_all, peer)
        with open(path, "rb") as f:
            task = asyncio.ensure_future(loop.sendfile(t, f))
            while not reads.made:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            at = f.tell()
            reading = t.is_reading()
            t.write(b"next:")
            n = await loop.sendfile(t, f)
            t.write(b":end")
        peer.sendall(b"ping")
        await await_until(lambda: proto.got == b"ping", "the peer's bytes received after the cancel")
        t.close()
        return at, reading, n, await got

    (at, reading, n, got), _ = _run("blockio-uring", main)
    assert (at, reading, n) == (0, True, len(data))
    assert got == b"next:" + data + b":end"


def test_a_cold_range_the_socket_takes_in_part_goes_out_whole(disk_path):  # noqa: F811
    size = 256 * 1024
    path, data = _cold_file(disk_path, size, seed=7)

    async def main(loop, reads):
        steps = _count_steps(loop)
        t, peer, _ = await _pair(loop)
        sock = t.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with open(path, "rb") as f:
            task = asyncio.ensure_future(loop.sendfile(t, f))
            await await_until(lambda: reads.made, "the ring read made")
            got = loop.run_in_executor(None, _read_all, peer)
            n = await task
            at = f.tell()
        t.write(b"!")
        t.close()
        return n, at, await got, steps

    (n, at, got, steps), _ = _run("blockio-uring", main)
    assert (n, at) == (size, size)
    assert steps  # (the rest on the general path)
    assert got == data + b"!"
