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

Which API a request speaks is decided once, by :func:`wire_format`; the provider
kind, the error shape and the stream's terminal events all follow from that format.

The conversation key comes from ``x-taskgate-conversation`` when the caller sets it
(it wins over everything), else from the agent's own session header, else from the
first instructions and user message (:func:`app.guard.fingerprint.conversation_key`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from decimal import Decimal
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app.admission import turn as agent_turn
from app.admission.admission import admit, authenticate
from app.admission.charge import charge_for
from app.admission.tokens import token_hash
from app.app_state import AppState, app_state
from app.budgets import room, runs
from app.budgets.keys import is_budget_key, run_id
from app.budgets.ledger import WindowKey
from app.config.schema import Provider
from app.errors import CLOSE, GatewayError, render_error, wire_status
from app.guard.ledger import GuardRequest
from app.guard.policy import Policy
from app.guard.request_text import conversation_key_of, text_actions_of
from app.guard.text_actions import guard_calls
from app.guard.text_turns import latest_answer_sha256, tail
from app.guard.repeated_output import OutputMonitor
from app.guard.result_prints import config_for, fingerprints_off_loop
from app.proxy import endpoints
from app.proxy.accounting import Accounting
from app.proxy.auth import require_known_token
from app.proxy.inbound import check_headers, read_body, token_from_headers
from app.proxy.json_offload import parse_json_body
from app.proxy.outcome import Watchdog
from app.proxy.relay import RelayResponse
from app.proxy.request_target import target
from app.proxy.model_field import rewrite_model
from app.proxy.notes import notice_for
from app.proxy.providers import (
    configured_models,
    default_provider,
    model_for_id,
    model_list_body,
    route_request,
)
from app.proxy.transport import UpstreamTarget
from app.proxy.upstream import request_headers, upstream_url
from app.proxy.usage_chunk import needs_usage
from app.request_ids import REQUEST_ID
from app.settings import Settings
from app.task import Task
from app.wire import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, UnknownWirePath, format_for_path
from app.wire.base import ProviderKind, WireFormat

logger = logging.getLogger(__name__)

#: Set by an operator or an orchestrator to name the conversation (one sub-agent, one
#: pass); wins over every agent session header and over the first-messages seed.
CONVERSATION_HEADER = "x-taskgate-conversation"


def wire_format(path: str, headers: dict[str, str] | None = None) -> WireFormat:
    """The wire format a request speaks, from its ``path``, and (for the GETs,
    ``headers`` given) the client's ``anthropic-version`` header: an Anthropic client
    gets Anthropic's shape and provider for any path (``GET /v1/models``). OpenAI's
    chat completions for paths no format claims (``GET /v1/models``, operator-added
    endpoints), so every error has a shape."""
    if headers is not None and "anthropic-version" in headers:
        return ANTHROPIC_MESSAGES
    try:
        return format_for_path(path)
    except UnknownWirePath:
        return CHAT_COMPLETIONS


def _headers(request: Request) -> dict[str, str]:
    """Request headers as a dict with lower-case names (last value wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}


def _session_header(headers: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in (CONVERSATION_HEADER, *names):
        value = headers.get(name)
        if value:
            return value
    return None


def _endpoint(request: Request) -> endpoints.Endpoint:
    """The allowlist entry for this request; 404 ``unknown_url`` (never forwarded)."""
    scope = request.scope
    found = endpoints.match(app_state(request.app).endpoints, scope["method"], scope["path"],
                            scope.get("raw_path"))
    if found is None:
        raise GatewayError(404, "invalid_request_error", "unknown_url",
                           f"taskgate does not proxy {scope['method']} {scope['path'][:200]}.",
                           dict(CLOSE))
    return found


def _checked_headers(request: Request) -> tuple[dict[str, str], str]:
    """The client's headers and task token, validated (401, 400) before anything else."""
    headers = _headers(request)
    token = token_from_headers(headers)
    check_headers(request.scope["headers"])
    return headers, token


def _upstream_target(request: Request, method: str, provider: Provider) -> UpstreamTarget:
    """Where the request goes upstream, with its headers, validated before admission:
    nothing the client sent can make the request fail to build after the reservation
    (400 ``invalid_request`` here if it would); the body is added once, after admission
    (:meth:`~app.proxy.transport.UpstreamTarget.with_body`)."""
    state = app_state(request.app)
    try:
        return state.client.target(
            method, upstream_url(provider, *target(request.scope)),
            request_headers(provider, request.scope["headers"], state.settings.forward_proxy_headers))
    except (httpx.InvalidURL, ValueError) as exc:
        raise GatewayError(400, "invalid_request_error", "invalid_request",
                           f"taskgate cannot forward this request ({type(exc).__name__}). Nothing "
                           "was forwarded or counted.") from None


async def proxy_post(request: Request) -> Response:
    """Admit and relay one POST (checks in the order of the module docstring); the
    gateway's notes to the model, when due, are added to the forwarded body
    (:mod:`app.proxy.notes`)."""
    state = app_state(request.app)
    settings = state.settings
    endpoint = _endpoint(request)
    path = request.scope["path"]  # what the allowlist matched (app.proxy.request_target)
    fmt = wire_format(path)
    headers, token = _checked_headers(request)
    pool = state.db
    hashed = token_hash(token)
    key = await runs.require_key(pool, token) if is_budget_key(token) else None
    if key is None and endpoint.kind == endpoints.FREE:  # a budget key's run task is known after the body
        task = await authenticate(pool, hashed)
        policy = Policy(task, settings)
    elif key is None:
        await require_known_token(pool, state.known_tokens, hashed)
    body = await read_body(request.stream(), headers.get("content-length"),
                           settings.max_body_bytes, settings.body_timeout_s)
    kind = fmt.provider_kind
    payload: dict[str, Any] = {}
    route = None
    if endpoint.kind == endpoints.EXTRA:
        provider = default_provider(state.gateway_config, kind)
    else:
        payload = await parse_json_body(body, settings.json_offload_bytes)  # off the loop when large
        requested = payload.get("model")
        route = route_request(state.gateway_config, kind, requested if isinstance(requested, str) else None)
        provider = route.provider
        if route.is_alias:  # only the model field changes; every other byte as sent
            body = rewrite_model(body, route.upstream_model)
            payload["model"] = route.upstream_model
    stream_requested = payload.get("stream") is True
    destination = _upstream_target(request, "POST", provider)
    conv_key, model, guard, continued, seen_answer = "", None, None, False, None
    view = None
    if endpoint.kind == endpoints.INFERENCE:
        try:
            view = fmt.parse_request(payload)
            conv_key = await conversation_key_of(_session_header(headers, settings.session_headers),
                                                 view.conversation_seed, settings.text_actions)
        except RecursionError:
            raise GatewayError(400, "invalid_request_error", "invalid_json",
                               "Request body is nested too deeply. Nothing was forwarded or counted.") from None
    request_id = REQUEST_ID.get()
    run_task = None
    if key is not None:  # a budget key: this run's own task, created on first sight
        run_task = await runs.ensure_run_task(pool, key, run_id(headers, settings.session_headers, conv_key),
                                              settings.default_request_limit, request_id)
        if endpoint.kind == endpoints.FREE:
            task = await authenticate(pool, "", run_task)
            policy = Policy(task, settings)
    if view is not None:
        model = view.model
        continued = view.continued
        turns = tail(payload) if settings.loop_guard_enabled else []
        seen_answer = latest_answer_sha256(turns)
        if settings.loop_guard_enabled and view.tool_results:
            guard = GuardRequest(conv_key, view.tool_calls, view.tool_results)
        elif settings.loop_guard_enabled and settings.text_actions and not view.tool_calls:
            calls, results = guard_calls(await text_actions_of(turns, conv_key))  # the structured path wins
            guard = GuardRequest(conv_key, calls, results) if calls else None
        if guard is not None:  # fingerprinted here, off the event loop when large, not under the row lock
            known = agent_turn.last_locked(hashed) if run_task is None else None
            configured = known or await authenticate(pool, hashed, run_task)
            guard.prints = await fingerprints_off_loop(guard.tool_calls, guard.tool_results,
                                                       config_for(configured, settings))
    elif isinstance(payload.get("model"), str):
        model = payload["model"]
    reservation, price, add_usage, charge = Decimal(0), None, False, None  # free endpoints cost nothing
    held: int | None = None
    budget_windows: tuple[WindowKey, ...] = ()
    budget_room = None
    admission_key = None  # its admission log row (app.db.commits): settled once
    if endpoint.kind != endpoints.FREE:
        charge = charge_for(route, body, payload, embeddings=path == "/v1/embeddings", what=f"POST {path}",
                            path=path)
        slot = await state.upstream_slots.take()  # 503 upstream_busy, uncounted, when none frees in time
        try:
            admitted = await slot.around(admit(pool, hashed, settings, guard, charge, conv_key, request_id,
                                               run_task))
        except GatewayError as err:
            if run_task is not None and err.status == 401:
                runs.forget(run_task)  # deleted by an operator: created again at the run's next request
            raise
        task, policy = admitted.task, admitted.policy
        reservation, price = admitted.reservation_usd, route.price if route else None
        held = admitted.reservation_id
        budget_windows, budget_room = admitted.budget_windows, admitted.budget_room
        admission_key = admitted.key
        notice = await notice_for(pool, settings, task, admitted.verdict, conv_key)
        add_usage = needs_usage(fmt, path, payload, task, settings.stream_usage)
        if admitted.output_max is not None:  # the bound the reservation assumed, enforced upstream
            payload = {**payload, admitted.output_max[0]: admitted.output_max[1]}
        if notice is not None or add_usage or admitted.output_max is not None:
            body, add_usage = _forwarded_body(fmt, body, payload, notice, add_usage)
    else:
        slot = await state.upstream_slots.take()
    guarded = settings.loop_guard_enabled and endpoint.kind == endpoints.INFERENCE
    accounting = Accounting(pool, settings, task.id, conv_key, guarded, stream=stream_requested,
                            price=price, reservation_usd=reservation, count_answer=continued,
                            metered=endpoint.kind == endpoints.INFERENCE, charge=charge if reservation else None,
                            seen_answer_sha256=seen_answer, request_id=request_id, endpoint=path,
                            model=route.requested_model if route is not None else model,
                            provider=route.provider_name if route is not None else None,
                            reservation_id=held, budget_windows=budget_windows, admission_key=admission_key,
                            cuts_repeating=guarded and policy.cuts_repeating, counted=endpoint.kind != endpoints.FREE)
    return RelayResponse(
        state.client, destination.with_body(body), fmt,
        stream_requested=stream_requested,
        watchdog=_watchdog(policy, settings),
        total_timeout_s=policy.upstream_timeout_s,
        on_finish=slot.releasing(accounting), endpoint=path, model=model,
        monitor=OutputMonitor(policy.repeated_output) if guarded else None,
        verdict=accounting if guarded else None,  # judged before the last byte (app.proxy.verdict)
    ).track(state.open_requests, task.id).redacting(state.redactor).hiding_usage(add_usage).adding_headers(
        room.headers(room.of_task(task), budget_room) if endpoint.kind != endpoints.FREE else [])


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
    fmt = wire_format(path, _headers(request))
    kind = fmt.provider_kind
    try:
        endpoint = _endpoint(request)
        _, token = _checked_headers(request)
        task: Task | None = None  # a budget key's GET belongs to no run's task
        if is_budget_key(token):
            await runs.require_key(state.db, token)
        else:
            task = await authenticate(state.db, token_hash(token))
        if state.config_from_file and endpoint.template.startswith("/v1/models"):
            return await _models_response(state, kind, path)
        provider = default_provider(state.gateway_config, kind)
        destination = _upstream_target(request, "GET", provider)
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
