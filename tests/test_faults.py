"""Crashes lose nothing: PostgreSQL killed (``kill -9`` of the postmaster) under load,
then restarted, never leaves upstream with more requests than were admitted.

- The embedded PostgreSQL: the gateway's supervisor restarts it by itself; meanwhile
  requests get 503 and ``/readyz`` says ``restarting``; no 500 at any time.
- A PostgreSQL server: a private throwaway cluster from the Debian binaries (never the
  machine's shared server on :5432), restarted by the test as systemd would.

Recovery times are printed (``-s`` shows them) for docs/faults.md.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from app.db import embedded, migrate
from tests.cluster import NOT_INSTALLED, private_cluster, server_bin
from tests.databases import data_dir  # noqa: F401 - fixture
from tests.load import Load
from tests.support import Admin, GatewayProcess

pytestmark = pytest.mark.timeout(300)  # kills, restarts and load on a loaded machine


def _no_lost_reservation(upstream, admin: Admin, task_id: str, load: Load) -> None:
    statuses = load.statuses()
    assert set(statuses) <= {200, 503}, {s: statuses.count(s) for s in set(statuses)}
    posts = len([r for r in upstream.requests if r.method == "POST"])
    admitted = admin.task(task_id)["admitted_requests"]
    print(f"\nadmitted {admitted}, upstream received {posts}, answers {len(statuses)} "
          f"({statuses.count(200)} x 200, {statuses.count(503)} x 503)")
    assert posts <= admitted, f"upstream received {posts} requests but only {admitted} were admitted"


def test_embedded_postgres_killed_under_load_is_restarted_and_loses_no_reservation(upstream, data_dir):
    """Two gateway processes share one embedded data directory: both notice the dead
    postmaster, one restarts it (file lock), both serve again."""
    gws = [GatewayProcess(None, upstream.base_url, TASKGATE_DATA_DIR=str(data_dir)) for _ in range(2)]
    try:
        for gw in gws:
            gw.start(timeout=60)
        admin = Admin(gws[0].url)
        task_id, token = admin.create_task(request_limit=10**9)
        pgdata = embedded.pgdata_dir(data_dir)
        with Load([gw.url for gw in gws], token) as load:
            time.sleep(2)
            killed_at = time.monotonic()
            os.kill(embedded.postmaster_pid(pgdata), signal.SIGKILL)
            seen = set()
            # until a gateway reports the restart (the one restarting the server says so for
            # the whole restart); not until the first 200: backends orphaned by the kill can
            # still answer a request or two before they notice
            while "restarting" not in seen and time.monotonic() < killed_at + 60:
                for gw in gws:
                    seen.add(httpx.get(gw.url + "/readyz").json().get("database"))
                time.sleep(0.02)
            back_at = load.wait_for_ok_after(killed_at, timeout=60)
            for gw in gws:
                _wait_ready(gw.url)
            time.sleep(1)
        print(f"\nembedded PostgreSQL: first 200 {back_at - killed_at:.2f} s after kill -9; "
              f"/readyz said {sorted(seen)}")
        assert "restarting" in seen
        _no_lost_reservation(upstream, admin, task_id, load)
        assert sum("embedded PostgreSQL is back" in gw.output() for gw in gws) == 2
    finally:
        for gw in gws:  # SIGTERM; the last one out stops the (restarted) server
            gw.proc.send_signal(signal.SIGTERM)
        for gw in gws:
            gw.proc.wait(60)
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()  # the restarted server stopped too


def _wait_ready(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(url + "/readyz").json() == {"status": "ready", "database": "ok"}:
            return
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready {timeout} s after the restart")


@pytest.mark.skipif(server_bin() is None, reason=NOT_INSTALLED)
def test_postgres_server_killed_under_load_loses_no_reservation(upstream):
    with private_cluster() as cluster:
        migrate.upgrade(cluster.url)
        with GatewayProcess(cluster.url, upstream.base_url, TASKGATE_DATABASE_TIMEOUT_S="2") as gw:
            admin = Admin(gw.url)
            task_id, token = admin.create_task(request_limit=10**9)
            with Load([gw.url], token) as load:
                time.sleep(2)
                killed_at = time.monotonic()
                cluster.kill()
                cluster.start()
                restarted_at = time.monotonic()
                back_at = load.wait_for_ok_after(restarted_at, timeout=30)
                time.sleep(1)
            print(f"\nPostgreSQL server: restarted {restarted_at - killed_at:.2f} s after kill -9, "
                  f"first 200 {back_at - restarted_at:.2f} s after the restart")
            _no_lost_reservation(upstream, admin, task_id, load)


def test_gateway_killed_under_load_loses_no_reservation(database_url, upstream):
    """``kill -9`` of one of two gateways with requests in flight: every request that went
    upstream was admitted, and the other gateway keeps serving."""
    with GatewayProcess(database_url, upstream.base_url) as survivor:
        victim = GatewayProcess(database_url, upstream.base_url).start()
        admin = Admin(survivor.url)
        task_id, token = admin.create_task(request_limit=10**9)
        upstream.script("delay", delay_s=0.3)  # every request is in flight for 0.3 s
        with Load([victim.url, survivor.url], token, threads=32) as load:
            time.sleep(2)
            killed_at = time.monotonic()
            victim.proc.kill()
            victim.proc.wait()
            load.wait_for_ok_after(killed_at, timeout=10)
            time.sleep(1)
        statuses = load.statuses()
        # the killed gateway's connections fail (status 0); nothing else but 200
        assert set(statuses) <= {0, 200}, {s: statuses.count(s) for s in set(statuses)}
        posts = len([r for r in upstream.requests if r.method == "POST"])
        admitted = admin.task(task_id)["admitted_requests"]
        print(f"\ngateway killed: admitted {admitted}, upstream received {posts}, "
              f"{statuses.count(0)} connections cut")
        assert posts <= admitted
