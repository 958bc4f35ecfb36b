"""Prometheus metrics (``prometheus-client``) and ``GET /metrics``.

Counters and histograms are fed from the core's events only (:mod:`app.events`, via
:mod:`app.console.listeners`): chiefly the outcome of every relayed exchange
(:func:`observe_outcome`) and the gateway's own answers (:func:`observe_gateway_error`).
Labels have bounded cardinality: endpoints, reasons and codes outside the known sets are
reported as ``other``; no task id. ``model`` is the name the client asked for when the
providers file names it exactly, else its family in the built-in price table
(``gpt-4o-mini`` for ``gpt-4o-mini-2024-07-18``), else the file's glob entry it matched
(``claude-*``), else ``other`` (:func:`model_label`); ``provider`` is the configured
provider's name. Requests the gateway answered itself have ``model`` and ``provider``
``none``. No ``*_created`` series (:func:`prometheus_client.disable_created_metrics`).

With ``taskgate serve --workers N`` the command sets ``PROMETHEUS_MULTIPROC_DIR``
before any worker imports this module, so every worker writes its samples there and
``/metrics`` sums them (the library's multiprocess mode).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import secrets
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from starlette.requests import Request
from starlette.responses import Response

from app.config import GatewayConfig
from app.config.prices import price_table
from app.errors import GatewayError
from app.stop_reasons import STOP_REASONS

if TYPE_CHECKING:
    from app.proxy.outcome import Outcome, OutcomeKind

disable_created_metrics()  # a *_created series beside every counter says nothing useful here

#: Label values of ``endpoint``; anything else is ``other``.
ENDPOINTS = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/messages",
    "/v1/messages/count_tokens", "/v1/responses/input_tokens", "/v1/models",
})
#: Label values of ``reason``: the gateway's own stop reasons (:data:`app.stop_reasons.StopReason`);
#: anything else (e.g. an operator's own stop reason code) is ``other``.
REASONS = STOP_REASONS
#: Label values of ``rule`` of the strike and note counters (the soft rules).
SOFT_RULES = frozenset({"repeated_output", "repeated_response", "no_progress"})
#: Label values of ``code`` of a stream cut.
CUT_CODES = frozenset({"stream_first_event_timeout", "stream_idle_timeout", "stream_truncated",
                       "stream_event_too_large"})
#: Relay outcome kind -> ``taskgate_requests_total`` outcome (any other: ``upstream_error``).
_OUTCOMES: dict[OutcomeKind, str] = {"completed": "forwarded", "disconnected": "forwarded", "stalled": "upstream_error",
             "truncated": "upstream_error", "upstream_unreachable": "upstream_error",
             "upstream_timeout": "upstream_error"}
_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_UPSTREAM_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

REQUESTS = Counter("taskgate_requests", "Proxied POSTs by endpoint, outcome (forwarded, refused, "
                   "invalid, unavailable, upstream_error), model and provider.",
                   ["endpoint", "outcome", "model", "provider"])
REFUSALS = Counter("taskgate_refusals",
                   "Requests refused with task_stopped (400; 409 on /v1/messages), by stop reason.", ["reason"])
TASK_STOPS = Counter("taskgate_task_stops", "Stop latches set, by stop reason.", ["reason"])
LOOP_WARNINGS = Counter("taskgate_loop_warnings", "Loop-guard warnings added to forwarded requests.")
LOOP_STRIKES = Counter("taskgate_loop_strikes", "Answers a soft loop rule struck (cut or withheld) without "
                       "stopping the task, by rule.", ["rule"])
LOOP_NOTES = Counter("taskgate_loop_notes", "Gateway notes (a strike's, a warning's, no_progress) added to "
                     "forwarded requests, by rule.", ["rule"])
NO_PROGRESS = Counter("taskgate_no_progress_signals", "Requests carrying a check re-run after other steps with "
                      "byte-identical output for no_progress_reruns times or more (noted or not).")
COST_HOLDS = Counter("taskgate_cost_holds", "Requests the dollar ceiling held until reservations in flight "
                     "settled, by how they ended (admitted, timed_out: 429 cost_reserved, refused).", ["outcome"])
COST_HOLD_SECONDS = Histogram("taskgate_cost_hold_seconds", "How long held requests waited, seconds.",
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
RESERVATION_RATIO = Histogram("taskgate_reservation_ratio",
                              "Per settled request of a task with a dollar ceiling: its worst-case "
                              "reservation divided by its actual cost (the headroom the bound costs).",
                              buckets=(1, 1.5, 2, 3, 5, 10, 20, 50, 100, 1000))
ADMISSION_SECONDS = Histogram("taskgate_admission_duration_seconds",
                              "Time admission took (database round trips included), seconds.",
                              buckets=_LATENCY_BUCKETS_S)
UPSTREAM_SECONDS = Histogram("taskgate_upstream_duration_seconds",
                             "From admission to the client's last byte of a relayed exchange, seconds.",
                             ["endpoint"], buckets=_UPSTREAM_BUCKETS_S)
TTFT_SECONDS = Histogram("taskgate_time_to_first_token_seconds",
                         "From admission to the first content event of a stream, seconds.",
                         ["endpoint"], buckets=_UPSTREAM_BUCKETS_S)
STREAM_CUTS = Counter("taskgate_stream_cuts", "Streams taskgate ended with a terminal error event, by "
                      "code (stalls and truncations).", ["code"])
OPEN_STREAMS = Gauge("taskgate_open_streams", "Streamed exchanges being relayed now.",
                     multiprocess_mode="livesum")
TOKENS = Counter("taskgate_tokens", "Tokens upstream reported, by direction (input, output), model "
                 "and provider.", ["direction", "model", "provider"])
COST = Counter("taskgate_cost_usd", "US dollars the relayed responses cost (settled: from usage at the "
               "model's price, or the whole reservation when a task with a ceiling got no usage), by "
               "model and provider.", ["model", "provider"])
TOOL_CALLS = Counter("taskgate_tool_calls", "Tool calls seen in relayed responses.")
MCP_CALLS = Counter("taskgate_mcp_calls", "tools/call requests through /mcp/<server>, by server, tool and "
                    "outcome (ok, error, refused, unreachable, timeout, no_result, client_closed).",
                    ["server", "tool", "outcome"])
#: Tool labels kept per server: tool names come from clients, so past this many a
#: server's other tools share the label ``other`` (a bounded number of series).
MCP_TOOL_LABELS = 100
_mcp_tools: dict[str, set[str]] = {}


def mcp_tool_label(server: str, tool: str) -> str:
    """``tool`` as a label of ``server``'s calls: itself while the server has fewer than
    :data:`MCP_TOOL_LABELS` tools labelled, else ``other``."""
    seen = _mcp_tools.setdefault(server, set())
    if tool in seen:
        return tool
    if len(seen) >= MCP_TOOL_LABELS or len(tool) > 128:
        return "other"
    seen.add(tool)
    return tool
#: Per budget (ids are the operator's own, as few as the budgets it creates).
BUDGET_SPENT = Gauge("taskgate_budget_spent_usd", "Settled US dollars of a budget in the window of its latest "
                     "settlement (any process).", ["budget"], multiprocess_mode="mostrecent")
BUDGET_USED = Gauge("taskgate_budget_used_fraction", "Fraction of a budget's limit (requests, tokens, dollars) "
                    "its current window used (1 = at the limit), as its latest threshold check read it (any "
                    "process with recent traffic; app.budgets.thresholds).", ["budget", "limit"],
                    multiprocess_mode="mostrecent")
BUDGET_REFUSALS = Counter("taskgate_budget_refusals", "Requests refused with 403 budget_exhausted, by budget.",
                          ["budget"])
#: Per limit and threshold (an integer percent, 0-100: at most 303 series), never per task:
#: task ids are unbounded, so a task's fraction used is in the admin API, not a gauge.
TASK_WARNINGS = Counter("taskgate_task_warnings", "Task warning thresholds crossed (announced once across "
                        "processes, app.budgets.task_thresholds), by limit and threshold percent.",
                        ["limit", "threshold"])
WEBHOOK_DELIVERIES = Counter("taskgate_webhook_deliveries", "Stop webhook deliveries by result "
                             "(delivered, failed).", ["result"])


def threshold_label(threshold: float) -> str:
    """A threshold (percent) as a bounded label: its whole percent, 0 to 100."""
    return str(min(100, max(0, int(threshold))))


@functools.cache
def child(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, looked up once (label values are bounded, so is the
    cache); saves the library's per-call validation and lock on the hot path."""
    return metric.labels(*labels)


_models: dict[str, str] = {}  # exact configured names -> themselves
_globs: tuple[str, ...] = ()  # the providers file's glob entries, "*" excepted
_providers: frozenset[str] = frozenset()
NONE = "none"


def configure(config: GatewayConfig) -> None:
    """Take the label values ``model`` and ``provider`` may have from the configuration."""
    global _globs, _providers
    names = [m.name for m in config.models]
    _models.clear()
    _models.update({n: n for n in names if not any(ch in n for ch in "*?[")})
    _globs = tuple(n for n in names if n != "*" and n not in _models)
    _providers = frozenset(config.providers)
    model_label.cache_clear()


@functools.lru_cache(maxsize=4096)
def model_label(model: str | None) -> str:
    """The bounded ``model`` label of a requested model (see the module docstring)."""
    if not model:
        return NONE
    if model in _models:
        return model
    for entry in price_table()["models"]:
        if fnmatch.fnmatchcase(model, entry["match"]):
            return entry["match"].rstrip("*").rstrip("-") or "other"
    for glob in _globs:
        if fnmatch.fnmatchcase(model, glob):
            return glob
    return "other"


def provider_label(provider: str | None) -> str:
    if not provider:
        return NONE
    return provider if provider in _providers else "other"


def endpoint_label(path: str) -> str:
    return path if path in ENDPOINTS else "other"


def reason_label(reason: str | None) -> str:
    return reason if reason in REASONS else "other"


def observe_outcome(outcome: Outcome, started: float, stream: bool, endpoint_path: str = "",
                    model: str | None = None, provider: str | None = None,
                    cost_usd: Decimal | None = None) -> None:
    """Count one relayed exchange from its :class:`app.proxy.outcome.Outcome`.

    ``started`` is ``time.monotonic()`` when it was admitted; ``stream`` whether it
    was counted in ``taskgate_open_streams``; ``model``, ``provider`` and ``cost_usd``
    (US dollars, ``None``: not priced) as :class:`app.events.ExchangeFinished` has them."""
    elapsed = time.monotonic() - started
    detail = outcome.detail
    endpoint = endpoint_label(endpoint_path or detail.get("endpoint") or "")
    m, p = model_label(model), provider_label(provider)
    child(REQUESTS, endpoint, _OUTCOMES.get(outcome.kind, "upstream_error"), m, p).inc()
    if cost_usd:
        child(COST, m, p).inc(float(cost_usd))
    child(UPSTREAM_SECONDS, endpoint).observe(elapsed)
    since_first = detail.get("seconds_since_first_content")
    if since_first is not None:
        child(TTFT_SECONDS, endpoint).observe(max(elapsed - since_first, 0.0))
    if outcome.kind in ("stalled", "truncated") and detail.get("code"):
        code = detail["code"]
        child(STREAM_CUTS, code if code in CUT_CODES else "other").inc()
    summary = outcome.summary
    if summary.usage is not None:
        child(TOKENS, "input", m, p).inc(summary.usage.input_tokens)
        child(TOKENS, "output", m, p).inc(summary.usage.output_tokens)
    if summary.tool_calls:
        TOOL_CALLS.inc(len(summary.tool_calls))
    if stream:
        OPEN_STREAMS.dec()


def observe_gateway_error(path: str, err: GatewayError) -> None:
    """Count a POST the gateway answered itself (never forwarded)."""
    if err.type == "task_stopped":
        outcome = "refused"
        child(REFUSALS, reason_label(err.code)).inc()
    elif err.status == 503:
        outcome = "unavailable"
    elif err.status >= 500:
        outcome = "upstream_error"
    else:
        outcome = "invalid"
    child(REQUESTS, endpoint_label(path), outcome, NONE, NONE).inc()


def latest() -> bytes:
    """The exposition of this process, or of all workers in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


async def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics``: Prometheus text format. With ``TASKGATE_METRICS_TOKEN`` set,
    requires ``Authorization: Bearer <token>`` (401 otherwise)."""
    expected = request.app.state.settings.metrics_token
    if expected:
        auth = request.headers.get("authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if not secrets.compare_digest(given.encode(), expected.encode()):
            return Response("Missing or wrong metrics token (Authorization: Bearer "
                            "<TASKGATE_METRICS_TOKEN>).\n", status_code=401,
                            headers={"WWW-Authenticate": "Bearer"}, media_type="text/plain")
    return Response(latest(), media_type=CONTENT_TYPE_LATEST)


def process_exit() -> None:
    """Drop this worker's live gauges from the multiprocess directory at shutdown."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(os.getpid())
