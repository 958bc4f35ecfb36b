"""The proxied endpoints (``/v1/...``): authenticate, admit, relay.

Inference POSTs (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``,
``/v1/embeddings``, ``/v1/messages``) consume one unit of the task's allowance each.
Token counting (``/v1/messages/count_tokens``, ``/v1/responses/input_tokens``) and
every GET are forwarded after authentication without consuming allowance.

Order of checks for a POST, each answering in the endpoint's error shape:
413 body too large → 401 missing token → 400 malformed JSON → admission (401 unknown
token, 403 stopped, 503 database unavailable) → upstream.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.admission.admission import admit, authenticate
from app.admission.tokens import token_hash
from app.errors import GatewayError, unauthorized
from app.guard.detector import Action
from app.guard.fingerprint import conversation_key
from app.guard.ledger import GuardRequest
from app.proxy.accounting import Accounting
from app.proxy.relay import RelayResponse, Watchdog, render_error
from app.proxy.upstream import is_anthropic, request_headers, upstream_url
from app.wire import CHAT_COMPLETIONS, UnknownWirePath, format_for_path
from app.wire.base import WireFormat


#: POST paths that run inference and so consume allowance.
INFERENCE_PATHS = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/messages",
})
#: POST paths forwarded without consuming allowance (no inference happens).
FREE_POST_PATHS = frozenset({"/v1/messages/count_tokens", "/v1/responses/input_tokens"})

#: Added to the forwarded request when the loop guard warns (rule 6).
LOOP_NOTICE = (
    "[taskgate] You have called {tool} {count} times in a row with the same arguments and "
    "got the same result each time. Repeating it will not change the result. Take a "
    "different next step, or stop and report what is blocking you."
)


def wire_format(path: str) -> WireFormat:
    """The wire format for ``path``; OpenAI's shape for paths no format claims
    (``GET /v1/models``, unknown paths), so every error has a shape."""
    try:
        return format_for_path(path)
    except UnknownWirePath:
        return CHAT_COMPLETIONS


def _headers(request: Request) -> dict[str, str]:
    """Request headers as a dict with lower-case names (last value wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}


def _token(headers: dict[str, str]) -> str:
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    if headers.get("x-api-key"):
        return headers["x-api-key"].strip()
    raise unauthorized("Missing task token: send it as 'Authorization: Bearer <task token>' "
                       "or 'x-api-key: <task token>'.")


async def _read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise _too_large(max_bytes)
        parts.append(part)
    return b"".join(parts)


def _too_large(max_bytes: int) -> GatewayError:
    return GatewayError(413, "invalid_request_error", "request_too_large",
                        f"Request body exceeds taskgate's limit of {max_bytes} bytes "
                        "(TASKGATE_MAX_BODY_BYTES). Nothing was forwarded or counted.")


def _session_header(headers: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = headers.get(name)
        if value:
            return value
    return None


async def proxy_post(request: Request) -> Response:
    """Admit and relay one POST (checks in the order of the module docstring); the
    loop guard's warning, when due, is added to the forwarded body."""
    state = request.app.state
    settings = state.settings
    path = request.url.path
    if path not in INFERENCE_PATHS and path not in FREE_POST_PATHS:
        raise GatewayError(404, "invalid_request_error", "unknown_url",
                           f"taskgate does not proxy POST {path}.")
    fmt = wire_format(path)
    headers = _headers(request)
    body = await _read_body(request, settings.max_body_bytes)
    token = _token(headers)
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise GatewayError(400, "invalid_request_error", "invalid_json",
                           f"Request body is not valid JSON ({exc}). Nothing was forwarded or counted.") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "invalid_request_error", "invalid_json",
                           "Request body must be a JSON object. Nothing was forwarded or counted.")
    pool = state.db
    anthropic = is_anthropic(path)
    stream_requested = payload.get("stream") is True
    if path in FREE_POST_PATHS:
        task = await authenticate(pool, token_hash(token))
        conv_key = ""
        model = payload.get("model") if isinstance(payload.get("model"), str) else None
    else:
        view = fmt.parse_request(payload)
        model = view.model
        conv_key = conversation_key(_session_header(headers, settings.session_headers),
                                    view.conversation_seed)
        guard = None
        if settings.loop_guard_enabled and view.tool_results:
            guard = GuardRequest(conv_key, view.tool_calls, view.tool_results)
        admitted = await admit(pool, token_hash(token), settings, guard)
        task = admitted.task
        verdict = admitted.verdict
        if verdict is not None and verdict.action is Action.WARN:
            notice = LOOP_NOTICE.format(tool=verdict.detail.get("tool_name", "the same tool"),
                                        count=verdict.count)
            body = json.dumps(fmt.inject_notice(payload, notice)).encode()
    upstream_request = state.client.build_request(
        "POST", upstream_url(settings, path, request.url.query, anthropic),
        content=body, headers=request_headers(settings, headers, anthropic))
    return RelayResponse(
        state.client, upstream_request, fmt,
        stream_requested=stream_requested,
        watchdog=_watchdog(task, settings),
        total_timeout_s=settings.upstream_timeout_s,
        on_finish=Accounting(pool, settings, task["id"], conv_key,
                             settings.loop_guard_enabled and path in INFERENCE_PATHS),
        endpoint=path, model=model,
    ).track(state.open_requests, task["id"])  # a stop of the task cuts it (app/proxy/stop_watch.py)


async def proxy_get(request: Request) -> Response:
    """GETs (``/v1/models`` and friends) are free: authenticated, never counted."""
    state = request.app.state
    settings = state.settings
    path = request.url.path
    headers = _headers(request)
    task = await authenticate(state.db, token_hash(_token(headers)))
    anthropic = is_anthropic(path, headers)
    upstream_request = state.client.build_request(
        "GET", upstream_url(settings, path, request.url.query, anthropic),
        headers=request_headers(settings, headers, anthropic))
    return RelayResponse(
        state.client, upstream_request, wire_format("/v1/messages" if anthropic else path),
        stream_requested=False, watchdog=_watchdog(task, settings),
        total_timeout_s=settings.upstream_timeout_s,
        on_finish=_nothing, endpoint=path, model=None,
    )


#: The proxy's routes: plain Starlette routes (no FastAPI parameter machinery on the
#: hot path), outside the OpenAPI docs.
routes = [
    Route("/v1/{rest:path}", proxy_post, methods=["POST"], include_in_schema=False),
    Route("/v1/{rest:path}", proxy_get, methods=["GET"], include_in_schema=False),
]


async def _nothing(outcome: Any) -> None:
    return None


def _watchdog(task: dict[str, Any], settings: Any) -> Watchdog:
    idle = task.get("stream_idle_timeout_s")
    first = task.get("stream_first_event_timeout_s")
    return Watchdog(
        first_event_timeout_s=settings.stream_first_event_timeout_s if first is None else first,
        idle_timeout_s=settings.stream_idle_timeout_s if idle is None else idle,
        heartbeats_reset=settings.heartbeats_reset_timers,
    )


def error_response(path: str, err: GatewayError) -> Response:
    """Render a :class:`GatewayError` for ``path`` in its wire format's shape."""
    body, headers = render_error(wire_format(path), err)
    response = Response(content=body, status_code=err.status)
    response.raw_headers = headers
    return response

