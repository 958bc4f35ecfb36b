"""An agent turn on a known window (:mod:`app.admission.known_turn`, migration 0013):
the prediction is the window the transaction path reads back, a window changed
elsewhere (another process, an older call, a ceiling) is never judged from the cache,
and a run of turns ends in the same rows, counters and refusals either way."""

from __future__ import annotations

import random

import asyncpg
import pytest

from app.admission import known_turn
from app.guard.detector import CallRecord
from app.guard.judge import GuardRequest
from app.ledger import known_windows
from app.ledger.known_windows import Window, predict
from app.settings import Settings
from app.settlement.response import record_response
from app.wire.base import ResponseSummary, ToolCall, ToolResult, Usage
from tests.test_agent_turn import KEY, _admit, _turn
from tests.test_agent_turn import _task as task_with


def _record(call_id: str, result: str | None = "r", error: bool | None = False) -> CallRecord:
    return CallRecord(call_id, "read_file", "a-" + call_id, result, error if result else None,
                      False if result else None)


def _columns(calls: list[str], results: dict[str, str]):  # type: ignore[no-untyped-def]
    return (([c for c in calls], ["read_file"] * len(calls), ["a-" + c for c in calls], [None] * len(calls)),
            (list(results), list(results.values()), [False] * len(results), [True] * len(results),
             [None] * len(results)))


def test_the_prediction_completes_pending_calls_and_appends_new_ones():
    before = [_record("a"), _record("b", None), _record("c")]
    calls, results = _columns(["d", "b"], {"b": "rb", "d": "rd", "zz": "rz"})
    p = predict(before, 64, calls, results)
    assert p is not None and (p.new_calls, p.completed) == (1, 2)
    assert [(r.call_id, r.result_hash, r.is_empty) for r in p.window] == [
        ("a", "r", False), ("b", "rb", True), ("c", "r", False), ("d", "rd", True)]
    # only the rows the window does not already hold are sent: call b is in it, and
    # zz's result (no such call here) may complete an older one
    assert p.calls[0] == ["d"] and p.results[0] == ["b", "d", "zz"]
    # a completed call keeps its result; a new call without a result is pending
    p = predict(before, 64, *_columns(["e"], {"a": "other"}))
    assert p is not None and (p.new_calls, p.completed) == (1, 0)
    assert p.window[0].result_hash == "r" and p.window[-1] == CallRecord("e", "read_file", "a-e", None, None)
    p = predict(before, 64, *_columns(["a"], {"a": "again", "c": "again"}))
    assert p is not None and p.calls[0] == [] and p.results[0] == [] and (p.new_calls, p.completed) == (0, 0)
    assert len(p.calls) == 4 and len(p.results) == 5
    # the window keeps its size
    p = predict(before, 3, *_columns(["d"], {}))
    assert p is not None and [r.call_id for r in p.window] == ["b", "c", "d"]


def test_a_turn_the_request_does_not_determine_is_not_predicted():
    assert predict([], 64, *_columns(["a", "a"], {})) is None
    calls, _ = _columns(["a"], {})
    assert predict([], 64, calls, (["a", "a"], ["x", "y"], [False, False], [False, False], [None, None])) is None


def test_a_short_window_is_the_whole_conversation():
    whole = Window(64, (_record("a"),))
    assert whole.last(128) == (_record("a"),)
    full = Window(2, (_record("a"), _record("b")))
    assert full.last(2) == full.records and full.last(1) == (_record("b"),)
    assert full.last(3) is None  # older records may exist


async def _task(pool, request_limit: int = 100, tool_call_limit: int | None = None) -> tuple[str, str]:
    task_id, hashed = await task_with(pool, request_limit)
    await pool.execute("UPDATE tasks SET tool_call_limit = $2 WHERE id = $1", task_id, tool_call_limit)
    return task_id, hashed


@pytest.fixture
def known(monkeypatch):
    """The outcomes of :func:`known_turn.admit_known`: ``known`` (one statement) or
    ``usual`` (left to the transaction path)."""
    outcomes: list[str] = []
    real = known_turn.admit_known

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = await real(*args, **kwargs)
        outcomes.append("usual" if result is None else "known")
        return result

    monkeypatch.setattr(known_turn, "admit_known", counting)
    return outcomes


async def test_a_window_written_elsewhere_is_judged_as_it_is(pool, known, database_url):
    """Another process added identical calls to the conversation after this one cached
    its window: the cached window shows no loop, the real one does. The statement finds
    the window changed, writes nothing and returns it; judged, it stops the turn, which
    is left to the usual path (the stop and its latch)."""
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool)
    same = {"path": "src/app.py"}
    for call_id in ("w0", "w1"):  # the task is known here, then the conversation's window
        assert await _admit(pool, hashed, settings, _turn(call_id)) == "admitted"
    assert await _admit(pool, hashed, settings, _turn("c1", arguments=same, output="x = 1")) == "admitted"
    assert known == ["usual", "known", "known"]  # the first: the task's loop_guard is not known yet
    await pool.execute(  # three more identical calls, as another gateway would have written them
        "INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash, result_hash,"
        " is_error, is_empty, completed_at) SELECT task_id, 'other' || n, conversation_key, tool_name, arguments_hash,"
        " result_hash, is_error, is_empty, now() FROM tool_calls, generate_series(1, 3) AS n"
        " WHERE task_id = $1 AND call_id = 'c1'", task_id)
    assert await _admit(pool, hashed, settings, _turn("c5", arguments=same, output="x = 1")) == "repeated_tool_call"
    assert known[-1] == "usual"
    row = await pool.fetchrow("SELECT admitted_requests, refused_requests, status FROM tasks WHERE id = $1", task_id)
    assert tuple(row) == (3, 1, "stopped")


async def test_the_statement_writes_only_on_the_window_it_was_told(pool):
    """``taskgate_known_turn()`` directly: nothing known, or a known window with the
    ledger's result hashes but other call ids (or order, or length), is not the ledger's
    window (nothing written, the window returned); the ledger's own window admits the
    turn: the digest the gateway computes is the one the function computes."""
    task_id, hashed = await _task(pool)
    await pool.execute("INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash,"
                       " result_hash, is_error, is_empty, completed_at)"
                       " SELECT $1, id, $2, 'ls', 'h', 'r', false, false, now() FROM unnest('{a,b}'::text[]) AS id",
                       task_id, KEY)
    loop_guard = await pool.fetchval("SELECT loop_guard FROM tasks WHERE id = $1", task_id)

    async def turn(known: bytes | None) -> asyncpg.Record:
        return await pool.fetchrow(
            "SELECT f.known, f.window_ids, (f.task).admitted_requests FROM taskgate_known_turn($1, $2, $3, 64,"
            " '{c}', '{ls}', '{h2}', '{NULL}', '{c}', '{r2}', '{false}', '{false}', '{NULL}', $4, 1, 1,"
            " NULL, NULL) AS f", hashed, loop_guard, KEY, known)

    for ids in (None, "ax", "ba", "a", "abc"):
        known = None if ids is None else known_windows.digest([_record(i) for i in ids])
        assert tuple(await turn(known)) == (False, ["a", "b"], None)
    assert await pool.fetchval("SELECT admitted_requests FROM tasks WHERE id = $1", task_id) == 0
    assert await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1", task_id) == 2
    assert tuple(await turn(known_windows.digest([_record("a"), _record("b")]))) == (True, None, 1)
    assert await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1", task_id) == 3


async def test_an_older_pending_call_and_a_passed_ceiling_leave_the_turn_to_the_usual_path(pool, known, database_url):
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool, tool_call_limit=4)
    await pool.execute("INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash)"
                       " VALUES ($1, 'old', $2, 'read_file', 'h')", task_id, KEY)
    await pool.execute(  # 'old' falls out of the window (64 records)
        "INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash, result_hash,"
        " is_error, completed_at) SELECT $1, 'filler' || n, $2, 'ls', 'h' || n, 'r' || n, false, now()"
        " FROM generate_series(1, 70) AS n", task_id, KEY)
    for call_id in ("w0", "w1"):
        assert await _admit(pool, hashed, settings, _turn(call_id)) == "admitted"
    outcome = await _admit(pool, hashed, settings, GuardRequest(KEY, [ToolCall("c2", "ls", {})],
                                                                [ToolResult("c2", "a"), ToolResult("old", "b")]))
    assert (outcome, known[-1]) == ("admitted", "usual")  # one more completed than predicted
    assert await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1 AND result_hash IS NULL",
                               task_id) == 0
    assert await _admit(pool, hashed, settings, _turn("c3")) == "admitted"
    assert known[-1] == "known"
    assert await _admit(pool, hashed, settings, _turn("c4")) == "tool_call_limit"  # the 5th call
    assert known[-1] == "usual"
    row = await pool.fetchrow("SELECT admitted_requests, refused_requests, tool_calls, stop_reason FROM tasks"
                              " WHERE id = $1", task_id)
    assert tuple(row) == (4, 1, 5, "tool_call_limit")


def _script(seed: int, steps: int) -> list[tuple[str, str, str, str]]:
    """A random agent run over few tools, arguments and outputs, so loops happen:
    ``("response", call id, ...)`` a response calling a tool, ``("turn", ...)`` a request
    carrying the result of the last call (or, when none is pending, a new call with its
    result, as an agent writing tool use as text), ``("pair", ...)`` two new calls with
    their results in one request."""
    rng = random.Random(seed)
    return [(rng.choice(("response", "turn", "turn", "pair")), f"k{seed}-{i}", rng.choice(("ls", "cat")),
             rng.choice(("a", "b", "a")), ) for i in range(steps)]


async def _run(pool, settings: Settings, script, windows: str) -> tuple[list[str], tuple, list[tuple]]:
    """Run ``script`` on a new task; ``windows``: ``cached`` (as the gateway runs),
    ``unknown`` (forgotten before each step: each turn reads the window first) or ``none``
    (no known-window turns: the transaction path)."""
    task_id, hashed = await _task(pool, request_limit=60)
    pending: ToolCall | None = None
    outcomes = []
    for kind, call_id, tool, output in script:
        if windows != "cached":
            known_windows.forget()
        if kind == "response" and pending is None:
            pending = ToolCall(call_id, tool, {"q": output})
            summary = ResponseSummary(tool_calls=[pending], usage=Usage(input_tokens=1, output_tokens=1),
                                      terminal_seen=True)
            await record_response(pool, task_id, KEY, summary, settings)
            continue
        calls = [pending or ToolCall(call_id, tool, {"q": output})]
        if kind == "pair" and pending is None:
            calls.append(ToolCall(call_id + "-2", "cat", {"q": "x"}))
        pending = None
        guard = GuardRequest(KEY, calls, [ToolResult(c.call_id, output * 3) for c in calls])
        outcomes.append(await _admit(pool, hashed, settings, guard))
    task = await pool.fetchrow("SELECT admitted_requests, refused_requests, tool_calls, status, stop_reason"
                               " FROM tasks WHERE id = $1", task_id)
    ledger = await pool.fetch("SELECT call_id, tool_name, arguments_hash, result_hash, is_error, is_empty"
                              " FROM tool_calls WHERE task_id = $1 ORDER BY seq", task_id)
    return outcomes, tuple(task), [tuple(r) for r in ledger]


@pytest.mark.parametrize("seed", range(6))
async def test_a_run_of_turns_ends_the_same_with_and_without_known_windows(pool, known, database_url, seed,
                                                                         monkeypatch):
    settings = Settings(database_url=database_url, identical_streak=3, cycle_repeats=3)
    script = _script(seed, 40)

    async def usual_path(*args, **kwargs):  # type: ignore[no-untyped-def]
        return None

    with monkeypatch.context() as patch:
        patch.setattr(known_turn, "admit_known", usual_path)
        usual = await _run(pool, settings, script, windows="none")
    assert known == []
    unknown = await _run(pool, settings, script, windows="unknown")
    assert unknown == usual
    assert "known" in known
    known.clear()
    cached = await _run(pool, settings, script, windows="cached")
    assert cached == usual
    assert "known" in known


async def test_a_window_not_known_here_is_read_under_the_lock(pool, known, database_url):
    """This process forgot the conversation's window (another gateway served it): the
    turn is predicted on an empty window, which the statement finds is not the
    database's; it writes nothing, returns the window, and the loop there stops the turn
    on the usual path."""
    settings = Settings(database_url=database_url)
    task_id, hashed = await _task(pool)
    same = {"path": "src/app.py"}
    assert await _admit(pool, hashed, settings, _turn("w0")) == "admitted"  # the task is known here
    assert await _admit(pool, hashed, settings, _turn("c1", arguments=same, output="x = 1")) == "admitted"
    await pool.execute(
        "INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash, result_hash,"
        " is_error, is_empty, completed_at) SELECT task_id, 'other' || n, conversation_key, tool_name, arguments_hash,"
        " result_hash, is_error, is_empty, now() FROM tool_calls, generate_series(1, 3) AS n"
        " WHERE task_id = $1 AND call_id = 'c1'", task_id)
    known_windows.forget()
    assert await _admit(pool, hashed, settings, _turn("c5", arguments=same, output="x = 1")) == "repeated_tool_call"
    assert known[-1] == "usual"
    row = await pool.fetchrow("SELECT admitted_requests, refused_requests, status FROM tasks WHERE id = $1", task_id)
    assert tuple(row) == (2, 1, "stopped")
