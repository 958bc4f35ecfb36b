"""Commits whose answer was lost (issue 37 §3), on real PostgreSQL: the fence decides an
admission key once, a settlement runs once per admission, a statement that may commit
is never cancelled (its connection is closed instead), and multi-host URLs reach asyncpg
as a host list."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from app.db import commits
from app.db.pool import create_pool
from app.db.urls import asyncpg_dsn, describe, hosts, normalize_database_url
from app.settings import Settings


def test_a_multi_host_url_is_kept_in_sqlalchemy_form_and_given_to_asyncpg_as_a_host_list():
    written = "postgres://app:secret@node1:5432,node2:5433/taskgate?target_session_attrs=read-write"
    kept = normalize_database_url(written)
    assert kept == ("postgresql+asyncpg://app:secret@/taskgate?host=node1:5432&host=node2:5433"
                    "&target_session_attrs=read-write")
    assert asyncpg_dsn(kept) == ("postgresql://app:secret@node1:5432,node2:5433/taskgate"
                                 "?target_session_attrs=read-write")
    assert hosts(kept) == hosts(written) == ["node1:5432", "node2:5433"]
    assert describe(kept) == "node1:5432,node2:5433/taskgate" and "secret" not in describe(written)
    single = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
    assert normalize_database_url(single) == single
    assert asyncpg_dsn(single) == "postgresql://postgres@127.0.0.1:5432/test"
    socket = "postgresql+asyncpg://postgres@/db?host=/tmp/sock"
    assert asyncpg_dsn(socket) == "postgresql://postgres@/db?host=/tmp/sock" and describe(socket) == "/tmp/sock/db"
    with pytest.raises(ValueError):
        normalize_database_url("postgresql://u@node1:5432,/db")


def test_admission_keys_are_unique_and_ordered_by_time():
    keys = [commits.new_key() for _ in range(1000)]
    assert len(set(keys)) == 1000 and all(k.version == 7 for k in keys)
    assert [k.bytes[:6] for k in keys] == sorted(k.bytes[:6] for k in keys)


async def test_the_fence_decides_a_key_once(pool):
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $1, 10)", task_id)
    landed, void = commits.new_key(), commits.new_key()
    await pool.execute("INSERT INTO admissions (key, task_id, request_id) VALUES ($1, $2, 'r1')", landed, task_id)

    async def read(conn: asyncpg.Connection, row: asyncpg.Record) -> tuple[str, str]:
        return row["task_id"], row["request_id"]

    assert await commits.reconcile(pool, landed, 5, read) == (task_id, "r1")
    assert await commits.reconcile(pool, void, 5, read) is None
    with pytest.raises(asyncpg.UniqueViolationError):  # the original, arriving late, can never land
        await pool.execute("INSERT INTO admissions (key, task_id) VALUES ($1, $2)", void, task_id)
    assert await commits.reconcile(pool, void, 5, read) is None  # and stays void


async def test_the_fence_waits_for_an_original_still_running(pool):
    """The original holds its key's row uncommitted (a connection the gateway closed while
    the server still works): the fence waits for its outcome, and reports it."""
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $1, 10)", task_id)
    key = commits.new_key()
    async with pool.acquire() as original:
        transaction = original.transaction()
        await transaction.start()
        await original.execute("INSERT INTO admissions (key, task_id) VALUES ($1, $2)", key, task_id)

        async def read(conn: asyncpg.Connection, row: asyncpg.Record) -> str:
            return str(row["task_id"])

        fenced = asyncio.ensure_future(commits.reconcile(pool, key, 10, read))
        await asyncio.sleep(0.5)
        assert not fenced.done()
        await transaction.commit()
        assert await fenced == task_id


async def test_a_settlement_runs_once_per_admission(pool):
    key = commits.new_key()
    await pool.execute("INSERT INTO admissions (key, task_id) VALUES ($1, 'x')", key)
    for expected in (True, False, False):
        async with commits.settling(pool, key) as first:
            assert first is expected
    async with commits.settling(pool, None) as first:  # no key: always, without a mark
        assert first is True
    async with commits.settling(pool, commits.new_key()) as first:  # not in the log (pruned): settled anyway
        assert first is True


async def test_inside_a_settlement_every_acquire_of_the_task_is_its_transaction(pool):
    key = commits.new_key()
    await pool.execute("INSERT INTO admissions (key, task_id) VALUES ($1, 'x')", key)
    async with commits.settling(pool, key):
        async with pool.acquire() as conn:
            assert conn.is_in_transaction()
            mine = await conn.fetchval("SELECT txid_current()")
        async with pool.acquire() as again:
            assert await again.fetchval("SELECT txid_current()") == mine

        async def elsewhere() -> bool:  # another task gets a connection of its own
            async with pool.acquire() as other:
                return bool(other.is_in_transaction())
        assert await asyncio.create_task(elsewhere()) is False


async def _state(pool: asyncpg.Pool, pid: int) -> str | None:
    state: str | None = await pool.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
    return state


async def test_a_statement_that_may_commit_is_never_cancelled_on_its_timeout(database_url):
    """Past its timeout an autocommit statement's connection is closed, never cancelled:
    the server goes on (a COMMIT waiting for a standby would be left visible on the
    primary only by a cancel). Inside a transaction, the timeout cancels as before."""
    pool = await create_pool(database_url, Settings(database_url=database_url, database_timeout_s=0.5))
    watcher = await create_pool(database_url, Settings(database_url=database_url))
    try:
        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            with pytest.raises(TimeoutError):
                await conn.execute("SELECT pg_sleep(3)")
            with pytest.raises(asyncpg.InterfaceError):  # closed: asyncpg took it back
                conn.is_closed()
        await asyncio.sleep(0.5)
        assert await _state(watcher, pid) == "active"  # still sleeping: no cancel reached it

        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            with pytest.raises(TimeoutError):
                async with conn.transaction():
                    await conn.execute("SELECT pg_sleep(3)")
        await asyncio.sleep(0.5)
        assert await _state(watcher, pid) in ("idle", None)  # cancelled: nothing left running
    finally:
        await pool.close()
        await watcher.close()
