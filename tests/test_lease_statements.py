"""The escrow leases' statements on real PostgreSQL: an admission spends the leases of
its chain root first, so it cannot close a circle with a take that reclaims the chain's
windows root first (the circle PostgreSQL breaks with ``deadlock detected``, which the
client saw as a 500); the budgeted fast path finds its task by its unique key, never by
scanning the budget's tasks."""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime, timezone

import asyncpg
import pytest

from app.budgets import escrow, fast_path
from app.db.commits import new_key

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the lifetime window's start
HOLDER = "test:1:lockorder:0"


async def _chain(pool: asyncpg.Pool) -> tuple[list[dict], str]:
    """A team and a project whose ids sort the other way round (the project first), each
    window fully leased: the holder's leases unspent, another holder's spent. A task in
    the project; its id."""
    tag = secrets.token_hex(4)
    team, project, task_id = f"z-team-{tag}", f"a-project-{tag}", f"lockorder-{tag}"
    await pool.execute("INSERT INTO budgets (id, request_limit) VALUES ($1, 4)", team)
    await pool.execute("INSERT INTO budgets (id, parent_id, depth, request_limit) VALUES ($1, $2, 2, 4)",
                       project, team)
    for budget in (team, project):
        await pool.execute("INSERT INTO budget_windows (budget_id, window_start, leased_requests)"
                           " VALUES ($1, $2, 4)", budget, EPOCH)
        for holder, spent in ((HOLDER, 0), ("test:2:other:0", 2)):
            await pool.execute("INSERT INTO budget_leases (holder, budget_id, window_start, granted, spent,"
                               " request_limit, expires_at) VALUES ($1, $2, $3, 2, $4, 4, now() + interval '1 hour')",
                               holder, budget, EPOCH, spent)
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, budget_id) VALUES ($1, $1, 100, $2)",
                       task_id, project)
    budgets = [dict(r) for r in await pool.fetch(escrow.CHAIN, project)]
    return budgets, task_id


async def _waiting_on_a_lock(pool: asyncpg.Pool, pid: int) -> None:
    for _ in range(500):
        if await pool.fetchval("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the admission never waited for the take's lease lock")


@pytest.mark.parametrize("statement", ["fast", "first sight", "locked"])
async def test_an_admission_waits_for_a_reclaiming_take_without_a_deadlock(pool, statement) -> None:
    budgets, task_id = await _chain(pool)
    now = datetime.now(timezone.utc)
    async with pool.acquire() as taker, pool.acquire() as admitter:
        async with taker.transaction():
            keys, rows = await escrow.lock_windows(taker, budgets, now)
            # the take has reclaimed the root's window (it holds the holder's root lease) ...
            await taker.execute("SELECT 1 FROM budget_leases WHERE holder = $1 AND budget_id = $2 FOR UPDATE",
                                HOLDER, budgets[0]["id"])
            if statement == "locked":
                admission = asyncio.ensure_future(_spend_locked(admitter, budgets, task_id, now))
            else:
                if statement == "fast":  # (a new task: "first sight" reads its chain in the statement)
                    escrow.remember(task_id, [b["id"] for b in budgets])
                admission = asyncio.ensure_future(fast_path.fast_admit(admitter, HOLDER, now, task_id, task_id,
                                                                       new_key(), None))
            await _waiting_on_a_lock(pool, admitter.get_server_pid())
            # ... and now reclaims the project's window too, while the admission waits
            await escrow.decide(taker, budgets, keys, rows, 0)
        result = await admission
    assert result is None or result is False  # the reclaimed leases cannot pay: the locked path decides
    assert await pool.fetchval("SELECT admitted_requests FROM tasks WHERE id = $1", task_id) == 0


async def _spend_locked(conn: asyncpg.Connection, budgets: list[dict], task_id: str, now: datetime) -> bool:
    try:
        async with conn.transaction():
            await escrow.spend(conn, HOLDER, task_id, budgets, now)
    except escrow.NeedsLease:
        return False
    return True


async def test_the_budgeted_fast_path_finds_the_task_by_its_token_not_its_budget(pool) -> None:
    budgets, task_id = await _chain(pool)
    project = budgets[-1]["id"]
    await pool.executemany("INSERT INTO tasks (id, token_hash, request_limit, budget_id) VALUES ($1, $1, 100, $2)",
                           [(f"{task_id}-{i}", project) for i in range(200)])
    chain = [b["id"] for b in budgets]
    async with pool.acquire() as conn, conn.transaction():
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN " + escrow.FAST_BY_TOKEN, task_id, HOLDER, datetime.now(timezone.utc), project, chain,
            new_key(), None))
    assert "tasks_token_hash_key" in plan and "ix_tasks_budget_id" not in plan, plan


@pytest.mark.parametrize("statement", ["fast", "first sight"])
async def test_a_token_limited_budget_pays_on_the_fast_path_while_its_window_is_under_the_limit(pool, statement):
    budgets, task_id = await _chain(pool)
    team = budgets[0]["id"]
    await pool.execute("UPDATE budgets SET token_limit = 1000 WHERE id = $1", team)
    chain = [b["id"] for b in budgets]

    async def admit() -> object:
        now = datetime.now(timezone.utc)
        args = (escrow.FAST_BY_ID, task_id, HOLDER, now, chain[-1], chain, new_key(), None) if statement == "fast" \
            else (escrow.FIRST_BY_ID, task_id, HOLDER, now, new_key(), None)
        try:
            return await pool.fetchrow(*args)
        except asyncpg.RaiseError:  # taskgate_abort: a lease could not pay, nothing was written
            return None

    assert await admit() is not None  # under the limit: one statement, the lease paid
    await pool.execute("UPDATE budget_windows SET input_tokens = 600, output_tokens = 400 WHERE budget_id = $1", team)
    assert await admit() is None  # at the limit: nothing written, the locked path refuses
    assert await pool.fetchval("SELECT admitted_requests FROM tasks WHERE id = $1", task_id) == 1
    assert await pool.fetchval("SELECT sum(spent) FROM budget_leases WHERE holder = $1 AND budget_id = ANY($2)",
                               HOLDER, chain) == 2


@pytest.mark.parametrize("change", ["request limit changed", "dollar ceiling added", "token limit reached",
                                    "parent differs", "lease expired"])
async def test_the_one_budget_fast_statement_pays_only_with_a_lease_that_still_holds(pool, change) -> None:
    budgets, task_id = await _chain(pool)
    team = budgets[0]["id"]
    await pool.execute("UPDATE tasks SET budget_id = $1 WHERE id = $2", team, task_id)

    async def admit() -> object:
        try:
            return await pool.fetchrow(escrow.FAST_ONE_BY_ID, task_id, HOLDER, datetime.now(timezone.utc), team,
                                       [team], new_key(), None)
        except asyncpg.RaiseError:  # taskgate_abort: the lease could not pay, nothing was written
            return None

    assert await admit() is not None  # the lease holds: one statement paid
    await pool.execute({
        "request limit changed": "UPDATE budgets SET request_limit = 5 WHERE id = $1",
        "dollar ceiling added": "UPDATE budgets SET cost_limit_usd = 1 WHERE id = $1",
        "token limit reached": "UPDATE budgets SET token_limit = 0 WHERE id = $1",
        "parent differs": "UPDATE budgets SET parent_id = id WHERE id = $1",
        "lease expired": "UPDATE budget_leases SET expires_at = now() WHERE budget_id = $1",
    }[change], team)
    assert await admit() is None
    assert await pool.fetchval("SELECT admitted_requests FROM tasks WHERE id = $1", task_id) == 1
    assert await pool.fetchval("SELECT spent FROM budget_leases WHERE holder = $1 AND budget_id = $2",
                               HOLDER, team) == 1
