"""Run the alembic migrations in ``migrations/`` against a database URL.

Concurrent starters are serialised: ``migrations/env.py`` takes the transaction-level
advisory lock :data:`MIGRATION_LOCK_KEY` (``pg_advisory_xact_lock``) before alembic reads
``alembic_version``, so of N gateways migrating one fresh database at once, one applies
the migrations and the others wait, then find nothing to do. A transaction-level lock
also holds through PgBouncer in transaction mode; the engine there uses unique,
uncached prepared statement names for the same reason.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent

#: ``pg_advisory_xact_lock`` key held while migrating ("taskgate" in ASCII).
MIGRATION_LOCK_KEY = int.from_bytes(b"taskgate", "big")


def alembic_config(database_url: str) -> Config:
    """An alembic ``Config`` for ``database_url`` (a ``postgresql+asyncpg://`` URL)."""
    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database to ``revision``. Blocking; call it outside an event loop
    or through :func:`upgrade_async`."""
    command.upgrade(alembic_config(database_url), revision)


async def upgrade_async(database_url: str, revision: str = "head") -> None:
    """:func:`upgrade` from inside a running event loop (alembic's env runs its own loop,
    so it runs in a worker thread)."""
    await asyncio.to_thread(upgrade, database_url, revision)
