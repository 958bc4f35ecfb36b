"""Task warning thresholds on the dashboard (issue 38 item 1), in real headless Chromium:
a task that crossed 50 % and 80 % of its request limit shows a warned badge ("80 % of
requests") on its page, with both crossings and its thresholds in the badge's title; a
task that crossed none shows no badge."""

from __future__ import annotations

import os
import time

import openai

from tests.browser import NULLISH, console_errors, css, css_all, login, wait
from tests.support import ADMIN_TOKEN


def test_a_task_that_crossed_80_percent_shows_a_badge(page_gateway, page_admin, driver) -> None:
    task, token = page_admin.create_task(id=f"warned-{os.getpid()}", request_limit=10)
    quiet, _ = page_admin.create_task(id=f"quiet-{os.getpid()}", request_limit=10)
    client = openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(8):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    deadline = time.monotonic() + 15
    while len(page_admin.task(task)["warnings"]) < 2:
        assert time.monotonic() < deadline, "the thresholds were not announced"
        time.sleep(0.1)
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + f"/ui/#/task/{task}")
    badge = wait(driver, lambda d: css_all(d, '#task-title [data-state="warned"]'), "the badge")[0]
    assert badge.text == "80 % of requests"
    title = badge.get_attribute("title")
    assert title == "crossed: 50 % of requests; 80 % of requests (thresholds 50 %, 80 %, 95 %)", title
    assert "has used 80 % of its request_limit: 8 of 10 requests admitted." in css(driver, "#events").text
    assert not NULLISH.search(css(driver, "main").text)
    driver.get(page_gateway.url + f"/ui/#/task/{quiet}")
    wait(driver, lambda d: css_all(d, "#task-title") and quiet in css(d, "#task-title").text, "the quiet task")
    assert not css_all(driver, '#task-title [data-state="warned"]')
    assert not console_errors(driver)
