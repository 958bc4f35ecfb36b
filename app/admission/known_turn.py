"""The agent-turn path in one statement, when this process knows the conversation's
window (issue 23 §2).

The agent-turn path (:mod:`app.admission.turn`) is ``BEGIN``, ``taskgate_agent_turn()``,
the detector, ``COMMIT``: the transaction lets a stop roll the turn back. When the
conversation's window is in :mod:`app.guard.known_windows` (the last statement on the
conversation here returned it: usually the response whose tool calls this request
answers), :func:`admit_known`:

1. predicts the window after the request's writes (:func:`known_windows.predict`) and
   judges it with the detector, as the transaction path would judge what it reads
   back; anything but ``OK`` (a stop, a warning) leaves the turn to that path;
2. sends one autocommit statement, ``taskgate_known_turn()`` (migration 0013), which
   under the task's row lock writes nothing unless the window before the writes is the
   cached one, then writes and counts as ``taskgate_agent_turn()`` does, and rolls
   itself back (SQLSTATE ``TG001``) unless the turn was exactly the predicted one: the
   request counted, the same new calls and completed results, neither tool-call ceiling
   passed.

So the verdict is the one the transaction path reaches on the same window, the commit
is as durable (``synchronous_commit = on``), and a miss (another process or a concurrent
turn wrote the conversation) costs one round trip before the transaction path, which
then refreshes the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from app.admission import turn as agent_turn
from app.guard import known_windows
from app.guard.detector import OK, Action, Verdict
from app.guard.ledger import GuardRequest
from app.guard.ledger import judge as judge_window
from app.guard.policy import Policy
from app.settings import Settings
from app.task import Task

_KNOWN = (
    "SELECT (f.task).*, f.known FROM taskgate_known_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15, $16, $17, $18, $19) AS f"
)
#: Raised by ``taskgate_known_turn()`` when the turn differs from its prediction.
MISPREDICTED = "TG001"


@dataclass(frozen=True, slots=True)
class Known:
    """An admitted turn: the task after its count, its policy and the verdict (``OK``)."""

    task: Task
    policy: Policy
    verdict: Verdict


async def admit_known(conn: asyncpg.Connection, token_hash: str, guard: GuardRequest,
                      settings: Settings) -> Known | None:
    """Admit the turn in one statement when its window is known here and its predicted
    verdict is ``OK`` (see the module docstring). ``None``: nothing was written; decide
    the usual way. ``conn`` is not in a transaction. Database errors other than a
    misprediction propagate."""
    expected = agent_turn.expectation(token_hash)
    if expected is None:
        return None
    task, loop_guard = expected
    key = guard.conversation_key
    cached = known_windows.get(task.id, key)
    if cached is None:
        return None
    size, calls, results = agent_turn.rows(task, guard, settings)
    before = cached.last(size)
    prediction = None if before is None else known_windows.predict(before, size, calls, results)
    if before is None or prediction is None:
        return None
    verdict = OK
    if prediction.new_calls or prediction.completed:
        policy = Policy(task, settings)  # its loop_guard is checked on the locked row; the ceilings are too
        verdict = judge_window(prediction.window, policy, key, policy.normalizer, task_tool_calls=0,
                               conversation_tool_calls=0)
        if verdict.action is not Action.OK:
            return None
    try:
        row = await conn.fetchrow(_KNOWN, token_hash, loop_guard, key, size, *calls, *results,
                                  [r.call_id for r in before], [r.result_hash for r in before],
                                  prediction.new_calls, prediction.completed, settings.tool_call_limit,
                                  settings.conversation_tool_call_limit)
    except asyncpg.PostgresError as exc:
        if exc.sqlstate != MISPREDICTED:
            raise
        row = None
    if row is None or not row["known"]:
        known_windows.drop(task.id, key)
        return None
    admitted = Task.from_row(row)
    agent_turn.remember(token_hash, admitted, row["loop_guard"])
    known_windows.put(admitted.id, key, size, prediction.window)
    return Known(admitted, Policy(admitted, settings), verdict)
