"""A budget's rates (issue 38 item 4): requests and tokens per minute, in PostgreSQL.

``requests_per_minute`` and ``tokens_per_minute`` count in **fixed UTC minutes** of the
gateway's window clock (:func:`app.budgets.windows.now`): one ``budget_rates`` row per
rated budget and minute.

- requests: counted at admission. The admission's statement adds one to the minute's
  row only while it is under ``requests_per_minute`` (``INSERT ... ON CONFLICT DO UPDATE
  ... WHERE``): exact across gateways, never one past the rate in any minute;
- tokens: reported by upstream after the response, added to the row of the minute the
  response settles in (:func:`settle`); a request is admitted while the minute's tokens
  are under ``tokens_per_minute`` (as a budget's ``token_limit``): a minute may end over
  it by the tokens of the responses admitted while it was under.

A request over a rate is refused with 429 ``rate_limited`` (:func:`rate_limited`) and
``Retry-After``: the seconds until the minute ends. Not a latch, not a stop, and nothing
is counted (the admission's transaction rolls back). A 60 s span across a minute's end
may hold up to twice a rate (a fixed window, not a sliding one); gateways whose clocks
differ by a few milliseconds each count a boundary request in their own minute.

A rated budget is decided on the locked path (:func:`app.budgets.ledger.reserve`), its
window row locked: its admissions run one at a time (the bound: docs/budgets.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg

from app.db import sql
from app.errors import GatewayError

if TYPE_CHECKING:
    from app.budgets.rows import BudgetRow

#: ``error.code`` of a refusal by a rate (``error.type``: ``rate_limit_error``).
RATE_LIMITED = "rate_limited"
#: Minutes a rated budget's rows are kept.
KEEP_MINUTES = 60

# The statements: app/db/sql/budgets.sql (budget_rate_*).
_TAKE = sql.statement("budget_rate_take")
_READ = sql.statement("budget_rate_read")
_PRUNE = sql.statement("budget_rate_prune")
_SETTLE = sql.statement("budget_rate_settle")
_CURRENT = sql.statement("budget_rate_current")


def rated(budget: BudgetRow) -> bool:
    """Whether ``budget`` (a ``budgets`` row) has a rate."""
    return budget.get("requests_per_minute") is not None or budget.get("tokens_per_minute") is not None


def minute(at: datetime) -> datetime:
    """The start of the UTC minute holding ``at`` (aware). Pure."""
    return at.replace(second=0, microsecond=0)


def retry_after_s(at: datetime) -> int:
    """Whole seconds from ``at`` until its minute ends, at least 1. Pure."""
    return max(1, math.ceil((minute(at) + timedelta(minutes=1) - at).total_seconds()))


def _instant(at: datetime) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def rate_limited(task_id: str, budget: BudgetRow, requests: int, tokens: int, at: datetime) -> GatewayError:
    """429 ``rate_limited``: ``budget``'s minute holding ``at`` has ``requests`` admitted and
    ``tokens`` reported, at its ``requests_per_minute`` or ``tokens_per_minute``. Names
    the rate and when the minute ends; ``Retry-After`` in seconds, ``x-should-retry:
    true``, ``x-taskgate-budget``."""
    rpm, tpm = budget.get("requests_per_minute"), budget.get("tokens_per_minute")
    if rpm is not None and requests >= rpm:
        what = f"all {rpm} requests of its requests_per_minute are admitted"
    else:
        what = f"{tokens} tokens reported, at or over its tokens_per_minute of {tpm}"
    wait = retry_after_s(at)
    ends = minute(at) + timedelta(minutes=1)
    return GatewayError(
        429, "rate_limit_error", RATE_LIMITED,
        f"Budget '{budget['id']}' of task '{task_id}' is over its rate: {what} in the minute since "
        f"{_instant(minute(at))}. Retry after {wait} s (the minute ends at {_instant(ends)}). "
        "The task is not stopped; nothing was forwarded or counted.",
        {"retry-after": str(wait), "x-should-retry": "true", "x-taskgate-budget": str(budget["id"]),
         "x-taskgate-rate-reset": _instant(ends)})


async def take(conn: asyncpg.Connection, task_id: str, budgets: Sequence[BudgetRow], at: datetime) -> None:
    """Count one request in the current minute of every rated budget of the chain (root
    first), in the admission's transaction; raises :func:`rate_limited` for the first
    one over a rate (the caller's transaction must roll back: rates counted before it in
    the chain were counted in it)."""
    start = minute(at)
    for budget in budgets:
        if not rated(budget):
            continue
        row = await conn.fetchrow(_TAKE, budget["id"], start, budget.get("requests_per_minute"),
                                  budget.get("tokens_per_minute"))
        if row is None:
            now = await conn.fetchrow(_READ, budget["id"], start)
            raise rate_limited(task_id, budget, int(now["requests"]), int(now["tokens"]), at)
        if row["fresh"]:  # the minute's first request: minutes older than an hour go
            await conn.execute(_PRUNE, budget["id"], start - timedelta(minutes=KEEP_MINUTES))


async def settle(conn: asyncpg.Connection, budget_ids: Sequence[str], tokens: int, at: datetime) -> None:
    """Add ``tokens`` a response reported to the minute holding ``at`` of each budget of
    ``budget_ids`` (those with ``tokens_per_minute``)."""
    if budget_ids and tokens:
        await conn.execute(_SETTLE, list(budget_ids), minute(at), tokens)


async def current(conn: asyncpg.Connection, budget_ids: Sequence[str], at: datetime) -> dict[str, Any]:
    """The current minute's row of each of ``budget_ids`` that has one (the admin API)."""
    rows = await conn.fetch(_CURRENT, list(budget_ids), minute(at))
    return {r["budget_id"]: r for r in rows}
