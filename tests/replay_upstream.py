"""A loopback upstream that replays SSE fixture files with a chosen write plan.

:class:`ReplayUpstream` is a real HTTP/1.1 server on 127.0.0.1 (asyncio streams in a
background thread, keep-alive, chunked responses). It answers any ``POST`` with the
bytes of one fixture file, ``content-type: text/event-stream``, written in the pieces
the request asks for. The plan travels in request headers, so it passes through the
gateway unchanged and needs no shared state:

- ``x-replay-fixture``: the fixture file name (under the server's ``root``);
- ``x-replay-cuts``: byte offsets, comma-separated, where the file is split into
  separate writes; ``events`` (the default) splits after every blank line, so each
  SSE event is one write;
- ``x-replay-stop-at``: send only the file's first N bytes;
- ``x-replay-linger-s``: after the last byte, keep the response open this long before
  ending it (a provider slow to close after its terminal event).

Each piece is one HTTP chunk followed by a drain and a short pause, so the reader
sees one read per piece on loopback (not guaranteed by TCP; enough for the tests,
which hold whatever the split). Only for tests.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

_BLANK_LINE = re.compile(rb"\r\n\r\n|\n\n|\r\r")
PAUSE_S = 0.002  # between writes, so each piece is its own read


def event_cuts(raw: bytes) -> list[int]:
    """Offsets just after each blank line (one write per SSE event)."""
    return [m.end() for m in _BLANK_LINE.finditer(raw)]


def pieces(raw: bytes, cuts: list[int]) -> list[bytes]:
    """``raw`` split at ``cuts`` (sorted, deduplicated, out-of-range ignored); no empty piece."""
    points = sorted({0, len(raw), *(c for c in cuts if 0 < c < len(raw))})
    return [raw[a:b] for a, b in zip(points, points[1:])]


class ReplayUpstream:
    """The replay server (see module docstring). Use as a context manager; ``base_url``
    is ``http://127.0.0.1:PORT``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ReplayUpstream":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests += 1
                await self._answer(writer, headers)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, headers: dict[str, str]) -> None:
        name = headers.get("x-replay-fixture", "")
        path = (self.root / name).resolve()
        if not name or path.parent != self.root.resolve() or not path.is_file():
            body = f"unknown fixture {name!r}".encode()
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return
        raw = path.read_bytes()
        raw = raw[: int(headers.get("x-replay-stop-at", len(raw)))]
        plan = headers.get("x-replay-cuts", "events")
        cuts = event_cuts(raw) if plan == "events" else [int(c) for c in plan.split(",") if c]
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in pieces(raw, cuts):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(PAUSE_S)
        linger = float(headers.get("x-replay-linger-s", "0"))
        if linger:
            await asyncio.sleep(linger)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
