"""The relay: send one admitted request upstream and pass the answer back as it arrives.

:class:`RelayResponse` is an ASGI response that owns the whole upstream exchange:

- **Streams** (``text/event-stream``) are relayed chunk by chunk, byte for byte, while
  an incremental SSE decoder feeds the wire format's observer (tool calls, usage,
  progress); an incomplete trailing event is held back until its blank line arrives,
  so a cut never splices the terminal error into half an event. The **stream-silence
  watchdog** (:class:`app.proxy.read_deadline.ReadDeadline`) bounds each
  upstream read: before the first content event the deadline is
  ``stream_first_event_timeout_s`` from the start, after it ``stream_idle_timeout_s``
  from the last data event. Heartbeats (SSE comments, Anthropic ``ping``) are relayed
  but move no deadline. On a stall, or when upstream ends without its terminal
  event, the upstream connection is closed and the client gets the format's terminal
  error event (:meth:`app.wire.base.WireFormat.stream_error`).
- **After the terminal event** (or upstream's own error event) whatever upstream
  still sends is relayed until it closes (Responses ``error`` then
  ``response.failed``; a ``data: [DONE]`` after ``response.completed``), for at most
  ``Watchdog.close_grace_s``; then the gateway closes the stream itself, dropping a
  half-received event. Nothing is ever appended after a terminal event.
- **At upstream's close**, bytes after the last blank line are read as the event a
  blank line would end: if that is the terminal event (or the terminal event came
  before), they are relayed exactly as received and the stream ended normally;
  otherwise they are dropped and the stream counts as truncated.
- **Bodies** are read whole (bounded by ``upstream_timeout_s``) and passed through
  unchanged with upstream's status and headers.
- **Which is which**: a ``text/event-stream`` response is a stream; so is a successful
  response to a request that asked for one (``"stream": true``) whose first bytes are an
  SSE field or comment, whatever its content type (``text/plain``, ``application/json``).
- **Provider keys** are masked in relayed headers and bytes (:mod:`app.proxy.redact`).
- **Client disconnects** are watched for the whole exchange; the upstream request is
  cancelled at once and its connection released.
- **Stops**: :meth:`RelayResponse.cut` ends the exchange when its task is latched
  elsewhere (:mod:`app.proxy.stop_watch`): before the response has started the
  upstream request is cancelled and the client gets the stop refusal (403/409); a
  stream is cut at its next read (the read's timeout fires at once), its upstream
  connection closed and the client gets the format's terminal error with ``code`` =
  the stop reason. A body already being sent is left to finish.

What happened is handed to an ``on_finish`` callback as an :class:`Outcome` after the
client has its last byte (accounting never delays the relay).
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, Awaitable, Callable

import httpx
from starlette.responses import Response

from app.errors import GatewayError, render_error, wire_status
from app.guard.repeated_output import OutputMonitor
from app.proxy.open_requests import OpenRequests
from app.proxy.outcome import Outcome, Watchdog
from app.proxy.read_deadline import ReadDeadline
from app.proxy.redact import Redactor
from app.proxy.stream_end import End, close_held, error_type, silence_end
from app.proxy.usage_chunk import strip_usage_chunks
from app.proxy.upstream import response_headers
from app.wire import json_text
from app.wire.base import EventKind, StreamObserver, WireFormat
from app.proxy.sniff import sniff_stream
from app.wire.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEEventTooLarge, event_boundary

logger = logging.getLogger(__name__)


class RelayResponse(Response):
    """ASGI response relaying ``request`` through ``client`` (see module docstring).

    A :class:`starlette.responses.Response` so FastAPI hands it to the server as is;
    status, headers and body all come from upstream in :meth:`__call__`."""

    def __init__(self, client: httpx.AsyncClient, request: httpx.Request, fmt: WireFormat,
                 *, stream_requested: bool, watchdog: Watchdog, total_timeout_s: float,
                 on_finish: Callable[[Outcome], Awaitable[None]], endpoint: str,
                 model: str | None, monitor: OutputMonitor | None = None) -> None:
        self.client = client
        self.request = request
        self.fmt = fmt
        self.stream_requested = stream_requested
        self.watchdog = watchdog
        self.total_timeout_s = total_timeout_s
        self.on_finish = on_finish
        self.outcome = Outcome(detail={"endpoint": endpoint, "model": model})
        self._response_started = False
        self._observer: StreamObserver | None = None
        self._body_chunks: AsyncIterator[bytes] | None = None  # a body whose start was sniffed
        self.monitor = monitor  # the answer's text: repeated output, text hash
        self.background = None
        self._task: asyncio.Future | None = None  # the relay, while it runs
        self._stop: GatewayError | None = None  # set by cut()
        self._watch: ReadDeadline | None = None  # the stream's read deadline
        self._streaming = self._ended = False
        self._untrack: Callable[[], None] | None = None

    #: Masks provider keys in what is relayed; none until :meth:`redacting`.
    redact: Redactor = Redactor(())

    def redacting(self, redactor: Redactor) -> "RelayResponse":
        """Mask ``redactor``'s provider keys in relayed headers and bytes."""
        self.redact = redactor
        return self

    #: Drop usage-only chat chunks the gateway asked for (:mod:`app.proxy.usage_chunk`).
    hide_usage: bool = False

    def hiding_usage(self, hide: bool) -> "RelayResponse":
        """Hide the usage-only chunk of a stream whose usage the gateway asked for."""
        self.hide_usage = hide
        return self

    def track(self, registry: OpenRequests, task_id: str) -> "RelayResponse":
        """Make this exchange cuttable by a stop of ``task_id`` until it finishes."""
        registry.track(task_id, self)
        self._untrack = lambda: registry.untrack(task_id, self)
        return self

    def cut(self, refusal: GatewayError) -> bool:
        """End the exchange because its task was stopped (``refusal``: the task's
        403/409 ``task_stopped`` error). Returns ``False`` when it has already ended,
        been cut, or is sending a complete body; safe to call at any time."""
        if self._stop is not None or self._ended or (self._response_started and not self._streaming):
            return False
        self._stop = refusal
        if not self._response_started:
            if self._task is not None:
                self._task.cancel()
        elif self._watch is not None:  # between two reads the loop sees _stop before the next
            self._watch.expire()
        return True

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        relay = self._task = asyncio.ensure_future(self._relay(send))
        watch = asyncio.ensure_future(_wait_for_disconnect(receive))
        if self._stop is not None:  # cut before it began
            relay.cancel()
        try:
            await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not relay.done():
                relay.cancel()
                self.outcome.kind = "disconnected"
            try:
                await relay
            except asyncio.CancelledError:
                if self._stop is not None and self.outcome.kind != "disconnected":
                    await self._send_stopped(send)
            except OSError:  # the client went away while we were sending
                self.outcome.kind = "disconnected"
        finally:
            self._ended = True
            if self._watch is not None:
                self._watch.close()
            if self._untrack is not None:
                self._untrack()
            watch.cancel()
            if self.outcome.kind == "disconnected" and self._observer is not None:
                self.outcome.summary = self._observer.summary()  # the ledger keeps what was seen
            try:
                await asyncio.shield(self.on_finish(self.outcome))
            except Exception:  # noqa: BLE001 - the client already has its answer
                logger.exception("recording the outcome of %s failed", self.outcome.detail)

    async def _relay(self, send: Callable) -> None:
        try:
            await self._exchange(send)
        except GatewayError as err:
            if self._response_started:
                raise
            await self._send_error(send, err)

    async def _exchange(self, send: Callable) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self.stream_requested and self.watchdog.first_event_timeout_s:
            headers_deadline = started + self.watchdog.first_event_timeout_s
        else:
            headers_deadline = started + self.total_timeout_s
        try:
            async with asyncio.timeout_at(headers_deadline):
                upstream = await self.client.send(self.request, stream=True)
        except (TimeoutError, httpx.HTTPError) as exc:
            raise self._failed(exc, "did not answer in time", unreachable=True) from None
        try:
            self.outcome.status = upstream.status_code
            chunks = None
            if upstream.headers.get("content-type", "").startswith("text/event-stream"):
                chunks = upstream.aiter_raw()
            elif self.stream_requested and upstream.is_success:
                try:
                    is_stream, sniffed = await sniff_stream(upstream, headers_deadline)
                except (TimeoutError, httpx.HTTPError) as exc:
                    raise self._failed(exc, "did not answer in time") from None
                chunks, self._body_chunks = (sniffed, None) if is_stream else (None, sniffed)
            if chunks is not None:
                await self._relay_stream(send, upstream, started, chunks)
            else:
                await self._relay_body(send, upstream, started + self.total_timeout_s)
        finally:
            await upstream.aclose()

    async def _relay_body(self, send: Callable, upstream: httpx.Response, deadline: float) -> None:
        try:
            async with asyncio.timeout_at(deadline):
                if self._body_chunks is None:
                    body = await upstream.aread()
                else:
                    body = b"".join([chunk async for chunk in self._body_chunks])
        except (TimeoutError, httpx.HTTPError) as exc:
            raise self._failed(exc, "did not finish its response in time") from None
        await self._start(send, upstream)
        await send({"type": "http.response.body", "body": self.redact(body), "more_body": False})
        if upstream.status_code == 200 and body[:1] == b"{":
            try:
                parsed = json_text.loads(body)
                self.outcome.summary = self.fmt.parse_response(parsed)
            except ValueError:
                pass
            else:
                self._watch_text(self.fmt.response_text(parsed))
                if self.monitor is not None:
                    self.outcome.summary.text_sha256 = self.monitor.text_sha256()
        self.outcome.summary.terminal_seen = True

    async def _relay_stream(self, send: Callable, upstream: httpx.Response, started: float,
                            chunks: AsyncIterator[bytes]) -> None:
        loop = asyncio.get_running_loop()
        wd = self.watchdog
        observer = self._observer = self.fmt.stream_observer()
        decoder = SSEDecoder()
        watch = self._watch = ReadDeadline(started + wd.first_event_timeout_s if wd.first_event_timeout_s else None)
        read = chunks.__anext__
        first_content_at: float | None = None
        last_data_at: float | None = None
        ended_at: float | None = None  # when upstream's terminal event arrived
        relayed_bytes = relayed_events = 0
        held = bytearray()  # an incomplete trailing event: relayed once complete (or at the close)
        end: End | None = None
        self._streaming = True
        await self._start(send, upstream)
        while True:
            if self._stop is not None:
                if ended_at is None:  # nothing is appended after a terminal event
                    end = ("stopped", self._stop.code or "stopped", self._stop.message)
                break
            try:
                chunk = await watch.read(read)
            except StopAsyncIteration:
                if held:  # upstream closed after bytes without their blank line
                    ended_at, count = close_held(decoder, observer, ended_at, loop.time())
                    relayed_events += count
                    if ended_at is not None:  # nothing is appended: relay them as received
                        await send({"type": "http.response.body", "body": self.redact(bytes(held)), "more_body": True})
                        relayed_bytes += len(held)
                break
            except TimeoutError:
                if ended_at is None:
                    end = silence_end(wd, self._stop, first_content_at is not None)
                elif self._stop is None:  # after the terminal event: close it ourselves, append nothing
                    self.outcome.detail["closed_after_grace"] = True
                break
            except httpx.HTTPError as exc:
                if ended_at is None:
                    end = ("truncated", "stream_truncated",
                           f"The upstream stream broke off ({type(exc).__name__}) before its end.")
                break
            if not held and chunk.endswith(b"\n\n"):
                out = chunk  # the usual case: whole events
            else:
                scan_from = max(len(held) - 1, 0)
                held += chunk
                cut = event_boundary(held, scan_from)
                out = bytes(held[:cut])
                del held[:cut]
            paused_at = loop.time()
            if out:
                body = strip_usage_chunks(out, self.fmt.is_usage_only) if self.hide_usage else out
                await send({"type": "http.response.body", "body": self.redact(body), "more_body": True})
            resumed_at = loop.time()
            relayed_bytes += len(out)
            try:
                events = decoder.feed(chunk)
            except SSEEventTooLarge as exc:
                if ended_at is None:
                    end = ("truncated", "stream_event_too_large", str(exc))
                break
            if len(held) > DEFAULT_MAX_EVENT_BYTES:  # e.g. endless comment lines, no blank line
                if ended_at is None:
                    end = ("truncated", "stream_event_too_large",
                           f"Upstream sent over {DEFAULT_MAX_EVENT_BYTES} bytes without ending an event.")
                break
            relayed_events += len(events)
            if ended_at is not None:  # after the terminal event: relay until upstream closes
                for event, data in events:
                    observer.feed(event, data)
                continue
            terminal = repeating = False
            for event, data in events:
                kind = observer.feed(event, data)
                if kind is EventKind.CONTENT and not repeating:
                    repeating = self._watch_text(self.fmt.text_delta(event, data))
                if kind is EventKind.TERMINAL:
                    terminal = True
                if kind is EventKind.CONTENT:
                    if first_content_at is None:
                        first_content_at = resumed_at
                    last_data_at = resumed_at
                elif kind is EventKind.DATA or kind is EventKind.TERMINAL:
                    last_data_at = resumed_at
                elif kind is EventKind.HEARTBEAT and wd.heartbeats_reset:
                    last_data_at = resumed_at
                else:
                    continue
                if first_content_at is not None:
                    watch.deadline = resumed_at + wd.idle_timeout_s if wd.idle_timeout_s else None
            if repeating and not terminal:  # an answer already relayed whole is not cut
                end = ("repeated_output", "repeated_output",
                       "The model kept repeating the same passage in this answer; taskgate cut the "
                       "stream and stopped the task (repeated_output).")
                break
            if terminal:  # more may follow (Responses: error, then response.failed; [DONE])
                ended_at = resumed_at
                watch.deadline = resumed_at + wd.close_grace_s
            elif watch.deadline is not None:
                watch.deadline += resumed_at - paused_at  # a slow client is not a silent upstream
        self._ended = True
        watch.close()
        summary = observer.summary()
        summary.text_sha256 = self.monitor.text_sha256() if self.monitor is not None else None
        self.outcome.summary = summary
        now = loop.time()
        self.outcome.detail.update({
            "bytes_relayed": relayed_bytes, "events_relayed": relayed_events,
            "seconds_since_first_content": None if first_content_at is None else round(now - first_content_at, 3),
            "seconds_since_last_data": None if last_data_at is None else round(now - last_data_at, 3),
        })
        if end is None and not summary.terminal_seen:
            end = ("truncated", "stream_truncated",
                   "The upstream stream ended without its terminal event.")
        if end is not None:
            kind, code, message = end
            await upstream.aclose()
            self.outcome.kind = kind
            self.outcome.detail["code"] = code
            etype = error_type(self.fmt, kind, self._stop)
            error = self.fmt.stream_error(message, etype, code, observer=observer)
            await send({"type": "http.response.body", "body": error, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _start(self, send: Callable, upstream: httpx.Response) -> None:
        self._response_started = True
        await send({"type": "http.response.start", "status": upstream.status_code,
                    "headers": self.redact.headers(response_headers(upstream.headers))})

    def _watch_text(self, text: str) -> bool:
        """Feed answer text to the monitor; ``True`` (and the evidence in the outcome's
        ``repeated_output`` detail) when the answer is repeating itself."""
        monitor = self.monitor
        if monitor is None or not text:
            return False
        detected = monitor.feed(text)
        if detected:
            self.outcome.detail["repeated_output"] = monitor.detail
        return detected

    def _failed(self, exc: Exception, late: str, *, unreachable: bool = False) -> GatewayError:
        """The error for an exchange that failed before its response started: 504
        ``upstream_timeout`` for a timeout (upstream ``late``), else 502:
        ``upstream_unreachable`` (``unreachable``) or ``upstream_error`` (the response
        broke off). Recorded in the outcome."""
        name = type(exc).__name__
        if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
            kind, status, code, message = "upstream_timeout", 504, "upstream_timeout", f"The upstream provider {late}."
        elif unreachable:
            kind, status, code = "upstream_unreachable", 502, "upstream_unreachable"
            message = f"The upstream provider could not be reached ({name})."
        else:
            kind, status, code, message = "truncated", 502, "upstream_error", f"The upstream response broke off ({name})."
        self.outcome.kind = kind
        self.outcome.status = status
        self.outcome.detail["code"] = code
        return GatewayError(status, code, code, message)

    async def _send_stopped(self, send: Callable) -> None:
        """The stop refusal for an exchange cut before its response started."""
        err = self._stop
        assert err is not None
        self.outcome.kind = "stopped"
        self.outcome.status = wire_status(self.fmt, err)
        self.outcome.detail["code"] = err.code
        await self._send_error(send, err)

    async def _send_error(self, send: Callable, err: GatewayError) -> None:
        body, headers = render_error(self.fmt, err)
        await send({"type": "http.response.start", "status": wire_status(self.fmt, err), "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _wait_for_disconnect(receive: Callable) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
