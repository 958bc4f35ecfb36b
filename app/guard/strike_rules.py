"""What a loop rule does when it fires, and the strike before the latch: pure decisions.

Each rule has an **action** (``TASKGATE_RULE_ACTIONS``, per task
``loop_guard.rule_actions``):

- ``latch``: stop the task at once (the durable stop latch; every later request of
  the task is refused). The hard rules (identical call + result streak, cycles,
  failure and empty-result streaks, the ceilings) always latch.
- ``strike``: the answer that tripped the rule is cut (a stream) or withheld (a
  body, answered with 502 and the sentence) and the model is told in-band: the
  conversation's next admitted request carries a short gateway note (:func:`note`)
  saying what was repeated. The task stays active. A second strike in the same
  conversation within ``strike_window_s`` latches the task as ``latch`` would
  (:func:`next_strike`). One answer draws at most one strike, whichever rules it trips.
- ``warn``: the answer is delivered, the next request carries the note; never a latch.

Defaults (:data:`DEFAULT_ACTIONS`): ``repeated_output`` and ``repeated_response`` strike
(a loop inside one answer, or the same answer again, is often one bad sample a model
recovers from once told; a second within the window is a loop); ``no_progress`` (the
same check re-run after edits with byte-identical output, :mod:`app.guard.progress`)
warns: healthy runs do it too. The reasoning is in docs/loop-guard.md.

Pure: no I/O, no clock (``now`` is passed in). The I/O is :mod:`app.ledger.strikes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from app.stop_reasons import StopReason

RuleAction = Literal["latch", "strike", "warn"]
LATCH: RuleAction = "latch"
STRIKE: RuleAction = "strike"
WARN: RuleAction = "warn"
ACTIONS: tuple[RuleAction, ...] = (LATCH, STRIKE, WARN)

REASON_NO_PROGRESS: Final[StopReason] = "no_progress"
#: The rules whose action can be chosen, with their default; every other rule latches.
DEFAULT_ACTIONS: Mapping[str, RuleAction] = {
    "repeated_output": STRIKE,
    "repeated_response": STRIKE,
    REASON_NO_PROGRESS: WARN,
}
#: Strikes in one conversation, within the window, that latch the task.
STRIKES_TO_LATCH = 2
#: Default seconds within which a second strike latches (``TASKGATE_STRIKE_WINDOW_S``).
DEFAULT_STRIKE_WINDOW_S = 3600.0
#: Longest quoted passage in a note, characters.
_QUOTE_CHARS = 120

_NOTE_END = "Do not repeat it: take a different next step, or stop and report what is blocking you."


def rule_action(rule: str, task_actions: Mapping[str, str] | None, settings_actions: Mapping[Any, str]) -> RuleAction:
    """The action of ``rule``: the task's ``loop_guard.rule_actions`` entry, else the
    setting's, else :data:`DEFAULT_ACTIONS`; ``latch`` for a rule not in it (the hard
    rules) and for an unknown value (only a hand-edited row can hold one)."""
    default = DEFAULT_ACTIONS.get(rule)
    if default is None:
        return LATCH
    for source in (task_actions, settings_actions):
        chosen = source.get(rule) if source else None
        if chosen is not None:
            return next((a for a in ACTIONS if a == chosen), LATCH)
    return default


@dataclass(frozen=True, slots=True)
class StrikeState:
    """A conversation's strikes: ``strikes`` counted in the window that ended at
    ``strike_at`` (the last one), drawn last by request ``request_id``."""

    strikes: int = 0
    strike_at: datetime | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class NextStrike:
    """What one more strike does: ``count`` (the strikes in the window with it),
    ``latch`` (it reaches :data:`STRIKES_TO_LATCH`), ``repeat`` (the answer already
    drew a strike: nothing new is counted)."""

    count: int
    latch: bool
    repeat: bool = False


def next_strike(state: StrikeState | None, now: datetime, window_s: float, request_id: str | None) -> NextStrike:
    """One more strike in a conversation whose strikes are ``state`` (``None``: none
    yet), at ``now``. Strikes older than ``window_s`` seconds no longer count; an answer
    (``request_id``, when known) that already drew one draws no second."""
    if state is not None and request_id is not None and state.request_id == request_id and state.strikes:
        return NextStrike(state.strikes, False, repeat=True)
    live = (state is not None and state.strike_at is not None
            and (now - state.strike_at).total_seconds() <= window_s)
    count = (state.strikes if live and state is not None else 0) + 1
    return NextStrike(count, count >= STRIKES_TO_LATCH)


def _quote(text: Any) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= _QUOTE_CHARS else s[: _QUOTE_CHARS - 1] + "…"


def what_repeated(rule: str, detail: Mapping[str, Any]) -> str:
    """What the model repeated, in words (the note and the client's sentence)."""
    if rule == "repeated_output":
        passage = detail.get("passage")
        quoted = f' ("{_quote(passage)}")' if passage else ""
        return f"your last answer kept repeating the same passage{quoted}, {detail.get('count', 'many')} times"
    if rule == "repeated_response":
        return f"you gave the same answer {detail.get('count', 'several')} times in a row"
    if rule == REASON_NO_PROGRESS:
        return (f"you re-ran {detail.get('tool_name', 'the same check')} with the same arguments "
                f"{detail.get('count', 'several')} times after other steps, and its output was byte-for-byte "
                "the same each time: your changes are not changing its result")
    return f"the loop guard's {rule} rule fired"


def note(rule: str, detail: Mapping[str, Any]) -> str:
    """The gateway note the conversation's next request carries (one short paragraph)."""
    if rule == REASON_NO_PROGRESS:
        return (f"[taskgate] Note: {what_repeated(rule, detail)}. Re-running it again will not change "
                "that. Check that your edits reach what the check runs, change your approach, or stop "
                "and report what is blocking you.")
    cut = " taskgate cut it off." if rule == "repeated_output" else " taskgate withheld the last one."
    return f"[taskgate] Note: {what_repeated(rule, detail)}.{cut} {_NOTE_END}"


def answer_sentence(rule: str, detail: Mapping[str, Any], *, streamed: bool, window_s: float) -> str:
    """The message of the error a struck answer is replaced or ended with (the client
    reads it): what was repeated, that the answer was cut (``streamed``) or withheld,
    that the task goes on with a note, and what a second strike does."""
    if rule == "repeated_output":
        what = (f"The model kept repeating the same passage in this answer "
                f"({detail.get('count', 'many')} times)")
    else:
        what = f"The model gave the same answer {detail.get('count', 'several')} times in a row"
    done = "taskgate cut the stream" if streamed else "taskgate withheld the answer"
    return (f"{what}; {done} ({rule}, strike 1 of {STRIKES_TO_LATCH}). The task goes on: the next "
            f"request of this conversation carries a note to the model about it. Another such answer "
            f"in this conversation within {window_s:g} s stops the task.")


def strike_event_sentence(kind: str, reason: str | None, detail: Mapping[str, Any]) -> str:
    """One sentence for a ``loop_strike`` event, or a ``loop_warning`` of a rule of this
    module (``repeated_output``, ``repeated_response``, ``no_progress``)."""
    conv = f" (conversation {detail['conversation_key']})" if detail.get("conversation_key") else ""
    what = what_repeated(reason or "", detail).replace("your last answer", "an answer").replace(
        "you re-ran", "the agent re-ran").replace("you gave", "the model gave").replace(
        "your changes", "its changes")
    if kind == "loop_strike":
        return (f"Strike {detail.get('strike', 1)} of {STRIKES_TO_LATCH} ({reason}){conv}: {what}; the "
                f"answer was {'cut' if detail.get('streamed') else 'withheld'} and the next request "
                "carries a note. The task goes on.")
    return f"Loop guard noted to the model ({reason}){conv}: {what}."
