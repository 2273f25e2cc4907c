# mypy: ignore-errors
# (This module extends asyncio's private proactor classes and helpers,
# which typeshed types partly or not at all; its public signatures are
# still what mypy uses for callers.)
"""The proactor of blockio's event loop: asyncio futures over the loop's ring.

asyncio's ``BaseProactorEventLoop`` and its transports ask a proactor for
whole operations (``recv_into``, ``send``, ``accept``, ...) and get a future
each; ``select(timeout)`` is the loop's one wait. :class:`RingProactor`
submits each operation to the Rust ring (``blockio._blockio.LoopRing``),
keeps its future by token, and in ``select`` resolves every future whose
operation the kernel finished in that wake-up (one batch per wait, the GIL
released while the thread waits in ``io_uring_enter``).

A socket transport's receive, and a datagram endpoint's, has no future:
its completion calls the transport (or its protocol) from the dispatch
of the batch (:class:`StreamReceive`, asyncio's
order kept: behind the callbacks queued before the wait, if any), and the
transport arms the next receive there. It is kept in the ring's slab with
its receive, callback and hold on the socket, not in this class's tables:
a message makes no entry in them.

On the ring as completions: ``recv`` (on a socket into a 2 KiB first
buffer, all that a receive waiting on an idle connection holds; the rest
of a larger message is taken at once when that fills), ``recv_into`` (and
``read`` on pipes),
``send`` (and ``write``: what the descriptor takes at once is written at
once, the rest on the ring), ``accept``, one-shot polls, and ``pread``
of a file (``Engine.aread``'s read that the page cache cannot serve,
the ``blockio.open`` file's included), ``openat`` (``blockio.open``'s),
``connect`` of an IPv4, IPv6 or Unix stream socket, and a datagram's
``recvmsg`` (``recvfrom``/``recvfrom_into`` with nothing queued: the
call is tried at once first, so that a queued datagram costs no
completion) and ``sendmsg`` (``sendto`` that the socket cannot take yet,
and a datagram transport's buffered datagrams, one at a time in order).
Driven by readiness (a ring poll, then the non-blocking system call, as
asyncio's selector loop does): any other ``connect``, a datagram to an
address the ring's ``sendmsg`` cannot take (a host name),
``recvfrom``/``sendto`` with flags, ``sendfile`` (``os.sendfile``, no
Python-level copy) and
``send_some`` (one ``send``: a sendfile's bytes that the loop read with
``pread`` on the ring, as the page cache did not hold them, so that
``os.sendfile`` would have waited for the disk). Each makes its system
call at once, in the caller's step, and polls only when that would block.

Cancelling a future cancels its operation; the kernel still answers once,
and only then is the operation's memory released. A socket an operation
works on is held open until then (its real close waits, as for a socket
with a file made by ``makefile``; a pipe transport's file is a held
duplicate, :class:`HeldPipe`): an operation that goes on after a
readiness wait or a short write goes back to the descriptor's number,
which must not name another socket by then. Bytes that a cancelled
receive took off a socket are kept and handed to the next receive on the
same socket, so a cancelled ``sock_recv`` loses nothing; so is a datagram
(with its sender) that a cancelled ``recvfrom`` took, for the next
datagram receive; likewise a connection that a cancelled accept took is
kept for the next accept on the same listening socket.
"""

from __future__ import annotations

import _socket
import collections
import contextlib
import contextvars
import errno
import os
import select
import socket
import stat
import struct
import weakref
from asyncio import exceptions, futures
from typing import Any, Callable

from . import _blockio

POLLIN = select.POLLIN
POLLOUT = select.POLLOUT
# tcp_states.h: a TCP socket's state after a reset (the first byte of TCP_INFO).
_TCP_CLOSE = 7

# Operation kinds, as kept beside each token.
(_RECV, _RECV_INTO, _SEND, _ACCEPT, _POLL, _CALLBACK, _STREAM, _SERVE, _PREAD, _OPEN, _CONNECT, _READY,
 _RECVFROM, _CONNECT_UNIX) = range(14)


class OpFuture(futures.Future):
    """The future of one ring operation: cancelling it cancels the operation."""

    def __init__(self, proactor: RingProactor, token: int, *, loop: Any) -> None:
        super().__init__(loop=loop)
        self._proactor = proactor
        self._token = token

    def cancel(self, msg: Any = None) -> bool:
        if not self.done():
            self._proactor.cancel_op(self._token)
        return super().cancel(msg=msg)


class ReadyCall(futures.Future):
    """The future of a system call on ``conn`` that would block (its
    caller made it once), made again each time a ring poll says ``conn``
    is ready for ``mask``, until it does not: its result or exception is
    the future's. The poll's completion makes the call from the
    proactor's dispatch (:meth:`ready`), as asyncio's selector loop makes
    it from the reader's callback: no task runs it, so nothing the loop
    waits for on its own is in ``asyncio.all_tasks()`` or cancelled by a
    program cancelling every other task. A poll that fails is the future's ``OSError``.

    ``conn`` is held open (:func:`hold_open`) from the start to the end of
    the future, done or cancelled, so that its number never reaches
    another socket meanwhile: a close waiting for it happens then.
    Cancelling the future cancels the poll in flight.
    """

    def __init__(self, proactor: RingProactor, conn: Any, mask: int, call: Callable[[], Any]) -> None:
        super().__init__(loop=proactor._loop)
        self._proactor = proactor
        self._conn: Any = conn
        self._fd = conn.fileno()
        self._mask = mask
        self._call: Any = call
        self._held = hold_open(conn)
        self._token: int | None = None
        proactor._ready_waits.setdefault(self._fd, set()).add(self)
        try:
            self._token = proactor._ready_poll(self, self._fd, mask, conn)
        except BaseException:
            self._end()  # (no poll: neither the hold nor the entry stays behind)
            raise

    def polled(self, res: int) -> None:
        """The poll's completion (its events, or ``-errno``), from the
        proactor's dispatch: :meth:`ready` at once when no callback was
        queued before the wait, else behind those callbacks (asyncio's
        order: one of them that cancels this future then finds the call
        not made, and what it would have taken left on the socket)."""
        self._token = None
        if self._proactor._direct:
            self.ready(res)
        else:
            self._loop.call_soon(self.ready, res)

    def ready(self, res: int) -> None:
        """The poll's answer: the call again (nothing once cancelled)."""
        if self.done():
            return
        if res < 0:
            self._end()
            if res == -errno.ECANCELED:
                super().cancel()
            else:
                self.set_exception(os_error(-res))
            return
        try:
            result = self._call()
        except (BlockingIOError, InterruptedError):
            self._token = self._proactor._ready_poll(self, self._fd, self._mask, self._conn)
            return
        except (SystemExit, KeyboardInterrupt) as exc:
            self._end()
            self.set_exception(exc)
            raise
        except BaseException as exc:
            self._end()
            self.set_exception(exc)
        else:
            self._end()
            self.set_result(result)

    def cancel(self, msg: Any = None) -> bool:
        if self.done():
            return False
        token, self._token = self._token, None
        if token is not None:
            self._proactor.cancel_op(token)
        self._end()
        return super().cancel(msg=msg)

    def end_with(self, exc: BaseException) -> None:
        """Ends the wait with ``exc`` (see :meth:`RingProactor.end_waits`),
        its poll in flight cancelled."""
        if self.done():
            return
        token, self._token = self._token, None
        if token is not None:
            self._proactor.cancel_op(token)
        self._end()
        self.set_exception(exc)

    def _end(self) -> None:
        """Ends the hold on ``conn`` and lets go of it and the call (and
        the proactor of this wait: see :meth:`RingProactor.end_waits`)."""
        waits = self._proactor._ready_waits.get(self._fd)
        if waits is not None:
            waits.discard(self)
            if not waits:
                del self._proactor._ready_waits[self._fd]
        if self._held:
            self._held = False
            release(self._conn)
        self._conn = self._call = None


class StreamReceive(_blockio.StreamRx):
    """A socket transport's receive, armed again by the transport after
    each completion, whose completion calls ``callback(data, exc)`` from
    the proactor's dispatch of the batch (in ``select``): no future, no
    done callback, no ``call_soon`` hop per message. ``data`` is the bytes
    received (``b''`` at end of stream) or ``None`` with ``exc`` the error.

    The callback runs in ``context`` (the transport's, copied when it was
    made, as asyncio's callbacks run in a copy of their caller's); an
    exception it lets out goes to the loop's exception handler, as one
    from a callback of the ready queue does. While armed, it stands in the
    transport's ``_read_fut``: ``cancel()`` cancels the receive in flight.

    A datagram endpoint's receive (``datagram``) is a ``recvmsg`` of one
    datagram on the ring, ``data`` its ``(bytes, address)``; it is not
    tried in the loop's thread first (``LoopRing.arm_stream``).

    Its state (``conn``, ``fd``, ``nbytes``, ``socket``, ``stream``, ``holdable``,
    ``context``, ``datagram``, ``peer``; ``token``, the receive in flight or the marker of kept
    bytes about to be handed on, None when not armed; ``cancelled``) is
    the Rust base's, which the dispatch and ``_blockio.arm_receive`` read
    per message without attribute lookups.
    """

    __slots__ = ()

    def __new__(cls, proactor: RingProactor, conn: Any, nbytes: int, datagram: bool = False) -> StreamReceive:
        # Whether hold_open holds it (a socket; not a test's mock).
        holdable = hold_open(conn)
        if holdable:
            release(conn)
        return super().__new__(
            cls, proactor, conn, _fd_of(conn), nbytes, isinstance(conn, socket.socket), is_stream(conn),
            holdable, contextvars.copy_context(), datagram,
        )

    def cancel(self, msg: Any = None) -> bool:
        """Cancels the receive in flight; its completion calls nothing."""
        if self.cancelled or self.token is None:
            return False
        self.cancelled = True
        if type(self.token) is int:
            self._proactor.cancel_op(self.token)
        return True

    def done(self) -> bool:
        """Whether no receive of it is in flight (finished, or cancelled)."""
        return self.token is None or self.cancelled

    def deliver(self, callback: Callable[[Any, Any], None], data: Any, exc: BaseException | None) -> None:
        """Calls ``callback`` with a completion's outcome (see the class doc)."""
        try:
            self.context.run(callback, data, exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as error:
            self.report(callback, error)
        finally:
            # (see _finish_stream: the callback raises the error it is
            # handed, and this frame is its traceback's frame's caller)
            exc = None

    def report(self, callback: Callable[[Any, Any], None], error: BaseException) -> None:
        """Hands the loop's exception handler what ``callback`` let out."""
        self._proactor._loop.call_exception_handler(
            {"message": f"Exception in callback {callback!r}", "exception": error, "transport_receive": self}
        )

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "pending" if self.token is not None else "idle"
        return f"<StreamReceive {state} fd={self.fd}>"


class ServerAccept:
    """A server's accept, armed again after each completion (whose
    callback also takes the connections waiting behind it:
    :meth:`RingProactor.accept_waiting`), whose completion calls ``callback(conn, exc)`` from the proactor's dispatch
    of the batch, as :class:`StreamReceive` does for a receive: no future
    and no ``call_soon`` hop per connection. ``conn`` is ``(socket,
    address)``, or ``None`` with ``exc`` the error (``CancelledError``
    once cancelled). The callback runs in ``context``; an exception it
    lets out goes to the loop's exception handler. While armed, it stands
    in the loop's ``_accept_futures``: ``cancel()`` cancels the accept in
    flight.
    """

    __slots__ = ("_proactor", "listener", "callback", "context", "token", "cancelled", "stopped")

    def __init__(self, proactor: RingProactor, listener: socket.socket, callback: Callable[[Any, Any], None]) -> None:
        self._proactor = proactor
        self.listener = listener
        self.callback = callback
        self.context = contextvars.copy_context()
        # The token of the accept in flight (or the marker of a kept
        # connection about to be handed on); None when not armed.
        self.token: Any = None
        self.cancelled = False
        # Set by the loop's _stop_serving: the server no longer serves, and
        # a connection whose accept completes now is reset.
        self.stopped = False

    def cancel(self, msg: Any = None) -> bool:
        """Cancels the accept in flight; its completion calls nothing (a
        connection it took is kept for the next accept, or closed with the
        listener)."""
        if self.cancelled or self.token is None:
            return False
        self.cancelled = True
        if type(self.token) is int:
            self._proactor.cancel_op(self.token)
        return True

    def stop(self) -> None:
        """The server no longer serves: cancels the accept in flight, and
        a connection whose accept completes now (or whose completion is
        queued) is reset, as the backlog's are. The callback, a closure
        of the server's that holds this object and the protocol factory,
        is let go of: it would keep them in a reference cycle that only the
        collector frees."""
        self.stopped = True
        self.cancel()
        self.callback = _reset_unserved

    def done(self) -> bool:
        """Whether no accept of it is in flight (finished, or cancelled)."""
        return self.token is None or self.cancelled

    def deliver(self, conn: Any, exc: BaseException | None) -> None:
        """Calls the callback with an accept's outcome (see the class doc)."""
        try:
            self.context.run(self.callback, conn, exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as error:
            self._proactor._loop.call_exception_handler(
                {"message": f"Exception in callback {self.callback!r}", "exception": error, "server_accept": self}
            )

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "pending" if self.token is not None else "idle"
        return f"<ServerAccept {state} on {self.listener!r}>"


def _reset_unserved(conn: Any, exc: BaseException | None) -> None:
    """A stopped server's accept callback (see :meth:`ServerAccept.stop`)."""
    if conn is not None:
        reset(conn[0])


def reset(conn: socket.socket) -> None:
    """Closes an accepted connection that nothing serves with a reset (an
    RST, ``SO_LINGER`` 0), as the kernel ends the connections left in a
    closed listener's backlog: the client sees that it was not served,
    not a clean end of stream."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def reset_on_close(conn: Any) -> None:
    """Makes the close of ``conn`` (a stream socket) reset the connection
    (``SO_LINGER`` 0), as the kernel resets one closed with bytes left
    unread in its queue; nothing for another object."""
    if is_stream(conn):
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _fd_of(obj: Any) -> int:
    return obj if isinstance(obj, int) else obj.fileno()


def os_error(code: int) -> OSError:
    """The ``OSError`` subclass for errno ``code`` (``ConnectionResetError``...)."""
    return OSError(code, os.strerror(code))


# The family and type of a socket as the numbers _socket keeps
# (socket.socket's properties make an enum of each, on every read).
_RAW_FAMILY = _socket.socket.family.__get__
_RAW_TYPE = _socket.socket.type.__get__
_NONBLOCK = socket.SOCK_NONBLOCK


def _accepted(listener: socket.socket, fd: int) -> socket.socket:
    """The socket of connection ``fd`` accepted on ``listener``: non-blocking
    as the ring's accept made it (``SOCK_NONBLOCK``), which its type says,
    so that making the object costs no system call (``setblocking`` would
    set the flag again)."""
    return socket.socket(_RAW_FAMILY(listener), _RAW_TYPE(listener) | _NONBLOCK, listener.proto, fileno=fd)


def _sockaddr(conn: socket.socket, address: Any) -> bytes | None:
    """``address`` as the kernel's socket address for connecting ``conn``
    (an IPv4, IPv6 or Unix stream socket: see :func:`pack_address`); None
    for any other socket or address, which is connected by readiness
    instead."""
    if conn.type != socket.SOCK_STREAM:
        return None
    return pack_address(conn.family, address)


# The room for a path in the kernel's sockaddr_un.
_SUN_PATH = 108


def pack_address(family: int, address: Any) -> bytes | None:
    """``address`` as the kernel's ``sockaddr_in`` (a numeric host and a
    port), ``sockaddr_in6`` (the same, with flow information and scope
    if given) or ``sockaddr_un`` (a path, or a name in Linux's abstract
    namespace, which starts with a NUL byte) for a socket of ``family``,
    as ``socket.connect`` and ``sendto`` would pack it; None for any other
    family or address (a host name, a port out of range, a path too long),
    which the caller hands to those calls instead."""
    try:
        if family == socket.AF_INET:
            host, port = address
            return (struct.pack("=H", socket.AF_INET) + struct.pack("!H", port)
                    + socket.inet_pton(socket.AF_INET, host) + bytes(8))
        if family == socket.AF_INET6:
            host, port, flowinfo, scope_id = (tuple(address) + (0, 0))[:4]
            return (struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, flowinfo)
                    + socket.inet_pton(socket.AF_INET6, host) + struct.pack("=I", scope_id))
        if family == socket.AF_UNIX:
            path = bytes(address) if isinstance(address, (bytes, bytearray)) else os.fsencode(address)
            abstract = path[:1] == b"\0"
            if not path or len(path) > _SUN_PATH or (not abstract and (len(path) == _SUN_PATH or b"\0" in path)):
                return None
            return struct.pack("=H", socket.AF_UNIX) + path
    except (TypeError, ValueError, OSError, struct.error):
        pass
    return None


def is_stream(conn: Any) -> bool:
    """Whether ``conn`` is a stream socket (``SOCK_STREAM``), whose receive
    may take what exceeds its first buffer: on a datagram or
    ``SOCK_SEQPACKET`` socket what of a message does not fit is dropped,
    and a second receive would take the next message."""
    return isinstance(conn, socket.socket) and _RAW_TYPE(conn) == socket.SOCK_STREAM


def was_reset(conn: Any) -> bool:
    """Whether the end of stream a TCP receive saw, while a send on the
    same socket was in flight, is the peer's reset.

    A reset is reported once, to whichever call on the socket comes first:
    when the send took it, the receive only sees the stream ended. A socket
    is then in ``CLOSE``; one whose peer ended the stream cleanly is in
    ``CLOSE_WAIT`` (``CLOSE`` only after our own end was sent, which waits
    for sends in flight).
    """
    if not isinstance(conn, socket.socket) or conn.type != socket.SOCK_STREAM:
        return False
    if conn.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except OSError:
        return False
    return info[0] == _TCP_CLOSE


class HeldPipe:
    """A pipe transport's file (``connect_read_pipe``/``connect_write_pipe``,
    a subprocess's pipes) as the proactor works on it: a duplicate of its
    descriptor, held open like a socket (see :func:`hold_open`).

    The caller keeps its own file object and may close it while an
    operation is in flight (or about to go back to the descriptor after a
    readiness wait or a short write); the operation then still reaches the
    pipe, never a file that took the caller's number. ``close()`` closes
    the caller's file at once (the transport owns it, as asyncio's do) and
    the duplicate once no operation holds it.
    """

    def __init__(self, pipe: Any) -> None:
        #: The caller's file object.
        self.pipe = pipe
        self._fd = os.dup(pipe.fileno())
        self._io_refs = 0
        self._closed = False

    def fileno(self) -> int:
        """The duplicate's number (-1 once closed)."""
        return self._fd

    def close(self) -> None:
        """Closes the caller's file, and the duplicate unless an operation holds it."""
        if self._closed:
            return
        self._closed = True
        try:
            self.pipe.close()
        finally:
            if self._io_refs <= 0:
                self._real_close()

    def _decref_socketios(self) -> None:
        self._io_refs -= 1
        if self._closed and self._io_refs <= 0:
            self._real_close()

    def _real_close(self) -> None:
        if self._fd != -1:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        return f"<HeldPipe fd={self._fd} of {self.pipe!r}>"


def hold_open(sock: Any) -> bool:
    """Defers the real close of ``sock`` until :func:`release`: its
    ``close()`` then only marks it closed, so that its descriptor's number
    is not reused while an operation may still go back to it (socket's own
    mechanism for the files ``makefile`` returns; :class:`HeldPipe` does
    the same for a pipe). False, holding nothing, for another object (a
    test's mock)."""
    if not isinstance(sock, (socket.socket, HeldPipe)) or type(getattr(sock, "_io_refs", None)) is not int:
        return False
    sock._io_refs += 1
    return True


def release(sock: socket.socket) -> None:
    """Ends one :func:`hold_open` that held; closes ``sock`` if it was
    closed meanwhile."""
    sock._decref_socketios()


class RingProactor:
    """Operations on one ring as asyncio futures (see the module's doc)."""

    def __init__(self, ring: _blockio.LoopRing) -> None:
        self._ring = ring
        self._loop: Any = None
        # token -> (future or None, kind, argument); a transport's receive
        # comes here only when its completion goes to _finish
        self._ops: dict[int, tuple[Any, int, Any]] = {}
        # descriptor -> (weak reference to its socket, bytes received after a cancel)
        self._kept: dict[int, tuple[Any, bytes]] = {}
        # Per descriptor: [receives left to skip the try at once, the
        # backoff's length] (see _skip_at_once); a number reused by another
        # socket inherits it, which costs that socket a few tries at most.
        self._at_once_backoff: dict[int, list[int]] = {}
        # descriptor -> (weak reference to its socket, datagrams received
        # after a cancel, oldest first: (bytes, address))
        self._kept_datagrams: dict[int, tuple[Any, collections.deque[tuple[bytes, Any]]]] = {}
        # listening descriptor -> (weak reference to its socket, connections
        # accepted after a cancel: (descriptor, address))
        self._kept_conns: dict[int, tuple[Any, list[tuple[int, Any]]]] = {}
        # descriptor -> token of its latest receive (or accept) in flight;
        # a transport's receive is not here but in the ring's slab, with
        # its StreamReceive, callback and hold (LoopRing.receiving)
        self._receiving: dict[int, int] = {}
        # receives cancelled by the proactor to hand them kept bytes
        self._redirected: set[int] = set()
        self._before_wait: list[Callable[[], None]] = []
        # descriptors whose send finished in the batch being dispatched
        self._sent: set[int] = set()
        # descriptor -> its sends in flight (a count, not a scan of every
        # operation: a loop with 10,000 connections ends many at once)
        self._sends: dict[int, int] = {}
        # token -> the socket its operation works on, held open until done
        self._held: dict[int, socket.socket] = {}
        # the batch being dispatched found no callback queued (see select)
        self._direct = True
        # opens the ring has answered whose callers have not taken the
        # descriptor yet (see take_opened): closed by close(), as nobody
        # else would close them once the tasks awaiting them never run
        self._opened: set[OpFuture] = set()
        # sockets whose transport's cancelled receive took bytes that
        # nothing will read (see took_unread)
        self._unread: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        # sockets whose transport's receive was handed a reset (see
        # reset_may_be_taken)
        self._reset_taken: weakref.WeakSet[Any] = weakref.WeakSet()
        # the readiness waits (ReadyCall) by descriptor, for end_waits
        self._ready_waits: dict[int, set[ReadyCall]] = {}

    def set_loop(self, loop: Any) -> None:
        self._loop = loop

    # -- submitting --------------------------------------------------------

    def _future(self, token: int, kind: int, arg: Any = None, conn: Any = None) -> OpFuture:
        fut = OpFuture(self, token, loop=self._loop)
        self._ops[token] = (fut, kind, arg)
        if kind == _SEND:
            self._sends[arg[0]] = self._sends.get(arg[0], 0) + 1
        self._hold(token, conn)
        return fut

    def _hold(self, token: int, conn: Any) -> None:
        """Keeps ``conn``'s descriptor open until operation ``token`` is done."""
        if hold_open(conn):
            self._held[token] = conn

    def _release(self, token: int) -> None:
        conn = self._held.pop(token, None)
        if conn is not None:
            release(conn)

    def _done(self, result: Any) -> futures.Future:
        fut = self._loop.create_future()
        fut.set_result(result)
        return fut

    def _take_kept(self, conn: Any, n: int) -> bytes | None:
        """Bytes a cancelled receive left for ``conn``, at most ``n``."""
        fd = _fd_of(conn)
        entry = self._kept.pop(fd, None)
        if entry is None:
            return None
        ref, data = entry
        if ref() is not conn:  # the descriptor was closed and reused
            return None
        if n and len(data) > n:
            self._kept[fd] = (ref, data[n:])
            data = data[:n]
        return data

    def _drop_kept(self, conn: Any) -> None:
        """Drops the bytes kept for ``conn``, whose reader has gone."""
        entry = self._kept.get(_fd_of(conn))
        if entry is not None and entry[0]() is conn:
            del self._kept[_fd_of(conn)]

    def recv(self, conn: Any, nbytes: int, flags: int = 0) -> futures.Future:
        """Receives at most ``nbytes`` bytes (``b''`` at end of stream)."""
        kept = self._take_kept(conn, nbytes)
        if kept is not None:
            return self._done(kept)
        fd = _fd_of(conn)
        token = self._ring.recv(fd, nbytes, isinstance(conn, socket.socket), is_stream(conn))
        self._receiving[fd] = token
        return self._future(token, _RECV, (fd, conn, nbytes), conn)

    def recv_at_once(self, conn: Any, nbytes: int) -> bytes | None:
        """What a receive of at most ``nbytes`` gets without waiting, in
        the caller's step: bytes a cancelled receive kept, else on a stream
        socket what it holds (``b''`` at its end), as asyncio's selector
        loop's ``sock_recv`` tries first; None when it must wait (then
        :meth:`recv`). ``OSError`` as ``socket.recv`` raises it. Bytes
        already there then cost no operation, completion or turn of the
        loop (``docs/benchmarks.md``, "A ``sock_recv`` tried at once").
        Not while a receive of the socket is still on the ring, done or
        cancelled but not reaped: what it took would come after these; nor
        when the loop's turn is due (``LoopRing.recv_now``: a task that
        keeps receiving queued bytes would starve the others)."""
        if self._kept:
            kept = self._take_kept(conn, nbytes)
            if kept is not None:
                return kept
        return self._at_once(conn, self._ring.recv_now, nbytes)  # type: ignore[no-any-return]

    def recv_into_at_once(self, conn: Any, buf: Any) -> int | None:
        """As :meth:`recv_at_once`, into the writable buffer ``buf``:
        the count received, or None when the receive must wait (then
        :meth:`recv_into`)."""
        if self._kept:
            kept = self._take_kept(conn, len(memoryview(buf).cast("B")))
            if kept is not None:
                memoryview(buf).cast("B")[: len(kept)] = kept
                return len(kept)
        return self._at_once(conn, self._ring.recv_into_now, buf)  # type: ignore[no-any-return]

    def _at_once(self, conn: Any, receive: Callable[[int, Any], Any], arg: Any) -> Any:
        """``receive(fd, arg)`` (``LoopRing.recv_now``, ``recv_into_now``)
        on ``conn``'s descriptor, unless ``conn`` is no stream socket, a
        receive of it is still on the ring, or its backoff skips the try:
        what it received, or None when the caller's receive is to wait on
        the ring (nothing was queued, or the loop's turn is due)."""
        fd = _fd_of(conn)
        if fd in self._receiving or not is_stream(conn) or self._skip_at_once(fd):
            return None
        got = receive(fd, arg)
        if got is None:
            self._missed_at_once(fd)
        elif got is False:
            return None  # (the loop's turn is due: this receive waits for it)
        elif fd in self._at_once_backoff:
            del self._at_once_backoff[fd]
        return got

    # A request-response peer's receive, made after its reply went out,
    # finds nothing queued: each try would be one failed ``recv`` more per
    # request. After a try that found nothing, a socket's next receives go
    # straight to the ring, 1 at first, then twice as many after each
    # further miss, up to ``_AT_ONCE_BACKOFF_MAX``; a try that finds bytes
    # ends the backoff. A steady stream (or a peer that sends before the
    # receive is made) is still served at once.
    _AT_ONCE_BACKOFF_MAX = 16

    def _skip_at_once(self, fd: int) -> bool:
        """Whether ``fd``'s receive skips the try at once (and counts it)."""
        back = self._at_once_backoff.get(fd)
        if back is None or not back[0]:
            return False
        back[0] -= 1
        return True

    def _missed_at_once(self, fd: int) -> None:
        """Notes that ``fd``'s try at once found nothing (see above); one
        that finds bytes deletes its entry."""
        back = self._at_once_backoff.get(fd)
        if back is None:
            self._at_once_backoff[fd] = [1, 1]
        else:
            back[1] = back[0] = min(back[1] * 2, self._AT_ONCE_BACKOFF_MAX)

    def recv_into(self, conn: Any, buf: Any, flags: int = 0) -> futures.Future:
        """Receives into ``buf``; the result is the byte count."""
        kept = self._take_kept(conn, len(memoryview(buf).cast("B")))
        if kept is not None:
            memoryview(buf).cast("B")[: len(kept)] = kept
            return self._done(len(kept))
        fd = _fd_of(conn)
        token = self._ring.recv_into(fd, buf, 0, isinstance(conn, socket.socket))
        self._receiving[fd] = token
        return self._future(token, _RECV_INTO, (fd, conn, buf), conn)

    def receive(self, rx: StreamReceive, callback: Callable[[Any, Any], None]) -> None:
        """Arms ``rx``'s next receive, whose completion calls ``callback``
        (see :class:`StreamReceive`; the receive in flight holds it, ``rx``
        does not, so that no cycle outlives it): bytes a cancelled receive
        left for its socket are handed on in the next step of the loop,
        else a receive goes to the ring."""
        rx.cancelled = False
        if rx.datagram:
            kept_datagram = self._take_datagram(rx.conn, rx.nbytes) if self._kept_datagrams else None
            if kept_datagram is not None:
                rx.token = marker = object()
                self._loop.call_soon(self._deliver_kept, rx, marker, kept_datagram, callback)
                return
        elif self._kept:
            kept = self._take_kept(rx.conn, rx.nbytes)
            if kept is not None:
                rx.token = marker = object()
                self._loop.call_soon(self._deliver_kept, rx, marker, kept, callback)
                return
        # Kept in the ring's slab with rx and callback (and the socket
        # held open), not in _ops: see _blockio.dispatch_batch.
        _blockio.arm_ring_receive(rx, callback)

    def _deliver_kept(self, rx: StreamReceive, marker: object, data: bytes, callback: Callable) -> None:
        if rx.token is not marker:
            return  # armed again meanwhile
        if rx.cancelled:
            # (as _finish_stream drops them)
            if rx.datagram:
                self.drop_datagrams(rx.conn)
            else:
                self._drop_kept(rx.conn)
            return
        rx.token = None
        rx.deliver(callback, data, None)

    def send(self, conn: Any, buf: Any, flags: int = 0) -> futures.Future:
        """Sends all of ``buf``; the result is its length."""
        token, sent = self._ring.send(_fd_of(conn), buf, isinstance(conn, socket.socket))
        if token is None:
            return self._done(sent)
        return self._future(token, _SEND, (_fd_of(conn),), conn)

    def send_or_future(self, conn: Any, buf: Any) -> tuple[futures.Future | None, int]:
        """Sends all of ``buf``: ``(None, 0)`` when it all went out at once,
        else the future of the rest's completion and the count of bytes
        the descriptor did not take at once (what is still to go out)."""
        fd = _fd_of(conn)
        token, sent = self._ring.send(fd, buf, isinstance(conn, socket.socket))
        if token is None:
            return None, 0
        return self._future(token, _SEND, (fd,), conn), len(buf) - sent

    def sent_rest(self, conn: Any, token: int) -> futures.Future:
        """The future of send ``token`` on ``conn``, submitted to the ring
        directly (``_ring.send``) with a rest to go out."""
        fd = _fd_of(conn)
        return self._future(token, _SEND, (fd,), conn)

    def accept(self, listener: socket.socket) -> futures.Future:
        """Accepts a connection; the result is ``(socket, address)``."""
        fd = listener.fileno()
        if fd == -1:
            self._drop_closed_listeners_conns(listener)
        entry = self._kept_conns.get(fd)
        if entry is not None:
            if entry[0]() is listener:
                conn_fd, addr = entry[1].pop(0)
                if not entry[1]:
                    del self._kept_conns[fd]
                return self._done((_accepted(listener, conn_fd), addr))
            self._drop_kept_conns(fd)
        token = self._ring.accept(fd)
        self._receiving[fd] = token
        return self._future(token, _ACCEPT, (fd, listener), listener)

    def serve_accept(self, acc: ServerAccept) -> None:
        """Arms ``acc``'s next accept: a connection a cancelled accept kept
        for its listener is handed on in the next step of the loop, else an
        accept goes to the ring."""
        listener = acc.listener
        fd = listener.fileno()
        acc.cancelled = False
        entry = self._kept_conns.get(fd)
        if entry is not None:
            if entry[0]() is listener:
                conn_fd, addr = entry[1].pop(0)
                if not entry[1]:
                    del self._kept_conns[fd]
                acc.token = marker = object()
                self._loop.call_soon(self._deliver_kept_conn, acc, marker, (_accepted(listener, conn_fd), addr))
                return
            self._drop_kept_conns(fd)
        token = self._ring.accept(fd)
        acc.token = token
        self._receiving[fd] = token
        self._ops[token] = (acc, _SERVE, (fd, listener))
        self._hold(token, listener)

    def accept_waiting(self, listener: socket.socket) -> tuple[socket.socket, Any] | None:
        """A connection already waiting in ``listener``'s backlog, accepted
        at once (``LoopRing.accept_now``: no turn of the loop), or None when
        none waits or connections kept for the listener by a cancelled
        accept are still to be handed on (they go first, through
        :meth:`serve_accept`). ``OSError`` for what the kernel refuses."""
        fd = listener.fileno()
        if fd in self._kept_conns:
            return None
        # The kernel says that no connection waits behind a ring accept for
        # TCP listeners only (an AF_UNIX accept never says that more wait).
        tcp = (
            listener.family in (socket.AF_INET, socket.AF_INET6)
            and listener.type == socket.SOCK_STREAM
            and listener.proto in (0, socket.IPPROTO_TCP)
        )
        got = self._ring.accept_now(fd, tcp)
        if got is None:
            return None
        return _accepted(listener, got[0]), got[1]

    def _deliver_kept_conn(self, acc: ServerAccept, marker: object, conn: tuple[socket.socket, Any]) -> None:
        if acc.token is not marker:
            return  # armed again meanwhile
        if acc.cancelled:
            self.keep_accepted(acc.listener, *conn)
            return
        acc.token = None
        acc.deliver(conn, None)

    def keep_accepted(self, listener: socket.socket, conn: socket.socket, addr: Any) -> None:
        """Keeps ``conn``, accepted on ``listener`` for a caller that was
        cancelled meanwhile, for the next accept."""
        if getattr(listener, "_closed", False):
            reset(conn)
            return
        fd = listener.fileno()
        conn_fd = conn.detach()
        self._after_cancel(_ACCEPT, (fd, listener), conn_fd, (conn_fd, addr))

    def keep_received(self, conn: Any, data: bytes) -> None:
        """Keeps ``data``, received on ``conn`` for a caller that was
        cancelled meanwhile, for the next receive."""
        if data:
            self._after_cancel(_RECV, (_fd_of(conn), conn, len(data)), len(data), data)

    def _drop_closed_listeners_conns(self, listener: socket.socket) -> None:
        """Closes the connections kept for ``listener``, closed since (as its
        backlog's are); the accept on it then fails with EBADF."""
        for fd, (ref, _conns) in list(self._kept_conns.items()):
            if ref() is listener:
                self._drop_kept_conns(fd)

    def _drop_conns_of_closed_listeners(self) -> None:
        """Closes the connections kept for every listener closed (or
        collected) since: nothing will accept them, and their peers see
        their end as for those left in a closed listener's backlog. A
        socket's ``close()`` tells no one, so each wait looks first; a
        listener is closed in a step of the loop, and the wait that follows
        that step ends its connections."""
        for fd, (ref, _conns) in list(self._kept_conns.items()):
            listener = ref()
            if listener is None or getattr(listener, "_closed", False) or listener.fileno() == -1:
                self._drop_kept_conns(fd)

    def _drop_kept_conns(self, fd: int) -> None:
        """Closes the connections kept for listening descriptor ``fd``."""
        _ref, conns = self._kept_conns.pop(fd, (None, []))
        for conn_fd, _addr in conns:
            reset(socket.socket(fileno=conn_fd))

    def pread(self, fd: int, offset: int, length: int) -> futures.Future:
        """Reads at most ``length`` bytes of the file ``fd`` at ``offset``
        (one ``pread``, handed to the kernel at once, which then holds the
        file: see ``LoopRing.pread``); the result is the bytes, short at
        the end of the file. Cancelling the future drops them."""
        return self._future(self._ring.pread(fd, offset, length), _PREAD)

    def pread_into(self, fd: int, offset: int, buf: Any) -> futures.Future:
        """Reads at most ``len(buf)`` bytes of the file ``fd`` at ``offset``
        into ``buf`` (held until the kernel answers), as :meth:`pread`;
        the result is the byte count."""
        return self._future(self._ring.pread_into(fd, offset, buf), _PREAD)

    def pwrite(self, fd: int, offset: int, data: Any) -> futures.Future:
        """Writes ``data`` (held until the kernel answers) to the file
        ``fd`` at ``offset`` (one ``pwrite``, handed to the kernel at once
        and never cancelled: see ``LoopRing.pwrite``); the result is the
        byte count."""
        return self._future(self._ring.pwrite(fd, offset, data), _PREAD)

    def openat(self, path: bytes, flags: int, mode: int) -> futures.Future:
        """Opens ``path`` (``os.open``'s ``flags`` and ``mode``; one
        ``openat``, handed to the kernel at once); the result is the new
        descriptor, which its caller takes with :meth:`take_opened`.
        Cancelled after the kernel opened the file, the descriptor is
        closed, never leaked; so is one answered but never taken when the
        loop closes."""
        return self._future(self._ring.openat(path, flags, mode), _OPEN)

    def take_opened(self, fut: futures.Future) -> int | None:
        """The descriptor an :meth:`openat`'s future holds, for its caller
        to own from now on, or None when the caller is not to have it (the
        future was cancelled or failed, or the loop's close has closed the
        descriptor). A descriptor not taken by the time the loop closes is
        closed then: the task awaiting it never runs again."""
        if fut not in self._opened:
            return None
        self._opened.discard(fut)
        fd: int = fut.result()
        return fd

    def poll(self, fd: int, mask: int) -> futures.Future:
        """A future for one readiness of ``fd`` (``mask``: ``POLLIN``...)."""
        return self._future(self._ring.poll(fd, mask), _POLL)

    def poll_callback(self, fd: int, mask: int, callback: Callable[[int], None]) -> int:
        """Calls ``callback(events or -errno)`` once ``fd`` is ready; returns the token."""
        token = self._ring.poll(fd, mask)
        self._ops[token] = (None, _CALLBACK, callback)
        return token

    def reset_may_be_taken(self, conn: Any) -> bool:
        """Whether a reset of ``conn``'s connection may have been reported
        to a receive on it rather than to the caller: a receive (a
        ``sock_recv``'s or a transport's) is in flight or its completion
        not yet dispatched, or a transport's receive was handed the reset."""
        fd = _fd_of(conn)
        if fd in self._receiving or conn in self._reset_taken:
            return True
        return self._ring is not None and self._ring.receiving(fd) is not None

    def took_unread(self, conn: Any) -> bool:
        """Whether a transport's receive on ``conn``, cancelled by its
        close or abort, took bytes that nothing reads (they would be in
        the kernel's queue on asyncio's loop, and make the close a reset)."""
        if conn in self._unread:
            self._unread.discard(conn)
            return True
        return False

    def cancel_op(self, token: int) -> bool:
        """Asks the kernel to cancel operation ``token`` (one of ``_ops``,
        or a transport's receive, kept in the ring's slab; the ring ignores
        a token not in flight, and a file write, never cancelled). True
        when the kernel holds everything of it (see ``_cancel``): its
        descriptor's number may be closed now, without waiting for the
        completion."""
        if self._ring is not None and type(token) is int:
            return self._cancel(token)
        return False

    def cancel_callback(self, token: int) -> bool:
        """Cancels as ``cancel_op`` does a poll of ``poll_callback``; when
        the kernel holds all of it, its callback is forgotten at once (its
        answer, the cancel's or a readiness that came first, reaches
        nothing): a watch added and removed without a turn of the loop
        leaves no entry in ``_ops``."""
        if self.cancel_op(token):
            self._ops.pop(token, None)
            return True
        return False

    def _cancel(self, token: int) -> bool:
        # Once cancelled, an operation never goes back to its descriptor's
        # number, and `cancel` hands the kernel what of it was still queued
        # (the kernel holds the file of what it has): the socket's close
        # need not wait for the completion. If the kernel took not all of
        # the queue, the socket stays held until the completion. (A
        # transport's receive, kept in the ring's slab, has its hold ended
        # by the ring's cancel itself.)
        if self._ring.cancel(token):
            self._release(token)
            return True
        return False

    # -- driven by readiness ------------------------------------------------

    def _ready_poll(self, call: ReadyCall, fd: int, mask: int, conn: Any) -> int:
        """Polls ``fd`` for ``mask`` on the ring for ``call`` (see
        :class:`ReadyCall`), whose ``ready`` the completion calls from the
        dispatch; ``conn`` is held open until the kernel is done with the
        poll. Returns the poll's token."""
        token = self._ring.poll(fd, mask)
        self._ops[token] = (call, _READY, None)
        self._hold(token, conn)
        return token

    def end_waits(self, conn: socket.socket) -> None:
        """Ends the readiness waits on ``conn`` (a socket its transport
        closed; a sendfile on it holds it open) with ``BrokenPipeError``, as
        a wait on a socket shut down would end: the socket is closed, not
        shut down, and would never be ready (its peer may be waiting for
        the sendfile to end before it reads). Their polls are cancelled."""
        for call in list(self._ready_waits.get(_fd_of(conn), ())):
            call.end_with(os_error(errno.EPIPE))

    def _inline_or_when_ready(self, conn: socket.socket, mask: int, call: Callable[[], Any]) -> futures.Future:
        """``call()`` inline (as the caller's own step: a caller that then
        blocks has had its system call made); if it would block, again
        each time ``conn`` is ready until it does not."""
        fut = self._loop.create_future()
        try:
            fut.set_result(call())
        except (BlockingIOError, InterruptedError):
            return ReadyCall(self, conn, mask, call)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        return fut

    def recvfrom(self, conn: socket.socket, nbytes: int, flags: int = 0) -> futures.Future:
        """Receives one datagram of at most ``nbytes`` bytes (a longer one
        is cut, as ``socket.recvfrom`` cuts it); the result is ``(bytes,
        address)``. A datagram a cancelled receive took is handed over
        first; else one already queued is received at once, in the
        caller's step, and when none is, a ``recvmsg`` goes to the ring
        (see :meth:`_receive_datagram`)."""
        kept = self._take_datagram(conn, nbytes)
        if kept is not None:
            return self._done(kept)
        if flags or nbytes < 0:
            # (socket.recvfrom's own checks and flags, by readiness)
            return self._inline_or_when_ready(conn, POLLIN, lambda: conn.recvfrom(nbytes, flags))
        fd = conn.fileno()
        return self._receive_datagram(lambda: self._ring.recvmsg(fd, nbytes), (fd, conn, nbytes, None))

    def recvfrom_into(self, conn: socket.socket, buf: Any, nbytes: int = 0, flags: int = 0) -> futures.Future:
        """As :meth:`recvfrom`, into at most ``nbytes`` (0: all) of
        ``buf``, held until the receive's completion; the result is
        ``(count, address)``."""
        view = memoryview(buf).cast("B")
        if flags or nbytes < 0 or nbytes > len(view):
            # (socket.recvfrom_into's own checks and flags, by readiness)
            return self._inline_or_when_ready(conn, POLLIN, lambda: conn.recvfrom_into(buf, nbytes, flags))
        room = min(nbytes, len(view)) if nbytes else len(view)
        kept = self._take_datagram(conn, room)
        if kept is not None:
            data, addr = kept
            view[: len(data)] = data
            return self._done((len(data), addr))
        fd = conn.fileno()
        return self._receive_datagram(lambda: self._ring.recvmsg_into(fd, buf, room), (fd, conn, room, buf))

    def _receive_datagram(self, call: Callable[[], Any], arg: tuple) -> futures.Future:
        """The future of a datagram receive made by ``call()`` (the ring's
        ``recvmsg``/``recvmsg_into`` with ``now``: a ``recvmsg`` with
        ``MSG_DONTWAIT`` made by the ring's call before it submits, so
        that a datagram already queued costs no completion, as on
        asyncio's selector loop; ``docs/benchmarks.md``, "Datagrams on
        the ring"): done at once with the value or error when it found
        one queued, else the ring's operation, whose argument for the
        tables is ``arg``."""
        try:
            got = call()
        except OSError as exc:
            fut = self._loop.create_future()
            fut.set_exception(exc)
            return fut
        if type(got) is not int:
            return self._done(got)
        fd = arg[0]
        self._receiving[fd] = got
        return self._future(got, _RECVFROM, arg, arg[1])

    def _take_datagram(self, conn: Any, n: int) -> tuple[bytes, Any] | None:
        """The oldest datagram a cancelled receive left for ``conn``, cut to
        ``n`` bytes as a receive of ``n`` would cut it."""
        fd = _fd_of(conn)
        entry = self._kept_datagrams.get(fd)
        if entry is None:
            return None
        ref, kept = entry
        if ref() is not conn:  # the descriptor was closed and reused
            del self._kept_datagrams[fd]
            return None
        data, addr = kept.popleft()
        if not kept:
            del self._kept_datagrams[fd]
        return data[:n], addr

    def keep_datagram(self, conn: Any, datagram: tuple[bytes, Any], first: bool = False) -> None:
        """Keeps ``datagram`` (``(bytes, address)``), which a cancelled
        receive took, for the next receive on ``conn``: after those kept
        before, or before them (``first``: one that came before them, whose
        caller was cancelled before it resumed)."""
        if getattr(conn, "_closed", False) or conn.fileno() == -1:
            return  # (nothing receives on a closed socket again)
        fd = conn.fileno()
        entry = self._kept_datagrams.get(fd)
        if entry is None or entry[0]() is not conn:
            entry = self._kept_datagrams[fd] = (weakref.ref(conn), collections.deque())
        if first:
            entry[1].appendleft(datagram)
        else:
            entry[1].append(datagram)

    def drop_datagrams(self, conn: Any) -> None:
        """Drops the datagrams kept for ``conn``, whose reader has gone (a
        datagram transport's close)."""
        entry = self._kept_datagrams.get(_fd_of(conn))
        if entry is not None and entry[0]() is conn:
            del self._kept_datagrams[_fd_of(conn)]

    def sendto(self, conn: socket.socket, buf: Any, flags: int = 0, addr: Any = None) -> futures.Future:
        """Sends one datagram to ``addr``; with ``addr`` None, to the peer
        the socket is connected to (a datagram transport made on a
        connected socket, whose ``sendto(data)`` passes no address). Tried
        at once; when the socket's buffer is full, made again once a ring
        poll says the socket is writable, on the loop's thread: a
        ``sock_sendto`` cancelled while it waits then sends nothing, as on
        asyncio's loop (a ``sendmsg`` left on the ring could complete as
        the cancel comes, and a caller who retries would send the datagram
        twice). A datagram transport's buffered datagrams, which nothing
        cancels, go by :meth:`send_datagram`."""
        if addr is None:
            return self._inline_or_when_ready(conn, POLLOUT, lambda: conn.send(buf, flags))
        return self._inline_or_when_ready(conn, POLLOUT, lambda: conn.sendto(buf, flags, addr))

    def send_datagram(self, conn: socket.socket, data: Any, addr: Any) -> futures.Future | None:
        """A ``sendmsg`` of ``data`` on the ring to ``addr`` (None: the
        connected peer), whose future's result is the count sent; None,
        and nothing sent, when ``addr`` is not one the ring's send can
        take (see :func:`pack_address`)."""
        packed = None
        if addr is not None:
            packed = pack_address(conn.family, addr)
            if packed is None:
                return None
        fd = conn.fileno()
        token = self._ring.sendmsg(fd, data, packed)
        return self._future(token, _SEND, (fd,), conn)

    def connect(self, conn: socket.socket, address: Any) -> futures.Future:
        """Connects ``conn``: an IPv4 or IPv6 socket given a numeric address
        by a ``connect`` on the ring (the kernel tries at once and waits for
        the handshake itself; a failure is asyncio's ``OSError``, "Connect
        call failed"); any other, the ``connect`` call now and its outcome
        when the socket is writable."""
        packed = _sockaddr(conn, address)
        if packed is not None:
            kind = _CONNECT_UNIX if conn.family == socket.AF_UNIX else _CONNECT
            return self._future(self._ring.connect(conn.fileno(), packed), kind, address, conn)
        fut = self._loop.create_future()
        try:
            conn.connect(address)
        except (BlockingIOError, InterruptedError):
            return self._connected(conn, address)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        return fut

    def _connected(self, conn: socket.socket, address: Any) -> futures.Future:
        """A future done when the connect under way on ``conn`` ends: None
        once connected, else asyncio's ``OSError`` ("Connect call failed")."""

        def outcome() -> None:
            err = conn.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err in (errno.EINPROGRESS, errno.EALREADY):
                raise BlockingIOError(err, os.strerror(err))
            if err:
                raise OSError(err, f"Connect call failed {address}")

        return ReadyCall(self, conn, POLLOUT, outcome)

    def sendfile_some(self, sock: socket.socket, in_fd: int, offset: int, count: int) -> futures.Future:
        """``os.sendfile`` of at most ``count`` bytes from ``offset`` once
        ``sock`` takes some; the result is the count sent (0 at end of file)."""
        out_fd = sock.fileno()
        return self._inline_or_when_ready(sock, POLLOUT, lambda: os.sendfile(out_fd, in_fd, offset, count))

    def send_some(self, sock: socket.socket, data: Any) -> futures.Future:
        """One ``send`` of ``data`` once ``sock`` takes some; the result is
        the count sent (a sendfile's bytes read on the ring: the count of
        each call is what the sendfile reports if it stops)."""
        return self._inline_or_when_ready(sock, POLLOUT, lambda: sock.send(data))

    async def sendfile(self, sock: socket.socket, file: Any, offset: int, count: int) -> None:
        """Sends ``count`` bytes of ``file`` from ``offset`` (fewer at its end)."""
        in_fd = file.fileno()
        while count > 0:
            n = await self.sendfile_some(sock, in_fd, offset, count)
            if n == 0:
                return
            offset += n
            count -= n

    def wait_closed(self, pipe: Any) -> futures.Future | None:
        """A future done when the reader of the write end ``pipe`` is gone:
        for a FIFO (whose write end reports ``POLLERR`` then) or a socket
        (readable then), as asyncio's Unix loop watches them; ``None`` for
        other files (a terminal is readable for other reasons)."""
        mode = os.fstat(_fd_of(pipe)).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return None
        return self.poll(_fd_of(pipe), POLLIN)

    def _stop_serving(self, sock: socket.socket) -> None:
        """Closes the connections kept for ``sock`` (the loop cancels its accept)."""
        entry = self._kept_conns.get(sock.fileno())
        if entry is not None and entry[0]() is sock:
            self._drop_kept_conns(sock.fileno())

    # -- the wait -----------------------------------------------------------

    def select(self, timeout: float | None = None) -> tuple:
        """Waits at most ``timeout`` seconds and resolves every finished operation.

        In a child forked while the loop ran, the ring is the parent's: a
        step with callbacks ready (``timeout`` 0) runs them without
        touching it, so that what ends without I/O ends (``asyncio.run``'s
        cancellation of the tasks left, whose operations on the engine the
        child fails: see ``Engine._forget_parent``); a wait raises the
        ring's ``RuntimeError`` (a forked child makes its own loop)."""
        # In Rust (``_blockio.select_batch``), which the loop's turn calls
        # without this frame: the connections kept for listeners closed
        # since are closed, the arms queued in _before_wait run and _sent
        # is emptied; then the ring waits (no wait while completions are
        # left from a dispatch an exception interrupted: they go first).
        # A completion's protocol call goes behind the callbacks already
        # queued (asyncio's order: a completion is handled after what was
        # scheduled before it): at once when none is (_direct), else as
        # one of them. A transport's receive with bytes calls the
        # transport in the dispatch (Rust, from the ring's slab); anything
        # else is taken from _ops (a transport's receive that is not the
        # common case is put there first) and goes to _finish, and its
        # socket is released. Any error that comes out (a callback's
        # SystemExit or KeyboardInterrupt, or the dispatch's own) leaves
        # the rest of the batch in the ring, for the next select.
        _blockio.select_batch(self, timeout)
        return ()

    def _sending(self, fd: int) -> bool:
        """Whether a send on ``fd`` is in flight or finished in this batch."""
        return fd in self._sent or fd in self._sends

    def _finish(self, token: int, entry: tuple[Any, int, Any], res: int, value: Any) -> None:
        fut, kind, arg = entry
        if kind in (_STREAM, _SERVE):
            if self._receiving.get(arg[0]) == token:
                del self._receiving[arg[0]]
            if kind == _STREAM:
                self._finish_stream(token, fut, arg, res, value)
            else:
                self._finish_serve(token, fut, arg, res, value)
            return
        if kind == _SEND:
            self._sent.add(arg[0])
            left = self._sends.pop(arg[0]) - 1
            if left:
                self._sends[arg[0]] = left
        if kind == _CALLBACK:
            arg(res if res < 0 else value)
            return
        if kind == _READY:
            if not fut.done():
                fut.polled(res)
            return
        if kind in (_RECV, _RECV_INTO, _ACCEPT, _RECVFROM) and self._receiving.get(arg[0]) == token:
            del self._receiving[arg[0]]
        if token in self._redirected:
            self._redirected.discard(token)
            self._serve_redirected(fut, kind, arg, res, value)
            return
        if fut.done():  # cancelled; the kernel may still have done the work
            if res >= 0:
                self._after_cancel(kind, arg, res, value)
            return
        if res < 0:
            if res == -errno.ECANCELED:
                fut.cancel()
            elif kind == _CONNECT:
                # (asyncio's selector loop's words for a connect that failed
                # once under way)
                fut.set_exception(OSError(-res, f"Connect call failed {arg}"))
            else:
                fut.set_exception(os_error(-res))
        elif res == 0 and kind in (_RECV, _RECV_INTO) and self._sending(arg[0]) and was_reset(arg[1]):
            fut.set_exception(os_error(errno.ECONNRESET))
        elif kind == _ACCEPT:
            fd, addr = value
            fut.set_result((_accepted(arg[1], fd), addr))
        elif kind in (_CONNECT, _CONNECT_UNIX):
            fut.set_result(None)
        else:
            fut.set_result(value)
            if kind == _OPEN:
                self._opened.add(fut)

    def _finish_stream(self, token: int, rx: StreamReceive, arg: Any, res: int, value: Any) -> None:
        """Hands a transport's receive its outcome, as :meth:`_finish` and
        :meth:`_serve_redirected` resolve a receive's future."""
        if rx.datagram:
            self._finish_datagram(token, rx, arg, res, value)
            return
        redirected = token in self._redirected
        if redirected:
            self._redirected.discard(token)
            if res > 0:
                self._keep(_RECV, arg, res, value)
        if rx.cancelled:
            # Cancelled by its transport's close or abort: nothing reads the
            # socket again, and the bytes it took go with it (kept, they
            # would stay until the number is reused, and every transport's
            # arming would ask whether they are its own).
            self._drop_kept(rx.conn)
            if res > 0 and isinstance(rx.conn, socket.socket):
                self._unread.add(rx.conn)
            return
        if rx.token != token:
            if res >= 0 and not redirected:
                self._after_cancel(_RECV, arg, res, value)
            return
        callback = arg[3]
        if redirected and (res >= 0 or res == -errno.ECANCELED):
            self.receive(rx, callback)  # served from the kept bytes
            return
        rx.token = None
        if res < 0:
            data, exc = None, exceptions.CancelledError() if res == -errno.ECANCELED else os_error(-res)
        elif res == 0 and self._sending(arg[0]) and was_reset(arg[1]):
            data, exc = None, os_error(errno.ECONNRESET)
        else:
            data, exc = value, None
        if isinstance(exc, ConnectionResetError) and isinstance(rx.conn, socket.socket):
            self._reset_taken.add(rx.conn)
        try:
            if self._direct:
                rx.deliver(callback, data, exc)
            else:
                self._loop.call_soon(rx.deliver, callback, data, exc)
        finally:
            # The transport raises an error it is handed: the traceback
            # holds its frame, whose caller is this one, which must not
            # hold the error back (a reference cycle through the transport).
            exc = None

    def _finish_datagram(self, token: int, rx: StreamReceive, arg: Any, res: int, value: Any) -> None:
        """Hands a datagram endpoint's receive its outcome (``(bytes,
        address)``, an empty datagram too), as :meth:`_finish_stream` hands
        a stream's: a datagram taken by a receive cancelled to be served
        from kept ones is kept behind them; one taken by a receive its
        endpoint's close cancelled goes with the socket."""
        redirected = token in self._redirected
        if redirected:
            self._redirected.discard(token)
            if res >= 0:
                self.keep_datagram(rx.conn, value)
        if rx.cancelled:
            self.drop_datagrams(rx.conn)
            return
        if rx.token != token:
            if res >= 0 and not redirected:
                self._after_cancel(_RECVFROM, (arg[0], arg[1], arg[2], None), res, value)
            return
        callback = arg[3]
        if redirected and (res >= 0 or res == -errno.ECANCELED):
            self.receive(rx, callback)  # served from the kept datagrams
            return
        rx.token = None
        if res < 0:
            data, exc = None, exceptions.CancelledError() if res == -errno.ECANCELED else os_error(-res)
        else:
            data, exc = value, None
        try:
            if self._direct:
                rx.deliver(callback, data, exc)
            else:
                self._loop.call_soon(rx.deliver, callback, data, exc)
        finally:
            exc = None  # (see _finish_stream)

    def _finish_serve(self, token: int, acc: ServerAccept, arg: Any, res: int, value: Any) -> None:
        """Hands a server's accept its outcome, as :meth:`_finish` and
        :meth:`_serve_redirected` resolve an accept's future."""
        redirected = token in self._redirected
        if redirected:
            self._redirected.discard(token)
            if res >= 0:
                self._keep(_ACCEPT, arg, res, value)
        if acc.cancelled or acc.token != token:
            if res >= 0 and not redirected:
                self._after_cancel(_ACCEPT, arg, res, value)
            return
        if redirected and (res >= 0 or res == -errno.ECANCELED):
            self.serve_accept(acc)  # served from the kept connections
            return
        acc.token = None
        if res < 0:
            conn, exc = None, exceptions.CancelledError() if res == -errno.ECANCELED else os_error(-res)
        else:
            conn, exc = (_accepted(arg[1], value[0]), value[1]), None
        if self._direct:
            acc.deliver(conn, exc)
        else:
            self._loop.call_soon(acc.deliver, conn, exc)

    def _after_cancel(self, kind: int, arg: Any, res: int, value: Any) -> None:
        if kind == _OPEN:
            os.close(value)  # (its caller is gone: nobody else has the number)
            return
        if kind == _RECVFROM and (getattr(arg[1], "_closed", False) or arg[1].fileno() == -1):
            return  # (its socket is closed: nothing receives on it again)
        if kind == _ACCEPT or kind == _RECVFROM or (kind in (_RECV, _RECV_INTO) and res > 0):
            self._keep(kind, arg, res, value)
            # A receive (accept) already waiting on the socket would not see
            # these bytes (this connection): it is cancelled and served from them.
            waiting = self._receiving.get(arg[0])
            if waiting is None or waiting not in self._ops:
                # a transport's receive, kept in the ring's slab
                waiting = self._ring.receiving(arg[0])
            if waiting is not None and waiting not in self._redirected:
                self._redirected.add(waiting)
                self._cancel(waiting)

    def _keep(self, kind: int, arg: Any, res: int, value: Any) -> None:
        """Keeps the ``res`` bytes a receive got, after those kept before
        (or the connection an accept got, after those kept before)."""
        fd, conn = arg[0], arg[1]
        if kind == _RECVFROM:
            if arg[3] is not None:  # (into the caller's buffer: copied)
                value = (bytes(memoryview(arg[3]).cast("B")[: value[0]]), value[1])
            self.keep_datagram(conn, value)
            return
        if kind == _ACCEPT:
            if getattr(conn, "_closed", False):
                # The listener was closed (a server's close() cancels its
                # accept): nothing will accept on it again, and the
                # connection is closed, as one left in its backlog is.
                os.close(value[0])
                return
            entry = self._kept_conns.get(fd)
            if entry is None or entry[0]() is not conn:
                self._drop_kept_conns(fd)
                entry = self._kept_conns[fd] = (weakref.ref(conn), [])
            entry[1].append(value)
            return
        data = value if kind == _RECV else bytes(memoryview(arg[2]).cast("B")[:res])
        old = self._kept.get(fd)
        if old is not None and old[0]() is conn:
            data = old[1] + data
        self._kept[fd] = (weakref.ref(conn), data)

    def _serve_redirected(self, fut: Any, kind: int, arg: Any, res: int, value: Any) -> None:
        """Completes a receive (accept) that the proactor cancelled to give
        it kept bytes (a kept connection)."""
        if res > 0 or (kind in (_ACCEPT, _RECVFROM) and res >= 0):
            self._keep(kind, arg, res, value)
        if fut.done():
            return
        if res < 0 and res != -errno.ECANCELED:
            fut.set_exception(os_error(-res))
            return
        conn = arg[1]
        if kind == _ACCEPT:
            again = self.accept(conn)
        elif kind == _RECVFROM:
            again = self.recvfrom(conn, arg[2]) if arg[3] is None else self.recvfrom_into(conn, arg[3], arg[2])
        elif kind == _RECV:
            again = self.recv(conn, arg[2])
        else:
            again = self.recv_into(conn, arg[2])
        # Kept bytes make `again` done at once; otherwise it is a new
        # receive in flight, and `fut` follows it.
        futures._chain_future(again, fut)

    def close(self) -> None:
        """Cancels everything in flight and closes the ring once the kernel is done."""
        if self._ring is None:
            return
        # The transports' receives in flight or not yet dispatched, with
        # the socket each held open, are handed back: cancelled, as the
        # futures of _ops are below, and their holds ended.
        receives = self._ring.close()
        self._ring = None
        for rx, conn in receives:
            if not rx.done():
                rx.cancelled = True
            if conn is not None:
                release(conn)
        # The tables are emptied in place: every transport's receive keeps
        # them (StreamRx), and one transport kept after the close must not
        # keep every connection's socket open through them.
        ops = list(self._ops.values())
        self._ops.clear()
        self._receiving.clear()
        self._at_once_backoff.clear()
        self._sends.clear()
        for fut, _kind, _arg in ops:
            if fut is not None and not fut.done():
                fut.cancel()
        self._kept.clear()
        self._kept_datagrams.clear()
        self._unread.clear()
        self._reset_taken.clear()
        # Opens answered but not taken: their tasks never resume now.
        opened = [fut.result() for fut in self._opened]
        self._opened.clear()
        for fd in opened:
            os.close(fd)
        for fd in list(self._kept_conns):
            self._drop_kept_conns(fd)
        held = list(self._held.values())
        self._held.clear()
        for conn in held:
            release(conn)

    def __repr__(self) -> str:
        return f"<RingProactor in_flight={len(self._ops)}>"
