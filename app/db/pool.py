"""The process's PostgreSQL connection pool (asyncpg).

Runtime queries (admission, ledger, accounting, admin) go straight to asyncpg: on the
hot path SQLAlchemy's per-statement machinery (implicit ``BEGIN``/``ROLLBACK`` round
trips, greenlet switches, result processing) cost several times the query itself.
SQLAlchemy still owns the schema (:mod:`app.db.schema`) and the alembic migrations.

Commit durability: hot-path transactions (admission counters, usage, ledger rows)
commit with ``synchronous_commit`` off unless ``TASKGATE_SYNCHRONOUS_COMMIT`` is set:
PostgreSQL then acknowledges a commit before its WAL reaches disk, which takes the
fsync (milliseconds on most disks) off every request. The database stays consistent;
a *crash* of the PostgreSQL host can lose the last ~0.6 s of such commits (at most
3 × ``wal_writer_delay``): a handful of counter increments. Transactions that set or
clear a stop latch, and admin changes, call :func:`durable` and always wait for the
disk. See https://www.postgresql.org/docs/current/wal-async-commit.html.
"""

from __future__ import annotations

import json

import asyncpg

from app.settings import Settings


def asyncpg_dsn(database_url: str) -> str:
    """``postgresql+asyncpg://...`` (SQLAlchemy form) → ``postgresql://...`` (libpq form)."""
    scheme, sep, rest = database_url.partition("://")
    return f"postgresql://{rest}" if sep and scheme.startswith("postgres") else database_url


async def _init_connection(conn: asyncpg.Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(type_name, encoder=json.dumps, decoder=json.loads,
                                  schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook: nothing to reset (no LISTEN, advisory locks or SET in use), so
    releasing a connection costs no round trip."""


async def create_pool(database_url: str, settings: Settings) -> asyncpg.Pool:
    """A pool of up to ``database_pool_size`` connections; connects and queries time out
    after ``database_timeout_s`` seconds, so an unreachable database fails a request
    (503) instead of hanging it. JSON and JSONB columns decode to Python objects."""
    return await asyncpg.create_pool(
        asyncpg_dsn(database_url),
        min_size=1,
        max_size=settings.database_pool_size,
        timeout=settings.database_timeout_s,
        command_timeout=settings.database_timeout_s,
        init=_init_connection,
        reset=_keep_session,
        server_settings={
            "application_name": "taskgate",
            "synchronous_commit": "on" if settings.synchronous_commit else "off",
        },
    )


async def durable(conn: asyncpg.Connection) -> None:
    """Make the current transaction's commit wait for the disk (latches, admin changes)."""
    await conn.execute("SET LOCAL synchronous_commit = on")
