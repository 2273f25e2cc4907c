"""The exceptions of the loop's socket calls, on asyncio's loop and on
blockio's (both backends) alike: a negative ``sock_recv`` size, a refused
``sock_connect`` (a blocking socket's plain error, a non-blocking one's
"Connect call failed", as ``create_connection`` reports it), and a
``sock_sendfile`` to a socket never connected or to a peer that went away
(``BrokenPipeError`` where the kernel says ``EPIPE``, ``ConnectionResetError``
where it says ``ECONNRESET``)."""

import asyncio
import os
import socket
import struct

import pytest

from loops import run_on
from waits import DEADLINE

LOOPS = ["asyncio", "blockio-uring", "blockio-epoll"]


def _outcome(exc):
    """What a test compares of an exception: its type, errno and text."""
    return type(exc).__name__, getattr(exc, "errno", None), str(exc)


async def _raised(coro):
    try:
        await asyncio.wait_for(coro, DEADLINE)
    except Exception as exc:  # noqa: BLE001 (the outcome is what is compared)
        return _outcome(exc)
    return "no error"


def _refused_address():
    """A loopback address where nothing listens (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()


@pytest.mark.parametrize("name", LOOPS)
def test_sock_recv_of_a_negative_size(name):
    async def main():
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            return await _raised(asyncio.get_running_loop().sock_recv(a, -1))

    assert run_on(name, main()) == ("ValueError", None, "negative buffersize in recv")


@pytest.mark.parametrize("blocking", [True, False])
@pytest.mark.parametrize("name", LOOPS)
def test_sock_connect_refused(name, blocking):
    address = _refused_address()

    async def main():
        with socket.socket() as s:
            s.setblocking(blocking)
            return await _raised(asyncio.get_running_loop().sock_connect(s, address))

    if blocking:
        want = ("ConnectionRefusedError", 111, "[Errno 111] Connection refused")
    else:
        want = ("ConnectionRefusedError", 111, f"[Errno 111] Connect call failed {address}")
    assert run_on(name, main()) == want


@pytest.mark.parametrize("name", LOOPS)
def test_create_connection_refused(name):
    address = _refused_address()

    async def main():
        return await _raised(asyncio.get_running_loop().create_connection(asyncio.Protocol, *address))

    assert run_on(name, main()) == ("ConnectionRefusedError", 111, f"[Errno 111] Connect call failed {address}")


@pytest.mark.parametrize("name", LOOPS)
def test_sock_sendfile_on_a_socket_never_connected(name, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)

    async def main():
        with socket.socket() as s, open(path, "rb") as f:
            s.setblocking(False)
            return await _raised(asyncio.get_running_loop().sock_sendfile(s, f))

    assert run_on(name, main()) == ("BrokenPipeError", 32, "[Errno 32] Broken pipe")


@pytest.mark.parametrize("peer_ends", ["closed its side first", "reset"])
@pytest.mark.parametrize("name", LOOPS)
def test_sock_sendfile_to_a_peer_gone_mid_transfer(name, peer_ends, tmp_path):
    # The peer reads the first byte, then goes: with a reset (SO_LINGER
    # 0), or, having ended its side first (our socket in CLOSE_WAIT), by a
    # close with bytes unread, whose reset the kernel reports as EPIPE.
    path = tmp_path / "big"
    path.write_bytes(os.urandom(16 << 20))

    async def main():
        loop = asyncio.get_running_loop()
        with socket.create_server(("127.0.0.1", 0)) as ls, socket.socket() as s, open(path, "rb") as f:
            s.setblocking(False)
            await loop.sock_connect(s, ls.getsockname())
            peer, _ = ls.accept()
            with peer:
                if peer_ends == "reset":
                    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    peer.shutdown(socket.SHUT_WR)
                task = asyncio.ensure_future(loop.sock_sendfile(s, f))
                peer.setblocking(False)
                assert await loop.sock_recv(peer, 1)  # the transfer is under way
            return await _raised(task)

    if peer_ends == "reset":
        want = ("ConnectionResetError", 104, "[Errno 104] Connection reset by peer")
    else:
        want = ("BrokenPipeError", 32, "[Errno 32] Broken pipe")
    assert run_on(name, main()) == want
