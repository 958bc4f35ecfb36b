"""A non-streamed answer relayed whole (:class:`app.proxy.relay.RelayResponse`): its
body is read by the request's total deadline, the same one its head had. A body that
does not finish in time is 504 ``upstream_timeout``; one that breaks off after the
head is 502 ``upstream_error`` (the outcome ``truncated``), never ``unreachable``; a
whole one is relayed byte for byte. A bare loopback server on asyncio answers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from app.proxy.outcome import Outcome, Watchdog
from app.proxy.relay import RelayResponse
from app.proxy.upstream import create_client
from app.settings import Settings
from app.wire import CHAT_COMPLETIONS

Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n"


@asynccontextmanager
async def upstream(answer: Answer) -> AsyncIterator[str]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            await answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"


async def relay(url: str, total_timeout_s: float = 0.5) -> tuple[list[dict[str, Any]], Outcome, float]:
    """Run one RelayResponse as the ASGI app; the messages it sent, its outcome, seconds."""
    outcomes: list[Outcome] = []

    async def on_finish(outcome: Outcome) -> None:
        outcomes.append(outcome)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client never leaves
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    client = create_client(Settings())
    try:
        response = RelayResponse(client, client.build_request("POST", url, content=b'{"model": "m"}'),
                                 CHAT_COMPLETIONS, stream_requested=False, watchdog=Watchdog(30, 30),
                                 total_timeout_s=total_timeout_s, on_finish=on_finish,
                                 endpoint="/v1/chat/completions", model="m")
        started = time.monotonic()
        await response({"type": "http"}, receive, send)
        return sent, outcomes[0], time.monotonic() - started
    finally:
        await client.aclose()


async def _whole(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + b'{"id": "x", "object": "chat.completion"}')
    await writer.drain()


async def _stalls_after_head(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + b'{"id": ')
    await writer.drain()
    await asyncio.sleep(5)


async def _breaks_after_head(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + b'{"id": ')
    await writer.drain()


async def _case(answer: Answer) -> tuple[list[dict[str, Any]], Outcome, float]:
    async with upstream(answer) as url:
        return await relay(url)


def test_a_whole_body_is_relayed_byte_for_byte() -> None:
    sent, outcome, _ = asyncio.run(_case(_whole))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert sent[1] == {"type": "http.response.body", "body": b'{"id": "x", "object": "chat.completion"}',
                       "more_body": False}
    assert outcome.kind == "completed" and outcome.status == 200


def test_a_body_not_finished_by_the_total_deadline_is_504_upstream_timeout() -> None:
    sent, outcome, elapsed = asyncio.run(_case(_stalls_after_head))
    assert sent[0]["status"] == 504 and 0.4 <= elapsed < 4
    assert json.loads(sent[1]["body"])["error"]["code"] == "upstream_timeout"
    assert outcome.kind == "upstream_timeout" and outcome.detail["code"] == "upstream_timeout"


def test_a_body_broken_off_after_the_head_is_502_upstream_error_not_unreachable() -> None:
    sent, outcome, _ = asyncio.run(_case(_breaks_after_head))
    assert sent[0]["status"] == 502
    assert json.loads(sent[1]["body"])["error"]["code"] == "upstream_error"
    assert outcome.kind == "truncated" and outcome.detail["code"] == "upstream_error"


def test_the_request_is_not_held_once_sent() -> None:
    """The forwarded body (an agent's whole history, often 100 KB and more) is let go
    once upstream has it, not held for the life of the answer."""
    held: list[bool] = []

    async def run() -> None:
        async with upstream(_whole) as url:
            client = create_client(Settings())

            async def send(message: dict[str, Any]) -> None:
                held.append(response.request is not None)

            async def receive() -> dict[str, Any]:
                await asyncio.sleep(3600)
                return {"type": "http.disconnect"}

            async def on_finish(outcome: Outcome) -> None:
                pass

            try:
                response = RelayResponse(client, client.build_request("POST", url, content=b'{"model": "m"}'),
                                         CHAT_COMPLETIONS, stream_requested=False, watchdog=Watchdog(30, 30),
                                         total_timeout_s=5, on_finish=on_finish,
                                         endpoint="/v1/chat/completions", model="m")
                assert response.request is not None
                await response({"type": "http"}, receive, send)
            finally:
                await client.aclose()

    asyncio.run(run())
    assert held == [False, False]  # the start and the body went out with no request held
