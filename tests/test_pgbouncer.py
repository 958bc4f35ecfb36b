"""Three gateway processes on one PostgreSQL through PgBouncer in transaction mode.

They migrate a fresh database at start-up over the direct migration URL (all three at
once), then admit exactly the limit on the fast path and on the tool-result (locked)
path, never answer 401 to a valid token, and stop a looping agent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Iterator

import httpx
import openai
import pytest

from tests.databases import empty_database
from tests.pgbouncer import NOT_INSTALLED, pgbouncer, pgbouncer_binary
from tests.support import Admin, GatewayProcess, started

pytestmark = [pytest.mark.skipif(pgbouncer_binary() is None, reason=NOT_INSTALLED),
              pytest.mark.timeout(900)]  # 3,000 requests on one row lock, on a loaded machine

LIMIT, REQUESTS = 500, 3000


@pytest.fixture(scope="module")
def gateways(database_url, upstream) -> Iterator[list[GatewayProcess]]:
    """Three gateways through PgBouncer on a fresh database; they start (and migrate it
    over the direct URL) at the same time."""
    with empty_database(database_url) as direct, pgbouncer(direct) as bounced:
        # 3,000 requests queue on one task's row lock on a loaded 2-core machine: generous
        # database, first-byte and header timeouts, so that a slow queue is not taken for an
        # outage (503) or a slow client (connection closed)
        with started([GatewayProcess(bounced, upstream.base_url, TASKGATE_MIGRATE_ON_START="true",
                                     TASKGATE_MIGRATION_DATABASE_URL=direct, TASKGATE_DATABASE_TIMEOUT_S="60",
                                     TASKGATE_FIRST_BYTE_TIMEOUT_S="120", TASKGATE_HEADER_TIMEOUT_S="120",
                                     TASKGATE_BODY_TIMEOUT_S="120")
                      for _ in range(3)]) as procs:
            yield procs


def _chat(i: int, tool_result: bool) -> dict:
    messages: list[dict] = [{"role": "user", "content": f"job {i}"}]
    if tool_result:  # a new tool call and its result: the locked admission path
        call_id = f"call_pgb_{i}"
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}"})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": f"contents {i}"},
        ]
    return {"model": "m", "messages": messages}


async def _storm(urls: list[str], token: str, tool_result: bool) -> list[int]:
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def one(i: int) -> int:
            r = await client.post(urls[i % len(urls)] + "/v1/chat/completions", json=_chat(i, tool_result),
                                  headers={"authorization": f"Bearer {token}", "x-session-id": f"s{i}"})
            return r.status_code
        return await asyncio.gather(*(one(i) for i in range(REQUESTS)))


@pytest.mark.parametrize("tool_result", [False, True], ids=["fast_path", "tool_result_path"])
def test_three_gateways_through_pgbouncer_admit_exactly_the_limit(gateways, upstream, tool_result):
    admin = Admin(gateways[0].url)
    task_id, token = admin.create_task(request_limit=LIMIT)
    statuses = asyncio.run(_storm([gw.url for gw in gateways], token, tool_result))
    counts = {s: statuses.count(s) for s in set(statuses)}
    assert counts == {200: LIMIT, 400: REQUESTS - LIMIT}, (counts, [gw.output()[-3000:] for gw in gateways])
    assert len([r for r in upstream.requests if r.method == "POST"]) == LIMIT
    task = admin.task(task_id)
    assert task["admitted_requests"] == LIMIT and task["stop_reason"] == "request_limit"
    for gw in gateways:
        assert "prepared statement" not in gw.output()


def test_valid_tokens_never_get_401_through_pgbouncer(gateways):
    admin = Admin(gateways[1].url)
    tokens = [admin.create_task(request_limit=5)[1] for _ in range(30)]

    async def check() -> list[int]:
        async with httpx.AsyncClient(timeout=60) as client:
            async def one(i: int) -> int:
                r = await client.post(gateways[i % 3].url + "/v1/chat/completions", json=_chat(i, i % 2 == 1),
                                      headers={"authorization": f"Bearer {tokens[i % len(tokens)]}"})
                return r.status_code
            return await asyncio.gather(*(one(i) for i in range(300)))

    statuses = asyncio.run(check())
    assert 401 not in statuses and set(statuses) <= {200, 400}, statuses
    assert statuses.count(200) == 5 * len(tokens)


def test_loop_guard_stops_a_looping_agent_through_pgbouncer(gateways, upstream):
    _, token = Admin(gateways[2].url).create_task()
    upstream.script("tool_call", name="read_file", arguments={"path": "README.md"})
    messages: list[dict] = [{"role": "user", "content": "list the files"}]
    for turn in range(40):
        client = openai.OpenAI(base_url=gateways[turn % 3].url + "/v1", api_key=token, max_retries=0)
        try:
            message = client.chat.completions.create(model="m", messages=messages).choices[0].message
        except openai.BadRequestError as exc:
            assert "repeated_tool_call" in json.dumps(exc.body)
            break
        call = message.tool_calls[0]
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call.id, "type": "function",
            "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "same text"})
    else:
        pytest.fail("the looping agent was not stopped")
    assert turn == 5
