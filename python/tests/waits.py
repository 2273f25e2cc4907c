"""Waiting for the event a test needs instead of sleeping for it: a
condition polled until it holds (failing the test after a generous
deadline), and the condition most tests wait for, a thread of this
process blocked in a given system call."""

import asyncio
import os
import platform
import time

#: System call numbers by machine (``/proc/<tid>/syscall`` gives numbers).
_SYSCALLS = {
    "x86_64": {"read": (0,), "write": (1,), "poll": (7, 271)},
    "aarch64": {"read": (63,), "write": (64,), "poll": (73,)},
}

#: How long a wait may take before the test fails: far beyond any event's
#: time on a loaded machine; only a bug reaches it.
DEADLINE = 30.0

#: How often a condition is checked (the polling period, not a guess at
#: how long the event takes).
_PERIOD = 0.001


def wait_until(cond, what, timeout=DEADLINE):
    """Returns once ``cond()`` is true; raises ``AssertionError`` naming
    ``what`` if it is not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(_PERIOD)


async def await_until(cond, what, timeout=DEADLINE, sleep=asyncio.sleep):
    """:func:`wait_until` for a coroutine: the event loop runs meanwhile
    (``sleep`` is the loop's own: ``trio.sleep`` under trio)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await sleep(_PERIOD)


def a_thread_sleeps_in(function):
    """Whether a thread of this process sleeps in the kernel function
    ``function`` (its ``wchan``): ``wait_for_partner`` is a FIFO's open
    waiting for the other end."""
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/wchan") as f:
                if f.read() == function:
                    return True
        except (FileNotFoundError, ProcessLookupError):
            continue  # (the thread has ended)
    return False


def _names(fd):
    """What descriptor ``fd`` names (``pipe:[1234]``, a path...): the same
    for its duplicates."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except FileNotFoundError:
        return None


def blocked_in(call, fd=None, tid=None, threads=1):
    """Whether ``threads`` threads of this process (thread ``tid`` if
    given) are blocked in the system call ``call`` (``"read"``,
    ``"write"`` or ``"poll"``), with ``fd`` or a duplicate of it as its
    first argument if ``fd`` is given (the engine may work on its own
    duplicate)."""
    numbers = _SYSCALLS[platform.machine()][call]
    want = None if fd is None else _names(fd)
    if fd is not None and want is None:
        raise ValueError(f"descriptor {fd} is not open")
    found = 0
    for t in [tid] if tid is not None else os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/syscall") as f:
                fields = f.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # (the thread has ended)
        if not fields or fields[0] == "running" or int(fields[0]) not in numbers:
            continue
        if fd is None or _names(int(fields[1], 16)) == want:
            found += 1
    return found >= threads


def watched(*fds):
    """Whether epoll instances of this process (an event loop's, say)
    watch every file ``fds`` name (each of them or a duplicate)."""
    want = {"%x" % os.fstat(fd).st_ino for fd in fds}
    seen = set()
    for d in os.listdir("/proc/self/fdinfo"):
        try:
            with open(f"/proc/self/fdinfo/{d}") as f:
                lines = f.read().splitlines()
        except (FileNotFoundError, ProcessLookupError):
            continue  # (closed meanwhile)
        for line in lines:
            if line.startswith("tfd:") and " ino:" in line:
                seen.add(line.split(" ino:")[1].split()[0])
    return want <= seen


def waits_for_bytes(fd, threads=1):
    """Whether a read of the stream ``fd`` waits for bytes: in the event
    loop's poll (a file that owns its descriptor waits there, taking
    nothing from the stream), or in a thread blocked in ``read`` (one
    reading a duplicate of a descriptor the caller owns, or the engine's
    read of a stream the loop cannot watch); ``threads`` such threads
    for the latter."""
    return watched(fd) or blocked_in("read", fd, threads=threads)
