"""Task rows: the stop latch and the event history. Every function takes an open
connection inside a transaction; callers hold the task's row lock where it matters."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import durable

logger = logging.getLogger(__name__)

_LOCK = text("SELECT * FROM tasks WHERE id = :task_id FOR UPDATE")
_LOCK_BY_TOKEN = text("SELECT * FROM tasks WHERE token_hash = :token_hash FOR UPDATE")
_LATCH = text(
    "UPDATE tasks SET status = 'stopped', stop_reason = :reason, stop_detail = :detail,"
    " stopped_at = now(), updated_at = now() WHERE id = :task_id AND status = 'active'"
).bindparams(bindparam("detail", type_=JSONB))
_EVENT = text(
    "INSERT INTO task_events (task_id, kind, reason, detail) VALUES (:task_id, :kind, :reason, :detail)"
).bindparams(bindparam("detail", type_=JSONB))


async def lock_task(conn: AsyncConnection, *, task_id: str | None = None,
                    token_hash: str | None = None) -> dict[str, Any] | None:
    """``SELECT ... FOR UPDATE`` one task by id or token hash; ``None`` when absent."""
    if task_id is not None:
        row = (await conn.execute(_LOCK, {"task_id": task_id})).mappings().first()
    else:
        row = (await conn.execute(_LOCK_BY_TOKEN, {"token_hash": token_hash})).mappings().first()
    return dict(row) if row else None


async def add_event(conn: AsyncConnection, task_id: str, kind: str, reason: str | None = None,
                    detail: dict[str, Any] | None = None) -> None:
    """Append one event to the task's durable history."""
    await conn.execute(_EVENT, {"task_id": task_id, "kind": kind, "reason": reason,
                                "detail": detail or {}})


async def set_latch(conn: AsyncConnection, task_id: str, reason: str,
                    detail: dict[str, Any]) -> bool:
    """Set the durable stop latch (``status='stopped'``) and record a ``stopped`` event.

    Returns ``False`` (and records nothing) when the task was already stopped: the
    first reason wins and is never overwritten.
    """
    await durable(conn)
    result = await conn.execute(_LATCH, {"task_id": task_id, "reason": reason,
                                         "detail": detail})
    if result.rowcount == 0:
        return False
    await add_event(conn, task_id, "stopped", reason, detail)
    logger.warning("task %s stopped: %s %s", task_id, reason, detail)
    return True

