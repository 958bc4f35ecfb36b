"""One admission rule (issue 35 item 2): the SQL functions decide, Python explains.

Over a grid of task states written to real PostgreSQL, ``taskgate_admissible(t, dollars)``
admits exactly where :func:`app.admission.limits.limit_breach` names no limit (on an active
task, at the database's clock), and ``taskgate_one_statement(t)`` is what
:func:`app.admission.turn.eligible` predicts; :data:`app.admission.limits.ADMISSIBLE` is
their conjunction on the row it counts (their own text: :func:`app.db.sql.expression`).
The locked path's lock statement returns the rule without dollars and the dollar ceiling
(:func:`app.admission.ceiling.decide`) supplies the dollar clause: together the function
with the dollars. Through :func:`app.admission.admission.admit`, the locked path admits
where the rule does and refuses with the limit :func:`limit_breach` names, latched."""

from __future__ import annotations

import itertools
import json
import secrets
from datetime import timedelta
from decimal import Decimal

import pytest

from app.admission import ceiling
from app.admission.admission import admit
from app.admission.charge import charge_for
from app.admission.limits import ADMISSIBLE, limit_breach
from app.admission.turn import eligible
from app.config.prices import default_price
from app.config.routing import Route
from app.config.schema import Provider
from app.db import sql
from app.errors import GatewayError
from app.settings import Settings
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
                locked = await conn.fetchrow(LOCK, task_id)  # the locked path's lock: the rule without dollars
                for reservation in RESERVATION:
                    rule = await conn.fetchval("SELECT taskgate_admissible(t, $2) FROM tasks t WHERE id = $1",
                                               task_id, reservation)
                    breach = limit_breach(task, now, reservation)
                    assert rule == (task.active and breach is None), (state, reservation, breach)
                    if reservation is not None:  # the locked path: the lock's verdict and the dollar ceiling
                        dollars = ceiling.task_decision(task, reservation)
                        assert rule == (locked["admissible"] and dollars is not ceiling.Decision.LATCH), state
                    else:
                        assert rule == locked["admissible"], state
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


LOCK = sql.statement("admission_lock_by_id")
LOCKED_PATH = {"conversation_request_limit": 100}  # a task only the locked path decides
LOCKED_CASES = (  # (requests, tokens, duration, dollars) -> the limit it refuses with, or None: admitted
    ((REQUESTS[1], TOKENS[0], DURATION[0], DOLLARS[0]), None),
    ((REQUESTS[2], TOKENS[0], DURATION[0], DOLLARS[0]), "request_limit"),
    ((REQUESTS[1], TOKENS[1], DURATION[1], DOLLARS[0]), None),
    ((REQUESTS[0], TOKENS[2], DURATION[0], DOLLARS[0]), "token_limit"),
    ((REQUESTS[0], TOKENS[0], DURATION[2], DOLLARS[0]), "max_duration"),
    ((REQUESTS[3], TOKENS[3], DURATION[2], DOLLARS[0]), "request_limit"),  # the first limit limit_breach names
)


@pytest.mark.parametrize("state, refused", LOCKED_CASES)
async def test_the_locked_path_admits_by_the_rule_and_names_its_limit(pool, database_url, state, refused):
    """Through :func:`admit` on the locked path: admitted (counted) where the rule admits,
    else refused ``task_stopped`` with the limit :func:`limit_breach` names, latched with its
    numbers, the request not counted."""
    async with pool.acquire() as conn:
        task_id = await _insert(conn, await conn.fetchval("SELECT now()"), "active", *state, LOCKED_PATH)
    settings = Settings(database_url=database_url)
    try:
        admitted = await admit(pool, task_id, settings, conversation_key="rule")
    except GatewayError as err:
        assert (err.status, err.type, err.code) == (400, "task_stopped", refused), err.message
    else:
        assert refused is None
        assert admitted.task.admitted_requests == state[0][0] + 1
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM tasks WHERE id = $1", task_id)
    assert row["admitted_requests"] == state[0][0] + (refused is None)
    assert row["stop_reason"] == refused
    if refused is not None:
        detail = json.loads(row["stop_detail"]) if isinstance(row["stop_detail"], str) else row["stop_detail"]
        limit = {"request_limit": "request_limit", "token_limit": "token_limit", "max_duration": "max_duration_s"}
        assert detail[limit[refused]] is not None


def _priced() -> Route:
    provider = Provider(kind="openai", base_url="http://127.0.0.1:9/v1")
    return Route("main", provider, "gpt-4.1-mini", "gpt-4.1-mini", default_price("gpt-4.1-mini"), 32_768)


@pytest.mark.parametrize("cost, refused", (("0.50", None), ("0.9999", "cost_limit")))
async def test_the_locked_path_decides_the_dollars_with_the_rule(pool, database_url, cost, refused):
    """A task with a dollar ceiling: admitted with its worst case reserved while settled dollars +
    that worst case stay within the ceiling (the count statement asks the rule with them), else
    latched ``cost_limit`` with the dollars in its detail."""
    async with pool.acquire() as conn:
        task_id = await _insert(conn, await conn.fetchval("SELECT now()"), "active", REQUESTS[0], TOKENS[0],
                                DURATION[0], ("1.00", cost))
    payload = {"model": "gpt-4.1-mini", "max_completion_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}
    charge = charge_for(_priced(), json.dumps(payload).encode(), payload, path="/v1/chat/completions")
    settings = Settings(database_url=database_url)
    try:
        admitted = await admit(pool, task_id, settings, charge=charge, conversation_key="rule")
    except GatewayError as err:
        assert (err.status, err.code) == (400, refused), err.message
    else:
        assert refused is None and admitted.reservation_usd > 0
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM tasks WHERE id = $1", task_id)
    assert row["stop_reason"] == refused
    assert row["admitted_requests"] == (refused is None)
    assert row["reserved_usd"] == (admitted.reservation_usd if refused is None else 0)
