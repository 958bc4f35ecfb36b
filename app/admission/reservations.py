"""Dollar holds as rows: every reservation carries its request's deadline and its owner,
so a hold stranded by a killed gateway is released instead of kept forever.

``tasks.reserved_usd`` is the sum admission checks against the ceiling. Each admitted
request that reserves dollars also gets a ``reservations`` row (:func:`hold`, in the
admission transaction): the amount, the deadline (now + the longest the request may
run: its upstream timeout plus the stream close grace, :func:`deadline_s`) and the
owning process (host name, pid, the process's start time). Settlement deletes the row
in the statement that settles it (:data:`app.settlement.response._ADD_USAGE`), and releases
the amount only if the row was still there, so nothing is released twice.

:func:`sweep` runs in every gateway process every ``TASKGATE_RESERVATION_SWEEP_S``
(default 30 s): a hold past its deadline whose owner is *gone* is deleted, its amount
taken off ``reserved_usd`` (and off the budget windows it also reserved in, unless its
settlement released those already: :func:`app.settlement.exchange.settle_windows`) and a
``reservation_released`` event recorded, all in one statement (two sweepers never
release one hold twice: the delete decides). An owner is gone when it ran on this host
and no process with that pid and start time exists (:func:`owner_gone`); holds owned
on another host are left to that host's gateways (or to the admin action). The
released dollars are not charged: what the dead request cost upstream is unknown.
:func:`release_task` (``POST /admin/tasks/{id}/release-reservations``, ``taskgate tasks
release``) releases a task's holds past their deadline whatever their owner, and those
of gone owners at once.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache

import asyncpg
import psutil

from app.db import sql
from app.guard.policy import Policy

logger = logging.getLogger(__name__)

#: Overdue holds examined per sweep (the rest wait for the next one).
SWEEP_BATCH = 500
#: Seconds within which a recorded process start time matches (psutil's resolution).
START_TIME_TOLERANCE_S = 1.0

# The statements: app/db/sql/admission.sql. Before releasing, the rows it updates are
# locked in the order every admission locks them (its task row, then its budget windows
# root first), so a release never waits on an admission that waits on it.
_HOLD = sql.statement("hold_take")
_OF_ADMISSION = sql.statement("holds_of_admission")
_OVERDUE = sql.statement("holds_overdue")
_LOCK_TASKS = sql.statement("holds_lock_tasks")
_LOCK_WINDOWS = sql.statement("holds_lock_windows")
_RELEASE = sql.statement("holds_release")


@dataclass(frozen=True, slots=True)
class Owner:
    """A gateway process: host name, pid, start time (Unix seconds)."""

    host: str
    pid: int
    started_at: float


@dataclass(frozen=True, slots=True)
class Released:
    """What one sweep or admin action released: holds and dollars, over all tasks."""

    reservations: int = 0
    usd: Decimal = Decimal(0)


@lru_cache(maxsize=1)
def _this_process(pid: int) -> Owner:
    return Owner(socket.gethostname(), pid, psutil.Process(pid).create_time())


def this_process() -> Owner:
    """This process as an owner (recomputed after a fork: the pid is the cache key)."""
    return _this_process(os.getpid())


def started_at(pid: int) -> float | None:
    """The start time of process ``pid`` on this host, ``None`` when there is none."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


def owner_gone(owner: Owner, here: str, started: Callable[[int], float | None]) -> bool:
    """Whether ``owner`` certainly no longer runs: it ran on host ``here`` and the pid is
    free or taken by a later process (``started``: pid → start time, or ``None``). An
    owner on another host is never known to be gone."""
    if owner.host != here:
        return False
    now_started = started(owner.pid)
    return now_started is None or abs(now_started - owner.started_at) > START_TIME_TOLERANCE_S


def deadline_s(policy: Policy) -> float:
    """Seconds from admission after which a request under ``policy`` can no longer be
    running in a live gateway: its upstream timeout plus the stream close grace."""
    return policy.upstream_timeout_s + policy.settings.stream_close_grace_s


async def hold(conn: asyncpg.Connection, task_id: str, amount_usd: Decimal, seconds: float,
               budget_windows: Sequence[tuple[str, datetime]] = (), admission_key: uuid.UUID | None = None) -> int:
    """Record one hold (inside the admission transaction); returns its id.
    ``budget_windows`` are the ``(budget_id, window_start)`` windows it also reserved in;
    ``admission_key`` the admission's key (:mod:`app.db.commits`)."""
    me = this_process()
    hold_id: int = await conn.fetchval(_HOLD, task_id, amount_usd, seconds, me.host, me.pid, me.started_at,
                               [b for b, _ in budget_windows], [w for _, w in budget_windows], admission_key)
    return hold_id


def releasable(rows: Sequence[asyncpg.Record], here: str, started: Callable[[int], float | None],
               by_hand: bool) -> list[int]:
    """Ids of the holds to release among ``rows`` (``_OVERDUE``): overdue with a gone
    owner; by hand also every overdue one and those of gone owners before their deadline."""
    out = []
    for row in rows:
        gone = owner_gone(Owner(row["owner_host"], row["owner_pid"], row["owner_started_at"]), here, started)
        if (row["overdue"] and (gone or by_hand)) or (by_hand and gone):
            out.append(row["id"])
    return out


async def _release_ids(conn: asyncpg.Connection, ids: list[int], reason: str) -> list[asyncpg.Record]:
    async with conn.transaction():  # the admission's lock order: tasks, then windows root first
        await conn.execute(_LOCK_TASKS, ids)
        await conn.execute(_LOCK_WINDOWS, ids)
        done: list[asyncpg.Record] = await conn.fetch(_RELEASE, ids, reason)
    return done


async def release_admission(conn: asyncpg.Connection, admission_key: uuid.UUID, reason: str) -> Released:
    """Release the holds of one admission whose request was never served (refused while
    its commit's outcome was unknown: :mod:`app.db.commits`), as the sweep releases a
    gone owner's: amounts off ``reserved_usd`` and its budget windows, a
    ``reservation_released`` event with ``reason``."""
    ids = [r["id"] for r in await conn.fetch(_OF_ADMISSION, admission_key)]
    done = await _release_ids(conn, ids, reason) if ids else []
    return Released(sum(r["n"] for r in done), sum((r["usd"] for r in done), Decimal(0)))


async def _release(pool: asyncpg.Pool, task_id: str | None, reason: str) -> Released:
    async with pool.acquire() as conn:
        rows = await conn.fetch(_OVERDUE, SWEEP_BATCH, task_id)
        ids = releasable(rows, this_process().host, started_at, by_hand=task_id is not None)
        if not ids:
            return Released()
        done = await _release_ids(conn, ids, reason)
    released = Released(sum(r["n"] for r in done), sum((r["usd"] for r in done), Decimal(0)))
    for r in done:
        logger.warning("released %d stranded reservation(s) of task %s ($%s): %s",
                       r["n"], r["task_id"], r["usd"], reason)
    return released


async def sweep(pool: asyncpg.Pool) -> Released:
    """Release holds past their deadline whose owner is gone (one batch)."""
    return await _release(pool, None, "owner_gone")


async def release_task(pool: asyncpg.Pool, task_id: str) -> Released:
    """Release ``task_id``'s holds past their deadline, and those of gone owners."""
    return await _release(pool, task_id, "released_by_admin")

