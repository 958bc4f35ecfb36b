"""A client that leaves mid-stream ends the relay (:class:`app.proxy.relay.RelayResponse`)
both ways the relay learns it: through the server's
:data:`app.proxy.relay.ON_DISCONNECT` extension (no task waits on ``receive``; the
callback is withdrawn when the exchange ends) and, under a server without it, through
``receive`` answering ``http.disconnect``. Either way the upstream connection is closed
at once and the outcome is ``disconnected``. A bare loopback server on asyncio is the
upstream: one SSE event, then silence. The protocol's side (``connection_lost`` calls
back) is what the end-to-end tests in ``tests/test_watchdog.py`` exercise."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from app.proxy.outcome import Outcome, Watchdog
from app.proxy.relay import ON_DISCONNECT, RelayResponse
from app.proxy.upstream import create_client
from app.settings import Settings
from app.wire import CHAT_COMPLETIONS

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'


@asynccontextmanager
async def stalling_upstream(closed: asyncio.Event) -> AsyncIterator[str]:
    """One SSE event, then nothing; ``closed`` is set when the gateway closes the connection."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
            await writer.drain()
            await reader.read()  # until the gateway closes
            closed.set()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"


async def _relay(scope: dict[str, Any], receive: Callable[[], Any],
                 leave: Callable[[], None]) -> tuple[Outcome, float, list[dict[str, Any]]]:
    """Relay a stream; ``leave()`` once its first chunk was sent. The outcome, seconds from
    leaving to upstream's connection closed, the messages sent."""
    closed = asyncio.Event()
    outcomes: list[Outcome] = []
    sent: list[dict[str, Any]] = []
    left_at: list[float] = []

    async def on_finish(outcome: Outcome) -> None:
        outcomes.append(outcome)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("body") and not left_at:
            left_at.append(time.monotonic())
            leave()

    async with stalling_upstream(closed) as url:
        client = create_client(Settings())
        try:
            response = RelayResponse(client, client.build_request("POST", url, content=b'{"model": "m"}'),
                                     CHAT_COMPLETIONS, stream_requested=True, watchdog=Watchdog(0, 0),
                                     total_timeout_s=30, on_finish=on_finish,
                                     endpoint="/v1/chat/completions", model="m")
            await asyncio.wait_for(response(scope, receive, send), 5)
            await asyncio.wait_for(closed.wait(), 5)
        finally:
            await client.aclose()
    return outcomes[0], time.monotonic() - left_at[0], sent


def test_the_servers_disconnect_extension_ends_the_relay_without_a_watch_task() -> None:
    calls: list[Callable[[], None] | None] = []

    received: list[bool] = []

    async def receive() -> dict[str, Any]:
        received.append(True)
        await asyncio.Event().wait()  # never: a client that leaves is reported by the extension
        return {"type": "http.disconnect"}

    def watch(callback: Callable[[], None] | None) -> None:
        calls.append(callback)

    def leave() -> None:
        callback = calls[-1]
        assert callback is not None
        asyncio.get_running_loop().call_soon(callback)  # as the protocol's connection_lost does

    def leave_and_look() -> None:
        leave()
        watching.extend(t for t in asyncio.all_tasks() if "_wait_for_disconnect" in repr(t.get_coro()))

    watching: list[asyncio.Task[Any]] = []
    scope = {"type": "http", "extensions": {ON_DISCONNECT: {"watch": watch}}}
    outcome, elapsed, sent = asyncio.run(_relay(scope, receive, leave_and_look))
    assert watching == [] and received == []  # nothing waited on receive for the client
    assert outcome.kind == "disconnected" and elapsed < 1.0
    assert calls[0] is not None and calls[-1] is None and len(calls) == 2  # withdrawn at the end
    assert not any(m.get("more_body") is False for m in sent)  # the body was not ended for a client gone


def test_without_the_extension_receive_reports_the_disconnect() -> None:
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    outcome, elapsed, sent = asyncio.run(_relay({"type": "http"}, receive, gone.set))
    assert outcome.kind == "disconnected" and elapsed < 1.0
    assert not any(m.get("more_body") is False for m in sent)
