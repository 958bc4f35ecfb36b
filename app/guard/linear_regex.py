"""Regexes that run in linear time: every pattern taskgate runs on client-supplied text
(result normalisers, failure and empty-result patterns, defaults and operators' alike)
is compiled here with RE2 (the ``google-re2`` package), never with :mod:`re`.

RE2 matches in time linear in the text, whatever the pattern: ``(a+)+$`` on
``"a" * 26 + "!"`` takes microseconds (Python's backtracking engine takes seconds,
doubling per character). It has no lookarounds and no backreferences; a pattern that
uses them, or whose compiled program exceeds :data:`MAX_PROGRAM_BYTES` (``a{1000}{1000}``),
is refused with :class:`UnsafePattern` (a ``ValueError``: a 422 from the admin API, a
start-up error for a setting). RE2 releases the GIL while it matches, so a match run in
a worker thread does not hold the event loop.

Syntax differences from :mod:`re` that matter here: ``\\z`` (not ``\\Z``) is the end of
the text; ``\\d``, ``\\s`` and ``\\b`` are ASCII classes. Flags are inline
(``(?m)``, ``(?i)``), set by :func:`compile_linear`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import re2  # type: ignore[import-untyped]  # no stubs; typed by the Protocols below

#: Memory budget of one compiled pattern (RE2's ``max_mem``): bounds the size of the
#: automaton, hence the cost per character.
MAX_PROGRAM_BYTES = 8 << 20


class UnsafePattern(ValueError):
    """A pattern RE2 cannot run in linear time (or cannot parse at all)."""


class LinearMatch(Protocol):
    """The part of a match object the guard uses (``re.Match``'s, same semantics:
    offsets in characters of the text searched)."""

    def group(self, index: int = 0) -> str: ...

    def start(self, index: int = 0) -> int: ...

    def end(self, index: int = 0) -> int: ...


class LinearPattern(Protocol):
    """A compiled pattern (``re.Pattern``'s methods the guard uses, same semantics; ``pos``
    and ``endpos`` bound the part searched, the text around it is context for ``^`` and
    ``\\b``)."""

    #: The source as compiled, inline flags included (``(?m)^Wall time: ...``).
    @property
    def pattern(self) -> str: ...

    def search(self, text: str, pos: int | None = None, endpos: int | None = None) -> LinearMatch | None: ...

    def match(self, text: str, pos: int | None = None, endpos: int | None = None) -> LinearMatch | None: ...

    def fullmatch(self, text: str) -> LinearMatch | None: ...

    def finditer(self, text: str, pos: int | None = None, endpos: int | None = None) -> Iterator[LinearMatch]: ...

    def sub(self, repl: str | Callable[[LinearMatch], str], text: str) -> str: ...


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported by the caller, not on stderr
    options.max_mem = MAX_PROGRAM_BYTES
    return options


def compile_linear(pattern: str, *, multiline: bool = False, ignorecase: bool = False) -> LinearPattern:
    """``pattern`` compiled by RE2 (``multiline``: ``^``/``$`` at line ends;
    ``ignorecase``: case-insensitive). Raises :class:`UnsafePattern` naming the cause
    when RE2 refuses it (lookaround, backreference, too large, syntax error)."""
    flags = ("m" if multiline else "") + ("i" if ignorecase else "")
    prefix = f"(?{flags})" if flags else ""
    try:
        compiled: LinearPattern = re2.compile(prefix + pattern, _options())
    except re2.error as exc:
        cause = exc.args[0] if exc.args else exc
        if isinstance(cause, bytes):
            cause = cause.decode("utf-8", "replace")
        cause = str(cause).replace(prefix + pattern, pattern) if prefix else cause
        raise UnsafePattern(f"{cause} (patterns use RE2 syntax, which runs in linear time: "
                            "no lookarounds, no backreferences)") from None
    except (TypeError, UnicodeError) as exc:
        raise UnsafePattern(str(exc)) from None
    return compiled


def any_of(patterns: Sequence[LinearPattern]) -> LinearPattern | None:
    """One pattern found in a text exactly when at least one of ``patterns`` is found
    in it: ``(?:p1)|(?:p2)|...``, each keeping its own inline flags (a flag set at the
    start of a group holds to the group's end). One linear pass tells that a text needs
    none of them, where searching each costs a pass per pattern.

    ``None`` for no patterns, or when RE2 refuses the combination (its program over
    :data:`MAX_PROGRAM_BYTES`): the caller searches them one by one."""
    if not patterns:
        return None
    try:
        return compile_linear("|".join(f"(?:{p.pattern})" for p in patterns))
    except UnsafePattern:
        return None
