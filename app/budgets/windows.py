"""Calendar windows of a budget, in its timezone. Pure: the clock is an argument.

A budget's ``window`` is ``None`` (lifetime: one window from :data:`LIFETIME_START`,
never ending), ``"day"`` (local midnight to the next), ``"week"`` (Monday 00:00 local to
the next Monday) or ``"month"`` (the 1st 00:00 local to the next 1st). Boundaries are
local wall-clock times resolved with :mod:`zoneinfo` (the earlier instant when a
daylight-saving change makes one ambiguous, the end of the gap when it skips one), returned
as aware UTC :class:`~datetime.datetime` values: what ``budget_windows.window_start``
holds.

:func:`now` is the gateway's clock for windows: the system clock plus
``TASKGATE_CLOCK_OFFSET_S`` (0 in production; tests move a gateway into next month).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

Window = Literal["day", "week", "month"]
WINDOWS: tuple[Window, ...] = ("day", "week", "month")
#: ``window_start`` of the one lifetime window.
LIFETIME_START = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class Span:
    """One window: ``start`` (inclusive) to ``end`` (exclusive; ``None`` for the lifetime
    window), aware UTC datetimes. ``resets_at`` is ``end``: when the next window opens."""

    start: datetime
    end: datetime | None

    @property
    def resets_at(self) -> datetime | None:
        return self.end


@functools.cache
def _known() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


def timezone_names() -> list[str]:
    """Every timezone name :func:`zone` accepts, sorted."""
    return sorted(_known())


def zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name`` (one of :func:`zoneinfo.available_timezones`);
    :class:`ValueError` when unknown or malformed (never a file path)."""
    if not isinstance(name, str) or name not in _known():
        raise ValueError(f"unknown timezone {str(name)[:80]!r} (an IANA name such as 'UTC' or 'Europe/Berlin')")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {name!r}") from exc


def _local_start(local: datetime, window: Window) -> datetime:
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    if window == "day":
        return midnight
    if window == "week":
        return midnight - timedelta(days=midnight.weekday())
    return midnight.replace(day=1)


def _local_next(start: datetime, window: Window) -> datetime:
    if window == "day":
        return start + timedelta(days=1)
    if window == "week":
        return start + timedelta(days=7)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def _instant(naive_local: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of a local wall-clock time with ``fold=0`` (PEP 495): the earlier
    instant of an ambiguous time; a time in a gap is read with the offset before it,
    which puts a midnight at a gap's start on the gap's end (the day's first instant)."""
    return naive_local.replace(tzinfo=tz, fold=0).astimezone(timezone.utc)


def span(window: Window | None, tz_name: str, at: datetime) -> Span:
    """The window of kind ``window`` in ``tz_name`` holding the instant ``at`` (aware).

    Raises :class:`ValueError` for an unknown timezone or window, or a naive ``at``."""
    if at.tzinfo is None:
        raise ValueError("at must be timezone-aware")
    if window is None:
        return Span(LIFETIME_START, None)
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r} (day, week, month or null)")
    tz = zone(tz_name)
    local_start = _local_start(at.astimezone(tz), window)
    return Span(_instant(local_start, tz), _instant(_local_next(local_start, window), tz))


def previous(window: Window | None, tz_name: str, current: Span) -> Span | None:
    """The window before ``current`` (``None`` for the lifetime window)."""
    if window is None:
        return None
    return span(window, tz_name, current.start - timedelta(microseconds=1))


def now(offset_s: float = 0.0) -> datetime:
    """The clock windows are read on: UTC now plus ``offset_s`` seconds."""
    return datetime.now(timezone.utc) + timedelta(seconds=offset_s)
