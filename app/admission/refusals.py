"""Refusals of a stopped task: counted on the task (``refused_requests``) and logged
one line per task at most every :data:`LOG_INTERVAL_S` seconds per process, with the
task's refusal count."""

from __future__ import annotations

import logging
import time

import asyncpg

logger = logging.getLogger("app.admission.admission")

LOG_INTERVAL_S = 10.0
_COUNT = "UPDATE tasks SET refused_requests = refused_requests + 1 WHERE id = $1 RETURNING refused_requests"

_last_logged: dict[str, float] = {}  # task id -> monotonic time of its last line


async def count_refusal(conn: asyncpg.Connection, task_id: str) -> int:
    """Add one to the task's ``refused_requests``; returns the new count."""
    return await conn.fetchval(_COUNT, task_id)


def log_refusal(task_id: str, reason: str, refused: int, now: float | None = None) -> bool:
    """Log the refusal unless this task was logged less than :data:`LOG_INTERVAL_S`
    ago; returns whether a line was written."""
    now = time.monotonic() if now is None else now
    last = _last_logged.get(task_id)
    if last is not None and now - last < LOG_INTERVAL_S:
        return False
    if len(_last_logged) > 10_000:
        _last_logged.clear()
    _last_logged[task_id] = now
    logger.info("refused a request of task %s: %s (%d refused so far)", task_id, reason, refused)
    return True
