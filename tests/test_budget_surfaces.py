"""Operator surfaces of budgets on a real gateway process: the stop webhook's
``budget.exhausted`` (once per window, however many requests the budget refuses), and
the metrics ``taskgate_budget_refusals_total{budget}`` and ``taskgate_budget_spent_usd{budget}``."""

from __future__ import annotations

import secrets
import time
from decimal import Decimal

import httpx
import pytest

from tests.console_support import sample, scrape
from tests.support import ADMIN_TOKEN
from tests.webhook_receiver import hooked, receiver  # noqa: F401 - fixtures

BODY = {"model": "gpt-4.1-mini", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def test_an_exhausted_budget_is_announced_once_and_counted(hooked, receiver, upstream) -> None:
    api = httpx.Client(base_url=hooked.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    budget = f"surf-{secrets.token_hex(3)}"
    assert api.post("/admin/budgets", json={"id": budget, "request_limit": 2, "cost_limit_usd": 10,
                                            "window": "day"}).status_code == 201
    token = api.post("/admin/tasks", json={"budget": budget}).json()["token"]
    upstream.script("text", input_tokens=1000, output_tokens=500)
    statuses = [httpx.post(hooked.url + "/v1/chat/completions", json=BODY, timeout=30,
                           headers={"authorization": f"Bearer {token}"}).status_code for _ in range(5)]
    assert statuses == [200, 200, 403, 403, 403]
    posts = [p["body"] for p in receiver.wait_for(1) if p["body"].get("event") == "budget.exhausted"]
    time.sleep(1.0)  # later refusals of the same window announce nothing more
    posts = [p["body"] for p in receiver.posts if p["body"].get("event") == "budget.exhausted"]
    assert len(posts) == 1, posts
    post = posts[0]
    assert (post["budget_id"], post["exhausted"]) == (budget, "request_limit")
    assert post["resets_at"] and budget in post["text"] and "exhausted" in post["text"]
    samples = scrape(hooked.url, ADMIN_TOKEN)
    assert sample(samples, "taskgate_budget_refusals_total", budget=budget) == 3
    spent = Decimal(str(api.get(f"/admin/budgets/{budget}").json()["current"]["cost_usd"]))
    assert spent > 0
    assert sample(samples, "taskgate_budget_spent_usd", budget=budget) == pytest.approx(float(spent))
