"""Warning thresholds on the dashboard (issue 38 item 1), in real headless Chromium: a
budget that crossed 50 % and 80 % of its request limit this window shows a warned badge
("80 % of requests") on the budgets page and its page, and lists both crossings and its
thresholds."""

from __future__ import annotations

import os
import time

import openai

from tests.browser import NULLISH, console_errors, css, css_all, login, wait
from tests.support import ADMIN_TOKEN


def test_a_budget_that_crossed_80_percent_shows_a_badge(page_gateway, page_admin, driver) -> None:
    budget = f"warned-{os.getpid()}"
    assert page_admin.http.post("/admin/budgets",
                           json={"id": budget, "window": "day", "request_limit": 10}).status_code == 201
    _, token = page_admin.create_task(budget=budget)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(9):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    deadline = time.monotonic() + 15
    while len(page_admin.http.get(f"/admin/budgets/{budget}").json()["current"]["warnings"]) < 2:
        assert time.monotonic() < deadline, "the thresholds were not announced"
        time.sleep(0.1)
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + "/ui/#/budgets")
    badge = wait(driver, lambda d: css_all(d, f'tr[data-budget="{budget}"] [data-state="warned"]'), "the badge")[0]
    assert badge.text == "80 % of requests"
    driver.get(page_gateway.url + f"/ui/#/budget/{budget}")
    wait(driver, lambda d: css_all(d, '#budget-title [data-state="warned"]'), "the badge on its page")
    crossed = css(driver, "#warnings").text
    assert "50 % of requests at" in crossed and "80 % of requests at" in crossed, crossed
    assert "50 %, 80 %, 95 % of each limit" in css(driver, "#budget-facts").text
    assert not NULLISH.search(css(driver, "main").text)
    assert not console_errors(driver)
