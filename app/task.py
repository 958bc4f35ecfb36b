"""The task: one ``tasks`` row (:data:`app.db.schema.tasks`) as a typed, immutable value.

Built once from the row (:meth:`Task.from_row`, an asyncpg ``Record`` or any mapping
with the table's columns; extra keys are ignored) where the core reads it: admission,
the loop guard's ledger, the stop watcher, the admin API. Units are in the field names:
``_s`` seconds, ``_usd`` US dollars (exact decimals), counts otherwise. ``None`` is
"no limit" for every limit except ``request_limit``.

The effective policy (the task's column, else the global setting) is resolved in one
place: :class:`app.guard.policy.Policy`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from decimal import Decimal
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopGuard:
    """The task's ``loop_guard`` JSONB: its loop-guard overrides (the admin API's
    ``LoopGuardOverrides``); ``None`` for a key not set (the global setting applies).
    Counts are calls, ``response_repeats`` answers."""

    identical_streak: int | None = None
    cycle_repeats: int | None = None
    failure_streak: int | None = None
    per_tool_thresholds: Mapping[str, int] | None = None
    loop_warning: bool | None = None
    loop_warning_after: int | None = None
    empty_result_streak: int | None = None
    response_repeats: int | None = None
    repeated_output: bool | None = None
    result_normalizer_defaults: bool | None = None
    result_normalizers: tuple[str, ...] | None = None
    #: Rule name -> ``latch``, ``strike`` or ``warn`` (:mod:`app.guard.strike_rules`).
    rule_actions: Mapping[str, str] | None = None
    #: ``no_progress``: identical re-runs of one check after other steps (:mod:`app.guard.progress`).
    no_progress_reruns: int | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> LoopGuard:
        """The overrides of a ``loop_guard`` JSON object (``None`` or ``{}``: none).
        Keys this version does not know are ignored, as before."""
        if not value:
            return _NO_OVERRIDES
        known = {k: v for k, v in value.items() if k in _GUARD_KEYS}
        patterns = known.get("result_normalizers")
        if patterns is not None:
            known["result_normalizers"] = tuple(patterns)
        return cls(**known)

    def as_json(self) -> dict[str, Any]:
        """The JSON object as stored (unset keys left out)."""
        out: dict[str, Any] = {}
        for name in _GUARD_KEYS:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


_GUARD_KEYS = tuple(f.name for f in fields(LoopGuard))
_NO_OVERRIDES = LoopGuard()


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One ``tasks`` row. ``status`` is ``active`` or ``stopped`` (the durable latch;
    ``stop_reason``, ``stop_detail``, ``stopped_at`` say why and when)."""

    id: str
    token_hash: str
    status: str
    stop_reason: str | None
    stop_detail: Mapping[str, Any] | None
    stopped_at: datetime | None
    # limits
    request_limit: int
    max_duration_s: float | None
    token_limit: int | None
    tool_call_limit: int | None
    max_stalls: int | None
    stream_idle_timeout_s: float | None
    stream_first_event_timeout_s: float | None
    loop_guard: LoopGuard
    conversation_request_limit: int | None
    conversation_tool_call_limit: int | None
    conversation_max_duration_s: float | None
    upstream_timeout_s: float | None
    cost_limit_usd: Decimal | None
    allowed_models: tuple[str, ...] | None
    cost_wait_s: float | None
    default_max_output_tokens: int | None
    # counters
    admitted_requests: int
    input_tokens: int
    output_tokens: int
    tool_calls: int
    stalls: int
    refused_requests: int
    first_admitted_at: datetime | None
    cost_usd: Decimal
    reserved_usd: Decimal
    unmetered_responses: int
    metadata: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime
    #: The fleet budget the task draws from (``None``: none).
    budget_id: str | None = None
    #: Strikes the task drew (:mod:`app.guard.strike_rules`), and conversations holding a
    #: gateway note their next request carries (0: admission reads none).
    strikes: int = 0
    pending_notes: int = 0
    #: Warning thresholds (percents of each limit; ``None``: the default, 50, 80, 95),
    #: read by :mod:`app.budgets.task_thresholds` and the admin API, never by admission.
    thresholds: Sequence[float] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Task:
        """The task of a ``SELECT * FROM tasks`` row (``KeyError`` for a missing column).

        Built once or more per request, so the fields are stored through their slots
        directly (what the generated ``__init__`` does, without its 40 keyword arguments
        and ``object.__setattr__`` calls: ~2.5 instead of ~7.5 µs); ``Task`` has no
        ``__post_init__`` to skip."""
        task = object.__new__(cls)
        for name, store in _SLOT_STORES:
            store(task, row[name])
        _store_loop_guard(task, LoopGuard.from_json(task.loop_guard))  # type: ignore[arg-type]
        models = task.allowed_models
        if models is not None and not isinstance(models, tuple):
            _store_allowed_models(task, tuple(models))
        return task

    @property
    def active(self) -> bool:
        """Whether the stop latch is clear."""
        return self.status == "active"

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens reported by upstream."""
        return self.input_tokens + self.output_tokens

    def column(self, name: str) -> Any:
        """The value of column ``name`` as JSON holds it (``loop_guard`` as its object,
        ``allowed_models`` as a list); decimals stay decimals."""
        value = getattr(self, name)
        if isinstance(value, LoopGuard):
            return value.as_json()
        return list(value) if isinstance(value, tuple) else value


_TASK_COLUMNS = tuple(f.name for f in fields(Task))
#: Each field's slot setter (``member_descriptor.__set__``), in field order.
_SLOT_STORES: tuple[tuple[str, Callable[[Task, Any], None]], ...] = tuple(
    (name, getattr(Task, name).__set__) for name in _TASK_COLUMNS)
_store_loop_guard = getattr(Task, "loop_guard").__set__
_store_allowed_models = getattr(Task, "allowed_models").__set__
