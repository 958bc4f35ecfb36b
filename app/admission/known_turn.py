"""The agent-turn path in one statement when this process knows the conversation's
window, two when it does not (issue 23 §2).

The agent-turn path (:mod:`app.admission.turn`) is ``BEGIN``, ``taskgate_agent_turn()``,
the detector, ``COMMIT``: the transaction lets a stop roll the turn back. Here the
detector judges first:

1. the window the conversation had before this request is taken from
   :mod:`app.ledger.known_windows` (the last statement on the conversation here returned
   it: usually the response whose tool calls this request answers);
2. the window after the request's writes is predicted from it
   (:func:`known_windows.predict`) and judged with the detector, as the transaction path
   would judge what it reads back; anything but ``OK`` (a stop, a warning) leaves the
   turn to that path;
3. one autocommit statement, ``taskgate_known_turn()`` (migration 0013), carries the
   known window's digest (:func:`known_windows.digest`) and only the rows that window
   does not already hold; under the task's row lock it writes nothing unless the
   window before the writes is the known one, then writes and counts as
   ``taskgate_agent_turn()`` does, and rolls itself back (SQLSTATE ``TG001``) unless
   the turn was exactly the predicted one: the request counted, the same new calls and
   completed results, neither tool-call ceiling passed.

When the window is not known here, it is predicted empty: a conversation's first turn
(its first tool results; the bench's agent turn) is then one statement too, the empty
window checked under the lock as a cached one is. When that is wrong (another process
served the conversation, or the response's usage accounting has not finished: a client
may send its next request before it does), or the cached window is no longer the
database's, the statement returns the window as it is instead of writing, and the turn
is predicted and sent once more from that. The locked path leaves the window it judged
here too (:func:`app.ledger.tool_calls.record_request`): in the bench's agent turn (one
conversation per task) 1,140 of 1,141 statements were the turn's only one (200 of 927
turns sent two before).

So the verdict is the one the transaction path reaches on the same window, the commit
is as durable (``synchronous_commit = on``), and the transaction path runs only for a
task's first turn in this process, a predicted stop or warning, a request whose writes
it cannot predict (repeated call ids), a misprediction and a window that changed twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from app.admission import turn as agent_turn
from app.db import sql
from app.guard.detector import OK, Action, CallRecord, Verdict
from app.guard.judge import GuardRequest
from app.guard.judge import judge as judge_window
from app.guard.policy import Policy
from app.ledger import known_windows
from app.ledger.rows import CallColumns, ResultColumns, window_records
from app.settings import Settings
from app.task import Task

#: ``taskgate_known_turn()`` and an admitted turn's ``admissions`` row
#: (:mod:`app.db.commits`) in one statement (app/db/sql/admission.sql).
_KNOWN = sql.statement("admission_known_turn")
#: Raised by ``taskgate_known_turn()`` when the turn differs from its prediction.
MISPREDICTED = "TG001"
#: Statements sent per turn at most: the known window, then the window read back.
ATTEMPTS = 2


@dataclass(frozen=True, slots=True)
class Known:
    """An admitted turn: the task after its count, its policy and the verdict (``OK``)."""

    task: Task
    policy: Policy
    verdict: Verdict


async def admit_known(conn: asyncpg.Connection, token_hash: str, guard: GuardRequest,
                      settings: Settings, admission_key: uuid.UUID, request_id: str | None) -> Known | None:
    """Admit the turn in one or two statements when its predicted verdict is ``OK`` (see
    the module docstring), its ``admissions`` row under ``admission_key`` in the same
    statement. ``None``: nothing was written; decide the usual way. ``conn`` is not in a
    transaction. Database errors other than a misprediction propagate."""
    expected = agent_turn.expectation(token_hash)
    if expected is None:
        return None
    task, loop_guard = expected
    key = guard.conversation_key
    policy = Policy(task, settings)  # its loop_guard is checked on the locked row; the ceilings are too
    size, calls, results = agent_turn.rows(task, guard, settings, policy)
    cached = known_windows.get(task.id, key)
    # not known here: a conversation's first turn is the usual case (its window empty),
    # checked under the lock like any cached window; another window is returned instead
    before: Sequence[CallRecord] | None = () if cached is None else cached.last(size)
    for _ in range(ATTEMPTS):
        new_calls = completed = 0
        verdict = OK
        predicted: tuple[CallRecord, ...] = ()
        send: tuple[CallColumns, ResultColumns] = (([], [], [], []), ([], [], [], [], []))  # nothing is written
        if before is not None:
            prediction = known_windows.predict(before, size, calls, results)
            if prediction is None:
                return None
            new_calls, completed, predicted = prediction.new_calls, prediction.completed, prediction.window
            send = prediction.calls, prediction.results
            if new_calls or completed:
                verdict = judge_window(predicted, policy, key, policy.normalizer, task_tool_calls=0,
                                       conversation_tool_calls=0)
                if verdict.action is not Action.OK:
                    return None
        try:
            row = await conn.fetchrow(
                _KNOWN, token_hash, loop_guard, key, size, *send[0], *send[1],
                None if before is None else known_windows.digest(before), new_calls, completed,
                settings.tool_call_limit, settings.conversation_tool_call_limit, admission_key, request_id)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate != MISPREDICTED:
                raise
            known_windows.drop(task.id, key)
            return None
        if row is None:  # an unknown token: the usual path answers it
            return None
        if row["known"]:  # only ever with a known window before: ``predicted`` is the window now
            admitted = Task.from_row(row)
            agent_turn.remember(token_hash, admitted, row["loop_guard"])
            known_windows.put(admitted.id, key, size, predicted)
            return Known(admitted, Policy(admitted, settings), verdict)
        before = window_records(row)
        known_windows.put(task.id, key, size, before)
    return None
