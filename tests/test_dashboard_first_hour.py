"""The dashboard's first-hour rough edges (issue 40, item 3), in real headless Chromium on a
gateway with a database of its own:

- the overview's legends show values (each series' total for the period, or its value in
  the bucket under the cursor), never ``--`` blanks;
- the default period fits the data (``GET /admin/stats?fit=true``: from just before the
  first request or stop), so fresh traffic is not a spike at the right edge;
- the task list's time column: how long a stopped task ran, to its stop ("ran 2 min 5 s",
  "ran 0.2 s"), not a rounded 0 s; an active one's time since its first request;
- "leased requests" is explained where budgets show them;
- a budget's page lists its keys and creates one (shown once, with the lines to export)
  and revokes one after a confirmation, through the admin API's key endpoints; the key works
  and then stops working.

With ``TASKGATE_UPDATE_SCREENSHOTS=1`` it refreshes docs/dashboard-overview.png,
docs/dashboard.png and docs/dashboard-budget.png from these pages.
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import openai
import pytest

from app.admin.stats import FIT_MIN, fitted
from tests.browser import NULLISH, console_errors, css, css_all, login, only_local_resources, wait
from tests.support import ADMIN_TOKEN, sql
from tests.test_loop_guard_e2e import chat_agent

DOCS = Path(__file__).resolve().parent.parent / "docs"
USER = [{"role": "user", "content": "hi"}]
SCREENSHOTS = bool(os.environ.get("TASKGATE_UPDATE_SCREENSHOTS"))


@pytest.fixture(scope="module")
def fleet(page_gateway, page_admin, upstream):
    """This module's traffic, all of it: gpt-4o-mini ×3 and mock-model ×2 on two tasks, a
    task stopped by the loop guard (5 more mock-model requests), a budget with a request
    limit only (its admissions lease requests) and a task drawing from it."""
    first = datetime.now(timezone.utc)
    pid = os.getpid()
    coder, token = page_admin.create_task(id=f"fh-coder-{pid}", request_limit=40, max_duration_s=3600)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(3):
        client.chat.completions.create(model="gpt-4o-mini", messages=USER)
    reviewer, token = page_admin.create_task(id=f"fh-reviewer-{pid}")
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(2):
        client.chat.completions.create(model="mock-model", messages=USER)
    looped, token = page_admin.create_task(id=f"fh-loop-{pid}", request_limit=20)
    upstream.script("tool_call")
    step = chat_agent(page_gateway, token, stream=False)
    with pytest.raises(openai.BadRequestError):
        for _ in range(12):
            step()
    upstream.reset()
    r = page_admin.http.post("/admin/budgets", json={"id": "team-a", "window": "month", "request_limit": 10_000})
    assert r.status_code == 201, r.text
    member, token = page_admin.create_task(id=f"fh-team-{pid}", budget="team-a")
    openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="gpt-4o-mini", messages=USER)
    deadline = time.monotonic() + 15  # the request log is written in batches, off the request path
    while page_admin.http.get("/admin/stats", params={"fit": "true"}).json()["totals"]["requests"] < 3 + 2 + 5 + 1:
        assert time.monotonic() < deadline, "the request log did not catch up"
        time.sleep(0.1)
    return {"first": first, "coder": coder, "reviewer": reviewer, "looped": looped, "member": member}


def _legend(driver, chart: str) -> dict[str, str]:
    """{label: value} of a chart's uPlot legend."""
    out = {}
    for row in css_all(driver, f"#{chart} .u-legend tr.u-series"):
        label = row.find_element("css selector", ".u-label").text
        out[label] = row.find_element("css selector", ".u-value").text
    return out


def test_fitted_period_is_pure_and_at_least_a_minute() -> None:
    until = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    assert fitted(until, None) is None  # no data: the default period
    since = fitted(until, until - timedelta(minutes=20))
    assert since is not None and until - since == timedelta(minutes=21)  # a twentieth of it before the first
    since = fitted(until, until - timedelta(seconds=3))
    assert since is not None and until - since == FIT_MIN * 21 / 20


def test_stats_fit_starts_just_before_the_first_request(page_admin, fleet) -> None:
    until = datetime.now(timezone.utc) + timedelta(seconds=1)
    fit = page_admin.http.get("/admin/stats", params={"fit": "true", "until": until.isoformat()}).json()
    week = page_admin.http.get("/admin/stats", params={"since": (until - timedelta(days=7)).isoformat(),
                                                  "until": until.isoformat()}).json()
    since = datetime.fromisoformat(fit["since"])
    first = min(datetime.fromisoformat(r["finished_at"]) for task in ("coder", "reviewer", "looped", "member")
                for r in page_admin.http.get(f"/admin/tasks/{fleet[task]}/requests").json()["data"])
    span = max(until - first, FIT_MIN)
    assert until - span * 21 / 20 - timedelta(seconds=1) <= since <= first, (since, first)
    assert fit["totals"] == week["totals"] and fit["totals"]["requests"] == 3 + 2 + 5 + 1  # nothing cut off
    assert 30 <= len(fit["buckets"]) <= 60  # about DEFAULT_BUCKETS (steps are whole seconds)
    nothing = page_admin.http.get("/admin/stats", params={"fit": "true", "until": "2001-01-01T00:00:00Z"}).json()
    assert datetime.fromisoformat(nothing["until"]) - datetime.fromisoformat(nothing["since"]) == timedelta(hours=1)


def test_overview_legends_show_values_and_the_period_fits_the_data(page_gateway, page_admin, fleet, driver) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + "/ui/#/")
    wait(driver, lambda d: css_all(d, "#chart-requests .u-legend .u-value"), "the requests chart")
    assert css(driver, "#period").get_attribute("value") == "fit"
    stats_calls = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/admin/stats'))")
    assert stats_calls and all("fit=true" in u for u in stats_calls), stats_calls
    legend = _legend(driver, "chart-requests")
    assert legend == {"time": "whole period", "gpt-4o-mini": "4", "mock-model": "7"}, legend
    assert _legend(driver, "chart-stops") == {"time": "whole period", "repeated_tool_call": "1"}
    dollars = _legend(driver, "chart-dollars")
    assert dollars["time"] == "whole period" and all(v.startswith("$") for k, v in dollars.items() if k != "time")
    for chart in ("chart-requests", "chart-tokens", "chart-dollars", "chart-stops"):
        assert "--" not in _legend(driver, chart).values(), chart
    assert "1 stop" in css(driver, "#totals").text and "1 stops" not in css(driver, "#totals").text
    # the cursor on the latest bucket: its time and each series' own value there, numbers not blanks
    plot = css(driver, "#chart-requests .u-over")
    ActionChains(driver).move_to_element_with_offset(plot, plot.size["width"] // 2 - 2, 0).perform()
    hovered = wait(driver, lambda d: (v := _legend(d, "chart-requests"))["time"] != "whole period" and v,
                    "the legend under the cursor")
    assert re.search(r"\d\d:\d\d", hovered["time"]) and all(re.fullmatch(r"\d+", hovered[m])
                                                            for m in ("gpt-4o-mini", "mock-model")), hovered
    ActionChains(driver).move_to_element(css(driver, "#totals")).perform()
    wait(driver, lambda d: _legend(d, "chart-requests")["time"] == "whole period", "the totals again")
    assert not NULLISH.search(css(driver, "main").text)
    only_local_resources(driver, page_gateway.url)
    assert console_errors(driver) == []
    if SCREENSHOTS:
        driver.save_screenshot(str(DOCS / "dashboard-overview.png"))


def test_task_list_time_column_says_how_long_a_stopped_task_ran(page_gateway, page_admin, fleet, driver) -> None:
    pid = os.getpid()
    slow, token = page_admin.create_task(id=f"fh-slow-{pid}")
    openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="mock-model", messages=USER)
    assert page_admin.http.post(f"/admin/tasks/{slow}/stop", json={"reason": "manual"}).status_code == 200
    # it ran 2 min 5 s before the stop (as if its first request were earlier)
    sql(page_gateway.env["TASKGATE_DATABASE_URL"],
        "UPDATE tasks SET first_admitted_at = stopped_at - interval '125 seconds' WHERE id = $1", slow)
    looped = page_admin.task(fleet["looped"])
    ran = (datetime.fromisoformat(looped["stopped_at"]) - datetime.fromisoformat(looped["first_admitted_at"]))
    login(driver, page_gateway.url, ADMIN_TOKEN)
    time_of = lambda d, task: css(d, f'tr[data-task="{task}"] [data-meter="time"] small').text  # noqa: E731
    wait(driver, lambda d: time_of(d, slow) == "ran 2 min 5 s", "the slow task's time")
    shown = time_of(driver, fleet["looped"])
    assert re.fullmatch(r"ran \d(\.\d+)? s", shown) and shown != "ran 0 s", shown
    # the page's own duration() of the API's two instants; either side of a rounding edge
    # (the timestamps the API shows and the page reads may differ in their last digit)
    expected = {driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('/ui/lib.js').then((m) => done(m.duration(arguments[0])));", ran.total_seconds() + edge)
        for edge in (-0.005, 0, 0.005)}
    assert shown.removeprefix("ran ") in expected, (shown, expected)
    coder = time_of(driver, fleet["coder"])
    assert coder.startswith("time ") and coder.endswith(" / 1 h"), coder  # active: since its first request
    assert css(driver, f'tr[data-task="{slow}"] [data-meter="time"]').get_attribute("title") \
        == "from its first admitted request to its stop"
    driver.refresh()  # a stopped task's time does not move
    wait(driver, lambda d: time_of(d, slow) == "ran 2 min 5 s", "the same after a refresh")
    assert console_errors(driver) == []
    if SCREENSHOTS:
        driver.save_screenshot(str(DOCS / "dashboard.png"))


def test_leased_requests_are_explained(page_gateway, page_admin, fleet, driver) -> None:
    leased = page_admin.http.get("/admin/budgets/team-a").json()["current"]["leased_requests"]
    assert leased > 0  # the member's admission took a lease
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + "/ui/#/budgets")
    row = wait(driver, lambda d: css(d, 'tr[data-budget="team-a"]'), "the budget's row")
    assert f"requests 1 / 10,000 (+{leased:,} leased)" in row.text, row.text
    note = css(driver, "#leased-note").text
    assert "Leased: requests this budget set aside for the gateway processes in advance" in note
    assert "leased requests" not in row.text  # not also as a raw field name
    driver.get(page_gateway.url + "/ui/#/budget/team-a")
    facts = wait(driver, lambda d: css(d, "#budget-facts"), "the budget's facts").text
    assert f"leased requests {leased:,}: requests set aside in advance for the gateway processes" in facts, facts
    assert console_errors(driver) == []


def _key_row(driver, key_id: str):
    return css(driver, f'#keys tr[data-key="{key_id}"]')


def test_budget_page_lists_creates_and_revokes_keys(page_gateway, page_admin, fleet, driver) -> None:
    made = page_admin.http.post("/admin/budgets/team-a/keys", json={"template": {"request_limit": 9}})
    assert made.status_code == 201  # one made elsewhere (the CLI's way): listed too
    cli_key = made.json()["id"]
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + "/ui/#/budget/team-a")
    wait(driver, lambda d: "9 requests" in _key_row(d, cli_key).text, "the key made by the API")
    assert "active" in _key_row(driver, cli_key).text
    # create: each run's task limits
    css(driver, '#key-form input[name="request_limit"]').send_keys("5")
    css(driver, '#key-form input[name="cost_limit_usd"]').send_keys("2")
    css(driver, "#create-key").click()
    exports = wait(driver, lambda d: css(d, "#new-key-exports"), "the new key").text
    keys = page_admin.http.get("/admin/budgets/team-a/keys").json()["data"]
    new = next(k for k in keys if k["id"] != cli_key)
    assert new["template"] == {"request_limit": 5, "cost_limit_usd": 2.0} and new["revoked_at"] is None
    secret = re.search(r"OPENAI_API_KEY=(\S+)", exports).group(1)
    assert f"export OPENAI_BASE_URL={page_gateway.url}/v1 OPENAI_API_KEY={secret}" in exports
    assert f"export ANTHROPIC_BASE_URL={page_gateway.url} ANTHROPIC_API_KEY={secret}" in exports
    assert "shown only now" in css(driver, "#new-key").text
    assert "5 requests · $2.00" in _key_row(driver, new["id"]).text
    if SCREENSHOTS:
        driver.save_screenshot(str(DOCS / "dashboard-budget.png"))
    ask = lambda: httpx.post(page_gateway.url + "/v1/chat/completions",  # noqa: E731
                             headers={"authorization": f"Bearer {secret}", "x-taskgate-run": "ui-run"},
                             json={"model": "gpt-4o-mini", "messages": USER}, timeout=30)  # priced
    assert ask().status_code == 200  # the key works: its run got a task
    # the refresh keeps the key until it is dismissed
    wait(driver, lambda d: secret in css(d, "#new-key-exports").text and css_all(d, "#dismiss-key"), "the key")
    css(driver, "#dismiss-key").click()
    wait(driver, lambda d: not css_all(d, "#new-key"), "the key dismissed")
    assert secret not in css(driver, "main").text
    # revoke: asks first; cancel keeps it
    _key_row(driver, new["id"]).find_element("css selector", "button.revoke").click()
    confirm = wait(driver, lambda d: css(d, "#confirm-revoke"), "the confirmation")
    assert f"Revoke {new['id']}?" in _key_row(driver, new["id"]).text
    assert page_admin.http.get("/admin/budgets/team-a/keys").json()["data"][-1]["revoked_at"] is None
    css(driver, "#cancel-revoke").click()
    wait(driver, lambda d: not css_all(d, "#confirm-revoke"), "the confirmation gone")
    assert all(k["revoked_at"] is None for k in page_admin.http.get("/admin/budgets/team-a/keys").json()["data"])
    _key_row(driver, new["id"]).find_element("css selector", "button.revoke").click()
    confirm = wait(driver, lambda d: css(d, "#confirm-revoke"), "the confirmation")
    confirm.click()
    wait(driver, lambda d: "revoked" in _key_row(d, new["id"]).text, "the key revoked")
    states = {k["id"]: k["revoked_at"] for k in page_admin.http.get("/admin/budgets/team-a/keys").json()["data"]}
    assert states[new["id"]] is not None and states[cli_key] is None  # only that one
    assert ask().status_code != 200
    assert not css_all(driver, f'#keys tr[data-key="{new["id"]}"] button.revoke')
    assert not NULLISH.search(css(driver, "main").text)
    only_local_resources(driver, page_gateway.url)
    assert console_errors(driver) == [] or all("401" in e or "status of 4" in e for e in console_errors(driver))
