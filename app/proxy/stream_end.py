"""How a relayed stream ends: pure decisions for :mod:`app.proxy.relay`.

An *end* is ``(outcome kind, code, message)``: the stream did not finish on its own
and the client gets the wire format's terminal error event with that code and
message (:meth:`app.wire.base.WireFormat.stream_error`); ``None`` when it did.
"""

from __future__ import annotations

from app.errors import GatewayError
from app.proxy.outcome import Watchdog
from app.wire.base import EndKind, EventKind, StreamObserver, WireFormat
from app.wire.sse import SSEDecoder

End = tuple[EndKind, str, str]


def silence_end(watchdog: Watchdog, stop: GatewayError | None, content_seen: bool) -> End:
    """The end of a stream whose read deadline passed before its terminal event:
    the task's stop (``stop``, a cut) or a stall, before or after the first content."""
    if stop is not None:
        return "stopped", stop.code or "stopped", stop.message
    if not content_seen:
        return ("stalled", "stream_first_event_timeout",
                f"The upstream stream sent no content within {watchdog.first_event_timeout_s:g} s; taskgate closed it.")
    return ("stalled", "stream_idle_timeout",
            f"The upstream stream went silent for {watchdog.idle_timeout_s:g} s after it started; taskgate closed it.")


def error_type(fmt: WireFormat, kind: EndKind, stop: GatewayError | None) -> str:
    """The error ``type`` of ``fmt``'s terminal error event for an end of ``kind``: the
    stop refusal's type in ``fmt`` when the task was stopped, else the format's type for
    the end kind."""
    if kind == "stopped" and stop is not None:
        return fmt.refusal(stop.status, stop.type)[1]
    return fmt.stream_end_type(kind)


def close_held(decoder: SSEDecoder, observer: StreamObserver, ended_at: float | None,
               now: float) -> tuple[float | None, int]:
    """Upstream closed with bytes after its last blank line: read them as the event a
    blank line would have dispatched. Returns when the stream's terminal event came
    (``now`` if these bytes complete it) and how many events they held."""
    events = decoder.feed(b"\n\n")
    for event, data in events:
        if observer.feed(event, data) is EventKind.TERMINAL and ended_at is None:
            ended_at = now
    return ended_at, len(events)
