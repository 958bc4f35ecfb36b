"""The core's one-line hooks into the console: metrics, log lines and the stop webhook.

- :func:`exchange_started` / :func:`exchange_finished`: around each relayed exchange
  (:class:`app.proxy.accounting.Accounting`).
- :func:`gateway_answered`: a POST the gateway answered itself (the error handler).
- :func:`latch_set`: a stop latch was set (:func:`app.db.tasks.set_latch`, inside the
  transaction; the webhook is delivered only once the stop is committed).
"""

from __future__ import annotations

import logging
from typing import Any

from app.console import metrics, webhook
from app.errors import GatewayError

logger = logging.getLogger("app.console")

#: Relay outcome kinds that are upstream failures (logged at warning).
_FAILURES = frozenset({"stalled", "truncated", "upstream_unreachable", "upstream_timeout"})


def exchange_started(stream: bool) -> None:
    if stream:
        metrics.OPEN_STREAMS.inc()


def exchange_finished(task_id: str, outcome: Any, started: float, stream: bool) -> None:
    """Metrics for one relayed exchange; a log line when upstream stalled or failed."""
    metrics.observe_outcome(outcome, started, stream)
    if outcome.kind in _FAILURES:
        detail = outcome.detail
        logger.warning("task %s: %s on %s (%s, status %s)", task_id, outcome.kind,
                       detail.get("endpoint"), detail.get("code"), outcome.status,
                       extra={"task_id": task_id, "outcome": outcome.kind, "code": detail.get("code"),
                              "endpoint": detail.get("endpoint")})


def gateway_answered(path: str, err: GatewayError) -> None:
    metrics.observe_gateway_error(path, err)


def latch_set(task_id: str, reason: str, event_id: int | None) -> None:
    """Count the stop; hand it to the webhook (delivered once the commit is visible)."""
    metrics.TASK_STOPS.labels(metrics.reason_label(reason)).inc()
    if event_id is not None:
        webhook.schedule(task_id, event_id)
