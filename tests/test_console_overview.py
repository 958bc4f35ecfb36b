"""The fleet view: the request log (one row per relayed response, written in batches by
the console), ``GET /admin/stats`` bucketed in SQL, ``GET /admin/tasks/{id}/requests``,
and the overview and task pages in real headless Chromium with real data: charts drawn by
the vendored uPlot, no ``null``/``undefined``/``NaN`` on the page, no console error, no
resource from anywhere but the gateway."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import openai
import pytest

from app.admin.stats import MAX_BUCKETS, period
from tests.browser import NULLISH, console_errors, css, css_all, login, only_local_resources, wait
from tests.support import ADMIN_TOKEN
from tests.test_loop_guard_e2e import chat_agent

DOCS = Path(__file__).resolve().parent.parent / "docs"
USER = [{"role": "user", "content": "hi"}]


def _requests_of(admin, task_id: str, n: int, timeout: float = 15) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = admin.http.get(f"/admin/tasks/{task_id}/requests").json()["data"]
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_period_defaults_and_bounds():
    now = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    since, until, step, n = period(None, None, None, now)
    assert (until - since, step, n) == (timedelta(hours=1), 60, 60)
    assert period(now - timedelta(days=7), now, 3 * 3600, now)[3] == 56
    naive = datetime(2026, 12, 1, 11)
    assert period(naive, None, None, now)[0] == naive.replace(tzinfo=timezone.utc)
    assert period(now, now - timedelta(seconds=1), None, now)[3] == 0  # ends before it starts: empty
    assert period(now - timedelta(seconds=2 * MAX_BUCKETS), now, 1, now)[2:] == (2, MAX_BUCKETS)  # step raised
    assert period(None, datetime(1, 1, 1, 0, 30, tzinfo=timezone.utc), None, now)[0].year == 1  # no overflow


@pytest.fixture(scope="module")
def fleet(page_gateway, page_admin, upstream):
    """Traffic of this test only (the period starts now): a task with a dollar ceiling and
    priced requests, one stopped by the loop guard, one stopped by its request limit."""
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    pid = os.getpid()
    spender, token = page_admin.create_task(id=f"ov-spend-{pid}", request_limit=50, cost_limit_usd=5)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(3):
        client.chat.completions.create(model="gpt-4o-mini", messages=USER, max_tokens=64)
    free, token = page_admin.create_task(id=f"ov-free-{pid}")
    openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="mock-model", messages=USER)
    looped, token = page_admin.create_task(id=f"ov-loop-{pid}", request_limit=20)
    upstream.script("tool_call")
    step = chat_agent(page_gateway, token, stream=True)
    with pytest.raises(openai.APIStatusError):
        for _ in range(12):
            step()
    upstream.reset()
    limited, token = page_admin.create_task(id=f"ov-limit-{pid}", request_limit=1)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    client.chat.completions.create(model="mock-model", messages=USER)
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="mock-model", messages=USER)
    assert len(_requests_of(page_admin, spender, 3)) == 3
    assert len(_requests_of(page_admin, free, 1)) == 1
    assert len(_requests_of(page_admin, looped, 5)) == 5
    assert len(_requests_of(page_admin, limited, 1)) == 1
    return start, spender, looped, limited


def test_request_log_and_stats(page_admin, fleet):
    start, spender, looped, limited = fleet
    rows = _requests_of(page_admin, spender, 3)
    assert [r["model"] for r in rows] == ["gpt-4o-mini"] * 3
    assert rows[0]["id"] > rows[1]["id"] > rows[2]["id"]  # newest first
    task = page_admin.task(spender)
    assert sum(r["cost_usd"] or 0 for r in rows) == pytest.approx(task["cost_usd"], rel=1e-6)
    assert sum(r["input_tokens"] + r["output_tokens"] for r in rows) == task["total_tokens"]
    assert all(r["endpoint"] == "/v1/chat/completions" and r["status"] == 200 and r["outcome"] == "completed"
               and r["request_id"] and r["duration_ms"] > 0 and r["provider"] == "openai" for r in rows)
    until = datetime.now(timezone.utc) + timedelta(seconds=1)
    stats = page_admin.http.get("/admin/stats", params={"since": start.isoformat(), "until": until.isoformat(),
                                                   "step": 5}).json()
    assert len(stats["buckets"]) == len(next(iter(stats["requests"].values())))
    assert stats["totals"]["requests"] == 3 + 1 + 5 + 1
    assert sum(stats["requests"]["gpt-4o-mini"]) == 3 and sum(stats["requests"]["mock-model"]) == 7
    assert stats["totals"]["cost_usd"] == pytest.approx(task["cost_usd"], rel=1e-6)
    assert sum(stats["stops"]["repeated_tool_call"]) == 1 and sum(stats["stops"]["request_limit"]) == 1
    assert stats["top_by_cost"][0]["task_id"] == spender
    assert stats["top_by_requests"][0] == {"task_id": looped, "requests": 5,
                                           "tokens": page_admin.task(looped)["total_tokens"], "cost_usd": 0.0}
    stopped = {s["id"]: s for s in stats["stopped"]}
    assert set(stopped) == {looped, limited}
    assert stopped[limited]["stop_message"] == page_admin.task(limited)["stop_message"]
    for params in ({"since": start.isoformat(), "step": 0}, {"until": "0.5"}):  # a number is no date-time
        r = page_admin.http.get("/admin/stats", params=params)
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    assert page_admin.http.get("/admin/tasks/no-such-task/requests").status_code == 404


def test_overview_and_task_pages_render_real_data(page_gateway, page_admin, fleet, driver):
    start, spender, looped, limited = fleet
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + "/ui/#/")
    wait(driver, lambda d: css_all(d, "#chart-requests canvas") and css_all(d, "#chart-dollars canvas"),
          "the charts")
    wait(driver, lambda d: css_all(d, f'#stopped tr[data-task="{looped}"]'), "the stopped tasks")
    text = css(driver, "main").text
    assert not NULLISH.search(text), text
    assert page_admin.task(limited)["stop_message"] in css(driver, "#stopped").text
    assert css_all(driver, f'#top-cost tr[data-task="{spender}"]')
    assert "gpt-4o-mini" in css(driver, "#chart-requests").text  # the legend
    only_local_resources(driver, page_gateway.url)
    assert console_errors(driver) == []  # docs/dashboard-overview.png: tests/test_dashboard_first_hour.py
    # the looped task: requests, and the streak that stopped it marked in the ledger
    driver.get(f"{page_gateway.url}/ui/#/task/{looped}")
    wait(driver, lambda d: len(css_all(d, "#requests tbody tr")) == 5, "the request timeline")
    culprits = css_all(driver, "#tool-calls tr.culprit")
    assert len(culprits) == 5 and "×5" in culprits[-1].text
    text = css(driver, "main").text
    assert not NULLISH.search(text), text
    assert console_errors(driver) == []
    if os.environ.get("TASKGATE_UPDATE_SCREENSHOTS"):
        driver.save_screenshot(str(DOCS / "dashboard-task.png"))
        driver.get(f"{page_gateway.url}/ui/#/task/{spender}")
        wait(driver, lambda d: len(css_all(d, "#requests tbody tr")) == 3, "the spender's requests")
        driver.save_screenshot(str(DOCS / "dashboard-dollars.png"))
    assert httpx.get(page_gateway.url + "/ui/vendor/uplot/LICENSE").status_code == 200
