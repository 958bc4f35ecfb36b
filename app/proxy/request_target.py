"""The request target a proxied request is forwarded to: the same decoded path the
allowlist matched, never anything derived from the ``Host`` header.

Starlette's ``request.url`` is rebuilt from ``Host`` + ``scope["path"]``; with Starlette
≤ 0.46 a ``Host`` such as ``x/v1/files#`` made ``request.url.path`` read ``/v1/files``
while the allowlist (:func:`app.proxy.endpoints.match`) had checked ``scope["path"]``
(``/v1/models``). Everything the proxy forwards or branches on is read here, from the
ASGI scope, so what is matched is what is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def target(scope: Mapping[str, Any]) -> tuple[str, str]:
    """``(path, query)`` of an ASGI HTTP scope: the decoded ``scope["path"]`` (what the
    allowlist matched) and the query string as sent (``latin-1``, ``""`` when none)."""
    query = scope.get("query_string") or b""
    return scope["path"], query.decode("latin-1")
