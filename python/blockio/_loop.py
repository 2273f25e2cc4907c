# mypy: ignore-errors
# (This module extends asyncio's private proactor classes and helpers,
# which typeshed types partly or not at all; its public signatures are
# still what mypy uses for callers.)
"""blockio's asyncio event loop: sockets, pipes, timers, signals and
subprocesses on one io_uring per loop.

Use it the way uvloop is used::

    blockio.run(main())                                          # any Python
    asyncio.run(main(), loop_factory=blockio.new_event_loop)   # 3.12+
    blockio.install()                                            # event loop policy

Design. :class:`UringEventLoop` is a *proactor*: it subclasses asyncio's
``BaseProactorEventLoop``, whose TCP, Unix, UDP and pipe transports ask for
whole operations and react to their completion, and gives it
:class:`~blockio._proactor.RingProactor`, whose operations run on the
loop's ring (``blockio._blockio.LoopRing``, Rust). A receive is one
completion carrying the bytes, not a readiness event followed by a
``recv`` call. What the proactor base lacks on Unix is added here:
``add_reader``/``add_writer`` (a one-shot ring poll re-armed after each
callback, so that they keep asyncio's level-triggered meaning; the poll is
on a duplicate of the descriptor, so that a callback only ever runs for the
file it was added for; refused for a descriptor a transport owns), signal
handlers (the wake-up socket always has a receive pending, so a signal ends
the wait; the running loop holds Python's process-wide wake-up descriptor
and no other loop's close takes it), subprocesses (a pidfd polled on the
ring; no child watcher), Unix sockets, and pipe transports whose write end
notices the reader going away. Pipe transports work on a duplicate of the
pipe held open while an operation may go back to it, as socket transports
hold their socket.

The turn of the loop (``_run_once``) is Rust (``_blockio.run_turn``,
``python/src/event_loop/turn.rs``): asyncio's ``BaseEventLoop._run_once``
step for step on asyncio's own containers (the ``_ready`` deque, the
``_scheduled`` heap, ``_timer_cancelled_count``), the nearest timer's
deadline the ring wait's timeout, the proactor's wait called without a
Python frame, and each ready handle run as ``Handle._run`` would, without
its frame. The epoll loop's turn is the same function around its
selector. ``call_soon_threadsafe`` wakes the loop through the same
socket pair as signals.

Where io_uring is unavailable (``kernel.io_uring_disabled``, a seccomp
profile, an old kernel: ``EPERM``/``ENOSYS``/``EACCES``) or
``BLOCKIO_BACKEND=threads``, :func:`new_event_loop` returns
:class:`EpollEventLoop`, asyncio's selector loop on epoll. ``loop.backend``
says which runs (``"uring"`` or ``"epoll"``).

``fork()``: rings made before a fork refuse use in the child (the child's
asyncio loop must be a new one); the child never submits to the parent's
ring.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import fcntl
import inspect
import io
import mmap
import operator
import os
import select
import signal
import socket
import stat
import struct
import sys
import threading
import types
import warnings
import weakref
from asyncio import (
    base_events, constants, events, exceptions, proactor_events, selector_events, sslproto, trsock, unix_events,
)
from typing import Any, Callable, Coroutine, Iterator, TypeVar

from . import _blockio, _proactor
from ._proactor import POLLIN, POLLOUT, RingProactor
from . import _sock_turns

__all__ = ["UringEventLoop", "EpollEventLoop", "EventLoopPolicy", "new_event_loop", "run", "install"]

_T = TypeVar("_T")

# The most a socket transport's receive takes at once (as uvloop's).
_RECV_SIZE = 256 * 1024

# Whether an empty datagram is sent (asyncio's selector loop sends one from
# 3.13 on; before, its sendto(b"") does nothing), and what a buffered
# datagram adds to get_write_buffer_size() beside its bytes (3.13 on: a
# header's 8 bytes), as on asyncio's selector loop of the running Python.
_SENDS_EMPTY_DATAGRAMS = sys.version_info >= (3, 13)
_DATAGRAM_HEADER = 8 if sys.version_info >= (3, 13) else 0

# The errnos of a receive whose descriptor no longer names a socket (see
# _DatagramTransport._datagram).
_GONE = (errno.EBADF, errno.ENOTSOCK)

# The errnos with which io_uring_setup says io_uring is not available here.
_UNAVAILABLE = (errno.EPERM, errno.ENOSYS, errno.EACCES, errno.EOPNOTSUPP)

# Arms a socket transport's next receive (RingProactor.receive, in Rust).
_arm_receive = _blockio.arm_receive

# Runs one turn of a loop (asyncio's BaseEventLoop._run_once, in Rust).
_run_turn = _blockio.run_turn



def _asyncio_own(function: Any, module: Any) -> bool:
    """Whether ``function`` was compiled from ``module``'s file (asyncio's
    own, not a tool's wrapper, which ``functools.wraps`` names alike)."""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_filename == getattr(module, "__file__", None)


# asyncio's own turn, or None if a tool had replaced it (a profiler's or
# monitor's wrapper of BaseEventLoop._run_once) before this module was
# imported: one replaced runs in place of the Rust turn, as it would on
# asyncio's loop.
_ASYNCIO_RUN_ONCE = (
    base_events.BaseEventLoop._run_once
    if _asyncio_own(base_events.BaseEventLoop._run_once, base_events)
    else None
)

# What a socket transport's _plain is while its protocol is a BufferedProtocol.
_NOT_PLAIN = object()


class _Watch:
    """One ``add_reader``/``add_writer`` registration and its poll.

    The poll is on ``own``, a duplicate of the caller's descriptor ``fd``,
    not on ``fd`` itself: the caller may close ``fd`` and another file may
    take its number while a poll is armed or about to be re-armed, and the
    duplicate keeps naming the file the callback was added for. ``file``
    is that file's identity (``st_dev``, ``st_ino``), with which a
    readiness is checked against what ``fd`` names when it is reported.
    """

    __slots__ = ("handle", "token", "fd", "obj", "mask", "own", "file")

    def __init__(self, handle: events.Handle, fd: int, mask: int, file: tuple[int, int], obj: Any) -> None:
        self.handle = handle
        self.token: int | None = None
        self.fd = fd
        #: What the caller passed: ``fd`` or a file object whose number it is.
        self.obj = obj
        self.mask = mask
        self.file = file
        self.own = os.dup(fd)

    def names_its_file(self) -> bool:
        """Whether ``fd`` still names the file the watch was added for."""
        try:
            return _file_id(self.fd) == self.file
        except OSError:
            return False

    def drop(self) -> None:
        """Closes the duplicate (once no poll can go back to its number)."""
        if self.own != -1:
            os.close(self.own)
            self.own = -1


def _file_id(fd: int) -> tuple[int, int]:
    """The identity of the file ``fd`` names (``OSError(EBADF)`` if none)."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _check_pollable(fd: int, mode: int) -> None:
    """Raises asyncio's ``PermissionError`` (EPERM) for a file that has no
    readiness to wait for: a regular file, a directory, ``/dev/null``...

    epoll refuses to watch such a file, and asyncio's selector loop passes
    its refusal on; a ring poll accepts it and reports it ready at once,
    which would call the callback on every iteration. A regular file or a
    directory is refused from its mode alone; a character or block device
    (``/dev/null`` has no readiness, a terminal has) is asked of a
    throwaway epoll, whose answer is the selector loop's; any other file
    (a socket, a FIFO, an eventfd...) has readiness."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        with select.epoll(1) as probe:
            probe.register(fd, select.EPOLLIN)


class _Closing:
    """The end of a transport on Linux.

    The socket is closed, not shut down first (asyncio's proactor
    transports call ``shutdown``, a Windows cure for reads left pending),
    as asyncio's selector transports and uvloop close it: another holder
    of the socket (a duplicate, a child process given it) keeps it usable,
    a reset (``SO_LINGER`` 0, bytes left unread) goes out as a reset, and
    a datagram socket never connected or a stream its peer reset closes
    without the ``ENOTCONN`` of a ``shutdown``. The transport's operations
    in the ring hold the socket's file until the kernel answers their
    cancel, which the transport's close or abort submits at once: a
    receive or send waiting on the socket is answered without waiting
    for the peer, so the last reference goes, and the peer sees the end,
    while the loop runs on; the loop's close cancels and reaps whatever is
    left before it returns. A sendfile waiting for the socket to take
    more is ended (``RingProactor.end_waits``), as a shutdown ended it.

    Once ``connection_lost`` has been called the transport lets go of its
    protocol, socket and loop, as asyncio's selector transports do
    (``get_protocol()`` is None then, as there): asyncio's proactor
    transports keep the protocol, and a protocol that keeps its transport
    (``self.transport = transport``) made a reference cycle with it that
    only the collector freed.
    """

    # Whether a reset by the peer ended the connection (what
    # _sendfile_native asks; the exception itself is not kept: its
    # traceback holds the frames, and so the transport and protocol, it
    # was raised through).
    _lost_reset: bool = False

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        if self._called_connection_lost:
            return
        self._lost_reset = isinstance(exc, ConnectionResetError)
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()
            self._sock = None
            self._protocol = None
            self._loop = None
            server = self._server
            if server is not None:
                if sys.version_info >= (3, 13):
                    server._detach(self)
                else:
                    server._detach()
                self._server = None
            self._called_connection_lost = True

    def _loop_closed(self) -> None:
        """The loop was closed with the connection open: nothing of the
        transport's runs again. Its receive in flight was cancelled with
        the ring (a future whose done callbacks were then let go of, none
        of them pending for good), so that a transport that no protocol
        keeps goes with its last reference (its finaliser then closes the
        socket, as asyncio's does, with asyncio's "unclosed transport"
        warning); a transport with more to let go of extends this."""

    def __repr__(self) -> str:
        info = [type(self).__name__]
        sock = self._sock
        info.append("closed" if sock is None else "closing" if self._closing else "open")
        if sock is not None:
            try:
                info.append(f"fd={getattr(sock, 'pipe', sock).fileno()}")  # the caller's number
            except (ValueError, OSError):  # a pipe's file object closed by its owner
                pass
        if self._read_fut is not None:
            info.append(f"read={self._read_fut!r}")
        if getattr(self, "_write_fut", None) is not None:
            info.append(f"write={self._write_fut!r}")
        if self._buffer:
            info.append(f"write_bufsize={len(self._buffer)}")
        return "<{}>".format(" ".join(info))


class _Writing:
    """The write path of stream and pipe transports.

    As asyncio's proactor transports do, one send is in flight at a time and
    later writes are buffered meanwhile; unlike them, a send that went out
    at once (the ring writes what the descriptor takes without waiting)
    finishes at once, not one loop iteration later: the next write is then
    sent, not buffered, and the protocol sees no extra callback.
    """

    _drain_mark: object = None

    # A socket transport's native write (see _SocketTransport.__init__).
    _tx: Any = None

    def _loop_writing(self, f: Any = None, data: Any = None) -> None:
        try:
            if f is not None and self._write_fut is None and self._closing:
                return  # force-closed meanwhile
            assert f is self._write_fut
            self._write_fut = None
            self._pending_write = 0
            if f:
                f.result()
            if data is None:
                data = self._buffer
                self._buffer = None
            if data:
                fut, left = self._loop._proactor.send_or_future(self._sock, data)
                if fut is not None:
                    self._write_fut = fut
                    if self._tx is not None:
                        self._tx.ready = False
                    # (what the descriptor took at once is not buffered:
                    # the write buffer's size counts the rest, whole until
                    # the ring's send of it ends)
                    self._pending_write = left
                    fut.add_done_callback(self._loop_writing)
                    self._maybe_pause_protocol()
            if self._write_fut is None:
                self._drained()
        except ConnectionResetError as exc:
            self._force_close(exc)
        except OSError as exc:
            self._fatal_error(exc, "Fatal write error on pipe transport")
        finally:
            # A failed send's future holds its error, whose traceback holds
            # this frame: a reference cycle through the transport.
            f = None

    def _drained(self) -> None:
        """Everything written has gone out.

        As on asyncio's selector transports, the protocol is told to resume
        writing before a pending ``close()`` or ``write_eof()`` takes
        effect, and what it writes then still goes out: ``SSLProtocol``
        writes its ``close_notify`` there when its shutdown came while the
        transport was full. (asyncio's proactor transports drop that write,
        and the peer then waits for the ``close_notify`` forever.)
        """
        mark = self._drain_mark = object()
        if self._tx is not None:
            self._update_write_ready()
        self._maybe_resume_protocol()
        if self._drain_mark is not mark or self._write_fut is not None:
            return  # a write made meanwhile went on, or finished and got here itself
        if self._closing:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)
        if self._eof_written:
            self._sock.shutdown(socket.SHUT_WR)
        if self._empty_waiter is not None:
            self._empty_waiter.set_result(None)

    def close(self) -> None:
        # asyncio's proactor version, except that writes are still taken
        # while what was written before is going out (see _drained).
        if self._closing:
            return
        self._closing = True
        if not self._buffer and self._write_fut is None:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)
        if self._read_fut is not None:
            self._read_fut.cancel()
            self._read_fut = None


class _SocketTransport(_Writing, _Closing, proactor_events._ProactorSocketTransport):
    """asyncio's proactor socket transport, with sends finished at once when
    they can be and ended as on Linux, and the errors of asyncio's selector
    transports (its proactor ones word them differently)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        # Receives give new bytes (see `_received`): asyncio's 64 KiB
        # receive buffer per connection is not kept.
        self._data = b""
        # A real socket, which write() may send on at once (a test's mock
        # goes through the proactor's send).
        self._ring_socket = isinstance(self._sock, socket.socket)
        if self._ring_socket:
            # The common write in Rust (`_blockio.StreamTx.write`): the
            # transport's `write` is its bound method, called with no
            # Python frame; every other write comes back to _write_slow.
            self._tx = _blockio.StreamTx(self._loop._proactor._ring, self._sock, self)
            self.write = self._tx.write
            self._update_write_ready()

    def _update_write_ready(self) -> None:
        """Tells the native write whether a write may go to the socket at
        once: nothing in flight or buffered, not closing or lost, no end of
        stream written, no sendfile. Called wherever that may have changed
        other than by a write (which takes _write_slow when not ready)."""
        tx = self._tx
        if tx is not None:
            tx.ready = not (
                self._closing_v
                or self._conn_lost
                or self._write_fut is not None
                or self._buffer
                or self._eof_written
                or self._empty_waiter is not None
            )

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        if not self._called_connection_lost and (self._data or self._loop._proactor.took_unread(self._sock)):
            # Bytes a receive took that the protocol never got (reading was
            # paused, or the close cancelled the receive as it took them):
            # on asyncio's loop they would still be in the kernel's queue,
            # and the close would reset the connection.
            _proactor.reset_on_close(self._sock)
        sock, proactor = self._sock, self._loop._proactor if self._loop is not None else None
        try:
            super()._call_connection_lost(exc)
        finally:
            if self._called_connection_lost:
                self._let_go()
                if proactor is not None and sock is not None:
                    # A sendfile waiting for the socket to take more ends
                    # (see RingProactor.end_waits).
                    proactor.end_waits(sock)

    def _loop_closed(self) -> None:
        """The loop was closed with the connection open: the native write
        is let go of (see :meth:`_drop_native_write`; a write now is
        ``_write_slow``'s, sent at once if the socket takes it, as on
        asyncio's loop), so that a transport that no protocol keeps goes
        with its last reference."""
        super()._loop_closed()
        self._drop_native_write()

    def _drop_native_write(self) -> None:
        """Lets go of the native write, which holds the transport (as
        asyncio's bound write does: a kept ``transport.write`` keeps it)
        while the transport holds it: a reference cycle. A kept write, no
        longer the instance's, goes to the class's ``_write_slow``."""
        if self._tx is not None:
            self._tx = None
            self.__dict__.pop("write", None)

    def _let_go(self) -> None:
        """Drops what the transport holds for its connection, once that
        is lost: with the protocol and the socket (see :class:`_Closing`),
        neither the transport nor its protocol is then part of a reference
        cycle, and both go with their last reference.

        The native write's ``ready`` is already off (the transport is
        closing); a kept write goes to ``_write_slow``, which drops it, as
        asyncio does. The receive holds the plain protocol (``direct``),
        the socket and the context; it is the ring's until the kernel has
        answered its cancel, not the transport's. ``_plain`` is the
        protocol, ``_data`` bytes kept for a paused protocol."""
        self._drop_native_write()
        self._plain = _NOT_PLAIN
        rx = self._rx
        if rx is not None:
            rx.direct = None
            self._rx = None
        self._data = b""

    def write_eof(self) -> None:
        super().write_eof()
        self._update_write_ready()

    def _make_empty_waiter(self) -> Any:
        waiter = super()._make_empty_waiter()
        self._update_write_ready()
        return waiter

    def _reset_empty_waiter(self) -> None:
        super()._reset_empty_waiter()
        self._update_write_ready()

    # The transport's receive, made at its first (see _receive).
    _rx: Any = None

    # The protocol when it is a plain one (not a BufferedProtocol), kept by
    # set_protocol; _NOT_PLAIN otherwise. A message asks
    # `self._protocol is self._plain` rather than isinstance(): a negative
    # isinstance() looks the protocol's __class__ up by name (about 260
    # instructions on 3.11), twice per message. A protocol assigned to
    # _protocol by other means is not this object: its bytes take the
    # general path (_data_received), which asks isinstance() itself.
    _plain: Any = _NOT_PLAIN

    def set_protocol(self, protocol: Any) -> None:
        super().set_protocol(protocol)
        self._plain = _NOT_PLAIN if isinstance(protocol, asyncio.BufferedProtocol) else protocol
        self._update_direct()

    # The transport's reading state (`_closing`, `_paused`, `_protocol`, set
    # by asyncio's code and this class's) as properties, whose setters tell
    # the receive whether a message may go from the ring to the protocol's
    # `data_received` with no Python of the transport's (see
    # _update_direct). The values are kept in `_closing_v`, `_paused_v` and
    # `_protocol_v`, which `write` reads per message.
    _closing_v = False
    _paused_v = False
    _protocol_v: Any = None

    @property
    def _closing(self) -> bool:
        return self._closing_v

    @_closing.setter
    def _closing(self, value: bool) -> None:
        self._closing_v = value
        self._update_direct()
        self._update_write_ready()

    @property
    def _paused(self) -> bool:
        return self._paused_v

    @_paused.setter
    def _paused(self, value: bool) -> None:
        self._paused_v = value
        self._update_direct()

    @property
    def _protocol(self) -> Any:
        return self._protocol_v

    @_protocol.setter
    def _protocol(self, value: Any) -> None:
        self._protocol_v = value
        self._update_direct()

    def is_closing(self) -> bool:
        # (the value, not the property: a stream's drain asks per write)
        return self._closing_v

    def _update_direct(self) -> None:
        """Sets the receive's ``direct``: the plain protocol while the
        transport reads on (not closing, not paused, its protocol the plain
        one ``set_protocol`` kept), else None. With it set, the dispatch
        (Rust) does what :meth:`_received` does for bytes, in Rust: it arms
        the next receive, then calls the protocol's ``data_received`` in the
        receive's context (an exception from it goes to ``_fatal_error``,
        with its traceback, as here). The method is looked up per message,
        as here and in asyncio's transports, so one replaced on the
        protocol object is the one called."""
        rx = self._rx
        if rx is None:
            return
        plain = self._plain
        if self._closing_v or self._paused_v or plain is _NOT_PLAIN or self._protocol_v is not plain:
            rx.direct = None
        else:
            rx.direct = plain

    def _write_slow(self, data: Any) -> None:
        """asyncio's ``write``: every write that is not the native one's
        (see ``__init__``), and every write of a transport on a test's mock
        socket."""
        loop = self._loop  # (None once the connection is lost)
        if loop is not None and loop._proactor is None:
            self._write_after_close(data)
            return
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._eof_written:
            raise RuntimeError("Cannot call write() after write_eof()")
        if data and self._write_fut is None and not self._buffer and self._idle_for_writes():
            self._write_now(data if type(data) is bytes else bytes(data))
        else:
            super().write(data)
            self._update_write_ready()

    write = _write_slow

    def _sent_rest(self, token: int, length: int) -> None:
        """The native write's send whose rest, ``length`` bytes, the ring
        sends as operation ``token``."""
        self._sending_rest(self._loop._proactor.sent_rest(self._sock, token), length)

    def _write_failed(self, exc: OSError) -> None:
        """The native write's send failed with ``exc``."""
        if isinstance(exc, ConnectionResetError):
            self._force_close(exc)
        else:
            self._fatal_error(exc, "Fatal write error on pipe transport")

    def _write_after_close(self, data: Any) -> None:
        """A write after the loop's close, as asyncio's selector loop takes
        it: sent at once when the socket takes all of it; what it does not
        take would need the loop."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if not data or self._closing or self._conn_lost:
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            raise RuntimeError("Event loop is closed")

    def _idle_for_writes(self) -> bool:
        """Whether nothing stands between a write and the socket: no send in
        flight or buffered, not closing or lost, no sendfile."""
        return not (self._closing or self._conn_lost or self._empty_waiter is not None)

    def _write_now(self, data: bytes) -> None:
        """asyncio's write from an idle transport (``_loop_writing`` with
        nothing before it), in one step: the send goes out at once or its
        rest to the ring. With nothing in flight before it, the protocol's
        writing is not paused and no close or end of stream waits for it,
        so a send that went out whole leaves nothing to do."""
        try:
            fut, left = self._loop._proactor.send_or_future(self._sock, data)
        except ConnectionResetError as exc:
            self._force_close(exc)
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal write error on pipe transport")
            return
        if fut is not None:
            self._sending_rest(fut, left)

    def _sending_rest(self, fut: Any, length: int) -> None:
        """A write whose rest, ``length`` bytes (counted in the write
        buffer's size), the ring sends: ``fut``, its completion, is the
        send in flight."""
        self._write_fut = fut
        if self._tx is not None:
            self._tx.ready = False
        self._pending_write = length
        fut.add_done_callback(self._loop_writing)
        self._maybe_pause_protocol()

    def _loop_reading(self, fut: Any = None) -> None:
        """Arms the first receive (scheduled by asyncio's ``__init__`` and
        ``resume_reading``); each completion then goes to :meth:`_received`."""
        if self._closing or self._paused or self._read_fut is not None:
            return
        try:
            self._receive()
        except OSError as exc:
            self._read_failed(exc)

    def _receive(self) -> None:
        rx = self._rx
        if rx is None:
            rx = self._rx = _proactor.StreamReceive(self._loop._proactor, self._sock, _RECV_SIZE)
            self._update_direct()
        _arm_receive(rx, self._received)
        self._read_fut = rx

    def _received(self, data: Any, exc: BaseException | None) -> None:
        """asyncio's read loop, called by the proactor's dispatch with a
        receive's bytes (see :class:`~blockio._proactor.StreamReceive`),
        on receives into new bytes rather than into a buffer of the
        transport's own: the ring's socket receive lends the kernel 2 KiB
        while it waits, so an idle connection pins no 64 KiB buffer (see
        ``LoopRing.recv``). The bytes of a receive that finds reading paused
        stay in ``_data`` until ``resume_reading`` hands them on
        (``_data_received``).

        Bytes on a transport that reads on go to the next receive's arming
        and to ``data_received`` from here, with no other Python call; while
        the receive's ``direct`` is set (see :meth:`_update_direct`) the
        dispatch does the same in Rust and this is not called for bytes."""
        self._read_fut = None
        try:
            if exc is not None:
                raise exc
            if not data:
                return  # end of stream: no next receive
            if self._closing:
                return
            if not self._paused and self._protocol is self._plain:
                _arm_receive(self._rx, self._received)
                self._read_fut = self._rx
        except OSError as exc:
            self._read_failed(exc)
        except exceptions.CancelledError:
            if not self._closing:
                raise
        finally:
            # A raised receive error's traceback holds this frame, which
            # must not hold the error back: a reference cycle through the
            # transport (the `except ... as` clauses unbind it themselves).
            # Defensive: only an error that is neither an OSError nor
            # caught here (re-raised past this frame) reaches it with `exc`
            # bound; no test makes one.
            exc = None
            if data is not None:
                if data and not self._closing and not self._paused and self._protocol is self._plain:
                    # _deliver's body, inline: the message's only Python call.
                    try:
                        self._protocol.data_received(data)
                    except (SystemExit, KeyboardInterrupt):
                        raise
                    except BaseException as exc:
                        self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")
                else:
                    self._data_received(data, len(data))
                    if data and self._read_fut is None:
                        # A buffered protocol's next receive, armed once it
                        # has taken these bytes and not paused reading in
                        # the middle of them (the rest then goes first, at
                        # resume_reading).
                        self._loop_reading()

    def _deliver(self, data: Any) -> None:
        """Hands bytes to a plain protocol; an exception it lets out ends the
        connection as asyncio's selector loop and uvloop end it."""
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _read_failed(self, exc: OSError) -> None:
        if isinstance(exc, ConnectionAbortedError):
            if not self._closing:
                self._fatal_error(exc, "Fatal read error on pipe transport")
        elif isinstance(exc, ConnectionResetError):
            self._force_close(exc)
        else:
            self._fatal_error(exc, "Fatal read error on pipe transport")

    def resume_reading(self) -> None:
        buffered = isinstance(self._protocol, asyncio.BufferedProtocol)
        if self._paused and not self._closing and self._pending_data_length > -1 and buffered:
            # A buffered protocol's next receive is armed once it has taken
            # the bytes kept meanwhile (see _received): no receive is in
            # flight now, and none may finish before they are handed on.
            self._paused = False
            data, self._data = self._data[: self._pending_data_length], b""
            self._pending_data_length = -1
            self._loop.call_soon(self._hand_on, data)
            return
        super().resume_reading()
        if not self._paused:
            self._data = b""  # handed on (or nothing was kept)

    def _pause_for_sendfile(self) -> bool:
        """Pauses reading for a sendfile, as asyncio's ``_sendfile_native``
        does with ``is_reading()`` and ``pause_reading()`` (in debug mode
        through them, which log it); whether reading was on, to be given
        to :meth:`_resume_after_sendfile`."""
        if self._loop.get_debug():
            reading = self.is_reading()
            self.pause_reading()
            return reading
        if self._closing_v or self._paused_v:
            return False
        self._paused = True
        return True

    def _resume_after_sendfile(self, reading: bool) -> None:
        """Resumes reading after a sendfile if :meth:`_pause_for_sendfile`
        paused it: when the receive is still in flight and took nothing
        meanwhile (``resume_reading`` would then only clear the flag), by
        the flag alone; else, and in debug mode, by ``resume_reading``,
        which arms a receive or hands on the bytes kept meanwhile."""
        if not reading:
            return
        if (self._paused_v and not self._closing_v and self._read_fut is not None
                and self._pending_data_length < 0 and not self._data and not self._loop.get_debug()):
            self._paused = False
            return
        self.resume_reading()

    def _hand_on(self, data: bytes) -> None:
        """Hands a buffered protocol the bytes kept while it was paused,
        then arms the next receive unless it paused again."""
        self._data_received(data, len(data))
        if data and self._read_fut is None:
            self._loop_reading()

    def _data_received(self, data: Any, length: int) -> None:
        if self._closing:
            # close() was called: "no more data will be received" (asyncio's
            # contract; its selector loop and uvloop stop reading at once).
            # These are bytes a receive took while reading was paused,
            # handed on by a resume_reading just before the close; asyncio's
            # proactor loop would still give them to the protocol.
            return
        if self._paused:
            self._data = data  # kept for resume_reading
        elif length and not isinstance(self._protocol, asyncio.BufferedProtocol):
            self._deliver(data)
            return
        if self._paused or length == 0 or not isinstance(self._protocol, asyncio.BufferedProtocol):
            super()._data_received(data, length)
            return
        # asyncio's feeding of a buffered protocol, naming the call that failed.
        data = memoryview(data)
        while data:
            try:
                buf = self._protocol.get_buffer(len(data))
                room = len(buf)
                if not room:
                    raise RuntimeError("get_buffer() returned an empty buffer")
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
                return
            n = min(room, len(data))
            try:
                buf[:n] = data[:n]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                # A buffer that cannot take the bytes (read-only, or not
                # bytes-like): asyncio's receive into it fails the same way.
                self._fatal_error(exc, "Fatal read error on socket transport")
                return
            data = data[n:]
            try:
                self._protocol.buffer_updated(n)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")
                return
            if self._closing:
                return  # "no more data will be received" (see above)
            if self._paused and data:
                # Paused by buffer_updated(): the rest waits for
                # resume_reading, as a whole receive's bytes would.
                self._data = bytes(data)
                self._pending_data_length = len(data)
                return
            if data and not isinstance(self._protocol, asyncio.BufferedProtocol):
                # buffer_updated() handed the transport to a plain protocol
                # (set_protocol): the rest is that protocol's, by its
                # data_received, as asyncio's selector loop and uvloop hand
                # it on (they receive the rest after the swap).
                self._deliver(bytes(data))
                return


#: The longest datagram an IP socket receives: an IP packet's length is a
#: 16-bit field (a UDP payload is at most 65,507 bytes over IPv4, 65,527
#: over IPv6).
_IP_DATAGRAM_ROOM = 1 << 16
#: The families whose datagram endpoints receive into ``_IP_DATAGRAM_ROOM``.
_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def _datagram_room(family: int, max_size: int) -> int:
    """The bytes a datagram endpoint of ``family`` receives into, on both
    backends: ``max_size`` (asyncio's 256 KiB), but at most
    ``_IP_DATAGRAM_ROOM`` on an IP socket, where no datagram is longer and
    the larger block costs the allocator (glibc grows and trims its heap,
    or maps and unmaps the block, for each datagram). Unix, netlink and
    packet sockets keep ``max_size``: their datagrams may be longer."""
    return min(max_size, _IP_DATAGRAM_ROOM) if family in _IP_FAMILIES else max_size


class _DatagramTransport(_Closing, proactor_events._ProactorDatagramTransport):
    """asyncio's proactor datagram transport, with the behaviour of its
    selector one on Linux: each datagram is sent at once when the socket
    takes it, else buffered (counted in ``get_write_buffer_size``, pausing
    the protocol's writing) and handed to the ring one at a time, in order
    (a ``sendmsg`` each, which the kernel sends when the socket has room;
    see ``_wait_writable``); received by a ``recvmsg`` kept armed on the
    ring (a :class:`~blockio._proactor.StreamReceive` of a datagram, never
    tried in the loop's thread first), whose completion the ring's
    dispatch hands to the protocol's ``datagram_received`` with no
    future, done callback or ``call_soon`` per datagram (see
    :meth:`_arm`);
    ``close()`` sends what is buffered, then reports ``connection_lost``;
    an empty datagram is delivered as ``b""``; reading goes on after an
    error. (asyncio's proactor version stops writing at ``close()`` and
    then never reports ``connection_lost`` while a send is in flight,
    counts no datagram handed to the proactor, and drops empty datagrams.)
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._buffer_size = 0
        # A real socket, whose receive is the native one (see _arm); a
        # test's mock goes through the proactor's recvfrom futures.
        self._native = isinstance(self._sock, socket.socket)

    # The transport's receive, made at its first arming (see _arm).
    _rx: Any = None

    def get_write_buffer_size(self) -> int:
        return self._buffer_size

    def set_protocol(self, protocol: Any) -> None:
        super().set_protocol(protocol)
        self._update_direct()

    def _update_direct(self) -> None:
        """Sets the receive's ``direct``, the protocol the ring's dispatch
        hands each datagram to (``datagram_received``, looked up per
        datagram, after the next receive is armed, as :meth:`_datagram`
        does), while the transport reads on: None once it is closing or
        lost, when every datagram goes through :meth:`_datagram`."""
        rx = self._rx
        if rx is not None:
            rx.direct = None if self._closing or self._conn_lost else self._protocol

    def _send_one(self, data: bytes, addr: Any) -> None:
        if self._address is not None or addr is None:
            self._sock.send(data)
        else:
            self._sock.sendto(data, addr)

    def sendto(self, data: Any, addr: Any = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if not data and not _SENDS_EMPTY_DATAGRAMS:
            return
        if self._address is not None and addr not in (None, self._address):
            raise ValueError(f"Invalid address: must be None or {self._address}")
        if self._conn_lost:
            if self._conn_lost >= constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                base_events.logger.warning("socket.sendto() raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer and self._write_fut is None:
            try:
                # (_send_one, inlined: a frame less per datagram)
                if self._address is not None or addr is None:
                    self._sock.send(data)
                else:
                    self._sock.sendto(data, addr)
                return
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                self._protocol.error_received(exc)
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return
        self._buffer.append((bytes(data), addr))
        self._buffer_size += len(data) + _DATAGRAM_HEADER
        if self._write_fut is None:
            self._wait_writable()
        self._maybe_pause_protocol()

    def _wait_writable(self) -> None:
        """Hands the first buffered datagram to the ring (a ``sendmsg``,
        sent when the socket has room); the rest wait for its completion,
        so that datagrams go out in the order they were written. An
        address the ring's send cannot take (see
        ``_proactor.pack_address``) waits for a poll instead."""
        data, addr = self._buffer[0]
        fut = self._loop._proactor.send_datagram(
            self._sock, data, None if self._address is not None else addr
        )
        if fut is None:
            self._write_fut = self._loop._proactor.poll(self._sock.fileno(), POLLOUT)
            self._write_fut.add_done_callback(self._sendto_ready)
            return
        self._write_fut = fut
        fut.add_done_callback(self._sent_first)

    def _sent_first(self, fut: Any) -> None:
        """The first buffered datagram's ``sendmsg`` completed: it leaves
        the buffer (its error, if any, goes to ``error_received``, as a
        failed send does on asyncio's selector loop), and the rest are
        sent as on a poll's answer."""
        if fut is not self._write_fut or fut.cancelled():
            return  # aborted meanwhile
        self._write_fut = None
        data, _addr = self._buffer.popleft()
        self._buffer_size -= len(data) + _DATAGRAM_HEADER
        exc = fut.exception()
        try:
            if exc is None:
                self._send_buffered()
            elif isinstance(exc, OSError):
                self._protocol.error_received(exc)
            else:
                self._fatal_error(exc, "Fatal write error on datagram transport")
        finally:
            exc = None
            if not self._conn_lost:
                self._after_sends()

    def _sendto_ready(self, fut: Any) -> None:
        """asyncio's selector ``_sendto_ready``, once a poll says the socket is writable."""
        if fut is not self._write_fut or fut.cancelled():
            return  # aborted meanwhile
        self._write_fut = None
        fut.exception()  # a failed poll: the send below reports the socket's error
        try:
            self._send_buffered()
        finally:
            # Also when error_received raised (the loop's exception handler
            # gets it, as on asyncio's loop): the rest is sent, or the
            # close completes.
            if not self._conn_lost:
                self._after_sends()

    def _send_buffered(self) -> None:
        """Sends the buffered datagrams until the socket is full or fails."""
        while self._buffer:
            data, addr = self._buffer.popleft()
            self._buffer_size -= len(data) + _DATAGRAM_HEADER
            try:
                self._send_one(data, addr)
            except (BlockingIOError, InterruptedError):
                self._buffer.appendleft((data, addr))
                self._buffer_size += len(data) + _DATAGRAM_HEADER
                break
            except OSError as exc:
                self._protocol.error_received(exc)
                break  # the rest when the socket is writable again
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return

    def _after_sends(self) -> None:
        """After sends from the buffer: waits for the socket to take the
        rest, or ends a close that waited for them."""
        self._maybe_resume_protocol()  # may append to the buffer
        if self._buffer:
            if self._write_fut is None:
                self._wait_writable()
        elif self._closing and self._write_fut is None:
            self._conn_lost += 1
            self._call_connection_lost(None)

    def close(self) -> None:
        # As asyncio's selector version: what is buffered is sent first.
        if self._closing:
            return
        self._closing = True
        if self._read_fut is not None:
            self._read_fut.cancel()
            self._read_fut = None
        if not self._buffer and self._write_fut is None:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)

    def _force_close(self, exc: BaseException | None) -> None:
        super()._force_close(exc)
        self._buffer = collections.deque()  # (asyncio's sets it to None)
        self._buffer_size = 0

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        # (a datagram that a receive cancelled by the close took has no
        # reader now)
        if self._sock is not None:
            self._loop._proactor.drop_datagrams(self._sock)
        rx = self._rx
        if rx is not None:
            # (the receive is the ring's until the kernel has answered its
            # cancel; it lets go of the protocol now: no reference cycle)
            rx.direct = rx.peer = None
            self._rx = None
        super()._call_connection_lost(exc)

    def _arm(self) -> None:
        """Arms the transport's next receive: a ``recvmsg`` of at most
        ``max_size`` bytes on the ring, kept in its slab with the receive
        (and the socket held open until the kernel is done with it); its
        completion goes to the protocol from the ring's
        dispatch (see :meth:`_update_direct`), or to :meth:`_datagram`
        (an error, a datagram handed on behind queued callbacks, a
        transport closing). A connected endpoint's datagrams are handed
        on with its peer's address (``peer``), as asyncio's proactor
        transport hands them.

        Each receive allocates its buffer: at most 64 KiB on an IP
        socket, whose datagrams are never longer (an IP packet's length
        is 16 bits), and ``max_size`` (256 KiB, asyncio's) on any other
        (a Unix socket's datagrams may be that long). On an IP socket the
        256 KiB cost a burst of datagrams 2.2x the CPU: glibc's ``malloc``
        grew its heap (``brk``) for each such block and gave the top back
        at its ``free``, three ``brk`` calls per datagram and fresh pages
        to fault in (docs/benchmarks.md, "A datagram endpoint's receive
        buffer")."""
        rx = self._rx
        if rx is None:
            room = _datagram_room(self._sock.family, self.max_size)
            rx = self._rx = _proactor.StreamReceive(self._loop._proactor, self._sock, room, datagram=True)
            rx.peer = self._address
            self._update_direct()
        _arm_receive(rx, self._datagram)
        self._read_fut = rx

    def _datagram(self, got: Any, exc: BaseException | None) -> None:
        """A receive's outcome that the dispatch does not hand to the
        protocol itself: ``got``, ``(bytes, address)``, or ``exc``. As on
        asyncio's selector loop, the next receive is armed before the
        protocol is called (an exception from it goes to the loop's
        exception handler, and reading goes on): a datagram goes to
        ``datagram_received``, an ``OSError`` (a connected socket's ICMP
        error) to ``error_received``. After an error that says the
        descriptor no longer names a socket (closed behind the
        transport's back) no receive is armed: every one would fail alike,
        once per turn of the loop."""
        self._read_fut = None
        if self._conn_lost or self._closing:
            return
        if exc is not None and not isinstance(exc, OSError):
            raise exc  # (a receive cancelled by other than the close)
        if exc is None or exc.errno not in _GONE:
            self._arm()
        if exc is not None:
            try:
                self._protocol.error_received(exc)
            finally:
                exc = None  # (its traceback holds this frame: no cycle)
            return
        data, addr = got
        self._protocol.datagram_received(data, self._address if self._address is not None else addr)

    def _loop_reading(self, fut: Any = None) -> None:
        """asyncio's proactor read loop, delivering empty datagrams and
        reading on after a failed receive: as on asyncio's selector loop,
        a connected socket's ICMP error goes to ``error_received`` and the
        next receive waits for the next datagram (or error). On a real
        socket only its first call (asyncio's ``__init__`` schedules it)
        comes here, which arms the native receive (:meth:`_arm`)."""
        if self._native and fut is None:
            if not (self._conn_lost or self._closing) and self._read_fut is None:
                self._arm()
            return
        received = False
        data = addr = None
        try:
            if self._conn_lost or self._closing:
                return
            self._read_fut = None
            if fut is not None:
                res = fut.result()
                if self._address is not None:
                    data, addr = res, self._address
                else:
                    data, addr = res
                received = True
            if self._address is not None:
                self._read_fut = self._loop._proactor.recv(self._sock, self.max_size)
            else:
                self._read_fut = self._loop._proactor.recvfrom(self._sock, self.max_size)
        except OSError as exc:
            self._protocol.error_received(exc)
            if fut is not None and self._read_fut is None and not (self._closing or self._conn_lost):
                self._loop_reading()
        except exceptions.CancelledError:
            if not self._closing:
                raise
        else:
            self._read_fut.add_done_callback(self._loop_reading)
        finally:
            # A failed receive's future holds its error, whose traceback
            # holds this frame: a reference cycle through the transport.
            fut = None
            if received:
                self._protocol.datagram_received(data, addr)


def _check_pipe(pipe: Any, message: str) -> None:
    """Refuses a file that is no pipe, socket or character device (a
    regular file, a directory) with asyncio's ``ValueError``: a pipe
    transport's reads and writes would go through it once and end."""
    mode = os.fstat(pipe.fileno()).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        raise ValueError(message)


def _held(pipe: Any) -> Any:
    """The file a pipe transport works on: a socket as it is (held by the
    proactor's operations), another file as a :class:`~blockio._proactor.HeldPipe`,
    non-blocking as asyncio's Unix pipe transports make it (a write the
    descriptor cannot take at once then says so instead of blocking the
    loop's thread)."""
    os.set_blocking(pipe.fileno(), False)
    return pipe if isinstance(pipe, socket.socket) else _proactor.HeldPipe(pipe)


class _Pipe:
    """A pipe transport on a held file (see :func:`_held`), whose
    ``get_extra_info("pipe")`` is still the caller's file object."""

    # (for __del__ when the file is refused before the transport is made)
    _sock: Any = None

    def _set_extra(self, sock: Any) -> None:
        self._extra["pipe"] = getattr(sock, "pipe", sock)


class _ReadPipeTransport(_Pipe, _Closing, proactor_events._ProactorReadPipeTransport):
    """asyncio's proactor read pipe transport, on a held non-blocking
    descriptor and ended as on Linux."""

    def __init__(self, loop: Any, pipe: Any, *args: Any, **kw: Any) -> None:
        _check_pipe(pipe, "Pipe transport is for pipes/sockets only.")
        super().__init__(loop, _held(pipe), *args, **kw)

    def _eof_received(self) -> None:
        # As asyncio's Unix read pipe transport: the end of a pipe ends the
        # transport, whatever eof_received() returns (a pipe has no other
        # half to keep open). asyncio's proactor version stays open when it
        # returns true, as StreamReaderProtocol's does, and is then left
        # unclosed.
        try:
            self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        self.close()


class _WritePipeTransport(_Pipe, _Writing, _Closing, proactor_events._ProactorBaseWritePipeTransport):
    """A write pipe that closes when its reader goes away.

    asyncio's proactor version reads from the write end to learn that (a
    Windows idiom); on Linux the write end of a pipe reports ``POLLERR``
    once no reader is left, so a ring poll waits for that instead.
    """

    def __init__(self, loop: Any, pipe: Any, *args: Any, **kw: Any) -> None:
        _check_pipe(pipe, "Pipe transport is only for pipes, sockets and character devices")
        super().__init__(loop, _held(pipe), *args, **kw)
        self._read_fut = self._loop._proactor.wait_closed(self._sock)
        if self._read_fut is not None:
            self._read_fut.add_done_callback(self._pipe_closed)

    def _pipe_closed(self, fut: asyncio.Future) -> None:
        if fut.cancelled() or self._closing or fut is not self._read_fut:
            return
        self._read_fut = None
        if self._write_fut is not None:
            self._force_close(BrokenPipeError())
        else:
            self.close()


def _async_file(file: Any) -> bool:
    """Whether ``file`` is an asynchronous file object (a ``blockio.open``
    file, an aiofiles one): its ``seek`` is a coroutine function."""
    return inspect.iscoroutinefunction(getattr(file, "seek", None))


async def _before_sendfile(file: Any) -> bool:
    """Lands what an asynchronous file open for writing still buffers or
    has in its write queue (``flush``), so that the sendfile, which reads
    the descriptor at an offset, sends the bytes written before it;
    whether there was a flush (the size may have changed)."""
    if _async_file(file) and any(c in getattr(file, "mode", "") for c in "wax+"):
        await file.flush()
        return True
    return False


async def _place_after_sendfile(file: Any, position: int) -> None:
    """Sets ``file``'s position to ``position`` after a sendfile (asyncio's
    ``loop.sendfile`` leaves the file there), awaiting an asynchronous
    file's ``seek``."""
    moved = file.seek(position)
    if inspect.isawaitable(moved):
        await moved


# A sendfile's step on blockio's ring loop: the most bytes found in the
# page cache and sent with one ``os.sendfile``, and the most read on the
# ring (into one new buffer, then sent) where they are not all cached.
_SENDFILE_STEP = 1 << 20
_SENDFILE_READ = 256 * 1024
# The count of an ``os.sendfile`` that reaches the file's end is rounded up
# to a multiple of this where the caller's count allows: the kernel stops
# at the end, and refuses (``EINVAL``) an ``O_DIRECT`` file's count that is
# not a multiple of its blocks (asyncio's loop, without a count, asks for
# the file's size in every step).
_PAGE = mmap.PAGESIZE
# The offsets and counts a sendfile's native call takes (see
# _plain_sendfile): its arithmetic is on 64-bit integers.
_NATIVE_LIMIT = 1 << 62


def _write_only(file: Any) -> bool:
    """Whether ``file`` says it is open for writing only (its ``mode``:
    ``"wb"``, ``"ab"``, ``"xb"``), so that its descriptor cannot be read."""
    mode = getattr(file, "mode", None)
    return isinstance(mode, str) and "r" not in mode and "+" not in mode


def _plain_sendfile(file: Any, offset: Any, count: Any) -> int | None:
    """The descriptor of ``file`` when ``loop.sendfile``'s arguments are
    plainly valid and the file needs nothing done before its bytes are
    read from the descriptor: opened ``"rb"`` (so no writes to land first,
    see :func:`_before_sendfile`), an ``int`` offset from 0 up and an
    ``int`` count above 0 or None, each below 2**62 (the native call's
    64-bit arithmetic), and a descriptor that is a C ``int``. None
    otherwise (the general path then checks them, with asyncio's errors,
    and sends any size)."""
    if getattr(file, "mode", None) != "rb" or type(offset) is not int or not 0 <= offset < _NATIVE_LIMIT:
        return None
    if count is not None and (type(count) is not int or not 0 < count < _NATIVE_LIMIT):
        return None
    try:
        fileno = file.fileno()
    except (AttributeError, io.UnsupportedOperation, OSError, ValueError):
        return None
    return fileno if type(fileno) is int and 0 <= fileno < 1 << 31 else None


@types.coroutine
def _go_on(steps: Any, yielded: Any) -> Any:
    """The rest of an awaitable whose iterator ``steps`` was stepped once
    already and yielded ``yielded``, run as the awaiting task's own steps
    (``yield from``'s part after its first step): what it yields goes to
    the task, what the task sends or throws goes to it."""
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:  # (a cancel: the awaitable's to handle)
            call, arg = steps.throw, exc
        else:
            call, arg = steps.send, sent
        try:
            yielded = call(arg)
        except StopIteration as stop:
            return stop.value
        finally:
            arg = None  # (a thrown error's traceback holds this frame)


def _sendfile_closed(sent: int) -> ConnectionAbortedError:
    """The error of a sendfile whose socket was closed (a transport's abort)."""
    return ConnectionAbortedError(errno.ECONNABORTED, f"sendfile: the socket was closed after {sent} bytes")


def _sendable(data: Any) -> Any:
    """``data`` for ``sock_sendall``, taken as ``socket.send`` takes it: a
    buffer of other items than bytes (``array('i')``) as a flat byte view
    of it, a non-contiguous one refused with ``socket.send``'s
    ``BufferError``; what is no buffer is left to the send, which refuses
    it with ``socket.send``'s ``TypeError``."""
    try:
        view = memoryview(data)
    except TypeError:
        return data
    if not view.c_contiguous:
        # The exporter's own refusal of a plain byte buffer, as socket.send
        # asks for one (numpy's ValueError), else a memoryview's.
        struct.unpack_from("0s", data)
        raise BufferError("memoryview: underlying buffer is not C-contiguous")
    if view.format != "B" or view.ndim != 1:
        return view.cast("B")
    return data


def _writable_bytes(buf: Any) -> Any:
    """``buf`` for ``sock_recv_into``, refused before any byte is taken, with
    the ``TypeError`` of ``socket.recv_into``, when it is read-only or not
    contiguous; a buffer of other items than bytes (``array('i')``) as a
    flat byte view of it. (``buf`` itself otherwise: a view would keep it
    from being resized after the call, until the view is collected.)"""
    try:
        view = memoryview(buf)
    except TypeError:
        view = None
    if view is None or view.readonly or not view.c_contiguous:
        raise TypeError(f"recv_into() argument 1 must be read-write bytes-like object, not {type(buf).__name__}")
    with view:
        if view.format == "B" and view.ndim == 1:
            return buf
    return memoryview(buf).cast("B")


class UringEventLoop(proactor_events.BaseProactorEventLoop):
    """An asyncio event loop on io_uring (see the module's doc)."""

    backend = "uring"

    def __init__(self, ring: Any = None) -> None:
        # BaseProactorEventLoop.__init__, without its installing the
        # wake-up descriptor for signals: as on asyncio's Unix loop, that
        # happens when a signal handler is added.
        base_events.BaseEventLoop.__init__(self)
        proactor = RingProactor(ring if ring is not None else _blockio.LoopRing())
        self._proactor = proactor
        self._selector = proactor
        self._self_reading_future = None
        self._receive_turns: _sock_turns.Turns = {}
        self._send_turns: _sock_turns.Turns = {}
        self._accept_futures: dict[int, Any] = {}
        # Every server's accept: servers may share a listener, whose number
        # keys only the last one in _accept_futures.
        self._server_accepts: set[_proactor.ServerAccept] = set()
        self._signal_handlers: dict[int, events.Handle] = {}
        self._readers: dict[int, _Watch] = {}
        self._writers: dict[int, _Watch] = {}
        # Watches removed while their poll was still queued, not yet the
        # kernel's (a busy ring): each duplicate is closed when its poll
        # answers (or, at close(), once the ring is).
        self._unwatched: set[_Watch] = set()
        # descriptor -> weak reference to the transport made on it (a plain
        # dict: a WeakValueDictionary's store runs three Python calls per
        # connection; a dead reference is replaced when the number is reused)
        self._transports: dict[int, weakref.ref] = {}
        # Listening Unix sockets to unlink when they stop serving (3.13+'s
        # create_unix_server(cleanup_socket=True)): socket -> inode.
        self._unix_server_sockets: dict[Any, int] = {}
        # pidfd -> (pid, transport) of each child whose exit is polled for
        self._children: dict[int, tuple[int, Any]] = {}
        proactor.set_loop(self)
        self._make_self_pipe()
        #: The wake-up socket's number (kept for after its close).
        self._wakeup_number = self._csock.fileno()
        _LOOPS[self._wakeup_number] = self
        # The wake-up socket's receive, always pending from here to close().
        self.call_soon(self._loop_self_reading)

    # -- the wake-up socket: call_soon_threadsafe and signals ---------------

    def _loop_self_reading(self, f: Any = None) -> None:
        try:
            if f is not None:
                data = f.result()
                if data:
                    self._process_self_data(data)
            if self._self_reading_future is not f:
                return
            f = self._proactor.recv(self._ssock, 4096)
        except exceptions.CancelledError:
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.call_exception_handler(
                {"message": "Error on reading from the event loop self pipe", "exception": exc, "loop": self}
            )
        else:
            self._self_reading_future = f
            f.add_done_callback(self._loop_self_reading)

    def run_forever(self) -> None:
        """Runs until :meth:`stop`, holding Python's wake-up descriptor
        (:func:`_holding_wakeup_fd`) so that Ctrl-C ends the wait."""
        with _holding_wakeup_fd(self):
            super().run_forever()

    def _run_once(self) -> None:
        """asyncio's step, run by Rust (``_blockio.run_turn``: see the
        module's doc); the proactor's wait runs there too unless the
        proactor was replaced by another kind."""
        if base_events.BaseEventLoop._run_once is not _ASYNCIO_RUN_ONCE:
            base_events.BaseEventLoop._run_once(self)
            return
        proactor = self._proactor
        _run_turn(self, proactor if type(proactor) is RingProactor else None)

    # asyncio's Unix signal handling, over the wake-up socket above.
    _handle_signal = unix_events._UnixSelectorEventLoop._handle_signal
    _check_signal = unix_events._UnixSelectorEventLoop._check_signal

    def add_signal_handler(self, sig: int, callback: Callable, *args: Any) -> None:
        """Calls ``callback(*args)`` in the loop on signal ``sig`` (see :func:`_add_signal_handler`)."""
        _add_signal_handler(self, unix_events._UnixSelectorEventLoop.add_signal_handler, sig, callback, *args)

    def remove_signal_handler(self, sig: int) -> bool:
        """Removes the handler of ``sig`` (see :func:`_remove_signal_handler`)."""
        return _remove_signal_handler(self, unix_events._UnixSelectorEventLoop.remove_signal_handler, sig)

    def _process_self_data(self, data: bytes) -> None:
        _hand_signals(self, data)

    def close(self) -> None:
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        if not sys.is_finalizing():
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
        else:
            self._signal_handlers.clear()
        watches = [*self._readers.values(), *self._writers.values(), *self._unwatched]
        for w in watches:
            w.handle.cancel()
        self._readers.clear()
        self._writers.clear()
        self._unwatched.clear()
        # BaseProactorEventLoop.close, except for its clearing Python's
        # wake-up descriptor whoever holds it (on Windows the proactor loop
        # holds it from its creation): a loop closed while another runs
        # (or collected then, unclosed) would take that one's wake-up, and
        # a Ctrl-C landing on another thread would no longer end its wait.
        # Only this loop's own is cleared.
        _drop_wakeup_fd(self._csock)
        self._stop_accept_futures()
        for acc in self._server_accepts:
            acc.stop()
        self._server_accepts.clear()
        self._close_self_pipe()
        self._proactor.close()
        self._proactor = None
        self._selector = None
        self._hand_over_children()
        base_events.BaseEventLoop.close(self)
        # The ring is closed: the kernel no longer uses the duplicates.
        for w in watches:
            w.drop()
        for ref in self._transports.values():
            transport = ref()
            if isinstance(transport, _Closing):
                transport._loop_closed()
        self._transports.clear()

    # -- files: blockio's engine reads on this ring --------------------------

    def _ring_pread(self, fd: int, offset: int, length: int) -> Any:
        """A future for a read of at most ``length`` bytes of the file
        ``fd`` at ``offset`` on this loop's ring (``Engine.aread``'s read
        not served inline: see ``Engine._aread_on_loop_ring``); None once
        the loop is closed."""
        proactor = self._proactor
        if proactor is None or proactor._ring is None:
            return None
        return proactor.pread(fd, offset, length)

    def _ring_pread_into(self, fd: int, offset: int, buf: Any) -> Any:
        """A future for a read of the file ``fd`` at ``offset`` into
        ``buf`` on this loop's ring (``Engine.areadinto``'s: see
        ``Engine._areadinto_on_loop_ring``); None once the loop is closed."""
        proactor = self._proactor
        if proactor is None or proactor._ring is None:
            return None
        return proactor.pread_into(fd, offset, buf)

    def _ring_pwrite(self, fd: int, offset: int, data: Any) -> Any:
        """A future for a write of ``data`` to the file ``fd`` at
        ``offset`` on this loop's ring (``Engine.awrite``'s: see
        ``Engine._awrite_on_loop_ring``), never cancelled once submitted
        (``LoopRing.pwrite``); None once the loop is closed."""
        proactor = self._proactor
        if proactor is None or proactor._ring is None:
            return None
        return proactor.pwrite(fd, offset, data)

    def _ring_open(self, path: bytes, flags: int, mode: int) -> Any:
        """A future for an ``openat`` of ``path`` on this loop's ring
        (``blockio.open``'s open: see ``Engine._aopen``), its result the
        descriptor; None once the loop is closed."""
        proactor = self._proactor
        if proactor is None or proactor._ring is None:
            return None
        return proactor.openat(path, flags, mode)

    def _ring_opened(self, fut: Any) -> Any:
        """The descriptor of a ``_ring_open`` future, now the caller's to
        own, or None if the caller is not to have it (cancelled, or closed
        by this loop's close: see ``RingProactor.take_opened``)."""
        proactor = self._proactor
        if proactor is None:
            return None
        return proactor.take_opened(fut)

    # -- add_reader / add_writer ---------------------------------------------

    def _ensure_fd_no_transport(self, fd: Any) -> None:
        fileno = fd
        if not isinstance(fileno, int):
            try:
                fileno = int(fileno.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fd!r}") from None
        ref = self._transports.get(fileno)
        transport = None if ref is None else ref()
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    @staticmethod
    def _fileno(fd: Any) -> int:
        if isinstance(fd, int):
            fileno = fd
        else:
            try:
                fileno = int(fd.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fd!r}") from None
        if fileno < 0:
            raise ValueError(f"Invalid file descriptor: {fileno}")
        return fileno

    def _watch(self, table: dict[int, _Watch], fd: Any, mask: int, callback: Callable, args: tuple) -> None:
        self._check_closed()
        fileno = self._fileno(fd)
        handle = events.Handle(callback, args, self, None)
        st = os.fstat(fileno)  # OSError(EBADF) for a descriptor that is not open, as epoll says
        file = (st.st_dev, st.st_ino)
        w = table.get(fileno)
        if w is not None:
            if w.own != -1 and w.file == file:
                w.handle.cancel()
                w.handle = handle
                return
        _check_pollable(fileno, st.st_mode)
        if w is not None:
            # The number was closed without remove_*() and names another
            # file now: that file gets a watch of its own.
            self._unwatch(table, fileno)
        w = _Watch(handle, fileno, mask, file, fd)
        table[fileno] = w
        self._arm(table, w)

    def _arm(self, table: dict[int, _Watch], w: _Watch) -> None:
        if table.get(w.fd) is not w or w.own == -1 or self._proactor is None:
            return

        def fired(events_or_error: int) -> None:
            w.token = None
            if table.get(w.fd) is not w:
                self._unwatched.discard(w)
                w.drop()  # removed meanwhile; this was its poll's answer
                return
            if events_or_error < 0:
                return  # the poll failed: nothing more to report
            if not w.names_its_file():
                # The caller closed the descriptor (and its number may name
                # another file now): as in epoll, which forgets a closed
                # file, the watch never fires again.
                w.drop()
                return
            if not w.handle._cancelled:
                self._ready.append(w.handle)
            # Re-armed before the next wait, once the callback has run:
            # readiness that remains is reported again (level-triggered).
            self._proactor._before_wait.append(lambda: self._arm(table, w))

        w.token = self._proactor.poll_callback(w.own, w.mask, fired)

    def _unwatch(self, table: dict[int, _Watch], fd: Any) -> bool:
        try:
            fileno = self._fileno(fd)
        except ValueError:
            # A file object closed since it was added (its fileno() is -1):
            # found by the object, as asyncio's selector finds it.
            fileno = next((w.fd for w in table.values() if w.obj is fd), None)
            if fileno is None:
                raise
        w = table.pop(fileno, None)
        if w is None:
            return False
        w.handle.cancel()
        if w.token is not None and self._proactor is not None and not self._proactor.cancel_callback(w.token):
            # The kernel took not all of the ring's queue (a busy ring): the
            # duplicate stays open until the poll answers, since a poll
            # still queued goes to its number.
            self._unwatched.add(w)
        else:
            # The poll, if any, is in the kernel, which holds its file, not
            # the number: the duplicate is closed now, not at the loop's
            # next turn (a program adding and removing readers without
            # running the loop would otherwise run out of descriptors);
            # its callback is forgotten, its poll's answer reaching nothing.
            w.token = None
            w.drop()
        return True

    def add_reader(self, fd: Any, callback: Callable, *args: Any) -> None:
        """Calls ``callback(*args)`` whenever ``fd`` is readable."""
        self._ensure_fd_no_transport(fd)
        self._watch(self._readers, fd, POLLIN, callback, args)

    def remove_reader(self, fd: Any) -> bool:
        """Stops watching ``fd`` for reading; False if it was not watched."""
        self._ensure_fd_no_transport(fd)
        return self._unwatch(self._readers, fd)

    def add_writer(self, fd: Any, callback: Callable, *args: Any) -> None:
        """Calls ``callback(*args)`` whenever ``fd`` is writable."""
        self._ensure_fd_no_transport(fd)
        self._watch(self._writers, fd, POLLOUT, callback, args)

    def remove_writer(self, fd: Any) -> bool:
        """Stops watching ``fd`` for writing; False if it was not watched."""
        self._ensure_fd_no_transport(fd)
        return self._unwatch(self._writers, fd)

    # -- transports: remembered by descriptor --------------------------------

    def _owned(self, fileobj: Any, transport: Any) -> Any:
        try:
            self._transports[fileobj.fileno()] = weakref.ref(transport)
        except (AttributeError, ValueError, OSError):
            pass
        return transport

    def _make_socket_transport(self, sock, protocol, waiter=None, extra=None, server=None):
        return self._owned(sock, _SocketTransport(self, sock, protocol, waiter, extra, server))

    def _make_ssl_transport(
        self, rawsock, protocol, sslcontext, waiter=None, *, server_side=False, server_hostname=None,
        extra=None, server=None, ssl_handshake_timeout=None, ssl_shutdown_timeout=None,
    ):
        kw = {"ssl_handshake_timeout": ssl_handshake_timeout}
        if sys.version_info >= (3, 11):
            kw["ssl_shutdown_timeout"] = ssl_shutdown_timeout
        ssl_protocol = sslproto.SSLProtocol(self, protocol, sslcontext, waiter, server_side, server_hostname, **kw)
        raw = _SocketTransport(self, rawsock, ssl_protocol, extra=extra, server=server)
        self._owned(rawsock, raw)
        return ssl_protocol._app_transport

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        return self._owned(sock, _DatagramTransport(self, sock, protocol, address, waiter, extra))

    def _make_read_pipe_transport(self, sock, protocol, waiter=None, extra=None):
        return self._owned(sock, _ReadPipeTransport(self, sock, protocol, waiter, extra))

    def _make_write_pipe_transport(self, sock, protocol, waiter=None, extra=None):
        return self._owned(sock, _WritePipeTransport(self, sock, protocol, waiter, extra))

    # -- low-level socket calls: asyncio's checks, then the proactor ---------

    def _check_sock(self, sock: socket.socket) -> None:
        if self._proactor is None:
            raise RuntimeError("Event loop is closed")
        base_events._check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")

    def _check_receiving_sock(self, sock: socket.socket) -> None:
        """:meth:`_check_sock`, and a socket a transport owns is refused
        with asyncio's ``RuntimeError``: the transport always has a receive
        of its own in flight, which the call's would compete with. (asyncio's
        selector loop refuses it when the call would wait.)"""
        self._check_sock(sock)
        fd = sock.fileno()
        if fd in self._transports:
            self._ensure_fd_no_transport(fd)

    @staticmethod
    def _abandon(fut: Any, keep: Callable[[Any], None]) -> None:
        """A socket call ended (cancelled, or an exception thrown in) while
        its operation ``fut`` was on the ring: cancelled there if it has
        not come (what the kernel took meanwhile is kept by the proactor's
        cancel), else ``keep(result)`` keeps what it took (bytes, a
        datagram, a connection) for the next call on the socket."""
        if not fut.done():
            fut.cancel()
        elif not fut.cancelled() and fut.exception() is None:
            keep(fut.result())

    async def sock_recv(self, sock, n):
        self._check_receiving_sock(sock)
        if type(n) is not int:
            n = operator.index(n)  # (socket.recv's TypeError, before any byte is taken)
        if not 0 < n <= sys.maxsize:
            # (socket.recv's own refusals, which asyncio's loop calls first)
            if n > 0 or n < -sys.maxsize - 1:
                raise OverflowError("Python int too large to convert to C ssize_t")
            if n < 0:
                raise ValueError("negative buffersize in recv")
            return b""  # (as socket.recv(0): nothing taken, even a datagram)
        turns, key = self._receive_turns, id(sock)
        if key in turns:
            await _sock_turns.wait(turns, self, key)
        else:
            turns[key] = None
        try:
            got = self._proactor.recv_at_once(sock, n)
            if got is not None:
                return got
            fut = self._proactor.recv(sock, n)
            try:
                return await fut
            except BaseException:
                self._abandon(fut, lambda got: self._proactor.keep_received(sock, got))
                raise
        finally:
            waiters = turns.pop(key, None)
            if waiters:
                _sock_turns.hand_on(turns, key, waiters)

    async def sock_recv_into(self, sock, buf):
        self._check_receiving_sock(sock)
        target = _writable_bytes(buf)  # refused before waiting for a turn
        if not len(target):
            return 0  # (as socket.recv_into of no room: nothing taken, even a datagram)
        turns, key = self._receive_turns, id(sock)
        if key in turns:
            await _sock_turns.wait(turns, self, key)
        else:
            turns[key] = None
        try:
            got = self._proactor.recv_into_at_once(sock, target)
            if got is not None:
                return got
            fut = self._proactor.recv_into(sock, target)
            try:
                return await fut
            except BaseException:
                # (the bytes the kernel wrote into ``buf``, copied)
                self._abandon(fut, lambda n: self._proactor.keep_received(sock, bytes(memoryview(buf).cast("B")[:n])))
                raise
        finally:
            waiters = turns.pop(key, None)
            if waiters:
                _sock_turns.hand_on(turns, key, waiters)

    async def sock_recvfrom(self, sock, bufsize):
        self._check_receiving_sock(sock)
        return await _sock_turns.run(self._receive_turns, self, sock, self._recvfrom, sock, bufsize)

    async def _recvfrom(self, sock, bufsize):
        """:meth:`sock_recvfrom` in its socket's turn."""
        fut = self._proactor.recvfrom(sock, bufsize)
        try:
            return await fut
        except BaseException:
            self._abandon(fut, lambda got: self._proactor.keep_datagram(sock, got, first=True))
            raise

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        self._check_receiving_sock(sock)
        nbytes = nbytes or len(buf)  # (items, as asyncio's loop counts them)
        target = _writable_bytes(buf)  # refused as socket.recvfrom_into refuses it
        return await _sock_turns.run(self._receive_turns, self, sock, self._recvfrom_into, sock, target, nbytes)

    async def _recvfrom_into(self, sock, buf, nbytes):
        """:meth:`sock_recvfrom_into` in its socket's turn."""
        fut = self._proactor.recvfrom_into(sock, buf, nbytes)
        try:
            return await fut
        except BaseException:
            # (the datagram the kernel wrote into ``buf``, copied, ahead of
            # any kept since)
            self._abandon(fut, lambda got: self._proactor.keep_datagram(
                sock, (bytes(memoryview(buf).cast("B")[: got[0]]), got[1]), first=True))
            raise

    async def sock_sendall(self, sock, data):
        self._check_sock(sock)
        if type(data) is not bytes:
            data = _sendable(data)
        turns, key = self._send_turns, id(sock)
        if key in turns:
            await _sock_turns.wait(turns, self, key)
            fut = None
        else:
            fut, _ = self._proactor.send_or_future(sock, data)
            if fut is None:  # all sent at once: no turn taken
                return
            turns[key] = None
        try:
            await (self._proactor.send(sock, data) if fut is None else fut)
        finally:
            waiters = turns.pop(key, None)
            if waiters:
                _sock_turns.hand_on(turns, key, waiters)

    async def sock_sendto(self, sock, data, address):
        self._check_sock(sock)
        return await _sock_turns.run(self._send_turns, self, sock, self._proactor.sendto, sock, data, 0, address)

    async def sock_connect(self, sock, address):
        self._check_sock(sock)
        if sock.family == socket.AF_INET or (base_events._HAS_IPv6 and sock.family == socket.AF_INET6):
            resolved = await self._ensure_resolved(
                address, family=sock.family, type=sock.type, proto=sock.proto, loop=self
            )
            _, _, _, _, address = resolved[0]
        try:
            return await self._proactor.connect(sock, address)
        except OSError as exc:
            # asyncio's answers where the ring's connect tells more than
            # its connect call: a socket already connected is left as it is,
            # one whose connect is under way is waited for, a closed one is
            # the bad descriptor it is.
            if exc.errno == errno.EISCONN:
                return None
            if exc.errno in (errno.EALREADY, errno.EINPROGRESS):
                return await self._proactor._connected(sock, address)
            if exc.errno == errno.EAGAIN and sock.family == socket.AF_UNIX:
                # A Unix listener's backlog is full: asyncio's selector loop
                # waits for the socket to be writable, then asks SO_ERROR.
                return await self._proactor._connected(sock, address)
            if exc.errno == errno.EBADF:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF)) from None
            if sock.gettimeout() != 0:
                # asyncio's loop connects a blocking socket (or one with a
                # timeout) by its connect call, waiting, whose error is
                # the plain OSError; "Connect call failed" is that of a
                # non-blocking socket's connect once under way.
                raise _proactor.os_error(exc.errno) from None
            raise

    async def sock_accept(self, sock):
        self._check_sock(sock)
        fut = self._proactor.accept(sock)
        try:
            return await fut
        except BaseException:
            self._abandon(fut, lambda got: self._proactor.keep_accepted(sock, *got))
            raise

    async def _sendfile_native(self, transp, file, offset, count):
        if transp._empty_waiter is not None:
            # A native sendfile is in progress on the transport (it holds
            # the empty waiter from its start to its end). asyncio's
            # selector loop, Linux's default and the "epoll" backend, takes
            # the transport out of its table of transports for a sendfile,
            # and refuses a second with that table's KeyError, the
            # socket's number; its proactor loop would say "Empty waiter
            # is already set" (a RuntimeError). The first sendfile goes on.
            raise KeyError(transp._sock.fileno())
        if transp._eof_written:
            # (the arguments checked first, with asyncio's errors, as its
            # sock_sendfile checks them before its os.sendfile)
            self._check_sendfile_params(transp._sock, file, offset, count)
            # asyncio's selector loop: its os.sendfile fails (EPIPE) before
            # any byte, so the sendfile is "not available", and its fallback
            # (if allowed) raises the transport's write error.
            raise exceptions.SendfileNotAvailableError("os.sendfile call failed")
        tx = getattr(transp, "_tx", None)
        if tx is not None and tx.ready:
            fileno = _plain_sendfile(file, offset, count)
            if fileno is not None:
                # The common case in one native call (see StreamTx.sendfile):
                # a cached range sent as far as the socket takes it now.
                got = tx.sendfile(fileno, offset, count or 0)
                if got is not None:
                    sent, end, failed = got
                    if offset + sent >= end and not failed:
                        if sent > 0:
                            await self._place_after_sent(transp, file, offset + sent)
                        return sent
                    past_end = offset + count - end if count else _PAGE
                    if sent < 0 and end - offset <= _SENDFILE_READ:
                        # A small range not cached: one read on the ring,
                        # then one send (see _sendfile_cold).
                        return await self._sendfile_cold(transp, file, offset, fileno, end, past_end)
                    # The rest in steps, from where this stopped (a range
                    # not cached: read on the ring from its start; a failed
                    # call: its error raised as the first step's).
                    rest = (fileno, end, past_end, max(sent, 0), sent < 0, failed)
                    return await self._sendfile_native_steps(transp, file, offset, count, rest)
        return await self._sendfile_native_steps(transp, file, offset, count, None)

    async def _place_after_sent(self, transp, file, position):
        """Sets ``file``'s position to ``position`` after a sendfile that
        went out in one native call. A seek that does not finish at once
        (an asynchronous file's: aiofiles' runs in a thread, blockio's
        waits for a call on the file before it) goes on with the transport
        in a sendfile, as on the general path, where the position is set
        before the sendfile ends: reading paused, writes refused."""
        moved = file.seek(position)
        if not inspect.isawaitable(moved):
            return
        steps = moved.__await__()
        try:
            first = steps.send(None)
        except StopIteration:
            return
        resume_reading = transp.is_reading()
        transp.pause_reading()
        await transp._make_empty_waiter()
        try:
            await _go_on(steps, first)
        finally:
            transp._reset_empty_waiter()
            if resume_reading:
                transp.resume_reading()

    async def _sendfile_cold(self, transp, file, offset, fileno, end, past_end):
        """A transport's sendfile of a range of at most ``_SENDFILE_READ``
        bytes of the regular file ``fileno`` that the page cache does not
        wholly hold, to a transport with nothing in flight or buffered:
        one read of the whole range on the ring, then one ``send`` of it,
        with no future but the read's and no frame of the general path
        (:meth:`_sendfile_native_steps`), which takes what this does not
        finish (the socket full, a failed send, a read the ring refuses)
        from where it stopped. asyncio's state of a transport in a
        sendfile holds throughout: reading paused, writes refused, a
        second sendfile refused (the empty waiter set; done at once, as
        nothing is in flight or buffered)."""
        reading = transp._pause_for_sendfile()
        transp._make_empty_waiter()
        sock = transp._sock
        sent = 0
        try:
            try:
                data = await self._proactor.pread(fileno, offset, end - offset)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EAGAIN):
                    raise
                # (the ring refuses this file's read: the steps send it
                # with os.sendfile, see _sendfile_step)
                return await self._sendfile_steps(sock, file, offset, fileno, end, past_end, 0, False, 0)
            failed = 0
            if getattr(sock, "_closed", False):
                raise _sendfile_closed(0)
            if data:
                try:
                    sent = sock.send(data)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError as exc:
                    failed = exc.errno or errno.EIO
            if sent < len(data) or failed:
                # The rest in steps (the socket full: read again from the
                # cache, where the read just put it; a failed send: its
                # error raised as the first step's, with asyncio's reset).
                return await self._sendfile_steps(sock, file, offset, fileno, end, past_end, sent, False, failed)
            # (a file cut short: the read's bytes were all of it)
            if sent > 0:
                await _place_after_sendfile(file, offset + sent)
            return sent
        except ConnectionAbortedError as exc:
            _raise_reset_if_lost(transp, exc)
            raise
        finally:
            transp._reset_empty_waiter()
            transp._resume_after_sendfile(reading)

    async def _sendfile_native_steps(self, transp, file, offset, count, rest):
        """asyncio's native sendfile of a transport: reading paused, the
        transport's sends waited for and its writes refused meanwhile, the
        socket's sendfile in steps (asyncio's ``sock_sendfile``, which
        checks the arguments, then :meth:`_sock_sendfile_native`); or,
        given ``rest`` (the descriptor, ``end``, ``past_end``, the bytes
        from ``offset`` sent already, whether the range from there is known
        not to be wholly cached, the errno of the call that stopped: see
        :meth:`_sendfile_steps`), the rest of a sendfile whose start went
        out in one native call."""
        resume_reading = transp.is_reading()
        transp.pause_reading()
        await transp._make_empty_waiter()
        try:
            if rest is not None:
                return await self._sendfile_steps(transp._sock, file, offset, *rest)
            return await self.sock_sendfile(transp._sock, file, offset, count, fallback=False)
        except ConnectionAbortedError as exc:
            _raise_reset_if_lost(transp, exc)
            raise
        finally:
            transp._reset_empty_waiter()
            if resume_reading:
                transp.resume_reading()

    async def _sock_sendfile_native(self, sock, file, offset, count):
        # In the socket's turn of sends, as sock_sendall (see _sock_turns):
        # the bytes of a sendall in flight beside it do not interleave.
        return await _sock_turns.run(self._send_turns, self, sock, self._sendfile_in_turn, sock, file, offset, count)

    async def _sendfile_in_turn(self, sock, file, offset, count):
        # In steps as the socket takes them (see _sendfile_steps). An
        # asynchronous file (blockio.open's, aiofiles') is sent from its
        # descriptor too, once its writes have landed.
        try:
            fileno = file.fileno()
            st = os.fstat(fileno)
        except (AttributeError, io.UnsupportedOperation, OSError):
            raise exceptions.SendfileNotAvailableError("not a regular file") from None
        if _write_only(file):
            # asyncio's os.sendfile fails (EBADF) before any byte: "not
            # available", and its fallback, if allowed, reads the file.
            raise exceptions.SendfileNotAvailableError("os.sendfile call failed")
        fsize = st.st_size
        if await _before_sendfile(file):
            fsize = os.fstat(fileno).st_size
        # A regular file of size 0 given a count (``/proc``, ``/sys``:
        # its size says nothing of its bytes) is sent as a device is.
        regular = stat.S_ISREG(st.st_mode) and not (count and fsize == 0)
        if count and not regular:
            # (a device such as /dev/zero has no size: the count says how
            # much, as for asyncio's loop, which sends count bytes of it)
            end = offset + count
        else:
            end = min(offset + count, fsize) if count else fsize
        # None for a device; else how far past ``end`` an os.sendfile may
        # ask (see _sendfile_step): a page without a count (``end`` is the
        # file's end), what a count leaves past the file's end, none where
        # a count ends at it or before (bytes the file gains meanwhile are
        # not the caller's)
        if not regular:
            past_end = None
        elif count:
            past_end = max(offset + count - fsize, 0)
        else:
            past_end = _PAGE
        # An O_DIRECT file's os.sendfile reads the device whatever the page
        # cache holds: its steps read on the ring from the first (see
        # _sendfile_step for what the ring refuses).
        direct = regular and bool(fcntl.fcntl(fileno, fcntl.F_GETFL) & os.O_DIRECT)
        return await self._sendfile_steps(sock, file, offset, fileno, end, past_end, 0, direct, 0)

    async def _sendfile_steps(self, sock, file, offset, fileno, end, past_end, sent, uncached, failed):
        """Sends ``fileno`` (``file``'s descriptor) from ``offset + sent``
        to ``end`` (``sent`` bytes from ``offset`` went out already) in
        steps as the socket takes them (see :meth:`_sendfile_step`, which
        says what ``past_end`` is); ``uncached``: the range is known not to
        be wholly cached, and the first step reads on the ring without
        asking the page cache again; ``failed``: the first step's outcome
        is the error of this errno, that of a call already made (which the
        kernel reports once: a peer's reset says ``EPIPE`` to the next). The
        file's position follows what was sent, also when the peer goes
        away; the count sent in all."""
        # Bytes read on the ring and not yet sent (see _sendfile_step).
        unsent: memoryview | None = None
        reading = False  # (a step read on the ring: so do the next ones)
        # The socket stays open until the last step: a close meanwhile
        # (a transport's abort) must not free its number for another socket.
        held = _proactor.hold_open(sock)
        try:
            while offset + sent < end:
                if getattr(sock, "_closed", False):
                    raise _sendfile_closed(sent)
                try:
                    if failed:
                        code, failed = failed, 0
                        raise _proactor.os_error(code)
                    if unsent:
                        n = await self._proactor.send_some(sock, unsent)
                        unsent = unsent[n:]
                    else:
                        n, unsent = await self._sendfile_step(
                            sock, fileno, offset + sent, end, past_end, reading or uncached)
                        reading = reading or unsent is not None
                        uncached = False
                except BrokenPipeError as exc:
                    # The socket's reset went to a receive on it (a
                    # transport's; asyncio's selector loop has none during
                    # a sendfile): the pipe is broken by a reset or an
                    # abort. Where no receive may have taken a reset, the
                    # kernel's EPIPE is asyncio's too (a socket never
                    # connected, a peer that reset after it ended its side).
                    if getattr(sock, "_closed", False):
                        raise _sendfile_closed(sent) from exc
                    if self._proactor.reset_may_be_taken(sock) and _proactor.was_reset(sock):
                        raise _proactor.os_error(errno.ECONNRESET) from exc
                    raise
                if n == 0 and not unsent:
                    break
                sent += n
            return sent
        finally:
            if held:
                _proactor.release(sock)
            if sent > 0:
                await _place_after_sendfile(file, offset + sent)

    async def _sendfile_step(self, sock, fileno, pos, end, past_end, reading):
        """One step of a sendfile of ``fileno`` from ``pos`` to ``end``
        (``past_end``: None for a device; else how far past ``end``, the
        regular file's end, an ``os.sendfile`` may ask, its count rounded
        up to whole pages within that, as an ``O_DIRECT`` file needs):
        ``(sent, None)`` after an ``os.sendfile`` (``sent`` 0 at the end of
        the file), ``(0, bytes)`` after a read on the ring of bytes that
        are to be sent next. A regular file's range that the page cache
        does not wholly hold (``cachestat``; where the kernel refuses it,
        before Linux 6.5 or for a file the process neither owns nor may
        write, none counts as held) is read on the ring, as
        ``os.sendfile`` would read it from the disk on the loop's thread,
        stopping every other connection meanwhile; a cached one goes out
        with ``os.sendfile``
        (no copy in the process; no wait for the disk, but for a page whose
        read another reader's readahead has begun). Once a step has
        read (``reading``), the next ones read too: the kernel's readahead
        puts the following pages in the cache before their reads from the
        disk finish, which ``cachestat`` counts as cached and on which
        ``os.sendfile`` would wait. A file whose read the ring refuses
        (``EINVAL``: ``O_DIRECT`` at an offset or into a buffer its device
        does not align to; ``EAGAIN``: ``O_NONBLOCK``) goes out with
        ``os.sendfile``, which reads it on the loop's thread (found by the
        read's error: a check of the file's flags would cost a system call
        in every uncached step). Bytes read go out even if the file
        shrinks before they are sent, as a check of its size would cost
        a system call in every step."""
        regular = past_end is not None
        want = min(end - pos, _SENDFILE_STEP)
        if regular and (reading or not _blockio.range_cached(fileno, pos, want)):
            try:
                data = await self._proactor.pread(fileno, pos, min(want, _SENDFILE_READ))
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EAGAIN):
                    raise
            else:
                return 0, memoryview(data)
        if not regular:
            want = end - pos
        elif past_end and pos + want == end:
            want = min(-(-want // _PAGE) * _PAGE, want + past_end)
        return await self._proactor.sendfile_some(sock, fileno, pos, want), None

    # -- servers -------------------------------------------------------------

    def _start_serving(
        self, protocol_factory, sock, sslcontext=None, server=None, backlog=100,
        ssl_handshake_timeout=None, ssl_shutdown_timeout=None,
    ):
        # asyncio's proactor version, except that an accept failing for want
        # of descriptors or memory pauses accepting for ACCEPT_RETRY_DELAY
        # seconds, as asyncio's selector loop does, instead of closing the
        # listening socket (the connection waits in the backlog meanwhile).
        def serve(conn: socket.socket, addr: Any) -> None:
            if self._debug:
                base_events.logger.debug("%r got a new connection from %r: %r", server, addr, conn)
            protocol = protocol_factory()
            if sslcontext is not None:
                self._make_ssl_transport(
                    conn, protocol, sslcontext, server_side=True, extra={"peername": addr}, server=server,
                    ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout,
                )
            else:
                self._make_socket_transport(conn, protocol, extra={"peername": addr}, server=server)

        def arm() -> None:
            try:
                if self._closed or acc.stopped:
                    return
                self._proactor.serve_accept(acc)
            except OSError as exc:
                self._accept_failed(sock, exc, arm)
            else:
                self._accept_futures[sock.fileno()] = acc

        # Each accept's completion calls `accepted` from the dispatch of the
        # batch, which serves the connections and arms the next accept.
        def accepted(conn: Any, exc: BaseException | None) -> None:
            self._accepted(acc, backlog, serve, arm, conn, exc)

        acc = _proactor.ServerAccept(self._proactor, sock, accepted)
        self._server_accepts.add(acc)
        self.call_soon(arm)

    def _accepted(
        self,
        acc: _proactor.ServerAccept,
        backlog: int,
        serve: Callable[[socket.socket, Any], None],
        arm: Callable[[], None],
        conn: Any,
        exc: BaseException | None,
    ) -> None:
        """A server's accept completed with ``conn`` (or failed with
        ``exc``), called from the dispatch of the batch (ServerAccept: no
        future, no call_soon hop per connection): serves the connection and
        those waiting behind it, then arms the next accept (``arm``)."""
        sock = acc.listener
        try:
            if exc is not None:
                raise exc
        except OSError as error:
            self._accept_failed(sock, error, arm)
            return
        except exceptions.CancelledError:
            sock.close()
            return
        if sock.fileno() == -1 or acc.stopped:
            # The server was closed after the kernel completed this
            # accept and before its completion was dispatched (in the
            # same batch; the listener may still have its number while
            # a file object made from it lives): nothing serves the
            # connection, which is reset as the backlog's are.
            _proactor.reset(conn[0])
            return
        failed = None
        try:
            self._take_connection(serve, conn)
            # The connections waiting behind it are taken now, up to
            # `backlog` per completion as asyncio's selector loop takes
            # them per readiness: taken one per turn, 1,000 connections
            # made at once would wait up to 1,000 turns, each serving
            # every connection accepted before (docs/benchmarks.md).
            for _ in range(backlog - 1):
                if sock.fileno() == -1 or acc.stopped or self._closed:
                    break
                try:
                    more = self._proactor.accept_waiting(sock)
                except OSError as error:
                    failed = error
                    break
                if more is None:
                    break
                self._take_connection(serve, more)
        finally:
            if failed is None:
                arm()
        if failed is not None:
            self._accept_failed(sock, failed, arm)

    def _take_connection(self, serve: Callable[[socket.socket, Any], None], conn: Any) -> None:
        """Serves an accepted ``conn`` (``(socket, address)``); when the
        protocol factory or the transport's setup fails, that connection is
        closed and the server accepts on, as in asyncio's selector loop
        (_accept_connection2)."""
        try:
            serve(*conn)
        except BaseException as error:
            conn[0].close()
            if isinstance(error, (SystemExit, KeyboardInterrupt)):
                raise
            if self._debug:
                self.call_exception_handler(
                    {"message": "Error on transport creation for incoming connection", "exception": error}
                )

    def _accept_failed(self, sock: socket.socket, exc: OSError, again: Callable[[], None]) -> None:
        """Reports a server's failed accept: retried after a delay when it
        ran out of resources, else the end of that server's accepting."""
        if sock.fileno() == -1:
            if self._debug:
                base_events.logger.debug("Accept failed on socket %r", sock, exc_info=True)
            return
        context = {"exception": exc, "socket": trsock.TransportSocket(sock)}
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            self.call_exception_handler({"message": "socket.accept() out of system resource", **context})
            # _stop_serving cancels the retry as it would the accept.
            self._accept_futures[sock.fileno()] = self.call_later(constants.ACCEPT_RETRY_DELAY, again)
            return
        self.call_exception_handler({"message": "Accept failed on a socket", **context})
        sock.close()

    # -- Unix sockets (asyncio's Unix loop's code, on our transports) --------

    create_unix_connection = unix_events._UnixSelectorEventLoop.create_unix_connection
    create_unix_server = unix_events._UnixSelectorEventLoop.create_unix_server

    def _stop_serving(self, sock):
        for acc in [acc for acc in self._server_accepts if acc.listener is sock]:
            # An accept of a server on this listener completed in the batch
            # being dispatched is not served (see _start_serving's `accepted`).
            self._server_accepts.discard(acc)
            acc.stop()
        path = sock.getsockname() if sock in self._unix_server_sockets else None
        super()._stop_serving(sock)
        if path is not None:
            inode = self._unix_server_sockets.pop(sock)
            try:
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                base_events.logger.error("Unable to clean up listening UNIX socket %r: %r", path, err)

    # -- subprocesses: a pidfd polled on the ring ------------------------------

    async def _make_subprocess_transport(
        self, protocol, args, shell, stdin, stdout, stderr, bufsize, extra=None, **kwargs
    ):
        waiter = self.create_future()
        transp = unix_events._UnixSubprocessTransport(
            self, protocol, args, shell, stdin, stdout, stderr, bufsize, waiter=waiter, extra=extra, **kwargs
        )
        self._watch_child(transp)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transp.close()
            await transp._wait()
            raise
        return transp

    def _watch_child(self, transp: Any) -> None:
        pid = transp.get_pid()
        pidfd = os.pidfd_open(pid)

        def exited(_events: int) -> None:
            del self._children[pidfd]
            os.close(pidfd)
            try:
                _, status = os.waitpid(pid, 0)
                returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                returncode = 255  # reaped elsewhere, as asyncio's watchers report it
            transp._process_exited(returncode)

        self._proactor.poll_callback(pidfd, POLLIN, exited)
        self._children[pidfd] = (pid, transp)

    def _hand_over_children(self) -> None:
        """The children still running when the loop closes (the ring, and
        so their pidfds' polls, closed): each pidfd is closed and the child
        handed to :func:`_reap_when_exited`, so that it keeps running, as
        on asyncio's loop, and is reaped when it exits."""
        children = list(self._children.items())
        self._children.clear()
        for pidfd, (pid, transp) in children:
            os.close(pidfd)
            _reap_when_exited(self, pid, transp)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.backend} running={self.is_running()} closed={self.is_closed()}>"


def _reap_when_exited(loop: UringEventLoop, pid: int, transp: Any) -> None:
    """Waits for child ``pid`` of closed ``loop`` in a thread of its own
    (asyncio's ``ThreadedChildWatcher``'s way, with its warning once the
    child exits): the child keeps running and is reaped when it exits,
    never left a zombie. The thread holds the child's transport until
    then, as that watcher's does: the transport's finaliser would kill a
    child still running. At the interpreter's exit, when no thread can
    start, the child is left to the process that inherits it."""

    def wait(_transp: Any) -> None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            return  # reaped elsewhere, or not this process's child (a fork's copy of the loop)
        base_events.logger.warning("Loop %r that handles pid %r is closed", loop, pid)

    try:
        thread = threading.Thread(target=wait, args=(transp,), name=f"blockio-waitpid-{pid}", daemon=True)
        thread.start()
    except RuntimeError:  # the interpreter is exiting
        pass


@contextlib.contextmanager
def _holding_wakeup_fd(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """On the main thread the loop's wake-up socket holds Python's wake-up
    descriptor for the run (as on asyncio's proactor loop), unless a holder
    that is none of this process's loops has it (trio's, asyncio's own
    loop's). A signal whose Python handler has not run yet when the loop
    enters the kernel writes to it, the wait ends, and the handler runs
    (Ctrl-C raises) instead of waiting for another event. Another loop's
    that it displaces gets it back after the run (a signal that loop has a
    handler for is handed to it meanwhile, see :func:`_hand_signals`);
    signal handlers added meanwhile keep it, as asyncio's do. A closed loop
    has no wake-up socket; ``run_forever`` then says it is closed."""
    csock = getattr(loop, "_csock", None)
    if csock is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = csock.fileno()
    old = signal.set_wakeup_fd(ours, warn_on_full_buffer=False)
    if old not in (-1, ours) and _live(old) is None:
        signal.set_wakeup_fd(old)
        yield
        return
    try:
        yield
    finally:
        if not loop._signal_handlers and _wakeup_fd() == ours:
            signal.set_wakeup_fd(-1 if old == ours or _live(old) is None else old, warn_on_full_buffer=False)


def _drop_wakeup_fd(csock: socket.socket | None) -> None:
    """Clears Python's wake-up descriptor if it is ``csock`` (a loop's
    wake-up socket, about to close: a signal's byte must not go to a number
    another file may take); leaves another holder's in place."""
    if csock is not None and _wakeup_fd() == csock.fileno():
        signal.set_wakeup_fd(-1)


#: This process's loops by their wake-up socket's number: Python's wake-up
#: descriptor is process-wide, and the loop whose socket a signal's byte
#: reaches may not be the one with a handler for it (see _hand_signals).
_LOOPS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _wakeup_fd() -> int:
    """Python's wake-up descriptor (-1: none; always -1 off the main thread).
    (Read by setting it: for that instant a signal has no wake-up, which
    matters to no loop, as none waits while this thread runs this.)"""
    if threading.current_thread() is not threading.main_thread():
        return -1
    held = signal.set_wakeup_fd(-1)
    if held != -1:
        try:
            signal.set_wakeup_fd(held, warn_on_full_buffer=False)
        except (OSError, ValueError):  # a closed descriptor's number: none is held now
            return -1
    return held


def _live(fd: int) -> Any:
    """The open loop whose wake-up socket is ``fd``, or None."""
    loop = _LOOPS.get(fd)
    return None if loop is None or loop.is_closed() else loop


def _hand_signals(loop: Any, data: bytes) -> None:
    """asyncio's ``_process_self_data``, except that a signal ``loop`` has
    no handler for goes to another open loop that has one: the loop running
    holds the wake-up descriptor (see :func:`_add_signal_handler`)."""
    for signum in data:
        if not signum:
            continue  # a byte of call_soon_threadsafe's
        if signum not in loop._signal_handlers:
            heir = next((o for o in list(_LOOPS.values()) if signum in o._signal_handlers and not o.is_closed()), None)
            if heir is not None:
                heir._handle_signal(signum)
            continue
        loop._handle_signal(signum)


def _add_signal_handler(loop: Any, add: Callable[..., None], sig: int, callback: Callable, *args: Any) -> None:
    """asyncio's ``add_signal_handler`` (``add``) on ``loop``, except that
    the wake-up descriptor stays with another loop running on this thread:
    its wait must end on Ctrl-C, and it hands ``sig`` to ``loop``."""
    held = _wakeup_fd()
    add(loop, sig, callback, *args)
    running = _live(held)
    if running is not None and running is not loop and running.is_running():
        signal.set_wakeup_fd(held, warn_on_full_buffer=False)


def _remove_signal_handler(loop: Any, remove: Callable[[Any, int], bool], sig: int) -> bool:
    """asyncio's ``remove_signal_handler`` (``remove``) on ``loop``, except
    that removing the last handler clears Python's wake-up descriptor only
    if it is this loop's (asyncio clears it whoever holds it: a loop running
    then, or one whose handlers are removed as it is closed or collected
    meanwhile, would lose its wake-up), and hands it to another open loop
    that has handlers."""
    held = _wakeup_fd()
    removed = remove(loop, sig)
    if held not in (-1, loop._wakeup_number):
        signal.set_wakeup_fd(held, warn_on_full_buffer=False)
    elif held != -1 and not loop._signal_handlers and loop.is_running():
        signal.set_wakeup_fd(held, warn_on_full_buffer=False)  # the run gives it back (_holding_wakeup_fd)
    elif held != -1 and not loop._signal_handlers:
        heir = next((o for o in list(_LOOPS.values()) if o is not loop and o._signal_handlers and not o.is_closed()), None)
        if heir is not None:
            signal.set_wakeup_fd(heir._wakeup_number, warn_on_full_buffer=False)
    return removed


def _raise_reset_if_lost(transp: Any, exc: ConnectionAbortedError) -> None:
    """Raises ``ECONNRESET`` (from ``exc``) if the sendfile on ``transp``
    that ``exc`` ended was ended by the peer's reset: the transport's own
    receive took the reset and closed the socket, so the send saw an
    aborted connection. Returns otherwise."""
    if transp._lost_reset:
        raise _proactor.os_error(errno.ECONNRESET) from exc


class _PeerSendto:
    """A datagram socket whose ``sendto(data, None)`` sends to its peer.

    asyncio's selector datagram transport calls ``sock.sendto(data, addr)``
    unless the socket has a peer name, and a connected socket may have none
    (an unnamed Unix datagram socket of a ``socketpair``): its
    ``transport.sendto(data)`` would fail with a ``TypeError`` instead of
    sending to the peer. Everything else is the socket's own.
    """

    __slots__ = ("_sock", "recvfrom")

    #: The socket's own ``recvfrom``, kept: the transport calls it for
    #: every datagram, and ``__getattr__`` would look it up each time.
    recvfrom: Callable[..., Any]

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.recvfrom = sock.recvfrom

    def sendto(self, data: Any, *args: Any) -> int:
        if args and args[-1] is None:
            return self._sock.send(data, *args[:-1])
        return self._sock.sendto(data, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _Kept(list):  # type: ignore[type-arg]
    """The connections kept for one listener (``(socket, address)`` pairs),
    with the finalizer that resets them if the listener is collected
    without ``close()``; detached once the list is forgotten, so that a
    live listener holds one finalizer at most."""

    finalizer: weakref.finalize


def _reset_all(conns: list[tuple[socket.socket, Any]]) -> None:
    """Resets and forgets the accepted connections ``conns`` (``(socket,
    address)`` pairs), as a closed listener's backlog's are."""
    while conns:
        _proactor.reset(conns.pop()[0])


class _EpollSocketTransport(selector_events._SelectorSocketTransport):
    """asyncio's selector socket transport, which lets go of its read
    callback once its connection is lost (or its loop closed).

    The callback (``_read_ready_cb``) is a bound method of the transport
    itself, a reference cycle that asyncio leaves in place after
    ``connection_lost``: a closed transport went only with the next
    collection, not with its last reference (as on uvloop)."""

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            super()._call_connection_lost(exc)
        finally:
            self._read_ready_cb = None

    def _loop_closed(self) -> None:
        """The loop was closed with the connection open: the transport
        reads no more (its loop's selector is gone)."""
        self._read_ready_cb = None


_SELECTOR_LOOP = asyncio.SelectorEventLoop


def _wake(readable: asyncio.Future) -> None:
    """Resolves the wait for readiness ``readable``, unless it was cancelled."""
    if not readable.done():
        readable.set_result(None)


class EpollEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop (epoll): the fallback where io_uring is unavailable."""

    backend = "epoll"

    def __init__(self, reason: str = "requested (BLOCKIO_BACKEND)") -> None:
        super().__init__()
        #: Why this loop is not on io_uring.
        self.fallback_reason = reason
        #: The wake-up socket's number (asyncio closes the socket before
        #: removing the signal handlers).
        self._wakeup_number = self._csock.fileno()
        _LOOPS[self._wakeup_number] = self
        # listening socket -> connections a cancelled sock_accept took, for
        # the next accept on it (gone, and so closed, with the listener)
        self._kept_conns: weakref.WeakKeyDictionary[socket.socket, _Kept] = (
            weakref.WeakKeyDictionary()
        )
        self._receive_turns: _sock_turns.Turns = {}
        self._send_turns: _sock_turns.Turns = {}
        self._accept_turns: _sock_turns.Turns = {}

    def run_forever(self) -> None:
        """Runs until :meth:`stop`, holding Python's wake-up descriptor
        (:func:`_holding_wakeup_fd`) so that Ctrl-C ends the wait."""
        with _holding_wakeup_fd(self):
            super().run_forever()

    # The socket calls, each in its socket's turn (see _sock_turns):
    # asyncio's own keep one reader and one writer per descriptor, so a
    # second call in flight would leave the first waiting for ever. A
    # receive is made here, in its caller's task, once the socket is
    # readable: asyncio's makes it in the readiness callback, and a task
    # cancelled after that, before it resumed, loses the bytes. A send is
    # asyncio's, named by its class (Python 3.11's super() costs more than
    # the rest of the turn); each returns the coroutine that takes the turn.

    async def _receive(self, sock: socket.socket, receive: Callable[..., Any], *args: Any) -> Any:
        """``receive(*args)`` (``sock.recv`` and its kin) in ``sock``'s
        turn: at once if the socket holds something, else once it is
        readable, in this task, so that a cancellation takes nothing."""
        base_events._check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")
        turns, key = self._receive_turns, id(sock)
        if key in turns:
            await _sock_turns.wait(turns, self, key)
        else:
            turns[key] = None
        try:
            while True:
                try:
                    return receive(*args)
                except (BlockingIOError, InterruptedError):
                    pass
                fd = sock.fileno()
                self._ensure_fd_no_transport(fd)
                readable = self.create_future()
                self._add_reader(fd, _wake, readable)
                try:
                    await readable
                finally:
                    self._remove_reader(fd)
        finally:
            waiters = turns.pop(key, None)
            if waiters:
                _sock_turns.hand_on(turns, key, waiters)

    def sock_recv(self, sock, n):  # type: ignore[no-untyped-def]
        return self._receive(sock, sock.recv, n)

    def sock_recv_into(self, sock, buf):  # type: ignore[no-untyped-def]
        return self._receive(sock, sock.recv_into, buf)

    async def sock_sendall(self, sock, data):  # type: ignore[no-untyped-def]
        """asyncio's, in ``sock``'s turn; with nobody holding it, what the
        socket takes at once is sent here, and only a rest takes the turn."""
        if id(sock) not in self._send_turns:
            base_events._check_ssl_socket(sock)
            if self._debug and sock.gettimeout() != 0:
                raise ValueError("the socket must be non-blocking")
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent == (len(data) if type(data) is bytes else memoryview(data).nbytes):
                return
            data = memoryview(data).cast("B")[sent:]
        await _sock_turns.run(self._send_turns, self, sock, _SELECTOR_LOOP.sock_sendall, self, sock, data)

    def sock_recvfrom(self, sock, bufsize):  # type: ignore[no-untyped-def]
        return self._receive(sock, sock.recvfrom, bufsize)

    def sock_recvfrom_into(self, sock, buf, nbytes=0):  # type: ignore[no-untyped-def]
        return self._receive(sock, sock.recvfrom_into, buf, nbytes or len(buf))

    if sys.version_info >= (3, 11):  # (asyncio's selector loop has it from 3.11)

        def sock_sendto(self, sock, data, address):  # type: ignore[no-untyped-def]
            return _sock_turns.run(self._send_turns, self, sock, _SELECTOR_LOOP.sock_sendto, self, sock, data, address)

    def add_signal_handler(self, sig: int, callback: Callable, *args: Any) -> None:
        """Calls ``callback(*args)`` in the loop on signal ``sig`` (see :func:`_add_signal_handler`)."""
        _add_signal_handler(self, asyncio.SelectorEventLoop.add_signal_handler, sig, callback, *args)

    def close(self) -> None:
        """Closes the loop; its signal handlers are removed while its
        wake-up socket is still open (asyncio removes them after closing
        it), so that Python's wake-up descriptor is handed on as on io_uring."""
        if not self.is_running() and not self.is_closed() and not sys.is_finalizing():
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
            _drop_wakeup_fd(self._csock)
        if not self.is_running():
            for sock in list(self._kept_conns):
                _reset_all(self._forget_kept(sock))
        closing = not self.is_running() and not self.is_closed()
        super().close()
        if closing:
            for transport in list(self._transports.values()):
                if isinstance(transport, _EpollSocketTransport):
                    transport._loop_closed()

    def remove_signal_handler(self, sig: int) -> bool:
        """Removes the handler of ``sig`` (see :func:`_remove_signal_handler`)."""
        return _remove_signal_handler(self, asyncio.SelectorEventLoop.remove_signal_handler, sig)

    def _process_self_data(self, data: bytes) -> None:
        _hand_signals(self, data)

    async def _sock_sendfile_native(self, sock, file, offset, count):  # type: ignore[no-untyped-def]
        """asyncio's, and an asynchronous file (``blockio.open``'s,
        aiofiles') is sent from its descriptor too, once its writes have
        landed, its position then set by its own ``seek``: asyncio moves
        the descriptor's offset, which such a file does not read (its
        reads and writes are at offsets). In the socket's turn of sends,
        as ``sock_sendall`` (see ``_sock_turns``)."""
        return await _sock_turns.run(self._send_turns, self, sock, self._sendfile_in_turn, sock, file, offset, count)

    async def _sendfile_in_turn(self, sock, file, offset, count):  # type: ignore[no-untyped-def]
        if not _async_file(file):
            return await super()._sock_sendfile_native(sock, file, offset, count)
        await _before_sendfile(file)
        fileno = file.fileno()
        # asyncio moves the offset to where the sendfile stopped once a
        # byte went out; started at `offset`, it says how far it got. With
        # no byte sent the descriptor's offset is put back (a wrapped
        # built-in file, aiofiles', reads from it).
        before = os.lseek(fileno, 0, os.SEEK_CUR)
        os.lseek(fileno, offset, os.SEEK_SET)
        try:
            sent = await super()._sock_sendfile_native(sock, file, offset, count)
        except BaseException:
            stopped = os.lseek(fileno, 0, os.SEEK_CUR)
            if stopped != offset:
                await _place_after_sendfile(file, stopped)
            else:
                os.lseek(fileno, before, os.SEEK_SET)
            raise
        if sent > 0:
            await _place_after_sendfile(file, offset + sent)
        else:
            os.lseek(fileno, before, os.SEEK_SET)
        return sent

    async def sock_accept(self, sock):  # type: ignore[no-untyped-def]
        """asyncio's ``sock_accept``, except that a connection accepted for
        a caller cancelled meanwhile is kept for the next accept on the same
        socket (as on io_uring), not lost."""
        base_events._check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")
        return await _sock_turns.run(self._accept_turns, self, sock, self._accept_in_turn, sock)

    async def _accept_in_turn(self, sock: socket.socket) -> Any:
        """:meth:`sock_accept` in ``sock``'s turn: asyncio's one reader per
        descriptor would leave the first of two accepts waiting for ever."""
        kept = self._kept_conns.get(sock)
        if kept and sock.fileno() == -1:
            # The listener is closed: its kept connections are closed, as
            # its backlog's are, and the accept below fails (EBADF).
            _reset_all(self._forget_kept(sock))
        elif kept:
            conn = kept.pop(0)
            if not kept:
                self._forget_kept(sock)
            return conn
        fut = self.create_future()
        self._sock_accept(fut, sock)
        try:
            return await fut
        except exceptions.CancelledError:
            # Cancelled after the connection came, before this call resumed.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._keep_accepted(sock, fut.result())
            raise

    def _sock_accept(self, fut: asyncio.Future, sock: socket.socket) -> None:
        # A readiness handle already queued when the accept was cancelled
        # would take a connection that nothing can return (asyncio's
        # version then fails with InvalidStateError and the connection is
        # lost): it stays in the backlog for the next accept.
        if not fut.done():
            super()._sock_accept(fut, sock)

    def _keep_accepted(self, sock: socket.socket, conn: tuple[socket.socket, Any]) -> None:
        if sock.fileno() == -1:
            _proactor.reset(conn[0])  # the listener is closed: as its backlog's
            return
        kept = self._kept_conns.get(sock)
        if kept is None:
            kept = self._kept_conns[sock] = _Kept()
            # (a listener collected without close() ends its kept connections too)
            kept.finalizer = weakref.finalize(sock, _reset_all, kept)
        kept.append(conn)

    def _forget_kept(self, sock: socket.socket) -> _Kept:
        """Removes and returns the connections kept for ``sock``, whose
        finalizer is detached (the caller resets them or has taken them)."""
        kept = self._kept_conns.pop(sock)
        kept.finalizer.detach()
        return kept

    def _run_once(self) -> None:
        """asyncio's step, run by Rust (``_blockio.run_turn`` around the
        selector), after closing the connections kept for a listener closed
        since (see ``RingProactor._drop_conns_of_closed_listeners``)."""
        if self._kept_conns:
            for sock in [s for s in self._kept_conns if s.fileno() == -1]:
                _reset_all(self._forget_kept(sock))
        if base_events.BaseEventLoop._run_once is not _ASYNCIO_RUN_ONCE:
            base_events.BaseEventLoop._run_once(self)
            return
        _run_turn(self, None)

    def _make_socket_transport(  # type: ignore[no-untyped-def]
        self, sock, protocol, waiter=None, *, extra=None, server=None
    ):
        return _EpollSocketTransport(self, sock, protocol, waiter, extra, server)

    def _make_ssl_transport(  # type: ignore[no-untyped-def]
        self, rawsock, protocol, sslcontext, waiter=None, *, server_side=False, server_hostname=None,
        extra=None, server=None, **timeouts,
    ):
        # asyncio's, on _EpollSocketTransport (`timeouts`: the handshake's,
        # and from 3.11 on the shutdown's, as SSLProtocol takes them).
        ssl_protocol = sslproto.SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname, **timeouts
        )
        _EpollSocketTransport(self, rawsock, ssl_protocol, extra=extra, server=server)
        return ssl_protocol._app_transport

    def _make_datagram_transport(  # type: ignore[no-untyped-def]
        self, sock, protocol, address=None, waiter=None, extra=None
    ):
        transport = super()._make_datagram_transport(sock, protocol, address, waiter, extra)
        # (the transport's own socket only: get_extra_info("socket") is still the socket)
        transport._sock = _PeerSendto(transport._sock)
        # Each datagram's recvfrom of asyncio's 256 KiB max_size is an mmap,
        # an mremap and a munmap in glibc's malloc; an IP datagram never
        # passes 64 KiB.
        transport.max_size = _datagram_room(sock.family, transport.max_size)
        return transport


#: The values ``BLOCKIO_BACKEND`` takes, as in the Rust crate
#: (``blockio::BACKEND_ENV_VALUES``); unset or empty is ``auto``.
BACKEND_ENV_VALUES = ("uring", "threads", "auto")


def _backend_choice() -> str:
    value = os.environ.get("BLOCKIO_BACKEND", "").strip()
    if value == "threads":
        return "epoll"
    if value == "uring":
        return "uring"
    if value in ("", "auto"):
        return "auto"
    raise ValueError(f"BLOCKIO_BACKEND={value!r}: expected one of {', '.join(BACKEND_ENV_VALUES)}")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: on io_uring where the kernel allows it, else on epoll.

    ``BLOCKIO_BACKEND=threads`` chooses epoll, ``uring`` requires io_uring
    (an ``OSError`` if the kernel refuses it). ``loop.backend`` says which runs.
    """
    choice = _backend_choice()
    if choice == "epoll":
        return EpollEventLoop()
    try:
        ring = _blockio.LoopRing()
    except OSError as e:
        if choice == "uring" or e.errno not in _UNAVAILABLE:
            raise
        return EpollEventLoop(f"io_uring unavailable: {e}")
    return UringEventLoop(ring)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """The event loop policy whose loops are :func:`new_event_loop`'s."""

    def _loop_factory(self) -> asyncio.AbstractEventLoop:
        return new_event_loop()


def install() -> None:
    """Makes :func:`new_event_loop` asyncio's loop factory (``asyncio.run`` and
    ``asyncio.new_event_loop`` then use it), as ``uvloop.install()`` does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(EventLoopPolicy())


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Runs ``main`` on a new :func:`new_event_loop` loop, like ``asyncio.run``."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
            return runner.run(main)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(EventLoopPolicy())
    try:
        return asyncio.run(main, debug=bool(debug))
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_event_loop_policy(old)
