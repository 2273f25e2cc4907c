"""A turn of blockio's loops (``_run_once``, run by Rust) does what
asyncio's ``BaseEventLoop._run_once`` does: each scenario runs on asyncio's
own loop and on blockio's (both backends) in the same test, and what it
records must be the same. Ready callbacks against due timers (equal
deadlines included, in heapq's order), a cancelled handle skipped, many
cancelled timers swept at once, a callback's exception reaching the
exception handler with ``Handle._run``'s context (and as the exception
being handled), ``SystemExit`` leaving the callbacks after it queued, a
handle whose class overrides ``_run``, a loop whose ``time`` is replaced,
debug mode's ``_current_handle`` and slow-callback warning, a tool that
replaces ``Handle._run`` or ``BaseEventLoop._run_once``, a timer at NaN,
and an error while a failed callback is formatted. What the turn keeps
per handle class about ``_run`` must follow every change: ``Handle._run``
replaced after handles of both classes ran, restored and replaced again;
a subclass's own ``_run``, or one set on it, or on its base, after it
ran; a ``_run`` set on a handle itself."""

import asyncio
import logging
import sys

import pytest

from loops import FACTORIES

BLOCKIO = ["blockio-uring", "blockio-epoll"]


def _side_by_side(scenario):
    """``scenario(loop)``'s result on asyncio's loop and on each of
    blockio's: {name: result}."""
    out = {}
    for name in ["asyncio", *BLOCKIO]:
        loop = FACTORIES[name]()
        try:
            out[name] = scenario(loop)
        finally:
            loop.close()
    return out


def _assert_same(results):
    expected = results["asyncio"]
    for name in BLOCKIO:
        assert results[name] == expected, name


def _run_turns(loop, turns):
    """Runs the loop until ``turns`` turns (chained ``call_soon``) ended."""
    done = loop.create_future()

    def step(left):
        if left:
            loop.call_soon(step, left - 1)
        else:
            done.set_result(None)

    loop.call_soon(step, turns)
    loop.run_until_complete(done)


def test_ready_callbacks_and_due_timers_run_in_asyncios_order():
    def scenario(loop):
        log = []
        now = loop.time()
        loop.call_later(0, log.append, "later-0")
        loop.call_at(now - 1, log.append, "past-1")
        # equal deadlines: heapq's order, whatever it is, on each loop
        for i in range(6):
            loop.call_at(now - 2, log.append, f"equal-{i}")
        loop.call_soon(log.append, "soon-1")

        def chain():
            log.append("chain")
            loop.call_soon(log.append, "chain-soon")
            loop.call_later(0, log.append, "chain-later-0")
            loop.call_at(loop.time() - 5, log.append, "chain-past")

        loop.call_soon(chain)
        loop.call_soon(log.append, "soon-2")
        loop.call_later(3600, log.append, "never")
        _run_turns(loop, 4)
        return log

    results = _side_by_side(scenario)
    assert "never" not in results["asyncio"]
    _assert_same(results)


def test_a_cancelled_handle_and_timer_are_skipped():
    def scenario(loop):
        log = []
        skipped = loop.call_soon(log.append, "cancelled-soon")
        loop.call_soon(log.append, "soon")
        timer = loop.call_at(loop.time() - 1, log.append, "cancelled-timer")
        loop.call_at(loop.time() - 1, log.append, "timer")

        def cancel_later_one():
            # cancelled after it was moved to _ready, before it runs
            late.cancel()

        loop.call_soon(cancel_later_one)
        late = loop.call_soon(log.append, "cancelled-in-turn")
        skipped.cancel()
        timer.cancel()
        # (a cancelled handle run anyway would call None: an error here)
        errors = []
        loop.set_exception_handler(lambda loop, context: errors.append(context["message"]))
        _run_turns(loop, 3)
        return log, len(loop._scheduled), loop._timer_cancelled_count, errors

    results = _side_by_side(scenario)
    assert results["asyncio"] == (["soon", "timer"], 0, 0, [])
    _assert_same(results)


def test_many_cancelled_timers_are_swept_at_once():
    def scenario(loop):
        handles = [loop.call_later(3600 + i, lambda: None) for i in range(200)]
        # (three in four: not only at the head of the heap)
        cancelled = [h for i, h in enumerate(handles) if i % 4]
        for h in cancelled:
            h.cancel()
        before = (len(loop._scheduled), loop._timer_cancelled_count)
        _run_turns(loop, 1)
        kept = sorted(h._when for h in loop._scheduled)
        return (
            before,
            len(loop._scheduled),
            loop._timer_cancelled_count,
            [h._scheduled for h in cancelled].count(True),
            kept == sorted(h._when for h in handles[::4]),
            loop._scheduled[0]._when == min(kept),
        )

    results = _side_by_side(scenario)
    assert results["asyncio"] == ((200, 150), 50, 0, 0, True, True)
    _assert_same(results)


def test_a_few_cancelled_timers_leave_from_the_heads_only():
    def scenario(loop):
        handles = [loop.call_later(3600 + i, lambda: None) for i in range(10)]
        for i in (0, 1, 5):
            handles[i].cancel()
        _run_turns(loop, 1)
        return len(loop._scheduled), loop._timer_cancelled_count, [h._scheduled for h in handles]

    results = _side_by_side(scenario)
    assert results["asyncio"][:2] == (8, 1)
    _assert_same(results)


class _Boom(Exception):
    pass


def test_a_callbacks_exception_reaches_the_handler_with_asyncios_context():
    def scenario(loop):
        seen = []

        def handler(loop, context):
            exc = context["exception"]
            seen.append(
                (
                    sorted(context),
                    context["message"].split(" at ")[0],
                    type(exc).__name__,
                    str(exc),
                    context["handle"] is raised_by,
                    sys.exc_info()[1] is exc,
                    exc.__traceback__ is not None,
                )
            )

        def boom(arg):
            raise _Boom(f"boom {arg}")

        loop.set_exception_handler(handler)
        raised_by = loop.call_soon(boom, 1)
        after = []
        loop.call_soon(after.append, "after")
        _run_turns(loop, 2)
        return seen, after, sys.exc_info()[1]

    results = _side_by_side(scenario)
    seen, after, outside = results["asyncio"]
    # (from Python 3.13 on, asyncio shows a callback's arguments in debug mode only)
    shown = "boom(1)" if sys.version_info < (3, 13) else "boom()"
    name = "test_a_callbacks_exception_reaches_the_handler_with_asyncios_context.<locals>.scenario.<locals>."
    assert seen == [
        (["exception", "handle", "message"], f"Exception in callback {name}{shown}", "_Boom", "boom 1", True, True, True)
    ]
    assert after == ["after"] and outside is None
    _assert_same(results)


def test_the_source_traceback_of_a_handle_made_in_debug_mode_is_in_the_context():
    def scenario(loop):
        seen = []
        loop.set_exception_handler(lambda loop, context: seen.append(sorted(context)))
        # made in debug mode (it keeps where it was made), run after it
        loop.set_debug(True)
        loop.call_soon(lambda: 1 / 0)
        loop.set_debug(False)
        _run_turns(loop, 1)
        return seen

    results = _side_by_side(scenario)
    assert results["asyncio"] == [["exception", "handle", "message", "source_traceback"]]
    _assert_same(results)


@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
def test_systemexit_and_keyboardinterrupt_leave_the_rest_queued(stop):
    def scenario(loop):
        log = []

        def raise_it():
            raise stop(3)

        ended = loop.create_future()
        loop.call_soon(log.append, "before")
        loop.call_soon(raise_it)
        loop.call_soon(log.append, "after")
        loop.call_soon(ended.set_result, None)
        handled = []
        loop.set_exception_handler(lambda loop, context: handled.append(context))
        try:
            loop.run_until_complete(ended)
            outcome = "ran on"
        except stop as exc:
            outcome = type(exc).__name__
        # what is left runs in the next turn
        queued = len([h for h in loop._ready if h._callback == log.append])
        _run_turns(loop, 1)
        return outcome, queued, log, handled

    results = _side_by_side(scenario)
    assert results["asyncio"] == (stop.__name__, 1, ["before", "after"], [])
    _assert_same(results)


class _LoggedHandle(asyncio.Handle):
    """A handle whose class overrides ``_run``: it must run through it."""

    __slots__ = ("log",)

    def _run(self):
        self.log.append("own _run")
        super()._run()


def test_a_handle_overriding_run_runs_through_it():
    def scenario(loop):
        log = []
        handle = _LoggedHandle(log.append, ("callback",), loop)
        handle.log = log
        loop._ready.append(handle)
        _run_turns(loop, 1)
        return log

    results = _side_by_side(scenario)
    assert results["asyncio"] == ["own _run", "callback"]
    _assert_same(results)


def test_a_loop_whose_time_is_replaced_keeps_timers_on_that_clock():
    def scenario(loop):
        log = []
        loop.call_at(1000.0, log.append, "due at 1000")
        loop.call_at(1000.5, log.append, "due at 1000.5")
        loop.call_at(5000.0, log.append, "due at 5000")
        calls = []

        def fake_time():
            calls.append(None)
            return 1000.25

        loop.time = fake_time
        _run_turns(loop, 2)
        return log, len(loop._scheduled), bool(calls)

    results = _side_by_side(scenario)
    assert results["asyncio"] == (["due at 1000"], 2, True)
    _assert_same(results)


def test_debug_mode_sets_the_current_handle_and_warns_of_slow_callbacks():
    def scenario(loop):
        loop.set_debug(True)
        loop.slow_callback_duration = 0.0
        seen = []

        def callback():
            seen.append(loop._current_handle is handle)

        records = []
        catcher = logging.Handler()
        catcher.emit = records.append
        logger = logging.getLogger("asyncio")
        logger.addHandler(catcher)
        try:
            handle = loop.call_soon(callback)
            _run_turns(loop, 0)
        finally:
            logger.removeHandler(catcher)
        slow = [r.getMessage().split(" took ")[0] for r in records if "took" in r.getMessage()]
        return seen, loop._current_handle, any("callback()" in s for s in slow)

    results = _side_by_side(scenario)
    assert results["asyncio"] == ([True], None, True)
    _assert_same(results)


def test_a_tool_replacing_handle_run_sees_every_callback(monkeypatch):
    # A slow-callback logger's pattern: asyncio.events.Handle._run wrapped
    # after the loop was made (and after the turn first ran).
    def scenario(loop):
        seen = []
        _run_turns(loop, 1)
        original = asyncio.events.Handle._run

        def logged(handle):
            seen.append(getattr(handle._callback, "__name__", "?"))
            return original(handle)

        monkeypatch.setattr(asyncio.events.Handle, "_run", logged)
        try:
            def cb():
                pass

            loop.call_soon(cb)
            loop.call_later(0, cb)
            _run_turns(loop, 2)
        finally:
            monkeypatch.undo()
        return seen.count("cb")

    results = _side_by_side(scenario)
    assert results["asyncio"] == 2
    _assert_same(results)


def test_a_tool_replacing_the_loops_turn_runs_it(monkeypatch):
    # A profiler's or monitor's pattern: BaseEventLoop._run_once wrapped.
    def scenario(loop):
        turns = []
        original = asyncio.base_events.BaseEventLoop._run_once

        def counted(self):
            turns.append(1)
            return original(self)

        monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "_run_once", counted)
        try:
            _run_turns(loop, 3)
        finally:
            monkeypatch.undo()
        return len(turns) >= 3

    results = _side_by_side(scenario)
    assert results["asyncio"] is True
    _assert_same(results)


def _logging(log, tag, run):
    """A ``_run`` that logs ``tag`` and runs ``run`` (the one it replaces)."""

    def logged(handle):
        log.append(tag)
        return run(handle)

    return logged


def test_handle_run_replaced_after_turns_then_restored_then_replaced_again_is_seen_each_time():
    # Each change comes after handles of both classes ran, so that whatever
    # the turn keeps about Handle and TimerHandle is from before it.
    def scenario(loop):
        original = asyncio.events.Handle._run
        counts = []

        try:
            for logging_run in [False, True, False, True, False]:
                log = []
                asyncio.events.Handle._run = _logging(log, "logged", original) if logging_run else original
                loop.call_soon(lambda: None)
                loop.call_later(0, lambda: None)
                _run_turns(loop, 2)
                counts.append(len(log))
        finally:
            asyncio.events.Handle._run = original
        return counts

    results = _side_by_side(scenario)
    zero, logged, *_ = results["asyncio"]
    assert zero == 0 and logged >= 2
    assert results["asyncio"] == [0, logged, 0, logged, 0]
    _assert_same(results)


def test_a_subclass_with_its_own_run_or_one_set_on_it_later_runs_through_it():
    def scenario(loop):
        log = []

        class Own(asyncio.Handle):
            __slots__ = ()

            def _run(self):
                log.append("Own._run")
                super()._run()

        class Plain(asyncio.Handle):
            __slots__ = ()

        def run(cls, what):
            loop._ready.append(cls(log.append, (what,), loop))
            _run_turns(loop, 1)

        run(asyncio.Handle, "handle")
        run(Own, "own")
        run(Plain, "plain")
        Plain._run = _logging(log, "Plain._run", asyncio.Handle._run)
        run(Plain, "plain again")
        del Plain._run
        run(Plain, "plain restored")
        return log

    results = _side_by_side(scenario)
    assert results["asyncio"] == ["handle", "Own._run", "own", "plain", "Plain._run", "plain again",
                                  "plain restored"]
    _assert_same(results)


def test_a_run_set_on_a_base_after_its_subclass_ran_is_seen_by_the_subclass():
    def scenario(loop):
        log = []

        class Base(asyncio.Handle):
            __slots__ = ()

        class Sub(Base):
            __slots__ = ()

        def run(what):
            loop._ready.append(Sub(log.append, (what,), loop))
            _run_turns(loop, 1)

        run("before")
        Base._run = _logging(log, "Base._run", asyncio.Handle._run)
        run("set on the base")
        del Base._run
        run("deleted from the base")
        return log

    results = _side_by_side(scenario)
    assert results["asyncio"] == ["before", "Base._run", "set on the base", "deleted from the base"]
    _assert_same(results)


def test_a_run_attribute_of_the_handle_itself_runs_in_place_of_its_classs_one():
    # A subclass without __slots__ has instances with a __dict__, where
    # `handle._run` finds an attribute of the instance first.
    def scenario(loop):
        log = []

        class WithDict(asyncio.Handle):
            pass

        handle = WithDict(log.append, ("callback",), loop)
        handle._run = lambda: log.append("instance _run")
        loop._ready.append(handle)
        _run_turns(loop, 1)
        return log

    results = _side_by_side(scenario)
    assert results["asyncio"] == ["instance _run"]
    _assert_same(results)


@pytest.mark.parametrize("when", [float("nan"), float("-inf")])
def test_a_timer_at_nan_or_minus_infinity_runs_as_on_asyncio(when):
    # asyncio's timeout is min(max(0, when - now), ...): 0 for NaN too.
    if sys.version_info >= (3, 13) and when != when:
        pytest.skip("Python 3.13's own loop refuses a NaN timeout (EpollSelector.select: ValueError)")

    def scenario(loop):
        # (nothing else scheduled: the turn's wait takes its timeout from
        # that timer alone)
        log = []
        loop.call_at(when, log.append, "at")
        loop.call_at(when, loop.stop)
        loop.run_forever()
        return log

    results = _side_by_side(scenario)
    assert results["asyncio"] == ["at"]
    _assert_same(results)


class _Unprintable:
    """A callable whose ``repr`` raises."""

    def __call__(self):
        raise ValueError("callback")

    def __repr__(self):
        raise KeyError("repr")


def test_an_error_formatting_a_failed_callback_has_its_exception_as_context():
    # The handle's formatting (for the handler's message) raises: that
    # error propagates from the turn with the callback's as __context__.
    def scenario(loop):
        loop.call_soon(_Unprintable())
        try:
            _run_turns(loop, 1)
        except KeyError as e:
            return type(e.__context__).__name__, str(e.__context__)
        return None

    results = _side_by_side(scenario)
    assert results["asyncio"] == ("ValueError", "callback")
    _assert_same(results)


_PATCHED_BEFORE_IMPORT = """
import asyncio, sys
seen, turns = [], []
run, run_once = asyncio.events.Handle._run, asyncio.base_events.BaseEventLoop._run_once
def logged(handle):
    seen.append(1)
    return run(handle)
def counted(self):
    turns.append(1)
    return run_once(self)
asyncio.events.Handle._run = logged
asyncio.base_events.BaseEventLoop._run_once = counted
from blockio._loop import EpollEventLoop, UringEventLoop
loop = {"uring": UringEventLoop, "epoll": EpollEventLoop}[sys.argv[1]]()
loop.run_until_complete(asyncio.sleep(0))
loop.close()
print(len(seen) > 0, len(turns) > 0)
"""


@pytest.mark.parametrize("backend", ["uring", "epoll"])
def test_a_tool_that_replaced_asyncios_turn_and_run_before_blockio_was_imported_runs(backend):
    # The usual order: a monitor installed at start-up, before any loop
    # ran. In a fresh process, so that nothing has run a turn before.
    import subprocess

    out = subprocess.run([sys.executable, "-c", _PATCHED_BEFORE_IMPORT, backend], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr
