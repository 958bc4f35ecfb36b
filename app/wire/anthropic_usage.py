"""Anthropic Messages usage, as :class:`~app.wire.base.Usage` (for
:mod:`app.wire.anthropic_messages`).

``usage.input_tokens`` plus ``cache_creation_input_tokens`` and
``cache_read_input_tokens`` (which also count as input), ``usage.output_tokens``; in a
stream, the latest value of each field (stream usage is cumulative); with
server-side compaction, ``usage.iterations`` (one entry per sampling step); 1-hour
cache writes from ``usage.cache_creation``.
"""

from __future__ import annotations

from typing import Any

from app.wire._common import as_int
from app.wire.base import Usage

_INPUT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_COUNTED = (*_INPUT_FIELDS, "output_tokens")
#: Cache writes with the 1-hour TTL (priced 2x input, 5-minute writes 1.25x): part of
#: ``cache_creation_input_tokens``, broken down in ``usage.cache_creation``.
_ONE_HOUR = "ephemeral_1h_input_tokens"


def _one_hour(raw: dict[str, Any]) -> int | None:
    nested = raw.get("cache_creation")
    value = nested.get(_ONE_HOUR) if isinstance(nested, dict) else None
    return as_int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class UsageCounter:
    """Latest value of each usage field (Anthropic stream usage is cumulative) and the
    latest ``usage.iterations`` list.

    Input counts every input token processed: ``input_tokens`` +
    ``cache_creation_input_tokens`` + ``cache_read_input_tokens``. With server-side
    compaction, ``usage.iterations`` lists every sampling step, and a ``compaction``
    step is not in the top-level fields; so when iterations are present the input and
    output counts are their sums (each never less than the top-level count).
    """

    __slots__ = ("fields", "iterations", "seen")

    def __init__(self) -> None:
        self.fields: dict[str, int] = {}
        self.iterations: list[Any] = []
        self.seen = False

    def update(self, raw: Any) -> None:
        """Take one ``usage`` object (ignored unless it is an object)."""
        if not isinstance(raw, dict):
            return
        self.seen = True
        for key in _COUNTED:
            value = raw.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.fields[key] = as_int(value)
        one_hour = _one_hour(raw)
        if one_hour is not None:
            self.fields[_ONE_HOUR] = one_hour
        iterations = raw.get("iterations")
        if isinstance(iterations, list) and iterations:
            self.iterations = iterations

    def usage(self) -> Usage | None:
        """The usage so far; ``None`` when no ``usage`` object came."""
        if not self.seen:
            return None
        top = _as_usage(self.fields)
        if not self.iterations:
            return top
        totals = dict.fromkeys(_COUNTED, 0)
        for step in self.iterations:
            if isinstance(step, dict):
                for key in _COUNTED:
                    totals[key] += as_int(step.get(key))
                totals[_ONE_HOUR] = totals.get(_ONE_HOUR, 0) + (_one_hour(step) or 0)
        steps = _as_usage(totals)
        inputs = steps if steps.input_tokens >= top.input_tokens else top
        return Usage(
            input_tokens=inputs.input_tokens,
            output_tokens=max(steps.output_tokens, top.output_tokens),
            cache_read_input_tokens=inputs.cache_read_input_tokens,
            cache_creation_input_tokens=inputs.cache_creation_input_tokens,
            cache_creation_1h_input_tokens=inputs.cache_creation_1h_input_tokens,
        )


def _as_usage(counts: dict[str, int]) -> Usage:
    return Usage(
        input_tokens=sum(counts.get(key, 0) for key in _INPUT_FIELDS),
        output_tokens=counts.get("output_tokens", 0),
        cache_read_input_tokens=counts.get("cache_read_input_tokens", 0),
        cache_creation_input_tokens=counts.get("cache_creation_input_tokens", 0),
        cache_creation_1h_input_tokens=min(counts.get(_ONE_HOUR, 0), counts.get("cache_creation_input_tokens", 0)),
    )


def anthropic_usage(raw: Any) -> Usage | None:
    """One ``usage`` object (a body's) as :class:`Usage`; ``None`` when it is not an object."""
    counter = UsageCounter()
    counter.update(raw)
    return counter.usage()
