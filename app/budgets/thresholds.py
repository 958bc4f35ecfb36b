"""Warning thresholds of a budget (issue 38 item 1): said once per window, before the wall.

A budget's ``thresholds`` are percents of each of its limits (default :data:`DEFAULT`:
50, 80 and 95; ``0 < t <= 100``; an empty list: none). When what a window used of a limit
reaches one, the crossing is announced **once per budget, window, limit and threshold,
across every gateway process**: a ``budget_warnings`` row inserted ``ON CONFLICT DO
NOTHING``; only the process whose insert wrote it records a ``threshold`` row in the
budget's history (``budget_events``, in the same transaction) and, once committed, emits
:data:`app.events.BUDGET_THRESHOLD` (the console: the webhook's ``budget.threshold``, a
log line). What each limit used is :class:`Usage`:

- ``request_limit``: requests admitted in the window (those spent on escrow leases
  included), held: requests leased and not spent yet;
- ``token_limit``: input + output tokens reported, held: 0 (known only after the fact);
- ``cost_limit_usd``: dollars settled, held: worst cases reserved by requests in flight.

:func:`check` reads the current window of every budget with a limit in one statement and
is run by :func:`app.jobs.start` every :data:`CHECK_INTERVAL_S` seconds in each process
that admitted or relayed something in the last :data:`ACTIVE_S` seconds (an idle process
reads nothing). It also emits :data:`app.events.BUDGET_USAGE` for each limit whose used
fraction changed (the console's ``taskgate_budget_used_fraction`` gauge). A crossing is
thus announced within about a second of the request that made it; nothing on the
request path waits for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from app import events
from app.admission.cost import dollars
from app.budgets import pause
from app.db import sql

#: Percents of each limit announced when a budget lists none.
DEFAULT: tuple[float, ...] = (50.0, 80.0, 95.0)
#: Seconds between two checks of a process with recent traffic.
CHECK_INTERVAL_S = 1.0
#: A process checks while it admitted or relayed a request this many seconds ago or less.
ACTIVE_S = 10.0
#: The limits a threshold applies to, and what each counts, in words.
LIMITS = (("request_limit", "requests"), ("token_limit", "tokens"), ("cost_limit_usd", "dollars"))

# The statements: app/db/sql/budgets.sql.
#: The current window (``$1``: the gateway's window clock) of every budget with a limit:
#: what it used, what is held, and the thresholds already announced in it.
_CURRENT = sql.statement("budget_thresholds_current")
_WARN = sql.statement("budget_warn")


@dataclass(frozen=True, slots=True)
class Usage:
    """What budget ``budget_id`` used of one limit (``limit``: ``request_limit``,
    ``token_limit`` or ``cost_limit_usd``, whose value is ``limit_value``) in the window
    ``window_start``–``window_end`` (``None``: lifetime): ``spent`` and ``held`` in the
    limit's unit (requests, tokens, US dollars), ``fraction`` = spent / limit."""

    budget_id: str
    limit: str
    limit_value: Decimal
    spent: Decimal
    held: Decimal
    window_start: datetime
    window_end: datetime | None

    @property
    def fraction(self) -> float:
        return float(self.spent / self.limit_value) if self.limit_value > 0 else 1.0


def thresholds_of(value: Sequence[float] | None) -> tuple[float, ...]:
    """A budget's thresholds column as percents, ascending (``None``: :data:`DEFAULT`)."""
    return DEFAULT if value is None else tuple(sorted(float(t) for t in value))


def usages(row: Mapping[str, Any]) -> list[Usage]:
    """The :class:`Usage` of each limit a budget has, from a :data:`_CURRENT` row. Pure."""
    spent_held = {"request_limit": (row["admitted"], row["leased"]), "token_limit": (row["tokens"], 0),
                  "cost_limit_usd": (row["cost_usd"], row["reserved_usd"])}
    return [Usage(row["id"], limit, Decimal(row[limit]), Decimal(spent_held[limit][0]),
                  Decimal(spent_held[limit][1]), row["window_start"], row["window_end"])
            for limit, _ in LIMITS if row[limit] is not None]


def crossed(usage: Usage, thresholds: Iterable[float], announced: Iterable[str]) -> list[float]:
    """The thresholds (percents) ``usage`` reached that are not in ``announced``
    (``"<limit>:<threshold>"`` strings, as :data:`_CURRENT` returns them). Pure."""
    done = set(announced)
    return [t for t in thresholds if usage.spent * 100 >= Decimal(str(t)) * usage.limit_value
            and f"{usage.limit}:{t}" not in done and f"{usage.limit}:{t:g}" not in done]


def _amount(limit: str, value: Decimal) -> str:
    if limit == "cost_limit_usd":
        return dollars(value)
    return f"{int(value):,}"


def _instant(at: datetime) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def sentence(usage: Usage, threshold: float) -> str:
    """The crossing in words, e.g. "Budget 'team-a' has used 80 % of its request_limit
    this window (since 2026-12-01T00:00:00Z): 8,012 of 10,000 requests admitted (312 more
    leased to gateway processes). It resets at 2027-01-01T00:00:00Z." At 100 % it says
    that its tasks are refused until then. Pure."""
    spent, limit, held = (_amount(usage.limit, v) for v in (usage.spent, usage.limit_value, usage.held))
    if usage.limit == "request_limit":
        used = f"{spent} of {limit} requests admitted" + (f" ({held} more leased to gateway processes)"
                                                          if usage.held else "")
    elif usage.limit == "token_limit":
        used = f"{spent} of {limit} tokens reported"
    else:
        used = f"{spent} of {limit} settled" + (f" ({held} held by requests in flight)" if usage.held else "")
    if usage.window_end is None:
        window, resets = "in its lifetime", " It has no window: only a higher limit makes room."
    else:
        window = f"this window (since {_instant(usage.window_start)})"
        resets = f" It resets at {_instant(usage.window_end)}."
    head = f"Budget '{usage.budget_id}' has used {threshold:g} % of its {usage.limit} {window}: {used}."
    if threshold >= 100:
        return head + " Its tasks are refused until it has room again." + resets
    return head + resets


async def check(pool: asyncpg.Pool, at: datetime, seen: dict[tuple[str, str], float]) -> int:
    """Announce every threshold crossed and not announced yet in the current windows
    (read on the gateway's clock ``at``); returns how many this call announced. ``seen``
    (budget id, limit) → fraction last emitted, kept by the caller between calls:
    :data:`app.events.BUDGET_USAGE` is emitted only for a change."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(_CURRENT, at)
        announced = 0
        for row in rows:
            for usage in usages(row):
                if seen.get((usage.budget_id, usage.limit)) != usage.fraction:
                    seen[(usage.budget_id, usage.limit)] = usage.fraction
                    events.BUDGET_USAGE.emit(events.BudgetUsage(usage.budget_id, usage.limit, usage.fraction))
                for threshold in crossed(usage, thresholds_of(row["thresholds"]), row["announced"]):
                    announced += await _announce(conn, usage, threshold)
    if len(seen) > 100_000:
        seen.clear()
    return announced


async def _announce(conn: asyncpg.Connection, usage: Usage, threshold: float) -> int:
    """Record one crossing (once across processes) and, once committed, emit it."""
    message = sentence(usage, threshold)
    async with conn.transaction():
        if await conn.fetchval(_WARN, usage.budget_id, usage.window_start, usage.limit, threshold) is None:
            return 0  # another process announced it
        await pause.add_event(conn, usage.budget_id, "threshold", usage.limit, {
            "threshold": threshold, "limit": str(usage.limit_value), "spent": str(usage.spent),
            "held": str(usage.held), "fraction": round(usage.fraction, 6),
            "window_start": _instant(usage.window_start),
            "resets_at": _instant(usage.window_end) if usage.window_end else None, "message": message})
    events.BUDGET_THRESHOLD.emit(events.BudgetThreshold(
        budget_id=usage.budget_id, limit=usage.limit, threshold=threshold, limit_value=usage.limit_value,
        spent=usage.spent, held=usage.held, fraction=usage.fraction, window_start=usage.window_start,
        window_end=usage.window_end, message=message))
    return 1


class Activity:
    """When this process last admitted or relayed a request (a subscriber of
    :data:`app.events.ADMISSION_DONE` and :data:`app.events.EXCHANGE_FINISHED`)."""

    def __init__(self) -> None:
        self.last = 0.0
        self.seen: dict[tuple[str, str], float] = {}

    def touched(self, _event: object) -> None:
        self.last = time.monotonic()

    def recent(self) -> bool:
        return time.monotonic() - self.last < ACTIVE_S


#: This process's activity and the fractions it last emitted (one per process).
activity = Activity()


async def check_if_active(pool: asyncpg.Pool, at: datetime) -> int:
    """:func:`check` when this process admitted or relayed a request in the last
    :data:`ACTIVE_S` seconds, else nothing (0)."""
    return await check(pool, at, activity.seen) if activity.recent() else 0
