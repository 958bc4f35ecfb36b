"""One admission rule (issue 35 item 2): the SQL functions decide, Python explains.

Over a grid of task states written to real PostgreSQL, ``taskgate_admissible(t, dollars)``
admits exactly where :func:`app.admission.limits.limit_breach` names no limit (on an active
task, at the database's clock), and ``taskgate_one_statement(t)`` is what
:func:`app.admission.turn.eligible` predicts; :data:`app.admission.limits.ADMISSIBLE` is
their conjunction on the row it counts (their own text: :func:`app.db.sql.expression`)."""

from __future__ import annotations

import itertools
import json
import secrets
from datetime import timedelta
from decimal import Decimal

from app.admission.limits import ADMISSIBLE, limit_breach
from app.admission.turn import eligible
from app.task import Task

STATUS = ("active", "stopped")
REQUESTS = ((0, 10), (9, 10), (10, 10), (0, 0))  # (admitted_requests, request_limit)
TOKENS = ((None, 0, 0), (100, 60, 39), (100, 60, 40), (100, 0, 101))  # (token_limit, input, output)
DURATION = ((None, None), (60.0, 30), (60.0, 61), (0.001, None))  # (max_duration_s, seconds since first)
DOLLARS = ((None, "0"), ("1.00", "0.40"), ("1.00", "1.00"))  # (cost_limit_usd, cost_usd)
RESERVATION = (None, Decimal(0), Decimal("0.60"), Decimal("0.61"))
PATH = ({}, {"allowed_models": ["gpt-*"]}, {"conversation_request_limit": 5},
        {"conversation_max_duration_s": 60.0}, {"cost_limit_usd": "2.00"})


async def _insert(conn, now, status, requests, tokens, duration, dollars, path=None) -> str:  # type: ignore[no-untyped-def]
    task_id = "rule-" + secrets.token_hex(6)
    (admitted, limit), (token_limit, input_tokens, output_tokens) = requests, tokens
    max_duration_s, since = duration
    cost_limit, cost = dollars
    path = path or {}
    models = path.get("allowed_models")
    await conn.execute(
        "INSERT INTO tasks (id, token_hash, status, admitted_requests, request_limit, token_limit, input_tokens,"
        " output_tokens, max_duration_s, first_admitted_at, cost_limit_usd, cost_usd, allowed_models,"
        " conversation_request_limit, conversation_max_duration_s)"
        " VALUES ($1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14)",
        task_id, status, admitted, limit, token_limit, input_tokens, output_tokens, max_duration_s,
        None if since is None else now - timedelta(seconds=since),
        None if path.get("cost_limit_usd", cost_limit) is None else Decimal(path.get("cost_limit_usd", cost_limit)),
        Decimal(cost), None if models is None else json.dumps(models),
        path.get("conversation_request_limit"), path.get("conversation_max_duration_s"))
    return task_id


async def test_taskgate_admissible_admits_where_limit_breach_names_no_limit(pool):
    async with pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            now = await conn.fetchval("SELECT now()")  # the transaction's clock, as the function reads it
            cases = 0
            for state in itertools.product(STATUS, REQUESTS, TOKENS, DURATION, DOLLARS):
                task_id = await _insert(conn, now, *state)
                task = Task.from_row(await conn.fetchrow("SELECT * FROM tasks WHERE id = $1", task_id))
                for reservation in RESERVATION:
                    sql = await conn.fetchval("SELECT taskgate_admissible(t, $2) FROM tasks t WHERE id = $1",
                                              task_id, reservation)
                    breach = limit_breach(task, now, reservation)
                    assert sql == (task.active and breach is None), (state, reservation, breach)
                    cases += 1
        finally:
            await tr.rollback()
    assert cases == 2 * 4 * 4 * 4 * 3 * 4


async def test_the_one_statement_paths_ask_the_same_rule(pool):
    """``ADMISSIBLE`` (the fast path's and the lease paths' ``WHERE``: the functions' text) is the rule on a task
    a one-statement path may decide; :func:`eligible` predicts the path (budget aside)."""
    async with pool.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            now = await conn.fetchval("SELECT now()")
            for status, requests, path in itertools.product(STATUS, REQUESTS[1:3], PATH):
                task_id = await _insert(conn, now, status, requests, TOKENS[0], DURATION[0], DOLLARS[0], path)
                row = await conn.fetchrow(
                    f"SELECT tasks.*, taskgate_one_statement(tasks) AS one, {ADMISSIBLE} AS fast,"
                    " taskgate_admissible(tasks) AND taskgate_one_statement(tasks) AS called"
                    " FROM tasks WHERE id = $1", task_id)
                task = Task.from_row(row)
                assert row["fast"] == row["called"]  # the functions' text is the functions
                assert eligible(task) == (task.active and row["one"]), (status, path)
                assert row["fast"] == (eligible(task) and limit_breach(task, now) is None), (status, requests, path)
        finally:
            await tr.rollback()
