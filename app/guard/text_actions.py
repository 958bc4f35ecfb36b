"""Tool use written as text: (action, arguments, observation) triples read from the plain
turns of a request's history, for agents that replay their tool calls as text instead of
structured ``tool_calls`` and ``role: "tool"`` messages.

Pure and table-driven: :data:`app.guard.text_conventions.CONVENTIONS` is an ordered
tuple of parsers, tried in order on the latest assistant turn of the tail
(:func:`app.guard.text_turns.tail`); the first that finds an action wins. The observation
is the text of the turns after it (user turns; system turns skipped), with a leading
``Observation:`` removed.

Conventions (in order): those of :mod:`app.guard.text_conventions` (``smolagents_calls``,
``react``, ``code_block``; a smolagents ``Call id: <id>\\nError:\\n<error>`` observation is
a failure), then

- ``repeated_pair`` (fall-back, no convention matched): an assistant turn and the user turn
  after it that repeat the previous assistant turn and its user turn once ids are masked
  (:func:`mask_volatile`), the assistant text differing only in those ids, are both
  actions named ``text:reply``. A pair seen once is not an action, so ordinary chat is
  never counted; an assistant text repeated byte for byte is left to ``repeated_response``
  (:mod:`app.guard.conversation_rules`), which explains it as a repeated answer.

A ReAct scratchpad kept inside the last user turn (no assistant turns: the prompt holds
``Action:`` / ``Action Input:`` / ``Observation:`` blocks) yields its last complete blocks
(:func:`app.guard.text_conventions.scratchpad`).

Each triple's ``tool_name`` is ``"text:" + name`` (``text:read_file``, ``text:code``), so
the ledger and the detector treat it as a tool call of its own, and its ``call_id`` a hash
of the conversation key, the turn's position, the action's ordinal and the action itself:
the same history resent yields the same ids, so an action is recorded once (the ledger
ignores a known id). A client call id unique by construction (at least
:data:`UNIQUE_ID_CHARS` characters: provider-issued ids, UUIDs) is kept with the tool's own
name instead: it is the structured call the response carried (smolagents replays the
model's ``tool_calls`` as text), so whichever of the response and the next request reaches
the ledger first records the same call, once.

Cost: the conventions read at most the last :data:`SCAN_CHARS` characters of the action
turn (a scratchpad: its one turn, whose blocks are numbered from its start), a repeated
pair compares the last :data:`SCAN_CHARS` of its turns, and an observation's smolagents
error line is looked for in its first :data:`SCAN_CHARS`; nothing before the tail is read.
Every pattern is RE2 (:mod:`app.guard.linear_regex`), so each read is one linear pass
whatever the text holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.guard.linear_regex import compile_linear
from app.guard.text_conventions import CONVENTIONS, Found, scratchpad
from app.guard.text_turns import ASSISTANT, Turn
from app.wire.base import ToolCall, ToolResult

TOOL_PREFIX = "text:"
#: Characters of the action turn's end the conventions read.
SCAN_CHARS = 65_536
#: Client call ids at least this long are used as they are (see the module docstring).
UNIQUE_ID_CHARS = 16
#: Longest tool name kept (longer ones are cut).
MAX_NAME_CHARS = 128
#: Roles whose turns are neither actions nor observations.
SKIP_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class TextAction:
    """One (action, arguments, observation) triple; ``observation`` ``None`` while the
    request carries no turn after the action (pending); ``is_error`` ``None``: decided
    by the ledger's error patterns."""

    convention: str
    call_id: str
    tool_name: str
    arguments: Any
    observation: str | None
    is_error: bool | None = None


# ---------------------------------------------------------------- observations, ids

_LEADING_OBSERVATION = compile_linear(r"\A\s*Observation[ \t]*\d*[ \t]*:[ \t]*\n?")
#: A failed smolagents step: ``Call id: …`` on its own line, then ``Error:``.
_SMOLAGENTS_ERROR = compile_linear(r"^Call id: [^\n]*\n(Error:\n)", multiline=True)
_VOLATILE_IDS = compile_linear(
    r"\b(?:call|toolu|fc|chatcmpl|msg|resp|run)_[A-Za-z0-9_-]{6,}\b"
    r"|\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b")


def mask_volatile(text: str) -> str:
    """``text`` with call and message ids (``call_…``, ``toolu_…``, UUIDs) masked as
    ``<id>``: two turns that differ only in those are the same turn."""
    return _VOLATILE_IDS.sub("<id>", text)


def observation_of(text: str) -> tuple[str, bool | None]:
    """An observation turn's text without its ``Observation:`` label, and ``True`` when
    it reports a failed smolagents step (``Call id: …`` then ``Error:``; that line is
    dropped), else ``None`` (the ledger's error patterns decide)."""
    label = _LEADING_OBSERVATION.match(text)
    if label is not None:
        text = text[label.end():]
    failed = _SMOLAGENTS_ERROR.search(text[:SCAN_CHARS])  # smolagents writes it first
    if failed is None:
        return text, None
    return text[:failed.start()] + text[failed.start(1):], True


def _tool_name(found: Found) -> str:
    name = found.name.strip()[:MAX_NAME_CHARS]
    if name and len(found.client_id) >= UNIQUE_ID_CHARS:
        return name  # the call's own id and name, as the response's structured call has them
    return TOOL_PREFIX + (name or "action")


def _call_id(scope: str, turn: Turn, ordinal: int, found: Found) -> str:
    if len(found.client_id) >= UNIQUE_ID_CHARS:
        return found.client_id
    try:
        action = json.dumps([found.name, found.arguments], sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        action = repr((found.name, found.arguments))
    position = found.ordinal if found.ordinal >= 0 else ordinal
    material = "\x00".join((scope, str(turn.index), str(position), found.client_id, action))
    return TOOL_PREFIX + hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _observations(turns: Sequence[Turn]) -> str | None:
    texts = [t.text for t in turns if t.role not in SKIP_ROLES]
    return "\n".join(texts) if texts else None


# ---------------------------------------------------------------- extraction

def _actions(convention: str, scope: str, turn: Turn, found: Sequence[Found],
             observation: str | None) -> list[TextAction]:
    out = []
    for ordinal, f in enumerate(found):
        seen = f.observation if f.observation is not None else observation
        text, failed = observation_of(seen) if seen is not None else (None, None)
        out.append(TextAction(convention, _call_id(scope, turn, ordinal, f), _tool_name(f),
                              f.arguments, text, failed))
    return out


def _masked_tail(text: str) -> str:
    """The last :data:`SCAN_CHARS` characters of ``text``, ids masked: what two turns of a
    repeated pair are compared by."""
    return mask_volatile(text[-SCAN_CHARS:])


def _repeated_pair(scope: str, turns: Sequence[Turn], last: int, observation: str | None) -> list[TextAction]:
    previous = next((i for i in range(last - 1, -1, -1) if turns[i].role == ASSISTANT), None)
    if observation is None or previous is None or turns[previous].structured:
        return []
    earlier = _observations(turns[previous + 1:last])
    if earlier is None or any(t.structured for t in turns[previous + 1:last]):
        return []
    if turns[last].text == turns[previous].text:
        return []  # an exact repeat is repeated_response's (app.guard.conversation_rules)
    action, prior = _masked_tail(turns[last].text), _masked_tail(turns[previous].text)
    if not action or action != prior or _masked_tail(observation) != _masked_tail(earlier):
        return []
    pairs = ((turns[previous], earlier), (turns[last], observation))
    return [a for turn, seen in pairs
            for a in _actions("repeated_pair", scope, turn, [Found("reply", action)], seen)]


def extract(turns: Sequence[Turn], scope: str) -> list[TextAction]:
    """The text actions of a history's tail (:func:`app.guard.text_turns.tail`, oldest
    first), ``scope`` being the conversation key (it scopes generated call ids). ``[]``
    when the latest assistant turn, or a turn after it, is structured (the structured
    path owns it) or no convention applies. Never raises."""
    last = next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role == ASSISTANT), None)
    if last is None:
        if turns and turns[-1].role not in SKIP_ROLES and not turns[-1].structured:
            turn = turns[-1]
            return _actions("react_scratchpad", scope, turn, scratchpad(turn.text), None)
        return []
    turn, after = turns[last], turns[last + 1:]
    if turn.structured or any(t.structured for t in after) or not turn.text:
        return []
    observation = _observations(after)
    scanned = turn.text[-SCAN_CHARS:]
    for convention, parse in CONVENTIONS:
        found = parse(scanned)
        if found:
            return _actions(convention, scope, turn, found, observation)
    return _repeated_pair(scope, turns, last, observation)


def guard_calls(actions: Sequence[TextAction]) -> tuple[list[ToolCall], list[ToolResult]]:
    """The actions as the ledger takes them: calls, and results for those observed."""
    calls = [ToolCall(a.call_id, a.tool_name, a.arguments) for a in actions]
    results = [ToolResult(a.call_id, a.observation, a.is_error) for a in actions if a.observation is not None]
    return calls, results
