"""Escrow leases of budget windows through real gateway processes and real PostgreSQL:
a killed gateway's lease comes back after its expiry, is reclaimed at once when the
budget runs short (never over-admitting), and a run's task under a budget's dollar
ceiling gets the default output maximum added to its forwarded body."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Iterator

import asyncpg
import httpx
import openai
import pytest

from app.budgets import slices
from app.testing.upstream import UpstreamServer
from tests.support import ADMIN_TOKEN, GatewayProcess, sql

MODEL = "lease-model"
CONFIG = """
providers:
  main:
    kind: openai
    base_url: {upstream}/v1
models:
  - name: {model}
    provider: main
    default_max_output_tokens: 300
    price: {{input_per_mtok: 1, output_per_mtok: 1}}
"""
LEASE_S = 2.0
#: Generous: the last requests of a budget queue on its window row on a loaded 2-core machine.
SLOW_OK = {"TASKGATE_DATABASE_TIMEOUT_S": "60"}


@pytest.fixture(scope="module")
def lease_upstream() -> Iterator[UpstreamServer]:
    with UpstreamServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(lease_upstream: UpstreamServer) -> None:
    lease_upstream.reset()


@pytest.fixture(scope="module")
def config_path(lease_upstream: UpstreamServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = Path(tmp_path_factory.mktemp("lease-config")) / "taskgate.yaml"
    path.write_text(CONFIG.format(upstream=lease_upstream.base_url, model=MODEL))
    return path


@pytest.fixture(scope="module")
def sweeper(database_url: str, lease_upstream: UpstreamServer, config_path: Path) -> Iterator[GatewayProcess]:
    """A gateway that sweeps every 0.3 s; its own leases expire after 2 s."""
    with GatewayProcess(database_url, lease_upstream.base_url, TASKGATE_CONFIG=str(config_path),
                        TASKGATE_RESERVATION_SWEEP_S="0.3", TASKGATE_BUDGET_LEASE_S=str(LEASE_S), **SLOW_OK) as gw:
        yield gw


def _api(gw: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=gw.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})


def _budget(api: httpx.Client, **body: object) -> str:
    budget = f"lease-{secrets.token_hex(4)}"
    assert api.post("/admin/budgets", json={"id": budget, **body}).status_code == 201
    return budget


def _task(api: httpx.Client, budget: str) -> tuple[str, str]:
    r = api.post("/admin/tasks", json={"budget": budget, "request_limit": 1000})
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["token"]


def _chat(url: str, token: str, i: int = 0) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"}, timeout=60,
                      json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": f"job {i}"}]})


def _victim(database_url: str, upstream: UpstreamServer, config_path: Path, lease_s: float) -> GatewayProcess:
    return GatewayProcess(database_url, upstream.base_url, TASKGATE_CONFIG=str(config_path),
                          TASKGATE_RESERVATION_SWEEP_S="0", TASKGATE_BUDGET_LEASE_S=str(lease_s), **SLOW_OK).start()


def _window(database_url: str, budget: str) -> asyncpg.Record:
    return sql(database_url, "SELECT * FROM budget_windows WHERE budget_id = $1", budget)[0]


def test_slices_shrink_near_the_limit_and_reclaim_only_when_nothing_is_free() -> None:
    budget = {"request_limit": 1000}
    assert slices.free_requests(budget, {"admitted_requests": 600, "leased_requests": 300}) == 100
    assert slices.free_requests({"request_limit": None}, {"admitted_requests": 5, "leased_requests": 0}) is None
    assert [slices.slice_size(free, 32) for free in (None, 10_000, 100, 17, 16, 15, 1, 0, -3)] == [
        32, 32, 6, 1, 1, 1, 1, 0, 0]
    assert slices.needs_reclaim(0, 5) and slices.needs_reclaim(-2, 1)
    assert not slices.needs_reclaim(1, 5) and not slices.needs_reclaim(0, 0) and not slices.needs_reclaim(None, 9)
    view = slices.committed_view({"admitted_requests": 7, "leased_requests": 3})
    assert view["admitted_requests"] == 10


def test_one_slot_never_holds_more_than_is_free(lease_upstream, sweeper) -> None:
    api = _api(sweeper)
    budget = _budget(api, request_limit=40)
    _, token = _task(api, budget)
    statuses = [_chat(sweeper.url, token, i).status_code for i in range(45)]  # one after the other: one slot
    assert statuses == [200] * 40 + [400] * 5
    assert len([r for r in lease_upstream.requests if r.method == "POST"]) == 40
    current = api.get(f"/admin/budgets/{budget}").json()["current"]
    assert (current["admitted_requests"], current["leased_requests"]) == (40, 0)


def test_a_killed_gateways_lease_comes_back_after_its_expiry(database_url, lease_upstream, config_path,
                                                              sweeper) -> None:
    api = _api(sweeper)
    budget = _budget(api, request_limit=1000)
    _, token = _task(api, budget)
    victim = _victim(database_url, lease_upstream, config_path, LEASE_S)
    try:
        assert _chat(victim.url, token).status_code == 200
        lease = sql(database_url, "SELECT * FROM budget_leases WHERE budget_id = $1", budget)
        assert [(r["granted"], r["spent"]) for r in lease] == [(62, 1)]  # min(256, 1000 // 16)
        assert lease[0]["holder"].split(":")[1] == str(victim.proc.pid)  # the gateway's slot holds it
        assert _window(database_url, budget)["leased_requests"] == 62
        current = api.get(f"/admin/budgets/{budget}").json()["current"]
        assert (current["admitted_requests"], current["leased_requests"]) == (1, 61)
    finally:
        victim.proc.kill()  # kill -9 with the lease out
        victim.proc.wait()
    deadline = time.monotonic() + LEASE_S + 20
    while sql(database_url, "SELECT 1 FROM budget_leases WHERE budget_id = $1", budget):
        assert time.monotonic() < deadline, "the dead gateway's lease was never folded back"
        time.sleep(0.2)
    window = _window(database_url, budget)
    assert (window["admitted_requests"], window["leased_requests"]) == (1, 0)  # spent kept, the rest back
    current = api.get(f"/admin/budgets/{budget}").json()["current"]
    assert (current["admitted_requests"], current["leased_requests"]) == (1, 0)
    assert "Traceback" not in sweeper.output()


def test_a_killed_gateways_lease_is_reclaimed_when_the_budget_runs_short(database_url, lease_upstream,
                                                                          config_path, sweeper) -> None:
    api = _api(sweeper)
    budget = _budget(api, request_limit=64)
    _, victim_token = _task(api, budget)
    victim = _victim(database_url, lease_upstream, config_path, 600.0)  # its lease outlives the test
    try:
        assert _chat(victim.url, victim_token).status_code == 200
        lease = sql(database_url, "SELECT granted, spent FROM budget_leases WHERE budget_id = $1", budget)
        assert [tuple(r) for r in lease] == [(4, 1)]  # 64 // 16
    finally:
        victim.proc.kill()
        victim.proc.wait()
    tokens = [_task(api, budget)[1] for _ in range(8)]
    others = _victim(database_url, lease_upstream, config_path, 600.0)
    try:
        statuses: list[int] = []
        lock = threading.Lock()

        def run(i: int) -> None:
            status = _chat((others.url, sweeper.url)[i % 2], tokens[i % 8], i).status_code
            with lock:
                statuses.append(status)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # 63 more: the dead gateway's 3 unspent requests were reclaimed, none admitted twice
        assert sorted(statuses) == [200] * 63 + [400] * 37, (statuses, others.output()[-3000:],
                                                             sweeper.output()[-3000:])
        assert len([r for r in lease_upstream.requests if r.method == "POST"]) == 64
        current = api.get(f"/admin/budgets/{budget}").json()["current"]
        assert (current["admitted_requests"], current["leased_requests"]) == (64, 0)
        tasks = api.get("/admin/tasks", params={"budget": budget}).json()["data"]
        assert sum(t["admitted_requests"] for t in tasks) == 64
        assert "Traceback" not in others.output()
    finally:
        others.stop()


def test_a_runs_task_under_a_budgets_dollar_ceiling_gets_the_default_output_max(lease_upstream, sweeper) -> None:
    api = _api(sweeper)
    budget = _budget(api, cost_limit_usd=10)
    r = api.post(f"/admin/budgets/{budget}/keys", json={"template": {}})  # no dollar ceiling of its own
    assert r.status_code == 201, r.text
    client = openai.OpenAI(base_url=sweeper.url + "/v1", api_key=r.json()["key"], max_retries=0,
                           default_headers={"x-taskgate-run": "run-1"})
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    _, plain_token = _task(api, _budget(api, request_limit=10))  # no dollar ceiling anywhere: nothing added
    assert httpx.post(sweeper.url + "/v1/chat/completions", headers={"authorization": f"Bearer {plain_token}"},
                      json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                      timeout=30).status_code == 200
    bodies = [r.json for r in lease_upstream.requests if r.method == "POST"]
    assert bodies[0]["max_completion_tokens"] == 300  # the budget's ceiling bounds the output
    assert "max_completion_tokens" not in bodies[1] and "max_tokens" not in bodies[1]
