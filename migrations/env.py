"""Alembic environment, async (asyncpg). The URL comes from app.db.migrate.

Online migrations run in one transaction that first takes the advisory lock
``app.db.migrate.MIGRATION_LOCK_KEY``: concurrent starters migrate one after the other.
The engine works through PgBouncer in transaction mode too (no pool, no statement
cache, unique prepared statement names).
"""

import asyncio
import uuid

from alembic import context
from sqlalchemy import NullPool, text
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import MIGRATION_LOCK_KEY
from app.db.schema import metadata

config = context.config


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, compare_type=True)
    with context.begin_transaction():
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(
        config.get_main_option("sqlalchemy.url"),
        poolclass=NullPool,
        connect_args={
            "statement_cache_size": 0,
            "prepared_statement_cache_size": 0,
            "prepared_statement_name_func": lambda: f"__taskgate_migrate_{uuid.uuid4().hex}__",
        },
    )
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    connectable = config.attributes.get("connection")
    if connectable is None:
        asyncio.run(_run_async())
    else:
        _run(connectable)
