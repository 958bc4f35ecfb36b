"""Repeated output inside one answer ("chanting"): the model emits the same passage
over and over in a single response. After gemini-cli's content loop check
(``loopDetectionService``), counted in **words** instead of characters: the answer's
prose is read as a sequence of words; when one passage of :data:`PASSAGE_WORDS`
consecutive words, holding at least :data:`MIN_DISTINCT_WORDS` different *meaningful*
words, has been seen :data:`REPEATS` times and those occurrences lie on average at most
:data:`MAX_AVERAGE_GAP_WORDS` words apart, the answer is looping.

Why words. Counted in characters (a 50-character window sliding one character at a
time), any run of about 59 identical characters is "a passage seen 10 times, one
character apart": the digits of ``77.3333…3`` in a correct answer, a ``=====`` rule, a
base64 block of zeros. None of these repeats anything a reader would call a passage. A
word is the unit that carries meaning, so:

- a *word* (:mod:`app.guard.words`) is a run of word characters (with ``-+/=`` inside
  it: a base64 run is one word) or one CJK character; punctuation and whitespace only
  separate words: ``77.3333`` is the two words ``77`` and ``3333``, a table rule is none;
- a *meaningful* word has a letter, no digit, at most 32 characters, and is not made of
  hex letters only: numbers, hex bytes, hashes and base64 still occupy their place in a
  passage, but do not count toward its :data:`MIN_DISTINCT_WORDS`;
- so a run of one character is one word; the digits of a number are one word; a hex
  dump or a numeric table repeats no passage of four distinct meaningful words; while
  "Wait, I am confused. Is it `msubsup` or `msubsup`?" said over and over is a passage
  of eight, repeated.

Healthy repetition is left alone, line by line, as gemini-cli does: lines inside fenced
code blocks (```` ``` ```` / ``~~~``), indented code (4 spaces or a tab), table rows
(``|...``, ``+--``), list items (``-``, ``*``, ``+``, ``1.``), headings (``#``), block
quotes (``>``) and divider lines are not analysed, and each of them restarts the
analysis, so repeated rows of a table or lines of code never count. A line's kind is
decided from its first :data:`HEAD_CHARS` characters (or its end).

Pure: fed text deltas in order (:meth:`OutputMonitor.feed`), no I/O, no clock. The
verdict depends on the text only, never on how it was split into deltas: prose is read
:data:`_READ_CHARS` characters at a time and words are judged :data:`_BATCH` at a time,
both counted from the last reset, and a word cut by a read is held until it ends (so
the last few words of an answer, less than a read and a batch, are not judged).

Cost, linear in the text: per delta, an append; per read, one regular-expression pass
(runs of disjoint character classes) and each word's unit from a bounded memo; per
batch, one :meth:`str.find` over the last :data:`_GAP_REACH` words, and only when that
core recurs, a few more over :data:`_KEEP` words. Measured (``bench`` in the commit
that introduced words): 50-140 µs per KB of prose for deltas of 4 characters to whole
answers, 10-100 µs on runs of one character or text without spaces. Memory is bounded:
at most ``_KEEP + _SLACK`` analysed words (one character each, about 2.4 KB), the
text of the last :data:`PASSAGE_WORDS` words, and a word being read of at most
:data:`MAX_WORD_CHARS` characters (a longer one is kept as its CRC-32 so far and its
start). A run of one character, text without spaces or one huge word cost no more per
character than prose.

The monitor also hashes the whole answer text (:meth:`OutputMonitor.text_sha256`)
for the ``repeated_response`` rule.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from app.guard.words import (
    MAX_WORD_CHARS,
    VOCABULARY,
    WORD_RUN,
    WORDS,
    crc32,
    distinct,
    is_cjk,
    joined,
    opaque_unit,
    shown,
    unit,
)
from app.stop_reasons import Delivered, RepeatedOutputDetail

#: Words in one passage (gemini-cli: 50 characters, about ten words).
PASSAGE_WORDS = 10
#: Occurrences of one passage that make a loop.
REPEATS = 10
#: Different meaningful words a passage must hold (fewer: a run, a number, a hex dump).
MIN_DISTINCT_WORDS = 4
#: Average distance (in words) between the occurrences, at most: five passages, as gemini-cli.
MAX_AVERAGE_GAP_WORDS = 5 * PASSAGE_WORDS
#: Characters of a line read before deciding whether it is prose.
HEAD_CHARS = 8
#: Furthest apart (in words) the first and last of REPEATS passage ends may lie.
_SPAN = (REPEATS - 1) * MAX_AVERAGE_GAP_WORDS
#: Passage ends older than this many words no longer count (the evidence's ``count``).
_HORIZON = _SPAN + PASSAGE_WORDS
#: Analysed words kept: every passage a new one can be compared with.
_KEEP = _HORIZON + PASSAGE_WORDS
#: Analysed words kept beyond :data:`_KEEP` before the oldest are dropped (one copy of
#: ``_KEEP`` units every ``_SLACK`` words).
_SLACK = 128
#: Prose characters read together (see :meth:`OutputMonitor._take`).
_READ_CHARS = 64
#: Passage ends settled together (see :meth:`OutputMonitor._judge`).
_BATCH = 6
#: How far back a batch's core is looked for on every batch: one average gap.
_GAP_REACH = MAX_AVERAGE_GAP_WORDS + PASSAGE_WORDS
#: Characters of the repeated passage kept in the evidence (``passage``).
PASSAGE_CHARS = 200

#: How the answer that repeated itself reached the client (:data:`app.stop_reasons.Delivered`):
#: the evidence's ``delivered``, set by the relay (:func:`app.proxy.relay_stream.watch_text`)
#: and read by the stop sentence (:mod:`app.admission.stop_sentences`).
DELIVERED_CUT: Final[Delivered] = "cut"
DELIVERED_STREAMED: Final[Delivered] = "streamed"
DELIVERED_WHOLE: Final[Delivered] = "whole"

_FENCE = re.compile(r"\s*(```|~~~)")
_STRUCTURE = re.compile(
    r"(?:\s*(?:\||\+[-=+]|#+\s|>|[-*+]\s|\d+[.)]\s)|    |\t|\s*[-=_*+\u2500-\u257f]{3,}\s*$)"
)

class OutputMonitor:
    """Watches one answer's text. :meth:`feed` returns ``True`` once the answer is
    looping (and keeps returning ``True``); :attr:`detail` then says why:
    ``passage_words``, ``passage`` (its words, space-separated, at most
    :data:`PASSAGE_CHARS` characters), ``distinct_words``, ``count`` (occurrences within
    the horizon), ``average_gap_words``, ``threshold``, ``max_average_gap_words``."""

    # Held for the life of each open stream: slots, no instance dict.
    __slots__ = ("analyse", "detected", "detail", "chars", "_hash", "_head", "_prose", "_in_fence",
                 "_units", "_recent", "_fresh", "_fresh_words", "_pending", "_long", "_close", "_raw",
                 "_raw_chars")

    def __init__(self, analyse: bool = True) -> None:
        self.analyse = analyse
        self.detected = False
        self.detail: RepeatedOutputDetail = {}
        self.chars = 0
        self._hash = hashlib.sha256()
        self._head = ""  # start of the current line while its kind is undecided
        self._prose: bool | None = None  # kind of the current line once decided
        self._in_fence = False
        self._reset()

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
            return self._take(text)
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
        detected = self._prose and self._take(piece)
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
        self._units = ""  # one character per analysed word (its last _KEEP at least)
        self._recent: tuple[str, ...] = ()  # the last judged words' text (at most PASSAGE_WORDS; a
        # tuple, not a deque: the empty one is shared, and 10 words take ~0.1 KB where a deque takes 0.6)
        self._fresh = ""  # units of words read but not judged yet (fewer than _BATCH)
        self._fresh_words: list[str] = []  # their text
        self._pending = ""  # a word that may go on in the next delta (short)
        self._long: tuple[int, str] | None = None  # (CRC-32 so far, start) of a long one
        self._close = -_SPAN - 1  # (end of) the last batch whose core recurred within one gap
        self._raw: list[str] = []  # prose not read yet (fewer than _READ_CHARS characters)
        self._raw_chars = 0

    def _take(self, text: str) -> bool:
        """Add ``text`` to the prose; read it :data:`_READ_CHARS` characters at a time
        (counted from the last reset, so the words read never depend on the deltas)."""
        self._raw.append(text)
        n = self._raw_chars + len(text)
        if n < _READ_CHARS:
            self._raw_chars = n
            return False
        joined = "".join(self._raw)
        cut = n - n % _READ_CHARS
        if cut == n:
            self._raw, self._raw_chars = [], 0
        else:
            self._raw, self._raw_chars, joined = [joined[cut:]], n - cut, joined[:cut]
        return self._analyse(joined)

    def _analyse(self, text: str) -> bool:
        """Read the words of ``text`` that are complete; ``True`` at the first passage
        that has been seen :data:`REPEATS` times within :data:`_SPAN` words.

        The last word is held back while it may go on in the next delta: a short one as
        text, a long one as its CRC-32 so far (and its start, for the evidence). Words
        are judged :data:`_BATCH` at a time, counted from the last reset, so the verdict
        is the same however the text was split into deltas (the last words of an answer,
        fewer than a batch, are not judged)."""
        units, words = "", list[str]()
        if self._long is not None:  # a long word going on?
            crc, start = self._long
            run = WORD_RUN.match(text)
            if run is not None:
                crc = crc32(run.group(), crc)
                text = text[run.end():]
                if not text:
                    self._long = (crc, start)
                    return False
            self._long = None
            units, words = opaque_unit(crc), [start + "\u2026"]
        elif self._pending:
            text, self._pending = self._pending + text, ""
        found = WORDS.findall(text)
        if found:
            last = found[-1]
            if text.endswith(last) and (len(last) > 1 or not is_cjk(last)):
                found.pop()  # it may go on in the next delta
                if len(last) <= MAX_WORD_CHARS:
                    self._pending = last
                else:
                    self._long = (crc32(last), last[:16])
            if found:
                get = VOCABULARY.get
                units += "".join([get(w) or unit(w) for w in found])
                words += found
        if not units:
            return False
        fresh = self._fresh + units
        if len(fresh) < _BATCH:
            self._fresh = fresh
            self._fresh_words += words
            return False
        words = self._fresh_words + words
        ready = len(fresh) - len(fresh) % _BATCH
        if ready == len(fresh):
            self._fresh, self._fresh_words = "", []
        else:
            fresh, self._fresh = fresh[:ready], fresh[ready:]
            words, self._fresh_words = words[:ready], words[ready:]
        looping = self._judge(fresh, words)
        tail = words[-PASSAGE_WORDS:]
        shown_tail = tail if max(map(len, tail)) <= MAX_WORD_CHARS else [shown(w) for w in tail]
        self._recent = (*self._recent, *shown_tail)[-PASSAGE_WORDS:]
        return looping

    def _judge(self, units: str, words: list[str]) -> bool:
        """Append ``units`` (of ``words``) to the analysed sequence; ``True`` at the first
        passage end that has been seen :data:`REPEATS` times within :data:`_SPAN` words.

        Exact, and cheap for prose that is not repeating itself. Passage ends are taken
        :data:`_BATCH` at a time: every passage ending in one batch holds the same
        ``core`` (the ``PASSAGE_WORDS - _BATCH + 1`` words before the batch), so a
        passage seen ten times makes its batch's core recur ten times in reach. And ten
        occurrences within :data:`_SPAN` have two at most one average gap apart, so
        some batch in that span saw its core recur within :data:`_GAP_REACH`: only
        after such a batch is the whole span searched; otherwise one :meth:`str.find`
        over the last few dozen words settles a batch."""
        buf, self._units = self._units, ""  # one reference: += extends in place
        new = len(buf)  # index of the first new unit
        if new > _KEEP + _SLACK:  # older units can no longer be part of a detection
            self._close -= new - _KEEP
            buf, new = buf[new - _KEEP:], _KEEP
        buf += units
        self._units = buf
        end = len(buf)
        first = new + 1 if new >= PASSAGE_WORDS else PASSAGE_WORDS
        while first <= end:
            last = min(first + _BATCH - 1, end)
            at = last - PASSAGE_WORDS
            core = buf[at:first]
            if buf.find(core, max(first - _GAP_REACH, 0), first) != at:  # not just itself
                self._close = last
            if self._close + _SPAN >= first \
                    and distinct(buf[first - PASSAGE_WORDS:last]) >= MIN_DISTINCT_WORDS \
                    and _occurs(buf, core, first - _SPAN - PASSAGE_WORDS, first, REPEATS) >= REPEATS:
                for stop in range(first, last + 1):
                    if self._looping(buf, stop, new, words):
                        return True
            first = last + 1
        return False

    def _looping(self, buf: str, stop: int, new: int, words: list[str]) -> bool:
        """Whether the passage ending at index ``stop`` of ``buf`` is looping (and if so,
        :attr:`detail`); ``new``: index of ``words[0]``'s unit."""
        passage = buf[stop - PASSAGE_WORDS:stop]
        different = distinct(passage)
        if different < MIN_DISTINCT_WORDS or \
                _occurs(buf, passage, stop - _SPAN - PASSAGE_WORDS, stop, REPEATS) < REPEATS:
            return False
        starts = _starts(buf, passage, stop - _HORIZON - PASSAGE_WORDS + 1, stop)
        gap = (starts[-1] - starts[-REPEATS]) / (REPEATS - 1)
        known = [*self._recent, *words]  # the words of buf[new - len(recent):end]
        offset = len(self._recent) - new
        text = joined(known[max(stop - PASSAGE_WORDS + offset, 0):stop + offset])
        self.detected = True
        self.detail = RepeatedOutputDetail(
            passage_words=PASSAGE_WORDS, passage=text[:PASSAGE_CHARS], distinct_words=different, count=len(starts),
            average_gap_words=round(gap, 1), threshold=REPEATS, max_average_gap_words=MAX_AVERAGE_GAP_WORDS)
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
