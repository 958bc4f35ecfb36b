"""The proxy lane (app.proxy.lane) answers what its endpoint raises as the layers it
skips would: a handled error through the app's handler, with the request id; a bug
with the app's 500 (once, only before a response started), re-raised for the log."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.proxy import lane
from app.request_ids import REQUEST_ID


class Handled(Exception):
    pass


class _Started(Response):
    """A response that fails after its start was sent (a relay that broke)."""

    def __init__(self) -> None:
        super().__init__(b"")
        self.started = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("broke after the start")


def _app() -> Starlette:
    async def handled(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "handled"}, status_code=418)

    async def unexpected(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "internal", "request_id": REQUEST_ID.get()}, status_code=500)

    return Starlette(exception_handlers={Handled: handled, Exception: unexpected})


def _run(endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], BaseException | None]:
    monkeypatch.setitem(lane._ENDPOINTS, "POST", endpoint)
    sent: list[dict] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the lane's requests never reach the stack")

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [(b"x-request-id", b"rid-1")],
             "query_string": b"", "app": _app()}
    try:
        asyncio.run(lane.ProxyLane(inner)(scope, receive, send))
    except Exception as exc:  # noqa: BLE001
        return sent, exc
    return sent, None


def test_a_handled_error_is_answered_by_its_handler_with_the_request_id(monkeypatch) -> None:
    async def endpoint(request: Request) -> Response:
        raise Handled()

    sent, raised = _run(endpoint, monkeypatch)
    assert raised is None
    assert sent[0]["status"] == 418
    assert (b"x-request-id", b"rid-1") in sent[0]["headers"]
    assert (b"x-taskgate-request-id", b"rid-1") in sent[0]["headers"]


def test_a_bug_is_the_apps_500_with_the_request_id_then_raised(monkeypatch) -> None:
    async def endpoint(request: Request) -> Response:
        raise RuntimeError("a bug")

    sent, raised = _run(endpoint, monkeypatch)
    assert isinstance(raised, RuntimeError)  # for the server's log
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 500 and b'"request_id":"rid-1"' in sent[1]["body"]
    assert REQUEST_ID.get() is None


def test_a_bug_after_the_response_started_sends_no_second_start(monkeypatch) -> None:
    async def endpoint(request: Request) -> Response:
        return _Started()

    sent, raised = _run(endpoint, monkeypatch)
    assert isinstance(raised, RuntimeError)
    assert [m["type"] for m in sent] == ["http.response.start"]
