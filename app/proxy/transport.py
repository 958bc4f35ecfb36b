"""The upstream hop's transport: aiohttp under httpx's API.

httpx's default transport (httpcore) scans its whole connection pool on every
request and costs ~85 µs per streamed chunk, so the gateway got slower as
concurrency rose (httpx issue #3215). :class:`UpstreamTransport` is the
``httpx-aiohttp`` package's :class:`~httpx_aiohttp.AiohttpTransport` on a session
configured here, with one correction to its error mapping: that package reports
every aiohttp connection error, a refused connection included, as
``httpx.ConnectTimeout``; the relay needs a refused or reset connection to be an
``httpx.ConnectError`` (502 ``upstream_unreachable``) and only a real timeout to be
a ``httpx.TimeoutException`` (504 ``upstream_timeout``).

Session: ``limit`` connections in all (``upstream_max_connections``; further
requests wait for a free one), idle connections kept ``keepalive_s``, no cookie
jar, no proxy or netrc from the environment (``trust_env=False``). The package asks
aiohttp for no automatic decompression and no redirects on each request: the
gateway asks upstream for ``accept-encoding: identity`` and relays bytes as they
come. Body read errors come from the package as ``httpx.ReadError``.
"""

from __future__ import annotations

from http.cookiejar import CookieJar, DefaultCookiePolicy

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


def no_cookies() -> CookieJar:
    """A cookie jar that keeps nothing: the gateway's one client serves every task,
    so a cookie set by upstream for one request must not ride along on the next
    (httpx's client keeps cookies by default)."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def upstream_error(exc: httpx.TransportError) -> httpx.TransportError:
    """``exc`` reclassified by the aiohttp error that caused it: timeouts stay
    timeouts; a failure to connect (refused, unreachable, DNS) is an
    :class:`httpx.ConnectError`; a connection lost before the response headers is an
    :class:`httpx.ReadError`; anything else is returned unchanged."""
    cause = exc.__cause__
    if isinstance(cause, (TimeoutError, aiohttp.ServerTimeoutError)):
        return exc
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(cause), request=_request_of(exc))
    if isinstance(cause, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return httpx.ReadError(str(cause) or type(cause).__name__, request=_request_of(exc))
    return exc


def _request_of(exc: httpx.TransportError) -> httpx.Request | None:
    try:
        return exc.request
    except RuntimeError:  # raised without a request attached
        return None


class UpstreamTransport(AiohttpTransport):
    """An :class:`httpx_aiohttp.AiohttpTransport` with the session described in the
    module docstring and connection errors classified by :func:`upstream_error`."""

    def __init__(self, *, limit: int, keepalive_s: float = 5.0) -> None:
        def session() -> aiohttp.ClientSession:  # made on first use, inside the running loop
            return aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0,
                                               keepalive_timeout=keepalive_s),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        super().__init__(trust_env=False, client=session)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.TransportError as exc:
            raise upstream_error(exc) from exc.__cause__
