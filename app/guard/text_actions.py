"""Tool use written as text: (action, arguments, observation) triples read from the plain
turns of a request's history, for agents that replay their tool calls as text instead of
structured ``tool_calls`` and ``role: "tool"`` messages.

Pure and table-driven: :data:`CONVENTIONS` is an ordered tuple of parsers, tried in order
on the latest assistant turn of the tail (:func:`app.guard.text_turns.tail`); the first
that finds an action wins. The observation is the text of the turns after it (user
turns; system turns skipped), with a leading ``Observation:`` removed.

Conventions (in order):

- ``smolagents_calls``: smolagents 1.x (``ToolCallingAgent``, ``CodeAgent``) ends its
  assistant turn with ``Calling tools:\\n`` and the Python ``repr`` of a list of
  ``{'id', 'type': 'function', 'function': {'name', 'arguments'}}``; the next user turn is
  ``Observation:\\n<result>`` (several calls share one observation, joined by smolagents),
  or ``Call id: <id>\\nError:\\n<error>`` for a failed step (a failure).
- ``react``: ``Action: <name>`` then ``Action Input: <input>`` (LangChain's ReAct prompt,
  the ReAct paper's ``Action 1: Search[x]``), or ``Action:`` followed by a JSON blob
  ``{"name"|"action"|"tool": ..., "arguments"|"action_input"|"args": ...}`` (smolagents'
  text tool calling, LangChain's structured chat), the last one in the turn, unless a
  ``Final Answer:`` follows it.
- ``code_block``: the last fenced code block (```` ``` ````) or ``<code>...</code>`` of
  the turn (code agents); the next turn's text is its output.
- ``repeated_pair`` (fall-back, no convention matched): an assistant turn and the user turn
  after it that repeat the previous assistant turn and its user turn once ids are masked
  (:func:`mask_volatile`), the assistant text differing only in those ids, are both
  actions named ``text:reply``. A pair seen once is not an action, so ordinary chat is
  never counted; an assistant text repeated byte for byte is left to ``repeated_response``
  (:mod:`app.guard.conversation_rules`), which explains it as a repeated answer.

A ReAct scratchpad kept inside the last user turn (no assistant turns: the prompt holds
``Action:`` / ``Action Input:`` / ``Observation:`` blocks) yields its last
:data:`SCRATCHPAD_BLOCKS` complete blocks.

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
turn (a scratchpad: its one turn, whose blocks are numbered from its start), each in one
linear pass or a few ``rfind`` from the end, whatever the text holds (no regex that
backtracks over the text per opener); nothing before the tail is read.
"""

from __future__ import annotations

import ast
import collections
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.guard.text_turns import ASSISTANT, Turn
from app.wire.base import ToolCall, ToolResult

TOOL_PREFIX = "text:"
#: Characters of the action turn's end the conventions read.
SCAN_CHARS = 65_536
#: Client call ids at least this long are used as they are (see the module docstring).
UNIQUE_ID_CHARS = 16
#: Complete blocks read from a ReAct scratchpad in one user turn.
SCRATCHPAD_BLOCKS = 2
#: Longest tool name kept (longer ones are cut).
MAX_NAME_CHARS = 128
#: Roles whose turns are neither actions nor observations.
SKIP_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class Found:
    """One action a convention found: its name, arguments (a JSON value or text), the
    client's call id (``""``: none) and, for a scratchpad, its observation and its
    ordinal among the turn's blocks (``-1``: its ordinal among the actions found)."""

    name: str
    arguments: Any
    client_id: str = ""
    observation: str | None = None
    ordinal: int = -1


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


# ---------------------------------------------------------------- smolagents

_CALLING_TOOLS = "Calling tools:\n"
_CLIENT_ID = re.compile(r"'id': '[^'\\]*'")


def _last_listing(text: str) -> str | None:
    """The ``[...]`` after the last line-start ``Calling tools:``, when it ends the text."""
    at = text.rfind("\n" + _CALLING_TOOLS)
    at = at + 1 if at >= 0 else (0 if text.startswith(_CALLING_TOOLS) else -1)
    if at < 0:
        return None
    listing = text[at + len(_CALLING_TOOLS):].rstrip()
    return listing if listing.startswith("[") and listing.endswith("]") else None


def _smolagents(text: str) -> list[Found] | None:
    listing = _last_listing(text)
    if listing is None:
        return None
    try:
        calls = ast.literal_eval(listing)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        calls = None
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        return [Found("tool_calls", _CLIENT_ID.sub("'id': ''", listing))]
    found = []
    for call in calls:
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        client_id = call.get("id")
        found.append(Found(str(function.get("name") or ""), _jsonable(function.get("arguments")),
                           client_id if isinstance(client_id, str) else ""))
    return found


def _jsonable(value: Any) -> Any:
    """``value`` when it is JSON as is, else its ``repr`` (hashed as text)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value)
    return value


# ---------------------------------------------------------------- ReAct

_ACTION = re.compile(r"^[ \t]*Action[ \t]*\d*[ \t]*:[ \t]*", re.M)
_ACTION_INPUT = re.compile(r"^[ \t]*Action[ \t]*\d*[ \t]*Input[ \t]*\d*[ \t]*:[ \t]*", re.M)
_BLOCK_END = re.compile(r"^[ \t]*(?:Observation|Thought|Final Answer)[ \t]*\d*[ \t]*:", re.M)
_OBSERVATION = re.compile(r"^[ \t]*Observation[ \t]*\d*[ \t]*:[ \t]*\n?", re.M)
_NEXT_STEP = re.compile(r"^[ \t]*(?:Thought|Action|Final Answer)[ \t]*\d*[ \t]*:", re.M)
_FINAL = re.compile(r"^[ \t]*Final Answer[ \t]*:", re.M)
_BRACKETED = re.compile(r"\A([\w.-]+)\[(.*)\]\Z", re.S)
_FENCE_AROUND = re.compile(r"\A```[\w-]*\s*\n?(.*?)\n?\s*```\Z", re.S)
_NAME_KEYS = ("name", "action", "tool", "tool_name")
_ARGUMENT_KEYS = ("arguments", "action_input", "args", "parameters", "input")


def _react_body(text: str, start: int) -> tuple[str, int]:
    """The text of one action block from ``start`` (after ``Action:``) and where it ends."""
    end = _BLOCK_END.search(text, start)
    stop = end.start() if end else len(text)
    return text[start:stop].strip(), stop


def _react_action(body: str) -> Found:
    head, _, rest = body.partition("\n")
    head = head.strip()
    if head and not head.startswith(("{", "```")):
        head = head.strip("`'\"").strip()
        bracketed = _BRACKETED.match(head)
        if bracketed:
            return Found(bracketed.group(1), bracketed.group(2))
        given = _ACTION_INPUT.search(rest)
        arguments = rest[given.end():].strip() if given else ""
        return Found(head.rstrip(":."), arguments)
    blob = body.strip()
    fenced = _FENCE_AROUND.match(blob)
    blob = fenced.group(1).strip() if fenced else blob
    try:
        value = json.loads(blob)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        name = next((value[k] for k in _NAME_KEYS if isinstance(value.get(k), str)), "")
        given_arguments: Any = next((value[k] for k in _ARGUMENT_KEYS if k in value), {})
        return Found(name, given_arguments)
    return Found("", blob)


def _last_actions(text: str, n: int) -> tuple[list[re.Match[str]], int]:
    """The last ``n`` ``Action:`` lines of ``text`` and how many there are (one linear pass,
    constant memory)."""
    last: collections.deque[re.Match[str]] = collections.deque(maxlen=n)
    count = 0
    for match in _ACTION.finditer(text):
        last.append(match)
        count += 1
    return list(last), count


def _react(text: str) -> list[Found] | None:
    actions, _ = _last_actions(text, 1)
    if not actions:
        return None
    body, stop = _react_body(text, actions[-1].end())
    if _FINAL.search(text, stop):
        return None
    return [_react_action(body)]


def _scratchpad(text: str) -> list[Found]:
    """The last complete Action/Observation blocks of a ReAct scratchpad, oldest first."""
    found: list[Found] = []
    last, count = _last_actions(text, SCRATCHPAD_BLOCKS)
    for ordinal, match in enumerate(last, count - len(last)):
        body, stop = _react_body(text, match.end())
        seen = _OBSERVATION.match(text, stop)
        if seen is None:
            continue
        following = _NEXT_STEP.search(text, seen.end())
        observation = text[seen.end():following.start() if following else len(text)].strip()
        action = _react_action(body)
        found.append(Found(action.name, action.arguments, "", observation, ordinal))
    return found


_THOUGHT = re.compile(r"^[ \t]*Thought[ \t]*\d*[ \t]*:", re.M)


def seed_without_scratchpad(seed: str) -> str:
    """A conversation seed (:attr:`app.wire.base.RequestView.conversation_seed`) cut before
    a ReAct scratchpad it holds (from the ``Thought:`` line before its first ``Action:``
    that has an ``Observation:`` after it), so a prompt that grows by one block a request
    keeps one conversation key; any other seed as it is."""
    action = _ACTION.search(seed)
    if action is None or _OBSERVATION.search(seed, action.end()) is None:
        return seed
    cut = action.start()
    for thought in _THOUGHT.finditer(seed, 0, cut):
        cut = thought.start()  # the last Thought: before the first Action:
    return seed[:cut]


# ---------------------------------------------------------------- code blocks

def _last_between(text: str, opening: str, closing: str) -> tuple[int, str] | None:
    """(end, body) of the last ``opening ... closing`` pair of ``text`` (found from the end
    with two ``rfind``: linear whatever the text holds)."""
    end = text.rfind(closing)
    start = text.rfind(opening, 0, end) if end > 0 else -1
    return None if start < 0 else (end, text[start + len(opening):end])


def _code_block(text: str) -> list[Found] | None:
    fenced = _last_between(text, "```", "```")
    if fenced is not None:
        end, body = fenced
        head, newline, rest = body.partition("\n")
        if newline and " " not in head.strip():  # the info string line (```python) or an empty one
            fenced = (end, rest)
    tagged = _last_between(text, "<code>", "</code>")
    block = max((b for b in (fenced, tagged) if b is not None), key=lambda b: b[0], default=None)
    return None if block is None else [Found("code", block[1].strip("\n"))]


#: The conventions, in the order they are tried: (name, parser).
CONVENTIONS: tuple[tuple[str, Callable[[str], list[Found] | None]], ...] = (
    ("smolagents_calls", _smolagents),
    ("react", _react),
    ("code_block", _code_block),
)


# ---------------------------------------------------------------- observations, ids

_LEADING_OBSERVATION = re.compile(r"\A\s*Observation[ \t]*\d*[ \t]*:[ \t]*\n?")
_SMOLAGENTS_ERROR = re.compile(r"^Call id: [^\n]*\n(?=Error:\n)", re.M)
_VOLATILE_IDS = re.compile(
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
    text = _LEADING_OBSERVATION.sub("", text, count=1)
    cleaned, failed = _SMOLAGENTS_ERROR.subn("", text, count=1)
    return cleaned, True if failed else None


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


def _repeated_pair(scope: str, turns: Sequence[Turn], last: int, observation: str | None) -> list[TextAction]:
    previous = next((i for i in range(last - 1, -1, -1) if turns[i].role == ASSISTANT), None)
    if observation is None or previous is None or turns[previous].structured:
        return []
    earlier = _observations(turns[previous + 1:last])
    if earlier is None or any(t.structured for t in turns[previous + 1:last]):
        return []
    if turns[last].text == turns[previous].text:
        return []  # an exact repeat is repeated_response's (app.guard.conversation_rules)
    action, prior = mask_volatile(turns[last].text), mask_volatile(turns[previous].text)
    if not action or action != prior or mask_volatile(observation) != mask_volatile(earlier):
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
            return _actions("react_scratchpad", scope, turn, _scratchpad(turn.text), None)
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
