"""Incremental decoder for ``text/event-stream`` bytes (server-sent events).

Follows the WHATWG HTML "Server-sent events" event stream interpretation
(https://html.spec.whatwg.org/multipage/server-sent-events.html):

- the stream is UTF-8 (invalid sequences become U+FFFD; a leading BOM is dropped);
- lines end with ``\\r\\n``, ``\\n`` or ``\\r``;
- a line starting with ``:`` is a comment and is ignored;
- ``field: value`` lines set ``event`` and ``data`` (one space after the colon is
  stripped); ``id``, ``retry`` and unknown fields are ignored;
- a blank line dispatches the pending event, but only if it has at least one
  ``data`` line; a block without data lines dispatches nothing;
- at end of stream an event not closed by a blank line is discarded.

Chunk boundaries may fall anywhere: mid-line, inside a multi-byte UTF-8 sequence,
or between the ``\\r`` and ``\\n`` of a line end. Line splitting
(:class:`LineSplitter`) sits behind an incremental UTF-8 decoder. Both are local:
``httpx_sse`` keeps its line decoder in a private module, and its ``SSEDecoder``
dispatches blocks without data lines and keeps re-dispatching after an ``id`` line.

:func:`looks_like_sse` tells an event stream from a JSON body by its first bytes, for
upstreams that send a stream under another content type.
"""

from __future__ import annotations

import codecs

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
"""Default bound on one pending SSE event (16 MiB)."""


#: How an event stream can begin: a field line or a comment (after an optional BOM).
_SSE_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":", b"data\n", b"data\r")


def looks_like_sse(prefix: bytes) -> bool:
    """Whether the first bytes of a body begin an SSE stream (a ``data``/``event``/
    ``id``/``retry`` field or a comment line) rather than, say, a JSON document."""
    return prefix.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n").startswith(_SSE_STARTS)


class LineSplitter:
    """Split text arriving in pieces into lines ended by ``\\r\\n``, ``\\n`` or
    ``\\r`` (only those: unlike :meth:`str.splitlines`). ``buffer`` holds the pieces of
    the unterminated last line; a trailing ``\\r`` is held back until the next piece
    shows whether a ``\\n`` follows."""

    __slots__ = ("buffer", "_trailing_cr")

    def __init__(self) -> None:
        self.buffer: list[str] = []
        self._trailing_cr = False

    def decode(self, text: str) -> list[str]:
        """The lines completed by ``text``, without their line ends."""
        if self._trailing_cr:
            text = "\r" + text
            self._trailing_cr = False
        if text.endswith("\r"):
            self._trailing_cr = True
            text = text[:-1]
        if not text:
            return []
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        elif "\n" not in text:
            self.buffer.append(text)  # no line end: joined once the line completes
            return []
        lines = text.split("\n")
        if self.buffer:
            lines[0] = "".join(self.buffer) + lines[0]
            self.buffer = []
        last = lines.pop()  # "" when text ended with a line end
        if last:
            self.buffer = [last]
        return lines

    @property
    def idle(self) -> bool:
        """No part of a line is held back."""
        return not self.buffer and not self._trailing_cr

    def flush(self) -> list[str]:
        """End of input: the unterminated last line, if any (``[]`` otherwise)."""
        if not self.buffer and not self._trailing_cr:
            return []
        lines = ["".join(self.buffer)]
        self.buffer = []
        self._trailing_cr = False
        return lines


class SSEEventTooLarge(Exception):
    """A pending SSE event grew past the decoder's ``max_event_bytes``.

    Raised by :meth:`SSEDecoder.feed`; the decoder is unusable afterwards.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"SSE event exceeds {limit} bytes without a terminating blank line "
            f"(at least {size} pending)"
        )
        self.size = size
        self.limit = limit


class SSEDecoder:
    """Turn a byte stream into completed ``(event, data)`` pairs.

    ``event`` is the SSE ``event:`` field, ``""`` when absent; ``data`` is the
    event's ``data:`` lines joined by ``"\\n"``.

    ``max_event_bytes`` bounds memory: when the event being assembled (its data
    lines plus the unterminated line) exceeds it, :meth:`feed` raises
    :class:`SSEEventTooLarge`. Size is counted in decoded characters, which is the
    byte count for the ASCII JSON providers send and never more than it.
    """

    __slots__ = (
        "_max",
        "_utf8",
        "_utf8_pending",
        "_at_start",
        "_lines",
        "_event",
        "_data",
        "_data_size",
        "_partial",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._utf8_pending = False  # the UTF-8 decoder holds a partial sequence
        self._at_start = True  # no text decoded yet: a BOM may come
        self._lines = LineSplitter()
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0
        self._partial = 0  # characters in the unterminated line held by _lines

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """Decode one chunk; return the events it completed, in order.

        Raises :class:`SSEEventTooLarge` when the pending event passes the bound.
        """
        if chunk[:6] == b"data: " and chunk.find(b"\n") == len(chunk) - 2 and chunk[-1] == 10 \
                and b"\r" not in chunk and chunk.isascii() and len(chunk) - 7 <= self._max \
                and not self._data and not self._event and not self._at_start and not self._utf8_pending \
                and self._lines.idle:  # the usual chunk: one whole "data: ..." event, nothing pending
            return [("", chunk[6:-2].decode("ascii"))]
        if not self._utf8_pending and chunk.isascii():
            text = chunk.decode("ascii")
        else:
            text = self._utf8.decode(chunk)
            self._utf8_pending = bool(self._utf8.getstate()[0])
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            if text[0] == "\ufeff":
                text = text[1:]
                if not text:
                    return []
        lines = self._lines.decode(text)
        if not lines:
            self._partial += len(text)
            self._check(self._partial)
            return []
        buffered = self._lines.buffer
        self._partial = len(buffered[0]) if buffered else 0
        events = self._take(lines)
        self._check(self._partial)
        return events

    def flush(self) -> list[tuple[str, str]]:
        """End of stream: finish a line held back by a trailing ``\\r`` and return
        any event that completes; discard an unterminated event and reset."""
        events = self._take(self._lines.flush())
        self._utf8.reset()
        self._utf8_pending = False
        self._at_start = True
        self._event = ""
        self._data = []
        self._data_size = 0
        self._partial = 0
        return events

    def _take(self, lines: list[str]) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append((self._event, "\n".join(self._data)))
                    self._data = []
                    self._data_size = 0
                self._event = ""
            elif line[0] != ":":
                name, _, value = line.partition(":")
                if value[:1] == " ":
                    value = value[1:]
                if name == "data":
                    self._data.append(value)
                    self._data_size += len(value) + 1
                    self._check(0)
                elif name == "event":
                    self._event = value
        return events

    def _check(self, partial: int) -> None:
        size = self._data_size + partial
        if size > self._max:
            raise SSEEventTooLarge(size, self._max)


def block_events(block: bytes) -> list[tuple[str, str]]:
    """The ``(event, data)`` pairs of ``block``: whole events, bytes that end with a
    blank line (or are read as if one followed), decoded as :class:`SSEDecoder` would
    decode them (UTF-8 with U+FFFD for invalid bytes, any line ending, comments and
    blocks without ``data`` lines dispatch nothing). A leading BOM is not removed."""
    text = block.decode("ascii") if block.isascii() else block.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    events: list[tuple[str, str]] = []
    event = ""
    data: list[str] = []
    for line in text.split("\n"):
        if not line:
            if data:
                events.append((event, "\n".join(data)))
                data = []
            event = ""
        elif line[0] != ":":
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
    if data:  # read as if a blank line followed
        events.append((event, "\n".join(data)))
    return events


class SSEFramer:
    """One relayed event stream, framed once: the bytes of an incomplete trailing
    event are held back, and each run of whole events is decoded once.

    :meth:`feed` returns, for one chunk, the bytes that now end at an event boundary
    (a blank line; relay them) and the events they complete, decoded as
    :class:`SSEDecoder` decodes them (a leading BOM dropped). An event is dispatched as
    soon as its blank line is in, also when that line ends with a lone ``\\r`` (the
    decoder waits to see whether a ``\\n`` follows). :meth:`close` reads the held
    bytes at the end of the stream as if a blank line followed them.
    """

    __slots__ = ("_held", "_started", "max_event_bytes", "overflow")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._held = bytearray()  # an incomplete trailing event
        self._started = False  # the first bytes (where a BOM may be) were decoded
        self.max_event_bytes = max_event_bytes
        #: Why the stream must end, set by :meth:`feed`: more than ``max_event_bytes``
        #: held without an event boundary, or an event whose data is larger.
        self.overflow: str | None = None

    @property
    def held(self) -> int:
        """How many bytes are held back (an event without its blank line yet)."""
        return len(self._held)

    def feed(self, chunk: bytes) -> tuple[bytes, list[tuple[str, str]]]:
        """``(whole, events)`` for one chunk: the bytes up to the last event boundary so
        far (held bytes first) and the events those bytes complete, in order. Check
        :attr:`overflow` afterwards."""
        if not self._held and chunk.endswith(b"\n\n") and len(chunk) <= self.max_event_bytes:
            if chunk.startswith(b"data: ") and chunk.find(b"\n") == len(chunk) - 2 and self._started \
                    and b"\r" not in chunk and chunk.isascii():
                return chunk, [("", chunk[6:-2].decode("ascii"))]  # the usual chunk: one data line
            return chunk, self._events(chunk)  # whole events
        held = self._held
        scan_from = len(held) - 1 if held else 0
        held += chunk
        cut = event_boundary(held, scan_from)
        if len(held) - cut > self.max_event_bytes:  # e.g. endless comment lines, no blank line
            self.overflow = f"Upstream sent over {self.max_event_bytes} bytes without ending an event."
        if not cut:
            return b"", []
        out = bytes(held[:cut])
        del held[:cut]
        return out, self._events(out)

    def close(self) -> tuple[bytes, list[tuple[str, str]]]:
        """End of stream: the held bytes and the events they hold when read as if a
        blank line followed; nothing is held afterwards."""
        rest = bytes(self._held)
        self._held.clear()
        return rest, self._events(rest) if rest else []

    def _events(self, block: bytes) -> list[tuple[str, str]]:
        if not self._started:
            self._started = True
            block = block.removeprefix(b"\xef\xbb\xbf")
        events = block_events(block)
        limit = self.max_event_bytes
        if len(block) > limit:
            for _, data in events:
                if len(data) + 1 > limit:
                    self.overflow = str(SSEEventTooLarge(len(data) + 1, limit))
        return events


def event_boundary(data: bytearray, start: int) -> int:
    """Length of the longest prefix of ``data`` that ends with a blank line (an SSE event
    boundary: ``\n\n``, ``\r\r``, or ``\n\r``, which also covers ``\r\n\r\n``),
    searching from ``start``; 0 when there is none. In SSE, CR and LF bytes only ever
    occur as line ends."""
    i = max(data.rfind(b"\n\n", start), data.rfind(b"\r\r", start), data.rfind(b"\n\r", start))
    return i + 2 if i >= 0 else 0
