"""The client-facing boundary, end to end: what never leaves the gateway, what is
refused before the body is read, what is dropped on the way out (issue 8, items 1, 2,
5, 9, 10 and the duplicated date/server headers)."""

from __future__ import annotations

import json
import socket
import time
from typing import Iterator

import httpx
import pytest

from app.testing.upstream import UpstreamServer
from tests.support import ANTHROPIC_PROVIDER_KEY, PROVIDER_KEY, Admin, GatewayProcess


def raw_exchange(url: str, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` as is on a fresh connection (no path normalisation by a client)
    and read until the server closes or ``timeout`` passes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        s.settimeout(timeout)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out and _complete(out):
                    break
        except TimeoutError:
            pass
        return out


def _complete(response: bytes) -> bool:
    head, _, body = response.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return body.endswith(b"0\r\n\r\n")


def status_and_json(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


@pytest.mark.parametrize("target", [
    b"/v1/%2e%2e/secret/admin?x=1", b"/v1/..%2fadmin", b"/v1/../admin", b"/v1/%2E%2E/%2E%2E/admin",
    b"/v1/models/..%2f..%2fadmin", b"/v1/models/%2e%2e", b"/v1/./models", b"/v1/files/file-1",
])
@pytest.mark.parametrize("anthropic", [False, True])
def test_path_traversal_never_leaves_the_gateway(gateway, admin, upstream, target, anthropic):
    _, token = admin.create_task()
    extra = b"anthropic-version: 2023-06-01\r\n" if anthropic else b""
    request = (b"GET " + target + b" HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + token.encode()
               + b"\r\n" + extra + b"connection: close\r\n\r\n")
    status, body = status_and_json(raw_exchange(gateway.url, request))
    assert status == 404
    if anthropic:
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    else:
        assert body["error"]["code"] == "unknown_url"
    assert upstream.requests == []


def test_allowed_gets_are_forwarded(gateway, admin, upstream):
    _, token = admin.create_task()
    h = {"authorization": f"Bearer {token}"}
    assert httpx.get(gateway.url + "/v1/models", headers=h).status_code == 200
    assert httpx.get(gateway.url + "/v1/models/mock-model", headers=h).status_code == 200
    assert httpx.get(gateway.url + "/v1/models/mock-model",
                     headers={**h, "anthropic-version": "2023-06-01"}).status_code == 200
    assert [r.path for r in upstream.requests] == ["/v1/models", "/v1/models/mock-model", "/v1/models/mock-model"]
    assert upstream.requests[-1].headers["x-api-key"] == ANTHROPIC_PROVIDER_KEY
    assert upstream.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEY}"


@pytest.fixture(scope="module")
def custom_gateway(database_url: str, upstream: UpstreamServer) -> Iterator[GatewayProcess]:
    """A gateway with operator-added endpoints and client proxy headers forwarded."""
    with GatewayProcess(database_url, upstream.base_url,
                        TASKGATE_EXTRA_ENDPOINTS="GET /v1/files/{id}, POST /v1/batches",
                        TASKGATE_FORWARD_PROXY_HEADERS="true") as gw:
        yield gw


def test_extra_endpoints_are_added_explicitly(custom_gateway, upstream):
    admin = Admin(custom_gateway.url)
    task_id, token = admin.create_task()
    h = {"authorization": f"Bearer {token}"}
    r = httpx.get(custom_gateway.url + "/v1/files/file-1", headers=h)
    assert r.status_code == 404 and upstream.requests[-1].path == "/v1/files/file-1"  # upstream's own 404
    r = httpx.post(custom_gateway.url + "/v1/batches", headers=h, content=b"not json, forwarded as is")
    assert upstream.requests[-1].path == "/v1/batches" and upstream.requests[-1].body == b"not json, forwarded as is"
    assert admin.task(task_id)["admitted_requests"] == 1  # an extra POST is admitted
    before = len(upstream.requests)
    r = httpx.get(custom_gateway.url + "/v1/files/file-1/content", headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
    assert len(upstream.requests) == before


def test_client_proxy_headers_are_dropped_unless_allowed(gateway, custom_gateway, admin, upstream):
    proxy_headers = {"x-forwarded-for": "10.0.0.1", "x-forwarded-host": "evil.example",
                     "forwarded": "for=10.0.0.1", "x-real-ip": "10.0.0.1"}
    for gw, kept in ((gateway, False), (custom_gateway, True)):
        _, token = Admin(gw.url).create_task()
        r = httpx.post(gw.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}", **proxy_headers},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200
        seen = upstream.requests[-1].headers
        assert all((name in seen) is kept for name in proxy_headers), seen


def test_unknown_token_is_refused_before_the_body_is_read(gateway, admin, upstream):
    """A 30 MB upload with an unknown (or no) token is answered from its headers: the
    401 arrives though only 10 bytes of the body were ever sent, and the connection is
    closed."""
    for auth in (b"authorization: Bearer tg-unknown\r\n", b""):
        request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + auth
                   + b"content-type: application/json\r\ncontent-length: 31457280\r\n\r\n{\"model\":")
        started = time.monotonic()
        response = raw_exchange(gateway.url, request, timeout=8)
        assert response, "no answer before the body was sent"
        status, body = status_and_json(response)
        assert status == 401 and body["error"]["type"] == "invalid_api_key"
        assert b"connection: close" in response.lower()
        assert time.monotonic() - started < 6
    assert upstream.requests == []


@pytest.mark.parametrize("depth", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_deep_nesting_is_invalid_json_and_not_counted(gateway, admin, upstream, depth, path):
    task_id, token = admin.create_task()
    deep = "[" * depth + "]" * depth
    body = '{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": %s}]}' % deep
    r = httpx.post(gateway.url + path, headers={"authorization": f"Bearer {token}"}, content=body)
    assert r.status_code == 400, r.text
    code = r.json()["error"].get("code") or r.json()["error"]["type"]
    assert code in ("invalid_json", "invalid_request_error")
    assert admin.task(task_id)["admitted_requests"] == 0
    assert upstream.requests == []


def test_utf8_header_values_are_forwarded_as_sent(gateway, admin, upstream):
    """Non-ASCII UTF-8 header values (e.g. an app title) reach upstream byte for byte."""
    task_id, token = admin.create_task()
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    title = "Caf\u00e9 \u2615".encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + token.encode()
               + b"\r\nx-title: " + title + b"\r\ncontent-type: application/json\r\ncontent-length: "
               + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
    response = raw_exchange(gateway.url, request)
    assert response.startswith(b"HTTP/1.1 200 "), response[:300]
    assert upstream.requests[-1].headers["x-title"].encode("latin-1") == title
    assert admin.task(task_id)["admitted_requests"] == 1


@pytest.mark.parametrize("header", [b"x-session-id: \xff\xfe", b"x-session-id: a\x01b", b"x-bad\x7fname: 1",
                                    b"x-trace: a\x00b", b"x-surrogate: \xed\xa0\x80"])
def test_invalid_header_values_are_refused_and_not_counted(gateway, admin, upstream, header):
    task_id, token = admin.create_task()
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + token.encode()
               + b"\r\n" + header + b"\r\ncontent-length: " + str(len(body)).encode()
               + b"\r\nconnection: close\r\n\r\n" + body)
    response = raw_exchange(gateway.url, request)
    status = int(response.split(b" ")[1]) if response else 0
    assert response == b"" or 400 <= status < 500, response[:300]  # the server's parser may refuse first
    assert admin.task(task_id)["admitted_requests"] == 0
    assert upstream.requests == []


def test_relayed_responses_carry_date_and_server_once(gateway, admin, upstream):
    _, token = admin.create_task()
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    assert len(r.headers.get_list("date")) == 1
    assert len(r.headers.get_list("server")) <= 1
    r = httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {token}"})
    assert len(r.headers.get_list("date")) == 1 and len(r.headers.get_list("server")) <= 1
