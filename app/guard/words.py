"""The words of an answer's prose, as :mod:`app.guard.repeated_output` counts them, and
the one-character *unit* each word stands for in the analysed sequence. Pure.

- A *word* (:data:`WORDS`) is a maximal run of word characters (Unicode letters, digits,
  ``_``) with any ``-+/=`` inside or after it (base64, URL-safe base64, a UUID,
  ``well-known``: one word), or one CJK character (Han, kana: scripts written without
  spaces, where one character is about a word). Punctuation and whitespace separate
  words and are not words: ``77.3333`` is the two words ``77`` and ``3333``; a table
  rule, an ellipsis or a row of emoji is no word at all.
- A *meaningful* word (:func:`meaningful`) is one a sentence is made of: at most
  :data:`MAX_WORD_CHARS` characters, with a letter, without a digit, and not made of hex
  letters only. Numbers, hex bytes (``de ad be ef``, ``0x7f``, ``\\xba``), hashes,
  base64 and identifiers with digits still occupy their place in a passage, but do not
  count as different words (:func:`distinct`).
- A word's *unit* (:func:`unit`) is one character from the word's CRC-32 (the same in
  every process): meaningful words in U+10000..U+10FFFF, the others in U+0100..U+D7FF.
"""

from __future__ import annotations

import re
import zlib

#: Longest meaningful word, in characters; a longer word is opaque (a hash, base64, a URL).
MAX_WORD_CHARS = 32

#: A word: a run of word characters other than CJK, with any ``-+/=`` inside or after it;
#: or one CJK character (kana U+3040-30FF, Han U+3400-4DBF, U+4E00-9FFF, U+F900-FAFF,
#: U+20000-3134F). Linear: the two classes of the run are disjoint and each repeat of the
#: group starts with ``[-+/=]``, so each character is taken one way.
WORDS = re.compile(
    r"[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+"
    r"(?:[-+/=]+[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]*)*"
    r"|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
#: The rest of a word at the start of a delta (a word split across deltas).
WORD_RUN = re.compile(r"(?:[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]|[-+/=])+")

#: A word's unit is one character: meaningful words map into U+10000..U+10FFFF (a million
#: values: two words share one with odds of one in a million), other words (numbers, hex,
#: long words) into U+0100..U+D7FF.
_MEANINGFUL_BASE, _MEANINGFUL_SIZE = 0x10000, 0x110000 - 0x10000
_OPAQUE_BASE, _OPAQUE_SIZE = 0x0100, 0xD800 - 0x0100
_MEANINGFUL_FIRST = chr(_MEANINGFUL_BASE)
_HEX_LETTERS = "abcdefABCDEF"
#: Word -> unit, shared by every monitor of the process (a pure function's memo);
#: cleared when it reaches :data:`_VOCABULARY_SIZE` words.
VOCABULARY: dict[str, str] = {}
_VOCABULARY_SIZE = 16_384


def meaningful(word: str) -> bool:
    """Whether ``word`` (one word as :data:`WORDS` reads it) counts toward a passage's
    different words (:data:`app.guard.repeated_output.MIN_DISTINCT_WORDS`): at most
    :data:`MAX_WORD_CHARS` characters, a letter, no digit, not hex letters only after an
    optional escape letter (``a``, ``be``, ``dead``, ``xba`` of ``\\xba``, ``uabcd`` of
    ``\\uabcd`` do not count: hex bytes would). One CJK character is meaningful."""
    hex_part = word[1:] if len(word) > 1 and word[0] in "xXuU" else word
    if len(word) > MAX_WORD_CHARS or not hex_part.strip(_HEX_LETTERS):
        return False
    if word.isalpha():  # letters only, the usual case
        return True
    return any(c.isalpha() for c in word) and not any(c.isdigit() for c in word)


def _unit_of(crc: int, is_meaningful: bool) -> str:
    """The unit of a word of CRC-32 ``crc``, in the meaningful or the opaque range."""
    if is_meaningful:
        return chr(_MEANINGFUL_BASE + crc % _MEANINGFUL_SIZE)
    return chr(_OPAQUE_BASE + crc % _OPAQUE_SIZE)


def crc32(text: str, value: int = 0) -> int:
    """CRC-32 of ``text`` in UTF-8 (lone surrogates kept), continuing from ``value``:
    a word read in pieces has the CRC-32 of the whole word."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"), value)


def unit(word: str) -> str:
    """The one-character unit standing for ``word`` in the analysed sequence: equal words
    have equal units; the range tells meaningful words from the others. From the word's
    CRC-32 (the same in every process), so a verdict never depends on the process."""
    found = VOCABULARY.get(word)
    if found is not None:
        return found
    made = _unit_of(crc32(word), meaningful(word))
    if len(word) <= MAX_WORD_CHARS:
        if len(VOCABULARY) >= _VOCABULARY_SIZE:
            VOCABULARY.clear()
        VOCABULARY[word] = made
    return made


def is_cjk(char: str) -> bool:
    """Whether ``char`` is of a script written without spaces (one character, one word)."""
    o = ord(char)
    return 0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF \
        or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3134F


def shown(word: str) -> str:
    """A word as the evidence shows it (a long one shortened)."""
    return word if len(word) <= MAX_WORD_CHARS else word[:16] + "\u2026"


def joined(words: list[str]) -> str:
    """Words as the evidence shows a passage: separated by a space, except between two
    CJK characters (written without spaces)."""
    out: list[str] = []
    for i, word in enumerate(words):
        if i and not (len(word) == 1 and is_cjk(word) and len(words[i - 1]) == 1 and is_cjk(words[i - 1])):
            out.append(" ")
        out.append(shown(word))
    return "".join(out)


def distinct(units: str) -> int:
    """How many different meaningful words ``units`` stand for."""
    return sum(1 for u in set(units) if u >= _MEANINGFUL_FIRST)


def opaque_unit(crc: int) -> str:
    """The unit of a long (opaque) word whose CRC-32 is ``crc``: what :func:`unit` gives
    the whole word, for a word read in pieces."""
    return _unit_of(crc, False)

