"""The dashboard (/ui) and the offline API docs (/docs) in real headless Chromium.

Against a gateway on a database of this module's own (``page_gateway``): tasks stopped
by the loop guard and by a limit, and an active one. The page is driven as a person
would: enter the admin token, read a stopped task's sentence in the list, filter, open a
task, stop it and resume it (with a reason) through the buttons, change a limit. Every
resource the pages load must come from the gateway itself (no CDN, no network)."""

from __future__ import annotations

import os

import httpx
import openai
import pytest

from tests.browser import NULLISH, console_errors, css, css_all, login, only_local_resources, wait
from tests.support import ADMIN_TOKEN
from tests.test_loop_guard_e2e import chat_agent


@pytest.fixture()
def tasks(page_gateway, page_admin, upstream):
    """(looped task id, active task id): one stopped by the loop guard, one active."""
    looped, token = page_admin.create_task(id=f"ui-loop-{os.getpid()}", request_limit=20)
    upstream.script("tool_call")
    step = chat_agent(page_gateway, token, stream=False)
    with pytest.raises(openai.BadRequestError):
        for _ in range(12):
            step()
    upstream.reset()
    active, _ = page_admin.create_task(id=f"ui-active-{os.getpid()}", request_limit=30, token_limit=50000)
    return looped, active


def test_dashboard_list_task_stop_resume_limits(page_gateway, page_admin, tasks, tmp_path, driver):
    looped, active = tasks
    sentence = page_admin.task(looped)["stop_message"]
    assert "called read_file 5 times in a row" in sentence
    login(driver, page_gateway.url, "wrong-token")
    wait(driver, lambda d: "not accepted" in css(d, "#login").text, "the token refusal")
    # where a generated admin token is kept
    assert "~/.local/share/taskgate/admin_token" in css(driver, "#login").text
    css(driver, "#login #token").clear()
    css(driver, "#login #token").send_keys(ADMIN_TOKEN)
    css(driver, "#login button").click()
    row = wait(driver, lambda d: css(d, f'tr[data-task="{looped}"]'), "the looped task's row")
    assert sentence in row.text and "stopped" in row.text and "repeated_tool_call" in row.text
    assert "requests 6 / 20" in row.text or "requests 5 / 20" in row.text
    only_local_resources(driver, page_gateway.url)
    # the filter
    from selenium.webdriver.support.ui import Select
    Select(css(driver, "#status-filter")).select_by_value("stopped")
    wait(driver, lambda d: not css_all(d, f'tr[data-task="{active}"]'), "the active task filtered out")
    assert css_all(driver, f'tr[data-task="{looped}"]')
    driver.save_screenshot(str(tmp_path / "tasks.png"))
    Select(css(driver, "#status-filter")).select_by_value("")
    # one task: stop, resume (a reason is required), limits
    wait(driver, lambda d: css(d, f'tr[data-task="{active}"] a'), "the active row").click()
    wait(driver, lambda d: css(d, "#stop"), "the stop button")
    css(driver, "#stop-message").send_keys("stopped from the dashboard")
    css(driver, "#stop").click()
    card = wait(driver, lambda d: css(d, "#stop-card"), "the stop card")
    assert "stopped by an operator: stopped from the dashboard" in card.text
    assert page_admin.task(active)["status"] == "stopped"
    css(driver, "#resume").click()
    wait(driver, lambda d: "needs a reason" in css(d, "#action-msg").text, "the reason prompt")
    assert page_admin.task(active)["status"] == "stopped"
    css(driver, "#resume-reason").send_keys("checked from the UI")
    css(driver, "#resume").click()
    wait(driver, lambda d: css_all(d, "#stop") and not css_all(d, "#stop-card"), "the active task again")
    assert page_admin.task(active)["status"] == "active"
    events = css(driver, "#events").text
    assert "Resumed by an operator (checked from the UI)" in events
    assert "Stopped (manual): stopped by an operator: stopped from the dashboard." in events
    limit = css(driver, '#limits input[name="request_limit"]')
    limit.clear()
    limit.send_keys("42")
    css(driver, '#limits input[name="token_limit"]').clear()  # empty: no limit
    css(driver, "#limits button").click()
    wait(driver, lambda d: page_admin.task(active)["request_limit"] == 42, "the new limit")
    assert page_admin.task(active)["token_limit"] is None
    # the looped task's page: sentence, detail, timeline, verdicts, ledger
    driver.get(f"{page_gateway.url}/ui/#/task/{looped}")
    card = wait(driver, lambda d: css(d, "#stop-card"), "the looped task's stop card")
    assert sentence in card.text and "tool name: read_file" in card.text
    wait(driver, lambda d: len(css_all(d, "#tool-calls tr")) >= 6, "the ledger rows")
    assert "stop" in css(driver, "#conversations").text
    driver.save_screenshot(str(tmp_path / "task.png"))
    # docs/dashboard.png: tests/test_dashboard_first_hour.py; dashboard-task.png: test_console_overview.py
    assert (tmp_path / "tasks.png").stat().st_size > 10_000


def test_docs_render_offline(page_gateway, driver):
    driver.get(page_gateway.url + "/docs")
    title = wait(driver, lambda d: css_all(d, ".swagger-ui .info .title"), "Swagger UI's title")
    assert "taskgate" in title[0].text
    wait(driver, lambda d: "/admin/tasks" in css(d, ".swagger-ui").text, "the admin operations")
    only_local_resources(driver, page_gateway.url)


def _page_text(driver) -> str:
    return css(driver, "main").text


def test_active_task_page_shows_no_null_empty_tables_say_none_yet(page_gateway, page_admin, driver):
    """An active task with no requests yet: no stray ``null`` (``replaceChildren`` given a
    missing stop card), every empty table says "none yet", no console error (favicon
    included)."""
    active, _ = page_admin.create_task(id=f"ui-fresh-{os.getpid()}", request_limit=7)
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(f"{page_gateway.url}/ui/#/task/{active}")
    wait(driver, lambda d: css_all(d, "#stop") and css_all(d, "#tool-calls"), "the active task's page")
    text = _page_text(driver)
    assert not NULLISH.search(text), text
    for table in ("#tool-calls", "#conversations"):
        assert "none yet" in css(driver, table).text, table
    assert "requests 0 / 7" in text
    assert console_errors(driver) == []


def test_api_errors_show_their_message_and_dollars_are_shown(page_gateway, page_admin, driver):
    """A 422 from the admin API shows its message (the API answers ``{"error": {...}}``,
    not ``detail``); a task with a dollar ceiling shows a cost bar, a cost field in the
    limits form and its ceiling in the ``created`` event."""
    task, _ = page_admin.create_task(id=f"ui-dollars-{os.getpid()}", request_limit=9, cost_limit_usd=5)
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(f"{page_gateway.url}/ui/#/task/{task}")
    # each read inside a wait: the page re-renders every few seconds (an element read
    # mid-render is stale)
    wait(driver, lambda d: "$0.00 spent / $5.00" in css(d, '[data-meter="cost"]').text, "the cost bar")
    wait(driver, lambda d: css(d, '#limits input[name="cost_limit_usd"]').get_attribute("value") == "5",
          "the cost field")
    wait(driver, lambda d: "cost_limit_usd=5" in css(d, "#events").text, "the ceiling in the created event")
    assert console_errors(driver) == []
    # request_limit cannot be removed: the API answers 422 with a message
    css(driver, '#limits input[name="request_limit"]').clear()
    css(driver, "#limits button").click()
    msg = wait(driver, lambda d: "HTTP 422" in (text := css(d, "#limits-msg").text) and text,
                "the refusal")
    assert "request_limit" in msg and not NULLISH.search(msg), msg
    # the dollar ceiling is editable
    field = css(driver, '#limits input[name="cost_limit_usd"]')
    field.clear()
    field.send_keys("7.5")
    css(driver, '#limits input[name="request_limit"]').send_keys("9")
    css(driver, "#limits button").click()
    wait(driver, lambda d: page_admin.task(task)["cost_limit_usd"] == 7.5, "the new ceiling")
    assert all("status of 422" in e for e in console_errors(driver))  # the refusal above, nothing else


def test_favicon(page_gateway):
    r = httpx.get(page_gateway.url + "/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/")
    assert r.content.startswith(b"<svg")
