"""Refusals of a stopped task, and the sentences that explain them.

- :func:`stop_refusal`: the one 400/409 ``task_stopped`` error a stopped task's requests
  get, from admission (the request that latches and every later one) and from the stop
  watcher (open requests cut by a stop). :func:`stop_message` is its message, so the
  operator reads what the agent read; :func:`event_message` says in words what one
  ``task_events`` row records. Pure functions over task rows.
- :func:`count_refusal` / :func:`log_refusal`: every refusal is counted on the task
  (``refused_requests``) and logged one line per task at most every
  :data:`LOG_INTERVAL_S` seconds per process, with the task's refusal count.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import asyncpg

from app.admission.limits import counters_sentence, limit_since_stop
from app.admission.stop_sentences import explain
from app.db import sql
from app.errors import GatewayError, task_stopped
from app.guard.strike_rules import DEFAULT_ACTIONS, strike_event_sentence
from app.task import Task

logger = logging.getLogger("app.admission.admission")

LOG_INTERVAL_S = 10.0
_COUNT = sql.statement("refusal_count")

_last_logged: dict[str, float] = {}  # task id -> monotonic time of its last line


async def count_refusal(conn: asyncpg.Connection, task_id: str) -> int:
    """Add one to the task's ``refused_requests``; returns the new count."""
    refused: int = await conn.fetchval(_COUNT, task_id)
    return refused


def log_refusal(task_id: str, reason: str, refused: int, now: float | None = None) -> bool:
    """Log the refusal unless this task was logged less than :data:`LOG_INTERVAL_S`
    ago; returns whether a line was written."""
    now = time.monotonic() if now is None else now
    last = _last_logged.get(task_id)
    if last is not None and now - last < LOG_INTERVAL_S:
        return False
    if len(_last_logged) > 10_000:
        _last_logged.clear()
    _last_logged[task_id] = now
    logger.info("refused a request of task %s: %s (%d refused so far)", task_id, reason, refused)
    return True


def stop_refusal(task: Task, reason: str | None = None,
                 detail: Mapping[str, Any] | None = None) -> GatewayError:
    """The refusal of a request of ``task``: stopped for ``reason``
    with ``detail`` (a stop being set now), else for its recorded ``stop_reason`` and
    ``stop_detail``. Its counters are the task's as given."""
    if reason is None:
        reason, detail = task.stop_reason, task.stop_detail
    why = explain(reason, detail)
    if why is not None and (changed := limit_since_stop(task, reason, detail)) is not None:
        why += f" ({changed})"  # the counters are against the limit as it is now
    return task_stopped(task.id, reason or "stopped", counters_sentence(task), why)


def stop_message(task: Task) -> str | None:
    """The sentence a request of this stopped task is refused with (its counters as they
    are now); ``None`` while the task is active."""
    if task.status != "stopped":
        return None
    return stop_refusal(task).message


#: The limits a ``created`` event names, in this order.
_CREATED_LIMITS = ("request_limit", "token_limit", "cost_limit_usd", "max_duration_s", "tool_call_limit",
                   "max_stalls", "conversation_request_limit", "conversation_tool_call_limit",
                   "conversation_max_duration_s")


def _number(v: Any) -> str:
    """``5.0`` → ``5``; other values as they are."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def event_message(kind: str, reason: str | None, detail: Mapping[str, Any] | None) -> str:
    """One sentence for a ``task_events`` row (``kind``, ``reason``, ``detail``)."""
    d = detail or {}
    if kind == "stopped":
        why = explain(reason, d)
        return f"Stopped ({reason})" + (f": {why}." if why else ".")
    if kind == "resumed":
        return (f"Resumed by an operator ({reason}); it had stopped for "
                f"{d.get('previous_stop_reason')}.")
    if kind == "created":
        limits = ", ".join(f"{k}={_number(d[k])}" for k in _CREATED_LIMITS if d.get(k) is not None)
        return "Created" + (f" with {limits}." if limits else ".")
    if kind == "limits_changed":
        before, after = d.get("before") or {}, d.get("after") or {}
        changes = ", ".join(f"{k} {before.get(k)} → {v}" for k, v in after.items())
        return f"Limits changed: {changes}." if changes else "Limits changed."
    if kind == "loop_strike" or (kind == "loop_warning" and reason in DEFAULT_ACTIONS):
        return strike_event_sentence(kind, reason, d)
    if kind == "loop_warning":
        return (f"Loop guard warned the model: {d.get('tool_name', 'a tool')} repeated "
                f"{d.get('count', d.get('repeats', '?'))} times.")
    if kind == "stream_stalled":
        return f"Upstream stream stalled on {d.get('endpoint')} ({d.get('code')}); taskgate closed it."
    if kind == "stream_truncated":
        return f"Upstream stream on {d.get('endpoint')} ended without its terminal event ({d.get('code')})."
    if kind == "upstream_unreachable":
        return f"The upstream provider could not be reached for {d.get('endpoint')}."
    if kind == "cut_open_requests" and reason == "budget_paused":
        return (f"The pause of budget '{d.get('budget')}' cut {d.get('cut')} open request(s) on {d.get('process')}, "
                f"{d.get('seconds_since_stopped')} s after the pause (heard by {d.get('path')}).")
    if kind == "cut_open_requests":
        return (f"The stop ({reason}) cut {d.get('cut')} open request(s) on {d.get('process')}, "
                f"{d.get('seconds_since_stopped')} s after the latch (heard by {d.get('path')}).")
    if kind == "task_warning":  # a warning threshold crossed (app.budgets.task_thresholds)
        return str(d.get("message") or f"Task used {d.get('threshold')} % of its {reason}.")
    if kind == "upstream_timeout":
        return f"The upstream provider did not answer {d.get('endpoint')} in time."
    return kind.replace("_", " ").capitalize() + (f" ({reason})." if reason else ".")
