"""The process's PostgreSQL connection pool (asyncpg).

Runtime queries (admission, ledger, accounting, admin) go straight to asyncpg: on the
hot path SQLAlchemy's per-statement machinery (implicit ``BEGIN``/``ROLLBACK`` round
trips, greenlet switches, result processing) cost several times the query itself.
SQLAlchemy still owns the schema (:mod:`app.db.schema`) and the alembic migrations.

Commit durability: every commit waits for its WAL to reach the disk (PostgreSQL's
default ``synchronous_commit = on``), and to reach a synchronous standby's disk where the
server has one (docs/scaling.md, "High availability"), so an admitted reservation
survives a crash of PostgreSQL, or the loss of the primary, before any byte goes
upstream. Only the post-response accounting (usage, ledger rows, stream events) opts
out, with ``synchronous_commit = off`` for its own transactions (:func:`relaxed`,
:data:`RELAXED_COMMIT`) on a server without synchronous standbys: a PostgreSQL crash can
lose the last ~0.6 s of those (at most 3 × ``wal_writer_delay``). See
https://www.postgresql.org/docs/current/wal-async-commit.html.

PgBouncer in transaction mode: nothing here needs session state. No startup parameter
beyond ``application_name``, per-transaction settings with ``SET LOCAL``, and no named
prepared statement outlives its transaction unless asyncpg's statement cache is on
(:func:`statement_cache_size`: by default only on the embedded PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import asyncpg

from app.db import sql
from app.db.fair_pool import GuardedConnection, create_fair_pool
from app.db.urls import asyncpg_dsn
from app.settings import Settings
from app.wire import json_text

__all__ = ["asyncpg_dsn", "create_pool", "durable", "relaxed", "RELAXED_COMMIT", "statement_cache_size"]


async def _init_connection(conn: asyncpg.Connection) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(type_name, encoder=json.dumps, decoder=json_text.loads,
                                  schema="pg_catalog")


def _initializer(settings: Settings) -> Callable[[asyncpg.Connection], Awaitable[None]]:
    async def init(conn: asyncpg.Connection) -> None:
        if isinstance(conn, GuardedConnection):
            conn.statement_timeout_s = settings.database_timeout_s
        await _init_connection(conn)
    return init


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook: nothing to reset (no LISTEN, advisory locks or SET in use), so
    releasing a connection costs no round trip."""


def statement_cache_size(settings: Settings, direct: bool) -> int:
    """How many named prepared statements asyncpg keeps per connection:
    ``database_statement_cache_size`` when set, else 100 over a connection known to be
    direct (the embedded PostgreSQL) and 0 otherwise. With 0 asyncpg uses only the
    unnamed statement (works through PgBouncer in transaction mode), at the price of a
    Parse round trip and a plan for every query."""
    configured = settings.database_statement_cache_size
    if configured is not None:
        return configured
    return 100 if direct else 0


async def create_pool(database_url: str, settings: Settings, *, direct: bool = False) -> asyncpg.Pool:
    """A pool of up to ``database_pool_size`` connections, handed out first come, first
    served (:mod:`app.db.fair_pool`); connects and statements time out
    after ``database_timeout_s`` seconds, so an unreachable database fails a request
    (503) instead of hanging it (a statement that may commit is never cancelled: its
    connection is closed instead, :class:`~app.db.fair_pool.GuardedConnection`). JSON and
    JSONB columns decode to Python objects. A multi-host ``database_url``
    (:mod:`app.db.urls`) is tried host by host for every new connection.
    ``direct``: ``database_url`` is known not to be PgBouncer (see
    :func:`statement_cache_size`)."""
    return await create_fair_pool(
        asyncpg_dsn(database_url),
        min_size=0,  # no floor to restore: asyncpg logs a traceback per failed attempt
        max_size=settings.database_pool_size,
        timeout=settings.database_timeout_s,
        command_timeout=None,  # GuardedConnection bounds each statement (never a cancel at COMMIT)
        statement_cache_size=statement_cache_size(settings, direct),
        init=_initializer(settings),
        reset=_keep_session,
        # client_encoding spelt as PostgreSQL reports it: asyncpg's default 'utf-8' differs
        # from the server's 'UTF8', and PgBouncer then re-sends SET client_encoding before
        # every transaction (one more round trip and statement per admission).
        server_settings={"application_name": "taskgate", "client_encoding": "UTF8"},
    )


_DURABLE = sql.statement("pool_durable")


async def durable(conn: asyncpg.Connection) -> None:
    """Make the current transaction's commit wait for the disk (latches, admin changes),
    even where an operator turned ``synchronous_commit`` off for the database."""
    await conn.execute(_DURABLE)


#: ``synchronous_commit`` for relaxed post-response records: ``off`` on a server without
#: synchronous standbys, else the session's own (``on``). With a synchronous standby an
#: ``off`` commit returns before the standby has it, so a failover would lose the last
#: usage, settlements and hold releases (a hold stranded, dollars uncounted).
_RELAXED = sql.statement("pool_relaxed")
#: A ``FROM`` item that makes the transaction it runs in commit without waiting for the
#: disk (:data:`_RELAXED`): :func:`relaxed` inside one statement, for a statement
#: that is its own transaction (one round trip instead of ``BEGIN``, ``SET LOCAL``, the
#: statement, ``COMMIT``). ``set_config(..., true)`` is ``SET LOCAL``; it ends with the
#: transaction.
RELAXED_COMMIT = sql.statement("relaxed_commit")


async def relaxed(conn: asyncpg.Connection) -> None:
    """Let the current transaction commit without waiting for the disk (post-response
    accounting only: it is never a reservation), unless the server replicates
    synchronously (:data:`_RELAXED`)."""
    await conn.execute(_RELAXED)
