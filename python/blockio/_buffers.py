"""Buffers for ``O_DIRECT`` descriptors."""

from __future__ import annotations

import ctypes
import mmap


def aligned_buffer(size: int, alignment: int = 4096) -> memoryview:
    """A zeroed, writable buffer of ``size`` bytes whose address is a
    multiple of ``alignment`` (a power of two): what reads and writes on an
    ``O_DIRECT`` descriptor need (their offsets and lengths must also be
    multiples of the file's alignment, 512 or 4096 bytes on most devices).

    It is anonymous memory (``mmap``), page-aligned, so any alignment up
    to the page size costs nothing extra; the memory is freed when the
    last view of it is released."""
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"size must be an int, got {type(size).__name__}")
    if size < 0:
        raise ValueError(f"size must not be negative, got {size}")
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")
    if size == 0:
        return memoryview(bytearray(0))
    extra = alignment if alignment > mmap.PAGESIZE else 0
    try:
        m = mmap.mmap(-1, size + extra)
    except OSError as e:
        raise MemoryError(f"cannot allocate {size} bytes: {e.strerror}") from None
    view = memoryview(m)
    if extra:
        address = ctypes.addressof(ctypes.c_char.from_buffer(m))
        skip = -address % alignment
        return view[skip:skip + size]
    return view
