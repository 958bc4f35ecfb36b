"""The console's subscribers to the core's events (:mod:`app.events`): metrics, log
lines and the stop webhook. :func:`subscribe` is called once by
:func:`app.main.create_app`; the core never calls the console.

- exchange started / finished: ``taskgate_open_streams``, the request and latency
  metrics, a warning line when upstream stalled or failed, and the request log's row
  (:mod:`app.console.request_log`);
- admission done: ``taskgate_admission_duration_seconds``;
- loop warned: ``taskgate_loop_warnings_total``; loop struck:
  ``taskgate_loop_strikes_total{rule}``; loop noted: ``taskgate_loop_notes_total{rule}``
  and, for ``no_progress``, ``taskgate_no_progress_signals_total``;
- gateway answered: the refusal and error counters;
- cost settled: ``taskgate_reservation_ratio`` (reservation / actual cost);
- cost held: ``taskgate_cost_holds_total`` by outcome, ``taskgate_cost_hold_seconds``;
- latch set: ``taskgate_task_stops_total`` and the stop webhook (delivered only once
  the stop is committed, see :mod:`app.console.webhook`);
- MCP call: ``taskgate_mcp_calls_total{server,tool,outcome}`` and a log line;
- budget refused / spent / exhausted: ``taskgate_budget_refusals_total{budget}``,
  ``taskgate_budget_spent_usd{budget}`` and the stop webhook's ``budget.exhausted``
  (once per budget window);
- budget threshold: a warning line and the webhook's ``budget.threshold`` (once per
  budget, window, limit and threshold); budget usage: ``taskgate_budget_used_fraction``;
  task threshold: a warning line, ``taskgate_task_warnings_total`` and the webhook's
  ``task.threshold`` (no per-task gauge: task ids are unbounded).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app import events
from app.console import metrics, request_log, webhook

if TYPE_CHECKING:
    from app.proxy.outcome import OutcomeKind

logger = logging.getLogger("app.console")

#: Relay outcome kinds that are upstream failures (logged at warning).
_FAILURES: frozenset[OutcomeKind] = frozenset({"stalled", "truncated", "upstream_unreachable", "upstream_timeout"})


def exchange_started(event: events.ExchangeStarted) -> None:
    if event.stream:
        metrics.OPEN_STREAMS.inc()


def exchange_finished(event: events.ExchangeFinished) -> None:
    """Metrics for one relayed exchange; a log line when upstream stalled or failed."""
    outcome = event.outcome
    metrics.observe_outcome(outcome, event.started, event.stream, event.endpoint, event.model,
                            event.provider, event.cost_usd)
    if outcome.kind in _FAILURES:
        detail = outcome.detail
        logger.warning("task %s: %s on %s (%s, status %s)", event.task_id, outcome.kind,
                       detail.get("endpoint"), detail.get("code"), outcome.status,
                       extra={"task_id": event.task_id, "outcome": outcome.kind,
                              "code": detail.get("code"), "endpoint": detail.get("endpoint")})


def admission_done(event: events.AdmissionDone) -> None:
    metrics.ADMISSION_SECONDS.observe(event.seconds)


def loop_warned(event: events.LoopWarned) -> None:
    metrics.LOOP_WARNINGS.inc()


def loop_struck(event: events.LoopStruck) -> None:
    metrics.LOOP_STRIKES.labels(event.rule if event.rule in metrics.SOFT_RULES else "other").inc()


def loop_noted(event: events.LoopNoted) -> None:
    if event.delivered:
        metrics.LOOP_NOTES.labels(event.rule if event.rule in metrics.SOFT_RULES else "other").inc()
    if event.rule == "no_progress":
        metrics.NO_PROGRESS.inc()


def gateway_answered(event: events.GatewayAnswered) -> None:
    metrics.observe_gateway_error(event.path, event.error)


def cost_settled(event: events.CostSettled) -> None:
    if event.actual_usd > 0:
        metrics.RESERVATION_RATIO.observe(float(event.reservation_usd / event.actual_usd))


def cost_held(event: events.CostHeld) -> None:
    metrics.COST_HOLDS.labels(event.outcome).inc()
    metrics.COST_HOLD_SECONDS.observe(event.seconds)


def latch_set(event: events.LatchSet) -> None:
    """Count the stop; hand it to the webhook (delivered once the commit is visible)."""
    metrics.TASK_STOPS.labels(metrics.reason_label(event.reason)).inc()
    webhook.schedule(event.task_id, event.event_id)


def budget_refused(event: events.BudgetRefused) -> None:
    metrics.BUDGET_REFUSALS.labels(event.budget_id).inc()


def budget_spent(event: events.BudgetSpent) -> None:
    metrics.BUDGET_SPENT.labels(event.budget_id).set(float(event.cost_usd))


def budget_exhausted(event: events.BudgetExhausted) -> None:
    logger.warning("budget %s exhausted (%s) until %s", event.budget_id, event.what, event.resets_at or "raised",
                   extra={"budget_id": event.budget_id, "reason": event.what})
    webhook.schedule_budget(event)


def budget_threshold(event: events.BudgetThreshold) -> None:
    """A warning line and the webhook's ``budget.threshold``."""
    logger.warning("%s", event.message, extra={"budget_id": event.budget_id, "reason": event.limit})
    webhook.schedule_threshold(event)


def budget_usage(event: events.BudgetUsage) -> None:
    metrics.BUDGET_USED.labels(event.budget_id, event.limit).set(event.fraction)


def task_threshold(event: events.TaskThreshold) -> None:
    """A warning line, ``taskgate_task_warnings_total`` and the webhook's ``task.threshold``."""
    logger.warning("%s", event.message, extra={"task_id": event.task_id, "reason": event.limit})
    metrics.TASK_WARNINGS.labels(event.limit, metrics.threshold_label(event.threshold)).inc()
    webhook.schedule_threshold(event)


def mcp_call(event: events.McpCall) -> None:
    """``taskgate_mcp_calls_total`` and one log line per MCP tool call."""
    metrics.MCP_CALLS.labels(event.server, metrics.mcp_tool_label(event.server, event.tool), event.outcome).inc()
    logger.info("mcp %s/%s: %s", event.server, event.tool[:128], event.outcome,
                extra={"mcp_server": event.server, "tool_name": event.tool[:128], "outcome": event.outcome})


def subscribe() -> None:
    """Subscribe the console to the core's events (idempotent)."""
    events.EXCHANGE_STARTED.subscribe(exchange_started)
    events.EXCHANGE_FINISHED.subscribe(exchange_finished)
    events.EXCHANGE_FINISHED.subscribe(request_log.record)
    events.ADMISSION_DONE.subscribe(admission_done)
    events.LOOP_WARNED.subscribe(loop_warned)
    events.LOOP_STRUCK.subscribe(loop_struck)
    events.LOOP_NOTED.subscribe(loop_noted)
    events.GATEWAY_ANSWERED.subscribe(gateway_answered)
    events.LATCH_SET.subscribe(latch_set)
    events.BUDGET_REFUSED.subscribe(budget_refused)
    events.BUDGET_SPENT.subscribe(budget_spent)
    events.BUDGET_EXHAUSTED.subscribe(budget_exhausted)
    events.BUDGET_THRESHOLD.subscribe(budget_threshold)
    events.BUDGET_USAGE.subscribe(budget_usage)
    events.TASK_THRESHOLD.subscribe(task_threshold)
    events.COST_SETTLED.subscribe(cost_settled)
    events.COST_HELD.subscribe(cost_held)
    events.MCP_CALL.subscribe(mcp_call)
