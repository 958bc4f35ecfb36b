"""The agent-turn path: a request carrying tool results admitted in one statement.

Inside the admission transaction, :func:`open_turn` runs ``taskgate_agent_turn()``
(``app/db/sql/functions/``): it locks the task row by token hash and, when the task may take this
path (active; no dollar ceiling, ``allowed_models``, budget or conversation
request/duration ceiling; ``loop_guard`` as this process last saw it), records the
request's tool calls and results in the ledger, counts its new calls, counts the request
when every limit allows one more (the fast path's ``WHERE`` on the locked row) and
returns the conversation's history window, read after the lock and the writes, and the
database's clock the rule read (a refusal's numbers quote it, as the locked path's do). The
detector then judges the window in Python (:func:`judge`) and the transaction commits:
``BEGIN``, one ``SELECT``, ``COMMIT``.

The ``loop_guard`` this process expects (it sizes the window and configures the result
fingerprints before the row is read) is the one of the last locked row seen for the
token (none seen: no overrides); the function compares it with the locked row's and,
when they differ, only locks and returns the row: admission commits that and decides on
the usual path (once per task and process, or after an operator's change).

When the conversation's window is known here, :mod:`app.admission.known_turn` admits the
turn in one autocommit statement first; this path runs when it cannot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from app.admission.limits import LimitDetail, limit_breach
from app.db import sql
from app.guard.detector import Action, CallRecord, Verdict, window_size
from app.guard.judge import GuardRequest
from app.guard.judge import judge as judge_window
from app.guard.policy import Policy
from app.guard.result_prints import config_for, fingerprints
from app.ledger import known_windows
from app.ledger.rows import CallColumns, ResultColumns, call_rows, result_rows, window_records
from app.settings import Settings
from app.task import LoopGuard, Task

#: ``taskgate_agent_turn()`` and a counted turn's ``admissions`` row (:mod:`app.db.commits`)
#: in one statement (app/db/sql/admission.sql).
_TURN = sql.statement("admission_turn")

#: token hash -> (the task as last locked here, its ``loop_guard`` JSON as stored).
_seen: dict[str, tuple[Task, Any]] = {}
#: A task locked here (any): a task not seen yet is expected to be like it without
#: ``loop_guard`` overrides (only ``loop_guard`` and the settings size the window and
#: configure the fingerprints).
_template: list[Task] = []


@dataclass(frozen=True, slots=True)
class Turn:
    """What ``taskgate_agent_turn()`` did: ``task`` is the locked row (after the counts
    when ``recorded``); ``recorded`` whether the ledger was written (else nothing was:
    admission goes on with the lock held); ``counted`` whether the request was counted
    (every limit allowed it); the calls new to the ledger, the results that completed a
    pending call, the conversation's tool calls after them (0 when no ceiling needs it),
    its history window (oldest first; empty when nothing was new) and ``now``, the
    database's clock the admission rule read (the transaction's ``now()``), which
    :func:`judge` explains a refusal with."""

    task: Task
    recorded: bool
    counted: bool
    new_calls: int
    completed: int
    conversation_calls: int
    history: tuple[CallRecord, ...]
    now: datetime


async def open_turn(conn: asyncpg.Connection, token_hash: str, guard: GuardRequest,
                    settings: Settings, admission_key: uuid.UUID, request_id: str | None) -> Turn | None:
    """Lock the task of ``token_hash`` and, where it may, record and count the request
    (see the module docstring) with its ``admissions`` row under ``admission_key``.
    ``None``: no such task. Runs inside the admission transaction; the caller commits."""
    seen = _seen.get(token_hash)
    if seen is None and _template:  # a task not seen here yet: most tasks override nothing
        seen = (replace(_template[0], loop_guard=LoopGuard()), {})
    expect = seen is not None
    window, limit, loop_guard = 0, False, None
    calls: CallColumns = ([], [], [], [])
    results: ResultColumns = ([], [], [], [], [])
    if seen is not None:
        expected, loop_guard = seen
        window, calls, results = rows(expected, guard, settings)
        limit = settings.conversation_tool_call_limit is not None  # the task's own: read on its row
    row = await conn.fetchrow(_TURN, token_hash, expect, loop_guard, guard.conversation_key, window, limit,
                              *calls, *results, admission_key, request_id)
    if row is None:
        return None
    task = Task.from_row(row)
    remember(token_hash, task, row["loop_guard"])
    history = tuple(window_records(row))
    if row["turn_new_calls"] or row["turn_completed"]:  # else nothing was read (nor changed)
        known_windows.put(task.id, guard.conversation_key, window, history)
    return Turn(task, row["turn_recorded"], row["turn_counted"], row["turn_new_calls"], row["turn_completed"],
                row["turn_conversation_calls"], history, row["rule_now"])


def rows(expected: Task, guard: GuardRequest, settings: Settings,
         policy: Policy | None = None) -> tuple[int, CallColumns, ResultColumns]:
    """The history window a turn of ``expected`` reads (records) and the ledger's columns
    of ``guard``'s tool calls and results; the results are fingerprinted for
    ``expected``'s configuration here unless ``guard.prints`` already is. ``policy``:
    ``expected``'s, when the caller has one (its thresholds are then resolved once)."""
    config = config_for(expected, settings)
    prints = guard.prints
    if prints is None or prints.config != config:
        prints = guard.prints = fingerprints(guard.tool_calls, guard.tool_results, config)
    return (window_size((policy or Policy(expected, settings)).thresholds),
            call_rows(guard.tool_calls, prints.arguments, settings.ledger_argument_preview), result_rows(prints))


def may_take(token_hash: str, settings: Settings) -> bool:
    """Whether a request carrying tool results for ``token_hash`` should try this path:
    no conversation request or duration ceiling for every task, and the task as last
    seen here (if it was) may take it."""
    if settings.conversation_request_limit is not None or settings.conversation_max_duration_s is not None:
        return False
    seen = _seen.get(token_hash)
    return seen is None or eligible(seen[0])


def expectation(token_hash: str) -> tuple[Task, Any] | None:
    """The task of ``token_hash`` as this process last locked it and its ``loop_guard``
    column as stored (``None``: not seen)."""
    return _seen.get(token_hash)


def last_locked(token_hash: str) -> Task | None:
    """The task of ``token_hash`` as this process last locked it (``None``: not seen).
    Its ``loop_guard`` configures a request's fingerprints before admission without a
    lookup; admission compares that configuration with the locked row's and recomputes
    when an operator changed it meanwhile."""
    seen = _seen.get(token_hash)
    return None if seen is None else seen[0]


def eligible(task: Task) -> bool:
    """Whether ``taskgate_agent_turn()`` would take ``task`` (besides ``loop_guard``),
    predicted from a row seen earlier to skip a statement bound to decline: active, no
    budget, and what the SQL function ``taskgate_one_statement()`` requires (which decides,
    on the locked row; ``tests/test_admission_rule.py`` keeps the two in step)."""
    return (task.active and task.cost_limit_usd is None and task.allowed_models is None and task.budget_id is None
            and task.conversation_request_limit is None and task.conversation_max_duration_s is None)


def remember(token_hash: str, task: Task, loop_guard: Any = None) -> None:
    """Keep ``task`` (just locked) as what the next turn of ``token_hash`` expects;
    ``loop_guard``: its column as stored (default: as this version reads it)."""
    if len(_seen) > 10_000:
        _seen.clear()
    if not _template:
        _template.append(task)
    _seen[token_hash] = (task, task.loop_guard.as_json() if loop_guard is None else loop_guard)


class Rerun(Exception):
    """The turn is left to the usual locked path; raised in the admission transaction,
    which rolls back (nothing this path wrote stays)."""


def judge(turn: Turn, policy: Policy, conversation_key: str) -> tuple[Verdict, tuple[str, LimitDetail] | None]:
    """The loop guard's verdict on a recorded turn, and the limit the locked row had
    reached (``None`` when the turn was counted). The verdict is ``OK`` without running
    the detector when nothing new was recorded (a resent history), else the detector's
    on the window (:func:`app.guard.judge.judge`).

    The limit is named at the clock the rule read (``turn.now``, the database's): a
    ``max_duration`` refusal quotes the elapsed seconds the rule saw.

    Raises :class:`Rerun` on a loop-guard stop (the latch is set the usual way, on a
    fresh lock: once per task) and when the rule refused but :func:`limit_breach` names
    no limit (a bug: the usual path, deciding again, raises ``RuleMismatch``)."""
    verdict = Verdict(Action.OK)
    if turn.new_calls or turn.completed:
        limit = policy.thresholds.conversation_tool_call_limit
        conversation_calls = turn.conversation_calls if turn.new_calls or limit is not None else 0
        verdict = judge_window(turn.history, policy, conversation_key, policy.normalizer,
                               task_tool_calls=turn.task.tool_calls, conversation_tool_calls=conversation_calls)
    if verdict.action is Action.STOP:
        raise Rerun()
    if turn.counted:
        return verdict, None
    breach = limit_breach(turn.task, turn.now, Decimal(0))
    if breach is None:
        raise Rerun()
    return verdict, breach


def forget() -> None:
    """Drop what this process remembers of tasks' ``loop_guard`` (tests)."""
    _seen.clear()
    _template.clear()
    known_windows.forget()
