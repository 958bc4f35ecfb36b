"""Admission against fleet budgets on real PostgreSQL, through three real gateway
processes (one of them through PgBouncer in transaction mode) and a loopback upstream:
exact request ceilings over many tasks, nested dollar ceilings settled within each
ceiling, refusals that never latch a task, and a month window that rolls over."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Iterator
from zoneinfo import ZoneInfo

import httpx
import pytest

from app.testing.upstream import UpstreamServer
from tests.pgbouncer import NOT_INSTALLED, pgbouncer, pgbouncer_binary
from tests.support import ADMIN_TOKEN, GatewayProcess, priced_config, sql, started

pytestmark = [pytest.mark.skipif(pgbouncer_binary() is None, reason=NOT_INSTALLED), pytest.mark.timeout(900)]

MODEL = "budget-model"  # $100 per MTok in and out: a small request reserves about $0.12
#: Generous timeouts: a burst queues on one budget's window row on a loaded 2-core machine,
#: and 1,800 connections opened at once may wait seconds for their first byte to be read.
SLOW_OK = {"TASKGATE_DATABASE_TIMEOUT_S": "60", "TASKGATE_HEADER_TIMEOUT_S": "120",
           "TASKGATE_BODY_TIMEOUT_S": "120", "TASKGATE_FIRST_BYTE_TIMEOUT_S": "120"}


@pytest.fixture(scope="module")
def config_path(priced_upstream: UpstreamServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return priced_config(tmp_path_factory.mktemp("budget-config"), priced_upstream.base_url, MODEL, 100)


@pytest.fixture(scope="module")
def gateways(database_url: str, priced_upstream: UpstreamServer, config_path: Path) -> Iterator[list[GatewayProcess]]:
    """Two gateways straight on PostgreSQL, one through PgBouncer (transaction mode)."""
    with pgbouncer(database_url) as bounced, started(
            [GatewayProcess(url, priced_upstream.base_url, TASKGATE_CONFIG=str(config_path), **SLOW_OK)
             for url in (database_url, database_url, bounced)]) as procs:
        yield procs


def _admin(gw: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=gw.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})


def _budget(api: httpx.Client, **body: object) -> str:
    r = api.post("/admin/budgets", json={"id": f"b-{secrets.token_hex(4)}", **body})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _task(api: httpx.Client, **body: object) -> tuple[str, str]:
    r = api.post("/admin/tasks", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["token"]


def _chat(i: int, max_tokens: int = 100) -> dict:
    return {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": f"job {i}"}]}


async def _storm(jobs: list[tuple[str, str]]) -> list[httpx.Response]:
    """POST one chat completion per ``(gateway url, token)``, all at once."""
    limits = httpx.Limits(max_connections=len(jobs), max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        return await asyncio.gather(*(
            client.post(url + "/v1/chat/completions", json=_chat(i), headers={"authorization": f"Bearer {token}"})
            for i, (url, token) in enumerate(jobs)))


def _settled(api: httpx.Client, budget_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        budget = api.get(f"/admin/budgets/{budget_id}").json()
        if budget["current"]["reserved_usd"] == 0 or time.monotonic() > deadline:
            return budget
        time.sleep(0.1)


def test_three_gateways_admit_exactly_the_budgets_request_limit_over_200_tasks(gateways, priced_upstream) -> None:
    api = _admin(gateways[0])
    budget = _budget(api, request_limit=250)
    tokens = [_task(api, budget=budget, request_limit=100)[1] for _ in range(200)]
    jobs = [(gw.url, tokens[(g * 600 + i) % 200]) for g, gw in enumerate(gateways) for i in range(600)]
    responses = asyncio.run(_storm(jobs))
    counts: dict[int, int] = {}
    for r in responses:
        counts[r.status_code] = counts.get(r.status_code, 0) + 1
    assert counts == {200: 250, 400: 1550}, (counts, [gw.errors() for gw in gateways])
    assert len([r for r in priced_upstream.requests if r.method == "POST"]) == 250
    refused = next(r for r in responses if r.status_code == 400)
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("budget_exhausted", "budget_exhausted")
    assert f"Budget '{budget}'" in error["message"] and "request_limit" in error["message"]
    assert refused.headers["x-should-retry"] == "false" and refused.headers["x-taskgate-budget"] == budget
    tasks = api.get("/admin/tasks", params={"budget": budget, "limit": 1000}).json()["data"]
    assert len(tasks) == 200 and {t["status"] for t in tasks} == {"active"}  # never latched
    assert sum(t["admitted_requests"] for t in tasks) == 250
    assert sum(t["refused_requests"] for t in tasks) == 0  # not counted
    assert api.get(f"/admin/budgets/{budget}").json()["current"]["admitted_requests"] == 250
    for gw in gateways:
        assert "Traceback" not in gw.output() and "prepared statement" not in gw.output()


def test_nested_request_limits_on_escrow_leases_admit_exactly_the_team_limit(gateways, priced_upstream,
                                                                               database_url) -> None:
    api = _admin(gateways[2])
    team = _budget(api, request_limit=300)
    project = _budget(api, parent=team, request_limit=200)
    in_project = [_task(api, budget=project, request_limit=1000)[1] for _ in range(50)]
    in_team = [_task(api, budget=team, request_limit=1000)[1] for _ in range(50)]
    jobs = [(gw.url, (in_project if i % 2 else in_team)[(g * 7 + i) % 50]) for g, gw in enumerate(gateways)
            for i in range(300)]
    responses = asyncio.run(_storm(jobs))
    counts: dict[int, int] = {}
    for r in responses:
        counts[r.status_code] = counts.get(r.status_code, 0) + 1
    assert counts == {200: 300, 400: 600}, (counts, [gw.errors() for gw in gateways])
    assert len([r for r in priced_upstream.requests if r.method == "POST"]) == 300
    team_now = api.get(f"/admin/budgets/{team}").json()["current"]
    project_now = api.get(f"/admin/budgets/{project}").json()["current"]
    assert team_now["admitted_requests"] == 300 and project_now["admitted_requests"] <= 200
    tasks = api.get("/admin/tasks", params={"budget": project, "limit": 1000}).json()["data"]
    assert sum(t["admitted_requests"] for t in tasks) == project_now["admitted_requests"]
    leases = sql(database_url, "SELECT count(DISTINCT split_part(holder, ':', 2)) FROM budget_leases"
                 " WHERE budget_id = $1", team)[0][0]
    assert leases >= 3  # leases of each gateway's slots paid for the requests


def test_nested_dollar_ceilings_settle_within_each_ceiling(gateways, priced_upstream) -> None:
    api = _admin(gateways[1])
    team = _budget(api, cost_limit_usd=1.5)
    project = _budget(api, parent=team, cost_limit_usd=1.0)
    in_project = [_task(api, budget=project)[1] for _ in range(5)]
    in_team = [_task(api, budget=team)[1] for _ in range(5)]
    priced_upstream.script("delay", delay_s=0.2, input_tokens=1000, output_tokens=0)  # settles at $0.10
    jobs = [(gateways[i % 3].url, (in_project if i % 2 else in_team)[i % 5]) for i in range(60)]
    responses = asyncio.run(_storm(jobs))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 400}, [r.text for r in responses if r.status_code not in (200, 400)]
    codes = {r.json()["error"]["code"] for r in responses if r.status_code == 400}
    assert codes == {"budget_exhausted"}
    team_now, project_now = _settled(api, team), _settled(api, project)
    assert team_now["current"]["reserved_usd"] == 0 and project_now["current"]["reserved_usd"] == 0
    project_cost = Decimal(str(project_now["current"]["cost_usd"]))
    team_cost = Decimal(str(team_now["current"]["cost_usd"]))
    assert project_cost <= Decimal("1.0") and team_cost <= Decimal("1.5")
    # every refusal came from a truly reached ceiling (worst case about $0.12): the team's
    # ($1.40 settled or more) or the project's ($0.90 or more), never from dollars held
    assert team_cost >= Decimal("1.4") or project_cost >= Decimal("0.9")
    assert statuses.count(200) == len([r for r in priced_upstream.requests if r.method == "POST"])
    assert Decimal(statuses.count(200)) * Decimal("0.1") == team_cost  # the team's window holds all spend
    tasks = api.get("/admin/tasks", params={"budget": project}).json()["data"]
    assert sum(Decimal(str(t["cost_usd"])) for t in tasks) == project_cost
    assert {t["status"] for t in tasks} == {"active"}


def test_an_exhausted_budget_does_not_latch_and_goes_on_when_raised(gateways, priced_upstream) -> None:
    api = _admin(gateways[0])
    budget = _budget(api, request_limit=2)
    task_id, token = _task(api, budget=budget)
    headers = {"authorization": f"Bearer {token}"}
    statuses = [httpx.post(gateways[i % 3].url + "/v1/chat/completions", json=_chat(i), headers=headers,
                           timeout=30).status_code for i in range(3)]
    assert statuses == [200, 200, 400]
    task = api.get(f"/admin/tasks/{task_id}").json()
    assert (task["status"], task["admitted_requests"], task["refused_requests"]) == ("active", 2, 0)
    assert api.patch(f"/admin/budgets/{budget}", json={"request_limit": 3}).status_code == 200
    ok = httpx.post(gateways[2].url + "/v1/chat/completions", json=_chat(9), headers=headers, timeout=30)
    assert ok.status_code == 200, ok.text


def test_a_month_window_rolls_over(gateways, database_url, priced_upstream, config_path) -> None:
    api = _admin(gateways[0])
    budget = _budget(api, request_limit=3, window="month", timezone="Europe/Berlin")
    task_id, token = _task(api, budget=budget)
    headers = {"authorization": f"Bearer {token}"}

    def post(gw: GatewayProcess) -> httpx.Response:
        return httpx.post(gw.url + "/v1/chat/completions", json=_chat(0), headers=headers, timeout=30)

    assert [post(gateways[0]).status_code for _ in range(3)] == [200, 200, 200]
    refused = post(gateways[1])
    assert refused.status_code == 400, refused.text
    resets_at = datetime.fromisoformat(refused.headers["x-taskgate-budget-resets-at"].replace("Z", "+00:00"))
    current = api.get(f"/admin/budgets/{budget}").json()["current"]
    assert datetime.fromisoformat(current["resets_at"].replace("Z", "+00:00")) == resets_at
    local = resets_at.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.day, local.hour, local.minute) == (1, 0, 0)  # midnight of the 1st, Berlin time
    assert "resets at" in refused.json()["error"]["message"]
    offset = (resets_at - datetime.now(resets_at.tzinfo)).total_seconds() + 60  # a minute into next month
    with GatewayProcess(database_url, priced_upstream.base_url, TASKGATE_CONFIG=str(config_path),
                        TASKGATE_CLOCK_OFFSET_S=str(offset)) as later:
        assert [post(later).status_code for _ in range(4)] == [200, 200, 200, 400]
        next_refusal = post(later)
        assert next_refusal.headers["x-taskgate-budget-resets-at"] != refused.headers["x-taskgate-budget-resets-at"]
        seen_later = _admin(later).get(f"/admin/budgets/{budget}").json()
        assert seen_later["current"]["admitted_requests"] == 3
        assert [w["admitted_requests"] for w in seen_later["windows"]] == [3]  # last month, kept
        assert seen_later["windows"][0]["window_end"] == seen_later["current"]["window_start"]
    assert post(gateways[0]).status_code == 400  # a gateway still in the old month refuses: never over
    task = api.get(f"/admin/tasks/{task_id}").json()
    assert (task["status"], task["admitted_requests"]) == ("active", 6)
