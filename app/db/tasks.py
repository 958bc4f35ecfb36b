"""Task rows: the stop latch and the event history. Every function takes an asyncpg
connection inside a transaction; callers hold the task's row lock where it matters."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from app import events
from app.db import sql
from app.db.bounds import storable_json
from app.db.pool import durable
from app.task import Task

logger = logging.getLogger(__name__)

#: The channel every latch is announced on (payload: the task id). The NOTIFY runs in
#: the latch's own transaction, so listeners hear it only once the latch is committed.
STOP_CHANNEL = "taskgate_stop"
_LATCH = sql.statement("task_latch")  # NOTIFYs STOP_CHANNEL (tests/test_sql_inventory.py)
_EVENT = sql.statement("task_event")
_LOCK_BY_ID = sql.statement("task_lock_by_id")
_LOCK_BY_TOKEN = sql.statement("task_lock_by_token")


async def lock_task(conn: asyncpg.Connection, *, task_id: str | None = None,
                    token_hash: str | None = None) -> Task | None:
    """``SELECT ... FOR UPDATE`` one task by id or token hash; ``None`` when absent."""
    if task_id is not None:
        row = await conn.fetchrow(_LOCK_BY_ID, task_id)
    else:
        row = await conn.fetchrow(_LOCK_BY_TOKEN, token_hash)
    return Task.from_row(row) if row else None


async def add_event(conn: asyncpg.Connection, task_id: str, kind: str, reason: str | None = None,
                    detail: dict[str, Any] | None = None, *, request_id: str | None = None) -> int:
    """Append one event to the task's durable history; returns its id. ``request_id``
    (the HTTP request that caused it, when there is one) is added to ``detail``.
    ``reason`` and ``detail`` are made storable: NUL, lone surrogates and non-finite
    numbers never reach PostgreSQL."""
    if request_id is not None:
        detail = {**(detail or {}), "request_id": request_id}
    event_id: int = await conn.fetchval(_EVENT, task_id, kind, storable_json(reason), storable_json(detail or {}))
    return event_id


async def set_latch(conn: asyncpg.Connection, task_id: str, reason: str,
                    detail: dict[str, Any], *, request_id: str | None = None) -> bool:
    """Set the durable stop latch (``status='stopped'``) and record a ``stopped`` event.

    Returns ``False`` (and records nothing) when the task was already stopped: the
    first reason wins and is never overwritten. The commit waits for the disk. The
    same statement ``NOTIFY``s :data:`STOP_CHANNEL` with the task id, delivered on
    commit to every gateway process listening (:mod:`app.proxy.stop_watch`), and
    :data:`app.events.LATCH_SET` is emitted (inside the transaction).
    """
    await durable(conn)
    reason, detail = storable_json(reason), storable_json(detail)
    if await conn.execute(_LATCH, task_id, reason, detail) == "SELECT 0":
        return False
    event_id = await add_event(conn, task_id, "stopped", reason, detail, request_id=request_id)
    logger.warning("task %s stopped: %s %s", task_id, reason, detail,
                   extra={"task_id": task_id, "reason": reason})
    events.LATCH_SET.emit(events.LatchSet(task_id, reason, event_id))
    return True
