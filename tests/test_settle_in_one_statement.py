"""An agent turn's settlement in one statement (issue 39): the answer's and the tool
calls' statements carry the once-mark (``marked`` in app/db/sql/ledger.sql), so
:func:`app.settlement.exchange.settle` sends one statement where it sent ``BEGIN``, the
mark, the statement and ``COMMIT``; a retry after a lost answer writes nothing again."""

from __future__ import annotations

import logging
from decimal import Decimal

import asyncpg
import pytest

from app.admission.cost import Settlement
from app.db.pool import create_pool
from app.settings import Settings
from app.settlement import response
from app.settlement.exchange import settle
from app.wire.base import ResponseSummary, ToolCall, Usage
from tests import settlement_rows as seed

KEY = "s:one-statement"


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


async def _state(pool: asyncpg.Pool, task_id: str) -> tuple[object, ...]:
    t = await pool.fetchrow("SELECT input_tokens, output_tokens, cost_usd, reserved_usd, tool_calls FROM tasks"
                            " WHERE id = $1", task_id)
    conv = await pool.fetchrow("SELECT tool_calls, response_streak FROM conversations WHERE task_id = $1", task_id)
    ledger = await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1", task_id)
    spend = await pool.fetchval("SELECT sum(requests) FROM spend_daily WHERE task_id = $1", task_id)
    holds = await pool.fetchval("SELECT count(*) FROM reservations WHERE task_id = $1", task_id)
    return tuple(t), tuple(conv) if conv else None, ledger, spend, holds


def _answer(*call_ids: str) -> ResponseSummary:
    return ResponseSummary(tool_calls=[ToolCall(c, "read_file", {"path": c}) for c in call_ids],
                           usage=Usage(input_tokens=10, output_tokens=4), terminal_seen=True,
                           text_sha256=None if call_ids else "ab" * 32)


@pytest.mark.parametrize("calls", [(), ("c1", "c2")], ids=["judged text answer", "tool calls"])
async def test_settled_once_per_admission_in_one_statement(pool, settings, calls, caplog):
    task_id = await seed.task(pool, "os", "0.50")
    key = await seed.admitted(pool, task_id)
    held = await seed.hold(pool, task_id, "0.30")
    money = Settlement(cost_usd=Decimal("0.05"), release_usd=Decimal("0.30"))

    async def once() -> tuple[bool, object]:
        return await settle(pool, settings, task_id, KEY, _answer(*calls), money, reservation_id=held,
                            admission_key=key, model="m", counted=True, seen_answer_sha256="ab" * 32)

    settled, verdict = await once()
    assert settled and verdict is None if not calls else verdict is not None
    after = await _state(pool, task_id)
    assert after == ((10, 4, Decimal("0.05"), Decimal("0.20"), len(calls)),
                     (len(calls), 0) if calls else (0, 1), len(calls), 1, 0)
    assert await pool.fetchval("SELECT settled_at IS NOT NULL FROM admissions WHERE key = $1", key)
    # the same settlement again (a retry after its commit's answer was lost): nothing written again
    with caplog.at_level(logging.WARNING, logger="app.settlement.response"):
        assert await once() == (True, None)
    assert await _state(pool, task_id) == after
    assert "not written again" in caplog.text
    # a settlement without a key (no admission log row) writes unmarked, as before
    unkeyed = await settle(pool, settings, task_id, KEY, _answer(*(f"u{c}" for c in calls)), None)
    assert unkeyed[0] and (await _state(pool, task_id))[0][:2] == (20, 8)


async def test_an_agent_turns_settlement_is_one_statement(database_url, settings):
    """The judged answer and the tool calls: one statement each on the wire (no BEGIN,
    mark, COMMIT around it); the same through the unit of work was four. The answer goes
    through the settlement batcher (app.db.settlements): a round of one is its own statement."""
    pool = await create_pool(database_url, Settings(database_url=database_url, database_pool_size=1))
    sent: list[str] = []
    each: list[list[str]] = []
    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
        for calls in ((), ("t1",), (), ("t1",)):  # the first two: asyncpg's type introspection too
            task_id = await seed.task(pool, "os")
            key = await seed.admitted(pool, task_id)
            response.forget_windows()
            sent.clear()
            await settle(pool, settings, task_id, KEY, _answer(*calls), None, admission_key=key, model="m",
                         counted=True, seen_answer_sha256="ab" * 32)
            each.append(list(sent))
        answer, calls = each[2:]
        assert len(answer) == 1 and "marked AS (UPDATE admissions" in answer[0] and "answer AS" in answer[0], answer
        assert len(calls) == 1 and "marked AS (UPDATE admissions" in calls[0], calls
        assert "taskgate_record_response(" in calls[0]
    finally:
        await pool.close()


async def test_a_missing_task_marks_and_writes_nothing(pool, settings):
    key = await seed.admitted(pool, await seed.task(pool, "os"))
    for calls in ((), ("m1",)):
        assert await settle(pool, settings, "os-no-such-task", KEY, _answer(*calls), None, admission_key=key,
                            model="m", counted=True) == (True, None)
