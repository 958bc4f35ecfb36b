"""The process's SQLAlchemy async engine (asyncpg driver).

Commit durability: hot-path transactions (admission counters, usage, ledger rows)
commit with ``synchronous_commit`` off unless ``TASKGATE_SYNCHRONOUS_COMMIT`` is set:
PostgreSQL then acknowledges a commit before its WAL reaches disk, which takes the
fsync (milliseconds on most disks) off every request. The database stays consistent;
a *crash* of the PostgreSQL host can lose the last ~0.6 s of such commits (at most
3 × ``wal_writer_delay``), i.e. a handful of counter increments. Transactions that set
or clear a stop latch, and admin changes, call :func:`durable` and always wait for
the disk. See https://www.postgresql.org/docs/current/wal-async-commit.html.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.settings import Settings


def create_engine(database_url: str, settings: Settings) -> AsyncEngine:
    """An engine with a bounded pool and short timeouts, so an unreachable database
    fails a request within ``database_timeout_s`` seconds instead of hanging it."""
    return create_async_engine(
        database_url,
        pool_size=settings.database_pool_size,
        max_overflow=settings.database_pool_size,
        pool_timeout=settings.database_timeout_s,
        pool_pre_ping=False,
        connect_args={
            "timeout": settings.database_timeout_s,
            "command_timeout": settings.database_timeout_s,
            "server_settings": {
                "application_name": "taskgate",
                "synchronous_commit": "on" if settings.synchronous_commit else "off",
            },
        },
    )


@lru_cache(maxsize=8)
def autocommit(engine: AsyncEngine) -> AsyncEngine:
    """``engine`` in autocommit mode (same pool): a single statement is its own
    transaction, with no ``BEGIN``/``COMMIT`` round trips."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


_DURABLE = text("SET LOCAL synchronous_commit = on")


async def durable(conn: AsyncConnection) -> None:
    """Make the current transaction's commit wait for the disk (latches, admin changes)."""
    await conn.execute(_DURABLE)
