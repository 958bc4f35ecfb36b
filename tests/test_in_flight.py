"""A stop's refusal quotes the counters after the responses still being recorded in this
process (:mod:`app.admission.in_flight`), against a real PostgreSQL: the response that led
to the stop is recorded while the next request is being judged."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from app.admission import in_flight
from app.admission.admission import admit
from app.admission.tokens import token_hash
from app.errors import GatewayError
from app.settings import Settings


async def test_drained_waits_for_the_last_close_and_is_bounded():
    in_flight.opened("t1")
    in_flight.opened("t1")
    waiter = asyncio.ensure_future(in_flight.drained("t1", timeout_s=5))
    await asyncio.sleep(0.01)
    in_flight.closed("t1")
    await asyncio.sleep(0.01)
    assert not waiter.done()
    in_flight.closed("t1")
    assert await waiter and in_flight.pending("t1") == 0
    in_flight.opened("t2")
    assert not await in_flight.drained("t2", timeout_s=0.05)
    in_flight.closed("t2")
    assert await in_flight.drained("never-seen")


async def test_a_new_stop_quotes_the_response_still_being_recorded(pool):
    token = secrets.token_hex(8)
    task_id = "in-flight-" + token
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, admitted_requests, tool_calls)"
                       " VALUES ($1, $2, 5, 5, 4)", task_id, token_hash(token))
    settings = Settings(database_url="postgresql+asyncpg://unused/x")
    in_flight.opened(task_id)  # the 5th response: relayed, its record not yet written

    async def record_the_fifth_response() -> None:
        await asyncio.sleep(0.2)
        await pool.execute("UPDATE tasks SET tool_calls = 5, input_tokens = 100 WHERE id = $1", task_id)
        in_flight.closed(task_id)

    recording = asyncio.ensure_future(record_the_fifth_response())
    with pytest.raises(GatewayError) as refused:
        await admit(pool, token_hash(token), settings)  # the 6th request: request_limit latches
    await recording
    assert refused.value.code == "request_limit"
    assert "5 of 5 requests admitted, 100 tokens, 5 tool calls" in refused.value.message
