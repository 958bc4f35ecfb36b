"""A response's tool calls through ``taskgate_record_response()`` (migration 0011,
:func:`app.settlement.response.record_response`) on real PostgreSQL: the hold row and the
counters, the history window the detector judges, and a stop that is atomic with the
record."""

from __future__ import annotations

import secrets
from decimal import Decimal
from typing import Any

import pytest

from app.admission.cost import Settlement
from app.db import commits, settlements
from app.db import tasks as task_rows
from app.guard.detector import Action
from app.proxy.accounting import Accounting
from app.proxy.outcome import Outcome
from app.settings import Settings
from app.settlement import response as ledger
from app.wire.base import ResponseSummary, ToolCall, Usage

KEY = "s:response"


@pytest.fixture
def settings(database_url) -> Settings:
    return Settings(database_url=database_url)


async def _task(pool, **columns: Any) -> str:
    task_id = "resp-" + secrets.token_hex(6)
    names = ", ".join(columns)
    values = "".join(f", ${i + 3}" for i in range(len(columns)))
    await pool.execute(f"INSERT INTO tasks (id, token_hash, request_limit{', ' + names if names else ''})"
                       f" VALUES ($1, $2, 1000{values})", task_id, task_id, *columns.values())
    return task_id


async def _hold(pool, task_id: str, amount: str) -> int:
    return await pool.fetchval(
        "INSERT INTO reservations (task_id, amount_usd, deadline_at, owner_host, owner_pid, owner_started_at)"
        " VALUES ($1, $2, now() + interval '1 hour', 'test', 1, 0) RETURNING id", task_id, Decimal(amount))


def _answer(*call_ids: str, usage: Usage | None = None) -> ResponseSummary:
    return ResponseSummary(tool_calls=[ToolCall(c, "read_file", {"path": c}) for c in call_ids], usage=usage,
                           terminal_seen=True)


async def _counters(pool, task_id: str) -> tuple[Any, ...]:
    row = await pool.fetchrow("SELECT input_tokens, output_tokens, cost_usd, reserved_usd, tool_calls, status"
                              " FROM tasks WHERE id = $1", task_id)
    return tuple(row)


async def test_usage_settles_the_hold_once_and_resent_calls_count_nothing(pool, settings):
    task_id = await _task(pool, reserved_usd=Decimal("1.00"))
    held, gone = await _hold(pool, task_id, "0.30"), await _hold(pool, task_id, "0.20")
    await pool.execute("DELETE FROM reservations WHERE id = $1", gone)  # released by a sweep meanwhile
    usage = Usage(input_tokens=10, output_tokens=4)
    settled = Settlement(cost_usd=Decimal("0.05"), release_usd=Decimal("0.30"))
    verdict = await ledger.record_response(pool, task_id, KEY, _answer("a", "b", usage=usage), settings, settled,
                                           reservation_id=held)
    assert verdict is not None and verdict.action is Action.OK
    assert await _counters(pool, task_id) == (10, 4, Decimal("0.05"), Decimal("0.70"), 2, "active")
    assert await pool.fetchval("SELECT count(*) FROM reservations WHERE id = $1", held) == 0
    # the same calls again (a retried record), settling the hold that is gone: nothing is released twice
    settled = Settlement(cost_usd=Decimal("0.01"), release_usd=Decimal("0.20"))
    verdict = await ledger.record_response(pool, task_id, KEY, _answer("a", "b", usage=usage), settings, settled,
                                           reservation_id=gone)
    assert verdict is not None and verdict.action is Action.OK
    assert await _counters(pool, task_id) == (20, 8, Decimal("0.06"), Decimal("0.70"), 2, "active")
    assert await pool.fetchval("SELECT tool_calls FROM conversations WHERE task_id = $1", task_id) == 2
    rows = await pool.fetch("SELECT call_id, conversation_key, result_hash FROM tool_calls WHERE task_id = $1"
                            " ORDER BY seq", task_id)
    assert [tuple(r) for r in rows] == [("a", KEY, None), ("b", KEY, None)]
    # no usage and no money: the counters and a hold row are left alone
    kept = await _hold(pool, task_id, "0.10")
    await ledger.record_response(pool, task_id, KEY, _answer("c"), settings, reservation_id=kept)
    assert await _counters(pool, task_id) == (20, 8, Decimal("0.06"), Decimal("0.70"), 3, "active")
    assert await pool.fetchval("SELECT count(*) FROM reservations WHERE id = $1", kept) == 1


async def test_an_unknown_task_records_nothing(pool, settings):
    assert await ledger.record_response(pool, "no-such-task", KEY, _answer("a"), settings) is None


async def test_the_detector_judges_the_window_of_the_locked_rows_loop_guard(pool, settings, monkeypatch):
    """The window is sized before the row is locked (the last one needed here): a task
    whose ``loop_guard`` needs a wider one is judged on all of it, a narrower one on its
    newest part, as if it had been read with its own size."""
    judged: list[int] = []
    real = ledger.judge

    def counting(history, *args, **kwargs):  # type: ignore[no-untyped-def]
        judged.append(len(history))
        return real(history, *args, **kwargs)

    monkeypatch.setattr(ledger, "judge", counting)
    ledger.forget_windows()
    usual = await _task(pool)  # the default thresholds: a window of 64
    wide = await _task(pool, loop_guard={"identical_streak": 40})  # 4 x 40 = 160
    for task_id in (usual, wide):
        await ledger.record_response(pool, task_id, KEY, _answer(*(f"c{i}" for i in range(100))), settings)
    await ledger.record_response(pool, wide, KEY, _answer("c100"), settings)
    fresh = await _task(pool)  # not seen here yet: read with the last window needed (160), judged on 64
    await ledger.record_response(pool, fresh, KEY, _answer(*(f"c{i}" for i in range(100))), settings)
    await ledger.record_response(pool, usual, KEY, _answer("c100"), settings)
    assert judged == [64, 100, 101, 64, 64]


async def test_a_stop_whose_latch_fails_is_raised_after_the_response_is_recorded_once(pool, settings, monkeypatch):
    """The response is one statement of its own; the latch its own durable transaction.
    When the latch fails, the response stays recorded (once) and ``LatchPending`` carries
    the stop for the caller to set again (:mod:`app.proxy.accounting` does, retried)."""
    task_id = await _task(pool, tool_call_limit=2)
    usage = Usage(input_tokens=7, output_tokens=3)
    real = task_rows.set_latch

    async def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("the latch failed")

    monkeypatch.setattr(task_rows, "set_latch", failing)
    with pytest.raises(ledger.LatchPending) as pending:
        await ledger.record_response(pool, task_id, KEY, _answer("a", "b", "c", usage=usage), settings)
    assert (pending.value.verdict.action, pending.value.verdict.reason) == (Action.STOP, "tool_call_limit")
    assert isinstance(pending.value.__cause__, RuntimeError)
    assert await _counters(pool, task_id) == (7, 3, Decimal(0), Decimal(0), 3, "active")
    assert await pool.fetchval("SELECT count(*) FROM tool_calls WHERE task_id = $1", task_id) == 3
    monkeypatch.setattr(task_rows, "set_latch", real)
    verdict = await ledger.record_response(pool, task_id, KEY, _answer("d", usage=usage), settings,
                                           request_id="req-1")
    assert verdict is not None and (verdict.action, verdict.reason) == (Action.STOP, "tool_call_limit")
    assert await _counters(pool, task_id) == (14, 6, Decimal(0), Decimal(0), 4, "stopped")
    event = await pool.fetchrow("SELECT kind, reason, detail FROM task_events WHERE task_id = $1", task_id)
    assert (event["kind"], event["reason"], event["detail"]["request_id"]) == ("stopped", "tool_call_limit", "req-1")


async def test_accounting_sets_a_failed_latch_again_without_recording_the_response_twice(pool, settings,
                                                                                        monkeypatch):
    """The proxy's accounting gets ``LatchPending`` when a response's stop could not be
    latched: it latches again, on its own, and the response's usage is counted once."""
    task_id = await _task(pool, tool_call_limit=2)
    real, attempts = task_rows.set_latch, []

    async def failing_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        attempts.append(args[1])
        if len(attempts) == 1:
            raise RuntimeError("the latch failed")
        return await real(*args, **kwargs)

    monkeypatch.setattr(task_rows, "set_latch", failing_once)
    accounting = Accounting(pool, settings, task_id, KEY, guard_enabled=True, request_id="req-2")
    await accounting(Outcome(summary=_answer("a", "b", "c", usage=Usage(input_tokens=7, output_tokens=3))))
    assert attempts == [task_id, task_id]
    assert await _counters(pool, task_id) == (7, 3, Decimal(0), Decimal(0), 3, "stopped")
    event = await pool.fetchrow("SELECT reason, detail FROM task_events WHERE task_id = $1 AND kind = 'stopped'",
                                task_id)
    assert (event["reason"], event["detail"]["request_id"]) == ("tool_call_limit", "req-2")


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed-in-a-settlement-round"])
async def test_accounting_sets_a_failed_repeated_response_latch_again_counting_the_answer_once(pool, database_url,
                                                                                               monkeypatch, keyed):
    """The same for a text answer's ``repeated_response`` stop: the answer's statement has
    committed its usage and streak when the latch fails; the latch is set again on its
    own and the usage stays counted once. Keyed (an admitted request): the answer settles
    through the settlement batcher (app.db.settlements)."""
    settings = Settings(database_url=database_url, response_repeats=2, rule_actions={"repeated_response": "latch"})
    task_id = await _task(pool)
    real, attempts = task_rows.set_latch, []

    async def failing_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        attempts.append(args[1])
        if len(attempts) == 1:
            raise RuntimeError("the latch failed")
        return await real(*args, **kwargs)

    monkeypatch.setattr(task_rows, "set_latch", failing_once)
    sent = settlements.batcher(pool).items
    for _ in range(2):  # the same answer twice: the second reaches the threshold
        accounting = Accounting(pool, settings, task_id, KEY, guard_enabled=True, count_answer=True,
                                admission_key=commits.new_key() if keyed else None)
        await accounting(Outcome(summary=ResponseSummary(usage=Usage(input_tokens=7, output_tokens=3),
                                                         terminal_seen=True, text_sha256="b" * 64)))
    assert settlements.batcher(pool).items - sent == (2 if keyed else 0)
    assert attempts == [task_id, task_id]
    assert await _counters(pool, task_id) == (14, 6, Decimal(0), Decimal(0), 0, "stopped")
    assert await pool.fetchval("SELECT stop_reason FROM tasks WHERE id = $1", task_id) == "repeated_response"


async def test_a_text_answer_is_judged_by_the_tasks_own_response_repeats(pool, database_url):
    """The answer's statement returns only the task's status and ``loop_guard``: the
    task's own ``response_repeats`` still decides (2 here; the global 5 would not stop)."""
    settings = Settings(database_url=database_url, response_repeats=5, rule_actions={"repeated_response": "latch"})
    own, plain = await _task(pool, loop_guard={"response_repeats": 2}), await _task(pool)
    for task_id in (own, plain):
        for _ in range(2):
            accounting = Accounting(pool, settings, task_id, KEY, guard_enabled=True, count_answer=True)
            await accounting(Outcome(summary=ResponseSummary(usage=Usage(input_tokens=7, output_tokens=3),
                                                             terminal_seen=True, text_sha256="c" * 64)))
    assert await pool.fetchval("SELECT stop_reason FROM tasks WHERE id = $1", own) == "repeated_response"
    assert await _counters(pool, plain) == (14, 6, Decimal(0), Decimal(0), 0, "active")
