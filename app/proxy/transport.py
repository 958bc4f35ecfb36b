"""The upstream hop: aiohttp under httpx's API.

httpx's default transport (httpcore) scans its whole connection pool on every
request and costs ~85 µs per streamed chunk, so the gateway got slower as
concurrency rose (httpx issue #3215). :class:`UpstreamClient` sends
``httpx.Request`` objects straight to :class:`UpstreamTransport`, without
``httpx.AsyncClient`` around it: a relay uses none of its auth, redirect, cookie or
event-hook handling, which cost ~0.2 ms of CPU per request. :class:`UpstreamTransport` is the
``httpx-aiohttp`` package's :class:`~httpx_aiohttp.AiohttpTransport` on a session
configured here, with one correction to its error mapping: that package reports
every aiohttp connection error, a refused connection included, as
``httpx.ConnectTimeout``; the relay needs a refused or reset connection to be an
``httpx.ConnectError`` (502 ``upstream_unreachable``) and only a real timeout to be
a ``httpx.TimeoutException`` (504 ``upstream_timeout``).

Session: ``limit`` connections in all (``upstream_max_connections``; further
requests wait for a free one), idle connections kept ``keepalive_s``, no cookie
jar (the one client serves every task: a cookie upstream set for one request must
not ride along on the next), no proxy or netrc from the environment (``trust_env=False``). The package asks
aiohttp for no automatic decompression and no redirects on each request: the
gateway asks upstream for ``accept-encoding: identity`` and relays bytes as they
come. Body read errors come from the package as ``httpx.ReadError``.
"""

from __future__ import annotations

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


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


class UpstreamClient:
    """What the relay needs of an HTTP client: :meth:`build_request` and
    :meth:`send` with httpx's signatures and types (``httpx.Request`` in,
    streaming ``httpx.Response`` out, ``httpx`` exceptions), on ``transport``.

    Every request gets ``connect_timeout_s`` for connecting and no other timeout
    (stream reads are bounded by the watchdog, bodies by ``upstream_timeout_s``)."""

    def __init__(self, transport: httpx.AsyncBaseTransport, connect_timeout_s: float) -> None:
        self.transport = transport
        self._timeout = {"connect": connect_timeout_s, "read": None, "write": None, "pool": None}

    def build_request(self, method: str, url: str, *, content: bytes | None = None,
                      headers: list[tuple[bytes, bytes]] | dict[str, str] | None = None) -> httpx.Request:
        """An ``httpx.Request`` as it will be sent (``host`` and ``content-length``
        are added from ``url`` and ``content``)."""
        return httpx.Request(method, url, content=content, headers=headers,
                             extensions={"timeout": self._timeout})

    async def send(self, request: httpx.Request, *, stream: bool = True) -> httpx.Response:
        """Send ``request``; the response's body is read as it is consumed
        (``aiter_raw``) unless ``stream`` is false. Raises ``httpx.TransportError``."""
        response = await self.transport.handle_async_request(request)
        if not stream:
            await response.aread()
        return response

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
