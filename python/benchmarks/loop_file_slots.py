"""What holding a read's file in a slot of the loop ring's registered-file
table costs beside the duplicate descriptor it replaced (a read of more
than 256 KiB on blockio's event loop's ring, which the kernel's workers
copy): one process, rounds alternating between the two, medians and spread
(lowest-highest) over the rounds, and the ratio slot / duplicate by round.

* ``pair``: the system calls alone, each made through ``ctypes`` (so
  that all pay the same call overhead): ``io_uring_register``
  ``FILES_UPDATE`` of a descriptor into a slot and of -1 to empty it,
  against ``fcntl(F_DUPFD_CLOEXEC)`` and ``close``; ns per pair. (The
  ring empties the slot with an entry linked after the read, not with the
  second system call: this bounds its cost from above.)
* ``read``: warm (cached) 1 MiB reads through ``loop._ring_pread``,
  awaited one at a time, on a loop whose ring has the table
  (``LoopRing()``) and on one without (``LoopRing(file_slots=0)``, the
  duplicate); the process's CPU time and the wall time per read, in us.
* ``past end``: the same reads (1 MiB, into one buffer through
  ``loop._ring_pread_into``) at an offset past the end of the file: the
  kernel copies nothing, so what is measured is the read's path alone
  (the slot or the duplicate, the worker's hop, the completion).

    python python/benchmarks/loop_file_slots.py --rounds 9
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile
import time

from blockio._blockio import LoopRing
from blockio._loop import UringEventLoop

_libc = ctypes.CDLL(None, use_errno=True)
SYS_IO_URING_SETUP, SYS_IO_URING_REGISTER = 425, 427
REGISTER_FILES2, REGISTER_FILES_UPDATE = 13, 6
RSRC_REGISTER_SPARSE = 1
F_DUPFD_CLOEXEC = 1030


class _RsrcRegister(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("resv2", ctypes.c_uint64),
                ("data", ctypes.c_uint64), ("tags", ctypes.c_uint64)]


class _FilesUpdate(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint32), ("resv", ctypes.c_uint32), ("fds", ctypes.c_uint64)]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def new_ring() -> int:
    """A plain ring (8 entries) with a sparse file table of one slot."""
    params = ctypes.create_string_buffer(120)
    ring = _check(_libc.syscall(SYS_IO_URING_SETUP, 8, params), "io_uring_setup")
    table = _RsrcRegister(1, RSRC_REGISTER_SPARSE, 0, 0, 0)
    _check(_libc.syscall(SYS_IO_URING_REGISTER, ring, REGISTER_FILES2, ctypes.byref(table),
                         ctypes.sizeof(table)), "register sparse table")
    return ring


def slot_pair_ns(ring: int, fd: int, n: int) -> float:
    """ns per registration of ``fd`` into slot 0 of ``ring`` and emptying."""
    put, empty = (ctypes.c_int32 * 1)(fd), (ctypes.c_int32 * 1)(-1)
    fill = _FilesUpdate(0, 0, ctypes.addressof(put))
    clear = _FilesUpdate(0, 0, ctypes.addressof(empty))
    reg, fill_p, clear_p = _libc.syscall, ctypes.byref(fill), ctypes.byref(clear)
    _check(reg(SYS_IO_URING_REGISTER, ring, REGISTER_FILES_UPDATE, fill_p, 1), "files update")
    _check(reg(SYS_IO_URING_REGISTER, ring, REGISTER_FILES_UPDATE, clear_p, 1), "files update")
    t0 = time.perf_counter_ns()
    for _ in range(n):
        reg(SYS_IO_URING_REGISTER, ring, REGISTER_FILES_UPDATE, fill_p, 1)
        reg(SYS_IO_URING_REGISTER, ring, REGISTER_FILES_UPDATE, clear_p, 1)
    return (time.perf_counter_ns() - t0) / n


def dup_pair_ns(fd: int, n: int) -> float:
    """ns per duplicate of ``fd`` and its close."""
    fcntl, close = _libc.fcntl, _libc.close
    t0 = time.perf_counter_ns()
    for _ in range(n):
        close(fcntl(fd, F_DUPFD_CLOEXEC, 0))
    return (time.perf_counter_ns() - t0) / n


def read_us(path: str, slots: int, n: int, past_end: bool) -> tuple:
    """CPU and wall us per warm 1 MiB read on a loop ring with ``slots``
    (``past_end``: at an offset past the end of the 8 MiB file)."""
    loop = UringEventLoop(LoopRing(file_slots=slots))
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(1 << 20)

    def read(i: int) -> object:
        if past_end:
            return loop._ring_pread_into(fd, 16 << 20, buf)
        return loop._ring_pread(fd, (i % 8) << 20, 1 << 20)

    async def reads() -> tuple:
        for i in range(20):  # (not counted)
            await read(i)
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(n):
            await read(i)
        return (time.process_time() - c0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6

    try:
        return loop.run_until_complete(reads())
    finally:
        os.close(fd)
        loop.close()


def spread(values: list) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--reads", type=int, default=300)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "8m")
        with open(path, "wb") as f:
            f.write(os.urandom(8 << 20))
        with open(path, "rb") as f:  # (in the page cache)
            f.read()
        fd, ring = os.open(path, os.O_RDONLY), new_ring()
        slot, dup = [], []
        try:
            for r in range(args.rounds):
                if r % 2 == 0:
                    slot.append(slot_pair_ns(ring, fd, args.pairs))
                    dup.append(dup_pair_ns(fd, args.pairs))
                else:
                    dup.append(dup_pair_ns(fd, args.pairs))
                    slot.append(slot_pair_ns(ring, fd, args.pairs))
        finally:
            os.close(ring)
            os.close(fd)
        print(f"pair, ns: slot {spread(slot)}; dup {spread(dup)}; "
              f"slot/dup by round {spread([a / b for a, b in zip(slot, dup)])}")
        for past_end, what in [(False, "1 MiB read"), (True, "1 MiB read past end")]:
            got: dict = {1024: [], 0: []}
            for r in range(args.rounds):
                for slots in ([1024, 0] if r % 2 == 0 else [0, 1024]):
                    got[slots].append(read_us(path, slots, args.reads, past_end))
            for i, unit in enumerate(["CPU", "wall"]):
                s, d0 = [g[i] for g in got[1024]], [g[i] for g in got[0]]
                print(f"{what}, {unit} us: slot {spread(s)}; dup {spread(d0)}; "
                      f"slot/dup by round {spread([a / b for a, b in zip(s, d0)])}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
