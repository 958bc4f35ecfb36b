"""A budget's kill switch (issue 38 item 3): pause and resume, in PostgreSQL.

A **paused** budget (``budgets.paused_at`` set, with ``paused_by`` and ``paused_reason``)
refuses every request of every task under it and under the budgets nested in it, with
400 ``budget_paused`` (:func:`budget_paused`), until it is resumed. Tasks are not touched:
a paused budget is not a stopped task, so resuming needs nothing per task.

Where the pause is seen, with no cache anywhere:

- the escrow lease statements (:mod:`app.budgets.escrow`, one statement per admission)
  pay only from budgets whose ``paused_at IS NULL``: a paused chain's fast statement
  aborts, and the locked path decides;
- the locked path reads the chain in its transaction (:func:`app.budgets.ledger.chain`)
  and refuses when a budget of it is paused (:func:`paused_in`, the root-most one).

So a gateway that was cut off from PostgreSQL when the budget was paused refuses the
budget's requests from its first admission after it reconnects.

:func:`pause` and :func:`resume` write the budget row, a ``budget_events`` row
(``paused`` / ``resumed``) and ``NOTIFY`` :data:`PAUSE_CHANNEL` with the budget id in one
durable transaction (delivered on commit). Every gateway process hears it
(:mod:`app.proxy.stop_watch`) and cuts the open requests of the tasks under the budget
(:data:`PAUSED_TASKS`), as it does for a stopped task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from app.db import sql
from app.db.bounds import storable_json
from app.db.pool import durable
from app.errors import STOP_STATUS, GatewayError

if TYPE_CHECKING:
    from app.budgets.rows import BudgetRow

#: ``error.type`` and ``error.code`` of a refusal by a paused budget.
BUDGET_PAUSED = "budget_paused"
#: The channel a pause is announced on (payload: the budget id), delivered on commit.
PAUSE_CHANNEL = "taskgate_budget_pause"

# The statements: app/db/sql/budgets.sql (budget_pause ...).
_PAUSE = sql.statement("budget_pause")
_RESUME = sql.statement("budget_resume")
#: A pause announced on :data:`PAUSE_CHANNEL` (payload: the budget id).
_NOTIFY = sql.statement("budget_pause_notify")
_LOCK = sql.statement("budget_lock")
_EVENT = sql.statement("budget_event")
#: For each task of ``$1`` (ids) under a paused budget: that budget (the root-most paused
#: one of its chain), its ``paused_at``, ``paused_by``, ``paused_reason``, and the task's
#: own budget.
PAUSED_TASKS = sql.statement("budget_paused_tasks")


def paused_in(chain: Sequence[BudgetRow]) -> BudgetRow | None:
    """The root-most paused budget of ``chain`` (``budgets`` rows, root first), or
    ``None``. Pure."""
    return next((b for b in chain if b["paused_at"] is not None), None)


def _instant(at: datetime | None) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z") if at is not None else "?"


def budget_paused(task_id: str, paused: Mapping[str, Any], own_budget: str | None) -> GatewayError:
    """400 (:data:`app.errors.STOP_STATUS`) ``budget_paused``: the budget ``paused`` (a
    ``budgets`` row, or a :data:`PAUSED_TASKS` row with ``id``) of the chain of task
    ``task_id``, whose own budget is ``own_budget``, is paused. Says who paused it, when
    and why; not retried (``x-should-retry: false``), ``x-taskgate-budget`` names it."""
    budget = str(paused["id"])
    whose = (f"Budget '{budget}'" if own_budget in (None, budget)
             else f"Budget '{budget}', which budget '{own_budget}' nests in,")
    why = f": {paused['paused_reason']}" if paused.get("paused_reason") else ""
    by = f" by {paused['paused_by']}" if paused.get("paused_by") else ""
    return GatewayError(
        STOP_STATUS, BUDGET_PAUSED, BUDGET_PAUSED,
        f"{whose} of task '{task_id}' is paused (paused{by} at {_instant(paused['paused_at'])}{why}). "
        f"Every task under it is refused until an operator resumes it (taskgate budgets resume {budget}). "
        "The task is not stopped; nothing was forwarded or counted.",
        {"x-should-retry": "false", "x-taskgate-budget": budget,
         "x-taskgate-budget-paused-at": _instant(paused["paused_at"])})


async def add_event(conn: asyncpg.Connection, budget_id: str, kind: str, reason: str | None,
                    detail: Mapping[str, Any]) -> int:
    """Append one event to the budget's history (``budget_events``); its id."""
    event_id: int = await conn.fetchval(_EVENT, budget_id, kind, storable_json(reason), storable_json(dict(detail)))
    return event_id


async def pause(conn: asyncpg.Connection, budget_id: str, by: str, reason: str) -> tuple[Any, bool] | None:
    """Pause ``budget_id`` (inside a transaction; the commit waits for the disk): its row
    after, and whether this call paused it (``False``: it already was; its pause, who and
    why are kept, and the pause is announced again). ``None``: no such budget."""
    await durable(conn)
    row = await conn.fetchrow(_PAUSE, budget_id, storable_json(by), storable_json(reason))
    changed = row is not None
    if row is None:
        row = await conn.fetchrow(_LOCK, budget_id)
        if row is None:
            return None
    else:
        await add_event(conn, budget_id, "paused", reason, {"by": by})
    await conn.execute(_NOTIFY, budget_id)
    return row, changed


async def resume(conn: asyncpg.Connection, budget_id: str, by: str, reason: str) -> tuple[Any, Any] | None:
    """Resume ``budget_id`` (inside a transaction): its row after and the pause it lifted
    (``paused_at``, ``paused_by``, ``paused_reason``), or its row and ``None`` when it was not
    paused; ``None`` when there is no such budget."""
    await durable(conn)
    before = await conn.fetchrow(_LOCK, budget_id)
    if before is None:
        return None
    if before["paused_at"] is None:
        return before, None
    row = await conn.fetchrow(_RESUME, budget_id)
    await add_event(conn, budget_id, "resumed", reason, {
        "by": by, "paused_at": _instant(before["paused_at"]), "paused_by": before["paused_by"],
        "paused_reason": before["paused_reason"],
        "paused_s": round((row["updated_at"] - before["paused_at"]).total_seconds(), 3)})
    return row, before
