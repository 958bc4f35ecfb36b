"""Warning thresholds of a task (issue 38 item 1): a budget's warnings, for one task.

A task's ``thresholds`` are percents of each of its limits that have a value
(``request_limit``, ``token_limit``, ``cost_limit_usd``; default
:data:`app.budgets.thresholds.DEFAULT`: 50, 80 and 95; ``0 < t <= 100``; an empty list:
none). A task has no window, so a crossing is announced **once per task, limit, limit
value and threshold, across every gateway process**: a ``task_warnings`` row keyed by the
limit's value, inserted ``ON CONFLICT DO NOTHING``. Raising (or lowering) a limit re-arms
its thresholds against the new value; setting a limit back to a value already announced
does not announce again. Only the process whose insert wrote the row records a
``task_warning`` event in the task's history (same transaction) and, once committed, emits
:data:`app.events.TASK_THRESHOLD` (the console: the webhook's ``task.threshold``, a log
line, ``taskgate_task_warnings_total``). What each limit used is :class:`TaskUsage`:

- ``request_limit``: requests admitted, held: 0;
- ``token_limit``: input + output tokens reported, held: 0;
- ``cost_limit_usd``: dollars settled, held: worst cases reserved by requests in flight.

Nothing runs on admission. A process notes the tasks whose exchanges it finished
(:meth:`Touched.add`, a subscriber of :data:`app.events.EXCHANGE_FINISHED`) and
:func:`check_touched`, run by :func:`app.jobs.start` every
:data:`app.budgets.thresholds.CHECK_INTERVAL_S` seconds, reads those touched in the last
:data:`RECHECK_S` seconds in one statement (their settlement has landed by then). An idle
process reads nothing; the number of tasks read is bounded by this process's traffic.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from app import events
from app.admission.cost import dollars
from app.budgets.thresholds import LIMITS, thresholds_of
from app.db import sql
from app.db import tasks as task_rows

#: A task touched this many seconds ago or less is checked again (its usage settles after
#: the exchange ends: tokens and dollars land a few milliseconds later).
RECHECK_S = 3.0
#: At most this many tasks are read per check (the most recently touched first).
MAX_TASKS = 5_000


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """What task ``task_id`` used of one limit (``limit``: ``request_limit``,
    ``token_limit`` or ``cost_limit_usd``, whose value is ``limit_value``): ``spent`` and
    ``held`` in the limit's unit (requests, tokens, US dollars), ``fraction`` = spent / limit."""

    task_id: str
    limit: str
    limit_value: Decimal
    spent: Decimal
    held: Decimal

    @property
    def fraction(self) -> float:
        return float(self.spent / self.limit_value) if self.limit_value > 0 else 1.0


def usages(row: Mapping[str, Any]) -> list[TaskUsage]:
    """The :class:`TaskUsage` of each limit a task has, from a ``task_thresholds_current``
    row. Pure."""
    spent_held = {"request_limit": (row["admitted_requests"], 0), "token_limit": (row["tokens"], 0),
                  "cost_limit_usd": (row["cost_usd"], row["reserved_usd"])}
    return [TaskUsage(row["id"], limit, Decimal(row[limit]), Decimal(spent_held[limit][0]),
                      Decimal(spent_held[limit][1]))
            for limit, _ in LIMITS if row[limit] is not None]


def crossed(usage: TaskUsage, thresholds: Iterable[float], announced: Iterable[str]) -> list[float]:
    """The thresholds (percents) ``usage`` reached that are not in ``announced``
    (``"<limit>:<threshold>"``, PostgreSQL's text of the threshold). Pure."""
    done = set(announced)
    return [t for t in thresholds if usage.spent * 100 >= Decimal(str(t)) * usage.limit_value
            and f"{usage.limit}:{t}" not in done and f"{usage.limit}:{t:g}" not in done]


def _amount(limit: str, value: Decimal) -> str:
    return dollars(value) if limit == "cost_limit_usd" else f"{int(value):,}"


def sentence(usage: TaskUsage, threshold: float) -> str:
    """The crossing in words, e.g. "Task 'x' has used 80 % of its request_limit: 8 of 10
    requests admitted." At 100 % it says the next request is refused until the limit is
    raised. Pure."""
    spent, limit, held = (_amount(usage.limit, v) for v in (usage.spent, usage.limit_value, usage.held))
    if usage.limit == "request_limit":
        used = f"{spent} of {limit} requests admitted"
    elif usage.limit == "token_limit":
        used = f"{spent} of {limit} tokens reported"
    else:
        used = f"{spent} of {limit} settled" + (f" ({held} held by requests in flight)" if usage.held else "")
    head = f"Task '{usage.task_id}' has used {threshold:g} % of its {usage.limit}: {used}."
    if threshold >= 100:
        return head + " Its next request is refused: raise the limit (and resume the task) to go on."
    return head


async def check(pool: asyncpg.Pool, task_ids: Sequence[str]) -> int:
    """Announce every threshold tasks ``task_ids`` crossed and no process announced yet at
    their limits' current values; returns how many this call announced."""
    if not task_ids:
        return 0
    announced = 0
    async with pool.acquire() as conn:
        for row in await conn.fetch(sql.statement("task_thresholds_current"), list(task_ids)):
            for usage in usages(row):
                for threshold in crossed(usage, thresholds_of(row["thresholds"]), row["announced"]):
                    announced += await _announce(conn, usage, threshold)
    return announced


async def _announce(conn: asyncpg.Connection, usage: TaskUsage, threshold: float) -> int:
    """Record one crossing (once across processes) and, once committed, emit it."""
    message = sentence(usage, threshold)
    try:
        async with conn.transaction():
            if await conn.fetchval(sql.statement("task_warning_insert"), usage.task_id, usage.limit,
                                   usage.limit_value, threshold) is None:
                return 0  # another process announced it
            await task_rows.add_event(conn, usage.task_id, "task_warning", usage.limit, {
                "threshold": threshold, "limit": str(usage.limit_value), "spent": str(usage.spent),
                "held": str(usage.held), "fraction": round(usage.fraction, 6), "message": message})
    except asyncpg.ForeignKeyViolationError:
        return 0  # the task was deleted meanwhile
    events.TASK_THRESHOLD.emit(events.TaskThreshold(
        task_id=usage.task_id, limit=usage.limit, threshold=threshold, limit_value=usage.limit_value,
        spent=usage.spent, held=usage.held, fraction=usage.fraction, message=message))
    return 1


class Touched:
    """The tasks whose exchanges this process finished lately (task id → monotonic time of
    the last), a subscriber of :data:`app.events.EXCHANGE_FINISHED`."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def add(self, event: events.ExchangeFinished) -> None:
        self.at[event.task_id] = time.monotonic()

    def due(self) -> list[str]:
        """The tasks touched in the last :data:`RECHECK_S` seconds (at most
        :data:`MAX_TASKS`, latest first); older ones are forgotten."""
        cutoff = time.monotonic() - RECHECK_S
        self.at = {task: at for task, at in self.at.items() if at >= cutoff}
        return sorted(self.at, key=self.at.__getitem__, reverse=True)[:MAX_TASKS]


#: This process's touched tasks (one per process).
touched = Touched()


async def check_touched(pool: asyncpg.Pool) -> int:
    """:func:`check` over the tasks this process served in the last :data:`RECHECK_S`
    seconds (none: nothing is read, 0)."""
    return await check(pool, touched.due())
