"""The endpoint allowlist as a table: what is forwarded, what never leaves the gateway."""

from __future__ import annotations

import pytest

from app.proxy.endpoints import DEFAULT_ENDPOINTS, EXTRA, FREE, INFERENCE, match, parse_endpoints

EXTRA_ENDPOINTS = parse_endpoints("GET /v1/files/{id}, post /v1/batches, GET /v1/files/{id}/content")
ALL = DEFAULT_ENDPOINTS + EXTRA_ENDPOINTS


@pytest.mark.parametrize(("method", "path", "raw", "kind"), [
    ("POST", "/v1/chat/completions", None, INFERENCE),
    ("POST", "/v1/completions", None, INFERENCE),
    ("POST", "/v1/responses", None, INFERENCE),
    ("POST", "/v1/embeddings", None, INFERENCE),
    ("POST", "/v1/messages", None, INFERENCE),
    ("POST", "/v1/messages/count_tokens", None, FREE),
    ("POST", "/v1/responses/input_tokens", None, FREE),
    ("GET", "/v1/models", None, FREE),
    ("GET", "/v1/models/gpt-4o-2024-08-06", None, FREE),
    ("GET", "/v1/models/ft:gpt-4o-mini:org:custom:abc123", b"/v1/models/ft%3Agpt-4o-mini:org:custom:abc123", FREE),
    ("GET", "/v1/models/claude-3-5-sonnet@20241022", None, FREE),
    ("GET", "/v1/files/file-abc", None, EXTRA),
    ("GET", "/v1/files/file-abc/content", None, EXTRA),
    ("POST", "/v1/batches", None, EXTRA),
])
def test_allowed(method: str, path: str, raw: bytes | None, kind: str) -> None:
    found = match(ALL, method, path, raw if raw is not None else path.encode())
    assert found is not None and found.kind == kind


@pytest.mark.parametrize(("method", "path", "raw"), [
    # path traversal in every spelling: decoded dot segments, encoded dots and slashes
    ("GET", "/v1/../secret/admin", b"/v1/%2e%2e/secret/admin"),
    ("GET", "/v1/../admin", b"/v1/..%2fadmin"),
    ("GET", "/v1/../admin", b"/v1/../admin"),
    ("GET", "/v1/models/../../admin", b"/v1/models/../../admin"),
    ("GET", "/v1/models/..", b"/v1/models/.."),
    ("GET", "/v1/models/.", b"/v1/models/%2E"),
    ("GET", "/v1/models/a/b", b"/v1/models/a%2Fb"),
    ("GET", "/v1/models/a/b", b"/v1/models/a/b"),
    ("GET", "/v1/models/a\\..\\b", b"/v1/models/a%5C..%5Cb"),
    ("GET", "/v1/models/x.y", b"/v1/models/x%2ey"),  # an encoded dot anywhere is refused
    ("GET", "/v1/./models", b"/v1/./models"),
    ("GET", "/v1//models", b"/v1//models"),
    ("GET", "/v1/models/", b"/v1/models/"),
    ("GET", "/v1/models/a b", b"/v1/models/a%20b"),
    ("GET", "/v1/models/%2e%2e", b"/v1/models/%252e%252e"),  # double encoding: '%' is not a pchar here
    ("GET", "/v1/models/\u00e9", b"/v1/models/%C3%A9"),
    # not on the list
    ("GET", "/v1/files/file-abc", None),
    ("GET", "/v1/chat/completions", None),
    ("POST", "/v1/models", None),
    ("POST", "/v1/images/generations", None),
    ("POST", "/v1/chat/completions/", None),
    ("POST", "/v1/chat/completions/x", None),
    ("DELETE", "/v1/models/gpt-4o", None),
    ("GET", "/secret/admin", None),
])
def test_refused(method: str, path: str, raw: bytes | None) -> None:
    assert match(DEFAULT_ENDPOINTS, method, path, raw) is None


def test_extra_endpoints_are_opt_in() -> None:
    assert match(DEFAULT_ENDPOINTS, "GET", "/v1/files/file-abc") is None
    assert match(ALL, "GET", "/v1/files/file-abc") is not None
    assert match(ALL, "GET", "/v1/files/..") is None
    assert parse_endpoints("") == () and parse_endpoints(" , ") == ()


@pytest.mark.parametrize("text", [
    "PUT /v1/files", "GET /v2/files", "GET v1/files", "GET /v1", "GET /v1/../admin",
    "GET /v1/files/{id", "GET /v1/files/%2e", "GET /v1/a b", "GET", "/v1/files",
])
def test_bad_extra_endpoints_are_named(text: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_endpoints(text)
    assert repr(text) in str(exc.value)
