"""A budget key's request: the key checked, and its run's task created on first sight.

:func:`require_key` looks the key up on every request (one indexed query: a revoked key
is refused at its next request, 401). :func:`ensure_run_task` creates the run's task
from the key's template with ``INSERT ... ON CONFLICT (id) DO NOTHING``: two first
requests of one run at once (in any processes) create one task, and one ``created``
event. Tasks this process has seen exist are remembered (a small bounded set); a task
an operator deleted since is created again at the run's next request
(:func:`forget`, called when admission does not find it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from app.admission.tokens import new_token, token_hash
from app.budgets.keys import run_task_id
from app.db import tasks as task_rows
from app.db.bounds import storable_json
from app.db.pool import durable
from app.db.schema import tasks as tasks_table
from app.errors import fail_closed, unauthorized

_KEY = "SELECT id, budget_id, template FROM budget_keys WHERE key_hash = $1 AND revoked_at IS NULL"
#: Template fields that are task columns (what POST /admin/tasks takes, minus id and budget).
_TEMPLATE_COLUMNS = frozenset(tasks_table.c.keys()) - {
    "id", "token_hash", "budget_id", "metadata", "status", "stop_reason", "stop_detail", "stopped_at"}


@dataclass(frozen=True, slots=True)
class BudgetKey:
    id: str
    budget_id: str
    template: dict[str, Any]


class _Seen:
    def __init__(self, size: int = 10_000) -> None:
        self.size, self._ids = size, OrderedDict[str, None]()

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._ids

    def add(self, task_id: str) -> None:
        self._ids[task_id] = None
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def discard(self, task_id: str) -> None:
        self._ids.pop(task_id, None)


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
    columns = list(values)
    return (f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({', '.join(f'${i}' for i in range(1, len(columns) + 1))})"
            " ON CONFLICT (id) DO NOTHING RETURNING id")


async def ensure_run_task(pool: asyncpg.Pool, key: BudgetKey, run: str, default_request_limit: int,
                          request_id: str | None = None) -> str:
    """The id of ``run``'s task under ``key``'s budget, created from the key's template
    if it does not exist yet (exactly once across processes)."""
    task_id = run_task_id(key.budget_id, run)
    if task_id in _seen:
        return task_id
    values: dict[str, Any] = {k: v for k, v in key.template.items() if k in _TEMPLATE_COLUMNS}
    values.setdefault("request_limit", default_request_limit)
    values.update(budget_id=key.budget_id, metadata=storable_json({"budget_key": key.id, "run": run[:256]}))
    event = dict(values)
    if values.get("cost_limit_usd") is not None:
        values["cost_limit_usd"] = Decimal(str(values["cost_limit_usd"]))
    values.update(id=task_id, token_hash=token_hash(new_token()))
    with fail_closed("run task creation"):
        async with pool.acquire() as conn, conn.transaction():
            created = await conn.fetchval(_insert(values), *values.values())
            if created is not None:
                await durable(conn)
                await task_rows.add_event(conn, task_id, "created", None, event, request_id=request_id)
    _seen.add(task_id)
    return task_id


def forget(task_id: str) -> None:
    """Admission did not find the task (deleted): create it again next time."""
    _seen.discard(task_id)
