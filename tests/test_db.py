"""Database layer on real PostgreSQL: migrations match the schema, and the admission
fast path's SQL agrees with the pure limit check."""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.admission.admission import FAST_ADMIT, admit
from app.admission.limits import limit_breach
from app.admission.tokens import token_hash
from app.db.commits import new_key
from app.db.pool import statement_cache_size
from app.db.schema import metadata
from app.errors import GatewayError
from app.settings import Settings
from tests.task_values import task_value


@pytest.fixture
async def engine(database_url):
    engine = create_async_engine(database_url)
    yield engine
    await engine.dispose()


def test_the_statement_cache_is_on_only_where_the_connection_is_known_to_be_direct():
    assert statement_cache_size(Settings(), direct=True) == 100  # the embedded PostgreSQL
    assert statement_cache_size(Settings(), direct=False) == 0  # database_url: may be PgBouncer
    assert statement_cache_size(Settings(database_statement_cache_size=5), direct=False) == 5


async def test_migrations_create_exactly_the_schema(engine):
    def diff(sync_conn):
        ctx = MigrationContext.configure(sync_conn, opts={"compare_type": True})
        return compare_metadata(ctx, metadata)

    async with engine.connect() as conn:
        assert await conn.run_sync(diff) == []


NOW = datetime.now(timezone.utc)

STATES = {
    "fresh": {},
    "one_below_limit": {"admitted_requests": 4, "request_limit": 5},
    "at_limit": {"admitted_requests": 5, "request_limit": 5},
    "zero_limit": {"admitted_requests": 0, "request_limit": 0},
    "tokens_below": {"token_limit": 100, "input_tokens": 60, "output_tokens": 39},
    "tokens_at": {"token_limit": 100, "input_tokens": 60, "output_tokens": 40},
    "duration_left": {"max_duration_s": 60.0, "first_admitted_at": NOW - timedelta(seconds=30)},
    "duration_over": {"max_duration_s": 60.0, "first_admitted_at": NOW - timedelta(seconds=61)},
    "duration_not_started": {"max_duration_s": 0.001},
}


@pytest.mark.parametrize("state", list(STATES))
async def test_fast_path_sql_agrees_with_limit_breach(pool, state):
    row = {"admitted_requests": 0, "request_limit": 10, "token_limit": None, "input_tokens": 0,
           "output_tokens": 0, "max_duration_s": None, "first_admitted_at": None, **STATES[state]}
    token = secrets.token_hex(8)
    task_id = "limits-" + token
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO tasks (id, token_hash, admitted_requests, request_limit, token_limit, input_tokens,"
            " output_tokens, max_duration_s, first_admitted_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            task_id, token_hash(token), row["admitted_requests"], row["request_limit"], row["token_limit"],
            row["input_tokens"], row["output_tokens"], row["max_duration_s"], row["first_admitted_at"])
        admitted = await conn.fetchrow(FAST_ADMIT, token_hash(token), new_key(), None)
    expected = limit_breach(task_value(**row), datetime.now(timezone.utc)) is None
    assert (admitted is not None) == expected


async def test_admit_is_exact_under_concurrency_in_one_process(pool, engine):
    token = secrets.token_hex(8)
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 25)",
                       "race-" + token, token_hash(token))
    settings = Settings(database_url="postgresql+asyncpg://unused/x")

    async def one() -> str:
        try:
            await admit(pool, token_hash(token), settings)
            return "admitted"
        except GatewayError as err:
            return err.code or ""

    results = await asyncio.gather(*(one() for _ in range(60)))
    assert results.count("admitted") == 25
    assert results.count("request_limit") == 35
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT admitted_requests, status, stop_reason FROM tasks WHERE id = :id"),
                                  {"id": "race-" + token})).one()
        stops = (await conn.execute(text("SELECT count(*) FROM task_events WHERE task_id = :id AND kind = 'stopped'"),
                                    {"id": "race-" + token})).scalar()
    assert tuple(row) == (25, "stopped", "request_limit")
    assert stops == 1  # the latch is set once; later refusals only read it
