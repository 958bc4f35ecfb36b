"""Holds never latch (issue 19 §1), on real PostgreSQL through two real gateway processes
and a loopback upstream with a delay: a request that fits once the reservations in flight
settle waits for them; only settled dollars plus a request's worst case latch the task."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from decimal import Decimal

import httpx
import openai
import pytest

from app.admission.cost import REQUEST_OVERHEAD_TOKENS, actual_usd, reservation_usd
from app.config.schema import Price
from app.testing.upstream import UpstreamServer
from app.wire.base import Usage
from tests.support import Admin, GatewayProcess, priced_config, started

MODEL = "pricey-model"  # $1,000 per MTok in and out: a small request reserves about $1.2
PRICE = Price(input_per_mtok=1000, output_per_mtok=1000)
MAX_TOKENS = 100


def _body(max_tokens: int = MAX_TOKENS) -> bytes:
    return json.dumps({"model": MODEL, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "count to three"}]}).encode()


def _worst(body: bytes, max_tokens: int = MAX_TOKENS) -> Decimal:
    return reservation_usd(PRICE, len(body) + REQUEST_OVERHEAD_TOKENS, max_tokens)


@pytest.fixture(scope="module")
def gateways(database_url: str, priced_upstream: UpstreamServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[list[GatewayProcess]]:
    path = priced_config(tmp_path_factory.mktemp("config"), priced_upstream.base_url, MODEL, 1000)
    env = {"TASKGATE_CONFIG": str(path), "TASKGATE_MAX_UNFINISHED_PER_CLIENT": "0"}  # all clients: 127.0.0.1
    with started([GatewayProcess(database_url, priced_upstream.base_url, **env) for _ in range(2)]) as procs:
        yield procs


def _holds(gateway: GatewayProcess, outcome: str) -> float:
    """``taskgate_cost_holds_total{outcome=...}`` on ``gateway``'s /metrics (0 when absent)."""
    for line in httpx.get(gateway.url + "/metrics").text.splitlines():
        if line.startswith(f'taskgate_cost_holds_total{{outcome="{outcome}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _settled(admin: Admin, task_id: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        task = admin.task(task_id)
        if Decimal(str(task["reserved_usd"])) == 0 or time.monotonic() > deadline:
            return task
        time.sleep(0.05)


async def _burst(urls: list[str], token: str, bodies: list[bytes]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:
        return await asyncio.gather(*(
            client.post(urls[i % len(urls)] + "/v1/chat/completions", content=body,
                        headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
            for i, body in enumerate(bodies)))


def test_a_burst_of_parallel_requests_waits_for_holds_and_never_latches(
        gateways, priced_upstream: UpstreamServer) -> None:
    one, two = gateways
    admin = Admin(one.url)
    body = _body()
    worst = _worst(body)
    assert 4 * worst <= 5 < 5 * worst  # about 4 fit at once, the 5th would have latched the task
    task_id, token = admin.create_task(request_limit=10_000, cost_limit_usd=5.0)
    priced_upstream.script("delay", delay_s=0.3, input_tokens=10, output_tokens=3)  # $0.013 each
    responses = asyncio.run(_burst([one.url, two.url], token, [body] * 60))
    assert [r.status_code for r in responses] == [200] * 60, [r.text for r in responses if r.status_code != 200]
    task = _settled(admin, task_id)
    assert (task["status"], task["admitted_requests"], task["refused_requests"]) == ("active", 60, 0)
    each = actual_usd(PRICE, Usage(input_tokens=10, output_tokens=3))
    assert Decimal(str(task["cost_usd"])) == pytest.approx(each * 60)
    assert Decimal(str(task["cost_usd"])) <= 5 and Decimal(str(task["reserved_usd"])) == 0
    assert len(priced_upstream.requests) == 60
    assert _holds(one, "admitted") + _holds(two, "admitted") > 0  # they waited, and were admitted


def test_a_request_whose_worst_case_alone_passes_the_rest_of_the_ceiling_latches_at_once(
        gateways, priced_upstream: UpstreamServer) -> None:
    one, two = gateways
    admin = Admin(one.url)
    task_id, token = admin.create_task(cost_limit_usd=3.0)
    priced_upstream.script("text", input_tokens=1000, output_tokens=0)  # settles at $1.00
    oa = openai.OpenAI(base_url=one.url + "/v1", api_key=token, max_retries=0)
    oa.chat.completions.create(model=MODEL, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": "hi"}])
    assert Decimal(str(_settled(admin, task_id)["cost_usd"])) == 1
    priced_upstream.script("delay", delay_s=4.0, input_tokens=10, output_tokens=3)
    big = _body(max_tokens=1500)  # worst case ~$2.6 > the $2.00 left, whatever is in flight

    async def run_checked() -> tuple[httpx.Response, httpx.Response, bool]:
        async with httpx.AsyncClient(timeout=60) as client:
            headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
            slow = asyncio.ensure_future(client.post(two.url + "/v1/chat/completions", content=_body(),
                                                     headers=headers))
            while Decimal(str(admin.task(task_id)["reserved_usd"])) == 0:
                await asyncio.sleep(0.05)
            refused = await client.post(one.url + "/v1/chat/completions", content=big, headers=headers)
            open_then = not slow.done()
            return refused, await slow, open_then

    refused, slow, open_then = asyncio.run(run_checked())
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "cost_limit", refused.text
    assert open_then  # decided while the other request still held its reservation: no wait
    assert slow.status_code == 200  # the request in flight fitted: not cut
    task = _settled(admin, task_id)
    assert (task["status"], task["stop_reason"]) == ("stopped", "cost_limit")
    detail = task["stop_detail"]
    assert Decimal(detail["cost_usd"]) == 1 and Decimal(detail["reserved_usd"]) == _worst(_body())
    assert Decimal(detail["request_reservation_usd"]) == _worst(big, 1500)
    assert Decimal(detail["cost_limit_usd"]) == 3
    assert "held by requests in flight" in task["stop_message"]


def test_a_wait_that_times_out_is_a_429_cost_reserved_not_counted(gateways, priced_upstream: UpstreamServer) -> None:
    one, two = gateways
    admin = Admin(one.url)
    task_id, token = admin.create_task(cost_limit_usd=2.0, cost_wait_s=0.5)
    assert admin.task(task_id)["cost_wait_s"] == 0.5
    priced_upstream.script("delay", delay_s=5.0, input_tokens=10, output_tokens=3)

    async def run() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
            slow = asyncio.ensure_future(client.post(one.url + "/v1/chat/completions", content=_body(),
                                                     headers=headers))
            while Decimal(str(admin.task(task_id)["reserved_usd"])) == 0:
                await asyncio.sleep(0.05)
            held = await client.post(two.url + "/v1/chat/completions", content=_body(), headers=headers)
            return held, await slow

    held, slow = asyncio.run(run())
    assert held.status_code == 429, held.text
    error = held.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "cost_reserved")
    assert "held by requests in flight" in error["message"] and "Nothing was forwarded or counted" in error["message"]
    assert held.headers["retry-after"] == "1" and held.headers["x-should-retry"] == "true"
    assert slow.status_code == 200
    task = _settled(admin, task_id)
    assert (task["status"], task["admitted_requests"], task["refused_requests"]) == ("active", 1, 0)
    assert len(priced_upstream.requests) == 1
    assert _holds(two, "timed_out") >= 1
