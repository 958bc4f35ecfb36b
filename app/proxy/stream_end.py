"""How a relayed stream ends: pure decisions for :mod:`app.proxy.relay`.

An *end* is ``(outcome kind, code, message)``: the stream did not finish on its own
and the client gets the wire format's terminal error event with that code and
message (:meth:`app.wire.base.WireFormat.stream_error`); ``None`` when it did.
"""

from __future__ import annotations

from app.errors import GatewayError
from app.proxy.outcome import Watchdog
from app.wire.base import EndKind, WireFormat

End = tuple[EndKind, str, str]

#: Upstream closed the stream without its terminal event.
NO_TERMINAL: End = ("truncated", "stream_truncated", "The upstream stream ended without its terminal event.")
#: The answer kept repeating itself (:mod:`app.guard.repeated_output`).
REPEATED_OUTPUT: End = ("repeated_output", "repeated_output",
                        "The model kept repeating the same passage in this answer; taskgate cut the "
                        "stream and stopped the task (repeated_output).")


def stopped_end(stop: GatewayError) -> End:
    """The end of a stream cut because its task was stopped (``stop``: the refusal)."""
    return "stopped", stop.code or "stopped", stop.message


def silence_end(watchdog: Watchdog, stop: GatewayError | None, content_seen: bool) -> End:
    """The end of a stream whose read deadline passed before its terminal event:
    the task's stop (``stop``, a cut) or a stall, before or after the first content."""
    if stop is not None:
        return stopped_end(stop)
    if not content_seen:
        return ("stalled", "stream_first_event_timeout",
                f"The upstream stream sent no content within {watchdog.first_event_timeout_s:g} s; taskgate closed it.")
    return ("stalled", "stream_idle_timeout",
            f"The upstream stream went silent for {watchdog.idle_timeout_s:g} s after it started; taskgate closed it.")


def broke_off_end(exc: Exception) -> End:
    """The end of a stream whose upstream connection broke (``exc``: the read error)."""
    return "truncated", "stream_truncated", f"The upstream stream broke off ({type(exc).__name__}) before its end."


def too_large_end(message: str) -> End:
    """The end of a stream that sent an event over the size bound (``message`` says how,
    :attr:`app.wire.sse.SSEFramer.overflow`)."""
    return "truncated", "stream_event_too_large", message


def error_type(fmt: WireFormat, kind: EndKind, stop: GatewayError | None) -> str:
    """The error ``type`` of ``fmt``'s terminal error event for an end of ``kind``: the
    stop refusal's type in ``fmt`` when the task was stopped, else the format's type for
    the end kind."""
    if kind == "stopped" and stop is not None:
        return fmt.refusal(stop.status, stop.type)[1]
    return fmt.stream_end_type(kind)
