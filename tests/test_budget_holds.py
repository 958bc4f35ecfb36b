"""A budget's dollar holds survive ``kill -9`` of a gateway: the hold's row names the
budget windows it reserved in, and the sweeper releases them there too once past the
request's deadline (never before); a request that settles releases them itself, once.
Real gateway processes, real PostgreSQL."""

from __future__ import annotations

import secrets
import time
from decimal import Decimal

import httpx

from tests.holds import SWEEP_S, hold_then_kill, post, sweeper  # noqa: F401 - fixture
from tests.support import ADMIN_TOKEN, GatewayProcess, sql

UPSTREAM_TIMEOUT_S = 5.0


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
    with hold_then_kill(database_url, upstream, task_id, token,
                        TASKGATE_UPSTREAM_TIMEOUT_S=str(UPSTREAM_TIMEOUT_S)) as (_, hold):
        assert hold["budget_ids"] == [budget] and _reserved(api, budget) == hold["amount_usd"] > 0
    time.sleep(2 * SWEEP_S)
    assert _reserved(api, budget) == hold["amount_usd"]  # held until the deadline, never released early
    waited = time.monotonic() + UPSTREAM_TIMEOUT_S + 15
    while _reserved(api, budget) != 0:
        assert time.monotonic() < waited, "the budget's hold was never released"
        time.sleep(0.2)
    assert sql(database_url, "SELECT 1 FROM reservations WHERE task_id = $1", task_id) == []
    task = api.get(f"/admin/tasks/{task_id}").json()
    assert Decimal(str(task["reserved_usd"])) == 0 and task["status"] == "active"


def test_a_settled_request_releases_its_budget_hold_once(database_url, upstream, sweeper) -> None:
    api, budget, task_id, token = _setup(sweeper)
    upstream.script("text", input_tokens=10, output_tokens=10)
    for _ in range(3):
        r = post(sweeper.url, token, timeout=30)
        assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while _reserved(api, budget) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    current = api.get(f"/admin/budgets/{budget}").json()["current"]
    assert current["reserved_usd"] == 0 and current["admitted_requests"] == 3 and current["total_tokens"] == 60
    assert Decimal(str(current["cost_usd"])) == Decimal(str(api.get(f"/admin/tasks/{task_id}").json()["cost_usd"])) > 0
    assert sql(database_url, "SELECT 1 FROM reservations WHERE task_id = $1", task_id) == []
