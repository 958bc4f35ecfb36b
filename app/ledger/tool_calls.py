"""The tool-call ledger before the request goes upstream: the loop guard's durable I/O
inside admission, around the pure detector (:mod:`app.guard.judge`).

One ``tool_calls`` row per tool call invocation per task, keyed by tool call id, with
the tool name (ids and names longer than 256 characters or holding NUL or a lone
surrogate are stored as ``sha256:<hex>``, :func:`app.db.bounds.ledger_text`), SHA-256
of the canonical arguments, SHA-256 of the result, the resolved failure flag, the
conversation key and a global order (``seq``). A call id seen again (every request
resends the history) never counts twice: inserts are ``ON CONFLICT DO NOTHING`` and results are written only once.

:func:`record_request` runs inside admission, with the task row locked: it adds the
new results a request carries and asks the detector for a verdict *before* the
request may be forwarded. A response's tool calls enter the ledger as pending when the
exchange is settled (:func:`app.settlement.response.record_response`).

Results are hashed after the result normaliser (:mod:`app.guard.normalize`), a
bounded prefix and suffix of long ones (:mod:`app.guard.result_prints`, computed
before admission); with ``TASKGATE_LEDGER_RAW_RESULT_HASH`` the raw text's hash is
kept beside it. Each result is also flagged ``is_empty``
(:func:`app.guard.fingerprint.is_empty_result`, on the normalised text).
"""

from __future__ import annotations

from typing import Sequence

import asyncpg

from app.db import sql
from app.db import tasks as task_rows
from app.guard.detector import Action, CallRecord, Thresholds, Verdict, window_size
from app.guard.judge import GuardRequest, judge
from app.guard.policy import Policy
from app.guard.result_prints import config_for, fingerprints
from app.ledger import conversations, known_windows
from app.ledger.rows import call_rows, result_rows
from app.task import Task
from app.wire.base import ToolCall

# The statements: app/db/sql/ledger.sql (each written out whole, with what it shares).
_INSERT_CALLS = sql.statement("ledger_insert_calls")
_COMPLETE_CALLS = sql.statement("ledger_complete_calls")
_HISTORY = sql.statement("ledger_history")
_COUNT_CALLS = sql.statement("ledger_count_calls")


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


async def history(conn: asyncpg.Connection, task_id: str, conversation_key: str,
                  thresholds: Thresholds) -> list[CallRecord]:
    """The conversation's window of ledger records the detector reads under
    ``thresholds`` (:func:`app.guard.detector.window_size`), oldest first."""
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
    ``request_id`` goes into the ``loop_warning`` event. The window judged is left in
    :mod:`app.ledger.known_windows` (the next turn's prediction starts from it).
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
    window = await history(conn, task_id, key, thresholds)
    # the window under the lock, after the writes: the conversation's next turn here is one
    # statement (app.admission.known_turn checks it under the lock; a rollback only makes it stale)
    known_windows.put(task_id, key, window_size(thresholds), window)
    verdict = judge(window, policy, key, normalizer, task_tool_calls=task.tool_calls + new_calls,
                    conversation_tool_calls=conv_calls)
    if verdict.action is Action.WARN:
        await task_rows.add_event(conn, task_id, "loop_warning", verdict.reason, dict(verdict.detail),
                                  request_id=request_id)
    return verdict
