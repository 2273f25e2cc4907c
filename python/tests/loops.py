"""The event loops the file tests run on, by name: asyncio's, uvloop's, and
blockio's own on each of its backends (``blockio-uring``, whose files'
reads that the page cache cannot serve go on the loop's own ring, and its
epoll fallback, ``blockio-epoll``), made directly so that the engine's
backend (``BLOCKIO_BACKEND``) stays free."""

import asyncio
import os
import sys
import weakref

import uvloop

from blockio._loop import EpollEventLoop, UringEventLoop

#: Where asyncio's modules, and these tests, are.
_ASYNCIO = os.path.dirname(asyncio.__file__) + os.sep
_TESTS = os.path.dirname(os.path.abspath(__file__))

#: name -> a function making a new loop of that kind.
FACTORIES = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
    "blockio-uring": UringEventLoop,
    "blockio-epoll": EpollEventLoop,
}

#: The names, in the order tests are parametrized.
NAMES = list(FACTORIES)


def run_on(name, coro):
    """Runs ``coro`` to its end on a new loop called ``name``, then closes it."""
    loop = FACTORIES[name]()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def tasks_alive():
    """Every asyncio task not yet collected, of any loop (asyncio keeps
    them in a weak set: ``_all_tasks`` before Python 3.12,
    ``_scheduled_tasks`` since, beside the eager tasks' set)."""
    if sys.version_info >= (3, 12):
        return [*asyncio.tasks._scheduled_tasks, *asyncio.tasks._eager_tasks]
    return list(asyncio.tasks._all_tasks)


def left_pending(loop):
    """The tasks of ``loop`` (closed) still pending: they never run again."""
    return [t for t in tasks_alive() if t.get_loop() is loop and not t.done()]


def record_test_tasks(loop):
    """Makes ``loop`` keep, weakly, each task that test code creates on it
    (the first caller of ``create_task``/``ensure_future`` outside asyncio
    is a file of this directory; a task blockio creates is not kept), for
    :func:`abandon`. Returns the set it fills."""
    made = weakref.WeakSet()

    def factory(loop, coro, **kwargs):
        task = asyncio.Task(coro, loop=loop, **kwargs)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_ASYNCIO):
            frame = frame.f_back
        if frame is not None and os.path.dirname(frame.f_code.co_filename) == _TESTS:
            made.add(task)
        return task

    loop.set_task_factory(factory)
    return made


def abandon(loop, made):
    """Says that the tasks still pending on ``loop``, closed, were left so
    on purpose: the test is of a program that closes its loop with calls in
    progress, whose outcome it checks otherwise (the bytes on disk,
    ``tell()`` and ``close()`` in another loop). asyncio is told not to
    report them when they are collected ("Task was destroyed but it is
    pending!", its warning for a program's own tasks, printed whenever the
    garbage collector gets to them: for tasks in reference cycles (a file's
    call queue holds the tasks waiting for their turn, whose coroutines
    hold the file) that may be at interpreter exit, past pytest's capture,
    in the output of the whole run). Only the tasks the test made
    (``made``: the test's own, or those :func:`record_test_tasks` kept) may
    be left so: any other task pending on ``loop`` is one blockio made and
    left behind (issue 59 forbids it) and fails the test. Returns them."""
    left = left_pending(loop)
    made = set(made)
    others = [t for t in left if t not in made]
    assert not others, f"tasks the test did not make left pending on a closed loop: {others}"
    for t in left:
        t._log_destroy_pending = False
    return left
