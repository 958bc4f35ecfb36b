"""A relayed stream's progress and its watchdog deadline: pure per-chunk decisions.

:class:`StreamProgress` is told what each relayed chunk's events were (their
:class:`~app.wire.base.EventKind`) and when the chunk was sent; it keeps when content
started, when data last came, when the terminal event came, and the read deadline
that follows (:mod:`app.proxy.relay`'s stream-silence watchdog):

- before the first content event the deadline is ``first_event_timeout_s`` from the
  start; from the first content event on, ``idle_timeout_s`` from the last event that
  counts as progress (content, data, the terminal event; a heartbeat only with
  ``heartbeats_reset``); ``None`` when the timeout is off;
- the time a chunk took to send (a slow client) moves the deadline by as much: a slow
  client is not a silent upstream;
- the terminal event sets it to ``close_grace_s`` from then: what upstream still sends
  is relayed for that long.

No clock is read here: the relay passes event-loop times in.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.proxy.outcome import Watchdog
from app.wire.base import EventKind

_CONTENT, _DATA, _HEARTBEAT, _TERMINAL = EventKind.CONTENT, EventKind.DATA, EventKind.HEARTBEAT, EventKind.TERMINAL


class StreamProgress:
    """Progress of one stream started at ``started`` (event-loop seconds)."""

    __slots__ = ("watchdog", "deadline", "first_content_at", "last_data_at", "ended_at",
                 "bytes_relayed", "events_relayed", "_idle_s", "_grace_s", "_heartbeats_reset")

    def __init__(self, watchdog: Watchdog, started: float) -> None:
        self.watchdog = watchdog
        first = watchdog.first_event_timeout_s
        #: The read deadline (event-loop seconds), ``None``: none.
        self.deadline: float | None = started + first if first else None
        self.first_content_at: float | None = None
        self.last_data_at: float | None = None
        #: When upstream's terminal event arrived (``None``: not yet).
        self.ended_at: float | None = None
        self.bytes_relayed = 0
        self.events_relayed = 0
        self._idle_s = watchdog.idle_timeout_s or None
        self._grace_s = watchdog.close_grace_s
        self._heartbeats_reset = watchdog.heartbeats_reset

    def relayed(self, kinds: Sequence[EventKind], paused_at: float, resumed_at: float) -> bool:
        """Take one chunk's events (``kinds``, in order), whose bytes were sent from
        ``paused_at`` to ``resumed_at``; returns whether the chunk held the terminal
        event. After the terminal event nothing moves any more."""
        if self.ended_at is not None:
            return False
        moved = terminal = False
        for kind in kinds:
            if kind is _CONTENT:
                if self.first_content_at is None:
                    self.first_content_at = resumed_at
            elif kind is _TERMINAL:
                terminal = True
            elif kind is _HEARTBEAT and not self._heartbeats_reset:
                continue
            moved = True
        if moved:
            self.last_data_at = resumed_at
            if self.first_content_at is not None:  # progress once content has started
                self.deadline = resumed_at + self._idle_s if self._idle_s else None
        if terminal:  # more may follow (Responses: error, then response.failed; [DONE])
            self.ended_at = resumed_at
            self.deadline = resumed_at + self._grace_s
        elif self.deadline is not None:
            self.deadline += resumed_at - paused_at  # a slow client is not a silent upstream
        return terminal

    def detail(self, now: float) -> dict[str, float | int | None]:
        """The outcome's stream figures: bytes and events relayed, and seconds since the
        first content and the last data event (``None``: none came)."""
        first, last = self.first_content_at, self.last_data_at
        return {
            "bytes_relayed": self.bytes_relayed, "events_relayed": self.events_relayed,
            "seconds_since_first_content": None if first is None else round(now - first, 3),
            "seconds_since_last_data": None if last is None else round(now - last, 3),
        }
