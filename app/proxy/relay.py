"""The relay: send one admitted request upstream and pass the answer back as it arrives.

:class:`RelayResponse` is an ASGI response that owns the whole upstream exchange:

- **Streams** (``text/event-stream``) are relayed chunk by chunk, byte for byte,
  framed once (:class:`app.wire.sse.SSEFramer`): an incomplete trailing event is held
  back until its blank line arrives, so a cut never splices the terminal error into
  half an event, and the events of the bytes relayed feed the wire format's observer
  (tool calls, usage, progress). The **stream-silence watchdog**
  (:class:`app.proxy.read_deadline.ReadDeadline`, its deadline decided by
  :class:`app.proxy.stream_progress.StreamProgress`) bounds each upstream read: before the
  first content event the deadline is ``stream_first_event_timeout_s`` from the start,
  after it ``stream_idle_timeout_s`` from the last data event. Heartbeats (SSE comments,
  Anthropic ``ping``) are relayed but move no deadline. On a stall, or when upstream ends
  without its terminal event, the upstream connection is closed and the client gets the
  format's terminal error event (:meth:`app.wire.base.WireFormat.stream_error`).
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
- **A verdict before the last byte** (:mod:`app.proxy.verdict`): with a ``verdict``
  hook, an answer the loop guard judges has its decision written before its end is
  released: a body is judged before any of it is sent, a stream's chunk holding the
  terminal event is held until then, and a stream cut for repeating itself gets its
  terminal error after it. A struck answer is withheld: a body is answered with 502
  (``code`` the rule), a stream ends with its format's terminal error instead. Once
  judged, the exchange is no longer cut by a stop (its own latch would cut it): the
  verdict decides how the answer ends.
- **Which is which**: a ``text/event-stream`` response is a stream; so is a successful
  response to a request that asked for one (``"stream": true``) whose first bytes are an
  SSE field or comment, whatever its content type (``text/plain``, ``application/json``).
- **Provider keys** are masked in relayed headers and bytes (:mod:`app.proxy.redact`).
- **Client disconnects** are watched for the whole exchange; the upstream request is
  cancelled at once and its connection released. A server that offers the
  :data:`ON_DISCONNECT` extension (:mod:`app.server`'s protocol) calls the relay back when
  the client's connection is lost, which costs no task per exchange; under any other
  server a task of its own waits on ``receive`` for ``http.disconnect``.
- **Stops**: :meth:`RelayResponse.cut` ends the exchange when its task is latched
  elsewhere (:mod:`app.proxy.stop_watch`): before the response has started the
  upstream request is cancelled and the client gets the stop refusal (400/409); a
  stream is cut at its next read (the read's timeout fires at once), its upstream
  connection closed and the client gets the format's terminal error with ``code`` =
  the stop reason. A body already being sent is left to finish.

What happened is handed to an ``on_finish`` callback as an :class:`Outcome` after the
client has its last byte (accounting never delays the relay, but for the verdict above).
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, Awaitable, Callable, Coroutine, Protocol

import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.errors import GatewayError, render_error, wire_status
from app.guard.repeated_output import DELIVERED_WHOLE, OutputMonitor
from app.proxy.open_requests import OpenRequests
from app.proxy.outcome import Outcome, OutcomeKind, Watchdog
from app.proxy.redact import Redactor
from app.proxy.relay_stream import StreamRelay, watch_text
from app.proxy.sniff import sniff_stream
from app.proxy.transport import UpstreamClient, UpstreamRequest, UpstreamResponse
from app.proxy.upstream import response_headers
from app.proxy.verdict import WITHHELD_STATUS, Ruling, VerdictHook
from app.request_ids import with_id
from app.wire import json_text
from app.wire.base import WireFormat

logger = logging.getLogger(__name__)

#: The ASGI extension through which a server reports a lost client connection:
#: ``scope["extensions"][ON_DISCONNECT]["watch"]``, an :class:`OnDisconnect`.
ON_DISCONNECT = "taskgate.on_disconnect"


class OnDisconnect(Protocol):
    """The :data:`ON_DISCONNECT` extension: ``callback`` is called once, soon (from the
    event loop), when the client's connection is lost before the response completed
    (at once when it already was); ``None`` withdraws it. One callback per connection
    at a time."""

    def __call__(self, callback: Callable[[], None] | None, /) -> None: ...


class RelayResponse(Response):
    """ASGI response relaying ``request`` through ``client`` (see module docstring).

    A :class:`starlette.responses.Response` so FastAPI hands it to the server as is;
    status, headers and body all come from upstream in :meth:`__call__`."""

    def __init__(self, client: UpstreamClient, request: UpstreamRequest, fmt: WireFormat,
                 *, stream_requested: bool, watchdog: Watchdog, total_timeout_s: float,
                 on_finish: Callable[[Outcome], Awaitable[None]], endpoint: str,
                 model: str | None, monitor: OutputMonitor | None = None,
                 verdict: VerdictHook | None = None) -> None:
        self.client = client
        self.request: UpstreamRequest | None = request  # until it is sent
        self.fmt = fmt
        self.stream_requested = stream_requested
        self.watchdog = watchdog
        self.total_timeout_s = total_timeout_s
        self.on_finish = on_finish
        self.outcome = Outcome(detail={"endpoint": endpoint, "model": model})
        self.started = False  # the response's start was sent
        self.status_code = 0  # the status sent, once sent
        self._body_chunks: AsyncIterator[bytes] | None = None  # a body whose start was sniffed
        self.monitor = monitor  # the answer's text: repeated output, text hash
        self.background = None
        self._task: asyncio.Task[None] | None = None  # the task running the relay, while it runs
        self._cancelling = False  # the relay was cancelled by cut() or a client that left
        self._stop: GatewayError | None = None  # set by cut()
        self._stream: StreamRelay | None = None  # a stream's relay, once it started
        self._ended = False
        self._tracked: tuple[OpenRequests, str] | None = None  # where track() registered it
        self.verdict = verdict  # asked before the last byte of a judged answer (app.proxy.verdict)
        self._judging: asyncio.Future[Ruling | None] | None = None  # the verdict being written

    #: Masks provider keys in what is relayed; none until :meth:`redacting`.
    redact: Redactor = Redactor(())

    def redacting(self, redactor: Redactor) -> "RelayResponse":
        """Mask ``redactor``'s provider keys in relayed headers and bytes."""
        self.redact = redactor
        return self

    #: Drop usage-only chat chunks the gateway asked for (:mod:`app.proxy.usage_chunk`).
    hide_usage: bool = False
    #: taskgate's own response headers (the remaining allowance, :mod:`app.budgets.room`).
    own_headers: list[tuple[bytes, bytes]] = []

    def adding_headers(self, headers: list[tuple[bytes, bytes]]) -> "RelayResponse":
        """Send ``headers`` with the response's start (raw ASGI pairs)."""
        self.own_headers = headers
        return self

    def hiding_usage(self, hide: bool) -> "RelayResponse":
        """Hide the usage-only chunk of a stream whose usage the gateway asked for."""
        self.hide_usage = hide
        return self

    def track(self, registry: OpenRequests, task_id: str) -> "RelayResponse":
        """Make this exchange cuttable by a stop of ``task_id`` until it finishes."""
        registry.track(task_id, self)
        self._tracked = (registry, task_id)  # not a closure: ~150 B less per open stream
        return self

    def cut(self, refusal: GatewayError) -> bool:
        """End the exchange because its task was stopped (``refusal``: the task's
        400/409 ``task_stopped`` error). Returns ``False`` when it has already ended,
        been cut, is sending a complete body, or its answer was judged
        (:mod:`app.proxy.verdict`: its own latch must not cut it); safe to call at any time."""
        stream = self._stream
        if self._stop is not None or self._ended or (self.started and (stream is None or stream.ended)) \
                or self._judging is not None:  # the verdict decides how the answer ends
            return False
        self._stop = refusal
        if not self.started:
            self._cancel_relay()
        elif stream is not None:  # between two reads the loop sees the stop before the next
            stream.stop = refusal
            stream.watch.expire()
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        on_disconnect: OnDisconnect | None = (scope.get("extensions") or {}).get(ON_DISCONNECT, {}).get("watch")
        watch: asyncio.Future[None] | None = None
        if on_disconnect is not None:
            on_disconnect(self._client_gone)
        else:
            watch = asyncio.ensure_future(_wait_for_disconnect(receive))
            watch.add_done_callback(self._client_left)
        try:
            if self._stop is None:  # else cut before it began
                # The relay runs in this task, not one of its own (nor a coroutine of its
                # own: a frame per open stream): cut() and a client that leaves cancel it
                # through _cancel_relay; that cancellation ends here, any other (the server
                # stopping) propagates.
                task = self._task = asyncio.current_task()
                try:
                    try:
                        stream_relay = await self._exchange(send)
                        if stream_relay is not None:
                            await stream_relay
                    except GatewayError as err:
                        if self.started:
                            raise
                        await self._send_error(send, err)
                except asyncio.CancelledError:
                    if not self._our_cancel(task):
                        raise
                except OSError:  # the client went away while we were sending
                    self.outcome.kind = "disconnected"
                finally:
                    self._relay_ended(task)
            if self._stop is not None and self._cancelled_before_start():
                await self._send_stopped(send)
        finally:
            self._ended = True
            if self._stream is not None:
                self._stream.watch.close()
            if self._tracked is not None:
                registry, task_id = self._tracked
                registry.untrack(task_id, self)
            if watch is not None:
                watch.cancel()
            elif on_disconnect is not None:
                on_disconnect(None)
            if self._judging is not None and not self._judging.done():  # a client that left meanwhile
                await asyncio.wait([self._judging])  # the decision is written in full, never half
            if self.outcome.kind == "disconnected" and self._stream is not None:
                self.outcome.summary = self._stream.observer.summary()  # the ledger keeps what was seen
            try:
                await asyncio.shield(self.on_finish(self.outcome))
            except Exception:  # the client already has its answer
                logger.exception("recording the outcome of %s failed", self.outcome.detail)

    def _our_cancel(self, task: asyncio.Task[object] | None) -> bool:
        """A cancellation reached the relay: whether it was only :meth:`_cancel_relay`'s
        (it ends there); ``False`` when cancelled from elsewhere too."""
        if not self._cancelling or task is None:
            return False
        self._cancelling = False
        return task.uncancel() == 0

    def _relay_ended(self, task: asyncio.Task[object] | None) -> None:
        """The relay is over: no longer cancellable; a cancel of ours it caught itself is withdrawn."""
        self._task = None
        if self._cancelling and task is not None:
            self._cancelling = False
            task.uncancel()

    def _cancel_relay(self) -> None:
        if self._task is not None and not self._cancelling:
            self._cancelling = True
            self._task.cancel()

    def _client_left(self, watch: asyncio.Future[None]) -> None:
        """The disconnect watch ended: the client left (unless the watch was cancelled)."""
        if not watch.cancelled():
            self._client_gone()

    def _client_gone(self) -> None:
        """The client left: the relay, while it runs, is cancelled."""
        if self._task is not None:
            self.outcome.kind = "disconnected"
            self._cancel_relay()

    def _cancelled_before_start(self) -> bool:
        """Whether a stop ended the exchange before its response started (the client
        is still there and gets the stop refusal)."""
        return not self.started and self.outcome.kind != "disconnected"

    async def _exchange(self, send: Send) -> Coroutine[object, object, None] | None:
        """Send the request upstream and relay a body; a stream's start is sent and its
        relay returned for the caller to await (it closes upstream itself), so that this
        frame is not held for the life of the stream."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self.stream_requested and self.watchdog.first_event_timeout_s:
            headers_deadline = started + self.watchdog.first_event_timeout_s
        else:
            headers_deadline = started + self.total_timeout_s
        upstream: UpstreamResponse | None = None
        body: bytes | None = None
        try:
            async with asyncio.timeout_at(headers_deadline):
                upstream = await self.client.send(self._request_to_send(), stream=True)
                is_sse = (upstream.headers.get("content-type") or "").startswith("text/event-stream")
                if not self.stream_requested and not is_sse:  # a body: the same deadline, one scope
                    body = await upstream.aread()
        except (TimeoutError, httpx.HTTPError) as exc:
            if upstream is None:
                raise self._failed(exc, "did not answer in time", unreachable=True) from None
            await upstream.aclose()
            raise self._failed(exc, "did not finish its response in time") from None
        try:
            self.outcome.status = upstream.status_code
            chunks: AsyncIterator[bytes] | None = None
            if body is not None:
                await self._relay_body(send, upstream, body=body)
                return None
            if is_sse:
                chunks = upstream.aiter_raw()
            elif self.stream_requested and upstream.is_success:
                try:
                    is_stream, sniffed = await sniff_stream(upstream, headers_deadline)
                except (TimeoutError, httpx.HTTPError) as exc:
                    raise self._failed(exc, "did not answer in time") from None
                chunks, self._body_chunks = (sniffed, None) if is_stream else (None, sniffed)
            if chunks is not None:
                stream = self._stream = StreamRelay(self.fmt, self.watchdog, started, self.outcome,
                                                    monitor=self.monitor, redact=self.redact,
                                                    hide_usage=self.hide_usage,
                                                    verdict=self.verdict, judge=self._judge)
                await self._start(send, upstream)
                stream_relay, upstream = stream.run(send, upstream, chunks), None  # it closes upstream
                return stream_relay
            await self._relay_body(send, upstream, started + self.total_timeout_s)
            return None
        finally:
            if upstream is not None:
                await upstream.aclose()

    def _request_to_send(self) -> UpstreamRequest:
        """The request, no longer held here: its body and headers are not kept for the
        life of a stream."""
        request, self.request = self.request, None
        assert request is not None, "an exchange sends its request once"
        return request

    async def _relay_body(self, send: Send, upstream: UpstreamResponse, deadline: float = 0.0,
                          body: bytes | None = None) -> None:
        """Relay a whole body: ``body`` when :meth:`_exchange` read it already, else read
        by ``deadline`` (event-loop time)."""
        if body is None:
            try:
                async with asyncio.timeout_at(deadline):
                    if self._body_chunks is None:
                        body = await upstream.aread()
                    else:
                        body = b"".join([chunk async for chunk in self._body_chunks])
            except (TimeoutError, httpx.HTTPError) as exc:
                raise self._failed(exc, "did not finish its response in time") from None
        if self.verdict is not None:  # judged before any of it is sent (app.proxy.verdict)
            self._read_answer(upstream.status_code, body)
            ruling = await self._judge() if self.verdict.wants_verdict(self.outcome) else None
            if ruling is not None:
                await self._withhold(send, ruling)
                return
        await self._start(send, upstream)
        await send({"type": "http.response.body", "body": self.redact(body), "more_body": False})
        if self.verdict is None:
            self._read_answer(upstream.status_code, body)

    def _read_answer(self, status: int, body: bytes) -> None:
        """The outcome's summary (tool calls, usage, the answer's text hash) and the
        repeated-output monitor's verdict from a whole body."""
        if status == 200 and body[:1] == b"{":
            try:
                parsed = json_text.loads(body)
                self.outcome.summary = self.fmt.parse_response(parsed)
            except ValueError:
                pass
            else:
                watch_text(self.monitor, self.outcome, self.fmt.response_text(parsed), DELIVERED_WHOLE)
                if self.monitor is not None:
                    self.outcome.summary.text_sha256 = self.monitor.text_sha256()
        self.outcome.summary.terminal_seen = True

    #: The request id for the response's headers (:func:`app.request_ids.with_id`), set by
    #: :mod:`app.proxy.lane`; ``None``: none added here.
    request_id: bytes | None = None

    async def _judge(self) -> Ruling | None:
        """The verdict on the answer so far (:meth:`VerdictHook.verdict`), written in full
        even if the client leaves meanwhile (:meth:`__call__` waits for it); the exchange
        cannot be cut while it runs."""
        assert self.verdict is not None
        judging = self._judging = asyncio.ensure_future(self.verdict.verdict(self.outcome))
        return await asyncio.shield(judging)

    async def _withhold(self, send: Send, ruling: Ruling) -> None:
        """Answer a struck body with 502 and the ruling's sentence, ``code`` its rule."""
        err = GatewayError(WITHHELD_STATUS, "upstream_error", ruling.code, ruling.message)
        self.outcome.kind = "struck"
        self.outcome.status = wire_status(self.fmt, err)
        self.outcome.detail["code"] = ruling.code
        await self._send_error(send, err)

    async def _start(self, send: Send, upstream: UpstreamResponse) -> None:
        self.started = True
        headers = self.redact.headers(response_headers(upstream.headers))
        await self._send_start(send, upstream.status_code, headers)

    async def _send_start(self, send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status
        headers = [*headers, *self.own_headers] if self.own_headers else headers
        if self.request_id is not None:
            headers = with_id(headers, self.request_id)
        await send({"type": "http.response.start", "status": status, "headers": headers})

    def _failed(self, exc: Exception, late: str, *, unreachable: bool = False) -> GatewayError:
        """The error for an exchange that failed before its response started: 504
        ``upstream_timeout`` for a timeout (upstream ``late``), else 502:
        ``upstream_unreachable`` (``unreachable``) or ``upstream_error`` (the response
        broke off). Recorded in the outcome."""
        name = type(exc).__name__
        kind: OutcomeKind
        if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
            kind, status, code, message = "upstream_timeout", 504, "upstream_timeout", f"The upstream provider {late}."
        elif unreachable:
            kind, status, code = "upstream_unreachable", 502, "upstream_unreachable"
            message = f"The upstream provider could not be reached ({name})."
        else:
            kind, status, code = "truncated", 502, "upstream_error"
            message = f"The upstream response broke off ({name})."
        self.outcome.kind = kind
        self.outcome.status = status
        self.outcome.detail["code"] = code
        return GatewayError(status, code, code, message)

    async def _send_stopped(self, send: Send) -> None:
        """The stop refusal for an exchange cut before its response started."""
        err = self._stop
        assert err is not None
        self.outcome.kind = "stopped"
        self.outcome.status = wire_status(self.fmt, err)
        self.outcome.detail["code"] = err.code
        await self._send_error(send, err)

    async def _send_error(self, send: Send, err: GatewayError) -> None:
        body, headers = render_error(self.fmt, err)
        await self._send_start(send, wire_status(self.fmt, err), headers)
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
