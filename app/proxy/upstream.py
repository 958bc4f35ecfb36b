"""Where a request goes out: provider URLs, header hygiene and the shared client.

Which provider serves a request is decided by :mod:`app.proxy.providers`; this module
builds the request for that :class:`~app.config.schema.Provider`. The task token never
leaves the gateway: ``authorization`` and ``x-api-key`` are dropped and the provider
key is set instead (``openai`` providers: ``Authorization: Bearer``; ``anthropic``:
``x-api-key``), after the provider's configured extra ``headers``. Hop-by-hop headers
(RFC 9110 §7.6.1) are not forwarded in either direction. The client's ``forwarded``,
``x-forwarded-*`` and ``x-real-ip`` are dropped unless ``forward_proxy_headers`` is set.
Other request headers are forwarded byte for byte (see :mod:`app.proxy.inbound`).
"""

from __future__ import annotations

from app.config.schema import Provider
from app.proxy.transport import ResponseHeaders, UpstreamClient
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
#: The same names as ASGI gives them (lower-case bytes): compared without decoding.
_DROP_REQUEST_RAW = frozenset(name.encode("latin-1") for name in _DROP_REQUEST)
_PROXY_HEADERS_RAW = frozenset(name.encode("latin-1") for name in _PROXY_HEADERS)
#: What :func:`_provider_headers` made, by the provider's id (the provider kept, so an id
#: reused by another object is told apart).
_PROVIDER_HEADERS: dict[int, tuple[Provider, frozenset[bytes], tuple[tuple[bytes, bytes], ...]]] = {}
#: Response headers not relayed to the client (the body is re-framed by the gateway;
#: the gateway's server stamps its own ``date``).
_DROP_RESPONSE = HOP_BY_HOP | {"content-encoding", "date"}


def upstream_url(provider: Provider, path: str, query: str) -> str:
    """The provider URL for a gateway path (``/v1/...``), keeping the query string.

    ``openai`` providers replace the gateway's ``/v1`` with their ``base_url`` (which
    ends in its own version segment); ``anthropic`` paths are appended to the
    ``base_url`` (the host) as they are.
    """
    if provider.kind == "anthropic":
        url = provider.base_url + path
    else:
        url = provider.base_url + path.removeprefix("/v1")
    return f"{url}?{query}" if query else url


def request_headers(provider: Provider, incoming: list[tuple[bytes, bytes]],
                    forward_proxy_headers: bool = False) -> list[tuple[bytes, bytes]]:
    """Headers to send upstream, as raw pairs: the client's (ASGI: lower-case names,
    values as sent), minus credentials, hop-by-hop and (unless ``forward_proxy_headers``)
    proxy headers, plus the provider's extra headers and its key."""
    extra, added = _provider_headers(provider)
    out = []
    for name, value in incoming:
        if name in _DROP_REQUEST_RAW or name in extra:
            continue
        if not forward_proxy_headers and (name in _PROXY_HEADERS_RAW or name.startswith(b"x-forwarded-")):
            continue
        out.append((name, value))
    out.extend(added)
    return out


def _provider_headers(provider: Provider) -> tuple[frozenset[bytes], tuple[tuple[bytes, bytes], ...]]:
    """A provider's extra header names, and what every request to it ends with (identity
    encoding, its extra headers, its key), made once per provider (a frozen model)."""
    made = _PROVIDER_HEADERS.get(id(provider))
    if made is not None and made[0] is provider:
        return made[1], made[2]
    extra = frozenset(name.encode("latin-1") for name in provider.headers)
    added = [(b"accept-encoding", b"identity")]
    added.extend((name.encode("latin-1"), value.encode()) for name, value in provider.headers.items())
    if provider.api_key:
        if provider.kind == "anthropic":
            added.append((b"x-api-key", provider.api_key.encode()))
        else:
            added.append((b"authorization", f"Bearer {provider.api_key}".encode()))
    if len(_PROVIDER_HEADERS) >= 256:
        _PROVIDER_HEADERS.clear()
    _PROVIDER_HEADERS[id(provider)] = (provider, extra, tuple(added))
    return extra, tuple(added)


def response_headers(headers: ResponseHeaders) -> list[tuple[bytes, bytes]]:
    """Upstream response headers to relay (raw ASGI pairs), minus hop-by-hop ones."""
    return [(k, v) for k, v in headers.raw if k.decode("latin-1").lower() not in _DROP_RESPONSE]


def create_client(settings: Settings) -> UpstreamClient:
    """The process's one pooled upstream client (:mod:`app.proxy.transport`):
    ``upstream_max_connections`` connections at most, ``upstream_connect_timeout_s``
    to connect; stream reads are bounded by the watchdog, non-streamed bodies by
    ``upstream_timeout_s``."""
    return UpstreamClient(limit=settings.upstream_max_connections,
                          connect_timeout_s=settings.upstream_connect_timeout_s)
