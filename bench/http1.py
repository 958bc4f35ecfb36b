"""The load generator's HTTP/1.1 client: one keep-alive connection per
:class:`Conn`, at most one request in flight, parsing just enough of the answer
(``Content-Length`` and chunked bodies) to time it: status, first body byte, end,
whether the stream's ``data: [DONE]`` arrived. SSE event separators seen by all
connections of the process are counted in :data:`EVENTS`.
"""

from __future__ import annotations

import asyncio
import time

_DONE = b"data: [DONE]"
EVENTS = [0]
"""SSE events (blank-line separators) received by this process, all connections."""


class ResponseError(Exception):
    pass


class Conn(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight.

    :meth:`send` returns ``(status, t_first_body, t_end, done_seen)`` with
    ``time.perf_counter()`` seconds."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.future: asyncio.Future | None = None
        self.closed = False
        self.close_after = False
        self.first: asyncio.Future | None = None  # resolved at the first body byte (hold mode)
        self._reset()

    def _reset(self) -> None:
        self.state = 0  # 0 head, 1 length body, 2 chunk size line, 3 chunk data, 4 trailer
        self.status = 0
        self.remaining = 0
        self.t_first = 0.0
        self.tail = b""
        self.prev_nl = False  # the last body byte seen was "\n" (an event end may straddle reads)

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.future is not None and not self.future.done():
            self.future.set_exception(ResponseError(f"connection lost: {exc}"))
            self.future.exception()  # retrieved: an abandoned request is not an error to log
        if self.first is not None and not self.first.done():
            self.first.set_result(None)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.future is None:
            return
        self.buf += data
        future = self.future
        try:
            self._parse(now)
        except ResponseError as exc:
            if not future.done():
                future.set_exception(exc)
        if self.first is not None and not self.first.done() and (self.t_first or future.done()):
            self.first.set_result(None)

    # -- parsing
    def _body(self, buf: bytearray, start: int, stop: int, now: float) -> None:
        if not self.t_first and stop > start:
            self.t_first = now
        if stop - start >= 16:
            self.tail = bytes(buf[stop - 16 : stop])
        else:
            self.tail = (self.tail + bytes(buf[start:stop]))[-16:]

    def _finish(self, now: float) -> None:
        future = self.future
        result = (self.status, self.t_first or now, now, _DONE in self.tail)
        self._reset()
        self.future = None
        if future is not None and not future.done():
            future.set_result(result)

    def _parse(self, now: float) -> None:
        buf = self.buf
        pos = 0
        n = len(buf)
        try:
            while pos < n or self.state == 1 and self.remaining == 0:
                state = self.state
                if state == 0:
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        return
                    head = bytes(buf[pos:end]).lower()
                    pos = end + 4
                    try:
                        self.status = int(head[9:12])
                    except ValueError:
                        raise ResponseError("bad status line") from None
                    self.close_after = b"\r\nconnection: close" in head
                    if b"\r\ntransfer-encoding: chunked" in head:
                        self.state = 2
                    else:
                        i = head.find(b"\r\ncontent-length:")
                        if i < 0:
                            raise ResponseError("no content-length and not chunked")
                        j = head.find(b"\r\n", i + 2)
                        self.remaining = int(head[i + 17 : j if j > 0 else None])
                        self.state = 1
                elif state == 1:
                    take = min(n - pos, self.remaining)
                    self._body(buf, pos, pos + take, now)
                    pos += take
                    self.remaining -= take
                    if self.remaining == 0:
                        self._finish(now)
                        return
                elif state == 2 or state == 3:
                    pos, state = self._chunks(buf, pos, n, state, now)
                    self.state = state
                    if state != 4:
                        return  # need more bytes
                else:  # trailers until an empty line
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        return
                    empty = end == pos
                    pos = end + 2
                    if empty:
                        self._finish(now)
                        return
        finally:
            del buf[:pos]

    def _chunks(self, buf: bytearray, pos: int, n: int, state: int, now: float) -> tuple[int, int]:
        """Walk chunked framing from ``pos``: the hot loop for streamed bodies.
        Returns the new position and state (2 size line, 3 chunk data, 4 trailer)."""
        remaining = self.remaining
        find = buf.find
        tail = self.tail
        while pos < n:
            if state == 2:
                end = find(b"\r\n", pos)
                if end < 0:
                    break
                line = buf[pos:end]
                size = int(line.split(b";", 1)[0] if b";" in line else line, 16)
                pos = end + 2
                if size == 0:
                    state = 4
                    break
                remaining = size + 2  # data + CRLF
                state = 3
            else:
                take = n - pos
                if take > remaining:
                    take = remaining
                stop = pos + min(take, max(0, remaining - 2))
                if stop > pos:
                    if not self.t_first:
                        self.t_first = now
                    EVENTS[0] += buf.count(b"\n\n", pos, stop) + (self.prev_nl and buf[pos] == 10)
                    self.prev_nl = buf[stop - 1] == 10
                    tail = bytes(buf[stop - 16 : stop]) if stop - pos >= 16 else (tail + bytes(buf[pos:stop]))[-16:]
                pos += take
                remaining -= take
                if remaining == 0:
                    state = 2
        self.remaining = remaining
        self.tail = tail
        return pos, state

    async def send(self, data: bytes, timeout_s: float) -> tuple[int, float, float, bool]:
        assert self.transport is not None
        self.future = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await asyncio.wait_for(self.future, timeout_s)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def connect(host: str, port: int) -> Conn:
    _, conn = await asyncio.get_running_loop().create_connection(Conn, host, port)
    return conn
