"""How a relayed stream ends: pure decisions for :mod:`app.proxy.relay`.

An *end* is ``(outcome kind, code, message)``: the stream did not finish on its own
and the client gets the wire format's terminal error event with that code and
message (:meth:`app.wire.base.WireFormat.stream_error`); ``None`` when it did.
"""

from __future__ import annotations

from app.errors import ANTHROPIC_ERROR_TYPES, GatewayError, wire_status
from app.proxy.outcome import Watchdog
from app.wire.base import EventKind, StreamObserver
from app.wire.sse import SSEDecoder

End = tuple[str, str, str]


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


def error_type(format_name: str, kind: str, stop: GatewayError | None) -> str:
    """The error ``type`` of the terminal error event for an end of ``kind``."""
    if format_name == "anthropic_messages":
        if kind == "stopped" and stop is not None:
            return ANTHROPIC_ERROR_TYPES.get(wire_status(format_name, stop), "api_error")
        return "api_error"
    if kind == "stopped" and stop is not None:
        return stop.type
    return {"stalled": "upstream_stalled", "repeated_output": "task_stopped"}.get(kind, "upstream_error")


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
