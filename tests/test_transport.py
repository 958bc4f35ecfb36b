"""The upstream client (``app.proxy.upstream.create_client``, on aiohttp) keeps the
guarantees the relay relies on: refused connections are connect errors (502) and
only real timeouts are timeouts (504), the connect timeout applies, the connection
cap holds and finished connections are reused, a stream closed early closes its
connection, no proxy is taken from the environment, the body arrives byte for byte
and undecoded, and no cookie travels between requests.

Each test runs a real HTTP/1.1 server on loopback (a bare asyncio server, so the
test sees exactly what went over the wire)."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from app.proxy.upstream import create_client
from app.settings import Settings
from tests.support import free_port

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def http_server(handler: Handler) -> AsyncIterator[dict]:
    """A loopback server: ``handler(request head, writer)`` answers each request
    (requests carry no body here). Yields stats: ``connections`` (total) and
    ``open`` / ``max_open`` (concurrent) and ``heads`` (each request head)."""
    stats = {"connections": 0, "open": 0, "max_open": 0, "heads": []}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stats["connections"] += 1
        stats["open"] += 1
        stats["max_open"] = max(stats["max_open"], stats["open"])
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                stats["heads"].append(head)
                await handler(head, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            stats["open"] -= 1
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    stats["url"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        yield stats


def _response(body: bytes, *headers: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _client(**settings):
    return create_client(Settings(database_url="postgresql+asyncpg://unused/unused", **settings))


async def _get(client, url: str, **headers: str) -> tuple[httpx.Response, bytes]:
    """GET ``url`` through the relay's client; the response and its raw body."""
    response = await client.send(client.build_request("GET", url, headers=headers), stream=True)
    try:
        return response, b"".join([part async for part in response.aiter_raw()])
    finally:
        await response.aclose()


async def test_refused_connection_is_a_connect_error() -> None:
    async with _client() as client:
        with pytest.raises(httpx.ConnectError):
            await _get(client, f"http://127.0.0.1:{free_port()}/v1/models")


async def test_connect_timeout_is_a_timeout() -> None:
    # A listener whose accept queue is full: the kernel drops further SYNs, so the
    # connect hangs until the client's connect timeout.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(listener.getsockname())
            fillers.append(s)
        await asyncio.sleep(0.2)
        host, port = listener.getsockname()
        async with _client(upstream_connect_timeout_s=0.5) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(httpx.ConnectTimeout):
                await _get(client, f"http://{host}:{port}/v1/models")
            assert asyncio.get_running_loop().time() - started < 30
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_close_before_headers_is_not_a_timeout() -> None:
    async def hang_up(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.transport.abort()

    async with http_server(hang_up) as server, _client() as client:
        with pytest.raises(httpx.TransportError) as exc:
            await _get(client, server["url"] + "/v1/models")
        assert not isinstance(exc.value, httpx.TimeoutException), repr(exc.value)


async def test_close_mid_body_is_a_read_error() -> None:
    async def half(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()
        writer.transport.abort()

    async with http_server(half) as server, _client() as client:
        with pytest.raises(httpx.ReadError):
            await _get(client, server["url"] + "/v1/models")


async def test_connection_cap_holds_and_connections_are_reused() -> None:
    async def slow(head: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.05)
        writer.write(_response(b"{}"))
        await writer.drain()

    async with http_server(slow) as server, _client(upstream_max_connections=2) as client:
        await asyncio.gather(*(_get(client, server["url"] + "/v1/models") for _ in range(8)))
        assert server["max_open"] <= 2 and server["connections"] <= 2, server
        assert len(server["heads"]) == 8


async def test_proxy_environment_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead_proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def ok(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_response(b"{}"))
        await writer.drain()

    async with http_server(ok) as server, _client() as client:
        got, _ = await _get(client, server["url"] + "/v1/models")
        assert got.status_code == 200 and server["heads"][0].startswith(b"GET /v1/models ")


async def test_body_is_relayed_undecoded_and_no_cookie_is_kept() -> None:
    compressed = gzip.compress(b'{"ok": true}')

    async def gzipped(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_response(compressed, "content-encoding: gzip", "set-cookie: sid=secret; Path=/"))
        await writer.drain()

    async with http_server(gzipped) as server, _client() as client:
        url = server["url"].replace("127.0.0.1", "localhost")  # aiohttp keeps no cookies for IPs
        for _ in range(2):
            _, raw = await _get(client, url + "/v1/models", **{"accept-encoding": "identity"})
            assert raw == compressed
        first, second = (head.lower() for head in server["heads"])
        assert b"accept-encoding: identity\r\n" in first
        assert b"cookie" not in second, second


async def test_a_stream_closed_early_closes_its_connection() -> None:
    closed = asyncio.Event()

    async def endless(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(200):
                writer.write(b"f\r\ndata: {\"a\":1}\n\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)
        except ConnectionError:
            closed.set()
            raise
        closed.set()

    async with http_server(endless) as server, _client() as client:
        response = await client.send(client.build_request("GET", server["url"] + "/v1/x"), stream=True)
        first = await response.aiter_raw().__anext__()
        assert first.startswith(b"data: ")
        await response.aclose()
        await asyncio.wait_for(closed.wait(), 10)  # long before the 2 s the server would stream


async def test_get_reads_json() -> None:
    async def models(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_response(b'{"data": [{"id": "m"}]}', "content-type: application/json"))
        await writer.drain()

    async with http_server(models) as server, _client() as client:
        got = await client.get(server["url"] + "/v1/models")
        assert got.status_code == 200 and got.json() == {"data": [{"id": "m"}]}


def test_a_request_rebuilt_from_its_raw_headers_is_the_same() -> None:
    client = _client()
    pairs = [(b"content-type", b"application/json"), (b"x-note", "café".encode())]
    first = client.build_request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}", headers=pairs)
    again = client.build_request("POST", first.url, content=b"{}", headers=first.headers.raw)
    assert again.headers == first.headers and (b"x-note", "café".encode()) in again.headers.raw


def test_requests_sending_the_same_header_bytes_share_their_text() -> None:
    """aiohttp keeps a request's header strings for the life of its response: requests
    sending the same bytes share one decoded name and value (not one copy per open
    stream); a long value is decoded for its request alone, and the text is the same."""
    client = _client()
    url = "http://127.0.0.1:1/v1/chat/completions"

    def pairs(note: bytes) -> list[tuple[bytes, bytes]]:  # fresh bytes objects each time
        return [(bytes(bytearray(b"content-type")), bytes(bytearray(b"application/json"))),
                (bytes(bytearray(b"x-note")), bytes(bytearray(note)))]

    first = client.build_request("POST", url, content=b"{}", headers=pairs("café".encode()))
    again = client.build_request("POST", url, content=b"{}", headers=pairs("café".encode()))
    assert again.headers == first.headers == [("content-type", "application/json"), ("x-note", "café"),
                                              ("accept-encoding", "identity")]
    assert all(a[0] is b[0] and a[1] is b[1] for a, b in zip(first.headers, again.headers))
    long = b"v" * 10_000
    one = client.build_request("POST", url, headers=pairs(long)).headers[1][1]
    other = client.build_request("POST", url, headers=pairs(long)).headers[1][1]
    assert one == other == long.decode() and one is not other


async def test_aread_and_aiter_bytes_undo_gzip_as_httpx_would() -> None:
    plain = b'{"ok": true}' * 50

    async def gzipped(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(_response(gzip.compress(plain), "content-encoding: gzip"))
        await writer.drain()

    async with http_server(gzipped) as server, _client() as client:
        got = await client.get(server["url"] + "/v1/models")
        assert await got.aread() == plain and got.is_success
        response = await client.send(client.build_request("GET", server["url"] + "/v1/models"))
        assert b"".join([part async for part in response.aiter_bytes()]) == plain
        await response.aclose()


@pytest.mark.parametrize("url", ["/v1/relative", "ftp://127.0.0.1/x", "http://[::1/x"])
def test_an_unsendable_url_fails_when_the_request_is_built(url: str) -> None:
    with pytest.raises(httpx.InvalidURL):
        _client().build_request("POST", url, content=b"{}")
