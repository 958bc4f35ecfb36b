"""Test support: :class:`app.task.Task` values without a database, as a new row has them."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from app.task import LoopGuard, Task

_NEW_ROW: dict[str, Any] = {
    "id": "task", "token_hash": "hash", "status": "active", "stop_reason": None, "stop_detail": None,
    "stopped_at": None, "request_limit": 100, "max_duration_s": None, "token_limit": None,
    "tool_call_limit": None, "max_stalls": None, "stream_idle_timeout_s": None,
    "stream_first_event_timeout_s": None, "loop_guard": {}, "conversation_request_limit": None,
    "conversation_tool_call_limit": None, "conversation_max_duration_s": None, "upstream_timeout_s": None,
    "admitted_requests": 0, "input_tokens": 0, "output_tokens": 0, "tool_calls": 0, "stalls": 0,
    "refused_requests": 0, "first_admitted_at": None, "metadata": {}, "cost_limit_usd": None,
    "cost_usd": Decimal(0), "reserved_usd": Decimal(0), "allowed_models": None,
    "cost_wait_s": None, "default_max_output_tokens": None, "unmetered_responses": 0, "budget_id": None,
    "strikes": 0, "pending_notes": 0, "thresholds": None,
    "created_at": datetime(2026, 1, 1, tzinfo=timezone.utc), "updated_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
}


def new_row(**columns: Any) -> dict[str, Any]:
    """A ``tasks`` row as PostgreSQL returns it for a new task, with ``columns`` changed."""
    unknown = set(columns) - set(_NEW_ROW)
    assert not unknown, f"not a tasks column: {unknown}"
    return {**_NEW_ROW, **columns}


def task_value(**columns: Any) -> Task:
    """The :class:`Task` of :func:`new_row` (``loop_guard`` may be a dict or a :class:`LoopGuard`)."""
    guard = columns.pop("loop_guard", {})
    return Task.from_row(new_row(loop_guard=guard.as_json() if isinstance(guard, LoopGuard) else guard,
                                 **columns))
