"""The kill switch on the dashboard's budget page (issue 38 item 3), in real headless
Chromium: Pause… asks first (saying what it does) and Cancel leaves the budget alone; a
pause needs a reason, shows the paused badge on the budget's page and in the budget list,
and refuses its task's next request; Resume… asks first too and lifts it."""

from __future__ import annotations

import os

import openai
import pytest

from tests.browser import chromium, console_errors
from tests.support import ADMIN_TOKEN
from tests.test_console_dashboard import (
    _NULLISH,
    _all,
    _css,
    _login,
    _wait,
    admin,  # noqa: F401 - fixture: the dashboard module's own-database gateway, one per module here too
    gateway,  # noqa: F401 - fixture
)

USER = [{"role": "user", "content": "hi"}]


def test_pause_and_resume_from_the_budget_page_after_a_confirmation(gateway, admin) -> None:
    budget = f"kill-{os.getpid()}"
    assert admin.http.post("/admin/budgets", json={"id": budget, "request_limit": 1000}).status_code == 201
    assert admin.http.post("/admin/budgets", json={"id": budget + "-nested", "parent": budget}).status_code == 201
    _, token = admin.create_task(budget=budget)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    paused = lambda: admin.http.get(f"/admin/budgets/{budget}").json()["paused_at"] is not None  # noqa: E731
    with chromium() as driver:
        _login(driver, gateway.url, ADMIN_TOKEN)
        driver.get(gateway.url + f"/ui/#/budget/{budget}")
        _wait(driver, lambda d: _all(d, "#pause"), "the pause button")
        assert _css(driver, '#budget-title [data-state="open"]')
        # asks first; cancel leaves it alone
        _css(driver, "#pause").click()
        _wait(driver, lambda d: _all(d, "#confirm-pause"), "the confirmation")
        words = _css(driver, "#pause-card").text
        assert f"Pause budget {budget}? Every request of its 1 task(s) and of the tasks of its 1 nested budget(s)" \
            in words and "cut in every gateway" in words
        _css(driver, "#cancel-pause").click()
        _wait(driver, lambda d: not _all(d, "#confirm-pause"), "the confirmation gone")
        assert not paused()
        # a reason is required
        _css(driver, "#pause").click()
        _wait(driver, lambda d: _all(d, "#confirm-pause"), "the confirmation")
        _css(driver, "#confirm-pause").click()
        _wait(driver, lambda d: "reason is required" in _css(d, "#pause-msg").text, "the missing reason")
        assert not paused()
        _css(driver, "#pause-reason").send_keys("runaway agents")
        _css(driver, "#confirm-pause").click()
        _wait(driver, lambda d: _all(d, '#budget-title [data-state="paused"]'), "the paused badge")
        assert "by dashboard: runaway agents" in _css(driver, "#paused-words").text
        b = admin.http.get(f"/admin/budgets/{budget}").json()
        assert (b["paused_by"], b["paused_reason"]) == ("dashboard", "runaway agents")
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=USER)
        assert "runaway agents" in str(refused.value)
        driver.get(gateway.url + "/ui/#/budgets")
        _wait(driver, lambda d: _all(d, f'tr[data-budget="{budget}"] [data-state="paused"]'),
              "the paused badge in the list")
        # resume: asks first too
        driver.get(gateway.url + f"/ui/#/budget/{budget}")
        _wait(driver, lambda d: _all(d, "#resume"), "the resume button")
        _css(driver, "#resume").click()
        _wait(driver, lambda d: _all(d, "#confirm-resume"), "the confirmation")
        assert paused()
        _css(driver, "#pause-reason").send_keys("fixed")
        _css(driver, "#confirm-resume").click()
        _wait(driver, lambda d: _all(d, "#pause"), "the pause button again")
        assert not paused()
        assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content
        assert not _NULLISH.search(_css(driver, "main").text)
        assert not console_errors(driver)
