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
from collections import deque
from typing import Any, Callable, Deque, Optional, Tuple, TypeVar, cast

from ._aio import current_task, new_future

F = TypeVar("F", bound=Callable[..., Any])


class CallQueue:
    """First in, first out; re-entrant for the task that holds it.

    Ownership passes straight from a call to the next one in line when it
    finishes, so a call made later can never overtake one waiting."""

    __slots__ = ("_owner", "_waiting")

    def __init__(self) -> None:
        #: The task whose call is running, or None.
        self._owner: Optional[Any] = None
        self._waiting: Deque[Tuple[Any, Any]] = deque()

    async def _wait(self, task: Any) -> None:
        fut = new_future()
        item = (fut, task)
        self._waiting.append(item)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self._release()  # handed over just as the task was cancelled
            else:
                try:
                    self._waiting.remove(item)
                except ValueError:
                    pass
            raise

    def _release(self) -> None:
        while self._waiting:
            fut, task = self._waiting.popleft()
            if not fut.done():
                self._owner = task
                fut.set_result(None)
                return
        self._owner = None


def one_at_a_time(method: F) -> F:
    """Makes ``method`` (a coroutine method of an object with a
    ``_calls`` :class:`CallQueue` and a ``_sync_offset`` method, run when
    the call ends) wait for the calls made before it."""

    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        q: CallQueue = self._calls
        task = current_task()
        if q._owner is None and not q._waiting:
            q._owner = task
        elif q._owner is task:
            return await method(self, *args, **kwargs)  # a call made of calls
        else:
            await q._wait(task)
        try:
            return await method(self, *args, **kwargs)
        finally:
            self._sync_offset()
            q._release()

    return cast(F, call)
