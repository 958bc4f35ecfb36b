"""Budget settlement on real PostgreSQL: usage settles into every window of the chain;
without a dollar hold to release it commits without waiting for the disk (the window
row every response of a fleet updates is not held for a flush per response), a
released hold commits durably. A request admitted in one window with no hold (the
escrow lease path) settles in the statement that records the response on the task,
whichever of its three statements records it."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from app import events
from app.admission.cost import Settlement
from app.settings import Settings
from app.settlement.exchange import settle_windows
from app.settlement.response import record_response
from app.wire.base import ResponseSummary, ToolCall, Usage

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the lifetime window's start


async def _window(pool, reserved_usd: str = "0") -> str:
    budget = f"settle-{secrets.token_hex(4)}"
    await pool.execute("INSERT INTO budgets (id, request_limit) VALUES ($1, 100)", budget)
    await pool.execute("INSERT INTO budget_windows (budget_id, window_start, reserved_usd) VALUES ($1, $2, $3)",
                       budget, EPOCH, Decimal(reserved_usd))
    return budget


async def _settle_and_commit_mode(pool, budget: str, release: str, reservation_id: int | None) -> str:
    async with pool.acquire() as conn, conn.transaction():
        spent = await settle_windows(conn, [(budget, EPOCH)], 10, 5, Decimal("0.25"), Decimal(release), reservation_id)
        assert [b for b, _ in spent] == [budget]
        return await conn.fetchval("SELECT current_setting('synchronous_commit')")


async def test_usage_without_a_hold_settles_relaxed(pool) -> None:
    budget = await _window(pool)
    assert await _settle_and_commit_mode(pool, budget, "0", None) == "off"
    row = await pool.fetchrow("SELECT input_tokens, output_tokens, cost_usd FROM budget_windows WHERE budget_id = $1",
                              budget)
    assert tuple(row) == (10, 5, Decimal("0.25"))


async def test_a_released_hold_settles_durably_and_once(pool) -> None:
    budget = await _window(pool, reserved_usd="1.00")
    task_id = f"settle-task-{secrets.token_hex(4)}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $1, 10)", task_id)
    hold = await pool.fetchval(
        "INSERT INTO reservations (task_id, amount_usd, deadline_at, owner_host, owner_pid, owner_started_at,"
        " budget_ids, budget_window_starts) VALUES ($1, 1.00, now() + interval '1 hour', 'test', 1, 0, $2, $3)"
        " RETURNING id", task_id, [budget], [EPOCH])
    assert await _settle_and_commit_mode(pool, budget, "1.00", hold) == "on"
    assert await _settle_and_commit_mode(pool, budget, "1.00", hold) == "off"  # released once: usage only now
    row = await pool.fetchrow("SELECT reserved_usd, cost_usd FROM budget_windows WHERE budget_id = $1", budget)
    assert tuple(row) == (Decimal(0), Decimal("0.50"))


RESPONSES = {
    "usage only": ResponseSummary(usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True),
    "text answer": ResponseSummary(usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True,
                                   text_sha256="a" * 64),
    "tool calls": ResponseSummary(tool_calls=[ToolCall("call_settle_1", "read_file", {"path": "a.py"})],
                                  usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True),
}


@pytest.mark.parametrize("kind", list(RESPONSES))
async def test_a_lease_paid_response_settles_its_window_with_the_task(pool, database_url, kind) -> None:
    budget = await _window(pool)
    task_id = f"settle-task-{secrets.token_hex(4)}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, budget_id) VALUES ($1, $1, 10, $2)",
                       task_id, budget)
    reported: list[events.BudgetSpent] = []
    events.BUDGET_SPENT.subscribe(reported.append)
    try:
        await record_response(pool, task_id, "s:settle", RESPONSES[kind],
                              Settings(database_url=database_url, _env_file=None),  # type: ignore[call-arg]
                              Settlement(Decimal("0.25"), Decimal(0)), budget_window=(budget, EPOCH))
    finally:
        events.BUDGET_SPENT.unsubscribe(reported.append)
    window = await pool.fetchrow("SELECT input_tokens, output_tokens, cost_usd FROM budget_windows"
                                 " WHERE budget_id = $1", budget)
    task = await pool.fetchrow("SELECT input_tokens, output_tokens, cost_usd FROM tasks WHERE id = $1", task_id)
    assert tuple(window) == tuple(task) == (10, 5, Decimal("0.25"))
    assert [(e.budget_id, e.cost_usd) for e in reported] == [(budget, Decimal("0.25"))]
