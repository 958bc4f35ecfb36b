"""Test databases beyond the session's: an empty (unmigrated) database on the same
server, and the postmaster of an embedded PostgreSQL to kill."""

from __future__ import annotations

import asyncio
import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine


async def _sql(url: str, sql: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


@contextmanager
def empty_database(server_url: str) -> Iterator[str]:
    """A new, empty database (no tables) on the server of ``server_url``; dropped after."""
    name = f"taskgate_empty_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(_sql(server_url, f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_sql(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid in ``pgdata/postmaster.pid``, or ``None`` when there is none."""
    try:
        return int((Path(pgdata) / "postmaster.pid").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
