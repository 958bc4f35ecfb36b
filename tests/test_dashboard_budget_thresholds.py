"""Warning thresholds on the dashboard (issue 38 item 1), in real headless Chromium: a
budget that crossed 50 % and 80 % of its request limit this window shows a warned badge
("80 % of requests") on the budgets page and its page, and lists both crossings and its
thresholds."""

from __future__ import annotations

import os
import time

import openai

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


def test_a_budget_that_crossed_80_percent_shows_a_badge(gateway, admin) -> None:
    budget = f"warned-{os.getpid()}"
    assert admin.http.post("/admin/budgets",
                           json={"id": budget, "window": "day", "request_limit": 10}).status_code == 201
    _, token = admin.create_task(budget=budget)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(9):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    deadline = time.monotonic() + 15
    while len(admin.http.get(f"/admin/budgets/{budget}").json()["current"]["warnings"]) < 2:
        assert time.monotonic() < deadline, "the thresholds were not announced"
        time.sleep(0.1)
    with chromium() as driver:
        _login(driver, gateway.url, ADMIN_TOKEN)
        driver.get(gateway.url + "/ui/#/budgets")
        badge = _wait(driver, lambda d: _all(d, f'tr[data-budget="{budget}"] [data-state="warned"]'), "the badge")[0]
        assert badge.text == "80 % of requests"
        driver.get(gateway.url + f"/ui/#/budget/{budget}")
        _wait(driver, lambda d: _all(d, '#budget-title [data-state="warned"]'), "the badge on its page")
        crossed = _css(driver, "#warnings").text
        assert "50 % of requests at" in crossed and "80 % of requests at" in crossed, crossed
        assert "50 %, 80 %, 95 % of each limit" in _css(driver, "#budget-facts").text
        assert not _NULLISH.search(_css(driver, "main").text)
        assert not console_errors(driver)
