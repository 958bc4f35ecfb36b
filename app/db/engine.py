"""The process's SQLAlchemy async engine (asyncpg driver)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

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
            "server_settings": {"application_name": "taskgate"},
        },
    )
