"""A budget's dollar holds survive ``kill -9`` of a gateway: the hold's row names the
budget windows it reserved in, and the sweeper releases them there too once past the
request's deadline (never before); a request that settles releases them itself, once.
Real gateway processes, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import pytest

from app.db.pool import asyncpg_dsn
from tests.support import ADMIN_TOKEN, GatewayProcess

MODEL = "gpt-4.1-mini"  # priced by the built-in table
BODY = json.dumps({"model": MODEL, "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}).encode()
SWEEP_S = 1.0
UPSTREAM_TIMEOUT_S = 5.0


def _sql(database_url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(asyncpg_dsn(database_url))
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()
    return asyncio.run(run())


@pytest.fixture(scope="module")
def sweeper(database_url, upstream):
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_RESERVATION_SWEEP_S=str(SWEEP_S)) as gw:
        yield gw


def _setup(gw: GatewayProcess) -> tuple[httpx.Client, str, str, str]:
    api = httpx.Client(base_url=gw.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    budget = f"hold-{secrets.token_hex(3)}"
    assert api.post("/admin/budgets", json={"id": budget, "cost_limit_usd": 60, "window": "day"}).status_code == 201
    r = api.post("/admin/tasks", json={"budget": budget})  # no ceiling of its own: the budget's reserves
    return api, budget, r.json()["id"], r.json()["token"]


def _reserved(api: httpx.Client, budget: str) -> Decimal:
    return Decimal(str(api.get(f"/admin/budgets/{budget}").json()["current"]["reserved_usd"]))


def test_a_killed_gateways_budget_hold_is_released_after_its_deadline(database_url, upstream, sweeper) -> None:
    api, budget, task_id, token = _setup(sweeper)
    upstream.script("delay", delay_s=120.0, input_tokens=10, output_tokens=10)
    victim = GatewayProcess(database_url, upstream.base_url, TASKGATE_RESERVATION_SWEEP_S="0",
                            TASKGATE_UPSTREAM_TIMEOUT_S=str(UPSTREAM_TIMEOUT_S)).start()
    try:
        threading.Thread(target=lambda: _post_quietly(victim.url, token), daemon=True).start()
        deadline = time.monotonic() + 10
        while not (rows := _sql(database_url, "SELECT * FROM reservations WHERE task_id = $1", task_id)):
            assert time.monotonic() < deadline, "no hold was recorded"
            time.sleep(0.05)
        hold = rows[0]
        assert hold["budget_ids"] == [budget] and _reserved(api, budget) == hold["amount_usd"] > 0
    finally:
        victim.proc.kill()  # kill -9: nothing settles
        victim.proc.wait()
    time.sleep(2 * SWEEP_S)
    assert _reserved(api, budget) == hold["amount_usd"]  # held until the deadline, never released early
    waited = time.monotonic() + UPSTREAM_TIMEOUT_S + 15
    while _reserved(api, budget) != 0:
        assert time.monotonic() < waited, "the budget's hold was never released"
        time.sleep(0.2)
    assert _sql(database_url, "SELECT 1 FROM reservations WHERE task_id = $1", task_id) == []
    task = api.get(f"/admin/tasks/{task_id}").json()
    assert Decimal(str(task["reserved_usd"])) == 0 and task["status"] == "active"


def _post_quietly(url: str, token: str) -> None:
    try:
        httpx.post(url + "/v1/chat/completions", content=BODY, timeout=60,
                   headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
    except httpx.HTTPError:
        pass  # the gateway was killed under it


def test_a_settled_request_releases_its_budget_hold_once(database_url, upstream, sweeper) -> None:
    api, budget, task_id, token = _setup(sweeper)
    upstream.script("text", input_tokens=10, output_tokens=10)
    for _ in range(3):
        r = httpx.post(sweeper.url + "/v1/chat/completions", content=BODY, timeout=30,
                       headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while _reserved(api, budget) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    current = api.get(f"/admin/budgets/{budget}").json()["current"]
    assert current["reserved_usd"] == 0 and current["admitted_requests"] == 3 and current["total_tokens"] == 60
    assert Decimal(str(current["cost_usd"])) == Decimal(str(api.get(f"/admin/tasks/{task_id}").json()["cost_usd"])) > 0
    assert _sql(database_url, "SELECT 1 FROM reservations WHERE task_id = $1", task_id) == []
