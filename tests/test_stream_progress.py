"""The stream watchdog's per-chunk decisions (app.proxy.stream_progress), without a clock."""

from __future__ import annotations

from app.proxy.outcome import Watchdog
from app.proxy.stream_progress import StreamProgress
from app.wire.base import EventKind

C, D, H, T = EventKind.CONTENT, EventKind.DATA, EventKind.HEARTBEAT, EventKind.TERMINAL
WD = Watchdog(first_event_timeout_s=10, idle_timeout_s=3, close_grace_s=0.5)


def test_before_content_only_the_first_event_deadline_counts_shifted_by_slow_sends() -> None:
    p = StreamProgress(WD, started=100.0)
    assert p.deadline == 110.0
    assert p.relayed([D, H], paused_at=101.0, resumed_at=101.25) is False
    assert p.deadline == 110.25  # a slow client is not a silent upstream
    assert p.first_content_at is None and p.last_data_at == 101.25


def test_content_starts_the_idle_deadline_and_data_then_keeps_it_moving() -> None:
    p = StreamProgress(WD, started=100.0)
    p.relayed([D, C], paused_at=102.0, resumed_at=102.0)
    assert p.first_content_at == 102.0 and p.deadline == 105.0
    p.relayed([D], paused_at=104.0, resumed_at=104.5)
    assert p.first_content_at == 102.0 and p.last_data_at == 104.5
    assert p.deadline == 104.5 + 3 + 0.5  # moved from the chunk's send end, plus the send time


def test_heartbeats_move_nothing_unless_they_reset() -> None:
    p = StreamProgress(WD, started=100.0)
    p.relayed([C], paused_at=101.0, resumed_at=101.0)
    p.relayed([H, H], paused_at=103.0, resumed_at=103.0)
    assert p.deadline == 104.0 and p.last_data_at == 101.0
    resetting = StreamProgress(Watchdog(10, 3, heartbeats_reset=True), started=100.0)
    resetting.relayed([C], paused_at=101.0, resumed_at=101.0)
    resetting.relayed([H], paused_at=103.0, resumed_at=103.0)
    assert resetting.deadline == 106.0 and resetting.last_data_at == 103.0


def test_the_terminal_event_leaves_the_close_grace_and_nothing_moves_after_it() -> None:
    p = StreamProgress(WD, started=100.0)
    assert p.relayed([C, T], paused_at=101.0, resumed_at=101.5) is True
    assert p.ended_at == 101.5 and p.deadline == 102.0
    assert p.relayed([C, D, T], paused_at=101.75, resumed_at=101.9) is False
    assert p.ended_at == 101.5 and p.deadline == 102.0 and p.last_data_at == 101.5


def test_timeouts_off_mean_no_deadline() -> None:
    p = StreamProgress(Watchdog(first_event_timeout_s=None, idle_timeout_s=0), started=100.0)
    assert p.deadline is None
    p.relayed([C], paused_at=101.0, resumed_at=101.0)
    assert p.deadline is None
    assert p.detail(now=103.0) == {"bytes_relayed": 0, "events_relayed": 0,
                                   "seconds_since_first_content": 2.0, "seconds_since_last_data": 2.0}
