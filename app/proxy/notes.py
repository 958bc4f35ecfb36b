"""What the gateway tells the model in a forwarded request: short notes added to the
body the client sent (:meth:`app.wire.base.WireFormat.inject_notice`: chat a ``system``
message, Responses a ``developer`` message, Messages a text block in the last user
turn); the client's request is otherwise unchanged.

- the loop warning (rule 6, ``loop_warning``): the request carries a result that
  extends an identical streak past ``loop_warning_after`` (:data:`LOOP_NOTICE`);
- ``no_progress``: the request carries the result of a check re-run after other steps
  with byte-identical output, for the threshold's time or more
  (:func:`app.guard.strike_rules.note`), when its action is ``warn`` or its ``strike``
  did not latch;
- a pending note of the conversation: a soft rule struck or warned about the previous
  answer (:mod:`app.ledger.strikes`); taken from the database (delivered once) only when
  the task's row says one may be pending (``pending_notes``), so other requests pay
  nothing.

``TASKGATE_GUARD_NOTES=false`` leaves out the notes of strikes, warnings and
``no_progress`` (the loop warning has its own switch, ``TASKGATE_LOOP_WARNING``).
"""

from __future__ import annotations

import logging

import asyncpg

from app import events
from app.guard.detector import Action, Verdict
from app.guard.strike_rules import REASON_NO_PROGRESS, note
from app.ledger.strikes import take_note
from app.settings import Settings
from app.task import Task

logger = logging.getLogger(__name__)

#: Added to the forwarded request when the loop guard warns (rule 6).
LOOP_NOTICE = (
    "[taskgate] You have called {tool} {count} times in a row with the same arguments and "
    "got the same result each time. Repeating it will not change the result. Take a "
    "different next step, or stop and report what is blocking you."
)


async def notice_for(pool: asyncpg.Pool, settings: Settings, task: Task, verdict: Verdict | None,
                     conversation_key: str) -> str | None:
    """The notes for one admitted request of ``task`` in ``conversation_key`` (its loop
    guard ``verdict`` at admission), joined by a blank line; ``None``: none. Emits
    :data:`app.events.LOOP_WARNED` and :data:`app.events.LOOP_NOTED` for what it adds.
    A pending note that cannot be read (the database) is left for the next request: this
    one is admitted and goes out without it."""
    notes: list[str] = []
    if verdict is not None and verdict.action is Action.WARN:
        if verdict.reason == REASON_NO_PROGRESS:  # the signal is counted, noted or not
            if settings.guard_notes:
                notes.append(note(REASON_NO_PROGRESS, verdict.detail))
            events.LOOP_NOTED.emit(events.LoopNoted(task.id, REASON_NO_PROGRESS, settings.guard_notes))
        else:
            tool = verdict.detail.get("tool_name", "the same tool")
            events.LOOP_WARNED.emit(events.LoopWarned(task.id, tool, verdict.count))
            notes.append(LOOP_NOTICE.format(tool=tool, count=verdict.count))
    if task.pending_notes and conversation_key and settings.guard_notes:
        try:
            taken = await take_note(pool, task.id, conversation_key)
        except Exception:  # admitted: it is forwarded, the note waits for the next one
            logger.warning("could not read the pending note of task %s", task.id, exc_info=True)
            taken = None
        if taken is not None:
            text, rule = taken
            notes.append(text)
            events.LOOP_NOTED.emit(events.LoopNoted(task.id, rule))
    return "\n\n".join(notes) if notes else None
