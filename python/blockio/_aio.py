"""The event loops the asynchronous calls run under: asyncio (uvloop, and
anyio's asyncio backend), and trio (and anyio's trio backend).

The engine's completions arrive on one eventfd, which any event loop can
watch: asyncio with ``loop.add_reader``, trio with
``trio.lowlevel.wait_readable`` in a system task of each ``trio.run`` that
uses the engine. What else differs between the two is kept here: a
one-shot result to await (:func:`new_future`), the task awaiting it
(:func:`current_task`), a way to settle it from another thread
(:func:`threadsafe_call_soon`), and a call run on a thread
(:func:`run_in_thread`). trio is imported only by a program that uses it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import select
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TypeVar

T = TypeVar("T")


def running_trio() -> Any:
    """The ``trio`` module when called from inside ``trio.run``, else
    raises ``RuntimeError`` saying that no supported event loop runs."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
            return trio
        except RuntimeError:
            pass
    raise RuntimeError("no running event loop: blockio's coroutines run under asyncio (or uvloop) or trio (or anyio on either)")


def on_asyncio() -> bool:
    """Whether an asyncio event loop runs in this thread (else the caller
    runs under trio, or under no loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def is_cancellation(e: BaseException) -> bool:
    """Whether ``e`` is the event loop's cancellation of the running task
    (asyncio's ``CancelledError`` or trio's ``Cancelled``)."""
    if isinstance(e, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(e, trio.Cancelled)


class TrioFuture:
    """The part of ``asyncio.Future`` the package uses, for trio: set once
    (from trio's thread, or from any thread through :meth:`settle`),
    awaited once."""

    __slots__ = ("_trio", "_token", "_event", "_result", "_error")

    def __init__(self, trio: Any) -> None:
        self._trio = trio
        self._token = trio.lowlevel.current_trio_token()
        self._event = trio.Event()
        self._result: Any = None
        self._error: Optional[BaseException] = None

    def done(self) -> bool:
        return bool(self._event.is_set())

    def cancelled(self) -> bool:
        """Always False: a trio task is cancelled, never its future."""
        return False

    def set_result(self, result: Any) -> None:
        if not self._event.is_set():
            self._result = result
            self._event.set()

    def set_exception(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()

    def settle(self, result: Any, error: Optional[BaseException]) -> None:
        """Sets the result (or ``error``) from any thread: at once in the
        thread of the ``trio.run`` that made this future, else through
        its token. A run that has finished has nobody left to wake."""
        try:
            here = self._trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            here = False
        if here:
            self._settle(result, error)
            return
        try:
            self._token.run_sync_soon(self._settle, result, error)
        except self._trio.RunFinishedError:
            pass

    def _settle(self, result: Any, error: Optional[BaseException]) -> None:
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(result)

    async def _wait(self) -> Any:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def __await__(self) -> Any:
        return self._wait().__await__()


def new_future() -> Any:
    """A future of the running asyncio loop, or a :class:`TrioFuture`."""
    try:
        return asyncio.get_running_loop().create_future()
    except RuntimeError:
        return TrioFuture(running_trio())


def current_task() -> Any:
    """The running asyncio task, or the running trio task.
    (``asyncio.current_task()`` itself raises ``RuntimeError`` where no
    asyncio loop runs: one lookup of the running loop, whose process id
    check is a ``getpid`` system call, rather than two.)"""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return running_trio().lowlevel.current_task()


async def pause() -> None:
    """Yields to the event loop once (``asyncio.sleep(0)``, or trio's
    checkpoint), so that the other tasks run."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        await running_trio().lowlevel.checkpoint()
        return
    await asyncio.sleep(0)


def threadsafe_call_soon() -> Callable[..., Any]:
    """A function that runs ``f(*args)`` soon in the running loop's thread,
    callable from any thread; it raises ``RuntimeError`` once the loop
    (or the ``trio.run``) is over."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        trio = running_trio()
        run_sync_soon: Callable[..., Any] = trio.lowlevel.current_trio_token().run_sync_soon
        return run_sync_soon


async def run_in_thread(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` on a thread: the asyncio loop's default executor, or
    trio's thread cache (abandoned, not waited for, if the task is
    cancelled, as an executor's future is)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio = running_trio()
        out: T = await trio.to_thread.run_sync(functools.partial(func, *args), abandon_on_cancel=True)
        return out
    return await loop.run_in_executor(None, functools.partial(func, *args))


#: Each asyncio loop's private poll of the streams :func:`wait_readable`
#: waits on (see :class:`_LoopPoll`).
_POLLS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPoll]" = weakref.WeakKeyDictionary()


class Stops(Set[Callable[[], None]]):
    """What ends the waits of :func:`wait_readable` on one thing (a file's
    stream, an engine's): a set of functions, callable from any thread,
    and whether :meth:`end` has ended them. A wait that joins after
    ``end`` ends at once, even one whose ``add`` raced ``end`` on another
    thread: it looks at ``ended`` after adding itself, and ``end`` sets
    ``ended`` before it looks at the set."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        super().__init__()
        self.ended = False

    def end(self) -> None:
        """Ends every wait, and every wait that joins later."""
        self.ended = True
        for stop in list(self):
            stop()


async def wait_readable(fd: int, stops: Stops) -> bool:
    """Waits until ``fd`` (a pipe, socket or terminal) is readable, at its
    end, or failed, taking nothing from it, in the running loop's own
    poll: under asyncio through the loop's private ``epoll``, which holds
    the descriptor while tasks wait on it (see :class:`_LoopPoll`); under
    trio, trio's ``wait_readable``. Meanwhile ``stops`` holds a function,
    callable from any thread, that ends the wait at once (the file or the
    engine is closing); once ``stops`` is ended, the wait ends at once.
    Whether it waited: False, at once, for a descriptor the loop cannot
    watch (one ``epoll`` refuses, as ``/dev/null``; under trio, one
    another task waits on already), for the caller to read it without
    waiting first. A cancellation takes nothing from the stream, and no
    wait changes the descriptor or its flags."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return await _wait_readable_trio(fd, stops)
    return await _wait_readable_asyncio(loop, fd, stops)


async def _wait_readable_trio(fd: int, stops: Stops) -> bool:
    """:func:`wait_readable` under trio."""
    trio = running_trio()
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        def stop_trio() -> None:
            try:
                token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:
                pass

        stops.add(stop_trio)
        if stops.ended:
            scope.cancel()
        try:
            await trio.lowlevel.wait_readable(fd)
        except (OSError, trio.BusyResourceError):
            return False
        finally:
            stops.discard(stop_trio)
    return True


class _LoopPoll:
    """An asyncio loop's private ``epoll`` of the descriptors that
    :func:`wait_readable` waits on, with the futures waiting on each. The
    loop watches only the ``epoll``'s own descriptor (uvloop's reader sets
    ``O_NONBLOCK`` on what it watches, and so leaves the caller's open
    file description, which other programs may share, as it was), one
    for all the loop's waits. A descriptor is held one-shot: once it is
    reported, its waits end and it is taken out of the ``epoll``, which
    holds only what tasks wait on."""

    __slots__ = ("epoll", "waits", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.epoll = select.epoll()
        self.waits: Dict[int, List[Any]] = {}
        try:
            loop.add_reader(self.epoll.fileno(), self._ready)
        except BaseException:
            self.epoll.close()
            raise
        weakref.finalize(loop, self.epoll.close)

    def _ready(self) -> None:
        """The loop's callback: ends the waits on each descriptor reported."""
        for fd, _ in self.epoll.poll(0):
            self._drop(fd)
            for f in self.waits.pop(fd, ()):
                if not f.done():
                    f.set_result(None)

    def _drop(self, fd: int) -> None:
        try:
            self.epoll.unregister(fd)
        except (OSError, ValueError):
            pass  # (closed meanwhile, which took it out of the epoll)

    def join(self, fd: int, fut: Any) -> bool:
        """Adds ``fut`` to the waits on ``fd``: whether the ``epoll``
        holds it (False: one it refuses, as ``/dev/null``)."""
        futs = self.waits.get(fd)
        if futs is None:
            try:
                self.epoll.register(fd, select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT)
            except (OSError, ValueError):
                return False
            futs = self.waits[fd] = []
        futs.append(fut)
        return True

    def leave(self, fd: int, fut: Any) -> None:
        """Takes ``fut`` out of the waits on ``fd`` (ended or abandoned);
        the last one out takes ``fd`` out of the ``epoll``."""
        futs = self.waits.get(fd)
        if futs is None or fut not in futs:
            return
        futs.remove(fut)
        if not futs:
            del self.waits[fd]
            self._drop(fd)


async def _wait_readable_asyncio(loop: asyncio.AbstractEventLoop, fd: int, stops: Stops) -> bool:
    """:func:`wait_readable` under asyncio."""
    poll = _POLLS.get(loop)
    if poll is None:
        poll = _POLLS[loop] = _LoopPoll(loop)
    fut = loop.create_future()
    if not poll.join(fd, fut):
        return False

    def end() -> None:
        if not fut.done():
            fut.set_result(None)

    def stop() -> None:
        try:
            loop.call_soon_threadsafe(end)
        except RuntimeError:
            # That loop is closed: the wait never resumes. Nothing holds
            # its future (and the task waiting on it) any more, so that an
            # abandoned task is collected.
            stops.discard(stop)
            poll.leave(fd, fut)

    stops.add(stop)
    if stops.ended:
        end()
    try:
        await fut
    finally:
        stops.discard(stop)
        poll.leave(fd, fut)
    return True


#: How long a cancelled write is waited for, once no completion could
#: still be expected of it soon: as ``Engine.close`` waits a second for a
#: completion before it cancels what is left.
CANCEL_GRACE = 1.0


async def wait_despite_cancel(fut: Any, ahead_completes: Callable[[], bool]) -> Optional[BaseException]:
    """Awaits ``fut`` (a call's turn in a file's queue) even if the task is
    cancelled meanwhile; the cancellation, to raise once the call has run,
    or None. A turn still not come :data:`CANCEL_GRACE` seconds after the
    cancellation is given up (the cancellation is raised then, and the call
    never runs) unless ``ahead_completes()`` says that the call now
    running will end (a write: its bytes reach the kernel however long it
    takes), in which case the wait goes on, a grace at a time; so only a
    turn behind a call that may never end (a read of an empty pipe) is
    given up."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio = running_trio()
        try:
            await fut
            return None
        except trio.Cancelled as e:
            cancelled: BaseException = e
        while not fut.done():
            with trio.CancelScope(deadline=trio.current_time() + CANCEL_GRACE, shield=True):
                await fut
            if not fut.done() and not ahead_completes():
                raise cancelled
        return cancelled
    try:
        await asyncio.shield(fut)
        return None
    except asyncio.CancelledError as e:
        cancelled = e
    while not fut.done():
        await through_grace(loop, fut)
        if not fut.done() and not ahead_completes():
            raise cancelled
    return cancelled


async def through_grace(loop: asyncio.AbstractEventLoop, fut: Any) -> None:
    """Waits for ``fut`` at most :data:`CANCEL_GRACE` seconds, through any
    cancellation of the waiting task (it has been cancelled already)."""
    deadline = loop.time() + CANCEL_GRACE
    while not fut.done() and loop.time() < deadline:
        try:
            await asyncio.wait({fut}, timeout=deadline - loop.time())
        except asyncio.CancelledError:
            pass


async def shielded(coro: Any) -> Any:
    """``await coro``, under trio in a shielded cancel scope (the task's
    cancellation has been caught already, and is raised afterwards; or
    ``coro`` is a write, which runs to its end before the cancellation is
    raised). Under asyncio ``coro`` runs in the calling task as it is,
    with no task of its own: one would be among ``asyncio.all_tasks()``,
    which a program may cancel before it first runs."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with running_trio().CancelScope(shield=True):
            return await coro
    return await coro
