"""Tight, still sound reservations (issue 19 §2) through a real gateway and PostgreSQL: a
growing conversation is reserved from the input tokens upstream reported for its last
turn plus what was added; an edited history falls back to the byte bound; a request
without an output maximum gets the operator's default added to its forwarded body."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from decimal import Decimal

import httpx

from app.admission.cost import REQUEST_OVERHEAD_TOKENS, reservation_usd
from app.config.prices import default_price
from app.testing.upstream import UpstreamServer
from tests.support import Admin, GatewayProcess

MODEL = "gpt-4.1-mini"
PRICE = default_price(MODEL)
MAX_TOKENS = 4096


def _turn1() -> dict:
    return {"model": MODEL, "max_tokens": MAX_TOKENS,
            "messages": [{"role": "system", "content": "You are a coding agent."},
                         {"role": "user", "content": "fix the bug"},
                         {"role": "tool", "tool_call_id": "call_1", "content": "x = 1\n" * 33_000}]}


def _compact(item: dict) -> int:
    return len(json.dumps(item, sort_keys=True, separators=(",", ":")).encode())


def _reserved_in_flight(url: str, token: str, body: dict, admin: Admin, task_id: str) -> tuple[Decimal, int]:
    """Send ``body`` while upstream holds the answer; the task's ``reserved_usd`` meanwhile."""
    async def run() -> tuple[Decimal, int]:
        async with httpx.AsyncClient(timeout=60) as client:
            sent = asyncio.ensure_future(client.post(
                url + "/v1/chat/completions", content=json.dumps(body).encode(),
                headers={"authorization": f"Bearer {token}", "content-type": "application/json",
                         "x-taskgate-conversation": "growing"}))
            reserved = Decimal(0)
            while reserved == 0 and not sent.done():
                reserved = Decimal(str(admin.task(task_id)["reserved_usd"]))
                await asyncio.sleep(0.02)
            return reserved, (await sent).status_code
    return asyncio.run(run())


def _settled(admin: Admin, task_id: str) -> dict:
    deadline = time.monotonic() + 15
    while True:
        task = admin.task(task_id)
        if Decimal(str(task["reserved_usd"])) == 0 or time.monotonic() > deadline:
            return task
        time.sleep(0.05)


def test_a_growing_conversation_is_reserved_from_its_last_reported_input_tokens(
        gateway: GatewayProcess, upstream: UpstreamServer, admin: Admin) -> None:
    assert PRICE is not None
    task_id, token = admin.create_task(cost_limit_usd=100.0)
    turn1 = _turn1()
    assert len(json.dumps(turn1)) > 195_000
    upstream.script("delay", delay_s=1.0, input_tokens=50_000, output_tokens=20)
    first, status = _reserved_in_flight(gateway.url, token, turn1, admin, task_id)
    assert status == 200
    byte_bound = len(json.dumps(turn1).encode()) + REQUEST_OVERHEAD_TOKENS
    assert first == reservation_usd(PRICE, byte_bound, MAX_TOKENS)  # the first request: the byte bound
    _settled(admin, task_id)

    turn2 = copy.deepcopy(turn1)
    added = [{"role": "assistant", "content": "I see it."}, {"role": "user", "content": "y" * 1000}]
    turn2["messages"] += added
    upstream.script("delay", delay_s=1.0, input_tokens=50_300, output_tokens=20)
    second, status = _reserved_in_flight(gateway.url, token, turn2, admin, task_id)
    assert status == 200
    tokens = 50_000 + sum(_compact(m) for m in added) + REQUEST_OVERHEAD_TOKENS
    assert 51_000 < tokens < 53_000
    assert second == reservation_usd(PRICE, tokens, MAX_TOKENS)  # ~51,000 tokens, not ~201,000
    assert second * 2 < reservation_usd(PRICE, len(json.dumps(turn2).encode()) + REQUEST_OVERHEAD_TOKENS, MAX_TOKENS)
    _settled(admin, task_id)

    edited = copy.deepcopy(turn2)
    edited["messages"][2]["content"] = "x = 2\n" * 33_000  # an earlier tool result rewritten
    upstream.script("delay", delay_s=1.0, input_tokens=50_300, output_tokens=20)
    third, status = _reserved_in_flight(gateway.url, token, edited, admin, task_id)
    assert status == 200
    assert third == reservation_usd(PRICE, len(json.dumps(edited).encode()) + REQUEST_OVERHEAD_TOKENS, MAX_TOKENS)
    _settled(admin, task_id)
    metrics = httpx.get(gateway.url + "/metrics").text
    assert "taskgate_reservation_ratio_count" in metrics


def test_a_request_without_an_output_maximum_gets_the_operators_default(
        gateway: GatewayProcess, upstream: UpstreamServer, admin: Admin) -> None:
    assert PRICE is not None
    task_id, token = admin.create_task(cost_limit_usd=100.0, default_max_output_tokens=500)
    assert admin.task(task_id)["default_max_output_tokens"] == 500
    body = {"model": MODEL, "messages": [{"role": "user", "content": "count to three"}]}
    upstream.script("delay", delay_s=1.0, input_tokens=10, output_tokens=5)
    reserved, status = _reserved_in_flight(gateway.url, token, body, admin, task_id)
    assert status == 200
    assert reserved == reservation_usd(PRICE, len(json.dumps(body).encode()) + REQUEST_OVERHEAD_TOKENS, 500)
    (sent,) = upstream.requests
    assert sent.json["max_completion_tokens"] == 500  # the provider enforces the bound reserved
    assert {k: v for k, v in sent.json.items() if k != "max_completion_tokens"} == body
