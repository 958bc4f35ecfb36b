"""The upstream hop, on aiohttp.

httpx's default transport (httpcore) scans its whole connection pool on every
request and costs ~85 µs per streamed chunk, so the gateway got slower as
concurrency rose (httpx issue #3215). httpx's API over aiohttp (the
``httpx-aiohttp`` package) fixed the scaling but kept ~150 µs of CPU per request in
httpx's request, header and response objects and its stream wrappers (measured:
~280 vs ~130 µs of client CPU per request against the bench upstream). So the relay
talks to aiohttp directly, through the small surface it uses:

- :meth:`UpstreamClient.target` → :class:`UpstreamTarget` (method, URL and header
  pairs, validated: the only step that can fail), and :meth:`UpstreamTarget.with_body`
  → :class:`UpstreamRequest` (which cannot); :meth:`UpstreamClient.build_request` does
  both at once;
- :meth:`UpstreamClient.send` → :class:`UpstreamResponse`: ``status_code``,
  ``is_success``, ``headers`` (``get(name)``, ``raw`` pairs), ``aiter_raw()`` (the
  body as it arrives, byte for byte, no decoding), ``aiter_bytes()`` and ``aread()``
  (decoded as httpx would: ``gzip`` and ``deflate`` content codings undone, others
  left as they are), ``json()``, ``aclose()``.

Errors are httpx's exception types, so callers keep one vocabulary:
``httpx.ConnectTimeout`` (the connect timeout passed; 504 in the relay),
``httpx.ConnectError`` (refused, unreachable, DNS, TLS; 502 ``upstream_unreachable``),
``httpx.ReadError`` (the connection broke before or during the response).

Session: ``limit`` connections in all (``upstream_max_connections``; further
requests wait for a free one), idle connections kept ``keepalive_s``, no cookie jar
(the one client serves every task: a cookie upstream set for one request must not
ride along on the next), no proxy or netrc from the environment (``trust_env``
off), no automatic decompression and no redirects (the gateway asks upstream for
``accept-encoding: identity`` and relays bytes as they come). A response closed
before its end closes its connection; a finished one returns it to the pool.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, overload

import aiohttp
import httpx
import yarl

#: What the aiohttp errors mean for the relay (first match wins).
_ERRORS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], type[httpx.TransportError]], ...] = (
    ((aiohttp.ServerTimeoutError, TimeoutError), httpx.ConnectTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    ((aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError), httpx.ReadError),
)


def upstream_error(exc: BaseException) -> httpx.TransportError | None:
    """The httpx exception for an aiohttp error (``None`` for anything else)."""
    for kinds, mapped in _ERRORS:
        if isinstance(exc, kinds):
            return mapped(str(exc) or type(exc).__name__)
    return None


class RequestHeaders(list[tuple[str, str]]):
    """A request's headers: ``(name, value)`` text pairs, and ``raw``, the same as
    bytes (as ``httpx.Headers.raw`` gives them)."""

    @property
    def raw(self) -> list[tuple[bytes, bytes]]:
        return [(name.encode("latin-1"), value.encode("utf-8")) for name, value in self]


@dataclass(slots=True)
class UpstreamRequest:
    """A request as it will be sent (aiohttp adds ``host`` and ``content-length``)."""

    method: str
    url: yarl.URL
    content: bytes | None
    headers: RequestHeaders


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """Where a request goes and with which headers, already validated
    (:meth:`UpstreamClient.target`); its body is given last (:meth:`with_body`), so a
    request can be checked before admission and built once after it."""

    method: str
    url: yarl.URL
    headers: RequestHeaders

    def with_body(self, content: bytes | None) -> UpstreamRequest:
        """The request with ``content`` as its body. Never raises."""
        return UpstreamRequest(self.method, self.url, content, self.headers)


class ResponseHeaders:
    """An upstream response's headers: :meth:`get` (case-insensitive, last value of
    a repeated name is not merged) and ``raw``, the pairs as received."""

    __slots__ = ("_headers", "raw")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._headers = response.headers
        self.raw: tuple[tuple[bytes, bytes], ...] = response.raw_headers

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._headers.get(name, default)


class UpstreamResponse:
    """One upstream response, its body read as it is consumed."""

    __slots__ = ("_response", "status_code", "headers", "_body")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code: int = response.status
        self.headers = ResponseHeaders(response)
        self._body: bytes | None = None

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300

    def aiter_raw(self) -> _RawChunks:
        """The body as it arrives (each item is what one read returned; nothing is
        decoded or re-chunked). Raises ``httpx.ReadError`` when it breaks off."""
        return _RawChunks(self._response.content)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives, content coding undone (see the module docstring).
        Raises ``httpx.ReadError`` or ``httpx.DecodingError``."""
        decoder = _Decoder(self.headers.get("content-encoding"))
        async for chunk in self.aiter_raw():
            out = decoder.decode(chunk)
            if out:
                yield out
        tail = decoder.flush()
        if tail:
            yield tail

    async def aread(self) -> bytes:
        """The whole body, content coding undone. Raises ``httpx.ReadError`` or
        ``httpx.DecodingError``."""
        if self._body is None:
            try:
                raw = await self._response.read()
            except Exception as exc:  # noqa: BLE001 - re-raised below, aiohttp's as httpx's
                raise upstream_error(exc) or exc  # aiohttp's errors as httpx's; others as they are
            decoder = _Decoder(self.headers.get("content-encoding"))
            self._body = decoder.decode(raw) + decoder.flush()
        return self._body

    def json(self) -> Any:
        """The body read by :meth:`aread`, decoded as JSON (``ValueError`` if it is not)."""
        if self._body is None:
            raise RuntimeError("read the body first (aread)")
        return json.loads(self._body)

    async def aclose(self) -> None:
        """Give the connection back: to the pool when the body was read to its end;
        aiohttp closes it otherwise (a stream cut short is never reused)."""
        self._response.release()


class _Decoder:
    """Undoes ``gzip`` / ``deflate`` content codings (applied in order, undone in
    reverse); other codings pass through, as with httpx."""

    def __init__(self, content_encoding: str | None) -> None:
        codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
        self._steps = [c for c in reversed(codings) if c in ("gzip", "x-gzip", "deflate")]
        self._objs = [zlib.decompressobj(zlib.MAX_WBITS | 16 if c != "deflate" else zlib.MAX_WBITS)
                      for c in self._steps]
        self._first = [True] * len(self._steps)

    def decode(self, data: bytes) -> bytes:
        for i, step in enumerate(self._steps):
            if not data:
                break
            try:
                data = self._objs[i].decompress(data)
            except zlib.error as exc:
                if step == "deflate" and self._first[i]:  # raw deflate, no zlib header
                    self._objs[i] = zlib.decompressobj(-zlib.MAX_WBITS)
                    data = self._objs[i].decompress(data)
                else:
                    raise httpx.DecodingError(f"{step}: {exc}") from exc
            self._first[i] = False
        return data

    def flush(self) -> bytes:
        out = b""
        for obj in self._objs:
            if out:
                out = obj.decompress(out)
            out += obj.flush()
        return out


class _RawChunks:
    """Async iterator over a response body's reads (``StreamReader.readany``)."""

    __slots__ = ("_content",)

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content

    def __aiter__(self) -> _RawChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except Exception as exc:  # noqa: BLE001 - re-raised below, aiohttp's as httpx's
            raise upstream_error(exc) or exc  # aiohttp's errors as httpx's; others as they are
        if not chunk:
            raise StopAsyncIteration
        return chunk


class UpstreamClient:
    """The process's pooled upstream client (see the module docstring). The session
    is made on first use, inside the running event loop."""

    def __init__(self, *, limit: int, connect_timeout_s: float, keepalive_s: float = 5.0) -> None:
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _new_session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0,
                                           keepalive_timeout=self._keepalive_s),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
            timeout=self._timeout,
        )

    def build_request(self, method: str, url: str | yarl.URL, *, content: bytes | None = None,
                      headers: list[tuple[bytes, bytes]] | dict[str, str] | None = None) -> UpstreamRequest:
        """A request for :meth:`send`: :meth:`target` with ``content`` as its body.
        Raises ``httpx.InvalidURL``."""
        return self.target(method, url, headers).with_body(content)

    def target(self, method: str, url: str | yarl.URL,
               headers: list[tuple[bytes, bytes]] | dict[str, str] | None = None) -> UpstreamTarget:
        """Method, URL and headers of a request, validated; ``httpx.InvalidURL`` unless
        ``url`` is an absolute http(s) URL. Header values are sent as UTF-8 text (the
        gateway admits no other header bytes); names and values are kept as given,
        and ``accept-encoding: identity`` is added when the headers name none."""
        if headers is None:
            pairs = RequestHeaders()
        elif isinstance(headers, dict):
            pairs = RequestHeaders(headers.items())
        else:
            pairs = RequestHeaders([(_name(name), _text(value)) for name, value in headers])
        if not any(name.lower() == "accept-encoding" for name, _ in pairs):
            pairs.append(("accept-encoding", "identity"))  # else aiohttp asks for gzip
        return UpstreamTarget(method, _checked(url), pairs)

    async def send(self, request: UpstreamRequest, *, stream: bool = True) -> UpstreamResponse:
        """Send ``request`` and return once the response head is in; its body is read
        as it is consumed, or here when ``stream`` is false. Raises
        ``httpx.ConnectTimeout``, ``httpx.ConnectError`` or ``httpx.ReadError``."""
        if self._session is None:
            self._session = self._new_session()
        try:
            response = await self._session.request(request.method, request.url, data=request.content,
                                                   headers=request.headers, allow_redirects=False)
        except Exception as exc:  # noqa: BLE001 - re-raised below, aiohttp's as httpx's
            raise upstream_error(exc) or exc  # aiohttp's errors as httpx's; others as they are
        upstream = UpstreamResponse(response)
        if not stream:
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
        return upstream

    async def get(self, url: str, *, headers: list[tuple[bytes, bytes]] | dict[str, str] | None = None
                  ) -> UpstreamResponse:
        """``GET url``, body read (``json()`` works on the result)."""
        return await self.send(self.build_request("GET", url, headers=headers), stream=False)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: URLs parsed by :func:`_checked` (the same few provider URLs on every request; yarl's
#: parse is ~2 µs): at most :data:`_URLS_SIZE` of at most 2,048 characters.
_URLS: dict[str, yarl.URL] = {}
_URLS_SIZE = 1024


def _checked(url: str | yarl.URL) -> yarl.URL:
    """``url`` parsed; ``httpx.InvalidURL`` unless it is an absolute http(s) URL (so a
    request that cannot be sent fails when it is built, before any admission)."""
    if isinstance(url, str):
        known = _URLS.get(url)
        if known is not None:
            return known
        parsed = _parsed(url)
        if len(url) <= 2048:
            if len(_URLS) >= _URLS_SIZE:
                _URLS.clear()
            _URLS[url] = parsed
        return parsed
    return _parsed(url)


def _parsed(url: str | yarl.URL) -> yarl.URL:
    try:
        parsed = url if isinstance(url, yarl.URL) else yarl.URL(url)
    except (ValueError, TypeError) as exc:
        raise httpx.InvalidURL(f"invalid upstream URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise httpx.InvalidURL(f"invalid upstream URL: {str(url)[:200]}")
    return parsed


#: Header names and values decoded by :func:`_name` and :func:`_text`, shared by every
#: request that sends the same bytes (aiohttp keeps a request's header strings for the
#: life of its response: ~470 B per open stream when each request decoded its own): at
#: most :data:`_TEXTS_SIZE` of at most :data:`_TEXT_MAX` bytes; credentials are never
#: forwarded from the client, so what is kept is the provider's key and headers seen
#: on every request (content type, user agent, ...).
_TEXTS: dict[bytes, str] = {}
_NAMES: dict[bytes, str] = {}
_TEXTS_SIZE = 1024
_TEXT_MAX = 256


def _name(name: bytes) -> str:
    """A header name as text (latin-1), shared with earlier requests sending it."""
    known = _NAMES.get(name)
    return known if known is not None else _keep(_NAMES, name, name.decode("latin-1"))


def _text(value: bytes) -> str:
    """A header value as text (UTF-8, else latin-1), shared with earlier requests sending it."""
    known = _TEXTS.get(value)
    if known is not None:
        return known
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:  # not admitted by the gateway; kept readable rather than lost
        text = value.decode("latin-1")
    return _keep(_TEXTS, value, text)


def _keep(table: dict[bytes, str], raw: bytes, text: str) -> str:
    """``text``, kept in ``table`` under ``raw`` when ``raw`` is short (a full table is emptied)."""
    if len(raw) <= _TEXT_MAX:
        if len(table) >= _TEXTS_SIZE:
            table.clear()
        table[raw] = text
    return text
