"""A subprocess still running when its event loop closes, as on asyncio's
loop: it keeps running (its transport, collected, does not kill it), is
reaped when it exits (never left a zombie), and no pidfd of the loop's is
left open. Each test runs the same program on asyncio's loop and on
blockio's (both backends)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys

import pytest

from loops import FACTORIES
from waits import wait_until

# Says "ready" once its SIGTERM handler is in place; on SIGTERM says
# "term" and exits. Killed instead (SIGKILL), it says nothing more: its
# end of the pipe closes.
_CHILD = """
import os, signal, sys
w = int(sys.argv[1])
def term(*_):
    os.write(w, b"term")
    os._exit(0)
signal.signal(signal.SIGTERM, term)
os.write(w, b"ready")
while True:
    signal.pause()
"""


def _state(pid):
    """The child's state letter in /proc (``S``, ``R``, ``Z``...),
    ``"exiting"`` while its entry is being taken down (reading it then
    fails with ``ESRCH``), or ``"gone"`` once it is reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
    except ProcessLookupError:
        return "exiting"


def _pidfds():
    """This process's pidfds open."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
        except FileNotFoundError:
            continue  # (the listing's own descriptor)
    return found


def _run(name, main):
    """``asyncio.run``'s steps on a new loop called ``name``: ``main()``,
    then every task left cancelled and awaited, then the close."""
    loop = FACTORIES[name]()
    try:
        result = loop.run_until_complete(main())
        left = asyncio.all_tasks(loop)
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        return result
    finally:
        loop.close()


@pytest.mark.parametrize("waited", [False, True], ids=["not-awaited", "wait-task-pending"])
@pytest.mark.parametrize("name", ["asyncio", "blockio-uring", "blockio-epoll"])
def test_a_child_running_at_the_loops_close_runs_on_and_is_reaped_when_it_exits(name, waited):
    """The child, not awaited or awaited by a task that the run's end
    cancels, outlives the loop and its collected transport: on SIGTERM it
    still answers (it was not killed), and it is then reaped. The loop
    leaves no pidfd open."""
    r, w = os.pipe()
    pidfds = _pidfds()

    async def main():
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _CHILD, str(w), pass_fds=(w,))
        os.close(w)
        if waited:
            asyncio.ensure_future(proc.wait())
        assert os.read(r, 5) == b"ready"
        return proc.pid

    try:
        pid = _run(name, main)
        gc.collect()
        state = _state(pid)
        left_open = _pidfds() - pidfds
        os.kill(pid, signal.SIGTERM)
        said = os.read(r, 4)
    finally:
        os.close(r)
    assert state in ("S", "R")
    assert left_open == 0
    assert said == b"term"
    wait_until(lambda: _state(pid) == "gone", f"child {pid} reaped")
