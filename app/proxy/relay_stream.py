"""One upstream SSE stream relayed to the client (the stream half of
:class:`app.proxy.relay.RelayResponse`; its module docstring gives the rules).

Each chunk is framed once (:class:`app.wire.sse.SSEFramer`): its decoded events feed
the format's observer and the repeated-output monitor, then the whole events are sent
(minus a usage-only event the gateway asked for) and :class:`StreamProgress` moves the
read deadline. With a verdict hook (:mod:`app.proxy.verdict`), the chunk holding the
terminal event of an answer the loop guard judges is held until the verdict, and a
struck answer ends with the format's terminal error instead. The loop reads, sends and
decides; the decisions are pure (:mod:`app.proxy.stream_progress`,
:mod:`app.proxy.stream_end`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from starlette.types import Send

from app.errors import GatewayError
from app.guard.repeated_output import DELIVERED_CUT, DELIVERED_STREAMED, OutputMonitor
from app.proxy.outcome import Outcome, Watchdog
from app.proxy.read_deadline import ReadDeadline
from app.proxy.redact import Redactor
from app.proxy.stream_end import (
    NO_TERMINAL,
    REPEATED_OUTPUT,
    End,
    broke_off_end,
    error_type,
    silence_end,
    stopped_end,
    too_large_end,
)
from app.proxy.stream_progress import StreamProgress
from app.proxy.transport import UpstreamResponse
from app.proxy.usage_chunk import strip_usage_chunks
from app.proxy.verdict import Ruling, VerdictHook
from app.wire.base import EventKind, WireFormat
from app.wire.sse import SSEFramer

Events = list[tuple[str, str]]
_CONTENT, _TERMINAL = EventKind.CONTENT, EventKind.TERMINAL


def watch_text(monitor: OutputMonitor | None, outcome: Outcome, text: str,
               delivered: str = DELIVERED_STREAMED) -> bool:
    """Feed answer text to ``monitor``; ``True`` (and the evidence in the outcome's
    ``repeated_output`` detail, with ``delivered``: how the answer reaches the client,
    see :data:`app.guard.repeated_output.DELIVERED_CUT`) when the answer is repeating itself."""
    if monitor is None or not text:
        return False
    detected = monitor.feed(text)
    if detected:
        outcome.detail["repeated_output"] = {**monitor.detail, "delivered": delivered}
    return detected


class StreamRelay:
    """The relay of one stream of an exchange that began at ``started`` (event-loop
    seconds: the first-event deadline counts from then). :attr:`stop` is the task's stop
    refusal once the exchange was cut (:meth:`app.proxy.relay.RelayResponse.cut` sets it
    and expires :attr:`watch`). ``outcome`` gets the summary, the stream's figures and,
    for a stream the gateway ended, its end."""

    __slots__ = ("fmt", "outcome", "monitor", "redact", "hide_usage", "observer", "framer",
                 "progress", "watch", "ended", "stop", "verdict", "judge", "cut_repeating", "struck")

    def __init__(self, fmt: WireFormat, watchdog: Watchdog, started: float, outcome: Outcome, *,
                 monitor: OutputMonitor | None, redact: Redactor, hide_usage: bool,
                 verdict: VerdictHook | None = None,
                 judge: Callable[[], Awaitable[Ruling | None]] | None = None) -> None:
        self.fmt = fmt
        self.outcome = outcome
        self.monitor = monitor
        self.redact = redact
        self.hide_usage = hide_usage  # drop the usage-only event (app.proxy.usage_chunk)
        self.observer = fmt.stream_observer()
        self.framer = SSEFramer()
        self.progress = StreamProgress(watchdog, started)
        self.watch = ReadDeadline(self.progress.deadline)  # the stream-silence watchdog
        self.ended = False  # the last bytes are being sent: too late for a cut
        self.stop: GatewayError | None = None
        self.verdict = verdict if judge is not None else None  # asked before the terminal event goes out
        self.judge = judge  # writes the verdict (RelayResponse._judge)
        self.cut_repeating = verdict.cuts_repeating if verdict is not None else True
        self.struck: Ruling | None = None  # the verdict struck the answer

    async def run(self, send: Send, upstream: UpstreamResponse, chunks: AsyncIterator[bytes]) -> None:
        """Relay ``chunks`` (the body of ``upstream``) until it ends, is cut or stalls;
        end the client's body; close ``upstream`` however it ends. Raises ``OSError``
        when the client went away."""
        try:
            loop = asyncio.get_running_loop()
            progress, framer, watch, read = self.progress, self.framer, self.watch, chunks.__anext__
            feed, redact, monitor, verdict = self.observer.feed, self.redact, self.monitor, self.verdict
            end: End | None = None
            while True:
                stop = self.stop
                if stop is not None:
                    if progress.ended_at is None:  # nothing is appended after a terminal event
                        end = stopped_end(stop)
                    break
                try:  # watch.read(read), inlined: no coroutine of its own held per open stream
                    watch.begin()
                    try:
                        chunk = await read()
                    finally:
                        watch.end()
                except StopAsyncIteration:  # upstream closed
                    end = await self._relay_rest(send, loop.time())
                    break
                except TimeoutError:  # the deadline had passed before the read
                    end = self._silence()
                    break
                except asyncio.CancelledError:
                    if not watch.timed_out():
                        raise
                    end = self._silence()
                    break
                except httpx.HTTPError as exc:
                    end = broke_off_end(exc) if progress.ended_at is None else None
                    break
                whole, events = framer.feed(chunk)
                if framer.overflow is not None:  # relayed as it is, never decoded
                    if whole:
                        await send({"type": "http.response.body", "body": redact(whole), "more_body": True})
                        progress.bytes_relayed += len(whole)
                    end = too_large_end(framer.overflow) if progress.ended_at is None else None
                    break
                progress.events_relayed += len(events)
                watching = monitor is not None and progress.ended_at is None  # the answer ends with its terminal event
                kinds, repeating = [], False
                for event, data in events:
                    kind = feed(event, data)
                    kinds.append(kind)
                    if watching and kind is _CONTENT and not repeating:
                        repeating = watch_text(monitor, self.outcome, self.fmt.text_delta(event, data))
                if verdict is not None and progress.ended_at is None and _TERMINAL in kinds \
                        and await self._struck_at_end():
                    end = self._struck_end()  # the held chunk (its terminal event) is never sent
                    break
                paused_at = loop.time()
                if whole:
                    body = self._without_usage(whole, events) if self.hide_usage else whole
                    await send({"type": "http.response.body", "body": redact(body), "more_body": True})
                resumed_at = loop.time()
                progress.bytes_relayed += len(whole)
                progress.relayed(kinds, paused_at, resumed_at)
                watch.deadline = progress.deadline
                if repeating and progress.ended_at is None and self.cut_repeating:  # one relayed whole is not cut
                    end = REPEATED_OUTPUT
                    self.outcome.detail["repeated_output"]["delivered"] = DELIVERED_CUT
                    break
            await self._end(send, upstream, end)
        finally:
            await upstream.aclose()

    def _without_usage(self, whole: bytes, events: Events) -> bytes:
        """Whole events to relay, minus the usage-only one the gateway asked for."""
        is_usage_only = self.fmt.is_usage_only
        if any(is_usage_only(event, data) for event, data in events):
            return strip_usage_chunks(whole, is_usage_only)
        return whole

    async def _struck_at_end(self) -> bool:
        """Before the terminal event goes out: the verdict on the answer it ends, when
        the loop guard judges it; whether it struck the answer."""
        assert self.verdict is not None and self.judge is not None
        outcome = self.outcome
        summary = self.observer.summary()
        summary.text_sha256 = self.monitor.text_sha256() if self.monitor is not None else None
        outcome.summary = summary
        if not self.verdict.wants_verdict(outcome):
            return False
        self.struck = await self.judge()
        return self.struck is not None

    def _struck_end(self) -> End:
        """The end of a stream whose answer was struck: its terminal error, ``code`` the rule."""
        assert self.struck is not None
        return "struck", self.struck.code, self.struck.message

    async def _relay_rest(self, send: Send, now: float) -> End | None:
        """Upstream closed with bytes after its last blank line: read them as the event a
        blank line would have dispatched; relay them as received when the stream's
        terminal event came (before, or in these bytes: after the verdict on the answer,
        which may strike it instead: its end), else drop them."""
        rest, events = self.framer.close()
        if not rest:
            return None
        progress = self.progress
        progress.events_relayed += len(events)
        ended = progress.ended_at is not None
        for event, data in events:
            if self.observer.feed(event, data) is EventKind.TERMINAL and progress.ended_at is None:
                progress.ended_at = now
        if not ended and progress.ended_at is not None and self.verdict is not None \
                and await self._struck_at_end():
            return self._struck_end()
        if progress.ended_at is not None:  # nothing is appended: relay them as received
            await send({"type": "http.response.body", "body": self.redact(rest), "more_body": True})
            progress.bytes_relayed += len(rest)
        return None

    def _silence(self) -> End | None:
        """The end of a stream whose read deadline passed: a stall or a stop before the
        terminal event; after it, nothing is appended (the close grace passed)."""
        progress = self.progress
        if progress.ended_at is None:
            return silence_end(progress.watchdog, self.stop, progress.first_content_at is not None)
        if self.stop is None:  # after the terminal event: close it ourselves, append nothing
            self.outcome.detail["closed_after_grace"] = True
        return None

    async def _end(self, send: Send, upstream: UpstreamResponse, end: End | None) -> None:
        """Record the stream's outcome; append the format's terminal error for ``end``
        (or for a stream that closed without its terminal event); end the body."""
        self.ended = True
        self.watch.close()
        outcome = self.outcome
        summary = self.observer.summary()
        summary.text_sha256 = self.monitor.text_sha256() if self.monitor is not None else None
        outcome.summary = summary
        outcome.detail.update(self.progress.detail(asyncio.get_running_loop().time()))
        if end is None and not summary.terminal_seen:
            end = NO_TERMINAL
        if end is REPEATED_OUTPUT and self.verdict is not None and self.verdict.wants_verdict(outcome):
            assert self.judge is not None
            self.struck = await self.judge()  # the latch or strike is written before the error goes out
            end = self._struck_end() if self.struck is not None else end
        if end is not None:
            kind, code, message = end
            await upstream.aclose()
            outcome.kind = kind
            outcome.detail["code"] = code
            etype = error_type(self.fmt, kind, self.stop)
            error = self.fmt.stream_error(message, etype, code, observer=self.observer)
            await send({"type": "http.response.body", "body": error, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
