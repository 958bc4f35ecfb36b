"""A settlement round whose connection dies mid-statement (the primary killed under it):
every settlement of the round goes to the backlog and lands once (app.db.batch,
app.db.settlements, app.settlement.exchange.retried). Real PostgreSQL: the round's
backend is terminated with pg_terminate_backend while it waits for a task's row lock."""

from __future__ import annotations

import asyncio

import asyncpg

from app.db.retry import backlog
from app.settings import Settings
from app.settlement import exchange
from app.wire.base import ResponseSummary, Usage
from tests import settlement_rows as seed


async def _round_backend(pool: asyncpg.Pool, task_id: str) -> int:
    """The backend running the settlement round that waits for ``task_id``'s row lock."""
    for _ in range(200):
        pid = await pool.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND (query LIKE '%taskgate_settle_batch(%' OR query LIKE '%marked AS (UPDATE admissions%')"
            " AND pid <> pg_backend_pid()"
            " ORDER BY query_start DESC LIMIT 1")
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.02)
    raise AssertionError("the settlement round never waited for the task's lock")


async def test_a_round_killed_mid_statement_leaves_its_settlements_to_the_backlog_and_lands_once(pool, database_url):
    settings = Settings(database_url=database_url, accounting_retry_s=30)
    tasks = [await seed.task(pool, "lr") for _ in range(2)]
    keys = [await seed.admitted(pool, t) for t in tasks]
    recovered, dropped = backlog.recovered, backlog.dropped
    holder = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        lock = holder.transaction()
        await lock.start()
        await holder.execute("SELECT 1 FROM tasks WHERE id = ANY($1) FOR UPDATE", tasks)

        async def one(i: int) -> tuple[bool, object]:
            summary = ResponseSummary(usage=Usage(input_tokens=22 + i, output_tokens=9 + i), terminal_seen=True)
            return await exchange.settle(pool, settings, tasks[i], "c", summary, None, admission_key=keys[i],
                                         model="m", counted=True)

        first = asyncio.create_task(one(0))  # a round alone, waiting for the lock
        pid = await _round_backend(pool, tasks[0])
        second = asyncio.create_task(one(1))  # queued behind it: the next round
        await asyncio.sleep(0.05)
        await holder.fetchval("SELECT pg_terminate_backend($1)", pid)  # the primary dies under the round
        await lock.rollback()
        assert (await first)[0] is True and (await second)[0] is True
        for _ in range(300):
            if not backlog.pending:
                break
            await asyncio.sleep(0.05)
        assert not backlog.pending
    finally:
        await holder.close()
    assert backlog.dropped == dropped
    assert backlog.recovered > recovered  # the killed round's settlement was retried
    for i, task_id in enumerate(tasks):
        row = await pool.fetchrow("SELECT input_tokens, output_tokens FROM tasks WHERE id = $1", task_id)
        assert tuple(row) == (22 + i, 9 + i)  # landed, once
        spend = await pool.fetchval("SELECT sum(requests) FROM spend_daily WHERE task_id = $1", task_id)
        assert spend == 1
    settled = await pool.fetchval("SELECT count(*) FROM admissions WHERE key = ANY($1) AND settled_at IS NOT NULL",
                                  keys)
    assert settled == 2


async def test_a_round_chosen_as_a_deadlock_victim_leaves_its_settlement_to_the_backlog(pool, database_url):
    """Seen in tests/test_failover.py under load: a round of one settlement was the victim of
    a deadlock (40P01, with a multi-row insert that takes task locks in another order); the
    statement was rolled back whole, so resending it is safe, but the error was not
    'unreachable' and the settlement was lost (ERROR 'recording the outcome ... failed').
    Here the other side holds the admission's row and then asks for the task's lock, with
    a longer deadlock_timeout so the round is the one rolled back."""
    settings = Settings(database_url=database_url, accounting_retry_s=30)
    task_id = await seed.task(pool, "lr")
    key = await seed.admitted(pool, task_id)
    recovered, dropped = backlog.recovered, backlog.dropped
    other = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await other.execute("SET deadlock_timeout = '20s'")
        tx = other.transaction()
        await tx.start()
        await other.execute("UPDATE admissions SET settled_at = settled_at WHERE key = $1", key)
        summary = ResponseSummary(usage=Usage(input_tokens=22, output_tokens=9), terminal_seen=True)
        settling = asyncio.create_task(exchange.settle(pool, settings, task_id, "c", summary, None,
                                                       admission_key=key, model="m", counted=True))
        await _round_backend(pool, task_id)  # holds the task's lock, waits for the admission's row
        blocked = asyncio.create_task(other.execute("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE", task_id))
        assert (await settling)[0] is True  # the round is rolled back (40P01) after ~1 s
        await blocked
        await tx.rollback()
        for _ in range(300):
            if not backlog.pending:
                break
            await asyncio.sleep(0.05)
        assert not backlog.pending
    finally:
        await other.close()
    assert backlog.dropped == dropped and backlog.recovered > recovered
    row = await pool.fetchrow("SELECT input_tokens, output_tokens FROM tasks WHERE id = $1", task_id)
    assert tuple(row) == (22, 9)  # landed, once
    assert await pool.fetchval("SELECT settled_at IS NOT NULL FROM admissions WHERE key = $1", key)
