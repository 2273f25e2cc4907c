"""Line iteration shared by the binary and the text files: both build
``readlines`` and ``async for`` on their own ``readline``."""

from __future__ import annotations

import operator
from typing import Any, AnyStr, Generic, List, Optional

from ._aio import pause
from ._blockio import turn_due
from ._calls import one_at_a_time_taking_turns


def split_keeping_ends(data: AnyStr, end: AnyStr) -> List[AnyStr]:
    """``data`` cut after each ``end``, which each line keeps (the last
    line is the rest, if any)."""
    parts = data.split(end)
    last = parts.pop()
    lines = [part + end for part in parts]
    if last:
        lines.append(last)
    return lines


def _hint(hint: Any) -> int:
    """``readlines``' ``hint`` as an int (None: no limit), with the built-in
    file's ``TypeError`` for anything else."""
    if hint is None:
        return -1
    try:
        n = operator.index(hint)
    except TypeError:
        raise TypeError(f"argument should be integer or None, not '{type(hint).__name__}'") from None
    if not -(1 << 63) <= n < 1 << 63:
        # (the built-in's error for a hint no ssize_t holds)
        raise OverflowError("cannot fit 'int' into an index-sized integer")
    return n


#: The most bytes (or characters) ``readlines`` splits into lines on the
#: event loop's thread between two turns of it: splitting holds the GIL,
#: and a MiB of 100-byte lines takes 1-5 ms.
SPLIT_PIECE = 1 << 20


class LineReader(Generic[AnyStr]):
    """``readlines`` and asynchronous iteration over ``readline``; the
    subclass has a ``_calls`` queue (``readlines`` is one call). Without a
    ``hint``, ``readlines`` of a file that is not a stream is one
    ``read()`` split into lines (see ``_rest_in_lines``)."""

    __slots__ = ()

    async def readline(self, size: int = -1) -> AnyStr:
        """One line; the empty value at end of file."""
        raise NotImplementedError

    async def read(self, size: int = -1) -> AnyStr:
        """Up to ``size`` bytes or characters; all the rest with -1."""
        raise NotImplementedError

    def _check_open(self) -> None:
        """``ValueError`` once the file is closed (or detached)."""
        raise NotImplementedError

    @one_at_a_time_taking_turns
    async def readlines(self, hint: Optional[int] = -1) -> List[AnyStr]:
        """The remaining lines; with a positive ``hint``, stopping once the
        lines read hold more than ``hint`` bytes or characters, as the
        built-in file's ``readlines`` does."""
        limit = _hint(hint)
        self._check_open()  # (first, as the built-in's readlines: then the mode, by readline)
        lines: List[AnyStr] = []
        total = 0
        # Cancelled (or failed) part-way, it leaves the position where it
        # was (on a stream, the lines read so far come next): none of the
        # lines read so far is lost.
        mark = self._mark()
        error: Optional[BaseException] = None
        if limit <= 0 and not self._in_order():
            # All the rest of a file: read at once and split in C, not a
            # readline per line on the loop's thread; in pieces, a turn of
            # the loop between two.
            try:
                return await self._rest_in_lines()
            except BaseException as e:
                self._restore(mark)
                if not self._consumes(e):
                    raise
                error = e
            # (undecodable text: read again line by line below, which
            # raises where the built-in's readline loop does and leaves the
            # position where that leaves it)
        try:
            if error is not None:
                await self._skip_lines_before(error)
            while True:
                line = await self.readline()
                if not line:
                    return lines
                lines.append(line)
                total += len(line)
                if 0 < limit < total:
                    return lines
                if turn_due(len(line)):
                    # (one call, holding the file's place, that may read a
                    # whole file of lines from its buffer: it takes its
                    # turns of the loop as a loop of readline would; a
                    # cancellation here is undone below)
                    await pause()
        except BaseException as e:
            if self._in_order():
                if lines and self._keep_error(e):
                    # (the lines ahead of a stream's error come before it)
                    return lines
                # A stream cannot be read again: the lines read so far are
                # put back before what the last readline put back.
                self._put_back(lines)
            elif not self._consumes(e):
                self._restore(mark)
            raise

    async def _rest_in_lines(self) -> List[AnyStr]:
        """The rest of the file (not a stream) in lines, as ``readline``
        would have returned them: read at once, split in pieces of about
        :data:`SPLIT_PIECE` with a turn of the event loop between two."""
        raise NotImplementedError

    def _in_order(self) -> bool:
        """Whether the file is a stream (a pipe, socket or terminal), whose
        bytes cannot be read again once read."""
        raise NotImplementedError

    def _keep_error(self, e: BaseException) -> bool:
        """Whether ``e``, which a stream's ``readline`` raised after
        ``readlines`` had read lines, is kept for the next read to raise,
        the lines returned first (an ``OSError``, as a read returns the
        bytes ahead of one); else the lines are put back and ``e`` raised
        (a cancellation)."""
        raise NotImplementedError

    def _consumes(self, e: BaseException) -> bool:
        """Whether ``readlines``, failing with ``e``, leaves the position
        where its last ``readline`` left it (the lines read so far lost), as
        the built-in's does for text that cannot be decoded: the bytes up
        to the end of the chunk that failed are consumed, and the next read
        starts after them. Else it goes back to where it started."""
        return False

    async def _skip_lines_before(self, e: BaseException) -> None:
        """Moves reading on towards the bytes at fault of ``e``, which the
        rest read at once raised (see :meth:`_consumes`), before the
        readline loop that raises it again reads from there: the lines
        that loop returns before the error are lost with it, so only where
        it reaches counts, not the lines on the way."""

    def _put_back(self, lines: List[AnyStr]) -> None:
        """Makes ``lines`` (read by a call that did not finish) the next
        ones read, before what is buffered."""
        raise NotImplementedError

    def _mark(self) -> Any:
        """Where reading is, for :meth:`_restore`."""
        raise NotImplementedError

    def _restore(self, mark: Any) -> None:
        """Back to where :meth:`_mark` was taken, as if the reads since had
        not happened."""
        raise NotImplementedError

    def __aiter__(self) -> "LineReader[AnyStr]":
        return self

    async def __anext__(self) -> AnyStr:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line
