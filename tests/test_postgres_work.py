"""What PostgreSQL runs per admission, counted by ``pg_stat_statements`` on a private
embedded cluster, directly and through PgBouncer in transaction mode: the fast path is
one statement either way (PgBouncer adds no ``SET`` before each transaction), and the
numbers ``docs/scaling.md`` builds on stay true."""

from __future__ import annotations

import asyncio
import secrets
from typing import Iterator

import asyncpg
import pytest

from app.admission.admission import admit
from app.admission.tokens import token_hash
from app.db.pool import asyncpg_dsn, create_pool
from app.settings import Settings
from tests.databases import statements_cluster
from tests.pgbouncer import NOT_INSTALLED, pgbouncer, pgbouncer_binary

pytestmark = pytest.mark.skipif(pgbouncer_binary() is None, reason=NOT_INSTALLED)

_CALLS = ("SELECT query, calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
          " WHERE d.datname = current_database() AND query NOT LIKE '%pg_stat_statements%'")


@pytest.fixture(scope="module")
def routes() -> Iterator[dict[str, str]]:
    with statements_cluster() as (url, _), pgbouncer(url) as through:
        yield {"direct": url, "pgbouncer": through, "stats": url}


async def _admit_and_count(url: str, stats_url: str, n: int) -> dict[str, int]:
    stats = await asyncpg.connect(asyncpg_dsn(stats_url))
    try:
        token = "tg-work-" + secrets.token_hex(8)
        await stats.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                            token, token_hash(token))
        settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
        pool = await create_pool(url, settings)
        try:
            await admit(pool, token_hash(token), settings)  # connections are set up
            await stats.execute("SELECT pg_stat_statements_reset()")
            for _ in range(n):
                await admit(pool, token_hash(token), settings)
        finally:
            await pool.close()
        return {r["query"]: r["calls"] for r in await stats.fetch(_CALLS)}
    finally:
        await stats.close()


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_a_fast_path_admission_is_one_statement(routes, route):
    calls = asyncio.run(_admit_and_count(routes[route], routes["stats"], 20))
    assert sum(calls.values()) == 20, calls
    assert [q.split()[0] for q in calls] == ["UPDATE"], calls
