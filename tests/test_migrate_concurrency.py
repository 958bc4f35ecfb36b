"""Migrations: concurrent starters are serialised by an advisory lock, and
``TASKGATE_MIGRATION_DATABASE_URL`` is the URL they use."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg

from app.db.pool import asyncpg_dsn
from tests.databases import empty_database


def _migrate(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", "migrate"],
                            env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


async def _version(url: str) -> list[str]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return [r[0] for r in await conn.fetch("SELECT version_num FROM alembic_version")]
    finally:
        await conn.close()


def test_three_concurrent_migrates_on_a_fresh_database_all_succeed(database_url):
    with empty_database(database_url) as url:
        procs = [_migrate({"TASKGATE_DATABASE_URL": url}) for _ in range(3)]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outputs
        assert len(asyncio.run(_version(url))) == 1


def test_migrate_uses_the_migration_database_url(database_url):
    with empty_database(database_url) as url:
        proc = _migrate({"TASKGATE_DATABASE_URL": "postgresql+asyncpg://nobody@127.0.0.1:9/unreachable",
                         "TASKGATE_MIGRATION_DATABASE_URL": url})
        output = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, output
        assert len(asyncio.run(_version(url))) == 1
