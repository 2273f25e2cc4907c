"""``blockio.open``: the built-in ``open``'s arguments and checks, for
asyncio; see :mod:`blockio._file` for what the files do.

Decisions: a path is opened on the engine's file-system threads; an
``opener`` (a Python callable) runs on the loop's default executor, never
on the loop's thread; an ``int`` is used as the descriptor, as the built-in
``open`` does (closed on close unless ``closefd=False``).
"""

from __future__ import annotations

import errno
import fcntl
import io
import operator
import os
import stat
import warnings
from typing import Any, Callable, Coroutine, Generator, Generic, Literal, Optional, Tuple, TypeVar, Union, overload

from ._aio import run_in_thread
from ._engine import Engine, _Descriptor, default_engine
from ._file import _C_INT, AsyncFile, PathOrFd, _c_type_name
from ._text import AsyncTextFile

F = TypeVar("F")

#: Modes that open a binary file (:class:`AsyncFile`).
BinaryMode = Literal[
    "rb", "wb", "ab", "xb", "rb+", "wb+", "ab+", "xb+", "r+b", "w+b", "a+b", "x+b", "br", "bw", "ba", "bx",
]
#: Modes that open a text file (:class:`AsyncTextFile`).
TextMode = Literal[
    "r", "w", "a", "x", "r+", "w+", "a+", "x+", "rt", "wt", "at", "xt", "rt+", "wt+", "at+", "xt+",
    "r+t", "w+t", "a+t", "x+t",
]
Opener_ = Callable[[Any, int], int]

_MODE_CHARS = set("rwxabt+")


#: The modes found good with the other arguments left at their defaults
#: (a few dozen strings at most: the valid arrangements of "rwxabt+"),
#: which the next open with those defaults need not check again.
_GOOD_MODES: "set[str]" = set()


def _check_mode(mode: str, buffering: int, encoding: Optional[str], errors: Optional[str],
                newline: Optional[str], closefd: bool = True,
                opener: Optional[Callable[[Any, int], int]] = None) -> None:
    """Refuses what the built-in ``open`` refuses, with its messages."""
    defaults = (type(buffering) is int and buffering == -1 and encoding is None and errors is None
                and newline is None and type(closefd) is bool and opener is None)
    if defaults and type(mode) is str and mode in _GOOD_MODES:
        return
    if not (type(buffering) is int and type(closefd) is bool
            and type(mode) is str
            and all(value is None or type(value) is str for value in (encoding, errors, newline))):
        _refuse_types_as_the_builtin(mode, buffering, encoding, errors, newline, closefd)
    _check_mode_fully(mode, buffering, encoding, errors, newline)
    if opener is not None and not callable(opener):
        # (the built-in's error when it calls it, having opened nothing)
        raise TypeError(f"'{_c_type_name(opener)}' object is not callable")
    if defaults and type(mode) is str:
        _GOOD_MODES.add(mode)


def _refuse_types_as_the_builtin(mode: Any, buffering: Any, encoding: Any, errors: Any, newline: Any,
                                 closefd: Any) -> None:
    """An argument of a type the built-in ``open`` refuses (``errors=5``,
    ``closefd="x"``, ``buffering=1.5``) raises its error, in its order:
    the built-in itself checks them, given a descriptor no file has (-1),
    which its ``FileIO`` then refuses, having opened nothing. (Its
    warning for line buffering in binary mode is given by the checks
    after this one.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            io.open(-1, mode, buffering, encoding, errors, newline, closefd)
        except ValueError as e:
            if str(e) != "negative file descriptor":
                raise


def _check_mode_fully(mode: str, buffering: int, encoding: Optional[str], errors: Optional[str],
                      newline: Optional[str]) -> None:
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    if set(mode) - _MODE_CHARS or len(mode) != len(set(mode)):
        raise ValueError(f"invalid mode: '{mode}'")
    if sum(c in mode for c in "rwxa") != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if "b" in mode and "t" in mode:
        raise ValueError("can't have text and binary mode at once")
    if "b" in mode:
        for name, value in (("encoding", encoding), ("errors", errors), ("newline", newline)):
            if value is not None:
                raise ValueError(f"binary mode doesn't take an {name} argument" if name != "newline"
                                 else "binary mode doesn't take a newline argument")
    elif buffering == 0:
        raise ValueError("can't have unbuffered text I/O")
    if newline not in (None, "", "\n", "\r", "\r\n"):
        raise ValueError(f"illegal newline value: {newline}")
    if "b" in mode and buffering == 1:
        warnings.warn("line buffering (buffering=1) isn't supported in binary mode, "
                      "the default buffer size will be used", RuntimeWarning, stacklevel=4)


def _binary_mode(mode: str) -> str:
    """The mode the built-in's binary file reports for ``mode`` (its
    ``FileIO.mode``): ``'r+b'`` and ``'w+b'`` read back as ``'rb+'``,
    ``'br'`` as ``'rb'``, a text mode as its buffer's (``'w+'``: ``'rb+'``).
    aiofiles, which hands the built-in file's ``mode`` on, reports the same."""
    plus = "+" if "+" in mode else ""
    if "x" in mode:
        return "xb" + plus
    if "a" in mode:
        return "ab" + plus
    if plus:
        return "rb+"
    return "rb" if "r" in mode else "wb"


def _flags(mode: str) -> int:
    if "+" in mode:
        flags = os.O_RDWR
    elif "r" in mode:
        flags = os.O_RDONLY
    else:
        flags = os.O_WRONLY
    if "w" in mode:
        flags |= os.O_CREAT | os.O_TRUNC
    elif "x" in mode:
        flags |= os.O_CREAT | os.O_EXCL
    elif "a" in mode:
        flags |= os.O_CREAT | os.O_APPEND
    return flags | os.O_CLOEXEC


def _default_buffer_size(fd: int) -> int:
    """The buffer size the built-in ``open`` gives ``fd`` by default: its
    ``FileIO``'s ``_blksize`` (the file system's preferred I/O size, when
    above 1; else ``io.DEFAULT_BUFFER_SIZE``), asked of a ``FileIO`` over
    the descriptor that never closes it. So a buffered file keeps in its
    buffer the writes the built-in's keeps, and raises at once a failure
    (``EFBIG``, ``ENOSPC``) where the built-in's does, not at the next
    flush or at close."""
    try:
        raw = io.FileIO(fd, "r", closefd=False)
    except (OSError, ValueError):
        return io.DEFAULT_BUFFER_SIZE
    with raw:
        size = getattr(raw, "_blksize", io.DEFAULT_BUFFER_SIZE)
    return size if isinstance(size, int) and size > 1 else io.DEFAULT_BUFFER_SIZE


def _as_descriptor_number(file: Any) -> Any:
    """The file as an int when it is a number of another type, else as given."""
    if not isinstance(file, (int, str, bytes, float)) and not hasattr(file, "__fspath__"):
        # A number of another type (numpy's, anything with __index__) is a
        # descriptor, as the built-in's FileIO takes it.
        number: Any = file
        try:
            file = operator.index(number)
        except TypeError:
            pass  # (not a number: the path's error below)
    return file


async def _open_descriptor(file: Any, mode: str, closefd: bool, opener: Optional[Callable[[Any, int], int]],
                           eng: Engine) -> Tuple[int, Any, Optional[os.stat_result]]:
    """The descriptor (handed in, or opened here), the file's name, and
    the file's ``fstat`` when the open made one (see ``Engine._aopen_stat``)."""
    fd: int
    name: Any
    st: Optional[os.stat_result] = None
    if isinstance(file, int):
        if file not in _C_INT:
            # (the built-in's FileIO takes a number past a C int for a
            # path, which an int is not)
            raise TypeError(f"expected str, bytes or os.PathLike object, not {type(file).__name__}")
        if file < 0:
            raise ValueError("negative file descriptor")
        fd, name = file, file
    else:
        # (the path's TypeError first, as the built-in's FileIO)
        name = file if isinstance(file, (str, bytes)) else os.fspath(file)
        if not closefd:
            raise ValueError("Cannot use closefd=False with file name")
        # What the file's engine needs (see `_wrap_descriptor`) is made
        # before the path is opened: when descriptors run out there, the
        # open fails having created nothing (a "w" mode's new, empty file),
        # as the built-in's does with EMFILE. An opener may add O_DIRECT,
        # whose files have a ring of their own (on io_uring): it is made
        # now too.
        eng._core.prepare(-1, opener is not None)
        if opener is None:
            fd, st = await eng._aopen_stat(file, _flags(mode), 0o666)
        else:
            # A Python callable: run on the loop's default executor, never
            # on the loop's own thread.
            got = await run_in_thread(opener, file, _flags(mode))
            # (the built-in's errors, in its words)
            if not isinstance(got, int):
                raise TypeError(f"expected integer from opener, got {type(got).__name__}")
            if got not in _C_INT:
                raise OverflowError(f"opener returned {got}, which is not a C int")
            if got < 0:
                raise ValueError(f"opener returned {got}")
            fd = got
    return fd, name, st


def _buffer_sizes(fd: int, buffering: int, st: Optional[os.stat_result]) -> Tuple[int, int]:
    """The read-ahead and write buffer sizes of a file over ``fd``:
    reads ahead a DEFAULT_BUFFER_SIZE by default, which sequential reads
    grow; keeps the built-in's buffer size of writes, so that the same
    writes fail at once. ``st``: the ``fstat`` of a regular file this
    open made by its path, which spares looking the size up again."""
    size = io.DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
    if buffering not in (-1, 1):
        return size, buffering
    if st is not None:
        # (what FileIO's `_blksize` is: see `_default_buffer_size`)
        return size, st.st_blksize if st.st_blksize > 1 else io.DEFAULT_BUFFER_SIZE
    return size, _default_buffer_size(fd)


async def _place_appends(raw: AsyncFile, fd: int, mode: str) -> None:
    """Where ``raw``'s writes go when the mode or the descriptor's
    ``O_APPEND`` says they append, and its position at the end in
    ``"a"`` modes."""
    if "a" not in mode and raw._writable and not raw._stream and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
        # A descriptor with O_APPEND in another writing mode (handed
        # in, or made by an opener): the kernel puts every write at the
        # end whatever the offset, so the position follows it there, as
        # the built-in's does once its buffer is flushed; reads start at
        # the descriptor's offset all the same.
        raw._append = True
    if "a" in mode:
        if not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
            # A descriptor without O_APPEND (handed in, or made by an
            # opener): as the built-in's FileIO, which seeks to the end
            # once and writes on from there, writes go at the position,
            # which starts at the end.
            raw._append = False
        # At the end, as the built-in open leaves it, the descriptor's
        # own offset too (for a child given the number at once).
        await raw._position()
        raw._sync_offset()


async def _wrap_descriptor(file: Any, fd: int, name: Any, mode: str, buffering: int, encoding: Optional[str],
                           errors: Optional[str], newline: Optional[str], closefd: bool,
                           opener: Optional[Callable[[Any, int], int]], eng: Engine,
                           st: Optional[os.stat_result] = None) -> Any:
    """The open file (binary or text) over the descriptor; on failure the
    descriptor opened here is closed, one handed in given back. ``st``:
    the ``fstat`` of a path opened here, if its open made one."""
    raw: Optional[AsyncFile] = None
    # A regular file this open made by its path (no opener), whose
    # ``fstat`` the open made: its descriptor is at offset 0, not
    # ``O_DIRECT`` (the mode's flags), and its preferred I/O size known,
    # which spares the ``fcntl``, ``lseek`` and ``fstat`` of a descriptor
    # of unknown origin.
    fresh = st is not None and stat.S_ISREG(st.st_mode)
    try:
        # What the file's engine needs (its ring and eventfd, or the thread
        # pool's descriptors) is made now, not at the first read or write:
        # an open file can always finish its calls, and when descriptors
        # run out it is the open that fails with EMFILE, as the built-in's.
        # (For a path opened here without O_DIRECT, `_open_descriptor`'s
        # `prepare` made it.)
        if not fresh:
            eng._core.prepare(fd)
        if isinstance(file, int) or opener is not None:
            # As the built-in's FileIO checks a descriptor handed in or
            # made by an opener: a number that is not open is EBADF, a
            # directory EISDIR, now rather than at the first read (one
            # handed in stays the caller's; an opener's is closed below).
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        line_buffering = buffering == 1 and "b" not in mode
        size, wsize = _buffer_sizes(fd, buffering, st if fresh else None)
        binary_mode = _binary_mode(mode)
        # A descriptor handed in, or made by the caller's opener, may be
        # known elsewhere: its offset follows the file's position.
        shared = isinstance(file, int) or opener is not None
        raw = AsyncFile(_Descriptor(fd, name, binary_mode, closefd), binary_mode, eng, size, shared, wsize,
                        at_start=fresh)
        if raw._stream and "+" in mode and buffering != 0:
            # The built-in's buffered reader and writer of one file
            # (BufferedRandom) needs a seekable one; it closes the
            # descriptor then, as here (unless closefd=False).
            raw._file.closed = True
            if isinstance(file, int) and closefd:
                os.close(fd)
            raise io.UnsupportedOperation("File or stream is not seekable.")
        await _place_appends(raw, fd, mode)
        if "b" in mode:
            return raw
        return AsyncTextFile(raw, mode, encoding, errors, newline, line_buffering)
    except BaseException:
        # Cancelled (or a bad encoding): the descriptor opened here is
        # closed, never left to leak; one handed in is the caller's.
        if not isinstance(file, int):
            if raw is not None:
                raw._file.closed = True  # (so that collecting it closes nothing)
                raw._close_descriptor()  # (once a size lookup given up is done)
            else:
                os.close(fd)
        elif raw is not None:
            raw._engine._core.disown(fd)  # (the caller's again)
        raise


async def _open(file: PathOrFd, mode: str, buffering: int, encoding: Optional[str], errors: Optional[str],
                newline: Optional[str], closefd: bool, opener: Optional[Callable[[Any, int], int]],
                engine: Optional[Engine]) -> Any:
    eng = engine or default_engine()
    file = _as_descriptor_number(file)
    fd, name, st = await _open_descriptor(file, mode, closefd, opener, eng)
    return await _wrap_descriptor(file, fd, name, mode, buffering, encoding, errors, newline, closefd, opener, eng,
                                  st)


class Opener(Generic[F]):
    """What :func:`open` returns: await it for the file, or use it with
    ``async with`` (which closes the file). ``_obj`` is the file once
    open, as on aiofiles' context manager, which it follows: the file is
    opened once, by the first ``await`` (or ``async with``); awaited
    again, or entered after an ``await``, it is that file (a second open
    of a ``"w"`` file would truncate it again). Once an ``async with`` has
    closed it, or the open failed, another use raises ``RuntimeError``,
    as awaiting a used coroutine does."""

    def __init__(self, args: Tuple[Any, ...]) -> None:
        self._args = args
        self._obj: Optional[F] = None
        #: The open, made at the first use (so an opener never used
        #: leaves no coroutine never awaited).
        self._coro: Optional[Coroutine[Any, Any, F]] = None

    def __await__(self) -> Generator[Any, None, F]:
        if self._obj is None:
            if self._coro is None:
                self._coro = _open(*self._args)
            self._obj = yield from self._coro.__await__()
        return self._obj

    async def __aenter__(self) -> F:
        return await self

    async def __aexit__(self, *exc: Any) -> None:
        obj: Any = self._obj
        self._obj = None
        if obj is not None:
            await obj.close()


@overload
def open(file: PathOrFd, mode: BinaryMode, buffering: int = -1, encoding: None = None, errors: None = None,
         newline: None = None, closefd: bool = True, opener: Optional[Opener_] = None, *,
         engine: Optional[Engine] = None, loop: Any = None, executor: Any = None) -> Opener[AsyncFile]: ...
@overload
def open(file: PathOrFd, mode: TextMode = "r", buffering: int = -1, encoding: Optional[str] = None,
         errors: Optional[str] = None, newline: Optional[str] = None, closefd: bool = True,
         opener: Optional[Opener_] = None, *, engine: Optional[Engine] = None, loop: Any = None,
         executor: Any = None) -> Opener[AsyncTextFile]: ...
@overload
def open(file: PathOrFd, mode: str, buffering: int = -1, encoding: Optional[str] = None,
         errors: Optional[str] = None, newline: Optional[str] = None, closefd: bool = True,
         opener: Optional[Opener_] = None, *, engine: Optional[Engine] = None, loop: Any = None,
         executor: Any = None) -> Opener[Union[AsyncFile, AsyncTextFile]]: ...


def open(file: PathOrFd, mode: str = "r", buffering: int = -1, encoding: Optional[str] = None,
         errors: Optional[str] = None, newline: Optional[str] = None, closefd: bool = True,
         opener: Optional[Opener_] = None, *, engine: Optional[Engine] = None, loop: Any = None,
         executor: Any = None) -> Opener[Any]:
    """Opens a file for asyncio, as ``aiofiles.open`` (and the built-in
    ``open``, whose arguments it takes): ``async with blockio.open(p, "rb")
    as f`` or ``f = await blockio.open(p)``. Binary modes give an
    :class:`AsyncFile`, text modes an :class:`AsyncTextFile`. ``engine``
    picks the engine (:func:`default_engine` otherwise). A bad ``mode`` or
    argument combination raises ``ValueError`` here, as the built-in
    ``open`` does.

    ``loop`` and ``executor`` are taken, as ``aiofiles.open`` takes them,
    and ignored: the file's calls run on the engine (the running loop's
    completions, the engine's threads), never on an executor, and on the
    loop that awaits them."""
    _check_mode(mode, buffering, encoding, errors, newline, closefd, opener)
    return Opener((file, mode, buffering, encoding, errors, newline, closefd, opener, engine))
