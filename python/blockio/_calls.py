"""The rule for a file object shared by many tasks: its calls take effect
one at a time, in the order they were made, each starting where its
predecessor left the position (as aiofiles' calls, which run one at a time
on a thread over the built-in ``open``'s file).

:class:`CallQueue` is that order: a first-in, first-out lock a task may
enter again while it holds it (a file's ``readlines`` is made of its
``readline``; a text file's calls are made of its binary file's, which
shares the queue). Concurrency comes from many file objects and from the
positional calls of :class:`~blockio.Engine` (``aread``, ``aread_batch``),
which have no position to share.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from typing import Any, Awaitable, Callable, Deque, List, Optional, Tuple, TypeVar, cast

from ._aio import current_task, new_future, pause, shielded, wait_despite_cancel

F = TypeVar("F", bound=Callable[..., Any])

#: What :meth:`CallQueue._enter` answers a write that joins the writes in
#: progress (see :func:`one_at_a_time_kept`), and a call that took the
#: queue over from writes whose event loop was closed.
_JOINED = object()
_TAKEN_OVER = object()

_OTHER_THREAD = ("this blockio file object is in use by an event loop in another thread: "
                 "use one file object per thread (or finish one thread's calls before the next starts)")
_OTHER_LOOP = ("this blockio file object has a call in progress on another event loop of this thread, "
               "which is not running: run that loop until the call ends, or cancel it there")
ABANDONED = ("a call on this blockio file object never ended: its event loop was closed while it was "
             "in progress, so the file's position is unknown; close the file and open it again")
ABANDONED_AT_CLOSE = ("the file is closed, but a call on it never ended: its event loop was closed while it was "
                      "in progress, so what that call was reading or writing may not have reached the file")


def _never(nbytes: int = 0) -> bool:
    """A :class:`CallQueue`'s ``turn_due`` until its owner sets one."""
    return False


def _loop_of(task: Any) -> Any:
    """The asyncio loop of ``task``, or None (a trio task, or no task)."""
    get_loop = getattr(task, "get_loop", None)
    return get_loop() if get_loop is not None else None


def _dead(fut: Any) -> bool:
    """Whether ``fut`` (a future or task) belongs to a closed asyncio loop:
    it can never be resolved, and its task never runs again."""
    loop = _loop_of(fut)
    return loop is not None and loop.is_closed()


class CallQueue:
    """First in, first out; re-entrant for the task that holds it.

    Ownership passes straight from a call to the next one in line when it
    finishes, so a call made later can never overtake one waiting. The
    calls in progress all belong to one thread's event loop: a call from
    another thread's loop meanwhile raises ``RuntimeError`` (a future of
    one loop cannot wake a task of another), where waiting would hang; so
    does a call from another loop of the same thread, which cannot run
    while this one does. A call whose loop was closed before it ended
    never ends: every later call raises ``RuntimeError`` saying so (as
    aiofiles' calls on a file of a closed loop do), except ``close``,
    which takes the queue over (:meth:`drop_abandoned`), closes the file
    and then raises. If the abandoned call's coroutine is closed later
    (collected), its release is ignored.

    ``free`` holds one item exactly while no call is in progress, and a
    call takes the queue by taking that item (``free.pop()``, one step
    under the GIL, so that two threads can never both have it). A call
    that can finish without awaiting (a file's ``seek``, a ``read`` of
    cached bytes) takes it, runs and puts it back, with no task or future
    involved; a call from another thread meanwhile raises as above.

    ``settle``, if set, runs as each call ends, before the queue is handed
    on or ``free`` given back: the owner's chance to record, for the calls
    served inline, what the call changed (see ``AsyncFile._update_inline``).
    Those calls never change it themselves, so it holds whenever ``free``
    does.

    On a seekable file, writes are the exception to one at a time: a
    write made while a write is in progress, with no other call waiting,
    joins it at once (its bytes
    are queued in the core behind the write ahead before the call first
    yields: see :func:`one_at_a_time_kept`), and the queue is handed on
    once the last of them ends. So are the calls of a binary file that
    place their part in that queue, or do it at once, before they first
    yield (``seek``, ``tell``, ``truncate``, ``flush``: see
    :func:`one_at_a_time_placing`). Writes in progress whose event loop was
    closed are not abandoned: the core writes their bytes whether or not
    their calls ever run again, and the next call, from any loop, takes
    the queue over, waits for the core to finish them (``settle_writes``,
    set by the owner), and reports a failure none of them could."""

    __slots__ = ("_owner", "_waiting", "_thread", "_lock", "free", "settle", "stream", "writing", "turn_due",
                 "joined", "_owner_done", "generation", "settle_writes", "_lost")

    def __init__(self) -> None:
        #: The task whose call is running, or None.
        self._owner: Optional[Any] = None
        self._waiting: Deque[Tuple[Any, Any]] = deque()
        #: The thread of the calls in progress (while _owner is set).
        self._thread: Optional[int] = None
        self._lock = threading.Lock()
        self.free: List[None] = [None]
        self.settle: Optional[Callable[[], None]] = None
        #: The file is a stream (a pipe, socket, terminal), where a call
        #: may never end (a read of an empty pipe); set by its owner.
        self.stream = False
        #: The call in progress is a write (:func:`one_at_a_time_kept`),
        #: which ends once the kernel has its bytes, however long that takes.
        self.writing = False
        #: Counts a call that took the queue at once (see
        #: :func:`one_at_a_time_taking_turns`): whether its turn of the
        #: event loop is due first. Set by the owner.
        self.turn_due: Callable[..., bool] = _never
        #: Writes running beside the one that holds the queue (joined:
        #: see :func:`one_at_a_time_kept`); whether that one has ended; and
        #: a count of takeovers, so that a joined write of writes taken
        #: over (whose coroutine is closed later) changes nothing.
        self.joined = 0
        self._owner_done = False
        self.generation = 0
        #: Waits for the writes the core still has and raises the failure
        #: of one whose call never ended (set by the owner); awaited by a
        #: call that took the queue over from writes of a closed loop.
        self.settle_writes: Optional[Callable[[], Awaitable[None]]] = None
        #: Calls of a closed loop were waiting behind writes taken over:
        #: they never run (for ``close`` to say so: :meth:`drop_abandoned`).
        self._lost = False

    def _enter(self, task: Any, joinable: bool = False) -> Any:
        """Takes the queue for ``task`` (None), or finds that ``task``
        holds it already (``task`` itself), or has a write (``joinable``)
        join the writes in progress (``_JOINED``), or takes it over from
        writes of a closed loop (``_TAKEN_OVER``), or queues it: the future
        to await for its turn."""
        me = threading.get_ident()
        with self._lock:
            if self._owner is None:  # (and so nobody waits)
                try:
                    self.free.pop()
                except IndexError:  # a call served inline, in another thread
                    raise RuntimeError(_OTHER_THREAD) from None
                self._owner, self._thread = task, me
                return None
            if self._thread != me:
                if self.writing and not self.stream and _dead(self._owner):
                    return self._take_over(task, me)
                raise RuntimeError(ABANDONED if _dead(self._owner) else _OTHER_THREAD)
            if self._owner is task and not self._owner_done:
                return task
            theirs = _loop_of(self._owner)
            if theirs is not None and theirs is not _loop_of(task) and (
                    _loop_of(task) is not None or not theirs.is_running()):
                # (a trio task behind a running asyncio loop's call is trio
                # in guest mode on that loop, which hands the turn on)
                if self.writing and not self.stream and theirs.is_closed():
                    return self._take_over(task, me)
                raise RuntimeError(ABANDONED if theirs.is_closed() else _OTHER_LOOP)
            if (joinable and self.writing and not self.stream and not self._waiting and theirs is not None
                    and _loop_of(task) is theirs):
                self.joined += 1
                return _JOINED
            fut = new_future()
            self._waiting.append((fut, task))
            return fut

    async def _wait(self, fut: Any, task: Any) -> None:
        try:
            await fut
        except BaseException:
            self._give_up(fut, task)
            raise

    def _give_up(self, fut: Any, task: Any) -> None:
        """Leaves the queue without running: the turn is handed on if it
        had come just as the task was cancelled."""
        if fut.done() and not fut.cancelled():
            self._release(task)
        else:
            with self._lock:
                # (by identity: `remove` compares, and on no match formats,
                # the entries, and so the task's repr, which asks its
                # coroutine's name while that coroutine is being thrown into)
                for i, (f, _) in enumerate(self._waiting):
                    if f is fut:
                        del self._waiting[i]
                        break

    def _take_over(self, task: Any, me: int) -> Any:
        """Gives the queue to ``task`` from writes in progress whose loop
        was closed (the core finishes them: ``settle_writes``). Called
        with ``_lock`` held."""
        self._owner, self._thread = task, me
        self.joined = 0
        self._owner_done = False
        self.writing = False
        self.generation += 1
        # (calls of the closed loop waiting for their turn: none of them
        # ever runs; live ones cannot be waiting, they raise at `_enter`)
        self._lost = self._lost or bool(self._waiting)
        self._waiting.clear()
        return _TAKEN_OVER

    def abandoned(self) -> bool:
        """Whether the call in progress belongs to a closed event loop."""
        owner = self._owner
        return owner is not None and _dead(owner)

    def drop_abandoned(self) -> bool:
        """Frees the queue if its call in progress belongs to a closed event
        loop (it never ends), for ``close``: the turn goes to the next live
        call waiting (none can be: they raise at `_enter` meanwhile).
        Whether there was such a call. Writes in progress are not such
        calls: ``close`` takes the queue over from them (see `_enter`).
        Run again after ``close``, it says whether calls that were waiting
        behind such writes were dropped when they were taken over (once)."""
        with self._lock:
            if self._lost:
                self._lost = False
                return True
            if self._owner is None or not _dead(self._owner) or (self.writing and not self.stream):
                return False
            self._hand_on()
            return True

    def _leave_joined(self, generation: int) -> bool:
        """A joined write has ended: whether the queue is to be released
        now (it was the last, and the write holding the queue has ended)."""
        if generation != self.generation:
            return False  # (its writes were taken over)
        self.joined -= 1
        return self.joined == 0 and self._owner_done

    def _release(self, task: Any) -> None:
        if self._owner is not task:
            return  # an abandoned call's, after `drop_abandoned`
        settle = self.settle
        if settle is not None:
            settle()
        with self._lock:
            if self._owner is task:  # (still: see above)
                self._hand_on()

    def _hand_on(self) -> None:
        """Gives the turn to the first call waiting whose loop is alive, or
        frees the queue. Called with ``_lock`` held."""
        self._owner_done = False
        self.writing = False  # (the next call says so, if it writes)
        while self._waiting:
            fut, task = self._waiting.popleft()
            if not fut.done() and not _dead(fut):
                self._owner = task
                fut.set_result(None)
                return
        self._owner = None
        self._thread = None
        self.free.append(None)


def one_at_a_time(method: F) -> F:
    """Makes ``method`` (a coroutine method of an object with a
    ``_calls`` :class:`CallQueue` and a ``_sync_offset`` method, run when
    the call ends) wait for the calls made before it."""
    return _in_order(method, takes_turns=False)


def one_at_a_time_taking_turns(method: F) -> F:
    """:func:`one_at_a_time` for a call that may finish without suspending
    (a read served from the file's buffer, a ``tell``, a ``readline`` of
    buffered bytes): now and then such a call (once 1 ms has passed since
    the thread's last turn, by the queue's ``turn_due``, which counts every
    call the thread serves without suspending and reads the clock once in
    256 calls and once in every 4 MiB they copy) first yields to the event
    loop once, holding its place in the queue, so that a task
    making such calls in a loop never starves the others. A cancellation
    there moves nothing: the call has not run. A call that waited for its
    turn has yielded already, and is not counted."""
    return _in_order(method, takes_turns=True)


def one_at_a_time_closing(method: F) -> F:
    """:func:`one_at_a_time` for ``close``: when it takes the queue over
    and a write of the closed loop failed, it still runs (the file is
    closed, what is buffered flushed), and raises that failure after it, as
    the built-in file raises a flush error after closing."""
    return _in_order(method, takes_turns=False, closes=True)


def _in_order(method: F, takes_turns: bool, closes: bool = False) -> F:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        q: CallQueue = self._calls
        task = current_task()
        turn = q._enter(task)
        if turn is task:
            return await method(self, *args, **kwargs)  # a call made of calls
        if turn is not None and turn is not _TAKEN_OVER:
            await q._wait(turn, task)
        try:
            if turn is _TAKEN_OVER:
                try:
                    await _settle_writes(q)
                except Exception:
                    if not closes:
                        raise
                    await method(self, *args, **kwargs)
                    raise
            elif takes_turns and turn is None and q.turn_due():
                await pause()
            return await method(self, *args, **kwargs)
        finally:
            self._sync_offset()
            q._release(task)

    return cast(F, call)


# The task of a write closed after its event loop was (see
# `one_at_a_time_kept`): never a queue's owner, not even a free queue's
# (``None``).
_CLOSED_CALL = object()


def one_at_a_time_placing(can_join: Callable[..., bool], takes_turns: bool = False) -> Callable[[F], F]:
    """:func:`one_at_a_time` (or :func:`one_at_a_time_taking_turns`) for a
    call of a seekable file that does its part at once or places it in the
    file's write queue in the core before it first yields (``seek``,
    ``tell``, ``truncate``, ``flush``: see ``AsyncFile._seek``), when
    ``can_join(file, *args)`` says it can (in append mode, not while the
    position waits for the answer of a seek from the end that a ``seek``
    from the position or a ``truncate()`` would need). Such a call made while
    writes of the same event loop are in progress, with no other call
    waiting, joins them as a write does (see :func:`one_at_a_time_kept`);
    one that takes the queue marks it ``writing``, so that writes (and
    such calls) made meanwhile join it. Either way the method finds
    ``writing`` set, and so knows it must place its part before it first
    yields. So a write made behind such a call is placed at once, at the
    offset the call leaves, and lands even if the event loop is closed
    before the call ends; then, as for writes, the next call takes the
    queue over once the core has finished them. Its turn of the event loop
    (``takes_turns``: see :func:`one_at_a_time_taking_turns`) comes after
    it ran, as a write's does: a cancellation there raises, and what the
    call did stands. Cancelled while it waits for its turn, it keeps its
    place, runs when its turn comes and then raises the cancellation, as
    :func:`one_at_a_time_kept`'s write: a call begun is not skipped while
    the writes behind it are made."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            q: CallQueue = self._calls
            task = current_task()
            joinable = can_join(self, *args, **kwargs)
            turn = q._enter(task, joinable)
            if turn is task:
                return await method(self, *args, **kwargs)  # a call made of calls
            if turn is _JOINED:
                return await _run_joined(self, q, method, args, kwargs)
            cancelled = None
            if turn is not None and turn is not _TAKEN_OVER:
                # (cancelled meanwhile, it keeps its place and runs, as a
                # write does: the calls behind it, a write kept, must not
                # be made without it)
                try:
                    cancelled = await wait_despite_cancel(turn, lambda: q.writing or not q.stream)
                except BaseException:
                    q._give_up(turn, task)
                    raise
            try:
                if turn is _TAKEN_OVER:
                    await _settle_writes(q)
                elif takes_turns and turn is None and not joinable and q.turn_due():
                    await pause()
                if turn is not None:
                    # (asked again at its turn: what kept it from joining,
                    # the answer of a seek from the end, has come since,
                    # and the call must now place its part, as any made
                    # with nothing pending, not make it on its own where a
                    # cancellation would leave it running behind the queue)
                    joinable = can_join(self, *args, **kwargs)
                q.writing = joinable and not q.stream
                if cancelled is not None:
                    await shielded(method(self, *args, **kwargs))
                    raise cancelled
                result = await method(self, *args, **kwargs)
                if takes_turns and turn is None and joinable and q.turn_due():
                    # (after the call, as a write's turn, in
                    # `one_at_a_time_kept`: yielding before it, holding the
                    # queue, would have the writes made meanwhile wait
                    # behind it rather than join it)
                    await pause()
                return result
            except GeneratorExit:
                if q.writing:
                    # (as a write's, in `one_at_a_time_kept`: the queue
                    # stays, for the next call to take over)
                    task = _CLOSED_CALL
                raise
            finally:
                if q._owner is task:
                    if q.joined:
                        q._owner_done = True  # (the last joined call releases the queue)
                    else:
                        q.writing = False
                        self._sync_offset()
                        q._release(task)

        return cast(F, call)

    return wrap


async def _settle_writes(q: CallQueue) -> None:
    """For a call that took the queue over: waits for the writes of the
    closed loop that the core still has (see ``CallQueue``)."""
    if q.settle_writes is not None:
        await q.settle_writes()


def one_at_a_time_kept(method: F) -> F:
    """:func:`one_at_a_time` for a call that must run once made (a
    ``write``: bytes ``write()`` accepted always reach the file): cancelled
    while it waits for its turn, it keeps its place, runs when its turn
    comes, and only then raises the cancellation, as aiofiles' thread runs
    a call whose task was cancelled. Only on a stream, a turn still not
    come a second after the cancellation while the call in progress is not
    a write (a read of an empty pipe, which may never end) is given up, and
    the call never runs; behind a write, or on a regular file, the turn is
    waited for. As :func:`one_at_a_time_taking_turns`, now and then such a
    call that took the queue at once yields to the event loop, after it ran
    (a cancellation there raises, and the write stands, as aiofiles').

    A call made while a write of the same event loop is in progress, with
    no other call waiting, does not wait: it joins that write and runs at
    once (on a seekable file its bytes go to the file's write queue in the
    core, behind the write ahead, before the call first yields), so that
    it reaches the file even if its loop is closed before its turn would
    have come; so does one made behind a call of
    :func:`one_at_a_time_placing` in progress. A call that waits behind
    any other call (a read, a write waiting itself) waits as above: if its loop is closed before its
    turn comes it never runs, its bytes never written (its position would
    depend on a call that never ended), and ``close`` says so."""

    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        q: CallQueue = self._calls
        task = current_task()
        turn = q._enter(task, True)
        if turn is task:
            return await method(self, *args, **kwargs)  # a call made of calls
        if turn is _JOINED:
            return await _run_joined(self, q, method, args, kwargs)
        cancelled = None
        if turn is not None and turn is not _TAKEN_OVER:
            try:
                cancelled = await wait_despite_cancel(turn, lambda: q.writing or not q.stream)
            except BaseException:
                q._give_up(turn, task)
                raise
        try:
            if turn is _TAKEN_OVER:
                await _settle_writes(q)
            q.writing = True
            if cancelled is None:
                result = await method(self, *args, **kwargs)
                if turn is None and q.turn_due():
                    await pause()
                return result
            await shielded(method(self, *args, **kwargs))
            raise cancelled
        except GeneratorExit:
            # Closed (collected) after its event loop was closed: the queue
            # stays with the write, for the next call to take over once the
            # core has finished it.
            task = _CLOSED_CALL
            raise
        finally:
            if q._owner is task:  # (else taken over meanwhile, or closed: see above)
                if q.joined:
                    q._owner_done = True  # (the last joined write releases the queue)
                else:
                    q.writing = False
                    self._sync_offset()
                    q._release(task)

    return cast(F, call)


async def _run_joined(file: Any, q: CallQueue, method: Any, args: Any, kwargs: Any) -> Any:
    """Runs a write that joined the writes in progress (see
    :func:`one_at_a_time_kept`); the last of them to end releases the
    queue."""
    generation = q.generation
    try:
        return await method(file, *args, **kwargs)
    except GeneratorExit:
        generation = -1  # (closed after its loop was: as in `one_at_a_time_kept`)
        raise
    finally:
        if q._leave_joined(generation):
            q.writing = False
            file._sync_offset()
            q._release(q._owner)
