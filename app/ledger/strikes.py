"""Strikes and gateway notes in PostgreSQL: thin I/O around the pure rules of
:mod:`app.guard.strike_rules` (migration 0014).

- :func:`judge_answer`: a soft rule fired on one answer (``repeated_output``,
  ``repeated_response``); with the task row locked, in a durable transaction, its
  action (the task's ``loop_guard.rule_actions``, the settings, the default) is
  applied: the latch, a strike (or the latch, when it is the second in the
  conversation within the window), or a warning. Runs before the answer's last byte
  (:mod:`app.proxy.verdict`).
- :func:`apply_locked`: the same inside a transaction that holds the task row already
  (admission, for ``no_progress`` when its action is ``strike``).
- :func:`take_note`: the conversation's pending note, cleared as it is taken, for the
  request being forwarded (delivered once). A task whose ``pending_notes`` is 0 never
  calls it (admission's row has the column: no statement added on the fast path).

Lock order is admission's: the task row, then the conversation's.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

import asyncpg

from app import events
from app.db import sql
from app.db import tasks as task_rows
from app.db.pool import durable
from app.guard.policy import rule_action
from app.guard.strike_rules import LATCH, STRIKES_TO_LATCH, WARN, RuleAction, StrikeState, next_strike, note
from app.settings import Settings
from app.task import LoopGuard

logger = logging.getLogger(__name__)

# The statements: app/db/sql/guard.sql.
_LOCK_TASK = sql.statement("strike_lock_task")
_STATE = sql.statement("strike_state")
# $3 strikes (NULL: leave them), $4 the answer's request id, $5 the note (NULL: keep any
# pending one), $6 the rule it is about
_WRITE = sql.statement("strike_write")
_COUNT = sql.statement("strike_count")
_PEEK_NOTE = sql.statement("strike_peek_note")
_LOCK_NOTES = sql.statement("strike_lock_notes")
_CLEAR_NOTE = sql.statement("strike_clear_note")
_UNCOUNT_NOTE = sql.statement("strike_uncount_note")
#: The time of a conversation never struck before (no prior strike to count).
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Applied(enum.Enum):
    """What :func:`judge_answer` / :func:`apply_locked` did."""

    LATCHED = "latched"  # the task is stopped (now, or it already was by this rule's latch)
    STRUCK = "struck"  # a strike: the answer is cut or withheld, the task goes on
    WARNED = "warned"  # a warning: the answer is delivered, the next request carries the note
    INACTIVE = "inactive"  # the task was already stopped (or is gone): nothing written


@dataclass(frozen=True, slots=True)
class Judged:
    """The result: what was done, the action in force, the strike's number (0: none)."""

    applied: Applied
    action: RuleAction
    strike: int = 0


async def judge_answer(pool: asyncpg.Pool, task_id: str, conversation_key: str, rule: str,
                       detail: Mapping[str, Any], settings: Settings, *, request_id: str | None,
                       streamed: bool) -> Judged:
    """Apply ``rule``'s action to one answer (``detail``: the rule's evidence;
    ``streamed``: the answer was a stream), in its own durable transaction with the task
    row locked. Database errors propagate (the caller retries or logs them)."""
    async with pool.acquire() as conn, conn.transaction():
        await durable(conn)
        row = await conn.fetchrow(_LOCK_TASK, task_id)
        if row is None or row["status"] != "active":
            return Judged(Applied.INACTIVE, LATCH)
        action = rule_action(LoopGuard.from_json(row["loop_guard"]), settings, rule)
        return await apply_locked(conn, task_id, conversation_key, rule, action, detail, settings,
                                  request_id=request_id, streamed=streamed)


async def apply_locked(conn: asyncpg.Connection, task_id: str, conversation_key: str, rule: str,
                       action: RuleAction, detail: Mapping[str, Any], settings: Settings, *,
                       request_id: str | None, streamed: bool = False, pending_note: bool = True) -> Judged:
    """Apply ``action`` for ``rule`` in the caller's transaction, which holds the task
    row (active): ``latch`` sets the latch; ``warn`` leaves the note and a
    ``loop_warning`` event; ``strike`` counts a strike, leaves the note and a
    ``loop_strike`` event, or latches when it is the :data:`STRIKES_TO_LATCH`-th within
    ``settings.strike_window_s`` (``stop_detail`` adds ``strikes`` and
    ``strike_window_s``). ``request_id``: the answer's (one answer, one strike);
    ``pending_note``: leave the note for the conversation's next request (``False``: the
    caller adds it to the request being admitted)."""
    described = {**detail, "conversation_key": conversation_key}
    if action == LATCH:
        await task_rows.set_latch(conn, task_id, rule, described, request_id=request_id)
        return Judged(Applied.LATCHED, action)
    state = await conn.fetchrow(_STATE, task_id, conversation_key)
    text = note(rule, described) if settings.guard_notes and pending_note else None
    added_note = 1 if text is not None and not (state is not None and state["noted"]) else 0
    if action == WARN:
        if text is not None:
            await conn.execute(_WRITE, task_id, conversation_key, None, None, text, rule)
        if added_note:
            await conn.execute(_COUNT, task_id, 0, added_note)
        await task_rows.add_event(conn, task_id, "loop_warning", rule, described, request_id=request_id)
        return Judged(Applied.WARNED, action)
    window_s = settings.strike_window_s
    prior = None if state is None else StrikeState(state["strikes"], state["strike_at"], state["strike_request"])
    strike = next_strike(prior, state["now"] if state is not None else _EPOCH, window_s, request_id)
    if strike.repeat:
        return Judged(Applied.STRUCK, action, strike.count)
    if strike.latch:
        stopped = {**described, "strikes": strike.count, "strike_window_s": window_s}
        await task_rows.set_latch(conn, task_id, rule, stopped, request_id=request_id)
        return Judged(Applied.LATCHED, action, strike.count)
    await conn.execute(_WRITE, task_id, conversation_key, strike.count, request_id, text, rule)
    await conn.execute(_COUNT, task_id, 1, added_note)
    await task_rows.add_event(conn, task_id, "loop_strike", rule,
                              {**described, "strike": strike.count, "strikes_to_latch": STRIKES_TO_LATCH,
                               "strike_window_s": window_s, "streamed": streamed}, request_id=request_id)
    events.LOOP_STRUCK.emit(events.LoopStruck(task_id, rule, strike.count))
    logger.warning("task %s: strike %d of %d (%s) in conversation %s", task_id, strike.count,
                   STRIKES_TO_LATCH, rule, conversation_key, extra={"task_id": task_id, "reason": rule})
    return Judged(Applied.STRUCK, action, strike.count)


async def take_note(pool: asyncpg.Pool, task_id: str, conversation_key: str) -> tuple[str, str] | None:
    """``(note, rule)`` pending for the conversation's next request, cleared (``None``:
    none). One read when the conversation has none; else a transaction (the task row,
    then the conversation's: two concurrent requests never both take it)."""
    async with pool.acquire() as conn:
        if await conn.fetchval(_PEEK_NOTE, task_id, conversation_key) is None:
            return None
        async with conn.transaction():
            await conn.fetchval(_LOCK_NOTES, task_id)
            taken = await conn.fetchrow(_CLEAR_NOTE, task_id, conversation_key)
            if taken is None:
                return None
            await conn.execute(_UNCOUNT_NOTE, task_id)
            return taken["note"], taken["note_reason"] or ""
