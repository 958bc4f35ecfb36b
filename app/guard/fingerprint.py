"""Fingerprints for the loop guard: canonical arguments, result hashes, failure test.

A tool call is fingerprinted as ``(tool_name, arguments_hash, result_hash)``; the
detector (:mod:`app.guard.detector`) compares these triples. Everything here is
pure: no I/O, no clock, no database. Hashes are lowercase SHA-256 hex (64 chars).

Reference behaviour:

- ``canonical_json({"b": [2, 1], "a": {"d": 1, "c": "é"}})`` is
  ``'{"a":{"c":"é","d":1},"b":[2,1]}'``: keys sorted at every depth, array order
  kept, no insignificant whitespace, non-ASCII kept as is.
- ``arguments_hash('{"b": 2, "a":1}') == arguments_hash({"a": 1, "b": 2})``.
- ``arguments_hash("") == arguments_hash("{}") == arguments_hash({})``.
- ``result_hash("ok") != result_hash("ok\\n")``: results are compared byte for byte
  (after the ledger's normaliser, :mod:`app.guard.normalize`).
- ``conversation_key("abc", seed)`` is ``"h:"`` + 32 hex chars, whatever the seed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from app.guard.linear_regex import LinearPattern, any_of, compile_linear
from app.wire.base import ToolResult

#: Prefix of the hashed material when the arguments are a JSON value.
JSON_PREFIX = "json:"
#: Prefix of the hashed material when the arguments are text that is not JSON.
RAW_PREFIX = "raw:"
#: Hex characters of SHA-256 kept in a conversation key (128 bits).
CONVERSATION_KEY_HEX_CHARS = 32
#: Prefix of a conversation key derived from the client's session header.
HEADER_KEY_PREFIX = "h:"
#: Prefix of a conversation key derived from the conversation seed text.
SEED_KEY_PREFIX = "s:"

#: Default failure patterns (RE2, searched anywhere in the output, case-insensitive),
#: used only when the wire carries no ``is_error`` flag. Kept short on purpose:
#: a false positive merely counts toward a long failure streak of one tool.
DEFAULT_ERROR_PATTERNS: tuple[str, ...] = (
    r"\A\s*(?:error|fatal)\s*:",  # output starts with "Error:" / "fatal:" (git)
    r"permission denied",
    r"\bEACCES\b",
    r"command not found",
    r"no such file or directory",
    r"traceback \(most recent call last\)",  # Python exception
    r"\bexit(?:ed with)?\s+(?:code|status)\s*:?\s*[1-9]",  # "exit code: 1", "exited with code 2", "exit status 127"
)


def _sha256_hex(text: str) -> str:
    # surrogatepass: JSON may decode to lone surrogates ("\ud800"); hash them, never raise.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a JSON value (what :func:`json.loads` returns).

    Object keys sorted recursively, array order kept, separators ``","`` and
    ``":"``, non-ASCII characters unescaped. Numbers keep their parsed type, so
    ``1`` and ``1.0`` differ. Raises ``TypeError`` for values that are not JSON.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def arguments_hash(arguments: str | object) -> str:
    """SHA-256 hex of a tool call's arguments, independent of key order and spacing.

    - A ``str`` is parsed as JSON and its canonical form hashed, so
      ``'{"b": 2, "a":1}'`` and ``{"a": 1, "b": 2}`` hash the same.
    - A ``str`` that is empty or only whitespace, and ``None``, mean "no arguments"
      and hash as ``{}`` (models send ``""`` for no-argument calls).
    - A ``str`` that is not JSON (e.g. a stream cut mid-object, or a custom tool's
      free-form input) is hashed as the raw text, exactly as given.
    - Any other object is taken to be a JSON value already (Anthropic ``input``).

    The hashed material is ``"json:" + canonical_json(value)`` or ``"raw:" + text``.
    The prefixes separate the two domains explicitly, so raw text can never hash
    like a JSON value even if the parser's idea of "valid JSON" changes. Never
    raises for ``str`` input.
    """
    if arguments is None:
        arguments = {}
    elif isinstance(arguments, str):
        if not arguments.strip():
            arguments = {}
        else:
            try:
                return _sha256_hex(JSON_PREFIX + canonical_json(json.loads(arguments)))
            except (ValueError, RecursionError):
                return _sha256_hex(RAW_PREFIX + arguments)
    return _sha256_hex(JSON_PREFIX + canonical_json(arguments))


def result_hash(output: str) -> str:
    """SHA-256 hex of a tool result's text, exactly as given.

    ``output`` is :attr:`ToolResult.output`, already flattened by the wire parser.
    Nothing is stripped here: the ledger passes the text through the result
    normaliser (:mod:`app.guard.normalize`) first; what it hands over is compared
    byte for byte.
    """
    return _sha256_hex(output)


def conversation_key(header_value: str | None, seed: str) -> str:
    """A stable key grouping requests of one conversation (at most 34 chars).

    With a session header (non-empty after trimming whitespace) the key is
    ``"h:" + sha256(header)[:32]`` and the seed is ignored, so a client that sends
    the header controls grouping (e.g. one per sub-agent). Without one it is
    ``"s:" + sha256(seed)[:32]``, where ``seed`` is
    :attr:`RequestView.conversation_seed` (first instructions + first user message);
    conversations with identical seeds, or none, share a key. The prefixes keep
    the two kinds apart.
    """
    if header_value is not None and header_value.strip():
        return HEADER_KEY_PREFIX + _sha256_hex(header_value.strip())[:CONVERSATION_KEY_HEX_CHARS]
    return SEED_KEY_PREFIX + _sha256_hex(seed)[:CONVERSATION_KEY_HEX_CHARS]


#: Results that are empty whatever the tool: compared after stripping whitespace.
EMPTY_LITERALS: frozenset[str] = frozenset({"", "[]", "{}", "null", '""', "None"})
#: Default no-match messages (``re.fullmatch`` on the stripped, normalised result,
#: case-insensitive, one line): a search that found nothing, however it was phrased.
DEFAULT_EMPTY_RESULT_PATTERNS: tuple[str, ...] = (
    r"no (?:matches|match|results|files|entries|items|documents)(?: were)?(?: found)?\b.*",
    r"(?:found )?0 (?:matches|results|files|entries|items|documents)\b.*",
    r"process exited with code 0\s*output:",  # Codex CLI shell result with no output
)


def is_empty_result(output: str, patterns: Sequence[LinearPattern]) -> bool:
    """Whether a (normalised) tool result says "nothing": an empty literal
    (:data:`EMPTY_LITERALS` after stripping whitespace) or a whole-text match of one
    of ``patterns`` (compiled by :func:`compile_patterns`)."""
    text = output.strip()
    if text in EMPTY_LITERALS:
        return True
    if len(text) > 300 or "\n" in text and not text.lower().startswith("process exited"):
        return False
    return any(p.fullmatch(text) for p in patterns)


def compile_patterns(patterns: Iterable[str]) -> tuple[LinearPattern, ...]:
    """Compile failure or empty-result patterns, case-insensitive, with RE2 (linear
    time, :mod:`app.guard.linear_regex`). Raises
    :class:`~app.guard.linear_regex.UnsafePattern` (a ``ValueError``) on a bad one."""
    return tuple(compile_linear(p, ignorecase=True) for p in patterns)


#: :data:`DEFAULT_ERROR_PATTERNS`, compiled.
DEFAULT_PATTERNS: tuple[LinearPattern, ...] = compile_patterns(DEFAULT_ERROR_PATTERNS)
#: :data:`DEFAULT_EMPTY_RESULT_PATTERNS`, compiled.
DEFAULT_EMPTY_PATTERNS: tuple[LinearPattern, ...] = compile_patterns(DEFAULT_EMPTY_RESULT_PATTERNS)


@lru_cache(maxsize=8)
def _any_pattern(patterns: tuple[LinearPattern, ...]) -> LinearPattern | None:
    return any_of(patterns)


def is_failure(result: ToolResult, patterns: Sequence[LinearPattern], texts: Sequence[str] | None = None) -> bool:
    """Whether a tool result is a failure.

    The wire's own flag wins when present (``is_error`` True or False); otherwise
    the result failed when any pattern is found (``re.search``) in its output, or in
    ``texts`` when given (the parts of a long result that are read,
    :mod:`app.guard.result_prints`). The patterns are searched as one combined pattern,
    one pass per text (:func:`~app.guard.linear_regex.any_of`), or one by one when RE2
    refuses the combination.
    """
    if result.is_error is not None:
        return result.is_error
    searched = (result.output,) if texts is None else texts
    combined = _any_pattern(tuple(patterns))
    if combined is not None:
        return any(combined.search(t) is not None for t in searched)
    return any(p.search(t) for p in patterns for t in searched)
