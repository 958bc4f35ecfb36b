"""The tool-call ledger: durable I/O around the pure detector.

One ``tool_calls`` row per tool call invocation per task, keyed by tool call id, with
the tool name (ids and names longer than 256 characters or holding NUL or a lone
surrogate are stored as ``sha256:<hex>``, :func:`app.db.bounds.ledger_text`), SHA-256
of the canonical arguments, SHA-256 of the result, the resolved failure flag, the
conversation key and a global order (``seq``). A call id seen again (every request
resends the history) never counts twice: inserts are ``ON CONFLICT DO NOTHING`` and results are written only once.

- :func:`record_request` runs inside admission, with the task row locked: it adds the
  new results a request carries and asks the detector for a verdict *before* the
  request may be forwarded.
- :func:`record_response` runs when a response finishes: its tool calls enter the
  ledger as pending, usage is added to the task's counters, and the tool-call
  ceilings are checked (one call of ``taskgate_record_response()``, migration 0011,
  then the detector); an answer without tool calls extends or breaks the
  conversation's run of identical answers (``repeated_response``).

Results are hashed after the result normaliser (:mod:`app.guard.normalize`), a
bounded prefix and suffix of long ones (:mod:`app.guard.result_prints`, computed
before admission); with ``TASKGATE_LEDGER_RAW_RESULT_HASH`` the raw text's hash is
kept beside it. Each result is also flagged ``is_empty``
(:func:`app.guard.fingerprint.is_empty_result`, on the normalised text).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Sequence

import asyncpg

from app import events
from app.db import sql
from app.db import tasks as task_rows
from app.guard import conversations, known_windows
from app.guard.conversation_rules import answer_repeats, repeated_response
from app.guard.detector import MIN_WINDOW, Action, CallRecord, Thresholds, Verdict, detect, window_size
from app.guard.ledger_rows import call_rows, result_rows, window_records
from app.guard.normalize import Normalizer
from app.guard.policy import Policy, response_repeats, rule_action
from app.guard.result_prints import RequestPrints, config_for, fingerprints
from app.settings import Settings
from app.task import LoopGuard, Task
from app.wire.base import ResponseSummary, ToolCall, ToolResult, Usage

if TYPE_CHECKING:  # the settlement is admission's; the ledger only writes its numbers
    from app.admission.cost import Settlement

logger = logging.getLogger(__name__)

# The statements: app/db/sql/ledger.sql (each written out whole, with what it shares).
_INSERT_CALLS = sql.statement("ledger_insert_calls")
_COMPLETE_CALLS = sql.statement("ledger_complete_calls")
_HISTORY = sql.statement("ledger_history")
_COUNT_CALLS = sql.statement("ledger_count_calls")
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


@dataclass(slots=True)
class GuardRequest:
    """What the loop guard needs from one request: its conversation key, the tool
    calls of the trailing assistant turn and the new tool results."""

    conversation_key: str
    tool_calls: Sequence[ToolCall] = field(default_factory=list)
    tool_results: Sequence[ToolResult] = field(default_factory=list)
    #: Fingerprints computed before admission (:mod:`app.guard.result_prints`); ``None``:
    #: computed in :func:`record_request`.
    prints: RequestPrints | None = None


def _describe(verdict: Verdict, thresholds: Thresholds, conversation_key: str,
              normalizer: Normalizer) -> Verdict:
    """Add the conversation key, the thresholds and the result normalisers in force
    (rule names, ``[]`` when results were compared raw) to a verdict's detail."""
    detail = dict(verdict.detail)
    detail.setdefault("conversation_key", conversation_key)
    detail["result_normalizers"] = normalizer.names
    detail["thresholds"] = {
        "identical_streak": thresholds.identical_streak,
        "cycle_repeats": thresholds.cycle_repeats,
        "failure_streak": thresholds.failure_streak,
        "per_tool": dict(thresholds.per_tool),
        "tool_call_limit": thresholds.tool_call_limit,
        "empty_result_streak": thresholds.empty_result_streak,
        "conversation_tool_call_limit": thresholds.conversation_tool_call_limit,
    }
    return Verdict(verdict.action, verdict.reason, verdict.count, detail)


async def _insert_calls(conn: asyncpg.Connection, task_id: str, conversation_key: str,
                        calls: Sequence[ToolCall], hashes: Sequence[str] | None = None,
                        preview_chars: int = 0) -> int:
    """Insert calls as pending (duplicates ignored; ``hashes``: their arguments' hashes
    when computed already; ``preview_chars``: keep that much of each call's redacted
    arguments, :mod:`app.guard.preview`); returns how many were new."""
    if not calls:
        return 0
    rows = await conn.fetch(_INSERT_CALLS, task_id, conversation_key, *call_rows(calls, hashes, preview_chars))
    return len(rows)


def judge(history: Sequence[CallRecord], policy: Policy, conversation_key: str, normalizer: Normalizer, *,
          task_tool_calls: int, conversation_tool_calls: int) -> Verdict:
    """The detector's verdict on a conversation's window (oldest first), described
    (conversation key, thresholds, normalisers in force)."""
    thresholds = policy.thresholds
    return _describe(detect(history, thresholds, task_tool_calls=task_tool_calls,
                            conversation_tool_calls=conversation_tool_calls), thresholds, conversation_key, normalizer)


async def _history(conn: asyncpg.Connection, task_id: str, conversation_key: str,
                   thresholds: Thresholds) -> list[CallRecord]:
    rows = await conn.fetch(_HISTORY, task_id, conversation_key, window_size(thresholds))
    return [CallRecord(*row) for row in reversed(rows)]


async def record_request(conn: asyncpg.Connection, task: Task, guard: GuardRequest,
                         policy: Policy, *, request_id: str | None = None) -> Verdict:
    """Add a request's new tool results to the ledger and judge the conversation.

    Runs in the admission transaction with the task row locked: only writes the
    fingerprints ``guard.prints`` computed before admission (recomputed here, bounded,
    when absent or computed under another configuration). Results whose tool
    call id is unknown (neither in the ledger nor in the request's trailing assistant
    turn) cannot be attributed to a tool and are skipped. Returns ``OK`` without
    running the detector when nothing new was recorded (a resent history).
    ``request_id`` goes into the ``loop_warning`` event.
    """
    task_id = task.id
    key = guard.conversation_key
    settings = policy.settings
    thresholds = policy.thresholds
    config = config_for(task, settings)
    prints = guard.prints
    if prints is None or prints.config != config:  # none yet, or the task's loop_guard changed since
        prints = fingerprints(guard.tool_calls, guard.tool_results, config)
    new_calls = await _insert_calls(conn, task_id, key, guard.tool_calls, prints.arguments,
                                    settings.ledger_argument_preview)
    if new_calls:
        await conn.execute(_COUNT_CALLS, task_id, new_calls)
    normalizer = config.normalizer
    completed = []
    if prints.results:
        completed = await conn.fetch(_COMPLETE_CALLS, task_id, *result_rows(prints))
    if not completed and not new_calls:
        return Verdict(Action.OK)
    conv_calls = await conversations.add_tool_calls(conn, task_id, key, new_calls,
                                                    thresholds.conversation_tool_call_limit)
    history = await _history(conn, task_id, key, thresholds)
    verdict = judge(history, policy, key, normalizer, task_tool_calls=task.tool_calls + new_calls,
                    conversation_tool_calls=conv_calls)
    if verdict.action is Action.WARN:
        await task_rows.add_event(conn, task_id, "loop_warning", verdict.reason, dict(verdict.detail),
                                  request_id=request_id)
    return verdict


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
                          model: str | None = None) -> Verdict | None:
    """Record a finished response: usage into the task's token counters and its
    ``settlement`` into its dollar counters (one statement), tool calls into the ledger
    as pending; trip the latch when the detector says stop (e.g. the tool-call ceiling
    was passed). ``budget_window`` (``(budget_id, window_start)``): the one budget window
    the request was admitted in, when no hold is released (the escrow lease path); the
    usage and dollars go into it in the same statement (``settled`` in ``app/db/sql/ledger.sql``), and
    :data:`events.BUDGET_SPENT <app.events.BUDGET_SPENT>` reports its dollars after. An admitted request's
    ``model`` (``''`` unknown; ``None``: not one) goes into ``spend_daily`` in the same statement (:mod:`app.db.spend`).

    A response with tool calls is one statement, its own transaction: a ``SELECT`` of
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
                                            counters or _NO_COUNTERS, reservation_id, in_window, model)
            if in_window is not None and counters is not None:  # one statement, its own (relaxed) transaction
                _report_settled(await conn.fetchrow(_ADD_USAGE_IN_WINDOW, task_id, *counters, reservation_id,
                                                    model, *in_window))
            elif counters is not None or model is not None:  # an admitted request is counted in its spend
                await conn.execute(_ADD_USAGE, task_id, *(counters or _NO_COUNTERS), reservation_id, model)
            return None
        window = _windows.get(task_id, _windows.get("", MIN_WINDOW))
        args = (task_id, conversation_key, window, counters is not None, *(counters or _NO_COUNTERS),
                reservation_id, *call_rows(summary.tool_calls, None, settings.ledger_argument_preview), model)
        row = await (conn.fetchrow(_RECORD_RESPONSE_IN_WINDOW, *args, *in_window) if in_window is not None
                     else conn.fetchrow(_RECORD_RESPONSE, *args))  # one statement, its own (relaxed) transaction
        if row is None:
            return None
        _report_settled(row)
        if not row["response_new_calls"]:
            return Verdict(Action.OK)
        task = Task.from_row(row)  # after the counts; the columns the policy reads are unchanged
        policy = Policy(task, settings)
        thresholds = policy.thresholds
        needed = _remember_window(task_id, window_size(thresholds))
        if needed > window:  # its loop_guard changed since (or first seen here): read the wider window
            history = await _history(conn, task_id, conversation_key, thresholds)
            known_windows.put(task_id, conversation_key, needed, history)
        else:
            read = window_records(row)
            known_windows.put(task_id, conversation_key, window, read)
            history = read[-needed:]
        verdict = judge(history, policy, conversation_key, policy.normalizer, task_tool_calls=task.tool_calls,
                        conversation_tool_calls=row["response_conversation_calls"])
        if verdict.action is Action.STOP and task.active:
            await _latch_recorded(conn, task_id, verdict, request_id)
        return verdict


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
                         ) -> Verdict | None:
    """Add a text answer's usage (and into ``budget_window``) and extend (or end) the
    conversation's run of identical answers in one statement (:data:`_ADD_ANSWER`); latch
    the task with ``repeated_response`` when the run reaches the threshold in force (its
    own durable transaction: the first reason wins; :class:`LatchPending` when it fails),
    unless its action is ``strike`` or ``warn``: then the caller applies it (:mod:`app.guard.strikes`)."""
    args = (task_id, *counters, reservation_id, conversation_key, text_sha256, repeat, model)
    row = await (conn.fetchrow(_ADD_ANSWER_IN_WINDOW, *args, *budget_window) if budget_window is not None
                 else conn.fetchrow(_ADD_ANSWER, *args))
    if row is None:
        return None
    _report_settled(row)
    streak, loop_guard = row["answer_streak"], LoopGuard.from_json(row["loop_guard"])
    stop = repeated_response(streak, response_repeats(loop_guard, settings))
    if stop is None:
        return None
    reason, detail = stop
    verdict = Verdict(Action.STOP, reason, streak,
                      {**detail, "conversation_key": conversation_key, "text_sha256": text_sha256})
    if row["status"] == "active" and rule_action(loop_guard, settings, reason) == "latch":  # else the caller's
        await _latch_recorded(conn, task_id, verdict, request_id)
    return verdict


async def _latch_recorded(conn: asyncpg.Connection, task_id: str, verdict: Verdict, request_id: str | None) -> None:
    """The stop latch for a response already recorded (committed), in a durable
    transaction of its own (the first reason wins); :class:`LatchPending` when it fails."""
    try:
        async with conn.transaction():
            await task_rows.set_latch(conn, task_id, verdict.reason or "stopped", dict(verdict.detail),
                                      request_id=request_id)
    except Exception as exc:
        raise LatchPending(verdict) from exc
