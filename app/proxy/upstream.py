"""Where a request goes out: provider URLs, header hygiene and the shared client.

The task token never leaves the gateway: ``authorization`` and ``x-api-key`` are
dropped and the provider key is set instead (OpenAI-style providers:
``Authorization: Bearer``; Anthropic: ``x-api-key``). Hop-by-hop headers
(RFC 9110 §7.6.1) are not forwarded in either direction. The client's ``forwarded``,
``x-forwarded-*`` and ``x-real-ip`` are dropped unless ``forward_proxy_headers`` is set.
Other request headers are forwarded byte for byte (see :mod:`app.proxy.inbound`).
"""

from __future__ import annotations

import httpx

from app.proxy.transport import UpstreamTransport, no_cookies
from app.settings import Settings

#: RFC 9110 §7.6.1 hop-by-hop headers, plus those the gateway recomputes.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length",
})
#: Request headers never forwarded upstream: the client's credentials and its
#: ``accept-encoding`` (upstream is asked for identity encoding so the gateway can
#: read the stream it relays).
_DROP_REQUEST = HOP_BY_HOP | {"authorization", "x-api-key", "api-key", "accept-encoding", "cookie"}
#: The client's proxy headers (RFC 7239 ``forwarded`` and the de facto ``x-forwarded-*``).
_PROXY_HEADERS = frozenset({"forwarded", "x-real-ip"})
#: Response headers not relayed to the client (the body is re-framed by the gateway;
#: the gateway's server stamps its own ``date``).
_DROP_RESPONSE = HOP_BY_HOP | {"content-encoding", "date"}


def is_anthropic(path: str, headers: dict[str, str] | None = None) -> bool:
    """Whether a request goes to the Anthropic provider: Anthropic Messages paths
    (``/v1/messages`` and below), and other paths (e.g. ``GET /v1/models``) when the
    client identifies as an Anthropic client by sending ``anthropic-version``."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return True
    return headers is not None and "anthropic-version" in headers


def upstream_url(settings: Settings, path: str, query: str, anthropic: bool) -> str:
    """The provider URL for a gateway path (``/v1/...``), keeping the query string.

    OpenAI-style paths replace the gateway's ``/v1`` with ``upstream_base_url`` (which
    ends in its own version segment); Anthropic paths are appended to
    ``anthropic_base_url`` as they are.
    """
    if anthropic:
        url = settings.anthropic_base_url.rstrip("/") + path
    else:
        url = settings.upstream_base_url.rstrip("/") + path.removeprefix("/v1")
    return f"{url}?{query}" if query else url


def request_headers(settings: Settings, incoming: list[tuple[bytes, bytes]],
                    anthropic: bool) -> list[tuple[bytes, bytes]]:
    """Headers to send upstream, as raw pairs: the client's (ASGI: lower-case names,
    values as sent), minus credentials, hop-by-hop and proxy headers, plus the
    provider key."""
    keep_proxy = settings.forward_proxy_headers
    out = []
    for name, value in incoming:
        text = name.decode("latin-1")
        if text in _DROP_REQUEST:
            continue
        if not keep_proxy and (text in _PROXY_HEADERS or text.startswith("x-forwarded-")):
            continue
        out.append((name, value))
    out.append((b"accept-encoding", b"identity"))
    if anthropic:
        if settings.anthropic_api_key:
            out.append((b"x-api-key", settings.anthropic_api_key.encode()))
    elif settings.upstream_api_key:
        out.append((b"authorization", f"Bearer {settings.upstream_api_key}".encode()))
    return out


def response_headers(headers: httpx.Headers) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to relay (raw ASGI pairs), minus hop-by-hop ones."""
    return [(k, v) for k, v in headers.raw if k.decode("latin-1").lower() not in _DROP_RESPONSE]


def create_client(settings: Settings) -> httpx.AsyncClient:
    """The process's one pooled client, on aiohttp (:mod:`app.proxy.transport`). Only
    the connect timeout is set here: stream reads are bounded by the watchdog,
    non-streamed bodies by ``upstream_timeout_s``."""
    return httpx.AsyncClient(
        transport=UpstreamTransport(limit=settings.upstream_max_connections),
        timeout=httpx.Timeout(None, connect=settings.upstream_connect_timeout_s),
        follow_redirects=False,
        trust_env=False,
        cookies=no_cookies(),
    )
