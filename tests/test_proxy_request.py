"""The edge of a proxied POST (app.proxy.request): the wire format decided once from the
path, what the endpoint's kind implies, the checks that need no database, and the
conversation header's precedence. The whole pipeline runs in the gateway tests."""

from __future__ import annotations

from typing import Any, cast

import pytest

from app.app_state import AppState
from app.errors import GatewayError
from app.proxy import endpoints
from app.proxy.request import ProxyRequest, _session_header, checked_headers, find_endpoint, wire_format
from app.settings import Settings
from app.wire import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, RESPONSES


@pytest.mark.parametrize(("path", "headers", "fmt"), [
    ("/v1/chat/completions", None, CHAT_COMPLETIONS),
    ("/v1/messages", None, ANTHROPIC_MESSAGES),
    ("/v1/messages/count_tokens", None, ANTHROPIC_MESSAGES),
    ("/v1/responses", None, RESPONSES),
    ("/v1/responses/input_tokens", None, RESPONSES),
    ("/v1/files/x", None, CHAT_COMPLETIONS),  # no format claims it: every error still has a shape
    ("/v1/models", {}, CHAT_COMPLETIONS),
    ("/v1/models", {"anthropic-version": "2023-06-01"}, ANTHROPIC_MESSAGES),
])
def test_the_wire_format_comes_from_the_path(path: str, headers: dict[str, str] | None, fmt: Any) -> None:
    assert wire_format(path, headers) is fmt


def _request(kind: endpoints.EndpointKind, payload: dict[str, Any]) -> ProxyRequest:
    endpoint = endpoints.Endpoint("POST", "/v1/x", kind)
    return ProxyRequest(endpoint, "/v1/x", CHAT_COMPLETIONS, {}, "h", None, None, b"{}", payload, None,
                        cast(Any, None), None, "")


def test_what_the_endpoint_kind_implies() -> None:
    inference = _request(endpoints.INFERENCE, {"stream": True})
    assert inference.counted and inference.inference and inference.stream
    free = _request(endpoints.FREE, {"stream": "yes"})
    assert not free.counted and not free.inference and not free.stream
    extra = _request(endpoints.EXTRA, {})
    assert extra.counted and not extra.inference
    with pytest.raises(AttributeError):  # frozen: built once at the edge
        inference.path = "/v1/y"  # type: ignore[misc]


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "headers": headers}


def test_an_unknown_endpoint_is_404_before_anything_else() -> None:
    state = cast(AppState, type("S", (), {"endpoints": endpoints.DEFAULT_ENDPOINTS})())
    assert find_endpoint(state, _scope("POST", "/v1/messages", [])).kind == endpoints.INFERENCE
    with pytest.raises(GatewayError) as exc:
        find_endpoint(state, _scope("POST", "/v1/images/generations", []))
    assert (exc.value.status, exc.value.code) == (404, "unknown_url")


def test_the_token_is_checked_before_the_headers() -> None:
    with pytest.raises(GatewayError) as exc:
        checked_headers(_scope("POST", "/v1/messages", [(b"x-bad", b"a\x01")]))
    assert exc.value.status == 401
    with pytest.raises(GatewayError) as exc:
        checked_headers(_scope("POST", "/v1/messages", [(b"x-api-key", b"tg_x"), (b"x-bad", b"a\x01")]))
    assert exc.value.status == 400
    headers, token = checked_headers(_scope("POST", "/v1/messages", [(b"X-Api-Key", b"tg_x")]))
    assert token == "tg_x" and headers == {"x-api-key": "tg_x"}


def test_the_conversation_header_wins_over_session_headers() -> None:
    names = Settings(database_url="postgresql://x@127.0.0.1/x").session_headers
    assert names, "the settings name agent session headers"
    assert _session_header({names[0]: "agent", "x-taskgate-conversation": "op"}, names) == "op"
    assert _session_header({names[0]: "agent", "x-taskgate-conversation": ""}, names) == "agent"
    assert _session_header({}, names) is None
