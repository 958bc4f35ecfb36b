"""The dashboard's budgets in real headless Chromium, on a gateway with a database of its
own: the list nests each budget under its parent with its current window's spend as bars
against its limits (requests, tokens, dollars spent and reserved in flight), the window and
when it resets, and whether it is exhausted; a budget's page shows the windows before, its
tasks (linking to their pages) and the budgets nested in it, in pages. No
``null``/``undefined``/``NaN`` on a page, no console error, nothing loaded from anywhere
but the gateway; a field a newer gateway adds is shown, not dropped or broken."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

import openai
import pytest

from tests.browser import NULLISH, console_errors, css, css_all, login, only_local_resources, wait
from tests.support import ADMIN_TOKEN, sql

DOCS = Path(__file__).resolve().parent.parent / "docs"
USER = [{"role": "user", "content": "hi"}]
BULK = 101  # budgets nested in "bulk": the list's tree runs over two pages of 100


def _budget(admin, **body: object) -> dict:
    r = admin.http.post("/admin/budgets", json=body)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture(scope="module")
def fleet(page_gateway, page_admin, upstream):
    """org (a month, $5) ⊃ team (3 requests, exhausted by 3 priced requests) ⊃ project (55
    tasks); solo (a lifetime, a reservation in flight); bulk with 101 budgets nested."""
    _budget(page_admin, id="org", window="month", cost_limit_usd=5, metadata={"owner": "ops"})
    _budget(page_admin, id="team", parent="org", window="month", request_limit=3, token_limit=10_000_000)
    _budget(page_admin, id="project", parent="team")
    _budget(page_admin, id="solo", cost_limit_usd=2)
    _budget(page_admin, id="bulk")
    for i in range(BULK):
        _budget(page_admin, id=f"bulk-{i:03d}", parent="bulk")
    spender, token = page_admin.create_task(id="team-spender", budget="team", request_limit=10)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    upstream.script("text", input_tokens=1_000_000, output_tokens=100_000)  # $0.21 each
    for _ in range(3):
        client.chat.completions.create(model="gpt-4o-mini", messages=USER, max_tokens=64)
    with pytest.raises(openai.BadRequestError):  # 400 budget_exhausted
        client.chat.completions.create(model="gpt-4o-mini", messages=USER, max_tokens=64)
    upstream.reset()
    for i in range(55):
        page_admin.create_task(id=f"project-task-{i:02d}", budget="project")
    url = page_gateway.env["TASKGATE_DATABASE_URL"]
    org = page_admin.http.get("/admin/budgets/org").json()
    start = datetime.fromisoformat(org["current"]["window_start"])
    before = (start - timedelta(days=1)).replace(day=1)
    sql(url, "INSERT INTO budget_windows (budget_id, window_start, window_end, admitted_requests, input_tokens,"
        " output_tokens, cost_usd, exhausted_at) VALUES ('org', $1, $2, 41, 9000, 4000, 4.25, $3)",
        before, start, start - timedelta(hours=5))
    # a request in flight as admission records it: its worst case reserved in the window
    sql(url, "INSERT INTO budget_windows (budget_id, window_start, reserved_usd) VALUES ('solo', $1, 0.75)",
        datetime.fromisoformat(page_admin.http.get("/admin/budgets/solo").json()["current"]["window_start"]))
    assert page_admin.http.get("/admin/budgets/team").json()["current"]["exhausted_at"] is not None
    return spender


def _text(driver) -> str:
    text = css(driver, "main").text
    assert not NULLISH.search(text), text
    return text


def _row(driver, budget: str):
    return css(driver, f'#budgets tr[data-budget="{budget}"]')


def test_budget_list_nests_budgets_with_their_spend_against_limits(page_gateway, page_admin, fleet, driver):
    login(driver, page_gateway.url, ADMIN_TOKEN)
    wait(driver, lambda d: css_all(d, 'header nav a[data-nav="budgets"]'), "the budgets link")
    css(driver, 'header nav a[data-nav="budgets"]').click()
    wait(driver, lambda d: "(101 nested)" in _row(d, "bulk").text, "the nested count")
    # tree order: each budget right under its parent, indented one step further
    ids = wait(driver, lambda d: [r.get_attribute("data-budget") for r in css_all(d, "#budgets tbody tr")], "rows")
    assert ids[:6] == ["bulk", "bulk-000", "bulk-001", "bulk-002", "bulk-003", "bulk-004"], ids
    assert len(ids) == 100 and "org" not in ids
    assert "budgets 1–100 of 106" in css(driver, "#page-span").text
    css(driver, "#next-page").click()
    wait(driver, lambda d: [r.get_attribute("data-budget") for r in css_all(d, "#budgets tbody tr")]
          == ["bulk-099", "bulk-100", "org", "team", "project", "solo"], "the second page in tree order")
    pad = {b: int(_row(driver, b).find_element("css selector", "td").value_of_css_property("padding-left")[:-2])
           for b in ("org", "team", "project", "solo")}
    assert pad["org"] == pad["solo"] < pad["team"] < pad["project"], pad
    org, team = _row(driver, "org").text, _row(driver, "team").text
    settled = page_admin.http.get("/admin/budgets/org").json()["current"]["cost_usd"]
    assert settled > 0.5 and f"${settled:.2f} spent / $5.00" in org, org
    assert "month (UTC)" in org and "open" in org
    assert "requests 3 / 3" in team and "tokens" in team and "exhausted: requests" in team, team
    solo = _row(driver, "solo").text
    assert "$0.75 reserved" in solo and "$0.75" in solo.split("reserved")[-1] and "lifetime" in solo, solo
    assert "never (lifetime)" in solo
    _text(driver)
    only_local_resources(driver, page_gateway.url)
    assert console_errors(driver) == []
    if os.environ.get("TASKGATE_UPDATE_SCREENSHOTS"):
        driver.save_screenshot(str(DOCS / "dashboard-budgets.png"))


def test_budget_page_windows_tasks_children_and_links(page_gateway, page_admin, fleet, driver):
    spender = fleet
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + "/ui/#/budget/org")
    wait(driver, lambda d: "41" in css(d, "#windows").text, "the past window")
    windows = css(driver, "#windows").text
    assert "9,000 / 4,000" in windows and "$4.25" in windows
    facts = css(driver, "#budget-facts").text
    assert "$5.00 per month" in facts and "none (a root budget)" in facts and "owner ops" in facts, facts
    wait(driver, lambda d: [r.get_attribute("data-budget") for r in css_all(d, "#children tbody tr")] == ["team"],
          "its child")
    assert "none yet" in css(driver, "#budget-tasks").text  # tasks of org's descendants are theirs
    css(driver, '#children tr[data-budget="team"] a').click()
    wait(driver, lambda d: css_all(d, f'#budget-tasks tr[data-task="{spender}"]'), "team's task")
    assert "exhausted: requests" in css(driver, "#budget-title").text
    assert "none yet" in css(driver, "#windows").text
    _text(driver)
    css(driver, f'#budget-tasks tr[data-task="{spender}"] a').click()
    wait(driver, lambda d: "draws from budget team" in css(d, "#task-budget").text, "the task's budget link")
    css(driver, "#task-budget a").click()
    wait(driver, lambda d: css_all(d, "#budget-facts") and "parent" in css(d, "#budget-facts").text, "team again")
    css(driver, "#budget-facts a").click()  # its parent
    wait(driver, lambda d: css(d, "#budget-title").text.startswith("org"), "the parent's page")
    # project: 55 tasks in pages of 50
    driver.get(page_gateway.url + "/ui/#/budget/project")
    wait(driver, lambda d: len(css_all(d, "#budget-tasks tbody tr")) == 50, "the first page of tasks")
    assert "tasks 1–50" in _text(driver)
    css(driver, "#tasks-next-page").click()
    wait(driver, lambda d: [r.get_attribute("data-task") for r in css_all(d, "#budget-tasks tbody tr")]
          == [f"project-task-{i}" for i in range(50, 55)], "the second page of tasks")
    assert "tasks 51–55" in _text(driver) and "none: no budget nests" in css(driver, "#children").text
    # bulk: 101 nested budgets in pages of 50
    driver.get(page_gateway.url + "/ui/#/budget/bulk")
    wait(driver, lambda d: len(css_all(d, "#children tbody tr")) == 50, "the first page of nested budgets")
    css(driver, "#budgets-next-page").click()
    wait(driver, lambda d: "budgets 51–100" in _text(d), "the second page")
    css(driver, "#budgets-next-page").click()
    wait(driver, lambda d: [r.get_attribute("data-budget") for r in css_all(d, "#children tbody tr")]
          == ["bulk-100"], "the last nested budget")
    assert css(driver, "#budgets-next-page").get_attribute("disabled") is not None
    assert console_errors(driver) == []
    only_local_resources(driver, page_gateway.url)  # docs/dashboard-budget.png: tests/test_dashboard_first_hour.py


def test_unknown_fields_are_shown_and_missing_ones_are_not_nulls(page_gateway, fleet, driver):
    """A newer gateway's field (e.g. a lease's ``leased_usd``) is shown in words; null,
    objects and NaN are not printed; a window without a field is zero, not ``undefined``."""
    login(driver, page_gateway.url, ADMIN_TOKEN)
    wait(driver, lambda d: css_all(d, "header nav"), "the page")
    got = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import("/ui/budgets.js").then((m) => {
          const b = { id: "x", request_limit: 4, token_limit: null, cost_limit_usd: 2, window: "day",
                      timezone: "UTC", current: { admitted_requests: 1, cost_usd: 0.5, leased_usd: 1.25,
                      holders: 3, note: null, shards: [1, 2], ratio: NaN } };
          const row = m.budgetRow(b, 1, 0);
          const bare = m.budgetRow({ id: "y", current: {} }, 0, 0);
          done([row.textContent, bare.textContent, m.exhausted({ ...b, request_limit: 1 })]);
        }).catch((e) => done(String(e)));""")
    row, bare, out = got
    assert "leased $1.25" in row and "holders 3" in row and "requests 1 / 4" in row, row
    assert not NULLISH.search(row) and "note" not in row and "shards" not in row and "ratio" not in row, row
    assert "requests 0" in bare and "$0.00 spent" in bare and not NULLISH.search(bare), bare
    assert out == ["requests"]
    assert console_errors(driver) == []
