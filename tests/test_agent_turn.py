"""The agent-turn path (:mod:`app.admission.turn`) on real PostgreSQL: requests carrying
tool results are admitted exactly under concurrency, a loop stop latches as on the usual
path, and a ``loop_guard`` changed by an operator applies to the very next turn."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from app.admission import known_turn
from app.admission import turn as agent_turn
from app.admission.admission import admit
from app.admission.tokens import token_hash
from app.db.commits import new_key
from app.errors import GatewayError
from app.guard.judge import GuardRequest
from app.guard.policy import Policy
from app.guard.result_prints import config_for, fingerprints
from app.settings import Settings
from app.wire.base import ToolCall, ToolResult

KEY = "s:agent-turn"


@pytest.fixture
def opened(monkeypatch):
    """How many turns ``taskgate_agent_turn()`` recorded (the path was taken), in a
    transaction or in one statement (``taskgate_known_turn()``)."""
    seen: Counter[str] = Counter()
    real, real_known = agent_turn.open_turn, known_turn.admit_known

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        turn = await real(*args, **kwargs)
        seen["recorded" if turn is not None and turn.recorded else "not"] += 1
        return turn

    async def counting_known(*args, **kwargs):  # type: ignore[no-untyped-def]
        known = await real_known(*args, **kwargs)
        seen["recorded" if known is not None else "unknown"] += 1
        return known

    monkeypatch.setattr(agent_turn, "open_turn", counting)
    monkeypatch.setattr(known_turn, "admit_known", counting_known)
    return seen


def _turn(call_id: str, tool: str = "read_file", arguments: object = None, output: str = "ok") -> GuardRequest:
    return GuardRequest(KEY, [ToolCall(call_id, tool, arguments if arguments is not None else {"id": call_id})],
                        [ToolResult(call_id, output)])


async def _task(pool, request_limit: int, loop_guard: dict | None = None) -> tuple[str, str]:
    token = secrets.token_hex(8)
    task_id = "turn-" + token
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, loop_guard)"
                       " VALUES ($1, $2, $3, COALESCE($4::jsonb, '{}'))",
                       task_id, token_hash(token), request_limit, loop_guard)
    return task_id, token_hash(token)


async def _admit(pool, hashed: str, settings: Settings, guard: GuardRequest) -> str:
    try:
        await admit(pool, hashed, settings, guard, conversation_key=KEY)
        return "admitted"
    except GatewayError as err:
        return err.code or ""


async def test_agent_turns_are_exact_under_concurrency(pool, opened, database_url):
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, 26)
    assert await _admit(pool, hashed, settings, _turn("warm")) == "admitted"  # the task is known here now
    results = await asyncio.gather(*(_admit(pool, hashed, settings, _turn(f"c{i}")) for i in range(60)))
    assert results.count("admitted") == 25
    assert results.count("request_limit") == 35
    assert opened["recorded"] >= 26  # every admitted turn took the path (and the one that latched)
    row = await pool.fetchrow("SELECT admitted_requests, refused_requests, tool_calls, status, stop_reason"
                              " FROM tasks WHERE id = $1", task_id)
    assert tuple(row) == (26, 35, 27, "stopped", "request_limit")
    # the turn that latched wrote its results, as on the usual path; the refusals after it nothing
    assert await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1 AND result_hash IS NOT NULL",
                               task_id) == 27
    assert await pool.fetchval("SELECT count(*) FROM task_events WHERE task_id = $1 AND kind = 'stopped'",
                               task_id) == 1


async def test_a_loop_stop_on_the_agent_turn_path_latches_once(pool, opened, database_url):
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, 100)
    assert await _admit(pool, hashed, settings, _turn("warm", tool="ls")) == "admitted"
    same = {"path": "src/app.py"}
    results = [await _admit(pool, hashed, settings, _turn(f"loop{i}", arguments=same, output="x = 1"))
               for i in range(6)]
    assert results == ["admitted"] * 4 + ["repeated_tool_call"] * 2
    row = await pool.fetchrow("SELECT admitted_requests, refused_requests, status, stop_reason FROM tasks"
                              " WHERE id = $1", task_id)
    assert tuple(row) == (5, 2, "stopped", "repeated_tool_call")
    assert await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1", task_id) == 6
    assert await pool.fetchval("SELECT count(*) FROM task_events WHERE task_id = $1 AND kind = 'stopped'",
                               task_id) == 1
    assert opened["recorded"] >= 4


async def test_a_changed_loop_guard_applies_to_the_next_turn(pool, opened, database_url):
    """The results are fingerprinted under the ``loop_guard`` this process last saw; the
    locked row's is compared, so an operator's change is never fingerprinted under the
    old one (here: the default normalisers back on, so ``took 3ms`` and ``took 4ms``
    are the same result and the fifth identical call stops the task)."""
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, 100, {"result_normalizer_defaults": False})
    for i in range(2):
        assert await _admit(pool, hashed, settings, _turn(f"warm{i}", tool="ls")) == "admitted"
    assert opened["recorded"] == 1  # the first one made the task known here
    await pool.execute("UPDATE tasks SET loop_guard = '{}' WHERE id = $1", task_id)
    same = {"cmd": "make test"}
    results = [await _admit(pool, hashed, settings, _turn(f"t{i}", tool="shell", arguments=same,
                                                          output=f"tests passed, took {i + 3}ms"))
               for i in range(5)]
    assert results == ["admitted"] * 4 + ["repeated_tool_call"], results
    detail = await pool.fetchval("SELECT stop_detail FROM tasks WHERE id = $1", task_id)
    assert json.loads(detail)["count"] == 5 if isinstance(detail, str) else detail["count"] == 5


async def _open_turn_counting_writes(pool, hashed: str, settings: Settings, guard: GuardRequest):
    """``open_turn`` in a transaction of its own, with the ``tool_calls`` rows it inserted
    and updated (``pg_stat_xact_user_tables``, before and after: the view also holds the
    connection's earlier transactions not yet reported to the cumulative statistics)."""
    counts = "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'tool_calls'"
    async with pool.acquire() as conn:
        async with conn.transaction():
            before = await conn.fetchrow(counts)
            turn = await agent_turn.open_turn(conn, hashed, guard, settings, new_key(), None)
            after = await conn.fetchrow(counts)
    return turn, (after[0] - before[0], after[1] - before[1])


async def test_a_new_call_is_written_with_its_result_in_one_row(pool, database_url):
    """A call new to the ledger that carries its result (an agent writing tool use as
    text, a history replayed) is inserted completed: one row version, no update; a result
    for a call the ledger held pending still completes it. ``completed`` counts both."""
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, 100)
    assert await _admit(pool, hashed, settings, _turn("warm")) == "admitted"  # known here: the path is taken
    await pool.execute("INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash)"
                       " VALUES ($1, 'pending', $2, 'read_file', 'h')", task_id, KEY)
    guard = GuardRequest(KEY, [ToolCall("fresh", "read_file", {"id": "fresh"})],
                         [ToolResult("fresh", "first"), ToolResult("fresh", "second"), ToolResult("pending", "ok")])
    turn, writes = await _open_turn_counting_writes(pool, hashed, settings, guard)
    assert turn is not None and turn.recorded
    assert (turn.new_calls, turn.completed) == (1, 2)
    assert writes == (1, 1)  # the new call inserted completed; only the pending one updated
    rows = {r["call_id"]: r for r in await pool.fetch(
        "SELECT call_id, result_hash, completed_at FROM tool_calls WHERE task_id = $1", task_id)}
    assert rows["fresh"]["completed_at"] is not None and rows["pending"]["completed_at"] is not None
    first, second = (fingerprints([], [ToolResult("fresh", text)], config_for(turn.task, settings))
                     .results[0].result_hash for text in ("first", "second"))
    assert rows["fresh"]["result_hash"] == first != second  # the first result given for an id is kept


async def test_a_refusal_on_the_agent_turn_path_quotes_the_database_clock(pool, opened, database_url):
    """The rule decides at the database's ``now()``; the refusal names the limit at that
    same clock: ``max_duration``'s ``elapsed_s`` is the transaction's ``now()`` (the
    latch's ``stopped_at``, written in it) less ``first_admitted_at``, not the gateway's
    clock read after the statement returned."""
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, 100)
    assert await _admit(pool, hashed, settings, _turn("warm")) == "admitted"  # known here: the path is taken
    await pool.execute("UPDATE tasks SET max_duration_s = 5, first_admitted_at = now() - interval '10 seconds'"
                       " WHERE id = $1", task_id)
    recorded = opened["recorded"]
    assert await _admit(pool, hashed, settings, _turn("late")) == "max_duration"
    assert opened["recorded"] > recorded  # refused on the agent-turn path
    row = await pool.fetchrow("SELECT stop_detail, stopped_at, first_admitted_at FROM tasks WHERE id = $1", task_id)
    detail = json.loads(row["stop_detail"]) if isinstance(row["stop_detail"], str) else row["stop_detail"]
    assert detail["elapsed_s"] == round((row["stopped_at"] - row["first_admitted_at"]).total_seconds(), 3)


async def test_the_turn_carries_the_clock_its_rule_read(pool, database_url):
    """``open_turn`` returns the transaction's ``now()`` (the function's ``rule_now``), and
    :func:`agent_turn.judge` names the limit at it: a database an hour ahead of the
    gateway explains an hour, where the gateway's clock would see no limit reached."""
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, 100)
    assert await _admit(pool, hashed, settings, _turn("warm")) == "admitted"
    async with pool.acquire() as conn:
        async with conn.transaction():
            now = await conn.fetchval("SELECT now()")
            turn = await agent_turn.open_turn(conn, hashed, _turn("next"), settings, new_key(), None)
    assert turn is not None and turn.recorded and turn.now == now
    first = datetime.now(timezone.utc)
    task = replace(turn.task, max_duration_s=60, first_admitted_at=first)
    ahead = replace(turn, task=task, counted=False, new_calls=0, completed=0, now=first + timedelta(hours=1))
    verdict, breach = agent_turn.judge(ahead, Policy(task, settings), KEY)
    assert breach == ("max_duration", {"elapsed_s": 3600.0, "max_duration_s": 60})
