"""The kill switch on the dashboard's budget page (issue 38 item 3), in real headless
Chromium: Pause… asks first (saying what it does) and Cancel leaves the budget alone; a
pause needs a reason, shows the paused badge on the budget's page and in the budget list,
and refuses its task's next request; Resume… asks first too and lifts it."""

from __future__ import annotations

import os

import openai
import pytest

from tests.browser import NULLISH, console_errors, css, css_all, login, wait
from tests.support import ADMIN_TOKEN

USER = [{"role": "user", "content": "hi"}]


def test_pause_and_resume_from_the_budget_page_after_a_confirmation(page_gateway, page_admin, driver) -> None:
    budget = f"kill-{os.getpid()}"
    assert page_admin.http.post("/admin/budgets", json={"id": budget, "request_limit": 1000}).status_code == 201
    assert page_admin.http.post("/admin/budgets", json={"id": budget + "-nested", "parent": budget}).status_code == 201
    _, token = page_admin.create_task(budget=budget)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    paused = lambda: page_admin.http.get(f"/admin/budgets/{budget}").json()["paused_at"] is not None  # noqa: E731
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + f"/ui/#/budget/{budget}")
    wait(driver, lambda d: css_all(d, "#pause"), "the pause button")
    assert css(driver, '#budget-title [data-state="open"]')
    # asks first; cancel leaves it alone
    css(driver, "#pause").click()
    wait(driver, lambda d: css_all(d, "#confirm-pause"), "the confirmation")
    words = css(driver, "#pause-card").text
    assert f"Pause budget {budget}? Every request of its 1 task(s) and of the tasks of its 1 nested budget(s)" \
        in words and "cut in every gateway" in words
    css(driver, "#cancel-pause").click()
    wait(driver, lambda d: not css_all(d, "#confirm-pause"), "the confirmation gone")
    assert not paused()
    # a reason is required
    css(driver, "#pause").click()
    wait(driver, lambda d: css_all(d, "#confirm-pause"), "the confirmation")
    css(driver, "#confirm-pause").click()
    wait(driver, lambda d: "reason is required" in css(d, "#pause-msg").text, "the missing reason")
    assert not paused()
    css(driver, "#pause-reason").send_keys("runaway agents")
    css(driver, "#confirm-pause").click()
    wait(driver, lambda d: css_all(d, '#budget-title [data-state="paused"]'), "the paused badge")
    assert "by dashboard: runaway agents" in css(driver, "#paused-words").text
    b = page_admin.http.get(f"/admin/budgets/{budget}").json()
    assert (b["paused_by"], b["paused_reason"]) == ("dashboard", "runaway agents")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=USER)
    assert "runaway agents" in str(refused.value)
    driver.get(page_gateway.url + "/ui/#/budgets")
    wait(driver, lambda d: css_all(d, f'tr[data-budget="{budget}"] [data-state="paused"]'),
          "the paused badge in the list")
    # resume: asks first too
    driver.get(page_gateway.url + f"/ui/#/budget/{budget}")
    wait(driver, lambda d: css_all(d, "#resume"), "the resume button")
    css(driver, "#resume").click()
    wait(driver, lambda d: css_all(d, "#confirm-resume"), "the confirmation")
    assert paused()
    css(driver, "#pause-reason").send_keys("fixed")
    css(driver, "#confirm-resume").click()
    wait(driver, lambda d: css_all(d, "#pause"), "the pause button again")
    assert not paused()
    assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content
    assert not NULLISH.search(css(driver, "main").text)
    assert not console_errors(driver)
