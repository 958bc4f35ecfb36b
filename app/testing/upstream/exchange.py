"""One response in flight (sending, pausing, disconnect detection) and its record."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .reply import CONTENT, PLACEHOLDER_B, TERMINAL, Event, dumps
from .wire import BASE_HEADERS, JSON_TYPE

if TYPE_CHECKING:
    from .app import UpstreamApp

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(slots=True)
class RecordedRequest:
    """One request the upstream received, and what became of its response.

    Times are ``time.monotonic()`` seconds. ``wire`` is the endpoint kind (``chat``,
    ``completions``, ``responses``, ``messages``, ``embeddings``, ``count_tokens``,
    ``input_tokens``, ``models``) or ``None`` for an unknown path. ``finished`` is
    true once the HTTP body was ended (cleanly, even for ``truncate``);
    ``disconnected`` when the client went away while the response was pausing.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    received_at: float
    wire: str | None = None
    scenario: str | None = None
    stream: bool = False
    status: int | None = None
    finished: bool = False
    finished_at: float | None = None
    disconnected: bool = False
    disconnected_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``body`` as UTF-8 text)."""
        return {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body.decode("utf-8", "replace"),
            "json": self.json,
            "received_at": self.received_at,
            "wire": self.wire,
            "scenario": self.scenario,
            "stream": self.stream,
            "status": self.status,
            "finished": self.finished,
            "finished_at": self.finished_at,
            "disconnected": self.disconnected,
            "disconnected_at": self.disconnected_at,
        }



class AbortConnection(Exception):
    """Raised inside the app to make uvicorn drop the TCP connection mid-response."""


class _DropAbortLogs(logging.Filter):
    """Keeps uvicorn from logging our deliberate aborts as application errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info
        return not (exc and isinstance(exc[1], AbortConnection))


def install_log_filter() -> None:
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropAbortLogs) for f in log.filters):
        log.addFilter(_DropAbortLogs())


class Exchange:
    """One response in flight: sending, pausing, disconnect detection."""

    __slots__ = ("app", "rec", "receive", "send", "token", "watcher", "content_sent")

    def __init__(self, app: UpstreamApp, rec: RecordedRequest, receive: Receive, send: Send) -> None:
        self.app = app
        self.rec = rec
        self.receive = receive
        self.send = send
        self.token = os.urandom(12).hex().encode()
        self.watcher: asyncio.Task[None] | None = None
        self.content_sent = 0

    async def _watch(self) -> None:
        """Wait for ``http.disconnect`` (read once the request body has been consumed)."""
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if not self.rec.finished:
            self.rec.disconnected = True
            self.rec.disconnected_at = time.monotonic()

    async def pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; ``False`` (and recorded) if the client went away meanwhile."""
        if self.watcher is None:
            self.watcher = asyncio.ensure_future(self._watch())
        closing = self.app.closing_future()
        if closing.done():
            raise AbortConnection("upstream shutting down")
        if seconds > 0:
            await asyncio.wait((self.watcher, closing), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(0)
        if self.watcher.done():
            return False
        if closing.done():
            raise AbortConnection("upstream shutting down")
        return True

    def close(self) -> None:
        if self.watcher is not None and not self.watcher.done():
            self.watcher.cancel()

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.rec.status = status
        request_id = b"req_" + self.token
        extra = [(b"x-request-id", request_id)]
        if self.rec.wire in ("messages", "count_tokens"):
            extra.append((b"request-id", request_id))
        await self.send({"type": "http.response.start", "status": status, "headers": headers + extra + BASE_HEADERS})

    def fill(self, data: bytes) -> bytes:
        """``data`` with this response's ids in place of the cached placeholder."""
        return data.replace(PLACEHOLDER_B, self.token) if PLACEHOLDER_B in data else data

    async def write(self, data: bytes, last: bool = False) -> None:
        data = self.fill(data)
        await self.send({"type": "http.response.body", "body": data, "more_body": not last})
        if last:
            self.rec.finished = True
            self.rec.finished_at = time.monotonic()

    async def json(self, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        data = self.fill(body) if isinstance(body, bytes) else dumps(body)
        await self.start(status, [JSON_TYPE, (b"content-length", str(len(data)).encode()), *(headers or [])])
        await self.write(data, last=True)

    async def events(self, events: Iterable[Event], delay_s: float) -> bool:
        """Send SSE events, pausing ``delay_s`` before every content event but the first."""
        events = list(events)
        if delay_s <= 0:
            self.content_sent += sum(1 for kind, _ in events if kind == CONTENT)
            if events:
                await self.write(b"".join(data for _, data in events))
            return True
        for kind, data in events:
            if kind == CONTENT:
                if self.content_sent and not await self.pause(delay_s):
                    return False
                self.content_sent += 1
            await self.write(data)
        return True

    async def heartbeats(self, beat: bytes, interval_s: float, duration_s: float) -> bool:
        """Send only ``beat`` every ``interval_s`` for ``duration_s``."""
        deadline = time.monotonic() + duration_s
        while (left := deadline - time.monotonic()) > 0:
            if not await self.pause(min(interval_s, left)):
                return False
            if left >= interval_s:
                await self.write(beat)
        return True


def content_cut(events: list[Event], after: int) -> int:
    """Index of the ``after + 1``-th content event (``len(events)`` if there is none)."""
    seen = 0
    for i, (kind, _) in enumerate(events):
        if kind == CONTENT:
            if seen == after:
                return i
            seen += 1
    return len(events)


def terminal_index(events: list[Event]) -> int:
    return next((i for i, (kind, _) in enumerate(events) if kind == TERMINAL), len(events))


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)

