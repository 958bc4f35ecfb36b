"""The stop webhook (``TASKGATE_STOP_WEBHOOK_URL``): tell someone when a task stops, or
a budget runs out (``budget.exhausted``, :func:`budget_payload`: once per budget window,
across processes, decided in admission), or reaches a warning threshold
(``budget.threshold``: once per budget, window, limit and threshold, across processes;
:mod:`app.budgets.thresholds`), and a task reaches one (``task.threshold``: once per
task, limit value and threshold, across processes; :mod:`app.budgets.task_thresholds`),
both :func:`threshold_payload`.

:func:`schedule` is called where the latch is set, inside its transaction. Delivery
runs off the request path in a background task that first waits until the
``stopped`` event row is visible from another connection (that is, committed; a
rolled-back latch is never announced), then POSTs :func:`stop_payload` as JSON with
up to ``stop_webhook_attempts`` attempts (backoff doubling from
``stop_webhook_backoff_s``). A 2xx answer is success. Every result is counted in
``taskgate_webhook_deliveries_total{result}``; failures are logged with the task id
and the receiver's host only (webhook URLs often embed a secret).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping
from urllib.parse import urlsplit

import asyncpg
import httpx

from app import events
from app.admission.refusals import stop_message
from app.console import metrics
from app.db import sql
from app.settings import Settings
from app.task import Task

logger = logging.getLogger("app.console.webhook")

_STOP_EVENT = sql.statement("webhook_stop_event")
#: Waits (seconds) between looks for the committed ``stopped`` event (about 8 s in all).
_VISIBILITY_WAITS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 2.0, 2.0)
_COUNTERS = ("admitted_requests", "request_limit", "input_tokens", "output_tokens", "tool_calls",
             "stalls", "token_limit", "tool_call_limit", "max_duration_s")

_active: "StopWebhook | None" = None


def slack_escape(text: str) -> str:
    """``text`` as Slack's ``text`` field reads it literally: ``&``, ``<`` and ``>``
    escaped (``<!channel>`` or ``<https://x|y>`` in a tool name or stop message would
    otherwise ping the channel or show a disguised link)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def stop_payload(row: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document for one stop. ``row`` is a ``tasks`` row plus ``event_reason``,
    ``event_detail`` and ``event_at`` of its ``stopped`` event. ``text`` makes it a
    valid Slack incoming-webhook message (escaped, :func:`slack_escape`); the other
    fields are the unescaped values."""
    task = replace(Task.from_row(row), status="stopped", stop_reason=row["event_reason"],
                   stop_detail=row["event_detail"])
    message = stop_message(task)
    counters = {k: row[k] for k in _COUNTERS}
    counters["total_tokens"] = row["input_tokens"] + row["output_tokens"]
    at: datetime = row["event_at"]
    return {
        "text": slack_escape(f"taskgate: task {row['id']} stopped ({row['event_reason']}). {message}"),
        "event": "task.stopped",
        "task_id": row["id"],
        "stop_reason": row["event_reason"],
        "stop_message": message,
        "stop_detail": row["event_detail"],
        "counters": counters,
        "stopped_at": at.astimezone(timezone.utc).isoformat(),
        "metadata": row.get("metadata") or {},
    }


def budget_payload(event: events.BudgetExhausted) -> dict[str, Any]:
    """The JSON document for a budget that ran out (``text``: a Slack message too)."""
    resets = event.resets_at.astimezone(timezone.utc).isoformat() if event.resets_at is not None else None
    return {
        "text": f"taskgate: budget {event.budget_id} exhausted ({event.what}). {event.error.message}",
        "event": "budget.exhausted",
        "budget_id": event.budget_id,
        "exhausted": event.what,
        "message": event.error.message,
        "window_start": event.window_start.astimezone(timezone.utc).isoformat(),
        "resets_at": resets,
    }


def threshold_payload(event: events.BudgetThreshold | events.TaskThreshold) -> dict[str, Any]:
    """The JSON document for a threshold crossed (``text``: a Slack message too), a
    budget's (``budget.threshold``) or a task's (``task.threshold``): its id, the limit and
    its value, what was spent and held (requests, tokens or US dollars, as numbers), the
    fraction used, a budget's window (``window_start``, ``resets_at``: ``None`` for a
    lifetime) and the sentence."""
    if isinstance(event, events.BudgetThreshold):
        subject: dict[str, Any] = {"event": "budget.threshold", "budget_id": event.budget_id}
        resets = event.window_end.astimezone(timezone.utc).isoformat() if event.window_end is not None else None
        window = {"window_start": event.window_start.astimezone(timezone.utc).isoformat(), "resets_at": resets}
    else:
        subject, window = {"event": "task.threshold", "task_id": event.task_id}, {}
    return {
        "text": slack_escape(f"taskgate: {event.message}"),
        **subject,
        "limit": event.limit,
        "threshold": event.threshold,
        "limit_value": event.limit_value,
        "spent": event.spent,
        "held": event.held,
        "fraction": event.fraction,
        **window,
        "message": event.message,
    }


class StopWebhook:
    """Delivers stop announcements for one gateway process."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        self.url = settings.stop_webhook_url or ""
        self.host = urlsplit(self.url).hostname or "?"
        self.pool = pool
        self.attempts = max(1, settings.stop_webhook_attempts)
        self.backoff_s = settings.stop_webhook_backoff_s
        self.client = httpx.AsyncClient(timeout=settings.stop_webhook_timeout_s, trust_env=False,
                                        follow_redirects=False)
        self.pending: set[asyncio.Task[None]] = set()

    def schedule(self, task_id: str, event_id: int) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(task_id, event_id))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _committed(self, event_id: int) -> Mapping[str, Any] | None:
        for wait in _VISIBILITY_WAITS_S:
            await asyncio.sleep(wait)
            try:
                row = await self.pool.fetchrow(_STOP_EVENT, event_id)
            except Exception:  # noqa: BLE001 - the database may come back
                logger.warning("stop webhook: cannot read stop event %s yet", event_id)
                continue
            if row is not None:
                return dict(row)
        return None  # rolled back (or the database stayed away): nothing to announce

    def schedule_budget(self, event: events.BudgetExhausted) -> None:
        self._schedule_post(budget_payload(event), f"budget {event.budget_id}", {})

    def schedule_threshold(self, event: events.BudgetThreshold | events.TaskThreshold) -> None:
        if isinstance(event, events.BudgetThreshold):
            self._schedule_post(threshold_payload(event), f"budget {event.budget_id}", {})
        else:
            self._schedule_post(threshold_payload(event), f"task {event.task_id}", {"task_id": event.task_id})

    def _schedule_post(self, payload: dict[str, Any], what: str, extra: dict[str, str]) -> None:
        body = json.dumps(payload, default=_number).encode()
        task = asyncio.get_running_loop().create_task(self._post(body, what, extra))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _deliver(self, task_id: str, event_id: int) -> None:
        row = await self._committed(event_id)
        if row is None:
            return
        body = json.dumps(stop_payload(row), default=str).encode()
        await self._post(body, f"task {task_id}", {"task_id": task_id})

    async def _post(self, body: bytes, what: str, extra: dict[str, str]) -> None:
        problem = ""
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = await self.client.post(self.url, content=body,
                                           headers={"content-type": "application/json"})
                if 200 <= r.status_code < 300:
                    metrics.WEBHOOK_DELIVERIES.labels("delivered").inc()
                    return
                problem = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
        metrics.WEBHOOK_DELIVERIES.labels("failed").inc()
        logger.error("stop webhook for %s to %s failed after %d attempts (%s)", what,
                     self.host, self.attempts, problem, extra=extra)

    async def close(self, grace_s: float = 5.0) -> None:
        """Let deliveries in flight finish for up to ``grace_s`` seconds, then cancel them."""
        if self.pending:
            _, late = await asyncio.wait(set(self.pending), timeout=grace_s)
            for task in late:
                task.cancel()
        await self.client.aclose()


def schedule(task_id: str, event_id: int) -> None:
    """Announce a stop once its transaction commits (no-op without a webhook URL)."""
    if _active is not None:
        _active.schedule(task_id, event_id)


def schedule_budget(event: events.BudgetExhausted) -> None:
    """Announce a budget's exhaustion (its first refusal in a window; no-op without a URL)."""
    if _active is not None:
        _active.schedule_budget(event)


def schedule_threshold(event: events.BudgetThreshold | events.TaskThreshold) -> None:
    """Announce a budget's or a task's threshold crossed (committed, once across
    processes; no-op without a URL)."""
    if _active is not None:
        _active.schedule_threshold(event)


def _number(value: Any) -> Any:
    """JSON for what ``json`` cannot encode: a Decimal as a number, anything else as text."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def start(settings: Settings, pool: asyncpg.Pool) -> None:
    """Enable the webhook for this process when ``stop_webhook_url`` is set."""
    global _active
    _active = StopWebhook(settings, pool) if settings.stop_webhook_url else None


async def stop() -> None:
    global _active
    hook, _active = _active, None
    if hook is not None:
        await hook.close()
