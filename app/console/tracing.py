"""OpenTelemetry traces (optional: ``pip install 'taskgate[otel]'``), on when the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set.

One SERVER span per proxied POST (``/v1/...``), following the OpenTelemetry GenAI semantic
conventions: named ``{gen_ai.operation.name} {gen_ai.request.model}`` (``chat gpt-4o-mini``),
with ``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.provider.name``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.time_to_first_chunk``
(seconds) and taskgate's own ``taskgate.task.id``, ``taskgate.conversation.key``,
``taskgate.admission.outcome`` (``admitted`` / ``refused`` / ``invalid`` / ``unavailable``),
``taskgate.verdict`` (the exchange's outcome), ``taskgate.stop.reason``. Child spans:
``taskgate.admission`` (its duration) and ``taskgate.upstream`` (CLIENT, the exchange from
admission to the client's last byte). Span events: ``gen_ai.tool.call`` for each tool call
seen in the response (``gen_ai.tool.name``), ``taskgate.stop`` when the task was stopped,
``taskgate.cut`` when the stream was cut.

A ``tools/call`` through ``/mcp/<server>`` gets its own SERVER span, named
``execute_tool {gen_ai.tool.name}``, with ``gen_ai.operation.name`` ``execute_tool``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id`` (the ledger's id), ``taskgate.mcp.server``,
``taskgate.task.id`` and ``taskgate.verdict`` (``ok``, ``error``, ``refused``, ...).

An incoming W3C ``traceparent`` continues the client's trace; the request forwarded
upstream carries a ``traceparent`` naming the gateway's span (the middleware rewrites the
header before the core forwards headers as sent). The spans are fed by the core's events
(:mod:`app.events`) on the request's own task, through a context variable.
Exporter, batching, service name and sampling are the SDK's, from the standard
``OTEL_*`` variables (``OTEL_SERVICE_NAME`` defaults to ``taskgate``).
"""

from __future__ import annotations

import logging
import os
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import events

logger = logging.getLogger("app.console")

#: gen_ai.operation.name per endpoint (GenAI semantic conventions).
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/messages": "chat", "/v1/responses": "chat",
              "/v1/completions": "text_completion", "/v1/embeddings": "embeddings"}


@dataclass(slots=True)
class _Request:
    span: Any
    started_ns: int = field(default_factory=time.time_ns)
    upstream: Any = None


_current: ContextVar[_Request | None] = ContextVar("taskgate_trace", default=None)
_tracer: Any = None
_provider: Any = None


def enabled(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether traces are asked for (an OTLP endpoint is configured)."""
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def setup() -> bool:
    """Create the tracer provider and exporter when :func:`enabled`; returns whether
    tracing is on. Without the ``otel`` extra installed it logs one line and stays off."""
    global _tracer, _provider
    if _tracer is not None or not enabled():
        return _tracer is not None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed "
                       "(pip install 'taskgate[otel]'); no traces")
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "taskgate")})
    _provider = TracerProvider(resource=resource)
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracer = _provider.get_tracer("taskgate")
    return True


def shutdown() -> None:
    """Flush and stop the exporter (at shutdown)."""
    if _provider is not None:
        _provider.shutdown()


class TraceMiddleware:
    """ASGI middleware: one span per ``POST /v1/...``; rewrites ``traceparent`` for upstream."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" \
                or not scope["path"].startswith(("/v1/", "/mcp/")) or _tracer is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        propagator = TraceContextTextMapPropagator()
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                   if k in (b"traceparent", b"tracestate")}
        parent = propagator.extract(carrier)
        path = scope["path"]
        span = _tracer.start_span(f"POST {path}", context=parent, kind=trace.SpanKind.SERVER,
                                  attributes={"http.request.method": "POST", "url.path": path,
                                              "gen_ai.operation.name": _operation(path)})
        out: dict[str, str] = {}
        propagator.inject(out, context=trace.set_span_in_context(span))
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"traceparent", b"tracestate")]
        headers += [(k.encode(), v.encode()) for k, v in out.items()]
        state = _Request(span)
        token = _current.set(state)
        status: list[int] = []

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app({**scope, "headers": headers}, receive, send_status)
        finally:
            _current.reset(token)
            if status:
                span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_status(trace.Status(trace.StatusCode.ERROR))
            if state.upstream is not None:
                state.upstream.end()
            span.end()


def _operation(path: str) -> str:
    """gen_ai.operation.name of a traced path (an MCP message is a tool's execution)."""
    return "execute_tool" if path.startswith("/mcp/") else OPERATIONS.get(path, "chat")


def mcp_call(event: events.McpCall) -> None:
    """The span of a ``tools/call`` through ``/mcp/<server>``: ``execute_tool {tool}``
    (GenAI semantic conventions) with the tool, the call's ledger id and the outcome."""
    state = _current.get()
    if state is None:
        return
    span = state.span
    span.update_name(f"execute_tool {event.tool}")
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool,
                             "taskgate.mcp.server": event.server, "taskgate.verdict": event.outcome}
    if event.call_id is not None:
        attrs["gen_ai.tool.call.id"] = event.call_id
    if event.task_id is not None:
        attrs["taskgate.task.id"] = event.task_id
    span.set_attributes(attrs)


def exchange_started(event: events.ExchangeStarted) -> None:
    state = _current.get()
    if state is None or _tracer is None:
        return
    from opentelemetry import trace

    state.span.set_attribute("taskgate.task.id", event.task_id)
    state.span.set_attribute("taskgate.admission.outcome", "admitted")
    state.upstream = _tracer.start_span("taskgate.upstream", context=trace.set_span_in_context(state.span),
                                        kind=trace.SpanKind.CLIENT)


def exchange_finished(event: events.ExchangeFinished) -> None:
    state = _current.get()
    if state is None:
        return
    span, outcome = state.span, event.outcome
    operation = OPERATIONS.get(event.endpoint, "chat")
    attrs: dict[str, Any] = {"taskgate.task.id": event.task_id, "taskgate.verdict": outcome.kind}
    if event.model:
        attrs["gen_ai.request.model"] = event.model
        span.update_name(f"{operation} {event.model}")
    if event.provider:
        attrs["gen_ai.provider.name"] = event.provider
    if event.conversation_key:
        attrs["taskgate.conversation.key"] = event.conversation_key
    usage = outcome.summary.usage
    if usage is not None:
        attrs["gen_ai.usage.input_tokens"] = usage.input_tokens
        attrs["gen_ai.usage.output_tokens"] = usage.output_tokens
    if event.cost_usd is not None:
        attrs["taskgate.cost_usd"] = float(event.cost_usd)
    since_first = outcome.detail.get("seconds_since_first_content")
    if since_first is not None:
        attrs["gen_ai.response.time_to_first_chunk"] = max(time.monotonic() - event.started - since_first, 0.0)
    span.set_attributes(attrs)
    for call in outcome.summary.tool_calls:
        span.add_event("gen_ai.tool.call", {"gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.call_id})
    if outcome.kind == "stopped":
        span.set_attribute("taskgate.stop.reason", str(outcome.detail.get("code") or "stopped"))
        span.add_event("taskgate.stop", {"taskgate.stop.reason": str(outcome.detail.get("code") or "stopped")})
    elif outcome.kind in ("stalled", "truncated"):
        span.add_event("taskgate.cut", {"taskgate.cut.code": str(outcome.detail.get("code") or outcome.kind)})
    if state.upstream is not None:
        if outcome.status is not None:
            state.upstream.set_attribute("http.response.status_code", outcome.status)
        state.upstream.end()
        state.upstream = None


def admission_done(event: events.AdmissionDone) -> None:
    state = _current.get()
    if state is None or _tracer is None:
        return
    from opentelemetry import trace

    end = time.time_ns()
    _tracer.start_span("taskgate.admission", context=trace.set_span_in_context(state.span),
                       start_time=end - int(event.seconds * 1e9)).end(end_time=end)


def gateway_answered(event: events.GatewayAnswered) -> None:
    state = _current.get()
    if state is None:
        return
    err = event.error
    outcome = "refused" if err.type == "task_stopped" else "unavailable" if err.status == 503 else "invalid"
    state.span.set_attribute("taskgate.admission.outcome", outcome)
    if err.type == "task_stopped" and err.code:
        state.span.set_attribute("taskgate.stop.reason", err.code)
        state.span.add_event("taskgate.stop", {"taskgate.stop.reason": err.code})


def latch_set(event: events.LatchSet) -> None:
    state = _current.get()
    if state is not None:
        state.span.set_attribute("taskgate.stop.reason", event.reason)
        state.span.add_event("taskgate.stop", {"taskgate.stop.reason": event.reason, "taskgate.task.id": event.task_id})


def subscribe() -> None:
    events.EXCHANGE_STARTED.subscribe(exchange_started)
    events.EXCHANGE_FINISHED.subscribe(exchange_finished)
    events.ADMISSION_DONE.subscribe(admission_done)
    events.GATEWAY_ANSWERED.subscribe(gateway_answered)
    events.LATCH_SET.subscribe(latch_set)
    events.MCP_CALL.subscribe(mcp_call)
