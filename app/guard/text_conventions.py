"""The conventions of tool use written as text: parsers that find the action(s) in one
assistant turn (or a ReAct scratchpad in one user turn), for
:mod:`app.guard.text_actions`, which turns them into (action, arguments, observation)
triples.

Pure and table-driven: :data:`CONVENTIONS` is an ordered tuple of parsers, tried in order
on the latest assistant turn; the first that finds an action wins.

- ``smolagents_calls``: smolagents 1.x (``ToolCallingAgent``, ``CodeAgent``) ends its
  assistant turn with ``Calling tools:\\n`` and the Python ``repr`` of a list of
  ``{'id', 'type': 'function', 'function': {'name', 'arguments'}}``.
- ``react``: ``Action: <name>`` then ``Action Input: <input>`` (LangChain's ReAct prompt,
  the ReAct paper's ``Action 1: Search[x]``), or ``Action:`` followed by a JSON blob
  ``{"name"|"action"|"tool": ..., "arguments"|"action_input"|"args": ...}`` (smolagents'
  text tool calling, LangChain's structured chat), the last one in the turn, unless a
  ``Final Answer:`` follows it.
- ``code_block``: the last fenced code block (```` ``` ````) or ``<code>...</code>`` of
  the turn (code agents).

A ReAct scratchpad kept inside the last user turn yields its last
:data:`SCRATCHPAD_BLOCKS` complete ``Action:`` / ``Observation:`` blocks
(:func:`scratchpad`), and :func:`seed_without_scratchpad` cuts one from a conversation seed.

Cost: each parser is one linear pass over the text it is given, or a few ``rfind`` from
its end, whatever the text holds. Every pattern is RE2 (:mod:`app.guard.linear_regex`),
never Python's backtracking ``re`` (which took 274 s on an 8 KB fence of spaces:
tests/test_regex_inventory.py keeps it out); the caller bounds the text
(:data:`app.guard.text_actions.SCAN_CHARS`).
"""

from __future__ import annotations

import ast
import collections
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.guard.linear_regex import LinearMatch, compile_linear

#: Complete blocks read from a ReAct scratchpad in one user turn.
SCRATCHPAD_BLOCKS = 2


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


# ---------------------------------------------------------------- smolagents

_CALLING_TOOLS = "Calling tools:\n"
_CLIENT_ID = compile_linear(r"'id': '[^'\\]*'")


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

# Every pattern here runs on agent-written text: RE2 (linear time whatever the text,
# app.guard.linear_regex), never Python's backtracking ``re``; tests/test_regex_inventory.py
# fails for a ``re`` pattern added to this module.
_ACTION = compile_linear(r"^[ \t]*Action[ \t]*\d*[ \t]*:[ \t]*", multiline=True)
_ACTION_INPUT = compile_linear(r"^[ \t]*Action[ \t]*\d*[ \t]*Input[ \t]*\d*[ \t]*:[ \t]*", multiline=True)
_BLOCK_END = compile_linear(r"^[ \t]*(?:Observation|Thought|Final Answer)[ \t]*\d*[ \t]*:", multiline=True)
_OBSERVATION = compile_linear(r"^[ \t]*Observation[ \t]*\d*[ \t]*:[ \t]*\n?", multiline=True)
_NEXT_STEP = compile_linear(r"^[ \t]*(?:Thought|Action|Final Answer)[ \t]*\d*[ \t]*:", multiline=True)
_FINAL = compile_linear(r"^[ \t]*Final Answer[ \t]*:", multiline=True)
_THOUGHT = compile_linear(r"^[ \t]*Thought[ \t]*\d*[ \t]*:", multiline=True)
#: ``name[input]`` (the ReAct paper's ``Search[x]``); ``\pL\pN_`` is Python's ``\w``.
_BRACKETED = compile_linear(r"(?s)\A([\pL\pN_.-]+)\[(.*)\]\z")
_NAME_KEYS = ("name", "action", "tool", "tool_name")
_ARGUMENT_KEYS = ("arguments", "action_input", "args", "parameters", "input")


def _unfenced(blob: str) -> str:
    """``blob`` without the fence around it (```` ```json ... ``` ````), stripped; ``blob``
    when it is not fenced. One pass over the info string, none over the body."""
    if len(blob) < 6 or not (blob.startswith("```") and blob.endswith("```")):
        return blob
    info = 3
    while info < len(blob) - 3 and (blob[info].isalnum() or blob[info] in "_-"):
        info += 1
    return blob[info:-3].strip()


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
    blob = _unfenced(body.strip())
    try:
        value = json.loads(blob)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        name = next((value[k] for k in _NAME_KEYS if isinstance(value.get(k), str)), "")
        given_arguments: Any = next((value[k] for k in _ARGUMENT_KEYS if k in value), {})
        return Found(name, given_arguments)
    return Found("", blob)


def _last_actions(text: str, n: int) -> tuple[list[LinearMatch], int]:
    """The last ``n`` ``Action:`` lines of ``text`` and how many there are (one linear pass,
    constant memory)."""
    last: collections.deque[LinearMatch] = collections.deque(maxlen=n)
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


def scratchpad(text: str) -> list[Found]:
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
