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

**Ledger compaction** (:func:`compact`, in the same job): an active task's ledger
(``tool_calls`` rows, ~750 B each) would grow as long as the task runs. The detector
only ever reads a conversation's newest :func:`app.guard.detector.window_size` rows
(pending included), so rows further back are deleted: per conversation the newest
``max(window_size(thresholds in force), TASKGATE_LEDGER_KEEP_PER_CONVERSATION)`` rows
stay, and of the older ones only completed rows completed more than
``TASKGATE_LEDGER_COMPACT_AFTER_S`` ago go (a pending call still awaits its result; a
call the agent may still resend in its trailing turn must not be counted again). Each
task is compacted under its row lock taken with ``FOR NO KEY UPDATE SKIP LOCKED``: a
task being admitted is skipped until the next run, and no admission can read its
history half-compacted. The counts stay: ``tasks.tool_calls`` and each conversation's
``tool_calls`` are counters of their own, not row counts.
"""

from __future__ import annotations

import logging

import asyncpg

from app.db import sql
from app.guard.detector import window_size
from app.guard.policy import Policy
from app.settings import Settings
from app.task import Task

logger = logging.getLogger(__name__)

#: Tasks deleted per transaction.
BATCH = 100
#: Ledger rows deleted per transaction, and tasks looked at per candidate query.
COMPACT_BATCH = 1000

_PRUNE = sql.statement("retention_prune")


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


# A task with fewer calls than the floor cannot have a conversation past it (every ledger
# row was counted in tasks.tool_calls when it was inserted).
_COMPACT_CANDIDATES = sql.statement("retention_compact_candidates")
_LOCK_FOR_COMPACTION = sql.statement("retention_lock_for_compaction")
_COMPACT = sql.statement("retention_compact")


def rows_kept(task: Task, settings: Settings) -> int:
    """Ledger rows kept per conversation of ``task``: the detector's window for its
    thresholds in force, at least ``ledger_keep_per_conversation``."""
    return max(window_size(Policy(task, settings).thresholds), settings.ledger_keep_per_conversation)


async def compact_task(pool: asyncpg.Pool, task_id: str, settings: Settings) -> int | None:
    """Compact one active task's ledger (module docstring), :data:`COMPACT_BATCH` rows
    per transaction; returns the rows deleted, ``None`` when the task was locked (being
    admitted: skipped) or is no longer active."""
    deleted = 0
    while True:
        async with pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(_LOCK_FOR_COMPACTION, task_id)
            if row is None:
                return deleted or None
            keep = rows_kept(Task.from_row(row), settings)
            status = await conn.execute(_COMPACT, task_id, keep, settings.ledger_compact_after_s, COMPACT_BATCH)
        done = int(status.split()[-1])
        deleted += done
        if done < COMPACT_BATCH:
            return deleted


async def compact(pool: asyncpg.Pool, settings: Settings) -> int:
    """Compact the ledgers of all active tasks; returns the rows deleted. Off when
    ``ledger_keep_per_conversation`` is 0."""
    if settings.ledger_keep_per_conversation <= 0:
        return 0
    deleted, after = 0, ""
    while True:
        async with pool.acquire() as conn:
            ids = [r["id"] for r in await conn.fetch(_COMPACT_CANDIDATES, settings.ledger_keep_per_conversation,
                                                      after, COMPACT_BATCH)]
        for task_id in ids:
            deleted += await compact_task(pool, task_id, settings) or 0
        if len(ids) < COMPACT_BATCH:
            break
        after = ids[-1]
    if deleted:
        logger.info("retention: compacted %d ledger row(s) of active tasks", deleted)
    return deleted


async def run(pool: asyncpg.Pool, settings: Settings) -> None:
    """One run of the job: :func:`prune` with ``retention_days`` (when set), then
    :func:`compact`."""
    if settings.retention_days is not None:
        await prune(pool, settings.retention_days)
    await compact(pool, settings)
