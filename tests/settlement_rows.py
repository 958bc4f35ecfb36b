"""Rows a settlement test starts from, written straight into PostgreSQL: a task, an
admission in the admission log, a dollar hold. Shared by the settlement tests
(``test_settlement_batch``, ``test_settle_in_one_statement``, ``test_settlement_lost_round``)."""

from __future__ import annotations

import uuid
from decimal import Decimal

import asyncpg

from app.db import commits


async def task(pool: asyncpg.Pool, prefix: str, reserved: str = "0") -> str:
    """A new task ``<prefix>-<10 hex>`` of 100 requests with ``reserved`` USD held."""
    task_id = f"{prefix}-{uuid.uuid4().hex[:10]}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, reserved_usd) VALUES ($1, $1, 100, $2)",
                       task_id, Decimal(reserved))
    return task_id


async def admitted(pool: asyncpg.Pool, task_id: str) -> uuid.UUID:
    """The key of a new admission of ``task_id`` in the admission log (not settled)."""
    key = commits.new_key()
    await pool.execute("INSERT INTO admissions (key, task_id) VALUES ($1, $2)", key, task_id)
    return key


async def hold(pool: asyncpg.Pool, task_id: str, usd: str) -> int:
    """The id of a new ``usd`` dollar hold of ``task_id`` (deadline in an hour)."""
    hold_id: int = await pool.fetchval(
        "INSERT INTO reservations (task_id, amount_usd, deadline_at, owner_host, owner_pid, owner_started_at)"
        " VALUES ($1, $2, now() + interval '1 hour', 'h', 1, 0) RETURNING id", task_id, Decimal(usd))
    return hold_id
