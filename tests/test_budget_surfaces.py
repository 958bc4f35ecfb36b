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
    assert statuses == [200, 200, 400, 400, 400]
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


def test_the_sdks_take_an_exhausted_budget_as_final(hooked, upstream) -> None:
    """400 on every endpoint: the official SDKs (at their default retries) raise at once and
    send it once; Codex CLI retries every other 4xx five times, and Claude Code shows a 403 as
    'Failed to authenticate'."""
    import anthropic
    import openai

    api = httpx.Client(base_url=hooked.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    budget = f"sdk-{secrets.token_hex(3)}"
    assert api.post("/admin/budgets", json={"id": budget, "request_limit": 1}).status_code == 201
    task = api.post("/admin/tasks", json={"budget": budget}).json()
    upstream.script("text")
    chat = openai.OpenAI(base_url=hooked.url + "/v1", api_key=task["token"])
    chat.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as refused:
        chat.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "budget_exhausted" and budget in refused.value.message
    claude = anthropic.Anthropic(base_url=hooked.url, api_key=task["token"])
    with pytest.raises(anthropic.BadRequestError) as said:
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    assert said.value.body["error"]["type"] == "invalid_request_error" and budget in said.value.message
    shown = api.get(f"/admin/tasks/{task['id']}").json()
    assert (shown["status"], shown["admitted_requests"], shown["refused_requests"]) == ("active", 1, 0)
    assert sample(scrape(hooked.url, ADMIN_TOKEN), "taskgate_budget_refusals_total", budget=budget) == 2  # no retry
