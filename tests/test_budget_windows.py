"""Calendar windows of budgets (pure): day, week and month boundaries in a timezone,
across daylight-saving changes and year ends; the lifetime window; the injectable clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from app.budgets.windows import LIFETIME_START, Span, now, previous, span, zone

UTC = timezone.utc


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_utc_day_week_and_month() -> None:
    t = at(2026, 12, 2, 15, 30)  # a Wednesday
    assert span("day", "UTC", t) == Span(at(2026, 12, 2), at(2026, 12, 3))
    assert span("week", "UTC", t) == Span(at(2026, 11, 30), at(2026, 12, 7))  # Monday to Monday
    assert span("month", "UTC", t) == Span(at(2026, 12, 1), at(2027, 1, 1))  # the year rolls over
    assert span("month", "UTC", t).resets_at == at(2027, 1, 1)


def test_a_boundary_instant_belongs_to_the_window_it_opens() -> None:
    assert span("month", "UTC", at(2027, 1, 1)).start == at(2027, 1, 1)
    assert span("month", "UTC", at(2027, 1, 1) - timedelta(microseconds=1)).start == at(2026, 12, 1)


def test_windows_follow_the_local_calendar_of_their_timezone() -> None:
    # 23:30 UTC on the 31st is already the 1st in Berlin (UTC+1 in winter)
    t = at(2026, 12, 31, 23, 30)
    assert span("month", "Europe/Berlin", t) == Span(at(2026, 12, 31, 23), at(2027, 1, 31, 23))
    assert span("month", "America/New_York", t) == Span(at(2026, 12, 1, 5), at(2027, 1, 1, 5))


def test_daylight_saving_changes_make_short_and_long_days() -> None:
    spring = span("day", "Europe/Berlin", at(2026, 3, 29, 12))  # clocks go forward at 02:00
    assert spring.end - spring.start == timedelta(hours=23)
    autumn = span("day", "Europe/Berlin", at(2026, 10, 25, 12))  # and back at 03:00
    assert autumn.end - autumn.start == timedelta(hours=25)
    march = span("month", "Europe/Berlin", at(2026, 3, 15))
    assert (march.start, march.end) == (at(2026, 2, 28, 23), at(2026, 3, 31, 22))


def test_a_midnight_that_does_not_exist_starts_the_day_after_the_gap() -> None:
    # Chile: on 2026-09-06 clocks jump from 00:00 to 01:00 (UTC-4 -> UTC-3)
    day = span("day", "America/Santiago", at(2026, 9, 6, 12))
    assert day.start == at(2026, 9, 6, 4)  # 01:00 local (-03), the first instant of the day
    assert day.start.astimezone(zone("America/Santiago")).hour == 1
    assert previous("day", "America/Santiago", day).end == day.start


def test_consecutive_windows_tile_time() -> None:
    for window in ("day", "week", "month"):
        for name in ("UTC", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu"):
            s = span(window, name, at(2026, 1, 1))
            for _ in range(20):
                nxt = span(window, name, s.end)
                assert nxt.start == s.end and nxt.end > nxt.start
                assert previous(window, name, nxt) == s
                s = nxt


def test_the_lifetime_window_never_ends() -> None:
    assert span(None, "UTC", at(2026, 5, 5)) == Span(LIFETIME_START, None)
    assert span(None, "Europe/Berlin", at(2099, 1, 1)).resets_at is None
    assert previous(None, "UTC", Span(LIFETIME_START, None)) is None


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        span("day", "Mars/Olympus", at(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone"):
        zone("../etc/passwd")
    with pytest.raises(ValueError, match="window"):
        span("year", "UTC", at(2026, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aware"):
        span("day", "UTC", datetime(2026, 1, 1))


def test_the_clock_offset_moves_now() -> None:
    ahead = now(31 * 86400) - now()
    assert timedelta(days=31) - timedelta(seconds=1) < ahead < timedelta(days=31) + timedelta(seconds=1)
    assert now().tzinfo is not None
