"""The dashboard (/ui) and the offline API docs (/docs) in real headless Chromium.

Against the session's gateway process: tasks stopped by the loop guard and by a limit,
and an active one. The page is driven as a person would: enter the admin token, read a
stopped task's sentence in the list, filter, open a task, stop it and resume it (with a
reason) through the buttons, change a limit. Every resource the pages load must come
from the gateway itself (no CDN, no network)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest

from tests.browser import chromium
from tests.support import ADMIN_TOKEN
from tests.test_loop_guard_e2e import chat_agent

DOCS = Path(__file__).resolve().parent.parent / "docs"
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
    with pytest.raises(openai.PermissionDeniedError):
        for _ in range(12):
            step()
    upstream.reset()
    active, _ = admin.create_task(id=f"ui-active-{os.getpid()}", request_limit=30, token_limit=50000)
    return looped, active


def _login(driver, url: str, token: str) -> None:
    driver.get(url + "/ui/")
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
        if os.environ.get("TASKGATE_UPDATE_SCREENSHOTS"):
            DOCS.mkdir(exist_ok=True)
            driver.save_screenshot(str(DOCS / "dashboard-task.png"))
            driver.get(gateway.url + "/ui/#/")
            _wait(driver, lambda d: _css(d, f'tr[data-task="{looped}"]'), "the list")
            driver.save_screenshot(str(DOCS / "dashboard.png"))
    assert (tmp_path / "tasks.png").stat().st_size > 10_000


def test_docs_render_offline(gateway):
    with chromium() as driver:
        driver.get(gateway.url + "/docs")
        title = _wait(driver, lambda d: _all(d, ".swagger-ui .info .title"), "Swagger UI's title")
        assert "taskgate" in title[0].text
        _wait(driver, lambda d: "/admin/tasks" in _css(d, ".swagger-ui").text, "the admin operations")
        _only_local_resources(driver, gateway.url)
