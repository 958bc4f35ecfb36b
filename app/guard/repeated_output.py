"""Repeated output inside one answer ("chanting"): the model emits the same passage
over and over in a single streamed response. After gemini-cli's content loop check
(``loopDetectionService``): slide a :data:`CHUNK_CHARS`-character window over the
answer's prose one character at a time; when one window's text has been seen
:data:`REPEATS` times and those occurrences lie on average at most
:data:`MAX_AVERAGE_GAP_CHARS` characters apart, the answer is looping.

Pure: fed text deltas in order (:meth:`OutputMonitor.feed`), no I/O, no clock.
Memory is bounded (the positions of the last ``REPEATS * MAX_AVERAGE_GAP_CHARS``
characters), time O(characters).

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
from collections import deque
from typing import Any

CHUNK_CHARS = 50
REPEATS = 10
MAX_AVERAGE_GAP_CHARS = 5 * CHUNK_CHARS
#: Characters of a line read before deciding whether it is prose.
HEAD_CHARS = 8
#: Positions older than this many characters can no longer be part of a detection.
_HORIZON = (REPEATS - 1) * MAX_AVERAGE_GAP_CHARS + CHUNK_CHARS

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
        self._window = ""  # the last CHUNK_CHARS analysed characters
        self._pos = 0  # analysed characters so far
        self._seen: dict[str, deque[int]] = {}
        self._order: deque[tuple[int, str]] = deque()

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
        self._window = ""
        self._seen.clear()
        self._order.clear()

    def _analyse(self, text: str) -> bool:
        for ch in text:
            self._pos += 1
            self._window = (self._window + ch)[-CHUNK_CHARS:]
            if len(self._window) < CHUNK_CHARS:
                continue
            while self._order and self._order[0][0] <= self._pos - _HORIZON:
                old, chunk = self._order.popleft()
                hits = self._seen[chunk]
                hits.popleft()
                if not hits:
                    del self._seen[chunk]
            hits = self._seen.setdefault(self._window, deque())
            hits.append(self._pos)
            self._order.append((self._pos, self._window))
            if len(hits) >= REPEATS:
                recent = list(hits)[-REPEATS:]
                gap = (recent[-1] - recent[0]) / (REPEATS - 1)
                if gap <= MAX_AVERAGE_GAP_CHARS and not self._window.isspace():
                    self.detected = True
                    self.detail = {"chunk_chars": CHUNK_CHARS, "count": len(hits),
                                   "average_gap_chars": round(gap, 1),
                                   "threshold": REPEATS, "max_average_gap_chars": MAX_AVERAGE_GAP_CHARS}
                    return True
        return False
