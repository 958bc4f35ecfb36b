"""``/mcp/<name>``: MCP's streamable HTTP transport between an agent and a configured MCP
server (``mcp_servers:`` in ``TASKGATE_CONFIG``), with the agent's tool calls admitted,
counted and loop-guarded on its task.

Every request authenticates with the task token (``Authorization: Bearer``, as for model
calls), or a budget key with its run named (``x-taskgate-run`` or a session header: the
run's task, the same as its model calls'); in this order, before anything reaches the
server: an unknown server is 404, a missing or unknown token 401, a body that is not one
JSON-RPC 2.0 message 400, an ``Mcp-Method`` / ``Mcp-Name`` header that disagrees with the
body 400.

- ``tools/call``: admitted (:func:`app.mcp.admission.admit_call`), forwarded, the server's
  answer read whole (bounded by ``TASKGATE_MCP_MAX_ANSWER_BYTES``, within the tool's
  timeout), its result recorded and judged (:func:`app.mcp.admission.record_result`), and only then
  the answer is released, byte for byte as the server sent it. A refused call is a
  JSON-RPC error (HTTP 200, code :data:`~app.mcp.jsonrpc.TASK_STOPPED`, the stop sentence
  model calls get, ``data.type`` ``task_stopped`` and ``data.code`` the reason); a server
  that is down, fails or times out is a JSON-RPC error naming it
  (:data:`~app.mcp.jsonrpc.SERVER_UNAVAILABLE`), the call counted without a result. A
  client that goes away while it waits cancels the request to the server.
- Every other message (``initialize``, ``tools/list``, ``ping``, ``resources/*``,
  ``prompts/*``, notifications, responses to the server) and the ``GET`` (the server's
  event stream) and ``DELETE`` (end of session) of the transport are relayed as they
  stream, uncounted. A client that closes the stream closes the server's.

The server gets the transport's own headers (``Accept``, ``Content-Type``,
``Mcp-Session-Id``, ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``,
``Last-Event-ID``) and the configured ``headers``; never the task token. The gateway keeps
no session state: ``Mcp-Session-Id`` is the server's, so a session works through any
replica.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from app import events
from app.admission.tokens import token_hash
from app.app_state import app_state
from app.budgets import runs
from app.budgets.keys import CONVERSATION_HEADER, RUN_HEADER, is_budget_key, run_id
from app.config.schema import McpServer
from app.errors import GatewayError
from app.mcp import jsonrpc
from app.mcp.admission import admit_call, record_result
from app.proxy.auth import require_known_token
from app.proxy.inbound import check_headers, read_body, token_from_headers
from app.request_ids import REQUEST_ID
from app.wire.base import ToolCall, ToolResult

#: Client headers the server gets (the transport's own), lower-case.
FORWARDED_HEADERS = ("accept", "content-type", "mcp-session-id", "mcp-protocol-version", "mcp-method",
                     "mcp-name", "last-event-id")
#: Server headers the client does not get (hop by hop, or about the body as sent upstream).
_DROPPED_RESPONSE_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                                       "content-encoding", "date", "server"})
_JSON = "application/json"
#: What a call's conversation key hashes: the loop guard judges an MCP server's calls together.
_CONVERSATION_PREFIX = "mcp:"


def conversation_key(server: str) -> str:
    """The conversation key of ``server``'s tool calls (``m:`` + 32 hex characters)."""
    return "m:" + hashlib.sha256((_CONVERSATION_PREFIX + server).encode()).hexdigest()[:32]


def _json_rpc(status: int, message_id: jsonrpc.JsonRpcId, code: int, text: str,
              data: Mapping[str, object] | None = None, headers: Mapping[str, str] | None = None) -> Response:
    return Response(jsonrpc.error_body(message_id, code, text, data), status, dict(headers or {}), media_type=_JSON)


def _refusal(err: GatewayError, message_id: jsonrpc.JsonRpcId) -> Response:
    """A gateway refusal as MCP clients read it: a stop or a ceiling is a JSON-RPC error
    (HTTP 200, final); authentication and outages keep their HTTP status."""
    if err.type == "task_stopped" or err.code == "cost_limit":
        return _json_rpc(200, message_id, jsonrpc.TASK_STOPPED if err.type == "task_stopped" else
                         jsonrpc.INVALID_REQUEST, err.message, {"type": err.type, "code": err.code})
    return _json_rpc(err.status, message_id, jsonrpc.INVALID_REQUEST, err.message,
                     {"type": err.type, "code": err.code}, err.headers)


def _server(request: Request) -> McpServer:
    name = request.path_params["name"]
    server = app_state(request.app).gateway_config.mcp_server(name)
    if server is None:
        raise GatewayError(404, "not_found_error", "unknown_mcp_server",
                           f"No MCP server is configured as {name!r} (mcp_servers: in TASKGATE_CONFIG).")
    return server


def _upstream_headers(request: Request, server: McpServer) -> dict[str, str]:
    headers = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
    headers["accept-encoding"] = "identity"  # the answer is relayed and read as sent
    return {**headers, **server.headers}


def _client_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower() not in _DROPPED_RESPONSE_HEADERS}


@dataclass(frozen=True, slots=True)
class _Caller:
    """Who is calling: the task token's hash, or a budget key's run task (``task_id``)."""

    token_hash: str
    task_id: str | None = None


async def _authenticated(request: Request) -> _Caller:
    """The caller; 401 unless the token is a known task's or a live budget key's, 400 for
    a bad header or a budget key whose request names no run."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    token = token_from_headers(headers)
    check_headers(request.scope["headers"])
    state = app_state(request.app)
    if not is_budget_key(token):
        hashed = token_hash(token)
        await require_known_token(state.db, state.known_tokens, hashed)
        return _Caller(hashed)
    key = await runs.require_key(state.db, token)
    naming = (RUN_HEADER, CONVERSATION_HEADER, *state.settings.session_headers)
    if not any(headers.get(name, "").strip() for name in naming):  # a model call's run falls back
        # to its first messages, which /mcp has none of
        raise GatewayError(400, "invalid_request_error", "run_required",
                           f"A budget key on /mcp needs the run named ({RUN_HEADER} or a session header), so "
                           "that its tool calls land on the same task as its model calls. Nothing was forwarded.")
    run = run_id(headers, state.settings.session_headers, "")
    task_id = await runs.ensure_run_task(state.db, key, run, state.settings.default_request_limit,
                                        REQUEST_ID.get())
    return _Caller("", task_id)


async def _relay(request: Request, server: McpServer, body: bytes | None) -> Response:
    """Send the request to the server and stream its answer back as it comes."""
    client = app_state(request.app).mcp_client
    upstream = client.build_request(request.method, server.url, headers=_upstream_headers(request, server),
                                    content=body)
    try:
        response = await client.send(upstream, stream=True)
    except httpx.HTTPError as exc:
        return _json_rpc(502, None, jsonrpc.SERVER_UNAVAILABLE,
                         f"MCP server {server.name!r} could not be reached ({type(exc).__name__}).")
    return StreamingResponse(response.aiter_raw(), response.status_code, _client_headers(response),
                             background=BackgroundTask(response.aclose))


async def _until_disconnected(request: Request) -> None:
    """Return once the client has gone away (its body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class AnswerTooLarge(Exception):
    """A server's answer to a ``tools/call`` passed ``TASKGATE_MCP_MAX_ANSWER_BYTES``."""


async def _read_answer(client: httpx.AsyncClient, upstream: httpx.Request,
                       max_bytes: int) -> tuple[httpx.Response, bytes]:
    """The server's whole answer (raises :class:`AnswerTooLarge` past ``max_bytes``)."""
    response = await client.send(upstream, stream=True)
    try:
        chunks, size = [], 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > max_bytes:
                raise AnswerTooLarge(max_bytes)
            chunks.append(chunk)
        return response, b"".join(chunks)
    finally:
        await response.aclose()


async def _tool_call(request: Request, server: McpServer, caller: _Caller, message: jsonrpc.Message,
                     body: bytes) -> Response:
    state = app_state(request.app)
    settings = state.settings
    tool = message.tool_name or ""
    key = conversation_key(server.name)
    call = ToolCall(f"mcp:{uuid.uuid4().hex}", tool, message.tool_arguments)
    settings_of_tool = server.tools.get(tool)
    price = Decimal(str(settings_of_tool.price_usd)) if settings_of_tool and settings_of_tool.price_usd else Decimal(0)
    request_id = REQUEST_ID.get()
    try:
        admitted = await admit_call(state.db, caller.token_hash, server.name, call, key, settings,
                                    task_id=caller.task_id, price_usd=price, request_id=request_id)
    except GatewayError as err:
        events.MCP_CALL.emit(events.McpCall(server.name, tool, "refused"))
        return _refusal(err, message.id)
    upstream = state.mcp_client.build_request("POST", server.url, headers=_upstream_headers(request, server),
                                              content=body)
    answer = asyncio.ensure_future(asyncio.wait_for(
        _read_answer(state.mcp_client, upstream, settings.mcp_max_answer_bytes), server.tool_timeout_s(tool)))
    gone = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (answer, gone):
            pending.cancel()
    if not answer.done() or answer.cancelled():
        events.MCP_CALL.emit(events.McpCall(server.name, tool, "client_closed", admitted.task_id, call.call_id))
        return Response(status_code=499)
    if (failure := answer.exception()) is not None:
        outcome = "timeout" if isinstance(failure, TimeoutError) else "unreachable"
        events.MCP_CALL.emit(events.McpCall(server.name, tool, outcome, admitted.task_id, call.call_id))
        why = (f"did not answer {tool!r} within {server.tool_timeout_s(tool):g} s" if outcome == "timeout"
               else f"answered {tool!r} with more than {settings.mcp_max_answer_bytes} bytes"
               if isinstance(failure, AnswerTooLarge) else f"could not be reached or failed ({type(failure).__name__})")
        return _json_rpc(200, message.id, jsonrpc.SERVER_UNAVAILABLE,
                         f"MCP server {server.name!r} {why}. The call was counted; it has no result.",
                         {"type": "mcp_server_unavailable", "server": server.name})
    response, content = answer.result()
    found = jsonrpc.find_response(content, response.headers.get("content-type", ""), message.id)
    if response.status_code == 200 and found is not None:
        text, is_error = jsonrpc.tool_result_text(found)
        try:
            await record_result(state.db, admitted, server.name, call, ToolResult(call.call_id, text, is_error),
                                key, settings, request_id=request_id)
        except GatewayError as err:  # the database went away: nothing is released unjudged
            return _refusal(err, message.id)
        events.MCP_CALL.emit(events.McpCall(server.name, tool, "error" if is_error else "ok", admitted.task_id,
                                            call.call_id))
    else:
        events.MCP_CALL.emit(events.McpCall(server.name, tool, "no_result", admitted.task_id, call.call_id))
    return Response(content, response.status_code, _client_headers(response))


async def mcp_post(request: Request) -> Response:
    """``POST /mcp/<name>``: one client message (see the module docstring)."""
    state = app_state(request.app)
    try:
        server = _server(request)
        caller = await _authenticated(request)
        body = await read_body(request.stream(), request.headers.get("content-length"),
                               state.settings.max_body_bytes, state.settings.body_timeout_s)
    except GatewayError as err:
        return _refusal(err, None)
    try:
        message = jsonrpc.parse_message(body)
    except jsonrpc.InvalidMessage as bad:
        return _json_rpc(400, None, bad.code, f"{bad} Nothing was forwarded.")
    mismatch = jsonrpc.header_mismatch(message, {k.lower(): v for k, v in request.headers.items()})
    if mismatch is not None:
        return _json_rpc(400, message.id, jsonrpc.INVALID_REQUEST, f"{mismatch} Nothing was forwarded.")
    if message.is_request and message.method == "tools/call":
        return await _tool_call(request, server, caller, message, body)
    return await _relay(request, server, body)


async def mcp_stream(request: Request) -> Response:
    """``GET`` (the server's event stream) and ``DELETE`` (end of a session) of
    ``/mcp/<name>``: authenticated, then relayed."""
    try:
        server = _server(request)
        await _authenticated(request)
    except GatewayError as err:
        return _refusal(err, None)
    return await _relay(request, server, None)


def create_client() -> httpx.AsyncClient:
    """The HTTP client for MCP servers (one per process: its connections are pooled).
    Timeouts: 10 s to connect; no read timeout (a ``tools/call`` is bounded by its
    tool's timeout, the event stream is open-ended)."""
    return httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False)


routes = [
    Route("/mcp/{name}", mcp_post, methods=["POST"]),
    Route("/mcp/{name}", mcp_stream, methods=["GET", "DELETE"]),
]
