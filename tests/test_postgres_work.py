"""What PostgreSQL runs per admission and per recorded response, counted by
``pg_stat_statements`` on a private embedded cluster, directly and through PgBouncer in
transaction mode: the fast path is one statement either way (PgBouncer adds no ``SET``
before each transaction), and the numbers ``docs/scaling.md`` builds on stay true; which
commits wait for the disk, counted by ``pg_stat_io``."""

from __future__ import annotations

import asyncio
import secrets
from typing import Iterator

import asyncpg
import pytest

from app.admission import known_turn
from app.admission import turn as agent_turn
from app.admission.admission import admit
from app.admission.tokens import token_hash
from app.db.pool import asyncpg_dsn, create_pool
from app.guard.detector import Action
from app.guard.judge import GuardRequest
from app.ledger import known_windows
from app.settings import Settings
from app.settlement.response import record_response
from app.wire.base import ResponseSummary, ToolCall, ToolResult, Usage
from tests.databases import statements_cluster
from tests.pgbouncer import NOT_INSTALLED, pgbouncer, pgbouncer_binary

pytestmark = pytest.mark.skipif(pgbouncer_binary() is None, reason=NOT_INSTALLED)

_CALLS = ("SELECT query, calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
          " WHERE d.datname = current_database() AND query NOT LIKE '%pg_stat_statements%'")


@pytest.fixture(scope="module")
def routes() -> Iterator[dict[str, str]]:
    with statements_cluster() as (url, _), pgbouncer(url) as through:
        yield {"direct": url, "pgbouncer": through, "stats": url}


async def _admit_and_count(url: str, stats_url: str, n: int) -> dict[str, int]:
    stats = await asyncpg.connect(asyncpg_dsn(stats_url))
    try:
        token = "tg-work-" + secrets.token_hex(8)
        await stats.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                            token, token_hash(token))
        settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
        pool = await create_pool(url, settings)
        try:
            await admit(pool, token_hash(token), settings)  # connections are set up
            await stats.execute("SELECT pg_stat_statements_reset()")
            for _ in range(n):
                await admit(pool, token_hash(token), settings)
        finally:
            await pool.close()
        return {r["query"]: r["calls"] for r in await stats.fetch(_CALLS)}
    finally:
        await stats.close()


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_a_fast_path_admission_is_one_statement(routes, route):
    calls = asyncio.run(_admit_and_count(routes[route], routes["stats"], 20))
    assert sum(calls.values()) == 20, calls
    (statement,) = calls  # counts the request and logs its admission key (issue 37: reconciliation)
    assert "UPDATE tasks" in statement and "INSERT INTO admissions" in statement, calls


def _turn(i: int, conversation: str = "s:work") -> GuardRequest:
    """An agent turn: the previous assistant turn called a tool (new call id) and the
    tool answered."""
    call_id = f"call_work_{i}"
    return GuardRequest(conversation, [ToolCall(call_id, "read_file", {"path": f"src/{i}.py"})],
                        [ToolResult(call_id, f"print({i})")])


async def _turns_and_count(url: str, stats_url: str, n: int, windows: str) -> tuple[dict[str, int], dict[str, object]]:
    """``n`` agent turns on one conversation; ``windows``: ``cached`` (as the gateway
    runs), ``unknown`` (forgotten before each turn, as after another process wrote the
    conversation), ``none`` (the caller turned known-window turns off: the transaction
    path) or ``new`` (each turn the first of a conversation of its own, never seen here:
    the bench's agent turn)."""
    stats = await asyncpg.connect(asyncpg_dsn(stats_url))
    try:
        token = "tg-turn-" + secrets.token_hex(8)
        await stats.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                            token, token_hash(token))
        settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
        pool = await create_pool(url, settings)
        try:
            for i in range(2):  # connections are set up, the task's loop_guard is known here
                await admit(pool, token_hash(token), settings, _turn(-1 - i), conversation_key="s:work")
            await stats.execute("SELECT pg_stat_statements_reset()")
            for i in range(n):
                if windows != "cached":
                    known_windows.forget()
                conversation = f"s:new{i}" if windows == "new" else "s:work"
                admitted = await admit(pool, token_hash(token), settings, _turn(i, conversation),
                                       conversation_key=conversation)
                assert admitted.verdict is not None and admitted.verdict.action is Action.OK
        finally:
            await pool.close()
        calls = {r["query"]: r["calls"] for r in await stats.fetch(_CALLS)}
        row = await stats.fetchrow("SELECT admitted_requests, tool_calls FROM tasks WHERE id = $1", token)
        ledger = await stats.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1 AND result_hash IS NOT NULL",
                                      token)
        return calls, {"admitted": row["admitted_requests"], "tool_calls": row["tool_calls"], "completed": ledger}
    finally:
        await stats.close()


async def _usual_path(*args: object) -> None:
    return None


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_an_agent_turn_on_the_transaction_path_is_three_statements(routes, route, monkeypatch):
    """A request carrying a new tool call and its result, on the path a task's first
    turn here and a predicted stop take: ``BEGIN``, one ``SELECT`` (lock, ledger, counts,
    history window), ``COMMIT``; the ledger and the counters hold what the usual path
    would have written."""
    monkeypatch.setattr(known_turn, "admit_known", _usual_path)
    calls, counted = asyncio.run(_turns_and_count(routes[route], routes["stats"], 20, windows="none"))
    assert sum(calls.values()) == 3 * 20, calls
    assert sorted(q.split()[0].upper() for q in calls) == ["BEGIN", "COMMIT", "WITH"], calls
    assert any("taskgate_agent_turn(" in q for q in calls), calls
    assert counted == {"admitted": 22, "tool_calls": 22, "completed": 22}, counted


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_an_agent_turn_on_a_known_window_is_one_statement(routes, route):
    """The same turns when the conversation's window is the one the last turn left here:
    one autocommit statement each (``taskgate_known_turn()``), the same counts."""
    calls, counted = asyncio.run(_turns_and_count(routes[route], routes["stats"], 20, windows="cached"))
    assert calls == {next(iter(calls)): 20} and "taskgate_known_turn" in next(iter(calls)), calls
    assert counted == {"admitted": 22, "tool_calls": 22, "completed": 22}, counted


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_an_agent_turn_whose_window_is_not_known_here_is_two_statements(routes, route):
    """The same turns when this process does not know the window (another process served
    the conversation last): the statement returns the window instead of writing, then
    the turn predicted from it is one more statement."""
    calls, counted = asyncio.run(_turns_and_count(routes[route], routes["stats"], 20, windows="unknown"))
    assert calls == {next(iter(calls)): 40} and "taskgate_known_turn" in next(iter(calls)), calls
    assert counted == {"admitted": 22, "tool_calls": 22, "completed": 22}, counted


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_a_new_conversations_first_turn_is_one_statement(routes, route):
    """Turns each opening a conversation never seen here (its window not cached): the
    window is predicted empty and checked under the lock, one statement each."""
    calls, counted = asyncio.run(_turns_and_count(routes[route], routes["stats"], 20, windows="new"))
    assert calls == {next(iter(calls)): 20} and "taskgate_known_turn" in next(iter(calls)), calls
    assert counted == {"admitted": 22, "tool_calls": 22, "completed": 22}, counted


async def _after_a_locked_turn(url: str, stats_url: str) -> dict[str, int]:
    stats = await asyncpg.connect(asyncpg_dsn(stats_url))
    try:
        token = "tg-locked-" + secrets.token_hex(8)
        await stats.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                            token, token_hash(token))
        settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
        pool = await create_pool(url, settings)
        try:
            agent_turn.forget()  # no task seen here: the first turn takes the locked path
            await admit(pool, token_hash(token), settings, _turn(0, "s:locked"), conversation_key="s:locked")
            await stats.execute("SELECT pg_stat_statements_reset()")
            admitted = await admit(pool, token_hash(token), settings, _turn(1, "s:locked"),
                                   conversation_key="s:locked")
            assert admitted.verdict is not None and admitted.verdict.action is Action.OK
        finally:
            await pool.close()
        return {r["query"]: r["calls"] for r in await stats.fetch(_CALLS)}
    finally:
        await stats.close()


def test_the_turn_after_a_locked_path_turn_is_one_statement(routes):
    """The locked path leaves the window it judged (under the lock) here: the
    conversation's next turn is predicted from it, one statement."""
    calls = asyncio.run(_after_a_locked_turn(routes["direct"], routes["stats"]))
    assert calls == {next(iter(calls)): 1} and "taskgate_known_turn" in next(iter(calls)), calls


async def _responses_and_count(url: str, stats_url: str, n: int) -> tuple[dict[str, int], dict[str, object]]:
    stats = await asyncpg.connect(asyncpg_dsn(stats_url))
    try:
        task_id = "tg-response-" + secrets.token_hex(8)
        await stats.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                            task_id, token_hash(task_id))
        settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
        pool = await create_pool(url, settings)

        def response(i: int) -> ResponseSummary:  # an answer calling a tool (new call id), with usage
            return ResponseSummary(tool_calls=[ToolCall(f"call_resp_{i}", "read_file", {"path": f"src/{i}.py"})],
                                   usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True)

        try:
            for i in range(2):  # connections are set up
                await record_response(pool, task_id, "s:work", response(-1 - i), settings)
            await stats.execute("SELECT pg_stat_statements_reset()")
            for i in range(n):
                verdict = await record_response(pool, task_id, "s:work", response(i), settings)
                assert verdict is not None and verdict.action is Action.OK, verdict
        finally:
            await pool.close()
        calls = {r["query"]: r["calls"] for r in await stats.fetch(_CALLS)}
        row = await stats.fetchrow("SELECT input_tokens + output_tokens AS tokens, tool_calls FROM tasks WHERE id = $1",
                                   task_id)
        pending = await stats.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1 AND result_hash IS NULL",
                                       task_id)
        conversation = await stats.fetchval("SELECT tool_calls FROM conversations WHERE task_id = $1", task_id)
        return calls, {"tokens": row["tokens"], "tool_calls": row["tool_calls"], "pending": pending,
                       "conversation_calls": conversation}
    finally:
        await stats.close()


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_a_response_with_tool_calls_is_one_statement(routes, route):
    """A finished response carrying a new tool call and usage, no stop: one statement
    (lock, usage, ledger, counts, history window, the day's spend row), its own transaction;
    the counters and the ledger hold what they always did."""
    calls, counted = asyncio.run(_responses_and_count(routes[route], routes["stats"], 20))
    assert sum(calls.values()) == 20, calls
    assert len(calls) == 1 and "taskgate_record_response(" in next(iter(calls)), calls
    assert counted == {"tokens": 22 * 15, "tool_calls": 22, "pending": 22, "conversation_calls": 22}, counted


_WAL_FLUSHES = "SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'"  # PostgreSQL 18


async def _flushes(stats: asyncpg.Connection, pool: asyncpg.Pool) -> int:
    """WAL flushes to disk so far, every backend's pending numbers reported first."""
    async with pool.acquire() as conn:  # the pool has one connection: the one that worked
        await conn.execute("SELECT pg_stat_force_next_flush()")  # reported as it goes idle
    await asyncio.sleep(0.3)
    await stats.execute("SELECT pg_stat_clear_snapshot()")
    return await stats.fetchval(_WAL_FLUSHES)


async def _flushes_and_calls(url: str, n: int, text_sha256: str | None = None) -> dict[str, object]:
    stats = await asyncpg.connect(asyncpg_dsn(url))
    token = "tg-wal-" + secrets.token_hex(8)
    await stats.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                        token, token_hash(token))
    settings = Settings(database_url=url, database_pool_size=1, _env_file=None)  # type: ignore[call-arg]
    pool = await create_pool(url, settings)

    def summary(i: int) -> ResponseSummary:  # a new answer each time (``text_sha256``: a text answer's prefix)
        return ResponseSummary(usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True,
                               text_sha256=None if text_sha256 is None else f"{text_sha256}{i}")

    try:
        out: dict[str, object] = {}
        before = await _flushes(stats, pool)
        for _ in range(n):
            await admit(pool, token_hash(token), settings)
        after_admissions = await _flushes(stats, pool)
        await stats.execute("SELECT pg_stat_statements_reset()")
        for i in range(n):
            await record_response(pool, token, "", summary(i), settings)
        out["usage_calls"] = {r["query"].split()[0]: r["calls"] for r in await stats.fetch(_CALLS)}
        out["admission_flushes"] = after_admissions - before
        out["usage_flushes"] = await _flushes(stats, pool) - after_admissions
        out["tokens"] = await stats.fetchval("SELECT input_tokens + output_tokens FROM tasks WHERE id = $1", token)
        return out
    finally:
        await pool.close()
        await stats.close()


@pytest.mark.parametrize("answer", ["usage only", "text answer"])
def test_an_admission_commit_waits_for_the_disk_and_usage_accounting_does_not(routes, answer):
    """Each admission's commit flushes the WAL (the reservation survives a crash of
    PostgreSQL); a response's usage is one statement that commits without waiting, and
    so is a text answer's (its usage and the conversation's run of repeated answers)."""
    text = "answer-" if answer == "text answer" else None
    seen = asyncio.run(_flushes_and_calls(routes["direct"], 30, text))
    assert seen["admission_flushes"] >= 30, seen
    assert seen["usage_flushes"] <= 10, seen  # the WAL writer's own flushes, every 200 ms
    # one statement per response (an UPDATE of the task, led by the CTE that removes the
    # request's hold row when it has one)
    assert list(seen["usage_calls"].values()) == [30] and set(seen["usage_calls"]) <= {"UPDATE", "WITH"}, seen
    assert seen["tokens"] == 30 * 15
