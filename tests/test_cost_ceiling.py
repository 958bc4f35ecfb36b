"""The dollar ceiling on real PostgreSQL through real gateway processes: worst-case
reservations under concurrency, settlement from usage, pricing refusals, allowed models."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from decimal import Decimal

import httpx
import openai
import pytest
from click.testing import CliRunner

from app.admission.cost import REQUEST_OVERHEAD_TOKENS, actual_usd, reservation_usd
from app.cli import main
from app.config.prices import default_price
from app.testing.upstream import UpstreamServer
from app.wire.base import Usage
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess

MODEL = "gpt-4.1-mini"
PRICE = default_price(MODEL)
MAX_TOKENS = 1000


def _body(**extra: object) -> bytes:
    return json.dumps({"model": MODEL, "max_tokens": MAX_TOKENS,
                       "messages": [{"role": "user", "content": "count to three"}], **extra}).encode()


def _reservation(body: bytes) -> Decimal:
    assert PRICE is not None
    return reservation_usd(PRICE, len(body) + REQUEST_OVERHEAD_TOKENS, MAX_TOKENS)


def _wait(admin: Admin, task_id: str, done: Callable[[dict], bool], timeout: float = 15) -> dict:
    """The task once ``done(task)`` holds (or at the timeout, for the assertion to show)."""
    deadline = time.monotonic() + timeout
    while True:
        task = admin.task(task_id)
        if done(task) or time.monotonic() > deadline:
            return task
        time.sleep(0.05)


def _settled(admin: Admin, task_id: str) -> dict:
    """The task once every reservation has settled (``reserved_usd`` back to 0)."""
    return _wait(admin, task_id, lambda t: Decimal(str(t["reserved_usd"])) == 0)


def _post(url: str, token: str, body: bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(url + path, content=body, timeout=30,
                      headers={"authorization": f"Bearer {token}", "content-type": "application/json"})


def test_concurrent_requests_over_two_gateways_never_settle_past_the_ceiling(
        gateway: GatewayProcess, database_url: str, upstream: UpstreamServer, admin: Admin) -> None:
    body = _body()
    r = _reservation(body)
    fits = 37
    limit = r * fits + r / 2
    task_id, token = admin.create_task(request_limit=10_000, cost_limit_usd=float(limit))
    # every request really costs its whole worst case: exactly `fits` can ever be paid for
    upstream.script("delay", delay_s=2.0, input_tokens=len(body) + REQUEST_OVERHEAD_TOKENS, output_tokens=MAX_TOKENS)

    async def run(urls: list[str]) -> list[int]:
        async with httpx.AsyncClient(timeout=60) as client:
            async def one(i: int) -> int:
                response = await client.post(urls[i % 2] + "/v1/chat/completions", content=body,
                                             headers={"authorization": f"Bearer {token}",
                                                      "content-type": "application/json"})
                return response.status_code
            return await asyncio.gather(*(one(i) for i in range(200)))

    # every client here is 127.0.0.1: lift the per-address cap on connections still sending
    # their headers (TASKGATE_MAX_UNFINISHED_PER_CLIENT, 32), which 100 new ones at once pass
    uncapped = {"TASKGATE_MAX_UNFINISHED_PER_CLIENT": "0"}
    with GatewayProcess(database_url, upstream.base_url, **uncapped) as first, \
            GatewayProcess(database_url, upstream.base_url, **uncapped) as second:
        statuses = asyncio.run(run([first.url, second.url]))
    # `fits` reservations went upstream at once; the others waited for them (holds never
    # latch), and once they settled the ceiling was truly reached: the first waiter to
    # decide set the latch, the rest found the task stopped
    assert statuses.count(200) == fits, statuses
    assert statuses.count(400) == 200 - fits
    assert len(upstream.requests) == fits
    task = admin.task(task_id)
    assert task["admitted_requests"] == fits
    assert (task["status"], task["stop_reason"]) == ("stopped", "cost_limit")
    detail = task["stop_detail"]  # settled dollars alone plus the request's worst case crossed it
    assert Decimal(detail["cost_usd"]) == r * fits
    assert Decimal(detail["cost_usd"]) + Decimal(detail["request_reservation_usd"]) > Decimal(detail["cost_limit_usd"])
    settled = _settled(admin, task_id)
    assert Decimal(str(settled["reserved_usd"])) == 0
    assert Decimal(str(settled["cost_usd"])) == r * fits <= Decimal(detail["cost_limit_usd"])
    assert "$" in settled["stop_message"] and "settled" in settled["stop_message"]


def test_settlement_uses_usage_and_releases_the_reservation(gateway: GatewayProcess, upstream: UpstreamServer,
                                                            admin: Admin) -> None:
    task_id, token = admin.create_task(cost_limit_usd=5.0)
    upstream.script("text", input_tokens=1000, output_tokens=200)
    assert _post(gateway.url, token, _body()).status_code == 200
    task = _settled(admin, task_id)
    expected = actual_usd(PRICE, Usage(input_tokens=1000, output_tokens=200))  # type: ignore[arg-type]
    assert Decimal(str(task["cost_usd"])) == pytest.approx(expected)


def test_a_response_without_usage_settles_at_its_full_reservation(gateway: GatewayProcess,
                                                                   upstream: UpstreamServer, admin: Admin) -> None:
    task_id, token = admin.create_task(cost_limit_usd=5.0)
    upstream.script("error", status=500)  # a failed attempt: no usage
    body = _body()
    assert _post(gateway.url, token, body).status_code == 500
    task = _settled(admin, task_id)
    assert Decimal(str(task["cost_usd"])) == pytest.approx(_reservation(body))


@pytest.mark.parametrize(("path", "body", "fix"), [
    ("/v1/chat/completions", {"model": "mystery-model", "messages": []}, "add a price"),
    ("/v1/messages", {"model": "claude-sonnet-4-5", "messages": []}, "set max_tokens"),
])
def test_a_request_that_cannot_be_priced_is_refused_before_dispatch(
        gateway: GatewayProcess, upstream: UpstreamServer, admin: Admin, path: str, body: dict, fix: str) -> None:
    task_id, token = admin.create_task(cost_limit_usd=1.0)
    response = _post(gateway.url, token, json.dumps(body).encode(), path)
    assert response.status_code == 403, response.text
    text = response.text
    assert fix in text and "Nothing was forwarded or counted" in text
    if path != "/v1/messages":
        assert response.json()["error"]["code"] == "price_unknown"
    task = admin.task(task_id)
    assert (task["admitted_requests"], task["status"]) == (0, "active")
    assert upstream.requests == []


def test_models_outside_allowed_models_are_refused_and_not_counted(
        gateway: GatewayProcess, upstream: UpstreamServer, admin: Admin) -> None:
    task_id, token = admin.create_task(allowed_models=["gpt-4.1*"])
    refused = _post(gateway.url, token, json.dumps({"model": "gpt-4o", "messages": []}).encode())
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed"
    assert _post(gateway.url, token, _body()).status_code == 200
    task = admin.task(task_id)
    assert (task["admitted_requests"], task["status"]) == (1, "active")
    assert len(upstream.requests) == 1


def test_the_cli_sets_and_shows_the_ceiling_in_dollars(gateway: GatewayProcess, admin: Admin) -> None:
    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    runner = CliRunner()
    created = runner.invoke(main, ["tasks", "create", "--id", "cli-cost-1", "--cost-limit", "5"], env=env)
    assert created.exit_code == 0, created.output
    shown = runner.invoke(main, ["tasks", "show", "cli-cost-1"], env=env)
    assert "$0.00 of $5.00 spent, $0.00 reserved" in shown.output, shown.output
    assert admin.task("cli-cost-1")["cost_limit_usd"] == 5.0


@pytest.mark.parametrize("client_asked", [False, True])
def test_streamed_chat_usage_is_asked_for_limited_tasks_and_hidden_unless_the_client_asked(
        gateway: GatewayProcess, upstream: UpstreamServer, admin: Admin, client_asked: bool) -> None:
    task_id, token = admin.create_task(token_limit=100_000)
    upstream.script("text", input_tokens=321, output_tokens=12)
    extra = {"stream_options": {"include_usage": True}} if client_asked else {}
    oa = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    chunks = list(oa.chat.completions.create(model=MODEL, stream=True, messages=[{"role": "user", "content": "hi"}],
                                              **extra))
    usage_chunks = [c for c in chunks if not c.choices and c.usage is not None]
    assert len(usage_chunks) == (1 if client_asked else 0)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (sent,) = upstream.requests
    assert sent.json["stream_options"]["include_usage"] is True
    task = _wait(admin, task_id, lambda t: t["input_tokens"] > 0)
    assert (task["input_tokens"], task["output_tokens"]) == (321, 12)
