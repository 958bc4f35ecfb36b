"""What one relayed exchange is given and what it reports: the stream :class:`Watchdog`
timers and the :class:`Outcome` handed to the ``on_finish`` callback of
:class:`app.proxy.relay.RelayResponse` (accounting, metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.wire.base import EndKind, ResponseSummary

#: How an exchange ended (:attr:`Outcome.kind`): a stream's own ends (:data:`EndKind`:
#: ``stalled``, ``truncated``, ``repeated_output``, ``stopped``, ``struck``) and the rest.
OutcomeKind = EndKind | Literal["completed", "upstream_unreachable", "upstream_timeout", "disconnected"]


@dataclass(slots=True)
class Watchdog:
    """Stream timers in seconds; ``0`` or ``None`` disables one. ``heartbeats_reset``
    makes heartbeat events count as progress. ``close_grace_s``: how long upstream may
    keep sending after its terminal event before the gateway closes the stream itself
    (``0``: close at once)."""

    first_event_timeout_s: float | None
    idle_timeout_s: float | None
    heartbeats_reset: bool = False
    close_grace_s: float = 1.0


@dataclass(slots=True)
class Outcome:
    """How one relayed exchange ended.

    ``kind`` (:data:`OutcomeKind`): ``completed`` (terminal event or whole body relayed),
    ``stalled``, ``truncated`` (stream ended or broke without its terminal event),
    ``upstream_unreachable`` (connect error, 502), ``upstream_timeout`` (504),
    ``disconnected`` (the client left), ``stopped`` (cut because the task was
    latched; ``detail["code"]`` is the stop reason), ``repeated_output`` (the answer kept
    repeating itself), ``struck`` (a soft rule struck the answer; ``detail["code"]`` is the
    rule). ``summary`` holds what the response showed so far (tool calls, usage).
    ``detail`` is JSON-ready context for the task history.
    """

    kind: OutcomeKind = "completed"
    status: int | None = None
    summary: ResponseSummary = field(default_factory=ResponseSummary)
    detail: dict[str, Any] = field(default_factory=dict)
