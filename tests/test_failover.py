"""PostgreSQL failover on a real highly available setup (issue 37): pg_auto_failover's
monitor, a primary and a synchronous standby on this machine (:mod:`tests.ha`).

Skips, saying why, where pg_auto_failover is not installed (.ci/run installs it).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from decimal import Decimal
from typing import Iterator

import asyncpg
import httpx
import pytest

from app.db import migrate
from app.db.urls import normalize_database_url
from app.testing.upstream import UpstreamServer
from tests.failover_load import MODEL, PER_MTOK, Load, Target, audit, outage, settled
from tests.ha import NOT_INSTALLED, HACluster, available, ha_cluster
from tests.support import ADMIN_TOKEN, GatewayProcess, priced_config, started

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


# -- the gateways through a failover, under load ---------------------------------------

@pytest.fixture(scope="module")
def ha_gateways(cluster: HACluster, priced_upstream: UpstreamServer,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    """Three gateway processes on the cluster's multi-host URL, migrated first."""
    migrate.upgrade(normalize_database_url(cluster.url))
    config = priced_config(tmp_path_factory.mktemp("ha-config"), priced_upstream.base_url, MODEL, PER_MTOK)
    with started([GatewayProcess(cluster.url, priced_upstream.base_url, TASKGATE_CONFIG=str(config),
                                 TASKGATE_DATABASE_TIMEOUT_S="2", TASKGATE_DATABASE_RECONCILE_S="60",
                                 TASKGATE_ACCOUNTING_RETRY_S="120", TASKGATE_RESERVATION_SWEEP_S="2")
                  for _ in range(3)]) as procs:
        yield procs


def _targets(gateway: GatewayProcess) -> list[Target]:
    """Tasks with tight ceilings of every kind: request limits (fast path), dollar
    ceilings (holds, settlements), a budget's request limit (escrow leases) and a budget's
    dollar ceiling (budget reservations); and two roomy tasks that keep the load going."""
    api = httpx.Client(base_url=gateway.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})

    def task(**body: object) -> tuple[str, str]:
        r = api.post("/admin/tasks", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["token"]

    def budget(**body: object) -> str:
        r = api.post("/admin/budgets", json={"id": f"ha-{secrets.token_hex(4)}", **body})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    out = []
    for limit in (40, 60, 100_000, 100_000):
        out.append(Target(*task(request_limit=limit), request_limit=limit))
    for usd in ("0.4", "0.8"):
        out.append(Target(*task(request_limit=100_000, cost_limit_usd=float(usd), cost_wait_s=3), request_limit=100_000,
                          cost_limit_usd=Decimal(usd)))
    by_requests = budget(request_limit=70)
    by_dollars = budget(cost_limit_usd=0.6)
    for owner in (by_requests, by_requests, by_dollars, by_dollars):
        out.append(Target(*task(request_limit=100_000, budget=owner, cost_wait_s=3), request_limit=100_000,
                          budget_id=owner))
    return out


@pytest.mark.parametrize("case", ["kill_postmaster", "perform_failover"])
def test_a_failover_under_load_loses_nothing_and_counts_nothing_twice(cluster, ha_gateways, case):
    targets = _targets(ha_gateways[0])
    load = Load([gw.url for gw in ha_gateways], targets, workers=12).start()
    try:
        time.sleep(3)  # steady load first
        fault_at = time.monotonic()
        moved = cluster.fault(case)
        deadline = time.monotonic() + 60
        while not all(any(a.status == 200 and a.at > fault_at + 0.5 and a.gateway == g for a in load.answers)
                      for g in range(len(ha_gateways))):  # every gateway serves again, none restarted
            assert time.monotonic() < deadline, [gw.errors() for gw in ha_gateways]
            time.sleep(0.2)
        time.sleep(2)
    finally:
        load.stop()
    ended = time.monotonic()
    for gw in ha_gateways:
        assert gw.proc is not None and gw.proc.poll() is None, gw.errors()
    settled(cluster.url, [t.task_id for t in targets])
    found = audit(cluster.url, load)
    down = outage(load.answers, fault_at, ended)
    statuses = Counter(a.status for a in load.answers)
    codes = Counter((a.status, a.code) for a in load.answers if a.status != 200)
    print(f"\n{case} ({'failed over' if moved else 'same primary restarted'}): {statuses} {codes}, "
          f"served {found.served}, first 503 to first 200 per gateway "
          f"{ {g: round(s, 2) for g, s in down.seconds.items()} } s, no 200 at all for {down.stalled_s:.2f} s, "
          f"refused meanwhile {down.refused}, lost {found.lost}, counted twice {found.counted_twice}")
    assert not found.problems, (found.problems, [gw.errors(3000) for gw in ha_gateways])
    assert set(statuses) <= {200, 400, 429, 503}, (statuses, [gw.errors(3000) for gw in ha_gateways])
    assert all(a.retry_after for a in load.answers if a.status == 503)
    assert not load.errors, load.errors[:5]


def test_a_commit_waiting_for_the_standby_past_the_timeout_is_reconciled_not_cancelled(cluster, ha_gateways):
    """The standby stops answering (SIGSTOP) while requests are admitted: their commits
    wait for it past the gateways' 2 s statement timeout. The gateway closes those
    connections without a cancel (a cancel would end the wait and leave the commit
    visible on the primary only), then fences each admission's key: once the commit
    completes (the standby answers, or the monitor turns synchronous replication off) the
    fence finds it landed, and the request is served, counted once. Red when the
    reconciliation is removed: those requests are answered 503 although counted, and
    counted again when their clients retry."""
    api = httpx.Client(base_url=ha_gateways[0].url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    targets = []
    for _ in range(6):  # a task per client: each one's row lock is held by its own commit, never queued for
        r = api.post("/admin/tasks", json={"request_limit": 100_000})
        targets.append(Target(r.json()["id"], r.json()["token"], request_limit=100_000))
    load = Load([gw.url for gw in ha_gateways], targets, workers=6, pinned=True).start()
    try:
        time.sleep(2)
        fault_at = time.monotonic()
        with cluster.standby_paused():
            time.sleep(4)  # past TASKGATE_DATABASE_TIMEOUT_S=2
        deadline = time.monotonic() + 60
        while not any(a.status == 200 and a.at > fault_at + 4 for a in load.answers):
            assert time.monotonic() < deadline, [gw.errors() for gw in ha_gateways]
            time.sleep(0.2)
        time.sleep(1)
    finally:
        load.stop()
    cluster.wait_healthy()
    settled(cluster.url, [t.task_id for t in targets])
    found = audit(cluster.url, load)
    landed = sum(gw.output().count("it had landed, serving it") for gw in ha_gateways)
    down = outage(load.answers, fault_at, time.monotonic())
    print(f"\nstandby paused: {Counter(a.status for a in load.answers)}, reconciled and served {landed}, "
          f"no 200 for {down.stalled_s:.2f} s, lost {found.lost}, counted twice {found.counted_twice}")
    assert not found.problems, (found.problems, [gw.errors(3000) for gw in ha_gateways])
    assert landed > 0, "no commit outlived the statement timeout: the case was not exercised"
    assert "canceling wait for synchronous replication" not in cluster.log(cluster.primary(), 10**7)
