"""An admission whose commit lost its answer: reconciled, never retried blindly (issue 37).

Every statement or transaction that counts a request also writes its ``admissions`` row
under a key chosen before it was sent (:mod:`app.db.commits`). When the connection
breaks after an admission attempt sent anything (a failover, the primary killed, a
statement that may commit past its timeout), the outcome is unknown: :func:`reconciled`
fences the key on whatever primary answers within ``TASKGATE_DATABASE_RECONCILE_S``.

- Landed: the request is served as admitted (the task, its hold and budget windows read
  back), never counted again.
- Not landed (the key is void now: nothing under it can land any more): :class:`Void`;
  admission runs again under a new key (at most :data:`VOID_ATTEMPTS` times, then 503).
- No primary in time: 503, and the key is reconciled in the background
  (:data:`app.db.commits.orphans`); a landed admission's hold is then released (counted,
  not served; nothing is refunded).
"""

from __future__ import annotations

import logging
import uuid
from decimal import Decimal

import asyncpg

from app.admission import reservations
from app.admission.charge import Charge
from app.admission.outcomes import Admission
from app.db import commits, sql
from app.db.errors import database_unreachable
from app.guard.policy import Policy
from app.settings import Settings
from app.task import Task

logger = logging.getLogger(__name__)

#: Attempts of one request whose keys turned out void before it is refused (503).
VOID_ATTEMPTS = 3
_READ_TASK = sql.statement("task_by_id")
#: A reconciled admission's hold.
_HOLD_OF = sql.statement("hold_of_admission_amount")

class Void(Exception):
    """The attempt's outcome was unknown and its key turned out void (nothing landed):
    admit again under a new key."""


async def reconciled(pool: asyncpg.Pool, key: uuid.UUID, settings: Settings, charge: Charge | None) -> Admission:
    """The attempt under ``key`` lost its connection after sending: fence the key
    (:func:`app.db.commits.reconcile`) and read back what landed: the task now, its hold
    and the budget windows it was counted in (no loop-guard verdict: the request is served
    as the admission counted it; ``charge`` bounds its output as admission would). Raises :class:`Void` when nothing
    landed, the last unreachable error when no primary answered within
    ``database_reconcile_s`` (the key is then reconciled in the background)."""
    async def read(conn: asyncpg.Connection, row: asyncpg.Record) -> tuple[Task, asyncpg.Record | None,
                                                                            asyncpg.Record]:
        task_row = await conn.fetchrow(_READ_TASK, row["task_id"])
        return Task.from_row(task_row), await conn.fetchrow(_HOLD_OF, key), row

    try:
        found = await commits.reconcile(pool, key, settings.database_reconcile_s, read)
    except Exception as exc:
        if database_unreachable(exc):
            commits.orphans.submit(pool, key, settings.accounting_retry_s, _release_unserved)
        raise
    if found is None:
        logger.warning("admission %s: its commit's answer was lost; it had not landed, admitting again", key)
        raise Void()
    task, hold, row = found
    logger.warning("admission %s of task %s: its commit's answer was lost; it had landed, serving it", key,
                   task.id)
    reservation = hold["amount_usd"] if hold is not None else Decimal(0)
    return Admission(task, Policy(task, settings), None, reservation,
                    charge.added_output_max(task, bool(reservation) or None) if charge is not None else None,
                    hold["id"] if hold is not None else None,
                    tuple(zip(row["budget_ids"] or (), row["window_starts"] or ())), key)


async def _release_unserved(conn: asyncpg.Connection, row: asyncpg.Record) -> None:
    """An admission that landed although its request was refused (503): release its
    hold, as the sweep would once its owner is gone."""
    await reservations.release_admission(conn, row["key"], "admitted_unserved")
