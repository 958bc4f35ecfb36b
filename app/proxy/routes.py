"""The proxied endpoints (``/v1/...``): check, authenticate, admit, relay.

Only the endpoints of the allowlist (:mod:`app.proxy.endpoints`) are forwarded.
Inference POSTs (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``,
``/v1/embeddings``, ``/v1/messages``) consume one unit of the task's allowance each.
Token counting (``/v1/messages/count_tokens``, ``/v1/responses/input_tokens``) and
the GETs (``/v1/models``, ``/v1/models/{id}``) are forwarded after authentication
without consuming allowance.

Order of checks, each answering in the endpoint's error shape; everything up to
admission depends on the client alone, so a refused request is never counted:
404 not an allowed endpoint → 401 missing token → 400 invalid header → 401 unknown
token (one indexed lookup, before the body is read) → 413/408 body too large or too
slow → 400 malformed JSON → 503 ``upstream_busy`` no upstream connection free within
``upstream_slot_wait_s`` (:mod:`app.proxy.capacity`) → admission (400 stopped — 409 on ``/v1/messages``, see
:meth:`app.wire.base.WireFormat.refusal` — 503 database unavailable) → upstream.

Which API a request speaks is decided once, at the edge: :class:`~app.proxy.request.ProxyRequest`
(:mod:`app.proxy.request`) is built once per POST, with the endpoint, the wire format, the
route, the payload and the conversation key, and passed down the pipeline of
:func:`proxy_post`; the provider kind, the error shape and the stream's terminal events
all follow from that format (an error raised before it exists is rendered by
:func:`error_response`, from the same :func:`~app.proxy.request.wire_format`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app.admission.admission import admit_request, authenticate
from app.admission.charge import Charge, charge_for
from app.admission.outcomes import Admission
from app.admission.request import AdmissionRequest
from app.admission.tokens import token_hash
from app.app_state import AppState, app_state
from app.budgets import room, runs
from app.budgets.keys import is_budget_key, run_id
from app.config.schema import Provider
from app.errors import GatewayError, render_error, wire_status
from app.guard.policy import Policy
from app.guard.repeated_output import OutputMonitor
from app.proxy.accounting import Accounting
from app.proxy.capacity import Slot
from app.proxy.notes import notice_for
from app.proxy.outcome import Watchdog
from app.proxy.providers import configured_models, default_provider, model_for_id, model_list_body
from app.proxy.relay import RelayResponse
from app.proxy.request import (
    ProxyRequest,
    Turn,
    checked_headers,
    find_endpoint,
    headers_of,
    read_request,
    read_turn,
    upstream_target,
    wire_format,
)
from app.proxy.upstream import request_headers, upstream_url
from app.proxy.usage_chunk import needs_usage
from app.request_ids import REQUEST_ID
from app.settings import Settings
from app.task import Task
from app.wire.base import ProviderKind, WireFormat

__all__ = ["error_response", "proxy_get", "proxy_post", "wire_format"]

logger = logging.getLogger(__name__)

async def proxy_post(request: Request) -> Response:
    """Admit and relay one POST, as the pipeline's steps: the edge's checks
    (:func:`~app.proxy.request.read_request`, in the order of the module docstring), a
    budget key's run task, the turn the loop guard judges, admission (none on a free
    endpoint), the body to forward with the gateway's notes to the model when due
    (:mod:`app.proxy.notes`), the relay with its accounting."""
    state = app_state(request.app)
    req = await read_request(request, state)
    request_id = REQUEST_ID.get()
    run_task = await _run_task(state, req, request_id)
    turn = await read_turn(req, state, run_task)
    if not req.counted:
        task = req.task or await authenticate(state.db, "", run_task)
        slot = await state.upstream_slots.take()
        return _relay(state, req, turn, Admission(task, Policy(task, state.settings)), slot, request_id)
    charge = charge_for(req.route, req.body, req.payload, embeddings=req.path == "/v1/embeddings",
                        what=f"POST {req.path}", path=req.path)
    slot = await state.upstream_slots.take()  # 503 upstream_busy, uncounted, when none frees in time
    admitted = await _admit(state, req, turn, charge, run_task, slot, request_id)
    body, add_usage = await _forwarded(state, req, admitted)
    return _relay(state, req, turn, admitted, slot, request_id, charge, body, add_usage)


async def _run_task(state: AppState, req: ProxyRequest, request_id: str | None) -> str | None:
    """A budget key's run: the id of its own task, created on first sight; ``None`` for a task token."""
    if req.key is None:
        return None
    settings = state.settings
    return await runs.ensure_run_task(state.db, req.key, run_id(req.headers, settings.session_headers,
                                                                req.conversation_key),
                                      settings.default_request_limit, request_id)


async def _admit(state: AppState, req: ProxyRequest, turn: Turn, charge: Charge, run_task: str | None, slot: Slot,
                 request_id: str | None) -> Admission:
    """:func:`~app.admission.admission.admit_request` while holding ``slot``; a run task deleted by an
    operator (401) is created again at the run's next request."""
    try:
        asked = AdmissionRequest(req.token_hash, run_task, turn.guard, charge, req.conversation_key, request_id)
        return await slot.around(admit_request(state.db, asked, state.settings))
    except GatewayError as err:
        if run_task is not None and err.status == 401:
            runs.forget(run_task)
        raise


async def _forwarded(state: AppState, req: ProxyRequest, admitted: Admission) -> tuple[bytes, bool]:
    """The body to forward for an admitted request, and whether streamed usage was asked for:
    as read, or with the loop warning, the output bound the reservation assumed (enforced
    upstream) and/or ``stream_options.include_usage`` added (:func:`_forwarded_body`)."""
    settings = state.settings
    notice = await notice_for(state.db, settings, admitted.task, admitted.verdict, req.conversation_key)
    add_usage = needs_usage(req.fmt, req.path, req.payload, admitted.task, settings.stream_usage)
    if notice is None and not add_usage and admitted.output_max is None:
        return req.body, False
    payload = req.payload
    if admitted.output_max is not None:
        payload = {**payload, admitted.output_max[0]: admitted.output_max[1]}
    return _forwarded_body(req.fmt, req.body, payload, notice, add_usage)


def _relay(state: AppState, req: ProxyRequest, turn: Turn, admitted: Admission, slot: Slot, request_id: str | None,
           charge: Charge | None = None, body: bytes | None = None, add_usage: bool = False) -> Response:
    """The relay of ``req`` (``body``: as read unless given), the slot released and the
    exchange accounted after its last byte."""
    settings = state.settings
    task, policy, route = admitted.task, admitted.policy, req.route
    guarded = settings.loop_guard_enabled and req.inference
    accounting = Accounting(state.db, settings, task.id, req.conversation_key, guarded, stream=req.stream,
                            price=route.price if route is not None and req.counted else None,
                            reservation_usd=admitted.reservation_usd, count_answer=turn.continued,
                            metered=req.inference, charge=charge if admitted.reservation_usd else None,
                            seen_answer_sha256=turn.seen_answer, request_id=request_id, endpoint=req.path,
                            model=route.requested_model if route is not None else turn.model,
                            provider=route.provider_name if route is not None else None,
                            reservation_id=admitted.reservation_id, budget_windows=admitted.budget_windows,
                            admission_key=admitted.key, cuts_repeating=guarded and policy.cuts_repeating,
                            counted=req.counted)
    return RelayResponse(
        state.client, req.destination.with_body(req.body if body is None else body), req.fmt,
        stream_requested=req.stream,
        watchdog=_watchdog(policy, settings),
        total_timeout_s=policy.upstream_timeout_s,
        on_finish=slot.releasing(accounting), endpoint=req.path, model=turn.model,
        monitor=OutputMonitor(policy.repeated_output) if guarded else None,
        verdict=accounting if guarded else None,  # judged before the last byte (app.proxy.verdict)
    ).track(state.open_requests, task.id).redacting(state.redactor).hiding_usage(add_usage).adding_headers(
        room.headers(room.of_task(task), admitted.budget_room) if req.counted else [])


def _forwarded_body(fmt: WireFormat, body: bytes, payload: dict[str, Any], notice: str | None,
                    add_usage: bool) -> tuple[bytes, bool]:
    """The body to forward: ``payload`` (which may carry the output maximum the dollar
    ceiling adds) with the loop warning ``notice`` added and/or streamed usage asked for
    (:meth:`~app.wire.base.WireFormat.with_stream_usage`), and whether usage was asked
    for. ``body`` as the client sent it (and logged) if the payload cannot be encoded:
    the request is admitted and must go out."""
    changed = fmt.with_stream_usage(payload) if add_usage else payload
    try:
        return json.dumps(fmt.inject_notice(changed, notice) if notice is not None else changed).encode(), add_usage
    except (ValueError, TypeError, RecursionError):
        logger.warning("could not rewrite an admitted request body; forwarded it unchanged")
        return body, False


async def proxy_get(request: Request) -> Response:
    """GETs of the allowlist (``/v1/models`` and ``/v1/models/{id}`` by default) are
    free: authenticated, never counted. Anthropic's shape and host when the client sends
    ``anthropic-version``."""
    state = app_state(request.app)
    settings = state.settings
    path = request.scope["path"]  # what the allowlist matched (app.proxy.request_target)
    fmt = wire_format(path, headers_of(request.scope))
    kind = fmt.provider_kind
    try:
        endpoint = find_endpoint(state, request.scope)
        _, token = checked_headers(request.scope)
        task: Task | None = None  # a budget key's GET belongs to no run's task
        if is_budget_key(token):
            await runs.require_key(state.db, token)
        else:
            task = await authenticate(state.db, token_hash(token))
        if state.config_from_file and endpoint.template.startswith("/v1/models"):
            return await _models_response(state, kind, path)
        provider = default_provider(state.gateway_config, kind)
        destination = upstream_target(state, request.scope, "GET", provider)
        slot = await state.upstream_slots.take()
    except GatewayError as err:
        return _render(fmt, err)
    return RelayResponse(
        state.client, destination.with_body(None), fmt,
        stream_requested=False, watchdog=_watchdog(Policy(task, settings) if task is not None else None, settings),
        total_timeout_s=settings.upstream_timeout_s,  # a GET: the task's own applies to POSTs
        on_finish=slot.releasing(_nothing), endpoint=path, model=None,
    ).redacting(state.redactor)


async def _models_response(state: AppState, kind: ProviderKind, path: str) -> Response:
    """``GET /v1/models`` and ``/v1/models/{id}`` answered from the configuration file;
    the list adds the own lists of providers configured with ``list_models: true``."""
    config = state.gateway_config
    if path.rstrip("/") != "/v1/models":
        body = model_for_id(config, kind, path.removeprefix("/v1/models/"))
        return Response(json.dumps(body), media_type="application/json")
    models = configured_models(config, kind)
    for name, provider in config.providers.items():
        if provider.list_models and provider.kind == kind:
            models += await _provider_models(state, name, provider)
    unique = {m["id"]: m for m in reversed(models)}  # first occurrence wins
    body = model_list_body(list(reversed(unique.values())), kind == "anthropic")
    return Response(json.dumps(body), media_type="application/json")


async def _provider_models(state: AppState, name: str, provider: Provider) -> list[dict[str, Any]]:
    """A provider's own ``GET /models`` list (its ``data``), or ``[]`` (logged) when it
    cannot be had within the connect timeout."""
    headers = request_headers(provider, [(b"anthropic-version", b"2023-06-01")]
                              if provider.kind == "anthropic" else [])
    try:
        async with asyncio.timeout(state.settings.upstream_connect_timeout_s):
            response = await state.client.get(upstream_url(provider, "/v1/models", ""), headers=headers)
            data = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, TimeoutError, ValueError, AttributeError) as exc:
        logger.warning("could not list the models of provider %s: %s", name, type(exc).__name__)
        return []
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(data, list) else []


async def _nothing(outcome: Any) -> None:
    return None


def _watchdog(policy: Policy | None, settings: Settings) -> Watchdog:
    """The stream watchdog of a request under ``policy`` (``None``: the settings', for a
    budget key's GET, which belongs to no task)."""
    return Watchdog(
        first_event_timeout_s=policy.first_event_timeout_s if policy else settings.stream_first_event_timeout_s,
        idle_timeout_s=policy.idle_timeout_s if policy else settings.stream_idle_timeout_s,
        heartbeats_reset=settings.heartbeats_reset_timers,
        close_grace_s=settings.stream_close_grace_s,
    )


def _render(fmt: WireFormat, err: GatewayError) -> Response:
    body, headers = render_error(fmt, err)
    response = Response(content=body, status_code=wire_status(fmt, err))
    response.raw_headers = headers
    return response


def error_response(path: str, err: GatewayError) -> Response:
    """Render a :class:`GatewayError` for ``path`` in its wire format's shape."""
    return _render(wire_format(path), err)
