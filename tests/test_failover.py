"""PostgreSQL failover on a real highly available setup (issue 37): pg_auto_failover's
monitor, a primary and a synchronous standby on this machine (:mod:`tests.ha`).

Skips, saying why, where pg_auto_failover is not installed (.ci/run installs it).
"""

from __future__ import annotations

import asyncio
from typing import Iterator

import asyncpg
import pytest

from tests.ha import NOT_INSTALLED, HACluster, available, ha_cluster

pytestmark = [pytest.mark.skipif(not available(), reason=NOT_INSTALLED), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[HACluster]:
    with ha_cluster() as started:
        yield started


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _on(port: int, query: str) -> object:
    conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/taskgate")
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


def test_the_standby_is_synchronous_and_an_acknowledged_commit_is_on_it(cluster: HACluster):
    primary = cluster.primary()
    standby = next(n for n in cluster.nodes if n is not primary)

    async def check() -> None:
        assert await _on(primary.port, "SHOW synchronous_commit") == "on"
        assert "pgautofailover_standby" in str(await _on(primary.port, "SHOW synchronous_standby_names"))
        assert await _on(primary.port, "SELECT sync_state FROM pg_stat_replication") == "quorum"
        conn = await asyncpg.connect(_dsn(cluster.url))  # the multi-host URL finds the primary
        try:
            assert await conn.fetchval("SELECT inet_server_port()") == primary.port
            await conn.execute("CREATE TABLE IF NOT EXISTS ha_probe (n int)")
            await conn.execute("INSERT INTO ha_probe VALUES (1)")
        finally:
            await conn.close()
        # acknowledged: its WAL is on the standby's disk; replayed there a moment later
        for _ in range(50):
            if await _on(standby.port, "SELECT count(*) FROM ha_probe") == 1:
                break
            await asyncio.sleep(0.1)
        assert await _on(standby.port, "SELECT count(*) FROM ha_probe") == 1
        assert await _on(standby.port, "SELECT pg_is_in_recovery()") is True

    asyncio.run(check())
