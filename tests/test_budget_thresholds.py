"""Warning thresholds of a budget (issue 38 item 1), on real PostgreSQL and real gateway
processes with the openai SDK as the agent and a loopback webhook receiver:

- crossing 50 % and 80 % of a request limit through 2 gateways sends one webhook each
  (with the budget, window, limit, spent, held and a sentence), one ``threshold`` row in
  the budget's events, a ``taskgate_budget_used_fraction`` gauge and the crossings in the
  admin API; the next window announces them again, once;
- a 100 % crossing says when the window resets;
- eight concurrent checks on one crossing announce it once (the insert decides);
- thresholds outside 0–100, repeated or too many: 422.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Iterator

import httpx
import openai
import pytest

from app import events
from app.budgets import thresholds
from app.budgets.thresholds import Usage, crossed, sentence
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess, started
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(300)
DAY_S = 86_400


@pytest.fixture(scope="module")
def receiver() -> Receiver:
    return Receiver()


@pytest.fixture(scope="module")
def pair(database_url, upstream, receiver) -> Iterator[list[GatewayProcess]]:
    """Two gateways posting to the receiver, and a third one a day ahead (the next window)."""
    hooked = {"TASKGATE_STOP_WEBHOOK_URL": receiver.url}
    with started([GatewayProcess(database_url, upstream.base_url, **hooked),
                  GatewayProcess(database_url, upstream.base_url, **hooked),
                  GatewayProcess(database_url, upstream.base_url, TASKGATE_CLOCK_OFFSET_S=str(DAY_S),
                                 **hooked)]) as procs:
        yield procs


def _budget(admin: Admin, **body: object) -> str:
    r = admin.http.post("/admin/budgets", json={"id": f"t-{secrets.token_hex(4)}", **body})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(url: str, token: str) -> None:
    openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}])


def _posts(receiver: Receiver, budget: str) -> list[dict]:
    return [p["body"] for p in receiver.posts if p["body"].get("budget_id") == budget
            and p["body"]["event"] == "budget.threshold"]


def _wait_posts(receiver: Receiver, budget: str, count: int, timeout: float = 15) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(_posts(receiver, budget)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return _posts(receiver, budget)


def test_crossing_80_percent_sends_one_webhook_per_window_with_the_numbers(pair, receiver):
    a, b, tomorrow = pair
    admin = Admin(a.url)
    budget = _budget(admin, window="day", request_limit=20)
    tokens = [admin.create_task(budget=budget, request_limit=100)[1] for _ in range(2)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: _ask((a, b)[i % 2].url, tokens[i % 2]), range(17)))  # 85 %
    posts = _wait_posts(receiver, budget, 2)
    time.sleep(3)  # both gateways checked again, several times
    posts = _posts(receiver, budget)
    assert sorted(p["threshold"] for p in posts) == [50, 80], posts
    eighty = next(p for p in posts if p["threshold"] == 80)
    assert eighty["limit"] == "request_limit" and eighty["limit_value"] == 20
    assert 16 <= eighty["spent"] <= 17 and eighty["held"] >= 0 and eighty["fraction"] == eighty["spent"] / 20
    start = datetime.fromisoformat(eighty["window_start"])
    assert start.hour == 0 and datetime.fromisoformat(eighty["resets_at"]) == start + timedelta(days=1)
    assert re.match(rf"Budget '{budget}' has used 80 % of its request_limit this window \(since .*\): "
                    rf"\d+ of 20 requests admitted", eighty["message"]), eighty["message"]
    assert f"It resets at {eighty['resets_at'][:19]}Z." in eighty["message"]
    assert eighty["text"].startswith("taskgate: Budget")
    history = [e for e in admin.http.get(f"/admin/budgets/{budget}/events").json()["data"]
               if e["kind"] == "threshold"]
    assert [(e["reason"], e["detail"]["threshold"]) for e in history] == [("request_limit", 50), ("request_limit", 80)]
    assert history[1]["detail"]["message"] == eighty["message"]
    current = admin.http.get(f"/admin/budgets/{budget}").json()
    assert [(w["limit"], w["threshold"]) for w in current["current"]["warnings"]] == [
        ("request_limit", 50), ("request_limit", 80)]
    assert current["thresholds"] == [50, 80, 95]
    gauges = [httpx.get(gw.url + "/metrics").text for gw in (a, b)]
    line = f'taskgate_budget_used_fraction{{budget="{budget}",limit="request_limit"}} 0.85'
    assert any(line in g for g in gauges), [g for g in gauges[0].splitlines() if budget in g]

    for _ in range(10):  # tomorrow: a new window, announced again, once
        _ask(tomorrow.url, tokens[0])
    posts = _wait_posts(receiver, budget, 3)
    time.sleep(2)
    later = [p for p in _posts(receiver, budget) if p["window_start"] != eighty["window_start"]]
    assert [p["threshold"] for p in later] == [50], _posts(receiver, budget)
    assert datetime.fromisoformat(later[0]["window_start"]) == start + timedelta(days=1)


def test_a_100_percent_crossing_says_when_the_window_resets(pair, receiver):
    a, _, _ = pair
    admin = Admin(a.url)
    budget = _budget(admin, window="month", request_limit=4, thresholds=[100])
    _, token = admin.create_task(budget=budget)
    for _ in range(4):
        _ask(a.url, token)
    [post] = _wait_posts(receiver, budget, 1)
    assert post["threshold"] == 100 and post["spent"] == 4
    assert "has used 100 % of its request_limit" in post["message"]
    assert "Its tasks are refused until it has room again. It resets at" in post["message"]
    assert post["resets_at"] is not None and post["resets_at"][:10] in post["message"]


async def test_concurrent_checks_announce_a_crossing_once(pool):
    """Eight checks at once, each on its own connection, over one window at 90 %: 50 and
    80 are announced once each, whatever the interleaving."""
    announced: list[events.BudgetThreshold] = []
    events.BUDGET_THRESHOLD.subscribe(announced.append)
    try:
        budget = f"c-{secrets.token_hex(4)}"
        await pool.execute("INSERT INTO budgets (id, request_limit) VALUES ($1, 10)", budget)
        await pool.execute("INSERT INTO budget_windows (budget_id, window_start, admitted_requests)"
                           " VALUES ($1, '1970-01-01', 9)", budget)
        now = datetime.now(timezone.utc)
        counts = await asyncio.gather(*(thresholds.check(pool, now, {}) for _ in range(8)))
    finally:
        events.BUDGET_THRESHOLD.unsubscribe(announced.append)
    mine = [e.threshold for e in announced if e.budget_id == budget]
    assert len(mine) == len(set(mine)) == sum(counts), (mine, counts)  # gateways running may announce some
    rows = await pool.fetch("SELECT detail FROM budget_events WHERE budget_id = $1 AND kind = 'threshold'", budget)
    assert sorted(r["detail"]["threshold"] for r in rows) == [50, 80]


@pytest.mark.parametrize("bad", [[0], [101], [-5], [float(i) for i in range(1, 12)], ["a"], [True], 80])
def test_thresholds_outside_0_to_100_are_refused(admin, bad):
    r = admin.http.post("/admin/budgets", json={"request_limit": 10, "thresholds": bad})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] and "thresholds" in r.json()["error"]["param"]
    budget = _budget(admin, request_limit=10)
    assert admin.http.patch(f"/admin/budgets/{budget}", json={"thresholds": bad}).status_code == 422


def test_thresholds_are_kept_changed_and_reset(admin):
    budget = _budget(admin, request_limit=10, thresholds=[95, 60.5, 95])
    assert admin.http.get(f"/admin/budgets/{budget}").json()["thresholds"] == [60.5, 95]
    assert admin.http.patch(f"/admin/budgets/{budget}", json={"thresholds": []}).json()["thresholds"] == []
    assert admin.http.patch(f"/admin/budgets/{budget}", json={"thresholds": None}).json()["thresholds"] == [
        50, 80, 95]


def _usage(limit: str, value: int | str, spent: int | str, held: int | str = 0,
           end: datetime | None = datetime(2027, 1, 1, tzinfo=timezone.utc)) -> Usage:
    return Usage("team-a", limit, Decimal(value), Decimal(spent), Decimal(held),
                 datetime(2026, 12, 1, tzinfo=timezone.utc), end)


def test_crossed_and_sentences():
    assert crossed(_usage("request_limit", 10_000, 8_012), (50, 80, 95), ["request_limit:50"]) == [80]
    assert crossed(_usage("request_limit", 10_000, 7_999), (50, 80, 95), []) == [50]
    assert crossed(_usage("token_limit", 1000, 1000), (100,), ["request_limit:100"]) == [100]
    assert crossed(_usage("cost_limit_usd", "200", "159.99"), (80,), []) == []
    assert sentence(_usage("request_limit", 10_000, 8_012, 312), 80) == (
        "Budget 'team-a' has used 80 % of its request_limit this window (since 2026-12-01T00:00:00Z): 8,012 of "
        "10,000 requests admitted (312 more leased to gateway processes). It resets at 2027-01-01T00:00:00Z.")
    assert sentence(_usage("cost_limit_usd", "200", "200", "1.2"), 100) == (
        "Budget 'team-a' has used 100 % of its cost_limit_usd this window (since 2026-12-01T00:00:00Z): $200.00 "
        "of $200.00 settled ($1.20 held by requests in flight). Its tasks are refused until it has room again. "
        "It resets at 2027-01-01T00:00:00Z.")
    assert sentence(_usage("token_limit", 1000, 512, end=None), 50) == (
        "Budget 'team-a' has used 50 % of its token_limit in its lifetime: 512 of 1,000 tokens reported. It has "
        "no window: only a higher limit makes room.")


def test_cli_sets_and_shows_thresholds(gateway):
    from click.testing import CliRunner

    from app.cli import main

    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    budget = f"cli-{secrets.token_hex(3)}"
    run = lambda *args: CliRunner().invoke(main, list(args), env=env)  # noqa: E731
    made = run("budgets", "create", "--id", budget, "--request-limit", "10", "--thresholds", "90,60")
    assert made.exit_code == 0 and "60 %, 90 %" in made.output, made.output
    assert run("budgets", "update", budget, "--thresholds", "none", "--json").output.count('"thresholds": []') == 1
    assert "50 %, 80 %, 95 %" in run("budgets", "update", budget, "--thresholds", "default").output
    bad = run("budgets", "update", budget, "--thresholds", "120")
    assert bad.exit_code != 0 and "thresholds" in bad.output
