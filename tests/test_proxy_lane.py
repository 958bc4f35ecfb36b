"""The proxy app (app.proxy.lane) answers what its endpoint raises with its own error
renderer, in the caller's wire format: a handled error with the request id; a bug with a
500 naming the request id (once, only before a response started), re-raised for the log.
The dispatcher (app.main.Dispatch) sends /v1 to it and everything else, the lifespan
included, to the FastAPI app."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response

from app import events
from app.errors import GatewayError
from app.main import Dispatch
from app.proxy import lane
from app.request_ids import REQUEST_ID


class _Started(Response):
    """A response that fails after its start was sent (a relay that broke)."""

    def __init__(self) -> None:
        super().__init__(b"")
        self.started = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("broke after the start")


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def _scope(method: str = "POST", path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [(b"x-request-id", b"rid-1")],
            "query_string": b""}


def _run(endpoint: Any, monkeypatch: pytest.MonkeyPatch, method: str = "POST",
         path: str = "/v1/chat/completions") -> tuple[list[dict[str, Any]], BaseException | None]:
    monkeypatch.setitem(lane._ENDPOINTS, method, endpoint)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        asyncio.run(lane.ProxyApp(State())(_scope(method, path), _receive, send))
    except Exception as exc:  # noqa: BLE001
        return sent, exc
    return sent, None


def test_a_gateway_error_is_answered_in_the_wire_format_with_the_request_id(monkeypatch) -> None:
    seen: list[events.GatewayAnswered] = []

    async def endpoint(request: Request) -> Response:
        raise GatewayError(418, "invalid_request_error", "teapot", "short and stout")

    events.GATEWAY_ANSWERED.subscribe(seen.append)
    try:
        sent, raised = _run(endpoint, monkeypatch, path="/v1/messages")
    finally:
        events.GATEWAY_ANSWERED.unsubscribe(seen.append)
    assert raised is None
    assert sent[0]["status"] == 418
    assert (b"x-request-id", b"rid-1") in sent[0]["headers"]
    assert (b"x-taskgate-request-id", b"rid-1") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["type"] == "error"  # Anthropic's shape on /v1/messages
    assert [e.path for e in seen] == ["/v1/messages"]


def test_a_database_out_of_reach_is_503(monkeypatch) -> None:
    async def endpoint(request: Request) -> Response:
        raise ConnectionRefusedError(111, "refused")

    sent, raised = _run(endpoint, monkeypatch)
    assert raised is None
    assert sent[0]["status"] == 503
    assert json.loads(sent[1]["body"])["error"]["code"] == "database_unavailable"


def test_a_bug_is_a_500_with_the_request_id_then_raised(monkeypatch, caplog) -> None:
    async def endpoint(request: Request) -> Response:
        raise RuntimeError("a bug")

    with caplog.at_level(logging.ERROR, logger="app.main"):
        sent, raised = _run(endpoint, monkeypatch)
    assert isinstance(raised, RuntimeError)  # for the server's log
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 500 and b"request id rid-1" in sent[1]["body"]
    assert (b"x-taskgate-request-id", b"rid-1") in sent[0]["headers"]
    assert "request id rid-1" in caplog.text and "a bug" in caplog.text
    assert REQUEST_ID.get() is None


def test_a_bug_after_the_response_started_sends_no_second_start(monkeypatch) -> None:
    async def endpoint(request: Request) -> Response:
        return _Started()

    sent, raised = _run(endpoint, monkeypatch)
    assert isinstance(raised, RuntimeError)
    assert [m["type"] for m in sent] == ["http.response.start"]


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405_in_the_wire_format(method: str) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(lane.ProxyApp(State())(_scope(method, "/v1/messages"), _receive, send))
    assert sent[0]["status"] == 405 and (b"x-taskgate-request-id", b"rid-1") in sent[0]["headers"]
    assert not any(k == b"allow" for k, _ in sent[0]["headers"])
    assert json.loads(sent[1]["body"])["error"]["message"] == "Method Not Allowed"


def test_the_dispatcher_sends_v1_to_the_proxy_and_the_rest_to_the_api() -> None:
    seen: list[tuple[str, str]] = []

    def app(name: str) -> Any:
        async def asgi(scope: Any, receive: Any, send: Any) -> None:
            seen.append((name, scope.get("path", scope["type"])))
        return asgi

    served = Dispatch(app("api"), app("proxy"))  # it reads a run named in the path first
    for scope in (_scope("POST", "/v1/chat/completions"), _scope("GET", "/v1"), _scope("GET", "/v10"),
                  _scope("POST", "/run/r1/v1/messages"), _scope("GET", "/healthz"), _scope("POST", "/mcp/x"),
                  {"type": "lifespan"}):
        asyncio.run(served(scope, _receive, _receive))
    assert seen == [("proxy", "/v1/chat/completions"), ("proxy", "/v1"), ("api", "/v10"),
                    ("proxy", "/v1/messages"), ("api", "/healthz"), ("api", "/mcp/x"), ("api", "lifespan")]


def test_given_the_api_the_proxy_is_the_dispatcher_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no middleware around the proxy (tracing off), create_app serves ProxyApp given
    the API app: one coroutine frame less per open stream. It chooses as Dispatch does."""
    seen: list[tuple[str, str]] = []

    async def api(scope: Any, receive: Any, send: Any) -> None:
        seen.append(("api", scope.get("path", scope["type"])))

    async def endpoint(request: Any) -> Response:
        seen.append(("proxy", request.scope["path"]))
        return Response(b"")

    monkeypatch.setitem(lane._ENDPOINTS, "POST", endpoint)
    monkeypatch.setitem(lane._ENDPOINTS, "GET", endpoint)

    async def send(message: Any) -> None:
        pass

    served = lane.ProxyApp(State(), api=api)
    for scope in (_scope("POST", "/v1/chat/completions"), _scope("GET", "/v1"), _scope("GET", "/v10"),
                  _scope("POST", "/run/r1/v1/messages"), _scope("GET", "/healthz"), _scope("POST", "/mcp/x"),
                  {"type": "lifespan"}):
        asyncio.run(served(scope, _receive, send))
    assert seen == [("proxy", "/v1/chat/completions"), ("proxy", "/v1"), ("api", "/v10"),
                    ("proxy", "/v1/messages"), ("api", "/healthz"), ("api", "/mcp/x"), ("api", "lifespan")]
