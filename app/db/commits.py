"""Commits whose outcome is unknown: reconciled, never retried blindly (issue 37 §3).

When the connection breaks while a statement that may commit is in flight (the primary
was killed, a failover, PgBouncer restarted, a statement that may commit ran past its
timeout: :class:`app.db.fair_pool.GuardedConnection` closes the connection rather than
cancel a ``COMMIT``), the gateway cannot know whether the commit happened. Retrying
would count the request twice if it did; refusing would leave it counted but unserved
(and its client would retry: twice again).

So every admission carries a key chosen before it is sent (:func:`new_key`, a
time-ordered UUID), written in the statement or transaction that counts the request
(an ``admissions`` row, migration 0015). After a failure, :func:`reconcile` *fences* the
key on whatever primary now answers (:data:`FENCE`): one ``INSERT ... ON CONFLICT DO
UPDATE`` that either finds the admission's row (it landed: serve the request) or inserts
a *void* row under the key (it did not: admit it again under a new key). The void row
also makes the original fail on the primary key should it still be running somewhere
(waiting for a lock behind a connection we closed), so it can never land later. The
fence always writes, so its own commit waits for the synchronous standby
(``synchronous_commit`` at least ``on`` inside it): a node that is about to be rewound
(a demoted primary that came back writable for a moment) never acknowledges it, and
whatever the fence read there is never trusted.

Settlements (a response's usage, dollars and hold release, and its budget windows') run
once per admission: the admission's row is marked settled (``settled_at``) by the same
unit that writes the settlement, so when it is retried after a commit whose answer was
lost, the mark says whether the first one landed (then nothing is written again). The
unit is one autocommit statement for a response settled on its task alone (the ledger's
settlement statements carry the mark first, :mod:`app.settlement.exchange`; a response
with only usage goes in a round with others', :mod:`app.db.settlements`), or, when budget
windows are settled apart, one transaction that :func:`settling` opens with the mark
(:func:`app.db.fair_pool.pinned`).

A request that finds no primary within its reconciliation window
(``TASKGATE_DATABASE_RECONCILE_S``) is refused (503); its key goes to :data:`orphans`,
which fences it in the background once a primary answers and, if the admission had
landed, releases its dollar hold (counted, not served: nothing is refunded).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg

from app.db import sql
from app.db.errors import database_unreachable, server_gone
from app.db.fair_pool import expire_all, pinned
from app.db.retry import delays
from app.fault_log import faults

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Fence one key (``$1``): the admission's row when it landed (``task_id`` set), else a
#: new void row (``task_id`` NULL). Writes either way, durably.
FENCE = sql.statement("commit_fence")
#: Mark one admission (``$1``) settled: ``true`` the first time, ``false`` when an earlier
#: settlement already committed, no row when the admission is not in the log. A
#: settlement still running on another connection holds the row: this waits for it.
SETTLE_ONCE = sql.statement("commit_settle_once")
#: The task row, locked before a settlement's budget windows (admission's lock order).
LOCK_TASK = sql.statement("commit_lock_task")
#: Admission log rows older than ``$1`` seconds, deleted ``$2`` at a time.
PRUNE = sql.statement("commit_prune")
PRUNE_BATCH = 5000


def new_key() -> uuid.UUID:
    """A new admission key: a UUID laid out as version 7 (48 bits of Unix milliseconds,
    then 74 random bits), so keys of one moment sit together in the primary key's index."""
    ms = time.time_ns() // 1_000_000
    raw = bytearray(ms.to_bytes(6, "big") + os.urandom(10))
    raw[6] = 0x70 | (raw[6] & 0x0F)  # version 7
    raw[8] = 0x80 | (raw[8] & 0x3F)  # RFC 4122 variant
    return uuid.UUID(bytes=bytes(raw))


class Unknown(Exception):
    """A statement that may have committed failed without an answer (``__cause__``).
    ``key``: the admission key it carried."""

    def __init__(self, key: uuid.UUID) -> None:
        super().__init__(str(key))
        self.key = key


async def reconcile(pool: asyncpg.Pool, key: uuid.UUID, within_s: float,
                    read: Callable[[asyncpg.Connection, asyncpg.Record], Awaitable[T]]) -> T | None:
    """Fence ``key`` (:data:`FENCE`) on the primary, retrying while the database cannot
    be reached, for up to ``within_s`` seconds. Landed: returns ``read(conn, row)`` (run
    on the fence's connection; ``row`` has ``task_id``, ``request_id``, ``budget_ids``,
    ``window_starts``). Not landed: ``None`` (the key is void: nothing under it can land
    any more). Raises the last "unreachable" error when no primary answered in time
    (the caller refuses with 503 and hands the key to :data:`orphans`); any other error
    propagates."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    for delay in delays(0.05, 1.0):
        try:
            async with pool.acquire() as conn:
                row = await conn.fetchrow(FENCE, key)
                if row["task_id"] is None:
                    return None
                return await read(conn, row)
        except Exception as exc:
            if not database_unreachable(exc):
                raise
            if server_gone(exc):
                expire_all()
            if loop.time() + delay > deadline:
                raise
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # delays() never ends


class Orphans:
    """Keys refused with 503 before their outcome was known; fenced in the background.
    ``landed`` / ``void`` count what they turned out to be."""

    def __init__(self) -> None:
        self.pending: set[asyncio.Task[None]] = set()
        self.landed = 0
        self.void = 0

    def submit(self, pool: asyncpg.Pool, key: uuid.UUID, budget_s: float,
               settle: Callable[[asyncpg.Connection, asyncpg.Record], Awaitable[Any]]) -> None:
        """Fence ``key`` for up to ``budget_s`` seconds; when it landed, ``settle(conn,
        row)`` (release what the unserved request holds)."""
        task = asyncio.get_running_loop().create_task(self._run(pool, key, budget_s, settle))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _run(self, pool: asyncpg.Pool, key: uuid.UUID, budget_s: float,
                   settle: Callable[[asyncpg.Connection, asyncpg.Record], Awaitable[Any]]) -> None:
        async def landed(conn: asyncpg.Connection, row: asyncpg.Record) -> bool:
            await settle(conn, row)
            return True

        try:
            found = await reconcile(pool, key, budget_s, landed)
        except Exception as exc:  # noqa: BLE001
            faults.report("reconciliation", f"gave up reconciling admission {key} after {budget_s:g} s; "
                          "it may be counted without having been served", exc)
            return
        if found:
            self.landed += 1
            logger.warning("admission %s had landed before its request was refused (503): counted, not "
                           "served; its hold (if any) released", key)
        else:
            self.void += 1


#: The process's orphaned admission keys.
orphans = Orphans()


async def prune(pool: asyncpg.Pool, older_than_s: float) -> int:
    """Delete admission log rows older than ``older_than_s`` seconds (batches of
    :data:`PRUNE_BATCH`, until fewer are left); returns how many."""
    total = 0
    while True:
        async with pool.acquire() as conn:
            status = await conn.execute(PRUNE, older_than_s, PRUNE_BATCH)
        deleted = int(status.split()[-1])
        total += deleted
        if deleted < PRUNE_BATCH:
            return total


@asynccontextmanager
async def settling(pool: asyncpg.Pool, admission_key: uuid.UUID | None,
                   lock_task: str | None = None) -> AsyncIterator[bool]:
    """A settlement's unit of work, once per admission: yields ``True`` when the block
    should write (inside one transaction on one connection that every ``pool.acquire()``
    of this task yields meanwhile; it commits when the block ends), ``False`` when an
    earlier settlement of ``admission_key`` already committed (write nothing). Without a
    key, yields ``True`` with no transaction (each statement its own); for an admission
    not in the log (pruned, or admitted before it existed) ``True`` in the unit, unmarked.
    ``lock_task``: lock that task's row first, in the order admission locks (the task, then
    its budget windows), for a unit that settles budget windows before the task.
    Database errors propagate (the caller retries the whole unit)."""
    if admission_key is None:
        yield True
        return
    async with pool.acquire() as conn, conn.transaction():
        if lock_task is not None:
            await conn.execute(LOCK_TASK, lock_task)
        first = await conn.fetchval(SETTLE_ONCE, admission_key)
        if first is False:
            logger.warning("the settlement of admission %s had landed before its commit's answer was lost; "
                           "not written again", admission_key)
            yield False
            return
        with pinned(conn):
            yield True
