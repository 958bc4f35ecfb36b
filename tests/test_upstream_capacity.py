"""Upstream capacity is honest (issue 21, item 5): a request that finds no upstream
connection free within ``upstream_slot_wait_s`` is refused 503 with ``retry-after``
before admission, so it is not counted; the slot comes back when a relay ends."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from app.proxy.capacity import UpstreamSlots
from tests.support import Admin, GatewayProcess

CAP = 4


@pytest.fixture(scope="module")
def capped(database_url, upstream):
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_UPSTREAM_MAX_CONNECTIONS=str(CAP),
                        TASKGATE_UPSTREAM_SLOT_WAIT_S="0.5") as gw:
        yield gw


def test_requests_beyond_the_cap_are_refused_uncounted_then_served(capped, upstream):
    admin = Admin(capped.url)
    task_id, token = admin.create_task()
    upstream.script("delay", delay_s=3.0)
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=capped.url, timeout=30,
                                     headers={"authorization": f"Bearer {token}"}) as client:
            held = [asyncio.create_task(client.post("/v1/chat/completions", json=body)) for _ in range(CAP)]
            await asyncio.sleep(1.0)  # all CAP are upstream now
            beyond = await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for _ in range(3)),
                                          client.get("/v1/models"))
            return [*await asyncio.gather(*held), *beyond]
    responses = asyncio.run(run())
    assert [r.status_code for r in responses[:CAP]] == [200] * CAP
    for refused in responses[CAP:]:
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "upstream_busy"
        assert int(refused.headers["retry-after"]) >= 1
    task = admin.task(task_id)
    assert task["admitted_requests"] == CAP  # the refused ones were never counted
    assert len([r for r in upstream.requests if r.method == "POST"]) == CAP
    upstream.script("text")
    client = openai.OpenAI(base_url=capped.url + "/v1", api_key=token, max_retries=0)
    for _ in range(CAP + 2):  # every slot came back
        client.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    assert admin.task(task_id)["admitted_requests"] == 2 * CAP + 2


def test_a_refused_admission_gives_its_slot_back(capped, upstream):
    admin = Admin(capped.url)
    task_id, token = admin.create_task(request_limit=1)
    h = {"authorization": f"Bearer {token}"}
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(capped.url + "/v1/chat/completions", json=body, headers=h).status_code == 200
    for _ in range(CAP * 3):  # stopped: 403s, each would leak a slot if not given back
        assert httpx.post(capped.url + "/v1/chat/completions", json=body, headers=h).status_code in (400, 403)
    _, other = admin.create_task()
    r = httpx.post(capped.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {other}"})
    assert r.status_code == 200


async def test_a_slot_releasing_before_on_finish_is_small() -> None:
    """``releasing`` is held for the life of each open stream: an object of two slots
    (a closure, its cell and tuple, were ~200 B); it gives the slot back, then calls
    ``on_finish`` with the outcome."""
    import gc
    import tracemalloc

    slots = UpstreamSlots(1, 1.0)
    slot = await slots.take()
    seen: list[object] = []

    async def on_finish(outcome: object) -> None:
        seen.append((outcome, slots._semaphore.locked()))

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        finish = slot.releasing(on_finish)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 120, held
    await finish("done")
    assert seen == [("done", False)]
