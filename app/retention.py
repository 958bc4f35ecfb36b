"""Retention: finished tasks older than ``TASKGATE_RETENTION_DAYS`` are deleted with
everything that belongs to them, so nothing grows forever.

*Finished* means stopped (the latch is set) or idle (active, nothing admitted or
changed) for longer than the retention period, measured on ``tasks.updated_at``,
which every admission, settlement and admin change moves. Deleting a task row deletes
its events, ledger rows, conversations, reservations and request log rows with it
(``ON DELETE CASCADE``, :mod:`app.db.schema`). Work is done in batches of
:data:`BATCH` tasks, each its own short transaction whose rows are claimed with
``FOR UPDATE SKIP LOCKED``, so any number of gateway processes can run the job at once
without waiting on each other or on admissions. Off by default (``None``).

:func:`prune` is the job's unit and what ``POST /admin/prune`` and
``taskgate tasks prune`` run by hand.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from app.db.errors import database_unreachable
from app.fault_log import faults
from app.settings import Settings

logger = logging.getLogger(__name__)

#: Tasks deleted per transaction.
BATCH = 100
#: Seconds between runs of the background job.
INTERVAL_S = 3600.0

_PRUNE = """
WITH doomed AS (
    SELECT id FROM tasks
     WHERE updated_at < now() - $1 * interval '1 day'
     ORDER BY updated_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED)
DELETE FROM tasks t USING doomed WHERE t.id = doomed.id RETURNING t.id
"""


async def prune(pool: asyncpg.Pool, older_than_days: float, max_batches: int = 1000) -> int:
    """Delete tasks stopped or idle for more than ``older_than_days`` days (with their
    history), :data:`BATCH` per transaction; returns how many were deleted."""
    deleted = 0
    for _ in range(max_batches):
        async with pool.acquire() as conn:
            rows = await conn.fetch(_PRUNE, older_than_days, BATCH)
        deleted += len(rows)
        if len(rows) < BATCH:
            break
    if deleted:
        logger.info("retention: deleted %d task(s) finished more than %s days ago", deleted, older_than_days)
    return deleted


async def prune_forever(pool: asyncpg.Pool, settings: Settings, interval_s: float = INTERVAL_S) -> None:
    """:func:`prune` with ``retention_days`` now and every ``interval_s`` until cancelled."""
    while True:
        try:
            if settings.retention_days is not None:
                await prune(pool, settings.retention_days)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next run tries again
            if database_unreachable(exc):
                faults.report("retention", "database unavailable; pruning later", exc)
            else:
                logger.exception("retention: pruning failed; retried in %s s", interval_s)
        await asyncio.sleep(interval_s)
