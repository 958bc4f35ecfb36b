"""Result normalisation: what the loop guard compares is a tool result with its volatile
parts stripped or masked, so a loop whose results differ only in an id, a clock or a
stopwatch still looks like the loop it is.

Pure and table-driven: a :class:`Normalizer` is an ordered tuple of :class:`Rule`
(name, regex, replacement), applied in order with ``sub`` (RE2); no I/O, no clock.
The ledger hashes ``normalizer(output)`` (:func:`app.guard.fingerprint.result_hash`).

Default rules (:data:`DEFAULT_RULES`, in order):

- ``system_reminder``: Claude Code appends ``<system-reminder>...</system-reminder>``
  blocks to tool results (the context left, ``<total_tokens>14894599 tokens
  left</total_tokens>``, a new number every call; to-do nudges; notes on changed
  files). They are the harness talking, not the tool's output, and are removed with the
  whitespace before them.
- ``codex_shell_envelope``: the lines Codex CLI puts before every shell result that
  change from call to call (``Chunk ID: 95330b``, ``Wall time: 1.0764 seconds``,
  ``Original token count: 51``) are removed. ``Process exited with code N`` is kept:
  the exit code is meaningful. ``Process running with session ID 7`` keeps the words
  and masks the number.
- ``shell_process_ids``: Qwen Code's (and gemini-cli's) shell result ends with
  ``Process Group PGID: 14705`` (and ``Background PIDs: ...``), a new number each
  run: the number becomes ``<pid>``.
- ``uuid``: ``123e4567-e89b-12d3-a456-426614174000`` -> ``<uuid>``.
- ``iso_timestamp``: ``2026-12-01T06:54:12.345Z``, ``2026-12-01 06:54:12+01:00`` ->
  ``<timestamp>`` (a date alone is kept).
- ``log_timestamp``: common log (``[01/Dec/2026:06:54:12 +0000]``) and syslog
  (``Dec  1 06:54:12``) stamps -> ``<timestamp>``.
- ``clock_time``: a time of day with seconds (``06:54:12``, ``06:54:12.123``) ->
  ``<time>``; ``HH:MM`` without seconds (``ls -l`` modification times) is kept.
- ``hex_id``: 16 or more hex digits with at least one letter and one digit (request
  ids, object ids, full commit hashes) -> ``<hex>``.
- ``elapsed_time``: a number followed by a time unit (``took 1.23s``,
  ``0.0012 seconds``, ``in 45ms``, ``2 minutes``) -> ``<elapsed>``.

What is deliberately *not* masked, because it is how progress shows: plain numbers
(``3 passed`` vs ``4 passed``, line counts, sizes, exit codes), dates without a time,
file contents. Property tests in ``tests/test_normalize.py`` hold this line.

Operators add their own patterns (``TASKGATE_RESULT_NORMALIZERS``, per task
``loop_guard.result_normalizers``): every match is replaced by ``<masked>``; patterns
are RE2 regexes (linear time, :mod:`app.guard.linear_regex`: no lookarounds or
backreferences) compiled multi-line. The defaults run under RE2 too. The defaults can be turned off
(``TASKGATE_RESULT_NORMALIZER_DEFAULTS=false``, per task
``loop_guard.result_normalizer_defaults``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from app.guard.linear_regex import LinearMatch, LinearPattern, UnsafePattern, any_of, compile_linear

#: Replacement for a match of an operator's pattern.
OPERATOR_MASK = "<masked>"
#: Prefix of the rule names given to operator patterns (``operator:1``, ...).
OPERATOR_RULE_PREFIX = "operator:"

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME_UNIT = r"(?:ns|µs|us|ms|s|secs?|seconds?|milliseconds?|mins?|minutes?)"


@dataclass(frozen=True, slots=True)
class Rule:
    """One normalisation step: every match of ``pattern`` becomes ``replacement``
    (``re.sub`` syntax, so ``\\1`` refers to a group; or a function of the match)."""

    name: str
    pattern: LinearPattern
    replacement: str | Callable[[LinearMatch], str]

    def apply(self, text: str) -> str:
        return self.pattern.sub(self.replacement, text)


def _rule(name: str, pattern: str, replacement: str | Callable[[LinearMatch], str]) -> Rule:
    return Rule(name, compile_linear(pattern, multiline=True), replacement)


def _hex_id(match: LinearMatch) -> str:
    """``<hex>`` for a run of hex digits holding at least one letter and one digit."""
    run = match.group(0)
    has_digit = any(c.isdigit() for c in run)
    return "<hex>" if has_digit and not run.isdigit() else run


#: The default rules, applied in this order (see the module docstring).
DEFAULT_RULES: tuple[Rule, ...] = (
    _rule("system_reminder", r"\s*<system-reminder>[\s\S]*?</system-reminder>", ""),
    _rule("codex_shell_envelope",
          r"^(?:Chunk ID: [0-9A-Za-z]+|Wall time: \d+(?:\.\d+)? seconds|Original token count: \d+)[ \t]*(?:\r?\n|\z)",
          ""),
    _rule("codex_session_id", r"^(Process running with session ID )\d+", r"\1<id>"),
    _rule("shell_process_ids", r"^(Process Group PGID|Background PIDs): \d+(?:, ?\d+)*[ \t]*$", r"\1: <pid>"),
    _rule("uuid", r"\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b", "<uuid>"),
    _rule("iso_timestamp",
          r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}\b)?",
          "<timestamp>"),
    _rule("log_timestamp",
          rf"\[\d{{2}}/{_MONTH}/\d{{4}}:\d{{2}}:\d{{2}}:\d{{2}} [+-]\d{{4}}\]"
          rf"|\b{_MONTH} [ \d]\d \d{{2}}:\d{{2}}:\d{{2}}\b",
          "<timestamp>"),
    _rule("clock_time", r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?\b", "<time>"),
    _rule("hex_id", r"\b[0-9A-Fa-f]{16,}\b", _hex_id),
    _rule("elapsed_time", rf"\b\d+(?:\.\d+)?\s?{_TIME_UNIT}\b", "<elapsed>"),
)


@dataclass(frozen=True, slots=True)
class Normalizer:
    """An ordered tuple of rules; calling it normalises one tool result's text.

    A text no rule matches is returned after one pass over it (the rules' patterns
    combined, :func:`~app.guard.linear_regex.any_of`): then every rule would have left
    it as it is, since each sees the text the ones before it left. Any match, and the
    rules run one by one, in order."""

    rules: tuple[Rule, ...]
    #: The rules' patterns combined (``None``: none, or too large to combine).
    any_rule: LinearPattern | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "any_rule", any_of([rule.pattern for rule in self.rules]))

    def __call__(self, text: str) -> str:
        if self.any_rule is not None and self.any_rule.search(text) is None:
            return text
        for rule in self.rules:
            text = rule.apply(text)
        return text

    @property
    def names(self) -> list[str]:
        """The rule names, in order (for ``stop_detail``)."""
        return [rule.name for rule in self.rules]


#: The identity: no rules.
IDENTITY = Normalizer(())
#: The defaults alone.
DEFAULT = Normalizer(DEFAULT_RULES)


def operator_rules(patterns: Iterable[str]) -> tuple[Rule, ...]:
    """Rules for operator patterns: each match becomes ``<masked>``.

    Raises :class:`~app.guard.linear_regex.UnsafePattern` for a pattern RE2 refuses."""
    return tuple(_rule(f"{OPERATOR_RULE_PREFIX}{i}", p, OPERATOR_MASK) for i, p in enumerate(patterns, 1))


@lru_cache(maxsize=64)
def _build(defaults: bool, patterns: tuple[str, ...]) -> Normalizer:
    return Normalizer((DEFAULT_RULES if defaults else ()) + operator_rules(patterns))


def build(defaults: bool = True, patterns: Sequence[str] = ()) -> Normalizer:
    """The normaliser for a configuration: the default rules (unless ``defaults`` is
    false), then the operator's ``patterns`` in order. Cached; raises
    :class:`~app.guard.linear_regex.UnsafePattern` for a bad pattern."""
    return _build(bool(defaults), tuple(patterns))


def check_patterns(patterns: Iterable[str]) -> list[str]:
    """``patterns`` as a list when every one compiles under RE2 (linear time); raises
    ``ValueError`` naming the first that does not (for settings and admin API
    validation: a start-up error, a 422)."""
    out = list(patterns)
    for i, p in enumerate(out, 1):
        try:
            compile_linear(p, multiline=True)
        except UnsafePattern as exc:
            raise ValueError(f"result normalizer pattern {i} ({p!r}) is refused: {exc}") from None
    return out
