"""The dashboard (/ui) and the offline API docs (/docs) in real headless Chromium.

Against the session's gateway process: tasks stopped by the loop guard and by a limit,
and an active one. The page is driven as a person would: enter the admin token, read a
stopped task's sentence in the list, filter, open a task, stop it and resume it (with a
reason) through the buttons, change a limit. Every resource the pages load must come
from the gateway itself (no CDN, no network)."""

from __future__ import annotations

import os
import re
from typing import Iterator
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from tests.browser import chromium, console_errors
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess, fresh_database
from tests.test_loop_guard_e2e import chat_agent


@pytest.fixture(scope="module")
def gateway(upstream) -> Iterator[GatewayProcess]:
    """A gateway on a database of this module's own: the pages list tasks by id (100 a
    page) and the period's top spenders, which other modules' tasks would crowd out."""
    with fresh_database() as url, GatewayProcess(url, upstream.base_url) as gw:
        yield gw


@pytest.fixture(scope="module")
def admin(gateway) -> Admin:
    return Admin(gateway.url)


WAIT_S = 15


def _wait(driver, predicate, what: str):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page re-renders every few seconds: an element read mid-render is read again
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(predicate, message=what)


def _css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def _all(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def _only_local_resources(driver, base_url: str) -> None:
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls, "the page loaded no resources at all?"
    assert {urlsplit(u).netloc for u in urls} == {urlsplit(base_url).netloc}, urls


@pytest.fixture()
def tasks(gateway, admin, upstream):
    """(looped task id, active task id): one stopped by the loop guard, one active."""
    looped, token = admin.create_task(id=f"ui-loop-{os.getpid()}", request_limit=20)
    upstream.script("tool_call")
    step = chat_agent(gateway, token, stream=False)
    with pytest.raises(openai.BadRequestError):
        for _ in range(12):
            step()
    upstream.reset()
    active, _ = admin.create_task(id=f"ui-active-{os.getpid()}", request_limit=30, token_limit=50000)
    return looped, active


def _login(driver, url: str, token: str) -> None:
    driver.get(url + "/ui/#/tasks")
    field = _wait(driver, lambda d: _css(d, "#login #token"), "the login form")
    field.send_keys(token)
    _css(driver, "#login button").click()


def test_dashboard_list_task_stop_resume_limits(gateway, admin, tasks, tmp_path):
    looped, active = tasks
    sentence = admin.task(looped)["stop_message"]
    assert "called read_file 5 times in a row" in sentence
    with chromium() as driver:
        _login(driver, gateway.url, "wrong-token")
        _wait(driver, lambda d: "not accepted" in _css(d, "#login").text, "the token refusal")
        # where a generated admin token is kept
        assert "~/.local/share/taskgate/admin_token" in _css(driver, "#login").text
        _css(driver, "#login #token").clear()
        _css(driver, "#login #token").send_keys(ADMIN_TOKEN)
        _css(driver, "#login button").click()
        row = _wait(driver, lambda d: _css(d, f'tr[data-task="{looped}"]'), "the looped task's row")
        assert sentence in row.text and "stopped" in row.text and "repeated_tool_call" in row.text
        assert "requests 6 / 20" in row.text or "requests 5 / 20" in row.text
        _only_local_resources(driver, gateway.url)
        # the filter
        from selenium.webdriver.support.ui import Select
        Select(_css(driver, "#status-filter")).select_by_value("stopped")
        _wait(driver, lambda d: not _all(d, f'tr[data-task="{active}"]'), "the active task filtered out")
        assert _all(driver, f'tr[data-task="{looped}"]')
        driver.save_screenshot(str(tmp_path / "tasks.png"))
        Select(_css(driver, "#status-filter")).select_by_value("")
        # one task: stop, resume (a reason is required), limits
        _wait(driver, lambda d: _css(d, f'tr[data-task="{active}"] a'), "the active row").click()
        _wait(driver, lambda d: _css(d, "#stop"), "the stop button")
        _css(driver, "#stop-message").send_keys("stopped from the dashboard")
        _css(driver, "#stop").click()
        card = _wait(driver, lambda d: _css(d, "#stop-card"), "the stop card")
        assert "stopped by an operator: stopped from the dashboard" in card.text
        assert admin.task(active)["status"] == "stopped"
        _css(driver, "#resume").click()
        _wait(driver, lambda d: "needs a reason" in _css(d, "#action-msg").text, "the reason prompt")
        assert admin.task(active)["status"] == "stopped"
        _css(driver, "#resume-reason").send_keys("checked from the UI")
        _css(driver, "#resume").click()
        _wait(driver, lambda d: _all(d, "#stop") and not _all(d, "#stop-card"), "the active task again")
        assert admin.task(active)["status"] == "active"
        events = _css(driver, "#events").text
        assert "Resumed by an operator (checked from the UI)" in events
        assert "Stopped (manual): stopped by an operator: stopped from the dashboard." in events
        limit = _css(driver, '#limits input[name="request_limit"]')
        limit.clear()
        limit.send_keys("42")
        _css(driver, '#limits input[name="token_limit"]').clear()  # empty: no limit
        _css(driver, "#limits button").click()
        _wait(driver, lambda d: admin.task(active)["request_limit"] == 42, "the new limit")
        assert admin.task(active)["token_limit"] is None
        # the looped task's page: sentence, detail, timeline, verdicts, ledger
        driver.get(f"{gateway.url}/ui/#/task/{looped}")
        card = _wait(driver, lambda d: _css(d, "#stop-card"), "the looped task's stop card")
        assert sentence in card.text and "tool name: read_file" in card.text
        _wait(driver, lambda d: len(_all(d, "#tool-calls tr")) >= 6, "the ledger rows")
        assert "stop" in _css(driver, "#conversations").text
        driver.save_screenshot(str(tmp_path / "task.png"))
        # docs/dashboard.png: tests/test_dashboard_first_hour.py; dashboard-task.png: test_console_overview.py
    assert (tmp_path / "tasks.png").stat().st_size > 10_000


def test_docs_render_offline(gateway):
    with chromium() as driver:
        driver.get(gateway.url + "/docs")
        title = _wait(driver, lambda d: _all(d, ".swagger-ui .info .title"), "Swagger UI's title")
        assert "taskgate" in title[0].text
        _wait(driver, lambda d: "/admin/tasks" in _css(d, ".swagger-ui").text, "the admin operations")
        _only_local_resources(driver, gateway.url)


_NULLISH = re.compile(r"\b(null|undefined|NaN)\b")


def _page_text(driver) -> str:
    return _css(driver, "main").text


def test_active_task_page_shows_no_null_empty_tables_say_none_yet(gateway, admin):
    """An active task with no requests yet: no stray ``null`` (``replaceChildren`` given a
    missing stop card), every empty table says "none yet", no console error (favicon
    included)."""
    active, _ = admin.create_task(id=f"ui-fresh-{os.getpid()}", request_limit=7)
    with chromium() as driver:
        _login(driver, gateway.url, ADMIN_TOKEN)
        driver.get(f"{gateway.url}/ui/#/task/{active}")
        _wait(driver, lambda d: _all(d, "#stop") and _all(d, "#tool-calls"), "the active task's page")
        text = _page_text(driver)
        assert not _NULLISH.search(text), text
        for table in ("#tool-calls", "#conversations"):
            assert "none yet" in _css(driver, table).text, table
        assert "requests 0 / 7" in text
        assert console_errors(driver) == []


def test_api_errors_show_their_message_and_dollars_are_shown(gateway, admin):
    """A 422 from the admin API shows its message (the API answers ``{"error": {...}}``,
    not ``detail``); a task with a dollar ceiling shows a cost bar, a cost field in the
    limits form and its ceiling in the ``created`` event."""
    task, _ = admin.create_task(id=f"ui-dollars-{os.getpid()}", request_limit=9, cost_limit_usd=5)
    with chromium() as driver:
        _login(driver, gateway.url, ADMIN_TOKEN)
        driver.get(f"{gateway.url}/ui/#/task/{task}")
        # each read inside a wait: the page re-renders every few seconds (an element read
        # mid-render is stale)
        _wait(driver, lambda d: "$0.00 spent / $5.00" in _css(d, '[data-meter="cost"]').text, "the cost bar")
        _wait(driver, lambda d: _css(d, '#limits input[name="cost_limit_usd"]').get_attribute("value") == "5",
              "the cost field")
        _wait(driver, lambda d: "cost_limit_usd=5" in _css(d, "#events").text, "the ceiling in the created event")
        assert console_errors(driver) == []
        # request_limit cannot be removed: the API answers 422 with a message
        _css(driver, '#limits input[name="request_limit"]').clear()
        _css(driver, "#limits button").click()
        msg = _wait(driver, lambda d: "HTTP 422" in (text := _css(d, "#limits-msg").text) and text,
                    "the refusal")
        assert "request_limit" in msg and not _NULLISH.search(msg), msg
        # the dollar ceiling is editable
        field = _css(driver, '#limits input[name="cost_limit_usd"]')
        field.clear()
        field.send_keys("7.5")
        _css(driver, '#limits input[name="request_limit"]').send_keys("9")
        _css(driver, "#limits button").click()
        _wait(driver, lambda d: admin.task(task)["cost_limit_usd"] == 7.5, "the new ceiling")
        assert all("status of 422" in e for e in console_errors(driver))  # the refusal above, nothing else


def test_favicon(gateway):
    r = httpx.get(gateway.url + "/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/")
    assert r.content.startswith(b"<svg")
