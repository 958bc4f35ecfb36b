"""One path (issue 21, item 3): the upstream URL is built from the decoded path the
allowlist matched, never from ``Host``."""

from __future__ import annotations

import pytest

from app.proxy.request_target import target
from tests.test_boundary import raw_exchange


@pytest.mark.parametrize("host", [b"x/v1/files#", b"x/v1/files?", b"x/v1/chat/completions#",
                                  b"127.0.0.1/v1/files/file-1#", b"x:1/../../v1/files#"])
@pytest.mark.parametrize("anthropic", [False, True])
def test_host_header_never_changes_the_forwarded_path(gateway, admin, upstream, host, anthropic):
    _, token = admin.create_task()
    extra = b"anthropic-version: 2023-06-01\r\n" if anthropic else b""
    request = (b"GET /v1/models?limit=2 HTTP/1.1\r\nhost: " + host + b"\r\nauthorization: Bearer "
               + token.encode() + b"\r\n" + extra + b"connection: close\r\n\r\n")
    response = raw_exchange(gateway.url, request)
    status = int(response.split(b" ")[1]) if response else 0
    assert status == 200 or 400 <= status < 500, response[:300]  # the server may refuse the Host
    assert [(r.method, r.path) for r in upstream.requests] in ([], [("GET", "/v1/models?limit=2")])


def test_target_reads_the_scope_not_the_host():
    scope = {"type": "http", "path": "/v1/models", "raw_path": b"/v1/models", "query_string": b"a=1",
             "headers": [(b"host", b"x/v1/files#")], "scheme": "http", "server": ("x", 80)}
    assert target(scope) == ("/v1/models", "a=1")
    assert target({**scope, "query_string": b""}) == ("/v1/models", "")
