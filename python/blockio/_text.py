"""Text mode for :func:`blockio.open`: an incremental decoder over the
binary :class:`~blockio.AsyncFile`, with the built-in ``open``'s
``encoding``, ``errors`` and ``newline`` rules.

* ``read(n)`` counts characters; multi-byte characters split across reads
  are decoded whole.
* ``newline=None`` translates ``\\r\\n`` and ``\\r`` to ``\\n`` on input and
  ``\\n`` to ``os.linesep`` on output; ``""`` splits lines on any of the
  three without translating; ``"\\n"``, ``"\\r"``, ``"\\r\\n"`` split on that
  one and write ``\\n`` as it.
* ``tell()`` is a byte offset (the built-in returns an opaque cookie). It is
  exact for encodings whose decoder has no state after the first bytes
  (UTF-8, ASCII, Latin-1, ...); with UTF-16 or UTF-32 seek only to 0 or to
  a value that ``tell()`` returned at a line start. Codecs with shift
  states (UTF-7, ISO-2022, HZ) have none at a line start; elsewhere no
  byte offset can hold it, and ``tell()`` raises ``OSError``.
"""

from __future__ import annotations

import codecs
import errno
import io
import locale
import os
from typing import Any, Callable, Iterable, List, NoReturn, Optional, Tuple, Union

from ._aio import pause
from ._blockio import TURN_BUDGET, count_copied, turn_count, turn_due
from ._file import _C_INT, _MAX_OFFSET, AsyncFile, _c_type_name, _count_arg, _int_arg, _size_arg
from ._calls import one_at_a_time, one_at_a_time_kept, one_at_a_time_placing, one_at_a_time_taking_turns
from ._lines import LineReader, split_keeping_ends

_CHUNK = 8192

#: The most bytes read and decoded (or, by ``readlines``, split into
#: lines) on the event loop's thread between two turns of it (a text
#: ``read(n)`` counts the bytes of its chunks): decoding holds the GIL,
#: and 1 MiB takes 0.1-0.5 ms (Latin-1, UTF-16) to 2 ms (UTF-8, split
#: into lines) on this thread.
_PIECE = 1 << 20

#: A chunk of bytes decoded: the decoder's state and the byte offset
#: before it, its bytes, and how many characters they decoded to.
_Chunk = Tuple[Any, int, bytes, int]

#: The most bytes a decoder holds between two chunks: a character cut
#: short (3 bytes of UTF-8, up to 3 of a UTF-16 surrogate pair or of
#: UTF-32) and a ``\r`` held back (up to 4).
_HELD = 8

#: The most bytes one character returned can take: 4 (UTF-8, UTF-32,
#: GB18030), twice for a ``\r\n`` returned as one ``\n``.
_CHAR_BYTES = 8


def _not_str(obj: Any) -> TypeError:
    """The built-in text file's error for a write of ``obj``, not a
    ``str``: ``None`` by name, any other type by its C name."""
    return TypeError(f"write() argument must be str, not {'None' if obj is None else _c_type_name(obj)}")


def _last_chars(parts: List[str], n: int) -> str:
    """The last ``n`` characters of ``parts`` joined (copying only those)."""
    tail: List[str] = []
    for part in reversed(parts):
        if n <= 0:
            break
        tail.append(part if len(part) <= n else part[len(part) - n:])
        n -= len(tail[-1])
    return "".join(reversed(tail))


def _default_encoding() -> str:
    """The built-in ``open``'s default: UTF-8 in UTF-8 mode, else the
    locale's encoding."""
    text_encoding = getattr(io, "text_encoding", None)
    if text_encoding is not None and text_encoding(None) == "utf-8":
        return "utf-8"
    return locale.getpreferredencoding(False)


#: The codecs whose encoder writes a BOM at the file's start.
_BOM_CODECS = ("utf-16", "utf-32", "utf-8-sig")

#: The BOMs each of those codecs' decoders read at the file's start.
_BOMS = {
    "utf-16": (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE),
    "utf-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE),
    "utf-8-sig": (codecs.BOM_UTF8,),
}


#: Codecs whose decoder keeps a state between characters (shift sequences)
#: that no byte offset can restore: their lines start with none.
_STATEFUL_CODECS = frozenset({"utf-7", "hz", "iso2022_jp", "iso2022_jp_1", "iso2022_jp_2", "iso2022_jp_2004",
                              "iso2022_jp_3", "iso2022_jp_ext", "iso2022_kr"})

#: What ``str.splitlines`` takes for line ends besides "\r" and "\n", and a
#: text file's ``readline`` does not.
_NOT_LINE_ENDS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

#: ``newlines``' endings as bits, in the built-in decoder's order.
_NL_ORDER = (("\r", 2), ("\n", 1), ("\r\n", 4))


def _nl_bits(nl: Union[str, Tuple[str, ...], None]) -> int:
    """A decoder's ``newlines`` as bits."""
    seen = (nl,) if isinstance(nl, str) else nl or ()
    return sum(bit for end, bit in _NL_ORDER if end in seen)


def _nl_value(bits: int) -> Union[str, Tuple[str, ...], None]:
    """Bits as a decoder's ``newlines`` gives them: None, one, or a tuple."""
    ends = tuple(end for end, bit in _NL_ORDER if bits & bit)
    return None if not ends else ends[0] if len(ends) == 1 else ends


def _seek_places(f: "AsyncTextFile", offset: Any = 0, whence: Any = os.SEEK_SET) -> bool:
    """Whether a text ``seek`` places the binary file's seek before it first
    yields (see `one_at_a_time_placing`): from the start or the end, not in
    append mode (where writes go to the end whatever the position, and the
    end is the answer of a mark in the core)."""
    return type(whence) is int and whence in (os.SEEK_SET, os.SEEK_END) and not f.buffer._append


def _truncate_places(f: "AsyncTextFile", size: Any = None) -> bool:
    """Whether a text ``truncate`` places the binary file's before it first
    yields: with a size, or at a position no text read ahead hides."""
    return (size is not None or (f._snap is None and f.buffer._pending is None)) and not f.buffer._stream


class AsyncTextFile(LineReader[str]):
    """A text file opened by :func:`blockio.open`: the coroutines of
    :class:`~blockio.AsyncFile` over ``str`` (``read(n)`` counts
    characters), over the binary file in :attr:`buffer`."""

    def __init__(self, buffer: AsyncFile, mode: str, encoding: Optional[str], errors: Optional[str],
                 newline: Optional[str], line_buffering: bool) -> None:
        self.buffer = buffer
        self._file = buffer._file
        self._calls = buffer._calls
        #: The queue's ``free`` list, taken by ``readline`` served inline.
        self._free = buffer._calls.free
        self.mode = mode
        self.name = buffer.name
        self.encoding = encoding or _default_encoding()
        codecs.lookup(self.encoding)  # LookupError now, as the built-in open
        self.errors = errors or "strict"
        self.line_buffering = line_buffering
        self._newline = newline
        self._decoder: Any = None
        self._encoder: Any = None
        #: Decoded characters not yet returned start at ``_decoded[_used]``.
        self._decoded = ""
        self._used = 0
        #: Characters decoded after ``_decoded``, not yet joined to it (a
        #: piece each): ``read(n)`` and ``readline`` join them once, not a
        #: piece at a time (which costs the square of a long read), and
        #: only they leave any here between two calls of :meth:`_more`.
        self._ahead: List[str] = []
        self._ahead_len = 0
        #: To map ``_used`` back to a byte offset: for each chunk of bytes
        #: that made ``_decoded``, the decoder's state and the byte offset
        #: before it, the chunk, and the number of characters it decoded
        #: to. Chunks whose characters have all been returned are dropped
        #: as more are read, so a file read line by line keeps about one.
        self._snap: Optional[List[_Chunk]] = None
        #: Characters dropped from the front of ``_decoded`` since ``_snap``
        #: began: ``_gone + _used`` counts the characters returned since.
        self._gone = 0
        #: The last offset ``tell`` found, to start the next one from: the
        #: characters returned then (counted as ``_gone + _used``), the byte
        #: offset, and the decoder's state there.
        self._cp: Optional[Tuple[int, int, Any]] = None
        self._eof = False
        #: The decoder's state flags once past the file's start (its BOM),
        #: learnt on the first seek past it.
        self._start_flags: Optional[int] = None
        #: A seek (or a BOM written) left the decoder to be set as past the
        #: file's first bytes before it next decodes (`_learn_the_start`).
        self._flags_due = False
        #: The line endings seen before the decoder was last reset (bits:
        #: see `_nl_bits`), for ``newlines``.
        self._nl_seen = 0
        #: The codec keeps a state between characters that a byte offset
        #: cannot hold (its shift sequences), so ``tell`` works only at a
        #: line start, where the codec has none.
        self._stateful = codecs.lookup(self.encoding).name in _STATEFUL_CODECS
        #: The bytes per character of the last chunk decoded (0 when it
        #: decoded to none): a ``read(n)`` reads that many bytes for each
        #: character it lacks, as the built-in's (its ``b2cratio``).
        self._b2c = 0.0

    # -- state ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the file is closed (or detached)."""
        return self.buffer.closed

    def fileno(self) -> int:
        """The descriptor."""
        return self.buffer.fileno()

    def _sync_offset(self) -> None:
        self.buffer._sync_offset()

    def _check_open(self) -> None:
        """``ValueError`` once the file is closed (or detached)."""
        self.buffer._check_open()

    @property
    def newlines(self) -> Union[str, Tuple[str, ...], None]:
        """The line endings read so far with ``newline=None`` or ``""``
        (``"\\n"``, ``"\\r\\n"``, a tuple of several, or None), as the
        built-in text file's attribute: kept across seeks (the decoder's
        own are lost when it is reset), forgotten by a seek to the start or
        the end, as the built-in's."""
        return _nl_value(self._nl_seen | _nl_bits(getattr(self._decoder, "newlines", None)))

    async def readable(self) -> bool:
        """Whether the file was opened for reading (awaitable, as
        aiofiles' text file's ``readable``, ``writable`` and ``seekable``
        are; a binary file's is a plain method, as aiofiles' is)."""
        return self.buffer.readable()

    async def writable(self) -> bool:
        """Whether the file was opened for writing."""
        return await self.buffer.writable()

    def _check_seekable(self) -> None:
        """The built-in text file's error for ``tell`` and ``seek`` of a
        stream."""
        if self.buffer._stream:
            raise io.UnsupportedOperation("underlying stream is not seekable")

    async def seekable(self) -> bool:
        """Whether the file supports seeking."""
        return await self.buffer.seekable()

    async def isatty(self) -> bool:
        """Whether the descriptor is a terminal."""
        return await self.buffer.isatty()

    # -- decoding -----------------------------------------------------------------

    def _get_decoder(self) -> Any:
        if self._decoder is None:
            d: Any = codecs.getincrementaldecoder(self.encoding)(self.errors)
            if self._newline in (None, ""):
                d = io.IncrementalNewlineDecoder(d, translate=self._newline is None)
            self._decoder = d
        return self._decoder

    def _check_readable(self) -> None:
        """``UnsupportedOperation`` unless the file reads, in the built-in
        text file's words."""
        self.buffer._check_open()
        if not self.buffer._readable:
            raise io.UnsupportedOperation("not readable")

    def _check_writable(self) -> None:
        """As :meth:`_check_readable`, for writing."""
        self.buffer._check_open()
        if not self.buffer._writable:
            raise io.UnsupportedOperation("not writable")

    def _pending(self) -> str:
        return self._decoded[self._used:]

    def _pending_len(self) -> int:
        """How many characters are decoded and not yet returned."""
        return len(self._decoded) - self._used + self._ahead_len

    def _join_ahead(self) -> None:
        """Joins the pieces decoded ahead to ``_decoded`` (one copy)."""
        if self._ahead:
            self._decoded = "".join([self._decoded, *self._ahead])
            self._ahead.clear()
            self._ahead_len = 0

    async def _more(self, lacking: int = 0) -> bool:
        """Decodes one more chunk onto the pending text (a piece of
        ``_ahead``); False when that added nothing (the end of the file).
        The end is never remembered: a file another writer appends to has
        more to read on the next call, as the built-in text file does.
        With ``lacking`` (a ``read(n)``'s characters still to come), the
        chunk is the bytes they take by the last chunk's bytes per
        character (see :meth:`_chunk_for`)."""
        self._check_readable()
        await self._learn_the_start()
        dec = self._get_decoder()
        if self._snap is None:
            self._decoded, self._used = self._pending(), 0
        elif not self._ahead:
            self._drop_returned()
        if self._snap:
            _, last_start, last, _ = self._snap[-1]
            start = last_start + len(last)
        else:
            start = await self.buffer._position()
        state = dec.getstate()
        # At least as much as is pending, up to a piece: a line longer
        # than a chunk is read in chunks that double, and no decode holds
        # the loop's thread for more than a piece.
        want = self._chunk_for(lacking) if lacking else max(_CHUNK, self._pending_len())
        data = await self.buffer.read1(min(_PIECE, want))
        self._eof = not data
        try:
            text = dec.decode(data, final=self._eof)
        except (UnicodeError, ValueError):
            dec.setstate(state)
            return self._decode_to_the_error(state, start, data)
        self._add_chunk(state, start, data, text)
        return bool(data) or bool(text)

    def _chunk_for(self, lacking: int) -> int:
        """The bytes a ``read(n)`` reads for ``lacking`` characters, as the
        built-in's: ``lacking`` by the last chunk's bytes per character
        (at least one), and at least :data:`_CHUNK`."""
        return max(_CHUNK, int(max(self._b2c, 1.0) * lacking))

    def _add_chunk(self, state: Any, start: int, data: bytes, text: str) -> None:
        self._b2c = len(data) / len(text) if text else 0.0
        if self._snap is None:
            self._snap, self._gone, self._cp = [], 0, None
        self._snap.append((state, start, data, len(text)))
        if text:
            self._ahead.append(text)
            self._ahead_len += len(text)

    def _decode_to_the_error(self, state: Any, start: int, data: bytes) -> bool:
        """``data`` (read at ``start``, the decoder at ``state``) does not
        decode: decodes it as the built-in text file would have read it,
        a chunk of :data:`_CHUNK` bytes at a time. The chunks before the
        one that fails are kept (True), and the bytes from that one on are
        read again by the next call, so a line complete before the bad
        bytes is returned first, as the built-in's is. When the first
        chunk fails, it is consumed and its error raised, with the decoder
        as it was before it and the characters pending dropped, as the
        built-in's are (its ``readline`` loses the line it was making):
        the next call reads what follows, or, if the decoder holds the
        bytes at fault (a character cut short at the end of the file),
        meets the error again until a writer completes it."""
        dec = self._get_decoder()
        off = 0
        while True:
            piece = data[off:off + _CHUNK]
            last = off + len(piece) >= len(data)
            before = dec.getstate()
            try:
                text = dec.decode(piece, final=self._eof and last)
            except (UnicodeError, ValueError):
                dec.setstate(before)
                if off > 0:
                    self.buffer._unread(data[off:])
                    self._eof = False
                    return True
                self.buffer._unread(data[len(piece):])
                self._decoded = self._decoded[:self._used]
                self._ahead.clear()
                self._ahead_len = 0
                raise
            self._add_chunk(before, start + off, piece, text)
            off += len(piece)
            if last:
                return bool(data) or bool(text)

    def _replay_from(self) -> Tuple[int, int]:
        """Where ``tell`` replays the decoder from to find the byte offset of
        the next character: the index of a chunk, and the characters
        decoded from that chunk on before the next one. It is the chunk the
        next character comes from (at a chunk's end, that chunk), or an
        earlier one: the bytes of a character can start in a chunk before
        the one whose decoding returned it (a character cut between two
        reads, a ``\r`` held back to see whether ``\n`` follows), and
        those are never more than :data:`_HELD` bytes."""
        chunks = self._snap
        assert chunks
        used, c = self._used, 0
        while used > chunks[c][3] and c < len(chunks) - 1:
            used -= chunks[c][3]
            c += 1
        j, start = c, chunks[c][1]
        while j > 0 and start - chunks[j][1] < _HELD:
            j -= 1
            used += chunks[j][3]
        return j, used

    def _forget_returned_chunks(self) -> int:
        """Drops from ``_snap`` the chunks that ``tell`` will not replay
        (see :meth:`_replay_from`): those all returned, but for the last
        few bytes before the next character. Returns how many characters
        they had decoded to, for the caller to drop."""
        if not self._snap:
            return 0
        j, _ = self._replay_from()
        dropped = sum(n for _, _, _, n in self._snap[:j])
        del self._snap[:j]
        return dropped

    def _drop_returned(self) -> None:
        """Drops the chunks (and their characters) that ``tell`` will not
        replay (see :meth:`_forget_returned_chunks`)."""
        dropped = self._forget_returned_chunks()
        if dropped:
            self._decoded = self._decoded[dropped:]
            self._used -= dropped
            self._gone += dropped

    def _reset_decoding(self) -> None:
        if self._decoder is not None:
            self._nl_seen |= _nl_bits(getattr(self._decoder, "newlines", None))
            self._decoder.reset()
        self._decoded, self._used, self._snap, self._eof, self._cp = "", 0, None, False, None
        self._ahead.clear()
        self._ahead_len = 0

    def _mark(self) -> Any:
        """Where reading is (the binary file's, and the decoding's), for
        :meth:`_restore`."""
        dec = self._decoder
        snap = None if self._snap is None else list(self._snap)
        return (self.buffer._mark(), self._decoded, self._used, snap, self._gone, self._eof,
                dec, None if dec is None else dec.getstate(), self._b2c)

    def _restore(self, mark: Any) -> None:
        """Back to ``mark``, as if the reads since had not happened."""
        binary, self._decoded, self._used, snap, self._gone, self._eof, dec, state, self._b2c = mark
        self._snap = None if snap is None else list(snap)
        self._cp = None
        self.buffer._restore(binary)
        self._decoder = dec
        if dec is not None:
            dec.setstate(state)

    def _in_order(self) -> bool:
        return self.buffer._stream

    def _split_lines(self, data: str) -> List[str]:
        # (the line ends readline knows for the file's ``newline``: with
        # None, read() has translated them to "\n" already)
        nl = self._newline
        if nl in (None, "", "\n") and not any(c in data for c in _NOT_LINE_ENDS) and (nl != "\n" or "\r" not in data):
            # (str.splitlines, the fastest, where it cuts where readline does)
            return data.splitlines(True)
        if nl == "":
            return io.StringIO(data, newline="").readlines()
        return split_keeping_ends(data, "\n" if nl is None else nl)

    def _keep_error(self, e: BaseException) -> bool:
        # (kept by the bytes' file, whose next read, after the characters
        # decoded already, raises it)
        return self.buffer._keep_stream_error(e, True)

    def _consumes(self, e: BaseException) -> bool:
        # (a decoding error, which ``readline`` raised having consumed the
        # chunk at fault, as the built-in's: see `_decode_to_the_error`)
        return isinstance(e, UnicodeError)

    async def _skip_lines_before(self, e: BaseException) -> None:
        # The readline loop decodes a chunk of `_CHUNK` bytes at a time,
        # counted from the binary file's position, and fails in the chunk
        # of the bytes at fault (or the next: a character cut short); up
        # to the start of that chunk, one decode of the bytes gives the
        # decoder's state (and the line endings it saw) that the loop's
        # would. The characters pending are dropped: the loop would have
        # lost them with its lines.
        at = getattr(e, "start", None)
        if not isinstance(at, int):
            return
        # (`start` counts the bytes the decoder held before the rest too)
        skip = (at - _HELD) // _CHUNK * _CHUNK
        if skip <= 0:
            return
        mark = self._mark()
        dec = self._get_decoder()
        try:
            while skip > 0:
                data = await self.buffer.read(min(skip, _PIECE))
                if not data:
                    break
                dec.decode(data)
                skip -= len(data)
                if skip > 0:
                    await pause()  # (between two pieces: see _PIECE)
        except (UnicodeError, ValueError):
            self._restore(mark)  # (not as the loop's: it reads from the start)
            return
        except BaseException:
            self._restore(mark)
            raise
        self._decoded, self._used, self._snap, self._gone, self._cp = "", 0, None, 0, None
        self._ahead.clear()
        self._ahead_len = 0

    def _put_back(self, lines: List[str]) -> None:
        self._decoded = "".join(lines) + self._pending()
        self._used = 0
        self._cp = None  # (a stream's: its offsets are never asked for)

    def _take(self, n: int) -> str:
        out = self._decoded[self._used:self._used + n]
        self._used += len(out)
        count_copied(len(out))  # (characters, counted as bytes: see turns)
        return out

    # -- reading ----------------------------------------------------------------

    @one_at_a_time_taking_turns
    async def read(self, size: Optional[int] = -1) -> str:
        """Up to ``size`` characters (all of the rest when negative or
        None); ``""`` at end of file."""
        size = _size_arg(size)
        self._check_readable()
        if size < 0:
            parts: List[str] = []
            await self._decode_rest(parts.append)
            return "".join(parts)
        if self._pending_len() >= size:
            return self._take(size)
        mark = self._mark()
        since = 0  # (bytes decoded since the last turn of the loop)
        try:
            while self._pending_len() < size and await self._more(size - self._pending_len()):
                since += len(self._snap[-1][2]) if self._snap else 0
                if since >= _PIECE and self._pending_len() < size:
                    since = 0
                    await pause()  # (between two pieces: see _PIECE)
        except BaseException as e:
            # (cancelled between pieces, or failed: what was decoded stays
            # pending, for the next read; nothing was returned)
            self._join_ahead()
            if not isinstance(e, UnicodeError) or self.buffer._stream:
                raise
            failed = e
        else:
            return self._take_ahead(size)
        self._restore(mark)
        await self._fail_as_the_builtins_read(size, failed)

    async def _fail_as_the_builtins_read(self, size: int, e: UnicodeError) -> NoReturn:
        """Raises the decoding error of a ``read(size)`` that met bytes it
        cannot decode (``e``), from where that read started, as the
        built-in text file's ``read(size)`` does: it reads chunks of as
        many bytes as it lacks characters (see :meth:`_chunk_for`), and
        the chunk that fails is consumed with the characters that read had
        gathered, the decoder left as it was before that chunk; the next
        read starts after it. Not a stream's, which cannot be read again.
        If no chunk fails (the bytes changed meanwhile), ``e`` is raised
        with nothing moved."""
        mark = self._mark()
        await self._learn_the_start()
        dec = self._get_decoder()
        lacking = size - self._pending_len()
        try:
            while lacking > 0:
                data = await self.buffer.read1(self._chunk_for(lacking))
                state = dec.getstate()
                try:
                    text = dec.decode(data, final=not data)
                except UnicodeError:
                    dec.setstate(state)
                    self._decoded, self._used, self._snap, self._gone, self._cp = "", 0, None, 0, None
                    self._eof = False
                    raise
                if not data:
                    break
                self._b2c = len(data) / len(text) if text else 0.0
                lacking -= len(text)
        except UnicodeError:
            raise
        except BaseException:
            self._restore(mark)
            raise
        self._restore(mark)
        raise e

    async def _decode_rest(self, each: Callable[[str], None]) -> None:
        """Reads the rest of the file and decodes it (after the characters
        pending), giving each piece's characters to ``each``: a file that
        is not a stream is read and decoded in pieces of :data:`_PIECE`
        bytes, a turn of the event loop between two, so that no more than
        a piece of bytes is held (and freed) at once. Cancelled between
        two, it leaves the file as it was; a decoding error is the one
        decoding the rest at once raises (its positions are in the rest's
        bytes: the rest is read again, whole, to raise it), with the
        decoder as it was, as the built-in's; any other error leaves the
        rest read, as the built-in's."""
        self._check_readable()  # (the text file's error, before the binary file's)
        rest = self._pending()
        await self._learn_the_start()
        dec = self._get_decoder()
        mark = self.buffer._mark()
        stream = self.buffer._stream
        data = await (self.buffer.read() if stream else self.buffer.read(_PIECE))
        state = dec.getstate()
        reading = False  # (in a read of the bytes, not a decode)
        try:
            if rest:
                each(rest)
            while True:
                last = stream or len(data) < _PIECE
                each(dec.decode(data, final=last))
                if last:
                    break
                await pause()
                reading = True
                data = await self.buffer.read(_PIECE)
                reading = False
        except Exception as e:
            dec.setstate(state)
            if reading:
                # (the binary file's error: raised with nothing moved, as
                # when the first read raises it)
                self.buffer._restore(mark)
                raise
            if not stream:
                # (the whole rest, read as the built-in's read() reads it)
                self.buffer._restore(mark)
                data = await self.buffer.read()
            if isinstance(e, (UnicodeError, ValueError)):
                dec.decode(data, final=True)  # (the error, as for the whole)
            raise
        except BaseException:
            dec.setstate(state)
            if not stream:
                self.buffer._restore(mark)  # (cancelled between pieces: nothing moved)
            raise
        # Decoded to the end: the decoder has no state left, but keeps
        # the line endings it saw (`newlines`).
        self._decoded, self._used, self._snap, self._eof, self._cp = "", 0, None, False, None

    async def _rest_in_lines(self) -> List[str]:
        lines: List[str] = []
        carry: List[str] = []  # (the characters of a line not yet ended)

        def split(text: str) -> None:
            if not text:
                return
            if carry and (not self._may_end_a_line(text) or (self._newline == "\r\n" and carry[-1][-1] == "\r")):
                # (a long line, joined once at its end; or a \r whose \n
                # may start this piece: the two are split together)
                carry.append(text)
                if not self._may_end_a_line(text):
                    return
                text = "".join(carry)
                carry.clear()
            got = self._split_lines(text)
            if carry:
                got[0] = "".join([*carry, got[0]])
                carry.clear()
            if not self._ends_a_line(got[-1]):
                carry.append(got.pop())
            lines.extend(got)

        await self._decode_rest(split)
        if carry:
            lines.append("".join(carry))
        return lines

    def _ends_a_line(self, line: str) -> bool:
        """Whether ``line``, the last one ``_split_lines`` cut from the
        characters decoded so far, is ended, so that none decoded after it
        joins it. (With ``newline=""`` a ``\\r`` ends it: the newline
        decoder holds a last ``\\r`` back until it sees what follows.)"""
        nl = self._newline
        if nl == "":
            return line.endswith(("\n", "\r"))
        return line.endswith("\n" if nl is None else nl)

    def _take_ahead(self, n: int) -> str:
        """:meth:`_take` of ``n`` characters with pieces pending in
        ``_ahead``: one join makes the characters returned, and only those
        of the chunks ``tell`` may replay are kept (see
        :meth:`_drop_returned`), so a long read copies each character once
        and keeps no more than a few pieces."""
        parts = [self._decoded[self._used:], *self._ahead]
        total = sum(map(len, parts))
        n = min(n, total)
        out: List[str] = []
        got = 0
        for part in parts:
            if got + len(part) > n:
                out.append(part[:n - got])
                break
            out.append(part)
            got += len(part)
        text = "".join(out)
        count_copied(len(text))  # (characters, counted as bytes: see turns)
        # Drops the chunks all returned; keeps the characters of the rest.
        logical = len(self._decoded) + self._ahead_len
        self._used += n
        dropped = self._forget_returned_chunks()
        self._decoded = _last_chars([self._decoded, *self._ahead], logical - dropped)
        self._ahead.clear()
        self._ahead_len = 0
        self._used -= dropped
        self._gone += dropped
        return text

    def _line_end(self, text: str, start: int) -> int:
        """The index just past the first line ending in ``text`` at or
        after ``start``, or -1."""
        nl = self._newline
        if nl is None or nl == "\n":
            i = text.find("\n", start)
            return -1 if i < 0 else i + 1
        if nl == "":
            ends = [(i, len(e)) for e in ("\r\n", "\r", "\n") if (i := text.find(e, start)) >= 0]
            if not ends:
                return -1
            i, n = min(ends, key=lambda e: (e[0], -e[1]))
            if text[i] == "\r" and n == 1 and i + 1 == len(text) and not self._eof:
                return -1  # a \r at the end: wait for a \n that may follow
            return i + n
        i = text.find(nl, start)
        return -1 if i < 0 else i + len(nl)

    async def readline(self, size: int = -1) -> str:
        """One line with its ending (``""`` at end of file); at most
        ``size`` characters when ``size`` is given."""
        # The common case, served inline: a whole line in the text decoded
        # ahead, while no other call on the file is in progress (taking the
        # queue's `free` item makes sure of that, from any thread; nothing
        # here awaits) and the thread's turn of the event loop is not due
        # (see `turns` in the core; a call at its turn goes through the
        # queue, which takes it). Counted as the queue counts a call.
        free = self._free
        if size == -1 and type(size) is int:
            try:
                free.pop()
            except IndexError:
                pass  # taken meanwhile by another thread: `_readline` says so
            else:
                try:
                    if self.buffer._inline_read and turn_count() < TURN_BUDGET - 1:
                        used = self._used
                        end = self._line_end(self._decoded, used)
                        if end >= 0:
                            turn_due(end - used)  # (not due: counts the call and its characters)
                            self._used = end
                            return self._decoded[used:end]
                finally:
                    free.append(None)
        line: str = await self._readline(size)
        return line

    @one_at_a_time_taking_turns
    async def _readline(self, size: int) -> str:
        limit = _count_arg(size)
        self._check_readable()
        scanned = 0  # (pending characters searched already)
        while True:
            # Searched where they are, never copied: after a long line,
            # much may be pending, and every line would copy it again.
            base = self._used
            pending = len(self._decoded) - base
            end = self._line_end(self._decoded, base + max(scanned - 1, 0))
            if end >= 0 or (0 <= limit <= pending):
                n = end - base if end >= 0 else limit
                return self._take(n if limit < 0 else min(n, limit))
            scanned = pending
            try:
                more = await self._more_of_a_line(limit, pending)
            except OSError as e:
                # (a stream's error after characters of the line: they
                # come first, the error with the next read)
                if pending and self.buffer._keep_stream_error(e, True):
                    return self._take(pending)
                raise
            if not more:
                return self._take(len(self._decoded) - self._used)

    def _may_end_a_line(self, part: str) -> bool:
        """Whether ``part`` holds a character that can end a line."""
        nl = self._newline
        if nl == "":
            return "\n" in part or "\r" in part
        return ("\r" if nl == "\r" else "\n") in part

    async def _more_of_a_line(self, limit: int, pending: int) -> bool:
        """Decodes chunks (:meth:`_more`) until one may end the line, the
        characters pending reach ``limit`` (when not negative), or those
        decoded outweigh the ``pending`` ones (so a long line is joined a
        number of times that grows with the log of its length), then joins
        them to the pending text; False at the end of the file."""
        held_cr = self._decoded.endswith("\r")  # (its \n may come next)
        try:
            while True:
                had = len(self._ahead)
                more = await self._more()
                if not more or held_cr or self._ahead_len >= pending or 0 <= limit <= pending + self._ahead_len:
                    return more
                # (one call may add several pieces: see _decode_to_the_error)
                if any(self._may_end_a_line(part) for part in self._ahead[had:]):
                    return more
        finally:
            self._join_ahead()

    # -- writing ----------------------------------------------------------------

    @one_at_a_time_kept
    async def write(self, s: str) -> int:
        """Writes ``s`` (newlines translated, then encoded); the number of
        characters."""
        if not isinstance(s, str):  # (the argument first, as the built-in's)
            raise _not_str(s)
        self._check_writable()
        at_start = await self._start_writing()
        await self._write_encoded(self._encode(s), at_start, "\n" in s or "\r" in s)
        return len(s)

    async def _start_writing(self) -> bool:
        """Gets ready to encode what a write is given: the text read ahead
        dropped, the encoder made if there is none yet. Whether the bytes
        encoded next are the file's first (a BOM codec writes its BOM)."""
        if self._decoded or self._snap is not None:
            # As the built-in text file does, decoded text read ahead is
            # dropped and the write lands at the binary file's position,
            # which is past that read-ahead (seek(tell()) first to write
            # where the reader is).
            self._reset_decoding()
        self._forget_newlines()
        if self._encoder is not None:
            return False
        self._encoder = codecs.getincrementalencoder(self.encoding)(self.errors)
        # As the built-in text file: a BOM only at the file's start
        # (appending to a UTF-16 file adds none).
        if await self.buffer._position() != 0:
            self._encoder.setstate(0)
            return False
        return True

    def _continue_stream(self) -> None:
        """Writes on as past the stream's start: no BOM (for a file made
        for one write to a stream that others wrote before it, and whose
        start cannot be asked for: a pipe, a terminal)."""
        if self._encoder is None:
            self._encoder = codecs.getincrementalencoder(self.encoding)(self.errors)
        self._encoder.setstate(0)

    def _encode(self, s: str) -> bytes:
        """``s`` with its newlines translated, encoded by the file's encoder
        (made by :meth:`_start_writing`)."""
        nl = self._newline
        if nl is None and os.linesep != "\n":
            s = s.replace("\n", os.linesep)
        elif nl in ("\r", "\r\n"):
            s = s.replace("\n", nl)
        data: bytes = self._encoder.encode(s)
        return data

    async def _write_encoded(self, data: bytes, at_start: bool, line_end: bool) -> None:
        """Writes the bytes :meth:`_encode` made (``at_start``: the file's
        first), flushing them if the text had a line end and the file is
        line buffered."""
        learn = at_start and data and self.buffer._readable and codecs.lookup(self.encoding).name in _BOM_CODECS
        if learn:
            # Past the BOM encoded: what is read next is decoded as the rest
            # of the file, with the byte order the BOM gives. Set before the
            # write first yields, so that a seek made meanwhile (placed
            # after this write) sets the text state last.
            self._past_the_start()
        await self.buffer.write(data)
        if learn:
            await self.buffer._flush_writes()  # (the BOM there to be looked at)
        if self.line_buffering and line_end:
            await self.buffer.flush()

    @one_at_a_time_kept
    async def writelines(self, lines: Iterable[str]) -> None:
        """Writes each string of ``lines`` (no newlines are added), as one
        write: a cancelled call writes all of them, never a part of the
        list. A string that is not a ``str`` or cannot be encoded raises
        after the strings before it are written, with the error writing it
        alone gives, as the built-in file's ``writelines`` (a ``write`` per
        string) does: the bytes before it land as the built-in's would, with
        the BOM and the newlines translated, and its own bytes none."""
        self._check_open()  # (first, as the built-in's)
        strings = list(lines)
        at_start: Optional[bool] = None
        try:
            text = "".join(strings)
        except TypeError:
            text = None  # (an item that is not a str: found below, string by string)
        if text:
            # One join and one encoding for the whole list (an encoder's
            # bytes are the same in one call as in one per string); a string
            # that cannot be encoded is found again below, string by string,
            # with the encoder as it was (a BOM not yet written stays due).
            self._check_writable()
            at_start = await self._start_writing()
            assert self._encoder is not None
            state = self._encoder.getstate()
            try:
                data = self._encode(text)
            except UnicodeEncodeError:
                self._encoder.setstate(state)
            else:
                await self._write_encoded(data, at_start, "\n" in text or "\r" in text)
                return
        encoded: List[bytes] = []
        bad: Optional[Exception] = None
        for line in strings:
            if not isinstance(line, str):
                bad = _not_str(line)
                break
            if at_start is None:
                self._check_writable()
                at_start = await self._start_writing()
            try:
                encoded.append(self._encode(line))
            except UnicodeEncodeError as e:
                bad = e
                break
        if encoded:
            assert at_start is not None
            done = strings[:len(encoded)]
            await self._write_encoded(b"".join(encoded), at_start, any("\n" in s or "\r" in s for s in done))
        if bad is not None:
            raise bad

    @one_at_a_time
    async def flush(self) -> None:
        """Writes what is buffered to the file."""
        await self.buffer.flush()

    @one_at_a_time
    async def fsync(self) -> None:
        """Flushes, then makes the file's data and metadata durable."""
        await self.buffer.fsync()

    # -- positioning ----------------------------------------------------------

    def _bytes_from(self, offset: int, most: int) -> Tuple[bytes, int]:
        """Up to ``most`` of the bytes kept from byte ``offset`` on, and how
        many are kept from there in all."""
        assert self._snap
        parts: List[bytes] = []
        got = total = 0
        for _, start, data, _ in self._snap:
            end = start + len(data)
            if end <= offset:
                continue
            piece = data[max(offset - start, 0):]
            total += len(piece)
            if got < most:
                parts.append(piece[:most - got])
                got += len(parts[-1])
        return b"".join(parts), total

    def _tell_bytes(self) -> int:
        """The byte offset of the next character to return: the decoder is
        replayed over the bytes read ahead, from a state it had before
        them (the last offset found, else a chunk's start), to find how
        many of them made the characters returned. Only as many bytes as
        those characters can take are replayed, so a ``tell`` after each
        line costs the line, not what was read ahead."""
        if not self._snap:
            return self.buffer._pos  # (nothing decoded since the reset)
        returned = self._gone + self._used
        cp = self._cp
        if cp is not None and cp[0] <= returned and cp[1] >= self._snap[0][1]:
            used, start, state = returned - cp[0], cp[1], cp[2]
        else:
            j, used = self._replay_from()
            state, start = self._snap[j][0], self._snap[j][1]
        fed, kept = self._bytes_from(start, used * _CHAR_BYTES + 2 * _HELD)
        dec = self._get_decoder()
        saved = dec.getstate()
        replay = _Replay(self, dec, state, fed, kept, used)
        try:
            lo = self._replayed_offset(replay, returned, start)
        finally:
            dec.setstate(saved)
        return self._past_the_bom(start + lo)

    def _replayed_offset(self, replay: "_Replay", returned: int, start: int) -> int:
        """How many of the replayed bytes (from byte ``start``) made the
        characters returned; keeps the offset found in ``_cp`` when it is
        exact, for the next ``tell`` to replay from."""
        used, dec = replay.used, replay.dec
        if len(replay.fed) < replay.kept and replay.chars(len(replay.fed), True) < used:
            # Bytes that make no character (`errors="ignore"`) took
            # more than the characters could: all of them, then.
            replay.fed, _ = self._bytes_from(start, replay.kept)
        lo = replay.fewest(False)
        n = replay.chars(lo)
        exact = n == used and not replay.holds_cr()
        if n > used or (n == used and replay.holds_cr()):
            lo = replay.offset_counting_held_cr()
        if exact:
            replay.chars(lo)
            held = len(dec.getstate()[0])
            if held:
                # The character came out only when the bytes after it
                # arrived (a codec that looks ahead, as Big5's or
                # EUC-JP's replacement for a bad lead byte): those
                # the decoder holds are the next character's.
                lo -= held
            else:
                self._cp = (returned, start + lo, dec.getstate())
        return lo

    def _past_the_bom(self, offset: int) -> int:
        """``offset``, or the end of the BOM the file starts with when
        ``offset`` is inside it: that is where the built-in text file's
        ``tell`` is once it has read the BOM and returned no character (at
        the end of a file holding only its BOM), so that ``truncate(tell())``
        or a write there keeps the BOM. Short of the end, with nothing
        returned (a read cancelled before it returned, having decoded the
        BOM or more), the file is where the built-in's is before any read:
        at ``offset``."""
        boms = _BOMS.get(codecs.lookup(self.encoding).name, ())
        if not boms or offset >= 4 or not self._snap or self._snap[0][1] != 0:
            return offset
        if self._pending_len() or not self._eof:
            return offset
        head, _ = self._bytes_from(0, 4)
        for bom in boms:
            if head.startswith(bom) and offset < len(bom):
                return len(bom)
        return offset

    @one_at_a_time_taking_turns
    async def tell(self) -> int:
        """The byte offset of the next character (see the module notes)."""
        self.buffer._check_open()
        self._check_seekable()
        # Flushed first, as the built-in text file's tell: in append mode
        # the written text then ends at the file's end, where tell is.
        await self.buffer._flush_writes()
        if self._snap is None:
            return await self.buffer.tell()
        if self._stateful and not self._at_line_start():
            raise OSError(f"can't reconstruct logical file position: the {self.encoding} decoder keeps a state "
                          "between characters that a byte offset cannot hold; tell() works at a line start")
        return self._tell_bytes()

    def _forget_newlines(self) -> None:
        """Forgets the line endings seen (``newlines``), as the built-in's
        write does by resetting its decoder; the decoder's state stays."""
        self._nl_seen = 0
        dec = self._decoder
        if dec is not None and getattr(dec, "newlines", None) is not None:
            state = dec.getstate()
            dec.reset()
            dec.setstate(state)

    def _at_line_start(self) -> bool:
        """Whether the next character to return starts a line (the last one
        returned ended one; unknown when its chunk was dropped: not)."""
        if self._used == 0:
            return self._gone == 0  # (the start of what was decoded since the reset)
        last = self._decoded[self._used - 1]
        return last == "\n" or (last == "\r" and self._newline in ("", "\r"))

    @one_at_a_time_placing(_seek_places, takes_turns=True)
    async def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Moves to ``offset`` (a value from :meth:`tell`, or 0), or to the
        end with ``seek(0, os.SEEK_END)``; ``seek(0, os.SEEK_CUR)`` is
        ``seek(tell())``, as on the built-in text file: it moves the file
        to where the reader is, so that a write lands there.

        Once made, the seek keeps its place in the file's order, as a write
        does (see `one_at_a_time_placing`): cancelled while it waits for its
        turn, it still runs, and the writes made behind it land where it
        leaves the position. Outside append mode a seek from the start or
        the end sets the text state and places the binary file's seek
        before the call first yields, so that writes made behind it join
        it, placed at its offset; the decoder learns the file's BOM (a read
        of its first bytes) only when it next decodes."""
        # The built-in text file's order: whence's type, closed, whence's
        # value, then the offset.
        whence = _int_arg(whence, "whence")
        if whence not in _C_INT:
            raise OverflowError("Python int too large to convert to C int")  # (the built-in's, with the type)
        self.buffer._check_open()
        if whence not in (os.SEEK_SET, os.SEEK_CUR, os.SEEK_END):
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        offset = _int_arg(offset, "offset")
        self._check_seekable()
        if whence == os.SEEK_CUR:
            if offset != 0:
                raise io.UnsupportedOperation("can't do nonzero cur-relative seeks")
            offset, whence = await self.tell(), os.SEEK_SET
        if whence == os.SEEK_END and offset != 0:
            raise io.UnsupportedOperation("can't do nonzero end-relative seeks")
        if whence == os.SEEK_SET and offset < 0:
            raise ValueError(f"negative seek position {offset}")
        if offset > _MAX_OFFSET:
            # No file offset: the built-in's cookie past 2**63 - 1 is refused
            # by the file system's lseek.
            raise OSError(errno.EINVAL, f"offset: {offset} is past the largest file offset (2**63 - 1)")
        # The text state is set before the binary file's seek first yields
        # (its own seek is placed by then: writes joining it meanwhile
        # encode as after the seek); put back if the seek is refused.
        before = self._text_state()
        self._reset_decoding()
        self._flags_due = whence == os.SEEK_END or offset > 0
        if whence == os.SEEK_END or offset == 0:
            self._nl_seen = 0  # (as the built-in's seek, which resets its decoder there)
            self._encoder = None  # (the next write asks the position whether it writes a BOM)
        else:
            self._past_the_start()
        mine = self._encoder
        try:
            pos: int = await self.buffer.seek(offset, whence)
        except OSError:
            self._put_text_state(before, mine)  # (refused: nothing has moved)
            raise
        if pos > 0 and self._encoder is None:
            self._past_the_start()
        return pos

    def _text_state(self) -> Tuple[Any, ...]:
        """What a seek changes of the text layer, for :meth:`_put_text_state`."""
        dec = self._decoder
        return (self._decoded, self._used, self._snap, self._eof, self._cp, self._nl_seen, self._encoder,
                self._flags_due, dec, None if dec is None else dec.getstate())

    def _put_text_state(self, state: Tuple[Any, ...], mine: Any) -> None:
        """Back to ``state`` after a refused seek, unless a write made behind
        the seek has used the text layer since (it made an encoder other than
        ``mine``, the seek's, which then stays)."""
        if self._decoded or self._snap is not None or self._encoder is not mine:
            return
        (self._decoded, self._used, self._snap, self._eof, self._cp, self._nl_seen, self._encoder,
         self._flags_due, dec, dec_state) = state
        self._decoder = dec
        if dec is not None:
            dec.setstate(dec_state)

    def _past_the_start(self) -> None:
        """Sets the encoder as it is past the file's first bytes, as the
        built-in text file's seek does (it writes no new BOM), and has the
        decoder learn the byte order the file's BOM gives before it next
        decodes (:meth:`_learn_the_start`)."""
        self._encoder = codecs.getincrementalencoder(self.encoding)(self.errors)
        self._encoder.setstate(0)
        self._flags_due = True

    async def _learn_the_start(self) -> None:
        """Sets the decoder as it is past the file's first bytes when a seek
        (or a BOM written) left it due and the position is past them: a
        UTF-16 or UTF-32 decoder then knows the byte order its BOM gave (it
        would otherwise ask for a BOM in the middle of the file)."""
        if not self._flags_due:
            return
        self._flags_due = False
        if not self.buffer._readable or await self.buffer._position() == 0:
            return
        dec = self._get_decoder()
        if self._stateful:
            # (a codec with shift states has none where a line starts, the
            # only place `tell` gives: whatever the file's first bytes
            # shift to is not in force there)
            dec.reset()
            return
        if self._start_flags is None:
            head = await self.buffer._pread(4, 0)  # the BOM, if any
            dec.reset()
            try:
                dec.decode(head)
            except (UnicodeError, ValueError, TypeError):
                # (bytes the codec refuses past the BOM, which an error
                # handler made for encoding, as "xmlcharrefreplace",
                # refuses with TypeError: the flags are known all the same)
                pass
            flags = dec.getstate()[1]
            dec.reset()
            if len(head) == 4:
                # Kept once the file is long enough to have said: a
                # shorter one (empty, in "w+") may be given its BOM yet.
                self._start_flags = flags
        else:
            flags = self._start_flags
        if isinstance(dec, io.IncrementalNewlineDecoder):
            flags &= ~1  # no \r pending
        dec.setstate((b"", flags))

    @one_at_a_time_placing(_truncate_places)
    async def truncate(self, size: Optional[int] = None) -> int:
        """Cuts the file to ``size`` bytes (the position by default). As a
        seek, it keeps its place in the file's order once made: with a size,
        or with no text read ahead, the binary file's ``truncate`` (which
        flushes first) is placed before the call first yields."""
        if size is None and (self._snap is not None or self.buffer._stream):
            await self.buffer.flush()
            size = await self.tell()
        return await self.buffer.truncate(size)

    # -- closing ----------------------------------------------------------------

    async def close(self) -> None:
        """Flushes and closes the file (see :meth:`AsyncFile.close`; the
        binary file's call takes the queue)."""
        await self.buffer.close()

    def detach(self) -> io.BufferedIOBase:
        """Hands the descriptor back as a synchronous binary buffered file
        at this file's position; see :meth:`AsyncFile.detach`."""
        def back_to_the_characters_held() -> None:
            if self._snap is not None:
                self.buffer._pos = self._tell_bytes()
                self.buffer._drop_read_ahead()

        return self.buffer._buffered(self.buffer._detach(back_to_the_characters_held))

    async def __aenter__(self) -> "AsyncTextFile":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class _Replay:
    """The decoder replayed from a state it had (``state``) over the bytes
    kept from there (``fed``, of ``kept`` in all), to find how many of them
    made the ``used`` characters returned since (see ``_tell_bytes``)."""

    def __init__(self, text: "AsyncTextFile", dec: Any, state: Any, fed: bytes, kept: int, used: int) -> None:
        self.text, self.dec, self.state = text, dec, state
        self.fed, self.kept, self.used = fed, kept, used
        #: Where in the text file's ``_decoded`` the replay's characters start.
        self.base = text._used - used

    def chars(self, k: int, held_cr: bool = False) -> int:
        """How many characters the first ``k`` bytes decode to (``held_cr``:
        counting a \\r the decoder holds back)."""
        dec = self.dec
        dec.setstate(self.state)
        n = len(dec.decode(self.fed[:k], final=self.text._eof and k == self.kept))
        if held_cr and self.holds_cr():
            n += 1  # a \r the decoder holds back, to see whether \n follows
        return n

    def fewest(self, held_cr: bool) -> int:
        """The fewest bytes that decode to ``used`` characters."""
        lo, hi = 0, len(self.fed)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.chars(mid, held_cr) >= self.used:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def holds_cr(self) -> bool:
        """Whether the decoder holds back a \\r."""
        dec = self.dec
        return isinstance(dec, io.IncrementalNewlineDecoder) and bool(dec.getstate()[1] & 1)

    def offset_counting_held_cr(self) -> int:
        """The offset of the characters returned when decoding to the fewest
        bytes gives more of them, or holds a \\r back."""
        # A line ended by a lone \r is returned only once the next
        # character is decoded: the bytes that made it are not
        # consumed (and when that character is another \r, the
        # decoder holds it back in turn, with the characters
        # returned complete before it). Counting the held \r finds
        # the line's end.
        lo = self.fewest(True)
        if self.chars(lo, True) > self.used:
            # Bytes that made no character (an error handler's
            # replacement for a cut sequence) came out only with
            # the next one: the offset is the last one before
            # which decoding to the end gives characters all
            # returned. (A replacement of several characters
            # returned in part, as `backslashreplace`'s `\xe2`,
            # is read again whole: no byte offset lies inside it.)
            near = range(lo - 1, max(lo - _HELD, 0) - 1, -1)
            found = [k for k in near if self.decodes_within_returned(k, True)]
            found = found or [k for k in near if self.decodes_within_returned(k, False)][:1]
            if found:
                lo = found[0]
        return lo

    def decodes_within_returned(self, k: int, whole: bool) -> bool:
        """Whether decoding to byte ``k`` gives characters all returned
        (``whole``: exactly those returned, and decoding on from ``k``
        after a seek gives those that follow them: codecs that look
        ahead, as GB18030, give one replacement for more bytes)."""
        dec, state, fed, text = self.dec, self.state, self.fed, self.text
        dec.setstate(state)
        try:
            got = dec.decode(fed[:k], final=True)
        except (UnicodeError, ValueError):
            return False
        if not whole:
            return text._decoded.startswith(got, self.base, text._used)
        if self.base + len(got) != text._used or not text._decoded.startswith(got, self.base):
            return False
        flags = state[1] & ~1 if isinstance(dec, io.IncrementalNewlineDecoder) else state[1]
        dec.setstate((b"", flags))  # (as after a seek there)
        try:
            after = dec.decode(fed[k:k + 4 * _HELD])
        except (UnicodeError, ValueError):
            return False
        return text._decoded.startswith(after, text._used)
