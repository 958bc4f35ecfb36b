"""A finished response recorded on its task: usage and dollars into the task's counters,
into its one budget window when no hold is released and into the spend record, its tool
calls into the ledger, and the loop guard's stop latched; all after the exchange
(:mod:`app.settlement.exchange` runs it, once per admission).

:func:`record_response` runs when a response finishes: its tool calls enter the ledger
as pending (:mod:`app.ledger.tool_calls` writes a request's), usage is added to the
task's counters, and the tool-call ceilings are checked (one call of
``taskgate_record_response()``, migration 0011, then the detector); an answer without
tool calls extends or breaks the conversation's run of identical answers
(``repeated_response``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from app import events
from app.admission.cost import Settlement
from app.db import sql
from app.db import tasks as task_rows
from app.guard.conversation_rules import answer_repeats, repeated_response
from app.guard.detector import MIN_WINDOW, Action, Verdict, window_size
from app.guard.judge import judge
from app.guard.policy import Policy, response_repeats, rule_action
from app.ledger import known_windows
from app.ledger.rows import call_rows, window_records
from app.ledger.tool_calls import history as read_window
from app.settings import Settings
from app.task import LoopGuard, Task
from app.wire.base import ResponseSummary, Usage

logger = logging.getLogger(__name__)

# The statements: app/db/sql/ledger.sql (each written out whole, with what it shares).
_ADD_USAGE = sql.statement("ledger_add_usage")
_ADD_USAGE_IN_WINDOW = sql.statement("ledger_add_usage_in_window")
_ADD_ANSWER = sql.statement("ledger_add_answer")
_ADD_ANSWER_IN_WINDOW = sql.statement("ledger_add_answer_in_window")
_RECORD_RESPONSE = sql.statement("ledger_record_response")
_RECORD_RESPONSE_IN_WINDOW = sql.statement("ledger_record_response_in_window")
_NO_COUNTERS = (0, 0, Decimal(0), Decimal(0))
#: task id -> the history window its last response needed here (``""``: the last of any
#: task). The window is read before the row is locked; a task whose ``loop_guard`` needs
#: a wider one reads it again (one more statement), a narrower one keeps the newest part.
_windows: dict[str, int] = {}


def _counters(usage: Usage | None, settlement: Settlement | None) -> tuple[int, int, Decimal, Decimal] | None:
    """``_ADD_USAGE`` parameters after the task id, or ``None`` when nothing changes."""
    tokens = (usage.input_tokens, usage.output_tokens) if usage is not None else (0, 0)
    money = (settlement.cost_usd, settlement.release_usd) if settlement is not None else (Decimal(0), Decimal(0))
    return None if not any(tokens) and not any(money) else (*tokens, *money)


class LatchPending(Exception):
    """A response was recorded (committed) and its loop-guard stop judged, but setting
    the latch failed (the cause is chained): set it again from ``verdict`` (reason,
    detail); recording the response again would count its usage twice."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


async def record_response(pool: asyncpg.Pool, task_id: str, conversation_key: str,
                          summary: ResponseSummary, settings: Settings,
                          settlement: Settlement | None = None, *,
                          request_id: str | None = None, seen_answer_sha256: str | None = None,
                          reservation_id: int | None = None,
                          budget_window: tuple[str, datetime] | None = None,
                          model: str | None = None, admission_key: uuid.UUID | None = None) -> Verdict | None:
    """Record a finished response: usage into the task's token counters and its
    ``settlement`` into its dollar counters (one statement), tool calls into the ledger
    as pending; trip the latch when the detector says stop (e.g. the tool-call ceiling
    was passed). ``budget_window`` (``(budget_id, window_start)``): the one budget window
    the request was admitted in, when no hold is released (the escrow lease path); the
    usage and dollars go into it in the same statement (``settled`` in ``app/db/sql/ledger.sql``), and
    :data:`events.BUDGET_SPENT <app.events.BUDGET_SPENT>` reports its dollars after. An admitted request's
    ``model`` (``''`` unknown; ``None``: not one) goes into ``spend_daily`` in the same statement (:mod:`app.db.spend`).
    ``admission_key``: the settlement's once-mark, in that same statement (``marked`` in
    ``app/db/sql/ledger.sql``, what :func:`app.db.commits.settling` does in a transaction of
    its own): when an earlier settlement of that admission had committed (a retry after a
    lost answer), nothing is written and ``None`` returned; ``None`` (no key, or inside
    ``settling``): unmarked.

    A response with tool calls is one statement, its own transaction: the mark, a ``SELECT`` of
    ``taskgate_record_response()`` (migration 0011: lock, usage, ledger, counts and the
    conversation's window); then the detector in Python and, on a stop, the latch in a
    durable transaction of its own (the first reason wins). Holding the row lock over
    the detector bought no ordering: the client has the response's last byte before
    this runs, so its next request may be admitted first either way
    (:mod:`app.admission.in_flight`). A latch that fails after the response was recorded
    raises :class:`LatchPending`: the caller sets that latch again and never records the
    response twice; a latch lost with a crash in between is set by the next request's
    own judgement of the same window, which holds these calls.

    Returns the detector's verdict when tool calls were recorded, the
    ``repeated_response`` verdict for a text answer, else ``None``.
    Database errors propagate (the caller logs them; the response was already sent).
    ``request_id`` goes into the ``stopped`` event of a latch; ``seen_answer_sha256`` is the
    latest answer the request showed the model (:func:`conversation_rules.answer_repeats`).
    """
    usage = summary.usage
    counters = _counters(usage, settlement)
    in_window = budget_window if counters is not None else None  # nothing to settle without usage
    async with pool.acquire() as conn:
        if not summary.tool_calls:
            if summary.text_sha256 is not None and settings.loop_guard_enabled:
                return await _record_answer(conn, task_id, conversation_key, summary.text_sha256, settings,
                                            request_id, answer_repeats(seen_answer_sha256, summary.text_sha256),
                                            counters or _NO_COUNTERS, reservation_id, in_window, model,
                                            admission_key)
            if in_window is not None and counters is not None:  # one statement, its own (relaxed) transaction
                row = await conn.fetchrow(_ADD_USAGE_IN_WINDOW, task_id, *counters, reservation_id, model, *in_window,
                                          admission_key)
                if _first(row, admission_key):
                    _report_settled(row)
            elif counters is not None or model is not None:  # an admitted request is counted in its spend
                _first(await conn.fetchrow(_ADD_USAGE, task_id, *(counters or _NO_COUNTERS), reservation_id, model,
                                           admission_key), admission_key)
            return None
        window = _windows.get(task_id, _windows.get("", MIN_WINDOW))
        args = (task_id, conversation_key, window, counters is not None, *(counters or _NO_COUNTERS),
                reservation_id, *call_rows(summary.tool_calls, None, settings.ledger_argument_preview), model)
        row = await (conn.fetchrow(_RECORD_RESPONSE_IN_WINDOW, *args, *in_window, admission_key)
                     if in_window is not None else conn.fetchrow(_RECORD_RESPONSE, *args, admission_key))
        # one statement, its own (relaxed) transaction
        if row is None or not _first(row, admission_key) or row["id"] is None:  # settled before, or no such task
            return None
        _report_settled(row)
        if not row["response_new_calls"]:
            return Verdict(Action.OK)
        task = Task.from_row(row)  # after the counts; the columns the policy reads are unchanged
        policy = Policy(task, settings)
        thresholds = policy.thresholds
        needed = _remember_window(task_id, window_size(thresholds))
        if needed > window:  # its loop_guard changed since (or first seen here): read the wider window
            history = await read_window(conn, task_id, conversation_key, thresholds)
            known_windows.put(task_id, conversation_key, needed, history)
        else:
            read = window_records(row)
            known_windows.put(task_id, conversation_key, window, read)
            history = read[-needed:]
        verdict = judge(history, policy, conversation_key, policy.normalizer, task_tool_calls=task.tool_calls,
                        conversation_tool_calls=row["response_conversation_calls"])
        if verdict.action is Action.STOP and task.active:
            await latch_recorded(conn, task_id, verdict, request_id)
        return verdict


def _first(row: Mapping[str, Any] | None, admission_key: uuid.UUID | None) -> bool:
    """Whether the statement wrote (its ``first_settlement``: not ``False``); logs a
    settlement found landed before (a retry after its commit's answer was lost)."""
    if row is not None and row["first_settlement"] is False:
        logger.warning("the settlement of admission %s had landed before its commit's answer was lost; "
                       "not written again", admission_key)
        return False
    return True


def _report_settled(row: Mapping[str, Any] | None) -> None:
    """Report a budget window's settled dollars (``settled_*`` columns) when the
    statement settled one."""
    if row is not None and row.get("settled_budget_id") is not None:
        events.BUDGET_SPENT.emit(events.BudgetSpent(row["settled_budget_id"], row["settled_cost_usd"]))


def _remember_window(task_id: str, needed: int) -> int:
    """Keep the history window a task's response needed as the one its next response
    (and a task not seen here yet: key ``""``) reads; returns ``needed``."""
    if len(_windows) > 10_000:
        _windows.clear()
    _windows[task_id] = _windows[""] = needed
    return needed


def forget_windows() -> None:
    """Drop the history windows remembered per task (tests)."""
    _windows.clear()


async def _record_answer(conn: asyncpg.Connection, task_id: str, conversation_key: str,
                         text_sha256: str, settings: Settings, request_id: str | None,
                         repeat: bool, counters: tuple[int, int, Decimal, Decimal],
                         reservation_id: int | None, budget_window: tuple[str, datetime] | None, model: str | None,
                         admission_key: uuid.UUID | None) -> Verdict | None:
    """Add a text answer's usage (and into ``budget_window``) and extend (or end) the
    conversation's run of identical answers in one statement (:data:`_ADD_ANSWER`, once per
    ``admission_key`` as :func:`record_response` says); latch
    the task with ``repeated_response`` when the run reaches the threshold in force (its
    own durable transaction: the first reason wins; :class:`LatchPending` when it fails),
    unless its action is ``strike`` or ``warn``: then the caller applies it (:mod:`app.ledger.strikes`)."""
    args = (task_id, *counters, reservation_id, conversation_key, text_sha256, repeat, model)
    row = await (conn.fetchrow(_ADD_ANSWER_IN_WINDOW, *args, *budget_window, admission_key)
                 if budget_window is not None else conn.fetchrow(_ADD_ANSWER, *args, admission_key))
    if row is None or not _first(row, admission_key) or row["status"] is None:  # settled before, or no such task
        return None
    _report_settled(row)
    judged = judge_answer(row["status"], row["loop_guard"], row["answer_streak"], settings, conversation_key,
                          text_sha256)
    if judged is None:
        return None
    verdict, latches = judged
    if latches:
        await latch_recorded(conn, task_id, verdict, request_id)
    return verdict


def judge_answer(status: str, loop_guard: Mapping[str, Any] | None, streak: int, settings: Settings,
                 conversation_key: str, text_sha256: str) -> tuple[Verdict, bool] | None:
    """The ``repeated_response`` stop of a text answer just recorded on its task (its
    ``status`` and ``loop_guard`` JSON object as recorded; ``streak``: the conversation's
    run of identical answers, this one included) and whether it latches the task now
    (the task active and the rule's action ``latch``; else the caller applies a
    ``strike`` or ``warn``, :mod:`app.ledger.strikes`); ``None``: no stop."""
    overrides = LoopGuard.from_json(loop_guard)
    stop = repeated_response(streak, response_repeats(overrides, settings))
    if stop is None:
        return None
    reason, detail = stop
    verdict = Verdict(Action.STOP, reason, streak,
                      {**detail, "conversation_key": conversation_key, "text_sha256": text_sha256})
    return verdict, status == "active" and rule_action(overrides, settings, reason) == "latch"


async def latch_recorded(conn: asyncpg.Connection, task_id: str, verdict: Verdict, request_id: str | None) -> None:
    """``verdict``'s stop latch for a response already recorded (committed), in a durable
    transaction of its own (the first reason wins); :class:`LatchPending` when it fails."""
    try:
        async with conn.transaction():
            await task_rows.set_latch(conn, task_id, verdict.reason or "stopped", dict(verdict.detail),
                                      request_id=request_id)
    except Exception as exc:
        raise LatchPending(verdict) from exc
