"""One proxied request as the edge reads it: :class:`ProxyRequest`, built once, passed down.

:func:`read_request` runs the checks that depend on the client alone, in the order of
:mod:`app.proxy.routes` (404 not an allowed endpoint → 401 missing token → 400 invalid
header → 401 unknown token, before the body is read → 413/408 body → 400 malformed JSON →
400 not forwardable → 400 nested too deeply), so a refused request is never counted.
What it decides is decided here only: the wire format (:func:`wire_format`, from the
path), the endpoint's kind, the route and its provider, the conversation key. Then
:func:`read_turn` reads what the loop guard will judge (:class:`Turn`), its fingerprints
computed off the event loop before the row lock.

The conversation key comes from ``x-taskgate-conversation`` when the caller sets it
(it wins over everything), else from the agent's own session header, else from the
first instructions and user message (:func:`app.guard.fingerprint.conversation_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request
from starlette.types import Scope

from app.admission import turn as agent_turn
from app.admission.admission import authenticate
from app.admission.tokens import token_hash
from app.app_state import AppState
from app.budgets import runs
from app.budgets.keys import is_budget_key
from app.config.routing import Route
from app.config.schema import GatewayConfig, Provider
from app.errors import CLOSE, GatewayError
from app.guard.judge import GuardRequest
from app.guard.request_text import conversation_key_of, text_actions_of
from app.guard.result_prints import config_for, fingerprints_off_loop
from app.guard.text_actions import guard_calls
from app.guard.text_turns import latest_answer_sha256, tail
from app.proxy import endpoints
from app.proxy.auth import require_known_token
from app.proxy.inbound import check_headers, read_body, token_from_headers
from app.proxy.json_offload import parse_json_body
from app.proxy.model_field import rewrite_model
from app.proxy.providers import default_provider, route_request
from app.proxy.request_target import target
from app.proxy.transport import UpstreamTarget
from app.proxy.upstream import request_headers, upstream_url
from app.settings import Settings
from app.task import Task
from app.wire import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, UnknownWirePath, format_for_path
from app.wire.base import ProviderKind, RequestView, WireFormat

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


class _Routes:
    """:func:`~app.proxy.providers.route_request`, remembered per model name for the
    configuration it was asked with (a pure function of both; read once per process):
    ~8 µs a request (two passes over the ``models`` table, a ``Price`` built from the
    price table) become a lookup. Errors are not remembered; names longer than
    :data:`NAME_CHARS` and more than :data:`SIZE` names are not kept."""

    NAME_CHARS = 256
    SIZE = 1024

    def __init__(self) -> None:
        self._config: GatewayConfig | None = None
        self._routes: dict[tuple[ProviderKind, str | None], Route] = {}

    def route(self, config: GatewayConfig, kind: ProviderKind, model: str | None) -> Route:
        """The route for ``model`` on an endpoint of ``kind``; raises as ``route_request``."""
        if config is not self._config:
            self._config, self._routes = config, {}
        key = (kind, model)
        found = self._routes.get(key)
        if found is None:
            found = route_request(config, kind, model)
            if model is None or len(model) <= self.NAME_CHARS:
                if len(self._routes) >= self.SIZE:
                    self._routes.clear()
                self._routes[key] = found
        return found


_ROUTES = _Routes()


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """One POST as the edge read it (module docstring); never changed afterwards.

    ``path`` is what the allowlist matched (:mod:`app.proxy.request_target`); ``headers``
    the client's, names lower-case (last value wins); ``task`` the task of a task token
    on a free endpoint (authenticated before the body), else ``None``; ``body`` the bytes
    to forward (the model field rewritten for an alias), ``payload`` their JSON (``{}``
    for an operator-added endpoint, which is forwarded as sent); ``view`` the parsed
    inference request (``None`` on other endpoints); ``destination`` where it goes,
    validated before admission, without its body."""

    endpoint: endpoints.Endpoint
    path: str
    fmt: WireFormat
    headers: dict[str, str]
    token_hash: str
    key: runs.BudgetKey | None
    task: Task | None
    body: bytes
    payload: dict[str, Any]
    route: Route | None
    destination: UpstreamTarget
    view: RequestView | None
    conversation_key: str

    @property
    def counted(self) -> bool:
        """Whether the request takes a unit of the task's allowance (not a free endpoint)."""
        return self.endpoint.kind != endpoints.FREE

    @property
    def inference(self) -> bool:
        """An inference endpoint: metered, and the loop guard's to judge."""
        return self.endpoint.kind == endpoints.INFERENCE

    @property
    def stream(self) -> bool:
        """The body asks for a stream (``"stream": true``)."""
        return self.payload.get("stream") is True


@dataclass(frozen=True, slots=True)
class Turn:
    """What the loop guard reads in one request: the ``model`` it names, whether the
    conversation is ``continued``, the SHA-256 of the answer it carries back
    (``seen_answer``) and the tool calls and results to judge (``guard``, fingerprinted;
    ``None``: nothing to judge)."""

    model: str | None = None
    continued: bool = False
    seen_answer: str | None = None
    guard: GuardRequest | None = None


async def read_request(request: Request, state: AppState) -> ProxyRequest:
    """The POST ``request`` read and checked at the edge (module docstring); raises
    :class:`~app.errors.GatewayError` (404, 401, 400, 413, 408) and never counts."""
    settings = state.settings
    endpoint = find_endpoint(state, request.scope)
    path: str = request.scope["path"]
    fmt = wire_format(path)
    headers, token = checked_headers(request.scope)
    hashed = token_hash(token)
    key = await runs.require_key(state.db, token) if is_budget_key(token) else None
    task = None
    if key is None and endpoint.kind == endpoints.FREE:  # a budget key's run task is known after the body
        task = await authenticate(state.db, hashed)
    elif key is None:
        await require_known_token(state.db, state.known_tokens, hashed)
    body = await read_body(request.stream(), headers.get("content-length"),
                           settings.max_body_bytes, settings.body_timeout_s)
    payload: dict[str, Any] = {}
    route = None
    if endpoint.kind == endpoints.EXTRA:
        provider = default_provider(state.gateway_config, fmt.provider_kind)
    else:
        payload = await parse_json_body(body, settings.json_offload_bytes)  # off the loop when large
        requested = payload.get("model")
        named = requested if isinstance(requested, str) else None
        route = _ROUTES.route(state.gateway_config, fmt.provider_kind, named)
        provider = route.provider
        if route.is_alias:  # only the model field changes; every other byte as sent
            body = rewrite_model(body, route.upstream_model)
            payload["model"] = route.upstream_model
    destination = upstream_target(state, request.scope, "POST", provider)
    view, conversation = None, ""
    if endpoint.kind == endpoints.INFERENCE:
        view, conversation = await _conversation(fmt, payload, headers, settings)
    return ProxyRequest(endpoint, path, fmt, headers, hashed, key, task, body, payload, route, destination, view,
                        conversation)


async def read_turn(req: ProxyRequest, state: AppState, run_task: str | None) -> Turn:
    """What the loop guard judges in ``req`` (``run_task``: a budget key's run task),
    its fingerprints computed here, off the event loop when large, not under the row lock."""
    view = req.view
    if view is None:
        model = req.payload.get("model")
        return Turn(model if isinstance(model, str) else None)
    settings = state.settings
    turns = tail(req.payload) if settings.loop_guard_enabled else []
    guard = None
    if settings.loop_guard_enabled and view.tool_results:
        guard = GuardRequest(req.conversation_key, view.tool_calls, view.tool_results)
    elif settings.loop_guard_enabled and settings.text_actions and not view.tool_calls:
        calls, results = guard_calls(await text_actions_of(turns, req.conversation_key))  # structured wins
        guard = GuardRequest(req.conversation_key, calls, results) if calls else None
    if guard is not None:
        known = agent_turn.last_locked(req.token_hash) if run_task is None else None
        configured = known or await authenticate(state.db, req.token_hash, run_task)
        guard.prints = await fingerprints_off_loop(guard.tool_calls, guard.tool_results,
                                                   config_for(configured, settings))
    return Turn(view.model, view.continued, latest_answer_sha256(turns), guard)


def headers_of(scope: Scope) -> dict[str, str]:
    """Request headers as a dict with lower-case names (last value wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def find_endpoint(state: AppState, scope: Scope) -> endpoints.Endpoint:
    """The allowlist entry for this request; 404 ``unknown_url`` (never forwarded)."""
    found = endpoints.match(state.endpoints, scope["method"], scope["path"], scope.get("raw_path"))
    if found is None:
        raise GatewayError(404, "invalid_request_error", "unknown_url",
                           f"taskgate does not proxy {scope['method']} {scope['path'][:200]}.",
                           dict(CLOSE))
    return found


def checked_headers(scope: Scope) -> tuple[dict[str, str], str]:
    """The client's headers and task token, validated (401, 400) before anything else."""
    headers = headers_of(scope)
    token = token_from_headers(headers)
    check_headers(scope["headers"])
    return headers, token


def upstream_target(state: AppState, scope: Scope, method: str, provider: Provider) -> UpstreamTarget:
    """Where the request goes upstream, with its headers, validated before admission:
    nothing the client sent can make the request fail to build after the reservation
    (400 ``invalid_request`` here if it would); the body is added once, after admission
    (:meth:`~app.proxy.transport.UpstreamTarget.with_body`)."""
    try:
        return state.client.target(
            method, upstream_url(provider, *target(scope)),
            request_headers(provider, scope["headers"], state.settings.forward_proxy_headers))
    except (httpx.InvalidURL, ValueError) as exc:
        raise GatewayError(400, "invalid_request_error", "invalid_request",
                           f"taskgate cannot forward this request ({type(exc).__name__}). Nothing "
                           "was forwarded or counted.") from None


async def _conversation(fmt: WireFormat, payload: dict[str, Any], headers: dict[str, str],
                        settings: Settings) -> tuple[RequestView, str]:
    """An inference body's view and conversation key; 400 ``invalid_json`` when nested too deeply."""
    try:
        view = fmt.parse_request(payload)
        return view, await conversation_key_of(_session_header(headers, settings.session_headers),
                                               view.conversation_seed, settings.text_actions)
    except RecursionError:
        raise GatewayError(400, "invalid_request_error", "invalid_json",
                           "Request body is nested too deeply. Nothing was forwarded or counted.") from None


def _session_header(headers: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in (CONVERSATION_HEADER, *names):
        value = headers.get(name)
        if value:
            return value
    return None
