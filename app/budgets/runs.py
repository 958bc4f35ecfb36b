"""A budget key's request: the key checked, and its run's task created on first sight.

:func:`require_key` looks the key up on every request (one indexed query: a revoked key
is refused at its next request, 401). :func:`ensure_run_task` creates the run's task
from the key's template with ``INSERT ... ON CONFLICT (id) DO NOTHING``: two first
requests of one run at once (in any processes) create one task, and one ``created``
event. The task's id is derived from the key's id (:func:`app.budgets.keys.run_task_id`),
so a key can only reach the tasks it opened: the check is the derivation, not a
statement on the hot path. A run whose task predates that id
(:func:`app.budgets.keys.earlier_run_task_ids`: without the run's name, or before the key
was in the digest) is continued on it only when the task's budget is the key's and its
metadata names the key (checked by the same ``INSERT``, which then writes nothing); for
any other key the run gets a task of its own.

Tasks this process has seen exist are remembered (a small bounded map from the derived id
to the task used); a task an operator deleted since is created again at the run's next
request (:func:`forget`, called when admission does not find it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from app.admission.tokens import new_token, token_hash
from app.budgets.keys import earlier_run_task_ids, run_task_id
from app.db import sql
from app.db import tasks as task_rows
from app.db.bounds import storable_json
from app.db.pool import durable
from app.db.schema import tasks as tasks_table
from app.db.sql import assemble
from app.errors import fail_closed, unauthorized

# The statements: app/db/sql/budgets.sql; the run task's INSERT is a piece (:func:`_insert`).
_KEY = sql.statement("budget_key_by_hash")
#: Template fields that are task columns (what POST /admin/tasks takes, minus id and budget).
_TEMPLATE_COLUMNS = frozenset(tasks_table.c.keys()) - {
    "id", "token_hash", "budget_id", "metadata", "status", "stop_reason", "stop_detail", "stopped_at"}


@dataclass(frozen=True, slots=True)
class BudgetKey:
    id: str
    budget_id: str
    template: dict[str, Any]


class _Seen:
    """Derived run-task id -> the id of the task the run uses (itself, or an earlier id)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size, self._ids = size, OrderedDict[str, str]()

    def get(self, derived: str) -> str | None:
        return self._ids.get(derived)

    def add(self, derived: str, task_id: str) -> None:
        self._ids[derived] = task_id
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def discard(self, task_id: str) -> None:
        if self._ids.pop(task_id, None) is None:  # an earlier id: found by value (rare: deleted)
            for derived in [d for d, used in self._ids.items() if used == task_id]:
                del self._ids[derived]


_seen = _Seen()


async def require_key(pool: asyncpg.Pool, key: str) -> BudgetKey:
    """The budget key ``key``; 401 (``connection: close``) when unknown or revoked, 503
    when the database cannot answer."""
    with fail_closed("budget key lookup"):
        async with pool.acquire() as conn:
            row = await conn.fetchrow(_KEY, token_hash(key))
    if row is None:
        raise unauthorized("Unknown or revoked budget key. Use a key from POST /admin/budgets/{id}/keys.",
                           close=True)
    return BudgetKey(row["id"], row["budget_id"], dict(row["template"] or {}))


def _insert(values: dict[str, Any]) -> str:
    """Insert ``values`` (task columns: fixed names) unless one of the run's earlier tasks
    (the parameters before the values: their ids, ``text[]``, the budget, the key id)
    exists and belongs to the key (``budget_run_task_insert``, a piece filled by
    :func:`app.db.sql.assemble.fill`: its columns are the key template's fields)."""
    return assemble.fill("budget_run_task_insert", columns=", ".join(values),
                         values=", ".join(f"${n}" for n in range(4, len(values) + 4)))


#: Nothing inserted: the run's task (preferred), else the newest of its earlier tasks
#: that is the key's.
_EXISTING = sql.statement("budget_run_existing")


async def ensure_run_task(pool: asyncpg.Pool, key: BudgetKey, run: str, default_request_limit: int,
                          request_id: str | None = None) -> str:
    """The id of ``run``'s task opened by ``key``, created from the key's template if it
    does not exist yet (exactly once across processes); the run's task under an earlier
    id instead if ``key`` opened one. 503 when the database cannot answer."""
    task_id = run_task_id(key.budget_id, key.id, run)
    if (used := _seen.get(task_id)) is not None:
        return used
    earlier = (list(earlier_run_task_ids(key.budget_id, key.id, run)), key.budget_id, key.id)
    values: dict[str, Any] = {k: v for k, v in key.template.items() if k in _TEMPLATE_COLUMNS}
    values.setdefault("request_limit", default_request_limit)
    values.update(budget_id=key.budget_id, metadata=storable_json({"budget_key": key.id, "run": run[:256]}))
    event = dict(values)
    if values.get("cost_limit_usd") is not None:
        values["cost_limit_usd"] = Decimal(str(values["cost_limit_usd"]))
    values.update(id=task_id, token_hash=token_hash(new_token()))
    with fail_closed("run task creation"):
        async with pool.acquire() as conn, conn.transaction():
            used = await conn.fetchval(_insert(values), *earlier, *values.values())
            if used is not None:
                await durable(conn)
                await task_rows.add_event(conn, task_id, "created", None, event, request_id=request_id)
            else:  # it exists, or the key's earlier task does (neither: deleted meanwhile, and
                # admission, not finding the derived id, calls forget)
                used = await conn.fetchval(_EXISTING, task_id, *earlier) or task_id
    _seen.add(task_id, used)
    return used


def forget(task_id: str) -> None:
    """Admission did not find the task (deleted): create it again next time."""
    _seen.discard(task_id)
