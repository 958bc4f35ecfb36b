"""Repeated output inside one answer ("chanting"): the model emits the same passage
over and over in a single streamed response. After gemini-cli's content loop check
(``loopDetectionService``): slide a :data:`CHUNK_CHARS`-character window over the
answer's prose one character at a time; when one window's text has been seen
:data:`REPEATS` times and those occurrences lie on average at most
:data:`MAX_AVERAGE_GAP_CHARS` characters apart, the answer is looping.

Pure: fed text deltas in order (:meth:`OutputMonitor.feed`), no I/O, no clock.
Memory is bounded (at most twice :data:`_KEEP` analysed characters). Time: a few
:meth:`str.find` calls per :data:`_BATCH` characters of prose that is not repeating
itself; prose that is gets each of its windows compared.

Healthy repetition is left alone, line by line: lines inside fenced code blocks
(```` ``` ```` / ``~~~``), indented code (4 spaces or a tab), table rows (``|...``,
``+--``), list items (``-``, ``*``, ``+``, ``1.``), headings (``#``), block quotes
(``>``) and divider lines are not analysed, and each of them restarts the analysis
(as gemini-cli does), so repeated rows of a table or lines of code never count. A
line's kind is decided from its first :data:`HEAD_CHARS` characters (or its end).

The monitor also hashes the whole answer text (:meth:`OutputMonitor.text_sha256`)
for the ``repeated_response`` rule.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

CHUNK_CHARS = 50
REPEATS = 10
MAX_AVERAGE_GAP_CHARS = 5 * CHUNK_CHARS
#: Characters of a line read before deciding whether it is prose.
HEAD_CHARS = 8
#: Furthest apart (in characters) the first and last of REPEATS window ends may lie.
_SPAN = (REPEATS - 1) * MAX_AVERAGE_GAP_CHARS
#: Window ends older than this many characters no longer count (the evidence's ``count``).
_HORIZON = _SPAN + CHUNK_CHARS
#: Analysed characters kept: every window a new one can be compared with.
_KEEP = _HORIZON + CHUNK_CHARS
#: Window ends settled together (see :meth:`OutputMonitor._analyse`).
_BATCH = 16
#: How far back a batch's core is looked for on every batch: one average gap.
_GAP_REACH = MAX_AVERAGE_GAP_CHARS + CHUNK_CHARS

_FENCE = re.compile(r"\s*(```|~~~)")
_STRUCTURE = re.compile(
    r"(?:\s*(?:\||\+[-=+]|#+\s|>|[-*+]\s|\d+[.)]\s)|    |\t|\s*[-=_*+\u2500-\u257f]{3,}\s*$)"
)


class OutputMonitor:
    """Watches one answer's text. :meth:`feed` returns ``True`` once the answer is
    looping (and keeps returning ``True``); :attr:`detail` then says why."""

    def __init__(self, analyse: bool = True) -> None:
        self.analyse = analyse
        self.detected = False
        self.detail: dict[str, Any] = {}
        self.chars = 0
        self._hash = hashlib.sha256()
        self._head = ""  # start of the current line while its kind is undecided
        self._prose: bool | None = None  # kind of the current line once decided
        self._in_fence = False
        self._reset()  # _text: the prose analysed since the last reset (its last _KEEP characters at least)

    def text_sha256(self) -> str | None:
        """SHA-256 hex of all text fed so far (``None`` when there was none)."""
        return self._hash.hexdigest() if self.chars else None

    def feed(self, text: str) -> bool:
        """Take the next piece of answer text; ``True`` when the answer is looping."""
        if not text:
            return self.detected
        self.chars += len(text)
        self._hash.update(text.encode("utf-8", "surrogatepass"))
        if not self.analyse or self.detected:
            return self.detected
        if self._prose and "\n" not in text:  # the usual delta: more of a prose line
            return self._analyse(text)
        for piece in re.split(r"(?<=\n)", text):
            if piece and self._line_piece(piece):
                return True
        return False

    def _line_piece(self, piece: str) -> bool:
        ends_line = piece.endswith("\n")
        if self._prose is None:
            self._head += piece
            if len(self._head) < HEAD_CHARS and not ends_line:
                return False
            piece, self._head = self._head, ""
            self._prose = self._classify(piece)
        detected = self._prose and self._analyse(piece)
        if ends_line:
            self._prose = None
        return bool(detected)

    def _classify(self, head: str) -> bool:
        if _FENCE.match(head):
            self._in_fence = not self._in_fence
            self._reset()
            return False
        if self._in_fence:
            return False
        if _STRUCTURE.match(head):
            self._reset()
            return False
        return True

    def _reset(self) -> None:
        self._text = ""
        self._close = -_SPAN - 1  # (end of) the last batch whose core recurred within one gap

    def _analyse(self, text: str) -> bool:
        """Append ``text`` to the analysed prose; ``True`` at the first window that has
        been seen :data:`REPEATS` times within :data:`_SPAN` characters.

        Exact, and cheap for prose that is not repeating itself. Window ends are taken
        :data:`_BATCH` at a time: every window ending in one batch holds the same
        ``core`` (the ``CHUNK_CHARS - _BATCH + 1`` characters before the batch), so a
        window seen ten times makes its batch's core recur ten times in reach. And ten
        occurrences within :data:`_SPAN` have two at most one average gap apart, so
        some batch in that span saw its core recur within :data:`_GAP_REACH`: only
        after such a batch is the whole span searched; otherwise one :meth:`str.find`
        over the last few hundred characters settles a batch."""
        buf, self._text = self._text, ""  # one reference: += extends in place
        new = len(buf)  # index of the first new character
        if new > 2 * _KEEP:  # older characters can no longer be part of a detection
            self._close -= new - _KEEP
            buf, new = buf[new - _KEEP:], _KEEP
        buf += text
        self._text = buf
        end = len(buf)
        first = new + 1 if new >= CHUNK_CHARS else CHUNK_CHARS
        while first <= end:
            last = min(first + _BATCH - 1, end)
            at = last - CHUNK_CHARS
            core = buf[at:first]
            if buf.find(core, max(first - _GAP_REACH, 0), first) != at:  # not just itself
                self._close = last
            if self._close + _SPAN >= first and \
                    _occurs(buf, core, first - _SPAN - CHUNK_CHARS, first, REPEATS) >= REPEATS:
                for stop in range(first, last + 1):
                    if self._looping(buf, stop):
                        return True
            first = last + 1
        return False

    def _looping(self, buf: str, stop: int) -> bool:
        """Whether the window ending at index ``stop`` of ``buf`` is looping (and if so,
        :attr:`detail`)."""
        window = buf[stop - CHUNK_CHARS:stop]
        if window.isspace() or _occurs(buf, window, stop - _SPAN - CHUNK_CHARS, stop, REPEATS) < REPEATS:
            return False
        starts = _starts(buf, window, stop - _HORIZON - CHUNK_CHARS + 1, stop)
        gap = (starts[-1] - starts[-REPEATS]) / (REPEATS - 1)
        self.detected = True
        self.detail = {"chunk_chars": CHUNK_CHARS, "count": len(starts), "average_gap_chars": round(gap, 1),
                       "threshold": REPEATS, "max_average_gap_chars": MAX_AVERAGE_GAP_CHARS}
        return True


def _occurs(buf: str, sub: str, lo: int, hi: int, enough: int) -> int:
    """How often ``sub`` occurs in ``buf[lo:hi]`` (overlaps counted), counting no
    further than ``enough``."""
    count, i = 0, buf.find(sub, max(lo, 0), hi)
    while i != -1 and count < enough:
        count += 1
        i = buf.find(sub, i + 1, hi)
    return count


def _starts(buf: str, sub: str, lo: int, hi: int) -> list[int]:
    """Every start of ``sub`` in ``buf[lo:hi]``, overlaps included, in order."""
    out, i = [], buf.find(sub, max(lo, 0), hi)
    while i != -1:
        out.append(i)
        i = buf.find(sub, i + 1, hi)
    return out
