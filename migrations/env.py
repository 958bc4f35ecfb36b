"""Alembic environment, async (asyncpg). The URL comes from app.db.migrate."""

import asyncio

from alembic import context
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.schema import metadata

config = context.config


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(config.get_main_option("sqlalchemy.url"))
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
